//! One job of `capsule worker` (docs/scale-out.md): its stream entry read
//! (`id`, `kind`, `body`), carried out, and its result as the JSON object
//! the worker posts. `run` jobs go through the worker's one supervisor, as
//! `capsule serve` runs them; `judge` jobs are judged by crates/capsule-judge
//! exactly as `capsule judge` judges, from files written to a private
//! temporary directory. A job that cannot run gets an `error` object
//! naming why, never a panic.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capsule::error::io_text;
use capsule::proto::lines::{parse_line, LineRequest};
use capsule::sandbox::{Config, Sandbox};
use capsule::spec::RunSpec;
use capsule::units::{parse_duration, parse_size};
use capsule::Status;
use capsule_judge::{Checker, Options, Report, MAX_TIME};
use serde::Deserialize;
use serde_json::{json, Value};

/// Largest `body` accepted.
pub const MAX_BODY: usize = 64 << 20;

/// What a stream entry asks for, once read.
#[derive(Debug)]
pub enum Work {
    Run(Box<RunSpec>),
    Judge(Box<JudgeJob>),
}

/// A stream entry: the job's id (empty when it has none) and what to do,
/// or why it cannot be done.
#[derive(Debug)]
pub struct Job {
    pub id: String,
    pub kind: String,
    pub work: Result<Work, String>,
}

/// A job's result: the object posted, the key it counts under in the
/// statistics (a run's status, a verdict, or `error`), and whether it
/// failed (an `error` object: the job could not be carried out).
#[derive(Debug)]
pub struct Outcome {
    pub result: Value,
    pub status: String,
    pub failed: bool,
}

impl Outcome {
    pub fn error(why: impl Into<String>) -> Outcome {
        Outcome { result: json!({ "error": why.into() }), status: "error".into(), failed: true }
    }
}

/// Reads an entry's fields: exactly `id`, `kind` (`run` or `judge`) and
/// `body` (JSON).
pub fn parse(fields: &BTreeMap<String, Vec<u8>>) -> Job {
    let text = |k: &str| fields.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
    let id = text("id").unwrap_or_default();
    let kind = text("kind").unwrap_or_default();
    let work = (|| {
        if let Some(k) = fields.keys().find(|k| !["id", "kind", "body"].contains(&k.as_str())) {
            return Err(format!("unknown field `{}` in the job (a job has `id`, `kind` and `body`)", k.escape_debug()));
        }
        if id.is_empty() {
            return Err("the job has no `id` field".to_string());
        }
        let body = fields.get("body").ok_or("the job has no `body` field")?;
        if body.len() > MAX_BODY {
            return Err(format!("the job's body is {} bytes, more than the {} accepted", body.len(), MAX_BODY));
        }
        let body: Value = serde_json::from_slice(body).map_err(|e| format!("the job's body is not JSON: {e}"))?;
        match kind.as_str() {
            "run" => run_spec(body).map(Work::Run),
            "judge" => judge_job(body).map(|j| Work::Judge(Box::new(j))),
            "" => Err("the job has no `kind` field (run or judge)".to_string()),
            k => Err(format!("unknown kind `{}` (run or judge)", k.escape_debug())),
        }
    })();
    Job { id, kind, work }
}

/// A `run` body: a `capsule serve` run spec, read by the same parser.
fn run_spec(body: Value) -> Result<Box<RunSpec>, String> {
    let line = serde_json::to_vec(&json!({ "id": null, "spec": body })).expect("serializable");
    match parse_line(&line) {
        Ok(LineRequest::Run { spec, .. }) => Ok(spec),
        Ok(_) => unreachable!("a line with `spec` is a run"),
        Err(e) => Err(e.message),
    }
}

/// A `judge` body: `capsule judge`'s input, inline.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeBody {
    pub lang: String,
    pub source: String,
    pub tests: Vec<TestBody>,
    #[serde(default)]
    pub checker: Option<CheckerBody>,
    #[serde(default)]
    pub time: Option<Amount>,
    #[serde(default)]
    pub compile_time: Option<Amount>,
    #[serde(default)]
    pub memory: Option<Amount>,
    #[serde(default)]
    pub output_limit: Option<Amount>,
    /// An interactor program: its text (a script starting with `#!`, or
    /// C++ source), or `{"program": TEXT, "lang": "c"}`.
    #[serde(default)]
    pub interactor: Option<ProgramBody>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestBody {
    pub name: String,
    pub input: String,
    #[serde(default)]
    pub output: Option<String>,
}

