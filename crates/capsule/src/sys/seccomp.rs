//! The kernel's seccomp ABI as capsule's filters see it: classic BPF
//! opcodes and return actions, `struct seccomp_data`, a reference
//! interpreter of a filter (no allocation: PID 1 runs it), and the network
//! calls of each ABI (x86_64, x32 and i386; aarch64 and 32-bit ARM); installing a filter and answering its user
//! notifications.

use std::os::fd::RawFd;

use super::{cvt, raw_syscall, Errno, SysResult};

pub(crate) const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
pub(crate) const AUDIT_ARCH_I386: u32 = 0x4000_0003;
pub(crate) const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
/// 32-bit ARM (EABI), which an aarch64 kernel may run too.
pub(crate) const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
/// The audit architecture of this build's own (native) calls.
#[cfg(target_arch = "x86_64")]
pub(crate) const AUDIT_ARCH_NATIVE: u32 = AUDIT_ARCH_X86_64;
#[cfg(target_arch = "aarch64")]
pub(crate) const AUDIT_ARCH_NATIVE: u32 = AUDIT_ARCH_AARCH64;

pub(crate) const RET_ACTION_FULL: u32 = 0xffff_0000;
pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;
pub(crate) const RET_LOG: u32 = 0x7ffc_0000;
pub(crate) const RET_ERRNO: u32 = 0x0005_0000;
pub(crate) const RET_USER_NOTIF: u32 = 0x7fc0_0000;

// Classic BPF opcodes a seccomp filter may use.
pub(crate) const BPF_LD_W_ABS: u16 = 0x20;
pub(crate) const BPF_LD_W_LEN: u16 = 0x80;
pub(crate) const BPF_LDX_W_LEN: u16 = 0x81;
pub(crate) const BPF_LD_IMM: u16 = 0x00;
pub(crate) const BPF_LDX_IMM: u16 = 0x01;
pub(crate) const BPF_LD_MEM: u16 = 0x60;
pub(crate) const BPF_LDX_MEM: u16 = 0x61;
pub(crate) const BPF_ST: u16 = 0x02;
pub(crate) const BPF_STX: u16 = 0x03;
pub(crate) const BPF_TAX: u16 = 0x07;
pub(crate) const BPF_TXA: u16 = 0x87;
pub(crate) const BPF_ALU: u16 = 0x04;
pub(crate) const BPF_ALU_AND_K: u16 = 0x54;
pub(crate) const BPF_JMP: u16 = 0x05;
pub(crate) const BPF_JA: u16 = 0x05;
pub(crate) const BPF_JEQ_K: u16 = 0x15;
pub(crate) const BPF_JSET_K: u16 = 0x45;
pub(crate) const BPF_JGE_K: u16 = 0x35;
pub(crate) const BPF_JGT_K: u16 = 0x25;
pub(crate) const BPF_RET_K: u16 = 0x06;
pub(crate) const BPF_RET_A: u16 = 0x16;

