//! cgroups: the layout (pure v2, hybrid, v1 only), the caller's
//! controllers and delegation, the systemd user manager, and where a run
//! would get its cgroup from.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{CheckItem, Host};
use crate::host::mountinfo::{parse_mountinfo, MountEntry};
use crate::sys::probe;

/// The caller's cgroup v2 path (the `0::/path` line of /proc/self/cgroup).
pub(crate) fn cgroup_v2_path(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_end())
}

/// How cgroups are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CgroupLayout {
    /// Pure cgroup v2 at this mount point (and its mountinfo root).
    Unified {
        mount: PathBuf,
        root: String,
    },
    /// cgroup v2 mounted next to v1 hierarchies.
    Hybrid {
        mount: PathBuf,
        root: String,
    },
    V1Only,
    None,
}

pub(crate) fn cgroup_layout(sys_fs_cgroup_magic: Option<i64>, mounts: &[MountEntry]) -> CgroupLayout {
    let v2: Vec<&MountEntry> = mounts.iter().filter(|m| m.fstype == "cgroup2").collect();
    let has_v1 = mounts.iter().any(|m| m.fstype == "cgroup");
    let root_of = |path: &str| {
        v2.iter().rev().find(|m| m.mount_point == path).map(|m| m.root.clone()).unwrap_or_else(|| "/".into())
    };
    if sys_fs_cgroup_magic == Some(probe::CGROUP2_SUPER_MAGIC) {
        return CgroupLayout::Unified { mount: "/sys/fs/cgroup".into(), root: root_of("/sys/fs/cgroup") };
    }
    // Prefer the conventional hybrid location, then any cgroup2 mount.
    let pick = v2
        .iter()
        .rev()
        .find(|m| m.mount_point == "/sys/fs/cgroup/unified")
        .or_else(|| v2.iter().rev().find(|m| m.mount_point == "/sys/fs/cgroup"))
        .or_else(|| v2.last());
    match pick {
        Some(m) => {
            let (mount, root) = (PathBuf::from(&m.mount_point), m.root.clone());
            if has_v1 {
                CgroupLayout::Hybrid { mount, root }
            } else {
                CgroupLayout::Unified { mount, root }
            }
        }
        None if has_v1 => CgroupLayout::V1Only,
        None => CgroupLayout::None,
    }
}

/// The directory of cgroup `path` under a cgroup2 mount whose mountinfo
/// root is `root`.
pub(crate) fn cgroup_dir(mount: &Path, root: &str, path: &str) -> PathBuf {
    let rel =
        if root != "/" && (path == root || path.starts_with(&format!("{root}/"))) { &path[root.len()..] } else { path };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(rel)
    }
}

/// Controllers capsule uses for limits and accounting.
const NEEDED_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// Which of the documented ways `capsule run` would get its cgroups from
/// here: explicit path (not applicable to `check`), own delegated cgroup,
/// a systemd user scope, or none (degraded mode).
pub(super) fn cgroup_source_item(d: &crate::host::cgroups::Discovery) -> CheckItem {
    use crate::host::cgroups::Source;
    const NAME: &str = "cgroup-source";
    match d.source {
        Source::Explicit | Source::Own => CheckItem::ok(
            NAME,
            false,
            format!(
                "runs get cgroup limits and accounting from {} (limits, `accounting: cgroup`); {}",
                d.detail,
                reuse_detail(d.base.as_deref())
            ),
        ),
        Source::SystemdScope => CheckItem::ok(
            NAME,
            false,
            format!(
                "{}: `capsule run` (and `capsule isolate --cg`) re-starts itself in `systemd-run --user --scope -p \
                 Delegate=yes`",
                d.detail
            ),
        ),
        Source::None => CheckItem::problem(
            NAME,
            false,
            format!(
                "degraded mode, no cgroup limits, `accounting: rusage`, and `capsule isolate --cg` fails (status 2, \
                 as isolate without control groups): {}",
                d.detail
            ),
            Some(crate::host::cgroups::DELEGATION_HINT.into()),
        ),
    }
}

/// Whether runs' cgroups are kept per parallel slot or made fresh for
/// every run, judged from the base's own files (a child's are the same
/// kernel's).
fn reuse_detail(base: Option<&Path>) -> String {
    match base.map(crate::host::cgroups::reuse_unsupported) {
        Some(None) => "cgroup reuse: each parallel slot keeps its run cgroup (emptied with cgroup.kill, page cache \
             reclaimed, memory.peak reset)"
            .into(),
        Some(Some(why)) => format!("cgroup reuse: off, a fresh cgroup per run: {why}"),
        None => "cgroup reuse: decided at the first run".into(),
    }
}

