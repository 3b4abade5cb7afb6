//! Every raw system call capsule makes, and every `unsafe` block, lives in
//! this module (and its `probe` submodule used by `capsule check`).
//!
//! Wrappers are thin: they take prepared, NUL-terminated arguments and
//! return `Result<_, Errno>` without allocating, so that the child path
//! after `clone` (PID 1 and the tracee) can call them. The typed,
//! allocating APIs live in the facility modules (`namespaces`, `mounts`, ...).
//!
//! Wrappers make their system calls with [`raw_syscall`] and turn the
//! kernel's -errno into `Err` with [`cvt`]: they never read or write errno.
//! PID 1 is a CLONE_VM child sharing the supervisor's thread-local storage,
//! errno included, and runs concurrently with it, so a libc wrapper setting
//! errno there would race with the supervisor's own errno reads. The
//! exceptions, supervisor or client side only: [`spawn_supervisor`]
//! (posix_spawn), and the glibc calls of the `layer`, `probe` and `tty`
//! submodules other than [`tty::set_controlling_tty`].

pub mod landlock;
pub mod layer;
pub mod probe;
pub mod seccomp;
pub mod tty;
pub mod vm;

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// A raw errno value.
pub type Errno = i32;
pub type SysResult<T> = Result<T, Errno>;

/// A raw result as a SysResult: -4095..=-1 is -errno.
fn cvt(ret: i64) -> SysResult<i64> {
    if (-4095..0).contains(&ret) {
        Err(-ret as Errno)
    } else {
        Ok(ret)
    }
}

/// Retries a call interrupted by a signal.
fn retry<T>(mut f: impl FnMut() -> SysResult<T>) -> SysResult<T> {
    loop {
        match f() {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

// ---------------------------------------------------------------------------
// Constants of the new mount API and friends (not all are in `libc`).

pub const OPEN_TREE_CLONE: u32 = 1;
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
pub const AT_RECURSIVE: u32 = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const FSOPEN_CLOEXEC: u32 = 1;
pub const FSCONFIG_SET_FLAG: u32 = 0;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;
pub const FSMOUNT_CLOEXEC: u32 = 1;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_IN_ROOT: u64 = 0x10;
pub const CLONE_PIDFD: u64 = 0x1000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
pub const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

#[repr(C)]
pub(super) struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
pub(super) struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

#[repr(C)]
#[derive(Default)]
pub(super) struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

// ---------------------------------------------------------------------------
// File descriptors.

/// Takes ownership of a raw fd returned by a successful syscall.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: callers pass only fds just returned by the kernel, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Takes ownership again of an fd released with `into_raw_fd`; the caller
/// guarantees nothing else owns it.
pub fn reclaim_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: per the contract above, `fd` is open and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// PR_CAP_AMBIENT(PR_CAP_AMBIENT_CLEAR_ALL).
pub fn prctl_ambient_clear() -> SysResult<()> {
    prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as u64)
}

pub fn close(fd: RawFd) {
    // SAFETY: closing an fd number has no memory-safety effect; callers
    // only close fds they own.
    unsafe { raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) };
}

pub fn dup2(old: RawFd, new: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on integer arguments.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_dup2, [old as u64, new as u64, 0, 0, 0, 0]) })).map(drop)
}

/// Marks every fd ≥ `first` close-on-exec (close_range, Linux ≥ 5.11).
pub fn cloexec_from(first: u32) -> SysResult<()> {
    // SAFETY: plain syscall on integer arguments.
    cvt(unsafe {
        raw_syscall(libc::SYS_close_range, [first as u64, u32::MAX as u64, CLOSE_RANGE_CLOEXEC as u64, 0, 0, 0])
    })
    .map(drop)
}

/// Closes every fd ≥ `first`.
pub fn close_from(first: u32) -> SysResult<()> {
    // SAFETY: plain syscall; callers own every fd in the range.
    cvt(unsafe { raw_syscall(libc::SYS_close_range, [first as u64, u32::MAX as u64, 0, 0, 0, 0]) }).map(drop)
}

/// fcntl(2) with an integer argument.
fn fcntl(fd: RawFd, cmd: i32, arg: i32) -> SysResult<i32> {
    // SAFETY: every command capsule uses takes an integer argument (or none).
    cvt(unsafe { raw_syscall(libc::SYS_fcntl, [fd as u64, cmd as u64, arg as u64, 0, 0, 0]) }).map(|r| r as i32)
}

pub fn set_cloexec(fd: RawFd, on: bool) -> SysResult<()> {
    let flags = fcntl(fd, libc::F_GETFD, 0)?;
    let new = if on { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
    fcntl(fd, libc::F_SETFD, new).map(drop)
}

/// The access mode of an open description (`O_RDONLY`, `O_WRONLY` or `O_RDWR`).
pub fn fd_access_mode(fd: RawFd) -> SysResult<i32> {
    fcntl(fd, libc::F_GETFL, 0).map(|f| f & libc::O_ACCMODE)
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    retry(|| {
        // SAFETY: buf is a valid writable region of buf.len() bytes.
        cvt(unsafe { raw_syscall(libc::SYS_read, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]) })
    })
    .map(|n| n as usize)
}

pub fn write(fd: RawFd, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: buf is a valid readable region of buf.len() bytes.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_write, [fd as u64, buf.as_ptr() as u64, buf.len() as u64, 0, 0, 0]) }))
        .map(|n| n as usize)
}

pub fn write_all(fd: RawFd, mut buf: &[u8]) -> SysResult<()> {
    while !buf.is_empty() {
        let n = write(fd, buf)?;
        if n == 0 {
            return Err(libc::EIO);
        }
        buf = &buf[n..];
    }
    Ok(())
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

fn openat2(root: RawFd, path: &CStr, flags: i32, mode: u32, resolve: u64) -> SysResult<OwnedFd> {
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

pub fn symlinkat(target: &CStr, dir: RawFd, name: &CStr) -> SysResult<()> {
    // SAFETY: both strings are NUL-terminated; `dir` (maybe AT_FDCWD) is sign-extended.
    cvt(unsafe {
        raw_syscall(libc::SYS_symlinkat, [target.as_ptr() as u64, dir as u64, name.as_ptr() as u64, 0, 0, 0])
    })
    .map(drop)
}

/// newfstatat(2): what glibc's fstatat does on x86_64, whose `struct
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

/// Copies everything readable from `from` to `to` with a stack buffer.
pub fn copy_fd(from: RawFd, to: RawFd) -> SysResult<()> {
    let mut buf = [0u8; 16384];
    loop {
        let n = read(from, &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        write_all(to, &buf[..n])?;
    }
}

/// Whether the caller may write `path` (access(2) with W_OK).
pub fn access_w(path: &CStr) -> bool {
    // SAFETY: path is NUL-terminated.
    unsafe { raw_syscall(libc::SYS_access, [path.as_ptr() as u64, libc::W_OK as u64, 0, 0, 0, 0]) == 0 }
}

/// flock(LOCK_EX), waiting for it.
pub fn flock_exclusive(fd: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_flock, [fd as u64, libc::LOCK_EX as u64, 0, 0, 0, 0]) })).map(drop)
}

/// flock without waiting: `Err(EWOULDBLOCK)` when another holds it.
pub fn flock_nb(fd: RawFd, exclusive: bool) -> SysResult<()> {
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    // SAFETY: plain syscall on integers.
    retry(|| cvt(unsafe { raw_syscall(libc::SYS_flock, [fd as u64, op as u64, 0, 0, 0, 0]) })).map(drop)
}

pub fn pread(fd: RawFd, buf: &mut [u8], offset: i64) -> SysResult<usize> {
    retry(|| {
        // SAFETY: buf is a valid writable region of buf.len() bytes.
        cvt(unsafe {
            raw_syscall(libc::SYS_pread64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, offset as u64, 0, 0])
        })
    })
    .map(|n| n as usize)
}

pub fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_chdir, [path.as_ptr() as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

pub fn fchdir(fd: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on an integer fd.
    cvt(unsafe { raw_syscall(libc::SYS_fchdir, [fd as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

// ---------------------------------------------------------------------------
// Mounts.

pub fn open_tree(dir: RawFd, path: &CStr, flags: u32) -> SysResult<OwnedFd> {
    // SAFETY: path is NUL-terminated; `dir` (maybe AT_FDCWD) is sign-extended.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_open_tree,
            [dir as u64, path.as_ptr() as u64, (flags | OPEN_TREE_CLOEXEC) as u64, 0, 0, 0],
        )
    })?;
    Ok(owned(fd))
}

/// Sets and clears mount attributes of the mount `fd` (and below, with `recursive`).
pub fn mount_setattr(fd: RawFd, recursive: bool, set: u64, clear: u64) -> SysResult<()> {
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 };
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: empty NUL-terminated path; attr is a valid mount_attr of the size passed.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_mount_setattr,
            [
                fd as u64,
                c"".as_ptr() as u64,
                flags as u64,
                &attr as *const MountAttr as u64,
                std::mem::size_of::<MountAttr>() as u64,
                0,
            ],
        )
    })
    .map(drop)
}

