//! `capsule mcp` (docs/agents.md): a scripted Model Context Protocol
//! client session over the server's stdio, as the test user
//! (tests/mcp_client.py, plain JSON-RPC 2.0 lines): initialize,
//! tools/list, ping, parse and request errors with nothing else written,
//! cancellation killing the run, and an agent's session end to end (runs
//! in a named layer, list, diff, a subset committed, discard, why, the
//! server's layers hidden from its runs).

use capsule_testkit as common;

use common::*;

#[test]
fn a_client_session_end_to_end() {
    let s = Scratch::new("mcp");
    let repo = s.mkdir("repo");
    s.write("repo/a.txt", b"one\n");
    let layers = s.mkdir("layers");
    let client = s.write("client.py", include_bytes!("mcp_client.py"));
    let mut c = as_user(&[
        "/usr/bin/python3".as_ref(),
        client.as_os_str(),
        h().capsule.as_os_str(),
        layers.as_os_str(),
        repo.as_os_str(),
    ]);
    c.env("HOME", s.path.as_os_str());
    let out = c.output().expect("python3");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}", out.status);
    for part in ["initialize", "errors", "cancellation", "session", "exit"] {
        assert!(stdout.contains(&format!("ok {part}\n")), "{stdout}");
    }
}
