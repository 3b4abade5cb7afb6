//! Seccomp: the run's policy (`default`, `strict`, `compile`, `none` or a
//! policy file), compiled once per supervisor with libseccomp into a
//! classic-BPF program, which the tracee installs last, right before execve.
//!
//! SKELETON (issue 5): the API below is what the rest of capsule uses; the
//! bodies are being written.

use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::sys::{self, Errno};

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
    #[error("unknown seccomp policy `{0}`: expected default, strict, compile, none or a policy file path (containing `/`, or ending in .toml or .json)")]
    UnknownName(String),
    /// Anything else: the message names the file, the rule and what is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// A compiled classic-BPF program.
#[derive(Clone, Default)]
pub struct Filter {
    pub(crate) program: Vec<libc::sock_filter>,
    /// Some action is `kill`, which the filter implements as
    /// SECCOMP_RET_USER_NOTIF: PID 1 reads the notification, records the
    /// call and kills the run. Installed with a listener.
    pub(crate) notify: bool,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions, notify: {})", self.program.len(), self.notify)
    }
}

/// Loads (for a file) and compiles a policy for x86_64.
pub fn compile(name: &PolicyName) -> Result<Filter, PolicyError> {
    match name {
        PolicyName::None | PolicyName::Default => Ok(Filter::default()),
        _ => Err(PolicyError::Invalid(format!("seccomp policy `{name}`: not implemented yet"))),
    }
}

/// The name of syscall `nr` of the audit architecture `arch`: `socket`, or
/// `i386:open` / `x32:read` for non-native ABIs, or `syscall 999` when
/// unknown.
pub fn syscall_name(arch: u32, nr: i32) -> String {
    let _ = arch;
    format!("syscall {nr}")
}

/// Installs `filter` on the calling thread (child side; `no_new_privs`
/// set). Returns the listener descriptor when the filter notifies, else -1.
pub(crate) fn install(filter: &[libc::sock_filter], notify: bool) -> Result<RawFd, Errno> {
    if filter.is_empty() {
        return Ok(-1);
    }
    sys::seccomp_install(filter, notify)
}
