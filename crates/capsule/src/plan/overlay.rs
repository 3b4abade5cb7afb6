//! Copy-on-write layers over the host view (`--layer DIR`, docs/layers.md):
//! planned here by the supervisor, mounted by PID 1 through
//! the new mount API (`crate::plan::mounts`), so the host's mount table never
//! sees them.
//!
//! A layer directory holds `upper/`, which mirrors absolute host paths
//! (`DIR/upper/etc/foo` is the layer's `/etc/foo`), `work/` (overlayfs's
//! work directories), `roots` (the directories the layer's overlays were
//! mounted on, one per line) and `layer.lock`. Reviewing and committing is
//! `crate::layer`'s.
//!
//! Two backends:
//! - Kernel overlayfs (the default): one overlay per *root* directory,
//!   mounted by PID 1 while it holds the supervisor's capabilities, with
//!   `userxattr` (whiteouts are 0:0 character devices, opaque directories
//!   carry `user.overlay.opaque`). Not one overlay over `/`, for two kernel
//!   rules: overlayfs clones each layer as a private mount, which is
//!   refused for a mount with locked submounts (every mount the
//!   supervisor's namespace inherited from the host is locked), so a root
//!   contains no mount point; and copy-up recreates a file or directory in
//!   the upper layer with its original owner, which is impossible
//!   (EOVERFLOW) for an owner the sandbox's user namespace does not map,
//!   i.e. anyone but the caller. So the roots start at the highest
//!   directory of each place the program is expected to write whose chain
//!   down is the caller's own: the working directory, the caller's home,
//!   `/var/tmp`, and every root an earlier run of the layer used (so what
//!   it changed stays visible). Elsewhere the host view stays read-only,
//!   as it is without a layer; the caller could not write there anyway.
//!   A root containing the directory of a layer stacked below is split
//!   around it, as around a mount point: overlayfs refuses a lower layer
//!   inside another (ELOOP).
//! - fuse-overlayfs, for `--root` (fakeroot) runs and layers a `--root`
//!   run used: a package manager running as the sandbox's root must change
//!   files the host's root owns, which no kernel overlay in an
//!   unprivileged user namespace can copy up. fuse-overlayfs copies up as
//!   the caller and shows every file as owned by the sandbox's root (the
//!   caller): one overlay over the whole host view. Slower (every file
//!   operation goes through the daemon; docs/layers.md has the figures),
//!   so only these runs pay for it. A host file the caller cannot read
//!   cannot be copied up (fuse-overlayfs reads it as the caller); for the
//!   empty ones, the package managers' lock files, each run gets an
//!   empty stand-in of its own in a lower layer (`stand_ins`).
//!
//! With `--layer-size` (kernel overlays only) the overlays' upper and work
//! directories are on a tmpfs of what the limit leaves ([`Stage`]), over a
//! read-only overlay of the layer as it is; the supervisor folds the
//! tmpfs into the layer when the run ends. No quota on the host
//! filesystem is open to an unprivileged user; a tmpfs's size is.

use std::ffi::{CStr, CString};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::host::userdb::{self, Db};
use crate::layer::{Layer, LayerError, LayerLock};
use crate::proto::spec::RunSpec;
use crate::sys;

/// Most kernel overlays one run mounts.
const MAX_ROOTS: usize = 64;
/// Where the host view has a filesystem of its own (or none): never a root.
const NOT_LAYERED: [&str; 5] = ["/proc", "/sys", "/dev", "/tmp", "/run"];
/// Marks a layer served by fuse-overlayfs (a `--root` run used it).
const FUSE_MARK: &str = "fuse";
/// Where PID 1 has fuse-overlayfs mount, on a tmpfs of its private mount
/// namespace (covered by the run's own /tmp in the sandbox).
pub(crate) const FUSE_MOUNTPOINT: &CStr = c"/tmp/fuse";
/// The host's root as fuse-overlayfs sees it: a clone PID 1 attaches there
/// (see `mounts::start_fuse`).
pub(crate) const FUSE_LOWER: &CStr = c"/tmp/lower";

/// Where PID 1 attaches a size-limited run's staging tmpfs before it makes
/// the overlays (its private namespace's /tmp, covered by the run's own).
pub(crate) const STAGE_MOUNTPOINT: &CStr = c"/tmp";

/// A size-limited run's staging area (`--layer-size`): a tmpfs of what the
/// limit leaves, holding every overlay's upper (`u/ROOT`) and work
/// (`w/ROOT`) directories and, at `l/ROOT`, its lower layer: a read-only
/// overlay of the layer as it is (its `upper/` over the host). When the
/// run ends the tmpfs is folded into the layer ([`Stage::fold`]), which
/// then holds what the run would have written there directly.
pub(crate) struct Stage {
    /// The tmpfs, made detached by the supervisor and attached by PID 1;
    /// held open so that its files outlive the run's mount namespace.
    pub fs: std::os::fd::OwnedFd,
    limit: u64,
    held: u64,
    /// Each overlay's root with the directories below the writable layer
    /// at it (the stacked layers', top first, then the host's).
    roots: Vec<(PathBuf, Vec<PathBuf>)>,
}

/// A run's layers, as the supervisor prepared them.
pub(crate) struct LayerPlan {
    /// The layer directories, the writable one last.
    pub dirs: Vec<PathBuf>,
    /// Each layer with its lock (exclusive on the writable layer, shared
    /// on the others), held until the run is over and PID 1 reaped, so
    /// that no two runs and no `capsule layer` command use an upper
    /// directory at once (overlayfs forbids changing a mounted layer).
    pub locks: Vec<(Layer, LayerLock)>,
    pub backend: Backend,
    /// With `layer_size`: where the run's writes are staged.
    pub stage: Option<Stage>,
    /// The `guard` paths missing on the host, whose stand-ins' mount
    /// points PID 1 makes in the layer (removed after the run).
    pub stand_ins: Vec<PathBuf>,
}

pub(crate) enum Backend {
    /// One overlay per root.
    Kernel(Vec<Overlay>),
    /// fuse-overlayfs over the whole host view.
    Fuse { argv: Vec<CString> },
}

