//! The sandbox's filesystem: a mount plan prepared from the spec before
//! clone (every path a `CString`, every size a string, every host file
//! opened), executed by PID 1 (`child::mounts`) with the new mount API.
//!
//! Bind and `--file` sources are resolved once, by the supervisor, when it
//! prepares the run (`crate::plan::resolve`: a link owned by the caller is not
//! followed); the plan holds the descriptors, and PID 1 mounts or copies
//! what they refer to, never looking the path up again.
//!
//! Execution order (PID 1, see `child::pid1`):
//! 1. Clone every mount source with `open_tree(OPEN_TREE_CLONE)`: the bind
//!    sources from their descriptors while PID 1 is still in the
//!    supervisor's mount namespace (open_tree refuses a mount of another
//!    namespace), then, in its own, the host root and device nodes while
//!    the host view is still the current root (a size-limited layer's
//!    staging tmpfs is attached on the old root's /tmp before the
//!    overlays on it are made). The clones are detached and
//!    can be attached later.
//! 2. Attach the new root on top of the current `/`; from here on every
//!    sandbox path is resolved with `openat2(RESOLVE_IN_ROOT)` from the new
//!    root's fd, so a symlink inside the sandbox tree never leads out of it.
//! 3. Apply the operations in order, then the filesystem rules
//!    (`crate::host::fsrules`: covers, clones shown again, writable binds; the
//!    covers with mount points in them are made read-only last).
//! 4. `pivot_root(".", ".")` and detach the old root, which takes every
//!    host mount not cloned into the new tree with it.
//!
//! Nothing here is ever visible in the host's mount table: the supervisor
//! and every PID 1 live in private mount namespaces, and the clones are
//! detached until they are attached inside one.

use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::error::SpecError;
use crate::host::fsrules::{self, Action, Homes};
use crate::plan::overlay::{Backend, LayerPlan};
use crate::plan::resolve::{self, ResolveError};
use crate::proto::spec::{self, MountOp, RunSpec};
use crate::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// Host device nodes bound into every `/dev` capsule builds.
pub(crate) const DEVICES: [&CStr; 5] = [c"null", c"zero", c"full", c"random", c"urandom"];
pub(crate) const HOST_DEVICES: [&CStr; 5] = [c"/dev/null", c"/dev/zero", c"/dev/full", c"/dev/random", c"/dev/urandom"];

/// Size of the host view's private /run.
const RUN_SIZE: u64 = 16 << 20;

/// What the sandbox's root starts as.
pub(crate) enum Base {
    /// The host's root, cloned recursively, read-only, nosuid, nodev.
    HostView,
    /// An empty tmpfs, made read-only once the operations are applied.
    EmptyRoot { size: CString },
    /// A `--root` layer: fuse-overlayfs over the host's root, started by
    /// PID 1 (`argv` and its pointer array prepared here).
    /// `name`: the command line, for errors.
    Fuse { argv: Vec<CString>, ptrs: Vec<*const libc::c_char>, name: u32 },
}

/// One prepared operation. `name` indexes the run's path table so that an
/// error can name the path without the child allocating.
pub(crate) enum Op {
    /// `src`: the resolved source (`O_PATH`), None for a missing `-try` one.
    Bind {
        src: Option<OwnedFd>,
        dst: CString,
        attrs: u64,
        clone: Cell<RawFd>,
        name: u32,
    },
    /// `optional`: skipped when the mount point does not exist (a default
    /// of the host view for a directory the host may lack).
    Tmpfs {
        dst: CString,
        size: CString,
        mode: &'static CStr,
        attrs: u64,
        optional: bool,
        name: u32,
    },
    Proc {
        dst: CString,
        name: u32,
    },
    Dev {
        dst: CString,
        nodes: [Cell<RawFd>; 5],
        name: u32,
    },
    Dir {
        dst: CString,
        name: u32,
    },
    /// `src`: the resolved source, open for reading.
    File {
        src: OwnedFd,
        dst: CString,
        name: u32,
    },
    FileData {
        dst: CString,
        content: Vec<u8>,
        name: u32,
    },
    Symlink {
        target: CString,
        dst: CString,
        name: u32,
    },
    /// `holes`: the cover of a directory stays writable (for the mount
    /// points of the rules beneath it) until every operation is applied;
    /// `cover` keeps it until then.
    Hide {
        dst: CString,
        holes: bool,
        cover: Cell<RawFd>,
        name: u32,
    },
    /// Clone `dst` (no link followed on the way) into `saved[slot]`,
    /// recursively; nothing when it is missing.
    Save {
        dst: CString,
        slot: usize,
        name: u32,
    },
    /// Attach `saved[slot]` at `dst`, with `attrs` set recursively.
    Reveal {
        dst: CString,
        slot: usize,
        attrs: u64,
        name: u32,
    },
    /// A `guard` path that was missing on the host: an empty read-only
    /// file attached there, its mount point made where the run would have
    /// made it (the layer, a cover); nothing where the view is read-only.
    StandIn {
        dst: CString,
        name: u32,
    },
    /// A kernel overlay of a layer (`crate::plan::overlay`): made in step 1b
    /// from the host view, attached at `dst` in step 3. `base`: a staged
    /// one's lower layer, a read-only overlay (lower, upper, work, where)
    /// made and attached first.
    Overlay {
        dst: CString,
        lower: CString,
        upper: CString,
        work: CString,
        base: Option<[CString; 4]>,
        /// Mounted `volatile` (the layer is marked for it).
        volatile: bool,
        fs: Cell<RawFd>,
        name: u32,
    },
}

/// Everything PID 1 needs to build the sandbox's mount tree.
pub(crate) struct MountPlan {
    pub base: Base,
    pub ops: Vec<Op>,
    /// Some `--hide` needs the empty file or directory bound over what it
    /// hides.
    pub needs_scratch: bool,
    /// The clones `Op::Save` keeps for `Op::Reveal`.
    pub saved: Vec<Cell<RawFd>>,
    /// The bind and `file` sources as resolved, to check a PID 1 prepared
    /// ahead against the host before it is used (shared with the
    /// [`crate::plan::memo::PlanMemo`] and the PID 1s of copies).
    pub sources: Rc<[Source]>,
    /// The directories that vouch for the missing covered sources.
    pub parents: Rc<[Parent]>,
    /// A size-limited layer's staging tmpfs (`crate::plan::overlay::Stage`),
    /// attached before the overlays whose upper directories it holds.
    pub stage: Option<RawFd>,
}

/// A bind or `file` source as the supervisor resolved it.
pub(crate) struct Source {
    pub path: PathBuf,
    /// A `file` source: its content must be unchanged too.
    pub file: bool,
    pub try_: bool,
    /// None: a missing `-try` source.
    pub stamp: Option<Stamp>,
    /// A path a rule hides: looked up as the kernel does (links followed);
    /// what matters is which object, if any, is there to cover.
    pub covered: bool,
    /// A covered path that is missing: the directory of
    /// [`MountPlan::parents`] whose entries vouch that it still is.
    pub parent: Option<u32>,
}

