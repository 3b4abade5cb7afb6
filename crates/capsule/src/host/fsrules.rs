//! The filesystem rules of a spec (`[filesystem]`, docs/filesystem.md):
//! `allow`, `read_only`, `writable` and `hide` host paths, and the
//! caller's usual secrets hidden by default.
//!
//! [`plan`] is the one normalization step, run by the supervisor when it
//! prepares a run (it knows the caller's home): `~` expanded, paths made
//! lexically clean, a path in two lists refused, the default secrets
//! added, and the rules turned into [`Action`]s on the sandbox's tree,
//! ordered so that the most specific path wins: by depth, parents first,
//! after the base view and the spec's mount operations. `mounts` turns the
//! actions into mount operations (and checks, in the supervisor, which of
//! the paths exist).
//!
//! In the host view:
//! - `hide` covers the path (an empty read-only directory or file); a
//!   hide beneath another one is dropped (nothing is there to cover);
//! - `allow` beneath a hidden path shows it again: the path is cloned,
//!   as the tree shows it, before its hidden parent is covered, and
//!   attached at the same place inside the cover (whose mount points are
//!   made before it is made read-only); elsewhere it changes nothing;
//! - `read_only` clones the path as the tree shows it, read-only
//!   (recursively), over itself, or inside a hidden parent like `allow`;
//! - `writable` binds the host path read-write.
//!
//! With `empty_root` the rules make host paths visible at the same path:
//! `allow` and `read_only` bind them read-only (a missing one is
//! skipped), `writable` read-write, `hide` covers.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::userdb::{self, Db};
use crate::error::SpecError;
use crate::proto::spec::Filesystem;

/// What `hide_secrets` (on by default) hides in the caller's home: keys,
/// credentials and tokens of common tools, browser profiles, keyrings and
/// password stores. A path that does not exist costs one `stat`.
pub const SECRETS: &[&str] = &[
    // Keys and cloud credentials.
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.boto",
    "~/.kube",
    "~/.minikube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.authinfo",
    "~/.authinfo.gpg",
    "~/.pki",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.terraformrc",
    "~/.vault-token",
    "~/.config/rclone",
    "~/.s3cfg",
    "~/.passwd-s3fs",
    "~/.config/doctl",
    "~/.oci",
    "~/.config/hcloud",
    "~/.config/openstack",
    "~/.databrickscfg",
    "~/.config/sops",
    "~/.config/ngrok",
    "~/.ngrok2",
    // Database passwords.
    "~/.pgpass",
    "~/.my.cnf",
    "~/.mylogin.cnf",
    "~/.dbt/profiles.yml",
    // Mail passwords.
    "~/.msmtprc",
    "~/.fetchmailrc",
    // Tokens of developer tools and package registries.
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh/hosts.yml",
    "~/.config/hub",
    "~/.config/glab-cli",
    "~/.npmrc",
    "~/.yarnrc.yml",
    "~/.pypirc",
    "~/.config/pip/pip.conf",
    "~/.pip/pip.conf",
    "~/.config/pypoetry/auth.toml",
    "~/.gem/credentials",
    "~/.bundle/config",
    "~/.cargo/credentials.toml",
    "~/.cargo/credentials",
    "~/.m2/settings.xml",
    "~/.m2/settings-security.xml",
    "~/.gradle/gradle.properties",
    "~/.ivy2/.credentials",
    "~/.sbt/.credentials",
    "~/.config/composer/auth.json",
    "~/.composer/auth.json",
    "~/.nuget/NuGet/NuGet.Config",
    "~/.config/containers/auth.json",
    // Shell and REPL histories (typed passwords, tokens on command lines).
    "~/.bash_history",
    "~/.zsh_history",
    "~/.zhistory",
    "~/.histfile",
    "~/.sh_history",
    "~/.local/share/fish/fish_history",
    "~/.local/share/atuin",
    "~/.python_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.rediscli_history",
    "~/.dbshell",
    "~/.node_repl_history",
    "~/.irb_history",
    "~/.lesshst",
    "~/.viminfo",
    // Browser and mail profiles (cookies, saved passwords), and chat
    // clients' sessions.
    "~/.mozilla",
    "~/.thunderbird",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.config/microsoft-edge",
    "~/.config/vivaldi",
    "~/.config/opera",
    "~/snap/firefox",
    "~/snap/chromium",
    "~/.var/app/org.mozilla.firefox",
    "~/.var/app/com.google.Chrome",
    "~/.var/app/org.chromium.Chromium",
    "~/.config/Slack",
    "~/.config/discord",
    "~/.config/Signal",
    "~/.local/share/TelegramDesktop",
    // Keyrings and password managers.
    "~/.local/share/keyrings",
    "~/.local/share/kwalletd",
    "~/.password-store",
    "~/.config/op",
    "~/.config/Bitwarden",
];

