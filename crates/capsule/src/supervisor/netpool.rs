//! Loopback networks kept for reuse: at most one per slot (a running run or
//! a PID 1 prepared ahead), so that concurrent runs never share one, and
//! none created or torn down per run (docs/latency.md: a network per run
//! was 38 % of a run's CPU, most of it under `rtnl_mutex` and on the
//! kernel's single-threaded teardown queue).
//!
//! A network is owned by the supervisor's user namespace, where a run's
//! program has no capability: it can change no address, route or sysctl
//! there. What a run leaves in it is sockets (its processes are gone when
//! its PID 1 is reaped, their sockets with them but for a close still in
//! progress, or one held in flight by a Unix socket cycle until the
//! kernel's collector runs): a keeper thread reads the network's count of
//! sockets allocated in it, of every family (`sockets: used` of its
//! `/proc/net/sockstat`, opened from inside it when it was made), and
//! takes the network back only when the count is as it was when the
//! network was made, else drops it. TIME_WAIT is off in these networks (a loopback has no
//! delayed duplicates to guard against), so a closed connection leaves
//! nothing behind. What carries over is the network's statistics
//! (`/proc/net/snmp`, `/proc/net/dev`): `Config::fresh_network` when even
//! that must not (docs/network-reuse.md).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::SysError;
use crate::sys;

/// A kept network (one descriptor: the supervisor holds one per network),
/// its `sockstat` and its sockets in use when it was made.
pub(crate) struct Kept {
    ns: OwnedFd,
    sockstat: OwnedFd,
    made: u64,
}

enum Job {
    /// Make a network and put it with the idle ones.
    Make,
    /// A run that used this network is over: keep it if nothing is left in it.
    Check(Kept),
}

struct Shared {
    idle: Mutex<Vec<Kept>>,
    /// Networks made or being made and not dropped: idle, in use, queued.
    alive: AtomicUsize,
    /// The keeper could not make a network: no more are asked for (each
    /// PID 1 then makes its own, and fails the run with the reason if it
    /// cannot either).
    failed: AtomicBool,
}

/// The pool; lives on the supervisor's thread.
pub(crate) struct NetPool {
    shared: Arc<Shared>,
    jobs: Sender<Job>,
    max: usize,
}

/// A network lent to one PID 1; goes back to the keeper when dropped (only
/// once that PID 1 is gone: see `Prepared`'s drop).
pub(crate) struct Lent {
    kept: Option<Kept>,
    jobs: Sender<Job>,
    shared: Arc<Shared>,
}

impl Lent {
    pub(crate) fn fd(&self) -> RawFd {
        self.kept.as_ref().expect("only None while dropped").ns.as_raw_fd()
    }

    /// Gives the network up rather than back (its PID 1 may still be in it).
    pub(crate) fn forget(mut self) {
        self.kept = None;
        self.shared.alive.fetch_sub(1, SeqCst);
    }
}

impl Drop for Lent {
    /// Back with the idle ones if nothing is left in it, looked at here
    /// (one read); else to the keeper, which looks again a moment later:
    /// most runs leave nothing, and waking the keeper cost more than the
    /// read (docs/latency.md, "The loop no longer waits for the spawner").
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            match in_use(kept.sockstat.as_raw_fd()) {
                Ok(now) if now == kept.made => self.shared.idle.lock().expect("not poisoned").push(kept),
                _ => {
                    let _ = self.jobs.send(Job::Check(kept));
                }
            }
        }
    }
}

impl NetPool {
    /// Starts the keeper thread; `max` networks at most (the slots).
    pub(crate) fn start(max: usize) -> Result<NetPool, SysError> {
        let shared =
            Arc::new(Shared { idle: Mutex::default(), alive: AtomicUsize::new(0), failed: AtomicBool::new(false) });
        let (jobs, rx) = mpsc::channel::<Job>();
        let keeper = shared.clone();
        // No signal for the keeper: the supervisor's signalfds need them blocked in every thread.
        let _blocked = sys::BlockedSignals::all();
        std::thread::Builder::new()
            .name("capsule-netkeep".into())
            .spawn(move || {
                // Its checks are off the request path: a batch thread never
                // cuts in on the loop when a returned network wakes it.
                let _ = sys::batch_policy();
                for job in rx {
                    keeper.run(job);
                }
            })
            .map_err(|e| SysError::new("clone3 (network keeper thread)", e.raw_os_error().unwrap_or(libc::EAGAIN)))?;
        Ok(NetPool { shared, jobs, max })
    }

    /// A kept network for a PID 1, if one is idle; else None (PID 1 makes
    /// its own, as with `fresh_network`) and, while under `max`, the keeper
    /// is asked for another, for later runs.
    pub(crate) fn take(&self) -> Option<Lent> {
        let kept = self.shared.idle.lock().expect("keeper alive").pop();
        if kept.is_none() && !self.shared.failed.load(SeqCst) {
            let alive = self.shared.alive.load(SeqCst);
            if alive < self.max && self.shared.alive.compare_exchange(alive, alive + 1, SeqCst, SeqCst).is_ok() {
                let _ = self.jobs.send(Job::Make);
            }
        }
        kept.map(|kept| Lent { kept: Some(kept), jobs: self.jobs.clone(), shared: self.shared.clone() })
    }

    /// Networks alive (idle, lent or being made or checked).
    #[cfg(test)]
    pub(crate) fn alive(&self) -> usize {
        self.shared.alive.load(SeqCst)
    }
}

