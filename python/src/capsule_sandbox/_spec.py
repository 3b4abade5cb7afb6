"""Building a run spec (docs/protocol.md) from Python arguments."""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ._types import Capture, Limits, Pipe

Stream = Union[str, "os.PathLike[str]", Capture, Pipe, Mapping[str, Any], None]
"""A standard stream: a host file's path, ``Capture(n)``, ``Pipe(path)``,
a protocol stream object, or ``None`` (``/dev/null``)."""
Argv = Sequence[Union[str, "os.PathLike[str]"]]
SpecLike = Union[Mapping[str, Any], Argv]
"""A run spec with the protocol's field names, or an argv alone."""


def _stream(v: Stream) -> Any:
    if isinstance(v, (Capture, Pipe)):
        if isinstance(v, Pipe):
            return {"pipe": os.path.abspath(v.path)}
        return v.to_json()
    if isinstance(v, (str, os.PathLike)):
        # Relative to this process's directory, not the server's.
        return os.path.abspath(os.fspath(v))
    return v


def spec(argv: SpecLike, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
         limits: Union[Limits, Mapping[str, Any], None] = None, seccomp: Optional[str] = None,
         env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
         **fields: Any) -> Dict[str, Any]:
    """A run spec: ``argv`` (a list) or a spec dict, with the options given set.

    Any other field of the protocol's run spec goes in ``fields`` by its
    name (``share_net=True``, ``mounts=[...]``, ``empty_root=True``, ...).
    """
    s: Dict[str, Any]
    if type(argv) is list:
        # The common case, without the ABC checks (paths are made strings when encoded).
        s = {"argv": argv[:]}
    elif isinstance(argv, Mapping):
        s = dict(argv)
    elif isinstance(argv, (str, bytes, os.PathLike)):
        raise TypeError("argv must be a list of strings (or a spec dict), not a single string")
    else:
        s = {"argv": [os.fspath(a) for a in argv]}
    if stdin is not None:
        s["stdin"] = _stream(stdin)
    if stdout is not None:
        s["stdout"] = _stream(stdout)
    if stderr is not None:
        s["stderr"] = _stream(stderr)
    if limits is not None:
        s["limits"] = limits.to_json() if isinstance(limits, Limits) else dict(limits)
    if seccomp is not None:
        s["seccomp"] = seccomp
    if env is not None:
        s["env"] = dict(env)
    if cwd is not None:
        s["cwd"] = cwd
    s.update(fields)
    return s
