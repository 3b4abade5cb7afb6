//! Applying a layer's changes to the host.
//!
//! * Every entry is placed atomically: built beside its destination in the
//!   same host directory (a file as an `O_TMPFILE` given a
//!   `.capsule-commit-*` name once written and fsynced, a directory tree
//!   under such a name), then renamed over the destination (`renameat2`,
//!   `RENAME_NOREPLACE` where the host had nothing, `RENAME_EXCHANGE`
//!   where a directory and a non-directory trade places). The destination
//!   path never holds a half-written file.
//! * The host directory of an entry is opened from `/` with `openat2`
//!   `RESOLVE_NO_SYMLINKS`: an entry below a host symbolic link is refused.
//!   The upper side is read with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
//!   from the upper root and `O_NOFOLLOW`.
//! * Conflicts (docs/layers.md): an entry whose host path no longer matches the
//!   original recorded in layer.json is refused, named, and the rest goes
//!   on; `force` overrides. An entry with no record is a conflict too.
//! * Committed entries leave the layer: once applied they equal the host,
//!   and the pruning pass removes from the upper tree whatever at or below
//!   the selected paths no longer differs from the host, and the records
//!   with it (inside an opaque directory nothing is removed piecemeal: the
//!   opaque directory goes as a whole once nothing in it differs).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::meta::{decode_bytes, Meta, OrigKind, Record};
use super::node::{self, octal, Node};
use super::scan::{self, is_fuse_marker, open_host_parent, Item, Upper, OPAQUE_MARKER, WH_PREFIX};
use super::{
    host_path, is_at_or_below, join, quote, quote_path, sys_err, valid_name, Change, ChangeKind, Layer, LayerError,
    Selector,
};
use crate::error::errno_text;
use crate::sys::layer as sl;

/// One entry that was not committed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub path: PathBuf,
    pub kind: Option<ChangeKind>,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Some(k) => write!(f, "{}  {}: {}", k.letter(), quote_path(&self.path), self.reason),
            None => write!(f, "{}: {}", quote_path(&self.path), self.reason),
        }
    }
}

/// What a commit did.
#[derive(Debug, Clone, Default)]
pub struct CommitReport {
    /// Applied to the host (and gone from the layer).
    pub committed: Vec<Change>,
    /// Refused because the host changed since the layer recorded it (or
    /// nothing was recorded); still in the layer.
    pub conflicts: Vec<Refusal>,
    /// Refused or failed for another reason (a host directory that is a
    /// link, an entry capsule did not make, an I/O error); still in the layer.
    pub errors: Vec<Refusal>,
    /// Paths asked for that hold no change.
    pub nothing_at: Vec<PathBuf>,
    /// Committed without their setuid/setgid bits (no `keep_special_bits`);
    /// the bits stay in the layer as a mode change, recorded against the
    /// host's new state.
    pub special_bits_dropped: Vec<PathBuf>,
}

impl CommitReport {
    /// Everything asked for was committed.
    pub fn complete(&self) -> bool {
        self.conflicts.is_empty() && self.errors.is_empty() && self.nothing_at.is_empty()
    }
}

static TMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh name beside the destination.
fn temp_name() -> Vec<u8> {
    format!(".capsule-commit-{}-{}", std::process::id(), TMP_COUNTER.fetch_add(1, Ordering::Relaxed)).into_bytes()
}

/// The setuid and setgid bits, dropped from what a commit writes unless
/// asked to keep them.
const SUID_SGID: u32 = 0o6000;

