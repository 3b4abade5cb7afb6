//! What happened to a run: the `--json` object, the `--meta` lines, the
//! one-line summary and capsule's exit status.

use serde::{Deserialize, Serialize};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The program exited by itself; see `exit_code`.
    Exited,
    /// The program was killed by a signal it did not get from capsule.
    Signaled,
    /// capsule killed the run at the wall-time limit.
    WallTimeLimit,
    /// capsule killed the run at the CPU-time limit.
    CpuTimeLimit,
    /// The run hit its memory limit.
    MemoryLimit,
    /// The program tried to write past the output limit (SIGXFSZ).
    OutputLimit,
    /// The seccomp policy killed the program.
    ForbiddenSyscall,
    /// The caller killed the run (`kill` in the library or the protocol).
    Killed,
    /// capsule could not start the program; see `error`.
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Exited => "exited",
            Status::Signaled => "signaled",
            Status::WallTimeLimit => "wall-time-limit",
            Status::CpuTimeLimit => "cpu-time-limit",
            Status::MemoryLimit => "memory-limit",
            Status::OutputLimit => "output-limit",
            Status::ForbiddenSyscall => "forbidden-syscall",
            Status::Killed => "killed",
            Status::Error => "error",
        }
    }
}

/// Where the accounting figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Accounting {
    /// The run's own cgroup (`cpu.stat`, `memory.peak`).
    Cgroup,
    /// `getrusage(RUSAGE_CHILDREN)` of the run's PID 1 after it reaped every
    /// process of the run: CPU summed over all of them, peak memory the
    /// largest resident set of any one of them.
    Rusage,
}

/// Exit status of capsule itself when it could not run the program.
pub const EXIT_CAPSULE_ERROR: i32 = 125;
/// Exit status when the wall-time or CPU-time limit was hit.
pub const EXIT_TIME_LIMIT: i32 = 124;
/// Exit status when the memory limit was hit.
pub const EXIT_MEMORY_LIMIT: i32 = 123;
/// Exit status when the output limit was hit.
pub const EXIT_OUTPUT_LIMIT: i32 = 122;
/// Exit status when the seccomp policy killed the program.
pub const EXIT_FORBIDDEN_SYSCALL: i32 = 121;

/// The result of one run. Unknown fields may be added later; readers
/// should ignore fields they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub status: Status,
    /// Exit code for `exited`, otherwise null.
    pub exit_code: Option<i32>,
    /// Signal name (`SIGKILL`) when the program died of a signal.
    pub signal: Option<String>,
    /// Wall time from the program's `execve` to the death of its first process.
    pub wall_time_ms: f64,
    pub cpu_user_ms: f64,
    pub cpu_system_ms: f64,
    /// Peak memory: the cgroup's `memory.peak`; without cgroups the largest
    /// resident set of any of the run's processes (`ru_maxrss`), whose first
    /// process counts what was resident in the supervisor's memory at its
    /// `execve` (a one-shot supervisor sheds its code first: ~1.5 MiB; a
    /// served one's whole resident set; docs/child.md, "Peak memory").
    pub peak_memory_bytes: u64,
    pub accounting: Accounting,
    /// Most processes and threads alive at once (cgroup `pids.peak`), when
    /// the kernel reports it.
    pub pids_peak: Option<u64>,
    /// A limit ended the run: wall time, CPU time, memory (OOM kill or a
    /// death after hitting `memory.max`) or output size.
    pub killed_by_limit: bool,
    /// What went wrong, for status `error`.
    pub error: Option<String>,
    /// The captured standard output, for `"stdout": {"capture": N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Captured>,
    /// The captured standard error, for `"stderr": {"capture": N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Captured>,
    /// For `forbidden-syscall`: the call the seccomp policy forbids
    /// (`socket`; `i386:open` or `x32:read` for a non-native ABI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// For `forbidden-syscall`: the call's six raw arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_args: Option<Vec<u64>>,
    /// What Landlock enforced (`full`, `partial`, `none`), for every run
    /// that reached the program's execve (docs/landlock.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock: Option<crate::proto::result::Enforcement>,
    /// With `net_log`: every destination of the run's `connect`, `sendto`,
    /// `sendmsg` and `sendmmsg` calls, in the order first seen, with how
    /// many calls (messages, for `sendmmsg`) went there
    /// (docs/network.md). Absent without `net_log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_log: Option<Vec<NetLogEntry>>,
    /// With `net_log`, when the log was full: calls to destinations it had
    /// no room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_log_dropped: Option<u64>,
    /// What the run was refused, with the rule and the option that would
    /// allow it (docs/explain.md): a forbidden call always; with
    /// `explain`, refused file writes, reads of hidden paths and network
    /// destinations. Absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violations: Option<Vec<Violation>>,
    /// With `explain`: refused calls the table had no room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violations_dropped: Option<u64>,
    /// With `egress`: every destination the run asked the proxy for, and
    /// every direct attempt past it, in the order first seen
    /// (docs/egress.md). Absent without `egress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Vec<NetworkEntry>>,
    /// With `egress`, when the report was full: connections to destinations
    /// it had no room for (it keeps 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_dropped: Option<u64>,
    /// Voluntary context switches of the run's processes (rusage
    /// `ru_nvcsw` of everything its PID 1 reaped), for runs that happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csw_voluntary: Option<u64>,
    /// Context switches the kernel forced on them (`ru_nivcsw`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csw_forced: Option<u64>,
}

