//! The run spec: one serde type produced alike by CLI flags, TOML profile
//! files, the library API and the wire protocols, validated once by
//! [`RunSpec::validate`]. Field names are the profile's and the protocol's.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::SpecError;
use crate::proto::units;

/// PATH given to the program when the spec sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Hostname inside the sandbox when the spec sets none.
pub const DEFAULT_HOSTNAME: &str = "capsule";
/// Size of the private `/tmp` of the host view when the spec sets none.
pub const DEFAULT_TMP_SIZE: u64 = 128 << 20;
/// Size of `/dev/shm` in every `/dev` capsule builds.
pub const DEV_SHM_SIZE: u64 = 64 << 20;
/// Size of the tmpfs that is the root with `empty_root`.
pub const EMPTY_ROOT_SIZE: u64 = 64 << 20;
/// Least `layer_size`: one page of the staging tmpfs.
pub const MIN_LAYER_SIZE: u64 = 4096;
/// Most layers one run may stack.
pub const MAX_LAYERS: usize = 8;

/// Everything that describes one sandboxed run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    /// Program and arguments. A program without `/` is looked up in the
    /// sandbox's `PATH` (the sandbox's view of the filesystem).
    pub argv: Vec<String>,
    /// Environment variables to set (the environment starts empty).
    pub env: BTreeMap<String, String>,
    /// Names of the caller's environment variables to pass through; filled
    /// in by the client, which sees the caller's environment.
    pub keep_env: Vec<String>,
    /// Working directory inside the sandbox (default `/`).
    pub cwd: Option<PathBuf>,
    /// When true and `cwd` is not reachable in the sandbox, start in `/`
    /// instead of failing (the CLI sets this when it defaults `cwd` to the
    /// caller's directory).
    pub cwd_fallback: bool,
    /// Hostname inside the sandbox (default `capsule`).
    pub hostname: Option<String>,
    /// User id inside the sandbox (default: the caller's own).
    pub uid: Option<u32>,
    /// Group id inside the sandbox (default: the caller's own).
    pub gid: Option<u32>,
    /// Map the caller to uid 0 / gid 0 inside (a fakeroot). The
    /// program still has no capabilities.
    pub root: bool,
    /// Start from an empty tmpfs instead of the read-only host view.
    pub empty_root: bool,
    /// Size of the private `/tmp` of the host view.
    #[serde(with = "units::opt_size")]
    pub tmp_size: Option<u64>,
    /// Copy-on-write layers over the host view (docs/layers.md): host
    /// directories whose `upper/` receives every change the program makes;
    /// the last one is writable (created if missing), earlier ones are
    /// stacked read-only below it.
    pub layers: Vec<PathBuf>,
    /// Most the writable layer may hold (`--layer-size`, docs/layers.md):
    /// the run writes to a tmpfs of what is left, folded into the layer
    /// when it ends; past it, writes fail with ENOSPC. None: no limit.
    #[serde(with = "units::opt_size")]
    pub layer_size: Option<u64>,
    /// Mount operations, applied in order after the base view.
    pub mounts: Vec<MountOp>,
    /// Which host paths the run sees, may write or may not see
    /// (`[filesystem]`, docs/filesystem.md); applied after `mounts`.
    pub filesystem: Filesystem,
    /// Share the host's network instead of a loopback-only one.
    pub share_net: bool,
    /// TCP ports the program may connect to (Landlock, Linux ≥ 6.7);
    /// absent: any, `[]`: none. With `share_net` the host's network, else
    /// the loopback-only one (shared by a supervisor's runs). A kernel that
    /// cannot enforce it fails the run.
    pub tcp_connect: Option<Vec<u16>>,
    /// TCP ports the program may bind, like `tcp_connect` (0: let the
    /// kernel pick one).
    pub tcp_bind: Option<Vec<u16>>,
    /// Record the destination of every `connect`, `sendto`, `sendmsg` and
    /// `sendmmsg` of the run (seccomp user notifications read by PID 1) and
    /// return them in the result's `net_log` (docs/network.md). Works with
    /// every seccomp policy; with `none`, the run gets a filter that only
    /// does this.
    pub net_log: bool,
    /// Report what the run was refused (the result's `violations`,
    /// docs/explain.md): besides a forbidden call and refused network
    /// destinations (the network log, which this turns on for the
    /// filter), every file open and write-type call is sent to PID 1
    /// (seccomp user notifications, as the network log's), whose reader
    /// classifies its path against the run's mount plan. An observation:
    /// nothing is refused because of it.
    pub explain: bool,
    /// Egress by name (docs/egress.md): the run keeps its loopback-only
    /// network, and a proxy outside it (HTTP and SOCKS5, on the run's
    /// 127.0.0.1:3128) reaches the hosts `allow_hosts` names and no
    /// other. Absent: no proxy. Not with `share_net`.
    pub egress: Option<crate::proto::egress::Egress>,
    /// Seccomp policy: `default`, `strict`, `compile`, `python`, `jvm`,
    /// `go`, `bash`, `none` or a policy file (docs/seccomp.md).
    pub seccomp: crate::proto::policy::PolicyName,
    /// The Landlock layer (write access only where the mounts allow it;
    /// signals and abstract Unix sockets scoped to the run): on where the
    /// kernel has Landlock unless `false`. Off, the program may mount
    /// inside (nested sandboxes, `unshare -m`), which Landlock forbids.
    pub landlock: Option<bool>,
    /// Resource limits.
    pub limits: Limits,
    /// Where the run's cgroups come from.
    pub cgroup: crate::proto::config::CgroupConfig,
    /// Standard input: a file (default: `capsule run`'s own stdin; `/dev/null`
    /// for runs of a long-lived supervisor unless the caller passes a
    /// descriptor).
    pub stdin: Option<Stdio>,
    /// Standard output: a file (created or truncated) or `{capture = N}`
    /// (default as for `stdin`).
    pub stdout: Option<Stdio>,
    /// Standard error, like `stdout`.
    pub stderr: Option<Stdio>,
    /// Make the run's stdin its controlling terminal (a new session of the
    /// sandbox's own, `TIOCSCTTY`): job control and ^C/^Z work inside.
    /// Stdin must then be a terminal the caller passes (`capsule shell` and
    /// `capsule run --pty` pass a pseudo-terminal of the run's own), not a
    /// file.
    pub controlling_tty: bool,
    /// The caller's own descriptors (numbers above 2) the program gets at
    /// the same numbers (`capsule isolate --inherit-fds`). Only the one-shot
    /// client (`endpoints::once`) passes them, attached to its request; a
    /// spec that names any reaches every other endpoint without them and
    /// is refused there (JSON cannot carry a descriptor).
    pub inherit_fds: Vec<i32>,
    /// Run the program as these host ids, a subordinate uid and gid of the
    /// caller's (`/etc/subuid`, `/etc/subgid`; `capsule isolate`'s box
    /// user, docs/isolate.md), seen inside as the same numbers, with no
    /// supplementary group: the kernel then treats the caller's files as
    /// another user's. Only a supervisor whose user namespace maps them
    /// (`Config::subordinate`: the one-shot client's, made with
    /// `newuidmap`) runs such a spec; every other refuses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subordinate: Option<SubordinateIds>,
}