/// A rule's kind: the list it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Allow,
    ReadOnly,
    Writable,
    Hide,
    Guard,
}

impl Kind {
    /// The list's field name.
    pub fn field(self) -> &'static str {
        match self {
            Kind::Allow => "allow",
            Kind::ReadOnly => "read_only",
            Kind::Writable => "writable",
            Kind::Hide => "hide",
            Kind::Guard => "guard",
        }
    }

    fn of(list: &str) -> Kind {
        match list {
            "allow" => Kind::Allow,
            "read_only" => Kind::ReadOnly,
            "writable" => Kind::Writable,
            "guard" => Kind::Guard,
            _ => Kind::Hide,
        }
    }
}

/// One step on the sandbox's tree, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Cover `path` with an empty directory or file. `holes`: rules
    /// beneath it make mount points in the cover, which is made read-only
    /// only once every rule is applied.
    Hide { path: PathBuf, holes: bool },
    /// Clone `path` as the tree shows it now (recursively) into `slot`,
    /// for a later [`Action::Reveal`]; nothing when it is missing.
    Save { path: PathBuf, slot: usize },
    /// Attach the clone in `slot` at `path` (read-only, recursively, with
    /// `read_only`), making the mount point inside a cover when needed.
    Reveal { path: PathBuf, slot: usize, read_only: bool },
    /// Bind the host's `path` read-write (it must exist).
    Writable { path: PathBuf },
    /// `empty_root`: bind the host's `path` read-only (skipped when missing).
    HostReadOnly { path: PathBuf },
    /// `guard`, after its read-only `Reveal`: when the clone in `slot` was
    /// missing, an empty read-only file stands in at `path`.
    StandIn { path: PathBuf, slot: usize },
}

/// The caller's homes, found once by the supervisor (as the caller, where
/// NSS works).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Homes {
    /// What `~` means: `$HOME` when it is an absolute path without `..`
    /// (as the client saw it: the supervisor inherits the client's
    /// environment), else the home of the caller's user database entry.
    pub home: Option<PathBuf>,
    /// That entry's home when `$HOME` names another directory (CI, `sudo
    /// -H`): the default secrets are hidden under both.
    pub passwd: Option<PathBuf>,
}

impl Homes {
    /// `home` alone.
    pub fn at(home: &Path) -> Homes {
        Homes { home: Some(home.to_path_buf()), passwd: None }
    }

    /// Where the default secrets are hidden.
    pub fn secret_homes(&self) -> impl Iterator<Item = &Path> {
        self.home.iter().chain(&self.passwd).map(PathBuf::as_path)
    }
}

/// The homes of the caller, `uid`: `$HOME` and its user database entry's
/// ([`super::userdb`]), the second only when it is another directory.
pub fn caller_homes(uid: u32) -> Homes {
    let env = std::env::var_os("HOME").map(PathBuf::from).filter(|h| usable_home(h));
    let passwd = userdb::lookup(Db::Passwd, uid, passwd_home);
    match (env, passwd) {
        (Some(env), Some(pw)) if !same_dir(&env, &pw) => Homes { home: Some(env), passwd: Some(pw) },
        (Some(env), _) => Homes::at(&env),
        (None, pw) => Homes { home: pw, passwd: None },
    }
}

