//! Raw kernel-feature probes for `capsule check`.
//!
//! Probes that change process state (unshare, mounts, pivot_root, seccomp)
//! run in a forked child so the caller is untouched: the parent prepares every
//! string and buffer, forks, and the child performs the steps with raw
//! syscalls only (no allocation, no locks: the parent may be multi-threaded),
//! writes one fixed-size record (failed step, argument, errno, kernel message)
//! to a pipe and `_exit`s. Probes that only query the kernel (Landlock ABI,
//! pidfd_open, clone3, close_range, openat2, statfs, access) run in the caller.

// Child-side results are large stack values on purpose: a forked child must
// not allocate, so they cannot be boxed.
#![allow(clippy::result_large_err, clippy::large_enum_variant)]

mod query;

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;

use libc::{c_int, c_uint, c_ulong};

use super::seccomp::BPF_RET_K;
use super::{
    CloneArgs, MountAttr, AT_RECURSIVE, CLONE_PIDFD, CLOSE_RANGE_CLOEXEC, FSCONFIG_CMD_CREATE, FSCONFIG_SET_STRING,
    FSMOUNT_CLOEXEC, FSOPEN_CLOEXEC, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MOVE_MOUNT_F_EMPTY_PATH,
    OPEN_TREE_CLONE, RESOLVE_NO_MAGICLINKS,
};
use crate::error::errno_text;

// Constants from the kernel UAPI headers that the libc crate does not carry
// on every target (the mount API's are `sys`'s).
const LANDLOCK_CREATE_RULESET_VERSION: c_uint = 1 << 0;
const SECCOMP_SET_MODE_FILTER: c_uint = 1;
const SECCOMP_GET_ACTION_AVAIL: c_uint = 2;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_LOG: u32 = 0x7ffc_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

/// `statfs` magic of a cgroup v2 mount.
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// `statfs` magic of tmpfs (what /sys/fs/cgroup is in hybrid and v1 layouts).
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// File systems the probes create; the index travels in [`Failure::arg`].
const FS_TMPFS: u32 = 0;
const FS_OVERLAY: u32 = 1;
const FS_PROC: u32 = 2;
const FS_NAMES: [&CStr; 3] = [c"tmpfs", c"overlay", c"proc"];
const OVERLAY_KEYS: [&CStr; 3] = [c"lowerdir", c"upperdir", c"workdir"];

/// The step of a probe that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    Pipe = 1,
    Fork,
    /// The probe child ended without writing its record; `arg` is the raw
    /// wait status.
    ChildDied,
    /// `arg` = nesting level (1 = directly below the caller).
    UnshareUser,
    Setgroups,
    UidMap,
    GidMap,
    /// `getuid()` after writing the map was not 0; `arg` = what it returned.
    UidCheck,
    /// `arg` = the CLONE_NEW* flags.
    Unshare,
    MakePrivate,
    /// `arg` = file system index.
    Fsopen,
    /// `arg` = overlay key index.
    FsconfigSet,
    /// `arg` = file system index.
    FsconfigCreate,
    /// `arg` = file system index.
    Fsmount,
    OpenTree,
    MountSetattr,
    /// `arg` 0 = tmpfs onto the scratch directory, 1 = cloned tree into it.
    MoveMount,
    Mkdir,
    CreateFile,
    Fchdir,
    PivotRoot,
    UmountOldRoot,
    /// `arg` = the pid seen in the new PID namespace.
    PidNotOne,
    ProcEntry,
    NoNewPrivs,
    SeccompInstall,
    /// `arg` = what PR_GET_SECCOMP returned.
    SeccompMode,
    NsFile,
    OverlayWrite,
    OverlayCopyUp,
    OverlayUnlink,
    PidfdOpen,
    PidfdSendSignal,
    Clone3,
    Wait,
    /// `arg` 0 = with CLOSE_RANGE_CLOEXEC, 1 = plain.
    CloseRange,
    Openat2,
    Landlock,
    /// sethostname in the probe's UTS namespace.
    Sethostname,
    Unknown,
}

