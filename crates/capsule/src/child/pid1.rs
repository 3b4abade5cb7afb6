//! PID 1 of a run: builds the sandbox, then creates the tracee.
//!
//! `pid1_setup`'s steps are numbered as in docs/child.md ("PID 1 and the
//! tracee, step by step"), which gives each one's full reason.

use super::landlock;
use super::mounts::{self, Build};
use super::rlimits;
use super::shared::{fail_exit, inherit_targets, write_id_maps, NetJoin, Plan, Shared};
use super::step::{Fail, Step};
use super::tracee::{tracee, TraceeArgs};
use super::wait::pid1_wait;
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

/// What a set-up that only ends by exec or exit returns on success.
pub(crate) enum Never {}

/// PID 1's set-up, step by step.
pub(crate) fn pid1_setup(plan: &Plan, arena: &Arena<Shared>, stack: &sys::Stack) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // 1. A name of its own for ps and profiles (it was created as `capsule`).
    sys::set_comm(c"capsule-pid1");
    // 2. Only this run's descriptors: other runs' and the clients' must not live on in PID 1.
    sys::close_all_except(&plan.keep_fds);
    // 3. No signal handlers: init of a PID namespace receives from inside only the signals it handles.
    sys::default_signals(&[libc::SIGSEGV, libc::SIGBUS]);
    // 4. Die with the supervisor; the pidfd check covers a death before this.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    let mut pfd = [libc::pollfd { fd: plan.supervisor_pidfd, events: libc::POLLIN, revents: 0 }];
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }

    // Steps 5 to 11 use PID 1's capabilities in the supervisor's user namespace, which step 12 leaves.

    // 5. IPC and UTS namespaces of the run's own, owned where the program has no capability; its hostname.
    sys::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS).map_err(|e| Fail::new(Step::IpcNamespace, e))?;
    if let Some(name) = &plan.hostname {
        sys::sethostname(name.to_bytes()).map_err(|e| Fail::new(Step::Hostname, e))?;
    }
    // 6. The run's procfs, detached until the mount plan attaches it: how PID 1 and the tracee reach their maps.
    let proc = mounts::new_proc().map_err(|e| Fail::new(Step::ProcMount, e))?;
    let p = proc.as_raw_fd();
    // 7. Clone the bind sources from the resolved descriptors: open_tree clones only from its own mount namespace.
    mounts::clone_binds(&plan.mounts)?;
    let mut build = Build::new(p);
    if plan.mount_template >= 0 {
        // 8-9. A copy of the mount template's namespace (the host root and /dev, built once), then the run's own
        //      operations: the same tree, without a second copy of the host's mounts or a pivot.
        mounts::build_on_template(plan.mount_template, &plan.mounts, &mut build)?;
    } else {
        // 8. A mount namespace of the run's own, owned by the supervisor's user namespace: the program changes none.
        sys::unshare(libc::CLONE_NEWNS).map_err(|e| Fail::new(Step::UserNamespace, e))?;
        // 9. Build the tree from the host view: the other sources, the new root, the operations in order, the pivot.
        mounts::clone_sources(&plan.mounts, &mut build)?;
        let root = mounts::attach_root(&build)?;
        mounts::apply_ops(&plan.mounts, &build, root)?;
        mounts::pivot(root)?;
    }
    // 10. Landlock's ruleset after the pivot, so that its paths resolve in the run's tree.
    let ruleset = landlock::build(&plan.landlock)?;
    // 11. Join the run's network last: a one-shot supervisor creates it while PID 1 builds the tree.
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

    // 12. The run's user namespace (U2): the program's ids mapped onto the supervisor's root, i.e. the caller; PID 1
    //     keeps every capability in it, which the tracee, its clone, drops. With subordinate ids the supervisor
    //     made it (mapping more than one id needs its capabilities over U1): PID 1, its owner, joins it.
    if plan.user_ns >= 0 {
        sys::setns(plan.user_ns, libc::CLONE_NEWUSER).map_err(|e| Fail::new(Step::JoinUserNamespace, e))?;
        sys::close(plan.user_ns);
    } else {
        sys::unshare(libc::CLONE_NEWUSER).map_err(|e| Fail::new(Step::UserNamespace, e))?;
        write_id_maps(p, &plan.uid_map, &plan.gid_map).map_err(|e| Fail::new(Step::IdMap, e))?;
    }
    // 13. Bound the per-user counts here, where only PID 1 has CAP_SYS_RESOURCE: the program cannot use up the user's.
    rlimits::apply_ucounts(p, &plan.ucounts).map_err(|(i, e)| Fail {
        step: Step::Ucounts,
        errno: e,
        path: i as u32,
    })?;
    // 14. Arm the parent-death signal again (changing credentials cleared it), then check once more.
    sys::set_pdeathsig(libc::SIGKILL).map_err(|e| Fail::new(Step::ParentDeath, e))?;
    if sys::poll(&mut pfd, 0).unwrap_or(0) > 0 {
        sys::exit(1);
    }
    // 15. Non-dumpable before the tracee exists: /proc/1/exe must never reach the capsule binary (CVE-2019-5736).
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| Fail::new(Step::NonDumpable, e))?;
    // 16. Block SIGCHLD before the tracee exists, so that no exit is missed.
    let sigchld = sys::signalfd_for(&[libc::SIGCHLD]).map_err(|e| Fail::new(Step::Wait, e))?;
    // 17. Built: run anywhere the supervisor may (a PID 1 prepared ahead ran on its CPU); best effort.
    if let Some(set) = &plan.widen {
        let _ = sys::set_affinity(set);
    }
    // 18. The tracee, in the run's user namespace (or one of its own under it, with RLIMIT_NPROC), on PID 1's memory
    //     and descriptor table, in the run's cgroup; PID 1 sleeps (interruptibly: an idle spare is no load) until
    //     it has exec'd or died.
    let args = TraceeArgs { plan, arena, proc: p, ruleset: &ruleset };
    let cgroup = plan.cgroup.as_ref().map(|cg| cg.prog_dir);
    let flags = if plan.tracee_maps.is_some() { libc::CLONE_FILES | libc::CLONE_NEWUSER } else { libc::CLONE_FILES };
    // SAFETY: `tracee` (child/tracee.rs) makes raw `sys` calls only (never set_tid_address), allocates nothing,
    // and ends in execve or exit.
    let tracee = unsafe { sys::clone_until_exec(flags, cgroup, stack, &args, tracee) }
        .map_err(|e| Fail::new(Step::CloneTracee, e))?;
    // 19. The program has its own descriptor table: drop the ruleset, and 0-2 and the go socket, so that the
    //     program's pipes see EOF when it closes them. (The run's procfs stays open for `abort_fuse`.)
    //     What the tracee moved for the inherited descriptors goes back to its number, first.
    let moved = &shared.inherit_moved;
    for (&target, m) in inherit_targets(arena).unwrap_or(&[]).iter().zip(moved) {
        match m.load(SeqCst) {
            0 => {}
            1 => sys::close(target),
            m => {
                let _ = sys::dup3(m - 2, target, libc::O_CLOEXEC);
                sys::close(m - 2);
            }
        }
    }
    drop(ruleset);
    for fd in [plan.go_sock, 0, 1, 2] {
        sys::close(fd);
    }
    // 20. Wait for the run: its time limits, the seccomp listener the tracee left in the shared table, reaping.
    let listener = shared.notify_fd.load(SeqCst) - 1;
    pid1_wait(plan, arena, stack, tracee, sigchld, listener, proc)
}
