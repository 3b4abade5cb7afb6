//! PID 1 of a run: builds the sandbox, then creates the tracee.

use super::*;
use crate::sys::{self, Arena};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;

/// What a run's PID 1 runs on, in the supervisor's memory (which it
/// shares): it stays where it is, unchanged, until PID 1 has exited
/// (see `sys::vm::spawn`).
pub(crate) struct Pid1 {
    pub plan: Plan,
    pub arena: Arena<Shared>,
    /// PID 1's own stack.
    pub stack: sys::Stack,
    /// The tracee's stack until its execve.
    pub tracee_stack: sys::Stack,
}

/// PID 1 of a run: created by the supervisor with CLONE_NEWPID on
/// `p.stack` (`sys::vm::spawn`), still in the supervisor's user
/// namespace; the tracee runs on `p.tracee_stack` until its execve.
/// Never returns.
pub(crate) fn pid1(p: &Pid1) -> ! {
    match pid1_setup(&p.plan, &p.arena, &p.tracee_stack) {
        Ok(never) => match never {},
        Err(f) => fail_exit(&p.arena, f),
    }
}

pub(crate) enum Never {}

pub(crate) fn pid1_setup(plan: &Plan, arena: &Arena<Shared>, stack: &sys::Stack) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // A name of its own, for ps and profiles (it was created as `capsule`).
    sys::set_comm(c"capsule-pid1");
    // Nothing of the supervisor's but what this run needs: other runs'
    // descriptors and the clients' sockets must not live on in PID 1.
    sys::close_all_except(&plan.keep_fds);
    // Rust's runtime installed SIGSEGV and SIGBUS handlers in the
    // supervisor; as init of the PID namespace, PID 1 receives from inside
    // only signals it has handlers for, so it must have none. (Ignored
    // signals are harmless for it; the tracee resets everything.)
    sys::default_signals(&[libc::SIGSEGV, libc::SIGBUS]);

    // Die with the supervisor; the pidfd check covers a death before this.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    let mut pfd = [libc::pollfd { fd: plan.supervisor_pidfd, events: libc::POLLIN, revents: 0 }];
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }

    // Until it enters its own user namespace below, PID 1 has every
    // capability in the supervisor's, which owns the run's PID namespace,
    // the shared network and the supervisor's mounts: everything that needs
    // them happens first.

    // An IPC namespace of the run's own: System V objects and POSIX
    // message queues a run leaves behind never reach another run. Created
    // here, owned by the supervisor's user namespace, over which the
    // program has no capability. (Its teardown is asynchronous on current
    // kernels: ~1-2% of a warm supervisor's throughput, docs/latency.md.)
    // A UTS namespace too (a copy of the supervisor's, hostname
    // `capsule`; the program cannot change it, but runs share nothing),
    // with the run's own hostname if it asks for one.
    sys::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS).map_err(|e| Fail::new(Step::IpcNamespace, e))?;
    if let Some(name) = &plan.hostname {
        sys::sethostname(name.to_bytes()).map_err(|e| Fail::new(Step::Hostname, e))?;
    }
    // The run's procfs belongs to the new PID namespace, whose owner is the
    // supervisor's user namespace. It stays detached until the mount plan
    // attaches it; meanwhile it is how PID 1 and the tracee reach
    // /proc/self/uid_map.
    let proc = mounts::new_proc().map_err(|e| Fail::new(Step::ProcMount, e))?;
    let p = proc.as_raw_fd();

    // Clone the bind sources from the descriptors the supervisor resolved
    // (no path is looked up again): they are mounts of the supervisor's
    // namespace, which open_tree refuses to clone from any other, so this
    // comes before the run's own. The clones are detached, attached later.
    mounts::clone_binds(&plan.mounts)?;
    // A mount namespace of the run's own: a private copy of the
    // supervisor's, in which PID 1 builds the tree and pivots. The tracee's
    // user + mount namespace below will lock every mount.
    sys::unshare(libc::CLONE_NEWNS).map_err(|e| Fail::new(Step::UserNamespace, e))?;
    // Build the tree: clone the other sources from the host view, attach
    // the new root, apply the operations in order, pivot into it.
    let mut build = Build::new(p);
    mounts::clone_sources(&plan.mounts, &mut build)?;
    let root = mounts::attach_root(&build)?;
    mounts::apply_ops(&plan.mounts, &build, root)?;
    mounts::pivot(root)?;
    // Landlock's ruleset, with the rules for the places the mounts make
    // writable: here, after the pivot, the paths resolve in the run's tree
    // (and a PID 1 prepared ahead has done it before the request). Its
    // descriptor is close-on-exec and reaches the tracee through the
    // shared descriptor table.
    let ruleset = landlock::build(&plan.landlock)?;

    // Join the loopback-only network. A one-shot supervisor is still
    // creating it (0.5 ms, the costliest namespace) while PID 1 builds the
    // tree above, and sends it over `net_socket` when it is ready.
    match plan.net {
        NetJoin::Host => {}
        NetJoin::Fd(net) => sys::setns(net, libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::JoinNetwork, e))?,
        NetJoin::Receive(sock) => {
            let net = sys::recv_one_fd(sock).map_err(|e| Fail::new(Step::JoinNetwork, e))?;
            sys::setns(net.as_raw_fd(), libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::JoinNetwork, e))?;
        }
        NetJoin::Own => {
            sys::unshare(libc::CLONE_NEWNET).map_err(|e| Fail::new(Step::NewNetwork, e))?;
            sys::loopback_up().map_err(|e| Fail::new(Step::NewNetwork, e))?;
        }
    }

    // PID 1's own user namespace, root in it mapped onto the supervisor's
    // root, i.e. the calling user on the host.
    sys::unshare(libc::CLONE_NEWUSER).map_err(|e| Fail::new(Step::UserNamespace, e))?;
    write_proc(p, b"setgroups", b"deny")
        .and_then(|_| write_proc(p, b"gid_map", b"0 0 1\n"))
        .and_then(|_| write_proc(p, b"uid_map", b"0 0 1\n"))
        .map_err(|e| Fail::new(Step::IdMap, e))?;
    // Bound what the kernel counts per user in this user namespace, where
    // PID 1 alone has CAP_SYS_RESOURCE and the program none: its nested
    // namespaces and inotify/fanotify instances count here as well as
    // against the user's limits on the host, so it can never use those up
    // (every other sandbox and file watcher of the user would fail).
    rlimits::apply_ucounts(p, &plan.ucounts).map_err(|(i, e)| Fail {
        step: Step::Ucounts,
        errno: e,
        path: i as u32,
    })?;
    // Changing credentials cleared the parent-death signal: arm it again,
    // then check the supervisor did not die in between.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }

    // CVE-2019-5736: PID 1 runs the capsule binary and is visible to the
    // program as /proc/1. Non-dumpable, its /proc/1/exe (and fd/, mem,
    // ptrace) need CAP_SYS_PTRACE over the user namespace of its memory,
    // the supervisor's, which no sandboxed process has; so the binary can
    // never be reopened for writing through it, even with O_PATH +
    // /proc/self/fd. Chosen over copying the binary into a sealed memfd per
    // run (runc's fix), which costs a copy of the binary per run (measured
    // in docs/benchmarks.md). The memory is the supervisor's, non-dumpable
    // since its start (`Supervisor::finish`); set once more here, before
    // the tracee exists, so no sandboxed code ever sees a dumpable capsule
    // process whatever happened before.
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| Fail::new(Step::NonDumpable, e))?;

    // Block SIGCHLD before the tracee exists so no exit is missed.
    let sigchld = sys::signalfd_for(&[libc::SIGCHLD]).map_err(|e| Fail::new(Step::Wait, e))?;

    // Built: PID 1 (prepared ahead on the supervisor's CPU, see
    // `Supervisor::prepare`) may run anywhere the supervisor may, and so
    // may the tracee, which inherits the mask. Best effort: a cpuset
    // changed since only keeps PID 1 where it is.
    if let Some(set) = &plan.widen {
        let _ = sys::set_affinity(set);
    }

    // The tracee gets one more user namespace, U3, whose capabilities it
    // drops. The run's mount namespace belongs to U1, over which nothing in
    // U3 has any capability: the program cannot mount, unmount or remount
    // anything in it, and a mount namespace it makes itself (after its own
    // unshare(CLONE_NEWUSER)) is a copy for a less privileged owner, where
    // the kernel locks every mount together with its read-only and nosuid
    // flags. No mount namespace of its own, then: copying the tree (and
    // tearing the copy down at the program's exit) cost every run the
    // most expensive part of its exit. It is created like
    // posix_spawn does: sharing PID 1's memory on a stack of its own, PID 1
    // suspended until the tracee has called execve or died. No page tables
    // are copied (process creation dominates a short run), and when the
    // clone returns the program is running, or the tracee has recorded why
    // it is not.
    // The tracee waits for the run's go message (prepared ahead, this is
    // where it idles), so PID 1 resumes only once the program runs.
    let args = TraceeArgs { plan, arena, proc: p, ruleset: &ruleset };
    let cgroup = plan.cgroup.as_ref().map(|cg| cg.prog_dir);
    // It also shares PID 1's descriptor table (CLONE_FILES) until execve
    // gives the program a copy of its own: the seccomp listener the tracee
    // creates last, close-on-exec, thereby stays with PID 1 alone, which is
    // how PID 1 learns of the policy's forbidden calls.
    let flags = libc::CLONE_NEWUSER | libc::CLONE_FILES;
    // SAFETY: `tracee` (child/tracee.rs) makes raw `sys` calls only, allocates nothing, and ends in execve or exit.
    let tracee = unsafe { sys::clone_vfork(flags, cgroup, stack, &args, tracee) }
        .map_err(|e| Fail::new(Step::CloneTracee, e))?;
    // (The run's procfs stays open: a run stuck at its end is looked at
    // through it, see `abort_fuse`.)
    // The program has its own descriptor table now (or the tracee died):
    // the ruleset is no longer needed.
    drop(ruleset);
    // The run's stdio is the program's alone: a pipe must see EOF when the
    // program's side closes. The tracee put it on 0-2 of the shared table
    // (and closed what it received), so PID 1 drops 0-2 and the go socket.
    for fd in [plan.go_sock, 0, 1, 2] {
        sys::close(fd);
    }
    let listener = shared.notify_fd.load(SeqCst) - 1;
    pid1_wait(plan, arena, stack, tracee, sigchld, listener, proc)
}
