//! The sandbox's filesystem: a mount plan prepared from the spec before
//! clone (every path a `CString`, every size a string, every host file
//! opened), and its execution in PID 1 with the new mount API.
//!
//! Bind and `--file` sources are resolved once, by the supervisor, when it
//! prepares the run (`crate::resolve`: a link owned by the caller is not
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

use crate::child::{Fail, Step};
use crate::host::fsrules::{self, Action, Homes};
use crate::overlay::{Backend, LayerPlan, FUSE_LOWER, FUSE_MOUNTPOINT, STAGE_MOUNTPOINT};
use crate::proto::spec::{self, MountOp, RunSpec};
use crate::resolve::{self, ResolveError};
use crate::sys::{
    self, SysResult, AT_RECURSIVE, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
    OPEN_TREE_CLONE,
};

/// Host device nodes bound into every `/dev` capsule builds.
const DEVICES: [&CStr; 5] = [c"null", c"zero", c"full", c"random", c"urandom"];
const HOST_DEVICES: [&CStr; 5] = [c"/dev/null", c"/dev/zero", c"/dev/full", c"/dev/random", c"/dev/urandom"];

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
    /// A kernel overlay of a layer (`crate::overlay`): made in step 1b
    /// from the host view, attached at `dst` in step 3. `base`: a staged
    /// one's lower layer, a read-only overlay (lower, upper, work, where)
    /// made and attached first.
    Overlay {
        dst: CString,
        lower: CString,
        upper: CString,
        work: CString,
        base: Option<[CString; 4]>,
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
    /// ahead against the host before it is used.
    pub sources: Vec<Source>,
    /// The directories that vouch for the missing covered sources.
    pub parents: Vec<Parent>,
    /// A size-limited layer's staging tmpfs (`crate::overlay::Stage`),
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
                    let is_dir = self.list.iter().any(|p| p.dir == parent)
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
        let i = match self.list.iter().position(|p| p.dir == dir) {
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
pub(crate) struct Listing {
    dir: PathBuf,
    /// The first components below `dir` of the paths asked about, sorted.
    wanted: Vec<std::ffi::OsString>,
    present: Vec<bool>,
}

impl Listing {
    /// Directories bigger than this are not listed (stat each path then).
    const MAX: usize = 4096;

    /// Lists `dir` for the first components of `paths` beneath it. None:
    /// none is beneath it, or `dir` cannot be read (each path is then
    /// looked up on its own).
    pub(crate) fn read<'a>(dir: &Path, paths: impl Iterator<Item = &'a Path>) -> Option<Listing> {
        use std::os::unix::ffi::OsStrExt;
        let mut wanted: Vec<std::ffi::OsString> = paths
            .filter_map(|p| p.strip_prefix(dir).ok()?.components().next())
            .map(|c| c.as_os_str().to_os_string())
            .collect();
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
                if let Ok(i) = wanted.binary_search_by(|w| w.as_bytes().cmp(name)) {
                    present[i] = true;
                }
                entries += 1;
            }
            if entries > Self::MAX {
                return None;
            }
        }
        Some(Listing { dir: dir.to_path_buf(), wanted, present })
    }

    /// Whether `path` is known not to exist (false: not known).
    pub(crate) fn absent(&self, path: &Path) -> bool {
        let Some(first) = path.strip_prefix(&self.dir).ok().and_then(|rest| rest.components().next()) else {
            return false;
        };
        match self.wanted.binary_search_by(|w| w.as_os_str().cmp(first.as_os_str())) {
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

/// Resolves a bind source (None: a missing `-try` one) and records it.
fn bind_source(src: &Path, try_: bool, me: u32, sources: &mut Vec<Source>) -> Result<Option<OwnedFd>, String> {
    bind_source_as("bind source", src, try_, me, sources)
}

/// [`bind_source`], errors calling the source `what`.
fn bind_source_as(
    what: &str,
    src: &Path,
    try_: bool,
    me: u32,
    sources: &mut Vec<Source>,
) -> Result<Option<OwnedFd>, String> {
    let fd = match resolve::resolve(src, me) {
        Ok(fd) => Some(fd),
        Err(e) if try_ && e.missing() => None,
        Err(e) => return Err(e.describe(what, src)),
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
    let under = |p: &[u8], dir: &[u8]| {
        let dir = dir.strip_suffix(b"/").unwrap_or(dir);
        p.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
    };
    let p = path.as_os_str().as_encoded_bytes();
    spec.mounts.iter().any(|op| under(p, op.dst().as_os_str().as_encoded_bytes()))
        || !spec.empty_root && [&b"/proc"[..], b"/dev", b"/tmp", b"/run"].iter().any(|m| under(p, m))
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
    /// euid) may follow (`crate::resolve`). `homes` are the caller's, for
    /// the filesystem rules. `names` collects the paths errors may name.
    /// `layers`: the run's, prepared by `crate::overlay`.
    pub(crate) fn prepare(
        spec: &RunSpec,
        me: u32,
        homes: &Homes,
        names: &mut Vec<String>,
        layers: Option<&LayerPlan>,
    ) -> Result<Self, String> {
        Self::prepare_at(spec, me, homes, names, layers, sys::realtime_coarse_s())
    }

    /// [`MountPlan::prepare`] at `now` (seconds of CLOCK_REALTIME_COARSE),
    /// which decides which [`Parent`]s have settled.
    fn prepare_at(
        spec: &RunSpec,
        me: u32,
        homes: &Homes,
        names: &mut Vec<String>,
        layers: Option<&LayerPlan>,
        now: i64,
    ) -> Result<Self, String> {
        let mut name = |s: String| {
            names.push(s);
            (names.len() - 1) as u32
        };
        let mut sources = Vec::new();
        let mut ops = Vec::new();
        let base = if spec.empty_root {
            Base::EmptyRoot { size: size_str(spec::EMPTY_ROOT_SIZE) }
        } else {
            let fuse = match layers.map(|l| &l.backend) {
                Some(Backend::Fuse { argv }) => {
                    // Through fuse-overlayfs the host's pseudo filesystems
                    // would be files of the layer: /sys is bound back as
                    // the host view has it (/proc, /dev, /tmp, /run follow).
                    ops.push(Op::Bind {
                        src: bind_source(Path::new("/sys"), true, me, &mut sources)?,
                        dst: c"/sys".into(),
                        attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                        clone: Cell::new(-1),
                        name: name("/sys".into()),
                    });
                    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
                    ptrs.push(std::ptr::null());
                    let line: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
                    Some(Base::Fuse { argv: argv.clone(), ptrs, name: name(line.join(" ")) })
                }
                _ => None,
            };
            // The host view's defaults come first, so later operations can
            // bind over or inside them.
            ops.push(Op::Proc { dst: c"/proc".into(), name: name("/proc".into()) });
            ops.push(Op::Dev { dst: c"/dev".into(), nodes: Default::default(), name: name("/dev".into()) });
            ops.push(Op::Tmpfs {
                dst: c"/tmp".into(),
                size: size_str(spec.tmp_size.unwrap_or(spec::DEFAULT_TMP_SIZE)),
                mode: c"1777",
                attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                optional: false,
                name: name("/tmp".into()),
            });
            // The host's /run holds the sockets of the user's session: its
            // D-Bus bus (through which `systemd-run --user` starts anything
            // outside the sandbox), gpg and ssh agents, container engines.
            // A read-only mount does not stop connect() on a socket, and
            // pathname sockets are not network-namespaced, so /run is
            // replaced like /tmp.
            ops.push(Op::Tmpfs {
                dst: c"/run".into(),
                size: size_str(RUN_SIZE),
                mode: c"0755",
                attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                optional: true,
                name: name("/run".into()),
            });
            if spec.share_net {
                // ... except what name resolution needs when the network
                // is shared (resolv.conf links here with systemd-resolved).
                ops.push(Op::Bind {
                    src: bind_source(Path::new("/run/systemd/resolve"), true, me, &mut sources)?,
                    dst: c"/run/systemd/resolve".into(),
                    attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                    clone: Cell::new(-1),
                    name: name("/run/systemd/resolve".into()),
                });
            }
            if let Some(Backend::Kernel(overlays)) = layers.map(|l| &l.backend) {
                for o in overlays {
                    ops.push(Op::Overlay {
                        dst: cstr(&o.dst),
                        lower: o.lower.clone(),
                        upper: o.upper.clone(),
                        work: o.work.clone(),
                        base: o.base.clone(),
                        fs: Cell::new(-1),
                        name: name(format!(
                            "{} (layer {})",
                            o.dst.display(),
                            layers.map(|l| l.dirs.last().expect("one").display().to_string()).unwrap_or_default()
                        )),
                    });
                }
            }
            fuse.unwrap_or(Base::HostView)
        };
        let mut needs_scratch = false;
        for op in &spec.mounts {
            let dst = cstr(op.dst());
            let dst_name = op.dst().display().to_string();
            let noexec = |n: bool| if n { MOUNT_ATTR_NOEXEC } else { 0 };
            ops.push(match op {
                MountOp::Bind { src, try_, noexec: ne, .. } => Op::Bind {
                    src: bind_source(src, *try_, me, &mut sources)?,
                    dst,
                    attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne),
                    clone: Cell::new(-1),
                    name: name(format!("{} -> {}", src.display(), dst_name)),
                },
                MountOp::RoBind { src, try_, noexec: ne, .. } => Op::Bind {
                    src: bind_source(src, *try_, me, &mut sources)?,
                    dst,
                    attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne),
                    clone: Cell::new(-1),
                    name: name(format!("{} -> {}", src.display(), dst_name)),
                },
                MountOp::DevBind { src, try_, noexec: ne, .. } => Op::Bind {
                    src: bind_source(src, *try_, me, &mut sources)?,
                    dst,
                    attrs: MOUNT_ATTR_NOSUID | noexec(*ne),
                    clone: Cell::new(-1),
                    name: name(format!("{} -> {}", src.display(), dst_name)),
                },
                MountOp::Tmpfs { size, noexec: ne, .. } => Op::Tmpfs {
                    dst,
                    size: size_str(size.unwrap_or(spec::DEFAULT_TMP_SIZE)),
                    mode: c"0755",
                    attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | noexec(*ne),
                    optional: false,
                    name: name(dst_name),
                },
                MountOp::Proc { .. } => Op::Proc { dst, name: name(dst_name) },
                MountOp::Dev { .. } => Op::Dev { dst, nodes: Default::default(), name: name(dst_name) },
                MountOp::Dir { .. } => Op::Dir { dst, name: name(dst_name) },
                MountOp::File { src, .. } => {
                    let what = "--file source";
                    let at = resolve::resolve(src, me).map_err(|e| e.describe(what, src))?;
                    let sys_err = |errno| ResolveError::Sys { errno, at: src.clone() }.describe(what, src);
                    match sys::fd_mode(at.as_raw_fd()) {
                        Ok(libc::S_IFREG) => {}
                        Ok(libc::S_IFDIR) => return Err(sys_err(libc::EISDIR)),
                        // A FIFO would block the supervisor's loop in the
                        // open below, a device in PID 1's copy: files only.
                        Ok(mode) => {
                            let kind = crate::error::file_kind(mode);
                            return Err(format!("{what} `{}` is {kind}: give a regular file to copy", src.display()));
                        }
                        Err(e) => return Err(sys_err(e)),
                    }
                    // What was resolved, opened for reading (an O_PATH
                    // descriptor cannot be read).
                    let fd = sys::reopen(at.as_raw_fd(), libc::O_RDONLY).map_err(sys_err)?;
                    let stamp = Stamp::of(fd.as_raw_fd(), true);
                    sources.push(Source {
                        path: src.clone(),
                        file: true,
                        try_: false,
                        stamp,
                        covered: false,
                        parent: None,
                    });
                    Op::File { src: fd, dst, name: name(dst_name) }
                }
                MountOp::FileData { content, .. } => {
                    Op::FileData { dst, content: content.as_bytes().to_vec(), name: name(dst_name) }
                }
                MountOp::Symlink { target, .. } => Op::Symlink { target: cstr(target), dst, name: name(dst_name) },
                MountOp::Hide { .. } => {
                    needs_scratch = true;
                    Op::Hide { dst, holes: false, cover: Cell::new(-1), name: name(dst_name) }
                }
            });
        }
        // The filesystem rules, last. Where the supervisor can tell, a path
        // missing on the host costs this one lookup and no operation (the
        // default secrets of every run); a PID 1 prepared ahead is used
        // only while the same objects are there (`sources_unchanged`).
        let actions = fsrules::plan(&spec.filesystem, homes, spec.empty_root).map_err(|e| e.to_string())?;
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
        let mut parents = Parents { list: Vec::new(), now };
        let mut saved_at: Vec<Option<PathBuf>> = vec![None; fsrules::slots(&actions)];
        let rw = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        for action in actions {
            match action {
                Action::Hide { path, holes } => {
                    if !shadowed(spec, &path) {
                        let listed = listings.iter().find(|l| l.absent(&path));
                        let stamp = if listed.is_some() { None } else { Stamp::of_path(&path) };
                        let parent = match stamp {
                            Some(_) => None,
                            None => parents.vouch(&path, listed.map(|l| l.dir.as_path())),
                        };
                        sources.push(Source {
                            path: path.clone(),
                            file: false,
                            try_: true,
                            stamp,
                            covered: true,
                            parent,
                        });
                        if stamp.is_none() {
                            continue; // nothing to hide
                        }
                    }
                    needs_scratch = true;
                    let n = name(path.display().to_string());
                    ops.push(Op::Hide { dst: cstr(&path), holes, cover: Cell::new(-1), name: n });
                }
                Action::Save { path, slot } => {
                    // What is shown again is found without following a link
                    // the caller owns (a sandboxed run could have planted
                    // one to a secret): resolved here like a bind source,
                    // and PID 1 follows no link at all on the path it was
                    // resolved to.
                    let at = if shadowed(spec, &path) {
                        path
                    } else {
                        match resolve::resolve_at(&path, me) {
                            Ok((fd, real)) => {
                                let stamp = Stamp::of(fd.as_raw_fd(), false);
                                sources.push(Source {
                                    path,
                                    file: false,
                                    try_: true,
                                    stamp,
                                    covered: false,
                                    parent: None,
                                });
                                real
                            }
                            Err(e) if e.missing() => {
                                sources.push(Source {
                                    path,
                                    file: false,
                                    try_: true,
                                    stamp: None,
                                    covered: false,
                                    parent: None,
                                });
                                continue;
                            }
                            Err(e) => return Err(e.describe("filesystem rule path", &path)),
                        }
                    };
                    let n = name(at.display().to_string());
                    ops.push(Op::Save { dst: cstr(&at), slot, name: n });
                    saved_at[slot] = Some(at);
                }
                Action::Reveal { slot, read_only, .. } => {
                    let Some(at) = &saved_at[slot] else { continue }; // missing
                    let attrs = if read_only { MOUNT_ATTR_RDONLY } else { 0 };
                    let n = name(at.display().to_string());
                    ops.push(Op::Reveal { dst: cstr(at), slot, attrs, name: n });
                }
                Action::Writable { path } => ops.push(Op::Bind {
                    src: bind_source_as("filesystem.writable path", &path, false, me, &mut sources)?,
                    dst: cstr(&path),
                    attrs: rw,
                    clone: Cell::new(-1),
                    name: name(path.display().to_string()),
                }),
                Action::HostReadOnly { path } => ops.push(Op::Bind {
                    src: bind_source_as("filesystem path", &path, true, me, &mut sources)?,
                    dst: cstr(&path),
                    attrs: MOUNT_ATTR_RDONLY | rw,
                    clone: Cell::new(-1),
                    name: name(path.display().to_string()),
                }),
            }
        }
        // The layer directories themselves are not the program's business
        // (and overlayfs refuses lookups into a mounted upper directory).
        for d in layers.map(|l| l.dirs.as_slice()).unwrap_or(&[]) {
            needs_scratch = true;
            ops.push(Op::Hide {
                dst: cstr(d),
                holes: false,
                cover: Cell::new(-1),
                name: name(d.display().to_string()),
            });
        }
        let saved = saved_at.iter().map(|_| Cell::new(-1)).collect();
        let stage = layers.and_then(|l| l.stage.as_ref()).map(|s| s.fs.as_raw_fd());
        Ok(MountPlan { base, ops, needs_scratch, saved, sources, parents: parents.list, stage })
    }
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

// ---------------------------------------------------------------------------
// Execution (child side: syscalls only, no allocation).

/// Makes a fresh tmpfs mount, detached.
fn tmpfs(size: &CStr, mode: &CStr, attrs: u64) -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"tmpfs")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"size", size)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"mode", mode)?;
    sys::fsconfig_create(fs.as_raw_fd())?;
    sys::fsmount(fs.as_raw_fd(), attrs)
}

