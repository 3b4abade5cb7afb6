//! Processes: namespaces, credentials, clone and fork, exec, wait, pidfds, prctl, rlimits.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use super::{cvt, fcntl, owned, raw_syscall, retry, Errno, Stack, SysResult};

pub const CLONE_PIDFD: u64 = 0x1000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

#[repr(C)]
#[derive(Default)]
pub(super) struct CloneArgs {
    pub(super) flags: u64,
    pub(super) pidfd: u64,
    pub(super) child_tid: u64,
    pub(super) parent_tid: u64,
    pub(super) exit_signal: u64,
    pub(super) stack: u64,
    pub(super) stack_size: u64,
    pub(super) tls: u64,
    pub(super) set_tid: u64,
    pub(super) set_tid_size: u64,
    pub(super) cgroup: u64,
}

/// PR_CAP_AMBIENT(PR_CAP_AMBIENT_CLEAR_ALL).
pub fn prctl_ambient_clear() -> SysResult<()> {
    prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as u64)
}

pub fn unshare(flags: i32) -> SysResult<()> {
    // SAFETY: plain syscall on an integer.
    cvt(unsafe { raw_syscall(libc::SYS_unshare, [flags as u64, 0, 0, 0, 0, 0]) }).map(drop)
}

pub fn setns(fd: RawFd, nstype: i32) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { raw_syscall(libc::SYS_setns, [fd as u64, nstype as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn sethostname(name: &[u8]) -> SysResult<()> {
    // SAFETY: name is a valid region of name.len() bytes.
    cvt(unsafe { raw_syscall(libc::SYS_sethostname, [name.as_ptr() as u64, name.len() as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn getpid() -> i32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getpid, [0; 6]) as i32 }
}

pub fn getppid() -> i32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getppid, [0; 6]) as i32 }
}

pub fn getuid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getuid, [0; 6]) as u32 }
}

pub fn getgid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_getgid, [0; 6]) as u32 }
}

pub fn geteuid() -> u32 {
    // SAFETY: plain syscall without arguments; always succeeds.
    unsafe { raw_syscall(libc::SYS_geteuid, [0; 6]) as u32 }
}

/// setresuid(uid, uid, uid): every uid of the caller (errno-free: the child path uses it).
pub fn setresuid_all(uid: u32) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { raw_syscall(libc::SYS_setresuid, [uid as u64, uid as u64, uid as u64, 0, 0, 0]) }).map(drop)
}

/// setresgid(gid, gid, gid).
pub fn setresgid_all(gid: u32) -> SysResult<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { raw_syscall(libc::SYS_setresgid, [gid as u64, gid as u64, gid as u64, 0, 0, 0]) }).map(drop)
}

/// setgroups(0, NULL): no supplementary groups.
pub fn setgroups_empty() -> SysResult<()> {
    // SAFETY: a zero-length list; the kernel reads no memory.
    cvt(unsafe { raw_syscall(libc::SYS_setgroups, [0; 6]) }).map(drop)
}

pub fn setsid() -> SysResult<()> {
    // SAFETY: plain syscall without arguments.
    cvt(unsafe { raw_syscall(libc::SYS_setsid, [0; 6]) }).map(drop)
}

/// Result of a fork-like clone.
pub enum Forked {
    /// In the parent: the child's pid and, if asked for, its pidfd.
    Parent { pid: i32, pidfd: Option<OwnedFd> },
    /// In the child.
    Child,
}

