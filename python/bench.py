#!/usr/bin/env python3
"""The Python client's cost (issue 25): runs per second and per-run latency
of ``/bin/true`` from Python (sync and asyncio) against the same runs from
Rust, interleaved in one run; figures for docs/benchmarks.md.

    python3 python/bench.py --capsule DIR/capsule --bench DIR/capsule-bench [--rounds 5] [--runs 300] [--tput-runs 1000] [--baseline SRC]

(as an unprivileged user; DIR is a release build: target/x86_64-unknown-linux-gnu/release).

Each round runs every configuration once, their order rotated by one per round:
- latency, one run at a time on a server with --parallel 1: the Rust
  library (`capsule-bench throughput --window 1`: ``Sandbox::run`` +
  ``wait`` on the binary protocol), Rust over `capsule serve`'s JSON lines
  on pipes (`capsule-bench serve --window 1`), ``Sandbox.run`` and
  ``await AsyncSandbox.run``, and the floors of any Python client of the
  same server: the same request line, pre-encoded, written with
  ``os.write`` and the response line read with ``os.read``, no JSON and
  no client (floor-sync), and the same through an asyncio loop's
  ``add_reader`` callback completing a future (floor-async);
- throughput, --parallel 2 with 16 runs in flight: the first four.
Every Python configuration runs in a process of its own (``--child``),
which reports its seconds per run and its own CPU time per run
(``time.process_time``, all its threads, warm-up excluded). ``--baseline
SRC`` adds ``Sandbox`` and ``AsyncSandbox`` from another copy of the
package (SRC holds ``capsule_sandbox``, e.g. an older commit's
python/src) to every round. Differences and ratios are per round, then
the median and the range over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import IO, Callable, Deque, Dict, List, Tuple, cast

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")
if "--src" in sys.argv[:-1]:
    SRC = os.path.abspath(sys.argv[sys.argv.index("--src") + 1])
sys.path.insert(0, SRC)
import capsule_sandbox as cs  # noqa: E402

TRUE = ["/bin/true"]
WINDOW = 16
CPU: Dict[str, List[float]] = {}
"""The Python process's own CPU time (all threads) per run, by configuration and round."""


TOTAL: Dict[str, List[float]] = {}
"""CPU time per run of everything, client, server and runs (warm-up included), by configuration."""


def cpu_now(who: int = resource.RUSAGE_SELF) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def cpu_all() -> float:
    return cpu_now(resource.RUSAGE_SELF) + cpu_now(resource.RUSAGE_CHILDREN)


def rust(bench: str, capsule: str, mode: str, runs: int, parallel: int, window: int, key: str) -> float:
    """Seconds per run, from capsule-bench's runs per second."""
    argv = [bench, mode, "--runs", str(runs), "--parallel", str(parallel), "--window", str(window),
            "--warmup", "20", "--capsule", capsule]
    if mode == "throughput":
        argv.append("--no-bare")
    c = cpu_all()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    TOTAL.setdefault(key, []).append((cpu_all() - c) / (runs + 20))
    m = re.search(r"(\d+)/s \((\d+) runs in ([0-9.]+) s", out)
    if not m:
        sys.exit(f"bench.py: unexpected capsule-bench output {out!r}")
    return float(m.group(3)) / int(m.group(2))


def child(kind: str, capsule: str, runs: int, parallel: int, window: int) -> None:
    """One Python configuration, in this process: prints seconds per run, the
    process's CPU time per run and that of everything (server and runs
    included, start and warm-up too) as JSON."""
    c0 = cpu_all()
    if kind == "sync":
        secs, cpu = py_sync_runs(capsule, runs, parallel, window)
    elif kind == "async":
        secs, cpu = py_async_runs(capsule, runs, parallel, window)
    elif kind == "floor-sync":
        secs, cpu = floor_sync(capsule, runs)
    else:
        secs, cpu = asyncio.run(floor_async(capsule, runs))
    print(json.dumps({"secs": secs, "cpu": cpu, "total": (cpu_all() - c0) / (runs + 20)}))


def python(kind: str, src: str, capsule: str, runs: int, parallel: int, window: int, key: str) -> float:
    argv = [sys.executable, os.path.abspath(__file__), "--child", kind, "--src", src, "--capsule", capsule,
            "--runs", str(runs), "--parallel", str(parallel), "--window", str(window)]
    out = json.loads(subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout)
    CPU.setdefault(key, []).append(out["cpu"])
    TOTAL.setdefault(key, []).append(out["total"])
    return float(out["secs"])


