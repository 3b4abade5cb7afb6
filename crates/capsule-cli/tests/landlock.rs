//! Landlock as a second layer (docs/landlock.md): writes only where the
//! mounts allow them, TCP ports as asked, the result's `landlock` field.
//! Skipped only where the kernel has no Landlock at all; the cgroup VM's
//! Linux 6.1 (ABI 2) must report `partial` and still work.

use capsule_testkit as common;

use common::*;

/// The kernel's Landlock ABI, from capsule's own probe.
fn abi() -> u32 {
    capsule::plan::landlock::probe()
}

fn landlock_available() -> Result<(), String> {
    userns_available()?;
    match abi() {
        0 => Err("this kernel has no Landlock (not built in or not in lsm=)".into()),
        _ => Ok(()),
    }
}

/// What the result must say on this kernel for a run without network
/// rules: ABI 1 skips the filesystem part, ABI 2-5 lack TRUNCATE or the
/// scopes.
fn expected() -> &'static str {
    match abi() {
        0 | 1 => "none",
        2..=5 => "partial",
        _ => "full",
    }
}

/// Below ABI 4 (the cgroup VM's 6.1) a run with port rules must be
/// refused, not run unrestricted: checks that instead and returns false.
fn net_rules_enforceable(opts: &[&str]) -> bool {
    if abi() >= 4 {
        return true;
    }
    let out = run_probe(opts, &["exit", "0"]).run();
    out.assert_code(125);
    let err = out.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("Linux ≥ 6.7") && err.contains("refused"), "{}", out.describe());
    false
}

#[test]
fn writes_where_the_mounts_allow_and_nowhere_else() {
    require!("writes_where_the_mounts_allow_and_nowhere_else", landlock_available());
    let dir = Scratch::new("ll-bind");
    let d = dir.s();
    let script = "echo a > /mnt/a && echo b > /tmp/b && mkdir /tmp/x /tmp/y && echo c > /tmp/x/f \
                  && mv /tmp/x/f /tmp/y/f && ln -s f /tmp/y/l && rm /tmp/y/f && echo > /dev/null \
                  && echo ok; touch /etc/capsule-landlock 2>&1";
    let mut cmd = capsule(&["run", "-q", "--bind", &d, "/mnt", "--", "sh", "-c", script]);
    let out = cmd.json().run();
    out.assert_code(1);
    assert!(out.stdout.starts_with("ok\n"), "{}", out.describe());
    assert!(out.stdout.contains("Read-only file system"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap_or_default(), "a\n", "{}", out.describe());
    assert_eq!(out.json()["landlock"], expected(), "{}", out.describe());
}

#[test]
fn result_field_in_meta_and_only_for_runs_that_started() {
    require!("result_field_in_meta_and_only_for_runs_that_started", landlock_available());
    let out = capsule(&["run", "-q", "--", "/bin/true"]).meta().run();
    out.assert_code(0);
    let meta = out.meta.clone().unwrap_or_default();
    assert!(meta.contains(&format!("landlock:{}\n", expected())), "{}\n{meta}", out.describe());
    let out = capsule(&["run", "-q", "--", "/nonexistent-program"]).json().run();
    assert_eq!(out.status(), "error", "{}", out.describe());
    assert!(out.json().get("landlock").is_none(), "{}", out.describe());
}

#[test]
fn stdio_files_can_be_reopened() {
    require!("stdio_files_can_be_reopened", landlock_available());
    let dir = Scratch::new("ll-stdio");
    let (err, out_file) = (dir.join("err.txt"), dir.join("out.txt"));
    let script = "echo x > /dev/stderr && echo y > /dev/stdout && echo z >> /dev/stdout";
    let out = capsule(&[
        "run",
        "-q",
        "--stderr",
        err.to_str().unwrap(),
        "--stdout",
        out_file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ])
    .json()
    .run();
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(&err).unwrap_or_default(), "x\n", "{}", out.describe());
    // `>` truncated the file through its reopened path (TRUNCATE, ABI 3).
    assert_eq!(std::fs::read_to_string(&out_file).unwrap_or_default(), "y\nz\n", "{}", out.describe());
}

