//! Every raw system call capsule makes, and every `unsafe` block, lives in
//! this module: one file per kernel facility (`fd`, `file`, `mount`,
//! `process`, `mem`, `signal`, `socket`, ...), re-exported here, and the
//! `probe` submodule used by `capsule check`.
//!
//! Wrappers are thin: they take prepared, NUL-terminated arguments and
//! return `Result<_, Errno>` without allocating, so that the child path
//! after `clone` (PID 1 and the tracee) can call them. The typed,
//! allocating APIs live above it (`host`, `plan`, `supervisor`, ...).
//!
//! Wrappers make their system calls with [`raw_syscall`] (the `syscall`
//! instruction of `capsule_nolibc::sys`, which the no-libc front end uses)
//! and turn the kernel's -errno into `Err` with [`cvt`]: they never read
//! or write errno.
//! PID 1 is a CLONE_VM child sharing the supervisor's thread-local storage,
//! errno included, and runs concurrently with it, so a libc wrapper setting
//! errno there would race with the supervisor's own errno reads. The
//! exceptions, supervisor or client side only: [`spawn_supervisor`]
//! (posix_spawn), and the glibc calls of the `layer`, `probe` and `tty`
//! submodules other than [`tty::set_controlling_tty`].

mod cpu;
mod fd;
mod file;
pub mod landlock;
pub mod layer;
mod mem;
mod mount;
mod net;
pub mod probe;
mod process;
pub mod seccomp;
mod signal;
mod socket;
mod time;
pub mod tty;
pub mod vm;

pub use cpu::*;
pub use fd::*;
pub use file::*;
pub use mem::*;
pub use mount::*;
pub use net::*;
pub use process::*;
pub use seccomp::{seccomp_install, seccomp_notif_continue, seccomp_notif_id_valid, seccomp_notif_recv, SeccompNotif};
pub use signal::*;
pub use socket::*;
pub use time::*;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A raw errno value.
pub type Errno = i32;
pub type SysResult<T> = Result<T, Errno>;

/// A raw result as a SysResult: -4095..=-1 is -errno.
fn cvt(ret: i64) -> SysResult<i64> {
    if (-4095..0).contains(&ret) {
        Err(-ret as Errno)
    } else {
        Ok(ret)
    }
}

/// Retries a call interrupted by a signal.
fn retry<T>(mut f: impl FnMut() -> SysResult<T>) -> SysResult<T> {
    loop {
        match f() {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

/// Takes ownership of a raw fd returned by a successful syscall.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: callers pass only fds just returned by the kernel, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// A system call made without libc: the kernel's raw result, -errno on
/// failure. errno is left alone, which a CLONE_VM child sharing its
/// parent's thread-local storage needs (see [`with_vm_child`]).
///
/// # Safety
/// The arguments must be valid for system call `nr`, like for `syscall(2)`.
unsafe fn raw_syscall(nr: libc::c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the caller's contract is syscall6's (usize is u64 on x86_64).
    unsafe { capsule_nolibc::sys::syscall6(nr as usize, a.map(|x| x as usize)) as i64 }
}

#[cfg(test)]
mod tests {
    use std::ptr;

    use super::*;

    /// The calling thread's errno.
    pub(crate) fn errno() -> Errno {
        // SAFETY: __errno_location returns a valid thread-local pointer.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn failing_wrappers_leave_errno_alone() {
        const MARK: Errno = 12345;
        // SAFETY: setting errno, a thread-local int.
        unsafe { *libc::__errno_location() = MARK };
        close(-1);
        assert_eq!(errno(), MARK, "close");
        assert_eq!(open(c"/nonexistent/capsule-errno-test", libc::O_RDONLY, 0).err(), Some(libc::ENOENT));
        let mut buf = [0u8; 8];
        assert_eq!(read(-1, &mut buf), Err(libc::EBADF));
        assert_eq!(write(-1, b"x"), Err(libc::EBADF));
        assert_eq!(unshare(0x1), Err(libc::EINVAL), "an exit-signal bit is no unshare flag");
        assert_eq!(dup2(-1, 100), Err(libc::EBADF));
        assert_eq!(set_cloexec(-1, true), Err(libc::EBADF));
        assert_eq!(fd_mode(-1), Err(libc::EBADF));
        assert_eq!(mkdirat(libc::AT_FDCWD, c"/nonexistent/capsule-errno-test", 0o700), Err(libc::ENOENT));
        assert_eq!(waitpid(i32::MAX, true), Err(libc::ECHILD));
        assert_eq!(kill(i32::MAX, 0), Err(libc::ESRCH));
        assert_eq!(Stack::new(0).err(), Some(libc::EINVAL));
        assert_eq!(timerfd_at(-1, 1), Err(libc::EBADF));
        assert_eq!(tty::set_controlling_tty(-1), Err(libc::EBADF));
        assert!(landlock::restrict_self(-1).is_err());
        // SAFETY: both arrays are just their null.
        assert_eq!(unsafe { execve(c"/nonexistent/capsule-errno-test", &[ptr::null()], &[ptr::null()]) }, libc::ENOENT);
        assert_eq!(errno(), MARK, "a failing wrapper changed errno");
    }
}
