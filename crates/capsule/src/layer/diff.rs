//! `capsule layer diff`: each change as its list line with what changed,
//! then a unified diff for text files (3 lines of context, `--- /etc/foo`
//! / `+++ /etc/foo (layer)`), a size and SHA-256 summary for binary ones,
//! sizes alone for files over [`HASH_LIMIT`] (not read), and the content
//! of new directories. Names are quoted ([`super::quote`]).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use super::node::{self, Node};
use super::scan::{open_host_parent, upper_path, Item, Upper};
use super::{join, sys_err, ChangeKind, Layer, LayerError};
use crate::error::SysError;
use crate::sys::layer as sl;

/// Files larger than this are summarized, not diffed.
const DIFF_LIMIT: u64 = 4 << 20;
/// Files larger than this are not read at all: their sizes are shown (a
/// 1 TiB sparse file would take hours to hash).
pub const HASH_LIMIT: u64 = 64 << 20;

pub fn write_diff(layer: &Layer, items: &[Item], out: &mut dyn Write) -> Result<(), LayerError> {
    for item in items {
        let Some(kind) = item.status else { continue };
        let path = item.host_path();
        let p = super::quote_path(&path);
        let w = |e: std::io::Error| LayerError::from(SysError::new("write", sl::errno_of(&e)).path("(output)"));
        let special = match &item.upper {
            Upper::Entry(n) => n.mode().map(super::special_bits).unwrap_or_default(),
            _ => Vec::new(),
        };
        let special = if special.is_empty() { String::new() } else { format!(" ({})", special.join(", ")) };
        writeln!(out, "{} {p}: {}{special}", kind.letter(), item.what).map_err(w)?;
        if let Some(why) = &item.problem {
            writeln!(out, "  (will not be committed: {why})").map_err(w)?;
            continue;
        }
        let old = match (&item.host, kind) {
            (Node::File { .. }, _) => Some(host_content(item)?),
            _ => None,
        };
        let new = match &item.upper {
            Upper::Entry(Node::File { .. }) => Some(upper_content(layer, &item.rel)?),
            _ => None,
        };
        match (kind, &item.upper) {
            (ChangeKind::Deleted, _) => {
                if let Some(old) = old {
                    content_diff(out, &p, Some(old), None).map_err(w)?;
                }
            }
            (_, Upper::Entry(Node::Dir { .. })) if !matches!(item.host, Node::Dir { .. }) => {
                let fd = sl::openat2(
                    layer.upper.as_raw_fd(),
                    &item.rel,
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                    0,
                    sl::RESOLVE_BENEATH | sl::RESOLVE_NO_SYMLINKS,
                )
                .map_err(|e| sys_err("openat2", upper_path(layer, &item.rel), e))?;
                list_tree(layer, fd.as_raw_fd(), &item.rel, out)?;
            }
            (_, Upper::Entry(Node::File { .. })) => {
                let same = match (&old, &new) {
                    (Some(Content::Text(a)), Some(Content::Text(b))) => a == b,
                    (Some(Content::Binary { sha: a, .. }), Some(Content::Binary { sha: b, .. })) => a == b,
                    (Some(Content::Unread { .. }), Some(Content::Unread { .. })) => false,
                    _ => false,
                };
                if !same {
                    content_diff(out, &p, old, new).map_err(w)?;
                }
            }
            // Links, FIFOs, permissions, types: the line above says it all.
            _ => {}
        }
    }
    Ok(())
}

enum Content {
    Text(String),
    Binary {
        size: u64,
        sha: String,
    },
    /// Over [`HASH_LIMIT`]: not read.
    Unread {
        size: u64,
    },
}

fn classify(f: &mut File) -> Result<Content, i32> {
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    if size > HASH_LIMIT {
        return Ok(Content::Unread { size });
    }
    if size <= DIFF_LIMIT {
        if let Some(bytes) = node::read_limited(f, DIFF_LIMIT)? {
            if !bytes.contains(&0) {
                if let Ok(s) = String::from_utf8(bytes.clone()) {
                    return Ok(Content::Text(s));
                }
            }
            use sha2::Digest;
            let sha = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
            return Ok(Content::Binary { size: bytes.len() as u64, sha });
        }
    }
    use std::io::Seek;
    f.rewind().map_err(|e| sl::errno_of(&e))?;
    Ok(Content::Binary { size, sha: node::sha256(f)? })
}

