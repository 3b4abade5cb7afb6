//! The judge on capsule (docs/judge.md): the main job of an online
//! judge, through capsule's public API only. Compile the solution in the
//! sandbox with its language preset ([`presets`]), run it on every test
//! of a directory ([`cases`]) through one long-lived supervisor
//! (`capsule::sandbox`), [`Options::parallel`] tests at once, with
//! read-once input and write-once output (`{"pipe": F}`), check each
//! output ([`checker`]) or let an interactor talk to the solution, and
//! give each test a [`Verdict`] ([`verdict`]). `capsule judge` (in
//! capsule-cli) is its command line.
//!
//! A judge error (bad input, a checker or interactor that crashed, a
//! sandbox that could not start) is an `Err`, never a verdict for the
//! solution.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use capsule::error::io_text;
use capsule::sandbox::{Config, Sandbox};
use capsule::spec::{Capture, MountOp, PipeFile, Stdio};
use capsule::{Accounting, InteractSpec, RunResult, RunSpec, Status};
use serde_json::{json, Value};

pub mod cases;
pub mod checker;
mod lang;
pub mod presets;
pub mod verdict;

pub use cases::Case;
pub use checker::Checker;
use lang::Lang;
use verdict::{Limits, Verdict};

/// Bytes of the compiler's messages kept.
const COMPILE_CAPTURE: u64 = 64 << 10;

/// The compile presets' wall-time limit (presets/*-compile.toml), which
/// [`Options::compile_time`] replaces.
pub const COMPILE_TIME: Duration = Duration::from_secs(30);

/// The longest limit `--time` and `--compile-time` take.
pub const MAX_TIME: Duration = Duration::from_secs(3600);
/// Bytes kept of the solution's stderr and of a checker's or an
/// interactor's messages.
const MESSAGE_CAPTURE: u64 = 4 << 10;
/// Wall time a checker program may take on one test.
const CHECKER_WALL: Duration = Duration::from_secs(30);
/// Wall time an interactor may take beyond the solution's.
const INTERACTOR_EXTRA_WALL: Duration = Duration::from_secs(10);
/// Where a checker or interactor finds the test's files (in the sandbox's
/// private /tmp, where mount points can be made).
const FILES_DIR: &str = "/tmp/judge";
/// Most tests at once.
pub const MAX_PARALLEL: usize = capsule::sandbox::MAX_PARALLEL / 2;

/// What to judge and how: `capsule judge`'s command line, checked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The language preset's name or alias ([`presets::get`]).
    pub lang: String,
    /// The solution's source file.
    pub source: PathBuf,
    /// The directory of tests ([`cases::find`]).
    pub tests: PathBuf,
    /// How outputs are checked; a program's path absolute and link-free.
    pub checker: Checker,
    /// CPU time per test; the wall-time limit is [`wall_limit`] of it.
    pub time: Duration,
    /// The compiler's wall-time limit; None: the preset's ([`COMPILE_TIME`]).
    pub compile_time: Option<Duration>,
    /// Memory per test, in bytes.
    pub memory: u64,
    /// Output per test, in bytes.
    pub output_limit: u64,
    /// An interactive problem's interactor, absolute and link-free.
    pub interactor: Option<PathBuf>,
    /// Tests judged at once, 1 to [`MAX_PARALLEL`].
    pub parallel: usize,
    /// One supervisor per CPU, each pinned with its tests to a CPU of its
    /// own (`Config::per_cpu`, `capsule judge --per-cpu`).
    pub per_cpu: bool,
}

