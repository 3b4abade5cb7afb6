//! The supervisor: created once, serves many runs (thesis, ch. 3).
//!
//! One single-threaded event loop ([`Supervisor::serve`]) over: the
//! clients' connections (the library's binary protocol, [`crate::proto::wire`],
//! or `capsule serve`'s JSON lines, [`crate::serve`]), the runs in flight
//! (a pipe PID 1 writes a byte to when the result is in the arena, PID 1's
//! pidfd, the streams the supervisor carries: captures, read-once input,
//! write-once output, interactive relays, [`crate::relay`]) and the PID 1s
//! prepared ahead.
//!
//! A run's PID 1 shares the supervisor's memory (`sys::vm`: no copy of
//! it, no copy-on-write faults, nothing to tear down at its exit) and is
//! created with everything known before the request: its namespaces, the
//! mount tree, the program's user namespace and cgroup, down to the
//! tracee waiting for its go message
//! ([`Prepared`]). The request then only fills in the arena (argv, envp,
//! working directory, limits) and sends the go message with the run's
//! stdio; the tracee execs at once. While the supervisor is idle, the next
//! PID 1 of the same shape is prepared: fresh for each run, never reused.
//! The result is sent when PID 1 has reaped every process of the run,
//! before PID 1 itself has finished exiting.
//!
//! The one-shot `capsule run` forks a supervisor that serves its one
//! request over the same protocol and this same loop. Every supervisor
//! re-executes itself once inside its user namespace first
//! ([`Supervisor::start`]).

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering::SeqCst;

use serde_json::Value;

use crate::child::netlog::NetLog;
use crate::child::{
    self, NetJoin, Plan, SealedFilter, Shared, Step, CWD_NAME, EXEC_NAME, FLAG_CPU_TIME, FLAG_FORBIDDEN, FLAG_GO,
    FLAG_KILLED, FLAG_OUTPUT_LIMIT, FLAG_TRACEE_REAPED, FLAG_WALL_TIME,
};
use crate::error::{errno_text, Error, SysError};
use crate::host::cgroups::{self, Instance, RunCgroup, Stats, DELEGATION_HINT};
use crate::host::identity::{is_real_root, peer_fingerprint, root_refusal};
use crate::namespaces::{self, PendingNet};
use crate::plan::mounts::{MountPlan, Source};
use crate::plan::rlimits::{self, RawRlimit, Rlimit};
use crate::plan::seccomp::{Filter, Guards};
use crate::proto::config::Config;
use crate::proto::lines::{self, Line, LineReader, LineRequest};
use crate::proto::policy::PolicyName;
use crate::proto::result::{signal_name, Accounting, InteractResult, RunResult, Side, Status};
use crate::proto::spec::{InteractSpec, MountOp, PipeFile, RunSpec, Stdio, DEFAULT_PATH};
use crate::proto::wire::{self, ClientMsg, ServerMsg};
use crate::relay::{Capture, Collect, Feed, Relay};
use crate::sys::{self, Arena};

/// The tracees' stack until their execve: the deepest path (PATH search,
/// id maps) needs a few KiB; page faults touch only what it uses.
const TRACEE_STACK: usize = 256 << 10;
/// PID 1's stack: reserved, not allocated; its deepest path needs tens of
/// KiB, and a guard page ends it.
const PID1_STACK: usize = 1 << 20;
/// Size of a run's arena: its argv, environment and the rest must fit
/// (execve's own limit is a quarter of the stack limit, 2 MiB by default).
/// Reserved, not allocated: only the pages written are.
const ARENA_SIZE: usize = 16 << 20;

/// The loopback-only network namespace of the supervisor.
enum Net {
    /// Still being created by a thread.
    Pending(PendingNet),
    Ready(OwnedFd),
    /// Creating it failed; every run that needs it fails with this.
    Failed(String),
    /// None: each run's PID 1 makes one of its own (`Config::own_network`).
    PerRun,
}

/// A running supervisor (lives in the process that called [`Supervisor::start`]).
pub struct Supervisor {
    config: Config,
    host_uid: u32,
    host_gid: u32,
    /// The user's agent directories, covered in every run.
    agent_dirs: Vec<PathBuf>,
    net: Net,
    self_pidfd: OwnedFd,
    last_cap: u32,
    /// Seccomp filters compiled so far, one per policy, guards and network log.
    filters: Filters,
    /// /sys/fs/fuse/connections (O_PATH), if the host has fusectl.
    fusectl: Option<OwnedFd>,
    /// Stacks and arenas of the runs' PID 1s and tracees, which share the
    /// supervisor's memory.
    pools: Rc<Pools>,
    /// This supervisor's cgroup; None in degraded mode.
    cgroups: Option<Instance>,
    /// Where the cgroups come from, or why there are none.
    cgroup_note: String,
    /// CPUs the supervisor may run on (its affinity mask).
    cpus: u64,
    /// That mask, when it holds more than one CPU: a PID 1 prepared ahead
    /// starts on the supervisor's CPU and widens to it (see `prepare`).
    affinity: Option<libc::cpu_set_t>,
    /// The kernel's Landlock ABI version (0: none), probed once.
    landlock_abi: u32,
    /// The caller's homes (`~` of the filesystem rules, where the default
    /// secrets are), found once.
    home: crate::host::fsrules::Homes,
}

/// How a connection frames its messages.
pub enum Framing {
    /// The library's: length-prefixed JSON with SCM_RIGHTS ([`crate::proto::wire`]).
    Binary,
    /// `capsule serve`'s JSON lines ([`crate::serve`]).
    Lines,
}

/// A client of the supervisor.
pub struct Conn {
    read: OwnedFd,
    /// None: write to `read` (a socket).
    write: Option<OwnedFd>,
    framing: Framing,
    lines: LineReader,
    /// Responses not yet written (non-blocking sockets).
    out: Vec<u8>,
    /// No more requests will come.
    eof: bool,
    /// The client is gone: its runs are killed, nothing more is written.
    gone: bool,
    /// Stdin/stdout of `capsule serve`: at EOF, finish the accepted runs.
    finish_at_eof: bool,
}

impl Conn {
    /// The library's connection (a socket).
    pub fn binary(sock: OwnedFd) -> Conn {
        Conn::new(sock, None, Framing::Binary, false)
    }

    /// `capsule serve` on stdin/stdout.
    pub fn lines_stdio(stdin: OwnedFd, stdout: OwnedFd) -> Conn {
        Conn::new(stdin, Some(stdout), Framing::Lines, true)
    }

    fn new(read: OwnedFd, write: Option<OwnedFd>, framing: Framing, finish_at_eof: bool) -> Conn {
        Conn {
            read,
            write,
            framing,
            lines: LineReader::default(),
            out: Vec::new(),
            eof: false,
            gone: false,
            finish_at_eof,
        }
    }

    fn wfd(&self) -> RawFd {
        self.write.as_ref().unwrap_or(&self.read).as_raw_fd()
    }
}

/// How the loop ends.
pub enum Mode {
    /// Until every connection is closed (the library, `capsule serve`).
    Serve,
    /// `capsule serve --listen`: until a signal; a connection is taken only
    /// from a peer with this [`peer_fingerprint`] (the server's caller's):
    /// others, sandboxed programs among them, get an error line.
    Listen { peer: String },
    /// After one request is answered (the one-shot `capsule run`).
    Once,
    /// A per-user agent ([`crate::agent`]): clients of the library's
    /// protocol accepted on the listener, one connection per `capsule run`;
    /// ends when idle too long, or once the host's mount table changed
    /// and the runs in flight are done.
    Agent(AgentLife),
}

/// What a supervisor process serves. It crosses the supervisor's
/// re-execution into its user namespace (see [`Supervisor::start`]) as
/// descriptor numbers, which stay open across it.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum Job {
    /// The library's protocol on one socket: one request (`once`, the
    /// one-shot `capsule run`) or until the client hangs up.
    Socket { sock: RawFd, once: bool },
    /// A per-user agent ([`crate::agent`]).
    Agent(crate::agent::AgentJob),
    /// `capsule serve`: JSON lines on stdin/stdout, or on the connections
    /// to a listening socket (its descriptor and path) with the pid of a
    /// process of the caller's (its peers must look like it; 0 without).
    Lines { listener: Option<(RawFd, PathBuf)>, witness: i32 },
}

impl Job {
    fn fds(&self) -> Vec<RawFd> {
        match self {
            Job::Socket { sock, .. } => vec![*sock],
            Job::Agent(a) => a.fds(),
            Job::Lines { listener, .. } => listener.iter().map(|(fd, _)| *fd).collect(),
        }
    }

    /// Serves with the started supervisor, or reports why it did not
    /// start; never returns.
    fn run(self, started: Result<Supervisor, Error>) -> ! {
        match self {
            Job::Socket { sock, once } => crate::client::socket_job(sys::reclaim_fd(sock), once, started),
            Job::Agent(a) => crate::agent::agent_job(a, started),
            Job::Lines { listener, witness } => crate::serve::lines_job(listener, witness, started),
        }
    }
}

/// What a supervisor set up as the caller, before its re-execution.
#[derive(serde::Serialize, serde::Deserialize)]
struct Prelude {
    config: Config,
    host_uid: u32,
    host_gid: u32,
    home: crate::host::fsrules::Homes,
    cgroups: Option<cgroups::InstanceState>,
    cgroup_note: String,
    self_pidfd: RawFd,
}

/// The re-executed supervisor's first argument; the second is the
/// descriptor of its [`Prelude`] and [`Job`] (JSON in a memfd).
pub const RESUME_ARG: &str = "--resume-supervisor";

/// Re-executes the supervisor (already in its user namespace) as
/// `capsule --resume-supervisor FD`; returns only on failure.
fn reexec(prelude: &Prelude, job: &Job) -> Error {
    let data = serde_json::to_vec(&HandoffRef { prelude, job }).expect("serializable");
    let fail = |what: &str, e: i32| Error::Sys(SysError::new(what, e));
    let memfd = match sys::memfd(c"capsule-handoff") {
        Ok(fd) => fd,
        Err(e) => return fail("memfd_create", e),
    };
    if let Err(e) = sys::write_all(memfd.as_raw_fd(), &data) {
        return fail("write (handoff)", e);
    }
    let passed: Vec<RawFd> = job.fds().into_iter().chain([prelude.self_pidfd, memfd.as_raw_fd()]).collect();
    for &fd in &passed {
        let _ = sys::set_cloexec(fd, false);
    }
    let c = |s: &str| CString::new(s).expect("no NUL");
    let args = [c("capsule"), c(RESUME_ARG), c(&memfd.as_raw_fd().to_string())];
    use std::os::unix::ffi::OsStringExt;
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect();
    let ptrs = |v: &[CString]| v.iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect::<Vec<_>>();
    let e = sys::execve(c"/proc/self/exe", &ptrs(&args), &ptrs(&env));
    for &fd in &passed {
        let _ = sys::set_cloexec(fd, true);
    }
    Error::Sys(SysError::new("execve", e).path("/proc/self/exe"))
}

/// `capsule --resume-supervisor FD`: a supervisor re-executed by
/// [`Supervisor::start`] finishes its set-up and serves its job. Never
/// returns.
pub fn resume_main(fd: &str) -> ! {
    use std::io::{Read, Seek};
    let handoff = fd.parse::<RawFd>().ok().filter(|&fd| sys::fd_mode(fd).is_ok()).and_then(|fd| {
        let mut file = std::fs::File::from(sys::reclaim_fd(fd));
        let mut data = Vec::new();
        file.rewind().and_then(|()| file.read_to_end(&mut data)).ok()?;
        serde_json::from_slice::<Handoff>(&data).ok()
    });
    let Some(h) = handoff else {
        eprintln!("capsule: error: {RESUME_ARG} is internal: a supervisor re-executes itself with it");
        sys::exit(crate::proto::result::EXIT_CAPSULE_ERROR)
    };
    for fd in h.job.fds().into_iter().chain([h.prelude.self_pidfd]) {
        let _ = sys::set_cloexec(fd, true);
    }
    // execve named it after the path it ran (`exe`).
    sys::set_comm(c"capsule");
    // PID 1 and the tracee share this memory and must never panic; if one
    // did anyway, its unwinding would run in the supervisor's heap and
    // thread-local state. The hook ends such a process on the spot.
    let me = sys::getpid();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if sys::getpid() != me {
            sys::exit(crate::proto::result::EXIT_CAPSULE_ERROR);
        }
        default_hook(info)
    }));
    let started = Supervisor::finish(h.prelude);
    h.job.run(started)
}

/// What [`reexec`] writes; read back as a [`Handoff`].
#[derive(serde::Serialize)]
struct HandoffRef<'a> {
    prelude: &'a Prelude,
    job: &'a Job,
}

#[derive(serde::Deserialize)]
struct Handoff {
    prelude: Prelude,
    job: Job,
}

