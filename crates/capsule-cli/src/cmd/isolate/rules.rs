//! isolate's directory and environment rules, mapped onto the run spec's
//! mount operations and environment; and the stdio files a run names,
//! opened the way the sandbox would see them.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use capsule::error::strerror;
use capsule::spec::MountOp;

/// A rule's options (`:rw:noexec...`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub rw: bool,
    pub dev: bool,
    pub noexec: bool,
    pub maybe: bool,
    pub fs: bool,
    pub tmp: bool,
    pub norec: bool,
}

/// One `-d` rule: `inside` is relative to the sandbox's root (no leading
/// `/`); `outside` None removes the rule for `inside`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRule {
    pub inside: String,
    pub outside: Option<String>,
    pub flags: Flags,
}

/// isolate's default rules, in its order.
const DEFAULTS: [&str; 9] = [
    "box=./box:rw",
    "bin",
    "dev:dev:norec",
    "dev/shm=tmpfs:fs:rw",
    "lib",
    "lib64:maybe",
    "proc=proc:fs",
    "tmp:tmp",
    "usr",
];

impl DirRule {
    /// Parses `IN=OUT:OPTS`, `DIR:OPTS` or `IN=` with isolate's checks and messages.
    pub fn parse(arg: &str) -> Result<DirRule, String> {
        let mut parts = arg.split(':');
        let head = parts.next().unwrap_or("");
        let mut flags = Flags::default();
        for opt in parts {
            match opt {
                "rw" => flags.rw = true,
                "dev" => flags.dev = true,
                "noexec" => flags.noexec = true,
                "maybe" => flags.maybe = true,
                "fs" => flags.fs = true,
                "tmp" => flags.tmp = true,
                "norec" => flags.norec = true,
                other => return Err(format!("Unknown option '{other}'")),
            }
        }
        let (inside, eq) = match head.split_once('=') {
            Some((i, o)) => (i, Some(o)),
            None => (head, None),
        };
        let inside = sanitize(inside).ok_or("Invalid path")?;
        if flags.fs && flags.tmp {
            return Err("Flags 'fs' and 'tmp' are mutually exclusive".into());
        }
        let outside = if flags.fs {
            let fs = eq.ok_or("Missing filesystem name")?;
            if !["proc", "sysfs", "tmpfs", "devpts"].contains(&fs) {
                return Err("This filesystem is not supported".into());
            }
            if fs == "devpts" {
                return Err(
                    "This filesystem is not supported by capsule isolate (its runs have no pseudo-terminals)".into()
                );
            }
            Some(fs.to_string())
        } else if flags.tmp {
            if eq.is_some() {
                return Err("Temporary directory mounts do not have a right-hand side".into());
            }
            flags.rw = true;
            // A flat name under the box directory, as isolate makes it.
            Some(format!("./tmp/{}", inside.replace('/', ":")))
        } else {
            match eq {
                Some("") => None,
                Some(o) if !o.starts_with('/') && !o.starts_with("./") => {
                    return Err("Right-hand side must start with '/' or './'".into())
                }
                Some(o) => Some(o.to_string()),
                None => Some(format!("/{inside}")),
            }
        };
        let default_dev = inside == "dev" && outside.as_deref() == Some("/dev");
        if flags.dev && !flags.rw && !flags.fs && !default_dev {
            return Err("Option 'dev' without 'rw' is not supported by capsule isolate (its device binds are read-write): add 'rw' or drop 'dev'".into());
        }
        Ok(DirRule { inside: inside.to_string(), outside, flags })
    }
}

/// isolate's `sanitize_dir_path`: no leading slashes, not empty, no `..`.
fn sanitize(p: &str) -> Option<&str> {
    let p = p.trim_start_matches('/');
    (!p.is_empty() && !p.split('/').any(|c| c == "..")).then_some(p)
}

