//! Landlock, a second layer under the mount tree (docs/landlock.md).
//!
//! The filesystem part mirrors the run's mounts: the write-type rights are
//! handled, and granted only beneath the places the mount plan makes
//! writable (writable binds, tmpfs, the device nodes of a capsule `/dev`,
//! existing files of the run's procfs) and on the run's stdout/stderr when
//! they are files or terminals the caller opened for writing. Should a
//! mount ever end up writable by mistake, or a process inside find a way to
//! a new mount (Landlock also forbids `mount` and `pivot_root` to a
//! restricted process), writes still stop there. This part is best effort:
//! a kernel without Landlock, or with an older ABI, runs the program with
//! what it supports, and the result says so (`landlock`: full, partial,
//! none, computed like the rust-landlock crate's `RestrictionStatus`).
//!
//! The network part is the user's request (`tcp_connect`, `tcp_bind`):
//! TCP connect/bind allowed only on the listed ports. It needs ABI 4
//! (Linux 6.7); a kernel without it makes such a run fail, never run
//! unenforced.
//!
//! Scopes (ABI 6) are requested too: abstract unix sockets and signals are
//! not filesystem objects, and the run's network namespace, where abstract
//! sockets live, is shared by every run of a supervisor (and is the host's
//! with `share_net`, where D-Bus, X11 and container engines listen on
//! abstract sockets); scoping confines connecting to those created inside
//! the run, and signals to the run's own processes (PID 1 included out).
//!
//! Where the work happens (`child`): the supervisor probes the ABI once and
//! prepares a [`Plan`] (paths as `CString`s, ports); PID 1 creates the
//! ruleset and adds the path and port rules after its pivot, so paths
//! resolve in the run's tree (for a PID 1 prepared ahead, before the
//! request); the tracee adds its stdio after the go message and enforces
//! the ruleset right before seccomp.

use std::ffi::CString;

use crate::plan::mounts::{MountPlan, Op};
use crate::sys::{landlock as raw, MOUNT_ATTR_RDONLY};

// Filesystem rights (`LANDLOCK_ACCESS_FS_*`).
pub const FS_EXECUTE: u64 = 1 << 0;
pub const FS_WRITE_FILE: u64 = 1 << 1;
pub const FS_READ_FILE: u64 = 1 << 2;
pub const FS_READ_DIR: u64 = 1 << 3;
pub const FS_REMOVE_DIR: u64 = 1 << 4;
pub const FS_REMOVE_FILE: u64 = 1 << 5;
pub const FS_MAKE_CHAR: u64 = 1 << 6;
pub const FS_MAKE_DIR: u64 = 1 << 7;
pub const FS_MAKE_REG: u64 = 1 << 8;
pub const FS_MAKE_SOCK: u64 = 1 << 9;
pub const FS_MAKE_FIFO: u64 = 1 << 10;
pub const FS_MAKE_BLOCK: u64 = 1 << 11;
pub const FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2: link or rename a file into another directory.
pub const FS_REFER: u64 = 1 << 13;
/// ABI 3: truncate (`truncate`, `O_TRUNC`, `ftruncate` on a file opened after restriction).
pub const FS_TRUNCATE: u64 = 1 << 14;
/// ABI 5: ioctl on a device file. Not a write: not handled.
pub const FS_IOCTL_DEV: u64 = 1 << 15;
// Network rights (`LANDLOCK_ACCESS_NET_*`, ABI 4).
pub const NET_BIND_TCP: u64 = 1 << 0;
pub const NET_CONNECT_TCP: u64 = 1 << 1;
// Scopes (`LANDLOCK_SCOPE_*`, ABI 6).
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub const SCOPE_SIGNAL: u64 = 1 << 1;

