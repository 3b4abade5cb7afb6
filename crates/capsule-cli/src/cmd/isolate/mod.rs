//! `capsule isolate`: isolate's command line and meta file (isolate(1),
//! version 2) on capsule's one run spec, so that judges written for
//! isolate (CMS's `IsolateSandbox`, Judge0's `isolate_job.rb`) run
//! unprivileged. A binary named `isolate` (a link to `capsule` or
//! `capsule-cli`) behaves as `capsule isolate`. docs/isolate.md has every
//! option and what capsule does with it.

mod boxes;
mod meta;
mod opts;
mod perms;
mod rules;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use capsule::spec::{RunSpec, DEFAULT_HOSTNAME};
use clap::{Arg, ArgAction, Command};

use meta::Report;
use opts::{Mode, Opts, Usage};

/// The version isolate's `--version` names: the interface emulated.
const ISOLATE_VERSION: &str = "2.6";

/// The name a binary answers to as isolate.
pub const NAME: &str = "isolate";

/// The parser for `capsule isolate --help`, the man page and completions;
/// the command line itself is parsed as isolate's getopt does (opts.rs).
pub fn command() -> Command {
    let o = |long: &'static str, short: Option<char>, value: Option<&'static str>, help: &'static str| {
        let a = Arg::new(long).long(long).help(help);
        let a = match short {
            Some(c) => a.short(c),
            None => a,
        };
        match value {
            Some(v) => a.value_name(v).action(ArgAction::Append),
            None => a.action(ArgAction::SetTrue),
        }
    };
    Command::new("isolate")
        .about("isolate's command line and meta file: a box per --box-id, runs in capsule's sandbox (docs/isolate.md)")
        .after_help(
            "Commands: --init prints the box directory and creates box/ in it; --run -- PROGRAM ARGS runs in it; \
             --cleanup removes it. Boxes live in $CAPSULE_ISOLATE_ROOT, else capsule-isolate in $XDG_RUNTIME_DIR \
             (or /run/user/UID), else /tmp/capsule-isolate-UID. A binary named `isolate` linked to capsule behaves as `capsule isolate`.\n\n\
             Where you have subordinate ids (/etc/subuid, /etc/subgid, newuidmap: package uidmap), box N's \
             program runs as the uid and gid FIRST+N of your ranges, and box/ (with the tmp rules' directories) is \
             handed to them for the run and back after, as isolate does: the kernel enforces the permission bits \
             (meta capsule-box-mode:subordinate-ids). Else it runs as you: box/ is its own, and in the other \
             read-write rules it may do what the permission bits for others allow (mounts say so; \
             capsule-box-mode:permission-bits). CAPSULE_ISOLATE_BOX_MODE=permission-bits or subordinate-ids \
             chooses; capsule check says which mode runs.\n\n\
             Exit status: 0 the program finished correctly; 1 it did not (meta status RE, SG, TO); 2 an error of \
             the sandbox or the command line (status XX).",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(o("init", None, None, "Initialize the box: print its directory, create box/ in it"))
        .arg(o("run", None, None, "Run the program (after --) in the box"))
        .arg(o("cleanup", None, None, "Remove the box"))
        .arg(o("version", None, None, "Print the version"))
        .arg(o("check-config", None, None, "Check that the box root is usable"))
        .arg(o("print-cg-root", None, None, "Print the cgroup v2 directory runs' cgroups are made under"))
        .arg(o("help", None, None, "Print this help"))
        .arg(o("box-id", Some('b'), Some("ID"), "Box number (default 0)"))
        .arg(o("meta", Some('M'), Some("FILE"), "Write the meta file (key:value lines; - for stdout)"))
        .arg(o("time", Some('t'), Some("SECS"), "CPU time limit"))
        .arg(o("wall-time", Some('w'), Some("SECS"), "Wall-clock time limit"))
        .arg(o("extra-time", Some('x'), Some("SECS"), "Kill at this much CPU time when over --time, to report the real time"))
        .arg(o("mem", Some('m'), Some("KB"), "Address space limit (RLIMIT_AS)"))
        .arg(o("stack", Some('k'), Some("KB"), "Stack limit (default: unlimited where the caller's hard limit is)"))
        .arg(o("fsize", Some('f'), Some("KB"), "Largest file the program may write"))
        .arg(o("open-files", Some('n'), Some("N"), "Most open files (default 1024, 0: no limit)"))
        .arg(
            Arg::new("processes")
                .short('p')
                .long("processes")
                .value_name("N")
                .num_args(0..=1)
                .require_equals(true)
                .help("Most processes and threads (default 1; without N: no limit)"),
        )
        .arg(o("quota", Some('q'), Some("BLOCKS,INODES"), "Disk quota: approximated by a per-file size limit of BLOCKS KB"))
        .arg(o("cg", None, None, "Use cgroups (needed for --cg-mem; the whole group's CPU time)"))
        .arg(o("cg-mem", None, Some("KB"), "Memory limit of all the run's processes (memory.max)"))
        .arg(o("cg-timing", None, None, "isolate 1.x: CPU time of the whole cgroup (always so with --cg)"))
        .arg(o("core", None, Some("KB"), "Core file size: only 0 (core dumps are always off)"))
        .arg(o("dir", Some('d'), Some("IN=OUT:OPTS"), "Directory rule; options rw dev noexec maybe fs tmp norec; IN= removes one"))
        .arg(o("no-default-dirs", Some('D'), None, "No default directory rules"))
        .arg(o("env", Some('E'), Some("VAR[=VAL]"), "Inherit VAR, set it, or (VAR=) remove it"))
        .arg(o("full-env", Some('e'), None, "Inherit the whole environment"))
        .arg(o("chdir", Some('c'), Some("DIR"), "Working directory inside (default /box)"))
        .arg(o("stdin", Some('i'), Some("FILE"), "Standard input from FILE as the sandbox sees it"))
        .arg(o("stdout", Some('o'), Some("FILE"), "Standard output to FILE as the sandbox sees it"))
        .arg(o("stderr", Some('r'), Some("FILE"), "Standard error to FILE as the sandbox sees it"))
        .arg(o("stderr-to-stdout", None, None, "Standard error to standard output"))
        .arg(o("share-net", None, None, "The host's network"))
        .arg(o("inherit-fds", None, None, "Pass the caller's open descriptors above 2 to the program at the same numbers"))
        .arg(o("special-files", None, None, "Keep the links, FIFOs and sockets the program leaves in box/"))
        .arg(o("syscalls", None, Some("FLAGS"), "0: no seccomp filter; other values: capsule's default filter"))
        .arg(o("wait", None, None, "Wait for a busy box instead of failing"))
        .arg(o("silent", Some('s'), None, "No status line"))
        .arg(o("verbose", Some('v'), None, "Say what is done (twice: more)"))
        .arg(Arg::new("argv").value_name("PROGRAM").num_args(1..).trailing_var_arg(true).help("With --run"))
}