/// clone3 without a new stack: returns twice, like fork. `flags` may hold
/// namespace flags, `CLONE_PIDFD` and `CLONE_INTO_CGROUP` (with `cgroup`).
///
/// # Safety
/// The child must only make async-signal-safe calls and must end with
/// [`exit`] or `execve`; it must not return into code that assumes it is
/// the parent.
pub unsafe fn clone_fork(flags: u64, cgroup: Option<RawFd>) -> SysResult<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: flags | if cgroup.is_some() { CLONE_INTO_CGROUP } else { 0 },
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.unwrap_or(0) as u64,
        ..Default::default()
    };
    if flags & CLONE_PIDFD != 0 {
        args.pidfd = &mut pidfd as *mut RawFd as u64;
    }
    // SAFETY: args is a valid clone_args of the size passed; with stack 0 the
    // child continues on a copy of the parent's stack like fork(). Only the
    // calling thread exists in the child, which takes no locks (async-signal-
    // safe calls only: the caller's contract), so a lock another thread held
    // at the time of the clone cannot block it.
    let ret = cvt(unsafe {
        raw_syscall(
            libc::SYS_clone3,
            [&mut args as *mut CloneArgs as u64, std::mem::size_of::<CloneArgs>() as u64, 0, 0, 0, 0],
        )
    })?;
    if ret == 0 {
        Ok(Forked::Child)
    } else {
        let pidfd = (flags & CLONE_PIDFD != 0).then(|| owned(pidfd as _));
        Ok(Forked::Parent { pid: ret as i32, pidfd })
    }
}

/// Creates a child like posix_spawn: it shares the caller's memory and runs
/// `child(arg)` on `stack`, and the caller waits until the child has called
/// execve or exited. `flags` adds namespace flags; with `cgroup`, the child
/// is born in that cgroup (CLONE_INTO_CGROUP: no migration afterwards, which
/// would take the cgroup threadgroup lock for writing and wait for an RCU
/// grace period).
///
/// Not CLONE_VFORK: its wait is uninterruptible (state D, counted in the
/// load average for as long as the child takes). The caller sleeps in a
/// futex instead (state S): the kernel clears the child's
/// CLONE_CHILD_CLEARTID word and wakes it where it would complete a vfork
/// (`mm_release`, when execve has replaced the shared memory or at exit).
///
/// # Safety
/// `child` must only make raw syscalls (no allocation: the heap is the
/// caller's), must not change its clear-tid address (`set_tid_address`) and
/// must end in execve or [`exit`].
pub unsafe fn clone_until_exec<T>(
    flags: i32,
    cgroup: Option<RawFd>,
    stack: &Stack,
    arg: &T,
    child: fn(&T) -> !,
) -> SysResult<i32> {
    let call = Call { arg, child };
    // Nonzero until the kernel clears it at the child's execve or exit.
    let running = AtomicU32::new(1);
    let mut args = CloneArgs {
        flags: (flags as u64)
            | libc::CLONE_VM as u64
            | libc::CLONE_CHILD_CLEARTID as u64
            | if cgroup.is_some() { CLONE_INTO_CGROUP } else { 0 },
        child_tid: running.as_ptr() as u64,
        exit_signal: libc::SIGCHLD as u64,
        // clone3 takes the lowest address and the size; the kernel starts
        // the child at the top.
        stack: stack.base as u64,
        stack_size: (stack.len & !15) as u64,
        cgroup: cgroup.unwrap_or(0) as u64,
        ..Default::default()
    };
    // SAFETY: `stack` is a live mapping no other process uses while this
    // child runs, and `call` and `running` stay on this frame, unchanged but
    // for the kernel's clearing of `running`, until the wait below has seen
    // the child exec or exit.
    let ret = unsafe { clone3_on_stack(&mut args, &call) };
    if ret < 0 {
        return Err(-ret as Errno);
    }
    while running.load(SeqCst) != 0 {
        // EAGAIN: already cleared; EINTR: a signal. Both: look again.
        let _ = futex_wait(&running, 1);
    }
    Ok(ret as i32)
}

/// Sleeps (interruptibly) while `word` holds `expected`, until a
/// FUTEX_WAKE on it. Not FUTEX_PRIVATE_FLAG: the kernel's clear-tid wake
/// (`mm_release`) is a shared one, whose key differs from a private one's.
pub fn futex_wait(word: &AtomicU32, expected: u32) -> SysResult<()> {
    // SAFETY: `word` is a live, aligned u32 for the call; no timeout (NULL).
    cvt(unsafe {
        raw_syscall(libc::SYS_futex, [word.as_ptr() as u64, libc::FUTEX_WAIT as u64, expected as u64, 0, 0, 0])
    })
    .map(drop)
}

/// What a child started on a stack of its own runs: `child(arg)`.
pub(super) struct Call<'a, T> {
    pub(super) arg: &'a T,
    pub(super) child: fn(&T) -> !,
}

