//! Denial reports (docs/explain.md): `--explain`'s `violations` for each
//! kind with the rule that refused it and the option that would allow it
//! (a write the host view refuses, one a read_only rule refuses, a read of
//! a hidden path, a destination the loopback-only network does not reach,
//! a port Landlock refuses, a forbidden call), names a program chose
//! printed quoted, and `capsule why` giving the same answers without a run.

use capsule_testkit as common;

use common::*;
use serde_json::Value;

/// The violations of a `--json` result.
fn violations(out: &Out) -> Vec<Value> {
    out.json()["violations"].as_array().cloned().unwrap_or_else(|| panic!("no violations; {}", out.describe()))
}

fn find<'a>(list: &'a [Value], kind: &str, place: &str) -> &'a Value {
    list.iter()
        .find(|v| v["kind"] == kind && (v["path"] == place || v["host"] == place))
        .unwrap_or_else(|| panic!("no {kind} for {place} in {list:#?}"))
}

#[test]
fn each_file_denial_names_its_rule_and_fix() {
    let s = Scratch::new("explain");
    let proj = s.mkdir("proj");
    s.mkdir("proj/.git");
    s.write("proj/.git/config", b"[core]\n");
    s.mkdir("secret");
    s.write("secret/key", b"k\n");
    let (p, sec) = (proj.display().to_string(), s.join("secret").display().to_string());
    let script = format!(
        "touch /etc/capsule-x; echo x > {p}/.git/config; cat {sec}/key; echo ok > {p}/out; mkdir /usr/capsule-d; true"
    );
    let out =
        capsule(&["run", "-q", "--explain", "--writable", &p, "--read-only", &format!("{p}/.git"), "--hide", &sec])
            .json()
            .args(&["--", "/bin/sh", "-c", &script])
            .run();
    out.assert_code(0);
    let list = violations(&out);
    let etc = find(&list, "fs-write", "/etc/capsule-x");
    assert_eq!(etc["errno"], "EROFS");
    assert_eq!(etc["rule"], "the host view is read-only");
    let fix = etc["fix"].as_str().unwrap();
    assert!(fix.contains("--layer DIR") && fix.contains("--writable /etc"), "{fix}");
    let usr = find(&list, "fs-write", "/usr/capsule-d");
    assert_eq!(usr["syscall"], "mkdir");
    let git = find(&list, "fs-write", &format!("{p}/.git/config"));
    assert!(git["rule"].as_str().unwrap().contains("read_only"), "{git}");
    assert!(git["fix"].as_str().unwrap().contains("drop the read_only rule"), "{git}");
    let hidden = find(&list, "fs-read-hidden", &format!("{sec}/key"));
    assert_eq!(hidden["errno"], "ENOENT");
    assert!(hidden["rule"].as_str().unwrap().contains("hidden by the rule hide"), "{hidden}");
    assert_eq!(hidden["fix"], format!("--allow {sec}"));
    // What the view allows is not reported.
    assert!(!list.iter().any(|v| v["path"] == format!("{p}/out")), "{list:#?}");
    assert_eq!(std::fs::read_to_string(s.join("proj/out")).unwrap(), "ok\n");
    // The same, a line each on stderr.
    assert!(out.stderr.contains("capsule: explain: "), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("fs-write /etc/capsule-x (openat, EROFS): the host view is read-only; to allow: --layer DIR"),
        "{}",
        out.stderr
    );
}

#[test]
fn names_a_program_chose_are_printed_quoted() {
    let out =
        capsule(&["run", "-q", "--explain", "--", "/bin/sh", "-c", "touch \"$(printf '/etc/a\\nb\\033[31m')\"; true"])
            .json()
            .run();
    out.assert_code(0);
    let list = violations(&out);
    find(&list, "fs-write", "/etc/a\nb\u{1b}[31m");
    let line = out.stderr.lines().find(|l| l.contains("fs-write /etc/a") || l.contains("fs-write \"/etc/a")).unwrap();
    assert!(line.contains("\"/etc/a\\nb\\033[31m\""), "{line}");
    assert!(!out.stderr.contains('\u{1b}'), "{}", out.stderr);
}

