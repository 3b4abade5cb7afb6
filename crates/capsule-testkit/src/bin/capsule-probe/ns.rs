//! Network, UTS, IPC and time namespaces.

use std::ffi::CStr;
use std::io::Write;
use std::time::Duration;

use crate::{die, errno, errno_name, io_res, out, res};

pub(crate) fn cmd_connect_tcp(spec: &str) {
    let addr = if spec.contains(':') { spec.to_string() } else { format!("127.0.0.1:{spec}") };
    let sa: std::net::SocketAddr = addr.parse().unwrap_or_else(|_| die(&format!("bad address {addr}")));
    let r = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(3));
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
}

pub(crate) fn cmd_connect_abstract(name: &str) {
    use std::os::linux::net::SocketAddrExt;
    let r = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a));
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
}

pub(crate) fn cmd_connect_unix(path: &str) {
    let r = std::os::unix::net::UnixStream::connect(path);
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
}

pub(crate) fn hostname() -> String {
    let mut u: libc::utsname = unsafe {
        // SAFETY: utsname is plain old data.
        std::mem::zeroed()
    };
    // SAFETY: u is a valid out-pointer.
    unsafe { libc::uname(&mut u) };
    // SAFETY: nodename is NUL-terminated after uname().
    unsafe { CStr::from_ptr(u.nodename.as_ptr()) }.to_string_lossy().into_owned()
}

pub(crate) fn cmd_ipc(key: i32, create: bool) {
    let flags = if create { libc::IPC_CREAT | 0o666 } else { 0 };
    // SAFETY: SysV IPC calls take only integers.
    unsafe {
        let r = libc::msgget(key, flags);
        out("msg", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
        let r = libc::shmget(key, if create { 4096 } else { 0 }, flags);
        out("shm", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
        let r = libc::semget(key, if create { 1 } else { 0 }, flags);
        out("sem", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
    }
}

pub(crate) fn cmd_ns_inodes() {
    for ns in ["cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user", "uts"] {
        let v = std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("ns.{ns}"), v);
    }
}

pub(crate) fn cmd_timens() {
    for ns in ["time", "time_for_children"] {
        let v = std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("ns.{ns}"), v);
    }
    match std::fs::read_to_string("/proc/self/timens_offsets") {
        Ok(s) => out("offsets", s.trim()),
        Err(e) => out("offsets", io_res::<()>(&Err(e))),
    }
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/timens_offsets")
        .and_then(|mut f| f.write_all(b"monotonic 86400 0\n"));
    out("write_offsets", io_res(&w));
    // Also try in a fresh time namespace of our own (needs a nested userns).
    // SAFETY: unshare takes only flags.
    let r = unsafe { libc::unshare(libc::CLONE_NEWTIME) };
    out("unshare_time", res(r as i64));
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    out("monotonic_s", ts.tv_sec);
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    out("boottime_s", ts.tv_sec);
}

/// Listens on 127.0.0.1:PORT and leaves the listener in flight in a Unix
/// socket cycle (its fd and the receiving end's own, queued on that end),
/// which outlives the process until the kernel's collector runs.
pub(crate) fn cmd_leak_tcp(port: u16) {
    use std::os::fd::AsRawFd;
    let l = std::net::TcpListener::bind(("127.0.0.1", port));
    out("listen", io_res(&l));
    let Ok(l) = l else { return };
    let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap_or_else(|e| die(&format!("socketpair: {e}")));
    let fds = [l.as_raw_fd(), b.as_raw_fd()];
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec { iov_base: b"x".as_ptr() as *mut libc::c_void, iov_len: 1 };
    // SAFETY: msghdr is plain data; every pointer set below stays valid for the sendmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(&fds) as u32) } as usize;
    // SAFETY: msg_control points at cbuf, large enough for one header with two fds.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(&fds) as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c) as *mut i32, 2);
    }
    // SAFETY: a's fd is open; msg is fully set up above.
    let r = unsafe { libc::sendmsg(a.as_raw_fd(), &msg, 0) };
    out("leak", res(r as i64));
}
