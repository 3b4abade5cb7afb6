//! `capsule mcp`: a Model Context Protocol server over stdio (JSON-RPC 2.0,
//! one message a line; docs/agents.md). An agent runs commands in a named
//! layer that the next call reuses, and the person (or the agent, when
//! allowed) reviews and commits what changed: `run`, `layer_list`,
//! `layer_diff`, `layer_commit`, `layer_discard`, `why`.
//!
//! Stdout carries protocol messages only; requests are answered as they
//! finish (a `run` on a thread of its own, so `notifications/cancelled`
//! can kill it); anything that is not a JSON-RPC message gets one error
//! response and nothing else.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use capsule::layer::{quote_path, Layer};
use capsule::sandbox::{Config, Sandbox};
use capsule::spec::{self, RunSpec, Stdio};
use capsule::supervisor::explain::{self, Query};
use clap::{Arg, ArgMatches, Command};
use serde_json::{json, Value};

use super::last;

const ABOUT: &str = "A Model Context Protocol server on stdio: run commands in a reviewable layer";
const AFTER: &str = "\
Tools: run (a command in a named layer, kept for the next call: the host is untouched),
layer_list, layer_diff, layer_commit (some paths or all), layer_discard, why. Results carry
the run's result and what it was refused (violations). Layers live in --layers (default
$XDG_STATE_HOME/capsule/mcp, else ~/.local/state/capsule/mcp), hidden from every run.
Set-up for Claude Code, Codex and Gemini CLI: docs/agents.md.";

/// Protocol versions this server speaks; the first is offered.
const VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];
/// Bytes of each output stream a run returns.
const CAPTURE: u64 = 64 << 10;

pub fn command() -> Command {
    Command::new("mcp")
        .about(ABOUT)
        .after_help(AFTER)
        .arg(Arg::new("layers").long("layers").value_name("DIR").help("Where the named layers live"))
        .arg(
            Arg::new("profile")
                .long("profile")
                .value_name("FILE")
                .help("The run spec every `run` starts from (TOML, as capsule run --profile)"),
        )
        .arg(
            Arg::new("wall-time")
                .long("wall-time")
                .value_name("DURATION")
                .help("Longest a run may take unless the call says (default 10m)"),
        )
        .arg(
            Arg::new("no-commit")
                .long("no-commit")
                .action(clap::ArgAction::SetTrue)
                .help("Refuse layer_commit and layer_discard: only the person commits (capsule layer commit)"),
        )
}

/// What every request handler shares.
struct Server {
    out: Mutex<std::io::Stdout>,
    layers: PathBuf,
    base: RunSpec,
    wall_time: Duration,
    no_commit: bool,
    sandbox: Mutex<Option<Arc<Sandbox>>>,
    /// Requests in flight that can be cancelled, by id (as JSON text).
    running: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Their threads, joined when the input ends (their answers still go out).
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// A JSON-RPC error.
struct RpcError {
    code: i64,
    message: String,
}

fn rpc(code: i64, message: impl Into<String>) -> RpcError {
    RpcError { code, message: message.into() }
}

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

impl Server {
    fn send(&self, msg: &Value) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{msg}");
        let _ = out.flush();
    }

    fn reply(&self, id: &Value, r: Result<Value, RpcError>) {
        match r {
            Ok(result) => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result})),
            Err(e) => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})),
        }
    }

    fn sandbox(&self) -> Result<Arc<Sandbox>> {
        let mut s = self.sandbox.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sb) = s.as_ref() {
            return Ok(sb.clone());
        }
        let bin = std::env::current_exe().context("locating the capsule binary")?;
        let sb = Arc::new(
            Sandbox::start(Config { parallel: 2, capsule_bin: Some(bin), ..Default::default() })
                .map_err(|e| anyhow!("starting the supervisor: {e}"))?,
        );
        *s = Some(sb.clone());
        Ok(sb)
    }

    fn layer_dir(&self, args: &Value) -> Result<(String, PathBuf), RpcError> {
        let name = match args.get("layer") {
            None | Some(Value::Null) => "default",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(rpc(INVALID_PARAMS, "layer: a name")),
        };
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !ok {
            return Err(rpc(INVALID_PARAMS, "layer: 1 to 64 of A-Z a-z 0-9 . _ -, not starting with ."));
        }
        Ok((name.to_string(), self.layers.join(name)))
    }
}

