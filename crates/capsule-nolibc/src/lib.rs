//! What `capsule`'s front end shares with the library, without a C library.
//!
//! The `capsule` command is a small program linked without glibc: glibc's
//! start-up alone (dynamic or static) costs ~0.4 ms in this kind of
//! virtual machine, most of it CPUID probing for cache sizes, a VM exit
//! each, and a one-shot `capsule run` through the user's agent is ~2 ms
//! in all. The front end hands a `capsule run` to the agent that serves
//! its caller, or executes the full command-line tool (`capsule-cli`).
//! To find that agent it computes the same [`identity`] the library does,
//! with the same code: this crate's.
//!
//! `no_std`, no allocation. x86_64 Linux only (the system-call layer is
//! inline assembly), like the workspace's pinned target.
#![cfg_attr(not(test), no_std)]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("capsule-nolibc's system calls are written for x86_64 Linux");

pub mod identity;
pub mod sys;
