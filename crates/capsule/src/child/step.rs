//! The step of PID 1 or the tracee that failed, and how it failed.

use crate::sys::Errno;

/// The step that failed, reported by PID 1 or the tracee.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    None = 0,
    JoinNetwork,
    Hostname,
    ProcMount,
    UserNamespace,
    IdMap,
    ParentDeath,
    NonDumpable,
    RootClone,
    RootTmpfs,
    BindSource,
    Scratch,
    AttachRoot,
    MountPoint,
    Bind,
    Tmpfs,
    Proc,
    Dev,
    Dir,
    File,
    Symlink,
    Hide,
    RootReadonly,
    PivotRoot,
    DetachOldRoot,
    CloneTracee,
    TraceeIdMap,
    CgroupNamespace,
    Setsid,
    Stdio,
    NoNewPrivs,
    DropCaps,
    Chdir,
    Rlimit,
    CloseFds,
    Seccomp,
    Exec,
    Wait,
    Go,
    LandlockRuleset,
    LandlockPort,
    LandlockRestrict,
    Overlay,
    Fuse,
    ControllingTty,
    Reveal,
    IpcNamespace,
    NewNetwork,
    Ucounts,
}

pub(crate) const STEPS: [Step; 49] = [
    Step::None,
    Step::JoinNetwork,
    Step::Hostname,
    Step::ProcMount,
    Step::UserNamespace,
    Step::IdMap,
    Step::ParentDeath,
    Step::NonDumpable,
    Step::RootClone,
    Step::RootTmpfs,
    Step::BindSource,
    Step::Scratch,
    Step::AttachRoot,
    Step::MountPoint,
    Step::Bind,
    Step::Tmpfs,
    Step::Proc,
    Step::Dev,
    Step::Dir,
    Step::File,
    Step::Symlink,
    Step::Hide,
    Step::RootReadonly,
    Step::PivotRoot,
    Step::DetachOldRoot,
    Step::CloneTracee,
    Step::TraceeIdMap,
    Step::CgroupNamespace,
    Step::Setsid,
    Step::Stdio,
    Step::NoNewPrivs,
    Step::DropCaps,
    Step::Chdir,
    Step::Rlimit,
    Step::CloseFds,
    Step::Seccomp,
    Step::Exec,
    Step::Wait,
    Step::Go,
    Step::LandlockRuleset,
    Step::LandlockPort,
    Step::LandlockRestrict,
    Step::Overlay,
    Step::Fuse,
    Step::ControllingTty,
    Step::Reveal,
    Step::IpcNamespace,
    Step::NewNetwork,
    Step::Ucounts,
];

impl Step {
    pub(crate) fn from_u32(v: u32) -> Step {
        STEPS.get(v as usize).copied().unwrap_or(Step::None)
    }

    /// What the step does, for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::None => "unknown step",
            Step::JoinNetwork => "joining the sandbox network namespace (setns)",
            Step::Hostname => "setting the hostname (sethostname)",
            Step::ProcMount => "creating the run's /proc (fsopen proc)",
            Step::UserNamespace => "creating PID 1's namespaces (unshare)",
            Step::IdMap => "writing PID 1's uid/gid maps",
            Step::ParentDeath => "arming the parent-death signal",
            Step::NonDumpable => "making PID 1 non-dumpable (prctl PR_SET_DUMPABLE)",
            Step::RootClone => "cloning the host root (open_tree /)",
            Step::RootTmpfs => "creating the empty root tmpfs",
            Step::BindSource => "cloning a bind mount source (open_tree)",
            Step::Scratch => "creating the scratch tmpfs for --hide",
            Step::AttachRoot => "attaching the new root (move_mount)",
            Step::MountPoint => "creating a mount point",
            Step::Bind => "bind mounting (move_mount)",
            Step::Tmpfs => "mounting a tmpfs",
            Step::Proc => "mounting /proc",
            Step::Dev => "building /dev",
            Step::Dir => "creating a directory",
            Step::File => "creating a file",
            Step::Symlink => "creating a symlink",
            Step::Hide => "hiding a path",
            Step::Reveal => "showing a path again or making it read-only (filesystem rule: open_tree, move_mount)",
            Step::RootReadonly => "making the root read-only",
            Step::PivotRoot => "pivot_root into the new root",
            Step::DetachOldRoot => "detaching the old root (umount2)",
            Step::CloneTracee => "cloning the tracee (clone3 CLONE_NEWUSER)",
            Step::TraceeIdMap => "writing the tracee's uid/gid maps",
            Step::CgroupNamespace => "creating the program's cgroup namespace (unshare CLONE_NEWCGROUP)",
            Step::Setsid => "starting a new session (setsid)",
            Step::Stdio => "setting up stdin/stdout/stderr (dup2)",
            Step::NoNewPrivs => "setting no_new_privs",
            Step::DropCaps => "dropping capabilities",
            Step::Chdir => "changing to the working directory (chdir)",
            Step::Rlimit => "setting a resource limit (setrlimit)",
            Step::CloseFds => "closing inherited descriptors (close_range)",
            Step::Seccomp => "installing the seccomp filter",
            Step::Exec => "executing the program (execve)",
            Step::Wait => "waiting for the program (PID 1)",
            Step::Go => "receiving the run's standard streams (recvmsg)",
            Step::LandlockRuleset => "creating the Landlock ruleset for tcp_connect/tcp_bind (landlock_create_ruleset)",
            Step::LandlockPort => "adding a Landlock TCP port rule for tcp_connect/tcp_bind (landlock_add_rule)",
            Step::LandlockRestrict => "enforcing Landlock for tcp_connect/tcp_bind (landlock_restrict_self)",
            Step::Overlay => "mounting a layer (overlayfs)",
            Step::Fuse => "starting fuse-overlayfs for a --root layer (it failed: run the command named here, in `unshare -Urm`, to see why)",
            Step::ControllingTty => "making stdin the controlling terminal (controlling_tty: ioctl TIOCSCTTY)",
            Step::IpcNamespace => "creating the run's IPC and UTS namespaces (unshare CLONE_NEWIPC|CLONE_NEWUTS)",
            Step::NewNetwork => "creating the run's loopback-only network namespace (unshare CLONE_NEWNET, lo up)",
            Step::Ucounts => "bounding the run's nested namespaces and inotify/fanotify instances (writing /proc/sys/user/max_* in its user namespace)",
        }
    }
}

/// A child-side failure: no allocation, just numbers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fail {
    pub step: Step,
    pub errno: Errno,
    /// Index+1 into the run's path table, 0 for none.
    pub path: u32,
}

impl Fail {
    pub(crate) fn new(step: Step, errno: Errno) -> Self {
        Fail { step, errno, path: 0 }
    }
    pub(crate) fn at(step: Step, errno: Errno, name: u32) -> Self {
        Fail { step, errno, path: name + 1 }
    }
}
