//! `capsule isolate`: isolate's command line and meta file, driven the way
//! CMS's `IsolateSandbox` drives isolate (init, copy the compiled solution
//! and its input into the box, run with `--meta`, `--dir`, limits, read
//! the meta file, cleanup), and every option of docs/isolate.md's table.
//!
//! The `cgroup_*` tests (`--cg`, `--cg-mem`, the memory limit, `--cg-timing`,
//! `--extra-time` on the group's CPU time, `--print-cg-root`) need a
//! delegated cgroup v2 hierarchy: they run in the VM stage of
//! scripts/test.sh and skip elsewhere (see tests/cgroups.rs).

use capsule_testkit as common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// The solution every test compiles once: one mode per case.
const SOL: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static void lim(const char *n, int r) {
  struct rlimit l; getrlimit(r, &l);
  if (l.rlim_cur == RLIM_INFINITY) printf("%s=unlimited\n", n); else printf("%s=%llu\n", n, (unsigned long long)l.rlim_cur);
}
int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "sum";
  if (!strcmp(m, "sum")) { long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 9; printf("%ld\n", a + b); return 0; }
  if (!strcmp(m, "exit")) return atoi(argv[2]);
  if (!strcmp(m, "segv")) { *(volatile int *)0 = 1; return 0; }
  if (!strcmp(m, "spin")) { for (volatile unsigned long i = 0;; i++) {} }
  if (!strcmp(m, "sleep")) { sleep(atoi(argv[2])); return 0; }
  if (!strcmp(m, "write")) { static char buf[1024]; memset(buf, 'x', sizeof buf);
    for (int i = 0; i < atoi(argv[2]); i++) if (write(1, buf, sizeof buf) < 0) { printf("write failed errno=%d\n", errno); return 1; }
    return 0; }
  if (!strcmp(m, "uring")) { char p[120] = {0}; long r = syscall(SYS_io_uring_setup, 1, p);
    printf("io_uring_setup=%ld errno=%d\n", r, r < 0 ? errno : 0); return 0; }
  if (!strcmp(m, "i386")) { long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory"); printf("i386_getpid=%ld\n", r); return 0; }
  if (!strcmp(m, "alloc")) { long n = atol(argv[2]);
    for (long i = 0; i < n; i++) { char *p = malloc(1 << 20); if (!p) { printf("malloc failed at %ld MB\n", i); fflush(stdout); return 7; } memset(p, 1, 1 << 20); }
    printf("allocated %ld MB\n", n); return 0; }
  if (!strcmp(m, "fork")) { pid_t p = fork(); if (p < 0) { printf("fork failed errno=%d\n", errno); return 0; }
    if (p == 0) _exit(0); waitpid(p, 0, 0); printf("fork ok\n"); return 0; }
  if (!strcmp(m, "env")) { for (char **e = environ; *e; e++) printf("%s\n", *e); return 0; }
  if (!strcmp(m, "pwd")) { char b[4096]; printf("%s\n", getcwd(b, sizeof b)); return 0; }
  if (!strcmp(m, "ls")) { DIR *d = opendir(argv[2]); if (!d) { printf("opendir errno=%d\n", errno); return 1; }
    struct dirent *e; while ((e = readdir(d))) if (e->d_name[0] != '.') printf("%s\n", e->d_name); return 0; }
  if (!strcmp(m, "special")) { if (symlink(argv[2], argv[3]) || mkfifo(argv[4], 0600)) { printf("errno=%d\n", errno); return 1; } return 0; }
  if (!strcmp(m, "touch")) { int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { printf("open errno=%d\n", errno); return 1; } write(fd, "x", 1); close(fd); return 0; }
  if (!strcmp(m, "limits")) { lim("stack", RLIMIT_STACK); lim("nofile", RLIMIT_NOFILE); lim("as", RLIMIT_AS); lim("fsize", RLIMIT_FSIZE); return 0; }
  if (!strcmp(m, "streams")) { fprintf(stdout, "to-stdout\n"); fflush(stdout); fprintf(stderr, "to-stderr\n"); return 0; }
  if (!strcmp(m, "cat")) { char b[4096]; ssize_t n; while ((n = read(0, b, sizeof b)) > 0) write(1, b, n); return 0; }
  if (!strcmp(m, "file")) { FILE *f = fopen(argv[2], "r"); if (!f) { printf("fopen errno=%d\n", errno); return 1; }
    char b[4096]; size_t n; while ((n = fread(b, 1, sizeof b, f)) > 0) fwrite(b, 1, n, stdout); return 0; }
  if (!strcmp(m, "memlock")) { struct rlimit l; getrlimit(RLIMIT_MEMLOCK, &l);
    printf("memlock=%llu/%llu\n", (unsigned long long)l.rlim_cur, (unsigned long long)l.rlim_max);
    char *p = malloc(4096); int r = mlock(p, 4096); printf("mlock=%d errno=%d\n", r, r ? errno : 0); return 0; }
  if (!strcmp(m, "fds")) { DIR *d = opendir("/proc/self/fd"); if (!d) { printf("opendir errno=%d\n", errno); return 1; }
    struct dirent *e; while ((e = readdir(d))) { int n = atoi(e->d_name); if (e->d_name[0] != '.' && n > 2 && n != dirfd(d)) printf("fd %d\n", n); }
    closedir(d);
    for (int i = 2; i + 1 < argc; i += 2) { int fd = atoi(argv[i]); char b[64] = {0};
      if (!strcmp(argv[i + 1], "w")) printf("write %d: %zd\n", fd, write(fd, "from-box\n", 9));
      else { ssize_t n = read(fd, b, sizeof b - 1); printf("read %d: %zd %s", fd, n, n > 0 ? b : "\n"); } }
    return 0; }
  if (!strcmp(m, "exec")) { execv(argv[2], argv + 2); printf("execv errno=%d\n", errno); return 1; }
  return 99;
}
"#;

/// The solution, compiled once (static, so that it runs with `-D` too),
/// kept under the scratch root by the hash of its source.
fn sol() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        SOL.hash(&mut h);
        let dir = Path::new(SCRATCH_ROOT).join(format!("isolate-sol-{:016x}", h.finish()));
        let bin = dir.join("sol");
        if !bin.exists() {
            let tmp = Path::new(SCRATCH_ROOT).join(unique("isolate-sol"));
            std::fs::create_dir_all(&tmp).unwrap();
            std::fs::write(tmp.join("sol.c"), SOL).unwrap();
            let o = Command::new("gcc")
                .args(["-O1", "-static", "-o"])
                .arg(tmp.join("sol"))
                .arg(tmp.join("sol.c"))
                .output()
                .expect("gcc (apt-get install gcc libc6-dev)");
            assert!(o.status.success(), "compiling the solution: {}", String::from_utf8_lossy(&o.stderr));
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Another test binary may have won the race: either copy is fine.
            let _ = std::fs::rename(&tmp, &dir);
            let _ = std::fs::remove_dir_all(&tmp);
        }
        bin
    })
}

/// A box root of the test's own, and the box id it uses.
struct Iso {
    scratch: std::sync::Arc<Scratch>,
    id: u32,
    cg: bool,
    bin: Option<PathBuf>,
    /// `CAPSULE_ISOLATE_BOX_MODE`: permission bits, unless a test of the
    /// subordinate-id mode asks for it.
    mode: &'static str,
}

impl Iso {
    fn new(tag: &str, id: u32) -> Iso {
        Iso { scratch: std::sync::Arc::new(Scratch::new(tag)), id, cg: false, bin: None, mode: "permission-bits" }
    }

    /// Another box (or mode) under the same root.
    fn other(&self, id: u32, cg: bool) -> Iso {
        Iso { scratch: self.scratch.clone(), id, cg, bin: self.bin.clone(), mode: self.mode }
    }

    fn root(&self) -> PathBuf {
        self.scratch.join("root")
    }

    /// `capsule isolate [--cg] -b ID ARGS`.
    fn cmd(&self, args: &[&str]) -> Cmd {
        let mut c = match &self.bin {
            Some(b) => {
                let mut c = capsule::<&str>(&[]);
                c.binary(b);
                c
            }
            None => capsule(&["isolate"]),
        };
        if self.cg {
            c.arg("--cg");
        }
        c.arg(format!("--box-id={}", self.id)).args(args);
        c.env(ROOT_ENV, &self.root().display().to_string());
        c.env(MODE_ENV, self.mode);
        c
    }

    /// `--init`: the box directory it printed.
    fn init(&self) -> PathBuf {
        let out = self.cmd(&["--init"]).run();
        out.assert_code(0);
        let dir = PathBuf::from(out.stdout.trim());
        assert_eq!(dir, self.root().join(self.id.to_string()), "{}", out.describe());
        assert!(dir.join("box").is_dir(), "{}", out.describe());
        dir
    }

    /// Copies a host file into the box (as CMS does before a run).
    fn put(&self, name: &str, from: &Path) {
        let to = self.root().join(self.id.to_string()).join("box").join(name);
        std::fs::copy(from, &to).unwrap();
        chown_to_user(&to);
    }

    fn put_text(&self, name: &str, text: &str) {
        let to = self.root().join(self.id.to_string()).join("box").join(name);
        std::fs::write(&to, text).unwrap();
        chown_to_user(&to);
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.root().join(self.id.to_string()).join("box").join(name)).unwrap_or_default()
    }

    /// `--meta=FILE ARGS --run -- ./sol SOL_ARGS` after copying the solution
    /// in: the exit status, the meta file's fields and what was printed.
    fn run(&self, args: &[&str], sol_args: &[&str]) -> (Out, Meta) {
        self.put("sol", sol());
        let meta = self.scratch.join(&unique("run.meta"));
        let mut c = self.cmd(&[&format!("--meta={}", meta.display())]);
        c.args(args).args(&["--run", "--", "./sol"]).args(sol_args);
        let out = c.run();
        let text = std::fs::read_to_string(&meta).unwrap_or_default();
        (out, Meta::parse(&text))
    }

    fn cleanup(&self) {
        self.cmd(&["--cleanup"]).run().assert_code(0);
        assert!(!self.root().join(self.id.to_string()).exists());
    }
}

const ROOT_ENV: &str = "CAPSULE_ISOLATE_ROOT";
const MODE_ENV: &str = "CAPSULE_ISOLATE_BOX_MODE";

/// A meta file, as CMS reads it (`key:value` lines, a key may repeat).
#[derive(Debug)]
struct Meta(HashMap<String, Vec<String>>, String);

impl Meta {
    fn parse(text: &str) -> Meta {
        let mut m: HashMap<String, Vec<String>> = HashMap::new();
        for line in text.lines() {
            let (k, v) = line.split_once(':').unwrap_or_else(|| panic!("not a meta line: {line:?} in {text:?}"));
            m.entry(k.to_string()).or_default().push(v.to_string());
        }
        Meta(m, text.to_string())
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(|v| {
            assert_eq!(v.len(), 1, "{k} repeated in {}", self.1);
            v[0].as_str()
        })
    }

    #[track_caller]
    fn must(&self, k: &str) -> &str {
        self.get(k).unwrap_or_else(|| panic!("no `{k}` in the meta file:\n{}", self.1))
    }

    /// A `time`-like field: seconds with exactly 3 decimals.
    #[track_caller]
    fn secs(&self, k: &str) -> f64 {
        let v = self.must(k);
        let (_, frac) = v.split_once('.').unwrap_or_else(|| panic!("{k}:{v} has no decimals"));
        assert_eq!(frac.len(), 3, "{k}:{v} must have 3 decimals");
        v.parse().unwrap()
    }

