"""The JSON-lines protocol of ``capsule serve`` (docs/protocol.md), shared
by the threaded and the asyncio clients."""

from __future__ import annotations

import importlib
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ._errors import Cancelled, RunError
from ._types import InteractResult, Result

MAX_LINE = 1 << 20
"""The server's longest request line."""
STDERR_TAIL = 16 << 10
"""How much of the server's stderr a SupervisorDied message may quote."""
READ_LIMIT = 1 << 30
"""The longest response line read (16 MiB captures, JSON-escaped, fit)."""



def _default(o: Any) -> Any:
    # Paths go as strings; anything else JSON has no form for is an error.
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    raise TypeError(f"{o!r} ({type(o).__name__}) has no JSON form")


# The json module's C encoder and scanner, called directly: most of a
# request's cost in Python is the module's Python-level wrapping around
# them (docs/python.md, "Cost"). The plain module where they are missing.
_enc: Any = importlib.import_module("json.encoder")
_c_encoder: Optional[Callable[[Any, int], List[str]]] = None
if _enc.c_make_encoder is not None:
    _c_encoder = _enc.c_make_encoder(None, _default, _enc.encode_basestring, None, ":", ",", False, False, False)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default).encode

_scanner: Any = importlib.import_module("json.scanner")
_scan: Optional[Callable[[str, int], Tuple[Any, int]]] = None
if _scanner.c_make_scanner is not None:
    _scan = _scanner.c_make_scanner(json.JSONDecoder())


def decode_lines(text: str, notices: List[str], n: int = -1) -> List[Any]:
    """The JSON values of the complete response lines in ``text[:n]`` (all
    of it by default); an unreadable line is noted in ``notices`` and skipped."""
    scan = _scan
    if n < 0:
        n = len(text)
    if scan is not None and n and text.find("\n", 0, n) < 0:
        # One line, the usual case.
        try:
            v, end = scan(text, 0)
            if end == n or not text[end:n].strip():
                return [v]
        except (StopIteration, ValueError, RecursionError):
            pass
        notices.append(f"unreadable response {text[:min(n, 200)]!r}")
        return []
    out: List[Any] = []
    i = 0
    while i < n:
        nl = text.find("\n", i, n)
        if nl < 0:
            nl = n
        try:
            if scan is not None:
                v, end = scan(text, i)
                if end != nl and text[end:nl].strip():
                    raise ValueError("trailing characters")
            else:
                v = json.loads(text[i:nl])
            out.append(v)
        except (StopIteration, ValueError, RecursionError):
            notices.append(f"unreadable response {text[i:min(nl, i + 200)]!r}")
        i = nl + 1
    return out


_ebs: Callable[[str], str] = _enc.encode_basestring


def encode_run(rid: int, argv: List[Any]) -> bytes:
    """``encode({"id": rid, "spec": {"argv": argv}})``: a run spec of an argv
    alone, the common case, formatted without the encoder's walk of dicts."""
    try:
        # A non-str item is a TypeError, a lone surrogate a UnicodeEncodeError.
        line = ('{"id":%d,"spec":{"argv":[%s]}}\n' % (rid, ",".join(map(_ebs, argv)))).encode()
    except (TypeError, ValueError):
        return encode({"id": rid, "spec": {"argv": argv[:]}})
    if len(line) > MAX_LINE:
        return encode({"id": rid, "spec": {"argv": argv[:]}})
    return line


def encode(msg: Dict[str, Any]) -> bytes:
    """One request line; a :class:`RunError` if the server could not read it."""
    try:
        if _c_encoder is not None:
            line = ("".join(_c_encoder(msg, 0)) + "\n").encode()
        else:
            line = (_dumps(msg) + "\n").encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise RunError(f"invalid spec: not JSON: {e}", msg.get("id")) from None
    if len(line) > MAX_LINE:
        raise RunError(f"invalid spec: the request is {len(line)} bytes, longer than the server's "
                       f"{MAX_LINE}-byte request lines", msg.get("id"))
    return line


