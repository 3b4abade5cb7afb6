//! Processes: kill-all, daemons, process trees, forks.

use std::io::{self, Write};
use std::time::Duration;

use crate::{cstr, die, errno, errno_name, hold, out, res};

pub(crate) fn cmd_kill_all(code: i32) -> ! {
    // SAFETY: kill() takes no pointers; ignoring SIGTERM/SIGINT/... for
    // ourselves is not needed: kill(-1) never signals the caller.
    unsafe {
        out("kill_minus1_sig0", res(libc::kill(-1, 0) as i64));
        out("kill_minus1_sigterm", res(libc::kill(-1, libc::SIGTERM) as i64));
        out("kill_minus1_sigkill", res(libc::kill(-1, libc::SIGKILL) as i64));
        out("ppid", libc::getppid());
        for (name, sig) in [
            ("sighup", libc::SIGHUP),
            ("sigint", libc::SIGINT),
            ("sigterm", libc::SIGTERM),
            ("sigusr1", libc::SIGUSR1),
            ("sigstop", libc::SIGSTOP),
            ("sigcont", libc::SIGCONT),
            ("sigkill", libc::SIGKILL),
        ] {
            out(&format!("kill_1_{name}"), res(libc::kill(1, sig) as i64));
        }
        let ppid = libc::getppid();
        if ppid > 1 {
            out("kill_ppid_sigkill", res(libc::kill(ppid, libc::SIGKILL) as i64));
        }
    }
    // Give any delivered signal time to act before reporting survival.
    std::thread::sleep(Duration::from_millis(100));
    out("survived", 1);
    out("done", 1);
    std::process::exit(code)
}

/// Replaces the calling (forked) process by `capsule-probe hold held:MARKER`.
fn exec_hold(marker: &str) -> ! {
    let exe = cstr("/proc/self/exe");
    let a0 = cstr("capsule-probe");
    let a1 = cstr("hold");
    let a2 = cstr(&format!("held:{marker}"));
    let argv = [a0.as_ptr(), a1.as_ptr(), a2.as_ptr(), std::ptr::null()];
    // SAFETY: argv is a NULL-terminated array of valid C strings.
    unsafe {
        libc::execv(exe.as_ptr(), argv.as_ptr());
        libc::_exit(127)
    }
}

fn fork() -> i32 {
    let _ = io::stdout().flush();
    // SAFETY: the probe is single-threaded when it forks; children only
    // call async-signal-safe functions or exec.
    unsafe { libc::fork() }
}

pub(crate) fn cmd_daemon(marker: &str) {
    let mut p = [0i32; 2];
    // SAFETY: p is a valid array of two ints.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        die("pipe2");
    }
    let child = fork();
    if child < 0 {
        die(&format!("fork: {}", errno_name(errno())));
    }
    if child == 0 {
        // SAFETY: in the child: async-signal-safe calls, then exec/_exit.
        unsafe {
            libc::close(p[0]);
            libc::setsid();
            let g = libc::fork();
            if g == 0 {
                libc::setsid();
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                exec_hold(marker);
            }
            libc::_exit(if g > 0 { 0 } else { 1 })
        }
    }
    // SAFETY: p[1] is ours; waitpid on our child.
    unsafe {
        libc::close(p[1]);
        let mut st = 0;
        libc::waitpid(child, &mut st, 0);
        out("intermediate_exit", libc::WEXITSTATUS(st));
    }
    // EOF on the pipe once the grandchild exec'd (or died).
    let mut buf = [0u8; 1];
    // SAFETY: buf is valid for 1 byte.
    let _ = unsafe { libc::read(p[0], buf.as_mut_ptr().cast(), 1) };
    out("daemon", "started");
}

pub(crate) fn cmd_sleep_tree(marker: &str, n: usize) -> ! {
    // SAFETY: auto-reap children (no zombies left by the double forks).
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    for i in 0..n {
        let pid = fork();
        // The child must not inherit SIG_IGN for SIGCHLD into `hold`: exec
        // keeps ignored dispositions, harmless for a process that only pauses.
        if pid < 0 {
            die(&format!("fork: {}", errno_name(errno())));
        }
        if pid == 0 {
            // SAFETY: in the child: async-signal-safe calls, then exec.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                match i % 3 {
                    0 => {}
                    1 => {
                        libc::setsid();
                    }
                    _ => {
                        // A grandchild, orphaned: reparented to PID 1.
                        if libc::fork() != 0 {
                            libc::_exit(0);
                        }
                        libc::setsid();
                    }
                }
            }
            exec_hold(marker);
        }
    }
    out("spawned", n);
    out("ready", 1);
    hold()
}

/// Forks up to `n` children that pause until killed; reports how many
/// forks succeeded and why the first failure failed (`ok`: none failed).
pub(crate) fn fork_holding(n: usize) -> Vec<i32> {
    let mut kids = Vec::new();
    let mut err = "ok".to_string();
    for _ in 0..n {
        let pid = fork();
        if pid < 0 {
            err = errno_name(errno());
            break;
        }
        if pid == 0 {
            hold();
        }
        kids.push(pid);
    }
    out("forked", kids.len());
    out("fork_error", err);
    kids
}

/// Forks up to `max` children, reports, then kills and reaps them.
pub(crate) fn cmd_fork_many(max: usize) {
    for k in fork_holding(max) {
        // SAFETY: k is our child.
        unsafe {
            libc::kill(k, libc::SIGKILL);
            libc::waitpid(k, std::ptr::null_mut(), 0);
        }
    }
}
