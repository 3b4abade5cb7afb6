//! Paths and files: open (openat2 in a root), stat, directories, links, small reads.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, read, retry, SysResult};

pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

pub fn open(path: &CStr, flags: i32, mode: u32) -> SysResult<OwnedFd> {
    openat(libc::AT_FDCWD, path, flags, mode)
}

pub fn openat(dir: RawFd, path: &CStr, flags: i32, mode: u32) -> SysResult<OwnedFd> {
    let fd = retry(|| {
        // SAFETY: path is NUL-terminated. `dir` may be AT_FDCWD (negative),
        // sign-extended by `as u64`.
        cvt(unsafe {
            raw_syscall(
                libc::SYS_openat,
                [dir as u64, path.as_ptr() as u64, (flags | libc::O_CLOEXEC) as u64, mode as u64, 0, 0],
            )
        })
    })?;
    Ok(owned(fd))
}

/// openat2 with `RESOLVE_IN_ROOT`: `path` resolves as if `root` were `/`,
/// symlinks included, so a sandbox path never escapes the sandbox tree.
pub fn open_in_root(root: RawFd, path: &CStr, flags: i32, mode: u32) -> SysResult<OwnedFd> {
    openat2(root, path, flags, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
}

/// [`open_in_root`] following no symbolic link at all (`ELOOP` on one).
pub fn open_in_root_nofollow(root: RawFd, path: &CStr, flags: i32) -> SysResult<OwnedFd> {
    openat2(root, path, flags, 0, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)
}

/// openat2(2) of `path` under `root` with the `resolve` restrictions; always close-on-exec.
pub(super) fn openat2(root: RawFd, path: &CStr, flags: i32, mode: u32, resolve: u64) -> SysResult<OwnedFd> {
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: mode as u64, resolve };
    let fd = retry(|| {
        // SAFETY: path is NUL-terminated; how is a valid open_how of the size passed.
        cvt(unsafe {
            raw_syscall(
                libc::SYS_openat2,
                [
                    root as u64,
                    path.as_ptr() as u64,
                    &how as *const OpenHow as u64,
                    std::mem::size_of::<OpenHow>() as u64,
                    0,
                    0,
                ],
            )
        })
    })?;
    Ok(owned(fd))
}

pub fn mkdirat(dir: RawFd, name: &CStr, mode: u32) -> SysResult<()> {
    // SAFETY: name is NUL-terminated; `dir` (maybe AT_FDCWD) is sign-extended.
    cvt(unsafe { raw_syscall(libc::SYS_mkdirat, [dir as u64, name.as_ptr() as u64, mode as u64, 0, 0, 0]) }).map(drop)
}

/// Sets `path`'s access and modification times to now, without following
/// a final symlink (works on sockets, which cannot be opened).
pub fn touch(path: &CStr) -> SysResult<()> {
    // SAFETY: path is NUL-terminated; a null `times` means now.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_utimensat,
            [libc::AT_FDCWD as u64, path.as_ptr() as u64, 0, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0],
        )
    })
    .map(drop)
}

pub fn symlinkat(target: &CStr, dir: RawFd, name: &CStr) -> SysResult<()> {
    // SAFETY: both strings are NUL-terminated; `dir` (maybe AT_FDCWD) is sign-extended.
    cvt(unsafe {
        raw_syscall(libc::SYS_symlinkat, [target.as_ptr() as u64, dir as u64, name.as_ptr() as u64, 0, 0, 0])
    })
    .map(drop)
}

/// newfstatat(2): what glibc's fstatat does on x86_64 and aarch64, whose `struct
/// stat` is the kernel's.
fn newfstatat(dir: RawFd, path: &CStr, flags: i32) -> SysResult<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: path is NUL-terminated; st is a writable stat buffer.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_newfstatat,
            [dir as u64, path.as_ptr() as u64, st.as_mut_ptr() as u64, flags as u64, 0, 0],
        )
    })?;
    // SAFETY: newfstatat succeeded, so st is initialized.
    Ok(unsafe { st.assume_init() })
}

/// stat(2) of `path` (`follow`) or lstat(2) (not).
pub fn stat_path(path: &CStr, follow: bool) -> SysResult<libc::stat> {
    newfstatat(libc::AT_FDCWD, path, if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW })
}

/// lstat(2) of `name` in the directory `dir` (a link is not followed).
pub fn lstat_at(dir: RawFd, name: &CStr) -> SysResult<libc::stat> {
    newfstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW)
}

