//! The mount plan's execution in PID 1, with the new mount API (syscalls
//! only, no allocation).

use super::step::{Fail, Step};
use crate::plan::mounts::{Base, MountPlan, Op, DEVICES, HOST_DEVICES};
use crate::plan::overlay::{FUSE_LOWER, FUSE_MOUNTPOINT, STAGE_MOUNTPOINT};
use crate::proto::spec::DEV_SHM_SIZE;
use crate::sys::{
    self, SysResult, AT_RECURSIVE, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
    OPEN_TREE_CLONE,
};
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Makes a fresh tmpfs mount, detached.
pub(crate) fn tmpfs(size: &CStr, mode: &CStr, attrs: u64) -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"tmpfs")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"size", size)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"mode", mode)?;
    sys::fsconfig_create(fs.as_raw_fd())?;
    sys::fsmount(fs.as_raw_fd(), attrs)
}

/// Creates a fresh procfs mount of the caller's PID namespace, detached.
/// Must run while the caller still holds CAP_SYS_ADMIN over that PID
/// namespace's owner and sees a fully visible /proc (the host's).
///
/// `hidepid=2` (invisible): a process the viewer may not ptrace has no
/// /proc/PID at all. That is PID 1: its memory is the supervisor's,
/// non-dumpable, but its /proc files belong to the caller like the
/// program's (see `Supervisor::start`), so without it the program could
/// list PID 1's descriptors or raise the supervisor's oom_score_adj
/// (shared by every process of that memory). The program's own processes
/// stay visible to each other.
pub(crate) fn new_proc() -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"proc")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"hidepid", c"2")?;
    sys::fsconfig_create(fs.as_raw_fd())?;
    sys::fsmount(fs.as_raw_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
}

/// Splits `/a/b/c` into a NUL-terminated parent `/a/b` (written into `buf`)
/// and the last component `c`.
pub(crate) fn split_parent<'a>(path: &'a CStr, buf: &'a mut [u8; 4096]) -> SysResult<(&'a CStr, &'a CStr)> {
    let bytes = path.to_bytes_with_nul();
    let slash = bytes.iter().rposition(|&b| b == b'/').ok_or(libc::EINVAL)?;
    if slash + 1 >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    let parent_len = if slash == 0 { 1 } else { slash };
    buf[..parent_len].copy_from_slice(&bytes[..parent_len]);
    buf[parent_len] = 0;
    let parent = CStr::from_bytes_with_nul(&buf[..=parent_len]).map_err(|_| libc::EINVAL)?;
    let last = CStr::from_bytes_with_nul(&bytes[slash + 1..]).map_err(|_| libc::EINVAL)?;
    if last.is_empty() {
        return Err(libc::EINVAL);
    }
    Ok((parent, last))
}

