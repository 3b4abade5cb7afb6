//! The egress proxy of a run with `egress` (docs/egress.md).
//!
//! A listener on 127.0.0.1:3128 *inside* the run's network (made by a
//! short-lived thread that enters that network, when PID 1 is prepared: a
//! socket stays in the network it was made in), served from the host's
//! network by the supervisor: one long-lived thread accepts on every run's
//! listener (epoll), a thread per connection serves it: HTTP (`CONNECT`
//! and absolute-URI requests) and SOCKS5
//! (the first byte tells them apart). Each destination is checked against
//! the rules, resolved here (never by the program), refused when an address
//! is local unless `allow_local`, and recorded for the run's `network`
//! report; with `ask`, a destination no pattern names is asked about
//! through the loop (an eventfd in its poll set), on the run's client's
//! connection only. The run's network still has no route out: if this proxy fails
//! or stops, the run has no network beyond its loopback.
//!
//! Who is on the other end: only the run's processes can reach the
//! listener, since the network is the run's alone (`check_request` refuses
//! `egress` where runs share one), and the proxy stops, closing every
//! socket it holds in that network, before the network is given back.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::SysError;
use crate::proto::egress::{self, Egress, Rules, PROXY_ADDR, PROXY_PORT};
use crate::proto::result::{NetworkEntry, Verdict, Via};
use crate::sys;

/// Connections served at once; more are closed at once (a run cannot make
/// the supervisor start threads without bound).
const MAX_CONNS: usize = 256;
/// Distinct destinations the report keeps; more are counted in `dropped`.
pub(crate) const MAX_ENTRIES: usize = 1024;
/// Longest request head (request line and headers) the HTTP side reads.
const MAX_HEAD: usize = 64 << 10;
/// How long a client may take to say where it goes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Stack of a connection's threads: the resolver (glibc's NSS) needs tens of KiB.
const THREAD_STACK: usize = 256 << 10;
/// The relay's pipe: a splice moves up to this much at once.
const PIPE_SIZE: usize = 1 << 20;
/// How long stopping waits for connections to wind down (after shutting
/// their sockets down; only one still resolving a name takes longer).
const STOP_WAIT: Duration = Duration::from_millis(200);

/// The supervisor's proxies: one long-lived thread accepts on every run's
/// listener (epoll), so a run with `egress` starts and stops no thread of
/// its own; and the asks its connections send to the loop.
pub(crate) struct Proxies {
    epoll: Arc<OwnedFd>,
    runs: Arc<Mutex<HashMap<u64, Arc<Shared>>>>,
    next: u64,
    /// Asks for the loop to send on (its eventfd is in the loop's poll set).
    pub(crate) asks: Arc<AskQueue>,
}

/// Asks of every run's proxy waiting for the loop.
pub(crate) struct AskQueue {
    /// Signalled with each ask queued.
    pub(crate) wake: OwnedFd,
    queue: Mutex<Vec<AskOut>>,
}

/// One ask for the loop to send to the run's client.
pub(crate) struct AskOut {
    /// The run's proxy ([`Proxy::key`]).
    pub(crate) proxy: u64,
    pub(crate) ask_id: u64,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) via: Via,
}

impl AskQueue {
    /// Takes every ask queued (and the eventfd's count).
    pub(crate) fn take(&self) -> Vec<AskOut> {
        let _ = sys::read(self.wake.as_raw_fd(), &mut [0u8; 8]);
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// How the protocol names a way in (as the report's `via`).
pub(crate) fn via_name(v: Via) -> &'static str {
    match v {
        Via::Http => "http",
        Via::Connect => "connect",
        Via::Socks => "socks",
        Via::Direct => "direct",
    }
}

/// A client's answer to an ask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    AllowOnce,
    AllowRun,
    Deny,
}