/// unlinkat(2): removes `name` in `dir`, a directory with `dir_flag`
/// (AT_REMOVEDIR); a link is removed, never followed.
pub fn unlinkat(dir: RawFd, name: &CStr, dir_flag: bool) -> SysResult<()> {
    let flags = if dir_flag { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: name is NUL-terminated; `dir` (maybe AT_FDCWD) is sign-extended.
    cvt(unsafe { raw_syscall(libc::SYS_unlinkat, [dir as u64, name.as_ptr() as u64, flags as u64, 0, 0, 0]) }).map(drop)
}

/// fchownat(2) of `name` in `dir` to `uid`, `gid`, never following a
/// link (a link itself is changed); an empty `name` with `dir` an open
/// file: that file (AT_EMPTY_PATH).
pub fn chown_at(dir: RawFd, name: &CStr, uid: u32, gid: u32) -> SysResult<()> {
    let flags = libc::AT_SYMLINK_NOFOLLOW | if name.is_empty() { libc::AT_EMPTY_PATH } else { 0 };
    // SAFETY: name is NUL-terminated; plain integers otherwise.
    cvt(unsafe {
        raw_syscall(libc::SYS_fchownat, [dir as u64, name.as_ptr() as u64, uid as u64, gid as u64, flags as u64, 0])
    })
    .map(drop)
}

/// Sets the mode of the file `fd` refers to, `O_PATH` descriptors
/// included (through `/proc/self/fd`: no path lookup of the file itself).
pub fn chmod_fd(fd: RawFd, mode: u32) -> SysResult<()> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
    // SAFETY: path is NUL-terminated; fchmodat follows the magic link to the object itself.
    cvt(unsafe { raw_syscall(libc::SYS_fchmodat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, mode as u64, 0, 0, 0]) })
        .map(drop)
}

/// The filesystem type (`f_type`, statfs(2)) of the filesystem holding `path`.
pub fn fs_type(path: &CStr) -> SysResult<i64> {
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: path is NUL-terminated; st is a writable statfs buffer.
    cvt(unsafe { raw_syscall(libc::SYS_statfs, [path.as_ptr() as u64, st.as_mut_ptr() as u64, 0, 0, 0, 0]) })?;
    // SAFETY: statfs succeeded, so st is initialized.
    Ok(unsafe { st.assume_init() }.f_type)
}

/// Free blocks and free inodes (`f_bavail`, `f_ffree`, fstatfs(2)) of the
/// filesystem holding `fd`.
pub fn fs_free(fd: RawFd) -> SysResult<(u64, u64)> {
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: st is a writable statfs buffer.
    cvt(unsafe { raw_syscall(libc::SYS_fstatfs, [fd as u64, st.as_mut_ptr() as u64, 0, 0, 0, 0]) })?;
    // SAFETY: fstatfs succeeded, so st is initialized.
    let st = unsafe { st.assume_init() };
    Ok((st.f_bavail, st.f_ffree))
}

/// lseek(2) with `SEEK_DATA` (`data`) or `SEEK_HOLE` from `off`: None when
/// no data follows `off` (ENXIO).
pub fn seek_data(fd: RawFd, off: i64, data: bool) -> SysResult<Option<i64>> {
    let whence = if data { libc::SEEK_DATA } else { libc::SEEK_HOLE };
    // SAFETY: plain syscall on integers.
    match cvt(unsafe { raw_syscall(libc::SYS_lseek, [fd as u64, off as u64, whence as u64, 0, 0, 0]) }) {
        Ok(n) => Ok(Some(n)),
        Err(libc::ENXIO) => Ok(None),
        Err(e) => Err(e),
    }
}

/// File type bits (`S_IFMT`) of an fd.
pub fn fd_mode(fd: RawFd) -> SysResult<u32> {
    fstat(fd).map(|st| st.st_mode & libc::S_IFMT)
}

/// fstat(2) of an fd, `O_PATH` ones included (supervisor side).
pub fn fstat(fd: RawFd) -> SysResult<libc::stat> {
    newfstatat(fd, c"", libc::AT_EMPTY_PATH)
}

/// The target of the symbolic link `fd` refers to (an `O_PATH |
/// O_NOFOLLOW` descriptor of the link itself).
pub fn readlink_fd(fd: RawFd) -> SysResult<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: buf is writable for buf.len() bytes; the empty path reads the link fd refers to.
    let n = cvt(unsafe {
        raw_syscall(
            libc::SYS_readlinkat,
            [fd as u64, c"".as_ptr() as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0],
        )
    })?;
    if n as usize >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The target of the link `name` in `dir` into `buf`, without allocating