#[test]
fn tcp_connect_only_to_the_listed_ports() {
    require!("tcp_connect_only_to_the_listed_ports", userns_available());
    if !net_rules_enforceable(&["--share-net", "--tcp-connect", "1"]) {
        return;
    }
    // Port 1: allowed, nothing listens (ECONNREFUSED); port 2: Landlock says no.
    let out = capsule(&["run", "-q", "--share-net", "--tcp-connect", "1", "--", "sh", "-c"])
        .arg(format!("{p} connect-tcp 1; {p} connect-tcp 2", p = probe()))
        .json()
        .run();
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("connect=")).collect();
    assert_eq!(lines, ["connect=ECONNREFUSED", "connect=EACCES"], "{}", out.describe());
    assert_eq!(out.json()["landlock"], if abi() >= 6 { "full" } else { "partial" }, "{}", out.describe());
    // Without --share-net, the same on the loopback-only network.
    let out = run_probe(&["--tcp-connect", "none"], &["connect-tcp", "1"]).run();
    assert_eq!(out.kv().must("connect"), "EACCES", "{}", out.describe());
}

#[test]
fn tcp_bind_none_refuses_bind() {
    require!("tcp_bind_none_refuses_bind", userns_available());
    if !net_rules_enforceable(&["--tcp-bind", "none"]) {
        return;
    }
    let out = run_probe(&["--share-net", "--tcp-bind", "none"], &["bind-tcp", "0"]).run();
    assert_eq!(out.kv().must("bind"), "EACCES", "{}", out.describe());
    let out = run_probe(&["--tcp-bind", "0"], &["bind-tcp", "0"]).run();
    assert_eq!(out.kv().must("bind"), "ok", "{}", out.describe());
}

#[test]
fn bad_port_lists_are_errors() {
    let out = capsule(&["run", "--tcp-connect", "80,http", "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("--tcp-connect") && out.stderr.contains("`http`"), "{}", out.describe());
}

#[test]
fn nested_namespaces_cannot_mount_their_way_to_writing() {
    require!("nested_namespaces_cannot_mount_their_way_to_writing", landlock_available());
    // A nested user + mount namespace may mount over the locked tree; with
    // Landlock it may not mount at all, so the read-only /opt stays so.
    let script = "unshare -Urm --propagation unchanged sh -c \
                  'id -u; mount -t tmpfs t /opt || mount --bind /tmp /opt; echo x > /opt/f && echo WROTE'";
    let out = capsule(&["run", "-q", "--seccomp", "none", "--", "sh", "-c", script]).json().run();
    assert!(out.stdout.starts_with("0\n"), "the nested user namespace was not created; {}", out.describe());
    assert!(!out.stdout.contains("WROTE"), "{}", out.describe());
    assert!(out.stderr.contains("mount"), "{}", out.describe());
}

#[test]
fn no_landlock_lets_nested_namespaces_mount() {
    require!("no_landlock_lets_nested_namespaces_mount", landlock_available());
    // The opt-out for programs that mount inside (nested sandboxes): the
    // mount happens in the program's own copy of the tree, on a tmpfs;
    // the run reports that Landlock enforced nothing.
    let script = "unshare -Urm --propagation unchanged sh -c \
                  'mount -t tmpfs t /opt && echo x > /opt/f && cat /opt/f && echo WROTE'";
    let out = capsule(&["run", "-q", "--no-landlock", "--", "sh", "-c", script]).json().run();
    out.assert_code(0);
    assert_eq!(out.stdout, "x\nWROTE\n", "{}", out.describe());
    assert_eq!(out.json()["landlock"], "none", "{}", out.describe());
    assert!(!std::path::Path::new("/opt/f").exists());
    // The same as a profile field.
    let dir = Scratch::new("ll-off");
    let profile = dir.join("p.toml");
    std::fs::write(&profile, "landlock = false\n").unwrap();
    chown_to_user(&profile);
    let out = capsule(&["run", "-q", "--profile", &profile.to_string_lossy(), "--", "sh", "-c", script]).json().run();
    out.assert_code(0);
    assert_eq!(out.json()["landlock"], "none", "{}", out.describe());
}
