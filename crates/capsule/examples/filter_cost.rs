//! Prints each built-in policy's BPF length, how long capsule took to
//! compile it (the first compile in this process), and what installing it costs:
//! 200 forked children each install the filter once and report the time
//! the seccomp(2) call took; the median and the 10th percentile.
//!
//! `cargo run --release -p capsule --example filter_cost`
use capsule::plan::seccomp::{compile, with_guards, Guards, PolicyName};
use std::time::Instant;

/// Forks a child that installs `prog` and reports how long that took (ns;
/// `u64::MAX` if the kernel refused the filter).
fn install_once(prog: &[libc::sock_filter]) -> u64 {
    let mut pipe = [0i32; 2];
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut _ };
    // SAFETY: plain syscalls on memory owned by this frame. The child only
    // makes syscalls (no allocation) before _exit, as a forked child of a
    // single-threaded process may; the parent reads 8 bytes into a u64.
    unsafe {
        assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0, "pipe");
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            let t = Instant::now();
            let r = libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &fprog as *const _);
            let v: u64 = if r == 0 { t.elapsed().as_nanos() as u64 } else { u64::MAX };
            libc::write(pipe[1], &v as *const u64 as *const _, 8);
            libc::_exit(0);
        }
        let mut v = u64::MAX;
        libc::read(pipe[0], &mut v as *mut u64 as *mut _, 8);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
        v
    }
}

fn main() {
    let vsock = Guards { vsock: true, ..Guards::default() };
    let all = Guards { ports: true, vsock: true, keep_size: true };
    let runs = ["default", "strict", "compile", "python", "jvm", "go", "bash"].map(|n| (n, n, Guards::default()));
    let guarded = [("default", "default+vsock", vsock), ("default", "default+all", all), ("none", "none+all", all)];
    for (name, label, guards) in runs.into_iter().chain(guarded) {
        let policy: PolicyName = serde_json::from_value(serde_json::json!(name)).expect("a built-in policy name");
        let t = Instant::now();
        let filter = compile(&policy).unwrap_or_else(|e| panic!("compiling {name}: {e}"));
        // The run's guards (docs/seccomp.md): `default` without --share-net has the vsock one.
        let filter = with_guards(&filter, guards).unwrap_or_else(|e| panic!("guarding {name}: {e}"));
        let compile_us = t.elapsed().as_secs_f64() * 1e6;
        let mut times: Vec<u64> = (0..200).map(|_| install_once(filter.program())).collect();
        assert!(times.iter().all(|&t| t != u64::MAX), "the kernel refused the {name} filter");
        times.sort_unstable();
        println!(
            "{label:14} {:4} instructions, compiled in {compile_us:7.1} us, install median {:6.1} us, p10 {:6.1} us",
            filter.program().len(),
            times[100] as f64 / 1e3,
            times[20] as f64 / 1e3
        );
    }
}
