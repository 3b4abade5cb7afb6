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

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

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
         open-exe [--write] | write-ro PATH... | connect-tcp [HOST:]PORT | bind-tcp PORT | listen-tcp PORT MS |\n\
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

fn cmd_write_bytes(n: u64, path: Option<&str>) {
    let mut w: Box<dyn Write> = match path {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Box::new(f),
            Err(e) => {
                out("open", io_res::<()>(&Err(e)));
                std::process::exit(3)
            }
        },
        None => Box::new(io::stdout().lock()),
    };
    let chunk = vec![b'x'; 64 * 1024];
    let mut written = 0u64;
    let mut result = "ok".to_string();
    while written < n {
        let len = (n - written).min(chunk.len() as u64) as usize;
        match w.write(&chunk[..len]) {
            Ok(0) => {
                result = "short".into();
                break;
            }
            Ok(k) => written += k as u64,
            Err(e) => {
                result = io_res::<()>(&Err(e));
                break;
            }
        }
    }
    let _ = w.flush();
    drop(w);
    // Reported on stderr when writing to stdout, so the count does not
    // disturb the byte stream.
    if path.is_some() {
        out("written", written);
        out("write", result);
    } else {
        eprintln!("written={written}\nwrite={result}");
    }
}

fn status_fields() -> Vec<(String, String)> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

fn cmd_ids() {
    // SAFETY: these getters cannot fail.
    let (uid, euid, gid, egid, pid, ppid) =
        unsafe { (libc::getuid(), libc::geteuid(), libc::getgid(), libc::getegid(), libc::getpid(), libc::getppid()) };
    out("uid", uid);
    out("euid", euid);
    out("gid", gid);
    out("egid", egid);
    out("pid", pid);
    out("ppid", ppid);
    // SAFETY: getsid(0)/getpgid(0) query the calling process.
    out("sid", unsafe { libc::getsid(0) });
    // SAFETY: as above.
    out("pgid", unsafe { libc::getpgid(0) });
    // SAFETY: PR_GET_DUMPABLE / PR_GET_NO_NEW_PRIVS take no pointers.
    out("dumpable", unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) });
    // SAFETY: as above.
    out("no_new_privs", unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) });
    for (k, v) in status_fields() {
        match k.as_str() {
            "Uid" | "Gid" | "Groups" | "CapInh" | "CapPrm" | "CapEff" | "CapBnd" | "CapAmb" | "NoNewPrivs"
            | "Seccomp" | "NSpid" | "NSsid" => out(&format!("status.{k}"), v),
            _ => {}
        }
    }
}

fn cmd_rlimits() {
    let list = [
        ("core", libc::RLIMIT_CORE),
        ("fsize", libc::RLIMIT_FSIZE),
        ("nofile", libc::RLIMIT_NOFILE),
        ("nproc", libc::RLIMIT_NPROC),
        ("stack", libc::RLIMIT_STACK),
        ("as", libc::RLIMIT_AS),
        ("cpu", libc::RLIMIT_CPU),
    ];
    for (name, res_) in list {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: rl is a valid rlimit out-pointer.
        let r = unsafe { libc::getrlimit(res_, &mut rl) };
        if r != 0 {
            out(&format!("rlimit.{name}"), errno_name(errno()));
            continue;
        }
        let f = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { v.to_string() };
        out(&format!("rlimit.{name}"), format!("{} {}", f(rl.rlim_cur), f(rl.rlim_max)));
    }
}