/// `struct seccomp_data`: what a filter sees of one call.
pub(crate) fn seccomp_data(nr: i32, arch: u32, ip: u64, args: &[u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_ne_bytes());
    d[4..8].copy_from_slice(&arch.to_ne_bytes());
    d[8..16].copy_from_slice(&ip.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    d
}

/// Runs a seccomp classic-BPF program on one call's `struct seccomp_data`
/// like the kernel does; returns the program's result and the index of the
/// `ret` instruction that produced it. None for what the kernel's checker
/// would have refused (a jump or load out of range, an unknown opcode) or a
/// division by zero. No allocation and no panic: PID 1 runs it.
pub(crate) fn run_bpf(prog: &[libc::sock_filter], data: &[u8; 64]) -> Option<(u32, usize)> {
    run_bpf_probe(prog, data).map(|(ret, at, _)| (ret, at))
}

/// [`run_bpf`], also saying whether the program read the instruction
/// pointer or an argument on its way: if not, the result holds for every
/// call of that number and ABI (the kernel's action cache reasons alike).
pub(crate) fn run_bpf_probe(prog: &[libc::sock_filter], data: &[u8; 64]) -> Option<(u32, usize, bool)> {
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut read_args = false;
    let mut pc = 0usize;
    loop {
        let at = pc;
        let i = prog.get(pc)?;
        pc += 1;
        let k = i.k;
        match i.code {
            BPF_LD_W_ABS => {
                let off = k as usize;
                let w = data.get(off..off.checked_add(4)?)?;
                if off % 4 != 0 {
                    return None;
                }
                read_args |= off >= 8;
                a = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
            }
            BPF_LD_W_LEN => a = 64,
            BPF_LDX_W_LEN => x = 64,
            BPF_LD_IMM => a = k,
            BPF_LDX_IMM => x = k,
            BPF_LD_MEM => a = *mem.get(k as usize)?,
            BPF_LDX_MEM => x = *mem.get(k as usize)?,
            BPF_ST => *mem.get_mut(k as usize)? = a,
            BPF_STX => *mem.get_mut(k as usize)? = x,
            BPF_TAX => x = a,
            BPF_TXA => a = x,
            BPF_RET_K => return Some((k, at, read_args)),
            BPF_RET_A => return Some((a, at, read_args)),
            code if code & 0x07 == BPF_ALU => {
                let v = if code & 0x08 != 0 { x } else { k };
                a = match code & 0xf0 {
                    0x00 => a.wrapping_add(v),
                    0x10 => a.wrapping_sub(v),
                    0x20 => a.wrapping_mul(v),
                    0x30 => a.checked_div(v)?,
                    0x40 => a | v,
                    0x50 => a & v,
                    0x60 => a.checked_shl(v).unwrap_or(0),
                    0x70 => a.checked_shr(v).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a.checked_rem(v)?,
                    0xa0 => a ^ v,
                    _ => return None,
                };
            }
            BPF_JA => pc = pc.checked_add(k as usize)?,
            code if code & 0x07 == BPF_JMP => {
                let v = if code & 0x08 != 0 { x } else { k };
                let taken = match code & 0xf0 {
                    0x10 => a == v,
                    0x20 => a > v,
                    0x30 => a >= v,
                    0x40 => a & v != 0,
                    _ => return None,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            _ => return None,
        }
    }
}

/// `__X32_SYSCALL_BIT`: x32 calls are AUDIT_ARCH_X86_64 with this bit in
/// the number.
pub(crate) const X32: u32 = 0x4000_0000;
/// x86_64 numbers (x32: with the X32 bit).
pub(crate) const NR_CONNECT: u32 = 42;
pub(crate) const NR_SENDTO: u32 = 44;
pub(crate) const NR_SENDMSG: u32 = 46;
pub(crate) const NR_SENDMMSG: u32 = 307;
pub(crate) const NR_X32_SENDMSG: u32 = X32 | 518;
pub(crate) const NR_X32_SENDMMSG: u32 = X32 | 538;
/// i386 numbers, and `socketcall`'s call numbers (`SYS_CONNECT`...).
pub(crate) const NR_I386_SOCKETCALL: u32 = 102;
pub(crate) const NR_I386_SENDMMSG: u32 = 345;
pub(crate) const NR_I386_CONNECT: u32 = 362;
pub(crate) const NR_I386_SENDTO: u32 = 369;
pub(crate) const NR_I386_SENDMSG: u32 = 370;
/// aarch64 numbers (the kernel's generic table) and 32-bit ARM's (EABI).
pub(crate) const NR_A64_CONNECT: u32 = 203;
pub(crate) const NR_A64_SENDTO: u32 = 206;
pub(crate) const NR_A64_SENDMSG: u32 = 211;
pub(crate) const NR_A64_SENDMMSG: u32 = 269;
pub(crate) const NR_ARM_CONNECT: u32 = 283;
pub(crate) const NR_ARM_SENDTO: u32 = 290;
pub(crate) const NR_ARM_SENDMSG: u32 = 296;
pub(crate) const NR_ARM_SENDMMSG: u32 = 374;
pub(crate) const SYS_CONNECT: u64 = 3;
pub(crate) const SYS_SENDTO: u64 = 11;
pub(crate) const SYS_SENDMSG: u64 = 16;
pub(crate) const SYS_SENDMMSG: u64 = 20;

/// A call the network log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetCall {
    Connect,
    Sendto,
    Sendmsg,
    Sendmmsg,
}

/// The ABI of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abi {
    Native,
    X32,
    /// `int $0x80` (or 32-bit ARM's calls on aarch64): 32-bit arguments,
    /// compat structures.
    I386,
}

/// What the network log makes of a call: which one and in which ABI, and
/// its arguments (for i386 `socketcall`, the arguments are still in memory:
/// `args[1]` points to them). None: not a call it records.
pub(crate) fn net_call(arch: u32, nr: i32, args: &[u64; 6]) -> Option<(NetCall, Abi, bool)> {
    let nr = nr as u32;
    let (call, abi) = match arch {
        AUDIT_ARCH_X86_64 => match nr {
            NR_CONNECT => (NetCall::Connect, Abi::Native),
            NR_SENDTO => (NetCall::Sendto, Abi::Native),
            NR_SENDMSG => (NetCall::Sendmsg, Abi::Native),
            NR_SENDMMSG => (NetCall::Sendmmsg, Abi::Native),
            n if n == X32 | NR_CONNECT => (NetCall::Connect, Abi::X32),
            n if n == X32 | NR_SENDTO => (NetCall::Sendto, Abi::X32),
            NR_X32_SENDMSG => (NetCall::Sendmsg, Abi::X32),
            NR_X32_SENDMMSG => (NetCall::Sendmmsg, Abi::X32),
            _ => return None,
        },
        AUDIT_ARCH_I386 => match nr {
            NR_I386_CONNECT => (NetCall::Connect, Abi::I386),
            NR_I386_SENDTO => (NetCall::Sendto, Abi::I386),
            NR_I386_SENDMSG => (NetCall::Sendmsg, Abi::I386),
            NR_I386_SENDMMSG => (NetCall::Sendmmsg, Abi::I386),
            NR_I386_SOCKETCALL => {
                let call = match args[0] & 0xffff_ffff {
                    SYS_CONNECT => NetCall::Connect,
                    SYS_SENDTO => NetCall::Sendto,
                    SYS_SENDMSG => NetCall::Sendmsg,
                    SYS_SENDMMSG => NetCall::Sendmmsg,
                    _ => return None,
                };
                return Some((call, Abi::I386, true));
            }
            _ => return None,
        },
        AUDIT_ARCH_AARCH64 => match nr {
            NR_A64_CONNECT => (NetCall::Connect, Abi::Native),
            NR_A64_SENDTO => (NetCall::Sendto, Abi::Native),
            NR_A64_SENDMSG => (NetCall::Sendmsg, Abi::Native),
            NR_A64_SENDMMSG => (NetCall::Sendmmsg, Abi::Native),
            _ => return None,
        },
        AUDIT_ARCH_ARM => match nr {
            NR_ARM_CONNECT => (NetCall::Connect, Abi::I386),
            NR_ARM_SENDTO => (NetCall::Sendto, Abi::I386),
            NR_ARM_SENDMSG => (NetCall::Sendmsg, Abi::I386),
            NR_ARM_SENDMMSG => (NetCall::Sendmmsg, Abi::I386),
            _ => return None,
        },
        _ => return None,
    };
    Some((call, abi, false))
}

/// Installs `filter` on the calling thread (child side; `no_new_privs`
/// set). Returns the listener descriptor when the filter notifies, else -1.
pub(crate) fn install(filter: &[libc::sock_filter], notify: bool) -> Result<RawFd, Errno> {
    if filter.is_empty() {
        return Ok(-1);
    }
    seccomp_install(filter, notify)
}

/// The calling thread's seccomp mode (`PR_GET_SECCOMP`: 0 none, 2 a
/// filter); child side.
pub(crate) fn seccomp_mode() -> Result<i32, Errno> {
    // SAFETY: prctl on integers; it writes nothing.
    cvt(unsafe { raw_syscall(libc::SYS_prctl, [libc::PR_GET_SECCOMP as u64, 0, 0, 0, 0, 0]) }).map(|v| v as i32)
}

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
pub(crate) const SECCOMP_IOCTL_NOTIF_RECV: libc::c_ulong = 0xc050_2100;

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
pub(crate) const SECCOMP_IOCTL_NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;
/// `SECCOMP_IOWR(1, struct seccomp_notif_resp)`.
pub(crate) const SECCOMP_IOCTL_NOTIF_SEND: libc::c_ulong = 0xc018_2101;
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
