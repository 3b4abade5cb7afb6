//! The per-user agent (crates/capsule/src/agent.rs): `capsule run` starts
//! one and later runs of the same identity are served by it, each with
//! fresh namespaces; the caller's environment, not the agent's, reaches a
//! run; another identity gets another agent; an agent exits when idle,
//! stops taking requests when the host's mount table changes, and keeps
//! nothing of its first caller's (its stdout pipe ends with the run);
//! `--no-agent` forks a supervisor; `capsule agent status|stop`.
//!
//! Every test gives its runs an identity of their own (a CAPSULE_TEST_TAG
//! variable, which is part of the key), so that tests running at once
//! never share an agent, and stops its agents before it ends.

use capsule_testkit as common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use common::*;

/// A change of the host's mount table retires every agent of the user's:
/// the test that makes one runs alone, the others share this.
static HOST_MOUNTS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    HOST_MOUNTS.read().unwrap_or_else(|e| e.into_inner())
}

/// A `capsule` command with the agent on for identity `tag`.
fn cmd(tag: &str, args: &[&str]) -> Cmd {
    let mut c = capsule(args);
    c.env("CAPSULE_AGENT", "on").env("CAPSULE_AGENT_IDLE", "20").env("CAPSULE_TEST_TAG", tag);
    c
}

/// `capsule run -q -- sh -c SCRIPT` through the agent of `tag`.
fn run_sh(tag: &str, script: &str) -> Out {
    let out = cmd(tag, &["run", "-q", "--", "/bin/sh", "-c", script]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    out
}

/// The agent serving `tag`: its socket and pid, from `capsule agent status`.
fn own_agent(tag: &str) -> Option<(PathBuf, i32)> {
    own_agent_of(cmd(tag, &["agent", "status"]))
}

/// The agent that `status` (a `capsule agent status`) marks as its own.
fn own_agent_of(mut status: Cmd) -> Option<(PathBuf, i32)> {
    let out = status.run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    out.stdout.lines().find(|l| l.starts_with("* ")).map(|l| {
        let rest = &l[2..];
        let (sock, pid) = rest.rsplit_once("\tpid ").unwrap_or_else(|| panic!("status line: {l:?}"));
        (PathBuf::from(sock), pid.trim().parse().unwrap())
    })
}

fn python3() -> Result<(), String> {
    match std::path::Path::new("/usr/bin/python3").exists() {
        true => Ok(()),
        false => Err("python3 is not installed (/usr/bin/python3)".into()),
    }
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// The agent's child processes (its PID 1s).
fn children(pid: i32) -> Vec<String> {
    // Every thread's: PID 1s prepared ahead come from a spawner thread.
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let lists = tasks.map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default());
    lists.flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>()).collect()
}

/// Runs `f` and checks that agent `pid` served it: the agent forked a PID 1
/// it did not have before (it prepares the next run's once a run is done).
fn served_by(pid: i32, f: impl FnOnce()) {
    let before = children(pid);
    f();
    wait_until("a new PID 1 of the agent (the run was not served by it)", Duration::from_secs(5), || {
        children(pid).iter().any(|c| !before.contains(c))
    });
}