impl Shared {
    fn run(&self, job: Job) {
        let kept = match job {
            Job::Make => {
                let made = make();
                self.failed.fetch_or(made.is_none(), SeqCst);
                made
            }
            Job::Check(kept) => clean(&kept, &[1, 10]).then_some(kept),
        };
        match kept {
            Some(kept) => self.idle.lock().expect("not poisoned").push(kept),
            None => {
                self.alive.fetch_sub(1, SeqCst);
            }
        }
    }
}

/// Whether no socket is left in a network a run has used, looked at after
/// each of `waits` (ms): a close still in progress gets a moment (a
/// loopback finishes it within microseconds).
fn clean(kept: &Kept, waits: &[u64]) -> bool {
    for &wait in waits {
        std::thread::sleep(Duration::from_millis(wait));
        match in_use(kept.sockstat.as_raw_fd()) {
            Ok(now) if now == kept.made => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// The sockets allocated in a network, of every family: its sockstat's
/// `sockets: used`, a per-network counter that every user socket enters
/// at allocation and leaves when freed. One short read, without entering
/// the network: a descriptor of a network's proc file stays that
/// network's, and a read from 0 formats it anew (`/proc/net/protocols`
/// formats some twenty columns for each protocol, and is read from inside).
fn in_use(sockstat: RawFd) -> std::io::Result<u64> {
    let mut buf = [0u8; 512];
    let n = sys::pread(sockstat, &mut buf, 0).map_err(std::io::Error::from_raw_os_error)?;
    let bad = || std::io::Error::from_raw_os_error(libc::EPROTO);
    let first = buf[..n].split(|&b| b == b'\n').next().ok_or_else(bad)?;
    let count = first.strip_prefix(b"sockets: used ").ok_or_else(bad)?;
    std::str::from_utf8(count).ok().and_then(|c| c.trim().parse().ok()).ok_or_else(bad)
}

/// Makes a network with only `lo`, up, and TIME_WAIT off, on the keeper
/// thread (which moves into it: network namespaces are per thread, and the
/// keeper never needs another).
fn make() -> Option<Kept> {
    // Which step failed is not kept: a PID 1 that makes its own network then reports it for its run.
    sys::unshare(libc::CLONE_NEWNET).ok()?;
    sys::loopback_up().ok()?;
    // /proc/sys/net and /proc/thread-self/net are the opening thread's network's.
    std::fs::write("/proc/sys/net/ipv4/tcp_max_tw_buckets", "0").ok()?;
    let ns = sys::open(c"/proc/thread-self/ns/net", libc::O_RDONLY | libc::O_CLOEXEC, 0).ok()?;
    let sockstat = sys::open(c"/proc/thread-self/net/sockstat", libc::O_RDONLY | libc::O_CLOEXEC, 0).ok()?;
    let made = in_use(sockstat.as_raw_fd()).ok()?;
    Some(Kept { ns, sockstat, made })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_soon(pool: &NetPool) -> Lent {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(lent) = pool.take() {
                return lent;
            }
            assert!(std::time::Instant::now() < deadline, "the keeper made no network");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn inode(fd: RawFd) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{fd}")).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap()
    }

    #[test]
    fn networks_are_made_on_demand_lent_once_and_taken_back_clean() {
        if sys::geteuid() != 0 {
            return; // the keeper's unshare(CLONE_NEWNET) needs root outside a user namespace (the suite runs as root)
        }
        let pool = NetPool::start(2).unwrap();
        let a = take_soon(&pool);
        let b = take_soon(&pool);
        assert_ne!(inode(a.fd()), inode(b.fd()), "one network lent twice at once");
        assert!(pool.take().is_none(), "more than the maximum made");
        assert_eq!(pool.alive(), 2);
        let kept = inode(a.fd());
        drop(a);
        // Taken back at once: the loop looks at a clean network itself.
        let again = pool.take().expect("a clean network is idle again as soon as it is given back");
        assert_eq!(inode(again.fd()), kept, "a clean network was not taken back");
        // A network left with a socket in it is dropped, and another made in its place.
        let ns =
            sys::open(&std::ffi::CString::new(format!("/proc/self/fd/{}", again.fd())).unwrap(), libc::O_RDONLY, 0)
                .unwrap();
        let dirty = std::thread::spawn(move || {
            sys::setns(ns.as_raw_fd(), libc::CLONE_NEWNET).unwrap();
            std::net::TcpListener::bind("127.0.0.1:0").unwrap()
        })
        .join()
        .unwrap();
        drop(again);
        let next = take_soon(&pool);
        assert_ne!(inode(next.fd()), kept, "a network with a socket left in it was lent again");
        assert!(pool.alive() <= 2);
        drop(dirty);
        // A Unix socket counts as well (a run's abstract sockets live in its network).
        let kept = inode(next.fd());
        let ns = sys::open(&std::ffi::CString::new(format!("/proc/self/fd/{}", next.fd())).unwrap(), libc::O_RDONLY, 0)
            .unwrap();
        let unix = std::thread::spawn(move || {
            sys::setns(ns.as_raw_fd(), libc::CLONE_NEWNET).unwrap();
            std::os::unix::net::UnixDatagram::unbound().unwrap()
        })
        .join()
        .unwrap();
        drop(next);
        let after = take_soon(&pool);
        assert_ne!(inode(after.fd()), kept, "a network with a Unix socket left in it was lent again");
        drop(unix);
    }
}