/// One destination of the network log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetLogEntry {
    /// `connect`, `sendto`, `sendmsg` or `sendmmsg` (`i386:connect`,
    /// `x32:sendmsg` for the other ABIs).
    pub syscall: String,
    /// `inet`, `inet6`, `unix`, `netlink`, `unspec`, `other`; `invalid`
    /// (an address too short for its family: the call failed) or `unknown`
    /// (the address could not be read).
    pub family: String,
    /// `93.184.216.34`, `::1`, `fe80::1%2`; a unix socket's path, `@name`
    /// for an abstract one, bytes other than printable ASCII as `\xNN`;
    /// a netlink port id (`0`: the kernel), with `groups 0x..` when
    /// multicast; `family N` for other families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// For `inet` and `inet6`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub count: u64,
}

impl NetLogEntry {
    /// `93.184.216.34:443`, `[::1]:53`, `unix:/run/x`, `netlink:0`...
    pub fn destination(&self) -> String {
        let addr = self.address.as_deref().unwrap_or("");
        match (self.family.as_str(), self.port) {
            ("inet", Some(p)) => format!("{addr}:{p}"),
            ("inet6", Some(p)) => format!("[{addr}]:{p}"),
            ("unix", _) if addr.is_empty() => "unix:(unnamed)".into(),
            ("unix" | "netlink", _) => format!("{}:{addr}", self.family),
            ("other", _) => addr.to_string(),
            ("unknown", _) => "(address unreadable)".into(),
            ("invalid", _) => "(invalid address)".into(),
            (f, _) => f.to_string(),
        }
    }
}

/// What a run was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// A write (open for writing, create, remove, rename, change) the
    /// run's view does not allow: read-only or hidden there.
    FsWrite,
    /// An open of a path a rule hides (it reads as empty or missing).
    FsReadHidden,
    /// A network destination the run's network does not reach.
    Network,
    /// A call the seccomp policy forbids.
    Syscall,
}

impl ViolationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::FsWrite => "fs-write",
            ViolationKind::FsReadHidden => "fs-read-hidden",
            ViolationKind::Network => "network",
            ViolationKind::Syscall => "syscall",
        }
    }
}

/// One thing a run was refused (result field `violations`), in the order
/// first seen: what, where, the call, the rule that refused it and the
/// option that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// fs kinds: the path as the program named it, made absolute in the
    /// sandbox's tree (any bytes: printed quoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// network: the destination's address (a host name where one is
    /// known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The call (`openat`, `mkdir`, `connect`, ...).
    pub syscall: String,
    /// What the call got (`EROFS`, `ENETUNREACH`...); absent when the
    /// policy killed the run instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    /// The rule that refused it.
    pub rule: String,
    /// The option that would allow it.
    pub fix: String,
    /// Calls refused alike (same kind, call and place).
    pub count: u64,
}

