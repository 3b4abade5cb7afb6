//! The host side of a run: processes by marker, a process of the capsule user
//! outside the sandbox, the test process's own namespaces and mounts.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{as_user, probe};

/// Processes (not zombies, not ourselves) with an argv element containing
/// `marker`, as `(pid, argv joined by spaces)`.
pub fn procs_with_marker(marker: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return found };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a.contains(marker)) {
            found.push((pid, args.join(" ").trim().to_string()));
        }
    }
    found
}

/// Kills (SIGKILL) processes carrying `marker`: cleanup after a failure.
pub fn kill_marker(marker: &str) {
    for (pid, _) in procs_with_marker(marker) {
        // SAFETY: kill takes no pointers.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Kills the processes with `marker` when dropped (even on panic).
pub struct MarkerGuard(pub String);

impl Drop for MarkerGuard {
    fn drop(&mut self) {
        kill_marker(&self.0);
    }
}

/// A host process owned by the capsule user: `capsule-probe hold TAG`.
pub struct HostProc {
    pub child: Child,
}

impl HostProc {
    pub fn hold(tag: &str) -> HostProc {
        let child = as_user(&[probe().as_str(), "hold", tag])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn host process");
        // Wait until setpriv exec'd the probe: setpriv's own command line
        // carries the tag too, and while the exec is under way the
        // process's command line reads empty.
        let probe = probe();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !procs_with_marker(tag)
            .iter()
            .any(|(p, cmd)| *p == child.id() as i32 && cmd.split(' ').next() == Some(probe.as_str()))
        {
            assert!(Instant::now() < deadline, "host process did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        HostProc { child }
    }

    /// Still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `readlink /proc/self/ns/<ns>` of the test process.
pub fn host_ns(ns: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{ns}")).map(|p| p.display().to_string()).unwrap_or_default()
}

pub fn host_hostname() -> String {
    let mut u: libc::utsname = unsafe {
        // SAFETY: utsname is plain old data.
        std::mem::zeroed()
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::uname(&mut u) };
    // SAFETY: NUL-terminated after uname.
    unsafe { std::ffi::CStr::from_ptr(u.nodename.as_ptr()) }.to_string_lossy().into_owned()
}

/// The running kernel's (major, minor) version, (0, 0) when unreadable.
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Host mount tables: our own and, when readable, PID 1's.
pub fn host_mountinfo() -> String {
    let mine = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let init = std::fs::read_to_string("/proc/1/mountinfo").unwrap_or_default();
    format!("{mine}\n---- /proc/1/mountinfo\n{init}")
}
