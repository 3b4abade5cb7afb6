#!/usr/bin/env python3
"""The measuring part of bench/judge.sh (see its header); run as the
benchmark user from the work directory.

usage: judge_driver.py CAPSULE WORK ROUNDS DESCRIPTION

WORK holds tests/ (N.in, N.out), ok.cpp (the solution) and solution (the
same source compiled with g++ -O2 on the host). Every round runs, in an
order that alternates:

- judge: `capsule judge --lang cpp ok.cpp --tests tests --parallel 2
  --json R`; its tests per second over the test phase come from the JSON's
  `timing.tests_ms` (compiling excluded: `timing.compile_ms`, reported
  apart); the whole command's wall time is reported too;
- bare: the compiled solution run on every test by 2 worker threads
  (subprocess, stdin from the .in file, stdout to a file), each output then
  compared with the answer as `capsule judge`'s exact checker does.

Prints a Markdown report on stdout.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import json


def lines(data):
    v = [l.rstrip(b" \t\r\x0b\x0c") for l in data.split(b"\n")]
    while v and not v[-1]:
        v.pop()
    return v


def bare(work, tests, out_dir):
    """Runs the solution on every test with 2 workers; returns
    (seconds, wrong answers)."""
    solution = os.path.join(work, "solution")
    queue = list(tests)
    lock = threading.Lock()
    wrong = []

    def worker(k):
        out = os.path.join(out_dir, f"w{k}.out")
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop()
            with open(os.path.join(work, "tests", name + ".in"), "rb") as i, open(out, "wb") as o:
                r = subprocess.run([solution], stdin=i, stdout=o)
            with open(out, "rb") as f:
                got = f.read()
            with open(os.path.join(work, "tests", name + ".out"), "rb") as f:
                want = f.read()
            if r.returncode != 0 or lines(got) != lines(want):
                with lock:
                    wrong.append(name)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, wrong


def judge(capsule, work, out_dir):
    """Runs capsule judge; returns (whole command seconds, test phase
    seconds, compile seconds)."""
    result = os.path.join(out_dir, "judge.json")
    cmd = [capsule, "judge", "--lang", "cpp", "ok.cpp", "--tests", "tests", "--parallel", "2", "--json", result]
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    whole = time.perf_counter() - start
    with open(result) as f:
        j = json.load(f)
    if r.returncode != 0 or j.get("verdict") != "OK":
        sys.exit(f"judge_driver: `{' '.join(cmd)}` exited with {r.returncode}, verdict {j.get('verdict')}: "
                 f"{r.stderr.decode(errors='replace')} {j.get('error', '')}")
    return whole, j["timing"]["tests_ms"] / 1000, j["timing"]["compile_ms"] / 1000


def median(v):
    return statistics.median(v)


def main():
    capsule, work, rounds, description = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    tests = sorted(f[:-3] for f in os.listdir(os.path.join(work, "tests")) if f.endswith(".in"))
    n = len(tests)
    out_dir = tempfile.mkdtemp(dir=work)
    rows = []
    # One unmeasured round of each: page cache, the toolchain's first start.
    judge(capsule, work, out_dir)
    bare(work, tests, out_dir)
    for k in range(rounds):
        order = ["judge", "bare"] if k % 2 == 0 else ["bare", "judge"]
        row = {}
        for what in order:
            if what == "judge":
                row["whole"], row["tests"], row["compile"] = judge(capsule, work, out_dir)
            else:
                row["bare"], wrong = bare(work, tests, out_dir)
                if wrong:
                    sys.exit(f"judge_driver: the bare loop got wrong answers on {wrong}")
        rows.append(row)
        print(f"round {k + 1}/{rounds}: judge {n / row['tests']:.0f} tests/s (compile {row['compile']:.2f} s), "
              f"bare {n / row['bare']:.0f} tests/s", file=sys.stderr)

    judge_tps = [n / r["tests"] for r in rows]
    bare_tps = [n / r["bare"] for r in rows]
    ratios = [r["tests"] / r["bare"] for r in rows]
    print(f"# capsule judge: {n} tiny a+b tests in C++, --parallel 2\n")
    print(f"{description}; {rounds} interleaved rounds (after one unmeasured round of each), "
          f"{os.cpu_count()} CPUs.\n")
    print("| | median | min | max |")
    print("| --- | --- | --- | --- |")
    print(f"| `capsule judge --parallel 2`, test phase (tests/s) | {median(judge_tps):.0f} | {min(judge_tps):.0f} | {max(judge_tps):.0f} |")
    print(f"| bare loop, 2 workers (tests/s) | {median(bare_tps):.0f} | {min(bare_tps):.0f} | {max(bare_tps):.0f} |")
    print(f"| ratio judge / bare (time per test, per round) | {median(ratios):.2f} | {min(ratios):.2f} | {max(ratios):.2f} |")
    compile_s = [r["compile"] for r in rows]
    whole_s = [r["whole"] for r in rows]
    print(f"| compiling in the sandbox (s) | {median(compile_s):.2f} | {min(compile_s):.2f} | {max(compile_s):.2f} |")
    print(f"| the whole `capsule judge` command (s) | {median(whole_s):.2f} | {min(whole_s):.2f} | {max(whole_s):.2f} |")
    print()
    print(f"Ratio: `capsule judge` takes {median(ratios):.2f}x the bare loop's time per test "
          f"({median(judge_tps):.0f} against {median(bare_tps):.0f} tests per second).")


if __name__ == "__main__":
    main()