extern "C" fn trampoline<T>(p: *const libc::c_void) -> ! {
    // SAFETY: `p` is the `Call` the parent passed to clone3_on_stack, which
    // its callers keep alive and unchanged until the child has exec'd or
    // exited.
    let call = unsafe { &*(p as *const Call<'_, T>) };
    (call.child)(call.arg)
}

/// clone3 with `args` (CLONE_VM and a stack), the child calling
/// `call.child(call.arg)`; returns the child's pid or -errno.
///
/// # Safety
/// `args.stack` must be a live mapping that nothing else uses until the
/// child has exec'd or exited, and `call` must stay alive and unchanged
/// that long.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone3_on_stack<T>(args: &mut CloneArgs, call: &Call<'_, T>) -> i64 {
    let ret: i64;
    // SAFETY: clone3 with CLONE_VM starts the child right after the
    // `syscall` instruction with the same registers but rsp at the top of
    // `args.stack`, a live mapping used only by this child (the caller's
    // contract). The child path never returns into Rust code: it calls
    // `trampoline(call)` (r12, r13 survive the syscall) on the new, 16-byte
    // aligned stack, and the trampoline ends in execve or _exit. `call` and
    // what it points to stay valid that long (the caller's contract); the
    // parent resumes here with rax = pid or -errno. rcx and r11 are
    // clobbered by `syscall`.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // child
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") trampoline::<T> as *const (),
            in("r13") call as *const Call<'_, T>,
            out("rcx") _,
            out("r11") _,
        );
    }
    ret
}

/// [`clone3_on_stack`] on aarch64.
///
/// # Safety
/// As on x86_64.
#[cfg(target_arch = "aarch64")]
pub(super) unsafe fn clone3_on_stack<T>(args: &mut CloneArgs, call: &Call<'_, T>) -> i64 {
    let ret: i64;
    // SAFETY: clone3 with CLONE_VM starts the child right after the `svc`
    // instruction with the same registers but sp at the top of
    // `args.stack`, a live mapping used only by this child (the caller's
    // contract). The child path never returns into Rust code: it calls
    // `trampoline(call)` (x20, x21 survive the call) on the new, 16-byte
    // aligned stack, with no frame record to unwind to (x29, x30 zero), and
    // the trampoline ends in execve or _exit. `call` and what it points to
    // stay valid that long (the caller's contract); the parent resumes
    // here with x0 = pid or -errno. `svc` clobbers nothing else.
    unsafe {
        std::arch::asm!(
            "svc #0",
            "cbnz x0, 2f",
            // child
            "mov x29, xzr",
            "mov x30, xzr",
            "mov x0, x21",
            "blr x20",
            "brk #0",
            "2:",
            in("x8") libc::SYS_clone3,
            inlateout("x0") args as *mut CloneArgs => ret,
            in("x1") std::mem::size_of::<CloneArgs>(),
            in("x20") trampoline::<T> as *const (),
            in("x21") call as *const Call<'_, T>,
        );
    }
    ret
}

