//! Seccomp: the run's policy (`default`, `strict`, `compile`, the language
//! allowlists `python`, `jvm`, `go`, `bash`, `none` or a policy file), compiled once per supervisor with libseccomp into a
//! classic-BPF program, which the tracee installs last, right before execve.
//!
//! A policy is a TOML (or JSON) document (docs/seccomp.md): a default
//! action, an action for the non-native ABIs (i386, x32) and rules by
//! syscall name with optional argument conditions. The built-in policies are
//! files of that format too (`crates/capsule/policies/*.toml`), embedded and
//! parsed by the same code as a user's file.
//!
//! The action `kill` compiles to `SECCOMP_RET_USER_NOTIF`, not to
//! `SECCOMP_RET_KILL_PROCESS`: the calling thread then stays blocked inside
//! the call, which never runs, while PID 1 reads the notification (the exact
//! number, ABI and arguments), records it and kills the run. That report is
//! exact and race-free; SIGSYS from `SECCOMP_RET_KILL_*` names no call, and a
//! `SECCOMP_RET_TRAP` handler is the program's to replace. Because a
//! program's own, newer filter with a listener would see those notifications
//! first (and could answer "continue"), every policy that uses `kill` also
//! gets a rule refusing `seccomp(SECCOMP_SET_MODE_FILTER,
//! SECCOMP_FILTER_FLAG_NEW_LISTENER, ...)` with EPERM.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
use serde::{Deserialize, Deserializer};

pub use crate::proto::policy::{PolicyError, PolicyName};
use crate::sys;
use crate::sys::seccomp::*;

/// A compiled classic-BPF program.
#[derive(Clone, Default)]
pub struct Filter {
    pub(crate) program: Vec<libc::sock_filter>,
    /// Some action is `kill`, which the filter implements as
    /// SECCOMP_RET_USER_NOTIF: PID 1 reads the notification, records the
    /// call and kills the run. Installed with a listener.
    pub(crate) notify: bool,
    /// With the network log ([`with_net_log`]): where its epilogue starts
    /// (the policy's own program comes first); 0 without.
    pub(crate) net_log_from: u32,
}

impl Filter {
    /// The BPF instructions (empty: no filter).
    pub fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }

    /// Whether the filter uses user notifications (the policy's `kill`, the
    /// network log).
    pub fn notify(&self) -> bool {
        self.notify
    }

    /// Whether the filter has the network log ([`with_net_log`]).
    pub fn net_log(&self) -> bool {
        self.net_log_from != 0
    }
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions, notify: {}, net_log: {})", self.program.len(), self.notify, self.net_log())
    }
}

/// The built-in policies, as shipped (they double as examples of the file
/// format).
pub const DEFAULT_POLICY: &str = include_str!("../../policies/default.toml");
pub const STRICT_POLICY: &str = include_str!("../../policies/strict.toml");
pub const COMPILE_POLICY: &str = include_str!("../../policies/compile.toml");
/// The language-specific allowlists of the run presets (docs/presets.md).
pub const PYTHON_POLICY: &str = include_str!("../../policies/python.toml");
pub const JVM_POLICY: &str = include_str!("../../policies/jvm.toml");
pub const GO_POLICY: &str = include_str!("../../policies/go.toml");
pub const BASH_POLICY: &str = include_str!("../../policies/bash.toml");

/// The built-in policies by name, with their text.
pub const BUILTIN_POLICIES: [(&str, &str); 7] = [
    ("default", DEFAULT_POLICY),
    ("strict", STRICT_POLICY),
    ("compile", COMPILE_POLICY),
    ("python", PYTHON_POLICY),
    ("jvm", JVM_POLICY),
    ("go", GO_POLICY),
    ("bash", BASH_POLICY),
];

/// Loads (for a file) and compiles a policy for x86_64.
pub fn compile(name: &PolicyName) -> Result<Filter, PolicyError> {
    let (origin, policy) = match name {
        PolicyName::None => return Ok(Filter::default()),
        PolicyName::Default => ("built-in seccomp policy `default`".to_string(), parse_toml(DEFAULT_POLICY)),
        PolicyName::Strict => ("built-in seccomp policy `strict`".to_string(), parse_toml(STRICT_POLICY)),
        PolicyName::Compile => ("built-in seccomp policy `compile`".to_string(), parse_toml(COMPILE_POLICY)),
        PolicyName::Python => ("built-in seccomp policy `python`".to_string(), parse_toml(PYTHON_POLICY)),
        PolicyName::Jvm => ("built-in seccomp policy `jvm`".to_string(), parse_toml(JVM_POLICY)),
        PolicyName::Go => ("built-in seccomp policy `go`".to_string(), parse_toml(GO_POLICY)),
        PolicyName::Bash => ("built-in seccomp policy `bash`".to_string(), parse_toml(BASH_POLICY)),
        PolicyName::File(path) => {
            let origin = format!("seccomp policy file {}", path.display());
            let text = sys::read_regular_file(path).map_err(|e| PolicyError::Invalid(format!("{origin}: {e}")))?;
            let parsed = if is_json(path) { parse_json(&text) } else { parse_toml(&text) };
            (origin, parsed)
        }
    };
    let policy = policy.map_err(|e| PolicyError::Invalid(format!("{origin}: {e}")))?;
    compile_policy(&policy).map_err(|e| PolicyError::Invalid(format!("{origin}: {e}")))
}

/// Compiles a policy given as text (`json`: JSON, else TOML); `origin`
/// names it in errors.
pub fn compile_text(origin: &str, text: &str, json: bool) -> Result<Filter, PolicyError> {
    let policy = if json { parse_json(text) } else { parse_toml(text) };
    let policy = policy.map_err(|e| PolicyError::Invalid(format!("{origin}: {e}")))?;
    compile_policy(&policy).map_err(|e| PolicyError::Invalid(format!("{origin}: {e}")))
}

fn is_json(path: &Path) -> bool {
    path.extension().map(|e| e.eq_ignore_ascii_case("json")).unwrap_or(false)
}

/// The name of syscall `nr` of the audit architecture `arch`: `socket`, or
/// `i386:open` / `x32:read` for non-native ABIs, or `syscall 999` when
/// unknown.
pub fn syscall_name(arch: u32, nr: i32) -> String {
    const X32_SYSCALL_BIT: i32 = 0x4000_0000;
    let (abi, prefix) = match arch {
        AUDIT_ARCH_X86_64 if nr >= X32_SYSCALL_BIT => (ScmpArch::X32, "x32:"),
        AUDIT_ARCH_X86_64 => (ScmpArch::X8664, ""),
        AUDIT_ARCH_I386 => (ScmpArch::X86, "i386:"),
        _ => return format!("syscall {nr} (audit arch {arch:#x})"),
    };
    match ScmpSyscall::from(nr).get_name_by_arch(abi) {
        Ok(name) if !name.is_empty() => format!("{prefix}{name}"),
        _ => format!("{prefix}syscall {nr}"),
    }
}

