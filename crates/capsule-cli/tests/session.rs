//! Sessions (docs/sessions.md): `capsule session start|exec|list|stop`, a
//! sandbox kept by the user's agent across commands. A detached server is
//! there for a later command (process, /tmp, listening socket) and for no
//! other session or plain run; stop is SIGTERM, grace, SIGKILL; idle
//! expiry; the session's limits hold for all its commands together, a
//! command's wall and CPU time for it alone; the session dies with its
//! agent; many sessions at once; another identity's agent, and another
//! user, see none of them.
//!
//! Every test gives its commands an identity of their own
//! (CAPSULE_TEST_TAG), so that its agent and sessions are its own, and
//! stops that agent before it ends.

use capsule_testkit as common;

use std::time::{Duration, Instant};

use common::*;

/// A `capsule` command for the agent of `tag`.
fn cmd(tag: &str, args: &[&str]) -> Cmd {
    let mut c = capsule(args);
    c.env("CAPSULE_AGENT", "on").env("CAPSULE_AGENT_IDLE", "30").env("CAPSULE_TEST_TAG", tag);
    c
}

fn ok(tag: &str, args: &[&str]) -> Out {
    let out = cmd(tag, args).run();
    assert_eq!(out.code, Some(0), "capsule {args:?}: {}", out.describe());
    out
}

fn start(tag: &str, name: &str, opts: &[&str]) {
    let mut args = vec!["session", "start", name];
    args.extend_from_slice(opts);
    ok(tag, &args);
}

/// `capsule session exec -q NAME -- sh -c SCRIPT`.
fn exec_sh(tag: &str, name: &str, script: &str) -> Out {
    cmd(tag, &["session", "exec", "-q", name, "--", "/bin/sh", "-c", script]).run()
}

fn detach(tag: &str, name: &str, script: &str) -> i32 {
    let out = ok(tag, &["session", "exec", "--detach", name, "--", "/bin/sh", "-c", script]);
    out.stdout.trim().parse().unwrap_or_else(|_| panic!("a pid: {}", out.describe()))
}

fn names(tag: &str) -> Vec<String> {
    let out = ok(tag, &["session", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    v.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
}

fn stop_agent(tag: &str) {
    ok(tag, &["agent", "stop"]);
}

/// Stops the agent of its tag when dropped: a failed test leaves no agent
/// (and no session, which would keep it for its idle time).
struct Agent(String);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = cmd(&self.0, &["agent", "stop"]).run();
    }
}

fn python3() -> Result<(), String> {
    match std::path::Path::new("/usr/bin/python3").exists() {
        true => Ok(()),
        false => Err("python3 is not installed (/usr/bin/python3)".into()),
    }
}

const SERVER: &str = "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); \
                      s.bind(('127.0.0.1', 8123)); s.listen(); open('/tmp/listening','w').close()\n\
                      while True:\n c,_=s.accept(); c.sendall(b'hello-from-the-server'); c.close()";
const CLIENT: &str = "import socket,sys,time\nfor i in range(100):\n try:\n  \
                      print(socket.create_connection(('127.0.0.1', 8123)).recv(100).decode()); sys.exit(0)\n \
                      except OSError as e:\n  err=e; time.sleep(0.05)\nprint('refused', err); sys.exit(3)";

/// A server left running by one command answers a later one; the later
/// command sees its process and its file in /tmp. Another session and a
/// plain run see none of it.
#[test]
fn detached_server_serves_a_later_command() {
    let _p = procs_shared();
    require!("detached_server_serves_a_later_command", userns_available().and_then(|()| python3()));
    let tag = unique("sess-server");
    let _agent = Agent(tag.clone());
    start(&tag, "web", &[]);
    detach(&tag, "web", &format!("exec /usr/bin/python3 -c \"{SERVER}\""));
    let out = cmd(&tag, &["session", "exec", "-q", "web", "--", "/usr/bin/python3", "-c", CLIENT]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "hello-from-the-server");
    let seen = exec_sh(
        &tag,
        "web",
        "test -e /tmp/listening && echo file; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
    );
    assert_eq!(seen.code, Some(0), "{}", seen.describe());
    assert!(seen.stdout.starts_with("file\n"), "{}", seen.describe());
    assert!(seen.stdout.contains("python3 -c"), "the server is not among the processes: {}", seen.describe());
    // Another session: its own network, /tmp and processes.
    start(&tag, "other", &[]);
    let other = cmd(&tag, &["session", "exec", "-q", "other", "--", "/usr/bin/python3", "-c", CLIENT]).run();
    assert_eq!(other.code, Some(3), "another session reached the server: {}", other.describe());
    let other = exec_sh(&tag, "other", "test -e /tmp/listening && echo leak; ls /proc | grep -c '^[0-9]'");
    assert!(!other.stdout.contains("leak"), "{}", other.describe());
    // A plain run of the same agent.
    let plain = cmd(&tag, &["run", "-q", "--", "/usr/bin/python3", "-c", CLIENT]).run();
    assert_eq!(plain.code, Some(3), "a plain run reached the session's server: {}", plain.describe());
    let mut listed = names(&tag);
    listed.sort();
    assert_eq!(listed, ["other", "web"]);
    ok(&tag, &["session", "stop", "web"]);
    ok(&tag, &["session", "stop", "other"]);
    assert!(names(&tag).is_empty());
    stop_agent(&tag);
}

