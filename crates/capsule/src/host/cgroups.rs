//! cgroup v2: finding a delegated subtree, a cgroup per run with its
//! limits (kept for the next run of the same shape where the kernel allows
//! it, see [`reuse_unsupported`]), and the run's accounting.
//!
//! Layout under the base cgroup B (a subtree delegated to the user):
//!
//! ```text
//! B/capsule-leaf/                  processes that were in B (only when capsule had
//!                                  to enable controllers on B: "no internal processes");
//!                                  a caller there is the same caller as in B
//! B/capsule.<pid>.<starttime>.<n>/ run n of the supervisor <pid>: the limits, out of
//!                                  the program's sight (unique names: no collisions
//!                                  between supervisors sharing B; a crashed one's are
//!                                  recognised by its dead pid and removed)
//!   prog/                          the program's processes; their cgroup namespace is
//!                                  rooted here, limits mirrored for programs that read them
//! ```
//!
//! Reuse: where the kernel can reset what a fresh cgroup starts with (see
//! [`reuse_unsupported`]), a run's `capsule.<pid>.<starttime>.<n>` is kept
//! once the run is over, emptied, for the next run of the same shape:
//! `prog` (the part the program may write to) is made anew for every run;
//! the counters are taken at the start of the run and subtracted, the
//! memory peak is reset through its own descriptor, the page cache the
//! previous run left is reclaimed, and a cgroup whose state a fresh one
//! would not have (a pids peak above 1, memory still charged) is removed
//! instead.
//!
//! The limits are enforced on `run.<n>`, which the program cannot see: its
//! cgroup namespace is rooted at `prog`, so a cgroup2 mount it makes in a
//! nested namespace shows `prog` and below. The files of `prog` are owned
//! by the user (delegation) and so writable by the program, but raising a
//! limit there does not lift the one above it: the program cannot turn its
//! own limits off.
//!
//! Set-up and restore of B are serialized between supervisors with flock(2)
//! on B's directory.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::fs;
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::SysError;
use crate::proto::config::CgroupConfig;
use crate::proto::spec::Limits;
use crate::sys;

/// Controllers every run gets. `cpu` and `cpuset` are enabled on the base
/// only when a run asks for `cpu_bandwidth` or `cpus`: each enabled
/// controller is state the kernel builds and tears down for every cgroup of
/// every run (`cpu.stat` exists without the cpu controller).
const CONTROLLERS: [&str; 2] = ["memory", "pids"];
/// Controllers without which capsule does not use cgroups at all.
const REQUIRED: [&str; 2] = ["memory", "pids"];
/// The agent's identity takes a caller in `B/capsule-leaf` as one in B
/// (`capsule_nolibc::identity::cgroup_line`), as [`discover`] does.
const LEAF: &str = capsule_nolibc::identity::CGROUP_LEAF;
const INSTANCE_PREFIX: &str = "capsule.";
/// Most memory an emptied run cgroup may still have charged after its page
/// cache is reclaimed to be reused: kernel objects of the previous run the
/// kernel frees a little later (8 to 32 KiB measured), which a reused
/// cgroup adds to its limit and subtracts from its peak.
const LEFTOVER_MAX: u64 = 64 << 10;
/// Set to `1`: every run gets a fresh cgroup, also where the kernel allows
/// reusing one (to compare the two, and to test both).
pub const FRESH_ENV: &str = "CAPSULE_FRESH_CGROUPS";
/// cpu.max period, µs.
const CPU_PERIOD_US: u64 = 100_000;

/// Where a supervisor's cgroups come from (`capsule check` reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `--cgroup PATH` (or the profile's `cgroup.path`).
    Explicit,
    /// The caller's own cgroup, which the caller may manage.
    Own,
    /// A transient `systemd-run --user --scope -p Delegate=yes` scope.
    SystemdScope,
    /// None: degraded mode, accounting from rusage.
    None,
}

/// The result of looking for a cgroup subtree.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub source: Source,
    /// The base cgroup directory, for `Explicit` and `Own`.
    pub base: Option<PathBuf>,
    /// What was found, or why nothing usable was.
    pub detail: String,
}

/// How to get delegation, for messages and `capsule check`.
pub const DELEGATION_HINT: &str = "run capsule inside a delegated cgroup v2 subtree: \
`systemd-run --user --scope -p Delegate=yes -- capsule ...`, a container with its own cgroup \
namespace, or a subtree an administrator created and chowned to you (pass it with --cgroup PATH); \
the kernel must use the unified hierarchy (boot with systemd.unified_cgroup_hierarchy=1)";

/// The first cgroup2 mount point in `mountinfo`, and its root.
fn cgroup2_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    crate::host::mountinfo::parse_mountinfo(mountinfo)
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| (PathBuf::from(m.mount_point), m.root))
}

/// The caller's cgroup v2 path from `/proc/self/cgroup` (`0::/path`).
fn own_cgroup(proc_self_cgroup: &str) -> Option<String> {
    proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string))
}