/// Host ids of the caller's subordinate ranges (`RunSpec::subordinate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubordinateIds {
    pub uid: u32,
    pub gid: u32,
}

/// Most descriptors `inherit_fds` may name: they travel in one message
/// with the run's three streams and `notify` (`sys::MAX_FDS`).
pub const MAX_INHERIT_FDS: usize = 24;
// The three streams, these, and `notify`.
const _: () = assert!(3 + MAX_INHERIT_FDS < crate::sys::MAX_FDS);

/// The filesystem rules (`[filesystem]` of a profile; docs/filesystem.md):
/// host paths made visible, read-only, writable or hidden. A path is
/// absolute, or starts with `~` (the caller's home). The most specific
/// path wins; a path in two lists is an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Filesystem {
    /// Visible as in the base view: undoes a `hide` (or a default secret
    /// hide) of the path or of a parent.
    pub allow: Vec<PathBuf>,
    /// Visible and read-only, even beneath a `writable` path.
    pub read_only: Vec<PathBuf>,
    /// Bound read-write from the host (must exist).
    pub writable: Vec<PathBuf>,
    /// Covered by an empty read-only directory or file (a missing path is
    /// fine).
    pub hide: Vec<PathBuf>,
    /// Read-only whether or not it exists: a missing path gets an empty
    /// read-only file as a stand-in, made in the run's layer (a run
    /// without a layer refuses a missing one), and no commit ever takes
    /// it (`--preset agent`'s hooks, editor and agent configuration).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guard: Vec<PathBuf>,
    /// Hide the usual secrets of the caller's home
    /// ([`crate::host::fsrules::SECRETS`]); default true.
    pub hide_secrets: bool,
}

impl Default for Filesystem {
    fn default() -> Self {
        Filesystem {
            allow: Vec::new(),
            read_only: Vec::new(),
            writable: Vec::new(),
            hide: Vec::new(),
            guard: Vec::new(),
            hide_secrets: true,
        }
    }
}

impl Filesystem {
    /// The five lists with their field names.
    pub fn lists(&self) -> [(&'static str, &[PathBuf]); 5] {
        [
            ("allow", &self.allow),
            ("read_only", &self.read_only),
            ("writable", &self.writable),
            ("hide", &self.hide),
            ("guard", &self.guard),
        ]
    }

    /// Command-line rules over a profile's: a path given in `cli` leaves
    /// the profile's lists, then `cli`'s lists are appended (a path in two
    /// of `cli`'s own lists stays an error).
    pub fn override_with(&mut self, cli: Filesystem) {
        let given: Vec<PathBuf> = cli.lists().iter().flat_map(|(_, l)| l.iter().cloned()).collect();
        for list in [&mut self.allow, &mut self.read_only, &mut self.writable, &mut self.hide, &mut self.guard] {
            list.retain(|p| !given.contains(p));
        }
        self.allow.extend(cli.allow);
        self.read_only.extend(cli.read_only);
        self.writable.extend(cli.writable);
        self.hide.extend(cli.hide);
        self.guard.extend(cli.guard);
        self.hide_secrets &= cli.hide_secrets;
    }

    fn validate(&self) -> Result<(), SpecError> {
        for (list, paths) in self.lists() {
            for (i, p) in paths.iter().enumerate() {
                rule_path(&format!("filesystem.{list}[{i}]"), p)?;
            }
        }
        Ok(())
    }
}

/// A filesystem rule's path: absolute or `~`-relative, no `..`, not `/`.
fn rule_path(field: &str, p: &Path) -> Result<(), SpecError> {
    let s = p.to_str().ok_or_else(|| SpecError::new(field, "must be valid UTF-8"))?;
    no_nul(field, s)?;
    if s.is_empty() {
        return Err(SpecError::new(field, "must not be empty"));
    }
    if s.starts_with('~') && s != "~" && !s.starts_with("~/") {
        let user = s[1..].split('/').next().unwrap_or("");
        return Err(SpecError::new(
            field,
            format!("`{s}`: `~{user}` (another user's home) is not supported; only `~` (your own home) is, or write the path out"),
        ));
    }
    if !s.starts_with('~') && !p.is_absolute() {
        return Err(SpecError::new(
            field,
            format!("`{s}` must be an absolute path or start with `~/` (on the command line, a relative path is taken from the current directory)"),
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(SpecError::new(field, format!("`{s}` must not contain `..`")));
    }
    if p.components().all(|c| c == Component::RootDir || c == Component::CurDir) {
        return Err(SpecError::new(
            field,
            format!("`{s}` is the root itself, which a rule cannot cover or bind (use `empty_root` for an empty root)"),
        ));
    }
    Ok(())
}

/// Where one of a run's standard streams goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stdio {
    /// A host file, opened by the supervisor as the caller: read for stdin,
    /// created or truncated for stdout and stderr.
    Path(PathBuf),
    /// Collect up to `capture` bytes through a pipe and return them in the
    /// result (`stdout`/`stderr` of the result); the rest is read and
    /// dropped, and the result says it was truncated.
    Capture(Capture),
    /// `{"pipe": F}`, read-once input and write-once output: for stdin, the
    /// supervisor feeds the host file F through a pipe (splice), so the
    /// program cannot seek, map or reread it; for stdout and stderr, it
    /// collects the pipe into F (created or truncated), at most
    /// `limits.output_limit` bytes: one byte more kills the run with status
    /// `output-limit`, F holding exactly the first `output_limit` bytes.
    Pipe(PipeFile),
}

/// `{"pipe": F}`: a host file moved through a pipe (see [`Stdio::Pipe`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipeFile {
    pub pipe: PathBuf,
}

/// `{"capture": N}`: how many bytes of a stream to keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    #[serde(with = "units::size")]
    pub capture: u64,
}

