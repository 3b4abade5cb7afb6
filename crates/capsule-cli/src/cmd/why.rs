//! `capsule why`: would this run be allowed to write a path, see one, reach
//! a host? The same verdict, rule and fix as `--explain` gives after a run
//! (docs/explain.md), for the spec `capsule run` would build from the same
//! options, without running anything.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use capsule::supervisor::explain::{why, Query, Verdict};
use clap::{Arg, ArgMatches, Command};

use super::{absolute, last};

const ABOUT: &str = "Say whether a run with these options may write a path, see one or reach a host, and why";
const AFTER: &str = "\
Takes every option of `capsule run` (--profile, --layer, --writable, --hide, --share-net,
--tcp-connect, ...) and answers for the run they describe, without running anything: the
rule that decides and, when refused, the option that would allow it. Paths are the
sandbox's (absolute, or relative to the current directory).

Exit status: 0 allowed, 1 refused, 125 when the options are wrong.";

pub fn command() -> Command {
    let q = "Question";
    super::run::command()
        .name("why")
        .about(ABOUT)
        .after_help(AFTER)
        .arg(Arg::new("write").long("write").value_name("PATH").help("May the program write PATH?").help_heading(q))
        .arg(Arg::new("read").long("read").value_name("PATH").help("Does the program see PATH?").help_heading(q))
        .arg(
            Arg::new("host")
                .long("host")
                .value_name("NAME[:PORT]")
                .help("May the program connect to NAME (port 443 unless given)?")
                .help_heading(q),
        )
        .group(clap::ArgGroup::new("question").args(["write", "read", "host"]).required(true))
}

/// NAME, NAME:PORT, [ADDR]:PORT.
fn host_port(v: &str) -> Result<(String, Option<u16>)> {
    if let Some(rest) = v.strip_prefix('[') {
        let (h, p) = rest.split_once(']').ok_or_else(|| anyhow!("--host {v}: no closing ]"))?;
        let port = match p.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| anyhow!("--host {v}: `{p}` is not a port"))?),
            None => None,
        };
        return Ok((h.to_string(), port));
    }
    match v.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            Ok((h.to_string(), Some(p.parse().map_err(|_| anyhow!("--host {v}: `{p}` is not a port"))?)))
        }
        _ => Ok((v.to_string(), None)),
    }
}

/// The verdict as the lines `capsule why` prints.
pub fn text(what: &str, v: &Verdict) -> String {
    let mut out = match (v.allowed, v.errno) {
        (true, _) => format!("{what}: allowed: {}\n", v.rule),
        (false, Some(e)) => format!("{what}: refused ({e}): {}\n", v.rule),
        (false, None) => format!("{what}: refused: {}\n", v.rule),
    };
    if let Some(fix) = &v.fix {
        out.push_str(&format!("  to allow: {fix}\n"));
    }
    out
}

pub fn run(m: &ArgMatches) -> ExitCode {
    match answer(m) {
        Ok(allowed) => ExitCode::from(if allowed { 0 } else { 1 }),
        Err(e) => {
            eprintln!("capsule why: {e:#}");
            ExitCode::from(125)
        }
    }
}

fn answer(m: &ArgMatches) -> Result<bool> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let spec = super::run::spec_from(m, &cwd)?;
    let (q, what) = if let Some(p) = last(m, "write") {
        let p = absolute(p, &cwd);
        (Query::Write(p.clone()), format!("write {}", capsule::layer::quote_path(&p)))
    } else if let Some(p) = last(m, "read") {
        let p = absolute(p, &cwd);
        (Query::Read(p.clone()), format!("read {}", capsule::layer::quote_path(&p)))
    } else if let Some(h) = last(m, "host") {
        let (host, port) = host_port(h)?;
        let shown = format!("connect {}:{}", capsule::layer::quote(host.as_bytes()), port.unwrap_or(443));
        (Query::Host(host, port), shown)
    } else {
        bail!("give --write PATH, --read PATH or --host NAME");
    };
    let v = why(&spec, &q).map_err(|e| anyhow!(e))?;
    print!("{}", text(&what, &v));
    if let Some(p) = last(m, "json") {
        let j = serde_json::json!({
            "allowed": v.allowed, "rule": v.rule, "fix": v.fix, "errno": v.errno,
        });
        std::fs::write(Path::new(p), format!("{j}\n")).with_context(|| format!("--json: cannot write `{p}`"))?;
    }
    Ok(v.allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_ports() {
        assert_eq!(host_port("example.org").unwrap(), ("example.org".into(), None));
        assert_eq!(host_port("example.org:80").unwrap(), ("example.org".into(), Some(80)));
        assert_eq!(host_port("[::1]:53").unwrap(), ("::1".into(), Some(53)));
        assert_eq!(host_port("::1").unwrap(), ("::1".into(), None));
        assert!(host_port("x:y").is_err());
    }
}