/// Attaches the detached (or moves the attached) mount `from` onto the
/// object `to` refers to.
pub fn move_mount_fd(from: RawFd, to: RawFd) -> SysResult<()> {
    // SAFETY: empty NUL-terminated paths with the EMPTY_PATH flags refer to the fds.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_move_mount,
            [
                from as u64,
                c"".as_ptr() as u64,
                to as u64,
                c"".as_ptr() as u64,
                (MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) as u64,
                0,
            ],
        )
    })
    .map(drop)
}

/// Attaches the mount `from` at `path` (relative to the cwd if not absolute).
pub fn move_mount_to_path(from: RawFd, path: &CStr) -> SysResult<()> {
    // SAFETY: both paths are NUL-terminated; AT_FDCWD is sign-extended.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_move_mount,
            [
                from as u64,
                c"".as_ptr() as u64,
                libc::AT_FDCWD as u64,
                path.as_ptr() as u64,
                MOVE_MOUNT_F_EMPTY_PATH as u64,
                0,
            ],
        )
    })
    .map(drop)
}

pub fn fsopen(fstype: &CStr) -> SysResult<OwnedFd> {
    // SAFETY: fstype is NUL-terminated.
    let fd =
        cvt(unsafe { raw_syscall(libc::SYS_fsopen, [fstype.as_ptr() as u64, FSOPEN_CLOEXEC as u64, 0, 0, 0, 0]) })?;
    Ok(owned(fd))
}

pub fn fsconfig_string(fs: RawFd, key: &CStr, value: &CStr) -> SysResult<()> {
    // SAFETY: key and value are NUL-terminated.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_fsconfig,
            [fs as u64, FSCONFIG_SET_STRING as u64, key.as_ptr() as u64, value.as_ptr() as u64, 0, 0],
        )
    })
    .map(drop)
}

/// `fsconfig(FSCONFIG_SET_FLAG)`: a parameter without a value.
pub fn fsconfig_flag(fs: RawFd, key: &CStr) -> SysResult<()> {
    // SAFETY: key is NUL-terminated; a flag takes no value pointer (0: NULL).
    cvt(unsafe { raw_syscall(libc::SYS_fsconfig, [fs as u64, FSCONFIG_SET_FLAG as u64, key.as_ptr() as u64, 0, 0, 0]) })
        .map(drop)
}

pub fn fsconfig_create(fs: RawFd) -> SysResult<()> {
    // SAFETY: CMD_CREATE takes no pointers (both NULL).
    cvt(unsafe { raw_syscall(libc::SYS_fsconfig, [fs as u64, FSCONFIG_CMD_CREATE as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn fsmount(fs: RawFd, attrs: u64) -> SysResult<OwnedFd> {
    // SAFETY: plain syscall on integers.
    let fd = cvt(unsafe { raw_syscall(libc::SYS_fsmount, [fs as u64, FSMOUNT_CLOEXEC as u64, attrs, 0, 0, 0]) })?;
    Ok(owned(fd))
}

pub fn mount_make_rprivate_root() -> SysResult<()> {
    // SAFETY: the target is NUL-terminated; source, type and data are NULL,
    // which the kernel allows for a propagation change.
    cvt(unsafe { raw_syscall(libc::SYS_mount, [0, c"/".as_ptr() as u64, 0, libc::MS_REC | libc::MS_PRIVATE, 0, 0]) })
        .map(drop)
}

/// pivot_root(".", "."): the current directory becomes the root and the old
/// root is stacked on it, to be detached with [`umount_detach_cwd`].
pub fn pivot_root_cwd() -> SysResult<()> {
    // SAFETY: both paths are NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_pivot_root, [c".".as_ptr() as u64, c".".as_ptr() as u64, 0, 0, 0, 0]) })
        .map(drop)
}

pub fn umount_detach_cwd() -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_umount2, [c".".as_ptr() as u64, libc::MNT_DETACH as u64, 0, 0, 0, 0]) })
        .map(drop)
}

// ---------------------------------------------------------------------------
// Processes, namespaces, credentials.

pub fn unshare(flags: i32) -> SysResult<()> {
    // SAFETY: plain syscall on an integer.
    cvt(unsafe { raw_syscall(libc::SYS_unshare, [flags as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

pub fn setns(fd: RawFd, nstype: i32) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { raw_syscall(libc::SYS_setns, [fd as u64, nstype as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn sethostname(name: &[u8]) -> SysResult<()> {
    // SAFETY: name is a valid region of name.len() bytes.
    cvt(unsafe { raw_syscall(libc::SYS_sethostname, [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, 0]) }).map(drop)
}

/// CPUs in the caller's affinity mask.
pub fn cpu_count() -> u64 {
    affinity().map_or(1, |set| cpus_in(&set).max(1) as u64)
}

pub fn sched_yield() {
    // SAFETY: plain syscall without arguments.
    unsafe { raw_syscall(libc::SYS_sched_yield, [0; 6]) };
}

pub fn getpid() -> i32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getpid, [0; 6]) as i32 }
}

pub fn getppid() -> i32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getppid, [0; 6]) as i32 }
}

pub fn getuid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getuid, [0; 6]) as u32 }
}

pub fn getgid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getgid, [0; 6]) as u32 }
}

pub fn geteuid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_geteuid, [0; 6]) as u32 }
}

pub fn setsid() -> SysResult<()> {
    // SAFETY: plain syscall without arguments.
    cvt(unsafe { raw_syscall(libc::SYS_setsid, [0; 6]) }).map(drop)
}

/// Result of a fork-like clone.
pub enum Forked {
    /// In the parent: the child's pid and, if asked for, its pidfd.
    Parent { pid: i32, pidfd: Option<OwnedFd> },
    /// In the child.
    Child,
}

/// clone3 without a new stack: returns twice, like fork. `flags` may hold
/// namespace flags, `CLONE_PIDFD` and `CLONE_INTO_CGROUP` (with `cgroup`).
///
/// The child must only make async-signal-safe calls and must end with
/// [`exit`] or `execve`; it must not return into code that assumes it is
/// the parent.
pub fn clone_fork(flags: u64, cgroup: Option<RawFd>) -> SysResult<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: flags | if cgroup.is_some() { CLONE_INTO_CGROUP } else { 0 },
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.unwrap_or(0) as u64,
        ..Default::default()
    };
    if flags & CLONE_PIDFD != 0 {
        args.pidfd = &mut pidfd as *mut RawFd as u64;
    }
    // SAFETY: args is a valid clone_args of the size passed; with stack 0 the
    // child continues on a copy of the parent's stack like fork(). Only the
    // calling thread exists in the child; callers' children take no locks
    // (they make raw syscalls only), so a lock another thread held at the
    // time of the clone cannot block them.
    let ret = cvt(unsafe {
        raw_syscall(
            libc::SYS_clone3,
            [&mut args as *mut CloneArgs as u64, std::mem::size_of::<CloneArgs>() as u64, 0, 0, 0, 0],
        )
    })?;
    if ret == 0 {
        Ok(Forked::Child)
    } else {
        let pidfd = (flags & CLONE_PIDFD != 0).then(|| owned(pidfd as _));
        Ok(Forked::Parent { pid: ret as i32, pidfd })
    }
}

/// Creates a child like posix_spawn: it shares the caller's memory and runs
/// `child(arg)` on `stack`, and the caller is suspended until the child
/// calls execve or exits (CLONE_VM | CLONE_VFORK). `flags` adds namespace
/// flags; with `cgroup`, the child is born in that cgroup
/// (CLONE_INTO_CGROUP: no migration afterwards, which would take the
/// cgroup threadgroup lock for writing and wait for an RCU grace period).
/// The child must only make raw syscalls (no allocation: the heap is the
/// caller's) and must end in execve or [`exit`].
pub fn clone_vfork<T>(flags: i32, cgroup: Option<RawFd>, stack: &Stack, arg: &T, child: fn(&T) -> !) -> SysResult<i32> {
    let call = Call { arg, child };
    let mut args = CloneArgs {
        flags: (flags as u64)
            | libc::CLONE_VM as u64
            | libc::CLONE_VFORK as u64
            | if cgroup.is_some() { CLONE_INTO_CGROUP } else { 0 },
        exit_signal: libc::SIGCHLD as u64,
        // clone3 takes the lowest address and the size; the kernel starts
        // the child at the top.
        stack: stack.base as u64,
        stack_size: (stack.len & !15) as u64,
        cgroup: cgroup.unwrap_or(0) as u64,
        ..Default::default()
    };
    // SAFETY: `stack` is a live mapping no other process uses while this
    // child runs (the caller is suspended until the child's execve or exit:
    // CLONE_VFORK), and so are `call` and `args`, on this frame.
    let ret = unsafe { clone3_on_stack(&mut args, &call) };
    if ret < 0 {
        Err(-ret as Errno)
    } else {
        Ok(ret as i32)
    }
}

