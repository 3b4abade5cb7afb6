//! The JSON-lines protocol of `capsule serve` (docs/protocol.md): one
//! request per line in, one response per line out. Parsing and formatting
//! only; the supervisor's event loop does the rest.

use serde_json::{json, Value};

use crate::result::{InteractResult, RunResult, Status};
use crate::spec::{InteractSpec, RunSpec};

/// Longest request line accepted, newline excluded.
pub const MAX_LINE: usize = 1 << 20;

/// One parsed request line.
#[derive(Debug)]
pub enum LineRequest {
    Run { id: Value, spec: Box<RunSpec> },
    Interact { id: Value, spec: Box<InteractSpec> },
    Cancel { id: Value, target: Value },
    Kill { id: Value, target: Value },
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
        [] => Err(fail(&id, "the request has neither `spec`, `interact`, `cancel` nor `kill`".into())),
        _ => Err(fail(
            &id,
            format!(
                "a request has `id` and exactly one of `spec`, `interact`, `cancel`, `kill`; got {}",
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
    line(json!({ "id": id, "result": result }))
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
    line(json!({ "id": id, "result": result }))
}

/// `{"id": ..., "error": ...}`.
pub fn error_line(id: &Value, message: &str) -> Vec<u8> {
    line(json!({ "id": id, "error": message }))
}

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

/// `capsule serve`: a supervisor answering JSON lines on stdin/stdout, or
/// on connections to a Unix socket at `listen` (mode 0600). Exits the
/// process (status 0) when stdin ends and its runs are answered, or on
/// SIGTERM/SIGINT/SIGHUP for a socket server; returns only an error found
/// before the supervisor starts.
pub fn run_server(config: &crate::sandbox::Config, listen: Option<&std::path::Path>) -> Result<(), crate::Error> {
    use crate::supervisor::Supervisor;
    use std::os::fd::OwnedFd;

    config.validate()?;
    // The socket is made as the caller, before entering the namespaces.
    let listener: Option<(OwnedFd, std::path::PathBuf)> = match listen {
        None => None,
        Some(path) => Some((bind_socket(path)?, path.to_path_buf())),
    };
    // Its peers are checked against a process like the caller, seen from
    // inside the supervisor's user namespace (`peer_fingerprint`): a child
    // that stays out of it until the server has looked.
    let witness = match listener {
        Some(_) => witness()?,
        None => 0,
    };
    let listener = listener.map(|(fd, path)| (std::os::fd::IntoRawFd::into_raw_fd(fd), path));
    Supervisor::start(config, crate::supervisor::Job::Lines { listener, witness })
}

/// A child that waits to be killed (or dies with its parent): the caller
/// as `serve --listen`'s peers should look, for [`lines_job`].
fn witness() -> Result<i32, crate::Error> {
    use crate::sys::{self, Forked};
    let parent = sys::getpid();
    match sys::fork() {
        Ok(Forked::Child) => {
            let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as u64);
            if sys::getppid() != parent {
                sys::exit(0);
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        Ok(Forked::Parent { pid, .. }) => Ok(pid),
        Err(e) => Err(crate::error::SysError::new("fork", e).into()),
    }
}

/// [`run_server`]'s supervisor, started (or not): serves, or says why it
/// did not start. Exits the process (0 once served).
pub(crate) fn lines_job(
    listener: Option<(std::os::fd::RawFd, std::path::PathBuf)>,
    witness: i32,
    started: Result<crate::supervisor::Supervisor, crate::Error>,
) -> ! {
    use crate::error::SysError;
    use crate::supervisor::{Conn, Mode};
    use crate::sys;
    use std::os::fd::AsRawFd;

    let listener = listener.map(|(fd, path)| (sys::reclaim_fd(fd), path));
    let socket_path = listener.as_ref().map(|(_, p)| p.clone());
    // What a peer of the listener must look like, read from the witness
    // (still there: it waits for this), which then goes.
    let peer = (witness > 0).then(|| crate::supervisor::peer_fingerprint(witness));
    if witness > 0 {
        let _ = sys::kill(witness, libc::SIGKILL);
        let _ = sys::waitpid(witness, false);
    }
    let served = started.and_then(|sup| {
        let conns = match &listener {
            Some(_) => Vec::new(),
            None => {
                // The protocol streams move above 2; 0 and 1 become /dev/null,
                // so nothing a run inherits by accident reaches the protocol.
                let input = sys::dup_cloexec(0).map_err(|e| SysError::new("dup (stdin)", e))?;
                let output = sys::dup_cloexec(1).map_err(|e| SysError::new("dup (stdout)", e))?;
                let null =
                    sys::open(c"/dev/null", libc::O_RDWR, 0).map_err(|e| SysError::new("open", e).path("/dev/null"))?;
                for fd in [0, 1] {
                    sys::dup2(null.as_raw_fd(), fd).map_err(|e| SysError::new("dup2", e))?;
                }
                vec![Conn::lines_stdio(input, output)]
            }
        };
        let mode = match peer {
            None => Mode::Serve,
            Some(Some(peer)) => Mode::Listen { peer },
            Some(None) => {
                return Err(crate::Error::Setup(format!(
                    "--listen: cannot read /proc/{witness}/status and uid_map (what its peers are checked against)"
                )))
            }
        };
        sup.serve(conns, listener.map(|(fd, _)| fd), mode);
        Ok(())
    });
    if let Some(p) = socket_path {
        let _ = std::fs::remove_file(p);
    }
    match served {
        Ok(()) => sys::exit(0),
        Err(e) => {
            eprintln!("capsule: error: {e}");
            sys::exit(crate::result::EXIT_CAPSULE_ERROR)
        }
    }
}

/// Binds a listening Unix socket at `path`, mode 0600. A stale socket
/// (nobody listening) is replaced; anything else there is an error.
fn bind_socket(path: &std::path::Path) -> Result<std::os::fd::OwnedFd, crate::Error> {
    use crate::error::SysError;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    use std::os::unix::net::{UnixListener, UnixStream};
    let err = |call: &str, e: std::io::Error| {
        crate::Error::Sys(SysError::new(call, e.raw_os_error().unwrap_or(libc::EIO)).path(path.display().to_string()))
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let stale = meta.file_type().is_socket()
            && matches!(UnixStream::connect(path), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused);
        if !stale {
            return Err(crate::Error::Refused(format!(
                "--listen {}: the path exists{}; remove it or choose another",
                path.display(),
                if meta.file_type().is_socket() { " and a server is listening there" } else { " and is not a socket" }
            )));
        }
        std::fs::remove_file(path).map_err(|e| err("unlink", e))?;
    }
    // Created 0600 from the start (umask), so no other user can connect in
    // between.
    let old = crate::sys::umask(0o177);
    let bound = UnixListener::bind(path);
    crate::sys::umask(old);
    let listener = bound.map_err(|e| err("bind", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| err("chmod", e))?;
    Ok(listener.into())
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
