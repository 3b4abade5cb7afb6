//! What a run was refused, for people and models (docs/explain.md): the
//! result's `violations` (PID 1's observations and the network log, with
//! the rule that refused each and the option that would allow it), and
//! `capsule why`, the same answer for a spec without running anything.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;

use crate::child::{classify, NetLog, Place, FS_CAPACITY, KIND_READ_HIDDEN, KIND_WRITE};
use crate::host::fsrules::{rule_path, Homes, SECRETS};
use crate::layer as quote;
use crate::plan::mounts::{Base, MountPlan, Op};
use crate::proto::result::{self, NetLogEntry, NetworkEntry, RunResult, Status, Via, Violation, ViolationKind};
use crate::proto::spec::{MountOp, RunSpec};
use crate::sys::MOUNT_ATTR_RDONLY;

/// What the view does with one path, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The rule that decides (refuses or allows).
    pub rule: String,
    /// The option that would allow it, when refused.
    pub fix: Option<String>,
    /// What a refused call gets.
    pub errno: Option<&'static str>,
}

/// The deepest directory at or above `p` that exists on the host (what
/// `--writable` can name).
fn existing_dir(p: &Path) -> PathBuf {
    p.ancestors().find(|a| a.is_dir()).unwrap_or(Path::new("/")).to_path_buf()
}

/// What hides a path, which decides the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HiddenBy {
    /// A rule or mount operation of the run's (`--hide`, a preset's).
    Rule,
    /// The default secrets (`hide_secrets`).
    Secret,
    /// capsule itself, for every run: the run's layer directories, the
    /// agents' sockets.
    Capsule,
}

/// Which of the spec's rules or capsule's defaults covered `dst`, and the
/// words for it.
fn hide_source(spec: &RunSpec, homes: &Homes, dst: &str) -> (HiddenBy, String) {
    let home = homes.home.as_deref();
    let q = quote::quote(dst.as_bytes());
    if spec.filesystem.hide.iter().any(|h| rule_path(h, home).as_deref() == Some(dst)) {
        if !spec.filesystem.guard.is_empty() && home.is_some_and(|h| h.as_os_str().as_bytes() == dst.as_bytes()) {
            let why = format!(
                "hidden by the rule hide {q} (--preset agent: your home is hidden but the project, the toolchains \
                 and their caches)"
            );
            return (HiddenBy::Rule, why);
        }
        return (HiddenBy::Rule, format!("hidden by the rule hide {q} (--hide)"));
    }
    if spec.layers.iter().any(|l| l.as_os_str().as_bytes() == dst.as_bytes()) {
        return (HiddenBy::Capsule, format!("{q} is the run's own layer directory, hidden from it"));
    }
    for h in homes.secret_homes() {
        if SECRETS.iter().any(|s| format!("{}/{}", h.display(), &s[2..]) == dst) {
            return (HiddenBy::Secret, format!("{q} is one of the default secrets, hidden (hide_secrets)"));
        }
    }
    if spec.mounts.iter().any(|m| matches!(m, MountOp::Hide { .. }) && m.dst().as_os_str().as_bytes() == dst.as_bytes())
    {
        return (HiddenBy::Rule, format!("hidden by the mount operation hide {q}"));
    }
    (HiddenBy::Capsule, format!("{q} is hidden (capsule's own: the agent's sockets)"))
}

/// Whether `dst` is one of the spec's `guard` paths.
fn guarded(spec: &RunSpec, homes: &Homes, dst: &str) -> bool {
    spec.filesystem.guard.iter().any(|g| rule_path(g, homes.home.as_deref()).as_deref() == Some(dst))
}