// ---------------------------------------------------------------- the file format

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
    fn names(&self) -> &[String] {
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
    /// notification; see the module documentation).
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
    fn scmp(self) -> ScmpAction {
        match self {
            Action::Allow => ScmpAction::Allow,
            Action::Errno(n) => ScmpAction::Errno(n.into()),
            Action::Kill => ScmpAction::Notify,
            Action::Log => ScmpAction::Log,
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
    /// as `unsigned int`); compiled into several masked_eq rules.
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

fn parse_toml(text: &str) -> Result<Policy, String> {
    crate::proto::spec::parse_toml(text, "the document").map_err(|(where_, message)| format!("{where_}: {message}"))
}

fn parse_json(text: &str) -> Result<Policy, String> {
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

// ---------------------------------------------------------------- compiling

/// One rule after validation and expansion: single syscall, conditions
/// ready for libseccomp.
#[derive(Debug, Clone)]
struct Flat {
    /// Which rule of the file (`rule[3]`), or `automatic NEW_LISTENER rule`.
    source: String,
    /// The rule came from the policy (not added by capsule).
    user: bool,
    name: String,
    nr: i32,
    action: Action,
    conds: Vec<Cond>,
}

/// One comparison for libseccomp: (argument index, op, value).
type Cond = (u32, ScmpCompareOp, u64);

const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;

/// Validates and compiles a parsed policy.
pub fn compile_policy(p: &Policy) -> Result<Filter, String> {
    let non_native = p.non_native_action.unwrap_or(match p.default_action {
        Action::Allow | Action::Log => Action::Errno(libc::ENOSYS as u16),
        a => a,
    });
    // Names first: report every unknown one at once.
    let mut unknown = Vec::new();
    let mut resolved: Vec<Vec<(String, i32)>> = Vec::new();
    for (i, r) in p.rules.iter().enumerate() {
        let mut v = Vec::new();
        if r.syscall.names().is_empty() {
            return Err(format!("rule[{i}].syscall: the list is empty"));
        }
        for name in r.syscall.names() {
            match native_nr(name) {
                Some(nr) => v.push((name.clone(), nr)),
                None => unknown.push(format!("`{name}` (rule[{i}])")),
            }
        }
        resolved.push(v);
    }
    if !unknown.is_empty() {
        return Err(format!("unknown x86_64 syscall names: {}", unknown.join(", ")));
    }
    let mut flat = Vec::new();
    for (i, (r, names)) in p.rules.iter().zip(&resolved).enumerate() {
        let expanded = expand_conds(&r.args).map_err(|e| format!("rule[{i}].{e}"))?;
        for (name, nr) in names {
            for conds in &expanded {
                flat.push(Flat {
                    source: format!("rule[{i}]"),
                    user: true,
                    name: name.clone(),
                    nr: *nr,
                    action: r.action,
                    conds: conds.clone(),
                });
            }
        }
    }
    let notify =
        p.default_action == Action::Kill || non_native == Action::Kill || flat.iter().any(|f| f.action == Action::Kill);
    if notify {
        flat = guard_new_listener(flat)?;
    }
    check_conflicts(&flat, p.default_action)?;

    let ctx_err = |what: &str, e: libseccomp::error::SeccompError| format!("libseccomp: {what}: {e}");
    let mut ctx = ScmpFilterContext::new(p.default_action.scmp()).map_err(|e| ctx_err("creating the filter", e))?;
    ctx.set_act_badarch(non_native.scmp()).map_err(|e| ctx_err("setting the non-native action", e))?;
    // A binary tree over the syscall numbers instead of a chain: the
    // kernel emulates the filter once per syscall number and ABI when it
    // is installed (to fill its action cache), and converts and JITs every
    // instruction, for every run.
    ctx.set_ctl_optimize(2).map_err(|e| ctx_err("asking for the binary-tree layout", e))?;
    for f in &flat {
        if f.action == p.default_action {
            // Only automatic rules get here (see check_conflicts): the
            // default action covers them.
            continue;
        }
        let cmps: Vec<ScmpArgCompare> = f.conds.iter().map(|&(i, op, v)| ScmpArgCompare::new(i, op, v)).collect();
        ctx.add_rule_conditional_exact(f.action.scmp(), ScmpSyscall::from(f.nr), &cmps)
            .map_err(|e| format!("{} ({} `{}`): libseccomp refuses the rule: {e}", f.source, f.name, f.action))?;
    }
    let program = export(&ctx)?;
    Ok(Filter { program, notify, net_log_from: 0 })
}

/// The x86_64 number of a syscall name (pseudo-syscalls of other ABIs are
/// unknown).
fn native_nr(name: &str) -> Option<i32> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let s = ScmpSyscall::from_name_by_arch(name, ScmpArch::X8664).ok()?;
    let nr = i32::from(s);
    (nr >= 0).then_some(nr)
}

/// The conditions of a rule, as one or more conjunctions for libseccomp
/// (a `not_in` becomes several).
fn expand_conds(args: &[ArgCond]) -> Result<Vec<Vec<Cond>>, String> {
    let mut base = Vec::new();
    let mut not_in: Option<(u32, Vec<u32>)> = None;
    let mut seen = [false; 6];
    for (j, a) in args.iter().enumerate() {
        let at = |m: String| format!("args[{j}]: {m}");
        if a.index > 5 {
            return Err(at(format!("index {} is out of range: a syscall has arguments 0-5", a.index)));
        }
        if std::mem::replace(&mut seen[a.index as usize], true) {
            return Err(at(format!(
                "a second condition on argument {}: a rule compares each argument once (write another rule)",
                a.index
            )));
        }
        match a.op {
            Op::NotIn => {
                if a.value.is_some() || a.mask.is_some() {
                    return Err(at("`not_in` takes `values`, not `value` or `mask`".into()));
                }
                let Some(vals) = &a.values else { return Err(at("`not_in` needs `values = [...]`".into())) };
                if vals.is_empty() {
                    return Err(at("`values` is empty".into()));
                }
                let mut v32 = Vec::new();
                for v in vals {
                    v32.push(u32::try_from(v.0).map_err(|_| {
                        at(format!("`not_in` compares the low 32 bits: {:#x} does not fit in 32 bits", v.0))
                    })?);
                }
                if not_in.is_some() {
                    return Err(at("only one `not_in` per rule".into()));
                }
                not_in = Some((a.index, v32));
            }
            op => {
                if a.values.is_some() {
                    return Err(at("`values` is only for `not_in`".into()));
                }
                let Some(value) = a.value else { return Err(at("the condition needs a `value`".into())) };
                let sop = match op {
                    Op::Eq => ScmpCompareOp::Equal,
                    Op::Ne => ScmpCompareOp::NotEqual,
                    Op::Lt => ScmpCompareOp::Less,
                    Op::Le => ScmpCompareOp::LessOrEqual,
                    Op::Gt => ScmpCompareOp::Greater,
                    Op::Ge => ScmpCompareOp::GreaterEqual,
                    Op::MaskedEq => {
                        let Some(mask) = a.mask else {
                            return Err(at("`masked_eq` needs a `mask`".into()));
                        };
                        if value.0 & !mask.0 != 0 {
                            return Err(at(format!(
                                "value {:#x} has bits outside mask {:#x}: the condition never holds",
                                value.0, mask.0
                            )));
                        }
                        ScmpCompareOp::MaskedEqual(mask.0)
                    }
                    Op::NotIn => unreachable!("handled above"),
                };
                if a.mask.is_some() && op != Op::MaskedEq {
                    return Err(at("`mask` is only for `masked_eq`".into()));
                }
                base.push((a.index, sop, value.0));
            }
        }
    }
    let Some((index, values)) = not_in else { return Ok(vec![base]) };
    let mut cubes = Vec::new();
    not_in_cover(&values, 0, 0, &mut cubes);
    Ok(cubes
        .into_iter()
        .map(|(mask, value)| {
            let mut c = base.clone();
            c.push((index, ScmpCompareOp::MaskedEqual(u64::from(mask)), u64::from(value)));
            c
        })
        .collect())
}

/// Covers the 32-bit values outside `values` with masked comparisons
/// `(x & mask) == value`, starting from the cube where the bits of
/// `fixed_mask` equal `fixed_value`: disjoint cubes whose union is exactly
/// the complement (libseccomp allows one comparison per argument, so a
/// "none of these" becomes several rules).
fn not_in_cover(values: &[u32], fixed_mask: u32, fixed_value: u32, out: &mut Vec<(u32, u32)>) {
    let inside: Vec<u32> = values.iter().copied().filter(|v| v & fixed_mask == fixed_value).collect();
    if inside.is_empty() {
        out.push((fixed_mask, fixed_value));
        return;
    }
    if fixed_mask == u32::MAX {
        return;
    }
    // A free bit on which every value inside agrees: its other side is free
    // of values, one cube; else split on the lowest free bit.
    let free = !fixed_mask;
    let agree = (0..32)
        .map(|b| 1u32 << b)
        .find(|&bit| free & bit != 0 && (inside.iter().all(|v| v & bit != 0) || inside.iter().all(|v| v & bit == 0)));
    match agree {
        Some(bit) => {
            let side = inside[0] & bit;
            out.push((fixed_mask | bit, fixed_value | (side ^ bit)));
            not_in_cover(values, fixed_mask | bit, fixed_value | side, out);
        }
        None => {
            let bit = 1u32 << free.trailing_zeros();
            not_in_cover(values, fixed_mask | bit, fixed_value, out);
            not_in_cover(values, fixed_mask | bit, fixed_value | bit, out);
        }
    }
}

/// With user notifications in the filter, `seccomp(SECCOMP_SET_MODE_FILTER,
/// flags with SECCOMP_FILTER_FLAG_NEW_LISTENER)` must fail with EPERM: a
/// newer filter's listener is asked first and could let our `kill`ed calls
/// through. The policy's own rules for `seccomp` are narrowed to the other
/// calls (split into disjoint rules: libseccomp lets an unconditional rule
/// override conditional ones). `op` and `flags` are `unsigned int` in the
/// kernel: only their low 32 bits count.
fn guard_new_listener(flat: Vec<Flat>) -> Result<Vec<Flat>, String> {
    let nr = native_nr("seccomp").ok_or("libseccomp does not know `seccomp`")?;
    let op_is_filter = (0u32, ScmpCompareOp::MaskedEqual(0xffff_ffff), SECCOMP_SET_MODE_FILTER);
    let with_listener =
        (1u32, ScmpCompareOp::MaskedEqual(SECCOMP_FILTER_FLAG_NEW_LISTENER), SECCOMP_FILTER_FLAG_NEW_LISTENER);
    let no_listener = (1u32, ScmpCompareOp::MaskedEqual(SECCOMP_FILTER_FLAG_NEW_LISTENER), 0);
    let eperm = Action::Errno(libc::EPERM as u16);
    // The policy refuses every `seccomp` call with EPERM already.
    if flat.iter().any(|f| f.nr == nr && f.conds.is_empty() && f.action == eperm) {
        return Ok(flat);
    }
    let mut out = Vec::new();
    for f in flat {
        if f.nr != nr || f.action == eperm {
            out.push(f);
            continue;
        }
        if f.conds.iter().any(|c| c.0 <= 1) {
            return Err(format!(
                "{}: conditions on arguments 0 and 1 of `seccomp` cannot be combined with the automatic rule \
                 refusing SECCOMP_FILTER_FLAG_NEW_LISTENER (the policy uses `kill`); condition on the other \
                 arguments only, or use `errno EPERM`",
                f.source
            ));
        }
        // Any op without the listener flag...
        let mut a = f.clone();
        a.conds.push(no_listener);
        out.push(a);
        // ...and every op but SECCOMP_SET_MODE_FILTER with it.
        let mut cubes = Vec::new();
        not_in_cover(&[SECCOMP_SET_MODE_FILTER as u32], 0, 0, &mut cubes);
        for (mask, value) in cubes {
            let mut b = f.clone();
            b.conds.push((0, ScmpCompareOp::MaskedEqual(u64::from(mask)), u64::from(value)));
            b.conds.push(with_listener);
            out.push(b);
        }
    }
    out.push(Flat {
        source: "the automatic NEW_LISTENER rule".into(),
        user: false,
        name: "seccomp".into(),
        nr,
        action: eperm,
        conds: vec![op_is_filter, with_listener],
    });
    Ok(out)
}

/// Rules libseccomp would silently drop or refuse: a policy rule with the
/// default action; the same syscall unconditionally twice; an unconditional
/// rule next to conditional ones (the unconditional one would win).
fn check_conflicts(flat: &[Flat], default: Action) -> Result<(), String> {
    let mut by_nr: BTreeMap<i32, Vec<&Flat>> = BTreeMap::new();
    for f in flat {
        if f.user && f.action == default {
            return Err(format!(
                "{} (`{}`): the action `{}` is the default action, so the rule has no effect; remove it",
                f.source, f.name, f.action
            ));
        }
        by_nr.entry(f.nr).or_default().push(f);
    }
    for rules in by_nr.values() {
        let uncond: Vec<&&Flat> = rules.iter().filter(|f| f.conds.is_empty()).collect();
        if let Some(first) = uncond.first() {
            if let Some(other) = rules.iter().find(|f| !std::ptr::eq(**f, **first)) {
                let what = if other.conds.is_empty() && other.action == first.action {
                    "duplicate rule".to_string()
                } else if other.conds.is_empty() {
                    format!("conflicting rules (`{}` and `{}`)", first.action, other.action)
                } else {
                    format!(
                        "conflicting rules: {} applies `{}` to every call, so the conditions of {} would be ignored",
                        first.source, first.action, other.source
                    )
                };
                return Err(format!("`{}` in {} and {}: {what}", first.name, first.source, other.source));
            }
        }
    }
    Ok(())
}

/// libseccomp's BPF, read back from a memfd. (Not a pipe drained by a
/// thread: the supervisor has a pending time namespace for its children,
/// and Linux 6.1 refuses to create threads then.)
fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, String> {
    use std::io::{Seek, SeekFrom};
    let fd = sys::memfd(c"capsule-bpf")
        .map_err(|e| format!("memfd_create for the BPF: {}", std::io::Error::from_raw_os_error(e)))?;
    ctx.export_bpf(&fd).map_err(|e| format!("libseccomp: exporting the BPF: {e}"))?;
    let mut f = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.read_to_end(&mut bytes))
        .map_err(|e| format!("reading the BPF back: {e}"))?;
    if bytes.is_empty() || bytes.len() % 8 != 0 {
        return Err(format!("libseccomp exported {} bytes of BPF, not whole instructions", bytes.len()));
    }
    let program: Vec<libc::sock_filter> = bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    // BPF_MAXINSNS.
    if program.len() > 4096 {
        return Err(format!("the filter has {} instructions; the kernel takes at most 4096", program.len()));
    }
    Ok(program)
}

// ---------------------------------------------------------------- the network log

/// The system calls the tracee makes between its go message and the
/// program's execve (stdio, Landlock's stdio rules, chdir, limits, the
/// CPU baseline, the exec itself, and exit on a failure), x86_64 numbers.
const TRACEE_EPILOGUE: &[i32] = &[
    libc::SYS_recvmsg as i32,
    libc::SYS_dup2 as i32,
    libc::SYS_dup3 as i32,
    libc::SYS_close as i32,
    libc::SYS_fcntl as i32,
    libc::SYS_fstat as i32,
    libc::SYS_newfstatat as i32,
    libc::SYS_statx as i32,
    libc::SYS_landlock_add_rule as i32,
    libc::SYS_landlock_restrict_self as i32,
    libc::SYS_chdir as i32,
    libc::SYS_prlimit64 as i32,
    libc::SYS_setrlimit as i32,
    libc::SYS_close_range as i32,
    libc::SYS_sched_yield as i32,
    libc::SYS_read as i32,
    libc::SYS_pread64 as i32,
    libc::SYS_lseek as i32,
    libc::SYS_getrusage as i32,
    libc::SYS_clock_gettime as i32,
    libc::SYS_execve as i32,
    libc::SYS_exit as i32,
    libc::SYS_exit_group as i32,
];

/// Whether a filter allows every call the tracee makes after its go
/// message, whatever their arguments (and `ioctl(0, TIOCSCTTY, 0)`, for
/// `controlling_tty`): then a PID 1 prepared ahead installs it *before*
/// waiting for the go message, off the request's path (installing costs
/// tens of microseconds: conversion, JIT, the action cache). Exact: a call
/// whose result depends on its arguments counts as not allowed.
pub(crate) fn allows_tracee_epilogue(prog: &[libc::sock_filter]) -> bool {
    if prog.is_empty() {
        return true;
    }
    let allowed = |nr: i32, args: &[u64; 6], any_args: bool| {
        let data = seccomp_data(nr, AUDIT_ARCH_X86_64, 0, args);
        matches!(run_bpf_probe(prog, &data), Some((RET_ALLOW, _, read_args)) if !(any_args && read_args))
    };
    TRACEE_EPILOGUE.iter().all(|&nr| allowed(nr, &[0; 6], true))
        && allowed(libc::SYS_ioctl as i32, &[0, libc::TIOCSCTTY, 0, 0, 0, 0], false)
}

/// `filter` (a compiled policy; empty for `none`) with the network log
/// (docs/network.md): every `ret` of the policy's program whose action is
/// `allow` or `log` becomes a jump to an epilogue that sends `connect`,
/// `sendto` with an address (argument 4 not NULL), `sendmsg` and
/// `sendmmsg` (native, x32 and i386, `socketcall` included) to the
/// listener, SECCOMP_RET_USER_NOTIF, and returns the policy's action for
/// every other call. Whatever else the policy does with those calls (an
/// errno, its `kill`) stays: the policy wins. A jump replaces a `ret` one
/// for one, so the policy's own jumps keep their targets.
pub fn with_net_log(filter: &Filter) -> Result<Filter, PolicyError> {
    let (program, n) = extend_passes(filter, "the network log", net_log_epilogue)?;
    Ok(Filter { program, notify: true, net_log_from: n as u32 })
}

/// `filter`'s program (empty: `allow` everything) with every `ret` of an
/// `allow` or `log` action replaced by a jump to `epilogue(action)`,
/// appended once per such action; and where the epilogues start.
fn extend_passes(
    filter: &Filter,
    what: &str,
    epilogue: impl Fn(u32) -> Result<Vec<libc::sock_filter>, PolicyError>,
) -> Result<(Vec<libc::sock_filter>, usize), PolicyError> {
    let ret = |k: u32| libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k };
    let mut program = if filter.program.is_empty() { vec![ret(RET_ALLOW)] } else { filter.program.clone() };
    let n = program.len();
    let mut passes: Vec<u32> = Vec::new();
    for i in &program {
        if i.code == BPF_RET_A {
            return Err(PolicyError::Invalid(format!(
                "{what} cannot extend a filter whose action is computed (BPF ret A)"
            )));
        }
        let action = i.k & RET_ACTION_FULL;
        if i.code == BPF_RET_K && (action == RET_ALLOW || action == RET_LOG) && !passes.contains(&i.k) {
            passes.push(i.k);
        }
    }
    let mut starts = Vec::new();
    for &k in &passes {
        starts.push((k, program.len()));
        program.extend(epilogue(k)?);
    }
    for (at, i) in program.iter_mut().enumerate().take(n) {
        if i.code != BPF_RET_K {
            continue;
        }
        if let Some(&(_, start)) = starts.iter().find(|(k, _)| *k == i.k) {
            *i = libc::sock_filter { code: BPF_JA, jt: 0, jf: 0, k: (start - at - 1) as u32 };
        }
    }
    // BPF_MAXINSNS.
    if program.len() > 4096 {
        return Err(PolicyError::Invalid(format!(
            "with {what} the filter has {} instructions; the kernel takes at most 4096",
            program.len()
        )));
    }
    Ok((program, n))
}

/// The epilogue of [`with_net_log`] for a policy's action `pass` (`allow`
/// or `log`).
fn net_log_epilogue(pass: u32) -> Result<Vec<libc::sock_filter>, PolicyError> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let code = [
        Ld(4),
        Jeq(AUDIT_ARCH_X86_64, "native", NEXT),
        Jeq(AUDIT_ARCH_I386, "i386", "pass"),
        Label("native"),
        Ld(0),
        Jeq(NR_CONNECT, "notify", NEXT),
        Jeq(NR_SENDMSG, "notify", NEXT),
        Jeq(NR_SENDMMSG, "notify", NEXT),
        Jeq(X32 | NR_CONNECT, "notify", NEXT),
        Jeq(NR_X32_SENDMSG, "notify", NEXT),
        Jeq(NR_X32_SENDMMSG, "notify", NEXT),
        Jeq(NR_SENDTO, "sendto", NEXT),
        Jeq(X32 | NR_SENDTO, "sendto", "pass"),
        Label("i386"),
        Ld(0),
        Jeq(NR_I386_CONNECT, "notify", NEXT),
        Jeq(NR_I386_SENDMSG, "notify", NEXT),
        Jeq(NR_I386_SENDMMSG, "notify", NEXT),
        Jeq(NR_I386_SENDTO, "sendto", NEXT),
        Jeq(NR_I386_SOCKETCALL, NEXT, "pass"),
        // socketcall(call, args): which call is in argument 0; its own
        // arguments are in memory, out of the filter's sight.
        Ld(args_lo(0)),
        Jeq(SYS_CONNECT as u32, "notify", NEXT),
        Jeq(SYS_SENDTO as u32, "notify", NEXT),
        Jeq(SYS_SENDMSG as u32, "notify", NEXT),
        Jeq(SYS_SENDMMSG as u32, "notify", "pass"),
        // sendto(fd, buf, len, flags, addr, addrlen): no address, a
        // connected socket's traffic, needs no notification. (i386's upper
        // half may hold garbage from a 64-bit caller: PID 1 ignores it.)
        Label("sendto"),
        Ld(args_lo(4)),
        Jeq(0, NEXT, "notify"),
        Ld(args_lo(4) + 4),
        Jeq(0, "pass", "notify"),
        Label("notify"),
        Ret(RET_USER_NOTIF),
        Label("pass"),
        Ret(pass),
    ];
    assemble(&code).map_err(PolicyError::Invalid)
}