/// One kernel overlay: `dst` is the host path it covers (the same path in
/// the sandbox); the others are overlayfs parameters, escaped.
pub(crate) struct Overlay {
    pub dst: PathBuf,
    pub lower: CString,
    pub upper: CString,
    pub work: CString,
    /// Staged (`--layer-size`): the layer as it is, a read-only overlay
    /// (lower, upper, work) that PID 1 mounts at the path last, in the
    /// staging tmpfs, as this overlay's lower layer.
    pub base: Option<[CString; 4]>,
    /// Mounted `volatile`: the layer's upper directory, marked first.
    pub volatile: bool,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("layer: {what} {}: {e}", path.display())
}

/// Characters overlayfs and fuse-overlayfs options cannot carry safely.
fn check_chars(p: &Path) -> Result<(), String> {
    let s = p.to_str().ok_or_else(|| format!("layer: {} is not valid UTF-8", p.display()))?;
    if let Some(c) = s.chars().find(|c| matches!(c, ':' | ',' | '\\' | '=' | '\n')) {
        return Err(format!(
            "layer: {s} contains `{}`, which overlayfs options cannot carry; use a path without `:`, `,`, `=` or `\\`",
            c.escape_default()
        ));
    }
    Ok(())
}

/// `path` lexically normal: absolute, no `.`/`..`, no trailing slash.
fn is_normal(p: &Path) -> bool {
    p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn join_abs(base: &Path, abs: &Path) -> PathBuf {
    base.join(abs.strip_prefix("/").expect("absolute"))
}

/// The roots an earlier run of the layer recorded.
fn recorded_roots(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = crate::sys::read_regular_file(&dir.join("roots")) else { return Vec::new() };
    text.lines().map(PathBuf::from).filter(|p| is_normal(p)).collect()
}

fn write_roots(dir: &Path, roots: &[PathBuf]) -> Result<(), String> {
    let path = dir.join("roots");
    let tmp = dir.join(".roots.tmp");
    let mut f = fs::File::create(&tmp).map_err(|e| io_err("writing", &tmp, e))?;
    for r in roots {
        writeln!(f, "{}", r.display()).map_err(|e| io_err("writing", &tmp, e))?;
    }
    f.sync_all().map_err(|e| io_err("writing", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| io_err("writing", &path, e))
}

fn excluded(p: &Path) -> bool {
    p == Path::new("/") || NOT_LAYERED.iter().any(|x| p.starts_with(x))
}

/// The root for a place the program is expected to write: the highest
/// directory above `c` whose chain down to `c` the caller owns, its group
/// the caller's (`me`, `gid`: the only ids the run maps; overlayfs cannot
/// copy up a directory of another owner or group), `c` itself when it is
/// not the caller's.
fn root_for(c: &Path, me: u32, gid: u32) -> Option<PathBuf> {
    let c = fs::canonicalize(c).ok()?;
    let md = fs::metadata(&c).ok()?;
    if !md.is_dir() || excluded(&c) {
        return None;
    }
    let mut r = c.clone();
    if md.uid() == me && md.gid() == gid {
        while let Some(p) = r.parent() {
            if p == Path::new("/") || excluded(p) {
                break;
            }
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() && m.uid() == me && m.gid() == gid => r = p.to_path_buf(),
                _ => break,
            }
        }
    }
    Some(r)
}

/// Whether every directory below `root` down to `place` is the caller's,
/// of its group.
fn owned_down(root: &Path, place: &Path, me: u32, gid: u32) -> bool {
    let mut p = place;
    while p != root {
        match fs::symlink_metadata(p) {
            Ok(m) if m.uid() == me && m.gid() == gid => {}
            _ => return false,
        }
        let Some(up) = p.parent() else { return false };
        p = up;
    }
    true
}

/// Splits a root that contains mount points, or the directory of a layer
/// stacked below (`below`: overlayfs refuses a lower layer inside another,
/// ELOOP), into roots that do not: its subdirectories, recursively (the
/// files directly in it stay read-only). A root at or inside one of the
/// run's layer directories (`layers`, hidden in the sandbox) is dropped.
fn split_roots(
    root: &Path,
    mps: &[PathBuf],
    below: &[PathBuf],
    layers: &[PathBuf],
    out: &mut Vec<PathBuf>,
) -> Result<(), String> {
    if out.len() > MAX_ROOTS {
        return Err(format!(
            "layer: more than {MAX_ROOTS} overlays would be needed around the mount points and stacked layers below {}",
            root.display()
        ));
    }
    if layers.iter().any(|a| root.starts_with(a)) {
        return Ok(());
    }
    if !mps.iter().any(|m| m.starts_with(root) && m != root) && !below.iter().any(|a| a.starts_with(root)) {
        out.push(root.to_path_buf());
        return Ok(());
    }
    let rd = match fs::read_dir(root) {
        Ok(rd) => rd,
        // Removed since its parent was listed: no root.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("reading", root, e)),
    };
    let mut kids: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| !excluded(p))
        .collect();
    kids.sort();
    for k in kids {
        split_roots(&k, mps, below, layers, out)?;
    }
    Ok(())
}

/// The directories of an overlay's `lowerdir` option (checked: no `:`).
fn lower_dirs(lower: &CStr) -> Vec<PathBuf> {
    lower.to_str().expect("UTF-8").split(':').map(PathBuf::from).collect()
}

/// Keeps the outermost of nested roots, in path order.
fn outermost(mut roots: Vec<PathBuf>) -> Vec<PathBuf> {
    roots.sort();
    roots.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for r in roots {
        if !out.iter().any(|o| r.starts_with(o)) {
            out.push(r);
        }
    }
    out
}

