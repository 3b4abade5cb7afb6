//! Signal dispositions, masks and signalfds (the kernel's ABI, no libc).

use std::os::fd::{OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, read, SysResult};

/// The signals glibc keeps for itself (SIGCANCEL, SIGSETXID): its
/// `sigaction` and `sigaddset` refuse them with EINVAL, and so do the
/// wrappers here, so that they behave as the libc calls they replace.
fn glibc_reserved(sig: i32) -> bool {
    sig == 32 || sig == 33
}

/// The kernel's `struct sigaction` on x86_64 and aarch64 (`rt_sigaction` with a
/// sigsetsize of 8).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Sets the disposition of `sig` to `SIG_DFL` or `SIG_IGN` (no handler is
/// ever run, so no `SA_RESTORER` trampoline is needed).
fn set_disposition(sig: i32, handler: libc::sighandler_t) -> SysResult<()> {
    debug_assert!(handler == libc::SIG_DFL || handler == libc::SIG_IGN);
    if glibc_reserved(sig) {
        return Err(libc::EINVAL);
    }
    let act = KernelSigaction { handler, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: act is a valid kernel sigaction of the size the sigsetsize
    // 8 implies; the old action is not asked for (NULL).
    cvt(unsafe { raw_syscall(libc::SYS_rt_sigaction, [sig as u64, &act as *const KernelSigaction as u64, 0, 8, 0, 0]) })
        .map(drop)
}

/// Resets every catchable signal to its default action and unblocks all
/// signals: dispositions set to "ignore" and the signal mask survive execve.
pub fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // Errors (for the signals glibc reserves) are harmless and ignored.
        let _ = set_disposition(sig, libc::SIG_DFL);
    }
    set_sigmask(&[], libc::SIG_SETMASK);
}

/// Sets `signals` to their default action.
pub fn default_signals(signals: &[i32]) {
    for &sig in signals {
        let _ = set_disposition(sig, libc::SIG_DFL);
    }
}

/// The kernel signal set of `signals` (bit `sig - 1`); invalid and
/// glibc-reserved numbers are left out, as `sigaddset` refuses them.
fn sigset_of(signals: &[i32]) -> u64 {
    signals.iter().filter(|&&s| (1..=64).contains(&s) && !glibc_reserved(s)).fold(0, |set, &s| set | 1u64 << (s - 1))
}

fn set_sigmask(signals: &[i32], how: i32) {
    let set = sigset_of(signals);
    // SAFETY: set is an 8-byte kernel sigset alive for the call; the old
    // mask is not asked for (NULL).
    unsafe { raw_syscall(libc::SYS_rt_sigprocmask, [how as u64, &set as *const u64 as u64, 0, 8, 0, 0]) };
}

/// Every signal blocked in the calling thread until dropped, which restores
/// the mask it found: a thread started meanwhile inherits the full mask.
pub struct BlockedSignals(u64);

impl BlockedSignals {
    pub fn all() -> BlockedSignals {
        let set = !0u64;
        let mut old = 0u64;
        // SAFETY: both are 8-byte kernel sigsets alive for the call.
        unsafe {
            raw_syscall(
                libc::SYS_rt_sigprocmask,
                [libc::SIG_BLOCK as u64, &set as *const u64 as u64, &mut old as *mut u64 as u64, 8, 0, 0],
            )
        };
        BlockedSignals(old)
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: an 8-byte kernel sigset alive for the call; the old mask is not asked for.
        unsafe {
            raw_syscall(libc::SYS_rt_sigprocmask, [libc::SIG_SETMASK as u64, &self.0 as *const u64 as u64, 0, 8, 0, 0])
        };
    }
}

/// Unblocks `signals`.
pub fn unblock_signals(signals: &[i32]) {
    set_sigmask(signals, libc::SIG_UNBLOCK);
}

/// Blocks `signals` and returns a signalfd that reports them.
pub fn signalfd_for(signals: &[i32]) -> SysResult<OwnedFd> {
    set_sigmask(signals, libc::SIG_BLOCK);
    let set = sigset_of(signals);
    // SAFETY: set is an 8-byte kernel sigset alive for the call; fd -1 (a
    // new signalfd) is sign-extended.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_signalfd4,
            [-1i32 as u64, &set as *const u64 as u64, 8, (libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as u64, 0, 0],
        )
    })?;
    Ok(owned(fd))
}

/// Drains a non-blocking signalfd.
pub fn drain_signalfd(fd: RawFd) {
    let mut buf = [0u8; 128 * 8];
    while let Ok(n) = read(fd, &mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Sets SIGPIPE to "ignore" for the calling process (the supervisor writes
/// to sockets whose peer may be gone).
pub fn ignore_sigpipe() {
    let _ = set_disposition(libc::SIGPIPE, libc::SIG_IGN);
}