// ---------------------------------------------------------------- the run's guards

/// What a run adds to its policy's filter for the limits it asked for
/// (docs/seccomp.md, "The run's guards"): calls that would get around them
/// fail, wherever the policy would let them run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guards {
    /// A TCP port rule is set: MPTCP and SMC sockets reach TCP services,
    /// and Landlock's port rules cover IPPROTO_TCP only.
    pub ports: bool,
    /// The run has a network of its own and a policy: AF_VSOCK is not
    /// namespaced (host and hypervisor ports).
    pub vsock: bool,
    /// An output limit is set: RLIMIT_FSIZE does not cover blocks
    /// allocated beyond the size (`fallocate` keeping it).
    pub keep_size: bool,
}

impl Guards {
    /// The guards of a run: port rules and the output limit under every
    /// policy (`none` too: the user asked for them), AF_VSOCK under every
    /// policy but `none`, unless the run shares the host's network.
    pub fn of(spec: &crate::proto::spec::RunSpec) -> Guards {
        Guards {
            ports: spec.tcp_connect.is_some() || spec.tcp_bind.is_some(),
            vsock: !spec.share_net && spec.seccomp != PolicyName::None,
            keep_size: spec.limits.output_limit.is_some(),
        }
    }

    pub fn any(self) -> bool {
        self.ports || self.vsock || self.keep_size
    }
}

