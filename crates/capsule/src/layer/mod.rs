//! Layers: what `capsule run --layer DIR` leaves in DIR, reviewed and
//! applied to the host afterwards (`capsule layer list|diff|commit|discard`).
//!
//! The directory format is the contract with the run side (docs/layers.md,
//! "Layer directory"):
//! * `upper/` mirrors absolute host paths (`upper/etc/foo` is the layer's
//!   `/etc/foo`): the union of overlayfs upper directories, with kernel
//!   whiteouts (character device 0:0) and opaque directories
//!   (`user.overlay.opaque`, `trusted.overlay.opaque` = `y`); in a layer
//!   fuse-overlayfs served (`DIR/fuse`) also its markers (`.wh.NAME`,
//!   `.wh..wh..opq`, `user.fuseoverlayfs.opaque`), which elsewhere are
//!   ordinary files a program wrote;
//! * `work/`: overlayfs work directories, internal;
//! * `layer.json`: the host originals of the changed paths ([`meta`]);
//! * `protected`: the paths hidden or read-only in the runs, written by
//!   the supervisor before each run ([`guard`]): commit never touches them;
//! * `fuse`: written by the supervisor when a `--root` run uses the
//!   layer (outside `upper/`, hidden from every run);
//! * `layer.lock`: `flock`ed by runs (exclusive; shared for a layer
//!   stacked read-only below another) and by these operations.
//!
//! Everything is read through directory descriptors without following a
//! symbolic link, on the upper side and on the host side alike.

mod commit;
mod diff;
mod guard;
mod meta;
mod node;
mod quote;
mod scan;
mod volatile;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use commit::{CommitReport, Refusal};
pub use meta::{OrigKind, Record};
pub(crate) use node::copy_sparse;
pub use quote::{quote, quote_path};
pub use volatile::{Settled, VOLATILE_MARK};

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
    /// The exact bytes of a path that is not UTF-8 (`path` then has
    /// U+FFFD where they are invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// What changed, for people: `file, 12 bytes`, `content`, `mode 0644 -> 0755`.
    pub what: String,
    /// The size of the layer's regular file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The layer's file takes fewer blocks than its size (holes).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
    /// The special permission bits of the layer's entry: `setuid`,
    /// `setgid`, `sticky`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub special: Vec<&'static str>,
}

fn lossy_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// The names of the special bits set in `mode`.
pub(crate) fn special_bits(mode: u32) -> Vec<&'static str> {
    [(0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")]
        .into_iter()
        .filter(|(b, _)| mode & b != 0)
        .map(|(_, n)| n)
        .collect()
}

impl std::fmt::Display for Change {
    /// `M  /etc/foo`, as `capsule layer list` prints it, the path quoted
    /// when it holds control characters or invalid UTF-8, then the layer's
    /// file size and special bits when there are: `A  /x  (12 bytes, setuid)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}  {}", self.kind.letter(), quote_path(&self.path))?;
        let details = self.details();
        if !details.is_empty() {
            write!(f, "  ({details})")?;
        }
        Ok(())
    }
}

impl Change {
    /// The layer's file size (`sparse` when it has holes) and the special
    /// bits of its entry: `12 bytes, setuid`; empty when there are none.
    pub fn details(&self) -> String {
        let mut d: Vec<String> = Vec::new();
        if let Some(size) = self.size {
            d.push(format!("{size} bytes"));
        }
        if self.sparse {
            d.push("sparse".into());
        }
        d.extend(self.special.iter().map(|s| s.to_string()));
        d.join(", ")
    }
}

