//! `capsule session start|exec|list|stop`: a sandbox kept by the user's
//! agent across commands (docs/sessions.md). The session's holder, which
//! starts its commands inside, is `session_holder.rs`.

use std::os::fd::{AsRawFd, RawFd};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use capsule::endpoints::agent::{self, Missed};
use capsule::proto::session::{ExecReq, Publish, SessionAnswer, SessionInfo, SessionReq};
use capsule::proto::wire::{self, ClientMsg, ServerMsg};
use capsule::spec::RunSpec;
use capsule::units::parse_duration;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use super::{last, one, pair};

const SESSION_AFTER: &str = "\
A session is one sandbox (PID 1, namespaces, network, cgroup, layer) kept by your agent
across commands: a server started with `exec --detach` is still there, with its files in
/tmp and its listening sockets, for the next `exec`. Every command runs under the
session's policy (seccomp, Landlock, mounts, limits: those given to `start` hold for the
whole session) with its own result. Sessions live in your agent, so only you see them; they
end with it (`capsule agent stop`), after --idle without a command, after --lifetime, or
with `stop`: SIGTERM to every process, SIGKILL to what is left after --grace.

  capsule session start web --writable .        start session \"web\"
  capsule session exec web --detach -- python3 -m http.server 8000
  capsule session exec web -- curl -s localhost:8000
  capsule session list
  capsule session stop web";

/// What `start` refuses: options whose effect is the caller's own
/// process's or the end of a run's (a session has no single end to report).
const NOT_FOR_SESSIONS: [&str; 16] = [
    "pty",
    "no-pty",
    "stdin",
    "stdout",
    "stderr",
    "stdin-file",
    "stdout-file",
    "stderr-file",
    "capture",
    "json",
    "meta",
    "no-agent",
    "cgroup",
    "require-cgroups",
    "no-cgroups",
    "explain",
];

pub fn command() -> Command {
    let start = super::run::command()
        .name("start")
        .about("Start session NAME, kept by your agent (the options of `capsule run`; limits are the session's)")
        .after_help(
            "Options refused here: --pty, --stdin/--stdout/--stderr(-file), --capture, --json, --meta, \
                     --explain, --no-agent and the cgroup options (sessions are your default agent's).",
        )
        .mut_arg("argv", |a| a.index(2).hide(true))
        .arg(
            Arg::new("name")
                .value_name("NAME")
                .index(1)
                .required(true)
                .help("The session's name (letters, digits, . _ -)"),
        )
        .arg(one(
            "idle",
            "DURATION",
            "Stop the session after DURATION without a command (default 30m; 0: never)",
            "Session",
        ))
        .arg(one("lifetime", "DURATION", "Stop the session DURATION after its start (default: never)", "Session"))
        .arg(one("grace", "DURATION", "Time between SIGTERM and SIGKILL when it stops (default 5s)", "Session"))
        .arg(one("publish", "[HOSTADDR:]HOSTPORT:PORT", "Listen on the host (127.0.0.1 unless HOSTADDR) and forward each connection from a process of yours to PORT on the session's loopback", "Session"))
        .arg(one("host-port", "PORT", "Let the session reach the host's 127.0.0.1:PORT at its own 127.0.0.1:PORT (nothing else of the host)", "Session"));
    Command::new("session")
        .about("Keep a sandbox across commands: start, exec (also --detach), list, stop")
        .after_help(SESSION_AFTER)
        .subcommand_required(true)
        .subcommand(start)
        .subcommand(
            Command::new("exec")
                .about("Run a command in session NAME under its policy, with a result of its own")
                .arg(Arg::new("name").value_name("NAME").required(true).help("The session"))
                .arg(
                    Arg::new("detach")
                        .long("detach")
                        .short('d')
                        .action(ArgAction::SetTrue)
                        .help("Leave it running in the session (streams /dev/null); print its pid inside"),
                )
                .arg(one("wall-time", "DURATION", "Kill this command (its process group) after DURATION", "Limits"))
                .arg(one(
                    "cpu-time",
                    "DURATION",
                    "Kill this command once its processes used DURATION of CPU time (all of them, followed from parent to child)",
                    "Limits",
                ))
                .arg(one(
                    "memory",
                    "SIZE",
                    "This command's memory, in a cgroup of its own within the session's (all its processes OOM-killed together past it); needs cgroups",
                    "Limits",
                ))
                .arg(
                    pair("setenv", "KEY", "VALUE", "Add a variable to the session's environment")
                        .help_heading("Environment"),
                )
                .arg(one("chdir", "DIR", "Working directory inside (default: the session's)", "Environment"))
                .arg(
                    Arg::new("quiet")
                        .short('q')
                        .long("quiet")
                        .action(ArgAction::SetTrue)
                        .help("No summary line on stderr"),
                )
                .arg(
                    Arg::new("argv")
                        .value_name("PROGRAM")
                        .num_args(1..)
                        .trailing_var_arg(true)
                        .required(true)
                        .help("The program and its arguments (after --)"),
                ),
        )
        .subcommand(
            Command::new("list")
                .about("List your sessions: uptime, idle time, processes, memory")
                .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the list as JSON")),
        )
        .subcommand(
            Command::new("stop")
                .about("Stop session NAME: SIGTERM to its processes, SIGKILL after the grace time")
                .arg(Arg::new("name").value_name("NAME").required(true).help("The session"))
                .arg(one(
                    "grace",
                    "DURATION",
                    "Time between SIGTERM and SIGKILL (default: the session's, 5s)",
                    "Session",
                )),
        )
}

