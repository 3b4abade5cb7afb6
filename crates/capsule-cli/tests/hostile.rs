//! The hostile-program suite: one C program per attack
//! (`tests/hostile/*.c`, built once per test binary with `gcc -O2 -static`
//! into a world-readable directory), each run in the sandbox under the
//! seccomp policies `default` and `strict` (one `#[test]` per policy:
//! `<attack>::default`, `<attack>::strict`).
//!
//! The programs print `CONTAINED <what> <ERRNO>`, `ESCAPED <what> ...`,
//! `OPENED <what>` (attack surface reached: a syscall the default policy
//! must refuse succeeded), `INFO ...` and `DONE`. Every test asserts:
//!
//! * no `ESCAPED` line, under any policy;
//! * under `default`: the run ends normally (`DONE`, the program's exit
//!   code), the calls the policy refuses fail with `EPERM`/`ENOSYS` (never
//!   `OPENED`), the rest fail at the kernel with the errnos named per test;
//! * under `strict`: either the run was killed as `forbidden-syscall` with
//!   a named `syscall` and its `syscall_args` (for the calls no judged
//!   solution makes, it must be), or it ended normally with everything
//!   contained;
//! * what the host can check: its files, processes, keys, terminal input.
//!
//! The fork and memory bombs need cgroups: they are `cgroup_*`, skipped on
//! the host (`scripts/test.sh` leaves them out there) and run in the VM
//! stage like `tests/cgroups.rs`.

use capsule_testkit as common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------- building the programs

const PROGRAMS: &[&str] = &[
    "ptrace", "signals", "remount", "shocker", "procsys", "mknod", "euid", "core", "keyring", "iouring", "perf", "bpf",
    "uffd", "tiocsti", "chroot", "fds", "args", "sigflood", "forkbomb", "membomb", "race", "fusehang", "guards",
    "fusehost", "nsbomb",
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

/// The directory holding the compiled programs (world-readable), or why
/// there is none (no gcc, no static libc).
fn bins() -> Result<&'static Path, String> {
    static B: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    B.get_or_init(|| {
        let mut hasher = DefaultHasher::new();
        let mut names: Vec<_> = std::fs::read_dir(src_dir())
            .map_err(|e| format!("{}: {e}", src_dir().display()))?
            .flatten()
            .map(|e| e.path())
            .collect();
        names.sort();
        for p in &names {
            p.hash(&mut hasher);
            std::fs::read(p).unwrap_or_default().hash(&mut hasher);
        }
        let key = format!("hostile-{:016x}", hasher.finish());
        let root = if h().is_root { PathBuf::from(BIN_ROOT) } else { PathBuf::from(env!("CARGO_TARGET_TMPDIR")) };
        let dir = root.join(&key);
        if PROGRAMS.iter().all(|p| dir.join(p).exists()) {
            return Ok(dir);
        }
        let tmp = root.join(format!(".{key}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("mkdir {}: {e}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        for p in PROGRAMS {
            let out = Command::new("gcc")
                .args(["-O2", "-static", "-Wall", "-Werror", "-o"])
                .arg(tmp.join(p))
                .arg(src_dir().join(format!("{p}.c")))
                .output()
                .map_err(|e| format!("cannot run gcc: {e} (apt-get install gcc libc6-dev)"))?;
            if !out.status.success() {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(format!("gcc -static {p}.c failed: {}", String::from_utf8_lossy(&out.stderr)));
            }
            std::fs::set_permissions(tmp.join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(dir)
    })
    .as_deref()
    .map_err(Clone::clone)
}

fn bin(name: &str) -> String {
    bins().unwrap().join(name).display().to_string()
}

/// Skips (or, strictly, fails) without user namespaces or the programs.
macro_rules! require_hostile {
    ($test:expr) => {
        require!($test, userns_available());
        require!($test, bins().map(|_| ()));
    };
}

/// `mod name { #[test] fn default() ; #[test] fn strict() }` from a
/// function taking the policy.
macro_rules! both_policies {
    ($name:ident) => {
        mod $name {
            #[test]
            fn default() {
                super::$name("default")
            }
            #[test]
            fn strict() {
                super::$name("strict")
            }
        }
    };
}

// ---------------------------------------------------------------- what the programs say

#[derive(Debug, Default)]
struct Report {
    /// `(what, ERRNO)`.
    contained: Vec<(String, String)>,
    escaped: Vec<String>,
    opened: Vec<String>,
    done: bool,
}

fn report(stdout: &str) -> Report {
    let mut r = Report::default();
    for l in stdout.lines() {
        let mut w = l.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some("CONTAINED"), Some(what), Some(e)) => r.contained.push((what.into(), e.trim().into())),
            (Some("ESCAPED"), Some(what), rest) => r.escaped.push(format!("{what} {}", rest.unwrap_or(""))),
            (Some("OPENED"), Some(what), _) => r.opened.push(what.into()),
            (Some("DONE"), None, None) => r.done = true,
            _ => {}
        }
    }
    r
}

/// What a test expects of a run.
struct Expect {
    /// Under `strict`: `Some(names)`: the run must be killed as
    /// forbidden-syscall on one of these; `None`: it may be (any named
    /// call), or else must end normally with everything contained.
    strict_kill: Option<&'static [&'static str]>,
    /// Under `default`: `(prefix, errnos)`: every attempt whose name starts
    /// with the prefix must be CONTAINED with one of the errnos (empty: any),
    /// and there must be at least one.
    default_errnos: &'static [(&'static str, &'static [&'static str])],
    /// The program's exit code when it ends normally.
    exit_code: i32,
}

const FILTERED: &[&str] = &["EPERM", "ENOSYS"];

fn with_policy(policy: &str) -> Vec<String> {
    vec!["--seccomp".into(), policy.into()]
}

/// `capsule run -q --seccomp POLICY OPTS -- PROGRAM ARGS` with `--json`.
fn attack_cmd(policy: &str, opts: &[&str], program: &str, args: &[&str]) -> Cmd {
    let mut c = capsule(&["run", "-q"]);
    c.args(&with_policy(policy)).args(opts).arg("--").arg(program).args(args).json();
    c
}

/// Fails with a clear message when capsule refused the policy itself (the
/// policies not merged yet), rather than as a containment failure.
#[track_caller]
fn assert_policy_available(out: &Out, policy: &str) {
    if out.code == Some(125) && out.stderr.contains("seccomp policy") {
        panic!(
            "seccomp policy `{policy}` is not available in this capsule (policies not merged yet?): {}",
            out.stderr.trim()
        );
    }
}

/// The common assertions on a CLI run (see the module comment).
#[track_caller]
fn check(out: &Out, policy: &str, e: &Expect) -> Report {
    assert_policy_available(out, policy);
    let j = out.json().clone();
    check_result(&j, &out.stdout, policy, e, &out.describe())
}

/// The common assertions on a result object and the program's stdout.
#[track_caller]
fn check_result(j: &Value, stdout: &str, policy: &str, e: &Expect, describe: &str) -> Report {
    let r = report(stdout);
    assert!(r.escaped.is_empty(), "ESCAPED under --seccomp {policy}: {:?}; {describe}", r.escaped);
    let status = j["status"].as_str().unwrap_or("");
    eprintln!(
        "--seccomp {policy}: status {status}, syscall {}, {} contained, {} opened",
        j["syscall"],
        r.contained.len(),
        r.opened.len()
    );
    if status == "forbidden-syscall" {
        assert_eq!(policy, "strict", "killed as forbidden-syscall under --seccomp {policy}; {describe}");
        let name = j["syscall"].as_str().unwrap_or_else(|| panic!("forbidden-syscall without `syscall`; {describe}"));
        assert!(!name.is_empty(), "empty syscall name; {describe}");
        let args = j["syscall_args"].as_array().unwrap_or_else(|| panic!("no syscall_args; {describe}"));
        assert_eq!(args.len(), 6, "syscall_args must hold six arguments; {describe}");
        if let Some(names) = e.strict_kill {
            assert!(names.contains(&name), "killed on `{name}`, expected one of {names:?}; {describe}");
        }
        assert_eq!(j["exit_code"], Value::Null, "{describe}");
        return r;
    }
    if policy == "strict" {
        if let Some(names) = e.strict_kill {
            panic!("--seccomp strict let the program make {names:?} (status {status}); {describe}");
        }
    }
    assert_eq!(status, "exited", "the run did not end normally; {describe}");
    assert_eq!(j["exit_code"], e.exit_code, "{describe}");
    assert!(r.done, "the program did not get to its end; {describe}");
    if policy == "default" {
        for (prefix, errnos) in e.default_errnos {
            let hits: Vec<_> = r.contained.iter().filter(|(w, _)| w.starts_with(prefix)).collect();
            let opened: Vec<_> = r.opened.iter().filter(|w| w.starts_with(prefix)).collect();
            assert!(opened.is_empty(), "--seccomp default let {opened:?} succeed (expected {errnos:?}); {describe}");
            assert!(!hits.is_empty(), "no attempt `{prefix}*` reported; {describe}");
            if !errnos.is_empty() {
                for (w, en) in hits {
                    assert!(
                        errnos.contains(&en.as_str()),
                        "`{w}` failed with {en}, expected one of {errnos:?}; {describe}"
                    );
                }
            }
        }
    }
    r
}

/// The host pid of the program carrying `marker` in its argv (not capsule,
/// whose argv carries it too).
fn program_pid(program: &str, marker: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((p, _)) = procs_with_marker(marker).into_iter().find(|(_, c)| c.starts_with(program)) {
            return p;
        }
        assert!(Instant::now() < deadline, "no process `{program} ... {marker}` appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn errno_of<'a>(r: &'a Report, what: &str) -> Option<&'a str> {
    r.contained.iter().find(|(w, _)| w == what).map(|(_, e)| e.as_str())
}

// ---------------------------------------------------------------- a small `capsule serve` client

struct Serve {
    run: Running,
    stdin: Option<ChildStdin>,
    pending: Vec<Value>,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let mut c = capsule(&["serve"]);
        c.args(args).stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(300));
        let mut run = c.spawn();
        let stdin = run.child.stdin.take();
        Serve { run, stdin, pending: Vec::new() }
    }

    fn pid(&self) -> i32 {
        self.run.pid()
    }

    fn send(&mut self, v: &Value) {
        let mut s = v.to_string();
        s.push('\n');
        let w = self.stdin.as_mut().expect("stdin closed");
        w.write_all(s.as_bytes()).and_then(|_| w.flush()).unwrap_or_else(|e| panic!("write to capsule serve: {e}"));
    }

    fn request(&mut self, id: Value, spec: Value) {
        self.send(&json!({"id": id, "spec": spec}));
    }

    /// The response to `id` (others kept), panicking after `t`.
    fn response(&mut self, id: &Value, t: Duration) -> Value {
        if let Some(i) = self.pending.iter().position(|v| &v["id"] == id) {
            return self.pending.remove(i);
        }
        let deadline = Instant::now() + t;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .run
                .next_line(left)
                .unwrap_or_else(|| panic!("no response to {id} within {t:?}; lines: {:?}", self.run.seen()));
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
            if &v["id"] == id {
                return v;
            }
            self.pending.push(v);
        }
    }

    fn result(&mut self, id: &Value) -> Value {
        let v = self.response(id, Duration::from_secs(60));
        match v.get("result") {
            Some(r) if r.is_object() => r.clone(),
            _ => panic!("expected a result for {id}, got {v}"),
        }
    }

    /// A `/bin/true` run answers: the server still serves.
    fn still_serves(&mut self, id: &str) {
        self.request(json!(id), json!({"argv": ["/bin/true"]}));
        let r = self.result(&json!(id));
        assert_eq!(r["status"], "exited", "the server's next run: {r}");
        assert_eq!(r["exit_code"], 0, "the server's next run: {r}");
    }

    fn finish(mut self) -> Out {
        self.stdin = None;
        self.run.wait()
    }
}

fn spec(policy: &str, argv: &[&str]) -> Value {
    json!({"argv": argv, "seccomp": policy, "stdout": {"capture": "256K"}, "stderr": {"capture": "16K"}})
}

fn captured(r: &Value, stream: &str) -> String {
    r[stream]["text"].as_str().unwrap_or("").to_string()
}

/// A spec the server refused because of the policy: the policies are not
/// merged yet.
#[track_caller]
fn assert_serve_policy_available(v: &Value, policy: &str) {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        if e.contains("seccomp") {
            panic!("seccomp policy `{policy}` is not available in this capsule (policies not merged yet?): {e}");
        }
        panic!("the run could not happen: {v}");
    }
}