impl Step {
    const ALL: [Step; 39] = [
        Step::Pipe,
        Step::Fork,
        Step::ChildDied,
        Step::UnshareUser,
        Step::Setgroups,
        Step::UidMap,
        Step::GidMap,
        Step::UidCheck,
        Step::Unshare,
        Step::MakePrivate,
        Step::Fsopen,
        Step::FsconfigSet,
        Step::FsconfigCreate,
        Step::Fsmount,
        Step::OpenTree,
        Step::MountSetattr,
        Step::MoveMount,
        Step::Mkdir,
        Step::CreateFile,
        Step::Fchdir,
        Step::PivotRoot,
        Step::UmountOldRoot,
        Step::PidNotOne,
        Step::ProcEntry,
        Step::NoNewPrivs,
        Step::SeccompInstall,
        Step::SeccompMode,
        Step::NsFile,
        Step::OverlayWrite,
        Step::OverlayCopyUp,
        Step::OverlayUnlink,
        Step::PidfdOpen,
        Step::PidfdSendSignal,
        Step::Clone3,
        Step::Wait,
        Step::CloseRange,
        Step::Openat2,
        Step::Landlock,
        Step::Sethostname,
    ];

    fn from_u32(v: u32) -> Step {
        Step::ALL.iter().copied().find(|s| *s as u32 == v).unwrap_or(Step::Unknown)
    }
}

/// A failed probe: which step, its argument (see [`Step`]), the errno (0 when
/// the step did not fail with an errno) and the kernel's own message, when
/// the new mount API logged one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub step: Step,
    pub arg: u32,
    pub errno: i32,
    pub kernel_msg: Option<String>,
}

/// What every probe returns.
pub type Outcome = Result<(), Failure>;

impl Failure {
    fn new(step: Step, arg: u32, errno: i32) -> Failure {
        Failure { step, arg, errno, kernel_msg: None }
    }

    /// True when the probe failed while creating the first user namespace or
    /// writing its maps, i.e. the cause is "user namespaces do not work".
    pub fn is_userns_setup(&self) -> bool {
        matches!(self.step, Step::UnshareUser | Step::Setgroups | Step::UidMap | Step::GidMap | Step::UidCheck)
            && self.arg <= 1
    }

    /// The call that failed, e.g. `unshare(CLONE_NEWUSER) at nesting level 2`.
    pub fn call(&self) -> String {
        let level = |s: &str| {
            if self.arg > 1 {
                format!("{s} at nesting level {}", self.arg)
            } else {
                s.to_string()
            }
        };
        let fs = || FS_NAMES.get(self.arg as usize).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        match self.step {
            Step::Pipe => "pipe2()".into(),
            Step::Fork => "fork()".into(),
            Step::ChildDied => format!("probe child ended without reporting ({})", wait_status_text(self.arg as c_int)),
            Step::UnshareUser => level("unshare(CLONE_NEWUSER)"),
            Step::Setgroups => level("writing \"deny\" to /proc/self/setgroups"),
            Step::UidMap => level("writing /proc/self/uid_map"),
            Step::GidMap => level("writing /proc/self/gid_map"),
            Step::UidCheck => format!("getuid() after writing uid_map returned {} instead of 0", self.arg),
            Step::Unshare => format!("unshare({})", clone_flag_names(self.arg)),
            Step::MakePrivate => "mount(NULL, \"/\", MS_REC|MS_PRIVATE)".into(),
            Step::Fsopen => format!("fsopen(\"{}\")", fs()),
            Step::FsconfigSet => format!(
                "fsconfig(FSCONFIG_SET_STRING, \"{}\")",
                OVERLAY_KEYS.get(self.arg as usize).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
            ),
            Step::FsconfigCreate => format!("fsconfig(FSCONFIG_CMD_CREATE) for {}", fs()),
            Step::Fsmount => format!("fsmount() of {}", fs()),
            Step::OpenTree => "open_tree(\"/\", OPEN_TREE_CLONE|AT_RECURSIVE)".into(),
            Step::MountSetattr => {
                "mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY|MOUNT_ATTR_NOSUID|MOUNT_ATTR_NODEV)".into()
            }
            Step::MoveMount if self.arg == 0 => "move_mount(new tmpfs onto a scratch directory)".into(),
            Step::MoveMount => "move_mount(cloned tree into the new tmpfs)".into(),
            Step::Mkdir => "mkdirat() on the new tmpfs".into(),
            Step::CreateFile => "creating a file on the new tmpfs".into(),
            Step::Fchdir => "fchdir(new root)".into(),
            Step::PivotRoot => "pivot_root(\".\", \".\")".into(),
            Step::UmountOldRoot => "umount2(old root, MNT_DETACH)".into(),
            Step::PidNotOne => format!("getpid() in the new PID namespace returned {} instead of 1", self.arg),
            Step::ProcEntry => "opening 1/stat on the fresh procfs".into(),
            Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)".into(),
            Step::SeccompInstall => "seccomp(SECCOMP_SET_MODE_FILTER)".into(),
            Step::SeccompMode => format!("prctl(PR_GET_SECCOMP) returned {} instead of 2", self.arg),
            Step::NsFile => "access(\"/proc/self/ns/time_for_children\")".into(),
            Step::OverlayWrite => "creating a file on the overlay".into(),
            Step::OverlayCopyUp => "opening a lower-layer file for writing on the overlay (copy-up)".into(),
            Step::OverlayUnlink => "deleting a lower-layer file on the overlay (whiteout)".into(),
            Step::PidfdOpen => "pidfd_open(getpid(), 0)".into(),
            Step::PidfdSendSignal => "pidfd_send_signal(pidfd, 0)".into(),
            Step::Clone3 => "clone3(CLONE_PIDFD)".into(),
            Step::Wait => "waitpid()".into(),
            Step::CloseRange if self.arg == 0 => "close_range(fd, fd, CLOSE_RANGE_CLOEXEC)".into(),
            Step::CloseRange => "close_range(fd, fd, 0)".into(),
            Step::Openat2 => "openat2(\"/\", O_PATH, RESOLVE_NO_MAGICLINKS)".into(),
            Step::Landlock => "landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)".into(),
            Step::Sethostname => "sethostname() in the new UTS namespace".into(),
            Step::Unknown => format!("unknown probe step (arg {})", self.arg),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.call())?;
        if self.errno != 0 {
            write!(f, " failed: {}", errno_text(self.errno))?;
        }
        if let Some(m) = &self.kernel_msg {
            write!(f, " (kernel: {m})")?;
        }
        Ok(())
    }
}