/// The whole command: `args` are the arguments after `isolate` (or
/// `capsule isolate`).
pub fn main(args: &[String]) -> ExitCode {
    let o = match opts::parse(args) {
        Ok(o) => o,
        Err(Usage(m)) => return usage(&m),
    };
    let Some(mode) = o.mode else { return usage("Please specify an isolate command (e.g. --init, --run).") };
    match mode {
        Mode::Help => {
            print!("{}", command().bin_name(NAME).render_help());
            return ExitCode::SUCCESS;
        }
        Mode::Version => {
            println!("The process isolator {ISOLATE_VERSION}, as capsule isolate (capsule {})", crate::VERSION);
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    if (o.cg_mem.is_some() || o.cg_timing) && !o.cg {
        return usage("Options related to control groups require --cg to be set.");
    }
    match mode {
        Mode::Init | Mode::Cleanup if !o.args.is_empty() => {
            return usage(&format!(
                "--{} mode takes no parameters",
                if mode == Mode::Init { "init" } else { "cleanup" }
            ))
        }
        Mode::Run if o.args.is_empty() => return usage("--run mode requires a command to run"),
        _ => {}
    }
    if mode == Mode::Run && o.cg {
        if let Err(e) = restart_in_scope(args) {
            return finish(None, &o, meta::internal(&e));
        }
    }
    // The caller's descriptors, before capsule opens any of its own (the meta file's).
    let inherited = if mode == Mode::Run && o.inherit_fds { caller_fds() } else { Ok(Vec::new()) };
    // isolate opens the meta file first of all.
    let mut meta_out = match open_meta(o.meta.as_deref()) {
        Ok(m) => m,
        Err(e) => return finish(None, &o, meta::internal(&e)),
    };
    let report = match inherited.and_then(|fds| command_of(mode, &o, fds)) {
        Ok(r) => r,
        Err(e) => meta::internal(&e),
    };
    finish(meta_out.as_mut(), &o, report)
}

/// A usage error: isolate's message and exit status 2.
fn usage(m: &str) -> ExitCode {
    let getopt = ["option ", "unrecognized option", "invalid option"].iter().any(|p| m.starts_with(p));
    eprintln!("{}{m}", if getopt { "isolate: " } else { "" });
    eprintln!("Try 'isolate --help' for more information.");
    ExitCode::from(2)
}

/// Writes the meta file and the status line; the exit status.
fn finish(meta: Option<&mut Box<dyn Write>>, o: &Opts, r: Report) -> ExitCode {
    if let Some(m) = meta {
        let _ = m.write_all(r.meta.as_bytes()).and_then(|_| m.flush());
    }
    if !r.line.is_empty() && (r.code == 2 || !o.silent) {
        eprintln!("{}", r.line);
    }
    ExitCode::from(r.code)
}

/// The meta file, opened as isolate does before anything else: `-` is
/// stdout; a link at its place is not followed (the program may have made
/// it when the file is in its box).
fn open_meta(path: Option<&str>) -> Result<Option<Box<dyn Write>>, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    match path {
        None => Ok(None),
        Some("-") => Ok(Some(Box::new(std::io::stdout()))),
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(p)
                .map_err(|e| format!("Failed to open metafile '{p}': {}", capsule::error::io_strerror(&e)))?;
            // A device is written as isolate's fopen would (`-M /dev/null`); a FIFO or socket could block.
            if !f.metadata().is_ok_and(|m| m.is_file() || m.file_type().is_char_device()) {
                return Err(format!("Failed to open metafile '{p}': not a regular file or a character device"));
            }
            Ok(Some(Box::new(f)))
        }
    }
}