fn ms(m: &ArgMatches, id: &str) -> Result<Option<u64>> {
    last(m, id).map(|v| parse_duration(v).map(|d| d.as_millis() as u64).map_err(|e| anyhow!("--{id}: {e}"))).transpose()
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    match m.subcommand() {
        Some(("start", m)) => {
            if let Some(id) = NOT_FOR_SESSIONS.iter().find(|id| m.value_source(id) == Some(ValueSource::CommandLine)) {
                bail!("session start: --{id} does not apply to a session");
            }
            if m.contains_id("argv") {
                bail!("session start takes no program: run commands with `capsule session exec NAME -- CMD`");
            }
            let name = m.get_one::<String>("name").expect("required").clone();
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let mut spec = super::run::spec_from(m, &cwd)?;
            // The caller's values of --keep-env, taken here as `capsule run` does.
            for k in std::mem::take(&mut spec.keep_env) {
                if let Some(v) = std::env::var_os(&k) {
                    spec.env.entry(k).or_insert_with(|| v.to_string_lossy().into_owned());
                }
            }
            let idle = match ms(m, "idle")? {
                None => Some(30 * 60 * 1000),
                Some(0) => None,
                Some(v) => Some(v),
            };
            let req = SessionReq::Start {
                name: name.clone(),
                spec: Box::new(spec),
                idle_ms: idle,
                lifetime_ms: ms(m, "lifetime")?,
                grace_ms: ms(m, "grace")?,
                publish: m
                    .get_many::<String>("publish")
                    .into_iter()
                    .flatten()
                    .map(|v| v.parse::<Publish>().map_err(|e| anyhow!("--publish: {e}")))
                    .collect::<Result<_>>()?,
                host_ports: m
                    .get_many::<String>("host-port")
                    .into_iter()
                    .flatten()
                    .map(|v| {
                        v.parse::<u16>()
                            .ok()
                            .filter(|&p| p > 0)
                            .ok_or_else(|| anyhow!("--host-port: `{v}` is not a port"))
                    })
                    .collect::<Result<_>>()?,
            };
            match ask(req, &[])? {
                SessionAnswer::Started { .. } => Ok(ExitCode::SUCCESS),
                other => fail(other),
            }
        }
        Some(("exec", m)) => {
            let name = m.get_one::<String>("name").expect("required").clone();
            let detach = m.get_flag("detach");
            let mut env = Vec::new();
            if let Some(v) = m.get_many::<String>("setenv") {
                let v: Vec<&String> = v.collect();
                for kv in v.chunks(2) {
                    env.push(format!("{}={}", kv[0], kv[1]));
                }
            }
            let req = ExecReq {
                name,
                argv: m.get_many::<String>("argv").expect("required").cloned().collect(),
                env,
                cwd: last(m, "chdir").cloned(),
                detach,
                wall_time_ms: ms(m, "wall-time")?,
                cpu_time_ms: ms(m, "cpu-time")?,
                memory: last(m, "memory")
                    .map(|v| capsule::units::parse_size(v).map_err(|e| anyhow!("--memory: {e}")))
                    .transpose()?,
            };
            let fds: &[RawFd] = if detach { &[] } else { &[0, 1, 2] };
            match ask(SessionReq::Exec(req), fds)? {
                SessionAnswer::Detached { pid } => {
                    println!("{pid}");
                    Ok(ExitCode::SUCCESS)
                }
                SessionAnswer::Exec { result } => {
                    eprint!("{}", result.report(m.get_flag("quiet")));
                    Ok(ExitCode::from(result.exit_status().clamp(0, 255) as u8))
                }
                other => fail(other),
            }
        }
        Some(("list", m)) => match ask(SessionReq::List, &[])? {
            SessionAnswer::List { sessions } => {
                if m.get_flag("json") {
                    println!("{}", serde_json::to_string_pretty(&sessions).expect("serializable"));
                } else {
                    print_list(&sessions);
                }
                Ok(ExitCode::SUCCESS)
            }
            other => fail(other),
        },
        Some(("stop", m)) => {
            let name = m.get_one::<String>("name").expect("required").clone();
            match ask(SessionReq::Stop { name, grace_ms: ms(m, "grace")? }, &[])? {
                SessionAnswer::Stopped { .. } => Ok(ExitCode::SUCCESS),
                other => fail(other),
            }
        }
        _ => unreachable!("subcommand_required"),
    }
}