/// Says why `path` (clean, absolute in the sandbox) is or is not writable
/// (`write`) or visible in the run `plan` was made for.
pub(crate) fn verdict(spec: &RunSpec, homes: &Homes, plan: &MountPlan, path: &str, write: bool) -> Verdict {
    let (place, op) = classify(&plan.watch_view(), path.as_bytes());
    let q = |p: &str| quote::quote(p.as_bytes());
    let host_dir = || quote::quote_path(&existing_dir(Path::new(path)));
    let allowed = match place {
        Place::Writable => true,
        Place::ReadOnly => !write,
        Place::Hidden => false,
    };
    let op = op.and_then(|i| plan.ops.get(i));
    let dst = op.map(|o| String::from_utf8_lossy(o.dst().to_bytes()).into_owned()).unwrap_or_default();
    let (rule, fix): (String, Option<String>) = match (op, place) {
        (None, _) => match plan.base {
            Base::EmptyRoot { .. } if write => (
                "the empty root (--empty-root) is read-only: only mounts are writable".into(),
                Some(format!("--tmpfs DIR or --bind SRC DST over {}", q(path))),
            ),
            Base::EmptyRoot { .. } => ("the empty root shows what the mounts and rules put there".into(), None),
            Base::Fuse { .. } => ("the --root layer takes every write".into(), None),
            Base::HostView if write => (
                "the host view is read-only".into(),
                Some(format!(
                    "--layer DIR (writes land in DIR, for review: capsule layer diff/commit), or --writable {} \
                     (writes go to the host)",
                    host_dir()
                )),
            ),
            Base::HostView => ("the host view shows it (read-only)".into(), None),
        },
        (Some(Op::Hide { .. }), _) => {
            let (by, rule) = hide_source(spec, homes, &dst);
            let fix = if by == HiddenBy::Capsule {
                "none: capsule keeps it from every run".to_string()
            } else if write {
                format!("--writable {} (writes go to the host)", q(&dst))
            } else if by == HiddenBy::Secret {
                format!("--allow {} (or --no-hide-secrets)", q(&dst))
            } else {
                format!("--allow {}", q(&dst))
            };
            (rule, Some(fix))
        }
        (Some(Op::StandIn { .. } | Op::Reveal { .. }), Place::ReadOnly) if guarded(spec, homes, &dst) => (
            format!(
                "read-only by the rule guard {} (kept from being changed or created, even while missing: \
                 --preset agent protects what your tools run)",
                q(&dst)
            ),
            Some(format!(
                "none from the sandbox: change {} yourself, outside it (or run without --preset agent)",
                q(&dst)
            )),
        ),
        (Some(Op::Reveal { attrs, .. }), Place::ReadOnly) if attrs & MOUNT_ATTR_RDONLY != 0 => (
            format!("read-only by the rule read_only {} (--read-only; a preset's protection)", q(&dst)),
            Some(format!(
                "drop the read_only rule for {} (it is there on purpose: change such a file yourself)",
                q(&dst)
            )),
        ),
        (Some(Op::Bind { attrs, .. }), Place::ReadOnly) if attrs & MOUNT_ATTR_RDONLY != 0 => {
            let mount = spec
                .mounts
                .iter()
                .find(|m| matches!(m, MountOp::RoBind { .. }) && m.dst().as_os_str().as_bytes() == dst.as_bytes());
            match mount {
                Some(MountOp::RoBind { src, .. }) => (
                    format!("mounted read-only by --ro-bind {} {}", quote::quote_path(src), q(&dst)),
                    Some(format!("--bind {} {}", quote::quote_path(src), q(&dst))),
                ),
                _ => (
                    format!("{} is shown read-only (a rule of the empty root, or capsule's own mount)", q(&dst)),
                    Some(format!("--writable {}", q(&dst))),
                ),
            }
        }
        (Some(Op::Dev { .. }), Place::ReadOnly) => (
            format!("{} holds only null, zero, full, random, urandom and shm", q(&dst)),
            Some("--dev-bind SRC DST".into()),
        ),
        (Some(Op::Overlay { .. }), _) => ("the run's layer takes the write, for review".into(), None),
        (Some(_), Place::Writable) => (format!("writable: beneath the mount {}", q(&dst)), None),
        (Some(_), _) => {
            (format!("beneath the read-only mount {}", q(&dst)), Some(format!("--writable {}", host_dir())))
        }
    };
    let errno = match (allowed, place, write) {
        (true, ..) => None,
        (false, _, true) => Some("EROFS"),
        (false, Place::Hidden, false) if path != dst => Some("ENOENT"),
        _ => None, // a hidden file reads as empty
    };
    Verdict { allowed, rule, fix: if allowed { None } else { fix }, errno }
}

