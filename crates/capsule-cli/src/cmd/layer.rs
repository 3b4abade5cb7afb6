//! `capsule layer list|diff|commit|discard|record|review`, and the post-run
//! menu the run side shows when a `--layer` run ends on a terminal.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use capsule::layer::{quote_path, CommitReport, Layer};
use clap::{Arg, ArgAction, ArgMatches, Command};

const LAYER_AFTER: &str = "\
A layer is the directory `capsule run --layer DIR` writes every change to; the host is
never modified by the run. Review the changes, then commit them to the host or discard them.
PATH arguments select the changes at or below PATH (relative paths are relative to the
current directory). Lines of `list`: A (added), M (modified), D (deleted), two spaces, the path,
then, in parentheses, the size of the layer's file (`sparse` when it has holes) and its special
bits (setuid, setgid, sticky). A name holding control characters or invalid UTF-8 is shown in
double quotes with C escapes (\\n, \\033, \\377), as git does; `--json` gives it exactly.

commit applies each entry atomically (built beside its destination, then renamed over it),
never through a symbolic link on the host, and refuses (naming it) an entry whose host
original changed since the run recorded it; --force overrides. Holes of sparse files stay
holes. Setuid and setgid bits are not committed unless --keep-special-bits (they stay in the
layer as a mode change). What is not committed stays in the layer. docs/layers.md describes
the directory format and the rules.

A run leaves its writes to the kernel's write-back, as a program outside a sandbox does
(`fsync` inside the run does not reach the disk); `commit` and `record` sync the layer first.
After a restart before that, runs and commits refuse the layer: look at it with `diff`, then
keep it as it is with `recover`, or `discard` it.

Exit status: 0 when everything asked for was done; 1 when something was refused or failed
(each named), or the layer is in use by a running capsule; 125 for bad arguments.";

fn dir_arg() -> Arg {
    Arg::new("dir").value_name("DIR").required(true).help("The layer directory")
}

fn paths_arg() -> Arg {
    Arg::new("paths").value_name("PATH").num_args(0..).help("Only the changes at or below these host paths")
}

pub fn command() -> Command {
    Command::new("layer")
        .about("Review, commit or discard the changes a `--layer` run left in its layer directory")
        .after_help(LAYER_AFTER)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("list")
                .about("List the changes: A, M or D, two spaces, the host path (quoted when needed), size and special bits")
                .arg(dir_arg())
                .arg(paths_arg())
                .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print a JSON list of {kind, path, what}")),
        )
        .subcommand(
            Command::new("diff")
                .about("Show the changes: unified diffs of text files, summaries of the rest (files over 64 MiB: sizes only, not read)")
                .arg(dir_arg())
                .arg(paths_arg()),
        )
        .subcommand(
            Command::new("commit")
                .about("Apply the changes to the host; conflicting entries are refused and named")
                .arg(dir_arg())
                .arg(paths_arg())
                .arg(Arg::new("force").long("force").action(ArgAction::SetTrue).help("Commit conflicting entries too (the host's newer version is lost)"))
                .arg(
                    Arg::new("keep_special_bits")
                        .long("keep-special-bits")
                        .action(ArgAction::SetTrue)
                        .help("Commit setuid and setgid bits too (by default they are dropped and stay in the layer)"),
                ),
        )
        .subcommand(Command::new("discard").about("Delete the layer directory and everything in it").arg(dir_arg()))
        .subcommand(
            Command::new("recover")
                .about("Keep a layer as it is after a restart interrupted the write-back of its last run (see docs/layers.md)")
                .arg(dir_arg()),
        )
        .subcommand(Command::new("record").about("Record the host originals of new changes (a run does it when it ends)").arg(dir_arg()))
        .subcommand(Command::new("review").about("The interactive menu a --layer run shows when it ends on a terminal").arg(dir_arg()))
}

fn absolute(p: &str) -> Result<PathBuf> {
    let p = Path::new(p);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    Ok(cwd.join(p))
}

fn dir_of(m: &ArgMatches) -> Result<PathBuf> {
    absolute(m.get_one::<String>("dir").expect("required"))
}

fn paths_of(m: &ArgMatches) -> Result<Vec<PathBuf>> {
    m.get_many::<String>("paths").into_iter().flatten().map(|p| absolute(p)).collect()
}

