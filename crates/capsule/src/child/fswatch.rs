//! `explain`'s file watch (docs/explain.md): the run's filter sends every
//! file open and write-type call to PID 1, whose reader (the network log's,
//! a child sharing its memory) reads the path from the caller, makes it
//! absolute in the sandbox's tree (through the run's procfs: the caller's
//! working directory or the directory descriptor), classifies it against
//! the run's own mount plan and records the calls the view refuses: a
//! write where the plan is read-only or hidden, an open of a hidden path.
//! An observation, as the network log: the call goes on whatever was read.
//!
//! Raw syscalls only, no allocation, no panic (every index checked).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use super::netlog::Memory;
use crate::plan::mounts::{WatchView, W_AS_SAVED, W_DEV, W_HIDDEN, W_SKIP, W_WRITABLE};
use crate::sys;

/// Distinct refused calls a run's report holds; more are only counted.
pub(crate) const FS_CAPACITY: usize = 64;
/// Bytes of a path the reader reads and keeps.
pub(crate) const PATH_KEPT: usize = 512;
const PATH_WORDS: usize = PATH_KEPT / 8;

/// An entry's kind: a write the view refuses.
pub(crate) const KIND_WRITE: u32 = 1;
/// An entry's kind: an open of a hidden path.
pub(crate) const KIND_READ_HIDDEN: u32 = 2;

/// What the mount plan makes of a path in the sandbox's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Writable,
    ReadOnly,
    Hidden,
}

/// One refused call, written by the reader, read by the supervisor.
#[repr(C)]
pub(crate) struct FsEntry {
    /// [`KIND_WRITE`] or [`KIND_READ_HIDDEN`]; 0 for a slot never used.
    kind: AtomicU32,
    nr: AtomicU32,
    len: AtomicU32,
    pub(crate) count: AtomicU64,
    path: [AtomicU64; PATH_WORDS],
}

