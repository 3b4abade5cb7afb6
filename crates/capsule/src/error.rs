//! Error types: every failure names the syscall, the path and the errno, and
//! where the user can fix it, says how.

use std::fmt;

/// A spec field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid spec: {field}: {message}")]
pub struct SpecError {
    /// The field, as named in the profile (`limits.wall_time`, `mounts[2].dst`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError { field: field.into(), message: message.into() }
    }
}

/// A failed system call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysError {
    /// The call, with the interesting flags (`unshare(CLONE_NEWUSER)`).
    pub call: String,
    /// The path it acted on, if any.
    pub path: Option<String>,
    /// The errno.
    pub errno: i32,
    /// How to fix it, when the user can.
    pub hint: Option<String>,
}

impl SysError {
    pub fn new(call: impl Into<String>, errno: i32) -> Self {
        SysError { call: call.into(), path: None, errno, hint: None }
    }
    pub fn path(mut self, p: impl Into<String>) -> Self {
        self.path = Some(p.into());
        self
    }
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.hint = Some(h.into());
        self
    }
}

/// `ENOENT` → "No such file or directory (ENOENT)": how capsule words an
/// errno everywhere.
pub fn errno_text(errno: i32) -> String {
    format!("{} ({})", strerror(errno), errno_name(errno))
}

/// `ENOENT` → "No such file or directory", as C's `%m` prints it (what
/// `capsule isolate` writes, as isolate does).
pub fn strerror(errno: i32) -> String {
    let msg = std::io::Error::from_raw_os_error(errno).to_string();
    match msg.find(" (os error") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

/// An I/O error's reason: [`errno_text`] for an OS error, else its own
/// text.
pub fn io_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => errno_text(n),
        None => e.to_string(),
    }
}

/// An I/O error's reason as `%m` prints it: [`strerror`] for an OS error,
/// else its own text.
pub fn io_strerror(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => strerror(n),
        None => e.to_string(),
    }
}

/// What a file type (`st_mode & S_IFMT`) is, for errors: "a FIFO (named pipe)".
pub fn file_kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO (named pipe)",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFLNK => "a symbolic link",
        _ => "of an unknown file type",
    }
}

