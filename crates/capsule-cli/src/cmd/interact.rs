//! `capsule interact`: an interactive run from the command line (the
//! solution and the interactor, each in its own sandbox, talking through
//! the supervisor's relay; docs/interactive.md).

use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use capsule::result::EXIT_CAPSULE_ERROR;
use capsule::sandbox::{Config, Sandbox};
use capsule::units::parse_duration;
use capsule::{InteractResult, InteractSpec, RunResult, RunSpec, Side};
use clap::{Arg, ArgAction, ArgMatches, Command};

use super::last;

const ABOUT: &str = "Run a solution and an interactor connected stdout to stdin both ways; report who left first";

const AFTER: &str = "\
Each program runs in a sandbox of its own with its own profile and limits; the
supervisor relays the two pipes, so it knows which program ended the
conversation first (a program killed by SIGPIPE because the other left is
never first). Examples:
  capsule interact --solution ./a.out --interactor 'python3 interactor.py tests/1.in'
  capsule interact --solution-profile sol.toml --interactor-profile int.toml --wall-time 2s
  capsule interact --spec pair.toml --json result.json     # [solution] and [interactor] tables
Exit status: 0 when both exited with 0; otherwise the status of the first to
exit if it failed, else the other's (as capsule run reports it).";

pub fn command() -> Command {
    let one = |id: &'static str, value: &'static str, help: &'static str| {
        Arg::new(id).long(id).value_name(value).action(ArgAction::Append).help(help)
    };
    Command::new("interact")
        .about(ABOUT)
        .after_help(AFTER)
        .arg(one(
            "spec",
            "FILE",
            "An interactive spec (TOML, or JSON if FILE ends in .json) with [solution] and [interactor] run specs",
        ))
        .arg(one(
            "solution",
            "CMD",
            "The solution's command line (split like a shell: quotes and backslashes; no expansion)",
        ))
        .arg(one("interactor", "CMD", "The interactor's command line"))
        .arg(one("solution-profile", "FILE", "The solution's run spec (a TOML profile); --solution overrides its argv"))
        .arg(one(
            "interactor-profile",
            "FILE",
            "The interactor's run spec (a TOML profile); --interactor overrides its argv",
        ))
        .arg(one("wall-time", "DURATION", "Wall-time limit of each program (overrides the profiles')"))
        .arg(one("json", "PATH", "Write the result (first_to_exit, solution, interactor) as JSON to PATH"))
        .arg(Arg::new("quiet").short('q').long("quiet").action(ArgAction::SetTrue).help("No summary lines on stderr"))
}

/// Splits a command line like a POSIX shell does words: blanks separate,
/// single quotes keep everything, double quotes keep all but `\"` and
/// `\\`, a backslash outside quotes keeps the next character. No
/// expansion of any kind.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("a backslash at the end".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

fn read_profile(flag: &str, path: &str) -> Result<RunSpec> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--{flag}: cannot read `{path}`"))?;
    capsule::spec::from_toml(&text).map_err(|e| anyhow!("--{flag} `{path}`: {e}"))
}

/// The interactive spec the flags describe.
pub fn spec_from(m: &ArgMatches) -> Result<InteractSpec> {
    let mut spec = match last(m, "spec") {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("--spec: cannot read `{path}`"))?;
            if Path::new(path).extension().is_some_and(|e| e == "json") {
                capsule::spec::interact_from_json(&text).map_err(|e| anyhow!("--spec `{path}`: {e}"))?
            } else {
                capsule::spec::interact_from_toml(&text).map_err(|e| anyhow!("--spec `{path}`: {e}"))?
            }
        }
        None => InteractSpec::default(),
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    for (side, slot) in [("solution", &mut spec.solution), ("interactor", &mut spec.interactor)] {
        if let Some(p) = last(m, &format!("{side}-profile")) {
            *slot = read_profile(&format!("{side}-profile"), p)?;
        }
        if let Some(cmd) = last(m, side) {
            slot.argv = split_words(cmd).map_err(|e| anyhow!("--{side}: {e}: {cmd}"))?;
        }
        if slot.argv.is_empty() {
            bail!("no {side} command: give --{side} CMD, or argv in --{side}-profile or --spec's [{side}]");
        }
        if let Some(v) = last(m, "wall-time") {
            slot.limits.wall_time = Some(parse_duration(v).map_err(|e| anyhow!("--wall-time: {e}"))?);
        }
        if slot.cwd.is_none() && !slot.empty_root {
            // Like `capsule run`: start where the caller is, if visible.
            slot.cwd = Some(cwd.clone());
            slot.cwd_fallback = true;
        }
    }
    spec.validate().map_err(|e| anyhow!("invalid spec: {e}"))?;
    Ok(spec)
}

/// capsule's exit status for an interactive run: 0 when both exited with
/// 0, else the first to exit's if it failed, else the other's.
pub fn exit_status(r: &InteractResult) -> i32 {
    let (first, second) = match r.first_to_exit {
        Side::Solution => (&r.solution, &r.interactor),
        Side::Interactor => (&r.interactor, &r.solution),
    };
    match first.exit_status() {
        0 => second.exit_status(),
        n => n,
    }
}

fn summary(side: &str, r: &RunResult) -> String {
    r.summary().replacen("capsule: ", &format!("capsule: {side}: "), 1)
}

pub fn run(m: &ArgMatches) -> ExitCode {
    let quiet = m.get_flag("quiet");
    let outcome = (|| -> Result<InteractResult> {
        let spec = spec_from(m)?;
        // Where a systemd user manager delegates cgroups, both programs run in them.
        super::restart_in_scope(&RunSpec::default())?;
        let exe = std::env::current_exe().context("cannot find the capsule binary")?;
        let sandbox = Sandbox::start(Config { parallel: 2, capsule_bin: Some(exe), ..Default::default() })?;
        // Both programs' stderr is ours, unless their specs say otherwise.
        let err = std::io::stderr();
        let pass = |s: &RunSpec| s.stderr.is_none().then(|| err.as_fd());
        let stderr = [pass(&spec.solution), pass(&spec.interactor)];
        Ok(sandbox.interact_with(spec, stderr)?.wait()?)
    })();
    let result = match outcome {
        Ok(r) => r,
        Err(e) => {
            eprintln!("capsule: error: {e:#}");
            return ExitCode::from(EXIT_CAPSULE_ERROR as u8);
        }
    };
    if let Some(path) = last(m, "json") {
        let mut text = serde_json::to_string_pretty(&result).expect("serializable");
        text.push('\n');
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("capsule: error: --json: cannot write `{path}`: {e}");
            return ExitCode::from(EXIT_CAPSULE_ERROR as u8);
        }
    }
    if !quiet {
        eprintln!("{}", summary("solution", &result.solution));
        eprintln!("{}", summary("interactor", &result.interactor));
        eprintln!("capsule: first to exit: {}", result.first_to_exit.as_str());
    }
    ExitCode::from(exit_status(&result).clamp(0, 255) as u8)
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(split_words("a  b\tc").unwrap(), ["a", "b", "c"]);
        assert_eq!(split_words("python3 'my file.py' \"x y\" z\\ w").unwrap(), ["python3", "my file.py", "x y", "z w"]);
        assert_eq!(split_words(r#""a\"b" 'c\d' e\\f"#).unwrap(), [r#"a"b"#, r"c\d", r"e\f"]);
        assert_eq!(split_words("'' x").unwrap(), ["", "x"]);
        assert_eq!(split_words("").unwrap(), Vec::<String>::new());
        assert!(split_words("'open").is_err());
        assert!(split_words("\"open").is_err());
        assert!(split_words("end\\").is_err());
    }
}
