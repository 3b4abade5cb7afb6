//! The run's guards (docs/seccomp.md, "The run's guards"): an epilogue
//! refusing the calls that would get around the limits a run asked for.

use super::epilogue::{assemble, extend_passes, Asm};
use super::{Filter, PolicyError, PolicyName};
use crate::sys::seccomp::*;

/// What a run adds to its policy's filter for the limits it asked for
/// (docs/seccomp.md, "The run's guards"): calls that would get around them
/// fail, wherever the policy would let them run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guards {
    /// A TCP port rule is set: MPTCP and SMC sockets reach TCP services,
    /// and Landlock's port rules cover IPPROTO_TCP only.
    pub ports: bool,
    /// The run has a network of its own and a policy: AF_VSOCK is not
    /// namespaced (host and hypervisor ports).
    pub vsock: bool,
    /// An output limit is set: RLIMIT_FSIZE does not cover blocks
    /// allocated beyond the size (`fallocate` keeping it).
    pub keep_size: bool,
}

impl Guards {
    /// The guards of a run: port rules and the output limit under every
    /// policy (`none` too: the user asked for them), AF_VSOCK under every
    /// policy but `none`, unless the run shares the host's network.
    pub fn of(spec: &crate::proto::spec::RunSpec) -> Guards {
        Guards {
            ports: spec.tcp_connect.is_some() || spec.tcp_bind.is_some() || spec.egress.is_some(),
            vsock: !spec.share_net && spec.seccomp != PolicyName::None,
            keep_size: spec.limits.output_limit.is_some(),
        }
    }

    pub fn any(self) -> bool {
        self.ports || self.vsock || self.keep_size
    }
}

const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;
const AF_VSOCK: u32 = 40;
const AF_SMC: u32 = 43;
/// SMC over an AF_INET socket (Linux 6.11).
const IPPROTO_SMC: u32 = 256;
const IPPROTO_MPTCP: u32 = 262;
const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
const FALLOC_FL_INSERT_RANGE: u32 = 0x20;
/// `FS_IOC_RESVSP` and `FS_IOC_RESVSP64`: `fallocate(FALLOC_FL_KEEP_SIZE)`
/// by ioctl on any filesystem, native and i386 (`_32`: a 44-byte struct).
const FS_IOC_RESVSP: [u32; 4] = [0x4030_5828, 0x4030_582a, 0x402c_5828, 0x402c_582a];
#[cfg(target_arch = "x86_64")]
const NR_SOCKET: u32 = 41;
#[cfg(target_arch = "x86_64")]
const NR_IOCTL: u32 = 16;
#[cfg(target_arch = "x86_64")]
const NR_X32_IOCTL: u32 = X32 | 514;
#[cfg(target_arch = "x86_64")]
const NR_FALLOCATE: u32 = 285;
/// io_uring_setup, io_uring_enter, io_uring_register: the same numbers in
/// every ABI.
const NR_IO_URING: [u32; 3] = [425, 426, 427];
#[cfg(target_arch = "x86_64")]
const NR_I386_IOCTL: u32 = 54;
#[cfg(target_arch = "x86_64")]
const NR_I386_SOCKET: u32 = 359;
#[cfg(target_arch = "x86_64")]
const NR_I386_FALLOCATE: u32 = 324;
#[cfg(target_arch = "x86_64")]
const SYS_SOCKET: u32 = 1;
/// ioctl, fallocate and socket on aarch64 and on 32-bit ARM.
#[cfg(target_arch = "aarch64")]
const NR_A64_GUARDED: [u32; 3] = [29, 47, 198];
#[cfg(target_arch = "aarch64")]
const NR_ARM_GUARDED: [u32; 3] = [54, 352, 281];