/// Where verbose lines go: isolate's `msg()`.
fn say(o: &Opts, level: u32, line: &str) {
    if o.verbose >= level {
        eprintln!("{line}");
    }
}

/// The caller's open descriptors above 2 (`--inherit-fds`).
fn caller_fds() -> Result<Vec<i32>, String> {
    let dir = std::fs::read_dir("/proc/self/fd").map_err(|e| format!("Cannot list /proc/self/fd: {e}"))?;
    let listed: Vec<i32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    // The listing's own descriptor is closed by now.
    Ok(listed.into_iter().filter(|&fd| fd > 2 && capsule::sys::is_open(fd)).collect())
}

fn command_of(mode: Mode, o: &Opts, inherited: Vec<i32>) -> Result<Report, String> {
    if capsule::host::identity::is_real_root() {
        return Err(capsule::host::identity::root_refusal().to_string());
    }
    match mode {
        Mode::CheckConfig => {
            let root = boxes::root()?;
            say(o, 1, &format!("Box root: {}", root.display()));
            Ok(quiet())
        }
        Mode::PrintCgRoot => {
            let d = capsule::host::cgroups::discover(&Default::default());
            match d.base {
                Some(b) => {
                    println!("{}", b.display());
                    Ok(quiet())
                }
                None => Err(format!("No control group root: {}", d.detail)),
            }
        }
        Mode::Init => init(o),
        Mode::Cleanup => {
            let root = boxes::root()?;
            match boxes::lock(&root, o.box_id, false, true, o.cg, o.wait)? {
                None => say(o, 1, "Nothing to do -- box did not exist"),
                Some(b) => {
                    say(o, 1, "Deleting sandbox");
                    b.cleanup()?;
                }
            }
            Ok(quiet())
        }
        Mode::Run => run(o, inherited),
        Mode::Version | Mode::Help => unreachable!("answered before"),
    }
}

/// A command that succeeded and says nothing.
fn quiet() -> Report {
    Report { meta: String::new(), line: String::new(), code: 0 }
}

/// What `--cg` needs, in one line, where no cgroups are found.
const ISOLATE_CG_HINT: &str = "for --cg, run it in a systemd user session (it then gets a delegated scope by \
itself; `loginctl enable-linger USER` gives a service account one), under `systemd-run --user --scope -p \
Delegate=yes`, or in a container with its own cgroup namespace, on a kernel with the unified hierarchy \
(`capsule check` says what is missing here)";