/// Creates a fresh procfs mount of the caller's PID namespace, detached.
/// Must run while the caller still holds CAP_SYS_ADMIN over that PID
/// namespace's owner and sees a fully visible /proc (the host's).
///
/// `hidepid=2` (invisible): a process the viewer may not ptrace has no
/// /proc/PID at all. That is PID 1: its memory is the supervisor's,
/// non-dumpable, but its /proc files belong to the caller like the
/// program's (see `Supervisor::start`), so without it the program could
/// list PID 1's descriptors or raise the supervisor's oom_score_adj
/// (shared by every process of that memory). The program's own processes
/// stay visible to each other.
pub(crate) fn new_proc() -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"proc")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"hidepid", c"2")?;
    sys::fsconfig_create(fs.as_raw_fd())?;
    sys::fsmount(fs.as_raw_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
}

/// Splits `/a/b/c` into a NUL-terminated parent `/a/b` (written into `buf`)
/// and the last component `c`.
fn split_parent<'a>(path: &'a CStr, buf: &'a mut [u8; 4096]) -> SysResult<(&'a CStr, &'a CStr)> {
    let bytes = path.to_bytes_with_nul();
    let slash = bytes.iter().rposition(|&b| b == b'/').ok_or(libc::EINVAL)?;
    if slash + 1 >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    let parent_len = if slash == 0 { 1 } else { slash };
    buf[..parent_len].copy_from_slice(&bytes[..parent_len]);
    buf[parent_len] = 0;
    let parent = CStr::from_bytes_with_nul(&buf[..=parent_len]).map_err(|_| libc::EINVAL)?;
    let last = CStr::from_bytes_with_nul(&bytes[slash + 1..]).map_err(|_| libc::EINVAL)?;
    if last.is_empty() {
        return Err(libc::EINVAL);
    }
    Ok((parent, last))
}

