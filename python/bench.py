#!/usr/bin/env python3
"""The Python client's cost (issue 25): runs per second and per-run latency
of ``/bin/true`` from Python (sync and asyncio) against the same runs from
Rust, interleaved in one run; figures for docs/benchmarks.md.

    python3 python/bench.py --capsule DIR/capsule --bench DIR/capsule-bench [--rounds 5] [--runs 300] [--tput-runs 1000]

(as an unprivileged user; DIR is a release build: target/x86_64-unknown-linux-gnu/release).

Each round runs every configuration once, their order rotated by one per round:
- latency, one run at a time on a server with --parallel 1: the Rust
  library (`capsule-bench throughput --window 1`: ``Sandbox::run`` +
  ``wait`` on the binary protocol), Rust over `capsule serve`'s JSON lines
  on pipes (`capsule-bench serve --window 1`), ``Sandbox.run`` and
  ``await AsyncSandbox.run``;
- throughput, --parallel 2 with 16 runs in flight: the same four.
The client's cost per run is Python's mean latency less Rust's over the
same `capsule serve` pipes; ratios are the medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from typing import Callable, Deque, Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
import capsule_sandbox as cs  # noqa: E402

TRUE = ["/bin/true"]
WINDOW = 16
CPU: Dict[str, List[float]] = {}
"""The Python process's own CPU time (all threads) per run, by configuration."""


TOTAL: Dict[str, List[float]] = {}
"""CPU time per run of everything, client, server and runs (warm-up included), by configuration."""


def cpu_now(who: int = resource.RUSAGE_SELF) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def cpu_all() -> float:
    return cpu_now(resource.RUSAGE_SELF) + cpu_now(resource.RUSAGE_CHILDREN)


def rust(bench: str, capsule: str, mode: str, runs: int, parallel: int, window: int) -> float:
    """Seconds per run, from capsule-bench's runs per second."""
    argv = [bench, mode, "--runs", str(runs), "--parallel", str(parallel), "--window", str(window),
            "--warmup", "20", "--capsule", capsule]
    if mode == "throughput":
        argv.append("--no-bare")
    c = cpu_all()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    TOTAL.setdefault(f"{mode} {window}", []).append((cpu_all() - c) / (runs + 20))
    m = re.search(r"(\d+)/s \((\d+) runs in ([0-9.]+) s", out)
    if not m:
        sys.exit(f"bench.py: unexpected capsule-bench output {out!r}")
    return float(m.group(3)) / int(m.group(2))


def py_sync(capsule: str, runs: int, parallel: int, window: int) -> float:
    c0 = cpu_all()
    secs = py_sync_runs(capsule, runs, parallel, window)
    TOTAL.setdefault(f"sync {window}", []).append((cpu_all() - c0) / (runs + 20))
    return secs


def py_sync_runs(capsule: str, runs: int, parallel: int, window: int) -> float:
    with cs.Sandbox(parallel=parallel, capsule=capsule) as sb:
        for _ in range(20):
            sb.run(TRUE)
        c = cpu_now()
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
        secs = time.perf_counter() - t
        CPU.setdefault(f"sync {window}", []).append((cpu_now() - c) / runs)
        return secs / runs


def py_async(capsule: str, runs: int, parallel: int, window: int) -> float:
    c0 = cpu_all()
    secs = py_async_runs(capsule, runs, parallel, window)
    TOTAL.setdefault(f"async {window}", []).append((cpu_all() - c0) / (runs + 20))
    return secs


