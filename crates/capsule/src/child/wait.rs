//! PID 1's event loop: the time limits, the network log's notifications, reaping.
//!
//! Its reasons in full: docs/child.md ("PID 1's event loop").

use super::cgroup::read_cpu_stat;
use super::fuse::abort_fuse;
use super::netlog::{self, NetLog};
use super::pid1::Never;
use super::seccomp::is_net_log;
use super::shared::{
    run_filter, Plan, Shared, FLAG_CPU_TIME, FLAG_FORBIDDEN, FLAG_KILLED, FLAG_OUTPUT_LIMIT, FLAG_TRACEE_REAPED,
    FLAG_WALL_TIME,
};
use super::step::{Fail, Step};
use crate::sys::{self, Arena};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering::SeqCst;

/// PID 1's event loop: arms the wall-time timer at the program's execve,
/// enforces it, reaps every process, and ends the run when the first
/// tracee exits.
pub(crate) fn pid1_wait(
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
        // CPU time has no timer: check when the limit could first be reached (`cpu_timer` re-arms).
        if let (true, Some(_)) = (cpu_time_ns != 0, &plan.cgroup) {
            sys::timerfd_at(cpu.as_raw_fd(), exec_ns + cpu_time_ns / parallelism)
                .map_err(|e| Fail::new(Step::Wait, e))?;
        }
    }
    let limits = TimeLimits { wall: wall.as_raw_fd(), cpu: cpu.as_raw_fd(), cpu_time_ns, parallelism };
    // Short turns from here on, as the supervisor's (reset on fork: the network log's reader gets the default): the
    // program's exit may wake it on a CPU busy with the next run's preparation, and the result waits for it.
    if plan.slice_ns != 0 {
        let _ = sys::short_slice(plan.slice_ns);
    }
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
            // A call the policy forbids, stopped in the call: record it and kill the run. Or, with the
            // network log, the log's (the filter run again ends in its epilogue): record and go on.
            // (ENOENT: the caller died meanwhile, nothing to report.)
            if let Ok(n) = sys::seccomp_notif_recv(listener) {
                let data = crate::sys::seccomp::seccomp_data(n.nr, n.arch, n.instruction_pointer, &n.args);
                let filter = run_filter(plan, arena);
                match (&plan.net_log, filter) {
                    (Some(log), Some((program, _, net_log_from))) if is_net_log(program, net_log_from, &data) => {
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
pub(crate) struct TimeLimits {
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
pub(crate) fn cpu_timer(plan: &Plan, shared: &Shared, l: &TimeLimits) -> Result<u32, Fail> {
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
pub(crate) struct ReadJob<'a> {
    log: &'a NetLog,
    listener: RawFd,
    notif: sys::SeccompNotif,
}

/// The reader: a child sharing PID 1's memory (and so the log) that reads
/// the destination of one notified call from the caller's memory and
/// records it. Raw syscalls only (it shares PID 1's errno), no allocation.
pub(crate) fn read_destination(job: &ReadJob) -> ! {
    let n = &job.notif;
    let caller = netlog::Caller { pid: n.pid as i32, listener: job.listener, id: n.id };
    netlog::observe(job.log, n.arch, n.nr, &n.args, &caller);
    sys::exit(0)
}

/// A call the network log records: a child of PID 1 sharing its memory
/// reads and records its destination, then the call goes on. PID 1 keeps
/// enforcing the limits meanwhile (the read may stall); when one is
/// reached first, the run is killed, the reader too, and the flag
/// returned.
pub(crate) fn net_log_call(
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
pub(crate) fn kill_run(plan: &Plan) {
    if let Some(cg) = &plan.cgroup {
        if cg.kill >= 0 && sys::write_all(cg.kill, b"1").is_ok() {
            return;
        }
    }
    let _ = sys::kill(-1, libc::SIGKILL);
}

/// CPU time the program's cgroup used since execve, ns.
pub(crate) fn cpu_used_ns(plan: &Plan, shared: &Shared) -> u64 {
    let Some(cg) = &plan.cgroup else { return 0 };
    let (user, system) = read_cpu_stat(cg.cpu_stat).unwrap_or((0, 0));
    (user + system).saturating_sub(shared.cgroup_cpu_us_at_exec.load(SeqCst)) * 1000
}

/// Notes a reaped process; when it is the program's first process, the run
/// is over: kill and reap the rest so their CPU time is in PID 1's rusage,
/// record the result, exit.
pub(crate) fn reaped(plan: &Plan, shared: &Shared, tracee: i32, pid: i32, status: i32, reaper: &Reaper) {
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
    let (voluntary, forced) = sys::csw_children();
    shared.csw_voluntary.store(voluntary, SeqCst);
    shared.csw_forced.store(forced, SeqCst);
    // The result is complete: tell the supervisor now, not when this
    // process has finished exiting (tearing down the namespaces takes a
    // while and happens after the result is on its way).
    let _ = sys::write(plan.done, b"d");
    sys::exit(0);
}

/// How long a killed run's processes may take to go before PID 1 looks
/// for FUSE connections keeping them (and again after each such pause).
pub(crate) const STUCK_MS: i32 = 200;

/// What PID 1 reaps the rest of a run with.
pub(crate) struct Reaper {
    /// The SIGCHLD signalfd.
    pub(crate) sigchld: RawFd,
    /// The run's procfs.
    pub(crate) proc: RawFd,
    /// /sys/fs/fuse/connections as the supervisor sees it, or -1.
    pub(crate) fusectl: RawFd,
}

/// The next child reaped (pid, wait status); None when none is left.
/// When none has gone for STUCK_MS, one may be stuck on a FUSE request
/// (see `abort_fuse`): the run's connections are aborted.
pub(crate) fn reap_next(r: &Reaper) -> Option<(i32, i32)> {
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
