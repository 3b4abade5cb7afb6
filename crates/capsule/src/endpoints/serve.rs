//! `capsule serve`: a supervisor speaking JSON lines (docs/protocol.md) on
//! stdin/stdout or on a listening socket; the codec is [`crate::proto::lines`].

/// `capsule serve`: a supervisor answering JSON lines on stdin/stdout, or
/// on connections to a Unix socket at `listen` (mode 0600). Exits the
/// process (status 0) when stdin ends and its runs are answered, or on
/// SIGTERM/SIGINT/SIGHUP for a socket server; returns only an error found
/// before the supervisor starts.
pub fn run_server(config: &crate::proto::config::Config, listen: Option<&std::path::Path>) -> Result<(), crate::Error> {
    use std::os::fd::OwnedFd;

    config.validate()?;
    if config.per_cpu {
        return super::per_cpu::run_per_cpu(config, listen);
    }
    // The socket is made as the caller, before entering the namespaces.
    let listener: Option<(OwnedFd, std::path::PathBuf)> = match listen {
        None => None,
        Some(path) => Some((bind_socket(path)?, path.to_path_buf())),
    };
    // Its peers are checked against a process like the caller, seen from
    // inside the supervisor's user namespace (`peer_fingerprint`): a child
    // that stays out of it until the server has looked.
    let witness = match listener {
        Some(_) => witness()?,
        None => 0,
    };
    let listener = listener.map(|(fd, path)| (std::os::fd::IntoRawFd::into_raw_fd(fd), path));
    super::start(config, super::Job::Lines { listener, witness })
}

/// A child that waits to be killed (or dies with its parent): the caller
/// as `serve --listen`'s peers should look, for [`lines_job`].
fn witness() -> Result<i32, crate::Error> {
    use crate::sys::{self, Forked};
    let parent = sys::getpid();
    // SAFETY: the child makes async-signal-safe calls only (prctl, getppid, nanosleep, exit).
    match unsafe { sys::fork() } {
        Ok(Forked::Child) => {
            let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as u64);
            if sys::getppid() != parent {
                sys::exit(0);
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        Ok(Forked::Parent { pid, .. }) => Ok(pid),
        Err(e) => Err(crate::error::SysError::new("fork", e).into()),
    }
}

/// [`run_server`]'s supervisor, started (or not): serves, or says why it
/// did not start. Exits the process (0 once served).
pub(crate) fn lines_job(
    listener: Option<(std::os::fd::RawFd, std::path::PathBuf)>,
    witness: i32,
    started: Result<crate::supervisor::Supervisor, crate::Error>,
) -> ! {
    use crate::error::SysError;
    use crate::supervisor::{Conn, Mode};
    use crate::sys;
    use std::os::fd::AsRawFd;

    // SAFETY: the listener crossed the re-execution open (`Job::Lines`) and is taken here once.
    let listener = listener.map(|(fd, path)| (unsafe { sys::reclaim_fd(fd) }, path));
    let socket_path = listener.as_ref().map(|(_, p)| p.clone());
    // What a peer of the listener must look like, read from the witness
    // (still there: it waits for this), which then goes.
    let peer = (witness > 0).then(|| crate::host::identity::peer_fingerprint(witness));
    if witness > 0 {
        let _ = sys::kill(witness, libc::SIGKILL);
        let _ = sys::waitpid(witness, false);
    }
    let served = started.and_then(|sup| {
        let conns = match &listener {
            Some(_) => Vec::new(),
            None => {
                // The protocol streams move above 2; 0 and 1 become /dev/null,
                // so nothing a run inherits by accident reaches the protocol.
                let input = sys::dup_cloexec(0).map_err(|e| SysError::new("dup (stdin)", e))?;
                let output = sys::dup_cloexec(1).map_err(|e| SysError::new("dup (stdout)", e))?;
                let null =
                    sys::open(c"/dev/null", libc::O_RDWR, 0).map_err(|e| SysError::new("open", e).path("/dev/null"))?;
                for fd in [0, 1] {
                    sys::dup2(null.as_raw_fd(), fd).map_err(|e| SysError::new("dup2", e))?;
                }
                vec![Conn::lines_stdio(input, output)]
            }
        };
        let mode = match peer {
            None => Mode::Serve,
            Some(Some(peer)) => Mode::Listen { peer },
            Some(None) => return Err(crate::error::SetupError::NoPeerIdentity(witness.to_string()).into()),
        };
        sup.serve(conns, listener.map(|(fd, _)| fd), mode);
        Ok(())
    });
    if let Some(p) = socket_path {
        let _ = std::fs::remove_file(p);
    }
    match served {
        Ok(()) => sys::exit(0),
        Err(e) => {
            eprintln!("capsule: error: {e}");
            sys::exit(crate::proto::result::EXIT_CAPSULE_ERROR)
        }
    }
}

/// Binds a listening Unix socket at `path`, mode 0600. A stale socket
/// (nobody listening) is replaced; anything else there is an error.
pub(super) fn bind_socket(path: &std::path::Path) -> Result<std::os::fd::OwnedFd, crate::Error> {
    use crate::error::SysError;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    use std::os::unix::net::{UnixListener, UnixStream};
    let err = |call: &str, e: std::io::Error| {
        crate::Error::Sys(SysError::new(call, e.raw_os_error().unwrap_or(libc::EIO)).path(path.display().to_string()))
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let stale = meta.file_type().is_socket()
            && matches!(UnixStream::connect(path), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused);
        if !stale {
            let what =
                if meta.file_type().is_socket() { " and a server is listening there" } else { " and is not a socket" };
            return Err(crate::error::Refused::ListenPathTaken { path: path.display().to_string(), what }.into());
        }
        std::fs::remove_file(path).map_err(|e| err("unlink", e))?;
    }
    // Created 0600 from the start (umask), so no other user can connect in
    // between.
    let old = crate::sys::umask(0o177);
    let bound = UnixListener::bind(path);
    crate::sys::umask(old);
    let listener = bound.map_err(|e| err("bind", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| err("chmod", e))?;
    Ok(listener.into())
}
