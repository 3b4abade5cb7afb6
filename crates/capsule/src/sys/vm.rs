//! A run's PID 1 as a process that shares the supervisor's memory
//! (CLONE_VM) instead of a fork of it, and the stacks it runs on.
//!
//! Forking the supervisor for every PID 1 cost each run a copy of its page
//! tables, a copy-on-write fault in the supervisor for every page it wrote
//! while that PID 1 lived (about 60 per run, 60% of the supervisor's CPU),
//! and the teardown of the copy at PID 1's exit (docs/latency.md). A PID
//! 1 that shares the memory costs none of these. The price is a contract:
//! while the child lives, what it reads must stay where it is, unchanged,
//! and it must leave the supervisor's state alone — no allocation, no
//! panics, and no errno (it shares the supervisor's thread-local storage:
//! every call in `sys` is made without libc's errno for this).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};

use super::{
    align16, clone3_on_stack, owned, raw_syscall, Arena, Call, CloneArgs, Errno, Stack, SysResult, CLONE_PIDFD,
};

/// A pool of stacks for PID 1s and their tracees. A stack goes back to the
/// pool only once the process that ran on it is gone, and pooled stacks
/// keep their touched pages: no munmap (which would interrupt every CPU
/// running a process of this memory to flush its TLB) and no page faults
/// for the next run.
#[derive(Default)]
pub struct StackPool {
    free: std::cell::RefCell<Vec<Stack>>,
}

impl StackPool {
    /// A stack of `len` bytes, pooled or new. A new one's lowest page is
    /// inaccessible: a process that overflows its stack faults there
    /// rather than writing into the supervisor's memory below.
    pub fn take(&self, len: usize) -> SysResult<Stack> {
        let mut free = self.free.borrow_mut();
        if let Some(i) = free.iter().position(|s| s.len == len) {
            return Ok(free.swap_remove(i));
        }
        let stack = Stack::new(len)?;
        // SAFETY: the first page of a fresh private mapping of `len` bytes
        // (more than a page: every caller's), which nothing uses yet.
        let ret =
            unsafe { raw_syscall(libc::SYS_mprotect, [stack.base as u64, 4096, libc::PROT_NONE as u64, 0, 0, 0]) };
        if ret < 0 {
            return Err(-ret as Errno);
        }
        Ok(stack)
    }

    /// Returns a stack that no process runs on any more.
    pub fn give(&self, stack: Stack) {
        self.free.borrow_mut().push(stack);
    }
}

/// A pool of run arenas, for the same reasons as [`StackPool`]: an arena
/// goes back only once its PID 1 is gone, and comes out again reset (its
/// header to `T::default()`, its byte area empty), its touched pages kept:
/// no `munmap` (which interrupts every CPU running a process of this
/// memory, such as other runs' PID 1s, to flush its TLB), no page faults.
pub struct ArenaPool<T> {
    free: std::cell::RefCell<Vec<Arena<T>>>,
}

impl<T> Default for ArenaPool<T> {
    fn default() -> Self {
        ArenaPool { free: std::cell::RefCell::new(Vec::new()) }
    }
}

impl<T: Default> ArenaPool<T> {
    /// An arena of at least `len` bytes, pooled (reset) or new.
    pub fn take(&self, len: usize) -> SysResult<Arena<T>> {
        let Some(a) = self.free.borrow_mut().pop() else { return Arena::new(len) };
        if a.len < len {
            return Arena::new(len);
        }
        // SAFETY: a pooled arena is used by no process any more (`give`'s
        // contract): its header may be written; the mapping is page-aligned
        // and big enough for T.
        unsafe { (a.ptr as *mut T).write(T::default()) };
        a.next.set(align16(std::mem::size_of::<T>()));
        Ok(a)
    }

    /// Returns an arena that no process uses any more.
    pub fn give(&self, arena: Arena<T>) {
        self.free.borrow_mut().push(arena);
    }
}

