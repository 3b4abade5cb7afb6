//! `capsule-bench`: the in-process driver of `bench/server.sh` (the benchmark
//! of the served path). From one process it times the server path — runs of a
//! long-lived supervisor through the library API (`capsule::sandbox`) — and,
//! as the baseline, the bare process: vfork + execve + wait4 from the same
//! process (clone with `CLONE_VM | CLONE_VFORK` on a stack of its own, which
//! is what vfork and posix_spawn do), so both pay the same client-side costs.
//!
//! A tool, not part of the library; not installed.
//!
//! ```text
//! capsule-bench latency --workloads FILE [--rounds R] [--first-round N] [--only NAME]
//!                       [--configs bare,server,bare-2,server-2] [--gap MS] [--raw FILE]
//! capsule-bench throughput [--runs N] [--parallel P] [--window W] [--warmup N] [--no-bare] [--round N] [--raw FILE]
//! capsule-bench serve [--runs N] [--parallel P] [--window W] [--warmup N] [--round N] [--raw FILE]
//! capsule-bench memory [--runs N] [--every M] [--parallel P] [--window W] [--raw FILE]
//! common options: --capsule PATH (the binary to start `capsule supervise` from;
//!                 for `serve`, the `capsule` to run `serve` with),
//!                 --no-cgroups, --cgroup PATH, --require-cgroups (as `capsule
//!                 run`'s), --shared-network (throughput, serve, memory: one
//!                 network for all runs instead of one per run)
//! ```
//!
//! `latency`: for every round and every workload, each configuration in turn
//! (the order rotated by one every round: the machine is noisy), a few
//! warm-up runs and then the workload's runs:
//! - `bare`: the program, vfork + execve + wait4, one at a time;
//! - `server`: `Sandbox::run` + `RunHandle::wait` on a sandbox with
//!   `parallel` 1, one at a time (1 client);
//! - `bare-2`, `server-2`: the same from 2 threads at once (2 concurrent
//!   clients; the server one on a sandbox with `parallel` 2);
//! - `server-shared`, `server-2-shared` (only when named): `server` and
//!   `server-2` with one network for all runs instead of one per run
//!   (`Config::own_network` false), for the A/B of that default.
//!
//! Every run gives one sample: the wall time seen by the client, the CPU
//! time (user + system) of the program's processes (wait4's rusage for
//! bare, the result's `cpu_user_ms + cpu_system_ms` for the server) and, for
//! the server, the result's `wall_time_ms` (from the program's execve).
//! `--gap MS` pauses that long between runs (untimed): the latency of a run
//! that finds the supervisor idle, its next PID 1 prepared ahead.
//!
//! The workloads file has one workload per line, tab-separated: name,
//! warm-up runs, runs (per round, configuration and client), the argv
//! (split on spaces; `{t}` becomes the client's number, 0 or 1, so that two
//! concurrent bare runs can write different files). The environment of
//! every run is `PATH` alone, as capsule gives its runs by default.
//!
//! `throughput`: `runs` runs of `/bin/true` on a sandbox with `parallel` P,
//! pipelined (up to `window` requests outstanding), after `warmup` runs
//! (default 50, at most `runs`), and (unless `--no-bare`) the same number of bare runs from
//! P threads; runs per second of each.
//!
//! `serve`: the same through `capsule serve --parallel P` (a child process,
//! JSON lines on its stdin and stdout): `warmup` runs, then `runs` runs of
//! `/bin/true` with `window` requests in flight (a new one sent as each
//! response arrives), timed from the first request to the last response.
//!
//! `memory`: `runs` pipelined runs of `/bin/true` on a sandbox with
//! `parallel` P; every `every` runs (and after the first 1000) the queue is
//! drained and the supervisor's VmRSS, VmHWM, threads, open fds, mounts and
//! child processes are read from `/proc/<pid>`.
//!
//! `--raw FILE` appends one JSON object per sample / measurement (the input
//! of bench/server.sh's statistics); a summary goes to stdout. A run that
//! does not exit 0 stops the benchmark with the reason (exit status 1).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::raw::c_char;
use std::path::PathBuf;
use std::process::{exit, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use capsule::sandbox::{Config, Sandbox};
use capsule::{RunSpec, Status};
use serde_json::{json, Value};

const USAGE: &str = "usage: capsule-bench latency --workloads FILE [--rounds R] [--first-round N] [--only NAME] \
[--configs bare,server,bare-2,server-2,server-shared,server-2-shared] [--gap MS] [--raw FILE]
       capsule-bench throughput [--runs N] [--parallel P] [--window W] [--warmup N] [--no-bare] [--round N] [--raw FILE]
       capsule-bench serve [--runs N] [--parallel P] [--window W] [--warmup N] [--round N] [--raw FILE]
       capsule-bench memory [--runs N] [--every M] [--parallel P] [--window W] [--raw FILE]
common options: --capsule PATH, --no-cgroups, --cgroup PATH, --require-cgroups, --shared-network, --fresh-network, --per-cpu, \
--profile FILE (a TOML profile the sandboxed runs start from; not with serve)";

const CONFIGS: [&str; 6] = ["bare", "server", "bare-2", "server-2", "server-shared", "server-2-shared"];
/// The configurations measured when `--configs` is not given.
const DEFAULT_CONFIGS: usize = 4;

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("capsule-bench: {msg}");
    exit(1)
}