fn stop(tag: &str) {
    let out = cmd(tag, &["agent", "stop"]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
}

fn wait_until(what: &str, t: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + t;
    while !f() {
        assert!(Instant::now() < end, "{what} did not happen within {t:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const NS: &str = "for n in pid mnt net ipc uts user; do readlink /proc/self/ns/$n; done";

/// Two runs: the first starts the agent (its output pipe still ends with
/// the run: the harness reads stdout to its end), the second is served by
/// the same agent while the first still runs (namespace numbers are
/// reused once freed, so only live ones can be compared): each has
/// namespaces of its own. `agent stop` ends the agent and removes its
/// socket.
#[test]
fn agent_serves_repeated_runs_with_fresh_namespaces() {
    let _shared = shared();
    require!("agent_serves_repeated_runs_with_fresh_namespaces", userns_available());
    let tag = unique("agent-ns");
    run_sh(&tag, "true");
    let (sock, pid) = own_agent(&tag).expect("an agent after the first run");
    assert!(alive(pid), "agent {pid} is not running");
    assert!(sock.exists());
    let mut first = cmd(&tag, &["run", "-q", "--", "/bin/sh", "-c", &format!("{NS}; echo done; sleep 2")]).spawn();
    first.wait_line("done", Duration::from_secs(20));
    let mut b = None;
    served_by(pid, || b = Some(run_sh(&tag, NS)));
    let b = b.unwrap();
    let a = first.wait();
    assert_eq!(a.code, Some(0), "{}", a.describe());
    assert_eq!(own_agent(&tag), Some((sock.clone(), pid)), "the runs were served by another agent");
    assert_eq!(b.stdout.lines().count(), 6, "{}", b.describe());
    for (x, y) in a.stdout.lines().zip(b.stdout.lines()) {
        assert_ne!(x, y, "two runs of one agent share a namespace:\n{}\n{}", a.stdout, b.stdout);
    }
    stop(&tag);
    wait_until("the agent's exit", Duration::from_secs(5), || !alive(pid));
    assert!(!sock.exists(), "{} left behind", sock.display());
    assert_eq!(own_agent(&tag), None);
}

/// `--keep-env` takes the variable from the caller of each run, not from
/// the environment of the caller that started the agent.
#[test]
fn agent_runs_keep_the_callers_environment() {
    let _shared = shared();
    require!("agent_runs_keep_the_callers_environment", userns_available());
    let tag = unique("agent-env");
    run_sh(&tag, "true");
    let (_, pid) = own_agent(&tag).expect("an agent");
    for v in ["first", "second"] {
        let out =
            cmd(&tag, &["run", "-q", "--keep-env", "CAPSULE_T_VALUE", "--", "/bin/sh", "-c", "echo $CAPSULE_T_VALUE"])
                .env("CAPSULE_T_VALUE", v)
                .run();
        assert_eq!(out.code, Some(0), "{}", out.describe());
        assert_eq!(out.stdout.trim(), v, "{}", out.describe());
    }
    // CAPSULE_T_VALUE is in the identity (CAPSULE_*): two agents.
    let out = cmd(&tag, &["run", "-q", "--keep-env", "T_OTHER", "--", "/bin/sh", "-c", "echo $T_OTHER"])
        .env("T_OTHER", "mine")
        .run();
    assert_eq!(out.stdout.trim(), "mine", "{}", out.describe());
    let mut again = None;
    served_by(pid, || {
        again = Some(
            cmd(&tag, &["run", "-q", "--keep-env", "T_OTHER", "--", "/bin/sh", "-c", "echo $T_OTHER"])
                .env("T_OTHER", "yours")
                .run(),
        )
    });
    let again = again.unwrap();
    assert_eq!(again.stdout.trim(), "yours", "{}", again.describe());
    for v in ["first", "second"] {
        let out = cmd(&tag, &["agent", "stop"]).env("CAPSULE_T_VALUE", v).run();
        assert!(out.stdout.contains("stopped"), "{}", out.describe());
    }
    stop(&tag);
}

/// A caller with another identity (here another HOME) gets an agent of
/// its own; the same identity gets the same agent.
#[test]
fn other_identities_get_other_agents() {
    let _shared = shared();
    require!("other_identities_get_other_agents", userns_available());
    let tag = unique("agent-id");
    let key = |home: &str| {
        let out = cmd(&tag, &["agent", "key"]).env("HOME", home).run();
        assert_eq!(out.code, Some(0), "{}", out.describe());
        out.stdout.trim().to_string()
    };
    assert_ne!(key("/var/tmp"), key("/tmp"));
    assert_eq!(key("/tmp"), key("/tmp"));
    for home in ["/var/tmp", "/tmp"] {
        let out = cmd(&tag, &["run", "-q", "--", "/bin/true"]).env("HOME", home).run();
        assert_eq!(out.code, Some(0), "{}", out.describe());
    }
    let a = cmd(&tag, &["agent", "status"]).env("HOME", "/var/tmp").run();
    let b = cmd(&tag, &["agent", "status"]).env("HOME", "/tmp").run();
    let own = |o: &Out| o.stdout.lines().find(|l| l.starts_with("* ")).map(str::to_string);
    let (a, b) = (own(&a).expect("agent for /var/tmp"), own(&b).expect("agent for /tmp"));
    assert_ne!(a, b);
    for home in ["/var/tmp", "/tmp"] {
        let out = cmd(&tag, &["agent", "stop"]).env("HOME", home).run();
        assert!(out.stdout.contains("stopped"), "{}", out.describe());
    }
}

/// An agent exits after its idle time and removes its socket.
#[test]
fn agent_exits_when_idle() {
    let _shared = shared();
    require!("agent_exits_when_idle", userns_available());
    let tag = unique("agent-idle");
    let out = cmd(&tag, &["run", "-q", "--", "/bin/true"]).env("CAPSULE_AGENT_IDLE", "1").run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let mut status = cmd(&tag, &["agent", "status"]);
    status.env("CAPSULE_AGENT_IDLE", "1");
    let o = status.run();
    let line = o.stdout.lines().find(|l| l.starts_with("* ")).unwrap_or_else(|| panic!("no agent: {}", o.describe()));
    let (sock, pid) = line[2..].rsplit_once("\tpid ").unwrap();
    let (sock, pid) = (PathBuf::from(sock), pid.trim().parse::<i32>().unwrap());
    wait_until("the idle agent's exit", Duration::from_secs(10), || !alive(pid));
    assert!(!sock.exists(), "{} left behind", sock.display());
    assert!(!sock.with_extension("lock").exists(), "its lock file left behind");
}

/// `--no-agent` (and CAPSULE_AGENT=off) run without any agent.
#[test]
fn no_agent_forks_a_supervisor() {
    let _shared = shared();
    require!("no_agent_forks_a_supervisor", userns_available());
    let tag = unique("agent-off");
    let out = cmd(&tag, &["run", "-q", "--no-agent", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert_eq!(own_agent(&tag), None);
    let out = cmd(&tag, &["run", "-q", "--", "/bin/true"]).env("CAPSULE_AGENT", "off").run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let o = cmd(&tag, &["agent", "status"]).env("CAPSULE_AGENT", "off").run();
    assert!(o.stdout.contains("agents are off here: CAPSULE_AGENT=off"), "{}", o.describe());
    assert_eq!(own_agent(&tag), None);
}

/// Runs served by one agent at once each have a network of their own: both
/// bind the same port on 127.0.0.1.
#[test]
fn concurrent_runs_of_an_agent_have_their_own_network() {
    let _shared = shared();
    require!("concurrent_runs_of_an_agent_have_their_own_network", userns_available());
    require!("concurrent_runs_of_an_agent_have_their_own_network", python3());
    let tag = unique("agent-net");
    run_sh(&tag, "true");
    let script = "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',47123))\ns.listen()\nprint('bound',flush=True)\ntime.sleep(1.5)";
    let mut first = cmd(&tag, &["run", "-q", "--", "python3", "-c", script]).spawn();
    first.wait_line("bound", Duration::from_secs(20));
    let second = cmd(&tag, &["run", "-q", "--", "python3", "-c", script]).run();
    assert_eq!(second.code, Some(0), "{}", second.describe());
    let first = first.wait();
    assert_eq!(first.code, Some(0), "{}", first.describe());
    stop(&tag);
}

/// A change of the host's mount table retires an idle agent at once (its
/// view of the host was copied when it started); the next run starts a
/// new one and sees the new mount.
#[test]
fn agent_retires_when_the_host_mount_table_changes() {
    let _excl = HOST_MOUNTS.write().unwrap_or_else(|e| e.into_inner());
    require!("agent_retires_when_the_host_mount_table_changes", userns_available());
    require!("agent_retires_when_the_host_mount_table_changes", require_root());
    let tag = unique("agent-mnt");
    run_sh(&tag, "true");
    let (sock, pid) = own_agent(&tag).expect("an agent");
    let dir = Scratch::new("agent-mnt");
    let target = dir.join("m");
    std::fs::create_dir(&target).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "capsule-test"])
        .arg(&target)
        .status();
    assert!(st.is_ok_and(|s| s.success()), "mount tmpfs");
    // Unmounted however the test ends (before the scratch directory goes).
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(target.clone());
    std::fs::write(target.join("seen"), "new mount\n").unwrap();
    wait_until("the agent's retirement", Duration::from_secs(5), || !alive(pid));
    assert!(!sock.exists(), "{} left behind", sock.display());
    let out = run_sh(&tag, &format!("cat {}/seen", target.display()));
    assert_eq!(out.stdout.trim(), "new mount");
    let (_, pid2) = own_agent(&tag).expect("a new agent");
    assert_ne!(pid, pid2);
    stop(&tag);
}

/// The agents' directory is covered in every run, even one that binds it
/// (or `/tmp` above it): nothing of it shows. A sandboxed program that
/// reaches the agent's socket all the same (here through a hard link the
/// test makes beside it) is refused: connected, it gets no `Accepted`,
/// only the end of the connection, so it cannot have runs made outside
/// its own sandbox.
#[test]
fn a_sandboxed_program_is_refused_by_the_agent() {
    let _shared = shared();
    require!("a_sandboxed_program_is_refused_by_the_agent", userns_available());
    require!("a_sandboxed_program_is_refused_by_the_agent", python3());
    let tag = unique("agent-sbx");
    run_sh(&tag, "true");
    let (sock, pid) = own_agent(&tag).expect("an agent");
    let dir = sock.parent().unwrap().display().to_string();
    for bind in [&dir, "/tmp"] {
        let out = cmd(&tag, &["run", "-q", "--bind", bind, bind, "--", "/bin/ls", "-A", &dir]).run();
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{}", out.describe());
    }
    // The socket itself, bound somewhere else: covered there.
    let sock_s = sock.display().to_string();
    let out =
        cmd(&tag, &["run", "-q", "--bind", &sock_s, "/tmp/s", "--", "/bin/sh", "-c", "test -S /tmp/s || echo covered"])
            .run();
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "covered\n"), "{}", out.describe());
    let scratch = Scratch::new("agent-sbx");
    let link = scratch.join("agent.sock");
    std::fs::hard_link(&sock, &link).unwrap();
    let script = format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.settimeout(10)\nprint('got', len(s.recv(100)))",
        link.display().to_string()
    );
    let out =
        cmd(&tag, &["run", "-q", "--no-agent", "--bind", &scratch.s(), &scratch.s(), "--", "python3", "-c", &script])
            .run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert_eq!(out.stdout.trim(), "got 0", "{}", out.describe());
    // The agent itself is unharmed, and serves its own callers.
    assert!(alive(pid));
    served_by(pid, || {
        run_sh(&tag, "true");
    });
    assert_eq!(own_agent(&tag).map(|(_, p)| p), Some(pid));
    stop(&tag);
}

/// With `XDG_RUNTIME_DIR` set (a private directory of the user's), the
/// agents' directory there is covered too, in a run that shows its parent
/// writable, served by the agent or by a supervisor of its own.
#[test]
fn the_agents_directory_is_covered_under_xdg_runtime_dir() {
    let _shared = shared();
    require!("the_agents_directory_is_covered_under_xdg_runtime_dir", userns_available());
    let tag = unique("agent-xdg");
    // A short path: a socket's path holds at most 107 bytes.
    let scratch = Scratch::new("x");
    let runtime = scratch.mkdir("r");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let agents = runtime.join("capsule");
    let list = |extra: &[&str]| {
        let mut c = cmd(&tag, &["run", "-q", "--writable", &scratch.s()]);
        c.args(extra).args(&["--", "/bin/ls", "-A", &agents.display().to_string()]);
        c.env("XDG_RUNTIME_DIR", &runtime.display().to_string());
        c.run()
    };
    for extra in [&[][..], &[], &["--no-agent"]] {
        let out = list(extra);
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), ""), "{extra:?}: {}", out.describe());
    }
    let socks = std::fs::read_dir(&agents)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sock"))
        .count();
    assert_eq!(socks, 1, "no agent socket in {}", agents.display());
    let out = cmd(&tag, &["agent", "stop"]).env("XDG_RUNTIME_DIR", &runtime.display().to_string()).run();
    assert!(out.stdout.contains("stopped"), "{}", out.describe());
}

