//! Re-starting a command in a transient delegated systemd scope, when that
//! is where its cgroups come from (README "Cgroups"): `systemd-run --user
//! --scope -p Delegate=yes`. The user manager is asked first whether it
//! answers at all, within a bound: one that is absent, stopped or still
//! starting makes capsule go on without the scope, saying so, never wait
//! on it (docs/containers.md, "systemd").

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use capsule::host::cgroups::{discover, systemd_scope_command, systemd_user_manager, Source, IN_SCOPE_ENV};
use capsule::spec::RunSpec;

/// How long the user manager has to answer (`CAPSULE_SYSTEMD_TIMEOUT`,
/// seconds; default 5).
pub const TIMEOUT_ENV: &str = "CAPSULE_SYSTEMD_TIMEOUT";

fn timeout() -> Duration {
    let secs = std::env::var(TIMEOUT_ENV).ok().and_then(|v| v.parse::<f64>().ok()).filter(|s| *s > 0.0 && *s < 3600.0);
    Duration::from_secs_f64(secs.unwrap_or(5.0))
}

/// The manager's private socket (what `systemd-run --user` talks to).
fn private_socket() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR").map(|r| Path::new(&r).join("systemd/private"))
}

/// Whether the user manager answers a D-Bus authentication on its private
/// socket within `limit`: Err says what happened instead.
pub fn manager_answers(socket: &Path, limit: Duration) -> Result<(), String> {
    let shown = format!("{:?}", socket.display().to_string());
    let mut s = UnixStream::connect(socket).map_err(|e| format!("cannot connect to {shown}: {e}"))?;
    s.set_read_timeout(Some(limit)).and_then(|()| s.set_write_timeout(Some(limit))).map_err(|e| e.to_string())?;
    let uid: String = capsule::sys::probe::ids().euid.to_string().bytes().map(|b| format!("{b:02x}")).collect();
    s.write_all(format!("\0AUTH EXTERNAL {uid}\r\n").as_bytes())
        .map_err(|e| format!("cannot write to {shown}: {e}"))?;
    let mut reply = [0u8; 64];
    let n = match s.read(&mut reply) {
        Ok(n) => n,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Err(format!("no answer on {shown} within {:.1} s (still starting, or hung)", limit.as_secs_f64()))
        }
        Err(e) => return Err(format!("reading from {shown}: {e}")),
    };
    if reply[..n].starts_with(b"OK ") {
        Ok(())
    } else {
        Err(format!("{shown} refused authentication: {:?}", String::from_utf8_lossy(&reply[..n]).trim_end()))
    }
}

/// Re-starts this very command inside a transient delegated systemd scope
/// when that is where cgroups will come from; returns only when it does
/// not apply, or the user manager does not answer (then the command goes
/// on without the scope: its cgroup-only limits are errors that say why).
pub fn restart_in_scope(spec: &RunSpec) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the capsule binary to re-start it")?;
    let mut full = vec![exe.display().to_string()];
    full.extend(std::env::args().skip(1));
    restart_argv_in_scope(&spec.cgroup, full)
}

/// [`restart_in_scope`] for the command `argv` (its binary first: `capsule
/// isolate ...` also when this binary was run as `isolate`), with the
/// cgroup settings `cgroup`.
pub fn restart_argv_in_scope(cgroup: &capsule::proto::config::CgroupConfig, argv: Vec<String>) -> Result<()> {
    // Without a systemd user manager there is nothing to re-start in; the
    // supervisor does the discovery itself.
    if !systemd_user_manager() || discover(cgroup).source != Source::SystemdScope {
        return Ok(());
    }
    if let Some(socket) = private_socket() {
        if let Err(why) = manager_answers(&socket, timeout()) {
            eprintln!(
                "capsule: the systemd user manager cannot delegate a scope: {why}; going on without one (no cgroup \
                 limits: degraded mode; {TIMEOUT_ENV}=SECONDS waits longer)"
            );
            // The supervisor's own discovery must not count on it either.
            std::env::set_var(IN_SCOPE_ENV, "unavailable");
            return Ok(());
        }
    }
    let cmd = systemd_scope_command(&argv);
    match in_scope(&cmd)? {
        Scoped::Exited(code) => std::process::exit(code),
        Scoped::Refused(why) => {
            eprintln!(
                "capsule: the systemd user manager refused a delegated scope: {why}; going on without one (no cgroup \
                 limits: degraded mode). To fix it, make `systemd-run --user --scope -p Delegate=yes -- true` work: \
                 `systemctl --user status` and `journalctl --user -e` say what the manager refuses (e.g. a masked \
                 app.slice: `systemctl --user unmask app.slice`)"
            );
            std::env::set_var(IN_SCOPE_ENV, "unavailable");
            Ok(())
        }
    }
}

/// The descriptor of the caller's stderr in the re-started command, which
/// takes it back once it runs in the scope: until then its stderr is a
/// pipe to the waiting capsule, which so gets systemd-run's own error.
pub const STDERR_ENV: &str = "CAPSULE_SCOPE_STDERR";

