//! The subcommands, one file each: `command()` builds its parser (help
//! included), `run()` carries it out. Shared here: the option builders
//! and value parsers `run` and `serve` use.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use clap::{Arg, ArgAction, ArgMatches};

pub mod agent;
pub mod check;
pub mod interact;
pub mod isolate;
pub mod judge;
pub mod layer;
pub mod mcp;
pub mod preset;
pub mod presets;
pub mod run;
pub mod scope;
pub mod serve;
pub mod session;
pub mod session_holder;
pub mod shell;
pub mod supervise;
pub mod why;
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

pub use scope::{restart_in_scope, take_back_stderr};