/// `CLONE_NEWNET|CLONE_NEWPID` for a flag word.
pub fn clone_flag_names(flags: u32) -> String {
    const NAMES: [(c_int, &str); 8] = [
        (libc::CLONE_NEWUSER, "CLONE_NEWUSER"),
        (libc::CLONE_NEWNS, "CLONE_NEWNS"),
        (libc::CLONE_NEWPID, "CLONE_NEWPID"),
        (libc::CLONE_NEWNET, "CLONE_NEWNET"),
        (libc::CLONE_NEWIPC, "CLONE_NEWIPC"),
        (libc::CLONE_NEWUTS, "CLONE_NEWUTS"),
        (libc::CLONE_NEWCGROUP, "CLONE_NEWCGROUP"),
        (libc::CLONE_NEWTIME, "CLONE_NEWTIME"),
    ];
    let names: Vec<&str> = NAMES.iter().filter(|(b, _)| flags & (*b as u32) != 0).map(|(_, n)| *n).collect();
    if names.is_empty() {
        format!("{flags:#x}")
    } else {
        names.join("|")
    }
}

fn wait_status_text(status: c_int) -> String {
    if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else {
        format!("wait status {status:#x}")
    }
}

/// The namespaces [`Prober::namespace`] can try to create inside a user
/// namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Net,
    Ipc,
    Uts,
    Cgroup,
    Time,
}

impl Namespace {
    fn flag(self) -> c_int {
        match self {
            Namespace::Net => libc::CLONE_NEWNET,
            Namespace::Ipc => libc::CLONE_NEWIPC,
            Namespace::Uts => libc::CLONE_NEWUTS,
            Namespace::Cgroup => libc::CLONE_NEWCGROUP,
            Namespace::Time => libc::CLONE_NEWTIME,
        }
    }
}

// ---------------------------------------------------------------------------
// Child side. Everything below until `run_in_child` may run between fork and
// _exit: raw syscalls on memory prepared before the fork, no allocation.

const MSG_MAX: usize = 240;
const HEADER: usize = 16;
const RECORD: usize = HEADER + MSG_MAX;

/// The child's report (fixed size, lives on the stack).
#[derive(Clone, Copy)]
struct Raw {
    step: u32,
    arg: u32,
    errno: i32,
    msg_len: usize,
    msg: [u8; MSG_MAX],
}

impl Raw {
    fn ok() -> Raw {
        Raw { step: 0, arg: 0, errno: 0, msg_len: 0, msg: [0; MSG_MAX] }
    }

    fn new(step: Step, arg: u32, errno: i32) -> Raw {
        Raw { step: step as u32, arg, errno, msg_len: 0, msg: [0; MSG_MAX] }
    }

