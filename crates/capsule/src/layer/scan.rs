//! Change detection: the upper tree walked beside the host tree, both
//! through directory descriptors opened with `O_NOFOLLOW` (the host's from
//! `/`), so no symbolic link is ever followed on either side. Only the
//! entries present in the upper tree are visited, plus the host children
//! of opaque directories.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::meta::{encode, OrigKind, Record};
use super::node::{self, octal, Node};
use super::{
    host_path, join, quote, quote_path, special_bits, sys_err, valid_name, Change, ChangeKind, Layer, LayerError,
    Selector,
};
use crate::sys::layer as sl;
use crate::sys::Errno;

/// The fuse-overlayfs marker of an opaque directory.
pub const OPAQUE_MARKER: &[u8] = b".wh..wh..opq";
/// The fuse-overlayfs whiteout prefix.
pub const WH_PREFIX: &[u8] = b".wh.";
/// Opaque directories: kernel overlayfs's attributes, which no program
/// can set through an overlay (overlayfs refuses its own prefix), and
/// fuse-overlayfs's, which a program of a kernel-overlay run can.
const OPAQUE_XATTRS: [&str; 2] = ["user.overlay.opaque", "trusted.overlay.opaque"];
const FUSE_OPAQUE_XATTR: &str = "user.fuseoverlayfs.opaque";
/// The attribute prefix fuse-overlayfs keeps for itself.
const FUSE_XATTR_PREFIX: &[u8] = b"user.fuseoverlayfs.";
const WHITEOUT_XATTRS: [&str; 2] = ["user.overlay.whiteout", "trusted.overlay.whiteout"];

/// In a layer fuse-overlayfs served, the name is one of its markers
/// (a whiteout `.wh.NAME` or the opaque marker); elsewhere it is a file.
pub fn is_fuse_marker(layer: &Layer, name: &[u8]) -> bool {
    layer.fuse && name.starts_with(WH_PREFIX)
}

/// The first entry at or below the upper directory `fd` (for `rel`) whose
/// name or attributes fuse-overlayfs would take for its own markers.
pub fn fuse_marker_below(layer: &Layer, fd: RawFd, rel: &[u8]) -> Result<Option<Vec<u8>>, LayerError> {
    let upath = || upper_path(layer, rel);
    if sl::list_xattrs_at(fd, b"")
        .map_err(|e| sys_err("llistxattr", upath(), e))?
        .iter()
        .any(|x| x.starts_with(FUSE_XATTR_PREFIX))
    {
        return Ok(Some(rel.to_vec()));
    }
    for name in sl::list_dir(fd).map_err(|e| sys_err("getdents64", upath(), e))? {
        let crel = join(rel, &name);
        if name.starts_with(WH_PREFIX) {
            return Ok(Some(crel));
        }
        match node::node_at(fd, &name, true).map_err(|e| sys_err("lstat", upper_path(layer, &crel), e))? {
            Node::Dir { .. } => {
                let sub = node::open_dir(fd, &name).map_err(|e| sys_err("open", upper_path(layer, &crel), e))?;
                if let Some(found) = fuse_marker_below(layer, sub.as_raw_fd(), &crel)? {
                    return Ok(Some(found));
                }
            }
            Node::Symlink { .. } | Node::Absent => {}
            _ => {
                if sl::list_xattrs_at(fd, &name)
                    .map_err(|e| sys_err("llistxattr", upper_path(layer, &crel), e))?
                    .iter()
                    .any(|x| x.starts_with(FUSE_XATTR_PREFIX))
                {
                    return Ok(Some(crel));
                }
            }
        }
    }
    Ok(None)
}

/// What the layer has at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upper {
    /// A real entry of the upper tree.
    Entry(Node),
    /// A whiteout (either format).
    Whiteout,
    /// Nothing: the host entry is hidden by an opaque directory above.
    Hidden,
}

