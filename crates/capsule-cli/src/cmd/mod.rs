//! The subcommands, one file each: `command()` builds its parser (help
//! included), `run()` carries it out. Shared here: the option builders
//! and value parsers `run` and `serve` use.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use capsule::spec::RunSpec;
use clap::{Arg, ArgAction, ArgMatches};

pub mod agent;
pub mod check;
pub mod interact;
pub mod isolate;
pub mod judge;
pub mod layer;
pub mod presets;
pub mod run;
pub mod serve;
pub mod shell;
pub mod supervise;
pub mod worker;

pub fn pair(id: &'static str, a: &'static str, b: &'static str, help: &'static str) -> Arg {
    Arg::new(id)
        .long(id)
        .num_args(2)
        .value_names([a, b])
        .action(ArgAction::Append)
        .allow_hyphen_values(true)
        .help(help)
        .help_heading("Filesystem")
}

pub fn one(id: &'static str, name: &'static str, help: &'static str, heading: &'static str) -> Arg {
    Arg::new(id).long(id).value_name(name).action(ArgAction::Append).help(help).help_heading(heading)
}

pub fn flag(id: &'static str, help: &'static str, heading: &'static str) -> Arg {
    Arg::new(id).long(id).action(ArgAction::SetTrue).help(help).help_heading(heading)
}

/// The cgroup options of `run` and `serve`.
pub fn cgroup_args() -> [Arg; 3] {
    [
        one("cgroup", "PATH", "Use this delegated cgroup v2 directory as the base", "Cgroups"),
        flag("require-cgroups", "Fail instead of running without cgroups (degraded mode)", "Cgroups"),
        flag("no-cgroups", "Run without cgroups (rusage accounting)", "Cgroups"),
    ]
}

/// Last value of a single-valued option.
pub fn last<'a>(m: &'a ArgMatches, id: &str) -> Option<&'a String> {
    m.get_many::<String>(id).and_then(|mut v| v.next_back())
}

pub fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("`{v}` is not a valid number"))
}

/// A single-valued flag given on the command line overrides the profile's
/// value; errors name the flag.
pub fn set<T>(m: &ArgMatches, id: &str, slot: &mut Option<T>, parse: impl Fn(&str) -> Result<T, String>) -> Result<()> {
    if let Some(v) = last(m, id) {
        *slot = Some(parse(v).map_err(|e| anyhow!("--{id}: {e}"))?);
    }
    Ok(())
}

/// Host paths are resolved against the caller's directory.
pub fn absolute(p: &str, cwd: &Path) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Re-starts this very command inside a transient delegated systemd scope
/// when that is where cgroups will come from (the thesis's way); returns
/// only when it does not apply.
pub fn restart_in_scope(spec: &RunSpec) -> Result<()> {
    use capsule::host::cgroups::{discover, systemd_scope_command, systemd_user_manager, Source, IN_SCOPE_ENV};
    // Without a systemd user manager there is nothing to re-start in; the
    // supervisor does the discovery itself.
    if !systemd_user_manager() || discover(&spec.cgroup).source != Source::SystemdScope {
        return Ok(());
    }
    let argv: Vec<String> = std::env::args().collect();
    let exe = std::env::current_exe().context("cannot find the capsule binary to re-start it")?;
    let mut full = vec![exe.display().to_string()];
    full.extend(argv.into_iter().skip(1));
    let cmd = systemd_scope_command(&full);
    let err = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(&cmd[0]).args(&cmd[1..]).env(IN_SCOPE_ENV, "1"),
    );
    bail!("cannot re-start in a systemd scope ({}): {err}", cmd.join(" "))
}