/// The directory of cgroup `path` (as in /proc/self/cgroup) under the mount.
fn cgroup_dir(mount: &Path, mount_root: &str, path: &str) -> Option<PathBuf> {
    let rel = if mount_root == "/" {
        path.trim_start_matches('/')
    } else {
        path.strip_prefix(mount_root)?.trim_start_matches('/')
    };
    Some(if rel.is_empty() { mount.to_path_buf() } else { mount.join(rel) })
}

fn writable(p: &Path) -> bool {
    CString::new(p.as_os_str().as_encoded_bytes()).is_ok_and(|c| sys::access_w(&c))
}

/// Why `dir` cannot serve as a base, or None when it can.
fn unusable(dir: &Path) -> Option<String> {
    let controllers = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> =
        REQUIRED.iter().copied().filter(|c| !controllers.split_whitespace().any(|x| x == *c)).collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} lacks the {} controller(s) (cgroup.controllers: `{}`)",
            dir.display(),
            missing.join(", "),
            controllers.trim()
        ));
    }
    for f in ["", "cgroup.procs", "cgroup.subtree_control"] {
        let p = if f.is_empty() { dir.to_path_buf() } else { dir.join(f) };
        if !writable(&p) {
            return Some(format!("{} is not writable by this user (not delegated)", p.display()));
        }
    }
    None
}

/// Whether a systemd user manager can delegate a scope here.
pub fn systemd_user_manager() -> bool {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    // The socket first: one stat, and where it is missing (most sandboxes,
    // CI, containers) no PATH search on every start.
    if !runtime.is_some_and(|r| r.join("systemd/private").exists()) {
        return false;
    }
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("systemd-run").is_file()))
}

/// Looks for a cgroup subtree, in the documented order.
pub fn discover(cfg: &CgroupConfig) -> Discovery {
    let none = |detail: String| Discovery { source: Source::None, base: None, detail };
    if cfg.disable {
        return none("cgroups disabled (--no-cgroups)".into());
    }
    if let Some(p) = &cfg.path {
        return match unusable(p) {
            None => Discovery {
                source: Source::Explicit,
                base: Some(p.clone()),
                detail: format!("--cgroup {}", p.display()),
            },
            Some(why) => none(format!("--cgroup {}: {why}", p.display())),
        };
    }
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some((mount, root)) = cgroup2_mount(&mountinfo) else {
        return none("no cgroup v2 hierarchy is mounted".into());
    };
    let own = fs::read_to_string("/proc/self/cgroup").ok().and_then(|s| own_cgroup(&s));
    let own_dir = own.as_deref().and_then(|p| cgroup_dir(&mount, &root, p));
    let why = match &own_dir {
        Some(dir) => {
            // Our own leaf, from an earlier set-up: the base is its parent.
            let dir = if dir.file_name().is_some_and(|n| n == LEAF) {
                dir.parent().unwrap_or(dir).to_path_buf()
            } else {
                dir.clone()
            };
            match unusable(&dir) {
                None => {
                    return Discovery {
                        source: Source::Own,
                        detail: format!("own cgroup {}", dir.display()),
                        base: Some(dir),
                    }
                }
                Some(why) => why,
            }
        }
        None => "cannot find this process's cgroup v2 (/proc/self/cgroup)".into(),
    };
    if systemd_user_manager() && std::env::var_os(IN_SCOPE_ENV).is_none() {
        return Discovery {
            source: Source::SystemdScope,
            base: None,
            detail: format!("{why}; a systemd user manager can delegate a transient scope"),
        };
    }
    none(why)
}

/// Set in the environment of a capsule re-started inside a systemd scope,
/// so that it does not try again.
pub const IN_SCOPE_ENV: &str = "CAPSULE_IN_SYSTEMD_SCOPE";