/// One path the scan looked at.
#[derive(Debug, Clone)]
pub struct Item {
    /// The path relative to `/` (no leading slash).
    pub rel: Vec<u8>,
    /// None: the layer's entry equals the host's (an unchanged copy-up).
    pub status: Option<ChangeKind>,
    pub upper: Upper,
    /// The host's entry when scanned.
    pub host: Node,
    pub what: String,
    /// Why this entry can never be committed (named in the report).
    pub problem: Option<String>,
}

impl Item {
    pub fn host_path(&self) -> PathBuf {
        host_path(&self.rel)
    }

    pub fn change(&self) -> Option<Change> {
        let path = self.host_path();
        let path_bytes = std::str::from_utf8(&self.rel).is_err().then(|| path.as_os_str().as_bytes().to_vec());
        let (size, sparse) = match &self.upper {
            Upper::Entry(Node::File { size, blocks, .. }) => (Some(*size), blocks.saturating_mul(512) < *size),
            _ => (None, false),
        };
        let special = match &self.upper {
            Upper::Entry(n) => n.mode().map(special_bits).unwrap_or_default(),
            _ => Vec::new(),
        };
        self.status.map(|kind| Change { kind, path, path_bytes, what: self.what.clone(), size, sparse, special })
    }

    /// Changes and unchanged copy-ups of files and links get a record (a
    /// copy-up is the layer's own snapshot: the host may change under it).
    pub fn wants_record(&self) -> bool {
        self.problem.is_none()
            && (self.status.is_some()
                || matches!(self.upper, Upper::Entry(Node::File { .. }) | Upper::Entry(Node::Symlink { .. })))
    }

    /// The record of the host's entry now: the SHA-256 only for a regular
    /// file the layer has a file for (a modification or a copy-up).
    pub fn record(&self) -> Result<Record, Errno> {
        let mut rec = Record::absent();
        rec.kind = match &self.host {
            Node::Absent => return Ok(rec),
            Node::File { .. } => OrigKind::File,
            Node::Dir { .. } => OrigKind::Dir,
            Node::Symlink { .. } => OrigKind::Symlink,
            _ => OrigKind::Other,
        };
        rec.mtime_ns = self.host.mtime();
        rec.mode = self.host.mode().map(octal);
        if let Node::File { size, .. } = self.host {
            rec.size = Some(size);
            if size == 0 && matches!(self.upper, Upper::Entry(Node::File { .. })) {
                rec.sha256 = Some(node::EMPTY_SHA256.into());
            } else if matches!(self.upper, Upper::Entry(Node::File { .. })) {
                let (parent, name) = open_host_parent(&self.rel).map_err(|(e, _)| e)?;
                rec.sha256 = Some(node::sha256(&mut node::open_file(parent.as_raw_fd(), name)?)?);
            }
        }
        if let Node::Symlink { target, .. } = &self.host {
            rec.target = Some(encode(target));
        }
        Ok(rec)
    }
}

/// Opens the host directory holding `rel` from `/`, refusing any symbolic
/// link on the way; returns it with the last component. The error names
/// the component that is a link or not a directory.
pub fn open_host_parent(rel: &[u8]) -> Result<(OwnedFd, &[u8]), (Errno, String)> {
    let (parent, name) = super::split_last(rel);
    let mut p = b"/".to_vec();
    p.extend_from_slice(parent);
    match sl::openat2(libc::AT_FDCWD, &p, libc::O_PATH | libc::O_DIRECTORY, 0, sl::RESOLVE_NO_SYMLINKS) {
        Ok(fd) => Ok((fd, name)),
        Err(e) => {
            // Name the culprit: walk the components.
            let mut at = Vec::new();
            let mut why = format!(
                "cannot open the host directory {}: {}",
                quote_path(&host_path(parent)),
                crate::error::errno_text(e)
            );
            for comp in parent.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
                at = join(&at, comp);
                match node::node_at(libc::AT_FDCWD, host_path(&at).as_os_str().as_bytes(), false) {
                    Ok(Node::Dir { .. }) => continue,
                    Ok(Node::Symlink { target, .. }) => {
                        why = format!(
                            "host directory {} is a symbolic link (-> {}); capsule never commits through a link",
                            quote_path(&host_path(&at)),
                            quote(&target)
                        );
                        break;
                    }
                    Ok(Node::Absent) => {
                        why = format!("host directory {} does not exist", quote_path(&host_path(&at)));
                        break;
                    }
                    Ok(other) => {
                        why = format!(
                            "host path {} is a {}, not a directory",
                            quote_path(&host_path(&at)),
                            other.kind_name()
                        );
                        break;
                    }
                    Err(_) => break,
                }
            }
            Err((e, why))
        }
    }
}

