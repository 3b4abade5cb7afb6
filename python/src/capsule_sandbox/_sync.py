"""The threaded client: :class:`Sandbox` and its :class:`Handle`."""

from __future__ import annotations

import math
import os
import select
import socket
import subprocess
import threading
import time
from types import TracebackType
from typing import Callable, IO, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union, cast

from . import _proto
from ._binary import find_capsule
from ._errors import RunError, SupervisorDied
from ._spec import SpecLike, Stream, spec
from ._types import InteractResult, Limits, Result

_Outcome = Union[Dict[str, Any], BaseException]


class _Waiter:
    """One request's response, once it is in (or the exception to raise);
    ``lock``, made when a thread first waits on it as a follower, is
    released to wake that thread (its response came, or it is to read)."""

    __slots__ = ("outcome", "lock")

    def __init__(self) -> None:
        self.outcome: Optional[_Outcome] = None
        self.lock: Optional[threading.Lock] = None


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
        """Whether the response has arrived (or the server is gone); reads
        what the server has sent so far, without waiting."""
        if self._waiter.outcome is None:
            self._sb._poll()
        return self._waiter.outcome is not None

    def wait(self, timeout: Optional[float] = None) -> Any:
        """The run's :class:`Result` (an :class:`InteractResult` for a pair).

        Raises :class:`RunError` if the run could not happen, :class:`Cancelled`
        if it was cancelled, :class:`SupervisorDied` if the server is gone, and
        ``TimeoutError`` if ``timeout`` seconds pass first (the run goes on).
        """
        if self._value is not None:
            return self._value
        o = self._sb._wait_for(self._waiter, timeout)
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
        if self._waiter.outcome is not None:
            return False
        return self._sb._control(what, self.id)

    def __repr__(self) -> str:
        return f"<capsule_sandbox.Handle id={self.id} {'done' if self.done() else 'pending'}>"


