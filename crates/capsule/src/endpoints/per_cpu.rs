//! `capsule serve --per-cpu`: one supervisor per CPU, each pinned with its
//! runs to a CPU of its own, behind a front that shares the requests out
//! (docs/protocol.md, "One supervisor per CPU"; docs/latency.md has why a
//! loop that shares its CPU with its runs is faster).
//!
//! The front is the `capsule serve` process itself: single-threaded, in the
//! caller's namespaces, it starts each supervisor as an ordinary `capsule
//! serve` on a pair of pipes (forked, pinned, then re-executed by
//! [`Supervisor::start`](crate::supervisor::Supervisor::start)), reads its
//! clients' JSON lines, gives every request an id of its own (unique across
//! clients, so two connections' ids never meet in one supervisor), sends a
//! run to the supervisor with the fewest runs in flight and a kill or cancel
//! to the one its run went to, and answers under the client's id. Only the
//! request's head is parsed on the way (its spec is passed on as it came);
//! a line the head does not fit is answered by the full parser's error.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Error, SetupError, SysError};
use crate::host::identity::{is_real_root, listen_refusal, peer_fingerprint, root_refusal};
use crate::proto::config::Config;
use crate::proto::lines::{self, Line, LineReader, LineRequest};
use crate::proto::result::EXIT_CAPSULE_ERROR;
use crate::sys::{self, Forked};