/// The tools, as `tools/list` gives them.
fn tools() -> Value {
    let layer = json!({"type": "string", "description": "The layer's name (default `default`): a run's changes land there, the next run sees them, the host is untouched until layer_commit"});
    let paths = json!({"type": "array", "items": {"type": "string"}, "description": "Absolute host paths (at or below); none: all"});
    json!([
        {
            "name": "run",
            "description": "Run a command in capsule's sandbox over a copy-on-write layer: the host is read-only, the working directory and home writable into the layer, secrets hidden, network loopback only. Returns the exit status, stdout, stderr and what the sandbox refused (violations, each with the option that would allow it). Review the changes with layer_diff.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "A shell command line (run by /bin/sh -c)"},
                    "argv": {"type": "array", "items": {"type": "string"}, "description": "The program and its arguments, instead of command"},
                    "cwd": {"type": "string", "description": "Absolute working directory (default: the server's)"},
                    "layer": layer,
                    "stdin": {"type": "string", "description": "Text for the command's standard input"},
                    "timeout_seconds": {"type": "number", "description": "Wall-time limit"}
                }
            }
        },
        {
            "name": "layer_list",
            "description": "List what runs in the layer changed: A added, M modified, D deleted, with the host path.",
            "inputSchema": {"type": "object", "properties": {"layer": layer, "paths": paths}}
        },
        {
            "name": "layer_diff",
            "description": "Unified diffs of the layer's changed text files (summaries of the rest).",
            "inputSchema": {"type": "object", "properties": {"layer": layer, "paths": paths}}
        },
        {
            "name": "layer_commit",
            "description": "Apply the layer's changes at or below paths (none: all) to the host; a path changed on the host since the run is a conflict and is not committed.",
            "inputSchema": {"type": "object", "properties": {"layer": layer, "paths": paths}}
        },
        {
            "name": "layer_discard",
            "description": "Throw the layer's changes away.",
            "inputSchema": {"type": "object", "properties": {"layer": layer}, "required": ["layer"]}
        },
        {
            "name": "why",
            "description": "Say whether a run may write a path, see a path or reach a host, the rule that decides and the option that would allow it, without running anything.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "write": {"type": "string"}, "read": {"type": "string"},
                    "host": {"type": "string", "description": "NAME or NAME:PORT"}, "layer": layer
                }
            }
        }
    ])
}

fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, RpcError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(String::from).ok_or_else(|| rpc(INVALID_PARAMS, format!("{what}: strings"))))
            .collect(),
        Some(_) => Err(rpc(INVALID_PARAMS, format!("{what}: an array of strings"))),
    }
}

fn host_paths(args: &Value) -> Result<Vec<PathBuf>, RpcError> {
    let list = strings(args.get("paths"), "paths")?;
    list.into_iter()
        .map(|p| {
            let p = PathBuf::from(p);
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(rpc(INVALID_PARAMS, format!("paths: {} is not absolute", quote_path(&p))))
            }
        })
        .collect()
}

/// A tool's answer: text for the model and the structured result.
fn answer(text: String, structured: Value, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": is_error})
}

/// The spec of a `run` call.
fn run_spec(s: &Server, args: &Value, layer: &Path) -> Result<RunSpec, RpcError> {
    let mut spec = s.base.clone();
    spec.argv = match (args.get("command"), args.get("argv")) {
        (Some(Value::String(c)), None) => vec!["/bin/sh".into(), "-c".into(), c.clone()],
        (None, Some(_)) => strings(args.get("argv"), "argv")?,
        _ => return Err(rpc(INVALID_PARAMS, "give command (a string) or argv (an array), one of them")),
    };
    if spec.argv.is_empty() {
        return Err(rpc(INVALID_PARAMS, "argv: empty"));
    }
    let cwd = match args.get("cwd") {
        Some(Value::String(c)) => PathBuf::from(c),
        None | Some(Value::Null) => std::env::current_dir().map_err(|e| rpc(INVALID_PARAMS, format!("cwd: {e}")))?,
        Some(_) => return Err(rpc(INVALID_PARAMS, "cwd: a string")),
    };
    if !cwd.is_absolute() {
        return Err(rpc(INVALID_PARAMS, "cwd: an absolute path"));
    }
    spec.cwd = Some(cwd);
    spec.cwd_fallback = false;
    spec.layers = vec![layer.to_path_buf()];
    // No run sees another layer of the server's (nor commits one).
    spec.filesystem.hide.push(s.layers.clone());
    spec.explain = true;
    spec.stdout = Some(Stdio::Capture(spec::Capture { capture: CAPTURE }));
    spec.stderr = Some(Stdio::Capture(spec::Capture { capture: CAPTURE }));
    let secs = match args.get("timeout_seconds") {
        None | Some(Value::Null) => s.wall_time.as_secs_f64(),
        Some(v) => v.as_f64().filter(|t| *t > 0.0 && *t < 1e7).ok_or_else(|| rpc(INVALID_PARAMS, "timeout_seconds"))?,
    };
    spec.limits.wall_time = Some(Duration::from_secs_f64(secs));
    spec.validate().map_err(|e| rpc(INVALID_PARAMS, e.to_string()))?;
    Ok(spec)
}

