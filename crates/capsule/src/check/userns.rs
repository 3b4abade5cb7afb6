//! Who runs capsule (not the host's root), user namespaces and their
//! nesting, and the fixes for a namespace that cannot be created.

use super::{CheckItem, Host, SYSCTL_PERSIST, USERNS_LEVELS};
use crate::error::errno_text;
use crate::host::container::Refusal;
use crate::host::identity::{is_initial_root, outside_uid0};
use crate::sys::probe::{self, Failure, Namespace, Outcome, Step};

pub(super) fn root_item(ids: &probe::Ids, uid_map: Option<&str>, devnull_owner: Option<u32>) -> CheckItem {
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

pub(super) fn userns_item(outcome: &Outcome, host: &Host) -> CheckItem {
    const NAME: &str = "user-namespaces";
    match outcome {
        Ok(()) => {
            let note =
                if host.apparmor_restrict_userns == Some(1) { host.apparmor.allowed_note() } else { String::new() };
            CheckItem::ok(
                NAME,
                true,
                format!("unshare(CLONE_NEWUSER) works and uid/gid maps `0 {} 1` can be written{note}", host.euid),
            )
        }
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
        return (host.apparmor.why(), host.apparmor.fix());
    }
    match (f.step, f.errno) {
        (Step::UnshareUser, libc::EINVAL) => {
            ("; the kernel was built without user namespaces".into(), "use a kernel built with CONFIG_USER_NS=y".into())
        }
        (Step::UnshareUser, libc::EUSERS) => (
            "; the nesting limit of 32 user namespaces is reached".into(),
            "run capsule from a shallower user namespace".into(),
        ),
        (Step::UnshareUser, libc::EPERM) if host.container.is_some() => (
            "; the call is denied, typically by the container's seccomp profile".into(),
            super::container::container_fix(host, Refusal::Seccomp).unwrap_or_default(),
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

pub(super) fn nesting_item(outcome: &Outcome, first_ok: bool, host: &Host) -> CheckItem {
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

pub(super) fn pid_namespace_fix(f: &Failure, host: &Host) -> Option<String> {
    match (f.step, f.errno) {
        (Step::Fsmount | Step::FsconfigCreate, libc::EPERM) if host.container.is_some() => {
            super::container::container_fix(host, Refusal::MaskedProc)
        }
        (Step::Fsmount | Step::FsconfigCreate, libc::EPERM) => Some(
            "the kernel refuses a fresh procfs because the visible /proc is partially covered (mount too \
             revealing), typical inside containers that mask /proc paths: run capsule where /proc is fully \
             visible (docker: --security-opt systempaths=unconfined; podman: --security-opt unmask=ALL)"
                .into(),
        ),
        (Step::Unshare, libc::ENOSPC) => Some(format!("sysctl -w user.max_pid_namespaces=15000 {SYSCTL_PERSIST}")),
        _ => namespace_fix(f, host),
    }
}

pub(super) fn namespace_fix(f: &Failure, host: &Host) -> Option<String> {
    if f.step == Step::Sethostname || (f.step == Step::Unshare && f.errno == libc::EPERM) {
        return super::container::container_fix(host, Refusal::Seccomp);
    }
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

pub(super) fn ns_flag_name(ns: Namespace) -> &'static str {
    match ns {
        Namespace::Net => "CLONE_NEWNET",
        Namespace::Ipc => "CLONE_NEWIPC",
        Namespace::Uts => "CLONE_NEWUTS",
        Namespace::Cgroup => "CLONE_NEWCGROUP",
        Namespace::Time => "CLONE_NEWTIME",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::apparmor;
    use crate::check::tests::host;
    use crate::check::CheckStatus;

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
    fn userns_diagnoses() {
        let f = Failure { step: Step::UnshareUser, arg: 1, errno: libc::EPERM, kernel_msg: None };
        let (_, fix) = diagnose_userns(&f, &Host { max_user_namespaces: Some(0), ..host() });
        assert_eq!(fix, format!("sysctl -w user.max_user_namespaces=15000 {SYSCTL_PERSIST}"));
        let (_, fix) = diagnose_userns(&f, &Host { unprivileged_userns_clone: Some(0), ..host() });
        assert!(fix.starts_with("sysctl -w kernel.unprivileged_userns_clone=1"));
        let map = Failure { step: Step::UidMap, arg: 1, errno: libc::EPERM, kernel_msg: None };
        // Restricted by AppArmor (Ubuntu 23.10+), the packaged profile installed but not loaded: the
        // cause, the profile's state and the command that loads it.
        let apparmor = apparmor::AppArmor {
            profiles: Some(Ok("unprivileged_userns (enforce)\n".into())),
            label: Some("unconfined".into()),
            installed: true,
            exe: "/usr/bin/capsule-cli".into(),
        };
        let restricted = Host { apparmor_restrict_userns: Some(1), apparmor, ..host() };
        let (why, fix) = diagnose_userns(&map, &restricted);
        assert!(why.starts_with("; kernel.apparmor_restrict_unprivileged_userns is 1"), "{why}");
        assert!(why.contains("/etc/apparmor.d/capsule is installed but not loaded"), "{why}");
        assert_eq!(fix, "sudo apparmor_parser -r /etc/apparmor.d/capsule");
        let item = userns_item(&Err(map.clone()), &restricted);
        assert_eq!(item.status, CheckStatus::Fail);
        assert_eq!(item.fix.as_deref(), Some("sudo apparmor_parser -r /etc/apparmor.d/capsule"));
        // Allowed all the same: the profile that allows it is named.
        let confined =
            apparmor::AppArmor { label: Some("capsule-cli (unconfined)".into()), ..restricted.apparmor.clone() };
        let item = userns_item(&Ok(()), &Host { apparmor: confined, ..restricted });
        assert!(item.detail.ends_with("(AppArmor restricts user namespaces; the profile `capsule-cli` allows them)"));
        let (why, fix) = diagnose_userns(&f, &host());
        assert!(why.contains("denied") && fix.contains("seccomp"));
        let item = userns_item(&Err(f), &host());
        assert_eq!(item.status, CheckStatus::Fail);
        assert!(item.detail.starts_with("unshare(CLONE_NEWUSER) failed: Operation not permitted (EPERM)"));
    }
}