/// How a destination of the `network` report was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// A plain-HTTP request to the proxy (absolute URI).
    Http,
    /// An HTTP `CONNECT` tunnel (TLS and anything else).
    Connect,
    /// SOCKS5 `CONNECT`.
    Socks,
    /// A `connect` or `sendto` past the proxy, seen by the network log:
    /// the run's network has no route out, so it reached nothing.
    Direct,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Http => "http",
            Via::Connect => "connect",
            Via::Socks => "socks",
            Via::Direct => "direct",
        }
    }
}

/// What became of a destination of the `network` report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Allowed,
    Refused,
}

/// One destination of the `network` report (`egress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkEntry {
    /// The name asked for (or the address literal); absent for `direct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The address connected to (or that a rule refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub port: u16,
    pub via: Via,
    pub verdict: Verdict,
    /// The pattern that allowed or denied it (`*.example.com`, `pypi.org
    /// (@pypi)`), or why it was refused: `no allow-host`, `local address
    /// (allow-local)`, `no route`.
    pub rule: String,
    /// Connections (or, for `direct`, calls).
    pub count: u64,
    /// Bytes the program sent to the host, and received from it.
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_received: u64,
    /// For an allowed destination that could not be reached: the last
    /// failure (`resolve: ...`, `connect: ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NetworkEntry {
    /// `allowed.test:443 via connect allowed by *.test ×2 (120 B out, 4096 B in)`.
    pub fn describe(&self) -> String {
        let dest = match (&self.host, &self.address) {
            (Some(h), _) if h.contains(':') => format!("[{h}]:{}", self.port),
            (Some(h), _) => format!("{h}:{}", self.port),
            (None, Some(a)) if a.contains(':') => format!("[{a}]:{}", self.port),
            (None, Some(a)) => format!("{a}:{}", self.port),
            (None, None) => format!("?:{}", self.port),
        };
        let via = self.via.as_str();
        let mut out = match self.verdict {
            Verdict::Allowed => format!("{dest} via {via} allowed by {}", self.rule),
            Verdict::Refused => format!("{dest} via {via} refused ({})", self.rule),
        };
        out.push_str(&format!(" \u{d7}{}", self.count));
        if self.bytes_sent + self.bytes_received > 0 {
            out.push_str(&format!(" ({} B out, {} B in)", self.bytes_sent, self.bytes_received));
        }
        if let Some(e) = &self.error {
            out.push_str(&format!(" [{e}]"));
        }
        out
    }
}

/// One of the two programs of an interactive run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    Solution,
    Interactor,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Solution => "solution",
            Side::Interactor => "interactor",
        }
    }
}

/// The result of an interactive run (docs/interactive.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractResult {
    /// The program that left the conversation first: the first whose end
    /// of a pipe the relay saw close (its exit closes both), before the
    /// relay passed that on to the other program. A program killed by the
    /// other's leaving (SIGPIPE, end of input) is never first.
    pub first_to_exit: Side,
    pub solution: RunResult,
    pub interactor: RunResult,
}

/// A captured output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captured {
    /// The first bytes of the stream, at most the capture size (invalid
    /// UTF-8 replaced by U+FFFD).
    pub text: String,
    /// Bytes the program wrote in all.
    pub bytes: u64,
    /// The program wrote more than the capture size.
    pub truncated: bool,
}

impl RunResult {
    /// A result for a run that failed before the program ran.
    pub fn error(message: impl Into<String>) -> Self {
        RunResult {
            status: Status::Error,
            exit_code: None,
            signal: None,
            wall_time_ms: 0.0,
            cpu_user_ms: 0.0,
            cpu_system_ms: 0.0,
            peak_memory_bytes: 0,
            accounting: Accounting::Rusage,
            pids_peak: None,
            killed_by_limit: false,
            error: Some(message.into()),
            stdout: None,
            stderr: None,
            syscall: None,
            syscall_args: None,
            landlock: None,
            net_log: None,
            net_log_dropped: None,
            violations: None,
            violations_dropped: None,
            network: None,
            network_dropped: None,
            csw_voluntary: None,
            csw_forced: None,
        }
    }