/// The command that re-starts `argv` in a transient delegated scope.
pub fn systemd_scope_command(argv: &[String]) -> Vec<String> {
    let mut v: Vec<String> = ["systemd-run", "--user", "--scope", "-p", "Delegate=yes", "--collect", "--quiet", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(argv.iter().cloned());
    v
}

fn err(call: &str, path: &Path, e: io::Error) -> SysError {
    SysError::new(call, e.raw_os_error().unwrap_or(libc::EIO)).path(path.display().to_string())
}

fn write(path: &Path, value: &str) -> Result<(), SysError> {
    fs::write(path, value).map_err(|e| err("write", path, e))
}

fn pids_of(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Moves every process of `from` into `to`, until `from` stays empty.
fn move_all(from: &Path, to: &Path) -> Result<(), SysError> {
    for _ in 0..100 {
        let pids = pids_of(from);
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            match fs::write(to.join("cgroup.procs"), &pid) {
                // Gone meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                other => other.map_err(|e| err("write", &to.join("cgroup.procs"), e))?,
            }
        }
    }
    Err(SysError::new("moving processes (they keep forking)", libc::EBUSY).path(from.display().to_string()))
}

/// Removes `dir` and every cgroup below it, killing what runs there.
fn remove_tree(dir: &Path) {
    let _ = fs::write(dir.join("cgroup.kill"), "1");
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    for _ in 0..200 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::NotFound => return,
            // Killed processes take a moment to leave.
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// `starttime` (field 22 of /proc/<pid>/stat), to tell a live process from
/// a reused pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Holds flock(2) on a directory until dropped.
struct Lock(#[allow(dead_code)] OwnedFd);

fn lock(dir: &Path) -> Result<Lock, SysError> {
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| SysError::new("open", libc::EINVAL))?;
    let fd = sys::open(&c, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| SysError::new("open", e).path(dir.display().to_string()))?;
    sys::flock_exclusive(fd.as_raw_fd()).map_err(|e| SysError::new("flock", e).path(dir.display().to_string()))?;
    Ok(Lock(fd))
}

fn controllers_of(dir: &Path, file: &str) -> Vec<String> {
    fs::read_to_string(dir.join(file)).unwrap_or_default().split_whitespace().map(str::to_string).collect()
}

/// Why the cgroups of runs cannot be reused here, judged from `dir`, a
/// cgroup with the memory controller (a run's, or the base); None when
/// they can. Reuse needs to empty a cgroup (`cgroup.kill`, Linux ≥ 5.14),
/// drop the page cache its previous run left (`memory.reclaim`, 5.19) and
/// reset its memory peak (a writable `memory.peak`, 6.12).
pub fn reuse_unsupported(dir: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    if std::env::var_os(FRESH_ENV).is_some_and(|v| v == "1") {
        return Some(format!("{FRESH_ENV}=1"));
    }
    if !dir.join("cgroup.kill").exists() {
        return Some("the kernel has no cgroup.kill (Linux >= 5.14)".into());
    }
    if !dir.join("memory.reclaim").exists() {
        return Some("the kernel has no memory.reclaim (Linux >= 5.19)".into());
    }
    match fs::metadata(dir.join("memory.peak")) {
        Ok(m) if m.permissions().mode() & 0o200 != 0 => None,
        Ok(_) => Some("the kernel cannot reset memory.peak (Linux >= 6.12)".into()),
        Err(_) => Some("the kernel has no memory.peak (Linux >= 5.19)".into()),
    }
}

/// Whether runs' cgroups are reused: not known until the first one exists.
#[derive(Debug, Clone, PartialEq)]
enum Reuse {
    Unknown,
    Yes,
    /// A fresh cgroup per run, and why.
    No(String),
}

/// An [`Instance`] as it crosses the supervisor's re-execution.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct InstanceState {
    base: PathBuf,
    prefix: String,
    controllers: Vec<String>,
    /// Fresh cgroups forced ([`FRESH_ENV`]), and the reason.
    #[serde(default)]
    fresh: Option<String>,
}

/// Emptied run cgroups, kept for the next run of their shape: at most one
/// per slot of the supervisor (its parallel runs and the PID 1s it prepares
/// ahead), the oldest beyond removed.
#[derive(Default)]
struct Pool {
    idle: RefCell<Vec<Kept>>,
    max: Cell<usize>,
}

/// One supervisor's share of B: its runs are `B/capsule.<pid>.<starttime>.<n>`.
pub(crate) struct Instance {
    base: PathBuf,
    /// `capsule.<pid>.<starttime>.`
    prefix: String,
    /// Controllers enabled on the base for the runs.
    controllers: RefCell<Vec<&'static str>>,
    next_run: Cell<u64>,
    reuse: RefCell<Reuse>,
    pool: Rc<Pool>,
}

impl Instance {
    /// Prepares the instance cgroup under `base`.
    pub(crate) fn setup(base: &Path) -> Result<Self, SysError> {
        let _lock = lock(base)?;
        // Leftovers of crashed supervisors.
        if let Ok(entries) = fs::read_dir(base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix(INSTANCE_PREFIX) else { continue };
                // `<pid>.<starttime>.<n>`
                let mut it = rest.split('.');
                let (Some(pid), Some(start)) =
                    (it.next().and_then(|p| p.parse().ok()), it.next().and_then(|s| s.parse().ok()))
                else {
                    continue;
                };
                if start_time(pid) != Some(start) {
                    remove_tree(&e.path());
                }
            }
        }
        let available = controllers_of(base, "cgroup.controllers");
        let controllers: Vec<&'static str> =
            CONTROLLERS.iter().copied().filter(|c| available.iter().any(|a| a == c)).collect();
        let enabled = controllers_of(base, "cgroup.subtree_control");
        if controllers.iter().any(|c| !enabled.iter().any(|e| e == c)) {
            // "No internal processes": B's processes (the caller among them)
            // move to a leaf before B may hand controllers to children. An
            // empty B (an administrator's subtree) needs no leaf, and keeps
            // its controllers enabled: nothing to give back.
            if !pids_of(base).is_empty() {
                let leaf = base.join(LEAF);
                match fs::create_dir(&leaf) {
                    Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(err("mkdir", &leaf, e)),
                    _ => {}
                }
                move_all(base, &leaf)?;
            }
            let want: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
            write(&base.join("cgroup.subtree_control"), &want.join(" "))?;
        }
        let pid = sys::getpid() as u32;
        let start = start_time(pid).unwrap_or(0);
        let prefix = format!("{INSTANCE_PREFIX}{pid}.{start}.");
        let forced = std::env::var_os(FRESH_ENV).is_some_and(|v| v == "1");
        Ok(Instance {
            base: base.to_path_buf(),
            prefix,
            controllers: RefCell::new(controllers),
            next_run: Cell::new(0),
            reuse: RefCell::new(if forced { Reuse::No(format!("{FRESH_ENV}=1")) } else { Reuse::Unknown }),
            pool: Rc::new(Pool { idle: RefCell::default(), max: Cell::new(1) }),
        })
    }

    /// The instance as it crosses the supervisor's re-execution (see
    /// `Supervisor::start`): it is made of paths, and goes on in the
    /// re-executed process, so it is not torn down here.
    pub(crate) fn into_state(self) -> InstanceState {
        let me = std::mem::ManuallyDrop::new(self);
        let controllers = me.controllers.borrow().iter().map(|c| c.to_string()).collect();
        let fresh = match &*me.reuse.borrow() {
            Reuse::No(why) => Some(why.clone()),
            _ => None,
        };
        InstanceState { base: me.base.clone(), prefix: me.prefix.clone(), controllers, fresh }
    }

    pub(crate) fn from_state(s: InstanceState) -> Instance {
        let known = CONTROLLERS.iter().chain(["cpu", "cpuset"].iter());
        let controllers = known.filter(|k| s.controllers.iter().any(|c| c == *k)).copied().collect();
        Instance {
            base: s.base,
            prefix: s.prefix,
            controllers: RefCell::new(controllers),
            next_run: Cell::new(0),
            reuse: RefCell::new(s.fresh.map_or(Reuse::Unknown, Reuse::No)),
            pool: Rc::new(Pool { idle: RefCell::default(), max: Cell::new(1) }),
        }
    }

    /// Keeps at most `n` emptied run cgroups for reuse.
    pub(crate) fn keep_at_most(self, n: usize) -> Self {
        self.pool.max.set(n);
        self
    }

    fn own_runs(&self) -> Vec<PathBuf> {
        fs::read_dir(&self.base)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&self.prefix))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Creates the cgroups of one run, shaped for `limits` (the controllers
    /// it needs); the values are written by [`RunCgroup::apply`].
    pub(crate) fn new_run(&self, limits: &Limits) -> Result<RunCgroup, SysError> {
        // cpu and cpuset, the first time a run needs them (B holds no
        // processes by now, so it may hand them out any time).
        for (controller, wanted) in [("cpu", limits.cpu_bandwidth.is_some()), ("cpuset", limits.cpus.is_some())] {
            if wanted && !self.controllers.borrow().contains(&controller) {
                let available = controllers_of(&self.base, "cgroup.controllers");
                if !available.iter().any(|a| a == controller) {
                    return Err(SysError::new(format!("enabling the {controller} controller"), libc::EOPNOTSUPP)
                        .path(self.base.display().to_string())
                        .hint(format!("the {controller} controller is not delegated to this cgroup")));
                }
                write(&self.base.join("cgroup.subtree_control"), &format!("+{controller}"))?;
                self.controllers.borrow_mut().push(controller);
            }
        }
        let shape = shape(limits);
        let kept = {
            let mut idle = self.pool.idle.borrow_mut();
            idle.iter().rposition(|k| k.shape == shape).map(|i| idle.remove(i))
        };
        if let Some(k) = kept {
            let run = k.run.clone();
            match RunCgroup::reuse(k, self.pool.clone()) {
                Ok(rc) => return Ok(rc),
                // Not as a fresh one would be: a fresh one instead.
                Err(_) => remove_tree(&run),
            }
        }
        let n = self.next_run.get();
        self.next_run.set(n + 1);
        let run = self.base.join(format!("{}{n}", self.prefix));
        fs::create_dir(&run).map_err(|e| err("mkdir", &run, e))?;
        if *self.reuse.borrow() == Reuse::Unknown {
            let decided = reuse_unsupported(&run).map_or(Reuse::Yes, Reuse::No);
            *self.reuse.borrow_mut() = decided;
        }
        let pool = (*self.reuse.borrow() == Reuse::Yes).then(|| self.pool.clone());
        let rc = RunCgroup::configure(run.clone(), limits, pool);
        if rc.is_err() {
            remove_tree(&run);
        }
        rc
    }

    /// Removes the instance, and restores the base when no other
    /// supervisor uses it any more.
    pub(crate) fn teardown(&self) {
        self.pool.idle.borrow_mut().clear();
        let Ok(_lock) = lock(&self.base) else { return };
        for run in self.own_runs() {
            remove_tree(&run);
        }
        let others = fs::read_dir(&self.base).is_ok_and(|entries| {
            entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(INSTANCE_PREFIX))
        });
        let leaf = self.base.join(LEAF);
        if others || !leaf.is_dir() {
            return;
        }
        // Last one out: give B back as it was (controllers off, processes
        // back in B, the leaf gone).
        let off: Vec<String> =
            controllers_of(&self.base, "cgroup.subtree_control").iter().map(|c| format!("-{c}")).collect();
        if !off.is_empty() && write(&self.base.join("cgroup.subtree_control"), &off.join(" ")).is_err() {
            return;
        }
        if move_all(&leaf, &self.base).is_ok() {
            let _ = fs::remove_dir(&leaf);
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// What of a run cgroup outlives its run when it is kept for reuse.
pub(crate) struct Kept {
    run: PathBuf,
    shape: [bool; 4],
    /// `run/cpu.stat`, for the CPU baseline at execve and the CPU-time timer.
    cpu_stat: fs::File,
    /// `run/cgroup.kill`.
    kill: Option<OwnedFd>,
    /// `run/memory.peak`, read-write where the cgroup is reused: a write
    /// resets the peak seen through this descriptor.
    peak: Option<fs::File>,
    /// `run/memory.events`, `run/memory.current` and `run/pids.peak`, read
    /// at every run's start and end: opened once, read from offset 0.
    events: Option<fs::File>,
    current: Option<fs::File>,
    pids_peak: Option<fs::File>,
}

/// A cgroup file's text, read from its start through a kept descriptor
/// (the kernel makes it anew for a read at offset 0).
fn pread_text<'a>(f: Option<&fs::File>, buf: &'a mut [u8]) -> &'a str {
    use std::os::unix::fs::FileExt;
    let n = f.and_then(|f| f.read_at(buf, 0).ok()).unwrap_or(0);
    std::str::from_utf8(&buf[..n]).unwrap_or("")
}