fn usage(msg: impl std::fmt::Display) -> ! {
    eprintln!("capsule-bench: {msg}\n{USAGE}");
    exit(2)
}

// --- options --------------------------------------------------------------------

struct Opts {
    cmd: String,
    workloads: Option<PathBuf>,
    rounds: usize,
    first_round: usize,
    only: Option<String>,
    configs: Vec<String>,
    raw: Option<PathBuf>,
    runs: usize,
    every: usize,
    parallel: usize,
    window: usize,
    capsule: Option<PathBuf>,
    no_cgroups: bool,
    /// `--cgroup PATH`: the delegated cgroup the runs' cgroups go under.
    cgroup: Option<PathBuf>,
    require_cgroups: bool,
    /// `throughput`, `serve`: unrecorded runs first (default 50, at most `runs`).
    warmup: Option<usize>,
    /// `throughput`: no bare runs.
    no_bare: bool,
    /// `throughput`, `serve`, `memory`: one network for all runs (`Config::own_network` false).
    shared_network: bool,
    /// ... or one made per run (`Config::fresh_network`).
    fresh_network: bool,
    /// A pinned supervisor per CPU (`Config::per_cpu`, `capsule serve --per-cpu`).
    per_cpu: bool,
    gap: Duration,
    profile: Option<RunSpec>,
}

impl Opts {
    /// The spec of a sandboxed run: `--profile`'s, or the defaults, with `argv`.
    fn spec(&self, argv: Vec<String>) -> RunSpec {
        let mut spec = self.profile.clone().unwrap_or_default();
        spec.argv = argv;
        spec
    }
}

fn parse_opts() -> Opts {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| usage("no subcommand"));
    if !matches!(cmd.as_str(), "latency" | "throughput" | "serve" | "memory") {
        if cmd == "--help" || cmd == "-h" {
            println!("{USAGE}");
            exit(0);
        }
        usage(format!("unknown subcommand '{cmd}'"));
    }
    let mut o = Opts {
        runs: if cmd == "memory" { 100_000 } else { 2000 },
        cmd,
        workloads: None,
        rounds: 1,
        first_round: 1,
        only: None,
        configs: CONFIGS[..DEFAULT_CONFIGS].iter().map(|s| s.to_string()).collect(),
        raw: None,
        every: 0,
        parallel: 2,
        window: 16,
        capsule: None,
        no_cgroups: false,
        cgroup: None,
        require_cgroups: false,
        warmup: None,
        no_bare: false,
        shared_network: false,
        fresh_network: false,
        per_cpu: false,
        gap: Duration::ZERO,
        profile: None,
    };
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().unwrap_or_else(|| usage(format!("{name} needs a value")));
        let num = |name: &str, v: String| -> usize {
            v.parse()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or_else(|| usage(format!("{name}: '{v}' is not a positive number")))
        };
        match a.as_str() {
            "--workloads" => o.workloads = Some(val(&a).into()),
            "--rounds" => o.rounds = num(&a, val(&a)),
            "--first-round" | "--round" => o.first_round = num(&a, val(&a)),
            "--only" => o.only = Some(val(&a)),
            "--configs" => {
                o.configs = val(&a).split(',').map(str::to_string).collect();
                if let Some(c) = o.configs.iter().find(|c| !CONFIGS.contains(&c.as_str())) {
                    usage(format!("unknown configuration '{c}' (known: {})", CONFIGS.join(", ")));
                }
            }
            "--raw" => o.raw = Some(val(&a).into()),
            "--runs" => o.runs = num(&a, val(&a)),
            "--every" => o.every = num(&a, val(&a)),
            "--parallel" => o.parallel = num(&a, val(&a)),
            "--window" => o.window = num(&a, val(&a)),
            "--capsule" => o.capsule = Some(val(&a).into()),
            "--no-cgroups" => o.no_cgroups = true,
            "--cgroup" => o.cgroup = Some(val(&a).into()),
            "--require-cgroups" => o.require_cgroups = true,
            "--warmup" => {
                let v = val(&a);
                o.warmup = Some(v.parse().unwrap_or_else(|_| usage(format!("--warmup: '{v}' is not a number"))));
            }
            "--no-bare" => o.no_bare = true,
            "--shared-network" => o.shared_network = true,
            "--fresh-network" => o.fresh_network = true,
            "--per-cpu" => o.per_cpu = true,
            "--profile" => {
                let path = val(&a);
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| die(format!("{path}: {e}")));
                o.profile = Some(capsule::spec::from_toml(&text).unwrap_or_else(|e| die(format!("{path}: {e}"))));
            }
            "--gap" => o.gap = Duration::from_millis(num(&a, val(&a)) as u64),
            _ => usage(format!("unknown option '{a}'")),
        }
    }
    if o.no_cgroups && (o.cgroup.is_some() || o.require_cgroups) {
        usage("--no-cgroups contradicts --cgroup and --require-cgroups");
    }
    if o.cmd == "serve" && o.profile.is_some() {
        usage("serve takes no --profile (its runs are `{\"argv\": [\"/bin/true\"]}`)");
    }
    o
}

