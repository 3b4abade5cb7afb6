//! Raw system calls of the layer review and commit (`crate::layer`):
//! `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, directory
//! listing by descriptor (`getdents64`), `*xattr` of an entry named
//! relative to a directory descriptor, `renameat2`, `linkat` of an
//! `O_TMPFILE`, `unlinkat`, `mknodat` (whiteouts, FIFOs), `flock`.
//!
//! Names are single path components (no `/`) given as NUL-free byte
//! strings; the wrappers build the C strings. Nothing here follows a
//! symbolic link unless the caller passes a flag that says so.

use std::ffi::CString;
use std::os::fd::{OwnedFd, RawFd};

use super::{retry, Errno, SysResult, RESOLVE_NO_MAGICLINKS};

/// The calling thread's errno. The calls of this module are libc's and
/// read it: supervisor side only, never PID 1 or the tracee.
fn errno() -> Errno {
    // SAFETY: __errno_location returns a valid thread-local pointer.
    unsafe { *libc::__errno_location() }
}

/// A libc call's result: negative is failure with errno set.
fn check(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// [`check`] of an int result.
fn check_int(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// `RESOLVE_NO_SYMLINKS`: fail with `ELOOP` on any symbolic link on the way.
pub use super::RESOLVE_NO_SYMLINKS;
/// `RESOLVE_BENEATH`: fail with `EXDEV` on any escape from the directory.
pub const RESOLVE_BENEATH: u64 = 0x08;
/// `RENAME_NOREPLACE`.
pub const RENAME_NOREPLACE: u32 = 1;
/// `RENAME_EXCHANGE`.
pub const RENAME_EXCHANGE: u32 = 2;

fn cstr(b: &[u8]) -> SysResult<CString> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// openat2(2): `path` (relative to `dir`, or absolute) opened with `flags`
/// under the `resolve` restrictions; always close-on-exec.
pub fn openat2(dir: RawFd, path: &[u8], flags: i32, mode: u32, resolve: u64) -> SysResult<OwnedFd> {
    super::openat2(dir, &cstr(path)?, flags, mode, resolve | RESOLVE_NO_MAGICLINKS)
}

/// openat(2) of one entry of `dir` (`O_NOFOLLOW` is up to the caller).
pub fn openat_name(dir: RawFd, name: &[u8], flags: i32, mode: u32) -> SysResult<OwnedFd> {
    let name = cstr(name)?;
    super::openat(dir, &name, flags, mode)
}

/// lstat of one entry of `dir` (`fstatat(AT_SYMLINK_NOFOLLOW)`); an empty
/// name stats `dir` itself.
pub fn lstat_at(dir: RawFd, name: &[u8]) -> SysResult<libc::stat> {
    let name = cstr(name)?;
    let flags = if name.as_bytes().is_empty() { libc::AT_EMPTY_PATH } else { 0 } | libc::AT_SYMLINK_NOFOLLOW;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: name is NUL-terminated; st is a writable stat buffer.
    check_int(unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so st is initialized.
    Ok(unsafe { st.assume_init() })
}

/// The target of the symbolic link `name` in `dir`.
pub fn readlink_at(dir: RawFd, name: &[u8]) -> SysResult<Vec<u8>> {
    let name = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: name is NUL-terminated; buf is writable for buf.len() bytes.
    let n = check(unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) } as _)?;
    if n as usize >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The names in the directory `dir` refers to (any descriptor of it, even
/// `O_PATH`: it is reopened for reading), without `.` and `..`.
pub fn list_dir(dir: RawFd) -> SysResult<Vec<Vec<u8>>> {
    let fd = super::openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut names = Vec::new();
    let mut buf = vec![0u8; 32768];
    loop {
        let n = super::getdents64(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut buf)?;
        if n == 0 {
            break;
        }
        for name in super::dirent_names(&buf[..n]) {
            let name = name?;
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
    }
    Ok(names)
}

/// `/proc/self/fd/DIR/NAME`: the entry `name` of the directory `dir`
/// refers to, for the calls that have no `*at` form. The magic link is
/// the directory itself (no lookup by path), and the `l*` calls used with
/// it do not follow a link at `name`.
fn proc_path(dir: RawFd, name: &[u8]) -> SysResult<CString> {
    let mut p = format!("/proc/self/fd/{dir}").into_bytes();
    if !name.is_empty() {
        p.push(b'/');
        p.extend_from_slice(name);
    }
    cstr(&p)
}

/// The extended attribute names of the entry `name` of `dir` (never
/// following a link at `name`; an empty name: `dir` itself).
pub fn list_xattrs_at(dir: RawFd, name: &[u8]) -> SysResult<Vec<Vec<u8>>> {
    let p = proc_path(dir, name)?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: p is NUL-terminated; buf is writable for buf.len() bytes.
        // An empty name: the magic link itself must be followed to `dir`.
        let r = unsafe {
            if name.is_empty() {
                libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            } else {
                libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            }
        };
        match check(r as _) {
            Ok(n) => {
                buf.truncate(n as usize);
                return Ok(buf.split(|&b| b == 0).filter(|s| !s.is_empty()).map(<[u8]>::to_vec).collect());
            }
            Err(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Err(libc::EOPNOTSUPP) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    }
}

/// The value of the extended attribute `attr` of the entry `name` of
/// `dir` (never following a link at `name`), or None when it has none.
pub fn get_xattr_at(dir: RawFd, name: &[u8], attr: &str) -> SysResult<Option<Vec<u8>>> {
    let p = proc_path(dir, name)?;
    let attr = cstr(attr.as_bytes())?;
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated; buf is writable for buf.len()
    // bytes. An empty name: the magic link itself is followed to `dir`.
    let r = unsafe {
        if name.is_empty() {
            libc::getxattr(p.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        } else {
            libc::lgetxattr(p.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        }
    };
    match check(r as _) {
        Ok(n) => {
            buf.truncate(n as usize);
            Ok(Some(buf))
        }
        Err(libc::ENODATA) | Err(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets the extended attribute `attr` of the entry `name` of `dir` (never
/// following a link at `name`). Used to craft layers in tests.
pub fn set_xattr_at(dir: RawFd, name: &[u8], attr: &str, value: &[u8]) -> SysResult<()> {
    let p = proc_path(dir, name)?;
    let attr = cstr(attr.as_bytes())?;
    // SAFETY: both strings are NUL-terminated; value is readable for
    // value.len() bytes. An empty name: the magic link is followed to `dir`.
    check_int(unsafe {
        if name.is_empty() {
            libc::setxattr(p.as_ptr(), attr.as_ptr(), value.as_ptr().cast(), value.len(), 0)
        } else {
            libc::lsetxattr(p.as_ptr(), attr.as_ptr(), value.as_ptr().cast(), value.len(), 0)
        }
    })
    .map(drop)
}

/// chmod of what the descriptor `fd` refers to (`O_PATH` ones included:
/// through its `/proc/self/fd` magic link, which is the object itself).
pub fn chmod_fd(fd: RawFd, mode: u32) -> SysResult<()> {
    let p = proc_path(fd, b"")?;
    // SAFETY: p is NUL-terminated.
    check_int(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// unlinkat(2) of the entry `name` of `dir` (`AT_REMOVEDIR` for a directory).
pub fn unlink_at(dir: RawFd, name: &[u8], remove_dir: bool) -> SysResult<()> {
    let name = cstr(name)?;
    let flags = if remove_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: name is NUL-terminated.
    check_int(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(drop)
}

/// mkdirat(2) of the entry `name` of `dir`.
pub fn mkdir_at(dir: RawFd, name: &[u8], mode: u32) -> SysResult<()> {
    super::mkdirat(dir, &cstr(name)?, mode)
}

/// symlinkat(2): creates the link `name` in `dir` pointing to `target`.
pub fn symlink_at(target: &[u8], dir: RawFd, name: &[u8]) -> SysResult<()> {
    super::symlinkat(&cstr(target)?, dir, &cstr(name)?)
}

/// mknodat(2) of a FIFO `name` in `dir`.
pub fn mkfifo_at(dir: RawFd, name: &[u8], mode: u32) -> SysResult<()> {
    let name = cstr(name)?;
    // SAFETY: name is NUL-terminated.
    check_int(unsafe { libc::mknodat(dir, name.as_ptr(), libc::S_IFIFO | (mode & 0o7777), 0) }).map(drop)
}

/// mknodat(2) of an overlayfs whiteout `name` in `dir`: a character device
/// 0:0, which an unprivileged user may create since Linux 5.8.
pub fn mknod_whiteout_at(dir: RawFd, name: &[u8]) -> SysResult<()> {
    let name = cstr(name)?;
    // SAFETY: name is NUL-terminated.
    check_int(unsafe { libc::mknodat(dir, name.as_ptr(), libc::S_IFCHR, 0) }).map(drop)
}

/// renameat2(2) within or across directories, with `RENAME_NOREPLACE`,
/// `RENAME_EXCHANGE` or 0.
pub fn rename_at(old_dir: RawFd, old: &[u8], new_dir: RawFd, new: &[u8], flags: u32) -> SysResult<()> {
    let (old, new) = (cstr(old)?, cstr(new)?);
    // SAFETY: both names are NUL-terminated.
    check_int(unsafe { libc::renameat2(old_dir, old.as_ptr(), new_dir, new.as_ptr(), flags) }).map(drop)
}

/// Gives the unnamed `O_TMPFILE` file `fd` the name `name` in `dir`
/// (linkat of its `/proc/self/fd` link with `AT_SYMLINK_FOLLOW`, which
/// needs no capability, unlike `AT_EMPTY_PATH`).
pub fn link_tmpfile_at(fd: RawFd, dir: RawFd, name: &[u8]) -> SysResult<()> {
    let from = proc_path(fd, b"")?;
    let name = cstr(name)?;
    // SAFETY: both paths are NUL-terminated.
    check_int(unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), dir, name.as_ptr(), libc::AT_SYMLINK_FOLLOW) })
        .map(drop)
}

/// flock(2) without waiting: `LOCK_EX` or `LOCK_SH` with `LOCK_NB`
/// (`EWOULDBLOCK` when another holder conflicts).
pub fn flock_nb(fd: RawFd, exclusive: bool) -> SysResult<()> {
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    // SAFETY: plain syscall on integers.
    retry(|| check_int(unsafe { libc::flock(fd, op) })).map(drop)
}

/// An errno as the `Errno` type (for callers outside `sys`).
pub fn errno_of(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// syncfs(2): writes back everything of the filesystem `fd` is on.
pub fn syncfs(fd: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on an integer.
    retry(|| check_int(unsafe { libc::syncfs(fd) })).map(drop)
}

/// ftruncate(2): sets the file's size (a hole where it grows).
pub fn ftruncate(fd: RawFd, size: u64) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    retry(|| check_int(unsafe { libc::ftruncate(fd, size as libc::off_t) })).map(drop)
}
