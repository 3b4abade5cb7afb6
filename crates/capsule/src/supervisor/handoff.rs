//! The supervisor's re-execution inside its user namespace: what crosses it (`Prelude`, the endpoint's job) and how it resumes.

use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};

use serde_json::Value;

use crate::error::{Error, SysError};
use crate::host::cgroups::{self};
use crate::proto::config::Config;
use crate::sys::{self};

use super::*;

/// What a supervisor set up as the caller, before its re-execution.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Prelude {
    pub(crate) config: Config,
    pub(crate) host_uid: u32,
    pub(crate) host_gid: u32,
    pub(crate) home: crate::host::fsrules::Homes,
    pub(crate) cgroups: Option<cgroups::InstanceState>,
    pub(crate) cgroup_note: String,
    pub(crate) self_pidfd: RawFd,
}

/// The re-executed supervisor's first argument; the second is the
/// descriptor of its [`Prelude`] and its endpoint's job (JSON in a memfd).
pub const RESUME_ARG: &str = "--resume-supervisor";

/// Re-executes the supervisor (already in its user namespace) as
/// `capsule --resume-supervisor FD`; returns only on failure.
pub(crate) fn reexec(prelude: &Prelude, job: &Value, fds: &[RawFd]) -> Error {
    let data = serde_json::to_vec(&HandoffRef { prelude, job, fds }).expect("serializable");
    let fail = |what: &str, e: i32| Error::Sys(SysError::new(what, e));
    let memfd = match sys::memfd(c"capsule-handoff") {
        Ok(fd) => fd,
        Err(e) => return fail("memfd_create", e),
    };
    if let Err(e) = sys::write_all(memfd.as_raw_fd(), &data) {
        return fail("write (handoff)", e);
    }
    let passed: Vec<RawFd> = fds.iter().copied().chain([prelude.self_pidfd, memfd.as_raw_fd()]).collect();
    for &fd in &passed {
        let _ = sys::set_cloexec(fd, false);
    }
    let c = |s: &str| CString::new(s).expect("no NUL");
    let args = [c("capsule"), c(RESUME_ARG), c(&memfd.as_raw_fd().to_string())];
    use std::os::unix::ffi::OsStringExt;
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect();
    let ptrs = |v: &[CString]| v.iter().map(|s| s.as_ptr()).chain([std::ptr::null()]).collect::<Vec<_>>();
    // SAFETY: `ptrs` points at the live CStrings of `args` and `env` and ends with null.
    let e = unsafe { sys::execve(c"/proc/self/exe", &ptrs(&args), &ptrs(&env)) };
    for &fd in &passed {
        let _ = sys::set_cloexec(fd, true);
    }
    Error::Sys(SysError::new("execve", e).path("/proc/self/exe"))
}

/// `capsule --resume-supervisor FD`: a supervisor re-executed by
/// [`Supervisor::start`] finishes its set-up; returns the endpoint's job
/// (which serves with it, or reports why it did not start). Exits on a
/// handoff it cannot read.
pub fn resume(fd: &str) -> (Value, Result<Supervisor, Error>) {
    use std::io::{Read, Seek};
    let handoff = fd.parse::<RawFd>().ok().filter(|&fd| sys::fd_mode(fd).is_ok()).and_then(|fd| {
        // SAFETY: the re-executing supervisor passed its handoff memfd as `fd`; nothing else here owns it.
        let mut file = std::fs::File::from(unsafe { sys::reclaim_fd(fd) });
        let mut data = Vec::new();
        file.rewind().and_then(|()| file.read_to_end(&mut data)).ok()?;
        serde_json::from_slice::<Handoff>(&data).ok()
    });
    let Some(h) = handoff else {
        eprintln!("capsule: error: {RESUME_ARG} is internal: a supervisor re-executes itself with it");
        sys::exit(crate::proto::result::EXIT_CAPSULE_ERROR)
    };
    for fd in h.fds.iter().copied().chain([h.prelude.self_pidfd]) {
        let _ = sys::set_cloexec(fd, true);
    }
    // execve named it after the path it ran (`exe`).
    sys::set_comm(c"capsule");
    // PID 1 and the tracee share this memory and must never panic; if one
    // did anyway, its unwinding would run in the supervisor's heap and
    // thread-local state. The hook ends such a process on the spot.
    let me = sys::getpid();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if sys::getpid() != me {
            sys::exit(crate::proto::result::EXIT_CAPSULE_ERROR);
        }
        default_hook(info)
    }));
    let started = Supervisor::finish(h.prelude);
    (h.job, started)
}

/// What [`reexec`] writes; read back as a [`Handoff`].
#[derive(serde::Serialize)]
pub(crate) struct HandoffRef<'a> {
    pub(crate) prelude: &'a Prelude,
    pub(crate) job: &'a Value,
    pub(crate) fds: &'a [RawFd],
}

#[derive(serde::Deserialize)]
pub(crate) struct Handoff {
    pub(crate) prelude: Prelude,
    pub(crate) job: Value,
    pub(crate) fds: Vec<RawFd>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What crosses the re-execution comes back whole: the JSON written
    /// from borrowed parts reads back as the owned handoff.
    #[test]
    fn handoff_round_trips() {
        let config = Config { parallel: 3, ..Config::default() };
        let prelude = Prelude {
            config,
            host_uid: 1000,
            host_gid: 1001,
            home: crate::host::fsrules::Homes {
                home: Some(PathBuf::from("/home/u")),
                passwd: Some(PathBuf::from("/home/p")),
            },
            cgroups: None,
            cgroup_note: "none here".into(),
            self_pidfd: 7,
        };
        let job = serde_json::json!({"lines": {"witness": 12}});
        let data = serde_json::to_vec(&HandoffRef { prelude: &prelude, job: &job, fds: &[9] }).unwrap();
        let h: Handoff = serde_json::from_slice(&data).unwrap();
        assert_eq!(h.prelude.config.parallel, 3);
        assert_eq!((h.prelude.host_uid, h.prelude.host_gid, h.prelude.self_pidfd), (1000, 1001, 7));
        assert_eq!(h.prelude.home.home.as_deref(), Some(Path::new("/home/u")));
        assert_eq!(h.prelude.home.passwd.as_deref(), Some(Path::new("/home/p")));
        assert_eq!(h.prelude.cgroup_note, "none here");
        assert_eq!(h.fds, vec![9]);
        assert_eq!(h.job, job);
    }
}
