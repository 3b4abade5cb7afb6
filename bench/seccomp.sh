#!/usr/bin/env bash
# The benchmark of issue 5: what the seccomp policies cost inside the
# sandbox. 3M getppid calls (bench/getppid.c) under `none`, `default` and
# `strict`, and `g++ -O2` of a generated 1000-line C++ file under `none`,
# `default` and `compile`, all through `capsule run`, interleaved, as an
# unprivileged user; median CPU time; written to docs/benchmarks-seccomp.md.
#
# Usage: bench/seccomp.sh [--rounds N] [--output FILE]   (default 15 rounds)
#
# As root: builds with cargo, installs gcc/g++/python3 with apt if missing,
# creates the system user capsule-bench, stages everything in
# /var/tmp/capsule-bench and runs as that user via setpriv. As an
# unprivileged user: runs as yourself.
set -euo pipefail

die() { printf 'bench/seccomp.sh: %s\n' "$*" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=15
output=$repo/docs/benchmarks-seccomp.md
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --output) output=${2:?--output needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$rounds'"
is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

missing=()
for pair in gcc:gcc g++:g++ python3:python3 jq:jq setpriv:util-linux; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    $is_root || die "missing tools; install them first: apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
fi

cargo=$(command -v cargo || true)
[[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
[[ -n $cargo ]] || die "cargo not found"
built=$(cd "$repo" && "$cargo" build --release -p capsule-cli --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "capsule" and .executable != null) | .executable' |
    tail -n 1) || die "cargo build failed"
[[ -x $built ]] || die "cargo reported no capsule executable"

if $is_root; then
    stage=${BENCH_DIR:-/var/tmp/capsule-bench}
    user=${BENCH_USER:-capsule-bench}
    id -u "$user" >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin "$user"
    install -d -m 0755 "$stage"
    rm -rf "$stage/seccomp-out"
    install -d -m 0755 -o "$user" -g "$(id -gn "$user")" "$stage/seccomp-out"
    as_user=(setpriv "--reuid=$user" "--regid=$(id -g "$user")" --clear-groups)
else
    stage=$(mktemp -d "${TMPDIR:-/tmp}/capsule-bench.XXXXXX")
    mkdir "$stage/seccomp-out"
    as_user=()
fi
install -m 0755 "$built" "$stage/capsule"
install -m 0755 "$(dirname "$built")/capsule-cli" "$stage/capsule-cli"
install -m 0755 "$repo/bench/seccomp_driver.py" "$stage/seccomp_driver.py"
gcc -O2 -Wall -o "$stage/getppid" "$repo/bench/getppid.c" || die "gcc failed on bench/getppid.c"
report=$stage/seccomp-out/report.md
cd "$stage"
py=$(PATH=/usr/local/bin:/usr/bin:/bin command -v python3)
"${as_user[@]}" "$py" "$stage/seccomp_driver.py" "$stage/capsule" "$stage" "$rounds" "$report"
cp "$report" "$output"
echo "written to $output" >&2