fn host_content(item: &Item) -> Result<Content, LayerError> {
    let path = item.host_path();
    let (parent, name) = open_host_parent(&item.rel)
        .map_err(|(e, why)| SysError::new("openat2", e).path(path.display().to_string()).hint(why))?;
    let mut f = node::open_file(parent.as_raw_fd(), name).map_err(|e| sys_err("open", &path, e))?;
    classify(&mut f).map_err(|e| sys_err("read", &path, e).into())
}

fn upper_content(layer: &Layer, rel: &[u8]) -> Result<Content, LayerError> {
    let up = upper_path(layer, rel);
    let fd = sl::openat2(
        layer.upper.as_raw_fd(),
        rel,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        0,
        sl::RESOLVE_BENEATH | sl::RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| sys_err("openat2", &up, e))?;
    let mut f = File::from(fd);
    classify(&mut f).map_err(|e| sys_err("read", &up, e).into())
}

fn content_diff(out: &mut dyn Write, p: &str, old: Option<Content>, new: Option<Content>) -> std::io::Result<()> {
    let text = |c: &Option<Content>| match c {
        None => Some(String::new()),
        Some(Content::Text(s)) => Some(s.clone()),
        Some(Content::Binary { .. } | Content::Unread { .. }) => None,
    };
    match (text(&old), text(&new)) {
        (Some(a), Some(b)) => {
            let d = similar::TextDiff::from_lines(&a, &b);
            let old_h = if old.is_some() { p.to_string() } else { "/dev/null".to_string() };
            let new_h = if new.is_some() { format!("{p} (layer)") } else { "/dev/null".to_string() };
            write!(out, "{}", d.unified_diff().context_radius(3).header(&old_h, &new_h))
        }
        _ => {
            let sum = |c: &Option<Content>| match c {
                None => "nothing".to_string(),
                Some(Content::Text(s)) => {
                    use sha2::Digest;
                    let sha: String = sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
                    format!("{} bytes, sha256 {sha}", s.len())
                }
                Some(Content::Binary { size, sha }) => format!("{size} bytes, sha256 {sha}"),
                Some(Content::Unread { size }) => format!("{size} bytes"),
            };
            let unread = [&old, &new].iter().any(|c| matches!(c, Some(Content::Unread { .. })));
            writeln!(out, "  binary: {} -> {}", sum(&old), sum(&new))?;
            if unread {
                writeln!(
                    out,
                    "  (content not read: over {} MiB; compare the files yourself, e.g. with cmp)",
                    HASH_LIMIT >> 20
                )?;
            }
            Ok(())
        }
    }
}

/// The content of a new directory, one line per entry.
fn list_tree(layer: &Layer, fd: i32, rel: &[u8], out: &mut dyn Write) -> Result<(), LayerError> {
    let w = |e: std::io::Error| LayerError::from(SysError::new("write", sl::errno_of(&e)).path("(output)"));
    let mut names = sl::list_dir(fd).map_err(|e| sys_err("getdents64", upper_path(layer, rel), e))?;
    names.sort();
    for name in names {
        if super::scan::is_fuse_marker(layer, &name) {
            continue;
        }
        let crel = join(rel, &name);
        let n = node::node_at(fd, &name, true).map_err(|e| sys_err("lstat", upper_path(layer, &crel), e))?;
        if matches!(n, Node::Whiteout | Node::Absent) {
            continue;
        }
        writeln!(out, "  + {} ({})", super::quote_path(&super::host_path(&crel)), n.describe()).map_err(w)?;
        if let Node::Dir { .. } = n {
            let sub = node::open_dir(fd, &name).map_err(|e| sys_err("open", upper_path(layer, &crel), e))?;
            list_tree(layer, sub.as_raw_fd(), &crel, out)?;
        }
    }
    Ok(())
}
