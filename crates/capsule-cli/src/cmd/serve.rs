//! `capsule serve`: a long-lived supervisor serving run requests as JSON
//! lines (docs/protocol.md).

use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use capsule::sandbox::Config;
use clap::{Arg, ArgMatches, Command};

use super::{absolute, cgroup_args, flag, last, num};

const SERVE_AFTER: &str = "\
Protocol (docs/protocol.md): one JSON request per line, one JSON response per line.
  {\"id\": 1, \"spec\": {\"argv\": [\"/bin/true\"]}}     -> {\"id\": 1, \"result\": {...}}
  {\"id\": 2, \"kill\": 1}  /  {\"id\": 3, \"cancel\": 1}  -> {\"id\": 2, \"ok\": true}
With \"egress\": {..., \"ask\": true}, a host no pattern names is asked about:
  <- {\"id\": 1, \"ask\": {\"ask_id\": 1, \"host\": ..., \"port\": ..., \"via\": ...}}
  -> {\"id\": 1, \"answer\": {\"ask_id\": 1, \"decision\": \"allow-once\"|\"allow-run\"|\"deny\"}}
A spec has the field names of a TOML profile. A run's stdin, stdout and stderr are
/dev/null unless the spec names files or asks for {\"capture\": SIZE}. Malformed
requests get {\"id\": ..., \"error\": \"...\"} and the server keeps serving.";

pub fn command() -> Command {
    Command::new("serve")
        .about("Serve run requests as JSON lines on stdin/stdout or a Unix socket (a long-lived supervisor)")
        .after_help(SERVE_AFTER)
        .arg(Arg::new("listen").long("listen").value_name("PATH").help("Listen on a Unix socket at PATH (mode 0600) instead of stdin/stdout; one client per connection"))
        .arg(Arg::new("parallel").long("parallel").value_name("N").help("Run up to N requests at once (default 1)"))
        .arg(flag("per-cpu", "One supervisor per CPU (min(N, CPUs) of them, the N slots shared out), each pinned with its runs to a CPU of its own, behind this process, which shares the requests out: more runs a second for judges; a run's processes then share one CPU", "Supervisor").conflicts_with("shared-network"))
        .arg(flag("no-prepare", "Do not prepare the next runs' sandboxes ahead of their requests (while idle or while every slot is busy)", "Supervisor"))
        .arg(flag("shared-network", "One loopback network for all runs instead of one per concurrent run: concurrent runs can then reach each other over 127.0.0.1", "Supervisor").conflicts_with("fresh-network"))
        .arg(flag("fresh-network", "Make each run's loopback network anew and tear it down after the run, instead of lending it a kept one no other run is using: slower, but the network's statistics (/proc/net/snmp, /proc/net/dev) do not carry over from earlier runs", "Supervisor"))
        .args(cgroup_args())
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let mut config = Config::default();
    if let Some(n) = m.get_one::<String>("parallel") {
        config.parallel = num(n).map_err(|e| anyhow!("--parallel: {e}"))?;
    }
    config.prepare_ahead = !m.get_flag("no-prepare");
    config.own_network = !m.get_flag("shared-network");
    config.fresh_network = m.get_flag("fresh-network");
    config.per_cpu = m.get_flag("per-cpu");
    if let Some(v) = last(m, "cgroup") {
        config.cgroup.path = Some(absolute(v, &cwd));
    }
    config.cgroup.require = m.get_flag("require-cgroups");
    config.cgroup.disable = m.get_flag("no-cgroups");
    config.validate().map_err(|e| anyhow!("--{}: {}", e.field, e.message))?;
    let listen = m.get_one::<String>("listen").map(|p| absolute(p, &cwd));
    // Where a systemd user manager delegates cgroups, serve in them.
    super::restart_in_scope(&capsule::spec::RunSpec { cgroup: config.cgroup.clone(), ..Default::default() })?;
    capsule::endpoints::serve::run_server(&config, listen.as_deref()).map_err(anyhow::Error::from)?;
    Ok(ExitCode::SUCCESS)
}
