//! The seccomp policies (`--seccomp default|strict|compile|none|FILE`),
//! observed from inside with small C programs built here and real tools
//! (gcc, g++, make, sh, tar, python3).

use capsule_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// Helper program: one mode per argument, prints `key=value` lines.
const HELPER: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

static const char *en(long r) { return r < 0 ? strerrorname_np(errno) : "OK"; }

#if defined(__x86_64__)
static long int80(long nr) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory", "r8", "r9", "r10", "r11");
    return ret;
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *m = argv[1];
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(m, "socket")) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        printf("socket=%d\n", s);
    } else if (!strcmp(m, "keyctl")) {
        /* KEYCTL_GET_KEYRING_ID (0) of KEY_SPEC_SESSION_KEYRING (-3), create */
        long r = syscall(SYS_keyctl, 0, -3, 1);
        printf("keyctl=%ld errno=%s\n", r, en(r));
        printf("after=1\n");
#if defined(__x86_64__)
    } else if (!strcmp(m, "int80")) {
        /* i386 getpid is 20 */
        long r = int80(20);
        printf("int80=%ld\n", r);
#endif
    } else if (!strcmp(m, "fork")) {
        pid_t p = fork();
        if (p == 0) _exit(0);
        printf("fork=%d\n", (int)p);
    } else if (!strcmp(m, "listener")) {
        struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        struct sock_fprog prog = { 1, f };
        long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
        printf("listener=%ld errno=%s\n", r, en(r));
        printf("after=1\n");
    } else if (!strcmp(m, "open")) {
        long w = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        printf("write_open=%ld errno=%s\n", w, en(w));
        long r = open(argv[3], O_RDONLY);
        printf("read_open=%s\n", r >= 0 ? "OK" : strerrorname_np(errno));
    } else {
        return 2;
    }
    return 0;
}
"#;

const SOLUTION_C: &str = r#"
#include <stdio.h>
int main(void) {
    long a, b;
    if (scanf("%ld %ld", &a, &b) != 2) return 3;
    printf("sum=%ld\n", a + b);
    return 0;
}
"#;

const SOLUTION_CXX: &str = r#"
#include <iostream>
#include <map>
#include <string>
#include <vector>
int main() {
    long a, b;
    std::cin >> a >> b;
    std::vector<long> v{a, b};
    std::map<std::string, long> m{{"sum", v[0] + v[1]}};
    std::cout << "sum=" << m["sum"] << std::endl;
    return 0;
}
"#;

/// Whether gcc and g++ (and static libc/libstdc++) are here.
fn have_compilers() -> Result<(), String> {
    for tool in ["gcc", "g++", "make", "tar"] {
        let ok = Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
        if !ok {
            return Err(format!("`{tool}` is missing (apt-get install gcc g++ make tar)"));
        }
    }
    Ok(())
}

/// Compiles `src` (C, or C++ with `cxx`) into `dir/name`, world-executable.
fn build(dir: &Scratch, name: &str, src: &str, cxx: bool, extra: &[&str]) -> PathBuf {
    let ext = if cxx { "cc" } else { "c" };
    let src_path = dir.write(&format!("{name}.{ext}"), src.as_bytes());
    let out = dir.join(name);
    let o = Command::new(if cxx { "g++" } else { "gcc" })
        .arg("-O1")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src_path)
        .output()
        .expect("run the compiler");
    assert!(o.status.success(), "compiling {name}: {}", String::from_utf8_lossy(&o.stderr));
    chown_to_user(&out);
    out
}

fn helper(dir: &Scratch) -> String {
    build(dir, "helper", HELPER, false, &[]).display().to_string()
}

/// `capsule run -q --seccomp POLICY OPTS -- ARGV` with a `--json` result.
fn run(policy: &str, opts: &[&str], argv: &[&str]) -> Out {
    let mut c = capsule(&["run", "-q", "--seccomp", policy]);
    c.args(opts).arg("--").args(argv).json();
    c.run()
}

#[track_caller]
fn assert_exited_ok(out: &Out) {
    out.assert_code(0);
    assert_eq!(out.status(), "exited", "{}", out.describe());
}