impl Decision {
    pub(crate) fn parse(s: &str) -> Option<Decision> {
        match s {
            "allow-once" => Some(Decision::AllowOnce),
            "allow-run" => Some(Decision::AllowRun),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }
}

/// Connections accepted from one listener before the others' turn.
const ACCEPT_BATCH: usize = 16;
/// Asks one run may have waiting at once; more are refused unasked.
const MAX_ASKS: usize = 16;

impl Proxies {
    pub(crate) fn new() -> Result<Proxies, String> {
        let epoll = Arc::new(sys::epoll_create().map_err(|e| SysError::new("epoll_create1", e).to_string())?);
        let wake = sys::eventfd().map_err(|e| SysError::new("eventfd", e).to_string())?;
        let runs: Arc<Mutex<HashMap<u64, Arc<Shared>>>> = Arc::default();
        let (ep, rs) = (epoll.clone(), runs.clone());
        std::thread::Builder::new()
            .name("capsule-proxy".into())
            .stack_size(THREAD_STACK)
            .spawn(move || accept_loop(&ep, &rs))
            .map_err(|e| format!("starting the egress proxy's thread: {e}"))?;
        let asks = Arc::new(AskQueue { wake, queue: Mutex::new(Vec::new()) });
        Ok(Proxies { epoll, runs, next: 0, asks })
    }

    /// Serves `listener` (in the run's network, [`listen_in`]) under `e`'s rules.
    pub(crate) fn start(&mut self, listener: TcpListener, e: &Egress) -> Result<Proxy, String> {
        let rules = Rules::new(e).map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| format!("the egress proxy's listener: {e}"))?;
        self.next += 1;
        let key = self.next;
        let fd = listener.as_raw_fd();
        let shared = Arc::new(Shared {
            rules,
            allow_local: e.allow_local,
            resolve: e.resolve.iter().filter_map(|(k, v)| Some((egress::normalize_name(k)?, v.clone()))).collect(),
            ask: e.ask.then(|| (self.asks.clone(), e.ask_timeout.unwrap_or(egress::ASK_TIMEOUT))),
            key,
            listener: Mutex::new(Some(listener)),
            stop: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            ended: Condvar::new(),
            answered: Condvar::new(),
        });
        lock_map(&self.runs).insert(key, shared.clone());
        if let Err(e) = sys::epoll_ctl(self.epoll.as_raw_fd(), true, fd, libc::EPOLLIN as u32, key) {
            lock_map(&self.runs).remove(&key);
            return Err(SysError::new("epoll_ctl", e).to_string());
        }
        Ok(Proxy { shared, runs: self.runs.clone(), epoll: self.epoll.clone(), done: false })
    }
}

fn lock_map(m: &Mutex<HashMap<u64, Arc<Shared>>>) -> MutexGuard<'_, HashMap<u64, Arc<Shared>>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A run's proxy: stopped (and its report taken) when the run is over.
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    runs: Arc<Mutex<HashMap<u64, Arc<Shared>>>>,
    epoll: Arc<OwnedFd>,
    done: bool,
}

struct Shared {
    rules: Rules,
    allow_local: bool,
    resolve: HashMap<String, Vec<IpAddr>>,
    /// `ask`: where asks go, and how long one waits.
    ask: Option<(Arc<AskQueue>, Duration)>,
    key: u64,
    /// Taken (closed) at stop, under this lock: the accepting thread
    /// uses it only while holding it.
    listener: Mutex<Option<TcpListener>>,
    stop: AtomicBool,
    state: Mutex<State>,
    /// Signalled when a connection ends.
    ended: Condvar,
    /// Signalled when an ask is answered, or at stop.
    answered: Condvar,
}

type Key = (Option<String>, u16, Via, Verdict, String);

