//! Which seccomp policy a run gets, by name (the filters are `plan::seccomp`'s).

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which policy a run gets (spec field `seccomp`, flag `--seccomp`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum PolicyName {
    /// Arbitrary programs: errno for calls that reach shared kernel state.
    #[default]
    Default,
    /// Allowlist for a judged single-process solution; anything else kills.
    Strict,
    /// Allowlist for compilers, linkers and build tools; anything else kills.
    Compile,
    /// Allowlist for a judged Python program (`strict` plus threads and
    /// CPython's ioctls); anything else kills.
    Python,
    /// Allowlist for a judged Java program on HotSpot (`strict` plus
    /// threads and the JVM's own needs); anything else kills.
    Jvm,
    /// Allowlist for a judged Go program (`strict` plus threads and the
    /// runtime's poller); anything else kills.
    Go,
    /// Allowlist for a judged bash script (processes, pipes, files);
    /// anything else kills.
    Bash,
    /// No filter.
    None,
    /// A policy file (TOML or JSON), see docs/seccomp.md.
    File(PathBuf),
}

impl std::str::FromStr for PolicyName {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        Ok(match s {
            "default" => PolicyName::Default,
            "strict" => PolicyName::Strict,
            "compile" => PolicyName::Compile,
            "python" => PolicyName::Python,
            "jvm" => PolicyName::Jvm,
            "go" => PolicyName::Go,
            "bash" => PolicyName::Bash,
            "none" => PolicyName::None,
            _ if s.contains('/') || s.ends_with(".toml") || s.ends_with(".json") => PolicyName::File(s.into()),
            _ => return Err(PolicyError::UnknownName(s.into())),
        })
    }
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyName::Default => f.write_str("default"),
            PolicyName::Strict => f.write_str("strict"),
            PolicyName::Compile => f.write_str("compile"),
            PolicyName::Python => f.write_str("python"),
            PolicyName::Jvm => f.write_str("jvm"),
            PolicyName::Go => f.write_str("go"),
            PolicyName::Bash => f.write_str("bash"),
            PolicyName::None => f.write_str("none"),
            PolicyName::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Serialize for PolicyName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PolicyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A policy that could not be loaded or compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown seccomp policy `{0}`: expected default, strict, compile, python, jvm, go, bash, none or a policy file path (containing `/`, or ending in .toml or .json)")]
    UnknownName(String),
    /// Anything else: the message names the file, the rule and what is wrong.
    #[error("{0}")]
    Invalid(String),
}