// ---------------------------------------------------------------- 1. ptrace

fn ptrace_pid1(policy: &str) {
    require_hostile!("ptrace_pid1");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("ptrace"), &[]).run();
    let r = check(
        &out,
        policy,
        &Expect { strict_kill: Some(&["ptrace"]), default_errnos: &[("ptrace-", &["EPERM", "ESRCH"])], exit_code: 0 },
    );
    if policy == "default" {
        assert_eq!(errno_of(&r, "ptrace-attach-pid1"), Some("EPERM"), "{}", out.describe());
        assert_eq!(errno_of(&r, "ptrace-seize-pid1"), Some("EPERM"), "{}", out.describe());
    }
}
both_policies!(ptrace_pid1);

/// Another run (and the supervisor, and that run's PID 1) seen from a run:
/// invisible (ESRCH), never attachable. Two CLI runs, then two runs of one
/// `capsule serve --parallel 2`.
fn ptrace_other_runs(policy: &str) {
    require_hostile!("ptrace_other_runs");
    let _l = procs_shared();
    let e = Expect {
        strict_kill: Some(&["ptrace"]),
        default_errnos: &[("kill0-host-", &["ESRCH"]), ("ptrace-attach-host-", &["ESRCH"])],
        exit_code: 0,
    };
    // Two CLI runs.
    let marker = unique("hostile-hold");
    let _g = MarkerGuard(marker.clone());
    let mut a = capsule(&["run", "-q"]);
    a.args(&["--", &bin("ptrace"), "hold", &marker]);
    let mut a = a.spawn();
    a.wait_line("READY", Duration::from_secs(30));
    let held = program_pid(&bin("ptrace"), &marker);
    let a_pid1 = proc_info(held).unwrap().ppid;
    let targets = [format!("{held}:{marker}"), format!("{a_pid1}:capsule"), format!("{}:capsule", a.pid())];
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let out = attack_cmd(policy, &[], &bin("ptrace"), &targets).run();
    check(&out, policy, &e);
    assert!(a.alive(), "the other run ended");
    drop(a);
    // Through one server.
    let mut s = Serve::start(&["--parallel", "2"]);
    s.still_serves("warm-up");
    let marker2 = unique("hostile-hold");
    let _g2 = MarkerGuard(marker2.clone());
    s.request(json!("a"), json!({"argv": [bin("ptrace"), "hold", marker2], "seccomp": "default"}));
    let held = program_pid(&bin("ptrace"), &marker2);
    let a_pid1 = proc_info(held).unwrap().ppid;
    let targets = [format!("{held}:{marker2}"), format!("{a_pid1}:capsule"), format!("{}:serve", s.pid())];
    let mut argv = vec![bin("ptrace")];
    argv.extend(targets.iter().cloned());
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    s.request(json!("b"), spec(policy, &argv));
    let v = s.response(&json!("b"), Duration::from_secs(60));
    assert_serve_policy_available(&v, policy);
    let rb = v["result"].clone();
    check_result(&rb, &captured(&rb, "stdout"), policy, &e, &rb.to_string());
    s.send(&json!({"id": "k", "kill": "a"}));
    let ra = s.result(&json!("a"));
    assert_eq!(ra["status"], "killed", "the held run was not running until killed: {ra}");
    s.still_serves("after");
    s.finish().assert_code(0);
}
both_policies!(ptrace_other_runs);

// ---------------------------------------------------------------- 2. signals

/// Signals and pidfds at PID 1, the parent, every visible process, host
/// pids (a process of the same user, the test, the server) and -1, and
/// new resource limits for PID 1 (which `default` refuses with EPERM: PID
/// 1 has the program's uid, all the kernel asks): the run still ends with
/// the program's own exit code (7), the host process lives, and a server
/// keeps serving.
fn signals_to_pid1_and_supervisor(policy: &str) {
    require_hostile!("signals_to_pid1_and_supervisor");
    let _l = procs_shared();
    let e = Expect {
        strict_kill: None,
        default_errnos: &[("kill-host-", &["ESRCH"]), ("pidfd-host-", &["ESRCH"]), ("prlimit-1-", &["EPERM"])],
        exit_code: 7,
    };
    // In a container the pids start at 1 (the test is often its PID 1): a
    // host pid the run's own PID namespace also has names a process of the
    // run there, not the host's one. Host processes start past them.
    pids_past(RUN_PIDS);
    let tag = unique("hostile-victim");
    let mut victim = HostProc::hold(&tag);
    let vpid = victim.child.id().to_string();
    let mut hosts = vec![vpid.clone()];
    if std::process::id() > RUN_PIDS {
        hosts.push(std::process::id().to_string());
    }
    let argv: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let out = attack_cmd(policy, &[], &bin("signals"), &argv).run();
    check(&out, policy, &e);
    assert!(victim.alive(), "a host process of the same user was killed from the sandbox");
    let mut s = Serve::start(&["--parallel", "2"]);
    s.still_serves("warm-up");
    let spid = s.pid().to_string();
    for i in 0..3 {
        let id = json!(format!("sig-{i}"));
        let sig = bin("signals");
        let argv: Vec<&str> = [sig.as_str(), spid.as_str()].into_iter().chain(argv.iter().copied()).collect();
        s.request(id.clone(), spec(policy, &argv));
        let v = s.response(&id, Duration::from_secs(60));
        assert_serve_policy_available(&v, policy);
        let r = v["result"].clone();
        check_result(&r, &captured(&r, "stdout"), policy, &e, &r.to_string());
        s.still_serves(&format!("after-{i}"));
    }
    assert!(victim.alive(), "a host process of the same user was killed from the sandbox");
    s.finish().assert_code(0);
}
both_policies!(signals_to_pid1_and_supervisor);

/// More pids than a run of these tests has in its own PID namespace.
const RUN_PIDS: u32 = 64;

/// Starts short processes until the pids given out are past `n` (they are
/// on a host; in a container they start at 1).
fn pids_past(n: u32) {
    for _ in 0..=n {
        let mut c = Command::new("/bin/true").spawn().expect("spawn /bin/true");
        let _ = c.wait();
        if c.id() > n {
            return;
        }
    }
}

// ---------------------------------------------------------------- 3. remount

/// In a nested user+mount namespace: remount the read-only bind and the
/// root read-write, bind a copy and remount that, unmount the bind, unmount
/// what covers host paths (`/tmp`, `/run`, a `--hide`): all refused, and
/// writing through the bind still fails.
fn remount_read_only(policy: &str) {
    require_hostile!("remount_read_only");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-remount");
    let ro = dir.mkdir("ro");
    dir.write("ro/file", b"read-only\n");
    let hidden = dir.mkdir("hidden");
    dir.write("hidden/under-hide", b"hidden\n");
    // Host files under what the sandbox covers with its own mounts.
    let tmp_marker = unique("hostile-tmp-marker");
    let tmp_path = Path::new("/tmp").join(&tmp_marker);
    std::fs::write(&tmp_path, b"host /tmp\n").unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(tmp_path);
    let run_entry = std::fs::read_dir("/run")
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned());
    let ro_s = ro.display().to_string();
    let hidden_s = hidden.display().to_string();
    let mut args = vec!["/mnt".to_string(), format!("/tmp:{tmp_marker}"), format!("{hidden_s}:under-hide")];
    if let Some(e) = &run_entry {
        args.push(format!("/run:{e}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = attack_cmd(policy, &["--ro-bind", &ro_s, "/mnt", "--hide", &hidden_s], &bin("remount"), &args).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["unshare", "openat", "open", "creat", "mount", "umount2", "mkdir", "mkdirat"]),
            default_errnos: &[
                ("remount-", &["EPERM"]),
                ("umount-", &["EINVAL", "EPERM"]),
                ("write-ro-bind-", &["EROFS"]),
                ("reveal-", &["ENOENT"]),
            ],
            exit_code: 0,
        },
    );
    assert!(!ro.join("written-by-sandbox").exists(), "the sandbox wrote through a read-only bind");
}
both_policies!(remount_read_only);

// ---------------------------------------------------------------- 4. shocker

/// `FS_IOC_GETVERSION`: an inode's generation (root reads it on the host; a
/// handle needs it), or 0.
fn inode_generation(p: &Path) -> u32 {
    let f = match std::fs::File::open(p) {
        Ok(f) => f,
        Err(_) => return 0,
    };
    let mut g: libc::c_long = 0;
    // SAFETY: FS_IOC_GETVERSION (_IOR('v', 1, long)) writes one long.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), 0x80087601u64 as _, &mut g) };
    if r == 0 {
        g as u32
    } else {
        0
    }
}

/// open_by_handle_at with the real handle of a file in a read-only bind,
/// then forged handles of the filesystem's root and of a secret file outside
/// the bind (with its real generation: a brute force that succeeded), also
/// from a nested user namespace. Under default name_to_handle_at and
/// open_by_handle_at are refused by the policy.
fn shocker_open_by_handle(policy: &str) {
    require_hostile!("shocker_open_by_handle");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-shocker");
    dir.mkdir("inner");
    dir.write("inner/file", b"inside\n");
    let secret_text = unique("SHOCKER-SECRET");
    let secret = dir.write("secret", secret_text.as_bytes());
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&secret).unwrap().ino().to_string();
    let gen = inode_generation(&secret).to_string();
    let inner = dir.join("inner").display().to_string();
    let out =
        attack_cmd(policy, &["--ro-bind", &inner, "/mnt"], &bin("shocker"), &["/mnt/file", &ino, &gen, &secret_text])
            .run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["name_to_handle_at", "open_by_handle_at"]),
            default_errnos: &[("name_to_handle_at", FILTERED), ("open_by_handle_at", FILTERED)],
            exit_code: 0,
        },
    );
    assert!(!out.stdout.contains(&secret_text), "the secret leaked; {}", out.describe());
}
both_policies!(shocker_open_by_handle);

// ---------------------------------------------------------------- 5. /proc/sys

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Writes to /proc/sys and /proc/sysrq-trigger (also as uid 0 inside and
/// from a nested user namespace) fail; the host's values are unchanged.
fn proc_sys_writes(policy: &str) {
    require_hostile!("proc_sys_writes");
    let _l = procs_shared();
    let files = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"];
    let before: Vec<String> = files.iter().map(|f| read_trim(f)).collect();
    for opts in [&[][..], &["--root"][..]] {
        let out = attack_cmd(policy, opts, &bin("procsys"), &[]).run();
        check(
            &out,
            policy,
            &Expect {
                strict_kill: Some(&["openat", "open", "write", "unshare"]),
                default_errnos: &[("write-", &["EACCES", "EPERM", "EROFS", "ENOENT", "EINVAL"])],
                exit_code: 0,
            },
        );
    }
    let after: Vec<String> = files.iter().map(|f| read_trim(f)).collect();
    assert_eq!(before, after, "host sysctls changed");
}
both_policies!(proc_sys_writes);

// ---------------------------------------------------------------- 6. mknod

/// mknod of /dev/mem, /dev/kmsg, block devices in /tmp, /dev/shm and a
/// writable bind (also from a nested user namespace, and as uid 0 inside):
/// EPERM; nothing appears on the host.
fn mknod_devices(policy: &str) {
    require_hostile!("mknod_devices");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-mknod");
    let w = dir.mkdir("w").display().to_string();
    for root in [&[][..], &["--root"][..]] {
        let mut opts = vec!["--bind", &w, "/mnt"];
        opts.extend_from_slice(root);
        let out = attack_cmd(policy, &opts, &bin("mknod"), &["/tmp", "/dev/shm", "/mnt"]).run();
        check(
            &out,
            policy,
            &Expect {
                strict_kill: Some(&["mknod", "mknodat"]),
                default_errnos: &[("mknod-", &["EPERM"])],
                exit_code: 0,
            },
        );
        let left: Vec<_> = std::fs::read_dir(&w).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "device nodes created on the host: {left:?}");
    }
}
both_policies!(mknod_devices);

// ---------------------------------------------------------------- 7. setuid

