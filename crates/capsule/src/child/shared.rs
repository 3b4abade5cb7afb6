//! What PID 1 and the tracee run on: the plan made before clone, the page shared with the supervisor.

use super::netlog::NetLog;
use super::step::{Fail, Step};
use crate::host::cgroups::CgroupFds;
use crate::plan::mounts::MountPlan;
use crate::proto::spec::MAX_INHERIT_FDS;
use crate::sys::{self, Arena, Errno};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::SeqCst};

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

/// The page shared by the supervisor, PID 1 and the tracee, the header of the run's [`sys::Arena`];
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
    /// The spec's `inherit_fds` (`[i32]` in the arena): the numbers the
    /// descriptors after the stdio in the go message go to.
    pub go_inherit: AtomicU64,
    pub go_inherit_len: AtomicU64,
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
    /// Voluntary and forced context switches of everything PID 1 reaped.
    pub csw_voluntary: AtomicU64,
    pub csw_forced: AtomicU64,
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
    /// Per `go_inherit` entry, set by the tracee before it puts the
    /// descriptor at its number: 1 the number was free, m + 2 what was
    /// there (PID 1's or the tracee's) moved to m; 0 not reached. PID 1
    /// puts it back after the program's execve.
    pub inherit_moved: [AtomicI32; MAX_INHERIT_FDS],
}

impl Shared {
    pub(crate) fn fail(&self, f: Fail) {
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
    /// "U 0 1\n" and "G 0 1\n": the program's ids in the run's user
    /// namespace, mapped onto the supervisor's 0 (the caller).
    pub uid_map: CString,
    pub gid_map: CString,
    /// With a process limit but no cgroup (`rlimits::counts_processes`):
    /// the uid and gid maps of the tracee's own user namespace, "U U 1\n"
    /// and "G G 1\n" (its ids onto themselves in the run's).
    pub tracee_maps: Option<[CString; 2]>,
    /// With subordinate ids: the run's user namespace, made and mapped by
    /// the supervisor, which PID 1 joins instead of making one; else -1.
    pub user_ns: RawFd,
    /// With subordinate ids: the program's uid and gid in it, which the
    /// tracee switches to (mapped onto the supervisor's 1).
    pub box_ids: Option<(u32, u32)>,
    /// The network PID 1 joins.
    pub net: NetJoin,
    pub hostname: Option<CString>,
    /// pidfd of the supervisor, to notice its death.
    pub supervisor_pidfd: RawFd,
    pub mounts: MountPlan,
    /// The mount template's namespace (`supervisor::template`) when the
    /// tree is built on it, else -1.
    pub mount_template: RawFd,
    /// The Landlock ruleset PID 1 builds and the tracee enforces.
    pub landlock: crate::plan::landlock::Plan,
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
    /// PID 1 was created by the spawner thread that has `filter` installed
    /// (`SealedFilter::inherit`): PID 1, the tracee and the program run
    /// under it from the start, and the tracee installs nothing.
    pub filter_inherited: bool,
    /// The network log (`net_log`), shared with the supervisor.
    pub net_log: Option<Rc<Arena<NetLog>>>,
    /// With `explain`: what its file watch classifies paths against.
    pub watch: Option<crate::plan::mounts::WatchView>,
    /// /sys/fs/fuse/connections in the supervisor's view (O_PATH), or -1.
    pub fusectl: RawFd,
    /// The supervisor's CPUs, when PID 1 was created on one of them: it
    /// widens to these before creating the tracee.
    pub widen: Option<libc::cpu_set_t>,
    /// PID 1's slice once the program runs (0: the default): the program's
    /// exit may wake it on a CPU busy with the next run's preparation.
    pub slice_ns: u64,
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
    /// PID 1 can build the sandbox under it (`seccomp::allows_child_path`)
    /// and it does not notify: a spawner thread may install it once for
    /// the PID 1s it creates (`Plan::filter_inherited`).
    pub inherit: bool,
}

/// The run's filter: its instructions, whether its `kill` is a user
/// notification, where the network log's epilogue starts (0: none).
/// Valid once the go message is in; None only if the supervisor sent no
/// filter at all (a bug, reported as a failed go message).
pub(crate) fn run_filter<'a>(plan: &'a Plan, arena: &'a Arena<Shared>) -> Option<(&'a [libc::sock_filter], bool, u32)> {
    if let Some(f) = &plan.filter {
        return Some((f.map.as_slice(), f.notify, f.net_log_from));
    }
    let shared: &Shared = arena;
    let program = arena.slice::<libc::sock_filter>(shared.go_filter.load(SeqCst), shared.go_filter_len.load(SeqCst))?;
    Some((program, shared.go_filter_notify.load(SeqCst) != 0, shared.go_filter_net_log_from.load(SeqCst)))
}

/// The numbers of `inherit_fds` (empty when none); None: not in the arena.
pub(crate) fn inherit_targets(arena: &Arena<Shared>) -> Option<&[i32]> {
    let shared: &Shared = arena;
    match shared.go_inherit_len.load(SeqCst) {
        0 => Some(&[]),
        n => arena.slice::<i32>(shared.go_inherit.load(SeqCst), n),
    }
}

/// Where the tracee moved `fd` to free its number for an inherited one (or
/// `fd` itself): its own descriptors are used by number after that.
pub(crate) fn moved_fd(arena: &Arena<Shared>, fd: RawFd) -> RawFd {
    let shared: &Shared = arena;
    let targets = inherit_targets(arena).unwrap_or(&[]);
    match targets.iter().position(|&t| t == fd).map(|i| shared.inherit_moved[i].load(SeqCst)) {
        Some(m) if m >= 2 => m - 2,
        _ => fd,
    }
}

/// Path-table index of the program's name, for "not found" errors.
pub(crate) const EXEC_NAME: u32 = 0;
/// Path-table index of the working directory.
pub(crate) const CWD_NAME: u32 = 1;

pub(crate) fn fail_exit(shared: &Shared, f: Fail) -> ! {
    shared.fail(f);
    sys::exit(127)
}

/// Maps the calling process's user namespace (just created by it or its
/// clone): one line each, through the procfs `proc`.
pub(crate) fn write_id_maps(proc: RawFd, uid_map: &CStr, gid_map: &CStr) -> Result<(), Errno> {
    // setgroups first: an unprivileged gid_map needs it denied.
    write_proc(proc, b"setgroups", b"deny")?;
    write_proc(proc, b"gid_map", gid_map.to_bytes())?;
    write_proc(proc, b"uid_map", uid_map.to_bytes())
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