/// What ends an agent.
pub struct AgentLife {
    /// Exit after this long without a client, a request or a run.
    pub idle: std::time::Duration,
    /// The host's `/proc/self/mountinfo`, opened before the supervisor
    /// entered its namespaces: POLLPRI once the host's mount table changes.
    /// The agent's view was copied at its start and is private (nothing
    /// propagates in), so from then on it would show a stale host: it
    /// stops taking requests (later ones start a new agent).
    pub host_mounts: Option<OwnedFd>,
    /// The listening socket's path and (dev, inode): unlinked on the way
    /// out only while it is still this agent's.
    pub path: PathBuf,
    pub ino: (u64, u64),
    /// The identity's lock (`flock`ed) and its path: given up with the
    /// socket, so that a new agent can start while this one finishes.
    pub lock: Option<(OwnedFd, PathBuf)>,
    /// [`peer_fingerprint`] of the caller that started the agent: a peer
    /// with another one (a sandboxed program that can see the socket, as
    /// with `--bind /tmp /tmp`: another user namespace, a deeper PID
    /// namespace, no_new_privs, seccomp filters) is refused and forks a
    /// supervisor of its own, inside its sandbox, instead.
    pub peer: String,
}

impl AgentLife {
    /// Gives up the socket (if still this agent's) and then the lock, whose
    /// file goes while still held (`agent::send` checks that the file it
    /// locked is still at its path). Once; later calls do nothing.
    pub fn give_up(&mut self) {
        let Some((fd, lock_path)) = self.lock.take() else { return };
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            use std::os::unix::fs::MetadataExt;
            if (m.dev(), m.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        let _ = std::fs::remove_file(lock_path);
        drop(fd);
    }
}

/// A run's id as its client gave it.
#[derive(Debug, Clone, PartialEq)]
enum ClientId {
    Binary(u64),
    Json(Value),
    /// The one run of a front end's `Command` (answered with `Exit`).
    Command {
        quiet: bool,
    },
}

/// A request waiting for a free slot.
struct Request {
    conn: usize,
    cid: ClientId,
    spec: Box<RunSpec>,
    /// Caller-provided stdin, stdout, stderr.
    stdio: [Option<OwnedFd>; 3],
    notify: Option<OwnedFd>,
    /// Already failed once on a PID 1 prepared ahead (retried on a fresh one).
    retried: bool,
    /// One of the two programs of an interactive run: the pair's id and
    /// which one. Its stdin and stdout are the relay's pipes; its result
    /// goes to the pair.
    pair: Option<(u64, Side)>,
}

/// An interactive run in flight: two ordinary runs whose stdin and stdout
/// are the relay's, and whose results come here.
struct Pair {
    id: u64,
    conn: usize,
    cid: ClientId,
    notify: Option<OwnedFd>,
    relay: Relay,
    /// Each program's result and end time (CLOCK_MONOTONIC ns).
    results: [Option<(RunResult, u64)>; 2],
    /// Cancelled, or its client is gone: no answer is sent.
    cancelled: bool,
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Solution => 0,
        Side::Interactor => 1,
    }
}

fn other(side: Side) -> Side {
    match side {
        Side::Solution => Side::Interactor,
        Side::Interactor => Side::Solution,
    }
}

/// What must match between a request and a PID 1 prepared ahead.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    empty_root: bool,
    tmp_size: Option<u64>,
    mounts: Vec<MountOp>,
    filesystem: crate::proto::spec::Filesystem,
    share_net: bool,
    hostname: Option<String>,
    ids: (u32, u32),
    cgroup: [bool; 4],
    seccomp: PolicyName,
    /// `landlock`, `tcp_connect`, `tcp_bind`: PID 1 builds the ruleset.
    landlock: (bool, Option<Vec<u16>>, Option<Vec<u16>>),
    /// Layer runs are never prepared ahead: a layer is locked by one run
    /// at a time, and its roots depend on the request.
    layers: Vec<PathBuf>,
    /// PID 1 bounds the nested namespaces and inotify instances as it is built.
    ucounts: [u32; 12],
}

/// A PID 1 created for a run of one shape: building the sandbox, or ready
/// with its tracee waiting for the go message.
struct Prepared {
    shape: Shape,
    /// The run's seccomp filter, mapped in PID 1 when it was known before
    /// PID 1 was created (else `go` copies it into the arena).
    filter: Option<Rc<SealedFilter>>,
    /// Else the filter compiled after PID 1 was created, for `fill` to copy into
    /// the arena.
    late_filter: Option<Rc<SealedFilter>>,
    pidfd: OwnedFd,
    /// What PID 1 runs on (its plan, the arena, the stacks): shared
    /// memory, freed only once PID 1 has exited (see `Drop`). None only
    /// while being dropped.
    run: Option<Box<child::Pid1>>,
    pools: Rc<Pools>,
    /// PID 1 was reaped: it is gone.
    reaped: bool,
    /// Our end of the tracee's go socket.
    go: OwnedFd,
    /// PID 1 writes a byte to it when the result is in the arena.
    done: OwnedFd,
    /// We signal it to have the run killed.
    control: OwnedFd,
    cgroup: Option<RunCgroup>,
    /// Paths errors may name: 0 the program, 1 the working directory,
    /// then the mount plan's.
    names: Vec<String>,
    /// The bind and `file` sources as resolved for this PID 1, to check
    /// one prepared ahead against the host before it is used, and the
    /// directories that vouch for the missing ones.
    sources: Vec<Source>,
    parents: Vec<crate::plan::mounts::Parent>,
    /// /dev/null opened for the run's stdin, stdout and stderr ahead of
    /// the request (its default in `serve` and the library), each used at
    /// most once: runs share no open file.
    null: [Option<OwnedFd>; 3],
    /// Whether the tree was built before the request came.
    ahead: bool,
    /// The network log, for runs with `net_log`.
    net_log: Option<Rc<Arena<NetLog>>>,
    /// poll reported its result byte or pidfd since it was last looked at.
    signalled: bool,
    /// The run's layers, locked until its PID 1 is gone.
    layers: Option<crate::plan::overlay::LayerPlan>,
}

impl Prepared {
    /// The run's arena, shared with its PID 1.
    fn arena(&self) -> &Arena<Shared> {
        &self.run.as_ref().expect("only None while dropped").arena
    }

    /// Reaps PID 1, which has exited (its pidfd is readable); its wait
    /// status.
    fn reap(&mut self) -> Option<i32> {
        self.reaped = true;
        sys::pidfd_try_wait(self.pidfd.as_raw_fd()).ok().flatten()
    }
}

impl Drop for Prepared {
    /// Frees what PID 1 runs on once it has exited. Prepared PID 1s are
    /// normally dropped after that (as zombies, see `Loop`); one still
    /// running here (an error path, a supervisor unwinding) is killed and
    /// waited for, and if it does not go within 10 s its memory is
    /// leaked rather than freed under it.
    fn drop(&mut self) {
        if !self.reaped && !exited(self) {
            kill_prepared(self);
            let mut pfd = [libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            if sys::poll(&mut pfd, 10_000).unwrap_or(0) == 0 {
                std::mem::forget(self.run.take());
                return;
            }
        }
        if let Some(run) = self.run.take() {
            self.pools.give(*run);
        }
    }
}

/// Stacks and arenas for reuse (see `sys::vm`), shared by the supervisor
/// and its `Prepared`s, which give theirs back once PID 1 has exited.
#[derive(Default)]
struct Pools {
    stacks: sys::vm::StackPool,
    arenas: sys::vm::ArenaPool<Shared>,
}

impl Pools {
    /// Takes back what a PID 1 that is gone (or never started) ran on.
    fn give(&self, run: child::Pid1) {
        let child::Pid1 { arena, stack, tracee_stack, .. } = run;
        self.stacks.give(stack);
        self.stacks.give(tracee_stack);
        self.arenas.give(arena);
    }
}

/// A run in flight.
struct Running {
    p: Prepared,
    /// Kept until the result is out: a run whose PID 1 prepared ahead
    /// failed before its go message is retried from it.
    req: Request,
    rlimits: Vec<Rlimit>,
    wall_time_ns: Option<u64>,
    cpu_time_ns: Option<u64>,
    io: Streams,
    /// Its write-once output went past the output limit: killed for it.
    output_over: bool,
    /// Cancelled: no result is sent.
    cancelled: bool,
}

/// The streams the supervisor carries for a run: stdout and stderr
/// captured or collected into files, stdin fed from a file.
#[derive(Default)]
struct Streams {
    capture: [Option<Capture>; 2],
    collect: [Option<Collect>; 2],
    feed: Option<Feed>,
}

/// What [`Supervisor::fill`] prepared that the result needs.
struct Filled {
    rlimits: Vec<Rlimit>,
    wall_time_ns: Option<u64>,
    cpu_time_ns: Option<u64>,
}

/// What the poll set's entries stand for.
#[derive(Clone, Copy)]
enum Token {
    Listener,
    Signals,
    ConnRead(usize),
    ConnWrite(usize),
    Capture(usize, usize),
    /// A run's read-once input, write-once output.
    Feed(usize),
    Collect(usize, usize),
    /// An interactive run's relay: pair, direction, its `to` end.
    Relay(usize, usize, bool),
    /// A run's result byte or its PID 1's exit.
    Run(usize),
    /// A prepared PID 1's exit.
    Spare(usize),
    Zombie(usize),
    /// An agent's host mount table changed.
    HostMounts,
}

impl Supervisor {
    /// Turns the calling process into a supervisor serving `job`; never
    /// returns. As the caller, in the host's namespaces, it sets up its
    /// cgroup subtree (or degraded mode); it enters its user namespace and
    /// re-executes itself there ([`resume_main`]), then creates the
    /// namespaces shared by all runs. The caller must be single-threaded
    /// and gives up its own namespaces for good. A failure is reported the
    /// way `job` reports one.
    ///
    /// Why the re-execution: each run's PID 1 shares the supervisor's
    /// memory (see `prepare`), which is therefore non-dumpable for good
    /// (CVE-2019-5736: PID 1 is the program's /proc/1). The /proc files
    /// of a non-dumpable process belong to root of the user namespace its
    /// memory was created in, at execve: for a process started on the
    /// host, the host's root, and PID 1 and the tracee could not write
    /// their own id maps. Executed inside its user namespace, whose root is
    /// the calling user, the supervisor's memory belongs to that namespace:
    /// the files are the user's, and only a process with CAP_SYS_PTRACE
    /// over it (the user outside, never a sandboxed program, which is two
    /// user namespaces further down) may look inside.
    pub fn start(config: &Config, job: Job) -> ! {
        let e = match Self::begin(config) {
            Ok(prelude) => {
                let e = reexec(&prelude, &job);
                // Not re-executed: the cgroup instance ends here.
                drop(prelude.cgroups.map(Instance::from_state));
                e
            }
            Err(e) => e,
        };
        job.run(Err(e))
    }

    /// The part of the set-up done as the caller, up to entering the user
    /// namespace.
    fn begin(config: &Config) -> Result<Prelude, Error> {
        config.validate()?;
        if is_real_root() {
            return Err(root_refusal());
        }
        let (host_uid, host_gid) = (sys::getuid(), sys::getgid());
        // In the host's user namespace, where the euid is the caller's.
        let home = crate::host::fsrules::caller_homes(sys::geteuid());
        // cgroups first, as the plain user in the host's namespaces.
        let found = cgroups::discover(&config.cgroup);
        let (cgroups, cgroup_note) = match &found.base {
            Some(base) => match Instance::setup(base) {
                Ok(inst) => (Some(inst), found.detail.clone()),
                Err(e) => (None, format!("{}: setting it up failed: {e}", found.detail)),
            },
            None => (None, found.detail.clone()),
        };
        if cgroups.is_none() && config.cgroup.require {
            return Err(Error::Refused(format!(
                "cgroups are required (--require-cgroups) but unavailable: {cgroup_note}; {DELEGATION_HINT}"
            )));
        }
        // Taken before entering the namespaces: PID 1 polls it to notice the
        // supervisor's death, which PR_SET_PDEATHSIG alone cannot cover
        // (it is armed only after PID 1's credentials change).
        let self_pidfd = sys::pidfd_open(sys::getpid())
            .map_err(|e| SysError::new("pidfd_open", e).hint("capsule needs Linux ≥ 5.3"))?;
        namespaces::enter_user(host_uid, host_gid)?;
        Ok(Prelude {
            config: config.clone(),
            host_uid,
            host_gid,
            home,
            cgroups: cgroups.map(Instance::into_state),
            cgroup_note,
            self_pidfd: std::os::fd::IntoRawFd::into_raw_fd(self_pidfd),
        })
    }