/// What fds 0 and 1 are, and whether stdin can be seeked or mapped
/// (read-once input: a pipe, neither). Reports on stderr (stdout may be
/// the write-once pipe under test) and counts stdin's bytes.
fn cmd_stdio_kind() {
    let mut lines = Vec::new();
    for (fd, name) in [(0, "stdin"), (1, "stdout")] {
        // SAFETY: st is a zeroed stat buffer fstat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: plain fstat into st.
        let kind = if unsafe { libc::fstat(fd, &mut st) } != 0 {
            errno_name(errno())
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFIFO => "fifo".into(),
                libc::S_IFREG => "file".into(),
                libc::S_IFCHR => "chr".into(),
                _ => "other".into(),
            }
        };
        lines.push(format!("{name}_kind={kind}"));
    }
    // SAFETY: lseek on fd 0 has no memory effects.
    let seek = unsafe { libc::lseek(0, 0, libc::SEEK_SET) };
    lines.push(format!("stdin_seek={}", if seek < 0 { errno_name(errno()) } else { "ok".into() }));
    // SAFETY: a private read-only mapping of fd 0, unmapped right away.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, 0, 0) };
    if map == libc::MAP_FAILED {
        lines.push(format!("stdin_mmap={}", errno_name(errno())));
    } else {
        lines.push("stdin_mmap=ok".into());
        // SAFETY: map is a live mapping of 4096 bytes.
        unsafe { libc::munmap(map, 4096) };
    }
    let mut n = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: buf is writable for its length.
        let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            break;
        }
        n += r as u64;
    }
    lines.push(format!("stdin_bytes={n}"));
    eprintln!("{}", lines.join("\n"));
}

fn cmd_fds() {
    let path = cstr("/proc/self/fd");
    // SAFETY: path is a valid C string; the DIR is closed below.
    let dir = unsafe { libc::opendir(path.as_ptr()) };
    if dir.is_null() {
        die(&format!("opendir /proc/self/fd: {}", errno_name(errno())));
    }
    // SAFETY: dir is a valid, open DIR*.
    let own = unsafe { libc::dirfd(dir) };
    let mut fds = Vec::new();
    loop {
        // SAFETY: dir is valid; readdir returns null at the end.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name of a valid dirent is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_string_lossy().into_owned();
        if let Ok(fd) = name.parse::<i32>() {
            if fd != own {
                fds.push(fd);
            }
        }
    }
    // SAFETY: dir is valid and not used afterwards.
    unsafe { libc::closedir(dir) };
    fds.sort();
    out("fds", fds.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(","));
    for fd in fds {
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("fd.{fd}"), target);
    }
}

fn cmd_kill_all(code: i32) -> ! {
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

fn tty_nr() -> String {
    // Field 7 of /proc/self/stat, after the parenthesised comm.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    after.split_whitespace().nth(4).unwrap_or("?").to_string()
}

fn cmd_tiocsti(chars: &str) {
    // SAFETY: plain queries of the calling process and fd 0.
    unsafe {
        out("pid", libc::getpid());
        out("sid", libc::getsid(0));
        let ts = libc::tcgetsid(0);
        out("tcgetsid", if ts == -1 { errno_name(errno()) } else { ts.to_string() });
        out("isatty0", libc::isatty(0));
    }
    out("tty_nr", tty_nr());
    let devtty = cstr("/dev/tty");
    // SAFETY: valid C string; the fd is closed if opened.
    let fd = unsafe { libc::open(devtty.as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
    out("open_dev_tty", res(fd as i64));
    if fd >= 0 {
        // SAFETY: fd was just opened.
        unsafe { libc::close(fd) };
    }
    for fd in [0, 1, 2] {
        let mut results = Vec::new();
        for b in chars.bytes() {
            let c = b as libc::c_char;
            // SAFETY: TIOCSTI reads one byte through the pointer.
            let r = unsafe { libc::ioctl(fd, libc::TIOCSTI, &c as *const libc::c_char) };
            results.push(res(r as i64));
        }
        results.dedup();
        out(&format!("tiocsti_fd{fd}"), results.join(","));
    }
    // Also try to make it our controlling terminal and inject again.
    // SAFETY: TIOCSCTTY takes an int argument.
    let r = unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) };
    out("tiocsctty", res(r as i64));
    if r == 0 {
        for b in chars.bytes() {
            let c = b as libc::c_char;
            // SAFETY: as above.
            let r = unsafe { libc::ioctl(0, libc::TIOCSTI, &c as *const libc::c_char) };
            out("tiocsti_after_sctty", res(r as i64));
        }
    }
}

fn cmd_open_exe(write: bool) {
    let mut entries: Vec<(i32, String)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                entries.push((pid, format!("/proc/{pid}/exe")));
            }
        }
    }
    // PID 1 also when /proc does not list it (it is hidden in capsule).
    if !entries.iter().any(|&(pid, _)| pid == 1) {
        entries.push((1, "/proc/1/exe".into()));
    }
    entries.sort();
    entries.push((-1, "/proc/self/exe".into()));
    entries.push((-2, "/proc/thread-self/exe".into()));
    out("count", entries.len());
    let mut any_writable = false;
    for (pid, path) in entries {
        let key = if pid >= 0 {
            format!("exe.{pid}")
        } else {
            format!("exe.{}", path.trim_start_matches("/proc/").trim_end_matches("/exe"))
        };
        let target =
            std::fs::read_link(&path).map(|p| p.display().to_string()).unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("{key}.link"), target);
        let c = cstr(&path);
        for (name, flags) in
            [("wronly", libc::O_WRONLY), ("rdwr", libc::O_RDWR), ("append", libc::O_WRONLY | libc::O_APPEND)]
        {
            // SAFETY: valid C string; fd closed below.
            let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
            out(&format!("{key}.{name}"), res(fd as i64));
            if fd >= 0 {
                any_writable = true;
                if write {
                    try_corrupt(fd, &format!("{key}.{name}"));
                }
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
            }
        }
        // O_PATH, then reopen through /proc/self/fd/N for writing.
        // SAFETY: valid C string.
        let pfd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        out(&format!("{key}.opath"), res(pfd as i64));
        if pfd >= 0 {
            let re = cstr(&format!("/proc/self/fd/{pfd}"));
            for (name, flags) in [("reopen_wronly", libc::O_WRONLY), ("reopen_rdwr", libc::O_RDWR)] {
                // SAFETY: valid C string.
                let fd = unsafe { libc::open(re.as_ptr(), flags | libc::O_CLOEXEC) };
                out(&format!("{key}.{name}"), res(fd as i64));
                if fd >= 0 {
                    any_writable = true;
                    if write {
                        try_corrupt(fd, &format!("{key}.{name}"));
                    }
                    // SAFETY: fd is ours.
                    unsafe { libc::close(fd) };
                }
            }
            // SAFETY: pfd is ours.
            unsafe { libc::close(pfd) };
        }
    }
    out("any_writable", any_writable as i32);
}

