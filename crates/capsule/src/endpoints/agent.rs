//! The per-user agent: a warm supervisor that `capsule run` reuses.
//!
//! A one-shot `capsule run` that forks a supervisor of its own pays, on
//! every call, for what a long-lived supervisor does once (its user
//! namespace, the run's network namespace, compiling the seccomp policy)
//! and for building the sandbox while the caller waits. So the first
//! `capsule run` starts an *agent*: a supervisor that listens on a socket
//! only the user can reach (its directory is covered in every run, and
//! clients check who listens there before they send anything:
//! `capsule_nolibc::server`), prepares the next sandbox of the last run's
//! shape while idle (fresh for every run, never reused), and exits after
//! [`DEFAULT_IDLE`] without work. Later `capsule run`s send their request
//! there, as the library's clients do, and get their result back.
//!
//! An agent serves exactly the callers a supervisor forked by them would
//! have been: everything a run inherits from its supervisor goes into the
//! agent's key ([`Identity`]): the binary, the ids and groups, every
//! namespace, the root directory, the cgroup, the resource limits, the
//! umask, capabilities, `no_new_privs`, seccomp mode, CPU affinity, nice
//! value and scheduling, I/O priority, OOM score, LSM label, personality,
//! and the environment variables the supervisor reads (`HOME`, `PATH`,
//! `XDG_RUNTIME_DIR`, `CAPSULE_*`). A caller that differs in any of them
//! gets an agent of its own. The environment a run asks for (`keep_env`)
//! is taken from the caller before the request is sent. What a forked
//! supervisor would have seen only at its start is the host's mount
//! table: an agent stops taking requests as soon as that changes
//! ([`crate::supervisor::AgentLife::host_mounts`]).
//!
//! Each run keeps what a one-shot run had of its own: PID, mount, user,
//! cgroup, IPC and UTS namespaces, and a loopback-only network namespace no
//! concurrent run shares (`Config::own_network`; kept and lent to one run
//! at a time, docs/network-reuse.md), so concurrent `capsule run`s cannot
//! reach each other over 127.0.0.1 nor collide on a port.
//!
//! `CAPSULE_AGENT=off` (or `--no-agent`) forks a supervisor per run;
//! `CAPSULE_AGENT_IDLE=SECONDS` sets the idle time; `capsule agent
//! status|stop` lists and stops the user's agents.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Refused, SetupError, SupervisorError, SysError};
use crate::proto::config::Config;
use crate::proto::spec::RunSpec;
use crate::proto::wire::{self, ClientMsg, ServerMsg};
use crate::supervisor::{AgentLife, Conn, Mode, Supervisor};
use crate::sys::{self, Forked};

/// How long an agent waits for work before it exits.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);
/// Runs an agent runs at once (more wait in its queue): a `make -j` of
/// sandboxed commands should not be serialized by its agent.
pub const AGENT_PARALLEL: usize = 64;
/// The environment variable that turns the agent off (`off`, `0`, `no`,
/// `false`).
pub const AGENT_ENV: &str = "CAPSULE_AGENT";
/// The environment variable with the idle time, in seconds.
pub const IDLE_ENV: &str = "CAPSULE_AGENT_IDLE";

pub use crate::supervisor::{Planned, Planner};

/// The configuration of the agents the front end finds: the one of a
/// run without cgroup options (`capsule_nolibc::identity::DEFAULT_CONFIG`
/// is its JSON, checked by a test).
pub fn default_config() -> Config {
    config_for(&RunSpec::default())
}

/// What `CAPSULE_AGENT` says: true for on (unset, empty, `on`, `1`,
/// `yes`, `true`), false for off (`off`, `0`, `no`, `false`); anything
/// else is an error naming the variable.
pub fn setting() -> Result<bool, Refused> {
    match std::env::var(AGENT_ENV) {
        Err(_) => Ok(true),
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "" | "on" | "1" | "yes" | "true" => Ok(true),
            "off" | "0" | "no" | "false" => Ok(false),
            _ => Err(Refused::Setting { var: AGENT_ENV, value: v, expected: "on or off" }),
        },
    }
}

