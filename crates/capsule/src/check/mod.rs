//! `capsule check`: every kernel feature capsule relies on, whether it works
//! *for this user*, and the exact fix where it doesn't.
//!
//! Probes that change process state run in forked children (see
//! [`crate::sys::probe`]), so running the checks leaves the caller untouched.
//! Required items decide [`can_run`]; the others degrade capsule and are
//! reported as warnings, still with their fix.

mod apparmor;
mod cgroups;
mod container;
mod features;
mod userns;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

use self::cgroups::{cgroup_items, cgroup_source_item};
use self::container::{container_item, refusals, Probed};
use self::features::{feature_item, landlock_item, mount_api_fix, overlay_fix, seccomp_item, time_item};
use self::userns::{namespace_fix, nesting_item, ns_flag_name, pid_namespace_fix, root_item, userns_item};
use crate::sys::probe::{self, Namespace, Prober};

/// How one item fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

/// One checked feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckItem {
    /// Stable name, e.g. `user-namespaces`.
    pub name: String,
    pub status: CheckStatus,
    /// Whether `capsule run` needs it (a failure then makes [`can_run`] false).
    pub required: bool,
    /// What was found, on one line.
    pub detail: String,
    /// How to fix it, when it is not ok.
    pub fix: Option<String>,
}

impl CheckItem {
    fn ok(name: &str, required: bool, detail: impl Into<String>) -> CheckItem {
        CheckItem { name: name.into(), status: CheckStatus::Ok, required, detail: detail.into(), fix: None }
    }

    /// A failure for a required item, a warning for an optional one.
    fn problem(name: &str, required: bool, detail: impl Into<String>, fix: Option<String>) -> CheckItem {
        let status = if required { CheckStatus::Fail } else { CheckStatus::Warn };
        CheckItem { name: name.into(), status, required, detail: detail.into(), fix }
    }
}

/// Nesting depth of user namespaces capsule creates below the caller.
pub const USERNS_LEVELS: u32 = 3;

/// What the diagnoses need to know about the host, read once.
#[derive(Debug, Clone, Default)]
struct Host {
    kernel: String,
    euid: u32,
    user: String,
    max_user_namespaces: Option<u64>,
    unprivileged_userns_clone: Option<u64>,
    apparmor_restrict_userns: Option<u64>,
    /// Read where AppArmor restricts user namespaces, default elsewhere.
    apparmor: apparmor::AppArmor,
    /// The container capsule runs in, if any.
    container: Option<crate::host::container::Container>,
}