fn init(o: &Opts) -> Result<Report, String> {
    if o.cg {
        // isolate --cg --init fails where there are no control groups.
        let d = capsule::host::cgroups::discover(&Default::default());
        if d.source == capsule::host::cgroups::Source::None {
            return Err(format!("Control groups are not available: {}; {ISOLATE_CG_HINT}", d.detail));
        }
    }
    let root = boxes::root()?;
    let mut b = boxes::lock(&root, o.box_id, true, false, o.cg, o.wait)?.expect("created with --init");
    say(o, 1, "Preparing sandbox");
    b.init(o.quota)?;
    if let (Some((blocks, _)), false) = (o.quota, o.silent) {
        eprintln!(
            "Disk quota: capsule cannot set quotas (they need root): each file a run writes is limited to {blocks} KB \
             instead (as with -f, unless -f is given), and the number of inodes is not limited"
        );
    }
    println!("{}", b.dir.display());
    Ok(quiet())
}

/// isolate's `--cg` needs cgroups: where they come from a systemd user
/// manager, the command starts again inside a delegated scope, as `capsule
/// run` does (`crate::cmd::scope`: a manager that does not answer or
/// refuses the scope is named, with its fix, and the command goes on
/// without it).
fn restart_in_scope(args: &[String]) -> Result<(), String> {
    let cfg = capsule::spec::RunSpec::default().cgroup;
    let exe = std::env::current_exe().map_err(|e| format!("Cannot find the capsule binary: {e}"))?;
    let mut full = vec![exe.display().to_string(), "isolate".to_string()];
    full.extend(args.iter().cloned());
    crate::cmd::scope::restart_argv_in_scope(&cfg, full)
        .map_err(|e| format!("Cannot re-start in a systemd scope: {e:#}"))
}

fn run(o: &Opts, inherited: Vec<i32>) -> Result<Report, String> {
    let root = boxes::root()?;
    let name = if o.cg { "isolate --cg" } else { "isolate" };
    let Some(b) = boxes::lock(&root, o.box_id, false, false, o.cg, o.wait)? else {
        return Err(format!("Box not found, did you run `{name} --init'?"));
    };
    let mode = box_mode(o.box_id)?;
    if let (Some(_), capsule::host::subids::BoxMode::PermissionBits(_)) = (b.state.boxed, &mode) {
        // An earlier run in subordinate-id mode did not hand the files back (it was killed): now.
        b.remove_special()?;
        say(o, 1, "Handing the box's files back from an unfinished run");
        take_back(&b)?;
    }
    let rules = rules::effective(&o.dirs, !o.no_default_dirs);
    let sub = match &mode {
        capsule::host::subids::BoxMode::Subordinate(ids) => Some(*ids),
        capsule::host::subids::BoxMode::PermissionBits(why) => {
            say(o, 1, &format!("Box mode: permission bits ({why})"));
            None
        }
    };
    let (mut spec, guard) = spec_of(o, &rules, &b.dir, b.state.quota, sub.is_some())?;
    spec.inherit_fds = inherited;
    spec.subordinate = sub;
    spec.validate().map_err(|e| e.to_string())?;
    say(o, 2, &format!("Run spec: {}", serde_json::to_string(&spec).unwrap_or_default()));
    // Opened as the caller, before box/ is the box uid's (isolate opens them as the box uid: `check_stdio`).
    let (fds, _keep) = stdio(o, &rules, &b.dir, &guard)?;
    spec.cgroup.require = o.cg;
    spec.cgroup.disable = !o.cg;
    let ns = match sub {
        None => None,
        Some(ids) => {
            say(o, 1, &format!("Box mode: subordinate ids, uid {} and gid {}", ids.uid, ids.gid));
            let ns = capsule::host::subids::Namespace::create(ids)
                .map_err(|e| format!("Cannot make the box's user namespace: {e}"))?;
            b.chown_tree(&ns, true)?;
            Some(ns)
        }
    };
    let (result, interrupt) = run_interruptible(&spec, fds, ns.as_ref().map(|n| n.fd()));
    if let Some(ns) = &ns {
        b.chown_tree(ns, false)?;
    }
    if !o.special_files {
        let n = b.remove_special()?;
        if n > 0 {
            say(o, 1, &format!("Removed {n} special files from the box"));
        }
    }
    let mut r = result.map_err(|e| e.to_string())?;
    let checked = meta::Checked { time_ms: o.time_ms, wall_ms: o.wall_ms, cg: o.cg };
    let with_mode = |r| with_mode(r, sub.is_some());
    if let Some(sig) = interrupt {
        return Ok(with_mode(meta::interrupted(&r, sig, checked)));
    }
    if r.status == capsule::Status::Error {
        let e = r.error.clone().unwrap_or_default();
        if !e.starts_with("executing the program") {
            return Err(e);
        }
        // isolate's execve failure: its message on the program's stderr, exit status 127.
        let why = e.split("`: ").nth(1).and_then(|w| w.split(" (E").next()).unwrap_or(&e);
        let line = format!("execve(\"{}\"): {why}\n", spec.argv[0]);
        write_fd(fds[2].unwrap_or(2), line.as_bytes());
        r.status = capsule::Status::Exited;
        r.exit_code = Some(127);
    }
    Ok(with_mode(meta::report(&r, checked)))
}