/// Runs a `run` call to its end (or until cancelled).
fn call_run(s: &Server, args: &Value, cancel: &AtomicBool) -> Result<Value, RpcError> {
    let (name, dir) = s.layer_dir(args)?;
    let spec = run_spec(s, args, &dir)?;
    let stdin = match args.get("stdin") {
        Some(Value::String(t)) => Some(t.clone()),
        None | Some(Value::Null) => None,
        Some(_) => return Err(rpc(INVALID_PARAMS, "stdin: a string")),
    };
    let fail = |e: String| Ok(answer(format!("capsule could not run it: {e}"), json!({"error": e}), true));
    if let Err(e) = std::fs::create_dir_all(&s.layers) {
        return fail(format!("creating {}: {e}", quote_path(&s.layers)));
    }
    let sb = match s.sandbox() {
        Ok(sb) => sb,
        Err(e) => return fail(format!("{e:#}")),
    };
    // Input through a pipe the server feeds from a thread (the run may not read it all).
    let (input, feeder) = match stdin {
        Some(text) => {
            let (r, w) = capsule::sys::pipe2(libc::O_CLOEXEC).map_err(|e| rpc(-32603, format!("pipe2: errno {e}")))?;
            let t = std::thread::spawn(move || {
                let mut w = std::fs::File::from(w);
                let _ = w.write_all(text.as_bytes());
            });
            (Some(r), Some(t))
        }
        None => (None, None),
    };
    use std::os::fd::AsFd;
    let stdio = capsule::sandbox::StdioFds { stdin: input.as_ref().map(|f| f.as_fd()), ..Default::default() };
    let mut h = match sb.run_with(spec, stdio) {
        Ok(h) => h,
        Err(e) => return fail(e.to_string()),
    };
    drop(input);
    let mut killed = false;
    let res = loop {
        match h.try_wait() {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => return fail(e.to_string()),
        }
        if cancel.load(Ordering::SeqCst) && !killed {
            let _ = h.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if let Some(t) = feeder {
        let _ = t.join();
    }
    let mut text = res.summary().replacen("capsule: ", "", 1);
    text.push('\n');
    for (what, c) in [("stdout", &res.stdout), ("stderr", &res.stderr)] {
        if let Some(c) = c.as_ref().filter(|c| c.bytes > 0) {
            text.push_str(&format!("--- {what}{} ---\n{}\n", if c.truncated { " (truncated)" } else { "" }, c.text));
        }
    }
    text.push_str(&explain::block(&res).replace("capsule: ", ""));
    let pending = Layer::open(&dir).and_then(|l| l.changes(&[])).map(|c| c.len()).unwrap_or(0);
    text.push_str(&format!(
        "layer {name}: {pending} change(s) pending, not on the host (layer_diff to review, layer_commit to apply)\n"
    ));
    let is_error = res.status == capsule::Status::Error;
    let result = serde_json::to_value(&res).unwrap_or(Value::Null);
    Ok(answer(text, json!({"layer": name, "pending_changes": pending, "result": result}), is_error))
}

fn call_layer(s: &Server, tool: &str, args: &Value) -> Result<Value, RpcError> {
    let (name, dir) = s.layer_dir(args)?;
    let paths = host_paths(args)?;
    if s.no_commit && (tool == "layer_commit" || tool == "layer_discard") {
        return Ok(answer(
            format!("this server leaves commits to the person: capsule layer review {}", quote_path(&dir)),
            json!({"error": "refused by --no-commit"}),
            true,
        ));
    }
    let run = || -> Result<(String, Value, bool)> {
        let layer = match Layer::open(&dir) {
            Ok(l) => l,
            Err(_) if tool != "layer_commit" && !dir.exists() => {
                return Ok((format!("layer {name}: no changes (no run used it)"), json!({"changes": []}), false))
            }
            Err(e) => return Err(e.into()),
        };
        Ok(match tool {
            "layer_list" => {
                let _lock = layer.lock_run(false)?;
                let changes = layer.changes(&paths)?;
                let mut text: String = changes.iter().map(|c| format!("{c}\n")).collect();
                if text.is_empty() {
                    text = format!("layer {name}: no changes\n");
                }
                (text, json!({"changes": changes}), false)
            }
            "layer_diff" => {
                let _lock = layer.lock_run(false)?;
                let mut out = Vec::new();
                layer.diff(&paths, &mut out)?;
                let text = String::from_utf8_lossy(&out).into_owned();
                (text.clone(), json!({"diff": text}), false)
            }
            "layer_commit" => {
                let lock = layer.lock_run(true)?;
                let report = layer.commit(&lock, &paths, false, false)?;
                let (done, refused) = super::layer::report_lines(&report, &dir);
                let mut text = done.join("\n");
                for r in &refused {
                    text.push('\n');
                    text.push_str(r.trim_start_matches("capsule: "));
                }
                let complete = report.complete();
                (text, json!({"committed": done, "refused": refused, "complete": complete}), !complete)
            }
            "layer_discard" => {
                let lock = layer.lock_run(true)?;
                layer.discard(lock)?;
                (format!("layer {name} discarded"), json!({"discarded": name}), false)
            }
            _ => bail!("unknown tool"),
        })
    };
    match run() {
        Ok((text, v, err)) => Ok(answer(text, v, err)),
        Err(e) => Ok(answer(format!("{e:#}"), json!({"error": format!("{e:#}")}), true)),
    }
}

fn call_why(s: &Server, args: &Value) -> Result<Value, RpcError> {
    let (_, dir) = s.layer_dir(args)?;
    let mut spec = run_spec(s, &json!({"argv": ["/bin/true"], "cwd": args.get("cwd")}), &dir)?;
    spec.layers = vec![dir];
    let get = |k: &str| args.get(k).and_then(Value::as_str).map(String::from);
    let (q, what) = if let Some(p) = get("write") {
        (Query::Write(p.clone().into()), format!("write {}", capsule::layer::quote(p.as_bytes())))
    } else if let Some(p) = get("read") {
        (Query::Read(p.clone().into()), format!("read {}", capsule::layer::quote(p.as_bytes())))
    } else if let Some(h) = get("host") {
        let (host, port) = match h.rsplit_once(':') {
            Some((a, p)) if !a.contains(':') => (a.to_string(), p.parse().ok()),
            _ => (h.clone(), None),
        };
        (Query::Host(host, port), format!("connect {}", capsule::layer::quote(h.as_bytes())))
    } else {
        return Err(rpc(INVALID_PARAMS, "give write, read or host"));
    };
    match explain::why(&spec, &q) {
        Ok(v) => {
            let text = super::why::text(&what, &v);
            Ok(answer(text, json!({"allowed": v.allowed, "rule": v.rule, "fix": v.fix, "errno": v.errno}), false))
        }
        Err(e) => Ok(answer(e.clone(), json!({"error": e}), true)),
    }
}

/// One parsed message: answers it (a `tools/call` of `run` on a thread).
fn handle(s: &Arc<Server>, msg: Value) {
    let Value::Object(m) = &msg else {
        let why = if msg.is_array() { "batches are not supported" } else { "a request is a JSON object" };
        return s.reply(&Value::Null, Err(rpc(INVALID_REQUEST, why)));
    };
    let id = m.get("id").cloned();
    let valid_id = matches!(id, None | Some(Value::String(_)) | Some(Value::Number(_)));
    let method = m.get("method").and_then(Value::as_str);
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || !valid_id {
        let id = if valid_id { id.unwrap_or(Value::Null) } else { Value::Null };
        return s.reply(&id, Err(rpc(INVALID_REQUEST, "not a JSON-RPC 2.0 message")));
    }
    let Some(method) = method else {
        if m.contains_key("result") || m.contains_key("error") {
            return; // a response to us: we send no requests
        }
        return s.reply(&id.unwrap_or(Value::Null), Err(rpc(INVALID_REQUEST, "no method")));
    };
    let params = m.get("params").cloned().unwrap_or(json!({}));
    let Some(id) = id else {
        // A notification: never answered.
        if method == "notifications/cancelled" {
            if let Some(rid) = params.get("requestId") {
                if let Some(flag) = s.running.lock().unwrap_or_else(|e| e.into_inner()).get(&rid.to_string()) {
                    flag.store(true, Ordering::SeqCst);
                }
            }
        }
        return;
    };
    let r = match method {
        "initialize" => {
            let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
            let version = VERSIONS.iter().find(|v| **v == asked).unwrap_or(&VERSIONS[0]);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "capsule", "version": crate::VERSION},
                "instructions": "Run commands with the `run` tool: they run sandboxed over a layer, so their changes are kept for review (layer_diff) and reach the host only by layer_commit. A refused write, read or connection is listed in the result with the option that would allow it."
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools()})),
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let args = params.get("arguments").cloned().unwrap_or(json!({}));
            if !args.is_object() {
                Err(rpc(INVALID_PARAMS, "arguments: an object"))
            } else {
                match name.as_str() {
                    "run" => {
                        let key = id.to_string();
                        let flag = Arc::new(AtomicBool::new(false));
                        s.running.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), flag.clone());
                        let s2 = Arc::clone(s);
                        let s = s2.clone();
                        let t = std::thread::spawn(move || {
                            let r = call_run(&s, &args, &flag);
                            s.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                            // A cancelled request gets no response (the MCP specification).
                            if !flag.load(Ordering::SeqCst) {
                                s.reply(&id, r);
                            }
                        });
                        s2.threads.lock().unwrap_or_else(|e| e.into_inner()).push(t);
                        return;
                    }
                    "layer_list" | "layer_diff" | "layer_commit" | "layer_discard" => call_layer(s, &name, &args),
                    "why" => call_why(s, &args),
                    _ => Err(rpc(INVALID_PARAMS, format!("unknown tool: {}", capsule::layer::quote(name.as_bytes())))),
                }
            }
        }
        _ => Err(rpc(METHOD_NOT_FOUND, format!("method not found: {}", capsule::layer::quote(method.as_bytes())))),
    };
    s.reply(&id, r);
}