/// A `$XDG_RUNTIME_DIR` too long for a socket path beneath it (a
/// `sockaddr_un` holds 107 bytes) sends the agents to
/// `/tmp/capsule-agent-UID`: one agent serves both runs (before, its bind
/// failed unseen and every run forked a supervisor of its own).
#[test]
fn a_long_xdg_runtime_dir_sends_the_agent_to_tmp() {
    let _shared = shared();
    require!("a_long_xdg_runtime_dir_sends_the_agent_to_tmp", userns_available());
    let tag = unique("agent-long");
    let scratch = Scratch::new("x");
    let runtime = scratch.mkdir(&"r".repeat(60));
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let xdg = runtime.display().to_string();
    assert!(xdg.len() > 55, "{xdg} is not long enough for the test");
    let with_xdg = |args: &[&str]| {
        let mut c = cmd(&tag, args);
        c.env("XDG_RUNTIME_DIR", &xdg);
        c
    };
    let mut pids = Vec::new();
    for _ in 0..2 {
        with_xdg(&["run", "-q", "--", "/bin/true"]).run().assert_code(0);
        let (sock, pid) = own_agent_of(with_xdg(&["agent", "status"])).expect("no agent serves the caller");
        assert!(sock.starts_with(format!("/tmp/capsule-agent-{}", h().uid)), "{}", sock.display());
        pids.push(pid);
    }
    assert_eq!(pids[0], pids[1], "the second run was not served by the first run's agent");
    let out = with_xdg(&["agent", "stop"]).run();
    assert!(out.stdout.contains("stopped"), "{}", out.describe());
}

