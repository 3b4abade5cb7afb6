//! In-process probes: they only query the kernel.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::{c_int, c_uint};

use super::{
    last_errno, wait_status, CloneArgs, Failure, Outcome, Step, CLONE_PIDFD, CLOSE_RANGE_CLOEXEC,
    LANDLOCK_CREATE_RULESET_VERSION, RESOLVE_NO_MAGICLINKS, SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_LOG, SECCOMP_RET_TRAP, SECCOMP_RET_USER_NOTIF,
};

/// The caller's real and effective ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub euid: u32,
    pub gid: u32,
    pub egid: u32,
}

pub fn ids() -> Ids {
    // SAFETY: these getters have no preconditions and cannot fail.
    unsafe { Ids { uid: libc::getuid(), euid: libc::geteuid(), gid: libc::getgid(), egid: libc::getegid() } }
}

/// The Landlock ABI version, or the errno.
pub fn landlock_abi() -> Result<u32, Failure> {
    // SAFETY: a NULL attr with size 0 and the VERSION flag is the documented
    // way to query the ABI; nothing is created.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(Failure::new(Step::Landlock, 0, last_errno()))
    } else {
        Ok(r as u32)
    }
}

/// pidfd_open(getpid()) and pidfd_send_signal(pidfd, 0).
pub fn pidfd_open() -> Outcome {
    // SAFETY: pidfd_open takes no pointers; the fd is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0 as c_uint) };
    if fd < 0 {
        return Err(Failure::new(Step::PidfdOpen, 0, last_errno()));
    }
    let fd = fd as c_int;
    // SAFETY: signal 0 only checks deliverability; NULL info is allowed.
    let r = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd, 0 as c_int, std::ptr::null::<libc::siginfo_t>(), 0 as c_uint)
    };
    let e = last_errno();
    // SAFETY: fd is ours, closed once.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(Failure::new(Step::PidfdSendSignal, 0, e));
    }
    Ok(())
}

/// clone3(CLONE_PIDFD) of a child that exits at once; reaps it.
pub fn clone3() -> Outcome {
    let mut pidfd: c_int = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD,
        pidfd: &mut pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    // SAFETY: without CLONE_VM this is a fork: the child gets a copy of this
    // stack, returns from the syscall and immediately _exits without touching
    // anything else. args and pidfd are live for the call.
    let pid = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if pid == 0 {
        // SAFETY: terminating the clone3 probe child.
        unsafe { libc::_exit(0) }
    }
    if pid < 0 {
        return Err(Failure::new(Step::Clone3, 0, last_errno()));
    }
    let waited = wait_status(pid as libc::pid_t);
    if pidfd >= 0 {
        // SAFETY: the kernel stored a pidfd we own; closed once.
        unsafe { libc::close(pidfd) };
    }
    waited.map(|_| ()).map_err(|e| Failure::new(Step::Wait, 0, e))
}

/// close_range with CLOSE_RANGE_CLOEXEC, then a plain one, on a fd of our own.
pub fn close_range() -> Outcome {
    // SAFETY: static NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Failure::new(Step::CloseRange, 0, last_errno()));
    }
    // SAFETY: only touches fd, which we own (it is already close-on-exec).
    let r = unsafe { libc::syscall(libc::SYS_close_range, fd as c_uint, fd as c_uint, CLOSE_RANGE_CLOEXEC) };
    if r < 0 {
        let e = last_errno();
        // SAFETY: fd is still ours.
        unsafe { libc::close(fd) };
        return Err(Failure::new(Step::CloseRange, 0, e));
    }
    // SAFETY: closes only fd, which we own.
    let r = unsafe { libc::syscall(libc::SYS_close_range, fd as c_uint, fd as c_uint, 0 as c_uint) };
    if r < 0 {
        let e = last_errno();
        // SAFETY: close_range failed, so fd is still ours.
        unsafe { libc::close(fd) };
        return Err(Failure::new(Step::CloseRange, 1, e));
    }
    Ok(())
}

/// openat2("/", O_PATH, RESOLVE_NO_MAGICLINKS).
pub fn openat2() -> Outcome {
    crate::sys::openat2(libc::AT_FDCWD, c"/", libc::O_PATH, 0, RESOLVE_NO_MAGICLINKS)
        .map(drop)
        .map_err(|e| Failure::new(Step::Openat2, 0, e))
}

/// Which seccomp return actions the kernel supports (SECCOMP_GET_ACTION_AVAIL).
pub fn seccomp_actions() -> Vec<(&'static str, bool)> {
    [
        ("kill_process", SECCOMP_RET_KILL_PROCESS),
        ("trap", SECCOMP_RET_TRAP),
        ("errno", SECCOMP_RET_ERRNO),
        ("user_notif", SECCOMP_RET_USER_NOTIF),
        ("log", SECCOMP_RET_LOG),
    ]
    .into_iter()
    .map(|(name, action)| {
        // SAFETY: action is a live u32; the call only reads it.
        let r =
            unsafe { libc::syscall(libc::SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0 as c_uint, &action as *const u32) };
        (name, r == 0)
    })
    .collect()
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// statfs(2) `f_type` of the file system holding `path`.
pub fn fs_magic(path: &Path) -> io::Result<i64> {
    let p = cpath(path)?;
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: p is NUL-terminated and st is a live statfs buffer.
    if unsafe { libc::statfs(p.as_ptr(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64)
}

/// Whether the caller (by effective ids) may write `path`.
pub fn can_write(path: &Path) -> io::Result<bool> {
    let p = cpath(path)?;
    // SAFETY: p is NUL-terminated.
    if unsafe { libc::faccessat(libc::AT_FDCWD, p.as_ptr(), libc::W_OK, libc::AT_EACCESS) } == 0 {
        return Ok(true);
    }
    match last_errno() {
        libc::EACCES | libc::EPERM | libc::EROFS => Ok(false),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}
