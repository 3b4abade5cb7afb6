//! What a judge needs of the streams: read-once input and
//! write-once output (`--stdin-file`, `--stdout-file`, `--stderr-file`;
//! `{"pipe": F}` in a spec) with the output limit exact to the byte, and
//! interactive runs (`capsule interact`, built on the library's
//! `Sandbox::interact`, and `serve`'s `interact` request): who left the
//! conversation first, in the thesis's two scenarios and more.

use capsule_testkit as common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// `key=value` lines of the probe's `stdio-kind`, which reports on stderr.
fn stderr_kv(out: &Out) -> Kv {
    Kv::parse(&out.stderr)
}

/// `capsule run -q --json OPTS -- ARGV`.
fn run(opts: &[&str], argv: &[&str]) -> Out {
    let mut c = capsule(&["run", "-q"]);
    c.args(opts).arg("--").args(argv).json();
    c.run()
}

/// A file of `len` bytes whose content depends on the position (so a
/// shifted or partial copy shows).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i / 251 % 256) as u8).collect()
}

// ---------------------------------------------------------------- read-once input, write-once output

/// `--stdin-file` hands the program a pipe: it cannot seek or map its
/// input, and reads every byte of it once; `--stdin` (a file) can be
/// seeked and mapped, so the check can tell them apart.
#[test]
fn stdin_file_is_read_once() {
    require!("stdin_file_is_read_once", userns_available());
    let dir = Scratch::new("readonce");
    let input = dir.write("in", &pattern(3 << 20));
    let input = input.to_str().unwrap();
    let out = run(&["--stdin-file", input], &[&probe(), "stdio-kind"]);
    out.assert_code(0);
    let kv = stderr_kv(&out);
    assert_eq!(kv.must("stdin_kind"), "fifo", "{}", out.describe());
    assert_eq!(kv.must("stdin_seek"), "ESPIPE", "{}", out.describe());
    assert_eq!(kv.must("stdin_mmap"), "ENODEV", "{}", out.describe());
    assert_eq!(kv.must("stdin_bytes"), (3 << 20).to_string(), "{}", out.describe());

    let out = run(&["--stdin", input], &[&probe(), "stdio-kind"]);
    out.assert_code(0);
    let kv = stderr_kv(&out);
    assert_eq!(kv.must("stdin_kind"), "file", "{}", out.describe());
    assert_eq!(kv.must("stdin_seek"), "ok", "{}", out.describe());
    assert_eq!(kv.must("stdin_mmap"), "ok", "{}", out.describe());
}

/// Input through one pipe and output through another arrive intact (a
/// few MiB, more than any pipe holds); the program's stdout is a pipe.
#[test]
fn stdout_file_collects_through_a_pipe() {
    require!("stdout_file_collects_through_a_pipe", userns_available());
    let dir = Scratch::new("writeonce");
    let data = pattern(5 << 20 | 12345);
    let input = dir.write("in", &data);
    let output = dir.join("out");
    let out = run(&["--stdin-file", input.to_str().unwrap(), "--stdout-file", output.to_str().unwrap()], &["/bin/cat"]);
    out.assert_code(0);
    assert_eq!(out.status(), "exited");
    let got = std::fs::read(&output).unwrap();
    assert!(got == data, "the output file differs from the input: {} bytes of {}", got.len(), data.len());

    let out = run(&["--stdout-file", output.to_str().unwrap()], &[&probe(), "stdio-kind"]);
    out.assert_code(0);
    assert_eq!(stderr_kv(&out).must("stdout_kind"), "fifo", "{}", out.describe());
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "done=1\n",
        "stdout-file is truncated, then holds the probe's stdout"
    );
}

