//! The cgroup v2 VM: delegated scopes for capsule invocations, and skipping
//! the cgroup tests where there is no delegated hierarchy.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::harness::h;
use crate::scratch::unique;

pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The VM's delegated cgroup, owned by the VM user; scopes go below it.
pub const CGROUP_DELEGATED: &str = "/sys/fs/cgroup/delegated";
/// The controllers the harness enables for the scopes.
pub const SCOPE_CONTROLLERS: [&str; 4] = ["cpu", "memory", "pids", "cpuset"];

/// Root inside the cgroup v2 VM (`cgroup2-vm --as-root` sets CGROUP2_VM=1).
pub fn in_cgroup_vm() -> bool {
    // SAFETY: getuid cannot fail.
    std::env::var("CGROUP2_VM").map(|v| v == "1").unwrap_or(false) && unsafe { libc::getuid() } == 0
}

pub fn vm_user() -> String {
    std::env::var("CGROUP2_VM_USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "cgvm".into())
}

/// `CAPSULE_TEST_CGROUPS=1`: the cgroup tests must run (fail, not skip).
/// The systemd mode implies it: it exists to run them.
pub fn cgroups_wanted() -> bool {
    std::env::var("CAPSULE_TEST_CGROUPS").map(|v| v == "1").unwrap_or(false) || crate::systemd_mode()
}

/// Reports a skipped cgroup test: skips even under `CAPSULE_TEST_STRICT=1`
/// (the host has no delegated cgroup v2 hierarchy), fails under
/// `CAPSULE_TEST_CGROUPS=1`.
pub fn skip_cgroups(test: &str, reason: &str) {
    if cgroups_wanted() {
        panic!("{test}: cgroup v2 delegation missing (CAPSULE_TEST_CGROUPS=1): {reason}");
    }
    crate::report_skip(test, reason);
}

/// `require_cgroups!(test_name)`: returns from the test after
/// [`skip_cgroups`] unless the harness can give capsule delegated cgroup v2
/// scopes with the cpu, memory, pids and cpuset controllers (the VM); also
/// requires user namespaces, then as strictly as [`require!`].
#[macro_export]
macro_rules! require_cgroups {
    ($test:expr) => {
        if let Err(reason) = $crate::cgroups_available() {
            $crate::skip_cgroups($test, &reason);
            return;
        }
        $crate::require!($test, $crate::userns_available());
    };
}

/// Whether the cgroup tests can run: in the VM, with the controllers
/// enabled for the scopes (done once per test binary), or through the
/// user manager in the systemd mode.
pub fn cgroups_available() -> Result<(), String> {
    if h().systemd {
        return crate::systemd_available();
    }
    if !h().vm {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let controllers = std::fs::read_to_string(Path::new(CGROUP_ROOT).join("cgroup.controllers"))
            .map(|c| format!("`{}`", c.trim()))
            .unwrap_or_else(|_| "none (no cgroup2 mounted there: a hybrid or v1 layout)".into());
        return Err(format!(
            "no delegated cgroup v2 hierarchy to test in (cgroup2 controllers at {CGROUP_ROOT}: {controllers}; \
             own cgroups: {}); the cgroup tests run in the VM: \
             `sudo scripts/test-slow.sh cgroups`",
            own.trim().replace('\n', " ")
        ));
    }
    enable_delegated_controllers()
}

/// Once per test binary, as root: enables the scope controllers in the
/// delegated cgroup's `cgroup.subtree_control` (tolerating them being on).
pub fn enable_delegated_controllers() -> Result<(), String> {
    static R: OnceLock<Result<(), String>> = OnceLock::new();
    R.get_or_init(|| {
        let d = Path::new(CGROUP_DELEGATED);
        let read = |f: &str| std::fs::read_to_string(d.join(f)).map_err(|e| format!("{}/{f}: {e}", d.display()));
        let available = read("cgroup.controllers")?;
        let mut missing = Vec::new();
        for c in SCOPE_CONTROLLERS {
            if !available.split_whitespace().any(|x| x == c) {
                missing.push(format!("{c} (not in cgroup.controllers `{}`)", available.trim()));
                continue;
            }
            if read("cgroup.subtree_control")?.split_whitespace().any(|x| x == c) {
                continue;
            }
            if let Err(e) = std::fs::write(d.join("cgroup.subtree_control"), format!("+{c}")) {
                // A concurrent test binary may have won; check again.
                if !read("cgroup.subtree_control")?.split_whitespace().any(|x| x == c) {
                    missing.push(format!("{c} (enabling it: {e})"));
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("controllers unavailable in {}: {}", d.display(), missing.join(", ")))
        }
    })
    .clone()
}

/// A pre-exec hook that moves the calling process into `dir` by writing
/// "0" to its `cgroup.procs`, or into `dir/capsule-leaf` when `dir` cannot
/// take processes (controllers enabled by a capsule instance).
pub(crate) fn join_cgroup_hook(dir: &Path) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let c = |p: PathBuf| CString::new(p.into_os_string().into_encoded_bytes()).unwrap();
    let primary = c(dir.join("cgroup.procs"));
    let fallback = c(dir.join("capsule-leaf").join("cgroup.procs"));
    move || {
        let write0 = |p: &CString| -> std::io::Result<()> {
            // SAFETY: p is a valid C string; open/write/close are
            // async-signal-safe.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                if r == 1 {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        };
        match write0(&primary) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                write0(&fallback)
            }
            Err(e) => Err(e),
        }
    }
}

