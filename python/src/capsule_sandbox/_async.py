"""The asyncio client: :class:`AsyncSandbox` and its :class:`AsyncHandle`.

Nothing here blocks the event loop: the server's pipes (or socket) are
non-blocking file descriptors watched by the loop (``add_reader``), whose
callback reads the responses and completes each request's future; a
request is written at once, the rest of it when the pipe has room.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from types import TracebackType
from typing import Callable, IO, Any, Dict, List, Mapping, Optional, Sequence, Type, Union, cast

from . import _proto
from ._binary import find_capsule
from ._errors import SupervisorDied
from ._spec import SpecLike, Stream, spec
from ._types import InteractResult, Limits, Result

class AsyncHandle:
    """A submitted run (or pair) of an :class:`AsyncSandbox`."""

    __slots__ = ("id", "_sb", "_interact", "_fut", "_value")

    def __init__(self, sb: AsyncSandbox, rid: int, interact: bool, fut: asyncio.Future[Dict[str, Any]]) -> None:
        self.id = rid
        """The request id on the connection."""
        self._sb = sb
        self._interact = interact
        self._fut = fut
        self._value: Optional[Union[Result, InteractResult]] = None

    def done(self) -> bool:
        """Whether the response has arrived (or the server is gone)."""
        return self._fut.done()

    async def wait(self, timeout: Optional[float] = None) -> Any:
        """The :class:`Result` (:class:`InteractResult` for a pair); raises as
        :meth:`Handle.wait` does (``asyncio.TimeoutError`` after ``timeout``;
        the run goes on)."""
        if self._value is not None:
            return self._value
        if timeout is None:
            msg = await asyncio.shield(self._fut)
        else:
            msg = await asyncio.wait_for(asyncio.shield(self._fut), timeout)
        v = _proto.outcome(msg, self._interact)
        self._value = v
        return v

    async def kill(self) -> bool:
        """Kill the run now; its result (``killed``) still comes. False if it had ended."""
        if self._sb._dead is not None:
            raise self._sb._dead
        if self._fut.done():
            return False
        return await self._sb._control("kill", self.id)

    async def cancel(self) -> bool:
        """Discard the run; :meth:`wait` then raises :class:`Cancelled`. False if it had ended."""
        if self._sb._dead is not None:
            raise self._sb._dead
        if self._fut.done():
            return False
        return await self._sb._control("cancel", self.id)

    def __repr__(self) -> str:
        return f"<capsule_sandbox.AsyncHandle id={self.id} {'done' if self.done() else 'pending'}>"


class AsyncSandbox:
    """:class:`Sandbox` for asyncio: the same calls, awaitable.

    ``async with AsyncSandbox(parallel=4) as sb`` starts ``capsule serve``
    (or ``await sb.start()``; the first call does it too); ``await
    AsyncSandbox.connect(path)`` uses a ``capsule serve --listen`` socket.
    Use it from one event loop. Cancelling a task awaiting :meth:`run`
    cancels the run.
    """

    def __init__(self, parallel: int = 1, *, capsule: Optional[str] = None, prepare: bool = True,
                 network: Optional[str] = None, cgroup: Optional[str] = None, require_cgroups: bool = False,
                 no_cgroups: bool = False, server_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None, per_cpu: bool = False,
                 on_ask: Optional[Callable[[Dict[str, Any]], str]] = None) -> None:
        self._args = _proto.server_args(parallel, prepare, network, cgroup, require_cgroups, no_cgroups,
                                        server_args, per_cpu)
        self.capsule: Optional[str] = find_capsule(capsule)
        """The binary the server runs from (None for a socket)."""
        self._env = None if env is None else dict(env)
        self._init_state(None)
        self.on_ask: Optional[Callable[[Dict[str, Any]], str]] = on_ask
        """Answers the asks of runs with ``egress={..., "ask": True}``: called
        with the ask (``run_id``, ``ask_id``, ``host``, ``port``, ``via``), returns
        ``"allow-once"``, ``"allow-run"`` or ``"deny"`` (anything else, an
        exception, or no ``on_ask``: deny). docs/protocol.md, "Asks"."""

    def _init_state(self, path: Optional[str]) -> None:
        self._path = path
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._sock: Optional[socket.socket] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._rfd = self._wfd = self._efd = -1
        self._buf = b""
        self._out = bytearray()  # what the pipe had no room for yet
        self._pending: Dict[int, asyncio.Future[Dict[str, Any]]] = {}
        self._next_id = 1
        self._dead: Optional[SupervisorDied] = None
        self._eof: Optional[asyncio.Future[None]] = None
        self._closing = False
        self._notices: List[str] = []
        self.on_ask = None
        self._stderr_tail = b""
        self._stderr_done: Optional[asyncio.Future[None]] = None
        self._died_done = False
        self._started = False
        self._what = "capsule serve" if path is None else f"the connection to capsule serve at {path!r}"

    @classmethod
    async def connect(cls, path: str) -> AsyncSandbox:
        """An AsyncSandbox on a ``capsule serve --listen PATH`` socket."""
        self = cls.__new__(cls)
        self._args = []
        self.capsule = None
        self._env = None
        self._init_state(os.fspath(path))
        await self.start()
        return self

    async def start(self) -> None:
        """Start the server (or connect); ``async with`` and the first call do it."""
        if self._started:
            return
        self._started = True
        loop = self._loop = asyncio.get_running_loop()
        self._eof = loop.create_future()
        if self._path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, self._path)
            except OSError as e:
                sock.close()
                self._dead = SupervisorDied(f"cannot connect to capsule serve at {self._path!r}: {e}")
                raise self._dead from e
            self._sock = sock
            self._rfd = self._wfd = sock.fileno()
        else:
            assert self.capsule is not None
            proc = self._proc = subprocess.Popen(
                [self.capsule, *self._args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, bufsize=0, env=self._env)
            self._what = f"capsule serve (pid {proc.pid})"
            self._wfd = cast(IO[bytes], proc.stdin).fileno()
            self._rfd = cast(IO[bytes], proc.stdout).fileno()
            self._efd = cast(IO[bytes], proc.stderr).fileno()
            for fd in (self._wfd, self._rfd, self._efd):
                os.set_blocking(fd, False)
            self._stderr_done = loop.create_future()
            loop.add_reader(self._efd, self._on_stderr)
        loop.add_reader(self._rfd, self._on_readable)

    @property
    def pid(self) -> Optional[int]:
        """The server's pid (None for a socket, or before it started)."""
        return self._proc.pid if self._proc is not None else None

    # --- requests ---------------------------------------------------------

    async def submit(self, argv: SpecLike, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
                     limits: Union[Limits, Mapping[str, Any], None] = None, seccomp: Optional[str] = None,
                     **fields: Any) -> AsyncHandle:
        """Start a run without waiting for it (see :meth:`Sandbox.submit`)."""
        s = spec(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp, **fields)
        return await self._submit("spec", s, False)

    async def run(self, argv: SpecLike, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
                  limits: Union[Limits, Mapping[str, Any], None] = None, seccomp: Optional[str] = None,
                  timeout: Optional[float] = None, **fields: Any) -> Result:
        """Run and await the :class:`Result` (see :meth:`Sandbox.run`)."""
        s: Optional[Dict[str, Any]] = None
        if not (type(argv) is list and stdin is None and stdout is None and stderr is None and limits is None
                and seccomp is None and not fields):
            s = spec(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp, **fields)
        if not self._started:
            await self.start()
        if self._dead is not None:
            raise self._dead
        rid = self._next_id
        self._next_id = rid + 1
        # An argv alone, the common case, is formatted without building a spec.
        line = _proto.encode_run(rid, cast(List[Any], argv)) if s is None else _proto.encode({"id": rid, "spec": s})
        assert self._loop is not None
        fut: asyncio.Future[Dict[str, Any]] = self._loop.create_future()
        self._pending[rid] = fut
        self._write(line)
        if timeout is not None:
            return cast(Result, await self._wait(AsyncHandle(self, rid, False, fut), timeout))
        try:
            msg = await fut
        except asyncio.CancelledError:
            self._abandon(fut, rid)
            raise
        r = msg.get("result")
        if r is not None:
            return Result(r)
        return cast(Result, _proto.outcome(msg, False))

    async def submit_interact(self, solution: SpecLike, interactor: SpecLike) -> AsyncHandle:
        """Start an interactive pair without waiting."""
        return await self._submit("interact", {"solution": spec(solution), "interactor": spec(interactor)}, True)

    async def interact(self, solution: SpecLike, interactor: SpecLike,
                       timeout: Optional[float] = None) -> InteractResult:
        """Run an interactive pair and await its :class:`InteractResult`."""
        h = await self.submit_interact(solution, interactor)
        return cast(InteractResult, await self._wait(h, timeout))

    async def session(self, request: Any, timeout: Optional[float] = None) -> Dict[str, Any]:
        """A session request of the protocol and its answer (see :meth:`Sandbox.session`).
        Cancelling the task awaiting it abandons the answer, not the request."""
        if not self._started:
            await self.start()
        if self._dead is not None:
            raise self._dead
        rid = self._new_id()
        line = _proto.encode({"id": rid, "session": request})
        assert self._loop is not None
        fut: asyncio.Future[Dict[str, Any]] = self._loop.create_future()
        self._pending[rid] = fut
        self._write(line)
        try:
            msg = await (fut if timeout is None else asyncio.wait_for(fut, timeout))
        finally:
            self._pending.pop(rid, None)
        return _proto.session_answer(msg)

    async def session_start(self, name: str, base: Optional[SpecLike] = None, *, idle: Optional[float] = None,
                            lifetime: Optional[float] = None, grace: Optional[float] = None) -> None:
        """Start session ``name`` (see :meth:`Sandbox.session_start`)."""
        await self.session(_proto.session_start(name, spec(base if base is not None else ["-"]), idle, lifetime,
                                                grace))

    async def session_exec(self, name: str, argv: List[str], *, env: Optional[Dict[str, str]] = None,
                           cwd: Optional[str] = None, detach: bool = False, wall_time: Optional[float] = None,
                           cpu_time: Optional[float] = None, memory: Union[int, str, None] = None) -> Union[Result, int]:
        """Run ``argv`` in session ``name`` (see :meth:`Sandbox.session_exec`)."""
        a = await self.session(_proto.session_exec(name, argv, env, cwd, detach, wall_time, cpu_time, memory))
        return _proto.session_exec_outcome(a, detach)

    async def session_list(self) -> List[Dict[str, Any]]:
        """This server's sessions (see :meth:`Sandbox.session_list`)."""
        return list((await self.session("list"))["list"]["sessions"])

    async def session_stop(self, name: str, grace: Optional[float] = None) -> str:
        """Stop session ``name`` (see :meth:`Sandbox.session_stop`); how it ended."""
        return str((await self.session(_proto.session_stop(name, grace)))["stopped"]["status"])

    async def _wait(self, h: AsyncHandle, timeout: Optional[float]) -> Any:
        try:
            if timeout is None:
                msg = await h._fut
            else:
                msg = await asyncio.wait_for(h._fut, timeout)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            self._abandon(h._fut, h.id)
            raise
        v = _proto.outcome(msg, h._interact)
        h._value = v
        return v

    def _abandon(self, fut: asyncio.Future[Dict[str, Any]], rid: int) -> None:
        # The caller gave up on the run: so does the server.
        if fut.cancelled() and self._dead is None:
            self._send({"id": self._new_id(), "cancel": rid})

    def _new_id(self) -> int:
        rid = self._next_id
        self._next_id = rid + 1
        return rid

    async def _submit(self, key: str, body: Any, interact: bool) -> AsyncHandle:
        if not self._started:
            await self.start()
        return self._submit_now(key, body, interact)

    def _submit_now(self, key: str, body: Any, interact: bool) -> AsyncHandle:
        if self._dead is not None:
            raise self._dead
        rid = self._new_id()
        line = _proto.encode({"id": rid, key: body})
        assert self._loop is not None
        fut: asyncio.Future[Dict[str, Any]] = self._loop.create_future()
        self._pending[rid] = fut
        self._write(line)
        return AsyncHandle(self, rid, interact, fut)

    def _send(self, msg: Dict[str, Any]) -> None:
        # A control request whose acknowledgement nobody waits for.
        try:
            self._write(_proto.encode(msg))
        except SupervisorDied:
            pass

    def _write(self, line: bytes) -> None:
        if self._dead is not None:
            raise self._dead
        if self._out:
            self._out += line
            return
        try:
            n = os.write(self._wfd, line)
        except BlockingIOError:
            n = 0
        except OSError as e:
            self._gone(f"writing to {self._what}: {e}")
            assert self._dead is not None
            raise self._dead from None
        if n < len(line):
            self._out += line[n:]
            assert self._loop is not None
            self._loop.add_writer(self._wfd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            n = os.write(self._wfd, self._out)
        except BlockingIOError:
            return
        except OSError as e:
            self._out.clear()
            self._gone(f"writing to {self._what}: {e}")
            return
        del self._out[:n]
        if not self._out:
            assert self._loop is not None
            self._loop.remove_writer(self._wfd)

    async def _control(self, what: str, target: int) -> bool:
        if self._dead is not None:
            raise self._dead
        rid = self._new_id()
        assert self._loop is not None
        fut: asyncio.Future[Dict[str, Any]] = self._loop.create_future()
        self._pending[rid] = fut
        self._write(_proto.encode({"id": rid, what: target}))
        msg = await fut
        return msg.get("ok") is True

    # --- responses ----------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data = os.read(self._rfd, 1 << 16)
        except BlockingIOError:
            return
        except OSError as e:
            self._gone(f"reading from {self._what}: {e}")
            return
        if not data:
            if self._buf:
                self._notices.append(f"an unterminated last line {self._buf[:200]!r}")
            self._gone(f"{self._what} ended")
            return
        buf = self._buf + data if self._buf else data
        if buf[-1] == 10:
            # Whole lines, the usual case: no copy kept.
            end = len(buf) - 1
            self._buf = b""
        else:
            end = buf.rfind(b"\n")
            if end < 0:
                self._buf = buf
                if len(buf) > _proto.READ_LIMIT:
                    self._gone(f"{self._what} sent a line longer than {_proto.READ_LIMIT} bytes")
                return
            self._buf = buf[end + 1:]
        pending = self._pending
        if end == len(buf) - 1:
            text = buf.decode(errors="replace")
            n = len(text) - 1  # the decoded text's last character is that newline
        else:
            text = buf[:end].decode(errors="replace")
            n = -1
        for msg in _proto.decode_lines(text, self._notices, n):
            rid = msg.get("id") if type(msg) is dict else None
            if type(msg) is dict and ("ask" in msg or "answer_refused" in msg):
                # Not the run's end: an ask is answered, a refused answer dropped.
                if "ask" in msg:
                    try:
                        self._write(_proto.encode(_proto.answer(rid, msg["ask"], self.on_ask)))
                    except SupervisorDied:
                        pass
                continue
            fut = pending.pop(rid, None) if type(rid) is int else None
            if fut is None:
                # id null: a line the server could not attribute (a refused peer).
                if rid is None and type(msg) is dict:
                    self._notices.append(str(msg.get("error")))
                continue
            if not fut.done():
                fut.set_result(msg)

    def _on_stderr(self) -> None:
        try:
            chunk = os.read(self._efd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._stderr_tail = (self._stderr_tail + chunk)[-_proto.STDERR_TAIL:]
            return
        assert self._loop is not None and self._stderr_done is not None
        self._loop.remove_reader(self._efd)
        if not self._stderr_done.done():
            self._stderr_done.set_result(None)

    def _gone(self, why: str) -> None:
        """The server's output ended (or broke): no more reading; its
        pending requests fail once its exit status is known."""
        assert self._loop is not None and self._eof is not None
        if self._eof.done():
            return
        self._loop.remove_reader(self._rfd)
        if self._out:
            self._loop.remove_writer(self._wfd)
            self._out.clear()
        self._eof.set_result(None)
        # Calls from now on fail at once; the message waits for the status.
        self._dead = SupervisorDied(f"{self._what} ended")
        self._loop.create_task(self._died(why))

    async def _died(self, why: str) -> None:
        status: Optional[int] = None
        if self._proc is not None:
            for _ in range(500):
                status = self._proc.poll()
                if status is not None:
                    break
                await asyncio.sleep(0.01)
            if self._stderr_done is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._stderr_done), 2.0)
                except asyncio.TimeoutError:
                    pass
        if self._closing:
            why = "this AsyncSandbox is closed"
        self._dead = SupervisorDied(_proto.death_message(why, status, self._stderr_tail, self._notices))
        pending = list(self._pending.values())
        self._pending.clear()
        for fut in pending:
            if not fut.done():
                fut.set_exception(self._dead)
        self._died_done = True

    # --- lifetime ---------------------------------------------------------

    async def close(self, timeout: Optional[float] = None) -> None:
        """Finish: the runs already submitted complete (their results reach
        their handles), then the server exits (see :meth:`Sandbox.close`)."""
        if self._closing:
            return
        self._closing = True
        if not self._started:
            return
        assert self._loop is not None and self._eof is not None
        if self._sock is not None:
            # A socket client's runs are killed when it hangs up: wait for them first.
            waiting = [f for f in self._pending.values() if not f.done()]
            if waiting:
                await asyncio.wait([asyncio.shield(f) for f in waiting], timeout=timeout)
            await self._hang_up()
            return
        assert self._proc is not None
        # The end of its input (once what is queued is written): the server
        # finishes its runs, writes their results and exits.
        while self._out and not self._eof.done():
            await asyncio.sleep(0.001)
        if self._out:
            self._loop.remove_writer(self._wfd)
        cast(IO[bytes], self._proc.stdin).close()
        try:
            await asyncio.wait_for(asyncio.shield(self._eof), timeout)
        except asyncio.TimeoutError:
            self._proc.kill()
            await asyncio.shield(self._eof)
        while self._proc.poll() is None:
            await asyncio.sleep(0.005)
        while any(not f.done() for f in self._pending.values()) or not self._died_done:
            await asyncio.sleep(0.005)
        cast(IO[bytes], self._proc.stdout).close()
        cast(IO[bytes], self._proc.stderr).close()

    async def _hang_up(self) -> None:
        assert self._loop is not None and self._eof is not None and self._sock is not None
        if not self._eof.done():
            self._loop.remove_reader(self._rfd)
            if self._out:
                self._loop.remove_writer(self._wfd)
            self._eof.set_result(None)
            self._dead = SupervisorDied("this AsyncSandbox is closed")
            await self._died("this AsyncSandbox is closed")
        self._sock.close()

    async def terminate(self) -> None:
        """Stop now: runs killed, pending handles raise :class:`SupervisorDied`."""
        if self._sock is not None:
            self._closing = True
            await self._hang_up()
            return
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
        await self.close()

    async def __aenter__(self) -> AsyncSandbox:
        await self.start()
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        if et is not None and not issubclass(et, Exception):
            await self.terminate()
        else:
            await self.close()

    def __repr__(self) -> str:
        return f"<capsule_sandbox.AsyncSandbox {self._what}{' (dead)' if self._dead else ''}>"
