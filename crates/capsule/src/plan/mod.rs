//! Supervisor-side planning: everything a run's PID 1 and tracee need,
//! made before clone (may allocate, resolves paths, compiles filters).

pub mod landlock;
pub(crate) mod mounts;
pub mod overlay;
pub(crate) mod resolve;
pub(crate) mod rlimits;
pub mod seccomp;
