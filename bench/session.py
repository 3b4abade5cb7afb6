#!/usr/bin/env python3
"""`exec` of /bin/true into a warm session against a served run (docs/sessions.md).

Run as the unprivileged user, with the release binaries' directory first:

    bench/session.py DIR [--rounds N] [--runs N]

Measures, interleaved round by round (the machine's speed drifts):
- wire: the agent's side alone, from this process over the agent's socket
  (the library's binary protocol): a served run, `Run {argv: [/bin/true]}`,
  against a session's `Exec {argv: [/bin/true]}`, both with this
  process's stdin, stdout and stderr attached;
- cli: `capsule run -q -- /bin/true` (the no-libc front end, handed to the
  agent) against `capsule session exec -q S -- /bin/true` (capsule-cli).
Prints the medians in ms and the ratios exec / run.
"""

import array
import json
import os
import socket
import struct
import subprocess
import sys
import time


def send(sock, msg, fds=()):
    body = json.dumps(msg).encode()
    data = b"CAP1" + struct.pack("<I", len(body)) + body
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def recv(sock):
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        if not chunk:
            raise EOFError("agent closed the connection")
        head += chunk
    n = struct.unpack("<I", head[4:])[0]
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return json.loads(body)


def agent_socket(capsule):
    out = subprocess.run([capsule, "agent", "status"], capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("* "))
    return line[2:].rsplit("\tpid ", 1)[0]


def one(path, msg, want):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    t = time.perf_counter()
    if recv(s) != "accepted":
        raise RuntimeError("not accepted")
    send(s, msg, (0, 1, 2))
    while True:
        m = recv(s)
        if isinstance(m, dict) and want in m:
            break
    dt = time.perf_counter() - t
    s.close()
    return dt


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    args = sys.argv[1:]
    d = args[0]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 10
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 100
    capsule = os.path.join(d, "capsule")
    subprocess.run([capsule, "run", "-q", "--", "/bin/true"], check=True)
    subprocess.run([capsule, "session", "start", "bench"], check=True)
    path = agent_socket(capsule)
    run_msg = {"run": {"id": 1, "spec": {"argv": ["/bin/true"]}, "stdio": [True, True, True], "notify": False}}
    exec_msg = {"session": {"id": 1, "req": {"exec": {"name": "bench", "argv": ["/bin/true"]}}}}
    res = {"wire run": [], "wire exec": [], "cli run": [], "cli exec": []}
    cli_run = [capsule, "run", "-q", "--", "/bin/true"]
    cli_exec = [capsule, "session", "exec", "-q", "bench", "--", "/bin/true"]
    try:
        for r in range(rounds):
            for _ in range(runs):
                res["wire run"].append(one(path, run_msg, "result"))
                res["wire exec"].append(one(path, exec_msg, "session"))
            for _ in range(runs // 4):
                t = time.perf_counter()
                subprocess.run(cli_run, check=True)
                res["cli run"].append(time.perf_counter() - t)
                t = time.perf_counter()
                subprocess.run(cli_exec, check=True)
                res["cli exec"].append(time.perf_counter() - t)
    finally:
        subprocess.run([capsule, "session", "stop", "bench"])
    for k, v in res.items():
        print(f"{k:10s} median {median(v) * 1e3:.3f} ms ({len(v)} samples)")
    print(f"wire exec / run: {median(res['wire exec']) / median(res['wire run']):.2f}")
    print(f"cli  exec / run: {median(res['cli exec']) / median(res['cli run']):.2f}")


if __name__ == "__main__":
    main()
