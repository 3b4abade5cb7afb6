//! The supervisor's event loop: scheduling, starting and collecting runs, keeping spares prepared, accepting clients.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering::SeqCst;

use serde_json::Value;

use crate::child::FLAG_GO;
use crate::host::cgroups::RunCgroup;
use crate::host::identity::{listen_refusal, peer_fingerprint};
use crate::plan::rlimits::Rlimit;
use crate::proto::result::{InteractResult, RunResult, Side, Status};
use crate::proto::spec::{InteractSpec, PipeFile, RunSpec, Stdio};
use crate::proto::wire::{self, ServerMsg};
use crate::supervisor::relay::{Capture, Collect, Feed, Relay};
use crate::sys::{self};

use super::*;

/// A run's id as its client gave it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClientId {
    Binary(u64),
    Json(Value),
    /// The one run of a front end's `Command` (answered with `Exit`).
    Command {
        quiet: bool,
    },
}

/// A request waiting for a free slot.
pub(crate) struct Request {
    pub(crate) conn: usize,
    pub(crate) cid: ClientId,
    pub(crate) spec: Box<RunSpec>,
    /// Caller-provided stdin, stdout, stderr.
    pub(crate) stdio: [Option<OwnedFd>; 3],
    /// The caller's descriptors for the spec's `inherit_fds`, in its order.
    pub(crate) inherit: Vec<OwnedFd>,
    pub(crate) notify: Option<OwnedFd>,
    /// Already failed once on a PID 1 prepared ahead (retried on a fresh one).
    pub(crate) retried: bool,
    /// One of the two programs of an interactive run: the pair's id and
    /// which one. Its stdin and stdout are the relay's pipes; its result
    /// goes to the pair.
    pub(crate) pair: Option<(u64, Side)>,
}

/// An interactive run in flight: two ordinary runs whose stdin and stdout
/// are the relay's, and whose results come here.
pub(crate) struct Pair {
    pub(crate) id: u64,
    pub(crate) conn: usize,
    pub(crate) cid: ClientId,
    pub(crate) notify: Option<OwnedFd>,
    pub(crate) relay: Relay,
    /// Each program's result and end time (CLOCK_MONOTONIC ns).
    pub(crate) results: [Option<(RunResult, u64)>; 2],
    /// Cancelled, or its client is gone: no answer is sent.
    pub(crate) cancelled: bool,
}

pub(crate) fn side_index(side: Side) -> usize {
    match side {
        Side::Solution => 0,
        Side::Interactor => 1,
    }
}

pub(crate) fn other(side: Side) -> Side {
    match side {
        Side::Solution => Side::Interactor,
        Side::Interactor => Side::Solution,
    }
}

/// A run in flight.
pub(crate) struct Running {
    pub(crate) p: Prepared,
    /// Kept until the result is out: a run whose PID 1 prepared ahead
    /// failed before its go message is retried from it.
    pub(crate) req: Request,
    pub(crate) rlimits: Vec<Rlimit>,
    pub(crate) wall_time_ns: Option<u64>,
    pub(crate) io: Streams,
    /// Its write-once output went past the output limit: killed for it.
    pub(crate) output_over: bool,
    /// Cancelled: no result is sent.
    pub(crate) cancelled: bool,
    /// With `egress`: the run's proxy, stopped when the run is over.
    pub(crate) proxy: Option<super::egress::Proxy>,
}

/// The streams the supervisor carries for a run: stdout and stderr
/// captured or collected into files, stdin fed from a file.
#[derive(Default)]
pub(crate) struct Streams {
    pub(crate) capture: [Option<Capture>; 2],
    pub(crate) collect: [Option<Collect>; 2],
    pub(crate) feed: Option<Feed>,
}

/// What [`Supervisor::fill`] prepared that the result needs.
pub(crate) struct Filled {
    pub(crate) rlimits: Vec<Rlimit>,
    pub(crate) wall_time_ns: Option<u64>,
}

/// What the poll set's entries stand for.
#[derive(Clone, Copy)]
pub(crate) enum Token {
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
    /// Egress proxies have asks to send.
    Asks,
    /// A session's holder wrote (or is gone).
    Holder(usize),
}

/// A PID 1 that is done (or killed), kept with the zombies until it has
/// exited and is reaped.
pub(crate) fn bury(mut p: Prepared) -> Prepared {
    p.listener = None;
    p.buried = Some(std::time::Instant::now());
    p
}