/// `filter` (a compiled policy; empty for `none`) with the run's guards:
/// every `ret` of the policy's program whose action is `allow` or `log`
/// becomes a jump to an epilogue that refuses what the guards name and
/// returns the policy's action for the rest (as [`with_net_log`](super::with_net_log): the
/// policy's errno and `kill` stay). Apply before the network log. With no
/// guard, `filter` itself.
pub fn with_guards(filter: &Filter, guards: Guards) -> Result<Filter, PolicyError> {
    if !guards.any() {
        return Ok(filter.clone());
    }
    let (program, _) = extend_passes(filter, "the run's guards", |k| guards_epilogue(k, guards))?;
    Ok(Filter { program, notify: filter.notify, net_log_from: filter.net_log_from })
}

/// The epilogue of [`with_guards`] for a policy's action `pass`. Most
/// calls pass it after a few comparisons of their number alone (every
/// syscall goes through it when the kernel fills its action cache, at each
/// install); only `socket`, `fallocate`, `ioctl` and i386 `socketcall`
/// have their arguments read, so every other call stays cacheable.
fn guards_epilogue(pass: u32, g: Guards) -> Result<Vec<libc::sock_filter>, PolicyError> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let errno = |e: i32| 0x0005_0000 | e as u32;
    let (sockets, keep) = (g.ports || g.vsock, g.keep_size);
    let mut c = Vec::new();
    #[cfg(target_arch = "x86_64")]
    dispatch_x86(&mut c, pass, sockets, keep);
    #[cfg(target_arch = "aarch64")]
    dispatch_aarch64(&mut c, sockets, keep);
    if sockets {
        // socket(family, type, protocol): `int`s, the low 32 bits count.
        c.extend([Label("socket"), Ld(args_lo(0))]);
        if g.vsock {
            c.push(Jeq(AF_VSOCK, "eafnosupport", NEXT));
        }
        if g.ports {
            c.extend([
                Jeq(AF_SMC, "eafnosupport", NEXT),
                Jeq(AF_INET, "protocol", NEXT),
                Jeq(AF_INET6, "protocol", "pass"),
                Label("protocol"),
                Ld(args_lo(2)),
                Jeq(IPPROTO_MPTCP, "eprotonosupport", NEXT),
                Jeq(IPPROTO_SMC, "eprotonosupport", NEXT),
            ]);
        }
        c.push(Ret(pass));
        // socketcall(SYS_SOCKET, args): the family is in memory, out of
        // the filter's sight.
        #[cfg(target_arch = "x86_64")]
        c.extend([Label("socketcall"), Ld(args_lo(0)), Jeq(SYS_SOCKET, "eafnosupport", "pass")]);
    }
    if keep {
        // fallocate(fd, mode, ...): KEEP_SIZE allocates past the size,
        // except punching a hole, which frees; INSERT_RANGE grows the size
        // without the RLIMIT_FSIZE check.
        c.extend([
            Label("fallocate"),
            Ld(args_lo(1)),
            Jset(FALLOC_FL_INSERT_RANGE, "eopnotsupp", NEXT),
            Jset(FALLOC_FL_KEEP_SIZE, NEXT, "pass"),
            Jeq(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "pass", "eopnotsupp"),
            Label("ioctl"),
            Ld(args_lo(1)),
        ]);
        for cmd in FS_IOC_RESVSP {
            c.push(Jeq(cmd, "eopnotsupp", NEXT));
        }
        c.push(Ret(pass));
    }
    c.extend([
        Label("enosys"),
        Ret(errno(libc::ENOSYS)),
        Label("eafnosupport"),
        Ret(errno(libc::EAFNOSUPPORT)),
        Label("eprotonosupport"),
        Ret(errno(libc::EPROTONOSUPPORT)),
        Label("eopnotsupp"),
        Ret(errno(libc::EOPNOTSUPP)),
        Label("pass"),
        Ret(pass),
    ]);
    assemble(&c).map_err(PolicyError::Invalid)
}

