//! capsule: run untrusted programs in an unprivileged Linux sandbox.
pub mod check;
pub mod error;
pub mod result;
pub mod spec;
pub mod sys;
pub mod units;