/// A command's result is its own: exit code, signal, its wall-time limit
/// (its process group killed); a missing program is an error; the
/// session's environment and working directory, plus what exec adds.
#[test]
fn exec_results_are_the_commands_own() {
    let _p = procs_shared();
    require!("exec_results_are_the_commands_own", userns_available());
    let tag = unique("sess-result");
    let _agent = Agent(tag.clone());
    start(&tag, "r", &["--setenv", "GREETING", "hi", "--chdir", "/tmp"]);
    assert_eq!(exec_sh(&tag, "r", "exit 7").code, Some(7));
    assert_eq!(exec_sh(&tag, "r", "kill -9 $$").code, Some(128 + 9));
    let out = cmd(
        &tag,
        &["session", "exec", "-q", "--setenv", "X", "y", "r", "--", "/bin/sh", "-c", "echo $GREETING $X $(pwd)"],
    )
    .run();
    assert_eq!(out.stdout.trim(), "hi y /tmp", "{}", out.describe());
    let t = Instant::now();
    let out =
        cmd(&tag, &["session", "exec", "--wall-time", "300ms", "r", "--", "/bin/sh", "-c", "sleep 30 & sleep 30"])
            .run();
    assert_eq!(out.code, Some(124), "{}", out.describe());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(out.stderr.contains("wall"), "{}", out.describe());
    let gone = exec_sh(&tag, "r", "ps -eo comm | grep -c '^sleep$' || true");
    assert_eq!(gone.stdout.trim(), "0", "the command's process group outlived its wall time: {}", gone.describe());
    let out = cmd(&tag, &["session", "exec", "r", "--", "/nonexistent/x"]).run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("/nonexistent/x"), "{}", out.describe());
    if cgroups_available().is_err() {
        let out = cmd(&tag, &["session", "exec", "--memory", "64M", "r", "--", "/bin/true"]).run();
        assert_eq!(out.code, Some(125), "{}", out.describe());
        assert!(out.stderr.contains("--memory needs cgroups"), "{}", out.describe());
    }
    let out = cmd(&tag, &["session", "exec", "--memory", "1k", "r", "--", "/bin/true"]).run();
    assert!(out.stderr.contains("memory limit is at least 1M"), "{}", out.describe());
    let out = cmd(&tag, &["session", "exec", "nosuch", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("no session named \"nosuch\""), "{}", out.describe());
    ok(&tag, &["session", "stop", "r"]);
    stop_agent(&tag);
}

/// Stop: SIGTERM, then after the grace SIGKILL for what ignores it; a
/// session whose processes all leave at SIGTERM stops at once.
#[test]
fn stop_kills_stubborn_processes_after_the_grace() {
    let _p = procs_shared();
    require!("stop_kills_stubborn_processes_after_the_grace", userns_available());
    let tag = unique("sess-stop");
    let _agent = Agent(tag.clone());
    let marker = unique("stubborn");
    start(&tag, "s", &["--grace", "700ms"]);
    detach(&tag, "s", &format!("trap '' TERM; while :; do sleep 0.1; done; : {marker}"));
    detach(&tag, "s", "sleep 1000");
    assert!(!wait_marker(&marker, Duration::from_secs(10)).is_empty());
    let t = Instant::now();
    ok(&tag, &["session", "stop", "s"]);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(600), "stopped after {took:?}, before the grace");
    assert!(took < Duration::from_secs(8), "stopped after {took:?}");
    if let Err(left) = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(5)) {
        panic!("left after stop: {left:?}");
    }
    // Nothing that resists: stopped well before a long grace.
    start(&tag, "quick", &["--grace", "20s"]);
    detach(&tag, "quick", "sleep 1000");
    let t = Instant::now();
    ok(&tag, &["session", "stop", "quick"]);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let out = cmd(&tag, &["session", "stop", "quick"]).run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    stop_agent(&tag);
}