/// Appends JSON lines to `--raw`, if given.
struct Raw(Option<BufWriter<File>>);

impl Raw {
    fn open(path: &Option<PathBuf>) -> Raw {
        Raw(path.as_ref().map(|p| {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| die(format!("{}: {e}", p.display())));
            BufWriter::new(f)
        }))
    }
    fn put(&mut self, v: Value) {
        if let Some(w) = &mut self.0 {
            writeln!(w, "{v}").unwrap_or_else(|e| die(format!("writing the raw file: {e}")));
        }
    }
    fn flush(&mut self) {
        if let Some(w) = &mut self.0 {
            w.flush().unwrap_or_else(|e| die(format!("writing the raw file: {e}")));
        }
    }
}

fn start_sandbox(o: &Opts, parallel: usize, own_network: bool) -> Sandbox {
    let mut cfg = Config {
        parallel,
        capsule_bin: o.capsule.clone(),
        own_network,
        fresh_network: o.fresh_network,
        per_cpu: o.per_cpu,
        ..Config::default()
    };
    cfg.cgroup.disable = o.no_cgroups;
    cfg.cgroup.path = o.cgroup.clone();
    cfg.cgroup.require = o.require_cgroups;
    Sandbox::start(cfg).unwrap_or_else(|e| die(format!("Sandbox::start (parallel {parallel}): {e}")))
}

// --- the bare baseline ------------------------------------------------------------

/// A program ready to be started with no allocation between vfork and execve.
struct BareCmd {
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    stack: *mut libc::c_void,
    stack_len: usize,
}

const BARE_STACK: usize = 64 << 10;

impl BareCmd {
    fn new(argv: &[String]) -> BareCmd {
        let cstr = |s: &str| CString::new(s).unwrap_or_else(|_| die(format!("NUL byte in '{s}'")));
        let argv_c: Vec<CString> = argv.iter().map(|a| cstr(a)).collect();
        let envp_c = vec![cstr(&format!("PATH={}", capsule::spec::DEFAULT_PATH))];
        let mut argv_p: Vec<*const c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut envp_p: Vec<*const c_char> = envp_c.iter().map(|c| c.as_ptr()).collect();
        envp_p.push(std::ptr::null());
        // SAFETY: an anonymous private mapping, no fd; checked for MAP_FAILED.
        let stack = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BARE_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == libc::MAP_FAILED {
            die(format!("mmap of a child stack: {}", std::io::Error::last_os_error()));
        }
        BareCmd { _argv: argv_c, _envp: envp_c, argv: argv_p, envp: envp_p, stack, stack_len: BARE_STACK }
    }

