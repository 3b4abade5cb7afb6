//! Bind and `--file` sources, resolved once, by the supervisor, when it
//! prepares a run: into an `O_PATH` descriptor that PID 1 clones as it is
//! (`open_tree` on the descriptor, no second lookup), so nothing swapped
//! into the path afterwards is what gets mounted.
//!
//! The walk is the kernel's, one component at a time from `/` with
//! `O_PATH | O_NOFOLLOW` (`..` is the real parent, as for the kernel),
//! except for which symbolic links it follows. Everything a run creates on
//! the host belongs to the calling user, so a path the caller binds may
//! hold a link an earlier run planted (to `~/.ssh`, say): a link owned by
//! the caller (the supervisor's own euid, as its user namespace shows it)
//! is never followed. In a sticky world-writable directory (`/tmp`), like
//! the kernel's `fs.protected_symlinks`, only a link owned by the
//! directory's owner is. The system's links (root's, such as `/lib64`)
//! are followed as usual, at most [`MAX_LINKS`] of them.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::errno_text;
use crate::sys;

/// Links followed in one resolution at most (the kernel's MAXSYMLINKS).
pub(crate) const MAX_LINKS: u32 = 40;

/// Why a symbolic link is not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsafe {
    /// Owned by the caller: a sandboxed run could have made it.
    Yours,
    /// In a sticky world-writable directory, not owned by its owner.
    Sticky,
}

/// Whether `me` follows a link owned by `link_uid` in a directory of mode
/// `dir_mode` owned by `dir_uid`.
pub(crate) fn may_follow(me: u32, link_uid: u32, dir_mode: u32, dir_uid: u32) -> Result<(), Unsafe> {
    if link_uid == me {
        return Err(Unsafe::Yours);
    }
    let sticky_ww = libc::S_ISVTX | libc::S_IWOTH;
    if dir_mode & sticky_ww == sticky_ww && link_uid != dir_uid {
        return Err(Unsafe::Sticky);
    }
    Ok(())
}

/// Why a source did not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResolveError {
    /// A call failed at `at`, the path walked so far.
    Sys { errno: i32, at: PathBuf },
    /// `link` (pointing to `target`) is not followed.
    Unsafe { link: PathBuf, target: PathBuf, why: Unsafe },
}

impl ResolveError {
    /// Something on the way does not exist (a `-try` source is skipped).
    pub(crate) fn missing(&self) -> bool {
        matches!(self, ResolveError::Sys { errno: libc::ENOENT, .. })
    }

    /// The message, for the source `src` of a `what` (e.g. "bind source").
    pub(crate) fn describe(&self, what: &str, src: &Path) -> String {
        match self {
            ResolveError::Sys { errno, at } if at == src => {
                format!("{what} `{}`: {}", src.display(), errno_text(*errno))
            }
            ResolveError::Sys { errno, at } => {
                format!("{what} `{}`: at `{}`: {}", src.display(), at.display(), errno_text(*errno))
            }
            ResolveError::Unsafe { link, target, why } => {
                let whose = match why {
                    Unsafe::Yours => "owned by you, which capsule does not follow: a sandboxed run could have made it",
                    Unsafe::Sticky => {
                        "in a sticky world-writable directory and not owned by that directory's owner, \
                         which capsule does not follow (as fs.protected_symlinks)"
                    }
                };
                format!(
                    "{what} `{}`: `{}` is a symbolic link (to `{}`) {whose}; name the link's target \
                     instead, or recreate the link with --symlink inside the sandbox",
                    src.display(),
                    link.display(),
                    target.display()
                )
            }
        }
    }
}

/// Resolves the absolute `path` to an `O_PATH` descriptor of what it
/// names, following only the symbolic links `me` may follow (the last
/// component's too).
pub(crate) fn resolve(path: &Path, me: u32) -> Result<OwnedFd, ResolveError> {
    resolve_at(path, me).map(|(fd, _)| fd)
}

