"""capsule_sandbox: run untrusted programs in capsule's unprivileged Linux sandbox.

    import capsule_sandbox as cs
    with cs.Sandbox(parallel=2) as sb:
        r = sb.run(["./a.out"], stdin="1.in", stdout=cs.Capture(1 << 16),
                   limits=cs.Limits(wall_time=1.0, memory="256M"), seccomp="strict")
        print(r.status, r.stdout.text)

A client of ``capsule serve`` (docs/protocol.md); standard library only.
"""

from ._async import AsyncHandle, AsyncSandbox
from ._binary import bundled_binary, find_capsule
from ._errors import BinaryNotFound, CapsuleError, Cancelled, RunError, SupervisorDied
from ._judge import JudgeError, Judgement, TestVerdict, judge, judge_async
from ._spec import spec
from ._sync import Handle, Sandbox
from ._types import Capture, InteractResult, Limits, Output, Pipe, Result, Status

__version__ = "0.1.0"

__all__ = [
    "AsyncHandle", "AsyncSandbox", "BinaryNotFound", "CapsuleError", "Cancelled", "Capture", "Handle",
    "InteractResult", "JudgeError", "Judgement", "Limits", "Output", "Pipe", "Result", "RunError", "Sandbox",
    "Status", "SupervisorDied", "TestVerdict", "bundled_binary", "find_capsule", "judge", "judge_async", "spec",
]
