//! The data every layer shares: the run spec and its units, the supervisor's
//! configuration, seccomp policy names, what a run produced, and the wire
//! formats (the library's binary protocol, `capsule serve`'s JSON lines).
//!
//! Imports `error` and `sys` only, nothing above it. Used in every process:
//! the client and the supervisor call it; PID 1 and the tracee take its
//! types and constants only. No system calls but the socket I/O of [`wire`].

pub mod config;
pub mod egress;
pub mod lines;
pub mod policy;
pub mod result;
pub mod session;
pub mod spec;
pub mod units;
pub mod wire;