/// A session without a command for its idle time stops by itself; one
/// with a command in flight does not.
#[test]
fn idle_sessions_expire() {
    let _p = procs_shared();
    require!("idle_sessions_expire", userns_available());
    let tag = unique("sess-idle");
    let _agent = Agent(tag.clone());
    let marker = unique("idle");
    start(&tag, "i", &["--idle", "1s", "--grace", "200ms"]);
    detach(&tag, "i", &format!("sleep 1000; : {marker}"));
    // A command running longer than the idle time keeps it.
    assert_eq!(exec_sh(&tag, "i", "sleep 2").code, Some(0));
    assert_eq!(names(&tag), ["i"]);
    let t = Instant::now();
    while names(&tag) == ["i"] {
        assert!(t.elapsed() < Duration::from_secs(10), "the idle session was not stopped");
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Err(left) = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(5)) {
        panic!("left after idle expiry: {left:?}");
    }
    let out = exec_sh(&tag, "i", "true");
    assert_eq!(out.code, Some(125), "{}", out.describe());
    // And the lifetime, whatever the use.
    start(&tag, "l", &["--lifetime", "1500ms", "--grace", "200ms"]);
    let t = Instant::now();
    while names(&tag) == ["l"] {
        assert!(exec_sh(&tag, "l", "true").code.is_some());
        assert!(t.elapsed() < Duration::from_secs(10), "the session outlived its lifetime");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t.elapsed() >= Duration::from_millis(1400), "{:?}", t.elapsed());
    stop_agent(&tag);
}

/// The limits given to start hold for the session as a whole: CPU time
/// adds up across commands until the session is killed; rlimits reach
/// every command.
#[test]
fn session_limits_hold_for_all_its_commands() {
    let _p = procs_shared();
    require!("session_limits_hold_for_all_its_commands", userns_available());
    let tag = unique("sess-limits");
    let _agent = Agent(tag.clone());
    start(&tag, "c", &["--cpu-time", "1s", "--open-files", "40"]);
    assert_eq!(exec_sh(&tag, "c", "ulimit -n").stdout.trim(), "40");
    // Half the session's CPU time in one command, which ends by itself (timeout's 124)...
    let spin = |secs: &str| {
        cmd(&tag, &["session", "exec", "-q", "c", "--", "timeout", secs, "/bin/sh", "-c", "while :; do :; done"]).run()
    };
    let out = spin("0.5");
    assert_eq!(out.code, Some(124), "{}", out.describe());
    // ...then one that would spin for 10 s is killed with the session when the two add up to 1 s (never
    // between two commands, where the race would leave the next one only "no session").
    let t = std::time::Instant::now();
    let out = spin("10");
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("cpu time limit"), "{}", out.describe());
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}: {}", t.elapsed(), out.describe());
    assert!(names(&tag).is_empty());
    stop_agent(&tag);
}