/// The write-type rights of ABI 1.
const FS_WRITE_V1: u64 = FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM;
/// Every write-type right capsule asks for.
pub const FS_WRITE: u64 = FS_WRITE_V1 | FS_REFER | FS_TRUNCATE;
/// The rights of [`FS_WRITE`] a rule on a file (not a directory) may grant.
pub const FS_FILE: u64 = FS_WRITE_FILE | FS_TRUNCATE;
/// Every scope capsule asks for.
pub const SCOPES: u64 = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;

/// Minimum ABI of the network rules, and the kernel that has it.
pub const NET_ABI: u32 = 4;
pub const NET_KERNEL: &str = "Linux ≥ 6.7";

/// Filesystem rights the kernel of ABI `abi` knows.
pub fn fs_rights(abi: u32) -> u64 {
    let all_v1 = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR | FS_WRITE_V1;
    match abi {
        0 => 0,
        1 => all_v1,
        2 => all_v1 | FS_REFER,
        3 | 4 => all_v1 | FS_REFER | FS_TRUNCATE,
        _ => all_v1 | FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV,
    }
}

/// Network rights the kernel of ABI `abi` knows.
pub fn net_rights(abi: u32) -> u64 {
    if abi >= NET_ABI {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    }
}

/// Scopes the kernel of ABI `abi` knows.
pub fn scopes(abi: u32) -> u64 {
    if abi >= 6 {
        SCOPES
    } else {
        0
    }
}

/// The running kernel's Landlock ABI version, 0 without Landlock. Asked
/// once per supervisor.
pub fn probe() -> u32 {
    raw::abi_version().unwrap_or(0)
}

/// Rights and scopes of a ruleset: requested, or handled by one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Masks {
    pub fs: u64,
    pub net: u64,
    pub scoped: u64,
}

impl Masks {
    pub fn is_empty(self) -> bool {
        self.fs == 0 && self.net == 0 && self.scoped == 0
    }
}

/// What a run asks of Landlock: the filesystem's write rights and the
/// scopes unless the run turned them off (`landlock = false`), the network
/// rights its `tcp_connect`/`tcp_bind` set.
pub fn requested(layer: bool, tcp_connect: Option<&[u16]>, tcp_bind: Option<&[u16]>) -> Masks {
    let mut net = 0;
    if tcp_connect.is_some() {
        net |= NET_CONNECT_TCP;
    }
    if tcp_bind.is_some() {
        net |= NET_BIND_TCP;
    }
    if !layer {
        return Masks { fs: 0, net, scoped: 0 };
    }
    Masks { fs: FS_WRITE, net, scoped: SCOPES }
}

/// What a kernel of ABI `abi` can handle of `requested`. ABI 1 gets no
/// filesystem part: it cannot grant moving a file into another directory
/// (REFER came with ABI 2), so every cross-directory `rename` and `link`
/// would fail with EXDEV, which programs and build tools do not expect.
pub fn handled(abi: u32, requested: Masks) -> Masks {
    Masks {
        fs: if abi >= 2 { requested.fs & fs_rights(abi) } else { 0 },
        net: requested.net & net_rights(abi),
        scoped: requested.scoped & scopes(abi),
    }
}

/// The error for a run that asks for network rules on a kernel without
/// them.
pub fn check_network(abi: u32, requested: Masks) -> Result<(), String> {
    if requested.net == 0 || abi >= NET_ABI {
        return Ok(());
    }
    let field = if requested.net & NET_CONNECT_TCP != 0 { "tcp_connect" } else { "tcp_bind" };
    let have = if abi == 0 {
        "this kernel has no Landlock (not built in, or not in the `lsm=` boot parameter)".to_string()
    } else {
        format!("this kernel has Landlock ABI {abi}")
    };
    Err(format!(
        "{field} (--tcp-connect/--tcp-bind) is enforced with Landlock ABI ≥ {NET_ABI} ({NET_KERNEL}); \
         {have}, so the restriction cannot be enforced and the run was refused; \
         use a newer kernel, or drop the option (--share-net alone shares the network unrestricted)"
    ))
}