    fn encode(&self, buf: &mut [u8; RECORD]) {
        buf[0..4].copy_from_slice(&self.step.to_ne_bytes());
        buf[4..8].copy_from_slice(&self.arg.to_ne_bytes());
        buf[8..12].copy_from_slice(&self.errno.to_ne_bytes());
        let n = self.msg_len.min(MSG_MAX);
        buf[12..16].copy_from_slice(&(n as u32).to_ne_bytes());
        buf[HEADER..HEADER + n].copy_from_slice(&self.msg[..n]);
    }

    fn decode(buf: &[u8; RECORD]) -> Outcome {
        let word = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let step = word(0);
        if step == 0 {
            return Ok(());
        }
        let n = (word(12) as usize).min(MSG_MAX);
        let msg = String::from_utf8_lossy(&buf[HEADER..HEADER + n]).trim().to_string();
        // fs_context log lines start with "e ", "w " or "i ".
        let msg = match msg.split_once(' ') {
            Some(("e" | "w" | "i", rest)) => rest.to_string(),
            _ => msg,
        };
        Err(Failure {
            step: Step::from_u32(step),
            arg: word(4),
            errno: word(8) as i32,
            kernel_msg: if msg.is_empty() { None } else { Some(msg) },
        })
    }
}

/// What a probe body running in the child returns.
enum ChildOutcome {
    Done,
    Failed(Raw),
    /// A grandchild already wrote the record; exit with this code.
    Reported(c_int),
}

impl From<Result<(), Raw>> for ChildOutcome {
    fn from(r: Result<(), Raw>) -> Self {
        match r {
            Ok(()) => ChildOutcome::Done,
            Err(raw) => ChildOutcome::Failed(raw),
        }
    }
}

/// Exits the child if a probe body ever unwinds, so a forked copy of the
/// caller (e.g. a test harness) never keeps running.
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        // SAFETY: _exit is async-signal-safe and only ever reached in a forked
        // probe child that is unwinding.
        unsafe { libc::_exit(127) }
    }
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn fail<T>(step: Step, arg: u32) -> Result<T, Raw> {
    Err(Raw::new(step, arg, last_errno()))
}

fn write_record(fd: c_int, raw: &Raw) {
    let mut buf = [0u8; RECORD];
    raw.encode(&mut buf);
    // SAFETY: buf is a live stack buffer of RECORD bytes; a short or failed
    // write shows up in the parent as a missing record.
    unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
}

fn sys_unshare(flags: c_int) -> Result<(), i32> {
    // SAFETY: unshare takes no pointers; it only changes this (child) process.
    if unsafe { libc::unshare(flags) } < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

fn write_file(path: &CStr, data: &[u8]) -> Result<(), i32> {
    // SAFETY: path is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: data is a live slice of data.len() bytes; fd is ours.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let err = last_errno();
    // SAFETY: fd was opened above and is closed exactly once.
    unsafe { libc::close(fd) };
    if n < 0 {
        Err(err)
    } else if n as usize != data.len() {
        Err(libc::EIO)
    } else {
        Ok(())
    }
}

/// unshare(CLONE_NEWUSER) and map uid/gid 0 to the caller's (level 1) or to
/// the enclosing namespace's 0 (deeper levels).
fn enter_userns(prep: &Prep, level: u32) -> Result<(), Raw> {
    sys_unshare(libc::CLONE_NEWUSER).map_err(|e| Raw::new(Step::UnshareUser, level, e))?;
    match write_file(c"/proc/self/setgroups", b"deny") {
        Ok(()) | Err(libc::ENOENT) => {}
        Err(e) => return Err(Raw::new(Step::Setgroups, level, e)),
    }
    let (uid_map, gid_map): (&[u8], &[u8]) =
        if level <= 1 { (&prep.uid_map, &prep.gid_map) } else { (b"0 0 1\n", b"0 0 1\n") };
    write_file(c"/proc/self/uid_map", uid_map).map_err(|e| Raw::new(Step::UidMap, level, e))?;
    write_file(c"/proc/self/gid_map", gid_map).map_err(|e| Raw::new(Step::GidMap, level, e))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid != 0 {
        return Err(Raw::new(Step::UidCheck, uid, 0));
    }
    Ok(())
}

fn unshare_ns(flags: c_int) -> Result<(), Raw> {
    sys_unshare(flags).map_err(|e| Raw::new(Step::Unshare, flags as u32, e))
}

fn make_private() -> Result<(), Raw> {
    // SAFETY: static NUL-terminated strings; NULL source/type/data are
    // allowed for a propagation change.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if r < 0 {
        fail(Step::MakePrivate, 0)
    } else {
        Ok(())
    }
}

