//! The network log (`net_log`, `--net-log`; docs/network.md): the
//! destination of every `connect`, `sendto` (with an address), `sendmsg`
//! and `sendmmsg` call of the run, with a count per distinct destination.
//!
//! The run's seccomp filter sends those calls to the listener
//! ([`crate::plan::seccomp::with_net_log`]); PID 1 has the destination read from
//! the caller's memory while the caller is stopped in the call, records it
//! in a fixed table ([`NetLog`], a mapping shared with the supervisor) and
//! lets the call go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE). The log is an
//! observation, never a decision: nothing is refused because of what was
//! read, so another thread changing the address between the read and the
//! kernel's own copy (a TOCTOU race) bypasses nothing; it can only make
//! its own log wrong.
//!
//! The reading is done by a short-lived child of PID 1 sharing its memory
//! ([`sys::with_vm_child`]), so that PID 1 never blocks on the program's
//! memory (a page whose fault the program itself serves, through FUSE or
//! userfaultfd, would stall the read): PID 1 keeps enforcing the run's
//! limits meanwhile. That child makes raw syscalls only, allocates
//! nothing and cannot panic (every index is checked).
//!
//! The supervisor turns the table into the result's text
//! (`supervisor::netlog`).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use crate::sys;
use crate::sys::seccomp::{net_call, Abi, NetCall};

/// Distinct destinations a run's log holds; calls to further destinations
/// are only counted (`net_log_dropped`).
pub(crate) const CAPACITY: usize = 256;
/// The most messages of one `sendmmsg` whose destinations are read: the
/// kernel's own limit (UIO_MAXIOV), beyond which it sends nothing.
const MAX_MESSAGES: u64 = 1024;
/// `sizeof(struct sockaddr_storage)`: the kernel reads no more.
const SOCKADDR_MAX: usize = 128;
/// Bytes an entry keeps of an address: a unix socket's whole `sun_path`.
pub(crate) const DATA: usize = 108;
const DATA_WORDS: usize = DATA.div_ceil(8);

/// `family` of an address that could not be read (bad pointer, or the
/// caller's memory out of reach).
pub(crate) const UNREADABLE: u32 = 0x1_0000;
/// `family` of an address too short for its family (or for one at all):
/// the kernel refuses the call (EINVAL).
pub(crate) const INVALID: u32 = 0x1_0001;

/// One destination, as the reader decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dest {
    /// AF_* (or [`UNREADABLE`], [`INVALID`]).
    pub(crate) family: u32,
    pub(crate) len: usize,
    /// inet: port (network order) and address; inet6: port, address, scope
    /// id (native order); unix: `sun_path` up to its NUL (abstract: the
    /// leading NUL and the whole name); netlink: pid and groups (native).
    pub(crate) data: [u8; DATA],
}

impl Dest {
    const fn bare(family: u32) -> Dest {
        Dest { family, len: 0, data: [0; DATA] }
    }

    fn with(family: u32, bytes: &[u8]) -> Dest {
        let mut d = Dest::bare(family);
        let n = bytes.len().min(DATA);
        if let (Some(to), Some(from)) = (d.data.get_mut(..n), bytes.get(..n)) {
            to.copy_from_slice(from);
            d.len = n;
        }
        d
    }

    /// Decodes a `struct sockaddr` of `b.len()` bytes.
    pub(crate) fn of(b: &[u8]) -> Dest {
        let (Some(&f0), Some(&f1)) = (b.first(), b.get(1)) else { return Dest::bare(INVALID) };
        let family = u32::from(u16::from_ne_bytes([f0, f1]));
        let short = Dest::bare(INVALID);
        match family as i32 {
            libc::AF_INET => match b.get(2..8) {
                Some(pa) => Dest::with(family, pa),
                None => short,
            },
            libc::AF_INET6 => {
                let (Some(port), Some(addr)) = (b.get(2..4), b.get(8..24)) else { return short };
                let scope = b.get(24..28).unwrap_or(&[0; 4]);
                let mut v = [0u8; 22];
                v[..2].copy_from_slice(port);
                v[2..18].copy_from_slice(addr);
                v[18..].copy_from_slice(scope);
                Dest::with(family, &v)
            }
            libc::AF_UNIX => {
                let path = b.get(2..).unwrap_or(&[]);
                let path = path.get(..DATA).unwrap_or(path);
                match path.first() {
                    // Abstract: the whole name, NULs included.
                    Some(0) => Dest::with(family, path),
                    _ => {
                        let end = path.iter().position(|&c| c == 0).unwrap_or(path.len());
                        Dest::with(family, path.get(..end).unwrap_or(&[]))
                    }
                }
            }
            libc::AF_NETLINK => match b.get(4..12) {
                Some(pg) => Dest::with(family, pg),
                None => short,
            },
            _ => Dest::bare(family),
        }
    }
}

