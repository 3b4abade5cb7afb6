//! Who the caller is: the host's root (refused), its peers' fingerprints,
//! where its agents' sockets live.

use std::ffi::CString;
use std::path::PathBuf;

use crate::error::{Error, Refused};
use crate::sys;

/// True when the caller is the host's root, which capsule refuses to be
/// run as (the same rule `capsule check` reports).
pub fn is_real_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let euid = sys::geteuid();
    if euid != 0 {
        return false;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let devnull = std::fs::metadata("/dev/null").ok().map(|m| m.uid());
    is_host_root(euid, &map, devnull)
}

/// The refusal, with the fix.
pub fn root_refusal() -> Error {
    Refused::Root.into()
}

/// Whether (`euid`, `/proc/self/uid_map`) is the host's real root: uid 0
/// mapped through the initial namespace's identity map `0 0 4294967295`.
pub(crate) fn is_initial_root(euid: u32, uid_map: &str) -> bool {
    euid == 0 && parse_id_map(uid_map).contains(&(0, 0, u32::MAX as u64))
}

/// The one rule for "this is the host's root", shared by `capsule check`
/// and the engine's refusal: uid 0 of the initial user namespace, or uid 0
/// of a namespace whose uid 0 is its parent's uid 0 and that owns the
/// host's /dev/null (e.g. `unshare -r` run by root), which still owns every
/// root-owned file.
pub(crate) fn is_host_root(euid: u32, uid_map: &str, devnull_owner: Option<u32>) -> bool {
    euid == 0 && (is_initial_root(0, uid_map) || (outside_uid0(uid_map) == Some(0) && devnull_owner == Some(0)))
}

/// `(inside, outside, count)` lines of a uid_map/gid_map.
pub(crate) fn parse_id_map(text: &str) -> Vec<(u64, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|x| x.parse::<u64>().ok());
            Some((f.next()??, f.next()??, f.next()??))
        })
        .collect()
}

/// Where uid 0 of this namespace maps in the parent namespace.
pub(crate) fn outside_uid0(uid_map: &str) -> Option<u64> {
    parse_id_map(uid_map).into_iter().find(|&(inside, _, count)| inside == 0 && count > 0).map(|(_, out, _)| out)
}

/// What the agent can tell of process `pid` from inside its own user
/// namespace, where `/proc/PID/ns/*` of its callers are out of reach
/// (ptrace rules): the uid map of its user namespace as read from here,
/// how deep its PID namespace is, `no_new_privs` and its seccomp mode and
/// filters. None when unreadable.
pub fn peer_fingerprint(pid: i32) -> Option<String> {
    // One read each (`read_to_string` probes a procfs file, which has no
    // size, with growing reads, each generating the file anew).
    let read = |file: &str| {
        let text = sys::read_small(&CString::new(format!("/proc/{pid}/{file}")).ok()?);
        (!text.is_empty()).then_some(text)
    };
    let map = read("uid_map")?;
    let status = read("status")?;
    let mut f = map;
    for line in status.lines() {
        match line.split_once(':') {
            Some(("NSpid", v)) => f.push_str(&format!("pid namespaces {}\n", v.split_whitespace().count())),
            Some(("NoNewPrivs" | "Seccomp" | "Seccomp_filters", _)) => {
                f.push_str(line);
                f.push('\n');
            }
            _ => {}
        }
    }
    Some(f)
}

/// Why `serve --listen` refuses the peer on `sock`: another user, or a
/// process unlike its caller (`expected`: the caller's [`peer_fingerprint`]);
/// None: taken. A peer whose pid is not visible here (a deeper PID
/// namespace's) counts as another user.
pub fn listen_refusal(sock: std::os::fd::RawFd, expected: &str) -> Option<&'static str> {
    use crate::proto::lines::{REFUSED_NOT_ALIKE, REFUSED_OTHER_USER};
    let cred = sys::peer_cred(sock).ok();
    let same_user = cred.is_some_and(|c| c.uid == sys::getuid() && c.pid > 0);
    if !same_user {
        return Some(REFUSED_OTHER_USER);
    }
    (cred.and_then(|c| peer_fingerprint(c.pid)).as_deref() != Some(expected)).then_some(REFUSED_NOT_ALIKE)
}

/// Where the agents of the user `uid` keep their sockets
/// (`crate::endpoints::agent::socket_dir` chooses one): `$XDG_RUNTIME_DIR/capsule`
/// and `/tmp/capsule-agent-UID`. Both are covered in every run
/// ([`MountPlan::cover_agent_dirs`]), whichever is in use.
pub(crate) fn agent_dirs(uid: u32) -> Vec<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute());
    runtime.map(|r| r.join("capsule")).into_iter().chain([PathBuf::from(format!("/tmp/capsule-agent-{uid}"))]).collect()
}

/// The login name for `uid` from the user database, or the number.
pub fn user_name(uid: u32) -> String {
    super::userdb::name(super::userdb::Db::Passwd, uid).unwrap_or_else(|| uid.to_string())
}
