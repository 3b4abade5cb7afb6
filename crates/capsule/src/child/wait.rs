//! PID 1's event loop: the time limits, the network log's notifications, reaping.
//!
//! Its reasons in full: docs/child.md ("PID 1's event loop").

use super::cgroup::read_cpu_stat;
use super::fuse::{abort_fuse, join};
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
        if cpu_time_ns != 0 {
            sys::timerfd_at(cpu.as_raw_fd(), exec_ns + cpu_time_ns / parallelism)
                .map_err(|e| Fail::new(Step::Wait, e))?;
        }
    }
    // Without a cgroup, what the run's processes used before execve (the tracee's set-up, a FUSE daemon's start).
    let tree_base_ns = if cpu_time_ns != 0 && plan.cgroup.is_none() { tree_cpu_ns(proc.as_raw_fd()) } else { 0 };
    let limits = TimeLimits {
        wall: wall.as_raw_fd(),
        cpu: cpu.as_raw_fd(),
        cpu_time_ns,
        parallelism,
        proc: proc.as_raw_fd(),
        tree_base_ns,
    };
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
    /// The run's procfs, where a run without a cgroup counts its processes' CPU time.
    proc: RawFd,
    /// Without a cgroup: [`tree_cpu_ns`] when the program had just exec'd.
    tree_base_ns: u64,
}

/// The CPU-time timer fired: FLAG_CPU_TIME when the run has used up its
/// CPU time, else the timer is re-armed for the next possible moment and
/// 0 returned.
pub(crate) fn cpu_timer(plan: &Plan, shared: &Shared, l: &TimeLimits) -> Result<u32, Fail> {
    let mut b = [0u8; 8];
    let _ = sys::read(l.cpu, &mut b);
    let limit = if l.cpu_time_ns == 0 { u64::MAX } else { l.cpu_time_ns };
    let mut used = cpu_used_ns(plan, shared, l);
    // Read twice before a kill: a child's time moving to its parent's `cutime` mid-walk may count twice once.
    if used >= limit && plan.cgroup.is_none() {
        used = cpu_used_ns(plan, shared, l);
    }
    if used >= limit {
        return Ok(FLAG_CPU_TIME);
    }
    // Without a cgroup /proc counts in clock ticks: poll at least every TREE_POLL_NS near the limit.
    let floor = if plan.cgroup.is_some() { 1_000_000 } else { TREE_POLL_NS };
    let next = ((limit - used) / l.parallelism).max(floor);
    sys::timerfd_at(l.cpu, sys::clock_monotonic_ns() + next).map_err(|e| Fail::new(Step::Wait, e))?;
    Ok(0)
}

/// What the network log's reader works on.
pub(crate) struct ReadJob<'a> {
    log: &'a NetLog,
    listener: RawFd,
    notif: sys::SeccompNotif,
    /// For `explain`'s file calls: the run's mount plan and procfs.
    view: Option<&'a crate::plan::mounts::WatchView>,
    proc: RawFd,
}