/// `"exact"`, `"tokens"`, `"float:EPS"`, or a program
/// (`{"program": TEXT}`, `{"program": TEXT, "lang": "c"}`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum CheckerBody {
    Builtin(String),
    Program(ProgramFields),
}

/// A checker's or interactor's program: a script's text (`#!` and its
/// interpreter), or C or C++ source (`lang`, C++ by default) compiled in
/// the sandbox as the solution is.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramFields {
    pub program: String,
    #[serde(default)]
    pub lang: Option<String>,
}

/// An interactor: its text alone, or the fields of a checker program.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ProgramBody {
    Text(String),
    Program(ProgramFields),
}

/// A checker's or interactor's program, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Helper {
    /// Written with mode 0700 and executed by the kernel.
    Script(String),
    /// Compiled by crates/capsule-judge ([`capsule_judge::compile_helper`]).
    Source { lang: String, text: String },
}

impl Helper {
    fn check(what: &str, program: &str, lang: Option<&str>) -> Result<Helper, String> {
        if program.trim().is_empty() {
            return Err(format!("{what}: the program's text is empty"));
        }
        if program.starts_with("#!") {
            if let Some(l) = lang {
                return Err(format!(
                    "{what}: lang `{}` is for a program's source; a script (#!) names its interpreter",
                    l.escape_debug()
                ));
            }
            return Ok(Helper::Script(program.to_string()));
        }
        let lang = lang.unwrap_or("cpp");
        let named = capsule_judge::presets::get(lang).map(|p| p.name()).unwrap_or_default();
        if !capsule_judge::HELPER_LANGS.contains(&named) {
            return Err(format!(
                "{what}: lang `{}`: a program's source is C or C++ (lang c or cpp); a program in another language is a script starting with #! and its interpreter",
                lang.escape_debug()
            ));
        }
        Ok(Helper::Source { lang: named.to_string(), text: program.to_string() })
    }
}

/// A limit: a string with a unit (`"1s"`, `"256M"`) or a number
/// (milliseconds, bytes), as in a profile.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Number(u64),
    Text(String),
}

/// A judge job, checked: `capsule judge`'s options but for the paths,
/// which exist only once [`judge`] writes the files.
#[derive(Debug)]
pub struct JudgeJob {
    body: JudgeBody,
    /// A built-in checker, or the checker program.
    checker: Result<Checker, Helper>,
    interactor: Option<Helper>,
    time: Duration,
    compile_time: Option<Duration>,
    memory: u64,
    output_limit: u64,
}