/// Whether two paths are one directory (the same words, or the same
/// object through a link).
fn same_dir(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    a == b
        || matches!((std::fs::metadata(a), std::fs::metadata(b)),
            (Ok(x), Ok(y)) if (x.dev(), x.ino()) == (y.dev(), y.ino()))
}

fn usable_home(p: &Path) -> bool {
    p.is_absolute() && !p.components().any(|c| c == Component::ParentDir) && p.to_str().is_some()
}

/// The home field of a passwd entry (its fields), if it is usable.
fn passwd_home(f: &[&str]) -> Option<PathBuf> {
    let h = PathBuf::from(f.get(5).filter(|_| f.len() >= 7)?);
    usable_home(&h).then_some(h)
}

/// `~` and `~/...` with `home`, then lexically cleaned (no `.`, no
/// repeated or trailing `/`). The path is validated
/// ([`crate::proto::spec::RunSpec::validate`]). Strings: the rules compare and
/// sort paths as bytes, which is cheap (a `Path` compares component by
/// component), and every run of the host view plans the default secrets.
fn expand(field: &str, p: &Path, home: Option<&Path>) -> Result<String, SpecError> {
    let s = p.to_str().ok_or_else(|| SpecError::new(field, "must be valid UTF-8"))?;
    let full = match s.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let home = home.ok_or_else(|| {
                SpecError::new(
                    field,
                    format!(
                        "`{s}`: the caller's home is unknown ($HOME is not an absolute path and /etc/passwd has \
                         no entry for the caller); set HOME, or write the path out"
                    ),
                )
            })?;
            home.join(rest.trim_start_matches('/'))
        }
        Some(_) => {
            return Err(SpecError::new(field, format!("`{s}`: only `~` (your own home) is supported, not `~user`")))
        }
        None => p.to_path_buf(),
    };
    let mut out = String::with_capacity(s.len() + 16);
    for c in full.components() {
        match c {
            Component::Normal(n) => {
                out.push('/');
                out.push_str(n.to_str().ok_or_else(|| SpecError::new(field, "must be valid UTF-8"))?);
            }
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(SpecError::new(field, format!("`{s}` must not contain `..`")))
            }
        }
    }
    if out.is_empty() {
        return Err(SpecError::new(field, format!("`{s}` is `/` itself, which a rule cannot cover or bind")));
    }
    Ok(out)
}

/// A rule's path as the plan uses it (`~` expanded, clean), None when it
/// is not a valid rule path.
pub fn rule_path(p: &Path, home: Option<&Path>) -> Option<String> {
    expand("", p, home).ok()
}