const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;
const AF_VSOCK: u32 = 40;
const AF_SMC: u32 = 43;
/// SMC over an AF_INET socket (Linux 6.11).
const IPPROTO_SMC: u32 = 256;
const IPPROTO_MPTCP: u32 = 262;
const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
const FALLOC_FL_INSERT_RANGE: u32 = 0x20;
/// `FS_IOC_RESVSP` and `FS_IOC_RESVSP64`: `fallocate(FALLOC_FL_KEEP_SIZE)`
/// by ioctl on any filesystem, native and i386 (`_32`: a 44-byte struct).
const FS_IOC_RESVSP: [u32; 4] = [0x4030_5828, 0x4030_582a, 0x402c_5828, 0x402c_582a];
const NR_SOCKET: u32 = 41;
const NR_IOCTL: u32 = 16;
const NR_X32_IOCTL: u32 = X32 | 514;
const NR_FALLOCATE: u32 = 285;
/// io_uring_setup, io_uring_enter, io_uring_register: the same numbers in
/// every ABI.
const NR_IO_URING: [u32; 3] = [425, 426, 427];
const NR_I386_IOCTL: u32 = 54;
const NR_I386_SOCKET: u32 = 359;
const NR_I386_FALLOCATE: u32 = 324;
const SYS_SOCKET: u32 = 1;

/// `filter` (a compiled policy; empty for `none`) with the run's guards:
/// every `ret` of the policy's program whose action is `allow` or `log`
/// becomes a jump to an epilogue that refuses what the guards name and
/// returns the policy's action for the rest (as [`with_net_log`]: the
/// policy's errno and `kill` stay). Apply before the network log. With no
/// guard, `filter` itself.
pub fn with_guards(filter: &Filter, guards: Guards) -> Result<Filter, PolicyError> {
    if !guards.any() {
        return Ok(filter.clone());
    }
    let (program, _) = extend_passes(filter, "the run's guards", |k| guards_epilogue(k, guards))?;
    Ok(Filter { program, notify: filter.notify, net_log_from: filter.net_log_from })
}

/// The epilogue of [`with_guards`] for a policy's action `pass`. Most
/// calls pass it after a few comparisons of their number alone (every
/// syscall goes through it when the kernel fills its action cache, at each
/// install); only `socket`, `fallocate`, `ioctl` and i386 `socketcall`
/// have their arguments read, so every other call stays cacheable.
fn guards_epilogue(pass: u32, g: Guards) -> Result<Vec<libc::sock_filter>, PolicyError> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let errno = |e: i32| 0x0005_0000 | e as u32;
    let (sockets, keep) = (g.ports || g.vsock, g.keep_size);
    let mut c = Vec::new();
    // The number first: the guarded ones of every ABI, split by ranges;
    // each goes on to check its ABI.
    c.extend([Ld(0), Jge(NR_FALLOCATE, "high", NEXT), Jge(NR_I386_IOCTL, "low2", NEXT)]);
    if keep {
        c.push(Jeq(NR_IOCTL, "native_ioctl", NEXT));
    }
    if sockets {
        c.push(Jeq(NR_SOCKET, "native_socket", NEXT));
    }
    c.extend([Ret(pass), Label("low2")]);
    if keep {
        c.push(Jeq(NR_I386_IOCTL, "i386_ioctl", NEXT));
    }
    if sockets {
        c.push(Jeq(NR_I386_SOCKETCALL, "i386_socketcall", NEXT));
    }
    c.extend([Ret(pass), Label("high"), Jge(NR_IO_URING[0], "higher", NEXT)]);
    if keep {
        c.extend([Jeq(NR_FALLOCATE, "native_fallocate", NEXT), Jeq(NR_I386_FALLOCATE, "i386_fallocate", NEXT)]);
    }
    if sockets {
        c.push(Jeq(NR_I386_SOCKET, "i386_socket", NEXT));
    }
    // io_uring: the same numbers in every ABI.
    c.extend([Ret(pass), Label("higher"), Jge(X32, "x32", NEXT), Jgt(NR_IO_URING[2], "pass", "enosys"), Label("x32")]);
    if keep {
        c.extend([Jeq(NR_X32_IOCTL, "native_ioctl", NEXT), Jeq(X32 | NR_FALLOCATE, "native_fallocate", NEXT)]);
    }
    if sockets {
        c.push(Jeq(X32 | NR_SOCKET, "native_socket", NEXT));
    }
    c.extend([Jge(X32 | NR_IO_URING[0], NEXT, "pass"), Jgt(X32 | NR_IO_URING[2], "pass", "enosys")]);
    // The ABI of a guarded number (x32 calls are AUDIT_ARCH_X86_64).
    let mut abi = |label: &'static str, arch: u32, to: &'static str| {
        c.extend([Label(label), Ld(4), Jeq(arch, to, "pass")]);
    };
    if keep {
        abi("native_ioctl", AUDIT_ARCH_X86_64, "ioctl");
        abi("i386_ioctl", AUDIT_ARCH_I386, "ioctl");
        abi("native_fallocate", AUDIT_ARCH_X86_64, "fallocate");
        abi("i386_fallocate", AUDIT_ARCH_I386, "fallocate");
    }
    if sockets {
        abi("native_socket", AUDIT_ARCH_X86_64, "socket");
        abi("i386_socket", AUDIT_ARCH_I386, "socket");
        abi("i386_socketcall", AUDIT_ARCH_I386, "socketcall");
        // socket(family, type, protocol): `int`s, the low 32 bits count.
        c.extend([Label("socket"), Ld(args_lo(0))]);
        if g.vsock {
            c.push(Jeq(AF_VSOCK, "eafnosupport", NEXT));
        }
        if g.ports {
            c.extend([
                Jeq(AF_SMC, "eafnosupport", NEXT),
                Jeq(AF_INET, "protocol", NEXT),
                Jeq(AF_INET6, "protocol", "pass"),
                Label("protocol"),
                Ld(args_lo(2)),
                Jeq(IPPROTO_MPTCP, "eprotonosupport", NEXT),
                Jeq(IPPROTO_SMC, "eprotonosupport", NEXT),
            ]);
        }
        // socketcall(SYS_SOCKET, args): the family is in memory, out of
        // the filter's sight.
        c.extend([Ret(pass), Label("socketcall"), Ld(args_lo(0)), Jeq(SYS_SOCKET, "eafnosupport", "pass")]);
    }
    if keep {
        // fallocate(fd, mode, ...): KEEP_SIZE allocates past the size,
        // except punching a hole, which frees; INSERT_RANGE grows the size
        // without the RLIMIT_FSIZE check.
        c.extend([
            Label("fallocate"),
            Ld(args_lo(1)),
            Jset(FALLOC_FL_INSERT_RANGE, "eopnotsupp", NEXT),
            Jset(FALLOC_FL_KEEP_SIZE, NEXT, "pass"),
            Jeq(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "pass", "eopnotsupp"),
            Label("ioctl"),
            Ld(args_lo(1)),
        ]);
        for cmd in FS_IOC_RESVSP {
            c.push(Jeq(cmd, "eopnotsupp", NEXT));
        }
        c.push(Ret(pass));
    }
    c.extend([
        Label("enosys"),
        Ret(errno(libc::ENOSYS)),
        Label("eafnosupport"),
        Ret(errno(libc::EAFNOSUPPORT)),
        Label("eprotonosupport"),
        Ret(errno(libc::EPROTONOSUPPORT)),
        Label("eopnotsupp"),
        Ret(errno(libc::EOPNOTSUPP)),
        Label("pass"),
        Ret(pass),
    ]);
    assemble(&c).map_err(PolicyError::Invalid)
}