struct Ctx<'a> {
    sel: &'a Selector,
    /// Compare file contents (not needed to record originals: a file the
    /// layer has is recorded whether it changed or not).
    compare: bool,
    layer: &'a Layer,
    items: Vec<Item>,
}

/// Every change at or below the selector's roots (and the unchanged
/// copy-ups there), sorted by path.
pub fn scan(layer: &Layer, sel: &Selector) -> Result<Vec<Item>, LayerError> {
    scan_with(layer, sel, true)
}

/// [`scan`]; without `compare`, a file present on both sides is an
/// unchanged copy unless its size or mode differs (for recording).
pub fn scan_with(layer: &Layer, sel: &Selector, compare: bool) -> Result<Vec<Item>, LayerError> {
    let host_root = sl::openat2(libc::AT_FDCWD, b"/", libc::O_PATH | libc::O_DIRECTORY, 0, 0)
        .map_err(|e| sys_err("open", "/", e))?;
    let mut ctx = Ctx { sel, compare, layer, items: Vec::new() };
    let upper = sl::openat_name(layer.upper.as_raw_fd(), b".", libc::O_PATH | libc::O_DIRECTORY, 0)
        .map_err(|e| sys_err("open", layer.dir.join("upper"), e))?;
    scan_dir(&mut ctx, &upper, &host_root, b"", false)?;
    let mut items = ctx.items;
    items.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(items)
}