/// Creates the directory `path` and its missing parents inside `root`.
pub(crate) fn mkdir_p(root: RawFd, path: &CStr) -> SysResult<OwnedFd> {
    match sys::open_in_root(root, path, libc::O_PATH | libc::O_DIRECTORY, 0) {
        Err(libc::ENOENT) => {}
        other => return other,
    }
    let bytes = path.to_bytes();
    let mut buf = [0u8; 4096];
    if bytes.len() >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    // Walk every prefix `/a`, `/a/b`, ... creating what is missing.
    for end in (1..=bytes.len()).filter(|&i| i == bytes.len() || bytes[i] == b'/') {
        buf[..end].copy_from_slice(&bytes[..end]);
        buf[end] = 0;
        let prefix = CStr::from_bytes_with_nul(&buf[..=end]).map_err(|_| libc::EINVAL)?;
        if sys::open_in_root(root, prefix, libc::O_PATH, 0).is_ok() {
            continue;
        }
        let mut pbuf = [0u8; 4096];
        let (parent, last) = split_parent(prefix, &mut pbuf)?;
        let dir = sys::open_in_root(root, parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        match sys::mkdirat(dir.as_raw_fd(), last, 0o755) {
            Ok(()) | Err(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    sys::open_in_root(root, path, libc::O_PATH | libc::O_DIRECTORY, 0)
}

/// Opens (creating if needed) the mount point `path` inside `root`: a
/// directory, or with `file` an empty regular file.
pub(crate) fn mount_point(root: RawFd, path: &CStr, file: bool) -> SysResult<OwnedFd> {
    if !file {
        return mkdir_p(root, path);
    }
    match sys::open_in_root(root, path, libc::O_PATH, 0) {
        Err(libc::ENOENT) => {}
        other => return other,
    }
    let mut buf = [0u8; 4096];
    let (parent, last) = split_parent(path, &mut buf)?;
    let dir = mkdir_p(root, parent)?;
    match sys::openat(dir.as_raw_fd(), last, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644) {
        Ok(_) | Err(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    sys::open_in_root(root, path, libc::O_PATH, 0)
}

/// Creates a regular file at `path` inside `root` and returns it open for writing.
pub(crate) fn create_file(root: RawFd, path: &CStr) -> SysResult<OwnedFd> {
    let mut buf = [0u8; 4096];
    let (parent, last) = split_parent(path, &mut buf)?;
    let dir = mkdir_p(root, parent)?;
    sys::openat(dir.as_raw_fd(), last, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | libc::O_NOFOLLOW, 0o644)
}

/// Clones the host sources of a `/dev` (its device nodes).
pub(crate) fn clone_devices(nodes: &[Cell<RawFd>; 5]) -> SysResult<()> {
    for (cell, host) in nodes.iter().zip(HOST_DEVICES) {
        let fd = sys::open_tree(libc::AT_FDCWD, host, OPEN_TREE_CLONE)?;
        // Device nodes keep working (no nodev) but can never be setuid.
        sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_NOSUID, 0)?;
        cell.set(into_raw(fd));
    }
    Ok(())
}

pub(crate) fn into_raw(fd: OwnedFd) -> RawFd {
    use std::os::fd::IntoRawFd;
    fd.into_raw_fd()
}

/// Takes back an fd stored with `into_raw` (each cell is taken once).
pub(crate) fn take(cell: &Cell<RawFd>) -> Option<OwnedFd> {
    let fd = cell.replace(-1);
    // SAFETY: a cell holds an fd `into_raw` released, or -1; replace hands it out once.
    (fd >= 0).then(|| unsafe { sys::reclaim_fd(fd) })
}

/// Builds a minimal /dev on the directory `at`, with a tmpfs on /dev/shm
/// unless `shm` is false (the mount template's /dev: each run mounts its
/// own). Everything is created through the new tmpfs's own fd: `at` keeps
/// pointing at the directory the tmpfs covers.
pub(crate) fn build_dev(at: &OwnedFd, nodes: &[Cell<RawFd>; 5], shm: bool) -> SysResult<()> {
    let dev = tmpfs(c"1048576", c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)?;
    let d = dev.as_raw_fd();
    for name in DEVICES {
        drop(sys::openat(d, name, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o666)?);
    }
    sys::mkdirat(d, c"shm", 0o1777)?;
    for (target, name) in [
        (c"/proc/self/fd", c"fd"),
        (c"/proc/self/fd/0", c"stdin"),
        (c"/proc/self/fd/1", c"stdout"),
        (c"/proc/self/fd/2", c"stderr"),
    ] {
        sys::symlinkat(target, d, name)?;
    }
    // Attached, it can receive the device nodes and /dev/shm.
    sys::move_mount_fd(d, at.as_raw_fd())?;
    for (cell, name) in nodes.iter().zip(DEVICES) {
        let node = take(cell).ok_or(libc::EBADF)?;
        let target = sys::openat(d, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        sys::move_mount_fd(node.as_raw_fd(), target.as_raw_fd())?;
    }
    if shm {
        let shm_at = sys::openat(d, c"shm", libc::O_PATH | libc::O_DIRECTORY, 0)?;
        mount_shm(&shm_at)?;
    }
    // Populated: nothing may be added to /dev from inside.
    sys::mount_setattr(d, false, MOUNT_ATTR_RDONLY, 0)
}

/// [`DEV_SHM_SIZE`] in decimal, as the tmpfs `size` option (made by the
/// compiler: PID 1 does not allocate).
const SHM_SIZE: &CStr = match CStr::from_bytes_until_nul(&decimal::<21>(DEV_SHM_SIZE)) {
    Ok(s) => s,
    Err(_) => panic!("no NUL after the digits"),
};

/// `v` in decimal digits followed by NULs (at least one).
const fn decimal<const N: usize>(v: u64) -> [u8; N] {
    let (mut digits, mut len, mut rest) = ([0u8; N], 0, v);
    loop {
        len += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    assert!(len < N, "too many digits for the buffer");
    rest = v;
    while len > 0 {
        len -= 1;
        digits[len] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    digits
}

/// Mounts a fresh /dev/shm on the directory `at`.
fn mount_shm(at: &OwnedFd) -> SysResult<()> {
    let shm = tmpfs(SHM_SIZE, c"1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?;
    sys::move_mount_fd(shm.as_raw_fd(), at.as_raw_fd())
}

/// State PID 1 carries through the build.
pub(crate) struct Build {
    root: Option<OwnedFd>,
    scratch: Option<OwnedFd>,
    /// The run's procfs, attached at the first `/proc` (later ones bind it).
    proc_fd: RawFd,
    proc_attached: Cell<Option<usize>>,
    /// Built on the mount template: /dev is there but for /dev/shm, and
    /// the /proc mounts come last.
    on_template: bool,
}

impl Build {
    pub(crate) fn new(proc_fd: RawFd) -> Self {
        Build { root: None, scratch: None, proc_fd, proc_attached: Cell::new(None), on_template: false }
    }
}

/// The mount plan's step 1a (PID 1's step 7), in the supervisor's mount
/// namespace: clones the bind sources from the descriptors the supervisor
/// resolved.
pub(crate) fn clone_binds(plan: &MountPlan) -> Result<(), Fail> {
    for op in &plan.ops {
        let Op::Bind { src: Some(src), attrs, clone, name, .. } = op else { continue };
        let fd = sys::open_tree(src.as_raw_fd(), c"", OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32)
            .map_err(|e| Fail::at(Step::BindSource, e, *name))?;
        sys::mount_setattr(fd.as_raw_fd(), true, *attrs, 0).map_err(|e| Fail::at(Step::BindSource, e, *name))?;
        clone.set(into_raw(fd));
    }
    Ok(())
}

/// The mount plan's step 1b (PID 1's step 9), in PID 1's mount namespace:
/// clones the other sources from the host view.
pub(crate) fn clone_sources(plan: &MountPlan, b: &mut Build) -> Result<(), Fail> {
    let root = match &plan.base {
        Base::HostView => clone_host_root()?,
        Base::EmptyRoot { size } => {
            tmpfs(size, c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).map_err(|e| Fail::new(Step::RootTmpfs, e))?
        }
        Base::Fuse { argv, ptrs, name } => start_fuse(argv, ptrs, *name)?,
    };
    b.root = Some(root);
    if let Some(fd) = plan.stage {
        // Where the staged overlays' upper directories are (the old
        // root's /tmp, gone with it at the pivot).
        sys::move_mount_to_path(fd, STAGE_MOUNTPOINT).map_err(|e| Fail::new(Step::Overlay, e))?;
    }
    for op in &plan.ops {
        if let Op::Overlay { lower, upper, work, base, volatile, fs, name, .. } = op {
            if let Some([l, u, w, at]) = base {
                // The layer as it is, read-only, where the staged
                // overlay's lower layer is.
                let b = overlay(l, u, w, true, false).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
                sys::move_mount_to_path(b.as_raw_fd(), at).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
            }
            fs.set(into_raw(
                overlay(lower, upper, work, false, *volatile).map_err(|e| Fail::at(Step::Overlay, e, *name))?,
            ));
        }
    }
    for op in &plan.ops {
        if let Op::Dev { nodes, name, .. } = op {
            clone_devices(nodes).map_err(|e| Fail::at(Step::Dev, e, *name))?
        }
    }
    if plan.needs_scratch {
        // It must be attached somewhere to be cloned; the old root's /tmp
        // of this private namespace goes away with the old root.
        b.scratch = Some(scratch(c"/tmp")?);
    }
    Ok(())
}

/// The host view's root: the host's `/` and every mount under it, cloned
/// read-only, nosuid and nodev.
fn clone_host_root() -> Result<OwnedFd, Fail> {
    let fail = |e| Fail::new(Step::RootClone, e);
    let fd = sys::open_tree(libc::AT_FDCWD, c"/", OPEN_TREE_CLONE | AT_RECURSIVE).map_err(fail)?;
    sys::mount_setattr(fd.as_raw_fd(), true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0)
        .map_err(fail)?;
    Ok(fd)
}

/// The scratch tmpfs, attached at `at`: an empty read-only file to bind
/// over hidden files, and an empty directory to bind over hidden directories.
fn scratch(at: &CStr) -> Result<OwnedFd, Fail> {
    let fail = |e| Fail::new(Step::Scratch, e);
    let scratch = tmpfs(c"4096", c"0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC).map_err(fail)?;
    drop(sys::openat(scratch.as_raw_fd(), c"empty", libc::O_CREAT | libc::O_WRONLY, 0o444).map_err(fail)?);
    sys::mkdirat(scratch.as_raw_fd(), c"dir", 0o555).map_err(fail)?;
    sys::move_mount_to_path(scratch.as_raw_fd(), at).map_err(fail)?;
    Ok(scratch)
}

/// The mount template (`supervisor::template`), built once per supervisor
/// on a thread of its own that has just entered a mount namespace of its
/// own: the host root cloned read-only and /dev with its device nodes
/// (/dev/shm left to each run), pivoted into. Everything in it is
/// read-only; what a run writes to is mounted fresh in its copy.
pub(crate) fn build_template() -> Result<(), Fail> {
    let nodes = [const { Cell::new(-1) }; 5];
    let built = build_template_with(&nodes);
    // The nodes not attached (a failure half-way) are this thread's, i.e.
    // the supervisor's, descriptors.
    for cell in &nodes {
        drop(take(cell));
    }
    built
}

fn build_template_with(nodes: &[Cell<RawFd>; 5]) -> Result<(), Fail> {
    let root = clone_host_root()?;
    clone_devices(nodes).map_err(|e| Fail::new(Step::Dev, e))?;
    sys::move_mount_to_path(root.as_raw_fd(), c"/").map_err(|e| Fail::new(Step::AttachRoot, e))?;
    let at = mount_point(root.as_raw_fd(), c"/dev", false).map_err(|e| Fail::new(Step::MountPoint, e))?;
    build_dev(&at, nodes, false).map_err(|e| Fail::new(Step::Dev, e))?;
    pivot(root.as_raw_fd())
}

/// PID 1's steps 8 and 9 on the mount template: a copy of its namespace
/// (so no clone of the host root, no /dev to build, no pivot), then the
/// operations of the run's own. The scratch tmpfs waits on /proc, where
/// nothing else is until the run's procfs, and is detached before that.
pub(crate) fn build_on_template(template: RawFd, plan: &MountPlan, b: &mut Build) -> Result<(), Fail> {
    sys::setns(template, libc::CLONE_NEWNS).map_err(|e| Fail::new(Step::MountTemplate, e))?;
    // Not needed any more, and not to be shared with the tracee.
    sys::close(template);
    sys::unshare(libc::CLONE_NEWNS).map_err(|e| Fail::new(Step::MountTemplate, e))?;
    let root = sys::open(c"/", libc::O_PATH | libc::O_DIRECTORY, 0).map_err(|e| Fail::new(Step::MountTemplate, e))?;
    if plan.needs_scratch {
        b.scratch = Some(scratch(TEMPLATE_SCRATCH)?);
    }
    b.on_template = true;
    apply_ops(plan, b, root.as_raw_fd())?;
    if b.scratch.take().is_some() {
        sys::umount_detach(TEMPLATE_SCRATCH).map_err(|e| Fail::new(Step::Scratch, e))?;
    }
    for (i, op) in plan.ops.iter().enumerate() {
        if let Op::Proc { dst, name } = op {
            attach_proc(plan, b, root.as_raw_fd(), i, dst, *name)?;
        }
    }
    sys::chdir(c"/").map_err(|e| Fail::new(Step::MountTemplate, e))
}

/// Where the scratch tmpfs waits in a tree built on the mount template.
const TEMPLATE_SCRATCH: &CStr = c"/proc";

/// Attaches the run's procfs at `dst` (operation `i`): the first time the
/// procfs itself, later a clone of the first.
fn attach_proc(plan: &MountPlan, b: &Build, root: RawFd, i: usize, dst: &CStr, name: u32) -> Result<(), Fail> {
    let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, name))?;
    let res = match b.proc_attached.get() {
        // The run's procfs is attached once; further /proc
        // mounts are clones of it.
        None => sys::move_mount_fd(b.proc_fd, at.as_raw_fd()),
        Some(first) => {
            let Op::Proc { dst: first_dst, .. } = &plan.ops[first] else { unreachable!() };
            sys::open_in_root(root, first_dst, libc::O_PATH | libc::O_DIRECTORY, 0)
                .and_then(|f| sys::open_tree(f.as_raw_fd(), c"", OPEN_TREE_CLONE | libc::AT_EMPTY_PATH as u32))
                .and_then(|c| sys::move_mount_fd(c.as_raw_fd(), at.as_raw_fd()))
        }
    };
    res.map_err(|e| Fail::at(Step::Proc, e, name))?;
    if b.proc_attached.get().is_none() {
        b.proc_attached.set(Some(i));
    }
    Ok(())
}

/// Makes a kernel overlay, detached. Its layers are looked up here, in
/// PID 1's namespace with the host view as root: overlayfs clones each as
/// a private mount of this namespace.
pub(crate) fn overlay(lower: &CStr, upper: &CStr, work: &CStr, read_only: bool, volatile: bool) -> SysResult<OwnedFd> {
    let fs = sys::fsopen(c"overlay")?;
    sys::fsconfig_string(fs.as_raw_fd(), c"lowerdir", lower)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"upperdir", upper)?;
    sys::fsconfig_string(fs.as_raw_fd(), c"workdir", work)?;
    // Overlay's own metadata in user.* xattrs: an unprivileged mounter
    // cannot write trusted.*.
    sys::fsconfig_flag(fs.as_raw_fd(), c"userxattr")?;
    if read_only {
        // Nothing is written to its upper layer (the layer) at all.
        sys::fsconfig_flag(fs.as_raw_fd(), c"ro")?;
    }
    if volatile {
        // No sync at unmount: a run's writes are written back as a bare
        // program's are; the supervisor marked the layer (layer::volatile).
        sys::fsconfig_flag(fs.as_raw_fd(), c"volatile")?;
    }
    sys::fsconfig_create(fs.as_raw_fd())?;
    let ro = if read_only { MOUNT_ATTR_RDONLY } else { 0 };
    sys::fsmount(fs.as_raw_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | ro)
}

/// Starts fuse-overlayfs (still with the supervisor's capabilities, in
/// PID 1's mount namespace, on /tmp/fuse) and clones its mount
/// as the new root. It daemonizes once mounted: its first process exiting
/// with 0 means the mount is there. The daemon lives on in the run's PID
/// namespace and dies with it.
pub(crate) fn start_fuse(argv: &[CString], ptrs: &[*const libc::c_char], name: u32) -> Result<OwnedFd, Fail> {
    let fail = |e| Fail::at(Step::Fuse, e, name);
    // The daemon's lower layer is a clone of the host's root, taken before
    // anything is mounted for it, so that its own mount is not inside it:
    // a lookup that reached the mount through its lower layer would wait
    // for the daemon forever. Both sit on a tmpfs of this namespace's own
    // over /tmp (the sandbox gets its own /tmp).
    let host = sys::open_tree(libc::AT_FDCWD, c"/", OPEN_TREE_CLONE | AT_RECURSIVE).map_err(fail)?;
    let t = tmpfs(c"4096", c"0700", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC).map_err(fail)?;
    // FUSE_MOUNTPOINT and FUSE_LOWER, once the tmpfs is on /tmp.
    sys::mkdirat(t.as_raw_fd(), c"fuse", 0o700).map_err(fail)?;
    sys::mkdirat(t.as_raw_fd(), c"lower", 0o700).map_err(fail)?;
    sys::move_mount_to_path(t.as_raw_fd(), c"/tmp").map_err(fail)?;
    sys::move_mount_to_path(host.as_raw_fd(), FUSE_LOWER).map_err(fail)?;
    // SAFETY: the child makes raw syscalls only (close_range, open, dup2) and ends in execve or exit.
    match unsafe { sys::fork() }.map_err(fail)? {
        sys::Forked::Child => {
            // Nothing of PID 1's; stdout and stderr to /dev/null (Debian
            // 12's fuse-overlayfs 1.10 complains about an option it passes
            // itself on every start; a failure is reported with the
            // command line).
            let _ = sys::close_from(3);
            if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR, 0) {
                let _ = sys::dup2(null.as_raw_fd(), 1);
                let _ = sys::dup2(null.as_raw_fd(), 2);
            }
            let envp = [std::ptr::null()];
            // SAFETY: `ptrs` points at `argv`'s CStrings and ends with null (`Base::Fuse`); envp is a null.
            unsafe { sys::execve(&argv[0], ptrs, &envp) };
            sys::exit(127)
        }
        sys::Forked::Parent { pid, .. } => {
            let (_, status) = sys::waitpid(pid, false).map_err(fail)?.ok_or(fail(libc::ECHILD))?;
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                return Err(fail(if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 127 {
                    libc::ENOENT
                } else {
                    libc::EIO
                }));
            }
        }
    }
    let fd = sys::open_tree(libc::AT_FDCWD, FUSE_MOUNTPOINT, OPEN_TREE_CLONE).map_err(fail)?;
    sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0).map_err(fail)?;
    Ok(fd)
}

/// A read-only clone of the scratch tmpfs's empty directory (`dir`) or file (`empty`), to mount over a path.
fn empty_cover(b: &Build, which: &CStr) -> Result<OwnedFd, sys::Errno> {
    let scratch = b.scratch.as_ref().expect("prepared").as_raw_fd();
    let fd = sys::open_tree(scratch, which, OPEN_TREE_CLONE)?;
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    sys::mount_setattr(fd.as_raw_fd(), false, ro, 0)?;
    Ok(fd)
}

/// The mount plan's step 2: attaches the new root over the current one.
pub(crate) fn attach_root(b: &Build) -> Result<RawFd, Fail> {
    let root = b.root.as_ref().expect("cloned").as_raw_fd();
    sys::move_mount_to_path(root, c"/").map_err(|e| Fail::new(Step::AttachRoot, e))?;
    Ok(root)
}

/// The mount plan's step 3: applies the operations in order.
pub(crate) fn apply_ops(plan: &MountPlan, b: &Build, root: RawFd) -> Result<(), Fail> {
    for (i, op) in plan.ops.iter().enumerate() {
        match op {
            Op::Bind { clone, dst, name, .. } => {
                let Some(src) = take(clone) else { continue }; // a -try source that was missing
                let is_file = sys::fd_mode(src.as_raw_fd()).is_ok_and(|m| m != libc::S_IFDIR);
                let at = mount_point(root, dst, is_file).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(src.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Bind, e, *name))?;
            }
            Op::Tmpfs { dst, size, mode, attrs, optional, name } => {
                if *optional && sys::open_in_root(root, dst, libc::O_PATH | libc::O_DIRECTORY, 0).is_err() {
                    continue;
                }
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                let fs = tmpfs(size, mode, *attrs).map_err(|e| Fail::at(Step::Tmpfs, e, *name))?;
                sys::move_mount_fd(fs.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Tmpfs, e, *name))?;
            }
            // On the template, after the scratch tmpfs has left /proc.
            Op::Proc { .. } if b.on_template => {}
            Op::Proc { dst, name } => attach_proc(plan, b, root, i, dst, *name)?,
            // The template has /dev (at /dev: `supervisor::template::fits`) but for /dev/shm's tmpfs.
            Op::Dev { name, .. } if b.on_template => {
                sys::open_in_root(root, c"/dev/shm", libc::O_PATH | libc::O_DIRECTORY, 0)
                    .and_then(|at| mount_shm(&at))
                    .map_err(|e| Fail::at(Step::Dev, e, *name))?;
            }
            Op::Dev { dst, nodes, name } => {
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                build_dev(&at, nodes, true).map_err(|e| Fail::at(Step::Dev, e, *name))?;
            }
            Op::Dir { dst, name } => {
                mkdir_p(root, dst).map_err(|e| Fail::at(Step::Dir, e, *name))?;
            }
            Op::File { src, dst, name } => {
                let f = create_file(root, dst).map_err(|e| Fail::at(Step::File, e, *name))?;
                sys::copy_fd(src.as_raw_fd(), f.as_raw_fd()).map_err(|e| Fail::at(Step::File, e, *name))?;
            }
            Op::FileData { dst, content, name } => {
                let f = create_file(root, dst).map_err(|e| Fail::at(Step::File, e, *name))?;
                sys::write_all(f.as_raw_fd(), content).map_err(|e| Fail::at(Step::File, e, *name))?;
            }
            Op::Symlink { target, dst, name } => {
                let mut buf = [0u8; 4096];
                let (parent, last) = split_parent(dst, &mut buf).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
                let dir = mkdir_p(root, parent).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
                sys::symlinkat(target, dir.as_raw_fd(), last).map_err(|e| Fail::at(Step::Symlink, e, *name))?;
            }
            Op::Overlay { dst, fs, name, .. } => {
                let fs = take(fs).ok_or(Fail::at(Step::Overlay, libc::EBADF, *name))?;
                let at = mount_point(root, dst, false).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(fs.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Overlay, e, *name))?;
            }
            Op::Hide { dst, holes, cover: keep, name } => {
                let at = match sys::open_in_root(root, dst, libc::O_PATH, 0) {
                    Ok(fd) => fd,
                    Err(libc::ENOENT | libc::ENOTDIR) => continue, // nothing there to hide
                    Err(e) => return Err(Fail::at(Step::Hide, e, *name)),
                };
                let is_dir = sys::fd_mode(at.as_raw_fd()) == Ok(libc::S_IFDIR);
                let keep_open = *holes && is_dir;
                let cover = if keep_open {
                    // A tmpfs of its own, to make mount points in.
                    tmpfs(c"4096", c"0555", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
                } else {
                    // A clone of the scratch tmpfs's empty directory or file:
                    // cheaper than a tmpfs of its own (docs/child.md).
                    empty_cover(b, if is_dir { c"dir" } else { c"empty" })
                }
                .map_err(|e| Fail::at(Step::Hide, e, *name))?;
                sys::move_mount_fd(cover.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Hide, e, *name))?;
                if keep_open {
                    keep.set(into_raw(cover));
                }
            }
            Op::StandIn { dst, name } => {
                let at = match mount_point(root, dst, true) {
                    Ok(fd) => fd,
                    // Where the view is read-only nothing can be created.
                    Err(libc::EROFS) => continue,
                    Err(e) => return Err(Fail::at(Step::MountPoint, e, *name)),
                };
                let cover = empty_cover(b, c"empty").map_err(|e| Fail::at(Step::Hide, e, *name))?;
                sys::move_mount_fd(cover.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Hide, e, *name))?;
            }
            Op::Save { dst, slot, name } => {
                let at = match sys::open_in_root_nofollow(root, dst, libc::O_PATH) {
                    Ok(fd) => fd,
                    Err(libc::ENOENT | libc::ENOTDIR) => continue, // nothing to show
                    Err(e) => return Err(Fail::at(Step::Reveal, e, *name)),
                };
                let flags = OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32;
                let clone = sys::open_tree(at.as_raw_fd(), c"", flags).map_err(|e| Fail::at(Step::Reveal, e, *name))?;
                plan.saved[*slot].set(into_raw(clone));
            }
            Op::Reveal { dst, slot, attrs, name } => {
                let Some(src) = take(&plan.saved[*slot]) else { continue }; // it was missing
                if *attrs != 0 {
                    sys::mount_setattr(src.as_raw_fd(), true, *attrs, 0)
                        .map_err(|e| Fail::at(Step::Reveal, e, *name))?;
                }
                let is_file = sys::fd_mode(src.as_raw_fd()).is_ok_and(|m| m != libc::S_IFDIR);
                let at = mount_point(root, dst, is_file).map_err(|e| Fail::at(Step::MountPoint, e, *name))?;
                sys::move_mount_fd(src.as_raw_fd(), at.as_raw_fd()).map_err(|e| Fail::at(Step::Reveal, e, *name))?;
            }
        }
    }
    // The covers that received mount points are read-only from here on.
    for op in &plan.ops {
        if let Op::Hide { cover, name, .. } = op {
            if let Some(fd) = take(cover) {
                sys::mount_setattr(fd.as_raw_fd(), false, MOUNT_ATTR_RDONLY, 0)
                    .map_err(|e| Fail::at(Step::Hide, e, *name))?;
            }
        }
    }
    if let Base::EmptyRoot { .. } = plan.base {
        // The judge's root: nothing but what the operations put there, and
        // read-only (the tmpfs and bind mounts on it stay as asked).
        sys::mount_setattr(root, false, MOUNT_ATTR_RDONLY, 0).map_err(|e| Fail::new(Step::RootReadonly, e))?;
    }
    Ok(())
}

/// The mount plan's step 4: makes the new tree the root and detaches the old one.
pub(crate) fn pivot(root: RawFd) -> Result<(), Fail> {
    sys::fchdir(root).map_err(|e| Fail::new(Step::PivotRoot, e))?;
    sys::pivot_root_cwd().map_err(|e| Fail::new(Step::PivotRoot, e))?;
    sys::umount_detach_cwd().map_err(|e| Fail::new(Step::DetachOldRoot, e))?;
    sys::chdir(c"/").map_err(|e| Fail::new(Step::PivotRoot, e))
}

#[cfg(test)]
mod tests {
    use super::{decimal, SHM_SIZE};
    use crate::proto::spec::DEV_SHM_SIZE;

    #[test]
    fn shm_size_is_the_specs_in_decimal() {
        assert_eq!(SHM_SIZE.to_str().unwrap(), DEV_SHM_SIZE.to_string());
        assert_eq!(&decimal::<4>(0), b"0\0\0\0");
        assert_eq!(&decimal::<4>(907), b"907\0");
    }
}
