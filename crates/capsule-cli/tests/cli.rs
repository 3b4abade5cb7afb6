//! The `capsule` command line: exit statuses, the result files, limits,
//! errors, and the options that shape the sandbox.

use capsule_testkit as common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

// 11: exit codes, signals, limits, result files ---------------------------

#[test]
fn exit_codes_pass_through() {
    require!("exit_codes_pass_through", userns_available());
    for code in [0, 1, 42] {
        let out = run_probe(&[], &["exit", &code.to_string()]).run();
        out.assert_code(code);
        assert_eq!(out.status(), "exited", "{}", out.describe());
        assert_eq!(out.json()["exit_code"], code, "{}", out.describe());
        assert!(out.json()["signal"].is_null(), "{}", out.describe());
    }
}

#[test]
fn signal_death_is_reported() {
    require!("signal_death_is_reported", userns_available());
    let out = run_probe(&[], &["signal", "SIGSEGV"]).run();
    out.assert_code(139);
    let j = out.json();
    assert_eq!(j["status"], "signaled", "{}", out.describe());
    assert_eq!(j["signal"], "SIGSEGV", "{}", out.describe());
    assert!(j["exit_code"].is_null(), "{}", out.describe());
    let out = run_probe(&[], &["signal", "SIGTERM"]).run();
    out.assert_code(143);
    assert_eq!(out.json()["signal"], "SIGTERM", "{}", out.describe());
}

#[test]
fn wall_time_limit() {
    require!("wall_time_limit", userns_available());
    let out = run_probe(&["--wall-time", "300ms"], &["sleep", "10000"]).run();
    out.assert_code(124);
    let j = out.json();
    assert_eq!(j["status"], "wall-time-limit", "{}", out.describe());
    let ms = j["wall_time_ms"].as_f64().unwrap_or_else(|| panic!("wall_time_ms: {}", out.describe()));
    assert!((300.0..800.0).contains(&ms), "wall_time_ms {ms} not in [300, 800); {}", out.describe());
    assert!(out.elapsed < Duration::from_secs(5), "capsule took {:?}", out.elapsed);
}

