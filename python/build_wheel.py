#!/usr/bin/env python3
"""Builds capsule-sandbox's distributions with the standard library alone:

- the platform wheel, carrying the static ``capsule`` and ``capsule-cli``
  binaries in ``capsule_sandbox/bin`` (tagged manylinux2014 and musllinux
  of their architecture, x86_64 or aarch64: the binaries load no library,
  so any Linux >= 5.12 of that architecture runs them; ``pip install`` of
  it alone gives a working sandbox);
- the sdist (``--sdist``), which finds capsule at run time ($CAPSULE_BIN or PATH).

    python3 python/build_wheel.py --bins DIR --out DIR [--arch x86_64|aarch64] [--sdist]

DIR of --bins holds capsule and capsule-cli (scripts/package.sh passes its
release build) of the architecture --arch (default x86_64). Prints the
paths written.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHS = ("x86_64", "aarch64")


def tag(arch: str) -> str:
    return f"py3-none-manylinux_2_17_{arch}.manylinux2014_{arch}.musllinux_1_1_{arch}"


def strip_tool(arch: str) -> str:
    """This machine's strip for binaries of `arch` (a cross one for aarch64 on x86_64)."""
    if arch == os.uname().machine:
        return "strip"
    return f"{arch}-linux-gnu-strip"
EPOCH = (1980, 1, 1, 0, 0, 0)


def project() -> Tuple[str, str, str, str]:
    text = open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8").read()

    def field(name: str) -> str:
        m = re.search(rf'^{name} = "(.*)"$', text, re.M)
        if not m:
            sys.exit(f"build_wheel.py: no {name} in pyproject.toml")
        return m.group(1)
    return field("name"), field("version"), field("description"), field("requires-python")


def metadata(name: str, version: str, summary: str, requires: str) -> bytes:
    readme = open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    head = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
            f"License: Apache-2.0\nRequires-Python: {requires}\nClassifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Typing :: Typed\nDescription-Content-Type: text/markdown\n\n")
    return (head + readme).encode()


def sources() -> List[Tuple[str, str]]:
    """(path in the package, file) of the package's files."""
    pkg = os.path.join(HERE, "src", "capsule_sandbox")
    out = []
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py") or f == "py.typed":
            out.append((f"capsule_sandbox/{f}", os.path.join(pkg, f)))
    return out


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(bins: str, out: str, arch: str = "x86_64") -> str:
    name, version, summary, requires = project()
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = os.path.join(out, f"{dist}-{version}-{tag(arch)}.whl")
    strip = strip_tool(arch)
    entries: List[Tuple[str, bytes, int]] = [(arc, open(f, "rb").read(), 0o644) for arc, f in sources()]
    with tempfile.TemporaryDirectory() as tmp:
        for b in ("capsule", "capsule-cli"):
            src = os.path.join(bins, b)
            if not os.access(src, os.X_OK):
                sys.exit(f"build_wheel.py: {src} is missing or not executable")
            dst = os.path.join(tmp, b)
            shutil.copyfile(src, dst)
            if shutil.which(strip):
                subprocess.run([strip, "--strip-unneeded", dst], check=False, stderr=subprocess.DEVNULL)
            entries.append((f"capsule_sandbox/bin/{b}", open(dst, "rb").read(), 0o755))
    entries.append((f"{info}/METADATA", metadata(name, version, summary, requires), 0o644))
    wheel_txt = "Wheel-Version: 1.0\nGenerator: capsule build_wheel.py\nRoot-Is-Purelib: false\n"
    wheel_txt += "".join(f"Tag: py3-none-{p}\n" for p in tag(arch).split("-")[2].split("."))
    entries.append((f"{info}/WHEEL", wheel_txt.encode(), 0o644))
    entries.append((f"{info}/top_level.txt", b"capsule_sandbox\n", 0o644))
    lic = os.path.join(HERE, "..", "LICENSE")
    if os.path.exists(lic):
        entries.append((f"{info}/LICENSE", open(lic, "rb").read(), 0o644))
    record = "".join(f"{arc},{record_hash(data)},{len(data)}\n" for arc, data, _ in entries)
    record += f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), 0o644))
    os.makedirs(out, exist_ok=True)
    tmp_path = path + ".part"
    with zipfile.ZipFile(tmp_path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, mode in entries:
            zi = zipfile.ZipInfo(arc, EPOCH)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp_path, path)
    return path


def sdist(out: str) -> str:
    name, version, summary, requires = project()
    base = f"{name.replace('-', '_')}-{version}"
    path = os.path.join(out, f"{base}.tar.gz")
    files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
             ("README.md", os.path.join(HERE, "README.md"))]
    files += [(f"src/{arc}", f) for arc, f in sources()]
    os.makedirs(out, exist_ok=True)
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(arc: str, data: bytes) -> None:
            ti = tarfile.TarInfo(f"{base}/{arc}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 315532800
            t.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", metadata(name, version, summary, requires))
        for arc, f in files:
            add(arc, open(f, "rb").read())
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bins", required=True, help="directory holding capsule and capsule-cli")
    ap.add_argument("--out", required=True, help="directory to write the wheel (and sdist) to")
    ap.add_argument("--arch", choices=ARCHS, default="x86_64", help="the binaries' architecture (default x86_64)")
    ap.add_argument("--sdist", action="store_true", help="write the sdist too")
    a = ap.parse_args()
    print(wheel(a.bins, a.out, a.arch))
    if a.sdist:
        print(sdist(a.out))


if __name__ == "__main__":
    main()
