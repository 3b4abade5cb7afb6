//! The data every layer shares: the run spec and its units, the supervisor's
//! configuration, seccomp policy names, what a run produced, and the wire
//! formats (the library's binary protocol, `capsule serve`'s JSON lines).
//! No system calls but the socket I/O of [`wire`]; nothing above it imported.

pub mod config;
pub mod lines;
pub mod policy;
pub mod result;
pub mod spec;
pub mod units;
pub mod wire;
