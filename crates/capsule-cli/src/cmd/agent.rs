//! `capsule agent`: the user's agents, the warm supervisors `capsule run`
//! reuses (crates/capsule/src/agent.rs).

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use capsule::endpoints::agent;
use capsule::spec::RunSpec;
use clap::{Arg, ArgAction, ArgMatches, Command};

const AGENT_AFTER: &str = "\
The first `capsule run` starts an agent: a supervisor that prepares the next run's sandbox
while idle (fresh for every run) and exits after CAPSULE_AGENT_IDLE seconds without work
(default 300), or after a tenth of that (5 to 30 s) once another of your agents has had a
request since its own last one. Later runs with the same identity (binary, ids and groups, namespaces,
cgroup, limits, umask, capabilities, HOME, PATH, XDG_RUNTIME_DIR, CAPSULE_* variables, ...)
are sent to it; a caller that differs gets an agent of its own, and one with no_new_privs
or a seccomp filter (maybe confined by Landlock) uses none. A run is sent only after
checking that your agent listens on the socket (else: a warning, and no agent); the
agents' directory is covered in every run. An agent stops taking requests when the
host's mount table changes. Every run still gets fresh PID, mount, user,
cgroup, IPC, UTS and network namespaces. CAPSULE_AGENT=off or `capsule run --no-agent`
forks a supervisor per run instead (docs/agent.md).

  capsule agent status     the agents running for you (socket, pid; * serves this caller)
  capsule agent stop       stop the agent that serves this caller (--all: every one of yours;
                           runs in flight are killed)
  capsule agent key        the key of an agent for this caller (--identity: what it covers)";

pub fn command() -> Command {
    Command::new("agent")
        .about("List or stop your agents: the warm supervisors that `capsule run` reuses")
        .after_help(AGENT_AFTER)
        .subcommand_required(true)
        .subcommand(
            Command::new("status")
                .about("List the agents running for you")
                .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the list as JSON")),
        )
        .subcommand(
            Command::new("stop")
                .about("Stop the agent that serves this caller (runs in flight are killed)")
                .arg(Arg::new("all").long("all").action(ArgAction::SetTrue).help("Stop every agent of yours")),
        )
        .subcommand(Command::new("key").about("Print the key of the agent that would serve this caller").arg(
            Arg::new("identity").long("identity").action(ArgAction::SetTrue).help("Also print what the key covers"),
        ))
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    match m.subcommand() {
        Some(("status", m)) => {
            let list = agent::list();
            if m.get_flag("json") {
                println!("{}", serde_json::to_string_pretty(&list).expect("serializable"));
            } else {
                match (agent::enabled(), agent::socket_dir()) {
                    (Err(why), _) => println!("agents are off here: {why}"),
                    (_, None) => {
                        println!("agents are off here: no private directory for their sockets (XDG_RUNTIME_DIR, /tmp)")
                    }
                    (Ok(()), Some(dir)) if list.is_empty() => {
                        println!("no agent running (sockets in {})", dir.display())
                    }
                    _ => {}
                }
                let own = agent::own_socket();
                for a in &list {
                    let mark = if own.as_ref() == Some(&a.socket) { "*" } else { " " };
                    println!("{mark} {}\tpid {}", a.socket.display(), a.pid);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(("stop", m)) => {
            let own = if m.get_flag("all") { None } else { agent::own_socket() };
            if !m.get_flag("all") && own.is_none() {
                println!("no agent running");
                return Ok(ExitCode::SUCCESS);
            }
            let stopped = agent::stop(own.as_deref()).map_err(|e| anyhow!("stopping an agent: {e}"))?;
            for a in &stopped {
                println!("stopped {} (pid {})", a.socket.display(), a.pid);
            }
            if stopped.is_empty() {
                println!("no agent running");
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(("key", m)) => {
            let id = agent::Identity::current(&agent::config_for(&RunSpec::default()));
            println!("{}", id.key());
            if m.get_flag("identity") {
                print!("{}", id.text());
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => unreachable!("subcommand_required"),
    }
}
