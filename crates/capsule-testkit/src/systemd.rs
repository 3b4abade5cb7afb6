//! The systemd mode (`CAPSULE_TEST_SYSTEMD=1`): the cgroup tests run as a
//! logged-in user whose systemd manager runs (`cgroup2-vm --systemd`,
//! scripts/test-systemd.sh), in a cgroup that is not delegated to them.
//! The harness makes no user and no cgroup: each capsule it starts finds
//! no delegated cgroup and re-starts itself in `systemd-run --user --scope
//! -p Delegate=yes`, and the harness watches it get there (the scope,
//! `user@UID.service/app.slice/run-*.scope`, is the run's [`crate::Out::scope`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cgroup::CGROUP_ROOT;
use crate::harness::h;

/// The environment variable that turns the systemd mode on.
pub const SYSTEMD_ENV: &str = "CAPSULE_TEST_SYSTEMD";

pub fn systemd_mode() -> bool {
    std::env::var(SYSTEMD_ENV).map(|v| v == "1").unwrap_or(false)
}

/// The user manager's runtime directory the harness passes on to capsule.
pub fn runtime_dir() -> Option<String> {
    std::env::var("XDG_RUNTIME_DIR").ok().filter(|d| !d.is_empty())
}

/// Whether capsule can get its cgroups from the user manager here: the
/// manager's private socket, `systemd-run`, a cgroup v2 hierarchy with the
/// memory and pids controllers, and our own cgroup not already delegated
/// (else capsule would use it and never re-start in a scope).
pub fn systemd_available() -> Result<(), String> {
    let Some(rt) = runtime_dir() else {
        return Err(format!("{SYSTEMD_ENV}=1 but XDG_RUNTIME_DIR is not set (no login session)"));
    };
    let socket = Path::new(&rt).join("systemd/private");
    if !socket.exists() {
        return Err(format!("{SYSTEMD_ENV}=1 but the user manager's socket {socket:?} is missing"));
    }
    if !std::env::split_paths(crate::DEFAULT_PATH).any(|d| d.join("systemd-run").is_file()) {
        return Err(format!("{SYSTEMD_ENV}=1 but no systemd-run on {}", crate::DEFAULT_PATH));
    }
    let controllers = std::fs::read_to_string(Path::new(CGROUP_ROOT).join("cgroup.controllers")).unwrap_or_default();
    for c in ["memory", "pids"] {
        if !controllers.split_whitespace().any(|x| x == c) {
            return Err(format!("no {c} controller in {CGROUP_ROOT}/cgroup.controllers (`{}`)", controllers.trim()));
        }
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(own) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        if systemd_scope_in(own, h().uid).is_some() {
            return Err(format!("the tests already run in a systemd scope ({own}): capsule would not re-start"));
        }
    }
    Ok(())
}

/// The transient scope (`/user.slice/user-UID.slice/user@UID.service/
/// app.slice/run-*.scope`, as the kernel names it) of a cgroup path at or
/// below it, e.g. the re-started capsule's `.../run-r1a2b.scope/capsule-leaf`.
pub fn systemd_scope_in(cgroup: &str, uid: u32) -> Option<String> {
    let prefix = format!("/user.slice/user-{uid}.slice/user@{uid}.service/app.slice/");
    let rest = cgroup.strip_prefix(&prefix)?;
    let unit = rest.split('/').next()?;
    (unit.starts_with("run-") && unit.ends_with(".scope") && unit.len() > ".scope".len() + 4)
        .then(|| format!("{prefix}{unit}"))
}

/// `SKIP` for a test that needs root to set up what it checks, with why:
/// the systemd mode runs as the user and gets every cgroup from the
/// manager. Never a failure (scripts/test-systemd.sh checks the list).
pub fn skip_systemd(test: &str, why: &str) {
    crate::report_skip(test, &format!("not in the systemd mode ({SYSTEMD_ENV}=1): {why}"));
}

