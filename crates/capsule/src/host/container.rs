//! Whether capsule runs inside a container, which engine started it, and
//! the engine's option for each default of a container that refuses a
//! sandbox (docs/containers.md). `capsule check` and the errors of
//! `capsule run` both name the options from here, so they agree.

use std::path::Path;

use super::mountinfo::parse_mountinfo;

/// What a container's defaults refuse a sandbox, each lifted by one option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The seccomp profile refuses a call the sandbox's set-up makes:
    /// sethostname (podman's and docker's default profiles without
    /// CAP_SYS_ADMIN), unshare/clone with namespace flags, mount (docker's).
    Seccomp,
    /// Paths under /proc are masked or read-only bind mounts: the kernel
    /// refuses a fresh procfs ("mount too revealing").
    MaskedProc,
    /// An AppArmor profile (docker-default, containers-default) refuses mount.
    AppArmorMount,
    /// The cgroup hierarchy is mounted read-only: no delegation, so runs
    /// have no cgroup limits (degraded mode).
    ReadOnlyCgroup,
}

/// The engine that made the container, as far as its marks tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Podman,
    Docker,
    Kubernetes,
    /// `container=NAME` in the environment (systemd-nspawn, LXC, ...).
    Other,
}

/// A container capsule runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub engine: Engine,
    /// What gave it away, for messages (`/run/.containerenv`).
    pub evidence: String,
}

/// The path of the seccomp profile in capsule's sources, as messages name it.
pub const SECCOMP_PROFILE: &str = "deploy/seccomp/capsule-container.json";

impl Container {
    /// Looks at this process's surroundings: podman's `/run/.containerenv`,
    /// docker's `/.dockerenv`, a pod's `KUBERNETES_SERVICE_HOST`, the
    /// `container` variable engines set.
    pub fn detect() -> Option<Container> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Container::from_marks(
            Path::new("/run/.containerenv").exists(),
            Path::new("/.dockerenv").exists(),
            env("KUBERNETES_SERVICE_HOST").is_some(),
            env("container").as_deref(),
        )
    }

    pub(crate) fn from_marks(
        containerenv: bool,
        dockerenv: bool,
        kubernetes: bool,
        var: Option<&str>,
    ) -> Option<Container> {
        let c = |engine, evidence: &str| Some(Container { engine, evidence: evidence.into() });
        if kubernetes {
            return c(Engine::Kubernetes, "$KUBERNETES_SERVICE_HOST is set");
        }
        if containerenv {
            return c(Engine::Podman, "/run/.containerenv exists");
        }
        if dockerenv {
            return c(Engine::Docker, "/.dockerenv exists");
        }
        match var {
            Some("podman") => c(Engine::Podman, "$container is `podman`"),
            Some("docker") => c(Engine::Docker, "$container is `docker`"),
            Some(v) => c(Engine::Other, &format!("$container is {v:?}")),
            None => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self.engine {
            Engine::Podman => "podman",
            Engine::Docker => "docker",
            Engine::Kubernetes => "Kubernetes",
            Engine::Other => "container",
        }
    }

    /// The option of this engine that lifts `r`, quoted as a command line
    /// part (or what there is instead).
    pub fn option(&self, r: Refusal) -> String {
        match (self.engine, r) {
            (Engine::Kubernetes, Refusal::Seccomp) => format!(
                "`securityContext.seccompProfile: {{type: Localhost, localhostProfile: capsule-container.json}}` \
                 ({SECCOMP_PROFILE} in the kubelet's seccomp directory)"
            ),
            (Engine::Kubernetes, Refusal::MaskedProc) => {
                "`securityContext.procMount: Unmasked` (with `hostUsers: false`)".into()
            }
            (Engine::Kubernetes, Refusal::AppArmorMount) => {
                "`securityContext.appArmorProfile: {type: Unconfined}`".into()
            }
            (Engine::Kubernetes, Refusal::ReadOnlyCgroup) => {
                "nothing short of a privileged pod: runs have no cgroup limits (degraded mode)".into()
            }
            (_, Refusal::Seccomp) => format!("`--security-opt seccomp={SECCOMP_PROFILE}`"),
            (Engine::Docker, Refusal::MaskedProc) => "`--security-opt systempaths=unconfined`".into(),
            (_, Refusal::MaskedProc) => "`--security-opt unmask=/proc/*`".into(),
            (_, Refusal::AppArmorMount) => "`--security-opt apparmor=unconfined`".into(),
            (Engine::Docker, Refusal::ReadOnlyCgroup) => "`--cap-add SYS_ADMIN` (docker mounts a container's \
                 cgroup read-only), started as root with deploy/container/entrypoint.sh, which remounts it \
                 writable and delegates a cgroup to the user it runs the command as"
                .into(),
            (_, Refusal::ReadOnlyCgroup) => "`--security-opt unmask=ALL` (a writable cgroup), started as root with \
                 deploy/container/entrypoint.sh, which delegates a cgroup to the user it runs the command as"
                .into(),
        }
    }

    /// What `r` is, in a few words, for messages.
    pub fn what(r: Refusal) -> &'static str {
        match r {
            Refusal::Seccomp => "its seccomp profile refuses the sandbox's set-up",
            Refusal::MaskedProc => {
                "it masks /proc paths, so the kernel refuses the run's fresh /proc (mount too revealing)"
            }
            Refusal::AppArmorMount => "its AppArmor profile refuses mount",
            Refusal::ReadOnlyCgroup => "its cgroup is read-only (no delegation: no cgroup limits)",
        }
    }

    /// One sentence: the container, why the step failed and the option that
    /// fixes it, then the other refusals found (`also`) with theirs.
    pub fn advice(&self, cause: Refusal, detail: &str, also: &[Refusal]) -> String {
        let mut s = format!(
            "inside a {} container ({}): {} ({detail}): start it with {}",
            self.name(),
            self.evidence,
            Container::what(cause),
            self.option(cause)
        );
        for r in also.iter().filter(|r| **r != cause) {
            s.push_str(&format!("; also, {}: {}", Container::what(*r), self.option(*r)));
        }
        s.push_str(" (docs/containers.md)");
        s
    }
}

