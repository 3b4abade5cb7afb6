//! Raw Linux system calls (x86_64 and aarch64), for code that runs without a C
//! library: the front end before it knows whether it needs one, and the
//! identity both sides compute. Every `unsafe` of this crate is here.
//!
//! Errors are the kernel's errno values (positive). Paths are
//! NUL-terminated byte strings (`&CStr`).

use core::arch::asm;
use core::ffi::CStr;

pub type Result<T> = core::result::Result<T, i32>;

/// x86_64 system call numbers.
#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: usize = 0;
    pub const WRITE: usize = 1;
    pub const CLOSE: usize = 3;
    pub const POLL: usize = 7;
    pub const GETPID: usize = 39;
    pub const SOCKET: usize = 41;
    pub const CONNECT: usize = 42;
    pub const GETSOCKOPT: usize = 55;
    pub const SENDMSG: usize = 46;
    pub const RECVMSG: usize = 47;
    pub const EXECVE: usize = 59;
    pub const GETCWD: usize = 79;
    pub const UMASK: usize = 95;
    pub const GETUID: usize = 102;
    pub const GETEUID: usize = 107;
    pub const GETGROUPS: usize = 115;
    pub const GETRESUID: usize = 118;
    pub const GETRESGID: usize = 120;
    pub const PERSONALITY: usize = 135;
    pub const GETPRIORITY: usize = 140;
    pub const SCHED_GETPARAM: usize = 143;
    pub const SCHED_GETSCHEDULER: usize = 145;
    pub const PRCTL: usize = 157;
    pub const SCHED_GETAFFINITY: usize = 204;
    pub const EXIT_GROUP: usize = 231;
    pub const IOPRIO_GET: usize = 252;
    pub const OPENAT: usize = 257;
    pub const NEWFSTATAT: usize = 262;
    pub const READLINKAT: usize = 267;
    pub const PRLIMIT64: usize = 302;
    pub const RT_SIGACTION: usize = 13;
}

/// aarch64 system call numbers (the kernel's generic table).
#[cfg(target_arch = "aarch64")]
mod nr {
    pub const READ: usize = 63;
    pub const WRITE: usize = 64;
    pub const CLOSE: usize = 57;
    pub const PPOLL: usize = 73;
    pub const GETPID: usize = 172;
    pub const SOCKET: usize = 198;
    pub const CONNECT: usize = 203;
    pub const GETSOCKOPT: usize = 209;
    pub const SENDMSG: usize = 211;
    pub const RECVMSG: usize = 212;
    pub const EXECVE: usize = 221;
    pub const GETCWD: usize = 17;
    pub const UMASK: usize = 166;
    pub const GETUID: usize = 174;
    pub const GETEUID: usize = 175;
    pub const GETGROUPS: usize = 158;
    pub const GETRESUID: usize = 148;
    pub const GETRESGID: usize = 150;
    pub const PERSONALITY: usize = 92;
    pub const GETPRIORITY: usize = 141;
    pub const SCHED_GETPARAM: usize = 121;
    pub const SCHED_GETSCHEDULER: usize = 120;
    pub const PRCTL: usize = 167;
    pub const SCHED_GETAFFINITY: usize = 123;
    pub const EXIT_GROUP: usize = 94;
    pub const IOPRIO_GET: usize = 31;
    pub const OPENAT: usize = 56;
    pub const NEWFSTATAT: usize = 79;
    pub const READLINKAT: usize = 78;
    pub const PRLIMIT64: usize = 261;
    pub const RT_SIGACTION: usize = 134;
}

const AT_FDCWD: isize = -100;
pub const O_RDONLY: usize = 0;
const SOL_SOCKET: usize = 1;
pub const O_CLOEXEC: usize = 0o2_000_000;
pub const AT_SYMLINK_NOFOLLOW: usize = 0x100;
pub const S_IFMT: u32 = 0o170_000;
pub const S_IFDIR: u32 = 0o040_000;
pub const EINTR: i32 = 4;