/// (PID 1's reader); its length, `ENAMETOOLONG` when it does not fit.
pub fn readlinkat_into(dir: RawFd, name: &CStr, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: name is NUL-terminated; buf is writable for buf.len() bytes.
    let n = cvt(unsafe {
        raw_syscall(
            libc::SYS_readlinkat,
            [dir as u64, name.as_ptr() as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0],
        )
    })? as usize;
    if n >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(n)
}

/// Reads a whole file a client named (a policy file, a layer's record)
/// without ever waiting on it: opened with O_NONBLOCK, so a FIFO opens at
/// once, and refused unless it is a regular file.
pub fn read_regular_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        use std::os::unix::fs::MetadataExt;
        let kind = crate::error::file_kind(m.mode());
        return Err(std::io::Error::other(format!("it is {kind}, not a regular file")));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// Opens anew, with `flags`, the file an `O_PATH` descriptor refers to
/// (through `/proc/self/fd`: no path lookup of the file itself).
pub fn reopen(fd: RawFd, flags: i32) -> SysResult<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
    open(&path, flags, 0)
}

/// Whether the caller may write `path` (access(2) with W_OK).
pub fn access_w(path: &CStr) -> bool {
    #[cfg(target_arch = "x86_64")]
    let a = [path.as_ptr() as u64, libc::W_OK as u64, 0, 0, 0, 0];
    // aarch64 has only faccessat: the same call relative to the working directory.
    #[cfg(target_arch = "aarch64")]
    let a = [libc::AT_FDCWD as u64, path.as_ptr() as u64, libc::W_OK as u64, 0, 0, 0];
    #[cfg(target_arch = "x86_64")]
    let nr = libc::SYS_access;
    #[cfg(target_arch = "aarch64")]
    let nr = libc::SYS_faccessat;
    // SAFETY: path is NUL-terminated.
    unsafe { raw_syscall(nr, a) == 0 }
}

pub fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_chdir, [path.as_ptr() as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

pub fn fchdir(fd: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on an integer fd.
    cvt(unsafe { raw_syscall(libc::SYS_fchdir, [fd as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

/// Reads directory entries (`struct linux_dirent64` records) into `buf`;
/// 0 at the end of the directory. Walk them with [`dirent_names`].
pub fn getdents64(dir: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    retry(|| {
        // SAFETY: the kernel writes at most buf.len() bytes into buf.
        cvt(unsafe {
            raw_syscall(libc::SYS_getdents64, [dir as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0])
        })
    })
    .map(|n| n as usize)
}

/// The names of the `linux_dirent64` records `getdents64` wrote into
/// `buf` (`.` and `..` included); a malformed record ends the walk with
/// EIO. No allocation.
pub fn dirent_names(buf: &[u8]) -> impl Iterator<Item = SysResult<&[u8]>> {
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + 19 > buf.len() {
            return None;
        }
        let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        if reclen < 19 || at + reclen > buf.len() {
            at = buf.len();
            return Some(Err(libc::EIO));
        }
        let name = &buf[at + 19..at + reclen];
        at += reclen;
        Some(Ok(&name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())]))
    })
}

/// Reads a small file (a procfs file is generated anew on every read)
/// into a string with one read where it fits; "" when it cannot be read.
pub fn read_small(path: &CStr) -> String {
    let Ok(fd) = open(path, libc::O_RDONLY | libc::O_CLOEXEC, 0) else { return String::new() };
    let mut buf = [0u8; 4096];
    let mut out = Vec::new();
    loop {
        match read(fd.as_raw_fd(), &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sets the file mode creation mask; returns the old one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: plain syscall, cannot fail.
    unsafe { raw_syscall(libc::SYS_umask, [mask as u64, 0, 0, 0, 0, 0]) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirent_names_walks_getdents64_records() {
        let dir = std::env::temp_dir().join(format!("capsule-dirents-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a-file"), "").unwrap();
        let fd = open(&std::ffi::CString::new(dir.to_str().unwrap()).unwrap(), libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = getdents64(fd.as_raw_fd(), &mut buf).unwrap();
        let mut names: Vec<&[u8]> = dirent_names(&buf[..n]).map(Result::unwrap).collect();
        names.sort();
        assert_eq!(names, [&b"."[..], b"..", b"a-file", b"sub"]);
        assert_eq!(getdents64(fd.as_raw_fd(), &mut buf).unwrap(), 0, "the end");
        // A record whose length runs past the data ends the walk with EIO.
        let mut bad = buf[..n].to_vec();
        bad[16..18].copy_from_slice(&(n as u16 + 8).to_ne_bytes());
        assert_eq!(dirent_names(&bad).collect::<Vec<_>>(), [Err(libc::EIO)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
