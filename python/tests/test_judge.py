"""cs.judge: `capsule judge --json` on a C a+b problem."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import capsule_sandbox as cs
from conftest import arun

OK = "#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a+b);return 0;}\n"
WA = "#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);printf(\"%ld\\n\",a-b);return 0;}\n"


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    if shutil.which("gcc") is None:
        if os.environ.get("CAPSULE_TEST_STRICT") == "1":
            pytest.fail("no gcc, and CAPSULE_TEST_STRICT=1: the c preset must compile (.ci/run installs gcc)")
        pytest.skip("no gcc: the c preset cannot compile")
    t = tmp_path / "tests"
    t.mkdir()
    for i, (a, b) in enumerate([(1, 2), (5, 0), (10, 20)], 1):
        (t / f"{i}.in").write_text(f"{a} {b}\n")
        (t / f"{i}.out").write_text(f"{a + b}\n")
    (tmp_path / "ok.c").write_text(OK)
    (tmp_path / "wa.c").write_text(WA)
    (tmp_path / "ce.c").write_text("int main(void) { return }\n")
    return tmp_path


def test_judge_verdicts(problem: Path, capsule_bin: str) -> None:
    v = cs.judge(lang="c", source=str(problem / "ok.c"), tests=str(problem / "tests"), time=1.0, memory="256M",
                 capsule=capsule_bin)
    assert v.verdict == "OK" and v.ok and v.exit_status == 0, v.raw
    assert [(t.name, t.verdict) for t in v.tests] == [("1", "OK"), ("2", "OK"), ("3", "OK")]
    assert all(t.time_ms >= 0 and t.memory_bytes for t in v.tests)
    v = cs.judge(lang="c", source=str(problem / "wa.c"), tests=str(problem / "tests"), capsule=capsule_bin)
    assert v.verdict == "WA" and v.exit_status == 1
    assert v.tests[0].verdict == "WA" and v.tests[0].detail and v.tests[1].verdict == "OK"
    v = arun(cs.judge_async(lang="c", source=str(problem / "ce.c"), tests=str(problem / "tests"),
                            capsule=capsule_bin))
    assert v.verdict == "CE" and v.tests == [] and "error" in v.compile_output


def test_judge_compile_time_and_per_cpu(problem: Path, capsule_bin: str) -> None:
    v = cs.judge(lang="c", source=str(problem / "ok.c"), tests=str(problem / "tests"), compile_time=0.001,
                 capsule=capsule_bin)
    assert v.verdict == "CE" and v.compile_output.endswith("(the compiler ran out of time)\n"), v.raw
    assert v.limits["compile_time_ms"] == 1.0, v.raw
    v = arun(cs.judge_async(lang="c", source=str(problem / "ok.c"), tests=str(problem / "tests"),
                            compile_time="2m", parallel=2, per_cpu=True, capsule=capsule_bin))
    assert v.verdict == "OK" and v.limits["compile_time_ms"] == 120000.0, v.raw
    with pytest.raises(cs.JudgeError, match="--compile-time"):
        cs.judge(lang="c", source=str(problem / "ok.c"), tests=str(problem / "tests"), compile_time="2h",
                 capsule=capsule_bin)


def test_judge_errors(problem: Path, capsule_bin: str) -> None:
    with pytest.raises(cs.JudgeError, match="klingon"):
        cs.judge(lang="klingon", source=str(problem / "ok.c"), tests=str(problem / "tests"), capsule=capsule_bin)
    with pytest.raises(cs.JudgeError, match="--memory"):
        cs.judge(lang="c", source=str(problem / "ok.c"), tests=str(problem / "tests"), memory="1K",
                 capsule=capsule_bin)