/// The guarded numbers of every x86 ABI, split by ranges; each goes on to
/// check its ABI (the labels of [`guards_epilogue`]'s tail).
#[cfg(target_arch = "x86_64")]
fn dispatch_x86(c: &mut Vec<Asm>, pass: u32, sockets: bool, keep: bool) {
    use Asm::*;
    const NEXT: &str = "";
    // The number first: the guarded ones of every ABI, split by ranges;
    // each goes on to check its ABI.
    c.extend([Ld(0), Jge(NR_FALLOCATE, "high", NEXT), Jge(NR_I386_IOCTL, "low2", NEXT)]);
    if keep {
        c.push(Jeq(NR_IOCTL, "native_ioctl", NEXT));
    }
    if sockets {
        c.push(Jeq(NR_SOCKET, "native_socket", NEXT));
    }
    c.extend([Ret(pass), Label("low2")]);
    if keep {
        c.push(Jeq(NR_I386_IOCTL, "i386_ioctl", NEXT));
    }
    if sockets {
        c.push(Jeq(NR_I386_SOCKETCALL, "i386_socketcall", NEXT));
    }
    c.extend([Ret(pass), Label("high"), Jge(NR_IO_URING[0], "higher", NEXT)]);
    if keep {
        c.extend([Jeq(NR_FALLOCATE, "native_fallocate", NEXT), Jeq(NR_I386_FALLOCATE, "i386_fallocate", NEXT)]);
    }
    if sockets {
        c.push(Jeq(NR_I386_SOCKET, "i386_socket", NEXT));
    }
    // io_uring: the same numbers in every ABI.
    c.extend([Ret(pass), Label("higher"), Jge(X32, "x32", NEXT), Jgt(NR_IO_URING[2], "pass", "enosys"), Label("x32")]);
    if keep {
        c.extend([Jeq(NR_X32_IOCTL, "native_ioctl", NEXT), Jeq(X32 | NR_FALLOCATE, "native_fallocate", NEXT)]);
    }
    if sockets {
        c.push(Jeq(X32 | NR_SOCKET, "native_socket", NEXT));
    }
    c.extend([Jge(X32 | NR_IO_URING[0], NEXT, "pass"), Jgt(X32 | NR_IO_URING[2], "pass", "enosys")]);
    // The ABI of a guarded number (x32 calls are AUDIT_ARCH_X86_64).
    let mut abi = |label: &'static str, arch: u32, to: &'static str| {
        c.extend([Label(label), Ld(4), Jeq(arch, to, "pass")]);
    };
    if keep {
        abi("native_ioctl", AUDIT_ARCH_X86_64, "ioctl");
        abi("i386_ioctl", AUDIT_ARCH_I386, "ioctl");
        abi("native_fallocate", AUDIT_ARCH_X86_64, "fallocate");
        abi("i386_fallocate", AUDIT_ARCH_I386, "fallocate");
    }
    if sockets {
        abi("native_socket", AUDIT_ARCH_X86_64, "socket");
        abi("i386_socket", AUDIT_ARCH_I386, "socket");
        abi("i386_socketcall", AUDIT_ARCH_I386, "socketcall");
    }
}

/// The guarded numbers of aarch64 and of 32-bit ARM (the same checks of
/// their arguments; no `socketcall` in ARM's EABI).
#[cfg(target_arch = "aarch64")]
fn dispatch_aarch64(c: &mut Vec<Asm>, sockets: bool, keep: bool) {
    use Asm::*;
    const NEXT: &str = "";
    c.extend([Ld(4), Jeq(AUDIT_ARCH_AARCH64, NEXT, "arm"), Ld(0)]);
    for (arch, [ioctl, fallocate, socket]) in [("native", NR_A64_GUARDED), ("arm", NR_ARM_GUARDED)] {
        if arch == "arm" {
            c.extend([Label("arm"), Jeq(AUDIT_ARCH_ARM, NEXT, "pass"), Ld(0)]);
        }
        if keep {
            c.extend([Jeq(ioctl, "ioctl", NEXT), Jeq(fallocate, "fallocate", NEXT)]);
        }
        if sockets {
            c.push(Jeq(socket, "socket", NEXT));
        }
        // io_uring: the same numbers in both.
        c.extend([Jge(NR_IO_URING[0], NEXT, "pass"), Jgt(NR_IO_URING[2], "pass", "enosys")]);
    }
}