/// In a command re-started in a scope: tells the waiting capsule it runs
/// (a NUL on the pipe) and takes the caller's stderr back.
pub fn take_back_stderr() {
    use capsule::sys;
    if std::env::var_os(IN_SCOPE_ENV).is_some_and(|v| v == "1") {
        // systemd-run may exec the command with signals it blocked while it
        // talked to the manager: one the waiting capsule passed on in that
        // window is pending, and is delivered now instead of never.
        sys::unblock_signals(&PASSED_ON);
    }
    let Some(saved) = std::env::var(STDERR_ENV).ok().and_then(|v| v.parse::<i32>().ok()) else { return };
    std::env::remove_var(STDERR_ENV);
    if saved > 2 && std::env::var_os(IN_SCOPE_ENV).is_some() && sys::fd_access_mode(saved).is_ok() {
        let _ = sys::write_all(2, b"\0");
        if sys::dup2(saved, 2).is_ok() {
            sys::close(saved);
        }
    }
}

/// How the command in the scope went.
enum Scoped {
    /// It ran there and exited with this status (128 + N for signal N).
    Exited(i32),
    /// systemd-run did not start it: its error.
    Refused(String),
}

/// The signals a waiting capsule passes on when another process sent them
/// (the terminal's reach the command in the scope as well: one process group).
const PASSED_ON: [i32; 6] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

/// Runs `cmd` (systemd-run's, which makes the scope and executes this
/// command again in it) as a child and waits for it: systemd-run's own
/// messages come through a pipe, so a refusal is explained, not passed on.
fn in_scope(cmd: &[String]) -> Result<Scoped> {
    use std::os::fd::AsRawFd;

    use capsule::sys;
    let (rd, wr) = sys::pipe().map_err(|e| anyhow::anyhow!("pipe for systemd-run: errno {e}"))?;
    let saved = sys::dup_cloexec(2).map_err(|e| anyhow::anyhow!("dup of stderr: errno {e}"))?;
    sys::set_cloexec(saved.as_raw_fd(), false).map_err(|e| anyhow::anyhow!("fcntl of stderr: errno {e}"))?;
    let mut watched = PASSED_ON.to_vec();
    watched.push(libc::SIGCHLD);
    let sigfd = sys::signalfd_for(&watched).map_err(|e| anyhow::anyhow!("signalfd: errno {e}"))?;
    let restore = || {
        let _ = sys::set_nonblocking(sigfd.as_raw_fd(), true);
        sys::drain_signalfd(sigfd.as_raw_fd());
        sys::unblock_signals(&watched);
    };
    let spawned = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .env(IN_SCOPE_ENV, "1")
        .env(STDERR_ENV, saved.as_raw_fd().to_string())
        .stderr(std::process::Stdio::from(wr))
        .spawn();
    drop(saved);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            restore();
            return Ok(Scoped::Refused(format!("cannot start {:?}: {e}", cmd[0])));
        }
    };
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::fs::File::from(rd).read_to_end(&mut text);
        text
    });
    let _ = sys::set_nonblocking(sigfd.as_raw_fd(), false);
    let status = loop {
        let mut info = [0u8; 128];
        let n = sys::read(sigfd.as_raw_fd(), &mut info).unwrap_or(0);
        if n < 12 {
            break child.wait().context("waiting for systemd-run")?;
        }
        let signo = i32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
        let code = i32::from_ne_bytes([info[8], info[9], info[10], info[11]]);
        if signo == libc::SIGCHLD {
            if let Some(st) = child.try_wait().context("waiting for systemd-run")? {
                break st;
            }
        } else if code <= 0 {
            // Sent by a process (kill, sigqueue, tgkill): the command gets it too.
            let _ = sys::kill(child.id() as i32, signo);
        }
    };
    restore();
    let text = reader.join().unwrap_or_default();
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    let code = signal.map_or(status.code().unwrap_or(1), |s| 128 + s);
    match text.iter().position(|&b| b == 0) {
        // It ran in the scope: what systemd-run said first (warnings) is the caller's.
        Some(at) => {
            let _ = std::io::stderr().write_all(&text[..at]);
            Ok(Scoped::Exited(code))
        }
        // Not started, but stopped by a signal (passed on, or the terminal's):
        // the caller asked for an end, not for the command without a scope.
        None if status.success() || signal.is_some() => Ok(Scoped::Exited(code)),
        None => {
            let said = String::from_utf8_lossy(&text);
            Ok(Scoped::Refused(format!("`{}` ended with status {code}: {:?}", cmd[..3].join(" "), said.trim_end())))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_silent_or_absent_manager_is_bounded() {
        let dir = std::env::temp_dir().join(format!("capsule-scope-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("private");
        // Absent: no socket.
        let e = manager_answers(&sock, Duration::from_secs(5)).unwrap_err();
        assert!(e.starts_with("cannot connect to"), "{e}");
        // Listening but never answering (a manager still starting): the bound holds.
        let listener = UnixListener::bind(&sock).unwrap();
        let t = Instant::now();
        let e = manager_answers(&sock, Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("no answer") && e.contains("within 0.3 s"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // Answering: a D-Bus server's OK (a fresh socket: the silent one's
        // backlog still holds the attempt above).
        drop(listener);
        std::fs::remove_file(&sock).unwrap();
        let listener = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"\0AUTH EXTERNAL "), "{:?}", &buf[..n]);
            c.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n").unwrap();
        });
        manager_answers(&sock, Duration::from_secs(5)).unwrap();
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