/// The rules in effect: the defaults (unless `-D`) then the user's, a rule
/// for the same `inside` replacing the earlier one in its place.
pub fn effective(user: &[String], defaults: bool) -> Vec<DirRule> {
    let mut rules: Vec<(DirRule, bool)> = Vec::new();
    let all = DEFAULTS.iter().map(|d| (d.to_string(), true)).chain(user.iter().map(|u| (u.clone(), false)));
    for (arg, default) in all {
        let r = DirRule::parse(&arg).expect("checked when the option was parsed");
        match rules.iter_mut().find(|(x, _)| x.inside == r.inside) {
            Some(slot) => *slot = (r, default),
            None => rules.push((r, default)),
        }
    }
    rules.into_iter().filter(|(r, d)| r.outside.is_some() && (defaults || !d)).map(|(r, _)| r).collect()
}

/// Where a rule's outside directory is on the host: `./x` is in the box
/// directory.
pub fn host_dir(outside: &str, box_dir: &Path) -> PathBuf {
    match outside.strip_prefix("./") {
        Some(rel) => box_dir.join(rel),
        None => PathBuf::from(outside),
    }
}

/// The mount operations for the rules, in order; `tmp` directories are
/// made in the box directory first. `say` gets isolate's verbose lines.
pub fn mounts(rules: &[DirRule], box_dir: &Path, say: &mut dyn FnMut(String)) -> Result<Vec<MountOp>, String> {
    let mut ops = Vec::new();
    for r in rules {
        let outside = r.outside.as_deref().expect("effective rules bind something");
        let dst = PathBuf::from(format!("/{}", r.inside));
        if r.flags.fs {
            say(format!("Mounting {outside} on {}", r.inside));
            ops.push(match outside {
                "proc" => MountOp::Proc { dst },
                "tmpfs" => MountOp::Tmpfs { dst, size: None, noexec: r.flags.noexec },
                // No sysfs of its own in a user namespace: the host's, read-only.
                _ => MountOp::RoBind { src: "/sys".into(), dst, try_: false, noexec: true },
            });
            continue;
        }
        let src = host_dir(outside, box_dir);
        if r.flags.tmp {
            make_tmp(box_dir, outside)?;
        }
        if r.flags.maybe && !src.is_dir() {
            say(format!("Not binding {outside} on {} (does not exist)", r.inside));
            continue;
        }
        say(format!("Binding {outside} on {}{}", r.inside, if r.flags.rw { " (read-write)" } else { "" }));
        let noexec = r.flags.noexec;
        ops.push(if r.flags.dev && !r.flags.rw {
            // The default /dev rule: capsule's minimal /dev.
            MountOp::Dev { dst }
        } else if r.flags.dev {
            MountOp::DevBind { src, dst, try_: false, noexec }
        } else if r.flags.rw {
            MountOp::Bind { src, dst, try_: false, noexec }
        } else {
            MountOp::RoBind { src, dst, try_: false, noexec }
        });
    }
    // The caller's secrets, hidden wherever a bind shows them (after every bind, so none uncovers one).
    let secrets = secrets();
    let mut hides = Vec::new();
    for op in &ops {
        let (MountOp::Bind { src, dst, .. } | MountOp::RoBind { src, dst, .. } | MountOp::DevBind { src, dst, .. }) =
            op
        else {
            continue;
        };
        let Ok(src) = std::fs::canonicalize(src) else { continue };
        for secret in &secrets {
            if let Some(rel) = shown(&src, secret) {
                let path = dst.join(rel);
                say(format!("Hiding {} ({}, a secret of the caller's)", path.display(), secret.display()));
                hides.push(MountOp::Hide { path });
            }
        }
    }
    ops.extend(hides);
    Ok(ops)
}

