//! `capsule-probe`: a test helper run *inside* the sandbox by the black-box
//! tests of `capsule-cli`. Every subcommand does one thing the tests want to
//! observe and prints its observations as `key=value` lines on stdout (one
//! line per observation, values escaped so that a line never contains a
//! newline). A failed system call is reported as its errno name (`EPERM`),
//! success as `ok`.
//!
//! Exit status: 0 when the probe did what was asked (whether or not the
//! attempted operation was allowed), 2 on usage errors, 3 on an unexpected
//! failure of the probe itself. `exit`, `signal` and `kill-all` exit as told.
//!
//! Safety: `kill-all` refuses to run in the host's user namespace, and the
//! other destructive subcommands refuse to run as real root there.
//!
//! Not installed; built only so the tests can use it.

use std::ffi::CString;
use std::io::{self, Write};
use std::time::Duration;

mod files;
mod ns;
mod process;
mod procs;
mod resources;

use files::{cmd_open_exe, cmd_stat, cmd_write_ro, try_write};
use ns::{
    cmd_connect_abstract, cmd_connect_tcp, cmd_connect_unix, cmd_ipc, cmd_leak_tcp, cmd_ns_inodes, cmd_timens, hostname,
};
use process::{cmd_fds, cmd_ids, cmd_rlimits, cmd_stdio_kind, cmd_tiocsti, cmd_write_bytes};
use procs::{cmd_daemon, cmd_fork_many, cmd_kill_all, cmd_sleep_tree};
use resources::{
    cmd_affinity, cmd_burn_ms, cmd_fork_bomb, cmd_memory_bomb, cmd_reserve_mib, cmd_spin_threads, cmd_touch_mib,
    cmd_write_max_limits,
};

/// Prints one `key=value` observation (value escaped: no newlines) and
/// flushes, so that a test reading line by line sees it at once.
fn out(key: &str, value: impl std::fmt::Display) {
    let v = value.to_string();
    let mut esc = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => esc.push_str("\\\\"),
            '\n' => esc.push_str("\\n"),
            '\r' => esc.push_str("\\r"),
            '\t' => esc.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => esc.push_str(&format!("\\x{:02x}", c as u32)),
            c => esc.push(c),
        }
    }
    let mut so = io::stdout().lock();
    // Ignore EPIPE and friends: the observation is best effort.
    let _ = writeln!(so, "{key}={esc}");
    let _ = so.flush();
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Symbolic errno name, for the values the probe can plausibly meet.
fn errno_name(e: i32) -> String {
    match (e, capsule::error::errno_name(e)) {
        (0, _) => "ok".to_string(),
        (_, "E?") => format!("E{e}"),
        (_, name) => name.to_string(),
    }
}

/// `ok` when `ret` is not -1, else the errno name.
fn res(ret: i64) -> String {
    if ret == -1 {
        errno_name(errno())
    } else {
        "ok".to_string()
    }
}

fn io_res<T>(r: &io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => match e.raw_os_error() {
            Some(n) => errno_name(n),
            None if e.kind() == io::ErrorKind::TimedOut => "ETIMEDOUT".into(),
            None => format!("error:{e}"),
        },
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| die(&format!("argument contains NUL: {s:?}")))
}

fn die(msg: &str) -> ! {
    let _ = io::stdout().flush();
    eprintln!("capsule-probe: {msg}");
    std::process::exit(3)
}

fn usage() -> ! {
    eprintln!(
        "usage: capsule-probe SUBCOMMAND [ARGS]\n\
         subcommands: exit N | signal SIG | sleep MS | hold TAG | write-bytes N [PATH] |\n\
         env | cwd | ids | rlimits | fds | stdio-kind | kill-all [EXIT] | tiocsti CHAR |\n\
         open-exe [--write] | write-ro PATH... | connect-tcp [HOST:]PORT | bind-tcp PORT | listen-tcp PORT MS | leak-tcp PORT |\n\
         connect-abstract NAME | daemon MARKER | sleep-tree MARKER [N] |\n\
         hostname | sethostname NAME | ipc-check KEY | ipc-create KEY |\n\
         ns-inodes | timens | fork-many MAX | stat PATH... | cat PATH |\n\
         ls DIR | try-write PATH | touch-mib N | reserve-mib N |\n\
         memory-bomb [CAP_MIB] | fork-bomb N | spin-threads N | burn-ms N |\n\
         affinity | write-max-limits [then SUBCOMMAND ARGS...]"
    );
    std::process::exit(2)
}