/// Which rights a path rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// A directory gets every handled right beneath it; a file the file rights.
    Writable,
    /// Only writing existing files (procfs).
    FilesOnly,
}

/// Everything PID 1 and the tracee need, prepared by the supervisor.
pub(crate) struct Plan {
    pub requested: Masks,
    pub handled: Masks,
    /// Sandbox paths the mounts make writable, resolved after the pivot.
    pub paths: Vec<(CString, Grant)>,
    /// (port, rights) of the network rules.
    pub ports: Vec<(u16, u64)>,
}

impl Plan {
    /// A plan for ABI `abi`: the writable places of `mounts` and the ports.
    pub(crate) fn new(
        abi: u32,
        mounts: &MountPlan,
        layer: bool,
        tcp_connect: Option<&[u16]>,
        tcp_bind: Option<&[u16]>,
    ) -> Plan {
        let requested = requested(layer, tcp_connect, tcp_bind);
        let handled = handled(abi, requested);
        let paths = if handled.fs != 0 { writable_paths(mounts) } else { Vec::new() };
        let mut ports: Vec<(u16, u64)> = Vec::new();
        if handled.net != 0 {
            for (list, right) in [(tcp_connect, NET_CONNECT_TCP), (tcp_bind, NET_BIND_TCP)] {
                for &port in list.unwrap_or(&[]) {
                    match ports.iter_mut().find(|(p, _)| *p == port) {
                        Some((_, r)) => *r |= right,
                        None => ports.push((port, right)),
                    }
                }
            }
        }
        Plan { requested, handled, paths, ports }
    }
}

