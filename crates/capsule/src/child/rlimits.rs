//! Resource limits in the tracee and the per-user counts in PID 1 (no
//! allocation).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};

use crate::plan::rlimits::{RawRlimit, UCOUNTS};
use crate::sys::{self, Errno};

/// Applies the limits (child side). Returns the index of the one that failed.
pub(crate) fn apply(limits: &[RawRlimit]) -> Result<(), (usize, Errno)> {
    for (i, l) in limits.iter().enumerate() {
        sys::setrlimit(l.resource as u32, l.soft, l.hard).map_err(|e| (i, e))?;
    }
    Ok(())
}

/// Writes `values` to [`UCOUNTS`] through `proc`, the run's procfs (child
/// side: the calling process's user namespace is the one bounded, and it
/// needs CAP_SYS_RESOURCE there). A file the kernel does not have (time
/// namespaces before 5.6, fanotify before 5.13) is skipped: nothing can
/// create what it counts. Returns the index of the one that failed.
pub(crate) fn apply_ucounts(proc: RawFd, values: &[u32; 12]) -> Result<(), (usize, Errno)> {
    // The directory once: each file then costs one lookup, not three.
    let dir = match sys::openat(proc, c"sys/user", libc::O_PATH | libc::O_DIRECTORY, 0) {
        Ok(dir) => dir,
        Err(libc::ENOENT) => return Ok(()), // no file to skip either
        Err(e) => return Err((0, e)),
    };
    for (i, ((file, _), &value)) in UCOUNTS.iter().zip(values).enumerate() {
        let name = file.to_bytes_with_nul().strip_prefix(b"sys/user/").and_then(|n| CStr::from_bytes_with_nul(n).ok());
        let Some(name) = name else { return Err((i, libc::EINVAL)) };
        let f = match sys::openat(dir.as_raw_fd(), name, libc::O_WRONLY, 0) {
            Ok(f) => f,
            Err(libc::ENOENT) => continue,
            Err(e) => return Err((i, e)),
        };
        let mut digits = [0u8; 20];
        sys::write_all(f.as_raw_fd(), capsule_nolibc::decimal(u64::from(value), &mut digits)).map_err(|e| (i, e))?;
    }
    Ok(())
}
