//! capsule: run untrusted programs in an unprivileged Linux sandbox.
//!
//! One module per kernel facility (`namespaces`, `mounts` with `resolve`, `rlimits`,
//! `caps`, `seccomp`, `landlock`, `overlay` for layers), all raw syscalls and `unsafe` in `sys`, the child
//! path after clone in `child`, the run spec in `spec`.

pub mod check;
mod child;
pub mod endpoints;
pub mod error;
pub mod host;
pub mod layer;
pub mod plan;
pub mod proto;
pub mod sandbox;
pub mod supervisor;
pub mod sys;

pub use endpoints::{agent, once as client, serve};
pub use error::{Error, SpecError, SysError};
pub use host::{cgroups, fsrules};
pub use plan::{landlock, overlay, seccomp};
pub use proto::{result, spec, units};
pub use result::{Accounting, InteractResult, NetLogEntry, RunResult, Side, Status};
pub use spec::{InteractSpec, Limits, MountOp, RunSpec};
pub use supervisor::Supervisor;
