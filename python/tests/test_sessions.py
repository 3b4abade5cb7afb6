"""Sessions over the JSON-lines protocol (docs/sessions.md): a detached
command's process and files are there for the next command; results are
each command's own, with limits of their own; stop; errors as RunError;
the same from AsyncSandbox."""

from __future__ import annotations

import asyncio
import time

import pytest

import capsule_sandbox as cs

from conftest import arun


def test_session_keeps_processes_and_files(sb: cs.Sandbox) -> None:
    sb.session_start("py", ["-"], grace=0.5)
    pid = sb.session_exec("py", ["/bin/sh", "-c", "echo hi > /tmp/f; exec sleep 1000"], detach=True)
    assert isinstance(pid, int) and pid > 1
    r = sb.session_exec("py", ["/bin/sh", "-c", "i=0; while [ ! -e /tmp/f ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; "
                                   f"test -e /tmp/f && kill -0 {pid} && exit 5"])
    assert isinstance(r, cs.Result) and r.exit_code == 5
    r = sb.session_exec("py", ["/bin/sh", "-c", "echo $X; sleep 5"], env={"X": "y"}, wall_time=0.3)
    assert isinstance(r, cs.Result) and r.status == cs.Status.WALL_TIME_LIMIT
    assert [s["name"] for s in sb.session_list()] == ["py"]
    assert sb.session_stop("py") == "stopped"
    assert sb.session_list() == []
    with pytest.raises(cs.RunError, match='no session named "py"'):
        sb.session_exec("py", ["/bin/true"])


SPIN = "(sh -c 'while :; do :; done' &); sh -c 'while :; do :; done' & sleep 30"


def test_session_command_cpu_time(sb: cs.Sandbox) -> None:
    sb.session_start("cpu", grace=0.5)
    t = time.monotonic()
    r = sb.session_exec("cpu", ["/bin/sh", "-c", SPIN], cpu_time=0.4)
    assert isinstance(r, cs.Result) and r.status == cs.Status.CPU_TIME_LIMIT, r
    assert time.monotonic() - t < 5
    assert 0.35 <= (r.cpu_user_ms + r.cpu_system_ms) / 1000 < 3, r
    r = sb.session_exec("cpu", ["/bin/sh", "-c", "exit 6"], cpu_time=5)
    assert isinstance(r, cs.Result) and r.exit_code == 6
    with pytest.raises(ValueError, match="cpu_time"):
        sb.session_exec("cpu", ["/bin/true"], cpu_time=-1)
    assert sb.session_stop("cpu") == "stopped"


def test_async_sessions(capsule_bin: str) -> None:
    async def main() -> None:
        async with cs.AsyncSandbox(parallel=2, capsule=capsule_bin) as asb:
            await asb.session_start("a", ["-"], grace=0.5)
            await asb.session_start("b", ["-"], grace=0.5)
            pid = await asb.session_exec("a", ["/bin/sh", "-c", "echo x > /tmp/a; exec sleep 1000"], detach=True)
            assert isinstance(pid, int) and pid > 1
            wait = "i=0; while [ ! -e /tmp/a ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; "
            # Two sessions' commands at once: each its own result; b sees none of a's files.
            ra, rb = await asyncio.gather(
                asb.session_exec("a", ["/bin/sh", "-c", wait + f"test -e /tmp/a && kill -0 {pid} && exit 5"]),
                asb.session_exec("b", ["/bin/sh", "-c", "sleep 0.2; test -e /tmp/a; exit $?"]))
            assert isinstance(ra, cs.Result) and ra.exit_code == 5, ra
            assert isinstance(rb, cs.Result) and rb.exit_code == 1, rb
            r = await asb.session_exec("a", ["/bin/sh", "-c", SPIN], cpu_time=0.3)
            assert isinstance(r, cs.Result) and r.status == cs.Status.CPU_TIME_LIMIT, r
            assert sorted(s["name"] for s in await asb.session_list()) == ["a", "b"]
            assert await asb.session_stop("a") == "stopped"
            with pytest.raises(cs.RunError, match='no session named "a"'):
                await asb.session_exec("a", ["/bin/true"])
            assert [s["name"] for s in await asb.session_list()] == ["b"]
    arun(main())