def py_sync_runs(capsule: str, runs: int, parallel: int, window: int) -> Tuple[float, float]:
    with cs.Sandbox(parallel=parallel, capsule=capsule) as sb:
        for _ in range(20):
            sb.run(TRUE)
        c = time.process_time()
        t = time.perf_counter()
        if window == 1:
            for _ in range(runs):
                r = sb.run(TRUE)
                assert r.ok
        else:
            q: Deque[cs.Handle] = deque(sb.submit(TRUE) for _ in range(window))
            for i in range(runs):
                assert q.popleft().wait().ok
                if i + window < runs:
                    q.append(sb.submit(TRUE))
        return (time.perf_counter() - t) / runs, (time.process_time() - c) / runs


def py_async_runs(capsule: str, runs: int, parallel: int, window: int) -> Tuple[float, float]:
    async def main() -> Tuple[float, float]:
        async with cs.AsyncSandbox(parallel=parallel, capsule=capsule) as asb:
            for _ in range(20):
                await asb.run(TRUE)
            c = time.process_time()
            t = time.perf_counter()
            if window == 1:
                for _ in range(runs):
                    assert (await asb.run(TRUE)).ok
            else:
                q: Deque[cs.AsyncHandle] = deque([await asb.submit(TRUE) for _ in range(window)])
                for i in range(runs):
                    assert (await q.popleft().wait()).ok
                    if i + window < runs:
                        q.append(await asb.submit(TRUE))
            return (time.perf_counter() - t) / runs, (time.process_time() - c) / runs
    return asyncio.run(main())


LINE = b'{"id":1,"spec":{"argv":["/bin/true"]}}\n'


