"""Run specs' building blocks and the results capsule sends back."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

Size = Union[int, str]
"""A size: a number of bytes, or a string such as ``"256M"``."""
Duration = Union[float, int, str]
"""A duration: a number of seconds, or a string such as ``"1.5s"`` or ``"300ms"``."""


class Status(str, enum.Enum):
    """How a run ended: the protocol's ``status`` values (a ``str``)."""

    EXITED = "exited"
    SIGNALED = "signaled"
    WALL_TIME_LIMIT = "wall-time-limit"
    CPU_TIME_LIMIT = "cpu-time-limit"
    MEMORY_LIMIT = "memory-limit"
    OUTPUT_LIMIT = "output-limit"
    FORBIDDEN_SYSCALL = "forbidden-syscall"
    KILLED = "killed"

    @classmethod
    def _missing_(cls, value: object) -> Optional[Status]:
        # A status a newer capsule added: a member of its own, never an exception.
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper().replace("-", "_")
        member._value_ = value
        return member

    def __str__(self) -> str:
        return str(self.value)


_STATUSES: Dict[Any, Status] = {m.value: m for m in Status}
_EXITED = Status.EXITED  # a module global is read faster than an enum's member


def _duration(v: Duration) -> Union[float, str]:
    # The protocol reads a number as milliseconds; Python's unit is the second.
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"a duration is a number of seconds or a string such as '1.5s', not {v!r}")
    return float(v) * 1000.0


