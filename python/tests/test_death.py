"""A server killed mid-run: every pending handle and the next call raise
SupervisorDied; results that came before stay; nothing hangs."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import capsule_sandbox as cs
from conftest import arun, marker, procs_with, wait_for


def test_server_killed_mid_run(capsule_bin: str) -> None:
    sb = cs.Sandbox(parallel=2, capsule=capsule_bin)
    done = sb.submit(["/bin/echo", "before"], stdout=cs.Capture())
    assert done.wait(10).ok
    m = marker()
    pending = [sb.submit(["/bin/sleep", m]) for _ in range(4)]
    wait_for(lambda: bool(procs_with(m)), "the runs started")
    assert sb.pid is not None
    os.kill(sb.pid, signal.SIGKILL)
    for h in pending:
        with pytest.raises(cs.SupervisorDied, match="signal 9"):
            h.wait(10)
    with pytest.raises(cs.SupervisorDied):
        sb.run(["/bin/true"])
    with pytest.raises(cs.SupervisorDied):
        pending[0].kill()
    r = done.wait()
    assert r.stdout is not None and r.stdout.text == "before\n"
    wait_for(lambda: not procs_with(m), "the dead server's runs gone", 5.0)
    sb.close()


def test_server_that_cannot_start_says_why(capsule_bin: str) -> None:
    with cs.Sandbox(capsule=capsule_bin, server_args=["--no-such-option"]) as sb:
        with pytest.raises(cs.SupervisorDied, match="exit status 125") as e:
            sb.run(["/bin/true"])
    assert "--no-such-option" in str(e.value)


def test_closed_sandbox_refuses_calls(capsule_bin: str) -> None:
    sb = cs.Sandbox(capsule=capsule_bin)
    h = sb.submit(["/bin/sleep", "0.2"])
    sb.close()
    assert h.wait().ok, "close() lets submitted runs finish"
    with pytest.raises(cs.SupervisorDied, match="closed"):
        sb.run(["/bin/true"])


def test_async_server_killed_mid_run(capsule_bin: str) -> None:
    async def main() -> None:
        asb = cs.AsyncSandbox(parallel=2, capsule=capsule_bin)
        await asb.start()
        m = marker()
        hs = [await asb.submit(["/bin/sleep", m]) for _ in range(3)]
        while not procs_with(m):
            await asyncio.sleep(0.005)
        assert asb.pid is not None
        os.kill(asb.pid, signal.SIGKILL)
        for h in hs:
            with pytest.raises(cs.SupervisorDied, match="signal 9"):
                await h.wait(10)
        with pytest.raises(cs.SupervisorDied):
            await asb.run(["/bin/true"])
        await asb.close()
    arun(main())
