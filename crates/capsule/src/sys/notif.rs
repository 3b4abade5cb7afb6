//! seccomp: installing a filter, user notifications, reading a stopped caller's memory.

use std::os::fd::RawFd;

use super::{cvt, raw_syscall, SysResult};

/// Installs a classic-BPF seccomp filter (`no_new_privs` must be set).
/// With `listener`, also asks for a user-notification descriptor
/// (close-on-exec), returned; else returns -1.
pub fn seccomp_install(filter: &[libc::sock_filter], listener: bool) -> SysResult<RawFd> {
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
    let flags: u32 = if listener { SECCOMP_FILTER_FLAG_NEW_LISTENER } else { 0 };
    // SAFETY: prog points to `len` valid instructions that outlive the call.
    let r = cvt(unsafe {
        raw_syscall(
            libc::SYS_seccomp,
            [libc::SECCOMP_SET_MODE_FILTER as u64, flags as u64, &prog as *const libc::sock_fprog as u64, 0, 0, 0],
        )
    })?;
    Ok(if listener { r as RawFd } else { -1 })
}

const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;
/// `SECCOMP_IOWR(0, struct seccomp_notif)`.
const SECCOMP_IOCTL_NOTIF_RECV: libc::c_ulong = 0xc050_2100;

/// `struct seccomp_notif` (80 bytes since Linux 5.0; the kernel copies
/// exactly this much).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SeccompNotif {
    pub id: u64,
    pub pid: u32,
    pub flags: u32,
    pub nr: i32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

const _: () = assert!(std::mem::size_of::<SeccompNotif>() == 80);

/// Receives one pending seccomp user notification (the caller polled the
/// listener). ENOENT: the notifying process died meanwhile.
pub fn seccomp_notif_recv(listener: RawFd) -> SysResult<SeccompNotif> {
    // The kernel insists on a zeroed buffer.
    let mut n = SeccompNotif::default();
    // SAFETY: `n` is a writable struct seccomp_notif of the size the ioctl
    // number encodes.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [listener as u64, SECCOMP_IOCTL_NOTIF_RECV, &mut n as *mut SeccompNotif as u64, 0, 0, 0],
        )
    })?;
    Ok(n)
}

/// `SECCOMP_IOW(2, __u64)`.
const SECCOMP_IOCTL_NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;
/// `SECCOMP_IOWR(1, struct seccomp_notif_resp)`.
const SECCOMP_IOCTL_NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;

/// `struct seccomp_notif_resp`.
#[repr(C)]
struct SeccompNotifResp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

/// Answers notification `id`: let the call run as if no filter had asked
/// (SECCOMP_USER_NOTIF_FLAG_CONTINUE, Linux >= 5.5). ENOENT: the caller
/// died meanwhile.
pub fn seccomp_notif_continue(listener: RawFd, id: u64) -> SysResult<()> {
    let mut resp = SeccompNotifResp { id, val: 0, error: 0, flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE };
    // SAFETY: `resp` is a struct seccomp_notif_resp of the size the ioctl
    // number encodes.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [listener as u64, SECCOMP_IOCTL_NOTIF_SEND, &mut resp as *mut SeccompNotifResp as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// Copies `buf.len()` bytes at `addr` in process `pid` into `buf`
/// (process_vm_readv; the caller needs ptrace access to it); returns how
/// many bytes were copied (fewer when the range runs into unmapped
/// memory). Leaves errno alone.
pub fn process_vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> SysResult<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, writable for its length; `remote` is
    // only read, in the other process, by the kernel (a bad address there
    // is EFAULT, not a fault here).
    let r = unsafe {
        raw_syscall(
            libc::SYS_process_vm_readv,
            [pid as u64, &local as *const libc::iovec as u64, 1, &remote as *const libc::iovec as u64, 1, 0],
        )
    };
    cvt(r).map(|n| n as usize)
}

/// Whether notification `id` is still pending, i.e. its caller is still
/// stopped in the call (SECCOMP_IOCTL_NOTIF_ID_VALID): what was read of
/// its memory since the notification came in was read from the right
/// process, not from one that reused its pid. Leaves errno alone.
pub fn seccomp_notif_id_valid(listener: RawFd, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 at the pointer, a live local.
    let r = unsafe {
        raw_syscall(libc::SYS_ioctl, [listener as u64, SECCOMP_IOCTL_NOTIF_ID_VALID, &id as *const u64 as u64, 0, 0, 0])
    };
    r == 0
}