def py_async_runs(capsule: str, runs: int, parallel: int, window: int) -> float:
    async def main() -> float:
        async with cs.AsyncSandbox(parallel=parallel, capsule=capsule) as asb:
            for _ in range(20):
                await asb.run(TRUE)
            c = cpu_now()
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
            secs = time.perf_counter() - t
            CPU.setdefault(f"async {window}", []).append((cpu_now() - c) / runs)
            return secs / runs
    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capsule", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--tput-runs", type=int, default=1000)
    a = ap.parse_args()
    configs: Dict[str, Callable[[], float]] = {
        "lat rust-lib": lambda: rust(a.bench, a.capsule, "throughput", a.runs, 1, 1),
        "lat rust-serve": lambda: rust(a.bench, a.capsule, "serve", a.runs, 1, 1),
        "lat py-sync": lambda: py_sync(a.capsule, a.runs, 1, 1),
        "lat py-async": lambda: py_async(a.capsule, a.runs, 1, 1),
        "tput rust-lib": lambda: rust(a.bench, a.capsule, "throughput", a.tput_runs, 2, WINDOW),
        "tput rust-serve": lambda: rust(a.bench, a.capsule, "serve", a.tput_runs, 2, WINDOW),
        "tput py-sync": lambda: py_sync(a.capsule, a.tput_runs, 2, WINDOW),
        "tput py-async": lambda: py_async(a.capsule, a.tput_runs, 2, WINDOW),
    }
    names = list(configs)
    per: Dict[str, List[float]] = {n: [] for n in names}
    t0 = time.time()
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for n in order:
            per[n].append(configs[n]())
        print(f"round {rnd + 1}: " + ", ".join(f"{n} {per[n][-1] * 1e3:.3f} ms" for n in names), file=sys.stderr)

    def med(n: str) -> float:
        return statistics.median(per[n])

    def ratio(x: str, y: str) -> float:
        return statistics.median(p / q for p, q in zip(per[x], per[y]))

    def extra_us(x: str, y: str) -> float:
        return statistics.median((p - q) * 1e6 for p, q in zip(per[x], per[y]))

    print(f"{a.rounds} rounds, {a.runs} latency runs and {a.tput_runs} throughput runs per configuration and round, "
          f"{time.time() - t0:.0f} s; Python {sys.version.split()[0]}")
    print("| Configuration | latency, mean ms per run (--parallel 1) | runs/s (--parallel 2, 16 in flight) |")
    print("|:---|---:|---:|")
    labels = {"rust-lib": "Rust library (`capsule::sandbox::Sandbox`, binary protocol)",
              "rust-serve": "Rust over `capsule serve` JSON lines (pipes)",
              "py-sync": "Python `Sandbox` (threaded)", "py-async": "Python `AsyncSandbox` (asyncio)"}
    for k, label in labels.items():
        print(f"| {label} | {med('lat ' + k) * 1e3:.3f} | {1 / med('tput ' + k):.0f} |")
    print()
    for k in ("py-sync", "py-async"):
        print(f"- {k}: latency {ratio('lat ' + k, 'lat rust-serve'):.3f}x Rust over serve "
              f"(+{extra_us('lat ' + k, 'lat rust-serve'):.1f} us per run), "
              f"{ratio('lat ' + k, 'lat rust-lib'):.3f}x the library (+{extra_us('lat ' + k, 'lat rust-lib'):.1f} us); "
              f"throughput {ratio('tput rust-serve', 'tput ' + k):.3f}x Rust over serve "
              f"(+{extra_us('tput ' + k, 'tput rust-serve'):.1f} us per run), "
              f"{ratio('tput rust-lib', 'tput ' + k):.3f}x the library")
    for w in ("1", str(WINDOW)):
        base = statistics.median(TOTAL[f"serve {w}"])
        lib = statistics.median(TOTAL[f"throughput {w}"])
        what = "one at a time" if w == "1" else f"{w} in flight"
        print(f"- CPU time per run of client, server and runs together, {what}: Rust library {lib * 1e6:.1f} us, "
              f"Rust over serve {base * 1e6:.1f} us, " + ", ".join(
                  f"Python {m} {statistics.median(TOTAL[f'{m} {w}']) * 1e6:.1f} us "
                  f"(+{(statistics.median(TOTAL[f'{m} {w}']) - base) * 1e6:.1f} over Rust over serve)"
                  for m in ("sync", "async")))
    for k, v in sorted(CPU.items()):
        mode, window = k.split()
        print(f"- the Python process's CPU time per run, {mode}, {'one at a time' if window == '1' else window + ' in flight'}: "
              f"{statistics.median(v) * 1e6:.1f} us (median of the rounds; min {min(v) * 1e6:.1f})")


if __name__ == "__main__":
    main()
