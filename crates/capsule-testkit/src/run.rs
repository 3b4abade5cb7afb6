//! Running capsule: the invocation builder [`Cmd`], a run in flight
//! ([`Running`]) and everything observed about it ([`Out`]).

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cgroup::{join_cgroup_hook, CgScope};
use crate::harness::{as_ids, h, libtest, probe};
use crate::kv::Kv;
use crate::scratch::Scratch;
use crate::systemd::{runtime_dir, scope_leftovers, ScopeWatch};
use crate::{DEFAULT_PATH, RUN_TIMEOUT};

/// Everything observed about one finished process.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The `--json` result, when requested.
    pub json: Option<serde_json::Value>,
    /// The `--meta` lines, when requested.
    pub meta: Option<String>,
    pub elapsed: Duration,
    /// The delegated scope capsule ran in (cgroup VM only; in the systemd
    /// mode the user manager's scope its re-started self ran in), as a path
    /// under /sys/fs/cgroup.
    pub scope: Option<PathBuf>,
    /// What capsule left in that scope when it exited (sub-cgroups,
    /// processes, controllers still enabled); `None` when it was restored.
    pub cgroup_leftovers: Option<String>,
}

impl Out {
    pub fn kv(&self) -> Kv {
        Kv::parse(&self.stdout)
    }

    pub fn json(&self) -> &serde_json::Value {
        self.json.as_ref().unwrap_or_else(|| panic!("no --json result written; {}", self.describe()))
    }

    /// The result's `status` field.
    pub fn status(&self) -> String {
        self.json()["status"].as_str().unwrap_or_else(|| panic!("no status; {}", self.describe())).to_string()
    }

    pub fn describe(&self) -> String {
        let mut s = format!(
            "exit code {:?} signal {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- json\n{}\n",
            self.code,
            self.signal,
            self.elapsed,
            self.stdout,
            self.stderr,
            self.json.as_ref().map(|j| j.to_string()).unwrap_or_default()
        );
        if let Some(sc) = &self.scope {
            s.push_str(&format!("--- cgroup scope {}\n", sc.display()));
            if let Some(l) = &self.cgroup_leftovers {
                s.push_str(&format!("left behind: {l}\n"));
            }
        }
        s
    }

    /// Asserts capsule restored its scope (cgroup VM; nothing to check
    /// elsewhere): no sub-cgroup, no process, no controller left enabled.
    /// In the systemd mode: that it ran in a scope of the user manager's,
    /// which was collected once capsule exited (no process outlived it).
    #[track_caller]
    pub fn assert_cgroups_clean(&self) -> &Self {
        self.assert_systemd_scope();
        assert!(self.cgroup_leftovers.is_none(), "capsule left cgroup state behind; {}", self.describe());
        self
    }

    /// In the systemd mode, asserts capsule re-started itself in a
    /// transient scope of the user manager's (`user@UID.service/app.slice/
    /// run-*.scope`); nothing elsewhere.
    #[track_caller]
    pub fn assert_systemd_scope(&self) -> &Self {
        if h().systemd {
            assert!(
                self.scope.is_some(),
                "capsule did not run in a scope of the systemd user manager (user@{uid}.service/app.slice/run-*.scope); {}",
                self.describe(),
                uid = h().uid
            );
        }
        self
    }

    /// Asserts capsule's exit code.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit status; {}", self.describe());
        self
    }

    /// Asserts a normal `exited` result with exit code 0 and probe's `done=1`.
    #[track_caller]
    pub fn assert_probe_ok(&self) -> Kv {
        self.assert_code(0);
        if let Some(j) = &self.json {
            assert_eq!(j["status"], "exited", "{}", self.describe());
        }
        let kv = self.kv();
        assert_eq!(kv.get("done"), Some("1"), "probe did not finish; {}", self.describe());
        kv
    }
}

type PreExec = Box<dyn FnMut() -> std::io::Result<()> + Send + Sync>;

/// A capsule invocation: `capsule ARGS...`, as the capsule user.
pub struct Cmd {
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    timeout: Duration,
    json: bool,
    meta: bool,
    capsule: PathBuf,
    as_caller: bool,
    /// Run as this user (uid, gid) instead of the test user.
    user: Option<(u32, u32)>,
    pre_exec: Option<PreExec>,
    stdio: Option<(Stdio, Stdio, Stdio)>,
    scope: ScopeMode,
}

