//! The seccomp module's tests: the built-in policies and policy files
//! compiled and run through a BPF interpreter, the epilogues, the errors.
//! x86_64's numbers and ABIs (i386, x32): on x86_64 only; `arch_tests`
//! compiles for aarch64 on every host.
#![cfg(target_arch = "x86_64")]

use super::compile::native_nr;
use super::policy::{parse_toml, ArgCond, Op};
use super::*;
use crate::child::is_net_log;
use crate::sys::seccomp::*;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_NOTIFY: u32 = 0x7fc0_0000;
const fn ret_errno(e: i32) -> u32 {
    0x0005_0000 | e as u32
}

/// Runs a seccomp BPF program on one call, like the kernel.
fn run(prog: &[libc::sock_filter], arch: u32, nr: i32, args: [u64; 6]) -> u32 {
    run_bpf(prog, &seccomp_data(nr, arch, 0x7fff_1234_5678, &args)).expect("a valid program").0
}

fn nr(name: &str) -> i32 {
    native_nr(name).unwrap() as i32
}

fn native(f: &Filter, name: &str, args: [u64; 6]) -> u32 {
    run(&f.program, AUDIT_ARCH_X86_64, nr(name), args)
}

/// Every syscall without conditions in the policy returns the same
/// action whatever its arguments: what the kernel's action cache needs.
fn assert_cacheable(f: &Filter, names: &[&str]) {
    for n in names {
        let a = native(f, n, [0; 6]);
        let b = native(f, n, [u64::MAX, 1, 0x5412, 0x1_0000_0000, 7, 9]);
        assert_eq!(a, b, "{n}: the result depends on the arguments");
    }
}

#[test]
fn builtins_parse_and_compile() {
    for (name, text) in BUILTIN_POLICIES {
        let p = parse_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!p.rules.is_empty());
        let f = compile(&name.parse().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(f.program.len() > 10 && f.program.len() < 4096, "{name}: {f:?}");
        assert_eq!(f.notify, name != "default", "{name}");
    }
    assert!(compile(&PolicyName::None).unwrap().program.is_empty());
}