    /// One run: (wall ms, CPU ms of the program's processes).
    fn run(&self) -> (f64, f64) {
        extern "C" fn child(p: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `p` is the BareCmd borrowed by `run`, which is suspended
            // (CLONE_VFORK) and keeps it alive and unchanged until this
            // process has exec'd or exited. Only async-signal-safe calls,
            // no allocation: execve with pointers prepared beforehand, _exit.
            unsafe {
                let cmd = &*(p as *const BareCmd);
                libc::execve(cmd.argv[0], cmd.argv.as_ptr(), cmd.envp.as_ptr());
                libc::_exit(127)
            }
        }
        let t = Instant::now();
        // SAFETY: the child runs `child` on its own stack (`self.stack`, the
        // top passed as clone wants it, 16-byte aligned) in our address space
        // while this thread is suspended (CLONE_VM | CLONE_VFORK), exactly as
        // vfork or posix_spawn; the mapping outlives the call. No other
        // thread uses this BareCmd's stack (each thread has its own BareCmd).
        let pid = unsafe {
            let top = (self.stack as *mut u8).add(self.stack_len) as *mut libc::c_void;
            libc::clone(
                child,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                self as *const BareCmd as *mut libc::c_void,
            )
        };
        if pid < 0 {
            die(format!("clone(CLONE_VM|CLONE_VFORK): {}", std::io::Error::last_os_error()));
        }
        let mut status = 0;
        // SAFETY: all-zero is a valid rusage.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: plain syscall with pointers to locals.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            if r == pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                die(format!("wait4: {e}"));
            }
        }
        let wall = t.elapsed().as_secs_f64() * 1e3;
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            die(format!("bare {:?}: wait status {status:#x} (exit 127: execve failed)", self.name()));
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
        (wall, tv(ru.ru_utime) + tv(ru.ru_stime))
    }

    fn name(&self) -> String {
        self._argv.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>().join(" ")
    }
}

impl Drop for BareCmd {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no child uses it any more.
        unsafe { libc::munmap(self.stack, self.stack_len) };
    }
}

// SAFETY: the raw pointers point into the CStrings and the mapping owned by
// the same BareCmd; nothing mutates them after construction.
unsafe impl Send for BareCmd {}
// SAFETY: as for Send: shared references only read what never changes.
unsafe impl Sync for BareCmd {}

// --- the server path ------------------------------------------------------------

/// One run through the sandbox: (wall ms, CPU ms, the result's wall_time_ms).
fn server_run(sb: &Sandbox, spec: &RunSpec) -> (f64, f64, f64) {
    let name = spec.argv.join(" ");
    let spec = spec.clone();
    let t = Instant::now();
    let r = sb.run(spec).and_then(|h| h.wait());
    let wall = t.elapsed().as_secs_f64() * 1e3;
    match r {
        Ok(r) if r.status == Status::Exited && r.exit_code == Some(0) => {
            (wall, r.cpu_user_ms + r.cpu_system_ms, r.wall_time_ms)
        }
        Ok(r) => {
            die(format!("server run of {:?} did not exit 0: {}", name, serde_json::to_string(&r).unwrap_or_default()))
        }
        Err(e) => die(format!("server run of {name:?} failed: {e}")),
    }
}

fn check_result(r: Result<capsule::RunResult, capsule::Error>) {
    match r {
        Ok(r) if r.status == Status::Exited && r.exit_code == Some(0) => {}
        Ok(r) => die(format!("a server run did not exit 0: {}", serde_json::to_string(&r).unwrap_or_default())),
        Err(e) => die(format!("a server run failed: {e}")),
    }
}

// --- latency ----------------------------------------------------------------------

struct Workload {
    name: String,
    warmup: usize,
    runs: usize,
    argv: Vec<String>,
}

impl Workload {
    fn argv_for(&self, client: usize) -> Vec<String> {
        self.argv.iter().map(|a| a.replace("{t}", &client.to_string())).collect()
    }
}

fn read_workloads(path: &PathBuf) -> Vec<Workload> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| die(format!("{}: {e}", path.display())));
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || die(format!("{}:{}: expected name<TAB>warmup<TAB>runs<TAB>argv", path.display(), i + 1));
        if f.len() != 4 {
            bad();
        }
        let argv: Vec<String> = f[3].split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect();
        if argv.is_empty() || !argv[0].starts_with('/') {
            die(format!("{}:{}: the argv must start with an absolute path", path.display(), i + 1));
        }
        v.push(Workload {
            name: f[0].to_string(),
            warmup: f[1].parse().unwrap_or_else(|_| bad()),
            runs: f[2].parse().ok().filter(|&n| n > 0).unwrap_or_else(bad),
            argv,
        });
    }
    v
}

#[derive(Clone, Copy)]
struct Sample {
    client: usize,
    wall: f64,
    cpu: f64,
    inner: Option<f64>,
}

