//! Sessions (docs/sessions.md): a sandbox kept across commands by the
//! user's agent. The client's requests and the agent's answers (carried in
//! [`crate::proto::wire`]), and the messages between the agent and the
//! session's holder, the first process of the session's run.

use serde::{Deserialize, Serialize};

use crate::proto::result::RunResult;
use crate::proto::spec::RunSpec;

/// The argument that makes `capsule-cli` a session's holder.
pub const HOLDER_ARG: &str = "__session-holder";
/// The descriptor the holder talks to its agent on.
pub const HOLDER_FD: i32 = 3;
/// Longest session name.
pub const MAX_NAME: usize = 64;

/// A client's session request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum SessionReq {
    /// Start session `name` with `spec` (its `argv` is the agent's to set).
    /// `idle_ms`: stop after this long without an `exec`; `lifetime_ms`:
    /// stop this long after the start; `grace_ms`: between SIGTERM and
    /// SIGKILL when either stops it.
    /// `publish`: host listeners into the session's network; `host_ports`:
    /// ports of the host's loopback the session reaches at its own.
    Start {
        name: String,
        spec: Box<RunSpec>,
        idle_ms: Option<u64>,
        lifetime_ms: Option<u64>,
        grace_ms: Option<u64>,
        #[serde(default)]
        publish: Vec<Publish>,
        #[serde(default)]
        host_ports: Vec<u16>,
    },
    /// Run `argv` in session `name`. Attached: stdin, stdout, stderr
    /// (not with `detach`, whose streams are /dev/null).
    Exec(ExecReq),
    /// The sessions, with what they hold.
    List,
    /// Stop session `name`: SIGTERM to its processes, SIGKILL to what is
    /// left after `grace_ms` (default [`DEFAULT_GRACE_MS`]).
    Stop { name: String, grace_ms: Option<u64> },
}

/// One command for a session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecReq {
    pub name: String,
    pub argv: Vec<String>,
    /// Variables added to the session's environment (`KEY=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Working directory inside (default: the session's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Answer once it started; it runs on, its streams /dev/null.
    #[serde(default)]
    pub detach: bool,
    /// Kill this command (its process group) after this long.
    #[serde(default)]
    pub wall_time_ms: Option<u64>,
    /// Kill this command (its processes) once they used this much CPU time.
    #[serde(default)]
    pub cpu_time_ms: Option<u64>,
    /// This command's memory (a cgroup of its own in the session's; needs
    /// cgroups): all its processes OOM-killed together past it.
    #[serde(default, with = "crate::proto::units::opt_size")]
    pub memory: Option<u64>,
}

/// `--publish [HOSTADDR:]HOSTPORT:PORT`: a listener at HOSTADDR:HOSTPORT on
/// the host forwarding to PORT on the session's loopback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    pub host_addr: String,
    pub host_port: u16,
    pub port: u16,
}

/// Most ports a session publishes or reaches.
pub const MAX_PORTS: usize = 32;

impl std::str::FromStr for Publish {
    type Err = String;

    /// `8080:80`, `127.0.0.1:8080:80`, `[::1]:8080:80`.
    fn from_str(s: &str) -> Result<Publish, String> {
        let bad = || format!("`{s}`: expected [HOSTADDR:]HOSTPORT:PORT (e.g. 8080:80 or 127.0.0.1:8080:80)");
        let (rest, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let (addr, host_port) = match rest.rsplit_once(':') {
            Some((a, p)) => (a.trim_start_matches('[').trim_end_matches(']').to_string(), p),
            None => ("127.0.0.1".to_string(), rest),
        };
        let num = |p: &str| p.parse::<u16>().ok().filter(|&n| n > 0).ok_or_else(bad);
        let publish = Publish { host_port: num(host_port)?, port: num(port)?, host_addr: addr };
        publish.host_addr.parse::<std::net::IpAddr>().map_err(|_| bad())?;
        Ok(publish)
    }
}

/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE_MS: u64 = 5_000;

/// The agent's answer to a [`SessionReq`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionAnswer {
    Started {
        name: String,
    },
    /// A command's result (not for `detach`).
    Exec {
        result: Box<RunResult>,
    },
    /// A detached command started: its pid inside.
    Detached {
        pid: i32,
    },
    List {
        sessions: Vec<SessionInfo>,
    },
    /// The session is gone: how its holder's run ended.
    Stopped {
        name: String,
        status: String,
    },
    Error {
        error: String,
    },
}

/// One line of `capsule session list`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionInfo {
    pub name: String,
    pub uptime_ms: u64,
    pub idle_ms: u64,
    /// Processes of the session's commands (not its PID 1 nor its holder).
    pub processes: u64,
    /// Resident memory of those (or the session cgroup's `memory.current`).
    pub memory_bytes: u64,
    /// Commands in flight that a client waits for.
    pub execs: u64,
    pub stopping: bool,
    /// `127.0.0.1:8080->80` (published), `host:5432<-5432` (a host port).
    #[serde(default)]
    pub ports: Vec<String>,
}

/// What the agent tells a holder.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToHolder {
    /// Start `req` as command `xid`; attached: its stdin, stdout, stderr
    /// unless `req.detach`; then, with `req.memory`, its cgroup's
    /// `cgroup.procs`, which it writes itself into before `execve`.
    Exec { xid: u64, req: ExecReq },
    /// Kill command `xid` (its process group).
    Kill { xid: u64 },
    /// SIGTERM to every process of the session but the holder.
    Term,
}

/// What a holder tells the agent. Written by a process inside the session:
/// numbers to report, never to act on beyond the command they name.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FromHolder {
    Ready,
    Started {
        xid: u64,
        pid: i32,
    },
    /// Could not start (`error` as the holder saw it).
    Failed {
        xid: u64,
        error: String,
    },
    /// A command waited for (the same JSON as a struct variant).
    Exited(Ended),
}

/// How a command ended: status as `wait4` gave it, its processes' rusage,
/// its wall time, whether its wall- or CPU-time limit killed it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Ended {
    pub xid: u64,
    pub status: i32,
    pub user_us: u64,
    pub system_us: u64,
    pub max_rss_kb: u64,
    pub wall_us: u64,
    pub timed_out: bool,
    #[serde(default)]
    pub cpu_exceeded: bool,
}

/// Whether `name` may name a session: 1 to [`MAX_NAME`] of `A-Za-z0-9._-`,
/// not starting with `.` or `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(ok_char) || name.starts_with(['.', '-']) {
        return Err(format!(
            "invalid session name {name:?}: 1 to {MAX_NAME} letters, digits, `.`, `_` or `-`, not starting with `.` or `-`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_specs() {
        let p = |s: &str| s.parse::<Publish>();
        assert_eq!(p("8080:80").unwrap(), Publish { host_addr: "127.0.0.1".into(), host_port: 8080, port: 80 });
        assert_eq!(p("0.0.0.0:1:2").unwrap().host_addr, "0.0.0.0");
        assert_eq!(p("[::1]:8080:80").unwrap().host_addr, "::1");
        for bad in ["80", "x:80", "8080:0", "host:8080:80", "1:2:3:4", "70000:1"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names() {
        for good in ["a", "web-1", "x.y_z", &"n".repeat(MAX_NAME)] {
            check_name(good).unwrap();
        }
        for bad in ["", "-x", ".x", "a/b", "a b", "é", &"n".repeat(MAX_NAME + 1), "a\n"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
