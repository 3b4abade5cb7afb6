//! The child path after clone: PID 1 of the run and the tracee.
//!
//! Everything here is prepared before clone in a [`Plan`] (argv, envp,
//! mount plan, id maps, limits, filter, fds); the child only makes
//! syscalls: no allocation, no locks, no panics on purpose. Failures are
//! written to the [`Shared`] page as (step, errno, path index) and turned
//! into a message by the supervisor.
//!
//! Namespaces (thesis, ch. 3): the supervisor owns user namespace U1 and
//! the namespaces created once (IPC, UTS, time, cgroup, the loopback-only
//! network). PID 1 is cloned into a new PID namespace while still in U1,
//! creates the run's procfs and a mount namespace of its own (owned by
//! U1), builds the tree, joins the run's network and enters user namespace
//! U2. The tracee is cloned into user namespace U3, drops everything and
//! execs: it has no capability over U1, so it can change nothing in the
//! run's mount namespace, and any mount namespace it creates itself is a
//! copy made for a less privileged owner, in which every mount is locked.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::SeqCst};

use crate::host::cgroups::{self, CgroupFds};
use crate::mounts::{self, Build, MountPlan};
use crate::netlog::{self, NetLog};
use crate::sys::{self, Arena, Errno};
use crate::{caps, landlock, rlimits};

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

const STEPS: [Step; 49] = [
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
    fn from_u32(v: u32) -> Step {
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

/// Flags PID 1 sets in [`Shared::flags`].
pub(crate) const FLAG_TRACEE_REAPED: u32 = 1;
pub(crate) const FLAG_WALL_TIME: u32 = 2;
/// A process PID 1 reaped died of SIGXFSZ (the output limit).
pub(crate) const FLAG_OUTPUT_LIMIT: u32 = 4;
/// PID 1 killed the run at its CPU-time limit.
pub(crate) const FLAG_CPU_TIME: u32 = 8;
/// The tracee received the go message: what fails from here on failed for
/// this run, not while being prepared ahead.
pub(crate) const FLAG_GO: u32 = 16;
/// PID 1 killed the run because the supervisor asked (`kill`).
pub(crate) const FLAG_KILLED: u32 = 32;
/// The seccomp policy's `kill`: PID 1 killed the run at a forbidden call,
/// recorded in `forbidden_*`.
pub(crate) const FLAG_FORBIDDEN: u32 = 128;

/// The page shared by the supervisor, PID 1 and the tracee (thesis:
/// "Inter-process communication"), the header of the run's [`sys::Arena`];
/// the kernel unmaps it from the tracee at execve, so the program never
/// sees it. The supervisor fills in the run's half (`go_*`, pointers into
/// the arena) right before it sends the go message; PID 1 and the tracee
/// fill in the rest.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Shared {
    // --- the run, written by the supervisor before the go message.
    /// argv: pointer to a NULL-terminated pointer array in the arena.
    pub go_argv: AtomicU64,
    pub go_envp: AtomicU64,
    /// Candidate paths of the program (PATH lookup), tried in order.
    pub go_exec_paths: AtomicU64,
    pub go_exec_paths_len: AtomicU64,
    pub go_cwd: AtomicU64,
    pub go_cwd_fallback: AtomicU32,
    /// `[RawRlimit]` in the arena.
    pub go_rlimits: AtomicU64,
    pub go_rlimits_len: AtomicU64,
    /// 0: none.
    pub go_wall_time_ns: AtomicU64,
    pub go_cpu_time_ns: AtomicU64,
    pub go_parallelism: AtomicU64,
    /// The spec's `controlling_tty`: 1 to make stdin the program's
    /// controlling terminal.
    pub go_controlling_tty: AtomicU32,
    /// The seccomp filter when PID 1 did not inherit it (compiled after
    /// PID 1 was created, see `Plan::filter`): its instructions in the arena, its
    /// `notify` and `net_log_from`.
    pub go_filter: AtomicU64,
    pub go_filter_len: AtomicU64,
    pub go_filter_notify: AtomicU32,
    pub go_filter_net_log_from: AtomicU32,
    // --- results, written by PID 1 and the tracee.
    pub fail_step: AtomicU32,
    pub fail_errno: AtomicI32,
    pub fail_path: AtomicU32,
    /// CLOCK_MONOTONIC right before the program's execve.
    pub exec_ns: AtomicU64,
    /// CLOCK_MONOTONIC when PID 1 reaped the program's first process.
    pub end_ns: AtomicU64,
    /// The wait status of the program's first process.
    pub wait_status: AtomicI32,
    pub flags: AtomicU32,
    pub cpu_user_us: AtomicU64,
    pub cpu_system_us: AtomicU64,
    pub max_rss_kib: AtomicU64,
    /// The program cgroup's `user_usec + system_usec` right before execve.
    pub cgroup_cpu_us_at_exec: AtomicU64,
    /// The tracee's own CPU time right before execve (capsule's set-up in
    /// the program's process, taken off its rusage figures).
    pub setup_user_us: AtomicU64,
    pub setup_system_us: AtomicU64,
    /// The seccomp listener plus one (0: none), a descriptor in the table
    /// the tracee shares with PID 1, set by the tracee right before execve.
    pub notify_fd: AtomicI32,
    /// The forbidden call (FLAG_FORBIDDEN): number, audit arch, arguments.
    pub forbidden_nr: AtomicI32,
    pub forbidden_arch: AtomicU32,
    pub forbidden_args: [AtomicU64; 6],
    /// What Landlock enforced (`Enforcement::to_u32`), set by the tracee
    /// right before execve; 0: not that far.
    pub landlock: AtomicU32,
}

impl Shared {
    fn fail(&self, f: Fail) {
        // First failure wins: the tracee's error is more precise than PID 1
        // noticing the tracee died.
        if self.fail_step.compare_exchange(0, f.step as u32, SeqCst, SeqCst).is_ok() {
            self.fail_errno.store(f.errno, SeqCst);
            self.fail_path.store(f.path, SeqCst);
        }
    }

    pub(crate) fn failure(&self) -> Option<Fail> {
        let step = self.fail_step.load(SeqCst);
        (step != 0).then(|| Fail {
            step: Step::from_u32(step),
            errno: self.fail_errno.load(SeqCst),
            path: self.fail_path.load(SeqCst),
        })
    }
}

/// A resource limit as the tracee applies it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRlimit {
    pub resource: u64,
    pub soft: u64,
    pub hard: u64,
}

