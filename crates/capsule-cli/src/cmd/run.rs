//! `capsule run`: a program in a fresh sandbox, its spec from a profile
//! and the flags; also how an agent plans a front end's `run` command
//! line (`plan`).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use capsule::spec::{self, MountOp, RunSpec, Stdio};
use capsule::units::{parse_duration, parse_size};
use capsule::RunResult;
use clap::{Arg, ArgAction, ArgMatches, Command};

use super::{absolute, cgroup_args, flag, last, num, one, pair, restart_in_scope, set};
use crate::pty;

const RUN_ABOUT: &str = "Run PROGRAM in a fresh sandbox as the calling unprivileged user";
const RUN_AFTER: &str = "\
Mount operations (--bind ... --noexec) apply in the order given, after the base view
(host view: host root read-only, fresh /proc, minimal /dev, private /tmp; or --empty-root).
--size and --noexec modify the mount operation just before them.
A bind or --file SRC never follows a symbolic link you own (a sandboxed run could have
made it): name the link's target, or recreate the link inside with --symlink.

Filesystem rules (--allow --read-only --writable --hide; profile: [filesystem]) act on
host paths after the mount operations; the most specific path wins. PATH may start with
~ (your home: $HOME, else your passwd entry's); a relative PATH is taken from the current
directory. Your usual secrets are hidden (under $HOME and your passwd entry's home) unless
allowed (--allow ~/.ssh) or --no-hide-secrets: ~/.ssh ~/.gnupg ~/.aws ~/.kube ~/.netrc
~/.pgpass, cloud, database, registry and git credentials, shell histories, browser
profiles, keyrings (the list: docs/filesystem.md).

Exit status: the program's exit code; 128+N when it died of signal N; 124 when the
wall-time or CPU-time limit killed it; 123 memory limit; 122 output limit; 121 forbidden
system call; 125 when capsule could not run it (the message says which step, path and errno).";

pub fn command() -> Command {
    let fs = "Filesystem";
    let lim = "Limits";
    let id = "Identity and environment";
    let io = "Input, output and results";
    Command::new("run")
        .about(RUN_ABOUT)
        .after_help(RUN_AFTER)
        .arg(Arg::new("profile").long("profile").value_name("FILE").help("Read the run spec from a TOML profile; flags override it"))
        .arg(
            Arg::new("preset")
                .long("preset")
                .value_name("NAME")
                .value_parser(super::preset::NAMES)
                .help("agent: a coding agent's command in this project: the project in a layer (default ~/.local/state/capsule/agent), your home hidden but toolchains and their caches, git hooks and config, .mcp.json, editor and agent settings read-only even before they exist, secrets kept out of the environment, the network to the package indexes and GitHub by name (--allow-host @pypi @npm @crates @go @github; docs/presets.md)"),
        )
        .arg(
            Arg::new("no-layer")
                .long("no-layer")
                .action(ArgAction::SetTrue)
                .requires("preset")
                .conflicts_with("layer")
                .help("With --preset agent: the project writable on the host instead of in a layer (every guarded path must then exist)"),
        )
        .arg(pair("setenv", "KEY", "VALUE", "Set an environment variable (the environment starts empty)").help_heading(id))
        .arg(one("keep-env", "KEY", "Pass the caller's value of KEY through", id))
        .arg(one("chdir", "DIR", "Working directory inside (default: the caller's, if visible, else /)", id))
        .arg(one("hostname", "NAME", "Hostname inside (default: capsule)", id))
        .arg(one("uid", "N", "User id inside (default: the caller's)", id))
        .arg(one("gid", "N", "Group id inside (default: the caller's)", id))
        .arg(flag("root", "Be uid 0 / gid 0 inside (fakeroot; still no capabilities)", id))
        .arg(flag("empty-root", "Start from an empty read-only tmpfs instead of the host view", fs))
        .arg(one("tmp-size", "SIZE", "Size of the host view's private /tmp (default 128M)", fs))
        .arg(flag("no-review", "After a --layer run on a terminal, do not offer the review menu (commit, diff, list, ...)", fs))
        .arg(one("layer", "DIR", "Run over a copy-on-write layer kept in DIR (created if missing): changes land there, the host is untouched; given twice, earlier layers stack read-only below (docs/layers.md)", fs))
        .arg(one("layer-size", "SIZE", "Most the writable --layer may hold (e.g. 2G; default: no limit): the run writes to a tmpfs of what is left (memory charged to the run), folded into the layer when it ends; writes past it fail with ENOSPC", fs))
        .arg(pair("bind", "SRC", "DST", "Bind SRC read-write at DST"))
        .arg(pair("bind-try", "SRC", "DST", "Like --bind; skipped if SRC is missing"))
        .arg(pair("ro-bind", "SRC", "DST", "Bind SRC read-only at DST"))
        .arg(pair("ro-bind-try", "SRC", "DST", "Like --ro-bind; skipped if SRC is missing"))
        .arg(pair("dev-bind", "SRC", "DST", "Bind SRC at DST with device access"))
        .arg(pair("dev-bind-try", "SRC", "DST", "Like --dev-bind; skipped if SRC is missing"))
        .arg(one("tmpfs", "DST", "Mount a fresh tmpfs at DST", fs))
        .arg(one("size", "SIZE", "Size of the --tmpfs just before (default 128M)", fs))
        .arg(one("proc", "DST", "Mount the run's procfs at DST", fs))
        .arg(one("dev", "DST", "Build a minimal /dev at DST", fs))
        .arg(one("dir", "DST", "Create an empty directory at DST", fs))
        .arg(pair("file", "SRC", "DST", "Copy the host file SRC to DST"))
        .arg(pair("file-data", "DST", "CONTENT", "Create DST holding CONTENT"))
        .arg(pair("symlink", "TARGET", "DST", "Create a symlink DST -> TARGET"))
        .arg(one("allow", "PATH", "Show PATH as the host view does, even under a hidden parent or default secret (rule)", fs))
        .arg(one("read-only", "PATH", "Show PATH read-only, even under a writable parent (rule)", fs))
        .arg(one("writable", "PATH", "Bind the host's PATH read-write; it must exist (rule)", fs))
        .arg(one("hide", "PATH", "Cover PATH with an empty read-only directory or file (rule)", fs))
        .arg(flag("no-hide-secrets", "Do not hide the usual secrets of your home (~/.ssh, ~/.gnupg, ... docs/filesystem.md)", fs))
        .arg(Arg::new("noexec").long("noexec").num_args(0).default_missing_value("true").action(ArgAction::Append).help("Make the mount operation just before noexec").help_heading(fs))
        .arg(flag("share-net", "Share the host's network (default: loopback only, no vsock)", "Network"))
        .arg(one("tcp-connect", "PORTS", "Allow TCP connect only to these ports (80,443 or none; Landlock, Linux ≥ 6.7, else the run fails; MPTCP and SMC sockets fail)", "Network"))
        .arg(one("tcp-bind", "PORTS", "Allow TCP bind only on these ports (8080 or none; 0 = any free port; Landlock, Linux ≥ 6.7)", "Network"))
        .arg(flag("net-log", "Record each connect/sendto/sendmsg/sendmmsg destination (seccomp user notification) and print a summary at the end; --json/--meta have it as net_log (docs/network.md)", "Network"))
        .arg(flag("explain", "Report what the run is refused (file writes the view refuses, reads of hidden paths, network destinations it cannot reach, a forbidden call), with the rule and the option that would allow it: a block on stderr after the run, `violations` in --json (docs/explain.md). Slows file-heavy programs: every open is looked at", io))
        .arg(one("allow-host", "PATTERN", "Let the run reach this host by name through capsule's proxy (HTTP and SOCKS5, outside the run's network): example.com, *.example.com (subdomains), *, an address; :PORT optional; @pypi @npm @crates @go @apt @github for groups. The run's network stays loopback-only; HTTP_PROXY etc. are set inside (docs/egress.md)", "Network"))
        .arg(one("deny-host", "PATTERN", "Refuse this host even if --allow-host covers it (deny wins); turns the proxy on", "Network"))
        .arg(flag("allow-local", "Let the proxy connect to loopback, private, link-local and metadata addresses (refused by default whatever the name); turns the proxy on", "Network"))
        .arg(one("resolve-host", "NAME=ADDR[,ADDR]", "The proxy resolves NAME to these addresses instead of asking the host's resolver (local addresses still need --allow-local); turns the proxy on", "Network"))
        .arg(flag("no-landlock", "No Landlock layer (it forbids mounts inside: nested bwrap, unshare -m)", "Security"))
        .arg(one("seccomp", "POLICY", "Seccomp policy: default, strict (judged solutions), compile (build tools), python, jvm, go, bash (judged programs of those runtimes), none, or a policy file (docs/seccomp.md)", "Security"))
        .arg(one("wall-time", "DURATION", "Kill the run after DURATION of wall time (1.5s, 300ms)", lim))
        .arg(one("output-limit", "SIZE", "Largest file the program may write (RLIMIT_FSIZE; fallocate past the size fails); also the most a --stdout-file/--stderr-file receives", lim))
        .arg(one("open-files", "N", "Most open files per process (RLIMIT_NOFILE)", lim))
        .arg(one("stack", "SIZE", "Stack size (RLIMIT_STACK)", lim))
        .arg(one("address-space", "SIZE", "Address space (RLIMIT_AS); breaks JIT runtimes such as the JVM, V8 and Go", lim))
        .arg(one("pids", "N", "Most processes and threads (pids.max; RLIMIT_NPROC per run without cgroups)", lim))
        .arg(one("memory", "SIZE", "Memory of all the run's processes (memory.max, no swap; needs cgroups)", lim))
        .arg(one("cpu-time", "DURATION", "CPU time over all processes and threads, from the program's execve", lim))
        .arg(one("cpu-bandwidth", "CPUS", "CPU bandwidth in CPUs, e.g. 0.5 or 2 (cpu.max; needs cgroups)", lim))
        .arg(one("cpus", "LIST", "CPUs the run may use, e.g. 0,1 or 0-3 (cpuset; needs cgroups)", lim))
        .arg(one("nested-namespaces", "N", "Most namespaces of each kind (user, PID, mount, network, IPC, UTS, cgroup, time) the program may hold at once; default 256, 0: none", lim))
        .arg(one("inotify-instances", "N", "Most inotify instances (and fanotify groups) the program may hold at once; default 8", lim))
        .arg(one("inotify-watches", "N", "Most inotify watches (and fanotify marks) the program may hold at once; default 8192", lim))
        .args(cgroup_args())
        .arg(one("stdin", "FILE", "Standard input (default: inherited)", io))
        .arg(one("stdout", "FILE", "Standard output (default: inherited)", io))
        .arg(one("stderr", "FILE", "Standard error (default: inherited)", io))
        .arg(one("stdin-file", "FILE", "Read-once input: FILE fed through a pipe (no seek, mmap or reread)", io).conflicts_with("stdin"))
        .arg(one("stdout-file", "FILE", "Write-once output: collected through a pipe into FILE, at most --output-limit bytes (one more: status output-limit)", io).conflicts_with("stdout"))
        .arg(one("stderr-file", "FILE", "Like --stdout-file, for standard error", io).conflicts_with("stderr"))
        .arg(flag("pty", "A pseudo-terminal of the run's own, its controlling terminal, in place of your terminal (stdin must be a terminal)", io).conflicts_with("no-pty"))
        .arg(flag("no-pty", "No pseudo-terminal: the program inherits your terminal (run's default; capsule shell's when stdin is not a terminal)", io))
        .arg(one("capture", "SIZE", "Capture up to SIZE bytes of stdout and stderr into the --json result instead", io))
        .arg(one("json", "PATH", "Write the result as a JSON object to PATH", io))
        .arg(one("meta", "PATH", "Write the result as key:value lines to PATH", io))
        .arg(flag("no-agent", "Fork a supervisor for this run instead of using (or starting) your agent, the warm supervisor runs reuse (also CAPSULE_AGENT=off; `capsule agent`)", io))
        .arg(Arg::new("quiet").short('q').long("quiet").action(ArgAction::SetTrue).help("No summary line on stderr").help_heading(io))
        .arg(
            Arg::new("argv")
                .value_name("PROGRAM")
                .num_args(1..)
                .trailing_var_arg(true)
                .help("The program and its arguments (after --)"),
        )
}

/// The egress flags, added to the profile's `egress` (any of them turns
/// the proxy on).
fn egress_from(m: &ArgMatches, spec: &mut RunSpec) -> Result<()> {
    let list = |id: &str| m.get_many::<String>(id).map(|v| v.cloned().collect::<Vec<_>>()).unwrap_or_default();
    let (allow, deny, resolve) = (list("allow-host"), list("deny-host"), list("resolve-host"));
    let local = m.get_flag("allow-local");
    if allow.is_empty() && deny.is_empty() && resolve.is_empty() && !local {
        return Ok(());
    }
    let e = spec.egress.get_or_insert_with(Default::default);
    e.allow_hosts.extend(allow);
    e.deny_hosts.extend(deny);
    e.allow_local |= local;
    for r in resolve {
        let (name, addrs) =
            r.split_once('=').ok_or_else(|| anyhow!("--resolve-host: `{r}` is not NAME=ADDR[,ADDR...]"))?;
        let addrs = addrs
            .split(',')
            .map(|a| a.trim().parse().map_err(|_| anyhow!("--resolve-host: `{a}` is not an IP address")))
            .collect::<Result<Vec<std::net::IpAddr>>>()?;
        e.resolve.insert(name.to_string(), addrs);
    }
    Ok(())
}

/// Builds the spec from the profile (if any) and the flags of a caller in
/// directory `caller_cwd`.
pub(crate) fn spec_from(m: &ArgMatches, caller_cwd: &Path) -> Result<RunSpec> {
    let caller_cwd = caller_cwd.to_path_buf();
    let mut spec = match m.get_one::<String>("profile") {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("--profile: cannot read `{path}`"))?;
            spec::from_toml(&text).map_err(|e| anyhow!("--profile `{path}`: {e}"))?
        }
        None => RunSpec::default(),
    };
    if let Some(argv) = m.get_many::<String>("argv") {
        spec.argv = argv.cloned().collect();
    }
    if let Some(v) = m.get_many::<String>("setenv") {
        let v: Vec<&String> = v.collect();
        for kv in v.chunks(2) {
            spec.env.insert(kv[0].clone(), kv[1].clone());
        }
    }
    if let Some(v) = m.get_many::<String>("keep-env") {
        spec.keep_env.extend(v.cloned());
    }
    if let Some(d) = last(m, "chdir") {
        spec.cwd = Some(d.into());
        spec.cwd_fallback = false;
    }
    if let Some(h) = last(m, "hostname") {
        spec.hostname = Some(h.clone());
    }
    set(m, "uid", &mut spec.uid, num)?;
    set(m, "gid", &mut spec.gid, num)?;
    spec.root |= m.get_flag("root");
    spec.empty_root |= m.get_flag("empty-root");
    spec.share_net |= m.get_flag("share-net");
    set(m, "tcp-connect", &mut spec.tcp_connect, spec::parse_ports)?;
    set(m, "tcp-bind", &mut spec.tcp_bind, spec::parse_ports)?;
    spec.net_log |= m.get_flag("net-log");
    spec.explain |= m.get_flag("explain");
    egress_from(m, &mut spec)?;
    if m.get_flag("no-landlock") {
        spec.landlock = Some(false);
    }
    if let Some(v) = last(m, "seccomp") {
        spec.seccomp = match v.parse().map_err(|e| anyhow!("--seccomp: {e}"))? {
            // The supervisor may not share the caller's directory.
            capsule::plan::seccomp::PolicyName::File(p) => {
                capsule::plan::seccomp::PolicyName::File(absolute(&p.to_string_lossy(), &caller_cwd))
            }
            name => name,
        };
    }
    set(m, "tmp-size", &mut spec.tmp_size, parse_size)?;
    let l = &mut spec.limits;
    set(m, "wall-time", &mut l.wall_time, parse_duration)?;
    set(m, "output-limit", &mut l.output_limit, parse_size)?;
    set(m, "open-files", &mut l.open_files, num)?;
    set(m, "stack", &mut l.stack, parse_size)?;
    set(m, "address-space", &mut l.address_space, parse_size)?;
    set(m, "pids", &mut l.pids, num)?;
    set(m, "memory", &mut l.memory, parse_size)?;
    set(m, "cpu-time", &mut l.cpu_time, parse_duration)?;
    set(m, "cpu-bandwidth", &mut l.cpu_bandwidth, num)?;
    set(m, "cpus", &mut l.cpus, |v| Ok(v.to_string()))?;
    set(m, "nested-namespaces", &mut l.nested_namespaces, num)?;
    set(m, "inotify-instances", &mut l.inotify_instances, num)?;
    set(m, "inotify-watches", &mut l.inotify_watches, num)?;
    if let Some(v) = last(m, "cgroup") {
        spec.cgroup.path = Some(absolute(v, &caller_cwd));
    }
    spec.cgroup.require |= m.get_flag("require-cgroups");
    spec.cgroup.disable |= m.get_flag("no-cgroups");
    for (id, slot) in [("stdin", &mut spec.stdin), ("stdout", &mut spec.stdout), ("stderr", &mut spec.stderr)] {
        if let Some(v) = last(m, id) {
            *slot = Some(Stdio::Path(absolute(v, &caller_cwd)));
        }
        if let Some(v) = last(m, &format!("{id}-file")) {
            *slot = Some(Stdio::Pipe(spec::PipeFile { pipe: absolute(v, &caller_cwd) }));
        }
    }
    if let Some(v) = last(m, "capture") {
        let capture = parse_size(v).map_err(|e| anyhow!("--capture: {e}"))?;
        for slot in [&mut spec.stdout, &mut spec.stderr] {
            if slot.is_none() {
                *slot = Some(Stdio::Capture(spec::Capture { capture }));
            }
        }
    }
    if let Some(v) = m.get_many::<String>("layer") {
        spec.layers.extend(v.map(|l| absolute(l, &caller_cwd)));
    }
    set(m, "layer-size", &mut spec.layer_size, parse_size)?;
    spec.mounts.extend(mount_ops(m, &caller_cwd)?);
    if let Some(name) = m.get_one::<String>("preset") {
        let layered = !m.get_flag("no-layer");
        super::preset::apply(name, &mut spec, &caller_cwd, layered)?;
        if layered && spec.layers.is_empty() {
            spec.layers.push(super::preset::default_layer()?);
        }
    }
    spec.filesystem.override_with(rules(m, &caller_cwd));
    if spec.cwd.is_none() && !spec.empty_root {
        // Like running the program itself: start where the caller is, when
        // the sandbox shows that directory.
        spec.cwd = Some(caller_cwd);
        spec.cwd_fallback = true;
    }
    Ok(spec)
}