/// A command's own CPU-time limit counts all its processes, those it left
/// (orphans) and those in a session of their own included, kills them all
/// within a tick and is reported as a CPU-time limit; the next command and
/// the session are untouched.
#[test]
fn a_command_has_its_own_cpu_time_limit() {
    let _p = procs_shared();
    require!("a_command_has_its_own_cpu_time_limit", userns_available());
    let tag = unique("sess-cpu");
    let _agent = Agent(tag.clone());
    start(&tag, "c", &[]);
    // Three spinners, none the command's own process: an orphan, one in a new session, a waited-for child.
    let script = "(sh -c 'while :; do :; done' &); setsid sh -c 'while :; do :; done' & \
                  sh -c 'while :; do :; done' & sleep 30";
    let t = Instant::now();
    let out = cmd(&tag, &["session", "exec", "--cpu-time", "600ms", "c", "--", "/bin/sh", "-c", script]).run();
    let took = t.elapsed();
    assert_eq!(out.code, Some(124), "{}", out.describe());
    assert!(out.stderr.contains("cpu time limit"), "{}", out.describe());
    // 600 ms of CPU over three spinners on at least one CPU: at most 600 ms of wall time, and a tick.
    assert!(took < Duration::from_secs(5), "{took:?}: {}", out.describe());
    let left = exec_sh(&tag, "c", "ps -eo args | grep -c '^sh -c while' || true");
    assert_eq!(left.stdout.trim(), "0", "a spinner outlived the limit: {}", left.describe());
    // The reported CPU time is the three spinners', not the idle shell's alone.
    let ms = |after: &str| out.stderr.split(after).nth(1).and_then(|s| s.split(' ').next()?.parse::<f64>().ok());
    let cpu = ms("(cpu ").zip(ms("user + ")).map(|(u, s)| u + s);
    let cpu = cpu.unwrap_or_else(|| panic!("a CPU time in: {}", out.describe()));
    assert!((550.0..3000.0).contains(&cpu), "{cpu} ms: {}", out.describe());
    // Under the limit, the command's own exit code.
    let out = cmd(&tag, &["session", "exec", "-q", "--cpu-time", "5s", "c", "--", "/bin/sh", "-c", "exit 4"]).run();
    assert_eq!(out.code, Some(4), "{}", out.describe());
    let out = cmd(&tag, &["session", "exec", "--cpu-time", "0", "c", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("CPU-time limit is more than 0"), "{}", out.describe());
    assert_eq!(names(&tag), ["c"]);
    ok(&tag, &["session", "stop", "c"]);
    stop_agent(&tag);
}

/// Two users: the second sees none of the first's sessions (list, exec,
/// stop), cannot reach the first's agent at all, and has a session of the
/// same name of its own, which sees nothing of the first's.
#[test]
fn another_user_sees_none_of_a_users_sessions() {
    let _p = procs_shared();
    require!("another_user_sees_none_of_a_users_sessions", userns_available().and_then(|()| other_user()));
    let two = other_user().expect("checked");
    let tag = unique("sess-users");
    let _agent = Agent(tag.clone());
    let other = |args: &[&str]| cmd(&tag, args).as_ids(two).run();
    start(&tag, "s", &[]);
    detach(&tag, "s", "echo first > /tmp/mine; exec sleep 1000");
    assert!(other(&["session", "list", "--json"]).stdout.trim() == "[]");
    for args in [&["session", "exec", "s", "--", "/bin/true"][..], &["session", "stop", "s"]] {
        let out = other(args);
        assert_eq!(out.code, Some(125), "{}", out.describe());
        assert!(out.stderr.contains("no session named \"s\""), "{}", out.describe());
    }
    // The first user's agent directory is closed to the second: no socket to try.
    let dir = format!("/tmp/capsule-agent-{}", h().uid);
    let probe =
        format!("import os\ntry:\n os.listdir('{dir}'); print('listed')\nexcept PermissionError: print('refused')");
    let out = cmd(&tag, &[]).as_ids(two).binary("/usr/bin/python3").args(&["-c", probe.as_str()]).run();
    assert_eq!(out.stdout.trim(), "refused", "{}", out.describe());
    // A session of the same name, its own: none of the first's files or processes.
    let out = other(&["session", "start", "s"]);
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let seen = other(&[
        "session",
        "exec",
        "-q",
        "s",
        "--",
        "/bin/sh",
        "-c",
        "test -e /tmp/mine && echo leaked; ps -eo comm | grep -c '^sleep$'",
    ]);
    assert_eq!(seen.stdout.trim(), "0", "{}", seen.describe());
    let mine = exec_sh(&tag, "s", "cat /tmp/mine; ps -eo comm | grep -c '^sleep$'");
    assert_eq!(mine.stdout.split_whitespace().collect::<Vec<_>>(), ["first", "1"], "{}", mine.describe());
    assert_eq!(other(&["session", "stop", "s"]).code, Some(0));
    assert_eq!(other(&["agent", "stop"]).code, Some(0));
    assert_eq!(names(&tag), ["s"]);
    ok(&tag, &["session", "stop", "s"]);
    stop_agent(&tag);
}

/// The agent killed: the session's processes go with it (PID 1 dies with
/// its supervisor, and the kernel ends its PID namespace).
#[test]
fn sessions_die_with_their_agent() {
    let _p = procs_shared();
    require!("sessions_die_with_their_agent", userns_available());
    let tag = unique("sess-crash");
    let _agent = Agent(tag.clone());
    let marker = unique("orphan");
    start(&tag, "x", &[]);
    detach(&tag, "x", &format!("trap '' TERM HUP; sleep 1000; : {marker}"));
    assert!(!wait_marker(&marker, Duration::from_secs(10)).is_empty());
    let status = ok(&tag, &["agent", "status"]);
    let line = status.stdout.lines().find(|l| l.starts_with("* ")).expect("this caller's agent");
    let pid: i32 = line.rsplit_once("\tpid ").unwrap().1.trim().parse().unwrap();
    // SAFETY: kill(2) of the test's own agent.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    if let Err(left) = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(5)) {
        panic!("the session's processes outlived their agent: {left:?}");
    }
    let t = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "agent {pid} did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A new agent knows no such session.
    assert!(names(&tag).is_empty());
    stop_agent(&tag);
}