/// A setuid-root copy of `euid` (made by root in a world-readable
/// directory; checked to work on the host first): inside, its euid stays
/// the caller's (no_new_privs, nosuid).
fn setuid_binary(policy: &str) {
    require_hostile!("setuid_binary");
    require!("setuid_binary", require_root());
    let _l = procs_shared();
    let dir = Path::new(BIN_ROOT).join(unique("hostile-suid"));
    std::fs::create_dir(&dir).unwrap();
    struct RmDir(PathBuf);
    impl Drop for RmDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = RmDir(dir.clone());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let suid = dir.join("euid");
    std::fs::copy(bin("euid"), &suid).unwrap();
    std::os::unix::fs::chown(&suid, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let suid_s = suid.display().to_string();
    // Control: on the host, as the capsule user, it does become root.
    let host = as_user(&[&suid_s]).stdin(Stdio::null()).output().unwrap();
    let host_out = String::from_utf8_lossy(&host.stdout).into_owned();
    if !host_out.contains("euid=0 ") {
        skip(
            "setuid_binary",
            &format!("the setuid copy does not become root on the host (nosuid /var/tmp?): {host_out}"),
        );
        return;
    }
    let out = attack_cmd(policy, &[], &suid_s, &[]).run();
    assert_policy_available(&out, policy);
    let want = format!("IDS uid={} euid={} ", h().uid, h().uid);
    assert!(out.stdout.contains(&want), "setuid bit honoured inside (expected `{want}`); {}", out.describe());
    check(
        &out,
        policy,
        &Expect { strict_kill: None, default_errnos: &[("setuid-0", &["EPERM", "EINVAL"])], exit_code: 0 },
    );
}
both_policies!(setuid_binary);

// ---------------------------------------------------------------- 8. core dumps

/// Lift RLIMIT_CORE, become dumpable, chdir into a writable bind, crash:
/// the result says SIGSEGV, and no core file appears on the host.
fn core_dump(policy: &str) {
    require_hostile!("core_dump");
    let _l = procs_shared();
    let pattern = read_trim("/proc/sys/kernel/core_pattern");
    let dir = Scratch::new("hostile-core");
    let w = dir.mkdir("w");
    let w_s = w.display().to_string();
    // Where a file pattern would put a core on the host.
    let pattern_dir = if pattern.starts_with('/') { Path::new(&pattern).parent().map(Path::to_path_buf) } else { None };
    let list = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    let before_pattern = pattern_dir.as_deref().map(list).unwrap_or_default();
    let before_root = list(Path::new("/"));
    let out = attack_cmd(policy, &["--bind", &w_s, "/mnt", "--chdir", "/mnt"], &bin("core"), &["/mnt"]).run();
    assert_policy_available(&out, policy);
    let j = out.json();
    let r = report(&out.stdout);
    assert!(r.escaped.is_empty(), "ESCAPED: {:?}; {}", r.escaped, out.describe());
    if j["status"] == "forbidden-syscall" {
        assert_eq!(policy, "strict", "{}", out.describe());
    } else {
        assert_eq!(j["status"], "signaled", "{}", out.describe());
        assert_eq!(j["signal"], "SIGSEGV", "{}", out.describe());
        out.assert_code(128 + 11);
        assert!(out.stdout.contains("CRASHING"), "{}", out.describe());
        if policy == "default" {
            assert_eq!(
                errno_of(&r, "setrlimit-core-unlimited"),
                Some("EPERM"),
                "RLIMIT_CORE could be lifted; {}",
                out.describe()
            );
        }
    }
    let cores: Vec<String> = list(&w);
    assert!(cores.is_empty(), "files appeared in the writable bind (core dump?): {cores:?}; core_pattern {pattern}");
    let new_root: Vec<String> = list(Path::new("/")).into_iter().filter(|f| !before_root.contains(f)).collect();
    assert!(!new_root.iter().any(|f| f.starts_with("core")), "core file in / on the host: {new_root:?}");
    if let Some(d) = &pattern_dir {
        let new: Vec<String> = list(d).into_iter().filter(|f| !before_pattern.contains(f)).collect();
        assert!(!new.iter().any(|f| f.contains("core")), "core file in {}: {new:?}", d.display());
    }
    if pattern.starts_with('|') {
        // A pipe helper runs on the host as root, whatever RLIMIT_CORE says;
        // what it receives cannot be checked from here.
        eprintln!("core_dump: core_pattern is a pipe ({pattern}): only the run's own view was checked");
    }
}
both_policies!(core_dump);

// ---------------------------------------------------------------- 9. keyrings

/// Keys of the capsule user as root sees them: `/proc/key-users` count.
fn key_count(uid: u32) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/key-users").ok()?;
    s.lines().find_map(|l| {
        let (u, rest) = l.split_once(':')?;
        if u.trim().parse::<u32>().ok()? != uid {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// keyctl/add_key/request_key: under default EPERM/ENOSYS; no key of the
/// capsule user stays on the host.
fn keyrings(policy: &str) {
    require_hostile!("keyrings");
    let _l = procs_shared();
    let desc = unique("capsule-hostile-key");
    let before = key_count(h().uid).unwrap_or(0);
    let out = attack_cmd(policy, &[], &bin("keyring"), &[&desc]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["keyctl", "add_key", "request_key"]),
            default_errnos: &[("keyctl", FILTERED), ("add_key", FILTERED), ("request_key", FILTERED)],
            exit_code: 0,
        },
    );
    // Keys in keyrings that died with the run are collected lazily.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = key_count(h().uid).unwrap_or(0);
        if now <= before {
            break;
        }
        assert!(Instant::now() < deadline, "the capsule user has {now} keys after the run, {before} before");
        std::thread::sleep(Duration::from_millis(100));
    }
    let keys = std::fs::read_to_string("/proc/keys").unwrap_or_default();
    assert!(!keys.contains(&desc), "the key is on the host: {keys}");
}
both_policies!(keyrings);

// ---------------------------------------------------------------- 10-13. io_uring, perf, bpf, userfaultfd

fn io_uring(policy: &str) {
    require_hostile!("io_uring");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("iouring"), &[]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["io_uring_setup", "io_uring_enter", "io_uring_register"]),
            default_errnos: &[("io_uring_", FILTERED)],
            exit_code: 0,
        },
    );
}
both_policies!(io_uring);

fn perf_event_open(policy: &str) {
    require_hostile!("perf_event_open");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("perf"), &[]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["perf_event_open"]),
            default_errnos: &[("perf_event_open", FILTERED)],
            exit_code: 0,
        },
    );
}
both_policies!(perf_event_open);

fn bpf(policy: &str) {
    require_hostile!("bpf");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("bpf"), &[]).run();
    check(&out, policy, &Expect { strict_kill: Some(&["bpf"]), default_errnos: &[("bpf-", FILTERED)], exit_code: 0 });
}
both_policies!(bpf);

fn userfaultfd(policy: &str) {
    require_hostile!("userfaultfd");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("uffd"), &[]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["userfaultfd"]),
            default_errnos: &[("userfaultfd", FILTERED), ("open-dev-userfaultfd", &["ENOENT", "EACCES", "EPERM"])],
            exit_code: 0,
        },
    );
}
both_policies!(userfaultfd);

// ---------------------------------------------------------------- a process stuck on its own FUSE mount

/// Aborts, as the test (root), the FUSE connections of the processes named
/// `comm`: a run that failed to end left them stuck in the kernel, which
/// nothing else would ever end. (By name: a process stuck in its exit has
/// no argv any more.) Those of the test's own mount table are left alone:
/// they are the host's (`fuse_abort_spares_host_mounts` has one in a run).
struct UnstickOnDrop(&'static str);

/// The FUSE connections of a mount table (fusectl's numbers).
fn fuse_conns(mountinfo: &str) -> Vec<u64> {
    let conn = |line: &str| {
        let (left, right) = line.split_once(" - ")?;
        let (major, minor) = left.split(' ').nth(2)?.split_once(':')?;
        let (major, minor) = (major.parse::<u64>().ok()?, minor.parse::<u64>().ok()?);
        right.starts_with("fuse").then_some((major << 20) | minor)
    };
    mountinfo.lines().filter_map(conn).collect()
}

impl Drop for UnstickOnDrop {
    fn drop(&mut self) {
        let ours = fuse_conns(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
        let Ok(rd) = std::fs::read_dir("/proc") else { return };
        let pids = rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()));
        for pid in pids {
            if std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != self.0) {
                continue;
            }
            let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else { continue };
            for conn in fuse_conns(&info).into_iter().filter(|c| !ours.contains(c)) {
                let _ = std::fs::write(format!("/sys/fs/fuse/connections/{conn}/abort"), "1");
            }
        }
    }
}

/// tests/hostile/fusehang.c: with /dev/fuse granted, a process of the run
/// is left waiting in the kernel for a FUSE answer that never comes when
/// the run is killed. The run must still end (PID 1 aborts the run's FUSE
/// connections) and leave nothing behind. Under `strict`, its `unshare` is
/// a forbidden call.
fn fuse_stuck_at_exit(policy: &str) {
    require_hostile!("fuse_stuck_at_exit");
    require!(
        "fuse_stuck_at_exit",
        if !Path::new("/dev/fuse").exists() {
            Err("no /dev/fuse".to_string())
        } else if !std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(1) == Some("/sys/fs/fuse/connections") && l.split(' ').nth(2) == Some("fusectl"))
        {
            // (The directory exists whenever fuse is loaded; only the
            // mounted fusectl has the connections' `abort` files.)
            Err("fusectl is not mounted at /sys/fs/fuse/connections (capsule aborts stuck FUSE connections there; systemd mounts it, or: mount -t fusectl fusectl /sys/fs/fuse/connections)".to_string())
        } else {
            Ok(())
        }
    );
    let _l = procs_shared();
    let marker = format!("capsule-fusehang-{}-{policy}", std::process::id());
    let _unstick = UnstickOnDrop("fusehang");
    let opts = ["--dev-bind", "/dev/fuse", "/tmp/fuse", "--no-landlock", "--wall-time", "1s"];
    let started = Instant::now();
    let out =
        attack_cmd(policy, &opts, &bin("fusehang"), &["/tmp/fuse", &marker]).timeout(Duration::from_secs(30)).run();
    if policy == "strict" {
        check(&out, policy, &Expect { strict_kill: Some(&["unshare"]), default_errnos: &[], exit_code: 0 });
        return;
    }
    let j = out.json();
    assert!(out.stdout.contains("INFO fuse=open"), "the program did not get its FUSE file open; {}", out.describe());
    assert_eq!(j["status"], "wall-time-limit", "{}", out.describe());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run took {:?} to end; {}",
        started.elapsed(),
        out.describe()
    );
    // Nothing of the run is left, stuck or not.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !procs_with_marker(&marker).is_empty() {
        assert!(Instant::now() < deadline, "processes of the run are left: {:?}", procs_with_marker(&marker));
        std::thread::sleep(Duration::from_millis(20));
    }
}
both_policies!(fuse_stuck_at_exit);

// ---------------------------------------------------------------- 14. TIOCSTI / TIOCLINUX

/// Makes the pty (stdin) the controlling terminal of a new session: the
/// caller's terminal.
fn ctty_hook() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls between fork and exec.
    unsafe {
        if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// With a pty as stdin and stderr (the caller's controlling terminal) and a
/// pipe as stdout: TIOCSCTTY, TIOCSTI and TIOCLINUX on fds 0-2 all fail
/// (under default with EPERM, the policy's answer even where the kernel
/// would say ENOTTY), and no byte reaches the terminal's input. A control
/// run of the same program on the host, as the same user, shows the check
/// can see an injection.
fn tiocsti_tioclinux(policy: &str) {
    require_hostile!("tiocsti_tioclinux");
    let _l = procs_shared();
    let pty = open_pty();
    let slave = pty.slave.as_raw_fd();
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let legacy = read_trim("/proc/sys/dev/tty/legacy_tiocsti");
    // Control, outside any sandbox.
    if legacy == "1" {
        let ctl = open_pty();
        let mut c = as_user(&[bin("tiocsti")]);
        c.stdin(dup(&ctl.slave)).stdout(Stdio::piped()).stderr(dup(&ctl.slave));
        // SAFETY: ctty_hook only makes async-signal-safe calls.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, ctty_hook);
        }
        let o = c.output().unwrap();
        let q = input_queue(ctl.slave.as_raw_fd());
        assert!(
            q > 0,
            "control: the program injected nothing on the host ({}): the check below would prove nothing",
            String::from_utf8_lossy(&o.stdout)
        );
        drop(ctl.master);
    } else {
        eprintln!("tiocsti_tioclinux: dev.tty.legacy_tiocsti = {legacy:?}: no host control run");
    }
    let mut c = attack_cmd(policy, &[], &bin("tiocsti"), &[]);
    c.stdio(dup(&pty.slave), Stdio::piped(), dup(&pty.slave)).pre_exec(ctty_hook);
    let out = c.run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["ioctl"]),
            default_errnos: &[
                ("ioctl-TIOCSTI-", &["EPERM"]),
                ("ioctl-TIOCLINUX-", &["EPERM"]),
                ("ioctl-TIOCSCTTY", &[]),
            ],
            exit_code: 0,
        },
    );
    let queued = input_queue(slave);
    assert_eq!(queued, 0, "{queued} bytes injected into the caller's terminal input; {}", out.describe());
    drop(pty.master);
}
both_policies!(tiocsti_tioclinux);

