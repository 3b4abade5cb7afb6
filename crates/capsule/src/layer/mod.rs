//! Layers: what `capsule run --layer DIR` leaves in DIR, reviewed and
//! applied to the host afterwards (`capsule layer list|diff|commit|discard`).
//!
//! The directory format is the contract with the run side (docs/layers.md,
//! "Layer directory"):
//! * `upper/` mirrors absolute host paths (`upper/etc/foo` is the layer's
//!   `/etc/foo`): the union of overlayfs upper directories, with kernel
//!   whiteouts (character device 0:0), fuse-overlayfs whiteouts
//!   (`.wh.NAME`, `.wh..wh..opq`) and opaque directories
//!   (`user.overlay.opaque`, `trusted.overlay.opaque`,
//!   `user.fuseoverlayfs.opaque` = `y`);
//! * `work/`: overlayfs work directories, internal;
//! * `layer.json`: the host originals of the changed paths ([`meta`]);
//! * `layer.lock`: `flock`ed by runs (exclusive; shared for a layer
//!   stacked read-only below another) and by these operations.
//!
//! Everything is read through directory descriptors without following a
//! symbolic link, on the upper side and on the host side alike.

mod commit;
mod diff;
mod meta;
mod node;
mod scan;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use commit::{CommitReport, Refusal};
pub use meta::{OrigKind, Record};

use crate::error::SysError;
use crate::sys::layer as sl;

/// A change the layer makes to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ChangeKind {
    /// The host has nothing at the path.
    #[serde(rename = "A")]
    Added,
    /// The host's entry differs in content, link target, type or permissions.
    #[serde(rename = "M")]
    Modified,
    /// The layer deleted the host's entry.
    #[serde(rename = "D")]
    Deleted,
}

impl ChangeKind {
    pub fn letter(self) -> char {
        match self {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
        }
    }
}

/// One changed host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub kind: ChangeKind,
    /// The absolute host path.
    #[serde(serialize_with = "lossy_path")]
    pub path: PathBuf,
    /// What changed, for people: `file, 12 bytes`, `content`, `mode 0644 -> 0755`.
    pub what: String,
}

fn lossy_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

impl std::fmt::Display for Change {
    /// `M  /etc/foo`, as `capsule layer list` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}  {}", self.kind.letter(), self.path.display())
    }
}

/// Everything a layer operation can fail with as a whole (problems with
/// single entries of a commit are in its [`CommitReport`]).
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// A system call failed: the call, the path and the errno.
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error("layer {} is in use by a running capsule", .0.display())]
    InUse(PathBuf),
    #[error("{} is not a layer: {why}", dir.display())]
    NotALayer { dir: PathBuf, why: String },
    #[error("layer {}: {}/layer.json: {why}", dir.display(), dir.display())]
    BadMeta { dir: PathBuf, why: String },
    /// A bad argument (a relative path, a lock of another layer).
    #[error("{0}")]
    Invalid(String),
}

/// An open layer directory.
#[derive(Debug)]
pub struct Layer {
    dir: PathBuf,
    dir_fd: OwnedFd,
    upper: OwnedFd,
    id: (u64, u64),
}

/// A held `flock` on `DIR/layer.lock`; released when dropped.
#[derive(Debug)]
pub struct LayerLock {
    _file: OwnedFd,
    exclusive: bool,
    id: (u64, u64),
}

impl LayerLock {
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
}

pub(crate) fn sys_err(call: &str, path: impl AsRef<Path>, errno: i32) -> SysError {
    SysError::new(call, errno).path(path.as_ref().display().to_string())
}

const EMPTY_META: &str = "{\n  \"version\": 1,\n  \"originals\": {}\n}\n";

impl Layer {
    /// Opens an existing layer; refuses a directory without `upper/`, or
    /// whose `upper` is not a directory (a symbolic link included).
    pub fn open(dir: impl AsRef<Path>) -> Result<Layer, LayerError> {
        let dir = dir.as_ref().to_path_buf();
        let dir_fd = sl::openat2(libc::AT_FDCWD, dir.as_os_str().as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0, 0).map_err(|e| {
            let mut err = sys_err("open", &dir, e);
            if e == libc::ENOENT {
                err = err.hint("no layer there: `capsule run --layer DIR` makes one");
            }
            err
        })?;
        let upper = match node::node_at(dir_fd.as_raw_fd(), b"upper", false).map_err(|e| sys_err("lstat", dir.join("upper"), e))? {
            node::Node::Dir { .. } => node::open_dir(dir_fd.as_raw_fd(), b"upper").map_err(|e| sys_err("open", dir.join("upper"), e))?,
            node::Node::Absent => return Err(LayerError::NotALayer { dir, why: "it has no upper/ directory".into() }),
            other => {
                return Err(LayerError::NotALayer { dir, why: format!("its upper is a {}, not a directory", other.kind_name()) })
            }
        };
        let st = crate::sys::fstat(dir_fd.as_raw_fd()).map_err(|e| sys_err("fstat", &dir, e))?;
        Ok(Layer { dir, dir_fd, upper, id: (st.st_dev, st.st_ino) })
    }

