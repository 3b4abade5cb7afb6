//! `capsule-libtest`: a test helper that drives the library API
//! (`capsule::sandbox::Sandbox`) as the unprivileged test user, for the
//! black-box tests of `capsule-cli` (tests/library.rs). Each subcommand
//! exercises one part of the API and prints what it observed as `key=value`
//! lines (values escaped: never a newline); the tests assert on them.
//!
//! The supervisor binary comes from `$CAPSULE_BIN` (the tests set it).
//! Exit status: 0 when the subcommand ran to its end (whatever it observed),
//! 2 on usage errors, 3 when the sandbox could not start or a step the
//! subcommand depends on failed.
//!
//! Not installed; built only so the tests can use it.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use capsule::sandbox::{Config, RunHandle, Sandbox, StdioFds};
use capsule::{Error, RunResult, RunSpec};
use serde_json::{json, Value};

/// Prints one observation, escaped like capsule-probe's, and flushes.
fn out(key: &str, value: impl std::fmt::Display) {
    let v = value.to_string();
    let mut esc = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => esc.push_str("\\\\"),
            '\n' => esc.push_str("\\n"),
            '\r' => esc.push_str("\\r"),
            '\t' => esc.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => esc.push_str(&format!("\\x{:02x}", c as u32)),
            c => esc.push(c),
        }
    }
    let mut so = std::io::stdout().lock();
    let _ = writeln!(so, "{key}={esc}");
    let _ = so.flush();
}

fn die(msg: &str) -> ! {
    out("fatal", msg);
    eprintln!("capsule-libtest: {msg}");
    std::process::exit(3)
}

fn usage() -> ! {
    eprintln!(
        "usage: capsule-libtest pipeline N | wait-modes | kill-cancel DIR | stdio-fds | failures | \
         supervisor-killed | drop | hang | interact | per-cpu N"
    );
    std::process::exit(2)
}

fn spec(v: Value) -> RunSpec {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| die(&format!("spec {v}: {e}")))
}

fn sh(script: &str, args: &[&str]) -> Value {
    let mut argv = vec!["/bin/sh".to_string(), "-c".into(), script.into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    json!({ "argv": argv })
}

fn with(mut base: Value, key: &str, v: Value) -> Value {
    base.as_object_mut().unwrap().insert(key.into(), v);
    base
}

fn start(parallel: usize) -> Sandbox {
    // tests/library.rs runs once more with one supervisor per CPU.
    let per_cpu = std::env::var("CAPSULE_TEST_PER_CPU").as_deref() == Ok("1");
    let config = Config { parallel, per_cpu, ..Config::default() };
    match Sandbox::start(config) {
        Ok(sb) => {
            out("supervisor_pid", sb.supervisor_pid());
            sb
        }
        Err(e) => die(&format!("Sandbox::start: {} ({e})", kind(&e))),
    }
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::Spec(_) => "spec",
        Error::Sys(_) => "sys",
        Error::Setup(_) => "setup",
        Error::Run(_) => "run",
        Error::Supervisor(_) => "supervisor",
        Error::Refused(_) => "refused",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

fn err(e: &Error) -> String {
    format!("err:{}:{e}", kind(e))
}

/// `status:exit_code:stdout capture` (`-` for what is absent).
fn res(r: &RunResult) -> String {
    let code = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
    let text = r.stdout.as_ref().map(|c| c.text.clone()).unwrap_or_else(|| "-".into());
    format!("{}:{code}:{text}", r.status.as_str())
}

fn desc(r: &Result<RunResult, Error>) -> String {
    match r {
        Ok(r) => format!("ok:{}", res(r)),
        Err(e) => err(e),
    }
}

fn submit(sb: &Sandbox, v: Value) -> Result<RunHandle, String> {
    sb.run(spec(v)).map_err(|e| format!("submit-{}", err(&e)))
}

fn must_submit(sb: &Sandbox, v: Value) -> RunHandle {
    submit(sb, v).unwrap_or_else(|e| die(&e))
}

/// A sleep argument that is unique on the machine, used as a marker to find
/// the run's process on the host: `1000.<pid><counter><nanos>`.
fn marker() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("1000.{}{}{:09}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos)
}

/// Live (non-zombie) processes with an argv element equal to `marker`.
fn procs_with(marker: &str) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if raw.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
            n += 1;
        }
    }
    n
}

