//! The run's streams the supervisor carries itself, in its event loop:
//! captures kept in memory and returned in the result, read-once input fed
//! from a file through a pipe, write-once output collected from a pipe
//! into a file with the output limit enforced to the byte, and the relay
//! between the two programs of an interactive run, which tells which of
//! them left the conversation first.
//!
//! Every descriptor the supervisor holds here is non-blocking; every
//! `pump` moves what it can and returns, to be called again when poll says
//! the descriptor is ready.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::SysError;
use crate::proto::result::{Captured, Side};
use crate::sys;

/// Bytes read from a capture pipe at once.
const CAPTURE_CHUNK: usize = 64 << 10;
/// Bytes moved by one splice.
const SPLICE_CHUNK: usize = 1 << 20;
/// Capacity asked for the pipes of read-once input and write-once output
/// (1 MiB: the most an unprivileged process gets by default,
/// /proc/sys/fs/pipe-max-size), so a large test moves in few wake-ups.
const PIPE_SIZE: usize = 1 << 20;

/// A pipe whose `ours` end is non-blocking: (ours, the program's).
/// `program_reads`: the program gets the read end.
fn pipe_pair(program_reads: bool, big: bool) -> Result<(OwnedFd, OwnedFd), String> {
    let (r, w) = sys::pipe().map_err(|e| SysError::new("pipe2", e).to_string())?;
    let (ours, theirs) = if program_reads { (w, r) } else { (r, w) };
    sys::set_nonblocking(ours.as_raw_fd(), true).map_err(|e| SysError::new("fcntl(O_NONBLOCK)", e).to_string())?;
    if big {
        // Best effort: a smaller pipe only costs more wake-ups.
        let _ = sys::set_pipe_size(ours.as_raw_fd(), PIPE_SIZE);
    }
    Ok((ours, theirs))
}

/// A stream being captured into memory (`{"capture": N}`).
pub(crate) struct Capture {
    pipe: OwnedFd,
    limit: u64,
    data: Vec<u8>,
    total: u64,
    pub(crate) eof: bool,
}

impl Capture {
    /// The capture and the program's end of its pipe.
    pub(crate) fn new(limit: u64) -> Result<(Capture, OwnedFd), String> {
        let (pipe, theirs) = pipe_pair(false, false)?;
        Ok((Capture { pipe, limit, data: Vec::new(), total: 0, eof: false }, theirs))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// Reads what is there; false at EOF or error.
    pub(crate) fn pump(&mut self) -> bool {
        let mut buf = [0u8; CAPTURE_CHUNK];
        loop {
            match sys::read(self.pipe.as_raw_fd(), &mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return false;
                }
                Ok(n) => {
                    self.total += n as u64;
                    let room = (self.limit as usize).saturating_sub(self.data.len());
                    self.data.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(libc::EAGAIN) => return true,
                Err(_) => {
                    self.eof = true;
                    return false;
                }
            }
        }
    }

    pub(crate) fn finish(mut self) -> Captured {
        // Every writer is gone by now (the run's processes are dead): read
        // what is left, never blocking.
        while !self.eof && self.pump() {
            if !readable(self.pipe.as_raw_fd()) {
                break;
            }
        }
        Captured {
            text: String::from_utf8_lossy(&self.data).into_owned(),
            bytes: self.total,
            truncated: self.total > self.limit,
        }
    }
}

/// Whether a descriptor has something to read (or its end) right now.
fn readable(fd: RawFd) -> bool {
    let mut pfd = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
    sys::poll(&mut pfd, 0).unwrap_or(0) > 0
}

/// Bytes read but not yet written, when splice cannot be used.
#[derive(Default)]
struct Carry {
    buf: Vec<u8>,
    at: usize,
}

impl Carry {
    fn pending(&self) -> &[u8] {
        &self.buf[self.at..]
    }
    /// Reads up to `max` bytes of `fd` into the (empty) carry; 0 at its end.
    fn fill(&mut self, fd: RawFd, max: usize) -> sys::SysResult<usize> {
        let mut buf = vec![0u8; max];
        let n = sys::read(fd, &mut buf)?;
        buf.truncate(n);
        self.buf = buf;
        self.at = 0;
        Ok(n)
    }
    fn advance(&mut self, n: usize) {
        self.at += n;
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
    }
}

/// Read-once input: a host file fed into the program's stdin pipe.
pub(crate) struct Feed {
    file: OwnedFd,
    /// Our (write) end; None once the whole file went in or the program
    /// closed its stdin: the program then sees the end of its input.
    pipe: Option<OwnedFd>,
    /// The file cannot be spliced (some procfs files; the supervisor
    /// opens only regular files here): copied through this buffer instead.
    copy: Option<Carry>,
    /// Why the feed stopped early (a read error of the file).
    pub(crate) error: Option<String>,
}

impl Feed {
    /// Feeds `file` (opened by the caller); returns the program's (read)
    /// end of the pipe too.
    pub(crate) fn new(file: OwnedFd) -> Result<(Feed, OwnedFd), String> {
        let (pipe, theirs) = pipe_pair(true, true)?;
        Ok((Feed { file, pipe: Some(pipe), copy: None, error: None }, theirs))
    }

