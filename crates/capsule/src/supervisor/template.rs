//! The mount template: the part of a run's mount tree that is the same for
//! every run of the host view (the host root cloned read-only, /dev with
//! its device nodes), built once per long-lived supervisor in a mount
//! namespace of its own that only the supervisor's descriptor keeps. A run
//! whose plan fits copies that namespace (`setns` then `unshare`) instead
//! of copying the supervisor's, cloning the host root into it again,
//! building /dev and pivoting (docs/latency.md, "The mount template").
//!
//! Nothing in it is written to by a run: the root and /dev are read-only
//! mounts; /dev/shm, /tmp, /run, /proc and the covers of hidden paths are
//! mounted fresh in each run's copy. The supervisor's own mount namespace,
//! which the template is cloned from, is private and never changes after
//! its set-up, so a template made later would be the same.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::child::build_template;
use crate::error::SysError;
use crate::plan::mounts::{Base, MountPlan, Op};
use crate::sys;

/// The supervisor's template, made at the first run that fits.
pub(crate) enum MountTemplate {
    /// Not used: a one-shot supervisor serves one run, which a template
    /// would only make slower.
    Off,
    Untried,
    Ready(OwnedFd),
    /// Making it failed: every run builds its tree from the host view, as
    /// without one (and fails there, with the reason, if that fails too).
    Failed,
}

impl MountTemplate {
    /// The template's namespace for a run of `plan`, made on first use;
    /// None when the plan does not fit or there is none.
    pub(crate) fn for_plan(&mut self, plan: &MountPlan) -> Option<RawFd> {
        if matches!(self, MountTemplate::Off) || !fits(plan) {
            return None;
        }
        if let MountTemplate::Untried = self {
            *self = match make() {
                Ok(fd) => MountTemplate::Ready(fd),
                Err(_) => MountTemplate::Failed,
            };
        }
        match self {
            MountTemplate::Ready(fd) => Some(fd.as_raw_fd()),
            _ => None,
        }
    }
}

/// Makes the template on a thread (a mount namespace is per thread's
/// `fs`): its namespace outlives the thread through the returned descriptor.
fn make() -> Result<OwnedFd, SysError> {
    std::thread::spawn(|| {
        sys::unshare(libc::CLONE_NEWNS).map_err(|e| SysError::new("unshare(CLONE_NEWNS)", e))?;
        build_template().map_err(|f| SysError::new(f.step.describe(), f.errno))?;
        sys::open(c"/proc/thread-self/ns/mnt", libc::O_RDONLY | libc::O_CLOEXEC, 0)
            .map_err(|e| SysError::new("open", e).path("/proc/thread-self/ns/mnt"))
    })
    .join()
    .unwrap_or_else(|_| Err(SysError::new("making the mount template (the thread panicked)", libc::EIO)))
}

/// Whether a run of `plan` may be built on the template and get the tree
/// it would get from the host view: the host root as base, no layers, one
/// /dev at `/dev`, the first procfs at `/proc` (where the scratch tmpfs
/// waits), and no other operation at `/` or in /dev or /proc (the template
/// has /dev before every operation, and the procfs mounts come last).
pub(crate) fn fits(plan: &MountPlan) -> bool {
    if !matches!(plan.base, Base::HostView) || plan.stage.is_some() {
        return false;
    }
    let (mut devs, mut first_proc) = (0, None);
    for op in &plan.ops {
        let dst = op.dst().to_bytes();
        match op {
            Op::Overlay { .. } => return false,
            Op::Dev { .. } => {
                devs += 1;
                if dst != b"/dev" {
                    return false;
                }
            }
            Op::Proc { .. } => {
                first_proc.get_or_insert(dst);
            }
            _ if dst == b"/" || within(dst, b"/dev") || within(dst, b"/proc") => return false,
            _ => {}
        }
    }
    devs == 1 && first_proc == Some(&b"/proc"[..])
}

/// `path` is `dir` or beneath it.
fn within(path: &[u8], dir: &[u8]) -> bool {
    path.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn within_is_by_component() {
        assert!(within(b"/dev", b"/dev"));
        assert!(within(b"/dev/shm", b"/dev"));
        assert!(!within(b"/device", b"/dev"));
        assert!(!within(b"/", b"/dev"));
        assert!(within(b"/proc/sys", b"/proc"));
    }
}
