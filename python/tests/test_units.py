"""What needs no server: the binary's lookup order, specs, results."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, List

import pytest

import capsule_sandbox as cs
from capsule_sandbox import _binary, _proto


def _exe(p: Path) -> str:
    p.write_text("#!/bin/sh\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _exe(tmp_path / "explicit")
    env = _exe(tmp_path / "env")
    (tmp_path / "bundled").mkdir()
    bundled = _exe(tmp_path / "bundled" / "capsule")
    (tmp_path / "path").mkdir()
    on_path = _exe(tmp_path / "path" / "capsule")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setenv("CAPSULE_BIN", env)
    monkeypatch.setattr(_binary, "_BUNDLED", bundled)
    assert cs.find_capsule(explicit) == explicit
    assert cs.find_capsule() == env
    monkeypatch.delenv("CAPSULE_BIN")
    assert cs.find_capsule() == bundled
    os.unlink(bundled)
    assert cs.find_capsule() == on_path
    os.unlink(on_path)
    with pytest.raises(cs.BinaryNotFound, match="CAPSULE_BIN"):
        cs.find_capsule()
    with pytest.raises(cs.BinaryNotFound, match="not an executable"):
        cs.find_capsule(str(tmp_path / "nope"))
    monkeypatch.setenv("CAPSULE_BIN", str(tmp_path / "nope"))
    with pytest.raises(cs.BinaryNotFound, match=r"\$CAPSULE_BIN"):
        cs.find_capsule()


def test_spec_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = cs.spec(["./a.out", tmp_path], stdin="1.in", stdout=cs.Capture(1 << 16), stderr=cs.Pipe("err"),
                limits=cs.Limits(wall_time=1.5, cpu_time="300ms", memory="256M", pids=16,
                                 extra={"stack": "8M"}),
                seccomp="strict", share_net=True)
    assert _proto.encode({"id": 1, "spec": s}).decode().startswith(f'{{"id":1,"spec":{{"argv":["./a.out","{tmp_path}"]')
    assert s == {
        "argv": ["./a.out", tmp_path],
        "stdin": str(tmp_path / "1.in"),
        "stdout": {"capture": 65536},
        "stderr": {"pipe": str(tmp_path / "err")},
        "limits": {"wall_time": 1500.0, "cpu_time": "300ms", "memory": "256M", "pids": 16, "stack": "8M"},
        "seccomp": "strict",
        "share_net": True,
    }
    raw = {"argv": ["x"], "stdout": "rel"}
    assert cs.spec(raw) == raw and cs.spec(raw) is not raw
    with pytest.raises(TypeError, match="list of strings"):
        cs.spec("ls -l")
    with pytest.raises(TypeError, match="seconds"):
        cs.Limits(wall_time=[1]).to_json()  # type: ignore[arg-type]


def test_result_keeps_unknown_fields_and_statuses() -> None:
    r = cs.Result({"status": "exited", "exit_code": 0, "brand_new": [1], "stdout": {"text": "hi", "bytes": 9,
                                                                                   "truncated": True}})
    assert r.status is cs.Status.EXITED and isinstance(r.status, str) and str.__eq__(r.status, "exited") and r.ok
    assert r.raw["brand_new"] == [1]
    assert r.stdout is not None and (r.stdout.text, r.stdout.bytes, r.stdout.truncated) == ("hi", 9, True)
    later = cs.Result({"status": "frozen-by-a-newer-capsule"})
    assert later.status == "frozen-by-a-newer-capsule" and later.status.name == "FROZEN_BY_A_NEWER_CAPSULE"
    assert not later.ok
    assert {s.value for s in cs.Status} == {"exited", "signaled", "wall-time-limit", "cpu-time-limit",
                                            "memory-limit", "output-limit", "forbidden-syscall", "killed"}


def test_oversized_and_unencodable_requests_are_refused_before_sending() -> None:
    with pytest.raises(cs.RunError, match="longer than the server's"):
        _proto.encode({"id": 1, "spec": {"argv": ["x" * (1 << 20)]}})
    with pytest.raises(cs.RunError, match="not JSON"):
        _proto.encode({"id": 1, "spec": {"argv": [{1, 2}]}})


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="parallel"):
        cs.Sandbox(parallel=0)
    with pytest.raises(ValueError, match="network"):
        cs.Sandbox(network="wide")
    with pytest.raises(ValueError, match="per_cpu"):
        cs.Sandbox(parallel=2, per_cpu=True, network="shared")


def test_argv_requests_equal_the_encoders() -> None:
    argvs: List[List[Any]] = [[], ["/bin/true"], ['a"b\\c', "é ✓ 😀", "\t\n\x00\x1f\x7f", "\u2028"], ["x" * 1000] * 3]
    for argv in argvs:
        line = _proto.encode_run(42, argv)
        assert line == _proto.encode({"id": 42, "spec": {"argv": argv}}), argv
        assert json.loads(line) == {"id": 42, "spec": {"argv": argv}} and line.endswith(b"}\n")
    assert _proto.encode_run(1, [Path("/bin/sh"), 3]) == b'{"id":1,"spec":{"argv":["/bin/sh",3]}}\n'
    with pytest.raises(cs.RunError, match="not JSON"):
        _proto.encode_run(1, ["\udc80"])
    with pytest.raises(cs.RunError, match="longer than the server's"):
        _proto.encode_run(1, ["x" * (1 << 20)])


def test_response_lines() -> None:
    notes: List[str] = []
    one = '{"id":1,"result":{"stdout":{"text":"é✓\\n"}}}'
    assert _proto.decode_lines(one, notes) == [json.loads(one)]
    # A whole line with its newline, as the clients pass it: n excludes the newline.
    assert _proto.decode_lines(one + "\n", notes, len(one)) == [json.loads(one)]
    assert _proto.decode_lines(one + "\n" + one, notes) == [json.loads(one)] * 2
    assert _proto.decode_lines("", notes, 0) == [] and not notes
    assert _proto.decode_lines('{"id":1} x', notes) == [] and notes == ["unreadable response '{\"id\":1} x'"]
    assert _proto.decode_lines('nope\n{"id":2}\n', notes, 13) == [{"id": 2}] and notes[-1] == "unreadable response 'nope'"
