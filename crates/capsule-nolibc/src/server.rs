//! Who listens on an agent's socket, checked by every client before it
//! sends anything (the front end, `capsule-cli`): a socket that a sandboxed
//! program of the same user put in the agent's place would otherwise get
//! the caller's environment, arguments, directory and standard streams.
//!
//! The other direction is the agent's (`capsule::supervisor::peer_fingerprint`):
//! it refuses clients in other namespaces than its callers'.

use core::ffi::CStr;

use crate::sys;

/// Checks that the process listening at the other end of `sock` (just
/// connected to an agent's socket) is an agent of this caller running
/// `exe` (the full command-line tool, whose code agents run); else why
/// not, for a warning. In order:
///
/// 1. The listener's uid (as it was at `listen`) is the caller's.
/// 2. Its process (a pidfd from `SO_PEERPIDFD` where the kernel has it,
///    6.5+; else the pid from `SO_PEERCRED`) is alive and in the caller's
///    PID namespace: every sandboxed program, a run's or its children,
///    lives in a PID namespace nested below it, while an agent is a fork
///    of a caller that stays in it (its runs get the new namespaces).
///    `/proc/PID/ns/pid` needs ptrace-read access: a caller confined by
///    Landlock gets none to a process outside its own domain, so it is
///    never served by an agent confined less than itself.
/// 3. That process runs `exe` (same device and inode).
/// 4. With a pidfd: the process is still alive after those reads, so the
///    pid they went through was not reused by another process meanwhile.
///    (Without one, before Linux 6.5, a listener that exited leaves its
///    pid to be reused: the agents' directory, covered in every run, is
///    then what keeps sandboxed programs away from the socket.)
pub fn check_agent(sock: &sys::Fd, exe: &CStr) -> Result<(), &'static str> {
    let (cred_pid, uid, _) = sys::peer_cred(sock).map_err(|_| "its credentials cannot be read (SO_PEERCRED)")?;
    if uid != sys::geteuid() {
        return Err("it is listened on by another user");
    }
    let pidfd = match sys::peer_pidfd(sock) {
        Ok(fd) => Some(fd),
        // Kernels before 6.5 (EINVAL: some that reject the option's size).
        Err(ENOPROTOOPT | EINVAL) => None,
        Err(_) => return Err("the process that listens there is gone"),
    };
    let pid = match &pidfd {
        Some(fd) => pidfd_pid(fd).ok_or("the process that listens there is gone or outside your PID namespace")?,
        None => cred_pid,
    };
    if pid <= 0 {
        return Err("the process that listens there is outside your PID namespace");
    }
    let mut path = NumPath::new(b"/proc/", pid);
    let (mut mine, mut theirs) = ([0u8; 64], [0u8; 64]);
    let own = sys::readlink(c"/proc/self/ns/pid", &mut mine).map_err(|_| "/proc/self/ns/pid is unreadable")?;
    let peer = sys::readlink(path.with(b"/ns/pid"), &mut theirs)
        .map_err(|_| "the process that listens there cannot be inspected (gone, or confined apart from you)")?;
    if own != peer {
        return Err("the process that listens there is in another PID namespace (a sandboxed program)");
    }
    let runs = sys::stat(path.with(b"/exe"), 0).ok();
    let code = sys::stat(exe, 0).ok();
    if runs.is_none() || runs.map(|s| (s.dev, s.ino)) != code.map(|s| (s.dev, s.ino)) {
        return Err("the process that listens there does not run capsule-cli");
    }
    if let Some(fd) = &pidfd {
        if pidfd_pid(fd) != Some(pid) {
            return Err("the process that listens there is gone");
        }
    }
    Ok(())
}

const EINVAL: i32 = 22;
const ENOPROTOOPT: i32 = 92;

/// The pid of the process `fd` (a pidfd) refers to, in the caller's PID
/// namespace (`Pid:` of its fdinfo); None when it has exited (-1) or is
/// outside it (0).
fn pidfd_pid(fd: &sys::Fd) -> Option<i32> {
    let mut path = NumPath::new(b"/proc/self/fdinfo/", fd.0);
    let path = path.with(b"");
    let mut buf = [0u8; 512];
    let info = sys::read_file(path, &mut buf).ok()?;
    let line = info.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"Pid:"))?;
    let text = core::str::from_utf8(line).ok()?.trim();
    let pid: i32 = text.parse().ok()?;
    (pid > 0).then_some(pid)
}

/// A path of a prefix, a number and a suffix (`/proc/PID/ns/pid`), built
/// without allocating.
struct NumPath {
    buf: [u8; 64],
    base: usize,
}

impl NumPath {
    /// `prefix` (at most 24 bytes) and `n` in decimal.
    fn new(prefix: &[u8], n: i32) -> Self {
        let mut buf = [0u8; 64];
        buf[..prefix.len()].copy_from_slice(prefix);
        let mut num = [0u8; 20];
        let digits = crate::decimal(n as u64, &mut num);
        let base = prefix.len() + digits.len();
        buf[prefix.len()..base].copy_from_slice(digits);
        NumPath { buf, base }
    }

    /// The path with `rest` appended (at most 16 bytes).
    fn with(&mut self, rest: &[u8]) -> &CStr {
        let end = self.base + rest.len();
        self.buf[self.base..end].copy_from_slice(rest);
        self.buf[end] = 0;
        CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_numbers() {
        assert_eq!(NumPath::new(b"/proc/", 123).with(b"/ns/pid"), c"/proc/123/ns/pid");
        assert_eq!(NumPath::new(b"/proc/self/fdinfo/", 7).with(b""), c"/proc/self/fdinfo/7");
    }

    /// The other end of a socket pair is this process: it passes as an
    /// agent running this test's binary, not as one running another.
    #[test]
    fn the_listener_must_run_the_given_binary() {
        use std::os::fd::IntoRawFd;
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = sys::Fd(a.into_raw_fd());
        assert_eq!(check_agent(&fd, c"/proc/self/exe"), Ok(()));
        assert_eq!(check_agent(&fd, c"/bin/sh"), Err("the process that listens there does not run capsule-cli"));
    }
}