/// Many sessions at once, each with its own /tmp; names are unique per
/// agent and checked; another identity's agent sees none of them.
#[test]
fn many_sessions_apart() {
    let _p = procs_shared();
    require!("many_sessions_apart", userns_available());
    let tag = unique("sess-many");
    let _agent = Agent(tag.clone());
    let n = 12;
    for i in 0..n {
        start(&tag, &format!("s{i}"), &[]);
        assert_eq!(exec_sh(&tag, &format!("s{i}"), &format!("echo {i} > /tmp/who")).code, Some(0));
    }
    for i in 0..n {
        let out = exec_sh(&tag, &format!("s{i}"), "cat /tmp/who");
        assert_eq!(out.stdout.trim(), i.to_string(), "{}", out.describe());
    }
    assert_eq!(names(&tag).len(), n);
    let dup = cmd(&tag, &["session", "start", "s0"]).run();
    assert_eq!(dup.code, Some(125), "{}", dup.describe());
    assert!(dup.stderr.contains("exists already"), "{}", dup.describe());
    let bad = cmd(&tag, &["session", "start", "../x"]).run();
    assert_eq!(bad.code, Some(125), "{}", bad.describe());
    let other = unique("sess-other");
    let _other_agent = Agent(other.clone());
    assert!(names(&other).is_empty(), "another identity's agent lists this one's sessions");
    assert_eq!(cmd(&other, &["session", "exec", "s0", "--", "/bin/true"]).run().code, Some(125));
    stop_agent(&other);
    for i in 0..n {
        ok(&tag, &["session", "stop", &format!("s{i}")]);
    }
    stop_agent(&tag);
}