fn wait_visible(marker: &str, t: Duration) -> bool {
    let deadline = Instant::now() + t;
    while procs_with(marker) == 0 {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Milliseconds until no process carries `marker` (or `None` after `t`).
fn wait_gone(marker: &str, t: Duration) -> Option<f64> {
    let t0 = Instant::now();
    while procs_with(marker) > 0 {
        if t0.elapsed() > t {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Some(ms(t0))
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}

/// Whether `pid` is alive: exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next()).map(|st| st != "Z").unwrap_or(false),
        Err(_) => false,
    }
}

fn poll_in(fds: &[i32], timeout_ms: i32) -> Vec<bool> {
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: p is a valid array of pollfd of the given length.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        die(&format!("poll: {}", std::io::Error::last_os_error()));
    }
    p.iter().map(|x| x.revents != 0).collect()
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut p = [0i32; 2];
    // SAFETY: p is a valid array of two ints.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        die(&format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 returned two fresh descriptors that we own.
    unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
}

/// Reads `fd` to EOF; `None` if no EOF within `t` (someone still holds the
/// write end).
fn read_to_eof(fd: &OwnedFd, t: Duration) -> (String, bool) {
    let deadline = Instant::now() + t;
    let mut all = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).as_millis() as i32;
        if left <= 0 || !poll_in(&[fd.as_raw_fd()], left)[0] {
            return (String::from_utf8_lossy(&all).into_owned(), false);
        }
        let mut buf = [0u8; 4096];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return (String::from_utf8_lossy(&all).into_owned(), n == 0);
        }
        all.extend_from_slice(&buf[..n as usize]);
    }
}

fn write_all(fd: &OwnedFd, data: &[u8]) {
    // SAFETY: data is valid for its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if n != data.len() as isize {
        die("write to pipe");
    }
}

// ---------------------------------------------------------------- subcommands

/// N runs pipelined on a `parallel = 2` sandbox, collected in whatever
/// order they finish by polling the handles' fds. Run 0 sleeps 0.5 s first,
/// so it should finish late. `run.<i>=ok:exited:<i % 5>:<i>\n` is expected.
fn cmd_pipeline(n: usize) {
    let sb = start(2);
    out("cgroups", sb.cgroups());
    let mut handles: Vec<Option<RunHandle>> = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        let script = if i == 0 { "sleep 0.5; echo $0; exit $1" } else { "echo $0; exit $1" };
        let v = with(sh(script, &[&i.to_string(), &(i % 5).to_string()]), "stdout", json!({"capture": 100}));
        handles.push(Some(must_submit(&sb, v)));
    }
    out("submitted", n);
    out("submit_ms", format!("{:.1}", ms(t0)));
    let ids: Vec<u64> = handles.iter().map(|h| h.as_ref().unwrap().id()).collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    out("distinct_ids", unique.len());
    let mut results: Vec<Option<String>> = vec![None; n];
    let mut order = Vec::new();
    let mut spurious = 0;
    while order.len() < n {
        let live: Vec<usize> = (0..n).filter(|&i| handles[i].is_some()).collect();
        let fds: Vec<i32> = live.iter().map(|&i| handles[i].as_ref().unwrap().as_fd().as_raw_fd()).collect();
        let ready = poll_in(&fds, 30_000);
        if !ready.iter().any(|&r| r) {
            out("poll_timeout", format!("{live:?}"));
            break;
        }
        for (k, &i) in live.iter().enumerate() {
            if !ready[k] {
                continue;
            }
            let h = handles[i].as_mut().unwrap();
            match h.try_wait() {
                Ok(Some(r)) => {
                    results[i] = Some(format!("ok:{}", res(&r)));
                    handles[i] = None;
                    order.push(i);
                }
                Ok(None) => {
                    spurious += 1;
                    if spurious > 1000 {
                        out("spurious", spurious);
                        die(&format!("handle {i}'s fd stays readable but try_wait has no result"));
                    }
                }
                Err(e) => {
                    results[i] = Some(err(&e));
                    handles[i] = None;
                    order.push(i);
                }
            }
        }
    }
    out("spurious", spurious);
    for (i, r) in results.iter().enumerate() {
        out(&format!("run.{i}"), r.clone().unwrap_or_else(|| "missing".into()));
    }
    out("order", order.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    out("collected", order.len());
    let pid = sb.supervisor_pid();
    drop(sb);
    out("supervisor_alive_after_drop", alive(pid));
}

