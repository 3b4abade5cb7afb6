//! Sessions (docs/sessions.md): a run kept by the agent across commands.
//!
//! A session is an ordinary run of the agent, not tied to any connection
//! ([`SESSION_CONN`]), whose program is the holder (`capsule-cli
//! __session-holder`, under the session's whole policy). The agent sends it
//! each command with its streams over a socket; the holder starts it with
//! `fork`/`execve` (so under the same namespaces, mounts, filter, Landlock
//! domain, limits and cgroup) and reports its end. The holder is
//! non-dumpable: the session's programs, the same user, can signal it but
//! not reach its descriptors or memory. What it reports is only answered to
//! the command's client, never acted on.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::host::cgroups::CommandStats;
use crate::proto::result::{signal_name, Accounting, RunResult, Status};
use crate::proto::session::{
    check_name, Ended, ExecReq, FromHolder, Publish, SessionAnswer, SessionInfo, SessionReq, ToHolder,
    DEFAULT_GRACE_MS, HOLDER_ARG, HOLDER_FD, MAX_PORTS,
};
use crate::proto::spec::RunSpec;
use crate::proto::wire::{self, ServerMsg};

use super::*;

/// The connection a session's run belongs to: none (the agent keeps it).
pub(crate) const SESSION_CONN: usize = usize::MAX;
/// Most sessions an agent keeps at once.
pub(crate) const MAX_SESSIONS: usize = 256;
/// Longest wall- or CPU-time limit of a command: 30 days.
const MAX_COMMAND_TIME_MS: u64 = 30 * 24 * 3600 * 1000;
/// How often a stopping session is looked at for processes left.
const STOP_TICK: Duration = Duration::from_millis(20);

/// A client waiting for an answer: its connection and request id.
type Waiter = (usize, ClientId);

/// A command a client waits for.
pub(crate) struct Exec {
    xid: u64,
    client: Option<Waiter>,
    detach: bool,
    /// The session cgroup's OOM kills when it was sent (with cgroups).
    oom_kills: Option<u64>,
    /// Its own cgroup, with `memory`.
    cgroup: Option<crate::host::cgroups::CommandCgroup>,
}

pub(crate) struct Session {
    /// The run's client id (`ClientId::Binary(sid)` on [`SESSION_CONN`]).
    pub(crate) sid: u64,
    pub(crate) name: String,
    /// The agent's end of the holder's socket (non-blocking); None once it ended.
    pub(crate) sock: Option<OwnedFd>,
    started: Instant,
    last_used: Instant,
    idle: Option<Duration>,
    lifetime: Option<Duration>,
    grace: Duration,
    /// The `start` request, answered when the holder is ready.
    start: Option<Waiter>,
    ready: bool,
    execs: Vec<Exec>,
    /// Stopping: SIGKILL at this time (or when no process is left).
    stop_at: Option<Instant>,
    stop_waiters: Vec<Waiter>,
    next_xid: u64,
    /// Published ports' host listeners, bound at the start, served once the session runs.
    to_publish: Vec<(std::net::TcpListener, Publish)>,
    host_ports: Vec<u16>,
    /// The ports served (ended with the session).
    forwards: Vec<super::ports::Forward>,
    /// Cgroups of ended commands whose processes live on (removed once empty).
    cgroups: Vec<crate::host::cgroups::CommandCgroup>,
}

impl Loop {
    /// A client's session request (long-lived supervisors only).
    pub(crate) fn session(
        &mut self,
        sup: &mut Supervisor,
        conn: usize,
        id: ClientId,
        req: SessionReq,
        fds: Vec<OwnedFd>,
    ) {
        if self.once || (self.agent.is_some() && self.listener.is_none()) {
            let error = "sessions are kept by a long-lived supervisor (your agent, `capsule serve`), and this one is \
                         one-shot or retired"
                .to_string();
            return self.session_answer(conn, &id, SessionAnswer::Error { error });
        }
        if let Some(life) = &self.agent {
            life.mark_used();
        }
        let answer = match req {
            SessionReq::Start { name, spec, idle_ms, lifetime_ms, grace_ms, publish, host_ports } => {
                let times = (idle_ms, lifetime_ms, grace_ms);
                match self.session_start(sup, conn, id.clone(), name, *spec, times, publish, host_ports) {
                    Ok(()) => return,
                    Err(error) => SessionAnswer::Error { error },
                }
            }
            SessionReq::Exec(req) => match self.session_exec(conn, id.clone(), req, fds) {
                Ok(()) => return,
                Err(error) => SessionAnswer::Error { error },
            },
            SessionReq::List => SessionAnswer::List { sessions: self.session_list() },
            SessionReq::Stop { name, grace_ms } => {
                let Some(s) = self.sessions.iter_mut().find(|s| s.name == name) else {
                    let error = format!("no session named {name:?}");
                    return self.session_answer(conn, &id, SessionAnswer::Error { error });
                };
                if let Some(g) = grace_ms {
                    s.grace = Duration::from_millis(g);
                }
                s.stop_waiters.push((conn, id));
                let sid = s.sid;
                return self.session_begin_stop(sid);
            }
        };
        self.session_answer(conn, &id, answer);
    }

