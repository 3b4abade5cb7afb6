//! `capsule judge`: the command line of the judge (crates/capsule-judge,
//! docs/judge.md): its options, checked, and the table and summary it
//! prints as the tests are judged; `--json` writes the report as an
//! object.
//!
//! Exit status: 0 when every test passed, 1 for any other verdict (CE
//! included), 125 when the judge itself failed (bad input, a checker or
//! interactor that crashed, a sandbox that could not start): a judge
//! error is never a verdict for the solution.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use capsule::error::io_text;
use capsule::result::EXIT_CAPSULE_ERROR;
use capsule::spec::RunSpec;
use capsule::units::{parse_duration, parse_size};
use capsule_judge::verdict::{self, Verdict};
use capsule_judge::{Case, Checker, Event, Options, Report, TestReport, MAX_PARALLEL, MAX_TIME};
use clap::{Arg, ArgAction, ArgMatches, Command};

const ABOUT: &str = "Compile a solution in the sandbox and judge it on a directory of tests";
const AFTER: &str = "\
Every DIR/NAME.in is a test (natural order: 2 before 10); its answer is DIR/NAME.out,
else DIR/NAME.ans (optional with --interactor). The solution reads the test through a
pipe and writes through one (read-once, write-once), with --time of CPU time, a wall-time
limit of 2 x time + 1 s, --memory and --output-limit.

Checkers: exact (byte-equal but for whitespace at line ends and empty lines at the end),
tokens (the same whitespace-separated tokens), float:EPS (tokens; numbers within an
absolute or relative error of EPS), or PROGRAM, run in a sandbox as
`PROGRAM input output answer`: exit 0 accepts, 1 or 2 rejects, anything else is a judge
error. --interactor PROG talks to the solution (its stdout is the solution's stdin and
back), started as `PROG input [answer]`: exit 0 accepts, 1 or 2 rejects.

Verdicts: OK, WA, TLE, MLE, RE, OLE, SYS (forbidden system call), CE (compilation error).
Without cgroups the memory limit is checked after each run against the peak resident set,
with each process's address space capped at 2 x memory + 64M (not for java and go).

Exit status: 0 when every test passed; 1 for any other verdict; 125 when the judge itself
failed (bad input, a checker or interactor that crashed, no sandbox). docs/judge.md";

fn opt(id: &'static str, name: &'static str, help: &'static str) -> Arg {
    Arg::new(id).long(id).value_name(name).action(ArgAction::Set).help(help)
}

pub fn command() -> Command {
    Command::new("judge")
        .about(ABOUT)
        .after_help(AFTER)
        .arg(
            opt("lang", "LANG", "Language preset: c, cpp, rust, pascal, python3, bash, java, go (or an alias)")
                .required(true),
        )
        .arg(Arg::new("source").value_name("SOURCE").required(true).help("The solution's source file"))
        .arg(opt("tests", "DIR", "Directory of tests: NAME.in with NAME.out or NAME.ans").required(true))
        .arg(
            opt("checker", "CHECKER", "exact (default), tokens, float:EPS, or a checker PROGRAM (input output answer)")
                .conflicts_with("interactor"),
        )
        .arg(opt("time", "DURATION", "CPU time per test (default 1s); the wall-time limit is 2 x time + 1 s"))
        .arg(opt("compile-time", "DURATION", "Wall time the compiler may take (default the preset's, 30s)"))
        .arg(opt("memory", "SIZE", "Memory per test (default 256M; cgroup memory.max, else checked after the run)"))
        .arg(opt("output-limit", "SIZE", "Output per test (default 64M)"))
        .arg(opt(
            "interactor",
            "PROG",
            "Interactive problem: PROG talks to the solution, started as PROG input [answer]",
        ))
        .arg(opt("parallel", "N", "Tests judged at once (default 1)"))
        .arg(Arg::new("per-cpu").long("per-cpu").action(ArgAction::SetTrue).help(
            "One supervisor per CPU (min(N, CPUs) of them), each pinned with its tests to a CPU of its own: a test's \
             processes then share one CPU (docs/protocol.md, \"One supervisor per CPU\")",
        ))
        .arg(opt("json", "PATH", "Also write the verdict and every test's result as JSON to PATH"))
}

