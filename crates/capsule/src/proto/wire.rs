//! The client ↔ supervisor protocol: length-prefixed JSON messages on a
//! Unix stream socket, file descriptors attached to the header with
//! SCM_RIGHTS.
//!
//! Header: 4 bytes magic `CAP1`, 4 bytes little-endian body length.

use std::os::fd::{OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use crate::proto::result::RunResult;
use crate::proto::spec::RunSpec;
use crate::sys;

const MAGIC: &[u8; 4] = b"CAP1";
/// Largest message accepted (argv and environment included).
pub const MAX_MESSAGE: usize = 64 << 20;

/// How [`send`] errors that come from the socket (not from the message) begin.
pub const IO_ERROR: &str = "sending message";

/// Why [`send`] failed: the message itself (this message only) or the
/// socket (the peer is gone or broken).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The message could not be encoded.
    #[error("encoding message: {0}")]
    Encode(serde_json::Error),
    /// The encoded body (bytes) is over [`MAX_MESSAGE`].
    #[error("message of {0} bytes is larger than the limit of {MAX_MESSAGE}")]
    TooLarge(usize),
    /// The socket failed (errno).
    #[error("{}: {}", IO_ERROR, crate::error::errno_text(*.0))]
    Io(i32),
}

impl SendError {
    /// Whether the socket failed, not the message.
    pub fn is_io(&self) -> bool {
        matches!(self, SendError::Io(_))
    }
}

/// What the client sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientMsg {
    /// First message to a supervisor started with `capsule supervise`: its
    /// configuration.
    Start(crate::proto::config::Config),
    /// Run `spec`. Attached descriptors, in this order: the run's stdin,
    /// stdout and stderr where `stdio[i]` is true, then one for each of
    /// `spec.inherit_fds` (the one-shot client's), then `notify` when
    /// `notify` is true: a pipe the supervisor closes once it has sent the
    /// run's final message (so a caller polling it wakes up, also when the
    /// supervisor dies).
    Run { id: u64, spec: Box<RunSpec>, stdio: [bool; 3], notify: bool },
    /// Run the two programs of an interactive run, connected through the
    /// supervisor's relay. Attached: the solution's and the interactor's
    /// stderr where `stderr[i]` is true, then `notify` as for `Run`.
    /// Answered with `Interacted` or `Failed`; `Kill` and `Cancel` act on
    /// both programs.
    Interact { id: u64, spec: Box<crate::proto::spec::InteractSpec>, stderr: [bool; 2], notify: bool },
    /// Kill the run now; its result (status `killed`) is still sent.
    Kill { id: u64 },
    /// Kill the run if it started, or drop it from the queue; its final
    /// message is `Failed` with "cancelled".
    Cancel { id: u64 },
    /// To a per-user agent, from the front end (`capsule`, which links no
    /// C library and parses no options): run this `capsule` command line
    /// (`args` after the program name) for a caller in directory `cwd`
    /// with environment `env` (`KEY=VALUE` entries). Attached: the
    /// caller's stdin, stdout and stderr. Answered with `Exit`, or
    /// `Declined` when the command needs the caller's own process (files
    /// it opens or writes, a terminal, options that choose another
    /// agent): the front end then runs the full `capsule-cli`.
    Command { args: Vec<String>, cwd: String, env: Vec<String> },
    /// A session request (docs/sessions.md), to an agent or a library's
    /// supervisor; attached: an `exec`'s stdin, stdout and stderr (or
    /// none: /dev/null), then with `notify` a pipe the supervisor closes at
    /// once (wait on the socket). Answered with one `Session` of the same id.
    Session {
        id: u64,
        req: crate::proto::session::SessionReq,
        #[serde(default)]
        notify: bool,
    },
}