/// What an attacker would do with a writable exe: overwrite its start.
fn try_corrupt(fd: i32, key: &str) {
    let data = b"PWNED-BY-CAPSULE-PROBE";
    // SAFETY: data is valid for data.len() bytes.
    let r = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), 0) };
    out(&format!("{key}.pwrite"), res(r as i64));
}

fn try_write(path: &str, data: &[u8]) -> String {
    let r = std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(data));
    io_res(&r)
}

/// One round of write attempts on each path; returns the observations.
fn write_round(tag: &str, paths: &[String]) {
    for (i, p) in paths.iter().enumerate() {
        let md = std::fs::metadata(p);
        let key = format!("{tag}.{i}");
        match md {
            Ok(m) if m.is_dir() => {
                let f = format!("{}/capsule-probe-{tag}", p.trim_end_matches('/'));
                out(&format!("{key}.create"), try_write(&f, b"x\n"));
                let d = format!("{}/capsule-probe-dir-{tag}", p.trim_end_matches('/'));
                out(&format!("{key}.mkdir"), io_res(&std::fs::create_dir(&d)));
            }
            Ok(_) => {
                out(&format!("{key}.append"), try_write(p, b"capsule-probe was here\n"));
                let c = cstr(p);
                // SAFETY: valid C string.
                let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_TRUNC) };
                out(&format!("{key}.truncate"), res(fd as i64));
                if fd >= 0 {
                    // SAFETY: fd is ours.
                    unsafe { libc::close(fd) };
                }
                // SAFETY: valid C string.
                out(&format!("{key}.chmod"), res(unsafe { libc::chmod(c.as_ptr(), 0o777) } as i64));
                let renamed = format!("{p}.renamed");
                out(&format!("{key}.rename"), io_res(&std::fs::rename(p, &renamed)));
                out(&format!("{key}.unlink"), io_res(&std::fs::remove_file(p)));
            }
            Err(e) => out(&format!("{key}.stat"), io_res::<()>(&Err(e))),
        }
    }
}