/// `--output-limit N` with `--stdout-file`: N bytes pass; N + 1 bytes
/// end the run with status `output-limit` (exit 122), the file holding
/// exactly the first N; a program that goes on running after writing
/// past the limit is killed at once, not at its wall time; stderr too.
#[test]
fn output_limit_is_exact() {
    require!("output_limit_is_exact", userns_available());
    let dir = Scratch::new("olimit");
    let data = pattern(4096);
    let input = dir.write("in", &data);
    let input = input.to_str().unwrap();
    let output = dir.join("out");
    let o = output.to_str().unwrap();
    let head = |n: usize| format!("head -c {n} {input}");

    let out = run(&["--output-limit", "1000", "--stdout-file", o], &["/bin/sh", "-c", &head(1000)]);
    out.assert_code(0);
    assert_eq!(out.status(), "exited");
    assert_eq!(std::fs::read(&output).unwrap(), &data[..1000]);

    let out = run(&["--output-limit", "1000", "--stdout-file", o], &["/bin/sh", "-c", &head(1001)]);
    out.assert_code(122);
    assert_eq!(out.status(), "output-limit", "{}", out.describe());
    assert_eq!(out.json()["killed_by_limit"], true);
    assert_eq!(std::fs::read(&output).unwrap(), &data[..1000], "the file must hold exactly the first 1000 bytes");

    let started = Instant::now();
    let script = format!("{}; exec sleep 60", head(1001));
    let out = run(&["--output-limit", "1000", "--wall-time", "50s", "--stdout-file", o], &["/bin/sh", "-c", &script]);
    assert_eq!(out.status(), "output-limit", "{}", out.describe());
    assert!(started.elapsed() < Duration::from_secs(20), "not killed at the limit: {:?}", started.elapsed());
    assert_eq!(std::fs::read(&output).unwrap(), &data[..1000]);

    let err = dir.join("err");
    let script = format!("{} >&2", head(4096));
    let out = run(&["--output-limit", "10", "--stderr-file", err.to_str().unwrap()], &["/bin/sh", "-c", &script]);
    assert_eq!(out.status(), "output-limit", "{}", out.describe());
    assert_eq!(std::fs::read(&err).unwrap(), &data[..10]);
}

/// Bad stream arguments are errors naming the problem (exit 125), and a
/// missing input file is named.
#[test]
fn stream_file_errors() {
    require!("stream_file_errors", userns_available());
    let dir = Scratch::new("ioerr");
    let missing = dir.join("no-such-input");
    let out = run(&["--stdin-file", missing.to_str().unwrap()], &["/bin/true"]);
    out.assert_code(125);
    assert!(out.stderr.contains("no-such-input"), "{}", out.describe());

    let out = run(&["--stdout-file", &format!("{}/no/such/dir/out", dir.s())], &["/bin/true"]);
    out.assert_code(125);
    assert!(out.stderr.contains("no/such/dir/out"), "{}", out.describe());

    let input = dir.write("in", b"x");
    let out = capsule(&[
        "run",
        "--stdin",
        input.to_str().unwrap(),
        "--stdin-file",
        input.to_str().unwrap(),
        "--",
        "/bin/true",
    ])
    .run();
    out.assert_code(125);
    assert!(out.stderr.contains("--stdin-file") && out.stderr.contains("--stdin"), "{}", out.describe());
}

// ---------------------------------------------------------------- interactive runs: the CLI

/// `capsule interact --json F ARGS`, in `dir`.
fn interact(dir: &Scratch, args: &[&str]) -> Out {
    let json = dir.join(&unique("interact.json"));
    let _ = std::fs::remove_file(&json);
    let mut c = capsule(&["interact", "--json", json.to_str().unwrap()]);
    c.args(args).cwd(&dir.path);
    let mut out = c.run();
    if let Ok(text) = std::fs::read_to_string(&json) {
        out.json = Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad --json ({e}): {text}")));
    }
    out
}

/// A guessing game in sh: the interactor knows the secret, answers `<`,
/// `>` or `=`; the solution searches 1..1000.
const INTERACTOR: &str = r#"secret=$(cat "$1"); n=0
while read g; do
  n=$((n+1)); [ $n -gt 12 ] && { echo "too many guesses" >&2; exit 1; }
  if [ "$g" -eq "$secret" ]; then echo =; echo "found in $n" >&2; exit 0; fi
  if [ "$g" -gt "$secret" ]; then echo '<'; else echo '>'; fi
done
echo "no answer" >&2; exit 1"#;

const SOLUTION: &str = r#"lo=1; hi=1000
while :; do m=$(( (lo+hi)/2 )); echo $m; read r
  case "$r" in "=") exit 0;; "<") hi=$((m-1));; ">") lo=$((m+1));; *) exit 3;; esac
done"#;

fn game(dir: &Scratch) {
    dir.write("interactor.sh", INTERACTOR.as_bytes());
    dir.write("solution.sh", SOLUTION.as_bytes());
    dir.write("secret", b"737\n");
}

#[track_caller]
fn side<'a>(out: &'a Out, name: &str) -> &'a Value {
    let v = &out.json()[name];
    assert!(v.is_object(), "no `{name}` in the result; {}", out.describe());
    v
}

