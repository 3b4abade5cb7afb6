//! Subordinate ids: the uid and gid ranges an administrator gave a user in
//! `/etc/subuid` and `/etc/subgid` (`NAME_OR_UID:FIRST:COUNT` lines; Debian's
//! `useradd` gives every new user one), which shadow-utils' setuid helpers
//! `newuidmap` and `newgidmap` (Debian's package `uidmap`) write into the
//! maps of the user's user namespaces, as rootless podman does.
//! `capsule isolate` runs a box's program as one of them, a uid of its own
//! as isolate's box uid (the run spec's `subordinate`); `capsule check`
//! reports whether the caller can.
//!
//! A box's user namespace ([`Namespace`]) maps the caller to 0 and the
//! box's subordinate uid and gid to 1: the one-shot supervisor joins it
//! (`Config::user_ns`), and `capsule isolate` hands the box's files to the
//! box's uid and back in it.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::SysError;
use crate::proto::spec::SubordinateIds;
use crate::sys;

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
pub fn helper(name: &str) -> Option<(PathBuf, bool)> {
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
    pub fn usable(&self, user: &str) -> Result<String, SubidsError> {
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
            return Err(SubidsError::Missing(missing));
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

impl SubIds {
    /// Box `id`'s ids: the first uid and gid of the caller's first ranges
    /// plus `id`, as isolate's `first_uid + box_id`.
    pub fn box_ids(&self, id: u32) -> Result<SubordinateIds, SubidsError> {
        let pick = |rs: &[Range], file: &'static str| {
            let r = rs.first().ok_or(SubidsError::NoRange(file))?;
            let id64 = u64::from(id);
            if id64 >= r.count || r.first + id64 > u64::from(u32::MAX - 1) {
                return Err(SubidsError::BeyondRange { id, first: r.first, count: r.count, file });
            }
            Ok((r.first + id64) as u32)
        };
        Ok(SubordinateIds { uid: pick(&self.uids, "/etc/subuid")?, gid: pick(&self.gids, "/etc/subgid")? })
    }
}

/// The variable that chooses `capsule isolate`'s box mode:
/// `permission-bits`, `subordinate-ids` (required), or unset (the latter
/// where usable).
pub const MODE_ENV: &str = "CAPSULE_ISOLATE_BOX_MODE";

/// How `capsule isolate` keeps a box's files from its program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxMode {
    /// The program runs as these subordinate ids.
    Subordinate(SubordinateIds),
    /// It runs as the caller, others' permission bits enforced by mounts;
    /// why subordinate ids are not used.
    PermissionBits(BitsWhy),
}

/// Why a box is in permission-bit mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitsWhy {
    /// [`MODE_ENV`] says so.
    #[error("{MODE_ENV}=permission-bits")]
    Chosen,
    /// Subordinate ids are not usable here.
    #[error("{0}")]
    Unusable(SubidsError),
}

/// The mode for box `id` (any box: `None`, for `capsule check`) of `user`
/// with `ids`, `setting` being [`MODE_ENV`]'s value.
pub fn box_mode(setting: Option<&str>, ids: &SubIds, user: &str, id: Option<u32>) -> Result<BoxMode, SubidsError> {
    let usable = ids.usable(user).and_then(|_| ids.box_ids(id.unwrap_or(0)));
    match (setting.unwrap_or(""), usable) {
        ("permission-bits", _) => Ok(BoxMode::PermissionBits(BitsWhy::Chosen)),
        ("subordinate-ids" | "", Ok(b)) => Ok(BoxMode::Subordinate(b)),
        ("subordinate-ids", Err(e)) => Err(SubidsError::Required(Box::new(e))),
        ("", Err(e)) => Ok(BoxMode::PermissionBits(BitsWhy::Unusable(e))),
        (other, _) => Err(SubidsError::BadMode(other.to_string())),
    }
}

