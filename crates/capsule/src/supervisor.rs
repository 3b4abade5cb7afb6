//! The supervisor: created once, serves many runs (thesis, ch. 3). For
//! each run it prepares a [`Plan`], clones PID 1 into a new PID namespace,
//! waits for it and turns the shared page into a [`RunResult`].
//!
//! The one-shot CLI forks a supervisor and sends it one request over the
//! same socket protocol a long-lived supervisor serves, so both take this
//! code path.

use std::cell::RefCell;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;

use crate::child::{self, NetJoin, Plan, Shared, Step, FLAG_CPU_TIME, FLAG_OUTPUT_LIMIT, FLAG_TRACEE_REAPED, FLAG_WALL_TIME};
use crate::cgroups::{self, CgroupConfig, Instance, RunCgroup, Stats, DELEGATION_HINT};
use crate::error::{errno_text, Error, SysError};
use crate::mounts::MountPlan;
use crate::namespaces::{self, PendingNet};
use crate::proto::{self, Request, Response};
use crate::result::{signal_name, Accounting, RunResult, Status};
use crate::seccomp::Filter;
use crate::spec::{RunSpec, DEFAULT_PATH};
use crate::sys::{self, Forked, SharedPage, CLONE_PIDFD};
use crate::{caps, rlimits};

/// The tracee's stack until its execve: its deepest path (PATH search,
/// id maps) needs a few KiB; page faults touch only what it uses.
const TRACEE_STACK: usize = 256 << 10;

/// The loopback-only network namespace of the supervisor.
enum Net {
    /// Still being created by a thread.
    Pending(PendingNet),
    Ready(OwnedFd),
    /// Creating it failed; every run that needs it fails with this.
    Failed(String),
}

/// A running supervisor (lives in the process that called [`Supervisor::start`]).
pub struct Supervisor {
    host_uid: u32,
    host_gid: u32,
    net: RefCell<Net>,
    self_pidfd: OwnedFd,
    last_cap: u32,
    seccomp: Filter,
    /// The tracees' stack (each PID 1 has its own copy-on-write copy).
    tracee_stack: sys::Stack,
    /// This supervisor's cgroup; None in degraded mode.
    cgroups: Option<Instance>,
    /// Where the cgroups come from, or why there are none.
    cgroup_note: String,
    /// CPUs the supervisor may run on (its affinity mask).
    cpus: u64,
}

/// True when the caller is the host's root, which capsule refuses to be
/// run as (the same rule `capsule check` reports).
pub fn is_real_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let euid = sys::geteuid();
    if euid != 0 {
        return false;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let devnull = std::fs::metadata("/dev/null").ok().map(|m| m.uid());
    crate::check::is_host_root(euid, &map, devnull)
}

/// The refusal, with the fix.
pub fn root_refusal() -> Error {
    Error::Refused(
        "capsule refuses to run as root: root's sandbox would still reach global kernel \
         state, and capsule's isolation is built for unprivileged users; run it as an \
         unprivileged user, e.g. `runuser -u nobody -- capsule run ...` or \
         `setpriv --reuid=nobody --regid=nogroup --clear-groups capsule run ...`"
            .into(),
    )
}

impl Supervisor {
    /// Turns the calling process into a supervisor: sets up its cgroup
    /// subtree (or degraded mode), enters its user namespace and creates the
    /// namespaces shared by all runs. The caller must be single-threaded and
    /// gives up its own namespaces for good.
    pub fn start(cgroup: &CgroupConfig) -> Result<Self, Error> {
        if is_real_root() {
            return Err(root_refusal());
        }
        let (host_uid, host_gid) = (sys::getuid(), sys::getgid());
        // cgroups first, as the plain user in the host's namespaces.
        let found = cgroups::discover(cgroup);
        let (cgroups, cgroup_note) = match &found.base {
            Some(base) => match Instance::setup(base) {
                Ok(inst) => (Some(inst), found.detail.clone()),
                Err(e) => (None, format!("{}: setting it up failed: {e}", found.detail)),
            },
            None => (None, found.detail.clone()),
        };
        if cgroups.is_none() && cgroup.require {
            return Err(Error::Refused(format!(
                "cgroups are required (--require-cgroups) but unavailable: {cgroup_note}; {DELEGATION_HINT}"
            )));
        }
        // Taken before entering the namespaces: PID 1 polls it to notice the
        // supervisor's death, which PR_SET_PDEATHSIG alone cannot cover
        // (it is armed only after PID 1's credentials change).
        let self_pidfd = sys::pidfd_open(sys::getpid())
            .map_err(|e| SysError::new("pidfd_open", e).hint("capsule needs Linux ≥ 5.3"))?;
        let ns = namespaces::enter_supervisor(host_uid, host_gid)?;
        let net = RefCell::new(Net::Pending(ns.loopback_net));
        // Writing to a client that went away must not kill the supervisor.
        sys::ignore_sigpipe();
        let tracee_stack = sys::Stack::new(TRACEE_STACK).map_err(|e| SysError::new("mmap (tracee stack)", e))?;
        Ok(Supervisor {
            host_uid,
            host_gid,
            net,
            self_pidfd,
            last_cap: caps::last_cap(),
            seccomp: Filter::default(),
            tracee_stack,
            cgroups,
            cgroup_note,
            cpus: sys::cpu_count(),
        })
    }