/// The deepest existing directory above some missing covered paths (the
/// caller's home for most default secrets, `~/.config` for others), as it
/// was when the plan was prepared. A directory's change time moves with
/// every entry created, removed or renamed in it, so while it has not
/// moved, nothing appeared at the missing paths beneath it: one `stat`
/// checks them all when a PID 1 prepared ahead is about to be used (the
/// request path), instead of one lookup each.
pub(crate) struct Parent {
    pub dir: PathBuf,
    cdir: CString,
    /// dev, ino, mtime and ctime; None when they cannot vouch: a
    /// filesystem not known to keep them like that (network and FUSE ones
    /// may not), or a change so recent that another could still come
    /// within the same timestamp (file times are as coarse as a clock
    /// tick, 1 s on some filesystems).
    stamp: Option<[i64; 6]>,
}

impl Parent {
    /// Filesystems that move a directory's times on every change of its
    /// entries, with timestamps from the kernel's clock: ext2/3/4, XFS,
    /// Btrfs, tmpfs, F2FS.
    const TRUSTED: [i64; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010];
    /// A directory changed this recently (seconds) cannot vouch. (A clock
    /// set back by more than that could give a later change a recorded
    /// time again; such a jump is not guarded against.)
    const SETTLED: i64 = 2;

    fn times(dir: &CStr) -> Option<[i64; 6]> {
        let st = sys::stat_path(dir, true).ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFDIR).then_some([
            st.st_dev as i64,
            st.st_ino as i64,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_ctime,
            st.st_ctime_nsec,
        ])
    }

    /// Records `dir` at `now` (seconds of CLOCK_REALTIME_COARSE).
    fn record(dir: &Path, now: i64) -> Parent {
        let cdir = cstr(dir);
        let trusted = sys::fs_type(&cdir).is_ok_and(|t| Self::TRUSTED.contains(&t));
        let stamp = Self::times(&cdir).filter(|t| trusted && t[4] < now - Self::SETTLED);
        Parent { dir: dir.to_path_buf(), cdir, stamp }
    }

    /// Whether it was recorded able to vouch (a trusted filesystem, settled).
    pub(crate) fn vouches(&self) -> bool {
        self.stamp.is_some()
    }

    /// Whether the directory is the same, with the same entries (false:
    /// not known; its paths are then looked up).
    pub(crate) fn unchanged(&self) -> bool {
        self.stamp.is_some() && Self::times(&self.cdir) == self.stamp
    }
}

/// The [`Parent`]s of one plan, each recorded once.
struct Parents {
    list: Vec<Parent>,
    now: i64,
}

impl Parents {
    /// The parent that vouches for the missing `path`: its deepest
    /// existing ancestor, when the component below that is not there at
    /// all (not even as a dangling link, whose target could appear).
    /// `absent_below`: an ancestor already known to lack that component
    /// (the listed home).
    fn vouch(&mut self, path: &Path, absent_below: Option<&Path>) -> Option<u32> {
        let dir = match absent_below {
            Some(dir) => dir,
            None => {
                let mut cur = path;
                loop {
                    let parent = cur.parent()?;
                    // (A directory recorded already is known to be one.)
                    let is_dir = self.list.iter().any(|p| p.dir.as_os_str() == parent.as_os_str())
                        || match sys::stat_path(&cstr(parent), true) {
                            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => true,
                            Err(libc::ENOENT) => false,
                            _ => return None,
                        };
                    if !is_dir {
                        cur = parent;
                        continue;
                    }
                    if sys::stat_path(&cstr(cur), false).err() != Some(libc::ENOENT) {
                        return None;
                    }
                    break parent;
                }
            }
        };
        let i = match self.list.iter().position(|p| p.dir.as_os_str() == dir.as_os_str()) {
            Some(i) => i,
            None => {
                self.list.push(Parent::record(dir, self.now));
                self.list.len() - 1
            }
        };
        Some(i as u32)
    }
}

/// What a source resolved to: dev, ino and, for a copied file, size,
/// mtime and ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp([i64; 7]);

impl Stamp {
    fn of(fd: RawFd, file: bool) -> Option<Stamp> {
        let st = sys::fstat(fd).ok()?;
        let mut s = [st.st_dev as i64, st.st_ino as i64, 0, 0, 0, 0, 0];
        if file {
            s[2..].copy_from_slice(&[st.st_size, st.st_mtime, st.st_mtime_nsec, st.st_ctime, st.st_ctime_nsec]);
        }
        Some(Stamp(s))
    }

    /// What `path` names (links followed): dev, ino and file type; None
    /// when nothing (reachable) is there.
    fn of_path(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp([m.dev() as i64, m.ino() as i64, (m.mode() & libc::S_IFMT) as i64, 0, 0, 0, 0]))
    }
}

/// Which of some names are directly in one directory (the caller's home,
/// or a [`Parent`] that changed), read once: a path beneath it whose first
/// component is not there does not exist. That answers for most default
/// secrets (`~/.aws`, `~/.config/gcloud`...) without a `stat` each, when a
/// plan is prepared and when a PID 1 prepared ahead is checked before use
/// and its parents cannot vouch: one `getdents64` pass, nothing kept but
/// the names asked about.
pub(crate) struct Listing<'a> {
    dir: &'a Path,
    /// The first components below `dir` of the paths asked about, sorted
    /// (borrowed from them: no copy per secret per run).
    wanted: Vec<&'a [u8]>,
    present: Vec<bool>,
}

/// The first component of `path` below `dir`, if `path` is beneath it
/// (clean absolute paths, compared as bytes: every run asks this of each
/// default secret).
fn first_below<'a>(path: &'a Path, dir: &Path) -> Option<&'a [u8]> {
    let (p, d) = (path.as_os_str().as_encoded_bytes(), dir.as_os_str().as_encoded_bytes());
    let rest = p.strip_prefix(d.strip_suffix(b"/").unwrap_or(d))?.strip_prefix(b"/")?;
    let first = rest.split(|&b| b == b'/').next()?;
    (!first.is_empty()).then_some(first)
}

impl<'a> Listing<'a> {
    /// Directories bigger than this are not listed (stat each path then).
    const MAX: usize = 4096;

    /// Lists `dir` for the first components of `paths` beneath it. None:
    /// none is beneath it, or `dir` cannot be read (each path is then
    /// looked up on its own).
    pub(crate) fn read(dir: &'a Path, paths: impl Iterator<Item = &'a Path>) -> Option<Listing<'a>> {
        let mut wanted: Vec<&[u8]> = paths.filter_map(|p| first_below(p, dir)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return None;
        }
        let fd = sys::open(&cstr(dir), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0).ok()?;
        let mut present = vec![false; wanted.len()];
        let mut buf = [0u8; 8192];
        let mut entries = 0;
        loop {
            let n = sys::getdents64(fd.as_raw_fd(), &mut buf).ok()?;
            if n == 0 {
                break;
            }
            for name in sys::dirent_names(&buf[..n]) {
                let name = name.ok()?;
                if let Ok(i) = wanted.binary_search_by(|w| (*w).cmp(name)) {
                    present[i] = true;
                }
                entries += 1;
            }
            if entries > Self::MAX {
                return None;
            }
        }
        Some(Listing { dir, wanted, present })
    }

    /// Whether `path` is known not to exist (false: not known).
    pub(crate) fn absent(&self, path: &Path) -> bool {
        let Some(first) = first_below(path, self.dir) else { return false };
        match self.wanted.binary_search_by(|w| (*w).cmp(first)) {
            Ok(i) => !self.present[i],
            Err(_) => false,
        }
    }
}

