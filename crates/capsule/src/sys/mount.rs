//! The new mount API (open_tree, fsopen, fsmount, move_mount, mount_setattr) and pivot_root.

use std::ffi::CStr;
use std::os::fd::{OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, SysResult};

// Not all of these are in `libc`.
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

#[repr(C)]
pub(super) struct MountAttr {
    pub(super) attr_set: u64,
    pub(super) attr_clr: u64,
    pub(super) propagation: u64,
    pub(super) userns_fd: u64,
}

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

/// umount2(path, MNT_DETACH).
pub fn umount_detach(path: &CStr) -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_umount2, [path.as_ptr() as u64, libc::MNT_DETACH as u64, 0, 0, 0, 0]) })
        .map(drop)
}

pub fn umount_detach_cwd() -> SysResult<()> {
    // SAFETY: path is NUL-terminated.
    cvt(unsafe { raw_syscall(libc::SYS_umount2, [c".".as_ptr() as u64, libc::MNT_DETACH as u64, 0, 0, 0, 0]) })
        .map(drop)
}