    /// The rest of the set-up, in the re-executed supervisor.
    fn finish(p: Prelude) -> Result<Self, Error> {
        let self_pidfd = sys::reclaim_fd(p.self_pidfd);
        // Every run's PID 1 shares this memory; it is never dumpable (see
        // `start`), from before any of them exists.
        sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| SysError::new("prctl(PR_SET_DUMPABLE)", e))?;
        // execve made the memory the user namespace's only if the binary
        // is readable; else the kernel keeps it the host's, and no run
        // could write its id maps.
        if std::fs::File::open("/proc/self/exe").is_err() {
            return Err(Error::Refused(
                "the capsule binary is not readable by its user: the supervisor re-executes it inside its user \
                 namespace, which needs read permission (chmod a+r on it)"
                    .into(),
            ));
        }
        let ns = namespaces::enter_shared(!p.config.own_network)?;
        // Writing to a client that went away must not kill the supervisor.
        sys::ignore_sigpipe();
        // Where PID 1 aborts the FUSE connections of a run stuck at its end
        // (`child::abort_fuse`); PID 1's own view of /sys is read-only.
        // Only when fusectl is mounted there: the directory itself exists
        // whenever fuse is loaded.
        const FUSECTL_MAGIC: i64 = 0x6573_5543;
        let fusectl = match sys::probe::fs_magic(Path::new("/sys/fs/fuse/connections")) {
            Ok(FUSECTL_MAGIC) => {
                sys::open(c"/sys/fs/fuse/connections", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC, 0).ok()
            }
            _ => None,
        };
        Ok(Supervisor {
            config: p.config,
            host_uid: p.host_uid,
            host_gid: p.host_gid,
            net: ns.loopback_net.map_or(Net::PerRun, Net::Pending),
            self_pidfd,
            last_cap: crate::host::last_cap(),
            filters: Filters::default(),
            pools: Rc::new(Pools::default()),
            cgroups: p.cgroups.map(Instance::from_state),
            cgroup_note: p.cgroup_note,
            cpus: sys::cpu_count(),
            affinity: sys::affinity().ok().filter(|set| sys::cpus_in(set) > 1),
            landlock_abi: crate::plan::landlock::probe(),
            home: p.home,
            fusectl,
            agent_dirs: crate::host::identity::agent_dirs(p.host_uid),
        })
    }

    /// Where the cgroups come from, or why there are none.
    pub fn cgroup_note(&self) -> &str {
        &self.cgroup_note
    }

    /// Whether runs get cgroups (else degraded mode).
    pub fn has_cgroups(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Serves `conns` (and connections accepted on `listener`) until `mode`
    /// says to stop; then kills what still runs and cleans up.
    pub fn serve(mut self, conns: Vec<Conn>, listener: Option<OwnedFd>, mode: Mode) {
        let signals = match (&listener, &mode) {
            // A server others connect to stops cleanly on SIGTERM/SIGINT.
            (Some(_), _) => sys::signalfd_for(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]).ok(),
            _ => None,
        };
        let (once, agent, peer) = match mode {
            Mode::Serve => (false, None, None),
            Mode::Listen { peer } => (false, None, Some(peer)),
            Mode::Once => (true, None, None),
            Mode::Agent(life) => (false, Some(life), None),
        };
        let mut l = Loop {
            conns: conns.into_iter().map(Some).collect(),
            listener,
            signals,
            once,
            agent,
            peer,
            idle_since: std::time::Instant::now(),
            answered: 0,
            queue: VecDeque::new(),
            running: Vec::new(),
            spares: Vec::new(),
            zombies: Vec::new(),
            last_shape: None,
            pairs: Vec::new(),
            next_pair: 0,
            round: 0,
            spares_from: None,
            stop: false,
        };
        l.run(&mut self);
        // An agent stopped by a signal gives up its socket and lock first.
        l.retire();
        l.shutdown();
    }

    /// The key a request's PID 1 is prepared by.
    fn shape(&self, spec: &RunSpec) -> Shape {
        Shape {
            empty_root: spec.empty_root,
            tmp_size: spec.tmp_size,
            mounts: spec.mounts.clone(),
            filesystem: spec.filesystem.clone(),
            share_net: spec.share_net,
            hostname: spec.hostname.clone(),
            ids: self.ids(spec),
            cgroup: if self.cgroups.is_some() { cgroups::shape(&spec.limits) } else { [false; 4] },
            seccomp: spec.seccomp.clone(),
            landlock: (spec.landlock != Some(false), spec.tcp_connect.clone(), spec.tcp_bind.clone()),
            layers: spec.layers.clone(),
            ucounts: crate::plan::rlimits::ucounts(&spec.limits),
        }
    }

    fn ids(&self, spec: &RunSpec) -> (u32, u32) {
        if spec.root {
            (0, 0)
        } else {
            (spec.uid.unwrap_or(self.host_uid), spec.gid.unwrap_or(self.host_gid))
        }
    }

