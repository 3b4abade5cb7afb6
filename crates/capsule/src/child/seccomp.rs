//! The seccomp side of PID 1: which user notifications are the network log's.

use crate::sys::seccomp::{run_bpf, RET_ACTION_FULL, RET_USER_NOTIF};

/// Whether a user notification of `program` (a filter from
/// [`with_net_log`], its epilogue starting at instruction `from`) is the
/// network log's rather than the policy's `kill`: run on the same data,
/// the program ends in the epilogue.
pub(crate) fn is_net_log(program: &[libc::sock_filter], from: u32, data: &[u8; 64]) -> bool {
    from != 0
        && matches!(run_bpf(program, data),
            Some((ret, at)) if ret & RET_ACTION_FULL == RET_USER_NOTIF && at >= from as usize)
}