/// Runs `child(arg)` in a new process that shares the caller's memory and
/// descriptor table (CLONE_VM | CLONE_FILES), on `stack`, while the caller
/// goes on with `parent(pidfd)`, `pidfd` being the child's. When `parent`
/// returns (or unwinds), the child is killed if it still runs, and reaped:
/// `arg` and `stack` are borrowed for that whole time, so they outlive it.
/// Returns `parent`'s value and the child's wait status.
///
/// # Safety
/// Nothing else runs on `stack` until this returns (a run's PID 1 lends
/// the stack its tracee used until its execve). The child shares the
/// caller's thread-local storage, errno included: it must not allocate or
/// panic, may only use this module's wrappers, which leave errno alone (not
/// the exceptions the module documentation lists), and must end with
/// [`exit`].
pub unsafe fn with_vm_child<T: Sync, R>(
    stack: &Stack,
    arg: &T,
    child: fn(&T) -> !,
    parent: impl FnOnce(RawFd) -> R,
) -> SysResult<(R, i32)> {
    /// Kills (if need be) and reaps the child, also when `parent` unwinds.
    struct Reap(Option<OwnedFd>);
    impl Reap {
        fn finish(&mut self) -> i32 {
            let Some(fd) = self.0.take() else { return 0 };
            if let Ok(Some(status)) = pidfd_try_wait(fd.as_raw_fd()) {
                return status;
            }
            let _ = pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
            pidfd_wait(fd.as_raw_fd()).ok().flatten().unwrap_or(libc::SIGKILL)
        }
    }
    impl Drop for Reap {
        fn drop(&mut self) {
            self.finish();
        }
    }
    let call = Call { arg, child };
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_VM as u64 | libc::CLONE_FILES as u64 | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: (stack.len & !15) as u64,
        ..Default::default()
    };
    // SAFETY: the child is reaped below (by `Reap`, also on unwinding)
    // before `stack` is used by anything else (the caller's contract);
    // `call` lives on this frame, unchanged, until then as well.
    let ret = unsafe { clone3_on_stack(&mut args, &call) };
    if ret < 0 {
        return Err(-ret as Errno);
    }
    let mut reap = Reap(Some(owned(pidfd as libc::c_long)));
    let fd = reap.0.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let r = parent(fd);
    let status = reap.finish();
    Ok((r, status))
}

/// Creates a user namespace below the caller's, held by a child that
/// shares the caller's memory and runs on `stack` doing nothing, and calls
/// `parent(pid)` meanwhile (to write the namespace's maps and open it
/// through `/proc/PID`); then the child is killed and reaped.
///
/// # Safety
/// Nothing else runs on `stack` until this returns.
pub unsafe fn with_user_ns_child<R>(stack: &Stack, parent: impl FnOnce(i32) -> R) -> SysResult<R> {
    fn hold(_: &()) -> ! {
        loop {
            // aarch64 has no pause: ppoll of no descriptors, no timeout,
            // waits for a signal the same way.
            #[cfg(target_arch = "x86_64")]
            let nr = libc::SYS_pause;
            #[cfg(target_arch = "aarch64")]
            let nr = libc::SYS_ppoll;
            // SAFETY: pause takes no arguments, ppoll no descriptors (NULLs);
            // the child only waits here to be killed.
            unsafe { raw_syscall(nr, [0; 6]) };
        }
    }
    let call = Call { arg: &(), child: hold };
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_VM as u64 | libc::CLONE_NEWUSER as u64 | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: (stack.len & !15) as u64,
        ..Default::default()
    };
    // SAFETY: the child (which touches nothing but its stack) is killed and
    // reaped below before `stack` is used by anything else (the caller's
    // contract); `call` lives on this frame until then.
    let ret = unsafe { clone3_on_stack(&mut args, &call) };
    if ret < 0 {
        return Err(-ret as Errno);
    }
    let fd = owned(pidfd as libc::c_long);
    let r = parent(ret as i32);
    let _ = pidfd_send_signal(fd.as_raw_fd(), libc::SIGKILL);
    let _ = pidfd_wait(fd.as_raw_fd());
    Ok(r)
}

/// Forks a child that runs `child` and exits with its value; returns the
/// child's pid. Refused (EBUSY) unless the caller is single-threaded, so
/// that the child may allocate.
pub fn fork_call(child: impl FnOnce() -> i32) -> SysResult<i32> {
    let threads = std::fs::read_dir("/proc/self/task").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?.count();
    if threads != 1 {
        return Err(libc::EBUSY);
    }
    // SAFETY: the process has one thread (counted just now; only this
    // thread could start another), so the child is a whole copy of it and
    // may do anything; it ends with `exit`.
    match unsafe { fork() }? {
        Forked::Child => exit(child()),
        Forked::Parent { pid, .. } => Ok(pid),
    }
}

/// fork() for a single-threaded caller.
///
/// # Safety
/// As [`clone_fork`]: the child makes only async-signal-safe calls (unless
/// the caller is single-threaded) and ends with [`exit`] or `execve`.
pub unsafe fn fork() -> SysResult<Forked> {
    // SAFETY: the caller's contract is clone_fork's.
    unsafe { clone_fork(0, None) }
}