/// Whether every source of a plan still resolves, with the same rules, to
/// the same object as when the plan was prepared (`me`: as in
/// [`MountPlan::prepare`]). A missing covered path is vouched for by its
/// [`Parent`] when that has not changed, else by a listing of it, else
/// looked up.
pub(crate) fn sources_unchanged(sources: &[Source], parents: &[Parent], me: u32) -> bool {
    // Per parent: None when it vouches as it is, else a listing of it
    // (None when it cannot be listed).
    let listed: Vec<Option<Option<Listing>>> = parents
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let below = || sources.iter().filter(move |s| s.parent == Some(i as u32)).map(|s| s.path.as_path());
            (!p.unchanged()).then(|| Listing::read(&p.dir, below()))
        })
        .collect();
    sources.iter().all(|s| {
        let vouched = s.parent.is_some_and(|i| match &listed[i as usize] {
            None => true,
            Some(listing) => listing.as_ref().is_some_and(|l| l.absent(&s.path)),
        });
        vouched || s.unchanged(me)
    })
}

impl Source {
    /// Whether the source resolves, with the same rules, to the same
    /// object as when the plan was prepared, looked up again.
    pub(crate) fn unchanged(&self, me: u32) -> bool {
        if self.covered {
            return Stamp::of_path(&self.path) == self.stamp;
        }
        match resolve::resolve(&self.path, me) {
            Ok(fd) => self.stamp.is_some() && Stamp::of(fd.as_raw_fd(), self.file) == self.stamp,
            Err(e) => self.stamp.is_none() && self.try_ && e.missing(),
        }
    }
}

impl MountPlan {
    /// The descriptors the plan holds (bind and `file` sources), which
    /// PID 1 keeps.
    pub(crate) fn fds(&self) -> Vec<RawFd> {
        self.ops
            .iter()
            .filter_map(|op| match op {
                Op::File { src, .. } | Op::Bind { src: Some(src), .. } => Some(src.as_raw_fd()),
                _ => None,
            })
            .chain(self.stage)
            .collect()
    }
}

/// Why a mount plan could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    /// A source did not resolve: what it is (`bind source`, `--file
    /// source`, `filesystem path`, ...), its path, and where and why.
    #[error("{}", error.describe(what, path))]
    Source { what: &'static str, path: PathBuf, error: ResolveError },
    /// The filesystem rules do not hold together.
    #[error(transparent)]
    Rules(#[from] SpecError),
    /// A `--file` source that is not a regular file: its kind.
    #[error("--file source `{}` is {kind}: give a regular file to copy", path.display())]
    NotAFile { path: PathBuf, kind: &'static str },
    /// A guarded path missing in a run without a layer, whose stand-in
    /// would have to be made on the host.
    #[error(
        "filesystem.guard `{}`: missing, and in a run without a layer its stand-in (the mount point \
         that keeps the program from creating it) would have to be made on the host, which capsule \
         does not do; to fix: create it yourself (it is then mounted read-only), or run in a layer \
         (--layer DIR: the stand-in is made there, and no commit takes it)",
        .0.display()
    )]
    StandInOnHost(PathBuf),
}

/// Resolves a bind source (None: a missing `-try` one) and records it;
/// errors call the source `what`.
fn bind_source(
    what: &'static str,
    src: &Path,
    try_: bool,
    me: u32,
    sources: &mut Vec<Source>,
) -> Result<Option<OwnedFd>, PlanError> {
    let fd = match resolve::resolve(src, me) {
        Ok(fd) => Some(fd),
        Err(e) if try_ && e.missing() => None,
        Err(error) => return Err(PlanError::Source { what, path: src.to_path_buf(), error }),
    };
    let stamp = fd.as_ref().and_then(|fd| Stamp::of(fd.as_raw_fd(), false));
    sources.push(Source { path: src.to_path_buf(), file: false, try_, stamp, covered: false, parent: None });
    Ok(fd)
}

/// Whether the sandbox may show at `path` something else than the host
/// does: beneath one of the spec's mount operations or of the host view's
/// own mounts. There the supervisor cannot tell from the host what a rule
/// will find, and PID 1 looks.
fn shadowed(spec: &RunSpec, path: &Path) -> bool {
    // As bytes (a `Path` compares component by component, and every run
    // of the host view asks this of each default secret); `path` is clean.
    let p = path.as_os_str().as_encoded_bytes();
    spec.mounts.iter().any(|op| under(p, op.dst().as_os_str().as_encoded_bytes()))
        || !spec.empty_root && [&b"/proc"[..], b"/dev", b"/tmp", b"/run"].iter().any(|m| under(p, m))
}

/// `explain`'s view of a plan (`child::fswatch` classifies paths against
/// it without touching the plan's descriptors): per operation, in the
/// plan's order, where it acts and what it makes of what is beneath.
pub(crate) struct WatchView {
    /// The base takes writes (a `--root` layer's fuse-overlayfs).
    pub base_writable: bool,
    /// (dst, one of the `W_*`, for [`W_AS_SAVED`] the index of its `Save`).
    pub ops: Vec<(CString, u8, u32)>,
}

/// Not a mount: changes nothing beneath.
pub(crate) const W_SKIP: u8 = 0;
pub(crate) const W_WRITABLE: u8 = 1;
pub(crate) const W_READ_ONLY: u8 = 2;
pub(crate) const W_HIDDEN: u8 = 3;
/// capsule's `/dev`: only its nodes and `shm` take writes.
pub(crate) const W_DEV: u8 = 4;
/// A clone shown again as it was when it was taken (by the `Save` at the index).
pub(crate) const W_AS_SAVED: u8 = 5;
/// Shown again read-only by a rule.
pub(crate) const W_READ_ONLY_RULE: u8 = 6;

impl MountPlan {
    /// The plan as `explain` looks at it.
    pub(crate) fn watch_view(&self) -> WatchView {
        let mut ops = Vec::with_capacity(self.ops.len());
        for (i, op) in self.ops.iter().enumerate() {
            let rdonly = |attrs: u64| if attrs & MOUNT_ATTR_RDONLY != 0 { W_READ_ONLY } else { W_WRITABLE };
            let (kind, aux) = match op {
                Op::Bind { src: Some(_), attrs, .. } | Op::Tmpfs { attrs, .. } => (rdonly(*attrs), 0),
                Op::Proc { .. } | Op::Overlay { .. } => (W_WRITABLE, 0),
                Op::Dev { .. } => (W_DEV, 0),
                Op::Hide { .. } => (W_HIDDEN, 0),
                Op::StandIn { .. } => (W_READ_ONLY_RULE, 0),
                &Op::Reveal { slot, attrs, .. } if attrs & MOUNT_ATTR_RDONLY != 0 => {
                    let _ = slot;
                    (W_READ_ONLY_RULE, 0)
                }
                &Op::Reveal { slot, .. } => {
                    let save = self.ops[..i].iter().rposition(|o| matches!(o, Op::Save { slot: s, .. } if *s == slot));
                    match save {
                        Some(j) => (W_AS_SAVED, j as u32),
                        None => (W_READ_ONLY, 0),
                    }
                }
                _ => (W_SKIP, 0),
            };
            ops.push((op.dst().into(), kind, aux));
        }
        WatchView { base_writable: matches!(self.base, Base::Fuse { .. }), ops }
    }
}