/// Whether `capsule run` may use an agent, and if not, why.
pub fn enabled() -> Result<(), String> {
    match setting() {
        Ok(true) => {}
        Ok(false) => return Err(format!("{AGENT_ENV}={}", std::env::var(AGENT_ENV).unwrap_or_default())),
        Err(e) => return Err(e.to_string()),
    }
    // Re-started in a transient systemd scope for its cgroups: an agent
    // started there would keep the scope alive, and the next run gets
    // another scope, so another key. (Those runs fork their supervisor.)
    if std::env::var_os(crate::host::cgroups::IN_SCOPE_ENV).is_some() {
        return Err("running in a transient systemd scope".into());
    }
    // A caller under no_new_privs or a seccomp filter may be confined in a
    // way the identity cannot show (a Landlock domain, which nothing
    // compares from userspace; which filters): an agent started by another
    // caller of the same identity could make runs it may not. It forks its
    // own supervisor, which inherits its confinement; and since no agent
    // is started by such a caller, every agent refuses them as clients
    // (`supervisor::peer_fingerprint` has both).
    if confined() {
        return Err("this process has no_new_privs or a seccomp filter (its confinement, e.g. Landlock, cannot be \
                    compared with an agent's)"
            .into());
    }
    Ok(())
}

/// Whether the calling process has `no_new_privs` set or a seccomp mode.
fn confined() -> bool {
    use capsule_nolibc::sys::prctl_get;
    prctl_get(libc::PR_GET_NO_NEW_PRIVS as usize) != 0 || prctl_get(libc::PR_GET_SECCOMP as usize) != 0
}

/// The idle time from `CAPSULE_AGENT_IDLE`, else [`DEFAULT_IDLE`].
pub fn idle_time() -> Result<Duration, Refused> {
    match std::env::var(IDLE_ENV) {
        Err(_) => Ok(DEFAULT_IDLE),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if (1..=86_400).contains(&s) => Ok(Duration::from_secs(s)),
            _ => Err(Refused::Setting { var: IDLE_ENV, value: v, expected: "a number of seconds from 1 to 86400" }),
        },
    }
}

/// The directory of the user's agent sockets: `$XDG_RUNTIME_DIR/capsule`
/// when that is the user's own private directory, short enough for a
/// socket path beneath it, else
/// `/tmp/capsule-agent-UID`; created mode 0700. None when neither is
/// (another user's directory, a link, open to others): no agent then.
pub fn socket_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = sys::geteuid();
    let private = |p: &Path, strict: bool| {
        std::fs::symlink_metadata(p)
            .ok()
            .is_some_and(|m| m.is_dir() && m.uid() == uid && (!strict || m.mode() & 0o077 == 0))
    };
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| {
        p.is_absolute() && capsule_nolibc::identity::runtime_dir_fits(p.as_os_str().len()) && private(p, true)
    });
    let dir = match runtime {
        Some(r) => r.join("capsule"),
        None => PathBuf::from(format!("/tmp/capsule-agent-{uid}")),
    };
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    private(&dir, true).then_some(dir)
}

/// What a run inherits from its supervisor: two callers with the same
/// identity get the same runs from a supervisor forked by either. Computed
/// by `capsule_nolibc::identity`, the code the front end (`capsule`, no C
/// library) runs too, so both find the same agent.
pub struct Identity {
    text: String,
    key: String,
}