/// What the supervisor sends: exactly one final message (`Result` or
/// `Failed`) per `Run`, in any order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerMsg {
    /// Answer to `Start`: the supervisor is ready.
    Started {
        pid: i32,
        cgroups: String,
        /// Whether its runs get cgroups (`cgroups` then says where from).
        #[serde(default)]
        has_cgroups: bool,
    },
    /// The run happened (its status may be any but `error`).
    Result { id: u64, result: Box<RunResult> },
    /// The interactive run happened.
    Interacted { id: u64, result: Box<crate::proto::result::InteractResult> },
    /// The run could not happen: setup failed, it was cancelled, ...
    Failed { id: u64, error: String },
    /// The supervisor cannot work at all (e.g. no user namespaces); it exits.
    Fatal(String),
    /// First message of a per-user agent on a connection it accepted
    /// ([`crate::endpoints::agent`]): requests sent on it will be answered (or fail
    /// with a reason). A client that sees the connection end before this
    /// may send its request elsewhere: it was never read.
    Accepted,
    /// Answer to `Command`: not run here (see there).
    Declined,
    /// Answer to `Command`: the run is over; print `stderr` and exit with
    /// `code`, as `capsule run` would have.
    Exit { code: u8, stderr: String },
    /// Answer to `Session`.
    Session { id: u64, answer: crate::proto::session::SessionAnswer },
}

/// Sends one message with `fds` attached: header and body in one buffer,
/// so the receiver wakes once per message.
pub fn send(sock: RawFd, msg: &impl Serialize, fds: &[RawFd]) -> Result<(), SendError> {
    let mut buf = Vec::with_capacity(512);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&[0u8; 4]);
    serde_json::to_writer(&mut buf, msg).map_err(SendError::Encode)?;
    let len = buf.len() - 8;
    if len > MAX_MESSAGE {
        return Err(SendError::TooLarge(len));
    }
    buf[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    let mut sent = sys::send_with_fds(sock, &buf, fds).map_err(SendError::Io)?;
    while sent < buf.len() {
        sent += sys::send_with_fds(sock, &buf[sent..], &[]).map_err(SendError::Io)?;
    }
    Ok(())
}

/// Receives one message; `Ok(None)` at a clean end of stream.
pub fn recv<T: for<'de> Deserialize<'de>>(sock: RawFd) -> Result<Option<(T, Vec<OwnedFd>)>, String> {
    let mut fds = Vec::new();
    let mut header = [0u8; 8];
    let io = |e: i32| format!("receiving message: {}", crate::error::errno_text(e));
    // Waits in poll, not in recvmsg: a reader blocked in recvmsg on a Unix
    // socket is also woken whenever the peer reads what this end sent (the
    // freed send buffer wakes the socket's one wait queue), and on the way
    // preempts the peer, e.g. a supervisor about to send a run's go
    // message. poll wakes for POLLIN (or the end) only.
    let mut pfd = [libc::pollfd { fd: sock, events: libc::POLLIN, revents: 0 }];
    sys::poll(&mut pfd, -1).map_err(io)?;
    let mut got = 0;
    while got < header.len() {
        let n = sys::recv_with_fds(sock, &mut header[got..], &mut fds).map_err(io)?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err("connection closed in the middle of a message header".into());
        }
        got += n;
    }
    if &header[..4] != MAGIC {
        return Err("not a capsule message (bad magic)".into());
    }
    let len = u32::from_le_bytes(header[4..].try_into().expect("4 bytes")) as usize;
    if len > MAX_MESSAGE {
        return Err(format!("message of {len} bytes is larger than the limit of {MAX_MESSAGE}"));
    }
    let mut body = vec![0u8; len];
    let mut off = 0;
    while off < len {
        let n = sys::recv_with_fds(sock, &mut body[off..], &mut fds).map_err(io)?;
        if n == 0 {
            return Err("connection closed in the middle of a message".into());
        }
        off += n;
    }
    let msg = serde_json::from_slice(&body).map_err(|e| format!("decoding message: {e}"))?;
    Ok(Some((msg, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed errors read as the messages callers have always printed.
    #[test]
    fn send_errors_read_as_before() {
        let e = send(-1, &ClientMsg::Kill { id: 1 }, &[]).unwrap_err();
        assert!(e.is_io());
        assert_eq!(e.to_string(), "sending message: Bad file descriptor (EBADF)");
        let e = SendError::TooLarge(MAX_MESSAGE + 1);
        assert!(!e.is_io());
        assert_eq!(e.to_string(), "message of 67108865 bytes is larger than the limit of 67108864");
        let mut bad = std::collections::BTreeMap::new();
        bad.insert((1, 2), 3);
        let e = send(-1, &bad, &[]).unwrap_err();
        assert!(!e.is_io());
        assert_eq!(e.to_string(), "encoding message: key must be a string");
    }
}
