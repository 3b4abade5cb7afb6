//! The one-shot client (`capsule run`): sends one request over the
//! library's protocol to the user's agent ([`crate::endpoints::agent`]), or to a
//! supervisor forked for it, and returns the result.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::{Error, SetupError, SupervisorError, SysError};
use crate::host::container::Refusal;
use crate::proto::config::Config;
use crate::proto::result::RunResult;
use crate::proto::spec::RunSpec;
use crate::proto::wire::{self, ClientMsg, SendError, ServerMsg};
use crate::supervisor::{Conn, Mode, Supervisor};
use crate::sys::{self, Forked};

/// Runs `spec` once with `stdio` (stdin, stdout, stderr of the program) in
/// a supervisor forked for it. The caller must be single-threaded.
///
/// The result comes as soon as every process of the run is gone; the
/// supervisor then finishes tearing down the run's namespaces in the
/// background and is not waited for: the caller (the `capsule` command)
/// exits right after, and the orphan is reaped by init.
/// A stream given as `None` follows the spec (a capture; `/dev/null`).
pub fn run_once(spec: &RunSpec, stdio: [Option<RawFd>; 3], agent: bool) -> Result<RunResult, Error> {
    start_once(spec, stdio, agent)?.wait()
}

/// A run started by [`start_once`], in flight: its result arrives on
/// [`OnceRun::fd`], so the caller can do other work meanwhile (relay a
/// terminal) in the same thread.
pub struct OnceRun {
    sock: OwnedFd,
    /// The supervisor forked for this run; None for an agent's.
    pid: Option<i32>,
    sent: Result<(), SendError>,
}

/// Like [`run_once`], but returns once the request is sent; the descriptors
/// in `stdio` went with it, so the caller may close its own copies at once.
/// The caller must be single-threaded (the supervisor is forked).
/// With `agent`, the run goes to the user's agent where one serves (or
/// can serve) this caller ([`crate::endpoints::agent`]); else, or when none does, to
/// a supervisor forked for it.
pub fn start_once(spec: &RunSpec, stdio: [Option<RawFd>; 3], agent: bool) -> Result<OnceRun, Error> {
    start(spec, stdio, agent, None)
}

/// Like [`start_once`] in a supervisor forked for it, which joins the user
/// namespace `user_ns` (`host::subids::Namespace`: the caller as 0, the
/// spec's `subordinate` ids as 1) instead of making its own.
pub fn start_once_in(spec: &RunSpec, stdio: [Option<RawFd>; 3], user_ns: RawFd) -> Result<OnceRun, Error> {
    start(spec, stdio, false, Some(user_ns))
}

fn start(spec: &RunSpec, stdio: [Option<RawFd>; 3], agent: bool, user_ns: Option<RawFd>) -> Result<OnceRun, Error> {
    spec.validate()?;
    if crate::host::identity::is_real_root() {
        return Err(crate::host::identity::root_refusal());
    }
    // The variables the run keeps are the caller's: taken here, so that a
    // supervisor with another environment (an agent) gives the same run.
    let mut spec = spec.clone();
    for k in std::mem::take(&mut spec.keep_env) {
        if let Some(v) = std::env::var_os(&k) {
            spec.env.entry(k).or_insert_with(|| v.to_string_lossy().into_owned());
        }
    }
    // The caller's descriptors for `inherit_fds` follow the streams (wire::ClientMsg::Run).
    let fds: Vec<RawFd> = stdio.iter().flatten().copied().chain(spec.inherit_fds.iter().copied()).collect();
    let msg = ClientMsg::Run { id: 1, spec: Box::new(spec), stdio: stdio.map(|s| s.is_some()), notify: false };
    let ClientMsg::Run { spec, .. } = &msg else { unreachable!() };
    if agent {
        match crate::endpoints::agent::send(spec, &msg, &fds) {
            Ok(c) => return Ok(OnceRun { sock: c.sock, pid: None, sent: Ok(()) }),
            Err(crate::endpoints::agent::Missed::Fatal(e)) => return Err(e),
            Err(crate::endpoints::agent::Missed::Fallback) => {}
        }
    }
    fork_supervisor(spec, &msg, &fds, user_ns)
}

