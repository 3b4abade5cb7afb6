//! Preparing a run's PID 1 ahead of its request, and filling in the request's half.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering::SeqCst;

use crate::child::{self, NetJoin, NetLog, Plan, SealedFilter, Shared, CWD_NAME, EXEC_NAME};
use crate::error::SysError;
use crate::host::cgroups::{self, RunCgroup, DELEGATION_HINT};
use crate::plan::mounts::{MountPlan, Source};
use crate::plan::overlay::LayerPlan;
use crate::plan::rlimits::{self, RawRlimit};
use crate::proto::policy::PolicyName;
use crate::proto::spec::{MountOp, RunSpec, SubordinateIds, DEFAULT_PATH};
use crate::sys::{self, Arena};

use super::*;

/// The tracees' stack until their execve: the deepest path (PATH search,
/// Landlock's stdio rules) needs a few KiB; page faults touch only what it uses.
pub(crate) const TRACEE_STACK: usize = 256 << 10;
/// PID 1's stack: reserved, not allocated; its deepest path needs tens of
/// KiB, and a guard page ends it.
pub(crate) const PID1_STACK: usize = 1 << 20;
/// Spawner threads a supervisor starts at most: one per filter PID 1 can
/// be created under, and one with none for the other policies.
pub(crate) const MAX_SPAWNERS: usize = 3;
/// Size of a run's arena: its argv, environment and the rest must fit
/// (execve's own limit is a quarter of the stack limit, 2 MiB by default).
/// Reserved, not allocated: only the pages written are.
pub(crate) const ARENA_SIZE: usize = 16 << 20;

/// What must match between a request and a PID 1 prepared ahead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    pub(crate) empty_root: bool,
    pub(crate) tmp_size: Option<u64>,
    pub(crate) mounts: Vec<MountOp>,
    pub(crate) filesystem: crate::proto::spec::Filesystem,
    pub(crate) share_net: bool,
    pub(crate) hostname: Option<String>,
    pub(crate) ids: (u32, u32),
    pub(crate) cgroup: [bool; 4],
    pub(crate) seccomp: PolicyName,
    /// `landlock`, `tcp_connect`, `tcp_bind`: PID 1 builds the ruleset.
    pub(crate) landlock: (bool, Option<Vec<u16>>, Option<Vec<u16>>),
    /// `egress`: the supervisor holds the run's network (the proxy listens
    /// in it), and PID 1 gets `landlock`'s connect rule for the proxy.
    pub(crate) egress: bool,
    /// Layer runs are never prepared ahead: a layer is locked by one run
    /// at a time, and its roots depend on the request.
    pub(crate) layers: Vec<PathBuf>,
    /// PID 1 bounds the nested namespaces and inotify instances as it is built.
    pub(crate) ucounts: [u32; 12],
    /// The tracee gets a user namespace of its own (`rlimits::counts_processes`).
    pub(crate) tracee_userns: bool,
    /// The program runs as these subordinate ids (`RunSpec::subordinate`).
    pub(crate) subordinate: Option<crate::proto::spec::SubordinateIds>,
}

