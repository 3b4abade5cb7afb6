"""The asyncio client: :class:`AsyncSandbox` and its :class:`AsyncHandle`.

Nothing here blocks the event loop: the server's pipes (or socket) are
asyncio streams, and waiting for a result is awaiting a future.
"""

from __future__ import annotations

import asyncio
import json
import os
from types import TracebackType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type, Union, cast

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
        self._sb = sb
        self._interact = interact
        self._fut = fut
        self._value: Optional[Union[Result, InteractResult]] = None

    def done(self) -> bool:
        """Whether the response has arrived (or the server is gone)."""
        return self._fut.done()

    async def wait(self, timeout: Optional[float] = None) -> Any:
        """The :class:`Result` (:class:`InteractResult` for a pair); raises as
        :meth:`Handle.wait` does (``asyncio.TimeoutError`` after ``timeout``)."""
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
    (or ``await sb.start()``); ``await AsyncSandbox.connect(path)`` uses a
    ``capsule serve --listen`` socket. Cancelling a task awaiting
    :meth:`run` cancels the run.
    """

    def __init__(self, parallel: int = 1, *, capsule: Optional[str] = None, prepare: bool = True,
                 network: Optional[str] = None, cgroup: Optional[str] = None, require_cgroups: bool = False,
                 no_cgroups: bool = False, server_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None) -> None:
        self._args = _proto.server_args(parallel, prepare, network, cgroup, require_cgroups, no_cgroups,
                                        server_args)
        self.capsule: Optional[str] = find_capsule(capsule)
        self._env = None if env is None else dict(env)
        self._init_state(None)

    def _init_state(self, path: Optional[str]) -> None:
        self._path = path
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._tasks: List[asyncio.Task[None]] = []
        self._pending: Dict[int, asyncio.Future[Dict[str, Any]]] = {}
        self._next_id = 1
        self._dead: Optional[SupervisorDied] = None
        self._closing = False
        self._notices: List[str] = []
        self._stderr_tail = b""
        self._drain_lock: Optional[asyncio.Lock] = None
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
        self._drain_lock = asyncio.Lock()
        if self._path is not None:
            try:
                self._reader, self._writer = await asyncio.open_unix_connection(self._path,
                                                                                 limit=_proto.READ_LIMIT)
            except OSError as e:
                self._dead = SupervisorDied(f"cannot connect to capsule serve at {self._path!r}: {e}")
                raise self._dead from e
        else:
            assert self.capsule is not None
            self._proc = await asyncio.create_subprocess_exec(
                self.capsule, *self._args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._env, limit=_proto.READ_LIMIT)
            self._what = f"capsule serve (pid {self._proc.pid})"
            self._reader = self._proc.stdout
            self._writer = self._proc.stdin
            assert self._proc.stderr is not None
            self._tasks.append(asyncio.ensure_future(self._drain_stderr(self._proc.stderr)))
        self._tasks.insert(0, asyncio.ensure_future(self._read_loop()))

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
        s = spec(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp, **fields)
        h = await self._submit("spec", s, False)
        return cast(Result, await self._wait(h, timeout))

    async def submit_interact(self, solution: SpecLike, interactor: SpecLike) -> AsyncHandle:
        """Start an interactive pair without waiting."""
        return await self._submit("interact", {"solution": spec(solution), "interactor": spec(interactor)}, True)

    async def interact(self, solution: SpecLike, interactor: SpecLike,
                       timeout: Optional[float] = None) -> InteractResult:
        """Run an interactive pair and await its :class:`InteractResult`."""
        h = await self.submit_interact(solution, interactor)
        return cast(InteractResult, await self._wait(h, timeout))

    async def _wait(self, h: AsyncHandle, timeout: Optional[float]) -> Any:
        try:
            if timeout is None:
                msg = await h._fut
            else:
                msg = await asyncio.wait_for(h._fut, timeout)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            # The caller gave up on it: so does the server.
            if h._fut.cancelled() and self._dead is None:
                self._fire_and_forget({"id": self._new_id(), "cancel": h.id})
            raise
        v = _proto.outcome(msg, h._interact)
        h._value = v
        return v

    def _new_id(self) -> int:
        rid = self._next_id
        self._next_id = rid + 1
        return rid

    async def _submit(self, key: str, body: Any, interact: bool) -> AsyncHandle:
        if not self._started:
            await self.start()
        if self._dead is not None:
            raise self._dead
        rid = self._new_id()
        line = _proto.encode({"id": rid, key: body})
        fut: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self._write(line)
        return AsyncHandle(self, rid, interact, fut)

    def _fire_and_forget(self, msg: Dict[str, Any]) -> None:
        # A control request whose acknowledgement nobody waits for.
        if self._dead is None and self._writer is not None:
            try:
                self._writer.write(_proto.encode(msg))
            except (OSError, RuntimeError):
                pass

    async def _write(self, line: bytes) -> None:
        w = self._writer
        assert w is not None and self._drain_lock is not None
        try:
            w.write(line)
            if w.transport.get_write_buffer_size() > (1 << 16):
                async with self._drain_lock:
                    await w.drain()
        except (OSError, RuntimeError) as e:
            await self._died(f"writing to {self._what}: {e}")
            assert self._dead is not None
            raise self._dead from None

    async def _control(self, what: str, target: int) -> bool:
        if self._dead is not None:
            raise self._dead
        rid = self._new_id()
        fut: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self._write(_proto.encode({"id": rid, what: target}))
        msg = await fut
        return msg.get("ok") is True

    # --- the reader task -------------------------------------------------

    async def _read_loop(self) -> None:
        r = self._reader
        assert r is not None
        loads = json.loads
        pending = self._pending
        why = f"{self._what} ended"
        try:
            while True:
                line = await r.readline()
                if not line:
                    break
                try:
                    msg = loads(line)
                    rid = msg["id"]
                except (ValueError, TypeError, KeyError):
                    self._notices.append(f"unreadable response {line[:200]!r}")
                    continue
                fut = pending.pop(rid, None) if type(rid) is int else None
                if fut is None:
                    # id null: a line the server could not attribute (a refused peer).
                    if rid is None and isinstance(msg, dict):
                        self._notices.append(str(msg.get("error")))
                    continue
                if not fut.done():
                    fut.set_result(msg)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            why = f"reading from {self._what}: {e}"
        await self._died(why)

    async def _drain_stderr(self, r: asyncio.StreamReader) -> None:
        while True:
            try:
                chunk = await r.read(1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self._stderr_tail = (self._stderr_tail + chunk)[-_proto.STDERR_TAIL:]

    async def _died(self, why: str) -> None:
        if self._dead is not None and not self._pending:
            return
        status: Optional[int] = None
        if self._proc is not None:
            try:
                status = await asyncio.wait_for(self._proc.wait(), 5.0)
            except asyncio.TimeoutError:
                pass
            if len(self._tasks) > 1:
                try:
                    await asyncio.wait_for(asyncio.shield(self._tasks[1]), 2.0)
                except asyncio.TimeoutError:
                    pass
        if self._closing:
            why = "this AsyncSandbox is closed"
        if self._dead is None:
            self._dead = SupervisorDied(_proto.death_message(why, status, self._stderr_tail, self._notices))
        pending = list(self._pending.values())
        self._pending.clear()
        for fut in pending:
            if not fut.done():
                fut.set_exception(self._dead)

    # --- lifetime ---------------------------------------------------------

    async def close(self, timeout: Optional[float] = None) -> None:
        """Finish: the runs already submitted complete (their results reach
        their handles), then the server exits (see :meth:`Sandbox.close`)."""
        if not self._started:
            self._closing = True
            return
        self._closing = True
        w = self._writer
        assert w is not None
        if self._path is not None:
            waiting = [f for f in self._pending.values() if not f.done()]
            if waiting:
                await asyncio.wait([asyncio.shield(f) for f in waiting], timeout=timeout)
        try:
            w.close()
        except (OSError, RuntimeError):
            pass
        if self._proc is not None:
            try:
                await asyncio.wait_for(self._proc.wait(), timeout)
            except asyncio.TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def terminate(self) -> None:
        """Stop now: runs killed, pending handles raise :class:`SupervisorDied`."""
        self._closing = True
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
        if self._path is not None and self._writer is not None:
            self._writer.close()
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

