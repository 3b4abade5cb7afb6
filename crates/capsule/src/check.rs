//! `capsule check`: every kernel feature capsule relies on, whether it works
//! *for this user*, and the exact fix where it doesn't.
//!
//! Probes that change process state run in forked children (see
//! [`crate::sys::probe`]), so running the checks leaves the caller untouched.
//! Required items decide [`can_run`]; the others degrade capsule and are
//! reported as warnings, still with their fix.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::errno_text;
use crate::host::identity::{is_initial_root, outside_uid0};
use crate::host::mountinfo::{parse_mountinfo, MountEntry};
use crate::sys::probe::{self, Failure, Namespace, Outcome, Prober, Step};

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
}

impl Host {
    fn read() -> Host {
        let ids = probe::ids();
        Host {
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            euid: ids.euid,
            user: user_name(ids.euid),
            max_user_namespaces: read_u64("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_u64("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restrict_userns: read_u64("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        }
    }
}

/// Runs every check. Takes a few milliseconds; forks one child per probe.
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

    items.push(feature_item(
        "mount-api",
        true,
        &prober.mount_api(),
        "fsopen/fsconfig/fsmount (tmpfs), open_tree(OPEN_TREE_CLONE|AT_RECURSIVE), mount_setattr, \
         move_mount and pivot_root work in a user+mount namespace",
        &host,
        mount_api_fix,
    ));
    items.push(feature_item(
        "pid-namespace",
        true,
        &prober.pid_namespace(),
        "PID namespace created and a fresh procfs mounted by its PID 1",
        &host,
        pid_namespace_fix,
    ));
    for (name, ns, required) in [
        ("network-namespace", Namespace::Net, true),
        ("ipc-namespace", Namespace::Ipc, false),
        ("uts-namespace", Namespace::Uts, false),
        ("cgroup-namespace", Namespace::Cgroup, false),
    ] {
        let ok = format!("unshare({}) works in a user namespace", ns_flag_name(ns));
        items.push(feature_item(name, required, &prober.namespace(ns), &ok, &host, namespace_fix));
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
    items.extend(cgroup_items(&host));
    items.push(cgroup_source_item(&crate::host::cgroups::discover(&crate::proto::config::CgroupConfig::default())));
    items
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

// ---------------------------------------------------------------------------
// Root

fn root_item(ids: &probe::Ids, uid_map: Option<&str>, devnull_owner: Option<u32>) -> CheckItem {
    const NAME: &str = "not-root";
    const FIX: &str = "run capsule as an unprivileged user, e.g. `runuser -u nobody -- capsule ...`";
    let root = ids.euid == 0 || ids.uid == 0;
    if !root {
        return CheckItem::ok(NAME, true, format!("running as uid {} (not root)", ids.euid));
    }
    let map = uid_map.unwrap_or("");
    let map_line = map.lines().next().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or_default();
    if is_initial_root(0, map) {
        return CheckItem::problem(
            NAME,
            true,
            format!("running as real root (uid 0, /proc/self/uid_map `{map_line}`); capsule refuses to run as root"),
            Some(FIX.into()),
        );
    }
    // uid 0 of a user namespace that maps to uid 0 of its parent and owns
    // the host's /dev/null is still the host's root (e.g. `unshare -r` run
    // by root): it owns every root-owned file.
    if outside_uid0(map) == Some(0) && devnull_owner == Some(0) {
        return CheckItem::problem(
            NAME,
            true,
            format!(
                "uid 0 in a user namespace whose uid 0 is the parent's uid 0 (uid_map `{map_line}`) and owns \
                 /dev/null: this is the host's root; capsule refuses to run as root"
            ),
            Some(FIX.into()),
        );
    }
    CheckItem::ok(NAME, true, format!("uid 0 inside a user namespace (uid_map `{map_line}`), not the host's root"))
}

// ---------------------------------------------------------------------------
// User namespaces

const SYSCTL_PERSIST: &str = "(persist it in /etc/sysctl.d/)";

fn userns_item(outcome: &Outcome, host: &Host) -> CheckItem {
    const NAME: &str = "user-namespaces";
    match outcome {
        Ok(()) => CheckItem::ok(
            NAME,
            true,
            format!("unshare(CLONE_NEWUSER) works and uid/gid maps `0 {} 1` can be written", host.euid),
        ),
        Err(f) => {
            let (why, fix) = diagnose_userns(f, host);
            CheckItem::problem(NAME, true, format!("{f}{why}"), Some(fix))
        }
    }
}

/// Explains a failed user-namespace probe: `(extra detail, fix)`.
fn diagnose_userns(f: &Failure, host: &Host) -> (String, String) {
    let max_fix = |n: u64| {
        (
            format!("; user.max_user_namespaces is {n}"),
            format!("sysctl -w user.max_user_namespaces=15000 {SYSCTL_PERSIST}"),
        )
    };
    if host.max_user_namespaces == Some(0) {
        return max_fix(0);
    }
    if f.step == Step::UnshareUser && f.errno == libc::ENOSPC {
        let n = host.max_user_namespaces.unwrap_or(0);
        return (
            format!("; the user.max_user_namespaces limit ({n}) is used up"),
            format!("raise it: sysctl -w user.max_user_namespaces=15000 {SYSCTL_PERSIST}"),
        );
    }
    if host.unprivileged_userns_clone == Some(0) && host.euid != 0 {
        return (
            "; kernel.unprivileged_userns_clone is 0 (Debian's switch for unprivileged user namespaces)".into(),
            format!("sysctl -w kernel.unprivileged_userns_clone=1 {SYSCTL_PERSIST}"),
        );
    }
    if host.apparmor_restrict_userns == Some(1) && host.euid != 0 {
        return (
            "; kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor denies capabilities in new user \
             namespaces of unconfined programs)"
                .into(),
            format!(
                "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 {SYSCTL_PERSIST}, or load an AppArmor \
                 profile for the capsule binary that grants `userns,` (e.g. /etc/apparmor.d/capsule: \
                 `abi <abi/4.0>, include <tunables/global> profile capsule /usr/local/bin/capsule flags=(unconfined) \
                 {{ userns, }}`, then `apparmor_parser -r /etc/apparmor.d/capsule`)"
            ),
        );
    }
    match (f.step, f.errno) {
        (Step::UnshareUser, libc::EINVAL) => {
            ("; the kernel was built without user namespaces".into(), "use a kernel built with CONFIG_USER_NS=y".into())
        }
        (Step::UnshareUser, libc::EUSERS) => (
            "; the nesting limit of 32 user namespaces is reached".into(),
            "run capsule from a shallower user namespace".into(),
        ),
        (Step::UnshareUser, libc::EPERM) => (
            "; the call is denied, typically by a seccomp filter of the container or session, a chroot, or an LSM"
                .into(),
            "allow user namespaces for this user: inside a container, use a seccomp profile that permits \
             unshare/clone with CLONE_NEWUSER (docker: --security-opt seccomp=unconfined); under SELinux, check \
             for `user_namespace` AVC denials (`ausearch -m AVC -ts recent`) and allow `user_namespace { create }`; \
             do not run capsule inside a chroot"
                .into(),
        ),
        _ => (
            String::new(),
            format!(
                "user namespaces are restricted for this user ({}); check LSM policy (SELinux: `ausearch -m AVC \
                 -ts recent`; AppArmor: `dmesg | grep apparmor`) and the seccomp profile of any enclosing container",
                errno_text(f.errno)
            ),
        ),
    }
}

fn nesting_item(outcome: &Outcome, first_ok: bool, host: &Host) -> CheckItem {
    const NAME: &str = "user-namespace-nesting";
    match outcome {
        Ok(()) => CheckItem::ok(NAME, true, format!("{USERNS_LEVELS} nested user namespaces can be created")),
        Err(f) if !first_ok => CheckItem::problem(
            NAME,
            true,
            format!("{f}"),
            Some("user namespaces do not work for this user; fix `user-namespaces` first".into()),
        ),
        Err(f) => {
            let fix = match f.errno {
                libc::ENOSPC => format!(
                    "capsule needs {USERNS_LEVELS} user namespaces per sandbox but user.max_user_namespaces is {}: \
                     sysctl -w user.max_user_namespaces=15000 {SYSCTL_PERSIST}",
                    host.max_user_namespaces.map(|n| n.to_string()).unwrap_or_else(|| "low".into())
                ),
                libc::EUSERS => "the kernel's limit of 32 nested user namespaces is reached: run capsule from a \
                                 shallower user namespace"
                    .into(),
                _ => "nested user namespaces are denied; check LSM policy (AppArmor restricts nested namespaces \
                      of confined programs) and the seccomp profile of any enclosing container"
                    .into(),
            };
            CheckItem::problem(NAME, true, format!("{f}; capsule needs {USERNS_LEVELS} nested levels"), Some(fix))
        }
    }
}

// ---------------------------------------------------------------------------
// Generic feature items

/// Turns a probe outcome into an item. Failures caused by user namespaces
/// point at `user-namespaces`; ENOSYS names the kernel version needed;
/// everything else goes to `fixer`, with a generic fallback.
fn feature_item(
    name: &str,
    required: bool,
    outcome: &Outcome,
    ok_detail: &str,
    host: &Host,
    fixer: fn(&Failure, &Host) -> Option<String>,
) -> CheckItem {
    let f = match outcome {
        Ok(()) => return CheckItem::ok(name, required, ok_detail),
        Err(f) => f,
    };
    let fix = if f.is_userns_setup() {
        "user namespaces do not work for this user; fix `user-namespaces` first".to_string()
    } else if let Some(fix) = fixer(f, host) {
        fix
    } else if let Some(fix) = too_old_fix(f, host) {
        fix
    } else {
        format!(
            "{} is denied or unsupported here; check `dmesg` for LSM (SELinux/AppArmor) denials and the seccomp \
             profile of any enclosing container",
            f.call()
        )
    };
    CheckItem::problem(name, required, f.to_string(), Some(fix))
}

/// The minimum kernel for a step that failed with ENOSYS (or EINVAL for a
/// flag older kernels reject).
fn too_old_fix(f: &Failure, host: &Host) -> Option<String> {
    let min = match (f.step, f.errno) {
        (Step::Fsopen | Step::FsconfigSet | Step::FsconfigCreate | Step::Fsmount, libc::ENOSYS)
        | (Step::OpenTree | Step::MoveMount, libc::ENOSYS) => "5.2",
        (Step::MountSetattr, libc::ENOSYS) => "5.12",
        (Step::PidfdSendSignal, libc::ENOSYS) => "5.1",
        (Step::PidfdOpen | Step::Clone3, libc::ENOSYS) => "5.3",
        (Step::CloseRange, libc::ENOSYS) => "5.9",
        (Step::CloseRange, libc::EINVAL) if f.arg == 0 => "5.11 (CLOSE_RANGE_CLOEXEC)",
        (Step::Openat2, libc::ENOSYS) => "5.6",
        _ => return None,
    };
    Some(format!(
        "the kernel ({}) lacks {}: upgrade to Linux >= {min} (inside a container, its seccomp profile may also be \
         blocking the call)",
        host.kernel,
        f.call()
    ))
}

fn mount_api_fix(f: &Failure, _host: &Host) -> Option<String> {
    match (f.step, f.errno) {
        (Step::PivotRoot, libc::EINVAL) => Some(
            "pivot_root is refused because / is not a mount point (e.g. an initramfs rootfs): run capsule on a \
             system whose / is a real mount"
                .into(),
        ),
        (Step::MakePrivate | Step::OpenTree | Step::MountSetattr | Step::MoveMount | Step::PivotRoot, libc::EPERM)
        | (Step::Fsmount | Step::FsconfigCreate, libc::EPERM) => Some(format!(
            "{} is denied inside a user namespace; check `dmesg` for LSM denials and the seccomp profile of any \
             enclosing container",
            f.call()
        )),
        _ => None,
    }
}

fn pid_namespace_fix(f: &Failure, _host: &Host) -> Option<String> {
    match (f.step, f.errno) {
        (Step::Fsmount | Step::FsconfigCreate, libc::EPERM) => Some(
            "the kernel refuses a fresh procfs because the visible /proc is partially covered (mount too \
             revealing), typical inside containers that mask /proc paths: run capsule where /proc is fully \
             visible (docker: --security-opt systempaths=unconfined; podman: --security-opt unmask=ALL)"
                .into(),
        ),
        (Step::Unshare, libc::ENOSPC) => Some(format!("sysctl -w user.max_pid_namespaces=15000 {SYSCTL_PERSIST}")),
        _ => namespace_fix(f, _host),
    }
}

fn namespace_fix(f: &Failure, host: &Host) -> Option<String> {
    if f.step != Step::Unshare {
        return None;
    }
    let kind = ns_kind(f.arg);
    match f.errno {
        libc::ENOSPC => Some(format!(
            "the user.max_{kind}_namespaces limit is 0 or used up: sysctl -w user.max_{kind}_namespaces=15000 \
             {SYSCTL_PERSIST}"
        )),
        libc::EINVAL => Some(format!(
            "the kernel ({}) was built without {kind} namespaces: use a kernel with CONFIG_{}_NS=y{}",
            host.kernel,
            kind.to_uppercase(),
            if kind == "time" { " (Linux >= 5.6)" } else { "" }
        )),
        _ => None,
    }
}

/// `net` for CLONE_NEWNET etc. (the sysctl/kconfig spelling).
fn ns_kind(flags: u32) -> &'static str {
    let f = flags as libc::c_int;
    if f & libc::CLONE_NEWNET != 0 {
        "net"
    } else if f & libc::CLONE_NEWIPC != 0 {
        "ipc"
    } else if f & libc::CLONE_NEWUTS != 0 {
        "uts"
    } else if f & libc::CLONE_NEWCGROUP != 0 {
        "cgroup"
    } else if f & libc::CLONE_NEWTIME != 0 {
        "time"
    } else if f & libc::CLONE_NEWPID != 0 {
        "pid"
    } else if f & libc::CLONE_NEWNS != 0 {
        "mnt"
    } else {
        "user"
    }
}

fn ns_flag_name(ns: Namespace) -> &'static str {
    match ns {
        Namespace::Net => "CLONE_NEWNET",
        Namespace::Ipc => "CLONE_NEWIPC",
        Namespace::Uts => "CLONE_NEWUTS",
        Namespace::Cgroup => "CLONE_NEWCGROUP",
        Namespace::Time => "CLONE_NEWTIME",
    }
}

fn time_item(outcome: &Outcome, ns_file: bool, host: &Host) -> CheckItem {
    const NAME: &str = "time-namespace";
    let fix = || {
        Some(format!(
            "the kernel ({}) has no time namespaces: use Linux >= 5.6 built with CONFIG_TIME_NS=y; until then the \
             sandbox shares the host's clocks",
            host.kernel
        ))
    };
    if !ns_file && outcome.is_ok() {
        return CheckItem::problem(NAME, false, "/proc/self/ns/time is missing", fix());
    }
    let mut item = feature_item(
        NAME,
        false,
        outcome,
        "unshare(CLONE_NEWTIME) works in a user namespace; /proc/self/ns/time exists",
        host,
        namespace_fix,
    );
    if item.status != CheckStatus::Ok && !ns_file {
        item.detail.push_str("; /proc/self/ns/time is missing");
        item.fix = fix();
    }
    item
}

fn overlay_fix(f: &Failure, host: &Host) -> Option<String> {
    match (f.step, f.errno) {
        (Step::Fsopen, libc::ENODEV) => Some(
            "overlayfs is not loaded: `modprobe overlay` as root (persist: `echo overlay >> /etc/modules`); \
             without it overlay mounts are unavailable"
                .into(),
        ),
        (Step::FsconfigSet | Step::FsconfigCreate | Step::Fsmount, libc::EPERM | libc::EINVAL) => Some(format!(
            "overlayfs refuses to mount in a user namespace on this kernel ({}): Linux >= 5.11 is needed (some \
             distributions also disable it); without it overlay mounts are unavailable",
            host.kernel
        )),
        (Step::OverlayWrite | Step::OverlayCopyUp | Step::OverlayUnlink, _) => Some(format!(
            "the overlay mounts but {} fails: the kernel ({}) or its tmpfs lacks what an unprivileged overlay \
             upper layer needs; upgrade the kernel",
            f.call(),
            host.kernel
        )),
        _ => None,
    }
}

fn seccomp_item(outcome: &Outcome, actions: &[(&str, bool)], host: &Host) -> CheckItem {
    const NAME: &str = "seccomp";
    let avail: Vec<&str> = actions.iter().filter(|(_, ok)| *ok).map(|(n, _)| *n).collect();
    let missing: Vec<&str> = actions.iter().filter(|(_, ok)| !*ok).map(|(n, _)| *n).collect();
    match outcome {
        Ok(()) => {
            let mut detail = format!("filter mode works (with no_new_privs); actions: {}", avail.join(", "));
            if !missing.is_empty() {
                detail.push_str(&format!("; unsupported: {}", missing.join(", ")));
            }
            if missing.contains(&"user_notif") {
                // `kill` in strict, compile and policy files is a user
                // notification (Linux >= 5.0).
                let fix = "runs with --seccomp strict, compile or a policy file that uses `kill` fail at                            installing the filter: use Linux >= 5.0, or `default`/`none`";
                return CheckItem::problem(NAME, false, detail, Some(fix.into()));
            }
            CheckItem::ok(NAME, false, detail)
        }
        Err(f) => {
            let fix = match (f.step, f.errno) {
                (Step::SeccompInstall, libc::EINVAL) => format!(
                    "the kernel ({}) was built without CONFIG_SECCOMP_FILTER: use a kernel with it; until then \
                     every run fails at installing its filter unless it asks for `--seccomp none` (and can \
                     then make any system call)",
                    host.kernel
                ),
                _ => format!(
                    "{} is denied here (an enclosing seccomp profile or LSM); every run fails at installing \
                     its filter unless it asks for `--seccomp none`",
                    f.call()
                ),
            };
            CheckItem::problem(NAME, false, f.to_string(), Some(fix))
        }
    }
}

fn landlock_item(abi: Result<u32, Failure>, lsm: Option<&str>, host: &Host) -> CheckItem {
    const NAME: &str = "landlock";
    let boot = match lsm {
        Some(list) if !list.is_empty() => format!("`lsm={list},landlock`"),
        _ => "`lsm=<current list>,landlock` (the current list is in /sys/kernel/security/lsm)".into(),
    };
    match abi {
        Ok(v) => CheckItem::ok(NAME, false, format!("ABI version {v}")),
        Err(f) => {
            let (detail, fix) = match f.errno {
                libc::EOPNOTSUPP => (
                    "not available: built into the kernel but not enabled at boot".to_string(),
                    format!("add landlock to the kernel command line: boot with {boot}"),
                ),
                libc::ENOSYS => (
                    format!("not available: the kernel ({}) has no Landlock", host.kernel),
                    format!(
                        "use Linux >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y and boot with {boot} (inside a \
                         container, its seccomp profile may also block the call)"
                    ),
                ),
                _ => (format!("not available: {f}"), format!("boot with {boot}")),
            };
            let detail = if f.errno == libc::EOPNOTSUPP || f.errno == libc::ENOSYS {
                format!("{detail} ({})", errno_text(f.errno))
            } else {
                detail
            };
            CheckItem::problem(NAME, false, detail, Some(fix))
        }
    }
}

// ---------------------------------------------------------------------------
// cgroups

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
fn cgroup_source_item(d: &crate::host::cgroups::Discovery) -> CheckItem {
    use crate::host::cgroups::Source;
    const NAME: &str = "cgroup-source";
    match d.source {
        Source::Explicit | Source::Own => CheckItem::ok(
            NAME,
            false,
            format!("runs get cgroup limits and accounting from {} (limits, `accounting: cgroup`)", d.detail),
        ),
        Source::SystemdScope => CheckItem::ok(
            NAME,
            false,
            format!("{}: `capsule run` re-starts itself in `systemd-run --user --scope -p Delegate=yes`", d.detail),
        ),
        Source::None => CheckItem::problem(
            NAME,
            false,
            format!("degraded mode, no cgroup limits, `accounting: rusage`: {}", d.detail),
            Some(crate::host::cgroups::DELEGATION_HINT.into()),
        ),
    }
}

fn cgroup_items(host: &Host) -> Vec<CheckItem> {
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

// ---------------------------------------------------------------------------
// Small helpers

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_u64(path: &str) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

/// The login name for `uid` from /etc/passwd, or the number.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host { kernel: "6.1.0".into(), euid: 1000, user: "alice".into(), ..Host::default() }
    }

    fn item(name: &str, status: CheckStatus, required: bool) -> CheckItem {
        CheckItem { name: name.into(), status, required, detail: "d".into(), fix: Some("f".into()) }
    }

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

    #[test]
    fn uid_map_root_detection() {
        assert!(is_initial_root(0, "         0          0 4294967295\n"));
        assert!(!is_initial_root(1000, "         0          0 4294967295\n"));
        assert!(!is_initial_root(0, "         0       1000          1\n"));
        assert!(!is_initial_root(0, "0 100000 65536\n"));
        assert!(!is_initial_root(0, ""));
        assert_eq!(
            crate::host::identity::parse_id_map("0 1000 1\n1 100000 65536\n"),
            vec![(0, 1000, 1), (1, 100000, 65536)]
        );
    }

    #[test]
    fn root_items() {
        let full = "         0          0 4294967295\n";
        let ids = |uid| probe::Ids { uid, euid: uid, gid: uid, egid: uid };
        assert_eq!(root_item(&ids(1000), Some(full), Some(0)).status, CheckStatus::Ok);
        let r = root_item(&ids(0), Some(full), Some(0));
        assert_eq!(r.status, CheckStatus::Fail);
        assert!(r.required);
        assert!(r.fix.as_deref().unwrap().contains("runuser -u nobody"));
        // Rootless container: uid 0 maps to an unprivileged uid.
        assert_eq!(root_item(&ids(0), Some("0 1000 1\n"), Some(65534)).status, CheckStatus::Ok);
        // `unshare -r` by the host's root: still root over root's files.
        assert_eq!(root_item(&ids(0), Some("0 0 1\n"), Some(0)).status, CheckStatus::Fail);
        // Maps to the parent's 0 but /dev/null is not ours: nested container.
        assert_eq!(root_item(&ids(0), Some("0 0 1\n"), Some(65534)).status, CheckStatus::Ok);
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
    fn status_serializes_lowercase() {
        let json = serde_json::to_string(&item("x", CheckStatus::Warn, false)).unwrap();
        assert!(json.contains("\"status\":\"warn\""), "{json}");
        assert_eq!(serde_json::to_string(&CheckStatus::Fail).unwrap(), "\"fail\"");
    }

    #[test]
    fn userns_diagnoses() {
        let f = Failure { step: Step::UnshareUser, arg: 1, errno: libc::EPERM, kernel_msg: None };
        let (_, fix) = diagnose_userns(&f, &Host { max_user_namespaces: Some(0), ..host() });
        assert_eq!(fix, format!("sysctl -w user.max_user_namespaces=15000 {SYSCTL_PERSIST}"));
        let (_, fix) = diagnose_userns(&f, &Host { unprivileged_userns_clone: Some(0), ..host() });
        assert!(fix.starts_with("sysctl -w kernel.unprivileged_userns_clone=1"));
        let map = Failure { step: Step::UidMap, arg: 1, errno: libc::EPERM, kernel_msg: None };
        let (_, fix) = diagnose_userns(&map, &Host { apparmor_restrict_userns: Some(1), ..host() });
        assert!(fix.starts_with("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"));
        assert!(fix.contains("userns,"));
        let (why, fix) = diagnose_userns(&f, &host());
        assert!(why.contains("denied") && fix.contains("seccomp"));
        let item = userns_item(&Err(f), &host());
        assert_eq!(item.status, CheckStatus::Fail);
        assert!(item.detail.starts_with("unshare(CLONE_NEWUSER) failed: Operation not permitted (EPERM)"));
    }

    #[test]
    fn feature_failures_point_at_the_cause() {
        let userns = Failure { step: Step::UnshareUser, arg: 1, errno: libc::EPERM, kernel_msg: None };
        let it = feature_item("mount-api", true, &Err(userns), "", &host(), mount_api_fix);
        assert_eq!(it.status, CheckStatus::Fail);
        assert!(it.fix.unwrap().contains("fix `user-namespaces` first"));
        let old = Failure { step: Step::MountSetattr, arg: 0, errno: libc::ENOSYS, kernel_msg: None };
        let it = feature_item("mount-api", true, &Err(old), "", &host(), mount_api_fix);
        assert!(it.fix.unwrap().contains("Linux >= 5.12"));
        let ovl = Failure { step: Step::Fsopen, arg: 1, errno: libc::ENODEV, kernel_msg: None };
        let it = feature_item("overlayfs", false, &Err(ovl), "", &host(), overlay_fix);
        assert_eq!(it.status, CheckStatus::Warn);
        assert!(it.fix.unwrap().contains("modprobe overlay"));
        let proc = Failure {
            step: Step::Fsmount,
            arg: 2,
            errno: libc::EPERM,
            kernel_msg: Some("VFS: Mount too revealing".into()),
        };
        let it = feature_item("pid-namespace", true, &Err(proc), "", &host(), pid_namespace_fix);
        assert!(it.detail.contains("Mount too revealing"), "{}", it.detail);
        assert!(it.fix.unwrap().contains("systempaths=unconfined"));
        let time =
            Failure { step: Step::Unshare, arg: libc::CLONE_NEWTIME as u32, errno: libc::EINVAL, kernel_msg: None };
        let it = time_item(&Err(time), false, &host());
        assert_eq!(it.status, CheckStatus::Warn);
        assert!(it.fix.unwrap().contains("CONFIG_TIME_NS"));
    }

    #[test]
    fn landlock_messages() {
        let it = landlock_item(Ok(7), None, &host());
        assert_eq!((it.status, it.detail.as_str()), (CheckStatus::Ok, "ABI version 7"));
        let off = Failure { step: Step::Landlock, arg: 0, errno: libc::EOPNOTSUPP, kernel_msg: None };
        let it = landlock_item(Err(off), Some("lockdown,capability,yama,apparmor"), &host());
        assert_eq!(it.status, CheckStatus::Warn);
        assert!(it.fix.unwrap().contains("lsm=lockdown,capability,yama,apparmor,landlock"));
        let none = Failure { step: Step::Landlock, arg: 0, errno: libc::ENOSYS, kernel_msg: None };
        assert!(landlock_item(Err(none), None, &host()).detail.contains("ENOSYS"));
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