/// Makes the directories of the host path `host` (a directory) in the
/// upper tree `upper`, each new one with the host directory's permission
/// bits. Stops with an error at an entry of the upper tree that is not a
/// directory (a whiteout: the layer deleted it).
fn mirror_dirs(upper: &Path, host: &Path) -> Result<(), String> {
    let mut h = PathBuf::from("/");
    for c in host.strip_prefix("/").expect("absolute").components() {
        h.push(c);
        let u = join_abs(upper, &h);
        match fs::DirBuilder::new().mode(0o755).create(&u) {
            Ok(()) => {
                let m = fs::symlink_metadata(&h).map_err(|e| io_err("reading", &h, e))?;
                fs::set_permissions(&u, fs::Permissions::from_mode(m.mode() & 0o7777))
                    .map_err(|e| io_err("setting the mode of", &u, e))?;
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::AlreadyExists
                    && fs::symlink_metadata(&u).is_ok_and(|m| m.is_dir()) => {}
            Err(e) => return Err(io_err("creating", &u, e)),
        }
    }
    Ok(())
}

/// Where a `--root` run looks for empty files the caller cannot read: the
/// package managers' lock files (dpkg's `lock`, `lock-frontend` and
/// `triggers/Lock`, apt's `lists/lock` and `archives/lock`, `/etc/.pwd.lock`
/// of useradd and passwd) are root's, mode 0640 or 0600.
const STAND_IN_DIRS: [&str; 3] = ["/etc", "/var/lib", "/var/cache"];
/// Most entries looked at for stand-ins (docs/layers.md has the usual count).
const STAND_IN_SCAN_MAX: usize = 200_000;

/// fuse-overlayfs copies a file up by reading it, as the caller: a host
/// file the caller cannot read cannot be written in the layer, even when
/// it is empty and opened with `O_TRUNC`, which is how programs use lock
/// files (dpkg fails with "you do not have permission to lock the dpkg
/// database directory"). For each empty regular file below
/// [`STAND_IN_DIRS`] that the caller cannot read, `dir` (made afresh for
/// each run) gets an empty file of the same mode, the caller's, at the same
/// path: a lower layer just above the host, from which the copy-up reads
/// nothing. Directories the caller cannot read are not looked into, other
/// filesystems are not entered. `None` when there is no such file.
fn stand_ins(dir: &Path) -> Result<Option<PathBuf>, String> {
    if fs::symlink_metadata(dir).is_ok() {
        fs::remove_dir_all(dir).map_err(|e| io_err("removing", dir, e))?;
    }
    let mut found = Vec::new();
    let mut seen = 0usize;
    for top in STAND_IN_DIRS {
        let Ok(m) = fs::symlink_metadata(top) else { continue };
        if !m.is_dir() {
            continue;
        }
        let mut stack = vec![PathBuf::from(top)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                seen += 1;
                if seen > STAND_IN_SCAN_MAX {
                    break;
                }
                let Ok(em) = e.metadata() else { continue };
                if em.is_dir() && em.dev() == m.dev() {
                    stack.push(e.path());
                } else if em.is_file()
                    && em.len() == 0
                    && fs::File::open(e.path()).is_err_and(|x| x.kind() == std::io::ErrorKind::PermissionDenied)
                {
                    found.push((e.path(), em.mode() & 0o7777));
                }
            }
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| io_err("creating", dir, e))?;
    for (p, mode) in found {
        let parent = p.parent().expect("below a top directory");
        mirror_dirs(dir, parent)?;
        let s = join_abs(dir, &p);
        fs::File::create(&s).map_err(|e| io_err("creating", &s, e))?;
        fs::set_permissions(&s, fs::Permissions::from_mode(mode)).map_err(|e| io_err("setting the mode of", &s, e))?;
    }
    Ok(Some(dir.to_path_buf()))
}

/// Finds fuse-overlayfs.
fn find_fuse_overlayfs() -> Result<PathBuf, String> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| d.starts_with('/'))
        .chain(["/usr/bin", "/bin", "/usr/local/bin"])
        .map(|d| Path::new(d).join("fuse-overlayfs"))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
        .ok_or_else(|| {
            "layer: a --root run in a layer needs fuse-overlayfs (apt-get install fuse-overlayfs): kernel overlayfs \
             cannot copy up files owned by users outside the sandbox's user namespace"
                .to_string()
        });
    found
}

fn cstring(s: String) -> CString {
    CString::new(s).expect("checked: no NUL")
}

fn param(p: &Path) -> CString {
    cstring(p.display().to_string())
}

/// Prepares the run's layers: creates the writable one if needed, takes
/// the locks, computes the overlays. `None` without layers.
pub(crate) fn prepare(spec: &RunSpec) -> Result<Option<LayerPlan>, String> {
    if spec.layers.is_empty() {
        return Ok(None);
    }
    let me = sys::geteuid();
    let n = spec.layers.len();
    let mut dirs = Vec::with_capacity(n);
    let mut locks = Vec::with_capacity(n);
    for (i, d) in spec.layers.iter().enumerate() {
        check_chars(d)?;
        let writable = i + 1 == n;
        let layer = if writable { Layer::create(d) } else { Layer::open(d) }.map_err(|e| match e {
            LayerError::NotALayer { .. } if !writable => format!("{e}; only the last --layer may be new"),
            e => e.to_string(),
        })?;
        let lock = layer.lock_run(writable).map_err(|e| e.to_string())?;
        if writable {
            // overlayfs refuses the work directories a volatile run left
            // marked; the write-back of that run stays the kernel's.
            layer.ready_for_mount(&lock).map_err(|e| e.to_string())?;
            // What the run cannot change; commit never touches it.
            layer.note_protected(&lock, spec)?;
        } else {
            layer.check_interrupted().map_err(|e| e.to_string())?;
        }
        // Resolve once: the paths handed to overlayfs must not change meaning.
        let c = fs::canonicalize(d).map_err(|e| io_err("resolving", d, e))?;
        check_chars(&c)?;
        dirs.push(c);
        locks.push((layer, lock));
    }
    // A working directory inside a layer would be the layer's own files,
    // hidden in the sandbox (an empty directory): refused.
    if let Some(cwd) = spec.cwd.as_deref().and_then(|c| fs::canonicalize(c).ok()) {
        if let Some(d) = dirs.iter().find(|d| cwd.starts_with(d)) {
            return Err(format!(
                "layer: the working directory {} is inside the layer {}; run from outside the layer directory",
                cwd.display(),
                d.display()
            ));
        }
    }
    let top = dirs.last().expect("n > 0").clone();
    let fuse = spec.root || dirs.iter().any(|d| d.join(FUSE_MARK).exists());
    if fuse && spec.layer_size.is_some() {
        return Err(format!(
            "layer: {} is served by fuse-overlayfs (a --root run used it), whose writes cannot be staged in a size-limited \
             tmpfs: --layer-size works with kernel-overlay layers only",
            top.display()
        ));
    }
    let mut stage = None;
    let backend = if fuse {
        // Names a run without --root wrote as files would be whiteouts to fuse-overlayfs.
        for (layer, _) in &locks {
            layer.check_fuse_ready().map_err(|e| e.to_string())?;
        }
        let bin = find_fuse_overlayfs()?;
        let work = top.join("work").join("fuse");
        fs::DirBuilder::new().recursive(true).mode(0o755).create(&work).map_err(|e| io_err("creating", &work, e))?;
        fs::write(top.join(FUSE_MARK), "this layer is served by fuse-overlayfs (a --root run used it)\n")
            .map_err(|e| io_err("writing", &top.join(FUSE_MARK), e))?;
        let mut lower: Vec<String> =
            dirs[..n - 1].iter().rev().map(|d| d.join("upper").display().to_string()).collect();
        if let Some(s) = stand_ins(&top.join("work").join("stand-ins"))? {
            lower.push(s.display().to_string());
        }
        lower.push(FUSE_LOWER.to_str().expect("ASCII").into());
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},squash_to_root",
            lower.join(":"),
            top.join("upper").display(),
            work.display()
        );
        let argv = vec![param(&bin), cstring("-o".into()), cstring(opts), FUSE_MOUNTPOINT.into()];
        Backend::Fuse { argv }
    } else {
        let (mut overlays, s) = kernel_overlays(spec, &dirs, me)?;
        if s.is_none() {
            // Written back later, as a bare program's files (layer::volatile);
            // a staged run's upper directories are a tmpfs anyway.
            let (layer, lock) = locks.last().expect("at least one layer");
            let roots: Vec<PathBuf> = overlays.iter().map(|o| o.dst.clone()).collect();
            if layer.begin_volatile(lock, &roots).map_err(|e| e.to_string())? {
                for o in &mut overlays {
                    o.volatile = true;
                }
            }
        }
        stage = s;
        Backend::Kernel(overlays)
    };
    Ok(Some(LayerPlan { dirs, locks, backend, stage, stand_ins: Layer::stand_ins_of(spec) }))
}