/// Everything a layer operation can fail with as a whole (problems with
/// single entries of a commit are in its [`CommitReport`]).
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// A system call failed: the call, the path and the errno.
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error("layer {} is in use by a running capsule", quote_path(.0))]
    InUse(PathBuf),
    #[error("{} is not a layer: {why}", quote_path(dir))]
    NotALayer { dir: PathBuf, why: String },
    #[error("layer {}: {}: {why}", quote_path(dir), quote_path(&dir.join("layer.json")))]
    BadMeta { dir: PathBuf, why: String },
    /// A bad argument (a relative path, a lock of another layer).
    #[error("{0}")]
    Invalid(String),
    /// A run wrote the layer with write-back deferred (`volatile`) and the
    /// machine restarted before it was synced (layer::volatile).
    #[error(
        "layer {}: a run wrote it with write-back deferred and the machine has restarted since (the run's boot was {boot}): \
         if that restart was a crash, the run's newest files may be missing or incomplete; look at it with \
         `capsule layer diff {}`, then keep it as it is with `capsule layer recover {}` or drop it with `capsule layer discard {}`",
        quote_path(dir), quote_path(dir), quote_path(dir), quote_path(dir)
    )]
    Interrupted { dir: PathBuf, boot: String },
}

/// An open layer directory.
#[derive(Debug)]
pub struct Layer {
    dir: PathBuf,
    dir_fd: OwnedFd,
    upper: OwnedFd,
    id: (u64, u64),
    /// fuse-overlayfs served the layer (`DIR/fuse`): its marker names and
    /// xattrs mean whiteouts and opaque directories. Elsewhere a program
    /// wrote them through a kernel overlay, as ordinary files.
    fuse: bool,
}

/// The file that says fuse-overlayfs served a layer (a `--root` run used
/// it); written by the supervisor, outside `upper/`.
pub const FUSE_MARK: &str = "fuse";

/// A held `flock` on `DIR/layer.lock`; released when dropped.
#[derive(Debug)]
pub struct LayerLock {
    _file: OwnedFd,
    exclusive: bool,
    id: (u64, u64),
}

pub(crate) fn sys_err(call: &str, path: impl AsRef<Path>, errno: i32) -> SysError {
    SysError::new(call, errno).path(quote_path(path.as_ref()))
}

const EMPTY_META: &str = "{\n  \"version\": 1,\n  \"originals\": {}\n}\n";