    /// Serves requests on `sock` until the client closes it, or until
    /// `max_requests` have been answered (a one-shot supervisor answers one
    /// and exits at once, instead of waiting for the client to hang up).
    pub fn serve(&self, sock: &OwnedFd, max_requests: Option<usize>) -> Result<(), String> {
        let mut served = 0;
        while max_requests.is_none_or(|max| served < max) {
            let Some((req, fds)) = proto::recv::<Request>(sock.as_raw_fd())? else {
                return Ok(());
            };
            let result = if fds.len() != 3 {
                RunResult::error(format!("a request must carry 3 descriptors (stdin, stdout, stderr), got {}", fds.len()))
            } else {
                self.run(&req.spec, [fds[0].as_raw_fd(), fds[1].as_raw_fd(), fds[2].as_raw_fd()])
            };
            drop(fds);
            proto::send_owned(sock, &Response::Result(result), &[])?;
            served += 1;
        }
        Ok(())
    }

    /// Runs one spec with the given stdio and waits for it.
    pub fn run(&self, spec: &RunSpec, stdio: [RawFd; 3]) -> RunResult {
        // The one validation of the spec, before anything is made for it.
        if let Err(e) = spec.validate() {
            return RunResult::error(e.to_string());
        }
        // How PID 1 joins the network: while the loopback namespace is still
        // being made, PID 1 receives it over a socket once it is ready.
        let mut pending = None;
        let net = if spec.share_net {
            NetJoin::Host
        } else {
            match &*self.net.borrow() {
                Net::Ready(fd) => NetJoin::Fd(fd.as_raw_fd()),
                Net::Failed(msg) => return RunResult::error(msg.clone()),
                Net::Pending(_) => match sys::socketpair_stream() {
                    Ok((ours, theirs)) => {
                        let join = NetJoin::Receive(theirs.as_raw_fd());
                        pending = Some((ours, theirs));
                        join
                    }
                    Err(e) => return RunResult::error(SysError::new("socketpair", e).to_string()),
                },
            }
        };
        let cgroup = match self.run_cgroup(spec) {
            Ok(cg) => cg,
            Err(msg) => return RunResult::error(msg),
        };
        let result = match self.prepare(spec, stdio, net, cgroup.as_ref()) {
            Ok((plan, names)) => self.execute(&plan, &names, pending, cgroup.as_ref()),
            Err(e) => RunResult::error(e.to_string()),
        };
        if let Some(cg) = cgroup {
            cg.remove();
        }
        result
    }

    /// A fresh cgroup for one run; in degraded mode, an error for the limits
    /// that need one.
    fn run_cgroup(&self, spec: &RunSpec) -> Result<Option<RunCgroup>, String> {
        let l = &spec.limits;
        match &self.cgroups {
            Some(inst) => inst.new_run(l).map(Some).map_err(|e| format!("creating the run's cgroup: {e}")),
            None => {
                let needs = [
                    ("limits.memory", l.memory.is_some()),
                    ("limits.cpu_bandwidth", l.cpu_bandwidth.is_some()),
                    ("limits.cpus", l.cpus.is_some()),
                ];
                match needs.iter().find(|(_, set)| *set) {
                    Some((field, _)) => Err(format!(
                        "{field} needs cgroup v2, and this supervisor has none ({}); {DELEGATION_HINT}",
                        self.cgroup_note
                    )),
                    None => Ok(None),
                }
            }
        }
    }

    /// Waits for the loopback network and hands it to PID 1 over `sock`
    /// (dropping `sock` without an fd makes PID 1 fail its JoinNetwork step).
    fn deliver_net(&self, sock: OwnedFd) -> Option<String> {
        let mut net = self.net.borrow_mut();
        if let Net::Pending(_) = &*net {
            let Net::Pending(handle) = std::mem::replace(&mut *net, Net::Failed(String::new())) else { unreachable!() };
            *net = match handle.join() {
                Ok(Ok(fd)) => Net::Ready(fd),
                Ok(Err(e)) => Net::Failed(format!("creating the sandbox network: {e}")),
                Err(_) => Net::Failed("creating the sandbox network: the thread panicked".into()),
            };
        }
        match &*net {
            Net::Ready(fd) => {
                let _ = sys::send_with_fds(sock.as_raw_fd(), b"n", &[fd.as_raw_fd()]);
                None
            }
            Net::Failed(msg) => Some(msg.clone()),
            Net::Pending(_) => unreachable!(),
        }
    }

