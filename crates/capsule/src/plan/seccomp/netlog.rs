//! The network log (docs/network.md): an epilogue sending the calls that
//! name a destination to PID 1.

use super::epilogue::{assemble, extend_passes, Asm};
use super::{Filter, PolicyError};
use crate::sys::seccomp::*;

/// `filter` (a compiled policy; empty for `none`) with the network log
/// (docs/network.md): every `ret` of the policy's program whose action is
/// `allow` or `log` becomes a jump to an epilogue that sends `connect`,
/// `sendto` with an address (argument 4 not NULL), `sendmsg` and
/// `sendmmsg` (native, x32 and i386, `socketcall` included) to the
/// listener, SECCOMP_RET_USER_NOTIF, and returns the policy's action for
/// every other call. Whatever else the policy does with those calls (an
/// errno, its `kill`) stays: the policy wins. A jump replaces a `ret` one
/// for one, so the policy's own jumps keep their targets.
pub fn with_net_log(filter: &Filter) -> Result<Filter, PolicyError> {
    with_watch(filter, false)
}

/// [`with_net_log`], and with `fs` (`explain`, docs/explain.md) the native
/// calls of [`FS_WATCHED`] sent to the listener too, wherever the policy
/// lets them run.
pub fn with_watch(filter: &Filter, fs: bool) -> Result<Filter, PolicyError> {
    let what = if fs { "explain's watch" } else { "the network log" };
    let (program, n) = extend_passes(filter, what, |pass| net_log_epilogue(pass, fs))?;
    Ok(Filter { program, notify: true, net_log_from: n as u32 })
}

/// The native file calls `explain` sends to PID 1 (`child::fswatch`
/// reads their paths): opens, and every call that creates, removes,
/// renames or changes a file. aarch64 has only the `*at` calls.
#[cfg(target_arch = "x86_64")]
pub const FS_WATCHED: &[i64] = &[
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_mknod,
    libc::SYS_truncate,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_mknodat,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_symlink,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_utimensat,
];
#[cfg(target_arch = "aarch64")]
pub const FS_WATCHED: &[i64] = &[
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_truncate,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_mknodat,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    38, // renameat
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_utimensat,
];

/// The epilogue of [`with_net_log`] for a policy's action `pass` (`allow`
/// or `log`).
fn net_log_epilogue(pass: u32, fs: bool) -> Result<Vec<libc::sock_filter>, PolicyError> {
    #[cfg(target_arch = "x86_64")]
    let code = x86_epilogue(pass, fs);
    #[cfg(target_arch = "aarch64")]
    let code = aarch64_epilogue(pass, fs);
    assemble(&code).map_err(PolicyError::Invalid)
}

/// The epilogue's code on x86_64: native, x32 and i386 calls.
#[cfg(target_arch = "x86_64")]
fn x86_epilogue(pass: u32, fs: bool) -> Vec<Asm<&'static str>> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let mut code = vec![
        Ld(4),
        Jeq(AUDIT_ARCH_X86_64, "native", NEXT),
        Jeq(AUDIT_ARCH_I386, "i386", "pass"),
        Label("native"),
        Ld(0),
    ];
    if fs {
        code.extend(FS_WATCHED.iter().map(|&nr| Jeq(nr as u32, "notify", NEXT)));
    }
    code.extend([
        Jeq(NR_CONNECT, "notify", NEXT),
        Jeq(NR_SENDMSG, "notify", NEXT),
        Jeq(NR_SENDMMSG, "notify", NEXT),
        Jeq(X32 | NR_CONNECT, "notify", NEXT),
        Jeq(NR_X32_SENDMSG, "notify", NEXT),
        Jeq(NR_X32_SENDMMSG, "notify", NEXT),
        Jeq(NR_SENDTO, "sendto", NEXT),
        Jeq(X32 | NR_SENDTO, "sendto", "pass"),
        Label("i386"),
        Ld(0),
        Jeq(NR_I386_CONNECT, "notify", NEXT),
        Jeq(NR_I386_SENDMSG, "notify", NEXT),
        Jeq(NR_I386_SENDMMSG, "notify", NEXT),
        Jeq(NR_I386_SENDTO, "sendto", NEXT),
        Jeq(NR_I386_SOCKETCALL, NEXT, "pass"),
        // socketcall(call, args): which call is in argument 0; its own
        // arguments are in memory, out of the filter's sight.
        Ld(args_lo(0)),
        Jeq(SYS_CONNECT as u32, "notify", NEXT),
        Jeq(SYS_SENDTO as u32, "notify", NEXT),
        Jeq(SYS_SENDMSG as u32, "notify", NEXT),
        Jeq(SYS_SENDMMSG as u32, "notify", "pass"),
        // sendto(fd, buf, len, flags, addr, addrlen): no address, a
        // connected socket's traffic, needs no notification. (i386's upper
        // half may hold garbage from a 64-bit caller: PID 1 ignores it.)
        Label("sendto"),
        Ld(args_lo(4)),
        Jeq(0, NEXT, "notify"),
        Ld(args_lo(4) + 4),
        Jeq(0, "pass", "notify"),
        Label("notify"),
        Ret(RET_USER_NOTIF),
        Label("pass"),
        Ret(pass),
    ]);
    code
}

/// The epilogue's code on aarch64: native calls and 32-bit ARM's (no
/// `socketcall` in its EABI).
#[cfg(target_arch = "aarch64")]
fn aarch64_epilogue(pass: u32, fs: bool) -> Vec<Asm<&'static str>> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let mut code = vec![
        Ld(4),
        Jeq(AUDIT_ARCH_AARCH64, "native", NEXT),
        Jeq(AUDIT_ARCH_ARM, "arm", "pass"),
        Label("native"),
        Ld(0),
    ];
    if fs {
        code.extend(FS_WATCHED.iter().map(|&nr| Jeq(nr as u32, "notify", NEXT)));
    }
    code.extend([
        Jeq(NR_A64_CONNECT, "notify", NEXT),
        Jeq(NR_A64_SENDMSG, "notify", NEXT),
        Jeq(NR_A64_SENDMMSG, "notify", NEXT),
        Jeq(NR_A64_SENDTO, "sendto", "pass"),
        Label("arm"),
        Ld(0),
        Jeq(NR_ARM_CONNECT, "notify", NEXT),
        Jeq(NR_ARM_SENDMSG, "notify", NEXT),
        Jeq(NR_ARM_SENDMMSG, "notify", NEXT),
        Jeq(NR_ARM_SENDTO, "sendto", "pass"),
        // sendto(fd, buf, len, flags, addr, addrlen): no address, no
        // notification (32-bit ARM's upper half: as i386's on x86_64).
        Label("sendto"),
        Ld(args_lo(4)),
        Jeq(0, NEXT, "notify"),
        Ld(args_lo(4) + 4),
        Jeq(0, "pass", "notify"),
        Label("notify"),
        Ret(RET_USER_NOTIF),
        Label("pass"),
        Ret(pass),
    ]);
    code
}