/// `exact`: each path names one entry (not what is below it).
/// `keep_special_bits`: commit setuid/setgid bits too.
pub fn commit(
    layer: &Layer,
    paths: &[PathBuf],
    force: bool,
    exact: bool,
    keep_special_bits: bool,
) -> Result<CommitReport, LayerError> {
    let mask = if keep_special_bits { 0o7777 } else { 0o7777 & !SUID_SGID };
    let sel = Selector::new(paths)?;
    let wanted: Vec<Vec<u8>> =
        paths.iter().filter_map(|p| super::normalize(p)).map(|n| n.as_os_str().as_bytes()[1..].to_vec()).collect();
    let mut meta = layer.load_meta()?;
    let mut report = CommitReport::default();
    for k in std::mem::take(&mut meta.bad_keys) {
        report.errors.push(Refusal {
            path: k.into(),
            kind: None,
            reason: "layer.json records this path, which is not a normalized absolute path; the record is ignored and dropped".into(),
        });
    }
    let guard = layer.load_guard()?;
    let items = scan::scan(layer, &sel)?;
    for p in paths {
        let n = super::normalize(p).unwrap_or_else(|| p.clone());
        let rel = &n.as_os_str().as_bytes()[1..];
        if !items.iter().any(|i| i.status.is_some() && (if exact { i.rel == rel } else { is_at_or_below(&i.rel, rel) }))
        {
            report.nothing_at.push(n);
        }
    }
    // Directory permission changes last and deepest first: one that drops
    // write permission must not stop what goes inside.
    let dir_mode_only = |i: &Item| matches!((&i.upper, &i.host), (Upper::Entry(Node::Dir { .. }), Node::Dir { .. }));
    let asked = |i: &&Item| i.status.is_some() && (!exact || wanted.contains(&i.rel));
    let mut order: Vec<&Item> = items.iter().filter(asked).filter(|i| !dir_mode_only(i)).collect();
    order.extend(items.iter().rev().filter(asked).filter(|i| dir_mode_only(i)));
    for item in order {
        let change = item.change().expect("a change");
        let path = change.path.clone();
        let refuse = |reason: String| Refusal { path: path.clone(), kind: Some(change.kind), reason };
        if let Some(p) = &item.problem {
            report.errors.push(refuse(p.clone()));
            continue;
        }
        if let Some(why) = guard.refusal(item) {
            report.errors.push(refuse(why));
            continue;
        }
        if !item.rel.split(|&b| b == b'/').all(valid_name) {
            report.errors.push(refuse("its name has an empty, `.` or `..` component".into()));
            continue;
        }
        let (parent, name) = match open_host_parent(&item.rel) {
            Ok(x) => x,
            Err((_, why)) => {
                report.errors.push(refuse(why));
                continue;
            }
        };
        let now = match node::node_at(parent.as_raw_fd(), name, false) {
            Ok(n) => n,
            Err(e) => {
                report.errors.push(refuse(format!("lstat failed: {}", errno_text(e))));
                continue;
            }
        };
        if !force {
            match conflict(meta.originals.get(&path), &now, item, parent.as_raw_fd(), name) {
                Ok(None) => {}
                Ok(Some(why)) => {
                    report.conflicts.push(refuse(why));
                    continue;
                }
                Err(why) => {
                    report.errors.push(refuse(why));
                    continue;
                }
            }
        }
        let mut dropped = Vec::new();
        match apply(layer, item, &parent, name, &now, mask, &mut dropped) {
            Ok(()) => {
                meta.originals.remove(&path);
                report.committed.push(change);
                // What stays in the layer (the bits) is based on the host as now.
                for rel in dropped {
                    if let Some(rec) = host_record(&rel) {
                        meta.originals.insert(host_path(&rel), rec);
                    }
                    report.special_bits_dropped.push(host_path(&rel));
                }
            }
            Err(why) => report.errors.push(refuse(why)),
        }
    }
    prune(layer, &sel, &mut meta)?;
    layer.save_meta(&meta)?;
    Ok(report)
}

fn parse_mode(s: &Option<String>) -> Option<u32> {
    s.as_deref().and_then(|m| u32::from_str_radix(m, 8).ok())
}

