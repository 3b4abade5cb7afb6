//! The library API (`capsule::sandbox`), driven as the unprivileged test
//! user by the helper `capsule-libtest` (crates/capsule-testkit), which
//! prints what it observed as `key=value` lines: pipelined runs collected in
//! any order through the handles' fds, wait/try_wait/poll, kill and cancel,
//! caller-provided descriptors, failed runs, the supervisor killed, the
//! Sandbox dropped, and the client killed.
//!
//! The tests that check that no process of the test user is left take
//! [`procs_exclusive`]; all others take [`procs_shared`].

use capsule_testkit as common;

use std::time::{Duration, Instant};

use common::*;

/// Runs `capsule-libtest ARGS` to completion and checks it finished.
#[track_caller]
fn libtest_ok(args: &[&str]) -> (Out, Kv) {
    let out = libtest_cmd(args).timeout(Duration::from_secs(120)).run();
    let kv = out.kv();
    assert!(
        out.code == Some(0) && kv.get("done") == Some("1"),
        "capsule-libtest {args:?} did not finish; {}",
        out.describe()
    );
    (out, kv)
}

#[track_caller]
fn expect(kv: &Kv, out: &Out, key: &str, want: &str) {
    assert_eq!(kv.get(key), Some(want), "`{key}`; {}", out.describe());
}

#[track_caller]
fn expect_prefix(kv: &Kv, out: &Out, key: &str, prefix: &str) -> String {
    let v = kv.get(key).unwrap_or_else(|| panic!("no `{key}`; {}", out.describe()));
    assert!(v.starts_with(prefix), "`{key}` = {v:?}, expected {prefix}...; {}", out.describe());
    v.to_string()
}

#[track_caller]
fn ms_of(kv: &Kv, out: &Out, key: &str) -> f64 {
    kv.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("`{key}` missing or not a number; {}", out.describe()))
}

/// 20 runs pipelined on `parallel = 2`, collected as their handles' fds
/// become readable: each result is its own run's (exit code, captured
/// output), run 0 (0.5 s longer) is not collected first, and dropping the
/// Sandbox stops the supervisor.
#[test]
fn library_pipelined_runs_any_order() {
    require!("library_pipelined_runs_any_order", userns_available());
    let _l = procs_shared();
    let n = 20;
    let (out, kv) = libtest_ok(&["pipeline", &n.to_string()]);
    expect(&kv, &out, "collected", &n.to_string());
    expect(&kv, &out, "distinct_ids", &n.to_string());
    expect(&kv, &out, "spurious", "0");
    for i in 0..n {
        expect(&kv, &out, &format!("run.{i}"), &format!("ok:exited:{}:{i}\\n", i % 5));
    }
    let order: Vec<usize> = kv.must("order").split(',').map(|x| x.parse().unwrap()).collect();
    let pos0 = order.iter().position(|&i| i == 0).unwrap();
    assert!(pos0 >= n / 2, "run 0 (0.5 s longer) collected at position {pos0}: {order:?}");
    expect(&kv, &out, "supervisor_alive_after_drop", "false");
    eprintln!("submit of {n} runs took {} ms; order {order:?}", kv.must("submit_ms"));
    assert!(ms_of(&kv, &out, "submit_ms") < 450.0, "run() blocks: {}", out.describe());
}

/// wait(); try_wait() before the end (None), after the fd polled readable
/// (the result), and again (an error); two threads waiting at once get
/// their own results; a dropped handle's result does not reach another.
#[test]
fn library_wait_try_wait_poll() {
    require!("library_wait_try_wait_poll", userns_available());
    let _l = procs_shared();
    let (out, kv) = libtest_ok(&["wait-modes"]);
    expect(&kv, &out, "wait", "ok:exited:0:-");
    expect(&kv, &out, "try_wait_early", "none");
    expect(&kv, &out, "poll_ready", "true");
    let poll_ms = ms_of(&kv, &out, "poll_ms");
    assert!((250.0..10_000.0).contains(&poll_ms), "fd readable after {poll_ms} ms for a 0.3 s run");
    expect(&kv, &out, "try_wait_after", "some:exited:0:-");
    expect_prefix(&kv, &out, "try_wait_again", "err:");
    expect(&kv, &out, "thread_slow", "ok:exited:0:slow\\n");
    expect(&kv, &out, "thread_quick", "ok:exited:0:quick\\n");
    let (slow, quick) = (ms_of(&kv, &out, "thread_slow_ms"), ms_of(&kv, &out, "thread_quick_ms"));
    assert!(quick < slow, "the quick run's waiter returned after the slow one's ({quick} vs {slow} ms)");
    expect(&kv, &out, "after_dropped", "ok:exited:0:kept\\n");
}