/// What a child started on a stack of its own runs: `child(arg)`.
struct Call<'a, T> {
    arg: &'a T,
    child: fn(&T) -> !,
}

extern "C" fn trampoline<T>(p: *const libc::c_void) -> ! {
    // SAFETY: `p` is the `Call` the parent passed to clone3_on_stack, which
    // its callers keep alive and unchanged until the child has exec'd or
    // exited.
    let call = unsafe { &*(p as *const Call<'_, T>) };
    (call.child)(call.arg)
}

/// clone3 with `args` (CLONE_VM and a stack), the child calling
/// `call.child(call.arg)`; returns the child's pid or -errno.
///
/// # Safety
/// `args.stack` must be a live mapping that nothing else uses until the
/// child has exec'd or exited, and `call` must stay alive and unchanged
/// that long.
unsafe fn clone3_on_stack<T>(args: &mut CloneArgs, call: &Call<'_, T>) -> i64 {
    let ret: i64;
    // SAFETY: clone3 with CLONE_VM starts the child right after the
    // `syscall` instruction with the same registers but rsp at the top of
    // `args.stack`, a live mapping used only by this child (the caller's
    // contract). The child path never returns into Rust code: it calls
    // `trampoline(call)` (r12, r13 survive the syscall) on the new, 16-byte
    // aligned stack, and the trampoline ends in execve or _exit. `call` and
    // what it points to stay valid that long (the caller's contract); the
    // parent resumes here with rax = pid or -errno. rcx and r11 are
    // clobbered by `syscall`.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // child
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") trampoline::<T> as *const (),
            in("r13") call as *const Call<'_, T>,
            out("rcx") _,
            out("r11") _,
        );
    }
    ret
}

/// Runs `child(arg)` in a new process that shares the caller's memory and
/// descriptor table (CLONE_VM | CLONE_FILES), on `stack`, while the caller
/// goes on with `parent(pidfd)`, `pidfd` being the child's. When `parent`
/// returns (or unwinds), the child is killed if it still runs, and reaped:
/// `arg` and `stack` are borrowed for that whole time, so they outlive it.
/// Returns `parent`'s value and the child's wait status.
///
/// The child shares the caller's thread-local storage, errno included: it
/// must not allocate or panic, may only use this module's wrappers, which
/// leave errno alone (not the exceptions the module documentation lists),
/// and must end with [`exit`].
///
/// # Safety
/// Nothing else runs on `stack` until this returns (a run's PID 1 lends
/// the stack its tracee used until its execve).
pub unsafe fn with_vm_child<T: Sync, R>(
    stack: &Stack,
    arg: &T,
    child: fn(&T) -> !,
    parent: impl FnOnce(RawFd) -> R,
) -> SysResult<(R, i32)> {
    /// Kills (if need be) and reaps the child, also when `parent` unwinds.
    struct Reap(Option<OwnedFd>);
    impl Reap {
        fn finish(&mut self) -> i32 {
            let Some(fd) = self.0.take() else { return 0 };
            if let Ok(Some(status)) = pidfd_try_wait(fd.as_raw_fd()) {
                return status;
            }
            let _ = pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            pidfd_wait(fd.as_raw_fd()).ok().flatten().unwrap_or(libc::SIGKILL)
        }
    }
    impl Drop for Reap {
        fn drop(&mut self) {
            self.finish();
        }
    }
    let call = Call { arg, child };
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_VM as u64 | libc::CLONE_FILES as u64 | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: (stack.len & !15) as u64,
        ..Default::default()
    };
    // SAFETY: the child is reaped below (by `Reap`, also on unwinding)
    // before `stack` is used by anything else (the caller's contract);
    // `call` lives on this frame, unchanged, until then as well.
    let ret = unsafe { clone3_on_stack(&mut args, &call) };
    if ret < 0 {
        return Err(-ret as Errno);
    }
    let mut reap = Reap(Some(owned(pidfd as libc::c_long)));
    let fd = reap.0.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let r = parent(fd);
    let status = reap.finish();
    Ok((r, status))
}

/// A stack for [`clone_vfork`] children: a private anonymous mapping,
/// unmapped on drop. A forked process gets its own copy-on-write copy, so
/// one stack serves every run of a supervisor.
pub struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

/// mmap(2) at an address of the kernel's choice; the address or -errno.
///
/// # Safety
/// As mmap(2): `fd` must be -1 (anonymous) or a descriptor mapped as the
/// caller's uses of the mapping allow.
unsafe fn mmap(len: usize, prot: i32, flags: i32, fd: RawFd) -> SysResult<*mut libc::c_void> {
    // SAFETY: a new mapping at an address the kernel picks (addr 0, no
    // MAP_FIXED) replaces nothing; the rest is the caller's contract. fd
    // -1 is sign-extended.
    let r = cvt(unsafe { raw_syscall(libc::SYS_mmap, [0, len as u64, prot as u64, flags as u64, fd as u64, 0]) })?;
    Ok(r as usize as *mut libc::c_void)
}

/// munmap(2) of a mapping made by [`mmap`].
///
/// # Safety
/// Nothing may use `[base, base + len)` afterwards.
unsafe fn munmap(base: *mut libc::c_void, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { raw_syscall(libc::SYS_munmap, [base as u64, len as u64, 0, 0, 0, 0]) };
}

impl Stack {
    pub fn new(len: usize) -> SysResult<Self> {
        // SAFETY: anonymous private mapping, no fd; checked for failure.
        let base = unsafe {
            mmap(
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
            )
        }?;
        Ok(Stack { base, len })
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping created in new().
        unsafe { munmap(self.base, self.len) };
    }
}

/// memfd_create(2); the new descriptor.
fn memfd_create(name: &CStr, flags: u32) -> SysResult<OwnedFd> {
    // SAFETY: name is a valid C string; the flags are plain bits.
    let fd = cvt(unsafe { raw_syscall(libc::SYS_memfd_create, [name.as_ptr() as u64, flags as u64, 0, 0, 0, 0]) })?;
    Ok(owned(fd))
}

/// A new memfd (close-on-exec).
pub fn memfd(name: &CStr) -> SysResult<OwnedFd> {
    memfd_create(name, libc::MFD_CLOEXEC)
}

/// Plain-old-data slices stored in a [`SealedMap`] (no padding, no
/// pointers, any bit pattern valid).
pub trait Pod: Copy {}
impl Pod for libc::sock_filter {}
impl Pod for u8 {}

/// The read-only shared mapping of a sealed memfd: data written once and
/// never changed (F_SEAL_WRITE, SHRINK, GROW, SEAL), which processes forked
/// after it was made see at the same address without a copy. The
/// descriptor is closed once mapped (the mapping keeps the memfd alive), so
/// a supervisor holds no descriptor per policy.
pub struct SealedMap {
    base: *mut libc::c_void,
    /// Bytes of data (the mapping is at least one byte long).
    len: usize,
}

impl SealedMap {
    /// A sealed copy of `data`; `name` shows in /proc/PID/fd and maps.
    pub fn new<T: Pod>(name: &CStr, data: &[T]) -> SysResult<Self> {
        // SAFETY: T is Pod, so its bytes are initialized and may be viewed
        // as u8 for the slice's whole length.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) };
        let fd = memfd_create(name, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)?;
        write_all(fd.as_raw_fd(), bytes)?;
        let seals = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals)?;
        let map_len = bytes.len().max(1);
        // SAFETY: a new read-only shared mapping of our memfd (writable
        // shared mappings are what F_SEAL_WRITE forbids); checked for
        // failure. An empty file maps as one page that is never read.
        let base = unsafe { mmap(map_len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd()) }?;
        Ok(SealedMap { base, len: bytes.len() })
    }

    /// The data as `T`s (the mapping is page-aligned, so suitably aligned).
    pub fn as_slice<T: Pod>(&self) -> &[T] {
        // SAFETY: the mapping holds `len` bytes written from a [T] in new()
        // and sealed against change; page alignment satisfies T's alignment;
        // it lives as long as self (and in a forked child, for ever).
        unsafe { std::slice::from_raw_parts(self.base as *const T, self.len / std::mem::size_of::<T>()) }
    }
}

impl Drop for SealedMap {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping created in new().
        unsafe { munmap(self.base, self.len.max(1)) };
    }
}

/// fork() for a single-threaded caller.
pub fn fork() -> SysResult<Forked> {
    clone_fork(0, None)
}

