#!/usr/bin/env bash
# The benchmark of issue 7: `capsule judge` on 100 tiny a+b tests of a C++
# solution (examples/aplusb/solutions/ok.cpp). Tests per second of
# `capsule judge --parallel 2` over its test phase (the JSON's
# timing.tests_ms: compiling in the sandbox is excluded and reported
# apart), against a bare loop that runs the same source compiled with
# g++ -O2 on each test from 2 worker threads and compares each output with
# the answer as the exact checker does; interleaved rounds, medians and the
# ratio. bench/judge_driver.py does the measuring; the report goes to
# stdout (and to --output FILE). The figures belong in docs/benchmarks.md.
#
# Usage: bench/judge.sh [--rounds N] [--tests N] [--output FILE]
#        (defaults: 10 rounds, 100 tests)
#
# As root: builds with cargo (release), installs what is missing with apt
# (g++, python3, jq), creates the system user capsule-bench, stages the
# binary in /var/tmp/capsule-bench, works in /var/tmp/capsule-bench-judge
# (the user's own) and runs as that user via setpriv. As an unprivileged
# user: runs as yourself, in a new directory under /var/tmp. The work
# directory is removed at the end unless KEEP=1.
#
# Environment:
#   CAPSULE_BIN  use this capsule binary instead of building one
#   CAPSULE_REV  how to describe that binary in the report
#   BENCH_USER   user to benchmark as when started as root (capsule-bench)
#   KEEP=1       keep the work directory afterwards
set -euo pipefail

die() { printf 'bench/judge.sh: %s\n' "$*" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=10
ntests=100
output=
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --tests) ntests=${2:?--tests needs a value}; shift ;;
        --output) output=${2:?--output needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$rounds'"
[[ $ntests =~ ^[1-9][0-9]*$ ]] || die "--tests must be a positive integer, got '$ntests'"
[[ -z $output || $output == /* ]] || output=$PWD/$output
is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

missing=()
for pair in g++:g++ python3:python3 jq:jq setpriv:util-linux; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    $is_root || die "missing tools; install them first: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
        die "apt-get install ${missing[*]} failed"
fi

if [[ -n ${CAPSULE_BIN:-} ]]; then
    built=$CAPSULE_BIN
    [[ -x $built ]] || die "CAPSULE_BIN=$built is not an executable"
    rev=${CAPSULE_REV:-binary given as CAPSULE_BIN}
    kind="$built"
else
    cargo=$(command -v cargo || true)
    [[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
    [[ -n $cargo ]] || die "cargo not found (or set CAPSULE_BIN to a built capsule binary)"
    built=$(cd "$repo" && "$cargo" build --release -p capsule-cli --message-format=json-render-diagnostics |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "capsule" and .executable != null) | .executable' |
        tail -n 1) || die "cargo build failed"
    [[ -x $built ]] || die "cargo reported no capsule executable"
    rev="git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    [[ -z $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] || rev="$rev with uncommitted changes"
    kind="release build"
fi

if $is_root; then
    user=${BENCH_USER:-capsule-bench}
    id -u "$user" >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin "$user"
    stage=/var/tmp/capsule-bench
    install -d -m 0755 -o root -g root "$stage"
    work=/var/tmp/capsule-bench-judge
    rm -rf "$work"
    install -d -m 0755 -o "$user" -g "$(id -g "$user")" "$work"
    as_user=(setpriv "--reuid=$user" "--regid=$(id -g "$user")" --clear-groups)
else
    user=$(id -un)
    stage=$(mktemp -d /var/tmp/capsule-bench-bin.XXXXXX)
    work=$(mktemp -d /var/tmp/capsule-bench-judge.XXXXXX)
    as_user=()
fi
cleanup() {
    if [[ ${KEEP:-} == 1 ]]; then
        echo "bench/judge.sh: kept $work" >&2
    else
        rm -rf "$work"
    fi
    $is_root || rm -rf "$stage"
}
trap cleanup EXIT
install -m 0755 "$built" "$stage/capsule"
install -m 0755 "$(dirname "$built")/capsule-cli" "$stage/capsule-cli"
install -m 0755 "$repo/bench/judge_driver.py" "$stage/judge_driver.py"

# The problem: the example's solution, and NTESTS random tiny tests.
py=$(PATH=/usr/local/bin:/usr/bin:/bin command -v python3)
"${as_user[@]}" mkdir "$work/tests"
"${as_user[@]}" cp "$repo/examples/aplusb/solutions/ok.cpp" "$work/ok.cpp"
"${as_user[@]}" g++ -O2 -o "$work/solution" "$work/ok.cpp" || die "g++ failed on ok.cpp"
"${as_user[@]}" "$py" - "$work/tests" "$ntests" <<'EOF'
import os, random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
for i in range(1, n + 1):
    a, b = rng.randint(-10**9, 10**9), rng.randint(-10**9, 10**9)
    with open(os.path.join(d, f"{i}.in"), "w") as f:
        f.write(f"{a} {b}\n")
    with open(os.path.join(d, f"{i}.out"), "w") as f:
        f.write(f"{a + b}\n")
EOF

description="capsule ($rev, $kind), $(g++ --version | sed -n 1p), $(uname -r)"
report=$(cd "$work" && "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" LANG=C.UTF-8 \
    "$py" "$stage/judge_driver.py" "$stage/capsule" "$work" "$rounds" "$description") ||
    die "the benchmark failed"
printf '%s\n' "$report"
if [[ -n $output ]]; then
    mkdir -p "$(dirname "$output")"
    printf '%s\n' "$report" >"$output"
    echo "written to $output" >&2
fi