#[test]
fn output_limit() {
    require!("output_limit", userns_available());
    let out = run_probe(&["--output-limit", "1K"], &["write-bytes", "1048576", "/tmp/out"]).run();
    out.assert_code(122);
    assert_eq!(out.status(), "output-limit", "{}", out.describe());
    // Control: without the limit the same write succeeds.
    let out = run_probe(&[], &["write-bytes", "1048576", "/tmp/out"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("written"), "1048576", "{}", out.describe());
}

#[test]
fn json_and_meta_agree() {
    require!("json_and_meta_agree", userns_available());
    for (probe_args, status, code) in [(&["exit", "3"][..], "exited", 3), (&["signal", "SIGABRT"][..], "signaled", 134)]
    {
        let out = run_probe(&[], probe_args).meta().run();
        out.assert_code(code);
        assert_eq!(out.status(), status, "{}", out.describe());
        let j = out.json().as_object().unwrap().clone();
        let meta = out.meta.clone().unwrap_or_else(|| panic!("no --meta file; {}", out.describe()));
        let lines: Vec<(&str, &str)> = meta.lines().filter_map(|l| l.split_once(':')).collect();
        for key in ["status", "wall_time_ms", "cpu_user_ms", "cpu_system_ms", "peak_memory_bytes", "accounting"] {
            assert!(j.contains_key(key), "JSON lacks {key}: {j:?}");
        }
        for (k, v) in &j {
            let want = match v {
                serde_json::Value::Null => {
                    assert!(!lines.iter().any(|(mk, _)| mk == k), "meta has null field {k}: {meta}");
                    continue;
                }
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let got = lines.iter().find(|(mk, _)| mk == k).map(|(_, v)| *v);
            assert_eq!(got, Some(want.as_str()), "meta and JSON disagree on {k}:\n{meta}\n{j:?}");
        }
        assert_eq!(lines.len(), j.values().filter(|v| !v.is_null()).count(), "extra meta lines:\n{meta}");
        let acc = j["accounting"].as_str().unwrap();
        assert!(acc == "cgroup" || acc == "rusage", "accounting {acc}");
    }
}

#[test]
fn malformed_profile_is_rejected() {
    let dir = Scratch::new("profile");
    let bad = dir.write("bad.toml", b"this is [not toml\n");
    let out = capsule(&["run", "--profile", bad.to_str().unwrap(), "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(
        out.stderr.contains("bad.toml") || out.stderr.to_lowercase().contains("profile"),
        "message does not name the profile: {}",
        out.describe()
    );
    let unknown = dir.write("unknown.toml", b"bogus_field = 1\n");
    let out = capsule(&["run", "--profile", unknown.to_str().unwrap(), "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("bogus_field"), "message does not name the field: {}", out.describe());
    let missing = dir.join("missing.toml");
    let out = capsule(&["run", "--profile", missing.to_str().unwrap(), "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("missing.toml"), "{}", out.describe());
}

#[test]
fn unknown_flag_is_rejected() {
    for argv in [
        &["run", "--no-such-flag", "--", "/bin/echo", "RAN"][..],
        &["run", "--wall-time", "1s", "--no-such-flag", "--", "/bin/echo", "RAN"][..],
    ] {
        let out = capsule(argv).run();
        assert!(matches!(out.code, Some(2) | Some(125)), "{argv:?}: {}", out.describe());
        assert!(out.stderr.contains("--no-such-flag"), "{argv:?}: {}", out.describe());
        // Rejected as a flag, not taken for the program or run anyway.
        assert!(!out.stdout.contains("RAN"), "{argv:?}: ran anyway: {}", out.describe());
        assert!(!out.stderr.contains("ENOENT"), "{argv:?}: taken for a program: {}", out.describe());
        assert!(!out.stderr.contains("building"), "{argv:?}: sandbox setup reached: {}", out.describe());
    }
}

#[test]
fn missing_program_is_an_error() {
    require!("missing_program_is_an_error", userns_available());
    let out = capsule(&["run", "--", "/nonexistent"]).json().run();
    out.assert_code(125);
    assert!(out.stderr.contains("/nonexistent"), "message does not name the path: {}", out.describe());
    assert!(out.stderr.contains("ENOENT"), "message does not name the errno: {}", out.describe());
    assert_eq!(out.status(), "error", "{}", out.describe());
    let err = out.json()["error"].as_str().unwrap_or("");
    assert!(err.contains("/nonexistent"), "{}", out.describe());
    // Not on PATH either.
    let out = capsule(&["run", "--", "capsule-no-such-program"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("capsule-no-such-program"), "{}", out.describe());
}

#[test]
fn missing_bind_source_is_an_error() {
    require!("missing_bind_source_is_an_error", userns_available());
    let out = capsule(&["run", "--bind", "/nonexistent-capsule-src", "/mnt", "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("/nonexistent-capsule-src"), "{}", out.describe());
    // The -try form skips it.
    let out = capsule(&["run", "-q", "--bind-try", "/nonexistent-capsule-src", "/mnt", "--", "/bin/true"]).run();
    out.assert_code(0);
}

/// A symbolic link owned by the capsule user, as one a sandboxed run
/// could have planted (everything a run creates on the host is the
/// user's): never followed as a bind or `--file` source, at the end of the
/// path or in its middle; the error names the link and the fix.
#[test]
fn user_owned_link_as_source_is_refused() {
    require!("user_owned_link_as_source_is_refused", userns_available());
    let dir = Scratch::new("userlink");
    dir.mkdir("secret");
    dir.write("secret/marker", b"SECRET\n");
    let link = dir.join("link");
    std::os::unix::fs::symlink(dir.join("secret"), &link).unwrap();
    if h().is_root {
        std::os::unix::fs::lchown(&link, Some(h().uid), Some(h().gid)).unwrap();
    }
    let l = link.display().to_string();
    let marker = format!("{l}/marker");
    let cases: [&[&str]; 6] = [
        &["--bind", &l, "/mnt"],
        &["--ro-bind", &l, "/mnt"],
        &["--dev-bind", &l, "/mnt"],
        &["--ro-bind-try", &l, "/mnt"],
        &["--ro-bind", &marker, "/mnt/marker"],
        &["--file", &marker, "/tmp/marker"],
    ];
    for opts in cases {
        let mut argv = vec!["run"];
        argv.extend_from_slice(opts);
        argv.extend(["--", "/bin/cat", "/mnt/marker"]);
        let out = capsule(&argv).run();
        out.assert_code(125);
        assert!(!out.stdout.contains("SECRET"), "{opts:?}: followed the link; {}", out.describe());
        for needle in [format!("`{l}` is a symbolic link"), "owned by you".into(), "--symlink".into()] {
            assert!(out.stderr.contains(&needle), "{opts:?}: no {needle:?}; {}", out.describe());
        }
    }
    // The target named directly is fine.
    let out = capsule(&[
        "run",
        "-q",
        "--ro-bind",
        &dir.join("secret").display().to_string(),
        "/mnt",
        "--",
        "/bin/cat",
        "/mnt/marker",
    ])
    .run();
    out.assert_code(0);
    assert_eq!(out.stdout, "SECRET\n", "{}", out.describe());
}

/// A link the capsule user cannot have made (root's, in a root-owned
/// directory, like the system's `/lib64`) is followed, as a bind and a
/// `--file` source.
#[test]
fn root_owned_link_as_source_is_followed() {
    require!("root_owned_link_as_source_is_followed", require_root());
    require!("root_owned_link_as_source_is_followed", userns_available());
    let dir = Scratch::new("rootlink");
    dir.mkdir("target");
    dir.write("target/marker", b"TARGET\n");
    let rootdir = dir.join("rootdir");
    std::fs::create_dir(&rootdir).unwrap();
    std::fs::set_permissions(&rootdir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let link = rootdir.join("link");
    std::os::unix::fs::symlink("../target", &link).unwrap();
    let l = link.display().to_string();
    let marker = format!("{l}/marker");
    for (opts, at) in
        [(&["--ro-bind", &l, "/mnt"][..], "/mnt/marker"), (&["--file", &marker, "/tmp/marker"][..], "/tmp/marker")]
    {
        let mut argv = vec!["run", "-q"];
        argv.extend_from_slice(opts);
        argv.extend(["--", "/bin/cat", at]);
        let out = capsule(&argv).run();
        out.assert_code(0);
        assert_eq!(out.stdout, "TARGET\n", "{opts:?}: {}", out.describe());
    }
    // A -try source behind it that is missing is still skipped.
    let out = capsule(&["run", "-q", "--ro-bind-try", &format!("{l}/missing"), "/mnt", "--", "/bin/true"]).run();
    out.assert_code(0);
}

// 12 ----------------------------------------------------------------------

#[test]
fn refuses_to_run_as_root() {
    require!("refuses_to_run_as_root", require_root());
    let out = capsule(&["run", "--", "/bin/true"]).as_caller().run();
    out.assert_code(125);
    assert!(out.stderr.contains("root"), "message does not mention root: {}", out.describe());
}

#[test]
fn check_reports_ok() {
    require!("check_reports_ok", userns_available());
    let out = capsule(&["check"]).run();
    out.assert_code(0);
    assert!(!(out.stdout.trim().is_empty() && out.stderr.trim().is_empty()), "empty report");
}

// Sandbox shape ---------------------------------------------------------------

/// The shared libraries the probe needs, from `ldd`.
fn probe_libs() -> Vec<String> {
    let out = Command::new("ldd").arg(&h().probe).output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for l in text.lines() {
        let l = l.trim();
        let path = match l.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next().unwrap_or(""),
            None => l.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push(path.to_string());
        }
    }
    libs
}

#[test]
fn empty_root_has_only_what_is_bound() {
    require!("empty_root_has_only_what_is_bound", userns_available());
    let bin = h().bin_dir.display().to_string();
    let mut opts: Vec<String> = vec!["--empty-root".into(), "--ro-bind".into(), bin.clone(), bin.clone()];
    for lib in probe_libs() {
        // Bind the real file at the path the loader asks for (outside /usr).
        let real = std::fs::canonicalize(&lib).unwrap().display().to_string();
        let at = lib.replacen("/usr/lib", "/lib", 1);
        opts.extend(["--ro-bind".into(), real, at]);
    }
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let out = run_probe(&opts, &["stat", "/usr", "/etc/passwd", &bin, "/"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("stat./usr"), "ENOENT", "/usr visible with --empty-root; {}", out.describe());
    assert_eq!(kv.must("stat./etc/passwd"), "ENOENT", "{}", out.describe());
    assert_eq!(kv.must(&format!("stat.{bin}")), "ok", "{}", out.describe());
    assert_eq!(kv.must(&format!("stat.{bin}.readonly")), "1", "{}", out.describe());
}

#[test]
fn environment_is_cleared() {
    require!("environment_is_cleared", userns_available());
    let out = run_probe(&["--setenv", "GREETING", "hello world", "--keep-env", "KEEPME"], &["env"])
        .env("KEEPME", "kept")
        .env("SECRET", "must-not-leak")
        .run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("env.PATH"), DEFAULT_PATH, "{}", out.describe());
    assert_eq!(kv.must("env.GREETING"), "hello world", "{}", out.describe());
    assert_eq!(kv.must("env.KEEPME"), "kept", "{}", out.describe());
    assert_eq!(kv.get("env.SECRET"), None, "caller's environment leaked; {}", out.describe());
    assert_eq!(kv.must("env_count"), "3", "unexpected variables; {}", out.describe());
}

fn caps_zero(kv: &Kv, out: &Out) {
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd"] {
        assert_eq!(kv.must(&format!("status.{cap}")), "0000000000000000", "{cap}; {}", out.describe());
    }
    assert_eq!(kv.must("no_new_privs"), "1", "{}", out.describe());
}

#[test]
fn identities_and_privileges() {
    require!("identities_and_privileges", userns_available());
    let out = run_probe(&[], &["ids"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("uid"), h().uid.to_string(), "{}", out.describe());
    assert_eq!(kv.must("gid"), h().gid.to_string(), "{}", out.describe());
    caps_zero(&kv, &out);
    // PID 1 is capsule's; the program is its child, in its own session.
    assert_eq!(kv.must("ppid"), "1", "{}", out.describe());
    assert_ne!(kv.must("pid"), "1", "{}", out.describe());
    assert_eq!(kv.must("sid"), kv.must("pid"), "program is not a session leader; {}", out.describe());

    let out = run_probe(&["--uid", "1234", "--gid", "5678"], &["ids"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("uid"), "1234", "{}", out.describe());
    assert_eq!(kv.must("euid"), "1234", "{}", out.describe());
    assert_eq!(kv.must("gid"), "5678", "{}", out.describe());
    caps_zero(&kv, &out);

    let out = run_probe(&["--root"], &["ids"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("uid"), "0", "{}", out.describe());
    assert_eq!(kv.must("gid"), "0", "{}", out.describe());
    caps_zero(&kv, &out);
}

#[test]
fn default_filesystem_view() {
    require!("default_filesystem_view", userns_available());
    let host_tmp = std::env::temp_dir().join(unique("capsule-host-tmp"));
    std::fs::write(&host_tmp, "host").unwrap();
    let ht = host_tmp.display().to_string();
    let out = run_probe(
        &[],
        &[
            "stat",
            "/",
            "/usr",
            "/tmp",
            "/proc",
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/shm",
            "/dev/tty",
            "/dev/pts",
            &ht,
        ],
    )
    .run();
    let _ = std::fs::remove_file(&host_tmp);
    let kv = out.assert_probe_ok();
    let d = out.describe();
    for k in ["stat./.readonly", "stat./usr.readonly", "stat./.nosuid", "stat./.nodev"] {
        assert_eq!(kv.must(k), "1", "{k}; {d}");
    }
    assert_eq!(kv.must("stat./tmp.fstype"), "tmpfs", "{d}");
    assert_eq!(kv.must("stat./tmp.readonly"), "0", "{d}");
    assert_eq!(kv.must("stat./proc.fstype"), "proc", "{d}");
    for dev in ["null", "zero", "full", "random", "urandom"] {
        assert_eq!(kv.must(&format!("stat./dev/{dev}.type")), "char", "/dev/{dev}; {d}");
    }
    assert_eq!(kv.must("stat./dev/shm.fstype"), "tmpfs", "{d}");
    assert_eq!(kv.must("stat./dev/tty"), "ENOENT", "{d}");
    assert_eq!(kv.must("stat./dev/pts"), "ENOENT", "{d}");
    assert_eq!(kv.must(&format!("stat.{ht}")), "ENOENT", "host /tmp visible inside; {d}");

    // The fresh /proc shows only the run's processes: the program, not
    // even PID 1 (hidepid: its memory is the supervisor's).
    let out = run_probe(&[], &["ls", "/proc"]).run();
    let kv = out.assert_probe_ok();
    let pids: Vec<&str> = kv.must("entries").split(',').filter(|e| e.parse::<u32>().is_ok()).collect();
    assert_eq!(pids, ["2"], "processes other than the program visible in /proc; {}", out.describe());
}

#[test]
fn rlimits_are_applied() {
    require!("rlimits_are_applied", userns_available());
    let out = run_probe(&["--open-files", "64", "--stack", "16M", "--address-space", "4G"], &["rlimits"]).run();
    let kv = out.assert_probe_ok();
    let soft = |k: &str| kv.must(k).split_whitespace().next().unwrap().to_string();
    assert_eq!(soft("rlimit.nofile"), "64", "{}", out.describe());
    assert_eq!(soft("rlimit.stack"), (16u64 << 20).to_string(), "{}", out.describe());
    assert_eq!(soft("rlimit.as"), (4u64 << 30).to_string(), "{}", out.describe());
    assert_eq!(soft("rlimit.core"), "0", "core dumps not off; {}", out.describe());
}

#[test]
fn hide_makes_paths_empty_and_read_only() {
    require!("hide_makes_paths_empty_and_read_only", userns_available());
    let dir = Scratch::new("hide");
    let secret = dir.write("secret", b"top secret\n");
    let sdir = dir.mkdir("secret-dir");
    std::fs::write(sdir.join("inner"), "x").unwrap();
    let s = secret.display().to_string();
    let out = run_probe(&["--bind", &dir.s(), &dir.s(), "--hide", &s], &["try-write", &s]).run();
    let kv = out.assert_probe_ok();
    assert_ne!(kv.must("write"), "ok", "hidden file writable; {}", out.describe());
    assert_eq!(kv.must("read_back"), "", "hidden file not empty; {}", out.describe());
    // Control: without --hide the bind is writable and shows the content.
    let out = run_probe(&["--bind", &dir.s(), &dir.s()], &["cat", &s]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("content"), "top secret\\n", "{}", out.describe());

    let sd = sdir.display().to_string();
    let out = run_probe(&["--hide", &sd], &["ls", &sd]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("entries"), "", "hidden directory not empty; {}", out.describe());
    assert_eq!(std::fs::read(&secret).unwrap(), b"top secret\n");
}

#[test]
fn tmpfs_and_mount_ops() {
    require!("tmpfs_and_mount_ops", userns_available());
    let out = run_probe(
        &[
            "--tmpfs",
            "/mnt",
            "--size",
            "1M",
            "--dir",
            "/mnt/d",
            "--file-data",
            "/mnt/f",
            "hello",
            "--symlink",
            "/mnt/f",
            "/mnt/l",
            "--tmpfs",
            "/srv",
            "--noexec",
        ],
        &["stat", "/mnt", "/mnt/d", "/mnt/f", "/mnt/l", "/srv"],
    )
    .run();
    let kv = out.assert_probe_ok();
    let d = out.describe();
    assert_eq!(kv.must("stat./mnt.fstype"), "tmpfs", "{d}");
    assert_eq!(kv.must("stat./mnt.readonly"), "0", "{d}");
    assert_eq!(kv.must("stat./mnt.blocks"), (1u64 << 20).to_string(), "--size not applied; {d}");
    assert_eq!(kv.must("stat./mnt/d.type"), "dir", "{d}");
    assert_eq!(kv.must("stat./mnt/f.type"), "file", "{d}");
    assert_eq!(kv.must("stat./mnt/f.size"), "5", "{d}");
    assert_eq!(kv.must("stat./mnt/l.type"), "symlink", "{d}");
    assert_eq!(kv.must("stat./srv.noexec"), "1", "--noexec not applied; {d}");
    assert_eq!(kv.must("stat./mnt.noexec"), "0", "{d}");

    let out = run_probe(&["--tmpfs", "/mnt"], &["try-write", "/mnt/x"]).run();
    assert_eq!(out.assert_probe_ok().must("write"), "ok", "{}", out.describe());
}

#[test]
fn bind_and_ro_bind() {
    require!("bind_and_ro_bind", userns_available());
    let dir = Scratch::new("bind");
    let out = run_probe(&["--bind", &dir.s(), "/mnt"], &["try-write", "/mnt/from-sandbox"]).run();
    assert_eq!(out.assert_probe_ok().must("write"), "ok", "{}", out.describe());
    assert!(dir.join("from-sandbox").exists(), "write through --bind not visible on the host");
    let out = run_probe(&["--ro-bind", &dir.s(), "/mnt"], &["try-write", "/mnt/ro"]).run();
    assert_eq!(out.assert_probe_ok().must("write"), "EROFS", "{}", out.describe());
    assert!(!dir.join("ro").exists());
}

#[test]
fn pids_limit_is_per_run() {
    require!("pids_limit_is_per_run", userns_available());
    // The test user has other processes on the host; RLIMIT_NPROC is
    // counted per user namespace, so they must not count against the run.
    let tag = unique("held:pids-filler");
    let _fillers: Vec<HostProc> = (0..6).map(|_| HostProc::hold(&tag)).collect();
    let out = run_probe(&["--pids", "5"], &["fork-many", "20"]).run();
    let kv = out.assert_probe_ok();
    let forked: u32 = kv.must("forked").parse().unwrap();
    assert!((2..=5).contains(&forked), "forked {forked} with --pids 5; {}", out.describe());
    assert_eq!(kv.must("fork_error"), "EAGAIN", "{}", out.describe());
    // Control: without the limit all 20 forks succeed.
    let out = run_probe(&[], &["fork-many", "20"]).run();
    assert_eq!(out.assert_probe_ok().must("forked"), "20", "{}", out.describe());
}

/// The program lives in PID 1's user namespace, where the bounds on its
/// nested namespaces are (it reads them there), except when its process
/// limit is RLIMIT_NPROC (`--pids` without a cgroup): the kernel counts that
/// per user namespace and uid, PID 1 has the program's uid, and the tracee
/// then makes one of its own below, where only the program's processes
/// count (it reads the kernel's unbounded default there).
#[test]
fn the_program_shares_pid1s_user_namespace_unless_rlimit_nproc_counts() {
    require!("the_program_shares_pid1s_user_namespace_unless_rlimit_nproc_counts", userns_available());
    let read = |opts: &[&str]| {
        let mut c = capsule(&["run", "-q"]);
        c.args(opts).args(&["--", "/bin/cat", "/proc/sys/user/max_user_namespaces", "/proc/self/uid_map"]);
        let out = c.json().run();
        out.assert_code(0);
        let acc = out.json()["accounting"].as_str().unwrap_or_default().to_string();
        let first = out.stdout.lines().next().unwrap_or_default().to_string();
        (first, acc, out)
    };
    let (bound, _, out) = read(&[]);
    assert_eq!(bound, capsule::spec::NESTED_NAMESPACES.to_string(), "{}", out.describe());
    let (bound, acc, out) = read(&["--pids", "9"]);
    let own = if acc == "cgroup" { capsule::spec::NESTED_NAMESPACES.to_string() } else { i32::MAX.to_string() };
    assert_eq!(bound, own, "--pids 9 with accounting {acc}; {}", out.describe());
}

#[test]
fn working_directory() {
    require!("working_directory", userns_available());
    let dir = Scratch::new("cwd");
    let out = run_probe(&[], &["cwd"]).cwd(&dir.path).run();
    assert_eq!(out.assert_probe_ok().must("cwd"), dir.s(), "caller's cwd not kept; {}", out.describe());
    let out = run_probe(&["--chdir", "/usr"], &["cwd"]).cwd(&dir.path).run();
    assert_eq!(out.assert_probe_ok().must("cwd"), "/usr", "{}", out.describe());
    // A cwd the sandbox cannot see (the host's /tmp): fall back to /.
    let host_tmp = Path::new("/tmp").join(unique("capsule-cwd"));
    std::fs::create_dir(&host_tmp).unwrap();
    let out = run_probe(&[], &["cwd"]).cwd(&host_tmp).run();
    let _ = std::fs::remove_dir(&host_tmp);
    assert_eq!(out.assert_probe_ok().must("cwd"), "/", "{}", out.describe());
}

#[test]
fn stdio_redirection() {
    require!("stdio_redirection", userns_available());
    let dir = Scratch::new("stdio");
    let input = dir.write("in.txt", b"from stdin\n");
    let stdout = dir.join("out.txt");
    let out = run_probe(
        &["--stdin", input.to_str().unwrap(), "--stdout", stdout.to_str().unwrap()],
        &["cat", "/proc/self/fd/0"],
    )
    .run();
    out.assert_code(0);
    assert!(out.stdout.is_empty(), "stdout not redirected: {}", out.describe());
    let text =
        std::fs::read_to_string(&stdout).unwrap_or_else(|e| panic!("{}: {e}; {}", stdout.display(), out.describe()));
    let kv = Kv::parse(&text);
    assert_eq!(kv.must("content"), "from stdin\\n", "{text}");
}

#[test]
fn hostname_option() {
    require!("hostname_option", userns_available());
    let out = run_probe(&["--hostname", "box-7"], &["hostname"]).run();
    assert_eq!(out.assert_probe_ok().must("hostname"), "box-7", "{}", out.describe());
}

/// The supervisor re-executes its binary inside its user namespace, which
/// needs read permission on it (an unreadable binary would leave its
/// memory the host's, and no run could write its id maps): a binary the
/// user may execute but not read is refused with a message saying so,
/// before any run. (A binary the user owns is readable to the supervisor
/// whatever its mode: it is root over its owner in its namespace. Hence
/// a root-owned copy, which needs a root harness.)
#[test]
fn unreadable_binary_is_refused_clearly() {
    use std::os::unix::fs::PermissionsExt;
    require!("unreadable_binary_is_refused_clearly", userns_available());
    require!(
        "unreadable_binary_is_refused_clearly",
        if h().is_root { Ok(()) } else { Err("needs a root harness for a binary owned by another user".to_string()) }
    );
    let dir = Scratch::new("unreadable");
    let bin = dir.join("capsule-cli");
    std::fs::copy(h().bin_dir.join("capsule-cli"), &bin).unwrap();
    let run = |mode: u32| {
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut cmd = capsule(&["run", "-q", "--no-agent"]);
        cmd.binary(&bin).no_json().arg("--").arg("/bin/true");
        cmd.run()
    };
    let out = run(0o711);
    assert_eq!(out.code, Some(125), "{}", out.describe());
    assert!(out.stderr.contains("not readable by its user") && out.stderr.contains("chmod a+r"), "{}", out.describe());
    // Readable again, the same copy runs.
    let out = run(0o755);
    assert_eq!(out.code, Some(0), "{}", out.describe());
}