/// Ends the calling process at once, without running destructors or atexit
/// handlers (the right way out of a forked child).
pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group never returns and touches no Rust state (the
        // loop only satisfies the type).
        unsafe { raw_syscall(libc::SYS_exit_group, [code as u64, 0, 0, 0, 0, 0]) };
    }
}

pub fn kill(pid: i32, sig: i32) -> SysResult<()> {
    // SAFETY: plain syscall on integers (a negative pid is sign-extended).
    cvt(unsafe { raw_syscall(libc::SYS_kill, [pid as u64, sig as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn pidfd_open(pid: i32) -> SysResult<OwnedFd> {
    // SAFETY: plain syscall on integers.
    let fd = cvt(unsafe { raw_syscall(libc::SYS_pidfd_open, [pid as u64, 0, 0, 0, 0, 0]) })?;
    Ok(owned(fd))
}

/// A reaped child: pid, raw wait status.
pub fn waitpid(pid: i32, nohang: bool) -> SysResult<Option<(i32, i32)>> {
    let mut status: libc::c_int = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 } | libc::__WALL;
    let r = retry(|| {
        // SAFETY: status is a writable int; no rusage (NULL). A negative pid
        // is sign-extended.
        cvt(unsafe {
            raw_syscall(libc::SYS_wait4, [pid as u64, &mut status as *mut libc::c_int as u64, flags as u64, 0, 0, 0])
        })
    })? as i32;
    Ok(if r == 0 { None } else { Some((r, status)) })
}

/// Rusage of all reaped children of the caller: (user µs, system µs, max RSS KiB).
pub fn rusage_children() -> (u64, u64, u64) {
    rusage(libc::RUSAGE_CHILDREN)
}

/// The calling process's own CPU time (user, system µs) and peak RSS (KiB).
pub fn rusage_self() -> (u64, u64, u64) {
    rusage(libc::RUSAGE_SELF)
}

fn rusage(who: i32) -> (u64, u64, u64) {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru is a writable rusage buffer (glibc's struct is the
    // kernel's on x86_64); `who` (RUSAGE_CHILDREN is -1) is sign-extended.
    unsafe { raw_syscall(libc::SYS_getrusage, [who as u64, ru.as_mut_ptr() as u64, 0, 0, 0, 0]) };
    // SAFETY: zeroed rusage is a valid value and getrusage fills it.
    let ru = unsafe { ru.assume_init() };
    let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime), ru.ru_maxrss as u64)
}

pub fn prctl(option: i32, arg2: u64) -> SysResult<()> {
    // SAFETY: prctl options used by capsule take integer arguments only.
    cvt(unsafe { raw_syscall(libc::SYS_prctl, [option as u64, arg2, 0, 0, 0, 0]) }).map(drop)
}

pub fn set_pdeathsig(sig: i32) -> SysResult<()> {
    prctl(libc::PR_SET_PDEATHSIG, sig as u64)
}

/// Names the calling thread (`/proc/PID/comm`, what `ps` and `top` show):
/// at most 15 bytes are kept.
pub fn set_comm(name: &CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes from the pointer, which `name` provides; it cannot fail.
    unsafe { raw_syscall(libc::SYS_prctl, [libc::PR_SET_NAME as u64, name.as_ptr() as u64, 0, 0, 0, 0]) };
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> SysResult<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into
    // `set`, which is that large (and zeroed: what it does not write, as
    // glibc's wrapper ensures, is empty). Success returns the bytes written.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_sched_getaffinity,
            [0, std::mem::size_of::<libc::cpu_set_t>() as u64, &mut set as *mut libc::cpu_set_t as u64, 0, 0, 0],
        )
    })?;
    Ok(set)
}