// ---------------------------------------------------------------- 15. chroot

/// `--empty-root` with minimal binds: the chroot-and-climb escape (also via
/// an fd kept from before, via /proc/<pid>/root) never reaches a host file
/// outside the binds.
fn chroot_escape(policy: &str) {
    require_hostile!("chroot_escape");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-chroot");
    let marker = dir.write("host-marker", b"host\n");
    assert!(marker.exists());
    let marker_s = marker.display().to_string();
    let b = bins().unwrap().display().to_string();
    let opts = [
        "--empty-root",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        &b,
        "/h",
    ];
    let out = attack_cmd(policy, &opts, "/h/chroot", &[&marker_s]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: None,
            default_errnos: &[("reach-host-marker-", &[]), ("via-", &[]), ("chroot-without-caps", &["EPERM"])],
            exit_code: 0,
        },
    );
}
both_policies!(chroot_escape);

// ---------------------------------------------------------------- 16. fd exhaustion

/// Many concurrent runs through one server, each exhausting its fds in 5
/// processes (1 under strict, with only what strict allows): the server's fd count returns to its baseline and it serves
/// the next request.
fn fd_exhaustion(policy: &str) {
    require_hostile!("fd_exhaustion");
    let _l = procs_shared();
    let mut s = Serve::start(&["--parallel", "4"]);
    for i in 0..4 {
        s.still_serves(&format!("warm-up-{i}"));
    }
    let pid = s.pid();
    let base = steady_fds(pid);
    let n = 16;
    // strict forbids processes, sockets and pipes: one process, /dev/null.
    let (kids, mode, procs) = if policy == "strict" { ("0", "simple", 1) } else { ("4", "full", 5) };
    for i in 0..n {
        // Bounded by the spec, not by the caller's hard limit: a container's
        // (podman: 2^20) lets these 80 processes run the whole system's file
        // table out (ENFILE, measured in the VM) before their own limit.
        let mut sp = spec(policy, &[&bin("fds"), kids, mode]);
        sp["limits"] = json!({"open_files": OPEN_FILES});
        s.request(json!(i), sp);
    }
    for i in 0..n {
        let v = s.response(&json!(i), Duration::from_secs(120));
        assert_serve_policy_available(&v, policy);
        let r = v["result"].clone();
        let stdout = captured(&r, "stdout");
        let rep = check_result(
            &r,
            &stdout,
            policy,
            &Expect { strict_kill: None, default_errnos: &[], exit_code: 0 },
            &r.to_string(),
        );
        if r["status"] == "exited" {
            let lines = stdout.lines().filter(|l| l.starts_with("FDS ") && l.contains("stop=EMFILE")).count();
            assert_eq!(lines, procs, "not every process ran out of fds: {stdout}");
            let limit = format!("limit={OPEN_FILES} ");
            assert!(stdout.lines().filter(|l| l.starts_with("FDS ")).all(|l| l.contains(&limit)), "{stdout}");
            assert!(rep.done);
        }
    }
    let end = settled_fds(pid, Some(base));
    assert!(end <= base, "the server's fds grew from {base} to {end}: {:?}", fd_links(pid));
    s.still_serves("after");
    // Concurrent runs the server refuses nothing.
    s.finish().assert_code(0);
}
both_policies!(fd_exhaustion);

/// The runs' RLIMIT_NOFILE in `fd_exhaustion`.
const OPEN_FILES: u64 = 4096;

/// The process's fd count once it has not changed for 300 ms (at most 3 s):
/// the idle server has prepared all its spares (each holds descriptors).
fn steady_fds(pid: i32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut last, mut since) = (own_fds(pid), Instant::now());
    while Instant::now() < deadline && since.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(20));
        let n = own_fds(pid);
        if n != last {
            (last, since) = (n, Instant::now());
        }
    }
    last
}

/// A supervisor's fds but its kept networks' (two each, made on demand up
/// to 5 × parallel + 2: checked here, at most 4 slots in these tests).
fn own_fds(pid: i32) -> usize {
    let st = proc_stats(pid);
    assert!(st.networks <= 5 * 4 + 2, "{} kept networks", st.networks);
    st.fds - st.net_fds
}

/// What the process's descriptors refer to, sorted (for a failure's message).
fn fd_links(pid: i32) -> Vec<String> {
    let mut l: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).map(|p| p.display().to_string()).collect())
        .unwrap_or_default();
    l.sort();
    l
}

/// The process's fd count once it is no larger than `not_above` (for up to
/// 3 s), else the last count.
fn settled_fds(pid: i32, not_above: Option<usize>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let n = own_fds(pid);
        if not_above.is_none_or(|b| n <= b) || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------- 17. huge argv / environment

#[track_caller]
fn assert_e2big(out: &Out, what: &str) {
    assert_eq!(out.code, Some(125), "{what}: expected a clear error; {}", out.describe());
    assert!(out.stderr.contains("E2BIG"), "{what}: the error does not name E2BIG; {}", out.describe());
    assert_eq!(out.json()["status"], "error", "{}", out.describe());
}

/// ~1 MiB of arguments (CLI) and of environment (profile) run; a single
/// argument over 128 KiB (profile, serve) is a clear error naming E2BIG;
/// more than execve takes in all (profile) runs or is that error.
fn huge_argv_env(policy: &str) {
    require_hostile!("huge_argv_env");
    let _l = procs_shared();
    let e = Expect { strict_kill: None, default_errnos: &[], exit_code: 0 };
    // 1 MiB of arguments on the command line.
    let arg = "a".repeat(1023);
    let args: Vec<&str> = std::iter::repeat_n(arg.as_str(), 1024).collect();
    let out = attack_cmd(policy, &[], &bin("args"), &args).timeout(Duration::from_secs(60)).run();
    check(&out, policy, &e);
    assert!(out.stdout.contains("argc=1025 "), "{}", out.describe());
    let dir = Scratch::new("hostile-args");
    let profile = |name: &str, argv: Vec<String>, env: Vec<(String, String)>| -> String {
        let mut s = format!("argv = {}\n[env]\n", serde_json::to_string(&argv).unwrap());
        for (k, v) in env {
            s.push_str(&format!("{k} = \"{v}\"\n"));
        }
        dir.write(name, s.as_bytes()).display().to_string()
    };
    // 1 MiB of environment.
    let env: Vec<(String, String)> = (0..256).map(|i| (format!("V{i}"), "e".repeat(4090))).collect();
    let p = profile("env.toml", vec![bin("args")], env);
    let out = attack_cmd(policy, &["--profile", &p], &bin("args"), &[]).run();
    check(&out, policy, &e);
    let envc: usize =
        out.stdout.split("envc=").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!((256..260).contains(&envc), "the environment did not arrive; {}", out.describe());
    // One argument of 200 KiB.
    let p = profile("long.toml", vec![bin("args"), "x".repeat(200 * 1024)], vec![]);
    let mut c = capsule(&["run", "-q"]);
    c.args(&with_policy(policy)).args(&["--profile", &p]).json();
    let out = c.run();
    assert_policy_available(&out, policy);
    assert_e2big(&out, "one 200 KiB argument");
    // 3 MiB in all: more than a quarter of an 8 MiB stack.
    let big: Vec<String> = std::iter::once(bin("args")).chain(std::iter::repeat_n("b".repeat(4095), 768)).collect();
    let p = profile("big.toml", big, vec![]);
    let mut c = capsule(&["run", "-q"]);
    c.args(&with_policy(policy)).args(&["--profile", &p]).json();
    let out = c.run();
    assert_policy_available(&out, policy);
    if out.code == Some(125) {
        assert_e2big(&out, "3 MiB of arguments");
    } else {
        check(&out, policy, &e);
    }
    // The same long argument through a server: an error response, and the
    // server goes on.
    let mut s = Serve::start(&[]);
    let long = "y".repeat(200 * 1024);
    s.request(json!("long"), spec(policy, &[&bin("args"), &long]));
    let v = s.response(&json!("long"), Duration::from_secs(60));
    let text = v
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| v["result"]["error"].as_str().map(str::to_string));
    let text = text.unwrap_or_else(|| panic!("a 200 KiB argument ran: {v}"));
    assert!(text.contains("E2BIG"), "the error does not name E2BIG: {v}");
    s.still_serves("after-long");
    s.finish().assert_code(0);
}
both_policies!(huge_argv_env);

// ---------------------------------------------------------------- 18. signal floods

/// One second of every signal to PID 1 and to -1 (two processes; one under
/// strict): the run ends with the program's result, in a sane wall time.
fn signal_flood(policy: &str) {
    require_hostile!("signal_flood");
    let _l = procs_shared();
    let t0 = Instant::now();
    // strict forbids processes: the flood comes from the program alone.
    let mode = if policy == "strict" { "solo" } else { "helper" };
    let out = attack_cmd(policy, &["--wall-time", "30s"], &bin("sigflood"), &["1", mode]).run();
    let took = t0.elapsed();
    check(&out, policy, &Expect { strict_kill: None, default_errnos: &[], exit_code: 0 });
    let wall = out.json()["wall_time_ms"].as_f64().unwrap_or(-1.0);
    if out.json()["status"] == "exited" {
        assert!((990.0..10_000.0).contains(&wall), "wall time {wall} ms for a 1 s flood; {}", out.describe());
    }
    assert!(took < Duration::from_secs(20), "capsule took {took:?}; {}", out.describe());
}
both_policies!(signal_flood);

// ---------------------------------------------------------------- 19. symlink swapped into a bind source

/// `renameat2(RENAME_EXCHANGE)` as fast as possible between `src` (a
/// directory whose `marker` says INTENDED) and a symlink to `secret` (whose
/// marker says SECRET), while `capsule run --ro-bind src /mnt -- cat
/// /mnt/marker` runs 100 times, then 100 runs through a server (PID 1s
/// prepared ahead). The link belongs to the capsule user, as one a
/// sandboxed run planted would: capsule never follows it, so each run
/// prints INTENDED or fails with the error naming the link, never SECRET.
fn symlink_swap_race(policy: &str) {
    require_hostile!("symlink_swap_race");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-race");
    dir.mkdir("src");
    dir.write("src/marker", b"INTENDED\n");
    dir.mkdir("secret");
    dir.write("secret/marker", b"SECRET\n");
    std::os::unix::fs::symlink(dir.join("secret"), dir.join("alt")).unwrap();
    if h().is_root {
        std::os::unix::fs::lchown(dir.join("alt"), Some(h().uid), Some(h().gid)).unwrap();
    }
    let is_link_error = |e: &str| e.contains("is a symbolic link") && e.contains("--symlink");
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (stop, flips) = (stop.clone(), flips.clone());
        let a = std::ffi::CString::new(dir.join("src").into_os_string().into_encoded_bytes()).unwrap();
        let b = std::ffi::CString::new(dir.join("alt").into_os_string().into_encoded_bytes()).unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: two valid C strings.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "renameat2: {}", std::io::Error::last_os_error());
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop = Stop(stop.clone());
    let src = dir.join("src").display().to_string();
    let (mut intended, mut errors, mut secret) = (0, 0, Vec::new());
    // Fewer in an emulated VM's container (scripts/test-container.sh): a run
    // takes seconds there, the flipper holding one of its two CPUs.
    let runs: usize = std::env::var("CAPSULE_TEST_RACE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    for _ in 0..runs {
        let out = attack_cmd(policy, &["--ro-bind", &src, "/mnt"], &bin("race"), &["/mnt/marker"]).run();
        assert_policy_available(&out, policy);
        match out.stdout.as_str() {
            "INTENDED\n" => intended += 1,
            s if s.contains("SECRET") => secret.push(format!("CLI: {}", out.describe())),
            _ => {
                assert_eq!(out.code, Some(125), "neither the content nor a clear error; {}", out.describe());
                assert!(out.stderr.contains("capsule: error:"), "unclear error; {}", out.describe());
                assert!(is_link_error(&out.stderr), "not the link's error; {}", out.describe());
                errors += 1;
            }
        }
    }
    let mut s = Serve::start(&[]);
    for i in 0..runs {
        let mut sp = spec(policy, &[&bin("race"), "/mnt/marker"]);
        sp["mounts"] = json!([{"type": "ro-bind", "src": src, "dst": "/mnt"}]);
        s.request(json!(i), sp);
        let v = s.response(&json!(i), Duration::from_secs(60));
        if let Some(e) = v.get("error").or_else(|| v["result"].get("error")).and_then(Value::as_str) {
            assert!(!e.contains("seccomp"), "policy unavailable: {e}");
            assert!(is_link_error(e), "not the link's error: {v}");
            errors += 1;
            continue;
        }
        let r = &v["result"];
        let text = captured(r, "stdout");
        if text == "INTENDED\n" {
            intended += 1;
        } else if text.contains("SECRET") {
            secret.push(format!("serve: {r}"));
        } else {
            panic!("neither the content nor a clear error: {v}");
        }
    }
    s.finish().assert_code(0);
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    eprintln!(
        "symlink_swap_race: {} flips; {intended} intended, {errors} errors, {} secret",
        flips.load(Ordering::Relaxed),
        secret.len()
    );
    assert!(
        secret.is_empty(),
        "{} of {} runs read the symlink's target (SECRET); first: {}",
        secret.len(),
        2 * runs,
        secret[0]
    );
    assert!(intended > 0, "no run printed the intended content: the test proves nothing");
}
both_policies!(symlink_swap_race);