fn judge_job(body: Value) -> Result<JudgeJob, String> {
    let body: JudgeBody = serde_path_to_error::deserialize(body).map_err(|e| match e.path().to_string().as_str() {
        "." => format!("invalid judge job: {}", e.inner()),
        p => format!("invalid judge job: {p}: {}", e.inner()),
    })?;
    // The limits as `capsule judge` checks them.
    let duration = |a: &Option<Amount>, what: &str| -> Result<Option<Duration>, String> {
        let t = match a {
            None => return Ok(None),
            Some(Amount::Number(ms)) => Duration::from_millis(*ms),
            Some(Amount::Text(t)) => parse_duration(t).map_err(|e| format!("{what} `{}`: {e}", t.escape_debug()))?,
        };
        if t.is_zero() || t > MAX_TIME {
            return Err(format!("{what} {t:?}: must be more than 0 and at most 1h"));
        }
        Ok(Some(t))
    };
    let time = duration(&body.time, "time")?.unwrap_or(Duration::from_secs(1));
    let compile_time = duration(&body.compile_time, "compile_time")?;
    let size = |a: &Option<Amount>, what: &str, default: u64| match a {
        None => Ok(default),
        Some(Amount::Number(n)) => Ok(*n),
        Some(Amount::Text(t)) => parse_size(t).map_err(|e| format!("{what} `{}`: {e}", t.escape_debug())),
    };
    let memory = size(&body.memory, "memory", 256 << 20)?;
    if memory < 4 << 20 {
        return Err(format!("memory {memory}: too little to start a program (at least 4M)"));
    }
    let output_limit = size(&body.output_limit, "output_limit", 64 << 20)?;
    if output_limit == 0 {
        return Err("output_limit 0: must be at least 1 byte".into());
    }
    let checker = match &body.checker {
        None => Ok(Checker::Exact),
        Some(CheckerBody::Builtin(s)) => match s.as_str() {
            "exact" | "tokens" => Ok(Checker::parse(s)?),
            s if s.starts_with("float") => Ok(Checker::parse(s).map_err(|e| format!("checker: {e}"))?),
            s => {
                return Err(format!(
                    "checker `{}`: not exact, tokens or float:EPS; a checker program is given as {{\"program\": \"TEXT\"}} (a script starting with #!, or C++ source)",
                    s.escape_debug()
                ))
            }
        },
        Some(CheckerBody::Program(p)) => Err(Helper::check("checker", &p.program, p.lang.as_deref())?),
    };
    if body.interactor.is_some() && body.checker.is_some() {
        return Err("checker and interactor: an interactor judges the solution itself; give one of them".into());
    }
    let interactor = match &body.interactor {
        None => None,
        Some(ProgramBody::Text(t)) => Some(Helper::check("interactor", t, None)?),
        Some(ProgramBody::Program(p)) => Some(Helper::check("interactor", &p.program, p.lang.as_deref())?),
    };
    if body.tests.is_empty() {
        return Err("tests: a judge job needs at least one test".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, t) in body.tests.iter().enumerate() {
        let ok = !t.name.is_empty()
            && t.name.len() <= 100
            && !t.name.starts_with('.')
            && t.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok {
            return Err(format!(
                "tests[{i}].name `{}`: a test's name is 1 to 100 letters, digits, `.`, `_` or `-`, not starting with `.`",
                t.name.escape_debug()
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(format!("tests[{i}].name `{}`: two tests have this name", t.name));
        }
        if t.output.is_none() && body.interactor.is_none() {
            return Err(format!("tests[{i}] (`{}`): no `output` (only an interactive problem may omit it)", t.name));
        }
    }
    Ok(JudgeJob { body, checker, interactor, time, compile_time, memory, output_limit })
}

/// What the worker lets `run` jobs have (docs/scale-out.md, "Security").
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `--allow-host-network`: `share_net` and `egress.allow_local` are
    /// honoured (else refused: a job would reach the worker's Redis on
    /// loopback).
    pub host_network: bool,
    /// Redis's Unix socket, hidden from every run job.
    pub redis_socket: Option<PathBuf>,
}

impl Policy {
    /// Why the worker does not run `spec`, or the spec it runs.
    fn apply(&self, mut spec: RunSpec) -> Result<RunSpec, String> {
        if spec.share_net && !self.host_network {
            return Err("share_net: this worker gives run jobs no host network (a job could reach its Redis on \
                        loopback, add jobs and read results); start the worker with --allow-host-network to allow it"
                .into());
        }
        if spec.egress.as_ref().is_some_and(|e| e.allow_local) && !self.host_network {
            return Err("egress.allow_local: this worker lets run jobs reach no local address through the egress \
                        proxy (a job could reach its Redis on loopback); start the worker with \
                        --allow-host-network to allow it"
                .into());
        }
        if let Some(sock) = &self.redis_socket {
            spec.mounts.push(capsule::MountOp::Hide { path: sock.clone() });
        }
        Ok(spec)
    }
}

/// The worker's supervisor for `run` jobs, started anew if it dies.
pub struct Supervisor {
    config: Config,
    policy: Policy,
    current: Mutex<Arc<Sandbox>>,
}

impl Supervisor {
    pub fn start(config: Config, policy: Policy) -> Result<Supervisor, capsule::Error> {
        let sandbox = Sandbox::start(config.clone())?;
        Ok(Supervisor { config, policy, current: Mutex::new(Arc::new(sandbox)) })
    }

    fn get(&self) -> Arc<Sandbox> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces `dead` (unless another thread did already).
    fn restart(&self, dead: &Arc<Sandbox>) -> Result<(), capsule::Error> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&cur, dead) {
            *cur = Arc::new(Sandbox::start(self.config.clone())?);
        }
        Ok(())
    }
}