/// wait(), try_wait() before and after the end, poll() on the handle fd,
/// waiting from two threads at once, a dropped handle.
fn cmd_wait_modes() {
    let sb = start(2);
    let r = must_submit(&sb, json!({"argv": ["/bin/true"]})).wait();
    out("wait", desc(&r));
    let mut h = must_submit(&sb, sh("sleep 0.3", &[]));
    let t0 = Instant::now();
    out(
        "try_wait_early",
        match h.try_wait() {
            Ok(None) => "none".into(),
            Ok(Some(r)) => format!("some:{}", res(&r)),
            Err(e) => err(&e),
        },
    );
    let ready = poll_in(&[h.as_fd().as_raw_fd()], 10_000)[0];
    out("poll_ready", ready);
    out("poll_ms", format!("{:.1}", ms(t0)));
    out(
        "try_wait_after",
        match h.try_wait() {
            Ok(None) => "none".into(),
            Ok(Some(r)) => format!("some:{}", res(&r)),
            Err(e) => err(&e),
        },
    );
    out(
        "try_wait_again",
        match h.try_wait() {
            Ok(None) => "none".into(),
            Ok(Some(r)) => format!("some:{}", res(&r)),
            Err(e) => err(&e),
        },
    );
    drop(h);
    // Two threads wait at once, on runs that end in the other order.
    let slow = must_submit(&sb, with(sh("sleep 0.4; echo slow", &[]), "stdout", json!({"capture": 64})));
    let quick = must_submit(&sb, with(sh("sleep 0.1; echo quick", &[]), "stdout", json!({"capture": 64})));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let a = s.spawn(move || (desc(&slow.wait()), ms(t0)));
        let b = s.spawn(move || (desc(&quick.wait()), ms(t0)));
        let (ra, ta) = a.join().unwrap();
        let (rb, tb) = b.join().unwrap();
        out("thread_slow", ra);
        out("thread_quick", rb);
        out("thread_slow_ms", format!("{ta:.1}"));
        out("thread_quick_ms", format!("{tb:.1}"));
    });
    // A handle dropped unwaited: its result is discarded, the next run's
    // result is the next run's.
    drop(must_submit(&sb, with(sh("echo dropped", &[]), "stdout", json!({"capture": 64}))));
    let r = must_submit(&sb, with(sh("echo kept", &[]), "stdout", json!({"capture": 64}))).wait();
    out("after_dropped", desc(&r));
}