/// How often a zombie still being created is looked at (`Loop::run`).
pub(crate) const COMING_RECHECK: std::time::Duration = std::time::Duration::from_millis(1);

/// How long an exiting PID 1 holds back new runs (`Loop::exits_behind`).
pub(crate) const EXIT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The event loop's state.
pub(crate) struct Loop {
    pub(crate) conns: Vec<Option<Conn>>,
    pub(crate) listener: Option<OwnedFd>,
    pub(crate) signals: Option<OwnedFd>,
    pub(crate) once: bool,
    /// A per-user agent's life (`Mode::Agent`).
    pub(crate) agent: Option<AgentLife>,
    /// What the listener's peers must look like (`Mode::Listen`).
    pub(crate) peer: Option<String>,
    /// When the agent last had nothing to do.
    pub(crate) idle_since: std::time::Instant,
    pub(crate) answered: usize,
    pub(crate) queue: VecDeque<Request>,
    pub(crate) running: Vec<Running>,
    /// PID 1s prepared ahead, idle.
    pub(crate) spares: Vec<Prepared>,
    /// PID 1s whose result went out: reaped (and their cgroups removed)
    /// once they have finished exiting.
    pub(crate) zombies: Vec<Prepared>,
    /// The shape of the last request: spares are prepared for it.
    pub(crate) last_shape: Option<(Box<RunSpec>, Shape)>,
    /// Interactive runs in flight.
    pub(crate) pairs: Vec<Pair>,
    pub(crate) next_pair: u64,
    /// Wake-ups of the event loop so far (orders what relays see).
    pub(crate) round: u64,
    pub(crate) stop: bool,
    /// The egress proxies' accepting thread and asks, once a run had `egress`.
    pub(crate) proxies: Option<super::egress::Proxies>,
    /// What JSON lines are read into (kept: a zeroed 64 KiB per read cost more than the read).
    pub(crate) read_buf: Vec<u8>,
    /// An agent's sessions (docs/sessions.md).
    pub(crate) sessions: Vec<Session>,
    pub(crate) next_session: u64,
}