/// A run's report with capsule's own meta field saying how the box's files
/// were kept from the program (docs/isolate.md).
fn with_mode(mut r: Report, subordinate: bool) -> Report {
    let mode = if subordinate { perms::SUBORDINATE_MODE } else { perms::MODE };
    r.meta.push_str(&format!("{}:{mode}\n", perms::META_KEY));
    r
}

/// The box mode of `--run` for box `id` (`capsule check`'s
/// `isolate-box-user` says which): subordinate ids where the caller has
/// them, unless `CAPSULE_ISOLATE_BOX_MODE` says otherwise.
fn box_mode(id: u32) -> Result<capsule::host::subids::BoxMode, String> {
    use capsule::host::subids::{box_mode, SubIds, MODE_ENV};
    let uid = capsule::sys::getuid();
    let user = capsule::host::identity::user_name(uid);
    let setting = std::env::var(MODE_ENV).ok();
    box_mode(setting.as_deref(), &SubIds::read(&user, uid), &user, Some(id)).map_err(|e| e.to_string())
}

/// The box's files handed back to the caller after a subordinate-id run
/// that did not (from the recorded ids).
fn take_back(b: &boxes::BoxDir) -> Result<(), String> {
    let Some((uid, gid)) = b.state.boxed else { return Ok(()) };
    let ns = capsule::host::subids::Namespace::create(capsule::spec::SubordinateIds { uid, gid })
        .map_err(|e| format!("Cannot make the box's user namespace: {e}"))?;
    b.chown_tree(&ns, false)
}

/// The signals that interrupt isolate (its `SIGNAL_INTERRUPT` rules).
const INTERRUPTS: [i32; 4] = [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM];

/// One run; one of [`INTERRUPTS`] meanwhile has it killed, and is returned
/// with its result (statistics included), as isolate reports it.
fn run_interruptible(
    spec: &RunSpec,
    fds: [Option<RawFd>; 3],
    user_ns: Option<RawFd>,
) -> (Result<capsule::RunResult, capsule::error::Error>, Option<i32>) {
    use capsule::sys;
    // Blocked before the supervisor is forked, which inherits the mask: a terminal's ^C reaches the whole
    // process group, and must not end the supervisor before it reports the killed run. (The program gets
    // the default mask from the tracee.)
    let sig = sys::signalfd_for(&INTERRUPTS);
    let started = match user_ns {
        Some(ns) => capsule::endpoints::once::start_once_in(spec, fds, ns),
        None => capsule::endpoints::once::start_once(spec, fds, false),
    };
    let once = match started {
        Ok(once) => once,
        Err(e) => return (Err(e), None),
    };
    let Ok(sig) = sig else { return (once.wait(), None) };
    let mut interrupt = None;
    loop {
        let mut p = [
            libc::pollfd { fd: sig.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: once.fd(), events: libc::POLLIN, revents: 0 },
        ];
        if sys::poll(&mut p, -1).is_err() || p[1].revents != 0 {
            break;
        }
        while let Some(s) = sys::tty::next_signal(sig.as_raw_fd()) {
            // The first one counts; the run's result still comes, status killed.
            if interrupt.is_none() {
                interrupt = Some(s);
                let _ = once.kill();
            }
        }
    }
    (once.wait(), interrupt)
}