/// How PID 1 joins the run's network.
#[derive(Clone, Copy)]
pub(crate) enum NetJoin {
    /// Stay in the host's (`share_net`).
    Host,
    /// The supervisor's loopback-only network namespace.
    Fd(RawFd),
    /// The same, sent over this socket once the supervisor has created it.
    Receive(RawFd),
    /// A loopback-only network namespace of the run's own, created by PID 1
    /// (`Config::own_network`; prepared ahead, so off the request's path).
    Own,
}

/// Everything PID 1 and the tracee need that is known before the run's
/// request (the supervisor prepares a PID 1 ahead of time from it):
/// namespaces, mount tree, ids, cgroup. The run's own half (argv, envp,
/// working directory, limits, filter) comes later, in the arena.
pub(crate) struct Plan {
    /// "U 0 1\n" and "G 0 1\n": the tracee's ids inside, mapped onto PID 1's 0.
    pub tracee_uid_map: CString,
    pub tracee_gid_map: CString,
    /// The network PID 1 joins.
    pub net: NetJoin,
    pub hostname: Option<CString>,
    /// pidfd of the supervisor, to notice its death.
    pub supervisor_pidfd: RawFd,
    pub mounts: MountPlan,
    /// The Landlock ruleset PID 1 builds and the tracee enforces.
    pub landlock: landlock::Plan,
    pub last_cap: u32,
    /// The run's cgroup, when the supervisor has cgroups.
    pub cgroup: Option<CgroupFds>,
    /// The tracee waits here for the go message, which carries the run's
    /// stdin, stdout and stderr.
    pub go_sock: RawFd,
    /// Pipe PID 1 writes a byte to once the result is in the shared page.
    pub done: RawFd,
    /// eventfd the supervisor signals to have the run killed.
    pub control: RawFd,
    /// Every descriptor PID 1 keeps, sorted: it closes all others of the
    /// supervisor's (other runs', clients').
    pub keep_fds: Vec<RawFd>,
    /// The run's seccomp filter, mapped by the supervisor before PID 1 was
    /// created; None when it was compiled after (while PID 1 builds the
    /// sandbox): then it comes in the arena with the go message.
    pub filter: Option<Rc<SealedFilter>>,
    /// The network log (`net_log`), shared with the supervisor.
    pub net_log: Option<Rc<Arena<NetLog>>>,
    /// /sys/fs/fuse/connections in the supervisor's view (O_PATH), or -1.
    pub fusectl: RawFd,
    /// The supervisor's CPUs, when PID 1 was created on one of them: it
    /// widens to these before creating the tracee.
    pub widen: Option<libc::cpu_set_t>,
    /// What PID 1 writes to `rlimits::UCOUNTS` in its user namespace.
    pub ucounts: [u32; 12],
}

/// A compiled seccomp filter in a sealed memfd, mapped read-only.
pub(crate) struct SealedFilter {
    pub map: sys::SealedMap,
    /// Its `kill` is a user notification: install it with a listener.
    pub notify: bool,
    /// With the network log: where its epilogue starts (see
    /// `seccomp::with_net_log`); 0 without.
    pub net_log_from: u32,
    /// It allows every call the tracee makes after the go message
    /// (`seccomp::allows_tracee_epilogue`): installed before waiting for it.
    pub early: bool,
}

/// The run's filter: its instructions, whether its `kill` is a user
/// notification, where the network log's epilogue starts (0: none).
/// Valid once the go message is in; None only if the supervisor sent no
/// filter at all (a bug, reported as a failed go message).
fn run_filter<'a>(plan: &'a Plan, arena: &'a Arena<Shared>) -> Option<(&'a [libc::sock_filter], bool, u32)> {
    if let Some(f) = &plan.filter {
        return Some((f.map.as_slice(), f.notify, f.net_log_from));
    }
    let shared: &Shared = arena;
    let program = arena.slice::<libc::sock_filter>(shared.go_filter.load(SeqCst), shared.go_filter_len.load(SeqCst))?;
    Some((program, shared.go_filter_notify.load(SeqCst) != 0, shared.go_filter_net_log_from.load(SeqCst)))
}

/// Path-table index of the program's name, for "not found" errors.
pub(crate) const EXEC_NAME: u32 = 0;
/// Path-table index of the working directory.
pub(crate) const CWD_NAME: u32 = 1;

fn fail_exit(shared: &Shared, f: Fail) -> ! {
    shared.fail(f);
    sys::exit(127)
}

/// Writes `data` to `self/<file>` under the procfs `proc`.
fn write_proc(proc: RawFd, file: &[u8], data: &[u8]) -> Result<(), Errno> {
    let mut buf = [0u8; 64];
    let path = b"self/";
    if path.len() + file.len() >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf[..path.len()].copy_from_slice(path);
    buf[path.len()..path.len() + file.len()].copy_from_slice(file);
    let path = CStr::from_bytes_until_nul(&buf).map_err(|_| libc::EINVAL)?;
    let fd = sys::openat(proc, path, libc::O_WRONLY, 0)?;
    sys::write_all(fd.as_raw_fd(), data)
}

/// What a run's PID 1 runs on, in the supervisor's memory (which it
/// shares): it stays where it is, unchanged, until PID 1 has exited
/// (see `sys::vm::spawn`).
pub(crate) struct Pid1 {
    pub plan: Plan,
    pub arena: Arena<Shared>,
    /// PID 1's own stack.
    pub stack: sys::Stack,
    /// The tracee's stack until its execve.
    pub tracee_stack: sys::Stack,
}

/// PID 1 of a run: created by the supervisor with CLONE_NEWPID on
/// `p.stack` (`sys::vm::spawn`), still in the supervisor's user
/// namespace; the tracee runs on `p.tracee_stack` until its execve.
/// Never returns.
pub(crate) fn pid1(p: &Pid1) -> ! {
    match pid1_setup(&p.plan, &p.arena, &p.tracee_stack) {
        Ok(never) => match never {},
        Err(f) => fail_exit(&p.arena, f),
    }
}