#[derive(Default)]
struct State {
    report: Vec<NetworkEntry>,
    index: HashMap<Key, usize>,
    dropped: u64,
    live: usize,
    next_id: u64,
    /// Clones of each live connection's sockets, shut down at stop.
    socks: HashMap<u64, Vec<TcpStream>>,
    /// Asks waiting, by id: their answer once given.
    asks: HashMap<u64, Option<Decision>>,
    next_ask: u64,
    /// Destinations answered `allow-run`.
    allowed: std::collections::HashSet<(String, u16)>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Proxy {
    /// Its key in the asks it sends ([`AskOut::proxy`]).
    pub(crate) fn key(&self) -> u64 {
        self.shared.key
    }

    /// Gives an ask its answer; why not where it cannot be (no such ask
    /// waiting: answered, timed out, or never asked).
    pub(crate) fn answer(&self, ask_id: u64, d: Decision) -> Result<(), &'static str> {
        let mut st = lock(&self.shared.state);
        match st.asks.get_mut(&ask_id) {
            Some(slot @ &mut None) => {
                *slot = Some(d);
                self.shared.answered.notify_all();
                Ok(())
            }
            Some(Some(_)) => Err("this ask was answered already"),
            None => Err("no such ask is waiting (answered, timed out, or never asked)"),
        }
    }

    /// Stops serving, closes every connection, and returns the report and
    /// how many destinations it had no room for.
    pub(crate) fn stop(mut self) -> (Vec<NetworkEntry>, u64) {
        self.halt();
        let mut st = lock(&self.shared.state);
        (std::mem::take(&mut st.report), st.dropped)
    }

    fn halt(&mut self) {
        self.done = true;
        let sh = &self.shared;
        sh.stop.store(true, SeqCst);
        lock_map(&self.runs).remove(&sh.key);
        // Closed here, not by the accepting thread: the network may be
        // given back (and its port bound again) as soon as the run is over.
        if let Some(l) = sh.listener.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = sys::epoll_ctl(self.epoll.as_raw_fd(), false, l.as_raw_fd(), 0, 0);
        }
        let deadline = Instant::now() + STOP_WAIT;
        let mut st = lock(&sh.state);
        sh.answered.notify_all();
        if st.live == 0 {
            return;
        }
        for s in st.socks.values().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
        while st.live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = sh.ended.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if !self.done {
            self.halt();
        }
    }
}

/// A TCP listener on the proxy's address in the network `netns`: made by
/// a thread that enters it (the supervisor's own thread stays in the
/// host's network, which it could not return to) and then ends. Made when
/// PID 1 is prepared, ahead of the request for a spare.
pub(crate) fn listen_in(netns: RawFd) -> Result<TcpListener, String> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("capsule-bridge".into())
            .stack_size(THREAD_STACK)
            .spawn_scoped(s, move || {
                sys::setns(netns, libc::CLONE_NEWNET)
                    .map_err(|e| SysError::new("setns(CLONE_NEWNET)", e).path("the run's network").to_string())?;
                TcpListener::bind((PROXY_ADDR, PROXY_PORT))
                    .map_err(|e| format!("the egress proxy: bind {PROXY_ADDR}:{PROXY_PORT} in the run's network: {e}"))
            })
            .map_err(|e| format!("starting the egress proxy's bridge thread: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the egress proxy's bridge thread panicked".into()))
    })
}

/// The accepting thread: every run's listener in one epoll set.
fn accept_loop(epoll: &OwnedFd, runs: &Mutex<HashMap<u64, Arc<Shared>>>) {
    let mut ready = Vec::new();
    loop {
        match sys::epoll_wait(epoll.as_raw_fd(), &mut ready, -1) {
            Ok(()) => {}
            Err(libc::EINTR) => continue,
            // Not expected; a short pause keeps a failure from spinning.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        }
        for key in &ready {
            let Some(sh) = lock_map(runs).get(key).cloned() else { continue };
            sh.accept_all();
        }
    }
}

impl Shared {
    /// Accepts what is waiting on the listener, a few at a time (epoll
    /// reports it again: a run that connects without pause cannot keep the
    /// thread from the others' listeners); a thread for each connection.
    fn accept_all(self: &Arc<Shared>) {
        for _ in 0..ACCEPT_BATCH {
            let client = {
                let l = self.listener.lock().unwrap_or_else(|e| e.into_inner());
                let Some(l) = l.as_ref() else { return };
                match l.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // WouldBlock: all taken. Out of descriptors or memory:
                    // the next readiness tries again.
                    Err(_) => return,
                }
            };
            let _ = client.set_nonblocking(false);
            let id = {
                let mut st = lock(&self.state);
                if st.live >= MAX_CONNS || self.stop.load(SeqCst) {
                    continue;
                }
                let Ok(clone) = client.try_clone() else { continue };
                st.live += 1;
                st.next_id += 1;
                let id = st.next_id;
                st.socks.insert(id, vec![clone]);
                id
            };
            let sh2 = self.clone();
            let spawned =
                std::thread::Builder::new().name("capsule-proxy".into()).stack_size(THREAD_STACK).spawn(move || {
                    serve(&sh2, id, client);
                    sh2.end(id);
                });
            if spawned.is_err() {
                self.end(id);
            }
        }
    }
}

