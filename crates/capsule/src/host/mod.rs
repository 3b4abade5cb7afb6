//! What capsule knows of the host it runs on: the caller's identity
//! ([`identity`]) and homes with the filesystem rules ([`fsrules`]), the
//! mount table ([`mountinfo`]), the cgroup hierarchy and the caller's place
//! in it ([`cgroups`]), the container it may run in ([`container`]), the
//! caller's subordinate ids ([`subids`]), the user and group database
//! ([`userdb`]).
//!
//! Imports `error`, `sys` and `proto` only. Runs in the supervisor's
//! process, and in the client's for the root check: may allocate. PID 1
//! and the tracee take its types and constants only.

pub mod cgroups;
pub mod container;
pub mod fsrules;
pub mod identity;
pub mod mountinfo;
pub mod subids;
pub mod userdb;

/// The highest capability number the running kernel knows.
pub(crate) fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40)
}
