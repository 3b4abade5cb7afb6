//! The supervisor: created once, serves many runs.
//!
//! One file per concern: `handoff` (its re-execution inside its user
//! namespace), `namespaces` (those made once), `conn` (connections and what
//! ends the loop), `prepare` (PID 1s prepared ahead, a request's half
//! filled in), `filters` (compiled seccomp filters), `event` (the event
//! loop), `requests` (requests and answers), `relay` (the streams it
//! carries), `outcome` (a finished run's result). May import everything
//! below it (`error`, `sys`, `proto`, `host`, `layer`, `plan`, `child`),
//! never the endpoints that start it. Runs in the supervisor's process;
//! `child` runs in the PID 1s it creates.
//!
//! Threads: the event loop below owns every run and all of the
//! supervisor's state. Other threads exist because a network or mount
//! namespace is per thread, or because a byte stream needs a blocking
//! reader; none touches the loop's state, and each hands back a
//! descriptor, a channel message or an `Arc`'d value:
//! - short-lived ones that enter a namespace, make one thing and end:
//!   the shared loopback network at start-up (overlapped with the rest of
//!   the set-up) and a run's own network (`namespaces`), the mount
//!   template (`template`), the egress proxy's listener inside a run's
//!   network and a session's `--host-port` listener (`egress`, `ports`);
//! - long-lived ones: `capsule-netkeep`, which cleans and keeps returned
//!   networks (`netpool`); `capsule-proxy`, the egress proxy's accept loop,
//!   plus one per proxied connection and one per direction of its relay
//!   (`egress`); `capsule-publish` and `capsule-ports` with one per
//!   connection, for a session's published and forwarded ports (`ports`).
//!
//! One single-threaded event loop ([`Supervisor::serve`]) over: the
//! clients' connections (the library's binary protocol, [`crate::proto::wire`],
//! or `capsule serve`'s JSON lines, [`crate::endpoints::serve`]), the runs in flight
//! (a pipe PID 1 writes a byte to when the result is in the arena, PID 1's
//! pidfd, the streams the supervisor carries: captures, read-once input,
//! write-once output, interactive relays, [`crate::supervisor::relay`]) and the PID 1s
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
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::Value;

use crate::error::{Error, Refused, SysError};
use crate::host::cgroups::{self, Instance, DELEGATION_HINT};
use crate::host::identity::{is_real_root, root_refusal};
use crate::proto::config::Config;
use crate::supervisor::namespaces::PendingNet;
use crate::sys::{self};

mod conn;
mod egress;
mod event;
pub mod explain;
mod filters;
mod handoff;
mod namespaces;
mod netlog;
mod netpool;
mod outcome;
mod ports;
mod prepare;
mod relay;
mod requests;
mod session;
mod template;

pub use conn::*;
use event::*;
use filters::*;
pub use handoff::*;
use netpool::*;
use prepare::*;
use session::*;
use template::MountTemplate;

/// A long-lived loop's slice: the kernel's shortest (its default here is 1.4 ms).
const LOOP_SLICE_NS: u64 = 100_000;

/// The loopback-only network namespace of the supervisor.
pub(crate) enum Net {
    /// Still being created by a thread.
    Pending(PendingNet),
    Ready(OwnedFd),
    /// Creating it failed; every run that needs it fails with this.
    Failed(String),
    /// None: each run's PID 1 makes one of its own (`Config::fresh_network`).
    PerRun,
    /// Kept networks, one per slot (`Config::own_network`).
    Pool(NetPool),
}

/// A running supervisor (lives in the process that called [`Supervisor::start`]).
pub struct Supervisor {
    pub(crate) config: Config,
    pub(crate) host_uid: u32,
    pub(crate) host_gid: u32,
    /// The user's agent directories, covered in every run.
    pub(crate) agent_dirs: Vec<PathBuf>,
    pub(crate) net: Net,
    pub(crate) self_pidfd: OwnedFd,
    pub(crate) last_cap: u32,
    /// Seccomp filters compiled so far, one per policy, guards and network log.
    pub(crate) filters: Filters,
    /// Threads that create PID 1s, under a filter of `filters` they have
    /// installed or (None) under none (`Supervisor::spawner`).
    pub(crate) spawners: Vec<(Option<Rc<crate::child::SealedFilter>>, sys::vm::Spawner)>,
    /// /sys/fs/fuse/connections (O_PATH), if the host has fusectl.
    pub(crate) fusectl: Option<OwnedFd>,
    /// Stacks and arenas of the runs' PID 1s and tracees, which share the
    /// supervisor's memory.
    pub(crate) pools: Rc<Pools>,
    /// This supervisor's cgroup; None in degraded mode.
    pub(crate) cgroups: Option<Instance>,
    /// Where the cgroups come from, or why there are none.
    pub(crate) cgroup_note: String,
    /// CPUs the supervisor may run on (its affinity mask).
    pub(crate) cpus: u64,
    /// That mask, when it holds more than one CPU: a PID 1 prepared ahead
    /// starts on the supervisor's CPU and widens to it (see `prepare`).
    pub(crate) affinity: Option<libc::cpu_set_t>,
    /// The loop's short slice, if it took one: PID 1s take it too once
    /// their program runs.
    pub(crate) loop_slice: u64,
    /// The kernel's Landlock ABI version (0: none), probed once.
    pub(crate) landlock_abi: u32,
    /// The caller's homes (`~` of the filesystem rules, where the default
    /// secrets are), found once.
    pub(crate) home: crate::host::fsrules::Homes,
    /// The host view's mount tree, built once for the runs to copy.
    pub(crate) mount_template: MountTemplate,
    /// The last plans made, one per tree, for runs that ask for it again.
    pub(crate) plan_memos: crate::plan::memo::PlanMemos,
}