def server_args(parallel: int, prepare: bool, network: Optional[str], cgroup: Optional[str],
                require_cgroups: bool, no_cgroups: bool, extra: Sequence[str], per_cpu: bool = False) -> List[str]:
    """``capsule serve``'s arguments for a Sandbox's options."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be a positive number of runs, not {parallel!r}")
    if per_cpu and network == "shared":
        raise ValueError("per_cpu with network='shared': each per-CPU supervisor has networks of its own")
    args = ["serve", "--parallel", str(parallel)]
    if per_cpu:
        args.append("--per-cpu")
    if not prepare:
        args.append("--no-prepare")
    if network is not None:
        if network not in ("shared", "fresh"):
            raise ValueError(f"network must be None, 'shared' or 'fresh', not {network!r}")
        args.append(f"--{network}-network")
    if cgroup is not None:
        args += ["--cgroup", cgroup]
    if require_cgroups:
        args.append("--require-cgroups")
    if no_cgroups:
        args.append("--no-cgroups")
    args += list(extra)
    return args


def outcome(msg: Dict[str, Any], interact: bool) -> Union[Result, InteractResult]:
    """A response to a run or interact request: its result, or the error raised."""
    r = msg.get("result")
    if r is not None:
        return InteractResult(r) if interact else Result(r)
    err = msg.get("error")
    if err == "cancelled":
        raise Cancelled("cancelled", msg.get("id"))
    if isinstance(err, str):
        raise RunError(err, msg.get("id"))
    raise RunError(f"unexpected response from capsule serve: {msg!r}", msg.get("id"))


def session_answer(msg: Dict[str, Any]) -> Dict[str, Any]:
    """A session request's answer (``{"started": ...}``, ``{"exec": ...}``, ...),
    or the :class:`RunError` it carries."""
    s = msg.get("session")
    if isinstance(s, dict):
        err = s.get("error")
        if isinstance(err, dict):
            raise RunError(str(err.get("error")), msg.get("id"))
        return s
    err = msg.get("error")
    if isinstance(err, str):
        raise RunError(err, msg.get("id"))
    raise RunError(f"unexpected response from capsule serve: {msg!r}", msg.get("id"))


def session_start(name: str, body: Dict[str, Any], idle: Optional[float], lifetime: Optional[float],
                  grace: Optional[float]) -> Dict[str, Any]:
    """A ``start`` session request for ``name``, its policy the run spec ``body``."""
    return {"start": {"name": name, "spec": body, "idle_ms": millis(idle, "idle"),
                      "lifetime_ms": millis(lifetime, "lifetime"), "grace_ms": millis(grace, "grace")}}


def session_exec(name: str, argv: List[str], env: Optional[Dict[str, str]], cwd: Optional[str], detach: bool,
                 wall_time: Optional[float], cpu_time: Optional[float],
                 memory: Union[int, str, None]) -> Dict[str, Any]:
    """An ``exec`` session request."""
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, str))):
        raise ValueError(f"memory must be a size such as \"64M\" or a number of bytes, not {memory!r}")
    return {"exec": {"name": name, "argv": list(argv), "detach": detach,
                     "env": [f"{k}={v}" for k, v in (env or {}).items()], "cwd": cwd,
                     "wall_time_ms": millis(wall_time, "wall_time"), "cpu_time_ms": millis(cpu_time, "cpu_time"),
                     "memory": memory}}


def session_exec_outcome(answer: Dict[str, Any], detach: bool) -> Union[Result, int]:
    """An ``exec`` answer: the command's :class:`Result`, or a detached one's pid."""
    if detach:
        return int(answer["detached"]["pid"])
    return Result(answer["exec"]["result"])


def session_stop(name: str, grace: Optional[float]) -> Dict[str, Any]:
    """A ``stop`` session request."""
    return {"stop": {"name": name, "grace_ms": millis(grace, "grace")}}


def millis(v: Any, what: str) -> Optional[int]:
    """Seconds (a number) as whole milliseconds; None stays None."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError(f"{what} must be a number of seconds, not {v!r}")
    return int(v * 1000)


def death_message(what: str, status: Optional[int], stderr: bytes, notices: Sequence[str]) -> str:
    """Why the server is gone, in its own words where it left any."""
    msg = what
    if status is not None:
        msg += f" (killed by signal {-status})" if status < 0 else f" (exit status {status})"
    for n in notices:
        msg += f"; it said: {n}"
    tail = stderr.decode(errors="replace").strip()
    if tail:
        msg += f"; its stderr: {tail}"
    return msg


def answer(rid: Any, ask: Dict[str, Any], on_ask: Any) -> Dict[str, Any]:
    """The answer line to an ask of run ``rid``: ``on_ask``'s decision, deny when
    there is none, it fails, or it says anything else."""
    decision = "deny"
    if on_ask is not None:
        try:
            d = on_ask(dict(ask, run_id=rid))
            if d in ("allow-once", "allow-run", "deny"):
                decision = d
        except Exception:
            pass
    return {"id": rid, "answer": {"ask_id": ask.get("ask_id"), "decision": decision}}
