//! The JSON-lines protocol of `capsule serve` (docs/protocol.md): one
//! request per line in, one response per line out. Parsing and formatting
//! only; the supervisor's event loop does the rest.

use serde_json::{json, Value};

use crate::proto::result::{InteractResult, RunResult, Status};
use crate::proto::spec::{InteractSpec, RunSpec};

/// Longest request line accepted, newline excluded.
pub const MAX_LINE: usize = 1 << 20;

/// One parsed request line.
#[derive(Debug)]
pub enum LineRequest {
    Run {
        id: Value,
        spec: Box<RunSpec>,
    },
    Interact {
        id: Value,
        spec: Box<InteractSpec>,
    },
    Cancel {
        id: Value,
        target: Value,
    },
    Kill {
        id: Value,
        target: Value,
    },
    /// An answer to an ask of run `id` (checked by the loop: a bad one is
    /// answered with `answer_refused`, never with an `error` line that
    /// would read as the run's end).
    Answer {
        id: Value,
        answer: Value,
    },
    /// A session request (docs/sessions.md).
    Session {
        id: Value,
        req: crate::proto::session::SessionReq,
    },
}

/// A line that is not a valid request: the error response to send.
#[derive(Debug, PartialEq)]
pub struct LineError {
    /// The request's id when it could be read, else null.
    pub id: Value,
    pub message: String,
}

/// Parses one line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<LineRequest, LineError> {
    let fail = |id: &Value, message: String| LineError { id: id.clone(), message };
    let value: Value =
        serde_json::from_slice(line).map_err(|e| fail(&Value::Null, format!("not a JSON request: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(fail(&Value::Null, "a request must be a JSON object".into()));
    };
    let id = map.remove("id").ok_or_else(|| fail(&Value::Null, "the request has no `id`".into()))?;
    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
    match keys.as_slice() {
        ["spec"] => {
            let spec = map.remove("spec").expect("present");
            let spec: RunSpec = typed(spec, "spec").map_err(|m| fail(&id, m))?;
            Ok(LineRequest::Run { id, spec: Box::new(spec) })
        }
        ["interact"] => {
            let spec = map.remove("interact").expect("present");
            let spec: InteractSpec = typed(spec, "interact").map_err(|m| fail(&id, m))?;
            Ok(LineRequest::Interact { id, spec: Box::new(spec) })
        }
        ["cancel"] => {
            let target = map.remove("cancel").expect("present");
            Ok(LineRequest::Cancel { id, target })
        }
        ["kill"] => {
            let target = map.remove("kill").expect("present");
            Ok(LineRequest::Kill { id, target })
        }
        ["answer"] => {
            let answer = map.remove("answer").expect("present");
            Ok(LineRequest::Answer { id, answer })
        }
        ["session"] => {
            let req = map.remove("session").expect("present");
            let req = typed(req, "session").map_err(|m| fail(&id, m))?;
            Ok(LineRequest::Session { id, req })
        }
        [] => Err(fail(&id, "the request has neither `spec`, `interact`, `cancel`, `kill`, `answer` nor `session`".into())),
        _ => Err(fail(
            &id,
            format!(
                "a request has `id` and exactly one of `spec`, `interact`, `cancel`, `kill`, `answer`, `session`; got {}",
                keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// `{"id": ..., "result": ...}`, or `{"id": ..., "error": ...}` for a run
/// that could not start.
pub fn result_line(id: &Value, result: &RunResult) -> Vec<u8> {
    if result.status == Status::Error {
        return error_line(id, result.error.as_deref().unwrap_or("unknown error"));
    }
    answer_line(id, result)
}

/// `{"id": ..., "result": ...}`, serialized straight from `result` (not
/// through a `Value` tree: a served run's answer is on the loop's path).
fn answer_line<T: serde::Serialize>(id: &Value, result: &T) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Answer<'a, T> {
        id: &'a Value,
        result: &'a T,
    }
    let mut out = serde_json::to_vec(&Answer { id, result }).expect("serializable");
    out.push(b'\n');
    out
}

/// A request's spec (`what`: `spec` or `interact`), errors naming the field.
fn typed<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "." => format!("invalid {what}: {}", e.inner()),
            _ => format!("invalid {what}: {path}: {}", e.inner()),
        }
    })
}

/// `{"id": ..., "result": {"first_to_exit": ..., "solution": ..., "interactor": ...}}`.
pub fn interact_line(id: &Value, result: &InteractResult) -> Vec<u8> {
    answer_line(id, result)
}

/// `{"id": ..., "session": ...}`: a session request's answer.
pub fn session_line(id: &Value, answer: &crate::proto::session::SessionAnswer) -> Vec<u8> {
    line(json!({ "id": id, "session": answer }))
}

/// `{"id": ..., "error": ...}`.
pub fn error_line(id: &Value, message: &str) -> Vec<u8> {
    line(json!({ "id": id, "error": message }))
}