/// The caller's usual secrets (`capsule::host::fsrules::SECRETS` in each of
/// its homes, docs/filesystem.md) that exist, as canonical paths: a rule
/// that binds a directory holding one, however its path is written
/// (`//`, `.`, `..`, a trailing `/`, a link on the way), does not show it.
fn secrets() -> Vec<PathBuf> {
    use capsule::host::fsrules::{caller_homes, SECRETS};
    let homes = caller_homes(capsule::sys::geteuid());
    let mut out = Vec::new();
    for home in homes.home.iter().chain(&homes.passwd) {
        for s in SECRETS {
            let p = home.join(&s[2..]);
            // One lstat for a secret that is not there (most of them).
            if std::fs::symlink_metadata(&p).is_err() {
                continue;
            }
            if let Ok(real) = std::fs::canonicalize(&p) {
                if !out.contains(&real) {
                    out.push(real);
                }
            }
        }
    }
    out
}

/// Where a bind of the canonical `src` shows `secret`, relative to the
/// bind's place; None when it does not, or when the rule names the secret
/// (or a path in it) itself, which shows it as asked.
fn shown(src: &Path, secret: &Path) -> Option<PathBuf> {
    let rel = secret.strip_prefix(src).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

/// Refuses a stdio file `fd` (an `O_PATH` descriptor of it, or of the
/// directory it would be made in) in one of the caller's secrets that the
/// rule's directory `dir` does not name itself.
fn check_not_secret(dir: &Path, fd: &OwnedFd) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|e| e.to_string())?;
    let src = std::fs::canonicalize(dir).map_err(|e| e.to_string())?;
    for secret in secrets() {
        if shown(&src, &secret).is_some() && real.starts_with(&secret) {
            return Err(format!(
                "No such file or directory ({} is one of the caller's secrets, hidden from runs: docs/filesystem.md)",
                secret.display()
            ));
        }
    }
    Ok(())
}

/// Opens `rel` (`tmp/x`, `box`...) in the box directory `box_dir`
/// (`ROOT/N`) from the box root, following no link (`O_PATH`).
fn open_in_box(box_dir: &Path, rel: &str) -> Result<OwnedFd, i32> {
    use std::os::fd::AsRawFd;
    let (Some(root), Some(name)) = (box_dir.parent(), box_dir.file_name()) else { return Err(libc::EINVAL) };
    let croot = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
    let rootfd = capsule::sys::open(&croot, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)?;
    let mut path = name.as_encoded_bytes().to_vec();
    if !rel.is_empty() {
        path.push(b'/');
        path.extend_from_slice(rel.as_bytes());
    }
    let cpath = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    capsule::sys::open_in_root_nofollow(rootfd.as_raw_fd(), &cpath, libc::O_PATH | libc::O_DIRECTORY)
}

/// A `tmp` rule's directory in the box directory (mode 0700, as isolate's),
/// `./tmp/NAME`, made from the box root without following a link.
fn make_tmp(box_dir: &Path, outside: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let dir = host_dir(outside, box_dir);
    let fail = |what: &str, e: i32| format!("Cannot {what} {}: {}", dir.display(), strerror(e));
    let name =
        outside.strip_prefix("./tmp/").filter(|n| !n.contains('/')).ok_or_else(|| fail("create", libc::EINVAL))?;
    let cname = std::ffi::CString::new(name).map_err(|_| fail("create", libc::EINVAL))?;
    let boxfd = open_in_box(box_dir, "").map_err(|e| fail("create", e))?;
    match capsule::sys::mkdirat(boxfd.as_raw_fd(), c"tmp", 0o700) {
        Ok(()) | Err(libc::EEXIST) => {}
        Err(e) => return Err(fail("create", e)),
    }
    let tmp = open_in_box(box_dir, "tmp").map_err(|e| fail("create", e))?;
    match capsule::sys::mkdirat(tmp.as_raw_fd(), &cname, 0o700) {
        Ok(()) | Err(libc::EEXIST) => {}
        Err(e) => return Err(fail("create", e)),
    }
    let fd = capsule::sys::openat(tmp.as_raw_fd(), &cname, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
        .map_err(|e| match e {
            libc::ENOTDIR | libc::ELOOP => format!("Cannot create {}: it exists and is not a directory", dir.display()),
            e => fail("create", e),
        })?;
    capsule::sys::chmod_fd(fd.as_raw_fd(), 0o700).map_err(|e| fail("chmod", e))
}

/// The environment: the caller's with `-e`, then `LIBC_FATAL_STDERR_=1`,
/// then the `-E` rules in order (`VAR` inherits, `VAR=VAL` sets, `VAR=`
/// removes).
pub fn environment(full: bool, rules: &[String], caller: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = if full { caller.clone() } else { BTreeMap::new() };
    let all = std::iter::once("LIBC_FATAL_STDERR_=1").chain(rules.iter().map(String::as_str));
    for rule in all {
        match rule.split_once('=') {
            Some((k, "")) => {
                env.remove(k);
            }
            Some((k, v)) => {
                env.insert(k.to_string(), v.to_string());
            }
            None => match caller.get(rule) {
                Some(v) => {
                    env.insert(rule.to_string(), v.clone());
                }
                None => {
                    env.remove(rule);
                }
            },
        }
    }
    env
}

/// Device files of capsule's minimal /dev, opened from the host's.
const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];