/// Why the host entry `now` no longer matches its record, if it does not.
fn conflict(
    rec: Option<&Record>,
    now: &Node,
    item: &Item,
    parent: RawFd,
    name: &[u8],
) -> Result<Option<String>, String> {
    let Some(rec) = rec else {
        return Ok(Some(
            "no record of the original; the run that made it did not finish (--force commits it anyway)".into(),
        ));
    };
    let changed =
        |what: String| Ok(Some(format!("changed on the host since the layer recorded it: {what} (--force overrides)")));
    let mode_differs = |m: u32| parse_mode(&rec.mode).is_some_and(|r| r != m);
    match (rec.kind, now) {
        (OrigKind::Absent, Node::Absent) => Ok(None),
        (OrigKind::Absent, n) => changed(format!("a {} was created there", n.kind_name())),
        (_, Node::Absent) => changed("it was deleted".into()),
        (OrigKind::File, Node::File { size, mode, mtime_ns, .. }) => {
            if rec.size.is_some_and(|s| s != *size) {
                return changed(format!("size {} -> {size} bytes", rec.size.unwrap_or(0)));
            }
            if rec.mtime_ns.is_some_and(|t| t != *mtime_ns) {
                return changed("it was modified (mtime)".into());
            }
            if mode_differs(*mode) {
                return changed(format!("mode {} -> {}", rec.mode.as_deref().unwrap_or("?"), octal(*mode)));
            }
            if let Some(want) = &rec.sha256 {
                let have = if *size == 0 {
                    node::EMPTY_SHA256.to_string()
                } else {
                    let mut f = node::open_file(parent, name)
                        .map_err(|e| format!("cannot read the host file: {}", errno_text(e)))?;
                    node::sha256(&mut f).map_err(|e| format!("cannot read the host file: {}", errno_text(e)))?
                };
                if &have != want {
                    return changed("its content differs (sha256)".into());
                }
            }
            Ok(None)
        }
        (OrigKind::Dir, Node::Dir { mode, mtime_ns }) => {
            if mode_differs(*mode) {
                return changed(format!("mode {} -> {}", rec.mode.as_deref().unwrap_or("?"), octal(*mode)));
            }
            if item.status == Some(ChangeKind::Deleted) && rec.mtime_ns.is_some_and(|t| t != *mtime_ns) {
                return changed("entries were added or removed in it".into());
            }
            Ok(None)
        }
        (OrigKind::Symlink, Node::Symlink { target, .. }) => {
            let want = rec.target.as_deref().and_then(decode_bytes);
            if want.as_deref() != Some(target.as_slice()) {
                return changed(format!("the link now points to {}", quote(target)));
            }
            Ok(None)
        }
        (OrigKind::Other, n @ (Node::Fifo { .. } | Node::Special { .. })) => {
            if n.mode().is_some_and(mode_differs) {
                return changed("its mode changed".into());
            }
            Ok(None)
        }
        (k, n) => changed(format!("it was a {}, it is now a {}", orig_name(k), n.kind_name())),
    }
}

fn orig_name(k: OrigKind) -> &'static str {
    match k {
        OrigKind::Absent => "nothing",
        OrigKind::File => "file",
        OrigKind::Dir => "directory",
        OrigKind::Symlink => "symlink",
        OrigKind::Other => "special file",
    }
}

/// The host's entry at `rel` as a record (no SHA-256: size, mtime and
/// mode tell a later change).
fn host_record(rel: &[u8]) -> Option<Record> {
    let (parent, name) = open_host_parent(rel).ok()?;
    let n = node::node_at(parent.as_raw_fd(), name, false).ok()?;
    let mut rec = Record::absent();
    rec.kind = match n {
        Node::Absent | Node::Whiteout => return None,
        Node::File { size, .. } => {
            rec.size = Some(size);
            OrigKind::File
        }
        Node::Dir { .. } => OrigKind::Dir,
        Node::Symlink { .. } => OrigKind::Symlink,
        _ => OrigKind::Other,
    };
    rec.mtime_ns = n.mtime();
    rec.mode = n.mode().map(octal);
    Some(rec)
}

/// `mode` as committed: `mask` drops setuid/setgid unless kept; `rel`
/// goes to `dropped` when it did.
fn masked(mode: u32, mask: u32, rel: &[u8], dropped: &mut Vec<Vec<u8>>) -> u32 {
    if mode & !mask & 0o7777 != 0 {
        dropped.push(rel.to_vec());
    }
    mode & mask
}