    /// Our end, while there is something left to feed.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.pipe.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Moves what fits into the pipe.
    pub(crate) fn pump(&mut self) {
        while let Some(pipe) = &self.pipe {
            let pipe = pipe.as_raw_fd();
            let moved = match &mut self.copy {
                None => match sys::splice(self.file.as_raw_fd(), pipe, SPLICE_CHUNK) {
                    Err(libc::EINVAL) => {
                        self.copy = Some(Carry::default());
                        continue;
                    }
                    other => other,
                },
                Some(carry) => {
                    if carry.pending().is_empty() {
                        match carry.fill(self.file.as_raw_fd(), CAPTURE_CHUNK) {
                            Ok(0) => Ok(0),
                            Ok(_) => continue,
                            Err(e) => Err(e),
                        }
                    } else {
                        let r = sys::write(pipe, carry.pending());
                        if let Ok(n) = r {
                            carry.advance(n);
                        }
                        r
                    }
                }
            };
            match moved {
                Ok(0) => self.pipe = None,
                Ok(_) => {}
                // The pipe is full (or, with splice, the file would block).
                Err(libc::EAGAIN) => return,
                // The program closed its stdin: it wants no more.
                Err(libc::EPIPE) => self.pipe = None,
                Err(e) => {
                    self.error = Some(format!("feeding the run's stdin: {}", SysError::new("splice", e)));
                    self.pipe = None;
                }
            }
        }
    }
}

/// Write-once output: the program's stdout or stderr pipe collected into
/// a host file, at most `limit` bytes.
pub(crate) struct Collect {
    pipe: OwnedFd,
    file: OwnedFd,
    limit: Option<u64>,
    written: u64,
    copy: Option<Carry>,
    pub(crate) eof: bool,
    /// The program wrote more than `limit` bytes.
    pub(crate) over: bool,
    /// Why the file could not take more (the rest was read and dropped).
    pub(crate) error: Option<String>,
}

impl Collect {
    /// The collector and the program's (write) end of its pipe.
    pub(crate) fn new(file: OwnedFd, limit: Option<u64>) -> Result<(Collect, OwnedFd), String> {
        let (pipe, theirs) = pipe_pair(false, true)?;
        Ok((Collect { pipe, file, limit, written: 0, copy: None, eof: false, over: false, error: None }, theirs))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// Moves what is in the pipe into the file; stops at the end of the
    /// stream or at the first byte over the limit.
    pub(crate) fn pump(&mut self) {
        while !self.eof && !self.over {
            let room = self.limit.map_or(u64::MAX, |l| l - self.written);
            if room == 0 {
                // The file is full: one more byte is over the limit.
                match sys::read(self.pipe.as_raw_fd(), &mut [0u8; 1]) {
                    Ok(0) => self.eof = true,
                    Ok(_) => self.over = true,
                    Err(libc::EAGAIN) => return,
                    Err(_) => self.eof = true,
                }
                continue;
            }
            let len = room.min(SPLICE_CHUNK as u64) as usize;
            if self.error.is_some() {
                // The file failed: drain, so the program is not blocked.
                let mut buf = vec![0u8; len.min(CAPTURE_CHUNK)];
                match sys::read(self.pipe.as_raw_fd(), &mut buf) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.written += n as u64,
                    Err(libc::EAGAIN) => return,
                    Err(_) => self.eof = true,
                }
                continue;
            }
            let moved = match &mut self.copy {
                None => match sys::splice(self.pipe.as_raw_fd(), self.file.as_raw_fd(), len) {
                    Err(libc::EINVAL) => {
                        self.copy = Some(Carry::default());
                        continue;
                    }
                    other => other.map_err(|e| (e, "splice")),
                },
                Some(carry) => {
                    if carry.pending().is_empty() {
                        match carry.fill(self.pipe.as_raw_fd(), len.min(CAPTURE_CHUNK)) {
                            Ok(0) => Ok(0),
                            Ok(_) => continue,
                            Err(libc::EAGAIN) => Err((libc::EAGAIN, "read")),
                            Err(_) => Ok(0),
                        }
                    } else {
                        // A blocking write to the file: a regular file or a
                        // device does not hold us for long.
                        match sys::write(self.file.as_raw_fd(), carry.pending()) {
                            Ok(n) => {
                                carry.advance(n);
                                self.written += n as u64;
                                continue;
                            }
                            Err(e) => Err((e, "write")),
                        }
                    }
                }
            };
            match moved {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    if self.copy.is_none() {
                        self.written += n as u64;
                    }
                }
                Err((libc::EAGAIN, _)) => return,
                Err((e, call)) => {
                    self.error = Some(format!("writing the run's output file: {}", SysError::new(call, e)));
                }
            }
        }
    }