/// A delegated cgroup `/sys/fs/cgroup/delegated/scope-<unique>` owned by the
/// VM user, like a systemd scope with `Delegate=yes`; removed on drop
/// (forcibly: processes killed, sub-cgroups removed).
pub struct CgScope {
    pub path: PathBuf,
}

impl CgScope {
    pub fn new(tag: &str) -> CgScope {
        enable_delegated_controllers().unwrap_or_else(|e| panic!("cannot prepare cgroup scopes: {e}"));
        let path = Path::new(CGROUP_DELEGATED).join(unique(tag));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        let (uid, gid) = (h().uid, h().gid);
        for p in
            [path.clone(), path.join("cgroup.procs"), path.join("cgroup.threads"), path.join("cgroup.subtree_control")]
        {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
        }
        CgScope { path }
    }

    pub fn s(&self) -> String {
        self.path.display().to_string()
    }

    /// The scope's path as the kernel names it (`/delegated/scope-...`).
    pub fn cgroup_path(&self) -> String {
        format!("/{}", self.path.strip_prefix(CGROUP_ROOT).unwrap().display())
    }

    pub fn name(&self) -> String {
        self.path.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// Sub-cgroups, relative to the scope, parents before children.
    pub fn children(&self) -> Vec<String> {
        let mut all = Vec::new();
        let mut stack = vec![self.path.clone()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            let mut subs: Vec<PathBuf> =
                rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()).collect();
            subs.sort();
            for p in subs.into_iter().rev() {
                all.push(p.strip_prefix(&self.path).unwrap().display().to_string());
                stack.push(p);
            }
        }
        all
    }

    /// `(relative cgroup, pid)` of every process in the scope's tree
    /// (relative "" for the scope itself).
    pub fn procs(&self) -> Vec<(String, i32)> {
        let mut v = Vec::new();
        for rel in std::iter::once(String::new()).chain(self.children()) {
            let f =
                if rel.is_empty() { self.path.join("cgroup.procs") } else { self.path.join(&rel).join("cgroup.procs") };
            for l in std::fs::read_to_string(f).unwrap_or_default().lines() {
                if let Ok(pid) = l.trim().parse() {
                    v.push((rel.clone(), pid));
                }
            }
        }
        v
    }

    /// The scope's own `cgroup.subtree_control`.
    pub fn subtree_control(&self) -> String {
        std::fs::read_to_string(self.path.join("cgroup.subtree_control")).unwrap_or_default().trim().to_string()
    }

    /// A description of what is in the scope besides nothing, or `None`.
    pub fn leftovers(&self) -> Option<String> {
        let mut parts = Vec::new();
        let children = self.children();
        if !children.is_empty() {
            parts.push(format!("sub-cgroups {children:?}"));
        }
        let procs = self.procs();
        if !procs.is_empty() {
            let described: Vec<String> = procs
                .iter()
                .map(|(rel, pid)| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
                        .unwrap_or_default();
                    format!("{pid} in `{rel}` ({cmd})")
                })
                .collect();
            parts.push(format!("processes {described:?}"));
        }
        let sc = self.subtree_control();
        if !sc.is_empty() {
            parts.push(format!("controllers still enabled in cgroup.subtree_control: `{sc}`"));
        }
        if parts.is_empty() {
            None
        } else {
            Some(parts.join("; "))
        }
    }

    /// Kills everything in the scope and removes its sub-cgroups.
    pub fn clear(&self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.procs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for rel in self.children().into_iter().rev() {
            let p = self.path.join(&rel);
            if let Err(e) = std::fs::remove_dir(&p) {
                eprintln!("harness: rmdir {}: {e}", p.display());
            }
        }
    }
}

impl Drop for CgScope {
    fn drop(&mut self) {
        if self.leftovers().is_some() {
            self.clear();
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("harness: rmdir {}: {e}; {:?}", self.path.display(), self.leftovers());
        }
    }
}

/// The cgroup (path as the test process sees it, e.g.
/// `/delegated/scope-x/capsule.1.2/run.0/prog`) of a process.
pub fn cgroup_of(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}