    #[allow(clippy::too_many_arguments)]
    fn session_start(
        &mut self,
        sup: &mut Supervisor,
        conn: usize,
        id: ClientId,
        name: String,
        mut spec: RunSpec,
        (idle_ms, lifetime_ms, grace_ms): (Option<u64>, Option<u64>, Option<u64>),
        publish: Vec<Publish>,
        host_ports: Vec<u16>,
    ) -> Result<(), String> {
        check_name(&name)?;
        if publish.len() + host_ports.len() > MAX_PORTS {
            return Err(format!("at most {MAX_PORTS} ports per session"));
        }
        if host_ports.contains(&0) {
            return Err("--host-port: 0 is not a port".into());
        }
        if (!publish.is_empty() || !host_ports.is_empty()) && spec.share_net {
            return Err("--publish and --host-port need the session's own network (not --share-net)".into());
        }
        if self.sessions.iter().any(|s| s.name == name) {
            return Err(format!("a session named {name:?} exists already"));
        }
        if self.sessions.len() >= MAX_SESSIONS {
            return Err(format!("this agent keeps {MAX_SESSIONS} sessions already"));
        }
        let exe = std::fs::read_link("/proc/self/exe").map_err(|e| format!("locating capsule-cli: {e}"))?;
        spec.argv = vec![exe.to_string_lossy().into_owned(), HOLDER_ARG.into()];
        spec.inherit_fds = vec![HOLDER_FD];
        spec.stdin = None;
        spec.stdout = None;
        spec.stderr = None;
        spec.controlling_tty = false;
        sup.check_request(&spec)?;
        let to_publish = publish
            .into_iter()
            .map(|p| super::ports::bind_published(&p).map(|l| (l, p)))
            .collect::<Result<Vec<_>, String>>()?;
        let (mine, theirs) =
            sys::socketpair_stream().map_err(|e| format!("socketpair: {}", crate::error::errno_text(e)))?;
        sys::set_nonblocking(mine.as_raw_fd(), true).map_err(|e| format!("O_NONBLOCK: {e}"))?;
        let sid = self.next_session;
        self.next_session += 1;
        let now = Instant::now();
        self.sessions.push(Session {
            sid,
            name,
            sock: Some(mine),
            started: now,
            last_used: now,
            idle: idle_ms.map(Duration::from_millis),
            lifetime: lifetime_ms.map(Duration::from_millis),
            grace: Duration::from_millis(grace_ms.unwrap_or(DEFAULT_GRACE_MS)),
            start: Some((conn, id)),
            ready: false,
            execs: Vec::new(),
            stop_at: None,
            stop_waiters: Vec::new(),
            next_xid: 1,
            to_publish,
            host_ports,
            forwards: Vec::new(),
            cgroups: Vec::new(),
        });
        self.queue.push_back(Request {
            conn: SESSION_CONN,
            cid: ClientId::Binary(sid),
            spec: Box::new(spec),
            stdio: [None, None, None],
            inherit: vec![theirs],
            notify: None,
            retried: false,
            pair: None,
        });
        Ok(())
    }