    /// The fields every finished run has, in isolate's units.
    #[track_caller]
    fn assert_stats(&self) {
        self.secs("time");
        self.secs("time-wall");
        let rss: u64 = self.must("max-rss").parse().expect("max-rss in KB");
        assert!(rss > 0 && rss < 4 << 20, "max-rss:{rss} (KB)");
        for csw in ["csw-voluntary", "csw-forced"] {
            self.must(csw).parse::<u64>().unwrap_or_else(|e| panic!("{csw}: {e} in {}", self.1));
        }
    }
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

/// The whole CMS cycle for a correct solution: init, copy in, run with
/// the meta file, a directory rule and limits, read output and meta, cleanup.
#[test]
fn cms_cycle_ok() {
    require!("cms_cycle_ok", userns_available());
    let iso = Iso::new("iso-ok", 7);
    let dir = iso.init();
    iso.put_text("input.txt", "2 40\n");
    let extra = iso.scratch.mkdir("extra");
    std::fs::write(extra.join("data"), "d").unwrap();
    let rule = format!("--dir=/extra={}", extra.display());
    let (out, meta) = iso.run(
        &[
            &rule,
            "--time=5",
            "--wall-time=10",
            "--extra-time=6",
            "--fsize=1024",
            "--stack=65536",
            "--processes",
            "--stdin=/box/input.txt",
            "--stdout=/box/output.txt",
        ],
        &["sum"],
    );
    out.assert_code(0);
    assert_eq!(iso.read("output.txt"), "42\n");
    meta.assert_stats();
    assert_eq!(meta.must("exitcode"), "0");
    for absent in ["status", "message", "killed", "exitsig", "cg-mem", "cg-oom-killed"] {
        assert_eq!(meta.get(absent), None, "{absent} in {}", meta.1);
    }
    // isolate's status line.
    let line = out.stderr.trim();
    assert!(line.starts_with("OK (") && line.ends_with(" sec wall)"), "{}", out.describe());
    assert!(dir.join("box/output.txt").is_file());
    iso.cleanup();
}

/// csw-voluntary counts the program's own waits: a program that sleeps
/// 20 times gives up the CPU at least 20 times.
#[test]
fn context_switches_are_counted() {
    require!("context_switches_are_counted", userns_available());
    let iso = Iso::new("iso-csw", 18);
    iso.init();
    iso.put("sol", sol());
    let meta = iso.scratch.join("m");
    let script = "for i in $(seq 20); do sleep 0.01; done";
    let out = iso.cmd(&[&format!("-M{}", meta.display()), "-p", "--run", "--", "/bin/sh", "-c", script]).run();
    out.assert_code(0);
    let meta = Meta::parse(&std::fs::read_to_string(meta).unwrap());
    meta.assert_stats();
    let v: u64 = meta.must("csw-voluntary").parse().unwrap();
    assert!(v >= 20, "{}", meta.1);
    iso.cleanup();
}

#[test]
fn wrong_exit_code_is_re() {
    require!("wrong_exit_code_is_re", userns_available());
    let iso = Iso::new("iso-re", 1);
    iso.init();
    let (out, meta) = iso.run(&[], &["exit", "3"]);
    out.assert_code(1);
    meta.assert_stats();
    assert_eq!(meta.must("exitcode"), "3");
    assert_eq!(meta.must("status"), "RE");
    assert_eq!(meta.must("message"), "Exited with error status 3");
    assert_eq!(meta.get("killed"), None);
    assert_eq!(out.stderr.trim(), "Exited with error status 3");
    iso.cleanup();
}

#[test]
fn signal_is_sg() {
    require!("signal_is_sg", userns_available());
    let iso = Iso::new("iso-sg", 2);
    iso.init();
    let (out, meta) = iso.run(&[], &["segv"]);
    out.assert_code(1);
    meta.assert_stats();
    assert_eq!(meta.must("exitsig"), "11");
    assert_eq!(meta.must("status"), "SG");
    assert_eq!(meta.must("message"), "Caught fatal signal 11");
    assert_eq!(meta.get("exitcode"), None);
    iso.cleanup();
}

#[test]
fn cpu_time_limit_is_to() {
    require!("cpu_time_limit_is_to", userns_available());
    let iso = Iso::new("iso-to", 3);
    iso.init();
    let (out, meta) = iso.run(&["-t", "0.2", "-w", "30"], &["spin"]);
    out.assert_code(1);
    assert_eq!(meta.must("status"), "TO");
    assert_eq!(meta.must("message"), "Time limit exceeded");
    assert!(meta.secs("time") > 0.2, "{}", meta.1);
    assert_eq!(meta.get("exitcode"), None);
    assert_eq!(out.stderr.trim(), "Time limit exceeded");
    iso.cleanup();
}

/// Without cgroups the CPU time limit is the whole box's, to the
/// millisecond: `-t 0.5` kills at 0.5 s of CPU (RLIMIT_CPU's whole seconds
/// killed at 1.0 s), `-t 1.5` at 1.5 s, within 50 ms.
#[test]
fn cpu_time_limit_is_exact_without_cgroups() {
    require!("cpu_time_limit_is_exact_without_cgroups", userns_available());
    let iso = Iso::new("iso-to-exact", 31);
    iso.init();
    for t in [0.5, 1.5] {
        let (out, meta) = iso.run(&["-t", &t.to_string(), "-w", "30"], &["spin"]);
        out.assert_code(1);
        assert_eq!(meta.must("status"), "TO", "{}", meta.1);
        assert_eq!(meta.must("killed"), "1", "{}", meta.1);
        let time = meta.secs("time");
        assert!((t..t + 0.05).contains(&time), "-t {t}: {}", meta.1);
    }
    iso.cleanup();
}

/// Judge0's shape: `bash run.sh` in the box runs the solution as a child.
/// A child burning CPU is the box's TLE (`TO`, `killed:1`), killed by the
/// box within 50 ms of `-t`, not by the kernel's SIGXCPU, which bash would
/// report into the program's stderr ("CPU time limit exceeded").
#[test]
fn cpu_time_limit_covers_a_child_under_bash() {
    require!("cpu_time_limit_covers_a_child_under_bash", userns_available());
    let iso = Iso::new("iso-to-child", 32);
    iso.init();
    iso.put("sol", sol());
    iso.put_text("run.sh", "./sol spin\necho after\n");
    let meta_path = iso.scratch.join(&unique("bash.meta"));
    let out = iso
        .cmd(&[
            &format!("--meta={}", meta_path.display()),
            "-t",
            "0.4",
            "-w",
            "30",
            "-p60",
            "-r",
            "err.txt",
            "-o",
            "out.txt",
        ])
        .args(&["--run", "--", "/bin/bash", "run.sh"])
        .run();
    let meta = Meta::parse(&std::fs::read_to_string(&meta_path).unwrap_or_default());
    out.assert_code(1);
    assert_eq!(meta.must("status"), "TO", "{}\n{}", meta.1, out.describe());
    assert_eq!(meta.must("message"), "Time limit exceeded", "{}", meta.1);
    assert_eq!(meta.must("killed"), "1", "{}", meta.1);
    let time = meta.secs("time");
    assert!((0.4..0.45).contains(&time), "{}", meta.1);
    let err = iso.read("err.txt");
    assert!(!err.contains("CPU time limit exceeded"), "bash saw a SIGXCPU: {err:?}");
    assert_eq!(iso.read("out.txt"), "", "the script went on after its child");
    iso.cleanup();
}

/// Judge0's `isolate_job.rb`, replayed: `-s -b N -M WORKDIR/metadata.txt
/// -t -x -w -k -p60 [--cg --cg-timing --cg-mem | -m] -f -E ... -d /etc:noexec
/// --run -- /bin/bash run < stdin > stdout 2> stderr`, the box's `run`
/// script changed per case, the meta keys Judge0 reads checked for each:
/// OK, wrong output, exit 1, a signal, CPU time in the script's child and
/// in its exec'd main process, wall time, memory, the output limit, a fork
/// refused at the process limit, the environment, `/etc` without exec,
/// writes into the box (allowed: Judge0's box is the program's). Runs
/// here without cgroups, and with them in the cgroup VM
/// (`cgroup_judge0_replay`).
fn judge0_replay(cg: bool, id: u32) {
    let mut iso = Iso::new(if cg { "iso-j0-cg" } else { "iso-j0" }, id);
    iso.cg = cg;
    let dir = iso.init();
    iso.put("sol", sol());
    let mem: &[&str] = if cg { &["--cg-timing", "--cg-mem=65536"] } else { &["-m", "65536"] };
    let env =
        ["-E", "HOME=/tmp", "-E", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "-E", "LANG"];
    let case = |script: &str, stdin: &str, limits: &[&str]| {
        iso.put_text("run", script);
        let input = iso.scratch.join(&unique("stdin"));
        std::fs::write(&input, stdin).unwrap();
        let meta = dir.join("metadata.txt");
        let mut c =
            iso.cmd(&["-s", "-M", &meta.display().to_string(), "-t", "1", "-x", "0.5", "-w", "4", "-k", "128000"]);
        c.arg("-p60").args(mem).args(&["-f", "1024"]).args(&env).args(&["-d", "/etc:noexec"]).args(limits);
        c.args(&["--run", "--", "/bin/bash", "run"]);
        c.stdio(
            std::fs::File::open(&input).unwrap().into(),
            std::process::Stdio::piped(),
            std::process::Stdio::piped(),
        );
        let out = c.run();
        let m = Meta::parse(&std::fs::read_to_string(&meta).unwrap_or_default());
        (out, m)
    };
    // OK, and a wrong answer (Judge0 compares stdout itself): no status, exit code 0.
    for (input, want) in [("2 3\n", "5\n"), ("2 2\n", "4\n")] {
        let (out, m) = case("./sol sum\n", input, &[]);
        out.assert_code(0);
        assert_eq!(out.stdout, want, "{}", out.describe());
        assert_eq!((m.get("status"), m.must("exitcode")), (None, "0"), "{}", m.1);
        m.assert_stats();
    }
    let (out, m) = case("./sol exit 1\n", "", &[]);
    out.assert_code(1);
    assert_eq!((m.must("status"), m.must("exitcode")), ("RE", "1"), "{}", m.1);
    // A signal: the main process's, or the child's as bash reports it (128 + 11), as under isolate.
    let (out, m) = case("exec ./sol segv\n", "", &[]);
    out.assert_code(1);
    assert_eq!((m.must("status"), m.must("exitsig")), ("SG", "11"), "{}", m.1);
    let (out, m) = case("./sol segv\n", "", &[]);
    out.assert_code(1);
    assert_eq!((m.must("status"), m.must("exitcode")), ("RE", "139"), "{}", m.1);
    // CPU time: the script's child, then its main process (exec), both TO within the extra time.
    for script in ["./sol spin\necho after\n", "exec ./sol spin\n"] {
        let (out, m) = case(script, "", &[]);
        out.assert_code(1);
        assert_eq!(
            (m.must("status"), m.must("message"), m.must("killed")),
            ("TO", "Time limit exceeded", "1"),
            "{}",
            m.1
        );
        // Within 60 ms of -t on a host; in the QEMU VM PID 1 may wait on its vCPU meanwhile.
        let late = if h().vm { 0.6 } else { 0.06 };
        assert!((1.0..1.0 + late).contains(&m.secs("time")), "{script}: {}", m.1);
        assert!(!out.stdout.contains("after") && !out.stderr.contains("CPU time limit"), "{}", out.describe());
    }
    let (out, m) = case("./sol sleep 30\n", "", &[]);
    out.assert_code(1);
    assert_eq!((m.must("status"), m.must("message")), ("TO", "Time limit exceeded (wall clock)"), "{}", m.1);
    // Memory: --cg-mem OOM-kills the group; -m makes the allocation fail.
    let (out, m) = case("exec ./sol alloc 512\n", "", &[]);
    out.assert_code(1);
    if cg {
        assert_eq!((m.must("status"), m.must("exitsig"), m.must("cg-oom-killed")), ("SG", "9", "1"), "{}", m.1);
    } else {
        assert_eq!((m.must("status"), m.must("exitcode")), ("RE", "7"), "{}", m.1);
        assert!(out.stdout.starts_with("malloc failed"), "{}", out.describe());
    }
    // The output limit (-f 1024 KB): SIGXFSZ.
    let (out, m) = case("exec ./sol write 4096 >o\n", "", &[]);
    out.assert_code(1);
    assert_eq!((m.must("status"), m.must("exitsig")), ("SG", "25"), "{}", m.1);
    // One process (-p1 after -p60): the program's fork fails.
    let (out, m) = case("exec ./sol fork\n", "", &["-p1"]);
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "fork failed errno=11\n"), "{}\n{}", out.describe(), m.1);
    // The environment as set, /etc readable but not executable, the box writable.
    // (Time enough for a few processes under the VM's emulation: the case is not about time.)
    let slow: &[&str] = &["-t", "10", "-w", "30"];
    let (out, m) = case("./sol env | grep -E '^(HOME|PATH)=' | sort; head -c4 /etc/passwd; echo; cp /bin/true /tmp/t && /tmp/t && echo tmp-exec; echo x >written && cat written\n", "", slow);
    assert_eq!(out.code, Some(0), "{}\n{}", out.describe(), m.1);
    assert_eq!(
        out.stdout,
        "HOME=/tmp\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nroot\ntmp-exec\nx\n",
        "{}\n{}",
        out.describe(),
        m.1
    );
    let (out, m) =
        case("cp /bin/true /etc/t 2>/dev/null || echo no-write; /etc/passwd 2>/dev/null || echo no-exec\n", "", slow);
    assert_eq!(out.stdout, "no-write\nno-exec\n", "{}\n{}", out.describe(), m.1);
    iso.cleanup();
}