/// Whether the clean path `p` is `dir` or beneath it.
fn beneath(p: &str, dir: &str) -> bool {
    p.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// One rule after expansion.
#[derive(Debug)]
struct Rule {
    path: String,
    kind: Kind,
    depth: usize,
}

/// Normalizes the rules (see the module's documentation) into the ordered
/// actions; `homes.home` expands `~`, and the default secrets are hidden
/// under each of `homes` (none when both are unknown). Errors name the
/// field.
pub(crate) fn plan(fs: &Filesystem, homes: &Homes, empty_root: bool) -> Result<Rc<[Action]>, SpecError> {
    // The rules are a pure function of these, and a supervisor plans the
    // same ones for run after run: the last result is kept (per thread) and shared.
    thread_local! {
        static LAST: std::cell::RefCell<Option<Planned>> = const { std::cell::RefCell::new(None) };
    }
    let hit = LAST.with_borrow(|last| {
        let (f, h, e, actions) = last.as_ref()?;
        (f == fs && h == homes && *e == empty_root).then(|| Rc::clone(actions))
    });
    if let Some(actions) = hit {
        return Ok(actions);
    }
    let actions: Rc<[Action]> = plan_anew(fs, homes, empty_root)?.into();
    LAST.with_borrow_mut(|last| *last = Some((fs.clone(), homes.clone(), empty_root, Rc::clone(&actions))));
    Ok(actions)
}

/// A plan's inputs and its actions.
type Planned = (Filesystem, Homes, bool, Rc<[Action]>);

fn plan_anew(fs: &Filesystem, homes: &Homes, empty_root: bool) -> Result<Vec<Action>, SpecError> {
    let home = homes.home.as_deref();
    // path -> (kind, where it was given, as written)
    let mut given: HashMap<String, (Kind, String, String)> = HashMap::new();
    for (list, paths) in fs.lists() {
        for (i, p) in paths.iter().enumerate() {
            let field = format!("filesystem.{list}[{i}]");
            let path = expand(&field, p, home)?;
            let kind = Kind::of(list);
            match given.get(&path) {
                Some((k, _, _)) if *k == kind => {}
                Some((k, other, written)) => {
                    return Err(SpecError::new(
                        field,
                        format!(
                            "`{path}` is also in `{}` (as {other}: `{written}`); a path takes one rule: \
                             remove it from one of the lists",
                            k.field()
                        ),
                    ))
                }
                None => {
                    given.insert(path, (kind, field, p.display().to_string()));
                }
            }
        }
    }
    let rule = |path: String, kind: Kind| Rule { depth: path.matches('/').count(), path, kind };
    let mut rules: Vec<Rule> = given.into_iter().map(|(path, (kind, _, _))| rule(path, kind)).collect();
    let mut nested_homes = false;
    if fs.hide_secrets {
        let explicit = rules.len();
        let mut done: Vec<String> = Vec::new();
        for home in homes.secret_homes() {
            let home = expand("filesystem.hide_secrets", Path::new("~"), Some(home))?;
            if done.contains(&home) {
                continue;
            }
            nested_homes |= done.iter().any(|d| beneath(&home, d) || beneath(d, &home));
            for s in SECRETS {
                let path = format!("{home}/{}", &s[2..]);
                if rules[..explicit].iter().any(|r| r.path == path) {
                    continue; // the caller's own rule for it wins
                }
                // With an empty root only what a rule shows of the host is
                // there to hide.
                let shown = |r: &Rule| r.kind != Kind::Hide && beneath(&path, &r.path);
                if empty_root && !rules[..explicit].iter().any(shown) {
                    continue;
                }
                rules.push(rule(path, Kind::Hide));
            }
            done.push(home);
        }
    }
    // Parents first; the most specific path is applied last.
    rules.sort_unstable_by(|a, b| a.depth.cmp(&b.depth).then_with(|| a.path.cmp(&b.path)));
    // The nearest rule on a strict parent of each rule (indices are
    // shallower, hence earlier).
    // (Only the default secrets, the common case: none is beneath another,
    // unless one home is beneath the other.)
    let alone = fs.lists().iter().all(|(_, l)| l.is_empty()) && !nested_homes;
    let index: HashMap<&str, usize> =
        if alone { HashMap::new() } else { rules.iter().enumerate().map(|(i, r)| (r.path.as_str(), i)).collect() };
    let parent: Vec<Option<usize>> = rules
        .iter()
        .map(|r| {
            if alone {
                return None;
            }
            let mut p = r.path.as_str();
            while let Some(cut) = p.rfind('/').filter(|&c| c > 0) {
                p = &p[..cut];
                if let Some(&i) = index.get(p) {
                    return Some(i);
                }
            }
            None
        })
        .collect();
    let under_hide = |i: usize| parent[i].is_some_and(|p| rules[p].kind == Kind::Hide);
    let mut actions = Vec::new();
    let mut slot_of: HashMap<usize, usize> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        let path = PathBuf::from(&r.path);
        match r.kind {
            Kind::Hide if under_hide(i) => {} // already invisible
            Kind::Hide => {
                let children: Vec<usize> =
                    if alone { Vec::new() } else { (i + 1..rules.len()).filter(|&c| parent[c] == Some(i)).collect() };
                let holes = children.iter().any(|&c| rules[c].kind != Kind::Hide);
                if !empty_root {
                    // What `allow` and `read_only` beneath show again is
                    // taken before the cover hides it.
                    for &c in &children {
                        if matches!(rules[c].kind, Kind::Allow | Kind::ReadOnly | Kind::Guard) {
                            let slot = slot_of.len();
                            slot_of.insert(c, slot);
                            actions.push(Action::Save { path: PathBuf::from(&rules[c].path), slot });
                        }
                    }
                }
                actions.push(Action::Hide { path, holes });
            }
            Kind::Allow | Kind::ReadOnly | Kind::Guard if empty_root => actions.push(Action::HostReadOnly { path }),
            Kind::Allow | Kind::ReadOnly | Kind::Guard if under_hide(i) => {
                let slot = slot_of[&i];
                actions.push(Action::Reveal { path: path.clone(), slot, read_only: r.kind != Kind::Allow });
                if r.kind == Kind::Guard {
                    actions.push(Action::StandIn { path, slot });
                }
            }
            Kind::Allow => {} // visible already
            Kind::ReadOnly | Kind::Guard => {
                let slot = slot_of.len();
                slot_of.insert(i, slot);
                actions.push(Action::Save { path: path.clone(), slot });
                actions.push(Action::Reveal { path: path.clone(), slot, read_only: true });
                if r.kind == Kind::Guard {
                    actions.push(Action::StandIn { path, slot });
                }
            }
            Kind::Writable => actions.push(Action::Writable { path }),
        }
    }
    Ok(actions)
}

