//! A pseudo-terminal of the run's own (`capsule shell`, `capsule run
//! --pty`): the caller's terminal is never handed inside.
//!
//! The client allocates a pty pair, gives the peer the caller's terminal
//! modes and window size, and passes it as the run's stdin (and as stdout
//! and stderr where those are the caller's terminal); the spec's
//! `controlling_tty` makes the tracee take it as the controlling terminal
//! of the sandbox's session. The caller's terminal goes to raw mode, and one
//! poll loop relays bytes both ways (a tty cannot be spliced), forwards
//! SIGWINCH as the master's window size, and ends when the result is in and
//! the master is drained. ^C, ^Z and ^\ are plain bytes on the way in and
//! become the pty's signals to the sandbox's foreground process group,
//! never capsule's. The caller's modes are restored on every way out:
//! the end of the run, an error (a drop guard), and SIGINT, SIGTERM, SIGHUP
//! or SIGQUIT sent to capsule (read from a signalfd, then capsule dies of
//! the signal as it would have without a pty).
//!
//! Every system call goes through `capsule::sys` (`sys::tty` for the
//! terminal ones): no `unsafe` here.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use anyhow::{bail, Context, Result};
use capsule::endpoints::once::{self, OnceRun};
use capsule::spec::RunSpec;
use capsule::sys::{self, tty};
use capsule::RunResult;
use clap::ArgMatches;