    fn prepare(
        &self,
        spec: &RunSpec,
        stdio: [RawFd; 3],
        net: NetJoin,
        cgroup: Option<&RunCgroup>,
    ) -> Result<(Plan, Vec<String>), Error> {
        let mut names: Vec<String> = Vec::new();
        let c = |s: &str| CString::new(s).expect("validated: no NUL");

        let mut env = spec.env.clone();
        for k in &spec.keep_env {
            if let Ok(v) = std::env::var(k) {
                env.entry(k.clone()).or_insert(v);
            }
        }
        let path_var = env.get("PATH").cloned();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        let envp: Vec<CString> = env.iter().map(|(k, v)| c(&format!("{k}={v}"))).collect();
        let argv: Vec<CString> = spec.argv.iter().map(|a| c(a)).collect();

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
        names.push(if prog.contains('/') {
            prog.clone()
        } else {
            format!("{prog}` (searched PATH={}", path_var.as_deref().unwrap_or(DEFAULT_PATH))
        });
        let exec_name = 0;
        let cwd = spec.cwd.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "/".into());
        names.push(cwd.clone());
        let cwd_name = 1;

        let (uid, gid) = if spec.root {
            (0, 0)
        } else {
            (spec.uid.unwrap_or(self.host_uid), spec.gid.unwrap_or(self.host_gid))
        };
        let mounts = MountPlan::prepare(spec, &mut names)?;
        let mut plan = Plan {
            exec_paths,
            exec_name,
            argv_ptrs: Vec::new(),
            argv,
            envp_ptrs: Vec::new(),
            envp,
            cwd: c(&cwd),
            cwd_name,
            cwd_fallback: spec.cwd_fallback,
            tracee_uid_map: c(&format!("{uid} 0 1\n")),
            tracee_gid_map: c(&format!("{gid} 0 1\n")),
            net,
            hostname: spec.hostname.as_deref().map(c),
            supervisor_pidfd: self.self_pidfd.as_raw_fd(),
            mounts,
            rlimits: rlimits::prepare(&spec.limits, cgroup.is_some()),
            wall_time_ns: spec.limits.wall_time.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            last_cap: self.last_cap,
            seccomp: self.seccomp.clone(),
            stdio,
            cgroup: cgroup.map(RunCgroup::raw_fds),
            cpu_time_ns: spec.limits.cpu_time.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            parallelism: parallelism(self.cpus, &spec.limits),
        };
        plan.argv_ptrs = plan.argv.iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect();
        plan.envp_ptrs = plan.envp.iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect();
        Ok((plan, names))
    }

    fn execute(
        &self,
        plan: &Plan,
        names: &[String],
        pending_net: Option<(OwnedFd, OwnedFd)>,
        cgroup: Option<&RunCgroup>,
    ) -> RunResult {
        let shared = match SharedPage::<Shared>::new() {
            Ok(s) => s,
            Err(e) => return RunResult::error(SysError::new("mmap (shared page)", e).to_string()),
        };
        let (pid, pidfd) = match sys::clone_fork(libc::CLONE_NEWPID as u64 | CLONE_PIDFD, None) {
            Err(e) => {
                return RunResult::error(
                    SysError::new("clone3(CLONE_NEWPID)", e).hint("see `capsule check`").to_string(),
                )
            }
            Ok(Forked::Child) => child::pid1(plan, &shared, &self.tracee_stack),
            Ok(Forked::Parent { pid, pidfd }) => (pid, pidfd),
        };
        let net_error = pending_net.and_then(|(ours, theirs)| {
            drop(theirs);
            self.deliver_net(ours)
        });
        let status = sys::waitpid(pid, false);
        drop(pidfd);
        // Every process of the run is gone (PID 1 reaped them): the
        // cgroup's figures are final.
        let stats = cgroup.map(RunCgroup::stats);
        match net_error {
            Some(msg) => RunResult::error(msg),
            None => self.result(plan, names, &shared, status, stats),
        }
    }

    fn result(
        &self,
        plan: &Plan,
        names: &[String],
        shared: &Shared,
        pid1_status: Result<Option<(i32, i32)>, i32>,
        stats: Option<Stats>,
    ) -> RunResult {
        if let Some(f) = shared.failure() {
            return RunResult::error(describe_failure(plan, names, f.step, f.errno, f.path));
        }
        let flags = shared.flags.load(SeqCst);
        if flags & FLAG_TRACEE_REAPED == 0 {
            let how = match pid1_status {
                Ok(Some((_, st))) if libc::WIFSIGNALED(st) => {
                    format!("killed by {}", signal_name(libc::WTERMSIG(st)))
                }
                Ok(Some((_, st))) => format!("exit status {}", libc::WEXITSTATUS(st)),
                Ok(None) => "no status".into(),
                Err(e) => errno_text(e),
            };
            return RunResult::error(format!("the run's PID 1 ended before the program did ({how})"));
        }
        let st = shared.wait_status.load(SeqCst);
        let exec_ns = shared.exec_ns.load(SeqCst);
        let end_ns = shared.end_ns.load(SeqCst);
        let mut r = RunResult {
            status: Status::Exited,
            exit_code: None,
            signal: None,
            // Milliseconds with microsecond precision.
            wall_time_ms: (end_ns.saturating_sub(exec_ns) / 1000) as f64 / 1e3,
            cpu_user_ms: shared.cpu_user_us.load(SeqCst) as f64 / 1e3,
            cpu_system_ms: shared.cpu_system_us.load(SeqCst) as f64 / 1e3,
            peak_memory_bytes: shared.max_rss_kib.load(SeqCst) * 1024,
            accounting: Accounting::Rusage,
            pids_peak: None,
            killed_by_limit: false,
            error: None,
        };
        if let Some(st) = &stats {
            // From the program's cgroup, counted from its execve.
            let at_exec = shared.cgroup_cpu_us_at_exec.load(SeqCst);
            let total = st.user_us + st.system_us;
            // cpu.stat splits user/system by tick sampling; the total is exact.
            let system = st.system_us.min(total.saturating_sub(at_exec));
            let user = total.saturating_sub(at_exec).saturating_sub(system);
            r.cpu_user_ms = user as f64 / 1e3;
            r.cpu_system_ms = system as f64 / 1e3;
            if let Some(peak) = st.memory_peak {
                r.peak_memory_bytes = peak;
            }
            r.pids_peak = st.pids_peak;
            r.accounting = Accounting::Cgroup;
        }
        if libc::WIFEXITED(st) {
            r.exit_code = Some(libc::WEXITSTATUS(st));
        } else if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            r.status = Status::Signaled;
            r.signal = Some(signal_name(sig));
            if sig == libc::SIGXFSZ {
                r.status = Status::OutputLimit;
            }
        }
        let succeeded = r.status == Status::Exited && r.exit_code == Some(0);
        if flags & FLAG_OUTPUT_LIMIT != 0 && !succeeded {
            // The program, or an orphan PID 1 reaped, wrote past the limit
            // and the run did not succeed anyway.
            r.status = Status::OutputLimit;
        }
        if let Some(st) = &stats {
            // MLE, not "signal 9": an OOM kill, or any failure of a run that
            // hit its memory limit (a SIGSEGV after a failed allocation).
            if st.oom_kills > 0 || (st.memory_max_events > 0 && !succeeded) {
                r.status = Status::MemoryLimit;
            }
        } else if plan.cpu_time_ns.is_some() && r.signal.as_deref() == Some("SIGXCPU") {
            // Degraded mode: RLIMIT_CPU sent SIGXCPU at the limit.
            r.status = Status::CpuTimeLimit;
        }
        if flags & FLAG_CPU_TIME != 0 {
            r.status = Status::CpuTimeLimit;
        }
        if flags & FLAG_WALL_TIME != 0 {
            r.status = Status::WallTimeLimit;
            if let Some(limit) = plan.wall_time_ns {
                // The program ran for the whole limit at least.
                r.wall_time_ms = r.wall_time_ms.max((limit / 1000) as f64 / 1e3);
            }
        }
        r.killed_by_limit = matches!(
            r.status,
            Status::WallTimeLimit | Status::CpuTimeLimit | Status::MemoryLimit | Status::OutputLimit
        );
        r
    }
}

/// Most CPUs a run can keep busy at once, of the supervisor's `cpus`.
fn parallelism(cpus: u64, l: &crate::spec::Limits) -> u64 {
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
fn describe_failure(plan: &Plan, names: &[String], step: Step, errno: i32, path: u32) -> String {
    let mut msg = step.describe().to_string();
    if step == Step::Rlimit {
        if let Some(l) = plan.rlimits.get(path as usize) {
            msg = format!("setting {} (setrlimit) to {}", l.field, l.value);
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
        (Step::UserNamespace, _) | (Step::CloneTracee, _) => None,
        _ => None,
    };
    let hint = hint.map(str::to_string).or_else(|| {
        matches!(step, Step::UserNamespace | Step::CloneTracee).then(|| namespaces::userns_hint(errno))
    });
    if let Some(h) = hint {
        msg.push_str("; ");
        msg.push_str(&h);
    }
    msg
}
