//! What one directory entry is (on the host or in the upper tree), read
//! through a directory descriptor without following links, and the file
//! operations the review and the commit share.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use sha2::{Digest, Sha256};

use crate::sys::layer as sl;
use crate::sys::Errno;

/// One entry, as `lstat` (and `readlink`) see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Absent,
    /// `blocks`: 512-byte units allocated (fewer than the size: holes).
    File {
        size: u64,
        mode: u32,
        mtime_ns: i64,
        blocks: u64,
    },
    Dir {
        mode: u32,
        mtime_ns: i64,
    },
    Symlink {
        target: Vec<u8>,
        mtime_ns: i64,
    },
    Fifo {
        mode: u32,
        mtime_ns: i64,
    },
    /// An overlayfs whiteout (character device 0:0), upper side only.
    Whiteout,
    /// A socket or device.
    Special {
        what: &'static str,
        mode: u32,
        mtime_ns: i64,
    },
}

pub fn mtime_ns(st: &libc::stat) -> i64 {
    st.st_mtime.saturating_mul(1_000_000_000).saturating_add(st.st_mtime_nsec)
}

/// The entry `name` of `dir`; `whiteouts`: a character device 0:0 is a
/// whiteout (upper side). A missing entry (or a parent that is not a
/// directory) is `Absent`.
pub fn node_at(dir: RawFd, name: &[u8], whiteouts: bool) -> Result<Node, Errno> {
    let st = match sl::lstat_at(dir, name) {
        Ok(st) => st,
        Err(libc::ENOENT) | Err(libc::ENOTDIR) => return Ok(Node::Absent),
        Err(e) => return Err(e),
    };
    let mode = st.st_mode & 0o7777;
    let mtime_ns = mtime_ns(&st);
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Node::File { size: st.st_size as u64, mode, mtime_ns, blocks: st.st_blocks as u64 },
        libc::S_IFDIR => Node::Dir { mode, mtime_ns },
        libc::S_IFLNK => Node::Symlink { target: sl::readlink_at(dir, name)?, mtime_ns },
        libc::S_IFIFO => Node::Fifo { mode, mtime_ns },
        libc::S_IFCHR if whiteouts && st.st_rdev == 0 => Node::Whiteout,
        libc::S_IFCHR => Node::Special { what: "character device", mode, mtime_ns },
        libc::S_IFBLK => Node::Special { what: "block device", mode, mtime_ns },
        _ => Node::Special { what: "socket", mode, mtime_ns },
    })
}

impl Node {
    /// `file`, `directory`, ...
    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::Absent => "nothing",
            Node::File { .. } => "file",
            Node::Dir { .. } => "directory",
            Node::Symlink { .. } => "symlink",
            Node::Fifo { .. } => "fifo",
            Node::Whiteout => "whiteout",
            Node::Special { what, .. } => what,
        }
    }

    /// Permission bits, for the kinds that have meaningful ones.
    pub fn mode(&self) -> Option<u32> {
        match self {
            Node::File { mode, .. } | Node::Dir { mode, .. } | Node::Fifo { mode, .. } | Node::Special { mode, .. } => {
                Some(*mode)
            }
            _ => None,
        }
    }

    pub fn mtime(&self) -> Option<i64> {
        match self {
            Node::File { mtime_ns, .. }
            | Node::Dir { mtime_ns, .. }
            | Node::Symlink { mtime_ns, .. }
            | Node::Fifo { mtime_ns, .. }
            | Node::Special { mtime_ns, .. } => Some(*mtime_ns),
            _ => None,
        }
    }

    /// `file, 12 bytes`, `symlink -> target`, `directory`.
    pub fn describe(&self) -> String {
        match self {
            Node::File { size, .. } => format!("file, {size} bytes"),
            Node::Symlink { target, .. } => format!("symlink -> {}", super::quote(target)),
            other => other.kind_name().to_string(),
        }
    }

    pub fn same_kind(&self, other: &Node) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

pub fn octal(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// Opens the regular file `name` of `dir` for reading: never through a
/// link, never blocking on a FIFO swapped in, and only if it is still a
/// regular file once open.
pub fn open_file(dir: RawFd, name: &[u8]) -> Result<File, Errno> {
    let fd = sl::openat_name(dir, name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
    let st = crate::sys::fstat(fd.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(libc::EINVAL);
    }
    crate::sys::set_nonblocking(fd.as_raw_fd(), false)?;
    Ok(File::from(fd))
}

/// Opens the directory `name` of `dir` (`O_PATH`, never through a link).
pub fn open_dir(dir: RawFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    sl::openat_name(dir, name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
}

fn read_full(f: &mut File, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(sl::errno_of(&e)),
        }
    }
    Ok(n)
}

/// Where the next data at or after `pos` starts (`size` when none);
/// `pos` itself where the filesystem cannot tell (all data).
fn next_data(f: &File, pos: u64, size: u64) -> Result<u64, Errno> {
    match crate::sys::seek_data(f.as_raw_fd(), pos as i64, true) {
        Ok(Some(o)) => Ok((o as u64).min(size)),
        Ok(None) => Ok(size),
        Err(libc::EINVAL) | Err(libc::EOPNOTSUPP) => Ok(pos),
        Err(e) => Err(e),
    }
}

/// Where the hole at or after `pos` starts (`size` at the latest).
fn next_hole(f: &File, pos: u64, size: u64) -> Result<u64, Errno> {
    match crate::sys::seek_data(f.as_raw_fd(), pos as i64, false) {
        Ok(Some(o)) => Ok((o as u64).min(size)),
        Ok(None) => Ok(size),
        Err(libc::EINVAL) | Err(libc::EOPNOTSUPP) => Ok(size),
        Err(e) => Err(e),
    }
}

fn size_of(f: &File) -> Result<u64, Errno> {
    Ok(crate::sys::fstat(f.as_raw_fd())?.st_size as u64)
}

/// `pread` of `buf.len()` bytes at `at` (short only at the end).
fn read_full_at(f: &File, buf: &mut [u8], at: u64) -> Result<usize, Errno> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(sl::errno_of(&e)),
        }
    }
    Ok(n)
}