/// `capsule serve --per-cpu [--listen PATH]`: serves as [`super::serve::run_server`]
/// does, with min(`parallel`, CPUs) supervisors, each pinned to one CPU of
/// the caller's affinity mask with its share of the slots. Exits the
/// process (0 once served, 125 when a supervisor failed); returns only an
/// error found before serving.
pub fn run_per_cpu(config: &Config, listen: Option<&Path>) -> Result<(), Error> {
    config.validate()?;
    // Each supervisor would refuse too, once per CPU.
    if is_real_root() {
        return Err(root_refusal());
    }
    let set = sys::affinity().map_err(|e| SysError::new("sched_getaffinity", e))?;
    let shares = config.per_cpu_shares(&sys::cpus_of(&set));
    let listener = match listen {
        Some(path) => {
            let fd = super::serve::bind_socket(path)?;
            // A client gone between poll and accept must not block the front.
            sys::set_nonblocking(fd.as_raw_fd(), true).map_err(|e| SysError::new("fcntl(O_NONBLOCK)", e))?;
            Some((fd, path.to_path_buf()))
        }
        None => None,
    };
    // A peer of the listener must look like this process (the caller: the
    // front never leaves its namespaces), as `serve --listen` checks.
    let peer = match &listener {
        Some(_) => Some(peer_fingerprint(sys::getpid()).ok_or_else(|| SetupError::NoPeerIdentity("self".into()))?),
        None => None,
    };
    let mut shards = Vec::with_capacity(shares.len());
    for (cpu, c) in &shares {
        // A failure drops the shards started: their input ends, they exit.
        shards.push(Shard::start(c, *cpu)?);
    }
    // After the forks: the supervisors start with the caller's signal mask and dispositions.
    sys::ignore_sigpipe();
    let signals = match &listener {
        Some(_) => Some(
            sys::signalfd_for(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
                .map_err(|e| SysError::new("signalfd", e))?,
        ),
        None => None,
    };
    let mut clients = Vec::new();
    if listener.is_none() {
        let input = sys::dup_cloexec(0).map_err(|e| SysError::new("dup (stdin)", e))?;
        let output = sys::dup_cloexec(1).map_err(|e| SysError::new("dup (stdout)", e))?;
        clients.push(Some(Client::new(input, None, true)));
        // The front writes through its own descriptor; 1 is left to nobody.
        clients[0].as_mut().expect("just pushed").write = Some(output);
    }
    let socket_path = listener.as_ref().map(|(_, p)| p.clone());
    let mut front = Front {
        shards,
        clients,
        listener: listener.map(|(fd, _)| fd),
        signals,
        peer,
        flights: HashMap::new(),
        next_id: 1,
        stopping: None,
        failed: false,
    };
    let status = front.run();
    if let Some(p) = socket_path {
        let _ = std::fs::remove_file(p);
    }
    sys::exit(status)
}

/// One pinned supervisor: a `capsule serve` child on a pair of pipes.
struct Shard {
    cpu: usize,
    pid: i32,
    pidfd: Option<OwnedFd>,
    /// Its stdin; None once closed (it then finishes its runs and exits).
    to: Option<OwnedFd>,
    out: Vec<u8>,
    /// Its stdout; None at its end.
    from: Option<OwnedFd>,
    /// What it wrote past the last complete line.
    partial: Vec<u8>,
    /// Slots its runs in flight take.
    load: usize,
    /// Its wait status once reaped.
    status: Option<i32>,
}

impl Shard {
    fn start(config: &Config, cpu: usize) -> Result<Shard, Error> {
        let one = sys::one_cpu(cpu).ok_or(SetupError::CpuOutOfRange(cpu))?;
        let (req_r, req_w) = sys::pipe().map_err(|e| SysError::new("pipe2", e))?;
        let (resp_r, resp_w) = sys::pipe().map_err(|e| SysError::new("pipe2", e))?;
        // SAFETY: the front is single-threaded here (its signalfd and clients
        // come after the forks); the child pins itself, moves its pipes onto
        // 0 and 1 and becomes a supervisor, which re-executes itself
        // (execve) or exits.
        match unsafe { sys::clone_fork(sys::CLONE_PIDFD, None) } {
            Ok(Forked::Child) => {
                let pinned = sys::set_affinity(&one);
                let moved = sys::dup2(req_r.as_raw_fd(), 0).and_then(|()| sys::dup2(resp_w.as_raw_fd(), 1));
                if let Err(e) = pinned {
                    eprintln!(
                        "capsule: error: pinning the supervisor to CPU {cpu}: {}",
                        SysError::new("sched_setaffinity", e)
                    );
                    sys::exit(EXIT_CAPSULE_ERROR);
                }
                if let Err(e) = moved {
                    eprintln!("capsule: error: the supervisor's pipes: {}", SysError::new("dup2", e));
                    sys::exit(EXIT_CAPSULE_ERROR);
                }
                // Its pipes' other ends, and every other shard's, are close-on-exec.
                if let Err(e) = super::serve::run_server(config, None) {
                    eprintln!("capsule: error: {e}");
                }
                sys::exit(EXIT_CAPSULE_ERROR)
            }
            Ok(Forked::Parent { pid, pidfd }) => {
                for fd in [&req_w, &resp_r] {
                    sys::set_nonblocking(fd.as_raw_fd(), true).map_err(|e| SysError::new("fcntl(O_NONBLOCK)", e))?;
                }
                Ok(Shard {
                    cpu,
                    pid,
                    pidfd,
                    to: Some(req_w),
                    out: Vec::new(),
                    from: Some(resp_r),
                    partial: Vec::new(),
                    load: 0,
                    status: None,
                })
            }
            Err(e) => Err(SysError::new("clone3", e).into()),
        }
    }

    /// Writes what is buffered for it, as far as its pipe takes it.
    fn flush(&mut self) {
        let Some(fd) = &self.to else {
            self.out.clear();
            return;
        };
        while !self.out.is_empty() {
            match sys::write(fd.as_raw_fd(), &self.out) {
                Ok(n) => drop(self.out.drain(..n)),
                Err(libc::EAGAIN) => return,
                // It is gone; its pidfd or its stdout says so.
                Err(_) => {
                    self.out.clear();
                    self.to = None;
                    return;
                }
            }
        }
    }

    fn alive(&self) -> bool {
        self.from.is_some() || self.status.is_none()
    }
}

/// A client connection: the caller's stdin/stdout, or one accepted.
struct Client {
    read: OwnedFd,
    /// None: writes go to `read` (a socket).
    write: Option<OwnedFd>,
    lines: LineReader,
    out: Vec<u8>,
    eof: bool,
    /// stdin: its end finishes the server once everything is answered.
    stdio: bool,
    /// Its requests in flight, by the client's id: the front's id.
    ids: HashMap<String, u64>,
}

impl Client {
    fn new(read: OwnedFd, write: Option<OwnedFd>, stdio: bool) -> Client {
        Client { read, write, lines: LineReader::default(), out: Vec::new(), eof: false, stdio, ids: HashMap::new() }
    }

    fn wfd(&self) -> i32 {
        self.write.as_ref().unwrap_or(&self.read).as_raw_fd()
    }
}

/// A request sent on to a supervisor, under the front's id.
struct Flight {
    /// The client and its id; None: nobody waits for the answer (a cancel
    /// for a client gone).
    client: Option<(usize, Value)>,
    shard: usize,
    /// Slots it takes (a run 1, an interactive run 2, a control request 0).
    slots: usize,
    /// A control request's target as the client named it.
    target: Option<Value>,
}

/// Why the front stops.
enum Stop {
    /// Everything answered, or the client went away, or a signal.
    Done,
    /// A supervisor ended on its own: the message for the runs left.
    Failed(String),
}

struct Front {
    shards: Vec<Shard>,
    clients: Vec<Option<Client>>,
    listener: Option<OwnedFd>,
    signals: Option<OwnedFd>,
    peer: Option<String>,
    flights: HashMap<u64, Flight>,
    next_id: u64,
    stopping: Option<Stop>,
    failed: bool,
}

/// A request line's head: its id and which request it is, each field's
/// JSON as it came (a field given as `null` is there: the supervisor's
/// parser counts it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Head<'a> {
    id: Value,
    #[serde(borrow, default, deserialize_with = "present")]
    spec: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    interact: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    kill: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    cancel: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    answer: Option<&'a RawValue>,
}