/// Copies the most relevant message from an fs_context log into `raw`.
fn read_fs_log(fsfd: c_int, raw: &mut Raw) {
    let mut buf = [0u8; MSG_MAX];
    for _ in 0..8 {
        // SAFETY: buf is a live stack buffer of MSG_MAX bytes.
        let n = unsafe { libc::read(fsfd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        let n = n as usize;
        if raw.msg_len == 0 || buf[0] == b'e' {
            raw.msg[..n].copy_from_slice(&buf[..n]);
            raw.msg_len = n;
        }
    }
}

fn fs_fail<T>(step: Step, arg: u32, fsfd: c_int) -> Result<T, Raw> {
    let mut raw = Raw::new(step, arg, last_errno());
    read_fs_log(fsfd, &mut raw);
    Err(raw)
}

fn fsopen(fs: u32) -> Result<c_int, Raw> {
    // SAFETY: the name is a static NUL-terminated string.
    let fd = unsafe { libc::syscall(libc::SYS_fsopen, FS_NAMES[fs as usize].as_ptr(), FSOPEN_CLOEXEC) };
    if fd < 0 {
        fail(Step::Fsopen, fs)
    } else {
        Ok(fd as c_int)
    }
}

fn fsconfig_string(fsfd: c_int, key: u32, value: &CStr) -> Result<(), Raw> {
    // SAFETY: key and value are NUL-terminated and outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fsfd,
            FSCONFIG_SET_STRING,
            OVERLAY_KEYS[key as usize].as_ptr(),
            value.as_ptr(),
            0 as c_int,
        )
    };
    if r < 0 {
        fs_fail(Step::FsconfigSet, key, fsfd)
    } else {
        Ok(())
    }
}

/// FSCONFIG_CMD_CREATE + fsmount; returns the detached mount's fd.
fn create_and_mount(fsfd: c_int, fs: u32) -> Result<c_int, Raw> {
    // SAFETY: FSCONFIG_CMD_CREATE takes no key or value pointers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fsfd,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0 as c_int,
        )
    };
    if r < 0 {
        return fs_fail(Step::FsconfigCreate, fs, fsfd);
    }
    // SAFETY: fsmount takes no pointers.
    let m = unsafe { libc::syscall(libc::SYS_fsmount, fsfd, FSMOUNT_CLOEXEC, 0 as c_uint) };
    if m < 0 {
        return fs_fail(Step::Fsmount, fs, fsfd);
    }
    Ok(m as c_int)
}

fn new_mount(fs: u32) -> Result<c_int, Raw> {
    let fsfd = fsopen(fs)?;
    create_and_mount(fsfd, fs)
}

fn move_mount(from: c_int, to_dirfd: c_int, to: &CStr, arg: u32) -> Result<(), Raw> {
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let r = unsafe {
        libc::syscall(libc::SYS_move_mount, from, c"".as_ptr(), to_dirfd, to.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH)
    };
    if r < 0 {
        fail(Step::MoveMount, arg)
    } else {
        Ok(())
    }
}

fn mkdirat(dirfd: c_int, name: &CStr) -> Result<(), Raw> {
    // SAFETY: name is NUL-terminated and outlives the call.
    if unsafe { libc::mkdirat(dirfd, name.as_ptr(), 0o755) } < 0 {
        fail(Step::Mkdir, 0)
    } else {
        Ok(())
    }
}

fn openat(dirfd: c_int, name: &CStr, flags: c_int, step: Step) -> Result<(), Raw> {
    // SAFETY: name is NUL-terminated and outlives the call.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as c_uint) };
    if fd < 0 {
        return fail(step, 0);
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    Ok(())
}

fn body_userns(prep: &Prep) -> Result<(), Raw> {
    enter_userns(prep, 1)
}

fn body_nested(prep: &Prep, levels: u32) -> Result<(), Raw> {
    for level in 1..=levels {
        enter_userns(prep, level)?;
    }
    Ok(())
}

fn body_mount_api(prep: &Prep) -> Result<(), Raw> {
    enter_userns(prep, 1)?;
    unshare_ns(libc::CLONE_NEWNS)?;
    make_private()?;
    let root = new_mount(FS_TMPFS)?;
    // SAFETY: the path is a static NUL-terminated string.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | AT_RECURSIVE,
        )
    };
    if tree < 0 {
        return fail(Step::OpenTree, 0);
    }
    let tree = tree as c_int;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: attr is a live struct mount_attr of the size passed; the path
    // is a static empty string used with AT_EMPTY_PATH.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return fail(Step::MountSetattr, 0);
    }
    move_mount(root, libc::AT_FDCWD, &prep.scratch, 0)?;
    mkdirat(root, c"r")?;
    move_mount(tree, root, c"r", 1)?;
    // SAFETY: root is a mount fd we own.
    if unsafe { libc::fchdir(root) } < 0 {
        return fail(Step::Fchdir, 0);
    }
    // SAFETY: static NUL-terminated strings.
    if unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) } < 0 {
        return fail(Step::PivotRoot, 0);
    }
    // SAFETY: static NUL-terminated string.
    if unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) } < 0 {
        return fail(Step::UmountOldRoot, 0);
    }
    Ok(())
}