/// The mount point (from /proc/self/mountinfo) holding `path`.
fn mount_point_of(path: &str) -> String {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best = "/".to_string();
    for l in mi.lines() {
        if let Some(mp) = l.split_whitespace().nth(4) {
            let mp = mp.replace("\\040", " ");
            let under = path == mp || mp == "/" || path.starts_with(&format!("{}/", mp.trim_end_matches('/')));
            if under && mp.len() >= best.len() {
                best = mp;
            }
        }
    }
    best
}

fn cmd_write_ro(paths: &[String]) {
    write_round("plain", paths);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare takes only flags.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
    out("unshare", res(r as i64));
    if r != 0 {
        return;
    }
    out("setgroups", io_res(&std::fs::write("/proc/self/setgroups", "deny")));
    out("uid_map", io_res(&std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))));
    out("gid_map", io_res(&std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))));
    write_round("nested", paths);

    let null = std::ptr::null::<libc::c_char>();
    for (i, p) in paths.iter().enumerate() {
        let target = if std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false) {
            p.clone()
        } else {
            std::path::Path::new(p).parent().map(|x| x.display().to_string()).unwrap_or("/".into())
        };
        let mp = mount_point_of(&target);
        out(&format!("target.{i}"), &target);
        out(&format!("mountpoint.{i}"), &mp);
        let t = cstr(&target);
        let m = cstr(&mp);
        // SAFETY: all pointers are valid C strings or null where the
        // syscall allows it.
        unsafe {
            // Remount the bind mount and the superblock read-write.
            let r = libc::mount(null, m.as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
            out(&format!("remount_bind_rw.{i}"), res(r as i64));
            let r = libc::mount(null, m.as_ptr(), null, libc::MS_REMOUNT, std::ptr::null());
            out(&format!("remount_sb_rw.{i}"), res(r as i64));
            let r = libc::mount(null, c"/".as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
            out(&format!("remount_root_rw.{i}"), res(r as i64));
        }
        write_round(&format!("after_remount{i}"), paths);
        // SAFETY: as above.
        unsafe {
            // A fresh bind of the target onto itself, then remount it rw.
            let r = libc::mount(t.as_ptr(), t.as_ptr(), null, libc::MS_BIND | libc::MS_REC, std::ptr::null());
            out(&format!("self_bind.{i}"), res(r as i64));
            if r == 0 {
                let r = libc::mount(null, t.as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
                out(&format!("self_bind_remount_rw.{i}"), res(r as i64));
            }
        }
        write_round(&format!("after_selfbind{i}"), paths);
        // SAFETY: as above.
        unsafe {
            let r = libc::umount2(t.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_target.{i}"), res(r as i64));
            let r = libc::umount2(m.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_mountpoint.{i}"), res(r as i64));
            let r = libc::umount2(m.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_mountpoint_again.{i}"), res(r as i64));
        }
        write_round(&format!("after_umount{i}"), paths);
    }
    // Last, a tmpfs over each target: writes then go to the tmpfs, never to
    // the host (the test checks the host side). Done after all the other
    // rounds so their writes still aim at the host view.
    for (i, p) in paths.iter().enumerate() {
        let target = if std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false) {
            p.clone()
        } else {
            std::path::Path::new(p).parent().map(|x| x.display().to_string()).unwrap_or("/".into())
        };
        let t = cstr(&target);
        let tmpfs = cstr("tmpfs");
        // SAFETY: valid C strings.
        let r = unsafe { libc::mount(tmpfs.as_ptr(), t.as_ptr(), tmpfs.as_ptr(), 0, std::ptr::null()) };
        out(&format!("tmpfs_over.{i}"), res(r as i64));
        write_round(&format!("after_tmpfs{i}"), paths);
    }
}

fn cmd_connect_tcp(spec: &str) {
    let addr = if spec.contains(':') { spec.to_string() } else { format!("127.0.0.1:{spec}") };
    let sa: std::net::SocketAddr = addr.parse().unwrap_or_else(|_| die(&format!("bad address {addr}")));
    let r = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(3));
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
}

fn cmd_connect_abstract(name: &str) {
    use std::os::linux::net::SocketAddrExt;
    let r = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a));
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
}

