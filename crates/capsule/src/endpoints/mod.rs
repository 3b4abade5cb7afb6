//! What a supervisor serves, and how each kind of client reaches it: the
//! one-shot `capsule run` ([`once`]), the per-user agent ([`agent`]),
//! `capsule serve` ([`serve`]). Each starts a supervisor with its [`Job`],
//! which crosses the supervisor's re-execution and is served by it.
//!
//! May import `supervisor` and everything below it; the library only
//! re-exports it (the front ends call it). Runs in the client's process (`capsule run` sending its
//! request, `capsule agent status|stop`) and in the supervisor's it forks
//! (the agent's and `serve`'s set-up, then the supervisor itself).

pub mod agent;
pub mod once;
pub mod per_cpu;
pub mod serve;

use std::os::fd::RawFd;
use std::path::PathBuf;

use crate::error::Error;
use crate::proto::config::Config;
use crate::proto::result::EXIT_CAPSULE_ERROR;
use crate::supervisor::{Planner, Supervisor, RESUME_ARG};
use crate::sys;

/// What a supervisor process serves. It crosses the supervisor's
/// re-execution into its user namespace (see [`Supervisor::start`]) as
/// descriptor numbers, which stay open across it.
#[derive(serde::Serialize, serde::Deserialize)]
pub enum Job {
    /// The library's protocol on one socket: one request (`once`, the
    /// one-shot `capsule run`) or until the client hangs up.
    Socket { sock: RawFd, once: bool },
    /// A per-user agent ([`agent`]).
    Agent(agent::AgentJob),
    /// `capsule serve`: JSON lines on stdin/stdout, or on the connections
    /// to a listening socket (its descriptor and path) with the pid of a
    /// process of the caller's (its peers must look like it; 0 without).
    Lines { listener: Option<(RawFd, PathBuf)>, witness: i32 },
}

impl Job {
    fn fds(&self) -> Vec<RawFd> {
        match self {
            Job::Socket { sock, .. } => vec![*sock],
            Job::Agent(a) => a.fds(),
            Job::Lines { listener, .. } => listener.iter().map(|(fd, _)| *fd).collect(),
        }
    }

    /// Serves with the started supervisor, or reports why it did not
    /// start; never returns.
    fn run(self, started: Result<Supervisor, Error>, planner: Option<Planner>) -> ! {
        match self {
            // SAFETY: the socket crossed the re-execution open (`Job`) and is taken here once.
            Job::Socket { sock, once } => once::socket_job(unsafe { sys::reclaim_fd(sock) }, once, started),
            Job::Agent(a) => agent::agent_job(a, started, planner),
            Job::Lines { listener, witness } => serve::lines_job(listener, witness, started),
        }
    }
}

/// Turns the calling process into a supervisor serving `job`; never
/// returns. A failure to start is reported the way `job` reports one.
pub fn start(config: &Config, job: Job) -> ! {
    let value = serde_json::to_value(&job).expect("serializable");
    let e = Supervisor::start(config, &value, &job.fds());
    job.run(Err(e), None)
}

/// `capsule --resume-supervisor FD`: the re-executed supervisor finishes
/// its set-up and serves its job; an agent plans the front end's command
/// lines with `planner`. Never returns.
pub fn resume_main(fd: &str, planner: Option<Planner>) -> ! {
    let (job, started) = crate::supervisor::resume(fd);
    let Ok(job) = serde_json::from_value::<Job>(job) else {
        eprintln!("capsule: error: {RESUME_ARG} is internal: a supervisor re-executes itself with it");
        sys::exit(EXIT_CAPSULE_ERROR)
    };
    job.run(started, planner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job crosses the re-execution as JSON and names its descriptors.
    #[test]
    fn jobs_round_trip() {
        let job = Job::Lines { listener: Some((9, PathBuf::from("/run/x.sock"))), witness: 12 };
        let back: Job = serde_json::from_value(serde_json::to_value(&job).unwrap()).unwrap();
        assert_eq!(back.fds(), vec![9]);
        assert!(
            matches!(back, Job::Lines { listener: Some((9, ref p)), witness: 12 } if p == std::path::Path::new("/run/x.sock"))
        );
        assert_eq!(Job::Socket { sock: 4, once: true }.fds(), vec![4]);
    }
}
