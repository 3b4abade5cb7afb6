//! From a run's result to a verdict (docs/judge.md, "Verdicts"): pure
//! functions of the results and the limits, so every rule is unit-tested.
//!
//! A failure of capsule itself (status `error`, a run killed by someone
//! else, an interactor that crashed) is `Err`: a judge error, never a
//! verdict for the solution.

use std::time::Duration;

use capsule::{InteractResult, RunResult, Side, Status};

/// A test's (or the whole judgement's) verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted.
    Ok,
    /// Wrong answer (the checker or the interactor said so).
    Wa,
    /// Time limit exceeded: CPU time over `--time`, or the wall-time limit.
    Tle,
    /// Memory limit exceeded.
    Mle,
    /// Runtime error: a non-zero exit or a signal.
    Re,
    /// Output limit exceeded.
    Ole,
    /// A system call the language's seccomp policy forbids.
    Sys,
    /// Compilation error (the whole judgement).
    Ce,
}

impl Verdict {
    pub fn code(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Wa => "WA",
            Verdict::Tle => "TLE",
            Verdict::Mle => "MLE",
            Verdict::Re => "RE",
            Verdict::Ole => "OLE",
            Verdict::Sys => "SYS",
            Verdict::Ce => "CE",
        }
    }
}

/// The limits a solution's run is judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `--time`: CPU time.
    pub time: Duration,
    /// The wall-time limit the run was given.
    pub wall: Duration,
    /// `--memory`.
    pub memory: u64,
    /// No cgroups: the memory limit is checked here, against the run's
    /// peak resident set (rusage), not enforced by the kernel.
    pub memory_by_peak: bool,
    /// `--output-limit`.
    pub output: u64,
}

/// A verdict and what it rests on (`killed by SIGSEGV`, the checker's
/// message).
pub type Judged = (Verdict, String);

/// What the solution's run says on its own: `Some` when it failed (the
/// output is then not checked), `None` when it exited with 0 within every
/// limit.
pub fn run_verdict(r: &RunResult, l: &Limits) -> Result<Option<Judged>, String> {
    let cpu_ms = r.cpu_user_ms + r.cpu_system_ms;
    let v = match r.status {
        Status::Error => return Err(r.error.clone().unwrap_or_else(|| "the run failed".into())),
        Status::Killed => return Err("the run was killed from outside the judge".into()),
        Status::ForbiddenSyscall => {
            let call = r.syscall.as_deref().unwrap_or("unknown");
            (Verdict::Sys, format!("forbidden system call {call}"))
        }
        Status::MemoryLimit => (Verdict::Mle, format!("memory limit {} hit", mib(l.memory))),
        Status::OutputLimit => (Verdict::Ole, format!("more than {} bytes of output", l.output)),
        Status::WallTimeLimit => (Verdict::Tle, format!("wall-time limit {} hit", secs(l.wall))),
        Status::CpuTimeLimit => (Verdict::Tle, format!("CPU-time limit {} hit", secs(l.time))),
        // Over the limit but not killed for it (the kill comes a few ms
        // after the limit is reached; a run may end meanwhile).
        _ if cpu_ms > l.time.as_secs_f64() * 1000.0 => {
            (Verdict::Tle, format!("CPU time {:.0} ms over the limit of {}", cpu_ms, secs(l.time)))
        }
        _ if l.memory_by_peak && r.peak_memory_bytes > l.memory => (
            Verdict::Mle,
            format!(
                "peak resident set {} over the limit of {} (checked after the run: no cgroups)",
                mib(r.peak_memory_bytes),
                mib(l.memory)
            ),
        ),
        Status::Signaled => (Verdict::Re, format!("killed by {}", r.signal.as_deref().unwrap_or("a signal"))),
        Status::Exited => match r.exit_code {
            Some(0) => return Ok(None),
            Some(c) => (Verdict::Re, format!("exit code {c}")),
            None => (Verdict::Re, "exited".into()),
        },
    };
    Ok(Some(v))
}

