//! Resource limits that need no cgroup, prepared before clone and applied
//! by the tracee; and the bounds on what the kernel counts per user (nested
//! namespaces, inotify and fanotify), applied by PID 1.

use std::ffi::CStr;

use crate::proto::spec::{self, Limits};

/// A resource limit as the tracee applies it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRlimit {
    pub resource: u64,
    pub soft: u64,
    pub hard: u64,
}

/// One limit: resource, soft value, hard value, and the spec field it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    pub resource: u32,
    pub value: u64,
    pub hard: u64,
    pub field: &'static str,
}

/// Whether the run's process limit is RLIMIT_NPROC (a limit and no cgroup
/// to count it in). The kernel counts that per user namespace and uid, and
/// PID 1 lives in the run's user namespace with the program's uid: the
/// tracee then gets a user namespace of its own, where only the program's
/// processes count (docs/child.md, "Namespaces").
pub(crate) fn counts_processes(limits: &Limits, cgroup: bool) -> bool {
    !cgroup && limits.pids.is_some()
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
    add(libc::RLIMIT_MEMLOCK, limits.locked_memory, "limits.locked_memory");
    // Without a cgroup, the process limit is RLIMIT_NPROC. Since Linux 5.14
    // it counts the processes of the uid *in the caller's user namespace*
    // (ucounts), and the program then has one of its own
    // (`counts_processes`), so PID 1 and other processes of the same user
    // elsewhere do not count against it.
    if !cgroup {
        add(libc::RLIMIT_NPROC, limits.pids, "limits.pids");
        // Without a cgroup, PID 1 enforces the CPU time of the whole tree
        // (child::wait), and no RLIMIT_CPU: a SIGXCPU a shell would report,
        // and a process CPU timer, whose clock the kernel then samples from
        // a running total that need not match the rusage the result gives.
    }
    v
}

/// The limits as the tracee applies them.
pub(crate) fn raw(limits: &[Rlimit]) -> Vec<RawRlimit> {
    limits.iter().map(|l| RawRlimit { resource: l.resource as u64, soft: l.value, hard: l.hard }).collect()
}

/// The kernel's per-user counts a run is bounded in (`/proc/sys/user/`),
/// each with the spec field it comes from.
pub(crate) const UCOUNTS: [(&CStr, &str); 12] = [
    (c"sys/user/max_user_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_pid_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_mnt_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_net_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_ipc_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_uts_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_cgroup_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_time_namespaces", "limits.nested_namespaces"),
    (c"sys/user/max_inotify_instances", "limits.inotify_instances"),
    (c"sys/user/max_inotify_watches", "limits.inotify_watches"),
    (c"sys/user/max_fanotify_groups", "limits.inotify_instances"),
    (c"sys/user/max_fanotify_marks", "limits.inotify_watches"),
];

/// The values PID 1 writes to [`UCOUNTS`] in the run's user namespace.
/// The kernel checks a count at every level of the user namespace chain,
/// so these bound all the program and its nested namespaces create. The
/// program's own cgroup namespace is created there too (by the tracee), and
/// with `tracee_userns` the tracee's user namespace: counted on top, so
/// that the program gets the whole bound.
pub(crate) fn ucounts(l: &Limits, tracee_userns: bool) -> [u32; 12] {
    let v = |n: Option<u64>, default| n.unwrap_or(default).min(spec::MAX_UCOUNT) as u32;
    let ns = v(l.nested_namespaces, spec::NESTED_NAMESPACES);
    let inotify = v(l.inotify_instances, spec::INOTIFY_INSTANCES);
    let watches = v(l.inotify_watches, spec::INOTIFY_WATCHES);
    [ns + u32::from(tracee_userns), ns, ns, ns, ns, ns, ns + 1, ns, inotify, watches, inotify, watches]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_memory_is_memlock_soft_and_hard() {
        let l = Limits { locked_memory: Some(0), ..Default::default() };
        let v = prepare(&l, false);
        let m = v.iter().find(|r| r.resource == libc::RLIMIT_MEMLOCK).expect("set");
        assert_eq!((m.value, m.hard, m.field), (0, 0, "limits.locked_memory"));
        assert!(prepare(&Limits::default(), false).iter().all(|r| r.resource != libc::RLIMIT_MEMLOCK));
    }

    #[test]
    fn processes_are_counted_by_rlimit_only_without_a_cgroup() {
        let l = Limits { pids: Some(3), ..Default::default() };
        let nproc = |cgroup| prepare(&l, cgroup).iter().any(|r| r.resource == libc::RLIMIT_NPROC);
        assert!(counts_processes(&l, false) && nproc(false));
        assert!(!counts_processes(&l, true) && !nproc(true));
        assert!(!counts_processes(&Limits::default(), false));
    }

    #[test]
    fn ucounts_count_the_tracees_own_namespaces() {
        let v = ucounts(&Limits::default(), false);
        let ns = spec::NESTED_NAMESPACES as u32;
        assert_eq!(v[0], ns, "user: the tracee makes none");
        assert_eq!(v[6], ns + 1, "cgroup: the program's own on top");
        assert_eq!(v[1], ns);
        assert_eq!(ucounts(&Limits::default(), true)[0], ns + 1, "user: the tracee's own on top");
        assert_eq!([v[8], v[10]], [spec::INOTIFY_INSTANCES as u32; 2]);
        assert_eq!([v[9], v[11]], [spec::INOTIFY_WATCHES as u32; 2]);
        let l = Limits { nested_namespaces: Some(0), inotify_instances: Some(u64::MAX), ..Default::default() };
        let v = ucounts(&l, false);
        assert_eq!((v[0], v[2], v[6]), (0, 0, 1), "0: none for the program");
        assert_eq!(v[8], spec::MAX_UCOUNT as u32);
        assert!(v.iter().all(|&n| n <= i32::MAX as u32), "the kernel takes an int");
    }
}