enum Never {}

fn pid1_setup(plan: &Plan, arena: &Arena<Shared>, stack: &sys::Stack) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // A name of its own, for ps and profiles (it was created as `capsule`).
    sys::set_comm(c"capsule-pid1");
    // Nothing of the supervisor's but what this run needs: other runs'
    // descriptors and the clients' sockets must not live on in PID 1.
    sys::close_all_except(&plan.keep_fds);
    // Rust's runtime installed SIGSEGV and SIGBUS handlers in the
    // supervisor; as init of the PID namespace, PID 1 receives from inside
    // only signals it has handlers for, so it must have none. (Ignored
    // signals are harmless for it; the tracee resets everything.)
    sys::default_signals(&[libc::SIGSEGV, libc::SIGBUS]);

    // Die with the supervisor; the pidfd check covers a death before this.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    let mut pfd = [libc::pollfd { fd: plan.supervisor_pidfd, events: libc::POLLIN, revents: 0 }];
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }

    // Until it enters its own user namespace below, PID 1 has every
    // capability in the supervisor's, which owns the run's PID namespace,
    // the shared network and the supervisor's mounts: everything that needs
    // them happens first.

    // An IPC namespace of the run's own: System V objects and POSIX
    // message queues a run leaves behind never reach another run. Created
    // here, owned by the supervisor's user namespace, over which the
    // program has no capability. (Its teardown is asynchronous on current
    // kernels: ~1-2% of a warm supervisor's throughput, docs/latency.md.)
    // A UTS namespace too (a copy of the supervisor's, hostname
    // `capsule`; the program cannot change it, but runs share nothing),
    // with the run's own hostname if it asks for one.
    sys::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS).map_err(|e| Fail::new(Step::IpcNamespace, e))?;
    if let Some(name) = &plan.hostname {
        sys::sethostname(name.to_bytes()).map_err(|e| Fail::new(Step::Hostname, e))?;
    }
    // The run's procfs belongs to the new PID namespace, whose owner is the
    // supervisor's user namespace. It stays detached until the mount plan
    // attaches it; meanwhile it is how PID 1 and the tracee reach
    // /proc/self/uid_map.
    let proc = mounts::new_proc().map_err(|e| Fail::new(Step::ProcMount, e))?;
    let p = proc.as_raw_fd();

    // Clone the bind sources from the descriptors the supervisor resolved
    // (no path is looked up again): they are mounts of the supervisor's
    // namespace, which open_tree refuses to clone from any other, so this
    // comes before the run's own. The clones are detached, attached later.
    mounts::clone_binds(&plan.mounts)?;
    // A mount namespace of the run's own: a private copy of the
    // supervisor's, in which PID 1 builds the tree and pivots. The tracee's
    // user + mount namespace below will lock every mount.
    sys::unshare(libc::CLONE_NEWNS).map_err(|e| Fail::new(Step::UserNamespace, e))?;
    // Build the tree: clone the other sources from the host view, attach
    // the new root, apply the operations in order, pivot into it.
    let mut build = Build::new(p);
    mounts::clone_sources(&plan.mounts, &mut build)?;
    let root = mounts::attach_root(&build)?;
    mounts::apply_ops(&plan.mounts, &build, root)?;
    mounts::pivot(root)?;
    // Landlock's ruleset, with the rules for the places the mounts make
    // writable: here, after the pivot, the paths resolve in the run's tree
    // (and a PID 1 prepared ahead has done it before the request). Its
    // descriptor is close-on-exec and reaches the tracee through the
    // shared descriptor table.
    let ruleset = landlock::build(&plan.landlock)?;

    // Join the loopback-only network. A one-shot supervisor is still
    // creating it (0.5 ms, the costliest namespace) while PID 1 builds the
    // tree above, and sends it over `net_socket` when it is ready.
    match plan.net {
        NetJoin::Host => {}
        NetJoin::Fd(net) => sys::setns(net, libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::JoinNetwork, e))?,
        NetJoin::Receive(sock) => {
            let net = sys::recv_one_fd(sock).map_err(|e| Fail::new(Step::JoinNetwork, e))?;
            sys::setns(net.as_raw_fd(), libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::JoinNetwork, e))?;
        }
        NetJoin::Own => {
            sys::unshare(libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::NewNetwork, e))?;
            sys::loopback_up().map_err(|e| Fail::new(Step::NewNetwork, e))?;
        }
    }

    // PID 1's own user namespace, root in it mapped onto the supervisor's
    // root, i.e. the calling user on the host.
    sys::unshare(libc::CLONE_NEWUSER).map_err(|e| Fail::new(Step::UserNamespace, e))?;
    write_proc(p, b"setgroups", b"deny")
        .and_then(|_| write_proc(p, b"gid_map", b"0 0 1\n"))
        .and_then(|_| write_proc(p, b"uid_map", b"0 0 1\n"))
        .map_err(|e| Fail::new(Step::IdMap, e))?;
    // Bound what the kernel counts per user in this user namespace, where
    // PID 1 alone has CAP_SYS_RESOURCE and the program none: its nested
    // namespaces and inotify/fanotify instances count here as well as
    // against the user's limits on the host, so it can never use those up
    // (every other sandbox and file watcher of the user would fail).
    rlimits::apply_ucounts(p, &plan.ucounts).map_err(|(i, e)| Fail {
        step: Step::Ucounts,
        errno: e,
        path: i as u32,
    })?;
    // Changing credentials cleared the parent-death signal: arm it again,
    // then check the supervisor did not die in between.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }

    // CVE-2019-5736: PID 1 runs the capsule binary and is visible to the
    // program as /proc/1. Non-dumpable, its /proc/1/exe (and fd/, mem,
    // ptrace) need CAP_SYS_PTRACE over the user namespace of its memory,
    // the supervisor's, which no sandboxed process has; so the binary can
    // never be reopened for writing through it, even with O_PATH +
    // /proc/self/fd. Chosen over copying the binary into a sealed memfd per
    // run (runc's fix), which costs a copy of the binary per run (measured
    // in docs/benchmarks.md). The memory is the supervisor's, non-dumpable
    // since its start (`Supervisor::finish`); set once more here, before
    // the tracee exists, so no sandboxed code ever sees a dumpable capsule
    // process whatever happened before.
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| Fail::new(Step::NonDumpable, e))?;

    // Block SIGCHLD before the tracee exists so no exit is missed.
    let sigchld = sys::signalfd_for(&[libc::SIGCHLD]).map_err(|e| Fail::new(Step::Wait, e))?;

    // Built: PID 1 (prepared ahead on the supervisor's CPU, see
    // `Supervisor::prepare`) may run anywhere the supervisor may, and so
    // may the tracee, which inherits the mask. Best effort: a cpuset
    // changed since only keeps PID 1 where it is.
    if let Some(set) = &plan.widen {
        let _ = sys::set_affinity(set);
    }

    // The tracee gets one more user namespace, U3, whose capabilities it
    // drops. The run's mount namespace belongs to U1, over which nothing in
    // U3 has any capability: the program cannot mount, unmount or remount
    // anything in it, and a mount namespace it makes itself (after its own
    // unshare(CLONE_NEWUSER)) is a copy for a less privileged owner, where
    // the kernel locks every mount together with its read-only and nosuid
    // flags. No mount namespace of its own, then: copying the tree (and
    // tearing the copy down at the program's exit) cost every run the
    // most expensive part of its exit. It is created like
    // posix_spawn does: sharing PID 1's memory on a stack of its own, PID 1
    // suspended until the tracee has called execve or died. No page tables
    // are copied (process creation dominates a short run), and when the
    // clone returns the program is running, or the tracee has recorded why
    // it is not.
    // The tracee waits for the run's go message (prepared ahead, this is
    // where it idles), so PID 1 resumes only once the program runs.
    let args = TraceeArgs { plan, arena, proc: p, ruleset: &ruleset };
    let cgroup = plan.cgroup.as_ref().map(|cg| cg.prog_dir);
    // It also shares PID 1's descriptor table (CLONE_FILES) until execve
    // gives the program a copy of its own: the seccomp listener the tracee
    // creates last, close-on-exec, thereby stays with PID 1 alone, which is
    // how PID 1 learns of the policy's forbidden calls.
    let flags = libc::CLONE_NEWUSER | libc::CLONE_FILES;
    let tracee = sys::clone_vfork(flags, cgroup, stack, &args, tracee).map_err(|e| Fail::new(Step::CloneTracee, e))?;
    // (The run's procfs stays open: a run stuck at its end is looked at
    // through it, see `abort_fuse`.)
    // The program has its own descriptor table now (or the tracee died):
    // the ruleset is no longer needed.
    drop(ruleset);
    // The run's stdio is the program's alone: a pipe must see EOF when the
    // program's side closes. The tracee put it on 0-2 of the shared table
    // (and closed what it received), so PID 1 drops 0-2 and the go socket.
    for fd in [plan.go_sock, 0, 1, 2] {
        sys::close(fd);
    }
    let listener = shared.notify_fd.load(SeqCst) - 1;
    pid1_wait(plan, arena, stack, tracee, sigchld, listener, proc)
}