/// A cgroup file holding one number, through a kept descriptor.
fn pread_u64(f: Option<&fs::File>) -> Option<u64> {
    pread_text(f, &mut [0u8; 32]).trim().parse().ok()
}

/// The counters of a run cgroup at the start of a run (zero when fresh).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counters {
    user_us: u64,
    system_us: u64,
    memory_max_events: u64,
    oom_kills: u64,
}

impl Counters {
    fn read(k: &Kept) -> Counters {
        let (mut a, mut b) = ([0u8; 1024], [0u8; 512]);
        let (cpu, events) = (pread_text(Some(&k.cpu_stat), &mut a), pread_text(k.events.as_ref(), &mut b));
        Counters {
            user_us: keyed(cpu, "user_usec").unwrap_or(0),
            system_us: keyed(cpu, "system_usec").unwrap_or(0),
            memory_max_events: keyed(events, "max").unwrap_or(0),
            oom_kills: keyed(events, "oom_kill").unwrap_or(0),
        }
    }
}

/// One session command's cgroup ([`RunCgroup::command_cgroup`]).
pub(crate) struct CommandCgroup {
    dir: PathBuf,
    /// Its `cgroup.procs`, for the command to write itself into.
    pub(crate) procs: OwnedFd,
    cpu_stat: fs::File,
    events: fs::File,
    peak: Option<fs::File>,
}

