//! Debug builds only (every test run): an allocation made by a process
//! that shares the supervisor's memory ends that process on the spot.
//!
//! A run's PID 1, its tracee until `execve` and the network log's reader
//! are created with CLONE_VM (`capsule::sys::vm`): they share the
//! supervisor's heap and thread-local storage (glibc's malloc caches
//! included) and run concurrently with it, so an allocation there would
//! corrupt the supervisor's heap. The child path is written not to
//! allocate; this makes a mistake a clean failure of that run (PID 1 exits
//! with [`STATUS`]) instead of a heap corrupted at random.
//!
//! Such a process runs on a stack of its own, far from the main thread's,
//! and has a pid of its own: an allocation is checked with the stack
//! pointer first (a comparison), and only off the main stack (other
//! threads too) with `getpid`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{
    AtomicI32, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

/// PID 1's exit status when it allocated.
const STATUS: i32 = 98;

/// The main thread's stack: [bottom, top), with some slack above. (The
/// kernel keeps at least 128 MiB between the stack's top and the mappings
/// below it, where the pooled stacks are.)
static MAIN_STACK_TOP: AtomicUsize = AtomicUsize::new(0);
static MAIN_STACK_BOTTOM: AtomicUsize = AtomicUsize::new(0);
/// The process's pid at `main` (a re-executed supervisor sets it again).
static PID: AtomicI32 = AtomicI32::new(0);

/// Called first thing in `main`.
pub fn init() {
    let here = 0u8;
    let sp = &here as *const u8 as usize;
    set(sp - (64 << 20), sp + (1 << 20));
}

fn set(bottom: usize, top: usize) {
    // The top last: it turns the check on (other threads may be
    // allocating meanwhile, as the tests' are), and must not do so before
    // the pid it compares with is in place.
    PID.store(capsule::sys::getpid(), Relaxed);
    MAIN_STACK_BOTTOM.store(bottom, Relaxed);
    MAIN_STACK_TOP.store(top, Release);
}

#[inline(always)]
fn check() {
    let here = 0u8;
    let sp = &here as *const u8 as usize;
    let top = MAIN_STACK_TOP.load(Acquire);
    if top == 0 || (sp < top && sp >= MAIN_STACK_BOTTOM.load(Relaxed)) {
        return;
    }
    if capsule::sys::getpid() != PID.load(Relaxed) {
        let _ = capsule::sys::write(2, b"capsule: allocation in a process sharing the supervisor's memory\n");
        capsule::sys::exit(STATUS);
    }
}

struct Guard;

// SAFETY: every call is forwarded to the system allocator unchanged; the
// check before it allocates nothing and touches no allocator state.
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GUARD: Guard = Guard;

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    fn allocate(n: &usize) -> ! {
        let v = vec![1u8; *n];
        std::hint::black_box(&v);
        capsule::sys::exit(0)
    }

    /// A CLONE_VM child that allocates exits with `STATUS` before touching
    /// the heap.
    #[test]
    fn allocation_in_a_clone_vm_child_ends_it() {
        // This test thread stands for the main thread: its frame and what
        // it calls, not the whole thread area (the pooled stack may lie
        // close to the test threads' stacks).
        let here = 0u8;
        let sp = &here as *const u8 as usize;
        super::set(sp - (256 << 10), sp + 4096);
        let pool = capsule::sys::vm::StackPool::default();
        let stack = pool.take(256 << 10).unwrap();
        let n = 4096usize;
        // SAFETY: `n` and `stack` outlive the child (waited for below).
        let (_, pidfd) = unsafe { capsule::sys::vm::spawn(0, &stack, &n, allocate) }.unwrap();
        let status = capsule::sys::pidfd_wait(pidfd.as_raw_fd()).unwrap().expect("exited");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == super::STATUS, "status {status:#x}");
    }
}