impl Host {
    fn read() -> Host {
        let ids = probe::ids();
        let apparmor_restrict_userns = read_u64("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
        Host {
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            euid: ids.euid,
            user: user_name(ids.euid),
            max_user_namespaces: read_u64("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_u64("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restrict_userns,
            apparmor: if apparmor_restrict_userns == Some(1) { apparmor::AppArmor::read() } else { Default::default() },
            container: crate::host::container::Container::detect(),
        }
    }
}

/// Runs every check, forking one child per probe (its time: docs/latency.md).
pub fn run_checks() -> Vec<CheckItem> {
    let host = Host::read();
    let prober = Prober::new();
    let mut items = Vec::new();

    items.push(CheckItem::ok("kernel", false, format!("Linux {} ({})", host.kernel, std::env::consts::ARCH)));
    items.push(root_item(
        &probe::ids(),
        std::fs::read_to_string("/proc/self/uid_map").ok().as_deref(),
        std::fs::metadata("/dev/null").ok().map(|m| m.uid()),
    ));

    let userns = prober.user_namespace();
    items.push(userns_item(&userns, &host));
    items.push(nesting_item(&prober.nested_user_namespaces(USERNS_LEVELS), userns.is_ok(), &host));

    let (mount_api, pid_namespace, uts) =
        (prober.mount_api(), prober.pid_namespace(), prober.namespace(Namespace::Uts));
    items.push(feature_item(
        "mount-api",
        true,
        &mount_api,
        "fsopen/fsconfig/fsmount (tmpfs), open_tree(OPEN_TREE_CLONE|AT_RECURSIVE), mount_setattr, \
         move_mount and pivot_root work in a user+mount namespace",
        &host,
        mount_api_fix,
    ));
    items.push(feature_item(
        "pid-namespace",
        true,
        &pid_namespace,
        "PID namespace created and a fresh procfs mounted by its PID 1",
        &host,
        pid_namespace_fix,
    ));
    // A supervisor unshares its IPC and UTS namespaces and names its host:
    // a run cannot start without them.
    for (name, ns, required) in [
        ("network-namespace", Namespace::Net, true),
        ("ipc-namespace", Namespace::Ipc, true),
        ("uts-namespace", Namespace::Uts, true),
        ("cgroup-namespace", Namespace::Cgroup, false),
    ] {
        let mut ok = format!("unshare({}) works in a user namespace", ns_flag_name(ns));
        if ns == Namespace::Uts {
            ok.push_str(", and sethostname in it");
        }
        let outcome = if ns == Namespace::Uts { uts.clone() } else { prober.namespace(ns) };
        items.push(feature_item(name, required, &outcome, &ok, &host, namespace_fix));
    }
    items.push(time_item(&prober.namespace(Namespace::Time), Path::new("/proc/self/ns/time").exists(), &host));
    items.push(feature_item(
        "overlayfs",
        false,
        &prober.overlayfs(),
        "overlay over tmpfs mounts in a user namespace; create, copy-up and whiteout work",
        &host,
        overlay_fix,
    ));
    items.push(seccomp_item(&prober.seccomp_filter(), &probe::seccomp_actions(), &host));
    items.push(landlock_item(probe::landlock_abi(), read_trimmed("/sys/kernel/security/lsm").as_deref(), &host));
    items.push(feature_item(
        "pidfd-open",
        true,
        &probe::pidfd_open(),
        "pidfd_open and pidfd_send_signal work",
        &host,
        |_, _| None,
    ));
    items.push(feature_item("clone3", true, &probe::clone3(), "clone3(CLONE_PIDFD) works", &host, |_, _| None));
    items.push(feature_item(
        "close-range",
        true,
        &probe::close_range(),
        "close_range (with CLOSE_RANGE_CLOEXEC) works",
        &host,
        |_, _| None,
    ));
    items.push(feature_item(
        "openat2",
        true,
        &probe::openat2(),
        "openat2 with RESOLVE_* flags works",
        &host,
        |_, _| None,
    ));
    let probed = Probed { userns: &userns, mount_api: &mount_api, pid_namespace: &pid_namespace, uts: &uts };
    let visible = crate::host::container::visible_refusals();
    let label = crate::host::container::apparmor_label();
    items.push(container_item(&host, &refusals(&probed, &visible, label.as_deref())));
    items.extend(cgroup_items(&host));
    items.push(cgroup_source_item(&crate::host::cgroups::discover(&crate::proto::config::CgroupConfig::default())));
    let mode = std::env::var(crate::host::subids::MODE_ENV).ok();
    items.push(isolate_item(&crate::host::subids::SubIds::read(&host.user, host.euid), &host.user, mode.as_deref()));
    items
}

/// How `capsule isolate` keeps a box's files from the program: as a
/// subordinate uid of its own where the caller has them (and
/// `CAPSULE_ISOLATE_BOX_MODE` does not say otherwise), else by permission
/// bits. Informational: nothing here stops a run.
fn isolate_item(ids: &crate::host::subids::SubIds, user: &str, setting: Option<&str>) -> CheckItem {
    use crate::host::subids::{box_mode, BitsWhy, BoxMode};
    let bits = "the program as you, in permission-bit mode (box/ is its own; in other read-write rules the bits \
                for others are enforced by mounts: docs/isolate.md)";
    let detail = match (box_mode(setting, ids, user, None), ids.usable(user)) {
        (Ok(BoxMode::Subordinate(b)), Ok(s)) => format!(
            "capsule isolate runs box N's program as subordinate uid {}+N, gid {}+N (mode subordinate-ids: the \
             kernel enforces the permission bits; docs/isolate.md): {s}",
            b.uid, b.gid
        ),
        (Ok(BoxMode::PermissionBits(why @ BitsWhy::Chosen)), _) => {
            format!("capsule isolate runs {bits}, as {why} says")
        }
        (Ok(_), Err(e)) | (Ok(BoxMode::PermissionBits(BitsWhy::Unusable(e))), _) => {
            format!("capsule isolate runs {bits}; subordinate ids not usable ({e})")
        }
        (Err(e), _) => format!("capsule isolate will refuse to run: {e}"),
    };
    CheckItem::ok("isolate-box-user", false, detail)
}

/// True iff no required item failed.
pub fn can_run(items: &[CheckItem]) -> bool {
    !items.iter().any(|i| i.required && i.status == CheckStatus::Fail)
}

/// The human-readable report: one line per item (plus a `fix:` line for
/// those that are not ok), and a last line saying whether `capsule run` can
/// work.
pub fn render(items: &[CheckItem]) -> String {
    let mut out = String::new();
    for it in items {
        let tag = match it.status {
            CheckStatus::Ok => "ok  ",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "FAIL",
        };
        out.push_str(&format!("{tag} {}: {}\n", it.name, it.detail));
        if it.status != CheckStatus::Ok {
            if let Some(fix) = &it.fix {
                out.push_str(&format!("     fix: {fix}\n"));
            }
        }
    }
    let names =
        |st: CheckStatus| -> Vec<&str> { items.iter().filter(|i| i.status == st).map(|i| i.name.as_str()).collect() };
    let (failed, warned) = (names(CheckStatus::Fail), names(CheckStatus::Warn));
    let failed_required: Vec<&str> =
        items.iter().filter(|i| i.required && i.status == CheckStatus::Fail).map(|i| i.name.as_str()).collect();
    if can_run(items) {
        if warned.is_empty() && failed.is_empty() {
            out.push_str("=> `capsule run` can work here; every feature is available\n");
        } else {
            let mut degraded = warned;
            degraded.extend(failed);
            out.push_str(&format!("=> `capsule run` can work here, degraded without: {}\n", degraded.join(", ")));
        }
    } else {
        out.push_str(&format!(
            "=> `capsule run` cannot work here: required check(s) failed: {}\n",
            failed_required.join(", ")
        ));
    }
    out
}

const SYSCTL_PERSIST: &str = "(persist it in /etc/sysctl.d/)";

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_u64(path: &str) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

use crate::host::identity::user_name;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    pub(super) fn host() -> Host {
        Host { kernel: "6.1.0".into(), euid: 1000, user: "alice".into(), ..Host::default() }
    }

    fn item(name: &str, status: CheckStatus, required: bool) -> CheckItem {
        CheckItem { name: name.into(), status, required, detail: "d".into(), fix: Some("f".into()) }
    }

    #[test]
    fn can_run_only_fails_on_required() {
        assert!(can_run(&[]));
        assert!(can_run(&[item("a", CheckStatus::Ok, true), item("b", CheckStatus::Warn, false)]));
        assert!(can_run(&[item("a", CheckStatus::Ok, true), item("b", CheckStatus::Fail, false)]));
        assert!(!can_run(&[item("a", CheckStatus::Fail, true), item("b", CheckStatus::Ok, false)]));
    }

    #[test]
    fn render_format() {
        let mut ok = item("user-namespaces", CheckStatus::Ok, true);
        ok.fix = None;
        let out = render(&[ok.clone(), item("cgroup-v2", CheckStatus::Warn, false)]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "ok   user-namespaces: d");
        assert_eq!(lines[1], "warn cgroup-v2: d");
        assert_eq!(lines[2], "     fix: f");
        assert!(lines[3].contains("can work") && lines[3].contains("cgroup-v2"), "{out}");
        let out = render(&[ok, item("not-root", CheckStatus::Fail, true)]);
        assert!(out.contains("FAIL not-root: d\n     fix: f\n"));
        assert!(out.lines().last().unwrap().contains("cannot work") && out.ends_with("not-root\n"), "{out}");
    }

    #[test]
    fn isolate_item_names_the_mode_and_subordinate_ids() {
        use crate::host::subids::{Range, SubIds};
        let none = isolate_item(&SubIds::default(), "alice", None);
        assert_eq!((none.status, none.fix.as_deref()), (CheckStatus::Ok, None));
        assert!(none.detail.contains("permission-bit mode"), "{}", none.detail);
        assert!(
            none.detail.contains("subordinate ids not usable (no range for alice in /etc/subuid"),
            "{}",
            none.detail
        );
        let r = vec![Range { first: 100000, count: 65536 }];
        let helper = Some((std::path::PathBuf::from("/usr/bin/newuidmap"), true));
        let some = SubIds { uids: r.clone(), gids: r, newuidmap: helper.clone(), newgidmap: helper };
        let it = isolate_item(&some, "alice", None);
        assert!(it.detail.contains("mode subordinate-ids"), "{}", it.detail);
        assert!(it.detail.contains("subordinate uid 100000+N"), "{}", it.detail);
        let forced = isolate_item(&some, "alice", Some("permission-bits"));
        assert!(forced.detail.contains("permission-bit mode") && forced.detail.contains("CAPSULE_ISOLATE_BOX_MODE"));
        let bad = isolate_item(&SubIds::default(), "alice", Some("subordinate-ids"));
        assert!(bad.detail.contains("will refuse"), "{}", bad.detail);
    }

    #[test]
    fn status_serializes_lowercase() {
        let json = serde_json::to_string(&item("x", CheckStatus::Warn, false)).unwrap();
        assert!(json.contains("\"status\":\"warn\""), "{json}");
        assert_eq!(serde_json::to_string(&CheckStatus::Fail).unwrap(), "\"fail\"");
    }

    #[test]
    fn run_checks_smoke() {
        let items = run_checks();
        let names: BTreeSet<&str> = items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names.len(), items.len(), "names are unique");
        for n in [
            "not-root",
            "user-namespaces",
            "user-namespace-nesting",
            "mount-api",
            "pid-namespace",
            "network-namespace",
            "time-namespace",
            "overlayfs",
            "seccomp",
            "landlock",
            "pidfd-open",
            "clone3",
            "close-range",
            "openat2",
            "cgroup-v2",
            "cgroup-controllers",
            "cgroup-delegation",
            "container",
            "isolate-box-user",
        ] {
            assert!(names.contains(n), "missing {n}");
        }
        for i in &items {
            assert!(!i.detail.is_empty() && !i.detail.contains('\n'), "{i:?}");
            assert_eq!(i.status == CheckStatus::Ok, i.fix.is_none(), "{i:?}");
            assert!(i.status != CheckStatus::Fail || i.required, "{i:?}");
        }
        let out = render(&items);
        assert_eq!(out.lines().count(), items.len() + items.iter().filter(|i| i.fix.is_some()).count() + 1);
        eprintln!("{out}");
    }
}