/// Which cgroup a capsule invocation starts in (cgroup VM only).
#[derive(Clone, Debug)]
enum ScopeMode {
    /// A fresh delegated scope, checked and removed after the run.
    Fresh,
    /// The test process's own cgroup (root's, not delegated).
    None,
    /// An existing scope the test manages; its `capsule-leaf/` when the
    /// scope has controllers enabled (a crashed or concurrent instance).
    Join(PathBuf),
}

/// `capsule` with the given leading arguments (e.g. `["run", "-q"]`).
pub fn capsule<S: AsRef<OsStr>>(args: &[S]) -> Cmd {
    Cmd {
        args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
        env: Vec::new(),
        cwd: PathBuf::from("/"),
        // Software emulation (the VMs) runs capsule several times slower.
        timeout: if crate::in_cgroup_vm() { RUN_TIMEOUT * 5 } else { RUN_TIMEOUT },
        json: false,
        meta: false,
        capsule: h().capsule.clone(),
        as_caller: false,
        user: None,
        pre_exec: None,
        stdio: None,
        scope: ScopeMode::Fresh,
    }
}

/// `capsule run -q OPTS -- PROBE PROBE_ARGS` with a `--json` result.
pub fn run_probe(opts: &[&str], probe_args: &[&str]) -> Cmd {
    let mut c = capsule(&["run", "-q"]);
    c.args(opts).arg("--").arg(probe()).args(probe_args);
    c.json = true;
    c
}

