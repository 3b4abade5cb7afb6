//! Isolation properties of `capsule run`, observed from inside with
//! `capsule-probe` and from the host with /proc.

use capsule_testkit as common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

// 1 -------------------------------------------------------------------------

/// `kill(-1)` and signals to PID 1 from inside reach no host process, and
/// PID 1 survives them: the run still reports the probe's own exit.
#[test]
fn kill_all_reaches_no_host_process() {
    require!("kill_all_reaches_no_host_process", userns_available());
    let tag = unique("held:host-victim");
    let mut victim = HostProc::hold(&tag);
    let out = run_probe(&[], &["kill-all", "7"]).run();
    out.assert_code(7);
    assert_eq!(out.status(), "exited", "{}", out.describe());
    assert_eq!(out.json()["exit_code"], 7, "{}", out.describe());
    let kv = out.kv();
    assert_eq!(kv.get("survived"), Some("1"), "{}", out.describe());
    // Nothing else in the sandbox that the probe may signal.
    assert_eq!(kv.must("kill_minus1_sig0"), "ESRCH", "kill(-1, 0) found a target; {}", out.describe());
    std::thread::sleep(Duration::from_millis(100));
    assert!(victim.alive(), "host process owned by the same user was killed from inside the sandbox");
    assert!(procs_with_marker(&tag).iter().any(|(p, _)| *p == victim.child.id() as i32), "host process vanished");
}

// 2 -------------------------------------------------------------------------