/// Whether an address is the loopback network's.
fn loopback(family: &str, addr: &str) -> bool {
    match family {
        "inet" => addr.starts_with("127."),
        "inet6" => addr == "::1" || addr.starts_with("::ffff:127."),
        _ => true,
    }
}

/// The network log's destinations the run's network refuses.
pub fn network_violations(spec: &RunSpec, log: &[NetLogEntry], landlock: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    for e in log {
        let (Some(addr), Some(port)) = (&e.address, e.port) else { continue };
        if e.family != "inet" && e.family != "inet6" {
            continue;
        }
        let v = |errno: &str, rule: String, fix: String| Violation {
            kind: ViolationKind::Network,
            path: None,
            host: Some(addr.clone()),
            port: Some(port),
            syscall: e.syscall.clone(),
            errno: Some(errno.into()),
            rule,
            fix,
            count: e.count,
        };
        if spec.egress.is_some() && !loopback(&e.family, addr) {
            // With egress the way out is the proxy, by name; Landlock refuses a TCP connect elsewhere first.
            let tcp = landlock && e.syscall.ends_with("connect");
            out.push(v(
                if tcp { "EACCES" } else { "ENETUNREACH" },
                "the run's network leads out only through capsule's proxy (HTTP_PROXY, ALL_PROXY)".into(),
                "connect through the proxy, to a host --allow-host names (docs/egress.md)".into(),
            ));
        } else if !spec.share_net && !loopback(&e.family, addr) {
            out.push(v(
                "ENETUNREACH",
                "the run's network is loopback only".into(),
                "--share-net (the host's network; docs/network.md), or --allow-host NAME (by name, through a proxy; docs/egress.md)".into(),
            ));
        } else if let (Some(ports), true) = (&spec.tcp_connect, e.syscall.ends_with("connect")) {
            if !ports.contains(&port) {
                let list: Vec<String> = ports.iter().map(u16::to_string).collect();
                let with: Vec<String> = list.iter().cloned().chain([port.to_string()]).collect();
                out.push(v(
                    "EACCES",
                    format!(
                        "Landlock's tcp_connect allows ports {} (TCP only: a UDP connect is not refused)",
                        if list.is_empty() { "none".into() } else { list.join(",") }
                    ),
                    format!("--tcp-connect {}", with.join(",")),
                ));
            }
        }
    }
    out
}

/// The proxy's refusals (`egress`), as violations: the host asked for, the
/// rule, and the option that would allow it (an explicit deny: none).
pub fn egress_violations(network: &[NetworkEntry]) -> Vec<Violation> {
    let refused = network.iter().filter(|e| e.verdict == result::Verdict::Refused && e.via != Via::Direct);
    refused
        .map(|e| {
            let host = e.host.clone().or_else(|| e.address.clone()).unwrap_or_default();
            let fix = if e.rule.starts_with("deny-host ") {
                format!("none while --{} stands (a deny wins over any allow)", e.rule)
            } else if e.rule.ends_with("allow-local") {
                "--allow-local (loopback, private and metadata addresses; docs/egress.md)".into()
            } else {
                let at = if host.contains(':') { format!("[{host}]") } else { host.clone() };
                format!("--allow-host {at}:{}", e.port)
            };
            Violation {
                kind: ViolationKind::Network,
                path: None,
                host: Some(host),
                port: Some(e.port),
                syscall: format!("proxy ({})", e.via.as_str()),
                errno: None,
                rule: format!("the egress policy: {}", e.rule),
                fix,
                count: e.count,
            }
        })
        .collect()
}

/// A forbidden call, as a violation.
pub fn syscall_violation(spec: &RunSpec, res: &RunResult) -> Option<Violation> {
    if res.status != Status::ForbiddenSyscall {
        return None;
    }
    let name = res.syscall.clone().unwrap_or_else(|| "syscall".into());
    Some(Violation {
        kind: ViolationKind::Syscall,
        path: None,
        host: None,
        port: None,
        rule: format!("the seccomp policy `{}` kills the run at {name}", spec.seccomp),
        fix: format!("--seccomp default, or a policy file with an allow rule for {name} (docs/seccomp.md)"),
        syscall: name,
        errno: None,
        count: 1,
    })
}