fn arg(args: &[String], i: usize) -> &str {
    args.get(i).map(String::as_str).unwrap_or_else(|| usage())
}

fn parse<T: std::str::FromStr>(s: &str) -> T {
    s.parse().unwrap_or_else(|_| die(&format!("bad number: {s:?}")))
}

/// True when the probe runs in the initial user namespace (the host's):
/// `/proc/self/uid_map` maps the whole 32-bit range onto itself.
fn in_initial_userns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
        .unwrap_or(true)
}

/// Refuses subcommands that are destructive outside a sandbox. `kill-all`
/// must never run in the host's user namespace (as root, `kill(-1,
/// SIGKILL)` kills every process of the machine; as a user, all of that
/// user's); the others only as real root there.
fn guard(cmd: &str) {
    let init = in_initial_userns();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let refuse = match cmd {
        "kill-all" => init,
        "sethostname" | "write-ro" | "open-exe" | "ipc-create" => init && root,
        // Resource exhaustion: only ever inside a sandbox, whoever runs it.
        "memory-bomb" | "fork-bomb" | "spin-threads" | "write-max-limits" => init,
        _ => false,
    };
    if refuse {
        die(&format!(
            "refusing to run `{cmd}` outside a sandbox (initial user namespace{}); it is meant to run inside capsule",
            if root { ", euid 0" } else { "" }
        ));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cmd = arg(&args, 1).to_string();
    guard(&cmd);
    let rest = &args[2..];
    match cmd.as_str() {
        "exit" => std::process::exit(parse(arg(rest, 0))),
        "signal" => cmd_signal(arg(rest, 0)),
        "sleep" => {
            out("ready", 1);
            std::thread::sleep(Duration::from_millis(parse(arg(rest, 0))));
            out("slept", 1);
        }
        "hold" => hold(),
        "write-bytes" => cmd_write_bytes(parse(arg(rest, 0)), rest.get(1).map(String::as_str)),
        "env" => {
            let mut vars: Vec<(String, String)> = std::env::vars_os()
                .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
                .collect();
            vars.sort();
            out("env_count", vars.len());
            for (k, v) in vars {
                out(&format!("env.{k}"), v);
            }
        }
        "cwd" => match std::env::current_dir() {
            Ok(p) => out("cwd", p.display()),
            Err(e) => out("cwd_error", io_res::<()>(&Err(e))),
        },
        "ids" => cmd_ids(),
        "rlimits" => cmd_rlimits(),
        "fds" => cmd_fds(),
        "stdio-kind" => cmd_stdio_kind(),
        "kill-all" => cmd_kill_all(rest.first().map(|s| parse(s)).unwrap_or(0)),
        "tiocsti" => cmd_tiocsti(arg(rest, 0)),
        "open-exe" => cmd_open_exe(rest.iter().any(|a| a == "--write")),
        "write-ro" => {
            if rest.is_empty() {
                usage()
            }
            cmd_write_ro(rest)
        }
        "connect-tcp" => cmd_connect_tcp(arg(rest, 0)),
        "bind-tcp" => {
            let port: u16 = parse(arg(rest, 0));
            out("bind", io_res(&std::net::TcpListener::bind(("127.0.0.1", port))));
        }
        "listen-tcp" => {
            // Listening on 127.0.0.1:PORT for MS milliseconds (connections
            // complete in the backlog, never accepted).
            let port: u16 = parse(arg(rest, 0));
            let l = std::net::TcpListener::bind(("127.0.0.1", port));
            out("listen", io_res(&l));
            std::thread::sleep(Duration::from_millis(parse(arg(rest, 1))));
        }
        "leak-tcp" => cmd_leak_tcp(parse(arg(rest, 0))),
        "connect-abstract" => cmd_connect_abstract(arg(rest, 0)),
        "connect-unix" => cmd_connect_unix(arg(rest, 0)),
        "daemon" => cmd_daemon(arg(rest, 0)),
        "sleep-tree" => cmd_sleep_tree(arg(rest, 0), rest.get(1).map(|s| parse(s)).unwrap_or(4)),
        "hostname" => out("hostname", hostname()),
        "sethostname" => {
            let name = arg(rest, 0);
            // SAFETY: name points to name.len() valid bytes.
            let r = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
            out("sethostname", res(r as i64));
            out("hostname", hostname());
        }
        "ipc-check" => cmd_ipc(parse(arg(rest, 0)), false),
        "ipc-create" => cmd_ipc(parse(arg(rest, 0)), true),
        "ns-inodes" => cmd_ns_inodes(),
        "timens" => cmd_timens(),
        "fork-many" => cmd_fork_many(parse(arg(rest, 0))),
        "stat" => {
            for p in rest {
                cmd_stat(p)
            }
        }
        "cat" => {
            let p = arg(rest, 0);
            match std::fs::read(p) {
                Ok(b) => {
                    out("read", "ok");
                    out("len", b.len());
                    out("content", String::from_utf8_lossy(&b));
                }
                Err(e) => out("read", io_res::<()>(&Err(e))),
            }
        }
        "ls" => match std::fs::read_dir(arg(rest, 0)) {
            Ok(rd) => {
                let mut names: Vec<String> =
                    rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                names.sort();
                out("ls", "ok");
                out("entries", names.join(","));
            }
            Err(e) => out("ls", io_res::<()>(&Err(e))),
        },
        "try-write" => {
            let p = arg(rest, 0);
            out("write", try_write(p, b"capsule-probe was here\n"));
            out("read_back", std::fs::read(p).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default());
        }
        "touch-mib" => cmd_touch_mib(parse(arg(rest, 0))),
        "reserve-mib" => cmd_reserve_mib(parse(arg(rest, 0))),
        "memory-bomb" => cmd_memory_bomb(rest.first().map(|s| parse(s)).unwrap_or(1024)),
        "fork-bomb" => cmd_fork_bomb(parse(arg(rest, 0))),
        "spin-threads" => cmd_spin_threads(parse(arg(rest, 0))),
        "burn-ms" => cmd_burn_ms(parse(arg(rest, 0))),
        "affinity" => cmd_affinity(),
        "write-max-limits" => cmd_write_max_limits(rest),
        _ => usage(),
    }
    out("done", 1);
}

/// Sleeps forever (the test or the sandbox teardown kills it).
fn hold() -> ! {
    loop {
        // SAFETY: pause() has no preconditions.
        unsafe { libc::pause() };
    }
}

fn signal_number(s: &str) -> i32 {
    if let Ok(n) = s.parse() {
        return n;
    }
    let s = s.strip_prefix("SIG").unwrap_or(s);
    match s {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ILL" => libc::SIGILL,
        "TRAP" => libc::SIGTRAP,
        "ABRT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "FPE" => libc::SIGFPE,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "SEGV" => libc::SIGSEGV,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "XCPU" => libc::SIGXCPU,
        "XFSZ" => libc::SIGXFSZ,
        "SYS" => libc::SIGSYS,
        _ => die(&format!("unknown signal {s}")),
    }
}

fn cmd_signal(name: &str) -> ! {
    let sig = signal_number(name);
    // SAFETY: restoring the default disposition (Rust's runtime installs a
    // SIGSEGV/SIGBUS handler for stack overflows) and unblocking the signal
    // so raise() terminates the process with it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    die(&format!("still alive after raise({name})"))
}