/// A system call with six arguments (unused ones zero): the kernel's raw
/// result, -errno on failure; errno is left alone (`capsule::sys` makes
/// its calls with this too).
///
/// # Safety
/// The arguments must be valid for system call `n`: pointers to memory of
/// the sizes the call expects, alive for the call.
#[inline]
#[cfg(target_arch = "x86_64")]
pub unsafe fn syscall6(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux system call convention: number in rax,
    // arguments in rdi, rsi, rdx, r10, r8, r9; the kernel clobbers rcx and
    // r11 and returns in rax. The caller vouches for the arguments.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// [`syscall6`] on aarch64.
///
/// # Safety
/// As on x86_64: the arguments must be valid for system call `n`.
#[inline]
#[cfg(target_arch = "aarch64")]
pub unsafe fn syscall6(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 Linux system call convention: number in x8,
    // arguments in x0..x5, the result in x0; `svc #0` clobbers nothing
    // else. The caller vouches for the arguments.
    unsafe {
        asm!(
            "svc #0",
            in("x8") n,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    ret
}

/// The result of a call that returns a count or -errno.
fn check(ret: isize) -> Result<usize> {
    if (-4095..0).contains(&ret) {
        Err(-ret as i32)
    } else {
        Ok(ret as usize)
    }
}

/// A call whose arguments are plain integers (no pointers).
fn plain(n: usize, a: [usize; 6]) -> Result<usize> {
    // SAFETY: only integer arguments: the kernel dereferences nothing.
    check(unsafe { syscall6(n, a) })
}

pub fn exit(code: i32) -> ! {
    // SAFETY: exit_group takes an integer and does not return.
    unsafe {
        syscall6(nr::EXIT_GROUP, [code as usize, 0, 0, 0, 0, 0]);
    }
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Ignores SIGPIPE (a write to a closed pipe then fails with EPIPE), as
/// Rust's standard library does at start.
pub fn ignore_sigpipe() {
    // struct kernel_sigaction: handler (SIG_IGN = 1), flags, restorer, mask.
    let act: [usize; 4] = [1, 0, 0, 0];
    // SAFETY: act is a kernel sigaction of the size given; no old action.
    let _ = check(unsafe { syscall6(nr::RT_SIGACTION, [13, act.as_ptr() as usize, 0, 8, 0, 0]) });
}

pub fn getpid() -> i32 {
    plain(nr::GETPID, [0; 6]).unwrap_or(0) as i32
}
pub fn getuid() -> u32 {
    plain(nr::GETUID, [0; 6]).unwrap_or(0) as u32
}
pub fn geteuid() -> u32 {
    plain(nr::GETEUID, [0; 6]).unwrap_or(0) as u32
}

/// Sets the umask and returns the old one.
pub fn umask(mask: u32) -> u32 {
    plain(nr::UMASK, [mask as usize, 0, 0, 0, 0, 0]).unwrap_or(0) as u32
}

pub fn read(fd: i32, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    check(unsafe { syscall6(nr::READ, [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0]) })
}

pub fn write(fd: i32, buf: &[u8]) -> Result<usize> {
    // SAFETY: the kernel reads buf.len() bytes from buf.
    check(unsafe { syscall6(nr::WRITE, [fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0]) })
}

/// Writes all of `buf` (retrying short writes and EINTR).
pub fn write_all(fd: i32, mut buf: &[u8]) -> Result<()> {
    while !buf.is_empty() {
        match write(fd, buf) {
            Ok(0) => return Err(5), // EIO
            Ok(n) => buf = &buf[n..],
            Err(EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn close(fd: i32) {
    let _ = plain(nr::CLOSE, [fd as usize, 0, 0, 0, 0, 0]);
}

/// An open file descriptor, closed when dropped.
pub struct Fd(pub i32);

impl Drop for Fd {
    fn drop(&mut self) {
        close(self.0);
    }
}

pub fn open(path: &CStr, flags: usize) -> Result<Fd> {
    // SAFETY: path is NUL-terminated and outlives the call.
    let r =
        check(unsafe { syscall6(nr::OPENAT, [AT_FDCWD as usize, path.as_ptr() as usize, flags | O_CLOEXEC, 0, 0, 0]) });
    r.map(|fd| Fd(fd as i32))
}

/// Reads the whole (small) file at `path` into `buf`: the bytes read, as
/// many as fit; a procfs file is generated anew on each read, so it is
/// read with as few calls as the buffer allows.
pub fn read_file<'a>(path: &CStr, buf: &'a mut [u8]) -> Result<&'a [u8]> {
    let fd = open(path, O_RDONLY)?;
    let mut got = 0;
    while got < buf.len() {
        match read(fd.0, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(&buf[..got])
}

/// What the identity and the front end need of a `stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub uid: u32,
    pub size: i64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

/// `stat` (or `lstat` with `AT_SYMLINK_NOFOLLOW` in `flags`).
pub fn stat(path: &CStr, flags: usize) -> Result<Stat> {
    // The kernel's struct stat: 144 bytes on x86_64, 128 on aarch64.
    let mut raw = [0u64; 18];
    // SAFETY: path is NUL-terminated; raw has the bytes newfstatat writes.
    check(unsafe {
        syscall6(nr::NEWFSTATAT, [AT_FDCWD as usize, path.as_ptr() as usize, raw.as_mut_ptr() as usize, flags, 0, 0])
    })?;
    // x86_64: dev, ino, nlink, mode|uid, gid, rdev, size; aarch64 (the
    // generic layout): dev, ino, mode|nlink, uid|gid, rdev, pad, size.
    // Both: mtime and its nanoseconds in words 11 and 12.
    #[cfg(target_arch = "x86_64")]
    let (mode, uid) = (raw[3] as u32, (raw[3] >> 32) as u32);
    #[cfg(target_arch = "aarch64")]
    let (mode, uid) = (raw[2] as u32, raw[3] as u32);
    Ok(Stat {
        dev: raw[0],
        ino: raw[1],
        mode,
        uid,
        size: raw[6] as i64,
        mtime: raw[11] as i64,
        mtime_nsec: raw[12] as i64,
    })
}

/// The target of the symbolic link at `path`, in `buf`.
pub fn readlink<'a>(path: &CStr, buf: &'a mut [u8]) -> Result<&'a [u8]> {
    // SAFETY: path is NUL-terminated; the kernel writes at most buf.len() bytes.
    let n = check(unsafe {
        syscall6(
            nr::READLINKAT,
            [AT_FDCWD as usize, path.as_ptr() as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0],
        )
    })?;
    Ok(&buf[..n])
}

/// The working directory (without its NUL) in `buf`.
pub fn getcwd(buf: &mut [u8]) -> Result<&[u8]> {
    // SAFETY: the kernel writes at most buf.len() bytes, NUL included.
    let n = check(unsafe { syscall6(nr::GETCWD, [buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0, 0]) })?;
    Ok(&buf[..n.saturating_sub(1)])
}

pub fn getresuid() -> [u32; 3] {
    let mut ids = [0u32; 3];
    let p = ids.as_mut_ptr() as usize;
    // SAFETY: three u32 slots for the kernel to write.
    let _ = check(unsafe { syscall6(nr::GETRESUID, [p, p + 4, p + 8, 0, 0, 0]) });
    ids
}

pub fn getresgid() -> [u32; 3] {
    let mut ids = [0u32; 3];
    let p = ids.as_mut_ptr() as usize;
    // SAFETY: three u32 slots for the kernel to write.
    let _ = check(unsafe { syscall6(nr::GETRESGID, [p, p + 4, p + 8, 0, 0, 0]) });
    ids
}

/// The supplementary groups, as many as fit in `buf` (65536 is the
/// kernel's limit).
pub fn getgroups(buf: &mut [u32]) -> &[u32] {
    // SAFETY: the kernel writes at most buf.len() group ids.
    let n = check(unsafe { syscall6(nr::GETGROUPS, [buf.len(), buf.as_mut_ptr() as usize, 0, 0, 0, 0]) });
    &buf[..n.unwrap_or(0).min(buf.len())]
}

/// (soft, hard) of resource `res`.
pub fn getrlimit(res: u32) -> (u64, u64) {
    let mut l = [0u64; 2];
    // SAFETY: a struct rlimit64 (two u64) for the kernel to write; no new limit.
    let _ = check(unsafe { syscall6(nr::PRLIMIT64, [0, res as usize, 0, l.as_mut_ptr() as usize, 0, 0]) });
    (l[0], l[1])
}

/// The kernel's getpriority value: 20 - nice (1..=40).
pub fn getpriority() -> isize {
    plain(nr::GETPRIORITY, [0, 0, 0, 0, 0, 0]).map_or(-1, |v| v as isize)
}

pub fn sched_getscheduler() -> isize {
    plain(nr::SCHED_GETSCHEDULER, [0; 6]).map_or(-1, |v| v as isize)
}

pub fn sched_getparam() -> i32 {
    let mut p = 0i32;
    // SAFETY: a struct sched_param (one int) for the kernel to write.
    let _ = check(unsafe { syscall6(nr::SCHED_GETPARAM, [0, &mut p as *mut i32 as usize, 0, 0, 0, 0]) });
    p
}

/// The I/O priority of this process (IOPRIO_WHO_PROCESS, 0).
pub fn ioprio_get() -> isize {
    plain(nr::IOPRIO_GET, [1, 0, 0, 0, 0, 0]).map_or(-1, |v| v as isize)
}

/// The CPU affinity mask (1024 CPUs).
pub fn sched_getaffinity() -> [u64; 16] {
    let mut mask = [0u64; 16];
    // SAFETY: the kernel writes at most the 128 bytes given.
    let _ = check(unsafe { syscall6(nr::SCHED_GETAFFINITY, [0, 128, mask.as_mut_ptr() as usize, 0, 0, 0]) });
    mask
}

/// A `prctl` that only reads a value (PR_GET_*).
pub fn prctl_get(option: usize) -> isize {
    plain(nr::PRCTL, [option, 0, 0, 0, 0, 0]).map_or(-1, |v| v as isize)
}

pub fn personality() -> isize {
    plain(nr::PERSONALITY, [0xffff_ffff, 0, 0, 0, 0, 0]).map_or(-1, |v| v as isize)
}

/// A new Unix stream socket (close-on-exec).
pub fn unix_stream_socket() -> Result<Fd> {
    const AF_UNIX: usize = 1;
    const SOCK_STREAM: usize = 1;
    const SOCK_CLOEXEC: usize = 0o2_000_000;
    plain(nr::SOCKET, [AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, 0, 0, 0]).map(|fd| Fd(fd as i32))
}

/// The credentials of a Unix socket's peer (`SO_PEERCRED`): pid (in the
/// caller's PID namespace, 0 outside it), uid, gid. For a connected
/// client, those of the process that called `listen` on the server side,
/// as they were then.
pub fn peer_cred(sock: &Fd) -> Result<(i32, u32, u32)> {
    const SO_PEERCRED: usize = 17;
    let mut cred = [0u32; 3];
    let mut len: u32 = 12;
    // SAFETY: cred has the 12 bytes of a struct ucred; len says so.
    check(unsafe {
        syscall6(
            nr::GETSOCKOPT,
            [sock.0 as usize, SOL_SOCKET, SO_PEERCRED, cred.as_mut_ptr() as usize, &mut len as *mut u32 as usize, 0],
        )
    })?;
    Ok((cred[0] as i32, cred[1], cred[2]))
}

/// A pidfd of a Unix socket's peer process (`SO_PEERPIDFD`, Linux 6.5):
/// the process itself, so that its pid cannot be taken by another one
/// while it is looked at. ENOPROTOOPT on older kernels.
pub fn peer_pidfd(sock: &Fd) -> Result<Fd> {
    const SO_PEERPIDFD: usize = 77;
    let mut fd: i32 = -1;
    let mut len: u32 = 4;
    // SAFETY: fd is the 4-byte int the option writes; len says so.
    check(unsafe {
        syscall6(
            nr::GETSOCKOPT,
            [sock.0 as usize, SOL_SOCKET, SO_PEERPIDFD, &mut fd as *mut i32 as usize, &mut len as *mut u32 as usize, 0],
        )
    })?;
    Ok(Fd(fd))
}

/// Connects `fd` to the Unix socket at `path` (ENAMETOOLONG beyond the
/// 107 bytes a socket address holds).
pub fn connect_unix(fd: &Fd, path: &[u8]) -> Result<()> {
    let mut addr = [0u8; 110];
    if path.len() >= addr.len() - 2 {
        return Err(36); // ENAMETOOLONG
    }
    addr[0] = 1; // AF_UNIX, little-endian u16
    addr[2..2 + path.len()].copy_from_slice(path);
    let len = 2 + path.len() + 1;
    loop {
        // SAFETY: addr holds a sockaddr_un of `len` bytes.
        match check(unsafe { syscall6(nr::CONNECT, [fd.0 as usize, addr.as_ptr() as usize, len, 0, 0, 0]) }) {
            Err(EINTR) => {}
            r => return r.map(|_| ()),
        }
    }
}

/// Sends `data` with the descriptors `fds` attached (SCM_RIGHTS): the
/// bytes sent.
pub fn send_with_fds(sock: &Fd, data: &[u8], fds: &[i32]) -> Result<usize> {
    const SOL_SOCKET: u32 = 1;
    const SCM_RIGHTS: u32 = 1;
    const MSG_NOSIGNAL: usize = 0x4000;
    assert!(fds.len() <= 8);
    // cmsghdr: u64 len, i32 level, i32 type, then the descriptors.
    let mut cbuf = [0u64; 2 + 4];
    let clen = 16 + 4 * fds.len();
    cbuf[0] = clen as u64;
    cbuf[1] = u64::from(SOL_SOCKET) | (u64::from(SCM_RIGHTS) << 32);
    for (i, fd) in fds.iter().enumerate() {
        let word = 2 + i / 2;
        let shift = 32 * (i % 2);
        cbuf[word] |= u64::from(*fd as u32) << shift;
    }
    let iov = [data.as_ptr() as usize, data.len()];
    // struct msghdr: name, namelen, iov, iovlen, control, controllen, flags.
    let msg: [usize; 7] = [
        0,
        0,
        iov.as_ptr() as usize,
        1,
        if fds.is_empty() { 0 } else { cbuf.as_ptr() as usize },
        if fds.is_empty() { 0 } else { (clen + 7) & !7 },
        0,
    ];
    loop {
        // SAFETY: msg points at one iovec over `data` and a control buffer
        // of the length given; all alive for the call.
        match check(unsafe { syscall6(nr::SENDMSG, [sock.0 as usize, msg.as_ptr() as usize, MSG_NOSIGNAL, 0, 0, 0]) }) {
            Err(EINTR) => {}
            r => return r,
        }
    }
}

/// Waits until `fd` is readable, or has hung up or failed.
pub fn wait_readable(fd: &Fd) -> Result<()> {
    const POLLIN: u64 = 1;
    // struct pollfd { int fd; short events; short revents; }, little-endian.
    let mut pfd: u64 = (fd.0 as u32 as u64) | (POLLIN << 32);
    loop {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: one 8-byte struct pollfd, alive for the call; no timeout (-1).
        let r = unsafe { syscall6(nr::POLL, [&mut pfd as *mut u64 as usize, 1, -1isize as usize, 0, 0, 0]) };
        // aarch64 has only ppoll.
        #[cfg(target_arch = "aarch64")]
        // SAFETY: one 8-byte struct pollfd, alive for the call; no timeout
        // and no signal mask (NULL).
        let r = unsafe { syscall6(nr::PPOLL, [&mut pfd as *mut u64 as usize, 1, 0, 0, 0, 0]) };
        match check(r) {
            Err(EINTR) => {}
            r => return r.map(drop),
        }
    }
}

/// Receives into `buf`; descriptors that come along are closed (the front
/// end expects none).
pub fn recv(sock: &Fd, buf: &mut [u8]) -> Result<usize> {
    const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
    let mut cbuf = [0u64; 2 + 8];
    let iov = [buf.as_mut_ptr() as usize, buf.len()];
    let mut msg: [usize; 7] = [0, 0, iov.as_ptr() as usize, 1, cbuf.as_mut_ptr() as usize, 80, 0];
    let n = loop {
        // SAFETY: msg points at one iovec over `buf` and an 80-byte control
        // buffer, all alive for the call.
        match check(unsafe {
            syscall6(nr::RECVMSG, [sock.0 as usize, msg.as_mut_ptr() as usize, MSG_CMSG_CLOEXEC, 0, 0, 0])
        }) {
            Err(EINTR) => {}
            r => break r?,
        }
    };
    if msg[5] >= 16 && cbuf[1] == 1 | (1 << 32) {
        let count = (cbuf[0] as usize).saturating_sub(16) / 4;
        for i in 0..count.min(16) {
            close((cbuf[2 + i / 2] >> (32 * (i % 2))) as u32 as i32);
        }
    }
    Ok(n)
}

/// Replaces the process image: returns only on failure.
///
/// # Safety
/// `argv` and `envp` must be NULL-terminated arrays of pointers to
/// NUL-terminated strings, as the kernel gave them at start.
pub unsafe fn execve(path: &CStr, argv: *const *const u8, envp: *const *const u8) -> i32 {
    // SAFETY: per the caller's promise; path is NUL-terminated.
    let r = unsafe { syscall6(nr::EXECVE, [path.as_ptr() as usize, argv as usize, envp as usize, 0, 0, 0]) };
    check(r).err().unwrap_or(0)
}

/// A NUL-terminated string from a pointer the kernel gave at start.
///
/// # Safety
/// `p` must point at a NUL-terminated string that lives as long as `'a`.
pub unsafe fn c_str<'a>(p: *const u8) -> &'a CStr {
    // SAFETY: per the caller's promise.
    unsafe { CStr::from_ptr(p.cast()) }
}