    /// After the run: what is left in the pipe (every writer is gone).
    pub(crate) fn finish(&mut self) {
        while !self.eof && !self.over {
            self.pump();
            if !self.eof && !self.over && !readable(self.pipe.as_raw_fd()) {
                break;
            }
        }
    }
}

/// One direction of an interactive run's conversation.
struct Direction {
    /// Our end of the writer's stdout pipe.
    from: Option<OwnedFd>,
    /// Our end of the reader's stdin pipe.
    to: Option<OwnedFd>,
    writer: Side,
    reader: Side,
    /// The reader's pipe is full: wait for it to drain (POLLOUT) before
    /// reading more.
    blocked: bool,
    /// The writer's end closed while what it wrote last still waits for
    /// room in the reader's pipe.
    writer_gone: bool,
}

/// The relay of an interactive run: two pairs of pipes, one per
/// direction, with the supervisor in the middle.
/// Because the relay holds the inner ends, neither program sees the
/// other's end of the conversation until the relay has noticed it and
/// passed it on: the program whose pipe the relay saw close first is the
/// one that left first, and a death it caused in the other (SIGPIPE, end
/// of input) always comes after. Two closings seen in the same wake-up of
/// the event loop happened independently; the runs' end times decide.
pub(crate) struct Relay {
    dirs: [Direction; 2],
    /// The wake-up of the event loop in which each side's closing was
    /// first seen (index: solution 0, interactor 1).
    pub(crate) closed_in: [Option<u64>; 2],
}

/// The program ends of an interactive run's pipes: (stdin, stdout).
pub(crate) type Ends = (OwnedFd, OwnedFd);

fn index(side: Side) -> usize {
    match side {
        Side::Solution => 0,
        Side::Interactor => 1,
    }
}

impl Relay {
    /// The relay with the solution's and the interactor's ends.
    pub(crate) fn new() -> Result<(Relay, Ends, Ends), String> {
        // Program-sized pipes (64 KiB): a conversation is small messages.
        let (sol_out, sol_stdout) = pipe_pair(false, false)?;
        let (int_in, int_stdin) = pipe_pair(true, false)?;
        let (int_out, int_stdout) = pipe_pair(false, false)?;
        let (sol_in, sol_stdin) = pipe_pair(true, false)?;
        let dir = |from, to, writer, reader| Direction {
            from: Some(from),
            to: Some(to),
            writer,
            reader,
            blocked: false,
            writer_gone: false,
        };
        let relay = Relay {
            dirs: [
                dir(sol_out, int_in, Side::Solution, Side::Interactor),
                dir(int_out, sol_in, Side::Interactor, Side::Solution),
            ],
            closed_in: [None, None],
        };
        Ok((relay, (sol_stdin, sol_stdout), (int_stdin, int_stdout)))
    }

    /// What to poll: (fd, events, direction, whether it is the `to` end).
    pub(crate) fn poll_entries(&self) -> Vec<(RawFd, i16, usize, bool)> {
        let mut out = Vec::new();
        for (d, dir) in self.dirs.iter().enumerate() {
            if let (Some(from), Some(to)) = (&dir.from, &dir.to) {
                if !dir.blocked {
                    out.push((from.as_raw_fd(), libc::POLLIN, d, false));
                } else if !dir.writer_gone {
                    // Only POLLHUP: a writer that ends while the reader is
                    // not reading has still left first.
                    out.push((from.as_raw_fd(), 0, d, false));
                }
                // POLLERR (the reader is gone) is reported whatever we ask.
                out.push((to.as_raw_fd(), if dir.blocked { libc::POLLOUT } else { 0 }, d, true));
            }
        }
        out
    }

    /// Handles readiness of direction `d` during wake-up `round`.
    pub(crate) fn event(&mut self, d: usize, to_end: bool, revents: i16, round: u64) {
        let dir = &mut self.dirs[d];
        if to_end && revents & libc::POLLERR != 0 {
            // The reader closed its stdin (it ended): what it did not read
            // is lost, and the writer's next write fails (SIGPIPE).
            let reader = dir.reader;
            Self::close(dir);
            self.note(reader, round);
            return;
        }
        if to_end {
            dir.blocked = false;
        } else if dir.blocked && revents & libc::POLLHUP != 0 {
            // The writer is gone; what it wrote is still passed on as the
            // reader makes room, then the reader gets its end of input.
            let writer = dir.writer;
            dir.writer_gone = true;
            self.note(writer, round);
            return;
        }
        self.pump(d, round);
    }