/// One entry of the table, written only by the reader, read by the
/// supervisor once the run is over.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Entry {
    /// The call ([`what`]); 0 for a slot never used.
    what: AtomicU32,
    family: AtomicU32,
    len: AtomicU32,
    pub(crate) count: AtomicU64,
    data: [AtomicU64; DATA_WORDS],
}

impl Entry {
    pub(crate) fn load(&self) -> (u32, Dest) {
        let mut d = Dest::bare(self.family.load(SeqCst));
        d.len = (self.len.load(SeqCst) as usize).min(DATA);
        for (i, w) in self.data.iter().enumerate() {
            let bytes = w.load(SeqCst).to_ne_bytes();
            for (j, b) in bytes.iter().enumerate() {
                if let Some(slot) = d.data.get_mut(8 * i + j) {
                    *slot = *b;
                }
            }
        }
        (self.what.load(SeqCst), d)
    }

    fn store(&self, what: u32, d: &Dest) {
        self.family.store(d.family, SeqCst);
        self.len.store(d.len as u32, SeqCst);
        for (i, w) in self.data.iter().enumerate() {
            let mut bytes = [0u8; 8];
            for (j, b) in bytes.iter_mut().enumerate() {
                *b = d.data.get(8 * i + j).copied().unwrap_or(0);
            }
            w.store(u64::from_ne_bytes(bytes), SeqCst);
        }
        self.count.store(1, SeqCst);
        self.what.store(what, SeqCst);
    }
}

/// A run's network log: a shared mapping of its own, created by the
/// supervisor for runs that ask for it (zero pages cost nothing until
/// used), filled by PID 1's reader, read by the supervisor for the result.
#[repr(C)]
pub(crate) struct NetLog {
    /// Entries in use: an entry counts once it is complete (a reader killed
    /// while writing one leaves nothing half-written behind).
    pub(crate) len: AtomicU32,
    /// Calls to destinations beyond [`CAPACITY`].
    pub(crate) dropped: AtomicU64,
    pub(crate) entries: [Entry; CAPACITY],
    /// `explain`'s refused file calls (`child::fswatch`).
    pub(crate) fs: super::fswatch::FsLog,
}

impl Default for NetLog {
    fn default() -> Self {
        NetLog {
            len: AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            entries: std::array::from_fn(|_| Entry::default()),
            fs: Default::default(),
        }
    }
}

/// The code of a call in an entry: call, ABI (the supervisor names it:
/// `supervisor::netlog`).
fn what(call: NetCall, abi: Abi) -> u32 {
    let c = match call {
        NetCall::Connect => 0,
        NetCall::Sendto => 1,
        NetCall::Sendmsg => 2,
        NetCall::Sendmmsg => 3,
    };
    let a = match abi {
        Abi::Native => 0,
        Abi::X32 => 1,
        Abi::I386 => 2,
    };
    1 + c + 4 * a
}

impl NetLog {
    /// Counts one call of `what` to `d`.
    fn record(&self, what: u32, d: &Dest) {
        let n = (self.len.load(SeqCst) as usize).min(CAPACITY);
        for e in self.entries.get(..n).unwrap_or(&[]) {
            let (w, old) = e.load();
            if w == what && old == *d {
                e.count.fetch_add(1, SeqCst);
                return;
            }
        }
        match self.entries.get(n) {
            Some(e) => {
                e.store(what, d);
                self.len.store(n as u32 + 1, SeqCst);
            }
            None => {
                self.dropped.fetch_add(1, SeqCst);
            }
        }
    }
}

/// The calling process's memory, as the reader sees it.
pub(crate) trait Memory {
    /// Copies `buf.len()` bytes at `addr`; false when not all of them are
    /// readable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
    /// The notification is still pending: what was read so far came from
    /// the caller, not from a process that reused its pid.
    fn still_valid(&self) -> bool;
}

/// The real thing: the notifying thread, through process_vm_readv.
pub(crate) struct Caller {
    pub pid: i32,
    pub listener: RawFd,
    pub id: u64,
}

impl Memory for Caller {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.pid > 0 && sys::process_vm_read(self.pid, addr, buf) == Ok(buf.len())
    }
    fn still_valid(&self) -> bool {
        sys::seccomp_notif_id_valid(self.listener, self.id)
    }
}