/// PID 1's event loop: arms the wall-time timer at the program's execve,
/// enforces it, reaps every process, and ends the run when the first
/// tracee exits.
fn pid1_wait(
    plan: &Plan,
    arena: &Arena<Shared>,
    tracee_stack: &sys::Stack,
    tracee: i32,
    sigchld: OwnedFd,
    mut listener: RawFd,
    proc: OwnedFd,
) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    let reaper = Reaper { sigchld: sigchld.as_raw_fd(), proc: proc.as_raw_fd(), fusectl: plan.fusectl };
    let wall = sys::timerfd().map_err(|e| Fail::new(Step::Wait, e))?;
    let cpu = sys::timerfd().map_err(|e| Fail::new(Step::Wait, e))?;
    let exec_ns = shared.exec_ns.load(SeqCst);
    let wall_time_ns = shared.go_wall_time_ns.load(SeqCst);
    let cpu_time_ns = shared.go_cpu_time_ns.load(SeqCst);
    let parallelism = shared.go_parallelism.load(SeqCst).max(1);
    if exec_ns != 0 {
        if wall_time_ns != 0 {
            sys::timerfd_at(wall.as_raw_fd(), exec_ns + wall_time_ns).map_err(|e| Fail::new(Step::Wait, e))?;
        }
        // CPU time over a cgroup has no timer of its own: the limit cannot
        // be reached before (remaining CPU time) / (CPUs the run can keep
        // busy) has passed, so check then, and again after the same
        // computation on what remains (thesis: "CPU time limit"), at least
        // 1 ms apart. No polling while far from the limit.
        if let (true, Some(_)) = (cpu_time_ns != 0, &plan.cgroup) {
            sys::timerfd_at(cpu.as_raw_fd(), exec_ns + cpu_time_ns / parallelism)
                .map_err(|e| Fail::new(Step::Wait, e))?;
        }
    }
    let limits = TimeLimits { wall: wall.as_raw_fd(), cpu: cpu.as_raw_fd(), cpu_time_ns, parallelism };
    loop {
        let mut fds = [
            libc::pollfd { fd: sigchld.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: plan.supervisor_pidfd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: wall.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: cpu.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: plan.control, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: listener, events: libc::POLLIN, revents: 0 },
        ];
        sys::poll(&mut fds, -1).map_err(|e| Fail::new(Step::Wait, e))?;
        if fds[1].revents != 0 {
            // The supervisor is gone: nobody wants the result. PID 1's exit
            // makes the kernel kill everything in the PID namespace.
            sys::exit(1);
        }
        let mut out_of_time = 0;
        if fds[2].revents != 0 {
            out_of_time = FLAG_WALL_TIME;
        }
        if fds[3].revents != 0 {
            out_of_time |= cpu_timer(plan, shared, &limits)?;
        }
        if fds[4].revents != 0 {
            // The supervisor's `kill`.
            out_of_time |= FLAG_KILLED;
        }
        if fds[5].revents & libc::POLLIN != 0 {
            // A call the policy forbids (its `kill` is a user notification):
            // the calling thread is stopped inside the call until answered,
            // so the number and arguments read here are exactly the ones it
            // made and the call never runs; the answer is killing the run.
            // (SIGSYS from SECCOMP_RET_KILL would name no call, and a
            // SECCOMP_RET_TRAP handler is the program's to replace.) ENOENT:
            // the caller died meanwhile, nothing to report. With the
            // network log, the notification may instead be the log's (the
            // filter run again on it ends in the log's epilogue): its
            // destination is recorded and the call goes on.
            if let Ok(n) = sys::seccomp_notif_recv(listener) {
                let data = crate::seccomp::seccomp_data(n.nr, n.arch, n.instruction_pointer, &n.args);
                let filter = run_filter(plan, arena);
                match (&plan.net_log, filter) {
                    (Some(log), Some((program, _, net_log_from)))
                        if crate::seccomp::is_net_log(program, net_log_from, &data) =>
                    {
                        // (Unless the run is being killed anyway.)
                        if out_of_time == 0 {
                            out_of_time |= net_log_call(plan, shared, &limits, log, tracee_stack, listener, &n)?;
                        }
                    }
                    _ => {
                        if shared.flags.load(SeqCst) & FLAG_FORBIDDEN == 0 {
                            shared.forbidden_nr.store(n.nr, SeqCst);
                            shared.forbidden_arch.store(n.arch, SeqCst);
                            for (slot, a) in shared.forbidden_args.iter().zip(n.args) {
                                slot.store(a, SeqCst);
                            }
                            out_of_time |= FLAG_FORBIDDEN;
                        }
                    }
                }
            }
        } else if fds[5].revents != 0 {
            // POLLHUP: no process uses the filter any more.
            listener = -1;
        }
        if out_of_time != 0 {
            // Kill everything and wait for the program right here, without
            // another trip through poll.
            shared.flags.fetch_or(out_of_time, SeqCst);
            kill_run(plan);
            loop {
                match reap_next(&reaper) {
                    Some((pid, status)) => reaped(plan, shared, tracee, pid, status, &reaper),
                    None => return Err(Fail::new(Step::Wait, libc::ECHILD)),
                }
            }
        }
        if fds[0].revents != 0 {
            sys::drain_signalfd(sigchld.as_raw_fd());
            while let Ok(Some((pid, status))) = sys::waitpid(-1, true) {
                reaped(plan, shared, tracee, pid, status, &reaper);
            }
        }
    }
}

