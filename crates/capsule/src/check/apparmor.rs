//! AppArmor's restriction of unprivileged user namespaces (Ubuntu 23.10+:
//! `kernel.apparmor_restrict_unprivileged_userns = 1`): only a program
//! whose profile grants `userns,` keeps its capabilities in a new user
//! namespace. The packages install that profile as /etc/apparmor.d/capsule
//! (deploy/apparmor/capsule) for capsule and capsule-cli in /usr/bin (the
//! .deb) and /usr/local/bin (the tarball, as the README installs it);
//! these diagnoses say whether it applies to this program and the one
//! command that makes it apply.

use std::path::{Path, PathBuf};

use crate::layer::quote_path;

/// Where the packages install the profile.
pub const PROFILE_FILE: &str = "/etc/apparmor.d/capsule";
/// The profile names in it, one per binary.
pub const PROFILE_NAMES: [&str; 2] = ["capsule", "capsule-cli"];
/// Where the packages install the binaries, as the profile's attachments.
pub const PACKAGED_DIRS: [&str; 2] = ["/usr/bin", "/usr/local/bin"];
/// The kernel's list of loaded profiles (readable by root only).
const PROFILES_LIST: &str = "/sys/kernel/security/apparmor/profiles";

/// What AppArmor says about this program, read once.
#[derive(Debug, Clone, Default)]
pub(super) struct AppArmor {
    /// /sys/kernel/security/apparmor/profiles: its text, or why it could not
    /// be read (`None`: no AppArmor here).
    pub profiles: Option<Result<String, String>>,
    /// This process's label (/proc/self/attr/apparmor/current), e.g.
    /// `capsule-cli (unconfined)` or `unconfined`.
    pub label: Option<String>,
    /// Whether /etc/apparmor.d/capsule exists.
    pub installed: bool,
    /// This program.
    pub exe: PathBuf,
}