#[test]
fn network_denials_come_from_what_the_run_tried() {
    let connect = "import socket,sys\nfor a,p in [('192.0.2.1',80),('127.0.0.1',8081)]:\n  s=socket.socket()\n  try: s.connect((a,p))\n  except OSError as e: print(a,e.errno)\n";
    let out = capsule(&["run", "-q", "--explain", "--", "/usr/bin/python3", "-c", connect]).json().run();
    out.assert_code(0);
    let list = violations(&out);
    let v = find(&list, "network", "192.0.2.1");
    assert_eq!(v["errno"], "ENETUNREACH");
    assert_eq!(v["port"], 80);
    assert_eq!(v["rule"], "the run's network is loopback only");
    assert!(v["fix"].as_str().unwrap().starts_with("--share-net"));
    // Loopback is the run's own: refused by nobody (nothing listens there).
    assert!(!list.iter().any(|v| v["host"] == "127.0.0.1"), "{list:#?}");
    // Without --explain, no network log and no violations.
    let quiet = capsule(&["run", "-q", "--", "/usr/bin/python3", "-c", connect]).json().run();
    assert!(quiet.json().get("violations").is_none() && quiet.json().get("net_log").is_none(), "{}", quiet.describe());
}

#[test]
fn a_landlock_port_rule_names_the_port_to_add() {
    if capsule::plan::landlock::probe() < 4 {
        skip("a_landlock_port_rule_names_the_port_to_add", "Landlock port rules need Linux >= 6.7 (ABI 4)");
        return;
    }
    let connect =
        "import socket\ns=socket.socket()\ntry: s.connect(('127.0.0.1',8082))\nexcept OSError as e: print(e.errno)\n";
    let out = capsule(&["run", "-q", "--explain", "--tcp-connect", "443", "--", "/usr/bin/python3", "-c", connect])
        .json()
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), "13", "{}", out.describe()); // EACCES
    let list = violations(&out);
    let v = find(&list, "network", "127.0.0.1");
    assert_eq!(v["errno"], "EACCES");
    assert_eq!(v["fix"], "--tcp-connect 443,8082");
    assert!(v["rule"].as_str().unwrap().contains("tcp_connect allows ports 443"), "{v}");
}

#[test]
fn a_forbidden_call_is_a_violation_without_explain() {
    let out = capsule(&["run", "-q", "--seccomp", "strict", "--", "/bin/sh", "-c", "ls | cat"]).json().run();
    assert_eq!(out.status(), "forbidden-syscall", "{}", out.describe());
    let list = violations(&out);
    assert_eq!(list.len(), 1, "{list:#?}");
    let v = &list[0];
    assert_eq!(v["kind"], "syscall");
    assert_eq!(v["syscall"], out.json()["syscall"]);
    assert!(v["rule"].as_str().unwrap().contains("`strict`"), "{v}");
    assert!(v["fix"].as_str().unwrap().starts_with("--seccomp default"), "{v}");
}

#[test]
fn why_answers_without_running() {
    let s = Scratch::new("why");
    s.mkdir("proj");
    s.mkdir("secret");
    let (p, sec) = (s.join("proj").display().to_string(), s.join("secret").display().to_string());
    let out = capsule(&["why", "--write", "/etc/hosts"]).run();
    out.assert_code(1);
    assert!(
        out.stdout.starts_with("write /etc/hosts: refused (EROFS): the host view is read-only\n"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("  to allow: --layer DIR"), "{}", out.stdout);
    capsule(&["why", "--writable", &p, "--write", &format!("{p}/a")]).run().assert_code(0);
    let out = capsule(&[
        "why",
        "--writable",
        &p,
        "--read-only",
        &format!("{p}/.mcp.json"),
        "--write",
        &format!("{p}/.mcp.json"),
    ])
    .run();
    // A read-only rule for a path that does not exist yet: the parent decides.
    assert!(out.code == Some(0) || out.stdout.contains("read_only"), "{}", out.describe());
    let out = capsule(&["why", "--hide", &sec, "--read", &format!("{sec}/key")]).run();
    out.assert_code(1);
    assert!(
        out.stdout.contains("refused (ENOENT): hidden by the rule hide")
            && out.stdout.contains(&format!("to allow: --allow {sec}")),
        "{}",
        out.stdout
    );
    let out = capsule(&["why", "--host", "example.org"]).run();
    out.assert_code(1);
    assert!(out.stdout.contains("loopback only") && out.stdout.contains("--share-net"), "{}", out.stdout);
    let out = capsule(&["why", "--share-net", "--tcp-connect", "443", "--host", "example.org:80"]).run();
    out.assert_code(1);
    assert!(out.stdout.contains("to allow: --tcp-connect 443,80"), "{}", out.stdout);
    capsule(&["why", "--share-net", "--host", "example.org"]).run().assert_code(0);
    let out =
        capsule(&["why", "--layer", &s.join("l").display().to_string(), "--write", &format!("{p}/x")]).cwd(&p).run();
    out.assert_code(0);
    assert!(out.stdout.contains("takes the write, for review"), "{}", out.stdout);
    // Nothing was created by asking.
    assert!(!s.join("l").exists());
}