#[test]
fn judge0_replay_without_cgroups() {
    require!("judge0_replay_without_cgroups", userns_available());
    judge0_replay(false, 35);
}

#[test]
fn wall_time_limit_is_to_and_killed() {
    require!("wall_time_limit_is_to_and_killed", userns_available());
    let iso = Iso::new("iso-wall", 4);
    iso.init();
    let t = Instant::now();
    let (out, meta) = iso.run(&["--wall-time=0.5"], &["sleep", "20"]);
    out.assert_code(1);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(meta.must("status"), "TO");
    assert_eq!(meta.must("message"), "Time limit exceeded (wall clock)");
    assert_eq!(meta.must("killed"), "1");
    let wall = meta.secs("time-wall");
    assert!((0.5..5.0).contains(&wall), "{}", meta.1);
    assert!(meta.secs("time") < 0.5, "{}", meta.1);
    iso.cleanup();
}

#[test]
fn output_limit_is_sigxfsz() {
    require!("output_limit_is_sigxfsz", userns_available());
    let iso = Iso::new("iso-fsize", 5);
    iso.init();
    let (out, meta) = iso.run(&["-f", "64", "-o", "out.txt"], &["write", "1000"]);
    out.assert_code(1);
    assert_eq!(meta.must("status"), "SG");
    assert_eq!(meta.must("exitsig"), "25");
    assert_eq!(std::fs::metadata(iso.root().join("5/box/out.txt")).unwrap().len(), 64 * 1024);
    iso.cleanup();
}

/// isolate forbids io_uring (ENOSYS) and non-native ABIs; the program gets
/// an error and goes on, as there.
#[test]
fn forbidden_call_fails_and_the_program_goes_on() {
    require!("forbidden_call_fails_and_the_program_goes_on", userns_available());
    let iso = Iso::new("iso-sys", 6);
    iso.init();
    let (out, meta) = iso.run(&["-o", "out.txt"], &["uring"]);
    out.assert_code(0);
    assert_eq!(meta.must("exitcode"), "0");
    assert_eq!(iso.read("out.txt"), format!("io_uring_setup=-1 errno={}\n", libc::ENOSYS));
    // The i386 ABI: refused by default, allowed with --syscalls=0.
    let (out, _) = iso.run(&["-o", "out.txt"], &["i386"]);
    out.assert_code(0);
    let r: i64 = iso.read("out.txt").trim().strip_prefix("i386_getpid=").unwrap().parse().unwrap();
    if r == -(libc::ENOSYS as i64) && !Path::new("/proc/sys/abi").exists() {
        eprintln!("SKIP forbidden_call (i386 half): no i386 emulation");
        return;
    }
    assert!(r < 0, "the i386 ABI ran: {r}");
    let (out, _) = iso.run(&["-o", "out.txt", "--syscalls=0"], &["i386"]);
    out.assert_code(0);
    let r: i64 = iso.read("out.txt").trim().strip_prefix("i386_getpid=").unwrap().parse().unwrap();
    if r == -(libc::ENOSYS as i64) {
        eprintln!("SKIP forbidden_call (--syscalls=0 half): the kernel has no i386 emulation");
    } else {
        assert!(r > 0, "--syscalls=0 still refused the i386 ABI: {r}");
    }
    iso.cleanup();
}

#[test]
fn address_space_limit() {
    require!("address_space_limit", userns_available());
    let iso = Iso::new("iso-mem", 8);
    iso.init();
    let (out, meta) = iso.run(&["-m", "65536", "-o", "o"], &["alloc", "200"]);
    out.assert_code(1);
    assert_eq!(meta.must("exitcode"), "7");
    assert!(iso.read("o").starts_with("malloc failed"), "{}", iso.read("o"));
    let (out, _) = iso.run(&["-o", "o"], &["alloc", "200"]);
    out.assert_code(0);
    iso.cleanup();
}

