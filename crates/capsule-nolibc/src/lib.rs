//! What `capsule`'s front end shares with the library, without a C library.
//!
//! The `capsule` command is a small program linked without glibc: glibc's
//! start-up alone (dynamic or static) costs ~0.4 ms in this kind of
//! virtual machine, most of it CPUID probing for cache sizes, a VM exit
//! each, and a one-shot `capsule run` through the user's agent is ~2 ms
//! in all. The front end hands a `capsule run` to the agent that serves
//! its caller, or executes the full command-line tool (`capsule-cli`).
//! To find that agent it computes the same [`identity`] the library does,
//! with the same code: this crate's; both check with [`server`] that the
//! agent is what listens on its socket before they send it anything.
//!
//! `no_std`, no allocation. x86_64 and aarch64 Linux (the system-call
//! layer is inline assembly, one calling convention and number table per
//! architecture).
#![cfg_attr(not(test), no_std)]

#[cfg(not(all(any(target_arch = "x86_64", target_arch = "aarch64"), target_os = "linux")))]
compile_error!("capsule-nolibc's system calls are written for x86_64 and aarch64 Linux");

pub mod identity;
pub mod server;
pub mod sys;

/// `n` in decimal, written at the end of `buf` (without allocating: the
/// front end and a run's PID 1 both format numbers this way).
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_writes_every_digit() {
        let mut buf = [0u8; 20];
        assert_eq!(super::decimal(0, &mut buf), b"0");
        assert_eq!(super::decimal(1_048_586, &mut buf), b"1048586");
        assert_eq!(super::decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
