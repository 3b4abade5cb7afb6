"""kill and cancel, sync and asyncio: the run's processes are gone, its
handle answers (killed, or Cancelled), a queued run cancelled never runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import capsule_sandbox as cs
from conftest import arun, marker, procs_with, wait_for


def test_kill_running(sb: cs.Sandbox) -> None:
    m = marker()
    h = sb.submit(["/bin/sleep", m])
    wait_for(lambda: bool(procs_with(m)), "the run started")
    assert not h.done()
    t0 = time.monotonic()
    assert h.kill() is True
    r = h.wait(5.0)
    assert r.status is cs.Status.KILLED and not r.killed_by_limit, r.raw
    wait_for(lambda: not procs_with(m), "the killed run's processes gone", 2.0)
    assert time.monotonic() - t0 < 3
    assert h.kill() is False and h.cancel() is False
    assert h.wait() is r


def test_cancel_running_and_queued(capsule_bin: str, tmp_path: Path) -> None:
    with cs.Sandbox(parallel=1, capsule=capsule_bin) as sb:
        m = marker()
        first = sb.submit(["/bin/sleep", m])
        wait_for(lambda: bool(procs_with(m)), "the first run started")
        flag = tmp_path / "queued-ran"
        queued = sb.submit(["/bin/sh", "-c", f"touch {flag}"], mounts=[{"type": "bind", "src": str(tmp_path),
                                                                       "dst": str(tmp_path)}])
        assert queued.cancel() is True
        with pytest.raises(cs.Cancelled):
            queued.wait(5.0)
        assert procs_with(m), "cancelling the queued run stopped the running one"
        assert first.cancel() is True
        with pytest.raises(cs.Cancelled, match="cancelled"):
            first.wait(5.0)
        wait_for(lambda: not procs_with(m), "the cancelled run's processes gone", 2.0)
        assert sb.run(["/bin/true"]).ok
        assert not flag.exists(), "the cancelled queued run ran"


def test_wait_timeout_leaves_the_run_and_run_timeout_cancels_it(sb: cs.Sandbox) -> None:
    m = marker()
    h = sb.submit(["/bin/sleep", m])
    with pytest.raises(TimeoutError):
        h.wait(0.05)
    assert not h.done() and h.kill()
    assert h.wait(5).status is cs.Status.KILLED
    m2 = marker()
    with pytest.raises(TimeoutError):
        sb.run(["/bin/sleep", m2], timeout=0.3)
    wait_for(lambda: not procs_with(m2), "run(timeout=) cancelled the run", 3.0)
    assert sb.run(["/bin/true"]).ok


def test_async_kill_cancel_and_task_cancellation(capsule_bin: str) -> None:
    async def main() -> None:
        async with cs.AsyncSandbox(parallel=2, capsule=capsule_bin) as asb:
            m = marker()
            h = await asb.submit(["/bin/sleep", m])
            while not procs_with(m):
                await asyncio.sleep(0.005)
            assert await h.kill()
            assert (await h.wait(5)).status is cs.Status.KILLED
            assert not await h.kill()
            h2 = await asb.submit(["/bin/sleep", "10"])
            assert await h2.cancel()
            with pytest.raises(cs.Cancelled):
                await h2.wait(5)
            # A task awaiting run() cancelled: the run is cancelled too.
            m3 = marker()
            task = asyncio.ensure_future(asb.run(["/bin/sleep", m3]))
            while not procs_with(m3):
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = time.monotonic() + 3
            while procs_with(m3):
                assert time.monotonic() < deadline, "the cancelled task's run still runs"
                await asyncio.sleep(0.01)
            assert (await asb.run(["/bin/true"])).ok
    arun(main())
