"""Runs through the real ``capsule serve``: every status this machine can
give, captures, files, interactive pairs, bad specs, the socket server."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict

import pytest

import capsule_sandbox as cs
from conftest import arun


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_exited(sb: cs.Sandbox) -> None:
    r = sb.run(sh("exit 3"))
    assert r.status is cs.Status.EXITED and r.exit_code == 3 and r.signal is None, r.raw
    assert not r.killed_by_limit and r.wall_time_ms > 0 and r.accounting in ("rusage", "cgroup")
    assert r.cpu_user_ms >= 0 and r.cpu_system_ms >= 0 and r.peak_memory_bytes
    assert r.raw["status"] == "exited"
    assert sb.run(["/bin/true"]).ok


def test_signaled(sb: cs.Sandbox) -> None:
    r = sb.run(sh("kill -SEGV $$"))
    assert r.status is cs.Status.SIGNALED and r.signal == "SIGSEGV" and r.exit_code is None, r.raw


def test_wall_time_limit(sb: cs.Sandbox) -> None:
    t0 = time.monotonic()
    r = sb.run(["/bin/sleep", "10"], limits=cs.Limits(wall_time=0.2))
    assert r.status is cs.Status.WALL_TIME_LIMIT and r.killed_by_limit and r.signal == "SIGKILL", r.raw
    assert time.monotonic() - t0 < 5


def test_output_limit(sb: cs.Sandbox, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.touch()
    r = sb.run(sh("head -c 5000 /dev/zero"), stdout=cs.Pipe(str(out)), limits=cs.Limits(output_limit=1000))
    assert r.status is cs.Status.OUTPUT_LIMIT and r.killed_by_limit, r.raw
    assert out.stat().st_size == 1000
    r = sb.run(sh("exec head -c 5000 /dev/zero"), stdout=str(out), limits=cs.Limits(output_limit="1K"))
    assert r.status is cs.Status.OUTPUT_LIMIT, r.raw


def test_forbidden_syscall(sb: cs.Sandbox) -> None:
    # The system's python3 (the sandbox's environment is PATH alone).
    py = shutil.which("python3", path="/usr/bin:/bin")
    assert py is not None, "no python3 in /usr/bin or /bin"
    r = sb.run([py, "-c", "import socket; socket.socket()"], seccomp="python")
    assert r.status is cs.Status.FORBIDDEN_SYSCALL and r.syscall == "socket", r.raw
    assert r.syscall_args is not None and len(r.syscall_args) == 6


def test_killed(sb: cs.Sandbox) -> None:
    h = sb.submit({"argv": ["sleep", "10"]})
    time.sleep(0.2)
    assert h.kill() is True
    r = h.wait(timeout=5.0)
    assert r.status is cs.Status.KILLED, r.raw


def test_captures_and_truncation(sb: cs.Sandbox) -> None:
    r = sb.run(sh("printf 01234567890123456789; printf EE >&2"), stdout=cs.Capture(10), stderr=cs.Capture("64K"))
    assert r.stdout is not None and r.stderr is not None
    assert (r.stdout.text, r.stdout.bytes, r.stdout.truncated) == ("0123456789", 20, True)
    assert (r.stderr.text, r.stderr.bytes, r.stderr.truncated) == ("EE", 2, False)
    r = sb.run(sh("printf 0123456789"), stdout=cs.Capture(10))
    assert r.stdout is not None and (r.stdout.text, r.stdout.bytes, r.stdout.truncated) == ("0123456789", 10, False)
    r = sb.run(sh("yes | head -c 1048576"), stdout=cs.Capture("1K"))
    assert r.stdout is not None and len(r.stdout.text) == 1024 and r.stdout.bytes == 1 << 20 and r.stdout.truncated
    r = sb.run(["/bin/true"], stdout=cs.Capture(100))
    assert r.stdout is not None and (r.stdout.text, r.stdout.bytes, r.stdout.truncated) == ("", 0, False)
    r = sb.run(sh(r"printf 'a\377b'"), stdout=cs.Capture(100))
    assert r.stdout is not None and r.stdout.text == "a\ufffdb" and r.stdout.bytes == 3
    assert sb.run(["/bin/true"]).stdout is None


def test_files_relative_to_the_caller(sb: cs.Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("1.in").write_text("3 4\n")
    r = sb.run(sh("read a b; echo $((a + b))"), stdin="1.in", stdout="1.out")
    assert r.ok, r.raw
    assert Path("1.out").read_text() == "7\n"
    r = sb.run(sh("read a b; echo $((a * b))"), stdin=cs.Pipe("1.in"), stdout=cs.Capture())
    assert r.stdout is not None and r.stdout.text == "12\n"


def test_environment_and_extra_fields(sb: cs.Sandbox) -> None:
    r = sb.run(sh("echo $GREETING $(hostname)"), env={"GREETING": "hi"}, hostname="box", stdout=cs.Capture())
    assert r.stdout is not None and r.stdout.text == "hi box\n", r.raw


def test_bad_specs(sb: cs.Sandbox, tmp_path: Path) -> None:
    with pytest.raises(cs.RunError, match="unknown field `wal_time`"):
        sb.run({"argv": ["/bin/true"], "wal_time": "1s"})
    with pytest.raises(cs.RunError, match="argv"):
        sb.run({"env": {}})
    with pytest.raises(cs.RunError, match="/nonexistent-capsule-src"):
        sb.run(["/bin/true"], mounts=[{"type": "bind", "src": "/nonexistent-capsule-src", "dst": "/mnt"}])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(cs.RunError, match="FIFO"):
        sb.run(["/bin/cat"], stdin=str(fifo))
    with pytest.raises(cs.RunError, match="memory"):
        sb.run(["/bin/true"], limits=cs.Limits(memory="lots"))
    with pytest.raises(cs.RunError, match="longer than"):
        sb.run(["/bin/echo", "x" * (1 << 20)])
    # Not a cancellation: the message is capsule's.
    try:
        sb.run({"argv": ["/bin/true"], "wal_time": "1s"})
    except cs.Cancelled:
        pytest.fail("an invalid spec is not a cancellation")
    except cs.RunError as e:
        assert "expected one of" in str(e) and e.request_id is not None
    assert sb.run(["/bin/true"]).ok


def test_interact(sb: cs.Sandbox) -> None:
    p = sb.interact(solution=sh("read x; echo $((x + 1))"),
                    interactor=sh('echo 41; read y; [ "$y" = 42 ] && echo right >&2'))
    assert p.first_to_exit in ("solution", "interactor")
    assert p.solution.ok and p.interactor.ok, p.raw
    p = sb.interact(solution={"argv": ["sleep", "10"], "limits": {"wall_time": "1s"}},
                    interactor=sh("exit 1"))
    assert p.first_to_exit == "interactor" and p.interactor.exit_code == 1, p.raw
    with pytest.raises(cs.RunError, match="solution"):
        sb.interact(solution={"argv": ["/bin/true"], "stdin": "/dev/null"}, interactor=["/bin/true"])


def test_async_same_calls(capsule_bin: str) -> None:
    async def main() -> None:
        async with cs.AsyncSandbox(parallel=2, capsule=capsule_bin) as asb:
            r = await asb.run(sh("echo hi; exit 2"), stdout=cs.Capture())
            assert r.exit_code == 2 and r.stdout is not None and r.stdout.text == "hi\n"
            with pytest.raises(cs.RunError, match="unknown field"):
                await asb.run({"argv": ["/bin/true"], "wal_time": 1})
            p = await asb.interact(sh("read x; echo $((x + 1))"), sh('echo 1; read y; [ "$y" = 2 ]'))
            assert p.solution.ok and p.interactor.ok
            h = await asb.submit(["sleep", "10"])
            with pytest.raises(asyncio_timeout()):
                await h.wait(timeout=0.1)
            assert await h.kill()
            assert (await h.wait()).status is cs.Status.KILLED
    arun(main())


def test_per_cpu_runs_each_on_one_cpu(capsule_bin: str) -> None:
    cpus = len(os.sched_getaffinity(0))
    spec = sh("grep Cpus_allowed_list /proc/self/status; sleep 0.5")
    with cs.Sandbox(parallel=cpus, capsule=capsule_bin, per_cpu=True) as sb:
        handles = [sb.submit(spec, stdout=cs.Capture()) for _ in range(cpus)]
        seen = set()
        for h in handles:
            r = h.wait()
            assert r.ok and r.stdout is not None, r.raw
            one = r.stdout.text.split(":", 1)[1].strip()
            assert one.isdigit(), r.raw
            seen.add(int(one))
        assert seen == os.sched_getaffinity(0), seen
        h = sb.submit(["sleep", "10"])
        assert h.kill() and h.wait().status is cs.Status.KILLED


def asyncio_timeout() -> type[BaseException]:
    import asyncio
    return asyncio.TimeoutError


def test_connect_to_a_listening_server(capsule_bin: str, tmp_path: Path) -> None:
    path = str(tmp_path / "capsule.sock")
    server = subprocess.Popen([capsule_bin, "serve", "--parallel", "2", "--listen", path])
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(path):
            assert time.monotonic() < deadline and server.poll() is None, "the socket did not appear"
            time.sleep(0.01)
        with cs.Sandbox.connect(path) as a:
            r = a.run(sh("echo over the socket"), stdout=cs.Capture())
            assert r.stdout is not None and r.stdout.text == "over the socket\n"
            h = a.submit(["sleep", "10"])
            assert h.cancel()
            with pytest.raises(cs.Cancelled):
                h.wait(5)

        async def main() -> str:
            b = await cs.AsyncSandbox.connect(path)
            try:
                r = await b.run(sh("echo async"), stdout=cs.Capture())
                assert r.stdout is not None
                return r.stdout.text
            finally:
                await b.close()
        assert arun(main()) == "async\n"
    finally:
        server.terminate()
        assert server.wait(10) == 0
    with pytest.raises(cs.SupervisorDied, match="cannot connect"):
        cs.Sandbox.connect(path)


# The expected argument built by printf from ASCII escapes, so the check
# does not pass through the encoding it checks.
_ODD = 'a"b\\c é\t'
_ODD_SCRIPT = r'''[ "$1" = "$(printf 'a"b\\c \303\251\t')" ] && exit 7; exit 1'''


def test_argv_alone_arrives_intact(sb: cs.Sandbox) -> None:
    # run() of an argv alone formats its request itself: quotes, backslashes,
    # non-ASCII and control characters, paths, and what JSON cannot carry.
    assert sb.run(["/bin/sh", "-c", _ODD_SCRIPT, "sh", _ODD]).exit_code == 7
    assert sb.run(["/bin/sh", "-c", _ODD_SCRIPT, "sh", "other"]).exit_code == 1
    assert sb.run([Path("/bin/sh"), "-c", "exit 5"]).exit_code == 5
    with pytest.raises(cs.RunError, match="not JSON"):
        sb.run(["/bin/echo", "\udc80"])
    assert sb.run(["/bin/true"]).ok and not sb._pending

    async def main() -> None:
        async with cs.AsyncSandbox(capsule=sb.capsule) as asb:
            assert (await asb.run(["/bin/sh", "-c", _ODD_SCRIPT, "sh", _ODD])).exit_code == 7
            assert (await asb.run([Path("/bin/sh"), "-c", "exit 5"])).exit_code == 5
            with pytest.raises(cs.RunError, match="not JSON"):
                await asb.run(["/bin/echo", "\udc80"])
            assert (await asb.run(["/bin/true"])).ok and not asb._pending
    arun(main())


def test_every_limit_the_protocol_has(sb: cs.Sandbox) -> None:
    """Each field of the protocol's ``limits`` that ``Limits`` names reaches the run."""
    lim = cs.Limits(locked_memory=0, open_files=64, stack="4M", nested_namespaces=0, inotify_instances=2,
                    inotify_watches=16)
    assert lim.to_json() == {"open_files": 64, "stack": "4M", "locked_memory": 0, "nested_namespaces": 0,
                             "inotify_instances": 2, "inotify_watches": 16}
    r = sb.run(["/bin/sh", "-c", "grep -E 'Max (locked memory|open files|stack size)' /proc/self/limits"],
               stdout=cs.Capture(4096), limits=lim)
    assert r.status == cs.Status.EXITED and r.exit_code == 0 and r.stdout is not None, r.raw
    text = r.stdout.text
    rows = {" ".join(line.split()[:3]): line.split()[3:5] for line in text.splitlines()}
    assert rows["Max locked memory"] == ["0", "0"], text
    assert rows["Max open files"] == ["64", "64"], text
    assert rows["Max stack size"] == [str(4 << 20), str(4 << 20)], text