/// Whether the upper directory `fd` (with entries `names`) is opaque;
/// fuse-overlayfs's markers count only in a layer it served.
pub fn is_opaque(layer: &Layer, fd: RawFd, names: &[Vec<u8>]) -> Result<bool, Errno> {
    if layer.fuse && names.iter().any(|n| n == OPAQUE_MARKER) {
        return Ok(true);
    }
    let fuse_attr = layer.fuse.then_some(FUSE_OPAQUE_XATTR);
    for attr in OPAQUE_XATTRS.into_iter().chain(fuse_attr) {
        if sl::get_xattr_at(fd, b"", attr)?.as_deref() == Some(b"y") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The xattr that makes an entry foreign (redirect, metacopy), if any.
fn foreign_xattr(dir: RawFd, name: &[u8]) -> Result<Option<String>, Errno> {
    for x in sl::list_xattrs_at(dir, name)? {
        if x.ends_with(b"overlay.redirect") || x.ends_with(b"overlay.metacopy") {
            return Ok(Some(quote(&x)));
        }
    }
    Ok(None)
}

fn is_xwhiteout(dir: RawFd, name: &[u8]) -> Result<bool, Errno> {
    for attr in WHITEOUT_XATTRS {
        if sl::get_xattr_at(dir, name, attr)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Scans the upper directory `upper` at `rel` against the host's `host`,
/// recursively: each entry the layer has, whites out or hides (below an
/// opaque directory) becomes an item, if selected.
fn scan_dir(
    ctx: &mut Ctx,
    upper: &OwnedFd,
    host: &OwnedFd,
    rel: &[u8],
    inherited_opaque: bool,
) -> Result<(), LayerError> {
    let udir = upper_path(ctx.layer, rel);
    let ufd = upper.as_raw_fd();
    let names = sl::list_dir(ufd).map_err(|e| sys_err("getdents64", udir.clone(), e))?;
    let opaque =
        inherited_opaque || is_opaque(ctx.layer, ufd, &names).map_err(|e| sys_err("lgetxattr", udir.clone(), e))?;
    let (children, whiteouts) = upper_entries(ctx, ufd, &udir, rel, &names)?;
    let mut all: BTreeSet<Vec<u8>> = children.keys().cloned().collect();
    all.extend(whiteouts.iter().cloned());
    if opaque && ctx.sel.relevant(rel) {
        let hnames = sl::list_dir(host.as_raw_fd()).map_err(|e| sys_err("getdents64", host_path(rel), e))?;
        all.extend(hnames);
    }
    for name in all {
        let crel = join(rel, &name);
        if !ctx.sel.relevant(&crel) {
            continue;
        }
        let hnode = node::node_at(host.as_raw_fd(), &name, false).map_err(|e| sys_err("lstat", host_path(&crel), e))?;
        let entry = Entry { upper, host, udir: &udir, selected: ctx.sel.selected(&crel), name: &name, crel, hnode };
        match children.get(&name) {
            // A whiteout, or a host entry hidden by the opaque directory.
            None => entry.gone(ctx, whiteouts.contains(&name)),
            Some(unode) => entry.compare(ctx, unode, opaque)?,
        }
    }
    Ok(())
}

/// An upper directory's entries by name.
type Children = BTreeMap<Vec<u8>, Node>;

/// The entries of the upper directory `ufd` (at `rel`, `udir`): the
/// children the layer has and the names it whites out. An invalid
/// whiteout is an item of its own.
fn upper_entries(
    ctx: &mut Ctx,
    ufd: RawFd,
    udir: &std::path::Path,
    rel: &[u8],
    names: &[Vec<u8>],
) -> Result<(Children, BTreeSet<Vec<u8>>), LayerError> {
    let mut whiteouts: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut children = Children::new();
    for name in names {
        if is_fuse_marker(ctx.layer, name) && name == OPAQUE_MARKER {
            continue;
        }
        if let Some(target) = name.strip_prefix(WH_PREFIX).filter(|_| ctx.layer.fuse) {
            if valid_name(target) {
                whiteouts.insert(target.to_vec());
            } else {
                let r = join(rel, name);
                if ctx.sel.selected(&r) {
                    ctx.items.push(Item {
                        rel: r,
                        status: Some(ChangeKind::Deleted),
                        upper: Upper::Whiteout,
                        host: Node::Absent,
                        what: "invalid whiteout".into(),
                        problem: Some(format!("whiteout `{}` names no valid entry (`.`, `..` or empty)", quote(name))),
                    });
                }
            }
            continue;
        }
        let n = node::node_at(ufd, name, true)
            .map_err(|e| sys_err("lstat", udir.join(std::ffi::OsStr::from_bytes(name)), e))?;
        let n = match n {
            Node::File { size: 0, .. } if is_xwhiteout(ufd, name).unwrap_or(false) => Node::Whiteout,
            n => n,
        };
        match n {
            Node::Whiteout => {
                whiteouts.insert(name.clone());
            }
            Node::Absent => {}
            n => {
                children.insert(name.clone(), n);
            }
        }
    }
    Ok((children, whiteouts))
}

/// One name of a scanned directory, on both sides.
struct Entry<'a> {
    upper: &'a OwnedFd,
    host: &'a OwnedFd,
    /// The upper directory's path (for messages).
    udir: &'a std::path::Path,
    /// Whether its item is wanted (else only its subtree may be).
    selected: bool,
    name: &'a [u8],
    crel: Vec<u8>,
    /// The host's entry.
    hnode: Node,
}

impl Entry<'_> {
    fn push(&self, ctx: &mut Ctx, item: Item) {
        if self.selected {
            ctx.items.push(item);
        }
    }

    fn item(&self, status: Option<ChangeKind>, upper: Upper, what: String) -> Item {
        Item { rel: self.crel.clone(), status, upper, host: self.hnode.clone(), what, problem: None }
    }

    /// The entry's path in the upper tree (for messages).
    fn upath(&self) -> PathBuf {
        self.udir.join(std::ffi::OsStr::from_bytes(self.name))
    }

    /// Not in the layer: whited out or hidden by an opaque directory.
    fn gone(&self, ctx: &mut Ctx, whiteout: bool) {
        let upper = if whiteout { Upper::Whiteout } else { Upper::Hidden };
        if self.hnode != Node::Absent {
            self.push(ctx, self.item(Some(ChangeKind::Deleted), upper, self.hnode.describe()));
        } else if upper == Upper::Whiteout {
            // The host has nothing to delete: not a change.
            self.push(ctx, self.item(None, upper, "whiteout of nothing".into()));
        }
    }

    /// The layer's `unode` against the host's entry; a directory on both
    /// sides is scanned in turn.
    fn compare(&self, ctx: &mut Ctx, unode: &Node, opaque: bool) -> Result<(), LayerError> {
        let hnode = &self.hnode;
        let foreign =
            foreign_xattr(self.upper.as_raw_fd(), self.name).map_err(|e| sys_err("llistxattr", self.upath(), e))?;
        let up = Upper::Entry(unode.clone());
        if let Some(x) = foreign {
            let kind = if *hnode == Node::Absent { ChangeKind::Added } else { ChangeKind::Modified };
            let mut it = self.item(Some(kind), up, unode.describe());
            it.problem = Some(format!("it has the {x} attribute: the layer was not made by capsule"));
            self.push(ctx, it);
            return Ok(());
        }
        if *hnode == Node::Absent {
            let mut it = self.item(Some(ChangeKind::Added), up, added_what(unode));
            it.problem = special_problem(unode);
            self.push(ctx, it);
            return Ok(());
        }
        if !unode.same_kind(hnode) {
            let it = self.retyped(ctx.layer, unode, up)?;
            self.push(ctx, it);
            return Ok(());
        }
        let mode_change = |hm: &u32, um: &u32| format!("mode {} -> {}", octal(*hm), octal(*um));
        match (unode, hnode) {
            (Node::Dir { mode: um, .. }, Node::Dir { mode: hm, .. }) => {
                if um != hm {
                    self.push(ctx, self.item(Some(ChangeKind::Modified), up, mode_change(hm, um)));
                }
                let sub_u = node::open_dir(self.upper.as_raw_fd(), self.name)
                    .map_err(|e| sys_err("open", host_path(&self.crel), e))?;
                let sub_h = node::open_dir(self.host.as_raw_fd(), self.name)
                    .map_err(|e| sys_err("open", host_path(&self.crel), e))?;
                scan_dir(ctx, &sub_u, &sub_h, &self.crel, opaque)?;
            }
            (Node::File { .. }, Node::File { .. }) => {
                if self.selected {
                    let it = self.file_change(ctx.compare, unode, up)?;
                    self.push(ctx, it);
                }
            }
            (Node::Symlink { target: ut, .. }, Node::Symlink { target: ht, .. }) => {
                if ut == ht {
                    self.push(ctx, self.item(None, up, "unchanged copy".into()));
                } else {
                    let what = format!("symlink {} -> {}", quote(ht), quote(ut));
                    self.push(ctx, self.item(Some(ChangeKind::Modified), up, what));
                }
            }
            (Node::Fifo { mode: um, .. }, Node::Fifo { mode: hm, .. }) => {
                if um == hm {
                    self.push(ctx, self.item(None, up, "unchanged copy".into()));
                } else {
                    self.push(ctx, self.item(Some(ChangeKind::Modified), up, mode_change(hm, um)));
                }
            }
            (u, _) => {
                let mut it = self.item(Some(ChangeKind::Modified), up.clone(), u.describe());
                it.problem = special_problem(u);
                self.push(ctx, it);
            }
        }
        Ok(())
    }

    /// The layer's `unode` of another type than the host's entry.
    fn retyped(&self, layer: &Layer, unode: &Node, up: Upper) -> Result<Item, LayerError> {
        let what = format!("type {} -> {}", self.hnode.kind_name(), unode.kind_name());
        let mut it = self.item(Some(ChangeKind::Modified), up, what);
        it.problem = special_problem(unode);
        if let (Node::Dir { .. }, Node::Symlink { target, .. }) = (unode, &self.hnode) {
            // overlayfs makes a directory that replaces something opaque;
            // one that is not was written through the host's link (or
            // crafted): committing it would not be what the run saw.
            let sub =
                node::open_dir(self.upper.as_raw_fd(), self.name).map_err(|e| sys_err("open", self.upath(), e))?;
            let subnames = sl::list_dir(sub.as_raw_fd()).map_err(|e| sys_err("getdents64", self.upath(), e))?;
            if !is_opaque(layer, sub.as_raw_fd(), &subnames).map_err(|e| sys_err("lgetxattr", self.upath(), e))? {
                it.problem = Some(format!(
                    "the host's {} is a symbolic link (-> {}) and the layer's directory there does not replace it (not opaque); capsule never commits through a link",
                    quote_path(&host_path(&self.crel)),
                    quote(target)
                ));
            }
        }
        Ok(it)
    }

    /// A regular file on both sides: what changed, its content (compared
    /// when `compare`) and its mode.
    fn file_change(&self, compare: bool, unode: &Node, up: Upper) -> Result<Item, LayerError> {
        let (Node::File { size: us, mode: um, .. }, Node::File { size: hs, mode: hm, .. }) = (unode, &self.hnode)
        else {
            unreachable!("two regular files")
        };
        // Two empty files are equal unread (the host's may be
        // unreadable to the caller: a root-only lock file).
        let content_differs = us != hs
            || compare && *us > 0 && {
                let mut a =
                    node::open_file(self.upper.as_raw_fd(), self.name).map_err(|e| sys_err("open", self.upath(), e))?;
                let mut b = node::open_file(self.host.as_raw_fd(), self.name)
                    .map_err(|e| sys_err("open", host_path(&self.crel), e))?;
                !node::same_content(&mut a, &mut b).map_err(|e| sys_err("read", host_path(&self.crel), e))?
            };
        let mut what = Vec::new();
        if content_differs {
            what.push(if us != hs { format!("content, {hs} -> {us} bytes") } else { "content".to_string() });
        }
        if um != hm {
            what.push(format!("mode {} -> {}", octal(*hm), octal(*um)));
        }
        let status = (!what.is_empty()).then_some(ChangeKind::Modified);
        Ok(self.item(status, up, if what.is_empty() { "unchanged copy".into() } else { what.join(", ") }))
    }
}

/// Where `rel` is in the upper tree (for messages).
pub fn upper_path(layer: &Layer, rel: &[u8]) -> PathBuf {
    let mut p = layer.dir.join("upper");
    if !rel.is_empty() {
        p.push(std::ffi::OsStr::from_bytes(rel));
    }
    p
}

fn added_what(n: &Node) -> String {
    match n {
        Node::Dir { .. } => "new directory".into(),
        other => other.describe(),
    }
}

/// Sockets and devices are never committed.
fn special_problem(n: &Node) -> Option<String> {
    match n {
        Node::Special { what, .. } => {
            Some(format!("it is a {what}; capsule commits files, directories, symlinks and FIFOs only"))
        }
        _ => None,
    }
}
