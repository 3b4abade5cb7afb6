//! Aborting the FUSE connections of a run stuck at its end (PID 1; no allocation).

use super::wait::Reaper;
use crate::sys::{self};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};

/// Aborts the FUSE connections the program mounted, in the namespaces of
/// the run's remaining processes, through fusectl's `abort` files (the
/// caller owns the connections of the mounts its sandboxes make). A
/// process that exits with a file of a FUSE mount open sends FLUSH and
/// waits for the answer without any signal able to end the wait; if the
/// server is gone but the device is still open, e.g. later in that very
/// process's descriptor table, nothing else ever ends it and the run would
/// never finish. Aborting fails the pending requests (ENOTCONN) and the
/// exit goes on. A connection that PID 1's own mount table shows is left
/// alone: that namespace is the run's, where the program cannot mount
/// (it has no capability over its owner), so its FUSE mounts are the
/// user's host mounts (sshfs, rclone: the same superblocks, copied in
/// with the tree) and capsule's fuse-overlayfs; and they cannot be
/// unmounted from it while PID 1 lives, so their numbers are not reused
/// by a mount of the program. No allocation: PID 1 runs this.
pub(crate) fn abort_fuse(r: &Reaper) {
    if r.fusectl < 0 {
        return;
    }
    super::wait::for_each_process(r.proc, &mut |pid| abort_fuse_of(r, pid));
}

/// `abort_fuse` for the mount table of one process (`pid`, digits). A
/// FUSE connection is fusectl's directory named after the superblock's
/// device number, which no other superblock has meanwhile: a mount whose
/// number has no such directory is not FUSE (`fuse`, `fuse.*`, `fuseblk`).
pub(crate) fn abort_fuse_of(r: &Reaper, pid: &[u8]) {
    for_each_mount_dev(r.proc, pid, &mut |dev| {
        let mut digits = [0u8; 20];
        let name = capsule_nolibc::decimal(dev, &mut digits);
        let mut at = [0u8; 48];
        let Some(path) = join(&mut at, &[name, b"/abort"]) else { return true };
        let Ok(abort) = sys::openat(r.fusectl, path, libc::O_WRONLY, 0) else { return true };
        let mut own = false;
        for_each_mount_dev(r.proc, b"1", &mut |d| {
            own = d == dev;
            !own
        });
        if !own {
            let _ = sys::write(abort.as_raw_fd(), b"1");
        }
        true
    });
}

/// Calls `f` with the device number (the kernel's encoding, major << 20 |
/// minor) of each mount in `pid`'s mount table (the run's procfs), until it
/// returns false. A line longer than the buffer (a program can mount at a
/// path as long as it likes) still counts: the number is at its start.
pub(crate) fn for_each_mount_dev(proc: RawFd, pid: &[u8], f: &mut dyn FnMut(u64) -> bool) {
    let mut at = [0u8; 48];
    let Some(path) = join(&mut at, &[pid, b"/mountinfo"]) else { return };
    let Ok(file) = sys::openat(proc, path, libc::O_RDONLY, 0) else { return };
    let mut buf = [0u8; 16384];
    let mut have = 0;
    // In the rest of a line already counted.
    let mut skipping = false;
    loop {
        let n = match sys::read(file.as_raw_fd(), &mut buf[have..]) {
            Ok(n) => n,
            Err(_) => return,
        };
        have += n;
        let mut start = 0;
        while let Some(nl) = buf[start..have].iter().position(|&b| b == b'\n') {
            let dev = if std::mem::take(&mut skipping) { None } else { mount_dev(&buf[start..start + nl]) };
            if dev.is_some_and(|d| !f(d)) {
                return;
            }
            start += nl + 1;
        }
        if n == 0 {
            return;
        }
        if start == 0 && have == buf.len() {
            let dev = if std::mem::replace(&mut skipping, true) { None } else { mount_dev(&buf) };
            if dev.is_some_and(|d| !f(d)) {
                return;
            }
            have = 0;
            continue;
        }
        buf.copy_within(start..have, 0);
        have -= start;
    }
}

/// The device number of one mountinfo line, `ID PARENT MAJOR:MINOR ROOT
/// POINT ...` (only its start is needed).
pub(crate) fn mount_dev(line: &[u8]) -> Option<u64> {
    let dev = line.split(|&b| b == b' ').nth(2)?;
    let mut parts = dev.split(|&b| b == b':');
    let (major, minor) = (parts.next().and_then(decimal)?, parts.next().and_then(decimal)?);
    Some((major << 20) | minor)
}

/// An unsigned decimal number (no sign, at most 9 digits).
pub(crate) fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// `parts` concatenated into `buf` as a C string; None if too long.
pub(crate) fn join<'a>(buf: &'a mut [u8], parts: &[&[u8]]) -> Option<&'a CStr> {
    let mut len = 0;
    for p in parts {
        buf.get_mut(len..len + p.len())?.copy_from_slice(p);
        len += p.len();
    }
    *buf.get_mut(len)? = 0;
    CStr::from_bytes_with_nul(&buf[..=len]).ok()
}

#[cfg(test)]
mod tests {
    use super::for_each_mount_dev;
    use std::os::fd::AsRawFd;

    /// Every mount's device number is seen, one after a line longer than
    /// the buffer (a mount at a long path) and that line's own too.
    #[test]
    fn mount_devs_survive_long_lines() {
        let dir = std::env::temp_dir().join(format!("capsule-mountdev-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("7")).unwrap();
        let long = "x".repeat(40_000);
        let table = format!(
            "21 1 0:20 / / rw - tmpfs tmpfs rw\n22 21 0:51 / /{long} rw - fuse.evil evil rw\n23 21 0:52 / /mnt rw - fuse.sshfs host rw\n24 21 8:1 / /b rw - ext4 /dev/sda1 rw\n"
        );
        std::fs::write(dir.join("7/mountinfo"), table).unwrap();
        let d = std::fs::File::open(&dir).unwrap();
        let mut seen = Vec::new();
        for_each_mount_dev(d.as_raw_fd(), b"7", &mut |dev| {
            seen.push(dev);
            true
        });
        let mut first = Vec::new();
        for_each_mount_dev(d.as_raw_fd(), b"7", &mut |dev| {
            first.push(dev);
            dev != 51
        });
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(seen, [20, 51, 52, (8 << 20) | 1]);
        assert_eq!(first, [20, 51], "stops when told");
    }
}