/// Carries out a job.
pub fn execute(work: Work, sup: &Supervisor) -> Outcome {
    match work {
        Work::Run(spec) => run(*spec, sup),
        Work::Judge(j) => judge(&j),
    }
}

fn run(spec: RunSpec, sup: &Supervisor) -> Outcome {
    let spec = match sup.policy.apply(spec) {
        Ok(spec) => spec,
        Err(why) => return Outcome::error(why),
    };
    for attempt in 0..2 {
        let sandbox = sup.get();
        match sandbox.run(spec.clone()).and_then(|h| h.wait()) {
            Ok(r) if r.status == Status::Error => {
                return Outcome::error(r.error.clone().unwrap_or_else(|| "the run failed".into()))
            }
            Ok(r) => {
                let status = r.status.as_str().to_string();
                let result = serde_json::to_value(&r).expect("serializable");
                return Outcome { result, status, failed: false };
            }
            // The supervisor died (not the run): once more on a new one.
            Err(capsule::Error::Supervisor(why)) if attempt == 0 => {
                eprintln!("capsule worker: the supervisor died ({why}); starting another");
                if let Err(e) = sup.restart(&sandbox) {
                    return Outcome::error(format!("the supervisor died ({why}) and could not be restarted: {e}"));
                }
            }
            Err(e) => return Outcome::error(e.to_string()),
        }
    }
    unreachable!("the second attempt returns")
}

/// A private directory for one judge job, removed when dropped.
struct JobDir(PathBuf);

impl JobDir {
    fn new() -> Result<JobDir, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = std::fs::canonicalize(std::env::temp_dir()).unwrap_or_else(|_| PathBuf::from("/tmp"));
        for _ in 0..100 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = base.join(format!("capsule-worker.{}.{n}.{nanos:08x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(JobDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!(
                        "cannot create a job directory `{}`: {}; set TMPDIR to a writable directory",
                        p.display(),
                        io_text(&e)
                    ))
                }
            }
        }
        Err(format!("cannot create a job directory in `{}`", base.display()))
    }

    fn mkdir(&self, name: &str) -> Result<PathBuf, String> {
        let p = self.0.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| format!("cannot create `{}`: {}", p.display(), io_text(&e)))?;
        Ok(p)
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write `{}`: {}", path.display(), io_text(&e)))
}

/// Writes the job's files and judges them as `capsule judge` would; the
/// result is `capsule judge --json`'s object.
fn judge(j: &JudgeJob) -> Outcome {
    let dir = match JobDir::new() {
        Ok(d) => d,
        Err(e) => return Outcome::error(e),
    };
    let opts = match files(j, &dir) {
        Ok(o) => o,
        Err(e) => return Outcome::error(e),
    };
    // A judge error before the judgement: shaped as `capsule judge --json`'s.
    let mut opts = opts;
    if let Err(e) = programs(j, &dir, &mut opts) {
        let result = Report::default().json(Some(&e), Some(&opts));
        return Outcome { result, status: "error".into(), failed: true };
    }
    let mut report = Report::default();
    let outcome = capsule_judge::judge(&opts, &mut report, &mut |_| {});
    let result = report.json(outcome.as_ref().err().map(String::as_str), Some(&opts));
    match outcome {
        Ok(()) => Outcome { status: report.verdict().code().to_string(), result, failed: false },
        Err(_) => Outcome { result, status: "error".into(), failed: true },
    }
}

fn files(j: &JudgeJob, dir: &JobDir) -> Result<Options, String> {
    let b = &j.body;
    let source = dir.0.join("solution");
    write(&source, &b.source, 0o600)?;
    let tests = dir.mkdir("tests")?;
    for t in &b.tests {
        write(&tests.join(format!("{}.in", t.name)), &t.input, 0o600)?;
        if let Some(out) = &t.output {
            write(&tests.join(format!("{}.out", t.name)), out, 0o600)?;
        }
    }
    Ok(Options {
        lang: b.lang.clone(),
        source,
        tests,
        checker: j.checker.clone().unwrap_or(Checker::Exact),
        time: j.time,
        compile_time: j.compile_time,
        memory: j.memory,
        output_limit: j.output_limit,
        interactor: None,
        parallel: 1,
        per_cpu: false,
    })
}