/// What a command's cgroup counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommandStats {
    pub user_us: u64,
    pub system_us: u64,
    pub memory_peak: Option<u64>,
    pub oom_kills: u64,
}

impl CommandCgroup {
    pub(crate) fn stats(&self) -> CommandStats {
        let (mut a, mut b) = ([0u8; 1024], [0u8; 512]);
        let (cpu, events) = (pread_text(Some(&self.cpu_stat), &mut a), pread_text(Some(&self.events), &mut b));
        CommandStats {
            user_us: keyed(cpu, "user_usec").unwrap_or(0),
            system_us: keyed(cpu, "system_usec").unwrap_or(0),
            memory_peak: pread_u64(self.peak.as_ref()),
            oom_kills: keyed(events, "oom_kill").unwrap_or(0),
        }
    }

    /// Removes it once its processes are gone; false while some are left.
    pub(crate) fn try_remove(&self) -> bool {
        fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
    }
}

impl Drop for CommandCgroup {
    /// Gone with its session (whose cgroup's removal takes what is left).
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

/// The cgroups of one run, and the descriptors the children use.
pub(crate) struct RunCgroup {
    /// Some until dropped.
    kept: Option<Kept>,
    prog: PathBuf,
    /// `prog`, for the tracee to be born in (CLONE_INTO_CGROUP).
    prog_dir: OwnedFd,
    /// Where the cgroup goes once emptied, when it may be reused.
    pool: Option<Rc<Pool>>,
    /// The counters when this run started.
    start: Counters,
    /// Memory still charged when the cgroup was taken for this run (see
    /// [`LEFTOVER_MAX`]): added to the memory limit, subtracted from the peak.
    leftover: u64,
    /// Emptied and fit for reuse (see `try_remove`): goes to the pool when dropped.
    keep: Cell<bool>,
}

/// What a run's cgroup says after the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub user_us: u64,
    pub system_us: u64,
    /// user + system when the run's cgroup was taken for it (the baseline
    /// PID 1 reads at execve is the cgroup's absolute figure).
    pub cpu_start_us: u64,
    pub memory_peak: Option<u64>,
    pub memory_max_events: u64,
    pub oom_kills: u64,
    pub pids_peak: Option<u64>,
}

fn open_at(path: &Path, flags: i32) -> Result<OwnedFd, SysError> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| SysError::new("open", libc::EINVAL))?;
    sys::open(&c, flags, 0).map_err(|e| SysError::new("open", e).path(path.display().to_string()))
}

fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The limits of a run as cgroup files and values.
fn limit_files(limits: &Limits) -> Vec<(&'static str, String)> {
    let mut files: Vec<(&str, String)> = Vec::new();
    if let Some(m) = limits.memory {
        files.push(("memory.max", m.to_string()));
    }
    if let Some(p) = limits.pids {
        files.push(("pids.max", p.to_string()));
    }
    if let Some(b) = limits.cpu_bandwidth {
        let quota = ((b * CPU_PERIOD_US as f64).round() as u64).max(1000);
        files.push(("cpu.max", format!("{quota} {CPU_PERIOD_US}")));
    }
    if let Some(cpus) = &limits.cpus {
        files.push(("cpuset.cpus", cpus.clone()));
    }
    files
}

/// The controller a limit file belongs to, for the files mirrored on `prog`.
fn mirrored_controller(file: &str) -> Option<&'static str> {
    match file {
        "memory.max" => Some("memory"),
        "pids.max" => Some("pids"),
        "cpu.max" => Some("cpu"),
        _ => None,
    }
}

/// Which limits a run sets: two runs of the same shape can use cgroups
/// prepared the same way.
pub(crate) fn shape(limits: &Limits) -> [bool; 4] {
    [limits.memory.is_some(), limits.pids.is_some(), limits.cpu_bandwidth.is_some(), limits.cpus.is_some()]
}

impl RunCgroup {
    fn configure(run: PathBuf, limits: &Limits, pool: Option<Rc<Pool>>) -> Result<Self, SysError> {
        for (f, v) in [("memory.swap.max", "0"), ("memory.oom.group", "1")] {
            let p = run.join(f);
            match fs::write(&p, v) {
                // No swap accounting on this kernel: nothing to limit.
                Err(e) if f == "memory.swap.max" && e.kind() == ErrorKind::NotFound => {}
                other => other.map_err(|e| err("write", &p, e))?,
            }
        }
        // PSI costs a little on every scheduling event; nobody reads it here.
        let _ = fs::write(run.join("cgroup.pressure"), "0");
        // The limits go on `run` (out of the program's sight), and are
        // mirrored on `prog`, for programs that size themselves by their own
        // limits (JVM, Go), which needs the controller there too; writing
        // there lifts nothing. Without such a limit, `prog` stays a bare
        // cgroup: `run` holds nothing else, so its figures are the program's.
        let mirrored: Vec<&str> = limit_files(limits).iter().filter_map(|(f, _)| mirrored_controller(f)).collect();
        if !mirrored.is_empty() {
            let want: Vec<String> = mirrored.iter().map(|c| format!("+{c}")).collect();
            write(&run.join("cgroup.subtree_control"), &want.join(" "))?;
        }
        let cpu_stat = fs::File::from(open_at(&run.join("cpu.stat"), libc::O_RDONLY)?);
        let kill = open_at(&run.join("cgroup.kill"), libc::O_WRONLY).ok();
        // Reused only with a peak that can be reset.
        let peak =
            pool.as_ref().and_then(|_| fs::File::options().read(true).write(true).open(run.join("memory.peak")).ok());
        let pool = pool.filter(|_| peak.is_some() && kill.is_some());
        let open = |f: &str| fs::File::open(run.join(f)).ok();
        let (events, current, pids_peak) = (open("memory.events"), open("memory.current"), open("pids.peak"));
        let kept = Kept { run, shape: shape(limits), cpu_stat, kill, peak, events, current, pids_peak };
        let (prog, prog_dir) = make_prog(&kept.run)?;
        Ok(RunCgroup {
            kept: Some(kept),
            prog,
            prog_dir,
            pool,
            start: Counters::default(),
            leftover: 0,
            keep: Cell::new(false),
        })
    }

    /// A kept run cgroup taken for a new run: a fresh `prog`, the memory
    /// peak reset (to the little still charged, the leftover), the counters
    /// read as the run's start.
    fn reuse(kept: Kept, pool: Rc<Pool>) -> Result<Self, SysError> {
        let (prog, prog_dir) = make_prog(&kept.run)?;
        let leftover = pread_u64(kept.current.as_ref()).unwrap_or(0);
        let rc = RunCgroup {
            start: Counters::read(&kept),
            kept: Some(kept),
            prog,
            prog_dir,
            pool: Some(pool),
            leftover,
            keep: Cell::new(false),
        };
        let k = rc.kept();
        if let Some(peak) = &k.peak {
            use std::os::unix::fs::FileExt;
            peak.write_at(b"reset\n", 0).map_err(|e| err("write", &k.run.join("memory.peak"), e))?;
        }
        Ok(rc)
    }

    fn kept(&self) -> &Kept {
        self.kept.as_ref().expect("only None while dropped")
    }

    /// A session's cgroup: at its memory limit the kernel's OOM killer ends
    /// the process it picks (the largest, the command that pushed past),
    /// not every process of the session; removed at the end, never reused
    /// with that setting.
    pub(crate) fn for_session(&mut self) -> Result<(), SysError> {
        self.pool = None;
        let k = self.kept();
        for dir in [&k.run, &self.prog] {
            let p = dir.join("memory.oom.group");
            // Without the memory controller there (no file): nothing is OOM-killed as a group.
            if p.exists() {
                fs::write(&p, "0").map_err(|e| err("write", &p, e))?;
            }
        }
        Ok(())
    }