#[track_caller]
fn assert_forbidden(out: &Out, syscall: &str) {
    assert_eq!(out.status(), "forbidden-syscall", "{}", out.describe());
    assert_eq!(out.json()["syscall"], syscall, "{}", out.describe());
    assert_ne!(out.code, Some(0), "{}", out.describe());
}

/// A build in a fresh tmpfs on /tmp (a directory every host has): make (cc), g++, sh, tar.
const BUILD_SCRIPT: &str = r#"set -e
cd /tmp
printf 'all: hello\nhello: hello.o\n\t$(CC) -o $@ $^\nhello.o: hello.c\n\t$(CC) -c -o $@ $<\n' > Makefile
printf '#include <stdio.h>\nint main(void) { puts("hello-c"); return 0; }\n' > hello.c
make -s
./hello
printf '#include <iostream>\nint main() { std::cout << "hello-cxx" << std::endl; }\n' > hello.cc
g++ -O1 -o hellocc hello.cc
./hellocc
tar czf t.tgz Makefile hello.c hello.cc
mkdir u
tar xzf t.tgz -C u
ls u | tr '\n' ' '
echo
echo build-ok
"#;

fn check_build(policy: &str) {
    let out = run(policy, &["--tmpfs", "/tmp"], &["/bin/sh", "-c", BUILD_SCRIPT]);
    assert_exited_ok(&out);
    for want in ["hello-c\n", "hello-cxx\n", "Makefile hello.c hello.cc \n", "build-ok\n"] {
        assert!(out.stdout.contains(want), "missing {want:?}; {}", out.describe());
    }
}