/// Most ports `tcp_connect` or `tcp_bind` may list (one Landlock rule each).
pub const MAX_PORTS: usize = 4096;

/// Parses a port list as the CLI takes it: `none`, or ports separated by
/// commas (`80,443`).
pub fn parse_ports(s: &str) -> Result<Vec<u16>, String> {
    if s.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let port = part
            .parse::<u16>()
            .map_err(|_| format!("`{part}` is not a TCP port (0-65535); give ports separated by commas, or `none`"))?;
        if !out.contains(&port) {
            out.push(port);
        }
    }
    if out.len() > MAX_PORTS {
        return Err(format!("more than {MAX_PORTS} ports"));
    }
    Ok(out)
}

/// Most bytes one captured stream may keep (the result travels in one message).
pub const MAX_CAPTURE: u64 = 16 << 20;

impl Stdio {
    /// The file, when it is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Stdio::Path(p) => Some(p),
            Stdio::Capture(_) | Stdio::Pipe(_) => None,
        }
    }
}

/// Limits that need no cgroup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wall-clock time from the program's `execve`; kills the whole run.
    #[serde(with = "units::opt_duration")]
    pub wall_time: Option<Duration>,
    /// Largest file the program may write (RLIMIT_FSIZE); exceeding it
    /// gives status `output-limit`.
    #[serde(with = "units::opt_size")]
    pub output_limit: Option<u64>,
    /// Most open file descriptors per process (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// Stack size (RLIMIT_STACK).
    #[serde(with = "units::opt_size")]
    pub stack: Option<u64>,
    /// Address space (RLIMIT_AS). Harmful to JIT runtimes (JVM, V8, Go),
    /// which reserve far more address space than they use.
    #[serde(with = "units::opt_size")]
    pub address_space: Option<u64>,
    /// Memory the program may lock (RLIMIT_MEMLOCK; `capsule isolate`
    /// sets 0, as isolate does). None: the caller's.
    #[serde(with = "units::opt_size")]
    pub locked_memory: Option<u64>,
    /// Most processes and threads of the run: `pids.max` of its cgroup;
    /// without cgroups RLIMIT_NPROC, counted per user namespace (each run
    /// has its own).
    pub pids: Option<u64>,
    /// Memory of all the run's processes (`memory.max`; no swap). Needs cgroups.
    #[serde(with = "units::opt_size")]
    pub memory: Option<u64>,
    /// CPU time over all processes and threads from the program's execve
    /// (cgroup `cpu.stat`; without cgroups the run's processes in its
    /// procfs, watched by PID 1 at most every 5 ms near the limit).
    #[serde(with = "units::opt_duration")]
    pub cpu_time: Option<Duration>,
    /// CPU bandwidth in CPUs (`cpu.max`), e.g. 0.5 or 2. Needs cgroups.
    pub cpu_bandwidth: Option<f64>,
    /// CPUs the run may use (`cpuset.cpus`), e.g. "0,1" or "0-3". Needs cgroups.
    pub cpus: Option<String>,
    /// Most namespaces of each kind (user, PID, mount, network, IPC, UTS,
    /// cgroup, time) the program may hold at once, 0 for none: the kernel
    /// counts them in the run's own user namespace (`/proc/sys/user/max_*`
    /// there), so they do not use up the user's limits on the host.
    /// Default [`NESTED_NAMESPACES`].
    pub nested_namespaces: Option<u64>,
    /// Most inotify instances the program may hold at once, and as many
    /// fanotify groups. Default [`INOTIFY_INSTANCES`].
    pub inotify_instances: Option<u64>,
    /// Most inotify watches the program may hold at once, and as many
    /// fanotify marks. Default [`INOTIFY_WATCHES`].
    pub inotify_watches: Option<u64>,
}

/// `limits.nested_namespaces` unless set: room for nested sandboxes
/// (bwrap, Chromium, Firefox, rootless podman take a few to a few dozen),
/// a small share of the user's (the kernel's default is tens of thousands
/// of each kind per user; docs/limits.md has the arithmetic).
pub const NESTED_NAMESPACES: u64 = 256;
/// `limits.inotify_instances` unless set: four concurrent runs leave the
/// user 96 of the kernel's default 128 per user (docs/limits.md).
pub const INOTIFY_INSTANCES: u64 = 8;
/// `limits.inotify_watches` unless set: the kernel's old fixed per-user
/// default; newer kernels give a user 1% of memory's worth, about 65k
/// per 8 GiB (docs/limits.md).
pub const INOTIFY_WATCHES: u64 = 8192;
/// The largest value the kernel takes for a `/proc/sys/user/max_*` (an
/// int), less the namespaces capsule itself makes there.
pub const MAX_UCOUNT: u64 = i32::MAX as u64 - 1;