fn kernel_overlays(spec: &RunSpec, dirs: &[PathBuf], me: u32) -> Result<(Vec<Overlay>, Option<Stage>), String> {
    let top = dirs.last().expect("at least one layer");
    let gid = sys::getgid();
    // The places themselves, and the roots for them.
    let mut places: Vec<PathBuf> = Vec::new();
    let mut wanted: Vec<PathBuf> = Vec::new();
    let home = std::env::var("HOME").ok().filter(|h| h.starts_with('/')).map(PathBuf::from);
    for c in [spec.cwd.clone(), home, Some(PathBuf::from("/var/tmp"))].into_iter().flatten() {
        if let Some(r) = root_for(&c, me, gid) {
            wanted.push(r);
            places.extend(fs::canonicalize(&c).ok());
        }
    }
    for d in dirs {
        wanted.extend(recorded_roots(d).into_iter().filter(|r| r.is_dir() && !excluded(r)));
    }
    for r in &wanted {
        for d in dirs {
            if r.starts_with(d) {
                return Err(format!(
                    "layer: {} is inside the layer {}; run from outside the layer directory",
                    r.display(),
                    d.display()
                ));
            }
        }
    }
    let mps = crate::host::mountinfo::mount_points();
    // The layers stacked below are lower layers of every overlay: none
    // may lie inside a root (the writable layer's upper may: overlayfs
    // refuses only a lower layer inside another).
    let below = &dirs[..dirs.len() - 1];
    let mut roots = Vec::new();
    for r in outermost(wanted.clone()) {
        split_roots(&r, &mps, below, dirs, &mut roots)?;
    }
    // A directory removed since it was listed is no root.
    let roots: Vec<PathBuf> =
        outermost(roots).into_iter().filter(|r| fs::symlink_metadata(r).is_ok_and(|m| m.is_dir())).collect();
    write_roots(top, &roots)?;
    for r in &roots {
        check_chars(r)?;
        let work = join_abs(&top.join("work"), r);
        fs::DirBuilder::new().recursive(true).mode(0o755).create(&work).map_err(|e| io_err("creating", &work, e))?;
        // The overlay's root shows the upper directory's attributes, and
        // the directories above it are compared with the host's: each
        // gets the host directory's mode (its owner is the caller).
        mirror_dirs(&top.join("upper"), r)?;
    }
    // A place the program is expected to write that lies inside another
    // root: the directories from that root down to it may not be the
    // caller's (a root-owned, world-writable /var/tmp/shared, a working
    // directory of another group), and
    // overlayfs cannot copy those up (EOVERFLOW): they are made in the
    // upper tree beforehand (owned by the caller, as every entry there).
    for w in wanted.iter().chain(&places) {
        if roots.iter().any(|r| w.starts_with(r) && w != r && !owned_down(r, w, me, gid)) {
            let _ = mirror_dirs(&top.join("upper"), w);
        }
    }
    // Staged: the limit less what the layer holds now, the directories
    // just made included.
    let mut stage = match spec.layer_size {
        Some(limit) => Some(Stage::new(top, limit, &roots)?),
        None => None,
    };
    let mut out = Vec::with_capacity(roots.len());
    for r in roots {
        let upper = join_abs(&top.join("upper"), &r);
        let work = join_abs(&top.join("work"), &r);
        let mut lower: Vec<String> = Vec::new();
        for d in dirs[..dirs.len() - 1].iter().rev() {
            let l = join_abs(&d.join("upper"), &r);
            if l.is_dir() {
                lower.push(l.display().to_string());
            }
        }
        lower.push(r.display().to_string());
        let lower = cstring(lower.join(":"));
        out.push(match &mut stage {
            // The layer cannot be a lower layer of its own (it may lie
            // inside the root: overlayfs refuses a lower layer inside
            // another), so it is the upper layer of a read-only overlay
            // that is the lower layer of the staged one.
            Some(st) => {
                st.roots.push((r.clone(), lower_dirs(&lower)));
                let [l, u, w] = st.dirs_for(&r, &upper)?;
                Overlay {
                    lower: l.clone(),
                    upper: u,
                    work: w,
                    base: Some([lower, param(&upper), param(&work), l]),
                    volatile: false,
                    dst: r,
                }
            }
            None => Overlay { lower, upper: param(&upper), work: param(&work), base: None, volatile: false, dst: r },
        });
    }
    Ok((out, stage))
}