    /// capsule's own exit status for this result: the program's exit code,
    /// 128+N for signal N, or one of the `EXIT_*` constants.
    pub fn exit_status(&self) -> i32 {
        match self.status {
            Status::Exited => self.exit_code.unwrap_or(EXIT_CAPSULE_ERROR),
            Status::Signaled => 128 + self.signal.as_deref().and_then(signal_number).unwrap_or(0),
            Status::WallTimeLimit | Status::CpuTimeLimit => EXIT_TIME_LIMIT,
            Status::MemoryLimit => EXIT_MEMORY_LIMIT,
            Status::OutputLimit => EXIT_OUTPUT_LIMIT,
            Status::ForbiddenSyscall => EXIT_FORBIDDEN_SYSCALL,
            Status::Killed => 128 + libc::SIGKILL,
            Status::Error => EXIT_CAPSULE_ERROR,
        }
    }

    /// The `--meta` form: one `key:value` line per field, null fields left
    /// out; `net_log` as in [`net_log_summary`](Self::net_log_summary).
    pub fn to_meta(&self) -> String {
        let mut out = String::new();
        let v = serde_json::to_value(self).expect("result serializes");
        if let serde_json::Value::Object(map) = v {
            for (k, v) in map {
                let text = match v {
                    serde_json::Value::Null => continue,
                    _ if k == "net_log" => self.net_log_text().unwrap_or_default(),
                    _ if k == "network" => self.network_text().unwrap_or_default(),
                    serde_json::Value::String(s) => s.replace('\n', " "),
                    other => other.to_string(),
                };
                out.push_str(&k);
                out.push(':');
                out.push_str(&text);
                out.push('\n');
            }
        }
        out
    }

    /// The network log as one line for people, when the run had one:
    /// `capsule: network: connect 93.184.216.34:443 ×2, sendto
    /// 127.0.0.53:53 ×4` (`none` when the program made no such call).
    pub fn net_log_summary(&self) -> Option<String> {
        self.net_log_text().map(|t| format!("capsule: network: {t}"))
    }

    /// The `network` report as one line for people, when the run had
    /// one: `capsule: egress: pypi.org:443 via connect allowed by pypi.org
    /// ×1 (517 B out, 6120 B in); evil.test:443 via connect refused (no
    /// allow-host)` (`none` when nothing was asked for).
    pub fn network_summary(&self) -> Option<String> {
        self.network_text().map(|t| format!("capsule: egress: {t}"))
    }

    fn network_text(&self) -> Option<String> {
        let n = self.network.as_ref()?;
        if n.is_empty() {
            return Some("none".into());
        }
        let mut parts: Vec<String> = n.iter().map(NetworkEntry::describe).collect();
        if let Some(d) = self.network_dropped.filter(|d| *d > 0) {
            parts.push(format!("{d} more connection{} the report had no room for", if d == 1 { "" } else { "s" }));
        }
        Some(parts.join("; "))
    }

