//! What capsule knows of the host it runs on, read in the supervisor's
//! process (may allocate): the caller's identity and homes, the mount
//! table, the cgroup hierarchy and the caller's place in it.

pub mod cgroups;
pub mod fsrules;
pub mod identity;
pub mod mountinfo;
