#!/usr/bin/env bash
# Start-up cost of `capsule run` next to a bare /bin/true, bubblewrap and
# unshare(1), measured by one hyperfine invocation, written to
# docs/benchmarks.md.
#
# Usage (from anywhere in the repository):
#   bench/run.sh [RUNS]            RUNS per command, default 1000
#
# As root (the normal way): builds the release binary with
# `cargo build --release -p capsule-cli`, installs bubblewrap, hyperfine and
# jq with apt if they are missing, creates the unprivileged system user
# capsule-bench, copies the binary to a world-readable directory
# (/var/tmp/capsule-bench) and runs the benchmark as that user via setpriv.
# As an unprivileged user: builds with cargo if it is on PATH and runs the
# benchmark as yourself; bwrap, hyperfine and jq must already be installed.
#
# Environment:
#   CAPSULE_BIN       use this capsule binary instead of building one
#   CAPSULE_REV       how to describe that binary in the report (e.g. "git 1f5bae1")
#   CARGO_TARGET_DIR  honoured by the build (the binary is looked up there)
#   WARMUP            warm-up runs per command (default 50)
#   BENCH_USER        user to benchmark as when started as root (capsule-bench)
#   BENCH_DIR         staging directory when started as root (/var/tmp/capsule-bench)
#   OUTPUT            report to write (default docs/benchmarks.md in the repository)
set -euo pipefail