/// A PID 1 created for a run of one shape: building the sandbox, or ready
/// with its tracee waiting for the go message.
pub(crate) struct Prepared {
    pub(crate) shape: Shape,
    /// The run's seccomp filter, mapped in PID 1 when it was known before
    /// PID 1 was created (else `go` copies it into the arena).
    pub(crate) filter: Option<Rc<SealedFilter>>,
    /// Else the filter compiled after PID 1 was created, for `fill` to copy into
    /// the arena.
    pub(crate) late_filter: Option<Rc<SealedFilter>>,
    /// PID 1's process: its pidfd once created.
    pub(crate) process: Process,
    /// What PID 1 runs on (its plan, the arena, the stacks): shared
    /// memory, freed only once PID 1 has exited (see `Drop`). None only
    /// while being dropped.
    pub(crate) run: Option<Box<child::Pid1>>,
    pub(crate) pools: Rc<Pools>,
    /// PID 1 was reaped: it is gone.
    pub(crate) reaped: bool,
    /// Our end of the tracee's go socket.
    pub(crate) go: OwnedFd,
    /// PID 1 writes a byte to it when the result is in the arena.
    pub(crate) done: OwnedFd,
    /// We signal it to have the run killed.
    pub(crate) control: OwnedFd,
    pub(crate) cgroup: Option<RunCgroup>,
    /// Paths errors may name: 0 the program, 1 the working directory,
    /// then the mount plan's.
    pub(crate) names: Vec<String>,
    /// The bind and `file` sources as resolved for this PID 1, to check
    /// one prepared ahead against the host before it is used, and the
    /// directories that vouch for the missing ones.
    pub(crate) sources: Rc<[Source]>,
    pub(crate) parents: Rc<[crate::plan::mounts::Parent]>,
    /// /dev/null opened for the run's stdin, stdout and stderr ahead of
    /// the request (their default in `serve` and the library), for this
    /// run only: runs share no open file.
    pub(crate) null: Option<OwnedFd>,
    /// Whether the tree was built before the request came.
    pub(crate) ahead: bool,
    /// The network log, for runs with `net_log`.
    pub(crate) net_log: Option<Rc<Arena<NetLog>>>,
    /// poll reported its result byte or pidfd since it was last looked at.
    pub(crate) signalled: bool,
    /// When it joined the PID 1s waited for (`Loop::bury`).
    pub(crate) buried: Option<std::time::Instant>,
    /// The run's layers, locked until its PID 1 is gone.
    pub(crate) layers: Option<crate::plan::overlay::LayerPlan>,
    /// The kept network PID 1 joined, given back once PID 1 is gone.
    pub(crate) net: Option<Lent>,
    /// With `egress`, a network made for this run alone where none is kept
    /// (`--fresh-network`, or every kept one lent): the proxy listens in it.
    pub(crate) own_net: Option<OwnedFd>,
    /// With `egress`: the proxy's listener in the run's network, made with
    /// PID 1 (ahead of the request for a spare); closed before the
    /// network is given back.
    pub(crate) listener: Option<std::net::TcpListener>,
}

/// A PID 1's process as the supervisor knows it.
pub(crate) enum Process {
    /// Created: its pidfd.
    Created(OwnedFd),
    /// Being created on a spawner thread (`sys::vm::Spawner::post`): the
    /// loop goes on meanwhile and takes the pidfd at a later turn.
    Coming(sys::vm::Ticket),
    /// Not created (the clone failed, or the post was taken back): why.
    Never(String),
}

impl Process {
    fn from_clone(r: sys::SysResult<(i32, OwnedFd)>) -> Process {
        match r {
            Ok((_, pidfd)) => Process::Created(pidfd),
            Err(e) => Process::Never(
                SysError::new("clone3(CLONE_VM|CLONE_NEWPID)", e).hint("see `capsule check`").to_string(),
            ),
        }
    }
}

/// How a PID 1 is prepared ahead of its request (`Supervisor::prepare`).
#[derive(Clone, Copy)]
pub(crate) struct Ahead {
    /// Created on the supervisor's CPU: fewer runs than CPUs are in flight.
    pub(crate) pin: bool,
}

/// What the supervisor holds of a PID 1's network while it is prepared.
pub(crate) enum NetHeld {
    None,
    /// Our end and PID 1's of the socket the shared network is sent over.
    Pending(OwnedFd, OwnedFd),
    Lent(Lent),
    /// Made for an `egress` run.
    Own(OwnedFd),
}

impl Prepared {
    /// The run's arena, shared with its PID 1.
    pub(crate) fn arena(&self) -> &Arena<Shared> {
        &self.run.as_ref().expect("only None while dropped").arena
    }

    /// PID 1's pidfd, once it is created.
    pub(crate) fn pidfd(&self) -> Option<RawFd> {
        match &self.process {
            Process::Created(fd) => Some(fd.as_raw_fd()),
            Process::Coming(_) | Process::Never(_) => None,
        }
    }

    /// Why PID 1 was never created, if it was not.
    pub(crate) fn never(&self) -> Option<&str> {
        match &self.process {
            Process::Never(why) => Some(why),
            Process::Created(_) | Process::Coming(_) => None,
        }
    }

    /// Takes the spawner's result if it is in (no waiting).
    pub(crate) fn settle(&mut self) {
        if let Process::Coming(t) = &self.process {
            if let Some(r) = t.try_take() {
                self.process = Process::from_clone(r);
            }
        }
    }