/// kill() of a running run (result `killed`), cancel() of a running run
/// (processes gone) and of a queued run (never runs).
fn cmd_kill_cancel(dir: &str) {
    let sb = start(2);
    let m1 = marker();
    let h = must_submit(&sb, json!({"argv": ["/bin/sleep", m1]}));
    out("kill_visible", wait_visible(&m1, Duration::from_secs(20)));
    let t0 = Instant::now();
    out("kill_call", h.kill().map(|_| "ok".to_string()).unwrap_or_else(|e| err(&e)));
    let r = h.wait();
    out("kill_ms", format!("{:.1}", ms(t0)));
    out("kill_result", desc(&r));
    out("kill_left", procs_with(&m1));

    let m2 = marker();
    let h = must_submit(&sb, json!({"argv": ["/bin/sleep", m2]}));
    out("cancel_visible", wait_visible(&m2, Duration::from_secs(20)));
    out("cancel_call", h.cancel().map(|_| "ok".to_string()).unwrap_or_else(|e| err(&e)));
    match wait_gone(&m2, Duration::from_secs(1)) {
        Some(t) => out("cancel_gone_ms", format!("{t:.1}")),
        None => out("cancel_left", procs_with(&m2)),
    }
    let r = must_submit(&sb, json!({"argv": ["/bin/true"]})).wait();
    out("after_cancel", desc(&r));
    drop(sb);

    // parallel = 1: a run waiting behind another is cancelled before it starts.
    let sb = start(1);
    let m3 = marker();
    let first = must_submit(&sb, json!({"argv": ["/bin/sleep", m3]}));
    out("queued_first_visible", wait_visible(&m3, Duration::from_secs(20)));
    let flag = format!("{dir}/queued-ran");
    let queued = must_submit(
        &sb,
        with(sh("touch \"$0\"", &[&flag]), "mounts", json!([{"type": "bind", "src": dir, "dst": dir}])),
    );
    out("queued_cancel_call", queued.cancel().map(|_| "ok".to_string()).unwrap_or_else(|e| err(&e)));
    out("queued_first_kill_call", first.kill().map(|_| "ok".to_string()).unwrap_or_else(|e| err(&e)));
    out("queued_first", desc(&first.wait()));
    // A later run of the same kind does run (the control for queued_ran).
    let flag2 = format!("{dir}/later-ran");
    let r = must_submit(
        &sb,
        with(sh("touch \"$0\"", &[&flag2]), "mounts", json!([{"type": "bind", "src": dir, "dst": dir}])),
    )
    .wait();
    out("later", desc(&r));
    out("later_ran", std::path::Path::new(&flag2).exists());
    out("queued_ran", std::path::Path::new(&flag).exists());
}

/// Caller-provided descriptors: stdin from a pipe, stdout and stderr into a
/// pipe the helper reads; and a caller's stdout with a spec capture of stderr.
fn cmd_stdio_fds() {
    let sb = start(1);
    let (in_r, in_w) = pipe();
    let (out_r, out_w) = pipe();
    write_all(&in_w, b"hello-from-stdin\n");
    drop(in_w);
    let h = sb
        .run_with(
            spec(sh("cat; echo to-stderr >&2", &[])),
            StdioFds { stdin: Some(in_r.as_fd()), stdout: Some(out_w.as_fd()), stderr: Some(out_w.as_fd()) },
        )
        .unwrap_or_else(|e| die(&format!("run_with: {}", err(&e))));
    drop(in_r);
    drop(out_w);
    let (text, eof) = read_to_eof(&out_r, Duration::from_secs(20));
    out("pipe_text", text);
    out("pipe_eof", eof);
    out("result", desc(&h.wait()));

    let (o_r, o_w) = pipe();
    let v = with(sh("echo OUT; echo ERR >&2", &[]), "stderr", json!({"capture": 100}));
    let h = sb
        .run_with(spec(v), StdioFds { stdout: Some(o_w.as_fd()), ..StdioFds::default() })
        .unwrap_or_else(|e| die(&format!("run_with: {}", err(&e))));
    drop(o_w);
    let (text, eof) = read_to_eof(&o_r, Duration::from_secs(20));
    out("mixed_pipe", text);
    out("mixed_eof", eof);
    match h.wait() {
        Ok(r) => {
            out("mixed_result", res(&r));
            out("mixed_stderr", r.stderr.as_ref().map(|c| c.text.clone()).unwrap_or_else(|| "-".into()));
        }
        Err(e) => out("mixed_result", err(&e)),
    }
}

