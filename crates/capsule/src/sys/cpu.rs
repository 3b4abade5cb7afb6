//! CPU affinity and the scheduler's attributes.

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

/// The kernel's `struct sched_attr` (the first version's 56 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// The calling thread's scheduling attributes.
fn sched_attr() -> SysResult<SchedAttr> {
    let mut a = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` bytes (the struct's own size)
    // into `a`; pid 0 is the calling thread.
    cvt(unsafe {
        raw_syscall(
            libc::SYS_sched_getattr,
            [0, &mut a as *mut SchedAttr as u64, std::mem::size_of::<SchedAttr>() as u64, 0, 0, 0],
        )
    })?;
    Ok(a)
}

/// Sets the calling thread's scheduling attributes to `a`, with
/// reset-on-fork: nothing it creates inherits them.
fn set_sched_attr_reset_on_fork(mut a: SchedAttr) -> SysResult<()> {
    a.size = std::mem::size_of::<SchedAttr>() as u32;
    a.flags |= SCHED_FLAG_RESET_ON_FORK;
    // SAFETY: the kernel reads `size` bytes from `a`, which is that large.
    cvt(unsafe { raw_syscall(libc::SYS_sched_setattr, [0, &a as *const SchedAttr as u64, 0, 0, 0, 0]) }).map(drop)
}

/// Asks for turns of `ns` on the CPU for the calling thread, if it runs
/// under the normal policy: EEVDF gives a thread with a shorter slice an
/// earlier deadline, so it runs soon after it wakes instead of waiting
/// behind the processes it feeds (`sched_attr.sched_runtime`, Linux >=
/// 6.12, no privilege needed; the kernel clamps it to 0.1-100 ms, and
/// older kernels ignore it for normal threads). Its nice value stays, and
/// with reset-on-fork no thread or process it creates inherits the slice.
/// Not with a negative nice value, which reset-on-fork would not pass on
/// either. Whether it was asked for (whether the kernel took it: [`slice`]).
pub fn short_slice(ns: u64) -> SysResult<bool> {
    let mut a = sched_attr()?;
    if a.policy != libc::SCHED_OTHER as u32 || a.nice < 0 {
        return Ok(false);
    }
    a.runtime = ns;
    set_sched_attr_reset_on_fork(a)?;
    Ok(true)
}

/// Moves the calling thread from the normal policy to `SCHED_BATCH`, nice
/// value kept, with reset-on-fork: a batch thread never preempts another
/// on waking, and still gets its fair share of the CPU. Nothing under
/// another policy (one the user chose) changes. Whether it was done.
pub fn batch_policy() -> SysResult<bool> {
    let mut a = sched_attr()?;
    if a.policy != libc::SCHED_OTHER as u32 {
        return Ok(false);
    }
    a.policy = libc::SCHED_BATCH as u32;
    set_sched_attr_reset_on_fork(a)?;
    Ok(true)
}

/// The calling thread's slice (`sched_attr.sched_runtime` of a normal
/// thread; 0 on kernels before 6.12).
pub fn slice() -> SysResult<u64> {
    sched_attr().map(|a| a.runtime)
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

/// The CPUs `set` holds, in order.
pub fn cpus_of(set: &libc::cpu_set_t) -> Vec<usize> {
    // SAFETY: CPU_ISSET only reads one bit of the set, within its size.
    (0..8 * std::mem::size_of::<libc::cpu_set_t>()).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, set) }).collect()
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
    fn cpus_of_lists_a_set() {
        let mut set = one_cpu(3).unwrap();
        // SAFETY: CPU_SET sets one bit within the set.
        unsafe { libc::CPU_SET(7, &mut set) };
        assert_eq!(cpus_of(&set), vec![3, 7]);
        assert_eq!(cpus_of(&affinity().unwrap()).len(), cpus_in(&affinity().unwrap()));
    }

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

    #[test]
    fn a_short_slice_is_not_inherited() {
        std::thread::spawn(|| {
            let before = slice().unwrap();
            if before == 0 {
                let why = "no custom slices before Linux 6.12 (sched_getattr gives no runtime)";
                assert!(std::env::var("CAPSULE_TEST_STRICT").as_deref() != Ok("1"), "required (strict mode): {why}");
                return eprintln!("SKIP a_short_slice_is_not_inherited: {why}");
            }
            assert!(short_slice(100_000).unwrap(), "asked for");
            assert_eq!(slice().unwrap(), 100_000);
            let child = std::thread::spawn(slice).join().unwrap().unwrap();
            assert_eq!(child, before, "a thread it creates gets the default");
        })
        .join()
        .unwrap();
        // A negative nice value (if this test may set one) is passed on as it was: no slice.
        std::thread::spawn(|| {
            // SAFETY: plain syscalls; `who` 0 with PRIO_PROCESS is the calling thread.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -1) } != 0 {
                return;
            }
            assert!(!short_slice(100_000).unwrap(), "not with a negative nice value");
            assert_ne!(slice().unwrap(), 100_000);
        })
        .join()
        .unwrap();
    }
}
