//! The container capsule runs in, if any: which engine, and for each of its
//! defaults that refuses a sandbox (masked /proc, a seccomp profile that
//! refuses sethostname or namespaces, AppArmor refusing mount, a read-only
//! cgroup) the engine's option that lifts it — the same options `capsule
//! run`'s errors name ([`crate::host::container`]).

use super::{CheckItem, CheckStatus, Host};
use crate::host::container::{Container, Refusal};
use crate::sys::probe::{Failure, Outcome, Step};

/// The probes whose failures a container explains.
pub(super) struct Probed<'a> {
    pub userns: &'a Outcome,
    pub mount_api: &'a Outcome,
    pub pid_namespace: &'a Outcome,
    pub uts: &'a Outcome,
}

fn denied(o: &Outcome) -> Option<&Failure> {
    o.as_ref().err().filter(|f| f.errno == libc::EPERM || f.errno == libc::EACCES)
}

/// What the probes and the mount table show the container refuses, each
/// with what showed it.
pub(super) fn refusals(p: &Probed, visible: &[Refusal], apparmor: Option<&str>) -> Vec<(Refusal, String)> {
    let mut v: Vec<(Refusal, String)> = Vec::new();
    let mut seccomp = Vec::new();
    if let Some(f) = denied(p.userns).filter(|f| matches!(f.step, Step::UnshareUser)) {
        seccomp.push(f.call());
    }
    if let Some(f) = denied(p.uts) {
        seccomp.push(f.call());
    }
    if !seccomp.is_empty() {
        v.push((Refusal::Seccomp, format!("refused: {}", seccomp.join(", "))));
    }
    let mount_denied = denied(p.mount_api).filter(|f| !f.is_userns_setup());
    if let (Some(f), Some(label)) = (mount_denied, apparmor) {
        v.push((Refusal::AppArmorMount, format!("{} refused under the AppArmor profile `{label}`", f.call())));
    } else if let Some(f) = mount_denied {
        v.push((Refusal::Seccomp, format!("refused: {}", f.call())));
    }
    let proc_denied = denied(p.pid_namespace).filter(|f| matches!(f.step, Step::Fsmount | Step::FsconfigCreate));
    if proc_denied.is_some() {
        v.push((Refusal::MaskedProc, "paths under /proc are mounted over".into()));
    }
    if visible.contains(&Refusal::ReadOnlyCgroup) {
        v.push((Refusal::ReadOnlyCgroup, "/sys/fs/cgroup is mounted read-only".into()));
    }
    v
}

/// The `container` item: not in one (ok), in one whose defaults are all
/// lifted (ok), or the options that are missing, one per refusal. A
/// refusal that breaks runs fails it; a read-only cgroup only degrades them.
pub(super) fn container_item(host: &Host, found: &[(Refusal, String)]) -> CheckItem {
    const NAME: &str = "container";
    let Some(c) = &host.container else {
        return CheckItem::ok(NAME, false, "not inside a container (no /run/.containerenv, /.dockerenv, $container)");
    };
    if found.is_empty() {
        return CheckItem::ok(
            NAME,
            false,
            format!("inside a {} container ({}); none of its defaults refuses a sandbox", c.name(), c.evidence),
        );
    }
    let fatal = found.iter().any(|(r, _)| *r != Refusal::ReadOnlyCgroup);
    let detail = format!(
        "inside a {} container ({}): {}",
        c.name(),
        c.evidence,
        found.iter().map(|(r, why)| format!("{} ({why})", Container::what(*r))).collect::<Vec<_>>().join("; ")
    );
    let options: Vec<String> = found.iter().map(|(r, _)| c.option(*r)).collect();
    let fix = format!("start the container with {} (docs/containers.md)", options.join(" and "));
    let mut item = CheckItem::problem(NAME, fatal, detail, Some(fix));
    if !fatal {
        item.status = CheckStatus::Warn;
    }
    item
}

/// The fix for a step a container refuses, naming its option, or None
/// outside a container.
pub(super) fn container_fix(host: &Host, r: Refusal) -> Option<String> {
    let c = host.container.as_ref()?;
    Some(format!(
        "inside a {} container ({}), {}: start it with {} (docs/containers.md)",
        c.name(),
        c.evidence,
        Container::what(r),
        c.option(r)
    ))
}