/// The places the mount plan makes writable, in the sandbox's paths.
pub(crate) fn writable_paths(mounts: &MountPlan) -> Vec<(CString, Grant)> {
    let join = |dir: &CString, name: &str| {
        let mut p = dir.as_bytes().to_vec();
        if p.last() != Some(&b'/') {
            p.push(b'/');
        }
        p.extend_from_slice(name.as_bytes());
        CString::new(p).expect("no NUL")
    };
    let mut out = Vec::new();
    if let crate::plan::mounts::Base::Fuse { .. } = mounts.base {
        // A `--root` layer: the whole tree is the layer's.
        out.push((c"/".into(), Grant::Writable));
    }
    for op in &mounts.ops {
        match op {
            // A layer's overlay: changes land in the layer, not the host.
            Op::Overlay { dst, .. } => out.push((dst.clone(), Grant::Writable)),
            Op::Bind { dst, attrs, .. } | Op::Tmpfs { dst, attrs, .. } if attrs & MOUNT_ATTR_RDONLY == 0 => {
                out.push((dst.clone(), Grant::Writable))
            }
            Op::Dev { dst, .. } => {
                for name in ["null", "zero", "full", "random", "urandom", "shm"] {
                    out.push((join(dst, name), Grant::Writable));
                }
            }
            // Writable files of the run's procfs (nested user namespaces'
            // /proc/self/uid_map, oom_score_adj); procfs has nothing to
            // create or remove.
            Op::Proc { dst, .. } => out.push((dst.clone(), Grant::FilesOnly)),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_per_abi() {
        assert_eq!(fs_rights(0), 0);
        assert_eq!(fs_rights(1) & (FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV), 0);
        assert_eq!(fs_rights(1) & FS_WRITE_V1, FS_WRITE_V1);
        assert_eq!(fs_rights(2) & FS_WRITE, FS_WRITE_V1 | FS_REFER);
        assert_eq!(fs_rights(3) & FS_WRITE, FS_WRITE);
        assert_eq!(fs_rights(5) & FS_IOCTL_DEV, FS_IOCTL_DEV);
        assert_eq!(fs_rights(7), (1 << 16) - 1);
        assert_eq!(net_rights(3), 0);
        assert_eq!(net_rights(4), NET_BIND_TCP | NET_CONNECT_TCP);
        assert_eq!(scopes(5), 0);
        assert_eq!(scopes(6), SCOPES);
        // Nothing handled that is not a write.
        assert_eq!(FS_WRITE & (FS_EXECUTE | FS_READ_FILE | FS_READ_DIR | FS_IOCTL_DEV), 0);
    }

    #[test]
    fn network_needs_abi_4() {
        let net = requested(true, Some(&[1]), None);
        assert!(check_network(4, net).is_ok());
        assert!(check_network(0, requested(true, None, None)).is_ok());
        let e = check_network(2, net).unwrap_err();
        assert!(e.contains("tcp_connect") && e.contains("6.7") && e.contains("ABI 2"), "{e}");
        let e = check_network(0, requested(true, None, Some(&[]))).unwrap_err();
        assert!(e.contains("tcp_bind") && e.contains("no Landlock"), "{e}");
    }

    #[test]
    fn plan_merges_ports() {
        let mounts = MountPlan {
            base: crate::plan::mounts::Base::HostView,
            ops: Vec::new(),
            needs_scratch: false,
            saved: Vec::new(),
            sources: Vec::new().into(),
            parents: Vec::new().into(),
            stage: None,
        };
        let p = Plan::new(6, &mounts, true, Some(&[80, 443]), Some(&[80]));
        assert_eq!(p.ports, vec![(80, NET_CONNECT_TCP | NET_BIND_TCP), (443, NET_CONNECT_TCP)]);
        let p = Plan::new(2, &mounts, true, None, None);
        assert!(p.ports.is_empty());
        assert_eq!(p.handled.net, 0);
    }

    #[test]
    fn writable_places_of_the_host_view() {
        let spec = crate::RunSpec {
            mounts: vec![
                crate::MountOp::Bind { src: "/tmp".into(), dst: "/out".into(), try_: false, noexec: false },
                crate::MountOp::RoBind { src: "/usr".into(), dst: "/in".into(), try_: false, noexec: false },
            ],
            ..crate::RunSpec::new(["/bin/true"])
        };
        let plan = MountPlan::prepare(&spec, u32::MAX, &crate::host::fsrules::Homes::default(), &mut Vec::new(), None)
            .unwrap();
        let paths: Vec<(String, Grant)> =
            writable_paths(&plan).into_iter().map(|(p, g)| (p.into_string().unwrap(), g)).collect();
        let has = |p: &str, g: Grant| paths.iter().any(|(q, h)| q == p && *h == g);
        assert!(has("/proc", Grant::FilesOnly), "{paths:?}");
        for p in ["/dev/null", "/dev/zero", "/dev/full", "/dev/shm", "/tmp", "/run", "/out"] {
            assert!(has(p, Grant::Writable), "{p}: {paths:?}");
        }
        assert!(!paths.iter().any(|(p, _)| p == "/in" || p == "/dev"), "{paths:?}");
    }

    #[test]
    fn writable_rules_are_writable_places() {
        let mut spec = crate::RunSpec::new(["/bin/true"]);
        spec.filesystem.writable.push("/usr/share".into());
        spec.filesystem.read_only.push("/usr/share/doc".into());
        spec.filesystem.hide.push("/usr/share/man".into());
        spec.filesystem.allow.push("/usr/share/man/man1".into());
        let plan = MountPlan::prepare(&spec, u32::MAX, &crate::host::fsrules::Homes::default(), &mut Vec::new(), None)
            .unwrap();
        let paths: Vec<String> = writable_paths(&plan).into_iter().map(|(p, _)| p.into_string().unwrap()).collect();
        assert!(paths.iter().any(|p| p == "/usr/share"), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with("/usr/share/")), "{paths:?}");
    }

    #[test]
    fn probe_runs() {
        // Whatever the kernel, the probe answers (0 without Landlock).
        let _ = probe();
    }
}