/// Opens a stdio file the program would open at `path` (relative to
/// `/box`): through the rule whose inside directory holds it, resolved in
/// that directory as if it were the root (a link the program made cannot
/// lead out of it), read-only rules refusing writes as the sandbox would.
pub fn open_stdio(rules: &[DirRule], box_dir: &Path, path: &str, write: bool) -> Result<OwnedFd, String> {
    let fail = |why: &str| format!("open(\"{path}\"): {why}");
    let inside = if path.starts_with('/') { path.to_string() } else { format!("/box/{path}") };
    let comps: Vec<&str> = inside.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let best = rules
        .iter()
        .filter(|r| {
            let rc: Vec<&str> = r.inside.split('/').collect();
            comps.len() >= rc.len() && comps[..rc.len()] == rc[..]
        })
        .max_by_key(|r| r.inside.split('/').count());
    let Some(rule) = best else { return Err(fail("No such file or directory")) };
    let depth = rule.inside.split('/').count();
    let rest = comps[depth..].join("/");
    let outside = rule.outside.as_deref().unwrap_or("");
    let flags = if write { libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC } else { libc::O_RDONLY };
    if rule.flags.dev && !rule.flags.rw {
        if !DEVICES.contains(&rest.as_str()) {
            return Err(fail("No such file or directory (capsule's /dev has null, zero, full, random, urandom)"));
        }
        let host = std::ffi::CString::new(format!("/dev/{rest}")).expect("no NUL");
        return capsule::sys::open(&host, flags | libc::O_NOFOLLOW, 0).map_err(|e| fail(&strerror(e)));
    }
    if rule.flags.fs {
        return Err(fail(&format!(
            "capsule isolate opens stdio files itself and cannot reach the run's {outside}; use a file under a bound directory"
        )));
    }
    if write && !rule.flags.rw {
        return Err(fail("Read-only file system"));
    }
    let root = match outside.strip_prefix("./") {
        // In the box directory: reached from the box root, through no link.
        Some(rel) => open_in_box(box_dir, rel.trim_end_matches('/')),
        None => {
            let cdir = std::ffi::CString::new(outside).map_err(|_| fail("Invalid argument"))?;
            capsule::sys::open(&cdir, libc::O_PATH | libc::O_DIRECTORY, 0)
        }
    }
    .map_err(|e| fail(&strerror(e)))?;
    let parent = match rest.rsplit_once('/') {
        Some((p, _)) => p.to_string(),
        None => ".".to_string(),
    };
    let rel = std::ffi::CString::new(if rest.is_empty() { ".".to_string() } else { rest })
        .map_err(|_| fail("Invalid argument"))?;
    use std::os::fd::AsRawFd;
    // Not into a secret the rule's directory holds (looked at before a write truncates or creates anything).
    if !outside.starts_with("./") {
        let at = match capsule::sys::open_in_root(root.as_raw_fd(), &rel, libc::O_PATH, 0) {
            Err(libc::ENOENT) if write => {
                let p = std::ffi::CString::new(parent).map_err(|_| fail("Invalid argument"))?;
                capsule::sys::open_in_root(root.as_raw_fd(), &p, libc::O_PATH, 0)
            }
            r => r,
        };
        if let Ok(at) = at {
            check_not_secret(Path::new(outside), &at).map_err(|w| fail(&w))?;
        }
    }
    let fd = capsule::sys::open_in_root(
        root.as_raw_fd(),
        &rel,
        flags | libc::O_NONBLOCK | libc::O_NOCTTY,
        if write { 0o666 } else { 0 },
    )
    .map_err(|e| fail(&strerror(e)))?;
    check_not_fifo(&fd).map_err(|w| fail(&w))?;
    Ok(fd)
}