impl Identity {
    /// The calling process's identity for runs under `config` (docs/agent.md has its cost).
    /// Single-threaded callers only (the umask is read by setting it).
    pub fn current(config: &Config) -> Identity {
        use capsule_nolibc::identity::{self, Fnv, Sink};
        use std::os::unix::ffi::OsStrExt;
        struct Both(Fnv, Vec<u8>);
        impl Sink for Both {
            fn put(&mut self, bytes: &[u8]) {
                self.0.put(bytes);
                self.1.extend_from_slice(bytes);
            }
        }
        let vars: Vec<_> = std::env::vars_os().collect();
        let env = vars.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes()));
        let config = serde_json::to_string(config).unwrap_or_default();
        let mut sink = Both(Fnv::default(), Vec::with_capacity(2048));
        identity::write(&mut sink, c"/proc/self/exe", env, &config);
        let key = String::from_utf8_lossy(&sink.0.key()).into_owned();
        Identity { text: String::from_utf8_lossy(&sink.1).into_owned(), key }
    }

    /// The agent's name: a 128-bit digest of the identity.
    pub fn key(&self) -> String {
        self.key.clone()
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The configuration of the agent that serves `spec`.
pub fn config_for(spec: &RunSpec) -> Config {
    Config {
        parallel: AGENT_PARALLEL,
        cgroup: spec.cgroup.clone(),
        prepare_ahead: true,
        capsule_bin: None,
        own_network: true,
        fresh_network: false,
        // An agent is the user's warm supervisor for `capsule run`, whose runs are not pinned.
        per_cpu: false,
        // An agent's user namespace is its own: it maps no subordinate ids (such runs are refused).
        subordinate: None,
        user_ns: None,
    }
}

/// A connection to an agent that took `msg` (its `Accepted` is in).
pub struct Connected {
    pub sock: OwnedFd,
}

/// Why no agent took the request (the caller forks a supervisor instead),
/// or the agent's own start failed with an error the caller must report.
pub enum Missed {
    /// Use a supervisor of your own.
    Fallback,
    /// An agent was started for this request and could not work at all
    /// (a forked supervisor would fail the same way): report it.
    Fatal(Error),
}

/// Sends `msg` (with `fds`) to the agent for `spec`, starting one if there
/// is none. Returns once an agent has accepted the connection, so the
/// request will be answered there; `Missed::Fallback` when it was never
/// read by one. The caller must be single-threaded (an agent is forked).
pub fn send(spec: &RunSpec, msg: &ClientMsg, fds: &[RawFd]) -> Result<Connected, Missed> {
    // A setting that makes no sense is the caller's to fix, not a reason
    // to run some other way.
    let idle = idle_time().map_err(|e| Missed::Fatal(e.into()))?;
    if enabled().is_err() {
        return Err(setting().map_or_else(|e| Missed::Fatal(e.into()), |_| Missed::Fallback));
    }
    if resolved_in_cwd(spec) {
        return Err(Missed::Fallback);
    }
    let Some(dir) = socket_dir() else { return Err(Missed::Fallback) };
    let config = config_for(spec);
    let key = Identity::current(&config).key();
    let path = dir.join(format!("agent-{key}.sock"));
    // An agent of this identity is running: give it the request.
    if let Ok(sock) = connect(&path) {
        verified(&path, &sock)?;
        if let Some(c) = deliver(sock, msg, fds)? {
            return Ok(c);
        }
    }
    // None is (or it went away between connect and accept): start one,
    // unless another `capsule run` of the same identity is starting it.
    let lock_path = path.with_extension("lock");
    let lock = {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path);
        opened.map_err(|_| Missed::Fallback)?
    };
    if sys::flock_nb(lock.as_raw_fd(), true).is_err() {
        // Being started (or alive but not accepting yet): a short wait for it.
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            if let Ok(sock) = connect(&path) {
                verified(&path, &sock)?;
                if let Some(c) = deliver(sock, msg, fds)? {
                    return Ok(c);
                }
            }
        }
        return Err(Missed::Fallback);
    }
    // An agent removes its lock file on its way out, while holding it: a
    // lock taken on a file no longer at the path is worth nothing.
    let id = |m: std::io::Result<std::fs::Metadata>| {
        use std::os::unix::fs::MetadataExt;
        m.ok().map(|m| (m.dev(), m.ino()))
    };
    let held = id(lock.metadata());
    if held.is_none() || held != id(std::fs::symlink_metadata(&lock_path)) {
        return Err(Missed::Fallback);
    }
    let sock = spawn(&path, lock.into(), &config, idle).ok_or(Missed::Fallback)?;
    match deliver(sock, msg, fds)? {
        Some(c) => Ok(c),
        None => Err(Missed::Fallback),
    }
}