    /// Waits for the spawner's result.
    pub(crate) fn settle_now(&mut self) {
        if let Process::Coming(t) = &self.process {
            self.process = Process::from_clone(t.wait());
        }
    }

    /// A PID 1 still to be created: its post taken back if it has not run
    /// (never created, for `why`), else waited for.
    pub(crate) fn stop_coming(&mut self, why: &str) {
        if let Process::Coming(t) = &self.process {
            if t.cancel() {
                self.process = Process::Never(why.into());
            }
        }
        self.settle_now();
    }

    /// Reaps PID 1, which has exited (its pidfd is readable) or was never
    /// created; its wait status.
    pub(crate) fn reap(&mut self) -> Option<i32> {
        self.settle_now();
        self.reaped = true;
        sys::pidfd_try_wait(self.pidfd()?).ok().flatten()
    }

    /// Reaps PID 1 if it has exited (one `waitid`, no poll first); true
    /// when it is gone (or was never created).
    pub(crate) fn try_reap(&mut self) -> bool {
        self.settle();
        self.reaped = match &self.process {
            Process::Coming(_) => false,
            Process::Never(_) => true,
            Process::Created(fd) => match sys::pidfd_try_wait(fd.as_raw_fd()) {
                Ok(Some(_)) => true,
                Ok(None) => false,
                // Nothing to wait for: gone only if its pidfd says so (`reaped`
                // lets its stacks be reused: never on a guess).
                Err(_) => exited(self),
            },
        };
        self.reaped
    }
}

