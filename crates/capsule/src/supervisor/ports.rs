//! A session's ports (docs/sessions.md): `--publish`, a listener on the
//! host forwarding into the session's network, and `--host-port`, a
//! listener inside the session forwarding to one port on the host's
//! loopback. Threads of the agent, as the egress proxy's: a thread that
//! enters the session's network makes the sockets that belong there, the
//! others stay in the host's.

use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::{channel, sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::SysError;
use crate::proto::session::Publish;
use crate::sys;

const THREAD_STACK: usize = 256 << 10;
/// Connections a forward carries at once.
const MAX_CONNS: usize = 256;

/// One forward's threads and live connections, ended on drop.
pub(crate) struct Forward {
    pub(crate) what: String,
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // A listening socket shut down fails the accept blocked on it.
        sys::shutdown(self.listener.as_raw_fd());
        for s in self.live.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// The host's listener for `p`, bound now (in the agent's, the host's,
/// network) so that a port in use fails the session's start.
pub(crate) fn bind_published(p: &Publish) -> Result<TcpListener, String> {
    let addr: IpAddr = p.host_addr.parse().map_err(|_| format!("--publish: `{}` is not an address", p.host_addr))?;
    TcpListener::bind(SocketAddr::new(addr, p.host_port))
        .map_err(|e| format!("--publish: cannot listen on {}: {e}", SocketAddr::new(addr, p.host_port)))
}

/// Serves a published port: each connection accepted on the host, from a
/// process of this user (the host's TCP table says whose socket the peer
/// is; others are closed at once), to `port` on the session's loopback.
pub(crate) fn publish(l: TcpListener, p: &Publish, netns: RawFd) -> Result<Forward, String> {
    // Connections inside come from a thread in the session's network.
    let (ask, asked) = channel::<SyncSender<std::io::Result<TcpStream>>>();
    let port = p.port;
    let netns_dup = sys::dup_cloexec(netns).map_err(|e| SysError::new("dup", e).to_string())?;
    let (ready_tx, ready_rx) = sync_channel::<Result<(), String>>(1);
    std::thread::Builder::new()
        .name("capsule-publish".into())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let entered = sys::setns(netns_dup.as_raw_fd(), libc::CLONE_NEWNET)
                .map_err(|e| SysError::new("setns(CLONE_NEWNET)", e).path("the session's network").to_string());
            drop(netns_dup);
            let ok = entered.is_ok();
            let _ = ready_tx.send(entered);
            if !ok {
                return;
            }
            // Ends when the accept thread (the only sender) does.
            while let Ok(reply) = asked.recv() {
                let _ = reply.send(TcpStream::connect(("127.0.0.1", port)));
            }
        })
        .map_err(|e| format!("starting a --publish thread: {e}"))?;
    ready_rx.recv().unwrap_or_else(|_| Err("the --publish thread ended".into()))?;
    let what = format!("{}:{}->{}", p.host_addr, p.host_port, p.port);
    spawn_accept(what, l, move |peer, local| {
        if !same_user(peer, local) {
            return None;
        }
        let (tx, rx) = sync_channel(1);
        ask.send(tx).ok()?;
        rx.recv().ok()?.ok()
    })
}

/// Serves `--host-port PORT`: a listener at 127.0.0.1:PORT in the
/// session's network, each connection to 127.0.0.1:PORT on the host.
pub(crate) fn host_port(port: u16, netns: RawFd) -> Result<Forward, String> {
    let l = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("capsule-bridge".into())
            .stack_size(THREAD_STACK)
            .spawn_scoped(s, move || {
                sys::setns(netns, libc::CLONE_NEWNET)
                    .map_err(|e| SysError::new("setns(CLONE_NEWNET)", e).path("the session's network").to_string())?;
                TcpListener::bind(("127.0.0.1", port))
                    .map_err(|e| format!("--host-port: bind 127.0.0.1:{port} in the session's network: {e}"))
            })
            .map_err(|e| format!("starting a --host-port thread: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the --host-port thread panicked".into()))
    })?;
    // The accepting thread stays in the host's network: its connections are made there.
    spawn_accept(format!("host:{port}<-{port}"), l, move |_, _| TcpStream::connect(("127.0.0.1", port)).ok())
}

/// Accepts on `l` until dropped; `open(peer, local)` gives the other side
/// of each connection (None: the connection is closed).
fn spawn_accept(
    what: String,
    l: TcpListener,
    open: impl Fn(SocketAddr, SocketAddr) -> Option<TcpStream> + Send + 'static,
) -> Result<Forward, String> {
    let listener = Arc::new(l);
    let stop = Arc::new(AtomicBool::new(false));
    let live: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
    let (l2, stop2, live2) = (listener.clone(), stop.clone(), live.clone());
    let accept = std::thread::Builder::new()
        .name("capsule-ports".into())
        .stack_size(THREAD_STACK)
        .spawn(move || loop {
            let (client, peer) = match l2.accept() {
                Ok(c) => c,
                Err(_) if stop2.load(SeqCst) => return,
                Err(_) => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                }
            };
            if stop2.load(SeqCst) {
                return;
            }
            let Ok(local) = client.local_addr() else { continue };
            let Some(other) = open(peer, local) else { continue };
            let (Ok(c2), Ok(o2)) = (client.try_clone(), other.try_clone()) else { continue };
            {
                let mut v = live2.lock().unwrap_or_else(|e| e.into_inner());
                // Connections that ended are shut already; keep the list short.
                v.retain(|s| s.peer_addr().is_ok());
                if v.len() >= 2 * MAX_CONNS {
                    continue;
                }
                v.push(c2);
                v.push(o2);
            }
            let _ = std::thread::Builder::new()
                .name("capsule-ports".into())
                .stack_size(THREAD_STACK)
                .spawn(move || super::egress::relay(client, other));
        })
        .map_err(|e| format!("starting a port's thread: {e}"))?;
    Ok(Forward { what, listener, stop, live, accept: Some(accept) })
}

/// Whether the peer of a connection accepted at `local` from `peer` is a
/// socket of this process's user: found in the host's TCP table (from
/// this thread's network, the host's) by its two addresses.
fn same_user(peer: SocketAddr, local: SocketAddr) -> bool {
    let me = sys::geteuid();
    let file = if peer.is_ipv4() { "/proc/thread-self/net/tcp" } else { "/proc/thread-self/net/tcp6" };
    let Ok(table) = std::fs::read_to_string(file) else { return false };
    let (want_local, want_remote) = (hex_addr(peer), hex_addr(local));
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() > 7 && f[1] == want_local && f[2] == want_remote && f[7].parse::<u32>() == Ok(me)
    })
}

/// An address as /proc/net/tcp prints it: each 32-bit word of the address
/// in host (little-endian) order as %08X, then `:%04X` of the port.
fn hex_addr(a: SocketAddr) -> String {
    let words: Vec<String> = match a.ip() {
        IpAddr::V4(v4) => vec![format!("{:08X}", u32::from_le_bytes(v4.octets()))],
        IpAddr::V6(v6) => {
            v6.octets().chunks(4).map(|c| format!("{:08X}", u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
    };
    format!("{}:{:04X}", words.concat(), a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_the_kernel_prints_them() {
        assert_eq!(hex_addr("127.0.0.1:8080".parse().unwrap()), "0100007F:1F90");
        assert_eq!(hex_addr("[::1]:22".parse().unwrap()), "00000000000000000000000001000000:0016");
    }

    /// A connection of this process's own is this user's.
    #[test]
    fn own_connection_is_the_same_user() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert!(same_user(peer, s.local_addr().unwrap()));
        drop(c);
    }
}