/// A tiny assembler for the epilogues: labels instead of jump offsets (""
/// is the next instruction).
enum Asm {
    /// A = the 32-bit word at this offset of `struct seccomp_data`.
    Ld(u32),
    /// if A == k goto t else goto f.
    Jeq(u32, &'static str, &'static str),
    /// if A & k != 0 goto t else goto f.
    Jset(u32, &'static str, &'static str),
    /// if A >= k goto t else goto f.
    Jge(u32, &'static str, &'static str),
    /// if A > k goto t else goto f.
    Jgt(u32, &'static str, &'static str),
    Ret(u32),
    Label(&'static str),
}

fn assemble(code: &[Asm]) -> Result<Vec<libc::sock_filter>, String> {
    let mut labels: Vec<(&str, usize)> = Vec::new();
    let mut n = 0;
    for a in code {
        match a {
            Asm::Label(l) => labels.push((l, n)),
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for a in code {
        let at = out.len();
        let target = |l: &str| -> Result<u8, String> {
            if l.is_empty() {
                return Ok(0);
            }
            let (_, to) = labels.iter().find(|(x, _)| *x == l).ok_or(format!("no label `{l}`"))?;
            to.checked_sub(at + 1).and_then(|d| u8::try_from(d).ok()).ok_or(format!("jump to `{l}` out of range"))
        };
        match a {
            Asm::Label(_) => {}
            Asm::Ld(off) => out.push(libc::sock_filter { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: *off }),
            Asm::Jeq(k, t, f) => out.push(libc::sock_filter { code: BPF_JEQ_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Jset(k, t, f) => {
                out.push(libc::sock_filter { code: BPF_JSET_K, jt: target(t)?, jf: target(f)?, k: *k })
            }
            Asm::Jge(k, t, f) => out.push(libc::sock_filter { code: BPF_JGE_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Jgt(k, t, f) => out.push(libc::sock_filter { code: BPF_JGT_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Ret(k) => out.push(libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: *k }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::is_net_log;

    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_NOTIFY: u32 = 0x7fc0_0000;
    const fn ret_errno(e: i32) -> u32 {
        0x0005_0000 | e as u32
    }

    /// Runs a seccomp BPF program on one call, like the kernel.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: i32, args: [u64; 6]) -> u32 {
        run_bpf(prog, &seccomp_data(nr, arch, 0x7fff_1234_5678, &args)).expect("a valid program").0
    }

    fn nr(name: &str) -> i32 {
        native_nr(name).unwrap()
    }

    fn native(f: &Filter, name: &str, args: [u64; 6]) -> u32 {
        run(&f.program, AUDIT_ARCH_X86_64, nr(name), args)
    }

    /// Every syscall without conditions in the policy returns the same
    /// action whatever its arguments: what the kernel's action cache needs.
    fn assert_cacheable(f: &Filter, names: &[&str]) {
        for n in names {
            let a = native(f, n, [0; 6]);
            let b = native(f, n, [u64::MAX, 1, 0x5412, 0x1_0000_0000, 7, 9]);
            assert_eq!(a, b, "{n}: the result depends on the arguments");
        }
    }

    #[test]
    fn builtins_parse_and_compile() {
        for (name, text) in BUILTIN_POLICIES {
            let p = parse_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!p.rules.is_empty());
            let f = compile(&name.parse().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(f.program.len() > 10 && f.program.len() < 4096, "{name}: {f:?}");
            assert_eq!(f.notify, name != "default", "{name}");
        }
        assert!(compile(&PolicyName::None).unwrap().program.is_empty());
    }

    #[test]
    fn default_policy_actions() {
        let f = compile(&PolicyName::Default).unwrap();
        let eperm = ret_errno(libc::EPERM);
        assert_eq!(native(&f, "keyctl", [0; 6]), eperm);
        assert_eq!(native(&f, "bpf", [0; 6]), eperm);
        assert_eq!(native(&f, "io_uring_setup", [0; 6]), ret_errno(libc::ENOSYS));
        assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
        assert_eq!(native(&f, "unshare", [0x1000_0000, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "mount", [0; 6]), RET_ALLOW);
        // ioctl: TIOCSTI refused whatever the upper 32 bits; others run.
        assert_eq!(native(&f, "ioctl", [0, 0x5412, 0, 0, 0, 0]), eperm);
        assert_eq!(native(&f, "ioctl", [0, 0x1_0000_5412, 0, 0, 0, 0]), eperm);
        assert_eq!(native(&f, "ioctl", [0, 0x541c, 0, 0, 0, 0]), eperm);
        assert_eq!(native(&f, "ioctl", [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW);
        // personality: the default values and the query only.
        for ok in [0u64, 8, 0x20000, 0x20008, 0xffff_ffff, 0x1_0000_0000] {
            assert_eq!(native(&f, "personality", [ok, 0, 0, 0, 0, 0]), RET_ALLOW, "{ok:#x}");
        }
        for bad in [1u64, 0x40000, 0x400000, 0x0400_0008, 0xffff_fffe, 0x7fff_ffff, 0x1_0040_0000] {
            assert_eq!(native(&f, "personality", [bad, 0, 0, 0, 0, 0]), eperm, "{bad:#x}");
        }
        // Non-native ABIs: ENOSYS.
        assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), ret_errno(libc::ENOSYS));
        assert_eq!(run(&f.program, AUDIT_ARCH_X86_64, 0x4000_0027, [0; 6]), ret_errno(libc::ENOSYS));
        assert_cacheable(&f, &["read", "write", "openat", "clone", "execve", "keyctl", "mmap"]);
    }

    #[test]
    fn strict_policy_actions() {
        let f = compile(&PolicyName::Strict).unwrap();
        assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
        assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&f, "fork", [0; 6]), RET_NOTIFY);
        assert_eq!(native(&f, "clone", [0; 6]), RET_NOTIFY);
        assert_eq!(native(&f, "openat", [0, 0, libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&f, "openat", [0, 0, libc::O_CREAT as u64, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), RET_NOTIFY);
        assert_eq!(run(&f.program, AUDIT_ARCH_X86_64, 0x4000_0027, [0; 6]), RET_NOTIFY);
        assert_cacheable(&f, &["read", "write", "mmap", "execve", "exit_group", "socket", "fork"]);
    }

    #[test]
    fn language_policies_actions() {
        const THREAD: u64 = 0x3d0f00; // glibc's pthread_create flags
        const GO_THREAD: u64 = 0x50f00; // the Go runtime's
        const FORK: u64 = 0x1200011; // glibc's fork: CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD
        const NEWUSER_THREAD: u64 = THREAD | 0x1000_0000;
        let eacces = ret_errno(libc::EACCES);
        for name in [PolicyName::Python, PolicyName::Jvm, PolicyName::Go] {
            let f = compile(&name).unwrap();
            assert!(f.notify, "{name}");
            assert_eq!(native(&f, "clone", [THREAD, 0, 0, 0, 0, 0]), RET_ALLOW, "{name}");
            assert_eq!(native(&f, "clone", [GO_THREAD, 0, 0, 0, 0, 0]), RET_ALLOW, "{name}");
            assert_eq!(native(&f, "clone", [FORK, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: no processes");
            assert_eq!(native(&f, "clone", [NEWUSER_THREAD, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: no namespaces");
            assert_eq!(native(&f, "clone", [THREAD | 0x20000, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: CLONE_NEWNS");
            assert_eq!(native(&f, "clone3", [0; 6]), ret_errno(libc::ENOSYS), "{name}");
            for call in ["fork", "vfork", "execveat", "ptrace", "mount", "unshare", "setns", "bpf", "mkdir", "unlink"] {
                assert_eq!(native(&f, call, [0; 6]), RET_NOTIFY, "{name}: {call}");
            }
            assert_eq!(
                native(&f, "openat", [0, 0, libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64, 0, 0, 0]),
                RET_ALLOW,
                "{name}"
            );
            assert_eq!(native(&f, "ioctl", [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW, "{name}: TCGETS");
            assert_eq!(native(&f, "ioctl", [0, 0x5412, 0, 0, 0, 0]), RET_NOTIFY, "{name}: TIOCSTI");
            assert_eq!(native(&f, "prlimit64", [0, 7, 0, 0x1000, 0, 0]), RET_ALLOW, "{name}: reading");
            assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), RET_NOTIFY, "{name}");
            assert_cacheable(&f, &["read", "write", "mmap", "futex", "execve", "exit_group", "fork"]);
        }
        // Python: FIOCLEX and FIONCLEX; writing files kills.
        let f = compile(&PolicyName::Python).unwrap();
        assert_eq!(native(&f, "ioctl", [3, 0x5451, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "ioctl", [3, 0x1_0000_5450, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "setting limits");
        // The JVM: thread names, its own limits, EACCES for writable opens
        // and sockets, a local socket pair.
        let f = compile(&PolicyName::Jvm).unwrap();
        assert_eq!(native(&f, "prctl", [15, 0, 0, 0, 0, 0]), RET_ALLOW, "PR_SET_NAME");
        assert_eq!(native(&f, "prctl", [22, 2, 0, 0, 0, 0]), RET_NOTIFY, "PR_SET_SECCOMP");
        assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "its own descriptor limit");
        assert_eq!(native(&f, "prlimit64", [1, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "another process's");
        for flags in [
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_CREAT,
            libc::O_TRUNC,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            libc::O_RDWR | libc::O_CLOEXEC,
        ] {
            assert_eq!(native(&f, "openat", [0, 0, flags as u64, 0, 0, 0]), eacces, "{flags:#x}");
        }
        assert_eq!(native(&f, "socket", [10, 1, 0, 0, 0, 0]), eacces);
        assert_eq!(native(&f, "socketpair", [1, 1, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "socketpair", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&f, "connect", [3, 0, 0, 0, 0, 0]), RET_NOTIFY);
        // Go: the poller.
        let f = compile(&PolicyName::Go).unwrap();
        for call in ["epoll_create1", "epoll_ctl", "epoll_pwait", "pipe2", "eventfd2", "tgkill", "sigaltstack"] {
            assert_eq!(native(&f, call, [0; 6]), RET_ALLOW, "{call}");
        }
        assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "raising its soft descriptor limit");
        assert_eq!(native(&f, "prlimit64", [1, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "another process's");
        assert_eq!(native(&f, "prctl", [0x53564d41, 0, 0, 0, 0, 0]), RET_ALLOW, "PR_SET_VMA");
        assert_eq!(native(&f, "prctl", [15, 0, 0, 0, 0, 0]), RET_NOTIFY, "other prctls");
        assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
        // bash: processes and files, no namespaces or network.
        let f = compile(&PolicyName::Bash).unwrap();
        for call in ["fork", "vfork", "wait4", "pipe2", "mkdir", "unlink", "rename"] {
            assert_eq!(native(&f, call, [0; 6]), RET_ALLOW, "{call}");
        }
        assert_eq!(native(&f, "clone", [FORK, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "clone", [FORK | 0x1000_0000, 0, 0, 0, 0, 0]), RET_NOTIFY, "CLONE_NEWUSER");
        assert_eq!(native(&f, "openat", [0, 0, (libc::O_WRONLY | libc::O_CREAT) as u64, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "socket", [1, 1, 0, 0, 0, 0]), eacces, "nscd");
        assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY, "/dev/tcp");
        assert_eq!(native(&f, "ioctl", [0, 0x540f, 0, 0, 0, 0]), RET_ALLOW, "TIOCGPGRP");
        assert_eq!(native(&f, "ioctl", [0, 0x5410, 0, 0, 0, 0]), RET_NOTIFY, "TIOCSPGRP");
        for call in ["ptrace", "mount", "unshare", "chown", "setxattr", "setuid"] {
            assert_eq!(native(&f, call, [0; 6]), RET_NOTIFY, "{call}");
        }
    }

    #[test]
    fn compile_policy_sockets() {
        let f = compile(&PolicyName::Compile).unwrap();
        let eacces = ret_errno(libc::EACCES);
        // AF_UNIX (nscd), AF_INET and AF_INET6 (the JDK's probes): EACCES.
        for family in [1u64, 2, 10, 0x1_0000_0002] {
            assert_eq!(native(&f, "socket", [family, 1, 0, 0, 0, 0]), eacces, "{family:#x}");
        }
        // Any other family: kill.
        for family in [16u64, 17, 0] {
            assert_eq!(native(&f, "socket", [family, 3, 0, 0, 0, 0]), RET_NOTIFY, "{family}");
        }
    }

    #[test]
    fn new_listener_refused_when_notifying() {
        let eperm = ret_errno(libc::EPERM);
        for name in [PolicyName::Strict, PolicyName::Compile] {
            let f = compile(&name).unwrap();
            assert!(f.notify);
            assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), eperm, "{name}");
            assert_eq!(native(&f, "seccomp", [0x1_0000_0001, 0x9, 0, 0, 0, 0]), eperm, "{name}");
            // Other seccomp calls: the policy's default (kill).
            assert_eq!(native(&f, "seccomp", [1, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}");
        }
        // A policy allowing seccomp keeps allowing the rest.
        let text = r#"
            default_action = "kill"
            [[rule]]
            syscall = ["seccomp", "read"]
            action = "allow"
        "#;
        let f = compile_text("test", text, false).unwrap();
        assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), eperm);
        assert_eq!(native(&f, "seccomp", [0x1_0000_0001, 8, 0, 0, 0, 0]), eperm);
        assert_eq!(native(&f, "seccomp", [1, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "seccomp", [1, 0x1_0000_0000, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "seccomp", [2, 8, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "seccomp", [0, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
        // Without `kill`, no rule is added.
        let f = compile_text("test", "default_action = \"allow\"", false).unwrap();
        assert!(!f.notify);
        assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), RET_ALLOW);
    }

    #[test]
    fn which_filters_a_prepared_tracee_installs_early() {
        let built = |n: &str| compile(&n.parse().unwrap()).unwrap();
        // `default` refuses none of the tracee's own calls (its ioctl rule
        // is about TIOCSTI and TIOCLINUX, not TIOCSCTTY); no filter at all
        // is trivially early.
        assert!(allows_tracee_epilogue(&built("default").program));
        assert!(allows_tracee_epilogue(&built("none").program));
        // The allowlists leave out Landlock, chdir, prlimit...: installed last.
        for n in ["strict", "compile", "python", "jvm", "go", "bash"] {
            assert!(!allows_tracee_epilogue(&built(n).program), "{n}");
        }
        let file = |text: &str| compile_text("test", text, false).unwrap().program;
        assert!(allows_tracee_epilogue(&file("default_action = \"allow\"")));
        // One call of the epilogue refused, or decided by its arguments.
        let deny = "default_action = \"allow\"\n[[rule]]\nsyscall = [\"chdir\"]\naction = \"errno 1\"";
        assert!(!allows_tracee_epilogue(&file(deny)));
        let by_args = "default_action = \"allow\"\n[[rule]]\nsyscall = [\"close\"]\nargs = [{ index = 0, op = \"eq\", value = 99 }]\naction = \"errno 1\"";
        assert!(!allows_tracee_epilogue(&file(by_args)));
        // TIOCSCTTY itself refused.
        let tty = format!(
            "default_action = \"allow\"\n[[rule]]\nsyscall = [\"ioctl\"]\nargs = [{{ index = 1, op = \"eq\", value = {} }}]\naction = \"errno 1\"",
            libc::TIOCSCTTY
        );
        assert!(!allows_tracee_epilogue(&file(&tty)));
    }

    #[test]
    fn masked_eq_and_errno_rule() {
        let text = r#"
            default_action = "allow"
            [[rule]]
            syscall = "openat"
            action = "errno EACCES"
            args = [{ index = 2, op = "masked_eq", mask = 3, value = 1 }]
            [[rule]]
            syscall = "mkdir"
            action = "errno 13"
            args = [{ index = 1, op = "gt", value = "0x1ff" }]
        "#;
        let f = compile_text("test", text, false).unwrap();
        let eacces = ret_errno(libc::EACCES);
        assert_eq!(native(&f, "openat", [0, 0, 0x41, 0, 0, 0]), eacces);
        assert_eq!(native(&f, "openat", [0, 0, 0x42, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&f, "mkdir", [0, 0x200, 0, 0, 0, 0]), eacces);
        assert_eq!(native(&f, "mkdir", [0, 0x1ff, 0, 0, 0, 0]), RET_ALLOW);
    }

    #[test]
    fn json_and_toml_are_equivalent() {
        let toml = r#"
            default_action = "errno EPERM"
            non_native_action = "kill"
            [[rule]]
            syscall = ["read", "write"]
            action = "allow"
            [[rule]]
            syscall = "ioctl"
            action = "allow"
            args = [{ index = 1, op = "masked_eq", mask = 0xffffffff, value = 0x5401 }]
        "#;
        let json = r#"{
            "default_action": "errno EPERM",
            "non_native_action": "kill",
            "rule": [
                { "syscall": ["read", "write"], "action": "allow" },
                { "syscall": "ioctl", "action": "allow",
                  "args": [{ "index": 1, "op": "masked_eq", "mask": 4294967295, "value": "0x5401" }] }
            ]
        }"#;
        let a = parse_toml(toml).unwrap();
        let b = parse_json(json).unwrap();
        assert_eq!(a, b);
        let fa = compile_text("t", toml, false).unwrap();
        let fb = compile_text("j", json, true).unwrap();
        assert_eq!(fa.program.len(), fb.program.len());
        assert!(fa.notify && fb.notify);
        assert!(fa
            .program
            .iter()
            .zip(&fb.program)
            .all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k)));
    }

    fn err(text: &str) -> String {
        match compile_text("policy.toml", text, false) {
            Ok(f) => panic!("accepted: {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn unknown_syscalls_are_all_listed() {
        let e = err(r#"
            default_action = "kill"
            [[rule]]
            syscall = ["read", "frobnicate"]
            action = "allow"
            [[rule]]
            syscall = "socketcall"
            action = "allow"
        "#);
        assert!(e.starts_with("policy.toml: "), "{e}");
        assert!(e.contains("`frobnicate` (rule[0])") && e.contains("`socketcall` (rule[1])"), "{e}");
    }

    #[test]
    fn bad_actions_indexes_and_ops() {
        let e = err("default_action = \"die\"");
        assert!(e.contains("default_action") && e.contains("unknown action `die`"), "{e}");
        let e = err("default_action = \"errno EWHAT\"");
        assert!(e.contains("unknown errno `EWHAT`"), "{e}");
        let e = err("default_action = \"errno 5000\"");
        assert!(e.contains("out of range"), "{e}");
        let rule = |args: &str| {
            format!("default_action = \"allow\"\n[[rule]]\nsyscall = \"ioctl\"\naction = \"errno EPERM\"\nargs = [{args}]\n")
        };
        let e = err(&rule("{ index = 6, op = \"eq\", value = 1 }"));
        assert!(e.contains("rule[0].args[0]") && e.contains("index 6"), "{e}");
        let e = err(&rule("{ index = 1, op = \"like\", value = 1 }"));
        assert!(e.contains("rule[0].args[0].op") && e.contains("unknown variant `like`"), "{e}");
        let e = err(&rule("{ index = 1, op = \"masked_eq\", value = 1 }"));
        assert!(e.contains("needs a `mask`"), "{e}");
        let e = err(&rule("{ index = 1, op = \"eq\", value = 1 }, { index = 1, op = \"ne\", value = 2 }"));
        assert!(e.contains("rule[0].args[1]") && e.contains("a second condition on argument 1"), "{e}");
        let e = err(&rule("{ index = 1, op = \"eq\" }"));
        assert!(e.contains("needs a `value`"), "{e}");
        let e = err("default_action = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n");
        assert!(e.contains("is the default action"), "{e}");
    }

    #[test]
    fn malformed_documents_name_the_field() {
        let e = err("default_action = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = 3\n");
        assert!(e.contains("rule[0].action") && e.contains("line"), "{e}");
        let e = err("default_action = \"allow\"\nrules = []\n");
        assert!(e.contains("unknown field `rules`"), "{e}");
        let e = err("default_action = ");
        assert!(e.starts_with("policy.toml: "), "{e}");
        let e = compile_text("p.json", r#"{"default_action": "allow", "rule": [{"syscall": "read", "action": "allow", "args": [{"index": "x"}]}]}"#, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rule[0].args[0].index"), "{e}");
        let e = compile_text("p.json", "{", true).unwrap_err().to_string();
        assert!(e.starts_with("p.json: "), "{e}");
    }

    #[test]
    fn duplicates_and_conflicts() {
        let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = [\"write\", \"read\"]\naction = \"allow\"\n");
        assert!(e.contains("`read` in rule[0] and rule[1]: duplicate rule"), "{e}");
        let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"errno EIO\"\n");
        assert!(e.contains("conflicting rules"), "{e}");
        let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"errno EIO\"\nargs = [{ index = 0, op = \"eq\", value = 3 }]\n");
        assert!(e.contains("would be ignored"), "{e}");
    }

    #[test]
    fn not_in_cover_is_exact() {
        let values = [0u32, 8, 0x20000, 0x20008, 0xffff_ffff];
        let mut cubes = Vec::new();
        not_in_cover(&values, 0, 0, &mut cubes);
        let covered = |x: u32| cubes.iter().filter(|(m, v)| x & m == *v).count();
        for x in values {
            assert_eq!(covered(x), 0, "{x:#x}");
        }
        for x in [1u32, 7, 9, 0x10, 0x20001, 0x40000, 0x8000_0000, 0xffff_fffe, 0x7fff_ffff, 0x12345678] {
            assert_eq!(covered(x), 1, "{x:#x}");
        }
    }

    /// A network-log filter's verdict on a call: (action, from the log).
    fn net(f: &Filter, arch: u32, nr: i32, args: [u64; 6]) -> (u32, bool) {
        let data = seccomp_data(nr, arch, 0x7fff_1234_5678, &args);
        (run_bpf(&f.program, &data).expect("a valid program").0, is_net_log(&f.program, f.net_log_from, &data))
    }

    const LOGGED: (u32, bool) = (RET_NOTIFY, true);
    const ALLOWED: (u32, bool) = (RET_ALLOW, false);
    const KILLED: (u32, bool) = (RET_NOTIFY, false);

    #[test]
    fn net_log_under_default() {
        let f = with_net_log(&compile(&PolicyName::Default).unwrap()).unwrap();
        assert!(f.notify && f.net_log(), "{f:?}");
        let x = AUDIT_ARCH_X86_64;
        assert_eq!(net(&f, x, nr("connect"), [3, 0x1000, 16, 0, 0, 0]), LOGGED);
        assert_eq!(net(&f, x, nr("sendmsg"), [3, 0x1000, 0, 0, 0, 0]), LOGGED);
        assert_eq!(net(&f, x, nr("sendmmsg"), [3, 0x1000, 2, 0, 0, 0]), LOGGED);
        // sendto: only with an address (argument 4), all 64 bits of it.
        assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0x2000, 16]), LOGGED);
        assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0x1_0000_0000, 16]), LOGGED);
        assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0, 0]), ALLOWED);
        // Everything else as the policy says.
        assert_eq!(net(&f, x, nr("read"), [0; 6]), ALLOWED);
        assert_eq!(net(&f, x, nr("socket"), [2, 1, 0, 0, 0, 0]), ALLOWED);
        assert_eq!(net(&f, x, nr("recvfrom"), [3, 0x1000, 5, 0, 0x2000, 16]), ALLOWED);
        assert_eq!(net(&f, x, nr("keyctl"), [0; 6]), (ret_errno(libc::EPERM), false));
        assert_eq!(net(&f, x, nr("ioctl"), [0, 0x5412, 0, 0, 0, 0]), (ret_errno(libc::EPERM), false));
        // The policy refuses the other ABIs: nothing to log.
        assert_eq!(net(&f, AUDIT_ARCH_I386, 362, [0; 6]), (ret_errno(libc::ENOSYS), false));
        assert_eq!(net(&f, x, 0x4000_002a, [0; 6]), (ret_errno(libc::ENOSYS), false));
        // Calls without argument checks keep the kernel's action cache.
        assert_cacheable(&f, &["read", "write", "openat", "connect", "sendmsg", "sendmmsg", "keyctl", "socket"]);
        // The policy's own filter is unchanged.
        let plain = compile(&PolicyName::Default).unwrap();
        assert!(!plain.net_log() && !plain.notify);
        assert_eq!(native(&plain, "connect", [0; 6]), RET_ALLOW);
    }

    #[test]
    fn net_log_under_none_covers_every_abi() {
        let f = with_net_log(&compile(&PolicyName::None).unwrap()).unwrap();
        assert!(f.notify && f.net_log() && f.program.len() < 64, "{f:?}");
        let (x, i386) = (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386);
        assert_eq!(net(&f, x, nr("connect"), [0; 6]), LOGGED);
        assert_eq!(net(&f, x, nr("getpid"), [0; 6]), ALLOWED);
        assert_eq!(net(&f, x, nr("keyctl"), [0; 6]), ALLOWED);
        // x32.
        assert_eq!(net(&f, x, 0x4000_0000 | 42, [0; 6]), LOGGED);
        assert_eq!(net(&f, x, 0x4000_0000 | 518, [0; 6]), LOGGED);
        assert_eq!(net(&f, x, 0x4000_0000 | 538, [0; 6]), LOGGED);
        assert_eq!(net(&f, x, 0x4000_0000 | 44, [0, 0, 0, 0, 8, 0]), LOGGED);
        assert_eq!(net(&f, x, 0x4000_0000 | 44, [0; 6]), ALLOWED);
        assert_eq!(net(&f, x, 0x4000_0000 | 39, [0; 6]), ALLOWED);
        // i386, direct and through socketcall (whose arguments are in
        // memory: every sendto goes to PID 1).
        for n in [362, 370, 345] {
            assert_eq!(net(&f, i386, n, [0; 6]), LOGGED, "{n}");
        }
        assert_eq!(net(&f, i386, 369, [3, 0, 0, 0, 0x8000, 16]), LOGGED);
        assert_eq!(net(&f, i386, 369, [3, 0, 0, 0, 0, 0]), ALLOWED);
        for call in [3, 11, 16, 20] {
            assert_eq!(net(&f, i386, 102, [call, 0x8000, 0, 0, 0, 0]), LOGGED, "{call}");
        }
        for call in [1, 2, 9, 12] {
            assert_eq!(net(&f, i386, 102, [call, 0x8000, 0, 0, 0, 0]), ALLOWED, "{call}");
        }
        assert_eq!(net(&f, i386, 20, [0; 6]), ALLOWED);
        // Another architecture's calls are not ours to log.
        assert_eq!(net(&f, 0xc000_00b7, 203, [0; 6]), ALLOWED);
        // What the network log decodes.
        assert_eq!(net_call(x, 42, &[0; 6]), Some((NetCall::Connect, Abi::Native, false)));
        assert_eq!(net_call(x, 0x4000_0000 | 518, &[0; 6]), Some((NetCall::Sendmsg, Abi::X32, false)));
        assert_eq!(net_call(i386, 102, &[0x1_0000_000b, 0, 0, 0, 0, 0]), Some((NetCall::Sendto, Abi::I386, true)));
        assert_eq!(net_call(i386, 102, &[1, 0, 0, 0, 0, 0]), None);
        assert_eq!(net_call(x, 41, &[0; 6]), None);
        // The numbers are the ones libseccomp knows.
        assert_eq!(syscall_name(i386, 362), "i386:connect");
        assert_eq!(syscall_name(i386, 369), "i386:sendto");
        assert_eq!(syscall_name(i386, 370), "i386:sendmsg");
        assert_eq!(syscall_name(i386, 345), "i386:sendmmsg");
        assert_eq!(syscall_name(i386, 102), "i386:socketcall");
        assert_eq!(syscall_name(x, 0x4000_0000 | 518), "x32:sendmsg");
        assert_eq!(syscall_name(x, 0x4000_0000 | 538), "x32:sendmmsg");
        assert_eq!(syscall_name(x, 0x4000_0000 | 42), "x32:connect");
    }

    #[test]
    fn net_log_keeps_the_policys_kill_and_errno() {
        let f = with_net_log(&compile(&PolicyName::Strict).unwrap()).unwrap();
        // strict kills connect (no rule: its default): still the policy's.
        assert_eq!(net(&f, AUDIT_ARCH_X86_64, nr("connect"), [0; 6]), KILLED);
        assert_eq!(net(&f, AUDIT_ARCH_X86_64, nr("read"), [0; 6]), ALLOWED);
        assert_eq!(net(&f, AUDIT_ARCH_I386, 102, [3, 0, 0, 0, 0, 0]), KILLED);
        let text = r#"
            default_action = "log"
            [[rule]]
            syscall = "connect"
            action = "errno ECONNREFUSED"
            [[rule]]
            syscall = "sendto"
            action = "kill"
            args = [{ index = 0, op = "eq", value = 5 }]
            [[rule]]
            syscall = ["read", "write"]
            action = "allow"
        "#;
        let f = with_net_log(&compile_text("t", text, false).unwrap()).unwrap();
        let x = AUDIT_ARCH_X86_64;
        assert_eq!(net(&f, x, nr("connect"), [0; 6]), (ret_errno(libc::ECONNREFUSED), false));
        assert_eq!(net(&f, x, nr("sendto"), [5, 0, 0, 0, 0x2000, 16]), KILLED);
        assert_eq!(net(&f, x, nr("sendto"), [5, 0, 0, 0, 0, 0]), KILLED);
        assert_eq!(net(&f, x, nr("sendto"), [4, 0, 0, 0, 0x2000, 16]), LOGGED);
        assert_eq!(net(&f, x, nr("sendto"), [4, 0, 0, 0, 0, 0]), (RET_LOG, false));
        assert_eq!(net(&f, x, nr("sendmsg"), [4, 0, 0, 0, 0, 0]), LOGGED);
        assert_eq!(net(&f, x, nr("getpid"), [0; 6]), (RET_LOG, false));
        assert_eq!(net(&f, x, nr("read"), [0; 6]), ALLOWED);
        // Two epilogues (allow and log), each jumped to from the policy.
        assert!(f.program.iter().filter(|i| i.code == BPF_RET_K && i.k == RET_USER_NOTIF).count() >= 2);
    }

    #[test]
    fn guards_refuse_what_gets_around_the_limits() {
        let all = Guards { ports: true, vsock: true, keep_size: true };
        let (x, i386) = (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386);
        let (eaf, eproto, eop, enosys) = (
            ret_errno(libc::EAFNOSUPPORT),
            ret_errno(libc::EPROTONOSUPPORT),
            ret_errno(libc::EOPNOTSUPP),
            ret_errno(libc::ENOSYS),
        );
        // `none`: a filter of the guards alone, every ABI.
        let f = with_guards(&compile(&PolicyName::None).unwrap(), all).unwrap();
        assert!(!f.notify && f.program.len() < 128, "{f:?}");
        for abi in [0, X32] {
            let nr = |n: i32| abi as i32 | n;
            let sock = |a: [u64; 6]| run(&f.program, x, nr(41), a);
            assert_eq!(sock([2, 1, 262, 0, 0, 0]), eproto);
            assert_eq!(sock([10, 0x80801, 0x1_0000_0106, 0, 0, 0]), eproto);
            assert_eq!(sock([2, 1, 256, 0, 0, 0]), eproto);
            assert_eq!(sock([43, 1, 0, 0, 0, 0]), eaf);
            assert_eq!(sock([0xffff_0000_0000_0028, 1, 0, 0, 0, 0]), eaf);
            assert_eq!(sock([2, 1, 0, 0, 0, 0]), RET_ALLOW);
            assert_eq!(sock([2, 1, 6, 0, 0, 0]), RET_ALLOW);
            assert_eq!(sock([1, 1, 0, 0, 0, 0]), RET_ALLOW);
            let fall = |mode: u64| run(&f.program, x, nr(285), [3, mode, 0, 1 << 30, 0, 0]);
            assert_eq!(fall(0), RET_ALLOW);
            assert_eq!(fall(3), RET_ALLOW, "punching a hole frees blocks");
            for mode in [1, 0x11, 0x81, 0x5, 0x20, 0x1_0000_0001] {
                assert_eq!(fall(mode), eop, "{mode:#x}");
            }
            assert_eq!(run(&f.program, x, nr(425), [0; 6]), enosys);
        }
        assert_eq!(run(&f.program, x, 16, [3, 0x4030_582a, 0, 0, 0, 0]), eop);
        assert_eq!(run(&f.program, x, X32 as i32 | 514, [3, 0x402c_5828, 0, 0, 0, 0]), eop);
        assert_eq!(run(&f.program, x, 16, [3, 0x4030_5829, 0, 0, 0, 0]), RET_ALLOW, "FS_IOC_UNRESVSP frees");
        assert_eq!(run(&f.program, x, 16, [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW);
        // i386: direct socket by its arguments, socketcall(SYS_SOCKET)
        // whatever they are (in memory), fallocate, ioctl, io_uring.
        assert_eq!(run(&f.program, i386, 359, [40, 1, 0, 0, 0, 0]), eaf);
        assert_eq!(run(&f.program, i386, 359, [1, 1, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(run(&f.program, i386, 102, [1, 0x8000, 0, 0, 0, 0]), eaf);
        assert_eq!(run(&f.program, i386, 102, [3, 0x8000, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(run(&f.program, i386, 324, [3, 1, 0, 0, 0, 0]), eop);
        assert_eq!(run(&f.program, i386, 54, [3, 0x402c_582a, 0, 0, 0, 0]), eop);
        assert_eq!(run(&f.program, i386, 425, [0; 6]), enosys);
        assert_eq!(run(&f.program, 0xc000_00b7, 41, [40, 1, 0, 0, 0, 0]), RET_ALLOW);
        // Each guard alone refuses only its own.
        let only = |g: Guards| with_guards(&compile(&PolicyName::Default).unwrap(), g).unwrap();
        let vsock = only(Guards { vsock: true, ..Guards::default() });
        assert_eq!(native(&vsock, "socket", [40, 1, 0, 0, 0, 0]), eaf);
        assert_eq!(native(&vsock, "socket", [2, 1, 262, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&vsock, "fallocate", [3, 1, 0, 0, 0, 0]), RET_ALLOW);
        let ports = only(Guards { ports: true, ..Guards::default() });
        assert_eq!(native(&ports, "socket", [40, 1, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&ports, "socket", [2, 1, 262, 0, 0, 0]), eproto);
        let keep = only(Guards { keep_size: true, ..Guards::default() });
        assert_eq!(native(&keep, "socket", [40, 1, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(native(&keep, "fallocate", [3, 1, 0, 0, 0, 0]), eop);
        // The policy's own verdicts stay (default's errnos, strict's kill),
        // other calls keep the action cache, the tracee's epilogue passes.
        let d = only(all);
        assert_eq!(native(&d, "keyctl", [0; 6]), ret_errno(libc::EPERM));
        assert_eq!(native(&d, "ioctl", [0, 0x5412, 0, 0, 0, 0]), ret_errno(libc::EPERM));
        assert_eq!(run(&d.program, i386, 359, [2, 1, 0, 0, 0, 0]), enosys);
        assert_cacheable(&d, &["read", "write", "openat", "connect", "keyctl", "mmap"]);
        assert!(allows_tracee_epilogue(&d.program));
        let s = with_guards(&compile(&PolicyName::Strict).unwrap(), all).unwrap();
        assert!(s.notify);
        assert_eq!(native(&s, "socket", [40, 1, 0, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(native(&s, "read", [0; 6]), RET_ALLOW);
        // No guard: the policy's filter as it is; with the network log on
        // top, both hold.
        let plain = compile(&PolicyName::Default).unwrap();
        assert_eq!(only(Guards::default()).program.len(), plain.program.len());
        let l = with_net_log(&d).unwrap();
        assert_eq!(net(&l, x, nr("socket"), [40, 1, 0, 0, 0, 0]), (eaf, false));
        assert_eq!(net(&l, x, nr("connect"), [3, 0, 16, 0, 0, 0]), LOGGED);
        assert_eq!(net(&l, x, nr("socket"), [2, 1, 0, 0, 0, 0]), ALLOWED);
    }

    #[test]
    fn bpf_interpreter_refuses_bad_programs() {
        let i = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        let d = seccomp_data(1, AUDIT_ARCH_X86_64, 0, &[7, 0, 0, 0, 0, 0]);
        // Arithmetic, scratch memory, X, ret A.
        let prog = [
            i(BPF_LD_W_ABS, 0, 0, 16),
            i(0x04, 0, 0, 5),   // A += 5
            i(BPF_ST, 0, 0, 3), // M[3] = A
            i(BPF_LDX_IMM, 0, 0, 2),
            i(0x2c, 0, 0, 0), // A *= X
            i(0x3d, 1, 0, 0), // if A >= X skip 1
            i(BPF_RET_K, 0, 0, 0),
            i(BPF_LDX_MEM, 0, 0, 3),
            i(0xac, 0, 0, 0), // A ^= X
            i(BPF_RET_A, 0, 0, 0),
        ];
        assert_eq!(run_bpf(&prog, &d), Some((24 ^ 12, 9)));
        // Out of range: a load, a jump, falling off the end, a slot, an
        // unknown opcode, a division by zero.
        assert_eq!(run_bpf(&[i(BPF_LD_W_ABS, 0, 0, 64), i(BPF_RET_A, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[i(BPF_LD_W_ABS, 0, 0, 2), i(BPF_RET_A, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[i(BPF_JA, 0, 0, 5), i(BPF_RET_A, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[i(BPF_JA, 0, 0, u32::MAX)], &d), None);
        assert_eq!(run_bpf(&[i(BPF_LD_IMM, 0, 0, 1)], &d), None);
        assert_eq!(run_bpf(&[i(BPF_ST, 0, 0, 16), i(BPF_RET_A, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[i(0xff, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[i(0x3c, 0, 0, 0), i(BPF_RET_A, 0, 0, 0)], &d), None);
        assert_eq!(run_bpf(&[], &d), None);
    }

    #[test]
    fn syscall_names() {
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 41), "socket");
        assert_eq!(syscall_name(AUDIT_ARCH_I386, 20), "i386:getpid");
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 0x4000_0000), "x32:read");
        assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 99999), "syscall 99999");
        assert!(syscall_name(0x1234, 1).starts_with("syscall 1"));
    }
}