fn default_layers() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(|d| d.is_absolute()) {
        return Ok(d.join("capsule/mcp"));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|d| d.is_absolute());
    Ok(home.ok_or_else(|| anyhow!("no $HOME: give --layers DIR"))?.join(".local/state/capsule/mcp"))
}

fn start(m: &ArgMatches) -> Result<Arc<Server>> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let layers = match last(m, "layers") {
        Some(d) => super::absolute(d, &cwd),
        None => default_layers()?,
    };
    let base = match last(m, "profile") {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("--profile: cannot read `{p}`"))?;
            spec::from_toml(&text).map_err(|e| anyhow!("--profile `{p}`: {e}"))?
        }
        None => RunSpec::default(),
    };
    let wall_time = match last(m, "wall-time") {
        Some(v) => capsule::units::parse_duration(v).map_err(|e| anyhow!("--wall-time: {e}"))?,
        None => Duration::from_secs(600),
    };
    Ok(Arc::new(Server {
        out: Mutex::new(std::io::stdout()),
        layers,
        base,
        wall_time,
        no_commit: m.get_flag("no-commit"),
        sandbox: Mutex::new(None),
        running: Mutex::new(HashMap::new()),
        threads: Mutex::new(Vec::new()),
    }))
}

pub fn run(m: &ArgMatches) -> ExitCode {
    let s = match start(m) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("capsule mcp: {e:#}");
            return ExitCode::from(125);
        }
    };
    let stdin = std::io::stdin();
    let mut line = Vec::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(msg) => handle(&s, msg),
            Err(e) => s.reply(&Value::Null, Err(rpc(PARSE_ERROR, format!("parse error: {e}")))),
        }
    }
    // The input ended: the runs in flight finish and are answered.
    let threads = std::mem::take(&mut *s.threads.lock().unwrap_or_else(|e| e.into_inner()));
    for t in threads {
        let _ = t.join();
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_schema() {
        let t = tools();
        let names: Vec<&str> = t.as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["run", "layer_list", "layer_diff", "layer_commit", "layer_discard", "why"]);
        for x in t.as_array().unwrap() {
            assert_eq!(x["inputSchema"]["type"], "object");
        }
    }
}