/// A stdio file that is a FIFO could block capsule itself (the program
/// may have made one in the box): refused; anything else loses O_NONBLOCK.
fn check_not_fifo(fd: &OwnedFd) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() || t.is_socket() {
        return Err("a FIFO or socket, which capsule isolate does not open for a run's stdio".into());
    }
    capsule::sys::set_nonblocking(fd.as_raw_fd(), false).map_err(strerror)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_syntax() {
        let r = DirRule::parse("/box=/srv/x:rw:noexec").unwrap();
        assert_eq!((r.inside.as_str(), r.outside.as_deref()), ("box", Some("/srv/x")));
        assert!(r.flags.rw && r.flags.noexec && !r.flags.dev);
        assert_eq!(DirRule::parse("etc").unwrap().outside.as_deref(), Some("/etc"));
        assert_eq!(DirRule::parse("/x=").unwrap().outside, None);
        assert_eq!(DirRule::parse("a/b:tmp").unwrap().outside.as_deref(), Some("./tmp/a:b"));
        assert_eq!(DirRule::parse("x:bogus").unwrap_err(), "Unknown option 'bogus'");
        assert_eq!(DirRule::parse("/").unwrap_err(), "Invalid path");
        assert_eq!(DirRule::parse("a/../b").unwrap_err(), "Invalid path");
        assert_eq!(DirRule::parse("x=rel").unwrap_err(), "Right-hand side must start with '/' or './'");
        assert_eq!(DirRule::parse("x:fs").unwrap_err(), "Missing filesystem name");
        assert_eq!(DirRule::parse("x=ext4:fs").unwrap_err(), "This filesystem is not supported");
        assert_eq!(DirRule::parse("x=y:tmp").unwrap_err(), "Temporary directory mounts do not have a right-hand side");
        assert_eq!(DirRule::parse("x:fs:tmp").unwrap_err(), "Flags 'fs' and 'tmp' are mutually exclusive");
    }

    #[test]
    fn replacing_and_removing_keeps_order() {
        let r = effective(&["/usr=/opt:rw".into(), "bin=".into(), "/extra".into()], true);
        let names: Vec<&str> = r.iter().map(|r| r.inside.as_str()).collect();
        assert_eq!(names, ["box", "dev", "dev/shm", "lib", "lib64", "proc", "tmp", "usr", "extra"]);
        assert_eq!(r[7].outside.as_deref(), Some("/opt"));
        let r = effective(&["/box=./box:rw".into()], false);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn env_rules() {
        let caller: BTreeMap<String, String> =
            [("A", "1"), ("B", "2")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let e = environment(false, &["A".into(), "C=3".into(), "Z".into()], &caller);
        assert_eq!(e.len(), 3);
        assert_eq!((e["A"].as_str(), e["C"].as_str(), e["LIBC_FATAL_STDERR_"].as_str()), ("1", "3", "1"));
        let e = environment(true, &["B=".into(), "LIBC_FATAL_STDERR_=".into()], &caller);
        assert_eq!(e.keys().collect::<Vec<_>>(), ["A"]);
    }
}
