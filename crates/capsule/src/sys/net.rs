//! Network interfaces.

use std::os::fd::AsRawFd;

use super::{cvt, owned, raw_syscall, SysResult};

/// Brings the loopback interface of the caller's network namespace up.
pub fn loopback_up() -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    let s = cvt(unsafe {
        raw_syscall(
            libc::SYS_socket,
            [libc::AF_INET as u64, (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64, 0, 0, 0, 0],
        )
    })?;
    let s = owned(s);
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        ifr.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: the datagram socket is only used for the interface ioctls,
    // each reading or filling the zeroed, correctly named ifreq.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [s.as_raw_fd() as u64, libc::SIOCGIFFLAGS, &mut ifr as *mut libc::ifreq as u64, 0, 0, 0],
        )
    })?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags, the union member read and written.
    unsafe { ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [s.as_raw_fd() as u64, libc::SIOCSIFFLAGS, &ifr as *const libc::ifreq as u64, 0, 0, 0],
        )
    })?;
    Ok(())
}
