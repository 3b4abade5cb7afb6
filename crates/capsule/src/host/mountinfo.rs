//! The one parser of `/proc/PID/mountinfo` on the supervisor's side (PID 1
//! reads it too, without allocating: `child::fuse`).

use std::fs;
use std::path::PathBuf;

/// One line of /proc/self/mountinfo, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub root: String,
    pub mount_point: String,
    /// The mount's own options (`rw,nosuid`), not the superblock's.
    pub options: String,
    pub fstype: String,
    pub super_options: String,
}

pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            Some(MountEntry {
                root: unescape_mount(pre.get(3)?),
                mount_point: unescape_mount(pre.get(4)?),
                options: pre.get(5)?.to_string(),
                fstype: post.first()?.to_string(),
                super_options: post.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub(crate) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points of the supervisor's namespace (the host's).
pub(crate) fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    parse_mountinfo(&text).into_iter().map(|m| PathBuf::from(m.mount_point)).collect()
}