/// The fix for a mount refused in the probes' own namespace inside a
/// container: its AppArmor profile's where one confines this process, else
/// its seccomp profile's.
pub(super) fn refused_mount_fix(f: &Failure, host: &Host, apparmor: Option<&str>) -> Option<String> {
    if f.step != Step::MakePrivate || !(f.errno == libc::EPERM || f.errno == libc::EACCES) {
        return None;
    }
    container_fix(host, if apparmor.is_some() { Refusal::AppArmorMount } else { Refusal::Seccomp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::host;

    fn fail(step: Step, errno: i32) -> Outcome {
        Err(Failure { step, arg: 2, errno, kernel_msg: None })
    }

    #[test]
    fn podman_defaults_name_their_options() {
        // What podman 4.3's defaults gave as user 1500 (docs/containers.md).
        let (ok, proc, uts) = (Ok(()), fail(Step::Fsmount, libc::EPERM), fail(Step::Sethostname, libc::EPERM));
        let p = Probed { userns: &ok, mount_api: &ok, pid_namespace: &proc, uts: &uts };
        let found = refusals(&p, &[Refusal::MaskedProc, Refusal::ReadOnlyCgroup], None);
        // Masked paths the probe mounts a procfs past are no refusal.
        let fine = Probed { userns: &ok, mount_api: &ok, pid_namespace: &ok, uts: &ok };
        assert!(refusals(&fine, &[Refusal::MaskedProc], None).is_empty());
        let kinds: Vec<Refusal> = found.iter().map(|(r, _)| *r).collect();
        assert_eq!(kinds, [Refusal::Seccomp, Refusal::MaskedProc, Refusal::ReadOnlyCgroup]);
        let podman = Host { container: Container::from_marks(true, false, false, None), ..host() };
        let it = container_item(&podman, &found);
        assert_eq!((it.status, it.required), (CheckStatus::Fail, true));
        assert!(it.detail.contains("sethostname() in the new UTS namespace"), "{}", it.detail);
        let fix = it.fix.unwrap();
        for opt in ["seccomp=deploy/seccomp/capsule-container.json", "unmask=/proc/*`", "unmask=ALL", "entrypoint.sh"] {
            assert!(fix.contains(opt), "{opt} missing: {fix}");
        }
        // Only the cgroup left: a warning.
        let it = container_item(&podman, &found[2..]);
        assert_eq!(it.status, CheckStatus::Warn);
        // Outside a container: ok whatever the probes say.
        assert_eq!(container_item(&host(), &found).status, CheckStatus::Ok);
    }

    #[test]
    fn apparmor_or_seccomp_for_a_refused_mount() {
        let (ok, mount) = (Ok(()), fail(Step::MakePrivate, libc::EPERM));
        let p = Probed { userns: &ok, mount_api: &mount, pid_namespace: &ok, uts: &ok };
        let found = refusals(&p, &[Refusal::AppArmorMount], Some("docker-default (enforce)"));
        assert_eq!(found[0].0, Refusal::AppArmorMount);
        assert!(found[0].1.contains("`docker-default (enforce)`"), "{}", found[0].1);
        let docker = Host { container: Container::from_marks(false, true, false, None), ..host() };
        assert!(container_item(&docker, &found).fix.unwrap().contains("--security-opt apparmor=unconfined"));
        assert_eq!(refusals(&p, &[], None)[0].0, Refusal::Seccomp);
        let f = mount.clone().unwrap_err();
        let fix = refused_mount_fix(&f, &docker, Some("docker-default (enforce)")).unwrap();
        assert!(fix.contains("AppArmor") && fix.contains("apparmor=unconfined"), "{fix}");
        assert!(refused_mount_fix(&f, &docker, None).unwrap().contains("seccomp="));
        assert_eq!(refused_mount_fix(&f, &host(), Some("x (enforce)")), None);
        let userns = fail(Step::UnshareUser, libc::EPERM);
        let p = Probed { userns: &userns, mount_api: &ok, pid_namespace: &ok, uts: &ok };
        assert_eq!(refusals(&p, &[], None)[0].0, Refusal::Seccomp);
    }
}