fn cmd_connect_unix(path: &str) {
    let r = std::os::unix::net::UnixStream::connect(path);
    out("connect", io_res(&r));
    if let Ok(mut s) = r {
        let _ = s.write_all(b"hello from capsule-probe\n");
    }
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

fn cmd_daemon(marker: &str) {
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

fn cmd_sleep_tree(marker: &str, n: usize) -> ! {
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

fn hostname() -> String {
    let mut u: libc::utsname = unsafe {
        // SAFETY: utsname is plain old data.
        std::mem::zeroed()
    };
    // SAFETY: u is a valid out-pointer.
    unsafe { libc::uname(&mut u) };
    // SAFETY: nodename is NUL-terminated after uname().
    unsafe { CStr::from_ptr(u.nodename.as_ptr()) }.to_string_lossy().into_owned()
}

fn cmd_ipc(key: i32, create: bool) {
    let flags = if create { libc::IPC_CREAT | 0o666 } else { 0 };
    // SAFETY: SysV IPC calls take only integers.
    unsafe {
        let r = libc::msgget(key, flags);
        out("msg", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
        let r = libc::shmget(key, if create { 4096 } else { 0 }, flags);
        out("shm", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
        let r = libc::semget(key, if create { 1 } else { 0 }, flags);
        out("sem", if r >= 0 { format!("id:{r}") } else { errno_name(errno()) });
    }
}

fn cmd_ns_inodes() {
    for ns in ["cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user", "uts"] {
        let v = std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("ns.{ns}"), v);
    }
}

fn cmd_timens() {
    for ns in ["time", "time_for_children"] {
        let v = std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("ns.{ns}"), v);
    }
    match std::fs::read_to_string("/proc/self/timens_offsets") {
        Ok(s) => out("offsets", s.trim()),
        Err(e) => out("offsets", io_res::<()>(&Err(e))),
    }
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/timens_offsets")
        .and_then(|mut f| f.write_all(b"monotonic 86400 0\n"));
    out("write_offsets", io_res(&w));
    // Also try in a fresh time namespace of our own (needs a nested userns).
    // SAFETY: unshare takes only flags.
    let r = unsafe { libc::unshare(libc::CLONE_NEWTIME) };
    out("unshare_time", res(r as i64));
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    out("monotonic_s", ts.tv_sec);
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    out("boottime_s", ts.tv_sec);
}

/// Forks up to `n` children that pause until killed; reports how many
/// forks succeeded and why the first failure failed (`ok`: none failed).
fn fork_holding(n: usize) -> Vec<i32> {
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
fn cmd_fork_many(max: usize) {
    for k in fork_holding(max) {
        // SAFETY: k is our child.
        unsafe {
            libc::kill(k, libc::SIGKILL);
            libc::waitpid(k, std::ptr::null_mut(), 0);
        }
    }
}

fn cmd_stat(p: &str) {
    let key = format!("stat.{p}");
    match std::fs::symlink_metadata(p) {
        Err(e) => out(&key, io_res::<()>(&Err(e))),
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            let ft = m.file_type();
            let kind = if ft.is_dir() {
                "dir"
            } else if ft.is_file() {
                "file"
            } else if ft.is_symlink() {
                "symlink"
            } else {
                use std::os::unix::fs::FileTypeExt;
                if ft.is_char_device() {
                    "char"
                } else if ft.is_block_device() {
                    "block"
                } else if ft.is_fifo() {
                    "fifo"
                } else {
                    "socket"
                }
            };
            out(&key, "ok");
            out(&format!("{key}.type"), kind);
            out(&format!("{key}.size"), m.len());
            out(&format!("{key}.mode"), format!("{:o}", m.mode() & 0o7777));
            out(&format!("{key}.uid"), m.uid());
            let c = CString::new(std::path::Path::new(p).as_os_str().as_bytes()).unwrap_or_default();
            // SAFETY: statvfs/statfs are plain data; c is a valid C string.
            unsafe {
                let mut sv: libc::statvfs = std::mem::zeroed();
                if libc::statvfs(c.as_ptr(), &mut sv) == 0 {
                    out(&format!("{key}.readonly"), (sv.f_flag & libc::ST_RDONLY != 0) as i32);
                    out(&format!("{key}.noexec"), (sv.f_flag & libc::ST_NOEXEC != 0) as i32);
                    out(&format!("{key}.nosuid"), (sv.f_flag & libc::ST_NOSUID != 0) as i32);
                    out(&format!("{key}.nodev"), (sv.f_flag & libc::ST_NODEV != 0) as i32);
                    out(&format!("{key}.blocks"), sv.f_blocks * sv.f_frsize);
                }
                let mut sf: libc::statfs = std::mem::zeroed();
                if libc::statfs(c.as_ptr(), &mut sf) == 0 {
                    let t = sf.f_type as i64;
                    let name = match t {
                        0x01021994 => "tmpfs".to_string(),
                        0x9fa0 => "proc".to_string(),
                        0xef53 => "ext4".to_string(),
                        0x794c7630 => "overlayfs".to_string(),
                        0x62656572 => "sysfs".to_string(),
                        _ => format!("0x{t:x}"),
                    };
                    out(&format!("{key}.fstype"), name);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- resources

const MIB: usize = 1 << 20;

/// Maps `mib` MiB of private anonymous memory (never unmapped: the probe
/// exits soon after); `None` with errno set when mmap fails.
fn map_mib(mib: usize, noreserve: bool) -> Option<*mut u8> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if noreserve { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), mib * MIB, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        None
    } else {
        Some(p.cast())
    }
}

/// Writes one byte per page of `[p, p + len)`, making every page resident.
fn touch(p: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: p..p+len is a writable mapping of ours.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
        off += 4096;
    }
}

/// Resident set size in KiB (VmRSS), for the report.
fn rss_kib() -> u64 {
    status_fields()
        .into_iter()
        .find(|(k, _)| k == "VmRSS")
        .and_then(|(_, v)| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Allocates and touches N MiB, then exits.
fn cmd_touch_mib(mib: usize) {
    match map_mib(mib, false) {
        Some(p) => {
            touch(p, mib * MIB);
            out("touched_mib", mib);
            out("rss_kib", rss_kib());
        }
        None => out("mmap", errno_name(errno())),
    }
}

/// Reserves N MiB of address space without touching it.
fn cmd_reserve_mib(mib: usize) {
    match map_mib(mib, true) {
        Some(_) => {
            out("reserved_mib", mib);
            out("rss_kib", rss_kib());
        }
        None => out("mmap", errno_name(errno())),
    }
}

/// Allocates and touches memory 4 MiB at a time until killed, up to
/// `cap_mib` (a safety net: reaching it prints `survived_mib` and exits 0).
/// A failed allocation is reported and then ends the probe with SIGSEGV,
/// like a C program dereferencing malloc's NULL.
fn cmd_memory_bomb(cap_mib: usize) {
    out("ready", 1);
    let mut total = 0usize;
    while total < cap_mib {
        match map_mib(4, false) {
            Some(p) => {
                touch(p, 4 * MIB);
                total += 4;
                if total % 16 == 0 {
                    out("allocated_mib", total);
                }
            }
            None => {
                out("alloc_error", errno_name(errno()));
                out("allocated_mib", total);
                cmd_signal("SIGSEGV");
            }
        }
    }
    out("survived_mib", total);
}

/// Tries `n` forks (children pause until the sandbox ends), reports how many
/// succeeded and why the first failure failed, then exits leaving them.
fn cmd_fork_bomb(n: usize) {
    fork_holding(n);
}

/// N threads spinning forever (the CPU-time limit or the test ends them).
fn cmd_spin_threads(n: usize) -> ! {
    for _ in 0..n {
        std::thread::spawn(|| {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
    }
    out("spinning", n);
    out("ready", 1);
    hold()
}

fn process_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6
}

/// Burns CPU on one thread until the process has used `ms` ms of CPU time
/// (CLOCK_PROCESS_CPUTIME_ID, counted from the fork that made it), then
/// reports the exact figure.
fn cmd_burn_ms(ms: u64) {
    let mut x = 0u64;
    while process_cpu_ms() < ms as f64 {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    out("cpu_ms", format!("{:.3}", process_cpu_ms()));
}

/// The CPUs the probe may run on (sched_getaffinity), as a comma list.
fn cmd_affinity() {
    // SAFETY: cpu_set_t is plain data; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid out-pointer of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        out("affinity", errno_name(errno()));
        return;
    }
    let cpus: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| i.to_string())
        .collect();
    out("affinity", "ok");
    out("cpus", cpus.join(","));
    // SAFETY: sysconf has no preconditions.
    out("online", unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) });
}

/// What writing to a cgroup file should do to lift a limit or escape it.
fn lifting_write(name: &str) -> Option<&'static str> {
    Some(match name {
        "memory.max" | "memory.high" | "memory.swap.max" | "memory.swap.high" | "memory.zswap.max" | "pids.max"
        | "cpu.max" | "memory.low" | "memory.min" => "max",
        "memory.oom.group" => "0",
        // Move ourselves there: out of the limited cgroup, if allowed.
        "cgroup.procs" => "0",
        // Switch the controllers off below, dropping the limits of children.
        "cgroup.subtree_control" => "-memory -pids -cpu -cpuset",
        "cgroup.max.descendants" | "cgroup.max.depth" => "max",
        _ => return None,
    })
}

/// Walks `root` (no symlinks, bounded) and writes a lifting value to every
/// limit file found; reports each success and a count per errno.
fn attack_tree(label: &str, root: &str) {
    let mut stack = vec![(std::path::PathBuf::from(root), 0usize)];
    let (mut found, mut lifted, mut seen) = (0usize, 0usize, 0usize);
    let mut errors: std::collections::BTreeMap<String, usize> = Default::default();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > 20_000 {
                break;
            }
            let Ok(ft) = e.file_type() else { continue };
            let path = e.path();
            if ft.is_dir() {
                if depth < 16 {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(value) = lifting_write(&name) else { continue };
            found += 1;
            let r = std::fs::OpenOptions::new().write(true).open(&path).and_then(|mut f| f.write_all(value.as_bytes()));
            match r {
                Ok(()) => {
                    lifted += 1;
                    out(&format!("{label}.wrote.{}", path.display()), value);
                }
                Err(e) => *errors.entry(io_res::<()>(&Err(e))).or_default() += 1,
            }
        }
    }
    out(&format!("{label}.files"), found);
    out(&format!("{label}.written"), lifted);
    for (e, n) in errors {
        out(&format!("{label}.errors.{e}"), n);
    }
}

/// Tries to lift the run's limits from inside: every cgroup limit file
/// visible (the host view of /sys/fs/cgroup), then again from a nested
/// user + mount + cgroup namespace with a cgroup2 mount of its own. Then,
/// with `then SUBCOMMAND ARGS...`, runs that subcommand (memory-bomb,
/// fork-bomb, touch-mib, ...) to show the limits still hold.
fn cmd_write_max_limits(rest: &[String]) {
    out("cgroup_before", std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default().trim());
    attack_tree("host", "/sys/fs/cgroup");
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare takes only flags; the probe is single-threaded.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWCGROUP) };
    out("unshare", res(r as i64));
    if r == 0 {
        out("setgroups", io_res(&std::fs::write("/proc/self/setgroups", "deny")));
        out("uid_map", io_res(&std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))));
        out("gid_map", io_res(&std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))));
        attack_tree("nested_host", "/sys/fs/cgroup");
        let mut mounted = false;
        for dir in ["/tmp/capsule-probe-cgroup2", "/sys/fs/cgroup"] {
            let _ = std::fs::create_dir(dir);
            let (src, d) = (cstr("cgroup2"), cstr(dir));
            // SAFETY: valid C strings.
            let r = unsafe { libc::mount(src.as_ptr(), d.as_ptr(), src.as_ptr(), 0, std::ptr::null()) };
            out(&format!("mount_cgroup2.{dir}"), res(r as i64));
            if r == 0 {
                mounted = true;
                attack_tree(&format!("mounted.{dir}"), dir);
            }
        }
        out("mounted", mounted as i32);
    }
    out("cgroup_after", std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default().trim());
    match rest {
        [] => {}
        [then, sub, args @ ..] if then == "then" => {
            let a = |i: usize| arg(args, i);
            match sub.as_str() {
                "memory-bomb" => cmd_memory_bomb(args.first().map(|s| parse(s)).unwrap_or(1024)),
                "fork-bomb" => cmd_fork_bomb(parse(a(0))),
                "touch-mib" => cmd_touch_mib(parse(a(0))),
                "spin-threads" => cmd_spin_threads(parse(a(0))),
                "burn-ms" => cmd_burn_ms(parse(a(0))),
                _ => usage(),
            }
        }
        _ => usage(),
    }
}