/// The run's time limits as PID 1 watches them.
struct TimeLimits {
    /// timerfd armed at the wall-time limit.
    wall: RawFd,
    /// timerfd armed when the CPU-time limit could first be reached.
    cpu: RawFd,
    cpu_time_ns: u64,
    parallelism: u64,
}

/// The CPU-time timer fired: FLAG_CPU_TIME when the run has used up its
/// CPU time, else the timer is re-armed for the next possible moment and
/// 0 returned.
fn cpu_timer(plan: &Plan, shared: &Shared, l: &TimeLimits) -> Result<u32, Fail> {
    let mut b = [0u8; 8];
    let _ = sys::read(l.cpu, &mut b);
    let limit = if l.cpu_time_ns == 0 { u64::MAX } else { l.cpu_time_ns };
    let used = cpu_used_ns(plan, shared);
    if used >= limit {
        return Ok(FLAG_CPU_TIME);
    }
    let next = ((limit - used) / l.parallelism).max(1_000_000);
    sys::timerfd_at(l.cpu, sys::clock_monotonic_ns() + next).map_err(|e| Fail::new(Step::Wait, e))?;
    Ok(0)
}

/// What the network log's reader works on.
struct ReadJob<'a> {
    log: &'a NetLog,
    listener: RawFd,
    notif: sys::SeccompNotif,
}

/// The reader: a child sharing PID 1's memory (and so the log) that reads
/// the destination of one notified call from the caller's memory and
/// records it. Raw syscalls only (it shares PID 1's errno), no allocation.
fn read_destination(job: &ReadJob) -> ! {
    let n = &job.notif;
    let caller = netlog::Caller { pid: n.pid as i32, listener: job.listener, id: n.id };
    netlog::observe(job.log, n.arch, n.nr, &n.args, &caller);
    sys::exit(0)
}

/// A call the network log records: a child of PID 1 sharing its memory
/// reads and records its destination (the caller is stopped in the call
/// meanwhile), then the call goes on: the log observes, it decides
/// nothing, so a change of the address by another thread after the read
/// (a TOCTOU race) bypasses nothing. PID 1 does not read the caller's
/// memory itself: a page whose fault the program serves (FUSE,
/// userfaultfd) could stall the read, and PID 1 must keep enforcing the
/// limits; when one is reached first, the run is killed (which ends any
/// such stall), the reader too, and the flag returned.
fn net_log_call(
    plan: &Plan,
    shared: &Shared,
    limits: &TimeLimits,
    log: &NetLog,
    stack: &sys::Stack,
    listener: RawFd,
    n: &sys::SeccompNotif,
) -> Result<u32, Fail> {
    let job = ReadJob { log, listener, notif: *n };
    // SAFETY: the reader runs on the tracee's stack, free since the tracee
    // exec'd (a notification comes from the program), and PID 1 waits
    // here until the reader is reaped, so nothing else runs on it.
    let waited = unsafe {
        sys::with_vm_child(stack, &job, read_destination, |reader| -> Result<u32, Fail> {
            loop {
                let mut fds = [
                    libc::pollfd { fd: reader, events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: plan.supervisor_pidfd, events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: limits.wall, events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: limits.cpu, events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: plan.control, events: libc::POLLIN, revents: 0 },
                ];
                sys::poll(&mut fds, -1).map_err(|e| Fail::new(Step::Wait, e))?;
                if fds[0].revents != 0 {
                    return Ok(0);
                }
                if fds[1].revents != 0 {
                    sys::exit(1);
                }
                let mut flags = 0;
                if fds[2].revents != 0 {
                    flags |= FLAG_WALL_TIME;
                }
                if fds[3].revents != 0 {
                    flags |= cpu_timer(plan, shared, limits)?;
                }
                if fds[4].revents != 0 {
                    flags |= FLAG_KILLED;
                }
                if flags != 0 {
                    kill_run(plan);
                    return Ok(flags);
                }
            }
        })
    };
    let done = match waited {
        Ok((Ok(0), status)) => libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        Ok((flags, _)) => return flags,
        // No reader (out of processes): the call goes on unread.
        Err(_) => false,
    };
    if !done && sys::seccomp_notif_id_valid(listener, n.id) {
        // The reader could not run or was killed (the program runs as the
        // same user and may signal it where Landlock does not scope
        // signals): the call is recorded, its destination unknown.
        netlog::unread(log, n.arch, n.nr, &n.args);
    }
    // ENOENT: the caller died meanwhile.
    let _ = sys::seccomp_notif_continue(listener, n.id);
    Ok(0)
}

