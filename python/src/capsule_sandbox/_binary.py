"""Finding the ``capsule`` binary."""

from __future__ import annotations

import os
import shutil
from typing import Optional

from ._errors import BinaryNotFound

_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "capsule")


def bundled_binary() -> Optional[str]:
    """The ``capsule`` the platform wheel carries, if this install has one."""
    return _BUNDLED if os.access(_BUNDLED, os.X_OK) else None


def find_capsule(capsule: Optional[str] = None) -> str:
    """The ``capsule`` binary to run, in this order: ``capsule`` (an explicit
    path), ``$CAPSULE_BIN``, the binary bundled in the wheel, ``PATH``."""
    if capsule is not None:
        return _check(capsule, "the capsule= argument")
    env = os.environ.get("CAPSULE_BIN")
    if env:
        return _check(env, "$CAPSULE_BIN")
    bundled = bundled_binary()
    if bundled is not None:
        return bundled
    found = shutil.which("capsule")
    if found is not None:
        return found
    raise BinaryNotFound(
        "no capsule binary: pass capsule=PATH, set $CAPSULE_BIN, install the platform wheel "
        "(pip install capsule-sandbox on x86_64 Linux bundles one) or put capsule on PATH")


def _check(path: str, source: str) -> str:
    found = shutil.which(path) if os.sep not in path else path
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise BinaryNotFound(f"{source}: {path!r} is not an executable file")
    return os.path.abspath(found)
