#!/usr/bin/env bash
# Start-up cost of `capsule run` next to a bare /bin/true, bubblewrap and
# unshare(1), measured in interleaved hyperfine rounds, plus what a sealed
# memfd copy of the capsule binary (runc's CVE-2019-5736 defence) would add
# per run; written to docs/benchmarks.md.
#
# Usage (from anywhere in the repository):
#   bench/run.sh [RUNS]            RUNS per command, default 1000
#
# The machine's load drifts, and hyperfine measures its commands one after
# another, so one long invocation lets the drift hit one command and not the
# others. Instead the RUNS are split over ROUNDS hyperfine invocations, each
# over all four commands with RUNS/ROUNDS runs apiece (rounded up), the order
# of the commands rotated by one every round. Statistics are over every run
# of every round; the capsule ÷ bwrap and capsule ÷ unshare ratios are also
# taken per round, from commands measured seconds apart, and summarised by
# their median and spread.
#
# After each round, bench/memfd_copy.c (compiled here with cc -O2) times
# MEMFD_ITERS/ROUNDS iterations of memfd_create + sendfile of the capsule
# binary + F_ADD_SEALS, the per-run work of the defence capsule did not choose.
#
# As root (the normal way): builds the release binary with
# `cargo build --release -p capsule-cli`, installs bubblewrap, hyperfine, jq,
# python3 and gcc with apt if they are missing, creates the unprivileged
# system user capsule-bench, copies the binary to a world-readable directory
# (/var/tmp/capsule-bench) and runs the benchmark as that user via setpriv.
# As an unprivileged user: builds with cargo if it is on PATH and runs the
# benchmark as yourself; bwrap, hyperfine, jq, python3 and cc must already be
# installed.
#
# Environment:
#   CAPSULE_BIN       use this capsule binary instead of building one
#   CAPSULE_REV       how to describe that binary in the report (e.g. "git 1f5bae1")
#   CARGO_TARGET_DIR  honoured by the build (the binary is looked up there)
#   ROUNDS            hyperfine invocations (default 20; at most RUNS)
#   WARMUP            warm-up runs per command in each round (default 5)
#   MEMFD_ITERS       memfd copies to time in all (default RUNS)
#   CC                C compiler for bench/memfd_copy.c (default cc)
#   BENCH_USER        user to benchmark as when started as root (capsule-bench)
#   BENCH_DIR         staging directory when started as root (/var/tmp/capsule-bench)
#   OUTPUT            report to write (default docs/benchmarks.md in the repository)
set -euo pipefail

die() { printf 'bench/run.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-${RUNS:-1000}}
rounds=${ROUNDS:-20}
warmup=${WARMUP:-5}
memfd_iters=${MEMFD_ITERS:-$runs}
cc=${CC:-cc}
bench_user=${BENCH_USER:-capsule-bench}
output=${OUTPUT:-$repo/docs/benchmarks.md}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$runs'"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$rounds'"
[[ $warmup =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer, got '$warmup'"
[[ $memfd_iters =~ ^[1-9][0-9]*$ ]] || die "MEMFD_ITERS must be a positive integer, got '$memfd_iters'"
((rounds <= runs)) || rounds=$runs
per_round=$(((runs + rounds - 1) / rounds))
memfd_per_round=$(((memfd_iters + rounds - 1) / rounds))

is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

# --- tools -------------------------------------------------------------------
missing=()
for pair in hyperfine:hyperfine bwrap:bubblewrap jq:jq setpriv:util-linux python3:python3 "$cc":gcc; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    $is_root || die "missing tools; install them first: apt-get install ${missing[*]}"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
        die "apt-get install ${missing[*]} failed"
fi
bwrap_bin=$(command -v bwrap)
unshare_bin=$(command -v unshare)
true_bin=/bin/true

# --- capsule binary ------------------------------------------------------------
if [[ -n ${CAPSULE_BIN:-} ]]; then
    built=$CAPSULE_BIN
    [[ -x $built ]] || die "CAPSULE_BIN=$built is not an executable"
else
    cargo=$(command -v cargo || true)
    [[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
    [[ -n $cargo ]] || die "cargo not found (or set CAPSULE_BIN to a built capsule binary)"
    log "building: cargo build --release -p capsule-cli"
    # Ask cargo where it put the binary: .cargo/config.toml may set a
    # build target, which changes the path.
    built=$(cd "$repo" && "$cargo" build --release -p capsule-cli --message-format=json-render-diagnostics |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "capsule"
                      and (.target.kind | index("bin")) and .executable != null) | .executable' | tail -n 1)
    [[ -n $built && -x $built ]] || die "build finished but cargo reported no capsule executable"
fi

# --- stage and pick the user -----------------------------------------------------
if $is_root; then
    stage=${BENCH_DIR:-/var/tmp/capsule-bench}
    if ! id -u "$bench_user" >/dev/null 2>&1; then
        log "creating system user $bench_user"
        useradd -r -M -s /usr/sbin/nologin "$bench_user"
    fi
    install -d -m 0755 -o root -g root "$stage"
    rm -rf "$stage/out"
    install -d -m 0755 -o "$bench_user" -g "$(id -gn "$bench_user")" "$stage/out"
    as_user=(setpriv "--reuid=$bench_user" "--regid=$(id -g "$bench_user")" --clear-groups)
    run_user=$bench_user
else
    stage=$(mktemp -d "${TMPDIR:-/tmp}/capsule-bench.XXXXXX")
    mkdir "$stage/out"
    as_user=()
    run_user=$(id -un)
fi
install -m 0755 "$built" "$stage/capsule"
capsule=$stage/capsule
capsule_size=$(stat -c %s "$capsule")
out=$stage/out
memfd_copy=$stage/memfd_copy
log "compiling bench/memfd_copy.c: $cc -O2"
"$cc" -O2 -Wall -o "$memfd_copy" "$repo/bench/memfd_copy.c" || die "$cc failed on bench/memfd_copy.c"
chmod 0755 "$memfd_copy"

# Everything below runs as the benchmark user, in the staging directory, with
# a minimal environment.
as_bench() {
    (cd "$stage" && "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage" LANG=C.UTF-8 "$@")
}

# --- sanity: every command works for this user -------------------------------------
log "capsule check (as $run_user)"
check_out=$(as_bench "$capsule" check 2>&1) || true
printf '%s\n' "$check_out" | sed 's/^/    /' >&2
check_summary=$(printf '%s\n' "$check_out" | tail -n 1 | sed 's/^=> //')
names=("/bin/true (bare)" "capsule run" "bwrap" "unshare")
cmds=(
    "$true_bin"
    "$capsule run -q -- $true_bin"
    "$bwrap_bin --unshare-all --die-with-parent --ro-bind / / $true_bin"
    "$unshare_bin -Urmnpif --mount-proc $true_bin"
)
for i in "${!cmds[@]}"; do
    # shellcheck disable=SC2086  # the command lines are meant to be split into words
    if ! err=$(as_bench ${cmds[i]} 2>&1); then
        die "'${cmds[i]}' fails as $run_user, not benchmarking: ${err:-no output}"
    fi
done
if ! err=$(as_bench "$memfd_copy" "$capsule" 1 2>&1 >/dev/null); then
    die "bench/memfd_copy fails as $run_user: ${err:-no output}"
fi

