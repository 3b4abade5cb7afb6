//! `capsule-cli __session-holder`: a session's first process, inside the
//! session's run under its whole policy (docs/sessions.md). Starts the
//! commands its agent sends on descriptor 3, enforces each one's own wall-
//! and CPU-time limits, and reports their ends.
//!
//! The holder is the sessions' child subreaper: a process a command leaves
//! behind when its parent exits comes to the holder, not to PID 1, so the
//! processes of a command with a CPU-time limit are followed from parent to
//! child (`/proc`, every [`CPU_TICK`]) and their time summed as PID 1 sums a
//! run's without cgroups: the CPU clocks of the live ones, the waited-for
//! children in their `/proc/N/stat`, the rusage of those the holder reaped.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use capsule::proto::session::{Ended, ExecReq, FromHolder, ToHolder, HOLDER_FD};
use capsule::proto::wire;
use capsule::sys;

/// How often the processes of commands with a CPU-time limit are summed.
const CPU_TICK: Duration = Duration::from_millis(10);
/// Longest wait, after a command killed at its CPU-time limit, for its other processes to go.
const KILLED_WAIT: Duration = Duration::from_secs(1);
/// `/proc/N/stat`'s clock tick (USER_HZ, 100 on every Linux architecture capsule runs on).
const TICK_NS: u64 = 10_000_000;

/// One command the holder started.
struct Child {
    xid: u64,
    pid: i32,
    pidfd: Option<OwnedFd>,
    start: Instant,
    deadline: Option<Instant>,
    timed_out: bool,
    /// The command's CPU-time limit, ns.
    cpu_limit: Option<u64>,
    cpu_exceeded: bool,
    /// Rusage of processes of the command the holder reaped (not the command itself): user, system µs.
    orphans_us: (u64, u64),
    /// Killed at its CPU-time limit and reaped, when: reported once its other processes are gone too.
    ended: Option<(sys::Reaped, Instant)>,
}

/// A process followed for a command: which, and its start time (a reused pid is another process).
#[derive(Clone, Copy)]
struct Followed {
    xid: u64,
    start: u64,
}

/// What `/proc/N/stat` tells about a process.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    ppid: i32,
    pgrp: i32,
    /// cutime + cstime: its waited-for children's CPU, clock ticks.
    children_ticks: u64,
    start: u64,
}

