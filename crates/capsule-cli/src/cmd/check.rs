//! `capsule check`: the kernel features capsule relies on, and how to fix
//! what is missing.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Arg, ArgAction, ArgMatches, Command};

pub fn command() -> Command {
    Command::new("check")
        .about("Report the kernel features capsule relies on and how to fix what is missing")
        .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the report as JSON"))
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    let items = capsule::check::run_checks();
    if m.get_flag("json") {
        println!("{}", serde_json::to_string_pretty(&items).expect("serializable"));
    } else {
        print!("{}", capsule::check::render(&items));
    }
    Ok(if capsule::check::can_run(&items) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