/// Kills every process of the run: atomically through `cgroup.kill` (no
/// fork can escape it), else by signalling everything in the run's PID
/// namespace (PID 1 itself excepted).
fn kill_run(plan: &Plan) {
    if let Some(cg) = &plan.cgroup {
        if cg.kill >= 0 && sys::write_all(cg.kill, b"1").is_ok() {
            return;
        }
    }
    let _ = sys::kill(-1, libc::SIGKILL);
}

/// CPU time the program's cgroup used since execve, ns.
fn cpu_used_ns(plan: &Plan, shared: &Shared) -> u64 {
    let Some(cg) = &plan.cgroup else { return 0 };
    let (user, system) = cgroups::read_cpu_stat(cg.cpu_stat).unwrap_or((0, 0));
    (user + system).saturating_sub(shared.cgroup_cpu_us_at_exec.load(SeqCst)) * 1000
}

/// Notes a reaped process; when it is the program's first process, the run
/// is over: kill and reap the rest so their CPU time is in PID 1's rusage,
/// record the result, exit.
fn reaped(plan: &Plan, shared: &Shared, tracee: i32, pid: i32, status: i32, reaper: &Reaper) {
    if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGXFSZ {
        shared.flags.fetch_or(FLAG_OUTPUT_LIMIT, SeqCst);
    }
    if pid != tracee {
        return;
    }
    shared.end_ns.store(sys::clock_monotonic_ns(), SeqCst);
    shared.wait_status.store(status, SeqCst);
    shared.flags.fetch_or(FLAG_TRACEE_REAPED, SeqCst);
    // The program's orphans became PID 1's children before its exit was
    // reported: with no child left the namespace is empty, and there is
    // nothing to kill (a `kill(-1)` walks every process of the system).
    if sys::waitpid(-1, true) != Err(libc::ECHILD) {
        kill_run(plan);
        while reap_next(reaper).is_some() {}
    }
    let (user, system, rss) = sys::rusage_children();
    shared.cpu_user_us.store(user, SeqCst);
    shared.cpu_system_us.store(system, SeqCst);
    shared.max_rss_kib.store(rss, SeqCst);
    // The result is complete: tell the supervisor now, not when this
    // process has finished exiting (tearing down the namespaces takes a
    // while and happens after the result is on its way).
    let _ = sys::write(plan.done, b"d");
    sys::exit(0);
}

/// How long a killed run's processes may take to go before PID 1 looks
/// for FUSE connections keeping them (and again after each such pause).
const STUCK_MS: i32 = 200;

/// What PID 1 reaps the rest of a run with.
struct Reaper {
    /// The SIGCHLD signalfd.
    sigchld: RawFd,
    /// The run's procfs.
    proc: RawFd,
    /// /sys/fs/fuse/connections as the supervisor sees it, or -1.
    fusectl: RawFd,
}

/// The next child reaped (pid, wait status); None when none is left.
/// When none has gone for STUCK_MS, one may be stuck on a FUSE request
/// (see `abort_fuse`): the run's connections are aborted.
fn reap_next(r: &Reaper) -> Option<(i32, i32)> {
    loop {
        match sys::waitpid(-1, true) {
            Ok(Some(reaped)) => return Some(reaped),
            Ok(None) => {}
            Err(_) => return None,
        }
        let mut fds = [libc::pollfd { fd: r.sigchld, events: libc::POLLIN, revents: 0 }];
        match sys::poll(&mut fds, STUCK_MS) {
            Ok(0) => abort_fuse(r),
            _ => sys::drain_signalfd(r.sigchld),
        }
    }
}

/// Aborts the FUSE connections the program mounted, in the namespaces of
/// the run's remaining processes, through fusectl's `abort` files (the
/// caller owns the connections of the mounts its sandboxes make). A
/// process that exits with a file of a FUSE mount open sends FLUSH and
/// waits for the answer without any signal able to end the wait; if the
/// server is gone but the device is still open, e.g. later in that very
/// process's descriptor table, nothing else ever ends it and the run would
/// never finish. Aborting fails the pending requests (ENOTCONN) and the
/// exit goes on. A connection that PID 1's own mount table shows is left
/// alone: that namespace is the run's, where the program cannot mount
/// (it has no capability over its owner), so its FUSE mounts are the
/// user's host mounts (sshfs, rclone: the same superblocks, copied in
/// with the tree) and capsule's fuse-overlayfs; and they cannot be
/// unmounted from it while PID 1 lives, so their numbers are not reused
/// by a mount of the program. No allocation: PID 1 runs this.
fn abort_fuse(r: &Reaper) {
    if r.fusectl < 0 {
        return;
    }
    let Ok(dir) = sys::openat(r.proc, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0) else { return };
    let mut ents = [0u8; 4096];
    while let Ok(n) = sys::getdents64(dir.as_raw_fd(), &mut ents) {
        if n == 0 {
            break;
        }
        for name in sys::dirent_names(&ents[..n]).map_while(Result::ok) {
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) && name != b"1" {
                abort_fuse_of(r, name);
            }
        }
    }
}