/// A field that is there, whatever its value (`null` too).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A supervisor's answer: the front's id and the one field that follows.
#[derive(Deserialize)]
struct Answer<'a> {
    id: Value,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ok: Option<&'a RawValue>,
    /// Not final: an ask of the run's proxy, or an answer not taken.
    #[serde(borrow, default)]
    ask: Option<&'a RawValue>,
    #[serde(borrow, default)]
    answer_refused: Option<&'a RawValue>,
}

/// What a request line asks, with what is passed on.
enum Ask {
    /// A run (`spec`) or an interactive run (`interact`), its JSON as it came.
    Run {
        id: Value,
        key: &'static str,
        body: String,
    },
    Control {
        id: Value,
        target: Value,
        key: &'static str,
    },
    /// An answer to an ask of the client's run `id`: to that run's supervisor.
    Answer {
        id: Value,
        body: String,
    },
}

/// Whether wait status `st` is an exit with `code`.
fn exited_with(st: i32, code: i32) -> bool {
    libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == code
}

/// The key a client's id is kept under (JSON equality: `1` and `1.0` differ, as for the supervisor).
fn id_key(id: &Value) -> String {
    serde_json::to_string(id).expect("serializable")
}

#[derive(Clone, Copy)]
enum Token {
    Listener,
    Signals,
    Read(usize),
    Write(usize),
    ShardOut(usize),
    /// Room in a supervisor's input (written after the round).
    ShardIn,
    ShardExit(usize),
}