/// The run's violations: its forbidden call, the file calls PID 1 saw
/// refused, the network log's refused destinations. And how many refused
/// file calls the table had no room for.
pub(crate) fn violations(
    spec: &RunSpec,
    homes: &Homes,
    plan: Option<&MountPlan>,
    log: Option<&NetLog>,
    res: &RunResult,
    net: &[NetLogEntry],
) -> (Vec<Violation>, u64) {
    let mut out: Vec<Violation> = syscall_violation(spec, res).into_iter().collect();
    let mut dropped = 0;
    if let (true, Some(log), Some(plan)) = (spec.explain, log, plan) {
        let n = (log.fs.len.load(SeqCst) as usize).min(FS_CAPACITY);
        for e in &log.fs.entries[..n] {
            let (kind, nr, bytes, len) = e.load();
            let path = String::from_utf8_lossy(&bytes[..len]).into_owned();
            let write = kind == KIND_WRITE;
            if kind != KIND_WRITE && kind != KIND_READ_HIDDEN {
                continue;
            }
            let v = verdict(spec, homes, plan, &path, write);
            out.push(Violation {
                kind: if write { ViolationKind::FsWrite } else { ViolationKind::FsReadHidden },
                path: Some(path),
                host: None,
                port: None,
                syscall: crate::plan::seccomp::syscall_name(crate::sys::seccomp::AUDIT_ARCH_NATIVE, nr as i32),
                errno: v.errno.map(Into::into),
                rule: v.rule,
                fix: v.fix.unwrap_or_else(|| "none".into()),
                count: e.count.load(SeqCst),
            });
        }
        dropped = log.fs.dropped.load(SeqCst);
    }
    if spec.explain {
        let landlock = res.landlock == Some(crate::proto::result::Enforcement::Full);
        out.extend(network_violations(spec, net, landlock));
        out.extend(egress_violations(res.network.as_deref().unwrap_or_default()));
    }
    (out, dropped)
}

/// One line for people (and models): `fs-write /etc/x (openat, EROFS):
/// the host view is read-only; to allow: --layer DIR ...`; the place
/// quoted (a program chose it).
pub fn line(v: &Violation) -> String {
    let what = match (&v.path, &v.host) {
        (Some(p), _) => quote::quote(p.as_bytes()),
        (None, Some(h)) => match v.port {
            Some(port) if h.contains(':') => format!("[{h}]:{port}"),
            Some(port) => format!("{h}:{port}"),
            None => h.clone(),
        },
        (None, None) => String::new(),
    };
    let call = match &v.errno {
        Some(e) => format!("{}, {e}", v.syscall),
        None => v.syscall.clone(),
    };
    let times = if v.count > 1 { format!(" \u{d7}{}", v.count) } else { String::new() };
    let sep = if what.is_empty() { "" } else { " " };
    format!("{}{sep}{what} ({call}){times}: {}; to allow: {}", v.kind.as_str(), v.rule, v.fix)
}

/// `--explain`'s block on stderr: what the run was refused, a line each,
/// or that nothing was.
pub fn block(res: &RunResult) -> String {
    let list = res.violations.as_deref().unwrap_or(&[]);
    if list.is_empty() {
        return "capsule: explain: nothing was refused\n".into();
    }
    let mut out = format!("capsule: explain: {} refused:\n", list.len());
    for v in list {
        out.push_str("capsule:   ");
        out.push_str(&line(v));
        out.push('\n');
    }
    if let Some(n) = res.violations_dropped.filter(|n| *n > 0) {
        out.push_str(&format!("capsule:   ... and {n} more refused calls the report had no room for\n"));
    }
    out
}

/// What `capsule why` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// May the program write this path (absolute, in the sandbox)?
    Write(PathBuf),
    /// Does it see this path?
    Read(PathBuf),
    /// May it connect to this host (and port)?
    Host(String, Option<u16>),
}