    /// Checks what a long-lived supervisor cannot change per run.
    fn check_request(&self, spec: &RunSpec) -> Result<(), String> {
        spec.validate().map_err(|e| e.to_string())?;
        // Asked for, so enforced or refused (the filesystem part is best effort).
        let asked = crate::plan::landlock::requested(
            spec.landlock != Some(false),
            spec.tcp_connect.as_deref(),
            spec.tcp_bind.as_deref(),
        );
        crate::plan::landlock::check_network(self.landlock_abi, asked)?;
        let c = &spec.cgroup;
        if c.path.is_some() && c.path != self.config.cgroup.path || c.disable && !self.config.cgroup.disable {
            return Err("invalid spec: cgroup: the cgroup base and --no-cgroups are the supervisor's settings \
                 (capsule serve --cgroup/--no-cgroups, sandbox Config::cgroup), not a run's"
                .into());
        }
        if c.require && self.cgroups.is_none() {
            return Err(format!(
                "cgroups are required (cgroup.require) but this supervisor has none ({}); {DELEGATION_HINT}",
                self.cgroup_note
            ));
        }
        if self.cgroups.is_none() {
            let l = &spec.limits;
            let needs = [
                ("limits.memory", l.memory.is_some()),
                ("limits.cpu_bandwidth", l.cpu_bandwidth.is_some()),
                ("limits.cpus", l.cpus.is_some()),
            ];
            if let Some((field, _)) = needs.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "{field} needs cgroup v2, and this supervisor has none ({}); {DELEGATION_HINT}",
                    self.cgroup_note
                ));
            }
        }
        Ok(())
    }

    /// How PID 1 joins the network, and the socket to send it over while
    /// the loopback namespace is still being made.
    fn net_join(&mut self, spec: &RunSpec) -> Result<(NetJoin, Option<(OwnedFd, OwnedFd)>), String> {
        if spec.share_net {
            return Ok((NetJoin::Host, None));
        }
        match &self.net {
            Net::Ready(fd) => Ok((NetJoin::Fd(fd.as_raw_fd()), None)),
            Net::Failed(msg) => Err(msg.clone()),
            Net::PerRun => Ok((NetJoin::Own, None)),
            Net::Pending(_) => {
                let (ours, theirs) =
                    sys::socketpair_stream().map_err(|e| SysError::new("socketpair", e).to_string())?;
                Ok((NetJoin::Receive(theirs.as_raw_fd()), Some((ours, theirs))))
            }
        }
    }

    /// Waits for the loopback network and hands it to PID 1 over `sock`
    /// (dropping `sock` without an fd makes PID 1 fail its JoinNetwork step).
    fn deliver_net(&mut self, sock: OwnedFd) {
        if let Net::Pending(_) = &self.net {
            let Net::Pending(handle) = std::mem::replace(&mut self.net, Net::Failed(String::new())) else {
                unreachable!()
            };
            self.net = match handle.join() {
                Ok(Ok(fd)) => Net::Ready(fd),
                Ok(Err(e)) => Net::Failed(format!("creating the sandbox network: {e}")),
                Err(_) => Net::Failed("creating the sandbox network: the thread panicked".into()),
            };
        }
        if let Net::Ready(fd) = &self.net {
            let _ = sys::send_with_fds(sock.as_raw_fd(), b"n", &[fd.as_raw_fd()]);
        }
    }

    /// Creates a PID 1 for runs of `spec`'s shape; it builds the sandbox and
    /// its tracee then waits for the go message. `filter` is `spec`'s policy
    /// from [`Filters::get`], mapped before PID 1 is created so that it sees
    /// it; None when it is not compiled yet: the caller compiles it while
    /// PID 1 builds, and `go` hands it over in the arena.
    fn prepare(
        &mut self,
        spec: &RunSpec,
        shape: Shape,
        filter: Option<Rc<SealedFilter>>,
        ahead: bool,
    ) -> Result<Prepared, String> {
        let (net, pending_net) = self.net_join(spec)?;
        let mut names = vec![String::new(), String::new()];
        // The sources, resolved here once, in the supervisor's (the host's)
        // view: PID 1 mounts and copies what the descriptors refer to.
        // Layers first: their directories are created and locked here.
        let layers = crate::plan::overlay::prepare(spec)?;
        let mut mounts = MountPlan::prepare(spec, sys::geteuid(), &self.home, &mut names, layers.as_ref())?;
        mounts.cover_agent_dirs(&self.agent_dirs, &mut names);
        let sources = std::mem::take(&mut mounts.sources);
        let parents = std::mem::take(&mut mounts.parents);
        let cgroup = match &self.cgroups {
            Some(inst) => Some(inst.new_run(&spec.limits).map_err(|e| format!("creating the run's cgroup: {e}"))?),
            None => None,
        };
        let fail = |what: &str, e: i32| SysError::new(what, e).to_string();
        let arena = self.pools.arenas.take(ARENA_SIZE).map_err(|e| fail("mmap (run arena)", e))?;
        // (`with_net_log` gives every policy, `none` too, the log's epilogue.)
        let net_log = match spec.net_log {
            false => None,
            true => Some(Rc::new(Arena::<NetLog>::new(0).map_err(|e| fail("mmap (network log)", e))?)),
        };
        let (go, go_child) = sys::socketpair_stream().map_err(|e| fail("socketpair", e))?;
        // A pipe rather than an eventfd: a pipe write wakes the supervisor
        // as a synchronous wake-up (the writer is about to exit), which lets
        // the scheduler run it on the writer's CPU instead of waking an idle one.
        let (done, done_child) = sys::pipe().map_err(|e| fail("pipe2", e))?;
        sys::set_nonblocking(done.as_raw_fd(), true).map_err(|e| fail("fcntl", e))?;
        let control = sys::eventfd().map_err(|e| fail("eventfd", e))?;
        let (uid, gid) = shape.ids;
        let c = |s: String| CString::new(s).expect("no NUL");
        // A PID 1 prepared ahead is built while a run may be going on. The
        // kernel places a new process on the idlest CPU at clone, which on a
        // small machine is the one running the program (the supervisor is
        // busy creating it): the build then preempts the program, and the
        // supervisor's own CPU idles once it sleeps. So PID 1 is created on
        // the supervisor's CPU (its affinity inherited from a pinned
        // supervisor, restored right after) and widens to the supervisor's
        // mask once its sandbox is built, before it creates the tracee.
        let pin = self.affinity.filter(|_| ahead).and_then(|all| Some((sys::one_cpu(sys::current_cpu().ok()?)?, all)));
        let mut keep_fds =
            vec![self.self_pidfd.as_raw_fd(), go_child.as_raw_fd(), done_child.as_raw_fd(), control.as_raw_fd()];
        match net {
            NetJoin::Fd(fd) | NetJoin::Receive(fd) => keep_fds.push(fd),
            NetJoin::Host | NetJoin::Own => {}
        }
        if let Some(cg) = &cgroup {
            let f = cg.raw_fds();
            keep_fds.extend([f.prog_dir, f.cpu_stat, f.kill]);
        }
        keep_fds.extend(mounts.fds());
        let fusectl = self.fusectl.as_ref().map_or(-1, |f| f.as_raw_fd());
        keep_fds.push(fusectl);
        keep_fds.retain(|&fd| fd > 2);
        keep_fds.sort_unstable();
        let plan = Plan {
            tracee_uid_map: c(format!("{uid} 0 1\n")),
            tracee_gid_map: c(format!("{gid} 0 1\n")),
            net,
            hostname: spec.hostname.as_deref().map(|h| c(h.to_string())),
            supervisor_pidfd: self.self_pidfd.as_raw_fd(),
            landlock: crate::plan::landlock::Plan::new(
                self.landlock_abi,
                &mounts,
                spec.landlock != Some(false),
                spec.tcp_connect.as_deref(),
                spec.tcp_bind.as_deref(),
            ),
            mounts,
            last_cap: self.last_cap,
            cgroup: cgroup.as_ref().map(RunCgroup::raw_fds),
            go_sock: go_child.as_raw_fd(),
            done: done_child.as_raw_fd(),
            control: control.as_raw_fd(),
            keep_fds,
            filter: filter.clone(),
            net_log: net_log.clone(),
            fusectl,
            widen: pin.map(|(_, all)| all),
            ucounts: shape.ucounts,
        };
        let fail_early = |cgroup: Option<RunCgroup>, e: String| {
            if let Some(cg) = cgroup {
                cg.remove();
            }
            Err(e)
        };
        let stacks = (self.pools.stacks.take(PID1_STACK), self.pools.stacks.take(TRACEE_STACK));
        let (stack, tracee_stack) = match stacks {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return fail_early(cgroup, fail("mmap (stack)", e)),
        };
        let run = Box::new(child::Pid1 { plan, arena, stack, tracee_stack });
        if let Some((one, _)) = &pin {
            let _ = sys::set_affinity(one);
        }
        // SAFETY: `run` (boxed: it does not move), its stacks included, is
        // kept in the `Prepared` below, whose drop frees it only once PID 1
        // has exited, and nothing changes it meanwhile (the supervisor
        // writes only the arena's shared page and byte area, through
        // atomics and `put`, to which PID 1 reads are ordered by the go
        // message). `child::pid1` makes `sys` calls only and ends with
        // `sys::exit`.
        let spawned = unsafe { sys::vm::spawn(libc::CLONE_NEWPID as u64, &run.stack, &*run, child::pid1) };
        // (The child widens itself once its sandbox is built.)
        if let Some((_, all)) = &pin {
            let _ = sys::set_affinity(all);
        }
        let (pid, pidfd) = match spawned {
            Ok(p) => p,
            Err(e) => {
                self.pools.give(*run);
                let e = SysError::new("clone3(CLONE_VM|CLONE_NEWPID)", e).hint("see `capsule check`").to_string();
                return fail_early(cgroup, e);
            }
        };
        drop(go_child);
        drop(done_child);
        if let Some((ours, theirs)) = pending_net {
            drop(theirs);
            self.deliver_net(ours);
        }
        let _ = pid;
        Ok(Prepared {
            signalled: false,
            shape,
            pidfd,
            run: Some(run),
            pools: self.pools.clone(),
            reaped: false,
            go,
            done,
            control,
            cgroup,
            names,
            sources,
            parents,
            null: [0, 1, 2].map(|i| open_null(i).ok()),
            ahead,
            filter,
            late_filter: None,
            net_log,
            layers,
        })
    }

    /// Whether a PID 1 prepared ahead still matches the host: every bind
    /// and `file` source resolves, with the same rules, to the object it
    /// resolved to then (a copied file also to the same content), else a
    /// fresh PID 1 is built (and reports what no longer resolves).
    fn still_fresh(&self, p: &Prepared) -> bool {
        crate::plan::mounts::sources_unchanged(&p.sources, &p.parents, sys::geteuid())
    }

    /// Writes the run's half into the arena and its limits into its cgroup.
    fn fill(&self, p: &mut Prepared, spec: &RunSpec) -> Result<Filled, String> {
        let c = |s: &str| CString::new(s).expect("validated: no NUL");
        let mut env = spec.env.clone();
        for k in &spec.keep_env {
            if let Ok(v) = std::env::var(k) {
                env.entry(k.clone()).or_insert(v);
            }
        }
        let path_var = env.get("PATH").cloned();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        // PATH lookup happens in the sandbox's view: only the candidate
        // list is prepared here, the tracee tries them in order.
        let prog = &spec.argv[0];
        let exec_paths: Vec<CString> = if prog.contains('/') {
            vec![c(prog)]
        } else {
            path_var
                .as_deref()
                .unwrap_or(DEFAULT_PATH)
                .split(':')
                .map(|d| if d.is_empty() { "." } else { d })
                .map(|d| c(&format!("{}/{prog}", d.trim_end_matches('/'))))
                .collect()
        };
        p.names[EXEC_NAME as usize] = if prog.contains('/') {
            prog.clone()
        } else {
            format!("{prog}` (searched PATH={}", path_var.as_deref().unwrap_or(DEFAULT_PATH))
        };
        let cwd = spec.cwd.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "/".into());
        p.names[CWD_NAME as usize] = cwd.clone();
        let rl = rlimits::prepare(&spec.limits, p.cgroup.is_some());
        let raw: Vec<RawRlimit> = rlimits::raw(&rl);
        let late_filter = p.late_filter.take();
        let a = p.arena();
        let too_big = |_| {
            format!(
                "the run's argv and environment do not fit in {} MiB (execve's own limit is a quarter of the stack limit)",
                ARENA_SIZE >> 20
            )
        };
        let ptrs = |v: &[CString]| -> Result<u64, String> {
            let mut list = Vec::with_capacity(v.len() + 1);
            for s in v {
                list.push(a.put_cstr(s).map_err(too_big)?);
            }
            list.push(std::ptr::null());
            a.put_ptrs(&list).map(|p| p as u64).map_err(too_big)
        };
        let argv: Vec<CString> = spec.argv.iter().map(|s| c(s)).collect();
        let envp: Vec<CString> = env.iter().map(|(k, v)| c(&format!("{k}={v}"))).collect();
        a.go_argv.store(ptrs(&argv)?, SeqCst);
        a.go_envp.store(ptrs(&envp)?, SeqCst);
        let mut path_ptrs = Vec::with_capacity(exec_paths.len());
        for s in &exec_paths {
            path_ptrs.push(a.put_cstr(s).map_err(too_big)? as u64);
        }
        a.go_exec_paths.store(a.put_slice(&path_ptrs).map_err(too_big)? as u64, SeqCst);
        a.go_exec_paths_len.store(path_ptrs.len() as u64, SeqCst);
        a.go_cwd.store(a.put_cstr(&c(&cwd)).map_err(too_big)? as u64, SeqCst);
        a.go_cwd_fallback.store(spec.cwd_fallback as u32, SeqCst);
        a.go_controlling_tty.store(spec.controlling_tty as u32, SeqCst);
        a.go_rlimits.store(a.put_slice(&raw).map_err(too_big)? as u64, SeqCst);
        a.go_rlimits_len.store(raw.len() as u64, SeqCst);
        let wall = spec.limits.wall_time.map(|d| d.as_nanos().min(u64::MAX as u128) as u64);
        let cpu = spec.limits.cpu_time.map(|d| d.as_nanos().min(u64::MAX as u128) as u64);
        a.go_wall_time_ns.store(wall.unwrap_or(0), SeqCst);
        a.go_cpu_time_ns.store(cpu.unwrap_or(0), SeqCst);
        a.go_parallelism.store(parallelism(self.cpus, &spec.limits), SeqCst);
        if let Some(f) = late_filter {
            let program = f.map.as_slice::<libc::sock_filter>();
            a.go_filter.store(a.put_slice(program).map_err(too_big)? as u64, SeqCst);
            a.go_filter_len.store(program.len() as u64, SeqCst);
            a.go_filter_notify.store(f.notify as u32, SeqCst);
            a.go_filter_net_log_from.store(f.net_log_from, SeqCst);
        }
        if let Some(cg) = &p.cgroup {
            cg.apply(&spec.limits).map_err(|e| format!("setting the run's cgroup limits: {e}"))?;
        }
        std::sync::atomic::fence(SeqCst);
        Ok(Filled { rlimits: rl, wall_time_ns: wall, cpu_time_ns: cpu })
    }

    fn result(&self, r: &Running, pid1_status: Option<i32>, stats: Option<Stats>) -> RunResult {
        let shared: &Shared = r.p.arena();
        if let Some(f) = shared.failure() {
            return RunResult::error(describe_failure(&r.rlimits, &r.p.names, f.step, f.errno, f.path));
        }
        let flags = shared.flags.load(SeqCst);
        if flags & FLAG_TRACEE_REAPED == 0 {
            let how = match pid1_status {
                Some(st) if libc::WIFSIGNALED(st) => format!("killed by {}", signal_name(libc::WTERMSIG(st))),
                Some(st) => format!("exit status {}", libc::WEXITSTATUS(st)),
                None => "no status".into(),
            };
            return RunResult::error(format!("the run's PID 1 ended before the program did ({how})"));
        }
        let st = shared.wait_status.load(SeqCst);
        let exec_ns = shared.exec_ns.load(SeqCst);
        let end_ns = shared.end_ns.load(SeqCst);
        let mut res = RunResult {
            status: Status::Exited,
            exit_code: None,
            signal: None,
            // Milliseconds with microsecond precision.
            wall_time_ms: (end_ns.saturating_sub(exec_ns) / 1000) as f64 / 1e3,
            // rusage of everything PID 1 reaped, less the tracee's own
            // set-up before its execve (the same process as the program).
            cpu_user_ms: shared.cpu_user_us.load(SeqCst).saturating_sub(shared.setup_user_us.load(SeqCst)) as f64 / 1e3,
            cpu_system_ms: shared.cpu_system_us.load(SeqCst).saturating_sub(shared.setup_system_us.load(SeqCst)) as f64
                / 1e3,
            peak_memory_bytes: shared.max_rss_kib.load(SeqCst) * 1024,
            accounting: Accounting::Rusage,
            pids_peak: None,
            killed_by_limit: false,
            error: None,
            stdout: None,
            stderr: None,
            syscall: None,
            syscall_args: None,
            landlock: crate::proto::result::Enforcement::from_u32(shared.landlock.load(SeqCst)),
            net_log: None,
            net_log_dropped: None,
        };
        if let Some(log) = &r.p.net_log {
            let (entries, dropped) = log.entries();
            res.net_log = Some(entries);
            res.net_log_dropped = (dropped > 0).then_some(dropped);
        }
        if let Some(st) = &stats {
            // From the program's cgroup, counted from its execve.
            let at_exec = shared.cgroup_cpu_us_at_exec.load(SeqCst);
            let total = st.user_us + st.system_us;
            // cpu.stat splits user/system by tick sampling; the total is exact.
            let system = st.system_us.min(total.saturating_sub(at_exec));
            let user = total.saturating_sub(at_exec).saturating_sub(system);
            res.cpu_user_ms = user as f64 / 1e3;
            res.cpu_system_ms = system as f64 / 1e3;
            if let Some(peak) = st.memory_peak {
                res.peak_memory_bytes = peak;
            }
            res.pids_peak = st.pids_peak;
            res.accounting = Accounting::Cgroup;
        }
        if libc::WIFEXITED(st) {
            res.exit_code = Some(libc::WEXITSTATUS(st));
        } else if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            res.status = Status::Signaled;
            res.signal = Some(signal_name(sig));
            if sig == libc::SIGXFSZ {
                res.status = Status::OutputLimit;
            }
        }
        let succeeded = res.status == Status::Exited && res.exit_code == Some(0);
        if flags & FLAG_OUTPUT_LIMIT != 0 && !succeeded {
            // The program, or an orphan PID 1 reaped, wrote past the limit
            // and the run did not succeed anyway.
            res.status = Status::OutputLimit;
        }
        if let Some(st) = &stats {
            // MLE, not "signal 9": an OOM kill, or any failure of a run that
            // hit its memory limit (a SIGSEGV after a failed allocation).
            if st.oom_kills > 0 || (st.memory_max_events > 0 && !succeeded) {
                res.status = Status::MemoryLimit;
            }
        } else if r.cpu_time_ns.is_some() && res.signal.as_deref() == Some("SIGXCPU") {
            // Degraded mode: RLIMIT_CPU sent SIGXCPU at the limit.
            res.status = Status::CpuTimeLimit;
        }
        if flags & FLAG_CPU_TIME != 0 {
            res.status = Status::CpuTimeLimit;
        }
        if flags & FLAG_WALL_TIME != 0 {
            res.status = Status::WallTimeLimit;
            if let Some(limit) = r.wall_time_ns {
                // The program ran for the whole limit at least.
                res.wall_time_ms = res.wall_time_ms.max((limit / 1000) as f64 / 1e3);
            }
        }
        if flags & FLAG_FORBIDDEN != 0 {
            // PID 1 killed the run at a call the policy forbids.
            res.status = Status::ForbiddenSyscall;
            res.exit_code = None;
            res.signal = None;
            let nr = shared.forbidden_nr.load(SeqCst);
            res.syscall = Some(crate::plan::seccomp::syscall_name(shared.forbidden_arch.load(SeqCst), nr));
            res.syscall_args = Some(shared.forbidden_args.iter().map(|a| a.load(SeqCst)).collect());
        }
        if flags & FLAG_KILLED != 0 {
            res.status = Status::Killed;
        }
        if r.output_over {
            // Killed by the supervisor for writing past the output limit
            // into a write-once output.
            res.status = Status::OutputLimit;
        }
        res.killed_by_limit = matches!(
            res.status,
            Status::WallTimeLimit | Status::CpuTimeLimit | Status::MemoryLimit | Status::OutputLimit
        );
        res
    }
}

/// The seccomp filters of a supervisor: each policy is compiled once (a
/// policy file again only when it changed) into a sealed memfd that the
/// supervisor maps read-only; every PID 1 created after that sees the
/// mapping, and its tracee installs the filter straight from it (the
/// thesis's "seccomp filter as file descriptor": no copy per run, and the
/// request carries only the policy's name).
#[derive(Default)]
struct Filters {
    compiled: Vec<(FilterKey, Option<FileStamp>, Rc<SealedFilter>)>,
}

/// Policy, the run's guards, with the network log.
type FilterKey = (PolicyName, Guards, bool);

