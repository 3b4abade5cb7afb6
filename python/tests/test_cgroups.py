"""memory-limit and cpu-time-limit: need delegated cgroup v2, so they run
in scripts/test.sh's VM (`python/ci.sh --cgroups`); elsewhere they skip,
and with CAPSULE_TEST_CGROUPS=1 a machine without cgroups fails them."""

from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest

import capsule_sandbox as cs

pytestmark = pytest.mark.cgroups


@pytest.fixture
def csb(capsule_bin: str) -> Iterator[cs.Sandbox]:
    with cs.Sandbox(parallel=2, capsule=capsule_bin) as s:
        if s.run(["/bin/true"]).accounting != "cgroup":
            if os.environ.get("CAPSULE_TEST_CGROUPS") == "1":
                pytest.fail("no cgroups here, and CAPSULE_TEST_CGROUPS=1 needs them")
            pytest.skip("no delegated cgroup v2 here (the accounting is rusage)")
        yield s


def test_memory_limit(csb: cs.Sandbox) -> None:
    py = shutil.which("python3", path="/usr/bin:/bin")
    assert py is not None, "no python3 in /usr/bin or /bin"
    r = csb.run([py, "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"],
                limits=cs.Limits(memory="64M", wall_time=20))
    assert r.status is cs.Status.MEMORY_LIMIT and r.killed_by_limit, r.raw
    assert r.peak_memory_bytes is not None and r.peak_memory_bytes <= 64 << 20


def test_cpu_time_limit(csb: cs.Sandbox) -> None:
    r = csb.run(["/bin/sh", "-c", "while :; do :; done"], limits=cs.Limits(cpu_time=0.3, wall_time=20))
    assert r.status is cs.Status.CPU_TIME_LIMIT and r.killed_by_limit, r.raw
    assert r.cpu_time_ms >= 250


def test_session_command_memory(csb: cs.Sandbox) -> None:
    py = shutil.which("python3", path="/usr/bin:/bin")
    assert py is not None, "no python3 in /usr/bin or /bin"
    csb.session_start("mem", grace=0.5)
    bomb = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"
    r = csb.session_exec("mem", [py, "-c", bomb], memory="48M")
    assert isinstance(r, cs.Result)
    assert r.status is cs.Status.MEMORY_LIMIT and r.killed_by_limit, r.raw
    assert r.raw["accounting"] == "cgroup" and r.peak_memory_bytes is not None, r.raw
    assert r.peak_memory_bytes <= 48 << 20, r.raw
    r = csb.session_exec("mem", ["/bin/true"], memory=32 << 20)
    assert isinstance(r, cs.Result)
    assert r.exit_code == 0, r.raw
    assert csb.session_stop("mem") == "stopped"
