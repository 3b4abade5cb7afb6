//! What capsule knows of the host it runs on, read in the supervisor's
//! process (may allocate): the caller's identity and homes, the mount
//! table, the cgroup hierarchy and the caller's place in it.

pub mod cgroups;
pub mod fsrules;
pub mod identity;
pub mod mountinfo;

/// The highest capability number the running kernel knows.
pub(crate) fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40)
}