/// [`resolve`], and the path it resolved to: `path` with every link
/// followed replaced by its target and every `..` applied (no link left
/// on it when it was resolved).
pub(crate) fn resolve_at(path: &Path, me: u32) -> Result<(OwnedFd, PathBuf), ResolveError> {
    let fail = |errno, at: &Path| ResolveError::Sys { errno, at: at.to_path_buf() };
    let root = sys::open(c"/", libc::O_PATH | libc::O_DIRECTORY, 0).map_err(|e| fail(e, Path::new("/")))?;
    let mut cur = sys::dup_cloexec(root.as_raw_fd()).map_err(|e| fail(e, Path::new("/")))?;
    // The path walked so far, for messages.
    let mut at = PathBuf::from("/");
    let mut todo: VecDeque<Vec<u8>> = VecDeque::new();
    push_front(&mut todo, path.as_os_str().as_bytes());
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == b".." {
            // The real parent (a link's target's parent after a link), and
            // `/` stays `/`.
            cur = sys::openat(cur.as_raw_fd(), c"..", libc::O_PATH | libc::O_DIRECTORY, 0).map_err(|e| fail(e, &at))?;
            at.pop();
            continue;
        }
        let here = at.join(OsStr::from_bytes(&name));
        let c = CString::new(name).map_err(|_| fail(libc::EINVAL, &here))?;
        // O_DIRECTORY first, so that an automount point is mounted as the
        // kernel's own walk would; ENOTDIR: a file or a link.
        let next = match sys::openat(cur.as_raw_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY, 0) {
            Err(libc::ENOTDIR) => sys::openat(cur.as_raw_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0),
            other => other,
        }
        .map_err(|e| fail(e, &here))?;
        let st = sys::fstat(next.as_raw_fd()).map_err(|e| fail(e, &here))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
            cur = next;
            at = here;
            continue;
        }
        let target = sys::readlink_fd(next.as_raw_fd()).map_err(|e| fail(e, &here))?;
        links += 1;
        if links > MAX_LINKS {
            return Err(fail(libc::ELOOP, &here));
        }
        let dir = sys::fstat(cur.as_raw_fd()).map_err(|e| fail(e, &at))?;
        if let Err(why) = may_follow(me, st.st_uid, dir.st_mode, dir.st_uid) {
            let target = PathBuf::from(OsStr::from_bytes(&target));
            return Err(ResolveError::Unsafe { link: here, target, why });
        }
        if target.is_empty() {
            return Err(fail(libc::ENOENT, &here));
        }
        if target[0] == b'/' {
            cur = sys::dup_cloexec(root.as_raw_fd()).map_err(|e| fail(e, Path::new("/")))?;
            at = PathBuf::from("/");
        }
        push_front(&mut todo, &target);
    }
    Ok((cur, at))
}