impl Default for FsEntry {
    fn default() -> Self {
        FsEntry {
            kind: AtomicU32::new(0),
            nr: AtomicU32::new(0),
            len: AtomicU32::new(0),
            count: AtomicU64::new(0),
            path: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl FsEntry {
    /// (kind, syscall number, path bytes, length).
    pub(crate) fn load(&self) -> (u32, u32, [u8; PATH_KEPT], usize) {
        let mut p = [0u8; PATH_KEPT];
        for (i, w) in self.path.iter().enumerate() {
            for (j, b) in w.load(SeqCst).to_ne_bytes().iter().enumerate() {
                if let Some(slot) = p.get_mut(8 * i + j) {
                    *slot = *b;
                }
            }
        }
        (self.kind.load(SeqCst), self.nr.load(SeqCst), p, (self.len.load(SeqCst) as usize).min(PATH_KEPT))
    }
}

/// The refused calls of a run (part of the network log's shared mapping).
#[repr(C)]
pub(crate) struct FsLog {
    pub(crate) len: AtomicU32,
    pub(crate) dropped: AtomicU64,
    pub(crate) entries: [FsEntry; FS_CAPACITY],
}

impl Default for FsLog {
    fn default() -> Self {
        FsLog {
            len: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            entries: std::array::from_fn(|_| FsEntry::default()),
        }
    }
}

impl FsLog {
    fn record(&self, kind: u32, nr: u32, path: &[u8]) {
        let n = (self.len.load(SeqCst) as usize).min(FS_CAPACITY);
        for e in self.entries.get(..n).unwrap_or(&[]) {
            let (k, c, p, len) = e.load();
            if k == kind && c == nr && p.get(..len) == Some(path) {
                e.count.fetch_add(1, SeqCst);
                return;
            }
        }
        let Some(e) = self.entries.get(n) else {
            self.dropped.fetch_add(1, SeqCst);
            return;
        };
        let len = path.len().min(PATH_KEPT);
        for (i, w) in e.path.iter().enumerate() {
            let mut bytes = [0u8; 8];
            for (j, b) in bytes.iter_mut().enumerate() {
                let at = 8 * i + j;
                *b = if at < len { path.get(at).copied().unwrap_or(0) } else { 0 };
            }
            w.store(u64::from_ne_bytes(bytes), SeqCst);
        }
        e.len.store(len as u32, SeqCst);
        e.nr.store(nr, SeqCst);
        e.count.store(1, SeqCst);
        e.kind.store(kind, SeqCst);
        self.len.store(n as u32 + 1, SeqCst);
    }
}

/// How a call's access is told.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Always a write.
    Write,
    /// An open: its flags are this argument.
    Flags(usize),
    /// openat2: its flags are the first word of `struct open_how` at this argument.
    How(usize),
}

/// A watched call: where its path is, its directory descriptor, a second
/// path it writes (rename's new name, link's).
#[derive(Clone, Copy)]
struct FsCall {
    path: usize,
    dir: Option<usize>,
    access: Access,
    also: Option<(usize, Option<usize>)>,
}

const fn call(path: usize, dir: Option<usize>, access: Access) -> FsCall {
    FsCall { path, dir, access, also: None }
}

/// renameat (the `libc` crate has no aarch64 constant for it).
#[cfg(target_arch = "x86_64")]
const NR_RENAMEAT: i64 = libc::SYS_renameat;
#[cfg(target_arch = "aarch64")]
const NR_RENAMEAT: i64 = 38;

/// The native calls the watch sends to PID 1 (the filter's epilogue uses
/// the same list, `plan::seccomp::FS_WATCHED`).
fn fs_call(nr: i64) -> Option<FsCall> {
    use Access::*;
    Some(match nr {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open => call(0, None, Flags(1)),
        libc::SYS_openat => call(1, Some(0), Flags(2)),
        libc::SYS_openat2 => call(1, Some(0), How(2)),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_creat
        | libc::SYS_mkdir
        | libc::SYS_rmdir
        | libc::SYS_unlink
        | libc::SYS_mknod
        | libc::SYS_chmod
        | libc::SYS_chown
        | libc::SYS_lchown => call(0, None, Write),
        libc::SYS_truncate
        | libc::SYS_setxattr
        | libc::SYS_lsetxattr
        | libc::SYS_removexattr
        | libc::SYS_lremovexattr => call(0, None, Write),
        libc::SYS_mkdirat | libc::SYS_unlinkat | libc::SYS_mknodat | libc::SYS_fchmodat | libc::SYS_fchownat => {
            call(1, Some(0), Write)
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_rename => FsCall { also: Some((1, None)), ..call(0, None, Write) },
        NR_RENAMEAT | libc::SYS_renameat2 => FsCall { also: Some((3, Some(2))), ..call(1, Some(0), Write) },
        #[cfg(target_arch = "x86_64")]
        libc::SYS_link | libc::SYS_symlink => call(1, None, Write),
        libc::SYS_linkat => call(3, Some(2), Write),
        libc::SYS_symlinkat => call(2, Some(1), Write),
        libc::SYS_utimensat => call(1, Some(0), Write),
        _ => return None,
    })
}

/// Whether a native call number is one of the watch's.
pub(crate) fn is_fs_call(nr: i32) -> bool {
    fs_call(i64::from(nr)).is_some()
}

/// O_WRONLY | O_RDWR | O_CREAT | O_TRUNC.
const WRITE_FLAGS: u64 = 0o1 | 0o2 | 0o100 | 0o1000;

/// Whether `p` is `dir` or beneath it (both clean absolute paths).
fn beneath(p: &[u8], dir: &[u8]) -> bool {
    if dir == b"/" {
        return true;
    }
    match p.strip_prefix(dir) {
        Some(rest) => rest.is_empty() || rest.first() == Some(&b'/'),
        None => false,
    }
}

/// What the plan makes of the clean absolute `path`, and the operation
/// that decides it (None: the base, the host view or the empty root). The
/// last mount over the path or a parent of it decides; a clone shown again
/// as the host view had it (`allow` under a hidden parent) is looked at as
/// it was when it was taken.
pub(crate) fn classify(view: &WatchView, path: &[u8]) -> (Place, Option<usize>) {
    classify_upto(view, view.ops.len(), path)
}

fn classify_upto(view: &WatchView, upto: usize, path: &[u8]) -> (Place, Option<usize>) {
    let ops = view.ops.get(..upto).unwrap_or(&[]);
    let found = ops.iter().rposition(|(dst, kind, _)| *kind != W_SKIP && beneath(path, dst.to_bytes()));
    let Some(i) = found else {
        return (if view.base_writable { Place::Writable } else { Place::ReadOnly }, None);
    };
    let Some((dst, kind, aux)) = ops.get(i) else { return (Place::ReadOnly, None) };
    let place = match *kind {
        W_WRITABLE => Place::Writable,
        W_HIDDEN => Place::Hidden,
        W_DEV => {
            let rest = path.get(dst.to_bytes().len()..).unwrap_or(&[]);
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            match rest.split(|&c| c == b'/').next().unwrap_or(&[]) {
                b"null" | b"zero" | b"full" | b"random" | b"urandom" | b"shm" => Place::Writable,
                _ => Place::ReadOnly,
            }
        }
        // As the tree showed it when the clone was taken.
        W_AS_SAVED if (*aux as usize) < i => return classify_upto(view, *aux as usize, path),
        _ => Place::ReadOnly,
    };
    (place, Some(i))
}

/// Appends `b` to `out` at `*n`; false when it does not fit.
fn push(out: &mut [u8], n: &mut usize, b: &[u8]) -> bool {
    let Some(to) = out.get_mut(*n..*n + b.len()) else { return false };
    to.copy_from_slice(b);
    *n += b.len();
    true
}

/// `rel` taken from `base` (both may be absolute: `rel` then wins), made
/// clean (no `.`, `..`, repeated `/`) into `out`; its length, 0 when it
/// does not fit.
pub(crate) fn join_clean(base: &[u8], rel: &[u8], out: &mut [u8]) -> usize {
    let mut n = 0;
    let parts: [&[u8]; 2] = if rel.first() == Some(&b'/') { [b"", rel] } else { [base, rel] };
    for part in parts {
        for comp in part.split(|&c| c == b'/') {
            match comp {
                b"" | b"." => {}
                b".." => {
                    let cut = out.get(..n).and_then(|o| o.iter().rposition(|&c| c == b'/')).unwrap_or(0);
                    n = cut;
                }
                _ => {
                    if !push(out, &mut n, b"/") || !push(out, &mut n, comp) {
                        return 0;
                    }
                }
            }
        }
    }
    if n == 0 && !push(out, &mut n, b"/") {
        return 0;
    }
    n
}

/// Reads the NUL-terminated string at `addr` into `buf`, a page at a time
/// (a string may end right before an unmapped page); its length.
fn read_cstr(mem: &impl Memory, addr: u64, buf: &mut [u8]) -> Option<usize> {
    let mut got = 0usize;
    while got < buf.len() {
        let at = addr.wrapping_add(got as u64);
        let page_left = 4096 - (at % 4096) as usize;
        let n = page_left.min(buf.len() - got);
        let chunk = buf.get_mut(got..got + n)?;
        if !mem.read(at, chunk) {
            return None;
        }
        if let Some(z) = chunk.iter().position(|&c| c == 0) {
            return Some(got + z);
        }
        got += n;
    }
    None
}

/// Writes the decimal `v` into `out` at `*n`.
fn push_num(out: &mut [u8], n: &mut usize, mut v: u64) -> bool {
    let mut digits = [0u8; 20];
    let mut k = 0;
    loop {
        if let Some(d) = digits.get_mut(k) {
            *d = b'0' + (v % 10) as u8;
        }
        k += 1;
        v /= 10;
        if v == 0 || k >= digits.len() {
            break;
        }
    }
    while k > 0 {
        k -= 1;
        if !push(out, n, &[digits.get(k).copied().unwrap_or(b'0')]) {
            return false;
        }
    }
    true
}

/// The directory a relative path of thread `pid` starts from: its working
/// directory, or what descriptor `dirfd` names (the run's procfs).
fn base_of(proc: RawFd, pid: i32, dirfd: Option<i32>, out: &mut [u8]) -> Option<usize> {
    let mut name = [0u8; 48];
    let mut n = 0;
    let ok = push_num(&mut name, &mut n, pid as u64)
        && match dirfd {
            None => push(&mut name, &mut n, b"/cwd"),
            Some(fd) => push(&mut name, &mut n, b"/fd/") && push_num(&mut name, &mut n, fd as u64),
        }
        && push(&mut name, &mut n, b"\0");
    if !ok || pid <= 0 || dirfd.is_some_and(|fd| fd < 0) {
        return None;
    }
    let c = std::ffi::CStr::from_bytes_with_nul(name.get(..n)?).ok()?;
    let len = sys::readlinkat_into(proc, c, out).ok()?;
    // A pipe, a socket, a deleted directory: no path to classify.
    (out.first() == Some(&b'/')).then_some(len)
}

/// One path of a notified call, classified; recorded when refused.
#[allow(clippy::too_many_arguments)]
fn check_path(
    log: &FsLog,
    view: &WatchView,
    proc: RawFd,
    pid: i32,
    nr: u32,
    write: bool,
    addr: u64,
    dirfd: Option<u64>,
    mem: &impl Memory,
) -> bool {
    let mut rel = [0u8; PATH_KEPT];
    let Some(len) = read_cstr(mem, addr, &mut rel) else { return false };
    let rel = rel.get(..len).unwrap_or(&[]);
    if rel.is_empty() {
        // AT_EMPTY_PATH and the like: the descriptor itself, not a path.
        return false;
    }
    let mut base = [0u8; PATH_KEPT];
    let base_len = if rel.first() == Some(&b'/') {
        0
    } else {
        let fd = dirfd.map(|d| d as i32).filter(|&d| d != libc::AT_FDCWD);
        match base_of(proc, pid, fd, &mut base) {
            Some(n) => n,
            None => return false,
        }
    };
    let mut full = [0u8; PATH_KEPT];
    let n = join_clean(base.get(..base_len).unwrap_or(&[]), rel, &mut full);
    if n == 0 {
        return false;
    }
    let path = full.get(..n).unwrap_or(&[]);
    let (place, _) = classify(view, path);
    let kind = match (write, place) {
        (true, Place::ReadOnly | Place::Hidden) => KIND_WRITE,
        (false, Place::Hidden) => KIND_READ_HIDDEN,
        _ => return false,
    };
    if !mem.still_valid() {
        return false;
    }
    log.record(kind, nr, path);
    true
}

/// Records a notified file call (`nr`, native) of thread `pid` if the view
/// refuses it. `proc`: the run's procfs.
pub(crate) fn observe(
    log: &FsLog,
    view: &WatchView,
    proc: RawFd,
    pid: i32,
    nr: i32,
    args: &[u64; 6],
    mem: &impl Memory,
) {
    let Some(c) = fs_call(i64::from(nr)) else { return };
    let write = match c.access {
        Access::Write => true,
        Access::Flags(i) => args.get(i).is_some_and(|f| f & WRITE_FLAGS != 0),
        Access::How(i) => {
            let mut b = [0u8; 8];
            let Some(&at) = args.get(i) else { return };
            if !mem.read(at, &mut b) {
                return;
            }
            u64::from_ne_bytes(b) & WRITE_FLAGS != 0
        }
    };
    if nr as i64 == libc::SYS_utimensat && args.get(1) == Some(&0) {
        return; // futimens: a descriptor, no path
    }
    let at = |i: usize| args.get(i).copied().unwrap_or(0);
    let dir = |d: Option<usize>| d.map(at);
    if !check_path(log, view, proc, pid, nr as u32, write, at(c.path), dir(c.dir), mem) {
        if let Some((p, d)) = c.also {
            check_path(log, view, proc, pid, nr as u32, write, at(p), dir(d), mem);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_joined_and_cleaned() {
        let mut out = [0u8; 64];
        let j = |base: &str, rel: &str, out: &mut [u8; 64]| {
            let n = join_clean(base.as_bytes(), rel.as_bytes(), out);
            String::from_utf8(out[..n].to_vec()).unwrap()
        };
        assert_eq!(j("/home/me/proj", "a/./b//c", &mut out), "/home/me/proj/a/b/c");
        assert_eq!(j("/home/me/proj", "../x", &mut out), "/home/me/x");
        assert_eq!(j("/home/me", "/etc/../etc/hosts", &mut out), "/etc/hosts");
        assert_eq!(j("/", "../../..", &mut out), "/");
        let mut small = [0u8; 4];
        assert_eq!(join_clean(b"/abc", b"defgh", &mut small), 0);
    }

    #[test]
    fn every_watched_call_is_known() {
        for &nr in crate::plan::seccomp::FS_WATCHED {
            assert!(fs_call(nr).is_some(), "{nr}");
        }
        assert!(fs_call(libc::SYS_read).is_none());
    }

    /// Memory that is a byte slice at address 0x1000.
    struct Slice<'a>(&'a [u8]);
    impl Memory for Slice<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let at = addr.wrapping_sub(0x1000) as usize;
            match self.0.get(at..at + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
        fn still_valid(&self) -> bool {
            true
        }
    }

    #[test]
    fn strings_are_read_up_to_their_nul() {
        // One page, the string at its end: read up to the page's end only.
        let mut page = [b'x'; 4096];
        page[4096 - 11..].copy_from_slice(b"/etc/hosts\0");
        let mem = Slice(&page);
        let mut buf = [0u8; 64];
        assert_eq!(read_cstr(&mem, 0x1000 + 4096 - 11, &mut buf), Some(10));
        assert_eq!(&buf[..10], b"/etc/hosts");
        // No NUL within the buffer.
        assert_eq!(read_cstr(&mem, 0x1000, &mut buf), None);
        // No NUL before the end of the page, and the page after is not there.
        let mem = Slice(&[b'x'; 4096]);
        assert_eq!(read_cstr(&mem, 0x1000 + 4096 - 4, &mut buf), None);
    }
}
