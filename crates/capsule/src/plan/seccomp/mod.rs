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

#[cfg(test)]
mod arch_tests;
mod compile;
mod epilogue;
mod guards;
mod names;
mod netlog;
mod policy;
// x86_64's numbers and ABIs (i386, x32), on x86_64 (the file says so).
#[cfg(test)]
mod tests;

use std::path::Path;

pub use self::compile::{compile_policy, compile_policy_for, Arch};
pub use self::guards::{with_guards, Guards};
pub use self::netlog::{with_net_log, with_watch, FS_WATCHED};
use self::policy::{parse_json, parse_toml};
pub use self::policy::{Action, ArgCond, OneOrMany, Op, Policy, Rule, Value};
pub use crate::proto::policy::{PolicyError, PolicyName};
use crate::sys;
use crate::sys::seccomp::{
    run_bpf_probe, seccomp_data, AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM, AUDIT_ARCH_I386, AUDIT_ARCH_NATIVE,
    AUDIT_ARCH_X86_64, RET_ALLOW, X32,
};

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

/// Loads (for a file) and compiles a policy for this build's architecture.
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
/// `i386:open` / `x32:read` / `arm:syscall 5` for non-native ABIs, or
/// `syscall 999` when unknown.
pub fn syscall_name(arch: u32, nr: i32) -> String {
    let n = u32::try_from(nr).ok();
    let (name, prefix) = match arch {
        AUDIT_ARCH_X86_64 if nr >= X32 as i32 => (n.and_then(|n| names::x32_name(n - X32)), "x32:"),
        AUDIT_ARCH_X86_64 => (n.and_then(names::x86_64_name), ""),
        AUDIT_ARCH_I386 => (n.and_then(names::i386_name), "i386:"),
        AUDIT_ARCH_AARCH64 => (n.and_then(names::aarch64_name), ""),
        AUDIT_ARCH_ARM => (None, "arm:"),
        _ => return format!("syscall {nr} (audit arch {arch:#x})"),
    };
    match name {
        Some(name) => format!("{prefix}{name}"),
        None => format!("{prefix}syscall {nr}"),
    }
}