/// Restricts the calling thread to `set` (a thread may always change its
/// own affinity, within its cpuset).
pub fn set_affinity(set: &libc::cpu_set_t) -> SysResult<()> {
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes from `set`.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_sched_setaffinity,
            [0, std::mem::size_of::<libc::cpu_set_t>() as u64, set as *const libc::cpu_set_t as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// The CPU the calling thread runs on (it may move right after).
pub fn current_cpu() -> SysResult<usize> {
    let mut cpu: u32 = 0;
    // SAFETY: getcpu writes one unsigned int through its first pointer;
    // node and cache are NULL.
    cvt(unsafe { raw_syscall(libc::SYS_getcpu, [&mut cpu as *mut u32 as u64, 0, 0, 0, 0, 0]) })?;
    Ok(cpu as usize)
}

/// A set of CPUs holding just `cpu` (None past the set's 1024 CPUs).
pub fn one_cpu(cpu: usize) -> Option<libc::cpu_set_t> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return None;
    }
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET sets one bit of the set; `cpu` is within it (checked
    // above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    Some(set)
}

/// How many CPUs `set` holds.
pub fn cpus_in(set: &libc::cpu_set_t) -> usize {
    // SAFETY: CPU_COUNT only reads the set's bits.
    unsafe { libc::CPU_COUNT(set) as usize }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops the permitted, effective and inheritable capability sets to empty.
pub fn capset_empty() -> SysResult<()> {
    let hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: hdr and a two-element data array are what version 3 expects.
    cvt(unsafe { raw_syscall(libc::SYS_capset, [&hdr as *const CapHeader as u64, data.as_ptr() as u64, 0, 0, 0, 0]) })
        .map(drop)
}

pub fn setrlimit(resource: u32, soft: u64, hard: u64) -> SysResult<()> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: lim is a valid rlimit (the kernel's struct rlimit64 on
    // x86_64); the old limit is not asked for (NULL). pid 0: the caller,
    // as glibc's setrlimit does it.
    cvt(unsafe { raw_syscall(libc::SYS_prlimit64, [0, resource as u64, &lim as *const libc::rlimit as u64, 0, 0, 0]) })
        .map(drop)
}

/// Seconds of CLOCK_REALTIME_COARSE: the clock file timestamps are taken
/// from (a tick behind the precise one at most).
pub fn realtime_coarse_s() -> i64 {
    let mut ts = MaybeUninit::<libc::timespec>::zeroed();
    // SAFETY: as in clock_monotonic_ns: the vDSO, a valid clock and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, ts.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by clock_gettime.
    unsafe { ts.assume_init() }.tv_sec
}

pub fn clock_monotonic_ns() -> u64 {
    let mut ts = MaybeUninit::<libc::timespec>::zeroed();
    // SAFETY: ts is a writable timespec. Through libc, for the vDSO (no
    // system call): with CLOCK_MONOTONIC and a valid pointer it cannot
    // fail, so it leaves errno alone like the raw wrappers.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, ts.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by clock_gettime.
    let ts = unsafe { ts.assume_init() };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// execve with prepared NULL-terminated pointer arrays. Returns only on failure.
pub fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> Errno {
    debug_assert!(argv.last() == Some(&ptr::null()) && envp.last() == Some(&ptr::null()));
    // SAFETY: path is NUL-terminated; argv and envp are NULL-terminated arrays
    // of pointers to NUL-terminated strings that outlive the call.
    let r = unsafe {
        raw_syscall(libc::SYS_execve, [path.as_ptr() as u64, argv.as_ptr() as u64, envp.as_ptr() as u64, 0, 0, 0])
    };
    cvt(r).err().unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Signals.

/// The signals glibc keeps for itself (SIGCANCEL, SIGSETXID): its
/// `sigaction` and `sigaddset` refuse them with EINVAL, and so do the
/// wrappers here, so that they behave as the libc calls they replace.
fn glibc_reserved(sig: i32) -> bool {
    sig == 32 || sig == 33
}

/// The kernel's `struct sigaction` on x86_64 (`rt_sigaction` with a
/// sigsetsize of 8).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Sets the disposition of `sig` to `SIG_DFL` or `SIG_IGN` (no handler is
/// ever run, so no `SA_RESTORER` trampoline is needed).
fn set_disposition(sig: i32, handler: libc::sighandler_t) -> SysResult<()> {
    debug_assert!(handler == libc::SIG_DFL || handler == libc::SIG_IGN);
    if glibc_reserved(sig) {
        return Err(libc::EINVAL);
    }
    let act = KernelSigaction { handler, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: act is a valid kernel sigaction of the size the sigsetsize
    // 8 implies; the old action is not asked for (NULL).
    cvt(unsafe { raw_syscall(libc::SYS_rt_sigaction, [sig as u64, &act as *const KernelSigaction as u64, 0, 8, 0, 0]) })
        .map(drop)
}

/// Resets every catchable signal to its default action and unblocks all
/// signals: dispositions set to "ignore" and the signal mask survive execve.
pub fn reset_signals() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // Errors (for the signals glibc reserves) are harmless and ignored.
        let _ = set_disposition(sig, libc::SIG_DFL);
    }
    set_sigmask(&[], libc::SIG_SETMASK);
}

/// Sets `signals` to their default action.
pub fn default_signals(signals: &[i32]) {
    for &sig in signals {
        let _ = set_disposition(sig, libc::SIG_DFL);
    }
}

/// The kernel signal set of `signals` (bit `sig - 1`); invalid and
/// glibc-reserved numbers are left out, as `sigaddset` refuses them.
fn sigset_of(signals: &[i32]) -> u64 {
    signals.iter().filter(|&&s| (1..=64).contains(&s) && !glibc_reserved(s)).fold(0, |set, &s| set | 1u64 << (s - 1))
}

fn set_sigmask(signals: &[i32], how: i32) {
    let set = sigset_of(signals);
    // SAFETY: set is an 8-byte kernel sigset alive for the call; the old
    // mask is not asked for (NULL).
    unsafe { raw_syscall(libc::SYS_rt_sigprocmask, [how as u64, &set as *const u64 as u64, 0, 8, 0, 0]) };
}

/// Unblocks `signals`.
pub fn unblock_signals(signals: &[i32]) {
    set_sigmask(signals, libc::SIG_UNBLOCK);
}

/// Blocks `signals` and returns a signalfd that reports them.
pub fn signalfd_for(signals: &[i32]) -> SysResult<OwnedFd> {
    set_sigmask(signals, libc::SIG_BLOCK);
    let set = sigset_of(signals);
    // SAFETY: set is an 8-byte kernel sigset alive for the call; fd -1 (a
    // new signalfd) is sign-extended.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_signalfd4,
            [-1i32 as u64, &set as *const u64 as u64, 8, (libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as u64, 0, 0],
        )
    })?;
    Ok(owned(fd))
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

/// Drains a non-blocking signalfd.
pub fn drain_signalfd(fd: RawFd) {
    let mut buf = [0u8; 128 * 8];
    while let Ok(n) = read(fd, &mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Sets SIGPIPE to "ignore" for the calling process (the supervisor writes
/// to sockets whose peer may be gone).
pub fn ignore_sigpipe() {
    let _ = set_disposition(libc::SIGPIPE, libc::SIG_IGN);
}

// ---------------------------------------------------------------------------
// Timers and polling.

pub fn timerfd() -> SysResult<OwnedFd> {
    // SAFETY: plain syscall on integers.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_timerfd_create,
            [libc::CLOCK_MONOTONIC as u64, (libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) as u64, 0, 0, 0, 0],
        )
    })?;
    Ok(owned(fd))
}

/// Arms a timerfd to fire once at the absolute CLOCK_MONOTONIC time `at_ns`.
pub fn timerfd_at(fd: RawFd, at_ns: u64) -> SysResult<()> {
    let at_ns = at_ns.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: (at_ns / 1_000_000_000) as _, tv_nsec: (at_ns % 1_000_000_000) as _ },
    };
    // SAFETY: spec is a valid itimerspec; old value not requested (NULL).
    cvt(unsafe {
        raw_syscall(
            libc::SYS_timerfd_settime,
            [fd as u64, libc::TFD_TIMER_ABSTIME as u64, &spec as *const libc::itimerspec as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// poll with a timeout of nanosecond resolution (None: no timeout).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<std::time::Duration>) -> SysResult<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    retry(|| {
        // The kernel writes the time left back into the timespec; like
        // glibc's wrapper, every call gets a fresh copy of the timeout.
        let mut t = ts;
        let tsp = t.as_mut().map_or(ptr::null_mut(), |t| t as *mut libc::timespec);
        // SAFETY: fds is a valid array of fds.len() pollfd structs; tsp is
        // null or points at a writable timespec alive for the call; no
        // signal mask is passed (NULL; sigsetsize 8 as glibc passes).
        cvt(unsafe { raw_syscall(libc::SYS_ppoll, [fds.as_mut_ptr() as u64, fds.len() as u64, tsp as u64, 0, 8, 0]) })
    })
    .map(|n| n as usize)
}

/// poll(2) over a fixed set; fills `revents`.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> SysResult<usize> {
    retry(|| {
        // SAFETY: fds is a valid array of fds.len() pollfd structs; a negative
        // timeout (infinite) is sign-extended.
        cvt(unsafe {
            raw_syscall(libc::SYS_poll, [fds.as_mut_ptr() as u64, fds.len() as u64, timeout_ms as u64, 0, 0, 0])
        })
    })
    .map(|n| n as usize)
}

// ---------------------------------------------------------------------------
// Shared memory between the supervisor, PID 1 and the tracee.

/// Anonymous shared memory holding a `T` at its start and a byte area
/// after it, at the same address in the supervisor and every process it
/// forks afterwards (PID 1, the tracee until its execve unmaps it). The
/// supervisor lays out a run's strings and pointer arrays in the byte area
/// with [`Arena::put`]; the children read them in place, so pointers into
/// the arena are valid on both sides. Pages are touched only as used.
pub struct Arena<T> {
    ptr: *mut u8,
    len: usize,
    /// Next free offset of the byte area (supervisor side).
    next: std::cell::Cell<usize>,
    _t: std::marker::PhantomData<T>,
}

// Rounds up to a multiple of 16.
const fn align16(n: usize) -> usize {
    (n + 15) & !15
}

impl<T: Default> Arena<T> {
    pub fn new(len: usize) -> SysResult<Self> {
        let len = len.max(align16(std::mem::size_of::<T>()) + 4096);
        // SAFETY: anonymous shared mapping, no fd; checked for failure.
        let p = unsafe {
            mmap(
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
            )
        }?;
        // SAFETY: the mapping is fresh, page-aligned, writable and big enough for T.
        unsafe { (p as *mut T).write(T::default()) };
        Ok(Arena {
            ptr: p.cast(),
            len,
            next: std::cell::Cell::new(align16(std::mem::size_of::<T>())),
            _t: std::marker::PhantomData,
        })
    }
}

impl<T> Arena<T> {
    /// Copies `data` into the byte area; returns its address, or ENOSPC.
    pub fn put(&self, data: &[u8]) -> SysResult<*const u8> {
        let at = self.next.get();
        let end = at.checked_add(align16(data.len())).ok_or(libc::ENOSPC)?;
        if end > self.len {
            return Err(libc::ENOSPC);
        }
        // SAFETY: [at, at + data.len()) lies inside the mapping (checked
        // above) and was never handed out before: no reference aliases it.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) };
        self.next.set(end);
        // SAFETY: at < len, inside the mapping.
        Ok(unsafe { self.ptr.add(at) })
    }

    /// Copies a NUL-terminated string; returns its address.
    pub fn put_cstr(&self, s: &CStr) -> SysResult<*const libc::c_char> {
        self.put(s.to_bytes_with_nul()).map(|p| p.cast())
    }

    /// Copies a pointer array (e.g. argv with its NULL); returns its address.
    pub fn put_ptrs(&self, ptrs: &[*const libc::c_char]) -> SysResult<*const *const libc::c_char> {
        // SAFETY: viewing an initialized pointer slice as bytes (pointers have
        // no padding or invalid bit patterns).
        let bytes = unsafe { std::slice::from_raw_parts(ptrs.as_ptr().cast::<u8>(), std::mem::size_of_val(ptrs)) };
        self.put(bytes).map(|p| p.cast())
    }

    /// The string at `at` (stored by [`put_cstr`](Self::put_cstr)).
    pub fn cstr(&self, at: u64) -> Option<&CStr> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        if off >= self.len {
            return None;
        }
        // SAFETY: the bytes from `at` to the end of the mapping are readable;
        // from_bytes_until_nul stops at the first NUL within them.
        let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, self.len - off) };
        CStr::from_bytes_until_nul(bytes).ok()
    }

    /// `n` elements of `U` stored by [`put`](Self::put) at `at`.
    pub fn slice<U: Copy>(&self, at: u64, n: u64) -> Option<&[U]> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        let bytes = (n as usize).checked_mul(std::mem::size_of::<U>())?;
        if off.checked_add(bytes)? > self.len || off % std::mem::align_of::<U>() != 0 {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); U is Copy plain data
        // written by put() from a valid &[U].
        Some(unsafe { std::slice::from_raw_parts(at as *const U, n as usize) })
    }

    /// The NULL-terminated pointer array at `at` (stored by
    /// [`put_ptrs`](Self::put_ptrs)), NULL included.
    pub fn ptr_array(&self, at: u64) -> Option<&[*const libc::c_char]> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        if off >= self.len || off % 8 != 0 {
            return None;
        }
        let max = (self.len - off) / 8;
        // SAFETY: in bounds and aligned (checked); the array was written by
        // put_ptrs, and the scan stops at its NULL or the mapping's end.
        let all = unsafe { std::slice::from_raw_parts(at as *const *const libc::c_char, max) };
        let n = all.iter().position(|p| p.is_null())?;
        Some(&all[..=n])
    }

    /// Stores `value` as element `i` of the `n`-element array at `at`
    /// (child side: PID 1 reporting back). False when out of bounds.
    pub fn store<U: Copy>(&self, at: u64, n: u64, i: usize, value: U) -> bool {
        let Some(off) = (at as usize).checked_sub(self.ptr as usize) else { return false };
        let size = std::mem::size_of::<U>();
        let end = (n as usize).checked_mul(size).and_then(|b| b.checked_add(off));
        if i as u64 >= n || end.is_none_or(|e| e > self.len) || off % std::mem::align_of::<U>() != 0 {
            return false;
        }
        // SAFETY: element i lies inside the mapping and is aligned (checked
        // above); nobody holds a reference to it (the supervisor reads the
        // array only after this process has finished).
        unsafe { (at as *mut U).add(i).write_volatile(value) };
        true
    }

    /// Copies a slice of plain data; returns its address.
    pub fn put_slice<U: Copy>(&self, v: &[U]) -> SysResult<*const U> {
        // SAFETY: viewing initialized Copy data as bytes; callers only pass
        // types without padding (integers, sock_filter, pointers).
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) };
        self.put(bytes).map(|p| p.cast())
    }
}