/// Starts `child(arg)` in a new process that shares the caller's memory
/// (CLONE_VM) but not its descriptor table, filesystem context or signal
/// handlers, on `stack`, with the namespace flags in `flags`. Returns its
/// pid and pidfd. The child is the caller's child (SIGCHLD at its exit).
///
/// # Safety
/// Until the child has exited (its pidfd is readable): `arg` and what it
/// points to stay mapped and unchanged, and `stack` stays mapped and is
/// used by nothing else. `child` must not allocate, unwind or touch errno
/// (every `sys` call qualifies), and must end with [`super::exit`].
pub unsafe fn spawn<T>(flags: u64, stack: &Stack, arg: &T, child: fn(&T) -> !) -> SysResult<(i32, OwnedFd)> {
    // The child reads its `Call` first thing, possibly after this function
    // has returned: it is written at the top of the child's own stack,
    // which lives as long as the child, and the stack proper starts below.
    let size = std::mem::size_of::<Call<'_, T>>().next_multiple_of(64);
    let top = stack.len & !63;
    if top <= size + 4096 {
        return Err(libc::EINVAL);
    }
    let at = (stack.base as usize + top - size) as *mut Call<'_, T>;
    // SAFETY: [at, at + size) lies inside the stack's mapping (checked
    // above), is suitably aligned (64), and nothing else uses the stack
    // (the caller's contract).
    unsafe { at.write(Call { arg, child }) };
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: flags | libc::CLONE_VM as u64 | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: (top - size) as u64,
        ..Default::default()
    };
    // SAFETY: the stack and the `Call` on it stay mapped and unchanged
    // until the child has exited, and so does `arg` (the caller's
    // contract); `args` lives on this frame for the call.
    let ret = unsafe { clone3_on_stack(&mut args, &*at) };
    if ret < 0 {
        return Err(-ret as Errno);
    }
    Ok((ret as i32, owned(pidfd as libc::c_long)))
}

/// [`spawn`] with the caller pinned to `pin.0` for the call (the child
/// inherits it) and to `pin.1` after it.
///
/// # Safety
/// As for [`spawn`].
pub unsafe fn spawn_pinned<T>(
    flags: u64,
    stack: &Stack,
    arg: &T,
    child: fn(&T) -> !,
    pin: Option<&(libc::cpu_set_t, libc::cpu_set_t)>,
) -> SysResult<(i32, OwnedFd)> {
    if let Some((one, _)) = pin {
        let _ = super::set_affinity(one);
    }
    // SAFETY: the caller's contract, passed on.
    let spawned = unsafe { spawn(flags, stack, arg, child) };
    if let Some((_, all)) = pin {
        let _ = super::set_affinity(all);
    }
    spawned
}

/// A thread of the caller's process that creates PID 1s for it
/// ([`Spawner::post`]): a process inherits its creator thread's seccomp
/// filter and `no_new_privs`, so PID 1s created here start under the filter
/// `setup` installed once on this thread, and their tracees need not
/// convert, JIT and cache it anew for every run (docs/seccomp.md). The
/// thread never ends once `setup` succeeded: a PID 1's parent-death signal
/// follows the thread that created it.
///
/// Posting does not wait: the poster goes on while the thread creates the
/// process, and takes the result from the [`Ticket`] when it needs it
/// (docs/latency.md, "The loop no longer waits for the spawner": waiting
/// cost the loop 230-290 µs a run, most of it the two threads' wake-ups).
pub struct Spawner {
    queue: Arc<Queue>,
}

/// The posts not run yet, oldest first, and the thread's wake-up.
struct Queue {
    posts: Mutex<VecDeque<Post>>,
    posted: Condvar,
    /// Held by a test: the thread waits here before running a post it took.
    #[cfg(test)]
    gate: Mutex<()>,
}

/// One process to create.
struct Post {
    slot: Arc<Slot>,
    job: Box<dyn FnOnce() -> SysResult<(i32, OwnedFd)> + Send>,
}

/// What became of a post, and whether its poster waits for it.
struct Slot {
    state: Mutex<(Birth, bool)>,
    settled: Condvar,
}

enum Birth {
    Queued,
    Running,
    Done(SysResult<(i32, OwnedFd)>),
    /// The result was taken, or the post was cancelled before it ran.
    Over,
}

/// A posted process creation: [`Ticket::try_take`] and [`Ticket::wait`]
/// give its pid and pidfd once created; dropping a ticket cancels a post
/// not run yet and waits for one running (see [`Spawner::post`]).
pub struct Ticket {
    slot: Arc<Slot>,
    queue: Arc<Queue>,
}

/// What a post borrows from its poster (see `post`'s contract).
struct Borrowed<T> {
    stack: *const Stack,
    arg: *const T,
}