impl Loop {
    pub(crate) fn run(&mut self, sup: &mut Supervisor) {
        loop {
            self.schedule(sup);
            if self.finished() {
                return;
            }
            self.settle_births();
            let (mut pfds, tokens) = self.poll_set();
            let timeout = self.idle_timeout();
            let mut wait = (timeout >= 0).then(|| std::time::Duration::from_millis(timeout as u64));
            if self.zombies.iter().any(|z| z.pidfd().is_none() && z.never().is_none()) {
                // A finished run's PID 1 whose creation the spawner has yet
                // to report: nothing else may wake the loop to reap it.
                wait = Some(wait.map_or(COMING_RECHECK, |w| w.min(COMING_RECHECK)));
            }
            if let Some(d) = self.session_timers() {
                wait = Some(wait.map_or(d, |w| w.min(d)));
            }
            if !self.queue.is_empty() && self.exits_behind(sup) {
                // Until the oldest of them stops counting, if none exits before.
                let oldest = self.zombies.iter().filter_map(|z| z.buried).min();
                let left = oldest.map_or(EXIT_PATIENCE, |t| EXIT_PATIENCE.saturating_sub(t.elapsed()));
                wait = Some(wait.map_or(left, |w| w.min(left)));
            }
            match sys::ppoll(&mut pfds, wait) {
                Ok(0) if timeout >= 0 => {
                    // An agent idle for its whole idle time, or stepping aside.
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
    pub(crate) fn idle_timeout(&mut self) -> i32 {
        let Some(life) = &self.agent else { return -1 };
        if self.listener.is_none() {
            return -1;
        }
        let busy = self.conns.iter().flatten().any(|c| !c.gone) || !self.running.is_empty() || !self.queue.is_empty();
        if busy {
            self.idle_since = std::time::Instant::now();
            return -1;
        }
        let idle_for = self.idle_since.elapsed();
        if idle_for >= life.step_aside && life.others_used_since() {
            return 0;
        }
        // Wake at the idle time, and meanwhile every `step_aside` to look at the others.
        let until_look = life.step_aside.saturating_sub(idle_for);
        let until_look = if until_look.is_zero() { life.step_aside } else { until_look };
        let left = life.idle.saturating_sub(idle_for).min(until_look);
        // Rounded up: a wake-up a little early would only poll again.
        left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
    }

    /// An agent stops taking requests: its socket goes (if still its own),
    /// so the next `capsule run` starts a new agent; what runs finishes.
    pub(crate) fn retire(&mut self) {
        if let (Some(life), Some(_)) = (&mut self.agent, self.listener.take()) {
            life.give_up();
        }
    }

    /// Nothing left to do.
    pub(crate) fn finished(&self) -> bool {
        if self.stop || (self.once && self.answered > 0) {
            return true;
        }
        let clients = self.conns.iter().flatten().any(|c| !(c.gone || c.eof && c.finish_at_eof));
        let pending = !self.running.is_empty() || !self.queue.is_empty();
        let unsent = self.conns.iter().flatten().any(|c| !c.gone && !c.out.is_empty());
        self.listener.is_none() && !clients && !pending && !unsent
    }

    pub(crate) fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<Token>) {
        // Sized once for the usual set (no regrowth on every wake-up).
        let n = 4 + 2 * self.conns.len() + 5 * self.running.len() + 2 * self.zombies.len() + self.spares.len();
        let mut set = sys::PollSet::with_capacity(n);
        if let Some(l) = &self.listener {
            set.add(l.as_raw_fd(), libc::POLLIN, Token::Listener);
        }
        if let Some(s) = &self.signals {
            set.add(s.as_raw_fd(), libc::POLLIN, Token::Signals);
        }
        if let (Some(fd), true) = (self.agent.as_ref().and_then(|a| a.host_mounts.as_ref()), self.listener.is_some()) {
            set.add(fd.as_raw_fd(), libc::POLLPRI, Token::HostMounts);
        }
        if let Some(px) = &self.proxies {
            set.add(px.asks.wake.as_raw_fd(), libc::POLLIN, Token::Asks);
        }
        for (i, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.gone {
                continue;
            }
            if !c.eof {
                set.add(c.read.as_raw_fd(), libc::POLLIN, Token::ConnRead(i));
            }
            if !c.out.is_empty() {
                set.add(c.wfd(), libc::POLLOUT, Token::ConnWrite(i));
            } else if c.write.is_some() {
                // stdout closing (the client went away) shows as POLLERR.
                set.add(c.wfd(), 0, Token::ConnWrite(i));
            }
        }
        for (i, r) in self.running.iter().enumerate() {
            set.add(r.p.done.as_raw_fd(), libc::POLLIN, Token::Run(i));
            // (One still being created: its result pipe tells if it dies.)
            if let Some(fd) = r.p.pidfd() {
                set.add(fd, libc::POLLIN, Token::Run(i));
            }
            for (k, cap) in r.io.capture.iter().enumerate() {
                if let Some(cap) = cap {
                    if !cap.eof {
                        set.add(cap.fd(), libc::POLLIN, Token::Capture(i, k));
                    }
                }
            }
            for (k, c) in r.io.collect.iter().enumerate() {
                if let Some(c) = c {
                    if !c.eof && !c.over {
                        set.add(c.fd(), libc::POLLIN, Token::Collect(i, k));
                    }
                }
            }
            if let Some(fd) = r.io.feed.as_ref().and_then(Feed::fd) {
                set.add(fd, libc::POLLOUT, Token::Feed(i));
            }
        }
        for (i, pair) in self.pairs.iter().enumerate() {
            for (fd, events, d, to_end) in pair.relay.poll_entries() {
                set.add(fd, events, Token::Relay(i, d, to_end));
            }
        }
        for (k, s) in self.sessions.iter().enumerate() {
            if let Some(sock) = &s.sock {
                set.add(sock.as_raw_fd(), libc::POLLIN, Token::Holder(k));
            }
        }
        for (i, s) in self.spares.iter().enumerate() {
            if let Some(fd) = s.pidfd() {
                set.add(fd, libc::POLLIN, Token::Spare(i));
            }
        }
        for (i, z) in self.zombies.iter().enumerate() {
            if let Some(fd) = z.pidfd() {
                set.add(fd, libc::POLLIN, Token::Zombie(i));
            }
        }
        (set.fds, set.tokens)
    }

    /// Handles one ready descriptor. Indices refer to the poll set's
    /// snapshot: entries are only marked here, removed in `schedule`.
    pub(crate) fn event(&mut self, sup: &mut Supervisor, token: Token, revents: i16) {
        match token {
            Token::Listener => self.accept(),
            Token::HostMounts => self.retire(),
            Token::Asks => self.send_asks(),
            Token::Signals => self.stop = true,
            Token::Holder(k) => self.holder_event(sup, k),
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
    pub(crate) fn schedule(&mut self, sup: &mut Supervisor) {
        self.collect(sup);
        // First: the PID 1s gone no longer hold back new runs (`exits_behind`).
        self.reap_spares_and_zombies();
        while let Some(front) = self.queue.front() {
            if self.exits_behind(sup) {
                break;
            }
            match front.pair {
                // The interactor starts right after its solution, whatever
                // the count: the two talk to each other.
                Some((_, Side::Interactor)) => {}
                // A pair needs two slots (or all of them, when there are
                // fewer).
                Some((_, Side::Solution)) if self.slots_taken() + 2 > sup.config.parallel && self.slots_taken() > 0 => {
                    break
                }
                _ if self.slots_taken() >= sup.config.parallel => break,
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
        // (Reaped above: poll marks what exited only between two calls.)
        if !self.exits_behind(sup) {
            self.keep_spares(sup);
        }
    }

    /// Starts one request, or answers it with an error.
    pub(crate) fn start(&mut self, sup: &mut Supervisor, mut req: Request) {
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
        // One created already first; else one still being created, at once.
        let mut p = None;
        let fits = |s: &Prepared| s.shape == shape && req.pair.is_none();
        while let Some(i) = self
            .spares
            .iter()
            .position(|s| fits(s) && s.pidfd().is_some())
            .or_else(|| self.spares.iter().position(fits))
        {
            let mut s = self.spares.swap_remove(i);
            let same_filter = matches!((&s.filter, &filter), (Some(a), Some(b)) if Rc::ptr_eq(a, b));
            if same_filter && sup.still_fresh(&s) && !exited(&mut s) {
                p = Some(s);
                break;
            }
            kill_prepared(&mut s);
            self.zombies.push(bury(s));
        }
        // Runs to come are prepared like this one (kept only when the shape
        // changes: no copy of the spec per request).
        if sup.config.prepare_ahead
            && !self.once
            && req.pair.is_none()
            && req.conn != SESSION_CONN
            && self.last_shape.as_ref().is_none_or(|(_, s)| *s != shape)
        {
            self.last_shape = Some((req.spec.clone(), shape.clone()));
        }
        let mut p = match p {
            Some(p) => p,
            None => match sup.prepare(&req.spec, shape, filter.clone(), None) {
                Ok(p) => p,
                Err(msg) => return self.reply(req, RunResult::error(msg)),
            },
        };
        // A policy not compiled yet (a one-shot run, or the first of its
        // policy) is compiled now, while the fresh PID 1 builds the sandbox
        // on another CPU; `go` copies it into the arena.
        if filter.is_none() {
            if let Err(msg) = sup.filters.get(&req.spec).map(|f| p.late_filter = Some(f)) {
                kill_prepared(&mut p);
                self.zombies.push(bury(p));
                return self.reply(req, RunResult::error(msg));
            }
        }
        // The proxy listens in the run's network before its program starts.
        let proxy = match &req.spec.egress {
            None => None,
            Some(e) => match p
                .listener
                .take()
                .map(Ok)
                .unwrap_or_else(|| {
                    sup.run_net(&p)
                        .ok_or_else(|| "egress: the run's network is not the supervisor's to listen in".to_string())
                        .and_then(super::egress::listen_in)
                })
                .and_then(|l| {
                    if self.proxies.is_none() {
                        self.proxies = Some(super::egress::Proxies::new()?);
                    }
                    self.proxies.as_mut().expect("made").start(l, e)
                }) {
                Ok(px) => Some(px),
                Err(msg) => {
                    kill_prepared(&mut p);
                    self.zombies.push(bury(p));
                    return self.reply(req, RunResult::error(msg));
                }
            },
        };
        match self.go(sup, &mut p, &req) {
            Ok((f, io)) => {
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
                    io,
                    output_over: false,
                    cancelled: false,
                    proxy,
                })
            }
            Err(msg) => {
                kill_prepared(&mut p);
                self.zombies.push(bury(p));
                self.reply(req, RunResult::error(msg));
            }
        }
    }

    /// Answers a request that ended before its run started (or, for a
    /// program of an interactive run, hands the result to its pair).
    pub(crate) fn reply(&mut self, mut req: Request, result: RunResult) {
        match req.pair {
            Some((pair, side)) => self.pair_result(pair, side, result, 0),
            None => self.answer(req.conn, &req.cid, &result, req.notify.take()),
        }
    }

    /// Queues the two programs of an interactive run.
    pub(crate) fn enqueue_pair(
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
            .and_then(|()| {
                let asks = |s: &RunSpec| s.egress.as_ref().is_some_and(|e| e.ask);
                match asks(&spec.solution) || asks(&spec.interactor) {
                    true => Err("egress.ask: not in an interactive run (docs/protocol.md, \"Asks\")".to_string()),
                    false => Ok(()),
                }
            })
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
                inherit: Vec::new(),
                notify: None,
                retried: false,
                pair: Some((id, side)),
            });
        }
    }

    /// One program of an interactive run ended (`end`: its end time), or
    /// could not start; answers once both are in.
    pub(crate) fn pair_result(&mut self, pair: u64, side: Side, result: RunResult, end: u64) {
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
    pub(crate) fn stop_pair_side(&mut self, pair: u64, side: Side, instead: RunResult) {
        if let Some(k) = self.queue.iter().position(|q| q.pair == Some((pair, side))) {
            let req = self.queue.remove(k).expect("present");
            self.reply(req, instead);
        } else if let Some(r) = self.running.iter().find(|r| r.req.pair == Some((pair, side))) {
            sys::eventfd_signal(r.p.control.as_raw_fd());
        }
    }

    /// Fills the arena and sends the go message with the run's stdio.
    pub(crate) fn go(
        &mut self,
        sup: &mut Supervisor,
        p: &mut Prepared,
        req: &Request,
    ) -> Result<(Filled, Streams), String> {
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
                None => {
                    fds[i] = match &p.null {
                        Some(null) => null.as_raw_fd(),
                        None => p.null.insert(open_null()?).as_raw_fd(),
                    };
                    continue;
                }
            };
            fds[i] = fd.as_raw_fd();
            held.push(fd);
        }
        // If this fails, the tracee is gone: PID 1 failed while building the
        // sandbox (its reason is in the arena) or was killed; the run is
        // collected like any other and reports why.
        let fds: Vec<RawFd> = fds.into_iter().chain(req.inherit.iter().map(|f| f.as_raw_fd())).collect();
        if self.once && p.cgroup.is_none() {
            // The tracee execs from this memory and its peak counts in the program's rusage (`max-rss`):
            // only what is resident now, not all the code this process ran (docs/child.md, "Peak memory").
            sys::shed_text();
        }
        let _ = sys::send_with_fds(p.go.as_raw_fd(), b"g", &fds);
        Ok((filled, io))
    }

    /// Collects runs whose PID 1 signalled the result or died.
    pub(crate) fn collect(&mut self, sup: &mut Supervisor) {
        let mut i = 0;
        while i < self.running.len() {
            if !std::mem::take(&mut self.running[i].p.signalled) {
                i += 1;
                continue;
            }
            let r = &mut self.running[i];
            // One byte when the result is in; end of file if PID 1 died.
            let done = matches!(sys::read(r.p.done.as_raw_fd(), &mut [0u8; 8]), Ok(n) if n > 0);
            let dead = !done && exited(&mut r.p);
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
                self.zombies.push(bury(r.p));
                self.queue.push_front(r.req);
                continue;
            }
            let stats = r.p.cgroup.as_ref().map(RunCgroup::stats);
            // The run's processes are gone: its proxy's connections end too.
            let egress = r.proxy.take().map(super::egress::Proxy::stop);
            let mut result = sup.result(&r, status, stats, egress);
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
                if !wait_gone(&mut r.p) {
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
            } else if r.req.conn == SESSION_CONN {
                self.session_ended(&r.req.cid, &result);
            } else if !r.cancelled {
                self.answer(r.req.conn, &r.req.cid, &result, r.req.notify.take());
            }
            self.zombies.push(bury(r.p));
        }
    }