    fn session_exec(&mut self, conn: usize, id: ClientId, req: ExecReq, fds: Vec<OwnedFd>) -> Result<(), String> {
        if req.argv.is_empty() {
            return Err("exec: no command".into());
        }
        if req.env.iter().any(|e| !e.contains('=') || e.starts_with('=')) {
            return Err("exec: environment entries are KEY=VALUE".into());
        }
        for (what, v) in [("wall", req.wall_time_ms), ("CPU", req.cpu_time_ms)] {
            if v == Some(0) || v.is_some_and(|v| v > MAX_COMMAND_TIME_MS) {
                return Err(format!("exec: a command's {what}-time limit is more than 0 and at most 30 days"));
            }
        }
        if req.argv.iter().chain(&req.env).chain(&req.cwd).any(|a| a.contains('\0')) {
            return Err("exec: an argument contains a NUL byte".into());
        }
        // Streams come with the binary protocol; a JSON line's command has /dev/null.
        if !(req.detach || fds.len() == 3 || fds.is_empty()) {
            return Err("exec: the request must carry stdin, stdout and stderr, or none".into());
        }
        if req.memory.is_some_and(|m| m < 1 << 20) {
            return Err("exec: a command's memory limit is at least 1M".into());
        }
        let name = req.name.clone();
        let Some(s) = self.sessions.iter_mut().find(|s| s.name == name) else {
            return Err(format!("no session named {name:?}"));
        };
        if s.stop_at.is_some() || !s.ready {
            return Err(format!("session {name:?} is {}", if s.ready { "stopping" } else { "starting" }));
        }
        let Some(sock) = &s.sock else { return Err(format!("session {name:?} has ended")) };
        let sid = s.sid;
        let run = self.running.iter().find(|r| r.req.conn == SESSION_CONN && r.req.cid == ClientId::Binary(sid));
        let cg = run.and_then(|r| r.p.cgroup.as_ref());
        let oom_kills = cg.map(|c| c.oom_kills());
        let xid = s.next_xid;
        let cgroup = match (req.memory, cg) {
            (None, _) => None,
            (Some(_), None) => {
                return Err("exec: a command's --memory needs cgroups, and this session has none (capsule check \
                            says how to get them)"
                    .into())
            }
            (Some(m), Some(cg)) => Some(
                cg.command_cgroup(&format!("command-{xid}"), m)
                    .map_err(|e| format!("exec: the command's cgroup: {e}"))?,
            ),
        };
        // Empty cgroups of earlier commands go (one's leftovers keep it until they end).
        s.cgroups.retain(|c| !c.try_remove());
        s.next_xid += 1;
        let detach = req.detach;
        let mut raw: Vec<RawFd> = if detach { Vec::new() } else { fds.iter().map(AsRawFd::as_raw_fd).collect() };
        raw.extend(cgroup.as_ref().map(|c| c.procs.as_raw_fd()));
        wire::send(sock.as_raw_fd(), &ToHolder::Exec { xid, req }, &raw)
            .map_err(|e| format!("session {name:?}: its holder does not take commands ({e})"))?;
        s.last_used = Instant::now();
        s.execs.push(Exec { xid, client: Some((conn, id)), detach, oom_kills, cgroup });
        Ok(())
    }

    /// Sessions, their PID 1s' processes counted from the agent's side.
    fn session_list(&self) -> Vec<SessionInfo> {
        let now = Instant::now();
        self.sessions
            .iter()
            .map(|s| {
                let (processes, memory_bytes) = self.session_run(s.sid).map_or((0, 0), |r| command_processes(&r.p));
                SessionInfo {
                    name: s.name.clone(),
                    uptime_ms: now.duration_since(s.started).as_millis() as u64,
                    idle_ms: now.duration_since(s.last_used).as_millis() as u64,
                    processes,
                    memory_bytes,
                    execs: s.execs.iter().filter(|e| !e.detach).count() as u64,
                    stopping: s.stop_at.is_some(),
                    ports: s.forwards.iter().map(|f| f.what.clone()).collect(),
                }
            })
            .collect()
    }

    fn session_run(&self, sid: u64) -> Option<&Running> {
        self.running.iter().find(|r| r.req.conn == SESSION_CONN && r.req.cid == ClientId::Binary(sid))
    }

    /// SIGTERM to the session's processes; SIGKILL after its grace.
    fn session_begin_stop(&mut self, sid: u64) {
        let Some(s) = self.sessions.iter_mut().find(|s| s.sid == sid) else { return };
        if s.stop_at.is_some() {
            return;
        }
        s.stop_at = Some(Instant::now() + s.grace);
        if let Some(sock) = &s.sock {
            if wire::send(sock.as_raw_fd(), &ToHolder::Term, &[]).is_err() {
                s.stop_at = Some(Instant::now());
            }
        }
    }

