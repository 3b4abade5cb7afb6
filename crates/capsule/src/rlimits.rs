//! Resource limits that need no cgroup, prepared before clone and applied
//! by the tracee.

use crate::child::RawRlimit;
use crate::spec::Limits;
use crate::sys::{self, Errno};

/// One limit: resource, soft value, hard value, and the spec field it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    pub resource: u32,
    pub value: u64,
    pub hard: u64,
    pub field: &'static str,
}

/// The limits a run sets: core dumps always off, the rest as the spec asks.
/// With a cgroup, processes and CPU time are limited there instead.
pub(crate) fn prepare(limits: &Limits, cgroup: bool) -> Vec<Rlimit> {
    let mut v = vec![Rlimit { resource: libc::RLIMIT_CORE, value: 0, hard: 0, field: "core dumps" }];
    let mut add = |resource, value: Option<u64>, field| {
        if let Some(value) = value {
            v.push(Rlimit { resource, value, hard: value, field });
        }
    };
    add(libc::RLIMIT_FSIZE, limits.output_limit, "limits.output_limit");
    add(libc::RLIMIT_NOFILE, limits.open_files, "limits.open_files");
    add(libc::RLIMIT_STACK, limits.stack, "limits.stack");
    add(libc::RLIMIT_AS, limits.address_space, "limits.address_space");
    // Without a cgroup, the process limit is RLIMIT_NPROC. Since Linux 5.14
    // it counts the processes of the uid *in the caller's user namespace*
    // (ucounts), and every run has user namespaces of its own, so other
    // processes of the same user elsewhere do not count against it.
    if !cgroup {
        add(libc::RLIMIT_NPROC, limits.pids, "limits.pids");
        // Without a cgroup, CPU time is limited per process, in whole
        // seconds (SIGXCPU at the limit, SIGKILL a second later).
        if let Some(t) = limits.cpu_time {
            let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
            v.push(Rlimit { resource: libc::RLIMIT_CPU, value: secs, hard: secs + 1, field: "limits.cpu_time" });
        }
    }
    v
}

/// The limits as the tracee applies them.
pub(crate) fn raw(limits: &[Rlimit]) -> Vec<RawRlimit> {
    limits.iter().map(|l| RawRlimit { resource: l.resource as u64, soft: l.value, hard: l.hard }).collect()
}

/// Applies the limits (child side). Returns the index of the one that failed.
pub(crate) fn apply(limits: &[RawRlimit]) -> Result<(), (usize, Errno)> {
    for (i, l) in limits.iter().enumerate() {
        sys::setrlimit(l.resource as u32, l.soft, l.hard).map_err(|e| (i, e))?;
    }
    Ok(())
}