/// What identifies a version of a policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Filters {
    /// The filter of `spec`'s policy with its guards (`seccomp::with_guards`)
    /// and, when `net_log`, the network log (`seccomp::with_net_log`),
    /// compiled on first use.
    fn get(&mut self, spec: &RunSpec) -> Result<Rc<SealedFilter>, String> {
        let (name, guards) = (&spec.seccomp, Guards::of(spec));
        let stamp = Self::stamp(name)?;
        match self.find(name, guards, spec.net_log, stamp) {
            Some(f) => Ok(f),
            None => self.compile(name, guards, spec.net_log, stamp),
        }
    }

    /// The filter of `spec` if it is compiled already (and, for a policy
    /// file, the file has not changed since).
    fn compiled(&self, spec: &RunSpec) -> Result<Option<Rc<SealedFilter>>, String> {
        Ok(self.find(&spec.seccomp, Guards::of(spec), spec.net_log, Self::stamp(&spec.seccomp)?))
    }

    fn find(
        &self,
        name: &PolicyName,
        guards: Guards,
        net_log: bool,
        stamp: Option<FileStamp>,
    ) -> Option<Rc<SealedFilter>> {
        self.compiled
            .iter()
            .find(|((n, g, l), s, _)| n == name && *g == guards && *l == net_log && *s == stamp)
            .map(|c| c.2.clone())
    }

    /// What identifies the version of a policy file (None: a built-in).
    fn stamp(name: &PolicyName) -> Result<Option<FileStamp>, String> {
        Ok(match name {
            PolicyName::File(path) => {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::metadata(path).map_err(|e| format!("seccomp policy file {}: {e}", path.display()))?;
                Some(FileStamp {
                    dev: m.dev(),
                    ino: m.ino(),
                    size: m.size(),
                    mtime: (m.mtime(), m.mtime_nsec()),
                    ctime: (m.ctime(), m.ctime_nsec()),
                })
            }
            _ => None,
        })
    }

    /// Compiles policy `name` (replacing an older version of its file).
    fn compile(
        &mut self,
        name: &PolicyName,
        guards: Guards,
        net_log: bool,
        stamp: Option<FileStamp>,
    ) -> Result<Rc<SealedFilter>, String> {
        let mut filter: Filter = crate::plan::seccomp::compile(name).map_err(|e| e.to_string())?;
        filter =
            crate::plan::seccomp::with_guards(&filter, guards).map_err(|e| format!("seccomp policy {name}: {e}"))?;
        if net_log {
            filter = crate::plan::seccomp::with_net_log(&filter).map_err(|e| format!("seccomp policy {name}: {e}"))?;
        }
        let map = sys::SealedMap::new(c"capsule-seccomp", &filter.program)
            .map_err(|e| SysError::new("memfd_create (seccomp filter)", e).to_string())?;
        // A changed file replaces its old version (runs prepared with the
        // old one are no longer used: see `start`).
        self.compiled.retain(|((n, g, l), _, _)| !(n == name && *g == guards && *l == net_log));
        let early = crate::plan::seccomp::allows_tracee_epilogue(&filter.program);
        let sealed = Rc::new(SealedFilter { map, notify: filter.notify, net_log_from: filter.net_log_from, early });
        self.compiled.push(((name.clone(), guards, net_log), stamp, sealed.clone()));
        Ok(sealed)
    }
}

/// How long after a run's go message the next spare may be prepared.
/// Preparing it at once competed with the program's start: the tracee,
/// woken on the supervisor's CPU, preempted the supervisor in the middle
/// of creating it, which then waited for the whole program, and the
/// spare's build ran during the result's way back. 200 µs later the
/// program has started, usually on the other CPU. Interleaved A/B on the
/// 2-CPU development machine (PID 1 still forked then), `/bin/true`
/// through one client: back to back 1.09 → 1.05 ms, 2 ms apart 1.22 →
/// 1.13 ms (400 µs: no better than none). Where the program and the
/// build land is measured in docs/latency.md (stop 17).
const SPARE_DELAY: std::time::Duration = std::time::Duration::from_micros(200);

/// The event loop's state.
struct Loop {
    conns: Vec<Option<Conn>>,
    listener: Option<OwnedFd>,
    signals: Option<OwnedFd>,
    once: bool,
    /// A per-user agent's life (`Mode::Agent`).
    agent: Option<AgentLife>,
    /// What the listener's peers must look like (`Mode::Listen`).
    peer: Option<String>,
    /// When the agent last had nothing to do.
    idle_since: std::time::Instant,
    answered: usize,
    queue: VecDeque<Request>,
    running: Vec<Running>,
    /// PID 1s prepared ahead, idle.
    spares: Vec<Prepared>,
    /// PID 1s whose result went out: reaped (and their cgroups removed)
    /// once they have finished exiting.
    zombies: Vec<Prepared>,
    /// The shape of the last request: spares are prepared for it.
    last_shape: Option<(Box<RunSpec>, Shape)>,
    /// Interactive runs in flight.
    pairs: Vec<Pair>,
    next_pair: u64,
    /// Wake-ups of the event loop so far (orders what relays see).
    round: u64,
    /// No spare is prepared before then: a run's program has just been
    /// given its go message (see `keep_spares`).
    spares_from: Option<std::time::Instant>,
    stop: bool,
}

impl Loop {
    fn run(&mut self, sup: &mut Supervisor) {
        loop {
            self.schedule(sup);
            if self.finished() {
                return;
            }
            let (mut pfds, tokens) = self.poll_set();
            let timeout = self.idle_timeout();
            let mut wait = (timeout >= 0).then(|| std::time::Duration::from_millis(timeout as u64));
            if let Some(from) = self.spares_from {
                let left = from.saturating_duration_since(std::time::Instant::now());
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            match sys::ppoll(&mut pfds, wait) {
                Ok(0) if self.spares_from.is_some() => continue,
                Ok(0) if timeout >= 0 => {
                    // An agent idle for its whole idle time.
                    if self.idle_timeout() == 0 {
                        self.retire();
                    }
                    continue;
                }
                Ok(_) => {}
                Err(libc::EINTR) => continue,
                Err(_) => return,
            }
            self.round += 1;
            for (pfd, token) in pfds.iter().zip(tokens) {
                if pfd.revents != 0 {
                    self.event(sup, token, pfd.revents);
                }
            }
        }
    }

    /// An agent with no client and no run: milliseconds until it has been
    /// idle for its idle time (0: it has); -1 for anything else (busy, or
    /// not an agent, or retired already).
    fn idle_timeout(&mut self) -> i32 {
        let Some(life) = &self.agent else { return -1 };
        if self.listener.is_none() {
            return -1;
        }
        let busy = self.conns.iter().flatten().any(|c| !c.gone) || !self.running.is_empty() || !self.queue.is_empty();
        if busy {
            self.idle_since = std::time::Instant::now();
            return -1;
        }
        let left = life.idle.saturating_sub(self.idle_since.elapsed());
        // Rounded up: a wake-up a little early would only poll again.
        left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
    }

    /// An agent stops taking requests: its socket goes (if still its own),
    /// so the next `capsule run` starts a new agent; what runs finishes.
    fn retire(&mut self) {
        if let (Some(life), Some(_)) = (&mut self.agent, self.listener.take()) {
            life.give_up();
        }
    }

    /// Nothing left to do.
    fn finished(&self) -> bool {
        if self.stop || (self.once && self.answered > 0) {
            return true;
        }
        let clients = self.conns.iter().flatten().any(|c| !(c.gone || c.eof && c.finish_at_eof));
        let pending = !self.running.is_empty() || !self.queue.is_empty();
        let unsent = self.conns.iter().flatten().any(|c| !c.gone && !c.out.is_empty());
        self.listener.is_none() && !clients && !pending && !unsent
    }

    fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<Token>) {
        let mut pfds = Vec::new();
        let mut tokens = Vec::new();
        let mut add = |fd: RawFd, events: i16, t: Token| {
            pfds.push(libc::pollfd { fd, events, revents: 0 });
            tokens.push(t);
        };
        if let Some(l) = &self.listener {
            add(l.as_raw_fd(), libc::POLLIN, Token::Listener);
        }
        if let Some(s) = &self.signals {
            add(s.as_raw_fd(), libc::POLLIN, Token::Signals);
        }
        if let (Some(fd), true) = (self.agent.as_ref().and_then(|a| a.host_mounts.as_ref()), self.listener.is_some()) {
            add(fd.as_raw_fd(), libc::POLLPRI, Token::HostMounts);
        }
        for (i, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.gone {
                continue;
            }
            if !c.eof {
                add(c.read.as_raw_fd(), libc::POLLIN, Token::ConnRead(i));
            }
            if !c.out.is_empty() {
                add(c.wfd(), libc::POLLOUT, Token::ConnWrite(i));
            } else if c.write.is_some() {
                // stdout closing (the client went away) shows as POLLERR.
                add(c.wfd(), 0, Token::ConnWrite(i));
            }
        }
        for (i, r) in self.running.iter().enumerate() {
            add(r.p.done.as_raw_fd(), libc::POLLIN, Token::Run(i));
            add(r.p.pidfd.as_raw_fd(), libc::POLLIN, Token::Run(i));
            for (k, cap) in r.io.capture.iter().enumerate() {
                if let Some(cap) = cap {
                    if !cap.eof {
                        add(cap.fd(), libc::POLLIN, Token::Capture(i, k));
                    }
                }
            }
            for (k, c) in r.io.collect.iter().enumerate() {
                if let Some(c) = c {
                    if !c.eof && !c.over {
                        add(c.fd(), libc::POLLIN, Token::Collect(i, k));
                    }
                }
            }
            if let Some(fd) = r.io.feed.as_ref().and_then(Feed::fd) {
                add(fd, libc::POLLOUT, Token::Feed(i));
            }
        }
        for (i, pair) in self.pairs.iter().enumerate() {
            for (fd, events, d, to_end) in pair.relay.poll_entries() {
                add(fd, events, Token::Relay(i, d, to_end));
            }
        }
        for (i, s) in self.spares.iter().enumerate() {
            add(s.pidfd.as_raw_fd(), libc::POLLIN, Token::Spare(i));
        }
        for (i, z) in self.zombies.iter().enumerate() {
            add(z.pidfd.as_raw_fd(), libc::POLLIN, Token::Zombie(i));
        }
        (pfds, tokens)
    }

    /// Handles one ready descriptor. Indices refer to the poll set's
    /// snapshot: entries are only marked here, removed in `schedule`.
    fn event(&mut self, sup: &mut Supervisor, token: Token, revents: i16) {
        match token {
            Token::Listener => self.accept(),
            Token::HostMounts => self.retire(),
            Token::Signals => self.stop = true,
            Token::ConnRead(i) => self.read_conn(sup, i),
            Token::ConnWrite(i) => {
                if revents & (libc::POLLERR | libc::POLLHUP) != 0 && revents & libc::POLLOUT == 0 {
                    self.drop_conn(i);
                } else {
                    self.flush(i);
                }
            }
            Token::Capture(i, k) => {
                if let Some(Some(cap)) = self.running.get_mut(i).map(|r| r.io.capture[k].as_mut()) {
                    cap.pump();
                }
            }
            Token::Feed(i) => {
                if let Some(feed) = self.running.get_mut(i).and_then(|r| r.io.feed.as_mut()) {
                    feed.pump();
                }
            }
            Token::Collect(i, k) => {
                if let Some(r) = self.running.get_mut(i) {
                    if let Some(c) = r.io.collect[k].as_mut() {
                        c.pump();
                        if c.over && !r.output_over {
                            // One byte past the limit: the file holds
                            // exactly the limit; the run ends here.
                            r.output_over = true;
                            sys::eventfd_signal(r.p.control.as_raw_fd());
                        }
                    }
                }
            }
            Token::Relay(i, d, to_end) => {
                let round = self.round;
                if let Some(pair) = self.pairs.get_mut(i) {
                    pair.relay.event(d, to_end, revents, round);
                }
            }
            // Marked here, looked at by `schedule`: only what poll reported
            // costs a syscall there.
            // (Indices hold: nothing is removed before `schedule`.)
            Token::Run(i) => self.running.get_mut(i).into_iter().for_each(|r| r.p.signalled = true),
            Token::Spare(i) => self.spares.get_mut(i).into_iter().for_each(|s| s.signalled = true),
            Token::Zombie(i) => self.zombies.get_mut(i).into_iter().for_each(|z| z.signalled = true),
        }
    }

    /// Starts queued requests, collects finished runs, keeps the spares.
    fn schedule(&mut self, sup: &mut Supervisor) {
        self.collect(sup);
        while let Some(front) = self.queue.front() {
            match front.pair {
                // The interactor starts right after its solution, whatever
                // the count: the two talk to each other.
                Some((_, Side::Interactor)) => {}
                // A pair needs two slots (or all of them, when there are
                // fewer).
                Some((_, Side::Solution))
                    if self.running.len() + 2 > sup.config.parallel && !self.running.is_empty() =>
                {
                    break
                }
                _ if self.running.len() >= sup.config.parallel => break,
                _ => {}
            }
            let req = self.queue.pop_front().expect("present");
            self.start(sup, req);
        }
        // Interactive runs whose client is gone and whose programs are too.
        let (running, queue) = (&self.running, &self.queue);
        self.pairs.retain(|p| {
            let part = |pair: Option<(u64, Side)>| pair.is_some_and(|(id, _)| id == p.id);
            !p.cancelled || running.iter().any(|r| part(r.req.pair)) || queue.iter().any(|q| part(q.pair))
        });
        self.reap_spares_and_zombies();
        self.keep_spares(sup);
    }