/// A connection to the socket at `path` (close-on-exec).
fn connect(path: &Path) -> std::io::Result<OwnedFd> {
    std::os::unix::net::UnixStream::connect(path).map(OwnedFd::from)
}

/// Whether an agent of this caller listens at the other end of `sock`
/// (`capsule_nolibc::server::check_agent`: same user, same PID namespace,
/// the same binary, alive); else why not.
fn check_server(sock: &OwnedFd) -> Result<(), &'static str> {
    // Borrowed: the check does not close it.
    let fd = std::mem::ManuallyDrop::new(capsule_nolibc::sys::Fd(sock.as_raw_fd()));
    capsule_nolibc::server::check_agent(&fd, c"/proc/self/exe")
}

/// [`check_server`] before a request is sent: a listener that is not this
/// caller's agent (a sandboxed program's socket put in its place) gets
/// nothing; the run goes on without an agent, with a warning.
fn verified(path: &Path, sock: &OwnedFd) -> Result<(), Missed> {
    check_server(sock).map_err(|why| {
        eprintln!(
            "capsule: warning: `{}`: not your agent ({why}); running without an agent (remove that socket if you did not \
             put it there)",
            path.display()
        );
        Missed::Fallback
    })
}

/// Whether the supervisor would resolve a path of `spec` against its own
/// working directory (a relative path from a profile): the agent's is `/`,
/// a forked supervisor's the caller's, so such a spec is not sent there.
fn resolved_in_cwd(spec: &RunSpec) -> bool {
    use crate::proto::spec::Stdio;
    let relative = |p: &Path| !p.is_absolute();
    let stdio = [&spec.stdin, &spec.stdout, &spec.stderr].into_iter().flatten().any(|io| match io {
        Stdio::Path(p) => relative(p),
        Stdio::Pipe(f) => relative(&f.pipe),
        _ => false,
    });
    let policy = matches!(&spec.seccomp, crate::proto::policy::PolicyName::File(p) if relative(p));
    stdio || policy || spec.cgroup.path.as_deref().is_some_and(relative)
}

/// Sends the request and waits for the agent's first message: `Accepted`
/// (Some), the end of the connection before it (None: the request was
/// never read, it may go elsewhere), or `Fatal` (an agent that could not
/// start).
fn deliver(sock: OwnedFd, msg: &ClientMsg, fds: &[RawFd]) -> Result<Option<Connected>, Missed> {
    if wire::send(sock.as_raw_fd(), msg, fds).is_err() {
        // Not even sent whole: nobody read it.
        return Ok(None);
    }
    match wire::recv::<ServerMsg>(sock.as_raw_fd()) {
        Ok(Some((ServerMsg::Accepted, _))) => Ok(Some(Connected { sock })),
        Ok(Some((ServerMsg::Fatal(m), _))) => Err(Missed::Fatal(SetupError::Start(m).into())),
        Ok(Some(_)) => {
            Err(Missed::Fatal(SupervisorError::Unexpected("the agent answered before accepting the request").into()))
        }
        Ok(None) | Err(_) => Ok(None),
    }
}

/// Starts an agent listening at `path` (the caller holds `lock`, which the
/// agent keeps for its life) and returns a connection to it.
fn spawn(path: &Path, lock: OwnedFd, config: &Config, idle: Duration) -> Option<OwnedFd> {
    // A socket left by an agent that died (nobody holds the lock).
    let _ = std::fs::remove_file(path);
    let (ours, theirs) = sys::socketpair_stream().ok()?;
    let client = sys::getpid();
    // SAFETY: the caller is single-threaded (`send`'s contract).
    match unsafe { sys::fork() } {
        Ok(Forked::Child) => {
            drop(ours);
            // Once more, so that the agent is nobody's child: the caller
            // reaps this one at once and the agent goes to init.
            // SAFETY: a forked child has one thread.
            match unsafe { sys::fork() } {
                Ok(Forked::Child) => agent_main(path, lock, theirs, config, idle, client),
                _ => sys::exit(0),
            }
        }
        Ok(Forked::Parent { pid, .. }) => {
            let _ = sys::waitpid(pid, false);
            Some(ours)
        }
        Err(_) => None,
    }
}