/// Ends the calling process at once, without running destructors or atexit
/// handlers (the right way out of a forked child).
pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group never returns and touches no Rust state (the
        // loop only satisfies the type).
        unsafe { raw_syscall(libc::SYS_exit_group, [code as u64, 0, 0, 0, 0, 0]) };
    }
}

pub fn kill(pid: i32, sig: i32) -> SysResult<()> {
    // SAFETY: plain syscall on integers (a negative pid is sign-extended).
    cvt(unsafe { raw_syscall(libc::SYS_kill, [pid as u64, sig as u64, 0, 0, 0, 0]) }).map(drop)
}

pub fn pidfd_open(pid: i32) -> SysResult<OwnedFd> {
    // SAFETY: plain syscall on integers.
    let fd = cvt(unsafe { raw_syscall(libc::SYS_pidfd_open, [pid as u64, 0, 0, 0, 0, 0]) })?;
    Ok(owned(fd))
}

/// A reaped child: pid, raw wait status.
pub fn waitpid(pid: i32, nohang: bool) -> SysResult<Option<(i32, i32)>> {
    let mut status: libc::c_int = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 } | libc::__WALL;
    let r = retry(|| {
        // SAFETY: status is a writable int; no rusage (NULL). A negative pid
        // is sign-extended.
        cvt(unsafe {
            raw_syscall(libc::SYS_wait4, [pid as u64, &mut status as *mut libc::c_int as u64, flags as u64, 0, 0, 0])
        })
    })? as i32;
    Ok(if r == 0 { None } else { Some((r, status)) })
}

/// Has `cmd`'s child move itself into the cgroup whose `cgroup.procs` is
/// `procs` (write "0") before it executes its program.
pub fn join_cgroup_before_exec(cmd: &mut std::process::Command, procs: OwnedFd) {
    use std::os::unix::process::CommandExt;
    let hook = move || {
        // SAFETY: a raw write(2) from a live buffer to a descriptor this closure owns: async-signal-safe,
        // as the child of a fork needs.
        let r = unsafe { raw_syscall(libc::SYS_write, [procs.as_raw_fd() as u64, b"0".as_ptr() as u64, 1, 0, 0, 0]) };
        match cvt(r) {
            Ok(_) => Ok(()),
            Err(e) => Err(std::io::Error::from_raw_os_error(e)),
        }
    };
    // SAFETY: the hook makes one write(2) and allocates nothing: sound between fork and exec.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// A child reaped with its rusage.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    pub pid: i32,
    pub status: i32,
    pub user_us: u64,
    pub system_us: u64,
    pub max_rss_kib: u64,
}

/// `wait4` without blocking on the child `pid` (-1: any child): its pid,
/// wait status and rusage, or None while it runs.
pub fn wait4_nohang(pid: i32) -> SysResult<Option<Reaped>> {
    let mut status: libc::c_int = 0;
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    let r = retry(|| {
        // SAFETY: status and ru are writable and live for the call.
        cvt(unsafe {
            raw_syscall(
                libc::SYS_wait4,
                [
                    pid as u64,
                    &mut status as *mut libc::c_int as u64,
                    libc::WNOHANG as u64,
                    ru.as_mut_ptr() as u64,
                    0,
                    0,
                ],
            )
        })
    })? as i32;
    if r == 0 {
        return Ok(None);
    }
    // SAFETY: zeroed, then filled by wait4.
    let ru = unsafe { ru.assume_init() };
    let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    Ok(Some(Reaped {
        pid: r,
        status,
        user_us: us(ru.ru_utime),
        system_us: us(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss as u64,
    }))
}

/// Rusage of all reaped children of the caller: (user µs, system µs, max RSS KiB).
pub fn rusage_children() -> (u64, u64, u64) {
    rusage(libc::RUSAGE_CHILDREN)
}

/// The calling process's own CPU time (user, system µs) and peak RSS (KiB).
pub fn rusage_self() -> (u64, u64, u64) {
    rusage(libc::RUSAGE_SELF)
}

/// Context switches of all reaped children of the caller: (voluntary, forced).
pub fn csw_children() -> (u64, u64) {
    let ru = raw_rusage(libc::RUSAGE_CHILDREN);
    (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
}

fn rusage(who: i32) -> (u64, u64, u64) {
    let ru = raw_rusage(who);
    let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime), ru.ru_maxrss as u64)
}