    /// A cgroup of its own for one command of a session, beside `prog`:
    /// its memory limit (the whole command OOM-killed at it, no swap) and
    /// its own accounting; the command moves itself in through the
    /// `cgroup.procs` returned, opened here (so with this process's cgroup
    /// namespace and credentials: the session's, rooted at `prog`, could
    /// not reach it).
    pub(crate) fn command_cgroup(&self, name: &str, memory: u64) -> Result<CommandCgroup, SysError> {
        let run = &self.kept().run;
        write(&run.join("cgroup.subtree_control"), "+memory")?;
        let dir = run.join(name);
        fs::create_dir(&dir).map_err(|e| err("mkdir", &dir, e))?;
        let made = (|| {
            for (f, v) in
                [("memory.max", memory.to_string()), ("memory.swap.max", "0".into()), ("memory.oom.group", "1".into())]
            {
                let p = dir.join(f);
                match fs::write(&p, v) {
                    Err(e) if f == "memory.swap.max" && e.kind() == ErrorKind::NotFound => {}
                    other => other.map_err(|e| err("write", &p, e))?,
                }
            }
            let _ = fs::write(dir.join("cgroup.pressure"), "0");
            let open = |f: &str| fs::File::open(dir.join(f)).map_err(|e| err("open", &dir.join(f), e));
            Ok(CommandCgroup {
                procs: open_at(&dir.join("cgroup.procs"), libc::O_WRONLY)?,
                cpu_stat: open("cpu.stat")?,
                events: open("memory.events")?,
                peak: open("memory.peak").ok(),
                dir: dir.clone(),
            })
        })();
        if made.is_err() {
            let _ = fs::remove_dir(&dir);
        }
        made
    }

    /// OOM kills in the run's cgroup since the run started.
    pub(crate) fn oom_kills(&self) -> u64 {
        Counters::read(self.kept()).oom_kills.saturating_sub(self.start.oom_kills)
    }

    /// Writes the run's limits (the cgroup was made for their shape).
    pub(crate) fn apply(&self, limits: &Limits) -> Result<(), SysError> {
        for (f, v) in limit_files(limits) {
            let p = self.kept().run.join(f);
            // The program's own charges get the whole limit (and `prog`,
            // fresh for every run, has it exactly).
            let on_run = match (f, limits.memory) {
                ("memory.max", Some(m)) if self.leftover > 0 => (m + self.leftover).to_string(),
                _ => v.clone(),
            };
            fs::write(&p, &on_run).map_err(|e| err("write", &p, e))?;
            if mirrored_controller(f).is_some() {
                let _ = fs::write(self.prog.join(f), &v);
            }
        }
        Ok(())
    }

    /// Reads the run's accounting (after every process of the run is gone),
    /// counted from the start of the run.
    pub(crate) fn stats(&self) -> Stats {
        let k = self.kept();
        let read = |p: PathBuf| fs::read_to_string(p).unwrap_or_default();
        // `run` holds the program's processes and nothing else.
        let now = Counters::read(k);
        let peak = match &k.peak {
            Some(f) => pread_u64(Some(f)),
            None => read(k.run.join("memory.peak")).trim().parse().ok(),
        };
        let s = self.start;
        Stats {
            user_us: now.user_us.saturating_sub(s.user_us),
            system_us: now.system_us.saturating_sub(s.system_us),
            cpu_start_us: s.user_us + s.system_us,
            memory_peak: peak.map(|p: u64| p.saturating_sub(self.leftover)),
            memory_max_events: now.memory_max_events.saturating_sub(s.memory_max_events),
            oom_kills: now.oom_kills.saturating_sub(s.oom_kills),
            // A kept cgroup's peak was at most 1 (see `fit_for_reuse`) and
            // every run has its program: the peak is the run's.
            pids_peak: pread_u64(k.pids_peak.as_ref()),
        }
    }

    /// Whether the emptied cgroup can start the next run as a fresh one
    /// would: `prog` removed (so empty, with no cgroups below), a pids peak
    /// of at most 1 (every run has its program: the next run's peak is its
    /// own), and at most [`LEFTOVER_MAX`] charged once the page cache the
    /// run left is reclaimed.
    fn fit_for_reuse(&self) -> bool {
        let k = self.kept();
        if fs::remove_dir(&self.prog).is_err() || pread_u64(k.pids_peak.as_ref()).is_some_and(|p| p > 1) {
            return false;
        }
        match pread_u64(k.current.as_ref()) {
            Some(n) if n <= LEFTOVER_MAX => true,
            Some(n) => {
                // EAGAIN when not all of it could be reclaimed: the check below says.
                let _ = fs::write(k.run.join("memory.reclaim"), n.to_string());
                pread_u64(k.current.as_ref()).is_some_and(|n| n <= LEFTOVER_MAX)
            }
            None => false,
        }
    }

    /// Removes the run's cgroups (every process is gone by now; anything
    /// unexpected falls back to killing and removing the whole tree), or
    /// keeps them for reuse.
    pub(crate) fn remove(self) {
        if self.try_remove() {
            return;
        }
        let run = &self.kept().run;
        if fs::remove_dir(&self.prog).is_err() || fs::remove_dir(run).is_err() {
            remove_tree(run);
        }
    }