/// Applies one entry; `now` is the host entry as just seen.
fn apply(
    layer: &Layer,
    item: &Item,
    parent: &OwnedFd,
    name: &[u8],
    now: &Node,
    mask: u32,
    dropped: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    let pfd = parent.as_raw_fd();
    match (&item.upper, &item.host) {
        (Upper::Whiteout | Upper::Hidden, _) => delete_host(pfd, name, now),
        (Upper::Entry(Node::Dir { mode, .. }), Node::Dir { .. }) => {
            // Permissions only; what is inside is entries of its own.
            if !matches!(now, Node::Dir { .. }) {
                return Err(format!("the host directory is now a {}; nothing to change the mode of", now.kind_name()));
            }
            let fd = node::open_dir(pfd, name).map_err(|e| format!("open failed: {}", errno_text(e)))?;
            let mut d = Vec::new();
            // A directory keeps the bits the host's had (a group-shared setgid one).
            let mode = masked(*mode, mask | (now.mode().unwrap_or(0) & SUID_SGID), &item.rel, &mut d);
            sl::chmod_fd(fd.as_raw_fd(), mode).map_err(|e| format!("chmod failed: {}", errno_text(e)))?;
            dropped.extend(d);
            Ok(())
        }
        (Upper::Entry(unode), _) => {
            let mut d = Vec::new();
            install(layer, &item.rel, unode, pfd, name, now, mask, &mut d)?;
            dropped.extend(d);
            Ok(())
        }
    }
}

fn delete_host(pfd: RawFd, name: &[u8], now: &Node) -> Result<(), String> {
    match now {
        Node::Absent => Ok(()),
        Node::Dir { .. } => {
            // Gone from its path at once, then emptied.
            let tmp = temp_name();
            sl::rename_at(pfd, name, pfd, &tmp, sl::RENAME_NOREPLACE)
                .map_err(|e| format!("renameat2 failed: {}", errno_text(e)))?;
            node::remove_tree_at(pfd, &tmp, false).map_err(|e| {
                format!(
                    "deleted, but not all of its content could be removed ({}); what is left is in {}",
                    errno_text(e),
                    String::from_utf8_lossy(&tmp)
                )
            })
        }
        _ => sl::unlink_at(pfd, name, false).map_err(|e| format!("unlinkat failed: {}", errno_text(e))),
    }
}

/// Opens `rel` in the upper tree, beneath its root, through no link.
pub(super) fn open_upper(layer: &Layer, rel: &[u8], flags: i32) -> Result<OwnedFd, String> {
    sl::openat2(
        layer.upper.as_raw_fd(),
        rel,
        flags | libc::O_NOFOLLOW,
        0,
        sl::RESOLVE_BENEATH | sl::RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| format!("cannot open {} in the layer: {}", quote_path(&scan::upper_path(layer, rel)), errno_text(e)))
}

