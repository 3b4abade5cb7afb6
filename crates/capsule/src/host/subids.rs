//! Subordinate ids: the uid and gid ranges an administrator gave a user in
//! `/etc/subuid` and `/etc/subgid` (`NAME_OR_UID:FIRST:COUNT` lines; Debian's
//! `useradd` gives every new user one), which shadow-utils' setuid helpers
//! `newuidmap` and `newgidmap` (Debian's package `uidmap`) write into the
//! maps of the user's user namespaces, as rootless podman does. A sandbox
//! could run a program as one of them, a uid of its own as isolate's box
//! uid; `capsule check` reports whether the caller could.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One range of subordinate ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub count: u64,
}

/// The ranges of `user` (by name or by number `uid`) in the text of
/// `/etc/subuid` or `/etc/subgid`; malformed lines and empty ranges are
/// skipped, as shadow-utils does.
pub fn ranges(text: &str, user: &str, uid: u32) -> Vec<Range> {
    let uid = uid.to_string();
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (who, first, count) = (f.next()?, f.next()?, f.next()?);
            if f.next().is_some() || (who != user && who != uid) {
                return None;
            }
            let r = Range { first: first.parse().ok()?, count: count.parse().ok()? };
            (r.count > 0).then_some(r)
        })
        .collect()
}

/// Where the setuid helpers are looked for.
const HELPER_DIRS: [&str; 3] = ["/usr/bin", "/bin", "/usr/sbin"];

/// A helper's path, if it is there and may act for the caller: setuid
/// root, or (where distributions use file capabilities) executable.
fn helper(name: &str) -> Option<(PathBuf, bool)> {
    HELPER_DIRS.iter().map(|d| Path::new(d).join(name)).find_map(|p| {
        let m = std::fs::metadata(&p).ok()?;
        let setuid_root = m.uid() == 0 && m.mode() & libc::S_ISUID != 0;
        (m.is_file() && m.mode() & 0o111 != 0).then_some((p, setuid_root))
    })
}

/// What the host offers the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubIds {
    pub uids: Vec<Range>,
    pub gids: Vec<Range>,
    /// `newuidmap`, `newgidmap`, and whether each is setuid root.
    pub newuidmap: Option<(PathBuf, bool)>,
    pub newgidmap: Option<(PathBuf, bool)>,
}

impl SubIds {
    /// Reads `/etc/subuid`, `/etc/subgid` and looks for the helpers.
    pub fn read(user: &str, uid: u32) -> SubIds {
        let read = |p: &str| ranges(&std::fs::read_to_string(p).unwrap_or_default(), user, uid);
        SubIds {
            uids: read("/etc/subuid"),
            gids: read("/etc/subgid"),
            newuidmap: helper("newuidmap"),
            newgidmap: helper("newgidmap"),
        }
    }

    /// Ok: the ranges and helpers, on one line; Err: what is missing.
    pub fn usable(&self, user: &str) -> Result<String, String> {
        let mut missing = Vec::new();
        if self.uids.is_empty() {
            missing.push(format!("no range for {user} in /etc/subuid"));
        }
        if self.gids.is_empty() {
            missing.push(format!("no range for {user} in /etc/subgid"));
        }
        for (name, h) in [("newuidmap", &self.newuidmap), ("newgidmap", &self.newgidmap)] {
            if h.is_none() {
                missing.push(format!("no {name} in {}", HELPER_DIRS.join(", ")));
            }
        }
        if !missing.is_empty() {
            return Err(missing.join("; "));
        }
        let show = |rs: &[Range]| rs.iter().map(|r| format!("{}+{}", r.first, r.count)).collect::<Vec<_>>().join(",");
        let helper = |h: &Option<(PathBuf, bool)>| {
            let (p, root) = h.as_ref().expect("checked above");
            format!("{}{}", p.display(), if *root { "" } else { " (not setuid root: file capabilities?)" })
        };
        Ok(format!(
            "uids {} and gids {} for {user}, {} and {}",
            show(&self.uids),
            show(&self.gids),
            helper(&self.newuidmap),
            helper(&self.newgidmap)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_by_name_or_number() {
        let text = "alice:100000:65536\nbob:165536:65536\n1000:300000:10\nbad line\nalice:5:x\nalice:7:0\n";
        assert_eq!(
            ranges(text, "alice", 1000),
            [Range { first: 100000, count: 65536 }, Range { first: 300000, count: 10 }]
        );
        assert_eq!(ranges(text, "carol", 1002), []);
        assert_eq!(ranges("", "alice", 1000), []);
    }

    #[test]
    fn usable_says_what_is_missing() {
        let s = SubIds { uids: vec![Range { first: 100000, count: 65536 }], ..Default::default() };
        let e = s.usable("alice").unwrap_err();
        assert!(e.contains("no range for alice in /etc/subgid") && e.contains("no newuidmap"), "{e}");
        let helper = Some((PathBuf::from("/usr/bin/newuidmap"), true));
        let s = SubIds { gids: s.uids.clone(), newgidmap: helper.clone(), newuidmap: helper, ..s };
        assert_eq!(
            s.usable("alice").unwrap(),
            "uids 100000+65536 and gids 100000+65536 for alice, /usr/bin/newuidmap and /usr/bin/newuidmap"
        );
    }
}
