//! The child path after clone: PID 1 of the run and the tracee.
//!
//! Everything here is prepared before clone in a [`Plan`] (argv, envp,
//! mount plan, id maps, limits, filter, fds); the child only makes
//! syscalls: no allocation, no locks, no panics on purpose. Failures are
//! written to the [`Shared`] page as (step, errno, path index) and turned
//! into a message by the supervisor.
//!
//! Namespaces (thesis, ch. 3): the supervisor owns user namespace U1 and
//! the namespaces created once (IPC, UTS, time, cgroup, the loopback-only
//! network). PID 1 is cloned into a new PID namespace while still in U1,
//! creates the run's procfs and a mount namespace of its own (owned by
//! U1), builds the tree, joins the run's network and enters user namespace
//! U2. The tracee is cloned into user namespace U3, drops everything and
//! execs: it has no capability over U1, so it can change nothing in the
//! run's mount namespace, and any mount namespace it creates itself is a
//! copy made for a less privileged owner, in which every mount is locked.

mod caps;
mod cgroup;
mod fuse;
mod landlock;
mod mounts;
mod netlog;
mod pid1;
mod rlimits;
mod seccomp;
mod shared;
mod step;
mod tracee;
mod wait;

// What the supervisor uses.
pub(crate) use netlog::{Dest, NetLog, CAPACITY, DATA, INVALID, UNREADABLE};
pub(crate) use pid1::{pid1, Pid1};
pub(crate) use shared::{
    NetJoin, Plan, SealedFilter, Shared, CWD_NAME, EXEC_NAME, FLAG_CPU_TIME, FLAG_FORBIDDEN, FLAG_GO, FLAG_KILLED,
    FLAG_OUTPUT_LIMIT, FLAG_TRACEE_REAPED, FLAG_WALL_TIME,
};
pub(crate) use step::Step;

// What the supervisor's and plan's tests use.
#[cfg(test)]
pub(crate) use mounts::split_parent;
#[cfg(test)]
pub(crate) use netlog::{observe, Memory};
#[cfg(test)]
pub(crate) use seccomp::is_net_log;