impl<T> std::ops::Deref for Arena<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the header was initialized in new() and stays mapped until
        // drop. T holds only atomics, so shared access across processes is
        // sound.
        unsafe { &*(self.ptr as *const T) }
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping created in new().
        unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

// ---------------------------------------------------------------------------
// Sockets and fd passing.

pub fn socketpair_stream() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_socketpair,
            [libc::AF_UNIX as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0, fds.as_mut_ptr() as u64, 0, 0],
        )
    })?;
    Ok((owned(fds[0] as _), owned(fds[1] as _)))
}

/// Most fds one message carries.
pub const MAX_FDS: usize = 8;

/// The credentials of a Unix socket's peer (SO_PEERCRED): for a connected
/// client, the process that connected; for the client's end, the process
/// that called `listen`. Ids as seen from the caller's user namespace.
pub fn peer_cred(sock: RawFd) -> SysResult<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len point to writable memory of the sizes given.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_getsockopt,
            [
                sock as u64,
                libc::SOL_SOCKET as u64,
                libc::SO_PEERCRED as u64,
                &mut cred as *mut libc::ucred as u64,
                &mut len as *mut libc::socklen_t as u64,
                0,
            ],
        )
    })?;
    Ok(cred)
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

/// Sends `data` with `fds` attached (SCM_RIGHTS).
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> SysResult<usize> {
    assert!(fds.len() <= MAX_FDS);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
    // u64 array keeps the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 8 + MAX_FDS];
    // SAFETY: msg points to valid iov and control buffers; the CMSG macros
    // stay within cbuf, which is large enough for MAX_FDS descriptors.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let space = libc::CMSG_SPACE((fds.len() * 4) as u32) as usize;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as usize;
            ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, fds.len());
        }
        retry(|| {
            cvt(raw_syscall(
                libc::SYS_sendmsg,
                [sock as u64, &msg as *const libc::msghdr as u64, libc::MSG_NOSIGNAL as u64, 0, 0, 0],
            ))
        })
        .map(|n| n as usize)
    }
}

/// recvmsg(2) of one message into `buf` with its control data in `cbuf`
/// (close-on-exec fds); calls `each_fd` for every fd received. No allocation.
fn recv_msg(sock: RawFd, buf: &mut [u8], cbuf: &mut [u64], mut each_fd: impl FnMut(RawFd)) -> SysResult<usize> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msg points to valid iov and control buffers of the sizes given;
    // fds are read only from within SCM_RIGHTS control messages the kernel
    // wrote, walked with the CMSG macros that stay inside cbuf.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(cbuf);
        let n = retry(|| {
            cvt(raw_syscall(
                libc::SYS_recvmsg,
                [sock as u64, &mut msg as *mut libc::msghdr as u64, libc::MSG_CMSG_CLOEXEC as u64, 0, 0, 0],
            ))
        })?;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                for i in 0..count {
                    each_fd(*data.add(i));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(libc::EMSGSIZE);
        }
        Ok(n as usize)
    }
}

/// Receives into `buf`, collecting attached fds (close-on-exec).
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> SysResult<usize> {
    let mut cbuf = [0u64; 8 + MAX_FDS];
    recv_msg(sock, buf, &mut cbuf, |fd| fds.push(owned(fd as _)))
}

/// Receives exactly one fd sent with [`send_with_fds`] (child side: no
/// allocation). EOF without an fd is `ECONNRESET`.
pub fn recv_one_fd(sock: RawFd) -> SysResult<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut cbuf = [0u64; 8];
    let mut got: Option<OwnedFd> = None;
    recv_msg(sock, &mut byte, &mut cbuf, |fd| {
        // Keep the first; close any extra.
        let fd = owned(fd as _);
        if got.is_none() {
            got = Some(fd);
        }
    })?;
    got.ok_or(libc::ECONNRESET)
}

/// Receives one byte and up to `out.len()` fds (child side: no allocation).
/// Returns (bytes read, fds received); 0 bytes means the peer closed.
pub fn recv_fds_into(sock: RawFd, out: &mut [RawFd]) -> SysResult<(usize, usize)> {
    let mut byte = [0u8; 1];
    let mut cbuf = [0u64; 8 + MAX_FDS];
    let mut n = 0;
    let got = recv_msg(sock, &mut byte, &mut cbuf, |fd| {
        if n < out.len() {
            out[n] = fd;
            n += 1;
        } else {
            close(fd);
        }
    })?;
    Ok((got, n))
}

/// Sets the file mode creation mask; returns the old one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: plain syscall, cannot fail.
    unsafe { raw_syscall(libc::SYS_umask, [mask as u64, 0, 0, 0, 0, 0]) as u32 }
}

/// dup(2) to a close-on-exec descriptor above 2.
pub fn dup_cloexec(fd: RawFd) -> SysResult<OwnedFd> {
    fcntl(fd, libc::F_DUPFD_CLOEXEC, 3).map(|fd| owned(fd as _))
}

/// accept4(2) a connection, close-on-exec.
pub fn accept(listener: RawFd) -> SysResult<OwnedFd> {
    // SAFETY: null address buffers are allowed; result checked.
    cvt(unsafe { raw_syscall(libc::SYS_accept4, [listener as u64, 0, 0, libc::SOCK_CLOEXEC as u64, 0, 0]) }).map(owned)
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds points to two writable ints.
    cvt(unsafe { raw_syscall(libc::SYS_pipe2, [fds.as_mut_ptr() as u64, libc::O_CLOEXEC as u64, 0, 0, 0, 0]) })?;
    Ok((owned(fds[0] as _), owned(fds[1] as _)))
}

/// splice(2) of up to `len` bytes from `from` to `to` (one of them a
/// pipe) at their file positions, never blocking on a pipe
/// (SPLICE_F_NONBLOCK); Ok(0) at the end of `from`.
pub fn splice(from: RawFd, to: RawFd, len: usize) -> SysResult<usize> {
    retry(|| {
        // SAFETY: null offsets (the descriptors' own positions); no memory is
        // passed to the kernel.
        cvt(unsafe {
            raw_syscall(
                libc::SYS_splice,
                [from as u64, 0, to as u64, 0, len as u64, (libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE) as u64],
            )
        })
    })
    .map(|n| n as usize)
}

/// Sets a pipe's capacity (F_SETPIPE_SZ); returns the capacity it got.
pub fn set_pipe_size(fd: RawFd, size: usize) -> SysResult<usize> {
    fcntl(fd, libc::F_SETPIPE_SZ, size as libc::c_int).map(|n| n as usize)
}

/// shutdown(SHUT_RDWR) of a socket.
pub fn shutdown(sock: RawFd) {
    // SAFETY: plain syscall on an fd the caller owns.
    unsafe { raw_syscall(libc::SYS_shutdown, [sock as u64, libc::SHUT_RDWR as u64, 0, 0, 0, 0]) };
}

/// A close-on-exec, non-blocking eventfd.
pub fn eventfd() -> SysResult<OwnedFd> {
    // SAFETY: plain syscall, result checked.
    cvt(unsafe { raw_syscall(libc::SYS_eventfd2, [0, (libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) as u64, 0, 0, 0, 0]) })
        .map(owned)
}

/// Adds 1 to an eventfd (child side too).
pub fn eventfd_signal(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    let _ = write(fd, &one);
}

/// Sets or clears O_NONBLOCK.
pub fn set_nonblocking(fd: RawFd, on: bool) -> SysResult<()> {
    let flags = fcntl(fd, libc::F_GETFL, 0)?;
    let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
    fcntl(fd, libc::F_SETFL, flags).map(drop)
}