#[track_caller]
fn assert_side(out: &Out, name: &str, status: &str, code: Option<i64>, signal: Option<&str>) {
    let r = side(out, name);
    assert_eq!(r["status"], status, "{name}; {}", out.describe());
    assert_eq!(r["exit_code"].as_i64(), code, "{name}; {}", out.describe());
    assert_eq!(r["signal"].as_str(), signal, "{name}; {}", out.describe());
}

/// A whole conversation: both exit 0, capsule exits 0, the interactor's
/// stderr reaches capsule's, the result has both runs and who was first.
#[test]
fn interact_conversation() {
    require!("interact_conversation", userns_available());
    let dir = Scratch::new("game");
    game(&dir);
    let out = interact(&dir, &["--solution", "sh solution.sh", "--interactor", "sh interactor.sh secret"]);
    out.assert_code(0);
    assert_side(&out, "solution", "exited", Some(0), None);
    assert_side(&out, "interactor", "exited", Some(0), None);
    assert!(out.stderr.contains("found in 10"), "binary search over 1..1000 finds 737 in 10; {}", out.describe());
    let first = out.json()["first_to_exit"].as_str().unwrap_or_default().to_string();
    assert!(first == "solution" || first == "interactor", "{}", out.describe());
    assert!(out.stderr.contains(&format!("first to exit: {first}")), "{}", out.describe());
}

/// The thesis's first scenario: the interactor decides "wrong answer" early
/// and exits; the solution, still writing, dies of SIGPIPE. The interactor
/// is first, so the solution is not blamed; capsule exits with the
/// interactor's status.
#[test]
fn interactor_leaving_early_is_first() {
    require!("interactor_leaving_early_is_first", userns_available());
    let dir = Scratch::new("wa-early");
    for _ in 0..3 {
        let out = interact(
            &dir,
            &[
                "--solution",
                "sh -c 'sleep 0.3; while echo spam; do :; done'",
                "--interactor",
                "sh -c 'echo wrong answer >&2; exit 1'",
            ],
        );
        assert_eq!(out.json()["first_to_exit"], "interactor", "{}", out.describe());
        assert_side(&out, "interactor", "exited", Some(1), None);
        assert_side(&out, "solution", "signaled", None, Some("SIGPIPE"));
        out.assert_code(1);
    }
}

/// The second scenario: the solution crashes first; the interactor then
/// sees its input end and fails. The solution's crash is first, and
/// capsule exits with its status (128 + SIGSEGV).
#[test]
fn solution_crashing_first_is_first() {
    require!("solution_crashing_first_is_first", userns_available());
    let dir = Scratch::new("crash");
    for _ in 0..3 {
        let out = interact(
            &dir,
            &[
                "--solution",
                "sh -c 'read q; kill -SEGV $$'",
                "--interactor",
                "sh -c 'echo question; read answer || { echo no answer >&2; exit 1; }; exit 0'",
            ],
        );
        assert_eq!(out.json()["first_to_exit"], "solution", "{}", out.describe());
        assert_side(&out, "solution", "signaled", None, Some("SIGSEGV"));
        assert_side(&out, "interactor", "exited", Some(1), None);
        out.assert_code(139);
        assert!(out.stderr.contains("no answer"), "{}", out.describe());
    }
}

/// Each program has its own limits (a TOML `--spec` with two tables): a
/// solution that stops talking hits its own wall time first; the
/// interactor, waiting with a longer limit, then sees the end of its input.
#[test]
fn each_program_has_its_own_limits() {
    require!("each_program_has_its_own_limits", userns_available());
    let dir = Scratch::new("limits");
    let spec = dir.write(
        "pair.toml",
        br#"[solution]
argv = ["/bin/sh", "-c", "exec sleep 30"]
[solution.limits]
wall_time = "500ms"
[interactor]
argv = ["/bin/sh", "-c", "read x || exit 5"]
[interactor.limits]
wall_time = "20s"
"#,
    );
    let started = Instant::now();
    let out = interact(&dir, &["--spec", spec.to_str().unwrap()]);
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}; {}", started.elapsed(), out.describe());
    assert_eq!(out.json()["first_to_exit"], "solution", "{}", out.describe());
    assert_side(&out, "solution", "wall-time-limit", None, Some("SIGKILL"));
    assert_side(&out, "interactor", "exited", Some(5), None);
    out.assert_code(124);
}

