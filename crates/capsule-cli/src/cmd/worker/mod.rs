//! `capsule worker`: one of many workers behind a Redis stream
//! (docs/scale-out.md). A consumer of a consumer group, holding one
//! supervisor with `--parallel` slots: it reads jobs ([`job`]), carries
//! them out, posts each result and then acknowledges the job ([`queue`]).
//! Delivery is at least once: a running job's entry is kept fresh by a
//! heartbeat, jobs idle longer than `--claim-idle` (their worker died) are
//! claimed by live workers, and a job delivered `--max-deliveries` times
//! goes to the dead-letter stream. While every slot is busy, up to
//! `--read-ahead` jobs are read ahead from a backlog and held (kept fresh
//! by the heartbeat) for the next free slot. SIGTERM or SIGINT stop
//! reading, hand back the jobs read ahead, finish the running jobs, post
//! and acknowledge them, and exit 0; a second one exits at once (the
//! unacknowledged jobs are delivered again elsewhere).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use capsule::sandbox::{Config, MAX_PARALLEL};
use capsule::spec::RunSpec;
use capsule::units::parse_duration;
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::json;

mod job;
mod queue;

use queue::{Delivery, Link, Names};

const AFTER: &str = "\
Jobs are stream entries: XADD capsule:jobs * id ID kind run|judge body JSON
  run:   body is a `capsule serve` run spec (docs/protocol.md)
  judge: body is {\"lang\", \"source\", \"tests\": [{\"name\", \"input\", \"output\"}], \"checker\",
         \"time\", \"memory\", \"output_limit\", \"interactor\"}, judged as `capsule judge` does;
         a checker ({\"program\": TEXT}) or interactor (TEXT) is a script (#!) or C++ source
         ({\"program\": TEXT, \"lang\": \"c\"} for C), compiled in the sandbox as a solution is
Results: XADD capsule:results * id ID entry ENTRY worker NAME delivery N result JSON, then
XACK of the job (in one transaction). Delivery is at least once: deduplicate by id.
A running job is kept from other workers by a heartbeat; a job idle longer than
--claim-idle (its worker died) is claimed by a live worker; one delivered
--max-deliveries times goes to the dead-letter stream with its history.
While all slots are busy, up to --read-ahead jobs already waiting in the stream are
read and held for the next free slot (none is taken from an idle worker).
SIGTERM/SIGINT: stop reading, hand back the jobs read ahead, finish and acknowledge the
running jobs, exit 0 (a second one exits at once). Redis going away is retried with
backoff. docs/scale-out.md";

fn opt(id: &'static str, name: &'static str, help: &'static str) -> Arg {
    Arg::new(id).long(id).value_name(name).action(ArgAction::Set).help(help)
}

pub fn command() -> Command {
    Command::new("worker")
        .about("Do run and judge jobs from a Redis stream, as one of many workers (at-least-once delivery)")
        .after_help(AFTER)
        .arg(opt("redis", "URL", "Redis to connect to: redis://HOST:PORT/DB or unix:///PATH[?db=N]").required(true))
        .arg(opt("stream", "KEY", "The stream of jobs").default_value("capsule:jobs"))
        .arg(opt("group", "NAME", "The consumer group the workers share").default_value("capsule"))
        .arg(opt("consumer", "NAME", "This worker's consumer name (default: HOSTNAME-PID)"))
        .arg(opt("results", "KEY", "The stream results are added to").default_value("capsule:results"))
        .arg(opt("dead", "KEY", "The dead-letter stream").default_value("capsule:dead"))
        .arg(opt("parallel", "N", "Jobs at once (the supervisor's slots)").default_value("1"))
        .arg(opt(
            "read-ahead",
            "N",
            "Jobs read ahead of the busy slots, held for the next free one (default: --parallel; 0: read only for a free slot)",
        ))
        .arg(
            opt("max-deliveries", "N", "Dead-letter a job after this many deliveries without a result")
                .default_value("3"),
        )
        .arg(
            opt("claim-idle", "DURATION", "Claim jobs of another worker idle this long (it died)").default_value("30s"),
        )
        .arg(Arg::new("allow-host-network").long("allow-host-network").action(ArgAction::SetTrue).help(
            "Let run jobs have the host's network (`share_net`); refused without it: a job would reach this worker's Redis",
        ))
        .arg(Arg::new("stats").long("stats").action(ArgAction::SetTrue).help(
            "Print the group's statistics (every worker's jobs done, running, failed, per status) as JSON and exit",
        ))
}

/// The command line, checked.
struct Opts {
    url: String,
    names: Names,
    parallel: usize,
    read_ahead: usize,
    max_deliveries: u64,
    claim_idle: Duration,
}

fn opts(m: &ArgMatches) -> Result<Opts> {
    let get = |id: &str| m.get_one::<String>(id).cloned().unwrap_or_default();
    for id in ["stream", "group", "results", "dead", "consumer"] {
        if m.get_one::<String>(id).is_some_and(|v| v.is_empty()) {
            bail!("--{id}: empty");
        }
    }
    let parallel =
        get("parallel").parse::<usize>().ok().filter(|n| (1..=MAX_PARALLEL).contains(n)).ok_or_else(|| {
            anyhow!("--parallel {}: not a number of jobs between 1 and {MAX_PARALLEL}", get("parallel"))
        })?;
    let read_ahead = match m.get_one::<String>("read-ahead") {
        None => parallel,
        Some(v) => v.parse::<usize>().ok().filter(|n| *n <= MAX_PARALLEL).ok_or_else(|| {
            anyhow!("--read-ahead {}: not a number of jobs between 0 and {MAX_PARALLEL}", v.escape_debug())
        })?,
    };
    let max_deliveries = get("max-deliveries")
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| anyhow!("--max-deliveries {}: not a number of at least 1", get("max-deliveries")))?;
    let claim_idle =
        parse_duration(&get("claim-idle")).map_err(|e| anyhow!("--claim-idle {}: {e}", get("claim-idle")))?;
    if claim_idle < Duration::from_millis(100) || claim_idle > Duration::from_secs(86400) {
        bail!("--claim-idle {}: must be between 100ms and 1 day", get("claim-idle"));
    }
    let consumer = match m.get_one::<String>("consumer") {
        Some(c) => c.clone(),
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        }
    };
    Ok(Opts {
        url: get("redis"),
        names: Names {
            stream: get("stream"),
            group: get("group"),
            consumer,
            results: get("results"),
            dead: get("dead"),
        },
        parallel,
        read_ahead,
        max_deliveries,
        claim_idle,
    })
}

/// The Unix socket a `unix://` (or `redis+unix://`) Redis URL names, as a
/// clean absolute path, for run jobs not to see it.
fn redis_socket(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("unix://").or_else(|| url.strip_prefix("redis+unix://"))?;
    let path = std::path::Path::new(rest.split('?').next()?);
    let path = std::fs::canonicalize(path).ok().or_else(|| path.is_absolute().then(|| path.to_path_buf()))?;
    path.is_absolute().then_some(path).filter(|p| p.components().all(|c| c != std::path::Component::ParentDir))
}

/// This worker's counts, for its statistics entry.
#[derive(Default)]
struct Stats {
    done: u64,
    failed: u64,
    dead: u64,
    statuses: BTreeMap<String, u64>,
}

/// What the threads share.
struct Shared {
    names: Names,
    /// The entries held (read ahead or running) and not yet acknowledged
    /// or handed back (for the heartbeat).
    running: Mutex<BTreeSet<String>>,
    /// Signalled when a job is acknowledged.
    freed: Condvar,
    /// The jobs read and not yet started, and their signal; `closed`: no
    /// more will come.
    queue: Mutex<(VecDeque<Delivery>, bool)>,
    ready: Condvar,
    /// Jobs being carried out.
    active: AtomicUsize,
    stats: Mutex<Stats>,
    stopping: AtomicBool,
    started_ms: u64,
    heartbeat: Duration,
    parallel: usize,
}

impl Shared {
    fn stats_json(&self) -> serde_json::Value {
        let s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.running.lock().unwrap_or_else(|e| e.into_inner()).len();
        let running = self.active.load(Ordering::Relaxed).min(held);
        json!({
            "state": if self.stopping.load(Ordering::Relaxed) { if held == 0 { "stopped" } else { "stopping" } } else { "running" },
            "done": s.done,
            "running": running,
            "read_ahead": held - running,
            "failed": s.failed,
            "dead": s.dead,
            "statuses": s.statuses,
            "parallel": self.parallel,
            "pid": std::process::id(),
            "started_ms": self.started_ms,
            "updated_ms": queue::now_ms(),
            "heartbeat_ms": self.heartbeat.as_millis() as u64,
        })
    }
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    let o = opts(m)?;
    let client = redis::Client::open(o.url.as_str()).map_err(|e| anyhow!("--redis `{}`: {e}", o.url.escape_debug()))?;
    if m.get_flag("stats") {
        let mut link = Link::new(client, "stats", Duration::from_secs(10));
        let v = link
            .with(&|_| {}, |c| queue::read_stats(c, &o.names))
            .map_err(|e| anyhow!("reading the statistics from `{}`: {e}", o.url.escape_debug()))?;
        println!("{}", serde_json::to_string_pretty(&v).expect("serializable"));
        return Ok(ExitCode::SUCCESS);
    }
    // Where a systemd user manager delegates cgroups, work in them (as
    // `capsule judge` does).
    super::restart_in_scope(&RunSpec::default())?;
    // Blocked before any thread starts, so only the signalfd sees them.
    let fd = capsule::sys::signalfd_for(&[libc::SIGTERM, libc::SIGINT])
        .map_err(|e| anyhow!("signalfd: {}", capsule::error::errno_text(e)))?;
    let signals = Signals { fd, seen: Cell::new(0) };
    let exe = std::env::current_exe().context("cannot find the capsule binary")?;
    let policy = job::Policy { host_network: m.get_flag("allow-host-network"), redis_socket: redis_socket(&o.url) };
    let config = Config { parallel: o.parallel, capsule_bin: Some(exe), ..Default::default() };
    let sup = job::Supervisor::start(config, policy).map_err(|e| anyhow!("cannot start the sandbox: {e}"))?;
    let sup = Arc::new(sup);
    let shared = Arc::new(Shared {
        names: o.names.clone(),
        running: Mutex::new(BTreeSet::new()),
        freed: Condvar::new(),
        queue: Mutex::new((VecDeque::new(), false)),
        ready: Condvar::new(),
        active: AtomicUsize::new(0),
        stats: Mutex::new(Stats::default()),
        stopping: AtomicBool::new(false),
        started_ms: queue::now_ms(),
        heartbeat: (o.claim_idle / 4).max(Duration::from_millis(25)),
        parallel: o.parallel,
    });
    eprintln!(
        "capsule worker: `{}` in group `{}` of `{}`, {} at once, {} read ahead",
        o.names.consumer.escape_debug(),
        o.names.group.escape_debug(),
        o.names.stream.escape_debug(),
        o.parallel,
        o.read_ahead
    );

    let mut threads = Vec::new();
    for _ in 0..o.parallel {
        let (shared, sup, client) = (shared.clone(), sup.clone(), client.clone());
        threads.push(std::thread::spawn(move || job_thread(&shared, &sup, client)));
    }
    {
        let (shared, client) = (shared.clone(), client.clone());
        std::thread::spawn(move || heartbeat_thread(&shared, client));
    }
    read_until_signalled(&o, &shared, &signals, client);
    stop(&o, &shared, &signals, threads)
}

/// The reader: fills the job threads' queue until SIGTERM or SIGINT,
/// with new jobs, jobs idle too long elsewhere and (after a failed read)
/// our own lost ones; at most `parallel` + `read_ahead` held at once.
fn read_until_signalled(o: &Opts, shared: &Shared, signals: &Signals, client: redis::Client) {
    let sleep = |d: Duration| {
        signals.wait(d);
    };
    let block = Duration::from_millis(500);
    let mut r = Reader {
        link: Link::new(client, "reader", block + Duration::from_secs(10)),
        group_ok: false,
        cursor: "0-0".to_string(),
        next_claim: Instant::now(),
        started: Instant::now(),
        lost: false,
        next_ahead: Instant::now(),
    };
    let capacity = o.parallel + o.read_ahead;
    while signals.wait(Duration::ZERO) == 0 {
        let held = shared.running.lock().unwrap_or_else(|e| e.into_inner()).len();
        // No slot idle: only jobs already waiting are read ahead, without
        // blocking, so a job added for an idle worker goes to that one.
        let ahead = held >= o.parallel;
        if held >= capacity || (ahead && !r.lost && Instant::now() < r.next_ahead) {
            let g = shared.running.lock().unwrap_or_else(|e| e.into_inner());
            let _ = shared.freed.wait_timeout(g, Duration::from_millis(if held >= capacity { 100 } else { 20 }));
            continue;
        }
        let free = capacity - held;
        if !r.group_ok {
            if r.link.with(&sleep, |c| queue::ensure_group(c, &o.names)).is_err() {
                continue;
            }
            r.group_ok = true;
        }
        let wait = if ahead { None } else { Some(block) };
        let Some(deliveries) = r.read(o, shared, &sleep, free, wait) else { continue };
        for d in deliveries {
            r.file(o, shared, &sleep, d);
        }
    }
}

/// What the reader keeps between reads.
struct Reader {
    link: Link,
    /// The consumer group is known to exist.
    group_ok: bool,
    /// Where the scan for idle jobs goes on.
    cursor: String,
    next_claim: Instant,
    started: Instant,
    /// A read failed: its reply (jobs delivered to us) may be lost.
    lost: bool,
    /// Nothing to read ahead in the stream's backlog: when to look again.
    next_ahead: Instant,
}

impl Reader {
    /// Up to `free` deliveries: our lost ones after a failed read, else
    /// jobs idle elsewhere when a scan is due, else new ones (`block`:
    /// how long to wait for one; None when reading ahead, without
    /// waiting). None when the read failed.
    fn read(
        &mut self,
        o: &Opts,
        shared: &Shared,
        sleep: &dyn Fn(Duration),
        free: usize,
        block: Option<Duration>,
    ) -> Option<Vec<Delivery>> {
        let got = if self.lost {
            let known = shared.running.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let r = self.link.with(sleep, |c| queue::orphans(c, &o.names, &known, self.started.elapsed(), free));
            if let Ok(d) = &r {
                self.lost = d.len() == free;
            }
            r
        } else if Instant::now() >= self.next_claim {
            let r = self.link.with(sleep, |c| queue::claim_idle(c, &o.names, o.claim_idle, &self.cursor, free));
            if let Ok((_, next)) = &r {
                // A full scan done: the next one after a while.
                if next == "0-0" {
                    self.next_claim = Instant::now() + (o.claim_idle / 4).max(Duration::from_millis(100));
                }
                self.cursor = next.clone();
            }
            r.map(|(d, _)| d)
        } else if block.is_none() {
            let r = self.link.with(sleep, |c| queue::read_new(c, &o.names, free, None));
            if r.as_ref().is_ok_and(|d| d.is_empty()) {
                self.next_ahead = Instant::now() + READ_AHEAD_POLL;
            }
            r
        } else {
            self.link.with(sleep, |c| queue::read_new(c, &o.names, free, block))
        };
        match got {
            Ok(d) => Some(d),
            Err(e) => {
                if e.contains("NOGROUP") {
                    self.group_ok = false;
                }
                self.lost = true;
                None
            }
        }
    }

    /// Queues a delivery for the job threads, or moves it to the dead
    /// letters after too many deliveries.
    fn file(&mut self, o: &Opts, shared: &Shared, sleep: &dyn Fn(Duration), d: Delivery) {
        if d.delivery > o.max_deliveries {
            match self.link.with(sleep, |c| queue::dead_letter(c, &o.names, &d, o.max_deliveries)) {
                Ok(()) => {
                    eprintln!(
                        "capsule worker: job entry {} delivered {} times without a result: moved to `{}`",
                        d.entry,
                        d.delivery - 1,
                        o.names.dead.escape_debug()
                    );
                    shared.stats.lock().unwrap_or_else(|e| e.into_inner()).dead += 1;
                }
                // Still pending: claimed again later.
                Err(e) => eprintln!("capsule worker: cannot dead-letter job entry {}: {e}", d.entry),
            }
            return;
        }
        // One of our own running jobs, claimed back after a stall of
        // its heartbeat: it runs already.
        if !shared.running.lock().unwrap_or_else(|e| e.into_inner()).insert(d.entry.clone()) {
            return;
        }
        shared.queue.lock().unwrap_or_else(|e| e.into_inner()).0.push_back(d);
        shared.ready.notify_one();
    }
}

/// Stopping: no more reading; the jobs read ahead are handed back, the
/// running ones finish and are posted (a second signal stops at once).
fn stop(o: &Opts, shared: &Shared, signals: &Signals, threads: Vec<std::thread::JoinHandle<()>>) -> Result<ExitCode> {
    shared.stopping.store(true, Ordering::Relaxed);
    let unstarted: Vec<Delivery> = {
        let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.1 = true;
        q.0.drain(..).collect()
    };
    shared.ready.notify_all();
    let mut give_back = Link::new(link_client(&o.url)?, "stopping", Duration::from_secs(5));
    for d in &unstarted {
        // Not handed back (Redis away): claimed after --claim-idle.
        if let Err(e) = give_back.with(&|_| {}, |c| queue::hand_back(c, &o.names, d)) {
            eprintln!("capsule worker: cannot hand back job entry {}: {e}", d.entry);
        }
        shared.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&d.entry);
    }
    let n = shared.running.lock().unwrap_or_else(|e| e.into_inner()).len();
    eprintln!("capsule worker: stopping: {} job(s) read ahead handed back, finishing {n} running", unstarted.len());
    loop {
        if shared.running.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            break;
        }
        if signals.wait(Duration::from_millis(50)) >= 2 {
            eprintln!("capsule worker: stopped at once; the unfinished jobs will be delivered again");
            return Ok(ExitCode::from(1));
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let mut link = Link::new(link_client(&o.url)?, "stats", Duration::from_secs(5));
    let _ = link.with(&|_| {}, |c| queue::put_stats(c, &o.names, &shared.stats_json()));
    eprintln!("capsule worker: stopped");
    Ok(ExitCode::SUCCESS)
}

fn link_client(url: &str) -> Result<redis::Client> {
    redis::Client::open(url).map_err(|e| anyhow!("--redis `{}`: {e}", url.escape_debug()))
}

/// SIGTERM and SIGINT, through a signalfd.
struct Signals {
    fd: OwnedFd,
    seen: Cell<u32>,
}

impl Signals {
    /// Waits up to `d` for a signal; how many came so far.
    fn wait(&self, d: Duration) -> u32 {
        let mut fds = [libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let _ = capsule::sys::poll(&mut fds, d.as_millis().min(i32::MAX as u128) as i32);
        while capsule::sys::tty::next_signal(self.fd.as_raw_fd()).is_some() {
            self.seen.set(self.seen.get() + 1);
        }
        self.seen.get()
    }
}

/// How often a worker whose slots are all busy looks for jobs to read
/// ahead in an empty backlog.
const READ_AHEAD_POLL: Duration = Duration::from_millis(50);

/// The next job read, None once the worker stops.
fn next_job(shared: &Shared) -> Option<Delivery> {
    let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(d) = q.0.pop_front() {
            shared.active.fetch_add(1, Ordering::Relaxed);
            return Some(d);
        }
        if q.1 {
            return None;
        }
        q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
    }
}

/// Carries out the jobs it is given, posting each result until Redis takes it.
fn job_thread(shared: &Shared, sup: &job::Supervisor, client: redis::Client) {
    let mut link = Link::new(client, "results", Duration::from_secs(10));
    while let Some(d) = next_job(shared) {
        // In its history once started (a job handed back was not run).
        if let Err(e) = link.with(&std::thread::sleep, |c| queue::record(c, &shared.names, &d)) {
            eprintln!("capsule worker: job entry {}: its delivery is not in its history: {e}", d.entry);
        }
        let j = job::parse(&d.fields);
        let outcome = match j.work {
            Ok(w) => job::execute(w, sup),
            Err(e) => job::Outcome::error(e),
        };
        if outcome.failed {
            let why = outcome.result["error"].as_str().unwrap_or_default();
            eprintln!(
                "capsule worker: job `{}` (entry {}, {}): error: {}",
                j.id.escape_debug(),
                d.entry,
                if j.kind.is_empty() { "no kind".into() } else { j.kind.escape_debug().to_string() },
                why.lines().next().unwrap_or_default().escape_debug()
            );
        }
        // Until it is in: an attempt whose reply was lost may have been
        // carried out (then the job is no longer pending).
        let mut again = false;
        loop {
            if again {
                match link.with(&std::thread::sleep, |c| queue::is_pending(c, &shared.names, &d.entry)) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(_) => continue,
                }
            }
            if link.with(&std::thread::sleep, |c| queue::post(c, &shared.names, &d, &j.id, &outcome.result)).is_ok() {
                break;
            }
            again = true;
        }
        {
            let mut s = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
            s.done += 1;
            s.failed += outcome.failed as u64;
            *s.statuses.entry(outcome.status).or_default() += 1;
        }
        shared.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&d.entry);
        shared.active.fetch_sub(1, Ordering::Relaxed);
        shared.freed.notify_all();
    }
}

/// Keeps the running jobs' entries fresh and the statistics entry current.
fn heartbeat_thread(shared: &Shared, client: redis::Client) {
    let mut link = Link::new(client, "heartbeat", Duration::from_secs(10));
    loop {
        let entries: Vec<String> = shared.running.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
        let stats = shared.stats_json();
        let _ = link.with(&std::thread::sleep, |c| {
            if !entries.is_empty() {
                queue::heartbeat(c, &shared.names, &entries)?;
            }
            queue::put_stats(c, &shared.names, &stats)
        });
        std::thread::sleep(shared.heartbeat);
    }
}