/// The reader: a child sharing PID 1's memory (and so the log) that reads
/// the destination of one notified call from the caller's memory and
/// records it. Raw syscalls only (it shares PID 1's errno), no allocation.
pub(crate) fn read_destination(job: &ReadJob) -> ! {
    let n = &job.notif;
    let caller = netlog::Caller { pid: n.pid as i32, listener: job.listener, id: n.id };
    if n.arch == crate::sys::seccomp::AUDIT_ARCH_NATIVE && super::fswatch::is_fs_call(n.nr) {
        if let Some(view) = job.view {
            super::fswatch::observe(&job.log.fs, view, job.proc, n.pid as i32, n.nr, &n.args, &caller);
        }
    } else {
        netlog::observe(job.log, n.arch, n.nr, &n.args, &caller);
    }
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
    let job = ReadJob { log, listener, notif: *n, view: plan.watch.as_ref(), proc: limits.proc };
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
    let fs_call = n.arch == crate::sys::seccomp::AUDIT_ARCH_NATIVE && super::fswatch::is_fs_call(n.nr);
    if !done && !fs_call && sys::seccomp_notif_id_valid(listener, n.id) {
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

/// CPU time the run used since the program's execve, ns: its cgroup's, else every process's of the run.
pub(crate) fn cpu_used_ns(plan: &Plan, shared: &Shared, l: &TimeLimits) -> u64 {
    let Some(cg) = &plan.cgroup else { return tree_cpu_ns(l.proc).saturating_sub(l.tree_base_ns) };
    let (user, system) = read_cpu_stat(cg.cpu_stat).unwrap_or((0, 0));
    (user + system).saturating_sub(shared.cgroup_cpu_us_at_exec.load(SeqCst)) * 1000
}

/// How often, at most, PID 1 walks the run's processes for their CPU time (no cgroup): the kill comes this
/// late at most, and a tick or two of waited-for children's time (below).
pub(crate) const TREE_POLL_NS: u64 = 5_000_000;

/// The kernel's USER_HZ, the unit of /proc/N/stat's times: 100 on every architecture capsule runs on.
const TICK_NS: u64 = 10_000_000;

/// CPU time of every process of a run without a cgroup, ns: what PID 1 reaped (its children's rusage, exact)
/// and, for each process still there, its own (its CPU clock, exact) and its waited-for children's
/// (`/proc/N/stat`, whole clock ticks). Orphans become PID 1's children, so every process of the run is in one
/// of these. No allocation.
pub(crate) fn tree_cpu_ns(proc: RawFd) -> u64 {
    let (user, system, _) = sys::rusage_children();
    let mut ns = (user + system) * 1000;
    for_each_process(proc, &mut |name| {
        let pid = name.iter().fold(0i32, |a, b| a.saturating_mul(10).saturating_add((b - b'0') as i32));
        // Gone meanwhile: its time is in its parent's, read now or at the next walk.
        if let Ok(own) = sys::process_cpu_ns(pid) {
            ns += own + children_ticks(proc, name) * TICK_NS;
        }
    });
    ns
}

/// Calls `f` with the pid (digits) of every process in the run's procfs `proc` but PID 1. No allocation.
pub(crate) fn for_each_process(proc: RawFd, f: &mut dyn FnMut(&[u8])) {
    let Ok(dir) = sys::openat(proc, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0) else { return };
    let mut ents = [0u8; 4096];
    while let Ok(n) = sys::getdents64(dir.as_raw_fd(), &mut ents) {
        if n == 0 {
            break;
        }
        for name in sys::dirent_names(&ents[..n]).map_while(Result::ok) {
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) && name != b"1" {
                f(name);
            }
        }
    }
}

/// cutime + cstime of process `pid` (digits) in clock ticks; 0 when it is gone.
fn children_ticks(proc: RawFd, pid: &[u8]) -> u64 {
    let mut at = [0u8; 32];
    let Some(path) = join(&mut at, &[pid, b"/stat"]) else { return 0 };
    let Ok(file) = sys::openat(proc, path, libc::O_RDONLY, 0) else { return 0 };
    let mut buf = [0u8; 1024];
    let Ok(n) = sys::read(file.as_raw_fd(), &mut buf) else { return 0 };
    parse_children_ticks(&buf[..n])
}

/// The waited-for children's CPU times in a `/proc/N/stat` line, summed: fields 16 and 17, counted after the
/// name's closing parenthesis (the name may hold spaces and parentheses of its own).
pub(crate) fn parse_children_ticks(line: &[u8]) -> u64 {
    let Some(close) = line.iter().rposition(|&b| b == b')') else { return 0 };
    let fields = line[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty());
    // After the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime.
    fields
        .skip(13)
        .take(2)
        .map(|f| f.iter().take_while(|b| b.is_ascii_digit()).fold(0u64, |a, b| a * 10 + (b - b'0') as u64))
        .sum()
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

#[cfg(test)]
mod tests {
    use super::parse_children_ticks;

    #[test]
    fn children_ticks_are_counted_after_the_name() {
        let line = b"42 (a) b (c) R 1 42 42 0 -1 4194304 100 0 0 0 250 30 7 3 20 0 1 0 12345 0\n";
        assert_eq!(parse_children_ticks(line), 7 + 3);
        assert_eq!(parse_children_ticks(b"42 (x"), 0);
        assert_eq!(parse_children_ticks(b""), 0);
    }
}