/// Where a connection asked to go and how the proxy answers it.
struct Outcome {
    /// The report entry's index.
    entry: Option<usize>,
    result: Result<TcpStream, Refusal>,
}

/// Why a destination was not reached.
enum Refusal {
    /// A deny pattern.
    Denied,
    /// No allow pattern.
    NotAllowed,
    /// The client answered `deny` to its ask.
    ByUser,
    /// The client did not answer its ask in time (or too many were waiting).
    NoAnswer(String),
    /// A local address, without `allow_local`.
    Local(String),
    /// The name did not resolve.
    Resolve(String),
    /// No address answered (the last error's kind, and text).
    Connect(ErrorKind, String),
    /// The run is over.
    Stopped,
}

impl Shared {
    fn end(&self, id: u64) {
        let mut st = lock(&self.state);
        st.socks.remove(&id);
        st.live -= 1;
        self.ended.notify_all();
    }

    /// Adds a connection to the report; its entry's index.
    fn record(&self, key: Key, address: Option<String>, error: Option<String>) -> Option<usize> {
        let mut st = lock(&self.state);
        let i = match st.index.get(&key) {
            Some(&i) => i,
            None if st.report.len() >= MAX_ENTRIES => {
                st.dropped += 1;
                return None;
            }
            None => {
                let (host, port, via, verdict, rule) = key.clone();
                st.report.push(NetworkEntry {
                    host,
                    address: None,
                    port,
                    via,
                    verdict,
                    rule,
                    count: 0,
                    bytes_sent: 0,
                    bytes_received: 0,
                    error: None,
                });
                let i = st.report.len() - 1;
                st.index.insert(key, i);
                i
            }
        };
        let e = &mut st.report[i];
        e.count += 1;
        if address.is_some() {
            e.address = address;
        }
        if error.is_some() {
            e.error = error;
        }
        Some(i)
    }

    fn add_bytes(&self, entry: Option<usize>, sent: u64, received: u64) {
        if let Some(i) = entry {
            let mut st = lock(&self.state);
            st.report[i].bytes_sent += sent;
            st.report[i].bytes_received += received;
        }
    }

    /// Keeps a clone of an upstream socket to shut down at stop; false
    /// when the run is over already.
    fn register(&self, id: u64, s: &TcpStream) -> bool {
        let mut st = lock(&self.state);
        if self.stop.load(SeqCst) {
            return false;
        }
        if let Ok(c) = s.try_clone() {
            st.socks.entry(id).or_default().push(c);
        }
        true
    }