impl Op {
    /// Where the operation acts in the run's tree.
    pub(crate) fn dst(&self) -> &CStr {
        match self {
            Op::Bind { dst, .. }
            | Op::Tmpfs { dst, .. }
            | Op::Proc { dst, .. }
            | Op::Dev { dst, .. }
            | Op::Dir { dst, .. }
            | Op::File { dst, .. }
            | Op::FileData { dst, .. }
            | Op::Symlink { dst, .. }
            | Op::Hide { dst, .. }
            | Op::Save { dst, .. }
            | Op::Reveal { dst, .. }
            | Op::StandIn { dst, .. }
            | Op::Overlay { dst, .. } => dst,
        }
    }
}

/// Whether `p` is `dir` or beneath it (clean absolute paths, as bytes).
fn under(p: &[u8], dir: &[u8]) -> bool {
    let dir = dir.strip_suffix(b"/").unwrap_or(dir);
    p.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// Whether `a` is `b` or beneath it, or `b` beneath `a`.
fn related(a: &[u8], b: &[u8]) -> bool {
    under(a, b) || under(b, a)
}

/// Whether a hidden `path` lies in a fresh tmpfs of the plan (the host
/// view's /tmp or /run) that no other operation mounts into, over or
/// beneath, nor any rule of `acting` (the paths of the rules other than
/// hides) acts on: it is empty when PID 1 builds the tree, so the cover
/// would find nothing (every default secret when `$HOME` is in /tmp).
fn in_fresh_tmpfs(ops: &[Op], acting: &[&[u8]], path: &Path) -> bool {
    let p = path.as_os_str().as_encoded_bytes();
    // Most hidden paths (a home elsewhere) end here, without a scan.
    if !under(p, b"/tmp") && !under(p, b"/run") {
        return false;
    }
    let fresh = ops.iter().position(|op| {
        matches!(op, Op::Tmpfs { dst, .. } if matches!(dst.to_bytes(), b"/tmp" | b"/run") && under(p, dst.to_bytes()) && p != dst.to_bytes())
    });
    let Some(at) = fresh else { return false };
    let others = ops.iter().enumerate().any(|(i, op)| i != at && related(p, op.dst().to_bytes()));
    !others && !acting.iter().any(|q| related(p, q))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).expect("validated: no NUL")
}

fn size_str(n: u64) -> CString {
    CString::new(n.to_string()).expect("digits")
}

impl MountPlan {
    /// Prepares the plan; resolves the bind and `--file` sources in the
    /// supervisor's view, following only the links `me` (the supervisor's
    /// euid) may follow (`crate::plan::resolve`). `homes` are the caller's, for
    /// the filesystem rules. `names` collects the paths errors may name.
    /// `layers`: the run's, prepared by `crate::plan::overlay`.
    pub(crate) fn prepare(
        spec: &RunSpec,
        me: u32,
        homes: &Homes,
        names: &mut Vec<String>,
        layers: Option<&LayerPlan>,
    ) -> Result<Self, PlanError> {
        Self::prepare_at(spec, me, homes, names, layers, sys::realtime_coarse_s())
    }

    /// [`MountPlan::prepare`] at `now` (seconds of CLOCK_REALTIME_COARSE),
    /// which decides which [`Parent`]s have settled.
    pub(super) fn prepare_at(
        spec: &RunSpec,
        me: u32,
        homes: &Homes,
        names: &mut Vec<String>,
        layers: Option<&LayerPlan>,
        now: i64,
    ) -> Result<Self, PlanError> {
        let mut d = Draft { spec, me, names, sources: Vec::new(), ops: Vec::new(), needs_scratch: false };
        let base = match spec.empty_root {
            true => Base::EmptyRoot { size: size_str(spec::EMPTY_ROOT_SIZE) },
            false => d.host_view(layers)?,
        };
        for op in &spec.mounts {
            let op = d.spec_op(op)?;
            d.ops.push(op);
        }
        let (parents, saved_at) = d.rules(homes, now)?;
        // The layer directories themselves are not the program's business
        // (and overlayfs refuses lookups into a mounted upper directory).
        for dir in layers.map(|l| l.dirs.as_slice()).unwrap_or(&[]) {
            d.needs_scratch = true;
            let name = d.name(dir.display().to_string());
            d.ops.push(Op::Hide { dst: cstr(dir), holes: false, cover: Cell::new(-1), name });
        }
        let saved = saved_at.iter().map(|_| Cell::new(-1)).collect();
        let stage = layers.and_then(|l| l.stage.as_ref()).map(|s| s.fs.as_raw_fd());
        let Draft { ops, needs_scratch, sources, .. } = d;
        Ok(MountPlan { base, ops, needs_scratch, saved, sources: sources.into(), parents: parents.list.into(), stage })
    }
}

/// A [`MountPlan`] being made: the operations and sources so far.
struct Draft<'a> {
    spec: &'a RunSpec,
    /// The supervisor's euid: whose links resolving may follow.
    me: u32,
    /// The paths errors may name; an operation holds its index.
    names: &'a mut Vec<String>,
    sources: Vec<Source>,
    ops: Vec<Op>,
    needs_scratch: bool,
}