// ---------------------------------------------------------------- 20. bombs (cgroups, in the VM)

/// A fork bomb under `--pids 32`: forks fail with EAGAIN, the run ends
/// normally, pids_peak ≤ 32; a bomb forking in every process ends at the
/// wall-time limit; nothing is left; the next run works.
fn cgroup_fork_bomb(policy: &str) {
    require_cgroups!("cgroup_fork_bomb");
    require!("cgroup_fork_bomb", bins().map(|_| ()));
    let _l = procs_exclusive();
    let baseline = user_procs_baseline("cgroup_fork_bomb");
    let out = attack_cmd(policy, &["--pids", "32", "--wall-time", "60s"], &bin("forkbomb"), &[]).run();
    check(
        &out,
        policy,
        &Expect { strict_kill: Some(&["fork", "clone", "clone3", "vfork"]), default_errnos: &[], exit_code: 0 },
    );
    out.assert_cgroups_clean();
    if policy == "default" {
        assert!(out.stdout.contains("stop=EAGAIN"), "{}", out.describe());
        let peak = out.json()["pids_peak"].as_u64().unwrap_or_else(|| panic!("no pids_peak; {}", out.describe()));
        assert!(peak <= 32, "pids_peak {peak} > 32; {}", out.describe());
        let out = attack_cmd(policy, &["--pids", "64", "--wall-time", "3s"], &bin("forkbomb"), &["bomb"]).run();
        assert_eq!(out.status(), "wall-time-limit", "{}", out.describe());
        let peak = out.json()["pids_peak"].as_u64().unwrap_or(0);
        assert!(peak <= 64, "pids_peak {peak} > 64; {}", out.describe());
        out.assert_cgroups_clean();
    }
    if let Err(left) = wait_no_user_procs(&baseline, Instant::now(), Duration::from_secs(10)) {
        panic!("processes left on the host after the fork bomb: {left:?}");
    }
    let out = run_probe(&[], &["touch-mib", "1"]).run();
    out.assert_probe_ok();
}
both_policies!(cgroup_fork_bomb);

/// A memory bomb (4 processes under default, 1 under strict) under
/// `--memory 64M`: memory-limit, peak ≤ 64 MiB, nothing survives; the next
/// run works.
fn cgroup_memory_bomb(policy: &str) {
    require_cgroups!("cgroup_memory_bomb");
    require!("cgroup_memory_bomb", bins().map(|_| ()));
    let _l = procs_exclusive();
    let procs = if policy == "default" { "4" } else { "1" };
    let out = attack_cmd(policy, &["--memory", "64M", "--wall-time", "60s"], &bin("membomb"), &["4096", procs]).run();
    assert_policy_available(&out, policy);
    assert!(!out.stdout.contains("SURVIVED"), "the bomb survived; {}", out.describe());
    if out.json()["status"] == "forbidden-syscall" {
        assert_eq!(policy, "strict", "{}", out.describe());
    } else {
        out.assert_code(123);
        assert_eq!(out.status(), "memory-limit", "{}", out.describe());
        let peak = out.json()["peak_memory_bytes"].as_f64().unwrap_or(0.0);
        assert!(peak <= 64.0 * 1024.0 * 1024.0, "peak {peak} bytes under --memory 64M; {}", out.describe());
    }
    out.assert_cgroups_clean();
    let out = run_probe(&[], &["touch-mib", "32"]).run();
    out.assert_probe_ok();
}
both_policies!(cgroup_memory_bomb);

// ---- Attacks on the agent and on serve --listen

fn python3() -> Result<(), String> {
    match Path::new("/usr/bin/python3").exists() {
        true => Ok(()),
        false => Err("python3 is not installed (/usr/bin/python3)".into()),
    }
}

/// A `capsule` command with the agent on, for identity `tag` (the key
/// covers CAPSULE_* variables, so no other test shares its agent).
fn agent_cmd(tag: &str, args: &[&str]) -> Cmd {
    let mut c = capsule(args);
    c.env("CAPSULE_AGENT", "on").env("CAPSULE_AGENT_IDLE", "30").env("CAPSULE_TEST_TAG", tag);
    c
}

/// The socket of the agent serving `tag` (`capsule agent status`'s `*`).
fn agent_socket(tag: &str) -> Option<PathBuf> {
    let out = agent_cmd(tag, &["agent", "status"]).run();
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("* "))
        .map(|l| PathBuf::from(l.rsplit_once("\tpid ").map_or(l, |(s, _)| s)))
}

/// A fake agent: listens on TMP and renames it over TARGET (when given),
/// prints `planted` (or `not planted ERROR` and exits), answers each
/// connection as an agent that declines (`accepted`, then `declined` once
/// a whole request is in) and appends to REC what it received:
/// `BYTES bytes FDS fds` per connection. Ends when REC.stop appears.
const FAKE_AGENT: &str = r#"
import array, os, socket, sys, time
rec, tmp, target = sys.argv[1], sys.argv[2], sys.argv[3]
s = socket.socket(socket.AF_UNIX)
s.bind(tmp)
s.listen(16)
if target:
    try:
        os.rename(tmp, target)
    except OSError as e:
        print('not planted', e.strerror, flush=True)
        os.unlink(tmp)
        sys.exit(0)
print('planted', flush=True)
s.settimeout(0.2)
frame = lambda b: b'CAP1' + len(b).to_bytes(4, 'little') + b
end = time.time() + 50
while time.time() < end and not os.path.exists(rec + '.stop'):
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    got, fds = b'', 0
    try:
        c.sendall(frame(b'"accepted"'))
        c.settimeout(1)
        while True:
            m, anc, _, _ = c.recvmsg(1 << 16, socket.CMSG_SPACE(64))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for fd in array.array('i', data[:len(data) - len(data) % 4]):
                        fds += 1
                        os.close(fd)
            if not m:
                break
            got += m
            if len(got) >= 8 and len(got) >= 8 + int.from_bytes(got[4:8], 'little'):
                c.sendall(frame(b'"declined"'))
                break
    except OSError:
        pass
    with open(rec, 'a') as f:
        f.write('%d bytes %d fds\n' % (len(got), fds))
    c.close()
"#;

/// What the fake agent at `rec` received: connections that got any byte
/// or descriptor.
fn fake_received(rec: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(rec).unwrap_or_default();
    text.lines().filter(|l| *l != "0 bytes 0 fds").map(str::to_string).collect()
}

/// A sandboxed program puts its own listening socket in
/// the place of the user's agent's (`XDG_RUNTIME_DIR` unset: the agents'
/// directory is `/tmp/capsule-agent-UID`). (a) With `--bind /tmp /tmp` it
/// tries itself: the directory is covered in every run, so it cannot.
/// (b) The test
/// renames the sandboxed fake's socket there (as a kernel before the
/// cover, or another way in, would let it): the next `capsule run`, by
/// the front end and by capsule-cli (`--json`), sends it nothing, and
/// still runs its command, without the agent, saying so.
#[test]
fn agent_impersonation_by_a_sandboxed_listener() {
    let t = "agent_impersonation_by_a_sandboxed_listener";
    require!(t, userns_available());
    require!(t, python3());
    let tag = unique("imp");
    let out = agent_cmd(&tag, &["run", "-q", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    // Agents are off for a caller under a seccomp filter or no_new_privs
    // (every process in a container): the planted socket is where this
    // caller's agent would be, and must get nothing either.
    let off = agent_cmd(&tag, &["agent", "status"]).run().stdout;
    let agents = !off.starts_with("agents are off here");
    let sock = if agents {
        agent_socket(&tag).expect("an agent after the first run")
    } else {
        assert!(off.contains("no_new_privs or a seccomp filter"), "agents off for another reason: {off}");
        let key = agent_cmd(&tag, &["agent", "key"]).run().stdout;
        PathBuf::from(format!("/tmp/capsule-agent-{}/agent-{}.sock", h().uid, key.trim()))
    };
    assert!(sock.starts_with(format!("/tmp/capsule-agent-{}", h().uid)), "{}", sock.display());
    let dir = Scratch::new("imp");
    let fake_run = |rec: &Path, tmp: &str, target: &str, binds: &[&str]| {
        let mut c = agent_cmd(&tag, &["run", "-q", "--no-agent", "--wall-time", "60s", "--bind", &dir.s(), &dir.s()]);
        c.args(binds).args(&["--", "python3", "-c", FAKE_AGENT]).arg(rec).arg(tmp).arg(target);
        c.spawn()
    };
    // The victim: the user's next, unrelated run.
    let victim = |json: bool| {
        let mut c = agent_cmd(&tag, &["run", "-q", "--", "/bin/sh", "-c", "echo ran"]);
        if json {
            c.json();
        }
        c.run()
    };

    // (a) Through --bind /tmp /tmp.
    let rec = dir.join("a.rec");
    let tmp = format!("/tmp/capsule-fake-{}.sock", unique("a"));
    let mut fake = fake_run(&rec, &tmp, &sock.display().to_string(), &["--bind", "/tmp", "/tmp"]);
    let said = fake.wait_line("", Duration::from_secs(30));
    eprintln!("the fake agent with --bind /tmp /tmp: {said:?}");
    let out = victim(false);
    std::fs::write(rec.with_extension("rec.stop"), "").unwrap();
    let _ = fake.wait();
    let _ = std::fs::remove_file(&tmp);
    assert_eq!(fake_received(&rec), Vec::<String>::new(), "the fake agent ({said:?}) received a request");
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "ran\n"), "{}", out.describe());
    assert!(
        said.starts_with("not planted"),
        "the agents' directory is not covered in a run with --bind /tmp /tmp: {said:?}"
    );

    // (b) Its socket put there from outside.
    let rec = dir.join("b.rec");
    // Beside the agents' directory: a socket is renamed only within one file
    // system (in a container the scratch directory is on a tmpfs of its own).
    let near = PathBuf::from(format!("/tmp/{}", unique("imp-b")));
    std::fs::create_dir(&near).unwrap();
    if h().is_root {
        std::os::unix::fs::chown(&near, Some(h().uid), Some(h().gid)).unwrap();
    }
    let near_s = near.display().to_string();
    let tmp = near.join("fake.sock");
    let mut fake = fake_run(&rec, &tmp.display().to_string(), "", &["--bind", &near_s, &near_s]);
    fake.wait_line("planted", Duration::from_secs(30));
    std::fs::rename(&tmp, &sock).unwrap();
    for json in [false, true] {
        let out = victim(json);
        assert_eq!(fake_received(&rec), Vec::<String>::new(), "the fake agent received a request (json {json})");
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), "ran\n"), "{}", out.describe());
        assert!(
            !agents || out.stderr.contains("not your agent") && out.stderr.contains("running without an agent"),
            "{}",
            out.describe()
        );
    }
    std::fs::write(rec.with_extension("rec.stop"), "").unwrap();
    let _ = fake.wait();
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_dir_all(&near);
    // Stops the real agent (its socket was replaced: by its pid).
    let _ = agent_cmd(&tag, &["agent", "stop"]).run();
}