impl Cmd {
    pub fn arg<S: AsRef<OsStr>>(&mut self, a: S) -> &mut Self {
        self.args.push(a.as_ref().to_owned());
        self
    }
    pub fn args<S: AsRef<OsStr>>(&mut self, a: &[S]) -> &mut Self {
        for x in a {
            self.arg(x);
        }
        self
    }
    pub fn env(&mut self, k: &str, v: &str) -> &mut Self {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn cwd(&mut self, p: impl Into<PathBuf>) -> &mut Self {
        self.cwd = p.into();
        self
    }
    pub fn timeout(&mut self, t: Duration) -> &mut Self {
        self.timeout = t;
        self
    }
    /// Adds `--json FILE` (inserted right after `run`) and parses it.
    pub fn json(&mut self) -> &mut Self {
        self.json = true;
        self
    }
    pub fn no_json(&mut self) -> &mut Self {
        self.json = false;
        self
    }
    /// Adds `--meta FILE` and reads it.
    pub fn meta(&mut self) -> &mut Self {
        self.meta = true;
        self
    }
    /// Uses another capsule binary (e.g. a copy owned by the test user).
    pub fn binary(&mut self, p: impl Into<PathBuf>) -> &mut Self {
        self.capsule = p.into();
        self
    }
    /// Runs capsule as the test process's own user (root, when root).
    pub fn as_caller(&mut self) -> &mut Self {
        self.as_caller = true;
        self
    }

    /// Runs as user `ids` (uid, gid), e.g. [`crate::other_user`]'s.
    pub fn as_ids(&mut self, ids: (u32, u32)) -> &mut Self {
        self.user = Some(ids);
        self
    }
    /// A hook run in the child before exec (of setpriv, which keeps fds,
    /// session and controlling terminal across its own exec of capsule).
    pub fn pre_exec(&mut self, f: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) -> &mut Self {
        self.pre_exec = Some(Box::new(f));
        self
    }
    /// Cgroup VM: starts capsule in the test process's own (root-owned,
    /// not delegated) cgroup instead of a fresh delegated scope; in the
    /// systemd mode, without `XDG_RUNTIME_DIR` (no user manager to ask).
    pub fn no_scope(&mut self) -> &mut Self {
        self.scope = ScopeMode::None;
        self
    }
    /// Cgroup VM: starts capsule in `scope` (kept after the run), or in its
    /// `capsule-leaf/` when the scope has controllers enabled.
    pub fn in_scope(&mut self, scope: &CgScope) -> &mut Self {
        self.scope = ScopeMode::Join(scope.path.clone());
        self
    }
    /// Replaces the piped stdio (stdout/stderr are then not captured).
    pub fn stdio(&mut self, i: Stdio, o: Stdio, e: Stdio) -> &mut Self {
        self.stdio = Some((i, o, e));
        self
    }

    fn build(&mut self, results: &Option<Scratch>, scope: Option<&Path>) -> Command {
        let mut argv: Vec<OsString> = vec![self.capsule.clone().into_os_string()];
        let mut args = self.args.clone();
        if let Some(r) = results {
            // Options go right after the subcommand.
            let mut extra: Vec<OsString> = Vec::new();
            if self.json {
                extra.push("--json".into());
                extra.push(r.join("result.json").into_os_string());
            }
            if self.meta {
                extra.push("--meta".into());
                extra.push(r.join("result.meta").into_os_string());
            }
            let at = if args.first().map(|a| a == "run" || a == "shell").unwrap_or(false) { 1 } else { 0 };
            args.splice(at..at, extra);
        }
        argv.extend(args);
        let mut c = if self.as_caller {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c.env_clear().env("PATH", DEFAULT_PATH);
            c
        } else {
            as_ids(&argv, self.user.unwrap_or((h().uid, h().gid)))
        };
        // The systemd mode: the user manager is found through it; without
        // it (`no_scope`) capsule has no way to delegated cgroups.
        if let (true, false, Some(rt)) = (h().systemd, matches!(self.scope, ScopeMode::None), runtime_dir()) {
            c.env("XDG_RUNTIME_DIR", rt);
        }
        c.current_dir(&self.cwd);
        // The black-box tests fork a supervisor per `capsule run` (what
        // they check, e.g. nothing left in a scope afterwards, is about
        // one run), unless CAPSULE_TEST_AGENT=1 runs them through agents
        // (test.sh runs part of the suite that way; tests/agent.rs tests
        // the agents themselves). A test's own env comes after.
        if std::env::var_os("CAPSULE_TEST_AGENT").is_some_and(|v| v == "1") {
            c.env("CAPSULE_AGENT_IDLE", "3");
        } else {
            c.env("CAPSULE_AGENT", "off");
        }
        // capsule-libtest's sandboxes, one supervisor per CPU (test.sh runs tests/library.rs that way too).
        if let Some(v) = std::env::var_os("CAPSULE_TEST_PER_CPU") {
            c.env("CAPSULE_TEST_PER_CPU", v);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(dir) = scope {
            let join = join_cgroup_hook(dir);
            // SAFETY: the hook only makes open/write/close system calls on
            // paths prepared before the fork.
            unsafe {
                c.pre_exec(join);
            }
        }
        if let Some(f) = self.pre_exec.take() {
            // SAFETY: the hook is run between fork and exec; the hooks the
            // tests install only make async-signal-safe system calls.
            unsafe {
                c.pre_exec(f);
            }
        }
        match self.stdio.take() {
            Some((i, o, e)) => {
                c.stdin(i).stdout(o).stderr(e);
            }
            None => {
                c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        c
    }

    /// Starts capsule; see [`Running`].
    pub fn spawn(&mut self) -> Running {
        let results = if self.json || self.meta { Some(Scratch::new("result")) } else { None };
        let (fresh, scope_path) = match (&self.scope, h().vm && !self.as_caller) {
            (_, false) | (ScopeMode::None, true) => (None, None),
            (ScopeMode::Fresh, true) => {
                let s = CgScope::new("scope");
                let p = s.path.clone();
                (Some(s), Some(p))
            }
            (ScopeMode::Join(p), true) => (None, Some(p.clone())),
        };
        let mut c = self.build(&results, scope_path.as_deref());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawn {:?}: {e}", c));
        let watch =
            (h().systemd && !matches!(self.scope, ScopeMode::None)).then(|| ScopeWatch::start(child.id() as i32));
        let (tx, rx) = mpsc::channel();
        let out_thread = child.stdout.take().map(|so| {
            std::thread::spawn(move || {
                let mut all = String::new();
                let mut r = BufReader::new(so);
                let mut line = String::new();
                while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    all.push_str(&line);
                    let _ = tx.send(line.clone());
                    line.clear();
                }
                all
            })
        });
        let err_thread = child.stderr.take().map(|mut se| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = se.read_to_end(&mut b);
                String::from_utf8_lossy(&b).into_owned()
            })
        });
        Running {
            child,
            started: Instant::now(),
            timeout: self.timeout,
            lines: rx,
            out_thread,
            err_thread,
            results,
            seen: Vec::new(),
            scope: fresh,
            scope_path,
            watch,
        }
    }

    /// Runs capsule to completion (failing the test after the timeout).
    pub fn run(&mut self) -> Out {
        self.spawn().wait()
    }
}

