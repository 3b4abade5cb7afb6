//! Capabilities: the tracee drops every one of them before execve.

use crate::sys::{self, Errno};

// securebits (linux/securebits.h)
const SECBIT_NOROOT: u64 = 1 << 0;
const SECBIT_NOROOT_LOCKED: u64 = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: u64 = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: u64 = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: u64 = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: u64 = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: u64 = 1 << 7;

/// Drops every capability for good (child side; needs CAP_SETPCAP in the
/// current user namespace, which the tracee has as a clone of PID 1, the
/// run's user namespace's creator, or as the creator of its own):
/// securebits first so that uid 0 (`--root`) regains nothing at execve,
/// then the bounding and ambient sets, then the process's own sets.
pub(crate) fn drop_all(last_cap: u32) -> Result<(), Errno> {
    sys::prctl(
        libc::PR_SET_SECUREBITS,
        SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
    )?;
    for cap in 0..=last_cap {
        match sys::prctl(libc::PR_CAPBSET_DROP, cap as u64) {
            Ok(()) | Err(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    sys::prctl_ambient_clear()?;
    sys::capset_empty()
}