/// How a program that is not the solution ended, for messages.
pub fn ending(r: &RunResult) -> String {
    match r.status {
        Status::Exited => format!("exited with {}", r.exit_code.unwrap_or(-1)),
        Status::Signaled => format!("was killed by {}", r.signal.as_deref().unwrap_or("a signal")),
        Status::ForbiddenSyscall => {
            format!("made the forbidden system call {}", r.syscall.as_deref().unwrap_or("unknown"))
        }
        Status::Error => format!("failed: {}", r.error.as_deref().unwrap_or("unknown")),
        other => format!("was stopped: {}", other.as_str()),
    }
}

/// An interactive test (docs/judge.md, "Interactive problems"). If the
/// solution left the conversation first and not with exit code 0, its own
/// verdict (RE, TLE, MLE, OLE, SYS) stands, whatever the interactor then
/// did. Otherwise the interactor decides: 0 accepts, unless the solution
/// broke a limit of its own (TLE, MLE, OLE, SYS; not a SIGPIPE or a
/// non-zero exit after the interactor left); 1 or 2 is WA; anything else
/// is a judge error, except SIGPIPE after the solution left first, which
/// means the solution stopped talking too early: WA. `interactor_says`:
/// the interactor's message (its stderr), for the WA detail.
pub fn interactive_verdict(r: &InteractResult, l: &Limits, interactor_says: &str) -> Result<Judged, String> {
    let own = run_verdict(&r.solution, l)?;
    if r.first_to_exit == Side::Solution {
        if let Some(v) = own.clone() {
            return Ok(v);
        }
    }
    let said =
        |default: &str| if interactor_says.is_empty() { default.to_string() } else { interactor_says.to_string() };
    let int = &r.interactor;
    match (int.status, int.exit_code) {
        (Status::Exited, Some(0)) => match own {
            Some(v @ (Verdict::Tle | Verdict::Mle | Verdict::Ole | Verdict::Sys, _)) => Ok(v),
            _ => Ok((Verdict::Ok, String::new())),
        },
        (Status::Exited, Some(1 | 2)) => Ok((Verdict::Wa, said("the interactor rejected the answer"))),
        (Status::Signaled, _) if r.first_to_exit == Side::Solution && int.signal.as_deref() == Some("SIGPIPE") => {
            Ok((Verdict::Wa, "the solution left before the interactor was done (interactor: SIGPIPE)".into()))
        }
        _ => Err(format!(
            "the interactor {} (expected exit code 0, 1 or 2){}",
            ending(int),
            if interactor_says.is_empty() { String::new() } else { format!(": {interactor_says}") }
        )),
    }
}

/// `256 MiB`, `1.5 MiB`.
pub fn mib(bytes: u64) -> String {
    let m = format!("{:.1}", bytes as f64 / (1024.0 * 1024.0));
    format!("{} MiB", m.strip_suffix(".0").unwrap_or(&m))
}