/// A private directory for one judgement, removed when dropped: `box/`
/// (the source and what the compiler makes) and `out/` (the outputs).
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn new() -> Result<WorkDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::fs::canonicalize(std::env::temp_dir()).unwrap_or_else(|_| PathBuf::from("/tmp"));
        let mut last = String::new();
        for attempt in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = base.join(format!("capsule-judge.{}.{nanos:08x}{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let wd = WorkDir { path };
                    for sub in ["box", "out"] {
                        std::fs::DirBuilder::new()
                            .mode(0o700)
                            .create(wd.path.join(sub))
                            .map_err(|e| format!("cannot create `{}`: {}", wd.path.join(sub).display(), io_text(&e)))?;
                    }
                    return Ok(wd);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => last = format!("`{}`: {}", path.display(), io_text(&e)),
            }
        }
        Err(format!(
            "cannot create a working directory in {} {last}; set TMPDIR to a writable directory",
            base.display()
        ))
    }

    fn boxed(&self) -> PathBuf {
        self.path.join("box")
    }

    fn out(&self) -> PathBuf {
        self.path.join("out")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One test's result.
#[derive(Debug, Clone)]
pub struct TestReport {
    /// The test's name ([`Case::name`]).
    pub name: String,
    pub verdict: Verdict,
    /// CPU time (user + system) of the solution.
    pub time_ms: f64,
    pub wall_time_ms: f64,
    pub memory_bytes: u64,
    /// Why (the checker's message, the signal, the syscall...).
    pub detail: String,
    pub syscall: Option<String>,
    /// How the solution's run ended: `status`, `exit_code`, `signal`.
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// Interactive: who left the conversation first, and how the
    /// interactor ended.
    pub first_to_exit: Option<capsule::Side>,
    pub interactor: Option<Value>,
    /// The first bytes of the solution's stderr.
    pub stderr: String,
}

/// Everything the judgement produced, for the table and `--json`.
#[derive(Debug, Default)]
pub struct Report {
    /// The preset's name and its toolchain's version (`g++ 12.2.0`).
    pub lang: String,
    pub toolchain: String,
    /// The memory figures' source: `cgroup` or `rusage`.
    pub accounting: Option<Accounting>,
    /// Whether the solution compiled (None: the judgement stopped before).
    pub compiled: Option<bool>,
    /// The compiler's messages (and why it failed, on a compilation error).
    pub compile_output: String,
    pub compile_ms: f64,
    pub tests_ms: f64,
    /// The judged tests' results, in test order.
    pub tests: Vec<TestReport>,
    /// How many tests the directory holds.
    pub total: usize,
}

impl Report {
    /// The first non-OK test's verdict in test order, CE, or OK.
    pub fn verdict(&self) -> Verdict {
        if self.compiled == Some(false) {
            return Verdict::Ce;
        }
        self.tests.iter().map(|t| t.verdict).find(|v| *v != Verdict::Ok).unwrap_or(Verdict::Ok)
    }

    /// The report as `--json` writes it; `error`: the judge error, if
    /// any (then the verdict is null); `opts`: the limits, once checked.
    pub fn json(&self, error: Option<&str>, opts: Option<&Options>) -> Value {
        let tests: Vec<Value> = self
            .tests
            .iter()
            .map(|t| {
                let mut o = json!({
                    "name": t.name,
                    "verdict": t.verdict.code(),
                    "time_ms": round3(t.time_ms),
                    "memory_bytes": t.memory_bytes,
                    "wall_time_ms": round3(t.wall_time_ms),
                    "status": t.status.as_str(),
                });
                if let Some(c) = t.exit_code {
                    o["exit_code"] = json!(c);
                }
                if let Some(sig) = &t.signal {
                    o["signal"] = json!(sig);
                }
                if let Some(side) = t.first_to_exit {
                    o["first_to_exit"] = json!(side.as_str());
                }
                if let Some(i) = &t.interactor {
                    o["interactor"] = i.clone();
                }
                if !t.detail.is_empty() {
                    o["detail"] = json!(t.detail);
                }
                if let Some(s) = &t.syscall {
                    o["syscall"] = json!(s);
                }
                if !t.stderr.is_empty() {
                    o["stderr"] = json!(t.stderr);
                }
                o
            })
            .collect();
        let mut v = json!({
            "verdict": if error.is_some() { Value::Null } else { json!(self.verdict().code()) },
            "tests": tests,
        });
        if let Some(e) = error {
            v["error"] = json!(e);
        }
        if !self.lang.is_empty() {
            v["lang"] = json!(self.lang);
            v["toolchain"] = json!(self.toolchain);
        }
        if let Some(o) = opts {
            v["limits"] = json!({
                "time_ms": o.time.as_secs_f64() * 1000.0,
                "wall_time_ms": wall_limit(o.time).as_secs_f64() * 1000.0,
                "memory_bytes": o.memory,
                "output_bytes": o.output_limit,
                "compile_time_ms": o.compile_time.unwrap_or(COMPILE_TIME).as_secs_f64() * 1000.0,
            });
        }
        if let Some(a) = self.accounting {
            v["accounting"] = json!(a);
        }
        if self.compiled.is_some() {
            v["compile_output"] = json!(self.compile_output);
            v["timing"] = json!({"compile_ms": round3(self.compile_ms), "tests_ms": round3(self.tests_ms)});
        }
        v
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The wall-time limit for a CPU-time limit.
pub fn wall_limit(time: Duration) -> Duration {
    time * 2 + Duration::from_secs(1)
}

/// What every test needs.
struct Ctx<'a> {
    sandbox: &'a Sandbox,
    lang: &'a Lang,
    opts: &'a Options,
    work: &'a WorkDir,
    limits: Limits,
    /// No cgroups, and the language takes an address-space limit: each
    /// process's RLIMIT_AS.
    address_space: Option<u64>,
}

/// What a judgement tells its caller as it goes, for it to show.
#[derive(Debug)]
pub enum Event<'a> {
    /// No cgroups: how the memory limit is checked instead (one line).
    NoCgroups(&'a str),
    /// The solution compiled: these tests are about to be judged.
    Tests(&'a [Case]),
    /// A test's result, in test order (after a judge error, those that
    /// finished out of order follow).
    Tested(&'a TestReport),
}

/// Judges the solution `opts` names, filling `report` as it goes and
/// telling `on` what happened. Ok also for a compilation error
/// (`report.compiled == Some(false)`, the compiler's messages in
/// `report.compile_output`); Err is a judge error.
pub fn judge(opts: &Options, report: &mut Report, on: &mut dyn FnMut(Event<'_>)) -> Result<(), String> {
    // Cheap checks of the user's input first, then the toolchain.
    let md =
        std::fs::metadata(&opts.source).map_err(|e| format!("SOURCE `{}`: {}", opts.source.display(), io_text(&e)))?;
    if !md.is_file() {
        return Err(format!("SOURCE `{}` is not a file", opts.source.display()));
    }
    let cases = cases::find(&opts.tests, opts.interactor.is_none())?;
    let lang = Lang::find(&opts.lang)?;
    report.lang = lang.name().to_string();
    report.toolchain = lang.version().to_string();
    report.total = cases.len();
    let work = WorkDir::new()?;
    let src = work.boxed().join(lang.source_name());
    std::fs::copy(&opts.source, &src).map_err(|e| {
        format!("cannot copy SOURCE `{}` to `{}`: {}", opts.source.display(), src.display(), io_text(&e))
    })?;

    // Interactive runs take two of the supervisor's slots each.
    let slots = opts.parallel * if opts.interactor.is_some() { 2 } else { 1 };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the capsule binary: {}", io_text(&e)))?;
    let config = Config { parallel: slots, capsule_bin: Some(exe), per_cpu: opts.per_cpu, ..Default::default() };
    let sandbox = Sandbox::start(config).map_err(|e| format!("cannot start the sandbox: {e}"))?;
    let cgroups = sandbox.has_cgroups();
    report.accounting = Some(if cgroups { Accounting::Cgroup } else { Accounting::Rusage });
    let address_space =
        (!cgroups && lang.address_space_limit_works()).then(|| opts.memory.saturating_mul(2).saturating_add(64 << 20));
    if !cgroups {
        let how = match address_space {
            Some(a) => format!("each process's address space is capped at {} (RLIMIT_AS)", verdict::mib(a)),
            None => format!("{} takes no address-space cap (its runtime is told the limit instead)", lang.name()),
        };
        on(Event::NoCgroups(&format!(
            "no cgroups ({}): the memory limit is checked after each run against the peak resident set; {how} (docs/judge.md)",
            sandbox.cgroups()
        )));
    }

    let started = Instant::now();
    let compiled = compile(&sandbox, &lang, &work, cgroups, opts.compile_time, report);
    report.compile_ms = started.elapsed().as_secs_f64() * 1000.0;
    if !compiled? {
        return Ok(());
    }

    let ctx = Ctx {
        sandbox: &sandbox,
        lang: &lang,
        opts,
        work: &work,
        limits: Limits {
            time: opts.time,
            wall: wall_limit(opts.time),
            memory: opts.memory,
            memory_by_peak: !cgroups,
            output: opts.output_limit,
        },
        address_space,
    };
    let started = Instant::now();
    let result = run_tests(&ctx, &cases, report, on);
    report.tests_ms = started.elapsed().as_secs_f64() * 1000.0;
    result
}

/// Compiles the source in the box; Ok(false) for a compilation error,
/// whose message is in the report.
fn compile(
    sandbox: &Sandbox,
    lang: &Lang,
    work: &WorkDir,
    cgroups: bool,
    wall: Option<Duration>,
    report: &mut Report,
) -> Result<bool, String> {
    let (ok, text) = compile_box(sandbox, lang, &work.boxed(), cgroups, wall)?;
    report.compile_output = text;
    report.compiled = Some(ok);
    Ok(ok)
}

/// Compiles `box_dir/<source name>` with the preset's compile spec (its
/// wall-time limit `wall` where given): whether it compiled, and the
/// compiler's messages (with why it failed).
fn compile_box(
    sandbox: &Sandbox,
    lang: &Lang,
    box_dir: &Path,
    cgroups: bool,
    wall: Option<Duration>,
) -> Result<(bool, String), String> {
    let Some(mut spec) = lang.compile_spec(box_dir, cgroups) else {
        return Ok((true, String::new()));
    };
    if wall.is_some() {
        spec.limits.wall_time = wall;
    }
    spec.stdout = Some(Stdio::Capture(Capture { capture: COMPILE_CAPTURE }));
    spec.stderr = Some(Stdio::Capture(Capture { capture: COMPILE_CAPTURE }));
    let r = sandbox.run(spec).and_then(|h| h.wait()).map_err(|e| format!("compiling: {e}"))?;
    let mut text = String::new();
    for c in [&r.stdout, &r.stderr].into_iter().flatten() {
        text.push_str(&c.text);
        if c.truncated {
            text.push_str(&format!("\n[... {} more bytes]\n", c.bytes.saturating_sub(COMPILE_CAPTURE)));
        }
    }
    let why = match r.status {
        Status::Exited if r.exit_code == Some(0) => None,
        Status::Exited | Status::Signaled => Some(format!("the compiler {}", verdict::ending(&r))),
        Status::WallTimeLimit | Status::CpuTimeLimit => Some("the compiler ran out of time".to_string()),
        Status::MemoryLimit => Some("the compiler ran out of memory".to_string()),
        Status::OutputLimit => Some("the compiler wrote too large a file".to_string()),
        Status::ForbiddenSyscall | Status::Killed | Status::Error => {
            return Err(format!(
                "compiling: the compiler {} (the {} preset's compile profile does not fit this toolchain)",
                verdict::ending(&r),
                lang.name()
            ))
        }
    };
    if let Some(why) = &why {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("({why})\n"));
    }
    Ok((why.is_none(), text))
}

/// The languages a checker's or interactor's source may be in: those
/// whose compiled program runs alone, as a checker program is run.
pub const HELPER_LANGS: [&str; 2] = ["c", "cpp"];

/// Compiles the source of a checker or interactor (`what`, for messages)
/// in the sandbox, as a solution is compiled (the `lang` preset's compile
/// step: its seccomp policy and limits), in `dir` (a new directory of the
/// caller's, which keeps the source and the program). Returns the
/// program's path, absolute, to be given as [`Checker::Program`] or
/// [`Options::interactor`]. A compilation error is an Err naming `what`
/// with the compiler's messages: a judge error, never a verdict.
pub fn compile_helper(what: &str, lang: &str, source: &Path, dir: &Path) -> Result<PathBuf, String> {
    let named = presets::get(lang).map_err(|e| format!("the {what}'s language: {e}"))?.name();
    if !HELPER_LANGS.contains(&named) {
        return Err(format!(
            "the {what}'s language `{lang}`: a {what} is compiled from C or C++ ({}); give a program in another language as a script starting with #!",
            HELPER_LANGS.join(", ")
        ));
    }
    let lang = Lang::find(named).map_err(|e| format!("the {what}: {e}"))?;
    let dir = std::fs::canonicalize(dir)
        .map_err(|e| format!("the {what}'s directory `{}`: {}", dir.display(), io_text(&e)))?;
    let src = dir.join(lang.source_name());
    std::fs::copy(source, &src).map_err(|e| {
        format!("cannot copy the {what}'s source `{}` to `{}`: {}", source.display(), src.display(), io_text(&e))
    })?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the capsule binary: {}", io_text(&e)))?;
    let sandbox = Sandbox::start(Config { parallel: 1, capsule_bin: Some(exe), ..Default::default() })
        .map_err(|e| format!("cannot start the sandbox: {e}"))?;
    let (ok, text) =
        compile_box(&sandbox, &lang, &dir, sandbox.has_cgroups(), None).map_err(|e| format!("the {what}: {e}"))?;
    if !ok {
        return Err(format!("the {what} does not compile ({}):\n{}", lang.version(), text.trim_end()));
    }
    // The preset leaves `solution` in the box; named after its role.
    let prog = dir.join(what);
    std::fs::rename(dir.join("solution"), &prog)
        .map_err(|e| format!("the {what}'s compiled program in `{}`: {}", dir.display(), io_text(&e)))?;
    Ok(prog)
}

/// Judges every test, `--parallel` at once, telling `on` the results in
/// test order as they come; stops taking tests at the first judge error.
fn run_tests(ctx: &Ctx<'_>, cases: &[Case], report: &mut Report, on: &mut dyn FnMut(Event<'_>)) -> Result<(), String> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<TestReport, String>)>();
    on(Event::Tests(cases));
    let mut done: Vec<Option<TestReport>> = vec![None; cases.len()];
    let mut error: Option<(usize, String)> = None;
    let mut printed = 0;
    std::thread::scope(|s| {
        for _ in 0..ctx.opts.parallel.min(cases.len()) {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let r = judge_case(ctx, i, case).map_err(|e| format!("test {}: {e}", case.name));
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send((i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            match r {
                Ok(t) => done[i] = Some(t),
                Err(e) => {
                    // The first in test order is the one reported.
                    if error.as_ref().is_none_or(|(j, _)| i < *j) {
                        error = Some((i, e));
                    }
                }
            }
            while let Some(Some(t)) = done.get(printed) {
                on(Event::Tested(t));
                printed += 1;
            }
        }
    });
    // After a judge error, the rows of what finished out of order too.
    for t in done[printed..].iter().flatten() {
        on(Event::Tested(t));
    }
    report.tests.extend(done.into_iter().flatten());
    match error {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

fn capture(n: u64) -> Option<Stdio> {
    Some(Stdio::Capture(Capture { capture: n }))
}

/// The solution's spec for one test, with the judge's limits.
fn solution_spec(ctx: &Ctx<'_>) -> RunSpec {
    let mut spec = ctx.lang.run_spec(&ctx.work.boxed(), ctx.opts.memory);
    let l = &mut spec.limits;
    l.cpu_time = Some(ctx.limits.time);
    l.wall_time = Some(ctx.limits.wall);
    l.output_limit = Some(ctx.opts.output_limit);
    match ctx.address_space {
        Some(a) => l.address_space = Some(l.address_space.map_or(a, |x| x.min(a))),
        None if !ctx.limits.memory_by_peak => l.memory = Some(ctx.opts.memory),
        None => {}
    }
    spec.stderr = capture(MESSAGE_CAPTURE);
    spec
}

/// A checker's or interactor's spec: capsule's default profile (the host
/// view, read-only), the program's own directory as its working
/// directory, the test's files bound read-only in [`FILES_DIR`].
fn helper_spec(prog: &Path, files: &[(&Path, &str)], wall: Duration) -> RunSpec {
    let mut argv = vec![prog.display().to_string()];
    argv.extend(files.iter().map(|(_, name)| format!("{FILES_DIR}/{name}")));
    let mut spec = RunSpec::new(argv);
    for (src, name) in files {
        spec.mounts.push(MountOp::RoBind {
            src: src.to_path_buf(),
            dst: Path::new(FILES_DIR).join(name),
            try_: false,
            noexec: true,
        });
    }
    // Shown even where the host view hides it (under /tmp, say).
    if let Some(dir) = prog.parent().filter(|d| *d != Path::new("/")) {
        spec.mounts.push(MountOp::RoBind {
            src: dir.to_path_buf(),
            dst: dir.to_path_buf(),
            try_: false,
            noexec: false,
        });
        spec.cwd = Some(dir.to_path_buf());
    }
    spec.limits.wall_time = Some(wall);
    spec.stderr = capture(MESSAGE_CAPTURE);
    spec
}

/// A helper's message: its stderr, else its stdout, trimmed.
fn message(r: &RunResult) -> String {
    let text =
        |c: &Option<capsule::result::Captured>| c.as_ref().map(|c| c.text.trim().to_string()).unwrap_or_default();
    let err = text(&r.stderr);
    if err.is_empty() {
        text(&r.stdout)
    } else {
        err
    }
}

fn judge_case(ctx: &Ctx<'_>, i: usize, case: &Case) -> Result<TestReport, String> {
    let mut spec = solution_spec(ctx);
    let mut interactor = None;
    let (r, first_to_exit, (verdict, detail)) = match &ctx.opts.interactor {
        Some(prog) => {
            let mut files = vec![(case.input.as_path(), "input")];
            if let Some(a) = &case.answer {
                files.push((a.as_path(), "answer"));
            }
            let int_spec = helper_spec(prog, &files, ctx.limits.wall + INTERACTOR_EXTRA_WALL);
            let spec = InteractSpec { solution: spec, interactor: int_spec };
            let r = ctx.sandbox.interact(spec).and_then(|h| h.wait()).map_err(|e| e.to_string())?;
            let says = message(&r.interactor);
            let judged = verdict::interactive_verdict(&r, &ctx.limits, &says)?;
            let i = &r.interactor;
            interactor = Some(
                json!({"status": i.status.as_str(), "exit_code": i.exit_code, "signal": i.signal, "message": says}),
            );
            (r.solution, Some(r.first_to_exit), judged)
        }
        None => {
            let out = ctx.work.out().join(format!("{i}.out"));
            spec.stdin = Some(Stdio::Pipe(PipeFile { pipe: case.input.clone() }));
            spec.stdout = Some(Stdio::Pipe(PipeFile { pipe: out.clone() }));
            let r = ctx.sandbox.run(spec).and_then(|h| h.wait()).map_err(|e| e.to_string())?;
            let judged = match verdict::run_verdict(&r, &ctx.limits)? {
                Some(v) => v,
                None => check(ctx, case, &out)?,
            };
            let _ = std::fs::remove_file(&out);
            (r, None, judged)
        }
    };
    Ok(TestReport {
        name: case.name.clone(),
        verdict,
        time_ms: r.cpu_user_ms + r.cpu_system_ms,
        wall_time_ms: r.wall_time_ms,
        memory_bytes: r.peak_memory_bytes,
        detail,
        syscall: r.syscall.clone(),
        status: r.status,
        exit_code: r.exit_code,
        signal: r.signal.clone(),
        first_to_exit,
        interactor,
        stderr: r.stderr.as_ref().map(|c| c.text.clone()).unwrap_or_default(),
    })
}

/// Checks a finished run's output against the test's answer.
fn check(ctx: &Ctx<'_>, case: &Case, out: &Path) -> Result<verdict::Judged, String> {
    let answer = case.answer.as_deref().expect("answers are required without an interactor");
    if let Checker::Program(prog) = &ctx.opts.checker {
        let files = [(case.input.as_path(), "input"), (out, "output"), (answer, "answer")];
        let mut spec = helper_spec(prog, &files, CHECKER_WALL);
        spec.stdout = capture(MESSAGE_CAPTURE);
        let r = ctx.sandbox.run(spec).and_then(|h| h.wait()).map_err(|e| format!("the checker: {e}"))?;
        let says = message(&r);
        return match (r.status, r.exit_code) {
            (Status::Exited, Some(0)) => Ok((Verdict::Ok, says)),
            (Status::Exited, Some(1 | 2)) => {
                Ok((Verdict::Wa, if says.is_empty() { "the checker rejected the output".into() } else { says }))
            }
            _ => Err(format!(
                "the checker {} (expected exit code 0, 1 or 2){}",
                verdict::ending(&r),
                if says.is_empty() { String::new() } else { format!(": {says}") }
            )),
        };
    }
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read `{}`: {}", p.display(), io_text(&e)));
    let (output, expected) = (read(out)?, read(answer)?);
    Ok(match ctx.opts.checker.compare(&output, &expected).expect("a built-in checker") {
        Ok(()) => (Verdict::Ok, String::new()),
        Err(why) => (Verdict::Wa, why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_limits() {
        assert_eq!(wall_limit(Duration::from_secs(1)), Duration::from_secs(3));
        assert_eq!(wall_limit(Duration::from_millis(250)), Duration::from_millis(1500));
    }

    fn report(verdicts: &[Verdict]) -> Report {
        let tests = verdicts
            .iter()
            .enumerate()
            .map(|(i, v)| TestReport {
                name: (i + 1).to_string(),
                verdict: *v,
                time_ms: 1.0004,
                wall_time_ms: 2.0,
                memory_bytes: 1 << 20,
                detail: String::new(),
                syscall: None,
                status: Status::Exited,
                exit_code: Some(0),
                signal: None,
                first_to_exit: None,
                interactor: None,
                stderr: String::new(),
            })
            .collect();
        Report { compiled: Some(true), tests, total: verdicts.len(), ..Default::default() }
    }

    #[test]
    fn overall_verdict_is_the_first_failure() {
        assert_eq!(report(&[Verdict::Ok, Verdict::Ok]).verdict(), Verdict::Ok);
        assert_eq!(report(&[Verdict::Ok, Verdict::Tle, Verdict::Wa]).verdict(), Verdict::Tle);
        let mut r = report(&[]);
        r.compiled = Some(false);
        assert_eq!(r.verdict(), Verdict::Ce);
        let j = r.json(None, None);
        assert_eq!(j["verdict"], "CE");
        assert_eq!(j["tests"], json!([]));
    }

    #[test]
    fn json_shape() {
        let mut r = report(&[Verdict::Ok, Verdict::Sys]);
        r.tests[1].syscall = Some("socket".into());
        r.tests[1].detail = "forbidden system call socket".into();
        let j = r.json(None, None);
        assert_eq!(j["verdict"], "SYS");
        assert_eq!(
            j["tests"][0],
            json!({"name": "1", "verdict": "OK", "time_ms": 1.0, "memory_bytes": 1048576, "wall_time_ms": 2.0, "status": "exited", "exit_code": 0})
        );
        assert_eq!(j["tests"][1]["syscall"], "socket");
        let j = r.json(Some("boom"), None);
        assert_eq!(j["verdict"], Value::Null);
        assert_eq!(j["error"], "boom");
    }
}