    /// Starts one request, or answers it with an error.
    fn start(&mut self, sup: &mut Supervisor, mut req: Request) {
        let shape = sup.shape(&req.spec);
        // The policy as it is now (a policy file may have changed since a
        // spare was prepared with it).
        let filter = match sup.filters.compiled(&req.spec) {
            Ok(f) => f,
            Err(msg) => return self.reply(req, RunResult::error(msg)),
        };
        // A spare of this shape that still matches the host, else a fresh
        // one. Not for a program of an interactive run: its stdio is sent
        // once and cannot be sent again to a retry.
        let mut p = None;
        while let Some(i) = self.spares.iter().position(|s| s.shape == shape && req.pair.is_none()) {
            let s = self.spares.swap_remove(i);
            let same_filter = matches!((&s.filter, &filter), (Some(a), Some(b)) if Rc::ptr_eq(a, b));
            if same_filter && sup.still_fresh(&s) && !exited(&s) {
                p = Some(s);
                break;
            }
            kill_prepared(&s);
            self.zombies.push(s);
        }
        // Runs to come are prepared like this one (kept only when the shape
        // changes: no copy of the spec per request).
        if sup.config.prepare_ahead
            && !self.once
            && req.pair.is_none()
            && self.last_shape.as_ref().is_none_or(|(_, s)| *s != shape)
        {
            self.last_shape = Some((req.spec.clone(), shape.clone()));
        }
        let mut p = match p {
            Some(p) => p,
            None => match sup.prepare(&req.spec, shape, filter.clone(), false) {
                Ok(p) => p,
                Err(msg) => return self.reply(req, RunResult::error(msg)),
            },
        };
        // A policy not compiled yet (a one-shot run, or the first of its
        // policy) is compiled now, while the fresh PID 1 builds the sandbox
        // on another CPU; `go` copies it into the arena.
        if filter.is_none() {
            if let Err(msg) = sup.filters.get(&req.spec).map(|f| p.late_filter = Some(f)) {
                kill_prepared(&p);
                self.zombies.push(p);
                return self.reply(req, RunResult::error(msg));
            }
        }
        match self.go(sup, &mut p, &req) {
            Ok((f, io)) => {
                if sup.config.prepare_ahead && !self.once {
                    self.spares_from = Some(std::time::Instant::now() + SPARE_DELAY);
                }
                if req.pair.is_some() {
                    // The relay must be the only holder of the other ends:
                    // the supervisor keeps none of the program's.
                    req.stdio = [None, None, None];
                }
                self.running.push(Running {
                    p,
                    req,
                    rlimits: f.rlimits,
                    wall_time_ns: f.wall_time_ns,
                    cpu_time_ns: f.cpu_time_ns,
                    io,
                    output_over: false,
                    cancelled: false,
                })
            }
            Err(msg) => {
                kill_prepared(&p);
                self.zombies.push(p);
                self.reply(req, RunResult::error(msg));
            }
        }
    }

    /// Answers a request that ended before its run started (or, for a
    /// program of an interactive run, hands the result to its pair).
    fn reply(&mut self, mut req: Request, result: RunResult) {
        match req.pair {
            Some((pair, side)) => self.pair_result(pair, side, result, 0),
            None => self.answer(req.conn, &req.cid, &result, req.notify.take()),
        }
    }

    /// Queues the two programs of an interactive run.
    fn enqueue_pair(
        &mut self,
        sup: &mut Supervisor,
        conn: usize,
        cid: ClientId,
        spec: InteractSpec,
        stderr: [Option<OwnedFd>; 2],
        notify: Option<OwnedFd>,
    ) {
        let checked = spec
            .validate()
            .map_err(|e| e.to_string())
            .and_then(|()| sup.check_request(&spec.solution).map_err(|e| format!("solution: {e}")))
            .and_then(|()| sup.check_request(&spec.interactor).map_err(|e| format!("interactor: {e}")))
            .and_then(|()| Relay::new());
        let (relay, sol, int) = match checked {
            Ok(x) => x,
            Err(msg) => return self.answer(conn, &cid, &RunResult::error(msg), notify),
        };
        let id = self.next_pair;
        self.next_pair += 1;
        self.pairs.push(Pair { id, conn, cid: cid.clone(), notify, relay, results: [None, None], cancelled: false });
        let InteractSpec { solution, interactor } = spec;
        let [sol_err, int_err] = stderr;
        let parts = [(Side::Solution, solution, sol, sol_err), (Side::Interactor, interactor, int, int_err)];
        for (side, spec, (stdin, stdout), stderr) in parts {
            self.queue.push_back(Request {
                conn,
                cid: cid.clone(),
                spec: Box::new(spec),
                stdio: [Some(stdin), Some(stdout), stderr],
                notify: None,
                retried: false,
                pair: Some((id, side)),
            });
        }
    }

    /// One program of an interactive run ended (`end`: its end time), or
    /// could not start; answers once both are in.
    fn pair_result(&mut self, pair: u64, side: Side, result: RunResult, end: u64) {
        let Some(k) = self.pairs.iter().position(|p| p.id == pair) else { return };
        let failed = result.status == Status::Error;
        self.pairs[k].results[side_index(side)] = Some((result, end));
        if failed {
            // The other must not wait for a partner that never came.
            let why = RunResult::error("the other program of the interactive run could not start");
            self.stop_pair_side(pair, other(side), why);
        }
        let Some(k) = self.pairs.iter().position(|p| p.id == pair) else { return };
        if self.pairs[k].results.iter().any(Option::is_none) {
            return;
        }
        let mut p = self.pairs.swap_remove(k);
        if p.cancelled {
            return;
        }
        let [Some((sol, sol_end)), Some((int, int_end))] = std::mem::take(&mut p.results) else { unreachable!() };
        for (name, r) in [("solution", &sol), ("interactor", &int)] {
            if r.status == Status::Error {
                let msg = format!("{name}: {}", r.error.as_deref().unwrap_or("failed"));
                return self.answer(p.conn, &p.cid, &RunResult::error(msg), p.notify.take());
            }
        }
        let sigpipe = |r: &RunResult| r.status == Status::Signaled && r.signal.as_deref() == Some("SIGPIPE");
        let first_to_exit = p.relay.first_to_exit(self.round, [sol_end, int_end], [sigpipe(&sol), sigpipe(&int)]);
        let result = InteractResult { first_to_exit, solution: sol, interactor: int };
        self.answer_pair(p.conn, &p.cid, &result, p.notify.take());
    }

    /// Stops one program of a pair: killed if running; if still queued,
    /// dropped with `instead` as its result.
    fn stop_pair_side(&mut self, pair: u64, side: Side, instead: RunResult) {
        if let Some(k) = self.queue.iter().position(|q| q.pair == Some((pair, side))) {
            let req = self.queue.remove(k).expect("present");
            self.reply(req, instead);
        } else if let Some(r) = self.running.iter().find(|r| r.req.pair == Some((pair, side))) {
            sys::eventfd_signal(r.p.control.as_raw_fd());
        }
    }

    /// Fills the arena and sends the go message with the run's stdio.
    fn go(&mut self, sup: &mut Supervisor, p: &mut Prepared, req: &Request) -> Result<(Filled, Streams), String> {
        let filled = sup.fill(p, &req.spec)?;
        let mut io = Streams::default();
        let mut held: Vec<OwnedFd> = Vec::new();
        let mut fds = [-1; 3];
        let specs = [&req.spec.stdin, &req.spec.stdout, &req.spec.stderr];
        for i in 0..3 {
            if let Some(fd) = &req.stdio[i] {
                fds[i] = fd.as_raw_fd();
                continue;
            }
            let fd = match specs[i] {
                Some(Stdio::Path(path)) => open_stdio(path, i == 0, false)?,
                Some(Stdio::Capture(c)) => {
                    let (cap, w) = Capture::new(c.capture)?;
                    io.capture[i - 1] = Some(cap);
                    w
                }
                Some(Stdio::Pipe(PipeFile { pipe })) if i == 0 => {
                    let (feed, r) = Feed::new(open_stdio(pipe, true, true)?)?;
                    io.feed = Some(feed);
                    r
                }
                Some(Stdio::Pipe(PipeFile { pipe })) => {
                    let (c, w) = Collect::new(open_stdio(pipe, false, true)?, req.spec.limits.output_limit)?;
                    io.collect[i - 1] = Some(c);
                    w
                }
                None => match p.null[i].take() {
                    Some(fd) => fd,
                    None => open_null(i)?,
                },
            };
            fds[i] = fd.as_raw_fd();
            held.push(fd);
        }
        // If this fails, the tracee is gone: PID 1 failed while building the
        // sandbox (its reason is in the arena) or was killed; the run is
        // collected like any other and reports why.
        let _ = sys::send_with_fds(p.go.as_raw_fd(), b"g", &fds);
        Ok((filled, io))
    }

    /// Collects runs whose PID 1 signalled the result or died.
    fn collect(&mut self, sup: &mut Supervisor) {
        let mut i = 0;
        while i < self.running.len() {
            if !std::mem::take(&mut self.running[i].p.signalled) {
                i += 1;
                continue;
            }
            let r = &self.running[i];
            // One byte when the result is in; end of file if PID 1 died.
            let done = matches!(sys::read(r.p.done.as_raw_fd(), &mut [0u8; 8]), Ok(n) if n > 0);
            let dead = !done && exited(&r.p);
            if !done && !dead {
                i += 1;
                continue;
            }
            let mut r = self.running.swap_remove(i);
            let status = if dead {
                // A last look: the result may have been signalled just before.
                let _ = sys::read(r.p.done.as_raw_fd(), &mut [0u8; 8]);
                r.p.reap()
            } else {
                None
            };
            let flags = r.p.arena().flags.load(SeqCst);
            // Failed before its go message: the sandbox was built ahead and
            // the host changed since (or a transient failure); try once
            // more on a fresh one, whose outcome stands.
            if dead
                && flags & FLAG_GO == 0
                && r.p.arena().failure().is_some()
                && r.p.ahead
                && !r.req.retried
                && !r.cancelled
            {
                r.req.retried = true;
                self.zombies.push(r.p);
                self.queue.push_front(r.req);
                continue;
            }
            let stats = r.p.cgroup.as_ref().map(RunCgroup::stats);
            let mut result = sup.result(&r, status, stats);
            for (k, cap) in r.io.capture.iter_mut().enumerate() {
                if let Some(cap) = cap.take() {
                    let c = cap.finish();
                    if k == 0 {
                        result.stdout = Some(c);
                    } else {
                        result.stderr = Some(c);
                    }
                }
            }
            if let Some(e) = r.io.feed.take().and_then(|f| f.error) {
                result.error.get_or_insert(e);
            }
            for c in r.io.collect.iter_mut() {
                let Some(mut c) = c.take() else { continue };
                c.finish();
                if c.over && result.status != Status::Error {
                    // Past the limit just before the end (not killed for it
                    // in time): still the output limit.
                    result.status = Status::OutputLimit;
                    result.killed_by_limit = true;
                }
                if let Some(e) = c.error {
                    result.error.get_or_insert(e);
                }
            }
            if self.once {
                // The one-shot client exits on the result: leave no cgroup
                // behind (the run's, then the supervisor's own share).
                if let Some(cg) = r.p.cgroup.take() {
                    if !cg.try_remove() {
                        r.p.cgroup = Some(cg);
                    }
                }
                if r.p.cgroup.is_none() {
                    sup.cgroups = None;
                }
            }
            if let Some(layers) = r.p.layers.take() {
                // The layer is consistent only once the run's mounts are
                // gone: wait for PID 1 (it exits right after its result),
                // then record what the changed paths were based on, then
                // let the next run or `capsule layer` have it.
                if !wait_gone(&r.p) {
                    result.error.get_or_insert_with(|| "layer: the run's PID 1 did not exit".into());
                }
                match crate::plan::overlay::after_run(&layers) {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => {
                        result.error.get_or_insert(e);
                    }
                }
                drop(layers);
            }
            if let Some((pair, side)) = r.req.pair {
                let end = r.p.arena().end_ns.load(SeqCst);
                self.pair_result(pair, side, result, end);
            } else if !r.cancelled {
                self.answer(r.req.conn, &r.req.cid, &result, r.req.notify.take());
            }
            self.zombies.push(r.p);
        }
    }

    fn reap_spares_and_zombies(&mut self) {
        self.spares.retain_mut(|s| {
            if std::mem::take(&mut s.signalled) && exited(s) {
                s.reap();
                if let Some(cg) = &s.cgroup {
                    cg.try_remove();
                }
                false
            } else {
                true
            }
        });
        self.zombies.retain_mut(|z| {
            if !std::mem::take(&mut z.signalled) || !exited(z) {
                return true;
            }
            z.reap();
            if let Some(cg) = z.cgroup.take() {
                if !cg.try_remove() {
                    cg.remove();
                }
            }
            false
        });
    }