/// A free port on the host's loopback (free a moment ago).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Reads what a connection to `port` on the host's loopback says, as the
/// capsule user (`user`) or as this test process, trying `tries` times
/// while it is refused or says nothing (a detached server may not listen yet).
fn fetch(port: u16, user: bool, tries: u32) -> String {
    let script = format!(
        "import socket,time\nd=''\nfor i in range({tries}):\n try:\n  d=socket.create_connection(('127.0.0.1', {port})).recv(100).decode()\n  if d: break\n except OSError:\n  pass\n time.sleep(0.05)\nprint(d)"
    );
    let out = if user {
        as_user(&["/usr/bin/python3", "-c", &script]).output().unwrap()
    } else {
        std::process::Command::new("/usr/bin/python3").args(["-c", &script]).output().unwrap()
    };
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `--publish`: the host's listener reaches the session's server, for a
/// process of the user only; `--host-port`: the session reaches that one
/// host port and no other; a second session reaches the first only
/// through what it published; the listener goes with the session.
#[test]
fn published_ports_and_host_ports() {
    let _p = procs_shared();
    require!(
        "published_ports_and_host_ports",
        userns_available().and_then(|()| python3()).and_then(|()| require_root())
    );
    let tag = unique("sess-ports");
    let _agent = Agent(tag.clone());
    let (published, other_host) = (free_port(), free_port());
    // A service on the host, answering every connection.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in host.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"host-service");
        }
    });
    let publish = format!("{published}:8123");
    start(&tag, "a", &["--publish", &publish, "--host-port", &host_port.to_string()]);
    detach(&tag, "a", &format!("exec /usr/bin/python3 -c \"{SERVER}\""));
    assert_eq!(fetch(published, true, 200), "hello-from-the-server");
    // Root is another user: the connection is closed unanswered.
    assert_eq!(fetch(published, false, 3), "");
    let client = |port: u16| {
        format!(
            "import socket\ntry: print(socket.create_connection(('127.0.0.1', {port})).recv(100).decode())\nexcept OSError as e: print('refused')"
        )
    };
    let out = cmd(&tag, &["session", "exec", "-q", "a", "--", "/usr/bin/python3", "-c", &client(host_port)]).run();
    assert_eq!(out.stdout.trim(), "host-service", "{}", out.describe());
    let other = std::net::TcpListener::bind(("127.0.0.1", other_host)).unwrap();
    let out = cmd(&tag, &["session", "exec", "-q", "a", "--", "/usr/bin/python3", "-c", &client(other_host)]).run();
    assert_eq!(out.stdout.trim(), "refused", "another host port was reached: {}", out.describe());
    drop(other);
    let list = ok(&tag, &["session", "list"]);
    assert!(list.stdout.contains(&format!("127.0.0.1:{published}->8123")), "{}", list.describe());
    // Session b reaches a's server only through the port a published.
    start(&tag, "b", &["--host-port", &published.to_string()]);
    let out = cmd(&tag, &["session", "exec", "-q", "b", "--", "/usr/bin/python3", "-c", &client(published)]).run();
    assert_eq!(out.stdout.trim(), "hello-from-the-server", "{}", out.describe());
    let out = cmd(&tag, &["session", "exec", "-q", "b", "--", "/usr/bin/python3", "-c", &client(8123)]).run();
    assert_eq!(out.stdout.trim(), "refused", "{}", out.describe());
    // A port in use fails the start, naming it.
    let dup = cmd(&tag, &["session", "start", "c", "--publish", &publish]).run();
    assert_eq!(dup.code, Some(125), "{}", dup.describe());
    assert!(dup.stderr.contains(&format!("127.0.0.1:{published}")), "{}", dup.describe());
    ok(&tag, &["session", "stop", "a"]);
    ok(&tag, &["session", "stop", "b"]);
    assert!(std::net::TcpStream::connect(("127.0.0.1", published)).is_err(), "the published port outlived its session");
    stop_agent(&tag);
}

/// The same over `capsule serve`'s JSON lines: `{"session": ...}`
/// requests, `{"session": ...}` answers (a command's streams /dev/null);
/// the server's sessions stop when its input ends.
#[test]
fn sessions_over_json_lines() {
    use std::io::Write;
    use std::process::Stdio;
    let _p = procs_shared();
    require!("sessions_over_json_lines", userns_available());
    let marker = unique("jsonl");
    let mut c = capsule(&["serve"]);
    c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped());
    let mut run = c.spawn();
    let mut stdin = run.child.stdin.take().unwrap();
    let mut ask = |run: &mut Running, line: String| -> serde_json::Value {
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        let got = run.next_line(Duration::from_secs(20)).expect("an answer");
        serde_json::from_str(&got).unwrap()
    };
    let v = ask(&mut run, r#"{"id":1,"session":{"start":{"name":"j","spec":{"argv":["-"]},"idle_ms":null,"lifetime_ms":null,"grace_ms":null}}}"#.into());
    assert_eq!(v["session"]["started"]["name"], "j", "{v}");
    let v = ask(
        &mut run,
        format!(
            r#"{{"id":2,"session":{{"exec":{{"name":"j","argv":["/bin/sh","-c","sleep 1000; : {marker}"],"detach":true}}}}}}"#
        ),
    );
    assert!(v["session"]["detached"]["pid"].as_i64().unwrap() > 1, "{v}");
    let v = ask(
        &mut run,
        r#"{"id":3,"session":{"exec":{"name":"j","argv":["/bin/sh","-c","echo x > /tmp/f; exit 4"]}}}"#.into(),
    );
    assert_eq!(v["session"]["exec"]["result"]["exit_code"], 4, "{v}");
    let v =
        ask(&mut run, r#"{"id":4,"session":{"exec":{"name":"j","argv":["/bin/sh","-c","test -e /tmp/f"]}}}"#.into());
    assert_eq!(v["session"]["exec"]["result"]["exit_code"], 0, "{v}");
    let v = ask(&mut run, r#"{"id":5,"session":"list"}"#.into());
    assert_eq!(v["session"]["list"]["sessions"][0]["name"], "j", "{v}");
    assert!(!wait_marker(&marker, Duration::from_secs(10)).is_empty());
    drop(stdin);
    let out = run.wait();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    if let Err(left) = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(5)) {
        panic!("a server's session outlived it: {left:?}");
    }
}
