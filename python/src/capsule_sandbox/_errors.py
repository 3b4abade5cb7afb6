"""The exceptions of capsule_sandbox."""

from __future__ import annotations


class CapsuleError(Exception):
    """Base class of every error this package raises."""


class RunError(CapsuleError):
    """capsule answered a request with an error: the run could not happen.

    The message is capsule's own, naming the field, syscall, path and fix.
    """

    def __init__(self, message: str, request_id: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


class Cancelled(RunError):
    """The run was cancelled (``Handle.cancel``) before it finished."""


class SupervisorDied(CapsuleError):
    """The server is gone: raised for every run still pending and every later call."""


class BinaryNotFound(CapsuleError):
    """No ``capsule`` binary: not given, not in $CAPSULE_BIN, not bundled, not on PATH."""
