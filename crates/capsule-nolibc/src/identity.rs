//! The identity of a caller of the agent: what a run inherits from the
//! supervisor that makes it. Two callers with the same identity get the
//! same runs from a supervisor forked by either, so one agent may serve
//! both (the library's `agent` module says why each item is there).
//!
//! Written as text into a [`Sink`]: [`Fnv`] hashes it into the agent's
//! key; `capsule agent key --identity` prints it. The front end and the
//! library call the same [`write`], so they find the same agent.

use core::ffi::CStr;
use core::fmt::{self, Write as _};

use crate::sys;

/// Where the identity's text goes.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Two FNV-1a hashes of the text (128 bits). Not SHA-256: its CPU feature
/// detection (CPUID, a VM exit each under a hypervisor) cost every
/// `capsule run` ~20 µs here, and the key only has to tell apart the
/// identities of one user's own callers, who choose none of the bytes.
pub struct Fnv([u64; 2]);

impl Default for Fnv {
    fn default() -> Self {
        Fnv([0xcbf2_9ce4_8422_2325, 0x6c62_272e_07bb_0142])
    }
}

impl Sink for Fnv {
    fn put(&mut self, bytes: &[u8]) {
        for h in &mut self.0 {
            for b in bytes {
                *h = (*h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
}

impl Fnv {
    /// The key: 32 lowercase hex digits.
    pub fn key(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, h) in self.0.iter().enumerate() {
            for k in 0..16 {
                let nibble = (h >> (60 - 4 * k)) & 0xf;
                out[16 * i + k] = b"0123456789abcdef"[nibble as usize];
            }
        }
        out
    }
}

struct Text<'a, S: Sink>(&'a mut S);

impl<S: Sink> fmt::Write for Text<'_, S> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.put(s.as_bytes());
        Ok(())
    }
}

/// Splits an environment entry as std does: the key is everything before
/// the first `=` after the first byte; None without one.
pub fn split_env(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let pos = entry.iter().skip(1).position(|&b| b == b'=')? + 1;
    Some((&entry[..pos], &entry[pos + 1..]))
}

/// The environment variables the supervisor itself reads (and so the
/// identity covers): `HOME`, `PATH`, `XDG_RUNTIME_DIR` and `CAPSULE_*`
/// but `CAPSULE_AGENT`, which only chooses whether to use an agent.
pub fn covers_env(key: &[u8]) -> bool {
    matches!(key, b"HOME" | b"PATH" | b"XDG_RUNTIME_DIR") || (key.starts_with(b"CAPSULE_") && key != b"CAPSULE_AGENT")
}

/// The JSON of the agent configuration of a `capsule run` without cgroup
/// options (`capsule::endpoints::agent::default_config`, checked by its test): the
/// front end serves only those.
pub const DEFAULT_CONFIG: &str = r#"{"parallel":64,"cgroup":{"path":null,"require":false,"disable":false},"prepare_ahead":true,"own_network":true,"fresh_network":false}"#;

/// The cgroup `capsule::host::cgroups` moves a delegated cgroup's processes
/// into before it enables controllers there ("no internal processes").
pub const CGROUP_LEAF: &str = "capsule-leaf";

/// A line of `/proc/self/cgroup` as the identity covers it: `0::B/capsule-leaf`
/// as `0::B`, since a supervisor forked in either takes B as its base and the
/// first run moves its caller from B into the leaf (docs/agent.md says why no
/// run can use this to pass as its caller).
pub fn cgroup_line(line: &[u8]) -> &[u8] {
    let Some(path) = line.strip_prefix(b"0::") else { return line };
    let Some(parent) = path.strip_suffix(CGROUP_LEAF.as_bytes()) else { return line };
    match parent {
        b"/" => b"0::/",
        _ if parent.ends_with(b"/") => &line[..3 + parent.len() - 1],
        _ => line,
    }
}

/// Most environment variables covered; more are a sign of a caller
/// nobody shares an agent with, and go in unsorted.
const MAX_ENV: usize = 64;

