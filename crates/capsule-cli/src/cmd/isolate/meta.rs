//! A run's result in isolate's terms: the meta file's fields and units,
//! the status line on stderr and the exit status (0 the program finished
//! correctly, 1 it did not, 2 the sandbox failed).

use capsule::result::{signal_number, Accounting, RunResult, Status};

/// What isolate reports for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The meta file's lines (`key:value\n`).
    pub meta: String,
    /// The status line for stderr (`-s` hides it unless `code` is 2).
    pub line: String,
    pub code: u8,
}

/// The limits the result is checked against, in ms (0: none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Checked {
    pub time_ms: u64,
    pub wall_ms: u64,
    pub cg: bool,
}

/// isolate's `%d.%03d` of whole milliseconds.
fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `die()`: an error of the sandbox itself.
pub fn internal(message: &str) -> Report {
    let message = message.replace('\n', " ");
    Report { meta: format!("status:XX\nmessage:{message}\n"), line: message, code: 2 }
}

/// `final_stats()`: the times, memory and context switches of a run.
fn stats(r: &RunResult, c: Checked) -> (String, u64, u64) {
    let cpu_ms = (r.cpu_user_ms + r.cpu_system_ms).max(0.0).floor() as u64;
    let wall_ms = r.wall_time_ms.max(0.0).floor() as u64;
    let mut stats =
        format!("time:{}\ntime-wall:{}\nmax-rss:{}\n", secs(cpu_ms), secs(wall_ms), r.peak_memory_bytes / 1024);
    if let (Some(v), Some(f)) = (r.csw_voluntary, r.csw_forced) {
        stats.push_str(&format!("csw-voluntary:{v}\ncsw-forced:{f}\n"));
    }
    if c.cg && r.accounting == Accounting::Cgroup {
        stats.push_str(&format!("cg-mem:{}\n", r.peak_memory_bytes / 1024));
        if r.status == Status::MemoryLimit {
            stats.push_str("cg-oom-killed:1\n");
        }
    }
    (stats, cpu_ms, wall_ms)
}

/// A run `capsule isolate` killed for the signal `sig` it received (SIGINT,
/// SIGTERM, ...): isolate's `err("SG: Interrupted")` after `exitsig`, then
/// `box_exit()`'s `killed` and the statistics.
pub fn interrupted(r: &RunResult, sig: i32, c: Checked) -> Report {
    let (stats, _, _) = stats(r, c);
    Report {
        meta: format!("exitsig:{sig}\nstatus:SG\nmessage:Interrupted\nkilled:1\n{stats}"),
        line: "Interrupted".into(),
        code: 1,
    }
}

/// The fields and status of a run that happened.
pub fn report(r: &RunResult, c: Checked) -> Report {
    let (stats, cpu_ms, wall_ms) = stats(r, c);
    let fail = |status: &str, message: String, before: &str, after: &str| Report {
        meta: format!("{before}status:{status}\nmessage:{message}\n{after}"),
        line: message,
        code: 1,
    };
    match r.status {
        Status::WallTimeLimit => {
            return fail("TO", "Time limit exceeded (wall clock)".into(), "", &format!("killed:1\n{stats}"))
        }
        Status::CpuTimeLimit => return fail("TO", "Time limit exceeded".into(), "", &format!("killed:1\n{stats}")),
        _ => {}
    }
    if c.time_ms > 0 && cpu_ms > c.time_ms {
        return fail("TO", "Time limit exceeded".into(), &stats, "");
    }
    if c.wall_ms > 0 && wall_ms > c.wall_ms {
        return fail("TO", "Time limit exceeded (wall clock)".into(), &stats, "");
    }
    if let Some(code) = r.exit_code {
        let before = format!("{stats}exitcode:{code}\n");
        if code != 0 {
            return fail("RE", format!("Exited with error status {code}"), &before, "");
        }
        return Report {
            meta: before,
            line: format!("OK ({} sec real, {} sec wall)", secs(cpu_ms), secs(wall_ms)),
            code: 0,
        };
    }
    // A signal (SIGSYS for a call a killing seccomp policy forbade).
    let sig = r.signal.as_deref().and_then(signal_number).unwrap_or(libc::SIGSYS);
    fail("SG", format!("Caught fatal signal {sig}"), &format!("{stats}exitsig:{sig}\n"), "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: Status) -> RunResult {
        let mut r = RunResult::error("x");
        r.status = status;
        r.error = None;
        r.cpu_user_ms = 1200.9;
        r.cpu_system_ms = 10.0;
        r.wall_time_ms = 1500.2;
        r.peak_memory_bytes = 3 << 20;
        r
    }

    #[test]
    fn fields_and_units() {
        let mut r = result(Status::Exited);
        r.exit_code = Some(0);
        (r.csw_voluntary, r.csw_forced) = (Some(5), Some(2));
        let rep = report(&r, Checked::default());
        assert_eq!(rep.code, 0);
        assert!(
            rep.meta.starts_with("time:1.210\ntime-wall:1.500\nmax-rss:3072\ncsw-voluntary:5\ncsw-forced:2\n"),
            "{}",
            rep.meta
        );
        assert!(rep.meta.ends_with("exitcode:0\n"));
        assert_eq!(rep.line, "OK (1.210 sec real, 1.500 sec wall)");
        r.exit_code = Some(3);
        let rep = report(&r, Checked::default());
        assert_eq!((rep.code, rep.line.as_str()), (1, "Exited with error status 3"));
        assert!(rep.meta.ends_with("exitcode:3\nstatus:RE\nmessage:Exited with error status 3\n"));
        // Over -t but not killed: TO all the same, no exit code.
        let rep = report(&r, Checked { time_ms: 1000, ..Default::default() });
        assert!(rep.meta.ends_with("status:TO\nmessage:Time limit exceeded\n") && !rep.meta.contains("killed"));
    }

    #[test]
    fn kills_and_signals() {
        let rep = report(&result(Status::WallTimeLimit), Checked::default());
        assert!(rep.meta.starts_with("status:TO\nmessage:Time limit exceeded (wall clock)\nkilled:1\ntime:"));
        let mut r = result(Status::MemoryLimit);
        r.accounting = Accounting::Cgroup;
        r.signal = Some("SIGKILL".into());
        let rep = report(&r, Checked { cg: true, ..Default::default() });
        assert!(rep
            .meta
            .contains("cg-mem:3072\ncg-oom-killed:1\nexitsig:9\nstatus:SG\nmessage:Caught fatal signal 9\n"));
        let mut r = result(Status::Killed);
        r.csw_voluntary = Some(1);
        r.csw_forced = Some(0);
        let rep = interrupted(&r, libc::SIGTERM, Checked::default());
        assert_eq!(
            (rep.code, rep.line.as_str(), rep.meta.as_str()),
            (
                1,
                "Interrupted",
                "exitsig:15\nstatus:SG\nmessage:Interrupted\nkilled:1\ntime:1.210\ntime-wall:1.500\nmax-rss:3072\n\
                 csw-voluntary:1\ncsw-forced:0\n"
            )
        );
        let internal = internal("Box not found");
        assert_eq!((internal.code, internal.meta.as_str()), (2, "status:XX\nmessage:Box not found\n"));
    }
}
