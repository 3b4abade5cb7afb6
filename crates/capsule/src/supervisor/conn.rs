//! A supervisor's connections, what it serves them in (`Mode`), and what ends an agent.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::proto::lines::LineReader;
use crate::proto::spec::RunSpec;

/// How a connection frames its messages.
pub enum Framing {
    /// The library's: length-prefixed JSON with SCM_RIGHTS ([`crate::proto::wire`]).
    Binary,
    /// `capsule serve`'s JSON lines ([`crate::endpoints::serve`]).
    Lines,
}

/// A client of the supervisor.
pub struct Conn {
    pub(crate) read: OwnedFd,
    /// None: write to `read` (a socket).
    pub(crate) write: Option<OwnedFd>,
    pub(crate) framing: Framing,
    pub(crate) lines: LineReader,
    /// Responses not yet written (non-blocking sockets).
    pub(crate) out: Vec<u8>,
    /// No more requests will come.
    pub(crate) eof: bool,
    /// The client is gone: its runs are killed, nothing more is written.
    pub(crate) gone: bool,
    /// Stdin/stdout of `capsule serve`: at EOF, finish the accepted runs.
    pub(crate) finish_at_eof: bool,
}

impl Conn {
    /// The library's connection (a socket).
    pub fn binary(sock: OwnedFd) -> Conn {
        Conn::new(sock, None, Framing::Binary, false)
    }

    /// `capsule serve` on stdin/stdout.
    pub fn lines_stdio(stdin: OwnedFd, stdout: OwnedFd) -> Conn {
        Conn::new(stdin, Some(stdout), Framing::Lines, true)
    }

    pub(crate) fn new(read: OwnedFd, write: Option<OwnedFd>, framing: Framing, finish_at_eof: bool) -> Conn {
        Conn {
            read,
            write,
            framing,
            lines: LineReader::default(),
            out: Vec::new(),
            eof: false,
            gone: false,
            finish_at_eof,
        }
    }

    pub(crate) fn wfd(&self) -> RawFd {
        self.write.as_ref().unwrap_or(&self.read).as_raw_fd()
    }
}

/// How the loop ends.
pub enum Mode {
    /// Until every connection is closed (the library, `capsule serve`).
    Serve,
    /// `capsule serve --listen`: until a signal; a connection is taken only
    /// from a peer with this [`peer_fingerprint`] (the server's caller's):
    /// others, sandboxed programs among them, get an error line.
    Listen { peer: String },
    /// After one request is answered (the one-shot `capsule run`).
    Once,
    /// A per-user agent ([`crate::endpoints::agent`]): clients of the library's
    /// protocol accepted on the listener, one connection per `capsule run`;
    /// ends when idle too long, or once the host's mount table changed
    /// and the runs in flight are done.
    Agent(AgentLife),
}

/// How an agent plans a command line sent by the front end
/// ([`ClientMsg::Command`]): the `capsule` command's own option parsing,
/// which the library does not have; the command passes it to
/// [`crate::endpoints::resume_main`].
pub type Planner = fn(args: &[String], cwd: &Path) -> Planned;

/// What an agent does with a front end's command line.
pub enum Planned {
    /// The command needs the caller's own process: the front end runs the
    /// full command-line tool.
    Decline,
    /// Run `spec` and report as `capsule run` (`quiet`: `-q`) does.
    Run { spec: Box<RunSpec>, quiet: bool },
    /// The command line is wrong in a way `capsule run` reports as a
    /// failed run (a bad value): report `error`.
    Fail { error: String, quiet: bool },
}

/// What ends an agent.
pub struct AgentLife {
    /// Exit after this long without a client, a request or a run.
    pub idle: std::time::Duration,
    /// The host's `/proc/self/mountinfo`, opened before the supervisor
    /// entered its namespaces: POLLPRI once the host's mount table changes.
    /// The agent's view was copied at its start and is private (nothing
    /// propagates in), so from then on it would show a stale host: it
    /// stops taking requests (later ones start a new agent).
    pub host_mounts: Option<OwnedFd>,
    /// The listening socket's path and (dev, inode): unlinked on the way
    /// out only while it is still this agent's.
    pub path: PathBuf,
    pub ino: (u64, u64),
    /// The identity's lock (`flock`ed) and its path: given up with the
    /// socket, so that a new agent can start while this one finishes.
    pub lock: Option<(OwnedFd, PathBuf)>,
    /// [`peer_fingerprint`] of the caller that started the agent: a peer
    /// with another one (a sandboxed program that can see the socket, as
    /// with `--bind /tmp /tmp`: another user namespace, a deeper PID
    /// namespace, no_new_privs, seccomp filters) is refused and forks a
    /// supervisor of its own, inside its sandbox, instead.
    pub peer: String,
    /// Plans the front end's command lines; None: they are declined.
    pub planner: Option<Planner>,
    /// Idle this long, the agent steps aside when another agent of the user
    /// was asked for a run since its own last one ([`AgentLife::step_aside`]).
    pub step_aside: std::time::Duration,
    /// When [`AgentLife::mark_used`] last stamped the socket.
    pub marked: std::cell::Cell<Option<std::time::Instant>>,
}

impl AgentLife {
    /// The idle time after which an agent steps aside for a busier one: a
    /// tenth of its idle time, from 5 to 30 s (never more than the idle time).
    pub fn step_aside(idle: std::time::Duration) -> std::time::Duration {
        let s = std::time::Duration::from_secs;
        (idle / 10).clamp(s(5), s(30)).min(idle)
    }

    /// Marks a request on this agent (its socket's mtime), for the user's
    /// other agents to see; at most once a second (they look every 5 s or more).
    pub fn mark_used(&self) {
        let now = std::time::Instant::now();
        if self.marked.get().is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1)) {
            return;
        }
        self.marked.set(Some(now));
        if let Ok(path) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) {
            let _ = crate::sys::touch(&path);
        }
    }

    /// Whether another agent of the user (a socket `agent-*.sock` beside
    /// this one's) had a request after this one's last: then this one, idle,
    /// goes, and the user keeps the agents in use rather than one per
    /// identity ever met (a terminal per systemd scope, a changed `PATH`).
    pub fn others_used_since(&self) -> bool {
        let (Some(dir), Ok(mine)) = (self.path.parent(), std::fs::symlink_metadata(&self.path)) else { return false };
        let Ok(mine) = mine.modified() else { return false };
        let Ok(entries) = std::fs::read_dir(dir) else { return false };
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("agent-")
                && name.ends_with(".sock")
                && e.path() != self.path
                && e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t > mine)
        })
    }
}

impl AgentLife {
    /// Gives up the socket (if still this agent's) and then the lock, whose
    /// file goes while still held (`agent::send` checks that the file it
    /// locked is still at its path). Once; later calls do nothing.
    pub fn give_up(&mut self) {
        let Some((fd, lock_path)) = self.lock.take() else { return };
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            use std::os::unix::fs::MetadataExt;
            if (m.dev(), m.ino()) == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        let _ = std::fs::remove_file(lock_path);
        drop(fd);
    }
}