/// One mount operation, bubblewrap-style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MountOp {
    /// Bind `src` (host view) read-write at `dst`.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        #[serde(default, rename = "try")]
        try_: bool,
        #[serde(default)]
        noexec: bool,
    },
    /// Bind `src` read-only at `dst`.
    RoBind {
        src: PathBuf,
        dst: PathBuf,
        #[serde(default, rename = "try")]
        try_: bool,
        #[serde(default)]
        noexec: bool,
    },
    /// Bind `src` read-write at `dst`, device nodes usable.
    DevBind {
        src: PathBuf,
        dst: PathBuf,
        #[serde(default, rename = "try")]
        try_: bool,
        #[serde(default)]
        noexec: bool,
    },
    /// A fresh tmpfs at `dst`.
    Tmpfs {
        dst: PathBuf,
        #[serde(default, with = "units::opt_size")]
        size: Option<u64>,
        #[serde(default)]
        noexec: bool,
    },
    /// A fresh procfs of the run's PID namespace at `dst`.
    Proc { dst: PathBuf },
    /// A minimal /dev at `dst`.
    Dev { dst: PathBuf },
    /// An empty directory (and missing parents) at `dst`.
    Dir { dst: PathBuf },
    /// A copy of the host file `src` at `dst`.
    File { src: PathBuf, dst: PathBuf },
    /// A file at `dst` holding `content`.
    FileData { dst: PathBuf, content: String },
    /// A symbolic link at `dst` pointing to `target`.
    Symlink { target: PathBuf, dst: PathBuf },
    /// An empty read-only directory or file over `path`.
    Hide { path: PathBuf },
}

impl MountOp {
    /// Where the operation acts inside the sandbox.
    pub fn dst(&self) -> &Path {
        match self {
            MountOp::Bind { dst, .. }
            | MountOp::RoBind { dst, .. }
            | MountOp::DevBind { dst, .. }
            | MountOp::Tmpfs { dst, .. }
            | MountOp::Proc { dst }
            | MountOp::Dev { dst }
            | MountOp::Dir { dst }
            | MountOp::File { dst, .. }
            | MountOp::FileData { dst, .. }
            | MountOp::Symlink { dst, .. } => dst,
            MountOp::Hide { path } => path,
        }
    }

    /// The name used on the command line (`--ro-bind`, ...).
    pub fn flag(&self) -> &'static str {
        match self {
            MountOp::Bind { try_: false, .. } => "bind",
            MountOp::Bind { try_: true, .. } => "bind-try",
            MountOp::RoBind { try_: false, .. } => "ro-bind",
            MountOp::RoBind { try_: true, .. } => "ro-bind-try",
            MountOp::DevBind { try_: false, .. } => "dev-bind",
            MountOp::DevBind { try_: true, .. } => "dev-bind-try",
            MountOp::Tmpfs { .. } => "tmpfs",
            MountOp::Proc { .. } => "proc",
            MountOp::Dev { .. } => "dev",
            MountOp::Dir { .. } => "dir",
            MountOp::File { .. } => "file",
            MountOp::FileData { .. } => "file-data",
            MountOp::Symlink { .. } => "symlink",
            MountOp::Hide { .. } => "hide",
        }
    }

    /// Sets `noexec` where the operation mounts something; false otherwise.
    pub fn set_noexec(&mut self) -> bool {
        match self {
            MountOp::Bind { noexec, .. }
            | MountOp::RoBind { noexec, .. }
            | MountOp::DevBind { noexec, .. }
            | MountOp::Tmpfs { noexec, .. } => {
                *noexec = true;
                true
            }
            _ => false,
        }
    }
}

/// Parses a TOML profile into a spec (not yet validated). Errors name the
/// field (`limits.wall_time`) where it is known, and the line.
pub fn from_toml(text: &str) -> Result<RunSpec, SpecError> {
    parse_toml(text, "profile").map_err(|(where_, message)| SpecError::new(where_, message))
}

/// Parses an interactive spec (`[solution]` and `[interactor]` tables)
/// from TOML (not yet validated).
pub fn interact_from_toml(text: &str) -> Result<InteractSpec, SpecError> {
    parse_toml(text, "spec").map_err(|(where_, message)| SpecError::new(where_, message))
}

/// Parses an interactive spec from JSON (not yet validated); errors name
/// the field.
pub fn interact_from_json(text: &str) -> Result<InteractSpec, SpecError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        SpecError::new(if path == "." { "spec".into() } else { path }, e.into_inner().to_string())
    })
}

/// Deserializes TOML; an error says where (`field.path (line N)`, or
/// `line N`, or `whole` when nothing more precise is known) and what.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, whole: &str) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let line = inner.span().map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let where_ = match (path.as_str(), line) {
            (".", Some(l)) => format!("line {l}"),
            (".", None) => whole.to_string(),
            (p, Some(l)) => format!("{p} (line {l})"),
            (p, None) => p.to_string(),
        };
        (where_, inner.message().trim().to_string())
    })
}

fn no_nul(field: &str, s: &str) -> Result<(), SpecError> {
    if s.contains('\0') {
        Err(SpecError::new(field, "must not contain a NUL byte"))
    } else {
        Ok(())
    }
}