/// The system calls the tracee makes between its go message and the
/// program's execve (stdio, Landlock's stdio rules, chdir, limits, the
/// CPU baseline, the exec itself, and exit on a failure), native numbers.
const TRACEE_EPILOGUE: &[i32] = &[
    libc::SYS_recvmsg as i32,
    libc::SYS_dup3 as i32,
    libc::SYS_close as i32,
    libc::SYS_fcntl as i32,
    libc::SYS_fstat as i32,
    libc::SYS_newfstatat as i32,
    libc::SYS_statx as i32,
    libc::SYS_landlock_add_rule as i32,
    libc::SYS_landlock_restrict_self as i32,
    libc::SYS_chdir as i32,
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

/// The calls of the `sys` layer's wrappers that differ by architecture:
/// on x86_64 `dup2` (the tracee's), `access` and `poll`; aarch64 has
/// none of them, its wrappers make `dup3`, `fcntl`, `ppoll` (in the lists)
/// and `faccessat`.
#[cfg(target_arch = "x86_64")]
const TRACEE_ARCH: &[i64] = &[libc::SYS_dup2];
#[cfg(target_arch = "x86_64")]
const CHILD_PATH_ARCH: &[i64] = &[libc::SYS_dup2, libc::SYS_access, libc::SYS_poll];
#[cfg(target_arch = "aarch64")]
const TRACEE_ARCH: &[i64] = &[];
#[cfg(target_arch = "aarch64")]
const CHILD_PATH_ARCH: &[i64] = &[libc::SYS_faccessat];

/// Whether a filter allows every call the tracee makes after its go
/// message, whatever their arguments (and `ioctl(0, TIOCSCTTY, 0)`, for
/// `controlling_tty`, and `prlimit64` of itself, as `sys::setrlimit` calls
/// it): then a PID 1 prepared ahead installs it *before*
/// waiting for the go message, off the request's path (installing converts
/// and JITs the program and fills the action cache; its cost is in
/// docs/seccomp.md). Exact: a call whose result depends on its arguments
/// counts as not allowed.
pub(crate) fn allows_tracee_epilogue(prog: &[libc::sock_filter]) -> bool {
    if prog.is_empty() {
        return true;
    }
    TRACEE_EPILOGUE.iter().all(|&nr| allows(prog, nr as i64, &[0; 6], true))
        && TRACEE_ARCH.iter().all(|&nr| allows(prog, nr, &[0; 6], true))
        && allows(prog, libc::SYS_ioctl, &[0, libc::TIOCSCTTY, 0, 0, 0, 0], false)
        && allows_own_limits(prog)
}

/// Whether `prog` lets a process set its own limits, every one of them:
/// `prlimit64` of pid 0 with a new limit (a pointer) and no old one, as
/// `sys::setrlimit` calls it.
fn allows_own_limits(prog: &[libc::sock_filter]) -> bool {
    // RLIMIT_CPU (0) to RLIMIT_RTTIME (15).
    const RLIMITS: u64 = 16;
    (0..RLIMITS).all(|r| allows(prog, libc::SYS_prlimit64, &[0, r, 0x7fff_0000, 0, 0, 0], false))
}

/// Whether `prog` allows native call `nr` with `args`; with `any_args`,
/// only if its verdict does not read them.
fn allows(prog: &[libc::sock_filter], nr: i64, args: &[u64; 6], any_args: bool) -> bool {
    let data = seccomp_data(nr as i32, AUDIT_ARCH_NATIVE, 0, args);
    matches!(run_bpf_probe(prog, &data), Some((RET_ALLOW, _, read_args)) if !(any_args && read_args))
}

/// Every system call the `sys` layer makes, to which capsule's child path
/// (PID 1 and the tracee until the program's execve) is confined, less
/// `ioctl`, `socket` and `prlimit64`, which [`allows_child_path`] checks
/// with the arguments the child path passes; and the two the kernel or the vDSO may
/// make for it (`restart_syscall`, `clock_gettime`). A superset of what a
/// PID 1 calls: whatever the run's mounts, limits and network.
const CHILD_PATH: &[i64] = &[
    libc::SYS_accept4,
    libc::SYS_capset,
    libc::SYS_chdir,
    libc::SYS_clock_gettime,
    libc::SYS_clone3,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_dup3,
    libc::SYS_eventfd2,
    libc::SYS_execve,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_fchdir,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fsopen,
    libc::SYS_fstatfs,
    libc::SYS_futex,
    libc::SYS_getcpu,
    libc::SYS_getdents64,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_getrusage,
    libc::SYS_getsockopt,
    libc::SYS_getuid,
    libc::SYS_kill,
    libc::SYS_landlock_add_rule,
    libc::SYS_landlock_create_ruleset,
    libc::SYS_landlock_restrict_self,
    libc::SYS_lseek,
    libc::SYS_memfd_create,
    libc::SYS_mkdirat,
    libc::SYS_mmap,
    libc::SYS_mount,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_mprotect,
    libc::SYS_munmap,
    libc::SYS_newfstatat,
    libc::SYS_open_tree,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pipe2,
    libc::SYS_pivot_root,
    libc::SYS_ppoll,
    libc::SYS_prctl,
    libc::SYS_pread64,
    libc::SYS_process_vm_readv,
    libc::SYS_read,
    libc::SYS_readlinkat,
    libc::SYS_recvmsg,
    libc::SYS_restart_syscall,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_getattr,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setattr,
    libc::SYS_sched_yield,
    libc::SYS_seccomp,
    libc::SYS_sendmsg,
    libc::SYS_sethostname,
    libc::SYS_setns,
    libc::SYS_setsid,
    libc::SYS_shutdown,
    libc::SYS_signalfd4,
    libc::SYS_socketpair,
    libc::SYS_splice,
    libc::SYS_statfs,
    libc::SYS_symlinkat,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_umask,
    libc::SYS_umount2,
    libc::SYS_unshare,
    libc::SYS_utimensat,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_write,
];

/// Whether a filter may be installed once on the thread that creates the
/// PID 1s, which then inherit it, and their tracees and programs after them
/// (`sys::vm::Spawner`): it must let PID 1 build the sandbox. Exact: every
/// call of [`CHILD_PATH`] allowed whatever its arguments, `ioctl` and
/// `socket` with the arguments the child path passes (the controlling
/// terminal, the loopback's flags, the user notifications, the datagram
/// socket for the loopback). A filter that notifies (its listener is one
/// per run) does not qualify; the caller checks that.
pub(crate) fn allows_child_path(prog: &[libc::sock_filter]) -> bool {
    if prog.is_empty() {
        return false;
    }
    let ioctls = [
        libc::TIOCSCTTY,
        libc::SIOCGIFFLAGS,
        libc::SIOCSIFFLAGS,
        sys::seccomp::SECCOMP_IOCTL_NOTIF_RECV,
        sys::seccomp::SECCOMP_IOCTL_NOTIF_SEND,
        sys::seccomp::SECCOMP_IOCTL_NOTIF_ID_VALID,
    ];
    let datagram = (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64;
    CHILD_PATH.iter().chain(CHILD_PATH_ARCH).all(|&nr| allows(prog, nr, &[0; 6], true))
        && ioctls.iter().all(|&cmd| allows(prog, libc::SYS_ioctl, &[3, cmd, 0, 0, 0, 0], false))
        && allows(prog, libc::SYS_socket, &[libc::AF_INET as u64, datagram, 0, 0, 0, 0], false)
        && allows_own_limits(prog)
}
