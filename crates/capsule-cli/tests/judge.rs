//! `capsule judge` end to end (docs/judge.md): the real binary as the
//! unprivileged test user judges the example problems (examples/aplusb,
//! examples/guess) and scratch problems: every verdict, the `--json`
//! object, the checkers, the interactive rules of the thesis, `--parallel`,
//! the memory limit without cgroups, and bad input.
//!
//! The memory limit with cgroups is `judge_mle_with_cgroups` in
//! tests/cgroups.rs (run in the cgroup v2 VM).

use capsule_testkit as common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// The repository's examples directory.
fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A copy of `examples/<name>` the test user owns (the checkout may be
/// where that user cannot read).
fn stage(name: &str) -> Scratch {
    let s = Scratch::new(&format!("judge-{name}"));
    copy_tree(&examples().join(name), &s.path);
    s
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir(&dst).unwrap();
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
        chown_to_user(&dst);
    }
}

/// Whether the test user has the toolchain of `lang`.
fn toolchain(lang: &str) -> Result<(), String> {
    let prog = match lang {
        "c" => "gcc",
        "cpp" => "g++",
        "python3" => "python3",
        "bash" => "bash",
        other => panic!("no toolchain known for {other}"),
    };
    let out = as_user(&["sh", "-c", &format!("command -v {prog}")]).output().expect("run sh");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{prog}` is not installed (needed for --lang {lang})"))
    }
}

/// One `capsule judge` run and its `--json` object.
struct Judged {
    out: Out,
    json: Option<Value>,
}

impl Judged {
    #[track_caller]
    fn json(&self) -> &Value {
        self.json.as_ref().unwrap_or_else(|| panic!("no --json written; {}", self.out.describe()))
    }

    #[track_caller]
    fn verdict(&self) -> &str {
        self.json()["verdict"].as_str().unwrap_or_else(|| panic!("no verdict; {}", self.out.describe()))
    }

    #[track_caller]
    fn tests(&self) -> &Vec<Value> {
        self.json()["tests"].as_array().unwrap_or_else(|| panic!("no tests; {}", self.out.describe()))
    }

    /// Every test's verdict, in the JSON's order.
    #[track_caller]
    fn verdicts(&self) -> Vec<(String, String)> {
        self.tests()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_string(), t["verdict"].as_str().unwrap().to_string()))
            .collect()
    }

    /// The table's rows: (test, verdict, details), times and memory left
    /// out; between the header and the summary line.
    #[track_caller]
    fn rows(&self) -> Vec<(String, String, String)> {
        let lines: Vec<&str> = self.out.stdout.lines().collect();
        assert!(lines.len() >= 2 && lines[0].starts_with("test "), "no table; {}", self.describe());
        lines[1..lines.len() - 1]
            .iter()
            .map(|l| {
                // name, verdict, time, memory (a number and `MiB`), details.
                let f: Vec<&str> = l.split_whitespace().collect();
                assert!(f.len() >= 5 && f[4] == "MiB", "row {l:?}; {}", self.describe());
                (f[0].to_string(), f[1].to_string(), f[5..].join(" "))
            })
            .collect()
    }

    fn describe(&self) -> String {
        self.out.describe()
    }
}

/// The presets' limits the tests expect (ms): CPU time, wall time (2 x
/// time + 1 s), compile time. Under software emulation (the VMs: compilers
/// and interpreters start ~10x slower) [`judge`] passes ten times the CPU
/// time and twenty times the compile time where a test gives none.
fn limits() -> (f64, f64, f64) {
    if h().vm {
        (10_000.0, 21_000.0, 600_000.0)
    } else {
        (1000.0, 3000.0, 30_000.0)
    }
}

/// `capsule judge ARGS --json <scratch>/result.json`, in `dir`.
fn judge(dir: &Scratch, args: &[&str]) -> Judged {
    let json = dir.join("result.json");
    let _ = std::fs::remove_file(&json);
    let mut c = capsule(&["judge"]);
    c.args(args);
    if h().vm {
        if !args.contains(&"--time") {
            c.args(&["--time", "10s"]);
        }
        if !args.contains(&"--compile-time") {
            c.args(&["--compile-time", "10m"]);
        }
    }
    c.arg("--json").arg(&json).cwd(&dir.path).timeout(std::time::Duration::from_secs(180));
    let out = c.run();
    let json = std::fs::read_to_string(&json)
        .ok()
        .map(|s| serde_json::from_str(&s).unwrap_or_else(|e| panic!("--json is not JSON ({e}): {s}")));
    Judged { out, json }
}

/// Judges `examples/aplusb/solutions/<file>` on the example's tests.
fn aplusb(test: &str, lang: &str, file: &str, extra: &[&str]) -> Option<(Scratch, Judged)> {
    if let Err(why) = userns_available().and_then(|()| toolchain(lang)) {
        skip(test, &why);
        return None;
    }
    let s = stage("aplusb");
    let src = format!("solutions/{file}");
    let mut args = vec!["--lang", lang, &src, "--tests", "tests"];
    args.extend_from_slice(extra);
    let j = judge(&s, &args);
    Some((s, j))
}

const APLUSB: [&str; 10] = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"];

/// Every test of a+b got `verdict`, the whole judgement too, exit status 1.
#[track_caller]
fn all(j: &Judged, verdict: &str) {
    j.out.assert_code(if verdict == "OK" { 0 } else { 1 });
    assert_eq!(j.verdict(), verdict, "{}", j.describe());
    let want: Vec<(String, String)> = APLUSB.iter().map(|n| (n.to_string(), verdict.to_string())).collect();
    assert_eq!(j.verdicts(), want, "{}", j.describe());
    let summary = j.out.stdout.lines().last().unwrap_or_default();
    assert!(summary.starts_with(&format!("{verdict}: ")), "summary line: {summary:?}; {}", j.describe());
}

#[test]
fn aplusb_ok_is_accepted_and_the_json_has_every_test() {
    let Some((_s, j)) = aplusb("aplusb_ok_is_accepted_and_the_json_has_every_test", "cpp", "ok.cpp", &[]) else {
        return;
    };
    all(&j, "OK");
    assert_eq!(j.out.stdout.lines().last(), Some("OK: all 10 tests passed"), "{}", j.describe());
    let v = j.json();
    assert_eq!(v["lang"], "cpp", "{}", j.describe());
    assert!(v["toolchain"].as_str().is_some_and(|t| t.starts_with("g++")), "{}", j.describe());
    let (time_limit, wall_limit, compile_limit) = limits();
    assert_eq!(v["limits"]["time_ms"], time_limit);
    assert_eq!(v["limits"]["wall_time_ms"], wall_limit);
    assert_eq!(v["limits"]["memory_bytes"], 256u64 << 20);
    assert_eq!(v["limits"]["output_bytes"], 64u64 << 20);
    assert_eq!(v["limits"]["compile_time_ms"], compile_limit, "the preset's");
    assert!(v["compile_output"].is_string(), "{}", j.describe());
    assert!(v["timing"]["compile_ms"].as_f64().is_some_and(|t| t > 0.0), "{}", j.describe());
    assert!(v["timing"]["tests_ms"].as_f64().is_some_and(|t| t > 0.0), "{}", j.describe());
    // Natural order: 2 before 10.
    for t in j.tests() {
        assert_eq!(t["status"], "exited", "{t}");
        assert_eq!(t["exit_code"], 0, "{t}");
        let time = t["time_ms"].as_f64().unwrap_or(-1.0);
        assert!((0.0..time_limit).contains(&time), "time_ms {time}: {t}");
        let wall = t["wall_time_ms"].as_f64().unwrap_or(-1.0);
        assert!(wall > 0.0 && wall < wall_limit, "wall_time_ms {wall}: {t}");
        let mem = t["memory_bytes"].as_u64().unwrap_or(0);
        assert!(mem > 100 << 10 && mem < 256 << 20, "memory_bytes {mem}: {t}");
        assert!(t.get("detail").is_none() && t.get("syscall").is_none(), "{t}");
    }
    // The table: a header, one row per test in the same order, the summary.
    let lines: Vec<&str> = j.out.stdout.lines().collect();
    assert_eq!(lines.len(), 12, "{}", j.describe());
    assert!(lines[0].starts_with("test") && lines[0].contains("verdict"), "{}", j.describe());
    for (row, name) in lines[1..11].iter().zip(APLUSB) {
        let f: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((f[0], f[1]), (name, "OK"), "{row:?}");
        assert!(f[2].parse::<u64>().is_ok() && f[4] == "MiB", "{row:?}");
    }
}

#[test]
fn aplusb_wa_fails_the_big_tests_only() {
    let Some((_s, j)) = aplusb("aplusb_wa_fails_the_big_tests_only", "cpp", "wa.cpp", &[]) else { return };
    j.out.assert_code(1);
    assert_eq!(j.verdict(), "WA", "{}", j.describe());
    let wrong: Vec<String> =
        j.verdicts().into_iter().filter(|(_, v)| v != "OK").map(|(n, v)| format!("{n}:{v}")).collect();
    assert_eq!(wrong, ["5:WA", "6:WA", "7:WA", "8:WA", "9:WA"], "{}", j.describe());
    assert_eq!(j.tests()[4]["detail"], "line 1: expected `2147483648`, got `-2147483648`", "{}", j.describe());
    assert_eq!(
        j.out.stdout.lines().last(),
        Some("WA: 5 of 10 tests passed; first failure: test 5 (WA)"),
        "{}",
        j.describe()
    );
}

#[test]
fn aplusb_tle() {
    let Some((_s, j)) = aplusb("aplusb_tle", "cpp", "tle.cpp", &["--parallel", "2"]) else { return };
    all(&j, "TLE");
    for t in j.tests() {
        let status = t["status"].as_str().unwrap();
        assert!(["cpu-time-limit", "wall-time-limit"].contains(&status), "{t}");
        // Killed near the CPU limit (PID 1's timer, over the cgroup or the processes), by
        // the wall-time limit at the latest.
        assert!(t["wall_time_ms"].as_f64().unwrap() < limits().1 + 500.0, "{t}");
    }
}

#[test]
fn aplusb_re() {
    let Some((_s, j)) = aplusb("aplusb_re", "cpp", "re.cpp", &[]) else { return };
    all(&j, "RE");
    for t in j.tests() {
        assert_eq!((&t["signal"], &t["detail"]), (&"SIGSEGV".into(), &"killed by SIGSEGV".into()), "{t}");
    }
}

#[test]
fn aplusb_ole() {
    let Some((_s, j)) = aplusb("aplusb_ole", "cpp", "ole.cpp", &["--output-limit", "1M"]) else { return };
    all(&j, "OLE");
    for t in j.tests() {
        assert_eq!(t["status"], "output-limit", "{t}");
        assert_eq!(t["detail"], "more than 1048576 bytes of output", "{t}");
    }
}

#[test]
fn aplusb_sys_names_the_call() {
    let Some((_s, j)) = aplusb("aplusb_sys_names_the_call", "cpp", "sys.cpp", &[]) else { return };
    all(&j, "SYS");
    for t in j.tests() {
        assert_eq!(t["syscall"], "socket", "{t}");
    }
    assert!(j.out.stdout.contains("forbidden system call socket"), "{}", j.describe());
}

#[test]
fn aplusb_ce_prints_the_compiler_message() {
    let Some((_s, j)) = aplusb("aplusb_ce_prints_the_compiler_message", "cpp", "ce.cpp", &[]) else { return };
    j.out.assert_code(1);
    assert_eq!(j.verdict(), "CE", "{}", j.describe());
    assert!(j.tests().is_empty(), "{}", j.describe());
    let msg = j.json()["compile_output"].as_str().unwrap_or_default();
    assert!(msg.contains("solution.cpp:6") && msg.contains("error"), "{}", j.describe());
    assert!(msg.ends_with("(the compiler exited with 1)\n"), "{}", j.describe());
    assert!(j.out.stdout.contains("solution.cpp:6"), "the message is printed; {}", j.describe());
    assert_eq!(j.out.stdout.lines().last(), Some("CE: compilation failed"), "{}", j.describe());
}

/// `--compile-time` is the compiler's wall-time limit: one too short for
/// g++ is CE with the reason, and the report's limits say it (the preset's
/// 30 s where it is not given).
#[test]
fn compile_time_limits_the_compiler() {
    let Some((_s, j)) = aplusb("compile_time_limits_the_compiler", "cpp", "ok.cpp", &["--compile-time", "1ms"]) else {
        return;
    };
    j.out.assert_code(1);
    assert_eq!(j.verdict(), "CE", "{}", j.describe());
    assert!(j.tests().is_empty(), "{}", j.describe());
    let msg = j.json()["compile_output"].as_str().unwrap_or_default();
    assert!(msg.ends_with("(the compiler ran out of time)\n"), "{}", j.describe());
    assert_eq!(j.json()["limits"]["compile_time_ms"], 1.0, "{}", j.describe());
    assert_eq!(j.out.stdout.lines().last(), Some("CE: compilation failed"), "{}", j.describe());
    let Some((_s, j)) = aplusb("compile_time_limits_the_compiler", "cpp", "ok.cpp", &["--compile-time", "2m"]) else {
        return;
    };
    all(&j, "OK");
    assert_eq!(j.json()["limits"]["compile_time_ms"], 120000.0, "{}", j.describe());
}

/// Without cgroups (this host), the memory limit is the documented
/// fallback: the peak resident set checked after the run, each process's
/// address space capped at 2 x memory + 64M. With cgroups, memory.max.
#[test]
fn aplusb_mle() {
    // Touching 512 MiB takes a few hundred ms of CPU: room for a busy machine.
    let Some((s, j)) = aplusb("aplusb_mle", "cpp", "mle.cpp", &["--time", "5s"]) else { return };
    all(&j, "MLE");
    let notes = j.out.stderr.matches("capsule judge: no cgroups").count();
    if j.json()["accounting"] == "cgroup" {
        assert_eq!(notes, 0, "{}", j.describe());
        for t in j.tests() {
            assert_eq!(t["status"], "memory-limit", "{t}");
        }
        return;
    }
    assert_eq!(j.json()["accounting"], "rusage", "{}", j.describe());
    assert_eq!(notes, 1, "the fallback is said once; {}", j.describe());
    assert!(j.out.stderr.contains("address space is capped at 576 MiB"), "{}", j.describe());
    for t in j.tests() {
        // The program ran to the end; 512 MiB of it resident.
        assert_eq!(t["status"], "exited", "{t}");
        assert!(t["memory_bytes"].as_u64().unwrap() > 512 << 20, "{t}");
        assert!(t["detail"].as_str().unwrap().contains("over the limit of 256 MiB"), "{t}");
    }
    // Past the address-space cap (16M: 96 MiB), the allocation fails inside
    // the program, which dies of it (std::bad_alloc: SIGABRT): RE.
    let j = judge(&s, &["--lang", "cpp", "solutions/mle.cpp", "--tests", "tests", "--memory", "16M", "--time", "5s"]);
    all(&j, "RE");
    assert!(j.out.stderr.contains("capped at 96 MiB"), "{}", j.describe());
    for t in j.tests() {
        assert_eq!(t["signal"], "SIGABRT", "{t}");
    }
    // And a frugal solution passes under the same 16M.
    let j = judge(&s, &["--lang", "cpp", "solutions/ok.cpp", "--tests", "tests", "--memory", "16M"]);
    all(&j, "OK");
}

#[test]
fn aplusb_in_other_languages() {
    for (lang, file) in [("c", "ok.c"), ("python3", "ok.py"), ("bash", "ok.sh")] {
        let test = format!("aplusb_in_other_languages ({lang})");
        let Some((_s, j)) = aplusb(&test, lang, file, &["--parallel", "2"]) else { continue };
        all(&j, "OK");
        assert_eq!(j.json()["lang"], lang, "{}", j.describe());
    }
}

#[test]
fn parallel_gives_the_same_table() {
    let Some((s, one)) = aplusb("parallel_gives_the_same_table", "cpp", "wa.cpp", &[]) else { return };
    // wa.cpp's `b` is never read on the tests whose `a` overflows (the
    // stream failed): what it prints there is stack garbage, which differs
    // from run to run, so a detail is compared up to its `, got`.
    let expected = |d: &str| d.split(", got").next().unwrap_or_default().to_string();
    let strip = |j: &Judged| -> Vec<(String, String, String)> {
        j.tests()
            .iter()
            .map(|t| {
                let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("verdict"), expected(&s("detail")))
            })
            .collect()
    };
    let rows = |j: &Judged| -> Vec<(String, String, String)> {
        j.rows().into_iter().map(|(n, v, d)| (n, v, expected(&d))).collect()
    };
    assert_eq!(one.rows().len(), 10, "{}", one.describe());
    // Two at once, and with one supervisor per CPU.
    for extra in [&[][..], &["--per-cpu"][..]] {
        let args = [&["--lang", "cpp", "solutions/wa.cpp", "--tests", "tests", "--parallel", "2"][..], extra].concat();
        let two = judge(&s, &args);
        two.out.assert_code(1);
        assert_eq!(strip(&one), strip(&two), "{extra:?}: {}\n{}", one.describe(), two.describe());
        assert_eq!(rows(&one), rows(&two), "{extra:?}: {}\n{}", one.describe(), two.describe());
        assert_eq!(one.out.stdout.lines().last(), two.out.stdout.lines().last());
    }
}

// Checkers ----------------------------------------------------------------

/// A problem whose solution copies its input: what each test's output is
/// is then the test's `.in`; `.out` is the answer.
fn echo_problem(tests: &[(&str, &str, &str)]) -> Scratch {
    let s = Scratch::new("judge-echo");
    s.mkdir("tests");
    for (name, input, answer) in tests {
        s.write(&format!("tests/{name}.in"), input.as_bytes());
        s.write(&format!("tests/{name}.out"), answer.as_bytes());
    }
    s.write(
        "echo.c",
        b"#include <stdio.h>\nint main(void) { char b[4096]; size_t n;\n\
          while ((n = fread(b, 1, sizeof b, stdin)) > 0) fwrite(b, 1, n, stdout); return 0; }\n",
    );
    s
}

fn verdicts_with(s: &Scratch, checker: &str) -> (Judged, Vec<String>) {
    let j = judge(s, &["--lang", "c", "echo.c", "--tests", "tests", "--checker", checker]);
    let v = j.verdicts().into_iter().map(|(_, v)| v).collect();
    (j, v)
}

#[test]
fn builtin_checkers() {
    require!("builtin_checkers", userns_available());
    require!("builtin_checkers", toolchain("c"));
    let s = echo_problem(&[
        ("1", "1 2  \n\n\n", "1 2\n"),
        ("2", "1  2\n", "1 2\n"),
        ("3", "0.3000001 YES\n", "0.3 YES\n"),
        ("4", "1 2\r\n", "1 2"),
        ("5", "3\n", "3 4\n"),
    ]);
    let (j, v) = verdicts_with(&s, "exact");
    assert_eq!(v, ["OK", "WA", "WA", "OK", "WA"], "{}", j.describe());
    assert_eq!(j.tests()[1]["detail"], "line 1: expected `1 2`, got `1  2`", "{}", j.describe());
    let (j, v) = verdicts_with(&s, "tokens");
    assert_eq!(v, ["OK", "OK", "WA", "OK", "WA"], "{}", j.describe());
    assert_eq!(j.tests()[4]["detail"], "the output ends after 1 token; expected `4` next", "{}", j.describe());
    let (j, v) = verdicts_with(&s, "float:1e-6");
    assert_eq!(v, ["OK", "OK", "OK", "OK", "WA"], "{}", j.describe());
    let (j, v) = verdicts_with(&s, "float:1e-9");
    assert_eq!(v, ["OK", "OK", "WA", "OK", "WA"], "{}", j.describe());
    assert_eq!(j.tests()[2]["detail"], "token 1: expected `0.3`, got `0.3000001`", "{}", j.describe());
    // The default is exact.
    let j = judge(&s, &["--lang", "c", "echo.c", "--tests", "tests"]);
    let v: Vec<String> = j.verdicts().into_iter().map(|(_, v)| v).collect();
    assert_eq!(v, ["OK", "WA", "WA", "OK", "WA"], "{}", j.describe());
}

#[test]
fn checker_program() {
    let Some((s, j)) = aplusb("checker_program", "cpp", "ok.cpp", &["--checker", "./checker.py"]) else { return };
    all(&j, "OK");
    // Its message is kept for every test.
    assert_eq!(j.tests()[0]["detail"], "ok: 3", "{}", j.describe());
    let j = judge(&s, &["--lang", "cpp", "solutions/wa.cpp", "--tests", "tests", "--checker", "checker.py"]);
    j.out.assert_code(1);
    assert_eq!(j.tests()[4]["verdict"], "WA", "{}", j.describe());
    assert_eq!(j.tests()[4]["detail"], "wrong answer: expected 2147483648, got -2147483648", "{}", j.describe());
    assert!(j.out.stdout.contains("wrong answer: expected 2147483648, got -2147483648"), "{}", j.describe());

    // testlib's arguments: the input, the output and the answer, readable;
    // run where the checker is; exit 2 (presentation error) is WA too.
    s.write(
        "args.sh",
        b"#!/bin/sh\n[ $# = 3 ] || { echo \"$# arguments\" >&2; exit 3; }\n\
          read -r a b < \"$1\"; read -r out < \"$2\"; read -r ans < \"$3\"\n\
          [ -f checker.py ] || { echo 'not run in its directory' >&2; exit 3; }\n\
          [ \"$out\" = \"$ans\" ] && [ \"$ans\" = $((a + b)) ] && exit 0\n\
          echo \"$a + $b: $out\" >&2; exit 2\n",
    );
    make_executable(&s.join("args.sh"));
    let j = judge(&s, &["--lang", "cpp", "solutions/wa.cpp", "--tests", "tests", "--checker", "./args.sh"]);
    j.out.assert_code(1);
    assert_eq!(j.tests()[0]["verdict"], "OK", "{}", j.describe());
    assert_eq!(j.tests()[4]["verdict"], "WA", "{}", j.describe());
    assert_eq!(j.tests()[4]["detail"], "2147483647 + 1: -2147483648", "{}", j.describe());

    // A checker that fails (exit 3, testlib's FAIL) is a judge error, not WA.
    s.write("broken.sh", b"#!/bin/sh\necho 'FAIL cannot parse the answer' >&2\nexit 3\n");
    make_executable(&s.join("broken.sh"));
    let j = judge(&s, &["--lang", "cpp", "solutions/ok.cpp", "--tests", "tests", "--checker", "./broken.sh"]);
    j.out.assert_code(125);
    assert!(
        j.out.stderr.contains("capsule judge: error: test 1: the checker exited with 3 (expected exit code 0, 1 or 2): FAIL cannot parse the answer"),
        "{}",
        j.describe()
    );
    assert_eq!(j.json()["verdict"], Value::Null, "{}", j.describe());
    assert!(j.json()["error"].as_str().unwrap_or_default().contains("the checker exited with 3"), "{}", j.describe());
    // So is one that crashes.
    s.write("crash.sh", b"#!/bin/sh\nkill -SEGV $$\n");
    make_executable(&s.join("crash.sh"));
    let j = judge(&s, &["--lang", "cpp", "solutions/ok.cpp", "--tests", "tests", "--checker", "./crash.sh"]);
    j.out.assert_code(125);
    assert!(j.out.stderr.contains("the checker was killed by SIGSEGV"), "{}", j.describe());
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// Interactive problems ----------------------------------------------------------

fn guess(test: &str, lang: &str, file: &str) -> Option<(Scratch, Judged)> {
    if let Err(why) = userns_available().and_then(|()| toolchain(lang)).and_then(|()| toolchain("python3")) {
        skip(test, &why);
        return None;
    }
    let s = stage("guess");
    let src = format!("solutions/{file}");
    let j =
        judge(&s, &["--lang", lang, &src, "--tests", "tests", "--interactor", "./interactor.py", "--parallel", "2"]);
    Some((s, j))
}

const GUESS: [&str; 7] = ["1", "2", "3", "4", "5", "6", "7"];

#[test]
fn guess_ok() {
    for (lang, file) in [("cpp", "ok.cpp"), ("python3", "ok.py")] {
        let Some((_s, j)) = guess(&format!("guess_ok ({lang})"), lang, file) else { continue };
        j.out.assert_code(0);
        assert_eq!(j.verdict(), "OK", "{}", j.describe());
        let names: Vec<String> = j.verdicts().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, GUESS, "{}", j.describe());
        for t in j.tests() {
            assert_eq!(t["verdict"], "OK", "{t}");
            // Both leave after `=`, in either order.
            assert!(t["first_to_exit"] == "solution" || t["first_to_exit"] == "interactor", "{t}");
            assert_eq!(t["interactor"]["exit_code"], 0, "{t}");
            assert!(t["interactor"]["message"].as_str().unwrap().starts_with("ok: found "), "{t}");
        }
    }
}

#[test]
fn guess_too_many_guesses_is_wa() {
    let Some((_s, j)) = guess("guess_too_many_guesses_is_wa", "cpp", "linear.cpp") else { return };
    j.out.assert_code(1);
    let v: Vec<String> = j.verdicts().into_iter().map(|(_, v)| v).collect();
    assert_eq!(v, ["OK", "WA", "OK", "WA", "WA", "OK", "WA"], "{}", j.describe());
    assert_eq!(j.tests()[1]["detail"], "wrong answer: 7 not found in 4 guesses", "{}", j.describe());
}

/// Thesis, first example: the interactor rejects a guess and leaves; the
/// solution, still writing, dies of SIGPIPE. WA, not RE.
#[test]
fn guess_interactor_leaves_first_with_wa() {
    let Some((_s, j)) = guess("guess_interactor_leaves_first_with_wa", "cpp", "wrong.cpp") else { return };
    j.out.assert_code(1);
    assert_eq!(j.verdict(), "WA", "{}", j.describe());
    for t in j.tests() {
        assert_eq!(t["verdict"], "WA", "{t}");
        assert_eq!(t["first_to_exit"], "interactor", "{t}");
        assert_eq!((&t["status"], &t["signal"]), (&"signaled".into(), &"SIGPIPE".into()), "{t}");
        assert_eq!(t["interactor"]["exit_code"], 1, "{t}");
        assert!(t["detail"].as_str().unwrap().contains("0 is not between 1 and"), "{t}");
    }
}

/// Thesis, second example: the solution crashes; the interactor then sees
/// the conversation end and says WA. RE, the solution left first.
#[test]
fn guess_solution_crashes_first_is_re() {
    let Some((_s, j)) = guess("guess_solution_crashes_first_is_re", "cpp", "crash.cpp") else { return };
    j.out.assert_code(1);
    assert_eq!(j.verdict(), "RE", "{}", j.describe());
    for t in j.tests() {
        assert_eq!(t["verdict"], "RE", "{t}");
        assert_eq!(t["first_to_exit"], "solution", "{t}");
        assert_eq!(t["signal"], "SIGSEGV", "{t}");
        assert_eq!(t["interactor"]["exit_code"], 1, "the interactor did fail: {t}");
        assert_eq!(t["interactor"]["message"], "wrong answer: the solution stopped after 0 guesses", "{t}");
    }
}

#[test]
fn broken_interactor_is_a_judge_error() {
    require!("broken_interactor_is_a_judge_error", userns_available());
    require!("broken_interactor_is_a_judge_error", toolchain("cpp"));
    let s = stage("guess");
    s.write("bad.sh", b"#!/bin/sh\necho 'cannot read the test' >&2\nexit 5\n");
    make_executable(&s.join("bad.sh"));
    let j = judge(&s, &["--lang", "cpp", "solutions/ok.cpp", "--tests", "tests", "--interactor", "./bad.sh"]);
    j.out.assert_code(125);
    assert!(
        j.out.stderr.contains(
            "error: test 1: the interactor exited with 5 (expected exit code 0, 1 or 2): cannot read the test"
        ),
        "{}",
        j.describe()
    );
    // The interactor gets the test's input, and its answer when there is one.
    s.write("tests/1.out", b"the answer\n");
    s.write(
        "args.sh",
        b"#!/bin/sh\nread -r n secret < \"$1\"\n[ \"$secret\" = 1 ] || exit 3\nif [ $# = 2 ]; then read -r a < \"$2\"; [ \"$a\" = 'the answer' ] || exit 4; fi\n\
          echo 1; read -r guess; [ \"$guess\" = 1 ] || exit 1; echo =; echo \"args $#\" >&2\n",
    );
    make_executable(&s.join("args.sh"));
    for name in ["2", "3", "4", "5", "6", "7"] {
        std::fs::remove_file(s.join(&format!("tests/{name}.in"))).unwrap();
    }
    let j = judge(&s, &["--lang", "cpp", "solutions/ok.cpp", "--tests", "tests", "--interactor", "./args.sh"]);
    j.out.assert_code(0);
    assert_eq!(j.tests()[0]["interactor"]["message"], "args 2", "{}", j.describe());
}

// Bad input -------------------------------------------------------------------

#[track_caller]
fn refused(j: &Judged, says: &str) {
    j.out.assert_code(125);
    assert!(j.out.stderr.contains("capsule judge: error: ") || j.out.stderr.contains("error: "), "{}", j.describe());
    assert!(j.out.stderr.contains(says), "expected `{says}`; {}", j.describe());
    assert!(!j.out.stderr.contains("panicked"), "{}", j.describe());
    assert!(j.out.stdout.is_empty(), "{}", j.describe());
}

#[test]
fn bad_input_is_a_clear_error() {
    require!("bad_input_is_a_clear_error", userns_available());
    let s = stage("aplusb");
    s.mkdir("empty");
    s.mkdir("half");
    s.write("half/1.in", b"1 2\n");
    s.write("half/1.out", b"3\n");
    s.write("half/2.in", b"1 2\n");
    let ok = "solutions/ok.cpp";
    let cases: [(&[&str], &str); 14] = [
        (
            &["--lang", "cpp", "solutions/missing.cpp", "--tests", "tests"],
            "SOURCE `solutions/missing.cpp`: No such file or directory (ENOENT)",
        ),
        (&["--lang", "cpp", "solutions", "--tests", "tests"], "SOURCE `solutions` is not a file"),
        (&["--lang", "cobol", ok, "--tests", "tests"], "--lang cobol: unknown language `cobol`"),
        (&["--lang", "cpp", ok, "--tests", "nowhere"], "--tests `nowhere`: No such file or directory (ENOENT)"),
        (&["--lang", "cpp", ok, "--tests", "empty"], "--tests `empty` holds no tests"),
        (&["--lang", "cpp", ok, "--tests", "half"], "test `2`: "),
        (&["--lang", "cpp", ok, "--tests", "tests", "--time", "soon"], "--time soon: "),
        (&["--lang", "cpp", ok, "--tests", "tests", "--time", "0s"], "--time 0s: must be more than 0"),
        (&["--lang", "cpp", ok, "--tests", "tests", "--compile-time", "0s"], "--compile-time 0s: must be more than 0"),
        (
            &["--lang", "cpp", ok, "--tests", "tests", "--compile-time", "2h"],
            "--compile-time 2h: must be more than 0 and at most 1h",
        ),
        (&["--lang", "cpp", ok, "--tests", "tests", "--compile-time", "later"], "--compile-time later: "),
        (
            &["--lang", "cpp", ok, "--tests", "tests", "--checker", "float:abc"],
            "--checker: `float:abc`: `abc` is not a tolerance",
        ),
        (
            &["--lang", "cpp", ok, "--tests", "tests", "--checker", "./nosuch"],
            "--checker: `./nosuch` is neither exact, tokens nor float:EPS",
        ),
        (
            &["--lang", "cpp", ok, "--tests", "tests", "--parallel", "0"],
            "--parallel 0: not a number of tests between 1 and",
        ),
    ];
    for (args, says) in cases {
        let j = judge(&s, args);
        refused(&j, says);
        // The --json file says it too.
        assert_eq!(j.json()["verdict"], Value::Null, "{}", j.describe());
        assert!(j.json()["error"].as_str().is_some_and(|e| e.contains(says)), "{}", j.describe());
    }
    let j = judge(&s, &["--lang", "cpp", ok, "--tests", "half"]);
    refused(&j, "neither `2.out` nor `2.ans`");
    let j = judge(&s, &["--lang", "cpp", ok, "--tests", "tests", "--interactor", "./nosuch"]);
    refused(&j, "--interactor `./nosuch`: No such file or directory (ENOENT)");
    let j = judge(&s, &["--lang", "cpp", ok, "--tests", "tests", "--memory", "1K"]);
    refused(&j, "--memory 1K: too little");
    // Flags clap checks: missing ones, and --checker with --interactor.
    for args in [&["--tests", "tests", ok][..], &["--lang", "cpp", ok][..], &["--lang", "cpp", "--tests", "tests"][..]]
    {
        let j = judge(&s, args);
        j.out.assert_code(125);
        assert!(j.out.stderr.contains("required"), "{}", j.describe());
    }
    let j =
        judge(&s, &["--lang", "cpp", ok, "--tests", "tests", "--checker", "tokens", "--interactor", "./checker.py"]);
    j.out.assert_code(125);
    assert!(j.out.stderr.contains("cannot be used with"), "{}", j.describe());
    // Nothing of the user's was touched.
    assert!(s.join("solutions/ok.cpp").is_file() && s.join("tests/1.out").is_file());
}
