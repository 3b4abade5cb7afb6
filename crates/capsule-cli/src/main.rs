//! The `capsule` command: the dispatch to the subcommands (the parser and
//! the subcommands are the library's, src/lib.rs).

use std::process::ExitCode;

use capsule::result::EXIT_CAPSULE_ERROR;
use capsule_cli::{cli_of, cmd, SUBCOMMANDS};

#[cfg(debug_assertions)]
mod alloc_guard;

fn main() -> ExitCode {
    #[cfg(debug_assertions)]
    alloc_guard::init();
    let first = std::env::args_os().nth(1);
    // A supervisor re-executing itself inside its user namespace.
    if first.as_deref() == Some(std::ffi::OsStr::new(capsule::supervisor::RESUME_ARG)) {
        let fd = std::env::args().nth(2).unwrap_or_default();
        // Agents plan the front end's command lines with the CLI's parser.
        capsule::endpoints::resume_main(&fd, Some(cmd::run::plan))
    }
    // A session's holder, inside its sandbox (docs/sessions.md).
    if first.as_deref() == Some(std::ffi::OsStr::new(capsule::proto::session::HOLDER_ARG)) {
        return cmd::session_holder::holder_main();
    }
    // Re-started in a systemd scope: stderr back from systemd-run's pipe.
    cmd::take_back_stderr();
    // isolate's command line: `capsule isolate ...`, or this binary run
    // under the name `isolate` (a link).
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let invoked = args.first().map(|a| a.rsplit('/').next().unwrap_or(a));
    if invoked == Some(cmd::isolate::NAME) {
        return cmd::isolate::main(&args[1..]);
    }
    if first.as_deref() == Some(std::ffi::OsStr::new("isolate")) {
        return cmd::isolate::main(&args[2..]);
    }
    let only = first.as_ref().and_then(|a| a.to_str()).filter(|a| SUBCOMMANDS.iter().any(|(n, _)| n == a));
    let matches = match cli_of(only).try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_CAPSULE_ERROR } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let res = match matches.subcommand() {
        Some(("run", m)) => cmd::run::run(m, false),
        Some(("shell", m)) => cmd::shell::run(m),
        Some(("check", m)) => cmd::check::run(m),
        Some(("serve", m)) => cmd::serve::run(m),
        Some(("layer", m)) => return cmd::layer::run(m),
        Some(("why", m)) => return cmd::why::run(m),
        Some(("mcp", m)) => return cmd::mcp::run(m),
        Some(("interact", m)) => return cmd::interact::run(m),
        Some(("presets", m)) => cmd::presets::run(m),
        Some(("agent", m)) => cmd::agent::run(m),
        Some(("session", m)) => cmd::session::run(m),
        Some(("judge", m)) => cmd::judge::run(m),
        Some(("worker", m)) => cmd::worker::run(m),
        Some(("supervise", _)) => return cmd::supervise::run(),
        Some(("isolate", _)) => unreachable!("dispatched before clap"),
        _ => unreachable!("subcommand_required"),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("capsule: error: {e:#}");
            ExitCode::from(EXIT_CAPSULE_ERROR as u8)
        }
    }
}