/// Bad input is an error naming the problem, exit 125.
#[test]
fn interact_errors() {
    require!("interact_errors", userns_available());
    let dir = Scratch::new("interr");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--solution".into(), "sh".into()], "no interactor command"),
        (vec!["--solution".into(), "sh 'x".into(), "--interactor".into(), "sh".into()], "unterminated single quote"),
        (
            vec![
                "--spec".into(),
                dir.write("a.toml", b"[solution]\nargv=[\"sh\"]\nstdin=\"/etc/passwd\"\n[interactor]\nargv=[\"sh\"]\n")
                    .display()
                    .to_string(),
            ],
            "solution.stdin",
        ),
        (
            vec!["--spec".into(), dir.write("b.toml", b"[solution]\nargv=[\"sh\"]\nbogus=1\n").display().to_string()],
            "bogus",
        ),
        (vec!["--spec".into(), dir.join("missing.toml").display().to_string()], "missing.toml"),
        (
            vec!["--solution".into(), "/no/such/program".into(), "--interactor".into(), "sh -c 'read x'".into()],
            "solution: ",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = interact(&dir, &args);
        out.assert_code(125);
        assert!(out.stderr.contains(needle), "{args:?}: expected `{needle}`; {}", out.describe());
    }
}

// ---------------------------------------------------------------- interactive runs: serve

/// `capsule serve` with the protocol on pipes.
fn serve_lines(requests: &[Value]) -> Vec<Value> {
    let mut c = capsule(&["serve", "--parallel", "2"]);
    c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(120));
    let mut r = c.spawn();
    let mut stdin = r.child.stdin.take().unwrap();
    for q in requests {
        writeln!(stdin, "{q}").unwrap();
    }
    drop(stdin);
    let out = r.wait();
    out.assert_code(0);
    out.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

fn by_id<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines.iter().find(|l| l["id"] == id).unwrap_or_else(|| panic!("no response {id}: {lines:?}"))
}

/// `{"id": .., "interact": {"solution": spec, "interactor": spec}}` runs a
/// pair; the result has `first_to_exit` and both results; a bad pair is an
/// error response and the server goes on; `kill` stops both programs.
#[test]
fn serve_interact() {
    require!("serve_interact", userns_available());
    let sh = |s: &str| json!({ "argv": ["/bin/sh", "-c", s] });
    let lines = serve_lines(&[
        json!({"id": "ok", "interact": {"solution": sh("read x; echo $((x+1))"), "interactor": sh("echo 41; read y; [ \"$y\" = 42 ]")}}),
        json!({"id": "bad", "interact": {"solution": {"argv": ["sh"], "stdout": {"capture": 10}}, "interactor": sh("true")}}),
        json!({"id": "wa", "interact": {"solution": sh("sleep 0.3; while echo x; do :; done"), "interactor": sh("exit 1")}}),
        json!({"id": "after", "spec": {"argv": ["/bin/true"]}}),
    ]);
    let ok = &by_id(&lines, "ok")["result"];
    assert_eq!(ok["solution"]["exit_code"], 0, "{ok}");
    assert_eq!(ok["interactor"]["exit_code"], 0, "the interactor got 42: {ok}");
    let bad = by_id(&lines, "bad");
    assert!(bad["error"].as_str().is_some_and(|e| e.contains("solution.stdout")), "{bad}");
    let wa = &by_id(&lines, "wa")["result"];
    assert_eq!(wa["first_to_exit"], "interactor", "{wa}");
    assert_eq!(wa["solution"]["signal"], "SIGPIPE", "{wa}");
    assert_eq!(by_id(&lines, "after")["result"]["status"], "exited");

    // Kill: both programs, still talking forever, end as killed.
    let mut c = capsule(&["serve", "--parallel", "2"]);
    c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped()).timeout(Duration::from_secs(120));
    let mut r = c.spawn();
    let mut stdin = r.child.stdin.take().unwrap();
    let chat = "while :; do echo ping; read x; done";
    writeln!(stdin, "{}", json!({"id": 1, "interact": {"solution": sh(chat), "interactor": sh(chat)}})).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    writeln!(stdin, "{}", json!({"id": 2, "kill": 1})).unwrap();
    let mut seen = Vec::new();
    while let Some(l) = r.next_line(Duration::from_secs(30)) {
        let v: Value = serde_json::from_str(&l).unwrap();
        let done = v["id"] == 1;
        seen.push(v);
        if done {
            break;
        }
    }
    drop(stdin);
    let out = r.wait();
    let res = &seen.iter().find(|v| v["id"] == 1).unwrap_or_else(|| panic!("no result: {seen:?}; {}", out.describe()))
        ["result"];
    assert_eq!(res["solution"]["status"], "killed", "{res}");
    assert_eq!(res["interactor"]["status"], "killed", "{res}");
    assert!(seen.iter().any(|v| v["id"] == 2 && v["ok"] == true), "{seen:?}");
}