/// Settings of the agent that make no sense are errors naming them.
#[test]
fn bad_agent_settings_are_errors() {
    let _shared = shared();
    require!("bad_agent_settings_are_errors", userns_available());
    let tag = unique("agent-bad");
    for (k, v, want) in [
        ("CAPSULE_AGENT_IDLE", "soon", "CAPSULE_AGENT_IDLE=soon: expected a number of seconds"),
        ("CAPSULE_AGENT_IDLE", "0", "CAPSULE_AGENT_IDLE=0: expected a number of seconds"),
        ("CAPSULE_AGENT", "maybe", "CAPSULE_AGENT=maybe: expected on or off"),
    ] {
        let out = cmd(&tag, &["run", "-q", "--", "/bin/true"]).env(k, v).run();
        assert_eq!(out.code, Some(125), "{}", out.describe());
        assert!(out.stderr.contains(want), "{}", out.describe());
    }
    assert_eq!(own_agent(&tag), None);
}

/// The front end (`capsule`, linked without a C library) hands `capsule
/// run` to the agent capsule-cli started for the same caller (so both
/// compute the same key) and does not execute capsule-cli for it: here
/// capsule-cli loses its execute permission once the agent runs (the key
/// covers the file, not its mode). The agent parses the command line as
/// capsule-cli does: options, the caller's directory and environment,
/// values with quotes, backslashes, newlines and non-ASCII text, a bad
/// value (exit 125 and the message), the program's exit status and the
/// summary line. A command line the agent declines (`--json FILE`) and
/// every other subcommand go to capsule-cli, which fails here, named.
#[test]
fn the_front_end_serves_runs_without_capsule_cli() {
    let _shared = shared();
    require!("the_front_end_serves_runs_without_capsule_cli", userns_available());
    let tag = unique("agent-front");
    let dir = Scratch::new("front");
    for name in ["capsule", "capsule-cli"] {
        std::fs::copy(h().bin_dir.join(name), dir.join(name)).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let front = |args: &[&str]| {
        let mut c = cmd(&tag, args);
        c.binary(dir.join("capsule")).cwd(dir.path.clone()).env("FRONT_VAR", "from the caller");
        c
    };
    // The first run has no agent to go to: capsule-cli starts one.
    let out = front(&["run", "-q", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let (_, pid) = own_agent_of(front(&["agent", "status"])).expect("an agent after the first run");
    std::fs::set_permissions(dir.join("capsule-cli"), std::fs::Permissions::from_mode(0o644)).unwrap();

    let value = "a \"quoted\" \\ back\\slash\nnew line, tab\t, ünïcödé ✓";
    let mut served = None;
    served_by(pid, || {
        let script = "printf '%s|%s|%s' \"$V\" \"$FRONT_VAR\" \"$(pwd)\"; exit 7";
        served = Some(
            front(&[
                "run",
                "--wall-time",
                "20s",
                "--setenv",
                "V",
                value,
                "--keep-env",
                "FRONT_VAR",
                "--",
                "/bin/sh",
                "-c",
                script,
            ])
            .run(),
        );
    });
    let out = served.unwrap();
    assert_eq!(out.code, Some(7), "{}", out.describe());
    assert_eq!(out.stdout, format!("{value}|from the caller|{}", dir.s()), "{}", out.describe());
    assert!(out.stderr.starts_with("capsule: exited with 7 after "), "{}", out.describe());

    let out = front(&["run", "-q", "--wall-time", "soon", "--", "/bin/true"]).run();
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("--wall-time: `soon` is not a duration"), "{}", out.describe());
    assert!(!out.stderr.contains("capsule-cli"), "{}", out.describe());

    for args in [&["run", "--json", "r.json", "--", "/bin/true"][..], &["agent", "status"][..]] {
        let out = front(args).run();
        assert_eq!(out.code, Some(125), "{args:?}: {}", out.describe());
        assert!(
            out.stderr.contains("cannot execute") && out.stderr.contains("capsule-cli"),
            "{args:?}: {}",
            out.describe()
        );
    }
    std::fs::set_permissions(dir.join("capsule-cli"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = front(&["agent", "stop"]).run();
    assert!(out.stdout.contains("stopped"), "{}", out.describe());
}

/// An idle agent steps aside once another agent of the user had a request
/// after its own last one: a tenth of its idle time later (here 10 s of
/// 100), not at the end of it, so a user keeps the agents in use rather
/// than one per identity met.
#[test]
fn an_idle_agent_steps_aside_for_a_busier_one() {
    let _shared = shared();
    require!("an_idle_agent_steps_aside_for_a_busier_one", userns_available());
    let (a, b) = (unique("agent-aside-a"), unique("agent-aside-b"));
    let with_idle = |tag: &str, args: &[&str]| {
        let mut c = cmd(tag, args);
        c.env("CAPSULE_AGENT_IDLE", "100");
        c
    };
    let run = |tag: &str| {
        let out = with_idle(tag, &["run", "-q", "--", "/bin/true"]).run();
        assert_eq!(out.code, Some(0), "{}", out.describe());
    };
    run(&a);
    let (_, pid_a) = own_agent_of(with_idle(&a, &["agent", "status"])).expect("the first identity's agent");
    // (`agent status` connects to every agent: from here on, no more of it.)
    run(&b);
    let since = Instant::now();
    wait_until("the idle agent stepping aside", Duration::from_secs(40), || !alive(pid_a));
    let after = since.elapsed();
    assert!(after >= Duration::from_secs(7), "it stepped aside after {after:?}, before its 10 s of idleness");
    for tag in [&a, &b] {
        let _ = with_idle(tag, &["agent", "stop"]).run();
    }
}

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

/// An idle agent with its two spares prepared (a PID 1 each, whose tracee
/// waits for a run) has no process in state D: the load average counts
/// those as busy, and an agent idles between a user's runs.
#[test]
fn an_idle_agents_spares_are_not_in_uninterruptible_sleep() {
    let _shared = shared();
    require!("an_idle_agents_spares_are_not_in_uninterruptible_sleep", userns_available());
    let tag = unique("agent-idle");
    run_sh(&tag, "true");
    let (_, pid) = own_agent(&tag).expect("an agent after the first run");
    wait_until("two spares waiting for a run", Duration::from_secs(30), || {
        process_tree(pid).iter().filter(|(_, state, comm)| comm == "capsule-tracee" && *state == 'S').count() >= 2
    });
    for _ in 0..20 {
        let tree = process_tree(pid);
        let blocked: Vec<_> = tree.iter().filter(|(_, state, _)| *state == 'D').collect();
        if !blocked.is_empty() {
            stop(&tag);
            panic!("idle, in uninterruptible sleep (state D): {blocked:?}; the tree: {tree:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    stop(&tag);
}