    /// Asks the run's client about a destination no pattern names: the
    /// rule that allows it, or the refusal. Waits up to the ask's timeout
    /// (the run's wall time goes on meanwhile).
    fn ask(&self, host: &str, port: u16, via: Via) -> Result<&'static str, Refusal> {
        let (queue, timeout) = self.ask.as_ref().expect("asking");
        let dest = (host.to_string(), port);
        let mut st = lock(&self.state);
        if st.allowed.contains(&dest) {
            return Ok("asked: allow-run");
        }
        if st.asks.len() >= MAX_ASKS {
            return Err(Refusal::NoAnswer(format!("{MAX_ASKS} asks waiting already")));
        }
        st.next_ask += 1;
        let ask_id = st.next_ask;
        st.asks.insert(ask_id, None);
        {
            let mut q = queue.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.push(AskOut { proxy: self.key, ask_id, host: host.to_string(), port, via });
        }
        sys::eventfd_signal(queue.wake.as_raw_fd());
        let deadline = Instant::now() + *timeout;
        loop {
            if self.stop.load(SeqCst) {
                st.asks.remove(&ask_id);
                return Err(Refusal::Stopped);
            }
            if let Some(Some(d)) = st.asks.get(&ask_id) {
                let d = *d;
                st.asks.remove(&ask_id);
                return match d {
                    Decision::AllowOnce => Ok("asked: allow-once"),
                    Decision::AllowRun => {
                        st.allowed.insert(dest);
                        Ok("asked: allow-run")
                    }
                    Decision::Deny => Err(Refusal::ByUser),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.asks.remove(&ask_id);
                return Err(Refusal::NoAnswer(format!("no answer in {} ms", timeout.as_millis())));
            }
            st = self.answered.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Checks, resolves and connects to `host` (normalized) at `port`.
    fn open(&self, id: u64, host: &str, port: u16, via: Via) -> Outcome {
        let key = |verdict, rule: &str| (Some(host.to_string()), port, via, verdict, rule.to_string());
        let rule = match self.rules.verdict(host, port) {
            egress::Verdict::Denied(p) => {
                let entry = self.record(key(Verdict::Refused, &format!("deny-host {p}")), None, None);
                return Outcome { entry, result: Err(Refusal::Denied) };
            }
            egress::Verdict::NotAllowed if self.ask.is_some() => match self.ask(host, port, via) {
                Ok(rule) => rule.to_string(),
                Err(Refusal::Stopped) => return Outcome { entry: None, result: Err(Refusal::Stopped) },
                Err(r) => {
                    let rule = match &r {
                        Refusal::ByUser => "asked: deny".to_string(),
                        Refusal::NoAnswer(why) => format!("asked: {why}"),
                        _ => "asked".to_string(),
                    };
                    let entry = self.record(key(Verdict::Refused, &rule), None, None);
                    return Outcome { entry, result: Err(r) };
                }
            },
            egress::Verdict::NotAllowed => {
                let entry = self.record(key(Verdict::Refused, "no allow-host"), None, None);
                return Outcome { entry, result: Err(Refusal::NotAllowed) };
            }
            egress::Verdict::Allowed(p) => p,
        };
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => match self.resolve.get(host) {
                Some(ips) => ips.iter().map(|&ip| SocketAddr::new(ip, port)).collect(),
                None => match (host, port).to_socket_addrs() {
                    Ok(a) => a.collect(),
                    Err(e) => {
                        let msg = format!("resolve {host}: {e}");
                        let entry = self.record(key(Verdict::Allowed, &rule), None, Some(msg.clone()));
                        return Outcome { entry, result: Err(Refusal::Resolve(msg)) };
                    }
                },
            },
        };
        if !self.allow_local {
            if let Some((a, kind)) = addrs.iter().find_map(|a| Some((a.ip(), egress::local_kind(a.ip())?))) {
                let why = format!("{a} is {kind}; allow-local");
                let entry = self.record(key(Verdict::Refused, &why), Some(a.to_string()), None);
                return Outcome { entry, result: Err(Refusal::Local(format!("{a} is {kind}"))) };
            }
        }
        if addrs.is_empty() {
            let msg = format!("resolve {host}: no address");
            let entry = self.record(key(Verdict::Allowed, &rule), None, Some(msg.clone()));
            return Outcome { entry, result: Err(Refusal::Resolve(msg)) };
        }
        let mut last = (ErrorKind::Other, String::new());
        for a in &addrs {
            if self.stop.load(SeqCst) {
                return Outcome { entry: None, result: Err(Refusal::Stopped) };
            }
            match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    if !self.register(id, &s) {
                        return Outcome { entry: None, result: Err(Refusal::Stopped) };
                    }
                    let _ = s.set_nodelay(true);
                    let entry = self.record(key(Verdict::Allowed, &rule), Some(a.ip().to_string()), None);
                    return Outcome { entry, result: Ok(s) };
                }
                Err(e) => last = (e.kind(), format!("connect {a}: {e}")),
            }
        }
        let entry = self.record(key(Verdict::Allowed, &rule), Some(addrs[0].ip().to_string()), Some(last.1.clone()));
        Outcome { entry, result: Err(Refusal::Connect(last.0, last.1)) }
    }
}