fn sandbox_path(field: &str, p: &Path) -> Result<(), SpecError> {
    let s = p.to_str().ok_or_else(|| SpecError::new(field, "must be valid UTF-8"))?;
    no_nul(field, s)?;
    if !p.is_absolute() {
        return Err(SpecError::new(field, format!("`{s}` must be an absolute path")));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(SpecError::new(field, format!("`{s}` must not contain `..`")));
    }
    Ok(())
}

fn host_path(field: &str, p: &Path) -> Result<(), SpecError> {
    let s = p.to_str().ok_or_else(|| SpecError::new(field, "must be valid UTF-8"))?;
    if s.is_empty() {
        return Err(SpecError::new(field, "must not be empty"));
    }
    no_nul(field, s)
}

impl RunSpec {
    /// A spec running `argv` with every default.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RunSpec { argv: argv.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Whether PID 1 records the run's network calls: `net_log`, or
    /// `egress`, whose report lists direct attempts that bypass the proxy.
    pub fn logs_net(&self) -> bool {
        self.net_log || self.egress.is_some()
    }

    /// Checks every field once; the error names the field.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_program()?;
        self.validate_ids()?;
        if self.tmp_size == Some(0) {
            return Err(SpecError::new("tmp_size", "must be more than 0 bytes"));
        }
        self.validate_layers()?;
        self.limits.validate()?;
        self.validate_network()?;
        self.validate_mounts()?;
        self.filesystem.validate()?;
        self.validate_streams()
    }

    /// The program: `argv`, `env`, `keep_env`, `cwd`, `hostname`.
    fn validate_program(&self) -> Result<(), SpecError> {
        if self.argv.is_empty() {
            return Err(SpecError::new("argv", "no program given"));
        }
        if self.argv[0].is_empty() {
            return Err(SpecError::new("argv[0]", "the program name is empty"));
        }
        for (i, a) in self.argv.iter().enumerate() {
            no_nul(&format!("argv[{i}]"), a)?;
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(SpecError::new(
                    format!("env.{k}"),
                    "a variable name must be non-empty and contain neither `=` nor NUL",
                ));
            }
            no_nul(&format!("env.{k}"), v)?;
        }
        for k in &self.keep_env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(SpecError::new("keep_env", format!("`{k}` is not a valid variable name")));
            }
        }
        if let Some(cwd) = &self.cwd {
            sandbox_path("cwd", cwd)?;
        }
        if let Some(h) = &self.hostname {
            if h.is_empty() || h.len() > 64 || h.contains('\0') || h.contains('/') {
                return Err(SpecError::new("hostname", "must be 1 to 64 bytes with no `/` or NUL"));
            }
        }
        Ok(())
    }

    /// Whom the program runs as: `root`, `uid`, `gid`, `subordinate`.
    fn validate_ids(&self) -> Result<(), SpecError> {
        if self.root && (self.uid.is_some_and(|u| u != 0) || self.gid.is_some_and(|g| g != 0)) {
            return Err(SpecError::new(
                "root",
                "`root` maps the caller to uid 0 and gid 0; it cannot be combined with another uid or gid",
            ));
        }
        for (field, id) in [("uid", self.uid), ("gid", self.gid)] {
            if id == Some(u32::MAX) {
                return Err(SpecError::new(field, "4294967295 is not a valid id"));
            }
        }
        if let Some(ids) = self.subordinate {
            if self.root || !self.layers.is_empty() {
                return Err(SpecError::new(
                    "subordinate",
                    "a run as subordinate ids cannot be combined with `root` or `layers`",
                ));
            }
            if ids.uid == u32::MAX || ids.gid == u32::MAX {
                return Err(SpecError::new("subordinate", "4294967295 is not a valid id"));
            }
        }
        Ok(())
    }

    /// `layers` and `layer_size`.
    fn validate_layers(&self) -> Result<(), SpecError> {
        if !self.layers.is_empty() && self.empty_root {
            return Err(SpecError::new(
                "layers",
                "layers cover the host view; they cannot be combined with `empty_root`",
            ));
        }
        if self.layers.len() > crate::proto::spec::MAX_LAYERS {
            return Err(SpecError::new("layers", format!("at most {} layers", crate::proto::spec::MAX_LAYERS)));
        }
        if let Some(n) = self.layer_size {
            if self.layers.is_empty() {
                return Err(SpecError::new("layer_size", "limits the writable layer; give `layers` too (--layer DIR)"));
            }
            if self.root {
                return Err(SpecError::new(
                    "layer_size",
                    "a `root` run's layer is served by fuse-overlayfs, which cannot stage its writes in a size-limited tmpfs; drop `root` or the limit",
                ));
            }
            if n < MIN_LAYER_SIZE {
                return Err(SpecError::new(
                    "layer_size",
                    format!("must be at least {MIN_LAYER_SIZE} bytes (one page), not {n}"),
                ));
            }
        }
        for (i, l) in self.layers.iter().enumerate() {
            host_path(&format!("layers[{i}]"), l)?;
            if !l.is_absolute() {
                return Err(SpecError::new(
                    format!("layers[{i}]"),
                    format!("`{}` must be an absolute path", l.display()),
                ));
            }
            if self.layers[..i].contains(l) {
                return Err(SpecError::new(format!("layers[{i}]"), format!("`{}` is given twice", l.display())));
            }
        }
        Ok(())
    }

    /// `egress`, `tcp_connect`, `tcp_bind`.
    fn validate_network(&self) -> Result<(), SpecError> {
        if let Some(e) = &self.egress {
            if self.share_net {
                return Err(SpecError::new(
                    "egress",
                    "the egress proxy is the only way out of the run's own network; with `share_net` the run has the host's, which no proxy can filter: drop one",
                ));
            }
            e.validate()?;
        }
        for (field, ports) in [("tcp_connect", &self.tcp_connect), ("tcp_bind", &self.tcp_bind)] {
            if ports.as_ref().is_some_and(|p| p.len() > MAX_PORTS) {
                return Err(SpecError::new(field, format!("more than {MAX_PORTS} ports")));
            }
        }
        Ok(())
    }

    /// `mounts`: paths on each side, sizes, never `/` itself.
    fn validate_mounts(&self) -> Result<(), SpecError> {
        for (i, op) in self.mounts.iter().enumerate() {
            let f = |name: &str| format!("mounts[{i}].{name}");
            match op {
                MountOp::Bind { src, dst, .. }
                | MountOp::RoBind { src, dst, .. }
                | MountOp::DevBind { src, dst, .. }
                | MountOp::File { src, dst } => {
                    host_path(&f("src"), src)?;
                    sandbox_path(&f("dst"), dst)?;
                }
                MountOp::Tmpfs { dst, size, .. } => {
                    sandbox_path(&f("dst"), dst)?;
                    if *size == Some(0) {
                        return Err(SpecError::new(f("size"), "must be more than 0 bytes"));
                    }
                }
                MountOp::Proc { dst } | MountOp::Dev { dst } | MountOp::Dir { dst } => sandbox_path(&f("dst"), dst)?,
                MountOp::FileData { dst, content } => {
                    sandbox_path(&f("dst"), dst)?;
                    let _ = content;
                }
                MountOp::Symlink { target, dst } => {
                    sandbox_path(&f("dst"), dst)?;
                    host_path(&f("target"), target)?;
                }
                MountOp::Hide { path } => sandbox_path(&f("path"), path)?,
            }
            if op.dst() == Path::new("/") {
                return Err(SpecError::new(f("dst"), "cannot replace `/` itself (use `empty_root` for an empty root)"));
            }
        }
        Ok(())
    }

    /// `stdin`, `stdout`, `stderr`, `controlling_tty`, `inherit_fds`.
    fn validate_streams(&self) -> Result<(), SpecError> {
        for (field, io) in [("stdin", &self.stdin), ("stdout", &self.stdout), ("stderr", &self.stderr)] {
            match io {
                None => {}
                Some(Stdio::Path(p)) => host_path(field, p)?,
                Some(Stdio::Capture(_)) if field == "stdin" => {
                    return Err(SpecError::new(field, "standard input cannot be captured; give a file"))
                }
                Some(Stdio::Capture(Capture { capture })) if *capture > MAX_CAPTURE => {
                    return Err(SpecError::new(
                        format!("{field}.capture"),
                        format!("{capture} bytes is more than the most a result can carry ({MAX_CAPTURE})"),
                    ));
                }
                Some(Stdio::Capture(_)) => {}
                Some(Stdio::Pipe(PipeFile { pipe })) => host_path(&format!("{field}.pipe"), pipe)?,
            }
        }
        if self.controlling_tty && self.stdin.is_some() {
            return Err(SpecError::new(
                "controlling_tty",
                "the controlling terminal is the run's stdin, which must then be a terminal the caller passes, not `stdin` from the spec",
            ));
        }
        if self.inherit_fds.len() > MAX_INHERIT_FDS {
            return Err(SpecError::new("inherit_fds", format!("at most {MAX_INHERIT_FDS} descriptors")));
        }
        for (i, &fd) in self.inherit_fds.iter().enumerate() {
            if fd < 3 {
                return Err(SpecError::new(
                    "inherit_fds",
                    format!("{fd}: only descriptors above 2 (0-2 are the streams)"),
                ));
            }
            if self.inherit_fds[..i].contains(&fd) {
                return Err(SpecError::new("inherit_fds", format!("{fd} is named twice")));
            }
        }
        Ok(())
    }
}