/// Puts the components of `path` in front of `todo`, in order (empty ones
/// and `.` dropped).
fn push_front(todo: &mut VecDeque<Vec<u8>>, path: &[u8]) {
    for part in path.split(|&b| b == b'/').rev() {
        if !part.is_empty() && part != b"." {
            todo.push_front(part.to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    const ME: u32 = 1000;
    const ROOT: u32 = 65534;

    #[test]
    fn policy() {
        // Never a link of our own, wherever it is.
        assert_eq!(may_follow(ME, ME, 0o40755, ROOT), Err(Unsafe::Yours));
        assert_eq!(may_follow(ME, ME, 0o41777, ME), Err(Unsafe::Yours));
        // Someone else's in an ordinary directory.
        assert_eq!(may_follow(ME, ROOT, 0o40755, ROOT), Ok(()));
        assert_eq!(may_follow(ME, ROOT, 0o40755, ME), Ok(()));
        assert_eq!(may_follow(ME, 1234, 0o40777, ROOT), Ok(()));
        // Sticky and world-writable (/tmp): only the directory owner's.
        assert_eq!(may_follow(ME, ROOT, 0o41777, ROOT), Ok(()));
        assert_eq!(may_follow(ME, 1234, 0o41777, ROOT), Err(Unsafe::Sticky));
        // Sticky but not world-writable, or world-writable but not sticky.
        assert_eq!(may_follow(ME, 1234, 0o41775, ROOT), Ok(()));
        assert_eq!(may_follow(ME, 1234, 0o40777, ROOT), Ok(()));
    }

    /// A scratch tree under the temporary directory, removed on drop.
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Tree {
            let p = std::env::temp_dir().join(format!("capsule-resolve-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            Tree(p)
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.0.join(rel)
        }
        fn dir(&self, rel: &str) -> PathBuf {
            std::fs::create_dir_all(self.p(rel)).unwrap();
            self.p(rel)
        }
        fn file(&self, rel: &str) -> PathBuf {
            std::fs::write(self.p(rel), rel).unwrap();
            self.p(rel)
        }
        fn link(&self, target: impl AsRef<Path>, rel: &str) -> PathBuf {
            symlink(target, self.p(rel)).unwrap();
            self.p(rel)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn id(p: &Path) -> (u64, u64) {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    fn fd_id(fd: &OwnedFd) -> (u64, u64) {
        let st = sys::fstat(fd.as_raw_fd()).unwrap();
        (st.st_dev, st.st_ino)
    }

    /// Someone who owns none of the test's links (they are the test
    /// runner's).
    fn other() -> u32 {
        sys::geteuid().wrapping_add(4242)
    }

    #[test]
    fn plain_paths_and_dotdot() {
        let t = Tree::new("plain");
        t.dir("a/b");
        let f = t.file("a/b/f");
        assert_eq!(fd_id(&resolve(&f, other()).unwrap()), id(&f));
        // `.`, `..` and repeated slashes.
        let odd = PathBuf::from(format!("{}/a/./b/..//b/f", t.0.display()));
        assert_eq!(fd_id(&resolve(&odd, other()).unwrap()), id(&f));
        // `..` above / stays at /.
        assert_eq!(fd_id(&resolve(Path::new("/../../"), other()).unwrap()), id(Path::new("/")));
        // Missing, and a file taken for a directory.
        let e = resolve(&t.p("a/nope/x"), other()).unwrap_err();
        assert!(e.missing(), "{e:?}");
        assert_eq!(e, ResolveError::Sys { errno: libc::ENOENT, at: t.p("a/nope") });
        let e = resolve(&t.p("a/b/f/x"), other()).unwrap_err();
        assert!(matches!(e, ResolveError::Sys { errno: libc::ENOTDIR, .. }), "{e:?}");
    }

    #[test]
    fn links_followed_unless_ours() {
        let t = Tree::new("links");
        t.dir("real/sub");
        let f = t.file("real/sub/f");
        // Relative, absolute, through a link in the middle, and `..` after
        // a link is the target's parent.
        t.link("real", "rel");
        t.link(t.p("real/sub"), "abs");
        t.link("rel/sub/../sub/f", "chain");
        t.dir("other");
        t.link("../real/sub", "other/up");
        for p in ["rel/sub/f", "abs/f", "chain", "other/up/f", "abs/../sub/f"] {
            assert_eq!(fd_id(&resolve(&t.p(p), other()).unwrap()), id(&f), "{p}");
        }
        // The same links, owned by the resolver: not followed, named.
        let me = sys::geteuid();
        let e = resolve(&t.p("rel/sub/f"), me).unwrap_err();
        assert_eq!(e, ResolveError::Unsafe { link: t.p("rel"), target: "real".into(), why: Unsafe::Yours });
        let msg = e.describe("bind source", &t.p("rel/sub/f"));
        assert!(msg.contains("--symlink") && msg.contains(&t.p("rel").display().to_string()), "{msg}");
        let e = resolve(&t.p("chain"), me).unwrap_err();
        assert!(matches!(e, ResolveError::Unsafe { ref link, .. } if *link == t.p("chain")), "{e:?}");
        // Plain paths still resolve for the owner.
        assert_eq!(fd_id(&resolve(&f, me).unwrap()), id(&f));
        // The path resolved to has no link left on it.
        let (_, real) = resolve_at(&t.p("other/up/f"), other()).unwrap();
        assert_eq!(real, f);
        let (_, real) = resolve_at(&t.p("abs/../sub/f"), other()).unwrap();
        assert_eq!(real, f);
        // A dangling link is missing.
        t.link("nowhere", "dangling");
        assert!(resolve(&t.p("dangling"), other()).unwrap_err().missing());
    }

    #[test]
    fn loops() {
        let t = Tree::new("loops");
        t.link("b", "a");
        t.link("a", "b");
        t.link("self", "self");
        for p in ["a", "self", "a/x"] {
            let e = resolve(&t.p(p), other()).unwrap_err();
            assert!(matches!(e, ResolveError::Sys { errno: libc::ELOOP, .. }), "{p}: {e:?}");
        }
        // 40 links are fine, 41 are not.
        t.dir("d");
        t.link("d", "l0");
        for i in 1..=40 {
            t.link(format!("l{}", i - 1), &format!("l{i}"));
        }
        assert!(resolve(&t.p("l39"), other()).is_ok());
        let e = resolve(&t.p("l40"), other()).unwrap_err();
        assert!(matches!(e, ResolveError::Sys { errno: libc::ELOOP, .. }), "{e:?}");
    }

    #[test]
    fn sticky_directories() {
        if sys::geteuid() != 0 {
            return; // needs lchown
        }
        let t = Tree::new("sticky");
        let d = t.dir("tmp");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        t.dir("target");
        // The directory owner's (root's) link is followed ...
        t.link("../target", "tmp/owners");
        assert!(resolve(&t.p("tmp/owners"), other()).is_ok());
        // ... another user's is not.
        let l = t.link("../target", "tmp/users");
        std::os::unix::fs::lchown(&l, Some(other().wrapping_add(1)), None).unwrap();
        let e = resolve(&t.p("tmp/users"), other()).unwrap_err();
        assert!(matches!(e, ResolveError::Unsafe { why: Unsafe::Sticky, .. }), "{e:?}");
        // Not sticky: followed.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(resolve(&t.p("tmp/users"), other()).is_ok());
    }
}