class Sandbox:
    """A long-lived ``capsule serve``: many runs, each in a fresh sandbox.

    ``Sandbox(parallel=N)`` starts ``capsule serve --parallel N`` with JSON
    lines on pipes (``per_cpu=True``: ``--per-cpu``, a supervisor pinned to
    each CPU with its runs, for judges); :meth:`connect` talks to a
    ``capsule serve --listen`` socket instead. Thread-safe: any number of threads may submit and wait.

    There is no reader thread: a thread waiting for a result reads the
    server's responses itself and hands the others' to them (one reader at
    a time; the others wait on a condition), so a result reaches a lone
    caller with no thread switch. The server buffers its responses, so
    runs submitted and not yet waited for never stall it.
    """

    def __init__(self, parallel: int = 1, *, capsule: Optional[str] = None, prepare: bool = True,
                 network: Optional[str] = None, cgroup: Optional[str] = None, require_cgroups: bool = False,
                 no_cgroups: bool = False, server_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None, per_cpu: bool = False,
                 on_ask: Optional[Callable[[Dict[str, Any]], str]] = None) -> None:
        args = _proto.server_args(parallel, prepare, network, cgroup, require_cgroups, no_cgroups, server_args,
                                  per_cpu)
        self.capsule: Optional[str] = find_capsule(capsule)
        """The binary the server runs from (None for a connected socket)."""
        self._init_state()
        self.on_ask: Optional[Callable[[Dict[str, Any]], str]] = on_ask
        """Answers the asks of runs with ``egress={..., "ask": True}``: called
        with the ask (``run_id``, ``ask_id``, ``host``, ``port``, ``via``) on the
        thread reading responses, returns ``"allow-once"``, ``"allow-run"`` or
        ``"deny"`` (anything else, an exception, or no ``on_ask``: deny).
        docs/protocol.md, "Asks"."""
        self._proc: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
            [self.capsule or "capsule", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, bufsize=0, env=None if env is None else dict(env))
        self._sock: Optional[socket.socket] = None
        self._what = f"capsule serve (pid {self._proc.pid})"
        self._wfile: IO[bytes] = cast(IO[bytes], self._proc.stdin)
        self._rfile: IO[bytes] = cast(IO[bytes], self._proc.stdout)
        self._wfd = self._wfile.fileno()
        self._rfd = self._rfile.fileno()
        self._pollobj.register(self._rfd, select.POLLIN)
        # The server's stderr, kept for SupervisorDied's message (a thread
        # that only ever blocks in read, so the server never blocks on it).
        self._stderr_thread: Optional[threading.Thread] = threading.Thread(
            target=self._drain_stderr, args=(self._proc.stderr,), name="capsule-serve-stderr", daemon=True)
        self._stderr_thread.start()

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
        self._wfile = self._rfile = cast(IO[bytes], None)
        self._wfd = self._rfd = sock.fileno()
        self._pollobj.register(self._rfd, select.POLLIN)
        return self

    def _init_state(self) -> None:
        self._plock = threading.Lock()  # the pending table and _dead; never held across I/O
        self._wlock = threading.Lock()  # one writer at a time
        self._rlock = threading.Lock()  # the reader's role
        self._followers: Dict[int, _Waiter] = {}  # threads waiting while another reads, by id(waiter); _plock
        self._pollobj = select.poll()
        self._buf = b""
        self._eof = False
        self._pending: Dict[int, _Waiter] = {}
        self._next_id = 1
        self._dead: Optional[SupervisorDied] = None
        self._closing = False
        self._notices: List[str] = []
        self.on_ask = None
        self._stderr_tail = b""

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
        plain = (type(argv) is list and stdin is None and stdout is None and stderr is None and limits is None
                 and seccomp is None and not fields)
        if plain:
            s: Optional[Dict[str, Any]] = None
        else:
            s = spec(argv, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits, seccomp=seccomp, **fields)
        if timeout is None and self._rlock.acquire(False):
            # Nobody else reads: submit and read for ourselves, without a
            # handle's layers (the common case of a lone caller, docs/python.md).
            try:
                w = _Waiter()
                with self._plock:
                    if self._dead is not None:
                        raise self._dead
                    rid = self._next_id
                    self._next_id = rid + 1
                    self._pending[rid] = w
                self._send_held(rid, s, cast(List[Any], argv))
                rfd = self._rfd
                while w.outcome is None:
                    if self._eof:
                        w.outcome = self._dead or SupervisorDied(f"{self._what} ended")
                        break
                    try:
                        data = os.read(rfd, 1 << 16)
                    except OSError as e:
                        self._read_failed(e)
                        continue
                    self._take(data, w)
            finally:
                self._rlock.release()
                if self._followers:
                    self._pass_role()
            o = w.outcome
            if type(o) is dict:
                r = o.get("result")
                if r is not None:
                    return Result(r)
            elif isinstance(o, BaseException):
                raise o
            return cast(Result, _proto.outcome(o, False))
        if s is None:
            s = {"argv": cast(List[Any], argv)[:]}
        h = self._submit("spec", s, False)
        return cast(Result, self._wait(h, timeout))

    def _send_held(self, rid: int, s: Optional[Dict[str, Any]], argv: List[Any]) -> None:
        # _submit's writing, for a caller that holds the reader's role; a
        # spec of ``argv`` alone when ``s`` is None.
        try:
            line = _proto.encode_run(rid, argv) if s is None else _proto.encode({"id": rid, "spec": s})
        except RunError:
            with self._plock:
                self._pending.pop(rid, None)
            raise
        try:
            with self._wlock:
                n = os.write(self._wfd, line)
                if n < len(line):
                    view = memoryview(line)[n:]
                    while view:
                        view = view[os.write(self._wfd, view):]
        except (OSError, ValueError) as e:
            with self._plock:
                self._pending.pop(rid, None)
            self._drain_held(f"writing to {self._what}: {e}", 5.0)
            raise self._dead or SupervisorDied(f"{self._what} is gone") from None

    def submit_interact(self, solution: SpecLike, interactor: SpecLike) -> Handle:
        """Start an interactive pair (docs/interactive.md) without waiting."""
        pair = {"solution": spec(solution), "interactor": spec(interactor)}
        return self._submit("interact", pair, True)

    def interact(self, solution: SpecLike, interactor: SpecLike, timeout: Optional[float] = None) -> InteractResult:
        """Run a solution and an interactor talking to each other; who left first and both results."""
        return cast(InteractResult, self._wait(self.submit_interact(solution, interactor), timeout))

    def session(self, request: Any, timeout: Optional[float] = None) -> Dict[str, Any]:
        """A session request of the protocol (docs/sessions.md): ``"list"``,
        ``{"start": {...}}``, ``{"exec": {...}}``, ``{"stop": {...}}``; its
        answer, or a :class:`RunError`. Sessions live in this server and stop
        when it ends."""
        rid, w = self._register()
        try:
            line = _proto.encode({"id": rid, "session": request})
        except RunError:
            with self._plock:
                self._pending.pop(rid, None)
            raise
        self._send(rid, line)
        o = self._wait_for(w, timeout)
        if isinstance(o, BaseException):
            raise o
        return _proto.session_answer(o)

    def session_start(self, name: str, base: Optional[SpecLike] = None, *, idle: Optional[float] = None,
                      lifetime: Optional[float] = None, grace: Optional[float] = None) -> None:
        """Start session ``name``: one sandbox kept across :meth:`session_exec`
        calls, its policy and limits those of ``base`` (a run spec; its argv is
        not used). ``idle``, ``lifetime``, ``grace``: seconds."""
        self.session(_proto.session_start(name, spec(base if base is not None else ["-"]), idle, lifetime, grace))

    def session_exec(self, name: str, argv: List[str], *, env: Optional[Dict[str, str]] = None,
                     cwd: Optional[str] = None, detach: bool = False, wall_time: Optional[float] = None,
                     cpu_time: Optional[float] = None, memory: Union[int, str, None] = None) -> Union[Result, int]:
        """Run ``argv`` in session ``name`` (its streams /dev/null): its
        :class:`Result`, or with ``detach`` its pid inside, at once.
        ``wall_time``, ``cpu_time``: this command's own limits, seconds;
        ``memory`` (``"64M"`` or bytes): its own memory, in a cgroup of its
        own (needs cgroups)."""
        a = self.session(_proto.session_exec(name, argv, env, cwd, detach, wall_time, cpu_time, memory))
        return _proto.session_exec_outcome(a, detach)

    def session_list(self) -> List[Dict[str, Any]]:
        """This server's sessions: name, uptime_ms, idle_ms, processes, memory_bytes, ..."""
        return list(self.session("list")["list"]["sessions"])

    def session_stop(self, name: str, grace: Optional[float] = None) -> str:
        """Stop session ``name`` (SIGTERM, ``grace`` seconds, SIGKILL); how it ended."""
        return str(self.session(_proto.session_stop(name, grace))["stopped"]["status"])

    def _wait(self, h: Handle, timeout: Optional[float]) -> Any:
        try:
            return h.wait(timeout)
        except TimeoutError:
            try:
                h.cancel()
            except SupervisorDied:
                pass
            raise

    def _register(self) -> Tuple[int, _Waiter]:
        w = _Waiter()
        with self._plock:
            if self._dead is not None:
                raise self._dead
            rid = self._next_id
            self._next_id = rid + 1
            self._pending[rid] = w
        return rid, w

    def _submit(self, key: str, body: Any, interact: bool) -> Handle:
        rid, w = self._register()
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
                view = memoryview(line)
                while view:
                    view = view[os.write(self._wfd, view):]
        except (OSError, ValueError) as e:
            with self._plock:
                self._pending.pop(rid, None)
            # What the server said before it went, and why it went.
            self._drain_to_eof(f"writing to {self._what}: {e}")
            raise self._dead or SupervisorDied(f"{self._what} is gone") from None

    def _control(self, what: str, target: int) -> bool:
        rid, w = self._register()
        self._send(rid, _proto.encode({"id": rid, what: target}))
        o = self._wait_for(w, None)
        if isinstance(o, BaseException):
            raise o
        # An error: no such run in flight, as it ended meanwhile.
        return o.get("ok") is True

    # --- reading responses: whoever waits reads ------------------------------

    def _wait_for(self, w: _Waiter, timeout: Optional[float]) -> _Outcome:
        """``w``'s outcome, reading responses (or waiting for the thread that
        reads them) until it is in; ``TimeoutError`` after ``timeout`` s."""
        try:
            return self._wait_loop(w, timeout)
        finally:
            if self._followers:
                self._pass_role()

    def _wait_loop(self, w: _Waiter, timeout: Optional[float]) -> _Outcome:
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while w.outcome is None:
            if self._rlock.acquire(False):
                try:
                    while w.outcome is None:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            raise TimeoutError(f"no response within {timeout} s")
                        if self._eof:
                            w.outcome = self._dead or SupervisorDied(f"{self._what} ended")
                            break
                        self._read(left, w)
                finally:
                    self._rlock.release()
                break
            # Another thread reads: wait until it hands over the response, or the role.
            with self._plock:
                if w.outcome is not None:
                    break
                if w.lock is None:
                    w.lock = threading.Lock()
                w.lock.acquire(False)
                self._followers[id(w)] = w
            if self._rlock.acquire(False):
                # The reader left meanwhile.
                self._rlock.release()
                with self._plock:
                    self._followers.pop(id(w), None)
                continue
            left = None if deadline is None else deadline - time.monotonic()
            got = w.lock.acquire(True, -1 if left is None else max(left, 0.0))
            with self._plock:
                self._followers.pop(id(w), None)
            if not got and w.outcome is None:
                raise TimeoutError(f"no response within {timeout} s")
        assert w.outcome is not None
        return w.outcome

    def _pass_role(self) -> None:
        """If nobody reads, a waiting thread is woken to."""
        if self._rlock.acquire(False):
            self._rlock.release()
            self._wake_one()

    def _wake_one(self) -> None:
        with self._plock:
            if not self._followers:
                return
            _, w = self._followers.popitem()
        assert w.lock is not None
        w.lock.release()

    def _wake(self, w: _Waiter) -> None:
        # ``w``'s outcome is in: wake its thread if it waits as a follower.
        with self._plock:
            if self._followers.pop(id(w), None) is None:
                return
        assert w.lock is not None
        w.lock.release()

    def _poll(self) -> None:
        """Reads what has arrived, without waiting (unless another thread reads)."""
        if not self._rlock.acquire(False):
            return
        try:
            while self._read(0.0, None):
                pass
        finally:
            self._rlock.release()
            if self._followers:
                self._pass_role()

    def _read(self, timeout: Optional[float], mine: Optional[_Waiter]) -> bool:
        """One read from the server (after waiting up to ``timeout`` s for
        data) and the responses it completes dispatched; False if none came."""
        if self._eof:
            return False
        if timeout is not None:
            if not self._pollobj.poll(max(0, math.ceil(timeout * 1000))):
                return False
        try:
            data = os.read(self._rfd, 1 << 16)
        except OSError as e:
            self._read_failed(e)
            return True
        self._take(data, mine)
        return True

    def _read_failed(self, e: OSError) -> None:
        self._eof = True
        self._died(f"reading from {self._what}: {e}")

    def _take(self, data: bytes, mine: Optional[_Waiter]) -> None:
        """What one read returned: the responses it completes dispatched."""
        if not data:
            self._eof = True
            if self._buf:
                self._notices.append(f"an unterminated last line {self._buf[:200]!r}")
            self._died(f"{self._what} ended")
            return
        if self._buf:
            data = self._buf + data
        if data[-1] == 10:
            # Whole lines, the usual case: no copy kept.
            end = len(data) - 1
            self._buf = b""
        else:
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) > _proto.READ_LIMIT:
                    self._eof = True
                    self._died(f"{self._what} sent a line longer than {_proto.READ_LIMIT} bytes")
                self._buf = data
                return
            self._buf = data[end + 1:]
        pending = self._pending
        plock = self._plock
        if end == len(data) - 1:
            text = data.decode(errors="replace")
            n = len(text) - 1  # the decoded text's last character is that newline
        else:
            text = data[:end].decode(errors="replace")
            n = -1
        for msg in _proto.decode_lines(text, self._notices, n):
            rid = msg.get("id") if type(msg) is dict else None
            if type(msg) is dict and ("ask" in msg or "answer_refused" in msg):
                # Not the run's end: an ask is answered, a refused answer dropped.
                if "ask" in msg:
                    line = _proto.encode(_proto.answer(rid, msg["ask"], self.on_ask))
                    try:
                        with self._wlock:
                            view = memoryview(line)
                            while view:
                                view = view[os.write(self._wfd, view):]
                    except (OSError, ValueError):
                        pass
                continue
            with plock:
                w = pending.pop(rid, None) if type(rid) is int else None
            if w is None:
                # id null: a line the server could not attribute (a refused peer).
                if rid is None and type(msg) is dict:
                    self._notices.append(str(msg.get("error")))
                continue
            w.outcome = msg
            if w is not mine and self._followers:
                self._wake(w)

    def _drain_to_eof(self, why: str, timeout: Optional[float] = 5.0) -> None:
        self._rlock.acquire()
        try:
            self._drain_held(why, timeout)
        finally:
            self._rlock.release()
            if self._followers:
                self._pass_role()

    def _drain_held(self, why: str, timeout: Optional[float]) -> None:
        # The server is going: what it still sends reaches its handles, then
        # the rest of them get SupervisorDied. The caller holds the role.
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._eof:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._read(left, None)
        if self._eof:
            self._died(why)

    def _drain_stderr(self, f: IO[bytes]) -> None:
        while True:
            try:
                chunk = f.read(1 << 16)
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
            w.outcome = self._dead
            self._wake(w)

    # --- lifetime ---------------------------------------------------------

    @property
    def pid(self) -> Optional[int]:
        """The server's pid (None for a connected socket)."""
        return self._proc.pid if self._proc is not None else None

    def close(self, timeout: Optional[float] = None) -> None:
        """Finish: the server completes the runs already submitted (their
        results still reach their handles), then exits. ``timeout`` bounds
        the wait, after which the server is killed."""
        if self._closing:
            return
        self._closing = True
        if self._sock is not None:
            # A socket client's runs are killed when it hangs up: wait for them first.
            with self._plock:
                waiting = list(self._pending.values())
            try:
                for w in waiting:
                    self._wait_for(w, timeout)
            except TimeoutError:
                pass
            self._shutdown_socket()
            return
        assert self._proc is not None
        with self._wlock:
            try:
                self._wfile.close()
            except OSError:
                pass
        # The end of its input: the server finishes its runs, writes their
        # results (read here, so a full pipe never holds it) and exits.
        self._drain_to_eof("this Sandbox is closed", timeout)
        if not self._eof:
            self._proc.kill()
            self._drain_to_eof("this Sandbox is closed")
        self._proc.wait()
        self._rfile.close()

    def _shutdown_socket(self) -> None:
        assert self._sock is not None
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._drain_to_eof("this Sandbox is closed")
        self._sock.close()

    def terminate(self) -> None:
        """Stop now: the server kills its runs; pending handles raise :class:`SupervisorDied`."""
        if self._proc is not None:
            self._closing = False
            self._proc.terminate()
            self.close()
        elif self._sock is not None and not self._closing:
            self._closing = True
            self._shutdown_socket()

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
