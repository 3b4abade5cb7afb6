//! The child path after clone: PID 1 of the run and the tracee.
//!
//! Everything here is prepared before clone in a [`Plan`] (argv, envp,
//! mount plan, id maps, limits, filter, fds); the child only makes
//! syscalls: no allocation, no locks, no errno, no panics on purpose.
//! Failures are written to the [`Shared`] page as (step, errno, path
//! index) and turned into a message by the supervisor.
//!
//! The story, step by step with every reason: docs/child.md ("PID 1 and
//! the tracee, step by step"). In code it reads `pid1::pid1_setup` and
//! `tracee::tracee_setup`, numbered alike, then PID 1's event loop
//! `wait::pid1_wait`; [`Step`] lists what can fail in the same order.

mod caps;
mod cgroup;
mod fswatch;
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
pub(crate) use fswatch::{classify, Place, FS_CAPACITY, KIND_READ_HIDDEN, KIND_WRITE};
pub(crate) use mounts::build_template;
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
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) use seccomp::is_net_log;