/// The refusals this process's mount table and AppArmor label show
/// without probing: masked /proc, a read-only cgroup, an enforcing
/// AppArmor profile (which refuses mount in docker's and podman's).
pub fn visible_refusals() -> Vec<Refusal> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v = Vec::new();
    if !masked_proc(&mountinfo).is_empty() {
        v.push(Refusal::MaskedProc);
    }
    if apparmor_label().is_some_and(|l| l.ends_with("(enforce)")) {
        v.push(Refusal::AppArmorMount);
    }
    if cgroup_read_only(&mountinfo) {
        v.push(Refusal::ReadOnlyCgroup);
    }
    v
}

/// Mount points strictly below /proc that make a fresh procfs "too
/// revealing" to the kernel: all but those on its permanently empty
/// directories (binfmt_misc, which systemd automounts).
pub fn masked_proc(mountinfo: &str) -> Vec<String> {
    parse_mountinfo(mountinfo)
        .into_iter()
        .filter(|m| {
            m.mount_point.starts_with("/proc/")
                && m.mount_point != "/proc/sys/fs/binfmt_misc"
                && m.fstype != "binfmt_misc"
        })
        .map(|m| m.mount_point)
        .collect()
}

/// Whether the cgroup2 mount at /sys/fs/cgroup is read-only.
pub fn cgroup_read_only(mountinfo: &str) -> bool {
    parse_mountinfo(mountinfo)
        .into_iter()
        .rfind(|m| m.mount_point == "/sys/fs/cgroup" && m.fstype == "cgroup2")
        .is_some_and(|m| m.options.split(',').any(|o| o == "ro"))
}

/// This process's AppArmor label when it is confined (`docker-default
/// (enforce)`), None when unconfined or without AppArmor.
pub fn apparmor_label() -> Option<String> {
    ["/proc/self/attr/apparmor/current", "/proc/self/attr/current"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim_end_matches(['\n', '\0']).to_string())
        .filter(|l| !l.is_empty() && l != "unconfined" && !l.ends_with("(unconfined)"))
}

