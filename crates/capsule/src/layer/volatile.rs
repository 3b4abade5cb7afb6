//! A layer written through `volatile` overlays (docs/layers.md,
//! "Durability"). Such an overlay skips the sync of its upper directory at
//! unmount and makes `fsync` inside the run a no-op, so a run's writes are
//! written back as a bare program's are, later, by the kernel. overlayfs
//! leaves `work/ROOT/work/incompat/volatile` behind and refuses to mount
//! that work directory again. Before such a run the supervisor writes
//! `DIR/volatile`: the boot it happens in, then the roots mounted so.
//!
//! In the same boot nothing can have been lost (what is not written back
//! yet is in the page cache): the next run writing the layer removes
//! overlayfs's marks and keeps its own (the write-back stays the kernel's,
//! as after a bare program), and commit and record settle it: the layer
//! is synced and both marks go. After a restart a run's newest writes may
//! be missing (a crash loses what was not written back), so the layer is
//! refused until its owner keeps it as it is (`capsule layer recover`) or
//! discards it.
//! The marks live outside `upper/`, where no sandboxed program reaches.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{quote_path, sys_err, Layer, LayerError, LayerLock};
use crate::sys::layer as sl;

/// The supervisor's mark, in the layer directory.
pub const VOLATILE_MARK: &str = "volatile";
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id, when the kernel tells it.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string(BOOT_ID).ok()?;
    let id = id.trim();
    is_boot_id(id).then(|| id.to_string())
}

/// What a boot id is made of (a mark's is printed in messages).
fn is_boot_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// What `DIR/volatile` says: the boot and the roots.
struct Mark {
    boot: String,
    roots: Vec<PathBuf>,
}

impl Mark {
    fn parse(text: &str) -> Option<Mark> {
        let mut lines = text.lines();
        let boot = lines.next()?.strip_prefix("boot ")?.to_string();
        if !is_boot_id(&boot) {
            return None;
        }
        let roots = lines.filter(|l| !l.is_empty()).map(PathBuf::from).collect::<Vec<_>>();
        roots.iter().all(|r| r.is_absolute()).then_some(Mark { boot, roots })
    }
}

/// How [`Layer::settle`] found the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// No run left it unsynced.
    Clean,
    /// A run of this boot left it unsynced: synced now, marks removed.
    Synced,
}