    /// A holder's message, or its end.
    pub(crate) fn holder_event(&mut self, sup: &Supervisor, k: usize) {
        let Some(s) = self.sessions.get_mut(k) else { return };
        let Some(sock) = &s.sock else { return };
        let msg = match wire::recv::<FromHolder>(sock.as_raw_fd()) {
            Ok(Some((msg, _fds))) => msg,
            // The holder is gone (one killed with a message of ours unread resets the connection): its run
            // ends with it (PID 1 records how; killing PID 1 now could cut that short).
            Ok(None) => {
                s.sock = None;
                return;
            }
            Err(_) if peer_gone(sock.as_raw_fd()) => {
                s.sock = None;
                return;
            }
            Err(_) => {
                // The holder broke the protocol: the session is not to be trusted with more.
                s.sock = None;
                let sid = s.sid;
                if let Some(r) =
                    self.running.iter_mut().find(|r| r.req.conn == SESSION_CONN && r.req.cid == ClientId::Binary(sid))
                {
                    kill_prepared(&mut r.p);
                }
                return;
            }
        };
        let mut answers: Vec<(Waiter, SessionAnswer)> = Vec::new();
        match msg {
            FromHolder::Ready => {
                let sid = s.sid;
                let run =
                    self.running.iter_mut().find(|r| r.req.conn == SESSION_CONN && r.req.cid == ClientId::Binary(sid));
                let mut failed = None;
                if let Some(r) = run {
                    // The holder has its end: the agent keeps none of it.
                    r.req.inherit.clear();
                    if let Some(cg) = r.p.cgroup.as_mut() {
                        if let Err(e) = cg.for_session() {
                            failed = Some(format!("the session's cgroup: {e}"));
                        }
                    }
                    if failed.is_none() {
                        match start_ports(sup, &r.p, std::mem::take(&mut s.to_publish), &s.host_ports) {
                            Ok(f) => s.forwards = f,
                            Err(e) => failed = Some(e),
                        }
                    }
                }
                if let Some(error) = failed {
                    // Not started after all: its client is told why, the rest goes.
                    if let Some(w) = s.start.take() {
                        answers.push((w, SessionAnswer::Error { error }));
                    }
                    s.stop_at = Some(Instant::now());
                } else {
                    s.ready = true;
                    if let Some(w) = s.start.take() {
                        answers.push((w, SessionAnswer::Started { name: s.name.clone() }));
                    }
                }
            }
            FromHolder::Started { xid, pid } => {
                if let Some(i) = s.execs.iter().position(|e| e.xid == xid && e.detach) {
                    let mut e = s.execs.swap_remove(i);
                    // A detached command keeps its cgroup while it runs.
                    s.cgroups.extend(e.cgroup.take());
                    if let Some(w) = e.client {
                        answers.push((w, SessionAnswer::Detached { pid }));
                    }
                }
            }
            FromHolder::Failed { xid, error } => {
                if let Some(i) = s.execs.iter().position(|e| e.xid == xid) {
                    if let Some(w) = s.execs.swap_remove(i).client {
                        answers.push((w, SessionAnswer::Error { error: format!("exec: {error}") }));
                    }
                }
            }
            FromHolder::Exited(end) => {
                let (xid, status) = (end.xid, end.status);
                s.last_used = Instant::now();
                if let Some(i) = s.execs.iter().position(|e| e.xid == xid) {
                    let mut e = s.execs.swap_remove(i);
                    let cgroup = e.cgroup.take();
                    if let Some(w) = e.client {
                        let sid = s.sid;
                        let run = self
                            .running
                            .iter()
                            .find(|r| r.req.conn == SESSION_CONN && r.req.cid == ClientId::Binary(sid));
                        // Failed while the session's cgroup counted an OOM kill: the session's memory limit (the
                        // kernel's victim is the largest process; with several commands at once, maybe another's).
                        let oom = e.oom_kills.zip(run.and_then(|r| r.p.cgroup.as_ref()).map(|c| c.oom_kills()));
                        let oom_killed = status != 0 && oom.is_some_and(|(before, now)| now > before);
                        let r = command_result(end, oom_killed, cgroup.as_ref().map(|c| c.stats()));
                        answers.push((w, SessionAnswer::Exec { result: Box::new(r) }));
                    }
                    // What the command left running keeps its cgroup until it ends.
                    s.cgroups.extend(cgroup.filter(|c| !c.try_remove()));
                }
            }
        }
        for ((conn, id), a) in answers {
            self.session_answer(conn, &id, a);
        }
    }