/// The session's holder (`capsule-cli __session-holder`): its run's first
/// process, under the session's whole policy. Starts the commands the
/// agent sends on descriptor 3 and reports their ends; exits when the
/// agent's end closes (the session's PID 1 then ends the rest).
pub fn holder_main() -> ExitCode {
    // The session's programs (the same user) may signal it, never take its socket or memory (/proc/PID/fd,
    // ptrace, pidfd_getfd).
    if sys::prctl(libc::PR_SET_DUMPABLE, 0).is_err() {
        return ExitCode::from(1);
    }
    // Orphans of commands come here, where their time is counted for their command and they are reaped.
    if sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1).is_err() {
        return ExitCode::from(1);
    }
    // Descriptor 3 is the agent's socket: owned here, close-on-exec, the inherited number closed.
    let Ok(sock) = sys::dup_cloexec(HOLDER_FD) else { return ExitCode::from(1) };
    sys::close(HOLDER_FD);
    // SIGCHLD wakes the loop for orphans, which have no pidfd here.
    let Ok(chld) = sys::signalfd_for(&[libc::SIGCHLD]) else { return ExitCode::from(1) };
    if wire::send(sock.as_raw_fd(), &FromHolder::Ready, &[]).is_err() {
        return ExitCode::from(1);
    }
    let mut h = Holder { children: Vec::new(), followed: HashMap::new(), me: std::process::id() as i32 };
    loop {
        let mut pfds = vec![
            libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: chld.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        pfds.extend(h.children.iter().filter_map(|c| c.pidfd.as_ref()).map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        if sys::poll(&mut pfds, h.timeout_ms()).is_err() {
            return ExitCode::from(1);
        }
        if pfds[1].revents != 0 {
            sys::drain_signalfd(chld.as_raw_fd());
        }
        if pfds[0].revents != 0 {
            match wire::recv::<ToHolder>(sock.as_raw_fd()) {
                Ok(Some((msg, fds))) => {
                    if let Some(m) = h.handle(msg, fds) {
                        let _ = wire::send(sock.as_raw_fd(), &m, &[]);
                    }
                }
                Ok(None) | Err(_) => return ExitCode::SUCCESS,
            }
        }
        h.enforce();
        for m in h.reap() {
            let _ = wire::send(sock.as_raw_fd(), &m, &[]);
        }
    }
}

struct Holder {
    children: Vec<Child>,
    /// Processes of commands with a CPU-time limit, by pid.
    followed: HashMap<i32, Followed>,
    me: i32,
}

impl Holder {
    /// Until the next deadline or tick (-1: none).
    fn timeout_ms(&self) -> i32 {
        let now = Instant::now();
        let mut timeout: Option<Duration> = None;
        let mut soonest = |d: Duration| timeout = Some(timeout.map_or(d, |t| t.min(d)));
        for c in &self.children {
            if let (Some(d), false) = (c.deadline, c.timed_out) {
                soonest(d.saturating_duration_since(now));
            }
            if c.cpu_limit.is_some() {
                soonest(CPU_TICK);
            }
            if c.pidfd.is_none() {
                // No pidfd (refused by the policy): looked at every 20 ms.
                soonest(Duration::from_millis(20));
            }
        }
        timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32)
    }

    /// Wall-time limits reached; CPU-time limits reached (their processes killed).
    fn enforce(&mut self) {
        let now = Instant::now();
        for c in self.children.iter_mut() {
            if c.deadline.is_some_and(|d| now >= d) && !c.timed_out {
                c.timed_out = true;
                let _ = sys::kill(-c.pid, libc::SIGKILL);
            }
        }
        if !self.children.iter().any(|c| c.cpu_limit.is_some()) {
            return;
        }
        self.follow();
        for i in 0..self.children.len() {
            let c = &self.children[i];
            let Some(limit) = c.cpu_limit else { continue };
            if c.cpu_exceeded || self.cpu_ns(c) >= limit {
                // Killed again at every tick: a process forked meanwhile is followed, then killed.
                self.children[i].cpu_exceeded = true;
                self.kill_all(self.children[i].xid, self.children[i].pid);
            }
        }
    }

    /// Follows new processes from parent to child (or, for one whose parent had gone before it was seen, by
    /// its process group) and forgets those gone.
    fn follow(&mut self) {
        let procs = scan_proc(self.me);
        self.followed.retain(|pid, f| procs.get(pid).is_some_and(|s| s.start == f.start));
        for c in self.children.iter().filter(|c| c.cpu_limit.is_some() && c.ended.is_none()) {
            if let Some(s) = procs.get(&c.pid) {
                self.followed.entry(c.pid).or_insert(Followed { xid: c.xid, start: s.start });
            }
        }
        // Parents before children, whatever their pid order: until nothing more is found.
        loop {
            let mut found = false;
            for (&pid, s) in &procs {
                if self.followed.contains_key(&pid) {
                    continue;
                }
                let by_parent = self.followed.get(&s.ppid).map(|f| f.xid);
                let by_group = || {
                    (s.ppid == self.me)
                        .then(|| self.children.iter().find(|c| c.cpu_limit.is_some() && c.pid == s.pgrp))
                        .flatten()
                        .map(|c| c.xid)
                };
                if let Some(xid) = by_parent.or_else(by_group) {
                    self.followed.insert(pid, Followed { xid, start: s.start });
                    found = true;
                }
            }
            if !found {
                break;
            }
        }
    }

    /// The CPU time of command `c`'s processes so far, ns.
    fn cpu_ns(&self, c: &Child) -> u64 {
        let mut ns = (c.orphans_us.0 + c.orphans_us.1) * 1000;
        for (&pid, f) in &self.followed {
            if f.xid != c.xid {
                continue;
            }
            // Gone meanwhile: its time is in its parent's, read now or at the next tick.
            if let (Ok(own), Some(s)) = (sys::process_cpu_ns(pid), read_stat(pid)) {
                ns += own + s.children_ticks * TICK_NS;
            }
        }
        ns
    }

    fn kill_all(&self, xid: u64, pid: i32) {
        // A reaped command's pid may be another process's by now: only its followed processes.
        if !self.children.iter().any(|c| c.xid == xid && c.ended.is_some()) {
            let _ = sys::kill(-pid, libc::SIGKILL);
        }
        for (&p, f) in &self.followed {
            if f.xid == xid {
                let _ = sys::kill(p, libc::SIGKILL);
            }
        }
    }

    /// Reaps every child that ended: a command's end is reported (one killed at its CPU-time limit once its
    /// other processes are gone too, their time in its result); an orphan's rusage goes to its command.
    fn reap(&mut self) -> Vec<FromHolder> {
        let mut ends = Vec::new();
        while let Ok(Some(r)) = sys::wait4_nohang(-1) {
            let followed = self.followed.remove(&r.pid);
            let Some(k) = self.children.iter().position(|c| c.pid == r.pid && c.ended.is_none()) else {
                if let Some(c) = followed.and_then(|f| self.children.iter_mut().find(|c| c.xid == f.xid)) {
                    c.orphans_us.0 += r.user_us;
                    c.orphans_us.1 += r.system_us;
                }
                continue;
            };
            if self.children[k].cpu_exceeded {
                // A process forked since the last tick is killed too.
                self.follow();
                self.kill_all(self.children[k].xid, r.pid);
                self.children[k].ended = Some((r, Instant::now()));
                continue;
            }
            ends.push(self.end(k, r));
        }
        while let Some(k) = self.children.iter().position(|c| {
            c.ended
                .is_some_and(|(_, at)| at.elapsed() >= KILLED_WAIT || !self.followed.values().any(|f| f.xid == c.xid))
        }) {
            let (r, _) = self.children[k].ended.expect("found ended");
            ends.push(self.end(k, r));
        }
        ends
    }

    /// Command `k`'s end, its own process reaped as `r`.
    fn end(&mut self, k: usize, r: sys::Reaped) -> FromHolder {
        let c = self.children.swap_remove(k);
        // What it leaves running is the session's from now on.
        self.followed.retain(|_, f| f.xid != c.xid);
        FromHolder::Exited(Ended {
            xid: c.xid,
            status: r.status,
            user_us: r.user_us + c.orphans_us.0,
            system_us: r.system_us + c.orphans_us.1,
            max_rss_kb: r.max_rss_kib,
            wall_us: c.start.elapsed().as_micros() as u64,
            timed_out: c.timed_out,
            cpu_exceeded: c.cpu_exceeded,
        })
    }

    /// One message from the agent; what to answer.
    fn handle(&mut self, msg: ToHolder, fds: Vec<OwnedFd>) -> Option<FromHolder> {
        match msg {
            ToHolder::Term => {
                // Every process of the session this one may signal but itself and PID 1.
                let _ = sys::kill(-1, libc::SIGTERM);
                None
            }
            ToHolder::Kill { xid } => {
                if let Some(c) = self.children.iter().find(|c| c.xid == xid) {
                    self.kill_all(xid, c.pid);
                }
                None
            }
            ToHolder::Exec { xid, req } => {
                if req.cpu_time_ms.is_some() && !Path::new("/proc/self/stat").exists() {
                    let error = "a command's CPU-time limit needs /proc in the session".to_string();
                    return Some(FromHolder::Failed { xid, error });
                }
                Some(match spawn(&req, fds) {
                    Ok(child) => {
                        let pid = child.id() as i32;
                        let pidfd = sys::pidfd_open(pid).ok();
                        let now = Instant::now();
                        self.children.push(Child {
                            xid,
                            pid,
                            pidfd,
                            start: now,
                            deadline: req.wall_time_ms.map(|ms| now + Duration::from_millis(ms)),
                            timed_out: false,
                            cpu_limit: req.cpu_time_ms.map(|ms| ms.saturating_mul(1_000_000)),
                            cpu_exceeded: false,
                            orphans_us: (0, 0),
                            ended: None,
                        });
                        FromHolder::Started { xid, pid }
                    }
                    Err(e) => FromHolder::Failed { xid, error: e },
                })
            }
        }
    }
}

