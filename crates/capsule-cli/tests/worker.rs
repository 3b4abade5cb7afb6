//! `capsule worker` end to end (docs/scale-out.md): real workers, as the
//! unprivileged test user, on a real Redis (Debian's `redis-server`,
//! started here on a Unix socket in a scratch directory): mixed run and
//! judge jobs through three workers (every status and verdict, one result
//! per delivery), a worker killed mid-job (another finishes it; none
//! while it lives), a job that kills every worker (dead-lettered with its
//! history), Redis restarted mid-run, malformed jobs, SIGTERM. Short
//! `--claim-idle` values keep it quick.
//!
//! `bench_worker_vs_serve` (ignored; `-- --ignored bench_`) measures
//! jobs per second against `capsule serve` and `capsule judge`
//! (docs/benchmarks.md).

use capsule_testkit as common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use redis::Commands;
use serde_json::{json, Value};

/// A redis-server of the test's own, as the test user, on a Unix socket.
struct Redis {
    dir: Scratch,
    child: Option<Child>,
}

fn redis_available() -> Result<(), String> {
    let ok = std::process::Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("`redis-server` is not installed (Debian: apt-get install redis-server; .ci/run does)".into())
    }
}

impl Redis {
    fn start() -> Redis {
        let mut r = Redis { dir: Scratch::new("redis"), child: None };
        r.launch();
        r
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    fn url(&self) -> String {
        format!("unix://{}", self.sock().display())
    }

    fn launch(&mut self) {
        let sock = self.sock().display().to_string();
        let dir = self.dir.s();
        // Appendonly: what it holds survives a restart; never fsync'ed
        // (a busy disk would stall Redis and make jobs look idle).
        let child = as_user(&[
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            &sock,
            "--unixsocketperm",
            "700",
            "--dir",
            &dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            "no",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_con() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not answer on {sock} within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_con(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url().as_str())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    fn con(&self) -> redis::Connection {
        self.try_con().expect("connect to the test's redis-server")
    }

    /// Stops Redis as an operator would (SIGTERM: it writes its data and
    /// exits) and starts it again on the same socket.
    fn restart(&mut self, down: Duration) {
        self.stop();
        std::thread::sleep(down);
        self.launch();
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A `capsule worker` with this consumer name and these options.
fn worker(r: &Redis, name: &str, extra: &[&str]) -> Running {
    worker_for(r, name, extra, Duration::from_secs(300))
}

/// The same, failing the test if it has not exited after `t`.
fn worker_for(r: &Redis, name: &str, extra: &[&str], t: Duration) -> Running {
    let url = r.url();
    let mut args = vec!["worker", "--redis", &url, "--consumer", name];
    args.extend_from_slice(extra);
    capsule(&args).timeout(t).spawn()
}

/// Waits until every named worker has written its statistics entry (it
/// is running and connected).
fn wait_ready(r: &Redis, names: &[&str]) {
    let mut c = r.con();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let have: BTreeMap<String, String> = c.hgetall("capsule:jobs:stats:capsule").unwrap();
        if names.iter().all(|n| have.contains_key(*n)) {
            return;
        }
        assert!(Instant::now() < deadline, "workers {names:?} not ready within 30 s; have {:?}", have.keys());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(w: &Running) {
    // SAFETY: kill(2) on the worker this test started.
    unsafe { libc::kill(w.pid(), libc::SIGTERM) };
}

/// Stops a worker with SIGTERM; it must exit 0.
fn stop(w: Running) -> Out {
    sigterm(&w);
    let out = w.wait();
    assert_eq!(out.code, Some(0), "the worker did not exit 0 on SIGTERM: {}", out.describe());
    out
}

fn add(c: &mut redis::Connection, id: &str, kind: &str, body: &Value) -> String {
    c.xadd("capsule:jobs", "*", &[("id", id), ("kind", kind), ("body", &body.to_string())]).unwrap()
}

/// One entry of `capsule:results`.
#[derive(Debug, Clone)]
struct Res {
    id: String,
    entry: String,
    worker: String,
    delivery: u64,
    result: Value,
}

fn entries(c: &mut redis::Connection, stream: &str) -> Vec<BTreeMap<String, String>> {
    let reply: redis::streams::StreamRangeReply = c.xrange_all(stream).unwrap();
    reply
        .ids
        .iter()
        .map(|s| s.map.iter().map(|(k, v)| (k.clone(), redis::from_redis_value::<String>(v).unwrap())).collect())
        .collect()
}

fn results(c: &mut redis::Connection) -> Vec<Res> {
    entries(c, "capsule:results")
        .into_iter()
        .map(|m| Res {
            id: m["id"].clone(),
            entry: m["entry"].clone(),
            worker: m["worker"].clone(),
            delivery: m["delivery"].parse().unwrap(),
            result: serde_json::from_str(&m["result"]).unwrap(),
        })
        .collect()
}

/// Waits for at least `n` results.
fn wait_results(r: &Redis, n: usize, t: Duration) -> Vec<Res> {
    let mut c = r.con();
    let deadline = Instant::now() + t;
    loop {
        let got = results(&mut c);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {n} results within {t:?}: {got:?}", got.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The group's pending entries: (entry, consumer, deliveries).
fn pending(c: &mut redis::Connection) -> Vec<(String, String, u64)> {
    let p: Vec<(String, String, u64, u64)> =
        redis::cmd("XPENDING").arg("capsule:jobs").arg("capsule").arg("-").arg("+").arg(100).query(c).unwrap();
    p.into_iter().map(|(e, w, _, n)| (e, w, n)).collect()
}

fn run_job(argv: &[&str]) -> Value {
    json!({"argv": argv, "limits": {"wall_time": "20s"}})
}

/// A judge job in C: `main` is the solution's body; a+b on two tests.
fn judge_c(main: &str, extra: Value) -> Value {
    let mut v = json!({
        "lang": "c",
        "source": format!("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <sys/socket.h>\nint main(void) {{ long long a, b; if (scanf(\"%lld %lld\", &a, &b) != 2) return 2; {main} }}\n"),
        "tests": [{"name": "1", "input": "1 2\n", "output": "3\n"}, {"name": "2", "input": "40 2\n", "output": "42\n"}],
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// The mixed jobs: (id, kind, body, expected status or verdict).
fn mixed_jobs(n: usize) -> Vec<(String, &'static str, Value, &'static str)> {
    let judges: [(&str, Value, &str); 8] = [
        ("printf(\"%lld\\n\", a + b); return 0;", json!({}), "OK"),
        ("printf(\"%lld\\n\", a + b + 1); return 0;", json!({}), "WA"),
        ("for (;;) {}", json!({"time": "200ms"}), "TLE"),
        ("*(volatile int *)0 = 1; return 0;", json!({}), "RE"),
        ("for (;;) printf(\"1111111111111111\\n\");", json!({"output_limit": "1K"}), "OLE"),
        ("socket(AF_INET, SOCK_STREAM, 0); printf(\"%lld\\n\", a + b); return 0;", json!({}), "SYS"),
        (
            "volatile char *p = malloc(96 << 20); for (long i = 0; i < 96 << 20; i += 4096) p[i] = 1; printf(\"%lld\\n\", a + b + p[4096] - 1); return 0;",
            json!({"memory": "32M", "time": "5s"}),
            "MLE",
        ),
        ("this is not C", json!({}), "CE"),
    ];
    let runs: [(Value, &str); 4] = [
        (run_job(&["/bin/true"]), "exited"),
        (run_job(&["/bin/sh", "-c", "exit 3"]), "exited"),
        (run_job(&["/bin/sh", "-c", "kill -KILL $$"]), "signaled"),
        (json!({"argv": ["/bin/sleep", "5"], "limits": {"wall_time": "100ms"}}), "wall-time-limit"),
    ];
    (0..n)
        .map(|i| {
            let id = format!("job-{i}");
            // One job in 5 a judge job, the verdicts in turn.
            if i % 5 == 4 {
                let (main, extra, verdict) = &judges[(i / 5) % judges.len()];
                (id, "judge", judge_c(main, extra.clone()), *verdict)
            } else {
                let (body, status) = &runs[i % runs.len()];
                (id, "run", body.clone(), *status)
            }
        })
        .collect()
}

fn gcc_available() -> Result<(), String> {
    let out = as_user(&["sh", "-c", "command -v gcc"]).output().expect("run sh");
    if out.status.success() {
        Ok(())
    } else {
        Err("gcc is not installed (the judge jobs are in C)".into())
    }
}

#[test]
fn worker_mixed_jobs_through_three_workers() {
    require!("worker_mixed_jobs_through_three_workers", redis_available());
    require!("worker_mixed_jobs_through_three_workers", gcc_available());
    let r = Redis::start();
    let names = ["w1", "w2", "w3"];
    let workers: Vec<Running> =
        names.iter().map(|n| worker(&r, n, &["--parallel", "2", "--claim-idle", "10s"])).collect();
    wait_ready(&r, &names);
    let jobs = mixed_jobs(200);
    let mut c = r.con();
    for (id, kind, body, _) in &jobs {
        add(&mut c, id, kind, body);
    }
    let got = wait_results(&r, jobs.len(), Duration::from_secs(150));
    let outs: Vec<Out> = workers.into_iter().map(stop).collect();
    let logs: Vec<String> = outs.iter().map(|o| o.stderr.clone()).collect();
    let mut by_id: BTreeMap<&str, Vec<&Res>> = BTreeMap::new();
    for res in &got {
        by_id.entry(res.id.as_str()).or_default().push(res);
    }
    // Exactly one result per job and delivery; nobody died, so one
    // delivery each.
    let mut per_delivery: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    for res in &got {
        *per_delivery.entry((res.id.as_str(), res.delivery)).or_default() += 1;
    }
    assert!(per_delivery.values().all(|n| *n == 1), "{per_delivery:?}");
    assert_eq!(got.len(), jobs.len(), "{got:?}");
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for (id, kind, _, want) in &jobs {
        let rs = by_id.get(id.as_str()).unwrap_or_else(|| panic!("no result for {id}"));
        assert_eq!(rs.len(), 1, "{id}: {rs:?}");
        let res = rs[0];
        assert_eq!(res.delivery, 1, "{res:?}; the workers said: {logs:#?}");
        assert!(names.contains(&res.worker.as_str()), "{res:?}");
        let seen = if *kind == "judge" { &res.result["verdict"] } else { &res.result["status"] };
        assert_eq!(seen, want, "{id}: {res:?}");
        *statuses.entry(want.to_string()).or_default() += 1;
        if *kind == "run" && res.result["status"] == "exited" {
            let code = if res.result["exit_code"] == 3 { 3 } else { 0 };
            assert_eq!(res.result["exit_code"], code, "{res:?}");
        }
    }
    // Every worker took part; nothing is left pending.
    for n in names {
        assert!(got.iter().any(|r| r.worker == n), "worker {n} did no job");
    }
    assert!(pending(&mut c).is_empty(), "{:?}", pending(&mut c));
    // The statistics entry of each, summed by --stats.
    let stats = capsule(&["worker", "--redis", &r.url(), "--stats"]).run();
    stats.assert_code(0);
    let v: Value = serde_json::from_str(&stats.stdout).unwrap_or_else(|e| panic!("{e}: {}", stats.describe()));
    assert_eq!(v["total"]["done"], 200, "{v}");
    assert_eq!(v["total"]["failed"], 0, "{v}");
    assert_eq!(v["total"]["running"], 0, "{v}");
    assert_eq!(v["pending"], 0, "{v}");
    assert_eq!(v["results"], 200, "{v}");
    assert_eq!(v["total"]["statuses"], json!(statuses), "{v}");
    for n in names {
        assert_eq!(v["workers"][n]["state"], "stopped", "{v}");
    }
    // No job failed (Redis errors, retried, may be logged).
    for o in outs {
        assert!(!o.stderr.contains("): error: "), "{}", o.describe());
    }
}

/// A job that appends a line to `marks/starts` when it starts, then sleeps.
fn marked_job(marks: &Scratch, secs: u32) -> Value {
    json!({
        "argv": ["/bin/sh", "-c", format!("echo start >> {}/starts; sleep {secs}", marks.s())],
        "mounts": [{"type": "bind", "src": marks.s(), "dst": marks.s()}],
        "limits": {"wall_time": "60s"},
    })
}

fn starts(marks: &Scratch) -> usize {
    std::fs::read_to_string(marks.join("starts")).map(|s| s.lines().count()).unwrap_or(0)
}

fn wait_until(what: &str, t: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < t, "not within {t:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

#[test]
fn worker_killed_mid_job_another_finishes_it() {
    require!("worker_killed_mid_job_another_finishes_it", redis_available());
    let r = Redis::start();
    let marks = Scratch::new("marks");
    let idle = ["--claim-idle", "1s"];
    let mut ws: BTreeMap<&str, Running> = ["a", "b"].iter().map(|n| (*n, worker(&r, n, &idle))).collect();
    wait_ready(&r, &["a", "b"]);
    let mut c = r.con();
    let entry = add(&mut c, "long", "run", &marked_job(&marks, 6));
    wait_until("the job started", Duration::from_secs(20), || starts(&marks) == 1);
    // Three times --claim-idle: the heartbeat keeps it with its worker.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(starts(&marks), 1, "another worker started the job while the first lived");
    let p = pending(&mut c);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!((&p[0].0, p[0].2), (&entry, 1), "{p:?}");
    let owner = p[0].1.clone();
    let other = if owner == "a" { "b" } else { "a" };
    let mut victim = ws.remove(owner.as_str()).expect("the owner is one of ours");
    victim.child.kill().unwrap();
    let _ = victim.child.wait();
    // Claimed after --claim-idle, started again at once.
    let took = wait_until("the other worker started the job", Duration::from_secs(6), || starts(&marks) == 2);
    assert!(took < Duration::from_secs(4), "claimed {took:?} after the kill");
    let got = wait_results(&r, 1, Duration::from_secs(20));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].id.as_str(), got[0].worker.as_str(), got[0].delivery), ("long", other, 2), "{got:?}");
    assert_eq!(got[0].entry, entry);
    assert_eq!(got[0].result["status"], "exited", "{got:?}");
    assert!(pending(&mut c).is_empty());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(starts(&marks), 2);
    assert_eq!(results(&mut c).len(), 1);
    stop(ws.remove(other).unwrap());
}

#[test]
fn worker_job_killing_every_worker_is_dead_lettered() {
    require!("worker_job_killing_every_worker_is_dead_lettered", redis_available());
    let r = Redis::start();
    let marks = Scratch::new("marks");
    let opts = ["--claim-idle", "1s", "--max-deliveries", "2"];
    let mut c = r.con();
    let first = worker(&r, "k1", &opts);
    wait_ready(&r, &["k1"]);
    let entry = add(&mut c, "poison", "run", &marked_job(&marks, 60));
    let mut current = first;
    for (i, name) in ["k2", "k3"].iter().enumerate() {
        // Its worker took it (delivery i + 1): kill it, start the next.
        let prev = format!("k{}", i + 1);
        wait_until(&format!("{prev} runs the job"), Duration::from_secs(20), || {
            starts(&marks) == i + 1 && pending(&mut c).first().is_some_and(|p| p.1 == prev && p.2 == i as u64 + 1)
        });
        current.child.kill().unwrap();
        let _ = current.child.wait();
        current = worker(&r, name, &opts);
    }
    // k3 finds it delivered twice: dead-lettered, not run a third time.
    wait_until("the job is dead-lettered", Duration::from_secs(20), || !entries(&mut c, "capsule:dead").is_empty());
    let dead = entries(&mut c, "capsule:dead");
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!((d["id"].as_str(), d["kind"].as_str(), d["entry"].as_str()), ("poison", "run", entry.as_str()));
    assert_eq!(d["deliveries"], "2", "{d:?}");
    let body: Value = serde_json::from_str(&d["body"]).unwrap();
    assert_eq!(body, marked_job(&marks, 60));
    let history: Value = serde_json::from_str(&d["history"]).unwrap();
    let h: Vec<(u64, &str)> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["delivery"].as_u64().unwrap(), e["worker"].as_str().unwrap()))
        .collect();
    assert_eq!(h, [(1, "k1"), (2, "k2")], "{history}");
    assert!(pending(&mut c).is_empty());
    assert!(results(&mut c).is_empty());
    assert_eq!(starts(&marks), 2);
    let out = stop(current);
    assert!(out.stderr.contains("moved to `capsule:dead`"), "{}", out.describe());
}

#[test]
fn worker_survives_a_redis_restart() {
    require!("worker_survives_a_redis_restart", redis_available());
    let mut r = Redis::start();
    let opts = ["--claim-idle", "2s"];
    let ws = vec![worker(&r, "r1", &opts), worker(&r, "r2", &opts)];
    wait_ready(&r, &["r1", "r2"]);
    let mut c = r.con();
    let n = 40;
    for i in 0..n {
        add(&mut c, &format!("job-{i}"), "run", &run_job(&["/bin/sleep", "0.1"]));
    }
    wait_results(&r, 8, Duration::from_secs(60));
    r.restart(Duration::from_secs(1));
    // Every job's result (a job run twice, as at-least-once allows when a
    // worker's heartbeat waited out the restart, has two).
    let mut c = r.con();
    let mut got = Vec::new();
    wait_until("a result for every job", Duration::from_secs(90), || {
        got = results(&mut c);
        (0..n).all(|i| got.iter().any(|r| r.id == format!("job-{i}")))
    });
    for i in 0..n {
        let id = format!("job-{i}");
        let rs: Vec<&Res> = got.iter().filter(|r| r.id == id).collect();
        assert!(!rs.is_empty(), "no result for {id}");
        assert!(rs.iter().all(|r| r.result["status"] == "exited"), "{rs:?}");
    }
    wait_until("nothing pending", Duration::from_secs(10), || pending(&mut c).is_empty());
    let outs: Vec<Out> = ws.into_iter().map(stop).collect();
    // Each saw Redis go, said so, and came back.
    for o in outs {
        assert!(o.stderr.contains("trying again in"), "{}", o.describe());
        assert!(o.stderr.contains("connected to Redis again"), "{}", o.describe());
    }
}

#[test]
fn worker_malformed_jobs_get_error_results() {
    require!("worker_malformed_jobs_get_error_results", redis_available());
    let r = Redis::start();
    let w = worker(&r, "m1", &["--claim-idle", "2s"]);
    wait_ready(&r, &["m1"]);
    let mut c = r.con();
    let raw =
        |c: &mut redis::Connection, fields: &[(&str, &str)]| -> String { c.xadd("capsule:jobs", "*", fields).unwrap() };
    let cases: Vec<(String, &str)> = vec![
        (raw(&mut c, &[("id", "bad-json"), ("kind", "run"), ("body", "{\"argv\": [")]), "the job's body is not JSON"),
        (raw(&mut c, &[("id", "bad-kind"), ("kind", "build"), ("body", "{}")]), "unknown kind `build`"),
        (raw(&mut c, &[("id", "no-kind"), ("body", "{}")]), "no `kind` field"),
        (raw(&mut c, &[("kind", "run"), ("body", "{}")]), "no `id` field"),
        (raw(&mut c, &[("id", "no-body"), ("kind", "run")]), "no `body` field"),
        (raw(&mut c, &[("id", "extra"), ("kind", "run"), ("body", "{}"), ("x", "1")]), "unknown field `x`"),
        (
            raw(&mut c, &[("id", "spec"), ("kind", "run"), ("body", "{\"argv\": [\"/bin/true\"], \"wal_time\": 1}")]),
            "invalid spec: wal_time: unknown field `wal_time`",
        ),
        (raw(&mut c, &[("id", "no-argv"), ("kind", "run"), ("body", "{}")]), "invalid spec"),
        (
            raw(&mut c, &[("id", "missing"), ("kind", "run"), ("body", "{\"argv\": [\"/nonexistent/prog\"]}")]),
            "/nonexistent/prog",
        ),
        (
            raw(
                &mut c,
                &[
                    ("id", "lang"),
                    ("kind", "judge"),
                    ("body", &judge_c("return 0;", json!({"lang": "cobol"})).to_string()),
                ],
            ),
            "cobol",
        ),
        (
            raw(&mut c, &[("id", "judge-field"), ("kind", "judge"), ("body", "{\"lang\": \"c\"}")]),
            "missing field `source`",
        ),
    ];
    // And a good job after them: the worker is still there.
    let good = add(&mut c, "good", "run", &run_job(&["/bin/true"]));
    let got = wait_results(&r, cases.len() + 1, Duration::from_secs(60));
    assert_eq!(got.len(), cases.len() + 1, "{got:?}");
    for (entry, why) in &cases {
        let res = got.iter().find(|r| &r.entry == entry).unwrap_or_else(|| panic!("no result for {entry} ({why})"));
        let err = res.result["error"].as_str().unwrap_or_else(|| panic!("no error: {res:?}"));
        assert!(err.contains(why), "expected {why:?} in {res:?}");
        assert_eq!(res.delivery, 1);
    }
    let res = got.iter().find(|r| r.entry == good).unwrap();
    assert_eq!((res.id.as_str(), &res.result["status"]), ("good", &json!("exited")), "{res:?}");
    assert!(pending(&mut c).is_empty());
    let out = stop(w);
    assert!(out.stderr.contains("job `bad-kind`"), "{}", out.describe());
}

#[test]
fn worker_sigterm_finishes_the_running_job() {
    require!("worker_sigterm_finishes_the_running_job", redis_available());
    let r = Redis::start();
    let marks = Scratch::new("marks");
    let w = worker(&r, "t1", &["--claim-idle", "1s"]);
    wait_ready(&r, &["t1"]);
    let mut c = r.con();
    add(&mut c, "running", "run", &marked_job(&marks, 2));
    wait_until("the job started", Duration::from_secs(20), || starts(&marks) == 1);
    sigterm(&w);
    std::thread::sleep(Duration::from_millis(300));
    // Added after SIGTERM: left for other workers.
    add(&mut c, "later", "run", &run_job(&["/bin/true"]));
    let t0 = Instant::now();
    let out = w.wait();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert!(t0.elapsed() > Duration::from_millis(1000), "exited before the job ended: {}", out.describe());
    let got = results(&mut c);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].id.as_str(), &got[0].result["status"]), ("running", &json!("exited")));
    assert!(pending(&mut c).is_empty());
    // `later` was never delivered: the next worker gets it.
    let w = worker(&r, "t2", &["--claim-idle", "1s"]);
    let got = wait_results(&r, 2, Duration::from_secs(30));
    assert_eq!((got[1].id.as_str(), got[1].worker.as_str(), got[1].delivery), ("later", "t2", 1));
    stop(w);
}

/// While its one slot is busy, a worker reads one job ahead (no more:
/// the rest stay in the stream for other workers) and keeps it fresh;
/// on SIGTERM it hands that job back unstarted, and the next worker takes
/// it at once, as the same delivery.
#[test]
fn worker_reads_ahead_one_job_per_slot_and_hands_it_back() {
    require!("worker_reads_ahead_one_job_per_slot_and_hands_it_back", redis_available());
    let r = Redis::start();
    let marks = Scratch::new("marks");
    let opts = ["--parallel", "1", "--claim-idle", "1s"];
    let w = worker(&r, "h1", &opts);
    wait_ready(&r, &["h1"]);
    let mut c = r.con();
    let long = add(&mut c, "long", "run", &marked_job(&marks, 4));
    let quick: Vec<String> =
        (0..3).map(|i| add(&mut c, &format!("quick-{i}"), "run", &run_job(&["/bin/true"]))).collect();
    wait_until("the long job started", Duration::from_secs(20), || starts(&marks) == 1);
    // Past --claim-idle: the job read ahead is held, kept fresh.
    std::thread::sleep(Duration::from_millis(2500));
    let p: Vec<(String, String, u64, u64)> =
        redis::cmd("XPENDING").arg("capsule:jobs").arg("capsule").arg("-").arg("+").arg(10).query(&mut c).unwrap();
    let held: Vec<&str> = p.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(held, [long.as_str(), quick[0].as_str()], "{p:?}");
    assert!(p.iter().all(|p| p.1 == "h1" && p.2 < 1000 && p.3 == 1), "not kept fresh: {p:?}");
    sigterm(&w);
    let out = w.wait();
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert!(out.stderr.contains("1 job(s) read ahead handed back"), "{}", out.describe());
    let got = results(&mut c);
    assert_eq!(got.iter().map(|r| (r.id.as_str(), r.worker.as_str())).collect::<Vec<_>>(), [("long", "h1")]);
    // The next worker claims the handed-back job at once, as delivery 1,
    // and reads the others.
    let t0 = Instant::now();
    let w2 = worker(&r, "h2", &["--parallel", "1", "--claim-idle", "30s"]);
    let got = wait_results(&r, 4, Duration::from_secs(20));
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    for (i, e) in quick.iter().enumerate() {
        let res = got.iter().find(|r| &r.entry == e).unwrap_or_else(|| panic!("no result for quick-{i}: {got:?}"));
        assert_eq!((res.worker.as_str(), res.delivery, &res.result["status"]), ("h2", 1, &json!("exited")), "{res:?}");
    }
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(pending(&mut c).is_empty());
    assert_eq!(starts(&marks), 1);
    stop(w2);
}

/// A worker stopped (SIGSTOP) while it waits in XREADGROUP, a job
/// delivered to it meanwhile, then continued: its socket read fails with
/// EINTR (a read with a timeout is not restarted after a stop), and the
/// reply holding the job is lost. The worker finds the job pending on
/// itself and runs it at once, as delivery 1, not after --claim-idle.
#[test]
fn worker_recovers_a_delivery_whose_reply_was_lost() {
    require!("worker_recovers_a_delivery_whose_reply_was_lost", redis_available());
    let r = Redis::start();
    let w = worker(&r, "s1", &["--claim-idle", "60s"]);
    wait_ready(&r, &["s1"]);
    let mut c = r.con();
    for i in 0..3 {
        // Waiting in XREADGROUP most of the time (blocks of 500 ms).
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on the worker this test started.
        unsafe { libc::kill(w.pid(), libc::SIGSTOP) };
        let id = format!("while-stopped-{i}");
        add(&mut c, &id, "run", &run_job(&["/bin/true"]));
        wait_until("the job is delivered", Duration::from_secs(5), || !pending(&mut c).is_empty());
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        unsafe { libc::kill(w.pid(), libc::SIGCONT) };
        let got = wait_results(&r, i + 1, Duration::from_secs(10));
        let res = got.iter().find(|r| r.id == id).unwrap();
        assert_eq!((res.worker.as_str(), res.delivery, &res.result["status"]), ("s1", 1, &json!("exited")), "{res:?}");
    }
    assert!(pending(&mut c).is_empty());
    let out = stop(w);
    assert!(out.stderr.contains("Interrupted system call"), "the read was not interrupted: {}", out.describe());
}

/// A testlib-style checker in C++ (`checker input output answer`; exit
/// 0 accepts, 1 rejects, with a message).
const CPP_CHECKER: &str = r#"#include <fstream>
#include <iostream>
int main(int argc, char **argv) {
    if (argc != 4) return 3;
    std::ifstream in(argv[1]), out(argv[2]), ans(argv[3]);
    long long a, b, got, want;
    if (!(in >> a >> b) || !(ans >> want)) return 3;
    if (!(out >> got)) { std::cout << "wrong answer: no number" << std::endl; return 1; }
    if (got != want || got != a + b) { std::cout << "wrong answer: expected " << want << ", got " << got << std::endl; return 1; }
    std::cout << "ok " << got << std::endl;
    return 0;
}
"#;

/// The same in C.
const C_CHECKER: &str = r#"#include <stdio.h>
int main(int argc, char **argv) {
    if (argc != 4) return 3;
    FILE *in = fopen(argv[1], "r"), *out = fopen(argv[2], "r"), *ans = fopen(argv[3], "r");
    long long a, b, got, want;
    if (!in || !out || !ans || fscanf(in, "%lld %lld", &a, &b) != 2 || fscanf(ans, "%lld", &want) != 1) return 3;
    if (fscanf(out, "%lld", &got) != 1 || got != want) { puts("wrong answer"); return 1; }
    return 0;
}
"#;

/// An interactor in C++: gives the solution the test's two numbers and
/// checks the sum it answers.
const CPP_INTERACTOR: &str = r#"#include <cstdio>
#include <fstream>
int main(int argc, char **argv) {
    std::ifstream in(argv[1]);
    long long a, b, s;
    if (!(in >> a >> b)) return 3;
    std::printf("%lld %lld\n", a, b);
    std::fflush(stdout);
    if (std::scanf("%lld", &s) != 1) { std::fprintf(stderr, "no answer\n"); return 1; }
    if (s != a + b) { std::fprintf(stderr, "wrong: expected %lld, got %lld\n", a + b, s); return 1; }
    return 0;
}
"#;

fn gpp_available() -> Result<(), String> {
    let out = as_user(&["sh", "-c", "command -v g++"]).output().expect("run sh");
    if out.status.success() {
        Ok(())
    } else {
        Err("g++ is not installed (the checker and interactor are in C++)".into())
    }
}

/// Judge jobs whose checker or interactor is C++ source: compiled in the
/// sandbox and used, with the verdicts (and the checker's messages)
/// `capsule judge` gives for the same files with the compiled checker; a
/// checker that does not compile is an error result naming it.
#[test]
fn worker_judge_jobs_with_compiled_checker_and_interactor() {
    require!("worker_judge_jobs_with_compiled_checker_and_interactor", redis_available());
    require!("worker_judge_jobs_with_compiled_checker_and_interactor", gcc_available());
    require!("worker_judge_jobs_with_compiled_checker_and_interactor", gpp_available());
    let r = Redis::start();
    let w = worker(&r, "c1", &["--parallel", "2", "--claim-idle", "10s"]);
    wait_ready(&r, &["c1"]);
    let mut c = r.con();
    let right = "printf(\"%lld\\n\", a + b); return 0;";
    let wrong = "printf(\"%lld\\n\", a + b + 1); return 0;";
    let checker = json!({"checker": {"program": CPP_CHECKER}});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("chk-ok", judge_c(right, checker.clone()), "OK"),
        ("chk-wa", judge_c(wrong, checker.clone()), "WA"),
        ("chk-c", judge_c(right, json!({"checker": {"program": C_CHECKER, "lang": "c"}})), "OK"),
        ("int-ok", judge_c(right, json!({"interactor": CPP_INTERACTOR})), "OK"),
        ("int-wa", judge_c(wrong, json!({"interactor": CPP_INTERACTOR})), "WA"),
        ("chk-bad", judge_c(right, json!({"checker": {"program": "int main() { this is not C++; }"}})), "error"),
    ];
    for (id, body, _) in &cases {
        add(&mut c, id, "judge", body);
    }
    let got = wait_results(&r, cases.len(), Duration::from_secs(180));
    let by_id = |id: &str| got.iter().find(|r| r.id == id).unwrap_or_else(|| panic!("no result for {id}: {got:?}"));
    for (id, _, want) in &cases {
        let res = &by_id(id).result;
        if *want == "error" {
            assert_eq!(res["verdict"], Value::Null, "{id}: {res}");
            let e = res["error"].as_str().unwrap_or_else(|| panic!("{id}: no error: {res}"));
            assert!(e.contains("the checker does not compile"), "{id}: {e}");
            assert!(e.contains("error:"), "{id}: the compiler's messages are missing: {e}");
        } else {
            assert_eq!(res["verdict"], *want, "{id}: {res}");
            assert_eq!(res["tests"].as_array().map(Vec::len), Some(2), "{id}: {res}");
        }
    }
    // The checker's and the interactor's messages reach the report.
    let wa = &by_id("chk-wa").result["tests"][0];
    assert_eq!(wa["detail"], "wrong answer: expected 3, got 4", "{wa}");
    let wa = &by_id("int-wa").result["tests"][0];
    assert!(wa["detail"].as_str().unwrap_or_default().contains("wrong: expected 3, got 4"), "{wa}");
    assert_eq!(by_id("int-ok").result["tests"][0]["interactor"]["exit_code"], 0);
    assert!(pending(&mut c).is_empty());
    let out = stop(w);
    assert!(out.stderr.contains("job `chk-bad`"), "{}", out.describe());

    // `capsule judge` on the same files, with the checker compiled outside:
    // the same verdicts and messages, test by test.
    let files = Scratch::new("judge-checker");
    files.write("checker.cpp", CPP_CHECKER.as_bytes());
    let chk = files.join("checker").display().to_string();
    let cc = as_user(&["g++", "-O2", "-o", &chk, &files.join("checker.cpp").display().to_string()]).output().unwrap();
    assert!(cc.status.success(), "g++: {}", String::from_utf8_lossy(&cc.stderr));
    files.mkdir("tests");
    for t in cases[0].1["tests"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        files.write(&format!("tests/{name}.in"), t["input"].as_str().unwrap().as_bytes());
        files.write(&format!("tests/{name}.out"), t["output"].as_str().unwrap().as_bytes());
    }
    for id in ["chk-ok", "chk-wa"] {
        let body = &cases.iter().find(|c| c.0 == id).unwrap().1;
        let src = files.write(&format!("{id}.c"), body["source"].as_str().unwrap().as_bytes());
        let json_path = files.join(&format!("{id}.json")).display().to_string();
        let tests = files.join("tests").display().to_string();
        let out = capsule(&[
            "judge",
            "--lang",
            "c",
            &src.display().to_string(),
            "--tests",
            &tests,
            "--checker",
            &chk,
            "--json",
            &json_path,
        ])
        .run();
        let direct: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        let queued = &by_id(id).result;
        assert_eq!(direct["verdict"], queued["verdict"], "{id}: {}", out.describe());
        for (d, q) in direct["tests"].as_array().unwrap().iter().zip(queued["tests"].as_array().unwrap()) {
            assert_eq!((&d["name"], &d["verdict"], &d["detail"]), (&q["name"], &q["verdict"], &q["detail"]), "{id}");
        }
    }
}

#[test]
fn worker_bad_options() {
    for (args, want) in [
        (&["--parallel", "0"][..], "--parallel 0"),
        (&["--claim-idle", "10ms"][..], "--claim-idle 10ms"),
        (&["--max-deliveries", "0"][..], "--max-deliveries 0"),
        (&["--read-ahead", "x"][..], "--read-ahead x"),
    ] {
        let mut a = vec!["worker", "--redis", "unix:///nonexistent.sock"];
        a.extend_from_slice(args);
        let out = capsule(&a).run();
        out.assert_code(125);
        assert!(out.stderr.contains(want), "{}", out.describe());
    }
    let out = capsule(&["worker", "--redis", "http://x"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("--redis `http://x`"), "{}", out.describe());
}

/// Jobs per second through 2 workers (`--parallel 1` each) against the
/// same work without the queue: 1,000 `/bin/true` run jobs against
/// `capsule serve --parallel 2`, and 100 a+b judge jobs (C,
/// examples/aplusb, 10 tests each) against `capsule judge`, 2 at a time;
/// and the run jobs through 2 workers with `--read-ahead 0` (reading only
/// for a free slot, as before read-ahead); rounds interleaved, their
/// order rotated. Prints a table for
/// docs/benchmarks.md. BENCH_ROUNDS (default 3) rounds.
#[test]
#[ignore]
fn bench_worker_vs_serve() {
    require!("bench_worker_vs_serve", redis_available());
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let (nrun, njudge) = (1000, 100);
    let r = Redis::start();
    let opts = ["--parallel", "1", "--claim-idle", "30s"];
    let long = Duration::from_secs(3600);
    // And 2 that read only for a free slot (as before read-ahead), on a
    // stream of their own.
    let opts0 = [&opts[..], &["--read-ahead", "0", "--stream", "jobs0", "--results", "results0"]].concat();
    let workers = [
        worker_for(&r, "b1", &opts, long),
        worker_for(&r, "b2", &opts, long),
        worker_for(&r, "o1", &opts0, long),
        worker_for(&r, "o2", &opts0, long),
    ];
    wait_ready(&r, &["b1", "b2"]);
    let mut c0 = r.con();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c0.hlen::<_, usize>("jobs0:stats:capsule").unwrap() < 2 {
        assert!(Instant::now() < deadline, "the --read-ahead 0 workers are not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut serve = capsule(&["serve", "--parallel", "2"])
        .stdio(Stdio::piped(), Stdio::piped(), Stdio::piped())
        .timeout(Duration::from_secs(3600))
        .spawn();
    let mut serve_in = serve.child.stdin.take().unwrap();
    // The problem, staged for the test user.
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/aplusb");
    let stage = Scratch::new("bench-aplusb");
    let source = std::fs::read_to_string(examples.join("solutions/ok.c")).unwrap();
    stage.write("ok.c", source.as_bytes());
    let tests_dir = stage.mkdir("tests");
    let mut tests = Vec::new();
    for i in 1..=10 {
        let input = std::fs::read_to_string(examples.join(format!("tests/{i}.in"))).unwrap();
        let output = std::fs::read_to_string(examples.join(format!("tests/{i}.out"))).unwrap();
        stage.write(&format!("tests/{i}.in"), input.as_bytes());
        stage.write(&format!("tests/{i}.out"), output.as_bytes());
        tests.push(json!({"name": i.to_string(), "input": input, "output": output}));
    }
    let judge_body = json!({"lang": "c", "source": source, "tests": tests}).to_string();
    let mut c = r.con();
    let mut seq = 0usize;

    // Time from the first job added to the last result.
    let mut through_workers = |stream: &str, kind: &str, body: &str, n: usize| -> f64 {
        let results = if stream == "jobs0" { "results0" } else { "capsule:results" };
        let base: usize = c.xlen(results).unwrap();
        let t0 = Instant::now();
        let mut p = redis::pipe();
        for _ in 0..n {
            seq += 1;
            p.cmd("XADD").arg(stream).arg("*").arg("id").arg(seq).arg("kind").arg(kind).arg("body").arg(body).ignore();
        }
        p.query::<()>(&mut c).unwrap();
        loop {
            let have: usize = c.xlen(results).unwrap();
            if have >= base + n {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        n as f64 / t0.elapsed().as_secs_f64()
    };
    let mut through_serve = |n: usize| -> f64 {
        use std::io::Write;
        let t0 = Instant::now();
        let mut batch = String::new();
        for i in 0..n {
            batch.push_str(&format!("{{\"id\":{i},\"spec\":{{\"argv\":[\"/bin/true\"]}}}}\n"));
        }
        serve_in.write_all(batch.as_bytes()).unwrap();
        serve_in.flush().unwrap();
        for _ in 0..n {
            let l = serve.next_line(Duration::from_secs(60)).expect("a response");
            assert!(l.contains("\"result\""), "{l}");
        }
        n as f64 / t0.elapsed().as_secs_f64()
    };
    let ok_c = stage.join("ok.c").display().to_string();
    let tdir = tests_dir.display().to_string();
    let direct_judge = |n: usize| -> f64 {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..n / 2 {
                        let out = capsule(&["judge", "--lang", "c", &ok_c, "--tests", &tdir]).run();
                        out.assert_code(0);
                    }
                });
            }
        });
        n as f64 / t0.elapsed().as_secs_f64()
    };

    let names = [
        "run: 2 workers",
        "run: capsule serve --parallel 2",
        "judge: 2 workers",
        "judge: capsule judge x2",
        "run: 2 workers --read-ahead 0",
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let run_body = json!({"argv": ["/bin/true"]}).to_string();
    for round in 0..rounds {
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let rate = match which {
                0 => through_workers("capsule:jobs", "run", &run_body, nrun),
                1 => through_serve(nrun),
                2 => through_workers("capsule:jobs", "judge", &judge_body, njudge),
                3 => direct_judge(njudge),
                _ => through_workers("jobs0", "run", &run_body, nrun),
            };
            eprintln!("round {round}: {}: {rate:.1} jobs/s", names[which]);
            rates[which].push(rate);
        }
    }
    let verdicts: Vec<Res> = results(&mut c).into_iter().filter(|r| r.result.get("verdict").is_some()).collect();
    assert!(verdicts.iter().all(|r| r.result["verdict"] == "OK"), "a judge job failed");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!("| Work | Jobs/s (median of {rounds}) | Per round |");
    println!("|:---|---:|:---|");
    for (i, n) in names.iter().enumerate() {
        let per: Vec<String> = rates[i].iter().map(|r| format!("{r:.1}")).collect();
        println!("| {n} | {:.1} | {} |", median(&rates[i]), per.join(", "));
    }
    // Per round: the two ways measured seconds apart.
    let ratio = |a: usize, b: usize| {
        let per: Vec<f64> = rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect();
        let list: Vec<String> = per.iter().map(|r| format!("{r:.2}")).collect();
        format!("{:.2} (rounds: {})", median(&per), list.join(", "))
    };
    println!("workers / serve (run), median of per-round ratios: {}", ratio(0, 1));
    println!("workers / capsule judge (judge), median of per-round ratios: {}", ratio(2, 3));
    println!("workers --read-ahead 0 / serve (run), median of per-round ratios: {}", ratio(4, 1));
    println!("workers / workers --read-ahead 0 (run), median of per-round ratios: {}", ratio(0, 4));
    drop(serve_in);
    serve.wait();
    for w in workers {
        stop(w);
    }
}

// Hostile jobs: what a run job must not reach

/// A run job reaches neither the worker's Redis nor anything
/// else on the worker's network: `share_net` is refused unless the worker
/// was started with `--allow-host-network`, and Redis's Unix socket is
/// hidden from every run. (A listener on the worker's loopback stands for
/// a Redis on 127.0.0.1.)
#[test]
fn worker_jobs_get_no_host_network() {
    require!("worker_jobs_get_no_host_network", redis_available());
    require!("worker_jobs_get_no_host_network", userns_available());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let r = Redis::start();
    let job = |net: bool, script: &str| {
        json!({"argv": ["/bin/bash", "-c", script], "share_net": net, "stdout": {"capture": 4096},
               "limits": {"wall_time": "20s"}})
    };
    let tcp = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let unix =
        format!("redis-cli -s {} PING; redis-cli -s {} XLEN capsule:jobs", r.sock().display(), r.sock().display());
    let w = worker(&r, "n1", &[]);
    wait_ready(&r, &["n1"]);
    let mut c = r.con();
    let shared = add(&mut c, "shared", "run", &job(true, &tcp));
    let own = add(&mut c, "own", "run", &job(false, &tcp));
    let sock = add(&mut c, "sock", "run", &job(false, &unix));
    let got = wait_results(&r, 3, Duration::from_secs(60));
    stop(w);
    let res = |e: &str| got.iter().find(|r| r.entry == e).unwrap().result.clone();
    let err = res(&shared)["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("share_net") && err.contains("--allow-host-network"), "{:?}", res(&shared));
    let text = |v: &Value| v["stdout"]["text"].as_str().unwrap_or_default().to_string();
    assert!(!text(&res(&own)).contains("connected"), "{:?}", res(&own));
    let s = text(&res(&sock));
    assert!(s.trim().is_empty(), "a job talked to the worker's Redis: {:?}", res(&sock));
    assert!(listener.accept().is_err(), "a job connected to the worker's loopback");
    // Allowed explicitly, the job has the host's network.
    let w = worker(&r, "n2", &["--allow-host-network"]);
    wait_ready(&r, &["n2"]);
    let shared = add(&mut c, "shared2", "run", &job(true, &tcp));
    let got = wait_results(&r, 4, Duration::from_secs(60));
    stop(w);
    let res = got.iter().find(|x| x.entry == shared).unwrap();
    assert_eq!(text(&res.result), "connected\n", "{res:?}");
}