/// A caller confined by Landlock (writes only beneath
/// /tmp, /dev, /proc; `no_new_privs` set, as Landlock requires) must not
/// get from an agent what its own supervisor would not: an agent started
/// earlier by a caller with `no_new_privs` but no Landlock (the same
/// identity) must not make it a run with `--writable DIR`. Run by a
/// python3 program that confines itself and executes capsule.
#[test]
fn landlocked_caller_escapes_through_the_agent() {
    let t = "landlocked_caller_escapes_through_the_agent";
    require!(t, userns_available());
    require!(t, python3());
    let tag = unique("ll");
    let dir = Scratch::new("ll");
    let x = dir.mkdir("x");
    let confine = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if sys.argv[1] == 'landlock':
    # Every write right of ABI 1: writing files, removing, making anything.
    handled = (1 << 1) | sum(1 << b for b in range(4, 13))
    attr = ctypes.c_uint64(handled)
    rs = libc.syscall(444, ctypes.byref(attr), 8, 0)
    assert rs >= 0, ('landlock_create_ruleset', ctypes.get_errno())
    for p in ['/tmp', '/dev', '/proc']:
        fd = os.open(p, os.O_PATH)
        rule = (ctypes.c_uint8 * 12).from_buffer_copy(handled.to_bytes(8, 'little') + fd.to_bytes(4, 'little'))
        assert libc.syscall(445, rs, 1, ctypes.byref(rule), 0) == 0, ('landlock_add_rule', ctypes.get_errno())
assert libc.prctl(38, 1, 0, 0, 0) == 0
if sys.argv[1] == 'landlock':
    assert libc.syscall(446, rs, 0) == 0, ('landlock_restrict_self', ctypes.get_errno())
os.execv(sys.argv[2], sys.argv[2:])
"#;
    let run = |how: &str, args: &[&str]| {
        let mut argv: Vec<String> = vec!["/usr/bin/python3".into(), "-c".into(), confine.into(), how.into()];
        argv.push(h().capsule.display().to_string());
        argv.extend(args.iter().map(|a| a.to_string()));
        let out = as_user(&argv)
            .env("CAPSULE_AGENT", "on")
            .env("CAPSULE_AGENT_IDLE", "30")
            .env("CAPSULE_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "exit {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    // The earlier caller: no_new_privs, no Landlock.
    let (code, text) = run("nnp", &["run", "-q", "--", "/bin/true"]);
    assert_eq!(code, Some(0), "{text}");
    // The confined one.
    let f = x.join("f");
    let (_, text) = run(
        "landlock",
        &["run", "-q", "--writable", &x.display().to_string(), "--", "/usr/bin/touch", &f.display().to_string()],
    );
    let _ = run("nnp", &["agent", "stop"]);
    eprintln!("the confined caller's capsule run: {text}");
    assert!(!f.exists(), "a Landlock-confined caller wrote outside its confinement through an agent: {text}");
    // Its own supervisor may not mount: the error says why.
    assert!(text.contains("no_new_privs") && text.contains("Landlock"), "the refusal does not say why: {text}");
}

/// `capsule serve --listen` refuses a peer that is a
/// sandboxed program of the same user (here one that sees the socket
/// through a bind of its directory): it gets an error line naming why and
/// the end of the connection, not a run. A client of the user's outside
/// any sandbox is served.
#[test]
fn serve_listen_refuses_sandboxed_peers() {
    let t = "serve_listen_refuses_sandboxed_peers";
    require!(t, userns_available());
    require!(t, python3());
    // One supervisor, and the per-CPU front, which checks its peers itself.
    for extra in [&[][..], &["--per-cpu"][..]] {
        let dir = Scratch::new("listen-peer");
        let path = dir.join("sock");
        let mut server = capsule(&["serve", "--listen", &path.display().to_string()]);
        server.args(extra);
        server.timeout(Duration::from_secs(120));
        let server = server.spawn();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&path).is_err() {
            assert!(Instant::now() < deadline, "capsule serve --listen did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        let client = format!(
            "import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.settimeout(20)\n\
         try:\n    s.sendall(b'{{\"id\": 1, \"spec\": {{\"argv\": [\"/bin/true\"], \"seccomp\": \"none\"}}}}\\n')\n\
         except BrokenPipeError:\n    pass\n\
         data=b''\nwhile True:\n    b=s.recv(4096)\n    if not b: break\n    data+=b\n    if b'\\n' in data: break\n\
         print(data.decode().strip() or 'EOF')",
            path.display().to_string()
        );
        let out = capsule(&["run", "-q", "--bind", &dir.s(), &dir.s(), "--", "python3", "-c", &client]).run();
        assert_eq!(out.code, Some(0), "{}", out.describe());
        let line = out.stdout.trim();
        assert!(!line.contains("\"result\""), "{extra:?}: a sandboxed peer had a run made: {line}");
        assert!(line.contains("\"error\"") && line.contains("refused"), "no refusal line: {}", out.describe());
        // The user's own client, outside any sandbox, is served.
        let own = as_user(&["/usr/bin/python3", "-c", &client]).output().unwrap();
        let own = String::from_utf8_lossy(&own.stdout);
        assert!(own.contains("\"result\""), "{extra:?}: the user's own client was not served: {own}");
        // SAFETY: kill(2) on the server's pid (setpriv exec'd capsule), still our child.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
        let _ = server.wait();
    }
}

// ---- Attacks through layers

/// A project `p` (the run's working directory), a home `h` (its `$HOME`)
/// and a directory `l` holding the layer `L`, all the test user's.
struct LayerFx {
    p: Scratch,
    h: Scratch,
    l: Scratch,
}

impl LayerFx {
    fn new(tag: &str) -> LayerFx {
        LayerFx {
            p: Scratch::new(&format!("{tag}-proj")),
            h: Scratch::new(&format!("{tag}-home")),
            l: Scratch::new(&format!("{tag}-layers")),
        }
    }

    fn layer_dir(&self) -> PathBuf {
        self.l.join("L")
    }

    fn vars(&self) -> String {
        format!("P={}\nH={}\nL={}\n", self.p.s(), self.h.s(), self.l.s())
    }

    /// A shell script on the host, as the test user, in $P.
    fn host_sh(&self, script: &str) -> String {
        let full = format!("set -e\n{}cd \"$P\"\n{script}", self.vars());
        let out = as_user(&["sh", "-c", &full]).output().expect("run sh");
        assert!(out.status.success(), "host script failed: {}\n{script}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `capsule run -q --layer L OPTS -- sh -c SCRIPT` in $P, `HOME=$H`.
    fn run(&self, opts: &[&str], script: &str) -> Out {
        let mut c = capsule(&["run", "-q", "--no-review"]);
        c.arg("--layer")
            .arg(self.layer_dir())
            .args(opts)
            .arg("--")
            .arg("sh")
            .arg("-c")
            .arg(format!("{}{script}", self.vars()));
        c.cwd(self.p.path.clone()).env("HOME", &self.h.s());
        c.run()
    }

    /// `capsule layer VERB L ARGS...`.
    fn layer(&self, verb: &str, args: &[&str]) -> Out {
        let mut c = capsule(&["layer", verb]);
        c.arg(self.layer_dir()).args(args);
        c.run()
    }

    /// `layer list` lines with the scratch directories written P, H, L.
    fn list(&self) -> Vec<String> {
        let out = self.layer("list", &[]);
        out.assert_code(0);
        out.stdout.lines().map(|l| self.short(l)).collect()
    }

    fn short(&self, s: &str) -> String {
        s.replace(&self.p.s(), "P").replace(&self.h.s(), "H").replace(&self.l.s(), "L")
    }
}

fn layers_usable() -> Result<(), String> {
    userns_available()?;
    if !Path::new("/usr/bin/python3").exists() {
        return Err("/usr/bin/python3 is missing (it sets the xattrs)".into());
    }
    Ok(())
}

/// fuse-overlayfs's marker names and xattrs written by a program in
/// a kernel-overlay layer are ordinary files there: `list` shows them as
/// added files (no `D`), and `commit` installs them as files and deletes
/// nothing: not the hidden `~/.ssh`, not a `--read-only` directory, not
/// the content of a directory marked opaque the fuse-overlayfs way. A
/// later `--root` run (fuse-overlayfs, which would take them for
/// whiteouts) over that layer is refused, naming one.
#[test]
fn layer_fuse_markers_in_a_kernel_layer_are_files() {
    require!("layer_fuse_markers_in_a_kernel_layer_are_files", layers_usable());
    let fx = LayerFx::new("wh");
    fx.host_sh(
        "mkdir -m 700 \"$H/.ssh\"; echo KEY > \"$H/.ssh/id\"; mkdir ro d e; echo r > ro/f; echo k > d/k; echo k > e/k",
    );
    let out = fx.run(
        &["--read-only", "ro"],
        r#"touch "$H/.wh..ssh" .wh.ro e/.wh..wh..opq
python3 -c 'import os; os.setxattr("d", "user.fuseoverlayfs.opaque", b"y"); print("xattr-set")'"#,
    );
    out.assert_code(0);
    assert_eq!(out.stdout, "xattr-set\n", "{}", out.describe());
    let list = fx.list();
    assert!(
        !list.iter().any(|l| l.starts_with('D')),
        "a marker written in a kernel layer was taken for a deletion: {list:#?}"
    );
    for want in ["A  H/.wh..ssh", "A  P/.wh.ro", "A  P/e/.wh..wh..opq"] {
        assert!(list.iter().any(|l| l == want || l.starts_with(&format!("{want}  ("))), "{want} not listed: {list:#?}");
    }
    let out = fx.layer("commit", &[]);
    out.assert_code(0);
    assert_eq!(
        std::fs::read_to_string(fx.h.join(".ssh/id")).ok().as_deref(),
        Some("KEY\n"),
        "~/.ssh deleted; {}",
        out.describe()
    );
    assert_eq!(
        std::fs::read_to_string(fx.p.join("ro/f")).ok().as_deref(),
        Some("r\n"),
        "the --read-only dir deleted; {}",
        out.describe()
    );
    assert_eq!(std::fs::read_to_string(fx.p.join("d/k")).ok().as_deref(), Some("k\n"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(fx.p.join("e/k")).ok().as_deref(), Some("k\n"), "{}", out.describe());
    for f in [fx.h.join(".wh..ssh"), fx.p.join(".wh.ro"), fx.p.join("e/.wh..wh..opq")] {
        assert!(
            std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file()),
            "{} not committed as a file; {}",
            f.display(),
            out.describe()
        );
    }
    // The same names again, then a --root run over the layer.
    fx.run(&[], r#"touch "$H/.wh..ssh""#).assert_code(0);
    if Path::new("/usr/bin/fuse-overlayfs").exists() && Path::new("/dev/fuse").exists() {
        let out = fx.run(&["--root"], "true");
        assert_ne!(
            out.code,
            Some(0),
            "a --root run used a kernel layer holding fuse-overlayfs marker names; {}",
            out.describe()
        );
        assert!(out.stderr.contains(".wh..ssh"), "the refusal does not name the marker; {}", out.describe());
        assert!(!fx.list().iter().any(|l| l.starts_with('D')), "{:#?}", fx.list());
    }
    assert_eq!(std::fs::read_to_string(fx.h.join(".ssh/id")).ok().as_deref(), Some("KEY\n"));
    // Whatever the layer says (here kernel whiteouts put there by hand),
    // what was hidden or read-only in a run is never committed.
    fx.host_sh(r#"U="$L/L/upper"; mkdir -p "$U$H" "$U$P"; rm -rf "$U$H/.ssh" "$U$P/ro"; mknod "$U$H/.ssh" c 0 0; mknod "$U$P/ro" c 0 0"#);
    let list = fx.list();
    assert!(list.contains(&"D  H/.ssh".to_string()) && list.contains(&"D  P/ro".to_string()), "{list:#?}");
    let out = fx.layer("commit", &["--force"]);
    out.assert_code(1);
    assert!(out.stderr.contains("no run could change it"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(fx.h.join(".ssh/id")).ok().as_deref(), Some("KEY\n"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(fx.p.join("ro/f")).ok().as_deref(), Some("r\n"), "{}", out.describe());
}

/// Whether `s` holds a control character a terminal acts on.
fn has_control(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

/// Names with escape sequences, newlines and invalid UTF-8 are
/// quoted (C-style, in double quotes) in `list`, `diff`, `review` and
/// `commit`; `list --json` keeps them exact.
#[test]
fn layer_names_are_quoted_in_every_output() {
    require!("layer_names_are_quoted_in_every_output", layers_usable());
    let fx = LayerFx::new("quote");
    let out = fx.run(
        &[],
        r#"touch "$(printf 'x\033[2K\rM  evil\nA  forged')" "$(printf 'bad\377')"
ln -s "$(printf 't\033]0;title\a')" lnk"#,
    );
    out.assert_code(0);
    let list = fx.layer("list", &[]);
    list.assert_code(0);
    assert!(!has_control(&list.stdout), "raw control characters in list: {:?}", list.stdout);
    let lines: Vec<String> = list.stdout.lines().map(|l| fx.short(l)).collect();
    assert_eq!(lines.len(), 3, "a name forged lines: {lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with(r#"A  "P/x\033[2K\rM  evil\nA  forged""#)), "{lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with(r#"A  "P/bad\377""#)), "{lines:#?}");
    let json = fx.layer("list", &["--json"]);
    json.assert_code(0);
    let v: Value = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
    let want = format!("{}/x\x1b[2K\rM  evil\nA  forged", fx.p.s());
    assert!(v.as_array().unwrap().iter().any(|c| c["path"] == want.as_str()), "JSON path not exact: {}", json.stdout);
    let diff = fx.layer("diff", &[]);
    diff.assert_code(0);
    assert!(!has_control(&diff.stdout), "raw control characters in diff: {:?}", diff.stdout);
    assert!(!diff.stdout.lines().any(|l| l.starts_with("A  forged")), "{}", diff.stdout);
    assert!(diff.stdout.contains(r#"t\033]0;title\a"#), "the link target is not shown quoted: {}", diff.stdout);
    let mut c = capsule(&["layer", "review"]);
    c.arg(fx.layer_dir()).stdio(Stdio::null(), Stdio::piped(), Stdio::piped());
    let review = c.run();
    assert!(!has_control(&review.stderr), "raw control characters in review: {:?}", review.stderr);
    assert!(review.stderr.contains(r#"\nA  forged""#), "{}", review.stderr);
    let commit = fx.layer("commit", &[]);
    commit.assert_code(0);
    assert!(
        !has_control(&commit.stdout) && !has_control(&commit.stderr),
        "raw control characters in commit: {}",
        commit.describe()
    );
    assert_eq!(commit.stdout.lines().count(), 3, "{}", commit.describe());
    assert!(fx.p.join("x\x1b[2K\rM  evil\nA  forged").exists());
}

/// A 1 TiB sparse file made by a program: `list` shows its size,
/// `diff` ends quickly saying what it did not read, and `commit` keeps
/// the holes (the host file takes blocks only for its data).
#[test]
fn layer_sparse_file_keeps_its_holes() {
    require!("layer_sparse_file_keeps_its_holes", layers_usable());
    let fx = LayerFx::new("sparse");
    let out = fx.run(&[], "printf a > big; truncate -s 1T big; printf z >> big");
    out.assert_code(0);
    let list = fx.list();
    // Before anything reads it: a capsule that does not bound its reads
    // must fail here, not fill the disk below.
    assert_eq!(list, ["A  P/big  (1099511627777 bytes, sparse)"], "no size shown");
    let mut c = capsule(&["layer", "diff"]);
    c.arg(fx.layer_dir()).timeout(Duration::from_secs(120));
    let diff = c.run();
    diff.assert_code(0);
    assert!(diff.elapsed < Duration::from_secs(60), "diff took {:?}", diff.elapsed);
    assert!(diff.stdout.contains("1099511627777 bytes") && diff.stdout.contains("not read"), "{}", diff.stdout);
    let mut c = capsule(&["layer", "commit"]);
    c.arg(fx.layer_dir()).timeout(Duration::from_secs(120));
    let commit = c.run();
    commit.assert_code(0);
    use std::os::unix::fs::{FileExt, MetadataExt};
    let big = fx.p.join("big");
    let md = std::fs::metadata(&big).unwrap();
    assert_eq!(md.len(), (1u64 << 40) + 1);
    assert!(md.blocks() * 512 < 1 << 20, "the commit wrote the holes: {} blocks", md.blocks());
    let f = std::fs::File::open(&big).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"a");
    f.read_exact_at(&mut b, 1 << 40).unwrap();
    assert_eq!(&b, b"z");
    f.read_exact_at(&mut b, 1 << 39).unwrap();
    assert_eq!(&b, b"\0");
}

/// Setuid/setgid (documented limit): `list` and the review show special
/// bits, and `commit` drops setuid/setgid unless `--keep-special-bits`.
#[test]
fn layer_setuid_bits_shown_and_dropped() {
    require!("layer_setuid_bits_shown_and_dropped", layers_usable());
    let fx = LayerFx::new("suid");
    let out = fx.run(&[], "cp /bin/true suid; chmod 4755 suid; cp /bin/true keep; chmod 4711 keep; mkdir st; chmod 1777 st; stat -c %a suid");
    out.assert_code(0);
    assert_eq!(out.stdout, "4755\n", "{}", out.describe());
    let list = fx.list();
    let line = |name: &str| list.iter().find(|l| l.starts_with(&format!("A  P/{name}"))).cloned().unwrap_or_default();
    assert!(line("suid").contains("setuid"), "{list:#?}");
    assert!(line("keep").contains("setuid"), "{list:#?}");
    assert!(line("st").contains("sticky"), "{list:#?}");
    let mut c = capsule(&["layer", "review"]);
    c.arg(fx.layer_dir()).stdio(Stdio::null(), Stdio::piped(), Stdio::piped());
    let review = c.run();
    assert!(review.stderr.contains("setuid"), "{}", review.describe());
    let p = |n: &str| fx.p.join(n).display().to_string();
    let commit = fx.layer("commit", &[&p("suid"), &p("st")]);
    commit.assert_code(0);
    assert!(commit.stderr.contains("--keep-special-bits"), "{}", commit.describe());
    use std::os::unix::fs::MetadataExt;
    let mode = |n: &str| std::fs::symlink_metadata(fx.p.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("suid"), 0o755, "setuid committed without --keep-special-bits; {}", commit.describe());
    assert_eq!(mode("st"), 0o1777, "the sticky bit is kept");
    assert!(!fx.list().iter().any(|l| l.starts_with("A  P/suid")), "{:#?}", fx.list());
    let commit = fx.layer("commit", &["--keep-special-bits", &p("keep")]);
    commit.assert_code(0);
    assert_eq!(mode("keep"), 0o4711, "{}", commit.describe());
}

// ---------------------------------------------------------------- attacks on seccomp and the network

/// Every attempt named `prefix*` is CONTAINED with one of `errnos`, none
/// OPENED or ESCAPED, and there is one at least.
#[track_caller]
fn assert_contained(out: &Out, prefix: &str, errnos: &[&str]) {
    let r = report(&out.stdout);
    assert!(r.escaped.is_empty(), "ESCAPED: {:?}; {}", r.escaped, out.describe());
    assert!(r.done, "the program did not get to its end; {}", out.describe());
    let opened: Vec<_> = r.opened.iter().filter(|w| w.starts_with(prefix)).collect();
    assert!(opened.is_empty(), "{opened:?} succeeded (expected {errnos:?}); {}", out.describe());
    let hits: Vec<_> = r.contained.iter().filter(|(w, _)| w.starts_with(prefix)).collect();
    assert!(!hits.is_empty(), "no attempt `{prefix}*` reported; {}", out.describe());
    for (w, e) in hits {
        assert!(errnos.contains(&e.as_str()), "`{w}` failed with {e}, expected one of {errnos:?}; {}", out.describe());
    }
}

/// Skips when the kernel has no Landlock port rules (capsule refuses the
/// run then: it never runs one unrestricted).
fn port_rules_refused(test: &str, out: &Out) -> bool {
    if out.code == Some(125) && out.stderr.contains("6.7") {
        skip(test, "the kernel has no Landlock port rules (Linux < 6.7)");
        return true;
    }
    false
}

/// Under `--tcp-connect 1`, MPTCP (`socket(AF_INET, SOCK_STREAM,
/// IPPROTO_MPTCP)`) connected to a TCP listener on another port: Landlock's
/// rules cover IPPROTO_TCP only. MPTCP and SMC sockets now fail with
/// EPROTONOSUPPORT / EAFNOSUPPORT whenever a port rule is set, under
/// `none` too; plain TCP still gets Landlock's EACCES.
fn issue20_mptcp_port_rule(policy: &str) {
    require_hostile!("issue20_mptcp_port_rule");
    let _l = procs_shared();
    let out = attack_cmd(policy, &["--tcp-connect", "1"], &bin("guards"), &["mptcp"]).run();
    if port_rules_refused("issue20_mptcp_port_rule", &out) {
        return;
    }
    const PROTOS: &[&str] = &["EPROTONOSUPPORT", "EAFNOSUPPORT"];
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["socket"]),
            default_errnos: &[("mptcp", &["EPROTONOSUPPORT"]), ("smc", PROTOS)],
            exit_code: 0,
        },
    );
    if policy == "default" {
        assert!(out.stdout.contains("RULE tcp-connect EACCES"), "{}", out.describe());
        let out = attack_cmd("none", &["--tcp-connect", "1"], &bin("guards"), &["mptcp"]).run();
        assert_eq!(out.status(), "exited", "{}", out.describe());
        assert_contained(&out, "mptcp", &["EPROTONOSUPPORT"]);
        assert_contained(&out, "smc", PROTOS);
        // Without a port rule nothing changes for MPTCP.
        let out = attack_cmd("default", &[], &bin("guards"), &["mptcp"]).run();
        assert!(out.stdout.contains("RULE tcp-connect OK"), "{}", out.describe());
        assert!(!out.stdout.contains("mptcp-socket EPROTONOSUPPORT") || !host_has_mptcp(), "{}", out.describe());
    }
}
both_policies!(issue20_mptcp_port_rule);

fn host_has_mptcp() -> bool {
    // SAFETY: plain socket creation; the descriptor is closed at once.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 262) };
    if s >= 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(s) };
    }
    s >= 0
}

/// AF_VSOCK is not namespaced: a loopback-only run bound a host
/// vsock port (and on a VM could reach the hypervisor). Refused with
/// EAFNOSUPPORT unless the run shares the host's network.
fn issue20_vsock(policy: &str) {
    require_hostile!("issue20_vsock");
    let _l = procs_shared();
    let out = attack_cmd(policy, &[], &bin("guards"), &["vsock"]).run();
    check(
        &out,
        policy,
        &Expect { strict_kill: Some(&["socket"]), default_errnos: &[("vsock", &["EAFNOSUPPORT"])], exit_code: 0 },
    );
    if policy == "default" {
        // With the host's network the run has the host's vsock too.
        // SAFETY: plain socket creation; the descriptor is closed at once.
        let s = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0) };
        if s >= 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(s) };
            let out = attack_cmd(policy, &["--share-net"], &bin("guards"), &["vsock"]).run();
            assert!(!out.stdout.contains("vsock-socket EAFNOSUPPORT"), "{}", out.describe());
        }
    }
}
both_policies!(issue20_vsock);

/// RLIMIT_FSIZE does not cover blocks past the size: under
/// `--output-limit 1M`, `fallocate(FALLOC_FL_KEEP_SIZE)` (and its ioctl
/// `FS_IOC_RESVSP64`) reserved 16 MiB on a disk filesystem, and
/// `FALLOC_FL_INSERT_RANGE` grew the size past the limit. Refused with
/// EOPNOTSUPP under every policy, `none` included (and io_uring, whose
/// operations a filter cannot see, with ENOSYS); punching a hole works.
fn issue20_fallocate_keep_size(policy: &str) {
    require_hostile!("issue20_fallocate_keep_size");
    let _l = procs_shared();
    let dir = Scratch::new("hostile-keepsize");
    let file = dir.join("f").display().to_string();
    let opts = ["--writable", &dir.s(), "--output-limit", "1M"];
    let out = attack_cmd(policy, &opts, &bin("guards"), &["keepsize", &file]).run();
    check(
        &out,
        policy,
        &Expect {
            strict_kill: Some(&["openat", "fallocate", "ioctl"]),
            default_errnos: &[("keepsize-", &["EOPNOTSUPP"]), ("grow-insert-range", &["EOPNOTSUPP"])],
            exit_code: 0,
        },
    );
    if policy == "default" {
        assert!(out.stdout.contains("PUNCH OK"), "{}", out.describe());
        let out = attack_cmd("none", &opts, &bin("guards"), &["keepsize", &file]).run();
        assert_eq!(out.status(), "exited", "{}", out.describe());
        assert_contained(&out, "keepsize-", &["EOPNOTSUPP"]);
        assert_contained(&out, "grow-insert-range", &["EOPNOTSUPP"]);
        assert!(out.stdout.contains("PUNCH OK"), "{}", out.describe());
        let out = attack_cmd("none", &["--output-limit", "1M"], &bin("iouring"), &[]).run();
        assert_eq!(out.status(), "exited", "{}", out.describe());
        assert_contained(&out, "io_uring_setup", &["ENOSYS"]);
    }
}
both_policies!(issue20_fallocate_keep_size);

// ---------------------------------------------------------------- attacks on PID 1

/// Whether fusectl is mounted (capsule aborts stuck FUSE connections there).
fn fusectl_mounted() -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".to_string());
    }
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some("/sys/fs/fuse/connections") && l.split(' ').nth(2) == Some("fusectl"));
    if mounted {
        Ok(())
    } else {
        Err("fusectl is not mounted at /sys/fs/fuse/connections (mount -t fusectl fusectl /sys/fs/fuse/connections)"
            .into())
    }
}

/// The user's FUSE mount on the host (tests/hostile/fusehost.c), mounted
/// by root for the test user as fusermount3 would; unmounted on drop.
struct HostFuse {
    dir: PathBuf,
}

impl HostFuse {
    fn mount(dir: PathBuf) -> HostFuse {
        let out =
            Command::new(bin("fusehost")).arg(&dir).arg(h().uid.to_string()).arg(h().gid.to_string()).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("MOUNTED"), "fusehost did not mount {}: {said}", dir.display());
        HostFuse { dir }
    }

    /// `stat FILE` as the test user: Ok, or what stat said.
    fn stat_as_user(&self) -> Result<(), String> {
        let o = as_user(&["stat", "-c", "%s", &self.dir.join("file").display().to_string()]).output().unwrap();
        match o.status.success() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        }
    }
}

impl Drop for HostFuse {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string; the server exits once its mount is gone.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A run whose processes do not go within 200 ms of
/// being killed (here the stuck-FUSE trick of fusehang.c, on a mount of
/// its own) has PID 1 abort FUSE connections; the user's own FUSE mount on
/// the host, visible in the run, must not be one of them: after the run it
/// still answers (not "Transport endpoint is not connected").
#[test]
fn fuse_abort_spares_host_mounts() {
    require_hostile!("fuse_abort_spares_host_mounts");
    require!("fuse_abort_spares_host_mounts", require_root());
    require!("fuse_abort_spares_host_mounts", fusectl_mounted());
    let _l = procs_shared();
    let s = Scratch::new("hostfuse");
    let host = HostFuse::mount(s.mkdir("mnt"));
    host.stat_as_user().unwrap_or_else(|e| panic!("the host FUSE mount does not work before the run: {e}"));
    let marker = format!("capsule-fusehost-{}", std::process::id());
    let _unstick = UnstickOnDrop("fusehang");
    let mnt = host.dir.display().to_string();
    let opts = ["--dev-bind", "/dev/fuse", "/tmp/fuse", "--ro-bind", &mnt, &mnt, "--no-landlock", "--wall-time", "1s"];
    let started = Instant::now();
    let out =
        attack_cmd("default", &opts, &bin("fusehang"), &["/tmp/fuse", &marker]).timeout(Duration::from_secs(30)).run();
    assert!(out.stdout.contains("INFO fuse=open"), "the program did not get its FUSE file open; {}", out.describe());
    assert_eq!(out.json()["status"], "wall-time-limit", "{}", out.describe());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run took {:?} to end; {}",
        started.elapsed(),
        out.describe()
    );
    if let Err(e) = host.stat_as_user() {
        panic!("the user's FUSE mount on the host was aborted by the run: stat says {e:?}");
    }
}

/// A mount table line longer than
/// PID 1's buffer (fusehang.c's `long`: a tmpfs at a 17 KiB path, mounted
/// before its FUSE mount) used to end PID 1's scan of that table, so the
/// stuck connection behind it was never aborted and the run never ended.
#[test]
fn fuse_stuck_behind_long_mount_line() {
    require_hostile!("fuse_stuck_behind_long_mount_line");
    require!("fuse_stuck_behind_long_mount_line", fusectl_mounted());
    let _l = procs_shared();
    let marker = format!("capsule-fuselong-{}", std::process::id());
    let _unstick = UnstickOnDrop("fusehang");
    let opts = ["--dev-bind", "/dev/fuse", "/tmp/fuse", "--no-landlock", "--wall-time", "1s"];
    let started = Instant::now();
    let args = ["/tmp/fuse", marker.as_str(), "long"];
    let out = attack_cmd("default", &opts, &bin("fusehang"), &args).timeout(Duration::from_secs(20)).run();
    assert!(out.stdout.contains("INFO fuse=open"), "the program did not get its FUSE file open; {}", out.describe());
    assert_eq!(out.json()["status"], "wall-time-limit", "{}", out.describe());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run took {:?} to end; {}",
        started.elapsed(),
        out.describe()
    );
}

/// Runs tests/hostile/nsbomb.c (`what`: `user` or `inotify`, at most `cap`)
/// in a run with `opts`; returns the run, still holding what it took, and
/// its `HELD n=N stop=ERRNO` as (N, ERRNO).
fn nsbomb(what: &str, cap: u32, opts: &[&str]) -> (Running, ChildStdin, u64, String) {
    let mut c = attack_cmd("default", opts, &bin("nsbomb"), &[what, &cap.to_string()]);
    let mut run = c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).spawn();
    let stdin = run.child.stdin.take().unwrap();
    let line = run.wait_line("HELD", Duration::from_secs(60));
    let field = |k: &str| line.split(' ').find_map(|w| w.strip_prefix(k)).unwrap_or_default().trim().to_string();
    let n = field("n=").parse().unwrap_or_else(|_| panic!("bad line {line:?}"));
    (run, stdin, n, field("stop="))
}

