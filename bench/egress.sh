#!/usr/bin/env bash
# The egress benchmark (docs/egress.md, "Cost"): the per-run cost of an
# egress policy without traffic, and a 100 MiB download through the proxy
# against the same straight over loopback, in one interleaved run
# (bench/egress_driver.py). Builds the release binaries, stages them
# world-readable and runs the driver as the unprivileged user (capsule-test
# when root: capsule refuses root).
#
# Usage: bench/egress.sh [ROUNDS] [RUNS_PER_ROUND]     (default 10 50)
#   BEFORE=DIR: also the capsule and capsule-cli in DIR (another build), in
#   the same interleaved rounds; ONLY=agent: the per-run rows through the agent only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-10}
runs=${2:-50}
target=${CARGO_TARGET_DIR:-$repo/target}
(cd "$repo" && cargo build --release --bin capsule --bin capsule-cli >&2)
stage=$(mktemp -d /var/tmp/capsule-egress-bench.XXXXXX)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
for b in capsule capsule-cli; do install -m 755 "$target/x86_64-unknown-linux-gnu/release/$b" "$stage/$b"; done
install -m 755 "$repo/bench/egress_driver.py" "$stage/"
before=
if [ -n "${BEFORE:-}" ]; then
    mkdir -m 755 "$stage/before"
    for b in capsule capsule-cli; do install -m 755 "$BEFORE/$b" "$stage/before/$b"; done
    before=$stage/before
fi
cd /
if [ "$(id -u)" = 0 ]; then
    id capsule-test >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin capsule-test
    setpriv --reuid=capsule-test --regid=capsule-test --clear-groups -- \
        env -i PATH=/usr/bin:/bin HOME="$stage" BEFORE="$before" ONLY="${ONLY:-}" python3 "$stage/egress_driver.py" "$stage/capsule" "$rounds" "$runs"
else
    BEFORE="$before" python3 "$stage/egress_driver.py" "$stage/capsule" "$rounds" "$runs"
fi
# (Not exec: the trap removes the stage.)