/// Signals capsule handles while the caller's terminal is raw.
const SIGNALS: [i32; 6] = [libc::SIGWINCH, libc::SIGCONT, libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Bytes read at once from either side.
const CHUNK: usize = 64 << 10;

fn errno(e: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(e)
}

/// Whether the run gets a pseudo-terminal of its own: `--pty` (or a
/// profile's `controlling_tty`) demands one and fails without a terminal
/// as stdin; `--no-pty` refuses one; otherwise `capsule shell` has one
/// when stdin is a terminal, `capsule run` never (it inherits the caller's
/// streams; the default seccomp policy refuses TIOCSTI and TIOCLINUX on
/// them, and the program's new session has no controlling terminal).
pub fn wanted(m: &ArgMatches, spec: &RunSpec, shell: bool) -> Result<bool> {
    let never = m.get_flag("no-pty");
    if m.get_flag("pty") || (spec.controlling_tty && !never) {
        let what = if m.get_flag("pty") { "--pty" } else { "the profile's controlling_tty" };
        if spec.stdin.is_some() {
            bail!("{what}: the run's stdin is a file (--stdin or the profile's `stdin`); a pseudo-terminal stands in only for a terminal as stdin");
        }
        if !tty::isatty(0) {
            bail!("{what}: standard input is not a terminal, so there is no terminal to stand in for; run without --pty (or with --no-pty)");
        }
        return Ok(true);
    }
    Ok(!never && shell && spec.stdin.is_none() && tty::isatty(0))
}

/// The caller's terminal (fd 0): its modes as they were, restored when
/// dropped.
struct Terminal {
    fd: RawFd,
    saved: libc::termios,
    raw: bool,
}

impl Terminal {
    fn raw(&mut self) -> Result<()> {
        tty::tcsetattr(self.fd, &tty::raw(&self.saved))
            .map_err(errno)
            .context("cannot put the terminal in raw mode (tcsetattr)")?;
        self.raw = true;
        Ok(())
    }

    fn restore(&mut self) {
        if std::mem::take(&mut self.raw) {
            let _ = tty::tcsetattr(self.fd, &self.saved);
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Runs `spec` (with `controlling_tty` set) on a pty of its own in place
/// of the caller's terminal among `stdio` (the streams `open_stdio` chose:
/// the caller's own where they are `Some(0)`, `Some(1)`, `Some(2)`).
pub fn run(spec: &RunSpec, mut stdio: [Option<RawFd>; 3], agent: bool) -> Result<RunResult> {
    let saved =
        tty::tcgetattr(0).map_err(errno).context("--pty: cannot read the terminal's modes (tcgetattr on stdin)")?;
    let (master, peer) = tty::open_pty()
        .map_err(errno)
        .context("--pty: cannot allocate a pseudo-terminal (/dev/ptmx, TIOCGPTPEER): is devpts mounted on /dev/pts?")?;
    // The caller's modes (line editing, ^C, erase character, ...) and size.
    tty::tcsetattr(peer.as_raw_fd(), &saved).map_err(errno).context("--pty: cannot set the pseudo-terminal's modes")?;
    sync_size(master.as_raw_fd());
    // The peer replaces each of the caller's streams that is the terminal;
    // the pty's output goes to the first of them, else to stdin's terminal.
    let mut out = None;
    for (i, slot) in stdio.iter_mut().enumerate() {
        if *slot == Some(i as RawFd) && (i == 0 || tty::isatty(i as RawFd)) {
            *slot = Some(peer.as_raw_fd());
            if i > 0 && out.is_none() {
                out = Some(i as RawFd);
            }
        }
    }
    let out = out.or_else(|| (sys::fd_access_mode(0).ok() != Some(libc::O_RDONLY)).then_some(0));
    let once = once::start_once(spec, stdio, agent)?;
    // The request carried the peer: the run's processes (and the supervisor
    // until it answers) hold it now; the master sees the end when they are gone.
    drop(peer);
    // Only now (the supervisor is forked and must not inherit the mask).
    let sig = sys::signalfd_for(&SIGNALS).map_err(errno).context("--pty: signalfd")?;
    let mut term = Terminal { fd: 0, saved, raw: false };
    term.raw()?;
    sys::set_nonblocking(master.as_raw_fd(), true).map_err(errno).context("--pty: fcntl on the pseudo-terminal")?;
    let result = relay(&mut term, &master, out, &sig, once);
    term.restore();
    result
}

/// Gives the pty the caller's window size (none: left as it is).
fn sync_size(master: RawFd) {
    if let Ok(w) = tty::get_winsize(0) {
        let _ = tty::set_winsize(master, &w);
    }
}

/// Writes all of `data` to the caller's terminal, waiting while a
/// non-blocking descriptor is full; false once it fails (hung up).
fn put(fd: RawFd, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        match sys::write(fd, data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(libc::EAGAIN) => {
                let mut p = [libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }];
                let _ = sys::poll(&mut p, -1);
            }
            Err(_) => return false,
        }
    }
    true
}

/// Sends the pty's output to the caller's terminal until that fails.
fn emit(out: &mut Option<RawFd>, data: &[u8]) {
    if let Some(fd) = *out {
        if !put(fd, data) {
            *out = None;
        }
    }
}

/// The poll loop: caller's terminal ⇄ master, signals, and the result.
fn relay(
    term: &mut Terminal,
    master: &OwnedFd,
    mut out: Option<RawFd>,
    sig: &OwnedFd,
    once: OnceRun,
) -> Result<RunResult> {
    let m = master.as_raw_fd();
    let mut buf = vec![0u8; CHUNK];
    // Typed bytes the pty has not taken yet (its input queue is full while
    // the program does not read): stdin is not read until they are in.
    let mut pending: Vec<u8> = Vec::new();
    let (mut stdin_open, mut master_open) = (true, true);
    let result = loop {
        let mut fds = [
            libc::pollfd { fd: sig.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: once.fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd {
                fd: if master_open { m } else { -1 },
                events: libc::POLLIN | if pending.is_empty() { 0 } else { libc::POLLOUT },
                revents: 0,
            },
            libc::pollfd {
                fd: if stdin_open && pending.is_empty() { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        sys::poll(&mut fds, -1).map_err(errno).context("--pty: poll")?;
        if fds[0].revents != 0 {
            while let Some(s) = tty::next_signal(sig.as_raw_fd()) {
                match s {
                    libc::SIGWINCH => sync_size(m),
                    // Back from a stop: the shell may have reset the modes.
                    libc::SIGCONT => {
                        term.raw()?;
                        sync_size(m);
                    }
                    _ => {
                        // Dying of it, as without a pty: the supervisor
                        // follows (parent-death signal), and so does the run.
                        term.restore();
                        tty::die_of_signal(s)
                    }
                }
            }
        }
        if fds[2].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            match sys::read(m, &mut buf) {
                Ok(0) => master_open = false,
                Ok(n) => emit(&mut out, &buf[..n]),
                Err(libc::EAGAIN) => {}
                // EIO: every holder of the peer closed it.
                Err(_) => master_open = false,
            }
        }
        if fds[2].revents & libc::POLLOUT != 0 && !pending.is_empty() {
            match sys::write(m, &pending) {
                Ok(n) => drop(pending.drain(..n)),
                Err(libc::EAGAIN) => {}
                Err(_) => pending.clear(),
            }
        }
        if fds[3].revents != 0 {
            match sys::read(0, &mut buf) {
                Ok(0) => stdin_open = false,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(libc::EAGAIN) => {}
                Err(_) => stdin_open = false,
            }
        }
        if fds[1].revents != 0 {
            break once.wait()?;
        }
    };
    // Every process of the run is gone: what they wrote is all in the
    // master's queue (a non-blocking read flushes the kernel's buffer
    // first), so read until it is empty.
    if master_open {
        while let Ok(n @ 1..) = sys::read(m, &mut buf) {
            emit(&mut out, &buf[..n]);
        }
    }
    Ok(result)
}