impl Drop for Prepared {
    /// Frees what PID 1 runs on once it has exited. Prepared PID 1s are
    /// normally dropped after that (as zombies, see `Loop`); one still
    /// running here (an error path, a supervisor unwinding) is killed and
    /// waited for, and if it does not go within 10 s its memory is
    /// leaked rather than freed under it.
    fn drop(&mut self) {
        // Closed before the network (a field after it) is given back.
        self.listener = None;
        // What the post borrows is freed below.
        self.stop_coming("dropped before it was created");
        if !self.reaped && !exited(self) {
            kill_prepared(self);
            let fd = self.pidfd().expect("created: not exited");
            let mut pfd = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
            if sys::poll(&mut pfd, 10_000).unwrap_or(0) == 0 {
                std::mem::forget(self.run.take());
                if let Some(net) = self.net.take() {
                    net.forget();
                }
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
pub(crate) struct Pools {
    pub(crate) stacks: sys::vm::StackPool,
    pub(crate) arenas: sys::vm::ArenaPool<Shared>,
}

impl Pools {
    /// Takes back what a PID 1 that is gone (or never started) ran on.
    pub(crate) fn give(&self, run: child::Pid1) {
        let child::Pid1 { arena, stack, tracee_stack, .. } = run;
        self.stacks.give(stack);
        self.stacks.give(tracee_stack);
        self.arenas.give(arena);
    }
}

impl Supervisor {
    /// The key a request's PID 1 is prepared by.
    pub(crate) fn shape(&self, spec: &RunSpec) -> Shape {
        // With subordinate ids the program's uid is not PID 1's: RLIMIT_NPROC counts it alone in the run's.
        let tracee_userns =
            spec.subordinate.is_none() && rlimits::counts_processes(&spec.limits, self.cgroups.is_some());
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
            landlock: (spec.landlock != Some(false), self.tcp_connect(spec), spec.tcp_bind.clone()),
            egress: spec.egress.is_some(),
            layers: spec.layers.clone(),
            ucounts: crate::plan::rlimits::ucounts(&spec.limits, tracee_userns),
            tracee_userns,
            subordinate: spec.subordinate,
        }
    }

    /// The TCP ports the run may connect to: `tcp_connect`, and with
    /// `egress` where Landlock has network rules (and is not turned off),
    /// only those and the proxy's (the run's loopback has nothing else to
    /// reach outside it).
    pub(crate) fn tcp_connect(&self, spec: &RunSpec) -> Option<Vec<u16>> {
        let layer = spec.landlock != Some(false);
        if spec.egress.is_none() || !layer || self.landlock_abi < crate::plan::landlock::NET_ABI {
            return spec.tcp_connect.clone();
        }
        let mut ports = spec.tcp_connect.clone().unwrap_or_default();
        if !ports.contains(&crate::proto::egress::PROXY_PORT) {
            ports.push(crate::proto::egress::PROXY_PORT);
        }
        Some(ports)
    }

    pub(crate) fn ids(&self, spec: &RunSpec) -> (u32, u32) {
        if spec.root {
            (0, 0)
        } else {
            (spec.uid.unwrap_or(self.host_uid), spec.gid.unwrap_or(self.host_gid))
        }
    }

    /// Checks what a long-lived supervisor cannot change per run.
    pub(crate) fn check_request(&self, spec: &RunSpec) -> Result<(), String> {
        spec.validate().map_err(|e| e.to_string())?;
        if let Some(ids) = spec.subordinate {
            if Some(ids) != self.config.subordinate {
                return Err(format!(
                    "invalid spec: subordinate: this supervisor's user namespace does not map uid {} and gid {}: \
                     only the one-shot client's does, made for them with newuidmap (capsule isolate)",
                    ids.uid, ids.gid
                ));
            }
            let (uid, gid) = self.ids(spec);
            if uid == ids.uid || gid == ids.gid {
                return Err(format!(
                    "invalid spec: subordinate: uid {} and gid {} are the caller's own ids inside (uid {uid}, gid \
                     {gid}): set `uid`/`gid` to others",
                    ids.uid, ids.gid
                ));
            }
        }
        // Asked for, so enforced or refused (the filesystem part is best effort).
        let asked = crate::plan::landlock::requested(
            spec.landlock != Some(false),
            spec.tcp_connect.as_deref(),
            spec.tcp_bind.as_deref(),
        );
        if spec.egress.is_some() && !self.config.own_network && self.config.parallel > 1 {
            return Err("egress: the proxy listens in the run's network, which this supervisor shares among \
                 concurrent runs (capsule serve --shared-network, Config::own_network false): serve without it"
                .into());
        }
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

    /// How PID 1 joins the network: the socket to send it over while the
    /// shared loopback namespace is still being made, or the kept network
    /// lent to it.
    pub(crate) fn net_join(&mut self, spec: &RunSpec) -> Result<(NetJoin, NetHeld), String> {
        if spec.share_net {
            return Ok((NetJoin::Host, NetHeld::None));
        }
        let own = |why: &str| -> Result<(NetJoin, NetHeld), String> {
            // The proxy needs the network PID 1 will join: made here.
            let fd = namespaces::own_network().map_err(|e| format!("creating the run's network ({why}): {e}"))?;
            Ok((NetJoin::Fd(fd.as_raw_fd()), NetHeld::Own(fd)))
        };
        match &self.net {
            Net::Ready(fd) => Ok((NetJoin::Fd(fd.as_raw_fd()), NetHeld::None)),
            Net::PerRun if spec.egress.is_some() => own("egress, --fresh-network"),
            Net::Failed(msg) => Err(msg.clone()),
            Net::PerRun => Ok((NetJoin::Own, NetHeld::None)),
            Net::Pool(pool) => match pool.take() {
                Some(lent) => Ok((NetJoin::Fd(lent.fd()), NetHeld::Lent(lent))),
                None if spec.egress.is_some() => own("egress, every kept network lent"),
                None => Ok((NetJoin::Own, NetHeld::None)),
            },
            Net::Pending(_) => {
                let (ours, theirs) =
                    sys::socketpair_stream().map_err(|e| SysError::new("socketpair", e).to_string())?;
                Ok((NetJoin::Receive(theirs.as_raw_fd()), NetHeld::Pending(ours, theirs)))
            }
        }
    }

    /// The network `p`'s PID 1 joins, when the supervisor holds it.
    pub(crate) fn run_net(&self, p: &Prepared) -> Option<RawFd> {
        if let Some(l) = &p.net {
            return Some(l.fd());
        }
        if let Some(fd) = &p.own_net {
            return Some(fd.as_raw_fd());
        }
        match (&self.net, p.shape.share_net) {
            (Net::Ready(fd), false) => Some(fd.as_raw_fd()),
            _ => None,
        }
    }

    /// Waits for the loopback network and hands it to PID 1 over `sock`
    /// (dropping `sock` without an fd makes PID 1 fail its JoinNetwork step).
    pub(crate) fn deliver_net(&mut self, sock: OwnedFd) {
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
    /// `ahead`: prepared before its request (a spare). A spawner thread
    /// creates PID 1 where one can; `prepare` returns meanwhile.
    pub(crate) fn prepare(
        &mut self,
        spec: &RunSpec,
        shape: Shape,
        filter: Option<Rc<SealedFilter>>,
        ahead: Option<Ahead>,
    ) -> Result<Prepared, String> {
        let pinned = ahead.is_some_and(|a| a.pin);
        let ahead = ahead.is_some();
        let (net, held) = self.net_join(spec)?;
        let (layers, mounts, names) = self.mount_plan(spec)?;
        let sources = Rc::clone(&mounts.sources);
        let parents = Rc::clone(&mounts.parents);
        let cgroup = match &self.cgroups {
            Some(inst) => Some(inst.new_run(&spec.limits).map_err(|e| format!("creating the run's cgroup: {e}"))?),
            None => None,
        };
        let fail = |what: &str, e: i32| SysError::new(what, e).to_string();
        let arena = self.pools.arenas.take(ARENA_SIZE).map_err(|e| fail("mmap (run arena)", e))?;
        // (`with_net_log` gives every policy, `none` too, the log's epilogue.)
        let net_log = match spec.logs_net() || spec.explain {
            false => None,
            true => Some(Rc::new(Arena::<NetLog>::new(0).map_err(|e| fail("mmap (network log)", e))?)),
        };
        let (go, go_child) = sys::socketpair_stream().map_err(|e| fail("socketpair", e))?;
        // A pipe rather than an eventfd: a pipe write wakes the supervisor
        // as a synchronous wake-up (the writer is about to exit), which lets
        // the scheduler run it on the writer's CPU instead of waking an idle one.
        // (Both ends non-blocking: PID 1 writes one byte, once, to an empty pipe.)
        let (done, done_child) = sys::pipe2(libc::O_CLOEXEC | libc::O_NONBLOCK).map_err(|e| fail("pipe2", e))?;
        let control = sys::eventfd().map_err(|e| fail("eventfd", e))?;
        let (uid, gid) = shape.ids;
        let c = |s: String| CString::new(s).expect("no NUL");
        // A PID 1 prepared ahead is built while a run may be going on. The
        // kernel places a new process on the idlest CPU at clone, which on a
        // small machine is the one running the program (the supervisor is
        // busy creating it): the build then preempts the program, and the
        // supervisor's own CPU idles once it sleeps. So PID 1 is created on
        // the supervisor's CPU (its affinity inherited from a pinned
        // creator, restored right after) and widens to the supervisor's
        // mask once its sandbox is built, before it creates the tracee.
        // Not with a run on every CPU: there every spare would be built on
        // one CPU while the others ran programs only (`Ahead::pin`).
        let pin = self.affinity.filter(|_| pinned).and_then(|all| Some((sys::one_cpu(sys::current_cpu().ok()?)?, all)));
        // Created on a spawner thread, where there is or may be one (not
        // for layers: their FUSE daemon would inherit its filter; not while
        // the shared network is still being made: `deliver_net` follows the
        // clone): a filter PID 1 can live under comes from the thread that
        // has it installed already.
        let spawner = match (&filter, &layers, &held) {
            (Some(f), None, NetHeld::None | NetHeld::Lent(_) | NetHeld::Own(_)) => self.spawner(f, ahead),
            _ => None,
        };
        let inherited = spawner.is_some_and(|(_, with_filter)| with_filter);
        let mount_template = self.mount_template.for_plan(&mounts).unwrap_or(-1);
        let fusectl = self.fusectl.as_ref().map_or(-1, |f| f.as_raw_fd());
        let mut plan = Plan {
            uid_map: c(format!("{uid} 0 1\n")),
            gid_map: c(format!("{gid} 0 1\n")),
            tracee_maps: shape.tracee_userns.then(|| [c(format!("{uid} {uid} 1\n")), c(format!("{gid} {gid} 1\n"))]),
            user_ns: -1,
            box_ids: shape.subordinate.map(|s| (s.uid, s.gid)),
            net,
            hostname: spec.hostname.as_deref().map(|h| c(h.to_string())),
            supervisor_pidfd: self.self_pidfd.as_raw_fd(),
            landlock: crate::plan::landlock::Plan::new(
                self.landlock_abi,
                &mounts,
                spec.landlock != Some(false),
                self.tcp_connect(spec).as_deref(),
                spec.tcp_bind.as_deref(),
            ),
            watch: spec.explain.then(|| mounts.watch_view()),
            mounts,
            mount_template,
            last_cap: self.last_cap,
            cgroup: cgroup.as_ref().map(RunCgroup::raw_fds),
            go_sock: go_child.as_raw_fd(),
            done: done_child.as_raw_fd(),
            control: control.as_raw_fd(),
            keep_fds: Vec::new(),
            filter: filter.clone(),
            filter_inherited: inherited,
            net_log: net_log.clone(),
            fusectl,
            widen: pin.map(|(_, all)| all),
            slice_ns: self.loop_slice,
            ucounts: shape.ucounts,
        };
        plan.keep_fds = keep_fds(&plan);
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
        let user_ns = match shape.subordinate.map(|s| run_user_ns(&tracee_stack, shape.ids, s)).transpose() {
            Ok(fd) => fd,
            Err(e) => {
                self.pools.stacks.give(stack);
                self.pools.stacks.give(tracee_stack);
                self.pools.arenas.give(arena);
                return fail_early(cgroup, e.to_string());
            }
        };
        if let Some(fd) = &user_ns {
            plan.user_ns = fd.as_raw_fd();
            plan.keep_fds.push(fd.as_raw_fd());
            plan.keep_fds.sort_unstable();
        }
        let run = Box::new(child::Pid1 { plan, arena, stack, tracee_stack });
        let flags = libc::CLONE_NEWPID as u64;
        // For both calls below: `run` (boxed: it does not move), its stacks
        // included, is kept in the `Prepared` below, whose drop frees it only
        // once PID 1 has exited, and nothing changes it meanwhile (the
        // supervisor writes only the arena's shared page and byte area,
        // through atomics and `put`, to which PID 1 reads are ordered by the
        // go message). `child::pid1` makes `sys` calls only and ends with
        // `sys::exit`. (The child widens itself once its sandbox is built.)
        let process = match spawner {
            // PID 1's ends of the go socket and the result pipe are closed
            // there once PID 1 has its copies; every other descriptor of
            // `keep_fds` is held by this `Prepared` or the supervisor.
            // SAFETY: as said above; the spawner's thread shares this
            // memory, and the ticket is settled before `run` is freed
            // (`Drop`), which waits for PID 1's exit as before.
            Some((i, _)) => Process::Coming(unsafe {
                self.spawners[i].1.post(
                    flags,
                    &run.stack,
                    &*run,
                    child::pid1,
                    pin,
                    [go_child, done_child].into_iter().chain(user_ns).collect(),
                )
            }),
            None => {
                // SAFETY: as said above.
                match unsafe { sys::vm::spawn_pinned(flags, &run.stack, &*run, child::pid1, pin.as_ref()) } {
                    Ok((_, pidfd)) => {
                        drop(go_child);
                        drop(done_child);
                        drop(user_ns);
                        Process::Created(pidfd)
                    }
                    Err(e) => {
                        self.pools.give(*run);
                        let e =
                            SysError::new("clone3(CLONE_VM|CLONE_NEWPID)", e).hint("see `capsule check`").to_string();
                        return fail_early(cgroup, e);
                    }
                }
            }
        };
        let (net_lent, own_net) = self.settle_net(held);
        let mut p = Prepared {
            signalled: false,
            buried: None,
            shape,
            process,
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
            null: open_null().ok(),
            ahead,
            filter,
            late_filter: None,
            net_log,
            layers,
            net: net_lent,
            own_net,
            listener: None,
        };
        // Only in a network this PID 1 has alone (a shared one's other runs
        // could connect to it before this run starts); else, and where it
        // cannot be made now, at the run's start.
        if p.shape.egress && (p.net.is_some() || p.own_net.is_some()) {
            p.listener = self.run_net(&p).and_then(|fd| super::egress::listen_in(fd).ok());
        }
        Ok(p)
    }

    /// The mount plan of a run of `spec` and the names its errors use: its
    /// sources resolved here once, in the supervisor's (the host's) view
    /// (PID 1 mounts and copies what the descriptors refer to); layers
    /// first, their directories created and locked here.
    fn mount_plan(&mut self, spec: &RunSpec) -> Result<(Option<LayerPlan>, MountPlan, Vec<String>), String> {
        let layers = crate::plan::overlay::prepare(spec)?;
        let me = sys::geteuid();
        let make = |names: &mut Vec<String>| MountPlan::prepare(spec, me, &self.home, names, layers.as_ref());
        // A kept plan for the same tree, if its sources are as they were (layers: never kept).
        let (mut mounts, mut names) = match &layers {
            None => self.plan_memos.plan(spec, me, make).map_err(|e| e.to_string())?,
            Some(_) => {
                let mut names = vec![String::new(), String::new()];
                (make(&mut names).map_err(|e| e.to_string())?, names)
            }
        };
        mounts.cover_agent_dirs(&self.agent_dirs, &mut names);
        Ok((layers, mounts, names))
    }

    /// The network a new PID 1 holds once it is cloned: the shared one is
    /// sent to it when ready (its end of the socket closed here), a lent
    /// or own one is kept with the run.
    fn settle_net(&mut self, held: NetHeld) -> (Option<Lent>, Option<OwnedFd>) {
        match held {
            NetHeld::Pending(ours, theirs) => {
                drop(theirs);
                self.deliver_net(ours);
                (None, None)
            }
            NetHeld::Lent(lent) => (Some(lent), None),
            NetHeld::Own(fd) => (None, Some(fd)),
            NetHeld::None => (None, None),
        }
    }

    /// The spawner thread for PID 1s of `filter` (`sys::vm::Spawner`), and
    /// whether it has the filter installed: a filter PID 1 can live under
    /// has a thread of its own, the others share one with none (their
    /// tracees install them). Started for a PID 1 prepared ahead (a
    /// long-lived supervisor; one run would pay more for the thread than it
    /// saves), at most [`MAX_SPAWNERS`] in all: each lives as long as the
    /// supervisor, since its PID 1s' parent-death signal follows it. None:
    /// the loop creates PID 1 itself, and waits for the clone.
    pub(crate) fn spawner(&mut self, filter: &Rc<SealedFilter>, ahead: bool) -> Option<(usize, bool)> {
        let key = filter.inherit.then_some(filter);
        let same = |f: &Option<Rc<SealedFilter>>| match (f, key) {
            (Some(a), Some(b)) => Rc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if let Some(i) = self.spawners.iter().position(|(f, _)| same(f)) {
            return Some((i, key.is_some()));
        }
        // Room for the filterless one always stays.
        let filtered = self.spawners.iter().filter(|(f, _)| f.is_some()).count();
        if !ahead || key.is_some() && filtered + 1 >= MAX_SPAWNERS || self.spawners.len() >= MAX_SPAWNERS {
            return None;
        }
        let spawner = match key {
            Some(f) => {
                let program = f.map.as_slice().to_vec();
                let setup = move || {
                    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
                    sys::seccomp_install(&program, false).map(drop)
                };
                sys::vm::Spawner::start("capsule-spawner", setup).ok()?
            }
            None => sys::vm::Spawner::start("capsule-spawner", || Ok(())).ok()?,
        };
        self.spawners.push((key.cloned(), spawner));
        Some((self.spawners.len() - 1, key.is_some()))
    }

    /// Whether a PID 1 prepared ahead still matches the host: every bind
    /// and `file` source resolves, with the same rules, to the object it
    /// resolved to then (a copied file also to the same content), else a
    /// fresh PID 1 is built (and reports what no longer resolves).
    pub(crate) fn still_fresh(&self, p: &Prepared) -> bool {
        crate::plan::mounts::sources_unchanged(&p.sources, &p.parents, sys::geteuid())
    }

    /// Writes the run's half into the arena and its limits into its cgroup.
    pub(crate) fn fill(&self, p: &mut Prepared, spec: &RunSpec) -> Result<Filled, String> {
        let c = |s: &str| CString::new(s).expect("validated: no NUL");
        let mut env = spec.env.clone();
        for k in &spec.keep_env {
            if let Ok(v) = std::env::var(k) {
                env.entry(k.clone()).or_insert(v);
            }
        }
        if spec.egress.is_some() {
            for (k, v) in crate::proto::egress::proxy_env() {
                env.entry(k.into()).or_insert(v);
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
        if !spec.inherit_fds.is_empty() {
            a.go_inherit.store(a.put_slice(&spec.inherit_fds).map_err(too_big)? as u64, SeqCst);
            a.go_inherit_len.store(spec.inherit_fds.len() as u64, SeqCst);
        }
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
        Ok(Filled { rlimits: rl, wall_time_ns: wall })
    }
}
/// Waits up to 10 s for a PID 1 that has sent its result to exit, then
/// kills it; true when it is gone.
pub(crate) fn wait_gone(p: &mut Prepared) -> bool {
    p.settle_now();
    let Some(fd) = p.pidfd() else { return true };
    let mut pfd = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
    if sys::poll(&mut pfd, 10_000).unwrap_or(0) == 0 {
        kill_prepared(p);
        pfd[0].revents = 0;
        return sys::poll(&mut pfd, 10_000).unwrap_or(0) > 0;
    }
    true
}

/// Whether a PID 1 has exited (its pidfd is readable), or was never
/// created; not one still being created.
pub(crate) fn exited(p: &mut Prepared) -> bool {
    p.settle();
    match &p.process {
        Process::Created(fd) => {
            let mut pfd = [libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            sys::poll(&mut pfd, 0).unwrap_or(0) > 0
        }
        Process::Coming(_) => false,
        Process::Never(_) => true,
    }
}

/// SIGKILL to a PID 1: the kernel then kills everything in its PID
/// namespace. One not created yet never will be.
pub(crate) fn kill_prepared(p: &mut Prepared) {
    p.stop_coming("killed before it was created");
    if let Some(fd) = p.pidfd() {
        let _ = sys::pidfd_send_signal(fd, libc::SIGKILL);
    }
}

/// /dev/null for whichever of the run's stdin, stdout and stderr the spec
/// leaves unset: one open, read-write, as daemon(3) does, for all three.
pub(crate) fn open_null() -> Result<OwnedFd, String> {
    sys::open(c"/dev/null", libc::O_RDWR | libc::O_CLOEXEC, 0)
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
pub(crate) fn open_stdio(path: &Path, input: bool, relayed: bool) -> Result<OwnedFd, String> {
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
pub(crate) fn parallelism(cpus: u64, l: &crate::proto::spec::Limits) -> u64 {
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

/// The descriptors a PID 1 of `plan` keeps (it closes every other one):
/// its ends of the channels, the supervisor's pidfd, the network, the
/// cgroup's, the mount sources, the mount template and the FUSE control
/// directory; sorted, none of 0-2.
fn keep_fds(plan: &Plan) -> Vec<RawFd> {
    let mut keep = vec![plan.supervisor_pidfd, plan.go_sock, plan.done, plan.control];
    match plan.net {
        NetJoin::Fd(fd) | NetJoin::Receive(fd) => keep.push(fd),
        NetJoin::Host | NetJoin::Own => {}
    }
    if let Some(f) = &plan.cgroup {
        keep.extend([f.prog_dir, f.cpu_stat, f.kill]);
    }
    keep.extend(plan.mounts.fds());
    keep.extend([plan.mount_template, plan.fusectl]);
    keep.retain(|&fd| fd > 2);
    keep.sort_unstable();
    keep
}

/// A run's user namespace for subordinate ids: it maps the program's ids
/// (the host's numbers, `s`) onto the supervisor's 1 and the caller's
/// (`ids`) onto its 0; made here (PID 1 could map only its own id), joined
/// by PID 1.
fn run_user_ns(stack: &sys::Stack, (uid, gid): (u32, u32), s: SubordinateIds) -> Result<OwnedFd, SysError> {
    namespaces::run_user_ns(stack, &format!("{uid} 0 1\n{} 1 1\n", s.uid), &format!("{gid} 0 1\n{} 1 1\n", s.gid))
}