/// The answer to a `kill` or `cancel` of `target`: done, or no such run.
pub fn control_line(id: &Value, target: &Value, found: bool) -> Vec<u8> {
    if found {
        ok_line(id)
    } else {
        error_line(id, &format!("no run with id {target} on this connection"))
    }
}

/// `{"id": RUN, "ask": {"ask_id": N, "host": ..., "port": ..., "via": ...}}`:
/// the proxy of run `RUN` asks about a destination no pattern names.
pub fn ask_line(id: &Value, ask_id: u64, host: &str, port: u16, via: &str) -> Vec<u8> {
    line(json!({ "id": id, "ask": { "ask_id": ask_id, "host": host, "port": port, "via": via } }))
}

/// `{"id": RUN, "answer_refused": {"ask_id": N, "reason": ...}}`: an answer
/// the server did not take (its ask then ends as it would unanswered).
pub fn answer_refused_line(id: &Value, ask_id: Option<u64>, reason: &str) -> Vec<u8> {
    line(json!({ "id": id, "answer_refused": { "ask_id": ask_id, "reason": reason } }))
}

/// An answer's ask id and decision: `{"ask_id": N, "decision": "allow-once" | "allow-run" | "deny"}`.
pub fn parse_answer(v: &Value) -> Result<(u64, &str), (Option<u64>, String)> {
    let ask_id = v.get("ask_id").and_then(Value::as_u64);
    let bad = |m: &str| (ask_id, m.to_string());
    let Value::Object(m) = v else { return Err(bad("an answer is an object: {\"ask_id\": N, \"decision\": ...}")) };
    if m.keys().any(|k| k != "ask_id" && k != "decision") {
        return Err(bad("an answer has only `ask_id` and `decision`"));
    }
    let ask_id = ask_id.ok_or_else(|| bad("the answer has no `ask_id` (the ask's, a number)"))?;
    match m.get("decision").and_then(Value::as_str) {
        Some(d @ ("allow-once" | "allow-run" | "deny")) => Ok((ask_id, d)),
        _ => Err(bad("`decision` is one of \"allow-once\", \"allow-run\", \"deny\"")),
    }
}

/// The error for a line past [`MAX_LINE`].
pub fn too_long() -> String {
    format!("request line longer than {MAX_LINE} bytes")
}

/// The error for a run whose id a run in flight on the connection has.
pub const ID_IN_FLIGHT: &str = "a run with this id is still in flight on this connection";

/// `serve --listen`'s answer to a peer of the same user unlike its caller.
pub const REFUSED_NOT_ALIKE: &str =
    "refused: this server takes requests only from processes like the one that started it \
     (same user and user namespace, not in a deeper PID namespace, same no_new_privs and seccomp): a sandboxed \
     program may not ask for runs outside its sandbox";

/// `serve --listen`'s answer to a peer of another user.
pub const REFUSED_OTHER_USER: &str = "refused: another user";

/// `{"id": ..., "ok": true}`: a control request was carried out.
pub fn ok_line(id: &Value) -> Vec<u8> {
    line(json!({ "id": id, "ok": true }))
}

fn line(v: Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&v).expect("serializable");
    out.push(b'\n');
    out
}

/// Splits complete lines off a read buffer, enforcing [`MAX_LINE`].
#[derive(Default)]
pub struct LineReader {
    buf: Vec<u8>,
    /// Dropping the rest of an oversized line, up to its newline.
    discarding: bool,
}

/// What [`LineReader::next_line`] found.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A complete line (newline removed).
    Complete(Vec<u8>),
    /// A line longer than [`MAX_LINE`] started; its rest is dropped.
    TooLong,
}