fn serve(sh: &Shared, id: u64, mut client: TcpStream) {
    let _ = client.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = client.set_nodelay(true);
    let mut first = [0u8; 1];
    match client.peek(&mut first) {
        Ok(1) if first[0] == 5 => socks(sh, id, client),
        // SOCKS4: "request rejected".
        Ok(1) if first[0] == 4 => drop(client.write_all(&[0, 0x5b, 0, 0, 0, 0, 0, 0])),
        Ok(1) => http(sh, id, client),
        _ => {}
    }
}

/// Copies both ways until both sides are done; bytes (client to upstream,
/// upstream to client).
pub(crate) fn relay(client: TcpStream, upstream: TcpStream) -> (u64, u64) {
    let _ = client.set_read_timeout(None);
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else { return (0, 0) };
    let back =
        std::thread::Builder::new().name("capsule-proxy".into()).stack_size(THREAD_STACK).spawn(move || pump(u2, c2));
    let sent = pump(client, upstream);
    let received = match back {
        Ok(t) => t.join().unwrap_or(0),
        Err(_) => 0,
    };
    (sent, received)
}

/// One direction of a connection, until its end: spliced through a pipe
/// (the bytes never enter the supervisor's memory), or copied where a pipe
/// cannot be had.
fn pump(from: TcpStream, to: TcpStream) -> u64 {
    let Ok((r, w)) = sys::pipe2(libc::O_CLOEXEC) else { return copy(from, to) };
    let _ = sys::set_pipe_size(w.as_raw_fd(), PIPE_SIZE);
    let (f, t) = (from.as_raw_fd(), to.as_raw_fd());
    let mut n = 0u64;
    let fail = |n| {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        n
    };
    loop {
        let got = match splice_waiting(f, w.as_raw_fd(), PIPE_SIZE, f, libc::POLLIN) {
            Ok(0) => break,
            Ok(k) => k,
            Err(_) => return fail(n),
        };
        let mut left = got;
        while left > 0 {
            match splice_waiting(r.as_raw_fd(), t, left, t, libc::POLLOUT) {
                Ok(k) if k > 0 => left -= k,
                // The other side is gone: so is this direction.
                _ => return fail(n),
            }
        }
        n += got as u64;
    }
    let _ = to.shutdown(Shutdown::Write);
    n
}

