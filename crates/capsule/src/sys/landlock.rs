//! Raw Landlock system calls (`landlock_create_ruleset`,
//! `landlock_add_rule`, `landlock_restrict_self`) and their structures
//! (`include/uapi/linux/landlock.h`). Thin and allocation-free like the rest
//! of `sys`: PID 1 and the tracee call them after clone. The typed API is
//! `crate::plan::landlock`.

use std::os::fd::{OwnedFd, RawFd};

use super::{cvt, owned, raw_syscall, SysResult};

/// `LANDLOCK_CREATE_RULESET_VERSION`: return the highest ABI version.
const CREATE_RULESET_VERSION: u32 = 1;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: u32 = 1;
/// `LANDLOCK_RULE_NET_PORT` (ABI 4).
const RULE_NET_PORT: u32 = 2;

/// `struct landlock_ruleset_attr` as of ABI 6 (the kernel accepts the
/// larger struct from older ABIs' point of view as long as the fields it
/// does not know are zero).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct landlock_net_port_attr`.
#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

const _: () = assert!(std::mem::size_of::<PathBeneathAttr>() == 12);
const _: () = assert!(std::mem::size_of::<NetPortAttr>() == 16);
const _: () = assert!(std::mem::size_of::<RulesetAttr>() == 24);

/// The highest Landlock ABI version the running kernel supports: 0 when it
/// has none (ENOSYS: too old; EOPNOTSUPP: built but not enabled in `lsm=`).
pub fn abi_version() -> SysResult<u32> {
    // SAFETY: the version query takes a NULL attribute of size 0 and
    // dereferences nothing.
    let r =
        cvt(unsafe { raw_syscall(libc::SYS_landlock_create_ruleset, [0, 0, CREATE_RULESET_VERSION as u64, 0, 0, 0]) });
    match r {
        Ok(v) => Ok(v as u32),
        Err(libc::ENOSYS) | Err(libc::EOPNOTSUPP) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Creates a ruleset handling these rights and scopes (each a mask the
/// running kernel knows). The descriptor is close-on-exec (the kernel
/// always creates it so).
pub fn create_ruleset(fs: u64, net: u64, scoped: u64) -> SysResult<OwnedFd> {
    let attr = RulesetAttr { handled_access_fs: fs, handled_access_net: net, scoped };
    // SAFETY: attr is a valid landlock_ruleset_attr of the size passed,
    // alive for the call.
    let fd = cvt(unsafe {
        raw_syscall(
            libc::SYS_landlock_create_ruleset,
            [&attr as *const RulesetAttr as u64, std::mem::size_of::<RulesetAttr>() as u64, 0, 0, 0, 0],
        )
    })?;
    Ok(owned(fd))
}

/// Allows `access` beneath the file or directory `fd` refers to (any
/// descriptor of it, O_PATH included).
pub fn add_path_rule(ruleset: RawFd, fd: RawFd, access: u64) -> SysResult<()> {
    let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd };
    // SAFETY: attr is a valid (packed) landlock_path_beneath_attr alive for
    // the call; the kernel reads it with copy_from_user, no alignment needed.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_landlock_add_rule,
            [ruleset as u64, RULE_PATH_BENEATH as u64, &attr as *const PathBeneathAttr as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// Allows `access` (TCP bind/connect) on `port`.
pub fn add_port_rule(ruleset: RawFd, port: u16, access: u64) -> SysResult<()> {
    let attr = NetPortAttr { allowed_access: access, port: port as u64 };
    // SAFETY: attr is a valid landlock_net_port_attr alive for the call.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_landlock_add_rule,
            [ruleset as u64, RULE_NET_PORT as u64, &attr as *const NetPortAttr as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// Enforces the ruleset on the calling thread (and what it execs and
/// forks). Needs `no_new_privs` (or CAP_SYS_ADMIN).
pub fn restrict_self(ruleset: RawFd) -> SysResult<()> {
    // SAFETY: plain syscall on an integer fd.
    cvt(unsafe { raw_syscall(libc::SYS_landlock_restrict_self, [ruleset as u64, 0, 0, 0, 0, 0]) }).map(drop)
}
