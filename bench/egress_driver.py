#!/usr/bin/env python3
"""The egress benchmark (docs/egress.md, "Cost"), run as the unprivileged
user with the release `capsule` (bench/egress.sh stages it). Two figures,
each from one interleaved run (the order of the two commands alternates
every round; ratios per round, then their median):

1. per-run cost of a policy without traffic: `capsule run -q -- /bin/true`
   against the same with `--allow-host bench.test` (the proxy set up and
   torn down, the network log's filter, nothing asked for), through the
   user's agent (the default) and with --no-agent;
2. a 100 MiB download over loopback from a server of this process
   (sendfile from a file in /dev/shm): curl inside a run through the proxy
   (`--allow-host bench.test --allow-local`, plain HTTP) against curl inside
   a `--share-net` run straight to 127.0.0.1; curl's own time_total.

With BEFORE=DIR (a staged `capsule` and `capsule-cli` of another
build), the per-run rows also measure that build's two commands in the
same interleaved rounds (its own difference, and its floor beside this
one's). ONLY=agent measures the per-run cost through the agent alone.

Usage: egress_driver.py CAPSULE ROUNDS RUNS_PER_ROUND
"""
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

CAPSULE, ROUNDS, RUNS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SIZE = 100 << 20


def server(path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)

    def one(c):
        with c:
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(4096)
                if not d:
                    return
                buf += d
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % SIZE)
            with open(path, "rb") as f:
                c.sendfile(f)

    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=one, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]


def timed(argv, env=None):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


BEFORE = os.environ.get("BEFORE")


def per_run(extra_env, label):
    builds = [("", CAPSULE)] + ([("before: ", os.path.join(BEFORE, "capsule"))] if BEFORE else [])
    cmds = {}
    for tag, exe in builds:
        base = [exe, "run", "-q"]
        cmds[tag + "none"] = base + ["--", "/bin/true"]
        cmds[tag + "policy"] = base + ["--allow-host", "bench.test", "--", "/bin/true"]
        if not tag:
            # The network log alone (which a policy turns on): its share of the difference.
            cmds["net-log"] = base + ["--net-log", "--", "/bin/true"]
    env = dict(os.environ, **extra_env)
    for c in cmds.values():  # warm-up (and the agent started)
        for _ in range(20):
            timed(c, env)
    med = {k: [] for k in cmds}
    keys = list(cmds)
    for r in range(ROUNDS):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            med[k].append(statistics.median(timed(cmds[k], env) for _ in range(RUNS)))
    n, p = med["none"], med["net-log"]
    diffs = [(b - a) * 1e3 for a, b in zip(n, p)]
    print(f"| per-run, {label}, --net-log alone | {statistics.median(n)*1e3:.3f} ms | {statistics.median(p)*1e3:.3f} ms "
          f"| {statistics.median(diffs):+.3f} ms (rounds: {min(diffs):+.3f} .. {max(diffs):+.3f}) |")
    for tag, _ in builds:
        n, p = med[tag + "none"], med[tag + "policy"]
        diffs = [(b - a) * 1e3 for a, b in zip(n, p)]
        print(f"| {tag}per-run, {label} | {statistics.median(n)*1e3:.3f} ms | {statistics.median(p)*1e3:.3f} ms "
              f"| {statistics.median(diffs):+.3f} ms (rounds: {min(diffs):+.3f} .. {max(diffs):+.3f}) |")


def download():
    path = "/dev/shm/capsule-egress-bench"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20) * (SIZE >> 20))
    try:
        port = server(path)
        curl = ["/usr/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}"]
        cmds = {
            "direct": [CAPSULE, "run", "-q", "--share-net", "--"] + curl + [f"http://127.0.0.1:{port}/big"],
            "proxy": [CAPSULE, "run", "-q", "--allow-host", "bench.test", "--allow-local", "--resolve-host",
                      "bench.test=127.0.0.1", "--"] + curl + [f"http://bench.test:{port}/big"],
        }

        def once(k):
            return float(subprocess.run(cmds[k], check=True, capture_output=True, text=True).stdout)

        for k in cmds:
            once(k)
        t = {"direct": [], "proxy": []}
        for r in range(ROUNDS):
            for k in (["direct", "proxy"] if r % 2 == 0 else ["proxy", "direct"]):
                t[k].append(statistics.median(once(k) for _ in range(3)))
        ratios = [p / d for d, p in zip(t["direct"], t["proxy"])]
        d, p = statistics.median(t["direct"]), statistics.median(t["proxy"])
        print(f"| 100 MiB over loopback | {d*1e3:.1f} ms ({SIZE/d/2**30:.2f} GiB/s) | {p*1e3:.1f} ms "
              f"({SIZE/p/2**30:.2f} GiB/s) | ×{statistics.median(ratios):.3f} (rounds: {min(ratios):.3f} .. {max(ratios):.3f}) |")
    finally:
        os.unlink(path)


print("| measure | without egress | with egress | difference (median of the rounds) |")
print("| --- | ---: | ---: | ---: |")
per_run({}, "through the agent")
if os.environ.get("ONLY") != "agent":
    per_run({"CAPSULE_AGENT": "off"}, "--no-agent")
    download()