/// The mount flags, in command-line order, with `--size`/`--noexec`
/// applied to the operation just before them.
fn mount_ops(m: &ArgMatches, cwd: &Path) -> Result<Vec<MountOp>> {
    let mut ops: Vec<(usize, MountOp)> = Vec::new();
    let pairs =
        ["bind", "bind-try", "ro-bind", "ro-bind-try", "dev-bind", "dev-bind-try", "file", "file-data", "symlink"];
    for id in pairs {
        let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) else { continue };
        let idx: Vec<usize> = idx.collect();
        let vals: Vec<&String> = vals.collect();
        for (i, kv) in vals.chunks(2).enumerate() {
            let (a, b) = (kv[0].as_str(), kv[1].as_str());
            let src = || absolute(a, cwd);
            let op = match id {
                "bind" | "bind-try" => {
                    MountOp::Bind { src: src(), dst: b.into(), try_: id.ends_with("-try"), noexec: false }
                }
                "ro-bind" | "ro-bind-try" => {
                    MountOp::RoBind { src: src(), dst: b.into(), try_: id.ends_with("-try"), noexec: false }
                }
                "dev-bind" | "dev-bind-try" => {
                    MountOp::DevBind { src: src(), dst: b.into(), try_: id.ends_with("-try"), noexec: false }
                }
                "file" => MountOp::File { src: src(), dst: b.into() },
                "file-data" => MountOp::FileData { dst: a.into(), content: b.into() },
                "symlink" => MountOp::Symlink { target: a.into(), dst: b.into() },
                _ => unreachable!(),
            };
            ops.push((idx[2 * i], op));
        }
    }
    for id in ["tmpfs", "proc", "dev", "dir"] {
        let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) else { continue };
        for (i, v) in idx.zip(vals) {
            let p: PathBuf = v.into();
            ops.push((
                i,
                match id {
                    "tmpfs" => MountOp::Tmpfs { dst: p, size: None, noexec: false },
                    "proc" => MountOp::Proc { dst: p },
                    "dev" => MountOp::Dev { dst: p },
                    "dir" => MountOp::Dir { dst: p },
                    _ => unreachable!(),
                },
            ));
        }
    }
    ops.sort_by_key(|(i, _)| *i);
    // A rule flag between a mount and its --size/--noexec is an error:
    // the modifier would silently skip the rule.
    let rule_at: Vec<usize> = RULES.iter().filter_map(|(id, _)| m.indices_of(id)).flatten().collect();
    let preceding = |ops: &mut Vec<(usize, MountOp)>, at: usize| -> Option<usize> {
        let k = ops.iter().rposition(|(i, _)| *i < at)?;
        let op_at = ops[k].0;
        (!rule_at.iter().any(|&r| r > op_at && r < at)).then_some(k)
    };
    if let (Some(idx), Some(vals)) = (m.indices_of("size"), m.get_many::<String>("size")) {
        for (at, v) in idx.zip(vals) {
            let size = parse_size(v).map_err(|e| anyhow!("--size: {e}"))?;
            match preceding(&mut ops, at).map(|k| &mut ops[k].1) {
                Some(MountOp::Tmpfs { size: s @ None, .. }) => *s = Some(size),
                Some(MountOp::Tmpfs { .. }) => bail!("--size {v}: the --tmpfs before it already has a size"),
                _ => bail!("--size {v}: must follow the --tmpfs it sizes"),
            }
        }
    }
    if let Some(idx) = m.indices_of("noexec") {
        for at in idx {
            match preceding(&mut ops, at) {
                Some(k) => {
                    if !ops[k].1.set_noexec() {
                        bail!(
                            "--noexec: --{} is not a mount (it must follow --bind, --ro-bind, --dev-bind or --tmpfs)",
                            ops[k].1.flag()
                        );
                    }
                }
                None => bail!("--noexec: must follow the mount operation it applies to"),
            }
        }
    }
    Ok(ops.into_iter().map(|(_, op)| op).collect())
}

