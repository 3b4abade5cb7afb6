//! The tracee: in the run's user namespace (or its own) and cgroup, drops everything, execs the program.
//!
//! `tracee_setup`'s steps are numbered as in docs/child.md ("PID 1 and the
//! tracee, step by step"), which gives each one's full reason.

use super::caps;
use super::cgroup::read_cpu_stat;
use super::landlock;
use super::pid1::Never;
use super::rlimits;
use super::shared::{inherit_targets, moved_fd, run_filter, write_id_maps, Plan, Shared, CWD_NAME, EXEC_NAME, FLAG_GO};
use super::step::{Fail, Step};
use crate::plan::rlimits::RawRlimit;
use crate::proto::spec::MAX_INHERIT_FDS;
use crate::sys::{self, Arena};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering::SeqCst;

/// What PID 1 hands to the tracee (on PID 1's stack, which stays intact:
/// PID 1 waits until the tracee execs or exits).
pub(crate) struct TraceeArgs<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) arena: &'a Arena<Shared>,
    /// The run's procfs (for the tracee's own id maps).
    pub(crate) proc: RawFd,
    pub(crate) ruleset: &'a landlock::Built,
}

/// The tracee, on its own stack. Never returns: it becomes the program or
/// exits.
pub(crate) fn tracee(args: &TraceeArgs) -> ! {
    match tracee_setup(args.plan, args.arena, args.proc, args.ruleset) {
        Ok(never) => match never {},
        Err(f) => args.arena.fail(f),
    }
    sys::exit(127)
}

