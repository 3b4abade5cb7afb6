#!/usr/bin/env bash
# Runs capsule's whole test suite: unit tests, whole-process tests and the
# black-box tests that run the real binary as an unprivileged user.
#
# Run it as root (the black-box tests create the unprivileged user
# `capsule-test` and drop to it with setpriv; capsule itself refuses root),
# or as an unprivileged user (the root-only tests then skip, with a reason).
# CAPSULE_TEST_STRICT=1 turns every skip into a failure (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust (rustup) first" >&2; exit 1; }
cargo build --workspace --all-targets
exec cargo test --workspace "$@"