    /// Idle and lifetime expiry, stops due; how long until the next is due.
    pub(crate) fn session_timers(&mut self) -> Option<Duration> {
        if self.sessions.is_empty() {
            return None;
        }
        // A server's (not an agent's) sessions stop once no client is connected.
        if self.agent.is_none() && !self.conns.iter().flatten().any(|c| !c.gone && !c.eof) {
            let sids: Vec<u64> = self.sessions.iter().map(|s| s.sid).collect();
            for sid in sids {
                self.session_begin_stop(sid);
            }
        }
        let now = Instant::now();
        let mut next: Option<Duration> = None;
        let mut soonest = |d: Duration| next = Some(next.map_or(d, |n| n.min(d)));
        let mut stop = Vec::new();
        let mut kill = Vec::new();
        for s in &self.sessions {
            if let Some(at) = s.stop_at {
                let empty = self.session_run(s.sid).is_none_or(|r| command_processes(&r.p).0 == 0);
                if now >= at || empty {
                    kill.push(s.sid);
                } else {
                    soonest(STOP_TICK.min(at - now));
                }
                continue;
            }
            if !s.ready {
                continue;
            }
            if let Some(l) = s.lifetime {
                let end = s.started + l;
                if now >= end {
                    stop.push(s.sid);
                    continue;
                }
                soonest(end - now);
            }
            if let Some(idle) = s.idle {
                if s.execs.iter().any(|e| !e.detach) {
                    continue;
                }
                let end = s.last_used + idle;
                if now >= end {
                    stop.push(s.sid);
                    continue;
                }
                soonest(end - now);
            }
        }
        for sid in stop {
            self.session_begin_stop(sid);
            soonest(Duration::ZERO);
        }
        for sid in kill {
            if let Some(r) = self.session_run(sid) {
                // PID 1 kills and reaps the rest, and records the run as killed.
                sys::eventfd_signal(r.p.control.as_raw_fd());
            }
        }
        next
    }

    /// A session's run is over: its clients get their answers, the name is free.
    pub(crate) fn session_ended(&mut self, cid: &ClientId, result: &RunResult) {
        let Some(k) = self.sessions.iter().position(|s| &ClientId::Binary(s.sid) == cid) else { return };
        let s = self.sessions.swap_remove(k);
        let how = match result.status {
            Status::Error => format!("error: {}", result.error.as_deref().unwrap_or("failed")),
            Status::Killed => "stopped".to_string(),
            _ => result.summary(),
        };
        if let Some((conn, id)) = s.start {
            let error = format!("session {:?} did not start: {how}", s.name);
            self.session_answer(conn, &id, SessionAnswer::Error { error });
        }
        for e in s.execs {
            if let Some((conn, id)) = e.client {
                let error = format!("session {:?} ended ({how})", s.name);
                self.session_answer(conn, &id, SessionAnswer::Error { error });
            }
        }
        for (conn, id) in s.stop_waiters {
            self.session_answer(conn, &id, SessionAnswer::Stopped { name: s.name.clone(), status: how.clone() });
        }
    }

    /// A client gone: the commands it waited for are killed.
    pub(crate) fn session_client_gone(&mut self, conn: usize) {
        for s in &mut self.sessions {
            s.stop_waiters.retain(|w| w.0 != conn);
            if s.start.as_ref().is_some_and(|w| w.0 == conn) {
                s.start = None;
            }
            for e in s.execs.iter_mut().filter(|e| e.client.as_ref().is_some_and(|w| w.0 == conn)) {
                e.client = None;
                if let (false, Some(sock)) = (e.detach, &s.sock) {
                    let _ = wire::send(sock.as_raw_fd(), &ToHolder::Kill { xid: e.xid }, &[]);
                }
            }
            s.execs.retain(|e| e.client.is_some() || !e.detach);
        }
    }

    pub(crate) fn session_answer(&mut self, conn: usize, id: &ClientId, answer: SessionAnswer) {
        let Some(c) = self.conns.get(conn).and_then(Option::as_ref) else { return };
        if c.gone {
            return;
        }
        let (binary, fd) = (matches!(c.framing, Framing::Binary), c.read.as_raw_fd());
        match id {
            ClientId::Binary(id) if binary => {
                let sent = wire::send(fd, &ServerMsg::Session { id: *id, answer }, &[]);
                if sent.is_err() {
                    self.drop_conn(conn);
                }
            }
            ClientId::Json(id) if !binary => {
                let line = crate::proto::lines::session_line(id, &answer);
                self.write(conn, line);
            }
            _ => {}
        }
    }