/// kill(): status `killed`, at once; cancel(): the run's processes gone
/// within 1 s; a queued run cancelled never runs; the sandbox keeps working.
#[test]
fn library_kill_and_cancel() {
    require!("library_kill_and_cancel", userns_available());
    let _l = procs_shared();
    let dir = Scratch::new("lib-cancel");
    let (out, kv) = libtest_ok(&["kill-cancel", &dir.s()]);
    expect(&kv, &out, "kill_visible", "true");
    expect(&kv, &out, "kill_call", "ok");
    expect_prefix(&kv, &out, "kill_result", "ok:killed:");
    assert!(ms_of(&kv, &out, "kill_ms") < 2000.0, "{}", out.describe());
    expect(&kv, &out, "kill_left", "0");
    expect(&kv, &out, "cancel_visible", "true");
    expect(&kv, &out, "cancel_call", "ok");
    assert!(kv.get("cancel_left").is_none(), "a cancelled run's processes outlived it by 1 s; {}", out.describe());
    ms_of(&kv, &out, "cancel_gone_ms");
    expect(&kv, &out, "after_cancel", "ok:exited:0:-");
    expect(&kv, &out, "queued_first_visible", "true");
    expect(&kv, &out, "queued_cancel_call", "ok");
    expect_prefix(&kv, &out, "queued_first", "ok:killed:");
    expect(&kv, &out, "later", "ok:exited:0:-");
    expect(&kv, &out, "later_ran", "true");
    expect(&kv, &out, "queued_ran", "false");
}

/// Caller-provided descriptors (StdioFds): stdin from a pipe, stdout and
/// stderr into a pipe that reaches EOF when the run ends (the supervisor
/// keeps no copy); a caller's stdout next to a spec capture of stderr.
#[test]
fn library_caller_stdio_fds() {
    require!("library_caller_stdio_fds", userns_available());
    let _l = procs_shared();
    let (out, kv) = libtest_ok(&["stdio-fds"]);
    expect(&kv, &out, "pipe_text", "hello-from-stdin\\nto-stderr\\n");
    expect(&kv, &out, "pipe_eof", "true");
    expect(&kv, &out, "result", "ok:exited:0:-");
    expect(&kv, &out, "mixed_pipe", "OUT\\n");
    expect(&kv, &out, "mixed_eof", "true");
    expect(&kv, &out, "mixed_result", "exited:0:-");
    expect(&kv, &out, "mixed_stderr", "ERR\\n");
}

/// A run that cannot start is an Err for that run only (Setup, naming the
/// cause); the runs pipelined around it and after it succeed; an invalid
/// spec is refused by run() itself.
#[test]
fn library_failed_run_is_err_for_itself() {
    require!("library_failed_run_is_err_for_itself", userns_available());
    let _l = procs_shared();
    let (out, kv) = libtest_ok(&["failures"]);
    let bad = kv.must("bad_bind");
    assert!(bad.starts_with("err:setup:") || bad.starts_with("submit-err:"), "bad_bind = {bad}");
    assert!(bad.contains("/nonexistent-capsule-src"), "bad_bind does not name the source: {bad}");
    let bad = kv.must("bad_prog");
    assert!(bad.starts_with("err:setup:") || bad.starts_with("submit-err:"), "bad_prog = {bad}");
    assert!(bad.contains("/nonexistent-capsule-prog"), "bad_prog does not name the program: {bad}");
    expect(&kv, &out, "good1", "ok:exited:0:good-1\\n");
    expect(&kv, &out, "good2", "ok:exited:0:good-2\\n");
    expect(&kv, &out, "good3", "ok:exited:0:good-3\\n");
    expect_prefix(&kv, &out, "bad_spec", "err:spec:");
}

