//! Who runs capsule and where the binaries are: the unprivileged test user,
//! the binaries staged where that user can run them.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::cgroup::{in_cgroup_vm, vm_user};
use crate::systemd::{systemd_mode, SYSTEMD_ENV};
use crate::{BIN_ROOT, DEFAULT_PATH, OTHER_USER, SCRATCH_ROOT, TEST_USER};

/// Who runs capsule and where the binaries are.
pub struct Harness {
    /// The test process runs as root (uid 0).
    pub is_root: bool,
    /// Root inside the cgroup v2 VM (`CGROUP2_VM=1`): capsule runs as the VM
    /// user, each invocation in a delegated scope of its own.
    pub vm: bool,
    /// `CAPSULE_TEST_SYSTEMD=1`: the tests run as a logged-in user whose
    /// systemd manager runs; capsule gets its cgroups by re-starting itself
    /// in a scope of that manager's (see [`crate::systemd_mode`]).
    pub systemd: bool,
    /// The unprivileged user capsule runs as: the test user when root,
    /// else ourselves.
    pub uid: u32,
    pub gid: u32,
    /// Directory holding the binaries (capsule, capsule-cli, capsule-probe).
    pub bin_dir: PathBuf,
    pub capsule: PathBuf,
    pub probe: PathBuf,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

pub fn h() -> &'static Harness {
    HARNESS.get_or_init(|| {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let capsule = built("capsule");
        let probe = built("capsule-probe");
        ensure_dir(SCRATCH_ROOT, 0o1777);
        let systemd = systemd_mode();
        if systemd && uid == 0 {
            panic!("{SYSTEMD_ENV}=1: run the tests as the logged-in user whose systemd manager runs, not as root");
        }
        if uid != 0 {
            let bin_dir = capsule.parent().unwrap().to_path_buf();
            return Harness { is_root: false, vm: false, systemd, uid, gid, bin_dir, capsule, probe };
        }
        let vm = in_cgroup_vm();
        let (tuid, tgid) = if vm {
            let user = vm_user();
            lookup_user(&user).unwrap_or_else(|| panic!("CGROUP2_VM=1 but the VM user `{user}` does not exist"))
        } else {
            ensure_test_user()
        };
        let bin_dir = install_bins();
        Harness {
            is_root: true,
            vm,
            systemd: false,
            uid: tuid,
            gid: tgid,
            capsule: bin_dir.join("capsule"),
            probe: bin_dir.join("capsule-probe"),
            bin_dir,
        }
    })
}

/// The directory the workspace's binaries are built into: the test
/// executable's, up from its `deps/` (`target/<triple>/<profile>/`).
pub fn target_bin_dir() -> PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test executable's path: {e}"));
        bin_dir_of(&exe)
    })
    .clone()
}

fn bin_dir_of(exe: &Path) -> PathBuf {
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let dir = if dir.file_name() == Some(OsStr::new("deps")) { dir.parent().unwrap_or(dir) } else { dir };
    dir.to_path_buf()
}

/// A binary of the workspace by name, from [`target_bin_dir`]; fails the
/// test, naming it and the command that builds it, when it is missing.
pub fn built(name: &str) -> PathBuf {
    let p = target_bin_dir().join(name);
    if !p.is_file() {
        panic!(
            "the binary `{name}` is missing ({} not found): the black-box tests run the workspace's binaries; \
             build them with `cargo build --workspace --all-targets`",
            p.display()
        );
    }
    p
}

pub fn probe() -> String {
    h().probe.display().to_string()
}

fn ensure_dir(path: &str, mode: u32) {
    match std::fs::create_dir(path) {
        Ok(()) => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir {path}: {e}"),
    }
}

/// The user's uid and gid from /etc/passwd. Read directly, not through
/// getpwnam: the test binaries are static, and glibc's NSS modules
/// (libnss_systemd, which the lookup of a missing user falls through to)
/// crash when a static binary loads them.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?))).flatten()
    })
}

/// Creates the unprivileged test user once; tolerates concurrent test
/// binaries doing the same (useradd's lock contention, "already exists").
fn ensure_test_user() -> (u32, u32) {
    ensure_user(TEST_USER).unwrap_or_else(|e| panic!("{e}"))
}

/// A second unprivileged user (`capsule-test2`), for what one user must not
/// see of another's: created when the tests run as root (not in the VMs,
/// whose user is a login user of its own), else the reason there is none.
pub fn other_user() -> Result<(u32, u32), String> {
    if !h().is_root || h().vm || h().systemd {
        return Err("a second user needs the tests to run as root on the host".into());
    }
    ensure_user(OTHER_USER)
}