    /// Keeps up to `parallel` PID 1s prepared for the last request's shape.
    fn keep_spares(&mut self, sup: &mut Supervisor) {
        // (Cleared first, whatever else returns early: the event loop
        // wakes up for it.)
        if let Some(from) = self.spares_from {
            if std::time::Instant::now() < from {
                return;
            }
            self.spares_from = None;
        }
        if !sup.config.prepare_ahead || self.once || self.stop {
            return;
        }
        let Some((_, shape)) = &self.last_shape else { return };
        if !shape.layers.is_empty() {
            return;
        }
        // Spares of another shape are of no use any more.
        let mut k = 0;
        while k < self.spares.len() {
            if self.spares[k].shape != *shape {
                let s = self.spares.swap_remove(k);
                kill_prepared(&s);
                self.zombies.push(s);
            } else {
                k += 1;
            }
        }
        // Only when no request waits: a queued request needs the CPU first.
        // An agent prepares only when no run is in flight (building a
        // sandbox meanwhile took CPU from the run: ~0.2 ms of a 2-CPU
        // machine's `/bin/true` run), and keeps two: its clients come one
        // run at a time with a gap (the next `capsule run` starting) that
        // is shorter than building a sandbox since the front end links no
        // C library, so the next run takes the older spare while the newer
        // one is still being built (one spare: 2.13 ms per back-to-back
        // `capsule run -- /bin/true`, two: 1.72 ms). Its `parallel` only
        // bounds runs at once. A retired agent prepares nothing more.
        // Other supervisors keep one more than `parallel`: a client that
        // sends its next request as soon as it has a result then finds a
        // spare ready while the next is built, which takes longer than a
        // short run since each run has a network of its own
        // (docs/benchmarks-server.md).
        let held = self.agent.is_some() && (self.listener.is_none() || !self.running.is_empty());
        let most = if self.agent.is_some() { 2 } else { sup.config.parallel + 1 };
        while !held && self.queue.is_empty() && self.spares.len() < most {
            let Some((spec, shape)) = &self.last_shape else { return };
            match sup.filters.get(spec).and_then(|f| sup.prepare(spec, shape.clone(), Some(f), true)) {
                Ok(p) => self.spares.push(p),
                Err(_) => {
                    // The next request of this shape reports the error itself.
                    self.last_shape = None;
                    break;
                }
            }
        }
    }

    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        // A failed accept (the client already gone) is nothing to act on.
        if let Ok(sock) = sys::accept(l.as_raw_fd()) {
            let conn = if let Some(life) = &self.agent {
                // The socket sits in a directory only the user can enter;
                // a peer of another uid is refused all the same, and so
                // is one in other namespaces than the agent's callers (a
                // sandboxed program, which would otherwise have its runs
                // made outside its own sandbox). Refused without a word:
                // the client then forks a supervisor of its own.
                let Ok(cred) = sys::peer_cred(sock.as_raw_fd()) else { return };
                if cred.uid != sys::getuid() || cred.pid <= 0 {
                    return;
                }
                if peer_fingerprint(cred.pid).as_ref() != Some(&life.peer) {
                    return;
                }
                // Taken: from here on a request that gets no answer was
                // not lost unseen but failed (the client may retry only
                // before this).
                if wire::send(sock.as_raw_fd(), &ServerMsg::Accepted, &[]).is_err() {
                    return;
                }
                Conn::binary(sock)
            } else {
                // `serve --listen`: the same check as an agent's, with an
                // answer (its clients are programs that want to know).
                if let Some(peer) = &self.peer {
                    let cred = sys::peer_cred(sock.as_raw_fd()).ok();
                    let same_user = cred.is_some_and(|c| c.uid == sys::getuid() && c.pid > 0);
                    if !same_user || cred.and_then(|c| peer_fingerprint(c.pid)).as_ref() != Some(peer) {
                        let why = if same_user {
                            "refused: this server takes requests only from processes like the one that started it \
                             (same user and user namespace, not in a deeper PID namespace, same no_new_privs and \
                             seccomp): a sandboxed program may not ask for runs outside its sandbox"
                        } else {
                            "refused: another user"
                        };
                        let _ = sys::write_all(sock.as_raw_fd(), &crate::proto::lines::error_line(&Value::Null, why));
                        return;
                    }
                }
                let _ = sys::set_nonblocking(sock.as_raw_fd(), true);
                Conn::new(sock, None, Framing::Lines, false)
            };
            match self.conns.iter().position(Option::is_none) {
                Some(i) => self.conns[i] = Some(conn),
                None => self.conns.push(Some(conn)),
            }
        }
    }

    fn read_conn(&mut self, sup: &mut Supervisor, i: usize) {
        let Some(conn) = self.conns[i].as_mut() else { return };
        match conn.framing {
            Framing::Binary => match wire::recv::<ClientMsg>(conn.read.as_raw_fd()) {
                Ok(Some((msg, fds))) => self.binary_message(sup, i, msg, fds),
                Ok(None) => self.drop_conn(i),
                Err(e) => {
                    // Unreadable: nothing sensible can follow on this stream.
                    let _ = e;
                    self.drop_conn(i);
                }
            },
            Framing::Lines => {
                let mut buf = vec![0u8; 64 << 10];
                match sys::read(conn.read.as_raw_fd(), &mut buf) {
                    Ok(0) => {
                        conn.eof = true;
                        if let Some(Line::Complete(line)) = conn.lines.finish() {
                            self.line(sup, i, &line);
                        }
                        if !self.conns[i].as_ref().is_some_and(|c| c.finish_at_eof) {
                            self.drop_conn(i);
                        }
                    }
                    Ok(n) => {
                        conn.lines.push(&buf[..n]);
                        // A request may drop the connection (its client gone).
                        while let Some(line) = self.conns[i].as_mut().and_then(|c| c.lines.next_line()) {
                            match line {
                                Line::Complete(line) => self.line(sup, i, &line),
                                Line::TooLong => {
                                    let msg = format!("request line longer than {} bytes", lines::MAX_LINE);
                                    self.write(i, lines::error_line(&Value::Null, &msg));
                                }
                            }
                        }
                    }
                    Err(libc::EAGAIN) => {}
                    Err(_) => self.drop_conn(i),
                }
            }
        }
    }

    fn binary_message(&mut self, sup: &mut Supervisor, conn: usize, msg: ClientMsg, fds: Vec<OwnedFd>) {
        match msg {
            ClientMsg::Run { id, spec, stdio, notify } => {
                let mut fds = fds.into_iter();
                let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
                for (k, has) in stdio.iter().enumerate() {
                    if *has {
                        slots[k] = fds.next();
                    }
                }
                let notify = if notify { fds.next() } else { None };
                let cid = ClientId::Binary(id);
                if slots.iter().zip(stdio).any(|(s, has)| has && s.is_none()) {
                    let r = RunResult::error("the request announced more descriptors than it carried");
                    self.answer(conn, &cid, &r, notify);
                    return;
                }
                self.enqueue(sup, Request { conn, cid, spec, stdio: slots, notify, retried: false, pair: None });
            }
            // Unknown ids are ignored: the run may just have ended.
            ClientMsg::Kill { id } => {
                self.control(conn, &ClientId::Binary(id), false);
            }
            ClientMsg::Cancel { id } => {
                self.control(conn, &ClientId::Binary(id), true);
            }
            ClientMsg::Interact { id, spec, stderr, notify } => {
                let mut fds = fds.into_iter();
                let stderr = stderr.map(|has| if has { fds.next() } else { None });
                let notify = if notify { fds.next() } else { None };
                self.enqueue_pair(sup, conn, ClientId::Binary(id), *spec, stderr, notify);
            }
            ClientMsg::Command { args, cwd, env } => self.command(sup, conn, &args, &cwd, &env, fds),
            ClientMsg::Start(_) => {}
        }
    }

    /// A front end's command line (agents only): planned by the `capsule`
    /// command's own parser, then run as `capsule run` would have sent it.
    fn command(
        &mut self,
        sup: &mut Supervisor,
        conn: usize,
        args: &[String],
        cwd: &str,
        env: &[String],
        fds: Vec<OwnedFd>,
    ) {
        use crate::agent::Planned;
        use crate::proto::spec::Stdio;
        let plan = match (&self.agent, crate::agent::planner()) {
            (Some(_), Some(plan)) if fds.len() == 3 => plan(args, std::path::Path::new(cwd)),
            _ => Planned::Decline,
        };
        let (mut spec, quiet) = match plan {
            // Options that choose another agent are declined by the
            // planner; a spec that still would is declined here.
            Planned::Run { spec, quiet } if spec.cgroup == sup.config.cgroup => (spec, quiet),
            Planned::Run { .. } | Planned::Decline => {
                if let Some(c) = self.conns.get(conn).and_then(Option::as_ref) {
                    if wire::send(c.read.as_raw_fd(), &ServerMsg::Declined, &[]).is_err() {
                        self.drop_conn(conn);
                    }
                }
                return;
            }
            Planned::Fail { error, quiet } => {
                return self.answer(conn, &ClientId::Command { quiet }, &RunResult::error(error), None);
            }
        };
        // The variables the run keeps are the caller's (as `client::start_once`).
        for k in std::mem::take(&mut spec.keep_env) {
            let value = env.iter().find_map(|e| {
                let (key, v) = capsule_nolibc::identity::split_env(e.as_bytes())?;
                (key == k.as_bytes()).then(|| String::from_utf8_lossy(v).into_owned())
            });
            if let Some(v) = value {
                spec.env.entry(k).or_insert(v);
            }
        }
        let cid = ClientId::Command { quiet };
        if let Err(e) = spec.validate() {
            return self.answer(conn, &cid, &RunResult::error(e.to_string()), None);
        }
        // The caller's streams, but where the supervisor carries one (a
        // capture, a read-once or write-once file).
        let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
        let own =
            [&spec.stdin, &spec.stdout, &spec.stderr].map(|io| !matches!(io, Some(Stdio::Capture(_) | Stdio::Pipe(_))));
        for (k, fd) in fds.into_iter().enumerate() {
            if own[k] {
                slots[k] = Some(fd);
            }
        }
        self.enqueue(sup, Request { conn, cid, spec, stdio: slots, notify: None, retried: false, pair: None });
    }

    fn line(&mut self, sup: &mut Supervisor, conn: usize, line: &[u8]) {
        match lines::parse_line(line) {
            Err(e) => self.write(conn, lines::error_line(&e.id, &e.message)),
            Ok(LineRequest::Run { id, spec }) => {
                let cid = ClientId::Json(id.clone());
                if self.in_flight(conn, &cid) {
                    self.write(
                        conn,
                        lines::error_line(&id, "a run with this id is still in flight on this connection"),
                    );
                    return;
                }
                self.enqueue(
                    sup,
                    Request { conn, cid, spec, stdio: [None, None, None], notify: None, retried: false, pair: None },
                );
            }
            Ok(LineRequest::Interact { id, spec }) => {
                let cid = ClientId::Json(id.clone());
                if self.in_flight(conn, &cid) {
                    self.write(
                        conn,
                        lines::error_line(&id, "a run with this id is still in flight on this connection"),
                    );
                    return;
                }
                self.enqueue_pair(sup, conn, cid, *spec, [None, None], None);
            }
            Ok(LineRequest::Cancel { id, target }) => {
                let found = self.control(conn, &ClientId::Json(target.clone()), true);
                self.write(conn, control_line(&id, &target, found));
            }
            Ok(LineRequest::Kill { id, target }) => {
                let found = self.control(conn, &ClientId::Json(target.clone()), false);
                self.write(conn, control_line(&id, &target, found));
            }
        }
    }

    fn in_flight(&self, conn: usize, cid: &ClientId) -> bool {
        self.pairs.iter().any(|p| p.conn == conn && &p.cid == cid && !p.cancelled)
            || self.queue.iter().any(|q| q.conn == conn && &q.cid == cid && q.pair.is_none())
            || self.running.iter().any(|r| r.req.conn == conn && &r.req.cid == cid && !r.cancelled)
    }

    fn enqueue(&mut self, sup: &mut Supervisor, req: Request) {
        // Validated here, so a bad request is answered at once, not when
        // its turn comes.
        if let Err(msg) = sup.check_request(&req.spec) {
            let r = RunResult::error(msg);
            self.answer(req.conn, &req.cid, &r, req.notify);
            return;
        }
        self.queue.push_back(req);
    }

    /// Kill (`cancel` false) or cancel a run of `conn`; false if there is none.
    fn control(&mut self, conn: usize, cid: &ClientId, cancel: bool) -> bool {
        if let Some(k) = self.pairs.iter().position(|p| p.conn == conn && &p.cid == cid && !p.cancelled) {
            // An interactive run: both programs.
            let pair = self.pairs[k].id;
            if cancel {
                let p = &mut self.pairs[k];
                p.cancelled = true;
                let (cid, notify) = (p.cid.clone(), p.notify.take());
                self.answer_error(conn, &cid, "cancelled", notify);
            }
            for side in [Side::Solution, Side::Interactor] {
                let mut killed = RunResult::error("");
                killed.status = Status::Killed;
                killed.error = None;
                self.stop_pair_side(pair, side, killed);
            }
            return true;
        }
        if let Some(k) = self.queue.iter().position(|q| q.conn == conn && &q.cid == cid) {
            let req = self.queue.remove(k).expect("present");
            if cancel {
                self.answer_error(req.conn, &req.cid, "cancelled", req.notify);
            } else {
                let mut r = RunResult::error("");
                r.status = Status::Killed;
                r.error = None;
                self.answer(req.conn, &req.cid, &r, req.notify);
            }
            return true;
        }
        let Some(r) = self
            .running
            .iter_mut()
            .find(|r| r.req.conn == conn && &r.req.cid == cid && !r.cancelled && r.req.pair.is_none())
        else {
            return false;
        };
        sys::eventfd_signal(r.p.control.as_raw_fd());
        if cancel {
            r.cancelled = true;
            let (conn, cid, notify) = (r.req.conn, r.req.cid.clone(), r.req.notify.take());
            self.answer_error(conn, &cid, "cancelled", notify);
        }
        true
    }

    /// Sends a run's final message; closing `notify` wakes a poller.
    fn answer(&mut self, conn: usize, cid: &ClientId, result: &RunResult, notify: Option<OwnedFd>) {
        if let ClientId::Command { quiet } = cid {
            let code = result.exit_status().clamp(0, 255) as u8;
            let exit = ServerMsg::Exit { code, stderr: result.report(*quiet) };
            self.send_final(conn, cid, |_| exit, |_| Vec::new());
            drop(notify);
            return;
        }
        self.send_final(
            conn,
            cid,
            |id| {
                if result.status == Status::Error {
                    ServerMsg::Failed { id, error: result.error.clone().unwrap_or_default() }
                } else {
                    ServerMsg::Result { id, result: Box::new(result.clone()) }
                }
            },
            |id| lines::result_line(id, result),
        );
        drop(notify);
    }

    /// Sends an interactive run's final message.
    fn answer_pair(&mut self, conn: usize, cid: &ClientId, result: &InteractResult, notify: Option<OwnedFd>) {
        self.send_final(
            conn,
            cid,
            |id| ServerMsg::Interacted { id, result: Box::new(result.clone()) },
            |id| lines::interact_line(id, result),
        );
        drop(notify);
    }

    /// Sends a request's final message in its connection's framing.
    fn send_final(
        &mut self,
        conn: usize,
        cid: &ClientId,
        binary: impl FnOnce(u64) -> ServerMsg,
        line: impl FnOnce(&Value) -> Vec<u8>,
    ) {
        self.answered += 1;
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        if c.gone {
            return;
        }
        let sent = match (&c.framing, cid) {
            (Framing::Binary, ClientId::Binary(id)) => wire::send(c.read.as_raw_fd(), &binary(*id), &[]),
            (Framing::Binary, ClientId::Command { .. }) => wire::send(c.read.as_raw_fd(), &binary(0), &[]),
            (_, ClientId::Json(id)) => {
                let bytes = line(id);
                return self.write(conn, bytes);
            }
            _ => return,
        };
        if sent.is_err() {
            self.drop_conn(conn);
        }
    }

    fn answer_error(&mut self, conn: usize, cid: &ClientId, msg: &str, notify: Option<OwnedFd>) {
        self.answer(conn, cid, &RunResult::error(msg), notify);
    }

    /// Queues `data` for a JSON-lines client and writes what it can.
    fn write(&mut self, conn: usize, data: Vec<u8>) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        if c.gone {
            return;
        }
        c.out.extend_from_slice(&data);
        self.flush(conn);
    }

    fn flush(&mut self, conn: usize) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        while !c.out.is_empty() {
            match sys::write(c.wfd(), &c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(libc::EAGAIN) => return,
                Err(_) => {
                    self.drop_conn(conn);
                    return;
                }
            }
        }
    }

    /// The client is gone: kill its runs, drop its queued requests.
    fn drop_conn(&mut self, conn: usize) {
        if let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) {
            c.gone = true;
            c.eof = true;
            c.out.clear();
        }
        self.queue.retain(|q| q.conn != conn);
        for p in self.pairs.iter_mut().filter(|p| p.conn == conn) {
            p.cancelled = true;
        }
        for r in self.running.iter_mut().filter(|r| r.req.conn == conn) {
            r.cancelled = true;
            kill_prepared(&r.p);
        }
        // The binary protocol has one client per supervisor (an agent's
        // clients aside): without it, nobody is left to serve.
        if self.agent.is_none()
            && self.conns.get(conn).and_then(Option::as_ref).is_some_and(|c| matches!(c.framing, Framing::Binary))
        {
            self.stop = true;
        }
        if self.conns.get(conn).and_then(Option::as_ref).is_some_and(|c| c.write.is_none() && !c.finish_at_eof) {
            self.conns[conn] = None;
        }
    }

    /// Kills everything still running or prepared and waits for it.
    fn shutdown(&mut self) {
        for r in self.running.drain(..) {
            kill_prepared(&r.p);
            self.zombies.push(r.p);
        }
        for s in self.spares.drain(..) {
            kill_prepared(&s);
            self.zombies.push(s);
        }
        for mut z in self.zombies.drain(..) {
            let _ = sys::pidfd_wait(z.pidfd.as_raw_fd());
            z.reaped = true;
            if let Some(cg) = z.cgroup.take() {
                cg.remove();
            }
        }
    }
}

