//! isolate's command line, parsed as its getopt_long does: short options
//! clustered (`-sv`, `-b1`), long options by unique prefix (`--box=1`),
//! `--opt=VALUE` or `--opt VALUE`, an optional value only attached
//! (`-p4`, `--processes=4`), arguments permuted to the end, `--` ending the
//! options. Errors are isolate's usage errors: exit status 2.

/// One of isolate's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Init,
    Run,
    Cleanup,
    Version,
    CheckConfig,
    PrintCgRoot,
    Help,
}

/// Everything the command line says.
#[derive(Debug, Clone)]
pub struct Opts {
    pub mode: Option<Mode>,
    pub box_id: u32,
    pub chdir: Option<String>,
    pub cg: bool,
    /// `--cg-mem` in KiB.
    pub cg_mem: Option<u64>,
    /// `--cg-timing` or `--no-cg-timing` (isolate 1.x), which need `--cg`.
    pub cg_timing: bool,
    /// The directory rules in command-line order (checked when parsed).
    pub dirs: Vec<String>,
    pub no_default_dirs: bool,
    pub full_env: bool,
    pub env: Vec<String>,
    /// `-f`, `-k`, `-m` in KiB; 0 is "no limit" as in isolate.
    pub fsize: u64,
    pub stack: u64,
    pub mem: u64,
    /// `-n`; isolate's default 1024, 0 for no limit.
    pub open_files: u64,
    /// `-p`: None for isolate's default (one process), Some(0) for no limit.
    pub processes: Option<u64>,
    pub quota: Option<(u64, u64)>,
    pub stdin: Option<String>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub stderr_to_stdout: bool,
    pub silent: bool,
    pub verbose: u32,
    /// `-t`, `-w`, `-x` in milliseconds (isolate: `1000*atof(arg)`).
    pub time_ms: u64,
    pub wall_ms: u64,
    pub extra_ms: u64,
    pub meta: Option<String>,
    pub share_net: bool,
    /// `--inherit-fds`: the caller's descriptors above 2 reach the program.
    pub inherit_fds: bool,
    pub special_files: bool,
    pub wait: bool,
    pub syscalls: Option<u64>,
    /// The program and its arguments (`--run`).
    pub args: Vec<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            mode: None,
            box_id: 0,
            chdir: None,
            cg: false,
            cg_mem: None,
            cg_timing: false,
            dirs: Vec::new(),
            no_default_dirs: false,
            full_env: false,
            env: Vec::new(),
            fsize: 0,
            stack: 0,
            mem: 0,
            open_files: 1024,
            processes: None,
            quota: None,
            stdin: None,
            stdout: None,
            stderr: None,
            stderr_to_stdout: false,
            silent: false,
            verbose: 0,
            time_ms: 0,
            wall_ms: 0,
            extra_ms: 0,
            meta: None,
            share_net: false,
            inherit_fds: false,
            special_files: false,
            wait: false,
            syscalls: None,
            args: Vec::new(),
        }
    }
}

/// Whether an option takes a value: none, required, or optional (attached).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arg {
    No,
    Required,
    Optional,
}

/// isolate's options: long name, short letter, value.
const OPTIONS: [(&str, Option<char>, Arg); 42] = [
    ("as-uid", None, Arg::Required),
    ("as-gid", None, Arg::Required),
    ("box-id", Some('b'), Arg::Required),
    ("chdir", Some('c'), Arg::Required),
    ("cg", None, Arg::No),
    ("cg-mem", None, Arg::Required),
    ("cg-timing", None, Arg::No),
    ("check-config", None, Arg::No),
    ("cleanup", None, Arg::No),
    ("core", None, Arg::Required),
    ("dir", Some('d'), Arg::Required),
    ("no-default-dirs", Some('D'), Arg::No),
    ("fsize", Some('f'), Arg::Required),
    ("env", Some('E'), Arg::Required),
    ("extra-time", Some('x'), Arg::Required),
    ("full-env", Some('e'), Arg::No),
    ("help", None, Arg::No),
    ("inherit-fds", None, Arg::No),
    ("init", None, Arg::No),
    ("mem", Some('m'), Arg::Required),
    ("meta", Some('M'), Arg::Required),
    ("processes", Some('p'), Arg::Optional),
    ("quota", Some('q'), Arg::Required),
    ("run", None, Arg::No),
    ("share-net", None, Arg::No),
    ("silent", Some('s'), Arg::No),
    ("stack", Some('k'), Arg::Required),
    ("open-files", Some('n'), Arg::Required),
    ("print-cg-root", None, Arg::No),
    ("special-files", None, Arg::No),
    ("stderr", Some('r'), Arg::Required),
    ("stderr-to-stdout", None, Arg::No),
    ("stdin", Some('i'), Arg::Required),
    ("stdout", Some('o'), Arg::Required),
    ("syscalls", None, Arg::Required),
    ("time", Some('t'), Arg::Required),
    ("tty-hack", None, Arg::No),
    ("verbose", Some('v'), Arg::No),
    ("version", None, Arg::No),
    ("wait", None, Arg::No),
    ("wall-time", Some('w'), Arg::Required),
    ("no-cg-timing", None, Arg::No),
];