/// The filesystem rule flags and the lists they fill.
const RULES: [(&str, &str); 4] =
    [("allow", "allow"), ("read-only", "read_only"), ("writable", "writable"), ("hide", "hide")];

/// The filesystem rule flags (relative paths from `cwd`, `~` kept for
/// the supervisor to expand).
fn rules(m: &ArgMatches, cwd: &Path) -> spec::Filesystem {
    let mut fs = spec::Filesystem { hide_secrets: !m.get_flag("no-hide-secrets"), ..Default::default() };
    for (id, list) in RULES {
        let paths: Vec<PathBuf> = m
            .get_many::<String>(id)
            .into_iter()
            .flatten()
            .map(|v| if v.is_empty() || v.starts_with('~') { PathBuf::from(v) } else { absolute(v, cwd) })
            .collect();
        match list {
            "allow" => fs.allow = paths,
            "read_only" => fs.read_only = paths,
            "writable" => fs.writable = paths,
            _ => fs.hide = paths,
        }
    }
    fs
}

/// The run's stdio as the caller sees it: its own streams, or the files the
/// spec names (opened here, relative to the caller); None for a capture.
fn open_stdio(spec: &RunSpec) -> Result<([Option<RawFd>; 3], Vec<OwnedFd>)> {
    let mut fds = [Some(0), Some(1), Some(2)];
    let mut keep = Vec::new();
    let files = [(&spec.stdin, "--stdin", false), (&spec.stdout, "--stdout", true), (&spec.stderr, "--stderr", true)];
    for (i, (io, flag, write)) in files.into_iter().enumerate() {
        if let Some(Stdio::Capture(_) | Stdio::Pipe(_)) = io {
            // The supervisor carries it.
            fds[i] = None;
        }
        if let Some(p) = io.as_ref().and_then(Stdio::path) {
            let f = if write {
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(p)
            } else {
                std::fs::File::open(p)
            }
            .with_context(|| format!("{flag}: cannot open `{}`", p.display()))?;
            let fd: OwnedFd = f.into();
            fds[i] = Some(fd.as_raw_fd());
            keep.push(fd);
        }
    }
    Ok((fds, keep))
}

