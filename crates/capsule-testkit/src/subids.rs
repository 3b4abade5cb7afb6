//! Subordinate ids for the user capsule runs as (`capsule isolate`'s
//! subordinate-id mode): `newuidmap`/`newgidmap` (Debian's `uidmap`) and a
//! range in `/etc/subuid` and `/etc/subgid`, which root adds for the test
//! user where it has none (`useradd --system` gives none).

use std::io::Write;
use std::os::fd::AsRawFd;

use crate::harness::h;

/// The ids given when the user has none: 65536 after every range listed.
const COUNT: u64 = 65536;

/// Ok when capsule's user has subordinate ids and the helpers exist
/// (added for it when root); else why not, for [`crate::skip`].
pub fn subids_for_user() -> Result<(), String> {
    for helper in ["newuidmap", "newgidmap"] {
        if !["/usr/bin", "/bin", "/usr/sbin"].iter().any(|d| std::path::Path::new(d).join(helper).exists()) {
            return Err(format!("no {helper} (apt-get install uidmap)"));
        }
    }
    let name = user_name(h().uid).ok_or_else(|| format!("uid {} has no name in /etc/passwd", h().uid))?;
    for file in ["/etc/subuid", "/etc/subgid"] {
        let has = |t: &str| t.lines().any(|l| l.split(':').next() == Some(name.as_str()));
        if has(&std::fs::read_to_string(file).unwrap_or_default()) {
            continue;
        }
        if !h().is_root {
            return Err(format!("{name} has no range in {file} (root: usermod --add-subuids/--add-subgids)"));
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(file)
            .map_err(|e| format!("{file}: {e}"))?;
        // SAFETY: flock on a descriptor this function owns; released when `f` is closed.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if has(&text) {
            continue;
        }
        let end = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                Some(f.get(1)?.parse::<u64>().ok()? + f.get(2)?.parse::<u64>().ok()?)
            })
            .max()
            .unwrap_or(0)
            .max(100_000);
        let mut f = f;
        writeln!(f, "{name}:{end}:{COUNT}").map_err(|e| format!("{file}: {e}"))?;
    }
    Ok(())
}

fn user_name(uid: u32) -> Option<String> {
    std::fs::read_to_string("/etc/passwd").ok()?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_string())
    })
}