impl Layer {
    fn read_mark(&self) -> Result<Option<Mark>, LayerError> {
        let f = match sl::openat_name(
            self.dir_fd.as_raw_fd(),
            VOLATILE_MARK.as_bytes(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(f) => f,
            Err(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(sys_err("open", self.path_of(VOLATILE_MARK), e).into()),
        };
        let mut text = String::new();
        use std::io::Read;
        let bad = |why: String| {
            LayerError::Invalid(format!(
                "layer {}: {}: {why}; `capsule layer recover {}` removes it",
                quote_path(&self.dir),
                quote_path(&self.path_of(VOLATILE_MARK)),
                quote_path(&self.dir)
            ))
        };
        std::fs::File::from(f).take(1 << 20).read_to_string(&mut text).map_err(|e| bad(e.to_string()))?;
        Mark::parse(&text).map(Some).ok_or_else(|| bad("not a `boot ID` line followed by absolute paths".into()))
    }

    /// The boot a run left this layer unsynced in, when it is not this
    /// one: its newest files may be missing. For shared users (a layer
    /// stacked below, list, diff), who may not settle it.
    pub fn interrupted(&self) -> Result<Option<String>, LayerError> {
        Ok(self.read_mark()?.filter(|m| boot_id().as_deref() != Some(&m.boot)).map(|m| m.boot))
    }

    /// [`Layer::interrupted`] as the error a run or commit gets.
    pub fn check_interrupted(&self) -> Result<(), LayerError> {
        match self.interrupted()? {
            Some(boot) => Err(LayerError::Interrupted { dir: self.dir.clone(), boot }),
            None => Ok(()),
        }
    }

    /// Before a run writes the layer: in the boot of its last volatile
    /// run, removes overlayfs's marks so that its work directories mount
    /// again (the layer's own mark stays: that run's writes may not be on
    /// disk yet); after a restart, [`LayerError::Interrupted`].
    pub(crate) fn ready_for_mount(&self, lock: &LayerLock) -> Result<(), LayerError> {
        self.check_lock(lock)?;
        let Some(mark) = self.read_mark()? else { return Ok(()) };
        if boot_id().as_deref() != Some(&mark.boot) {
            return Err(LayerError::Interrupted { dir: self.dir.clone(), boot: mark.boot });
        }
        self.clear_overlay_marks(&mark)
    }

    /// Makes a layer a volatile run left behind durable (same boot) or
    /// refuses it ([`LayerError::Interrupted`], after a restart).
    pub fn settle(&self, lock: &LayerLock) -> Result<Settled, LayerError> {
        self.check_lock(lock)?;
        let Some(mark) = self.read_mark()? else { return Ok(Settled::Clean) };
        if boot_id().as_deref() != Some(&mark.boot) {
            return Err(LayerError::Interrupted { dir: self.dir.clone(), boot: mark.boot });
        }
        // syncfs needs a descriptor that is not O_PATH.
        let d = sl::openat_name(self.dir_fd.as_raw_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| sys_err("open", &self.dir, e))?;
        sl::syncfs(d.as_raw_fd()).map_err(|e| sys_err("syncfs", &self.dir, e))?;
        self.clear_marks(&mark)?;
        Ok(Settled::Synced)
    }

    /// Keeps a layer a restart interrupted as it is: removes the marks
    /// without the boot check (`capsule layer recover`).
    pub fn recover(&self, lock: &LayerLock) -> Result<bool, LayerError> {
        self.check_lock(lock)?;
        let mark = match self.read_mark() {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(false),
            // An unreadable mark names no roots: every work directory's
            // marks go.
            Err(LayerError::Invalid(_)) => Mark { boot: String::new(), roots: self.all_roots()? },
            Err(e) => return Err(e),
        };
        self.clear_marks(&mark)?;
        Ok(true)
    }

    /// Marks the layer before a run mounts `roots` volatile. `false`: the
    /// boot is unknown, so the run mounts them as usual.
    pub(crate) fn begin_volatile(&self, lock: &LayerLock, roots: &[PathBuf]) -> Result<bool, LayerError> {
        self.check_lock(lock)?;
        let Some(boot) = boot_id() else { return Ok(false) };
        let mut text = format!("boot {boot}\n");
        for r in roots {
            text.push_str(&r.to_string_lossy());
            text.push('\n');
        }
        // No fsync: created before the overlay's own mark and every file
        // of the run, it reaches the disk no later than they do.
        let f = sl::openat_name(
            self.dir_fd.as_raw_fd(),
            VOLATILE_MARK.as_bytes(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0o600,
        )
        .map_err(|e| sys_err("open(O_CREAT)", self.path_of(VOLATILE_MARK), e))?;
        use std::io::Write;
        std::fs::File::from(f)
            .write_all(text.as_bytes())
            .map_err(|e| sys_err("write", self.path_of(VOLATILE_MARK), sl::errno_of(&e)))?;
        Ok(true)
    }

    /// Every root the layer's `roots` file names.
    fn all_roots(&self) -> Result<Vec<PathBuf>, LayerError> {
        match std::fs::read_to_string(self.path_of("roots")) {
            Ok(t) => Ok(t.lines().filter(|l| l.starts_with('/')).map(PathBuf::from).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(sys_err("read", self.path_of("roots"), sl::errno_of(&e)).into()),
        }
    }

    /// Removes overlayfs's marks, then `DIR/volatile` (last: until then
    /// the layer still says it needs settling).
    fn clear_marks(&self, mark: &Mark) -> Result<(), LayerError> {
        self.clear_overlay_marks(mark)?;
        match sl::unlink_at(self.dir_fd.as_raw_fd(), VOLATILE_MARK.as_bytes(), false) {
            Ok(()) | Err(libc::ENOENT) => Ok(()),
            Err(e) => Err(sys_err("unlinkat", self.path_of(VOLATILE_MARK), e).into()),
        }
    }

    /// Removes overlayfs's `incompat/volatile` of each root's work directory.
    fn clear_overlay_marks(&self, mark: &Mark) -> Result<(), LayerError> {
        let work = sl::openat_name(self.dir_fd.as_raw_fd(), b"work", libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| sys_err("open", self.path_of("work"), e))?;
        for r in &mark.roots {
            let rel = r.strip_prefix("/").unwrap_or(r);
            let mut inner = rel.as_os_str().as_bytes().to_vec();
            if !inner.is_empty() {
                inner.push(b'/');
            }
            inner.extend_from_slice(b"work");
            let path = || self.path_of("work").join(Path::new(std::ffi::OsStr::from_bytes(&inner)));
            // Beneath work/, no link followed: the roots file is the
            // caller's, the tree below overlayfs's.
            let dir = match sl::openat2(
                work.as_raw_fd(),
                &inner,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
                sl::RESOLVE_BENEATH | sl::RESOLVE_NO_SYMLINKS,
            ) {
                Ok(d) => d,
                Err(libc::ENOENT) => continue,
                Err(e) => return Err(sys_err("open", path(), e).into()),
            };
            remove_incompat(&dir).map_err(|(call, e)| sys_err(call, path().join("incompat"), e))?;
        }
        Ok(())
    }
}

/// Removes `incompat` (`volatile/dirty` in it) from overlayfs's inner
/// work directory `dir`. overlayfs leaves them with mode 000; the caller
/// owns them, so may open them up (overlayfs remakes `dir` at the next mount).
fn remove_incompat(dir: &OwnedFd) -> Result<(), (&'static str, libc::c_int)> {
    sl::chmod_fd(dir.as_raw_fd(), 0o700).map_err(|e| ("chmod", e))?;
    super::node::remove_tree_at(dir.as_raw_fd(), b"incompat", true).map_err(|e| ("unlinkat", e))
}