/// The program's user namespaces stop at
/// `limits.nested_namespaces` (256) with ENOSPC, counted in the run's own
/// user namespace; while it holds them, the user can still create user
/// namespaces and start another `capsule run`. (Before, the run could take
/// the user's whole host-wide allowance, ~96k: the program stops at 1024
/// so as not to do that to the machine's other tests.) `0` leaves it none.
#[test]
fn nested_namespaces_bounded() {
    require_hostile!("nested_namespaces_bounded");
    let _l = procs_shared();
    let (run, stdin, n, stop) = nsbomb("user", 1024, &["--wall-time", "60s"]);
    assert_eq!(
        (n, stop.as_str()),
        (capsule::spec::NESTED_NAMESPACES, "ENOSPC"),
        "the program's user namespaces were not bounded at limits.nested_namespaces; lines {:?}",
        run.seen()
    );
    let o = as_user(&["unshare", "-Ur", "true"]).output().unwrap();
    assert!(o.status.success(), "the user cannot create a user namespace while the run holds its: {o:?}");
    let other = capsule(&["run", "-q", "--", "/bin/true"]).run();
    other.assert_code(0);
    drop(stdin);
    let out = run.wait();
    assert!(out.stdout.contains("DONE"), "{}", out.describe());
    let (run, stdin, n, stop) = nsbomb("user", 16, &["--nested-namespaces", "0"]);
    assert_eq!((n, stop.as_str()), (0, "ENOSPC"), "--nested-namespaces 0; lines {:?}", run.seen());
    drop(stdin);
    run.wait().assert_code(0);
}

