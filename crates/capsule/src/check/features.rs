//! The kernel features a run uses, each probed: the mount API, namespaces
//! other than the user namespace, overlayfs, seccomp, Landlock, the newer
//! process and file calls.

use super::userns::namespace_fix;
use super::{CheckItem, CheckStatus, Host};
use crate::error::errno_text;
use crate::sys::probe::{Failure, Outcome, Step};

/// Turns a probe outcome into an item. Failures caused by user namespaces
/// point at `user-namespaces`; ENOSYS names the kernel version needed;
/// everything else goes to `fixer`, with a generic fallback.
pub(super) fn feature_item(
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
    let apparmor = crate::host::container::apparmor_label();
    let fix = if f.is_userns_setup() {
        "user namespaces do not work for this user; fix `user-namespaces` first".to_string()
    } else if let Some(fix) = super::container::refused_mount_fix(f, host, apparmor.as_deref()) {
        fix
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

pub(super) fn mount_api_fix(f: &Failure, _host: &Host) -> Option<String> {
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

pub(super) fn time_item(outcome: &Outcome, ns_file: bool, host: &Host) -> CheckItem {
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

pub(super) fn overlay_fix(f: &Failure, host: &Host) -> Option<String> {
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

pub(super) fn seccomp_item(outcome: &Outcome, actions: &[(&str, bool)], host: &Host) -> CheckItem {
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
                let fix = "runs with --seccomp strict, compile or a policy file that uses `kill` fail at installing the filter: use Linux >= 5.0, or `default`/`none`";
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

pub(super) fn landlock_item(abi: Result<u32, Failure>, lsm: Option<&str>, host: &Host) -> CheckItem {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::host;
    use crate::check::userns::pid_namespace_fix;

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
}