/// Why subordinate ids cannot serve a box.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubidsError {
    /// What is missing: ranges in /etc/subuid or /etc/subgid, helpers.
    #[error("{}", .0.join("; "))]
    Missing(Vec<String>),
    /// The file (/etc/subuid, /etc/subgid) has no range for the caller.
    #[error("no range in {0}")]
    NoRange(&'static str),
    /// The box's number is past the caller's first range in `file`.
    #[error("box {id} is beyond the {count} ids of the range {first}+{count} in {file}")]
    BeyondRange { id: u32, first: u64, count: u64, file: &'static str },
    /// [`MODE_ENV`] requires them, and they are not usable: why.
    #[error("{MODE_ENV}=subordinate-ids, but subordinate ids are not usable: {0}")]
    Required(Box<SubidsError>),
    /// [`MODE_ENV`] has a value it cannot have.
    #[error("{MODE_ENV}={0}: expected permission-bits or subordinate-ids (or unset)")]
    BadMode(String),
    /// No `newuidmap` or `newgidmap` (which).
    #[error("no {0} in {dirs} (Debian: apt install uidmap)", dirs = HELPER_DIRS.join(", "))]
    NoHelper(&'static str),
    /// The helper could not be started.
    #[error("cannot run {}: {error}", path.display())]
    Spawn { path: PathBuf, error: String },
    /// The helper failed: its command line, exit status and stderr.
    #[error("{} {args} failed ({status}): {stderr}", path.display())]
    Helper { path: PathBuf, args: String, status: String, stderr: String },
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The forked helper could not make the user namespace.
    #[error("unshare(CLONE_NEWUSER) failed in the helper making the box's user namespace: see `capsule check`")]
    Unshare,
    /// The work done in the namespace failed: its message.
    #[error("{0}")]
    Work(String),
    /// The helper in the namespace ended without a message: its wait status.
    #[error("the helper in the box's user namespace failed (wait status {0})")]
    HelperStatus(i32),
}

/// Runs `newuidmap` and `newgidmap` on process `pid` (a fresh user
/// namespace's, the caller's own): the caller (`caller`: uid, gid) to 0,
/// `ids` to 1.
pub fn map_box_ids(pid: i32, caller: (u32, u32), ids: SubordinateIds) -> Result<(), SubidsError> {
    for (name, own, sub) in [("newuidmap", caller.0, ids.uid), ("newgidmap", caller.1, ids.gid)] {
        let (path, _) = helper(name).ok_or(SubidsError::NoHelper(name))?;
        let args = [pid.to_string(), "0".into(), own.to_string(), "1".into(), "1".into(), sub.to_string(), "1".into()];
        let out = std::process::Command::new(&path)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| SubidsError::Spawn { path: path.clone(), error: e.to_string() })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(SubidsError::Helper { path, args: args.join(" "), status: out.status.to_string(), stderr });
        }
    }
    Ok(())
}

/// A box's user namespace: the caller as 0, the box's subordinate uid and
/// gid as 1 (made with `newuidmap`/`newgidmap`), kept by a descriptor.
pub struct Namespace {
    fd: OwnedFd,
    pub ids: SubordinateIds,
}