/// Options isolate has that capsule refuses, and why.
pub const REFUSED: [(&str, &str); 3] = [
    ("as-uid", "it acts for another user, which needs root; capsule runs every box as its caller"),
    ("as-gid", "it acts for another group, which needs root; capsule runs every box as its caller"),
    (
        "tty-hack",
        "capsule runs the program in a new session without a controlling terminal, so it cannot push input into yours",
    ),
];

/// A usage error: the message (without the program name) for stderr.
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

/// isolate's `opt_uint`: a decimal that fits in a signed int.
fn uint(v: &str) -> Result<u64, Usage> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Usage(format!("Invalid numeric parameter: {v}")));
    }
    match v.parse::<u64>() {
        Ok(n) if n <= i32::MAX as u64 => Ok(n),
        _ => Err(Usage(format!("Numeric parameter out of range: {v}"))),
    }
}

/// C's `atof` as isolate uses it for times: the longest leading decimal
/// number, 0 when there is none.
pub fn atof(v: &str) -> f64 {
    let t = v.trim_start();
    (1..=t.len()).rev().filter(|&n| t.is_char_boundary(n)).find_map(|n| t[..n].parse::<f64>().ok()).unwrap_or(0.0)
}

fn ms(v: &str) -> u64 {
    let x = 1000.0 * atof(v);
    if x.is_finite() && x > 0.0 {
        x.min(i32::MAX as f64) as u64
    } else {
        0
    }
}

/// Parses isolate's arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Opts, Usage> {
    let mut o = Opts::default();
    let mut rest = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            rest.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let (long, kind) = lookup_long(name)?;
            let value = match (kind, attached) {
                (Arg::No, Some(_)) => return Err(Usage(format!("option '--{long}' doesn't allow an argument"))),
                (Arg::No, None) => None,
                (Arg::Optional, v) => v,
                (Arg::Required, Some(v)) => Some(v),
                (Arg::Required, None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => return Err(Usage(format!("option '--{long}' requires an argument"))),
                },
            };
            apply(&mut o, long, value)?;
        } else if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                let Some((long, _, kind)) = OPTIONS.iter().find(|(_, s, _)| *s == Some(c)) else {
                    return Err(Usage(format!("invalid option -- '{c}'")));
                };
                let tail: String = chars[k..].iter().collect();
                let value = match kind {
                    Arg::No => None,
                    Arg::Optional => {
                        k = chars.len();
                        (!tail.is_empty()).then_some(tail)
                    }
                    Arg::Required => {
                        k = chars.len();
                        if !tail.is_empty() {
                            Some(tail)
                        } else if let Some(v) = args.get(i) {
                            i += 1;
                            Some(v.clone())
                        } else {
                            return Err(Usage(format!("option requires an argument -- '{c}'")));
                        }
                    }
                };
                apply(&mut o, long, value)?;
            }
        } else {
            rest.push(a.clone());
        }
    }
    o.args = rest;
    Ok(o)
}

/// A long option by its name or a unique prefix of it (getopt_long).
fn lookup_long(name: &str) -> Result<(&'static str, Arg), Usage> {
    if let Some((long, _, kind)) = OPTIONS.iter().find(|(l, _, _)| *l == name) {
        return Ok((long, *kind));
    }
    let matches: Vec<_> = OPTIONS.iter().filter(|(l, _, _)| !name.is_empty() && l.starts_with(name)).collect();
    match matches.as_slice() {
        [(long, _, kind)] => Ok((long, *kind)),
        [] => Err(Usage(format!("unrecognized option '--{name}'"))),
        many => {
            let names: Vec<String> = many.iter().map(|(l, _, _)| format!("'--{l}'")).collect();
            Err(Usage(format!("option '--{name}' is ambiguous; possibilities: {}", names.join(" "))))
        }
    }
}