/// Sends `sig` to the process behind `pidfd`.
pub fn pidfd_send_signal(pidfd: RawFd, sig: i32) -> SysResult<()> {
    // SAFETY: plain syscall with a null siginfo.
    cvt(unsafe { raw_syscall(libc::SYS_pidfd_send_signal, [pidfd as u64, sig as u64, 0, 0, 0, 0]) }).map(drop)
}

/// Reaps the (exited or exiting) child behind `pidfd`, waiting for it;
/// returns its wait status.
pub fn pidfd_wait(pidfd: RawFd) -> SysResult<Option<i32>> {
    pidfd_waitid(pidfd, 0)
}

/// Like [`pidfd_wait`], but returns None at once when the child still runs.
pub fn pidfd_try_wait(pidfd: RawFd) -> SysResult<Option<i32>> {
    pidfd_waitid(pidfd, libc::WNOHANG)
}

fn pidfd_waitid(pidfd: RawFd, flags: i32) -> SysResult<Option<i32>> {
    const P_PIDFD: libc::idtype_t = 3;
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    retry(|| {
        // SAFETY: info is a zeroed siginfo_t the kernel fills in; no rusage
        // (NULL).
        cvt(unsafe {
            raw_syscall(
                libc::SYS_waitid,
                [P_PIDFD as u64, pidfd as u64, info.as_mut_ptr() as u64, (libc::WEXITED | flags) as u64, 0, 0],
            )
        })
    })?;
    // SAFETY: initialized (zeroed, then possibly filled by waitid).
    let info = unsafe { info.assume_init() };
    // SAFETY: si_pid/si_status are valid for SIGCHLD-style waitid results;
    // si_pid stays 0 when WNOHANG found nothing.
    let (pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        _ => status & 0x7f,
    }))
}

/// Starts `bin supervise` with `sock` as its fd 3 and everything else of
/// the caller closed (posix_spawn: no copy of a large caller's memory).
/// Returns (pid, pidfd).
pub fn spawn_supervisor(bin: &std::path::Path, sock: RawFd) -> SysResult<(i32, OwnedFd)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(bin.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
    let argv: [*const libc::c_char; 3] = [path.as_ptr(), c"supervise".as_ptr(), ptr::null()];
    // A descriptor number above 3 to dup from, so that dup2 onto 3 always
    // happens and clears close-on-exec.
    let high = owned(fcntl(sock, libc::F_DUPFD_CLOEXEC, 10)? as _);
    let mut pid: libc::pid_t = 0;
    // SAFETY: the file actions and attributes are initialized before use and
    // destroyed after; argv is NULL-terminated and outlives the call; environ
    // is the process environment.
    let rc = unsafe {
        let mut fa = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
        libc::posix_spawn_file_actions_init(fa.as_mut_ptr());
        libc::posix_spawn_file_actions_adddup2(fa.as_mut_ptr(), high.as_raw_fd(), 3);
        extern "C" {
            static environ: *const *const libc::c_char;
        }
        let rc = libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            fa.as_ptr(),
            ptr::null(),
            argv.as_ptr() as *const *mut _,
            environ as *const *mut _,
        );
        libc::posix_spawn_file_actions_destroy(fa.as_mut_ptr());
        rc
    };
    if rc != 0 {
        return Err(rc);
    }
    let pidfd = pidfd_open(pid)?;
    Ok((pid, pidfd))
}

/// Closes every descriptor from 3 up except those in `keep`, which must be
/// sorted (child side: no allocation).
pub fn close_all_except(keep: &[RawFd]) {
    let mut from: u32 = 3;
    for &fd in keep.iter() {
        if fd < 0 || (fd as u32) < from {
            continue;
        }
        if fd as u32 > from {
            // SAFETY: close_range on a range of fds this process owns.
            unsafe { raw_syscall(libc::SYS_close_range, [from as u64, (fd as u32 - 1) as u64, 0, 0, 0, 0]) };
        }
        from = fd as u32 + 1;
    }
    // SAFETY: as above.
    unsafe { raw_syscall(libc::SYS_close_range, [from as u64, u32::MAX as u64, 0, 0, 0, 0]) };
}

/// Brings the loopback interface of the caller's network namespace up.
pub fn loopback_up() -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    let s = cvt(unsafe {
        raw_syscall(
            libc::SYS_socket,
            [libc::AF_INET as u64, (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64, 0, 0, 0, 0],
        )
    })?;
    let s = owned(s);
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        ifr.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: the datagram socket is only used for the interface ioctls,
    // each reading or filling the zeroed, correctly named ifreq.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [s.as_raw_fd() as u64, libc::SIOCGIFFLAGS, &mut ifr as *mut libc::ifreq as u64, 0, 0, 0],
        )
    })?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags, the union member read and written.
    unsafe { ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [s.as_raw_fd() as u64, libc::SIOCSIFFLAGS, &ifr as *const libc::ifreq as u64, 0, 0, 0],
        )
    })?;
    Ok(())
}

/// Installs a classic-BPF seccomp filter (`no_new_privs` must be set).
/// With `listener`, also asks for a user-notification descriptor
/// (close-on-exec), returned; else returns -1.
pub fn seccomp_install(filter: &[libc::sock_filter], listener: bool) -> SysResult<RawFd> {
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
    let flags: u32 = if listener { SECCOMP_FILTER_FLAG_NEW_LISTENER } else { 0 };
    // SAFETY: prog points to `len` valid instructions that outlive the call.
    let r = cvt(unsafe {
        raw_syscall(
            libc::SYS_seccomp,
            [libc::SECCOMP_SET_MODE_FILTER as u64, flags as u64, &prog as *const libc::sock_fprog as u64, 0, 0, 0],
        )
    })?;
    Ok(if listener { r as RawFd } else { -1 })
}

const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;
/// `SECCOMP_IOWR(0, struct seccomp_notif)`.
const SECCOMP_IOCTL_NOTIF_RECV: libc::c_ulong = 0xc050_2100;

/// `struct seccomp_notif` (80 bytes since Linux 5.0; the kernel copies
/// exactly this much).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct SeccompNotif {
    pub id: u64,
    pub pid: u32,
    pub flags: u32,
    pub nr: i32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

const _: () = assert!(std::mem::size_of::<SeccompNotif>() == 80);

/// Receives one pending seccomp user notification (the caller polled the
/// listener). ENOENT: the notifying process died meanwhile.
pub fn seccomp_notif_recv(listener: RawFd) -> SysResult<SeccompNotif> {
    // The kernel insists on a zeroed buffer.
    let mut n = SeccompNotif::default();
    // SAFETY: `n` is a writable struct seccomp_notif of the size the ioctl
    // number encodes.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [listener as u64, SECCOMP_IOCTL_NOTIF_RECV, &mut n as *mut SeccompNotif as u64, 0, 0, 0],
        )
    })?;
    Ok(n)
}

/// `SECCOMP_IOW(2, __u64)`.
const SECCOMP_IOCTL_NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;
/// `SECCOMP_IOWR(1, struct seccomp_notif_resp)`.
const SECCOMP_IOCTL_NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;

/// `struct seccomp_notif_resp`.
#[repr(C)]
struct SeccompNotifResp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

