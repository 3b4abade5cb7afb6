//! capsule: run untrusted programs in an unprivileged Linux sandbox.
//!
//! The modules, in the one direction they import (never upwards):
//! - `error` and `sys`: the error types; every raw system call and `unsafe`;
//! - `proto`: the run spec, results, configuration and wire formats;
//! - `host`: what is known of the host (identity, mount table, cgroups);
//! - `layer`: a layer directory, reviewed and committed;
//! - `plan`: a run prepared by the supervisor (mounts, overlays, Landlock,
//!   rlimits, seccomp);
//! - `child`: PID 1 and the tracee (no allocation, no errno; of `proto`,
//!   `host` and `plan` only types and constants);
//! - `supervisor`: preparing, starting and collecting runs in one event loop;
//! - `endpoints`: how clients reach a supervisor (one-shot, agent, serve);
//! - `sandbox` (the client API) and `check` (`capsule check`).
//!
//! `spec`, `result` and `units` are `proto`'s, re-exported: the types a
//! library user writes and reads.

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

pub use error::{Error, Refused, RunError, SetupError, SpecError, SupervisorError, SysError};
pub use proto::{result, spec, units};
pub use result::{Accounting, InteractResult, NetLogEntry, NetworkEntry, RunResult, Side, Status};
pub use spec::{InteractSpec, Limits, MountOp, RunSpec};
pub use supervisor::Supervisor;
