//! Namespaces created once per supervisor (thesis: "Unsharing network,
//! ipc, uts and time namespace ... done once, at startup").

use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::SysError;
use crate::spec::DEFAULT_HOSTNAME;
use crate::sys::{self, Forked};

/// What the supervisor holds after entering its namespaces.
pub(crate) struct SupervisorNs {
    /// A network namespace with only `lo`, up; joined by each run's PID 1
    /// unless the run shares the host's network.
    pub loopback_net: OwnedFd,
    /// Whether the supervisor got a time namespace of its own.
    pub time_ns: bool,
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Why creating a user namespace failed, and how to fix it.
pub fn userns_hint(errno: i32) -> String {
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1".into();
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000".into();
    }
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "AppArmor restricts unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give capsule an AppArmor profile that allows `userns`".into();
    }
    match errno {
        libc::ENOSPC => "too many user namespaces: raise user.max_user_namespaces".into(),
        libc::EPERM => "the kernel or a security module (seccomp, SELinux, a container runtime) forbids creating user namespaces here; see `capsule check`".into(),
        _ => "see `capsule check`".into(),
    }
}

/// Enters the supervisor's user namespace, mapping the caller (`uid`,
/// `gid` on the host) to root inside, then creates the namespaces shared
/// by every run.
pub(crate) fn enter_supervisor(uid: u32, gid: u32) -> Result<SupervisorNs, SysError> {
    sys::unshare(libc::CLONE_NEWUSER).map_err(|e| {
        SysError::new("unshare(CLONE_NEWUSER)", e).hint(userns_hint(e))
    })?;
    let write = |file: &str, data: String| {
        std::fs::write(format!("/proc/self/{file}"), data).map_err(|e| {
            SysError::new("write", e.raw_os_error().unwrap_or(libc::EIO)).path(format!("/proc/self/{file}"))
        })
    };
    write("setgroups", "deny".into())?;
    write("gid_map", format!("0 {gid} 1\n"))?;
    write("uid_map", format!("0 {uid} 1\n"))?;

    // The supervisor's own mount namespace (private, so nothing a run
    // mounts ever propagates to the host), IPC and UTS namespaces shared by
    // its runs, a cgroup namespace rooted at its cgroup, and a time
    // namespace its children (the runs' PID 1) are born into.
    let shared = libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWCGROUP;
    let time_ns = match sys::unshare(shared | libc::CLONE_NEWTIME) {
        Ok(()) => true,
        // Kernels before 5.6 have no time namespaces: run without one.
        Err(libc::EINVAL) => {
            sys::unshare(shared).map_err(|e| SysError::new("unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP)", e))?;
            false
        }
        Err(e) => {
            return Err(SysError::new(
                "unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP|CLONE_NEWTIME)",
                e,
            ))
        }
    };
    sys::mount_make_rprivate_root()
        .map_err(|e| SysError::new("mount(MS_REC|MS_PRIVATE)", e).path("/"))?;
    sys::sethostname(DEFAULT_HOSTNAME.as_bytes()).map_err(|e| SysError::new("sethostname", e))?;
    let loopback_net = loopback_network()?;
    Ok(SupervisorNs { loopback_net, time_ns })
}

/// Creates a network namespace holding only `lo`, up, and returns an fd
/// to it. The supervisor itself stays in the host's network namespace
/// (it could never return to it), so a short-lived child creates it.
fn loopback_network() -> Result<OwnedFd, SysError> {
    let (ready_r, ready_w) = sys::pipe_cloexec().map_err(|e| SysError::new("pipe2", e))?;
    let (done_r, done_w) = sys::pipe_cloexec().map_err(|e| SysError::new("pipe2", e))?;
    match sys::fork().map_err(|e| SysError::new("clone3", e))? {
        Forked::Child => {
            drop(ready_r);
            drop(done_w);
            let code = match sys::unshare(libc::CLONE_NEWNET).and_then(|_| sys::loopback_up()) {
                Ok(()) => 0u8,
                Err(e) => e as u8,
            };
            let _ = sys::write(ready_w.as_raw_fd(), &[code]);
            let mut b = [0u8; 1];
            let _ = sys::read(done_r.as_raw_fd(), &mut b);
            sys::exit(0)
        }
        Forked::Parent { pid, .. } => {
            drop(ready_w);
            drop(done_r);
            let mut b = [0u8; 1];
            let n = sys::read(ready_r.as_raw_fd(), &mut b).unwrap_or(0);
            let result = if n != 1 {
                Err(SysError::new("unshare(CLONE_NEWNET)", libc::ECHILD))
            } else if b[0] != 0 {
                Err(SysError::new("unshare(CLONE_NEWNET) + bringing up lo", b[0] as i32))
            } else {
                let path = format!("/proc/{pid}/ns/net");
                let c = std::ffi::CString::new(path.clone()).expect("no NUL");
                sys::open(&c, libc::O_RDONLY, 0).map_err(|e| SysError::new("open", e).path(path))
            };
            drop(done_w);
            let _ = sys::waitpid(pid, false);
            result
        }
    }
}