/// `1 s`, `0.5 s`.
pub fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(by_peak: bool) -> Limits {
        Limits {
            time: Duration::from_secs(1),
            wall: Duration::from_secs(3),
            memory: 256 << 20,
            memory_by_peak: by_peak,
            output: 1 << 20,
        }
    }

    fn result(status: Status) -> RunResult {
        let mut r = RunResult::error("x");
        r.status = status;
        r.error = None;
        r.cpu_user_ms = 10.0;
        r.peak_memory_bytes = 4 << 20;
        if status == Status::Exited {
            r.exit_code = Some(0);
        }
        r
    }

    fn exited(code: i32) -> RunResult {
        let mut r = result(Status::Exited);
        r.exit_code = Some(code);
        r
    }

    fn signaled(sig: &str) -> RunResult {
        let mut r = result(Status::Signaled);
        r.signal = Some(sig.into());
        r
    }

    fn v(r: &RunResult, l: &Limits) -> Option<Verdict> {
        run_verdict(r, l).unwrap().map(|(v, _)| v)
    }

    #[test]
    fn statuses() {
        let l = limits(false);
        assert_eq!(v(&exited(0), &l), None);
        assert_eq!(run_verdict(&exited(3), &l).unwrap(), Some((Verdict::Re, "exit code 3".into())));
        assert_eq!(run_verdict(&signaled("SIGSEGV"), &l).unwrap(), Some((Verdict::Re, "killed by SIGSEGV".into())));
        assert_eq!(v(&result(Status::WallTimeLimit), &l), Some(Verdict::Tle));
        assert_eq!(v(&result(Status::CpuTimeLimit), &l), Some(Verdict::Tle));
        assert_eq!(v(&result(Status::MemoryLimit), &l), Some(Verdict::Mle));
        assert_eq!(v(&result(Status::OutputLimit), &l), Some(Verdict::Ole));
        let mut sys = result(Status::ForbiddenSyscall);
        sys.syscall = Some("socket".into());
        assert_eq!(run_verdict(&sys, &l).unwrap(), Some((Verdict::Sys, "forbidden system call socket".into())));
        // capsule's own failures are not verdicts.
        let e = run_verdict(&RunResult::error("cannot exec"), &l).unwrap_err();
        assert_eq!(e, "cannot exec");
        assert!(run_verdict(&result(Status::Killed), &l).is_err());
    }

    #[test]
    fn cpu_time_over_the_limit_is_tle_even_after_a_normal_exit() {
        let l = limits(false);
        let mut r = exited(0);
        r.cpu_user_ms = 900.0;
        r.cpu_system_ms = 99.0;
        assert_eq!(v(&r, &l), None);
        r.cpu_system_ms = 101.0;
        assert_eq!(v(&r, &l), Some(Verdict::Tle));
        // Before RE: a crash after the limit is still TLE.
        let mut r = signaled("SIGSEGV");
        r.cpu_user_ms = 1500.0;
        assert_eq!(v(&r, &l), Some(Verdict::Tle));
    }

    #[test]
    fn peak_memory_counts_only_without_cgroups() {
        let mut r = exited(0);
        r.peak_memory_bytes = (256 << 20) + 1;
        assert_eq!(v(&r, &limits(false)), None);
        let (verdict, why) = run_verdict(&r, &limits(true)).unwrap().unwrap();
        assert_eq!(verdict, Verdict::Mle);
        assert!(why.contains("no cgroups"), "{why}");
        r.peak_memory_bytes = 256 << 20;
        assert_eq!(v(&r, &limits(true)), None);
        // A crash after using too much memory is MLE.
        let mut r = signaled("SIGABRT");
        r.peak_memory_bytes = 300 << 20;
        assert_eq!(v(&r, &limits(true)), Some(Verdict::Mle));
        assert_eq!(v(&r, &limits(false)), Some(Verdict::Re));
    }

    fn pair(first: Side, solution: RunResult, interactor: RunResult) -> InteractResult {
        InteractResult { first_to_exit: first, solution, interactor }
    }

    fn iv(r: &InteractResult) -> Verdict {
        interactive_verdict(r, &limits(false), "").unwrap().0
    }

    #[test]
    fn interactor_rejects_first_then_the_solution_dies_of_it() {
        // Thesis, first example: the interactor says WA and leaves; the
        // solution then dies of SIGPIPE or exits non-zero: WA, not RE.
        for sol in [signaled("SIGPIPE"), exited(1), exited(0)] {
            let r = pair(Side::Interactor, sol, exited(1));
            assert_eq!(
                interactive_verdict(&r, &limits(false), "wrong guess").unwrap(),
                (Verdict::Wa, "wrong guess".into())
            );
        }
        assert_eq!(iv(&pair(Side::Interactor, signaled("SIGPIPE"), exited(2))), Verdict::Wa);
        let (_, why) = interactive_verdict(&pair(Side::Interactor, exited(0), exited(1)), &limits(false), "").unwrap();
        assert!(why.contains("rejected"), "{why}");
    }

    #[test]
    fn solution_crashes_first_then_the_interactor_fails() {
        // Thesis, second example: the solution dies first; the interactor
        // then sees the end of its input and says WA (or worse): RE.
        for int in [exited(1), exited(2), exited(3), signaled("SIGPIPE"), signaled("SIGSEGV")] {
            let r = pair(Side::Solution, signaled("SIGSEGV"), int);
            assert_eq!(interactive_verdict(&r, &limits(false), "").unwrap().0, Verdict::Re);
        }
        assert_eq!(iv(&pair(Side::Solution, exited(4), exited(1))), Verdict::Re);
        assert_eq!(iv(&pair(Side::Solution, result(Status::WallTimeLimit), exited(1))), Verdict::Tle);
        assert_eq!(iv(&pair(Side::Solution, result(Status::MemoryLimit), exited(0))), Verdict::Mle);
        assert_eq!(iv(&pair(Side::Solution, result(Status::OutputLimit), exited(1))), Verdict::Ole);
        assert_eq!(iv(&pair(Side::Solution, result(Status::ForbiddenSyscall), exited(1))), Verdict::Sys);
    }

    #[test]
    fn interactor_decides_otherwise() {
        assert_eq!(iv(&pair(Side::Solution, exited(0), exited(0))), Verdict::Ok);
        assert_eq!(iv(&pair(Side::Interactor, exited(0), exited(0))), Verdict::Ok);
        assert_eq!(iv(&pair(Side::Solution, exited(0), exited(1))), Verdict::Wa);
        // The solution stopped before the interactor's last word.
        let (verdict, why) =
            interactive_verdict(&pair(Side::Solution, exited(0), signaled("SIGPIPE")), &limits(false), "").unwrap();
        assert_eq!(verdict, Verdict::Wa);
        assert!(why.contains("SIGPIPE"), "{why}");
        // The interactor accepted, then the solution failed of the leaving: not held against it.
        assert_eq!(iv(&pair(Side::Interactor, signaled("SIGPIPE"), exited(0))), Verdict::Ok);
        assert_eq!(iv(&pair(Side::Interactor, exited(1), exited(0))), Verdict::Ok);
        // ...but its own limits count.
        assert_eq!(iv(&pair(Side::Interactor, result(Status::WallTimeLimit), exited(0))), Verdict::Tle);
        assert_eq!(iv(&pair(Side::Interactor, result(Status::ForbiddenSyscall), exited(0))), Verdict::Sys);
        let mut slow = signaled("SIGPIPE");
        slow.cpu_user_ms = 2000.0;
        assert_eq!(iv(&pair(Side::Interactor, slow, exited(0))), Verdict::Tle);
    }

    #[test]
    fn a_broken_interactor_is_a_judge_error() {
        for int in [exited(3), exited(7), signaled("SIGSEGV"), result(Status::WallTimeLimit)] {
            for first in [Side::Interactor, Side::Solution] {
                let e = interactive_verdict(&pair(first, exited(0), int.clone()), &limits(false), "boom").unwrap_err();
                assert!(e.starts_with("the interactor ") && e.ends_with(": boom"), "{e}");
            }
        }
        // SIGPIPE while the solution was still there is the interactor's fault.
        assert!(
            interactive_verdict(&pair(Side::Interactor, exited(0), signaled("SIGPIPE")), &limits(false), "").is_err()
        );
        // And a solution run that failed in capsule.
        assert!(
            interactive_verdict(&pair(Side::Solution, RunResult::error("x"), exited(0)), &limits(false), "").is_err()
        );
    }

    #[test]
    fn units() {
        assert_eq!(mib(256 << 20), "256 MiB");
        assert_eq!(mib(3 << 19), "1.5 MiB");
        assert_eq!(mib(6295552), "6 MiB");
        assert_eq!(mib(0), "0 MiB");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(secs(Duration::from_secs(2)), "2 s");
        assert_eq!(ending(&exited(3)), "exited with 3");
        assert_eq!(ending(&signaled("SIGSEGV")), "was killed by SIGSEGV");
        assert_eq!(ending(&result(Status::WallTimeLimit)), "was stopped: wall-time-limit");
    }
}
