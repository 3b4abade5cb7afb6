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
    /// Setting up the sandbox failed before the program ran: the step, the
    /// path and the errno, as reported by PID 1 or the tracee.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// One run could not happen (e.g. it was cancelled); other runs are
    /// unaffected.
    #[error("run failed: {0}")]
    Run(String),
    /// The supervisor died or sent something unreadable.
    #[error("supervisor: {0}")]
    Supervisor(String),
    /// capsule refuses to run in this situation (e.g. as root).
    #[error("{0}")]
    Refused(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