impl Draft<'_> {
    fn name(&mut self, s: String) -> u32 {
        self.names.push(s);
        (self.names.len() - 1) as u32
    }

    /// A bind of `src` (resolved as a bind source) on `dst`.
    fn bind(
        &mut self,
        what: &'static str,
        src: &Path,
        try_: bool,
        dst: CString,
        attrs: u64,
        name: String,
    ) -> Result<Op, PlanError> {
        let src = bind_source(what, src, try_, self.me, &mut self.sources)?;
        Ok(Op::Bind { src, dst, attrs, clone: Cell::new(-1), name: self.name(name) })
    }

    /// The host view's base (through fuse-overlayfs for a `--root`
    /// layer) and its defaults, first, so that later operations can bind
    /// over or inside them: /proc, /dev, a fresh /tmp and /run, the
    /// layers' kernel overlays.
    fn host_view(&mut self, layers: Option<&LayerPlan>) -> Result<Base, PlanError> {
        let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
        let fuse = match layers.map(|l| &l.backend) {
            Some(Backend::Fuse { argv }) => {
                // Through fuse-overlayfs the host's pseudo filesystems
                // would be files of the layer: /sys is bound back as
                // the host view has it (/proc, /dev, /tmp, /run follow).
                let sys = self.bind("bind source", Path::new("/sys"), true, c"/sys".into(), ro, "/sys".into())?;
                self.ops.push(sys);
                let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
                ptrs.push(std::ptr::null());
                let line: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
                Some(Base::Fuse { argv: argv.clone(), ptrs, name: self.name(line.join(" ")) })
            }
            _ => None,
        };
        let name = self.name("/proc".into());
        self.ops.push(Op::Proc { dst: c"/proc".into(), name });
        let name = self.name("/dev".into());
        self.ops.push(Op::Dev { dst: c"/dev".into(), nodes: Default::default(), name });
        let name = self.name("/tmp".into());
        self.ops.push(Op::Tmpfs {
            dst: c"/tmp".into(),
            size: size_str(self.spec.tmp_size.unwrap_or(spec::DEFAULT_TMP_SIZE)),
            mode: c"1777",
            attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            optional: false,
            name,
        });
        // The host's /run holds the sockets of the user's session: its
        // D-Bus bus (through which `systemd-run --user` starts anything
        // outside the sandbox), gpg and ssh agents, container engines.
        // A read-only mount does not stop connect() on a socket, and
        // pathname sockets are not network-namespaced, so /run is
        // replaced like /tmp.
        let name = self.name("/run".into());
        self.ops.push(Op::Tmpfs {
            dst: c"/run".into(),
            size: size_str(RUN_SIZE),
            mode: c"0755",
            attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
            optional: true,
            name,
        });
        if self.spec.share_net {
            // ... except what name resolution needs when the network
            // is shared (resolv.conf links here with systemd-resolved).
            let resolve = Path::new("/run/systemd/resolve");
            let op = self.bind(
                "bind source",
                resolve,
                true,
                c"/run/systemd/resolve".into(),
                ro,
                "/run/systemd/resolve".into(),
            )?;
            self.ops.push(op);
        }
        if let Some((Backend::Kernel(overlays), l)) = layers.map(|l| (&l.backend, l)) {
            for o in overlays {
                let top = l.dirs.last().expect("one").display();
                let name = self.name(format!("{} (layer {top})", o.dst.display()));
                self.ops.push(Op::Overlay {
                    dst: cstr(&o.dst),
                    lower: o.lower.clone(),
                    upper: o.upper.clone(),
                    work: o.work.clone(),
                    base: o.base.clone(),
                    volatile: o.volatile,
                    fs: Cell::new(-1),
                    name,
                });
            }
        }
        Ok(fuse.unwrap_or(Base::HostView))
    }

    /// The operation of one of the spec's `mounts`.
    fn spec_op(&mut self, op: &MountOp) -> Result<Op, PlanError> {
        let dst = cstr(op.dst());
        let dst_name = op.dst().display().to_string();
        let noexec = |n: bool| if n { MOUNT_ATTR_NOEXEC } else { 0 };
        let bind_name = |src: &Path| format!("{} -> {}", src.display(), dst_name);
        Ok(match op {
            MountOp::Bind { src, try_, noexec: ne, .. } => {
                let attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne);
                self.bind("bind source", src, *try_, dst, attrs, bind_name(src))?
            }
            MountOp::RoBind { src, try_, noexec: ne, .. } => {
                let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne);
                self.bind("bind source", src, *try_, dst, attrs, bind_name(src))?
            }
            MountOp::DevBind { src, try_, noexec: ne, .. } => {
                self.bind("bind source", src, *try_, dst, MOUNT_ATTR_NOSUID | noexec(*ne), bind_name(src))?
            }
            MountOp::Tmpfs { size, noexec: ne, .. } => Op::Tmpfs {
                dst,
                size: size_str(size.unwrap_or(spec::DEFAULT_TMP_SIZE)),
                mode: c"0755",
                attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne),
                optional: false,
                name: self.name(dst_name),
            },
            MountOp::Proc { .. } => Op::Proc { dst, name: self.name(dst_name) },
            MountOp::Dev { .. } => Op::Dev { dst, nodes: Default::default(), name: self.name(dst_name) },
            MountOp::Dir { .. } => Op::Dir { dst, name: self.name(dst_name) },
            MountOp::File { src, .. } => Op::File { src: self.file_source(src)?, dst, name: self.name(dst_name) },
            MountOp::FileData { content, .. } => {
                Op::FileData { dst, content: content.as_bytes().to_vec(), name: self.name(dst_name) }
            }
            MountOp::Symlink { target, .. } => Op::Symlink { target: cstr(target), dst, name: self.name(dst_name) },
            MountOp::Hide { .. } => {
                self.needs_scratch = true;
                Op::Hide { dst, holes: false, cover: Cell::new(-1), name: self.name(dst_name) }
            }
        })
    }

    /// A `--file` source, resolved and opened for reading: a regular file
    /// only.
    fn file_source(&mut self, src: &Path) -> Result<OwnedFd, PlanError> {
        let what = "--file source";
        let path = || src.to_path_buf();
        let at = resolve::resolve(src, self.me).map_err(|error| PlanError::Source { what, path: path(), error })?;
        let sys_err = |errno| PlanError::Source { what, path: path(), error: ResolveError::Sys { errno, at: path() } };
        match sys::fd_mode(at.as_raw_fd()) {
            Ok(libc::S_IFREG) => {}
            Ok(libc::S_IFDIR) => return Err(sys_err(libc::EISDIR)),
            // A FIFO would block the supervisor's loop in the
            // open below, a device in PID 1's copy: files only.
            Ok(mode) => return Err(PlanError::NotAFile { path: path(), kind: crate::error::file_kind(mode) }),
            Err(e) => return Err(sys_err(e)),
        }
        // What was resolved, opened for reading (an O_PATH
        // descriptor cannot be read).
        let fd = sys::reopen(at.as_raw_fd(), libc::O_RDONLY).map_err(sys_err)?;
        let stamp = Stamp::of(fd.as_raw_fd(), true);
        self.sources.push(Source {
            path: src.to_path_buf(),
            file: true,
            try_: false,
            stamp,
            covered: false,
            parent: None,
        });
        Ok(fd)
    }

    /// The filesystem rules, last. Where the supervisor can tell, a path
    /// missing on the host costs this one lookup and no operation (the
    /// default secrets of every run); a PID 1 prepared ahead is used
    /// only while the same objects are there (`sources_unchanged`).
    /// Returns the parents that vouch for missing paths, and where each
    /// saved slot was found.
    fn rules(&mut self, homes: &Homes, now: i64) -> Result<(Parents, Vec<Option<PathBuf>>), PlanError> {
        let spec = self.spec;
        let actions = fsrules::plan(&spec.filesystem, homes, spec.empty_root)?;
        let hidden: Vec<&Path> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Hide { path, .. } if !shadowed(spec, path) => Some(path.as_path()),
                _ => None,
            })
            .collect();
        // Each home listed once; a missing home through its parent (a
        // passwd home that does not exist then costs no lookup per secret).
        let listings: Vec<Listing> = [&homes.home, &homes.passwd]
            .into_iter()
            .flatten()
            .filter_map(|h| {
                Listing::read(h, hidden.iter().copied()).or_else(|| Listing::read(h.parent()?, hidden.iter().copied()))
            })
            .collect();
        let acting: Vec<&[u8]> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Hide { .. } | Action::StandIn { .. } => None,
                Action::Save { path, .. }
                | Action::Reveal { path, .. }
                | Action::Writable { path }
                | Action::HostReadOnly { path } => Some(path.as_os_str().as_encoded_bytes()),
            })
            .collect();
        let mut parents = Parents { list: Vec::new(), now };
        let mut saved_at: Vec<Option<PathBuf>> = vec![None; fsrules::slots(&actions)];
        let rw = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        for action in actions.iter() {
            match action {
                Action::Hide { path, holes } => self.hide(path, *holes, &acting, &listings, &mut parents),
                &Action::Save { ref path, slot } => saved_at[slot] = self.save(path, slot)?,
                &Action::Reveal { slot, read_only, .. } => {
                    let Some(at) = &saved_at[slot] else { continue }; // missing
                    let attrs = if read_only { MOUNT_ATTR_RDONLY } else { 0 };
                    let name = self.name(at.display().to_string());
                    self.ops.push(Op::Reveal { dst: cstr(at), slot, attrs, name });
                }
                Action::Writable { path } => {
                    let name = path.display().to_string();
                    let op = self.bind("filesystem.writable path", path, false, cstr(path), rw, name)?;
                    self.ops.push(op);
                }
                Action::HostReadOnly { path } => {
                    let name = path.display().to_string();
                    let op = self.bind("filesystem path", path, true, cstr(path), MOUNT_ATTR_RDONLY | rw, name)?;
                    self.ops.push(op);
                }
                &Action::StandIn { ref path, slot } => {
                    if saved_at[slot].is_some() {
                        continue; // there: its read-only clone holds
                    }
                    if spec.layers.is_empty() && stand_in_on_host(path) {
                        return Err(PlanError::StandInOnHost(path.clone()));
                    }
                    self.needs_scratch = true;
                    let name = self.name(path.display().to_string());
                    self.ops.push(Op::StandIn { dst: cstr(path), name });
                }
            }
        }
        Ok((parents, saved_at))
    }

    /// A hide rule: nothing when the path is in a fresh tmpfs or missing
    /// on the host (its source, or a parent, then vouches for that).
    fn hide(&mut self, path: &Path, holes: bool, acting: &[&[u8]], listings: &[Listing], parents: &mut Parents) {
        if in_fresh_tmpfs(&self.ops, acting, path) {
            return; // nothing there, nothing can be
        }
        if !shadowed(self.spec, path) {
            let listed = listings.iter().find(|l| l.absent(path));
            let stamp = if listed.is_some() { None } else { Stamp::of_path(path) };
            let parent = match stamp {
                Some(_) => None,
                None => parents.vouch(path, listed.map(|l| l.dir)),
            };
            self.sources.push(Source {
                path: path.to_path_buf(),
                file: false,
                try_: true,
                stamp,
                covered: true,
                parent,
            });
            if stamp.is_none() {
                return; // nothing to hide
            }
        }
        self.needs_scratch = true;
        let name = self.name(path.display().to_string());
        self.ops.push(Op::Hide { dst: cstr(path), holes, cover: Cell::new(-1), name });
    }

    /// A path shown again (`allow` inside a hidden one) saved before the
    /// hides: where it is, None when it is missing.
    fn save(&mut self, path: &Path, slot: usize) -> Result<Option<PathBuf>, PlanError> {
        // What is shown again is found without following a link
        // the caller owns (a sandboxed run could have planted
        // one to a secret): resolved here like a bind source,
        // and PID 1 follows no link at all on the path it was
        // resolved to.
        let at = if shadowed(self.spec, path) {
            path.to_path_buf()
        } else {
            let source = |stamp| Source {
                path: path.to_path_buf(),
                file: false,
                try_: true,
                stamp,
                covered: false,
                parent: None,
            };
            match resolve::resolve_at(path, self.me) {
                Ok((fd, real)) => {
                    self.sources.push(source(Stamp::of(fd.as_raw_fd(), false)));
                    real
                }
                Err(e) if e.missing() => {
                    self.sources.push(source(None));
                    return Ok(None);
                }
                Err(error) => {
                    return Err(PlanError::Source { what: "filesystem rule path", path: path.to_path_buf(), error })
                }
            }
        };
        let name = self.name(at.display().to_string());
        self.ops.push(Op::Save { dst: cstr(&at), slot, name });
        Ok(Some(at))
    }
}