/// Answers notification `id`: let the call run as if no filter had asked
/// (SECCOMP_USER_NOTIF_FLAG_CONTINUE, Linux >= 5.5). ENOENT: the caller
/// died meanwhile.
pub fn seccomp_notif_continue(listener: RawFd, id: u64) -> SysResult<()> {
    let mut resp = SeccompNotifResp { id, val: 0, error: 0, flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE };
    // SAFETY: `resp` is a struct seccomp_notif_resp of the size the ioctl
    // number encodes.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_ioctl,
            [listener as u64, SECCOMP_IOCTL_NOTIF_SEND, &mut resp as *mut SeccompNotifResp as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// A system call made without libc: the kernel's raw result, -errno on
/// failure. errno is left alone, which a CLONE_VM child sharing its
/// parent's thread-local storage needs (see [`with_vm_child`]).
///
/// # Safety
/// The arguments must be valid for system call `nr`, like for `syscall(2)`.
unsafe fn raw_syscall(nr: libc::c_long, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the `syscall` instruction with the x86_64 convention (number
    // in rax, arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11
    // clobbered); what the call does with its arguments is the caller's
    // contract.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            out("rcx") _,
            out("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Copies `buf.len()` bytes at `addr` in process `pid` into `buf`
/// (process_vm_readv; the caller needs ptrace access to it); returns how
/// many bytes were copied (fewer when the range runs into unmapped
/// memory). Leaves errno alone.
pub fn process_vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> SysResult<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, writable for its length; `remote` is
    // only read, in the other process, by the kernel (a bad address there
    // is EFAULT, not a fault here).
    let r = unsafe {
        raw_syscall(
            libc::SYS_process_vm_readv,
            [pid as u64, &local as *const libc::iovec as u64, 1, &remote as *const libc::iovec as u64, 1, 0],
        )
    };
    cvt(r).map(|n| n as usize)
}

/// Whether notification `id` is still pending, i.e. its caller is still
/// stopped in the call (SECCOMP_IOCTL_NOTIF_ID_VALID): what was read of
/// its memory since the notification came in was read from the right
/// process, not from one that reused its pid. Leaves errno alone.
pub fn seccomp_notif_id_valid(listener: RawFd, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 at the pointer, a live local.
    let r = unsafe {
        raw_syscall(libc::SYS_ioctl, [listener as u64, SECCOMP_IOCTL_NOTIF_ID_VALID, &id as *const u64 as u64, 0, 0, 0])
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's errno.
    fn errno() -> Errno {
        // SAFETY: __errno_location returns a valid thread-local pointer.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn failing_wrappers_leave_errno_alone() {
        const MARK: Errno = 12345;
        // SAFETY: setting errno, a thread-local int.
        unsafe { *libc::__errno_location() = MARK };
        close(-1);
        assert_eq!(errno(), MARK, "close");
        assert_eq!(open(c"/nonexistent/capsule-errno-test", libc::O_RDONLY, 0).err(), Some(libc::ENOENT));
        let mut buf = [0u8; 8];
        assert_eq!(read(-1, &mut buf), Err(libc::EBADF));
        assert_eq!(write(-1, b"x"), Err(libc::EBADF));
        assert_eq!(unshare(0x1), Err(libc::EINVAL), "an exit-signal bit is no unshare flag");
        assert_eq!(dup2(-1, 100), Err(libc::EBADF));
        assert_eq!(set_cloexec(-1, true), Err(libc::EBADF));
        assert_eq!(fd_mode(-1), Err(libc::EBADF));
        assert_eq!(mkdirat(libc::AT_FDCWD, c"/nonexistent/capsule-errno-test", 0o700), Err(libc::ENOENT));
        assert_eq!(waitpid(i32::MAX, true), Err(libc::ECHILD));
        assert_eq!(kill(i32::MAX, 0), Err(libc::ESRCH));
        assert_eq!(Stack::new(0).err(), Some(libc::EINVAL));
        assert_eq!(timerfd_at(-1, 1), Err(libc::EBADF));
        assert_eq!(tty::set_controlling_tty(-1), Err(libc::EBADF));
        assert!(landlock::restrict_self(-1).is_err());
        assert_eq!(execve(c"/nonexistent/capsule-errno-test", &[ptr::null()], &[ptr::null()]), libc::ENOENT);
        assert_eq!(errno(), MARK, "a failing wrapper changed errno");
    }

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
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    #[derive(Default)]
    struct Header {
        n: AtomicU64,
    }

    #[test]
    fn arena_round_trips_and_bounds() {
        let a = Arena::<Header>::new(8192).unwrap();
        a.n.store(7, SeqCst);
        let s1 = a.put_cstr(c"/bin/true").unwrap();
        let s2 = a.put_cstr(c"-x").unwrap();
        let argv = a.put_ptrs(&[s1, s2, ptr::null()]).unwrap();
        let got = a.ptr_array(argv as u64).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got[2].is_null());
        assert_eq!(a.cstr(got[0] as u64).unwrap(), c"/bin/true");
        assert_eq!(a.cstr(got[1] as u64).unwrap(), c"-x");
        let nums = a.put_slice(&[1u64, 2, 3]).unwrap();
        assert_eq!(a.slice::<u64>(nums as u64, 3).unwrap(), &[1, 2, 3]);
        assert!(a.store(nums as u64, 3, 1, 20u64));
        assert_eq!(a.slice::<u64>(nums as u64, 3).unwrap(), &[1, 20, 3]);
        // Out of bounds: index, length, address.
        assert!(!a.store(nums as u64, 3, 3, 0u64));
        assert!(a.slice::<u64>(nums as u64, 1 << 20).is_none());
        assert!(a.cstr(1).is_none());
        assert!(a.ptr_array(0).is_none());
        // Full: an error, never a write past the end.
        assert_eq!(a.put(&[0u8; 16384]), Err(libc::ENOSPC));
        // The header is shared with a forked child.
        match fork().unwrap() {
            Forked::Child => {
                a.n.store(42, SeqCst);
                exit(0)
            }
            Forked::Parent { pid, .. } => {
                waitpid(pid, false).unwrap();
                assert_eq!(a.n.load(SeqCst), 42);
            }
        }
    }

    #[test]
    fn vm_child_shares_memory_and_is_reaped() {
        struct Job {
            pid: i32,
            src: u64,
            out: AtomicU64,
        }
        fn child(j: &Job) -> ! {
            let mut b = [0u8; 8];
            let v = match process_vm_read(j.pid, j.src, &mut b) {
                Ok(8) => u64::from_ne_bytes(b),
                Ok(_) => 1,
                Err(e) => 1000 + e as u64,
            };
            j.out.store(v, SeqCst);
            exit(0)
        }
        let value: u64 = 0x1234_5678_9abc_def0;
        let job = Job { pid: getpid(), src: &value as *const u64 as u64, out: AtomicU64::new(0) };
        let stack = Stack::new(64 << 10).unwrap();
        // SAFETY: nothing else runs on `stack`.
        let (polled, status) = unsafe {
            with_vm_child(&stack, &job, child, |pidfd| {
                let mut p = [libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 }];
                poll(&mut p, 10_000).unwrap()
            })
        }
        .unwrap();
        assert_eq!(polled, 1);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status:#x}");
        assert_eq!(job.out.load(SeqCst), value);
        // Unmapped memory: EFAULT, errno untouched.
        let mut b = [0u8; 8];
        // SAFETY: setting errno, a thread-local int.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(process_vm_read(getpid(), 8, &mut b), Err(libc::EFAULT));
        assert_eq!(errno(), 0);
        // A child still running when `parent` returns is killed and reaped.
        fn spin(_: &Job) -> ! {
            loop {
                std::hint::spin_loop();
            }
        }
        // SAFETY: nothing else runs on `stack`.
        let (_, status) = unsafe { with_vm_child(&stack, &job, spin, |_| ()) }.unwrap();
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "status {status:#x}");
    }

    #[test]
    fn close_all_except_keeps_the_listed() {
        let (a, b) = pipe().unwrap();
        let (c, d) = pipe().unwrap();
        let mut keep = [b.as_raw_fd(), c.as_raw_fd()];
        keep.sort_unstable();
        match fork().unwrap() {
            Forked::Child => {
                close_all_except(&keep);
                let ok = fd_mode(b.as_raw_fd()).is_ok()
                    && fd_mode(c.as_raw_fd()).is_ok()
                    && fd_mode(a.as_raw_fd()).is_err()
                    && fd_mode(d.as_raw_fd()).is_err()
                    && fd_mode(2).is_ok();
                exit(if ok { 0 } else { 1 })
            }
            Forked::Parent { pid, .. } => {
                let (_, st) = waitpid(pid, false).unwrap().unwrap();
                assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "status {st}");
            }
        }
    }

    #[test]
    fn ppoll_waits_its_timeout_and_sees_readable() {
        let (r, w) = pipe().unwrap();
        let mut pfd = [libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let t = std::time::Instant::now();
        assert_eq!(ppoll(&mut pfd, Some(std::time::Duration::from_micros(1500))).unwrap(), 0);
        assert!(t.elapsed() >= std::time::Duration::from_micros(1500), "woke early: {:?}", t.elapsed());
        write_all(w.as_raw_fd(), b"x").unwrap();
        assert_eq!(ppoll(&mut pfd, None).unwrap(), 1);
        assert_eq!(pfd[0].revents & libc::POLLIN, libc::POLLIN);
    }

    #[test]
    fn affinity_sets_hold_the_current_cpu() {
        let all = affinity().unwrap();
        let cpu = current_cpu().unwrap();
        let one = one_cpu(cpu).unwrap();
        assert_eq!(cpus_in(&one), 1);
        assert!(cpus_in(&all) >= 1);
        assert!(one_cpu(8 * std::mem::size_of::<libc::cpu_set_t>()).is_none(), "past the set");
        // A thread of its own: pinning it and widening back leave the
        // test runner's threads alone.
        std::thread::spawn(move || {
            set_affinity(&one).unwrap();
            assert_eq!(current_cpu().unwrap(), cpu);
            assert_eq!(cpus_in(&affinity().unwrap()), 1);
            set_affinity(&all).unwrap();
            assert_eq!(cpus_in(&affinity().unwrap()), cpus_in(&all));
        })
        .join()
        .unwrap();
    }
}
