//! The network log as the result shows it: PID 1's table
//! (`child::netlog`, which records without allocating) turned into
//! [`NetLogEntry`]s once the run is over.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering::SeqCst;

use crate::child::{Dest, NetLog, CAPACITY, DATA, INVALID, UNREADABLE};
use crate::proto::result::NetLogEntry;

impl NetLog {
    /// The log for the result: entries in the order first seen, and the
    /// number of calls not recorded for lack of room.
    pub(crate) fn entries(&self) -> (Vec<NetLogEntry>, u64) {
        let n = (self.len.load(SeqCst) as usize).min(CAPACITY);
        let list = self.entries[..n]
            .iter()
            .map(|e| {
                let (w, d) = e.load();
                entry(what_name(w), &d, e.count.load(SeqCst))
            })
            .collect();
        (list, self.dropped.load(SeqCst))
    }
}

/// The name of an entry's call code (`child::netlog`'s `what`).
fn what_name(what: u32) -> String {
    let w = what.saturating_sub(1);
    let call = ["connect", "sendto", "sendmsg", "sendmmsg"][(w % 4) as usize];
    let abi = ["", "x32:", "i386:"].get((w / 4) as usize).copied().unwrap_or("?:");
    format!("{abi}{call}")
}

/// How the result shows a destination.
fn entry(syscall: String, d: &Dest, count: u64) -> NetLogEntry {
    let data = &d.data[..d.len.min(DATA)];
    let u32_at = |i: usize| data.get(i..i + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0);
    let port_at0 = || data.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let (family, address, port) = match d.family {
        UNREADABLE => ("unknown".to_string(), None, None),
        INVALID => ("invalid".to_string(), None, None),
        f => match f as i32 {
            libc::AF_INET => {
                let a = data.get(2..6).map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string());
                ("inet".into(), a, port_at0())
            }
            libc::AF_INET6 => {
                let a = data.get(2..18).and_then(|b| <[u8; 16]>::try_from(b).ok()).map(|b| {
                    let scope = u32_at(18);
                    let ip = Ipv6Addr::from(b);
                    if scope != 0 {
                        format!("{ip}%{scope}")
                    } else {
                        ip.to_string()
                    }
                });
                ("inet6".into(), a, port_at0())
            }
            libc::AF_UNIX => {
                let a = match data.first() {
                    None => String::new(),
                    Some(0) => format!("@{}", escape(&data[1..])),
                    Some(_) => escape(data),
                };
                ("unix".into(), Some(a), None)
            }
            libc::AF_NETLINK => {
                let (pid, groups) = (u32_at(0), u32_at(4));
                let a = if groups == 0 { pid.to_string() } else { format!("{pid} groups {groups:#x}") };
                ("netlink".into(), Some(a), None)
            }
            libc::AF_UNSPEC => ("unspec".into(), None, None),
            other => ("other".into(), Some(format!("family {other}")), None),
        },
    };
    NetLogEntry { syscall, family, address, port, count }
}

