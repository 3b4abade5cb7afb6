//! `capsule serve`: the JSON-lines protocol on stdin/stdout and on a Unix
//! socket (`--listen`), requests pipelined with ids of any JSON type,
//! results in any order, the runs' stdio kept off the protocol stream
//! (`/dev/null`, files, captures), cancel and kill, malformed requests,
//! clients going away, the server killed, and 10,000 runs through one
//! server without growth (100,000 with `CAPSULE_TEST_LONG=1`).
//!
//! `capsule serve` is itself the supervisor: the process the harness spawns
//! (setpriv execs it) is the one whose fds, memory, threads, mounts and
//! children are measured.
//!
//! The tests that check that no process of the test user is left take
//! [`procs_exclusive`]; all others take [`procs_shared`].

use capsule_testkit as common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// How long any one response may take (the VM is slow).
const T: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- protocol clients

/// One end of the protocol: a line writer and a line reader.
trait Conn {
    fn write_raw(&mut self, bytes: &[u8]);
    /// The next line, or `None` after `t` or at EOF.
    fn read_line(&mut self, t: Duration) -> Option<String>;
    /// Responses read while looking for another one.
    fn buffered(&mut self) -> &mut Vec<Value>;
    /// Every line read so far, for failure messages.
    fn transcript(&self) -> String;

    fn send(&mut self, v: &Value) {
        let mut s = v.to_string();
        s.push('\n');
        self.write_raw(s.as_bytes());
    }

    fn request(&mut self, id: Value, spec: Value) {
        self.send(&json!({ "id": id, "spec": spec }));
    }

    /// The next response (buffered ones first), or `None` after `t`.
    fn try_recv(&mut self, t: Duration) -> Option<Value> {
        if !self.buffered().is_empty() {
            return Some(self.buffered().remove(0));
        }
        let line = self.read_line(t)?;
        Some(parse_response(&line, || self.transcript()))
    }

    /// The next response; panics after `t`.
    #[track_caller]
    fn recv(&mut self, t: Duration) -> Value {
        match self.try_recv(t) {
            Some(v) => v,
            None => panic!("no response within {t:?}; lines so far:\n{}", self.transcript()),
        }
    }

    /// The response with this id (others are kept for later); panics after `t`.
    #[track_caller]
    fn recv_id(&mut self, id: &Value, t: Duration) -> Value {
        if let Some(i) = self.buffered().iter().position(|v| &v["id"] == id) {
            return self.buffered().remove(i);
        }
        let deadline = Instant::now() + t;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(line) = self.read_line(left) else {
                panic!("no response with id {id} within {t:?}; lines so far:\n{}", self.transcript())
            };
            let v = parse_response(&line, || self.transcript());
            if &v["id"] == id {
                return v;
            }
            self.buffered().push(v);
        }
    }

    /// The result of run `id` (panics on an error response).
    #[track_caller]
    fn result(&mut self, id: &Value, t: Duration) -> Value {
        let v = self.recv_id(id, t);
        match v.get("result") {
            Some(r) if r.is_object() => r.clone(),
            _ => panic!("expected a result for id {id}, got {v}; lines so far:\n{}", self.transcript()),
        }
    }

    /// The error text of the response to `id` (panics on a result).
    #[track_caller]
    fn error(&mut self, id: &Value, t: Duration) -> String {
        let v = self.recv_id(id, t);
        error_text(&v).unwrap_or_else(|| panic!("expected an error for id {id}, got {v}"))
    }

    /// Runs `spec` and returns its result.
    #[track_caller]
    fn run(&mut self, id: Value, spec: Value) -> Value {
        self.request(id.clone(), spec);
        self.result(&id, T)
    }
}

/// Parses a response line: a JSON object with an `id` and exactly one of
/// `result`, `error`, `ok`. `transcript` describes the lines so far, for
/// the failure message only (built only then: it grows with every line).
#[track_caller]
fn parse_response(line: &str, transcript: impl FnOnce() -> String) -> Value {
    let v: Value = match serde_json::from_str(line.trim_end_matches('\n')) {
        Ok(v) => v,
        Err(e) => panic!("protocol stream corrupted: line {line:?} is not JSON ({e}); lines so far:\n{}", transcript()),
    };
    let o = v.as_object().unwrap_or_else(|| panic!("response is not an object: {line}"));
    assert!(o.contains_key("id"), "response without an id: {line}");
    let kinds = ["result", "error", "ok", "ask", "answer_refused"].iter().filter(|k| o.contains_key(**k)).count();
    assert_eq!(kinds, 1, "a response has exactly one of result, error, ok, ask, answer_refused: {line}");
    v
}

/// The last lines of a transcript (failure messages stay readable).
fn tail(lines: &[String]) -> String {
    let from = lines.len().saturating_sub(40);
    let mut s = if from > 0 { format!("[{from} earlier lines]\n") } else { String::new() };
    s.push_str(&lines[from..].concat());
    s
}

fn error_text(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    let s = e.as_str().unwrap_or_else(|| panic!("`error` is not a string: {v}"));
    assert!(!s.trim().is_empty(), "empty error message: {v}");
    Some(s.to_string())
}

/// `--per-cpu` when `CAPSULE_TEST_PER_CPU=1`: scripts/test.sh runs the
/// protocol's tests once more through the per-CPU front
/// (`capsule serve --per-cpu`), which must answer exactly as one supervisor.
fn per_cpu() -> &'static [&'static str] {
    match std::env::var("CAPSULE_TEST_PER_CPU").as_deref() {
        Ok("1") => &["--per-cpu"],
        _ => &[],
    }
}

/// `capsule serve ARGS` with the protocol on its stdin/stdout.
struct Serve {
    run: Running,
    stdin: Option<ChildStdin>,
    pending: Vec<Value>,
}

fn serve(args: &[&str]) -> Serve {
    let mut c = capsule(&["serve"]);
    c.args(per_cpu())
        .args(args)
        .stdio(Stdio::piped(), Stdio::piped(), Stdio::piped())
        .timeout(Duration::from_secs(300));
    serve_cmd(c)
}

fn serve_cmd(mut c: Cmd) -> Serve {
    let mut run = c.spawn();
    let stdin = run.child.stdin.take();
    Serve { run, stdin, pending: Vec::new() }
}

impl Serve {
    fn pid(&self) -> i32 {
        self.run.pid()
    }

    /// Closes stdin (EOF: the server finishes the accepted runs and exits).
    fn close(&mut self) {
        self.stdin = None;
    }

