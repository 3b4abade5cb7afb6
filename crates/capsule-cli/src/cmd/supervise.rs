//! `capsule supervise` (hidden): the supervisor of the library's
//! `Sandbox`, started by the library with its socket as fd 3.

use std::process::ExitCode;

use capsule::result::EXIT_CAPSULE_ERROR;
use clap::Command;

pub fn command() -> Command {
    Command::new("supervise").hide(true).about("The supervisor of the library's Sandbox (started by the library, fd 3)")
}

/// Serves the library's requests until it closes the socket; returns
/// only when fd 3 is not one.
pub fn run() -> ExitCode {
    if capsule::sys::fd_mode(3).is_err() {
        eprintln!("capsule: error: `capsule supervise` is started by the library (capsule::sandbox::Sandbox) with its socket as fd 3; use `capsule serve` instead");
        return ExitCode::from(EXIT_CAPSULE_ERROR as u8);
    }
    capsule::endpoints::once::supervise_main()
}
