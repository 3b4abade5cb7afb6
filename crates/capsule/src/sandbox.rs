//! The library API: a long-lived supervisor serving many runs.
//!
//! [`Sandbox::start`] spawns the supervisor as a small process of its own
//! (`capsule supervise`, exec'd, so forking a PID 1 per run stays cheap even
//! when the caller is a large judge process) and talks to it over a socket pair. [`Sandbox::run`] sends a
//! request and returns a [`RunHandle`] at once; requests are pipelined, the
//! supervisor runs up to [`Config::parallel`] at a time, and results come
//! back in any order.
//!
//! No thread of its own: whichever caller waits reads the socket and files
//! the results it finds for the other handles. A handle's pollable fd is
//! the read end of a pipe whose write end only the supervisor holds; it
//! closes it once it has sent the run's result, and the kernel closes it if
//! the supervisor dies, so a poller always wakes up.
//!
//! Dropping the [`Sandbox`], or the caller dying, closes the socket: the
//! supervisor kills every run and exits.
//!
//! With [`Config::per_cpu`] there is one such supervisor per CPU, each
//! pinned with its runs to a CPU of its own (started with the calling
//! thread pinned there for the moment), each with its share of the slots;
//! a run goes to the one with the fewest slots taken, and its handle talks
//! to that one only. Ids are unique across them.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, RunError, SetupError, SupervisorError, SysError};
pub use crate::proto::config::{Config, MAX_PARALLEL};
use crate::proto::result::{InteractResult, RunResult, Status};
use crate::proto::spec::{InteractSpec, RunSpec};
use crate::proto::wire::{self, ClientMsg, ServerMsg};
use crate::sys;
use sealed::Outcome;

/// Descriptors a caller provides for a run's standard streams; a stream
/// left `None` follows the spec (a file, a capture, else `/dev/null`).
#[derive(Default)]
pub struct StdioFds<'a> {
    pub stdin: Option<BorrowedFd<'a>>,
    pub stdout: Option<BorrowedFd<'a>>,
    pub stderr: Option<BorrowedFd<'a>>,
}

/// A running supervisor (with `per_cpu`, one per CPU).
pub struct Sandbox {
    shards: Vec<Arc<Inner>>,
    cgroups: String,
    has_cgroups: bool,
}

struct Inner {
    sock: OwnedFd,
    pid: i32,
    pidfd: OwnedFd,
    /// Shared by a sandbox's supervisors: ids unique across them.
    next_id: Arc<AtomicU64>,
    /// Serializes sends, so that two threads' messages never interleave.
    send: Mutex<()>,
    state: Mutex<State>,
    /// Signalled when a reader files a result or gives up the reading role.
    filed: Condvar,
}

#[derive(Default)]
struct State {
    /// A thread is blocked reading the socket.
    reading: bool,
    /// Final messages not yet picked up, by run id.
    done: HashMap<u64, Outcome>,
    /// Runs whose result nobody wants any more (cancelled or dropped).
    dropped: std::collections::HashSet<u64>,
    /// Why the supervisor is gone, once it is.
    dead: Option<String>,
    /// Slots the runs sent and not yet answered take, by id (an
    /// interactive run two), and their sum: `per_cpu` sends a run to the
    /// supervisor with the fewest.
    weights: HashMap<u64, usize>,
    slots: usize,
}

impl State {
    /// Run `id` is answered (or was never sent): its slots are free.
    fn settle(&mut self, id: u64) {
        if let Some(w) = self.weights.remove(&id) {
            self.slots -= w;
        }
    }
}