/// Writes the calling process's identity for the `capsule` binary `exe`
/// (the full command-line tool, whose code the agent runs), with
/// environment `env` (key, value pairs, in order) and the agent's
/// configuration `config` (JSON). Single-threaded callers only: the umask
/// is read by setting it and back.
pub fn write<'e, S: Sink>(sink: &mut S, exe: &CStr, env: impl Iterator<Item = (&'e [u8], &'e [u8])>, config: &str) {
    let mut t = Text(sink);
    let _ = writeln!(t, "capsule {}", env!("CARGO_PKG_VERSION"));
    // The binary itself: an agent of an older capsule serves no one new.
    match sys::stat(exe, 0) {
        Ok(s) => {
            let _ = writeln!(t, "exe {} {} {} {}.{}", s.dev, s.ino, s.size, s.mtime, s.mtime_nsec);
        }
        Err(_) => {
            let _ = writeln!(t, "exe ?");
        }
    }
    let mut buf = [0u8; 256];
    for (ns, path) in [
        ("user", c"/proc/self/ns/user"),
        ("mnt", c"/proc/self/ns/mnt"),
        ("net", c"/proc/self/ns/net"),
        ("pid", c"/proc/self/ns/pid"),
        ("ipc", c"/proc/self/ns/ipc"),
        ("uts", c"/proc/self/ns/uts"),
        ("cgroup", c"/proc/self/ns/cgroup"),
        ("time", c"/proc/self/ns/time"),
    ] {
        let _ = write!(t, "ns {ns} ");
        t.0.put(sys::readlink(path, &mut buf).unwrap_or(b"?"));
        t.0.put(b"\n");
    }
    match sys::stat(c"/", 0) {
        Ok(s) => {
            let _ = writeln!(t, "root {} {}", s.dev, s.ino);
        }
        Err(_) => {
            let _ = writeln!(t, "root ?");
        }
    }
    // Ids, groups, umask, limits, scheduling, CPUs, no_new_privs, seccomp
    // mode, securebits, timer slack, personality. (Not the capabilities:
    // the supervisor's user namespace gives it a full set whatever the
    // caller had, and runs drop them all.)
    let _ = writeln!(t, "uids {:?}", sys::getresuid());
    let _ = writeln!(t, "gids {:?}", sys::getresgid());
    let mut groups = [0u32; 1024];
    let _ = writeln!(t, "groups {:?}", sys::getgroups(&mut groups));
    let mask = sys::umask(0o022);
    sys::umask(mask);
    let _ = writeln!(t, "umask {mask:o}");
    // RLIMIT_CPU (0) to RLIMIT_RTTIME (15), every limit Linux has.
    for res in 0..16 {
        let (soft, hard) = sys::getrlimit(res);
        let _ = writeln!(t, "rlimit {res} {soft} {hard}");
    }
    let _ = writeln!(
        t,
        "priority {} policy {} rt {} ioprio {}",
        sys::getpriority(),
        sys::sched_getscheduler(),
        sys::sched_getparam(),
        sys::ioprio_get()
    );
    let _ = writeln!(t, "affinity {:x?}", sys::sched_getaffinity());
    const PR_GET_SECCOMP: usize = 21;
    const PR_GET_SECUREBITS: usize = 27;
    const PR_GET_TIMERSLACK: usize = 30;
    const PR_GET_NO_NEW_PRIVS: usize = 39;
    let seccomp = sys::prctl_get(PR_GET_SECCOMP);
    let _ = writeln!(
        t,
        "no_new_privs {} seccomp {seccomp} securebits {} timerslack {} personality {}",
        sys::prctl_get(PR_GET_NO_NEW_PRIVS),
        sys::prctl_get(PR_GET_SECUREBITS),
        sys::prctl_get(PR_GET_TIMERSLACK),
        sys::personality()
    );
    let mut big = [0u8; 8192];
    if seccomp != 0 {
        // Which filters, as far as the status file tells.
        let status = sys::read_file(c"/proc/self/status", &mut big).unwrap_or(b"");
        for line in status.split(|&b| b == b'\n').filter(|l| l.starts_with(b"Seccomp")) {
            t.0.put(line);
            t.0.put(b"\n");
        }
    }
    let _ = write!(t, "cgroup ");
    for line in sys::read_file(c"/proc/self/cgroup", &mut big).unwrap_or(b"?").split_inclusive(|&b| b == b'\n') {
        let (body, end) = match line.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (line, &b""[..]),
        };
        t.0.put(cgroup_line(body));
        t.0.put(end);
    }
    t.0.put(b"\n");
    for (name, path) in [("oom_score_adj", c"/proc/self/oom_score_adj"), ("lsm", c"/proc/self/attr/current")] {
        let _ = write!(t, "{name} ");
        t.0.put(sys::read_file(path, &mut big).unwrap_or(b"?"));
        t.0.put(b"\n");
    }
    // The environment the supervisor itself reads, sorted.
    let mut vars: [(&[u8], &[u8]); MAX_ENV] = [(b"", b""); MAX_ENV];
    let mut n = 0;
    for (k, v) in env.filter(|(k, _)| covers_env(k)) {
        if n < MAX_ENV {
            vars[n] = (k, v);
            n += 1;
        } else {
            t.0.put(b"env+ ");
            t.0.put(k);
            t.0.put(b"=");
            t.0.put(v);
            t.0.put(b"\n");
        }
    }
    vars[..n].sort_unstable();
    for (k, v) in &vars[..n] {
        t.0.put(b"env ");
        t.0.put(k);
        t.0.put(b"=");
        t.0.put(v);
        t.0.put(b"\n");
    }
    let _ = writeln!(t, "config {config}");
}

