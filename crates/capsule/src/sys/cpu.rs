//! CPU affinity.

use super::{cvt, raw_syscall, SysResult};

/// CPUs in the caller's affinity mask.
pub fn cpu_count() -> u64 {
    affinity().map_or(1, |set| cpus_in(&set).max(1) as u64)
}

pub fn sched_yield() {
    // SAFETY: plain syscall without arguments.
    unsafe { raw_syscall(libc::SYS_sched_yield, [0; 6]) };
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> SysResult<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into
    // `set`, which is that large (and zeroed: what it does not write, as
    // glibc's wrapper ensures, is empty). Success returns the bytes written.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_sched_getaffinity,
            [0, std::mem::size_of::<libc::cpu_set_t>() as u64, &mut set as *mut libc::cpu_set_t as u64, 0, 0, 0],
        )
    })?;
    Ok(set)
}

/// Restricts the calling thread to `set` (a thread may always change its
/// own affinity, within its cpuset).
pub fn set_affinity(set: &libc::cpu_set_t) -> SysResult<()> {
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes from `set`.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_sched_setaffinity,
            [0, std::mem::size_of::<libc::cpu_set_t>() as u64, set as *const libc::cpu_set_t as u64, 0, 0, 0],
        )
    })
    .map(drop)
}

/// The CPU the calling thread runs on (it may move right after).
pub fn current_cpu() -> SysResult<usize> {
    let mut cpu: u32 = 0;
    // SAFETY: getcpu writes one unsigned int through its first pointer;
    // node and cache are NULL.
    cvt(unsafe { raw_syscall(libc::SYS_getcpu, [&mut cpu as *mut u32 as u64, 0, 0, 0, 0, 0]) })?;
    Ok(cpu as usize)
}

/// A set of CPUs holding just `cpu` (None past the set's 1024 CPUs).
pub fn one_cpu(cpu: usize) -> Option<libc::cpu_set_t> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return None;
    }
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET sets one bit of the set; `cpu` is within it (checked
    // above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    Some(set)
}

/// How many CPUs `set` holds.
pub fn cpus_in(set: &libc::cpu_set_t) -> usize {
    // SAFETY: CPU_COUNT only reads the set's bits.
    unsafe { libc::CPU_COUNT(set) as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_sets_hold_the_current_cpu() {
        let all = affinity().unwrap();
        let cpu = current_cpu().unwrap();
        let one = one_cpu(cpu).unwrap();
        assert_eq!(cpus_in(&one), 1);
        assert!(cpus_in(&all) >= 1);
        assert!(one_cpu(8 * std::mem::size_of::<libc::cpu_set_t>()).is_none(), "past the set");
        // A thread of its own: pinning it and widening back leave the
        // test runner's threads alone.
        std::thread::spawn(move || {
            set_affinity(&one).unwrap();
            assert_eq!(current_cpu().unwrap(), cpu);
            assert_eq!(cpus_in(&affinity().unwrap()), 1);
            set_affinity(&all).unwrap();
            assert_eq!(cpus_in(&affinity().unwrap()), cpus_in(&all));
        })
        .join()
        .unwrap();
    }
}