/// `abort_fuse` for the mount table of one process (`pid`, digits). A
/// FUSE connection is fusectl's directory named after the superblock's
/// device number, which no other superblock has meanwhile: a mount whose
/// number has no such directory is not FUSE (`fuse`, `fuse.*`, `fuseblk`).
fn abort_fuse_of(r: &Reaper, pid: &[u8]) {
    for_each_mount_dev(r.proc, pid, &mut |dev| {
        let mut digits = [0u8; 20];
        let name = capsule_nolibc::decimal(dev, &mut digits);
        let mut at = [0u8; 48];
        let Some(path) = join(&mut at, &[name, b"/abort"]) else { return true };
        let Ok(abort) = sys::openat(r.fusectl, path, libc::O_WRONLY, 0) else { return true };
        let mut own = false;
        for_each_mount_dev(r.proc, b"1", &mut |d| {
            own = d == dev;
            !own
        });
        if !own {
            let _ = sys::write(abort.as_raw_fd(), b"1");
        }
        true
    });
}

/// Calls `f` with the device number (the kernel's encoding, major << 20 |
/// minor) of each mount in `pid`'s mount table (the run's procfs), until it
/// returns false. A line longer than the buffer (a program can mount at a
/// path as long as it likes) still counts: the number is at its start.
fn for_each_mount_dev(proc: RawFd, pid: &[u8], f: &mut dyn FnMut(u64) -> bool) {
    let mut at = [0u8; 48];
    let Some(path) = join(&mut at, &[pid, b"/mountinfo"]) else { return };
    let Ok(file) = sys::openat(proc, path, libc::O_RDONLY, 0) else { return };
    let mut buf = [0u8; 16384];
    let mut have = 0;
    // In the rest of a line already counted.
    let mut skipping = false;
    loop {
        let n = match sys::read(file.as_raw_fd(), &mut buf[have..]) {
            Ok(n) => n,
            Err(_) => return,
        };
        have += n;
        let mut start = 0;
        while let Some(nl) = buf[start..have].iter().position(|&b| b == b'\n') {
            let dev = if std::mem::take(&mut skipping) { None } else { mount_dev(&buf[start..start + nl]) };
            if dev.is_some_and(|d| !f(d)) {
                return;
            }
            start += nl + 1;
        }
        if n == 0 {
            return;
        }
        if start == 0 && have == buf.len() {
            let dev = if std::mem::replace(&mut skipping, true) { None } else { mount_dev(&buf) };
            if dev.is_some_and(|d| !f(d)) {
                return;
            }
            have = 0;
            continue;
        }
        buf.copy_within(start..have, 0);
        have -= start;
    }
}

/// The device number of one mountinfo line, `ID PARENT MAJOR:MINOR ROOT
/// POINT ...` (only its start is needed).
fn mount_dev(line: &[u8]) -> Option<u64> {
    let dev = line.split(|&b| b == b' ').nth(2)?;
    let mut parts = dev.split(|&b| b == b':');
    let (major, minor) = (parts.next().and_then(decimal)?, parts.next().and_then(decimal)?);
    Some((major << 20) | minor)
}

/// An unsigned decimal number (no sign, at most 9 digits).
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// `parts` concatenated into `buf` as a C string; None if too long.
fn join<'a>(buf: &'a mut [u8], parts: &[&[u8]]) -> Option<&'a CStr> {
    let mut len = 0;
    for p in parts {
        buf.get_mut(len..len + p.len())?.copy_from_slice(p);
        len += p.len();
    }
    *buf.get_mut(len)? = 0;
    CStr::from_bytes_with_nul(&buf[..=len]).ok()
}

/// What PID 1 hands to the tracee (on PID 1's stack, which stays intact:
/// PID 1 is suspended until the tracee execs or exits).
struct TraceeArgs<'a> {
    plan: &'a Plan,
    arena: &'a Arena<Shared>,
    proc: RawFd,
    ruleset: &'a landlock::Built,
}

/// The tracee, on its own stack. Never returns: it becomes the program or
/// exits.
fn tracee(args: &TraceeArgs) -> ! {
    match tracee_setup(args.plan, args.arena, args.proc, args.ruleset) {
        Ok(never) => match never {},
        Err(f) => args.arena.fail(f),
    }
    sys::exit(127)
}