impl Limits {
    fn validate(&self) -> Result<(), SpecError> {
        if self.wall_time == Some(Duration::ZERO) {
            return Err(SpecError::new("limits.wall_time", "must be more than 0"));
        }
        if self.output_limit == Some(0) {
            return Err(SpecError::new("limits.output_limit", "must be at least 1 byte"));
        }
        if let Some(n) = self.open_files {
            if n < 3 {
                return Err(SpecError::new(
                    "limits.open_files",
                    format!("{n} is too few: the program needs at least 3 (stdin, stdout, stderr)"),
                ));
            }
            if n > (1 << 30) {
                return Err(SpecError::new("limits.open_files", format!("{n} is too many")));
            }
        }
        if let Some(n) = self.stack {
            if n < 64 << 10 {
                return Err(SpecError::new(
                    "limits.stack",
                    format!("{n} bytes is too small a stack to start a program (at least 64K)"),
                ));
            }
        }
        if let Some(n) = self.address_space {
            if n < 4 << 20 {
                return Err(SpecError::new(
                    "limits.address_space",
                    format!("{n} bytes is too small an address space to start a program (at least 4M)"),
                ));
            }
        }
        if self.pids == Some(0) {
            return Err(SpecError::new("limits.pids", "must be at least 1 (the program itself)"));
        }
        if let Some(m) = self.memory {
            if m < 1 << 20 {
                return Err(SpecError::new(
                    "limits.memory",
                    format!("{m} bytes is too little memory to start a program (at least 1M)"),
                ));
            }
        }
        if self.cpu_time == Some(Duration::ZERO) {
            return Err(SpecError::new("limits.cpu_time", "must be more than 0"));
        }
        if let Some(b) = self.cpu_bandwidth {
            if !(0.01..=4096.0).contains(&b) {
                return Err(SpecError::new(
                    "limits.cpu_bandwidth",
                    format!("{b} is not a number of CPUs between 0.01 and 4096"),
                ));
            }
        }
        let ucounts = [
            ("limits.nested_namespaces", self.nested_namespaces),
            ("limits.inotify_instances", self.inotify_instances),
            ("limits.inotify_watches", self.inotify_watches),
        ];
        for (field, v) in ucounts {
            if let Some(n) = v.filter(|&n| n > MAX_UCOUNT) {
                return Err(SpecError::new(field, format!("{n} is too many (at most {MAX_UCOUNT})")));
            }
        }
        if let Some(c) = &self.cpus {
            let ok = !c.is_empty()
                && c.split(',').all(|part| {
                    let mut r = part.splitn(2, '-');
                    let num =
                        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
                    let (a, b) = (r.next(), r.next());
                    num(a) && (b.is_none() || num(b))
                });
            if !ok {
                return Err(SpecError::new(
                    "limits.cpus",
                    format!("`{c}` is not a CPU list (like `0`, `0,2` or `0-3`)"),
                ));
            }
        }
        Ok(())
    }
}

