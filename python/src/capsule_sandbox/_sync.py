"""The threaded client: :class:`Sandbox` and its :class:`Handle`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from types import TracebackType
from typing import IO, Any, Dict, List, Mapping, Optional, Sequence, Type, Union, cast

from . import _proto
from ._binary import find_capsule
from ._errors import RunError, SupervisorDied
from ._spec import SpecLike, Stream, spec
from ._types import InteractResult, Limits, Result

_Outcome = Union[Dict[str, Any], BaseException]


class _Waiter:
    """One request's response, handed from the reader thread to its waiters."""

    __slots__ = ("_lock", "_outcome")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._outcome: Optional[_Outcome] = None

    def set(self, outcome: _Outcome) -> None:
        self._outcome = outcome
        self._lock.release()

    def done(self) -> bool:
        return self._outcome is not None

    def get(self, timeout: Optional[float]) -> _Outcome:
        if self._outcome is None:
            if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                raise TimeoutError(f"no response within {timeout} s")
            self._lock.release()
        assert self._outcome is not None
        return self._outcome


class Handle:
    """A submitted run (or interactive pair): wait for it, kill or cancel it."""

    __slots__ = ("id", "_sb", "_interact", "_waiter", "_value")

    def __init__(self, sb: Sandbox, rid: int, interact: bool, waiter: _Waiter) -> None:
        self.id = rid
        """The request id on the connection."""
        self._sb = sb
        self._interact = interact
        self._waiter = waiter
        self._value: Optional[Union[Result, InteractResult]] = None

    def done(self) -> bool:
        """Whether the response has arrived (or the server is gone)."""
        return self._waiter.done()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """The run's :class:`Result` (an :class:`InteractResult` for a pair).

        Raises :class:`RunError` if the run could not happen, :class:`Cancelled`
        if it was cancelled, :class:`SupervisorDied` if the server is gone, and
        ``TimeoutError`` if ``timeout`` seconds pass first (the run goes on).
        """
        if self._value is not None:
            return self._value
        o = self._waiter.get(timeout)
        if isinstance(o, BaseException):
            raise o
        v = _proto.outcome(o, self._interact)
        self._value = v
        return v

    def kill(self) -> bool:
        """Kill the run's processes now; its result (status ``killed``) still
        comes to :meth:`wait`. False if it had already ended."""
        return self._control("kill")

    def cancel(self) -> bool:
        """Discard the run: killed if running, dropped if queued; :meth:`wait`
        then raises :class:`Cancelled`. False if it had already ended."""
        return self._control("cancel")

    def _control(self, what: str) -> bool:
        if self._sb._dead is not None:
            raise self._sb._dead
        if self._waiter.done():
            return False
        ok = self._sb._control(what, self.id)
        return ok

    def __repr__(self) -> str:
        return f"<capsule_sandbox.Handle id={self.id} {'done' if self.done() else 'pending'}>"


