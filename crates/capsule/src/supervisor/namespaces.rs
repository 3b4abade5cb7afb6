//! Namespaces created once per supervisor, shared by its runs: its user,
//! mount, IPC, UTS and time namespaces, and the loopback network where
//! runs share one.

use std::os::fd::{OwnedFd, RawFd};

use crate::error::SysError;
use crate::host::container::{self, Refusal};
use crate::proto::spec::{SubordinateIds, DEFAULT_HOSTNAME};
use crate::sys;

/// The loopback-only network namespace, still being created by a thread.
pub(crate) type PendingNet = std::thread::JoinHandle<Result<OwnedFd, SysError>>;

/// What the supervisor holds after entering its namespaces.
pub(crate) struct SupervisorNs {
    /// A network namespace with only `lo`, up; joined by each run's PID 1
    /// unless the run shares the host's network. Creating it is the
    /// costliest part of the set-up, so it goes on in the background: the
    /// first run's PID 1 builds its mount tree meanwhile. None when each
    /// run makes its own (`Config::own_network`).
    pub loopback_net: Option<PendingNet>,
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
        return "AppArmor restricts unprivileged user namespaces and no profile grants capsule `userns,`: `capsule check` says whether capsule's profile (/etc/apparmor.d/capsule) is loaded and the command that fixes it".into();
    }
    if let Some(h) = container::hint(Refusal::Seccomp, "unshare/clone with CLONE_NEWUSER", errno) {
        return h;
    }
    match errno {
        libc::ENOSPC => "too many user namespaces: raise user.max_user_namespaces".into(),
        libc::EPERM => "the kernel or a security module (seccomp, SELinux, a container runtime) forbids creating user namespaces here; see `capsule check`".into(),
        _ => "see `capsule check`".into(),
    }
}

/// Enters the supervisor's user namespace, mapping the caller (`uid`,
/// `gid` on the host) to root inside.
pub(crate) fn enter_user(uid: u32, gid: u32) -> Result<(), SysError> {
    sys::unshare(libc::CLONE_NEWUSER).map_err(|e| SysError::new("unshare(CLONE_NEWUSER)", e).hint(userns_hint(e)))?;
    let write = |file: &str, data: String| {
        std::fs::write(format!("/proc/self/{file}"), data).map_err(|e| {
            SysError::new("write", e.raw_os_error().unwrap_or(libc::EIO)).path(format!("/proc/self/{file}"))
        })
    };
    write("setgroups", "deny".into())?;
    write("gid_map", format!("0 {gid} 1\n"))?;
    write("uid_map", format!("0 {uid} 1\n"))
}

/// Joins the user namespace `fd`, which the caller made with
/// `newuidmap`/`newgidmap` (`host::subids::Namespace`), instead of making
/// one: it maps the caller (`uid`, `gid` on the host) to root and the
/// subordinate `ids` to 1, checked here.
pub(crate) fn join_user(fd: RawFd, uid: u32, gid: u32, ids: SubordinateIds) -> Result<(), SysError> {
    sys::setns(fd, libc::CLONE_NEWUSER).map_err(|e| {
        SysError::new("setns(CLONE_NEWUSER)", e).hint("the box's user namespace (made with newuidmap) is not joinable")
    })?;
    let read = |file: &str| std::fs::read_to_string(format!("/proc/self/{file}")).unwrap_or_default();
    let lines = |m: String| m.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>();
    let want = |own: u32, sub: u32| vec![format!("0 {own} 1"), format!("1 {sub} 1")];
    if lines(read("uid_map")) != want(uid, ids.uid) || lines(read("gid_map")) != want(gid, ids.gid) {
        return Err(SysError::new("setns(CLONE_NEWUSER)", libc::EINVAL)
            .path("/proc/self/uid_map")
            .hint("the joined user namespace does not map the caller to 0 and the subordinate ids to 1"));
    }
    Ok(())
}

/// A run's own user namespace for a spec with subordinate ids (the
/// supervisor's maps them to 1): `uid_map` and `gid_map` written from
/// here, where the supervisor may map more than its own id (PID 1 could
/// not, from inside), by a child held on `stack`; PID 1 joins it.
pub(crate) fn run_user_ns(stack: &sys::Stack, uid_map: &str, gid_map: &str) -> Result<OwnedFd, SysError> {
    let fill = |pid: i32| -> Result<OwnedFd, SysError> {
        for (file, map) in [("uid_map", uid_map), ("gid_map", gid_map)] {
            let path = format!("/proc/{pid}/{file}");
            std::fs::write(&path, map)
                .map_err(|e| SysError::new("write", e.raw_os_error().unwrap_or(libc::EIO)).path(path.clone()))?;
        }
        let path = format!("/proc/{pid}/ns/user");
        let c = std::ffi::CString::new(path.clone()).expect("no NUL");
        sys::open(&c, libc::O_RDONLY | libc::O_CLOEXEC, 0).map_err(|e| SysError::new("open", e).path(path))
    };
    // SAFETY: `stack` is the run's tracee stack, which nothing uses before its PID 1 exists.
    unsafe { sys::with_user_ns_child(stack, fill) }
        .map_err(|e| SysError::new("clone3(CLONE_NEWUSER) (the run's user namespace)", e))?
}

