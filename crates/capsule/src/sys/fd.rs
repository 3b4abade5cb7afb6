//! Descriptors: close, dup, fcntl flags, read and write, pipes, splice, eventfds, locks.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, retry, SysResult};

pub const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

/// Takes ownership again of an fd released with `into_raw_fd`.
///
/// # Safety
/// `fd` is open and nothing else owns it (it is closed when the result drops).
pub unsafe fn reclaim_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller's contract.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

pub fn close(fd: RawFd) {
    // SAFETY: closing an fd number has no memory-safety effect; callers
    // only close fds they own.
    unsafe { raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) };
}

#[cfg(target_arch = "x86_64")]
pub fn dup2(old: RawFd, new: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on integer arguments.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_dup2, [old as u64, new as u64, 0, 0, 0, 0]) })).map(drop)
}

/// dup2(2) where the kernel has only dup3 (aarch64), as glibc makes it:
/// the same number checks that `old` is open, dup3 would fail (EINVAL).
#[cfg(target_arch = "aarch64")]
pub fn dup2(old: RawFd, new: RawFd) -> SysResult<()> {
    if old == new {
        return fcntl(old, libc::F_GETFD, 0).map(drop);
    }
    dup3(old, new, 0)
}

/// dup3(2) with `O_CLOEXEC` or 0.
pub fn dup3(old: RawFd, new: RawFd, flags: i32) -> SysResult<()> {
    // SAFETY: plain syscall on integer arguments.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_dup3, [old as u64, new as u64, flags as u64, 0, 0, 0]) })).map(drop)
}

/// A close-on-exec duplicate at the lowest free number ≥ `min` (child side: a bare number).
pub fn dup_at_least(fd: RawFd, min: RawFd) -> SysResult<RawFd> {
    fcntl(fd, libc::F_DUPFD_CLOEXEC, min)
}

/// Whether `fd` is open.
pub fn is_open(fd: RawFd) -> bool {
    fcntl(fd, libc::F_GETFD, 0).is_ok()
}

/// Marks every fd ≥ `first` close-on-exec (close_range, Linux ≥ 5.11).
pub fn cloexec_from(first: u32) -> SysResult<()> {
    // SAFETY: plain syscall on integer arguments.
    cvt(unsafe {
        raw_syscall(libc::SYS_close_range, [first as u64, u32::MAX as u64, CLOSE_RANGE_CLOEXEC as u64, 0, 0, 0])
    })
    .map(drop)
}

/// Closes every fd ≥ `first`.
pub fn close_from(first: u32) -> SysResult<()> {
    // SAFETY: plain syscall; callers own every fd in the range.
    cvt(unsafe { raw_syscall(libc::SYS_close_range, [first as u64, u32::MAX as u64, 0, 0, 0, 0]) }).map(drop)
}

/// fcntl(2) with an integer argument.
pub(super) fn fcntl(fd: RawFd, cmd: i32, arg: i32) -> SysResult<i32> {
    // SAFETY: every command capsule uses takes an integer argument (or none).
    cvt(unsafe { raw_syscall(libc::SYS_fcntl, [fd as u64, cmd as u64, arg as u64, 0, 0, 0]) }).map(|r| r as i32)
}

pub fn set_cloexec(fd: RawFd, on: bool) -> SysResult<()> {
    let flags = fcntl(fd, libc::F_GETFD, 0)?;
    let new = if on { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
    fcntl(fd, libc::F_SETFD, new).map(drop)
}

/// The access mode of an open description (`O_RDONLY`, `O_WRONLY` or `O_RDWR`).
pub fn fd_access_mode(fd: RawFd) -> SysResult<i32> {
    fcntl(fd, libc::F_GETFL, 0).map(|f| f & libc::O_ACCMODE)
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    retry(|| {
        // SAFETY: buf is a valid writable region of buf.len() bytes.
        cvt(unsafe { raw_syscall(libc::SYS_read, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]) })
    })
    .map(|n| n as usize)
}

pub fn write(fd: RawFd, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: buf is a valid readable region of buf.len() bytes.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_write, [fd as u64, buf.as_ptr() as u64, buf.len() as u64, 0, 0, 0]) }))
        .map(|n| n as usize)
}

pub fn write_all(fd: RawFd, mut buf: &[u8]) -> SysResult<()> {
    while !buf.is_empty() {
        let n = write(fd, buf)?;
        if n == 0 {
            return Err(libc::EIO);
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// Copies everything readable from `from` to `to` with a stack buffer.
pub fn copy_fd(from: RawFd, to: RawFd) -> SysResult<()> {
    let mut buf = [0u8; 16384];
    loop {
        let n = read(from, &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        write_all(to, &buf[..n])?;
    }
}

/// flock(LOCK_EX), waiting for it.
pub fn flock_exclusive(fd: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_flock, [fd as u64, libc::LOCK_EX as u64, 0, 0, 0, 0]) })).map(drop)
}

/// flock without waiting: `Err(EWOULDBLOCK)` when another holds it.
pub fn flock_nb(fd: RawFd, exclusive: bool) -> SysResult<()> {
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    // SAFETY: plain syscall on integers.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_flock, [fd as u64, op as u64, 0, 0, 0, 0]) })).map(drop)
}

pub fn pread(fd: RawFd, buf: &mut [u8], offset: i64) -> SysResult<usize> {
    retry(|| {
        // SAFETY: buf is a valid writable region of buf.len() bytes.
        cvt(unsafe {
            raw_syscall(libc::SYS_pread64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, offset as u64, 0, 0])
        })
    })
    .map(|n| n as usize)
}

/// dup(2) to a close-on-exec descriptor above 2.
pub fn dup_cloexec(fd: RawFd) -> SysResult<OwnedFd> {
    fcntl(fd, libc::F_DUPFD_CLOEXEC, 3).map(|fd| owned(fd as _))
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    pipe2(libc::O_CLOEXEC)
}

