#!/usr/bin/env bash
# A clone builds with nothing but a Rust toolchain (issue 23): capsule and
# capsule-cli are built (release, in a target directory of their own) in a
# mount namespace where the system's libseccomp (Debian's libseccomp-dev:
# libseccomp.a and .so, seccomp.h, its pkg-config file) is hidden under
# /dev/null, so a dependency on it fails the build here. Run as root
# (unshare -m); scripts/test.sh runs it. CAPSULE_TEST_STRICT=1: not
# running it is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
why=""
if [ "$(id -u)" != 0 ]; then
  why="hiding the system's libseccomp needs root (unshare -m)"
elif ! command -v unshare >/dev/null; then
  why="unshare is missing (apt-get install util-linux)"
fi
if [ -n "$why" ]; then
  if [ "${CAPSULE_TEST_STRICT:-0}" = 1 ]; then
    echo "test-fresh-build.sh: FAIL: $why (CAPSULE_TEST_STRICT=1)" >&2
    exit 1
  fi
  echo "SKIP fresh-build: $why"
  exit 0
fi
hide=()
for f in /usr/lib/x86_64-linux-gnu/libseccomp.* /usr/include/seccomp*.h /usr/lib/x86_64-linux-gnu/pkgconfig/libseccomp.pc; do
  [ -e "$f" ] && hide+=("$f")
done
echo "== fresh build with the system's libseccomp hidden: ${hide[*]:-(none installed)}"
export FRESH_TARGET=${CARGO_TARGET_DIR:-$PWD/target}/fresh-build
unshare -m --propagation private -- bash -euo pipefail -c '
  for f in "$@"; do
    mount --bind /dev/null "$f"
    [ ! -s "$f" ] || { echo "test-fresh-build.sh: $f is not hidden" >&2; exit 1; }
  done
  cargo build --release --locked -p capsule -p capsule-cli --target-dir "$FRESH_TARGET"
  for b in capsule capsule-cli; do
    "$FRESH_TARGET/x86_64-unknown-linux-gnu/release/$b" --version
  done
' fresh-build "${hide[@]}"
echo "fresh-build: 1 passed, 0 failed"