/// The program's inotify instances stop at
/// `limits.inotify_instances` (8) with EMFILE; while it holds them, the
/// user outside can still create one. (Before, a run could take all 128
/// of the user's; the program stops at 64.) `--inotify-instances 3` is
/// obeyed; a value the kernel cannot take is an error naming the field.
#[test]
fn inotify_instances_bounded() {
    require_hostile!("inotify_instances_bounded");
    let _l = procs_shared();
    let (run, stdin, n, stop) = nsbomb("inotify", 64, &[]);
    assert_eq!(
        (n, stop.as_str()),
        (capsule::spec::INOTIFY_INSTANCES, "EMFILE"),
        "the program's inotify instances were not bounded at limits.inotify_instances; lines {:?}",
        run.seen()
    );
    let o = as_user(&[bin("nsbomb").as_str(), "inotify", "1"]).stdin(Stdio::null()).output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("HELD n=1 stop=CAP"),
        "the user cannot create an inotify instance while the run holds its: {said}"
    );
    drop(stdin);
    let out = run.wait();
    assert!(out.stdout.contains("DONE"), "{}", out.describe());
    let (run, stdin, n, stop) = nsbomb("inotify", 16, &["--inotify-instances", "3"]);
    assert_eq!((n, stop.as_str()), (3, "EMFILE"), "--inotify-instances 3; lines {:?}", run.seen());
    drop(stdin);
    run.wait().assert_code(0);
    let out = capsule(&["run", "-q", "--inotify-watches", "4294967296", "--", "/bin/true"]).run();
    assert!(out.code != Some(0) && out.stderr.contains("limits.inotify_watches"), "{}", out.describe());
}

// ---- Attacks on serve

/// A FIFO named by a request (its stdin, its stdout, a
/// read-once input, a write-once output, a `file` mount's source, a
/// seccomp policy file) never stops `capsule serve`: that request gets an
/// error naming the path and saying it is a FIFO, and an ordinary request
/// sent right after it is answered within seconds (the old server blocked
/// its one event loop in open(2), so every client waited).
#[test]
fn serve_fifo_spec_paths_never_block() {
    require!("serve_fifo_spec_paths_never_block", userns_available());
    let dir = Scratch::new("fifo");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
    chown_to_user(&fifo);
    let f = fifo.display().to_string();
    let t = Duration::from_secs(10);
    let mut s = Serve::start(&[]);
    s.still_serves("warm-up");
    let cases = [
        ("stdin", json!({"argv": ["/bin/true"], "stdin": f})),
        ("stdout", json!({"argv": ["/bin/true"], "stdout": f})),
        ("stdin-pipe", json!({"argv": ["/bin/true"], "stdin": {"pipe": f}})),
        ("stdout-pipe", json!({"argv": ["/bin/true"], "stdout": {"pipe": f}})),
        ("file-mount", json!({"argv": ["/bin/true"], "mounts": [{"type": "file", "src": f, "dst": "/tmp/x"}]})),
        ("seccomp-file", json!({"argv": ["/bin/true"], "seccomp": f})),
    ];
    for (id, spec) in cases {
        let next = format!("{id}-next");
        s.request(json!(id), spec);
        s.request(json!(next), json!({"argv": ["/bin/true"]}));
        let r = s.response(&json!(next), t);
        assert_eq!(r["result"]["status"], "exited", "the request after the FIFO {id}: {r}");
        let v = s.response(&json!(id), t);
        let e = v.get("error").and_then(Value::as_str).unwrap_or_else(|| panic!("a FIFO as {id} was accepted: {v}"));
        assert!(
            e.contains(&f) && e.contains("FIFO"),
            "the error for a FIFO as {id} does not name the path and the FIFO: {e}"
        );
    }
    // A layer whose lock file (or record of roots) is a FIFO.
    let layer = dir.join("layer");
    let l = layer.display().to_string();
    s.request(json!("layer"), json!({"argv": ["/bin/true"], "layers": [l]}));
    let r = s.response(&json!("layer"), t);
    assert_eq!(r["result"]["status"], "exited", "a run with a new layer: {r}");
    for name in ["roots", "layer.lock"] {
        let p = layer.join(name);
        std::fs::remove_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let c = std::ffi::CString::new(p.display().to_string()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
        chown_to_user(&p);
        let next = format!("{name}-next");
        s.request(json!(name), json!({"argv": ["/bin/true"], "layers": [l]}));
        s.request(json!(next), json!({"argv": ["/bin/true"]}));
        let r = s.response(&json!(next), t);
        assert_eq!(r["result"]["status"], "exited", "the request after the layer with a FIFO {name}: {r}");
        let v = s.response(&json!(name), t);
        if name == "layer.lock" {
            let e = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("a FIFO as layer.lock was accepted: {v}"));
            assert!(e.contains("layer.lock") && e.contains("FIFO"), "the error for a FIFO as layer.lock: {e}");
        }
    }
    s.finish().assert_code(0);
}
