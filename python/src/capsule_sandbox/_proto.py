"""The JSON-lines protocol of ``capsule serve`` (docs/protocol.md), shared
by the threaded and the asyncio clients."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Union

from ._errors import Cancelled, RunError
from ._types import InteractResult, Result

MAX_LINE = 1 << 20
"""The server's longest request line."""
STDERR_TAIL = 16 << 10
"""How much of the server's stderr a SupervisorDied message may quote."""
READ_LIMIT = 1 << 30
"""The longest response line read (16 MiB captures, JSON-escaped, fit)."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def encode(msg: Dict[str, Any]) -> bytes:
    """One request line; a :class:`RunError` if the server could not read it."""
    try:
        line = (_dumps(msg) + "\n").encode()
    except (TypeError, ValueError) as e:
        raise RunError(f"invalid spec: not JSON: {e}", msg.get("id")) from None
    if len(line) > MAX_LINE:
        raise RunError(f"invalid spec: the request is {len(line)} bytes, longer than the server's "
                       f"{MAX_LINE}-byte request lines", msg.get("id"))
    return line


def server_args(parallel: int, prepare: bool, network: Optional[str], cgroup: Optional[str],
                require_cgroups: bool, no_cgroups: bool, extra: Sequence[str]) -> List[str]:
    """``capsule serve``'s arguments for a Sandbox's options."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be a positive number of runs, not {parallel!r}")
    args = ["serve", "--parallel", str(parallel)]
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