/// Builds the layer's entry at a temporary name beside `name`, then puts
/// it in place.
#[allow(clippy::too_many_arguments)]
fn install(
    layer: &Layer,
    rel: &[u8],
    unode: &Node,
    pfd: RawFd,
    name: &[u8],
    now: &Node,
    mask: u32,
    dropped: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    let tmp = temp_name();
    let built = match unode {
        Node::File { mode, mtime_ns, .. } => {
            let src = open_upper(layer, rel, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY)?;
            build_file(src, pfd, &tmp, masked(*mode, mask, rel, dropped), *mtime_ns, true)
        }
        Node::Symlink { target, .. } => {
            sl::symlink_at(target, pfd, &tmp).map_err(|e| format!("symlinkat failed: {}", errno_text(e)))
        }
        Node::Fifo { mode, .. } => build_fifo(pfd, &tmp, masked(*mode, mask, rel, dropped)),
        Node::Dir { mode, .. } => {
            let src = open_upper(layer, rel, libc::O_PATH | libc::O_DIRECTORY)?;
            let kept = if let Node::Dir { mode: m, .. } = now { m & SUID_SGID } else { 0 };
            build_dir(layer, src.as_raw_fd(), rel, pfd, &tmp, (*mode, mask | kept), mask, dropped)
        }
        other => Err(format!("a {} cannot be committed", other.kind_name())),
    };
    if let Err(e) = built {
        let _ = node::remove_tree_at(pfd, &tmp, true);
        return Err(e);
    }
    let new_is_dir = matches!(unode, Node::Dir { .. });
    let placed = match now {
        Node::Absent => sl::rename_at(pfd, &tmp, pfd, name, sl::RENAME_NOREPLACE)
            .map_err(|e| {
                if e == libc::EEXIST {
                    "something was created there on the host meanwhile; run the commit again".to_string()
                } else {
                    format!("renameat2 failed: {}", errno_text(e))
                }
            })
            .map(|()| true),
        Node::Dir { .. } => exchange(pfd, &tmp, name, "directory"),
        _ if new_is_dir => exchange(pfd, &tmp, name, now.kind_name()),
        _ => sl::rename_at(pfd, &tmp, pfd, name, 0)
            .map(|()| true)
            .map_err(|e| format!("renameat2 failed: {}", errno_text(e))),
    };
    match placed {
        Ok(true) => Ok(()),
        Ok(false) => {
            Err(format!("committed, but the old entry it replaced is left at {}", String::from_utf8_lossy(&tmp)))
        }
        Err(e) => {
            let _ = node::remove_tree_at(pfd, &tmp, true);
            Err(e)
        }
    }
}

/// Swaps the new entry at `tmp` with the old one at `name`, then removes
/// the old one (now at `tmp`). Ok(false): placed, but the old one stayed.
fn exchange(pfd: RawFd, tmp: &[u8], name: &[u8], old: &str) -> Result<bool, String> {
    sl::rename_at(pfd, tmp, pfd, name, sl::RENAME_EXCHANGE)
        .map_err(|e| format!("renameat2(RENAME_EXCHANGE) with the host {old} failed: {}", errno_text(e)))?;
    Ok(node::remove_tree_at(pfd, tmp, false).is_ok())
}

fn build_fifo(dir: RawFd, name: &[u8], mode: u32) -> Result<(), String> {
    sl::mkfifo_at(dir, name, 0o600).map_err(|e| format!("mknodat(S_IFIFO) failed: {}", errno_text(e)))?;
    let fd = sl::openat_name(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
        .map_err(|e| format!("open failed: {}", errno_text(e)))?;
    sl::chmod_fd(fd.as_raw_fd(), mode).map_err(|e| format!("chmod failed: {}", errno_text(e)))
}

/// Writes a copy of `src` named `name` in `dir`: content, permissions and
/// modification time, fsynced. `tmpfile`: written as an unnamed
/// `O_TMPFILE` and named only once complete (falls back to a named file
/// where the filesystem has no `O_TMPFILE`).
fn build_file(src: OwnedFd, dir: RawFd, name: &[u8], mode: u32, mtime_ns: i64, tmpfile: bool) -> Result<(), String> {
    let st = crate::sys::fstat(src.as_raw_fd()).map_err(|e| format!("fstat failed: {}", errno_text(e)))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("the layer's entry is no longer a regular file".into());
    }
    crate::sys::set_nonblocking(src.as_raw_fd(), false).map_err(|e| format!("fcntl failed: {}", errno_text(e)))?;
    let src = std::fs::File::from(src);
    let anon = if tmpfile {
        match crate::sys::openat(dir, c".", libc::O_TMPFILE | libc::O_WRONLY, 0o600) {
            Ok(fd) => Some(fd),
            Err(libc::EOPNOTSUPP) | Err(libc::EISDIR) | Err(libc::EINVAL) => None,
            Err(e) => return Err(format!("open(O_TMPFILE) failed: {}", errno_text(e))),
        }
    } else {
        None
    };
    let named = anon.is_none();
    let fd = match anon {
        Some(fd) => fd,
        None => sl::openat_name(dir, name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600)
            .map_err(|e| format!("open(O_CREAT) failed: {}", errno_text(e)))?,
    };
    let dst = std::fs::File::from(fd);
    let io = |what: &str, e: std::io::Error| format!("{what} failed: {e}");
    // Holes stay holes: a 1 TiB sparse file takes no more room committed.
    node::copy_sparse(&src, &dst).map_err(|e| format!("copying the content failed: {}", errno_text(e)))?;
    use std::os::unix::fs::PermissionsExt;
    dst.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| io("fchmod", e))?;
    let mtime = if mtime_ns >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(mtime_ns as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_nanos(mtime_ns.unsigned_abs())
    };
    dst.set_times(std::fs::FileTimes::new().set_modified(mtime)).map_err(|e| io("futimens", e))?;
    dst.sync_all().map_err(|e| io("fsync", e))?;
    if !named {
        sl::link_tmpfile_at(dst.as_raw_fd(), dir, name).map_err(|e| format!("linkat failed: {}", errno_text(e)))?;
    }
    Ok(())
}

