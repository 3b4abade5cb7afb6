//! Copy-on-write layers over the host view (`--layer DIR`, MBOX's sandbox
//! filesystem): planned here by the supervisor, mounted by PID 1 through
//! the new mount API (`crate::mounts`), so the host's mount table never
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

use std::ffi::{CStr, CString};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::layer::{Layer, LayerError, LayerLock};
use crate::spec::RunSpec;
use crate::sys;

/// Most layers one run may stack.
pub const MAX_LAYERS: usize = 8;
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
/// directory above `c` whose chain down to `c` the caller owns (`c`
/// itself when it is not the caller's).
fn root_for(c: &Path, me: u32) -> Option<PathBuf> {
    let c = fs::canonicalize(c).ok()?;
    let md = fs::metadata(&c).ok()?;
    if !md.is_dir() || excluded(&c) {
        return None;
    }
    let mut r = c.clone();
    if md.uid() == me {
        while let Some(p) = r.parent() {
            if p == Path::new("/") || excluded(p) {
                break;
            }
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() && m.uid() == me => r = p.to_path_buf(),
                _ => break,
            }
        }
    }
    Some(r)
}

/// Mount points of the supervisor's namespace (the host's).
fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines().filter_map(|l| l.split(' ').nth(4)).map(|p| PathBuf::from(crate::check::unescape_mount(p))).collect()
}

/// Splits a root that contains mount points, or the directory of a layer
/// stacked below (`below`: overlayfs refuses a lower layer inside another,
/// ELOOP), into roots that do not: its subdirectories, recursively (the
/// files directly in it stay read-only). A root at or inside one of the
/// run's layer directories (`layers`, hidden in the sandbox) is dropped.
fn split_roots(root: &Path, mps: &[PathBuf], below: &[PathBuf], layers: &[PathBuf], out: &mut Vec<PathBuf>) -> Result<(), String> {
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
    let rd = fs::read_dir(root).map_err(|e| io_err("reading", root, e))?;
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
                fs::set_permissions(&u, fs::Permissions::from_mode(m.mode() & 0o7777)).map_err(|e| io_err("setting the mode of", &u, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && fs::symlink_metadata(&u).is_ok_and(|m| m.is_dir()) => {}
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
/// Most entries looked at for stand-ins (a few thousand on a Debian system,
/// about 30 ms).
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
    let backend = if fuse {
        let bin = find_fuse_overlayfs()?;
        let work = top.join("work").join("fuse");
        fs::DirBuilder::new().recursive(true).mode(0o755).create(&work).map_err(|e| io_err("creating", &work, e))?;
        fs::write(top.join(FUSE_MARK), "this layer is served by fuse-overlayfs (a --root run used it)\n")
            .map_err(|e| io_err("writing", &top.join(FUSE_MARK), e))?;
        let mut lower: Vec<String> = dirs[..n - 1].iter().rev().map(|d| d.join("upper").display().to_string()).collect();
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
        Backend::Kernel(kernel_overlays(spec, &dirs, me)?)
    };
    Ok(Some(LayerPlan { dirs, locks, backend }))
}

fn kernel_overlays(spec: &RunSpec, dirs: &[PathBuf], me: u32) -> Result<Vec<Overlay>, String> {
    let top = dirs.last().expect("at least one layer");
    let mut wanted: Vec<PathBuf> = Vec::new();
    if let Some(cwd) = &spec.cwd {
        if let Some(r) = root_for(cwd, me) {
            wanted.push(r);
        }
    }
    if let Ok(home) = std::env::var("HOME") {
        if home.starts_with('/') {
            if let Some(r) = root_for(Path::new(&home), me) {
                wanted.push(r);
            }
        }
    }
    if let Some(r) = root_for(Path::new("/var/tmp"), me) {
        wanted.push(r);
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
    let mps = mount_points();
    // The layers stacked below are lower layers of every overlay: none
    // may lie inside a root (the writable layer's upper may).
    let below = &dirs[..dirs.len() - 1];
    let mut roots = Vec::new();
    for r in outermost(wanted.clone()) {
        split_roots(&r, &mps, below, dirs, &mut roots)?;
    }
    // A directory removed since it was listed is no root.
    let roots: Vec<PathBuf> = outermost(roots).into_iter().filter(|r| fs::symlink_metadata(r).is_ok_and(|m| m.is_dir())).collect();
    write_roots(top, &roots)?;
    let mut out = Vec::with_capacity(roots.len());
    for r in roots {
        check_chars(&r)?;
        let upper = join_abs(&top.join("upper"), &r);
        let work = join_abs(&top.join("work"), &r);
        fs::DirBuilder::new().recursive(true).mode(0o755).create(&work).map_err(|e| io_err("creating", &work, e))?;
        // The overlay's root shows the upper directory's attributes, and
        // the directories above it are compared with the host's: each
        // gets the host directory's mode (its owner is the caller).
        mirror_dirs(&top.join("upper"), &r)?;
        let mut lower: Vec<String> = Vec::new();
        for d in dirs[..dirs.len() - 1].iter().rev() {
            let l = join_abs(&d.join("upper"), &r);
            if l.is_dir() {
                lower.push(l.display().to_string());
            }
        }
        lower.push(r.display().to_string());
        out.push(Overlay { lower: cstring(lower.join(":")), upper: param(&upper), work: param(&work), dst: r });
    }
    // A place the program is expected to write that lies inside another
    // root: the directories from that root down to it may not be the
    // caller's (a root-owned, world-writable /var/tmp/shared), and
    // overlayfs cannot copy those up (EOVERFLOW): they are made in the
    // upper tree beforehand (owned by the caller, as every entry there).
    for w in &wanted {
        if out.iter().any(|o| w.starts_with(&o.dst) && w != &o.dst) {
            let _ = mirror_dirs(&top.join("upper"), w);
        }
    }
    Ok(out)
}

/// After a run, its PID 1 gone: records, for each path the run changed,
/// the host original it was based on (for commit's conflict check).
pub(crate) fn after_run(plan: &LayerPlan) -> Result<(), String> {
    let (layer, lock) = plan.locks.last().expect("at least one layer");
    layer.record_originals(lock).map(drop).map_err(|e| format!("recording the layer's originals: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outermost_keeps_outer_roots() {
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(outermost(v(&["/home/u/a", "/home/u", "/var/tmp", "/home/u2", "/home/u"])), v(&["/home/u", "/home/u2", "/var/tmp"]));
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(crate::check::unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(crate::check::unescape_mount(r"/x\\y"), r"/x\\y");
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
    fn excluded_paths() {
        assert!(excluded(Path::new("/")));
        assert!(excluded(Path::new("/proc/1")));
        assert!(excluded(Path::new("/tmp")));
        assert!(!excluded(Path::new("/tmpx")));
        assert!(!excluded(Path::new("/var/tmp")));
    }
}