    /// Too many PID 1s are still exiting to start another: each holds its
    /// plan, stacks and arena until then, and an exit waits for an RCU
    /// grace period (the mount namespace's teardown) that a loaded machine
    /// can delay by milliseconds, while starting a run need not (on the
    /// mount template): without this bound they pile up, and the memory
    /// with them. One stuck for a second (a hostile run's) stops counting,
    /// so that it cannot stall the supervisor.
    pub(crate) fn exits_behind(&self, sup: &Supervisor) -> bool {
        let bound = 2 * sup.config.parallel + 1;
        if self.zombies.len() <= bound {
            return false; // (no clock read: the common case)
        }
        let since = std::time::Instant::now().checked_sub(EXIT_PATIENCE);
        let recent = |z: &&Prepared| z.buried.is_some_and(|t| since.is_none_or(|s| t > s));
        self.zombies.iter().filter(recent).count() > bound
    }

    pub(crate) fn reap_spares_and_zombies(&mut self) {
        // (One without a pidfd is still being created, or never was: no
        // poll reports it.)
        let mut unborn = false;
        self.spares.retain_mut(|s| {
            if (std::mem::take(&mut s.signalled) || s.pidfd().is_none()) && s.try_reap() {
                unborn |= s.never().is_some();
                if let Some(cg) = &s.cgroup {
                    cg.try_remove();
                }
                false
            } else {
                true
            }
        });
        if unborn {
            // A spare the spawner could not create: none more of this shape
            // (the next request's own PID 1 reports why), as when `prepare` fails.
            self.last_shape = None;
        }
        self.zombies.retain_mut(|z| {
            if !(std::mem::take(&mut z.signalled) || z.pidfd().is_none()) || !z.try_reap() {
                return true;
            }
            if let Some(cg) = z.cgroup.take() {
                if !cg.try_remove() {
                    cg.remove();
                }
            }
            false
        });
    }