/// After a run, its PID 1 gone: folds a staged run's writes into the
/// layer, then records, for each path the run changed, the host original
/// it was based on (for commit's conflict check). `Ok(Some(note))` when a
/// staged run ended with its staging area full.
pub(crate) fn after_run(plan: &LayerPlan) -> Result<Option<String>, String> {
    let (layer, lock) = plan.locks.last().expect("at least one layer");
    let top = plan.dirs.last().expect("at least one layer");
    let note = match &plan.stage {
        Some(st) => st.fold(&top.join("upper"))?,
        None => None,
    };
    layer.drop_stand_ins(lock, &plan.stand_ins).map_err(|e| format!("removing the guard's stand-ins: {e}"))?;
    layer.record_originals(lock).map_err(|e| format!("recording the layer's originals: {e}"))?;
    Ok(note)
}

/// Bytes the entries at and below `p` take on disk (`st_blocks`, as `du`
/// counts them), no link followed. Iterative: a run chose the depth.
fn disk_usage(p: &Path) -> u64 {
    let (mut n, mut todo) = (0, vec![p.to_path_buf()]);
    while let Some(p) = todo.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        n += m.blocks() * 512;
        if m.is_dir() {
            todo.extend(fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    n
}

const OPAQUE: &str = "user.overlay.opaque";

fn is_whiteout(m: &fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Whether the directory `p` carries overlayfs's opaque mark.
fn opaque(p: &Path) -> bool {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else { return false };
    let Ok(d) = fs::File::open(parent) else { return false };
    use std::os::fd::AsRawFd;
    sys::layer::get_xattr_at(d.as_raw_fd(), name.as_encoded_bytes(), OPAQUE).ok().flatten().is_some_and(|v| v == b"y")
}

/// Removes whatever is at `p` (a directory with all it holds).
fn remove_any(p: &Path) -> Result<(), String> {
    match fs::symlink_metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("reading", p, e)),
        Ok(m) if m.is_dir() => fs::remove_dir_all(p).map_err(|e| io_err("removing", p, e)),
        Ok(_) => fs::remove_file(p).map_err(|e| io_err("removing", p, e)),
    }
}

/// The user xattrs of `from` that are not overlayfs's own (its opaque mark
/// is set where it belongs; origin, impure, uuid describe the staging
/// area) onto `to`; neither is a link.
fn copy_xattrs(from: &Path, to: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let open_parent = |p: &Path| fs::File::open(p.parent().expect("below a root")).map_err(|e| io_err("opening", p, e));
    let (fd, td) = (open_parent(from)?, open_parent(to)?);
    let (fname, tname) =
        (from.file_name().expect("named").as_encoded_bytes(), to.file_name().expect("named").as_encoded_bytes());
    let names = sys::layer::list_xattrs_at(fd.as_raw_fd(), fname)
        .map_err(|e| io_err("listing the attributes of", from, std::io::Error::from_raw_os_error(e)))?;
    for n in names {
        let Ok(n) = std::str::from_utf8(&n) else { continue };
        if !n.starts_with("user.") || n.starts_with("user.overlay.") {
            continue;
        }
        if let Ok(Some(v)) = sys::layer::get_xattr_at(fd.as_raw_fd(), fname, n) {
            sys::layer::set_xattr_at(td.as_raw_fd(), tname, n, &v)
                .map_err(|e| io_err(&format!("setting {n} on"), to, std::io::Error::from_raw_os_error(e)))?;
        }
    }
    Ok(())
}

fn set_times(p: &Path, m: &fs::Metadata) -> Result<(), String> {
    let f = fs::File::open(p).map_err(|e| io_err("opening", p, e))?;
    let mut t = fs::FileTimes::new();
    if let Ok(a) = m.accessed() {
        t = t.set_accessed(a);
    }
    if let Ok(w) = m.modified() {
        t = t.set_modified(w);
    }
    f.set_times(t).map_err(|e| io_err("setting the times of", p, e))
}

/// Copies the regular file `from` to the new file `to`, keeping holes (a
/// sparse file takes no more in the layer than it did in the staging area).
fn copy_sparse(from: &Path, to: &Path, m: &fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let src = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(from)
        .map_err(|e| io_err("opening", from, e))?;
    let dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(|e| io_err("creating", to, e))?;
    crate::layer::copy_sparse(&src, &dst).map_err(|e| io_err("copying", from, std::io::Error::from_raw_os_error(e)))?;
    dst.set_permissions(fs::Permissions::from_mode(m.mode() & 0o7777)).map_err(|e| io_err("setting the mode of", to, e))
}

/// What the lower layers below the writable one (`lowers`, top first, at
/// some directory) show at `name`: whether anything, and the directories
/// that merge into it, as overlayfs looks them up (a whiteout or a
/// non-directory ends the search, an opaque directory ends it below).
fn look_below(lowers: &[PathBuf], name: &std::ffi::OsStr) -> (bool, Vec<PathBuf>) {
    let (mut seen, mut dirs) = (false, Vec::new());
    for (i, l) in lowers.iter().enumerate() {
        let p = l.join(name);
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        if is_whiteout(&m) {
            break;
        }
        seen = true;
        if !m.is_dir() {
            break;
        }
        let host = i + 1 == lowers.len();
        dirs.push(p.clone());
        if !host && opaque(&p) {
            break;
        }
    }
    (seen, dirs)
}

impl Stage {
    /// Makes the staging tmpfs for a layer `top` limited to `limit` bytes
    /// (what it holds counts: the tmpfs gets the rest).
    fn new(top: &Path, limit: u64, roots: &[PathBuf]) -> Result<Self, String> {
        use std::os::fd::AsRawFd;
        let held = disk_usage(&top.join("upper"));
        if held + spec_page() > limit {
            return Err(format!(
                "layer: {} already holds {held} bytes, --layer-size is {limit}: commit or discard some of it, or give a larger size",
                top.display()
            ));
        }
        let budget = limit - held;
        // Every entry the run makes is one inode: one per page of the
        // budget, plus the directories made here and overlayfs's own.
        let scaffold: u64 = roots.iter().map(|r| 3 * r.components().count() as u64).sum::<u64>() + 64;
        let inodes = budget / spec_page() + scaffold;
        let err = |what: &str, e: i32| {
            format!("layer: {what} the staging tmpfs for --layer-size: {}", std::io::Error::from_raw_os_error(e))
        };
        let fsfd = sys::fsopen(c"tmpfs").map_err(|e| err("opening", e))?;
        let set = |k: &CStr, v: String| {
            sys::fsconfig_string(fsfd.as_raw_fd(), k, &cstring(v)).map_err(|e| err("configuring", e))
        };
        set(c"size", budget.to_string())?;
        set(c"nr_inodes", inodes.to_string())?;
        set(c"mode", "0700".into())?;
        sys::fsconfig_create(fsfd.as_raw_fd()).map_err(|e| err("creating", e))?;
        let fs = sys::fsmount(fsfd.as_raw_fd(), sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV)
            .map_err(|e| err("mounting", e))?;
        Ok(Stage { fs, limit, held, roots: Vec::new() })
    }

    /// The staging area's own view of itself (the supervisor side).
    fn here(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.fs.as_raw_fd()))
    }

    /// Makes the upper and work directories of the overlay at root `r`
    /// (the upper one with the mode of the layer's `upper`, shown as the
    /// overlay's root); returns them as PID 1 sees them.
    fn dirs_for(&self, r: &Path, upper: &Path) -> Result<[CString; 3], String> {
        let rel = r.strip_prefix("/").expect("absolute");
        let at = Path::new(STAGE_MOUNTPOINT.to_str().expect("ASCII"));
        let mut out = Vec::with_capacity(3);
        for d in ["l", "u", "w"] {
            let p = self.here().join(d).join(rel);
            fs::DirBuilder::new().recursive(true).mode(0o700).create(&p).map_err(|e| io_err("creating", &p, e))?;
            out.push(param(&at.join(d).join(rel)));
        }
        let m = fs::metadata(upper).map_err(|e| io_err("reading", upper, e))?;
        let u = self.here().join("u").join(rel);
        fs::set_permissions(&u, fs::Permissions::from_mode(m.mode() & 0o7777))
            .map_err(|e| io_err("setting the mode of", &u, e))?;
        Ok(out.try_into().expect("three"))
    }

    /// Folds the staged writes into the layer's `upper`: each new or
    /// changed entry replaces what it shadows there, a whiteout deletes
    /// (and stays where something below shows through), an opaque
    /// directory replaces a directory wholesale; modes, times, user
    /// attributes and hard links are kept, holes too.
    fn fold(&self, upper: &Path) -> Result<Option<String>, String> {
        let mut links = std::collections::HashMap::new();
        for (r, lowers) in &self.roots {
            let rel = r.strip_prefix("/").expect("absolute");
            let (src, dst) = (self.here().join("u").join(rel), upper.join(rel));
            fold_dir(&src, &dst, lowers, &mut links)?;
            let m = fs::symlink_metadata(&src).map_err(|e| io_err("reading", &src, e))?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(m.mode() & 0o7777))
                .map_err(|e| io_err("setting the mode of", &dst, e))?;
        }
        use std::os::fd::AsRawFd;
        let (blocks, inodes) = sys::fs_free(self.fs.as_raw_fd())
            .map_err(|e| format!("layer: reading the staging tmpfs: {}", std::io::Error::from_raw_os_error(e)))?;
        let what = match (blocks, inodes) {
            (0, _) => "filled its --layer-size",
            (_, 0) => "made as many entries as its --layer-size allows (one per 4 KiB)",
            _ => return Ok(None),
        };
        Ok(Some(format!(
            "layer: the run {what} of {} bytes (the layer held {} before it): its writes past that failed with ENOSPC (\"No space left on device\")",
            self.limit, self.held
        )))
    }
}