/// `n` runs of `one` after `warmup` unrecorded ones.
fn series(warmup: usize, n: usize, client: usize, gap: Duration, mut one: impl FnMut() -> Sample) -> Vec<Sample> {
    for _ in 0..warmup {
        one();
    }
    (0..n)
        .map(|_| {
            std::thread::sleep(gap);
            Sample { client, ..one() }
        })
        .collect()
}

/// Two clients at once, started together after their warm-up.
fn two_clients(warmup: usize, n: usize, gap: Duration, one: impl Fn(usize) -> Sample + Sync) -> Vec<Sample> {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|c| {
                let (barrier, one) = (&barrier, &one);
                s.spawn(move || {
                    for _ in 0..warmup {
                        one(c);
                    }
                    barrier.wait();
                    (0..n)
                        .map(|_| {
                            std::thread::sleep(gap);
                            Sample { client: c, ..one(c) }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap_or_else(|_| die("a client thread panicked"))).collect()
    })
}

fn latency(o: &Opts) {
    let path = o.workloads.as_ref().unwrap_or_else(|| usage("latency needs --workloads FILE"));
    let mut workloads = read_workloads(path);
    if let Some(only) = &o.only {
        workloads.retain(|w| &w.name == only);
        if workloads.is_empty() {
            die(format!("no workload named '{only}' in {}", path.display()));
        }
    }
    let need = |c: &str| o.configs.iter().any(|x| x == c);
    let sb1 = need("server").then(|| start_sandbox(o, 1, true));
    let sb2 = need("server-2").then(|| start_sandbox(o, 2, true));
    let sb1s = need("server-shared").then(|| start_sandbox(o, 1, false));
    let sb2s = need("server-2-shared").then(|| start_sandbox(o, 2, false));
    let mut raw = Raw::open(&o.raw);
    for (sb, parallel) in [(&sb1, 1), (&sb2, 2)] {
        if let Some(sb) = sb {
            raw.put(json!({"kind": "sandbox", "parallel": parallel, "supervisor_pid": sb.supervisor_pid(),
                           "cgroups": sb.cgroups()}));
        }
    }
    // (workload, config) -> samples, for the summary.
    let mut all: BTreeMap<(usize, String), Vec<Sample>> = BTreeMap::new();
    for round in o.first_round..o.first_round + o.rounds {
        for (wi, w) in workloads.iter().enumerate() {
            let mut order = o.configs.clone();
            let k = order.len();
            order.rotate_left((round - 1) % k);
            for c in &order {
                let bare: Vec<BareCmd> = (0..2).map(|t| BareCmd::new(&w.argv_for(t))).collect();
                let specs: Vec<RunSpec> = (0..2).map(|t| o.spec(w.argv_for(t))).collect();
                let bare_one = |t: usize| {
                    let (wall, cpu) = bare[t].run();
                    Sample { client: t, wall, cpu, inner: None }
                };
                let server_one = |sb: &Sandbox, t: usize| {
                    let (wall, cpu, inner) = server_run(sb, &specs[t]);
                    Sample { client: t, wall, cpu, inner: Some(inner) }
                };
                let samples = match c.as_str() {
                    "bare" => series(w.warmup, w.runs, 0, o.gap, || bare_one(0)),
                    "server" => series(w.warmup, w.runs, 0, o.gap, || server_one(sb1.as_ref().unwrap(), 0)),
                    "bare-2" => two_clients(w.warmup, w.runs, o.gap, bare_one),
                    "server-2" => two_clients(w.warmup, w.runs, o.gap, |t| server_one(sb2.as_ref().unwrap(), t)),
                    "server-shared" => series(w.warmup, w.runs, 0, o.gap, || server_one(sb1s.as_ref().unwrap(), 0)),
                    "server-2-shared" => {
                        two_clients(w.warmup, w.runs, o.gap, |t| server_one(sb2s.as_ref().unwrap(), t))
                    }
                    _ => unreachable!(),
                };
                for s in &samples {
                    raw.put(json!({
                        "kind": "latency", "round": round, "workload": w.name, "config": c,
                        "client": s.client, "wall_ms": s.wall, "cpu_ms": s.cpu, "inner_wall_ms": s.inner,
                    }));
                }
                raw.flush();
                all.entry((wi, c.clone())).or_default().extend(samples);
            }
        }
    }
    drop((sb1, sb2, sb1s, sb2s));
    // Summary: per workload and configuration; × bare is the ratio of the
    // medians to `bare` (1 client) or `bare-2` (2 clients).
    println!(
        "{:<10} {:<15} {:>6} {:>11} {:>11} {:>7} {:>11} {:>7}",
        "workload", "config", "n", "median ms", "p99 ms", "× bare", "cpu med ms", "× bare"
    );
    for (wi, w) in workloads.iter().enumerate() {
        for c in CONFIGS.iter().filter(|c| need(c)) {
            let s = &all[&(wi, c.to_string())];
            let wall: Vec<f64> = s.iter().map(|x| x.wall).collect();
            let cpu: Vec<f64> = s.iter().map(|x| x.cpu).collect();
            let base = if c.contains("-2") { "bare-2" } else { "bare" };
            let ratio = |f: fn(&Sample) -> f64, mine: f64| {
                all.get(&(wi, base.to_string()))
                    .map(|b| format!("{:.3}", mine / median(&b.iter().map(f).collect::<Vec<_>>())))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "{:<10} {:<15} {:>6} {:>11.3} {:>11.3} {:>7} {:>11.3} {:>7}",
                w.name,
                c,
                wall.len(),
                median(&wall),
                percentile(&wall, 99.0),
                ratio(|x| x.wall, median(&wall)),
                median(&cpu),
                ratio(|x| x.cpu, median(&cpu)),
            );
        }
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile.
fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

// --- throughput -------------------------------------------------------------------

/// `n` pipelined runs of `spec`, at most `window` outstanding; seconds taken.
fn pipelined(sb: &Sandbox, spec: &RunSpec, n: usize, window: usize) -> f64 {
    let specs: Vec<RunSpec> = (0..n).map(|_| spec.clone()).collect();
    let mut specs = specs.into_iter();
    let mut q = VecDeque::with_capacity(window);
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        while q.len() < window {
            match specs.next() {
                Some(s) => q.push_back(sb.run(s).unwrap_or_else(|e| die(format!("Sandbox::run: {e}")))),
                None => break,
            }
        }
        let h = q.pop_front().expect("a run in flight");
        check_result(h.wait());
        done += 1;
    }
    t.elapsed().as_secs_f64()
}

fn throughput(o: &Opts) {
    let mut raw = Raw::open(&o.raw);
    let spec = o.spec(vec!["/bin/true".to_string()]);
    let sb = start_sandbox(o, o.parallel, !o.shared_network);
    let warmup = o.warmup.unwrap_or(50.min(o.runs));
    if warmup > 0 {
        pipelined(&sb, &spec, warmup, o.window);
    }
    let secs = pipelined(&sb, &spec, o.runs, o.window);
    let (cgroups, has_cgroups) = (sb.cgroups().to_string(), sb.has_cgroups());
    drop(sb);
    let server = o.runs as f64 / secs;
    raw.put(json!({"kind": "throughput", "round": o.first_round, "config": "server", "parallel": o.parallel,
                   "window": o.window, "runs": o.runs, "secs": secs, "per_sec": server, "cgroups": cgroups,
                   "has_cgroups": has_cgroups}));
    if o.no_bare {
        raw.flush();
        println!(
            "throughput /bin/true, parallel {}: server {server:.0}/s ({} runs in {secs:.3} s, window {})",
            o.parallel, o.runs, o.window
        );
        return;
    }
    // The same number of bare runs from `parallel` threads.
    let per = o.runs.div_ceil(o.parallel);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..o.parallel {
            s.spawn(move || {
                let cmd = BareCmd::new(&["/bin/true".to_string()]);
                for _ in 0..per {
                    cmd.run();
                }
            });
        }
    });
    let bsecs = t.elapsed().as_secs_f64();
    let bare = (per * o.parallel) as f64 / bsecs;
    raw.put(json!({"kind": "throughput", "round": o.first_round, "config": "bare", "parallel": o.parallel,
                   "runs": per * o.parallel, "secs": bsecs, "per_sec": bare}));
    raw.flush();
    println!(
        "throughput /bin/true, parallel {}: server {server:.0}/s ({} runs in {secs:.3} s, window {}), bare {bare:.0}/s",
        o.parallel, o.runs, o.window
    );
}

// --- capsule serve ---------------------------------------------------------------

/// Pipelined `/bin/true` requests to a running `capsule serve`.
struct Served {
    to: BufWriter<ChildStdin>,
    from: BufReader<ChildStdout>,
    next_id: u64,
    /// The `accounting` of the responses, and how many said each.
    accounting: BTreeMap<String, usize>,
}

impl Served {
    fn send(&mut self) {
        writeln!(self.to, r#"{{"id":{},"spec":{{"argv":["/bin/true"]}}}}"#, self.next_id)
            .unwrap_or_else(|e| die(format!("writing to capsule serve: {e}")));
        self.next_id += 1;
    }

    fn flush(&mut self) {
        self.to.flush().unwrap_or_else(|e| die(format!("writing to capsule serve: {e}")));
    }

    fn receive(&mut self) {
        let mut line = String::new();
        match self.from.read_line(&mut line) {
            Ok(0) => die("capsule serve closed its output"),
            Ok(_) => {}
            Err(e) => die(format!("reading from capsule serve: {e}")),
        }
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| die(format!("capsule serve said {line:?}: {e}")));
        let r = &v["result"];
        if r["status"] != "exited" || r["exit_code"] != 0 {
            die(format!("a served run did not exit 0: {}", line.trim_end()));
        }
        let acc = r["accounting"].as_str().unwrap_or("none").to_string();
        *self.accounting.entry(acc).or_default() += 1;
    }

    /// `n` runs, at most `window` in flight; seconds taken.
    fn pipelined(&mut self, n: usize, window: usize) -> f64 {
        let t = Instant::now();
        let first = window.min(n);
        for _ in 0..first {
            self.send();
        }
        self.flush();
        let mut sent = first;
        for _ in 0..n {
            self.receive();
            if sent < n {
                self.send();
                self.flush();
                sent += 1;
            }
        }
        t.elapsed().as_secs_f64()
    }
}

fn serve(o: &Opts) {
    let bin = o.capsule.clone().unwrap_or_else(|| usage("serve needs --capsule PATH (the `capsule` binary)"));
    let mut cmd = Command::new(&bin);
    cmd.args(["serve", "--parallel", &o.parallel.to_string()]);
    if o.no_cgroups {
        cmd.arg("--no-cgroups");
    }
    if let Some(p) = &o.cgroup {
        cmd.arg("--cgroup").arg(p);
    }
    if o.require_cgroups {
        cmd.arg("--require-cgroups");
    }
    if o.shared_network {
        cmd.arg("--shared-network");
    }
    if o.fresh_network {
        cmd.arg("--fresh-network");
    }
    if o.per_cpu {
        cmd.arg("--per-cpu");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| die(format!("{} serve: {e}", bin.display())));
    let mut s = Served {
        to: BufWriter::new(child.stdin.take().expect("piped stdin")),
        from: BufReader::new(child.stdout.take().expect("piped stdout")),
        next_id: 0,
        accounting: BTreeMap::new(),
    };
    let warmup = o.warmup.unwrap_or(50.min(o.runs));
    if warmup > 0 {
        s.pipelined(warmup, o.window);
    }
    let before = thread_times(child.id() as i32);
    let secs = s.pipelined(o.runs, o.window);
    let after = thread_times(child.id() as i32);
    let Served { to, accounting, .. } = s;
    drop(to); // the end of its input: the server exits
    let st = child.wait().unwrap_or_else(|e| die(format!("waiting for capsule serve: {e}")));
    if !st.success() {
        die(format!("capsule serve ended with {st}"));
    }
    let per_sec = o.runs as f64 / secs;
    let mut raw = Raw::open(&o.raw);
    raw.put(json!({"kind": "throughput", "round": o.first_round, "config": "serve", "per_cpu": o.per_cpu, "parallel": o.parallel,
                   "window": o.window, "runs": o.runs, "secs": secs, "per_sec": per_sec,
                   "accounting": accounting}));
    raw.flush();
    println!(
        "serve /bin/true, parallel {}: {per_sec:.0}/s ({} runs in {secs:.3} s, window {}; accounting {accounting:?})",
        o.parallel, o.runs, o.window
    );
    // The supervisor's threads' CPU per timed run (its loop's caps the runs
    // per second on many cores) and how often each slept and was preempted.
    let cpu: Vec<String> = after
        .iter()
        .map(|(tid, (name, t, vol, invol))| {
            let (t0, v0, i0) = before.get(tid).map_or((0, 0, 0), |b| (b.1, b.2, b.3));
            let per = |x: u64| x as f64 / o.runs as f64;
            format!(
                "{name}[{tid}] {:.0} µs ({:.2} sleeps, {:.2} preemptions)",
                per(t - t0) / 1e3,
                per(vol - v0),
                per(invol - i0)
            )
        })
        .collect();
    println!("serve: supervisor CPU per run by thread: {}", cpu.join(", "));
}

/// Each thread of `pid`: its name and user + system time in clock ticks.
/// Each thread's name, CPU time (ns, from `schedstat`) and context switches
/// (voluntary, involuntary: how often it slept and how often it was preempted).
fn thread_times(pid: i32) -> BTreeMap<i32, (String, u64, u64, u64)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for t in tasks.flatten() {
        let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else { continue };
        let sched = fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        let ns = sched.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        let status = fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            status.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        let name = field_str(&status, "Name:");
        out.insert(tid, (name, ns, field("voluntary_ctxt_switches:"), field("nonvoluntary_ctxt_switches:")));
    }
    out
}