def test_egress_by_name(sb: cs.Sandbox) -> None:
    """``egress`` through the protocol: an allowed name reaches a server of
    this process through capsule's proxy, another gets the proxy's 403, and
    the result's ``network`` report has both (docs/egress.md)."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        egress = {"allow_hosts": ["ok.test"], "resolve": {"ok.test": ["127.0.0.1"]}, "allow_local": True}
        r = sb.run(sh(f"curl -sS http://ok.test:{port}/x; curl -s -o /dev/null -w ' %{{http_code}}' http://no.test/"),
                   stdout=cs.Capture(4096), egress=egress)
        assert r.ok and r.stdout is not None and r.stdout.text == "hello /x 403", r.raw
        net = r.network
        assert net is not None and [(e["host"], e["verdict"]) for e in net] == [("ok.test", "allowed"),
                                                                               ("no.test", "refused")], r.raw
        assert net[0]["via"] == "http" and net[0]["bytes_received"] > 0 and net[1]["rule"] == "no allow-host"
    finally:
        srv.shutdown()


def test_egress_asks_go_to_on_ask(sb: cs.Sandbox) -> None:
    """``egress.ask``: a host no pattern names is asked about through
    ``on_ask`` (docs/protocol.md, "Asks"); an allow-run answer stands for
    the rest of the run, a deny is the proxy's 403."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    asked = []

    def on_ask(a: Dict[str, Any]) -> str:
        asked.append((a["host"], a["port"], a["via"]))
        return "allow-run" if a["host"] == "yes.test" else "deny"

    sb.on_ask = on_ask
    try:
        port = srv.server_address[1]
        egress = {"ask": True, "allow_local": True, "resolve": {"yes.test": ["127.0.0.1"], "no.test": ["127.0.0.1"]}}
        fetch = "curl -s -o /dev/null -w '%{http_code} '"
        r = sb.run(sh(f"for h in yes yes no; do {fetch} http://$h.test:{port}/; done"),
                   stdout=cs.Capture(4096), egress=egress)
        assert r.ok and r.stdout is not None and r.stdout.text == "200 200 403 ", r.raw
        assert asked == [("yes.test", port, "http"), ("no.test", port, "http")], asked
        rules = [(e["host"], e["rule"]) for e in r.network or []]
        assert rules == [("yes.test", "asked: allow-run"), ("no.test", "asked: deny")], r.raw
    finally:
        sb.on_ask = None
        srv.shutdown()