/// The agent's life: never returns.
fn agent_main(path: &Path, lock: OwnedFd, first: OwnedFd, config: &Config, idle: Duration, client: i32) -> ! {
    use std::os::unix::fs::MetadataExt;
    // A name of its own for ps and top (it was forked as `capsule`); its
    // own session, no terminal; the root as its directory, so that it
    // keeps no file system of the caller's busy.
    sys::set_comm(c"capsule-agent");
    let _ = sys::setsid();
    let _ = sys::chdir(c"/");
    // Nothing of the caller's but these: in particular not its stdout and
    // stderr, which a pipe reader would otherwise wait on for as long as
    // the agent lives. (Moved above 2 first: a caller started with its
    // standard streams closed hands out 0-2 for new descriptors.)
    let raise = |fd: OwnedFd| if fd.as_raw_fd() > 2 { fd } else { sys::dup_cloexec(fd.as_raw_fd()).unwrap_or(fd) };
    let (lock, first) = (raise(lock), raise(first));
    let mut keep = [first.as_raw_fd(), lock.as_raw_fd()];
    keep.sort_unstable();
    sys::close_all_except(&keep);
    if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR, 0) {
        for fd in 0..3 {
            let _ = sys::dup2(null.as_raw_fd(), fd);
        }
    }
    // Signal handlers the caller had (a terminal relay's) mean nothing here.
    sys::reset_signals();
    // Listening from this process, so that the socket's peer credentials
    // (`capsule agent status`) name the agent. Without its socket there is
    // no agent: the request was not read, the caller forks a supervisor
    // of its own for it.
    let old = sys::umask(0o177);
    let bound = std::os::unix::net::UnixListener::bind(path);
    sys::umask(old);
    let Ok(listener) = bound.map(|l| raise(l.into())) else { sys::exit(1) };
    let Ok(ino) = std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino())) else { sys::exit(1) };
    // Watched for changes of the host's mount table: opened here, still in
    // the host's mount namespace (the file stays tied to it).
    let host_mounts = sys::open(c"/proc/self/mountinfo", libc::O_RDONLY | libc::O_CLOEXEC, 0).ok();
    let into = std::os::fd::IntoRawFd::into_raw_fd;
    let job = AgentJob {
        first: into(first),
        listener: into(listener),
        lock: into(lock),
        lock_path: path.with_extension("lock"),
        host_mounts: host_mounts.map(into),
        path: path.to_path_buf(),
        ino,
        idle,
        client,
    };
    super::start(config, super::Job::Agent(job))
}

/// What an agent set up before its supervisor started, as it crosses the
/// supervisor's re-execution (see `Supervisor::start`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct AgentJob {
    /// The connection of the caller that started the agent.
    first: RawFd,
    listener: RawFd,
    lock: RawFd,
    lock_path: PathBuf,
    host_mounts: Option<RawFd>,
    path: PathBuf,
    ino: (u64, u64),
    idle: Duration,
    /// The caller's pid.
    client: i32,
}

impl AgentJob {
    pub(crate) fn fds(&self) -> Vec<RawFd> {
        [self.first, self.listener, self.lock].into_iter().chain(self.host_mounts).collect()
    }
}