/// Runs `capsule layer ...`; failures print `capsule: error: ...` and exit 1.
pub fn run(m: &ArgMatches) -> ExitCode {
    match dispatch(m) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("capsule: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(m: &ArgMatches) -> Result<ExitCode> {
    let (sub, m) = m.subcommand().expect("subcommand_required");
    let dir = dir_of(m)?;
    let layer = Layer::open(&dir)?;
    match sub {
        "list" => {
            let _lock = layer.lock_run(false)?;
            warn_interrupted(&layer)?;
            let changes = layer.changes(&paths_of(m)?)?;
            let mut out = std::io::stdout().lock();
            if m.get_flag("json") {
                writeln!(out, "{}", serde_json::to_string_pretty(&changes).expect("serializable"))?;
            } else {
                for c in &changes {
                    writeln!(out, "{c}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        "diff" => {
            let _lock = layer.lock_run(false)?;
            warn_interrupted(&layer)?;
            let mut out = std::io::stdout().lock();
            layer.diff(&paths_of(m)?, &mut out)?;
            Ok(ExitCode::SUCCESS)
        }
        "commit" => {
            let lock = layer.lock_run(true)?;
            let report = layer.commit(&lock, &paths_of(m)?, m.get_flag("force"), m.get_flag("keep_special_bits"))?;
            print_report(&report, &dir, &mut std::io::stdout().lock(), &mut std::io::stderr().lock())?;
            Ok(if report.complete() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        "discard" => {
            let lock = layer.lock_run(true)?;
            layer.discard(lock)?;
            eprintln!("capsule: discarded the layer {}", quote_path(&dir));
            Ok(ExitCode::SUCCESS)
        }
        "record" => {
            let lock = layer.lock_run(true)?;
            layer.settle(&lock)?;
            let n = layer.record_originals(&lock)?;
            eprintln!("capsule: recorded {n} new original(s) in {}", quote_path(&dir.join("layer.json")));
            Ok(ExitCode::SUCCESS)
        }
        "recover" => {
            let lock = layer.lock_run(true)?;
            if layer.recover(&lock)? {
                eprintln!(
                    "capsule: the layer {} is kept as it is; its last run's writes that a restart lost stay lost",
                    quote_path(&dir)
                );
            } else {
                eprintln!("capsule: the layer {} needed no recovery", quote_path(&dir));
            }
            Ok(ExitCode::SUCCESS)
        }
        "review" => {
            drop(layer);
            // `sh`: the user's shell in the layer's files (no run to go back to).
            let upper = dir.join("upper");
            review_menu(&dir, || {
                let shell = std::env::var_os("SHELL").filter(|s| !s.is_empty()).unwrap_or_else(|| "/bin/sh".into());
                eprintln!(
                    "capsule: a shell in {} (the layer's files); exit it to come back to the menu",
                    quote_path(&upper)
                );
                let st = std::process::Command::new(&shell)
                    .current_dir(&upper)
                    .status()
                    .with_context(|| format!("cannot run {}", quote_path(Path::new(&shell))))?;
                if !st.success() {
                    eprintln!("capsule: the shell exited with {st}");
                }
                Ok(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        _ => unreachable!("subcommand_required"),
    }
}

/// Says so when a restart interrupted the write-back of the layer's last
/// run: what is listed may lack that run's newest writes.
fn warn_interrupted(layer: &Layer) -> Result<()> {
    if let Some(boot) = layer.interrupted()? {
        eprintln!(
            "capsule: warning: the layer {} was written with write-back deferred in an earlier boot ({boot}) and never synced; \
             if the machine crashed, the newest files of its last run may be missing or incomplete \
             (`capsule layer recover` keeps it as it is)",
            quote_path(layer.dir())
        );
    }
    Ok(())
}

/// The report as lines: what was committed (for stdout), then the
/// refusals and the summary (for stderr).
pub(crate) fn report_lines(r: &CommitReport, dir: &Path) -> (Vec<String>, Vec<String>) {
    let done = r.committed.iter().map(|c| format!("committed  {}  {}", c.kind.letter(), quote_path(&c.path))).collect();
    let mut refused: Vec<String> = Vec::new();
    refused.extend(r.conflicts.iter().map(|c| format!("capsule: conflict, not committed: {c}")));
    refused.extend(r.errors.iter().map(|c| format!("capsule: not committed: {c}")));
    refused.extend(r.nothing_at.iter().map(|p| format!("capsule: nothing to commit at or below {}", quote_path(p))));
    refused.extend(r.special_bits_dropped.iter().map(|p| {
        format!(
            "capsule: committed {} without its setuid/setgid bits; they stay in the layer (`capsule layer commit --keep-special-bits` commits them)",
            quote_path(p)
        )
    }));
    if !r.conflicts.is_empty() || !r.errors.is_empty() {
        refused.push(format!(
            "capsule: committed {} change(s); {} conflict(s) and {} other refusal(s) stay in the layer {}{}",
            r.committed.len(),
            r.conflicts.len(),
            r.errors.len(),
            quote_path(dir),
            if r.conflicts.is_empty() { "" } else { " (`capsule layer commit --force` overrides conflicts)" }
        ));
    } else if r.committed.is_empty() && r.nothing_at.is_empty() {
        refused.push("capsule: nothing to commit".into());
    }
    (done, refused)
}

fn print_report(r: &CommitReport, dir: &Path, out: &mut dyn Write, err: &mut dyn Write) -> std::io::Result<()> {
    let (done, refused) = report_lines(r, dir);
    for l in done {
        writeln!(out, "{l}")?;
    }
    for l in refused {
        writeln!(err, "{l}")?;
    }
    Ok(())
}

const MENU: &str = "[c]ommit all, commit [s]ome, [i]gnore (keep the layer), [d]iff, [l]ist, [sh]ell, [q]uit? ";
/// At most this many changes are listed before the menu (`l` lists all).
const SHOWN: usize = 20;

/// The post-run menu (MBOX's): called by the run side when a `--layer` run
/// ends and stdin is a terminal, and by `capsule layer review`. Reads one
/// answer per line from stdin, writes to stderr (stdout may be the run's
/// output file). `shell` is called for `sh`, with the layer unlocked, and
/// the menu comes back afterwards. The layer's lock must be free (the
/// run's released).
pub fn review_menu(layer_dir: &Path, shell: impl Fn() -> Result<()>) -> Result<()> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    review_menu_io(layer_dir, &mut input, &mut std::io::stderr(), &shell)
}

fn read_answer(input: &mut dyn BufRead) -> Result<Option<String>> {
    let mut line = String::new();
    if input.read_line(&mut line).context("cannot read the answer from stdin")? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim().to_string()))
}

fn list_changes(out: &mut dyn Write, changes: &[capsule::layer::Change], limit: usize) -> std::io::Result<()> {
    for c in changes.iter().take(limit) {
        writeln!(out, "  {c}")?;
    }
    if changes.len() > limit {
        writeln!(out, "  ... and {} more (l lists them all)", changes.len() - limit)?;
    }
    Ok(())
}

pub fn review_menu_io(
    layer_dir: &Path,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    shell: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let layer = Layer::open(layer_dir)?;
    let kept = |out: &mut dyn Write| -> Result<()> {
        writeln!(
            out,
            "capsule: the layer is kept in {}; `capsule layer review {}` comes back to it",
            quote_path(layer_dir),
            quote_path(layer_dir)
        )?;
        Ok(())
    };
    'outer: loop {
        let lock = layer.lock_run(true)?;
        let changes = layer.changes(&[])?;
        if changes.is_empty() {
            writeln!(out, "capsule: the layer {} holds no changes", quote_path(layer_dir))?;
            return Ok(());
        }
        writeln!(out, "capsule: the layer {} holds {} change(s):", quote_path(layer_dir), changes.len())?;
        list_changes(out, &changes, SHOWN)?;
        loop {
            write!(out, "{MENU}")?;
            out.flush()?;
            let Some(answer) = read_answer(input)? else {
                writeln!(out)?;
                return kept(out);
            };
            match answer.as_str() {
                "c" => {
                    let r = layer.commit(&lock, &[], false, false)?;
                    let (done, refused) = report_lines(&r, layer_dir);
                    for l in done.iter().chain(&refused) {
                        writeln!(out, "{l}")?;
                    }
                    drop(lock);
                    continue 'outer;
                }
                "s" => {
                    let mut chosen = Vec::new();
                    for c in &changes {
                        let details = c.details();
                        let sep = if details.is_empty() { "" } else { "; " };
                        write!(
                            out,
                            "commit {}  {} ({}{sep}{details})? [y/n] ",
                            c.kind.letter(),
                            quote_path(&c.path),
                            c.what
                        )?;
                        out.flush()?;
                        match read_answer(input)?.as_deref() {
                            Some("y") | Some("yes") => chosen.push(c.path.clone()),
                            Some(_) => {}
                            None => {
                                writeln!(out)?;
                                return kept(out);
                            }
                        }
                    }
                    if chosen.is_empty() {
                        writeln!(out, "capsule: nothing chosen")?;
                        continue;
                    }
                    let r = layer.commit_entries(&lock, &chosen, false, false)?;
                    let (done, refused) = report_lines(&r, layer_dir);
                    for l in done.iter().chain(&refused) {
                        writeln!(out, "{l}")?;
                    }
                    drop(lock);
                    continue 'outer;
                }
                "i" | "q" => return kept(out),
                "d" => {
                    if let Err(e) = layer.diff(&[], out) {
                        writeln!(out, "capsule: error: {e}")?;
                    }
                }
                "l" => list_changes(out, &changes, usize::MAX)?,
                "sh" => {
                    drop(lock);
                    if let Err(e) = shell() {
                        writeln!(out, "capsule: the shell failed: {e:#}")?;
                    }
                    continue 'outer;
                }
                "" => {}
                other => writeln!(out, "capsule: unknown choice `{}`", capsule::layer::quote(other.as_bytes()))?,
            }
        }
    }
}