    /// Removes the run's cgroups, or keeps them for reuse, if every process
    /// is gone; false if not yet.
    pub(crate) fn try_remove(&self) -> bool {
        if self.pool.is_some() && self.fit_for_reuse() {
            self.keep.set(true);
            return true;
        }
        let run = &self.kept().run;
        let _ = fs::remove_dir(&self.prog);
        fs::remove_dir(run).is_ok() || !run.exists()
    }

    pub(crate) fn raw_fds(&self) -> CgroupFds {
        let k = self.kept();
        CgroupFds {
            prog_dir: self.prog_dir.as_raw_fd(),
            cpu_stat: k.cpu_stat.as_raw_fd(),
            kill: k.kill.as_ref().map_or(-1, |f| f.as_raw_fd()),
        }
    }
}

impl Drop for RunCgroup {
    /// A cgroup `try_remove` found fit goes back to the pool.
    fn drop(&mut self) {
        if !self.keep.get() {
            return;
        }
        if let (Some(pool), Some(kept)) = (&self.pool, self.kept.take()) {
            let mut idle = pool.idle.borrow_mut();
            idle.push(kept);
            if idle.len() > pool.max.get() {
                let oldest = idle.remove(0);
                remove_tree(&oldest.run);
            }
        }
    }
}

/// Creates a run's `prog` and opens it for CLONE_INTO_CGROUP.
fn make_prog(run: &Path) -> Result<(PathBuf, OwnedFd), SysError> {
    let prog = run.join("prog");
    fs::create_dir(&prog).map_err(|e| err("mkdir", &prog, e))?;
    let _ = fs::write(prog.join("cgroup.pressure"), "0");
    let dir = open_at(&prog, libc::O_RDONLY | libc::O_DIRECTORY);
    if dir.is_err() {
        let _ = fs::remove_dir(&prog);
    }
    Ok((prog, dir?))
}

/// The run's cgroup descriptors as the children see them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CgroupFds {
    /// The program's cgroup directory.
    pub prog_dir: RawFd,
    pub cpu_stat: RawFd,
    /// -1 when the kernel has no cgroup.kill.
    pub kill: RawFd,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance crosses the supervisor's re-execution without being torn
    /// down (no files touched here: the base does not exist), with its
    /// controllers, the ones enabled later included.
    #[test]
    fn instance_state_round_trips() {
        let inst = Instance {
            base: PathBuf::from("/nonexistent/capsule-base"),
            prefix: "capsule.12.34.".into(),
            controllers: RefCell::new(vec!["memory", "pids", "cpu"]),
            next_run: Cell::new(5),
            reuse: RefCell::new(Reuse::No(format!("{FRESH_ENV}=1"))),
            pool: Rc::default(),
        };
        let s = inst.into_state();
        let json = serde_json::to_string(&s).unwrap();
        let back = Instance::from_state(serde_json::from_str(&json).unwrap());
        assert_eq!(back.base, Path::new("/nonexistent/capsule-base"));
        assert_eq!(back.prefix, "capsule.12.34.");
        assert_eq!(*back.controllers.borrow(), vec!["memory", "pids", "cpu"]);
        assert_eq!(*back.reuse.borrow(), Reuse::No(format!("{FRESH_ENV}=1")));
        std::mem::forget(back);
    }

    #[test]
    fn parses_mountinfo_and_own_cgroup() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
                  31 23 0:27 / /proc rw - proc proc rw\n";
        assert_eq!(cgroup2_mount(mi), Some((PathBuf::from("/sys/fs/cgroup"), "/".to_string())));
        assert_eq!(own_cgroup("0::/user.slice/x.scope\n").as_deref(), Some("/user.slice/x.scope"));
        assert_eq!(own_cgroup("1:name=systemd:/x\n"), None);
        assert_eq!(cgroup_dir(Path::new("/sys/fs/cgroup"), "/", "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/a/b")));
        assert_eq!(cgroup_dir(Path::new("/sys/fs/cgroup"), "/", "/"), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup_dir(Path::new("/sys/fs/cgroup"), "/a", "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/b")));
    }

    #[test]
    fn keyed_values() {
        let t = "usage_usec 123\nuser_usec 100\nsystem_usec 23\n";
        assert_eq!(keyed(t, "user_usec"), Some(100));
        assert_eq!(keyed(t, "nr_periods"), None);
        let ev = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n";
        assert_eq!(keyed(ev, "max"), Some(4));
        assert_eq!(keyed(ev, "oom_kill"), Some(1));
    }

    #[test]
    fn scope_command() {
        let v = systemd_scope_command(&["capsule".into(), "run".into()]);
        assert_eq!(v[..5], ["systemd-run", "--user", "--scope", "-p", "Delegate=yes"]);
        assert_eq!(v.last().map(String::as_str), Some("run"));
    }

    #[test]
    fn disabled_and_explicit_discovery() {
        let d = discover(&CgroupConfig { disable: true, ..Default::default() });
        assert_eq!(d.source, Source::None);
        let d = discover(&CgroupConfig { path: Some("/nonexistent/cg".into()), ..Default::default() });
        assert_eq!(d.source, Source::None);
        assert!(d.detail.contains("/nonexistent/cg"), "{}", d.detail);
    }
}