/// The tracee's set-up, step by step.
pub(crate) fn tracee_setup(
    plan: &Plan,
    arena: &Arena<Shared>,
    proc: RawFd,
    ruleset: &landlock::Built,
) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // 1. Named until execve names it after the program (ps, profiles).
    sys::set_comm(c"capsule-tracee");
    // 2. The program's user. With RLIMIT_NPROC: a user namespace of its own (the clone made it), its ids onto themselves, where the
    //    kernel counts the program's processes without PID 1's (each map one line of its own effective id).
    //    With subordinate ids instead: the box's uid and gid, no supplementary group, while the capabilities last
    //    (neither id is 0: none is lost yet); the kernel then treats the caller's files as another user's.
    if let Some([uid_map, gid_map]) = &plan.tracee_maps {
        write_id_maps(proc, uid_map, gid_map).map_err(|e| Fail::new(Step::TraceeIdMap, e))?;
    }
    if let Some((uid, gid)) = plan.box_ids {
        sys::setgroups_empty().map_err(|e| Fail::new(Step::BoxIds, e))?;
        sys::setresgid_all(gid).map_err(|e| Fail::new(Step::BoxIds, e))?;
        sys::setresuid_all(uid).map_err(|e| Fail::new(Step::BoxIds, e))?;
    }
    // 3. A cgroup namespace rooted at the run's cgroup: the program sees none of the cgroups above, its limits.
    sys::unshare(libc::CLONE_NEWCGROUP).map_err(|e| Fail::new(Step::CgroupNamespace, e))?;
    // 4. Default signals: the mask and ignored signals survive execve.
    sys::reset_signals();
    // 5. A new session: no controlling terminal to push input into (CVE-2017-5226), process groups stay inside.
    sys::setsid().map_err(|e| Fail::new(Step::Setsid, e))?;
    // 6. no_new_privs: setuid binaries and file capabilities grant nothing; an unprivileged filter needs it.
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| Fail::new(Step::NoNewPrivs, e))?;
    // 7. Drop every capability, PID 1's in the run's user namespace or its own's (securebits first: uid 0 gets none).
    caps::drop_all(plan.last_cap).map_err(|e| Fail::new(Step::DropCaps, e))?;
    // 8. A filter that allows every call below is installed now: the costliest step left, off the request's path;
    //    one inherited from PID 1's creator is checked to be there (never a program without its filter).
    let filter_inherited = plan.filter_inherited;
    if filter_inherited && crate::sys::seccomp::seccomp_mode() != Ok(libc::SECCOMP_MODE_FILTER as i32) {
        return Err(Fail::new(Step::Seccomp, libc::ENOSYS));
    }
    let early = !filter_inherited && plan.filter.as_ref().is_some_and(|f| f.early);
    if early {
        let f = plan.filter.as_ref().expect("early implies a filter");
        let listener =
            crate::sys::seccomp::install(f.map.as_slice(), f.notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }

    // 9. Wait for the run (a PID 1 prepared ahead idles here): the go message brings its stdio, the arena the
    //    rest; end of stream: the supervisor dropped this prepared run.
    let mut received = [-1; 3 + MAX_INHERIT_FDS];
    let (n, nfds) = sys::recv_fds_into(plan.go_sock, &mut received).map_err(|e| Fail::new(Step::Go, e))?;
    if n == 0 {
        sys::exit(0);
    }
    std::sync::atomic::fence(SeqCst);
    shared.flags.fetch_or(FLAG_GO, SeqCst);
    let targets = inherit_targets(arena).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    if nfds != 3 + targets.len() {
        return Err(Fail::new(Step::Go, libc::EBADMSG));
    }
    let (stdio, inherited) = received[..nfds].split_at_mut(3);
    // 10. The run's stdio onto 0-2, the received copies closed: PID 1 shares the table and must not keep them.
    for (i, fd) in stdio.iter().enumerate() {
        sys::dup2(*fd, i as RawFd).map_err(|e| Fail::new(Step::Stdio, e))?;
    }
    for fd in stdio.iter() {
        if *fd > 2 {
            sys::close(*fd);
        }
    }
    //     The inherited ones onto their numbers; what of PID 1's or ours was there moves above them all.
    inherit_fds(shared, targets, inherited).map_err(|e| Fail::new(Step::InheritFds, e))?;
    // 11. controlling_tty: needs the session (5) and fd 0 in place; seccomp still bars TIOCSTI.
    if shared.go_controlling_tty.load(SeqCst) != 0 {
        sys::tty::set_controlling_tty(0).map_err(|e| Fail::new(Step::ControllingTty, e))?;
    }
    // 12. Landlock rules for the stdio that are files or terminals open for writing, so reopening them works.
    let ruleset_fd = moved_fd(arena, ruleset.raw_fd());
    landlock::add_stdio_rules(ruleset_fd, ruleset.handled.fs);
    // 13. chdir after dropping capabilities: the program's own permissions decide.
    let cwd = arena.cstr(shared.go_cwd.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    if let Err(e) = sys::chdir(cwd) {
        if shared.go_cwd_fallback.load(SeqCst) == 0 {
            return Err(Fail::at(Step::Chdir, e, CWD_NAME));
        }
        sys::chdir(c"/").map_err(|e| Fail::new(Step::Chdir, e))?;
    }
    // 14. Resource limits last before exec, so that capsule's own set-up is not limited by them.
    let limits = arena
        .slice::<RawRlimit>(shared.go_rlimits.load(SeqCst), shared.go_rlimits_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    rlimits::apply(limits).map_err(|(i, e)| Fail { step: Step::Rlimit, errno: e, path: i as u32 })?;
    // 15. Only 0, 1, 2 and the inherited descriptors reach the program.
    sys::cloexec_from(3).map_err(|e| Fail::new(Step::CloseFds, e))?;
    for &fd in targets {
        sys::set_cloexec(fd, false).map_err(|e| Fail::new(Step::CloseFds, e))?;
    }
    // 16. What execve needs and the run's filter, from the arena.
    let argv = arena.ptr_array(shared.go_argv.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let envp = arena.ptr_array(shared.go_envp.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let paths = arena
        .slice::<u64>(shared.go_exec_paths.load(SeqCst), shared.go_exec_paths_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let (filter, notify, _) = run_filter(plan, arena).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    // 17. Landlock (it needs no_new_privs, step 6): from here on writes only where the rules allow.
    let enforced = landlock::restrict(ruleset_fd, plan.landlock.requested, ruleset.handled)?;
    shared.landlock.store(enforced.to_u32(), SeqCst);
    // 18. The CPU time used so far is the set-up's, not the program's: take the baselines (sched_yield first, so
    //     that cpu.stat is up to date).
    if let Some(cg) = &plan.cgroup {
        sys::sched_yield();
        let (user, system) = read_cpu_stat(moved_fd(arena, cg.cpu_stat)).unwrap_or((0, 0));
        shared.cgroup_cpu_us_at_exec.store(user + system, SeqCst);
    }
    let (user, system, _) = sys::rusage_self();
    shared.setup_user_us.store(user, SeqCst);
    shared.setup_system_us.store(system, SeqCst);
    shared.exec_ns.store(sys::clock_monotonic_ns(), SeqCst);
    // 19. Seccomp last (unless installed at step 8 or inherited): from here on only the program's own calls run.
    if !early && !filter_inherited {
        let listener = crate::sys::seccomp::install(filter, notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }
    // 20. execve each candidate path in turn; EACCES, if one gave it, over a later "not found".
    let mut err = libc::ENOENT;
    let mut eacces = false;
    for &path in paths {
        let Some(path) = arena.cstr(path) else { continue };
        // SAFETY: argv and envp end with null (`ptr_array`); the supervisor stored their strings in this arena.
        err = unsafe { sys::execve(path, argv, envp) };
        match err {
            libc::EACCES => eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => break,
        }
    }
    if eacces && err != libc::EACCES && matches!(err, libc::ENOENT | libc::ENOTDIR) {
        err = libc::EACCES;
    }
    Err(Fail::at(Step::Exec, err, EXEC_NAME))
}

/// Puts each received descriptor of `inherited` at its number in `targets`
/// (step 10). The table is PID 1's too: a number in use (PID 1's, the
/// ruleset, the early listener) is first moved above every target, and
/// recorded in `inherit_moved` for PID 1 to put back; the received copies
/// go, so that only the program holds them.
fn inherit_fds(shared: &Shared, targets: &[i32], inherited: &mut [RawFd]) -> Result<(), sys::Errno> {
    let above = targets.iter().max().map_or(3, |m| m + 1);
    // Out of the way first: a received copy may sit at another's number.
    for fd in inherited.iter_mut() {
        let high = sys::dup_at_least(*fd, above)?;
        sys::close(*fd);
        *fd = high;
    }
    for (i, (&target, &fd)) in targets.iter().zip(inherited.iter()).enumerate() {
        let mark = if sys::is_open(target) { sys::dup_at_least(target, above)? + 2 } else { 1 };
        shared.inherit_moved[i].store(mark, SeqCst);
        sys::dup2(fd, target)?;
    }
    for &fd in inherited.iter() {
        sys::close(fd);
    }
    Ok(())
}