fn field_str(status: &str, key: &str) -> String {
    status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default()
}

// --- supervisor memory ---------------------------------------------------------------

fn proc_status(pid: i32) -> BTreeMap<String, String> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

fn kib(v: Option<&String>) -> Option<u64> {
    v.and_then(|s| s.trim_end_matches("kB").trim().parse().ok())
}

/// The supervisor's figures now; `null` where /proc does not say
/// (a non-dumpable process's fd directory and mountinfo are root's).
fn snapshot(pid: i32, runs_done: usize) -> Value {
    let st = proc_status(pid);
    let links: Option<Vec<String>> = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.flatten().filter_map(|e| fs::read_link(e.path()).ok()).map(|l| l.display().to_string()).collect());
    let fds = links.as_ref().map(Vec::len);
    // The kept networks (docs/network-reuse.md): made on demand, at most 5 × parallel + 2,
    // two descriptors each: the namespace and its `sockstat` (as the tests count them).
    let net_fds = links.as_ref().map(|l| {
        l.iter().filter(|l| l.starts_with("net:[") || l.starts_with("/proc/") && l.contains("/net/sockstat")).count()
    });
    let mounts = fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok().map(|s| s.lines().count());
    let mut children = 0;
    let mut zombies = 0;
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let list = fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in list.split_whitespace() {
                children += 1;
                let stat = fs::read_to_string(format!("/proc/{c}/stat")).unwrap_or_default();
                if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) {
                    zombies += 1;
                }
            }
        }
    }
    json!({
        "kind": "memory", "runs_done": runs_done,
        "rss_kib": kib(st.get("VmRSS")), "hwm_kib": kib(st.get("VmHWM")),
        "threads": st.get("Threads").and_then(|s| s.parse::<u64>().ok()),
        "fds": fds, "net_fds": net_fds, "mounts": mounts, "children": children, "zombies": zombies,
    })
}