@dataclass(frozen=True)
class Limits:
    """A run's ``limits`` (docs/limits.md); ``None`` leaves one unset.

    Durations are seconds (or strings such as ``"300ms"``), sizes bytes (or
    strings such as ``"256M"``). ``extra`` holds fields of the protocol's
    ``limits`` this class does not name.
    """

    wall_time: Optional[Duration] = None
    cpu_time: Optional[Duration] = None
    memory: Optional[Size] = None
    pids: Optional[int] = None
    output_limit: Optional[Size] = None
    open_files: Optional[int] = None
    stack: Optional[Size] = None
    address_space: Optional[Size] = None
    locked_memory: Optional[Size] = None
    cpu_bandwidth: Optional[float] = None
    cpus: Optional[str] = None
    nested_namespaces: Optional[int] = None
    inotify_instances: Optional[int] = None
    inotify_watches: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The protocol's ``limits`` object."""
        out: Dict[str, Any] = {}
        if self.wall_time is not None:
            out["wall_time"] = _duration(self.wall_time)
        if self.cpu_time is not None:
            out["cpu_time"] = _duration(self.cpu_time)
        for name in ("memory", "pids", "output_limit", "open_files", "stack", "address_space",
                     "locked_memory", "cpu_bandwidth", "cpus", "nested_namespaces", "inotify_instances",
                     "inotify_watches"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class Capture:
    """Capture a stream (stdout or stderr) into the result: the first ``size`` bytes."""

    size: Size = 1 << 16

    def to_json(self) -> Dict[str, Any]:
        return {"capture": self.size}


@dataclass(frozen=True)
class Pipe:
    """A host file through a pipe: read-once input, or write-once output
    bounded by ``limits.output_limit`` (docs/interactive.md)."""

    path: str

    def to_json(self) -> Dict[str, Any]:
        return {"pipe": self.path}


class Output:
    """A captured stream: ``text`` (its first bytes, invalid UTF-8 replaced),
    ``bytes`` (how many the program wrote in all), ``truncated``."""

    __slots__ = ("text", "bytes", "truncated")

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.text: str = raw.get("text", "")
        self.bytes: int = raw.get("bytes", 0)
        self.truncated: bool = raw.get("truncated", False)

    def __repr__(self) -> str:
        return f"Output(text={self.text!r}, bytes={self.bytes}, truncated={self.truncated})"


class Result:
    """A run that happened, whatever its status; ``raw`` is the whole
    result object, fields this version does not know included. The fields
    are read from ``raw`` when asked for."""

    __slots__ = ("raw", "status", "_stdout", "_stderr")

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        st = raw.get("status")
        self.status: Status = _STATUSES.get(st) or Status(st)
        self._stdout: Optional[Output] = None
        self._stderr: Optional[Output] = None

    @property
    def exit_code(self) -> Optional[int]:
        return self.raw.get("exit_code")

    @property
    def signal(self) -> Optional[str]:
        return self.raw.get("signal")

    @property
    def wall_time_ms(self) -> float:
        v: float = self.raw.get("wall_time_ms", 0.0)
        return v

    @property
    def cpu_user_ms(self) -> float:
        v: float = self.raw.get("cpu_user_ms", 0.0)
        return v

    @property
    def cpu_system_ms(self) -> float:
        v: float = self.raw.get("cpu_system_ms", 0.0)
        return v

    @property
    def peak_memory_bytes(self) -> Optional[int]:
        return self.raw.get("peak_memory_bytes")

    @property
    def accounting(self) -> Optional[str]:
        """``cgroup`` or ``rusage``: where the CPU and memory figures come from."""
        return self.raw.get("accounting")

    @property
    def pids_peak(self) -> Optional[int]:
        return self.raw.get("pids_peak")

    @property
    def killed_by_limit(self) -> bool:
        v: bool = self.raw.get("killed_by_limit", False)
        return v

    @property
    def error(self) -> Optional[str]:
        return self.raw.get("error")

    @property
    def syscall(self) -> Optional[str]:
        """``forbidden-syscall``: the call the seccomp policy stopped."""
        return self.raw.get("syscall")

    @property
    def syscall_args(self) -> Optional[List[int]]:
        return self.raw.get("syscall_args")

    @property
    def landlock(self) -> Optional[str]:
        return self.raw.get("landlock")

    @property
    def net_log(self) -> Optional[List[Any]]:
        return self.raw.get("net_log")

    @property
    def network(self) -> Optional[List[Any]]:
        """With ``egress``: the destinations asked for through capsule's
        proxy, and direct attempts past it (docs/egress.md)."""
        return self.raw.get("network")

    @property
    def stdout(self) -> Optional[Output]:
        """The captured stdout (``None`` unless the spec captured it)."""
        if self._stdout is None and self.raw.get("stdout") is not None:
            self._stdout = Output(self.raw["stdout"])
        return self._stdout

    @property
    def stderr(self) -> Optional[Output]:
        """The captured stderr (``None`` unless the spec captured it)."""
        if self._stderr is None and self.raw.get("stderr") is not None:
            self._stderr = Output(self.raw["stderr"])
        return self._stderr

    @property
    def cpu_time_ms(self) -> float:
        """User plus system CPU time of the run's processes."""
        return self.cpu_user_ms + self.cpu_system_ms

    @property
    def ok(self) -> bool:
        """Exited with status 0."""
        return self.status is _EXITED and self.raw.get("exit_code") == 0

    def __repr__(self) -> str:
        more = ""
        if self.exit_code is not None:
            more += f", exit_code={self.exit_code}"
        if self.signal is not None:
            more += f", signal={self.signal!r}"
        if self.syscall is not None:
            more += f", syscall={self.syscall!r}"
        return f"Result(status={self.status.value!r}{more}, wall_time_ms={self.wall_time_ms})"


class InteractResult:
    """An interactive pair's outcome: who left the conversation first
    (``"solution"`` or ``"interactor"``) and both runs' results."""

    __slots__ = ("raw", "first_to_exit", "solution", "interactor")

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        self.first_to_exit: Optional[str] = raw.get("first_to_exit")
        self.solution = Result(raw["solution"])
        self.interactor = Result(raw["interactor"])

    def __repr__(self) -> str:
        return (f"InteractResult(first_to_exit={self.first_to_exit!r}, solution={self.solution!r}, "
                f"interactor={self.interactor!r})")