/// Records the destinations of one notified call (`nr`, `arch`, `args` of
/// the notification) into `log`. Stops as soon as the notification is no
/// longer valid. A call that is not one of the log's records nothing.
pub(crate) fn observe(log: &NetLog, arch: u32, nr: i32, args: &[u64; 6], mem: &impl Memory) {
    let Some((call, abi, in_memory)) = net_call(arch, nr, args) else { return };
    let what = what(call, abi);
    let mut a = *args;
    if abi == Abi::I386 {
        // The kernel uses the low 32 bits of every argument.
        for v in a.iter_mut() {
            *v &= 0xffff_ffff;
        }
    }
    if in_memory {
        // i386 socketcall(call, args): the call's arguments are 32-bit
        // words at args[1].
        let n = match call {
            NetCall::Connect | NetCall::Sendmsg => 3,
            NetCall::Sendmmsg => 4,
            NetCall::Sendto => 6,
        };
        let mut buf = [0u8; 24];
        let ok = buf.get_mut(..4 * n).is_some_and(|b| mem.read(a[1], b));
        if !ok {
            if mem.still_valid() {
                log.record(what, &Dest::bare(UNREADABLE));
            }
            return;
        }
        for (i, w) in buf.chunks_exact(4).enumerate() {
            if let Some(slot) = a.get_mut(i) {
                *slot = u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
            }
        }
    }
    // msghdr: the name pointer and its length first, in both layouts.
    let compat = abi != Abi::Native;
    let name_of = |hdr: u64| -> Option<(u64, u64)> {
        let mut b = [0u8; 12];
        let b = if compat { &mut b[..8] } else { &mut b[..12] };
        if !mem.read(hdr, b) {
            return None;
        }
        Some(if compat {
            (
                u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                u64::from(u32::from_ne_bytes([b[4], b[5], b[6], b[7]])),
            )
        } else {
            (
                u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
                u64::from(u32::from_ne_bytes([b[8], b[9], b[10], b[11]])),
            )
        })
    };
    match call {
        NetCall::Connect => {
            destination(log, what, mem, a[1], a[2]);
        }
        NetCall::Sendto => {
            if a[4] != 0 {
                destination(log, what, mem, a[4], a[5]);
            }
        }
        NetCall::Sendmsg => match name_of(a[1]) {
            Some((name, len)) => {
                if name != 0 && len != 0 {
                    destination(log, what, mem, name, len);
                }
            }
            None => unreadable(log, what, mem),
        },
        NetCall::Sendmmsg => {
            // struct mmsghdr: a msghdr and the length sent, 64 bytes
            // (compat: 32).
            let stride = if compat { 32 } else { 64 };
            let count = (a[2] & 0xffff_ffff).min(MAX_MESSAGES);
            for i in 0..count {
                match name_of(a[1].wrapping_add(i * stride)) {
                    Some((name, len)) => {
                        if name != 0 && len != 0 && !destination(log, what, mem, name, len) {
                            return;
                        }
                    }
                    None => {
                        unreadable(log, what, mem);
                        return;
                    }
                }
            }
        }
    }
}

/// Records a call of the log whose destination could not be read at all
/// (PID 1 could not start the reader, or it was killed).
pub(crate) fn unread(log: &NetLog, arch: u32, nr: i32, args: &[u64; 6]) {
    if let Some((call, abi, _)) = net_call(arch, nr, args) {
        log.record(what(call, abi), &Dest::bare(UNREADABLE));
    }
}

fn unreadable(log: &NetLog, what: u32, mem: &impl Memory) {
    if mem.still_valid() {
        log.record(what, &Dest::bare(UNREADABLE));
    }
}

/// Reads and records the address of `len` bytes at `addr`; false when the
/// notification is no longer valid (nothing recorded).
fn destination(log: &NetLog, what: u32, mem: &impl Memory, addr: u64, len: u64) -> bool {
    // socklen_t: the low 32 bits; the kernel reads at most a
    // sockaddr_storage (a longer one fails, but was asked for).
    let n = ((len & 0xffff_ffff) as usize).min(SOCKADDR_MAX);
    let mut buf = [0u8; SOCKADDR_MAX];
    let b = buf.get_mut(..n).unwrap_or(&mut []);
    let ok = mem.read(addr, b);
    if !mem.still_valid() {
        return false;
    }
    let d = if ok { Dest::of(b) } else { Dest::bare(UNREADABLE) };
    log.record(what, &d);
    true
}