#[test]
fn rlimit_options() {
    require!("rlimit_options", userns_available());
    let iso = Iso::new("iso-rl", 9);
    iso.init();
    let (out, _) = iso.run(&["-o", "o"], &["limits"]);
    out.assert_code(0);
    let default = iso.read("o");
    // isolate: 1024 open files, an unlimited stack (where the caller may have one).
    assert!(default.contains("nofile=1024\n"), "{default}");
    let (out, _) = iso.run(&["-o", "o", "-k", "2048", "-n", "64", "-m", "1048576", "-f", "10"], &["limits"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "stack=2097152\nnofile=64\nas=1073741824\nfsize=10240\n");
    let (out, _) = iso.run(&["-o", "o", "--open-files=0"], &["limits"]);
    out.assert_code(0);
    assert!(!iso.read("o").contains("nofile=1024\n"), "{}", iso.read("o"));
    iso.cleanup();
}

#[test]
fn processes_default_one() {
    require!("processes_default_one", userns_available());
    let iso = Iso::new("iso-p", 10);
    iso.init();
    let (out, _) = iso.run(&["-o", "o"], &["fork"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), format!("fork failed errno={}\n", libc::EAGAIN));
    for p in ["-p", "-p2", "--processes=2"] {
        let (out, _) = iso.run(&["-o", "o", p], &["fork"]);
        out.assert_code(0);
        assert_eq!(iso.read("o"), "fork ok\n", "{p}");
    }
    iso.cleanup();
}

#[test]
fn quota_is_a_per_file_limit_and_says_so() {
    require!("quota_is_a_per_file_limit_and_says_so", userns_available());
    let iso = Iso::new("iso-q", 11);
    let out = iso.cmd(&["-q", "16,100", "--init"]).run();
    out.assert_code(0);
    assert!(out.stderr.contains("each file a run writes is limited to 16 KB"), "{}", out.describe());
    assert!(out.stderr.contains("the number of inodes is not limited"), "{}", out.describe());
    let (out, meta) = iso.run(&["-o", "o"], &["write", "100"]);
    out.assert_code(1);
    assert_eq!(meta.must("exitsig"), "25");
    // -s keeps --init quiet.
    let out = iso.cmd(&["-s", "-q", "16,100", "--init"]).run();
    out.assert_code(0);
    assert_eq!(out.stderr, "");
    iso.cleanup();
}

#[test]
fn default_dirs_and_removing_them() {
    require!("default_dirs_and_removing_them", userns_available());
    let iso = Iso::new("iso-dirs", 12);
    iso.init();
    let (out, _) = iso.run(&["-o", "o"], &["ls", "/"]);
    out.assert_code(0);
    let mut want = vec!["bin", "box", "dev", "lib", "proc", "tmp", "usr"];
    if Path::new("/lib64").is_dir() {
        want.push("lib64");
    }
    let mut got = lines(&iso.read("o")).into_iter().map(str::to_string).collect::<Vec<_>>();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let (out, _) = iso.run(&["-o", "o", "-d", "/usr=", "--dir=bin="], &["ls", "/"]);
    out.assert_code(0);
    assert!(!iso.read("o").contains("usr") && !iso.read("o").contains("bin"), "{}", iso.read("o"));
    // -D: only what the rules say.
    let (out, _) = iso.run(&["-o", "o", "-D", "-d", "box=./box:rw"], &["ls", "/"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "box\n");
    let (out, _) = iso.run(&["-o", "o"], &["ls", "/dev"]);
    out.assert_code(0);
    assert!(iso.read("o").contains("null") && iso.read("o").contains("shm"), "{}", iso.read("o"));
    iso.cleanup();
}

#[test]
fn dir_rule_options() {
    require!("dir_rule_options", userns_available());
    let iso = Iso::new("iso-opts", 13);
    iso.init();
    let host = iso.scratch.mkdir("host");
    let h = host.display().to_string();
    // Read-only by default.
    let (out, _) = iso.run(&["-o", "o", &format!("-d/data={h}")], &["touch", "/data/f"]);
    out.assert_code(1);
    assert_eq!(iso.read("o"), format!("open errno={}\n", libc::EROFS));
    // rw: the write lands on the host, where others may write (the program is others there, as under isolate).
    let (out, _) = iso.run(&["-o", "o", &format!("-d/data={h}:rw")], &["touch", "/data/f"]);
    out.assert_code(1);
    assert_eq!(iso.read("o"), format!("open errno={}\n", libc::EROFS));
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (out, _) = iso.run(&["-o", "o", &format!("-d/data={h}:rw")], &["touch", "/data/f"]);
    out.assert_code(0);
    assert!(host.join("f").is_file());
    // noexec.
    std::fs::copy(sol(), host.join("sol2")).unwrap();
    let (out, _) = iso.run(&["-o", "o", &format!("-d/data={h}:noexec")], &["exec", "/data/sol2", "exit", "0"]);
    out.assert_code(1);
    assert_eq!(iso.read("o"), format!("execv errno={}\n", libc::EACCES));
    let (out, _) = iso.run(&["-o", "o", &format!("-d/data={h}:norec")], &["exec", "/data/sol2", "exit", "0"]);
    out.assert_code(0);
    // maybe: a missing directory is skipped; without it, an error (XX).
    let (out, meta) = iso.run(&["-o", "o", "-d", "/nope=/does/not/exist:maybe"], &["ls", "/"]);
    out.assert_code(0);
    assert!(!iso.read("o").contains("nope"));
    assert_eq!(meta.must("exitcode"), "0");
    let (out, meta) = iso.run(&["-d", "/nope=/does/not/exist"], &["ls", "/"]);
    out.assert_code(2);
    assert_eq!(meta.must("status"), "XX");
    assert!(meta.must("message").contains("/does/not/exist"), "{}", meta.1);
    // fs: a procfs and a tmpfs where asked.
    let (out, _) =
        iso.run(&["-o", "o", "-d", "/myproc=proc:fs", "-d", "/scratch=tmpfs:fs:rw"], &["ls", "/myproc/self"]);
    out.assert_code(0);
    assert!(lines(&iso.read("o")).contains(&"status"), "{}", iso.read("o"));
    let (out, _) = iso.run(&["-o", "o", "-d", "/scratch=tmpfs:fs:rw"], &["touch", "/scratch/x"]);
    out.assert_code(0);
    // dev (with rw): devices usable.
    let (out, _) = iso.run(&["-o", "o", "-d", "/hostdev=/dev:dev:rw"], &["touch", "/hostdev/null"]);
    out.assert_code(0);
    let out = iso.cmd(&["-d", "/hostdev=/dev:dev", "--run", "--", "./sol"]).run();
    out.assert_code(2);
    assert!(out.stderr.contains("Invalid directory rule '/hostdev=/dev:dev'"), "{}", out.describe());
    // tmp: a directory of the box's own, kept between runs until --init/--cleanup.
    let (out, _) = iso.run(&["-o", "o", "-d", "/work:tmp"], &["touch", "/work/kept"]);
    out.assert_code(0);
    let (out, _) = iso.run(&["-o", "o", "-d", "/work:tmp"], &["ls", "/work"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "kept\n");
    // Syntax errors are usage errors naming the rule.
    let out = iso.cmd(&["-d", "/x:bogus", "--run", "--", "./sol"]).run();
    out.assert_code(2);
    assert!(out.stderr.starts_with("Invalid directory rule '/x:bogus': Unknown option 'bogus'"), "{}", out.describe());
    iso.cleanup();
}

#[test]
fn environment_rules() {
    require!("environment_rules", userns_available());
    let iso = Iso::new("iso-env", 14);
    iso.init();
    let run_env = |args: &[&str], env: &[(&str, &str)]| {
        iso.put("sol", sol());
        let mut c = iso.cmd(&["-o", "o"]);
        c.args(args).args(&["--run", "--", "./sol", "env"]);
        for (k, v) in env {
            c.env(k, v);
        }
        c.run().assert_code(0);
        let mut v: Vec<String> = lines(&iso.read("o")).iter().map(|s| s.to_string()).collect();
        v.retain(|l| !l.starts_with("PATH="));
        v.sort();
        v
    };
    assert_eq!(run_env(&[], &[("FOO", "1")]), ["LIBC_FATAL_STDERR_=1"]);
    assert_eq!(
        run_env(&["-E", "FOO", "-E", "BAR=2", "--env=MISSING"], &[("FOO", "1")]),
        ["BAR=2", "FOO=1", "LIBC_FATAL_STDERR_=1"]
    );
    let full = run_env(&["-e", "-E", "FOO="], &[("FOO", "1"), ("KEEP", "k")]);
    assert!(full.contains(&"KEEP=k".to_string()) && !full.iter().any(|l| l.starts_with("FOO=")), "{full:?}");
    iso.cleanup();
}

#[test]
fn chdir_and_stdio() {
    require!("chdir_and_stdio", userns_available());
    let iso = Iso::new("iso-io", 15);
    let dir = iso.init();
    std::fs::create_dir(dir.join("box/sub")).unwrap();
    chown_to_user(&dir.join("box/sub"));
    iso.put("sol", sol());
    // The program runs from the new directory (isolate does no PATH lookup
    // of its own: ./sol would be /box/sub/sol); stdio stays relative to /box.
    iso.cmd(&["-c", "sub", "-o", "o", "--run", "--", "/box/sol", "pwd"]).run().assert_code(0);
    assert_eq!(iso.read("o"), "/box/sub\n");
    iso.cmd(&["--chdir=/tmp", "-o", "o", "--run", "--", "/box/sol", "pwd"]).run().assert_code(0);
    assert_eq!(iso.read("o"), "/tmp\n");
    iso.put_text("in", "hello\n");
    let (out, _) = iso.run(&["-i", "in", "-o", "o"], &["cat"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "hello\n");
    let (out, _) = iso.run(&["-o", "o", "-r", "e"], &["streams"]);
    out.assert_code(0);
    assert_eq!((iso.read("o").as_str(), iso.read("e").as_str()), ("to-stdout\n", "to-stderr\n"));
    let (out, _) = iso.run(&["-o", "o", "--stderr-to-stdout"], &["streams"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "to-stdout\nto-stderr\n");
    // Inherited streams without -i/-o/-r.
    let (out, _) = iso.run(&[], &["streams"]);
    out.assert_code(0);
    assert_eq!(out.stdout, "to-stdout\n");
    assert!(out.stderr.starts_with("to-stderr\nOK ("), "{}", out.describe());
    // /dev/null through the default /dev rule.
    let (out, _) = iso.run(&["-i", "/dev/null", "-o", "o"], &["cat"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "");
    // A missing input: isolate's error, status XX.
    let (out, meta) = iso.run(&["-i", "missing"], &["cat"]);
    out.assert_code(2);
    assert_eq!(meta.must("status"), "XX");
    assert_eq!(meta.must("message"), "open(\"missing\"): No such file or directory");
    // A read-only directory cannot take an output.
    let (out, meta) = iso.run(&["-o", "/usr/o"], &["cat"]);
    out.assert_code(2);
    assert_eq!(meta.must("message"), "open(\"/usr/o\"): Read-only file system");
    iso.cleanup();
}

/// A link the program leaves in the box never leads a later run's stdio or
/// the caller out of the box; without --special-files it is removed.
#[test]
fn links_the_program_made_are_not_followed() {
    require!("links_the_program_made_are_not_followed", userns_available());
    let iso = Iso::new("iso-links", 16);
    let dir = iso.init();
    let victim = iso.scratch.write("victim", b"precious");
    let v = victim.display().to_string();
    let (out, _) = iso.run(&[], &["special", &v, "out", "fifo"]);
    out.assert_code(0);
    assert!(!dir.join("box/out").exists() && std::fs::symlink_metadata(dir.join("box/out")).is_err());
    assert!(std::fs::symlink_metadata(dir.join("box/fifo")).is_err());
    let (out, _) = iso.run(&["--special-files"], &["special", &v, "out", "fifo"]);
    out.assert_code(0);
    assert!(std::fs::symlink_metadata(dir.join("box/out")).unwrap().file_type().is_symlink());
    // The link resolves inside the box: the host file is untouched.
    let (out, meta) = iso.run(&["--special-files", "-o", "out"], &["streams"]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(out.code == Some(2) || out.code == Some(0), "{}", out.describe());
    if out.code == Some(2) {
        assert!(meta.must("message").starts_with("open(\"out\")"), "{}", meta.1);
    }
    let (out, meta) = iso.run(&["--special-files", "-i", "fifo"], &["cat"]);
    out.assert_code(2);
    assert!(meta.must("message").contains("FIFO"), "{}", meta.1);
    // A meta file that is a link is not written through.
    let link = iso.scratch.join("meta-link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = iso.cmd(&[&format!("--meta={}", link.display()), "--run", "--", "./sol", "exit", "0"]).run();
    out.assert_code(2);
    assert!(out.stderr.contains("Failed to open metafile"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    iso.cleanup();
}

/// `max-rss` is the program's: a program that touches 24 MB reports about
/// that, and one that touches nothing reports no more than the floor of
/// what is resident where it came from (the one-shot supervisor sheds its
/// code first: ~1.5 MB in a release build, more for a debug one's bigger
/// text; before, its whole resident set).
#[test]
fn max_rss_is_the_programs() {
    require!("max_rss_is_the_programs", userns_available());
    let iso = Iso::new("iso-rss", 34);
    iso.init();
    let (out, small) = iso.run(&[], &["alloc", "0"]);
    out.assert_code(0);
    let (out, big) = iso.run(&[], &["alloc", "24"]);
    out.assert_code(0);
    let kb = |m: &Meta| m.must("max-rss").parse::<u64>().unwrap();
    let floor = if cfg!(debug_assertions) { 8 << 10 } else { 2 << 10 };
    assert!(kb(&small) < floor, "{}", small.1);
    assert!((24 << 10..(24 << 10) + floor).contains(&kb(&big)), "{}", big.1);
    iso.cleanup();
}

/// `-M /dev/null` (a judge that wants no meta file) is written as isolate's
/// fopen would; a FIFO at the meta file's place is refused, not waited on.
#[test]
fn meta_to_a_device_but_not_a_fifo() {
    require!("meta_to_a_device_but_not_a_fifo", userns_available());
    let iso = Iso::new("iso-meta-dev", 33);
    iso.init();
    iso.put("sol", sol());
    let out = iso.cmd(&["-M", "/dev/null", "--run", "--", "./sol", "exit", "0"]).run();
    out.assert_code(0);
    assert!(out.stderr.starts_with("OK ("), "{}", out.describe());
    let fifo = iso.scratch.join("meta-fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    chown_to_user(&fifo);
    let t = Instant::now();
    let out = iso.cmd(&[&format!("--meta={}", fifo.display()), "--run", "--", "./sol", "exit", "0"]).run();
    out.assert_code(2);
    assert!(out.stderr.contains("Failed to open metafile"), "{}", out.describe());
    assert!(t.elapsed() < Duration::from_secs(10));
    iso.cleanup();
}

/// Interface names in a `/proc/net/dev` text.
fn interfaces(dev: &str) -> Vec<String> {
    let mut v: Vec<String> =
        dev.lines().skip(2).filter_map(|l| l.split_once(':')).map(|(n, _)| n.trim().to_string()).collect();
    v.sort();
    v
}

#[test]
fn share_net() {
    require!("share_net", userns_available());
    let iso = Iso::new("iso-net", 17);
    iso.init();
    let (out, _) = iso.run(&["-o", "o"], &["file", "/proc/self/net/dev"]);
    out.assert_code(0);
    assert_eq!(interfaces(&iso.read("o")), ["lo"]);
    let host = interfaces(&std::fs::read_to_string("/proc/self/net/dev").unwrap());
    let (out, _) = iso.run(&["-o", "o", "--share-net"], &["file", "/proc/self/net/dev"]);
    out.assert_code(0);
    assert_eq!(interfaces(&iso.read("o")), host);
    iso.cleanup();
}

/// Puts the test's descriptors `(source, number)` at those numbers in the
/// capsule process it starts (the caller of `capsule isolate`).
fn at_numbers(c: &mut Cmd, fds: Vec<(i32, i32)>) {
    c.pre_exec(move || {
        let mut high = [-1; 16];
        // SAFETY: fcntl, dup2 and close between fork and exec (async-signal-safe); dup2 clears FD_CLOEXEC. The
        // sources go above every number first, so that none is overwritten before it is placed.
        unsafe {
            for (k, (src, _)) in fds.iter().enumerate() {
                high[k] = libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, 500);
                if high[k] < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (k, (_, to)) in fds.iter().enumerate() {
                if libc::dup2(high[k], *to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for h in &high[..fds.len()] {
                libc::close(*h);
            }
        }
        Ok(())
    });
}

fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: fds points to two ints; on success both are new descriptors this function owns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }, 0);
    // SAFETY: just created, owned by nothing else.
    unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
}

/// `--inherit-fds`: the caller's descriptors above 2 reach the program at
/// their numbers, a pipe to read at 3 and one to write at 5, and 4 to 10
/// taken, numbers at which capsule's supervisor, PID 1 and the tracee have
/// descriptors of their own (the run still ends as it should: PID 1 got
/// its own back); without the option the program has only 0, 1 and 2.
#[test]
fn inherit_fds_at_their_numbers() {
    require!("inherit_fds_at_their_numbers", userns_available());
    inherit_fds_case(Iso::new("iso-fds", 27));
}

fn inherit_fds_case(iso: Iso) {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    iso.init();
    iso.put("sol", sol());
    let run = |inherit: bool| {
        let (to_box, mut to_box_w) = pipe();
        let (mut from_box, from_box_w) = pipe();
        to_box_w.write_all(b"to-box\n").unwrap();
        drop(to_box_w);
        let null = std::fs::File::open("/dev/null").unwrap();
        let meta = iso.scratch.join(&unique("fds.meta"));
        let mut c = iso.cmd(&[&format!("--meta={}", meta.display()), "-o", "o", "-w", "20"]);
        if inherit {
            c.arg("--inherit-fds");
        }
        c.args(&["--run", "--", "./sol", "fds", "3", "r", "5", "w"]);
        let mut fds = vec![(to_box.as_raw_fd(), 3), (from_box_w.as_raw_fd(), 5)];
        fds.extend([4, 6, 7, 8, 9, 10].map(|n| (null.as_raw_fd(), n)));
        at_numbers(&mut c, fds);
        let out = c.run();
        let mut got = String::new();
        let _ = from_box.read_to_string(&mut got);
        (out, Meta::parse(&std::fs::read_to_string(&meta).unwrap_or_default()), iso.read("o"), got)
    };
    let (out, meta, printed, got) = run(true);
    out.assert_code(0);
    assert_eq!(meta.must("exitcode"), "0", "{}", meta.1);
    // Descriptors the test's own caller left open come along above 10: they are capsule's caller's too.
    let listed: Vec<i32> = printed.lines().filter_map(|l| l.strip_prefix("fd ")?.parse().ok()).collect();
    assert_eq!(listed.iter().filter(|&&n| n <= 10).copied().collect::<Vec<_>>(), (3..=10).collect::<Vec<_>>());
    assert!(printed.ends_with("read 3: 7 to-box\nwrite 5: 9\n"), "{printed}\n{}", out.describe());
    assert_eq!(got, "from-box\n");
    let (out, meta, printed, got) = run(false);
    out.assert_code(0);
    assert_eq!(meta.must("exitcode"), "0", "{}", meta.1);
    assert_eq!(printed, "read 3: -1 \nwrite 5: -1\n", "only 0-2 without --inherit-fds: {}", out.describe());
    assert_eq!(got, "");
    iso.cleanup();
}

/// SIGINT to `capsule isolate --run`'s process group (a terminal's ^C, which
/// reaches capsule's supervisor too) or SIGTERM to the process: the box's
/// processes are killed, the meta file says so as isolate's does
/// (`exitsig`, `status:SG`, `message:Interrupted`, `killed:1` and the
/// figures), exit status 1, and nothing of the run is left.
#[test]
fn interrupted_run_is_killed_and_reported() {
    require!("interrupted_run_is_killed_and_reported", userns_available());
    interrupt_case(&Iso::new("iso-int", 28));
}

fn interrupt_case(base: &Iso) {
    for (sig, group, id) in [(libc::SIGINT, true, 28), (libc::SIGTERM, false, 29)] {
        let iso = base.other(id, base.cg);
        iso.init();
        iso.put("sol", sol());
        let marker = unique("isolate-interrupted");
        let meta = iso.scratch.join(&unique("int.meta"));
        let mut c = iso.cmd(&[&format!("--meta={}", meta.display()), "--run", "--", "./sol", "sleep", "100", &marker]);
        // A process group of its own, signalled as a whole as a terminal's ^C does.
        c.pre_exec(|| {
            // SAFETY: setpgid between fork and exec (async-signal-safe).
            if unsafe { libc::setpgid(0, 0) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
        let running = c.spawn();
        // The program itself runs (capsule's own processes carry the marker from the start).
        let t = Instant::now();
        while !procs_with_marker(&marker).iter().any(|(_, cmd)| cmd.starts_with("./sol sleep")) {
            assert!(t.elapsed() < Duration::from_secs(30), "the program never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: a signal to the capsule process this test started, or to its process group.
        assert_eq!(unsafe { libc::kill(if group { -running.pid() } else { running.pid() }, sig) }, 0);
        let t = Instant::now();
        let out = running.wait();
        out.assert_code(1);
        assert!(t.elapsed() < Duration::from_secs(10), "{}", out.describe());
        assert!(out.stderr.contains("Interrupted"), "{}", out.describe());
        let text = std::fs::read_to_string(&meta).unwrap();
        assert!(text.starts_with(&format!("exitsig:{sig}\nstatus:SG\nmessage:Interrupted\nkilled:1\n")), "{text}");
        let m = Meta::parse(&text);
        m.assert_stats();
        if iso.cg {
            m.must("cg-mem");
        }
        assert!(m.secs("time-wall") < 60.0, "{text}");
        if let Err(left) = wait_marker_gone(&marker, t, Duration::from_secs(10)) {
            kill_marker(&marker);
            panic!("processes of the interrupted run are left: {left:?}");
        }
        iso.cleanup();
    }
}

/// isolate sets RLIMIT_MEMLOCK to 0 in the box: `mlock` fails.
#[test]
fn memlock_is_zero() {
    require!("memlock_is_zero", userns_available());
    let iso = Iso::new("iso-memlock", 30);
    iso.init();
    let (out, _) = iso.run(&["-o", "o"], &["memlock"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), format!("memlock=0/0\nmlock=-1 errno={}\n", libc::EPERM));
    iso.cleanup();
}

#[test]
fn boxes_lock_wait_and_are_independent() {
    require!("boxes_lock_wait_and_are_independent", userns_available());
    let a = Iso::new("iso-a", 20);
    let b = a.other(21, false);
    a.init();
    b.init();
    a.put("sol", sol());
    b.put("sol", sol());
    // Two boxes at once: both sleep 1 s, together well under 2 s each.
    let t = Instant::now();
    let ra = a.cmd(&["-o", "o", "--run", "--", "./sol", "sleep", "1"]).spawn();
    let rb = b.cmd(&["-o", "o", "--run", "--", "./sol", "sleep", "1"]).spawn();
    // The same box at once: busy, exit 2.
    std::thread::sleep(Duration::from_millis(200));
    let busy = a.cmd(&["--run", "--", "./sol", "exit", "0"]).run();
    busy.assert_code(2);
    assert_eq!(busy.stderr.trim(), "This box is currently in use by another process");
    let waited = a.cmd(&["--wait", "-s", "--run", "--", "./sol", "exit", "0"]).run();
    waited.assert_code(0);
    // Each box's run took its own second: not one after the other.
    for r in [ra.wait(), rb.wait()] {
        r.assert_code(0);
        assert!(r.elapsed < Duration::from_millis(1900), "{}", r.describe());
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    a.put_text("mine", "a");
    assert!(!b.root().join("21/box/mine").exists());
    // --init again resets the box.
    a.init();
    assert!(!a.root().join("20/box/mine").exists());
    a.cleanup();
    // After cleanup: no box, isolate's message, status XX.
    let out = a.cmd(&["-M", "-", "--run", "--", "./sol", "exit", "0"]).run();
    out.assert_code(2);
    let meta = Meta::parse(&out.stdout);
    assert_eq!(meta.must("status"), "XX");
    assert_eq!(meta.must("message"), "Box not found, did you run `isolate --init'?");
    // Cleanup twice is fine.
    a.cleanup();
    b.cleanup();
}

#[test]
fn exec_failure_is_exit_127() {
    require!("exec_failure_is_exit_127", userns_available());
    let iso = Iso::new("iso-exec", 22);
    iso.init();
    let out = iso.cmd(&["-M", "-", "--run", "--", "./missing"]).run();
    out.assert_code(1);
    let meta = Meta::parse(&out.stdout);
    assert_eq!(meta.must("exitcode"), "127");
    assert_eq!(meta.must("status"), "RE");
    assert!(out.stderr.starts_with("execve(\"./missing\"): No such file or directory\n"), "{}", out.describe());
    iso.cleanup();
}

#[test]
fn silent_verbose_version_help() {
    require!("silent_verbose_version_help", userns_available());
    let iso = Iso::new("iso-sv", 23);
    let out = iso.cmd(&["-v", "--init"]).run();
    out.assert_code(0);
    assert!(out.stderr.contains("Preparing sandbox"), "{}", out.describe());
    let (out, _) = iso.run(&["-s"], &["exit", "3"]);
    out.assert_code(1);
    assert_eq!(out.stderr, "");
    let (out, _) = iso.run(&["-v"], &["exit", "0"]);
    out.assert_code(0);
    assert!(out.stderr.contains("Binding /usr on usr"), "{}", out.describe());
    let out = iso.cmd(&["--version"]).run();
    out.assert_code(0);
    assert!(out.stdout.starts_with("The process isolator 2."), "{}", out.describe());
    let out = iso.cmd(&["--help"]).run();
    out.assert_code(0);
    assert!(out.stdout.contains("--box-id") && out.stdout.contains("--cg-mem"), "{}", out.describe());
    let out = iso.cmd(&["--check-config"]).run();
    out.assert_code(0);
    let out = iso.cmd(&["-v", "--cleanup"]).run();
    out.assert_code(0);
    assert!(out.stderr.contains("Deleting sandbox"), "{}", out.describe());
    let out = iso.cmd(&["-v", "--cleanup"]).run();
    assert!(out.stderr.contains("Nothing to do -- box did not exist"), "{}", out.describe());
}

#[test]
fn bad_and_refused_options_exit_2_naming_them() {
    require!("bad_and_refused_options_exit_2_naming_them", userns_available());
    let iso = Iso::new("iso-bad", 24);
    let cases: [(&[&str], &str); 12] = [
        (&["--no-cg-timing", "--init"], "Options related to control groups require --cg to be set."),
        (&["--bogus", "--init"], "isolate: unrecognized option '--bogus'"),
        (&["-Z", "--init"], "isolate: invalid option -- 'Z'"),
        (&["--tty-hack", "--init"], "isolate: option '--tty-hack' is not supported by capsule isolate"),
        (&["--as-uid=5", "--init"], "isolate: option '--as-uid' is not supported by capsule isolate"),
        (&["--as-gid=5", "--init"], "isolate: option '--as-gid' is not supported by capsule isolate"),
        (&["--core=10", "--init"], "isolate: option '--core=10' is not supported by capsule isolate"),
        (&["--time"], "isolate: option '--time' requires an argument"),
        (&[], "Please specify an isolate command (e.g. --init, --run)."),
        (&["--init", "--cleanup"], "Only one command is allowed."),
        (&["--cg-mem=1000", "--run", "x"], "Options related to control groups require --cg to be set."),
        (&["--run"], "--run mode requires a command to run"),
    ];
    for (args, msg) in cases {
        let out = iso.cmd(args).run();
        out.assert_code(2);
        assert!(out.stderr.starts_with(msg), "{args:?}: {}", out.describe());
        assert!(out.stderr.contains("Try 'isolate --help' for more information."), "{}", out.describe());
    }
    let out = iso.cmd(&["--core=0", "--init"]).run();
    out.assert_code(0);
    let out = iso.cmd(&["--cg-timing", "--run", "x"]).run();
    out.assert_code(2);
    assert!(out.stderr.starts_with("Options related to control groups require --cg"), "{}", out.describe());
    iso.cleanup();
}

/// Judge0's `isolate_job.rb` without cgroups: -s, short options with
/// separate values, the meta file in the box, `-p60`, `-m`, `-E`,
/// `-d /etc:noexec`, a bash script as the program.
#[test]
fn judge0_cycle() {
    require!("judge0_cycle", userns_available());
    let iso = Iso::new("iso-judge0", 2147483646);
    let out = iso.cmd(&["--init"]).run();
    out.assert_code(0);
    let workdir = out.stdout.trim().to_string();
    let boxdir = format!("{workdir}/box/");
    iso.put_text("run", "read a b\necho $((a + b)); echo \"home=$HOME\" >&2; ls /etc/passwd\n");
    iso.put_text("stdin.txt", "5 6\n");
    let meta = format!("{boxdir}meta.txt");
    let args = [
        "-s",
        "-i",
        "stdin.txt",
        "-o",
        "stdout.txt",
        "-r",
        "stderr.txt",
        "-M",
        &meta,
        "-t",
        "5",
        "-x",
        "1",
        "-w",
        "10",
        "-k",
        "64000",
        "-p60",
        "-m",
        "512000",
        "-f",
        "1024",
        "-E",
        &format!("HOME={workdir}"),
        "-d",
        "/etc:noexec",
        "--run",
        "--",
        "/bin/bash",
        "run",
    ];
    let out = iso.cmd(&args).run();
    out.assert_code(0);
    assert_eq!(out.stderr, "", "-s: no status line");
    let meta = Meta::parse(&std::fs::read_to_string(&meta).unwrap());
    meta.assert_stats();
    assert_eq!(meta.get("status"), None, "{}", meta.1);
    assert_eq!(iso.read("stdout.txt"), "11\n/etc/passwd\n");
    assert_eq!(iso.read("stderr.txt"), format!("home={workdir}\n"));
    iso.cmd(&["--cleanup"]).run().assert_code(0);
}

/// A binary named `isolate` (a link to `capsule`) is `capsule isolate`.
#[test]
fn invoked_as_isolate() {
    require!("invoked_as_isolate", userns_available());
    let mut iso = Iso::new("iso-link", 25);
    let link = iso.scratch.join("isolate");
    std::os::unix::fs::symlink(&h().capsule, &link).unwrap();
    iso.bin = Some(link);
    iso.init();
    iso.put_text("input.txt", "1 2\n");
    let (out, meta) = iso.run(&["-i", "input.txt", "-o", "output.txt"], &["sum"]);
    out.assert_code(0);
    assert_eq!(meta.must("exitcode"), "0");
    assert_eq!(iso.read("output.txt"), "3\n");
    // `run` as the first argument is isolate's (an argument), never
    // capsule's subcommand for the caller's agent, even with one running.
    let tag = unique("iso-agent");
    // (The same CAPSULE_* variables: the agent's identity.)
    let root = iso.root().display().to_string();
    let agent = |c: &mut Cmd| {
        c.env("CAPSULE_AGENT", "on").env("CAPSULE_AGENT_IDLE", "3").env("CAPSULE_TEST_TAG", &tag).env(ROOT_ENV, &root);
    };
    let mut start = capsule(&["run", "-q", "--", "/bin/true"]);
    agent(&mut start);
    start.run().assert_code(0);
    let mut c = capsule(&["run", "/bin/true"]);
    c.binary(iso.bin.as_ref().unwrap());
    agent(&mut c);
    let out = c.run();
    out.assert_code(2);
    assert!(out.stderr.starts_with("Please specify an isolate command"), "{}", out.describe());
    iso.cleanup();
}

/// Without delegated cgroups, `--cg` fails as isolate does where it has
/// none; with them it works (both ways checked by where this runs).
#[test]
fn cg_needs_cgroups() {
    require!("cg_needs_cgroups", userns_available());
    let mut iso = Iso::new("iso-cgneed", 26);
    iso.cg = true;
    let out = iso.cmd(&["--init"]).run();
    if cgroups_available().is_ok() {
        out.assert_code(0);
        iso.cleanup();
    } else {
        out.assert_code(2);
        assert!(out.stderr.starts_with("Control groups are not available"), "{}", out.describe());
        // One line that says what to do.
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.describe());
        assert!(out.stderr.contains("systemd-run --user --scope -p Delegate=yes"), "{}", out.describe());
        let check = capsule(&["check"]).run();
        assert!(check.stdout.contains("`capsule isolate --cg` fails"), "{}", check.describe());
    }
}

/// A box made with --cg is used with --cg only, as in isolate.
#[test]
fn cgroup_cms_cycle() {
    require_cgroups!("cgroup_cms_cycle");
    let mut iso = Iso::new("iso-cg", 30);
    iso.cg = true;
    iso.init();
    iso.put_text("input.txt", "20 22\n");
    let (out, meta) = iso.run(
        &["--processes", "--cg-mem=262144", "-t", "5", "-w", "10", "-i", "input.txt", "-o", "output.txt"],
        &["sum"],
    );
    out.assert_code(0);
    assert_eq!(iso.read("output.txt"), "42\n");
    meta.assert_stats();
    let cg_mem: u64 = meta.must("cg-mem").parse().unwrap();
    assert!(cg_mem > 0 && cg_mem < 262144, "{}", meta.1);
    assert_eq!(meta.get("cg-oom-killed"), None);
    // CMS's own layout: its home directory bound over /box, every path
    // given inside the sandbox; then its deleting cleanup (a chmod run in
    // the box, then --cleanup).
    let home = iso.scratch.mkdir("home");
    // CMS's allow_writing_all, as its sandboxes start.
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::copy(sol(), home.join("solution")).unwrap();
    chown_to_user(&home.join("solution"));
    std::fs::write(home.join("input.txt"), "1 2\n").unwrap();
    chown_to_user(&home.join("input.txt"));
    let meta_path = iso.scratch.join("run.meta.1");
    let h = home.display().to_string();
    let out = iso
        .cmd(&[
            &format!("--dir=/box={h}:rw"),
            "--fsize=1024",
            "--stdin=/box/input.txt",
            "--stack=65536",
            "--cg-mem=262144",
            "--stdout=/box/output.txt",
            "--processes",
            "--stderr=/box/err.txt",
            "--time=2",
            "--wall-time=10",
            "--extra-time=0.5",
            &format!("--meta={}", meta_path.display()),
            "--run",
            "--",
            "./solution",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(home.join("output.txt")).unwrap(), "3\n");
    let meta = Meta::parse(&std::fs::read_to_string(&meta_path).unwrap());
    meta.assert_stats();
    assert_eq!(meta.must("exitcode"), "0");
    meta.must("cg-mem");
    // chmod fails on the files others may not write (as under isolate on CMS's own): CMS ignores its status.
    let out = iso.cmd(&[&format!("--dir=/box={h}:rw"), "--run", "--", "/bin/chmod", "777", "-R", "/box"]).run();
    out.assert_code(1);
    assert_eq!(std::fs::metadata(&home).unwrap().permissions().mode() & 0o777, 0o777);
    // Without --cg: another control group mode, refused.
    let plain = iso.other(30, false);
    let out = plain.cmd(&["--run", "--", "./sol", "exit", "0"]).run();
    out.assert_code(2);
    assert_eq!(out.stderr.trim(), "This box was initialized with an incompatible control group mode");
    iso.cleanup();
}

#[test]
fn cgroup_judge0_replay() {
    require_cgroups!("cgroup_judge0_replay");
    judge0_replay(true, 36);
}

#[test]
fn cgroup_memory_limit() {
    require_cgroups!("cgroup_memory_limit");
    let mut iso = Iso::new("iso-cgmem", 31);
    iso.cg = true;
    iso.init();
    let (out, meta) = iso.run(&["--cg-mem=65536", "-o", "o"], &["alloc", "512"]);
    out.assert_code(1);
    assert_eq!(meta.must("cg-oom-killed"), "1", "{}", meta.1);
    assert_eq!(meta.must("status"), "SG", "{}", meta.1);
    assert_eq!(meta.must("exitsig"), "9", "{}", meta.1);
    let cg_mem: u64 = meta.must("cg-mem").parse().unwrap();
    assert!((32768..=65536 + 1024).contains(&cg_mem), "{}", meta.1);
    iso.cleanup();
}

/// With --cg, -t counts the whole group's CPU time and kills at once (not
/// in whole seconds), -x lets it run on to the extra time; --cg-timing and
/// --no-cg-timing are accepted.
#[test]
fn cgroup_time_and_extra_time() {
    require_cgroups!("cgroup_time_and_extra_time");
    let mut iso = Iso::new("iso-cgtime", 32);
    iso.cg = true;
    iso.init();
    let (out, meta) = iso.run(&["--cg-timing", "-t", "0.2", "-w", "20"], &["spin"]);
    out.assert_code(1);
    assert_eq!(meta.must("status"), "TO");
    assert_eq!(meta.must("killed"), "1");
    let t = meta.secs("time");
    assert!((0.2..0.9).contains(&t), "{}", meta.1);
    let (out, meta) = iso.run(&["-t", "0.2", "-x", "1", "-w", "20"], &["spin"]);
    out.assert_code(1);
    assert_eq!(meta.must("status"), "TO");
    assert!(meta.secs("time") >= 1.0, "{}", meta.1);
    // Judge0's mixed mode: --no-cg-timing, a child spinning under bash is TO all the same.
    iso.put_text("run.sh", "./sol spin\n");
    let meta_path = iso.scratch.join(&unique("nocg.meta"));
    let out = iso
        .cmd(&[&format!("--meta={}", meta_path.display()), "--no-cg-timing", "-t", "0.3", "-w", "20", "-p60"])
        .args(&["--run", "--", "/bin/bash", "run.sh"])
        .run();
    let meta = Meta::parse(&std::fs::read_to_string(&meta_path).unwrap_or_default());
    out.assert_code(1);
    assert_eq!(meta.must("status"), "TO", "{}\n{}", meta.1, out.describe());
    assert!((0.3..0.9).contains(&meta.secs("time")), "{}", meta.1);
    iso.cleanup();
}

#[test]
fn cgroup_print_cg_root() {
    require_cgroups!("cgroup_print_cg_root");
    let iso = Iso::new("iso-cgroot", 33);
    let out = iso.cmd(&["--print-cg-root"]).run();
    out.assert_code(0);
    assert!(out.stdout.starts_with("/sys/fs/cgroup/"), "{}", out.describe());
}

/// `--inherit-fds` and an interrupted run with `--cg`: the run's cgroup
/// descriptors are among those the tracee moves out of the way (and reads
/// `cpu.stat` through), PID 1 reads them after it has put them back.
#[test]
fn cgroup_inherit_fds_and_interrupt() {
    require_cgroups!("cgroup_inherit_fds_and_interrupt");
    let mut iso = Iso::new("iso-cg-fds", 31);
    iso.cg = true;
    interrupt_case(&iso);
    inherit_fds_case(iso);
}

// Hostile boxes: what a program leaves in its box, or makes of it

/// `--processes --run -- /bin/sh -c SCRIPT` (a shell needs more than one process).
fn sh_run(iso: &Iso, args: &[&str], script: &str) -> Out {
    let mut c = iso.cmd(&["--processes"]);
    c.args(args).args(&["--run", "--", "/bin/sh", "-c", script]);
    c.run()
}

/// A fake home of the test user's with a key in `.ssh` and a file
/// anyone may see: (home, key path).
fn home_with_key(iso: &Iso) -> (PathBuf, PathBuf) {
    let home = iso.scratch.mkdir("home");
    iso.scratch.mkdir("home/.ssh");
    iso.scratch.mkdir("home/proj");
    let key = iso.scratch.write("home/.ssh/id_ed25519", b"SECRET-KEY\n");
    iso.scratch.write("home/notes.txt", b"visible\n");
    (home, key)
}

fn lmode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

/// The links, FIFOs and sockets the program leaves are
/// removed after the run however it set the modes of the box and of the
/// directories in it (a subdirectory its owner may not read, `chmod 0100
/// /box`); the modes stay as it set them, and --cleanup still works.
#[test]
fn hostile_modes_keep_no_links_in_the_box() {
    require!("hostile_modes_keep_no_links_in_the_box", userns_available());
    let iso = Iso::new("iso-h48-modes", 48);
    let dir = iso.init();
    let (_, key) = home_with_key(&iso);
    let k = key.display();
    let script = format!(
        "mkdir -p d/e && ln -s {k} d/e/l && ln -s {k} d/l && mkfifo d/f && echo kept > d/file && chmod 0311 d/e && chmod 0311 d \
         && ln -s {k} output.txt && mkfifo fifo && chmod 0100 /box"
    );
    let out = sh_run(&iso, &[], &script);
    out.assert_code(0);
    for p in ["box/output.txt", "box/fifo", "box/d/l", "box/d/f", "box/d/e/l"] {
        assert!(std::fs::symlink_metadata(dir.join(p)).is_err(), "{p} survived the run: {}", out.describe());
    }
    assert_eq!(std::fs::read_to_string(dir.join("box/d/file")).unwrap(), "kept\n");
    assert_eq!(
        (lmode(&dir.join("box")), lmode(&dir.join("box/d")), lmode(&dir.join("box/d/e"))),
        (0o100, 0o311, 0o311)
    );
    // A judge reading the output as the user gets nothing of the key.
    let read = as_user(&["cat", &dir.join("box/output.txt").display().to_string()]).output().unwrap();
    assert!(!String::from_utf8_lossy(&read.stdout).contains("SECRET-KEY"));
    iso.cleanup();
}

/// A box directory (`ROOT/N/box`, or `ROOT/N`) replaced by a
/// link is refused, and nothing goes through the link: not the removal
/// after the run, not a stdio file, not --cleanup.
#[test]
fn hostile_box_replaced_by_a_link() {
    require!("hostile_box_replaced_by_a_link", userns_available());
    let iso = Iso::new("iso-h48-link", 49);
    let dir = iso.init();
    // The link's target: a tree with a link, a FIFO and a file in it.
    let target = iso.scratch.mkdir("target");
    let populate = |t: &Path| {
        let l = t.join("l");
        std::os::unix::fs::symlink("/etc/passwd", &l).unwrap();
        std::os::unix::fs::lchown(&l, Some(h().uid), Some(h().gid)).unwrap();
        assert!(Command::new("mkfifo").arg(t.join("fifo")).status().unwrap().success());
        chown_to_user(&t.join("fifo"));
        std::fs::write(t.join("victim"), "precious").unwrap();
        chown_to_user(&t.join("victim"));
    };
    populate(&target);
    let intact = |t: &Path| {
        assert!(std::fs::symlink_metadata(t.join("l")).unwrap().file_type().is_symlink(), "{}", t.display());
        assert!(std::fs::symlink_metadata(t.join("fifo")).is_ok(), "{}", t.display());
        assert_eq!(std::fs::read_to_string(t.join("victim")).unwrap(), "precious");
    };
    let link = |at: &Path, to: &Path| {
        std::os::unix::fs::symlink(to, at).unwrap();
        std::os::unix::fs::lchown(at, Some(h().uid), Some(h().gid)).unwrap();
    };
    std::fs::remove_dir(dir.join("box")).unwrap();
    link(&dir.join("box"), &target);
    for args in [&[][..], &["-o", "victim"], &["--special-files"]] {
        let out = sh_run(&iso, args, "echo ran");
        out.assert_code(2);
        assert!(!out.stdout.contains("ran"), "{}", out.describe());
        intact(&target);
    }
    iso.cleanup();
    intact(&target);
    // The box directory itself a link to a tree with a `box/`.
    iso.init();
    let other = iso.scratch.mkdir("other");
    let obox = iso.scratch.mkdir("other/box");
    populate(&obox);
    std::fs::remove_dir_all(&dir).unwrap();
    link(&dir, &other);
    let out = sh_run(&iso, &[], "echo ran");
    out.assert_code(2);
    intact(&obox);
    iso.cleanup();
    intact(&obox);
}

/// `-d` binding the caller's home (however the path is
/// written) or a directory above it hides the home's secrets, as `capsule
/// run` does; the rest of it is seen.
#[test]
fn hostile_dir_rules_hide_the_home_secrets() {
    require!("hostile_dir_rules_hide_the_home_secrets", userns_available());
    let iso = Iso::new("iso-h48-home", 50);
    iso.init();
    let (home, _) = home_with_key(&iso);
    let k = home.join("proj/k");
    std::os::unix::fs::symlink("../.ssh/id_ed25519", &k).unwrap();
    std::os::unix::fs::lchown(&k, Some(h().uid), Some(h().gid)).unwrap();
    let h = home.display().to_string();
    let parent = home.parent().unwrap().display().to_string();
    let doubled = h.replacen("/", "//", 2);
    let cases = [
        (format!("/h={h}"), "/h"),
        (format!("/h={h}/"), "/h"),
        (format!("/h={doubled}"), "/h"),
        (format!("/h={parent}/./home"), "/h"),
        (format!("/h={h}/proj/.."), "/h"),
        (format!("/h={h}:rw"), "/h"),
        (format!("/p={parent}"), "/p/home"),
    ];
    for (rule, at) in &cases {
        let script = format!("cat {at}/notes.txt; cat {at}/.ssh/id_ed25519; ls -A {at}/.ssh");
        let mut c = iso.cmd(&["--processes", "-d", rule, "--run", "--", "/bin/sh", "-c", &script]);
        let out = c.env("HOME", &h).run();
        assert!(out.stdout.contains("visible"), "-d {rule}: {}", out.describe());
        assert!(!out.stdout.contains("SECRET-KEY"), "-d {rule} shows the key: {}", out.describe());
        assert!(!out.stdout.contains("id_ed25519"), "-d {rule} lists the key: {}", out.describe());
        // Nor does a stdio file reach it, directly or through a link in the home.
        for i in [format!("{at}/.ssh/id_ed25519"), format!("{at}/proj/k")] {
            let mut c = iso.cmd(&["-d", rule, "-i", &i, "--run", "--", "/bin/cat"]);
            let out = c.env("HOME", &h).run();
            out.assert_code(2);
            // (In a read-write rule a link on the way is refused first: the bits for others are checked by component.)
            let why = out.stderr.contains("secrets") || (rule.ends_with(":rw") && out.stderr.contains("a link"));
            assert!(why, "-d {rule} -i {i}: {}", out.describe());
            assert!(!out.stdout.contains("SECRET-KEY"), "-d {rule} -i {i}: {}", out.describe());
        }
    }
    // A stdio file written there is refused before anything is truncated.
    let mut c = iso.cmd(&["-d", &format!("/h={h}:rw"), "-o", "/h/.ssh/id_ed25519", "--run", "--", "/bin/true"]);
    let out = c.env("HOME", &h).run();
    out.assert_code(2);
    assert_eq!(std::fs::read_to_string(home.join(".ssh/id_ed25519")).unwrap(), "SECRET-KEY\n");
    // A rule naming the secret itself shows it, as asked.
    let mut c = iso.cmd(&["-d", &format!("/k={h}/.ssh"), "--run", "--", "/bin/cat", "/k/id_ed25519"]);
    let out = c.env("HOME", &h).run();
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "SECRET-KEY\n"), "{}", out.describe());
    iso.cleanup();
}

/// A default box root another user made first (mode 0777)
/// is refused with one line naming the fix, and nothing is written into
/// it; the user's own runtime directory is used where there is one.
#[test]
fn hostile_squatted_default_box_root() {
    require!("hostile_squatted_default_box_root", userns_available());
    not_in_systemd_mode!("hostile_squatted_default_box_root", "it makes a directory of another user's, as root");
    if !h().is_root {
        return skip("hostile_squatted_default_box_root", "it makes a directory of another user's, as root");
    }
    let uid = h().uid;
    let squat = PathBuf::from(format!("/tmp/capsule-isolate-{uid}"));
    let runtime = PathBuf::from(format!("/run/user/{uid}"));
    // The tests give isolate roots of their own; this one is a leftover.
    let _ = std::fs::remove_dir_all(&squat);
    std::fs::create_dir(&squat).unwrap();
    std::os::unix::fs::chown(&squat, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = capsule(&["isolate", "--box-id=51", "--init"]).run();
    if runtime.is_dir() {
        // /run/user/UID is the user's: the squatted directory is not even looked at.
        out.assert_code(0);
        assert!(out.stdout.starts_with(&runtime.display().to_string()), "{}", out.describe());
        capsule(&["isolate", "--box-id=51", "--cleanup"]).run().assert_code(0);
    } else {
        out.assert_code(2);
        let err: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(err.len(), 1, "{}", out.describe());
        assert!(
            err[0].contains(&squat.display().to_string()) && err[0].contains("CAPSULE_ISOLATE_ROOT"),
            "{}",
            out.describe()
        );
    }
    assert_eq!(std::fs::read_dir(&squat).unwrap().count(), 0, "something was written into the squatted root");
    // XDG_RUNTIME_DIR, the user's own private directory, is used first.
    let rt = Scratch::new("iso-h48-rt");
    std::fs::set_permissions(&rt.path, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = capsule(&["isolate", "--box-id=51", "--init"]).env("XDG_RUNTIME_DIR", &rt.s()).run();
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), rt.join("capsule-isolate/51").display().to_string(), "{}", out.describe());
    capsule(&["isolate", "--box-id=51", "--cleanup"]).env("XDG_RUNTIME_DIR", &rt.s()).run().assert_code(0);
    assert_eq!(std::fs::read_dir(&squat).unwrap().count(), 0);
    // Without XDG_RUNTIME_DIR, /run/user/UID where it is the user's (made
    // here for the test when missing, removed after).
    let made = !runtime.exists() && Path::new("/run/user").is_dir() && std::fs::create_dir(&runtime).is_ok();
    // Removed even when an assertion fails.
    struct Gone(Option<PathBuf>);
    impl Drop for Gone {
        fn drop(&mut self) {
            if let Some(p) = &self.0 {
                let _ = std::fs::remove_dir_all(p);
            }
        }
    }
    let _gone = Gone(made.then(|| runtime.clone()));
    if made {
        chown_to_user(&runtime);
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    if runtime.is_dir() {
        let out = capsule(&["isolate", "--box-id=51", "--init"]).run();
        out.assert_code(0);
        assert_eq!(out.stdout.trim(), runtime.join("capsule-isolate/51").display().to_string(), "{}", out.describe());
        capsule(&["isolate", "--box-id=51", "--cleanup"]).run().assert_code(0);
    }
    assert_eq!(std::fs::read_dir(&squat).unwrap().count(), 0);
    std::fs::remove_dir(&squat).unwrap();
}

// Box files protected from the program

/// A file of the test user's with `mode`, as CMS's `create_file` and
/// `allow_writing_*` leave it.
fn user_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    chown_to_user(path);
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// CMS's layout: its home bound read-write over `/tmp`, the working
/// directory; the solution runs from the box (`/box/sol`), printing to
/// `/box/o`.
fn as_cms(iso: &Iso, home: &Path, args: &[&str], sol_args: &[&str]) -> (Out, Meta) {
    iso.put("sol", sol());
    let meta = iso.scratch.join(&unique("run.meta"));
    let mut c = iso.cmd(&[
        &format!("--dir=/tmp={}:rw", home.display()),
        "--chdir=/tmp",
        "--stdout=/box/o",
        &format!("--meta={}", meta.display()),
    ]);
    c.args(args).args(&["--run", "--", "/box/sol"]).args(sol_args);
    let out = c.run();
    (out, Meta::parse(&std::fs::read_to_string(&meta).unwrap_or_default()))
}

/// CMS's `allow_writing_only(["output.txt"])`: the home 0755, its files
/// 0755, the output 0722. The program, "others" for those files under
/// isolate, cannot overwrite the input or the executable, chmod, rename or
/// create files, nor open a stdio file the bits forbid; it can write the
/// output. A file others may not read is empty to it. The meta file says
/// which mode protected the box.
#[test]
fn cms_writing_only_keeps_the_box_files() {
    require!("cms_writing_only_keeps_the_box_files", userns_available());
    let iso = Iso::new("iso-43-only", 43);
    iso.init();
    let home = iso.scratch.mkdir("home");
    user_file(&home.join("input.txt"), "1 2\n", 0o755);
    std::fs::copy(sol(), home.join("solution")).unwrap();
    chown_to_user(&home.join("solution"));
    chmod(&home.join("solution"), 0o755);
    user_file(&home.join("output.txt"), "", 0o722);
    user_file(&home.join("secret"), "the answer", 0o600);
    chmod(&home, 0o755);
    let erofs = format!("open errno={}\n", libc::EROFS);
    for victim in ["input.txt", "solution", "new.txt", "/tmp/secret"] {
        let (out, meta) = as_cms(&iso, &home, &[], &["touch", victim]);
        out.assert_code(1);
        assert_eq!(iso.read("o"), erofs, "touch {victim}: {}", out.describe());
        assert_eq!(meta.must("capsule-box-mode"), "permission-bits");
    }
    for cmd in
        [&["/bin/chmod", "777", "input.txt"][..], &["/bin/mv", "input.txt", "moved"], &["/bin/rm", "-f", "solution"]]
    {
        let mut a = vec!["exec"];
        a.extend_from_slice(cmd);
        let (out, meta) = as_cms(&iso, &home, &[], &a);
        out.assert_code(1);
        assert_eq!(meta.must("status"), "RE", "{cmd:?}: {}", meta.1);
    }
    assert_eq!(std::fs::read_to_string(home.join("input.txt")).unwrap(), "1 2\n");
    assert_eq!(std::fs::metadata(home.join("input.txt")).unwrap().permissions().mode() & 0o7777, 0o755);
    assert!(!home.join("new.txt").exists() && !home.join("moved").exists() && home.join("solution").exists());
    let (out, _) = as_cms(&iso, &home, &[], &["file", "/tmp/secret"]);
    out.assert_code(0);
    assert_eq!(iso.read("o"), "", "a file others may not read is empty to the program");
    // The output file others may write: written, by the program and as its stdout.
    let (out, _) = as_cms(&iso, &home, &[], &["touch", "output.txt"]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(home.join("output.txt")).unwrap(), "x");
    let meta = iso.scratch.join("stdio.meta");
    let run = |stdin: &str, stdout: &str| {
        iso.cmd(&[
            &format!("--dir=/tmp={}:rw", home.display()),
            "--chdir=/tmp",
            &format!("--stdin={stdin}"),
            &format!("--stdout={stdout}"),
            &format!("--meta={}", meta.display()),
            "--run",
            "--",
            "./solution",
        ])
        .run()
    };
    run("/tmp/input.txt", "/tmp/output.txt").assert_code(0);
    assert_eq!(std::fs::read_to_string(home.join("output.txt")).unwrap(), "3\n");
    // isolate opens the stdio files as the box's uid: the bits decide.
    for (stdin, stdout, why) in [
        ("/tmp/input.txt", "/tmp/new.txt", "Permission denied"),
        ("/tmp/input.txt", "/tmp/input.txt", "Permission denied"),
        ("/tmp/secret", "/tmp/output.txt", "Permission denied"),
    ] {
        let out = run(stdin, stdout);
        out.assert_code(2);
        assert!(out.stderr.contains(why), "{stdin} {stdout}: {}", out.describe());
    }
    assert!(!home.join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(home.join("input.txt")).unwrap(), "1 2\n");
    // A link there (the program could leave one in a writable phase) is not followed for a stdio file.
    std::os::unix::fs::symlink("input.txt", home.join("out")).unwrap();
    std::os::unix::fs::lchown(home.join("out"), Some(h().uid), Some(h().gid)).unwrap();
    let out = run("/tmp/input.txt", "/tmp/out");
    out.assert_code(2);
    assert!(out.stderr.contains("a link"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(home.join("input.txt")).unwrap(), "1 2\n");
    iso.cleanup();
}

/// CMS's `allow_writing_all` (0777 everywhere, as for compilations): the
/// program creates, overwrites and removes files. A sticky directory others
/// may write: it creates files there but removes none of the caller's.
#[test]
fn cms_writing_all_lets_the_program_write() {
    require!("cms_writing_all_lets_the_program_write", userns_available());
    let iso = Iso::new("iso-43-all", 44);
    iso.init();
    let home = iso.scratch.mkdir("home");
    user_file(&home.join("input.txt"), "1 2\n", 0o777);
    user_file(&home.join("gone"), "", 0o777);
    chmod(&home, 0o777);
    for name in ["input.txt", "compiled"] {
        let (out, meta) = as_cms(&iso, &home, &[], &["touch", name]);
        out.assert_code(0);
        assert_eq!(meta.must("capsule-box-mode"), "permission-bits");
        assert_eq!(std::fs::read_to_string(home.join(name)).unwrap(), "x");
    }
    let (out, _) = as_cms(&iso, &home, &[], &["exec", "/bin/rm", "gone"]);
    out.assert_code(0);
    assert!(!home.join("gone").exists());
    let (out, _) = as_cms(&iso, &home, &["--stderr=/tmp/err.txt"], &["streams"]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(home.join("err.txt")).unwrap(), "to-stderr\n");
    let shared = home.join("shared");
    std::fs::create_dir(&shared).unwrap();
    chown_to_user(&shared);
    chmod(&shared, 0o1777);
    user_file(&shared.join("theirs"), "t", 0o666);
    let (out, _) = as_cms(&iso, &home, &[], &["exec", "/bin/rm", "-f", "shared/theirs"]);
    out.assert_code(1);
    assert!(shared.join("theirs").exists());
    let (out, _) = as_cms(&iso, &home, &[], &["touch", "shared/theirs"]);
    out.assert_code(0);
    let (out, _) = as_cms(&iso, &home, &[], &["touch", "shared/mine"]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(shared.join("theirs")).unwrap(), "x");
    assert!(shared.join("mine").is_file());
    iso.cleanup();
}

/// Judge0's shape: files put into `box/` (mode 0644, the box 0700) and
/// the program writing there. isolate chowns `box/` to the box's uid for
/// the run, so the program owns it: it overwrites and creates files, under
/// capsule isolate too.
#[test]
fn box_dir_stays_the_programs() {
    require!("box_dir_stays_the_programs", userns_available());
    let iso = Iso::new("iso-43-box", 45);
    let dir = iso.init();
    iso.put_text("source.c", "int main;\n");
    chmod(&dir.join("box/source.c"), 0o644);
    for name in ["source.c", "a.out"] {
        let (out, meta) = iso.run(&["-o", "o"], &["touch", name]);
        out.assert_code(0);
        assert_eq!(meta.must("capsule-box-mode"), "permission-bits");
        assert_eq!(iso.read(name), "x");
    }
    // A `tmp` rule's directory is the box's too.
    let (out, _) = iso.run(&["-o", "o", "-d", "/work:tmp"], &["touch", "/work/f"]);
    out.assert_code(0);
    iso.cleanup();
}

/// `capsule check` says which mode `capsule isolate` uses and whether the
/// caller has subordinate ids, in text and JSON.
#[test]
fn check_names_the_isolate_mode() {
    let mut c = capsule(&["check"]);
    c.env(MODE_ENV, "permission-bits");
    let out = c.run();
    let line =
        out.stdout.lines().find(|l| l.contains("isolate-box-user:")).unwrap_or_else(|| panic!("{}", out.describe()));
    assert!(
        line.starts_with("ok   isolate-box-user: capsule isolate runs the program as you, in permission-bit mode"),
        "{line}"
    );
    assert!(line.contains("as CAPSULE_ISOLATE_BOX_MODE=permission-bits says"), "{line}");
    let out = capsule(&["check", "--json"]).run();
    assert!(out.stdout.contains("\"name\": \"isolate-box-user\""), "{}", out.describe());
}

// Subordinate-id boxes

/// A box whose program runs as a subordinate uid of the test user's
/// (`CAPSULE_ISOLATE_BOX_MODE=subordinate-ids`, which fails rather than
/// falling back): None after a skip where the user has no subordinate ids
/// or `newuidmap` is missing (root adds a range for the test user).
fn subid_iso(test: &str, tag: &str, id: u32) -> Option<Iso> {
    if let Err(e) = userns_available().and_then(|()| subids_for_user()) {
        skip(test, &e);
        return None;
    }
    Some(Iso { mode: "subordinate-ids", ..Iso::new(tag, id) })
}

fn owner(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

/// CMS's `allow_writing_only` with the program as a uid of its own: the
/// kernel enforces the bits, with isolate's errors (EACCES): the input and
/// the executable (0755) cannot be written, no file created in the home
/// (0755), a 0600 file not read; the 0722 output is written. `id` is the
/// box's subordinate uid, with no supplementary group; the caller's files
/// appear as the caller's.
#[test]
fn subid_cms_bits_are_the_kernels() {
    let Some(iso) = subid_iso("subid_cms_bits_are_the_kernels", "iso-43-sub-cms", 53) else { return };
    iso.init();
    let home = iso.scratch.mkdir("home");
    user_file(&home.join("input.txt"), "1 2\n", 0o755);
    std::fs::copy(sol(), home.join("solution")).unwrap();
    chown_to_user(&home.join("solution"));
    chmod(&home.join("solution"), 0o755);
    user_file(&home.join("output.txt"), "", 0o722);
    user_file(&home.join("secret"), "the answer", 0o600);
    chmod(&home, 0o755);
    let eacces = format!("open errno={}\n", libc::EACCES);
    for victim in ["input.txt", "solution", "new.txt", "/tmp/secret"] {
        let (out, meta) = as_cms(&iso, &home, &[], &["touch", victim]);
        out.assert_code(1);
        assert_eq!(iso.read("o"), eacces, "touch {victim}: {}", out.describe());
        assert_eq!(meta.must("capsule-box-mode"), "subordinate-ids");
    }
    for cmd in
        [&["/bin/chmod", "777", "input.txt"][..], &["/bin/mv", "input.txt", "moved"], &["/bin/rm", "-f", "solution"]]
    {
        let mut a = vec!["exec"];
        a.extend_from_slice(cmd);
        let (out, meta) = as_cms(&iso, &home, &[], &a);
        out.assert_code(1);
        assert_eq!(meta.must("status"), "RE", "{cmd:?}: {}", meta.1);
    }
    let (out, _) = as_cms(&iso, &home, &[], &["file", "/tmp/secret"]);
    out.assert_code(1);
    assert_eq!(iso.read("o"), format!("fopen errno={}\n", libc::EACCES), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(home.join("input.txt")).unwrap(), "1 2\n");
    assert_eq!(lmode(&home.join("input.txt")), 0o755);
    assert!(!home.join("new.txt").exists() && !home.join("moved").exists() && home.join("solution").exists());
    // The output file others may write: written.
    let (out, _) = as_cms(&iso, &home, &[], &["touch", "output.txt"]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(home.join("output.txt")).unwrap(), "x");
    assert_eq!(owner(&home.join("output.txt")), (h().uid, h().gid));
    // Who the program is, and who the caller's files belong to, as it sees them.
    let out = sh_run(
        &iso,
        &[&format!("--dir=/home={}", home.display()), "--stdout=o"],
        "id -u; id -g; id -G; stat -c %u /home/input.txt",
    );
    out.assert_code(0);
    let text = iso.read("o");
    let ids: Vec<&str> = text.lines().collect();
    assert_eq!(ids.len(), 4, "{text}");
    let (uid, gid): (u32, u32) = (ids[0].parse().unwrap(), ids[1].parse().unwrap());
    assert!(uid != h().uid && gid != h().gid, "{text}");
    assert_eq!(ids[2], ids[1], "no supplementary group: {text}");
    assert_eq!(ids[3], h().uid.to_string(), "the caller's file is the caller's: {text}");
    iso.cleanup();
}

/// Judge0's shape: files put into `box/` (0644, the box 0700), the program
/// overwriting and creating files there and in a `tmp` rule's directory
/// (they are its own for the run, as isolate chowns them to the box's uid);
/// afterwards every file is the caller's again, readable by the judge.
#[test]
fn subid_judge0_writes_into_the_box() {
    let Some(iso) = subid_iso("subid_judge0_writes_into_the_box", "iso-43-sub-j0", 54) else { return };
    let dir = iso.init();
    iso.put_text("source.c", "int main;\n");
    chmod(&dir.join("box/source.c"), 0o644);
    for name in ["source.c", "a.out"] {
        let (out, meta) = iso.run(&["-o", "o"], &["touch", name]);
        out.assert_code(0);
        assert_eq!(meta.must("capsule-box-mode"), "subordinate-ids");
        assert_eq!(iso.read(name), "x");
    }
    let (out, _) = iso.run(&["-o", "o", "-d", "/work:tmp"], &["touch", "/work/f"]);
    out.assert_code(0);
    let tmp = dir.join("tmp/work");
    for p in [
        dir.join("box"),
        dir.join("box/source.c"),
        dir.join("box/a.out"),
        dir.join("box/o"),
        tmp.clone(),
        tmp.join("f"),
    ] {
        assert_eq!(owner(&p), (h().uid, h().gid), "{} is not the caller's after the run", p.display());
    }
    let lock = std::fs::read_to_string(iso.root().join(format!("{}.lock", iso.id))).unwrap();
    assert!(!lock.contains("boxed="), "the hand-over is undone: {lock}");
    iso.cleanup();
}

/// What the program leaves is removed at `--cleanup` and `--init`, however
/// it set the modes (a 0000 directory with files, a 0000 file), also when
/// the run was killed before its files were handed back (SIGKILL to
/// capsule isolate: they stay the box uid's, the lock file says so).
#[test]
fn subid_cleanup_removes_what_the_program_made() {
    let Some(iso) = subid_iso("subid_cleanup_removes_what_the_program_made", "iso-43-sub-clean", 55) else { return };
    let dir = iso.init();
    let make = "mkdir -p d/e && echo x > d/e/f && echo y > g && chmod 0 d/e d g";
    sh_run(&iso, &[], make).assert_code(0);
    assert_eq!((owner(&dir.join("box/d")), lmode(&dir.join("box/d"))), ((h().uid, h().gid), 0));
    iso.cleanup();
    // Killed mid-run: the files stay the program's until --init takes them back.
    iso.init();
    iso.put("sol", sol());
    let marker = unique("isolate-subid-killed");
    let mut c =
        iso.cmd(&["--processes", "--run", "--", "/bin/sh", "-c", &format!("{make} && exec ./sol sleep 100 {marker}")]);
    let running = c.spawn();
    let t = Instant::now();
    while !procs_with_marker(&marker).iter().any(|(_, cmd)| cmd.starts_with("./sol sleep")) {
        assert!(t.elapsed() < Duration::from_secs(30), "the program never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: a signal to the capsule process this test started.
    assert_eq!(unsafe { libc::kill(running.pid(), libc::SIGKILL) }, 0);
    running.wait();
    if let Err(left) = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(10)) {
        kill_marker(&marker);
        panic!("processes of the killed run are left: {left:?}");
    }
    assert_ne!(owner(&dir.join("box/d")).0, h().uid, "the run was killed before handing the files back");
    let lock = std::fs::read_to_string(iso.root().join(format!("{}.lock", iso.id))).unwrap();
    assert!(lock.contains("boxed="), "{lock}");
    iso.init();
    assert_eq!(std::fs::read_dir(dir.join("box")).unwrap().count(), 0);
    iso.put("sol", sol());
    // And once more, removed by --cleanup.
    let running = iso
        .cmd(&["--processes", "--run", "--", "/bin/sh", "-c", &format!("{make} && exec ./sol sleep 100 {marker}")])
        .spawn();
    let t = Instant::now();
    while !procs_with_marker(&marker).iter().any(|(_, cmd)| cmd.starts_with("./sol sleep")) {
        assert!(t.elapsed() < Duration::from_secs(30), "the program never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(running.pid(), libc::SIGKILL) }, 0);
    running.wait();
    let _ = wait_marker_gone(&marker, Instant::now(), Duration::from_secs(10));
    iso.cleanup();
}

/// A hostile program as the box's uid cannot make the caller follow a
/// link: links it leaves (kept with `--special-files`) to the caller's
/// files and directories, and a directory of the box replaced by one, are
/// not followed when the box is handed to the box's uid for the next run
/// nor back after it: the caller's files keep their owner and mode, and
/// the program never reads them.
#[test]
fn subid_hostile_links_are_not_followed() {
    let Some(iso) = subid_iso("subid_hostile_links_are_not_followed", "iso-43-sub-links", 56) else { return };
    let dir = iso.init();
    let (home, key) = home_with_key(&iso);
    chmod(&key, 0o600);
    chown_to_user(&key);
    let k = key.display();
    let h_ = home.display();
    let script =
        format!("ln -s {k} l && ln -s {h_} dl && mkdir sub && rm -r sub && ln -s {h_}/.ssh sub && ln -s {k} o");
    sh_run(&iso, &["--special-files"], &script).assert_code(0);
    for p in ["box/l", "box/dl", "box/sub", "box/o"] {
        assert!(std::fs::symlink_metadata(dir.join(p)).unwrap().file_type().is_symlink(), "{p}");
    }
    // The next run walks a box full of links: to the box's uid and back.
    let out = sh_run(&iso, &["--special-files", "--stdout=out"], "cat l dl/.ssh/id_ed25519 sub/id_ed25519 o; ls -l");
    assert!(!iso.read("out").contains("SECRET-KEY"), "{}", iso.read("out"));
    assert!(out.code != Some(2), "{}", out.describe());
    for p in [&home, &home.join(".ssh"), &key] {
        assert_eq!(owner(p), (h().uid, h().gid), "{} changed owner", p.display());
    }
    assert_eq!(lmode(&key), 0o600);
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "SECRET-KEY\n");
    // Without --special-files they go after the run; the judge reads no key through the output.
    sh_run(&iso, &["--stdout=o2"], "true").assert_code(0);
    for p in ["box/l", "box/dl", "box/sub", "box/o"] {
        assert!(std::fs::symlink_metadata(dir.join(p)).is_err(), "{p} survived the run");
    }
    assert_eq!(owner(&key), (h().uid, h().gid));
    iso.cleanup();
}

/// `capsule check` names the subordinate-id mode where the user has the
/// ids (unless `CAPSULE_ISOLATE_BOX_MODE` says otherwise).
#[test]
fn subid_check_names_the_mode() {
    let Some(_) = subid_iso("subid_check_names_the_mode", "iso-43-sub-check", 57) else { return };
    let out = capsule(&["check"]).run();
    let line =
        out.stdout.lines().find(|l| l.contains("isolate-box-user:")).unwrap_or_else(|| panic!("{}", out.describe()));
    assert!(line.contains("(mode subordinate-ids"), "{line}");
}