fn drain_master(master: i32, until: &str, t: Duration) -> String {
    let mut all = Vec::new();
    let deadline = Instant::now() + t;
    while Instant::now() < deadline {
        let mut pfd = libc::pollfd { fd: master, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, 50) };
        if r > 0 {
            let mut buf = [0u8; 4096];
            // SAFETY: buf is valid for its length.
            let n = unsafe { libc::read(master, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            all.extend_from_slice(&buf[..n as usize]);
            if String::from_utf8_lossy(&all).contains(until) {
                break;
            }
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

/// TIOCSTI on the inherited terminal injects nothing into the caller's
/// input, and the probe's session is not the terminal's.
#[test]
fn tiocsti_injects_nothing() {
    require!("tiocsti_injects_nothing", userns_available());
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    eprintln!("tiocsti_injects_nothing: /proc/sys/dev/tty/legacy_tiocsti = {legacy}");
    let pty = open_pty();
    let slave = pty.slave.as_raw_fd();
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut cmd = run_probe(&[], &["tiocsti", "id\n"]);
    cmd.stdio(dup(&pty.slave), dup(&pty.slave), dup(&pty.slave)).pre_exec(|| {
        // SAFETY: async-signal-safe calls between fork and exec: a new
        // session whose controlling terminal is the pty (stdin).
        unsafe {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
    let out = cmd.run();
    let text = drain_master(pty.master.as_raw_fd(), "done=1", Duration::from_secs(3));
    let kv = Kv::parse(&text);
    eprintln!("probe output on the tty:\n{text}");
    out.assert_code(0);
    assert_eq!(kv.get("done"), Some("1"), "probe did not finish: {text:?}; {}", out.describe());
    // Nothing was injected into the terminal's input queue.
    let queued = input_queue(slave);
    assert_eq!(queued, 0, "TIOCSTI from inside injected {queued} bytes; probe said: {text}");
    for fd in 0..3 {
        let r = kv.must(&format!("tiocsti_fd{fd}"));
        assert_ne!(r, "ok", "TIOCSTI on fd {fd} succeeded: {text}");
    }
    if let Some(r) = kv.get("tiocsti_after_sctty") {
        assert_ne!(r, "ok", "TIOCSTI after TIOCSCTTY succeeded: {text}");
    }
    // The probe runs in its own session: the tty is not its controlling
    // terminal (tcgetsid fails with ENOTTY, or names another session).
    let sid = kv.must("sid");
    let tcsid = kv.must("tcgetsid");
    assert!(tcsid == "ENOTTY" || tcsid != sid, "probe shares the tty's session: sid {sid}, tcgetsid {tcsid}");
    assert_eq!(kv.must("tty_nr"), "0", "probe has a controlling terminal: {text}");
    // Control: an injection we make ourselves (as root, CAP_SYS_ADMIN) is
    // seen, so the zero above is a real observation.
    if h().is_root {
        let c = b'Z' as libc::c_char;
        // SAFETY: TIOCSTI reads one byte.
        let r = unsafe { libc::ioctl(slave, libc::TIOCSTI, &c) };
        assert_eq!(r, 0, "control TIOCSTI failed");
        let deadline = Instant::now() + Duration::from_secs(2);
        while input_queue(slave) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(input_queue(slave), 1, "control injection not observed");
    }
}

// 3 -------------------------------------------------------------------------

/// Installs fds 5, 7 and 9 (without CLOEXEC) in the child before exec.
fn leak_fds(cmd: &mut Cmd) {
    cmd.pre_exec(|| {
        // SAFETY: async-signal-safe calls between fork and exec; dup2
        // clears FD_CLOEXEC on the new descriptor.
        unsafe {
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for n in [5, 7, 9] {
                if libc::dup2(fd, n) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if fd != 5 && fd != 7 && fd != 9 {
                libc::close(fd);
            }
        }
        Ok(())
    });
}

/// Only fds 0, 1 and 2 reach the program, even when capsule inherits more.
#[test]
fn only_stdio_fds_reach_program() {
    require!("only_stdio_fds_reach_program", userns_available());
    // Control: the same hook without capsule does leak the fds.
    let mut control = {
        let mut c = capsule::<&str>(&[]);
        c.binary(h().probe.clone()).arg("fds");
        c
    };
    leak_fds(&mut control);
    let ctl = control.run();
    let ctl_fds = ctl.kv().must("fds").to_string();
    assert!(ctl_fds.contains("5") && ctl_fds.contains("7") && ctl_fds.contains("9"), "control: {}", ctl.describe());

    let mut cmd = run_probe(&[], &["fds"]);
    leak_fds(&mut cmd);
    let out = cmd.run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("fds"), "0,1,2", "descriptors leaked into the sandbox; {}", out.describe());
}

// 4 -------------------------------------------------------------------------

/// No `/proc/*/exe` visible inside can be opened for writing, directly or
/// through an O_PATH descriptor, and the capsule binaries stay unchanged.
/// capsule (the front end), capsule-cli (which the supervisor and PID 1
/// run) and the probe are copied to a directory owned by the test user,
/// so file permissions alone would allow the write.
#[test]
fn proc_exe_not_writable() {
    require!("proc_exe_not_writable", userns_available());
    let dir = Scratch::new("exe");
    let bins = dir.mkdir("bin");
    let names = ["capsule", "capsule-cli", "capsule-probe"];
    for name in names {
        let dst = bins.join(name);
        std::fs::copy(h().bin_dir.join(name), &dst).unwrap();
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_user(&dst);
    }
    let before: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(bins.join(n)).unwrap()).collect();
    let mut cmd = capsule(&["run", "-q"]);
    cmd.binary(bins.join("capsule")).json().arg("--").arg(bins.join("capsule-probe")).args(&["open-exe", "--write"]);
    let out = cmd.run();
    let kv = out.assert_probe_ok();
    let mut attempts = 0;
    for (k, v) in kv.with_prefix("exe.") {
        let what = k.rsplit('.').next().unwrap();
        if ["wronly", "rdwr", "append", "reopen_wronly", "reopen_rdwr", "pwrite"].contains(&what) {
            attempts += 1;
            assert_ne!(v, "ok", "{k} succeeded; {}", out.describe());
        }
    }
    // PID 1 (capsule-cli, in the supervisor's memory) is not even there:
    // the run's /proc hides what the program may not ptrace.
    assert_eq!(kv.must("exe.1.link"), "ENOENT", "PID 1 visible in /proc; {}", out.describe());
    assert_eq!(kv.must("exe.1.opath"), "ENOENT", "{}", out.describe());
    assert!(attempts >= 10, "too few attempts; {}", out.describe());
    assert_eq!(kv.must("any_writable"), "0", "{}", out.describe());
    for (name, before) in names.iter().zip(&before) {
        assert!(std::fs::read(bins.join(name)).unwrap() == *before, "{name} changed");
    }
}

// 5 -------------------------------------------------------------------------

/// Writes to the read-only host view fail, also after a nested user+mount
/// namespace and remount/umount attempts; the host files stay unchanged.
#[test]
fn host_view_is_read_only() {
    require!("host_view_is_read_only", userns_available());
    let dir = Scratch::new("ro");
    let victim = dir.write("victim", b"original\n");
    let sub = dir.mkdir("sub");
    // Control: the directory is writable by the test user on the host.
    let ctl = as_user(&["touch", &sub.join("host-can-write").display().to_string()]).output().unwrap();
    assert!(ctl.status.success(), "control write failed: {}", String::from_utf8_lossy(&ctl.stderr));
    std::fs::remove_file(sub.join("host-can-write")).unwrap();
    let before: Vec<String> = list(&dir.path);

    let out = run_probe(&[], &["write-ro", &dir.s(), victim.to_str().unwrap(), sub.to_str().unwrap()]).run();
    let kv = out.assert_probe_ok();
    // The plain attempts fail with EROFS.
    for key in ["plain.0.create", "plain.0.mkdir", "plain.1.append", "plain.1.truncate", "plain.2.create"] {
        assert_eq!(kv.must(key), "EROFS", "{key}; {}", out.describe());
    }
    for key in ["plain.1.rename", "plain.1.unlink", "plain.1.chmod"] {
        assert_ne!(kv.must(key), "ok", "{key}; {}", out.describe());
    }
    eprintln!("nested unshare: {}", kv.must("unshare"));
    if kv.must("unshare") == "ok" {
        for (k, v) in kv.with_prefix("remount_") {
            assert_ne!(v, "ok", "{k} succeeded; {}", out.describe());
        }
        if let Some(v) = kv.get("self_bind_remount_rw.0") {
            assert_ne!(v, "ok", "remounting a fresh bind rw succeeded; {}", out.describe());
        }
        // Every write before the tmpfs was mounted must have failed.
        for (k, v) in kv.0.iter() {
            let round = k.split('.').next().unwrap();
            let is_write = [".create", ".mkdir", ".append", ".truncate", ".chmod", ".rename", ".unlink"]
                .iter()
                .any(|s| k.ends_with(s));
            if is_write && !round.starts_with("after_tmpfs") {
                assert_ne!(v, "ok", "{k} succeeded; {}", out.describe());
            }
        }
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"original\n", "host file changed");
    assert_eq!(list(&dir.path), before, "host directory changed");
    assert_eq!(list(&sub), Vec::<String>::new(), "host subdirectory changed");
}

fn list(p: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(p).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

// 6 -------------------------------------------------------------------------

fn accepted(l: &std::net::TcpListener) -> bool {
    l.set_nonblocking(true).unwrap();
    l.accept().is_ok()
}

/// No TCP connection to a host service on 127.0.0.1 and none to a host
/// abstract unix socket; with `--share-net` TCP works, and so do abstract
/// sockets where Landlock cannot scope them (ABI < 6; docs/landlock.md).
#[test]
fn network_is_isolated() {
    require!("network_is_isolated", userns_available());
    use std::os::linux::net::SocketAddrExt;
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    let name = unique("capsule-test-abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    unix.set_nonblocking(true).unwrap();

    let out = run_probe(&[], &["connect-tcp", &port]).run();
    let kv = out.assert_probe_ok();
    assert_ne!(kv.must("connect"), "ok", "TCP to the host's 127.0.0.1:{port} connected; {}", out.describe());
    assert!(!accepted(&tcp), "host listener accepted a connection from the sandbox");

    let out = run_probe(&[], &["connect-abstract", &name]).run();
    let kv = out.assert_probe_ok();
    assert_ne!(kv.must("connect"), "ok", "abstract socket connected; {}", out.describe());
    assert!(unix.accept().is_err(), "host abstract socket accepted a connection from the sandbox");

    // With --share-net the same probes connect: the test can fail.
    let out = run_probe(&["--share-net"], &["connect-tcp", &port]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("connect"), "ok", "--share-net TCP failed; {}", out.describe());
    assert!(accepted(&tcp), "no connection arrived with --share-net");
    let out = run_probe(&["--share-net"], &["connect-abstract", &name]).run();
    let kv = out.assert_probe_ok();
    let scoped = capsule::plan::landlock::probe() >= 6;
    assert_eq!(kv.must("connect"), if scoped { "EPERM" } else { "ok" }, "--share-net abstract; {}", out.describe());
    assert_eq!(unix.accept().is_ok(), !scoped, "host abstract socket; {}", out.describe());
}

/// The host's /run (session bus, agents, container engines) is replaced:
/// a socket there that the user can reach on the host is unreachable from
/// the sandbox, although read-only mounts do not stop connect().
#[test]
fn host_run_sockets_are_unreachable() {
    require!("host_run_sockets_are_unreachable", userns_available());
    require!("host_run_sockets_are_unreachable", require_root());
    use std::os::unix::fs::PermissionsExt;
    let path = format!("/run/{}.sock", unique("capsule-test"));
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    listener.set_nonblocking(true).unwrap();
    struct Rm(String);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(path.clone());
    // Control: the test user reaches it on the host, and through an explicit bind.
    let out = run_probe(&["--ro-bind", &path, "/tmp/s.sock"], &["connect-unix", "/tmp/s.sock"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("connect"), "ok", "explicitly bound socket did not connect; {}", out.describe());
    assert!(listener.accept().is_ok(), "no connection arrived through the explicit bind");
    let out = run_probe(&[], &["connect-unix", &path]).run();
    let kv = out.assert_probe_ok();
    assert_ne!(kv.must("connect"), "ok", "host socket {path} under /run connected; {}", out.describe());
    assert!(listener.accept().is_err(), "the host socket accepted a connection from the sandbox");
}

// 7 -------------------------------------------------------------------------

/// A double-forking daemon left behind is gone when `capsule run` returns.
#[test]
fn daemon_does_not_outlive_run() {
    require!("daemon_does_not_outlive_run", userns_available());
    let marker = unique("capsule-daemon");
    let _guard = MarkerGuard(marker.clone());
    // Control: the scanner finds a host process with the marker.
    {
        let ctl = HostProc::hold(&format!("held:{marker}-control"));
        assert!(!procs_with_marker(&format!("{marker}-control")).is_empty());
        drop(ctl);
    }
    let out = run_probe(&[], &["daemon", &marker]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("daemon"), "started", "{}", out.describe());
    let left = procs_with_marker(&marker);
    assert!(left.is_empty(), "processes outlived `capsule run`: {left:?}");
}

// 8 -------------------------------------------------------------------------

/// SIGKILL of the capsule process kills the whole sandbox within 1 s.
#[test]
fn sigkill_of_capsule_kills_sandbox() {
    require!("sigkill_of_capsule_kills_sandbox", userns_available());
    let marker = unique("capsule-tree");
    let _guard = MarkerGuard(marker.clone());
    let held = format!("held:{marker}");
    let mut running = run_probe(&[], &["sleep-tree", &marker, "6"]).spawn();
    running.wait_line("ready=", Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs_with_marker(&held).len() < 6 {
        assert!(Instant::now() < deadline, "sandbox processes never appeared: {:?}", procs_with_marker(&marker));
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = running.pid();
    // SAFETY: pid is our child (capsule, exec'd by setpriv).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    let _ = running.child.wait();
    loop {
        let left = procs_with_marker(&marker);
        if left.is_empty() {
            eprintln!("sandbox gone {:?} after SIGKILL", t0.elapsed());
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "still alive 1 s after SIGKILL of capsule: {left:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// 9 -------------------------------------------------------------------------

/// The host's mount table is unchanged during a run and across 100 runs.
#[test]
fn host_mounts_unchanged() {
    require!("host_mounts_unchanged", userns_available());
    let before = host_mountinfo();
    let mut running = run_probe(&["--wall-time", "20s"], &["sleep", "1000"]).spawn();
    running.wait_line("ready=", Duration::from_secs(20));
    let during = host_mountinfo();
    let out = running.wait();
    out.assert_probe_ok();
    assert_eq!(before, during, "host mounts changed during a run");
    for i in 0..100 {
        let mut c = capsule(&["run", "-q", "--", "/bin/true"]);
        let out = c.run();
        assert_eq!(out.code, Some(0), "run {i}: {}", out.describe());
    }
    let after = host_mountinfo();
    assert_eq!(before, after, "host mounts changed across 100 runs");
}

// 10 ------------------------------------------------------------------------

/// Hostname, IPC objects and time-namespace offsets don't leak either way.
#[test]
fn uts_ipc_time_do_not_leak() {
    require!("uts_ipc_time_do_not_leak", userns_available());
    // Namespaces differ from the host's.
    let out = run_probe(&[], &["ns-inodes"]).run();
    let kv = out.assert_probe_ok();
    for ns in ["uts", "ipc", "net", "mnt", "pid", "user", "cgroup"] {
        let inside = kv.must(&format!("ns.{ns}"));
        assert!(inside.starts_with(&format!("{ns}:[")), "ns.{ns} = {inside}; {}", out.describe());
        assert_ne!(inside, host_ns(ns), "{ns} namespace shared with the host");
    }

    // Hostname: the sandbox's own, and sethostname inside does not change
    // the host's.
    let host_name = host_hostname();
    let out = run_probe(&["--hostname", "capsule-box"], &["sethostname", "leaked-name"]).run();
    let kv = out.assert_probe_ok();
    eprintln!("sethostname inside: {}", kv.must("sethostname"));
    if kv.must("sethostname") != "ok" {
        assert_eq!(kv.must("hostname"), "capsule-box", "{}", out.describe());
    } else {
        assert_eq!(kv.must("hostname"), "leaked-name", "{}", out.describe());
    }
    assert_eq!(host_hostname(), host_name, "host hostname changed");
    let out = run_probe(&[], &["hostname"]).run();
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("hostname"), "capsule", "default hostname; {}", out.describe());

    // SysV IPC: host object invisible inside; sandbox object invisible on
    // the host.
    let key: i32 = 0x0ca0_0000 | (std::process::id() as i32 & 0xffff);
    // SAFETY: SysV IPC calls take only integers and IPC_RMID a null buffer.
    let host_q = unsafe { libc::msgget(key, libc::IPC_CREAT | 0o666) };
    assert!(host_q >= 0, "host msgget");
    // SAFETY: as above.
    let host_shm = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | 0o666) };
    assert!(host_shm >= 0, "host shmget");
    let out = run_probe(&[], &["ipc-check", &key.to_string()]).run();
    // SAFETY: as above.
    unsafe {
        libc::msgctl(host_q, libc::IPC_RMID, std::ptr::null_mut());
        libc::shmctl(host_shm, libc::IPC_RMID, std::ptr::null_mut());
    }
    let kv = out.assert_probe_ok();
    assert_eq!(kv.must("msg"), "ENOENT", "host message queue visible inside; {}", out.describe());
    assert_eq!(kv.must("shm"), "ENOENT", "host shm visible inside; {}", out.describe());

    let key2 = key ^ 0x0010_0000;
    let out = run_probe(&[], &["ipc-create", &key2.to_string()]).run();
    let kv = out.assert_probe_ok();
    assert!(kv.must("msg").starts_with("id:"), "msgget inside failed; {}", out.describe());
    // SAFETY: as above.
    let (q, s) = unsafe { (libc::msgget(key2, 0), libc::shmget(key2, 0, 0)) };
    if q >= 0 {
        // SAFETY: as above.
        unsafe { libc::msgctl(q, libc::IPC_RMID, std::ptr::null_mut()) };
    }
    if s >= 0 {
        // SAFETY: as above.
        unsafe { libc::shmctl(s, libc::IPC_RMID, std::ptr::null_mut()) };
    }
    assert!(q < 0 && s < 0, "sandbox IPC objects visible on the host (msg {q}, shm {s})");

    // Time namespace.
    require!("uts_ipc_time_do_not_leak (time ns)", timens_available());
    let out = run_probe(&[], &["timens"]).run();
    let kv = out.assert_probe_ok();
    let t = kv.must("ns.time");
    assert!(t.starts_with("time:["), "{}", out.describe());
    assert_ne!(t, host_ns("time"), "time namespace shared with the host");
    assert_ne!(kv.must("write_offsets"), "ok", "timens_offsets writable inside; {}", out.describe());
    assert_ne!(kv.must("unshare_time"), "ok", "unshare(CLONE_NEWTIME) allowed; {}", out.describe());
}
