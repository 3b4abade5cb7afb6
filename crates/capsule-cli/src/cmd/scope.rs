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

use anyhow::{bail, Context, Result};
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
    // Without a systemd user manager there is nothing to re-start in; the
    // supervisor does the discovery itself.
    if !systemd_user_manager() || discover(&spec.cgroup).source != Source::SystemdScope {
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
    let argv: Vec<String> = std::env::args().collect();
    let exe = std::env::current_exe().context("cannot find the capsule binary to re-start it")?;
    let mut full = vec![exe.display().to_string()];
    full.extend(argv.into_iter().skip(1));
    let cmd = systemd_scope_command(&full);
    let err = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(&cmd[0]).args(&cmd[1..]).env(IN_SCOPE_ENV, "1"),
    );
    bail!("cannot re-start in a systemd scope ({}): {err}", cmd.join(" "))
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