fn control_line(id: &Value, target: &Value, found: bool) -> Vec<u8> {
    if found {
        lines::ok_line(id)
    } else {
        lines::error_line(id, &format!("no run with id {target} on this connection"))
    }
}

/// Whether a PID 1 has exited (its pidfd is readable).
/// Waits up to 10 s for a PID 1 that has sent its result to exit, then
/// kills it; true when it is gone.
fn wait_gone(p: &Prepared) -> bool {
    let mut pfd = [libc::pollfd { fd: p.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    if sys::poll(&mut pfd, 10_000).unwrap_or(0) == 0 {
        kill_prepared(p);
        pfd[0].revents = 0;
        return sys::poll(&mut pfd, 10_000).unwrap_or(0) > 0;
    }
    true
}

fn exited(p: &Prepared) -> bool {
    let mut pfd = [libc::pollfd { fd: p.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    sys::poll(&mut pfd, 0).unwrap_or(0) > 0
}

/// SIGKILL to a PID 1: the kernel then kills everything in its PID
/// namespace.
fn kill_prepared(p: &Prepared) {
    let _ = sys::pidfd_send_signal(p.pidfd.as_raw_fd(), libc::SIGKILL);
}

/// /dev/null for the run's stdin (`i` 0) or an output.
fn open_null(i: usize) -> Result<OwnedFd, String> {
    let flags = if i == 0 { libc::O_RDONLY } else { libc::O_WRONLY };
    sys::open(c"/dev/null", flags | libc::O_CLOEXEC, 0)
        .map_err(|e| SysError::new("open", e).path("/dev/null").to_string())
}

/// Opens a stdio file named in the spec, as the caller, without ever
/// blocking the event loop on it: with O_NONBLOCK a FIFO opens at once for
/// reading (and fails with ENXIO for writing without a reader, as a socket
/// does), and then the file's type decides. `relayed`: the supervisor
/// itself reads or writes it (read-once input, write-once output), so only
/// a regular file will do; a file handed to the program may also be a
/// character device (`/dev/null`, a terminal): the program, not the loop,
/// waits on it.
fn open_stdio(path: &Path, input: bool, relayed: bool) -> Result<OwnedFd, String> {
    let what = match (input, relayed) {
        (true, false) => "the run's stdin file",
        (false, false) => "the run's output file",
        (true, true) => "the run's read-once input file",
        (false, true) => "the run's write-once output file",
    };
    let shown = path.display().to_string();
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "NUL in path".to_string())?;
    let flags = if input { libc::O_RDONLY } else { libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC };
    let fd = sys::open(&c, flags | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK, 0o666).map_err(|e| {
        let hint = match e {
            libc::ENXIO => format!("{what} is a FIFO (named pipe) or a socket, not a file; give a regular file"),
            _ => what.to_string(),
        };
        SysError::new("open", e).path(shown.clone()).hint(hint).to_string()
    })?;
    let mode = sys::fd_mode(fd.as_raw_fd()).map_err(|e| SysError::new("fstat", e).path(shown.clone()).to_string())?;
    if mode != libc::S_IFREG && (relayed || mode != libc::S_IFCHR) {
        let kind = crate::error::file_kind(mode);
        let want = if relayed { "a regular file" } else { "a regular file or a character device such as /dev/null" };
        return Err(format!(
            "{what} `{shown}` is {kind}: it must be {want} (the server never waits on a stream's path)"
        ));
    }
    // The program sees the file as an ordinary, blocking one.
    sys::set_nonblocking(fd.as_raw_fd(), false)
        .map_err(|e| SysError::new("fcntl(F_SETFL)", e).path(shown).to_string())?;
    Ok(fd)
}

/// Most CPUs a run can keep busy at once, of the supervisor's `cpus`.
fn parallelism(cpus: u64, l: &crate::proto::spec::Limits) -> u64 {
    let mut n = cpus;
    if let Some(p) = l.pids {
        n = n.min(p);
    }
    if let Some(b) = l.cpu_bandwidth {
        n = n.min(b.ceil() as u64);
    }
    if let Some(c) = &l.cpus {
        let count: u64 = c
            .split(',')
            .map(|part| match part.split_once('-') {
                Some((a, b)) => b.parse::<u64>().unwrap_or(0).saturating_sub(a.parse().unwrap_or(0)) + 1,
                None => 1,
            })
            .sum();
        n = n.min(count);
    }
    n.max(1)
}

/// Turns a child failure into a message naming the step, the path and the
/// errno, with a fix where the user has one.
fn describe_failure(rlimits: &[Rlimit], names: &[String], step: Step, errno: i32, path: u32) -> String {
    let mut msg = step.describe().to_string();
    if step == Step::Rlimit {
        if let Some(l) = rlimits.get(path as usize) {
            msg = format!("setting {} (setrlimit) to {}", l.field, l.value);
        }
    } else if step == Step::Ucounts {
        if let Some((file, field)) = crate::plan::rlimits::UCOUNTS.get(path as usize) {
            msg = format!("{msg}: `/proc/{}` for {field}", file.to_string_lossy());
        }
    } else if path > 0 {
        if let Some(n) = names.get(path as usize - 1) {
            msg.push_str(&format!(": `{n}`"));
        }
    }
    msg.push_str(&format!(": {}", errno_text(errno)));
    let hint = match (step, errno) {
        (Step::BindSource, libc::ENOENT) => Some("the source does not exist; the -try variants skip a missing source"),
        (Step::MountPoint, libc::EROFS) | (Step::Dir, libc::EROFS) | (Step::File, libc::EROFS) | (Step::Symlink, libc::EROFS) => Some(
            "the path does not exist and its parent is read-only (the host view is); mount a --tmpfs or --dir over a parent first, or create it on the host",
        ),
        (Step::Exec, libc::ENOENT) => Some("no such program in the sandbox"),
        (Step::Exec, libc::EACCES) => Some("not executable by the sandbox user, or on a noexec mount"),
        (Step::Chdir, libc::ENOENT) => Some("the working directory does not exist in the sandbox"),
        (Step::Rlimit, libc::EPERM) => Some("the value is above the caller's hard limit (ulimit -H)"),
        (Step::Exec, libc::E2BIG) => Some("argv and environment exceed execve's limit (a quarter of the stack limit)"),
        (Step::Seccomp, libc::EINVAL) => Some(
            "the kernel refused the filter: without CONFIG_SECCOMP_FILTER, or (policies with `kill`) without user notification (Linux >= 5.0); see `capsule check`, or run with --seccomp none",
        ),
        (Step::Seccomp, _) => Some("see `capsule check`; --seccomp none runs without a filter"),
        (Step::ControllingTty, libc::ENOTTY) => Some(
            "stdin is not a terminal: controlling_tty needs the caller to pass one (capsule shell and capsule run --pty pass a pseudo-terminal of the run's own)",
        ),
        (Step::ControllingTty, libc::EPERM) => Some(
            "the terminal is already another session's controlling terminal (the caller's own, say): pass a pseudo-terminal of the run's own",
        ),
        _ => None,
    };
    let hint = hint
        .map(str::to_string)
        .or_else(|| matches!(step, Step::UserNamespace | Step::CloneTracee).then(|| namespaces::userns_hint(errno)));
    if let Some(h) = hint {
        msg.push_str("; ");
        msg.push_str(&h);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What crosses the re-execution comes back whole: the JSON written
    /// from borrowed parts reads back as the owned handoff.
    #[test]
    fn handoff_round_trips() {
        let config = Config { parallel: 3, ..Config::default() };
        let prelude = Prelude {
            config,
            host_uid: 1000,
            host_gid: 1001,
            home: crate::host::fsrules::Homes {
                home: Some(PathBuf::from("/home/u")),
                passwd: Some(PathBuf::from("/home/p")),
            },
            cgroups: None,
            cgroup_note: "none here".into(),
            self_pidfd: 7,
        };
        let job = Job::Lines { listener: Some((9, PathBuf::from("/run/x.sock"))), witness: 12 };
        let data = serde_json::to_vec(&HandoffRef { prelude: &prelude, job: &job }).unwrap();
        let h: Handoff = serde_json::from_slice(&data).unwrap();
        assert_eq!(h.prelude.config.parallel, 3);
        assert_eq!((h.prelude.host_uid, h.prelude.host_gid, h.prelude.self_pidfd), (1000, 1001, 7));
        assert_eq!(h.prelude.home.home.as_deref(), Some(Path::new("/home/u")));
        assert_eq!(h.prelude.home.passwd.as_deref(), Some(Path::new("/home/p")));
        assert_eq!(h.prelude.cgroup_note, "none here");
        assert_eq!(h.job.fds(), vec![9]);
        assert!(
            matches!(h.job, Job::Lines { listener: Some((9, ref p)), witness: 12 } if p == Path::new("/run/x.sock"))
        );
        assert_eq!(Job::Socket { sock: 4, once: true }.fds(), vec![4]);
    }
}