pub(super) fn cgroup_items(host: &Host) -> Vec<CheckItem> {
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let layout = cgroup_layout(probe::fs_magic(Path::new("/sys/fs/cgroup")).ok(), &mounts);
    let systemd = systemd_user_manager(host);
    cgroup_items_for(&layout, &proc_cgroup, &mounts, &systemd, host, &RealFs)
}

/// File access for the cgroup checks (replaced in tests).
trait CgroupFs {
    fn read(&self, path: &Path) -> Option<String>;
    fn writable(&self, path: &Path) -> bool;
    fn owner(&self, path: &Path) -> Option<u32>;
}

struct RealFs;

impl CgroupFs for RealFs {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
    fn writable(&self, path: &Path) -> bool {
        probe::can_write(path).unwrap_or(false)
    }
    fn owner(&self, path: &Path) -> Option<u32> {
        std::fs::metadata(path).ok().map(|m| m.uid())
    }
}

const BOOT_UNIFIED: &str = "boot with `systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all` on the kernel command \
                            line to get a pure cgroup v2 hierarchy; until then capsule falls back to rusage \
                            accounting";

fn cgroup_items_for(
    layout: &CgroupLayout,
    proc_cgroup: &str,
    mounts: &[MountEntry],
    systemd: &SystemdUser,
    host: &Host,
    fs: &dyn CgroupFs,
) -> Vec<CheckItem> {
    let v2_path = cgroup_v2_path(proc_cgroup);
    let (mount, root, hybrid) = match layout {
        CgroupLayout::Unified { mount, root } => (mount, root, false),
        CgroupLayout::Hybrid { mount, root } => (mount, root, true),
        CgroupLayout::V1Only | CgroupLayout::None => {
            let what = if *layout == CgroupLayout::V1Only {
                "only cgroup v1 hierarchies are mounted"
            } else {
                "no cgroup file system is mounted"
            };
            let fix = Some(BOOT_UNIFIED.to_string());
            return vec![
                CheckItem::problem("cgroup-v2", false, what, fix.clone()),
                CheckItem::problem("cgroup-controllers", false, "no cgroup v2 hierarchy", fix.clone()),
                CheckItem::problem("cgroup-delegation", false, "no cgroup v2 hierarchy", fix),
            ];
        }
    };
    let mut items = Vec::new();

    // Hierarchy and the caller's cgroup.
    let Some(path) = v2_path else {
        let fix = Some(
            "/proc/self/cgroup has no `0::` line although cgroup2 is mounted; \
                        check that /proc belongs to this process's namespaces"
                .to_string(),
        );
        return vec![
            CheckItem::problem(
                "cgroup-v2",
                false,
                format!("cgroup2 at {}, but no cgroup v2 path", mount.display()),
                fix.clone(),
            ),
            CheckItem::problem("cgroup-controllers", false, "caller's cgroup unknown", fix.clone()),
            CheckItem::problem("cgroup-delegation", false, "caller's cgroup unknown", fix),
        ];
    };
    let dir = cgroup_dir(mount, root, path);
    if hybrid {
        items.push(CheckItem::problem(
            "cgroup-v2",
            false,
            format!(
                "hybrid layout: cgroup2 only at {} next to cgroup v1 hierarchies; own cgroup {path}",
                mount.display()
            ),
            Some(BOOT_UNIFIED.to_string()),
        ));
    } else {
        items.push(CheckItem::ok(
            "cgroup-v2",
            false,
            format!("pure cgroup v2 at {}; own cgroup {path}", mount.display()),
        ));
    }

    // Controllers.
    let listed: BTreeSet<String> = fs
        .read(&dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let missing: Vec<&str> = NEEDED_CONTROLLERS.iter().copied().filter(|c| !listed.contains(*c)).collect();
    let listed_text =
        if listed.is_empty() { "none".to_string() } else { listed.iter().cloned().collect::<Vec<_>>().join(" ") };
    if missing.is_empty() {
        items.push(CheckItem::ok(
            "cgroup-controllers",
            false,
            format!("{} lists {listed_text}", dir.join("cgroup.controllers").display()),
        ));
    } else {
        let v1: Vec<String> = missing
            .iter()
            .filter_map(|c| {
                mounts
                    .iter()
                    .find(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == *c))
                    .map(|m| format!("{c} at {}", m.mount_point))
            })
            .collect();
        let mut detail =
            format!("{} lists {listed_text}; missing {}", dir.join("cgroup.controllers").display(), missing.join(", "));
        if !v1.is_empty() {
            detail.push_str(&format!(" (bound to cgroup v1: {})", v1.join(", ")));
        }
        let fix = if hybrid || !v1.is_empty() {
            BOOT_UNIFIED.to_string()
        } else {
            let parent = dir.parent().unwrap_or(mount);
            format!(
                "the parent cgroup does not enable them for this one: as its owner run `echo '{}' > {}`, or start \
                 capsule with `systemd-run --user --scope -p Delegate=yes -- capsule ...`; until then capsule \
                 falls back to rusage accounting",
                missing.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(" "),
                parent.join("cgroup.subtree_control").display()
            )
        };
        items.push(CheckItem::problem("cgroup-controllers", false, detail, Some(fix)));
    }

    // Delegation: can the caller manage its own cgroup?
    let owner = fs.owner(&dir);
    let procs = fs.writable(&dir.join("cgroup.procs"));
    let subtree = fs.writable(&dir.join("cgroup.subtree_control"));
    let yn = |b: bool| if b { "writable" } else { "not writable" };
    let detail = format!(
        "{} (owner uid {}): cgroup.procs {}, cgroup.subtree_control {}; systemd user manager: {}",
        dir.display(),
        owner.map(|u| u.to_string()).unwrap_or_else(|| "?".into()),
        yn(procs),
        yn(subtree),
        systemd.describe()
    );
    if procs && subtree {
        items.push(CheckItem::ok("cgroup-delegation", false, detail));
    } else {
        let fix = if systemd.usable() {
            "start capsule in a delegated scope: `systemd-run --user --scope -p Delegate=yes -- capsule ...`"
                .to_string()
        } else {
            let user = &host.user;
            let cg = mount.join("capsule");
            let cg = cg.display();
            format!(
                "get a delegated cgroup: in a systemd user session (`loginctl enable-linger {user}`) start capsule \
                 with `systemd-run --user --scope -p Delegate=yes -- capsule ...`; or as root: `mkdir {cg} && chown \
                 {user} {cg} {cg}/cgroup.procs {cg}/cgroup.subtree_control {cg}/cgroup.threads` and move the \
                 shell that starts capsule into it (`echo <pid> > {cg}/cgroup.procs`); until then capsule falls \
                 back to rusage accounting"
            )
        };
        items.push(CheckItem::problem("cgroup-delegation", false, detail, Some(fix)));
    }
    items
}