/// The agent's supervisor, started (or not): serves, or answers the first
/// caller with the reason. Exits the process.
pub(crate) fn agent_job(job: AgentJob, started: Result<Supervisor, Error>, planner: Option<Planner>) -> ! {
    // (Its name again: execve gave it the binary's.)
    sys::set_comm(c"capsule-agent");
    // SAFETY: the job's descriptors crossed the re-execution open (`Job`) and are taken here once each.
    let (first, listener, lock, host_mounts) = unsafe {
        let lock = Some((sys::reclaim_fd(job.lock), job.lock_path));
        (sys::reclaim_fd(job.first), sys::reclaim_fd(job.listener), lock, job.host_mounts.map(|fd| sys::reclaim_fd(fd)))
    };
    let step_aside = AgentLife::step_aside(job.idle);
    let mut life = AgentLife {
        idle: job.idle,
        host_mounts,
        path: job.path,
        ino: job.ino,
        lock,
        peer: String::new(),
        planner,
        step_aside,
        marked: std::cell::Cell::new(None),
    };
    let code = match started {
        Ok(sup) => {
            // What legitimate peers look like from here (inside the
            // supervisor's user namespace): as the caller that started the
            // agent, which waits for its answer. Unreadable: no agent (the
            // caller forks a supervisor).
            match crate::host::identity::peer_fingerprint(job.client) {
                Some(f) => life.peer = f,
                None => {
                    life.give_up();
                    sys::exit(1)
                }
            }
            // (`serve` gives up the socket and the lock when it ends.)
            if wire::send(first.as_raw_fd(), &ServerMsg::Accepted, &[]).is_ok() {
                sup.serve(vec![Conn::binary(first)], Some(listener), Mode::Agent(life));
            } else {
                life.give_up();
            }
            0
        }
        Err(e) => {
            let _ = wire::send(first.as_raw_fd(), &ServerMsg::Fatal(e.to_string()), &[]);
            life.give_up();
            1
        }
    };
    sys::exit(code)
}

/// One agent of the user's, as `capsule agent status` shows it.
#[derive(Debug, serde::Serialize)]
pub struct Running {
    pub socket: PathBuf,
    pub pid: i32,
}

/// The user's agents that answer on their sockets.
pub fn list() -> Vec<Running> {
    let Some(dir) = socket_dir() else { return Vec::new() };
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return out };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("agent-") && name.ends_with(".sock")) {
            continue;
        }
        let path = e.path();
        let Ok(sock) = connect(&path) else { continue };
        // Only agents (a socket a sandboxed program put there is none).
        if check_server(&sock).is_err() {
            continue;
        }
        // The pid of the process that listens there.
        if let Ok(cred) = sys::peer_cred(sock.as_raw_fd()) {
            out.push(Running { socket: path, pid: cred.pid });
        }
    }
    out.sort_by(|a, b| a.socket.cmp(&b.socket));
    out
}

/// Stops the user's agents whose socket is `only` (else all of them) with
/// SIGTERM (runs in flight are killed), waiting up to 5 s for each; the
/// ones stopped.
pub fn stop(only: Option<&Path>) -> Result<Vec<Running>, SysError> {
    let mut stopped = Vec::new();
    for a in list().into_iter().filter(|a| only.is_none_or(|p| a.socket == p)) {
        let pidfd = match sys::pidfd_open(a.pid) {
            Ok(fd) => fd,
            Err(libc::ESRCH) => continue,
            Err(e) => return Err(SysError::new("pidfd_open", e)),
        };
        match sys::pidfd_send_signal(pidfd.as_raw_fd(), libc::SIGTERM) {
            Ok(()) => {}
            Err(libc::ESRCH) => continue,
            Err(e) => return Err(SysError::new("pidfd_send_signal", e)),
        }
        let mut pfd = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        if sys::poll(&mut pfd, 5000).unwrap_or(0) == 0 {
            return Err(
                SysError::new("waiting for the agent to stop", libc::ETIMEDOUT).path(a.socket.display().to_string())
            );
        }
        stopped.push(a);
    }
    Ok(stopped)
}

/// The socket of the agent that would serve this caller (for a default
/// spec), where it would be.
pub fn own_socket() -> Option<PathBuf> {
    let key = Identity::current(&config_for(&RunSpec::default())).key();
    socket_dir().map(|d| d.join(format!("agent-{key}.sock")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front end finds agents by the configuration's JSON, written
    /// there by hand (it has no serde).
    #[test]
    fn the_front_end_knows_the_default_agent_config() {
        let json = serde_json::to_string(&default_config()).unwrap();
        assert_eq!(json, capsule_nolibc::identity::DEFAULT_CONFIG);
    }
}