/// SIGKILL of the supervisor: the handles' fds wake up, every pending handle
/// (running or queued) and every later run() is Err(Supervisor), and within
/// 1 s nothing of the sandbox is left. (The run() right after the handles
/// woke may still be accepted and fail on its handle instead: the dying
/// supervisor's files are released one by one, the handles' pipes may go
/// before its end of the connection, and a request sent meanwhile is taken
/// by the kernel. Once a handle has reported the death, run() refuses.)
#[test]
fn library_supervisor_killed() {
    require!("library_supervisor_killed", userns_available());
    require!("library_supervisor_killed", require_root());
    let _l = procs_exclusive();
    let baseline = user_procs_baseline("library_supervisor_killed");
    let (out, kv) = libtest_ok(&["supervisor-killed"]);
    let t0 = Instant::now();
    expect(&kv, &out, "visible", "true");
    expect(&kv, &out, "kill", "0");
    expect(&kv, &out, "supervisor_dead", "true");
    expect(&kv, &out, "fds_readable", "3");
    let next = kv.get("next_run").unwrap_or_default();
    assert!(
        next.starts_with("err:supervisor:") || next.starts_with("submitted:err:supervisor:"),
        "`next_run` = {next:?}: neither refused nor failed as the supervisor's death; {}",
        out.describe()
    );
    for key in ["h1", "h2", "h3_try_wait", "next_run_again"] {
        expect_prefix(&kv, &out, key, "err:supervisor:");
    }
    assert!(kv.get("marker_left").is_none(), "the run outlived its supervisor by 1 s; {}", out.describe());
    expect(&kv, &out, "dropped", "1");
    if let Err(left) = wait_no_user_procs(&baseline, t0, Duration::from_secs(1)) {
        panic!("left behind by a killed supervisor: {left:#?}\n{}", out.describe());
    }
}

/// Dropping the Sandbox while a run is going and its handle is held: the
/// supervisor is gone when drop returns, the run within 1 s, and the handle
/// says Err(Supervisor).
#[test]
fn library_drop_stops_supervisor() {
    require!("library_drop_stops_supervisor", userns_available());
    require!("library_drop_stops_supervisor", require_root());
    let _l = procs_exclusive();
    let baseline = user_procs_baseline("library_drop_stops_supervisor");
    let (out, kv) = libtest_ok(&["drop"]);
    let t0 = Instant::now();
    expect(&kv, &out, "visible", "true");
    expect(&kv, &out, "supervisor_alive", "false");
    assert!(kv.get("marker_left").is_none(), "the run outlived the dropped Sandbox by 1 s; {}", out.describe());
    expect_prefix(&kv, &out, "handle_after_drop", "err:supervisor:");
    assert!(ms_of(&kv, &out, "drop_ms") < 2000.0, "drop took long; {}", out.describe());
    if let Err(left) = wait_no_user_procs(&baseline, t0, Duration::from_secs(1)) {
        panic!("left behind by a dropped Sandbox: {left:#?}\n{}", out.describe());
    }
}

/// The client (the process using the library) killed mid-run: the
/// supervisor, the run's PID 1 and the program are gone within 1 s.
#[test]
fn library_client_killed() {
    require!("library_client_killed", userns_available());
    require!("library_client_killed", require_root());
    let _l = procs_exclusive();
    let baseline = user_procs_baseline("library_client_killed");
    let mut running = libtest_cmd(&["hang"]).timeout(Duration::from_secs(120)).spawn();
    running.wait_line("ready=", Duration::from_secs(60));
    let seen = running.seen().concat();
    let kv = Kv::parse(&seen);
    assert_eq!(kv.get("visible"), Some("true"), "{seen}");
    let sup: i32 = kv.must("supervisor_pid").parse().unwrap();
    let marker = kv.must("marker").to_string();
    let _g = MarkerGuard(marker.clone());
    assert!(proc_info(sup).is_some_and(|p| p.state != 'Z'), "the supervisor is not running");
    let pid = running.pid();
    // SAFETY: pid is our child (capsule-libtest, exec'd by setpriv).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    let _ = running.child.wait();
    match wait_no_user_procs(&baseline, t0, Duration::from_secs(1)) {
        Ok(t) => eprintln!("supervisor and run gone {t:?} after SIGKILL of the client"),
        Err(left) => {
            panic!("1 s after SIGKILL of the client (supervisor {sup}, run marker {marker}) these are left: {left:#?}")
        }
    }
}