    fn net_log_text(&self) -> Option<String> {
        let log = self.net_log.as_ref()?;
        let mut parts: Vec<String> =
            log.iter().map(|e| format!("{} {} \u{d7}{}", e.syscall, e.destination(), e.count)).collect();
        if let Some(n) = self.net_log_dropped.filter(|n| *n > 0) {
            parts.push(format!(
                "{n} more call{} to destinations the log had no room for (it keeps {})",
                if n == 1 { "" } else { "s" },
                log.len()
            ));
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        Some(parts.join(", "))
    }

    /// What `capsule run` prints on stderr after a run: the summary
    /// (unless `quiet`, errors always), the network log's line (unless
    /// `quiet`), and an error that came after the program ran (recording
    /// a layer's originals). Each line ends in a newline.
    pub fn report(&self, quiet: bool) -> String {
        let mut out = String::new();
        if !quiet || self.status == Status::Error {
            out.push_str(&self.summary());
            out.push('\n');
        }
        if let (false, Some(line)) = (quiet, self.net_log_summary()) {
            out.push_str(&line);
            out.push('\n');
        }
        if let (false, Some(line)) = (quiet, self.network_summary()) {
            out.push_str(&line);
            out.push('\n');
        }
        if let (true, Some(e)) = (self.status != Status::Error, &self.error) {
            out.push_str(&format!("capsule: {e}\n"));
        }
        out
    }

    /// The one-line human summary.
    pub fn summary(&self) -> String {
        let what = match self.status {
            Status::Exited => format!("exited with {}", self.exit_code.unwrap_or(-1)),
            Status::Signaled => {
                format!("killed by {}", self.signal.as_deref().unwrap_or("a signal"))
            }
            Status::Error => return format!("capsule: error: {}", self.error.as_deref().unwrap_or("unknown")),
            Status::ForbiddenSyscall => match &self.syscall {
                Some(name) => format!("forbidden syscall {name}"),
                None => "forbidden syscall".into(),
            },
            other => other.as_str().replace('-', " "),
        };
        format!(
            "capsule: {what} after {:.3} ms (cpu {:.3} ms user + {:.3} ms system, peak {:.1} MiB, {})",
            self.wall_time_ms,
            self.cpu_user_ms,
            self.cpu_system_ms,
            self.peak_memory_bytes as f64 / (1024.0 * 1024.0),
            match self.accounting {
                Accounting::Cgroup => "cgroup",
                Accounting::Rusage => "rusage",
            }
        )
    }
}

const SIGNALS: [(&str, i32); 31] = [
    ("SIGHUP", 1),
    ("SIGINT", 2),
    ("SIGQUIT", 3),
    ("SIGILL", 4),
    ("SIGTRAP", 5),
    ("SIGABRT", 6),
    ("SIGBUS", 7),
    ("SIGFPE", 8),
    ("SIGKILL", 9),
    ("SIGUSR1", 10),
    ("SIGSEGV", 11),
    ("SIGUSR2", 12),
    ("SIGPIPE", 13),
    ("SIGALRM", 14),
    ("SIGTERM", 15),
    ("SIGSTKFLT", 16),
    ("SIGCHLD", 17),
    ("SIGCONT", 18),
    ("SIGSTOP", 19),
    ("SIGTSTP", 20),
    ("SIGTTIN", 21),
    ("SIGTTOU", 22),
    ("SIGURG", 23),
    ("SIGXCPU", 24),
    ("SIGXFSZ", 25),
    ("SIGVTALRM", 26),
    ("SIGPROF", 27),
    ("SIGWINCH", 28),
    ("SIGIO", 29),
    ("SIGPWR", 30),
    ("SIGSYS", 31),
];

/// `9` → `"SIGKILL"`; real-time signals as `SIGRTMIN+n`.
pub fn signal_name(sig: i32) -> String {
    match SIGNALS.iter().find(|(_, n)| *n == sig) {
        Some((name, _)) => name.to_string(),
        None if sig >= libc::SIGRTMIN() && sig <= libc::SIGRTMAX() => {
            format!("SIGRTMIN+{}", sig - libc::SIGRTMIN())
        }
        None => format!("SIG{sig}"),
    }
}

/// `"SIGKILL"` → `9`.
pub fn signal_number(name: &str) -> Option<i32> {
    if let Some((_, n)) = SIGNALS.iter().find(|(s, _)| *s == name) {
        return Some(*n);
    }
    if let Some(rest) = name.strip_prefix("SIGRTMIN+") {
        return rest.parse::<i32>().ok().map(|n| libc::SIGRTMIN() + n);
    }
    name.strip_prefix("SIG").and_then(|n| n.parse().ok())
}

/// What Landlock enforced on a run (result field `landlock`), as the
/// rust-landlock crate's `RestrictionStatus`: every right and scope
/// capsule asked for, some of them, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    Full,
    Partial,
    None,
}

impl Enforcement {
    /// As stored in the shared page (0: not recorded).
    pub(crate) fn to_u32(self) -> u32 {
        match self {
            Enforcement::None => 1,
            Enforcement::Partial => 2,
            Enforcement::Full => 3,
        }
    }

