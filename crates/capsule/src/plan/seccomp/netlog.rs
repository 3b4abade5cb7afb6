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
    let (program, n) = extend_passes(filter, "the network log", net_log_epilogue)?;
    Ok(Filter { program, notify: true, net_log_from: n as u32 })
}

/// The epilogue of [`with_net_log`] for a policy's action `pass` (`allow`
/// or `log`).
fn net_log_epilogue(pass: u32) -> Result<Vec<libc::sock_filter>, PolicyError> {
    use Asm::*;
    const NEXT: &str = "";
    let args_lo = |i: u32| 16 + 8 * i;
    let code = [
        Ld(4),
        Jeq(AUDIT_ARCH_X86_64, "native", NEXT),
        Jeq(AUDIT_ARCH_I386, "i386", "pass"),
        Label("native"),
        Ld(0),
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
    ];
    assemble(&code).map_err(PolicyError::Invalid)
}