/// The hint for a set-up step refused with `errno` because of `cause`:
/// the container's option when capsule runs in one, else None.
pub fn hint(cause: Refusal, detail: &str, errno: i32) -> Option<String> {
    if !refused_with(cause, errno) {
        return None;
    }
    let c = Container::detect()?;
    Some(c.advice(cause, detail, &visible_refusals()))
}

/// Whether `errno` is how a container's rules refuse: EPERM or EACCES, and
/// ENOSYS from a seccomp profile (docker's answers clone3 so, for libc to
/// fall back to clone).
fn refused_with(cause: Refusal, errno: i32) -> bool {
    errno == libc::EPERM || errno == libc::EACCES || (errno == libc::ENOSYS && cause == Refusal::Seccomp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enosys_is_a_seccomp_refusal_only() {
        assert!(refused_with(Refusal::Seccomp, libc::ENOSYS));
        assert!(refused_with(Refusal::MaskedProc, libc::EPERM));
        assert!(!refused_with(Refusal::MaskedProc, libc::ENOSYS));
        assert!(!refused_with(Refusal::Seccomp, libc::EINVAL));
    }

    const PODMAN_DEFAULT: &str = "\
65 46 0:37 / / rw,relatime - overlay overlay rw,lowerdir=/
66 65 0:41 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
76 66 0:42 / /proc/acpi ro,relatime - tmpfs tmpfs ro,inode64
77 66 0:41 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
75 68 0:32 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";
    const UNMASKED: &str = "\
65 46 0:37 / / rw,relatime - overlay overlay rw,lowerdir=/
66 65 0:41 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
75 68 0:32 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn masks_and_read_only_cgroup() {
        assert_eq!(masked_proc(PODMAN_DEFAULT), ["/proc/acpi", "/proc/sys"]);
        assert!(cgroup_read_only(PODMAN_DEFAULT));
        assert!(masked_proc(UNMASKED).is_empty());
        let systemd = "90 66 0:50 / /proc/sys/fs/binfmt_misc rw,relatime - autofs systemd-1 rw,fd=29\n\
                       91 90 0:51 / /proc/sys/fs/binfmt_misc rw,relatime - binfmt_misc binfmt_misc rw\n";
        assert!(masked_proc(&format!("{UNMASKED}{systemd}")).is_empty());
        assert!(!cgroup_read_only(UNMASKED));
    }

    #[test]
    fn engines_from_marks() {
        assert_eq!(Container::from_marks(false, false, false, None), None);
        assert_eq!(Container::from_marks(true, false, false, Some("podman")).unwrap().engine, Engine::Podman);
        assert_eq!(Container::from_marks(false, true, false, None).unwrap().engine, Engine::Docker);
        assert_eq!(Container::from_marks(true, false, true, None).unwrap().engine, Engine::Kubernetes);
        let lxc = Container::from_marks(false, false, false, Some("lxc")).unwrap();
        assert_eq!((lxc.engine, lxc.evidence.as_str()), (Engine::Other, "$container is \"lxc\""));
    }

    #[test]
    fn advice_names_each_option() {
        let podman = Container::from_marks(true, false, false, None).unwrap();
        let a = podman.advice(Refusal::Seccomp, "sethostname: EPERM", &[Refusal::MaskedProc, Refusal::Seccomp]);
        assert!(a.starts_with("inside a podman container (/run/.containerenv exists): its seccomp profile"), "{a}");
        assert!(a.contains("`--security-opt seccomp=deploy/seccomp/capsule-container.json`"), "{a}");
        assert!(a.contains("also, it masks /proc paths") && a.contains("`--security-opt unmask=/proc/*`"), "{a}");
        assert_eq!(a.matches("seccomp=").count(), 1, "{a}");
        let docker = Container::from_marks(false, true, false, None).unwrap();
        assert_eq!(docker.option(Refusal::MaskedProc), "`--security-opt systempaths=unconfined`");
        assert_eq!(docker.option(Refusal::AppArmorMount), "`--security-opt apparmor=unconfined`");
        // Measured (scripts/test-docker.sh): the entrypoint remounts the cgroup with SYS_ADMIN.
        assert!(docker.option(Refusal::ReadOnlyCgroup).starts_with("`--cap-add SYS_ADMIN`"));
    }
}