/// Runs that cannot start are an Err for themselves only; the runs
/// pipelined around them are unaffected.
fn cmd_failures() {
    let sb = start(2);
    let bad_bind = json!({"argv": ["/bin/true"],
        "mounts": [{"type": "bind", "src": "/nonexistent-capsule-src", "dst": "/mnt"}]});
    let bad_prog = json!({"argv": ["/nonexistent-capsule-prog"]});
    let good = |i: u32| with(sh("echo good-$0", &[&i.to_string()]), "stdout", json!({"capture": 64}));
    let hs = [
        ("bad_bind", submit(&sb, bad_bind)),
        ("good1", submit(&sb, good(1))),
        ("bad_prog", submit(&sb, bad_prog)),
        ("good2", submit(&sb, good(2))),
    ];
    for (name, h) in hs {
        out(
            name,
            match h {
                Ok(h) => desc(&h.wait()),
                Err(e) => e,
            },
        );
    }
    out(
        "bad_spec",
        match sb.run(RunSpec::default()) {
            Ok(h) => format!("submitted:{}", desc(&h.wait())),
            Err(e) => err(&e),
        },
    );
    out("good3", desc(&must_submit(&sb, good(3)).wait()));
}

/// SIGKILL of the supervisor: every pending handle (running or queued) and
/// the next run() are Err(Supervisor), the fds wake up, nothing is left.
fn cmd_supervisor_killed() {
    let sb = start(1);
    let pid = sb.supervisor_pid();
    let m1 = marker();
    let h1 = must_submit(&sb, json!({"argv": ["/bin/sleep", m1]}));
    let h2 = must_submit(&sb, json!({"argv": ["/bin/true"]}));
    let mut h3 = must_submit(&sb, json!({"argv": ["/bin/sleep", "5"]}));
    out("marker", &m1);
    out("visible", wait_visible(&m1, Duration::from_secs(20)));
    // SAFETY: kill takes no pointers; pid is our child.
    let r = unsafe { libc::kill(pid, libc::SIGKILL) };
    out("kill", r);
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(2));
    }
    out("supervisor_dead", !alive(pid));
    let fds = [h1.as_fd().as_raw_fd(), h2.as_fd().as_raw_fd(), h3.as_fd().as_raw_fd()];
    // Each within 2 s: the main thread shows `Z` before the supervisor's last
    // thread has exited and closed their shared descriptors, one by one.
    let deadline = Instant::now() + Duration::from_secs(2);
    let readable = fds
        .iter()
        .filter(|&&fd| {
            let left = deadline.saturating_duration_since(Instant::now()).as_millis() as i32;
            poll_in(&[fd], left)[0]
        })
        .count();
    out("fds_readable", readable);
    out(
        "fds_readable_after_ms",
        format!("{:.3}", 2000.0 - deadline.saturating_duration_since(Instant::now()).as_secs_f64() * 1000.0),
    );
    out(
        "next_run",
        match sb.run(spec(json!({"argv": ["/bin/true"]}))) {
            Ok(h) => format!("submitted:{}", desc(&h.wait())),
            Err(e) => err(&e),
        },
    );
    out("h1", desc(&h1.wait()));
    out("h2", desc(&h2.wait()));
    out(
        "h3_try_wait",
        match h3.try_wait() {
            Ok(None) => "none".into(),
            Ok(Some(r)) => format!("some:{}", res(&r)),
            Err(e) => err(&e),
        },
    );
    out(
        "next_run_again",
        match sb.run(spec(json!({"argv": ["/bin/true"]}))) {
            Ok(h) => format!("submitted:{}", desc(&h.wait())),
            Err(e) => err(&e),
        },
    );
    match wait_gone(&m1, Duration::from_secs(1)) {
        Some(t) => out("marker_gone_ms", format!("{t:.1}")),
        None => out("marker_left", procs_with(&m1)),
    }
    drop(sb);
    out("dropped", 1);
}

/// Dropping the Sandbox (a run still going, its handle still held) stops
/// the supervisor and the run; the handle then says so.
fn cmd_drop() {
    let sb = start(1);
    let pid = sb.supervisor_pid();
    let m1 = marker();
    let h = must_submit(&sb, json!({"argv": ["/bin/sleep", m1]}));
    out("marker", &m1);
    out("visible", wait_visible(&m1, Duration::from_secs(20)));
    out("dropping", 1);
    let t0 = Instant::now();
    drop(sb);
    out("drop_ms", format!("{:.1}", ms(t0)));
    out("supervisor_alive", alive(pid));
    match wait_gone(&m1, Duration::from_secs(1)) {
        Some(t) => out("marker_gone_ms", format!("{t:.1}")),
        None => out("marker_left", procs_with(&m1)),
    }
    out("handle_after_drop", desc(&h.wait()));
}