/// An interactive run (docs/interactive.md): two programs, each in a
/// sandbox of its own with its own limits and policy, the solution's stdout
/// feeding the interactor's stdin and the interactor's stdout the
/// solution's stdin, through two pairs of pipes the supervisor holds and
/// relays (splice), so it knows which program left the conversation first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InteractSpec {
    /// The program being judged.
    pub solution: RunSpec,
    /// The program that talks to it and decides (a checker).
    pub interactor: RunSpec,
}

impl InteractSpec {
    /// Both specs validated; their stdin and stdout are the conversation,
    /// so a spec may not set them (stderr as usual).
    pub fn validate(&self) -> Result<(), SpecError> {
        for (side, spec) in [("solution", &self.solution), ("interactor", &self.interactor)] {
            spec.validate().map_err(|e| SpecError::new(format!("{side}.{}", e.field), e.message))?;
            for (field, io) in [("stdin", &spec.stdin), ("stdout", &spec.stdout)] {
                if io.is_some() {
                    return Err(SpecError::new(
                        format!("{side}.{field}"),
                        "an interactive run's stdin and stdout are the pipes to the other program; leave them unset",
                    ));
                }
            }
            if spec.controlling_tty {
                return Err(SpecError::new(
                    format!("{side}.controlling_tty"),
                    "an interactive run's stdin is a pipe, not a terminal",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_json_spec_is_valid() {
        let s: RunSpec = serde_json::from_str(r#"{"argv": ["/bin/true"]}"#).unwrap();
        s.validate().unwrap();
        assert_eq!(s.argv, vec!["/bin/true"]);
    }

    #[test]
    fn layer_size_is_validated_naming_the_field() {
        let s = from_toml("argv = [\"true\"]\nlayers = [\"/var/tmp/l\"]\nlayer_size = \"2M\"").unwrap();
        assert_eq!(s.layer_size, Some(2 << 20));
        s.validate().unwrap();
        for (text, want) in [
            ("layers = [\"/var/tmp/l\"]\nlayer_size = 100", "at least 4096"),
            ("layer_size = \"1M\"", "give `layers`"),
            ("root = true\nlayers = [\"/var/tmp/l\"]\nlayer_size = \"1M\"", "fuse-overlayfs"),
        ] {
            let e = from_toml(&format!("argv = [\"true\"]\n{text}")).unwrap().validate().unwrap_err();
            assert_eq!(e.field, "layer_size", "{text}: {e}");
            assert!(e.message.contains(want), "{text}: {e}");
        }
        assert!(from_toml("argv = [\"true\"]\nlayer_size = \"12Q\"").unwrap_err().to_string().contains("layer_size"));
    }

    #[test]
    fn profile_round_trip() {
        let text = r#"
            argv = ["sh", "-c", "echo hi"]
            hostname = "judge"
            empty_root = true
            [env]
            LANG = "C"
            [limits]
            wall_time = "1.5s"
            output_limit = "1M"
            pids = 4
            [[mounts]]
            type = "ro-bind"
            src = "/usr"
            dst = "/usr"
            [[mounts]]
            type = "tmpfs"
            dst = "/tmp"
            size = "16M"
            noexec = true
        "#;
        let s = from_toml(text).unwrap();
        s.validate().unwrap();
        assert_eq!(s.limits.wall_time, Some(Duration::from_millis(1500)));
        assert_eq!(s.limits.output_limit, Some(1 << 20));
        assert_eq!(s.mounts.len(), 2);
        let back: RunSpec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn unknown_field_is_named() {
        let e = from_toml("argv = [\"x\"]\nwal_time = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("wal_time"), "{e}");
        let e = from_toml("[limits]\nwall_time = \"soon\"\n").unwrap_err();
        assert!(e.to_string().contains("soon"), "{e}");
        assert!(e.to_string().contains("limits.wall_time"), "{e}");
        let e = from_toml("[limits]\nopen_files = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("limits.open_files (line 2)"), "{e}");
    }

    #[test]
    fn ports() {
        assert_eq!(parse_ports("none"), Ok(vec![]));
        assert_eq!(parse_ports("80, 443,80"), Ok(vec![80, 443]));
        assert_eq!(parse_ports("0"), Ok(vec![0]));
        for bad in ["", "x", "65536", "-1", "80,,443", "1-3"] {
            let e = parse_ports(bad).unwrap_err();
            assert!(e.contains("not a TCP port"), "{bad}: {e}");
        }
        let s = from_toml("argv = [\"x\"]\ntcp_connect = [80, 443]\ntcp_bind = []\n").unwrap();
        assert_eq!((s.tcp_connect, s.tcp_bind), (Some(vec![80, 443]), Some(vec![])));
        let s: RunSpec = serde_json::from_str(r#"{"argv": ["x"]}"#).unwrap();
        assert_eq!((s.tcp_connect, s.tcp_bind), (None, None));
        let e = from_toml("argv = [\"x\"]\ntcp_bind = [70000]\n").unwrap_err();
        assert!(e.to_string().contains("tcp_bind"), "{e}");
        let mut s = RunSpec::new(["/bin/true"]);
        s.tcp_connect = Some((0..=MAX_PORTS as u16).collect());
        assert_eq!(s.validate().unwrap_err().field, "tcp_connect");
    }

    #[test]
    fn filesystem_rules() {
        // Absent: no rules, the secrets hidden; the same from JSON.
        let s = from_toml("argv = [\"x\"]\n").unwrap();
        assert_eq!(s.filesystem, Filesystem::default());
        assert!(s.filesystem.hide_secrets);
        let s = from_toml("argv = [\"x\"]\n[filesystem]\nallow = [\"~/.ssh\"]\nhide = [\"~\", \"/srv/x\"]\n").unwrap();
        s.validate().unwrap();
        assert!(s.filesystem.hide_secrets, "a [filesystem] table keeps the default");
        assert_eq!(s.filesystem.hide, vec![PathBuf::from("~"), PathBuf::from("/srv/x")]);
        let j: RunSpec =
            serde_json::from_str(r#"{"argv": ["x"], "filesystem": {"hide_secrets": false, "writable": ["/w"]}}"#)
                .unwrap();
        assert!(!j.filesystem.hide_secrets);
        assert_eq!(j.filesystem.writable, vec![PathBuf::from("/w")]);
        let e = from_toml("[filesystem]\nread-only = [\"/x\"]\n").unwrap_err();
        assert!(e.to_string().contains("filesystem.read-only") && e.to_string().contains("read_only"), "{e}");
        // Each bad path, named by its field.
        for (bad, says) in [
            ("rel/x", "absolute"),
            ("./x", "absolute"),
            ("~bob/x", "another user's home"),
            ("~bob", "another user's home"),
            ("/a/../b", "`..`"),
            ("~/../x", "`..`"),
            ("/", "root itself"),
            ("//.", "root itself"),
            ("", "empty"),
            ("/a\0b", "NUL"),
        ] {
            let mut s = RunSpec::new(["/bin/true"]);
            s.filesystem.read_only = vec!["/ok".into(), bad.into()];
            let e = s.validate().unwrap_err();
            assert_eq!(e.field, "filesystem.read_only[1]", "{bad:?}: {e}");
            assert!(e.message.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn flags_override_the_profile_rules() {
        let mut profile = Filesystem {
            allow: vec!["/a".into()],
            hide: vec!["~/.ssh".into(), "/b/".into(), "/keep".into()],
            ..Default::default()
        };
        let cli = Filesystem {
            allow: vec!["~/.ssh".into()],
            writable: vec!["/b".into()],
            hide_secrets: true,
            ..Default::default()
        };
        profile.override_with(cli);
        assert_eq!(profile.allow, vec![PathBuf::from("/a"), "~/.ssh".into()]);
        assert_eq!(profile.hide, vec![PathBuf::from("/keep")]);
        assert_eq!(profile.writable, vec![PathBuf::from("/b")]);
        assert!(profile.hide_secrets);
        profile.override_with(Filesystem { hide_secrets: false, ..Default::default() });
        assert!(!profile.hide_secrets);
        profile.override_with(Filesystem::default());
        assert!(!profile.hide_secrets, "a profile's `hide_secrets = false` stays without --no-hide-secrets");
    }

    #[test]
    fn validation_names_the_field() {
        let mut s = RunSpec::new(["/bin/true"]);
        s.mounts.push(MountOp::Tmpfs { dst: "tmp".into(), size: None, noexec: false });
        assert_eq!(s.validate().unwrap_err().field, "mounts[0].dst");
        let mut s = RunSpec::new(["/bin/true"]);
        s.limits.open_files = Some(1);
        assert_eq!(s.validate().unwrap_err().field, "limits.open_files");
        s.limits.open_files = None;
        s.limits.inotify_watches = Some(1 << 31);
        assert_eq!(s.validate().unwrap_err().field, "limits.inotify_watches");
        let mut s = RunSpec::new(["/bin/true"]);
        s.root = true;
        s.uid = Some(5);
        assert_eq!(s.validate().unwrap_err().field, "root");
        assert_eq!(RunSpec::default().validate().unwrap_err().field, "argv");
        let mut s = RunSpec::new(["/bin/true"]);
        s.env.insert("A=B".into(), "x".into());
        assert!(s.validate().is_err());
        let mut s = RunSpec::new(["/bin/true"]);
        s.mounts.push(MountOp::Dir { dst: "/a/../b".into() });
        assert!(s.validate().is_err());
    }

    #[test]
    fn controlling_tty_needs_a_passed_stdin() {
        let mut s = from_toml("argv = [\"sh\"]\ncontrolling_tty = true\n").unwrap();
        assert!(s.controlling_tty);
        s.validate().unwrap();
        s.stdin = Some(Stdio::Path("/etc/hostname".into()));
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "controlling_tty", "{e}");
        assert!(e.to_string().contains("terminal"), "{e}");
        let s: RunSpec = serde_json::from_str(r#"{"argv": ["sh"]}"#).unwrap();
        assert!(!s.controlling_tty);
    }

    #[test]
    fn inherit_fds_are_distinct_and_above_the_streams() {
        let mut s: RunSpec = serde_json::from_str(r#"{"argv": ["sh"], "inherit_fds": [5, 3]}"#).unwrap();
        s.validate().unwrap();
        for (fds, what) in [(vec![2], "above 2"), (vec![5, 7, 5], "named twice"), (vec![-1], "above 2")] {
            s.inherit_fds = fds;
            let e = s.validate().unwrap_err();
            assert_eq!(e.field, "inherit_fds", "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
        s.inherit_fds = (3..3 + MAX_INHERIT_FDS as i32 + 1).collect();
        assert!(s.validate().unwrap_err().to_string().contains("at most"));
        s.inherit_fds.pop();
        s.validate().unwrap();
    }
}
