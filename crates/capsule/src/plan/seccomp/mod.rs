//! Seccomp: the run's policy (`default`, `strict`, `compile`, the language
//! allowlists `python`, `jvm`, `go`, `bash`, `none` or a policy file),
//! compiled once per supervisor by `compile.rs` into a classic-BPF program,
//! which the tracee installs last, right before execve.
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

mod compile;
mod epilogue;
mod guards;
mod names;
mod netlog;
mod policy;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use self::compile::compile_policy;
pub use self::guards::{with_guards, Guards};
pub use self::netlog::with_net_log;
use self::policy::{parse_json, parse_toml};
pub use self::policy::{Action, ArgCond, OneOrMany, Op, Policy, Rule, Value};
pub use crate::proto::policy::{PolicyError, PolicyName};
use crate::sys;
use crate::sys::seccomp::{run_bpf_probe, seccomp_data, AUDIT_ARCH_I386, AUDIT_ARCH_X86_64, RET_ALLOW, X32};

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
pub const DEFAULT_POLICY: &str = include_str!("../../../policies/default.toml");
pub const STRICT_POLICY: &str = include_str!("../../../policies/strict.toml");
pub const COMPILE_POLICY: &str = include_str!("../../../policies/compile.toml");
/// The language-specific allowlists of the run presets (docs/presets.md).
pub const PYTHON_POLICY: &str = include_str!("../../../policies/python.toml");
pub const JVM_POLICY: &str = include_str!("../../../policies/jvm.toml");
pub const GO_POLICY: &str = include_str!("../../../policies/go.toml");
pub const BASH_POLICY: &str = include_str!("../../../policies/bash.toml");

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
    let n = u32::try_from(nr).ok();
    let (name, prefix) = match arch {
        AUDIT_ARCH_X86_64 if nr >= X32 as i32 => (n.and_then(|n| names::x32_name(n - X32)), "x32:"),
        AUDIT_ARCH_X86_64 => (n.and_then(names::x86_64_name), ""),
        AUDIT_ARCH_I386 => (n.and_then(names::i386_name), "i386:"),
        _ => return format!("syscall {nr} (audit arch {arch:#x})"),
    };
    match name {
        Some(name) => format!("{prefix}{name}"),
        None => format!("{prefix}syscall {nr}"),
    }
}

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
/// waiting for the go message, off the request's path (installing converts
/// and JITs the program and fills the action cache; its cost is in
/// docs/seccomp.md). Exact: a call whose result depends on its arguments
/// counts as not allowed.
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