/// `splice` that waits (poll on `sock` for `event`) where the socket would block.
fn splice_waiting(from: RawFd, to: RawFd, len: usize, sock: RawFd, event: i16) -> sys::SysResult<usize> {
    loop {
        match sys::splice(from, to, len) {
            Err(libc::EAGAIN) => {
                let mut p = [libc::pollfd { fd: sock, events: event, revents: 0 }];
                sys::poll(&mut p, -1)?;
            }
            r => return r,
        }
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream) -> u64 {
    let mut buf = vec![0u8; 128 << 10];
    let mut n = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                if to.write_all(&buf[..k]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return n;
                }
                n += k as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return n;
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    n
}

// ---- HTTP ----

/// Reads up to the end of the request head; the head and what followed it.
fn read_head(c: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = c.read(&mut chunk).ok().filter(|&n| n > 0)?;
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            let rest = buf.split_off(end);
            return Some((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

fn respond(c: &mut TcpStream, status: &str, error: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\nX-Proxy-Error: {error}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = c.write_all(msg.as_bytes());
}

/// The 403/502 for a destination not reached.
fn refuse_http(c: &mut TcpStream, host: &str, port: u16, r: &Refusal) {
    let dest = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let (status, error, body) = match r {
        Refusal::Denied => (
            "403 Forbidden",
            "blocked-by-denylist",
            format!("capsule: {dest} is refused by a --deny-host rule of this run; remove that rule to allow it\n"),
        ),
        Refusal::NotAllowed => (
            "403 Forbidden",
            "blocked-by-allowlist",
            format!(
                "capsule: {dest} is not in this run's allowed hosts; --allow-host {} would allow it\n",
                pattern(host, port)
            ),
        ),
        Refusal::ByUser => (
            "403 Forbidden",
            "blocked-by-user",
            format!("capsule: {dest} is not in this run's allowed hosts, and the caller, asked, said deny\n"),
        ),
        Refusal::NoAnswer(why) => (
            "403 Forbidden",
            "blocked-ask-unanswered",
            format!(
                "capsule: {dest} is not in this run's allowed hosts, and the caller, asked, gave no answer ({why})\n"
            ),
        ),
        Refusal::Local(why) => (
            "403 Forbidden",
            "blocked-local-address",
            format!("capsule: {dest}: {why}, which this run may not reach; --allow-local would allow it\n"),
        ),
        Refusal::Resolve(e) => ("502 Bad Gateway", "resolve-failed", format!("capsule: {e}\n")),
        Refusal::Connect(_, e) => ("502 Bad Gateway", "connect-failed", format!("capsule: {e}\n")),
        Refusal::Stopped => return,
    };
    respond(c, status, error, &body);
}

/// The `--allow-host` argument for a destination.
fn pattern(host: &str, port: u16) -> String {
    match (host.contains(':'), port) {
        (true, p) => format!("[{host}]:{p}"),
        (false, 80 | 443) => host.to_string(),
        (false, p) => format!("{host}:{p}"),
    }
}

fn http(sh: &Shared, id: u64, mut client: TcpStream) {
    let Some((head, rest)) = read_head(&mut client) else {
        return respond(&mut client, "400 Bad Request", "bad-request", "capsule: no complete request head\n");
    };
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target, version) =
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return respond(&mut client, "400 Bad Request", "bad-request", "capsule: not an HTTP/1 request\n");
    }
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (authority, path) = if connect {
        (target, "")
    } else {
        let lower = target.get(..7).map(str::to_ascii_lowercase);
        if lower.as_deref() != Some("http://") {
            return respond(
                &mut client,
                "400 Bad Request",
                "bad-request",
                "capsule: this proxy takes absolute http:// URIs and CONNECT (for https://, use CONNECT: HTTPS_PROXY)\n",
            );
        }
        let rest = &target[7..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let path = &rest[end..];
        (&rest[..end], if path.is_empty() || path.starts_with('#') { "/" } else { path })
    };
    let parsed = egress::split_host_port(authority).filter(|_| !authority.contains('@')).and_then(|(h, p)| {
        let port = match p {
            Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0)?,
            None if connect => return None,
            None => 80,
        };
        Some((egress::normalize_host(h)?, port))
    });
    let Some((host, port)) = parsed else {
        return respond(
            &mut client,
            "400 Bad Request",
            "bad-request",
            "capsule: the request names no valid host (letters, digits, `-`, `_`, dots, or an address) and port\n",
        );
    };
    let via = if connect { Via::Connect } else { Via::Http };
    let out = sh.open(id, &host, port, via);
    let mut upstream = match out.result {
        Ok(s) => s,
        Err(r) => return refuse_http(&mut client, &host, port, &r),
    };
    let mut sent = 0u64;
    if connect {
        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
            return;
        }
    } else {
        // Origin form, one request per connection, no proxy headers onward.
        let mut h = format!("{method} {path} {version}\r\n");
        for l in lines.filter(|l| !l.is_empty()) {
            let name = l.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
            if !matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive") {
                h.push_str(l);
                h.push_str("\r\n");
            }
        }
        h.push_str("Connection: close\r\n\r\n");
        if upstream.write_all(h.as_bytes()).is_err() {
            return;
        }
        sent += h.len() as u64;
    }
    if !rest.is_empty() {
        if upstream.write_all(&rest).is_err() {
            return;
        }
        sent += rest.len() as u64;
    }
    let (s, r) = relay(client, upstream);
    sh.add_bytes(out.entry, sent + s, r);
}

// ---- SOCKS5 ----

