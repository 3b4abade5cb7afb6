//! `capsule shell`: an interactive shell in the sandbox, with every option
//! of `capsule run` and a pseudo-terminal of its own when stdin is a
//! terminal (`pty.rs`).

use std::process::ExitCode;

use anyhow::Result;
use capsule::spec::RunSpec;
use capsule::RunResult;
use clap::{Arg, ArgMatches, Command};

const SHELL_ABOUT: &str = "Run an interactive shell in a fresh sandbox, on a pseudo-terminal of its own";
const SHELL_AFTER: &str = "\
The shell is your $SHELL when the sandbox shows it, else /bin/bash, else /bin/sh (picked
inside the sandbox by /bin/sh), started with -i when stdin is a terminal; with stdin not a
terminal it reads its commands from stdin (echo 'make test' | capsule shell).
`capsule shell -- PROGRAM ARGS` runs PROGRAM instead. TERM, COLUMNS, LINES and LANG are
passed through; the prompt starts with `(capsule) ` (PS1, and for bash PROMPT_COMMAND,
unless --setenv sets them).
When stdin is a terminal the shell gets a pseudo-terminal of its own as its controlling
terminal (--no-pty: inherit the terminal instead): ^C and ^Z act inside, the window size
follows yours, your terminal's modes are restored when the shell ends.

The options are those of `capsule run` (see capsule run --help); so is the exit status:
the program's exit code, 128+N when it died of signal N, 125 when capsule could not run it.";

/// The argv placeholder `capsule run` has, with the shell's meaning.
fn argv_arg() -> Arg {
    Arg::new("argv")
        .value_name("PROGRAM")
        .num_args(1..)
        .trailing_var_arg(true)
        .help("Run this program and its arguments (after --) instead of a shell")
}

/// `capsule shell`: `capsule run`'s options (the same definitions, so every
/// flag `run` gains, `shell` has too), another about and argv.
pub fn command() -> Command {
    super::run::command().name("shell").about(SHELL_ABOUT).after_help(SHELL_AFTER).mut_arg("argv", |_| argv_arg())
}

/// `capsule shell`: `capsule run` with the shell's spec, a pty by default
/// when stdin is a terminal.
pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    super::run::run(m, true)
}

/// Picks the shell inside the sandbox, so that what the sandbox shows
/// decides (an --empty-root without bash, a --hide): $1 is the caller's
/// $SHELL, the rest the shell's arguments.
const PICK_SHELL: &str = r#"want=$1; shift
for s in "$want" /bin/bash /bin/sh; do
  case $s in /*) ;; *) continue ;; esac
  if [ -f "$s" ] && [ -x "$s" ]; then SHELL=$s; export SHELL; exec "$s" "$@"; fi
done
echo "capsule shell: no shell in the sandbox (tried ${want:-\$SHELL (unset)}, /bin/bash, /bin/sh); name one: capsule shell -- PROGRAM" >&2
exit 127"#;

/// The prompt's prefix.
pub const PROMPT_PREFIX: &str = "(capsule) ";

/// Turns the run spec into the shell's: argv (unless a PROGRAM was given),
/// the terminal's environment, the prompt. `interactive`: stdin is a
/// terminal (the run's own pty, or the caller's with --no-pty).
pub fn prepare(spec: &mut RunSpec, program_given: bool, interactive: bool) {
    if !program_given {
        let want = std::env::var("SHELL").unwrap_or_default();
        spec.argv = ["/bin/sh", "-c", PICK_SHELL, "capsule-shell", want.as_str()].map(String::from).to_vec();
        if interactive {
            spec.argv.push("-i".into());
        }
    }
    for k in ["TERM", "COLUMNS", "LINES", "LANG"] {
        if !spec.keep_env.iter().any(|e| e == k) {
            spec.keep_env.push(k.into());
        }
    }
    // bash's start-up files usually set PS1; PROMPT_COMMAND runs before
    // each prompt and puts the prefix back in front (once).
    spec.env.entry("PS1".into()).or_insert_with(|| format!("{PROMPT_PREFIX}$ "));
    spec.env
        .entry("PROMPT_COMMAND".into())
        .or_insert_with(|| format!("case \"$PS1\" in \"{PROMPT_PREFIX}\"*) ;; *) PS1=\"{PROMPT_PREFIX}$PS1\" ;; esac"));
}

/// A sandbox without /bin/sh cannot pick the shell: the error says how to
/// name one.
pub fn explain(result: &mut RunResult, program_given: bool) {
    if let (false, Some(e)) = (program_given, result.error.as_mut()) {
        if e.contains("(execve): `/bin/sh`") {
            e.push_str("; capsule shell picks the shell with /bin/sh: name one with `capsule shell -- PROGRAM`");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_spec() {
        let mut s = RunSpec::default();
        s.env.insert("PS1".into(), "mine> ".into());
        s.keep_env.push("LANG".into());
        prepare(&mut s, false, true);
        assert_eq!(&s.argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(s.argv[3], "capsule-shell");
        assert_eq!(s.argv.last().map(String::as_str), Some("-i"));
        assert_eq!(s.env["PS1"], "mine> ", "--setenv wins");
        assert!(s.env["PROMPT_COMMAND"].contains("(capsule) "));
        assert_eq!(s.keep_env, ["LANG", "TERM", "COLUMNS", "LINES"]);
        s.validate().unwrap();
        let mut s = RunSpec::new(["make", "test"]);
        prepare(&mut s, true, false);
        assert_eq!(s.argv, ["make", "test"]);
        let mut s = RunSpec::default();
        prepare(&mut s, false, false);
        assert_ne!(s.argv.last().map(String::as_str), Some("-i"), "no -i without a terminal");
    }
}
