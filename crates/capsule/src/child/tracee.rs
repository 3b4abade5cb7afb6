//! The tracee: joins the run's cgroup and user namespace, drops everything, execs the program.

use super::*;
use crate::plan::rlimits::RawRlimit;
use crate::sys::{self, Arena};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering::SeqCst;

/// What PID 1 hands to the tracee (on PID 1's stack, which stays intact:
/// PID 1 is suspended until the tracee execs or exits).
pub(crate) struct TraceeArgs<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) arena: &'a Arena<Shared>,
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

pub(crate) fn tracee_setup(
    plan: &Plan,
    arena: &Arena<Shared>,
    proc: RawFd,
    ruleset: &landlock::Built,
) -> Result<Never, Fail> {
    let shared: &Shared = arena;
    // Named until execve names it after the program (ps, profiles).
    sys::set_comm(c"capsule-tracee");
    // Our ids: the uid/gid the run asked for, mapped onto PID 1's root (the
    // caller). A process may write its own maps when each is one line
    // mapping its own effective id. The memory it shares is non-dumpable
    // and stays so (it is the supervisor's, see `Supervisor::start`): its
    // /proc files belong to root of the supervisor's user namespace, the
    // caller, so the tracee may open them.
    write_proc(proc, b"setgroups", b"deny")
        .and_then(|_| write_proc(proc, b"gid_map", plan.tracee_gid_map.to_bytes()))
        .and_then(|_| write_proc(proc, b"uid_map", plan.tracee_uid_map.to_bytes()))
        .map_err(|e| Fail::new(Step::TraceeIdMap, e))?;
    // Born in the run's cgroup (CLONE_INTO_CGROUP); a cgroup namespace
    // rooted there: the program sees itself at `/` and nothing of the
    // cgroups above, where its limits are.
    sys::unshare(libc::CLONE_NEWCGROUP).map_err(|e| Fail::new(Step::CgroupNamespace, e))?;
    // Signal mask and ignored signals survive execve: give the program
    // defaults (PID 1 blocked SIGCHLD, Rust ignores SIGPIPE).
    sys::reset_signals();
    // A new session: no controlling terminal, so TIOCSTI/TIOCLINUX on an
    // inherited tty cannot push input to the caller (CVE-2017-5226), and
    // process-group signals stay inside.
    sys::setsid().map_err(|e| Fail::new(Step::Setsid, e))?;
    // no_new_privs: setuid binaries and file capabilities grant nothing;
    // also required for an unprivileged seccomp filter.
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| Fail::new(Step::NoNewPrivs, e))?;
    // Drop every capability of U3 (securebits first so uid 0 regains none).
    caps::drop_all(plan.last_cap).map_err(|e| Fail::new(Step::DropCaps, e))?;

    // A filter that allows all the calls made below (the `default`
    // policy's does) is installed now rather than last: installing is the
    // costliest step left (the kernel converts, JITs and caches it), and
    // from here on it would be on the request's path.
    let early = plan.filter.as_ref().is_some_and(|f| f.early);
    if early {
        let f = plan.filter.as_ref().expect("early implies a filter");
        let listener =
            crate::sys::seccomp::install(f.map.as_slice(), f.notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }

    // Everything above is the same for any run of this shape, so a PID 1
    // prepared ahead of time has done it before the request exists. Here
    // the tracee waits for the run: the go message carries its stdin,
    // stdout and stderr, and the supervisor wrote the rest into the arena.
    // End of stream: the supervisor dropped this prepared run.
    let mut stdio = [-1; 3];
    let (n, nfds) = sys::recv_fds_into(plan.go_sock, &mut stdio).map_err(|e| Fail::new(Step::Go, e))?;
    if n == 0 {
        sys::exit(0);
    }
    std::sync::atomic::fence(SeqCst);
    shared.flags.fetch_or(FLAG_GO, SeqCst);
    if nfds != 3 {
        return Err(Fail::new(Step::Go, libc::EBADMSG));
    }
    // The run's stdio onto 0, 1, 2 (received above 2: 0-2 are occupied).
    // The received descriptors go: the table is PID 1's too, which must
    // not keep the program's pipes open.
    for (i, fd) in stdio.iter().enumerate() {
        sys::dup2(*fd, i as RawFd).map_err(|e| Fail::new(Step::Stdio, e))?;
    }
    for fd in stdio {
        if fd > 2 {
            sys::close(fd);
        }
    }
    // controlling_tty: needs the session made above and fd 0 in place; seccomp below still bars TIOCSTI.
    if shared.go_controlling_tty.load(SeqCst) != 0 {
        sys::tty::set_controlling_tty(0).map_err(|e| Fail::new(Step::ControllingTty, e))?;
    }
    // The run's stdio is known only now: Landlock rules for those that are
    // files or terminals open for writing, so that reopening them
    // (`echo x > /dev/stderr`) keeps working.
    landlock::add_stdio_rules(ruleset.raw_fd(), ruleset.handled.fs);
    // chdir after dropping capabilities: the program's own permissions decide.
    let cwd = arena.cstr(shared.go_cwd.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    if let Err(e) = sys::chdir(cwd) {
        if shared.go_cwd_fallback.load(SeqCst) == 0 {
            return Err(Fail::at(Step::Chdir, e, CWD_NAME));
        }
        sys::chdir(c"/").map_err(|e| Fail::new(Step::Chdir, e))?;
    }
    // Resource limits last before exec, so capsule's own setup is not
    // limited by them (e.g. RLIMIT_NOFILE).
    let limits = arena
        .slice::<RawRlimit>(shared.go_rlimits.load(SeqCst), shared.go_rlimits_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    rlimits::apply(limits).map_err(|(i, e)| Fail { step: Step::Rlimit, errno: e, path: i as u32 })?;
    // Only 0, 1, 2 may reach the program.
    sys::cloexec_from(3).map_err(|e| Fail::new(Step::CloseFds, e))?;
    let argv = arena.ptr_array(shared.go_argv.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let envp = arena.ptr_array(shared.go_envp.load(SeqCst)).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let paths = arena
        .slice::<u64>(shared.go_exec_paths.load(SeqCst), shared.go_exec_paths_len.load(SeqCst))
        .ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    let (filter, notify, _) = run_filter(plan, arena).ok_or(Fail::new(Step::Go, libc::EFAULT))?;
    // Landlock last before seccomp (it needs no_new_privs, set above):
    // from here on this process and the program may write only where the
    // rules allow.
    let enforced = landlock::restrict(ruleset.raw_fd(), plan.landlock.requested, ruleset.handled)?;
    shared.landlock.store(enforced.to_u32(), SeqCst);
    // The CPU the program's cgroup used so far (this set-up) is not the
    // program's.
    // sched_yield first: the CPU a running task used since the scheduler
    // last updated its statistics is not in cpu.stat yet, and a stale
    // baseline would be charged to the program (the thesis's trick).
    if let Some(cg) = &plan.cgroup {
        sys::sched_yield();
        let (user, system) = read_cpu_stat(cg.cpu_stat).unwrap_or((0, 0));
        shared.cgroup_cpu_us_at_exec.store(user + system, SeqCst);
    }
    let (user, system, _) = sys::rusage_self();
    shared.setup_user_us.store(user, SeqCst);
    shared.setup_system_us.store(system, SeqCst);
    shared.exec_ns.store(sys::clock_monotonic_ns(), SeqCst);
    // Seccomp last (unless installed early, above): from here on only the
    // program's own syscalls run. Its listener (close-on-exec) stays in the
    // table PID 1 shares.
    if !early {
        let listener = crate::sys::seccomp::install(filter, notify).map_err(|e| Fail::new(Step::Seccomp, e))?;
        shared.notify_fd.store(listener + 1, SeqCst);
    }
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
