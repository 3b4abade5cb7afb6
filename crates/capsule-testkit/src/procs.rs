//! Processes of the capsule user, from /proc: orphan checks, a process's figures.

use std::time::{Duration, Instant};

use crate::harness::h;
use crate::host::procs_with_marker;

/// One process as `/proc/<pid>/stat` and `status` describe it.
#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    /// `R`, `S`, `Z`, ...
    pub state: char,
    /// Real uid.
    pub uid: u32,
    /// argv joined by spaces (`[comm]` when it has none, e.g. a zombie).
    pub cmd: String,
}

pub fn proc_info(pid: i32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: the fields follow the last ')'.
    let close = stat.rfind(')')?;
    let comm = stat.get(stat.find('(')? + 1..close).unwrap_or("").to_string();
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmd = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ");
    let cmd = if cmd.trim().is_empty() { format!("[{comm}]") } else { cmd.trim().to_string() };
    Some(ProcInfo { pid, ppid, state, uid, cmd })
}

pub fn all_procs() -> Vec<ProcInfo> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten().filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok()).filter_map(proc_info).collect()
}

/// Every live process (zombies are dead: the init of some test machines
/// never reaps the orphans it inherits) whose real uid is the capsule
/// user's. Meaningful only as root (otherwise the capsule user is the
/// test's own user).
pub fn user_procs() -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    all_procs().into_iter().filter(|p| p.uid == h().uid && p.pid != me && p.state != 'Z').collect()
}

/// Processes of the capsule user that are not in `baseline` (pids).
pub fn new_user_procs(baseline: &[i32]) -> Vec<ProcInfo> {
    user_procs().into_iter().filter(|p| !baseline.contains(&p.pid)).collect()
}

/// The processes of the capsule user before a test that checks for orphans:
/// waits up to 5 s for earlier tests' processes to go, then returns what
/// remains (reported, and excluded from the check).
pub fn user_procs_baseline(test: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = user_procs();
        if v.is_empty() {
            return Vec::new();
        }
        if Instant::now() > deadline {
            eprintln!("{test}: processes of uid {} before the test (ignored): {v:?}", h().uid);
            return v.iter().map(|p| p.pid).collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no process of the capsule user outside `baseline` is left;
/// `Err(what is left)` after `limit`, else `Ok(how long it took)`.
pub fn wait_no_user_procs(baseline: &[i32], since: Instant, limit: Duration) -> Result<Duration, Vec<ProcInfo>> {
    loop {
        let left = new_user_procs(baseline);
        if left.is_empty() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > limit {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until a process with `marker` in its argv exists; panics after `t`.
pub fn wait_marker(marker: &str, t: Duration) -> Vec<(i32, String)> {
    let deadline = Instant::now() + t;
    loop {
        let v = procs_with_marker(marker);
        if !v.is_empty() {
            return v;
        }
        assert!(Instant::now() < deadline, "no process with marker {marker} appeared within {t:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until no process carries `marker`: `Ok(time since `since`)`, or
/// `Err(the survivors)` once `limit` has passed since `since`.
pub fn wait_marker_gone(marker: &str, since: Instant, limit: Duration) -> Result<Duration, Vec<(i32, String)>> {
    loop {
        let left = procs_with_marker(marker);
        if left.is_empty() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > limit {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Tests that check that *no* process of the capsule user is left take the
/// write side; every other test of the same test binary takes the read side,
/// so that its processes never count as someone else's orphans.
static USER_PROCS_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub fn procs_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    USER_PROCS_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

pub fn procs_exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    USER_PROCS_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

/// Figures about one process that must not grow over many runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStats {
    pub fds: usize,
    /// Kept networks: the process's descriptors of network namespaces (a
    /// supervisor keeps at most 5 × parallel + 2, docs/network-reuse.md).
    pub networks: usize,
    /// Of `fds`, those of kept networks: each namespace's and its
    /// `sockstat`'s, which the keeper reads to check it.
    pub net_fds: usize,
    pub rss_kib: u64,
    /// The anonymous part of RSS: the process's own memory, whatever the
    /// size of its binary's text (a test build's is several MiB).
    pub anon_kib: u64,
    pub hwm_kib: u64,
    pub threads: u64,
    pub mounts: usize,
    /// Child processes (any state), zombies among them.
    pub children: usize,
    pub zombies: usize,
}

pub fn proc_stats(pid: i32) -> ProcStats {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e} (the process is gone)"));
    let field = |k: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/status lacks {k}"))
    };
    let links: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"))
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.display().to_string())
        .collect();
    let fds = links.len();
    let networks = links.iter().filter(|l| l.starts_with("net:[")).count();
    // (Shown "(deleted)" once the keeper thread has moved on to make another network.)
    let net_fds = networks + links.iter().filter(|l| l.starts_with("/proc/") && l.contains("/net/sockstat")).count();
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map(|m| m.lines().count())
        .unwrap_or_else(|e| panic!("/proc/{pid}/mountinfo: {e}"));
    let kids: Vec<ProcInfo> = all_procs().into_iter().filter(|p| p.ppid == pid).collect();
    ProcStats {
        fds,
        networks,
        net_fds,
        rss_kib: field("VmRSS:"),
        anon_kib: field("RssAnon:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
        mounts,
        children: kids.len(),
        zombies: kids.iter().filter(|p| p.state == 'Z').count(),
    }
}

/// The process's `comm`.
pub fn proc_comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}