/// `not_in_systemd_mode!(test_name, why)`: returns from the test after
/// [`skip_systemd`] in the systemd mode.
#[macro_export]
macro_rules! not_in_systemd_mode {
    ($test:expr, $why:expr) => {
        if $crate::h().systemd {
            $crate::skip_systemd($test, $why);
            return;
        }
    };
}

/// Watches a capsule process for the scope its re-started self runs in:
/// the child it waits for (`systemd-run`, which the manager moves into the
/// scope, then execs capsule again there).
pub(crate) struct ScopeWatch {
    seen: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ScopeWatch {
    pub fn start(pid: i32) -> ScopeWatch {
        let seen = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let uid = h().uid;
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                // Every thread's children: PID 1s prepared ahead come from a spawner thread.
                let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
                let kids: String = tasks
                    .map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ")
                    .collect();
                for kid in kids.split_whitespace() {
                    let cg = std::fs::read_to_string(format!("/proc/{kid}/cgroup")).unwrap_or_default();
                    if let Some(scope) =
                        cg.lines().find_map(|l| l.strip_prefix("0::")).and_then(|c| systemd_scope_in(c, uid))
                    {
                        *s.lock().unwrap() = Some(scope);
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        ScopeWatch { seen, stop, thread: Some(thread) }
    }

    /// The scope seen so far, as a path under /sys/fs/cgroup.
    pub fn scope(&self) -> Option<PathBuf> {
        self.seen.lock().unwrap().as_ref().map(|s| Path::new(CGROUP_ROOT).join(s.trim_start_matches('/')))
    }

    /// Waits up to `t` for the scope (while `alive` says capsule runs).
    pub fn wait_scope(&self, t: Duration, mut alive: impl FnMut() -> bool) -> Option<PathBuf> {
        let deadline = Instant::now() + t;
        loop {
            if let Some(s) = self.scope() {
                return Some(s);
            }
            if Instant::now() > deadline || !alive() {
                return self.scope();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops watching; the scope seen, if any.
    pub fn finish(&mut self) -> Option<PathBuf> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.scope()
    }
}

impl Drop for ScopeWatch {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What keeps a finished run's scope from being collected: the manager
/// removes a scope once its last process exits, so a scope still there
/// after `limit` names the processes that outlived capsule.
pub(crate) fn scope_leftovers(scope: &Path, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    while scope.exists() {
        if Instant::now() > deadline {
            let mut procs = Vec::new();
            let mut stack = vec![scope.to_path_buf()];
            while let Some(d) = stack.pop() {
                for l in std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default().lines() {
                    let cmd = std::fs::read(format!("/proc/{}/cmdline", l.trim()))
                        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
                        .unwrap_or_default();
                    procs.push(format!("{} in {} ({cmd})", l.trim(), d.display()));
                }
                if let Ok(rd) = std::fs::read_dir(&d) {
                    stack.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
                }
            }
            return Some(format!(
                "the systemd scope {} was not collected within {limit:?} after capsule exited; processes {procs:?}",
                scope.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::systemd_scope_in;

    #[test]
    fn scope_of_a_cgroup_path() {
        let base = "/user.slice/user-1500.slice/user@1500.service/app.slice";
        let want = Some(format!("{base}/run-r0123abcd.scope"));
        assert_eq!(systemd_scope_in(&format!("{base}/run-r0123abcd.scope"), 1500), want);
        assert_eq!(systemd_scope_in(&format!("{base}/run-r0123abcd.scope/capsule-leaf"), 1500), want);
        assert_eq!(systemd_scope_in(&format!("{base}/run-r0123abcd.scope"), 1501), None);
        assert_eq!(systemd_scope_in(&format!("{base}/dbus.service"), 1500), None);
        assert_eq!(systemd_scope_in("/system.slice/cgroup2-vm.service", 1500), None);
        assert_eq!(systemd_scope_in(&format!("{base}/run-.scope"), 1500), None);
    }
}