fn ensure_user(name: &str) -> Result<(u32, u32), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(ids) = lookup_user(name) {
            return Ok(ids);
        }
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .output()
            .map_err(|e| format!("cannot run useradd: {e}"))?;
        // 0 created, 9 already exists, 10 cannot lock the files (retry).
        if let Some(ids) = lookup_user(name) {
            return Ok(ids);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "cannot create user {name}: useradd exited {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies both binaries to `/var/tmp/capsule-test-bins/<hash>/` (0755,
/// root-owned), keyed by the originals' paths, sizes and mtimes so test
/// binaries share a copy; stale copies older than two days are removed.
/// The binaries the tests run, by the names they are installed under:
/// the front end `capsule` executes `capsule-cli` from its own directory.
fn bins() -> [(PathBuf, &'static str); 3] {
    [(built("capsule"), "capsule"), (built("capsule-cli"), "capsule-cli"), (built("capsule-probe"), "capsule-probe")]
}

fn install_bins() -> PathBuf {
    ensure_dir(BIN_ROOT, 0o755);
    let mut hasher = DefaultHasher::new();
    let bins = bins();
    for (p, _) in &bins {
        let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        p.hash(&mut hasher);
        m.len().hash(&mut hasher);
        m.mtime().hash(&mut hasher);
        m.mtime_nsec().hash(&mut hasher);
    }
    let key = format!("{:016x}", hasher.finish());
    let dir = Path::new(BIN_ROOT).join(&key);
    if bins.iter().all(|(_, name)| dir.join(name).exists()) {
        return dir;
    }
    let tmp = Path::new(BIN_ROOT).join(format!(".{key}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (src, name) in &bins {
        let dst = tmp.join(name);
        std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another test binary won the race.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    // Prune old copies.
    if let Ok(rd) = std::fs::read_dir(BIN_ROOT) {
        for e in rd.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() > Duration::from_secs(2 * 86400))
                .unwrap_or(false);
            if old && e.file_name() != OsStr::new(&key) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    dir
}

/// Whether the capsule user can create a user namespace at all.
pub fn userns_available() -> Result<(), String> {
    static R: OnceLock<Result<(), String>> = OnceLock::new();
    R.get_or_init(|| {
        let out = as_user(&["unshare", "-U", "true"]).output().map_err(|e| format!("run unshare: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("`unshare -U true` as uid {} fails: {}", h().uid, String::from_utf8_lossy(&out.stderr).trim()))
        }
    })
    .clone()
}

/// Whether the kernel has time namespaces.
pub fn timens_available() -> Result<(), String> {
    if Path::new("/proc/self/ns/time").exists() {
        Ok(())
    } else {
        Err("no time namespaces (/proc/self/ns/time missing)".into())
    }
}

pub fn require_root() -> Result<(), String> {
    if h().is_root {
        Ok(())
    } else {
        Err("the test process is not root".into())
    }
}

/// A command running `argv` as the capsule user (via setpriv when root),
/// with a clean environment and cwd `/`.
pub fn as_user<S: AsRef<OsStr>>(argv: &[S]) -> Command {
    as_ids(argv, (h().uid, h().gid))
}

/// `argv` as the user `ids` (uid, gid) when root, else as ourselves.
pub fn as_ids<S: AsRef<OsStr>>(argv: &[S], ids: (u32, u32)) -> Command {
    let hh = h();
    let mut c = if hh.is_root {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", ids.0))
            .arg(format!("--regid={}", ids.1))
            // The VM user is a real login user with its groups.
            .arg(if hh.vm { "--init-groups" } else { "--clear-groups" })
            .arg("--");
        c.args(argv);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    c.env_clear().env("PATH", DEFAULT_PATH).current_dir("/");
    c
}

/// `capsule-libtest`, where the capsule user can run it (copied next to
/// the staged binaries as root, keyed by its size and mtime).
pub fn libtest() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = built("capsule-libtest");
        if !h().is_root {
            return src;
        }
        let m = std::fs::metadata(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        let mut hasher = DefaultHasher::new();
        src.hash(&mut hasher);
        m.len().hash(&mut hasher);
        m.mtime().hash(&mut hasher);
        m.mtime_nsec().hash(&mut hasher);
        let key = format!("libtest-{:016x}", hasher.finish());
        let dir = Path::new(BIN_ROOT).join(&key);
        let dst = dir.join("capsule-libtest");
        if dst.exists() {
            return dst;
        }
        let tmp = Path::new(BIN_ROOT).join(format!(".{key}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = tmp.join("capsule-libtest");
        std::fs::copy(&src, &t).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o755)).unwrap();
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        dst
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_dir_is_above_deps() {
        let t = Path::new("/w/target/x86_64-unknown-linux-gnu/debug");
        assert_eq!(bin_dir_of(&t.join("deps/cli-0123abcd")), t);
        assert_eq!(bin_dir_of(&t.join("capsule-probe")), t);
    }
}
