//! Terminals: pseudo-terminal pairs (`/dev/ptmx`, `TIOCSPTLCK`,
//! `TIOCGPTPEER`), termios and window sizes, the controlling terminal
//! (`TIOCSCTTY`). Thin like the rest of `sys`; [`set_controlling_tty`] is
//! called by the tracee after clone and allocates nothing. The client side
//! of `capsule shell` and `capsule run --pty` is built on these.

use std::mem::MaybeUninit;
use std::os::fd::{OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, retry, Errno, SysResult};

/// A libc call's result: negative is failure with errno set. Reads errno,
/// so for the supervisor and client side only; [`set_controlling_tty`],
/// which the tracee calls, goes through `raw_syscall` instead.
fn check_int(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 {
        // SAFETY: __errno_location returns a valid thread-local pointer.
        Err(unsafe { *libc::__errno_location() } as Errno)
    } else {
        Ok(ret)
    }
}

/// Whether `fd` is a terminal (`TCGETS` succeeds, as isatty(3)).
pub fn isatty(fd: RawFd) -> bool {
    tcgetattr(fd).is_ok()
}

/// A new pseudo-terminal pair: the master (`/dev/ptmx`, unlocked) and its
/// peer, opened from the master with `TIOCGPTPEER` (Linux ≥ 4.13): the
/// peer comes from the master's own devpts instance, no `/dev/pts/N` path
/// is looked up. Both close-on-exec; neither becomes anyone's controlling
/// terminal (`O_NOCTTY`).
pub fn open_pty() -> SysResult<(OwnedFd, OwnedFd)> {
    let master = super::open(c"/dev/ptmx", libc::O_RDWR | libc::O_NOCTTY, 0)?;
    let m = std::os::fd::AsRawFd::as_raw_fd(&master);
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int through the pointer.
    check_int(unsafe { libc::ioctl(m, libc::TIOCSPTLCK, &unlock as *const libc::c_int) })?;
    // SAFETY: TIOCGPTPEER takes the open flags as an integer argument and
    // returns a new descriptor, owned below.
    let peer = check_int(unsafe {
        libc::ioctl(m, libc::TIOCGPTPEER, (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as libc::c_ulong)
    })?;
    Ok((master, owned(peer as _)))
}

/// The terminal's attributes.
pub fn tcgetattr(fd: RawFd) -> SysResult<libc::termios> {
    let mut t = MaybeUninit::<libc::termios>::uninit();
    // SAFETY: TCGETS fills a whole termios; read only on success.
    check_int(unsafe { libc::tcgetattr(fd, t.as_mut_ptr()) })?;
    // SAFETY: initialized by the successful call above.
    Ok(unsafe { t.assume_init() })
}

/// Sets the terminal's attributes at once (`TCSANOW`: never waits for
/// output to drain, which a reader that stopped reading could make last
/// forever).
pub fn tcsetattr(fd: RawFd, t: &libc::termios) -> SysResult<()> {
    // SAFETY: t is a valid termios.
    retry(|| check_int(unsafe { libc::tcsetattr(fd, libc::TCSANOW, t) })).map(drop)
}

/// `t` in raw mode, as cfmakeraw(3): bytes pass one by one, unechoed, no
/// signals from keys (^C, ^Z, ^\ are plain bytes), no output processing.
pub fn raw(t: &libc::termios) -> libc::termios {
    let mut r = *t;
    r.c_iflag &= !(libc::IGNBRK
        | libc::BRKINT
        | libc::PARMRK
        | libc::ISTRIP
        | libc::INLCR
        | libc::IGNCR
        | libc::ICRNL
        | libc::IXON);
    r.c_oflag &= !libc::OPOST;
    r.c_lflag &= !(libc::ECHO | libc::ECHONL | libc::ICANON | libc::ISIG | libc::IEXTEN);
    r.c_cflag &= !(libc::CSIZE | libc::PARENB);
    r.c_cflag |= libc::CS8;
    r.c_cc[libc::VMIN] = 1;
    r.c_cc[libc::VTIME] = 0;
    r
}

/// The terminal's window size (`TIOCGWINSZ`).
pub fn get_winsize(fd: RawFd) -> SysResult<libc::winsize> {
    let mut w = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills one winsize.
    check_int(unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut w as *mut libc::winsize) })?;
    Ok(w)
}

/// Sets the window size (`TIOCSWINSZ`); on a pty master the kernel sends
/// SIGWINCH to the foreground process group of the peer when it changed.
pub fn set_winsize(fd: RawFd, w: &libc::winsize) -> SysResult<()> {
    // SAFETY: TIOCSWINSZ reads one winsize.
    check_int(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, w as *const libc::winsize) }).map(drop)
}

/// Makes the terminal `fd` the calling session leader's controlling
/// terminal (`TIOCSCTTY`, never stealing one from another session).
pub fn set_controlling_tty(fd: RawFd) -> SysResult<()> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal).
    cvt(unsafe { raw_syscall(libc::SYS_ioctl, [fd as u64, libc::TIOCSCTTY, 0, 0, 0, 0]) }).map(drop)
}

/// The next signal reported by a non-blocking signalfd (see
/// [`super::signalfd_for`]), None when none is pending.
pub fn next_signal(sigfd: RawFd) -> Option<i32> {
    let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
    match super::read(sigfd, &mut info) {
        Ok(n) if n == info.len() => Some(u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32),
        _ => None,
    }
}

/// Dies of `sig` as its default action would (unblocked, default
/// disposition, raised); exits with 128 + `sig` when that does not kill.
pub fn die_of_signal(sig: i32) -> ! {
    super::default_signals(&[sig]);
    super::unblock_signals(&[sig]);
    // SAFETY: raise sends a signal to the calling thread.
    unsafe { libc::raise(sig) };
    super::exit(128 + sig)
}