    /// Creates DIR (mode 0700) as an empty layer, or completes an existing
    /// layer (missing `work/`, `layer.json`, `layer.lock`); idempotent.
    /// Refuses a non-empty directory that is not a layer.
    pub fn create(dir: impl AsRef<Path>) -> Result<Layer, LayerError> {
        let dir = dir.as_ref();
        match sl::mkdir_at(libc::AT_FDCWD, dir.as_os_str().as_bytes(), 0o700) {
            Ok(()) | Err(libc::EEXIST) => {}
            Err(e) => return Err(sys_err("mkdir", dir, e).into()),
        }
        let fd = sl::openat2(libc::AT_FDCWD, dir.as_os_str().as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0, 0)
            .map_err(|e| sys_err("open", dir, e))?;
        let names = sl::list_dir(fd.as_raw_fd()).map_err(|e| sys_err("getdents64", dir, e))?;
        if !names.is_empty() && !names.iter().any(|n| n == b"upper") {
            let shown: Vec<String> = names.iter().take(3).map(|n| String::from_utf8_lossy(n).into_owned()).collect();
            return Err(LayerError::NotALayer {
                dir: dir.to_path_buf(),
                why: format!("it is not empty (it holds {}{}) and has no upper/; name an empty or new directory", shown.join(", "), if names.len() > 3 { ", ..." } else { "" }),
            });
        }
        for sub in [&b"upper"[..], b"work"] {
            match sl::mkdir_at(fd.as_raw_fd(), sub, 0o700) {
                Ok(()) | Err(libc::EEXIST) => {}
                Err(e) => return Err(sys_err("mkdir", dir.join(Path::new(std::ffi::OsStr::from_bytes(sub))), e).into()),
            }
        }
        for (name, content) in [(&b"layer.json"[..], EMPTY_META), (b"layer.lock", "")] {
            match sl::openat_name(fd.as_raw_fd(), name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600) {
                Ok(f) => {
                    use std::io::Write;
                    let path = dir.join(std::ffi::OsStr::from_bytes(name));
                    let mut f = std::fs::File::from(f);
                    f.write_all(content.as_bytes()).map_err(|e| sys_err("write", &path, sl::errno_of(&e)))?;
                }
                Err(libc::EEXIST) => {}
                Err(e) => return Err(sys_err("open(O_CREAT)", dir.join(std::ffi::OsStr::from_bytes(name)), e).into()),
            }
        }
        Layer::open(dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Takes the layer's lock without waiting: exclusive for a run that
    /// writes the layer (and for commit, discard, record), shared for a
    /// layer stacked read-only below another (and for list, diff).
    /// Fails with "layer DIR is in use by a running capsule" when it
    /// would block.
    pub fn lock_run(&self, exclusive: bool) -> Result<LayerLock, LayerError> {
        // O_NONBLOCK: a FIFO planted as the lock opens at once (never a hang).
        let lock = match sl::openat_name(self.dir_fd.as_raw_fd(), b"layer.lock", libc::O_RDONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0o600) {
            Ok(f) => f,
            // A read-only layer directory of someone else's: lock the directory itself.
            Err(libc::EACCES) | Err(libc::EROFS) => sl::openat_name(self.dir_fd.as_raw_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|e| sys_err("open", &self.dir, e))?,
            Err(e) => return Err(sys_err("open", self.path_of("layer.lock"), e).into()),
        };
        if let Ok(mode @ (libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK)) = crate::sys::fd_mode(lock.as_raw_fd()) {
            let kind = crate::error::file_kind(mode);
            return Err(LayerError::Invalid(format!("{} is {kind}, not the layer's lock file", self.path_of("layer.lock").display())));
        }
        match sl::flock_nb(lock.as_raw_fd(), exclusive) {
            Ok(()) => Ok(LayerLock { _file: lock, exclusive, id: self.id }),
            Err(libc::EWOULDBLOCK) => Err(LayerError::InUse(self.dir.clone())),
            Err(e) => Err(sys_err(if exclusive { "flock(LOCK_EX)" } else { "flock(LOCK_SH)" }, self.path_of("layer.lock"), e).into()),
        }
    }

    fn check_lock(&self, lock: &LayerLock) -> Result<(), LayerError> {
        if lock.id != self.id {
            return Err(LayerError::Invalid(format!("the lock passed is not the lock of layer {}", self.dir.display())));
        }
        if !lock.exclusive {
            return Err(LayerError::Invalid(format!("changing layer {} needs its exclusive lock (lock_run(true))", self.dir.display())));
        }
        Ok(())
    }

    fn load_meta(&self) -> Result<meta::Meta, LayerError> {
        let f = match sl::openat_name(self.dir_fd.as_raw_fd(), b"layer.json", libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0) {
            Ok(f) => f,
            Err(libc::ENOENT) => return Ok(meta::Meta::default()),
            Err(e) => return Err(sys_err("open", self.path_of("layer.json"), e).into()),
        };
        let mut text = String::new();
        use std::io::Read;
        std::fs::File::from(f)
            .read_to_string(&mut text)
            .map_err(|e| LayerError::BadMeta { dir: self.dir.clone(), why: e.to_string() })?;
        meta::Meta::parse(&text).map_err(|why| LayerError::BadMeta { dir: self.dir.clone(), why })
    }

    /// Writes `layer.json` atomically (a new file renamed over it).
    fn save_meta(&self, m: &meta::Meta) -> Result<(), LayerError> {
        use std::io::Write;
        let tmp = format!("layer.json.{}.tmp", std::process::id());
        let dirfd = self.dir_fd.as_raw_fd();
        let _ = sl::unlink_at(dirfd, tmp.as_bytes(), false);
        let f = sl::openat_name(dirfd, tmp.as_bytes(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600)
            .map_err(|e| sys_err("open(O_CREAT)", self.path_of(&tmp), e))?;
        let mut f = std::fs::File::from(f);
        let res = f.write_all(m.to_json().as_bytes()).and_then(|_| f.sync_all());
        if let Err(e) = res {
            let _ = sl::unlink_at(dirfd, tmp.as_bytes(), false);
            return Err(sys_err("write", self.path_of(&tmp), sl::errno_of(&e)).into());
        }
        sl::rename_at(dirfd, tmp.as_bytes(), dirfd, b"layer.json", 0).map_err(|e| sys_err("renameat2", self.path_of("layer.json"), e))?;
        Ok(())
    }

    /// The changes at or below `paths` (absolute host paths; empty: all),
    /// sorted by path.
    pub fn changes(&self, paths: &[PathBuf]) -> Result<Vec<Change>, LayerError> {
        let sel = Selector::new(paths)?;
        let items = scan::scan(self, &sel)?;
        Ok(items.into_iter().filter_map(|i| i.change()).collect())
    }

    /// Records the host original of every changed (or copied-up) path not
    /// recorded yet; the run side calls it when a run ends, holding the
    /// run's exclusive lock. Returns how many records it added.
    pub fn record_originals(&self, lock: &LayerLock) -> Result<usize, LayerError> {
        self.check_lock(lock)?;
        let mut m = self.load_meta()?;
        let items = scan::scan_with(self, &Selector::all(), false)?;
        let mut added = 0;
        for item in &items {
            let key = item.host_path();
            if m.originals.contains_key(&key) || !item.wants_record() {
                continue;
            }
            let rec = item.record().map_err(|e| sys_err("read", &key, e))?;
            m.originals.insert(key, rec);
            added += 1;
        }
        if added > 0 {
            self.save_meta(&m)?;
        }
        Ok(added)
    }

    /// Writes a diff of the changes at or below `paths` to `out`.
    pub fn diff(&self, paths: &[PathBuf], out: &mut dyn std::io::Write) -> Result<(), LayerError> {
        let sel = Selector::new(paths)?;
        let items = scan::scan(self, &sel)?;
        diff::write_diff(self, &items, out)
    }

    /// Applies the changes at or below `paths` (empty: all) to the host;
    /// see [`commit`](commit::commit).
    pub fn commit(&self, lock: &LayerLock, paths: &[PathBuf], force: bool) -> Result<CommitReport, LayerError> {
        self.check_lock(lock)?;
        commit::commit(self, paths, force, false)
    }

    /// Like [`commit`](Self::commit), but each path names exactly one
    /// change (as listed), not what lies below it: the post-run menu's
    /// "commit some".
    pub fn commit_entries(&self, lock: &LayerLock, paths: &[PathBuf], force: bool) -> Result<CommitReport, LayerError> {
        self.check_lock(lock)?;
        commit::commit(self, paths, force, true)
    }

    /// Removes the whole layer directory (only a layer: `upper/` and
    /// `layer.json` present), making readable what overlayfs left
    /// unreadable. Consumes the lock, which goes with the directory.
    pub fn discard(self, lock: LayerLock) -> Result<(), LayerError> {
        self.check_lock(&lock)?;
        let dirfd = self.dir_fd.as_raw_fd();
        match node::node_at(dirfd, b"layer.json", false).map_err(|e| sys_err("lstat", self.path_of("layer.json"), e))? {
            node::Node::File { .. } => {}
            _ => {
                return Err(LayerError::NotALayer {
                    dir: self.dir.clone(),
                    why: "it has no layer.json file; not discarding a directory capsule did not make".into(),
                })
            }
        }
        let link = sl::lstat_at(libc::AT_FDCWD, self.dir.as_os_str().as_bytes()).map(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK).unwrap_or(false);
        if link {
            return Err(LayerError::Invalid(format!("{} is a symbolic link; discard the layer it points to by its own name", self.dir.display())));
        }
        let names = sl::list_dir(dirfd).map_err(|e| sys_err("getdents64", &self.dir, e))?;
        // layer.json last: until it goes, this is still recognizably a layer.
        for name in names.iter().filter(|n| n.as_slice() != b"layer.json").chain(names.iter().filter(|n| n.as_slice() == b"layer.json")) {
            node::remove_tree_at(dirfd, name, true).map_err(|e| sys_err("unlinkat", self.dir.join(std::ffi::OsStr::from_bytes(name)), e))?;
        }
        drop(lock);
        std::fs::remove_dir(&self.dir).map_err(|e| sys_err("rmdir", &self.dir, sl::errno_of(&e)))?;
        Ok(())
    }
}

/// Which paths an operation is about: everything at or below one of the
/// roots (relative to `/`, without the leading slash; empty = all).
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    roots: Vec<Vec<u8>>,
}

impl Selector {
    pub fn all() -> Selector {
        Selector { roots: vec![Vec::new()] }
    }

    /// From absolute host paths; `..` and `.` are resolved lexically.
    pub fn new(paths: &[PathBuf]) -> Result<Selector, LayerError> {
        if paths.is_empty() {
            return Ok(Selector::all());
        }
        let mut roots = Vec::new();
        for p in paths {
            let n = normalize(p).ok_or_else(|| LayerError::Invalid(format!("`{}` is not an absolute path", p.display())))?;
            roots.push(n.as_os_str().as_bytes()[1..].to_vec());
        }
        Ok(Selector { roots })
    }

    /// `rel` is at or below a root.
    pub fn selected(&self, rel: &[u8]) -> bool {
        self.roots.iter().any(|r| is_at_or_below(rel, r))
    }

    /// `rel` is selected or on the way to a root.
    pub fn relevant(&self, rel: &[u8]) -> bool {
        self.selected(rel) || self.roots.iter().any(|r| is_at_or_below(r, rel))
    }
}

/// `a` equals `b` or lies below it (`b` empty: the root, above everything).
pub(crate) fn is_at_or_below(a: &[u8], b: &[u8]) -> bool {
    b.is_empty() || a == b || (a.len() > b.len() && a.starts_with(b) && a[b.len()] == b'/')
}

/// Lexically normalized absolute path; None for a relative one.
pub fn normalize(p: &Path) -> Option<PathBuf> {
    use std::path::Component;
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// `rel` (no leading slash) as the absolute host path.
pub(crate) fn host_path(rel: &[u8]) -> PathBuf {
    let mut b = Vec::with_capacity(rel.len() + 1);
    b.push(b'/');
    b.extend_from_slice(rel);
    PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b))
}

pub(crate) fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        name.to_vec()
    } else {
        let mut v = rel.to_vec();
        v.push(b'/');
        v.extend_from_slice(name);
        v
    }
}

/// (parent, last component) of a non-empty `rel`.
pub(crate) fn split_last(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

/// A name that may stand for one path component.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

#[cfg(test)]
mod tests;