fn body_overlay(prep: &Prep) -> Result<(), Raw> {
    enter_userns(prep, 1)?;
    unshare_ns(libc::CLONE_NEWNS)?;
    make_private()?;
    let base = new_mount(FS_TMPFS)?;
    move_mount(base, libc::AT_FDCWD, &prep.scratch, 0)?;
    for d in [c"l", c"u", c"w"] {
        mkdirat(base, d)?;
    }
    openat(base, c"l/f", libc::O_CREAT | libc::O_WRONLY, Step::CreateFile)?;
    let fsfd = fsopen(FS_OVERLAY)?;
    fsconfig_string(fsfd, 0, &prep.lower)?;
    fsconfig_string(fsfd, 1, &prep.upper)?;
    fsconfig_string(fsfd, 2, &prep.work)?;
    let ovl = create_and_mount(fsfd, FS_OVERLAY)?;
    openat(ovl, c"new", libc::O_CREAT | libc::O_WRONLY, Step::OverlayWrite)?;
    openat(ovl, c"f", libc::O_WRONLY, Step::OverlayCopyUp)?;
    // SAFETY: static NUL-terminated string.
    if unsafe { libc::unlinkat(ovl, c"f".as_ptr(), 0) } < 0 {
        return fail(Step::OverlayUnlink, 0);
    }
    Ok(())
}

fn body_pid1() -> Result<(), Raw> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if pid != 1 {
        return Err(Raw::new(Step::PidNotOne, pid as u32, 0));
    }
    let proc_mnt = new_mount(FS_PROC)?;
    openat(proc_mnt, c"1/stat", libc::O_RDONLY, Step::ProcEntry)
}

fn body_pidns(prep: &Prep, out: c_int) -> ChildOutcome {
    let setup = (|| {
        enter_userns(prep, 1)?;
        unshare_ns(libc::CLONE_NEWNS)?;
        make_private()?;
        unshare_ns(libc::CLONE_NEWPID)
    })();
    if let Err(raw) = setup {
        return ChildOutcome::Failed(raw);
    }
    // SAFETY: the grandchild only runs body_pid1 (raw syscalls, no
    // allocation), writes its record and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return ChildOutcome::Failed(Raw::new(Step::Fork, 0, last_errno()));
    }
    if pid == 0 {
        let guard = ExitOnUnwind;
        let raw = match body_pid1() {
            Ok(()) => Raw::ok(),
            Err(raw) => raw,
        };
        write_record(out, &raw);
        std::mem::forget(guard);
        // SAFETY: terminating the probe grandchild.
        unsafe { libc::_exit(0) }
    }
    ChildOutcome::Reported(wait_exit_code(pid))
}

fn body_namespace(prep: &Prep, ns: Namespace) -> Result<(), Raw> {
    enter_userns(prep, 1)?;
    unshare_ns(ns.flag())?;
    // A sandbox names its host (a container's seccomp profile may refuse it).
    // SAFETY: a static string and its length.
    if ns == Namespace::Uts && unsafe { libc::sethostname(c"capsule".as_ptr(), 7) } < 0 {
        return fail(Step::Sethostname, 0);
    }
    if ns == Namespace::Time {
        // SAFETY: static NUL-terminated string.
        if unsafe { libc::access(c"/proc/self/ns/time_for_children".as_ptr(), libc::F_OK) } < 0 {
            return fail(Step::NsFile, 0);
        }
    }
    Ok(())
}

fn body_seccomp() -> Result<(), Raw> {
    let mut filter = [libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW }];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_mut_ptr() };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as c_ulong, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) } < 0 {
        return fail(Step::NoNewPrivs, 0);
    }
    // SAFETY: prog points at a live one-instruction filter on this stack.
    if unsafe {
        libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0 as c_uint, &prog as *const libc::sock_fprog)
    } < 0
    {
        return fail(Step::SeccompInstall, 0);
    }
    // SAFETY: PR_GET_SECCOMP takes no arguments.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP) };
    if mode != 2 {
        return Err(Raw::new(Step::SeccompMode, mode as u32, if mode < 0 { last_errno() } else { 0 }));
    }
    Ok(())
}