fn raw_rusage(who: i32) -> libc::rusage {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru is a writable rusage buffer (glibc's struct is the
    // kernel's on x86_64); `who` (RUSAGE_CHILDREN is -1) is sign-extended.
    unsafe { raw_syscall(libc::SYS_getrusage, [who as u64, ru.as_mut_ptr() as u64, 0, 0, 0, 0]) };
    // SAFETY: zeroed rusage is a valid value and getrusage fills it.
    unsafe { ru.assume_init() }
}

pub fn prctl(option: i32, arg2: u64) -> SysResult<()> {
    // SAFETY: prctl options used by capsule take integer arguments only.
    cvt(unsafe { raw_syscall(libc::SYS_prctl, [option as u64, arg2, 0, 0, 0, 0]) }).map(drop)
}

pub fn set_pdeathsig(sig: i32) -> SysResult<()> {
    prctl(libc::PR_SET_PDEATHSIG, sig as u64)
}

/// Names the calling thread (`/proc/PID/comm`, what `ps` and `top` show):
/// at most 15 bytes are kept.
pub fn set_comm(name: &CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes from the pointer, which `name` provides; it cannot fail.
    unsafe { raw_syscall(libc::SYS_prctl, [libc::PR_SET_NAME as u64, name.as_ptr() as u64, 0, 0, 0, 0]) };
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops the permitted, effective and inheritable capability sets to empty.
pub fn capset_empty() -> SysResult<()> {
    let hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: hdr and a two-element data array are what version 3 expects.
    cvt(unsafe { raw_syscall(libc::SYS_capset, [&hdr as *const CapHeader as u64, data.as_ptr() as u64, 0, 0, 0, 0]) })
        .map(drop)
}

pub fn setrlimit(resource: u32, soft: u64, hard: u64) -> SysResult<()> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: lim is a valid rlimit (the kernel's struct rlimit64 on
    // x86_64); the old limit is not asked for (NULL). pid 0: the caller,
    // as glibc's setrlimit does it.
    cvt(unsafe { raw_syscall(libc::SYS_prlimit64, [0, resource as u64, &lim as *const libc::rlimit as u64, 0, 0, 0]) })
        .map(drop)
}

/// execve with prepared NULL-terminated pointer arrays. Returns only on failure.
///
/// # Safety
/// `argv` and `envp` end with a null pointer, and each of their other
/// elements points to a NUL-terminated string alive for the call.
pub unsafe fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> Errno {
    debug_assert!(argv.last() == Some(&ptr::null()) && envp.last() == Some(&ptr::null()));
    // SAFETY: path is NUL-terminated; argv and envp as the caller's contract says.
    let r = unsafe {
        raw_syscall(libc::SYS_execve, [path.as_ptr() as u64, argv.as_ptr() as u64, envp.as_ptr() as u64, 0, 0, 0])
    };
    cvt(r).err().unwrap_or(0)
}

/// Sends `sig` to the process behind `pidfd`.
pub fn pidfd_send_signal(pidfd: RawFd, sig: i32) -> SysResult<()> {
    // SAFETY: plain syscall with a null siginfo.
    cvt(unsafe { raw_syscall(libc::SYS_pidfd_send_signal, [pidfd as u64, sig as u64, 0, 0, 0, 0]) }).map(drop)
}

/// Reaps the (exited or exiting) child behind `pidfd`, waiting for it;
/// returns its wait status.
pub fn pidfd_wait(pidfd: RawFd) -> SysResult<Option<i32>> {
    pidfd_waitid(pidfd, 0)
}

/// Like [`pidfd_wait`], but returns None at once when the child still runs.
pub fn pidfd_try_wait(pidfd: RawFd) -> SysResult<Option<i32>> {
    pidfd_waitid(pidfd, libc::WNOHANG)
}

fn pidfd_waitid(pidfd: RawFd, flags: i32) -> SysResult<Option<i32>> {
    const P_PIDFD: libc::idtype_t = 3;
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    retry(|| {
        // SAFETY: info is a zeroed siginfo_t the kernel fills in; no rusage
        // (NULL).
        cvt(unsafe {
            raw_syscall(
                libc::SYS_waitid,
                [P_PIDFD as u64, pidfd as u64, info.as_mut_ptr() as u64, (libc::WEXITED | flags) as u64, 0, 0],
            )
        })
    })?;
    // SAFETY: initialized (zeroed, then possibly filled by waitid).
    let info = unsafe { info.assume_init() };
    // SAFETY: si_pid/si_status are valid for SIGCHLD-style waitid results;
    // si_pid stays 0 when WNOHANG found nothing.
    let (pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        _ => status & 0x7f,
    }))
}

