"""1,000 pipelined runs from 8 threads and from asyncio, every result
matched to its request (each run echoes its own token)."""

from __future__ import annotations

import asyncio
import threading
from typing import Dict, List

import capsule_sandbox as cs
from conftest import arun

RUNS = 1000
THREADS = 8


def test_thousand_runs_from_eight_threads(capsule_bin: str) -> None:
    got: Dict[str, str] = {}
    errors: List[BaseException] = []
    lock = threading.Lock()
    with cs.Sandbox(parallel=2, capsule=capsule_bin) as sb:
        def worker(t: int) -> None:
            try:
                # Each thread keeps several runs in flight, then waits in an order of its own.
                handles = []
                for i in range(t, RUNS, THREADS):
                    token = f"run-{i}"
                    handles.append((token, sb.submit(["/bin/echo", token], stdout=cs.Capture(64))))
                    if len(handles) >= 8:
                        tok, h = handles.pop(len(handles) // 2)
                        r = h.wait(60)
                        assert r.stdout is not None
                        with lock:
                            got[tok] = r.stdout.text
                for tok, h in reversed(handles):
                    r = h.wait(60)
                    assert r.stdout is not None
                    with lock:
                        got[tok] = r.stdout.text
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors, errors[0]
    assert len(got) == RUNS
    assert all(text == f"{tok}\n" for tok, text in got.items()), [(k, v) for k, v in got.items() if v != k + "\n"]


def test_thousand_runs_from_asyncio(capsule_bin: str) -> None:
    async def main() -> List[str]:
        async with cs.AsyncSandbox(parallel=2, capsule=capsule_bin) as asb:
            sem = asyncio.Semaphore(64)

            async def one(i: int) -> str:
                async with sem:
                    r = await asb.run(["/bin/echo", f"run-{i}"], stdout=cs.Capture(64))
                    assert r.ok and r.stdout is not None
                    return r.stdout.text
            return await asyncio.gather(*(one(i) for i in range(RUNS)))
    texts = arun(main())
    assert texts == [f"run-{i}\n" for i in range(RUNS)]


def test_the_event_loop_is_never_blocked(capsule_bin: str) -> None:
    # A ticker keeps ticking every 10 ms while a 1 s run is awaited (a client
    # that blocked the loop would let it tick about once), and 40 runs go
    # through 2 slots beside it.
    async def main() -> int:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0.01)
                ticks += 1
        async with cs.AsyncSandbox(parallel=2, capsule=capsule_bin) as asb:
            assert (await asb.run(["/bin/true"])).ok
            tk = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            before = ticks
            assert (await asb.run(["/bin/sleep", "1"])).ok
            during = ticks - before
            rs = await asyncio.gather(*(asb.run(["/bin/sleep", "0.05"]) for _ in range(40)))
            stop = True
            await tk
        assert all(r.ok for r in rs)
        return during
    assert arun(main()) >= 10


def test_run_from_eight_threads_at_once(capsule_bin: str) -> None:
    # run() from many threads: one reads for itself, the others wait for it
    # to hand over their results or its role; every result is its own.
    errors: List[BaseException] = []
    with cs.Sandbox(parallel=2, capsule=capsule_bin) as sb:
        def worker(t: int) -> None:
            try:
                for i in range(40):
                    token = f"t{t}-{i}"
                    if i % 3 == 0:
                        r = sb.run(["/bin/echo", token], stdout=cs.Capture(64), timeout=60)
                    else:
                        r = sb.run(["/bin/sh", "-c", 'echo "$0"', token], stdout=cs.Capture(64))
                    assert r.stdout is not None and r.stdout.text == token + "\n", (token, r.raw)
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors, errors[0]