    fn close(dir: &mut Direction) {
        dir.from = None;
        dir.to = None;
        dir.blocked = false;
    }

    fn note(&mut self, side: Side, round: u64) {
        self.closed_in[index(side)].get_or_insert(round);
    }

    /// Moves what the writer wrote to the reader, as far as it fits.
    fn pump(&mut self, d: usize, round: u64) {
        let dir = &mut self.dirs[d];
        loop {
            let (Some(from), Some(to)) = (&dir.from, &dir.to) else { return };
            match sys::splice(from.as_raw_fd(), to.as_raw_fd(), SPLICE_CHUNK) {
                Ok(0) => {
                    // The writer closed its stdout (it ended): the reader
                    // gets the end of its input once it read the rest.
                    let writer = dir.writer;
                    Self::close(dir);
                    self.note(writer, round);
                    return;
                }
                Ok(_) => dir.blocked = false,
                Err(libc::EAGAIN) => {
                    // Nothing to read, or the reader's pipe is full.
                    let mut pfd = [libc::pollfd { fd: to.as_raw_fd(), events: libc::POLLOUT, revents: 0 }];
                    let _ = sys::poll(&mut pfd, 0);
                    if pfd[0].revents & libc::POLLERR != 0 {
                        let reader = dir.reader;
                        Self::close(dir);
                        self.note(reader, round);
                    } else {
                        dir.blocked = pfd[0].revents & libc::POLLOUT == 0;
                    }
                    return;
                }
                Err(libc::EPIPE) => {
                    let reader = dir.reader;
                    Self::close(dir);
                    self.note(reader, round);
                    return;
                }
                Err(_) => {
                    // Cannot happen between two pipes; end the direction
                    // rather than spin, blaming nobody.
                    Self::close(dir);
                    return;
                }
            }
        }
    }

    /// Both programs ended: the relay's last look, then who was first
    /// (see [`first_of`]).
    pub(crate) fn first_to_exit(&mut self, round: u64, ends: [u64; 2], sigpipe: [bool; 2]) -> Side {
        for d in 0..2 {
            self.pump(d, round);
        }
        first_of(self.closed_in, ends, sigpipe)
    }
}

/// Which program left first (solution, interactor): the one whose end the
/// relay saw in an earlier wake-up (`closed_in`). For ends seen in the
/// same wake-up (or never seen): not one killed by SIGPIPE, which was
/// writing to a program that had stopped reading; else the earlier of the
/// runs' end times (monotonic ns, when their PID 1s reaped them, which can
/// be microseconds the wrong way round).
fn first_of(closed_in: [Option<u64>; 2], ends: [u64; 2], sigpipe: [bool; 2]) -> Side {
    match (closed_in, sigpipe) {
        ([Some(s), Some(i)], _) if s < i => Side::Solution,
        ([Some(s), Some(i)], _) if i < s => Side::Interactor,
        ([Some(_), None], _) => Side::Solution,
        ([None, Some(_)], _) => Side::Interactor,
        (_, [true, false]) => Side::Interactor,
        (_, [false, true]) => Side::Solution,
        _ if ends[1] < ends[0] => Side::Interactor,
        _ => Side::Solution,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_to_leave() {
        // Seen in different wake-ups: that order, whatever else.
        assert_eq!(first_of([Some(1), Some(2)], [9, 1], [true, false]), Side::Solution);
        assert_eq!(first_of([Some(2), Some(1)], [1, 9], [false, true]), Side::Interactor);
        assert_eq!(first_of([Some(3), None], [9, 1], [false, false]), Side::Solution);
        assert_eq!(first_of([None, Some(3)], [1, 9], [false, false]), Side::Interactor);
        // In one wake-up: the end times...
        assert_eq!(first_of([Some(2), Some(2)], [5, 7], [false, false]), Side::Solution);
        assert_eq!(first_of([Some(2), Some(2)], [7, 5], [false, false]), Side::Interactor);
        assert_eq!(first_of([None, None], [7, 5], [false, false]), Side::Interactor);
        // ...unless one was killed by SIGPIPE: the other left first, even
        // when it was reaped later (docs/interactive.md).
        assert_eq!(first_of([Some(2), Some(2)], [5, 7], [true, false]), Side::Interactor);
        assert_eq!(first_of([Some(2), Some(2)], [7, 5], [false, true]), Side::Solution);
        assert_eq!(first_of([Some(2), Some(2)], [5, 7], [true, true]), Side::Solution);
    }
}