/// Starts `bin supervise` with `sock` as its fd 3 and everything else of
/// the caller closed (posix_spawn: no copy of a large caller's memory).
/// Returns (pid, pidfd).
pub fn spawn_supervisor(bin: &std::path::Path, sock: RawFd) -> SysResult<(i32, OwnedFd)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(bin.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
    let argv: [*const libc::c_char; 3] = [path.as_ptr(), c"supervise".as_ptr(), ptr::null()];
    // A descriptor number above 3 to dup from, so that dup2 onto 3 always
    // happens and clears close-on-exec.
    let high = owned(fcntl(sock, libc::F_DUPFD_CLOEXEC, 10)? as _);
    let mut pid: libc::pid_t = 0;
    // SAFETY: the file actions and attributes are initialized before use and
    // destroyed after; argv is NULL-terminated and outlives the call; environ
    // is the process environment.
    let rc = unsafe {
        let mut fa = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
        libc::posix_spawn_file_actions_init(fa.as_mut_ptr());
        libc::posix_spawn_file_actions_adddup2(fa.as_mut_ptr(), high.as_raw_fd(), 3);
        extern "C" {
            static environ: *const *const libc::c_char;
        }
        let rc = libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            fa.as_ptr(),
            ptr::null(),
            argv.as_ptr() as *const *mut _,
            environ as *const *mut _,
        );
        libc::posix_spawn_file_actions_destroy(fa.as_mut_ptr());
        rc
    };
    if rc != 0 {
        return Err(rc);
    }
    let pidfd = pidfd_open(pid)?;
    Ok((pid, pidfd))
}