/// Whether `$XDG_RUNTIME_DIR` (`len` bytes) leaves room for an agent's
/// socket path, `DIR/capsule/agent-KEY.sock`, in a `sockaddr_un` (107
/// bytes and a NUL); a longer one makes the agents use
/// `/tmp/capsule-agent-UID`, as a missing one does.
pub const fn runtime_dir_fits(len: usize) -> bool {
    len + "/capsule/agent-".len() + 32 + ".sock".len() <= 107
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect([u8; 16384], usize);
    impl Sink for Collect {
        fn put(&mut self, bytes: &[u8]) {
            self.0[self.1..self.1 + bytes.len()].copy_from_slice(bytes);
            self.1 += bytes.len();
        }
    }

    #[test]
    fn env_entries_split_like_std() {
        assert_eq!(split_env(b"A=b=c"), Some((&b"A"[..], &b"b=c"[..])));
        assert_eq!(split_env(b"=A=b"), Some((&b"=A"[..], &b"b"[..])));
        assert_eq!(split_env(b"A="), Some((&b"A"[..], &b""[..])));
        assert_eq!(split_env(b"AB"), None);
        assert_eq!(split_env(b""), None);
    }

    #[test]
    fn covered_variables() {
        assert!(covers_env(b"HOME") && covers_env(b"PATH") && covers_env(b"CAPSULE_AGENT_IDLE"));
        assert!(!covers_env(b"CAPSULE_AGENT") && !covers_env(b"TERM") && !covers_env(b"HOMEX"));
    }

    #[test]
    fn the_leaf_is_its_parent() {
        assert_eq!(cgroup_line(b"0::/user.slice/x.scope/capsule-leaf"), b"0::/user.slice/x.scope");
        assert_eq!(cgroup_line(b"0::/capsule-leaf"), b"0::/");
        for same in [
            &b"0::/a/capsule-leaf/b"[..],
            b"0::/a/my-capsule-leaf",
            b"0::capsule-leaf",
            b"0::/a",
            b"0::/",
            b"1:name=systemd:/a/capsule-leaf",
            b"",
        ] {
            assert_eq!(cgroup_line(same), same);
        }
    }

    #[test]
    fn text_and_key_follow_what_is_covered() {
        let env1: [(&[u8], &[u8]); 3] = [(b"PATH", b"/bin"), (b"TERM", b"xterm"), (b"HOME", b"/h")];
        let env2: [(&[u8], &[u8]); 2] = [(b"HOME", b"/h"), (b"PATH", b"/bin")];
        let env3: [(&[u8], &[u8]); 2] = [(b"HOME", b"/other"), (b"PATH", b"/bin")];
        let key = |env: &[(&'static [u8], &'static [u8])], config: &str| {
            let mut f = Fnv::default();
            write(&mut f, c"/proc/self/exe", env.iter().copied(), config);
            f.key()
        };
        // Order and uncovered variables do not count; covered ones and the
        // configuration do.
        assert_eq!(key(&env1, "{}"), key(&env2, "{}"));
        assert_ne!(key(&env2, "{}"), key(&env3, "{}"));
        assert_ne!(key(&env2, "{}"), key(&env2, "{\"a\":1}"));
        let mut c = Collect([0; 16384], 0);
        write(&mut c, c"/proc/self/exe", env1.iter().copied(), "{}");
        let text = core::str::from_utf8(&c.0[..c.1]).unwrap();
        assert!(text.contains("\nenv HOME=/h\nenv PATH=/bin\nconfig {}\n"), "{text}");
        assert!(text.contains("\nns user user:["), "{text}");
        assert!(text.contains("\nrlimit 7 "), "{text}");
    }
}