/// Copies the upper directory `src` (for `rel`) as `name` in `dir`, whole:
/// its own mode under its own mask, everything in it under `mask`.
#[allow(clippy::too_many_arguments)]
fn build_dir(
    layer: &Layer,
    src: RawFd,
    rel: &[u8],
    dir: RawFd,
    name: &[u8],
    (mode, own_mask): (u32, u32),
    mask: u32,
    dropped: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    sl::mkdir_at(dir, name, 0o700).map_err(|e| format!("mkdirat failed: {}", errno_text(e)))?;
    let dst = node::open_dir(dir, name).map_err(|e| format!("open failed: {}", errno_text(e)))?;
    let shown = |r: &[u8]| quote_path(&scan::upper_path(layer, r));
    let names = sl::list_dir(src).map_err(|e| format!("cannot list {}: {}", shown(rel), errno_text(e)))?;
    for child in names {
        if is_fuse_marker(layer, &child) {
            continue;
        }
        let crel = join(rel, &child);
        let n = node::node_at(src, &child, true)
            .map_err(|e| format!("cannot lstat {}: {}", shown(&crel), errno_text(e)))?;
        let d = dst.as_raw_fd();
        if let Some(x) = sl::list_xattrs_at(src, &child)
            .map_err(|e| format!("cannot read the attributes of {}: {}", shown(&crel), errno_text(e)))?
            .iter()
            .find(|x| x.ends_with(b"overlay.redirect") || x.ends_with(b"overlay.metacopy"))
        {
            return Err(format!("{} has the {} attribute: the layer was not made by capsule", shown(&crel), quote(x)));
        }
        match n {
            Node::Whiteout | Node::Absent => {}
            Node::File { mode, mtime_ns, .. } => {
                let f = sl::openat_name(
                    src,
                    &child,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                    0,
                )
                .map_err(|e| format!("cannot open {}: {}", shown(&crel), errno_text(e)))?;
                build_file(f, d, &child, masked(mode, mask, &crel, dropped), mtime_ns, false)
                    .map_err(|e| format!("{}: {e}", shown(&crel)))?;
            }
            Node::Symlink { target, .. } => sl::symlink_at(&target, d, &child)
                .map_err(|e| format!("{}: symlinkat failed: {}", shown(&crel), errno_text(e)))?,
            Node::Fifo { mode, .. } => build_fifo(d, &child, masked(mode, mask, &crel, dropped))
                .map_err(|e| format!("{}: {e}", shown(&crel)))?,
            Node::Dir { mode, .. } => {
                let sub = node::open_dir(src, &child)
                    .map_err(|e| format!("cannot open {}: {}", shown(&crel), errno_text(e)))?;
                build_dir(layer, sub.as_raw_fd(), &crel, d, &child, (mode, mask), mask, dropped)?;
            }
            Node::Special { what, .. } => {
                return Err(format!(
                    "{} is a {what}; capsule commits files, directories, symlinks and FIFOs only",
                    shown(&crel)
                ))
            }
        }
    }
    sl::chmod_fd(dst.as_raw_fd(), masked(mode, own_mask, rel, dropped))
        .map_err(|e| format!("chmod failed: {}", errno_text(e)))
}