fn fail(answer: SessionAnswer) -> Result<ExitCode> {
    match answer {
        SessionAnswer::Error { error } => bail!("{error}"),
        other => bail!("unexpected answer from the agent: {other:?}"),
    }
}

fn print_list(sessions: &[SessionInfo]) {
    if sessions.is_empty() {
        println!("no session");
        return;
    }
    println!("NAME\tUPTIME\tIDLE\tPROCESSES\tMEMORY\tEXECS\tSTATE\tPORTS");
    for s in sessions {
        let state = if s.stopping { "stopping" } else { "running" };
        println!(
            "{:?}\t{}\t{}\t{}\t{}\t{}\t{state}\t{}",
            s.name,
            secs(s.uptime_ms),
            secs(s.idle_ms),
            s.processes,
            mib(s.memory_bytes),
            s.execs,
            s.ports.join(",")
        );
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}M", bytes as f64 / (1 << 20) as f64)
}

fn secs(ms: u64) -> String {
    format!("{}.{}s", ms / 1000, ms % 1000 / 100)
}

/// Sends `req` to the caller's agent (started if none) and waits for its answer.
fn ask(req: SessionReq, fds: &[RawFd]) -> Result<SessionAnswer> {
    let msg = ClientMsg::Session { id: 1, req, notify: false };
    let spec = match &msg {
        ClientMsg::Session { req: SessionReq::Start { spec, .. }, .. } => spec.as_ref().clone(),
        _ => RunSpec::default(),
    };
    let mut tries = 0;
    let c = loop {
        match agent::send(&spec, &msg, fds) {
            Ok(c) => break c,
            Err(Missed::Fatal(e)) => return Err(e.into()),
            // An agent dying right now still has its socket: the next try meets none, or a new one.
            Err(Missed::Fallback) if tries < 3 && agent::enabled().is_ok() => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(Missed::Fallback) => {
                let why = agent::enabled().err().unwrap_or_else(|| "no agent could be reached or started".into());
                bail!("sessions are kept by your agent, and there is none here: {why} (docs/agent.md)");
            }
        }
    };
    loop {
        match wire::recv::<ServerMsg>(c.sock.as_raw_fd()).map_err(|e| anyhow!("agent: {e}"))? {
            Some((ServerMsg::Session { answer, .. }, _)) => return Ok(answer),
            Some(_) => continue,
            None => bail!("the agent ended the connection without answering"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_start_parser_is_sound() {
        super::command().debug_assert();
    }
}
