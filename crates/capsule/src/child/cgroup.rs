//! The run's cgroup as PID 1 reads it (no allocation).

use std::os::fd::RawFd;

use crate::sys;

/// Reads `user_usec` and `system_usec` from a cpu.stat fd (child side: no
/// allocation). Returns (user, system) µs.
pub(crate) fn read_cpu_stat(fd: RawFd) -> Result<(u64, u64), sys::Errno> {
    let mut buf = [0u8; 1024];
    let n = sys::pread(fd, &mut buf, 0)?;
    let (mut user, mut system) = (0, 0);
    for line in buf[..n].split(|&b| b == b'\n') {
        let mut parts = line.split(|&b| b == b' ');
        let (Some(k), Some(v)) = (parts.next(), parts.next()) else { continue };
        let v = v.iter().take_while(|b| b.is_ascii_digit()).fold(0u64, |a, b| a * 10 + (b - b'0') as u64);
        match k {
            b"user_usec" => user = v,
            b"system_usec" => system = v,
            _ => {}
        }
    }
    Ok((user, system))
}