/// pipe2(2) with `flags` (`O_CLOEXEC`, `O_NONBLOCK` for both ends, ...):
/// (read end, write end).
pub fn pipe2(flags: i32) -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints.
    cvt(unsafe { raw_syscall(libc::SYS_pipe2, [fds.as_mut_ptr() as u64, flags as u64, 0, 0, 0, 0]) })?;
    Ok((owned(fds[0] as _), owned(fds[1] as _)))
}

/// splice(2) of up to `len` bytes from `from` to `to` (one of them a
/// pipe) at their file positions, never blocking on a pipe
/// (SPLICE_F_NONBLOCK); Ok(0) at the end of `from`.
pub fn splice(from: RawFd, to: RawFd, len: usize) -> SysResult<usize> {
    retry(|| {
        // SAFETY: null offsets (the descriptors' own positions); no memory is
        // passed to the kernel.
        cvt(unsafe {
            raw_syscall(
                libc::SYS_splice,
                [from as u64, 0, to as u64, 0, len as u64, (libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE) as u64],
            )
        })
    })
    .map(|n| n as usize)
}

/// Sets a pipe's capacity (F_SETPIPE_SZ); returns the capacity it got.
pub fn set_pipe_size(fd: RawFd, size: usize) -> SysResult<usize> {
    fcntl(fd, libc::F_SETPIPE_SZ, size as libc::c_int).map(|n| n as usize)
}

/// A close-on-exec, non-blocking eventfd.
pub fn eventfd() -> SysResult<OwnedFd> {
    // SAFETY: plain syscall, result checked.
    cvt(unsafe { raw_syscall(libc::SYS_eventfd2, [0, (libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) as u64, 0, 0, 0, 0]) })
        .map(owned)
}

/// Adds 1 to an eventfd (child side too).
pub fn eventfd_signal(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    let _ = write(fd, &one);
}

/// Sets or clears O_NONBLOCK.
pub fn set_nonblocking(fd: RawFd, on: bool) -> SysResult<()> {
    let flags = fcntl(fd, libc::F_GETFL, 0)?;
    let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
    fcntl(fd, libc::F_SETFL, flags).map(drop)
}

/// Closes every descriptor from 3 up except those in `keep`, which must be
/// sorted (child side: no allocation).
pub fn close_all_except(keep: &[RawFd]) {
    let mut from: u32 = 3;
    for &fd in keep.iter() {
        if fd < 0 || (fd as u32) < from {
            continue;
        }
        if fd as u32 > from {
            // SAFETY: close_range on a range of fds this process owns.
            unsafe { raw_syscall(libc::SYS_close_range, [from as u64, (fd as u32 - 1) as u64, 0, 0, 0, 0]) };
        }
        from = fd as u32 + 1;
    }
    // SAFETY: as above.
    unsafe { raw_syscall(libc::SYS_close_range, [from as u64, u32::MAX as u64, 0, 0, 0, 0]) };
}

/// A close-on-exec epoll instance.
pub fn epoll_create() -> SysResult<OwnedFd> {
    // SAFETY: plain syscall, result checked.
    cvt(unsafe { raw_syscall(libc::SYS_epoll_create1, [libc::EPOLL_CLOEXEC as u64, 0, 0, 0, 0, 0]) }).map(owned)
}

/// Adds (`add`) or removes `fd` to or from `epfd`, reporting `events` with `data`.
pub fn epoll_ctl(epfd: RawFd, add: bool, fd: RawFd, events: u32, data: u64) -> SysResult<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    let op = if add { libc::EPOLL_CTL_ADD } else { libc::EPOLL_CTL_DEL };
    // SAFETY: `ev` is a valid epoll_event for the call's duration.
    cvt(unsafe {
        raw_syscall(libc::SYS_epoll_ctl, [epfd as u64, op as u64, fd as u64, &mut ev as *mut _ as u64, 0, 0])
    })
    .map(drop)
}

/// Waits for events on `epfd` (`timeout_ms` -1: no limit); the `data` of each, in `out`.
pub fn epoll_wait(epfd: RawFd, out: &mut Vec<u64>, timeout_ms: i32) -> SysResult<()> {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 32];
    // SAFETY: the kernel writes at most `evs.len()` entries into `evs`.
    let n = cvt(unsafe {
        raw_syscall(
            libc::SYS_epoll_pwait,
            [epfd as u64, evs.as_mut_ptr() as u64, evs.len() as u64, timeout_ms as i64 as u64, 0, 8],
        )
    })?;
    out.clear();
    out.extend(evs[..n as usize].iter().map(|e| e.u64));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    use crate::sys::{exit, fd_mode, fork, waitpid, Forked};

    #[test]
    fn close_all_except_keeps_the_listed() {
        let (a, b) = pipe().unwrap();
        let (c, d) = pipe().unwrap();
        let mut keep = [b.as_raw_fd(), c.as_raw_fd()];
        keep.sort_unstable();
        // SAFETY: the child makes raw syscalls only and ends with exit.
        match unsafe { fork() }.unwrap() {
            Forked::Child => {
                close_all_except(&keep);
                let ok = fd_mode(b.as_raw_fd()).is_ok()
                    && fd_mode(c.as_raw_fd()).is_ok()
                    && fd_mode(a.as_raw_fd()).is_err()
                    && fd_mode(d.as_raw_fd()).is_err()
                    && fd_mode(2).is_ok();
                exit(if ok { 0 } else { 1 })
            }
            Forked::Parent { pid, .. } => {
                let (_, st) = waitpid(pid, false).unwrap().unwrap();
                assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "status {st}");
            }
        }
    }
}