impl Supervisor {
    /// Turns the calling process into a supervisor serving `job` (an
    /// endpoint's, JSON; `fds` are the descriptors it names, kept open
    /// across the re-execution); returns only on failure. As the caller, in the host's namespaces, it sets up its
    /// cgroup subtree (or degraded mode); it enters its user namespace and
    /// re-executes itself there ([`resume`]), then creates the
    /// namespaces shared by all runs. The caller must be single-threaded
    /// and gives up its own namespaces for good.
    ///
    /// Why the re-execution: each run's PID 1 shares the supervisor's
    /// memory (see `prepare`), which is therefore non-dumpable for good
    /// (CVE-2019-5736: PID 1 is the program's /proc/1). The /proc files
    /// of a non-dumpable process belong to root of the user namespace its
    /// memory was created in, at execve: for a process started on the
    /// host, the host's root, and PID 1 could not write its own id maps.
    /// Executed inside its user namespace, whose root is the calling user,
    /// the supervisor's memory belongs to that namespace: the files are
    /// the user's, and only a process with CAP_SYS_PTRACE over it (the user
    /// outside, never a sandboxed program, which is a user namespace
    /// further down without any capability) may look inside.
    pub fn start(config: &Config, job: &Value, fds: &[RawFd]) -> Error {
        match Self::begin(config) {
            Ok(prelude) => {
                let e = reexec(&prelude, job, fds);
                // Not re-executed: the cgroup instance ends here.
                drop(prelude.cgroups.map(Instance::from_state));
                e
            }
            Err(e) => e,
        }
    }

    /// The part of the set-up done as the caller, up to entering the user
    /// namespace.
    pub(crate) fn begin(config: &Config) -> Result<Prelude, Error> {
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
            return Err(Refused::CgroupsRequired { note: cgroup_note, hint: DELEGATION_HINT }.into());
        }
        // Taken before entering the namespaces: PID 1 polls it to notice the
        // supervisor's death, which PR_SET_PDEATHSIG alone cannot cover
        // (it is armed only after PID 1's credentials change).
        let self_pidfd = sys::pidfd_open(sys::getpid())
            .map_err(|e| SysError::new("pidfd_open", e).hint("capsule needs Linux ≥ 5.3"))?;
        match (config.subordinate, config.user_ns) {
            (None, _) => namespaces::enter_user(host_uid, host_gid)?,
            (Some(ids), Some(fd)) => {
                namespaces::join_user(fd, host_uid, host_gid, ids)?;
                sys::close(fd);
            }
            (Some(_), None) => return Err(Refused::SubidsWithoutNamespace.into()),
        }
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
    pub(crate) fn finish(p: Prelude) -> Result<Self, Error> {
        // SAFETY: `start` released this pidfd into the prelude (into_raw_fd); it is taken back once.
        let self_pidfd = unsafe { sys::reclaim_fd(p.self_pidfd) };
        // Every run's PID 1 shares this memory; it is never dumpable (see
        // `start`), from before any of them exists.
        sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| SysError::new("prctl(PR_SET_DUMPABLE)", e))?;
        // execve made the memory the user namespace's only if the binary
        // is readable; else the kernel keeps it the host's, and no run
        // could write its id maps.
        if std::fs::File::open("/proc/self/exe").is_err() {
            return Err(Refused::UnreadableBinary.into());
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
        // One kept cgroup per slot: the parallel runs and the PID 1s prepared ahead.
        let slots = 2 * p.config.parallel + 1;
        let net = match ns.loopback_net {
            Some(pending) => Net::Pending(pending),
            None if p.config.fresh_network => Net::PerRun,
            // The slots, the PID 1s still exiting (up to as many: `Loop::exits_behind`)
            // and those whose networks the keeper is checking: a PID 1 that finds
            // none idle makes one of its own, which costs it a network's making
            // and teardown (docs/network-reuse.md).
            None => Net::Pool(NetPool::start(2 * slots + p.config.parallel)?),
        };
        Ok(Supervisor {
            config: p.config,
            host_uid: p.host_uid,
            host_gid: p.host_gid,
            net,
            self_pidfd,
            last_cap: crate::host::last_cap(),
            filters: Filters::default(),
            spawners: Vec::new(),
            pools: Rc::new(Pools::default()),
            // One kept cgroup per slot: the parallel runs and the PID 1s prepared ahead.
            cgroups: p.cgroups.map(|s| Instance::from_state(s).keep_at_most(slots)),
            cgroup_note: p.cgroup_note,
            cpus: sys::cpu_count(),
            affinity: sys::affinity().ok().filter(|set| sys::cpus_in(set) > 1),
            loop_slice: 0,
            landlock_abi: crate::plan::landlock::probe(),
            home: p.home,
            // `serve` turns it on unless the supervisor serves one run.
            mount_template: MountTemplate::Off,
            plan_memos: Default::default(),
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
        if !once {
            self.mount_template = MountTemplate::Untried;
            // Short turns: the loop runs as soon as a request or a result
            // wakes it, before the PID 1s and programs it feeds, and so do the
            // PID 1s once their program runs (docs/latency.md, "A short slice
            // for the loop"). Best effort.
            if sys::short_slice(LOOP_SLICE_NS).unwrap_or(false) && sys::slice() == Ok(LOOP_SLICE_NS) {
                self.loop_slice = LOOP_SLICE_NS;
            }
        }
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
            read_buf: Vec::new(),
            proxies: None,
            stop: false,
            sessions: Vec::new(),
            next_session: 1,
        };
        l.run(&mut self);
        // An agent stopped by a signal gives up its socket and lock first.
        l.retire();
        l.shutdown();
    }
}