impl AppArmor {
    pub(super) fn read() -> AppArmor {
        let profiles = match std::fs::read_to_string(PROFILES_LIST) {
            Ok(t) => Some(Ok(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(e.to_string())),
        };
        let label = ["/proc/self/attr/apparmor/current", "/proc/self/attr/current"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|l| l.trim_end_matches(['\n', '\0']).to_string())
            .filter(|l| !l.is_empty());
        AppArmor {
            profiles,
            label,
            installed: Path::new(PROFILE_FILE).exists(),
            exe: std::env::current_exe().unwrap_or_default(),
        }
    }

    /// The packaged profile this process runs under, from its label.
    fn confined_by(&self) -> Option<&str> {
        let name = self.label.as_deref()?.split(" (").next()?;
        PROFILE_NAMES.into_iter().find(|n| *n == name)
    }

    /// Whether the packaged profiles are loaded: `None` where the list
    /// cannot be read.
    fn loaded(&self) -> Option<bool> {
        let text = self.profiles.as_ref()?.as_ref().ok()?;
        let names: Vec<&str> = text.lines().filter_map(|l| l.rsplit_once(" (").map(|(n, _)| n)).collect();
        Some(PROFILE_NAMES.iter().all(|p| names.contains(p)))
    }

    /// Whether this program is one the packaged profile attaches to.
    fn packaged(&self) -> bool {
        PACKAGED_DIRS.iter().any(|d| PROFILE_NAMES.iter().any(|n| self.exe == Path::new(d).join(n)))
    }

    /// What the restriction means here, with a leading `; `, for the
    /// user-namespace item's detail when the probe failed.
    pub(super) fn why(&self) -> String {
        let mut why = "; kernel.apparmor_restrict_unprivileged_userns is 1: AppArmor denies capabilities in new \
                       user namespaces to programs whose profile does not grant `userns,`"
            .to_string();
        // Quoted: a path or label with control characters is shown, not acted on by the terminal.
        let exe = quote_path(&self.exe);
        why.push_str(&match (self.confined_by(), self.loaded()) {
            (Some(p), _) => format!("; this program ({exe}) runs under the profile `{p}` and is still denied"),
            (None, Some(true)) if self.packaged() => format!(
                "; the packaged profile ({PROFILE_FILE}) is loaded but this program ({exe}) does not run under \
                 it (a stale load?)"
            ),
            (None, Some(true)) => format!(
                "; the packaged profile ({PROFILE_FILE}) is loaded but covers capsule and capsule-cli in \
                 /usr/bin and /usr/local/bin, not this program ({exe})"
            ),
            (None, Some(false)) if self.installed => {
                format!("; the packaged profile {PROFILE_FILE} is installed but not loaded")
            }
            (None, Some(false)) => format!("; no capsule profile is loaded and {PROFILE_FILE} is not installed"),
            (None, None) => {
                let list = match &self.profiles {
                    Some(Err(e)) => format!("{PROFILES_LIST} cannot be read by this user ({e})"),
                    _ => format!("{PROFILES_LIST} is missing"),
                };
                let state = if self.packaged() && self.label.is_some() {
                    "not loaded (this program runs unconfined)"
                } else if self.installed {
                    "installed; whether it is loaded is not known here"
                } else {
                    "not installed"
                };
                format!("; the packaged profile {PROFILE_FILE} is {state} ({list}); this program is {exe}")
            }
        });
        why
    }

    /// The one command that lets this program create user namespaces.
    pub(super) fn fix(&self) -> String {
        let load = format!("sudo apparmor_parser -r {PROFILE_FILE}");
        if self.installed && (self.packaged() || self.confined_by().is_some()) {
            return load;
        }
        if let Some(cmd) = local_profile_command(&self.exe) {
            return cmd;
        }
        // A path no profile can be written for by a one-liner.
        format!("install capsule in /usr/bin (the package does) and run `{load}`")
    }

    /// A note for the user-namespace item when the probe worked although
    /// the restriction is on.
    pub(super) fn allowed_note(&self) -> String {
        match self.confined_by() {
            Some(p) => format!(" (AppArmor restricts user namespaces; the profile `{p}` allows them)"),
            None => " (AppArmor's restriction of user namespaces does not apply to this user)".into(),
        }
    }
}

/// A shell command that writes and loads a profile granting `userns,` to
/// this program (and its sibling capsule or capsule-cli), wherever it is
/// installed; `None` for a path that does not fit a profile unquoted.
fn local_profile_command(exe: &Path) -> Option<String> {
    let path = exe.to_str()?;
    let ok = |c: char| c.is_ascii_alphanumeric() || "/._-+".contains(c);
    if !path.starts_with('/') || !path.chars().all(ok) {
        return None;
    }
    let (dir, name) = path.rsplit_once('/')?;
    let attach =
        if PROFILE_NAMES.contains(&name) { format!("{dir}/{{capsule,capsule-cli}}") } else { path.to_string() };
    let file = "/etc/apparmor.d/capsule-local";
    Some(format!(
        "printf 'abi <abi/4.0>,\\ninclude <tunables/global>\\nprofile capsule-local {attach} flags=(unconfined) \
         {{\\n  userns,\\n}}\\n' | sudo tee {file} >/dev/null && sudo apparmor_parser -r {file}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UBUNTU_LIST: &str = "unprivileged_userns (enforce)\nbwrap (unconfined)\n/usr/bin/man (enforce)\n";

    fn state(profiles: Option<Result<&str, &str>>, label: &str, installed: bool, exe: &str) -> AppArmor {
        AppArmor {
            profiles: profiles.map(|r| r.map(String::from).map_err(String::from)),
            label: Some(label.into()),
            installed,
            exe: exe.into(),
        }
    }

    #[test]
    fn packaged_profile_not_loaded() {
        let a = state(Some(Ok(UBUNTU_LIST)), "unconfined", true, "/usr/bin/capsule-cli");
        assert_eq!(a.loaded(), Some(false));
        assert!(a.why().contains("apparmor_restrict_unprivileged_userns is 1"), "{}", a.why());
        assert!(a.why().ends_with("/etc/apparmor.d/capsule is installed but not loaded"), "{}", a.why());
        assert_eq!(a.fix(), "sudo apparmor_parser -r /etc/apparmor.d/capsule");
    }

    #[test]
    fn unreadable_list_as_a_user() {
        // Packaged binary, unconfined: the profile is not loaded, whatever the list says.
        let a = state(Some(Err("Permission denied (os error 13)")), "unconfined", true, "/usr/bin/capsule-cli");
        assert_eq!(a.loaded(), None);
        assert!(a.why().contains("is not loaded (this program runs unconfined)"), "{}", a.why());
        assert!(a.why().contains("cannot be read by this user (Permission denied"), "{}", a.why());
        assert_eq!(a.fix(), "sudo apparmor_parser -r /etc/apparmor.d/capsule");
        // Without its label, this program's confinement is not known either.
        let a = AppArmor { label: None, ..a };
        assert!(a.why().contains("installed; whether it is loaded is not known here"), "{}", a.why());
        assert_eq!(a.fix(), "sudo apparmor_parser -r /etc/apparmor.d/capsule");
        // Elsewhere: a profile for this program's directory.
        let a = state(Some(Err("Permission denied (os error 13)")), "unconfined", true, "/opt/capsule/bin/capsule-cli");
        assert!(a.why().contains("installed; whether it is loaded is not known here"), "{}", a.why());
        assert_eq!(a.fix(), local_profile_command(Path::new("/opt/capsule/bin/capsule-cli")).unwrap());
    }

    #[test]
    fn loaded_but_another_path() {
        let list = format!("{UBUNTU_LIST}capsule (unconfined)\ncapsule-cli (unconfined)\n");
        let a = state(Some(Ok(&list)), "unconfined", true, "/home/me/capsule/target/release/capsule-cli");
        assert_eq!(a.loaded(), Some(true));
        assert!(a.why().contains("is loaded but covers capsule and capsule-cli in /usr/bin and /usr/local/bin, not"));
        let fix = a.fix();
        assert!(fix.contains("profile capsule-local /home/me/capsule/target/release/{capsule,capsule-cli} "), "{fix}");
        assert!(fix.contains("flags=(unconfined) {\\n  userns,\\n}") && fix.starts_with("printf 'abi <abi/4.0>,"));
        assert!(fix.ends_with("sudo tee /etc/apparmor.d/capsule-local >/dev/null && sudo apparmor_parser -r /etc/apparmor.d/capsule-local"));
        // The tarball's binaries, installed as the README says: the same profile.
        let a = state(Some(Ok(UBUNTU_LIST)), "unconfined", true, "/usr/local/bin/capsule-cli");
        assert_eq!(a.fix(), "sudo apparmor_parser -r /etc/apparmor.d/capsule");
        // One profile loaded of two is not the packaged profile.
        let a = state(Some(Ok("capsule (unconfined)\n")), "unconfined", false, "/usr/bin/capsule-cli");
        assert_eq!(a.loaded(), Some(false));
        assert!(a.why().ends_with("no capsule profile is loaded and /etc/apparmor.d/capsule is not installed"));
    }

    #[test]
    fn confined_and_still_denied() {
        let a = state(None, "capsule-cli (unconfined)", true, "/usr/bin/capsule-cli");
        assert_eq!(a.confined_by(), Some("capsule-cli"));
        assert!(a.why().contains("runs under the profile `capsule-cli` and is still denied"));
        assert_eq!(a.fix(), "sudo apparmor_parser -r /etc/apparmor.d/capsule");
        assert!(a.allowed_note().contains("the profile `capsule-cli` allows them"));
        let a = state(None, "unconfined", false, "/usr/bin/capsule-cli");
        assert_eq!(a.confined_by(), None);
    }

    #[test]
    fn paths_a_profile_cannot_name_unquoted() {
        assert!(local_profile_command(Path::new("/home/me/my capsule/capsule-cli")).is_none());
        assert!(local_profile_command(Path::new("/tmp/it's/capsule-cli")).is_none());
        // A library user's program: the profile names it alone.
        let cmd = local_profile_command(Path::new("/srv/judge/bin/judged")).unwrap();
        assert!(cmd.contains("profile capsule-local /srv/judge/bin/judged flags="), "{cmd}");
        let a = state(None, "unconfined", false, "/home/me/my capsule/capsule-cli");
        assert!(a.fix().starts_with("install capsule in /usr/bin"), "{}", a.fix());
    }
}
