//! Clocks, timerfds and polling.

use std::mem::MaybeUninit;
use std::os::fd::{OwnedFd, RawFd};
use std::ptr;

use super::{cvt, owned, raw_syscall, retry, SysResult};

/// Seconds of CLOCK_REALTIME_COARSE: the clock file timestamps are taken
/// from (a tick behind the precise one at most).
pub fn realtime_coarse_s() -> i64 {
    let mut ts = MaybeUninit::<libc::timespec>::zeroed();
    // SAFETY: as in clock_monotonic_ns: the vDSO, a valid clock and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, ts.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by clock_gettime.
    unsafe { ts.assume_init() }.tv_sec
}

pub fn clock_monotonic_ns() -> u64 {
    let mut ts = MaybeUninit::<libc::timespec>::zeroed();
    // SAFETY: ts is a writable timespec. Through libc, for the vDSO (no
    // system call): with CLOCK_MONOTONIC and a valid pointer it cannot
    // fail, so it leaves errno alone like the raw wrappers.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, ts.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by clock_gettime.
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of process `pid` (of the caller's PID namespace), all its threads, the dead ones too, ns: its
/// process CPU clock (`clock_getcpuclockid`), which the kernel lets anyone read by a thread-group leader's pid.
pub fn process_cpu_ns(pid: i32) -> SysResult<u64> {
    // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED): the scheduler's exact runtime.
    let clock = ((!pid) << 3) | 2;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a writable timespec; a bad clock id is EINVAL, a gone process ESRCH.
    cvt(unsafe {
        raw_syscall(libc::SYS_clock_gettime, [clock as u64, &mut ts as *mut libc::timespec as u64, 0, 0, 0, 0])
    })?;
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

pub fn timerfd() -> SysResult<OwnedFd> {
    // SAFETY: plain syscall on integers.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_timerfd_create,
            [libc::CLOCK_MONOTONIC as u64, (libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) as u64, 0, 0, 0, 0],
        )
    })?;
    Ok(owned(fd))
}

/// Arms a timerfd to fire once at the absolute CLOCK_MONOTONIC time `at_ns`.
pub fn timerfd_at(fd: RawFd, at_ns: u64) -> SysResult<()> {
    let at_ns = at_ns.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: (at_ns / 1_000_000_000) as _, tv_nsec: (at_ns % 1_000_000_000) as _ },
    };
    // SAFETY: spec is a valid itimerspec; old value not requested (NULL).
    cvt(unsafe {
        raw_syscall(
            libc::SYS_timerfd_settime,
            [fd as u64, libc::TFD_TIMER_ABSTIME as u64, &spec as *const libc::itimerspec as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// A poll set being built: the descriptors, and what each stands for.
pub struct PollSet<T> {
    pub fds: Vec<libc::pollfd>,
    pub tokens: Vec<T>,
}

impl<T> PollSet<T> {
    /// Sized once for the usual set (no regrowth on every wake-up).
    pub fn with_capacity(n: usize) -> Self {
        PollSet { fds: Vec::with_capacity(n), tokens: Vec::with_capacity(n) }
    }

    pub fn add(&mut self, fd: std::os::fd::RawFd, events: i16, token: T) {
        self.fds.push(libc::pollfd { fd, events, revents: 0 });
        self.tokens.push(token);
    }
}

/// poll with a timeout of nanosecond resolution (None: no timeout).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> SysResult<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    retry(|| {
        // The kernel writes the time left back into the timespec; like
        // glibc's wrapper, every call gets a fresh copy of the timeout.
        let mut t = ts;
        let tsp = t.as_mut().map_or(ptr::null_mut(), |t| t as *mut libc::timespec);
        // SAFETY: fds is a valid array of fds.len() pollfd structs; tsp is
        // null or points at a writable timespec alive for the call; no
        // signal mask is passed (NULL; sigsetsize 8 as glibc passes).
        cvt(unsafe { raw_syscall(libc::SYS_ppoll, [fds.as_mut_ptr() as u64, fds.len() as u64, tsp as u64, 0, 8, 0]) })
    })
    .map(|n| n as usize)
}

/// poll(2) over a fixed set; fills `revents`.
#[cfg(target_arch = "x86_64")]
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> SysResult<usize> {
    retry(|| {
        // SAFETY: fds is a valid array of fds.len() pollfd structs; a negative
        // timeout (infinite) is sign-extended.
        cvt(unsafe {
            raw_syscall(libc::SYS_poll, [fds.as_mut_ptr() as u64, fds.len() as u64, timeout_ms as u64, 0, 0, 0])
        })
    })
    .map(|n| n as usize)
}

/// poll(2) over a fixed set where the kernel has only ppoll (aarch64): a
/// negative timeout waits without one.
#[cfg(target_arch = "aarch64")]
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> SysResult<usize> {
    let timeout = u64::try_from(timeout_ms).ok().map(std::time::Duration::from_millis);
    ppoll(fds, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    use crate::sys::{pipe, write_all};

    #[test]
    fn ppoll_waits_its_timeout_and_sees_readable() {
        let (r, w) = pipe().unwrap();
        let mut pfd = [libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let t = std::time::Instant::now();
        assert_eq!(ppoll(&mut pfd, Some(std::time::Duration::from_micros(1500))).unwrap(), 0);
        assert!(t.elapsed() >= std::time::Duration::from_micros(1500), "woke early: {:?}", t.elapsed());
        write_all(w.as_raw_fd(), b"x").unwrap();
        assert_eq!(ppoll(&mut pfd, None).unwrap(), 1);
        assert_eq!(pfd[0].revents & libc::POLLIN, libc::POLLIN);
    }
}