/// `Sandbox::interact`: a conversation pipelined with an ordinary run and
/// collected through its pollable fd; `kill` of a pair kills both
/// programs; a solution that cannot start is an `Err` naming it; an
/// invalid pair is refused before it is sent; the sandbox goes on.
#[test]
fn interact() {
    require!("interact", userns_available());
    let _p = procs_shared();
    let (out, kv) = libtest_ok(&["interact"]);
    assert_eq!(kv.must("early"), "none", "{}", out.describe());
    assert_eq!(kv.must("polled"), "1", "{}", out.describe());
    let conv = kv.must("conversation");
    assert!(conv.ends_with("|exited:0:-|exited:0:-"), "{conv}; {}", out.describe());
    assert_eq!(kv.must("plain"), "ok:exited:0:-", "{}", out.describe());
    assert_eq!(kv.must("kill"), "true");
    assert!(kv.must("killed").ends_with("|killed:-:-|killed:-:-"), "{}", out.describe());
    let ns = kv.must("no_solution");
    assert!(
        ns.starts_with("err:setup:") && ns.contains("solution: executing") && ns.contains("nonexistent-capsule-prog"),
        "{ns}"
    );
    let inv = kv.must("invalid");
    assert!(inv.starts_with("err:spec:") && inv.contains("solution.stdin"), "{inv}");
    assert_eq!(kv.must("after"), "ok:exited:0:-", "{}", out.describe());
}

/// `Config::per_cpu`: one supervisor per CPU of the caller's, each pinned
/// to a CPU of its own; N runs at once go one to each supervisor, and each
/// may run on its supervisor's CPU only.
#[test]
fn library_per_cpu_pins_a_supervisor_and_its_runs_to_each_cpu() {
    require!("library_per_cpu_pins_a_supervisor_and_its_runs_to_each_cpu", userns_available());
    let _l = procs_shared();
    let cpus = |list: &str| -> std::collections::BTreeSet<usize> {
        let mut set = std::collections::BTreeSet::new();
        for r in list.split(',').filter(|r| !r.is_empty()) {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            set.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
        }
        set
    };
    let probe = libtest_ok(&["per-cpu", "1"]).1;
    let mine = cpus(probe.must("caller"));
    let n = mine.len();
    let (out, kv) = libtest_ok(&["per-cpu", &n.to_string()]);
    let sups: Vec<_> = kv.must("supervisors").split(';').map(cpus).collect();
    assert_eq!(sups.len(), n, "{}", out.describe());
    assert!(sups.iter().all(|c| c.len() == 1), "a supervisor not pinned to one CPU: {sups:?}");
    assert_eq!(sups.iter().flatten().copied().collect::<std::collections::BTreeSet<_>>(), mine, "{sups:?}");
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..n {
        let c = cpus(kv.must(&format!("run.{i}")));
        assert_eq!(c.len(), 1, "run {i} may run on {c:?}: {}", out.describe());
        seen.extend(c);
    }
    assert_eq!(seen, mine, "{n} runs at once did not take every CPU once: {}", out.describe());
}

/// `Sandbox::session`: a session kept by the library's supervisor; a
/// detached command's file seen by the next command, which writes to the
/// caller's pipe and has its own exit code; list; stop.
#[test]
fn library_sessions() {
    require!("library_sessions", userns_available());
    let _l = procs_shared();
    let (out, kv) = libtest_ok(&["session"]);
    expect(&kv, &out, "start", r#"{"started":{"name":"lib"}}"#);
    expect(&kv, &out, "detached", "true");
    expect(&kv, &out, "exec_output", "hi\\n");
    expect(&kv, &out, "exec_code", "3");
    expect(&kv, &out, "listed", "1");
    expect(&kv, &out, "stop", r#"{"stopped":{"name":"lib","status":"stopped"}}"#);
}