/// Copies `buf.len()` bytes at `addr` in process `pid` into `buf`
/// (process_vm_readv; the caller needs ptrace access to it); returns how
/// many bytes were copied (fewer when the range runs into unmapped
/// memory). Leaves errno alone.
pub fn process_vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> SysResult<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, writable for its length; `remote` is
    // only read, in the other process, by the kernel (a bad address there
    // is EFAULT, not a fault here).
    let r = unsafe {
        raw_syscall(
            libc::SYS_process_vm_readv,
            [pid as u64, &local as *const libc::iovec as u64, 1, &remote as *const libc::iovec as u64, 1, 0],
        )
    };
    cvt(r).map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    use crate::sys::tests::errno;
    use crate::sys::{poll, process_vm_read};

    /// The state letter of thread `tid` of this process (`/proc/self/task/TID/stat`).
    fn thread_state(tid: i32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
    }

    #[test]
    fn clone_until_exec_waits_interruptibly_for_exit_or_exec() {
        struct Job {
            fd: RawFd,
            done: AtomicU32,
        }
        // Exits once the pipe has a byte (or is closed).
        fn exit_on_byte(j: &Job) -> ! {
            let mut b = [0u8; 1];
            let _ = crate::sys::read(j.fd, &mut b);
            j.done.store(1, SeqCst);
            exit(3)
        }
        let (r, w) = crate::sys::pipe().unwrap();
        let job = Job { fd: r.as_raw_fd(), done: AtomicU32::new(0) };
        let waiter = std::sync::atomic::AtomicI32::new(0);
        let pid = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let stack = Stack::new(64 << 10).unwrap();
                // SAFETY: gettid has no arguments and cannot fail.
                waiter.store(unsafe { libc::gettid() }, SeqCst);
                // SAFETY: the child makes raw syscalls only and ends in exit; `stack` is used by nothing else.
                unsafe { clone_until_exec(0, None, &stack, &job, exit_on_byte) }
            });
            // The caller waits while the child lives, asleep (S), not in the vfork wait (D).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let state = loop {
                let tid = waiter.load(SeqCst);
                let state = if tid == 0 { 'R' } else { thread_state(tid) };
                if state != 'R' || std::time::Instant::now() > deadline {
                    break state;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            };
            std::thread::sleep(std::time::Duration::from_millis(50));
            let early = h.is_finished();
            let later = thread_state(waiter.load(SeqCst));
            // (The child ends before any assertion: a failed one must not leave the waiter waiting.)
            crate::sys::write(w.as_raw_fd(), b"x").unwrap();
            let pid = h.join().unwrap().unwrap();
            assert!(!early, "returned before the child exited");
            assert_eq!((state, later), ('S', 'S'), "the caller's state while the child runs");
            pid
        });
        // It returned only once the child had exited.
        assert_eq!(job.done.load(SeqCst), 1);
        let (_, status) = waitpid(pid, false).unwrap().unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3, "status {status:#x}");

        // execve: the caller resumes while the program still runs.
        struct Exec {
            argv: [*const libc::c_char; 3],
            envp: [*const libc::c_char; 1],
        }
        // SAFETY: the pointers are to static C strings, only read.
        unsafe impl Sync for Exec {}
        fn exec_sleep(e: &Exec) -> ! {
            // SAFETY: argv and envp end with null and point to static strings.
            unsafe { execve(c"/bin/sleep", &e.argv, &e.envp) };
            exit(127)
        }
        let e = Exec { argv: [c"sleep".as_ptr(), c"10".as_ptr(), ptr::null()], envp: [ptr::null()] };
        let stack = Stack::new(64 << 10).unwrap();
        let t0 = std::time::Instant::now();
        // SAFETY: the child makes raw syscalls only and ends in execve or exit; `stack` is used by nothing else.
        let pid = unsafe { clone_until_exec(0, None, &stack, &e, exec_sleep) }.unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "waited for the program's exit");
        assert_eq!(waitpid(pid, true), Ok(None), "the program is not running");
        kill(pid, libc::SIGKILL).unwrap();
        let (_, status) = waitpid(pid, false).unwrap().unwrap();
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "status {status:#x}");
    }

    #[test]
    fn vm_child_shares_memory_and_is_reaped() {
        struct Job {
            pid: i32,
            src: u64,
            out: AtomicU64,
        }
        fn child(j: &Job) -> ! {
            let mut b = [0u8; 8];
            let v = match process_vm_read(j.pid, j.src, &mut b) {
                Ok(8) => u64::from_ne_bytes(b),
                Ok(_) => 1,
                Err(e) => 1000 + e as u64,
            };
            j.out.store(v, SeqCst);
            exit(0)
        }
        let value: u64 = 0x1234_5678_9abc_def0;
        let job = Job { pid: getpid(), src: &value as *const u64 as u64, out: AtomicU64::new(0) };
        let stack = Stack::new(64 << 10).unwrap();
        // SAFETY: nothing else runs on `stack`.
        let (polled, status) = unsafe {
            with_vm_child(&stack, &job, child, |pidfd| {
                let mut p = [libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 }];
                poll(&mut p, 10_000).unwrap()
            })
        }
        .unwrap();
        assert_eq!(polled, 1);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status:#x}");
        assert_eq!(job.out.load(SeqCst), value);
        // Unmapped memory: EFAULT, errno untouched.
        let mut b = [0u8; 8];
        // SAFETY: setting errno, a thread-local int.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(process_vm_read(getpid(), 8, &mut b), Err(libc::EFAULT));
        assert_eq!(errno(), 0);
        // A child still running when `parent` returns is killed and reaped.
        fn spin(_: &Job) -> ! {
            loop {
                std::hint::spin_loop();
            }
        }
        // SAFETY: nothing else runs on `stack`.
        let (_, status) = unsafe { with_vm_child(&stack, &job, spin, |_| ()) }.unwrap();
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL, "status {status:#x}");
    }
}
