"""Sessions over the JSON-lines protocol (docs/sessions.md): a detached
command's process and files are there for the next command; results are
each command's own; stop; errors as RunError."""

from __future__ import annotations

import pytest

import capsule_sandbox as cs


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