impl Sandbox {
    /// Starts a supervisor with `config` (with `per_cpu`, one per CPU of
    /// the calling thread's affinity mask, at most `parallel`).
    pub fn start(config: Config) -> Result<Sandbox, Error> {
        config.validate()?;
        if crate::host::identity::is_real_root() {
            return Err(crate::host::identity::root_refusal());
        }
        let bin = find_capsule_bin(&config)?;
        let next_id = Arc::new(AtomicU64::new(1));
        if !config.per_cpu {
            let (inner, cgroups, has_cgroups) = Inner::handshake(Inner::spawn(&bin, &next_id)?, &bin, config)?;
            return Ok(Sandbox { shards: vec![inner], cgroups, has_cgroups });
        }
        let mine = sys::affinity().map_err(|e| SysError::new("sched_getaffinity", e))?;
        let shares = config.per_cpu_shares(&sys::cpus_of(&mine));
        // All spawned first (each inherits this thread's pin of the moment), then started together.
        let mut spawned = Vec::with_capacity(shares.len());
        for (cpu, _) in &shares {
            let one = sys::one_cpu(*cpu).ok_or(SetupError::CpuOutOfRange(*cpu))?;
            sys::set_affinity(&one).map_err(|e| SysError::new("sched_setaffinity", e))?;
            let inner = Inner::spawn(&bin, &next_id);
            sys::set_affinity(&mine).map_err(|e| SysError::new("sched_setaffinity", e))?;
            spawned.push(inner?);
        }
        for (inner, (_, c)) in spawned.iter().zip(&shares) {
            // A failure here shows in its answer.
            let _ = wire::send(inner.sock.as_raw_fd(), &ClientMsg::Start(c.clone()), &[]);
        }
        let mut shards = Vec::with_capacity(spawned.len());
        let mut notes = (String::new(), false);
        for inner in spawned {
            // A supervisor that failed drops the others (their sockets close: they exit).
            let (inner, cgroups, has_cgroups) = Inner::answer(inner, &bin, Ok(()))?;
            if shards.is_empty() {
                notes = (cgroups, has_cgroups);
            }
            shards.push(inner);
        }
        Ok(Sandbox { shards, cgroups: notes.0, has_cgroups: notes.1 })
    }

    /// The supervisor's process id (on the host); with `per_cpu`, the first one's.
    pub fn supervisor_pid(&self) -> i32 {
        self.shards[0].pid
    }

    /// Every supervisor's process id (one, or one per CPU with `per_cpu`).
    pub fn supervisor_pids(&self) -> Vec<i32> {
        self.shards.iter().map(|s| s.pid).collect()
    }

    /// Where the runs' cgroups come from, or why there are none.
    pub fn cgroups(&self) -> &str {
        &self.cgroups
    }

    /// Whether the runs get cgroups (limits `memory`, `cpu_bandwidth` and
    /// `cpus` need them); false in degraded mode.
    pub fn has_cgroups(&self) -> bool {
        self.has_cgroups
    }

    /// Starts `spec` with its standard streams as the spec says (files,
    /// captures, else `/dev/null`). Returns at once.
    pub fn run(&self, spec: RunSpec) -> Result<RunHandle, Error> {
        self.run_with(spec, StdioFds::default())
    }

    /// Starts `spec` with caller-provided descriptors for some of its
    /// standard streams (sent to the supervisor with SCM_RIGHTS; the caller
    /// keeps its own). Returns at once.
    pub fn run_with(&self, spec: RunSpec, stdio: StdioFds<'_>) -> Result<RunHandle, Error> {
        spec.validate()?;
        let slots = [stdio.stdin, stdio.stdout, stdio.stderr];
        let fds: Vec<RawFd> = slots.iter().flatten().map(|fd| fd.as_raw_fd()).collect();
        let has = slots.map(|s| s.is_some());
        let handle = self.request(|id| ClientMsg::Run { id, spec: Box::new(spec), stdio: has, notify: true }, fds)?;
        Ok(RunHandle::new(handle))
    }

    /// Starts an interactive run (docs/interactive.md): the solution and
    /// the interactor, each in a sandbox of its own, talking through pipes
    /// the supervisor relays. Returns at once; the result says which one
    /// left the conversation first. It takes two of the supervisor's
    /// `parallel` slots (all of them when there is one).
    pub fn interact(&self, spec: InteractSpec) -> Result<InteractHandle, Error> {
        self.interact_with(spec, [None, None])
    }