/// Waits for `pid` (retrying on EINTR) and turns its status into an exit
/// code: the exit status, 128 + signal, or 255.
fn wait_exit_code(pid: libc::pid_t) -> c_int {
    let status = wait_status(pid).unwrap_or(255 << 8);
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

fn wait_status(pid: libc::pid_t) -> Result<c_int, i32> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: status is a live c_int; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = last_errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Forks, runs `body` in the child (which must not allocate) and collects
/// its record. `body` gets the write end of the report pipe, for probes whose
/// grandchild reports.
fn run_in_child<F: Fn(c_int) -> ChildOutcome>(body: F) -> Outcome {
    let mut fds: [c_int; 2] = [-1, -1];
    // SAFETY: fds is a live array of two c_ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(Failure::new(Step::Pipe, 0, last_errno()));
    }
    let (rd, wr) = (fds[0], fds[1]);
    let mut buf = [0u8; RECORD];
    // SAFETY: the child only runs `body`, which by contract makes raw
    // syscalls on memory prepared before the fork and never allocates or
    // takes locks, then writes its record and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = last_errno();
        // SAFETY: both fds are ours and closed once.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        return Err(Failure::new(Step::Fork, 0, e));
    }
    if pid == 0 {
        let guard = ExitOnUnwind;
        // SAFETY: rd is the child's copy of the read end.
        unsafe { libc::close(rd) };
        let code = match body(wr) {
            ChildOutcome::Done => {
                write_record(wr, &Raw::ok());
                0
            }
            ChildOutcome::Failed(raw) => {
                write_record(wr, &raw);
                1
            }
            ChildOutcome::Reported(code) => code,
        };
        std::mem::forget(guard);
        // SAFETY: terminating the probe child without running the caller's
        // atexit handlers or destructors.
        unsafe { libc::_exit(code) }
    }
    // SAFETY: wr is the parent's copy of the write end, closed once.
    unsafe { libc::close(wr) };
    let mut got = 0usize;
    while got < RECORD {
        // SAFETY: reading into the unfilled tail of buf.
        let n = unsafe { libc::read(rd, buf[got..].as_mut_ptr().cast(), RECORD - got) };
        if n < 0 && last_errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    // SAFETY: rd is ours, closed once.
    unsafe { libc::close(rd) };
    let status = wait_status(pid);
    if got < RECORD {
        return Err(match status {
            Ok(s) => Failure::new(Step::ChildDied, s as u32, 0),
            Err(e) => Failure::new(Step::Wait, 0, e),
        });
    }
    Raw::decode(&buf)
}

/// Strings and buffers the forked probes need, prepared before forking.
struct Prep {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    scratch: CString,
    lower: CString,
    upper: CString,
    work: CString,
}

/// Runs the forked probes. Construct once, call the probes in any order.
pub struct Prober {
    prep: Prep,
    /// Whether a user-namespace ENOSPC may be transient (the limit is not 0).
    retry_enospc: bool,
}

impl Default for Prober {
    fn default() -> Self {
        Prober::new()
    }
}

impl Prober {
    pub fn new() -> Prober {
        let ids = ids();
        // An existing directory to mount the probe tmpfs on (inside the
        // probe's private mount namespace only).
        let scratch = ["/tmp", "/mnt", "/var/tmp", "/run", "/dev"]
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .find(|p| p.is_dir())
            .unwrap_or_else(|| "/tmp".into());
        let cpath = |suffix: &str| {
            let mut v = scratch.as_os_str().as_bytes().to_vec();
            v.extend_from_slice(suffix.as_bytes());
            CString::new(v).unwrap_or_else(|_| c"/tmp".to_owned())
        };
        let max_userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        Prober {
            retry_enospc: max_userns != Some(0),
            prep: Prep {
                uid_map: format!("0 {} 1\n", ids.euid).into_bytes(),
                gid_map: format!("0 {} 1\n", ids.egid).into_bytes(),
                scratch: cpath(""),
                lower: cpath("/l"),
                upper: cpath("/u"),
                work: cpath("/w"),
            },
        }
    }