/// How many clones [`plan`]'s actions keep at once (slots are numbered
/// from 0).
pub(crate) fn slots(actions: &[Action]) -> usize {
    actions.iter().filter(|a| matches!(a, Action::Save { .. })).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    /// [`super::plan`], its shared actions as a vector to compare.
    fn plan(fs: &Filesystem, homes: &Homes, empty_root: bool) -> Result<Vec<Action>, SpecError> {
        super::plan(fs, homes, empty_root).map(|a| a.to_vec())
    }

    fn fs(allow: &[&str], read_only: &[&str], writable: &[&str], hide: &[&str]) -> Filesystem {
        let v = |l: &[&str]| l.iter().map(PathBuf::from).collect();
        Filesystem {
            allow: v(allow),
            read_only: v(read_only),
            writable: v(writable),
            hide: v(hide),
            guard: Vec::new(),
            hide_secrets: false,
        }
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn home() -> &'static Homes {
        static H: std::sync::LazyLock<Homes> = std::sync::LazyLock::new(|| Homes::at(Path::new("/home/u")));
        &H
    }

    #[test]
    fn expansion() {
        let e = |s: &str| expand("f", Path::new(s), home().home.as_deref());
        assert_eq!(e("~").unwrap(), "/home/u");
        assert_eq!(e("~/").unwrap(), "/home/u");
        assert_eq!(e("~/.ssh/").unwrap(), "/home/u/.ssh");
        assert_eq!(e("~//a/./b").unwrap(), "/home/u/a/b");
        assert_eq!(e("/x//y/.").unwrap(), "/x/y");
        assert_eq!(expand("f", Path::new("~/x"), Some(Path::new("/h//me/"))).unwrap(), "/h/me/x");
        let err = e("~bob/x").unwrap_err();
        assert!(err.message.contains("~user"), "{err}");
        let err = expand("filesystem.hide[0]", Path::new("~/x"), None).unwrap_err();
        assert_eq!(err.field, "filesystem.hide[0]");
        assert!(err.message.contains("HOME"), "{err}");
        // A home of `/` makes `~` the root, which no rule may name.
        let err = expand("f", Path::new("~"), Some(Path::new("/"))).unwrap_err();
        assert!(err.message.contains("`/` itself"), "{err}");
        // Absolute paths need no home.
        assert_eq!(expand("f", Path::new("/a"), None).unwrap(), "/a");
    }

    #[test]
    fn passwd_lookup() {
        let f = |l: &'static str| l.split(':').collect::<Vec<_>>();
        assert_eq!(passwd_home(&f("me:x:1000:1000::/home/me:/bin/sh")), Some(p("/home/me")));
        assert_eq!(passwd_home(&f("rel:x:7:7::home:/bin/sh")), None, "a relative home is not usable");
        assert_eq!(passwd_home(&f("short:x:7:7::/home/s")), None, "a line of six fields is not an entry");
        assert_eq!(userdb::lookup(Db::Passwd, 0, passwd_home), Some(p("/root")));
        assert_eq!(userdb::lookup(Db::Passwd, 0x7fff_fff0, passwd_home), None);
    }

    #[test]
    fn conflicts_name_both_lists() {
        let err = plan(&fs(&["~/a"], &[], &[], &["/home/u/a/"]), home(), false).unwrap_err();
        assert_eq!(err.field, "filesystem.hide[0]");
        assert!(err.message.contains("`/home/u/a` is also in `allow`"), "{err}");
        assert!(err.message.contains("filesystem.allow[0]: `~/a`"), "{err}");
        // The same path twice in one list is fine.
        let a = plan(&fs(&[], &[], &[], &["/x", "/x/"]), home(), false).unwrap();
        assert_eq!(a, vec![Hide { path: p("/x"), holes: false }]);
    }

    #[test]
    fn most_specific_wins_parents_first() {
        let a =
            plan(&fs(&["~/proj"], &["~/proj/.git"], &["~/proj/out"], &["~", "~/proj/out/x"]), home(), false).unwrap();
        assert_eq!(
            a,
            vec![
                // The allowed child is taken before its parent is covered ...
                Save { path: p("/home/u/proj"), slot: 0 },
                Hide { path: p("/home/u"), holes: true },
                // ... and attached inside the cover.
                Reveal { path: p("/home/u/proj"), slot: 0, read_only: false },
                Save { path: p("/home/u/proj/.git"), slot: 1 },
                Reveal { path: p("/home/u/proj/.git"), slot: 1, read_only: true },
                Writable { path: p("/home/u/proj/out") },
                Hide { path: p("/home/u/proj/out/x"), holes: false },
            ]
        );
    }

    #[test]
    fn read_only_beneath_writable_and_hidden() {
        let a = plan(&fs(&[], &["/w/ro", "/h/ro"], &["/w"], &["/h"]), home(), false).unwrap();
        assert_eq!(
            a,
            vec![
                Save { path: p("/h/ro"), slot: 0 },
                Hide { path: p("/h"), holes: true },
                Writable { path: p("/w") },
                Reveal { path: p("/h/ro"), slot: 0, read_only: true },
                Save { path: p("/w/ro"), slot: 1 },
                Reveal { path: p("/w/ro"), slot: 1, read_only: true },
            ]
        );
        assert_eq!(slots(&a), 2);
    }

    #[test]
    fn guard_is_read_only_with_a_stand_in() {
        let mut f = fs(&["/h/proj"], &[], &[], &["/h"]);
        f.guard = vec![p("/h/proj/.mcp.json"), p("/w/.vscode")];
        let a = plan(&f, home(), false).unwrap();
        assert_eq!(
            a,
            vec![
                Save { path: p("/h/proj"), slot: 0 },
                Hide { path: p("/h"), holes: true },
                Reveal { path: p("/h/proj"), slot: 0, read_only: false },
                Save { path: p("/w/.vscode"), slot: 1 },
                Reveal { path: p("/w/.vscode"), slot: 1, read_only: true },
                StandIn { path: p("/w/.vscode"), slot: 1 },
                Save { path: p("/h/proj/.mcp.json"), slot: 2 },
                Reveal { path: p("/h/proj/.mcp.json"), slot: 2, read_only: true },
                StandIn { path: p("/h/proj/.mcp.json"), slot: 2 },
            ]
        );
        // A path takes one rule.
        f.read_only = vec![p("/w/.vscode")];
        assert!(plan(&f, home(), false).unwrap_err().message.contains("also in `read_only`"));
    }

    #[test]
    fn redundant_rules_are_dropped() {
        // A hide under a hide, an allow with nothing hidden above it.
        let a = plan(&fs(&["/a/b", "/c"], &[], &[], &["/a", "/a/x/y"]), home(), false).unwrap();
        assert_eq!(
            a,
            vec![
                Save { path: p("/a/b"), slot: 0 },
                Hide { path: p("/a"), holes: true },
                Reveal { path: p("/a/b"), slot: 0, read_only: false },
            ]
        );
        // A hide beneath an allowed path inside a hidden one still applies.
        let a = plan(&fs(&["/a/b"], &[], &[], &["/a", "/a/b/c"]), home(), false).unwrap();
        assert_eq!(a.last(), Some(&Hide { path: p("/a/b/c"), holes: false }));
        // A writable path under a hidden one needs a hole, a hide does not.
        let a = plan(&fs(&[], &[], &["/a/w"], &["/a"]), home(), false).unwrap();
        assert_eq!(a, vec![Hide { path: p("/a"), holes: true }, Writable { path: p("/a/w") }]);
    }

    #[test]
    fn no_secret_is_beneath_another() {
        for a in SECRETS {
            assert!(a.starts_with("~/") && !a.ends_with('/') && !a.contains("//") && !a.contains("/./"), "{a}");
            for b in SECRETS {
                assert!(
                    a == b || !beneath(a, b),
                    "{a} is beneath {b}: the plan's shortcut for the defaults alone relies on it"
                );
            }
        }
    }

    #[test]
    fn the_documentation_lists_every_secret() {
        let doc = include_str!("../../../../docs/filesystem.md");
        for s in SECRETS {
            assert!(doc.contains(&format!("`{s}`")), "docs/filesystem.md does not list `{s}`");
        }
    }

    #[test]
    fn secrets_under_both_homes() {
        let mut f = fs(&[], &[], &[], &[]);
        f.hide_secrets = true;
        let hides = |f: &Filesystem, h: &Homes| -> Vec<PathBuf> {
            plan(f, h, false)
                .unwrap()
                .into_iter()
                .map(|a| match a {
                    Hide { path, holes: false } => path,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let two = Homes { home: Some(p("/ci/home")), passwd: Some(p("/home/u")) };
        let a = hides(&f, &two);
        assert_eq!(a.len(), 2 * SECRETS.len());
        for s in ["/ci/home/.ssh", "/home/u/.ssh", "/home/u/.pgpass", "/ci/home/.local/share/fish/fish_history"] {
            assert!(a.contains(&p(s)), "{s}: {a:?}");
        }
        // `~` is $HOME's; a rule for a secret under it leaves the other
        // home's.
        f.allow.push(p("~/.ssh"));
        let a = hides(&f, &two);
        assert!(!a.contains(&p("/ci/home/.ssh")) && a.contains(&p("/home/u/.ssh")));
        f.allow.clear();
        // The same home twice (as written differently) counts once.
        let same = Homes { home: Some(p("/home/u/")), passwd: Some(p("/home//u")) };
        assert_eq!(hides(&f, &same).len(), SECRETS.len());
        // Only the passwd entry's home is known: its secrets.
        assert_eq!(hides(&f, &Homes { home: None, passwd: Some(p("/home/u")) }).len(), SECRETS.len());
        // A home beneath a secret of the other: its secrets are already
        // invisible, and none is covered twice.
        let nested = Homes { home: Some(p("/home/u/.kube/ci")), passwd: Some(p("/home/u")) };
        let a = plan(&f, &nested, false).unwrap();
        assert!(a.contains(&Hide { path: p("/home/u/.kube"), holes: false }));
        assert!(!a.iter().any(|x| matches!(x, Hide { path, .. } if path.starts_with("/home/u/.kube/ci"))), "{a:?}");
        let nested = Homes { home: Some(p("/home/u/ci")), passwd: Some(p("/home/u")) };
        assert_eq!(hides(&f, &nested).len(), 2 * SECRETS.len());
    }

    #[test]
    fn default_secrets() {
        let mut f = fs(&[], &[], &[], &[]);
        f.hide_secrets = true;
        let a = plan(&f, home(), false).unwrap();
        assert_eq!(a.len(), SECRETS.len());
        assert!(a.contains(&Hide { path: p("/home/u/.ssh"), holes: false }));
        assert!(a.contains(&Hide { path: p("/home/u/.docker/config.json"), holes: false }));
        // Parents first.
        let depths: Vec<usize> = a
            .iter()
            .map(|x| match x {
                Hide { path, .. } => path.components().count(),
                _ => 0,
            })
            .collect();
        assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{a:?}");
        // An explicit rule replaces the default one: `allow` shows it again.
        f.allow.push(p("~/.ssh"));
        let a = plan(&f, home(), false).unwrap();
        assert!(!a.iter().any(|x| matches!(x, Hide { path, .. } if path == Path::new("/home/u/.ssh"))), "{a:?}");
        assert_eq!(a.len(), SECRETS.len() - 1);
        // So does `writable` (no conflict with the default).
        f.allow.clear();
        f.writable.push(p("/home/u/.aws"));
        let a = plan(&f, home(), false).unwrap();
        assert!(a.contains(&Writable { path: p("/home/u/.aws") }));
        assert!(!a.contains(&Hide { path: p("/home/u/.aws"), holes: false }));
        // A writable home keeps the secrets hidden, inside it.
        f.writable = vec![p("~")];
        let a = plan(&f, home(), false).unwrap();
        assert_eq!(a[0], Writable { path: p("/home/u") });
        assert!(a.contains(&Hide { path: p("/home/u/.ssh"), holes: false }));
        // Hiding the whole home makes them redundant.
        f.writable.clear();
        f.hide = vec![p("~")];
        assert_eq!(plan(&f, home(), false).unwrap(), vec![Hide { path: p("/home/u"), holes: false }]);
        // Off, and unknown home: none.
        f.hide.clear();
        f.hide_secrets = false;
        assert_eq!(plan(&f, home(), false).unwrap(), vec![]);
        f.hide_secrets = true;
        assert_eq!(plan(&f, &Homes::default(), false).unwrap(), vec![]);
    }

    #[test]
    fn empty_root() {
        let mut f = fs(&["/usr"], &["/etc/ssl"], &["/work"], &["/usr/share/doc"]);
        f.hide_secrets = true;
        let a = plan(&f, home(), true).unwrap();
        assert_eq!(
            a,
            vec![
                HostReadOnly { path: p("/usr") },
                Writable { path: p("/work") },
                HostReadOnly { path: p("/etc/ssl") },
                Hide { path: p("/usr/share/doc"), holes: false },
            ],
            "no secret is hidden where no rule shows the home"
        );
        f.allow.push(p("~"));
        let a = plan(&f, home(), true).unwrap();
        let at = |x: &Action| a.iter().position(|y| y == x).unwrap_or_else(|| panic!("{x:?} not in {a:?}"));
        assert!(at(&HostReadOnly { path: p("/home/u") }) < at(&Hide { path: p("/home/u/.ssh"), holes: false }));
        // A host path shown inside a hidden one needs a hole.
        let a = plan(&fs(&["/a/b"], &[], &[], &["/a"]), home(), true).unwrap();
        assert_eq!(a, vec![Hide { path: p("/a"), holes: true }, HostReadOnly { path: p("/a/b") }]);
    }

    /// The kept plan is used only for the same inputs: another filesystem,
    /// other homes or an empty root plan anew.
    #[test]
    fn the_last_plan_is_kept_only_for_the_same_inputs() {
        let homes = Homes { home: Some("/home/u".into()), passwd: None };
        let fs = Filesystem::default();
        let first = plan(&fs, &homes, false).unwrap();
        assert_eq!(plan(&fs, &homes, false).unwrap(), first);
        assert_eq!(first, plan_anew(&fs, &homes, false).unwrap());
        let other = Homes { home: Some("/home/v".into()), passwd: None };
        assert_eq!(plan(&fs, &other, false).unwrap(), plan_anew(&fs, &other, false).unwrap());
        assert_ne!(plan(&fs, &other, false).unwrap(), first);
        let mut shown = Filesystem::default();
        shown.read_only.push("/home/u/.ssh".into());
        assert_eq!(plan(&shown, &homes, false).unwrap(), plan_anew(&shown, &homes, false).unwrap());
        assert_ne!(plan(&shown, &homes, false).unwrap(), first);
        assert_eq!(plan(&fs, &homes, true).unwrap(), plan_anew(&fs, &homes, true).unwrap());
        assert_eq!(plan(&fs, &homes, false).unwrap(), first);
    }
}