/// `capsule why`: the verdict the run `spec` would get, without running
/// it. Plans the mounts as the supervisor does (sources resolved, in the
/// caller's view); layers are not opened: a path the host view keeps
/// read-only beneath the caller's home, the working directory or /var/tmp
/// is the layer's to write.
pub fn why(spec: &RunSpec, q: &Query) -> Result<Verdict, String> {
    let homes = crate::host::fsrules::caller_homes(crate::sys::geteuid());
    let path_of = |p: &Path| -> Result<String, String> {
        let clean = crate::layer::normalize(p).ok_or_else(|| format!("{}: give an absolute path", p.display()))?;
        Ok(clean.display().to_string())
    };
    match q {
        Query::Host(host, port) => {
            let port = port.unwrap_or(443);
            // With egress, a name goes through the proxy's rules (a local address is decided only when resolved).
            let local_name = host == "localhost" || host.ends_with(".localhost");
            if let (Some(e), false) = (&spec.egress, local_name) {
                let rules = crate::proto::egress::Rules::new(e).map_err(|err| err.to_string())?;
                let shown = crate::proto::egress::normalize_host(host).unwrap_or_else(|| host.clone());
                return Ok(match rules.verdict(&shown, port) {
                    crate::proto::egress::Verdict::Allowed(p) => Verdict {
                        allowed: true,
                        rule: format!(
                            "the egress policy allows it by {p}, through capsule's proxy{}",
                            if e.allow_local { "" } else { " (unless it resolves to a local address: --allow-local)" }
                        ),
                        fix: None,
                        errno: None,
                    },
                    crate::proto::egress::Verdict::Denied(p) => Verdict {
                        allowed: false,
                        rule: format!("the egress policy: deny-host {p}"),
                        fix: Some(format!("none while --deny-host {p} stands (a deny wins over any allow)")),
                        errno: None,
                    },
                    crate::proto::egress::Verdict::NotAllowed => Verdict {
                        allowed: false,
                        rule: "the egress policy: no allow-host".into(),
                        fix: Some(format!("--allow-host {shown}:{port}")),
                        errno: None,
                    },
                });
            }
            let entry = NetLogEntry {
                syscall: "connect".into(),
                family: if host.contains(':') { "inet6".into() } else { "inet".into() },
                address: Some(host.clone()),
                port: Some(port),
                count: 1,
            };
            // A name is never loopback unless it says so.
            let named = host.parse::<std::net::IpAddr>().is_err();
            let local = host == "localhost" || host.ends_with(".localhost");
            let entry = NetLogEntry {
                address: Some(if named && !local {
                    "0.0.0.1".into()
                } else if local {
                    "127.0.0.1".into()
                } else {
                    host.clone()
                }),
                ..entry
            };
            Ok(match network_violations(spec, &[entry], false).into_iter().next() {
                Some(v) => Verdict {
                    allowed: false,
                    rule: v.rule,
                    fix: Some(v.fix),
                    errno: if v.errno.as_deref() == Some("EACCES") { Some("EACCES") } else { Some("ENETUNREACH") },
                },
                None => Verdict {
                    allowed: true,
                    rule: if spec.share_net {
                        "the run shares the host's network".into()
                    } else {
                        "loopback is the run's own network".into()
                    },
                    fix: None,
                    errno: None,
                },
            })
        }
        Query::Write(p) | Query::Read(p) => {
            let write = matches!(q, Query::Write(_));
            let path = path_of(p)?;
            let mut plain = spec.clone();
            plain.layers.clear();
            plain.layer_size = None;
            let mut names = Vec::new();
            // In a layer, a missing `guard` path gets its stand-in there.
            let mut shape = plain.clone();
            shape.layers = spec.layers.clone();
            let plan = MountPlan::prepare(&shape, crate::sys::geteuid(), &homes, &mut names, None)
                .map_err(|e| e.to_string())?;
            let mut v = verdict(&plain, &homes, &plan, &path, write);
            if let (false, true, Some(layer)) = (v.allowed, write, spec.layers.last()) {
                let (place, op) = classify(&plan.watch_view(), path.as_bytes());
                let roots: Vec<PathBuf> =
                    [homes.home.clone(), spec.cwd.clone(), Some("/var/tmp".into())].into_iter().flatten().collect();
                if place == Place::ReadOnly && op.is_none() && roots.iter().any(|r| Path::new(&path).starts_with(r)) {
                    v = Verdict {
                        allowed: true,
                        rule: format!("the layer {} takes the write, for review", quote::quote_path(layer)),
                        fix: None,
                        errno: None,
                    };
                }
            }
            Ok(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(spec: &RunSpec, homes: &Homes) -> MountPlan {
        MountPlan::prepare(spec, u32::MAX, homes, &mut Vec::new(), None).unwrap()
    }

    #[test]
    fn host_view_writes_are_refused_with_a_layer_as_the_fix() {
        let spec = RunSpec::new(["/bin/true"]);
        let homes = Homes::default();
        let p = plan(&spec, &homes);
        let v = verdict(&spec, &homes, &p, "/etc/hostname", true);
        assert!(!v.allowed);
        assert_eq!(v.rule, "the host view is read-only");
        assert!(v.fix.as_deref().unwrap().contains("--layer DIR"), "{v:?}");
        assert!(v.fix.as_deref().unwrap().contains("--writable /etc"), "{v:?}");
        assert_eq!(v.errno, Some("EROFS"));
        assert!(verdict(&spec, &homes, &p, "/tmp/x", true).allowed);
        assert!(verdict(&spec, &homes, &p, "/dev/null", true).allowed);
        assert!(!verdict(&spec, &homes, &p, "/dev/sda", true).allowed);
        assert!(verdict(&spec, &homes, &p, "/etc/hostname", false).allowed);
    }

    #[test]
    fn rules_name_themselves() {
        // Not beneath /tmp, which is the run's own tmpfs.
        let dir = PathBuf::from(format!("/var/tmp/capsule-why-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proj/.git")).unwrap();
        std::fs::create_dir_all(dir.join("secret")).unwrap();
        std::fs::create_dir_all(dir.join("layer directory")).unwrap();
        let d = |s: &str| dir.join(s);
        let mut spec = RunSpec::new(["/bin/true"]);
        spec.filesystem.writable = vec![d("proj")];
        spec.filesystem.read_only = vec![d("proj/.git")];
        spec.filesystem.hide = vec![d("secret"), d("layer directory")];
        let homes = Homes::default();
        let p = plan(&spec, &homes);
        let s = |x: &str| d(x).display().to_string();
        assert!(verdict(&spec, &homes, &p, &s("proj/a.rs"), true).allowed);
        let v = verdict(&spec, &homes, &p, &s("proj/.git/config"), true);
        assert!(
            !v.allowed && v.rule.contains("read_only") && v.fix.unwrap().contains("drop the read_only"),
            "{}",
            v.rule
        );
        let v = verdict(&spec, &homes, &p, &s("secret/key"), false);
        assert!(!v.allowed && v.rule.contains("hide") && v.errno == Some("ENOENT"), "{v:?}");
        assert_eq!(v.fix.unwrap(), format!("--allow {}", s("secret")));
        // What hides it decides the fix, not the words of its path.
        let v = verdict(&spec, &homes, &p, &s("layer directory/x"), false);
        assert!(v.fix.as_deref().is_some_and(|f| f.starts_with("--allow ")), "{v:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn network_denials_name_the_option() {
        let e = |addr: &str, port| NetLogEntry {
            syscall: "connect".into(),
            family: "inet".into(),
            address: Some(addr.into()),
            port: Some(port),
            count: 2,
        };
        let spec = RunSpec::new(["/bin/true"]);
        let v = network_violations(&spec, &[e("93.184.216.34", 443), e("127.0.0.1", 80)], false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].errno.as_deref(), Some("ENETUNREACH"));
        assert!(v[0].fix.starts_with("--share-net"));
        let spec = RunSpec { share_net: true, tcp_connect: Some(vec![443]), ..RunSpec::new(["/bin/true"]) };
        let v = network_violations(&spec, &[e("93.184.216.34", 443), e("93.184.216.34", 80)], false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].fix, "--tcp-connect 443,80");
        assert_eq!(
            line(&v[0]),
            format!(
                "network 93.184.216.34:80 (connect, EACCES) \u{d7}2: {}; to allow: --tcp-connect 443,80",
                v[0].rule
            )
        );
    }
}