fn write_outputs(m: &ArgMatches, r: &RunResult) -> Result<()> {
    if let Some(p) = last(m, "json") {
        let mut text = serde_json::to_string_pretty(r).expect("serializable");
        text.push('\n');
        std::fs::write(p, text).with_context(|| format!("--json: cannot write `{p}`"))?;
    }
    if let Some(p) = last(m, "meta") {
        std::fs::write(p, r.to_meta()).with_context(|| format!("--meta: cannot write `{p}`"))?;
    }
    Ok(())
}

/// `capsule run`, and `capsule shell` (`shell`: the shell's spec, a pty by
/// default when stdin is a terminal).
pub fn run(m: &ArgMatches, shell: bool) -> Result<ExitCode> {
    let quiet = m.get_flag("quiet");
    let no_agent = m.get_flag("no-agent");
    let mut review: Option<Vec<PathBuf>> = None;
    // A kernel-overlay layer run's working directory, for the note on
    // entries the run cannot map.
    let mut overlay_cwd: Option<PathBuf> = None;
    let cwd = std::env::current_dir().context("cannot read the current directory");
    let outcome = cwd.and_then(|cwd| spec_from(m, &cwd)).and_then(|mut spec| {
        if capsule::plan::overlay::kernel_backend(&spec) {
            overlay_cwd = spec.cwd.clone();
        }
        // MBOX's menu after a run in a layer, when there is a terminal to ask on.
        if !spec.layers.is_empty() && spec.stdin.is_none() && !m.get_flag("no-review") && capsule::sys::tty::isatty(0) {
            review = Some(spec.layers.clone());
        }
        let pty = pty::wanted(m, &spec, shell)?;
        if shell {
            let terminal = spec.stdin.is_none() && capsule::sys::tty::isatty(0);
            super::shell::prepare(&mut spec, m.contains_id("argv"), terminal);
        }
        spec.controlling_tty = pty;
        restart_in_scope(&spec)?;
        let (fds, _keep) = open_stdio(&spec)?;
        if pty {
            return pty::run(&spec, fds, !no_agent);
        }
        capsule::endpoints::once::run_once(&spec, fds, !no_agent).map_err(anyhow::Error::from)
    });
    let mut result = match outcome {
        Ok(r) => r,
        Err(e) => RunResult::error(format!("{e:#}")),
    };
    if shell {
        super::shell::explain(&mut result, m.contains_id("argv"));
    }
    let failed = result.status != capsule::Status::Error
        && !(result.status == capsule::Status::Exited && result.exit_code == Some(0));
    if let (true, Some(cwd)) = (failed, &overlay_cwd) {
        // The run sees EOVERFLOW, naming nothing; say which entry and why.
        if let Some(note) = capsule::plan::overlay::unmappable_note(cwd, capsule::sys::getuid(), capsule::sys::getgid())
        {
            result.error = Some(match result.error.take() {
                Some(e) => format!("{e}; {note}"),
                None => note,
            });
        }
    }
    write_outputs(m, &result)?;
    eprint!("{}", result.report(quiet));
    if m.get_flag("explain") && result.status != capsule::Status::Error {
        eprint!("{}", capsule::supervisor::explain::block(&result));
    }
    if let (Some(layers), false) = (review, result.status == capsule::Status::Error) {
        // The shell choice opens `capsule shell` over the same layers.
        let shell = || -> Result<()> {
            let exe = std::env::current_exe().context("locating the capsule binary")?;
            let mut cmd = std::process::Command::new(exe);
            cmd.arg("shell");
            for l in &layers {
                cmd.arg("--layer").arg(l);
            }
            cmd.arg("--no-review");
            if no_agent {
                cmd.arg("--no-agent");
            }
            cmd.status().context("starting `capsule shell`")?;
            Ok(())
        };
        super::layer::review_menu(layers.last().expect("one layer"), shell)?;
    }
    Ok(ExitCode::from(result.exit_status().clamp(0, 255) as u8))
}