    /// Runs that take one of the `parallel` slots (sessions do not).
    pub(crate) fn slots_taken(&self) -> usize {
        if self.sessions.is_empty() {
            return self.running.len();
        }
        self.running.iter().filter(|r| r.req.conn != SESSION_CONN).count()
    }
}

/// A session's ports, served in its run's network.
fn start_ports(
    sup: &Supervisor,
    p: &Prepared,
    publish: Vec<(std::net::TcpListener, Publish)>,
    host_ports: &[u16],
) -> Result<Vec<super::ports::Forward>, String> {
    if publish.is_empty() && host_ports.is_empty() {
        return Ok(Vec::new());
    }
    // A network PID 1 made itself (none kept was free) is reached through PID 1 (setns on its pidfd).
    let netns = sup.run_net(p).or_else(|| p.pidfd()).ok_or("the session's PID 1 is gone")?;
    let mut out = Vec::new();
    for (l, p) in publish {
        out.push(super::ports::publish(l, &p, netns)?);
    }
    for &port in host_ports {
        out.push(super::ports::host_port(port, netns)?);
    }
    Ok(out)
}

/// The processes of a session's commands (PID 1's descendants but PID 1
/// and the holder, its first child) and their resident memory.
fn command_processes(p: &Prepared) -> (u64, u64) {
    let Some(pid1) = p.pidfd().and_then(pid_of) else { return (0, 0) };
    let mut todo = children_of(pid1);
    // The holder: the oldest child (pids wrap, so by start time).
    let holder = todo.iter().copied().min_by_key(|&c| start_time(c).unwrap_or(u64::MAX));
    let (mut n, mut rss) = (0u64, 0u64);
    let mut seen = 0;
    while let Some(pid) = todo.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        todo.extend(children_of(pid));
        if Some(pid) == holder {
            continue;
        }
        n += 1;
        rss += resident(pid);
    }
    (n, rss)
}

/// A pidfd's process id (`/proc/self/fdinfo`).
fn pid_of(fd: RawFd) -> Option<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines().find_map(|l| l.strip_prefix("Pid:")).and_then(|v| v.trim().parse().ok()).filter(|&p| p > 0)
}

fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(list.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
        }
    }
    out
}

/// Field 22 of `/proc/PID/stat` (after the parenthesized name).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn resident(pid: i32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Whether the other end of `sock` is closed (POLLHUP).
fn peer_gone(sock: RawFd) -> bool {
    let mut pfd = [libc::pollfd { fd: sock, events: 0, revents: 0 }];
    sys::poll(&mut pfd, 0).is_ok() && pfd[0].revents & libc::POLLHUP != 0
}

/// A command's result: its own limits first, then how it ended. With a
/// cgroup of its own, CPU and memory are its cgroup's, and an OOM kill
/// there is its memory limit.
fn command_result(e: Ended, oom_killed: bool, cg: Option<CommandStats>) -> RunResult {
    let mut r = RunResult::error("");
    r.error = None;
    r.accounting = Accounting::Rusage;
    r.wall_time_ms = e.wall_us as f64 / 1000.0;
    r.cpu_user_ms = e.user_us as f64 / 1000.0;
    r.cpu_system_ms = e.system_us as f64 / 1000.0;
    r.peak_memory_bytes = e.max_rss_kb.saturating_mul(1024);
    let mut oom_killed = oom_killed;
    if let Some(st) = cg {
        r.accounting = Accounting::Cgroup;
        r.cpu_user_ms = st.user_us as f64 / 1000.0;
        r.cpu_system_ms = st.system_us as f64 / 1000.0;
        r.peak_memory_bytes = st.memory_peak.unwrap_or(r.peak_memory_bytes);
        oom_killed = st.oom_kills > 0 || (oom_killed && e.status != 0);
    }
    if libc::WIFEXITED(e.status) {
        r.exit_code = Some(libc::WEXITSTATUS(e.status));
    }
    r.killed_by_limit = true;
    r.status = if e.cpu_exceeded {
        Status::CpuTimeLimit
    } else if e.timed_out {
        Status::WallTimeLimit
    } else if oom_killed {
        Status::MemoryLimit
    } else {
        r.killed_by_limit = false;
        if libc::WIFEXITED(e.status) {
            Status::Exited
        } else {
            r.signal = Some(signal_name(libc::WTERMSIG(e.status)));
            Status::Signaled
        }
    };
    r
}