    /// Runs a probe; retries for up to ~100 ms when creating a user namespace
    /// fails with ENOSPC, because the kernel frees the namespaces of earlier
    /// probes asynchronously and a low user.max_user_namespaces limit can
    /// still count them.
    fn run<F: Fn(c_int) -> ChildOutcome>(&self, body: F) -> Outcome {
        // Among ENOSPC failures keep the deepest one: a shallower failure on
        // a retry is the leftover count of the previous attempt.
        let mut deepest: Option<Failure> = None;
        for _ in 0..10 {
            match run_in_child(&body) {
                Err(f) if self.retry_enospc && f.step == Step::UnshareUser && f.errno == libc::ENOSPC => {
                    if deepest.as_ref().is_none_or(|d| f.arg > d.arg) {
                        deepest = Some(f);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r,
            }
        }
        Err(deepest.expect("set by the loop"))
    }

    /// unshare(CLONE_NEWUSER), setgroups deny, "0 <euid> 1" uid/gid maps.
    pub fn user_namespace(&self) -> Outcome {
        self.run(|_| body_userns(&self.prep).into())
    }

    /// `levels` user namespaces, each inside the previous one.
    pub fn nested_user_namespaces(&self, levels: u32) -> Outcome {
        self.run(|_| body_nested(&self.prep, levels).into())
    }

    /// In a user + mount namespace: fsopen/fsconfig/fsmount a tmpfs,
    /// open_tree(OPEN_TREE_CLONE|AT_RECURSIVE) of "/", mount_setattr on the
    /// clone, move_mount both, pivot_root into the tmpfs.
    pub fn mount_api(&self) -> Outcome {
        self.run(|_| body_mount_api(&self.prep).into())
    }

    /// In a user + mount namespace: an overlay over tmpfs directories,
    /// then create, copy-up and whiteout a file on it.
    pub fn overlayfs(&self) -> Outcome {
        self.run(|_| body_overlay(&self.prep).into())
    }

    /// In a user + mount + PID namespace: fork PID 1 and mount a fresh
    /// procfs (fsopen("proc")) from it.
    pub fn pid_namespace(&self) -> Outcome {
        self.run(|out| body_pidns(&self.prep, out))
    }

    /// unshare(`ns`) inside a fresh user namespace.
    pub fn namespace(&self, ns: Namespace) -> Outcome {
        self.run(|_| body_namespace(&self.prep, ns).into())
    }

    /// no_new_privs + an allow-all seccomp filter.
    pub fn seccomp_filter(&self) -> Outcome {
        self.run(|_| body_seccomp().into())
    }
}

pub use query::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip() {
        let mut raw = Raw::new(Step::FsconfigCreate, FS_OVERLAY, libc::EINVAL);
        raw.msg[..5].copy_from_slice(b"e bad");
        raw.msg_len = 5;
        let mut buf = [0u8; RECORD];
        raw.encode(&mut buf);
        let f = Raw::decode(&buf).unwrap_err();
        assert_eq!(f.step, Step::FsconfigCreate);
        assert_eq!(f.arg, FS_OVERLAY);
        assert_eq!(f.errno, libc::EINVAL);
        assert_eq!(f.kernel_msg.as_deref(), Some("bad"));
        assert!(f.to_string().starts_with("fsconfig(FSCONFIG_CMD_CREATE) for overlay failed: "));
        Raw::ok().encode(&mut buf);
        assert_eq!(Raw::decode(&buf), Ok(()));
    }

    #[test]
    fn steps_roundtrip() {
        for s in Step::ALL {
            assert_eq!(Step::from_u32(s as u32), s);
        }
        assert_eq!(Step::from_u32(0xffff), Step::Unknown);
    }

    #[test]
    fn flag_names() {
        assert_eq!(clone_flag_names((libc::CLONE_NEWNET | libc::CLONE_NEWPID) as u32), "CLONE_NEWPID|CLONE_NEWNET");
    }

    #[test]
    fn child_reports_and_caller_is_untouched() {
        let seccomp_line = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status.lines().find(|l| l.starts_with("Seccomp:")).map(str::to_string)
        };
        let before = std::fs::read_link("/proc/self/ns/user").unwrap();
        let seccomp_before = seccomp_line();
        let p = Prober::new();
        // Whatever the host allows, the probe must come back with a result
        // and leave this process in its namespaces.
        let _ = p.user_namespace();
        let _ = p.seccomp_filter();
        assert_eq!(std::fs::read_link("/proc/self/ns/user").unwrap(), before);
        assert_eq!(seccomp_line(), seccomp_before);
    }
}
