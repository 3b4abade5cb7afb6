//! Supervisor-side planning: everything a run's PID 1 and tracee need,
//! made before clone: the mount plan (`mounts`, its sources resolved by
//! `resolve`), layers ([`overlay`]), the Landlock rules ([`landlock`]),
//! resource limits (`rlimits`) and seccomp filters ([`seccomp`]).
//!
//! Imports `error`, `sys`, `proto`, `host` and `layer`, never `child` or
//! above. Runs in the supervisor's process (may allocate, resolves paths,
//! compiles filters); `child` executes the plans in PID 1 and the tracee,
//! taking their data types only.

pub mod landlock;
pub(crate) mod memo;
pub(crate) mod mounts;
pub mod overlay;
pub(crate) mod resolve;
pub(crate) mod rlimits;
pub mod seccomp;
