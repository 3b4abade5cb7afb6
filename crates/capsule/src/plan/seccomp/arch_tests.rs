//! Policies compiled for aarch64 (on any host, through the BPF
//! interpreter): the names it lacks carried over to the calls it makes
//! instead, so that a built-in policy decides the same operation the
//! same way on both architectures.

use super::compile::{compile_policy_for, Arch};
use super::names;
use super::policy::parse_toml;
use super::*;
use crate::sys::seccomp::*;

fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    run_bpf(prog, &seccomp_data(nr as i32, arch, 0x7fff_1234_5678, &args)).expect("a valid program").0
}

fn compile(arch: Arch, text: &str) -> Filter {
    compile_policy_for(&parse_toml(text).unwrap(), arch).unwrap()
}

fn a64(f: &Filter, name: &str, args: [u64; 6]) -> u32 {
    run(&f.program, AUDIT_ARCH_AARCH64, names::aarch64_nr(name).unwrap(), args)
}

fn x86(f: &Filter, name: &str, args: [u64; 6]) -> u32 {
    run(&f.program, AUDIT_ARCH_X86_64, names::x86_64_nr(name).unwrap(), args)
}

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_NOTIFY: u32 = 0x7fc0_0000;
const fn ret_errno(e: i32) -> u32 {
    0x0005_0000 | e as u32
}

/// `args` of an x86_64 call as aarch64 makes it with its successor.
fn carried(s: &names::Successor, args: [u64; 6]) -> [u64; 6] {
    let mut out = [0u64; 6];
    for (i, to) in s.args.iter().enumerate() {
        if let Some(to) = to {
            out[*to as usize] = args[i];
        }
    }
    for &(i, f) in s.fixed {
        out[i as usize] = match f {
            names::Fixed::Int(v) => u64::from(v),
            names::Fixed::Long(v) => v,
        };
    }
    out
}

#[test]
fn builtins_decide_the_same_operations_on_both() {
    // Arguments that tell the rules apart: zeros, O_WRONLY|O_CREAT (the
    // read-only rules), TCGETS, a pointer-like value.
    let samples = [[0u64; 6], [0x7f00_0000_1000, 0x41, 0o644, 0, 0, 0], [3, 0x5401, 0, 0, 0, 0], [1, 2, 3, 4, 0, 0]];
    for (name, text) in BUILTIN_POLICIES {
        let x = compile(Arch::X86_64, text);
        let a = compile(Arch::Aarch64, text);
        // Every call both have.
        for nr in 0..500 {
            let Some(call) = names::x86_64_name(nr) else { continue };
            if names::aarch64_nr(call).is_none() {
                continue;
            }
            for args in samples {
                assert_eq!(x86(&x, call, args), a64(&a, call, args), "{name}: {call}{args:?}");
            }
        }
        // Every call aarch64 makes with another: that form decides as the
        // x86_64 call, unless the policy names the new call itself with
        // another verdict for the same arguments (then x86_64's new call,
        // which its C library makes too, decides alike).
        for nr in 0..500 {
            let Some(call) = names::x86_64_name(nr) else { continue };
            let Some(s) = names::aarch64_successor(call) else { continue };
            for args in samples {
                let mapped = carried(s, args);
                let got = a64(&a, s.name, mapped);
                let old = x86(&x, call, args);
                let new = x86(&x, s.name, mapped);
                assert!(got == old || got == new, "{name}: {call}{args:?} is {old:#x} on x86_64, {got:#x} on aarch64");
                if new == run(&x.program, AUDIT_ARCH_X86_64, 1000, [0; 6]) && old != new {
                    // The policy rules on the old call only: its verdict carries over.
                    assert_eq!(got, old, "{name}: {call}{args:?} carried over to {}", s.name);
                }
            }
        }
        // 32-bit ARM is the non-native ABI there.
        assert_eq!(
            run(&a.program, AUDIT_ARCH_ARM, 3, [0; 6]),
            run(&x.program, AUDIT_ARCH_I386, 3, [0; 6]),
            "{name}: non-native"
        );
    }
}

#[test]
fn a_rule_on_a_call_aarch64_lacks_covers_its_form_of_the_new_call() {
    let f = compile(
        Arch::Aarch64,
        r#"
default_action = "allow"
[[rule]]
syscall = "open"
action = "errno EACCES"
args = [{ index = 1, op = "masked_eq", mask = 3, value = 1 }]
[[rule]]
syscall = ["fork", "arch_prctl"]
action = "errno EPERM"
"#,
    );
    let fdcwd = -100i64 as u64;
    // open(path, O_WRONLY) is openat(AT_FDCWD, path, O_WRONLY).
    assert_eq!(a64(&f, "openat", [fdcwd, 0x1000, 1, 0, 0, 0]), ret_errno(libc::EACCES));
    assert_eq!(a64(&f, "openat", [fdcwd & 0xffff_ffff, 0x1000, 1, 0, 0, 0]), ret_errno(libc::EACCES), "an int");
    assert_eq!(a64(&f, "openat", [fdcwd, 0x1000, 0, 0, 0, 0]), RET_ALLOW, "O_RDONLY");
    assert_eq!(a64(&f, "openat", [5, 0x1000, 1, 0, 0, 0]), RET_ALLOW, "another directory: openat's own");
    // fork() is clone(SIGCHLD, 0); a thread is not.
    assert_eq!(a64(&f, "clone", [17, 0, 0, 0, 0, 0]), ret_errno(libc::EPERM));
    assert_eq!(a64(&f, "clone", [0x3d0f00, 0x7000, 0, 0, 0, 0]), RET_ALLOW);
    // arch_prctl has no counterpart: accepted, matches nothing.
    assert_eq!(a64(&f, "prctl", [0; 6]), RET_ALLOW);
}