/// Forks a supervisor for `msg`'s one run and sends it.
fn fork_supervisor(spec: &RunSpec, msg: &ClientMsg, fds: &[RawFd], user_ns: Option<RawFd>) -> Result<OnceRun, Error> {
    let (client, server) = sys::socketpair_stream().map_err(|e| SysError::new("socketpair", e))?;
    let parent = sys::getpid();
    // One run: the supervisor's network is the run's own, and a thread
    // makes it while PID 1 builds the tree (docs/latency.md).
    let config = Config {
        parallel: 1,
        cgroup: spec.cgroup.clone(),
        prepare_ahead: false,
        own_network: false,
        subordinate: user_ns.and(spec.subordinate),
        user_ns,
        ..Config::default()
    };
    // SAFETY: the caller is single-threaded (`start_once`'s contract; this is its helper).
    let pid = match unsafe { sys::fork() }.map_err(|e| {
        let err = SysError::new("clone3 (supervisor)", e);
        // docker's default seccomp profile answers clone3 with ENOSYS.
        match crate::host::container::hint(Refusal::Seccomp, "clone3, the supervisor's fork", e) {
            Some(h) => err.hint(h),
            None => err,
        }
    })? {
        Forked::Child => {
            drop(client);
            supervisor_main(parent, server, config)
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop(server);
    // A supervisor that cannot start answers at once and exits, so the
    // request may meet a closed socket: its answer is still there to read.
    let sent = wire::send(client.as_raw_fd(), msg, fds);
    Ok(OnceRun { sock: client, pid: Some(pid), sent })
}

impl OnceRun {
    /// Readable when the result is in (or the supervisor died).
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Has the run killed (SIGINT to `capsule isolate`): its result, status
    /// `killed`, still comes to [`OnceRun::wait`].
    pub fn kill(&self) -> Result<(), Error> {
        wire::send(self.sock.as_raw_fd(), &ClientMsg::Kill { id: 1 }, &[])
            .map_err(|e| SupervisorError::Gone(e.to_string()).into())
    }

    /// Waits for the result.
    pub fn wait(self) -> Result<RunResult, Error> {
        let outcome = self.answer();
        drop(self.sock);
        // The supervisor exits right after its answer: wait for it (a
        // second at most), so that no process of this `capsule run`
        // outlives it in the caller's cgroup, then reap it.
        if let Some(pid) = self.pid {
            if let Ok(pidfd) = sys::pidfd_open(pid) {
                let mut pfd = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
                let _ = sys::poll(&mut pfd, 1000);
            }
            let _ = sys::waitpid(pid, true);
        }
        outcome
    }

    fn answer(&self) -> Result<RunResult, Error> {
        let answer = wire::recv::<ServerMsg>(self.sock.as_raw_fd());
        if let (Err(e), Err(_) | Ok(None)) = (&self.sent, &answer) {
            return Err(SupervisorError::Gone(e.to_string()).into());
        }
        match answer.map_err(SupervisorError::Gone)? {
            Some((ServerMsg::Result { result, .. }, _)) => Ok(*result),
            Some((ServerMsg::Failed { error, .. }, _)) => Ok(RunResult::error(error)),
            Some((ServerMsg::Fatal(msg), _)) => Err(SetupError::Start(msg).into()),
            Some((
                ServerMsg::Started { .. }
                | ServerMsg::Interacted { .. }
                | ServerMsg::Accepted
                | ServerMsg::Declined
                | ServerMsg::Exit { .. }
                | ServerMsg::Session { .. },
                _,
            )) => Err(SupervisorError::Unexpected("unexpected message").into()),
            None => Err(SupervisorError::Gone("the supervisor exited without answering".into()).into()),
        }
    }
}

/// Makes the calling (freshly forked or exec'd) process a supervisor
/// process: only `sock` (as fd 3) and stderr are kept of what it inherited,
/// 0 and 1 become /dev/null.
pub fn isolate_fds(sock: OwnedFd) -> OwnedFd {
    isolate_fds_keeping(sock, None)
}

/// [`isolate_fds`], moving `keep` (above 3) to fd 4 and keeping it too.
fn isolate_fds_keeping(sock: OwnedFd, keep: Option<RawFd>) -> OwnedFd {
    // Keep nothing of the caller but the socket and stderr: the caller's
    // other descriptors, CLOEXEC or not, must not reach any run, and 0-2
    // must stay occupied so received descriptors land above them.
    let raw = std::os::fd::IntoRawFd::into_raw_fd(sock);
    if raw != 3 {
        let _ = sys::dup2(raw, 3);
        sys::close(raw);
    }
    let _ = sys::set_cloexec(3, true);
    // SAFETY: fd 3 is the socket `raw` released (dup2'd there), owned by nothing else.
    let sock = unsafe { sys::reclaim_fd(3) };
    if let Some(k) = keep {
        let _ = sys::dup2(k, 4);
    }
    let _ = sys::close_from(if keep.is_some() { 5 } else { 4 });
    if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR, 0) {
        for fd in 0..3 {
            if fd != 2 || sys::fd_mode(2).is_err() {
                let _ = sys::dup2(null.as_raw_fd(), fd);
            }
        }
    }
    sock
}

/// The forked supervisor's life: never returns.
fn supervisor_main(parent: i32, sock: OwnedFd, mut config: Config) -> ! {
    // Die with the client (the thread that forked us is its only thread).
    let _ = sys::set_pdeathsig(libc::SIGKILL);
    if sys::getppid() != parent {
        sys::exit(1);
    }
    // The user namespace to join survives `isolate_fds`, as fd 4 (out of the way of the socket's move first).
    let keep = match config.user_ns.map(|fd| sys::dup_at_least(fd, 64)) {
        None => None,
        Some(Ok(high)) => Some(high),
        Some(Err(_)) => sys::exit(1),
    };
    config.user_ns = keep.map(|_| 4);
    let sock = isolate_fds_keeping(sock, keep);
    serve_socket(sock, &config, true)
}

/// Runs a supervisor on `sock` (the library's protocol) until the client
/// hangs up, or once its one request is answered (`once`); exits the
/// process.
pub fn serve_socket(sock: OwnedFd, config: &Config, once: bool) -> ! {
    let sock = std::os::fd::IntoRawFd::into_raw_fd(sock);
    super::start(config, super::Job::Socket { sock, once })
}

/// [`serve_socket`]'s supervisor, started (or not): serves, or answers
/// the pending request with the reason. Exits the process.
pub(crate) fn socket_job(sock: OwnedFd, once: bool, started: Result<Supervisor, Error>) -> ! {
    let code = match started {
        Ok(sup) => {
            if !once {
                let started = ServerMsg::Started {
                    pid: sys::getpid(),
                    cgroups: sup.cgroup_note().to_string(),
                    has_cgroups: sup.has_cgroups(),
                };
                if wire::send(sock.as_raw_fd(), &started, &[]).is_err() {
                    sys::exit(1);
                }
            }
            // Drops the supervisor at the end: its cgroups are removed (no
            // destructors run past exit).
            sup.serve(vec![Conn::binary(sock)], None, if once { Mode::Once } else { Mode::Serve });
            0
        }
        Err(e) => {
            // Answer the pending request with the reason.
            let _ = wire::send(sock.as_raw_fd(), &ServerMsg::Fatal(e.to_string()), &[]);
            1
        }
    };
    sys::exit(code)
}

/// `capsule supervise`: the supervisor of a [`crate::sandbox::Sandbox`],
/// on fd 3; reads its configuration first.
pub fn supervise_main() -> ! {
    // SAFETY: fd 3 is the socket the client passed at spawn (`spawn_supervisor`), owned by nothing else here.
    let sock = isolate_fds(unsafe { sys::reclaim_fd(3) });
    let config = match wire::recv::<ClientMsg>(sock.as_raw_fd()) {
        Ok(Some((ClientMsg::Start(config), _))) => config,
        Ok(_) | Err(_) => {
            let _ = wire::send(
                sock.as_raw_fd(),
                &ServerMsg::Fatal(
                    "`capsule supervise` expects a Start message on fd 3 (it is started by the library)".into(),
                ),
                &[],
            );
            sys::exit(2)
        }
    };
    serve_socket(sock, &config, false)
}