fn spec_page() -> u64 {
    crate::proto::spec::MIN_LAYER_SIZE
}

/// What [`fold_dir`] has left to do: a directory to fold, or one whose
/// content is done (its attributes last, so that its times stay).
enum FoldStep {
    Dir { src: PathBuf, dst: PathBuf, lowers: Vec<PathBuf> },
    Done { src: PathBuf, dst: PathBuf, m: fs::Metadata },
}

/// Folds the staged directory `src` into the layer's directory `dst`;
/// `lowers`: what lies below the layer at `dst`. Iterative: the run chose
/// the depth.
fn fold_dir(
    src: &Path,
    dst: &Path,
    lowers: &[PathBuf],
    links: &mut std::collections::HashMap<u64, PathBuf>,
) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let mut todo = vec![FoldStep::Dir { src: src.to_path_buf(), dst: dst.to_path_buf(), lowers: lowers.to_vec() }];
    while let Some(step) = todo.pop() {
        let (src, dst, lowers) = match step {
            FoldStep::Done { src, dst, m } => {
                copy_xattrs(&src, &dst)?;
                fs::set_permissions(&dst, fs::Permissions::from_mode(m.mode() & 0o7777))
                    .map_err(|e| io_err("setting the mode of", &dst, e))?;
                set_times(&dst, &m)?;
                continue;
            }
            FoldStep::Dir { src, dst, lowers } => (src, dst, lowers),
        };
        let mut names: Vec<_> = fs::read_dir(&src)
            .map_err(|e| io_err("reading", &src, e))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| io_err("reading", &src, e))?;
        names.sort();
        for name in names {
            let (s, d) = (src.join(&name), dst.join(&name));
            let m = fs::symlink_metadata(&s).map_err(|e| io_err("reading", &s, e))?;
            let ft = m.file_type();
            let (shows, below) = look_below(&lowers, &name);
            if is_whiteout(&m) {
                remove_any(&d)?;
                if shows {
                    use std::os::fd::AsRawFd;
                    let dir = fs::File::open(&dst).map_err(|e| io_err("opening", &dst, e))?;
                    sys::layer::mknod_whiteout_at(dir.as_raw_fd(), name.as_encoded_bytes())
                        .map_err(|e| io_err("making a whiteout at", &d, std::io::Error::from_raw_os_error(e)))?;
                }
            } else if ft.is_dir() {
                let mark = opaque(&s);
                let had = fs::symlink_metadata(&d).ok();
                let was_dir = had.as_ref().is_some_and(|h| h.is_dir());
                // Opaque where something below would show through: a
                // directory the run replaced, or made where the layer had
                // something else (as a direct run marks them; elsewhere the
                // mark would mean nothing).
                let make_opaque = (mark || (had.is_some() && !was_dir)) && shows;
                if mark || !was_dir {
                    remove_any(&d)?;
                    fs::DirBuilder::new().mode(0o700).create(&d).map_err(|e| io_err("creating", &d, e))?;
                }
                if make_opaque {
                    use std::os::fd::AsRawFd;
                    let dir = fs::File::open(&dst).map_err(|e| io_err("opening", &dst, e))?;
                    sys::layer::set_xattr_at(dir.as_raw_fd(), name.as_encoded_bytes(), OPAQUE, b"y")
                        .map_err(|e| io_err("marking opaque", &d, std::io::Error::from_raw_os_error(e)))?;
                }
                let below = if make_opaque || (was_dir && opaque(&d)) { Vec::new() } else { below };
                todo.push(FoldStep::Done { src: s.clone(), dst: d.clone(), m });
                todo.push(FoldStep::Dir { src: s, dst: d, lowers: below });
            } else if ft.is_file() {
                remove_any(&d)?;
                if let Some(first) = links.get(&m.ino()).filter(|_| m.nlink() > 1) {
                    fs::hard_link(first, &d).map_err(|e| io_err("linking", &d, e))?;
                    continue;
                }
                copy_sparse(&s, &d, &m)?;
                copy_xattrs(&s, &d)?;
                set_times(&d, &m)?;
                if m.nlink() > 1 {
                    links.insert(m.ino(), d);
                }
            } else if ft.is_symlink() {
                remove_any(&d)?;
                let t = fs::read_link(&s).map_err(|e| io_err("reading", &s, e))?;
                std::os::unix::fs::symlink(&t, &d).map_err(|e| io_err("creating", &d, e))?;
            } else if ft.is_fifo() {
                use std::os::fd::AsRawFd;
                remove_any(&d)?;
                let dir = fs::File::open(&dst).map_err(|e| io_err("opening", &dst, e))?;
                sys::layer::mkfifo_at(dir.as_raw_fd(), name.as_encoded_bytes(), m.mode() & 0o7777)
                    .map_err(|e| io_err("creating", &d, std::io::Error::from_raw_os_error(e)))?;
                fs::set_permissions(&d, fs::Permissions::from_mode(m.mode() & 0o7777))
                    .map_err(|e| io_err("setting the mode of", &d, e))?;
            } else {
                // A socket: nothing can use it after the run (and commit
                // refuses it); the path stays as the layer had it.
            }
        }
    }
    Ok(())
}

