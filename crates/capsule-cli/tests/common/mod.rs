//! Harness for the black-box tests of the `capsule` CLI.
//!
//! * As root, the tests run capsule as an unprivileged user (`capsule-test`,
//!   created on first use) through `setpriv --reuid --regid --clear-groups`,
//!   so the spawned pid *is* capsule once setpriv exec'd. Both binaries are
//!   copied to a world-readable directory under /var/tmp (not /tmp: the
//!   sandbox's /tmp is private). As any other user, capsule runs directly.
//! * Missing kernel features make a test print `SKIP <test>: <reason>` and
//!   pass, unless `CAPSULE_TEST_STRICT=1` (CI), where they fail.
//! * The probe (`capsule-probe`) prints `key=value` lines; [`Kv`] parses them.
//! * In the cgroup v2 VM (`/work/shared/vm/cgroup2-vm --as-root`: root with
//!   `CGROUP2_VM=1`), the unprivileged user is the VM's (`CGROUP2_VM_USER`,
//!   default `cgvm`), and every capsule invocation gets a delegated scope of
//!   its own, `/sys/fs/cgroup/delegated/scope-<unique>` (like `systemd-run
//!   --user --scope -p Delegate=yes`): capsule enables controllers on its
//!   base cgroup, which then cannot hold processes, so invocations must not
//!   share one. The scope is checked (see [`Out::cgroup_leftovers`]) and
//!   removed when capsule has exited.
//! * The cgroup tests use [`require_cgroups!`]: they skip where no delegated
//!   cgroup v2 hierarchy exists (the host), even under
//!   `CAPSULE_TEST_STRICT=1`, and fail instead under `CAPSULE_TEST_CGROUPS=1`.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::ffi::{CString, OsStr, OsString};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

pub const TEST_USER: &str = "capsule-test";
pub const BIN_ROOT: &str = "/var/tmp/capsule-test-bins";
pub const SCRATCH_ROOT: &str = "/var/tmp/capsule-test-scratch";
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Upper bound for any single capsule invocation; a hang fails the test.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- skipping

pub fn strict() -> bool {
    std::env::var("CAPSULE_TEST_STRICT").map(|v| v == "1").unwrap_or(false)
}

/// Reports a skipped test (or fails it under `CAPSULE_TEST_STRICT=1`).
pub fn skip(test: &str, reason: &str) {
    if strict() {
        panic!("{test}: required feature missing (CAPSULE_TEST_STRICT=1): {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
}

/// `require!(test_name, condition_result)`: returns from the test after
/// [`skip`] when the `Result<(), String>` is an error.
#[macro_export]
macro_rules! require {
    ($test:expr, $check:expr) => {
        if let Err(reason) = $check {
            $crate::common::skip($test, &reason);
            return;
        }
    };
}

// ---------------------------------------------------------------- harness

/// Who runs capsule and where the binaries are.
pub struct Harness {
    /// The test process runs as root (uid 0).
    pub is_root: bool,
    /// Root inside the cgroup v2 VM (`CGROUP2_VM=1`): capsule runs as the VM
    /// user, each invocation in a delegated scope of its own.
    pub vm: bool,
    /// The unprivileged user capsule runs as: the test user when root,
    /// else ourselves.
    pub uid: u32,
    pub gid: u32,
    /// Directory holding the binaries (capsule, capsule-cli, capsule-probe).
    pub bin_dir: PathBuf,
    pub capsule: PathBuf,
    pub probe: PathBuf,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

pub fn h() -> &'static Harness {
    HARNESS.get_or_init(|| {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let capsule = PathBuf::from(env!("CARGO_BIN_EXE_capsule"));
        let probe = PathBuf::from(env!("CARGO_BIN_EXE_capsule-probe"));
        ensure_dir(SCRATCH_ROOT, 0o1777);
        if uid != 0 {
            let bin_dir = capsule.parent().unwrap().to_path_buf();
            return Harness { is_root: false, vm: false, uid, gid, bin_dir, capsule, probe };
        }
        let vm = in_cgroup_vm();
        let (tuid, tgid) = if vm {
            let user = vm_user();
            lookup_user(&user).unwrap_or_else(|| panic!("CGROUP2_VM=1 but the VM user `{user}` does not exist"))
        } else {
            ensure_test_user()
        };
        let bin_dir = install_bins();
        Harness {
            is_root: true,
            vm,
            uid: tuid,
            gid: tgid,
            capsule: bin_dir.join("capsule"),
            probe: bin_dir.join("capsule-probe"),
            bin_dir,
        }
    })
}

pub fn probe() -> String {
    h().probe.display().to_string()
}

fn ensure_dir(path: &str, mode: u32) {
    match std::fs::create_dir(path) {
        Ok(()) => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir {path}: {e}"),
    }
}

/// The user's uid and gid from /etc/passwd. Read directly, not through
/// getpwnam: the test binaries are static, and glibc's NSS modules
/// (libnss_systemd, which the lookup of a missing user falls through to)
/// crash when a static binary loads them.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?))).flatten()
    })
}