impl Layer {
    /// Opens an existing layer; refuses a directory without `upper/`, or
    /// whose `upper` is not a directory (a symbolic link included).
    pub fn open(dir: impl AsRef<Path>) -> Result<Layer, LayerError> {
        let dir = dir.as_ref().to_path_buf();
        let dir_fd = sl::openat2(libc::AT_FDCWD, dir.as_os_str().as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0, 0)
            .map_err(|e| {
                let mut err = sys_err("open", &dir, e);
                if e == libc::ENOENT {
                    err = err.hint("no layer there: `capsule run --layer DIR` makes one");
                }
                err
            })?;
        let upper = match node::node_at(dir_fd.as_raw_fd(), b"upper", false)
            .map_err(|e| sys_err("lstat", dir.join("upper"), e))?
        {
            node::Node::Dir { .. } => {
                node::open_dir(dir_fd.as_raw_fd(), b"upper").map_err(|e| sys_err("open", dir.join("upper"), e))?
            }
            node::Node::Absent => return Err(LayerError::NotALayer { dir, why: "it has no upper/ directory".into() }),
            other => {
                return Err(LayerError::NotALayer {
                    dir,
                    why: format!("its upper is a {}, not a directory", other.kind_name()),
                })
            }
        };
        let st = crate::sys::fstat(dir_fd.as_raw_fd()).map_err(|e| sys_err("fstat", &dir, e))?;
        let fuse = match node::node_at(dir_fd.as_raw_fd(), FUSE_MARK.as_bytes(), false)
            .map_err(|e| sys_err("lstat", dir.join(FUSE_MARK), e))?
        {
            node::Node::File { .. } => true,
            node::Node::Absent => false,
            other => {
                return Err(LayerError::NotALayer {
                    dir,
                    why: format!("its {FUSE_MARK} is a {}, not a file", other.kind_name()),
                })
            }
        };
        Ok(Layer { dir, dir_fd, upper, id: (st.st_dev, st.st_ino), fuse })
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
            let shown: Vec<String> = names.iter().take(3).map(|n| quote(n)).collect();
            return Err(LayerError::NotALayer {
                dir: dir.to_path_buf(),
                why: format!(
                    "it is not empty (it holds {}{}) and has no upper/; name an empty or new directory",
                    shown.join(", "),
                    if names.len() > 3 { ", ..." } else { "" }
                ),
            });
        }
        for sub in [&b"upper"[..], b"work"] {
            match sl::mkdir_at(fd.as_raw_fd(), sub, 0o700) {
                Ok(()) | Err(libc::EEXIST) => {}
                Err(e) => return Err(sys_err("mkdir", dir.join(Path::new(std::ffi::OsStr::from_bytes(sub))), e).into()),
            }
        }
        for (name, content) in [(&b"layer.json"[..], EMPTY_META), (b"layer.lock", "")] {
            match sl::openat_name(
                fd.as_raw_fd(),
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                0o600,
            ) {
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

    /// fuse-overlayfs served this layer (`DIR/fuse`).
    pub fn is_fuse(&self) -> bool {
        self.fuse
    }

    /// Refuses to let fuse-overlayfs serve a layer it did not serve yet
    /// when the layer holds a name or attribute fuse-overlayfs takes for a
    /// marker (`.wh.*`, `user.fuseoverlayfs.*`): a program of a run
    /// without `--root` wrote it as an ordinary file, and under
    /// fuse-overlayfs it would delete what the program could not touch.
    /// The error names the first one found.
    pub fn check_fuse_ready(&self) -> Result<(), LayerError> {
        if self.fuse {
            return Ok(());
        }
        let root = sl::openat_name(self.upper.as_raw_fd(), b".", libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| sys_err("open", self.dir.join("upper"), e))?;
        match scan::fuse_marker_below(self, root.as_raw_fd(), b"")? {
            None => Ok(()),
            Some(rel) => Err(LayerError::Invalid(format!(
                "layer {}: {} was written by a run without --root, as an ordinary file, but fuse-overlayfs (which serves --root runs) \
                 would take its name or attributes (`.wh.*`, `user.fuseoverlayfs.*`) for a whiteout or an opaque directory; \
                 commit or remove it first (`capsule layer commit {} PATH`), or use another layer for --root runs",
                quote_path(&self.dir),
                quote_path(&host_path(&rel)),
                quote_path(&self.dir)
            ))),
        }
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
        let lock = match sl::openat_name(
            self.dir_fd.as_raw_fd(),
            b"layer.lock",
            libc::O_RDONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0o600,
        ) {
            Ok(f) => f,
            // A read-only layer directory of someone else's: lock the directory itself.
            Err(libc::EACCES) | Err(libc::EROFS) => {
                sl::openat_name(self.dir_fd.as_raw_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
                    .map_err(|e| sys_err("open", &self.dir, e))?
            }
            Err(e) => return Err(sys_err("open", self.path_of("layer.lock"), e).into()),
        };
        if let Ok(mode @ (libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK)) =
            crate::sys::fd_mode(lock.as_raw_fd())
        {
            let kind = crate::error::file_kind(mode);
            return Err(LayerError::Invalid(format!(
                "{} is {kind}, not the layer's lock file",
                self.path_of("layer.lock").display()
            )));
        }
        match sl::flock_nb(lock.as_raw_fd(), exclusive) {
            Ok(()) => Ok(LayerLock { _file: lock, exclusive, id: self.id }),
            Err(libc::EWOULDBLOCK) => Err(LayerError::InUse(self.dir.clone())),
            Err(e) => {
                Err(sys_err(if exclusive { "flock(LOCK_EX)" } else { "flock(LOCK_SH)" }, self.path_of("layer.lock"), e)
                    .into())
            }
        }
    }

    fn check_lock(&self, lock: &LayerLock) -> Result<(), LayerError> {
        if lock.id != self.id {
            return Err(LayerError::Invalid(format!(
                "the lock passed is not the lock of layer {}",
                quote_path(&self.dir)
            )));
        }
        if !lock.exclusive {
            return Err(LayerError::Invalid(format!(
                "changing layer {} needs its exclusive lock (lock_run(true))",
                quote_path(&self.dir)
            )));
        }
        Ok(())
    }

    fn load_meta(&self) -> Result<meta::Meta, LayerError> {
        let f = match sl::openat_name(
            self.dir_fd.as_raw_fd(),
            b"layer.json",
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
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
        self.write_atomic("layer.json", &m.to_json())
    }

    /// Writes the file `name` of the layer directory atomically (a new
    /// file, fsynced, renamed over it).
    fn write_atomic(&self, name: &str, text: &str) -> Result<(), LayerError> {
        use std::io::Write;
        let tmp = format!("{name}.{}.tmp", std::process::id());
        let dirfd = self.dir_fd.as_raw_fd();
        let _ = sl::unlink_at(dirfd, tmp.as_bytes(), false);
        let f = sl::openat_name(
            dirfd,
            tmp.as_bytes(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| sys_err("open(O_CREAT)", self.path_of(&tmp), e))?;
        let mut f = std::fs::File::from(f);
        let res = f.write_all(text.as_bytes()).and_then(|_| f.sync_all());
        if let Err(e) = res {
            let _ = sl::unlink_at(dirfd, tmp.as_bytes(), false);
            return Err(sys_err("write", self.path_of(&tmp), sl::errno_of(&e)).into());
        }
        sl::rename_at(dirfd, tmp.as_bytes(), dirfd, name.as_bytes(), 0)
            .map_err(|e| sys_err("renameat2", self.path_of(name), e))?;
        Ok(())
    }

    /// Records, before a run of `spec`, the paths it cannot change (hidden,
    /// read-only) in `DIR/protected`: commit never touches them.
    pub(crate) fn note_protected(&self, lock: &LayerLock, spec: &crate::proto::spec::RunSpec) -> Result<(), String> {
        self.check_lock(lock).map_err(|e| e.to_string())?;
        let rules = guard::rules_of(spec)?;
        let mut f = self.load_guard_file().map_err(|e| e.to_string())?;
        if f.add(rules) {
            f.version = 1;
            let mut text = serde_json::to_string_pretty(&f).expect("serializable");
            text.push('\n');
            self.write_atomic(guard::GUARD_FILE, &text).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The `guard` paths of `spec` missing on the host: a run of it makes
    /// their stand-ins in the layer ([`Layer::drop_stand_ins`] after it).
    pub(crate) fn stand_ins_of(spec: &crate::proto::spec::RunSpec) -> Vec<PathBuf> {
        let homes = crate::host::fsrules::caller_homes(crate::sys::geteuid());
        spec.filesystem
            .guard
            .iter()
            .filter_map(|g| crate::host::fsrules::rule_path(g, homes.home.as_deref()))
            .map(PathBuf::from)
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .collect()
    }

    /// Removes, after a run (its PID 1 gone), the empty files its PID 1
    /// made in `upper/` as mount points of the stand-ins at `paths`: no
    /// program could write them (covered from before it started), and
    /// they are no change of the host's (commit refuses them anyway).
    pub(crate) fn drop_stand_ins(&self, lock: &LayerLock, paths: &[PathBuf]) -> Result<(), LayerError> {
        use std::os::unix::ffi::OsStrExt;
        self.check_lock(lock)?;
        if paths.is_empty() {
            return Ok(());
        }
        let upper =
            sl::openat_name(self.dir_fd.as_raw_fd(), b"upper", libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
                .map_err(|e| sys_err("open", self.path_of("upper"), e))?;
        for p in paths {
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else { continue };
            let rel = parent.as_os_str().as_bytes().trim_ascii_start().strip_prefix(b"/").unwrap_or(b"");
            let rel = if rel.is_empty() { &b"."[..] } else { rel };
            let flags = libc::O_PATH | libc::O_DIRECTORY;
            let Ok(dir) = sl::openat2(upper.as_raw_fd(), rel, flags, 0, sl::RESOLVE_BENEATH | sl::RESOLVE_NO_SYMLINKS)
            else {
                continue; // nothing was made there
            };
            let name = name.as_bytes();
            match sl::lstat_at(dir.as_raw_fd(), name) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size == 0 => {
                    sl::unlink_at(dir.as_raw_fd(), name, false).map_err(|e| sys_err("unlink", p, e))?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn load_guard_file(&self) -> Result<guard::GuardFile, LayerError> {
        let name = guard::GUARD_FILE;
        let f = match sl::openat_name(
            self.dir_fd.as_raw_fd(),
            name.as_bytes(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(f) => f,
            Err(libc::ENOENT) => return Ok(guard::GuardFile { version: 1, runs: Vec::new() }),
            Err(e) => return Err(sys_err("open", self.path_of(name), e).into()),
        };
        let mut text = String::new();
        use std::io::Read;
        let bad = |why: String| {
            LayerError::Invalid(format!("layer {}: {}: {why}", quote_path(&self.dir), quote_path(&self.path_of(name))))
        };
        std::fs::File::from(f).read_to_string(&mut text).map_err(|e| bad(e.to_string()))?;
        let g: guard::GuardFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if g.version != 1 {
            return Err(bad(format!("version {} is not supported (this capsule reads version 1)", g.version)));
        }
        Ok(g)
    }

    fn load_guard(&self) -> Result<guard::Guard, LayerError> {
        let f = self.load_guard_file()?;
        guard::Guard::from_file(&f).map_err(|why| {
            LayerError::Invalid(format!(
                "layer {}: {}: {why}",
                quote_path(&self.dir),
                quote_path(&self.path_of(guard::GUARD_FILE))
            ))
        })
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
    /// see [`commit`](commit::commit). Setuid and setgid bits are dropped
    /// (they stay in the layer) unless `keep_special_bits`.
    pub fn commit(
        &self,
        lock: &LayerLock,
        paths: &[PathBuf],
        force: bool,
        keep_special_bits: bool,
    ) -> Result<CommitReport, LayerError> {
        self.check_lock(lock)?;
        // What is committed is on disk in the layer first, or refused after a restart.
        self.settle(lock)?;
        commit::commit(self, paths, force, false, keep_special_bits)
    }

    /// Like [`commit`](Self::commit), but each path names exactly one
    /// change (as listed), not what lies below it: the post-run menu's
    /// "commit some".
    pub fn commit_entries(
        &self,
        lock: &LayerLock,
        paths: &[PathBuf],
        force: bool,
        keep_special_bits: bool,
    ) -> Result<CommitReport, LayerError> {
        self.check_lock(lock)?;
        self.settle(lock)?;
        commit::commit(self, paths, force, true, keep_special_bits)
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
        let link = sl::lstat_at(libc::AT_FDCWD, self.dir.as_os_str().as_bytes())
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
            .unwrap_or(false);
        if link {
            return Err(LayerError::Invalid(format!(
                "{} is a symbolic link; discard the layer it points to by its own name",
                quote_path(&self.dir)
            )));
        }
        let names = sl::list_dir(dirfd).map_err(|e| sys_err("getdents64", &self.dir, e))?;
        // layer.json last: until it goes, this is still recognizably a layer.
        for name in names
            .iter()
            .filter(|n| n.as_slice() != b"layer.json")
            .chain(names.iter().filter(|n| n.as_slice() == b"layer.json"))
        {
            node::remove_tree_at(dirfd, name, true)
                .map_err(|e| sys_err("unlinkat", self.dir.join(std::ffi::OsStr::from_bytes(name)), e))?;
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
            let n = normalize(p)
                .ok_or_else(|| LayerError::Invalid(format!("{} is not an absolute path", quote_path(p))))?;
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