fn write_fd(fd: RawFd, bytes: &[u8]) {
    let _ = capsule::sys::write_all(fd, bytes);
}

/// The run spec of `--run`: an empty root with the directory rules (the
/// read-write ones outside the box as others' permission bits allow:
/// perms.rs), the environment rules, the limits; the program in /box (or
/// `-c`).
fn spec_of(
    o: &Opts,
    rules: &[rules::DirRule],
    box_dir: &Path,
    quota: Option<(u64, u64)>,
    subordinate: bool,
) -> Result<(RunSpec, perms::Guard), String> {
    let mut spec = RunSpec::new(o.args.iter().cloned());
    spec.empty_root = true;
    let ops = rules::mounts(rules, box_dir, &mut |l| say(o, 1, &l))?;
    // Subordinate ids: the kernel enforces the bits; else mounts say what they say.
    let (ops, guard) = match subordinate {
        true => {
            let guard = perms::guard(&ops, box_dir);
            (ops, guard)
        }
        false => perms::refine(ops, box_dir, &mut |l| say(o, 1, &l))?,
    };
    spec.mounts = ops;
    let caller: BTreeMap<String, String> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    spec.env = rules::environment(o.full_env, &o.env, &caller);
    spec.cwd = Some(match &o.chdir {
        Some(d) if d.starts_with('/') => PathBuf::from(d),
        Some(d) => Path::new("/box").join(d),
        None => PathBuf::from("/box"),
    });
    // isolate keeps the host's UTS namespace.
    spec.hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| Some(DEFAULT_HOSTNAME.into()));
    spec.share_net = o.share_net;
    if o.syscalls == Some(0) {
        spec.seccomp = "none".parse().map_err(|e| format!("--syscalls: {e}"))?;
    }
    let l = &mut spec.limits;
    let kb = |v: u64| v.saturating_mul(1024);
    if o.time_ms > 0 {
        l.cpu_time = Some(Duration::from_millis(o.time_ms.max(o.extra_ms)));
    }
    if o.wall_ms > 0 {
        l.wall_time = Some(Duration::from_millis(o.wall_ms));
    }
    l.address_space = (o.mem > 0).then(|| kb(o.mem));
    l.output_limit = match (o.fsize, quota) {
        (0, Some((blocks, _))) if blocks > 0 => Some(kb(blocks)),
        (0, _) => None,
        (f, _) => Some(kb(f)),
    };
    l.stack = if o.stack > 0 { Some(kb(o.stack)) } else { unlimited_stack() };
    l.open_files = (o.open_files > 0).then_some(o.open_files);
    l.pids = match o.processes {
        None => Some(1),
        Some(0) => None,
        Some(n) => Some(n),
    };
    l.memory = o.cg_mem.map(kb);
    // isolate's setup_rlimits.
    l.locked_memory = Some(0);
    spec.validate().map_err(|e| e.to_string())?;
    Ok((spec, guard))
}

/// isolate's default stack limit is "unlimited"; capsule can give it where
/// the caller's hard limit is unlimited (else the caller's limit stays).
fn unlimited_stack() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max stack size"))?;
    let hard = line["Max stack size".len()..].split_whitespace().nth(1)?;
    (hard == "unlimited").then_some(u64::MAX)
}

/// The program's stdin, stdout and stderr: the caller's, or the files the
/// options name, opened as the sandbox would see them (where others'
/// permission bits are enforced, only if they allow it: isolate opens them
/// as the box's uid).
fn stdio(
    o: &Opts,
    rules: &[rules::DirRule],
    box_dir: &Path,
    guard: &perms::Guard,
) -> Result<([Option<RawFd>; 3], Vec<OwnedFd>), String> {
    let mut fds = [Some(0), Some(1), Some(2)];
    let mut keep = Vec::new();
    for (i, path, write) in [(0, &o.stdin, false), (1, &o.stdout, true), (2, &o.stderr, true)] {
        if let Some(p) = path {
            perms::check_stdio(guard, p, write)?;
            let fd = rules::open_stdio(rules, box_dir, p, write)?;
            fds[i] = Some(fd.as_raw_fd());
            keep.push(fd);
        }
    }
    if o.stderr_to_stdout {
        fds[2] = fds[1];
    }
    Ok((fds, keep))
}