/// Whether the program could create `path` on the host itself: its
/// nearest existing directory is one the caller may write (and not the
/// host view's private `/tmp` or `/run`).
fn stand_in_on_host(path: &Path) -> bool {
    let Some(dir) = path.ancestors().skip(1).find(|a| a.is_dir()) else { return false };
    if dir.starts_with("/tmp") || dir.starts_with("/run") {
        return false;
    }
    sys::access_w(&cstr(dir))
}

impl MountPlan {
    /// Covers each of `dirs` (the places of the user's agent sockets,
    /// [`agent_dirs`]) wherever the run would see it, last: as itself in
    /// the host's view (unless beneath the private `/tmp` or `/run`),
    /// beneath a bind whose source is it or one of its parents (`--bind
    /// /tmp /tmp`, `--bind / /host`: compared by device and inode, so a
    /// link to it counts), a bind of something inside it, beneath a layer
    /// or a shown path. A sandboxed
    /// program could otherwise put its own socket in an agent's place, or
    /// make the directory before the first agent does; so a directory that
    /// would be shown is made (mode 0700) if missing, to be covered.
    pub(crate) fn cover_agent_dirs(&mut self, dirs: &[PathBuf], names: &mut Vec<String>) {
        use std::os::unix::ffi::OsStrExt;
        let host_view = !matches!(self.base, Base::EmptyRoot { .. });
        let id = |st: libc::stat| (st.st_dev, st.st_ino);
        let mut covers: Vec<PathBuf> = Vec::new();
        // Only binds can show the directories elsewhere: no stat without one.
        let binds = self.ops.iter().any(|op| matches!(op, Op::Bind { src: Some(_), .. }));
        for dir in dirs {
            let under = |d: &Path| dir.starts_with(d);
            let mut shown: Vec<PathBuf> = Vec::new();
            if host_view && !under(Path::new("/tmp")) && !under(Path::new("/run")) {
                shown.push(dir.clone());
            }
            // The directory and its parents, by identity.
            let chain: Vec<(PathBuf, (u64, u64))> = match binds {
                true => dir
                    .ancestors()
                    .filter_map(|a| Some((a.to_path_buf(), id(sys::stat_path(&cstr(a), true).ok()?))))
                    .collect(),
                false => Vec::new(),
            };
            for op in &self.ops {
                let path = |c: &CString| PathBuf::from(std::ffi::OsStr::from_bytes(c.as_bytes()));
                match op {
                    Op::Bind { src: Some(fd), dst, .. } => {
                        let Ok(st) = sys::fstat(fd.as_raw_fd()) else { continue };
                        if let Some((a, _)) = chain.iter().find(|(_, i)| *i == id(st)) {
                            let rest = dir.strip_prefix(a).unwrap_or(Path::new(""));
                            shown.push(path(dst).join(rest));
                        } else if chain.first().is_some_and(|(a, i)| a == dir && i.0 == st.st_dev) {
                            // Something inside it (a socket, a lock file),
                            // by where the source was resolved to.
                            let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
                            if real.is_ok_and(|r| r.starts_with(dir)) {
                                shown.push(path(dst));
                            }
                        }
                    }
                    Op::Overlay { dst, .. } | Op::Save { dst, .. } | Op::Reveal { dst, .. } if under(&path(dst)) => {
                        shown.push(dir.clone())
                    }
                    _ => {}
                }
            }
            if !shown.is_empty() {
                use std::os::unix::fs::DirBuilderExt;
                let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
            }
            covers.extend(shown);
        }
        covers.sort();
        covers.dedup();
        for c in covers {
            names.push(c.display().to_string());
            let name = (names.len() - 1) as u32;
            self.needs_scratch = true;
            self.ops.push(Op::Hide { dst: cstr(&c), holes: false, cover: Cell::new(-1), name });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::split_parent;

    /// Removes a test's directory tree when dropped.
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The paths of the plan's operations of one kind.
    fn dsts(plan: &MountPlan, kind: &str) -> Vec<String> {
        plan.ops
            .iter()
            .filter_map(|op| match (op, kind) {
                (Op::Hide { dst, .. }, "hide")
                | (Op::Save { dst, .. }, "save")
                | (Op::Reveal { dst, .. }, "reveal") => Some(dst),
                (Op::Bind { dst, .. }, "bind") => Some(dst),
                _ => None,
            })
            .map(|d| d.to_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn settled_directories_vouch_for_missing_secrets() {
        // On a filesystem whose directory times vouch (ext4 here; tmpfs
        // wherever /var/tmp is something else), not under /tmp, which the
        // host view replaces.
        let base = ["/var/tmp", "/dev/shm"]
            .into_iter()
            .find(|b| sys::fs_type(&cstr(Path::new(b))).is_ok_and(|t| Parent::TRUSTED.contains(&t)))
            .expect("neither /var/tmp nor /dev/shm is on ext4, XFS, Btrfs, tmpfs or F2FS");
        let home = PathBuf::from(format!("{base}/capsule-mounts-parents-{}", std::process::id()));
        let _rm = Rm(home.clone());
        std::fs::create_dir_all(home.join(".config/other")).unwrap();
        std::fs::create_dir_all(home.join(".cargo")).unwrap();
        std::os::unix::fs::symlink(home.join("elsewhere"), home.join(".aws")).unwrap();
        let me = u32::MAX;
        let spec = RunSpec::new(["/bin/true"]);
        // As if prepared a minute from now: every directory has settled.
        let plan =
            MountPlan::prepare_at(&spec, me, &Homes::at(&home), &mut Vec::new(), None, sys::realtime_coarse_s() + 60)
                .unwrap();
        let parent_of = |rel: &str| {
            let s = plan.sources.iter().find(|s| s.path == home.join(rel)).expect("a source");
            s.parent.map(|i| plan.parents[i as usize].dir.clone())
        };
        assert_eq!(parent_of(".netrc"), Some(home.clone()));
        assert_eq!(parent_of(".config/gcloud"), Some(home.join(".config")));
        assert_eq!(parent_of(".config/gh/hosts.yml"), Some(home.join(".config")));
        assert_eq!(parent_of(".cargo/credentials"), Some(home.join(".cargo")));
        // A dangling link's target could appear without any directory
        // above the secret changing: looked up every time.
        assert_eq!(parent_of(".aws"), None);
        assert!(plan.parents.iter().all(Parent::unchanged), "settled directories do not vouch");
        assert!(sources_unchanged(&plan.sources, &plan.parents, me));
        // The next change must get another timestamp: file times are as
        // coarse as a clock tick where the kernel has no fine-grained ones,
        // and as a second on filesystems without nanoseconds (ext4 with
        // small inodes), which a fresh directory's ctime of .000000000 s
        // gives away.
        let whole_seconds = sys::stat_path(&cstr(&home), true).unwrap().st_ctime_nsec == 0;
        let tick = || std::thread::sleep(std::time::Duration::from_millis(if whole_seconds { 1100 } else { 30 }));
        tick();
        std::fs::create_dir_all(home.join(".config/gh")).unwrap();
        assert!(sources_unchanged(&plan.sources, &plan.parents, me), "an empty ~/.config/gh hides nothing new");
        std::fs::write(home.join(".config/gh/hosts.yml"), "x").unwrap();
        assert!(!sources_unchanged(&plan.sources, &plan.parents, me), "a new ~/.config/gh/hosts.yml goes unnoticed");
        std::fs::remove_dir_all(home.join(".config/gh")).unwrap();
        tick();
        std::fs::write(home.join(".netrc"), "x").unwrap();
        assert!(!sources_unchanged(&plan.sources, &plan.parents, me), "a new ~/.netrc goes unnoticed");
        std::fs::remove_file(home.join(".netrc")).unwrap();
        assert!(sources_unchanged(&plan.sources, &plan.parents, me));
        std::fs::create_dir_all(home.join("elsewhere")).unwrap();
        assert!(!sources_unchanged(&plan.sources, &plan.parents, me), "the target of ~/.aws appearing goes unnoticed");
        std::fs::remove_dir(home.join("elsewhere")).unwrap();
        // ~/.cargo replaced by another directory: another inode.
        std::fs::rename(home.join(".cargo"), home.join("cargo-old")).unwrap();
        std::fs::create_dir_all(home.join(".cargo")).unwrap();
        std::fs::write(home.join(".cargo/credentials"), "x").unwrap();
        assert!(!plan.parents.iter().all(Parent::unchanged));
        assert!(!sources_unchanged(&plan.sources, &plan.parents, me), "a replaced ~/.cargo goes unnoticed");
        // Prepared now, the directories made above have not settled and
        // vouch for nothing; the check still holds.
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert!(plan.parents.iter().any(|p| !p.unchanged()));
        assert!(sources_unchanged(&plan.sources, &plan.parents, me));
    }

    #[test]
    fn first_component_below() {
        let f =
            |p: &str, d: &str| first_below(Path::new(p), Path::new(d)).map(|b| String::from_utf8(b.to_vec()).unwrap());
        assert_eq!(f("/home/user/.aws/credentials", "/home/user").as_deref(), Some(".aws"));
        assert_eq!(f("/home/user/.netrc", "/home/user/").as_deref(), Some(".netrc"));
        assert_eq!(f("/home/user/.netrc", "/home/u"), None, "a sibling with a common prefix");
        assert_eq!(f("/home/user", "/home/user"), None);
        assert_eq!(f("/etc/x", "/").as_deref(), Some("etc"));
    }

    #[test]
    fn secrets_in_the_fresh_tmp_are_not_covered() {
        // `$HOME` in /tmp (CI, benchmarks): the host view's /tmp is a fresh
        // tmpfs, so its secrets cannot be there when PID 1 builds.
        let base = PathBuf::from(format!("/tmp/capsule-mounts-fresh-{}", std::process::id()));
        let _rm = Rm(base.clone());
        std::fs::create_dir_all(base.join(".ssh")).unwrap();
        let me = u32::MAX;
        let homes = Homes::at(&base);
        let mut spec = RunSpec::new(["/bin/true"]);
        let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), Vec::<String>::new());
        // A user's own hide of such a path: nothing there either.
        spec.filesystem.hide.push(base.join("x"));
        let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), Vec::<String>::new());
        // The host's /tmp bound in (or anything of it): what it shows is covered.
        for (how, bind) in [("the whole /tmp", "/tmp".into()), ("the home", base.clone())] {
            let mut spec = RunSpec::new(["/bin/true"]);
            spec.mounts.push(MountOp::Bind { src: bind.clone(), dst: bind.clone(), try_: false, noexec: false });
            let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
            let hides = dsts(&plan, "hide");
            assert!(hides.contains(&base.join(".ssh").display().to_string()), "{how}: {hides:?}");
            assert_eq!(hides.len(), fsrules::SECRETS.len(), "{how}: {hides:?}");
        }
        let mut spec = RunSpec::new(["/bin/true"]);
        spec.filesystem.writable.push(base.clone());
        let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
        assert!(dsts(&plan, "hide").contains(&base.join(".ssh").display().to_string()));
    }