/// Creates the directory `path` and its missing parents inside `root`.
fn mkdir_p(root: RawFd, path: &CStr) -> SysResult<OwnedFd> {
    match sys::open_in_root(root, path, libc::O_PATH | libc::O_DIRECTORY, 0) {
        Err(libc::ENOENT) => {}
        other => return other,
    }
    let bytes = path.to_bytes();
    let mut buf = [0u8; 4096];
    if bytes.len() >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    // Walk every prefix `/a`, `/a/b`, ... creating what is missing.
    for end in (1..=bytes.len()).filter(|&i| i == bytes.len() || bytes[i] == b'/') {
        buf[..end].copy_from_slice(&bytes[..end]);
        buf[end] = 0;
        let prefix = CStr::from_bytes_with_nul(&buf[..=end]).map_err(|_| libc::EINVAL)?;
        if sys::open_in_root(root, prefix, libc::O_PATH, 0).is_ok() {
            continue;
        }
        let mut pbuf = [0u8; 4096];
        let (parent, last) = split_parent(prefix, &mut pbuf)?;
        let dir = sys::open_in_root(root, parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        match sys::mkdirat(dir.as_raw_fd(), last, 0o755) {
            Ok(()) | Err(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    sys::open_in_root(root, path, libc::O_PATH | libc::O_DIRECTORY, 0)
}

/// Opens (creating if needed) the mount point `path` inside `root`: a
/// directory, or with `file` an empty regular file.
fn mount_point(root: RawFd, path: &CStr, file: bool) -> SysResult<OwnedFd> {
    if !file {
        return mkdir_p(root, path);
    }
    match sys::open_in_root(root, path, libc::O_PATH, 0) {
        Err(libc::ENOENT) => {}
        other => return other,
    }
    let mut buf = [0u8; 4096];
    let (parent, last) = split_parent(path, &mut buf)?;
    let dir = mkdir_p(root, parent)?;
    match sys::openat(dir.as_raw_fd(), last, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644) {
        Ok(_) | Err(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    sys::open_in_root(root, path, libc::O_PATH, 0)
}

/// Creates a regular file at `path` inside `root` and returns it open for writing.
fn create_file(root: RawFd, path: &CStr) -> SysResult<OwnedFd> {
    let mut buf = [0u8; 4096];
    let (parent, last) = split_parent(path, &mut buf)?;
    let dir = mkdir_p(root, parent)?;
    sys::openat(dir.as_raw_fd(), last, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | libc::O_NOFOLLOW, 0o644)
}

/// Clones the host sources of a `/dev` (its device nodes).
fn clone_devices(nodes: &[Cell<RawFd>; 5]) -> SysResult<()> {
    for (cell, host) in nodes.iter().zip(HOST_DEVICES) {
        let fd = sys::open_tree(libc::AT_FDCWD, host, OPEN_TREE_CLONE)?;
        // Device nodes keep working (no nodev) but can never be setuid.
        sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_NOSUID, 0)?;
        cell.set(into_raw(fd));
    }
    Ok(())
}

fn into_raw(fd: OwnedFd) -> RawFd {
    use std::os::fd::IntoRawFd;
    fd.into_raw_fd()
}

/// Takes back an fd stored with `into_raw` (each cell is taken once).
fn take(cell: &Cell<RawFd>) -> Option<OwnedFd> {
    let fd = cell.replace(-1);
    (fd >= 0).then(|| sys::reclaim_fd(fd))
}

/// Builds a minimal /dev on the directory `at`. Everything is created
/// through the new tmpfs's own fd: `at` keeps pointing at the directory
/// the tmpfs covers.
fn build_dev(at: &OwnedFd, nodes: &[Cell<RawFd>; 5]) -> SysResult<()> {
    let dev = tmpfs(c"1048576", c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)?;
    let d = dev.as_raw_fd();
    for name in DEVICES {
        drop(sys::openat(d, name, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o666)?);
    }
    sys::mkdirat(d, c"shm", 0o1777)?;
    for (target, name) in [
        (c"/proc/self/fd", c"fd"),
        (c"/proc/self/fd/0", c"stdin"),
        (c"/proc/self/fd/1", c"stdout"),
        (c"/proc/self/fd/2", c"stderr"),
    ] {
        sys::symlinkat(target, d, name)?;
    }
    // Attached, it can receive the device nodes and /dev/shm.
    sys::move_mount_fd(d, at.as_raw_fd())?;
    for (cell, name) in nodes.iter().zip(DEVICES) {
        let node = take(cell).ok_or(libc::EBADF)?;
        let target = sys::openat(d, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        sys::move_mount_fd(node.as_raw_fd(), target.as_raw_fd())?;
    }
    let shm_at = sys::openat(d, c"shm", libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let shm = tmpfs(c"67108864", c"1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?;
    sys::move_mount_fd(shm.as_raw_fd(), shm_at.as_raw_fd())?;
    // Populated: nothing may be added to /dev from inside.
    sys::mount_setattr(d, false, MOUNT_ATTR_RDONLY, 0)
}

/// State PID 1 carries through the build.
pub(crate) struct Build {
    root: Option<OwnedFd>,
    scratch: Option<OwnedFd>,
    /// The run's procfs, attached at the first `/proc` (later ones bind it).
    proc_fd: RawFd,
    proc_attached: Cell<Option<usize>>,
}

impl Build {
    pub(crate) fn new(proc_fd: RawFd) -> Self {
        Build { root: None, scratch: None, proc_fd, proc_attached: Cell::new(None) }
    }
}

/// Step 1a, in the supervisor's mount namespace: clones the bind sources
/// from the descriptors the supervisor resolved.
pub(crate) fn clone_binds(plan: &MountPlan) -> Result<(), Fail> {
    for op in &plan.ops {
        let Op::Bind { src: Some(src), attrs, clone, name, .. } = op else { continue };
        let fd = sys::open_tree(src.as_raw_fd(), c"", OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32)
            .map_err(|e| Fail::at(Step::BindSource, e, *name))?;
        sys::mount_setattr(fd.as_raw_fd(), true, *attrs, 0).map_err(|e| Fail::at(Step::BindSource, e, *name))?;
        clone.set(into_raw(fd));
    }
    Ok(())
}

/// Step 1b, in PID 1's mount namespace: clones the other sources from the
/// host view.
pub(crate) fn clone_sources(plan: &MountPlan, b: &mut Build) -> Result<(), Fail> {
    let root = match &plan.base {
        Base::HostView => {
            let fd = sys::open_tree(libc::AT_FDCWD, c"/", OPEN_TREE_CLONE | AT_RECURSIVE)
                .map_err(|e| Fail::new(Step::RootClone, e))?;
            sys::mount_setattr(fd.as_raw_fd(), true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)
                .map_err(|e| Fail::new(Step::RootClone, e))?;
            fd
        }
        Base::EmptyRoot { size } => {
            tmpfs(size, c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).map_err(|e| Fail::new(Step::RootTmpfs, e))?
        }
        Base::Fuse { argv, ptrs, name } => start_fuse(argv, ptrs, *name)?,
    };
    b.root = Some(root);
    if let Some(fd) = plan.stage {
        // Where the staged overlays' upper directories are (the old
        // root's /tmp, gone with it at the pivot).
        sys::move_mount_to_path(fd, STAGE_MOUNTPOINT).map_err(|e| Fail::new(Step::Overlay, e))?;
    }
    for op in &plan.ops {
        if let Op::Overlay { lower, upper, work, base, fs, name, .. } = op {
            if let Some([l, u, w, at]) = base {
                // The layer as it is, read-only, where the staged
                // overlay's lower layer is.
                let b = overlay(l, u, w, true).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
                sys::move_mount_to_path(b.as_raw_fd(), at).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
            }
            fs.set(into_raw(overlay(lower, upper, work, false).map_err(|e| Fail::at(Step::Overlay, e, *name))?));
        }
    }
    for op in &plan.ops {
        if let Op::Dev { nodes, name, .. } = op {
            clone_devices(nodes).map_err(|e| Fail::at(Step::Dev, e, *name))?
        }
    }
    if plan.needs_scratch {
        // An empty read-only file to bind over hidden files. It must be
        // attached somewhere to be cloned; the old root's /tmp of this
        // private namespace goes away with the old root.
        let scratch = tmpfs(c"4096", c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
            .map_err(|e| Fail::new(Step::Scratch, e))?;
        drop(
            sys::openat(scratch.as_raw_fd(), c"empty", libc::O_CREAT | libc::O_WRONLY, 0o444)
                .map_err(|e| Fail::new(Step::Scratch, e))?,
        );
        // ... and an empty one to bind over hidden directories.
        sys::mkdirat(scratch.as_raw_fd(), c"dir", 0o555).map_err(|e| Fail::new(Step::Scratch, e))?;
        sys::move_mount_to_path(scratch.as_raw_fd(), c"/tmp").map_err(|e| Fail::new(Step::Scratch, e))?;
        b.scratch = Some(scratch);
    }
    Ok(())
}

/// Makes a kernel overlay, detached. Its layers are looked up here, in
/// PID 1's namespace with the host view as root: overlayfs clones each as
/// a private mount of this namespace.
fn overlay(lower: &CStr, upper: &CStr, work: &CStr, read_only: bool) -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"overlay")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"lowerdir", lower)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"upperdir", upper)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"workdir", work)?;
    // Overlay's own metadata in user.* xattrs: an unprivileged mounter
    // cannot write trusted.*.
    sys::fsconfig_flag(fs.as_raw_fd(), c"userxattr")?;
    if read_only {
        // Nothing is written to its upper layer (the layer) at all.
        sys::fsconfig_flag(fs.as_raw_fd(), c"ro")?;
    }
    sys::fsconfig_create(fs.as_raw_fd())?;
    let ro = if read_only { MOUNT_ATTR_RDONLY } else { 0 };
    sys::fsmount(fs.as_raw_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | ro)
}

/// Starts fuse-overlayfs (still with the supervisor's capabilities, in
/// PID 1's mount namespace, on /tmp/fuse) and clones its mount
/// as the new root. It daemonizes once mounted: its first process exiting
/// with 0 means the mount is there. The daemon lives on in the run's PID
/// namespace and dies with it.
fn start_fuse(argv: &[CString], ptrs: &[*const libc::c_char], name: u32) -> Result<OwnedFd, Fail> {
    let fail = |e| Fail::at(Step::Fuse, e, name);
    // The daemon's lower layer is a clone of the host's root, taken before
    // anything is mounted for it, so that its own mount is not inside it:
    // a lookup that reached the mount through its lower layer would wait
    // for the daemon forever. Both sit on a tmpfs of this namespace's own
    // over /tmp (the sandbox gets its own /tmp).
    let host = sys::open_tree(libc::AT_FDCWD, c"/", OPEN_TREE_CLONE | AT_RECURSIVE).map_err(fail)?;
    let t = tmpfs(c"4096", c"0700", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC).map_err(fail)?;
    // FUSE_MOUNTPOINT and FUSE_LOWER, once the tmpfs is on /tmp.
    sys::mkdirat(t.as_raw_fd(), c"fuse", 0o700).map_err(fail)?;
    sys::mkdirat(t.as_raw_fd(), c"lower", 0o700).map_err(fail)?;
    sys::move_mount_to_path(t.as_raw_fd(), c"/tmp").map_err(fail)?;
    sys::move_mount_to_path(host.as_raw_fd(), FUSE_LOWER).map_err(fail)?;
    match sys::fork().map_err(fail)? {
        sys::Forked::Child => {
            // Nothing of PID 1's; stdout and stderr to /dev/null (Debian
            // 12's fuse-overlayfs 1.10 complains about an option it passes
            // itself on every start; a failure is reported with the
            // command line).
            let _ = sys::close_from(3);
            if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR, 0) {
                let _ = sys::dup2(null.as_raw_fd(), 1);
                let _ = sys::dup2(null.as_raw_fd(), 2);
            }
            let envp = [std::ptr::null()];
            sys::execve(&argv[0], ptrs, &envp);
            sys::exit(127)
        }
        sys::Forked::Parent { pid, .. } => {
            let (_, status) = sys::waitpid(pid, false).map_err(fail)?.ok_or(fail(libc::ECHILD))?;
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                return Err(fail(if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 127 {
                    libc::ENOENT
                } else {
                    libc::EIO
                }));
            }
        }
    }
    let fd = sys::open_tree(libc::AT_FDCWD, FUSE_MOUNTPOINT, OPEN_TREE_CLONE).map_err(fail)?;
    sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0).map_err(fail)?;
    Ok(fd)
}

/// Step 2: attaches the new root over the current one.
pub(crate) fn attach_root(b: &Build) -> Result<RawFd, Fail> {
    let root = b.root.as_ref().expect("cloned").as_raw_fd();
    sys::move_mount_to_path(root, c"/").map_err(|e| Fail::new(Step::AttachRoot, e))?;
    Ok(root)
}

/// Step 3: applies the operations in order.
pub(crate) fn apply_ops(plan: &MountPlan, b: &Build, root: RawFd) -> Result<(), Fail> {
    for (i, op) in plan.ops.iter().enumerate() {
        match op {
            Op::Bind { clone, dst, name, .. } => {
                let Some(src) = take(clone) else { continue }; // a -try source that was missing
                let is_file = sys::fd_mode(src.as_raw_fd()).is_ok_and(|m| m != libc::S_IFDIR);
                let at = mount_point(root, dst, is_file).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(src.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Bind, e, *name))?;
            }
            Op::Tmpfs { dst, size, mode, attrs, optional, name } => {
                if *optional && sys::open_in_root(root, dst, libc::O_PATH | libc::O_DIRECTORY, 0).is_err() {
                    continue;
                }
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                let fs = tmpfs(size, mode, *attrs).map_err(|e| Fail::at(Step::Tmpfs, e, *name))?;
                sys::move_mount_fd(fs.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Tmpfs, e, *name))?;
            }
            Op::Proc { dst, name } => {
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                let res = match b.proc_attached.get() {
                    // The run's procfs is attached once; further /proc
                    // mounts are clones of it.
                    None => sys::move_mount_fd(b.proc_fd, at.as_raw_fd()),
                    Some(first) => {
                        let Op::Proc { dst: first_dst, .. } = &plan.ops[first] else { unreachable!() };
                        sys::open_in_root(root, first_dst, libc::O_PATH | libc::O_DIRECTORY, 0)
                            .and_then(|f| {
                                sys::open_tree(f.as_raw_fd(), c"", OPEN_TREE_CLONE | libc::AT_EMPTY_PATH as u32)
                            })
                            .and_then(|c| sys::move_mount_fd(c.as_raw_fd(), at.as_raw_fd()))
                    }
                };
                res.map_err(|e| Fail::at(Step::Proc, e, *name))?;
                if b.proc_attached.get().is_none() {
                    b.proc_attached.set(Some(i));
                }
            }
            Op::Dev { dst, nodes, name } => {
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                build_dev(&at, nodes).map_err(|e| Fail::at(Step::Dev, e, *name))?;
            }
            Op::Dir { dst, name } => {
                mkdir_p(root, dst).map_err(|e| Fail::at(Step::Dir, e, *name))?;
            }
            Op::File { src, dst, name } => {
                let f = create_file(root, dst).map_err(|e| Fail::at(Step::File, e, *name))?;
                sys::copy_fd(src.as_raw_fd(), f.as_raw_fd()).map_err(|e| Fail::at(Step::File, e, *name))?;
            }
            Op::FileData { dst, content, name } => {
                let f = create_file(root, dst).map_err(|e| Fail::at(Step::File, e, *name))?;
                sys::write_all(f.as_raw_fd(), content).map_err(|e| Fail::at(Step::File, e, *name))?;
            }
            Op::Symlink { target, dst, name } => {
                let mut buf = [0u8; 4096];
                let (parent, last) = split_parent(dst, &mut buf).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
                let dir = mkdir_p(root, parent).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
                sys::symlinkat(target, dir.as_raw_fd(), last).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
            }
            Op::Overlay { dst, fs, name, .. } => {
                let fs = take(fs).ok_or(Fail::at(Step::Overlay, libc::EBADF, *name))?;
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(fs.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
            }
            Op::Hide { dst, holes, cover: keep, name } => {
                let at = match sys::open_in_root(root, dst, libc::O_PATH, 0) {
                    Ok(fd) => fd,
                    Err(libc::ENOENT | libc::ENOTDIR) => continue, // nothing there to hide
                    Err(e) => return Err(Fail::at(Step::Hide, e, *name)),
                };
                let is_dir = sys::fd_mode(at.as_raw_fd()) == Ok(libc::S_IFDIR);
                let keep_open = *holes && is_dir;
                let cover = if keep_open {
                    // A tmpfs of its own, to make mount points in.
                    tmpfs(c"4096", c"0555", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
                } else {
                    // A clone of the scratch tmpfs's empty directory or file:
                    // a third of the cost of a tmpfs of its own.
                    let scratch = b.scratch.as_ref().expect("prepared").as_raw_fd();
                    let empty = if is_dir { c"dir" } else { c"empty" };
                    sys::open_tree(scratch, empty, OPEN_TREE_CLONE).and_then(|fd| {
                        sys::mount_setattr(
                            fd.as_raw_fd(),
                            false,
                            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                            0,
                        )?;
                        Ok(fd)
                    })
                }
                .map_err(|e| Fail::at(Step::Hide, e, *name))?;
                sys::move_mount_fd(cover.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Hide, e, *name))?;
                if keep_open {
                    keep.set(into_raw(cover));
                }
            }
            Op::Save { dst, slot, name } => {
                let at = match sys::open_in_root_nofollow(root, dst, libc::O_PATH) {
                    Ok(fd) => fd,
                    Err(libc::ENOENT | libc::ENOTDIR) => continue, // nothing to show
                    Err(e) => return Err(Fail::at(Step::Reveal, e, *name)),
                };
                let flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32;
                let clone = sys::open_tree(at.as_raw_fd(), c"", flags).map_err(|e| Fail::at(Step::Reveal, e, *name))?;
                plan.saved[*slot].set(into_raw(clone));
            }
            Op::Reveal { dst, slot, attrs, name } => {
                let Some(src) = take(&plan.saved[*slot]) else { continue }; // it was missing
                if *attrs != 0 {
                    sys::mount_setattr(src.as_raw_fd(), true, *attrs, 0)
                        .map_err(|e| Fail::at(Step::Reveal, e, *name))?;
                }
                let is_file = sys::fd_mode(src.as_raw_fd()).is_ok_and(|m| m != libc::S_IFDIR);
                let at = mount_point(root, dst, is_file).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(src.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Reveal, e, *name))?;
            }
        }
    }
    // The covers that received mount points are read-only from here on.
    for op in &plan.ops {
        if let Op::Hide { cover, name, .. } = op {
            if let Some(fd) = take(cover) {
                sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_RDONLY, 0)
                    .map_err(|e| Fail::at(Step::Hide, e, *name))?;
            }
        }
    }
    if let Base::EmptyRoot { .. } = plan.base {
        // The judge's root: nothing but what the operations put there, and
        // read-only (the tmpfs and bind mounts on it stay as asked).
        sys::mount_setattr(root, false, MOUNT_ATTR_RDONLY, 0).map_err(|e| Fail::new(Step::RootReadonly, e))?;
    }
    Ok(())
}

/// Step 4: makes the new tree the root and detaches the old one.
pub(crate) fn pivot(root: RawFd) -> Result<(), Fail> {
    sys::fchdir(root).map_err(|e| Fail::new(Step::PivotRoot, e))?;
    sys::pivot_root_cwd().map_err(|e| Fail::new(Step::PivotRoot, e))?;
    sys::umount_detach_cwd().map_err(|e| Fail::new(Step::DetachOldRoot, e))?;
    sys::chdir(c"/").map_err(|e| Fail::new(Step::PivotRoot, e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(e.contains("filesystem.writable") && e.contains(&h("nope")), "{e}");
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