    /// Like [`interact`](Self::interact), with caller-provided descriptors
    /// as the solution's and the interactor's stderr (their stdin and
    /// stdout are the conversation).
    pub fn interact_with(
        &self,
        spec: InteractSpec,
        stderr: [Option<BorrowedFd<'_>>; 2],
    ) -> Result<InteractHandle, Error> {
        spec.validate()?;
        let fds: Vec<RawFd> = stderr.iter().flatten().map(|fd| fd.as_raw_fd()).collect();
        let has = stderr.map(|s| s.is_some());
        let handle =
            self.request(|id| ClientMsg::Interact { id, spec: Box::new(spec), stderr: has, notify: true }, fds)?;
        Ok(InteractHandle::new(handle))
    }

    /// A session request (docs/sessions.md): this sandbox's supervisor keeps
    /// its sessions until the `Sandbox` is dropped. An `exec` may carry its
    /// stdin, stdout and stderr (else /dev/null). Waits for the answer.
    pub fn session(
        &self,
        req: crate::proto::session::SessionReq,
        stdio: Option<[BorrowedFd<'_>; 3]>,
    ) -> Result<crate::proto::session::SessionAnswer, Error> {
        if self.shards.len() > 1 {
            return Err(RunError::SessionsPerCpu.into());
        }
        let fds: Vec<RawFd> = stdio.iter().flatten().map(|fd| fd.as_raw_fd()).collect();
        let mut h = self.request(|id| ClientMsg::Session { id, req, notify: true }, fds)?;
        match h.wait()? {
            Outcome::Session(a) => Ok(*a),
            _ => {
                Err(SupervisorError::Unexpected("the supervisor answered a session request with a run's result").into())
            }
        }
    }

    /// Sends a request built for a fresh id, with `fds` and a notify pipe,
    /// to the supervisor with the fewest slots taken.
    fn request(&self, msg: impl FnOnce(u64) -> ClientMsg, mut fds: Vec<RawFd>) -> Result<Handle, Error> {
        let inner = match self.shards.as_slice() {
            [one] => one,
            all => all.iter().min_by_key(|s| s.lock().slots).expect("one supervisor at least"),
        };
        if let Some(why) = inner.lock().dead.clone() {
            return Err(SupervisorError::Gone(why).into());
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (notify_read, notify_write) = sys::pipe().map_err(|e| SysError::new("pipe2", e))?;
        fds.push(notify_write.as_raw_fd());
        let msg = msg(id);
        let weight = if matches!(msg, ClientMsg::Interact { .. }) { 2 } else { 1 };
        let sent = {
            let _g = inner.send.lock().unwrap_or_else(|e| e.into_inner());
            // Kept only where there is a choice: one supervisor's runs need no count.
            if self.shards.len() > 1 {
                let mut st = inner.lock();
                st.weights.insert(id, weight);
                st.slots += weight;
            }
            wire::send(inner.sock.as_raw_fd(), &msg, &fds)
        };
        drop(notify_write);
        match sent {
            Ok(()) => {}
            Err(e) => {
                inner.lock().settle(id);
                // Too large to send, say: this run only.
                if !e.is_io() {
                    return Err(RunError::Send(e.to_string()).into());
                }
                return Err(SupervisorError::Gone(inner.died(&e.to_string())).into());
            }
        }
        Ok(Handle { inner: inner.clone(), id, notify: notify_read, finished: false })
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // The supervisors see the end of their sockets: they kill every run
        // and exit. Handles still alive then get "the sandbox was dropped".
        for inner in &self.shards {
            sys::shutdown(inner.sock.as_raw_fd());
            let mut st = inner.lock();
            if st.dead.is_none() {
                st.dead = Some("the sandbox was dropped".into());
            }
            drop(st);
            inner.filed.notify_all();
        }
        for inner in &self.shards {
            inner.reap();
        }
    }
}

impl Inner {
    /// Spawns `capsule supervise` on a fresh socket pair.
    fn spawn(bin: &Path, next_id: &Arc<AtomicU64>) -> Result<Arc<Inner>, Error> {
        let (ours, theirs) = sys::socketpair_stream().map_err(|e| SysError::new("socketpair", e))?;
        let (pid, pidfd) = sys::spawn_supervisor(bin, theirs.as_raw_fd())
            .map_err(|e| SysError::new("posix_spawn", e).path(bin.display().to_string()))?;
        drop(theirs);
        Ok(Arc::new(Inner {
            sock: ours,
            pid,
            pidfd,
            next_id: next_id.clone(),
            send: Mutex::new(()),
            state: Mutex::new(State::default()),
            filed: Condvar::new(),
        }))
    }

    /// Sends `config` and takes the supervisor's answer.
    fn handshake(inner: Arc<Inner>, bin: &Path, config: Config) -> Result<(Arc<Inner>, String, bool), Error> {
        let sent = wire::send(inner.sock.as_raw_fd(), &ClientMsg::Start(config), &[]).map_err(|e| e.to_string());
        Inner::answer(inner, bin, sent)
    }

    /// The answer to `Start`: started (where its cgroups come from, whether
    /// it has them), or why not.
    fn answer(inner: Arc<Inner>, bin: &Path, sent: Result<(), String>) -> Result<(Arc<Inner>, String, bool), Error> {
        let answer = wire::recv::<ServerMsg>(inner.sock.as_raw_fd());
        match (sent, answer) {
            (_, Ok(Some((ServerMsg::Started { cgroups, has_cgroups, .. }, _)))) => Ok((inner, cgroups, has_cgroups)),
            (_, Ok(Some((ServerMsg::Fatal(msg), _)))) => {
                inner.reap();
                Err(SetupError::Start(msg).into())
            }
            (Err(error), _) | (_, Err(error)) => {
                let how = inner.reap();
                Err(SupervisorError::Start { bin: bin.display().to_string(), error, how }.into())
            }
            (Ok(()), Ok(_)) => {
                let how = inner.reap();
                Err(SupervisorError::NotStarted { bin: bin.display().to_string(), how }.into())
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the supervisor's exit; returns how it ended, for messages.
    fn reap(&self) -> String {
        match sys::pidfd_wait(self.pidfd.as_raw_fd()) {
            Ok(Some(st)) if libc::WIFSIGNALED(st) => {
                format!(
                    " (supervisor pid {} killed by {})",
                    self.pid,
                    crate::proto::result::signal_name(libc::WTERMSIG(st))
                )
            }
            Ok(Some(st)) => format!(" (supervisor pid {} exited with status {})", self.pid, libc::WEXITSTATUS(st)),
            _ => String::new(),
        }
    }

    /// Records that the supervisor is gone and says why.
    fn died(&self, detail: &str) -> String {
        let mut st = self.lock();
        if st.dead.is_none() {
            drop(st);
            let why = format!("the supervisor is gone ({detail}){}", self.reap_nohang());
            st = self.lock();
            st.dead.get_or_insert(why);
        }
        let why = st.dead.clone().unwrap_or_default();
        drop(st);
        self.filed.notify_all();
        why
    }

    fn reap_nohang(&self) -> String {
        // Give the kernel a moment to finish the exit that closed the socket.
        let mut pfd = [libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        if sys::poll(&mut pfd, 1000).unwrap_or(0) > 0 {
            self.reap()
        } else {
            String::new()
        }
    }

    /// Reads one message and files it. Called without the state lock, by
    /// the one thread that holds the reading role.
    fn read_one(&self) -> Result<(), String> {
        match wire::recv::<ServerMsg>(self.sock.as_raw_fd()) {
            Ok(Some((msg, _fds))) => {
                let (id, outcome) = match msg {
                    ServerMsg::Result { id, result } => (id, Outcome::Run(result)),
                    ServerMsg::Interacted { id, result } => (id, Outcome::Interact(result)),
                    ServerMsg::Failed { id, error } => (id, Outcome::Failed(error)),
                    ServerMsg::Fatal(msg) => return Err(format!("fatal error: {msg}")),
                    ServerMsg::Started { .. } | ServerMsg::Accepted | ServerMsg::Declined | ServerMsg::Exit { .. } => {
                        return Ok(())
                    }
                    ServerMsg::Session { id, answer } => (id, Outcome::Session(Box::new(answer))),
                };
                let mut st = self.lock();
                st.settle(id);
                if !st.dropped.remove(&id) {
                    st.done.insert(id, outcome);
                }
                Ok(())
            }
            Ok(None) => Err("its socket closed".into()),
            Err(e) => Err(e),
        }
    }

    /// Takes the reading role if free, reads one message and gives the role
    /// back. `block`: wait for a message (or for another reader to file
    /// one); otherwise read only if a message is there. Returns with the
    /// state lock held, and whether anything may have changed.
    fn pump<'a>(&'a self, st: MutexGuard<'a, State>, block: bool) -> (MutexGuard<'a, State>, bool) {
        if st.reading || st.dead.is_some() {
            if block {
                return (self.filed.wait(st).unwrap_or_else(|e| e.into_inner()), true);
            }
            return (st, false);
        }
        if !block {
            let mut pfd = [libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            if sys::poll(&mut pfd, 0).unwrap_or(0) == 0 {
                return (st, false);
            }
        }
        let mut st = st;
        st.reading = true;
        drop(st);
        if let Err(e) = self.read_one() {
            self.died(&e);
        }
        let mut st = self.lock();
        st.reading = false;
        self.filed.notify_all();
        (st, true)
    }

    fn take(&self, st: &mut State, id: u64) -> Option<Result<Outcome, Error>> {
        if let Some(outcome) = st.done.remove(&id) {
            return Some(match outcome {
                Outcome::Run(r) if r.status == Status::Error => {
                    Err(SetupError::Sandbox(r.error.unwrap_or_default()).into())
                }
                // `Failed`: the run could not happen (its spec, its sandbox).
                Outcome::Failed(e) => Err(SetupError::Request(e).into()),
                other => Ok(other),
            });
        }
        st.dead.as_ref().map(|why| Err(SupervisorError::Gone(why.clone()).into()))
    }

    fn send(&self, msg: &ClientMsg) -> Result<(), Error> {
        let _g = self.send.lock().unwrap_or_else(|e| e.into_inner());
        wire::send(self.sock.as_raw_fd(), msg, &[]).map_err(|e| SupervisorError::Gone(self.died(&e.to_string())).into())
    }
}

/// What a run's and an interactive run's handles share.
struct Handle {
    inner: Arc<Inner>,
    id: u64,
    /// Read end of the notify pipe (readable once the result is sent).
    notify: OwnedFd,
    finished: bool,
}

impl Handle {
    fn wait(&mut self) -> Result<Outcome, Error> {
        let mut st = self.inner.lock();
        loop {
            if let Some(outcome) = self.inner.take(&mut st, self.id) {
                self.finished = true;
                return outcome;
            }
            st = self.inner.pump(st, true).0;
        }
    }

    fn try_wait(&mut self) -> Result<Option<Outcome>, Error> {
        if self.finished {
            return Err(RunError::ResultTaken.into());
        }
        let mut st = self.inner.lock();
        loop {
            if let Some(outcome) = self.inner.take(&mut st, self.id) {
                self.finished = true;
                return outcome.map(Some);
            }
            let (guard, progressed) = self.inner.pump(st, false);
            st = guard;
            if !progressed {
                return Ok(None);
            }
        }
    }

    fn kill(&self) -> Result<(), Error> {
        self.inner.send(&ClientMsg::Kill { id: self.id })
    }

    fn cancel(&mut self) -> Result<(), Error> {
        self.finished = true;
        self.forget();
        self.inner.send(&ClientMsg::Cancel { id: self.id })
    }

    fn forget(&self) {
        let mut st = self.inner.lock();
        if st.done.remove(&self.id).is_none() {
            st.dropped.insert(self.id);
        }
    }
}

impl Drop for Handle {
    /// A handle dropped without its result: the result is discarded when it
    /// comes (the run is not stopped; use `cancel` for that).
    fn drop(&mut self) {
        if !self.finished {
            self.forget();
        }
    }
}

/// A final message of the wrong kind for its handle: a protocol error.
fn mismatch() -> Error {
    SupervisorError::Unexpected("the supervisor answered a run with another kind of result").into()
}

/// What a handle's run ends with: [`RunResult`] for a [`RunHandle`],
/// [`InteractResult`] for an [`InteractHandle`].
pub trait Final: sealed::FromOutcome {}
impl Final for RunResult {}
impl Final for InteractResult {}

mod sealed {
    use super::{InteractResult, RunResult};

    /// A final message from the supervisor.
    /// (Results boxed as they come off the wire: they dwarf `Failed`.)
    pub enum Outcome {
        Run(Box<RunResult>),
        Interact(Box<InteractResult>),
        /// The run could not happen.
        Failed(String),
        /// A session request's answer.
        Session(Box<crate::proto::session::SessionAnswer>),
    }

    /// The final message's result when it is of this kind.
    pub trait FromOutcome: Sized {
        fn from_outcome(o: Outcome) -> Option<Self>;
    }
    impl FromOutcome for RunResult {
        fn from_outcome(o: Outcome) -> Option<Self> {
            match o {
                Outcome::Run(r) => Some(*r),
                _ => None,
            }
        }
    }
    impl FromOutcome for InteractResult {
        fn from_outcome(o: Outcome) -> Option<Self> {
            match o {
                Outcome::Interact(r) => Some(*r),
                _ => None,
            }
        }
    }
}

/// One run of a [`Sandbox`] ([`Sandbox::run`]); with `R` =
/// [`InteractResult`], an interactive run ([`InteractHandle`],
/// [`Sandbox::interact`]).
pub struct RunHandle<R: Final = RunResult>(Handle, std::marker::PhantomData<R>);

/// An interactive run of a [`Sandbox`] ([`Sandbox::interact`]).
pub type InteractHandle = RunHandle<InteractResult>;

impl<R: Final> RunHandle<R> {
    fn new(h: Handle) -> Self {
        RunHandle(h, std::marker::PhantomData)
    }

    /// The run's id (unique within its sandbox).
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Waits for the run's result (an interactive run's: both programs'
    /// and which one left first). A run that could not start (a program
    /// of an interactive run, named) is an `Err` for this run only; a
    /// supervisor that died is an `Err` for every handle.
    pub fn wait(mut self) -> Result<R, Error> {
        R::from_outcome(self.0.wait()?).ok_or_else(mismatch)
    }

    /// The result if the run (both programs of an interactive run) has
    /// ended, without blocking.
    pub fn try_wait(&mut self) -> Result<Option<R>, Error> {
        self.0.try_wait()?.map(|o| R::from_outcome(o).ok_or_else(mismatch)).transpose()
    }

    /// Kills every process of the run (both programs of an interactive
    /// run) now; [`wait`](Self::wait) still returns its result (status
    /// `killed` for what had not ended).
    pub fn kill(&self) -> Result<(), Error> {
        self.0.kill()
    }

    /// Discards the run: killed if it is running, dropped if it is queued;
    /// its result is never delivered.
    pub fn cancel(mut self) -> Result<(), Error> {
        self.0.cancel()
    }
}

impl<R: Final> AsFd for RunHandle<R> {
    /// Readable once the result has arrived (then [`try_wait`](Self::try_wait)
    /// returns it) or the supervisor is gone.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.notify.as_fd()
    }
}

/// The `capsule` binary that serves as supervisor: `capsule-cli`, the
/// full command-line tool, where it can be found (the front end `capsule`
/// would only execute it).
fn find_capsule_bin(config: &Config) -> Result<PathBuf, Error> {
    if let Some(p) = &config.capsule_bin {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("CAPSULE_BIN") {
        return Ok(PathBuf::from(p));
    }
    const NAMES: [&str; 2] = ["capsule-cli", "capsule"];
    let in_dir = |d: &Path| NAMES.iter().map(|n| d.join(n)).find(|p| p.is_file());
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == NAMES[0]) {
            return Ok(exe);
        }
        if let Some(dir) = exe.parent() {
            if let Some(p) = [Some(dir), dir.parent()].into_iter().flatten().find_map(in_dir) {
                return Ok(p);
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(p) = std::env::split_paths(&path).find_map(|d| in_dir(&d)) {
            return Ok(p);
        }
    }
    Err(SetupError::NoBinary.into())
}