/// Most entries [`unmappable_note`] looks at below the working directory.
const OWNER_SCAN_MAX: usize = 4096;

/// Whether a run of `spec` uses kernel overlays (not fuse-overlayfs).
pub fn kernel_backend(spec: &RunSpec) -> bool {
    !spec.layers.is_empty() && !spec.root && !spec.layers.iter().any(|d| d.join(FUSE_MARK).exists())
}

/// For a kernel-overlay run that failed, called by the front end on the
/// host, as the caller (`uid`, `gid`: the only ids the run's user
/// namespace maps): names the first entry at or below the working
/// directory `cwd` (breadth first, at most [`OWNER_SCAN_MAX`] entries,
/// this filesystem only) whose owner or group is another, which overlayfs
/// cannot copy up (a write to it fails with EOVERFLOW, "Value too large
/// for defined data type", naming nothing), with why and what works
/// instead. The program sees the errno, capsule does not: the note says
/// what would fail, not that it did.
pub fn unmappable_note(cwd: &Path, uid: u32, gid: u32) -> Option<String> {
    let top = fs::symlink_metadata(cwd).ok().filter(|m| m.is_dir())?;
    if excluded(cwd) {
        return None;
    }
    let mut queue = std::collections::VecDeque::from([cwd.to_path_buf()]);
    let (mut seen, mut found) = (0usize, Vec::new());
    while let Some(d) = queue.pop_front() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > OWNER_SCAN_MAX {
                queue.clear();
                break;
            }
            let Ok(m) = e.metadata() else { continue };
            if m.uid() != uid || m.gid() != gid {
                found.push((e.path(), m.uid(), m.gid()));
            }
            if m.is_dir() && m.dev() == top.dev() {
                queue.push_back(e.path());
            }
        }
    }
    let (path, u, g) = found.first()?;
    let name = |db, id| userdb::name(db, id).map(|n| format!("`{n}` ")).unwrap_or_default();
    let mut whose = Vec::new();
    if *u != uid {
        whose.push(format!("owner {}(uid {u})", name(Db::Passwd, *u)));
    }
    if *g != gid {
        whose.push(format!("group {}(gid {g})", name(Db::Group, *g)));
    }
    let more = match found.len() - 1 {
        0 => String::new(),
        n => format!(" ({n} more entr{} below {:?} too)", if n == 1 { "y" } else { "ies" }, cwd.display().to_string()),
    };
    Some(format!(
        "layer: {:?} has {}, which the run cannot map (its user namespace maps only your uid and gid){more}: \
         a kernel overlay cannot copy it up, so writing or changing it in the layer fails with EOVERFLOW \
         (\"Value too large for defined data type\"). What works: `--root` (fuse-overlayfs copies up as you), \
         `chown`/`chgrp` it to you on the host, or work in a directory whose entries are all yours",
        path.display().to_string(),
        whose.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outermost_keeps_outer_roots() {
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            outermost(v(&["/home/u/a", "/home/u", "/var/tmp", "/home/u2", "/home/u"])),
            v(&["/home/u", "/home/u2", "/var/tmp"])
        );
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(crate::host::mountinfo::unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(crate::host::mountinfo::unescape_mount(r"/x\\y"), r"/x\\y");
    }

    #[test]
    fn option_characters_refused() {
        assert!(check_chars(Path::new("/a:b")).is_err());
        assert!(check_chars(Path::new("/a,b")).is_err());
        assert!(check_chars(Path::new("/a b")).is_ok());
    }

    /// A scratch directory for the tests below, removed on drop.
    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
    fn tmp(tag: &str) -> Tmp {
        // Not under /tmp, which is never a root.
        let p = Path::new("/var/tmp").join(format!("capsule-overlay-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir(&p).unwrap();
        Tmp(fs::canonicalize(&p).unwrap())
    }

    #[test]
    fn roots_go_around_stacked_layers_and_drop_layer_dirs() {
        let t = tmp("split");
        for d in ["a", "b/layers/A", "b/layers/B", "b/c", "e"] {
            fs::create_dir_all(t.0.join(d)).unwrap();
        }
        fs::write(t.0.join("b/file"), "").unwrap();
        let (below, all) = (vec![t.0.join("b/layers/A")], vec![t.0.join("b/layers/A"), t.0.join("b/layers/B")]);
        let mut out = Vec::new();
        split_roots(&t.0, &[], &below, &all, &mut out).unwrap();
        assert_eq!(out, vec![t.0.join("a"), t.0.join("b/c"), t.0.join("e")]);
        // Without a layer stacked below, the root stays whole.
        let mut out = Vec::new();
        split_roots(&t.0, &[], &[], &all, &mut out).unwrap();
        assert_eq!(out, vec![t.0.clone()]);
    }

    #[test]
    fn mirrored_directories_get_the_host_modes() {
        let t = tmp("mirror");
        let host = t.0.join("h/x");
        fs::create_dir_all(&host).unwrap();
        fs::set_permissions(t.0.join("h"), fs::Permissions::from_mode(0o1777)).unwrap();
        fs::set_permissions(&host, fs::Permissions::from_mode(0o711)).unwrap();
        let upper = t.0.join("upper");
        fs::create_dir(&upper).unwrap();
        mirror_dirs(&upper, &host).unwrap();
        let mode = |p: &Path| fs::metadata(join_abs(&upper, p)).unwrap().mode() & 0o7777;
        assert_eq!(mode(&t.0.join("h")), 0o1777);
        assert_eq!(mode(&host), 0o711);
        // An existing directory keeps its mode (the layer changed it).
        fs::set_permissions(join_abs(&upper, &host), fs::Permissions::from_mode(0o700)).unwrap();
        mirror_dirs(&upper, &host).unwrap();
        assert_eq!(mode(&host), 0o700);
        // A whiteout (here a file) on the way stops it, named.
        let gone = t.0.join("h/gone");
        fs::create_dir(&gone).unwrap();
        fs::write(join_abs(&upper, &gone), "").unwrap();
        let e = mirror_dirs(&upper, &gone.join("sub")).unwrap_err();
        assert!(e.contains("creating") && e.contains("gone"), "{e}");
    }

    #[test]
    fn fold_replaces_what_it_shadows() {
        use std::os::fd::AsRawFd;
        let t = tmp("fold");
        let (src, dst, host) = (t.0.join("src"), t.0.join("dst"), t.0.join("host"));
        for d in [&src, &dst, &host] {
            fs::create_dir(d).unwrap();
        }
        let whiteout = |dir: &Path, name: &str| {
            let f = fs::File::open(dir).unwrap();
            sys::layer::mknod_whiteout_at(f.as_raw_fd(), name.as_bytes()).unwrap();
        };
        let mark = |dir: &Path, name: &str| {
            let f = fs::File::open(dir).unwrap();
            sys::layer::set_xattr_at(f.as_raw_fd(), name.as_bytes(), OPAQUE, b"y").unwrap();
        };
        // The host: h (a file), hd/x; the layer: l (its own), gone (a
        // whiteout of a host file), hd2 (a whiteout of a host directory).
        fs::write(host.join("h"), "h").unwrap();
        fs::write(host.join("gone"), "g").unwrap();
        for d in ["hd", "hd2"] {
            fs::create_dir(host.join(d)).unwrap();
            fs::write(host.join(d).join("x"), "x").unwrap();
        }
        fs::write(dst.join("l"), "l").unwrap();
        whiteout(&dst, "gone");
        whiteout(&dst, "hd2");
        // The run: deleted h and l, replaced hd, made hd2 a directory
        // again, wrote a sparse file.
        whiteout(&src, "h");
        whiteout(&src, "l");
        fs::create_dir(src.join("hd")).unwrap();
        mark(&src, "hd");
        fs::write(src.join("hd").join("new"), "n").unwrap();
        fs::create_dir(src.join("hd2")).unwrap();
        let f = fs::File::create(src.join("sparse")).unwrap();
        f.set_len(64 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"e", (64 << 20) - 1).unwrap();
        fold_dir(&src, &dst, std::slice::from_ref(&host), &mut Default::default()).unwrap();
        let md = |n: &str| fs::symlink_metadata(dst.join(n));
        assert!(is_whiteout(&md("h").unwrap()), "a host file deleted: a whiteout");
        assert!(md("l").is_err(), "a layer-only file deleted: gone, no whiteout");
        assert!(opaque(&dst.join("hd")) && md("hd/new").is_ok(), "a replaced host directory: opaque");
        assert!(md("hd2").unwrap().is_dir() && opaque(&dst.join("hd2")), "a directory over a whiteout: opaque");
        let sp = md("sparse").unwrap();
        assert_eq!(sp.len(), 64 << 20);
        assert!(sp.blocks() * 512 < 1 << 20, "holes kept: {} blocks", sp.blocks());
        assert_eq!(fs::read(dst.join("sparse")).unwrap().last(), Some(&b'e'));
    }

    #[test]
    fn excluded_paths() {
        assert!(excluded(Path::new("/")));
        assert!(excluded(Path::new("/proc/1")));
        assert!(excluded(Path::new("/tmp")));
        assert!(!excluded(Path::new("/tmpx")));
        assert!(!excluded(Path::new("/var/tmp")));
    }
}
