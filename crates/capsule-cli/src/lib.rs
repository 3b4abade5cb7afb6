//! capsule-cli's command-line interface as a library: the top-level parser
//! and the subcommands, one file each under `cmd/`. The binary
//! (src/main.rs) dispatches to them; capsule-docgen makes the man pages and
//! shell completions from the same parser.

use clap::Command;

pub mod cmd;
mod pty;

/// The version `--version` prints: the crate's and the git commit it was
/// built from (build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CAPSULE_GIT_COMMIT"), ")");

/// Builds one subcommand's parser.
pub type Build = fn() -> Command;

/// The subcommands, built on demand: a command line names one, and
/// building only that one halves clap's share of a `capsule run`
/// (~150 µs for all of them).
pub const SUBCOMMANDS: [(&str, Build); 15] = [
    ("run", cmd::run::command),
    ("shell", cmd::shell::command),
    ("serve", cmd::serve::command),
    ("interact", cmd::interact::command),
    ("layer", cmd::layer::command),
    ("presets", cmd::presets::command),
    ("judge", cmd::judge::command),
    ("isolate", cmd::isolate::command),
    ("agent", cmd::agent::command),
    ("session", cmd::session::command),
    ("supervise", cmd::supervise::command),
    ("check", cmd::check::command),
    ("worker", cmd::worker::command),
    ("why", cmd::why::command),
    ("mcp", cmd::mcp::command),
];

/// The whole command line interface, or with `only` the one subcommand
/// the command line names.
pub fn cli_of(only: Option<&str>) -> Command {
    let mut c = Command::new("capsule")
        .version(VERSION)
        .about("Run untrusted programs in an unprivileged Linux sandbox")
        .long_about(
            "Run untrusted programs in an unprivileged Linux sandbox: fresh user, PID and mount namespaces, \
             cgroup v2 limits, seccomp and Landlock, and exact reporting of how a run ended.\n\n\
             `capsule` is a small front end that hands a run to the caller's agent or executes `capsule-cli` \
             from its own directory; `capsule-cli` takes the same command line. `capsule check` tells whether \
             this machine can run capsule and how to fix what is missing.",
        )
        .subcommand_required(true)
        .arg_required_else_help(true);
    for (name, make) in SUBCOMMANDS {
        if only.is_none_or(|o| o == name) {
            c = c.subcommand(make());
        }
    }
    c
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_names_the_commit() {
        let v = super::cli_of(None).render_version();
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let commit_of = v.strip_prefix(&format!("capsule {} (commit ", env!("CARGO_PKG_VERSION")));
        let built = commit_of.and_then(|c| c.strip_suffix(")\n")).unwrap_or_else(|| panic!("{v:?}"));
        assert!(built == "unknown" || (built.len() == 12 && built.bytes().all(|b| b.is_ascii_hexdigit())), "{v:?}");
        // Where git works here, it names the commit the build was made from.
        if let Some(commit) = commit {
            assert_eq!(built, commit);
        }
    }
}