fn memory(o: &Opts) {
    let mut raw = Raw::open(&o.raw);
    let every = if o.every > 0 { o.every } else { (o.runs / 10).max(1) };
    let spec = o.spec(vec!["/bin/true".to_string()]);
    let sb = start_sandbox(o, o.parallel, !o.shared_network);
    let pid = sb.supervisor_pid();
    let settle = || std::thread::sleep(Duration::from_millis(200));
    let mut marks: Vec<usize> = vec![0, 1000.min(o.runs)];
    marks.extend((1..).map(|i| i * every).take_while(|&m| m < o.runs).filter(|&m| m > 1000));
    marks.push(o.runs);
    marks.dedup();
    let mut done = 0;
    let t = Instant::now();
    println!(
        "{:>9} {:>9} {:>9} {:>7} {:>5} {:>6} {:>8} {:>7}",
        "runs", "rss KiB", "hwm KiB", "threads", "fds", "mounts", "children", "zombies"
    );
    for &m in &marks {
        if m > done {
            pipelined(&sb, &spec, m - done, o.window);
            done = m;
        }
        settle();
        let snap = snapshot(pid, done);
        let f = |k: &str| snap[k].as_u64().map(|v| v.to_string()).unwrap_or_else(|| "?".into());
        println!(
            "{:>9} {:>9} {:>9} {:>7} {:>5} {:>6} {:>8} {:>7}",
            done,
            f("rss_kib"),
            f("hwm_kib"),
            f("threads"),
            f("fds"),
            f("mounts"),
            f("children"),
            f("zombies")
        );
        let mut line = snap;
        line["secs"] = json!(t.elapsed().as_secs_f64());
        line["parallel"] = json!(o.parallel);
        raw.put(line);
        raw.flush();
    }
    drop(sb);
}

fn main() {
    let o = parse_opts();
    match o.cmd.as_str() {
        "latency" => latency(&o),
        "throughput" => throughput(&o),
        "serve" => serve(&o),
        "memory" => memory(&o),
        _ => unreachable!(),
    }
}