impl LineReader {
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next line, if a complete one (or an oversized one) is buffered.
    pub fn next_line(&mut self) -> Option<Line> {
        loop {
            match self.buf.iter().position(|&b| b == b'\n') {
                Some(n) => {
                    let rest = self.buf.split_off(n + 1);
                    let mut line = std::mem::replace(&mut self.buf, rest);
                    line.pop();
                    if self.discarding {
                        self.discarding = false;
                        continue;
                    }
                    if line.len() > MAX_LINE {
                        return Some(Line::TooLong);
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Some(Line::Complete(line));
                }
                None if self.buf.len() > MAX_LINE => {
                    self.buf.clear();
                    if self.discarding {
                        return None;
                    }
                    self.discarding = true;
                    return Some(Line::TooLong);
                }
                None => return None,
            }
        }
    }

    /// What is left at the end of the stream: an unterminated last line.
    pub fn finish(&mut self) -> Option<Line> {
        let line = std::mem::take(&mut self.buf);
        if self.discarding || line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(Line::Complete(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_request() {
        match parse_line(br#"{"id": 7, "spec": {"argv": ["/bin/true"]}}"#).unwrap() {
            LineRequest::Run { id, spec } => {
                assert_eq!(id, json!(7));
                assert_eq!(spec.argv, vec!["/bin/true"]);
            }
            other => panic!("{other:?}"),
        }
        match parse_line(br#"{"id": "k", "kill": {"a": 1}}"#).unwrap() {
            LineRequest::Kill { id, target } => {
                assert_eq!(id, json!("k"));
                assert_eq!(target, json!({"a": 1}));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_answer_is_what_its_value_tree_would_print() {
        let full = json!({
            "status": "exited", "exit_code": 3, "signal": null, "wall_time_ms": 1.5,
            "cpu_user_ms": 0.25, "cpu_system_ms": 1e-3, "peak_memory_bytes": 4096,
            "accounting": "cgroup", "pids_peak": 2, "killed_by_limit": false, "error": null,
            "stdout": {"text": "a\"\u{1}\u{e9}\n", "bytes": 7, "truncated": true},
            "syscall": "ptrace", "syscall_args": [1, 18446744073709551615u64],
            "landlock": "partial",
            "net_log": [{"syscall": "connect", "family": "inet", "address": "10.0.0.1", "port": 53, "count": 2}],
            "net_log_dropped": 1, "csw_voluntary": 9, "csw_forced": 0
        });
        let r: RunResult = serde_json::from_value(full).unwrap();
        for id in [json!(7), json!("k\u{2028}"), json!({"a": [1.5, null]})] {
            let mut old = serde_json::to_vec(&json!({ "id": id, "result": r })).unwrap();
            old.push(b'\n');
            assert_eq!(String::from_utf8(result_line(&id, &r)).unwrap(), String::from_utf8(old).unwrap());
        }
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let e = parse_line(b"garbage").unwrap_err();
        assert_eq!(e.id, Value::Null);
        assert!(e.message.contains("not a JSON request"), "{}", e.message);
        let e = parse_line(br#"{"id": 1, "spec": "#).unwrap_err();
        assert_eq!(e.id, Value::Null);
        let e = parse_line(b"[1, 2]").unwrap_err();
        assert!(e.message.contains("object"), "{}", e.message);
        let e = parse_line(br#"{"spec": {"argv": ["x"]}}"#).unwrap_err();
        assert!(e.message.contains("no `id`"), "{}", e.message);
        let e = parse_line(br#"{"id": 3, "spec": {"argv": ["x"], "wal_time": 1}}"#).unwrap_err();
        assert_eq!(e.id, json!(3));
        assert!(e.message.contains("wal_time"), "{}", e.message);
        let e =
            parse_line(br#"{"id": 4, "spec": {"argv": ["x"], "limits": {"wall_time": "1 fortnight"}}}"#).unwrap_err();
        assert!(e.message.contains("limits.wall_time"), "{}", e.message);
        let e =
            parse_line(br#"{"id": 4, "spec": {"argv": ["x"], "mounts": [{"type": "tmpfs", "dst": 3}]}}"#).unwrap_err();
        assert!(e.message.contains("mounts[0]"), "{}", e.message);
        let e = parse_line(br#"{"id": 3, "spec": {}, "kill": 1}"#).unwrap_err();
        assert!(e.message.contains("exactly one"), "{}", e.message);
    }

    #[test]
    fn answers_parse_or_say_why_not() {
        match parse_line(br#"{"id": 4, "answer": {"ask_id": 2, "decision": "deny"}}"#).unwrap() {
            LineRequest::Answer { id, answer } => {
                assert_eq!(id, json!(4));
                assert_eq!(parse_answer(&answer), Ok((2, "deny")));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_answer(&json!({"ask_id": 2, "decision": "yes"})).unwrap_err().0, Some(2));
        assert!(parse_answer(&json!({"decision": "deny"})).unwrap_err().1.contains("ask_id"));
        assert!(parse_answer(&json!({"ask_id": 1, "decision": "deny", "x": 1})).is_err());
        assert!(parse_answer(&json!("deny")).is_err());
        let l = String::from_utf8(ask_line(&json!("r"), 3, "a.test", 443, "connect")).unwrap();
        assert_eq!(l, "{\"id\":\"r\",\"ask\":{\"ask_id\":3,\"host\":\"a.test\",\"port\":443,\"via\":\"connect\"}}\n");
    }

    #[test]
    fn lines_and_oversized_lines() {
        let mut r = LineReader::default();
        r.push(b"{\"a\":1}\n\n  \n{\"b\"");
        assert_eq!(r.next_line(), Some(Line::Complete(b"{\"a\":1}".to_vec())));
        assert_eq!(r.next_line(), None);
        r.push(b":2}\n");
        assert_eq!(r.next_line(), Some(Line::Complete(b"{\"b\":2}".to_vec())));
        r.push(&vec![b'x'; MAX_LINE + 10]);
        assert_eq!(r.next_line(), Some(Line::TooLong));
        r.push(b"xxxx");
        assert_eq!(r.next_line(), None);
        r.push(b"yy\n{\"c\":3}\n");
        assert_eq!(r.next_line(), Some(Line::Complete(b"{\"c\":3}".to_vec())));
        r.push(b"tail");
        assert_eq!(r.finish(), Some(Line::Complete(b"tail".to_vec())));
    }
}