fn socks(sh: &Shared, id: u64, mut c: TcpStream) {
    let mut hdr = [0u8; 2];
    if c.read_exact(&mut hdr).is_err() {
        return;
    }
    let mut methods = vec![0u8; hdr[1] as usize];
    if c.read_exact(&mut methods).is_err() {
        return;
    }
    if !methods.contains(&0) {
        // No acceptable method: this proxy asks for no authentication.
        let _ = c.write_all(&[5, 0xff]);
        return;
    }
    if c.write_all(&[5, 0]).is_err() {
        return;
    }
    let mut req = [0u8; 4];
    if c.read_exact(&mut req).is_err() || req[0] != 5 {
        return;
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            c.read_exact(&mut a).ok().map(|_| IpAddr::from(a).to_string())
        }
        4 => {
            let mut a = [0u8; 16];
            c.read_exact(&mut a).ok().map(|_| IpAddr::from(a).to_string())
        }
        3 => {
            let mut len = [0u8; 1];
            let mut name = Vec::new();
            if c.read_exact(&mut len).is_ok() {
                name.resize(len[0] as usize, 0);
            }
            match c.read_exact(&mut name) {
                Ok(()) => Some(std::str::from_utf8(&name).ok().and_then(egress::normalize_host).unwrap_or_default()),
                Err(_) => None,
            }
        }
        _ => {
            // Address type not supported.
            return reply(&mut c, 8);
        }
    };
    let mut p = [0u8; 2];
    let (Some(host), Ok(())) = (host, c.read_exact(&mut p)) else { return };
    let port = u16::from_be_bytes(p);
    if req[1] != 1 {
        // Only CONNECT: "command not supported".
        return reply(&mut c, 7);
    }
    if host.is_empty() || port == 0 {
        return reply(&mut c, 1);
    }
    let out = sh.open(id, &host, port, Via::Socks);
    let upstream = match out.result {
        Ok(s) => s,
        Err(r) => {
            let code = match r {
                // "Connection not allowed by ruleset".
                Refusal::Denied | Refusal::NotAllowed | Refusal::Local(_) | Refusal::ByUser | Refusal::NoAnswer(_) => 2,
                Refusal::Resolve(_) => 4,
                Refusal::Connect(ErrorKind::ConnectionRefused, _) => 5,
                Refusal::Connect(ErrorKind::NetworkUnreachable, _) => 3,
                Refusal::Connect(ErrorKind::TimedOut, _) => 4,
                Refusal::Connect(..) | Refusal::Stopped => 1,
            };
            return reply(&mut c, code);
        }
    };
    // The bound address is not the program's business: 0.0.0.0:0.
    if c.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).is_err() {
        return;
    }
    let (s, r) = relay(c, upstream);
    sh.add_bytes(out.entry, s, r);
}

fn reply(c: &mut TcpStream, code: u8) {
    let _ = c.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
}

/// The report's entries for direct attempts, from the run's network log:
/// every IPv4 and IPv6 destination but the run's own loopback (which is not
/// egress) and the proxy.
pub(crate) fn direct_entries(log: &[crate::proto::result::NetLogEntry]) -> Vec<NetworkEntry> {
    let mut out: Vec<NetworkEntry> = Vec::new();
    for e in log {
        if e.family != "inet" && e.family != "inet6" {
            continue;
        }
        let (Some(addr), Some(port)) = (e.address.as_deref(), e.port) else { continue };
        let ip = addr.split('%').next().and_then(|a| a.parse::<IpAddr>().ok());
        let own = match ip {
            Some(IpAddr::V4(a)) => a.is_loopback(),
            Some(IpAddr::V6(a)) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
            None => false,
        };
        if own {
            continue;
        }
        match out.iter_mut().find(|d| d.address.as_deref() == Some(addr) && d.port == port) {
            Some(d) => d.count += e.count,
            None => out.push(NetworkEntry {
                host: None,
                address: Some(addr.to_string()),
                port,
                via: Via::Direct,
                verdict: Verdict::Refused,
                rule: "no route: the run's network leads out only through the proxy".into(),
                count: e.count,
                bytes_sent: 0,
                bytes_received: 0,
                error: None,
            }),
        }
    }
    out
}