class Sandbox:
    """A long-lived ``capsule serve``: many runs, each in a fresh sandbox.

    ``Sandbox(parallel=N)`` starts ``capsule serve --parallel N`` with JSON
    lines on pipes; :meth:`connect` talks to a ``capsule serve --listen``
    socket instead. Thread-safe: any number of threads may submit and wait.
    """

    def __init__(self, parallel: int = 1, *, capsule: Optional[str] = None, prepare: bool = True,
                 network: Optional[str] = None, cgroup: Optional[str] = None, require_cgroups: bool = False,
                 no_cgroups: bool = False, server_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None) -> None:
        args = _proto.server_args(parallel, prepare, network, cgroup, require_cgroups, no_cgroups, server_args)
        self.capsule: Optional[str] = find_capsule(capsule)
        """The binary the server runs from (None for a connected socket)."""
        self._init_state()
        self._proc: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
            [self.capsule or "capsule", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=None if env is None else dict(env))
        self._sock: Optional[socket.socket] = None
        self._what = f"capsule serve (pid {self._proc.pid})"
        self._wfile: IO[bytes] = cast(IO[bytes], self._proc.stdin)
        self._rfile: IO[bytes] = cast(IO[bytes], self._proc.stdout)
        self._stderr_thread: Optional[threading.Thread] = threading.Thread(
            target=self._drain_stderr, args=(self._proc.stderr,), name="capsule-serve-stderr", daemon=True)
        self._stderr_thread.start()
        self._start_reader()

    @classmethod
    def connect(cls, path: str) -> Sandbox:
        """A Sandbox on a ``capsule serve --listen PATH`` socket (its runs share
        that server's slots; closing this one kills runs it left behind)."""
        self = cls.__new__(cls)
        self._init_state()
        self.capsule = None
        self._proc = None
        self._stderr_thread = None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(path))
        except OSError as e:
            sock.close()
            raise SupervisorDied(f"cannot connect to capsule serve at {os.fspath(path)!r}: {e}") from e
        self._sock = sock
        self._what = f"the connection to capsule serve at {os.fspath(path)!r}"
        self._wfile = sock.makefile("wb")
        self._rfile = sock.makefile("rb")
        self._start_reader()
        return self

    def _init_state(self) -> None:
        self._plock = threading.Lock()
        self._wlock = threading.Lock()
        self._pending: Dict[int, _Waiter] = {}
        self._next_id = 1
        self._dead: Optional[SupervisorDied] = None
        self._closing = False
        self._notices: List[str] = []
        self._stderr_tail = b""

    def _start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read_loop, name="capsule-serve-reader", daemon=True)
        self._reader.start()

    # --- requests ---------------------------------------------------------

    def submit(self, argv: SpecLike, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
               limits: Union[Limits, Mapping[str, Any], None] = None, seccomp: Optional[str] = None,
               **fields: Any) -> Handle:
        """Start a run without waiting: ``argv`` (a list) or any spec dict with
        the protocol's field names, plus the options of :func:`spec`."""
        s = spec(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp, **fields)
        return self._submit("spec", s, False)

    def run(self, argv: SpecLike, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
            limits: Union[Limits, Mapping[str, Any], None] = None, seccomp: Optional[str] = None,
            timeout: Optional[float] = None, **fields: Any) -> Result:
        """Run and wait for the :class:`Result` (see :meth:`submit`, :meth:`Handle.wait`).

        ``timeout`` bounds the wait; when it passes the run is cancelled and
        ``TimeoutError`` raised (``limits.wall_time`` is the run's own limit).
        """
        h = self.submit(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp,
                        **fields)
        return cast(Result, self._wait(h, timeout))

    def submit_interact(self, solution: SpecLike, interactor: SpecLike) -> Handle:
        """Start an interactive pair (docs/interactive.md) without waiting."""
        pair = {"solution": spec(solution), "interactor": spec(interactor)}
        return self._submit("interact", pair, True)

    def interact(self, solution: SpecLike, interactor: SpecLike, timeout: Optional[float] = None) -> InteractResult:
        """Run a solution and an interactor talking to each other; who left first and both results."""
        return cast(InteractResult, self._wait(self.submit_interact(solution, interactor), timeout))

    def _wait(self, h: Handle, timeout: Optional[float]) -> Any:
        try:
            return h.wait(timeout)
        except TimeoutError:
            try:
                h.cancel()
            except SupervisorDied:
                pass
            raise

    def _submit(self, key: str, body: Any, interact: bool) -> Handle:
        w = _Waiter()
        with self._plock:
            if self._dead is not None:
                raise self._dead
            rid = self._next_id
            self._next_id = rid + 1
            self._pending[rid] = w
        try:
            line = _proto.encode({"id": rid, key: body})
        except RunError:
            with self._plock:
                self._pending.pop(rid, None)
            raise
        self._send(rid, line)
        return Handle(self, rid, interact, w)

    def _send(self, rid: int, line: bytes) -> None:
        try:
            with self._wlock:
                self._wfile.write(line)
                self._wfile.flush()
        except (OSError, ValueError) as e:
            with self._plock:
                self._pending.pop(rid, None)
            self._died(f"writing to {self._what}: {e}")
            self._reader.join(5.0)
            raise self._dead or SupervisorDied(f"{self._what} is gone") from None

    def _control(self, what: str, target: int) -> bool:
        w = _Waiter()
        with self._plock:
            if self._dead is not None:
                raise self._dead
            rid = self._next_id
            self._next_id = rid + 1
            self._pending[rid] = w
        self._send(rid, _proto.encode({"id": rid, what: target}))
        o = w.get(None)
        if isinstance(o, BaseException):
            raise o
        # An error: no such run in flight, as it ended meanwhile.
        return o.get("ok") is True

    # --- the reader thread -----------------------------------------------

    def _read_loop(self) -> None:
        readline = self._rfile.readline
        loads = json.loads
        pending = self._pending
        plock = self._plock
        why = f"{self._what} ended"
        try:
            while True:
                line = readline(_proto.READ_LIMIT)
                if not line:
                    break
                try:
                    msg = loads(line)
                    rid = msg["id"]
                except (ValueError, TypeError, KeyError):
                    self._notices.append(f"unreadable response {line[:200]!r}")
                    continue
                with plock:
                    w = pending.pop(rid, None) if type(rid) is int else None
                if w is None:
                    # id null: a line the server could not attribute (a refused peer).
                    if rid is None and isinstance(msg, dict):
                        self._notices.append(str(msg.get("error")))
                    continue
                w.set(msg)
        except (OSError, ValueError) as e:
            why = f"reading from {self._what}: {e}"
        self._died(why)

    def _drain_stderr(self, f: IO[bytes]) -> None:
        while True:
            try:
                chunk = f.read1(1 << 16) if hasattr(f, "read1") else f.read(1 << 16)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self._stderr_tail = (self._stderr_tail + chunk)[-_proto.STDERR_TAIL:]

    def _died(self, why: str) -> None:
        status: Optional[int] = None
        if self._proc is not None:
            try:
                status = self._proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
            if self._stderr_thread is not None:
                self._stderr_thread.join(2.0)
        if self._closing:
            why = "this Sandbox is closed"
        err = SupervisorDied(_proto.death_message(why, status, self._stderr_tail, self._notices))
        with self._plock:
            if self._dead is None:
                self._dead = err
            pending = list(self._pending.values())
            self._pending.clear()
        for w in pending:
            w.set(self._dead)

    # --- lifetime ---------------------------------------------------------

    @property
    def pid(self) -> Optional[int]:
        """The server's pid (None for a connected socket)."""
        return self._proc.pid if self._proc is not None else None

    def close(self, timeout: Optional[float] = None) -> None:
        """Finish: the server completes the runs already submitted (their
        results still reach their handles), then exits. ``timeout`` bounds
        the wait, after which the server is killed."""
        self._closing = True
        if self._sock is not None:
            # A socket client's runs are killed when it hangs up: wait for them first.
            with self._plock:
                waiting = list(self._pending.values())
            for w in waiting:
                try:
                    w.get(timeout)
                except TimeoutError:
                    break
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._reader.join(timeout)
            self._wfile.close()
            self._rfile.close()
            self._sock.close()
            return
        assert self._proc is not None
        with self._wlock:
            try:
                self._wfile.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join()
        self._rfile.close()

    def terminate(self) -> None:
        """Stop now: the server kills its runs; pending handles raise :class:`SupervisorDied`."""
        self._closing = True
        if self._proc is not None:
            self._proc.terminate()
            self.close()
        elif self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._reader.join()
            self._sock.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if et is not None and not issubclass(et, Exception):
            self.terminate()
        else:
            self.close()

    def __repr__(self) -> str:
        return f"<capsule_sandbox.Sandbox {self._what}{' (dead)' if self._dead else ''}>"