#[test]
fn the_new_calls_own_rules_come_after_the_carried_ones() {
    let text = r#"
default_action = "kill"
[[rule]]
syscall = ["open", "openat"]
action = "allow"
[[rule]]
syscall = "stat"
action = "errno ENOENT"
[[rule]]
syscall = "newfstatat"
action = "allow"
"#;
    let f = compile(Arch::Aarch64, text);
    let fdcwd = -100i64 as u64;
    assert_eq!(a64(&f, "openat", [fdcwd, 1, 2, 3, 0, 0]), RET_ALLOW);
    assert_eq!(a64(&f, "openat", [4, 1, 2, 3, 0, 0]), RET_ALLOW);
    assert_eq!(a64(&f, "newfstatat", [fdcwd, 1, 2, 0, 0, 0]), ret_errno(libc::ENOENT), "stat(path, buf)");
    assert_eq!(a64(&f, "newfstatat", [fdcwd, 1, 2, 0x100, 0, 0]), RET_ALLOW, "lstat: newfstatat's own rule");
    assert_eq!(a64(&f, "read", [0; 6]), RET_NOTIFY);
    // A carried rule that decides as the call's own is left out: `open`
    // next to an unconditional `openat` with the same action adds nothing.
    let both = compile(
        Arch::Aarch64,
        "default_action = \"kill\"\n[[rule]]\nsyscall = [\"open\", \"openat\"]\naction = \"allow\"\n",
    );
    let alone =
        compile(Arch::Aarch64, "default_action = \"kill\"\n[[rule]]\nsyscall = \"openat\"\naction = \"allow\"\n");
    let ins = |f: &Filter| f.program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect::<Vec<_>>();
    assert_eq!(ins(&both), ins(&alone));
}

#[test]
fn aarch64_names_and_errors() {
    let bad = compile_policy_for(
        &parse_toml("default_action = \"allow\"\n[[rule]]\nsyscall = \"no_such_call\"\naction = \"errno EPERM\"\n")
            .unwrap(),
        Arch::Aarch64,
    );
    assert_eq!(bad.err().as_deref(), Some("unknown syscall names: `no_such_call` (rule[0])"));
    // poll's timeout (an int) is a timespec pointer in ppoll.
    let moved = compile_policy_for(
        &parse_toml(
            "default_action = \"allow\"\n[[rule]]\nsyscall = \"poll\"\naction = \"errno EPERM\"\n\
             args = [{ index = 2, op = \"eq\", value = 0 }]\n",
        )
        .unwrap(),
        Arch::Aarch64,
    );
    let e = moved.err().unwrap();
    assert!(e.contains("argument 2 of `poll`") && e.contains("`ppoll`"), "{e}");
    // aarch64's own names that x86_64's table lacks.
    compile(
        Arch::Aarch64,
        "default_action = \"allow\"\n[[rule]]\nsyscall = \"statmount\"\naction = \"errno ENOSYS\"\n",
    );
    assert_eq!(syscall_name(AUDIT_ARCH_AARCH64, 56), "openat");
    assert_eq!(syscall_name(AUDIT_ARCH_AARCH64, 9999), "syscall 9999");
    assert_eq!(syscall_name(AUDIT_ARCH_ARM, 5), "arm:syscall 5");
    // Every successor is an aarch64 call, every name it stands for an x86_64 one aarch64 lacks.
    for nr in 0..500 {
        let Some(call) = names::x86_64_name(nr) else { continue };
        if let Some(s) = names::aarch64_successor(call) {
            assert!(names::aarch64_nr(call).is_none() && names::aarch64_nr(s.name).is_some(), "{call}");
        }
    }
}

/// A table's lookup and `libc` constants to check it against.
type Known = (fn(&str) -> Option<u32>, &'static [(&'static str, libc::c_long)]);

/// The tables against the `libc` crate's numbers of the build's own
/// architecture.
#[test]
fn the_native_table_is_libcs() {
    #[cfg(target_arch = "x86_64")]
    let (nr, known): Known = (
        names::x86_64_nr,
        &[
            ("read", libc::SYS_read),
            ("open", libc::SYS_open),
            ("clone3", libc::SYS_clone3),
            ("seccomp", libc::SYS_seccomp),
            ("newfstatat", libc::SYS_newfstatat),
            ("mseal", libc::SYS_mseal),
        ],
    );
    #[cfg(target_arch = "aarch64")]
    let (nr, known): Known = (
        names::aarch64_nr,
        &[
            ("read", libc::SYS_read),
            ("openat", libc::SYS_openat),
            ("clone3", libc::SYS_clone3),
            ("seccomp", libc::SYS_seccomp),
            ("newfstatat", libc::SYS_newfstatat),
            ("ppoll", libc::SYS_ppoll),
            ("mseal", libc::SYS_mseal),
        ],
    );
    for &(name, n) in known {
        assert_eq!(nr(name), Some(n as u32), "{name}");
    }
}