fn tracee_setup(plan: &Plan, arena: &Arena<Shared>, proc: RawFd, ruleset: &landlock::Built) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // Named until execve names it after the program (ps, profiles).
    sys::set_comm(c"capsule-tracee");
    // Our ids: the uid/gid the run asked for, mapped onto PID 1's root (the
    // caller). A process may write its own maps when each is one line
    // mapping its own effective id. The memory it shares is non-dumpable
    // and stays so (it is the supervisor's, see `Supervisor::start`): its
    // /proc files belong to root of the supervisor's user namespace, the
    // caller, so the tracee may open them.
    write_proc(proc, b"setgroups", b"deny")
        .and_then(|_| write_proc(proc, b"gid_map", plan.tracee_gid_map.to_bytes()))
        .and_then(|_| write_proc(proc, b"uid_map", plan.tracee_uid_map.to_bytes()))
        .map_err(|e| Fail::new(Step::TraceeIdMap, e))?;
    // Born in the run's cgroup (CLONE_INTO_CGROUP); a cgroup namespace
    // rooted there: the program sees itself at `/` and nothing of the
    // cgroups above, where its limits are.
    sys::unshare(libc::CLONE_NEWCGROUP).map_err(|e| Fail::new(Step::CgroupNamespace, e))?;
    // Signal mask and ignored signals survive execve: give the program
    // defaults (PID 1 blocked SIGCHLD, Rust ignores SIGPIPE).
    sys::reset_signals();
    // A new session: no controlling terminal, so TIOCSTI/TIOCLINUX on an
    // inherited tty cannot push input to the caller (CVE-2017-5226), and
    // process-group signals stay inside.
    sys::setsid().map_err(|e| Fail::new(Step::Setsid, e))?;
    // no_new_privs: setuid binaries and file capabilities grant nothing;
    // also required for an unprivileged seccomp filter.
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| Fail::new(Step::NoNewPrivs, e))?;
    // Drop every capability of U3 (securebits first so uid 0 regains none).
    caps::drop_all(plan.last_cap).map_err(|e| Fail::new(Step::DropCaps, e))?;

    // A filter that allows all the calls made below (the `default`
    // policy's does) is installed now rather than last: installing is the
    // costliest step left (the kernel converts, JITs and caches it), and
    // from here on it would be on the request's path.
    let early = plan.filter.as_ref().is_some_and(|f| f.early);
    if early {
        let f = plan.filter.as_ref().expect("early implies a filter");
        let listener = crate::seccomp::install(f.map.as_slice(), f.notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }

    // Everything above is the same for any run of this shape, so a PID 1
    // prepared ahead of time has done it before the request exists. Here
    // the tracee waits for the run: the go message carries its stdin,
    // stdout and stderr, and the supervisor wrote the rest into the arena.
    // End of stream: the supervisor dropped this prepared run.
    let mut stdio = [-1; 3];
    let (n, nfds) = sys::recv_fds_into(plan.go_sock, &mut stdio).map_err(|e| Fail::new(Step::Go, e))?;
    if n == 0 {
        sys::exit(0);
    }
    std::sync::atomic::fence(SeqCst);
    shared.flags.fetch_or(FLAG_GO, SeqCst);
    if nfds != 3 {
        return Err(Fail::new(Step::Go, libc::EBADMSG));
    }
    // The run's stdio onto 0, 1, 2 (received above 2: 0-2 are occupied).
    // The received descriptors go: the table is PID 1's too, which must
    // not keep the program's pipes open.
    for (i, fd) in stdio.iter().enumerate() {
        sys::dup2(*fd, i as RawFd).map_err(|e| Fail::new(Step::Stdio, e))?;
    }
    for fd in stdio {
        if fd > 2 {
            sys::close(fd);
        }
    }
    // controlling_tty: needs the session made above and fd 0 in place; seccomp below still bars TIOCSTI.
    if shared.go_controlling_tty.load(SeqCst) != 0 {
        sys::tty::set_controlling_tty(0).map_err(|e| Fail::new(Step::ControllingTty, e))?;
    }
    // The run's stdio is known only now: Landlock rules for those that are
    // files or terminals open for writing, so that reopening them
    // (`echo x > /dev/stderr`) keeps working.
    landlock::add_stdio_rules(ruleset.raw_fd(), ruleset.handled.fs);
    // chdir after dropping capabilities: the program's own permissions decide.
    let cwd = arena.cstr(shared.go_cwd.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    if let Err(e) = sys::chdir(cwd) {
        if shared.go_cwd_fallback.load(SeqCst) == 0 {
            return Err(Fail::at(Step::Chdir, e, CWD_NAME));
        }
        sys::chdir(c"/").map_err(|e| Fail::new(Step::Chdir, e))?;
    }
    // Resource limits last before exec, so capsule's own setup is not
    // limited by them (e.g. RLIMIT_NOFILE).
    let limits = arena
        .slice::<RawRlimit>(shared.go_rlimits.load(SeqCst), shared.go_rlimits_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    rlimits::apply(limits).map_err(|(i, e)| Fail { step: Step::Rlimit, errno: e, path: i as u32 })?;
    // Only 0, 1, 2 may reach the program.
    sys::cloexec_from(3).map_err(|e| Fail::new(Step::CloseFds, e))?;
    let argv = arena.ptr_array(shared.go_argv.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let envp = arena.ptr_array(shared.go_envp.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let paths = arena
        .slice::<u64>(shared.go_exec_paths.load(SeqCst), shared.go_exec_paths_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let (filter, notify, _) = run_filter(plan, arena).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    // Landlock last before seccomp (it needs no_new_privs, set above):
    // from here on this process and the program may write only where the
    // rules allow.
    let enforced = landlock::restrict(ruleset.raw_fd(), plan.landlock.requested, ruleset.handled)?;
    shared.landlock.store(enforced.to_u32(), SeqCst);
    // The CPU the program's cgroup used so far (this set-up) is not the
    // program's.
    // sched_yield first: the CPU a running task used since the scheduler
    // last updated its statistics is not in cpu.stat yet, and a stale
    // baseline would be charged to the program (the thesis's trick).
    if let Some(cg) = &plan.cgroup {
        sys::sched_yield();
        let (user, system) = cgroups::read_cpu_stat(cg.cpu_stat).unwrap_or((0, 0));
        shared.cgroup_cpu_us_at_exec.store(user + system, SeqCst);
    }
    let (user, system, _) = sys::rusage_self();
    shared.setup_user_us.store(user, SeqCst);
    shared.setup_system_us.store(system, SeqCst);
    shared.exec_ns.store(sys::clock_monotonic_ns(), SeqCst);
    // Seccomp last (unless installed early, above): from here on only the
    // program's own syscalls run. Its listener (close-on-exec) stays in the
    // table PID 1 shares.
    if !early {
        let listener = crate::seccomp::install(filter, notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }
    let mut err = libc::ENOENT;
    let mut eacces = false;
    for &path in paths {
        let Some(path) = arena.cstr(path) else { continue };
        err = sys::execve(path, argv, envp);
        match err {
            libc::EACCES => eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => break,
        }
    }
    if eacces && err != libc::EACCES && matches!(err, libc::ENOENT | libc::ENOTDIR) {
        err = libc::EACCES;
    }
    Err(Fail::at(Step::Exec, err, EXEC_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mount's device number is seen, one after a line longer than
    /// the buffer (a mount at a long path) and that line's own too.
    #[test]
    fn mount_devs_survive_long_lines() {
        let dir = std::env::temp_dir().join(format!("capsule-mountdev-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("7")).unwrap();
        let long = "x".repeat(40_000);
        let table = format!(
            "21 1 0:20 / / rw - tmpfs tmpfs rw\n22 21 0:51 / /{long} rw - fuse.evil evil rw\n23 21 0:52 / /mnt rw - fuse.sshfs host rw\n24 21 8:1 / /b rw - ext4 /dev/sda1 rw\n"
        );
        std::fs::write(dir.join("7/mountinfo"), table).unwrap();
        let d = std::fs::File::open(&dir).unwrap();
        let mut seen = Vec::new();
        for_each_mount_dev(d.as_raw_fd(), b"7", &mut |dev| {
            seen.push(dev);
            true
        });
        let mut first = Vec::new();
        for_each_mount_dev(d.as_raw_fd(), b"7", &mut |dev| {
            first.push(dev);
            dev != 51
        });
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(seen, [20, 51, 52, (8 << 20) | 1]);
        assert_eq!(first, [20, 51], "stops when told");
    }
}