fn apply(o: &mut Opts, long: &str, value: Option<String>) -> Result<(), Usage> {
    let v = value.unwrap_or_default();
    if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == long) {
        return Err(Usage(format!("option '--{long}' is not supported by capsule isolate: {why}")));
    }
    let mut mode = |m: Mode| match o.mode {
        Some(cur) if cur != m => Err(Usage("Only one command is allowed.".into())),
        _ => {
            o.mode = Some(m);
            Ok(())
        }
    };
    match long {
        "init" => mode(Mode::Init)?,
        "run" => mode(Mode::Run)?,
        "cleanup" => mode(Mode::Cleanup)?,
        "version" => mode(Mode::Version)?,
        "check-config" => mode(Mode::CheckConfig)?,
        "print-cg-root" => mode(Mode::PrintCgRoot)?,
        "help" => mode(Mode::Help)?,
        "box-id" => o.box_id = uint(&v)? as u32,
        "chdir" => o.chdir = Some(v),
        "cg" => o.cg = true,
        "cg-mem" => o.cg_mem = Some(uint(&v)?),
        // isolate 1.x: CPU time of the whole control group; with --cg
        // capsule always measures it so. `--no-cg-timing` killed on the
        // main process's CPU time and then judged the total of all (TO
        // above --time): the same verdicts as the group's, killed sooner.
        "cg-timing" | "no-cg-timing" => o.cg_timing = true,
        "core" => {
            if uint(&v)? != 0 {
                return Err(Usage(format!(
                    "option '--core={v}' is not supported by capsule isolate: core dumps are always off in capsule (--core=0 is)"
                )));
            }
        }
        "dir" => {
            super::rules::DirRule::parse(&v).map_err(|e| Usage(format!("Invalid directory rule '{v}': {e}")))?;
            o.dirs.push(v);
        }
        "no-default-dirs" => o.no_default_dirs = true,
        "full-env" => o.full_env = true,
        "env" => {
            if v.starts_with('=') || v.is_empty() {
                return Err(Usage(format!("Invalid environment specified: {v}")));
            }
            o.env.push(v);
        }
        "fsize" => o.fsize = uint(&v)?,
        "stack" => o.stack = uint(&v)?,
        "mem" => o.mem = uint(&v)?,
        "open-files" => o.open_files = uint(&v)?,
        "processes" => o.processes = Some(if v.is_empty() { 0 } else { uint(&v)? }),
        "quota" => {
            let Some((b, i)) = v.split_once(',') else {
                return Err(Usage(format!("Invalid quota specified: {v}")));
            };
            o.quota = Some((uint(b)?, uint(i)?));
        }
        "stdin" => o.stdin = Some(v),
        "stdout" => o.stdout = Some(v),
        "stderr" => {
            o.stderr = Some(v);
            o.stderr_to_stdout = false;
        }
        "stderr-to-stdout" => {
            o.stderr = None;
            o.stderr_to_stdout = true;
        }
        "silent" => o.silent = true,
        "verbose" => o.verbose += 1,
        "time" => o.time_ms = ms(&v),
        "wall-time" => o.wall_ms = ms(&v),
        "extra-time" => o.extra_ms = ms(&v),
        "meta" => o.meta = Some(v),
        "share-net" => o.share_net = true,
        "inherit-fds" => o.inherit_fds = true,
        "special-files" => o.special_files = true,
        "wait" => o.wait = true,
        "syscalls" => o.syscalls = Some(uint(&v)?),
        other => unreachable!("option table and apply() disagree on --{other}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Opts, Usage> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn getopt_forms() {
        let o = p(&["-b1", "--box=7", "-sv", "-p", "--processes=3", "-t", "1.5", "--run", "--", "./a", "-x"]).unwrap();
        assert_eq!(o.box_id, 7);
        assert!(o.silent);
        assert_eq!(o.verbose, 1);
        assert_eq!(o.processes, Some(3));
        assert_eq!(o.time_ms, 1500);
        assert_eq!(o.mode, Some(Mode::Run));
        assert_eq!(o.args, ["./a", "-x"]);
        let o = p(&["-p", "--run", "prog"]).unwrap();
        assert_eq!((o.processes, o.args.as_slice()), (Some(0), ["prog".to_string()].as_slice()));
        let o = p(&["-p4", "-M", "m", "--meta=n", "--init"]).unwrap();
        assert_eq!((o.processes, o.meta.as_deref()), (Some(4), Some("n")));
    }

    #[test]
    fn usage_errors() {
        assert_eq!(p(&["--bogus"]).unwrap_err().0, "unrecognized option '--bogus'");
        assert_eq!(p(&["-z"]).unwrap_err().0, "invalid option -- 'z'");
        assert_eq!(p(&["--time"]).unwrap_err().0, "option '--time' requires an argument");
        assert_eq!(p(&["-t"]).unwrap_err().0, "option requires an argument -- 't'");
        assert_eq!(p(&["--cg=1"]).unwrap_err().0, "option '--cg' doesn't allow an argument");
        assert!(p(&["--s"]).unwrap_err().0.starts_with("option '--s' is ambiguous; possibilities: '--share-net'"));
        assert_eq!(p(&["-b", "x"]).unwrap_err().0, "Invalid numeric parameter: x");
        assert_eq!(p(&["-b", "99999999999"]).unwrap_err().0, "Numeric parameter out of range: 99999999999");
        assert_eq!(p(&["--init", "--run"]).unwrap_err().0, "Only one command is allowed.");
        assert!(p(&["--tty-hack"]).unwrap_err().0.contains("'--tty-hack' is not supported by capsule isolate"));
        assert!(p(&["--core=5"]).unwrap_err().0.contains("core dumps are always off"));
        assert!(p(&["--core=0"]).is_ok());
        assert_eq!(p(&["-E", "=x"]).unwrap_err().0, "Invalid environment specified: =x");
    }

    #[test]
    fn times_like_atof() {
        assert_eq!(ms("0.25"), 250);
        assert_eq!(ms("2s"), 2000);
        assert_eq!(ms("x"), 0);
        assert_eq!(ms("-1"), 0);
    }
}
