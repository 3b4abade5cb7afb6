//! The step of PID 1 or the tracee that failed, and how it failed.

use crate::sys::Errno;

/// Declares [`Step`] with each step's description, and the lookups that
/// follow from the list (nothing kept by hand beside it).
macro_rules! steps {
    ($($name:ident => $what:expr,)*) => {
        /// The step that failed, reported by PID 1 or the tracee: in the
        /// order they first can fail (docs/child.md), 0 for none.
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Step {
            $($name,)*
        }

        impl Step {
            /// The step of a number from [`Shared`](super::Shared)'s
            /// `fail_step`; [`Step::None`] for any other.
            pub(crate) fn from_u32(v: u32) -> Step {
                const ALL: &[Step] = &[$(Step::$name,)*];
                ALL.get(v as usize).copied().unwrap_or(Step::None)
            }

            /// What the step does, for error messages.
            pub(crate) fn describe(self) -> &'static str {
                match self {
                    $(Step::$name => $what,)*
                }
            }
        }
    };
}

steps! {
    None => "unknown step",
    // PID 1 (`pid1_setup`).
    ParentDeath => "arming the parent-death signal",
    IpcNamespace => "creating the run's IPC and UTS namespaces (unshare CLONE_NEWIPC|CLONE_NEWUTS)",
    Hostname => "setting the hostname (sethostname)",
    ProcMount => "creating the run's /proc (fsopen proc)",
    BindSource => "cloning a bind mount source (open_tree)",
    UserNamespace => "creating PID 1's namespaces (unshare)",
    MountTemplate => "entering a copy of the mount template (setns, unshare CLONE_NEWNS)",
    RootClone => "cloning the host root (open_tree /)",
    RootTmpfs => "creating the empty root tmpfs",
    Fuse => "starting fuse-overlayfs for a --root layer (it failed: run the command named here, in `unshare -Urm`, to see why)",
    Overlay => "mounting a layer (overlayfs)",
    Dev => "building /dev",
    Scratch => "creating the scratch tmpfs for --hide",
    AttachRoot => "attaching the new root (move_mount)",
    MountPoint => "creating a mount point",
    Bind => "bind mounting (move_mount)",
    Tmpfs => "mounting a tmpfs",
    Proc => "mounting /proc",
    Dir => "creating a directory",
    File => "creating a file",
    Symlink => "creating a symlink",
    Hide => "hiding a path",
    Reveal => "showing a path again or making it read-only (filesystem rule: open_tree, move_mount)",
    RootReadonly => "making the root read-only",
    PivotRoot => "pivot_root into the new root",
    DetachOldRoot => "detaching the old root (umount2)",
    LandlockRuleset => "creating the Landlock ruleset for tcp_connect/tcp_bind (landlock_create_ruleset)",
    LandlockPort => "adding a Landlock TCP port rule for tcp_connect/tcp_bind (landlock_add_rule)",
    JoinNetwork => "joining the sandbox network namespace (setns)",
    NewNetwork => "creating the run's loopback-only network namespace (unshare CLONE_NEWNET, lo up)",
    JoinUserNamespace => "joining the run's user namespace the supervisor made for its subordinate ids (setns)",
    IdMap => "writing the run's uid/gid maps (PID 1)",
    Ucounts => "bounding the run's nested namespaces and inotify/fanotify instances (writing /proc/sys/user/max_* in its user namespace)",
    NonDumpable => "making PID 1 non-dumpable (prctl PR_SET_DUMPABLE)",
    Wait => "waiting for the program (PID 1)",
    CloneTracee => "cloning the tracee (clone3)",
    // The tracee (`tracee_setup`).
    TraceeIdMap => "writing the tracee's own uid/gid maps",
    BoxIds => "switching to the subordinate uid and gid (setgroups, setresgid, setresuid)",
    CgroupNamespace => "creating the program's cgroup namespace (unshare CLONE_NEWCGROUP)",
    Setsid => "starting a new session (setsid)",
    NoNewPrivs => "setting no_new_privs",
    DropCaps => "dropping capabilities",
    Seccomp => "installing the seccomp filter",
    Go => "receiving the run's standard streams (recvmsg)",
    Stdio => "setting up stdin/stdout/stderr (dup2)",
    InheritFds => "putting the inherited descriptors at their numbers (inherit_fds: fcntl F_DUPFD_CLOEXEC, dup2)",
    ControllingTty => "making stdin the controlling terminal (controlling_tty: ioctl TIOCSCTTY)",
    Chdir => "changing to the working directory (chdir)",
    Rlimit => "setting a resource limit (setrlimit)",
    CloseFds => "closing inherited descriptors (close_range)",
    LandlockRestrict => "enforcing Landlock for tcp_connect/tcp_bind (landlock_restrict_self)",
    Exec => "executing the program (execve)",
}

// `Shared::fail` stores a failure's step over 0, which means none.
const _: () = assert!(Step::None as u32 == 0);

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