def serve(capsule: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([capsule, "serve", "--parallel", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            bufsize=0)


def floor_sync(capsule: str, runs: int) -> Tuple[float, float]:
    """Any Python client's floor: the request line written, the response line read."""
    p = serve(capsule)
    w, r = cast(IO[bytes], p.stdin).fileno(), cast(IO[bytes], p.stdout).fileno()

    def one() -> bytes:
        os.write(w, LINE)
        data = os.read(r, 1 << 16)
        while data[-1:] != b"\n":
            data += os.read(r, 1 << 16)
        return data

    for _ in range(20):
        one()
    c = time.process_time()
    t = time.perf_counter()
    for _ in range(runs):
        assert one().startswith(b'{"id":1,"result":{"status":"exited","exit_code":0,')
    res = (time.perf_counter() - t) / runs, (time.process_time() - c) / runs
    cast(IO[bytes], p.stdin).close()
    p.wait()
    cast(IO[bytes], p.stdout).close()
    return res


async def floor_async(capsule: str, runs: int) -> Tuple[float, float]:
    """The same through asyncio: a reader callback completes a future the caller awaits."""
    loop = asyncio.get_running_loop()
    p = serve(capsule)
    w, r = cast(IO[bytes], p.stdin).fileno(), cast(IO[bytes], p.stdout).fileno()
    os.set_blocking(r, False)
    buf = bytearray()
    waiting: List[asyncio.Future[bytes]] = []

    def readable() -> None:
        buf.extend(os.read(r, 1 << 16))
        if buf[-1:] == b"\n":
            waiting.pop().set_result(bytes(buf))
            buf.clear()

    async def one() -> bytes:
        fut: asyncio.Future[bytes] = loop.create_future()
        waiting.append(fut)
        os.write(w, LINE)
        return await fut

    loop.add_reader(r, readable)
    for _ in range(20):
        await one()
    c = time.process_time()
    t = time.perf_counter()
    for _ in range(runs):
        assert (await one()).startswith(b'{"id":1,"result":{"status":"exited","exit_code":0,')
    res = (time.perf_counter() - t) / runs, (time.process_time() - c) / runs
    loop.remove_reader(r)
    cast(IO[bytes], p.stdin).close()
    p.wait()
    cast(IO[bytes], p.stdout).close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capsule", required=True)
    ap.add_argument("--bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--tput-runs", type=int, default=1000)
    ap.add_argument("--baseline", help="another copy of the package's src to measure beside")
    ap.add_argument("--src", default=SRC, help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--parallel", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--window", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.capsule, a.runs, a.parallel, a.window)
        return
    if not a.bench:
        ap.error("--bench is required")

    def py(kind: str, src: str, tput: bool, key: str) -> Callable[[], float]:
        if tput:
            return lambda: python(kind, src, a.capsule, a.tput_runs, 2, WINDOW, key)
        return lambda: python(kind, src, a.capsule, a.runs, 1, 1, key)

    configs: Dict[str, Callable[[], float]] = {
        "lat rust-lib": lambda: rust(a.bench, a.capsule, "throughput", a.runs, 1, 1, "lat rust-lib"),
        "lat rust-serve": lambda: rust(a.bench, a.capsule, "serve", a.runs, 1, 1, "lat rust-serve"),
        "lat floor-sync": py("floor-sync", SRC, False, "lat floor-sync"),
        "lat floor-async": py("floor-async", SRC, False, "lat floor-async"),
        "lat py-sync": py("sync", SRC, False, "lat py-sync"),
        "lat py-async": py("async", SRC, False, "lat py-async"),
        "tput rust-lib": lambda: rust(a.bench, a.capsule, "throughput", a.tput_runs, 2, WINDOW, "tput rust-lib"),
        "tput rust-serve": lambda: rust(a.bench, a.capsule, "serve", a.tput_runs, 2, WINDOW, "tput rust-serve"),
        "tput py-sync": py("sync", SRC, True, "tput py-sync"),
        "tput py-async": py("async", SRC, True, "tput py-async"),
    }
    if a.baseline:
        for k in ("sync", "async"):
            configs[f"lat py-{k}-base"] = py(k, a.baseline, False, f"lat py-{k}-base")
            configs[f"tput py-{k}-base"] = py(k, a.baseline, True, f"tput py-{k}-base")
    names = list(configs)
    per: Dict[str, List[float]] = {n: [] for n in names}
    t0 = time.time()
    load = os.getloadavg()[0]
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for n in order:
            per[n].append(configs[n]())
        print(f"round {rnd + 1}: " + ", ".join(f"{n} {per[n][-1] * 1e3:.3f} ms" for n in names), file=sys.stderr)

    def us(v: List[float]) -> str:
        return f"{statistics.median(v) * 1e6:.1f} ({min(v) * 1e6:.1f} to {max(v) * 1e6:.1f})"

    def diff(x: List[float], y: List[float]) -> List[float]:
        return [p - q for p, q in zip(x, y)]

    print(f"{a.rounds} rounds, {a.runs} latency runs and {a.tput_runs} throughput runs per configuration and round, "
          f"{time.time() - t0:.0f} s, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"Python {sys.version.split()[0]}")
    print("| Configuration | latency, ms per run (--parallel 1) | runs/s (--parallel 2, 16 in flight) | "
          "the Python process's CPU per run, µs, one at a time | pipelined |")
    print("|:---|---:|---:|---:|---:|")
    labels = {"rust-lib": "Rust library (`capsule::sandbox::Sandbox`, binary protocol)",
              "rust-serve": "Rust over `capsule serve` JSON lines (pipes)",
              "floor-sync": "Python floor: `os.write` + `os.read` of the same lines",
              "floor-async": "Python floor: the same through asyncio (`add_reader`, a future)",
              "py-sync": "Python `Sandbox` (threaded)", "py-async": "Python `AsyncSandbox` (asyncio)",
              "py-sync-base": "Python `Sandbox`, --baseline", "py-async-base": "Python `AsyncSandbox`, --baseline"}
    for k, label in labels.items():
        if f"lat {k}" not in per:
            continue
        tput = f"{1 / statistics.median(per['tput ' + k]):.0f}" if f"tput {k}" in per else ""
        cpu = [us(CPU[f"lat {k}"]) if f"lat {k}" in CPU else "", us(CPU[f"tput {k}"]) if f"tput {k}" in CPU else ""]
        print(f"| {label} | {statistics.median(per['lat ' + k]) * 1e3:.3f} | {tput} | {cpu[0]} | {cpu[1]} |")
    print()
    print("Per round, then the median (and the range) over the rounds, µs per run:")
    for k, floor in (("py-sync", "floor-sync"), ("py-async", "floor-async"),
                     ("py-sync-base", "floor-sync"), ("py-async-base", "floor-async")):
        if f"lat {k}" not in per:
            continue
        print(f"- {k}: the Python process's CPU less the {floor}'s, one at a time: "
              f"{us(diff(CPU['lat ' + k], CPU['lat ' + floor]))}; latency less Rust's library "
              f"{us(diff(per['lat ' + k], per['lat rust-lib']))}, less Rust over serve "
              f"{us(diff(per['lat ' + k], per['lat rust-serve']))}, less the {floor}'s "
              f"{us(diff(per['lat ' + k], per['lat ' + floor]))}; pipelined, seconds per run less Rust's library "
              f"{us(diff(per['tput ' + k], per['tput rust-lib']))}, less Rust over serve "
              f"{us(diff(per['tput ' + k], per['tput rust-serve']))}")
    print(f"- floor-async less floor-sync, the Python process's CPU: "
          f"{us(diff(CPU['lat floor-async'], CPU['lat floor-sync']))}; latency "
          f"{us(diff(per['lat floor-async'], per['lat floor-sync']))}")
    for w in ("lat", "tput"):
        what = "one at a time" if w == "lat" else f"{WINDOW} in flight"
        print(f"- CPU time per run of client, server and runs together, {what} (start and warm-up included): " + ", ".join(
            f"{k} {us(TOTAL[f'{w} {k}'])}" for k in labels if f"{w} {k}" in TOTAL))


if __name__ == "__main__":
    main()
