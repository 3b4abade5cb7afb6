"""``capsule judge --json``: compile a solution and judge it on a directory of tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from ._binary import find_capsule
from ._errors import RunError
from ._types import Duration, Size


class JudgeError(RunError):
    """The judge itself failed (bad input, a crashed checker or interactor, no
    sandbox): ``capsule judge`` exited 125. ``report`` is its JSON, if any."""

    def __init__(self, message: str, report: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.report = report


class TestVerdict:
    """One test's outcome (docs/judge.md, "JSON")."""

    __test__ = False  # not a pytest test class
    __slots__ = ("raw", "name", "verdict", "time_ms", "memory_bytes", "wall_time_ms", "status", "exit_code",
                 "signal", "detail", "syscall", "stderr", "first_to_exit")

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        g = raw.get
        self.name: str = g("name", "")
        self.verdict: str = g("verdict", "")
        self.time_ms: float = g("time_ms", 0.0)
        self.memory_bytes: Optional[int] = g("memory_bytes")
        self.wall_time_ms: float = g("wall_time_ms", 0.0)
        self.status: Optional[str] = g("status")
        self.exit_code: Optional[int] = g("exit_code")
        self.signal: Optional[str] = g("signal")
        self.detail: Optional[str] = g("detail")
        self.syscall: Optional[str] = g("syscall")
        self.stderr: Optional[str] = g("stderr")
        self.first_to_exit: Optional[str] = g("first_to_exit")

    def __repr__(self) -> str:
        return f"TestVerdict(name={self.name!r}, verdict={self.verdict!r}, time_ms={self.time_ms})"


class Judgement:
    """``capsule judge``'s report: ``verdict`` (``OK``, ``CE``, or the first
    failed test's ``WA`` ``TLE`` ``MLE`` ``RE`` ``OLE`` ``SYS``) and ``tests``."""

    __slots__ = ("raw", "verdict", "tests", "lang", "toolchain", "limits", "accounting", "compile_output",
                 "timing", "exit_status")

    def __init__(self, raw: Dict[str, Any], exit_status: int) -> None:
        self.raw = raw
        g = raw.get
        self.verdict: str = g("verdict") or ""
        self.tests: List[TestVerdict] = [TestVerdict(t) for t in g("tests") or []]
        self.lang: Optional[str] = g("lang")
        self.toolchain: Optional[str] = g("toolchain")
        self.limits: Dict[str, Any] = g("limits") or {}
        self.accounting: Optional[str] = g("accounting")
        self.compile_output: str = g("compile_output") or ""
        self.timing: Dict[str, Any] = g("timing") or {}
        self.exit_status = exit_status

    @property
    def ok(self) -> bool:
        return self.verdict == "OK"

    def __repr__(self) -> str:
        return f"Judgement(verdict={self.verdict!r}, tests={len(self.tests)})"


def _fmt_duration(v: Duration) -> str:
    return v if isinstance(v, str) else f"{float(v) * 1000.0:g}ms"


def _argv(capsule: Optional[str], lang: str, source: str, tests: str, time: Optional[Duration],
          compile_time: Optional[Duration], memory: Optional[Size], output_limit: Optional[Size],
          checker: Optional[str], interactor: Optional[str], parallel: Optional[int], per_cpu: bool,
          json_path: str) -> List[str]:
    argv = [find_capsule(capsule), "judge", "--lang", lang, os.fspath(source), "--tests", os.fspath(tests)]
    if time is not None:
        argv += ["--time", _fmt_duration(time)]
    if compile_time is not None:
        argv += ["--compile-time", _fmt_duration(compile_time)]
    if memory is not None:
        argv += ["--memory", str(memory)]
    if output_limit is not None:
        argv += ["--output-limit", str(output_limit)]
    if checker is not None:
        argv += ["--checker", checker]
    if interactor is not None:
        argv += ["--interactor", os.fspath(interactor)]
    if parallel is not None:
        argv += ["--parallel", str(parallel)]
    if per_cpu:
        argv.append("--per-cpu")
    return argv + ["--json", json_path]


def _report(json_path: str, code: int, stdout: bytes, stderr: bytes) -> Judgement:
    raw: Optional[Dict[str, Any]] = None
    try:
        with open(json_path, "rb") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        pass
    err = stderr.decode(errors="replace").strip()
    if raw is None or code not in (0, 1):
        msg = (raw or {}).get("error") or err or f"capsule judge exited with status {code}"
        raise JudgeError(str(msg), raw)
    return Judgement(raw, code)


def judge(lang: str, source: str, tests: str, *, time: Optional[Duration] = None,
          compile_time: Optional[Duration] = None, memory: Optional[Size] = None,
          output_limit: Optional[Size] = None, checker: Optional[str] = None, interactor: Optional[str] = None,
          parallel: Optional[int] = None, per_cpu: bool = False, capsule: Optional[str] = None) -> Judgement:
    """Compile ``source`` with the preset ``lang`` (within ``compile_time``
    of wall time, the preset's 30 s by default) and judge it on every
    ``tests/*.in`` (``capsule judge --json``, docs/judge.md). Raises
    :class:`JudgeError` when the judge itself fails; a wrong solution is a
    :class:`Judgement` with its verdict."""
    d = tempfile.mkdtemp(prefix="capsule-judge-")
    try:
        path = os.path.join(d, "report.json")
        argv = _argv(capsule, lang, source, tests, time, compile_time, memory, output_limit, checker, interactor,
                     parallel, per_cpu, path)
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return _report(path, p.returncode, p.stdout, p.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def judge_async(lang: str, source: str, tests: str, *, time: Optional[Duration] = None,
                      compile_time: Optional[Duration] = None, memory: Optional[Size] = None,
                      output_limit: Optional[Size] = None, checker: Optional[str] = None,
                      interactor: Optional[str] = None, parallel: Optional[int] = None, per_cpu: bool = False,
                      capsule: Optional[str] = None) -> Judgement:
    """:func:`judge` for asyncio (the event loop is never blocked)."""
    d = tempfile.mkdtemp(prefix="capsule-judge-")
    try:
        path = os.path.join(d, "report.json")
        argv = _argv(capsule, lang, source, tests, time, compile_time, memory, output_limit, checker, interactor,
                     parallel, per_cpu, path)
        p = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out: Tuple[bytes, bytes] = await p.communicate()
        code = await p.wait()
        return _report(path, code, out[0], out[1])
    finally:
        shutil.rmtree(d, ignore_errors=True)
