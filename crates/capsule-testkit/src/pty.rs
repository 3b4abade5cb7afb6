//! Pseudo-terminals for the tests of `capsule shell` and terminal attacks.

/// A pseudo-terminal pair, raw mode.
pub struct Pty {
    pub master: std::os::fd::OwnedFd,
    pub slave: std::os::fd::OwnedFd,
}

/// A pty pair in the modes a fresh terminal has, and the slave's path.
pub fn open_pty_cooked() -> (Pty, String) {
    // SAFETY: standard posix_openpt sequence; every fd is owned below.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0, "open pty slave");
        let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        (Pty { master: std::os::fd::FromRawFd::from_raw_fd(m), slave: std::os::fd::FromRawFd::from_raw_fd(s) }, name)
    }
}

/// A pty pair whose slave is in raw mode: every byte counts in the input
/// queue (no line editing, no output processing).
pub fn open_pty() -> Pty {
    let (pty, _) = open_pty_cooked();
    let s = std::os::fd::AsRawFd::as_raw_fd(&pty.slave);
    // SAFETY: t is a termios the kernel fills in; s is open.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(s, &mut t), 0);
        libc::cfmakeraw(&mut t);
        assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
    }
    pty
}

/// Bytes waiting in the tty's input queue (what a shell would read next).
pub fn input_queue(fd: i32) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD");
    n
}
