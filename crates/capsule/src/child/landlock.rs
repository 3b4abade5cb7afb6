//! Landlock in PID 1 (the ruleset, built after the pivot) and the tracee
//! (enforced last): syscalls only, no allocation.

use super::step::{Fail, Step};
use crate::plan::landlock::{Grant, Masks, Plan, FS_FILE};
use crate::proto::result::Enforcement;
use crate::sys::{self, landlock as raw};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Full when every requested right is handled, none when none is,
/// partial otherwise. No allocation: the tracee calls it.
pub fn enforcement(requested: Masks, handled: Masks) -> Enforcement {
    let h = Masks {
        fs: handled.fs & requested.fs,
        net: handled.net & requested.net,
        scoped: handled.scoped & requested.scoped,
    };
    if h.is_empty() {
        Enforcement::None
    } else if h == requested {
        Enforcement::Full
    } else {
        Enforcement::Partial
    }
}

/// A ruleset PID 1 built, for the tracee.
pub(crate) struct Built {
    pub fd: Option<OwnedFd>,
    /// What the ruleset handles (the filesystem part dropped if one of its
    /// rules could not be added).
    pub handled: Masks,
}

impl Built {
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }
}

/// PID 1, after its pivot: creates the ruleset and adds the path and port
/// rules. Best effort for the filesystem and scopes; a failure of the
/// network part, which the user asked for, fails the run. Syscalls only.
pub(crate) fn build(plan: &Plan) -> Result<Built, Fail> {
    let none = Built { fd: None, handled: Masks::default() };
    let asked_net = plan.requested.net != 0;
    if plan.handled.is_empty() {
        return Ok(none);
    }
    let mut handled = plan.handled;
    let ruleset = match raw::create_ruleset(handled.fs, handled.net, handled.scoped) {
        Ok(fd) => fd,
        Err(e) if asked_net => return Err(Fail::new(Step::LandlockRuleset, e)),
        Err(_) => return Ok(none),
    };
    let mut ruleset = Some(ruleset);
    if add_path_rules(ruleset.as_ref().map_or(-1, |f| f.as_raw_fd()), plan).is_err() {
        // A writable place without its rule would break the run: drop the
        // filesystem part rather than enforce half of it.
        handled.fs = 0;
        ruleset = None;
        if !handled.is_empty() {
            ruleset = match raw::create_ruleset(0, handled.net, handled.scoped) {
                Ok(fd) => Some(fd),
                Err(e) if asked_net => return Err(Fail::new(Step::LandlockRuleset, e)),
                Err(_) => return Ok(none),
            };
        }
    }
    if let Some(fd) = &ruleset {
        for &(port, access) in &plan.ports {
            raw::add_port_rule(fd.as_raw_fd(), port, access).map_err(|e| Fail::new(Step::LandlockPort, e))?;
        }
    }
    if ruleset.is_none() {
        handled = Masks::default();
    }
    Ok(Built { fd: ruleset, handled })
}

/// Adds a rule for every writable place that exists in the run's tree (a
/// missing one, a skipped `-try` bind or optional tmpfs, needs none).
pub(crate) fn add_path_rules(ruleset: RawFd, plan: &Plan) -> Result<(), sys::Errno> {
    let fs = plan.handled.fs;
    for (path, grant) in &plan.paths {
        let fd = match sys::open(path, libc::O_PATH, 0) {
            Ok(fd) => fd,
            // Nothing there the program could reach either.
            Err(libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP) => continue,
            Err(e) => return Err(e),
        };
        let dir = sys::fd_mode(fd.as_raw_fd())? == libc::S_IFDIR;
        let access = match grant {
            Grant::Writable if dir => fs,
            _ => fs & FS_FILE,
        };
        if access != 0 {
            raw::add_path_rule(ruleset, fd.as_raw_fd(), access)?;
        }
    }
    Ok(())
}

/// The tracee, after the go message: the run's stdin, stdout and stderr on
/// 0-2 stay writable when reopened (`echo x > /dev/stderr` opens
/// /proc/self/fd/2, i.e. the caller's file or terminal, by its own path),
/// when they are files or terminals opened for writing. Best effort:
/// writing to the descriptors themselves needs no rule.
pub(crate) fn add_stdio_rules(ruleset: RawFd, handled_fs: u64) {
    let access = handled_fs & FS_FILE;
    if ruleset < 0 || access == 0 {
        return;
    }
    for fd in 0..3 {
        let is_file = matches!(sys::fd_mode(fd), Ok(libc::S_IFREG | libc::S_IFCHR));
        let writable = matches!(sys::fd_access_mode(fd), Ok(libc::O_WRONLY | libc::O_RDWR));
        if is_file && writable {
            let _ = raw::add_path_rule(ruleset, fd, access);
        }
    }
}

/// The tracee, right before seccomp: enforces the ruleset and tells what
/// that enforced. A failure fails the run only when it asked for network
/// rules.
pub(crate) fn restrict(ruleset: RawFd, requested: Masks, handled: Masks) -> Result<Enforcement, Fail> {
    if ruleset < 0 {
        return Ok(Enforcement::None);
    }
    match raw::restrict_self(ruleset) {
        Ok(()) => Ok(enforcement(requested, handled)),
        Err(e) if requested.net != 0 => Err(Fail::new(Step::LandlockRestrict, e)),
        Err(_) => Ok(Enforcement::None),
    }
}

#[cfg(test)]
mod tests {
    use super::enforcement;
    use crate::plan::landlock::{Masks, NET_BIND_TCP, NET_CONNECT_TCP};
    // The masks the plan asks for, and what a kernel of each ABI handles of them.
    use crate::plan::landlock::{handled, requested};
    use crate::proto::result::Enforcement;

    #[test]
    fn enforcement_like_restriction_status() {
        let fs_only = requested(true, None, None);
        assert_eq!(enforcement(fs_only, handled(7, fs_only)), Enforcement::Full);
        assert_eq!(enforcement(fs_only, handled(6, fs_only)), Enforcement::Full);
        // 6.1 (ABI 2): no TRUNCATE, no scopes.
        assert_eq!(enforcement(fs_only, handled(2, fs_only)), Enforcement::Partial);
        assert_eq!(enforcement(fs_only, handled(5, fs_only)), Enforcement::Partial);
        // ABI 1: the filesystem part is skipped, there is nothing else.
        assert_eq!(handled(1, fs_only).fs, 0);
        assert_eq!(enforcement(fs_only, handled(1, fs_only)), Enforcement::None);
        assert_eq!(enforcement(fs_only, handled(0, fs_only)), Enforcement::None);
        let net = requested(true, Some(&[80]), Some(&[]));
        assert_eq!(net.net, NET_BIND_TCP | NET_CONNECT_TCP);
        assert_eq!(enforcement(net, handled(6, net)), Enforcement::Full);
        assert_eq!(enforcement(net, handled(4, net)), Enforcement::Partial);
        assert_eq!(enforcement(net, Masks::default()), Enforcement::None);
        for e in [Enforcement::Full, Enforcement::Partial, Enforcement::None] {
            assert_eq!(Enforcement::from_u32(e.to_u32()), Some(e));
        }
        assert_eq!(Enforcement::from_u32(0), None);
        assert_eq!(serde_json::to_string(&Enforcement::Partial).unwrap(), "\"partial\"");
    }
}