impl Front {
    /// Serves until done; the process's exit status.
    fn run(&mut self) -> i32 {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            self.advance();
            if self.shards.iter().all(|s| !s.alive()) && !self.clients.iter().flatten().any(|c| !c.out.is_empty()) {
                break;
            }
            let (mut pfds, tokens) = self.poll_set();
            match sys::ppoll(&mut pfds, None) {
                Ok(_) => {}
                Err(libc::EINTR) => continue,
                Err(e) => {
                    eprintln!("capsule: error: the per-CPU front: {}", SysError::new("ppoll", e));
                    self.failed = true;
                    break;
                }
            }
            for (pfd, token) in pfds.iter().zip(tokens) {
                if pfd.revents != 0 {
                    self.event(token, pfd.revents, &mut buf);
                }
            }
            for s in &mut self.shards {
                s.flush();
            }
            for i in 0..self.clients.len() {
                self.flush_client(i);
            }
        }
        for s in &mut self.shards {
            if s.status.is_none() {
                let _ = s.pidfd.as_ref().map(|fd| sys::pidfd_wait(fd.as_raw_fd()));
            }
        }
        if self.failed {
            EXIT_CAPSULE_ERROR
        } else {
            0
        }
    }

    /// What follows from the state: the end of the input, or a stop, closes
    /// the supervisors' input or output.
    fn advance(&mut self) {
        if self.clients.iter().flatten().any(|c| c.stdio && c.eof) {
            // They answer what they took, then exit.
            for s in &mut self.shards {
                if s.out.is_empty() {
                    s.to = None;
                }
            }
        }
        if let Some(Stop::Failed(why)) = &self.stopping {
            let why = why.clone();
            for f in std::mem::take(&mut self.flights).into_values() {
                if let Some((c, id)) = f.client {
                    self.send_client(c, lines::error_line(&id, &why));
                }
            }
            for c in self.clients.iter_mut().flatten() {
                c.ids.clear();
            }
            self.close_all();
        }
        if matches!(self.stopping, Some(Stop::Done)) {
            // A signal, or stdout gone: runs killed (a supervisor whose output is closed kills its runs).
            self.close_all();
        }
    }

    /// Ends every supervisor: input and output closed, they kill their runs and exit.
    fn close_all(&mut self) {
        self.listener = None;
        for s in &mut self.shards {
            s.to = None;
            s.out.clear();
            s.from = None;
        }
        self.flights.clear();
    }

    fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<Token>) {
        let mut set = sys::PollSet::with_capacity(4 + 2 * self.clients.len() + 3 * self.shards.len());
        if let Some(l) = &self.listener {
            set.add(l.as_raw_fd(), libc::POLLIN, Token::Listener);
        }
        if let Some(s) = &self.signals {
            set.add(s.as_raw_fd(), libc::POLLIN, Token::Signals);
        }
        let taking = self.stopping.is_none();
        for (i, c) in self.clients.iter().enumerate() {
            let Some(c) = c else { continue };
            if !c.eof && taking {
                set.add(c.read.as_raw_fd(), libc::POLLIN, Token::Read(i));
            }
            // With nothing to write: its POLLERR says the client went away.
            set.add(c.wfd(), if c.out.is_empty() { 0 } else { libc::POLLOUT }, Token::Write(i));
        }
        for (i, s) in self.shards.iter().enumerate() {
            if let Some(fd) = &s.from {
                set.add(fd.as_raw_fd(), libc::POLLIN, Token::ShardOut(i));
            }
            if let (Some(fd), false) = (&s.to, s.out.is_empty()) {
                set.add(fd.as_raw_fd(), libc::POLLOUT, Token::ShardIn);
            }
            if let (Some(fd), None) = (&s.pidfd, s.status) {
                set.add(fd.as_raw_fd(), libc::POLLIN, Token::ShardExit(i));
            }
        }
        (set.fds, set.tokens)
    }

    fn event(&mut self, token: Token, revents: i16, buf: &mut [u8]) {
        match token {
            Token::Listener => self.accept(),
            Token::Signals => {
                if let Some(s) = &self.signals {
                    sys::drain_signalfd(s.as_raw_fd());
                }
                self.stopping.get_or_insert(Stop::Done);
            }
            Token::Read(i) => self.read_client(i, buf),
            Token::Write(i) => {
                if revents & (libc::POLLERR | libc::POLLHUP) != 0 && revents & libc::POLLOUT == 0 {
                    self.client_gone(i);
                }
            }
            Token::ShardIn => {}
            Token::ShardOut(i) => self.read_shard(i, buf),
            Token::ShardExit(i) => {
                let s = &mut self.shards[i];
                let status = s.pidfd.as_ref().and_then(|fd| sys::pidfd_try_wait(fd.as_raw_fd()).ok().flatten());
                if let Some(st) = status {
                    s.status = Some(st);
                    // What it wrote before it went is still read, up to the pipe's end.
                    if s.from.is_some() {
                        self.read_shard(i, buf);
                    }
                    self.shard_ended(i);
                }
            }
        }
    }

    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        let Ok(sock) = sys::accept(l.as_raw_fd()) else { return };
        // The check `serve --listen` makes (docs/protocol.md), against this process.
        let why = match &self.peer {
            Some(p) => listen_refusal(sock.as_raw_fd(), p),
            None => Some(lines::REFUSED_NOT_ALIKE),
        };
        if let Some(why) = why {
            let _ = sys::write_all(sock.as_raw_fd(), &lines::error_line(&Value::Null, why));
            return;
        }
        let _ = sys::set_nonblocking(sock.as_raw_fd(), true);
        let c = Client::new(sock, None, false);
        match self.clients.iter().position(Option::is_none) {
            Some(i) => self.clients[i] = Some(c),
            None => self.clients.push(Some(c)),
        }
    }

    fn read_client(&mut self, i: usize, buf: &mut [u8]) {
        let Some(c) = self.clients[i].as_mut() else { return };
        match sys::read(c.read.as_raw_fd(), buf) {
            Ok(0) => {
                c.eof = true;
                if let Some(Line::Complete(line)) = c.lines.finish() {
                    self.line(i, &line);
                }
                if !self.clients[i].as_ref().is_some_and(|c| c.stdio) {
                    self.client_gone(i);
                }
            }
            Ok(n) => {
                c.lines.push(&buf[..n]);
                while let Some(line) = self.clients[i].as_mut().and_then(|c| c.lines.next_line()) {
                    match line {
                        Line::Complete(line) => self.line(i, &line),
                        Line::TooLong => self.send_client(i, lines::error_line(&Value::Null, &lines::too_long())),
                    }
                }
            }
            Err(libc::EAGAIN | libc::EINTR) => {}
            Err(_) => self.client_gone(i),
        }
    }

    /// One request line of client `c`.
    fn line(&mut self, c: usize, line: &[u8]) {
        let head = serde_json::from_slice::<Head>(line).ok().and_then(|h| {
            let target = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).ok();
            match (h.spec, h.interact, h.kill, h.cancel, h.answer) {
                (Some(s), None, None, None, None) => Some(Ask::Run { id: h.id, key: "spec", body: s.get().to_owned() }),
                (None, Some(s), None, None, None) => {
                    Some(Ask::Run { id: h.id, key: "interact", body: s.get().to_owned() })
                }
                (None, None, Some(t), None, None) => Some(Ask::Control { target: target(t)?, id: h.id, key: "kill" }),
                (None, None, None, Some(t), None) => Some(Ask::Control { target: target(t)?, id: h.id, key: "cancel" }),
                (None, None, None, None, Some(a)) => Some(Ask::Answer { id: h.id, body: a.get().to_owned() }),
                _ => None,
            }
        });
        let ask = match head {
            Some(ask) => ask,
            // Anything else is answered, or taken, as the supervisor would.
            _ => match lines::parse_line(line) {
                Err(e) => return self.send_client(c, lines::error_line(&e.id, &e.message)),
                Ok(LineRequest::Run { id, spec }) => {
                    Ask::Run { id, key: "spec", body: serde_json::to_string(&spec).expect("serializable") }
                }
                Ok(LineRequest::Interact { id, spec }) => {
                    Ask::Run { id, key: "interact", body: serde_json::to_string(&spec).expect("serializable") }
                }
                Ok(LineRequest::Kill { id, target }) => Ask::Control { id, target, key: "kill" },
                Ok(LineRequest::Cancel { id, target }) => Ask::Control { id, target, key: "cancel" },
                Ok(LineRequest::Answer { id, answer }) => {
                    Ask::Answer { id, body: serde_json::to_string(&answer).expect("serializable") }
                }
                // Sessions live in one supervisor; a per-CPU server has several.
                Ok(LineRequest::Session { id, .. }) => {
                    return self
                        .send_client(c, lines::error_line(&id, "sessions are not kept by `capsule serve --per-cpu`"))
                }
            },
        };
        match ask {
            Ask::Run { id, key, body } => {
                let k = id_key(&id);
                if self.clients[c].as_ref().is_some_and(|cl| cl.ids.contains_key(&k)) {
                    return self.send_client(c, lines::error_line(&id, lines::ID_IN_FLIGHT));
                }
                let fid = self.next_id;
                let msg = format!("{{\"id\":{fid},\"{key}\":{body}}}\n");
                // Within the limit as the client sent it, past it only by the ids' lengths.
                if msg.len() > lines::MAX_LINE + 1 {
                    return self.send_client(c, lines::error_line(&Value::Null, &lines::too_long()));
                }
                let Some(shard) = self.least_loaded() else {
                    return self.send_client(c, lines::error_line(&id, "the server is stopping"));
                };
                let slots = if key == "interact" { 2 } else { 1 };
                self.next_id += 1;
                self.shards[shard].load += slots;
                self.shards[shard].out.extend_from_slice(msg.as_bytes());
                if let Some(cl) = self.clients[c].as_mut() {
                    cl.ids.insert(k, fid);
                }
                self.flights.insert(fid, Flight { client: Some((c, id)), shard, slots, target: None });
            }
            Ask::Control { id, target, key } => {
                let run = self.clients[c].as_ref().and_then(|cl| cl.ids.get(&id_key(&target)).copied());
                let Some((run, shard)) = run.and_then(|r| self.flights.get(&r).map(|f| (r, f.shard))) else {
                    return self.send_client(c, lines::control_line(&id, &target, false));
                };
                self.control(shard, run, key, Some((c, id)), Some(target));
            }
            Ask::Answer { id, body } => {
                // Only the client whose run asked: its ids map to the front's.
                // Checked as the supervisor would, first: the same refusals.
                let value = serde_json::from_str::<Value>(&body).unwrap_or(Value::Null);
                if let Err((ask_id, why)) = lines::parse_answer(&value) {
                    return self.send_client(c, lines::answer_refused_line(&id, ask_id, &why));
                }
                let run = self.clients[c].as_ref().and_then(|cl| cl.ids.get(&id_key(&id)).copied());
                let Some((run, shard)) = run.and_then(|r| self.flights.get(&r).map(|f| (r, f.shard))) else {
                    let ask_id = value.get("ask_id").and_then(Value::as_u64);
                    let why = "no run with this id on this connection is asking";
                    return self.send_client(c, lines::answer_refused_line(&id, ask_id, why));
                };
                if body.len() > lines::MAX_LINE {
                    return self.send_client(c, lines::error_line(&Value::Null, &lines::too_long()));
                }
                let msg = format!("{{\"id\":{run},\"answer\":{body}}}\n");
                self.shards[shard].out.extend_from_slice(msg.as_bytes());
            }
        }
    }

    /// Sends `kill` or `cancel` of the front's run `run` to `shard`.
    fn control(&mut self, shard: usize, run: u64, key: &str, client: Option<(usize, Value)>, target: Option<Value>) {
        let fid = self.next_id;
        self.next_id += 1;
        let msg = format!("{{\"id\":{fid},\"{key}\":{run}}}\n");
        self.shards[shard].out.extend_from_slice(msg.as_bytes());
        self.flights.insert(fid, Flight { client, shard, slots: 0, target });
    }

    /// The live supervisor with the fewest slots taken (the first of equals).
    fn least_loaded(&self) -> Option<usize> {
        self.shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.to.is_some() && s.status.is_none())
            .min_by_key(|(_, s)| s.load)
            .map(|(i, _)| i)
    }

    fn read_shard(&mut self, i: usize, buf: &mut [u8]) {
        loop {
            let Some(fd) = &self.shards[i].from else { return };
            match sys::read(fd.as_raw_fd(), buf) {
                Ok(0) => {
                    self.shards[i].from = None;
                    self.shard_ended(i);
                    return;
                }
                Ok(n) => {
                    let s = &mut self.shards[i];
                    s.partial.extend_from_slice(&buf[..n]);
                    let mut start = 0;
                    let mut data = std::mem::take(&mut s.partial);
                    while let Some(len) = data[start..].iter().position(|&b| b == b'\n') {
                        self.answer(i, &data[start..start + len]);
                        start += len + 1;
                    }
                    data.drain(..start);
                    self.shards[i].partial = data;
                    if n < buf.len() {
                        return;
                    }
                }
                Err(libc::EAGAIN | libc::EINTR) => return,
                Err(_) => {
                    self.shards[i].from = None;
                    self.shard_ended(i);
                    return;
                }
            }
        }
    }

    /// One answer of supervisor `shard`: to its client, under the client's id.
    fn answer(&mut self, shard: usize, line: &[u8]) {
        let Ok(a) = serde_json::from_slice::<Answer>(line) else { return };
        let Some(fid) = a.id.as_u64() else { return };
        if let Some((key, raw)) = a.ask.map(|r| ("ask", r)).or(a.answer_refused.map(|r| ("answer_refused", r))) {
            // Not the run's end: to its client, under the client's id.
            let Some((c, id)) = self.flights.get(&fid).and_then(|f| f.client.clone()) else { return };
            let mut out = Vec::with_capacity(raw.get().len() + 32);
            out.extend_from_slice(b"{\"id\":");
            serde_json::to_writer(&mut out, &id).expect("serializable");
            out.extend_from_slice(format!(",\"{key}\":").as_bytes());
            out.extend_from_slice(raw.get().as_bytes());
            out.extend_from_slice(b"}\n");
            return self.send_client(c, out);
        }
        let Some(f) = self.flights.remove(&fid) else { return };
        self.shards[shard].load -= f.slots;
        let Some((c, id)) = f.client else { return };
        if f.slots > 0 {
            if let Some(cl) = self.clients[c].as_mut() {
                cl.ids.remove(&id_key(&id));
            }
        }
        if let (Some(target), Some(_)) = (&f.target, a.error) {
            // Its run ended meanwhile: the supervisor named the front's id.
            return self.send_client(c, lines::control_line(&id, target, false));
        }
        let (key, raw) = match (a.result, a.error, a.ok) {
            (Some(r), _, _) => ("result", r),
            (None, Some(e), _) => ("error", e),
            (None, None, Some(o)) => ("ok", o),
            (None, None, None) => return,
        };
        let mut out = Vec::with_capacity(raw.get().len() + 32);
        out.extend_from_slice(b"{\"id\":");
        serde_json::to_writer(&mut out, &id).expect("serializable");
        out.extend_from_slice(format!(",\"{key}\":").as_bytes());
        out.extend_from_slice(raw.get().as_bytes());
        out.extend_from_slice(b"}\n");
        self.send_client(c, out);
    }

    /// Supervisor `i`'s output ended or it exited: unless the front closed
    /// it, that ends the server (as a single supervisor's death would).
    fn shard_ended(&mut self, i: usize) {
        let stopped = matches!(self.stopping, Some(Stop::Done));
        let s = &mut self.shards[i];
        if s.to.is_none() || self.stopping.is_some() {
            // Expected; its exit status, when it comes, must still be 0.
            if s.status.is_some_and(|st| !stopped && !exited_with(st, 0)) {
                self.failed = true;
            }
            return;
        }
        if s.status.is_none() && s.from.is_none() {
            // Its output ends as it exits: its status says more, if it comes soon.
            if let Some(fd) = &s.pidfd {
                let mut p = [libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
                if sys::ppoll(&mut p, Some(std::time::Duration::from_secs(1))) == Ok(1) {
                    s.status = sys::pidfd_try_wait(fd.as_raw_fd()).ok().flatten();
                }
            }
        }
        let s = &self.shards[i];
        let how = match s.status {
            Some(st) if libc::WIFSIGNALED(st) => format!("was killed by signal {}", libc::WTERMSIG(st)),
            Some(st) if libc::WIFEXITED(st) => format!("exited with status {}", libc::WEXITSTATUS(st)),
            _ => "closed its output".to_string(),
        };
        let why = format!("the server stopped: its supervisor on CPU {} (pid {}) {how}", s.cpu, s.pid);
        // One that exits 125 said why on stderr itself.
        if !s.status.is_some_and(|st| exited_with(st, EXIT_CAPSULE_ERROR)) {
            eprintln!("capsule: error: {why}");
        }
        self.failed = true;
        self.stopping = Some(Stop::Failed(why));
    }

    /// A client is gone: its runs are cancelled; stdout gone ends the server.
    fn client_gone(&mut self, i: usize) {
        let Some(c) = self.clients[i].take() else { return };
        for fid in c.ids.values() {
            if let Some(f) = self.flights.get_mut(fid) {
                f.client = None;
                let shard = f.shard;
                self.control(shard, *fid, "cancel", None, None);
            }
        }
        if c.stdio {
            self.stopping.get_or_insert(Stop::Done);
            self.close_all();
        }
    }

    fn send_client(&mut self, i: usize, line: Vec<u8>) {
        if let Some(c) = self.clients.get_mut(i).and_then(Option::as_mut) {
            c.out.extend_from_slice(&line);
        }
    }

    fn flush_client(&mut self, i: usize) {
        let Some(c) = self.clients.get_mut(i).and_then(Option::as_mut) else { return };
        while !c.out.is_empty() {
            match sys::write(c.wfd(), &c.out) {
                Ok(n) => drop(c.out.drain(..n)),
                Err(libc::EAGAIN | libc::EINTR) => return,
                Err(_) => return self.client_gone(i),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head takes a field given as `null` as there, so a line the
    /// supervisor's parser refuses is never passed on as a run.
    #[test]
    fn a_null_field_is_there() {
        let h: Head = serde_json::from_slice(br#"{"id":4,"spec":{"argv":["/bin/true"]},"kill":null}"#).unwrap();
        assert!(h.spec.is_some() && h.kill.is_some_and(|k| k.get() == "null"));
        let h: Head = serde_json::from_slice(br#"{"id":"a","spec":null}"#).unwrap();
        assert_eq!(h.spec.map(RawValue::get), Some("null"));
        // Unknown keys and a missing id go to the full parser.
        assert!(serde_json::from_slice::<Head>(br#"{"id":1,"spec":{},"x":1}"#).is_err());
        assert!(serde_json::from_slice::<Head>(br#"{"spec":{}}"#).is_err());
    }

    /// Ids are told apart as JSON values, as the supervisor does.
    #[test]
    fn id_keys() {
        assert_ne!(id_key(&serde_json::json!(1)), id_key(&serde_json::json!(1.0)));
        assert_ne!(id_key(&serde_json::json!(1)), id_key(&serde_json::json!("1")));
        assert_eq!(id_key(&serde_json::json!({"a": [1]})), id_key(&serde_json::json!({"a": [1]})));
    }
}