/// The data ranges of `f` (its holes left out), as `[start, end)`, in order;
/// at most a few: one per `lseek(SEEK_DATA)` step.
fn for_each_data(f: &File, size: u64, mut each: impl FnMut(u64, u64) -> Result<bool, Errno>) -> Result<bool, Errno> {
    let mut pos = 0;
    while pos < size {
        let start = next_data(f, pos, size)?;
        if start >= size {
            break;
        }
        let end = next_hole(f, start, size)?.max(start + 1).min(size);
        if !each(start, end)? {
            return Ok(false);
        }
        pos = end;
    }
    Ok(true)
}

/// Whether two files have the same bytes. What is a hole in both is not
/// read: two copies of a 1 TiB sparse file compare in no time.
pub fn same_content(a: &mut File, b: &mut File) -> Result<bool, Errno> {
    let size = size_of(a)?;
    if size_of(b)? != size {
        return Ok(false);
    }
    let mut x = vec![0u8; 65536];
    let mut y = vec![0u8; 65536];
    let mut pos = 0;
    while pos < size {
        let start = next_data(a, pos, size)?.min(next_data(b, pos, size)?);
        if start >= size {
            break;
        }
        // Up to where both are in a hole again.
        let end = next_hole(a, start, size)?.max(next_hole(b, start, size)?).max(start + 1);
        let mut at = start;
        while at < end {
            let want = (end - at).min(x.len() as u64) as usize;
            let n = read_full_at(a, &mut x[..want], at)?;
            let m = read_full_at(b, &mut y[..want], at)?;
            if n != m || x[..n] != y[..m] {
                return Ok(false);
            }
            if n < want {
                return Ok(true);
            }
            at += want as u64;
        }
        pos = end;
    }
    Ok(true)
}

/// Copies `src` into the empty file `dst` keeping its holes: only the
/// data ranges `lseek(SEEK_DATA/SEEK_HOLE)` reports are read and written,
/// then `dst` gets `src`'s size (a hole to the end).
pub fn copy_sparse(src: &File, dst: &File) -> Result<(), Errno> {
    use std::os::unix::fs::FileExt;
    let size = size_of(src)?;
    let mut buf = vec![0u8; 1 << 20];
    for_each_data(src, size, |start, end| {
        let mut at = start;
        while at < end {
            let want = (end - at).min(buf.len() as u64) as usize;
            let n = read_full_at(src, &mut buf[..want], at)?;
            if n == 0 {
                return Ok(false);
            }
            dst.write_all_at(&buf[..n], at).map_err(|e| sl::errno_of(&e))?;
            at += n as u64;
        }
        Ok(true)
    })?;
    sl::ftruncate(dst.as_raw_fd(), size)
}

/// Hex SHA-256 of nothing: the hash of an empty file, known without
/// reading it (the caller may not be allowed to: a root-only lock file).
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Hex SHA-256 of a file's content.
pub fn sha256(f: &mut File) -> Result<String, Errno> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = read_full(f, &mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads a whole file, up to `limit` bytes (None when it is larger).
pub fn read_limited(f: &mut File, limit: u64) -> Result<Option<Vec<u8>>, Errno> {
    let mut v = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = read_full(f, &mut buf)?;
        if n == 0 {
            return Ok(Some(v));
        }
        if v.len() as u64 + n as u64 > limit {
            return Ok(None);
        }
        v.extend_from_slice(&buf[..n]);
    }
}

/// Removes the entry `name` of `dir` and, for a directory, everything in
/// it, never following a link. `fix_perms`: first give the owner rwx on
/// directories that lack it (overlayfs leaves mode-000 work directories).
pub fn remove_tree_at(dir: RawFd, name: &[u8], fix_perms: bool) -> Result<(), Errno> {
    let st = match sl::lstat_at(dir, name) {
        Ok(st) => st,
        Err(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let fd = open_dir(dir, name)?;
        if fix_perms && st.st_mode & 0o700 != 0o700 {
            sl::chmod_fd(fd.as_raw_fd(), (st.st_mode & 0o7777) | 0o700)?;
        }
        for child in sl::list_dir(fd.as_raw_fd())? {
            remove_tree_at(fd.as_raw_fd(), &child, fix_perms)?;
        }
        sl::unlink_at(dir, name, true)
    } else {
        sl::unlink_at(dir, name, false)
    }
}