#[test]
fn default_runs_build_tools_and_python() {
    require!("default_runs_build_tools_and_python", userns_available());
    require!("default_runs_build_tools_and_python", have_compilers());
    let _g = procs_shared();
    check_build("default");
    if !Path::new("/usr/bin/python3").exists() {
        skip("default_runs_build_tools_and_python (python3)", "/usr/bin/python3 is missing");
        return;
    }
    let py = "import subprocess, json, hashlib, threading\n\
              r = subprocess.run(['sh', '-c', 'echo from-sh'], capture_output=True)\n\
              t = threading.Thread(target=lambda: None); t.start(); t.join()\n\
              print(json.dumps({'sh': r.stdout.decode().strip(), 'md5': hashlib.md5(b'x').hexdigest()}))\n";
    let out = run("default", &[], &["/usr/bin/python3", "-c", py]);
    assert_exited_ok(&out);
    assert!(
        out.stdout.contains(r#"{"sh": "from-sh", "md5": "9dd4e461268c8034f5c8564e155c67a6"}"#),
        "{}",
        out.describe()
    );
}

#[test]
fn compile_runs_build_tools() {
    require!("compile_runs_build_tools", userns_available());
    require!("compile_runs_build_tools", have_compilers());
    let _g = procs_shared();
    check_build("compile");
}

/// A socket pair, the one socket `compile` allows, carries data with
/// send/recv (rustc 1.75 receives with recvfrom); another family still kills.
#[test]
fn compile_sends_and_receives_on_a_socket_pair() {
    require!("compile_sends_and_receives_on_a_socket_pair", userns_available());
    require!("compile_sends_and_receives_on_a_socket_pair", have_compilers());
    let dir = Scratch::new("seccomp-pair");
    let src = r#"#include <stdio.h>
#include <sys/socket.h>
int main(void) {
    int sv[2]; char c = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    if (sendto(sv[0], "x", 1, 0, 0, 0) != 1) return 3;
    if (recvfrom(sv[1], &c, 1, 0, 0, 0) != 1) return 4;
    printf("got %c\n", c);
    return 0;
}
"#;
    let bin = build(&dir, "pair", src, false, &["-static"]).display().to_string();
    let out = run("compile", &[], &[&bin]);
    assert_exited_ok(&out);
    assert!(out.stdout.contains("got x"), "{}", out.describe());
}

#[test]
fn strict_runs_c_and_cxx_solutions() {
    require!("strict_runs_c_and_cxx_solutions", userns_available());
    require!("strict_runs_c_and_cxx_solutions", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("strict-sol");
    let input = dir.write("input.txt", b"40 2\n");
    let input = input.display().to_string();
    let bins = [
        build(&dir, "c_dynamic", SOLUTION_C, false, &[]),
        build(&dir, "c_static", SOLUTION_C, false, &["-static"]),
        build(&dir, "cxx_dynamic", SOLUTION_CXX, true, &[]),
        build(&dir, "cxx_static", SOLUTION_CXX, true, &["-static"]),
    ];
    for bin in &bins {
        let out = run("strict", &["--stdin", &input], &[&bin.display().to_string()]);
        assert_exited_ok(&out);
        assert_eq!(out.stdout, "sum=42\n", "{}: {}", bin.display(), out.describe());
    }
}

#[test]
fn strict_kills_socket_with_its_arguments() {
    require!("strict_kills_socket_with_its_arguments", userns_available());
    require!("strict_kills_socket_with_its_arguments", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("strict-socket");
    let h = helper(&dir);
    let out = run("strict", &[], &[&h, "socket"]);
    assert_forbidden(&out, "socket");
    let args = out.json()["syscall_args"].as_array().unwrap_or_else(|| panic!("{}", out.describe())).clone();
    assert_eq!(args.len(), 6, "{}", out.describe());
    assert_eq!(&args[..3], &[serde_json::json!(2), serde_json::json!(1), serde_json::json!(0)], "{}", out.describe());
    // The call never ran: nothing printed after it.
    assert!(!out.stdout.contains("socket="), "{}", out.describe());
    // Under default, socket is allowed (the network namespace is empty).
    let out = run("default", &[], &[&h, "socket"]);
    assert_exited_ok(&out);
    assert!(out.stdout.starts_with("socket="), "{}", out.describe());
}

#[test]
fn strict_kills_fork() {
    require!("strict_kills_fork", userns_available());
    require!("strict_kills_fork", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("strict-fork");
    let h = helper(&dir);
    let out = run("strict", &[], &[&h, "fork"]);
    // glibc's fork() is clone(SIGCHLD).
    assert_forbidden(&out, "clone");
    assert!(!out.stdout.contains("fork="), "{}", out.describe());
    let out = run("compile", &[], &[&h, "fork"]);
    assert_exited_ok(&out);
    assert!(out.stdout.contains("fork="), "{}", out.describe());
}

#[test]
fn default_refuses_keyctl_and_the_program_goes_on() {
    require!("default_refuses_keyctl_and_the_program_goes_on", userns_available());
    require!("default_refuses_keyctl_and_the_program_goes_on", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("default-keyctl");
    let h = helper(&dir);
    let out = run("default", &[], &[&h, "keyctl"]);
    assert_exited_ok(&out);
    let kv = out.kv();
    assert_eq!(kv.get("keyctl"), Some("-1 errno=EPERM"), "{}", out.describe());
    assert_eq!(kv.get("after"), Some("1"), "{}", out.describe());
    // Without a filter, the kernel answers (whatever it says, not our EPERM
    // by seccomp: a session keyring id or another error).
    let out = run("none", &[], &[&h, "keyctl"]);
    assert_exited_ok(&out);
}

/// x86_64's other ABI (aarch64's, 32-bit ARM, needs an A32 program: the
/// policy compiler's unit tests check its verdicts there).
#[cfg(target_arch = "x86_64")]
#[test]
fn i386_abi_is_refused() {
    require!("i386_abi_is_refused", userns_available());
    require!("i386_abi_is_refused", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("int80");
    let h = helper(&dir);
    let out = run("default", &[], &[&h, "int80"]);
    assert_exited_ok(&out);
    assert_eq!(out.kv().get("int80"), Some(format!("-{}", libc::ENOSYS).as_str()), "{}", out.describe());
    let out = run("strict", &[], &[&h, "int80"]);
    assert_forbidden(&out, "i386:getpid");
    // Without a filter the call works (where the kernel has IA32 emulation).
    let out = run("none", &[], &[&h, "int80"]);
    assert_exited_ok(&out);
    let v: i64 = out.kv().get("int80").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{}", out.describe()));
    assert!(v > 0 || v == -(libc::ENOSYS as i64), "{}", out.describe());
}

#[test]
fn own_listener_filter_is_refused() {
    require!("own_listener_filter_is_refused", userns_available());
    require!("own_listener_filter_is_refused", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("listener");
    let h = helper(&dir);
    for policy in ["strict", "compile"] {
        let out = run(policy, &[], &[&h, "listener"]);
        assert_exited_ok(&out);
        let kv = out.kv();
        assert_eq!(kv.get("listener"), Some("-1 errno=EPERM"), "{policy}: {}", out.describe());
        assert_eq!(kv.get("after"), Some("1"), "{policy}: {}", out.describe());
    }
}

#[test]
fn policy_file_with_argument_condition() {
    require!("policy_file_with_argument_condition", userns_available());
    require!("policy_file_with_argument_condition", have_compilers());
    let _g = procs_shared();
    let dir = Scratch::new("policy-file");
    let h = helper(&dir);
    // Opening for writing (O_ACCMODE == O_WRONLY) fails with EACCES.
    let toml = dir.write(
        "nowrite.toml",
        br#"default_action = "allow"
[[rule]]
syscall = ["openat", "open"]
action = "errno EACCES"
args = [{ index = 2, op = "masked_eq", mask = 3, value = 1 }]
"#,
    );
    let json = dir.write(
        "nowrite.json",
        br#"{"default_action": "allow",
             "rule": [{"syscall": "openat", "action": "errno 13",
                       "args": [{"index": 2, "op": "masked_eq", "mask": 3, "value": 1}]}]}"#,
    );
    for file in [&toml, &json] {
        let out = run(&file.display().to_string(), &[], &[&h, "open", "/tmp/out", "/etc/passwd"]);
        assert_exited_ok(&out);
        let kv = out.kv();
        assert_eq!(kv.get("write_open"), Some("-1 errno=EACCES"), "{}: {}", file.display(), out.describe());
        assert_eq!(kv.get("read_open"), Some("OK"), "{}: {}", file.display(), out.describe());
    }
    let out = run("default", &[], &[&h, "open", "/tmp/out", "/etc/passwd"]);
    assert_exited_ok(&out);
    assert!(out.kv().get("write_open").unwrap_or("").ends_with("errno=OK"), "{}", out.describe());
}

#[test]
fn bad_policies_are_clear_errors() {
    require!("bad_policies_are_clear_errors", userns_available());
    let _g = procs_shared();
    let out = capsule(&["run", "-q", "--seccomp", "nosuch", "--", "/bin/true"]).run();
    assert!(out.code.is_some() && out.code != Some(0), "{}", out.describe());
    assert!(out.stderr.contains("unknown seccomp policy `nosuch`"), "{}", out.describe());
    let dir = Scratch::new("bad-policy");
    let file = dir.write(
        "bad.toml",
        b"default_action = \"kill\"\n[[rule]]\nsyscall = [\"read\", \"frobnicate\", \"write\", \"sockett\"]\naction = \"allow\"\n",
    );
    let out = capsule(&["run", "-q", "--seccomp", &file.display().to_string(), "--", "/bin/true"]).run();
    assert!(out.code.is_some() && out.code != Some(0), "{}", out.describe());
    assert!(out.stderr.contains(&file.display().to_string()), "{}", out.describe());
    assert!(out.stderr.contains("`frobnicate`") && out.stderr.contains("`sockett`"), "{}", out.describe());
}

#[test]
fn none_installs_no_filter() {
    require!("none_installs_no_filter", userns_available());
    let _g = procs_shared();
    let out = run("none", &[], &["/bin/sh", "-c", "grep Seccomp: /proc/self/status"]);
    assert_exited_ok(&out);
    assert!(out.stdout.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "0"], "{}", out.describe());
    let out = run("default", &[], &["/bin/sh", "-c", "grep Seccomp: /proc/self/status"]);
    assert_exited_ok(&out);
    assert!(out.stdout.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"], "{}", out.describe());
}