/// Removes from the upper tree what at or below the selection no longer
/// differs from the host (committed entries, unchanged copy-ups,
/// whiteouts of nothing), then the directories on the way to the
/// selection that were left empty; drops their records.
fn prune(layer: &Layer, sel: &Selector, meta: &mut Meta) -> Result<(), LayerError> {
    let items = scan::scan(layer, sel)?;
    let changed: Vec<Vec<u8>> = items.into_iter().filter(|i| i.status.is_some()).map(|i| i.rel).collect();
    let root = sl::openat_name(layer.upper.as_raw_fd(), b".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| sys_err("open", layer.dir.join("upper"), e))?;
    let mut p = Pruner { layer, sel, changed, meta };
    p.dir(root.as_raw_fd(), b"", false)
}

/// The upper directory `fd` is neither opaque nor of other permissions
/// than the host directory at `rel`.
fn same_as_host_dir(layer: &Layer, fd: RawFd, rel: &[u8]) -> bool {
    let Ok(Node::Dir { mode, .. }) = node::node_at(fd, b"", true) else { return false };
    let Ok(names) = sl::list_dir(fd) else { return false };
    if scan::is_opaque(layer, fd, &names).unwrap_or(true) {
        return false;
    }
    let Ok((parent, name)) = open_host_parent(rel) else { return false };
    matches!(node::node_at(parent.as_raw_fd(), name, false), Ok(Node::Dir { mode: hm, .. }) if hm == mode)
}

struct Pruner<'a> {
    layer: &'a Layer,
    sel: &'a Selector,
    changed: Vec<Vec<u8>>,
    meta: &'a mut Meta,
}

impl Pruner<'_> {
    fn has_changes(&self, rel: &[u8]) -> bool {
        self.changed.iter().any(|c| is_at_or_below(c, rel))
    }

    fn dir(&mut self, fd: RawFd, rel: &[u8], inherited_opaque: bool) -> Result<(), LayerError> {
        let upath = scan::upper_path(self.layer, rel);
        let names = sl::list_dir(fd).map_err(|e| sys_err("getdents64", &upath, e))?;
        let opaque =
            inherited_opaque || scan::is_opaque(self.layer, fd, &names).map_err(|e| sys_err("lgetxattr", &upath, e))?;
        for name in names {
            let fuse = self.layer.fuse;
            if fuse && name == OPAQUE_MARKER {
                continue;
            }
            let logical = match name.strip_prefix(WH_PREFIX) {
                Some(t) if fuse && valid_name(t) => t,
                _ => &name[..],
            };
            let crel = join(rel, logical);
            if !self.sel.relevant(&crel) {
                continue;
            }
            let cpath = upath.join(std::ffi::OsStr::from_bytes(&name));
            if self.sel.selected(&crel) && !opaque && !self.has_changes(&crel) {
                node::remove_tree_at(fd, &name, true).map_err(|e| sys_err("unlinkat", &cpath, e))?;
                self.meta.remove_below(&host_path(&crel));
                continue;
            }
            if let Ok(Node::Dir { .. }) = node::node_at(fd, &name, true) {
                let sub = node::open_dir(fd, &name).map_err(|e| sys_err("open", &cpath, e))?;
                self.dir(sub.as_raw_fd(), &crel, opaque)?;
                // A directory on the way to the selection may itself differ
                // (its mode, or opaque), which the selection did not look at.
                if !opaque && !self.has_changes(&crel) && same_as_host_dir(self.layer, sub.as_raw_fd(), &crel) {
                    match sl::unlink_at(fd, &name, true) {
                        Ok(()) | Err(libc::ENOTEMPTY) | Err(libc::EEXIST) => {}
                        Err(e) => return Err(sys_err("rmdir", &cpath, e).into()),
                    }
                }
            }
        }
        Ok(())
    }
}
