//! `capsule presets`: the language presets, whether their toolchains work
//! here (and why not), and the run spec a preset makes for a directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use capsule_judge::presets::{self, Preset, PresetError, Toolchain};
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::{json, Value};

const PRESETS_AFTER: &str = "\
Each preset is a pair of profiles shipped with capsule (crates/capsule-judge/presets/NAME-compile.toml
and NAME-run.toml: an empty root with the toolchain's binds only, a seccomp policy, limits),
completed with the toolchain found here: through your PATH, then /usr/local/bin, /usr/bin and
the language's usual places, links resolved (docs/presets.md).

  capsule presets                      list the presets, their toolchains, or why they do not work
  capsule presets cpp --compile --box DIR > compile.toml
  capsule run --profile compile.toml   compile DIR/solution.cpp in the sandbox (into DIR)
  capsule presets cpp --run --box DIR --memory 256M > run.toml
  capsule run --profile run.toml --memory 256M --wall-time 1s --stdin 1.in

Names: c, cpp (c++, cc, cxx), rust (rs), pascal (pas, fpc), python3 (py, python), bash (sh),
java, go (golang). Sources: solution.c, .cpp, .rs, .pas, .py, .sh, Main.java, solution.go.

Exit status: 0 when every preset listed works here, 1 when one does not; 125 for bad arguments
or when the spec asked for cannot be made.";

pub fn command() -> Command {
    Command::new("presets")
        .about("List the language presets and whether their toolchains work here, or print a preset's run spec")
        .after_help(PRESETS_AFTER)
        .arg(Arg::new("names").value_name("NAME").num_args(0..).help("Only these presets (names or aliases)"))
        .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the list as JSON"))
        .arg(
            Arg::new("compile")
                .long("compile")
                .action(ArgAction::SetTrue)
                .conflicts_with_all(["run", "json"])
                .requires("box")
                .help("Print the spec (a TOML profile) that compiles DIR's source with the preset NAME"),
        )
        .arg(
            Arg::new("run")
                .long("run")
                .action(ArgAction::SetTrue)
                .conflicts_with("json")
                .requires("box")
                .help("Print the spec (a TOML profile) that runs DIR's compiled program"),
        )
        .arg(Arg::new("box").long("box").value_name("DIR").help("The directory holding the source (bound at /box)"))
        .arg(
            Arg::new("memory")
                .long("memory")
                .value_name("SIZE")
                .help("With --run: the memory limit the run will get, for runtimes that must be told (java -Xmx, GOMEMLIMIT)"),
        )
        .arg(
            Arg::new("no-cgroups")
                .long("no-cgroups")
                .action(ArgAction::SetTrue)
                .help("With --compile: leave out the limits that need cgroups (memory, cpu_bandwidth) even where there are cgroups"),
        )
}

pub fn run(m: &ArgMatches) -> Result<ExitCode> {
    let wanted: Vec<&String> = m.get_many::<String>("names").map(|v| v.collect()).unwrap_or_default();
    let list: Vec<Preset> = if wanted.is_empty() {
        presets::names().iter().map(|n| presets::get(n)).collect::<Result<_, _>>()?
    } else {
        wanted.iter().map(|n| presets::get(n)).collect::<Result<_, _>>()?
    };
    if m.get_flag("compile") || m.get_flag("run") {
        return print_spec(m, &list);
    }
    if m.get_one::<String>("memory").is_some() {
        bail!("--memory goes with --run");
    }
    if m.get_flag("no-cgroups") {
        bail!("--no-cgroups goes with --compile");
    }
    let found: Vec<(Preset, Result<Toolchain, PresetError>)> = list
        .into_iter()
        .map(|p| {
            let tc = p.detect();
            (p, tc)
        })
        .collect();
    if m.get_flag("json") {
        let items: Vec<Value> = found.iter().map(|(p, tc)| to_json(p, tc)).collect();
        println!("{}", serde_json::to_string_pretty(&items).expect("serializable"));
    } else {
        for (p, tc) in &found {
            match tc {
                Ok(tc) => {
                    println!(
                        "{:<8} {:<13} ok       {} ({})",
                        p.name(),
                        p.source_name(),
                        tc.version,
                        tc.program.display()
                    );
                    for s in &tc.skipped {
                        println!("{:<23} passed over {s}", "");
                    }
                }
                Err(e) => println!("{:<8} {:<13} missing  {e}", p.name(), p.source_name()),
            }
        }
    }
    Ok(if found.iter().all(|(_, tc)| tc.is_ok()) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn to_json(p: &Preset, tc: &Result<Toolchain, PresetError>) -> Value {
    let mut v = json!({
        "name": p.name(),
        "aliases": p.aliases(),
        "source": p.source_name(),
        "ok": tc.is_ok(),
    });
    let o = v.as_object_mut().expect("an object");
    match tc {
        Ok(tc) => {
            o.insert("version".into(), json!(tc.version));
            o.insert("program".into(), json!(tc.program));
            o.insert("runtime".into(), json!(tc.runtime));
            o.insert("binds".into(), json!(tc.binds));
            o.insert("skipped".into(), json!(tc.skipped));
            o.insert("error".into(), Value::Null);
        }
        Err(e) => {
            o.insert("error".into(), json!(e.to_string()));
        }
    }
    v
}

/// `--compile` / `--run`: the spec for one preset and a directory, as TOML.
fn print_spec(m: &ArgMatches, list: &[Preset]) -> Result<ExitCode> {
    let [p] = list else { bail!("--compile and --run take exactly one preset NAME") };
    if m.get_flag("compile") && m.get_one::<String>("memory").is_some() {
        bail!("--memory goes with --run (a compile spec's memory limit is the profile's)");
    }
    if m.get_flag("run") && m.get_flag("no-cgroups") {
        bail!("--no-cgroups goes with --compile (a run spec has no cgroup limits: the caller sets them)");
    }
    let dir = PathBuf::from(m.get_one::<String>("box").expect("required by clap"));
    let dir = std::path::absolute(&dir).with_context(|| format!("--box {}", dir.display()))?;
    if !dir.is_dir() {
        bail!("--box {}: not a directory (it must hold {})", dir.display(), p.source_name());
    }
    let tc = p.detect()?;
    let spec = if m.get_flag("compile") {
        let cgroups = !m.get_flag("no-cgroups")
            && capsule::host::cgroups::discover(&Default::default()).source != capsule::host::cgroups::Source::None;
        p.compile_spec(&tc, &dir, cgroups).ok_or_else(|| anyhow!("preset `{}` has no compile step", p.name()))?
    } else {
        let memory = match m.get_one::<String>("memory") {
            Some(v) => Some(capsule::units::parse_size(v).map_err(|e| anyhow!("--memory: {e}"))?),
            None => None,
        };
        p.run_spec(&tc, &dir, memory)
    };
    spec.validate().map_err(|e| anyhow!("preset `{}`: {e}", p.name()))?;
    let step = if m.get_flag("compile") { "compile" } else { "run" };
    print!(
        "# capsule preset `{}`, {step} step, for {} ({}); docs/presets.md\n{}",
        p.name(),
        dir.display(),
        tc.version,
        presets::to_toml(&spec).map_err(|e| anyhow!(e))?
    );
    Ok(ExitCode::SUCCESS)
}
