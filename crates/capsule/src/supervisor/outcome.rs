//! What a finished run produced: its result, and the message for a failed step.

use std::sync::atomic::Ordering::SeqCst;

use crate::child::{
    Shared, Step, FLAG_CPU_TIME, FLAG_FORBIDDEN, FLAG_KILLED, FLAG_OUTPUT_LIMIT, FLAG_TRACEE_REAPED, FLAG_WALL_TIME,
};
use crate::error::errno_text;
use crate::host::cgroups::Stats;
use crate::host::container::{self, Refusal};
use crate::plan::rlimits::Rlimit;
use crate::proto::result::{signal_name, Accounting, RunResult, Status};

use super::*;

impl Supervisor {
    /// `egress`: the proxy's report and how many it had no room for.
    pub(crate) fn result(
        &self,
        r: &Running,
        pid1_status: Option<i32>,
        stats: Option<Stats>,
        egress: Option<(Vec<crate::proto::result::NetworkEntry>, u64)>,
    ) -> RunResult {
        if let Some(why) = r.p.never() {
            return RunResult::error(format!("the run's PID 1 could not be created: {why}"));
        }
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
            violations: None,
            violations_dropped: None,
            network: None,
            network_dropped: None,
            csw_voluntary: Some(shared.csw_voluntary.load(SeqCst)),
            csw_forced: Some(shared.csw_forced.load(SeqCst)),
        };
        let mut net_entries = Vec::new();
        if let Some(log) = &r.p.net_log {
            let (entries, dropped) = log.entries();
            if let Some((mut network, over)) = egress {
                network.extend(super::egress::direct_entries(&entries));
                res.network = Some(network);
                res.network_dropped = (over > 0).then_some(over);
            }
            // (`explain` or `egress` alone watch the network without the log's field.)
            if r.req.spec.net_log {
                res.net_log = Some(entries.clone());
                res.net_log_dropped = (dropped > 0).then_some(dropped);
            }
            net_entries = entries;
        }
        if let Some(st) = &stats {
            // From the program's cgroup, counted from its execve (PID 1
            // read the cgroup's absolute figure, `st` counts from the run's start).
            let at_exec = shared.cgroup_cpu_us_at_exec.load(SeqCst).saturating_sub(st.cpu_start_us);
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
        let plan = r.p.run.as_ref().map(|p1| &p1.plan.mounts);
        let log = r.p.net_log.as_deref().map(|a| &**a);
        let (list, dropped) = super::explain::violations(&r.req.spec, &self.home, plan, log, &res, &net_entries);
        if !list.is_empty() || r.req.spec.explain {
            res.violations = Some(list);
        }
        res.violations_dropped = (dropped > 0).then_some(dropped);
        res
    }
}

/// Turns a child failure into a message naming the step, the path and the
/// errno, with a fix where the user has one.
pub(crate) fn describe_failure(rlimits: &[Rlimit], names: &[String], step: Step, errno: i32, path: u32) -> String {
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
    let in_container = match step {
        Step::ProcMount | Step::Proc => {
            container::hint(Refusal::MaskedProc, "a fresh procfs in the run's PID namespace", errno)
        }
        Step::IpcNamespace | Step::Hostname | Step::CgroupNamespace => {
            container::hint(Refusal::Seccomp, step.describe(), errno)
        }
        _ => None,
    };
    let hint = in_container
        .or(hint.map(str::to_string))
        .or_else(|| matches!(step, Step::UserNamespace | Step::CloneTracee).then(|| namespaces::userns_hint(errno)));
    if let Some(h) = hint {
        msg.push_str("; ");
        msg.push_str(&h);
    }
    msg
}
