//! capsule: run untrusted programs in an unprivileged Linux sandbox.
//!
//! One module per kernel facility (`namespaces`, `mounts` with `resolve`, `rlimits`,
//! `caps`, `seccomp`, `landlock`, `overlay` for layers), all raw syscalls and `unsafe` in `sys`, the child
//! path after clone in `child`, the run spec in `spec`.

pub mod agent;
mod caps;
pub mod cgroups;
pub mod check;
mod child;
pub mod client;
pub mod error;
pub mod fsrules;
pub mod landlock;
pub mod layer;
mod mounts;
mod namespaces;
mod netlog;
pub mod overlay;
pub mod proto;
mod relay;
mod resolve;
pub mod result;
mod rlimits;
pub mod sandbox;
pub mod seccomp;
pub mod serve;
pub mod spec;
pub mod supervisor;
pub mod sys;
pub mod units;

pub use error::{Error, SpecError, SysError};
pub use result::{Accounting, InteractResult, NetLogEntry, RunResult, Side, Status};
pub use spec::{InteractSpec, Limits, MountOp, RunSpec};
pub use supervisor::Supervisor;