/// Writes the checker and interactor programs, each in a directory of its
/// own (the judge shows a program's directory to it), compiling sources
/// as `capsule judge` compiles a solution, and names them in `opts`.
fn programs(j: &JudgeJob, dir: &JobDir, opts: &mut Options) -> Result<(), String> {
    let program = |what: &str, h: &Helper| -> Result<PathBuf, String> {
        let d = dir.mkdir(what)?;
        match h {
            Helper::Script(text) => {
                let p = d.join(what);
                write(&p, text, 0o700)?;
                Ok(p)
            }
            Helper::Source { lang, text } => {
                let src = dir.0.join(format!("{what}.src"));
                write(&src, text, 0o600)?;
                capsule_judge::compile_helper(what, lang, &src, &d)
            }
        }
    };
    if let Err(h) = &j.checker {
        opts.checker = Checker::Program(program("checker", h)?);
    }
    if let Some(h) = &j.interactor {
        opts.interactor = Some(program("interactor", h)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(kv: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        kv.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
    }

    fn error(kv: &[(&str, &str)]) -> String {
        parse(&fields(kv)).work.expect_err("an error")
    }

    #[test]
    fn run_jobs_read_the_serve_spec() {
        let j = parse(&fields(&[("id", "a"), ("kind", "run"), ("body", r#"{"argv": ["/bin/true"]}"#)]));
        assert_eq!(j.id, "a");
        match j.work {
            Ok(Work::Run(spec)) => assert_eq!(spec.argv, ["/bin/true"]),
            other => panic!("{other:?}"),
        }
        let e = error(&[("id", "a"), ("kind", "run"), ("body", r#"{"argv": ["x"], "wal_time": 1}"#)]);
        assert!(e.starts_with("invalid spec: wal_time: unknown field `wal_time`"), "{e}");
    }

    #[test]
    fn egress_to_local_addresses_needs_the_host_network() {
        let mut spec = RunSpec::new(["/bin/true"]);
        spec.egress = Some(capsule::proto::egress::Egress { allow_local: true, ..Default::default() });
        let e = Policy::default().apply(spec.clone()).expect_err("refused");
        assert!(e.starts_with("egress.allow_local: ") && e.contains("--allow-host-network"), "{e}");
        assert!(Policy { host_network: true, ..Default::default() }.apply(spec.clone()).is_ok());
        spec.egress = Some(capsule::proto::egress::Egress { allow_hosts: vec!["*".into()], ..Default::default() });
        assert!(Policy::default().apply(spec).is_ok());
    }

    #[test]
    fn malformed_jobs_say_why() {
        assert!(error(&[("kind", "run"), ("body", "{}")]).contains("no `id`"));
        assert!(error(&[("id", "a"), ("body", "{}")]).contains("no `kind`"));
        assert!(error(&[("id", "a"), ("kind", "run")]).contains("no `body`"));
        assert!(error(&[("id", "a"), ("kind", "build"), ("body", "{}")]).contains("unknown kind `build`"));
        assert!(error(&[("id", "a"), ("kind", "run"), ("body", "{")]).contains("not JSON"));
        assert!(error(&[("id", "a"), ("kind", "run"), ("body", "{}"), ("x", "1")]).contains("unknown field `x`"));
    }

    fn judge_error(body: &str) -> String {
        error(&[("id", "a"), ("kind", "judge"), ("body", body)])
    }

    fn judge_ok(body: &str) -> JudgeJob {
        match parse(&fields(&[("id", "a"), ("kind", "judge"), ("body", body)])).work {
            Ok(Work::Judge(j)) => *j,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn checker_and_interactor_programs_are_scripts_or_sources() {
        let t = r#""lang": "c", "source": "", "tests": [{"name": "1", "input": "", "output": ""}]"#;
        let j = judge_ok(&format!(r#"{{{t}, "checker": {{"program": "int main() {{}}"}}}}"#));
        assert_eq!(j.checker, Err(Helper::Source { lang: "cpp".into(), text: "int main() {}".into() }));
        let j = judge_ok(&format!(r#"{{{t}, "checker": {{"program": "int main() {{}}", "lang": "C"}}}}"#));
        assert_eq!(j.checker, Err(Helper::Source { lang: "c".into(), text: "int main() {}".into() }));
        let j = judge_ok(&format!(r##"{{{t}, "checker": {{"program": "#!/bin/sh\nexit 0"}}}}"##));
        assert_eq!(j.checker, Err(Helper::Script("#!/bin/sh\nexit 0".into())));
        let j = judge_ok(&format!(r#"{{{t}, "interactor": "int main() {{}}"}}"#));
        assert_eq!(j.interactor, Some(Helper::Source { lang: "cpp".into(), text: "int main() {}".into() }));
        let j = judge_ok(&format!(r#"{{{t}, "interactor": {{"program": "int main() {{}}", "lang": "c++"}}}}"#));
        assert_eq!(j.interactor, Some(Helper::Source { lang: "cpp".into(), text: "int main() {}".into() }));
        let j = judge_ok(&format!(r##"{{{t}, "interactor": "#!/bin/sh"}}"##));
        assert_eq!(j.interactor, Some(Helper::Script("#!/bin/sh".into())));
        assert_eq!(j.checker, Ok(Checker::Exact));
    }

    #[test]
    fn judge_jobs_are_checked_as_capsule_judge_checks() {
        let ok = r#"{"lang": "c", "source": "int main(){}", "tests": [{"name": "1", "input": "", "output": ""}], "time": "2s", "memory": 67108864, "checker": "float:1e-6"}"#;
        match parse(&fields(&[("id", "a"), ("kind", "judge"), ("body", ok)])).work {
            Ok(Work::Judge(j)) => {
                assert_eq!(j.time, Duration::from_secs(2));
                assert_eq!(j.compile_time, None, "the preset's");
                assert_eq!(j.memory, 64 << 20);
                assert_eq!(j.output_limit, 64 << 20);
                assert!(matches!(j.checker, Ok(Checker::Float(_))));
            }
            other => panic!("{other:?}"),
        }
        let t = r#""tests": [{"name": "1", "input": "", "output": ""}]"#;
        assert!(judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "time": "0s"}}"#)).contains("time"));
        for (given, want) in [(r#""90s""#, 90_000), ("1500", 1_500)] {
            let body = format!(r#"{{"lang": "c", "source": "", {t}, "compile_time": {given}}}"#);
            match parse(&fields(&[("id", "a"), ("kind", "judge"), ("body", &body)])).work {
                Ok(Work::Judge(j)) => assert_eq!(j.compile_time, Some(Duration::from_millis(want)), "{given}"),
                other => panic!("{given}: {other:?}"),
            }
        }
        let e = judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "compile_time": "2h"}}"#));
        assert!(e.starts_with("compile_time 7200s: must be more than 0"), "{e}");
        assert!(
            judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "compile_time": 0}}"#)).contains("compile_time")
        );
        assert!(judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "memory": "1M"}}"#)).contains("at least 4M"));
        assert!(judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "checker": "./x"}}"#)).contains("program"));
        let e = judge_error(&format!(
            r#"{{"lang": "c", "source": "", {t}, "interactor": {{"program": "x", "lang": "java"}}}}"#
        ));
        assert!(e.contains("interactor: lang `java`") && e.contains("#!"), "{e}");
        let e = judge_error(&format!(
            r##"{{"lang": "c", "source": "", {t}, "checker": {{"program": "#!/bin/sh", "lang": "c"}}}}"##
        ));
        assert!(e.contains("checker: lang `c` is for a program's source"), "{e}");
        assert!(judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "interactor": " "}}"#)).contains("empty"));
        let e =
            judge_error(&format!(r#"{{"lang": "c", "source": "", {t}, "checker": {{"program": "x", "cflags": 1}}}}"#));
        assert!(e.contains("checker"), "{e}");
        assert!(judge_error(r#"{"lang": "c", "source": "", "tests": []}"#).contains("at least one test"));
        assert!(judge_error(r#"{"lang": "c", "source": "", "tests": [{"name": "../x", "input": "", "output": ""}]}"#)
            .contains("tests[0].name"));
        assert!(judge_error(r#"{"lang": "c", "source": "", "tests": [{"name": "1", "input": ""}]}"#)
            .contains("no `output`"));
        assert!(
            judge_error(r#"{"lang": "c", "source": "", "tests": [], "extra": 1}"#).contains("unknown field `extra`")
        );
        assert!(judge_error(r#"{"source": ""}"#).contains("missing field `lang`"));
    }
}