/// Whether `systemd-run --user` could give us a delegated cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SystemdUser {
    /// The private socket looked for.
    socket: PathBuf,
    socket_ok: bool,
    systemd_run: Option<PathBuf>,
}

impl SystemdUser {
    fn usable(&self) -> bool {
        self.socket_ok && self.systemd_run.is_some()
    }

    fn describe(&self) -> String {
        match (self.socket_ok, &self.systemd_run) {
            (true, Some(_)) => format!("reachable ({})", self.socket.display()),
            (true, None) => format!("socket {} exists but systemd-run is not on PATH", self.socket.display()),
            (false, Some(_)) => format!("not reachable (no socket {})", self.socket.display()),
            (false, None) => {
                format!("not reachable (no socket {}, no systemd-run on PATH)", self.socket.display())
            }
        }
    }
}

fn systemd_user_manager(host: &Host) -> SystemdUser {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", host.euid)));
    let socket = runtime.join("systemd/private");
    let socket_ok = std::fs::metadata(&socket).map(|m| m.file_type().is_socket()).unwrap_or(false);
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let systemd_run = std::env::split_paths(&path)
        .map(|d| d.join("systemd-run"))
        .find(|p| std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false));
    SystemdUser { socket, socket_ok, systemd_run }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::host;
    use crate::check::CheckStatus;

    #[test]
    fn proc_self_cgroup_parsing() {
        let hybrid = "9:name=systemd:/\n8:pids:/\n4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice/x.scope\n";
        assert_eq!(cgroup_v2_path(hybrid), Some("/user.slice/x.scope"));
        assert_eq!(cgroup_v2_path("0::/\n"), Some("/"));
        assert_eq!(cgroup_v2_path("4:memory:/a\n"), None);
        assert_eq!(cgroup_v2_path(""), None);
        // Paths may contain colons.
        assert_eq!(cgroup_v2_path("0::/a:b\n"), Some("/a:b"));
    }

    const HYBRID_MOUNTINFO: &str = "\
24 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 24 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 30 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 24 0:36 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn mountinfo_and_layout() {
        let m = parse_mountinfo(HYBRID_MOUNTINFO);
        assert_eq!(m.len(), 7);
        assert_eq!(m[6].mount_point, "/mnt/with space");
        assert_eq!(m[2].super_options, "rw,cpu");
        let tmpfs = Some(probe::TMPFS_MAGIC);
        assert_eq!(
            cgroup_layout(tmpfs, &m),
            CgroupLayout::Hybrid { mount: "/sys/fs/cgroup/unified".into(), root: "/".into() }
        );
        let unified = parse_mountinfo("35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert_eq!(
            cgroup_layout(Some(probe::CGROUP2_SUPER_MAGIC), &unified),
            CgroupLayout::Unified { mount: "/sys/fs/cgroup".into(), root: "/".into() }
        );
        let v1: Vec<MountEntry> = m.iter().filter(|e| e.fstype != "cgroup2").cloned().collect();
        assert_eq!(cgroup_layout(tmpfs, &v1), CgroupLayout::V1Only);
        assert_eq!(cgroup_layout(None, &[]), CgroupLayout::None);
        assert_eq!(
            cgroup_dir(Path::new("/sys/fs/cgroup"), "/", "/user.slice/a"),
            PathBuf::from("/sys/fs/cgroup/user.slice/a")
        );
        assert_eq!(cgroup_dir(Path::new("/sys/fs/cgroup"), "/", "/"), PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(cgroup_dir(Path::new("/sys/fs/cgroup"), "/lxc/c1", "/lxc/c1/x"), PathBuf::from("/sys/fs/cgroup/x"));
    }

    struct FakeFs {
        controllers: &'static str,
        expect_dir: &'static str,
        writable: bool,
    }

    impl CgroupFs for FakeFs {
        fn read(&self, path: &Path) -> Option<String> {
            assert_eq!(path, Path::new(self.expect_dir).join("cgroup.controllers"));
            Some(self.controllers.into())
        }
        fn writable(&self, path: &Path) -> bool {
            assert!(path.starts_with(self.expect_dir));
            self.writable
        }
        fn owner(&self, _: &Path) -> Option<u32> {
            Some(if self.writable { 1000 } else { 0 })
        }
    }

    #[test]
    fn cgroup_items_hybrid_and_unified() {
        let no_systemd =
            SystemdUser { socket: "/run/user/1000/systemd/private".into(), socket_ok: false, systemd_run: None };
        let m = parse_mountinfo(HYBRID_MOUNTINFO);
        let layout = cgroup_layout(Some(probe::TMPFS_MAGIC), &m);
        let fs = FakeFs { controllers: "hugetlb\n", expect_dir: "/sys/fs/cgroup/unified", writable: false };
        let items = cgroup_items_for(&layout, "4:memory:/\n0::/\n", &m, &no_systemd, &host(), &fs);
        let names: Vec<&str> = items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["cgroup-v2", "cgroup-controllers", "cgroup-delegation"]);
        assert!(items.iter().all(|i| !i.required && i.fix.is_some()));
        assert_eq!(items[0].status, CheckStatus::Warn);
        assert!(items[1].detail.contains("missing memory, cpu, pids"), "{}", items[1].detail);
        assert!(items[1].detail.contains("memory at /sys/fs/cgroup/memory"), "{}", items[1].detail);
        assert!(items[1].fix.as_deref().unwrap().contains("systemd.unified_cgroup_hierarchy=1"));

        let unified = parse_mountinfo("35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let layout = cgroup_layout(Some(probe::CGROUP2_SUPER_MAGIC), &unified);
        let systemd = SystemdUser { systemd_run: Some("/usr/bin/systemd-run".into()), socket_ok: true, ..no_systemd };
        let mut fs = FakeFs {
            controllers: "cpuset cpu io memory pids\n",
            expect_dir: "/sys/fs/cgroup/user.slice/s.scope",
            writable: false,
        };
        let proc_cgroup = "0::/user.slice/s.scope\n";
        let items = cgroup_items_for(&layout, proc_cgroup, &unified, &systemd, &host(), &fs);
        assert_eq!(items[0].status, CheckStatus::Ok);
        assert_eq!(items[1].status, CheckStatus::Ok);
        assert_eq!(items[2].status, CheckStatus::Warn);
        assert!(items[2].fix.as_deref().unwrap().starts_with("start capsule in a delegated scope"));
        fs.writable = true;
        let items = cgroup_items_for(&layout, proc_cgroup, &unified, &systemd, &host(), &fs);
        assert_eq!(items[2].status, CheckStatus::Ok, "{:?}", items[2]);
        assert!(items[2].detail.contains("owner uid 1000"));
        // Unified, but the parent does not pass the controllers down.
        fs.controllers = "cpuset io\n";
        let items = cgroup_items_for(&layout, proc_cgroup, &unified, &systemd, &host(), &fs);
        assert_eq!(items[1].status, CheckStatus::Warn);
        assert!(items[1]
            .fix
            .as_deref()
            .unwrap()
            .contains("`echo '+memory +cpu +pids' > /sys/fs/cgroup/user.slice/cgroup.subtree_control`"));
    }
}