/// Creates the namespaces shared by every run (the loopback network only
/// with `shared_net`), once in the supervisor's user namespace.
pub(crate) fn enter_shared(shared_net: bool) -> Result<SupervisorNs, SysError> {
    // A time namespace, which the supervisor enters itself (a process
    // alone in its thread group may): its runs' PID 1, which share its
    // memory (CLONE_VM), may only be created in the time namespace the
    // supervisor is in, and the programs are then in it too. First, while
    // the supervisor has no other thread. Kernels before 5.6 have none
    // (EINVAL): without one.
    match sys::unshare(libc::CLONE_NEWTIME) {
        Ok(()) => {
            let ns = sys::open(c"/proc/self/ns/time_for_children", libc::O_RDONLY | libc::O_CLOEXEC, 0)
                .map_err(|e| SysError::new("open", e).path("/proc/self/ns/time_for_children"))?;
            sys::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWTIME)
                .map_err(|e| SysError::new("setns(CLONE_NEWTIME)", e).path("/proc/self/ns/time_for_children"))?;
        }
        Err(libc::EINVAL) => {}
        Err(e) => return Err(SysError::new("unshare(CLONE_NEWTIME)", e)),
    }
    // The loopback network is made by a thread (network namespaces are per
    // thread), in parallel with the rest of the set-up.
    let net = shared_net.then(|| std::thread::spawn(loopback_network));
    // The supervisor's own mount namespace (private, so nothing a run
    // mounts ever propagates to the host), and IPC and UTS namespaces shared
    // by its runs. No cgroup namespace here: each run's program gets one
    // rooted at its own cgroup, and the supervisor keeps the view it needs
    // to move the program there.
    let shared = libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    sys::unshare(shared).map_err(|e| {
        let err = SysError::new("unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS)", e);
        match container::hint(Refusal::Seccomp, "unshare with CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS", e) {
            Some(h) => err.hint(h),
            None => err,
        }
    })?;
    sys::mount_make_rprivate_root().map_err(|e| {
        let err = SysError::new("mount(MS_REC|MS_PRIVATE)", e).path("/");
        // Mounting in a namespace of one's own fails so only under a
        // Landlock domain (which forbids every mount) or an LSM.
        match e == libc::EPERM && capsule_nolibc::sys::prctl_get(libc::PR_GET_NO_NEW_PRIVS as usize) != 0 {
            false if container::apparmor_label().is_some() => {
                match container::hint(Refusal::AppArmorMount, "mount(MS_REC|MS_PRIVATE) in its own namespace", e) {
                    Some(h) => err.hint(h),
                    None => err,
                }
            }
            true => err.hint(
                "this process has no_new_privs set and may not mount even in its own namespaces: a Landlock \
                 ruleset forbids every mount (as does an LSM policy); run capsule from a process outside that \
                 confinement",
            ),
            false => err,
        }
    })?;
    sys::sethostname(DEFAULT_HOSTNAME.as_bytes()).map_err(|e| {
        let err = SysError::new("sethostname", e);
        match container::hint(Refusal::Seccomp, "sethostname in the sandbox's own UTS namespace", e) {
            Some(h) => err.hint(h),
            None if e == libc::EPERM => err.hint(
                "sethostname in the sandbox's own UTS namespace is refused by a seccomp filter or an LSM: see \
                 `capsule check`",
            ),
            None => err,
        }
    })?;
    Ok(SupervisorNs { loopback_net: net })
}

/// A loopback-only network made for one run, by a thread that enters it
/// and ends (the caller stays in its own network).
pub(crate) fn own_network() -> Result<OwnedFd, SysError> {
    std::thread::spawn(loopback_network)
        .join()
        .unwrap_or_else(|_| Err(SysError::new("unshare(CLONE_NEWNET)", libc::EIO)))
}

/// Creates a network namespace holding only `lo`, up, and returns an fd
/// to it. Runs in a thread of its own: the supervisor itself stays in the
/// host's network namespace (it could never return to it) and network
/// namespaces are per thread.
fn loopback_network() -> Result<OwnedFd, SysError> {
    sys::unshare(libc::CLONE_NEWNET).map_err(|e| SysError::new("unshare(CLONE_NEWNET)", e))?;
    sys::loopback_up().map_err(|e| SysError::new("ioctl(SIOCSIFFLAGS, lo up)", e))?;
    sys::open(c"/proc/thread-self/ns/net", libc::O_RDONLY, 0)
        .map_err(|e| SysError::new("open", e).path("/proc/thread-self/ns/net"))
}