/// Interactive runs through the library: a conversation pipelined with an
/// ordinary run, polled through its fd; try_wait; kill of a pair that talks
/// forever; a pair whose solution cannot start; an invalid pair refused
/// before it is sent.
fn cmd_interact() {
    use capsule::InteractSpec;
    let sb = start(2);
    let pair = |sol: Value, int: Value| InteractSpec { solution: spec(sol), interactor: spec(int) };
    let ires = |r: &capsule::InteractResult| {
        format!("{}|{}|{}", r.first_to_exit.as_str(), res(&r.solution), res(&r.interactor))
    };
    let mut h = sb
        .interact(pair(sh("read x; echo $((x+1))", &[]), sh("echo 41; read y; [ \"$y\" = 42 ]", &[])))
        .unwrap_or_else(|e| die(&err(&e)));
    let plain = must_submit(&sb, json!({"argv": ["/bin/true"]}));
    out(
        "early",
        match h.try_wait() {
            Ok(None) => "none".into(),
            Ok(Some(r)) => ires(&r),
            Err(e) => err(&e),
        },
    );
    let mut pfd = [libc::pollfd { fd: h.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    // SAFETY: pfd is a valid pollfd array of length 1.
    let ready = unsafe { libc::poll(pfd.as_mut_ptr(), 1, 30_000) };
    out("polled", ready);
    out(
        "conversation",
        match h.try_wait() {
            Ok(Some(r)) => ires(&r),
            Ok(None) => "none".into(),
            Err(e) => err(&e),
        },
    );
    out("plain", desc(&plain.wait()));

    let chat = "while :; do echo ping; read x; done";
    let h = sb.interact(pair(sh(chat, &[]), sh(chat, &[]))).unwrap_or_else(|e| die(&err(&e)));
    std::thread::sleep(Duration::from_millis(300));
    out("kill", h.kill().is_ok());
    out(
        "killed",
        match h.wait() {
            Ok(r) => ires(&r),
            Err(e) => err(&e),
        },
    );

    let h = sb
        .interact(pair(json!({"argv": ["/nonexistent-capsule-prog"]}), sh("read x", &[])))
        .unwrap_or_else(|e| die(&err(&e)));
    out(
        "no_solution",
        match h.wait() {
            Ok(r) => ires(&r),
            Err(e) => err(&e),
        },
    );
    let bad = InteractSpec {
        solution: spec(with(sh("true", &[]), "stdin", json!("/etc/hostname"))),
        interactor: spec(sh("true", &[])),
    };
    out(
        "invalid",
        match sb.interact(bad) {
            Ok(_) => "accepted".into(),
            Err(e) => err(&e),
        },
    );
    out("after", desc(&must_submit(&sb, json!({"argv": ["/bin/true"]})).wait()));
}

/// Starts a run and waits forever: the test kills this process.
fn cmd_hang() {
    let sb = start(1);
    let m1 = marker();
    let _h = must_submit(&sb, json!({"argv": ["/bin/sleep", m1]}));
    out("marker", &m1);
    out("visible", wait_visible(&m1, Duration::from_secs(20)));
    out("ready", 1);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `Config::per_cpu` with `parallel` N: each supervisor's CPUs, and those
/// of N runs at once (each must be one CPU, all of them the caller's).
fn cmd_per_cpu(n: usize) {
    let sb = match Sandbox::start(Config { parallel: n, per_cpu: true, ..Config::default() }) {
        Ok(sb) => sb,
        Err(e) => die(&format!("Sandbox::start: {} ({e})", kind(&e))),
    };
    let cpus_of = |pid: i32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("?").trim().to_string()
    };
    let sups: Vec<String> = sb.supervisor_pids().iter().map(|&p| cpus_of(p)).collect();
    out("supervisors", sups.join(";"));
    out("caller", cpus_of(std::process::id() as i32));
    let v = with(sh("grep Cpus_allowed_list /proc/self/status; sleep 0.5", &[]), "stdout", json!({"capture": 100}));
    let handles: Vec<RunHandle> = (0..n).map(|_| must_submit(&sb, v.clone())).collect();
    for (i, h) in handles.into_iter().enumerate() {
        match h.wait() {
            Ok(r) => {
                let text = r.stdout.as_ref().map(|c| c.text.clone()).unwrap_or_default();
                out(&format!("run.{i}"), text.trim().strip_prefix("Cpus_allowed_list:").unwrap_or(&text).trim());
            }
            Err(e) => out(&format!("run.{i}"), format!("err:{e}")),
        }
    }
}

/// A session through `Sandbox::session`: a detached command's file is
/// there for the next, whose streams are the caller's pipe; list; stop.
fn cmd_session() {
    use capsule::proto::session::{ExecReq, SessionAnswer, SessionReq};
    let sb = start(1);
    let name = "lib".to_string();
    let shown = |a: Result<SessionAnswer, Error>| match a {
        Ok(a) => serde_json::to_string(&a).expect("serializable"),
        Err(e) => format!("error {}", err(&e)),
    };
    let start = SessionReq::Start {
        name: name.clone(),
        spec: Box::new(spec(sh("true", &[]))),
        idle_ms: None,
        lifetime_ms: None,
        grace_ms: Some(500),
        publish: Vec::new(),
        host_ports: Vec::new(),
    };
    out("start", shown(sb.session(start, None)));
    let argv = |s: &str| vec!["/bin/sh".to_string(), "-c".to_string(), s.to_string()];
    let detach = ExecReq {
        name: name.clone(),
        argv: argv("echo hi > /tmp/f; exec sleep 100"),
        detach: true,
        ..ExecReq::default()
    };
    out("detached", matches!(sb.session(SessionReq::Exec(detach), None), Ok(SessionAnswer::Detached { .. })));
    let (in_r, in_w) = pipe();
    let (out_r, out_w) = pipe();
    drop(in_w);
    let exec = ExecReq {
        name: name.clone(),
        argv: argv("i=0; while [ ! -s /tmp/f ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; cat /tmp/f; exit 3"),
        ..ExecReq::default()
    };
    let a = sb.session(SessionReq::Exec(exec), Some([in_r.as_fd(), out_w.as_fd(), out_w.as_fd()]));
    drop(out_w);
    out("exec_output", read_to_eof(&out_r, Duration::from_secs(20)).0);
    match a {
        Ok(SessionAnswer::Exec { result }) => out("exec_code", result.exit_code.unwrap_or(-1)),
        other => out("exec_code", shown(other)),
    }
    match sb.session(SessionReq::List, None) {
        Ok(SessionAnswer::List { sessions }) => out("listed", sessions.len()),
        other => out("listed", shown(other)),
    }
    out("stop", shown(sb.session(SessionReq::Stop { name, grace_ms: None }, None)));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cmd = args.get(1).map(String::as_str).unwrap_or_else(|| usage());
    match cmd {
        "pipeline" => cmd_pipeline(args.get(2).and_then(|n| n.parse().ok()).unwrap_or_else(|| usage())),
        "wait-modes" => cmd_wait_modes(),
        "kill-cancel" => cmd_kill_cancel(args.get(2).map(String::as_str).unwrap_or_else(|| usage())),
        "stdio-fds" => cmd_stdio_fds(),
        "failures" => cmd_failures(),
        "supervisor-killed" => cmd_supervisor_killed(),
        "drop" => cmd_drop(),
        "hang" => cmd_hang(),
        "interact" => cmd_interact(),
        "session" => cmd_session(),
        "per-cpu" => cmd_per_cpu(args.get(2).and_then(|n| n.parse().ok()).unwrap_or_else(|| usage())),
        _ => usage(),
    }
    out("done", 1);
}