fn spawn(req: &ExecReq, fds: Vec<OwnedFd>) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..]);
    for e in &req.env {
        if let Some((k, v)) = e.split_once('=') {
            cmd.env(k, v);
        }
    }
    if let Some(d) = &req.cwd {
        cmd.current_dir(Path::new(d));
    }
    let mut fds = fds;
    // With a memory limit, the agent's last descriptor is the command's cgroup.procs.
    if req.memory.is_some() {
        let procs = fds.pop().ok_or("the command's cgroup did not come")?;
        sys::join_cgroup_before_exec(&mut cmd, procs);
    }
    if req.detach || fds.is_empty() {
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    } else {
        let mut fds = fds.into_iter();
        let (Some(i), Some(o), Some(e)) = (fds.next(), fds.next(), fds.next()) else {
            return Err("the command's streams did not come".into());
        };
        cmd.stdin(Stdio::from(i)).stdout(Stdio::from(o)).stderr(Stdio::from(e));
    }
    // A process group of its own: killed as one (limits, a client gone).
    cmd.process_group(0);
    cmd.spawn().map_err(|e| format!("{:?}: {e}", req.argv[0]))
}

/// Every process of the session but PID 1 and the holder, as `/proc` shows them now.
fn scan_proc(me: i32) -> HashMap<i32, Stat> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid == 1 || pid == me {
            continue;
        }
        if let Some(s) = read_stat(pid) {
            out.insert(pid, s);
        }
    }
    out
}

fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// The fields of a `/proc/N/stat` line the holder uses, counted after the name's closing parenthesis (the
/// name may hold spaces and parentheses of its own).
fn parse_stat(line: &[u8]) -> Option<Stat> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let f: Vec<&[u8]> = line[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty()).collect();
    let n = |i: usize| -> Option<u64> { std::str::from_utf8(f.get(i)?).ok()?.trim().parse().ok() };
    // After the name: state(0) ppid(1) pgrp(2) ... cutime(13) cstime(14) ... starttime(19).
    Some(Stat { ppid: n(1)? as i32, pgrp: n(2)? as i32, children_ticks: n(13)? + n(14)?, start: n(19)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        let line = b"42 (a) b (c)) S 7 42 42 0 -1 4194304 100 0 0 0 5 6 3 4 20 0 1 0 12345 100 10\n";
        assert_eq!(parse_stat(line), Some(Stat { ppid: 7, pgrp: 42, children_ticks: 7, start: 12345 }));
        assert_eq!(parse_stat(b"42 (x"), None);
        assert_eq!(parse_stat(b"42 (x) S 1 2"), None);
    }
}