die() { printf 'bench/run.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-${RUNS:-1000}}
warmup=${WARMUP:-50}
bench_user=${BENCH_USER:-capsule-bench}
output=${OUTPUT:-$repo/docs/benchmarks.md}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$runs'"
[[ $warmup =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer, got '$warmup'"

is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

# --- tools -------------------------------------------------------------------
missing=()
for pair in hyperfine:hyperfine bwrap:bubblewrap jq:jq setpriv:util-linux; do
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
out=$stage/out

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

# --- measure ---------------------------------------------------------------------
# Other work on the machine shows up directly in the numbers: measure how
# busy the CPUs are for a second (the load average would still count our own
# build) and say so.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r total0 idle0 < <(cpu_ticks)
sleep 1
read -r total1 idle1 < <(cpu_ticks)
busy=$(awk -v t=$((total1 - total0)) -v i=$((idle1 - idle0)) 'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }')
if ((busy > 10)); then
    log "warning: the CPUs are ${busy}% busy with other work; the numbers will be noisy"
fi
hf_args=(-N --warmup "$warmup" --runs "$runs"
    --export-markdown "$out/hyperfine.md" --export-json "$out/hyperfine.json")
for i in "${!cmds[@]}"; do
    hf_args+=(-n "${names[i]}" "${cmds[i]}")
done
log "hyperfine ${hf_args[*]}"
as_bench hyperfine "${hf_args[@]}" >&2

# --- report ------------------------------------------------------------------------
# One TSV line per command: name, mean, stddev, median, min, max, mean of the
# first and of the last quarter of the runs (seconds). The quarters show drift:
# hyperfine measures the commands one after another, so load that comes or
# goes during the run hits one command and not the others.
stats=$(jq -r '.results[] | (.times | length / 4 | floor | if . < 1 then 1 else . end) as $q
    | [.command, .mean, (.stddev // 0), .median, .min, .max,
       (.times[:$q] | add / length), (.times[-$q:] | add / length)] | @tsv' "$out/hyperfine.json")
[[ $(printf '%s\n' "$stats" | wc -l) -eq ${#cmds[@]} ]] || die "unexpected hyperfine JSON in $out/hyperfine.json"

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
[[ -n $cpu ]] || cpu=$(uname -m)
if [[ -n ${CAPSULE_BIN:-} ]]; then
    commit=${CAPSULE_REV:-binary given as CAPSULE_BIN}
else
    commit=git\ $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
        commit="$commit with uncommitted changes"
    fi
fi
capsule_version=$("$capsule" --version 2>/dev/null || echo capsule)
bwrap_version=$("$bwrap_bin" --version 2>/dev/null | head -n 1)
unshare_version=$("$unshare_bin" --version 2>/dev/null | head -n 1)
hyperfine_version=$(hyperfine --version | head -n 1)

mkdir -p "$(dirname "$output")"
tmp=$(mktemp "$output.XXXXXX")
{
    echo "# Benchmarks"
    echo
    echo "Start-up cost of running \`/bin/true\` in a sandbox: the whole time from"
    echo "exec of the launcher to its exit, so the difference to the bare"
    echo "\`/bin/true\` is the price of creating and tearing down the sandbox."
    echo "Generated by \`bench/run.sh\`; do not edit by hand."
    echo
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Kernel: $(uname -srm)"
    echo "- CPU: $cpu ($(nproc) CPUs online)"
    echo "- capsule: $capsule_version ($commit), release build"
    echo "- Tools: $bwrap_version; $unshare_version; $hyperfine_version"
    echo "- Method: one \`hyperfine -N --warmup $warmup --runs $runs\` invocation with all four"
    echo "  commands (hyperfine measures them one after another), as the unprivileged"
    echo "  user \`$run_user\`, binary copied to \`$stage\`"
    echo "- CPU busy with other work just before measuring: ${busy}%"
    echo "- \`capsule check\` on this machine: $check_summary"
    echo
    printf '%s\n' "$stats" | awk -F '\t' -v cmd1="${cmds[0]}" -v cmd2="${cmds[1]}" \
        -v cmd3="${cmds[2]}" -v cmd4="${cmds[3]}" -v stage="$stage/" '
        function ms(x) { return sprintf("%.3f", x * 1000) }
        function ratio(a, sa, b, sb,   r) {
            r = a / b
            return sprintf("%.2f ± %.2f", r, r * sqrt((sa / a) ^ 2 + (sb / b) ^ 2))
        }
        {
            n++; name[n] = $1; mean[n] = $2; sd[n] = $3; med[n] = $4; lo[n] = $5; hi[n] = $6
            q1[n] = $7; q4[n] = $8
        }
        END {
            cmd[1] = cmd1; cmd[2] = cmd2; cmd[3] = cmd3; cmd[4] = cmd4
            print "| Command | Mean ± σ (ms) | Median (ms) | Min … Max (ms) | First ¼ → last ¼ (ms) | × bare `/bin/true` |"
            print "|:---|---:|---:|---:|---:|---:|"
            for (i = 1; i <= n; i++) {
                c = cmd[i]
                if ((p = index(c, stage)) > 0) c = substr(c, 1, p - 1) substr(c, p + length(stage))
                printf "| `%s` | %s ± %s | %s | %s … %s | %s → %s | %s |\n", c, ms(mean[i]), ms(sd[i]), ms(med[i]),
                    ms(lo[i]), ms(hi[i]), ms(q1[i]), ms(q4[i]),
                    (i == 1 ? "1.00" : ratio(mean[i], sd[i], mean[1], sd[1]))
            }
            print ""
            printf "capsule ÷ bwrap (mean): **%s**; capsule ÷ unshare: **%s**.\n",
                ratio(mean[2], sd[2], mean[3], sd[3]), ratio(mean[2], sd[2], mean[4], sd[4])
            print ""
            printf "Overhead over the bare process (mean difference): capsule %s ms, bwrap %s ms, unshare %s ms.\n",
                ms(mean[2] - mean[1]), ms(mean[3] - mean[1]), ms(mean[4] - mean[1])
        }'
    echo
    echo "Ratios carry σ propagated from both means. A large change from the first"
    echo "to the last quarter of a command's runs means the load on the machine"
    echo "changed during the measurement; re-run on a quiet machine before comparing."
    echo "\`capsule run -q\` includes its full run (sandbox setup, accounting, result"
    echo "reporting); the bwrap and unshare lines create the namespaces and mounts only."
    echo
    echo "To reproduce: \`sudo bench/run.sh $runs\` from the repository root (see the"
    echo "header of the script)."
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$output"
log "wrote $output (raw hyperfine exports in $out)"
cat "$output"