// SAFETY: the pointers are only passed to `spawn` on the spawner's thread,
// which neither reads nor writes through them (the child does, under
// `spawn`'s contract), while the poster keeps both alive and unchanged
// (`post`'s contract).
unsafe impl<T> Send for Borrowed<T> {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Spawner {
    /// Starts the thread, named `name`, and runs `setup` on it first; its
    /// error ends the thread (no child exists yet) and is returned.
    pub fn start(name: &str, setup: impl FnOnce() -> SysResult<()> + Send + 'static) -> SysResult<Spawner> {
        let queue = Arc::new(Queue {
            posts: Mutex::new(VecDeque::new()),
            posted: Condvar::new(),
            #[cfg(test)]
            gate: Mutex::new(()),
        });
        let theirs = Arc::clone(&queue);
        let (first_tx, first_rx) = std::sync::mpsc::sync_channel::<Errno>(1);
        let serve = move || {
            let first = match setup() {
                Ok(()) => 0,
                Err(e) => e,
            };
            if first_tx.send(first).is_err() || first != 0 {
                return;
            }
            // Never returns: the PID 1s made here die with this thread.
            loop {
                let post = theirs.next();
                lock(&post.slot.state).0 = Birth::Running;
                #[cfg(test)]
                drop(lock(&theirs.gate));
                let result = (post.job)();
                let mut state = lock(&post.slot.state);
                state.0 = Birth::Done(result);
                if state.1 {
                    post.slot.settled.notify_all();
                }
            }
        };
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(serve)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
        match first_rx.recv() {
            Ok(0) => Ok(Spawner { queue }),
            Ok(e) => Err(e),
            Err(_) => Err(libc::EIO),
        }
    }

    /// Has [`spawn_pinned`] run on the spawner's thread, after the posts
    /// before it, and `after` closed there once it has (the child's copies
    /// of descriptors the poster must not keep open); returns at once.
    ///
    /// # Safety
    /// As for [`spawn`], with the child's lifetime counted from the post:
    /// `arg`, `stack` and what they point to stay mapped and unchanged
    /// until the ticket is settled (taken, waited for, or dropped, which
    /// waits for a post already running) and then until the child, if one
    /// was created, has exited. Every descriptor the child must inherit
    /// stays open, the same object at the same number, until then.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post<T: 'static>(
        &self,
        flags: u64,
        stack: &Stack,
        arg: &T,
        child: fn(&T) -> !,
        pin: Option<(libc::cpu_set_t, libc::cpu_set_t)>,
        after: Vec<OwnedFd>,
    ) -> Ticket {
        let borrowed = Borrowed { stack, arg };
        let job = move || {
            let b = borrowed;
            // SAFETY: the poster keeps both alive and unchanged until the
            // ticket is settled and the child gone (this function's contract).
            let spawned = unsafe { spawn_pinned(flags, &*b.stack, &*b.arg, child, pin.as_ref()) };
            drop(after);
            spawned
        };
        let slot = Arc::new(Slot { state: Mutex::new((Birth::Queued, false)), settled: Condvar::new() });
        let post = Post { slot: Arc::clone(&slot), job: Box::new(job) };
        lock(&self.queue.posts).push_back(post);
        self.queue.posted.notify_one();
        Ticket { slot, queue: Arc::clone(&self.queue) }
    }
}