fn options(m: &ArgMatches) -> Result<Options, String> {
    let get = |id: &str| m.get_one::<String>(id).map(String::as_str);
    let time = match get("time") {
        Some(v) => parse_duration(v).map_err(|e| format!("--time {v}: {e}"))?,
        None => Duration::from_secs(1),
    };
    if time.is_zero() || time > MAX_TIME {
        return Err(format!("--time {}: must be more than 0 and at most 1h", get("time").unwrap_or_default()));
    }
    let compile_time = match get("compile-time") {
        Some(v) => {
            let t = parse_duration(v).map_err(|e| format!("--compile-time {v}: {e}"))?;
            if t.is_zero() || t > MAX_TIME {
                return Err(format!("--compile-time {v}: must be more than 0 and at most 1h"));
            }
            Some(t)
        }
        None => None,
    };
    let memory = match get("memory") {
        Some(v) => parse_size(v).map_err(|e| format!("--memory {v}: {e}"))?,
        None => 256 << 20,
    };
    if memory < 4 << 20 {
        return Err(format!(
            "--memory {}: too little to start a program (at least 4M)",
            get("memory").unwrap_or_default()
        ));
    }
    let output_limit = match get("output-limit") {
        Some(v) => parse_size(v).map_err(|e| format!("--output-limit {v}: {e}"))?,
        None => 64 << 20,
    };
    if output_limit == 0 {
        return Err("--output-limit 0: must be at least 1 byte".into());
    }
    let parallel = match get("parallel") {
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PARALLEL).contains(n))
            .ok_or_else(|| format!("--parallel {v}: not a number of tests between 1 and {MAX_PARALLEL}"))?,
        None => 1,
    };
    let checker = match get("checker") {
        Some(v) => Checker::parse(v).map_err(|e| format!("--checker: {e}"))?,
        None => Checker::Exact,
    };
    // Programs the sandbox starts by their absolute, link-free path.
    let checker = match checker {
        Checker::Program(p) => Checker::Program(canonical(&p, "--checker")?),
        other => other,
    };
    let interactor = match get("interactor") {
        Some(v) => {
            let p = canonical(Path::new(v), "--interactor")?;
            let md = std::fs::metadata(&p).map_err(|e| format!("--interactor `{v}`: {}", io_text(&e)))?;
            use std::os::unix::fs::PermissionsExt;
            if !md.is_file() {
                return Err(format!("--interactor `{v}` is not a file"));
            }
            if md.permissions().mode() & 0o111 == 0 {
                return Err(format!("--interactor `{v}` is not executable (chmod +x it)"));
            }
            Some(p)
        }
        None => None,
    };
    Ok(Options {
        lang: get("lang").unwrap_or_default().to_string(),
        source: PathBuf::from(get("source").unwrap_or_default()),
        tests: PathBuf::from(get("tests").unwrap_or_default()),
        checker,
        time,
        compile_time,
        memory,
        output_limit,
        interactor,
        parallel,
        per_cpu: m.get_flag("per-cpu"),
    })
}

fn canonical(p: &Path, flag: &str) -> Result<PathBuf, String> {
    std::fs::canonicalize(p).map_err(|e| format!("{flag} `{}`: {}", p.display(), io_text(&e)))
}

/// The table, printed a row at a time, in test order.
struct Table {
    width: usize,
    header: bool,
}

impl Table {
    fn new(cases: &[Case]) -> Table {
        Table { width: cases.iter().map(|c| c.name.len()).max().unwrap_or(0).max(4), header: false }
    }

    fn row(&mut self, t: &TestReport) {
        if !self.header {
            println!("{:<w$}  {:<7}  {:>7}  {:>10}  details", "test", "verdict", "time ms", "memory", w = self.width);
            self.header = true;
        }
        let detail = if t.verdict == Verdict::Ok { "" } else { first_line(&t.detail, 100) };
        let row = format!(
            "{:<w$}  {:<7}  {:>7.0}  {:>10}  {}",
            t.name,
            t.verdict.code(),
            t.time_ms,
            verdict::mib(t.memory_bytes),
            detail,
            w = self.width
        );
        println!("{}", row.trim_end());
    }
}

/// The first line of `s`, at most `max` characters.
fn first_line(s: &str, max: usize) -> &str {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

/// `capsule judge`.
pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    // Where a systemd user manager delegates cgroups, judge in them.
    super::restart_in_scope(&RunSpec::default())?;
    let json_path = m.get_one::<String>("json").map(PathBuf::from);
    let mut report = Report::default();
    let opts = options(m);
    let mut table = None;
    let mut on = |e: Event<'_>| match e {
        Event::NoCgroups(note) => eprintln!("capsule judge: {note}"),
        Event::Tests(cases) => table = Some(Table::new(cases)),
        Event::Tested(t) => table.as_mut().expect("the tests before their results").row(t),
    };
    let outcome = match &opts {
        Ok(o) => capsule_judge::judge(o, &mut report, &mut on),
        Err(e) => Err(e.clone()),
    };
    if outcome.is_ok() && report.compiled == Some(false) {
        println!("{}", report.compile_output.trim_end());
    }
    if let Some(p) = &json_path {
        let v = report.json(outcome.as_ref().err().map(String::as_str), opts.as_ref().ok());
        let mut text = serde_json::to_string_pretty(&v).expect("serializable");
        text.push('\n');
        if let Err(e) = std::fs::write(p, text) {
            eprintln!("capsule judge: error: --json: cannot write `{}`: {}", p.display(), io_text(&e));
            return Ok(ExitCode::from(EXIT_CAPSULE_ERROR as u8));
        }
    }
    if let Err(e) = outcome {
        eprintln!("capsule judge: error: {e}");
        return Ok(ExitCode::from(EXIT_CAPSULE_ERROR as u8));
    }
    let v = report.verdict();
    let passed = report.tests.iter().filter(|t| t.verdict == Verdict::Ok).count();
    match v {
        Verdict::Ce => println!("CE: compilation failed"),
        Verdict::Ok => println!("OK: all {} tests passed", report.total),
        _ => {
            let first = report.tests.iter().find(|t| t.verdict != Verdict::Ok).expect("a failed test");
            println!(
                "{}: {passed} of {} tests passed; first failure: test {} ({})",
                v.code(),
                report.total,
                first.name,
                first.verdict.code()
            );
        }
    }
    Ok(if v == Verdict::Ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::first_line;

    #[test]
    fn first_lines() {
        assert_eq!(first_line("abc\ndef", 100), "abc");
        assert_eq!(first_line("abcdef", 3), "abc");
        assert_eq!(first_line("", 3), "");
        assert_eq!(first_line("ééé", 2), "éé");
    }
}
