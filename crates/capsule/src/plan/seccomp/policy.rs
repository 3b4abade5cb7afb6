//! The policy file format (docs/seccomp.md): a default action, an action
//! for the non-native ABIs and rules by syscall name with optional argument
//! conditions, as TOML or JSON.

use serde::{Deserialize, Deserializer};

use crate::sys::seccomp::{RET_ALLOW, RET_ERRNO, RET_LOG, RET_USER_NOTIF};

/// A policy document (docs/seccomp.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// What a call no rule matches gets.
    pub default_action: Action,
    /// What every call of the i386 and x32 ABIs gets (they have their own
    /// numbers, which the native rules do not match). Default: the default
    /// action, or `errno ENOSYS` when that lets calls run (`allow`, `log`).
    #[serde(default)]
    pub non_native_action: Option<Action>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// One rule: these syscalls, when all `args` conditions hold, get `action`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub syscall: OneOrMany,
    pub action: Action,
    #[serde(default)]
    pub args: Vec<ArgCond>,
    /// Why (free text, for the reader).
    #[serde(default)]
    pub why: Option<String>,
}

/// A syscall name or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn names(&self) -> &[String] {
        match self {
            OneOrMany::One(s) => std::slice::from_ref(s),
            OneOrMany::Many(v) => v,
        }
    }
}

/// What a matching call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The call runs.
    Allow,
    /// The call fails with this errno without running.
    Errno(u16),
    /// The run is killed and reported as `forbidden-syscall` (a user
    /// notification; see the documentation of [`super`]).
    Kill,
    /// The call runs and is logged by the kernel's audit log.
    Log,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Allow => f.write_str("allow"),
            Action::Kill => f.write_str("kill"),
            Action::Log => f.write_str("log"),
            Action::Errno(n) => match errno_name(*n) {
                Some(name) => write!(f, "errno {name}"),
                None => write!(f, "errno {n}"),
            },
        }
    }
}

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut words = s.split_whitespace();
        let first = words.next().unwrap_or("");
        let second = words.next();
        if words.next().is_some() {
            return Err(format!("unknown action `{s}`: {ACTIONS}"));
        }
        match (first, second) {
            ("allow", None) => Ok(Action::Allow),
            ("kill", None) => Ok(Action::Kill),
            ("log", None) => Ok(Action::Log),
            ("errno", Some(e)) => parse_errno(e).map(Action::Errno),
            ("errno", None) => Err(format!("action `{s}` lacks the errno: `errno EPERM` or `errno 1`")),
            _ => Err(format!("unknown action `{s}`: {ACTIONS}")),
        }
    }
}

const ACTIONS: &str = "expected allow, kill, log or errno N (N a name like EPERM or a number 0-4095)";

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Action {
    /// What the filter returns for it.
    pub(super) fn ret(self) -> u32 {
        match self {
            Action::Allow => RET_ALLOW,
            Action::Errno(n) => RET_ERRNO | u32::from(n),
            Action::Kill => RET_USER_NOTIF,
            Action::Log => RET_LOG,
        }
    }
}

/// The errno names a policy may use.
const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("ESRCH", libc::ESRCH),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("ENOEXEC", libc::ENOEXEC),
    ("EBADF", libc::EBADF),
    ("ECHILD", libc::ECHILD),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("EXDEV", libc::EXDEV),
    ("ENODEV", libc::ENODEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("ENFILE", libc::ENFILE),
    ("EMFILE", libc::EMFILE),
    ("ENOTTY", libc::ENOTTY),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("ESPIPE", libc::ESPIPE),
    ("EROFS", libc::EROFS),
    ("EMLINK", libc::EMLINK),
    ("EPIPE", libc::EPIPE),
    ("ERANGE", libc::ERANGE),
    ("ENAMETOOLONG", libc::ENAMETOOLONG),
    ("ENOSYS", libc::ENOSYS),
    ("ENOTEMPTY", libc::ENOTEMPTY),
    ("ELOOP", libc::ELOOP),
    ("ENOTSOCK", libc::ENOTSOCK),
    ("EPROTONOSUPPORT", libc::EPROTONOSUPPORT),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ENOTSUP", libc::ENOTSUP),
    ("EAFNOSUPPORT", libc::EAFNOSUPPORT),
    ("EADDRINUSE", libc::EADDRINUSE),
    ("ENETUNREACH", libc::ENETUNREACH),
    ("ECONNREFUSED", libc::ECONNREFUSED),
    ("ETIMEDOUT", libc::ETIMEDOUT),
];

fn errno_name(n: u16) -> Option<&'static str> {
    // ENOTSUP and EOPNOTSUPP are one number: name it EOPNOTSUPP.
    ERRNOS.iter().find(|(_, v)| *v == i32::from(n)).map(|(k, _)| *k)
}

fn parse_errno(s: &str) -> Result<u16, String> {
    if let Some((_, v)) = ERRNOS.iter().find(|(k, _)| *k == s) {
        return Ok(*v as u16);
    }
    match s.parse::<u16>() {
        // The kernel caps a filter's errno at MAX_ERRNO.
        Ok(n) if n <= 4095 => Ok(n),
        Ok(_) => Err(format!("errno {s} is out of range (0-4095)")),
        Err(_) => {
            let names: Vec<&str> = ERRNOS.iter().map(|(k, _)| *k).collect();
            Err(format!("unknown errno `{s}`: a number 0-4095 or one of {}", names.join(", ")))
        }
    }
}

/// A condition on one argument.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgCond {
    /// 0-5.
    pub index: u32,
    pub op: Op,
    /// For every op but `not_in`.
    #[serde(default)]
    pub value: Option<Value>,
    /// For `masked_eq`: (arg & mask) == value.
    #[serde(default)]
    pub mask: Option<Value>,
    /// For `not_in`: the low 32 bits of the argument are none of these.
    #[serde(default)]
    pub values: Option<Vec<Value>>,
}

/// Comparison operators (on the 64-bit argument, except `not_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    MaskedEq,
    /// The low 32 bits are none of `values` (for arguments the kernel reads
    /// as `unsigned int`).
    NotIn,
}

/// An argument value: a number (negative ones as their 64-bit two's
/// complement) or a string `"0x5412"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value(pub u64);

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer or a string like \"0x5412\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
                Ok(Value(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
                Ok(Value(v as u64))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
                let t = s.trim();
                let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    u64::from_str_radix(&h.replace('_', ""), 16)
                } else {
                    t.replace('_', "").parse::<u64>()
                };
                r.map(Value).map_err(|_| E::custom(format!("`{s}` is not a number (decimal or 0x hex)")))
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) fn parse_toml(text: &str) -> Result<Policy, String> {
    crate::proto::spec::parse_toml(text, "the document").map_err(|(where_, message)| format!("{where_}: {message}"))
}

pub(super) fn parse_json(text: &str) -> Result<Policy, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("{inner}")
        } else {
            format!("{path}: {inner}")
        }
    })
}
