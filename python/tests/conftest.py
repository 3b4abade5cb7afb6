"""Fixtures: the real ``capsule serve`` of the checkout (python/ci.sh stages
it and sets $CAPSULE_BIN), run as an unprivileged user."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Coroutine, Iterator, List, TypeVar

import pytest

import capsule_sandbox as cs

T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    if os.geteuid() == 0:
        pytest.exit("capsule refuses root: run the suite as an unprivileged user (python/ci.sh does)", 2)


@pytest.fixture(scope="session")
def capsule_bin() -> str:
    return cs.find_capsule()


@pytest.fixture
def sb(capsule_bin: str) -> Iterator[cs.Sandbox]:
    with cs.Sandbox(parallel=2, capsule=capsule_bin) as s:
        yield s


def arun(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


_n = [0]


def marker() -> str:
    """A unique sleep duration: finds the run's processes in /proc."""
    _n[0] += 1
    return f"1000.{os.getpid()}{_n[0]}{time.time_ns() % 10**9:09d}"


def procs_with(m: str) -> List[int]:
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if m.encode() in f.read():
                    found.append(int(d))
        except OSError:
            pass
    return found


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.005)
