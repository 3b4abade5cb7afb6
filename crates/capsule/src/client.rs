//! The one-shot client: forks a supervisor of its own, sends it one
//! request over the supervisor protocol and returns the result.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::{Error, SysError};
use crate::proto::{self, Request, Response};
use crate::result::RunResult;
use crate::spec::RunSpec;
use crate::supervisor::{self, Supervisor};
use crate::sys::{self, Forked};

/// Runs `spec` once with `stdio` (stdin, stdout, stderr of the program) in
/// a supervisor forked for it. The caller must be single-threaded.
pub fn run_once(spec: &RunSpec, stdio: [RawFd; 3]) -> Result<RunResult, Error> {
    spec.validate()?;
    if supervisor::is_real_root() {
        return Err(supervisor::root_refusal());
    }
    let (client, server) = sys::socketpair_stream().map_err(|e| SysError::new("socketpair", e))?;
    let parent = sys::getpid();
    let pid = match sys::fork().map_err(|e| SysError::new("clone3 (supervisor)", e))? {
        Forked::Child => {
            drop(client);
            supervisor_main(parent, server, &spec.cgroup)
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop(server);
    let outcome = exchange(&client, spec, stdio);
    drop(client);
    // The supervisor exits when the socket closes.
    let _ = sys::waitpid(pid, false);
    outcome
}

fn exchange(sock: &OwnedFd, spec: &RunSpec, stdio: [RawFd; 3]) -> Result<RunResult, Error> {
    // A supervisor that cannot start answers at once and exits, so the
    // request may meet a closed socket: its answer is still there to read.
    let sent = proto::send_owned(sock, &Request { spec: spec.clone() }, &stdio);
    let answer = proto::recv::<Response>(sock.as_raw_fd());
    if let (Err(e), Err(_) | Ok(None)) = (&sent, &answer) {
        return Err(Error::Supervisor(e.clone()));
    }
    match answer.map_err(Error::Supervisor)? {
        Some((Response::Result(r), _)) => Ok(r),
        Some((Response::Fatal(msg), _)) => Err(Error::Setup(msg)),
        None => Err(Error::Supervisor("the supervisor exited without answering".into())),
    }
}

/// The forked supervisor's life: never returns.
fn supervisor_main(parent: i32, sock: OwnedFd, cgroup: &crate::cgroups::CgroupConfig) -> ! {
    // Die with the client (the thread that forked us is its only thread).
    let _ = sys::set_pdeathsig(libc::SIGKILL);
    if sys::getppid() != parent {
        sys::exit(1);
    }
    // Keep nothing of the caller but the socket and stderr: the caller's
    // other descriptors, CLOEXEC or not, must not reach any run, and 0-2
    // must stay occupied so received descriptors land above them.
    let raw = std::os::fd::IntoRawFd::into_raw_fd(sock);
    if raw != 3 {
        let _ = sys::dup2(raw, 3);
        sys::close(raw);
    }
    let _ = sys::set_cloexec(3, true);
    let sock = sys::reclaim_fd(3);
    let _ = sys::close_from(4);
    if let Ok(null) = sys::open(c"/dev/null", libc::O_RDWR, 0) {
        for fd in 0..3 {
            if fd != 2 || sys::fd_mode(2).is_err() {
                let _ = sys::dup2(null.as_raw_fd(), fd);
            }
        }
    }
    let code = match Supervisor::start(cgroup) {
        Ok(sup) => {
            let code = match sup.serve(&sock, Some(1)) {
                Ok(()) => 0,
                Err(_) => 1,
            };
            // Removes the cgroups it made (no destructors run past exit).
            drop(sup);
            code
        }
        Err(e) => {
            // Answer the pending request with the reason.
            let _ = proto::send_owned(&sock, &Response::Fatal(e.to_string()), &[]);
            1
        }
    };
    sys::exit(code)
}