#[test]
fn default_policy_actions() {
    let f = compile(&PolicyName::Default).unwrap();
    let eperm = ret_errno(libc::EPERM);
    assert_eq!(native(&f, "keyctl", [0; 6]), eperm);
    assert_eq!(native(&f, "bpf", [0; 6]), eperm);
    assert_eq!(native(&f, "io_uring_setup", [0; 6]), ret_errno(libc::ENOSYS));
    assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
    assert_eq!(native(&f, "unshare", [0x1000_0000, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "mount", [0; 6]), RET_ALLOW);
    // ioctl: TIOCSTI refused whatever the upper 32 bits; others run.
    assert_eq!(native(&f, "ioctl", [0, 0x5412, 0, 0, 0, 0]), eperm);
    assert_eq!(native(&f, "ioctl", [0, 0x1_0000_5412, 0, 0, 0, 0]), eperm);
    assert_eq!(native(&f, "ioctl", [0, 0x541c, 0, 0, 0, 0]), eperm);
    assert_eq!(native(&f, "ioctl", [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW);
    // prlimit64: PID 1's limits are read, not set (whatever the upper 32
    // bits of the pid); a process's own, and another's, are set.
    assert_eq!(native(&f, "prlimit64", [1, 7, 0x1000, 0, 0, 0]), eperm, "setting PID 1's");
    assert_eq!(native(&f, "prlimit64", [0x1_0000_0001, 7, 0x1000, 0x2000, 0, 0]), eperm);
    assert_eq!(native(&f, "prlimit64", [1, 7, 0, 0x1000, 0, 0]), RET_ALLOW, "reading PID 1's");
    assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "its own");
    assert_eq!(native(&f, "prlimit64", [2, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "its child's");
    // personality: the default values and the query only.
    for ok in [0u64, 8, 0x20000, 0x20008, 0xffff_ffff, 0x1_0000_0000] {
        assert_eq!(native(&f, "personality", [ok, 0, 0, 0, 0, 0]), RET_ALLOW, "{ok:#x}");
    }
    for bad in [1u64, 0x40000, 0x400000, 0x0400_0008, 0xffff_fffe, 0x7fff_ffff, 0x1_0040_0000] {
        assert_eq!(native(&f, "personality", [bad, 0, 0, 0, 0, 0]), eperm, "{bad:#x}");
    }
    // Non-native ABIs: ENOSYS.
    assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), ret_errno(libc::ENOSYS));
    assert_eq!(run(&f.program, AUDIT_ARCH_X86_64, 0x4000_0027, [0; 6]), ret_errno(libc::ENOSYS));
    assert_cacheable(&f, &["read", "write", "openat", "clone", "execve", "keyctl", "mmap"]);
}

#[test]
fn strict_policy_actions() {
    let f = compile(&PolicyName::Strict).unwrap();
    assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
    assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&f, "fork", [0; 6]), RET_NOTIFY);
    assert_eq!(native(&f, "clone", [0; 6]), RET_NOTIFY);
    assert_eq!(native(&f, "openat", [0, 0, libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&f, "openat", [0, 0, libc::O_CREAT as u64, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), RET_NOTIFY);
    assert_eq!(run(&f.program, AUDIT_ARCH_X86_64, 0x4000_0027, [0; 6]), RET_NOTIFY);
    assert_cacheable(&f, &["read", "write", "mmap", "execve", "exit_group", "socket", "fork"]);
}

#[test]
fn language_policies_actions() {
    const THREAD: u64 = 0x3d0f00; // glibc's pthread_create flags
    const GO_THREAD: u64 = 0x50f00; // the Go runtime's
    const FORK: u64 = 0x1200011; // glibc's fork: CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD
    const NEWUSER_THREAD: u64 = THREAD | 0x1000_0000;
    let eacces = ret_errno(libc::EACCES);
    for name in [PolicyName::Python, PolicyName::Jvm, PolicyName::Go] {
        let f = compile(&name).unwrap();
        assert!(f.notify, "{name}");
        assert_eq!(native(&f, "clone", [THREAD, 0, 0, 0, 0, 0]), RET_ALLOW, "{name}");
        assert_eq!(native(&f, "clone", [GO_THREAD, 0, 0, 0, 0, 0]), RET_ALLOW, "{name}");
        assert_eq!(native(&f, "clone", [FORK, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: no processes");
        assert_eq!(native(&f, "clone", [NEWUSER_THREAD, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: no namespaces");
        assert_eq!(native(&f, "clone", [THREAD | 0x20000, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}: CLONE_NEWNS");
        assert_eq!(native(&f, "clone3", [0; 6]), ret_errno(libc::ENOSYS), "{name}");
        for call in ["fork", "vfork", "execveat", "ptrace", "mount", "unshare", "setns", "bpf", "mkdir", "unlink"] {
            assert_eq!(native(&f, call, [0; 6]), RET_NOTIFY, "{name}: {call}");
        }
        assert_eq!(
            native(&f, "openat", [0, 0, libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64, 0, 0, 0]),
            RET_ALLOW,
            "{name}"
        );
        assert_eq!(native(&f, "ioctl", [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW, "{name}: TCGETS");
        assert_eq!(native(&f, "ioctl", [0, 0x5412, 0, 0, 0, 0]), RET_NOTIFY, "{name}: TIOCSTI");
        assert_eq!(native(&f, "prlimit64", [0, 7, 0, 0x1000, 0, 0]), RET_ALLOW, "{name}: reading");
        assert_eq!(run(&f.program, AUDIT_ARCH_I386, 20, [0; 6]), RET_NOTIFY, "{name}");
        assert_cacheable(&f, &["read", "write", "mmap", "futex", "execve", "exit_group", "fork"]);
    }
    // Python: FIOCLEX and FIONCLEX; writing files kills.
    let f = compile(&PolicyName::Python).unwrap();
    assert_eq!(native(&f, "ioctl", [3, 0x5451, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "ioctl", [3, 0x1_0000_5450, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "setting limits");
    // The JVM: thread names, its own limits, EACCES for writable opens
    // and sockets, a local socket pair.
    let f = compile(&PolicyName::Jvm).unwrap();
    assert_eq!(native(&f, "prctl", [15, 0, 0, 0, 0, 0]), RET_ALLOW, "PR_SET_NAME");
    assert_eq!(native(&f, "prctl", [22, 2, 0, 0, 0, 0]), RET_NOTIFY, "PR_SET_SECCOMP");
    assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "its own descriptor limit");
    assert_eq!(native(&f, "prlimit64", [1, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "another process's");
    for flags in [
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_CREAT,
        libc::O_TRUNC,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        libc::O_RDWR | libc::O_CLOEXEC,
    ] {
        assert_eq!(native(&f, "openat", [0, 0, flags as u64, 0, 0, 0]), eacces, "{flags:#x}");
    }
    assert_eq!(native(&f, "socket", [10, 1, 0, 0, 0, 0]), eacces);
    assert_eq!(native(&f, "socketpair", [1, 1, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "socketpair", [2, 1, 0, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&f, "connect", [3, 0, 0, 0, 0, 0]), RET_NOTIFY);
    // Go: the poller.
    let f = compile(&PolicyName::Go).unwrap();
    for call in ["epoll_create1", "epoll_ctl", "epoll_pwait", "pipe2", "eventfd2", "tgkill", "sigaltstack"] {
        assert_eq!(native(&f, call, [0; 6]), RET_ALLOW, "{call}");
    }
    assert_eq!(native(&f, "prlimit64", [0, 7, 0x1000, 0, 0, 0]), RET_ALLOW, "raising its soft descriptor limit");
    assert_eq!(native(&f, "prlimit64", [1, 7, 0x1000, 0, 0, 0]), RET_NOTIFY, "another process's");
    assert_eq!(native(&f, "prctl", [0x53564d41, 0, 0, 0, 0, 0]), RET_ALLOW, "PR_SET_VMA");
    assert_eq!(native(&f, "prctl", [15, 0, 0, 0, 0, 0]), RET_NOTIFY, "other prctls");
    assert_eq!(native(&f, "openat", [0, 0, libc::O_WRONLY as u64, 0, 0, 0]), RET_NOTIFY);
    // bash: processes and files, no namespaces or network.
    let f = compile(&PolicyName::Bash).unwrap();
    for call in ["fork", "vfork", "wait4", "pipe2", "mkdir", "unlink", "rename"] {
        assert_eq!(native(&f, call, [0; 6]), RET_ALLOW, "{call}");
    }
    assert_eq!(native(&f, "clone", [FORK, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "clone", [FORK | 0x1000_0000, 0, 0, 0, 0, 0]), RET_NOTIFY, "CLONE_NEWUSER");
    assert_eq!(native(&f, "openat", [0, 0, (libc::O_WRONLY | libc::O_CREAT) as u64, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "socket", [1, 1, 0, 0, 0, 0]), eacces, "nscd");
    assert_eq!(native(&f, "socket", [2, 1, 0, 0, 0, 0]), RET_NOTIFY, "/dev/tcp");
    assert_eq!(native(&f, "ioctl", [0, 0x540f, 0, 0, 0, 0]), RET_ALLOW, "TIOCGPGRP");
    assert_eq!(native(&f, "ioctl", [0, 0x5410, 0, 0, 0, 0]), RET_NOTIFY, "TIOCSPGRP");
    for call in ["ptrace", "mount", "unshare", "chown", "setxattr", "setuid"] {
        assert_eq!(native(&f, call, [0; 6]), RET_NOTIFY, "{call}");
    }
}

#[test]
fn compile_policy_sockets() {
    let f = compile(&PolicyName::Compile).unwrap();
    let eacces = ret_errno(libc::EACCES);
    // AF_UNIX (nscd), AF_INET and AF_INET6 (the JDK's probes): EACCES.
    for family in [1u64, 2, 10, 0x1_0000_0002] {
        assert_eq!(native(&f, "socket", [family, 1, 0, 0, 0, 0]), eacces, "{family:#x}");
    }
    // Any other family: kill.
    for family in [16u64, 17, 0] {
        assert_eq!(native(&f, "socket", [family, 3, 0, 0, 0, 0]), RET_NOTIFY, "{family}");
    }
}

#[test]
fn new_listener_refused_when_notifying() {
    let eperm = ret_errno(libc::EPERM);
    for name in [PolicyName::Strict, PolicyName::Compile] {
        let f = compile(&name).unwrap();
        assert!(f.notify);
        assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), eperm, "{name}");
        assert_eq!(native(&f, "seccomp", [0x1_0000_0001, 0x9, 0, 0, 0, 0]), eperm, "{name}");
        // Other seccomp calls: the policy's default (kill).
        assert_eq!(native(&f, "seccomp", [1, 0, 0, 0, 0, 0]), RET_NOTIFY, "{name}");
    }
    // A policy allowing seccomp keeps allowing the rest.
    let text = r#"
        default_action = "kill"
        [[rule]]
        syscall = ["seccomp", "read"]
        action = "allow"
    "#;
    let f = compile_text("test", text, false).unwrap();
    assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), eperm);
    assert_eq!(native(&f, "seccomp", [0x1_0000_0001, 8, 0, 0, 0, 0]), eperm);
    assert_eq!(native(&f, "seccomp", [1, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "seccomp", [1, 0x1_0000_0000, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "seccomp", [2, 8, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "seccomp", [0, 0, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "read", [0; 6]), RET_ALLOW);
    // Without `kill`, no rule is added.
    let f = compile_text("test", "default_action = \"allow\"", false).unwrap();
    assert!(!f.notify);
    assert_eq!(native(&f, "seccomp", [1, 8, 0, 0, 0, 0]), RET_ALLOW);
}

/// A policy that refuses a process's own RLIMIT_NOFILE (7): the child
/// path sets it (the run's `limits.open_files`).
const OWN_NOFILE_REFUSED: &str = "default_action = \"allow\"\n[[rule]]\nsyscall = [\"prlimit64\"]\nargs = [{ index = 0, op = \"eq\", value = 0 }, { index = 1, op = \"eq\", value = 7 }, { index = 2, op = \"ne\", value = 0 }]\naction = \"errno 1\"";

#[test]
fn which_filters_a_prepared_tracee_installs_early() {
    let built = |n: &str| compile(&n.parse().unwrap()).unwrap();
    // `default` refuses none of the tracee's own calls (its ioctl rule
    // is about TIOCSTI and TIOCLINUX, not TIOCSCTTY); no filter at all
    // is trivially early.
    assert!(allows_tracee_epilogue(&built("default").program));
    assert!(allows_tracee_epilogue(&built("none").program));
    // The allowlists leave out Landlock, chdir, prlimit...: installed last.
    for n in ["strict", "compile", "python", "jvm", "go", "bash"] {
        assert!(!allows_tracee_epilogue(&built(n).program), "{n}");
    }
    let file = |text: &str| compile_text("test", text, false).unwrap().program;
    assert!(allows_tracee_epilogue(&file("default_action = \"allow\"")));
    // One call of the epilogue refused, or decided by its arguments.
    let deny = "default_action = \"allow\"\n[[rule]]\nsyscall = [\"chdir\"]\naction = \"errno 1\"";
    assert!(!allows_tracee_epilogue(&file(deny)));
    let by_args = "default_action = \"allow\"\n[[rule]]\nsyscall = [\"close\"]\nargs = [{ index = 0, op = \"eq\", value = 99 }]\naction = \"errno 1\"";
    assert!(!allows_tracee_epilogue(&file(by_args)));
    // Setting its own limits refused, for one resource; `default`'s rule (PID 1's) is another pid's.
    assert!(!allows_tracee_epilogue(&file(OWN_NOFILE_REFUSED)));
    // TIOCSCTTY itself refused.
    let tty = format!(
        "default_action = \"allow\"\n[[rule]]\nsyscall = [\"ioctl\"]\nargs = [{{ index = 1, op = \"eq\", value = {} }}]\naction = \"errno 1\"",
        libc::TIOCSCTTY
    );
    assert!(!allows_tracee_epilogue(&file(&tty)));
}

#[test]
fn which_filters_pid1_can_be_created_under() {
    let built = |n: &str| compile(&n.parse().unwrap()).unwrap();
    // `default`, with every combination of guards: it refuses none of the
    // child path's calls (its ioctl rule is about TIOCSTI and TIOCLINUX,
    // the guards' socket rules about vsock, MPTCP and SMC).
    for bits in 0..8 {
        let g = Guards { ports: bits & 1 != 0, vsock: bits & 2 != 0, keep_size: bits & 4 != 0 };
        assert!(allows_child_path(&with_guards(&built("default"), g).unwrap().program), "{g:?}");
    }
    // No filter: nothing to inherit. The allowlists refuse mounts, namespaces, Landlock...
    assert!(!allows_child_path(&built("none").program));
    for n in ["strict", "compile", "python", "jvm", "go", "bash"] {
        assert!(!allows_child_path(&built(n).program), "{n}");
    }
    let file = |text: &str| compile_text("test", text, false).unwrap().program;
    assert!(allows_child_path(&file("default_action = \"allow\"")));
    // One call of PID 1's refused, or decided by its arguments; the
    // loopback's datagram socket or the terminal's ioctl refused.
    assert!(!allows_child_path(&file(OWN_NOFILE_REFUSED)), "setting its own limits");
    for (call, args) in
        [("mount_setattr", ""), ("pivot_root", ""), ("unshare", "args = [{ index = 0, op = \"eq\", value = 1 }]")]
    {
        let text =
            format!("default_action = \"allow\"\n[[rule]]\nsyscall = [\"{call}\"]\n{args}\naction = \"errno 1\"");
        assert!(!allows_child_path(&file(&text)), "{call}");
    }
    let inet = format!(
        "default_action = \"allow\"\n[[rule]]\nsyscall = [\"socket\"]\nargs = [{{ index = 0, op = \"eq\", value = {} }}]\naction = \"errno 1\"",
        libc::AF_INET
    );
    assert!(!allows_child_path(&file(&inet)));
    let tty = format!(
        "default_action = \"allow\"\n[[rule]]\nsyscall = [\"ioctl\"]\nargs = [{{ index = 1, op = \"eq\", value = {} }}]\naction = \"errno 1\"",
        libc::TIOCSCTTY
    );
    assert!(!allows_child_path(&file(&tty)));
}

#[test]
fn masked_eq_and_errno_rule() {
    let text = r#"
        default_action = "allow"
        [[rule]]
        syscall = "openat"
        action = "errno EACCES"
        args = [{ index = 2, op = "masked_eq", mask = 3, value = 1 }]
        [[rule]]
        syscall = "mkdir"
        action = "errno 13"
        args = [{ index = 1, op = "gt", value = "0x1ff" }]
    "#;
    let f = compile_text("test", text, false).unwrap();
    let eacces = ret_errno(libc::EACCES);
    assert_eq!(native(&f, "openat", [0, 0, 0x41, 0, 0, 0]), eacces);
    assert_eq!(native(&f, "openat", [0, 0, 0x42, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&f, "mkdir", [0, 0x200, 0, 0, 0, 0]), eacces);
    assert_eq!(native(&f, "mkdir", [0, 0x1ff, 0, 0, 0, 0]), RET_ALLOW);
}

#[test]
fn json_and_toml_are_equivalent() {
    let toml = r#"
        default_action = "errno EPERM"
        non_native_action = "kill"
        [[rule]]
        syscall = ["read", "write"]
        action = "allow"
        [[rule]]
        syscall = "ioctl"
        action = "allow"
        args = [{ index = 1, op = "masked_eq", mask = 0xffffffff, value = 0x5401 }]
    "#;
    let json = r#"{
        "default_action": "errno EPERM",
        "non_native_action": "kill",
        "rule": [
            { "syscall": ["read", "write"], "action": "allow" },
            { "syscall": "ioctl", "action": "allow",
              "args": [{ "index": 1, "op": "masked_eq", "mask": 4294967295, "value": "0x5401" }] }
        ]
    }"#;
    let a = parse_toml(toml).unwrap();
    let b = parse_json(json).unwrap();
    assert_eq!(a, b);
    let fa = compile_text("t", toml, false).unwrap();
    let fb = compile_text("j", json, true).unwrap();
    assert_eq!(fa.program.len(), fb.program.len());
    assert!(fa.notify && fb.notify);
    assert!(fa.program.iter().zip(&fb.program).all(|(x, y)| (x.code, x.jt, x.jf, x.k) == (y.code, y.jt, y.jf, y.k)));
}

fn err(text: &str) -> String {
    match compile_text("policy.toml", text, false) {
        Ok(f) => panic!("accepted: {f:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_syscalls_are_all_listed() {
    let e = err(r#"
        default_action = "kill"
        [[rule]]
        syscall = ["read", "frobnicate"]
        action = "allow"
        [[rule]]
        syscall = "socketcall"
        action = "allow"
    "#);
    assert!(e.starts_with("policy.toml: "), "{e}");
    assert!(e.contains("`frobnicate` (rule[0])") && e.contains("`socketcall` (rule[1])"), "{e}");
}

#[test]
fn bad_actions_indexes_and_ops() {
    let e = err("default_action = \"die\"");
    assert!(e.contains("default_action") && e.contains("unknown action `die`"), "{e}");
    let e = err("default_action = \"errno EWHAT\"");
    assert!(e.contains("unknown errno `EWHAT`"), "{e}");
    let e = err("default_action = \"errno 5000\"");
    assert!(e.contains("out of range"), "{e}");
    let rule = |args: &str| {
        format!(
            "default_action = \"allow\"\n[[rule]]\nsyscall = \"ioctl\"\naction = \"errno EPERM\"\nargs = [{args}]\n"
        )
    };
    let e = err(&rule("{ index = 6, op = \"eq\", value = 1 }"));
    assert!(e.contains("rule[0].args[0]") && e.contains("index 6"), "{e}");
    let e = err(&rule("{ index = 1, op = \"like\", value = 1 }"));
    assert!(e.contains("rule[0].args[0].op") && e.contains("unknown variant `like`"), "{e}");
    let e = err(&rule("{ index = 1, op = \"masked_eq\", value = 1 }"));
    assert!(e.contains("needs a `mask`"), "{e}");
    let e = err(&rule("{ index = 1, op = \"eq\", value = 1 }, { index = 1, op = \"ne\", value = 2 }"));
    assert!(e.contains("rule[0].args[1]") && e.contains("a second condition on argument 1"), "{e}");
    let e = err(&rule("{ index = 1, op = \"eq\" }"));
    assert!(e.contains("needs a `value`"), "{e}");
    let e = err("default_action = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n");
    assert!(e.contains("is the default action"), "{e}");
}

#[test]
fn malformed_documents_name_the_field() {
    let e = err("default_action = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = 3\n");
    assert!(e.contains("rule[0].action") && e.contains("line"), "{e}");
    let e = err("default_action = \"allow\"\nrules = []\n");
    assert!(e.contains("unknown field `rules`"), "{e}");
    let e = err("default_action = ");
    assert!(e.starts_with("policy.toml: "), "{e}");
    let e = compile_text(
        "p.json",
        r#"{"default_action": "allow", "rule": [{"syscall": "read", "action": "allow", "args": [{"index": "x"}]}]}"#,
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rule[0].args[0].index"), "{e}");
    let e = compile_text("p.json", "{", true).unwrap_err().to_string();
    assert!(e.starts_with("p.json: "), "{e}");
}

#[test]
fn duplicates_and_conflicts() {
    let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = [\"write\", \"read\"]\naction = \"allow\"\n");
    assert!(e.contains("`read` in rule[0] and rule[1]: duplicate rule"), "{e}");
    let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"errno EIO\"\n");
    assert!(e.contains("conflicting rules"), "{e}");
    let e = err("default_action = \"kill\"\n[[rule]]\nsyscall = \"read\"\naction = \"allow\"\n[[rule]]\nsyscall = \"read\"\naction = \"errno EIO\"\nargs = [{ index = 0, op = \"eq\", value = 3 }]\n");
    assert!(e.contains("would be ignored"), "{e}");
}

/// A network-log filter's verdict on a call: (action, from the log).
fn net(f: &Filter, arch: u32, nr: i32, args: [u64; 6]) -> (u32, bool) {
    let data = seccomp_data(nr, arch, 0x7fff_1234_5678, &args);
    (run_bpf(&f.program, &data).expect("a valid program").0, is_net_log(&f.program, f.net_log_from, &data))
}

const LOGGED: (u32, bool) = (RET_NOTIFY, true);
const ALLOWED: (u32, bool) = (RET_ALLOW, false);
const KILLED: (u32, bool) = (RET_NOTIFY, false);

#[test]
fn net_log_under_default() {
    let f = with_net_log(&compile(&PolicyName::Default).unwrap()).unwrap();
    assert!(f.notify && f.net_log(), "{f:?}");
    let x = AUDIT_ARCH_X86_64;
    assert_eq!(net(&f, x, nr("connect"), [3, 0x1000, 16, 0, 0, 0]), LOGGED);
    assert_eq!(net(&f, x, nr("sendmsg"), [3, 0x1000, 0, 0, 0, 0]), LOGGED);
    assert_eq!(net(&f, x, nr("sendmmsg"), [3, 0x1000, 2, 0, 0, 0]), LOGGED);
    // sendto: only with an address (argument 4), all 64 bits of it.
    assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0x2000, 16]), LOGGED);
    assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0x1_0000_0000, 16]), LOGGED);
    assert_eq!(net(&f, x, nr("sendto"), [3, 0x1000, 5, 0, 0, 0]), ALLOWED);
    // Everything else as the policy says.
    assert_eq!(net(&f, x, nr("read"), [0; 6]), ALLOWED);
    assert_eq!(net(&f, x, nr("socket"), [2, 1, 0, 0, 0, 0]), ALLOWED);
    assert_eq!(net(&f, x, nr("recvfrom"), [3, 0x1000, 5, 0, 0x2000, 16]), ALLOWED);
    assert_eq!(net(&f, x, nr("keyctl"), [0; 6]), (ret_errno(libc::EPERM), false));
    assert_eq!(net(&f, x, nr("ioctl"), [0, 0x5412, 0, 0, 0, 0]), (ret_errno(libc::EPERM), false));
    // The policy refuses the other ABIs: nothing to log.
    assert_eq!(net(&f, AUDIT_ARCH_I386, 362, [0; 6]), (ret_errno(libc::ENOSYS), false));
    assert_eq!(net(&f, x, 0x4000_002a, [0; 6]), (ret_errno(libc::ENOSYS), false));
    // Calls without argument checks keep the kernel's action cache.
    assert_cacheable(&f, &["read", "write", "openat", "connect", "sendmsg", "sendmmsg", "keyctl", "socket"]);
    // The policy's own filter is unchanged.
    let plain = compile(&PolicyName::Default).unwrap();
    assert!(!plain.net_log() && !plain.notify);
    assert_eq!(native(&plain, "connect", [0; 6]), RET_ALLOW);
}

#[test]
fn net_log_under_none_covers_every_abi() {
    let f = with_net_log(&compile(&PolicyName::None).unwrap()).unwrap();
    assert!(f.notify && f.net_log() && f.program.len() < 64, "{f:?}");
    let (x, i386) = (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386);
    assert_eq!(net(&f, x, nr("connect"), [0; 6]), LOGGED);
    assert_eq!(net(&f, x, nr("getpid"), [0; 6]), ALLOWED);
    assert_eq!(net(&f, x, nr("keyctl"), [0; 6]), ALLOWED);
    // x32.
    assert_eq!(net(&f, x, 0x4000_0000 | 42, [0; 6]), LOGGED);
    assert_eq!(net(&f, x, 0x4000_0000 | 518, [0; 6]), LOGGED);
    assert_eq!(net(&f, x, 0x4000_0000 | 538, [0; 6]), LOGGED);
    assert_eq!(net(&f, x, 0x4000_0000 | 44, [0, 0, 0, 0, 8, 0]), LOGGED);
    assert_eq!(net(&f, x, 0x4000_0000 | 44, [0; 6]), ALLOWED);
    assert_eq!(net(&f, x, 0x4000_0000 | 39, [0; 6]), ALLOWED);
    // i386, direct and through socketcall (whose arguments are in
    // memory: every sendto goes to PID 1).
    for n in [362, 370, 345] {
        assert_eq!(net(&f, i386, n, [0; 6]), LOGGED, "{n}");
    }
    assert_eq!(net(&f, i386, 369, [3, 0, 0, 0, 0x8000, 16]), LOGGED);
    assert_eq!(net(&f, i386, 369, [3, 0, 0, 0, 0, 0]), ALLOWED);
    for call in [3, 11, 16, 20] {
        assert_eq!(net(&f, i386, 102, [call, 0x8000, 0, 0, 0, 0]), LOGGED, "{call}");
    }
    for call in [1, 2, 9, 12] {
        assert_eq!(net(&f, i386, 102, [call, 0x8000, 0, 0, 0, 0]), ALLOWED, "{call}");
    }
    assert_eq!(net(&f, i386, 20, [0; 6]), ALLOWED);
    // Another architecture's calls are not ours to log.
    assert_eq!(net(&f, 0xc000_00b7, 203, [0; 6]), ALLOWED);
    // What the network log decodes.
    assert_eq!(net_call(x, 42, &[0; 6]), Some((NetCall::Connect, Abi::Native, false)));
    assert_eq!(net_call(x, 0x4000_0000 | 518, &[0; 6]), Some((NetCall::Sendmsg, Abi::X32, false)));
    assert_eq!(net_call(i386, 102, &[0x1_0000_000b, 0, 0, 0, 0, 0]), Some((NetCall::Sendto, Abi::I386, true)));
    assert_eq!(net_call(i386, 102, &[1, 0, 0, 0, 0, 0]), None);
    assert_eq!(net_call(x, 41, &[0; 6]), None);
    // The numbers are the kernel's.
    assert_eq!(syscall_name(i386, 362), "i386:connect");
    assert_eq!(syscall_name(i386, 369), "i386:sendto");
    assert_eq!(syscall_name(i386, 370), "i386:sendmsg");
    assert_eq!(syscall_name(i386, 345), "i386:sendmmsg");
    assert_eq!(syscall_name(i386, 102), "i386:socketcall");
    assert_eq!(syscall_name(x, 0x4000_0000 | 518), "x32:sendmsg");
    assert_eq!(syscall_name(x, 0x4000_0000 | 538), "x32:sendmmsg");
    assert_eq!(syscall_name(x, 0x4000_0000 | 42), "x32:connect");
}

#[test]
fn net_log_keeps_the_policys_kill_and_errno() {
    let f = with_net_log(&compile(&PolicyName::Strict).unwrap()).unwrap();
    // strict kills connect (no rule: its default): still the policy's.
    assert_eq!(net(&f, AUDIT_ARCH_X86_64, nr("connect"), [0; 6]), KILLED);
    assert_eq!(net(&f, AUDIT_ARCH_X86_64, nr("read"), [0; 6]), ALLOWED);
    assert_eq!(net(&f, AUDIT_ARCH_I386, 102, [3, 0, 0, 0, 0, 0]), KILLED);
    let text = r#"
        default_action = "log"
        [[rule]]
        syscall = "connect"
        action = "errno ECONNREFUSED"
        [[rule]]
        syscall = "sendto"
        action = "kill"
        args = [{ index = 0, op = "eq", value = 5 }]
        [[rule]]
        syscall = ["read", "write"]
        action = "allow"
    "#;
    let f = with_net_log(&compile_text("t", text, false).unwrap()).unwrap();
    let x = AUDIT_ARCH_X86_64;
    assert_eq!(net(&f, x, nr("connect"), [0; 6]), (ret_errno(libc::ECONNREFUSED), false));
    assert_eq!(net(&f, x, nr("sendto"), [5, 0, 0, 0, 0x2000, 16]), KILLED);
    assert_eq!(net(&f, x, nr("sendto"), [5, 0, 0, 0, 0, 0]), KILLED);
    assert_eq!(net(&f, x, nr("sendto"), [4, 0, 0, 0, 0x2000, 16]), LOGGED);
    assert_eq!(net(&f, x, nr("sendto"), [4, 0, 0, 0, 0, 0]), (RET_LOG, false));
    assert_eq!(net(&f, x, nr("sendmsg"), [4, 0, 0, 0, 0, 0]), LOGGED);
    assert_eq!(net(&f, x, nr("getpid"), [0; 6]), (RET_LOG, false));
    assert_eq!(net(&f, x, nr("read"), [0; 6]), ALLOWED);
    // Two epilogues (allow and log), each jumped to from the policy.
    assert!(f.program.iter().filter(|i| i.code == BPF_RET_K && i.k == RET_USER_NOTIF).count() >= 2);
}

#[test]
fn guards_refuse_what_gets_around_the_limits() {
    let all = Guards { ports: true, vsock: true, keep_size: true };
    let (x, i386) = (AUDIT_ARCH_X86_64, AUDIT_ARCH_I386);
    let (eaf, eproto, eop, enosys) = (
        ret_errno(libc::EAFNOSUPPORT),
        ret_errno(libc::EPROTONOSUPPORT),
        ret_errno(libc::EOPNOTSUPP),
        ret_errno(libc::ENOSYS),
    );
    // `none`: a filter of the guards alone, every ABI.
    let f = with_guards(&compile(&PolicyName::None).unwrap(), all).unwrap();
    assert!(!f.notify && f.program.len() < 128, "{f:?}");
    for abi in [0, X32] {
        let nr = |n: i32| abi as i32 | n;
        let sock = |a: [u64; 6]| run(&f.program, x, nr(41), a);
        assert_eq!(sock([2, 1, 262, 0, 0, 0]), eproto);
        assert_eq!(sock([10, 0x80801, 0x1_0000_0106, 0, 0, 0]), eproto);
        assert_eq!(sock([2, 1, 256, 0, 0, 0]), eproto);
        assert_eq!(sock([43, 1, 0, 0, 0, 0]), eaf);
        assert_eq!(sock([0xffff_0000_0000_0028, 1, 0, 0, 0, 0]), eaf);
        assert_eq!(sock([2, 1, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(sock([2, 1, 6, 0, 0, 0]), RET_ALLOW);
        assert_eq!(sock([1, 1, 0, 0, 0, 0]), RET_ALLOW);
        let fall = |mode: u64| run(&f.program, x, nr(285), [3, mode, 0, 1 << 30, 0, 0]);
        assert_eq!(fall(0), RET_ALLOW);
        assert_eq!(fall(3), RET_ALLOW, "punching a hole frees blocks");
        for mode in [1, 0x11, 0x81, 0x5, 0x20, 0x1_0000_0001] {
            assert_eq!(fall(mode), eop, "{mode:#x}");
        }
        assert_eq!(run(&f.program, x, nr(425), [0; 6]), enosys);
    }
    assert_eq!(run(&f.program, x, 16, [3, 0x4030_582a, 0, 0, 0, 0]), eop);
    assert_eq!(run(&f.program, x, X32 as i32 | 514, [3, 0x402c_5828, 0, 0, 0, 0]), eop);
    assert_eq!(run(&f.program, x, 16, [3, 0x4030_5829, 0, 0, 0, 0]), RET_ALLOW, "FS_IOC_UNRESVSP frees");
    assert_eq!(run(&f.program, x, 16, [0, 0x5401, 0, 0, 0, 0]), RET_ALLOW);
    // i386: direct socket by its arguments, socketcall(SYS_SOCKET)
    // whatever they are (in memory), fallocate, ioctl, io_uring.
    assert_eq!(run(&f.program, i386, 359, [40, 1, 0, 0, 0, 0]), eaf);
    assert_eq!(run(&f.program, i386, 359, [1, 1, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(run(&f.program, i386, 102, [1, 0x8000, 0, 0, 0, 0]), eaf);
    assert_eq!(run(&f.program, i386, 102, [3, 0x8000, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(run(&f.program, i386, 324, [3, 1, 0, 0, 0, 0]), eop);
    assert_eq!(run(&f.program, i386, 54, [3, 0x402c_582a, 0, 0, 0, 0]), eop);
    assert_eq!(run(&f.program, i386, 425, [0; 6]), enosys);
    assert_eq!(run(&f.program, 0xc000_00b7, 41, [40, 1, 0, 0, 0, 0]), RET_ALLOW);
    // Each guard alone refuses only its own.
    let only = |g: Guards| with_guards(&compile(&PolicyName::Default).unwrap(), g).unwrap();
    let vsock = only(Guards { vsock: true, ..Guards::default() });
    assert_eq!(native(&vsock, "socket", [40, 1, 0, 0, 0, 0]), eaf);
    assert_eq!(native(&vsock, "socket", [2, 1, 262, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&vsock, "fallocate", [3, 1, 0, 0, 0, 0]), RET_ALLOW);
    let ports = only(Guards { ports: true, ..Guards::default() });
    assert_eq!(native(&ports, "socket", [40, 1, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&ports, "socket", [2, 1, 262, 0, 0, 0]), eproto);
    let keep = only(Guards { keep_size: true, ..Guards::default() });
    assert_eq!(native(&keep, "socket", [40, 1, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(native(&keep, "fallocate", [3, 1, 0, 0, 0, 0]), eop);
    // The policy's own verdicts stay (default's errnos, strict's kill),
    // other calls keep the action cache, the tracee's epilogue passes.
    let d = only(all);
    assert_eq!(native(&d, "keyctl", [0; 6]), ret_errno(libc::EPERM));
    assert_eq!(native(&d, "ioctl", [0, 0x5412, 0, 0, 0, 0]), ret_errno(libc::EPERM));
    assert_eq!(run(&d.program, i386, 359, [2, 1, 0, 0, 0, 0]), enosys);
    assert_cacheable(&d, &["read", "write", "openat", "connect", "keyctl", "mmap"]);
    assert!(allows_tracee_epilogue(&d.program));
    let s = with_guards(&compile(&PolicyName::Strict).unwrap(), all).unwrap();
    assert!(s.notify);
    assert_eq!(native(&s, "socket", [40, 1, 0, 0, 0, 0]), RET_NOTIFY);
    assert_eq!(native(&s, "read", [0; 6]), RET_ALLOW);
    // No guard: the policy's filter as it is; with the network log on
    // top, both hold.
    let plain = compile(&PolicyName::Default).unwrap();
    assert_eq!(only(Guards::default()).program.len(), plain.program.len());
    let l = with_net_log(&d).unwrap();
    assert_eq!(net(&l, x, nr("socket"), [40, 1, 0, 0, 0, 0]), (eaf, false));
    assert_eq!(net(&l, x, nr("connect"), [3, 0, 16, 0, 0, 0]), LOGGED);
    assert_eq!(net(&l, x, nr("socket"), [2, 1, 0, 0, 0, 0]), ALLOWED);
}

#[test]
fn bpf_interpreter_refuses_bad_programs() {
    let i = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let d = seccomp_data(1, AUDIT_ARCH_X86_64, 0, &[7, 0, 0, 0, 0, 0]);
    // Arithmetic, scratch memory, X, ret A.
    let prog = [
        i(BPF_LD_W_ABS, 0, 0, 16),
        i(0x04, 0, 0, 5),   // A += 5
        i(BPF_ST, 0, 0, 3), // M[3] = A
        i(BPF_LDX_IMM, 0, 0, 2),
        i(0x2c, 0, 0, 0), // A *= X
        i(0x3d, 1, 0, 0), // if A >= X skip 1
        i(BPF_RET_K, 0, 0, 0),
        i(BPF_LDX_MEM, 0, 0, 3),
        i(0xac, 0, 0, 0), // A ^= X
        i(BPF_RET_A, 0, 0, 0),
    ];
    assert_eq!(run_bpf(&prog, &d), Some((24 ^ 12, 9)));
    // Out of range: a load, a jump, falling off the end, a slot, an
    // unknown opcode, a division by zero.
    assert_eq!(run_bpf(&[i(BPF_LD_W_ABS, 0, 0, 64), i(BPF_RET_A, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[i(BPF_LD_W_ABS, 0, 0, 2), i(BPF_RET_A, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[i(BPF_JA, 0, 0, 5), i(BPF_RET_A, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[i(BPF_JA, 0, 0, u32::MAX)], &d), None);
    assert_eq!(run_bpf(&[i(BPF_LD_IMM, 0, 0, 1)], &d), None);
    assert_eq!(run_bpf(&[i(BPF_ST, 0, 0, 16), i(BPF_RET_A, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[i(0xff, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[i(0x3c, 0, 0, 0), i(BPF_RET_A, 0, 0, 0)], &d), None);
    assert_eq!(run_bpf(&[], &d), None);
}

#[test]
fn syscall_names() {
    assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 41), "socket");
    assert_eq!(syscall_name(AUDIT_ARCH_I386, 20), "i386:getpid");
    assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 0x4000_0000), "x32:read");
    assert_eq!(syscall_name(AUDIT_ARCH_X86_64, 99999), "syscall 99999");
    assert!(syscall_name(0x1234, 1).starts_with("syscall 1"));
}

/// What a policy means for one call, read off the document itself (not
/// the compiler's rules): the ABI check, the automatic NEW_LISTENER rule
/// where the policy uses `kill`, then the first rule, in the file's order,
/// naming the call whose conditions all hold, else the default. `nrs`:
/// the numbers each rule names.
fn intended(p: &Policy, nrs: &[Vec<u32>], arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
    let non_native = p.non_native_action.unwrap_or(match p.default_action {
        Action::Allow | Action::Log => Action::Errno(libc::ENOSYS as u16),
        a => a,
    });
    if arch != AUDIT_ARCH_X86_64 || (nr >= X32 && nr != u32::MAX) {
        return non_native.ret();
    }
    let kill =
        [p.default_action, non_native].contains(&Action::Kill) || p.rules.iter().any(|r| r.action == Action::Kill);
    if kill && nr == libc::SYS_seccomp as u32 && args[0] as u32 == 1 && args[1] & 8 != 0 {
        return ret_errno(libc::EPERM);
    }
    let holds = |c: &ArgCond| {
        let a = args[c.index as usize];
        let v = c.value.map(|v| v.0).unwrap_or(0);
        match c.op {
            Op::Eq => a == v,
            Op::Ne => a != v,
            Op::Lt => a < v,
            Op::Le => a <= v,
            Op::Gt => a > v,
            Op::Ge => a >= v,
            Op::MaskedEq => a & c.mask.unwrap().0 == v,
            Op::NotIn => c.values.as_ref().unwrap().iter().all(|x| x.0 != a & 0xffff_ffff),
        }
    };
    for (r, rule_nrs) in p.rules.iter().zip(nrs) {
        if rule_nrs.contains(&nr) && r.args.iter().all(holds) {
            return r.action.ret();
        }
    }
    p.default_action.ret()
}

/// xorshift64: inputs that differ from run to run of the loop, the same
/// in every test run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn args(&mut self) -> [u64; 6] {
        std::array::from_fn(|_| self.next())
    }
}

/// Runs `text`'s filter over many calls and checks each verdict against
/// [`intended`]: every number of every ABI with a few argument vectors, and
/// the native numbers with conditions with arguments made of the policy's
/// own constants and their neighbours (each half off by one, the other
/// half set).
fn check_meaning(what: &str, text: &str) {
    let p = parse_toml(text).unwrap_or_else(|e| panic!("{what}: {e}"));
    let f = compile_text(what, text, false).unwrap_or_else(|e| panic!("{what}: {e}"));
    let named: Vec<Vec<u32>> =
        p.rules.iter().map(|r| r.syscall.names().iter().map(|n| nr(n) as u32).collect()).collect();
    let mut consts = vec![0u64, 1, 8, u64::MAX];
    let mut hot = vec![libc::SYS_seccomp as u32];
    for r in &p.rules {
        for c in &r.args {
            for v in c.value.iter().chain(&c.mask).chain(c.values.iter().flatten()) {
                consts.extend([v.0, !v.0]);
            }
        }
        if !r.args.is_empty() {
            hot.extend(r.syscall.names().iter().map(|n| native_nr(n).unwrap()));
        }
    }
    let mut near = Vec::new();
    for v in consts {
        let up = 1 << 32;
        for w in [
            v,
            v.wrapping_add(1),
            v.wrapping_sub(1),
            v.wrapping_add(up),
            v.wrapping_sub(up),
            v | !0xffff_ffff,
            v & 0xffff_ffff,
            v << 32,
        ] {
            if !near.contains(&w) {
                near.push(w);
            }
        }
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut nrs: Vec<u32> = (0..480).collect();
    nrs.extend([0x3fff_ffff, X32, X32 | 1, X32 | 41, X32 | 514, 0x7fff_ffff, 0x8000_0000, u32::MAX]);
    let mut checked = 0;
    for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, 0xc000_00b7] {
        for &n in &nrs {
            let mut inputs = vec![[0; 6], [u64::MAX; 6], rng.args()];
            if arch == AUDIT_ARCH_X86_64 && hot.contains(&n) {
                for i in 0..6 {
                    for &w in &near {
                        let mut a = if rng.next() % 2 == 0 { rng.args() } else { [0; 6] };
                        a[i] = w;
                        inputs.push(a);
                    }
                }
                for _ in 0..200 {
                    inputs.push(std::array::from_fn(|_| near[rng.next() as usize % near.len()]));
                }
            }
            for args in inputs {
                let got = run(&f.program, arch, n as i32, args);
                assert_eq!(
                    got,
                    intended(&p, &named, arch, n, &args),
                    "{what}: arch {arch:#x} nr {n:#x} args {args:x?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 3 * nrs.len() * 3, "{what}: {checked}");
}

#[test]
fn builtin_policies_mean_what_they_say() {
    for (name, text) in BUILTIN_POLICIES {
        check_meaning(name, text);
    }
}

/// Every comparison, 64-bit values with both halves set, `log` and `allow`
/// for the other ABIs, overlapping rules (the first wins), rules for
/// `seccomp` next to the NEW_LISTENER rule.
const POLICIES: &[&str] = &[
    r#"default_action = "errno EPERM"
non_native_action = "log"
[[rule]]
syscall = "openat"
action = "allow"
args = [{ index = 0, op = "lt", value = "0x100000005" }, { index = 1, op = "le", value = "0xffffffff00000003" }, { index = 2, op = "gt", value = "0x80000000" }]
[[rule]]
syscall = "openat"
action = "errno 13"
args = [{ index = 3, op = "ge", value = "0x1fffffffe" }, { index = 4, op = "ne", value = "0x700000007" }, { index = 5, op = "masked_eq", mask = "0xf0000000f", value = "0x100000001" }]
[[rule]]
syscall = "mkdir"
action = "kill"
args = [{ index = 1, op = "not_in", values = [0, 1, 0x80000000, 0xffffffff, 0x5412] }, { index = 0, op = "eq", value = 3 }]
[[rule]]
syscall = "mkdir"
action = "allow"
args = [{ index = 0, op = "ne", value = 3 }, { index = 2, op = "not_in", values = [7] }]
[[rule]]
syscall = ["close", "fsync"]
action = "allow"
args = [{ index = 0, op = "le", value = 0 }]
[[rule]]
syscall = "dup"
action = "allow"
args = [{ index = 0, op = "ge", value = "0xffffffffffffffff" }]
[[rule]]
syscall = "dup2"
action = "allow"
args = [{ index = 0, op = "lt", value = "0x100000000" }]
[[rule]]
syscall = "dup3"
action = "log"
args = [{ index = 0, op = "gt", value = "0xffffffff" }]
[[rule]]
syscall = "dup3"
action = "allow"
args = [{ index = 0, op = "gt", value = "0xfffffff0" }]
[[rule]]
syscall = ["getpid", "getppid", "gettid", "exit_group", "exit", "brk", "mmap", "munmap", "read"]
action = "allow"
[[rule]]
syscall = ["mseal", "futex_requeue", "io_pgetevents"]
action = "errno 0"
"#,
    r#"default_action = "kill"
non_native_action = "allow"
[[rule]]
syscall = "seccomp"
action = "allow"
args = [{ index = 2, op = "eq", value = 0 }]
[[rule]]
syscall = "seccomp"
action = "errno EINVAL"
args = [{ index = 2, op = "ne", value = 0 }]
[[rule]]
syscall = "ioctl"
action = "allow"
args = [{ index = 1, op = "masked_eq", mask = 0, value = 0 }]
[[rule]]
syscall = "personality"
action = "log"
args = [{ index = 0, op = "masked_eq", mask = "0xffffffff00000000", value = "0x100000000" }]
"#,
    r#"default_action = "allow"
[[rule]]
syscall = "seccomp"
action = "kill"
[[rule]]
syscall = "read"
action = "errno EIO"
args = [{ index = 0, op = "masked_eq", mask = "0xff00", value = "0x1200" }]
"#,
    r#"default_action = "log"
[[rule]]
syscall = "seccomp"
action = "errno EPERM"
[[rule]]
syscall = "write"
action = "kill"
"#,
];

#[test]
fn policy_files_mean_what_they_say() {
    for (i, text) in POLICIES.iter().enumerate() {
        check_meaning(&format!("policy {i}"), text);
    }
}

#[test]
fn big_policies_jump_through_ja() {
    // A `not_in` longer than a conditional jump reaches, and a rule with
    // conditions for every syscall: the tree's and the rules' far targets
    // go through `ja`.
    let values: Vec<String> = (0..300).map(|v| (v * 7).to_string()).collect();
    let mut text = format!(
        "default_action = \"kill\"\n[[rule]]\nsyscall = \"ioctl\"\naction = \"errno EPERM\"\nargs = [{{ index = 1, op = \"not_in\", values = [{}] }}]\n",
        values.join(", ")
    );
    for n in ["read", "write", "openat", "close", "mmap", "brk", "futex", "getpid", "clone", "wait4", "kill"] {
        for k in 0..12 {
            text += &format!(
                "[[rule]]\nsyscall = \"{n}\"\naction = \"errno {}\"\nargs = [{{ index = 0, op = \"eq\", value = {k} }}, {{ index = 1, op = \"gt\", value = \"0x{k}00000000\" }}]\n",
                k + 1
            );
        }
    }
    let f = compile_text("big", &text, false).unwrap();
    assert!(f.program.iter().any(|i| i.code == BPF_JA), "{f:?}");
    check_meaning("big", &text);
    assert_kernel_accepts("big", &f.program);
    let everything: Vec<&str> = (0..480).filter_map(names::x86_64_name).collect();
    let text = format!(
        "default_action = \"kill\"\n[[rule]]\nsyscall = {everything:?}\naction = \"allow\"\nargs = [{{ index = 3, op = \"masked_eq\", mask = 1, value = 0 }}]\n"
    );
    let f = compile_text("every syscall", &text, false).unwrap();
    assert!(f.program.len() < 4096 && f.program.iter().any(|i| i.code == BPF_JA), "{f:?}");
    check_meaning("every syscall", &text);
    assert_kernel_accepts("every syscall", &f.program);
}

#[test]
fn not_in_is_exact() {
    let text = r#"
        default_action = "allow"
        [[rule]]
        syscall = "personality"
        action = "errno EPERM"
        args = [{ index = 0, op = "not_in", values = [0, 8, 0x20000, 0x20008, 0xffffffff] }]
    "#;
    let f = compile_text("t", text, false).unwrap();
    for x in [0u64, 8, 0x20000, 0x20008, 0xffff_ffff, 0x5_0000_0008] {
        assert_eq!(native(&f, "personality", [x, 0, 0, 0, 0, 0]), RET_ALLOW, "{x:#x}");
    }
    for x in [1u64, 7, 9, 0x10, 0x20001, 0x40000, 0x8000_0000, 0xffff_fffe, 0x7fff_ffff, 0x1_1234_5678] {
        assert_eq!(native(&f, "personality", [x, 0, 0, 0, 0, 0]), ret_errno(libc::EPERM), "{x:#x}");
    }
}

#[test]
fn no_call_is_not_x32() {
    // -1 (a tracer skipping the call) has the x32 bit but is no x32 call.
    for (name, _) in BUILTIN_POLICIES {
        let f = compile(&name.parse().unwrap()).unwrap();
        let p = parse_toml(BUILTIN_POLICIES.iter().find(|b| b.0 == name).unwrap().1).unwrap();
        assert_eq!(run(&f.program, AUDIT_ARCH_X86_64, -1, [0; 6]), p.default_action.ret(), "{name}");
    }
}

#[test]
fn syscall_table() {
    // Names and numbers are unique both ways.
    let mut seen = std::collections::BTreeMap::new();
    for n in 0..1024u32 {
        if let Some(name) = names::x86_64_name(n) {
            assert_eq!(native_nr(name), Some(n), "{name}");
            assert!(seen.insert(name, n).is_none(), "{name} twice");
        }
    }
    assert!(seen.len() > 360, "{}", seen.len());
    for (name, nr) in [
        ("read", 0),
        ("socket", 41),
        ("seccomp", 317),
        ("io_pgetevents", 333),
        ("create_module", 174),
        ("futex_requeue", 456),
        ("map_shadow_stack", 453),
        ("mseal", 462),
    ] {
        assert_eq!(native_nr(name), Some(nr), "{name}");
    }
    for bad in ["socketcall", "SYS_read", "Read", "", "read\0", "sigaction"] {
        assert_eq!(native_nr(bad), None, "{bad:?}");
    }
    // x32: the native names but for the calls x32 has its own entries for.
    let x = AUDIT_ARCH_X86_64;
    assert_eq!(syscall_name(x, (X32 | 512) as i32), "x32:rt_sigaction");
    assert_eq!(syscall_name(x, (X32 | 547) as i32), "x32:pwritev2");
    assert_eq!(syscall_name(x, (X32 | 13) as i32), format!("x32:syscall {}", X32 | 13));
    assert_eq!(syscall_name(x, (X32 | 548) as i32), format!("x32:syscall {}", X32 | 548));
    assert_eq!(syscall_name(x, (X32 | 41) as i32), "x32:socket");
    // i386, holes included.
    assert_eq!(syscall_name(AUDIT_ARCH_I386, 0), "i386:restart_syscall");
    assert_eq!(syscall_name(AUDIT_ARCH_I386, 11), "i386:execve");
    assert_eq!(syscall_name(AUDIT_ARCH_I386, 222), "i386:syscall 222");
    assert_eq!(syscall_name(AUDIT_ARCH_I386, 456), "i386:futex_requeue");
    assert_eq!(syscall_name(AUDIT_ARCH_I386, -1), "i386:syscall -1");
    assert_eq!(syscall_name(x, -1), "syscall -1");
}

/// The kernel's checker takes `prog`: a forked child installs it, with
/// `exit_group` allowed ahead of it (jumps are relative: the program's own
/// stay as they are) so that the child can report.
fn assert_kernel_accepts(what: &str, prog: &[libc::sock_filter]) {
    let i = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut with_exit =
        vec![i(BPF_LD_W_ABS, 0, 0, 0), i(BPF_JEQ_K, 0, 1, libc::SYS_exit_group as u32), i(BPF_RET_K, 0, 0, RET_ALLOW)];
    with_exit.extend_from_slice(prog);
    let prog = &with_exit;
    // SAFETY: the child makes only system calls (no allocation, no lock)
    // before _exit, as a forked child of a multi-threaded process may.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        let ok = crate::sys::seccomp_install(prog, false).is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a live local.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{what}: the kernel refused it ({status:#x})");
}

#[test]
fn the_kernel_accepts_every_filter() {
    let all = Guards { ports: true, vsock: true, keep_size: true };
    for (name, _) in BUILTIN_POLICIES {
        let f = compile(&name.parse().unwrap()).unwrap();
        assert_kernel_accepts(name, &f.program);
        assert_kernel_accepts(name, &with_net_log(&with_guards(&f, all).unwrap()).unwrap().program);
    }
    for (i, text) in POLICIES.iter().enumerate() {
        assert_kernel_accepts(&format!("policy {i}"), &compile_text("t", text, false).unwrap().program);
    }
}