    #[test]
    fn a_second_home_is_listed_once() {
        let base = PathBuf::from(format!("/var/tmp/capsule-mounts-homes-{}", std::process::id()));
        let _rm = Rm(base.clone());
        let (home, pw) = (base.join("ci"), base.join("user"));
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(pw.join(".config")).unwrap();
        std::fs::write(pw.join(".pgpass"), "x").unwrap();
        let me = u32::MAX;
        let spec = RunSpec::new(["/bin/true"]);
        let homes = Homes { home: Some(home.clone()), passwd: Some(pw.clone()) };
        let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
        let h = |p: &Path| p.display().to_string();
        assert_eq!(dsts(&plan, "hide"), [h(&home.join(".ssh")), h(&pw.join(".pgpass"))]);
        assert_eq!(plan.sources.iter().filter(|s| s.covered).count(), 2 * fsrules::SECRETS.len());
        // Missing ones are vouched for by the homes and the passwd home's ~/.config.
        let dirs: Vec<&Path> = plan.parents.iter().map(|p| p.dir.as_path()).collect();
        assert_eq!(dirs.len(), 3, "{dirs:?}");
        assert!(
            dirs.contains(&home.as_path())
                && dirs.contains(&pw.as_path())
                && dirs.contains(&pw.join(".config").as_path())
        );
        assert!(sources_unchanged(&plan.sources, &plan.parents, me));
        std::fs::create_dir_all(pw.join(".aws")).unwrap();
        assert!(!sources_unchanged(&plan.sources, &plan.parents, me), "a new ~/.aws in the passwd home goes unnoticed");
        // A passwd home that does not exist: its parent vouches for all of
        // its secrets, one directory.
        let gone = base.join("gone");
        let homes = Homes { home: Some(home.clone()), passwd: Some(gone.clone()) };
        let plan = MountPlan::prepare(&spec, me, &homes, &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), [h(&home.join(".ssh"))]);
        let gone_parent = |s: &&Source| s.path.starts_with(&gone);
        let vouching: Vec<Option<u32>> = plan.sources.iter().filter(gone_parent).map(|s| s.parent).collect();
        assert_eq!(vouching.len(), fsrules::SECRETS.len());
        assert!(vouching.iter().all(|p| p.is_some_and(|i| plan.parents[i as usize].dir == base)), "{vouching:?}");
        assert!(sources_unchanged(&plan.sources, &plan.parents, me));
        std::fs::create_dir_all(gone.join(".ssh")).unwrap();
        assert!(
            !sources_unchanged(&plan.sources, &plan.parents, me),
            "the passwd home's ~/.ssh appearing goes unnoticed"
        );
    }

    #[test]
    fn rules_emit_operations_only_for_what_exists() {
        // Not under /tmp, which the host view replaces (paths there are
        // looked up by PID 1).
        let home = PathBuf::from(format!("/var/tmp/capsule-mounts-rules-{}", std::process::id()));
        let _rm = Rm(home.clone());
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("proj/src")).unwrap();
        let h = |rel: &str| home.join(rel).display().to_string();
        let me = u32::MAX;
        let mut spec = RunSpec::new(["/bin/true"]);
        // Nothing to hide, nothing to prepare for it.
        std::fs::create_dir_all(home.join("plain")).unwrap();
        let mut bare = spec.clone();
        bare.filesystem.hide.push(home.join(".ssh/nope"));
        let plan = MountPlan::prepare(&bare, me, &Homes::at(&home.join("plain")), &mut Vec::new(), None).unwrap();
        assert!(dsts(&plan, "hide").is_empty() && !plan.needs_scratch);
        // Only the secret that exists is covered, with the scratch's empty directory.
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), [h(".ssh")]);
        assert!(plan.needs_scratch);
        // Every secret was looked up once, and is recorded for a PID 1
        // prepared ahead.
        let covered: Vec<&Source> = plan.sources.iter().filter(|s| s.covered).collect();
        assert_eq!(covered.len(), fsrules::SECRETS.len());
        // Checked as a supervisor does (the missing ones through the
        // directories that vouch for them: just made here, so not settled,
        // and listed) and by looking each one up.
        assert!(plan.parents.iter().all(|p| !p.unchanged()), "a directory made just now vouched");
        let unchanged = |as_supervisor: bool| match as_supervisor {
            true => sources_unchanged(&plan.sources, &plan.parents, me),
            false => plan.sources.iter().all(|s| s.unchanged(me)),
        };
        assert!(unchanged(true) && unchanged(false));
        std::fs::write(home.join(".netrc"), "x").unwrap();
        assert!(!unchanged(true) && !unchanged(false), "a new secret goes unnoticed");
        std::fs::remove_file(home.join(".netrc")).unwrap();
        assert!(unchanged(true));
        // Beneath a first-level directory that appears, and one that was there.
        std::fs::create_dir_all(home.join(".config")).unwrap();
        assert!(unchanged(true) && unchanged(false), "an empty ~/.config hides nothing new");
        std::fs::create_dir_all(home.join(".config/gcloud")).unwrap();
        assert!(!unchanged(true) && !unchanged(false), "a new ~/.config/gcloud goes unnoticed");
        std::fs::remove_dir_all(home.join(".config")).unwrap();
        // A secret that exists is compared by what it is, listing or not.
        std::fs::create_dir_all(home.join(".ssh/keys")).unwrap();
        assert!(unchanged(true) && unchanged(false), "the same ~/.ssh, with more in it");
        std::fs::rename(home.join(".ssh"), home.join("ssh-old")).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        assert!(!unchanged(true) && !unchanged(false), "a replaced ~/.ssh goes unnoticed");
        std::fs::write(home.join(".netrc"), "x").unwrap();
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), [h(".netrc"), h(".ssh")]);
        // Beneath a mount operation the host cannot tell: PID 1 looks.
        spec.mounts.push(MountOp::Tmpfs { dst: home.join(".aws"), size: None, noexec: false });
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), [h(".aws"), h(".netrc"), h(".ssh")]);
        // Shown again inside a hidden home: cloned before the cover, at
        // the path it resolved to; a missing one costs nothing.
        spec.mounts.clear();
        spec.filesystem.hide.push("~".into());
        spec.filesystem.allow.extend(["~/proj/src".into(), "~/gone".into()]);
        spec.filesystem.writable.push("~/proj".into());
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "hide"), [home.display().to_string()]);
        assert_eq!(dsts(&plan, "bind"), [h("proj")]);
        assert_eq!(dsts(&plan, "save"), Vec::<String>::new(), "an allow beneath a writable path is already visible");
        spec.filesystem.writable.clear();
        let plan = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).unwrap();
        assert_eq!(dsts(&plan, "save"), [h("proj/src")]);
        assert_eq!(dsts(&plan, "reveal"), [h("proj/src")]);
        assert_eq!(plan.saved.len(), 2);
        // A missing writable path is an error naming it.
        spec.filesystem.writable.push("~/nope".into());
        let e = MountPlan::prepare(&spec, me, &Homes::at(&home), &mut Vec::new(), None).err().unwrap();
        assert!(
            matches!(&e, PlanError::Source { what: "filesystem.writable path", path, error } if *path == Path::new(&h("nope")) && error.missing()),
            "{e:?}"
        );
        assert!(e.to_string().contains("filesystem.writable") && e.to_string().contains(&h("nope")), "{e}");
    }

    #[test]
    fn split() {
        let mut b = [0u8; 4096];
        let (p, l) = split_parent(c"/a/b/c", &mut b).unwrap();
        assert_eq!((p.to_bytes(), l.to_bytes()), (&b"/a/b"[..], &b"c"[..]));
        let mut b = [0u8; 4096];
        let (p, l) = split_parent(c"/a", &mut b).unwrap();
        assert_eq!((p.to_bytes(), l.to_bytes()), (&b"/"[..], &b"a"[..]));
        let mut b = [0u8; 4096];
        assert!(split_parent(c"/a/", &mut b).is_err());
    }
}