    /// Writes `data` from another thread, so that a server that stops
    /// reading fails the test after `limit` instead of blocking it.
    #[track_caller]
    fn write_big(&mut self, data: Vec<u8>, limit: Duration) {
        let len = data.len();
        let mut w = self.stdin.take().expect("stdin already closed");
        let writer = std::thread::spawn(move || w.write_all(&data).and_then(|_| w.flush()).map(|_| w));
        let deadline = Instant::now() + limit;
        while !writer.is_finished() {
            assert!(
                Instant::now() < deadline,
                "capsule serve stopped reading a {len}-byte line; lines so far:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        match writer.join().unwrap() {
            Ok(w) => self.stdin = Some(w),
            Err(e) => panic!("writing a long line to capsule serve: {e}; lines so far:\n{}", self.transcript()),
        }
    }

    /// Closes stdin and waits for the server to exit; the remaining lines
    /// must be responses too.
    fn finish(mut self) -> Out {
        self.close();
        let out = self.run.wait();
        for l in out.stdout.lines() {
            serde_json::from_str::<Value>(l)
                .unwrap_or_else(|e| panic!("protocol stream corrupted: {l:?} is not JSON ({e}); {}", out.describe()));
        }
        out
    }
}

impl Conn for Serve {
    fn write_raw(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin already closed");
        if let Err(e) = w.write_all(bytes).and_then(|_| w.flush()) {
            let st = self.run.child.try_wait().ok().flatten();
            panic!("writing to capsule serve: {e} (exit status {st:?}); lines so far:\n{}", self.transcript());
        }
    }
    fn read_line(&mut self, t: Duration) -> Option<String> {
        self.run.next_line(t)
    }
    fn buffered(&mut self) -> &mut Vec<Value> {
        &mut self.pending
    }
    fn transcript(&self) -> String {
        tail(self.run.seen())
    }
}

/// A client connection to `capsule serve --listen PATH`.
struct Sock {
    stream: UnixStream,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    pending: Vec<Value>,
}

impl Sock {
    fn connect(path: &Path) -> Sock {
        let stream = connect_as_user(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        let reader = stream.try_clone().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if tx.send(line.clone()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        Sock { stream, lines: rx, seen: Vec::new(), pending: Vec::new() }
    }
}

impl Drop for Sock {
    /// Closes the connection (the reader thread's clone of the stream would
    /// otherwise keep it open).
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl Conn for Sock {
    fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap_or_else(|e| panic!("writing to the socket: {e}"));
    }
    fn read_line(&mut self, t: Duration) -> Option<String> {
        let l = self.lines.recv_timeout(t).ok()?;
        self.seen.push(l.clone());
        Some(l)
    }
    fn buffered(&mut self) -> &mut Vec<Value> {
        &mut self.pending
    }
    fn transcript(&self) -> String {
        tail(&self.seen)
    }
}

/// Connects to `path` as the capsule user: `serve --listen` serves only
/// processes of its own user. From a thread of its own, whose ids alone
/// the raw set*id calls change (glibc's wrappers would change every
/// thread's); the connection outlives it.
fn connect_as_user(path: &Path) -> std::io::Result<UnixStream> {
    if !h().is_root {
        return UnixStream::connect(path);
    }
    let (uid, gid, path) = (h().uid, h().gid, path.to_path_buf());
    std::thread::spawn(move || {
        // SAFETY: system calls with integer arguments and a null list.
        let ok = unsafe {
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
        };
        assert!(ok, "setting the thread's ids: {}", std::io::Error::last_os_error());
        UnixStream::connect(&path)
    })
    .join()
    .expect("the connecting thread")
}

/// Starts `capsule serve --listen <dir>/sock ARGS` and waits for the socket.
fn listen(dir: &Scratch, args: &[&str]) -> (Serve, PathBuf) {
    let path = dir.join("sock");
    let mut c = capsule(&["serve", "--listen", path.to_str().unwrap()]);
    c.args(per_cpu()).args(args).stdio(Stdio::null(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(300));
    let mut s = serve_cmd(c);
    let deadline = Instant::now() + T;
    while UnixStream::connect(&path).is_err() {
        assert!(s.run.alive(), "capsule serve --listen exited before listening");
        assert!(Instant::now() < deadline, "{} did not accept connections within {T:?}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    (s, path)
}

// ---------------------------------------------------------------- helpers

/// A `sleep` argument unique on the machine (`1000.<digits>`), to find the
/// run's process on the host.
fn sleep_marker() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("1000.{}{}{:09}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos)
}

fn sh(script: &str) -> Value {
    json!({ "argv": ["/bin/sh", "-c", script] })
}

fn with(mut v: Value, key: &str, x: Value) -> Value {
    v.as_object_mut().unwrap().insert(key.into(), x);
    v
}

#[track_caller]
fn assert_exited(r: &Value, code: i64) {
    assert_eq!(r["status"], "exited", "{r}");
    assert_eq!(r["exit_code"], code, "{r}");
}

#[track_caller]
fn f64_of(r: &Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or_else(|| panic!("`{k}` is not a number: {r}"))
}

fn true_spec() -> Value {
    json!({ "argv": ["/bin/true"] })
}

// ---------------------------------------------------------------- requests and responses

/// `{"argv": ["/bin/true"]}` alone is a valid spec; pipelined requests with
/// ids of every JSON type come back with exactly those ids; EOF on stdin
/// ends the server with status 0.
#[test]
fn serve_minimal_spec_and_ids() {
    require!("serve_minimal_spec_and_ids", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    let ids = [
        json!(1),
        json!("two"),
        json!({"k": [1, "x"], "n": null}),
        json!(-7),
        json!([1, 2, 3]),
        json!(18446744073709551615u64),
        json!(true),
        json!("1"),
    ];
    for id in &ids {
        s.request(id.clone(), true_spec());
    }
    let mut got = Vec::new();
    for _ in &ids {
        let v = s.recv(T);
        let r = v.get("result").unwrap_or_else(|| panic!("not a result: {v}"));
        assert_exited(r, 0);
        for k in ["wall_time_ms", "cpu_user_ms", "cpu_system_ms", "peak_memory_bytes"] {
            f64_of(r, k);
        }
        assert!(r.get("stdout").map(Value::is_null).unwrap_or(true), "stdout captured without asking: {r}");
        got.push(v["id"].clone());
    }
    for id in &ids {
        let n = got.iter().filter(|g| *g == id).count();
        assert_eq!(n, 1, "id {id} came back {n} times: {got:?}");
    }
    assert!(s.try_recv(Duration::from_millis(300)).is_none(), "an extra response");
    let pid = s.pid();
    assert!(proc_comm(pid).starts_with("capsule"), "the spawned process is not capsule: {}", proc_comm(pid));
    let out = s.finish();
    out.assert_code(0);
}

/// With `--parallel 2` a quick run sent after a slow one is answered first;
/// both results are right.
#[test]
fn serve_results_in_any_order() {
    require!("serve_results_in_any_order", userns_available());
    let _l = procs_shared();
    let mut s = serve(&["--parallel", "2"]);
    s.run(json!("warm-up"), true_spec());
    s.request(json!("slow"), json!({"argv": ["/bin/sleep", "1"]}));
    s.request(json!("quick"), true_spec());
    let first = s.recv(T);
    assert_eq!(first["id"], "quick", "the quick run waited for the slow one: {first}");
    assert_exited(&first["result"], 0);
    let slow = s.result(&json!("slow"), T);
    assert_exited(&slow, 0);
    let wall = f64_of(&slow, "wall_time_ms");
    assert!(wall >= 990.0, "sleep 1 took {wall} ms: {slow}");
    s.finish().assert_code(0);
}

/// `--parallel N` runs up to N at once, no more: three 1 s sleeps take 2 s
/// with N = 2 (not 1 s, not 3 s); with the default (1), two take 2 s.
#[test]
fn serve_parallel_limit() {
    require!("serve_parallel_limit", userns_available());
    let _l = procs_shared();
    for (args, n, min, max) in [(&["--parallel", "2"][..], 3, 2.0, 2.8), (&[][..], 2, 2.0, 2.8)] {
        let mut s = serve(args);
        s.run(json!("warm-up"), true_spec());
        let t0 = Instant::now();
        for i in 0..n {
            s.request(json!(i), json!({"argv": ["/bin/sleep", "1"]}));
        }
        for i in 0..n {
            assert_exited(&s.result(&json!(i), T), 0);
        }
        let took = t0.elapsed().as_secs_f64();
        eprintln!("serve {args:?}: {n} runs of sleep 1 took {took:.2} s");
        assert!(took >= min, "serve {args:?}: {n} × sleep 1 took {took:.2} s: more than N at once");
        assert!(took < max, "serve {args:?}: {n} × sleep 1 took {took:.2} s: fewer than N at once");
        s.finish().assert_code(0);
    }
}

/// A run's stdin, stdout and stderr default to /dev/null: output never
/// reaches the protocol stream (nor capsule's stderr), a program reading
/// stdin gets EOF at once and does not eat the next requests.
#[test]
fn serve_stdio_defaults_to_dev_null() {
    require!("serve_stdio_defaults_to_dev_null", userns_available());
    let _l = procs_shared();
    let marker = unique("not-json");
    let mut s = serve(&[]);
    let r = s.run(
        json!("noisy"),
        sh(&format!("echo '{marker}-out'; echo '{marker}-err' >&2; printf '{{\"id\": \"forged\", \"ok\": true}}\\n'")),
    );
    assert_exited(&r, 0);
    // `cat` reads stdin: it must see EOF, not the requests that follow.
    s.request(json!("cat"), json!({"argv": ["/bin/cat"]}));
    s.request(json!("after-cat"), true_spec());
    assert_exited(&s.result(&json!("cat"), T), 0);
    assert_exited(&s.result(&json!("after-cat"), T), 0);
    // What the shell's own streams are, seen from inside: the null device
    // (1:3). (A redirection would change them: `| cat >&2` runs in a child.)
    let stat = |fds: &str| format!("for fd in {fds}; do stat -L -c '%F %t:%T' /proc/$$/fd/$fd; done");
    let r = s.run(json!("links"), with(sh(&stat("0 2")), "stdout", json!({"capture": 4096})));
    assert_exited(&r, 0);
    assert_eq!(
        r["stdout"]["text"], "character special file 1:3\ncharacter special file 1:3\n",
        "stdin and stderr: {r}"
    );
    let r =
        s.run(json!("links-out"), with(sh(&format!("{} | cat >&2", stat("1"))), "stderr", json!({"capture": 4096})));
    assert_exited(&r, 0);
    assert_eq!(r["stderr"]["text"], "character special file 1:3\n", "stdout: {r}");
    let out = s.finish();
    out.assert_code(0);
    assert!(!out.stdout.contains(&marker), "program output on the protocol stream; {}", out.describe());
    assert!(!out.stdout.contains("forged"), "program output on the protocol stream; {}", out.describe());
    assert!(!out.stderr.contains(&marker), "program output on capsule's stderr; {}", out.describe());
}

/// Two runs of one server at once: by default each has a
/// loopback network of its own, so the second cannot connect to the port
/// the first listens on; with `--shared-network` it can (the one network
/// of the server, the control that the probe reaches a listener at all).
#[test]
fn serve_lends_kept_networks_one_run_at_a_time() {
    require!("serve_lends_kept_networks_one_run_at_a_time", userns_available());
    let _l = procs_shared();
    let net_of = |r: &Value| {
        let text = r["stdout"]["text"].as_str().unwrap_or("").to_string();
        text.lines().find_map(|l| l.strip_prefix("ns.net=")).map(str::to_string).unwrap_or_else(|| panic!("{text}"))
    };
    for (args, fresh) in [(&["--parallel", "1"][..], false), (&["--parallel", "1", "--fresh-network"][..], true)] {
        let mut s = serve(args);
        let mut seen = Vec::new();
        for i in 0..8 {
            let r = s.run(json!(i), json!({"argv": [probe(), "ns-inodes"], "stdout": {"capture": 4096}}));
            assert_exited(&r, 0);
            seen.push(net_of(&r));
            // Kept: time for the keeper, a batch thread, to check the network handed back (on a
            // machine loaded by the other tests it may not run between runs sent back to back).
            // Not with fresh networks: a freed namespace's inode number is given to the next.
            if !fresh {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        match fresh {
            true => assert_eq!(distinct.len(), seen.len(), "--fresh-network: a network used twice: {seen:?}"),
            // (A PID 1 prepared while every kept one is in use or being checked makes its own.)
            false => assert!(distinct.len() < seen.len(), "no kept network lent again: {seen:?}"),
        }
        s.finish().assert_code(0);
    }
}

#[test]
fn serve_lends_no_network_a_run_left_a_socket_in() {
    require!("serve_lends_no_network_a_run_left_a_socket_in", userns_available());
    let _l = procs_shared();
    let mut s = serve(&["--parallel", "1"]);
    for round in 0..4 {
        // A listener that outlives its run, in flight in a Unix socket cycle.
        let r = s.run(
            json!(format!("leak-{round}")),
            json!({"argv": [probe(), "leak-tcp", "47127"], "stdout": {"capture": 4096}}),
        );
        assert_exited(&r, 0);
        let text = r["stdout"]["text"].as_str().unwrap_or("");
        assert!(text.contains("listen=ok") && text.contains("leak=ok"), "round {round}: {text}");
        for i in 0..3 {
            let r = s.run(
                json!(format!("connect-{round}-{i}")),
                json!({"argv": [probe(), "connect-tcp", "127.0.0.1:47127"], "stdout": {"capture": 4096}}),
            );
            let text = r["stdout"]["text"].as_str().unwrap_or("");
            assert!(
                text.contains("connect=ECONNREFUSED\n"),
                "round {round}, run {i}: a later run reached the listener an earlier one left: {text:?}"
            );
        }
    }
    s.finish().assert_code(0);
}

#[test]
fn serve_concurrent_runs_have_their_own_network() {
    require!("serve_concurrent_runs_have_their_own_network", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("serve-net");
    for (args, expect) in
        [(&["--parallel", "2"][..], "ECONNREFUSED"), (&["--parallel", "2", "--shared-network"][..], "ok")]
    {
        let mut s = serve(args);
        s.run(json!("warm-up"), true_spec());
        let log = dir.join(&format!("listen-{expect}.out"));
        s.request(json!("listen"), json!({"argv": [probe(), "listen-tcp", "47125", "4000"], "stdout": log}));
        let deadline = Instant::now() + T;
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("listen=") {
            assert!(
                Instant::now() < deadline,
                "serve {args:?}: the listener did not start; lines so far:\n{}",
                s.transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let listened = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(listened.contains("listen=ok"), "serve {args:?}: the listener: {listened}");
        let r = s.run(
            json!("connect"),
            json!({"argv": [probe(), "connect-tcp", "127.0.0.1:47125"], "stdout": {"capture": 4096}}),
        );
        assert_exited(&r, 0);
        let text = r["stdout"]["text"].as_str().unwrap_or("");
        assert!(
            text.contains(&format!("connect={expect}\n")),
            "serve {args:?}: a concurrent run's connect: {text:?} (expected {expect})"
        );
        assert_exited(&s.result(&json!("listen"), T), 0);
        s.finish().assert_code(0);
    }
}

/// A spec's stdin/stdout/stderr may name files (opened by the supervisor as
/// the caller); a file that cannot be opened is an error response naming it.
#[test]
fn serve_stdio_files() {
    require!("serve_stdio_files", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("serve-files");
    let input = dir.write("in.txt", b"hello file\n");
    let (o, e) = (dir.join("out.txt"), dir.join("err.txt"));
    let mut s = serve(&[]);
    let mut spec = sh("tr a-z A-Z; echo err-line >&2");
    spec["stdin"] = json!(input);
    spec["stdout"] = json!(o);
    spec["stderr"] = json!(e);
    assert_exited(&s.run(json!(1), spec), 0);
    assert_eq!(std::fs::read_to_string(&o).unwrap_or_default(), "HELLO FILE\n");
    assert_eq!(std::fs::read_to_string(&e).unwrap_or_default(), "err-line\n");
    assert_eq!(std::fs::metadata(&o).unwrap().uid(), h().uid, "stdout file not created as the caller");
    // A directory the caller cannot write to.
    let locked = dir.join("locked");
    std::fs::create_dir(&locked).unwrap();
    if h().is_root {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    } else {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let bad = locked.join("out.txt");
    s.request(json!(2), with(true_spec(), "stdout", json!(bad)));
    let err = s.error(&json!(2), T);
    assert!(err.contains(bad.to_str().unwrap()), "the error does not name the file: {err}");
    assert!(!bad.exists());
    // A missing stdin file.
    let missing = dir.join("missing.txt");
    s.request(json!(3), with(true_spec(), "stdin", json!(missing)));
    let err = s.error(&json!(3), T);
    assert!(err.contains("missing.txt"), "the error does not name the file: {err}");
    assert_exited(&s.run(json!(4), true_spec()), 0);
    s.finish().assert_code(0);
}

/// `{"capture": N}`: the first N bytes, the total written and whether it was
/// truncated; output past N is drained (the program is not blocked).
#[test]
fn serve_capture() {
    require!("serve_capture", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    let mut spec = sh("printf 0123456789abcdefghij; printf EE >&2");
    spec["stdout"] = json!({"capture": 10});
    spec["stderr"] = json!({"capture": "64K"});
    let r = s.run(json!("small"), spec);
    assert_exited(&r, 0);
    assert_eq!(r["stdout"], json!({"text": "0123456789", "bytes": 20, "truncated": true}), "{r}");
    assert_eq!(r["stderr"], json!({"text": "EE", "bytes": 2, "truncated": false}), "{r}");
    // Exactly N bytes: not truncated.
    let r = s.run(json!("exact"), with(sh("printf 0123456789"), "stdout", json!({"capture": 10})));
    assert_eq!(r["stdout"], json!({"text": "0123456789", "bytes": 10, "truncated": false}), "{r}");
    // 1 MiB into a 1 KiB capture: drained, not blocked, not SIGPIPE'd.
    let r = s.run(json!("big"), with(sh("yes | head -c 1048576; echo done >&2"), "stdout", json!({"capture": "1K"})));
    assert_exited(&r, 0);
    assert_eq!(r["stdout"]["bytes"], 1048576, "{r}");
    assert_eq!(r["stdout"]["truncated"], true, "{r}");
    assert_eq!(r["stdout"]["text"].as_str().unwrap_or(""), "y\n".repeat(512), "{r}");
    // Nothing written.
    let r = s.run(json!("none"), with(true_spec(), "stdout", json!({"capture": 100})));
    assert_eq!(r["stdout"], json!({"text": "", "bytes": 0, "truncated": false}), "{r}");
    // Only what was asked for is captured.
    assert!(r.get("stderr").map(Value::is_null).unwrap_or(true), "{r}");
    s.finish().assert_code(0);
}

/// A PID 1 prepared ahead holds its sources as resolved then: a run uses
/// it only while every bind and `file` source still resolves to the same
/// object (and the copied file is unchanged), else a fresh one is built,
/// which sees the host as it is now, or reports a source it now refuses
/// (a link of the user's swapped in).
#[test]
fn serve_spares_follow_the_host() {
    require!("serve_spares_follow_the_host", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("spares");
    dir.mkdir("src");
    dir.write("src/marker", b"ONE\n");
    dir.write("f", b"F1\n");
    let mut spec = sh("cat /mnt/marker /tmp/f");
    spec["mounts"] = json!([
        {"type": "ro-bind", "src": dir.join("src"), "dst": "/mnt"},
        {"type": "file", "src": dir.join("f"), "dst": "/tmp/f"},
    ]);
    spec["stdout"] = json!({"capture": 100});
    let mut s = serve(&["--parallel", "2"]);
    let run = |s: &mut Serve, id: &str, want: &str| {
        let r = s.run(json!(id), spec.clone());
        assert_exited(&r, 0);
        assert_eq!(r["stdout"]["text"], want, "{id}: {r}");
        // Time to prepare the spares of this shape.
        std::thread::sleep(Duration::from_millis(300));
    };
    run(&mut s, "first", "ONE\nF1\n");
    run(&mut s, "same", "ONE\nF1\n");
    // Another directory at the source's path.
    std::fs::rename(dir.join("src"), dir.join("old")).unwrap();
    dir.mkdir("src");
    dir.write("src/marker", b"TWO\n");
    run(&mut s, "replaced", "TWO\nF1\n");
    // The copied file rewritten in place (same inode and size).
    dir.write("f", b"F2\n");
    run(&mut s, "rewritten", "TWO\nF2\n");
    // A link of the user's at the source's path: refused, naming it.
    std::fs::rename(dir.join("src"), dir.join("new")).unwrap();
    std::os::unix::fs::symlink(dir.join("old"), dir.join("src")).unwrap();
    if h().is_root {
        std::os::unix::fs::lchown(dir.join("src"), Some(h().uid), Some(h().gid)).unwrap();
    }
    s.request(json!("link"), spec.clone());
    let v = s.recv_id(&json!("link"), T);
    let e = v.get("error").or_else(|| v["result"].get("error")).and_then(Value::as_str).unwrap_or_default().to_string();
    assert!(e.contains("is a symbolic link") && e.contains("--symlink"), "not refused: {v}");
    s.finish().assert_code(0);
}

/// A supervisor keeps its last plan per tree and, for the next run that
/// asks for the same tree, checks its sources against the host instead of
/// planning again (docs/latency.md, "The plan kept"): a default secret that
/// appears in the home, or one that goes, between runs or between runs
/// sent at once, is hidden or shown exactly as a fresh plan would.
#[test]
fn serve_kept_plans_follow_the_secrets() {
    require!("serve_kept_plans_follow_the_secrets", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("kept-plan");
    let home = dir.mkdir("home");
    // Directories that changed within 2 s cannot vouch for what is missing in them: let the home settle.
    std::thread::sleep(Duration::from_millis(2200));
    let h = home.display();
    let script = format!(
        "for p in {h}/.netrc {h}/.ssh; do if [ -d $p ]; then echo \"$p: dir [$(ls -A $p)]\"; \
         elif [ -e $p ]; then echo \"$p: file [$(cat $p)]\"; else echo \"$p: missing\"; fi; done"
    );
    let mut spec = sh(&script);
    spec["stdout"] = json!({"capture": 1000});
    let mut c = capsule(&["serve"]);
    c.args(&["--parallel", "1"])
        .stdio(Stdio::piped(), Stdio::piped(), Stdio::piped())
        .timeout(Duration::from_secs(300));
    c.env("HOME", home.to_str().unwrap());
    let mut s = serve_cmd(c);
    let batch = |s: &mut Serve, tag: &str, n: usize, want: &dyn Fn(&str) -> bool| {
        let ids: Vec<Value> = (0..n).map(|i| json!(format!("{tag}-{i}"))).collect();
        for id in &ids {
            s.request(id.clone(), spec.clone());
        }
        for id in &ids {
            let r = s.result(id, T);
            assert_exited(&r, 0);
            let out = r["stdout"]["text"].as_str().unwrap_or_default();
            assert!(want(out), "{id}: {out:?}");
        }
        // Time for a spare of this shape.
        std::thread::sleep(Duration::from_millis(300));
    };
    let none = |o: &str| o.contains(".netrc: missing") && o.contains(".ssh: missing");
    batch(&mut s, "before", 4, &none);
    batch(&mut s, "again", 4, &none);
    // Secrets appear: hidden (an empty file, an empty directory) in every later run.
    let put = |rel: &str, content: &str| {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    };
    put(".netrc", "TOKEN");
    put(".ssh/id_key", "KEY");
    let hidden = |o: &str| o.contains(".netrc: file []") && o.contains(".ssh: dir []");
    batch(&mut s, "appeared", 4, &hidden);
    batch(&mut s, "still", 4, &hidden);
    // And gone again: missing, not an empty cover.
    std::fs::remove_file(home.join(".netrc")).unwrap();
    std::fs::remove_dir_all(home.join(".ssh")).unwrap();
    batch(&mut s, "gone", 4, &none);
    s.finish().assert_code(0);
}

/// Served runs are built on the mount template (the host root and /dev
/// made once, copied per run): each sees the tree a one-shot run (built
/// from the host view, no template) sees, mount for mount, hidden paths
/// covered (on the template the scratch tmpfs for the covers is detached
/// again), and nothing any earlier run wrote to /tmp, /run or /dev/shm.
#[test]
fn serve_runs_on_the_mount_template_see_the_one_shot_tree() {
    require!("serve_runs_on_the_mount_template_see_the_one_shot_tree", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("template");
    dir.mkdir("secret");
    dir.write("secret/key", b"KEY\n");
    dir.write("token", b"TOKEN\n");
    let (secret, token) = (dir.join("secret"), dir.join("token"));
    // Mount point, type, options and super options (not ids or devices),
    // sorted; what is hidden; what earlier runs left.
    let script = format!(
        "awk '{{for (i = 7; $i != \"-\"; i++); print $5, $(i+1), $6, $(i+3)}}' /proc/self/mountinfo | sort; \
         echo hidden: $(ls -A {s}) $(cat {t}); echo left: $(ls -A /tmp) $(ls -A /run) $(ls -A /dev/shm); \
         touch /tmp/a /run/a /dev/shm/a",
        s = secret.display(),
        t = token.display()
    );
    let filesystem = json!({"hide": [secret, token]});
    let mut spec = sh(&script);
    spec["filesystem"] = filesystem;
    spec["stdout"] = json!({"capture": 1 << 20});
    let mut s = serve(&["--parallel", "2"]);
    let mut served = Vec::new();
    for i in 0..4 {
        let r = s.run(json!(i), spec.clone());
        assert_exited(&r, 0);
        served.push(r["stdout"]["text"].as_str().unwrap_or_default().to_string());
        // Time for spares, so that later runs take one prepared ahead.
        std::thread::sleep(Duration::from_millis(200));
    }
    s.finish().assert_code(0);
    let (s_, t_) = (secret.to_str().unwrap(), token.to_str().unwrap());
    let out = capsule(&["run", "--no-agent", "--hide", s_, "--hide", t_, "--", "/bin/sh", "-c", &script]).run();
    out.assert_code(0);
    for (i, text) in served.iter().enumerate() {
        assert!(text.contains("hidden:\nleft:\n"), "run {i} saw a hidden file or an earlier run's: {text}");
        assert_eq!(text, &out.stdout, "run {i}'s tree differs from the one-shot run's");
    }
}

/// kill: the run ends at once with status `killed` and its result;
/// cancel: its processes are gone and it is answered `"cancelled"`; a
/// queued run cancelled never runs; unknown ids are errors.
#[test]
fn serve_kill_and_cancel() {
    require!("serve_kill_and_cancel", userns_available());
    let _l = procs_shared();
    let mut s = serve(&["--parallel", "2"]);

    let m1 = sleep_marker();
    let _g1 = MarkerGuard(m1.clone());
    s.request(json!("long1"), json!({"argv": ["/bin/sleep", m1]}));
    wait_marker(&m1, T);
    let t0 = Instant::now();
    s.send(&json!({"id": "k1", "kill": "long1"}));
    let ack = s.recv_id(&json!("k1"), T);
    assert_eq!(ack, json!({"id": "k1", "ok": true}), "kill acknowledgement");
    let r = s.result(&json!("long1"), T);
    let took = t0.elapsed();
    assert_eq!(r["status"], "killed", "{r}");
    assert!(took < Duration::from_secs(2), "kill took {took:?}");
    if let Err(left) = wait_marker_gone(&m1, t0, Duration::from_secs(1)) {
        panic!("killed run still has processes after 1 s: {left:?}");
    }

    let m2 = sleep_marker();
    let _g2 = MarkerGuard(m2.clone());
    s.request(json!(22), json!({"argv": ["/bin/sleep", m2]}));
    wait_marker(&m2, T);
    let t0 = Instant::now();
    // A string "22" is not the number 22.
    s.send(&json!({"id": "c0", "cancel": "22"}));
    s.error(&json!("c0"), T);
    s.send(&json!({"id": "c1", "cancel": 22}));
    let ack = s.recv_id(&json!("c1"), T);
    assert_eq!(ack, json!({"id": "c1", "ok": true}), "cancel acknowledgement");
    let err = s.error(&json!(22), T);
    assert!(err.contains("cancel"), "cancelled run answered {err:?}");
    if let Err(left) = wait_marker_gone(&m2, t0, Duration::from_secs(1)) {
        panic!("cancelled run still has processes after 1 s: {left:?}");
    }

    for (id, req) in [("u1", json!({"kill": "no-such-run"})), ("u2", json!({"cancel": 12345}))] {
        s.send(&with(req, "id", json!(id)));
        s.error(&json!(id), T);
    }
    // The finished runs' ids are unknown too (nothing to kill any more).
    s.send(&json!({"id": "u3", "kill": "long1"}));
    let v = s.recv_id(&json!("u3"), T);
    assert!(v.get("result").is_none(), "{v}");
    assert_exited(&s.run(json!("after"), true_spec()), 0);
    s.finish().assert_code(0);
}

/// With one run at a time, a queued run can be cancelled before it starts:
/// answered `"cancelled"` at once, and it never runs.
#[test]
fn serve_cancel_queued_run() {
    require!("serve_cancel_queued_run", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("serve-queued");
    let d = dir.s();
    let mut s = serve(&[]);
    let m = sleep_marker();
    let _g = MarkerGuard(m.clone());
    s.request(json!("first"), json!({"argv": ["/bin/sleep", m]}));
    wait_marker(&m, T);
    let bind = json!([{"type": "bind", "src": d, "dst": d}]);
    s.request(json!("queued"), with(sh(&format!("touch {d}/queued-ran")), "mounts", bind.clone()));
    s.send(&json!({"id": "c", "cancel": "queued"}));
    assert_eq!(s.recv_id(&json!("c"), T), json!({"id": "c", "ok": true}));
    let err = s.error(&json!("queued"), Duration::from_secs(5));
    assert!(err.contains("cancel"), "{err}");
    assert!(!procs_with_marker(&m).is_empty(), "cancelling the queued run stopped the running one");
    s.send(&json!({"id": "k", "kill": "first"}));
    assert_eq!(s.recv_id(&json!("k"), T), json!({"id": "k", "ok": true}));
    assert_eq!(s.result(&json!("first"), T)["status"], "killed");
    // Control: the same run, not cancelled, leaves its file.
    assert_exited(&s.run(json!("later"), with(sh(&format!("touch {d}/later-ran")), "mounts", bind)), 0);
    assert!(dir.join("later-ran").exists(), "control run left no file");
    assert!(!dir.join("queued-ran").exists(), "the cancelled queued run ran");
    s.finish().assert_code(0);
}

/// A run that cannot start (missing bind source, missing program, invalid
/// spec) is an error response naming the cause; the next request works.
#[test]
fn serve_failed_run_then_next() {
    require!("serve_failed_run_then_next", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    let cases = [
        (
            json!({"argv": ["/bin/true"], "mounts": [{"type": "bind", "src": "/nonexistent-capsule-src", "dst": "/mnt"}]}),
            "/nonexistent-capsule-src",
        ),
        (json!({"argv": ["/nonexistent-capsule-prog"]}), "/nonexistent-capsule-prog"),
        (json!({"argv": []}), "argv"),
        (json!({"argv": ["/bin/true"], "limits": {"wall_time": "1 fortnight"}}), "limits.wall_time"),
        (json!({"argv": ["/bin/true"], "limits": {"open_files": 1}}), "limits.open_files"),
        // Descriptors cannot travel in JSON.
        (json!({"argv": ["/bin/true"], "inherit_fds": [5]}), "inherit_fds names descriptors the request did not carry"),
    ];
    for (i, (spec, needle)) in cases.into_iter().enumerate() {
        s.request(json!(i), spec.clone());
        let v = s.recv_id(&json!(i), T);
        let err = error_text(&v).unwrap_or_else(|| panic!("{spec}: expected an error response, got {v}"));
        assert!(err.contains(needle), "{spec}: the error does not name `{needle}`: {err}");
        assert_exited(&s.run(json!(format!("next-{i}")), true_spec()), 0);
    }
    s.finish().assert_code(0);
}

/// Garbage, truncated, non-object, unknown-field, invalid UTF-8 and
/// oversized (> 1 MiB) lines: one error response each (id null where the
/// line has none), no run; the server then serves the next request.
#[test]
fn serve_malformed_lines() {
    require!("serve_malformed_lines", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    // Lines without a usable id: answered with id null.
    let no_id: Vec<Vec<u8>> = vec![
        b"this is not json".to_vec(),
        br#"{"id": 1, "spec": "#.to_vec(),
        b"[1, 2, 3]".to_vec(),
        br#""just a string""#.to_vec(),
        b"42".to_vec(),
        b"null".to_vec(),
        b"\xff\xfe{\"id\": 1}".to_vec(),
        br#"{"spec": {"argv": ["/bin/true"]}}"#.to_vec(),
    ];
    // Objects with an id: answered with that id.
    let with_id: Vec<(Value, Value)> = vec![
        (json!(5), json!({"id": 5})),
        (json!(6), json!({"id": 6, "spec": {"argv": ["/bin/true"]}, "bogus": 1})),
        (json!(7), json!({"id": 7, "spec": {"argv": ["/bin/true"], "bogus_field": true}})),
        (json!("s"), json!({"id": "s", "spec": "not a spec"})),
    ];
    for l in &no_id {
        s.write_raw(l);
        s.write_raw(b"\n");
    }
    for (_, v) in &with_id {
        s.send(v);
    }
    // A valid request padded with 2 MiB of JSON whitespace: too long.
    let mut big = br#"{"id": "big","#.to_vec();
    big.extend_from_slice(&vec![b' '; 2 << 20]);
    big.extend_from_slice(br#""spec": {"argv": ["/bin/true"]}}"#);
    big.push(b'\n');
    s.write_big(big, T);
    s.request(json!("final"), true_spec());
    let mut responses = Vec::new();
    loop {
        let v = s.recv(T);
        let fin = v["id"] == "final";
        responses.push(v);
        if fin {
            break;
        }
    }
    while let Some(v) = s.try_recv(Duration::from_millis(500)) {
        responses.push(v);
    }
    let fin = responses.iter().find(|v| v["id"] == "final").unwrap();
    assert_exited(&fin["result"], 0);
    let others: Vec<&Value> = responses.iter().filter(|v| v["id"] != "final").collect();
    for v in &others {
        assert!(error_text(v).is_some(), "a malformed line was not answered with an error: {v}");
    }
    let nulls = others.iter().filter(|v| v["id"].is_null()).count();
    let big_answers = others.iter().filter(|v| v["id"] == "big").count();
    assert_eq!(
        nulls + big_answers,
        no_id.len() + 1,
        "lines without an id (and the oversized one): {} errors expected; responses: {others:?}",
        no_id.len() + 1
    );
    assert!(big_answers <= 1, "{others:?}");
    for (id, line) in &with_id {
        let n = others.iter().filter(|v| &v["id"] == id).count();
        assert_eq!(n, 1, "{line}: {n} responses; all: {others:?}");
    }
    let unknown = others.iter().find(|v| v["id"] == 7).unwrap();
    assert!(error_text(unknown).unwrap().contains("bogus_field"), "the error does not name the field: {unknown}");
    let top = others.iter().find(|v| v["id"] == 6).unwrap();
    assert!(error_text(top).unwrap().contains("bogus"), "the error does not name the field: {top}");
    assert_eq!(others.len(), no_id.len() + with_id.len() + 1, "{others:?}");
    assert_exited(&s.run(json!("after"), true_spec()), 0);
    s.finish().assert_code(0);
}

/// An oversized line is not buffered whole: 64 MiB without a newline, then
/// one, leave the server's peak RSS well below 64 MiB, and it answers once.
#[test]
fn serve_oversized_line_is_not_buffered() {
    require!("serve_oversized_line_is_not_buffered", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    assert_exited(&s.run(json!("warm-up"), true_spec()), 0);
    let before = proc_stats(s.pid());
    let mut line = vec![b'x'; 64 << 20];
    line.push(b'\n');
    s.write_big(line, Duration::from_secs(120));
    let v = s.recv(T);
    assert!(v["id"].is_null(), "{v}");
    error_text(&v).unwrap();
    assert_exited(&s.run(json!("after"), true_spec()), 0);
    assert!(s.pending.is_empty(), "more than one response to the long line: {:?}", s.pending);
    assert!(s.try_recv(Duration::from_millis(300)).is_none(), "an extra response");
    let after = proc_stats(s.pid());
    eprintln!("peak RSS before {} KiB, after a 64 MiB line {} KiB", before.hwm_kib, after.hwm_kib);
    assert!(
        after.hwm_kib < before.hwm_kib + 16 * 1024,
        "a 64 MiB line raised the server's peak RSS from {} to {} KiB",
        before.hwm_kib,
        after.hwm_kib
    );
    s.finish().assert_code(0);
}

/// EOF on stdin: the runs already accepted finish, their responses are
/// written, then the server exits 0.
#[test]
fn serve_stdin_eof_finishes_accepted_runs() {
    require!("serve_stdin_eof_finishes_accepted_runs", userns_available());
    let _l = procs_shared();
    let mut s = serve(&[]);
    s.request(json!("a"), json!({"argv": ["/bin/sleep", "0.5"]}));
    s.request(json!("b"), with(sh("echo bee"), "stdout", json!({"capture": 10})));
    s.request(json!("c"), true_spec());
    s.close();
    let out = s.finish();
    out.assert_code(0);
    let mut ids = HashSet::new();
    for l in out.stdout.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_exited(&v["result"], 0);
        if v["id"] == "b" {
            assert_eq!(v["result"]["stdout"]["text"], "bee\n", "{v}");
        }
        assert!(ids.insert(v["id"].to_string()), "duplicate response {v}");
    }
    assert_eq!(ids.len(), 3, "{}", out.describe());
}

/// stdout closed (the client went away): the running runs are killed within 1 s.
#[test]
fn serve_stdout_closed_kills_runs() {
    require!("serve_stdout_closed_kills_runs", userns_available());
    let _l = procs_shared();
    let mut p = [0i32; 2];
    // SAFETY: p is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors from pipe2, owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let mut c = capsule(&["serve"]);
    c.stdio(Stdio::piped(), Stdio::from(w), Stdio::piped());
    let mut s = serve_cmd(c);
    let mut reader = BufReader::new(std::fs::File::from(r));
    let m = sleep_marker();
    let _g = MarkerGuard(m.clone());
    s.request(json!(1), true_spec());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_exited(&parse_response(&line, String::new)["result"], 0);
    s.request(json!(2), json!({"argv": ["/bin/sleep", m]}));
    wait_marker(&m, T);
    let t0 = Instant::now();
    drop(reader);
    if let Err(left) = wait_marker_gone(&m, t0, Duration::from_secs(1)) {
        panic!("the run outlived its client's stdout by 1 s: {left:?}");
    }
}

// ---------------------------------------------------------------- --listen

/// `--listen`: socket mode 0600; two connections served at once, each
/// getting its own responses (same ids on both); a client disconnecting
/// mid-run has its run's processes gone within 1 s while the server and the
/// other connection keep working.
#[test]
fn serve_listen_socket() {
    require!("serve_listen_socket", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("serve-listen");
    let (mut s, path) = listen(&dir, &["--parallel", "2"]);
    let md = std::fs::symlink_metadata(&path).unwrap();
    assert!(md.file_type().is_socket(), "{} is not a socket", path.display());
    assert_eq!(md.mode() & 0o7777, 0o600, "socket mode {:o}", md.mode() & 0o7777);
    assert_eq!(md.uid(), h().uid, "socket owner");

    let mut a = Sock::connect(&path);
    let mut b = Sock::connect(&path);
    a.request(json!(1), with(sh("sleep 0.5; echo A"), "stdout", json!({"capture": 10})));
    b.request(json!(1), with(sh("echo B"), "stdout", json!({"capture": 10})));
    let rb = b.result(&json!(1), T);
    assert_eq!(rb["stdout"]["text"], "B\n", "{rb}");
    let ra = a.result(&json!(1), T);
    assert_eq!(ra["stdout"]["text"], "A\n", "{ra}");
    // A malformed line on one connection is answered there only.
    a.write_raw(b"garbage\n");
    assert!(error_text(&a.recv(T)).is_some());
    assert!(b.try_recv(Duration::from_millis(300)).is_none(), "b got a's error");

    // A third client goes away mid-run.
    let m = sleep_marker();
    let _g = MarkerGuard(m.clone());
    let mut c = Sock::connect(&path);
    c.request(json!("doomed"), json!({"argv": ["/bin/sleep", m]}));
    wait_marker(&m, T);
    // Meanwhile b is busy too.
    b.request(json!(2), json!({"argv": ["/bin/sleep", "1"]}));
    let t0 = Instant::now();
    drop(c);
    if let Err(left) = wait_marker_gone(&m, t0, Duration::from_secs(1)) {
        panic!("a disconnected client's run still has processes after 1 s: {left:?}");
    }
    assert_exited(&b.result(&json!(2), T), 0);
    assert_exited(&a.run(json!(3), true_spec()), 0);
    // A new connection works.
    let mut d = Sock::connect(&path);
    assert_exited(&d.run(json!("new"), true_spec()), 0);
    assert!(s.run.alive(), "the server exited");
}

// ---------------------------------------------------------------- server killed

/// SIGKILL of `capsule serve` (stdio and `--listen`) with runs going and
/// queued: within 1 s no process of the test user is left.
#[test]
fn serve_killed_leaves_no_orphans() {
    require!("serve_killed_leaves_no_orphans", userns_available());
    require!("serve_killed_leaves_no_orphans", require_root());
    let _l = procs_exclusive();
    let baseline = user_procs_baseline("serve_killed_leaves_no_orphans");
    for listen_mode in [false, true] {
        let dir = Scratch::new("serve-killed");
        let marker = unique("serve-killed");
        let _g = MarkerGuard(marker.clone());
        let (mut s, mut sock) = if listen_mode {
            let (s, path) = listen(&dir, &["--parallel", "2"]);
            let sock = Sock::connect(&path);
            (s, Some(sock))
        } else {
            (serve(&["--parallel", "2"]), None)
        };
        let c: &mut dyn Conn = match sock.as_mut() {
            Some(k) => k,
            None => &mut s,
        };
        for i in 0..2 {
            c.request(json!(i), json!({"argv": [probe(), "sleep-tree", format!("{marker}-{i}"), "4"]}));
        }
        c.request(json!("queued"), json!({"argv": ["/bin/sleep", "30"]}));
        let deadline = Instant::now() + T;
        while procs_with_marker(&format!("held:{marker}")).len() < 8 {
            assert!(Instant::now() < deadline, "runs did not start: {:?}", procs_with_marker(&marker));
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = s.pid();
        // SAFETY: pid is our child (capsule, exec'd by setpriv).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let t0 = Instant::now();
        let _ = s.run.child.wait();
        match wait_no_user_procs(&baseline, t0, Duration::from_secs(1)) {
            Ok(t) => eprintln!("listen={listen_mode}: everything gone {t:?} after SIGKILL of capsule serve"),
            Err(left) => panic!("listen={listen_mode}: processes left 1 s after SIGKILL of capsule serve: {left:#?}"),
        }
        drop(sock);
    }
}

// ---------------------------------------------------------------- reliability

/// 10,000 consecutive `/bin/true` runs through one `capsule serve` (100,000
/// with `CAPSULE_TEST_LONG=1`), pipelined in batches: all succeed, and from
/// after a warm-up of 1000 runs to the end the supervisor's fds, threads,
/// mounts and children do not grow, no zombie stays, and its RSS grows by
/// less than 1 MiB.
#[test]
fn serve_reliability_many_runs() {
    require!("serve_reliability_many_runs", userns_available());
    let _l = procs_shared();
    let long = std::env::var("CAPSULE_TEST_LONG").map(|v| v == "1").unwrap_or(false);
    let total: usize = if long { 100_000 } else { 10_000 };
    let warm_up = 1000;
    let batch = 200;
    let mut c = capsule(&["serve"]);
    c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(if long { 7200 } else { 900 }));
    let mut s = serve_cmd(c);
    let pid = s.pid();
    // Once it answers, setpriv has exec'd capsule.
    assert_exited(&s.run(json!("first"), true_spec()), 0);
    assert!(proc_comm(pid).starts_with("capsule"), "the spawned process is not capsule: {}", proc_comm(pid));
    let mut done = 0;
    let mut baseline: Option<ProcStats> = None;
    let t0 = Instant::now();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    while done < total {
        for i in done..done + batch {
            s.request(json!(i), true_spec());
        }
        let mut seen = HashSet::new();
        for _ in 0..batch {
            let v = s.recv(T);
            let id = v["id"].as_u64().unwrap_or_else(|| panic!("unexpected id: {v}")) as usize;
            assert!((done..done + batch).contains(&id) && seen.insert(id), "unexpected or repeated id: {v}");
            let r = v.get("result").unwrap_or_else(|| panic!("run {id} failed: {v}"));
            let st = format!("{}:{}", r["status"], r["exit_code"]);
            if st != "\"exited\":0" {
                panic!("run {id} after {done} runs: {v}");
            }
            *statuses.entry(st).or_default() += 1;
        }
        done += batch;
        if done == warm_up {
            baseline = Some(settled_stats(pid, None));
            eprintln!("after {done} runs ({:?}): {:?}", t0.elapsed(), baseline.unwrap());
        }
        if done % 10_000 == 0 {
            eprintln!("{done} runs in {:?}: {:?}", t0.elapsed(), proc_stats(pid));
        }
    }
    let base = baseline.unwrap();
    let end = settled_stats(pid, Some(base));
    eprintln!("after {done} runs ({:?}): {end:?}", t0.elapsed());
    assert_eq!(statuses.values().sum::<usize>(), total);
    // Kept networks (one fd each) are made on demand up to 5 x parallel + 2
    // (serve's default parallel is 1): they are bounded, not a leak.
    assert!(end.networks <= 5 + 2, "{} kept networks with parallel 1", end.networks);
    let (base_fds, end_fds) = (base.fds - base.net_fds, end.fds - end.net_fds);
    assert!(
        end_fds <= base_fds,
        "fds other than kept networks grew from {base_fds} to {end_fds} over {} runs",
        total - warm_up
    );
    assert!(end.threads <= base.threads, "threads grew from {} to {}", base.threads, end.threads);
    assert!(end.mounts <= base.mounts, "mounts grew from {} to {}", base.mounts, end.mounts);
    assert!(end.children <= base.children, "children grew from {} to {}", base.children, end.children);
    assert_eq!(end.zombies, 0, "zombie children of the supervisor: {end:?}");
    assert!(
        end.rss_kib < base.rss_kib + 1024,
        "RSS grew from {} KiB to {} KiB over {} runs",
        base.rss_kib,
        end.rss_kib,
        total - warm_up
    );
    // The issue's 10 MiB, on the supervisor's own (anonymous) memory: this
    // test runs the debug build, whose text alone is several MiB of RSS
    // (the release binary's whole RSS is under 2 MiB, docs/benchmarks-server.md).
    assert!(end.anon_kib <= 10 * 1024, "supervisor anonymous RSS {} KiB > 10 MiB ({end:?})", end.anon_kib);
    s.finish().assert_code(0);
}

/// The supervisor's figures once idle: sampled for up to 3 s until they are
/// no larger than `not_above` (when given) and no zombie is left, else the
/// last sample.
fn settled_stats(pid: i32, not_above: Option<ProcStats>) -> ProcStats {
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::sleep(Duration::from_millis(200));
    loop {
        let st = proc_stats(pid);
        let ok = st.zombies == 0
            && not_above.is_none_or(|b| {
                st.fds - st.net_fds <= b.fds - b.net_fds
                    && st.threads <= b.threads
                    && st.mounts <= b.mounts
                    && st.children <= b.children
                    && st.rss_kib < b.rss_kib + 1024
            });
        if ok || Instant::now() > deadline {
            return st;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------- idle

/// `pid` and its descendants: (pid, state, comm).
fn process_tree(pid: i32) -> Vec<(i32, char, String)> {
    let all = all_procs();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    tree.into_iter().filter_map(|p| proc_info(p).map(|info| (p, info.state, proc_comm(p)))).collect()
}

/// An idle `capsule serve` with its spares prepared (a PID 1 each, whose
/// tracee waits for a run) has no process in state D: the load average
/// counts those as busy, and `make -l`, GNU parallel's `--load` and
/// monitoring would see a busy machine for as long as the server idles.
#[test]
fn serve_idle_spares_are_not_in_uninterruptible_sleep() {
    require!("serve_idle_spares_are_not_in_uninterruptible_sleep", userns_available());
    let _l = procs_shared();
    let mut s = serve(&["--parallel", "2"]);
    // The first request's shape is the spares' (`parallel` + 1 of them).
    assert_exited(&s.run(json!("first"), true_spec()), 0);
    let pid = s.pid();
    let deadline = Instant::now() + T;
    loop {
        let tree = process_tree(pid);
        let waiting = tree.iter().filter(|(_, state, comm)| comm == "capsule-tracee" && *state == 'S').count();
        if waiting >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "3 spares were not prepared within {T:?}: {tree:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..20 {
        let tree = process_tree(pid);
        let blocked: Vec<_> = tree.iter().filter(|(_, state, _)| *state == 'D').collect();
        assert!(blocked.is_empty(), "idle, in uninterruptible sleep (state D): {blocked:?}; the tree: {tree:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
    s.finish().assert_code(0);
}

/// CPUs this process may run on (its `Cpus_allowed_list`), as the
/// supervisor counts them.
fn cpus_allowed() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim();
    list.split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// While every slot is busy and requests wait for one, the PID 1s of the
/// runs to come are prepared (`parallel` + 1 of them, at most one more than
/// the CPUs), each tracee interruptibly asleep for its go message: once a
/// slot frees, the next run starts on a sandbox built already, as the
/// sandbox floor's does (docs/latency.md, "The loop no longer waits for the
/// spawner"), and the queued runs all end as they should.
#[test]
fn serve_prepares_spares_while_every_slot_is_busy() {
    require!("serve_prepares_spares_while_every_slot_is_busy", userns_available());
    let _l = procs_shared();
    let mut s = serve(&["--parallel", "1"]);
    // The shape first (spares are prepared for the last request's).
    assert_exited(&s.run(json!("first"), true_spec()), 0);
    let sleeper = json!({ "argv": ["/bin/sleep", "3"] });
    s.request(json!("busy"), sleeper);
    for k in 0..3 {
        s.request(json!(format!("queued{k}")), true_spec());
    }
    let want = 1.min(cpus_allowed()) + 1;
    let pid = s.pid();
    let deadline = Instant::now() + Duration::from_millis(2500);
    loop {
        let tree = process_tree(pid);
        let running = tree.iter().filter(|(_, _, comm)| comm == "sleep").count();
        let waiting = tree.iter().filter(|(_, state, comm)| comm == "capsule-tracee" && *state == 'S').count();
        if running == 1 && waiting >= want {
            let blocked: Vec<_> = tree.iter().filter(|(_, state, _)| *state == 'D').collect();
            assert!(blocked.is_empty(), "a spare in uninterruptible sleep (state D): {blocked:?}; the tree: {tree:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "with its one slot busy and 3 runs queued, {want} spares were not prepared (the busy run still going): \
             {tree:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_exited(&s.result(&json!("busy"), T), 0);
    for k in 0..3 {
        assert_exited(&s.result(&json!(format!("queued{k}")), T), 0);
    }
    s.finish().assert_code(0);
}

/// `se.slice` of a `/proc/.../sched` file (Linux >= 6.12 shows it).
fn slice_in(sched: &str) -> Option<u64> {
    field_in(sched, "se.slice")
}

/// A `/proc/PID/sched` field's number.
fn field_in(sched: &str, key: &str) -> Option<u64> {
    sched.lines().find_map(|l| l.strip_prefix(key)?.trim_start().strip_prefix(':')?.trim().parse().ok())
}

/// PID 1s for a filter PID 1 can build the sandbox under come from a
/// spawner thread that installed the filter once (docs/seccomp.md, "One
/// install for all runs"): every program still has exactly its own
/// policy's filter, one, whatever ran before it; a run of another policy
/// never gets it; and the filter refuses what the policy refuses.
#[test]
fn served_runs_inherit_their_own_filter_and_no_other() {
    const NAME: &str = "served_runs_inherit_their_own_filter_and_no_other";
    require!(NAME, userns_available());
    let mut s = serve(&["--parallel", "1"]);
    let mode = |s: &mut Serve, id: usize, policy: &str| {
        let argv = json!(["/bin/grep", "-E", "^Seccomp", "/proc/self/status"]);
        let r = s.run(json!(id), json!({"argv": argv, "seccomp": policy, "stdout": {"capture": 4096}}));
        assert_exited(&r, 0);
        let text = r["stdout"]["text"].as_str().unwrap_or("").to_string();
        let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
        (field("Seccomp:"), field("Seccomp_filters:"), text.clone())
    };
    // Counted on top of the filters the server itself runs under (none here; a container's own).
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).expect("the server's status");
    let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().parse::<u32>().unwrap());
    let (own_mode, own) = (field("Seccomp:").expect("Seccomp:"), field("Seccomp_filters:").unwrap_or(0));
    let policies = ["default", "default", "default", "none", "strict", "default", "none", "default", "default"];
    for (i, policy) in policies.iter().enumerate() {
        let (mode, filters, text) = mode(&mut s, i, policy);
        let want = if *policy == "none" { (own_mode, own) } else { (2, own + 1) };
        let got = (mode.and_then(|m| m.parse().ok()), filters.and_then(|f| f.parse().ok()));
        assert_eq!(got, (Some(want.0), Some(want.1)), "run {i} ({policy}): {text}");
    }
    // TIOCSTI on /dev/null: the default policy's EPERM, ENOTTY without a filter.
    // (`default` last: the spare kept after it is one for `default`.)
    for (i, (policy, want)) in [("none", "ENOTTY"), ("default", "EPERM"), ("default", "EPERM")].iter().enumerate() {
        let argv = json!([probe(), "tiocsti", "x"]);
        let r = s.run(json!(100 + i), json!({"argv": argv, "seccomp": policy, "stdout": {"capture": 4096}}));
        let text = r["stdout"]["text"].as_str().unwrap_or("");
        assert!(text.lines().any(|l| l == format!("tiocsti_fd0={want}")), "{policy}: {text}");
    }
    // The default policy's PID 1s came from one spawner thread, under its
    // filter: the spare it keeps is its child; `strict`'s (which its
    // tracees install) from another, under none.
    let (mut filtered, mut plain) = (Vec::new(), Vec::new());
    for t in std::fs::read_dir(format!("/proc/{}/task", s.pid())).expect("its threads").flatten() {
        if std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim() == "capsule-spawner" {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let filters = status.lines().find_map(|l| l.strip_prefix("Seccomp_filters:")).map(|v| v.trim().to_string());
            match filters.and_then(|f| f.parse::<u32>().ok()) {
                Some(n) if n == own + 1 => filtered.push(t.path()),
                Some(n) if n == own => plain.push(t.path()),
                other => panic!("a spawner thread with {other:?} filters: {status}"),
            }
        }
    }
    assert_eq!(
        (filtered.len(), plain.len()),
        (1, 1),
        "one spawner under the filter, one under none: {filtered:?} {plain:?}"
    );
    let spawners = filtered;
    let deadline = Instant::now() + T;
    while std::fs::read_to_string(spawners[0].join("children")).unwrap_or_default().trim().is_empty() {
        assert!(Instant::now() < deadline, "the spawner made no spare within {T:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    s.finish().assert_code(0);
}

/// The loop asks for the kernel's shortest slice (so that it runs as soon
/// as it wakes), and so does a run's PID 1 once its program runs; nothing
/// either creates inherits it: the served program runs with the default,
/// as a bare one would. The network keeper runs as a batch thread (it never
/// cuts in on the loop), with the default slice.
#[test]
fn serve_loop_takes_short_turns_and_its_programs_do_not() {
    const NAME: &str = "serve_loop_takes_short_turns_and_its_programs_do_not";
    require!(NAME, userns_available());
    let own = std::fs::read_to_string("/proc/self/sched").unwrap_or_default();
    let (major, minor) = kernel_version();
    require!(
        NAME,
        match slice_in(&own) {
            Some(_) if (major, minor) >= (6, 12) => Ok(()),
            _ => Err(format!("no custom slices (Linux {major}.{minor}, or no se.slice in /proc/self/sched)")),
        }
    );
    let default = slice_in(&own).expect("checked");
    let mut s = serve(&["--parallel", "2"]);
    let r = s.run(json!("sched"), json!({"argv": ["/bin/cat", "/proc/self/sched"], "stdout": {"capture": 65536}}));
    assert_exited(&r, 0);
    let text = r["stdout"]["text"].as_str().unwrap_or("");
    assert_eq!(slice_in(text), Some(default), "the program's slice is the default: {text}");
    assert_eq!(field_in(text, "policy"), Some(libc::SCHED_OTHER as u64), "the program's policy: {text}");
    // PID 1 takes the loop's once its program runs (seen from here: the program may not read PID 1's).
    s.request(json!("sleep"), json!({"argv": ["/bin/sleep", "5"]}));
    let deadline = Instant::now() + T;
    let (prog, pid1) = loop {
        let found = all_procs()
            .into_iter()
            .find(|p| proc_comm(p.pid) == "sleep" && process_tree(s.pid()).iter().any(|(q, _, _)| *q == p.pid));
        if let Some(p) = found {
            break (p.pid, p.ppid);
        }
        assert!(Instant::now() < deadline, "the sleep did not start within {T:?}: {:?}", process_tree(s.pid()));
        std::thread::sleep(Duration::from_millis(10));
    };
    let sched_of = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/sched")).unwrap_or_default();
    let (prog_sched, pid1_sched) = (sched_of(prog), sched_of(pid1));
    assert_eq!(proc_comm(pid1), "capsule-pid1");
    assert_eq!(slice_in(&pid1_sched), Some(100_000), "PID 1's slice once its program runs: {pid1_sched}");
    assert_eq!(slice_in(&prog_sched), Some(default), "the program's: {prog_sched}");
    s.send(&json!({"id": "k", "kill": "sleep"}));
    assert_eq!(s.recv_id(&json!("k"), T), json!({"id": "k", "ok": true}));
    assert_eq!(s.result(&json!("sleep"), T)["status"], "killed");
    let sup = std::fs::read_to_string(format!("/proc/{}/sched", s.pid())).expect("the server's sched file");
    assert_eq!(slice_in(&sup), Some(100_000), "the loop's slice: {sup}");
    assert_eq!(field_in(&sup, "policy"), Some(libc::SCHED_OTHER as u64), "the loop's policy: {sup}");
    // Its other thread, the network keeper, keeps the default slice, as a batch thread.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", s.pid())).expect("its threads");
    let mut keepers = 0;
    for t in tasks.flatten().filter(|t| t.file_name().to_str() != Some(&s.pid().to_string())) {
        let sched = std::fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        assert_eq!(slice_in(&sched), Some(default), "thread {:?}: {sched}", t.file_name());
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "capsule-netkeep" {
            keepers += 1;
            assert_eq!(field_in(&sched, "policy"), Some(libc::SCHED_BATCH as u64), "the keeper's policy: {sched}");
        }
    }
    assert_eq!(keepers, 1, "one network keeper thread");
    s.finish().assert_code(0);
}

// ---------------------------------------------------------------- one supervisor per CPU

/// `capsule serve --per-cpu ARGS` (whatever `CAPSULE_TEST_PER_CPU` says).
fn serve_per_cpu(args: &[&str]) -> Serve {
    let mut c = capsule(&["serve", "--per-cpu"]);
    c.args(args).stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(300));
    serve_cmd(c)
}

/// The CPUs of a `Cpus_allowed_list` value ("0-2,5").
fn cpu_list(list: &str) -> std::collections::BTreeSet<usize> {
    let mut set = std::collections::BTreeSet::new();
    for r in list.trim().split(',').filter(|r| !r.is_empty()) {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        set.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    set
}

fn cpus_of_pid(pid: i32) -> std::collections::BTreeSet<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    cpu_list(status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or(""))
}

/// The front's children: its supervisors, in the order it started them.
fn front_children(front: i32) -> Vec<i32> {
    let mut kids: Vec<i32> = all_procs().iter().filter(|p| p.ppid == front && p.state != 'Z').map(|p| p.pid).collect();
    kids.sort();
    kids
}

/// `--per-cpu --parallel N` on N CPUs: N supervisors, children of the
/// front, each pinned to a CPU of its own, together all of the server's;
/// N runs at once go one to each, and each run's program may run on its
/// supervisor's CPU only. Idle, with spares prepared on every supervisor,
/// nothing of the server waits in state D.
#[test]
fn serve_per_cpu_pins_a_supervisor_and_its_runs_to_each_cpu() {
    require!("serve_per_cpu_pins_a_supervisor_and_its_runs_to_each_cpu", userns_available());
    let _l = procs_shared();
    let n = cpus_allowed();
    let mine = cpus_of_pid(std::process::id() as i32);
    let mut s = serve_per_cpu(&["--parallel", &n.to_string()]);
    let spec = with(sh("grep Cpus_allowed_list /proc/self/status; sleep 1"), "stdout", json!({"capture": 200}));
    for i in 0..n {
        s.request(json!(i), spec.clone());
    }
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..n {
        let r = s.result(&json!(i), T);
        assert_exited(&r, 0);
        let text = r["stdout"]["text"].as_str().unwrap_or("").to_string();
        let cpus = cpu_list(text.trim().strip_prefix("Cpus_allowed_list:").unwrap_or_else(|| panic!("{r}")));
        assert_eq!(cpus.len(), 1, "run {i} may run on {cpus:?}, not one CPU: {r}");
        seen.extend(cpus);
    }
    assert_eq!(seen, mine, "{n} runs at once did not take every CPU once");
    let kids = front_children(s.pid());
    assert_eq!(kids.len(), n, "the front's supervisors: {:?}", process_tree(s.pid()));
    let pinned: Vec<_> = kids.iter().map(|&k| cpus_of_pid(k)).collect();
    assert!(pinned.iter().all(|c| c.len() == 1), "a supervisor not pinned to one CPU: {pinned:?}");
    assert_eq!(pinned.iter().flatten().copied().collect::<std::collections::BTreeSet<_>>(), mine, "{pinned:?}");
    // Each supervisor, having had a request, prepares spares of its shape.
    let deadline = Instant::now() + T;
    loop {
        let spares = kids
            .iter()
            .map(|&k| process_tree(k).iter().filter(|(_, st, c)| c == "capsule-tracee" && *st == 'S').count())
            .collect::<Vec<_>>();
        if spares.iter().all(|&c| c >= 1) {
            break;
        }
        assert!(Instant::now() < deadline, "spares per supervisor {spares:?}: {:?}", process_tree(s.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..20 {
        let tree = process_tree(s.pid());
        let blocked: Vec<_> = tree.iter().filter(|(_, state, _)| *state == 'D').collect();
        assert!(blocked.is_empty(), "idle, in uninterruptible sleep (state D): {blocked:?}; the tree: {tree:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
    s.finish().assert_code(0);
}

/// A supervisor of `--per-cpu` that dies ends the server as one
/// supervisor's death would: its run in flight is answered with an error
/// naming it, the other supervisors kill their runs, the front exits 125,
/// and no process of the runs is left.
#[test]
fn serve_per_cpu_a_supervisor_dying_ends_the_server() {
    require!("serve_per_cpu_a_supervisor_dying_ends_the_server", userns_available());
    let _l = procs_exclusive();
    let n = cpus_allowed().min(2);
    let mut s = serve_per_cpu(&["--parallel", &n.to_string()]);
    let marks: Vec<String> = (0..n).map(|_| sleep_marker()).collect();
    let _g: Vec<_> = marks.iter().map(|m| MarkerGuard(m.clone())).collect();
    for (i, m) in marks.iter().enumerate() {
        s.request(json!(i), json!({"argv": ["/bin/sleep", m]}));
    }
    for m in &marks {
        wait_marker(m, T);
    }
    let kids = front_children(s.pid());
    assert_eq!(kids.len(), n, "{:?}", process_tree(s.pid()));
    // Run 0 went to the first supervisor.
    // SAFETY: kill(2) of a process of the test user's server, by pid.
    assert_eq!(unsafe { libc::kill(kids[0], libc::SIGKILL) }, 0);
    let r = s.recv_id(&json!(0), T);
    let e = error_text(&r).unwrap_or_else(|| panic!("run 0 on the killed supervisor: {r}"));
    assert!(e.contains("supervisor on CPU") && e.contains("killed by signal 9"), "{e}");
    let t0 = Instant::now();
    let out = s.finish();
    out.assert_code(125);
    assert!(out.stderr.contains("killed by signal 9"), "{}", out.describe());
    for m in &marks {
        if let Err(left) = wait_marker_gone(m, t0, T) {
            panic!("a run outlived its server: {left:?}");
        }
    }
}

/// What `--per-cpu` cannot do is refused up front, with the reason: one
/// network for all runs (`--shared-network`), and a server none of whose
/// supervisors could start (cgroups required where the base is missing)
/// exits 125 at once with the supervisors' own error.
#[test]
fn serve_per_cpu_refusals() {
    require!("serve_per_cpu_refusals", userns_available());
    let _l = procs_shared();
    let out = capsule(&["serve", "--per-cpu", "--shared-network"])
        .stdio(Stdio::null(), Stdio::piped(), Stdio::piped())
        .timeout(T)
        .run();
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(out.stderr.contains("--shared-network") && out.stderr.contains("--per-cpu"), "{}", out.describe());
    let out = capsule(&["serve", "--per-cpu", "--parallel", "2", "--require-cgroups", "--cgroup", "/nonexistent/base"])
        .stdio(Stdio::null(), Stdio::piped(), Stdio::piped())
        .timeout(T)
        .run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("cgroups are required"), "{}", out.describe());
}

// ---------------------------------------------------------------- asks (egress.ask)

/// An HTTP server on the host's 127.0.0.1 answering `hello` to any request;
/// its port and how many requests it had.
fn hello_server() -> (u16, std::sync::Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen on the host's loopback");
    let port = l.local_addr().unwrap().port();
    let n = std::sync::Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n2.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).map(|k| k > 2).unwrap_or(false) {
                    line.clear();
                }
                let mut w = c;
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
            });
        }
    });
    (port, n)
}

/// A run that fetches each of `urls` through the proxy (curl), printing
/// the status line, `X-Proxy-Error` and body of each, one block per URL.
fn fetching(urls: &[String], egress: Value) -> Value {
    let list = urls.join(" ");
    let script = format!(
        "for u in {list}; do curl -sS -D - $u | tr -d '\\r' | grep -E '^(HTTP|X-Proxy-Error|hello)'; echo; echo; done"
    );
    json!({ "argv": ["/bin/sh", "-c", script], "stdout": {"capture": 65536}, "egress": egress })
}

fn have_curl() -> Result<(), String> {
    if Path::new("/usr/bin/curl").exists() {
        Ok(())
    } else {
        Err("no /usr/bin/curl".into())
    }
}

/// The next line for run `id`, which must be an ask; its `ask` object.
#[track_caller]
fn next_ask(c: &mut impl Conn, id: &Value) -> Value {
    let v = c.recv_id(id, T);
    match v.get("ask") {
        Some(a) => a.clone(),
        None => panic!("expected an ask for {id}, got {v}; lines so far:\n{}", c.transcript()),
    }
}

fn answer(c: &mut impl Conn, id: &Value, ask: &Value, decision: &str) {
    c.send(&json!({ "id": id, "answer": { "ask_id": ask["ask_id"], "decision": decision } }));
}

fn blocks(r: &Value) -> Vec<String> {
    let out = r["stdout"]["text"].as_str().unwrap_or_else(|| panic!("no stdout: {r}"));
    out.split("\n\n\n").map(str::to_string).collect()
}

fn net_rule(r: &Value, host: &str) -> Value {
    let net = r["network"].as_array().unwrap_or_else(|| panic!("no network report: {r}"));
    let e = net.iter().find(|e| e["host"] == host).unwrap_or_else(|| panic!("no entry for {host}: {r}"));
    json!({ "rule": e["rule"], "verdict": e["verdict"], "count": e["count"] })
}

#[test]
fn serve_asks_about_unnamed_hosts_once_per_answer() {
    require!("serve_asks_about_unnamed_hosts_once_per_answer", userns_available());
    require!("serve_asks_about_unnamed_hosts_once_per_answer", have_curl());
    let _g = procs_shared();
    let (port, hits) = hello_server();
    let url = |h: &str| format!("http://{h}:{port}/");
    let egress = json!({
        "allow_hosts": ["named.test"], "deny_hosts": ["denied.test"], "ask": true, "allow_local": true,
        "resolve": {"named.test": ["127.0.0.1"], "once.test": ["127.0.0.1"], "run.test": ["127.0.0.1"],
                    "no.test": ["127.0.0.1"], "denied.test": ["127.0.0.1"]}
    });
    let urls = [
        url("once.test"),
        url("once.test"),
        url("run.test"),
        url("run.test"),
        url("no.test"),
        url("denied.test"),
        url("named.test"),
    ];
    let mut s = serve(&[]);
    let id = json!("asking");
    s.request(id.clone(), fetching(&urls, egress));
    // allow-once: asked again for the next connection.
    for _ in 0..2 {
        let a = next_ask(&mut s, &id);
        assert_eq!(
            (a["host"].as_str(), a["port"].as_u64(), a["via"].as_str()),
            (Some("once.test"), Some(port as u64), Some("http")),
            "{a}"
        );
        answer(&mut s, &id, &a, "allow-once");
    }
    // allow-run: asked once for both.
    let a = next_ask(&mut s, &id);
    assert_eq!(a["host"], "run.test", "{a}");
    answer(&mut s, &id, &a, "allow-run");
    // A second answer to the same ask is not taken.
    answer(&mut s, &id, &a, "deny");
    let v = s.recv_id(&id, T);
    assert_eq!(v["answer_refused"]["ask_id"], a["ask_id"], "{v}");
    assert!(
        v["answer_refused"]["reason"].as_str().is_some_and(|r| r.contains("no such ask") || r.contains("answered")),
        "{v}"
    );
    // deny: a 403 naming the caller.
    let a = next_ask(&mut s, &id);
    assert_eq!(a["host"], "no.test", "{a}");
    answer(&mut s, &id, &a, "deny");
    // The explicit deny and the named host are never asked about: the result comes next.
    let r = s.result(&id, T);
    assert_exited(&r, 0);
    let b = blocks(&r);
    for (i, blk) in b.iter().take(4).enumerate() {
        assert!(blk.contains("HTTP/1.1 200") && blk.contains("hello"), "block {i}: {r}");
    }
    assert!(b[4].contains("HTTP/1.1 403 Forbidden\nX-Proxy-Error: blocked-by-user"), "{r}");
    assert!(b[5].contains("X-Proxy-Error: blocked-by-denylist"), "{r}");
    assert!(b[6].contains("hello"), "{r}");
    assert_eq!(hits.load(Ordering::SeqCst), 5);
    assert_eq!(net_rule(&r, "once.test"), json!({"rule": "asked: allow-once", "verdict": "allowed", "count": 2}));
    assert_eq!(net_rule(&r, "run.test"), json!({"rule": "asked: allow-run", "verdict": "allowed", "count": 2}));
    assert_eq!(net_rule(&r, "no.test"), json!({"rule": "asked: deny", "verdict": "refused", "count": 1}));
    assert_eq!(net_rule(&r, "denied.test"), json!({"rule": "deny-host denied.test", "verdict": "refused", "count": 1}));
    s.finish().assert_code(0);
}

#[test]
fn serve_asks_time_out_to_deny_and_never_override_local_refusals() {
    require!("serve_asks_time_out_to_deny_and_never_override_local_refusals", userns_available());
    require!("serve_asks_time_out_to_deny_and_never_override_local_refusals", have_curl());
    let _g = procs_shared();
    let (port, hits) = hello_server();
    let mut s = serve(&[]);
    // No answer within ask_timeout: refused; a late answer is not taken.
    let id = json!(1);
    let egress =
        json!({"ask": true, "ask_timeout": "300ms", "allow_local": true, "resolve": {"slow.test": ["127.0.0.1"]}});
    s.request(id.clone(), fetching(&[format!("http://slow.test:{port}/")], egress));
    let a = next_ask(&mut s, &id);
    let r = s.result(&id, T);
    assert!(blocks(&r)[0].contains("X-Proxy-Error: blocked-ask-unanswered"), "{r}");
    assert_eq!(net_rule(&r, "slow.test")["rule"], "asked: no answer in 300 ms");
    answer(&mut s, &id, &a, "allow-run");
    let v = s.recv_id(&id, T);
    assert!(v.get("answer_refused").is_some(), "{v}");
    // Asked, allowed, and still refused: the name is local and the run has no allow_local.
    let id = json!(2);
    let egress = json!({"ask": true, "resolve": {"local.test": ["127.0.0.1"]}});
    s.request(id.clone(), fetching(&[format!("http://local.test:{port}/")], egress));
    let a = next_ask(&mut s, &id);
    answer(&mut s, &id, &a, "allow-run");
    let r = s.result(&id, T);
    assert!(blocks(&r)[0].contains("X-Proxy-Error: blocked-local-address"), "{r}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    // Bad answers are refused, never as an `error` that would end the run.
    s.send(&json!({"id": 9, "answer": {"ask_id": 1, "decision": "yes"}}));
    let v = s.recv_id(&json!(9), T);
    assert!(v["answer_refused"]["reason"].as_str().unwrap().contains("allow-once"), "{v}");
    s.send(&json!({"id": 9, "answer": {"ask_id": 1, "decision": "deny"}}));
    let v = s.recv_id(&json!(9), T);
    assert!(v["answer_refused"]["reason"].as_str().unwrap().contains("no run with this id"), "{v}");
    // Only capsule serve's clients answer: not an interactive run.
    let sol = json!({"argv": ["/bin/true"], "egress": {"ask": true}});
    s.send(&json!({"id": 3, "interact": {"solution": sol, "interactor": {"argv": ["/bin/true"]}}}));
    assert!(s.error(&json!(3), T).contains("egress.ask"));
    s.finish().assert_code(0);
}

#[test]
fn serve_asks_are_answered_only_by_the_connection_that_sent_the_run() {
    require!("serve_asks_are_answered_only_by_the_connection_that_sent_the_run", userns_available());
    require!("serve_asks_are_answered_only_by_the_connection_that_sent_the_run", have_curl());
    let _g = procs_shared();
    let (port, hits) = hello_server();
    let dir = Scratch::new("ask-listen");
    let (_server, path) = listen(&dir, &[]);
    let mut a_conn = Sock::connect(&path);
    let mut b_conn = Sock::connect(&path);
    let id = json!(1);
    let egress = json!({"ask": true, "allow_local": true, "resolve": {"x.test": ["127.0.0.1"]}});
    a_conn.request(id.clone(), fetching(&[format!("http://x.test:{port}/")], egress));
    let a = next_ask(&mut a_conn, &id);
    // The same id and ask id from another connection: refused, and the ask still waits.
    answer(&mut b_conn, &id, &a, "allow-run");
    let v = b_conn.recv_id(&id, T);
    assert!(v["answer_refused"]["reason"].as_str().unwrap().contains("no run with this id on this connection"), "{v}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    answer(&mut a_conn, &id, &a, "deny");
    let r = a_conn.result(&id, T);
    assert!(blocks(&r)[0].contains("X-Proxy-Error: blocked-by-user"), "{r}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}
