"""A Model Context Protocol client session against `capsule mcp` (JSON-RPC
2.0 lines over the server's stdio), run by tests/mcp.rs as the test user:
conformance (initialize, tools/list, ping, errors, cancellation) and an
agent's session end to end (run in a layer, list, diff, commit a subset,
discard, why). Prints `ok NAME` per part; any failure raises."""

import json
import os
import select
import subprocess
import sys
import time

capsule, layers, repo = sys.argv[1:4]
env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/nonexistent"), "CAPSULE_AGENT": "off"}
p = subprocess.Popen([capsule, "mcp", "--layers", layers], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, cwd=repo, env=env)
buf = b""


def send(obj):
    line = obj if isinstance(obj, (bytes, str)) else json.dumps(obj)
    if isinstance(line, str):
        line = line.encode()
    p.stdin.write(line + b"\n")
    p.stdin.flush()


def recv(timeout=60):
    """The next message the server writes (every line must be JSON-RPC 2.0)."""
    global buf
    end = time.time() + timeout
    while b"\n" not in buf:
        left = end - time.time()
        assert left > 0, "no answer in time"
        r, _, _ = select.select([p.stdout], [], [], left)
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            assert chunk, "the server closed its stdout; stderr: %r" % p.stderr.read()
            buf += chunk
    line, buf = buf.split(b"\n", 1)
    msg = json.loads(line)
    assert msg.get("jsonrpc") == "2.0", msg
    return msg


def request(i, method, params=None, timeout=60):
    m = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        m["params"] = params
    send(m)
    r = recv(timeout)
    assert r.get("id") == i, (i, r)
    return r


def call(i, name, args, timeout=120):
    r = request(i, "tools/call", {"name": name, "arguments": args}, timeout)
    assert "result" in r, r
    return r["result"]


# --- conformance
r = request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "capsule-test", "version": "1"}})
assert r["result"]["protocolVersion"] == "2025-06-18", r
assert r["result"]["capabilities"]["tools"] == {"listChanged": False}, r
assert r["result"]["serverInfo"]["name"] == "capsule", r
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
r = request(2, "tools/list")
names = [t["name"] for t in r["result"]["tools"]]
assert names == ["run", "layer_list", "layer_diff", "layer_commit", "layer_discard", "why"], names
assert request("p", "ping")["result"] == {}
print("ok initialize")

# Bad JSON: one parse error (id null) and nothing else: the next line is the ping's answer.
send(b"{oops")
r = recv()
assert r["id"] is None and r["error"]["code"] == -32700, r
assert request(3, "ping")["result"] == {}
send(b"\xff\xfe not even text")
r = recv()
assert r["id"] is None and r["error"]["code"] == -32700, r
send("[]")
r = recv()
assert r["id"] is None and r["error"]["code"] == -32600, r
send({"jsonrpc": "1.0", "id": 4, "method": "ping"})
r = recv()
assert r["id"] == 4 and r["error"]["code"] == -32600, r
send({"jsonrpc": "2.0", "id": {"no": 1}, "method": "ping"})
r = recv()
assert r["id"] is None and r["error"]["code"] == -32600, r
assert request(5, "no/such/method")["error"]["code"] == -32601
assert request(6, "tools/call", {"name": "nope", "arguments": {}})["error"]["code"] == -32602
assert request(7, "tools/call", {"name": "run", "arguments": {}})["error"]["code"] == -32602
assert request(8, "tools/call", {"name": "run", "arguments": {"command": "true", "layer": "../x"}})["error"]["code"] == -32602
# An unknown notification is never answered.
send({"jsonrpc": "2.0", "method": "notifications/whatever"})
assert request(9, "ping")["result"] == {}
print("ok errors")

# --- cancellation: the run is killed and its request never answered.
send({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
      "params": {"name": "run", "arguments": {"command": "sleep 30", "layer": "cancel"}}})
time.sleep(1.0)
t0 = time.time()
send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20, "reason": "test"}})
assert request(21, "ping")["result"] == {}
# The killed run releases its layer soon: a run there succeeds (nothing answers 20 meanwhile).
for attempt in range(50):
    res = call(22 + attempt, "run", {"command": "echo after", "layer": "cancel"})
    if not res["isError"] and res["structuredContent"]["result"]["status"] == "exited":
        break
    time.sleep(0.2)
assert res["structuredContent"]["result"]["stdout"]["text"] == "after\n", res
assert time.time() - t0 < 20, "the cancelled run was not killed"
print("ok cancellation")

# --- an agent's session: edit, test, review, commit a subset.
a = os.path.join(repo, "a.txt")
b = os.path.join(repo, "b.txt")
res = call(100, "run", {"command": "echo two > a.txt && echo new > b.txt && cat a.txt && touch /etc/capsule-mcp",
                        "layer": "work"})
s = res["structuredContent"]
assert s["result"]["status"] == "exited" and s["result"]["exit_code"] == 1, s
assert s["result"]["stdout"]["text"] == "two\n", s
assert s["pending_changes"] == 2, s
v = [x for x in s["result"]["violations"] if x["kind"] == "fs-write"]
assert v and v[0]["path"] == "/etc/capsule-mcp" and "--writable /etc" in v[0]["fix"], s
assert "fs-write /etc/capsule-mcp (openat, EROFS)" in res["content"][0]["text"], res
assert open(a).read() == "one\n" and not os.path.exists(b), "the host changed before a commit"
# The next run sees the layer.
res = call(101, "run", {"argv": ["cat", "a.txt", "b.txt"], "layer": "work"})
assert res["structuredContent"]["result"]["stdout"]["text"] == "two\nnew\n", res
# Its stdin.
res = call(102, "run", {"command": "cat", "stdin": "from the agent\n", "layer": "work"})
assert res["structuredContent"]["result"]["stdout"]["text"] == "from the agent\n", res
lst = call(103, "layer_list", {"layer": "work"})
text = lst["content"][0]["text"]
assert ("M  %s" % a) in text and ("A  %s" % b) in text, text
diff = call(104, "layer_diff", {"layer": "work", "paths": [a]})["content"][0]["text"]
assert "-one" in diff and "+two" in diff and "b.txt" not in diff, diff
com = call(105, "layer_commit", {"layer": "work", "paths": [a]})
assert not com["isError"], com
assert open(a).read() == "two\n" and not os.path.exists(b), "commit took more than asked"
text = call(106, "layer_list", {"layer": "work"})["content"][0]["text"]
assert a not in text and b in text, text
assert not call(107, "layer_discard", {"layer": "work"})["isError"]
text = call(108, "layer_list", {"layer": "work"})["content"][0]["text"]
assert "no changes" in text, text
assert not os.path.exists(b)
assert request(109, "tools/call", {"name": "layer_commit", "arguments": {"paths": ["relative"]}})["error"]["code"] == -32602
why = call(110, "why", {"write": "/etc/passwd"})["structuredContent"]
assert why["allowed"] is False and why["errno"] == "EROFS", why
why = call(111, "why", {"host": "example.org:443"})["structuredContent"]
assert why["allowed"] is False and why["fix"].startswith("--share-net"), why
# A run cannot see the server's layers.
res = call(112, "run", {"command": "ls -A %s | wc -l" % layers, "layer": "work"})
assert res["structuredContent"]["result"]["stdout"]["text"].strip() == "0", res
print("ok session")

p.stdin.close()
assert p.wait(timeout=30) == 0
rest = p.stdout.read()
assert buf + rest == b"", "unexpected output: %r" % (buf + rest)
print("ok exit")