    /// Keeps up to `parallel` + 1 PID 1s prepared for the last request's shape.
    pub(crate) fn keep_spares(&mut self, sup: &mut Supervisor) {
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
                let mut s = self.spares.swap_remove(k);
                kill_prepared(&mut s);
                self.zombies.push(bury(s));
            } else {
                k += 1;
            }
        }
        // Also while requests wait for a slot (`schedule` has started all
        // that can start): the next one to start then finds its PID 1 built,
        // as the sandbox floor's next run does (docs/latency.md, "The loop
        // no longer waits for the spawner"). An agent prepares only when no
        // run is in flight (building a sandbox meanwhile takes CPU from the
        // run), and keeps two: its clients come one run at a time with a gap
        // (the next `capsule run` starting) that is shorter than building a
        // sandbox, so the next run takes the older spare while the newer one
        // is still being built (docs/agent.md has the figures). Its
        // `parallel` only bounds runs at once. A retired agent prepares
        // nothing more. Other supervisors keep one more than `parallel` (or
        // than the CPUs, if fewer): a client that sends its next request as
        // soon as it has a result then finds a spare ready while the next is
        // built.
        let held = self.agent.is_some() && (self.listener.is_none() || !self.running.is_empty());
        // More spares than CPUs would wait built, each holding its tree and
        // namespaces, while the CPUs run what is there already.
        let most = if self.agent.is_some() { 2 } else { sup.config.parallel.min(sup.cpus as usize) + 1 };
        let ahead = Ahead { pin: self.running.len() < sup.cpus as usize };
        while !held && self.spares.len() < most {
            let Some((spec, shape)) = &self.last_shape else { return };
            let filter = match sup.filters.get(spec) {
                Ok(f) => f,
                Err(_) => {
                    // The next request of this shape reports the error itself.
                    self.last_shape = None;
                    break;
                }
            };
            match sup.prepare(spec, shape.clone(), Some(filter), Some(ahead)) {
                Ok(p) => self.spares.push(p),
                Err(_) => {
                    self.last_shape = None;
                    break;
                }
            }
        }
    }

    /// Takes in the PID 1s the spawner threads have created since the last
    /// turn (no waiting), so that the poll set has their pidfds.
    pub(crate) fn settle_births(&mut self) {
        for r in &mut self.running {
            r.p.settle();
        }
        for p in self.spares.iter_mut().chain(self.zombies.iter_mut()) {
            p.settle();
        }
    }

    pub(crate) fn accept(&mut self) {
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
                if let Some(why) = self.peer.as_deref().and_then(|p| listen_refusal(sock.as_raw_fd(), p)) {
                    let _ = sys::write_all(sock.as_raw_fd(), &crate::proto::lines::error_line(&Value::Null, why));
                    return;
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
}