impl Namespace {
    /// Makes one. The caller must be single-threaded (a child is forked).
    pub fn create(ids: SubordinateIds) -> Result<Namespace, SubidsError> {
        let caller = (sys::getuid(), sys::getgid());
        let (ready_r, ready_w) = sys::pipe2(libc::O_CLOEXEC).map_err(|e| SysError::new("pipe2", e))?;
        let (go_r, go_w) = sys::pipe2(libc::O_CLOEXEC).map_err(|e| SysError::new("pipe2", e))?;
        let (theirs, ours) = (go_w.as_raw_fd(), ready_r.as_raw_fd());
        let pid = sys::fork_call(|| {
            // The parent's ends: the read below must see the end of the pipe when the parent goes.
            sys::close(theirs);
            sys::close(ours);
            if sys::unshare(libc::CLONE_NEWUSER).is_err() {
                return 1;
            }
            // Mapped from outside meanwhile; held until the parent has opened it.
            let _ = sys::write_all(ready_w.as_raw_fd(), b"u");
            let mut b = [0u8; 1];
            let _ = sys::read(go_r.as_raw_fd(), &mut b);
            0
        })
        .map_err(|e| SysError::new("fork (the box's user namespace)", e))?;
        drop((ready_w, go_r));
        let made = (|| {
            let mut b = [0u8; 1];
            if sys::read(ready_r.as_raw_fd(), &mut b) != Ok(1) {
                return Err(SubidsError::Unshare);
            }
            map_box_ids(pid, caller, ids)?;
            let path = CString::new(format!("/proc/{pid}/ns/user")).expect("no NUL");
            sys::open(&path, libc::O_RDONLY | libc::O_CLOEXEC, 0)
                .map_err(|e| SysError::new(format!("open /proc/{pid}/ns/user"), e).into())
        })();
        drop(go_w);
        let _ = sys::waitpid(pid, false);
        Ok(Namespace { fd: made?, ids })
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Runs `work` in a child in the namespace, as its root (every
    /// capability over the caller's and the box's files); its error, if
    /// any. The caller must be single-threaded.
    pub fn run(&self, work: impl FnOnce() -> Result<(), String>) -> Result<(), SubidsError> {
        let (err_r, err_w) = sys::pipe2(libc::O_CLOEXEC).map_err(|e| SysError::new("pipe2", e))?;
        let ns = self.fd.as_raw_fd();
        let ours = err_r.as_raw_fd();
        let pid = sys::fork_call(|| {
            sys::close(ours);
            let r = sys::setns(ns, libc::CLONE_NEWUSER)
                .map_err(|e| SysError::new("setns(CLONE_NEWUSER) into the box's user namespace", e).to_string())
                .and_then(|()| work());
            match r {
                Ok(()) => 0,
                Err(m) => {
                    let _ = sys::write_all(err_w.as_raw_fd(), m.as_bytes());
                    1
                }
            }
        })
        .map_err(|e| SysError::new("fork (a helper in the box's user namespace)", e))?;
        drop(err_w);
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = sys::read(err_r.as_raw_fd(), &mut buf) {
            text.extend_from_slice(&buf[..n]);
        }
        let status = sys::waitpid(pid, false).ok().flatten().map_or(-1, |(_, s)| s);
        match (status, text.is_empty()) {
            (0, true) => Ok(()),
            (_, false) => Err(SubidsError::Work(String::from_utf8_lossy(&text).into_owned())),
            (s, true) => Err(SubidsError::HelperStatus(s)),
        }
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
        let SubidsError::Missing(missing) = s.usable("alice").unwrap_err() else { panic!("not Missing") };
        assert_eq!(missing[0], "no range for alice in /etc/subgid");
        assert!(missing[1].starts_with("no newuidmap in ") && missing.len() == 3, "{missing:?}");
        // A box past the range names it; the mode variable decides what an unusable one means.
        let e = s.box_ids(70000).unwrap_err();
        assert_eq!(e, SubidsError::BeyondRange { id: 70000, first: 100000, count: 65536, file: "/etc/subuid" });
        assert_eq!(e.to_string(), "box 70000 is beyond the 65536 ids of the range 100000+65536 in /etc/subuid");
        assert!(matches!(box_mode(Some(""), &s, "alice", None), Ok(BoxMode::PermissionBits(BitsWhy::Unusable(_)))));
        assert!(matches!(box_mode(Some("subordinate-ids"), &s, "alice", None), Err(SubidsError::Required(_))));
        assert_eq!(box_mode(Some("permission-bits"), &s, "alice", None), Ok(BoxMode::PermissionBits(BitsWhy::Chosen)));
        let helper = Some((PathBuf::from("/usr/bin/newuidmap"), true));
        let s = SubIds { gids: s.uids.clone(), newgidmap: helper.clone(), newuidmap: helper, ..s };
        assert_eq!(
            s.usable("alice").unwrap(),
            "uids 100000+65536 and gids 100000+65536 for alice, /usr/bin/newuidmap and /usr/bin/newuidmap"
        );
    }
}