    pub(crate) fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Enforcement::None),
            2 => Some(Enforcement::Partial),
            3 => Some(Enforcement::Full),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses() {
        let mut r = RunResult::error("x");
        assert_eq!(r.exit_status(), EXIT_CAPSULE_ERROR);
        r.status = Status::Exited;
        r.exit_code = Some(3);
        assert_eq!(r.exit_status(), 3);
        r.status = Status::Signaled;
        r.exit_code = None;
        r.signal = Some("SIGSEGV".into());
        assert_eq!(r.exit_status(), 139);
        r.status = Status::WallTimeLimit;
        assert_eq!(r.exit_status(), EXIT_TIME_LIMIT);
    }

    #[test]
    fn forbidden_syscall_is_named() {
        let mut r = RunResult::error("x");
        r.status = Status::ForbiddenSyscall;
        r.error = None;
        r.syscall = Some("socket".into());
        r.syscall_args = Some(vec![2, 1, 0, 0, 0, 0]);
        assert!(r.summary().starts_with("capsule: forbidden syscall socket after"), "{}", r.summary());
        assert_eq!(r.exit_status(), EXIT_FORBIDDEN_SYSCALL);
        let meta = r.to_meta();
        assert!(meta.contains("status:forbidden-syscall\n") && meta.contains("syscall:socket\n"), "{meta}");
        assert!(meta.contains("syscall_args:[2,1,0,0,0,0]\n"), "{meta}");
    }

    #[test]
    fn net_log_lines() {
        let mut r = RunResult::error("x");
        assert_eq!(r.net_log_summary(), None);
        assert!(!serde_json::to_string(&r).unwrap().contains("net_log"));
        r.net_log = Some(Vec::new());
        assert_eq!(r.net_log_summary().as_deref(), Some("capsule: network: none"));
        let e = |syscall: &str, family: &str, address: Option<&str>, port: Option<u16>, count: u64| NetLogEntry {
            syscall: syscall.into(),
            family: family.into(),
            address: address.map(Into::into),
            port,
            count,
        };
        r.net_log = Some(vec![
            e("connect", "inet", Some("93.184.216.34"), Some(443), 2),
            e("sendto", "inet6", Some("::1"), Some(53), 4),
            e("connect", "unix", Some("/run/x"), None, 1),
            e("sendmsg", "unix", Some("@abs"), None, 1),
            e("sendto", "netlink", Some("0"), None, 3),
            e("i386:connect", "unknown", None, None, 1),
            e("connect", "invalid", None, None, 1),
            e("sendto", "other", Some("family 17"), None, 1),
            e("connect", "unspec", None, None, 1),
        ]);
        r.net_log_dropped = Some(7);
        let want = "connect 93.184.216.34:443 \u{d7}2, sendto [::1]:53 \u{d7}4, connect unix:/run/x \u{d7}1, \
                    sendmsg unix:@abs \u{d7}1, sendto netlink:0 \u{d7}3, i386:connect (address unreadable) \u{d7}1, \
                    connect (invalid address) \u{d7}1, sendto family 17 \u{d7}1, connect unspec \u{d7}1, \
                    7 more calls to destinations the log had no room for (it keeps 9)";
        assert_eq!(r.net_log_summary().unwrap(), format!("capsule: network: {want}"));
        let meta = r.to_meta();
        assert!(meta.contains(&format!("\nnet_log:{want}\n")), "{meta}");
        assert!(meta.contains("\nnet_log_dropped:7\n"), "{meta}");
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(
            j["net_log"][0],
            serde_json::json!({"syscall": "connect", "family": "inet", "address": "93.184.216.34", "port": 443, "count": 2})
        );
        assert_eq!(j["net_log"][5], serde_json::json!({"syscall": "i386:connect", "family": "unknown", "count": 1}));
        assert_eq!(j["net_log_dropped"], 7);
        let back: RunResult = serde_json::from_value(j).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn signal_names_round_trip() {
        for n in 1..=64 {
            assert_eq!(signal_number(&signal_name(n)), Some(n), "{n}");
        }
    }

    #[test]
    fn meta_lines() {
        let mut r = RunResult::error("boom\nbang");
        r.wall_time_ms = 1.5;
        let m = r.to_meta();
        assert!(m.contains("status:error\n"), "{m}");
        assert!(m.contains("error:boom bang\n"), "{m}");
        assert!(m.contains("wall_time_ms:1.5\n"), "{m}");
        assert!(!m.contains("exit_code"), "{m}");
        assert!(!m.contains("landlock"), "{m}");
        r.landlock = Some(crate::proto::result::Enforcement::Partial);
        assert!(r.to_meta().contains("landlock:partial\n"), "{}", r.to_meta());
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["landlock"], "partial");
    }
}