/// The symbolic name of an errno value.
pub fn errno_name(errno: i32) -> &'static str {
    use libc::*;
    match errno {
        EPERM => "EPERM",
        ENOENT => "ENOENT",
        ESRCH => "ESRCH",
        EINTR => "EINTR",
        EIO => "EIO",
        ENXIO => "ENXIO",
        E2BIG => "E2BIG",
        ENOEXEC => "ENOEXEC",
        EBADF => "EBADF",
        ECHILD => "ECHILD",
        EAGAIN => "EAGAIN",
        ENOMEM => "ENOMEM",
        EACCES => "EACCES",
        EFAULT => "EFAULT",
        EBUSY => "EBUSY",
        EEXIST => "EEXIST",
        EXDEV => "EXDEV",
        ENODEV => "ENODEV",
        ESPIPE => "ESPIPE",
        ENOTDIR => "ENOTDIR",
        EISDIR => "EISDIR",
        EINVAL => "EINVAL",
        ENFILE => "ENFILE",
        EMFILE => "EMFILE",
        ENOTTY => "ENOTTY",
        ETXTBSY => "ETXTBSY",
        EFBIG => "EFBIG",
        ENOSPC => "ENOSPC",
        EROFS => "EROFS",
        EMLINK => "EMLINK",
        EPIPE => "EPIPE",
        ENAMETOOLONG => "ENAMETOOLONG",
        ENOSYS => "ENOSYS",
        ENOTEMPTY => "ENOTEMPTY",
        ELOOP => "ELOOP",
        EOPNOTSUPP => "EOPNOTSUPP",
        ECONNREFUSED => "ECONNREFUSED",
        ECONNRESET => "ECONNRESET",
        ENETUNREACH => "ENETUNREACH",
        ENETDOWN => "ENETDOWN",
        EHOSTUNREACH => "EHOSTUNREACH",
        EAFNOSUPPORT => "EAFNOSUPPORT",
        EADDRNOTAVAIL => "EADDRNOTAVAIL",
        EPROTONOSUPPORT => "EPROTONOSUPPORT",
        ENOTSOCK => "ENOTSOCK",
        ETIMEDOUT => "ETIMEDOUT",
        EMSGSIZE => "EMSGSIZE",
        EOVERFLOW => "EOVERFLOW",
        ESTALE => "ESTALE",
        EUSERS => "EUSERS",
        ELIBBAD => "ELIBBAD",
        _ => "E?",
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.call)?;
        if let Some(p) = &self.path {
            write!(f, " on `{p}`")?;
        }
        write!(f, " failed: {}", errno_text(self.errno))?;
        if let Some(h) = &self.hint {
            write!(f, "; {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SysError {}

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{0}")]
    Sys(#[from] SysError),
    /// Setting up the sandbox failed before the program ran.
    #[error("sandbox setup failed: {0}")]
    Setup(#[from] SetupError),
    /// One run could not happen; other runs are unaffected.
    #[error("run failed: {0}")]
    Run(#[from] RunError),
    /// The supervisor died or sent something unreadable.
    #[error("supervisor: {0}")]
    Supervisor(#[from] SupervisorError),
    /// capsule refuses to run in this situation (e.g. as root).
    #[error("{0}")]
    Refused(#[from] Refused),
}

/// Why a sandbox, a supervisor or a run could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// A step of the run's sandbox failed in PID 1 or the tracee: the
    /// supervisor's message names the step, the path and the errno
    /// (`RunResult::error`).
    #[error("{0}")]
    Sandbox(String),
    /// The supervisor could not make the run (its spec, its layers, its
    /// cgroup): the supervisor's message.
    #[error("{0}")]
    Request(String),
    /// The supervisor or agent could not start: its message.
    #[error("{0}")]
    Start(String),
    /// A CPU past what a CPU set can name.
    #[error("CPU {0} is past the 1024 capsule can pin to")]
    CpuOutOfRange(usize),
    /// No `capsule` binary to start the supervisor from.
    #[error(
        "cannot find the `capsule` binary to start the supervisor: set Config::capsule_bin or $CAPSULE_BIN, or put capsule in PATH"
    )]
    NoBinary,
    /// `--listen` without this process's identity to check peers against:
    /// `/proc/WHO/status` and `uid_map` (`WHO`: `self` or a pid).
    #[error("--listen: cannot read /proc/{0}/status and uid_map (what its peers are checked against)")]
    NoPeerIdentity(String),
}

/// Why one run could not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// `Sandbox::session` on per-CPU supervisors.
    #[error("sessions live in one supervisor: not with per-CPU supervisors")]
    SessionsPerCpu,
    /// `try_wait` after the result was returned.
    #[error("the result was already taken")]
    ResultTaken,
    /// The request could not be sent (too large, say): the wire's error.
    #[error("{0}")]
    Send(String),
}

/// What went wrong with the supervisor (or agent) itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupervisorError {
    /// It is gone, or its socket failed: why, as far as known.
    #[error("{0}")]
    Gone(String),
    /// `capsule supervise` could not be started or did not answer its
    /// start message: the binary, the error (empty if there was none) and
    /// how it exited.
    #[error("starting `{bin} supervise`: {error}{how}")]
    Start { bin: String, error: String, how: String },
    /// It answered its start message with something else.
    #[error("`{bin} supervise` did not start{how}")]
    NotStarted { bin: String, how: String },
    /// A message of the wrong kind for the request: which.
    #[error("{0}")]
    Unexpected(&'static str),
}

/// What capsule refuses to do, and how to get past it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Running as the host's root.
    #[error(
        "capsule refuses to run as root: root's sandbox would still reach global kernel \
         state, and capsule's isolation is built for unprivileged users; run it as an \
         unprivileged user, e.g. `runuser -u nobody -- capsule run ...` or \
         `setpriv --reuid=nobody --regid=nogroup --clear-groups capsule run ...`"
    )]
    Root,
    /// `--require-cgroups` without cgroups: why not, and the delegation hint.
    #[error("cgroups are required (--require-cgroups) but unavailable: {note}; {hint}")]
    CgroupsRequired { note: String, hint: &'static str },
    /// Subordinate ids without the user namespace made with newuidmap.
    #[error(
        "subordinate ids need the user namespace the caller made with newuidmap (host::subids::Namespace); \
         only the one-shot client passes one"
    )]
    SubidsWithoutNamespace,
    /// The capsule binary cannot be read by its user (re-executing it
    /// inside the user namespace needs that).
    #[error(
        "the capsule binary is not readable by its user: the supervisor re-executes it inside its user \
         namespace, which needs read permission (chmod a+r on it)"
    )]
    UnreadableBinary,
    /// An environment variable's value makes no sense: the variable, the
    /// value, what it must be.
    #[error("{var}={value}: expected {expected}")]
    Setting { var: &'static str, value: String, expected: &'static str },
    /// `--listen PATH` where something else is: the path, what is there.
    #[error("--listen {path}: the path exists{what}; remove it or choose another")]
    ListenPathTaken { path: String, what: &'static str },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed variants word their errors as the strings they replaced.
    #[test]
    fn messages_stay_as_they_were() {
        let root = Error::from(Refused::Root).to_string();
        assert!(root
            .starts_with("capsule refuses to run as root: root's sandbox would still reach global kernel state, and"));
        assert!(root.ends_with("unprivileged user, e.g. `runuser -u nobody -- capsule run ...` or `setpriv --reuid=nobody --regid=nogroup --clear-groups capsule run ...`"));
        let idle = Refused::Setting {
            var: "CAPSULE_AGENT_IDLE",
            value: "0".into(),
            expected: "a number of seconds from 1 to 86400",
        };
        assert_eq!(idle.to_string(), "CAPSULE_AGENT_IDLE=0: expected a number of seconds from 1 to 86400");
        assert_eq!(
            Error::from(SetupError::CpuOutOfRange(1024)).to_string(),
            "sandbox setup failed: CPU 1024 is past the 1024 capsule can pin to"
        );
        let start =
            SupervisorError::Start { bin: "/x/capsule".into(), error: "EOF".into(), how: " (exited with 1)".into() };
        assert_eq!(Error::from(start).to_string(), "supervisor: starting `/x/capsule supervise`: EOF (exited with 1)");
        assert_eq!(Error::from(RunError::ResultTaken).to_string(), "run failed: the result was already taken");
        let taken = Refused::ListenPathTaken { path: "/s".into(), what: " and is not a socket" };
        assert_eq!(taken.to_string(), "--listen /s: the path exists and is not a socket; remove it or choose another");
    }
}
