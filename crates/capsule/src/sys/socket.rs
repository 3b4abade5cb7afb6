//! Unix sockets: socketpairs, peer credentials, descriptors passed with SCM_RIGHTS.

use std::os::fd::{OwnedFd, RawFd};
use std::ptr;

use super::{close, cvt, owned, raw_syscall, retry, SysResult};

pub fn socketpair_stream() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_socketpair,
            [libc::AF_UNIX as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0, fds.as_mut_ptr() as u64, 0, 0],
        )
    })?;
    Ok((owned(fds[0] as _), owned(fds[1] as _)))
}

/// Most fds one message carries.
pub const MAX_FDS: usize = 32;

/// The credentials of a Unix socket's peer (SO_PEERCRED): for a connected
/// client, the process that connected; for the client's end, the process
/// that called `listen`. Ids as seen from the caller's user namespace.
pub fn peer_cred(sock: RawFd) -> SysResult<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len point to writable memory of the sizes given.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_getsockopt,
            [
                sock as u64,
                libc::SOL_SOCKET as u64,
                libc::SO_PEERCRED as u64,
                &mut cred as *mut libc::ucred as u64,
                &mut len as *mut libc::socklen_t as u64,
                0,
            ],
        )
    })?;
    Ok(cred)
}

/// Sends `data` with `fds` attached (SCM_RIGHTS).
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> SysResult<usize> {
    assert!(fds.len() <= MAX_FDS);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
    // u64 array keeps the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 8 + MAX_FDS];
    // SAFETY: msg points to valid iov and control buffers; the CMSG macros
    // stay within cbuf, which is large enough for MAX_FDS descriptors.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let space = libc::CMSG_SPACE((fds.len() * 4) as u32) as usize;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
            ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, fds.len());
        }
        retry(|| {
            cvt(raw_syscall(
                libc::SYS_sendmsg,
                [sock as u64, &msg as *const libc::msghdr as u64, libc::MSG_NOSIGNAL as u64, 0, 0, 0],
            ))
        })
        .map(|n| n as usize)
    }
}

/// recvmsg(2) of one message into `buf` with its control data in `cbuf`
/// (close-on-exec fds); calls `each_fd` for every fd received. No allocation.
fn recv_msg(sock: RawFd, buf: &mut [u8], cbuf: &mut [u64], mut each_fd: impl FnMut(RawFd)) -> SysResult<usize> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msg points to valid iov and control buffers of the sizes given;
    // fds are read only from within SCM_RIGHTS control messages the kernel
    // wrote, walked with the CMSG macros that stay inside cbuf.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(cbuf);
        let n = retry(|| {
            cvt(raw_syscall(
                libc::SYS_recvmsg,
                [sock as u64, &mut msg as *mut libc::msghdr as u64, libc::MSG_CMSG_CLOEXEC as u64, 0, 0, 0],
            ))
        })?;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                for i in 0..count {
                    each_fd(*data.add(i));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(libc::EMSGSIZE);
        }
        Ok(n as usize)
    }
}

/// Receives into `buf`, collecting attached fds (close-on-exec).
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> SysResult<usize> {
    let mut cbuf = [0u64; 8 + MAX_FDS];
    recv_msg(sock, buf, &mut cbuf, |fd| fds.push(owned(fd as _)))
}

/// Receives exactly one fd sent with [`send_with_fds`] (child side: no
/// allocation). EOF without an fd is `ECONNRESET`.
pub fn recv_one_fd(sock: RawFd) -> SysResult<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut cbuf = [0u64; 8];
    let mut got: Option<OwnedFd> = None;
    recv_msg(sock, &mut byte, &mut cbuf, |fd| {
        // Keep the first; close any extra.
        let fd = owned(fd as _);
        if got.is_none() {
            got = Some(fd);
        }
    })?;
    got.ok_or(libc::ECONNRESET)
}

/// Receives one byte and up to `out.len()` fds (child side: no allocation).
/// Returns (bytes read, fds received); 0 bytes means the peer closed.
pub fn recv_fds_into(sock: RawFd, out: &mut [RawFd]) -> SysResult<(usize, usize)> {
    let mut byte = [0u8; 1];
    let mut cbuf = [0u64; 8 + MAX_FDS];
    let mut n = 0;
    let got = recv_msg(sock, &mut byte, &mut cbuf, |fd| {
        if n < out.len() {
            out[n] = fd;
            n += 1;
        } else {
            close(fd);
        }
    })?;
    Ok((got, n))
}

/// accept4(2) a connection, close-on-exec.
pub fn accept(listener: RawFd) -> SysResult<OwnedFd> {
    // SAFETY: null address buffers are allowed; result checked.
    cvt(unsafe { raw_syscall(libc::SYS_accept4, [listener as u64, 0, 0, libc::SOCK_CLOEXEC as u64, 0, 0]) }).map(owned)
}

/// shutdown(SHUT_RDWR) of a socket.
pub fn shutdown(sock: RawFd) {
    // SAFETY: plain syscall on an fd the caller owns.
    unsafe { raw_syscall(libc::SYS_shutdown, [sock as u64, libc::SHUT_RDWR as u64, 0, 0, 0, 0]) };
}