impl Queue {
    /// The oldest post, waited for.
    fn next(&self) -> Post {
        let mut posts = lock(&self.posts);
        loop {
            if let Some(p) = posts.pop_front() {
                return p;
            }
            posts = self.posted.wait(posts).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Ticket {
    /// The result, if the process has been created (or failed to be);
    /// None while it is queued or being created. Given once.
    pub fn try_take(&self) -> Option<SysResult<(i32, OwnedFd)>> {
        let mut state = lock(&self.slot.state);
        match std::mem::replace(&mut state.0, Birth::Over) {
            Birth::Done(r) => Some(r),
            other => {
                state.0 = other;
                None
            }
        }
    }

    /// Takes the post back if it has not run: true then (no process was
    /// or will be created, and what it was to close is closed).
    pub fn cancel(&self) -> bool {
        let mut posts = lock(&self.queue.posts);
        let Some(k) = posts.iter().position(|p| Arc::ptr_eq(&p.slot, &self.slot)) else { return false };
        let post = posts.remove(k).expect("present");
        drop(posts);
        lock(&self.slot.state).0 = Birth::Over;
        drop(post);
        true
    }

    /// Waits for the result; `ECANCELED` if it was cancelled or taken
    /// already.
    pub fn wait(&self) -> SysResult<(i32, OwnedFd)> {
        let mut state = lock(&self.slot.state);
        loop {
            match std::mem::replace(&mut state.0, Birth::Over) {
                Birth::Done(r) => return r,
                Birth::Over => return Err(libc::ECANCELED),
                pending => {
                    state.0 = pending;
                    state.1 = true;
                    state = self.slot.settled.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

impl Drop for Ticket {
    /// A post must not run, or still be running, once what it borrows
    /// may be freed: cancelled if it has not run, else waited for.
    fn drop(&mut self) {
        if matches!(lock(&self.slot.state).0, Birth::Over) {
            return; // (the common case: taken)
        }
        if !self.cancel() {
            let _ = self.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    struct Job {
        input: u64,
        out: AtomicU64,
    }

    fn child(j: &Job) -> ! {
        // Shared memory: the parent sees this store.
        j.out.store(j.input * 2, SeqCst);
        super::super::exit(7)
    }

    fn report_no_new_privs(j: &Job) -> ! {
        // SAFETY: prctl on integers.
        let v = unsafe { raw_syscall(libc::SYS_prctl, [libc::PR_GET_NO_NEW_PRIVS as u64, 0, 0, 0, 0, 0]) };
        j.out.store(v as u64 + j.input, SeqCst);
        super::super::exit(0)
    }

    /// A child created through a spawner is created on its thread: it
    /// inherits what `setup` set there (`no_new_privs` here, which the
    /// calling thread does not get), shares the caller's memory and is the
    /// caller's child; a failed `setup` is the error of `start`.
    #[test]
    fn spawner_children_inherit_its_thread() {
        let failed = Spawner::start("test-spawner", || Err(libc::EPERM));
        assert_eq!(failed.err(), Some(libc::EPERM));
        let spawner = Spawner::start("test-spawner", || super::super::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)).unwrap();
        let pool = StackPool::default();
        for round in 0..3u64 {
            let stack = pool.take(64 << 10).unwrap();
            let job = Job { input: 10 * round, out: AtomicU64::new(u64::MAX) };
            // SAFETY: `job` and `stack` outlive the child (waited for below).
            let ticket = unsafe { spawner.post(0, &stack, &job, report_no_new_privs, None, Vec::new()) };
            let (_, pidfd) = ticket.wait().unwrap();
            let status = crate::sys::pidfd_wait(pidfd.as_raw_fd()).unwrap().expect("exited");
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status:#x}");
            assert_eq!(job.out.load(SeqCst), 1 + 10 * round, "the child has no_new_privs");
            pool.give(stack);
        }
        // SAFETY: prctl on integers.
        let here = unsafe { raw_syscall(libc::SYS_prctl, [libc::PR_GET_NO_NEW_PRIVS as u64, 0, 0, 0, 0, 0]) };
        assert_eq!(here, 0, "the calling thread is unchanged");
    }

    /// A post returns at once, even while the thread is busy, and posts
    /// run in order; one cancelled before it runs never does (its
    /// descriptors closed all the same); a post closes what it was given
    /// to close once the child exists.
    #[test]
    fn posts_run_in_order_and_are_cancelled() {
        let spawner = Spawner::start("test-spawner", || Ok(())).unwrap();
        let pool = StackPool::default();
        let stacks: Vec<Stack> = (0..3).map(|_| pool.take(64 << 10).unwrap()).collect();
        let jobs: Vec<Job> = (0..3).map(|i| Job { input: i, out: AtomicU64::new(u64::MAX) }).collect();
        let (r, w) = crate::sys::pipe2(libc::O_CLOEXEC).unwrap();
        // The thread takes the first post and then waits here until the gate opens.
        let gate = lock(&spawner.queue.gate);
        let t0 = std::time::Instant::now();
        // SAFETY: the jobs and stacks outlive the children (waited for below) and the tickets.
        let first = unsafe { spawner.post(0, &stacks[0], &jobs[0], child, None, vec![w]) };
        // SAFETY: as above.
        let second = unsafe { spawner.post(0, &stacks[1], &jobs[1], child, None, Vec::new()) };
        // SAFETY: as above.
        let third = unsafe { spawner.post(0, &stacks[2], &jobs[2], child, None, Vec::new()) };
        assert!(t0.elapsed() < std::time::Duration::from_secs(1), "posting waited");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(first.try_take().is_none() && second.try_take().is_none(), "ran through the gate");
        assert!(third.cancel(), "a queued post is cancelled");
        assert!(!third.cancel(), "cancelled twice");
        assert_eq!(third.wait().err(), Some(libc::ECANCELED));
        assert!(!first.cancel(), "a post the thread has taken is not cancelled");
        drop(gate);
        let (_, b) = second.wait().unwrap();
        let (_, a) = first.try_take().expect("the post before the second ran first").unwrap();
        for (fd, job, want) in [(a, &jobs[0], 0), (b, &jobs[1], 2)] {
            let status = crate::sys::pidfd_wait(fd.as_raw_fd()).unwrap().expect("exited");
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7, "status {status:#x}");
            assert_eq!(job.out.load(SeqCst), want);
        }
        assert_eq!(jobs[2].out.load(SeqCst), u64::MAX, "a cancelled post ran");
        // The pipe's write end, given to the first post, was closed on the spawner's thread.
        assert_eq!(crate::sys::read(r.as_raw_fd(), &mut [0u8; 1]), Ok(0));
        assert!(first.try_take().is_none(), "a result is given once");
        drop(stacks);
        // A clone that fails is the ticket's error, and what the post was to close is closed all the same.
        let tiny = Stack::new(4096).unwrap();
        let (r, w) = crate::sys::pipe2(libc::O_CLOEXEC).unwrap();
        // SAFETY: refused before any child exists; `tiny` and `jobs` outlive the ticket.
        let failed = unsafe { spawner.post(0, &tiny, &jobs[0], child, None, vec![w]) };
        assert_eq!(failed.wait().err(), Some(libc::EINVAL));
        assert_eq!(crate::sys::read(r.as_raw_fd(), &mut [0u8; 1]), Ok(0));
    }

    /// The child shares the caller's memory, reads its argument after
    /// `spawn` has returned (its `Call` lives on its own stack), and is
    /// the caller's child: its pidfd reports its exit status.
    #[test]
    fn spawned_child_shares_memory() {
        let pool = StackPool::default();
        let stack = pool.take(64 << 10).unwrap();
        let job = Job { input: 21, out: AtomicU64::new(0) };
        // SAFETY: `job` and `stack` outlive the child (waited for below).
        let (pid, pidfd) = unsafe { spawn(0, &stack, &job, child) }.unwrap();
        assert!(pid > 0);
        let status = crate::sys::pidfd_wait(pidfd.as_raw_fd()).unwrap().expect("exited");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7, "status {status:#x}");
        assert_eq!(job.out.load(SeqCst), 42);
        // Back to the pool, and out again: the same mapping.
        let base = stack.base;
        pool.give(stack);
        assert_eq!(pool.take(64 << 10).unwrap().base, base);
    }

    fn overflow(depth: &u64) -> ! {
        #[inline(never)]
        fn recurse(n: u64) -> u64 {
            let buf = [n; 512];
            std::hint::black_box(&buf);
            if n == 0 {
                0
            } else {
                recurse(n - 1) + buf[3]
            }
        }
        std::hint::black_box(recurse(*depth));
        super::super::exit(0)
    }

    /// A child that overflows its stack dies of SIGSEGV on the guard page
    /// instead of writing below the stack.
    #[test]
    fn stack_overflow_hits_the_guard_page() {
        let pool = StackPool::default();
        let stack = pool.take(64 << 10).unwrap();
        let depth: u64 = 1 << 20;
        // SAFETY: `depth` and `stack` outlive the child (waited for below);
        // the child's only effect on shared memory is its own stack.
        let (_, pidfd) = unsafe { spawn(0, &stack, &depth, overflow) }.unwrap();
        let status = crate::sys::pidfd_wait(pidfd.as_raw_fd()).unwrap().expect("exited");
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV, "status {status:#x}");
    }

    #[derive(Default)]
    struct Header {
        flags: AtomicU64,
    }

    /// A pooled arena comes back reset: its header to the default, its
    /// byte area empty; the same mapping.
    #[test]
    fn pooled_arena_comes_back_reset() {
        let pool = ArenaPool::<Header>::default();
        let a = pool.take(1 << 20).unwrap();
        a.flags.store(9, SeqCst);
        let first = a.put(b"argv").unwrap();
        let ptr = a.ptr;
        pool.give(a);
        let b = pool.take(1 << 20).unwrap();
        assert_eq!(b.ptr, ptr);
        assert_eq!(b.flags.load(SeqCst), 0);
        assert_eq!(b.put(b"next").unwrap(), first, "the byte area starts over");
        // A bigger one than pooled is a new mapping.
        pool.give(b);
        let c = pool.take(4 << 20).unwrap();
        assert_ne!(c.ptr, ptr);
    }

    /// A stack too small to hold the child's `Call` and a page is refused.
    #[test]
    fn tiny_stack_is_refused() {
        let stack = Stack::new(4096).unwrap();
        let depth = 0u64;
        // SAFETY: refused before any child exists.
        let r = unsafe { spawn(0, &stack, &depth, overflow) };
        assert_eq!(r.err(), Some(libc::EINVAL));
    }
}