/// Creates the unprivileged test user once; tolerates concurrent test
/// binaries doing the same (useradd's lock contention, "already exists").
fn ensure_test_user() -> (u32, u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(ids) = lookup_user(TEST_USER) {
            return ids;
        }
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER])
            .output()
            .expect("run useradd");
        // 0 created, 9 already exists, 10 cannot lock the files (retry).
        if let Some(ids) = lookup_user(TEST_USER) {
            return ids;
        }
        if Instant::now() > deadline {
            panic!(
                "cannot create user {TEST_USER}: useradd exited {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies both binaries to `/var/tmp/capsule-test-bins/<hash>/` (0755,
/// root-owned), keyed by the originals' paths, sizes and mtimes so test
/// binaries share a copy; stale copies older than two days are removed.
/// The binaries the tests run, by the names they are installed under:
/// the front end `capsule` executes `capsule-cli` from its own directory.
fn bins() -> [(PathBuf, &'static str); 3] {
    [
        (PathBuf::from(env!("CARGO_BIN_EXE_capsule")), "capsule"),
        (PathBuf::from(env!("CARGO_BIN_EXE_capsule-cli")), "capsule-cli"),
        (PathBuf::from(env!("CARGO_BIN_EXE_capsule-probe")), "capsule-probe"),
    ]
}

fn install_bins() -> PathBuf {
    ensure_dir(BIN_ROOT, 0o755);
    let mut hasher = DefaultHasher::new();
    let bins = bins();
    for (p, _) in &bins {
        let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        p.hash(&mut hasher);
        m.len().hash(&mut hasher);
        m.mtime().hash(&mut hasher);
        m.mtime_nsec().hash(&mut hasher);
    }
    let key = format!("{:016x}", hasher.finish());
    let dir = Path::new(BIN_ROOT).join(&key);
    if bins.iter().all(|(_, name)| dir.join(name).exists()) {
        return dir;
    }
    let tmp = Path::new(BIN_ROOT).join(format!(".{key}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (src, name) in &bins {
        let dst = tmp.join(name);
        std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another test binary won the race.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    // Prune old copies.
    if let Ok(rd) = std::fs::read_dir(BIN_ROOT) {
        for e in rd.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() > Duration::from_secs(2 * 86400))
                .unwrap_or(false);
            if old && e.file_name() != OsStr::new(&key) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    dir
}

/// Whether the capsule user can create a user namespace at all.
pub fn userns_available() -> Result<(), String> {
    static R: OnceLock<Result<(), String>> = OnceLock::new();
    R.get_or_init(|| {
        let out = as_user(&["unshare", "-U", "true"]).output().map_err(|e| format!("run unshare: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("`unshare -U true` as uid {} fails: {}", h().uid, String::from_utf8_lossy(&out.stderr).trim()))
        }
    })
    .clone()
}

/// Whether the kernel has time namespaces.
pub fn timens_available() -> Result<(), String> {
    if Path::new("/proc/self/ns/time").exists() {
        Ok(())
    } else {
        Err("no time namespaces (/proc/self/ns/time missing)".into())
    }
}

pub fn require_root() -> Result<(), String> {
    if h().is_root {
        Ok(())
    } else {
        Err("the test process is not root".into())
    }
}

/// A command running `argv` as the capsule user (via setpriv when root),
/// with a clean environment and cwd `/`.
pub fn as_user<S: AsRef<OsStr>>(argv: &[S]) -> Command {
    let hh = h();
    let mut c = if hh.is_root {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", hh.uid))
            .arg(format!("--regid={}", hh.gid))
            // The VM user is a real login user with its groups.
            .arg(if hh.vm { "--init-groups" } else { "--clear-groups" })
            .arg("--");
        c.args(argv);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    c.env_clear().env("PATH", DEFAULT_PATH).current_dir("/");
    c
}

// ---------------------------------------------------------------- scratch

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{tag}-{}-{}-{nanos:x}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A per-test directory under /var/tmp owned by the capsule user (mode
/// 0755), removed on drop.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let path = Path::new(SCRATCH_ROOT).join(unique(tag));
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_user(&path);
        Scratch { path }
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    pub fn s(&self) -> String {
        self.path.display().to_string()
    }

    /// Writes a file owned by the capsule user.
    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, content).unwrap();
        chown_to_user(&p);
        p
    }

    /// Creates a subdirectory owned by the capsule user.
    pub fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_user(&p);
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

pub fn chown_to_user(p: &Path) {
    if h().is_root {
        std::os::unix::fs::chown(p, Some(h().uid), Some(h().gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
    }
}

// ---------------------------------------------------------------- running

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
    /// The delegated scope capsule ran in (cgroup VM only), as a path under
    /// /sys/fs/cgroup.
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
    #[track_caller]
    pub fn assert_cgroups_clean(&self) -> &Self {
        assert!(self.cgroup_leftovers.is_none(), "capsule left cgroup state behind; {}", self.describe());
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

/// The probe's `key=value` lines.
#[derive(Debug, Clone)]
pub struct Kv(pub Vec<(String, String)>);

impl Kv {
    pub fn parse(s: &str) -> Kv {
        Kv(s.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim_start_matches('\r').to_string(), v.trim_end_matches('\r').to_string()))
            .collect())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[track_caller]
    pub fn must(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("probe output lacks `{key}`: {self:?}"))
    }

    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.0.iter().filter(move |(k, _)| k.starts_with(prefix)).map(|(k, v)| (k.as_str(), v.as_str()))
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
        timeout: RUN_TIMEOUT,
        json: false,
        meta: false,
        capsule: h().capsule.clone(),
        as_caller: false,
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
    /// A hook run in the child before exec (of setpriv, which keeps fds,
    /// session and controlling terminal across its own exec of capsule).
    pub fn pre_exec(&mut self, f: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) -> &mut Self {
        self.pre_exec = Some(Box::new(f));
        self
    }
    /// Cgroup VM: starts capsule in the test process's own (root-owned,
    /// not delegated) cgroup instead of a fresh delegated scope.
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
            as_user(&argv)
        };
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
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Cgroup VM: the delegated scope capsule was started in.
    pub fn scope_path(&self) -> Option<&Path> {
        self.scope_path.as_deref()
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
        let cgroup_leftovers = self.scope.as_ref().and_then(|s| s.leftovers());
        let scope = self.scope_path.clone();
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

// ---------------------------------------------------------------- host side

/// Processes (not zombies, not ourselves) with an argv element containing
/// `marker`, as `(pid, argv joined by spaces)`.
pub fn procs_with_marker(marker: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return found };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a.contains(marker)) {
            found.push((pid, args.join(" ").trim().to_string()));
        }
    }
    found
}

/// Kills (SIGKILL) processes carrying `marker`: cleanup after a failure.
pub fn kill_marker(marker: &str) {
    for (pid, _) in procs_with_marker(marker) {
        // SAFETY: kill takes no pointers.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Kills the processes with `marker` when dropped (even on panic).
pub struct MarkerGuard(pub String);

impl Drop for MarkerGuard {
    fn drop(&mut self) {
        kill_marker(&self.0);
    }
}

/// A host process owned by the capsule user: `capsule-probe hold TAG`.
pub struct HostProc {
    pub child: Child,
}

impl HostProc {
    pub fn hold(tag: &str) -> HostProc {
        let child = as_user(&[probe().as_str(), "hold", tag])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn host process");
        // Wait until setpriv exec'd the probe: setpriv's own command line
        // carries the tag too, and while the exec is under way the
        // process's command line reads empty.
        let probe = probe();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !procs_with_marker(tag)
            .iter()
            .any(|(p, cmd)| *p == child.id() as i32 && cmd.split(' ').next() == Some(probe.as_str()))
        {
            assert!(Instant::now() < deadline, "host process did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        HostProc { child }
    }

    /// Still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `readlink /proc/self/ns/<ns>` of the test process.
pub fn host_ns(ns: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{ns}")).map(|p| p.display().to_string()).unwrap_or_default()
}

pub fn host_hostname() -> String {
    let mut u: libc::utsname = unsafe {
        // SAFETY: utsname is plain old data.
        std::mem::zeroed()
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::uname(&mut u) };
    // SAFETY: NUL-terminated after uname.
    unsafe { std::ffi::CStr::from_ptr(u.nodename.as_ptr()) }.to_string_lossy().into_owned()
}

/// Host mount tables: our own and, when readable, PID 1's.
pub fn host_mountinfo() -> String {
    let mine = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let init = std::fs::read_to_string("/proc/1/mountinfo").unwrap_or_default();
    format!("{mine}\n---- /proc/1/mountinfo\n{init}")
}

// ---------------------------------------------------------------- cgroups

pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The VM's delegated cgroup, owned by the VM user; scopes go below it.
pub const CGROUP_DELEGATED: &str = "/sys/fs/cgroup/delegated";
/// The controllers the harness enables for the scopes.
pub const SCOPE_CONTROLLERS: [&str; 4] = ["cpu", "memory", "pids", "cpuset"];

/// Root inside the cgroup v2 VM (`cgroup2-vm --as-root` sets CGROUP2_VM=1).
pub fn in_cgroup_vm() -> bool {
    // SAFETY: getuid cannot fail.
    std::env::var("CGROUP2_VM").map(|v| v == "1").unwrap_or(false) && unsafe { libc::getuid() } == 0
}

pub fn vm_user() -> String {
    std::env::var("CGROUP2_VM_USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "cgvm".into())
}

/// `CAPSULE_TEST_CGROUPS=1`: the cgroup tests must run (fail, not skip).
pub fn cgroups_wanted() -> bool {
    std::env::var("CAPSULE_TEST_CGROUPS").map(|v| v == "1").unwrap_or(false)
}

/// Reports a skipped cgroup test: skips even under `CAPSULE_TEST_STRICT=1`
/// (the host has no delegated cgroup v2 hierarchy), fails under
/// `CAPSULE_TEST_CGROUPS=1`.
pub fn skip_cgroups(test: &str, reason: &str) {
    if cgroups_wanted() {
        panic!("{test}: cgroup v2 delegation missing (CAPSULE_TEST_CGROUPS=1): {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
}

/// `require_cgroups!(test_name)`: returns from the test after
/// [`skip_cgroups`] unless the harness can give capsule delegated cgroup v2
/// scopes with the cpu, memory, pids and cpuset controllers (the VM); also
/// requires user namespaces, then as strictly as [`require!`].
#[macro_export]
macro_rules! require_cgroups {
    ($test:expr) => {
        if let Err(reason) = $crate::common::cgroups_available() {
            $crate::common::skip_cgroups($test, &reason);
            return;
        }
        $crate::require!($test, $crate::common::userns_available());
    };
}

/// Whether the cgroup tests can run: in the VM, with the controllers
/// enabled for the scopes (done once per test binary).
pub fn cgroups_available() -> Result<(), String> {
    if !h().vm {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let controllers = std::fs::read_to_string(Path::new(CGROUP_ROOT).join("cgroup.controllers"))
            .map(|c| format!("`{}`", c.trim()))
            .unwrap_or_else(|_| "none (no cgroup2 mounted there: a hybrid or v1 layout)".into());
        return Err(format!(
            "no delegated cgroup v2 hierarchy to test in (cgroup2 controllers at {CGROUP_ROOT}: {controllers}; \
             own cgroups: {}); the cgroup tests run in the VM: \
             `/work/shared/vm/cgroup2-vm --as-root -- env CAPSULE_TEST_CGROUPS=1 cargo test --offline -p capsule-cli --test cgroups`",
            own.trim().replace('\n', " ")
        ));
    }
    enable_delegated_controllers()
}

/// Once per test binary, as root: enables the scope controllers in the
/// delegated cgroup's `cgroup.subtree_control` (tolerating them being on).
pub fn enable_delegated_controllers() -> Result<(), String> {
    static R: OnceLock<Result<(), String>> = OnceLock::new();
    R.get_or_init(|| {
        let d = Path::new(CGROUP_DELEGATED);
        let read = |f: &str| std::fs::read_to_string(d.join(f)).map_err(|e| format!("{}/{f}: {e}", d.display()));
        let available = read("cgroup.controllers")?;
        let mut missing = Vec::new();
        for c in SCOPE_CONTROLLERS {
            if !available.split_whitespace().any(|x| x == c) {
                missing.push(format!("{c} (not in cgroup.controllers `{}`)", available.trim()));
                continue;
            }
            if read("cgroup.subtree_control")?.split_whitespace().any(|x| x == c) {
                continue;
            }
            if let Err(e) = std::fs::write(d.join("cgroup.subtree_control"), format!("+{c}")) {
                // A concurrent test binary may have won; check again.
                if !read("cgroup.subtree_control")?.split_whitespace().any(|x| x == c) {
                    missing.push(format!("{c} (enabling it: {e})"));
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("controllers unavailable in {}: {}", d.display(), missing.join(", ")))
        }
    })
    .clone()
}

/// A pre-exec hook that moves the calling process into `dir` by writing
/// "0" to its `cgroup.procs`, or into `dir/capsule-leaf` when `dir` cannot
/// take processes (controllers enabled by a capsule instance).
fn join_cgroup_hook(dir: &Path) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let c = |p: PathBuf| CString::new(p.into_os_string().into_encoded_bytes()).unwrap();
    let primary = c(dir.join("cgroup.procs"));
    let fallback = c(dir.join("capsule-leaf").join("cgroup.procs"));
    move || {
        let write0 = |p: &CString| -> std::io::Result<()> {
            // SAFETY: p is a valid C string; open/write/close are
            // async-signal-safe.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                if r == 1 {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        };
        match write0(&primary) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                write0(&fallback)
            }
            Err(e) => Err(e),
        }
    }
}

/// A delegated cgroup `/sys/fs/cgroup/delegated/scope-<unique>` owned by the
/// VM user, like a systemd scope with `Delegate=yes`; removed on drop
/// (forcibly: processes killed, sub-cgroups removed).
pub struct CgScope {
    pub path: PathBuf,
}

impl CgScope {
    pub fn new(tag: &str) -> CgScope {
        enable_delegated_controllers().unwrap_or_else(|e| panic!("cannot prepare cgroup scopes: {e}"));
        let path = Path::new(CGROUP_DELEGATED).join(unique(tag));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        let (uid, gid) = (h().uid, h().gid);
        for p in
            [path.clone(), path.join("cgroup.procs"), path.join("cgroup.threads"), path.join("cgroup.subtree_control")]
        {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
        }
        CgScope { path }
    }

    pub fn s(&self) -> String {
        self.path.display().to_string()
    }

    /// The scope's path as the kernel names it (`/delegated/scope-...`).
    pub fn cgroup_path(&self) -> String {
        format!("/{}", self.path.strip_prefix(CGROUP_ROOT).unwrap().display())
    }

    pub fn name(&self) -> String {
        self.path.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// Sub-cgroups, relative to the scope, parents before children.
    pub fn children(&self) -> Vec<String> {
        let mut all = Vec::new();
        let mut stack = vec![self.path.clone()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            let mut subs: Vec<PathBuf> =
                rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()).collect();
            subs.sort();
            for p in subs.into_iter().rev() {
                all.push(p.strip_prefix(&self.path).unwrap().display().to_string());
                stack.push(p);
            }
        }
        all
    }

    /// `(relative cgroup, pid)` of every process in the scope's tree
    /// (relative "" for the scope itself).
    pub fn procs(&self) -> Vec<(String, i32)> {
        let mut v = Vec::new();
        for rel in std::iter::once(String::new()).chain(self.children()) {
            let f =
                if rel.is_empty() { self.path.join("cgroup.procs") } else { self.path.join(&rel).join("cgroup.procs") };
            for l in std::fs::read_to_string(f).unwrap_or_default().lines() {
                if let Ok(pid) = l.trim().parse() {
                    v.push((rel.clone(), pid));
                }
            }
        }
        v
    }

    /// The scope's own `cgroup.subtree_control`.
    pub fn subtree_control(&self) -> String {
        std::fs::read_to_string(self.path.join("cgroup.subtree_control")).unwrap_or_default().trim().to_string()
    }

    /// A description of what is in the scope besides nothing, or `None`.
    pub fn leftovers(&self) -> Option<String> {
        let mut parts = Vec::new();
        let children = self.children();
        if !children.is_empty() {
            parts.push(format!("sub-cgroups {children:?}"));
        }
        let procs = self.procs();
        if !procs.is_empty() {
            let described: Vec<String> = procs
                .iter()
                .map(|(rel, pid)| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
                        .unwrap_or_default();
                    format!("{pid} in `{rel}` ({cmd})")
                })
                .collect();
            parts.push(format!("processes {described:?}"));
        }
        let sc = self.subtree_control();
        if !sc.is_empty() {
            parts.push(format!("controllers still enabled in cgroup.subtree_control: `{sc}`"));
        }
        if parts.is_empty() {
            None
        } else {
            Some(parts.join("; "))
        }
    }

    /// Kills everything in the scope and removes its sub-cgroups.
    pub fn clear(&self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.procs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for rel in self.children().into_iter().rev() {
            let p = self.path.join(&rel);
            if let Err(e) = std::fs::remove_dir(&p) {
                eprintln!("harness: rmdir {}: {e}", p.display());
            }
        }
    }
}

impl Drop for CgScope {
    fn drop(&mut self) {
        if self.leftovers().is_some() {
            self.clear();
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("harness: rmdir {}: {e}; {:?}", self.path.display(), self.leftovers());
        }
    }
}

/// The cgroup (path as the test process sees it, e.g.
/// `/delegated/scope-x/capsule.1.2/run.0/prog`) of a process.
pub fn cgroup_of(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

// ---------------------------------------------------------------- processes of the test user

/// One process as `/proc/<pid>/stat` and `status` describe it.
#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    /// `R`, `S`, `Z`, ...
    pub state: char,
    /// Real uid.
    pub uid: u32,
    /// argv joined by spaces (`[comm]` when it has none, e.g. a zombie).
    pub cmd: String,
}

pub fn proc_info(pid: i32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: the fields follow the last ')'.
    let close = stat.rfind(')')?;
    let comm = stat.get(stat.find('(')? + 1..close).unwrap_or("").to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmd = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ");
    let cmd = if cmd.trim().is_empty() { format!("[{comm}]") } else { cmd.trim().to_string() };
    Some(ProcInfo { pid, ppid, state, uid, cmd })
}

pub fn all_procs() -> Vec<ProcInfo> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten().filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok()).filter_map(proc_info).collect()
}

/// Every live process (zombies are dead: the init of some test machines
/// never reaps the orphans it inherits) whose real uid is the capsule
/// user's. Meaningful only as root (otherwise the capsule user is the
/// test's own user).
pub fn user_procs() -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    all_procs().into_iter().filter(|p| p.uid == h().uid && p.pid != me && p.state != 'Z').collect()
}

/// Processes of the capsule user that are not in `baseline` (pids).
pub fn new_user_procs(baseline: &[i32]) -> Vec<ProcInfo> {
    user_procs().into_iter().filter(|p| !baseline.contains(&p.pid)).collect()
}

/// The processes of the capsule user before a test that checks for orphans:
/// waits up to 5 s for earlier tests' processes to go, then returns what
/// remains (reported, and excluded from the check).
pub fn user_procs_baseline(test: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = user_procs();
        if v.is_empty() {
            return Vec::new();
        }
        if Instant::now() > deadline {
            eprintln!("{test}: processes of uid {} before the test (ignored): {v:?}", h().uid);
            return v.iter().map(|p| p.pid).collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no process of the capsule user outside `baseline` is left;
/// `Err(what is left)` after `limit`, else `Ok(how long it took)`.
pub fn wait_no_user_procs(baseline: &[i32], since: Instant, limit: Duration) -> Result<Duration, Vec<ProcInfo>> {
    loop {
        let left = new_user_procs(baseline);
        if left.is_empty() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > limit {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until a process with `marker` in its argv exists; panics after `t`.
pub fn wait_marker(marker: &str, t: Duration) -> Vec<(i32, String)> {
    let deadline = Instant::now() + t;
    loop {
        let v = procs_with_marker(marker);
        if !v.is_empty() {
            return v;
        }
        assert!(Instant::now() < deadline, "no process with marker {marker} appeared within {t:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until no process carries `marker`: `Ok(time since `since`)`, or
/// `Err(the survivors)` once `limit` has passed since `since`.
pub fn wait_marker_gone(marker: &str, since: Instant, limit: Duration) -> Result<Duration, Vec<(i32, String)>> {
    loop {
        let left = procs_with_marker(marker);
        if left.is_empty() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > limit {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Tests that check that *no* process of the capsule user is left take the
/// write side; every other test of the same test binary takes the read side,
/// so that its processes never count as someone else's orphans.
static USER_PROCS_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub fn procs_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    USER_PROCS_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

pub fn procs_exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    USER_PROCS_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

/// Figures about one process that must not grow over many runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStats {
    pub fds: usize,
    pub rss_kib: u64,
    /// The anonymous part of RSS: the process's own memory, whatever the
    /// size of its binary's text (a test build's is several MiB).
    pub anon_kib: u64,
    pub hwm_kib: u64,
    pub threads: u64,
    pub mounts: usize,
    /// Child processes (any state), zombies among them.
    pub children: usize,
    pub zombies: usize,
}

pub fn proc_stats(pid: i32) -> ProcStats {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e} (the process is gone)"));
    let field = |k: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/status lacks {k}"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map(|m| m.lines().count())
        .unwrap_or_else(|e| panic!("/proc/{pid}/mountinfo: {e}"));
    let kids: Vec<ProcInfo> = all_procs().into_iter().filter(|p| p.ppid == pid).collect();
    ProcStats {
        fds,
        rss_kib: field("VmRSS:"),
        anon_kib: field("RssAnon:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
        mounts,
        children: kids.len(),
        zombies: kids.iter().filter(|p| p.state == 'Z').count(),
    }
}

/// The process's `comm`.
pub fn proc_comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

// ---------------------------------------------------------------- the library test helper

/// `capsule-libtest`, where the capsule user can run it (copied next to
/// the staged binaries as root, keyed by its size and mtime).
pub fn libtest() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_BIN_EXE_capsule-libtest"));
        if !h().is_root {
            return src;
        }
        let m = std::fs::metadata(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        let mut hasher = DefaultHasher::new();
        src.hash(&mut hasher);
        m.len().hash(&mut hasher);
        m.mtime().hash(&mut hasher);
        m.mtime_nsec().hash(&mut hasher);
        let key = format!("libtest-{:016x}", hasher.finish());
        let dir = Path::new(BIN_ROOT).join(&key);
        let dst = dir.join("capsule-libtest");
        if dst.exists() {
            return dst;
        }
        let tmp = Path::new(BIN_ROOT).join(format!(".{key}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = tmp.join("capsule-libtest");
        std::fs::copy(&src, &t).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o755)).unwrap();
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        dst
    })
    .clone()
}

/// `capsule-libtest ARGS...` as the capsule user, with `CAPSULE_BIN` set to
/// the staged capsule (in the cgroup VM, in a fresh delegated scope).
pub fn libtest_cmd<S: AsRef<OsStr>>(args: &[S]) -> Cmd {
    let mut c = capsule(args);
    c.binary(libtest());
    c.env("CAPSULE_BIN", &h().capsule.display().to_string());
    c
}

/// A pseudo-terminal pair, raw mode.
pub struct Pty {
    pub master: std::os::fd::OwnedFd,
    pub slave: std::os::fd::OwnedFd,
}

/// A pty pair in the modes a fresh terminal has, and the slave's path.
pub fn open_pty_cooked() -> (Pty, String) {
    // SAFETY: standard posix_openpt sequence; every fd is owned below.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0, "open pty slave");
        let name = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        (Pty { master: std::os::fd::FromRawFd::from_raw_fd(m), slave: std::os::fd::FromRawFd::from_raw_fd(s) }, name)
    }
}

/// A pty pair whose slave is in raw mode: every byte counts in the input
/// queue (no line editing, no output processing).
pub fn open_pty() -> Pty {
    let (pty, _) = open_pty_cooked();
    let s = std::os::fd::AsRawFd::as_raw_fd(&pty.slave);
    // SAFETY: t is a termios the kernel fills in; s is open.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(s, &mut t), 0);
        libc::cfmakeraw(&mut t);
        assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
    }
    pty
}

/// Bytes waiting in the tty's input queue (what a shell would read next).
pub fn input_queue(fd: i32) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD");
    n
}