/// A capsule process in flight.
pub struct Running {
    pub child: Child,
    started: Instant,
    timeout: Duration,
    lines: mpsc::Receiver<String>,
    out_thread: Option<std::thread::JoinHandle<String>>,
    err_thread: Option<std::thread::JoinHandle<String>>,
    results: Option<Scratch>,
    seen: Vec<String>,
    /// The fresh scope of this invocation (removed on drop).
    scope: Option<CgScope>,
    scope_path: Option<PathBuf>,
    /// The systemd mode: watches for the user manager's scope.
    watch: Option<ScopeWatch>,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Cgroup VM: the delegated scope capsule was started in. The systemd
    /// mode: the user manager's scope capsule re-started itself in, waited
    /// for (up to a minute, while capsule runs).
    pub fn scope_path(&mut self) -> Option<PathBuf> {
        if self.watch.is_none() {
            return self.scope_path.clone();
        }
        let child = &mut self.child;
        self.watch.as_ref().unwrap().wait_scope(Duration::from_secs(60), || child.try_wait().ok().flatten().is_none())
    }

    /// Waits for a stdout line starting with `prefix`; panics after `t`.
    pub fn wait_line(&mut self, prefix: &str, t: Duration) -> String {
        let deadline = Instant::now() + t;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(_) => {
                    let st = self.child.try_wait().ok().flatten();
                    panic!("no line `{prefix}` within {t:?}; exit {st:?}; lines so far: {:?}", self.seen)
                }
            }
        }
    }

    /// The next stdout line (any line), or `None` when none came within `t`
    /// or stdout closed.
    pub fn next_line(&mut self, t: Duration) -> Option<String> {
        match self.lines.recv_timeout(t) {
            Ok(l) => {
                self.seen.push(l.clone());
                Some(l)
            }
            Err(_) => None,
        }
    }

    /// The stdout lines received so far (through [`wait_line`](Self::wait_line)
    /// and [`next_line`](Self::next_line)).
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Whether capsule is still running (not yet exited).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Waits for capsule to exit; kills it and fails the test after the
    /// timeout.
    pub fn wait(mut self) -> Out {
        let deadline = self.started + self.timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self.err_thread.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default();
                panic!("capsule did not exit within {:?}; stderr: {stderr}", self.timeout);
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let elapsed = self.started.elapsed();
        // The pipes close when every holder exits; a process that escaped
        // the sandbox holding them would hang here, so bound the wait.
        let stdout = join_bounded(self.out_thread.take(), Duration::from_secs(10), "stdout");
        let stderr = join_bounded(self.err_thread.take(), Duration::from_secs(10), "stderr");
        let (mut json, mut meta) = (None, None);
        if let Some(r) = &self.results {
            if let Ok(s) = std::fs::read_to_string(r.join("result.json")) {
                json =
                    Some(serde_json::from_str(&s).unwrap_or_else(|e| panic!("--json file is not JSON ({e}): {s:?}")));
            }
            meta = std::fs::read_to_string(r.join("result.meta")).ok();
        }
        // Checked at once: capsule restores its base before it exits.
        let mut cgroup_leftovers = self.scope.as_ref().and_then(|s| s.leftovers());
        let mut scope = self.scope_path.clone();
        if let Some(mut w) = self.watch.take() {
            scope = w.finish();
            cgroup_leftovers = scope.as_ref().and_then(|s| scope_leftovers(s, Duration::from_secs(10)));
        }
        // Dropping the fresh scope removes it (forcibly if need be).
        self.scope = None;
        Out {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            json,
            meta,
            elapsed,
            scope,
            cgroup_leftovers,
        }
    }
}

impl Drop for Running {
    /// A test that panics mid-run must not leave capsule behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Then the scope (field order would drop it after this body anyway;
        // explicit so the kill above happens first).
        self.scope = None;
    }
}

fn join_bounded(t: Option<std::thread::JoinHandle<String>>, limit: Duration, what: &str) -> String {
    let Some(t) = t else { return String::new() };
    let deadline = Instant::now() + limit;
    while !t.is_finished() {
        if Instant::now() > deadline {
            panic!("capsule exited but its {what} stayed open for {limit:?}: a process outlived the run");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    t.join().unwrap_or_default()
}

/// `capsule-libtest ARGS...` as the capsule user, with `CAPSULE_BIN` set to
/// the staged capsule (in the cgroup VM, in a fresh delegated scope).
pub fn libtest_cmd<S: AsRef<OsStr>>(args: &[S]) -> Cmd {
    let mut c = capsule(args);
    c.binary(libtest());
    c.env("CAPSULE_BIN", &h().capsule.display().to_string());
    c
}