/// A unix socket name as text: printable ASCII as is, `\` doubled, any
/// other byte as `\xNN`.
fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::entry;
    use crate::child::{observe, Dest, Memory, NetLog, CAPACITY};
    use std::cell::Cell;
    use std::net::Ipv6Addr;

    const X86_64: u32 = 0xc000_003e;
    const I386: u32 = 0x4000_0003;

    /// A fake caller: memory regions, and a notification valid for the
    /// first `valid_for` checks.
    struct Fake {
        regions: Vec<(u64, Vec<u8>)>,
        valid_for: Cell<usize>,
        reads: Cell<usize>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake { regions: Vec::new(), valid_for: Cell::new(usize::MAX), reads: Cell::new(0) }
        }
        fn put(&mut self, addr: u64, bytes: &[u8]) -> u64 {
            self.regions.push((addr, bytes.to_vec()));
            addr
        }
    }

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads.set(self.reads.get() + 1);
            for (at, bytes) in &self.regions {
                if addr >= *at && addr - at + buf.len() as u64 <= bytes.len() as u64 {
                    let off = (addr - at) as usize;
                    buf.copy_from_slice(&bytes[off..off + buf.len()]);
                    return true;
                }
            }
            false
        }
        fn still_valid(&self) -> bool {
            let v = self.valid_for.get();
            self.valid_for.set(v.saturating_sub(1));
            v > 0
        }
    }

    fn sin(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut v = vec![0u8; 16];
        v[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&port.to_be_bytes());
        v[4..8].copy_from_slice(&ip);
        v
    }

    fn sin6(ip: Ipv6Addr, port: u16, scope: u32) -> Vec<u8> {
        let mut v = vec![0u8; 28];
        v[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&port.to_be_bytes());
        v[8..24].copy_from_slice(&ip.octets());
        v[24..28].copy_from_slice(&scope.to_ne_bytes());
        v
    }

    fn sun(path: &[u8]) -> Vec<u8> {
        let mut v = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(path);
        v
    }

    fn log() -> Box<NetLog> {
        Box::default()
    }

    fn entries(l: &NetLog) -> Vec<String> {
        let (list, dropped) = l.entries();
        let mut v: Vec<String> = list
            .iter()
            .map(|e| {
                format!(
                    "{} {} {} {} x{}",
                    e.syscall,
                    e.family,
                    e.address.as_deref().unwrap_or("-"),
                    e.port.map(|p| p.to_string()).unwrap_or("-".into()),
                    e.count
                )
            })
            .collect();
        if dropped > 0 {
            v.push(format!("dropped {dropped}"));
        }
        v
    }

    #[test]
    fn addresses_of_every_family() {
        let long = format!("unix {} -", "a".repeat(108));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (sin([93, 184, 216, 34], 443), "inet 93.184.216.34 443"),
            (sin([127, 0, 0, 1], 53)[..8].to_vec(), "inet 127.0.0.1 53"),
            (sin6(Ipv6Addr::LOCALHOST, 53, 0), "inet6 ::1 53"),
            (sin6("fe80::1".parse().unwrap(), 80, 2), "inet6 fe80::1%2 80"),
            (sin6("::ffff:1.2.3.4".parse().unwrap(), 1, 0)[..24].to_vec(), "inet6 ::ffff:1.2.3.4 1"),
            (sun(b"/run/x.sock\0garbage"), "unix /run/x.sock -"),
            (sun(b"\0abs\0name\x01\\"), "unix @abs\\x00name\\x01\\\\ -"),
            (sun(b""), "unix  -"),
            (sun(&[b'a'; 200]), &long),
            (
                {
                    let mut v = (libc::AF_NETLINK as u16).to_ne_bytes().to_vec();
                    v.extend_from_slice(&[0, 0]);
                    v.extend_from_slice(&0u32.to_ne_bytes());
                    v.extend_from_slice(&5u32.to_ne_bytes());
                    v
                },
                "netlink 0 groups 0x5 -",
            ),
            ((libc::AF_PACKET as u16).to_ne_bytes().to_vec(), "other family 17 -"),
            ((libc::AF_UNSPEC as u16).to_ne_bytes().to_vec(), "unspec - -"),
            (sin([1, 2, 3, 4], 5)[..6].to_vec(), "invalid - -"),
            (sin6(Ipv6Addr::LOCALHOST, 53, 0)[..20].to_vec(), "invalid - -"),
            (vec![2], "invalid - -"),
            (vec![], "invalid - -"),
        ];
        for (bytes, want) in cases {
            let e = entry("connect".into(), &Dest::of(&bytes), 1);
            let got = format!(
                "{} {} {}",
                e.family,
                e.address.as_deref().unwrap_or("-"),
                e.port.map(|p| p.to_string()).unwrap_or("-".into())
            );
            assert_eq!(got, want, "{bytes:?}");
        }
    }

    #[test]
    fn connect_and_sendto() {
        let l = log();
        let mut m = Fake::new();
        let a = m.put(0x1000, &sin([127, 0, 0, 1], 8080));
        let args = [3, a, 16, 0, 0, 0];
        observe(&l, X86_64, 42, &args, &m);
        observe(&l, X86_64, 42, &args, &m);
        // sendto with and without an address; len 0: invalid.
        observe(&l, X86_64, 44, &[3, 0x9000, 5, 0, a, 16], &m);
        observe(&l, X86_64, 44, &[3, 0x9000, 5, 0, 0, 0], &m);
        observe(&l, X86_64, 44, &[3, 0x9000, 5, 0, a, 0], &m);
        // Unreadable address; a call the log does not know.
        observe(&l, X86_64, 42, &[3, 0x5000, 16, 0, 0, 0], &m);
        observe(&l, X86_64, 41, &[2, 1, 0, 0, 0, 0], &m);
        // An oversized length reads at most 128 bytes (here: not there).
        observe(&l, X86_64, 42, &[3, a, 0xffff_ffff, 0, 0, 0], &m);
        assert_eq!(
            entries(&l),
            [
                "connect inet 127.0.0.1 8080 x2",
                "sendto inet 127.0.0.1 8080 x1",
                "sendto invalid - - x1",
                "connect unknown - - x2",
            ]
        );
    }

    #[test]
    fn sendmsg_and_sendmmsg_native() {
        let l = log();
        let mut m = Fake::new();
        let a = m.put(0x1000, &sin([10, 0, 0, 1], 53));
        let b = m.put(0x2000, &sin6(Ipv6Addr::LOCALHOST, 53, 0));
        let hdr = |name: u64, len: u32| {
            let mut h = vec![0u8; 64];
            h[..8].copy_from_slice(&name.to_ne_bytes());
            h[8..12].copy_from_slice(&len.to_ne_bytes());
            h
        };
        let msg = m.put(0x3000, &hdr(a, 16));
        observe(&l, X86_64, 46, &[3, msg, 0, 0, 0, 0], &m);
        let nul = m.put(0x3100, &hdr(0, 16));
        observe(&l, X86_64, 46, &[3, nul, 0, 0, 0, 0], &m);
        let zero = m.put(0x3200, &hdr(a, 0));
        observe(&l, X86_64, 46, &[3, zero, 0, 0, 0, 0], &m);
        let mut vec = Vec::new();
        for h in [hdr(a, 16), hdr(b, 28), hdr(0, 0), hdr(a, 16)] {
            vec.extend_from_slice(&h);
        }
        let v = m.put(0x4000, &vec);
        observe(&l, X86_64, 307, &[3, v, 4, 0, 0, 0], &m);
        // The count's upper half is ignored; a vector running into unmapped
        // memory records one unknown and stops.
        observe(&l, X86_64, 307, &[3, v, 0x1_0000_0001, 0, 0, 0], &m);
        observe(&l, X86_64, 307, &[3, v, 5, 0, 0, 0], &m);
        assert_eq!(
            entries(&l),
            [
                "sendmsg inet 10.0.0.1 53 x1",
                "sendmmsg inet 10.0.0.1 53 x5",
                "sendmmsg inet6 ::1 53 x2",
                "sendmmsg unknown - - x1",
            ]
        );
        // At most 1024 messages are looked at.
        let l = log();
        let mut m = Fake::new();
        let a = m.put(0x1000, &sin([10, 0, 0, 2], 1));
        let mut big = Vec::new();
        for _ in 0..1100 {
            big.extend_from_slice(&hdr(a, 16));
        }
        let v = m.put(0x100000, &big);
        observe(&l, X86_64, 307, &[3, v, 1100, 0, 0, 0], &m);
        assert_eq!(entries(&l), ["sendmmsg inet 10.0.0.2 1 x1024"]);
    }

    #[test]
    fn compat_abis_and_socketcall() {
        let l = log();
        let mut m = Fake::new();
        let a = m.put(0x1000, &sin([127, 0, 0, 1], 9));
        // i386 connect: arguments truncated to 32 bits.
        observe(&l, I386, 362, &[0xdead_0000_0003, 0xffff_ffff_0000_1000, 16, 0, 0, 0], &m);
        // socketcall(SYS_CONNECT, [fd, addr, len]).
        let words = |w: &[u32]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let c = m.put(0x2000, &words(&[3, 0x1000, 16]));
        observe(&l, I386, 102, &[3, c, 0, 0, 0, 0], &m);
        // socketcall(SYS_SENDTO, [fd, buf, len, flags, addr, addrlen]), and
        // without an address.
        let s = m.put(0x2100, &words(&[3, 0x9000, 4, 0, 0x1000, 16]));
        observe(&l, I386, 102, &[11, s, 0, 0, 0, 0], &m);
        let s0 = m.put(0x2200, &words(&[3, 0x9000, 4, 0, 0, 0]));
        observe(&l, I386, 102, &[11, s0, 0, 0, 0, 0], &m);
        // socketcall's argument array unreadable.
        observe(&l, I386, 102, &[3, 0x7000, 0, 0, 0, 0], &m);
        // compat msghdr (name, namelen) and mmsghdr (32 bytes).
        let mut hdr = vec![0u8; 32];
        hdr[..4].copy_from_slice(&0x1000u32.to_ne_bytes());
        hdr[4..8].copy_from_slice(&16u32.to_ne_bytes());
        let h = m.put(0x3000, &[hdr.clone(), hdr.clone()].concat());
        observe(&l, I386, 370, &[3, h, 0, 0, 0, 0], &m);
        observe(&l, I386, 345, &[3, h, 2, 0, 0, 0], &m);
        let sm = m.put(0x2300, &words(&[3, 0x3000, 2, 0]));
        observe(&l, I386, 102, &[20, sm, 0, 0, 0, 0], &m);
        // x32: native connect, compat sendmsg.
        observe(&l, X86_64, 0x4000_002a, &[3, a, 16, 0, 0, 0], &m);
        observe(&l, X86_64, 0x4000_0206, &[3, h, 0, 0, 0, 0], &m);
        assert_eq!(
            entries(&l),
            [
                "i386:connect inet 127.0.0.1 9 x2",
                "i386:sendto inet 127.0.0.1 9 x1",
                "i386:connect unknown - - x1",
                "i386:sendmsg inet 127.0.0.1 9 x1",
                "i386:sendmmsg inet 127.0.0.1 9 x4",
                "x32:connect inet 127.0.0.1 9 x1",
                "x32:sendmsg inet 127.0.0.1 9 x1",
            ]
        );
    }

    #[test]
    fn nothing_is_recorded_once_the_notification_is_stale() {
        let l = log();
        let mut m = Fake::new();
        let a = m.put(0x1000, &sin([127, 0, 0, 1], 9));
        m.valid_for.set(0);
        observe(&l, X86_64, 42, &[3, a, 16, 0, 0, 0], &m);
        observe(&l, X86_64, 42, &[3, 0x5000, 16, 0, 0, 0], &m);
        assert!(entries(&l).is_empty());
        // sendmmsg: the messages read while it was valid count, then stop.
        let mut hdr = vec![0u8; 64];
        hdr[..8].copy_from_slice(&a.to_ne_bytes());
        hdr[8..12].copy_from_slice(&16u32.to_ne_bytes());
        let v = m.put(0x4000, &[hdr.clone(), hdr.clone(), hdr.clone()].concat());
        m.valid_for.set(2);
        m.reads.set(0);
        observe(&l, X86_64, 307, &[3, v, 3, 0, 0, 0], &m);
        assert_eq!(entries(&l), ["sendmmsg inet 127.0.0.1 9 x2"]);
        assert_eq!(m.reads.get(), 6, "the third message was read, then the loop stopped");
    }

    #[test]
    fn the_table_keeps_the_first_destinations_and_counts_the_rest() {
        let l = log();
        let mut m = Fake::new();
        for port in 0..(CAPACITY as u16 + 10) {
            let a = m.put(0x1_0000 + 0x100 * u64::from(port), &sin([127, 0, 0, 1], 1000 + port));
            observe(&l, X86_64, 44, &[3, 0x9000, 1, 0, a, 16], &m);
        }
        // A destination already in the table still counts.
        observe(&l, X86_64, 44, &[3, 0x9000, 1, 0, 0x1_0000, 16], &m);
        let (list, dropped) = l.entries();
        assert_eq!(list.len(), CAPACITY);
        assert_eq!(dropped, 10);
        assert_eq!((list[0].port, list[0].count), (Some(1000), 2));
        assert_eq!(list[CAPACITY - 1].port, Some(1000 + CAPACITY as u16 - 1));
        // The same address through another call is another entry.
        let l = log();
        observe(&l, X86_64, 42, &[3, 0x1_0000, 16, 0, 0, 0], &m);
        observe(&l, X86_64, 44, &[3, 0x9000, 1, 0, 0x1_0000, 16], &m);
        assert_eq!(entries(&l), ["connect inet 127.0.0.1 1000 x1", "sendto inet 127.0.0.1 1000 x1"]);
    }
}