/// The options of `capsule run` only the caller's own process can serve:
/// files it opens or writes (relative to itself), a terminal, a layer's
/// review menu, cgroup settings (another agent's), no agent at all.
const OWN_PROCESS: [&str; 14] = [
    "profile",
    "preset",
    "explain",
    "stdin",
    "stdout",
    "stderr",
    "json",
    "meta",
    "pty",
    "layer",
    "no-agent",
    "cgroup",
    "require-cgroups",
    "no-cgroups",
];

/// How an agent plans a command line from the front end (`capsule`,
/// which parses no options): this command's own parsing, for the caller's
/// directory `cwd`. Runs in the agent.
pub fn plan(args: &[String], cwd: &Path) -> capsule::endpoints::agent::Planned {
    use capsule::endpoints::agent::Planned;
    use clap::parser::ValueSource;
    if args.first().map(String::as_str) != Some("run") {
        return Planned::Decline;
    }
    let argv = std::iter::once("capsule").chain(args.iter().map(String::as_str));
    // Errors and --help are the command's own to print.
    let Ok(top) = crate::cli_of(Some("run")).try_get_matches_from(argv) else { return Planned::Decline };
    let Some(("run", m)) = top.subcommand() else { return Planned::Decline };
    if OWN_PROCESS.iter().any(|id| m.value_source(id) == Some(ValueSource::CommandLine)) {
        return Planned::Decline;
    }
    let quiet = m.get_flag("quiet");
    match spec_from(m, cwd) {
        Ok(spec) => Planned::Run { spec: Box::new(spec), quiet },
        Err(e) => Planned::Fail { error: format!("{e:#}"), quiet },
    }
}
