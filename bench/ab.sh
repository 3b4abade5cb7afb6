#!/usr/bin/env bash
# An A/B of two release builds of capsule (before and after a change) in ONE
# interleaved run: what bench/run.sh measures of `capsule run` and what
# bench/server.sh measures of the served path, for both builds round by
# round, with after ÷ before ratios per round. The machine's speed drifts
# between runs, so two separate runs cannot be compared; ratios
# of measurements taken seconds apart can. Writes a markdown section to
# paste into docs/benchmarks.md.
#
# Usage (from anywhere):
#   bench/ab.sh BEFORE_DIR AFTER_DIR [--rounds N] [--runs N] [--throughput-runs N] [--gap MS] [--output FILE]
#
#   BEFORE_DIR, AFTER_DIR  each holds the release binaries capsule, capsule-cli
#                          and capsule-bench of one build (e.g.
#                          target/x86_64-unknown-linux-gnu/release of two checkouts,
#                          each built with `cargo build --release --workspace --bin capsule
#                          --bin capsule-cli --bin capsule-bench`)
#   --rounds N             interleaved rounds (default 10)
#   --runs N               runs per round of every latency measurement, for
#                          each build (default 200)
#   --throughput-runs N    pipelined runs per round of the throughput test (default 1000)
#   --gap MS               pause between the runs of the idle-server latency (default 5)
#   --output FILE          where to write the section (default stdout)
#
# Every round measures, for both builds:
# - one-shot `capsule run -q -- /bin/true` through the user's agent (the
#   default) and with `--no-agent` (a supervisor forked per run): one
#   `hyperfine -N` invocation over these four commands and the bare
#   /bin/true, the commands' order rotated by one every round, WARMUP runs
#   of each first (which also keep each build's agent warm);
# - the served path, timed by each build's own capsule-bench (bench/server.sh's
#   in-process driver; it links its build's library): `latency
#   --configs bare,server` for 1 client back to back, the same with
#   `--gap MS` (a run that finds the supervisor idle; skipped if either
#   capsule-bench lacks --gap), and `throughput --parallel 2`. Which build
#   goes first alternates every round.
# The kernel's floor is measured in the same run: the bare /bin/true in
# each hyperfine invocation, and capsule-bench's bare configurations
# (vfork + execve + wait4 from the same process; 2 threads for throughput),
# run by both builds' capsule-bench: the same code in both, so their after ÷
# before ratios show the noise of the run.
#
# The agents: an agent serves only callers of its identity, which includes
# the capsule binary's device, inode, size and mtime (docs/agent.md), so each
# build is staged in a directory of its own and gets its own agent; the
# script checks that their keys differ and stops both (`capsule agent stop`)
# at the end, as well as agents left by a previous run of the same staging.
#
# As root (the normal way): installs hyperfine, jq, util-linux and python3
# with apt if missing, creates the unprivileged system user capsule-bench,
# copies the binaries to a world-readable directory (/var/tmp/capsule-bench/
# ab-before and ab-after) and runs everything as that user via setpriv.
# As an unprivileged user: runs as yourself; the tools must be installed.
#
# Environment (the options above win):
#   ROUNDS, RUNS, THROUGHPUT_RUNS, GAP, OUTPUT   as the options
#   WARMUP            warm-up runs per command / configuration in each round (default 5)
#   BENCH_USER        user to benchmark as when started as root (capsule-bench)
#   BENCH_DIR         staging directory when started as root (/var/tmp/capsule-bench)
set -euo pipefail

die() { printf 'bench/ab.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds=${ROUNDS:-10}
runs=${RUNS:-200}
tput_runs=${THROUGHPUT_RUNS:-1000}
gap=${GAP:-5}
output=${OUTPUT:-}
warmup=${WARMUP:-5}
bench_user=${BENCH_USER:-capsule-bench}
dirs=()
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --runs) runs=${2:?--runs needs a value}; shift ;;
        --throughput-runs) tput_runs=${2:?--throughput-runs needs a value}; shift ;;
        --gap) gap=${2:?--gap needs a value}; shift ;;
        --output) output=${2:?--output needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) dirs+=("$1") ;;
    esac
    shift
done
((${#dirs[@]} == 2)) || die "expected BEFORE_DIR and AFTER_DIR (see --help)"
for v in rounds runs tput_runs gap; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $warmup =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer, got '$warmup'"
builds=(before after)
declare -A src
for i in 0 1; do
    b=${builds[i]}
    [[ -d ${dirs[i]} ]] || die "$b: '${dirs[i]}' is not a directory"
    src[$b]=$(cd "${dirs[i]}" && pwd)
    for f in capsule capsule-cli capsule-bench; do
        [[ -x ${src[$b]}/$f ]] || die "$b: no executable $f in ${src[$b]} (cargo build --release --workspace --bin $f)"
    done
done
[[ -z $output ]] || output=$(realpath -m "$output")

is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

# --- tools -------------------------------------------------------------------
mapfile -t missing < <(missing_of hyperfine:hyperfine jq:jq setpriv:util-linux python3:python3)
install_missing "${missing[@]}"

# --- stage and pick the user -----------------------------------------------------
stage_and_user ab-out /var/tmp/capsule-bench

# Everything below runs as the benchmark user, in the staging directory, with
# a minimal environment (the same for every command: the agents' identity
# covers HOME, PATH and XDG_RUNTIME_DIR).
as_bench() {
    (cd "$stage" && "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage" LANG=C.UTF-8 "$@")
}

# Each build in a directory of its own: its own binaries' inodes, so its own
# agent. An agent of binaries staged by an earlier run is stopped before the
# binaries are replaced (afterwards its identity would match no binary).
declare -A dir
stop_agents() {
    local b
    for b in "${builds[@]}"; do
        if [[ -x ${dir[$b]}/capsule ]]; then
            as_bench "${dir[$b]}/capsule" agent stop >/dev/null 2>&1 || log "warning: '${dir[$b]}/capsule agent stop' failed"
        fi
    done
}
for b in "${builds[@]}"; do
    dir[$b]=$stage/ab-$b
done
stop_agents
trap stop_agents EXIT
for b in "${builds[@]}"; do
    install -d -m 0755 "${dir[$b]}"
    for f in capsule capsule-cli capsule-bench; do
        install -m 0755 "${src[$b]}/$f" "${dir[$b]}/$f"
    done
done

# What each build is: its version and, when its directory is in a git
# checkout, the commit.
declare -A desc
for b in "${builds[@]}"; do
    v=$("${dir[$b]}/capsule" --version 2>/dev/null || echo capsule)
    c=$(git -C "${src[$b]}" rev-parse --short HEAD 2>/dev/null || true)
    if [[ -n $c ]]; then
        [[ -z $(git -C "${src[$b]}" status --porcelain --untracked-files=no 2>/dev/null) ]] || c="$c with uncommitted changes"
        v="$v (git $c)"
    fi
    desc[$b]=$v
done

# --- sanity: every command works for this user, the agents are apart ---------------
true_bin=/bin/true
workloads=$out/workloads.tsv
printf 'true\t%s\t%s\t%s\n' "$warmup" "$runs" "$true_bin" >"$workloads"
printf 'true\t0\t2\t%s\n' "$true_bin" >"$out/check.tsv"
chmod 0644 "$workloads" "$out/check.tsv"
use_gap=true
declare -A key
for b in "${builds[@]}"; do
    d=${dir[$b]}
    for cmd in "$d/capsule run -q -- $true_bin" "$d/capsule run -q --no-agent -- $true_bin"; do
        # shellcheck disable=SC2086  # the command lines are meant to be split into words
        err=$(as_bench $cmd 2>&1) || die "'$cmd' fails as $run_user: ${err:-no output}"
    done
    err=$(as_bench "$d/capsule-bench" latency --workloads "$out/check.tsv" --configs bare,server \
        --capsule "$d/capsule-cli" 2>&1) || die "$b: capsule-bench latency fails as $run_user: $err"
    help=$(as_bench "$d/capsule-bench" --help 2>&1) || true
    [[ $help == *--gap* ]] || use_gap=false
    key[$b]=$(as_bench "$d/capsule" agent key) || die "$b: 'capsule agent key' failed"
    status=$(as_bench "$d/capsule" agent status) || die "$b: 'capsule agent status' failed"
    grep -q "^\* .*agent-${key[$b]}\.sock" <<<"$status" ||
        die "$b: after a run, no agent of key ${key[$b]} serves this caller: $status"
done
[[ ${key[before]} != "${key[after]}" ]] || die "both builds map to the same agent (key ${key[before]})"
$use_gap || log "a capsule-bench has no --gap: no idle-server latency"

# --- measure ---------------------------------------------------------------------
# Other work on the machine shows up directly in the numbers: measure how
# busy the CPUs are for a second and say so.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r total0 idle0 < <(cpu_ticks)
sleep 1
read -r total1 idle1 < <(cpu_ticks)
busy=$(awk -v t=$((total1 - total0)) -v i=$((idle1 - idle0)) 'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }')
((busy <= 10)) || log "warning: the CPUs are ${busy}% busy with other work; the numbers will be noisy"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# hyperfine's commands, by name (the name is what its JSON reports).
hf_names=(bare before-agent after-agent before-fork after-fork)
declare -A hf_cmd=(
    [bare]="$true_bin"
    [before-agent]="${dir[before]}/capsule run -q -- $true_bin"
    [after-agent]="${dir[after]}/capsule run -q -- $true_bin"
    [before-fork]="${dir[before]}/capsule run -q --no-agent -- $true_bin"
    [after-fork]="${dir[after]}/capsule run -q --no-agent -- $true_bin"
)
for b in "${builds[@]}"; do
    : >"$out/$b-lat.jsonl"
    : >"$out/$b-gap.jsonl"
    : >"$out/$b-tput.jsonl"
done
chmod 0666 "$out"/*.jsonl

start_time=$(date +%s)
log "$rounds rounds; per round and build: $runs runs of each latency, $tput_runs of throughput (gap: $($use_gap && echo "$gap ms" || echo none))"
for ((r = 1; r <= rounds; r++)); do
    order=(before after)
    ((r % 2)) || order=(after before)
    hf_args=(-N --style none --warmup "$warmup" --runs "$runs" --export-json "$out/hf-$(printf '%03d' "$r").json")
    n=${#hf_names[@]}
    for ((k = 0; k < n; k++)); do
        c=${hf_names[(r - 1 + k) % n]}
        hf_args+=(-n "$c" "${hf_cmd[$c]}")
    done
    as_bench hyperfine "${hf_args[@]}" >&2 || die "hyperfine failed in round $r: hyperfine ${hf_args[*]}"
    for b in "${order[@]}"; do
        as_bench "${dir[$b]}/capsule-bench" latency --workloads "$workloads" --configs bare,server --first-round "$r" \
            --capsule "${dir[$b]}/capsule-cli" --raw "$out/$b-lat.jsonl" >>"$out/driver.log" ||
            die "$b: capsule-bench latency failed in round $r"
    done
    if $use_gap; then
        for b in "${order[@]}"; do
            as_bench "${dir[$b]}/capsule-bench" latency --workloads "$workloads" --configs bare,server --first-round "$r" \
                --gap "$gap" --capsule "${dir[$b]}/capsule-cli" --raw "$out/$b-gap.jsonl" >>"$out/driver.log" ||
                die "$b: capsule-bench latency --gap failed in round $r"
        done
    fi
    for b in "${order[@]}"; do
        as_bench "${dir[$b]}/capsule-bench" throughput --runs "$tput_runs" --parallel 2 --round "$r" \
            --capsule "${dir[$b]}/capsule-cli" --raw "$out/$b-tput.jsonl" >>"$out/driver.log" ||
            die "$b: capsule-bench throughput failed in round $r"
    done
    log "round $r/$rounds done after $(($(date +%s) - start_time)) s ($(jq -r \
        '[.results[] | "\(.command) \(.median * 1e6 | round / 1e3)"] | join(", ")' "$out/hf-$(printf '%03d' "$r").json") ms)"
done
elapsed=$(($(date +%s) - start_time))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
stop_agents
trap - EXIT

# --- statistics ----------------------------------------------------------------------
python3 - "$out" "$rounds" "$gap" "$use_gap" "$tput_runs" <<'PY' >"$out/table.md" || die "computing the statistics failed (raw data in $out)"
import glob, json, re, statistics as st, sys
from collections import defaultdict

out, rounds, gap, use_gap, tput_runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "true", sys.argv[5]
B = ("before", "after")

# series[(row, build)][round] = [samples]; one build "floor" for single series.
series = defaultdict(lambda: defaultdict(list))
for path in sorted(glob.glob(f"{out}/hf-*.json")):
    r = int(re.match(r".*/hf-(\d+)\.json$", path).group(1))
    for res in json.load(open(path))["results"]:
        name = res["command"]
        ms = [t * 1e3 for t in res["times"]]
        if name == "bare":
            series[("hf-bare", "floor")][r] += ms
        else:
            b, kind = name.split("-")
            series[("hf-" + kind, b)][r] += ms
for b in B:
    for kind in ("lat", "gap"):
        for line in open(f"{out}/{b}-{kind}.jsonl"):
            x = json.loads(line)
            if x["kind"] == "latency":
                series[(f"{kind}-{x['config']}", b)][x["round"]].append(x["wall_ms"])
    for line in open(f"{out}/{b}-tput.jsonl"):
        x = json.loads(line)
        if x["kind"] == "throughput":
            series[(f"tput-{x['config']}", b)][x["round"]].append(x["per_sec"])


def pooled(key):
    return [v for r in sorted(series[key]) for v in series[key][r]]


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q1, _, q3 = st.quantiles(xs, n=4, method="inclusive")
    return q1, q3


def num(x, unit):
    return f"{x:.0f}" if unit == "runs/s" else f"{x:.3f}"


rows = [  # (key, label, unit, floor key)
    ("hf-agent", "one-shot `capsule run -q -- /bin/true`, through the agent", "ms", "hf-bare"),
    ("hf-fork", "one-shot `capsule run -q --no-agent -- /bin/true`", "ms", "hf-bare"),
    ("lat-server", "served `/bin/true`, 1 client, back to back", "ms", "lat-bare"),
    ("gap-server", f"served `/bin/true`, 1 client, {gap} ms apart", "ms", "gap-bare"),
    ("tput-server", "throughput, `parallel` 2, pipelined", "runs/s", "tput-bare"),
    ("lat-bare", "control: bare vfork + execve + wait4, back to back", "ms", None),
    ("gap-bare", f"control: bare, {gap} ms apart", "ms", None),
    ("tput-bare", "control: bare, 2 threads", "runs/s", None),
]
lines = [f"| Workload | Unit | Runs of each build | Before, median | After, median | After ÷ before (medians) "
         f"| Per-round ratios: median | IQR | min … max | Floor, same run (median) |",
         "|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for key, label, unit, floor in rows:
    if not use_gap and key.startswith("gap-"):
        continue
    s = {b: series[(key, b)] for b in B}
    if not all(s.values()):
        sys.exit(f"no samples of {key} for a build")
    med = {b: st.median(pooled((key, b))) for b in B}
    common = sorted(set(s["before"]) & set(s["after"]))
    rr = [st.median(s["after"][r]) / st.median(s["before"][r]) for r in common]
    q1, q3 = quartiles(rr)
    if floor is None:
        fl = "—"
    elif floor == "hf-bare":
        fl = f"{num(st.median(pooled((floor, 'floor'))), unit)} (`/bin/true`, hyperfine)"
    else:
        fl = num(st.median(pooled((floor, "before")) + pooled((floor, "after"))), unit)
    n = len(pooled((key, "before")))
    runs = f"{n} × {tput_runs}" if unit == "runs/s" else str(n)
    lines.append(f"| {label} | {unit} | {runs} | {num(med['before'], unit)} | "
                 f"{num(med['after'], unit)} | {med['after'] / med['before']:.3f} | **{st.median(rr):.3f}** | "
                 f"{q1:.3f} … {q3:.3f} | {min(rr):.3f} … {max(rr):.3f} | {fl} |")
print("\n".join(lines))
PY

# --- report ------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
[[ -n $cpu ]] || cpu=$(uname -m)
hyperfine_version=$(hyperfine --version | head -n 1)
gap_opts='' gap_text=''
$use_gap && gap_opts=" --gap $gap" gap_text=", the same with \`--gap $gap\`"
section=$(
    echo "## A/B: ${desc[before]} → ${desc[after]}"
    echo
    echo "Generated by \`bench/ab.sh\`: both release builds measured in one run, round by"
    echo "round, so that the machine's drift hits both alike."
    echo
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Kernel: $(uname -srm); CPU: $cpu ($(nproc) CPUs online)"
    echo "- Before: ${desc[before]}, from \`${src[before]}\`"
    echo "- After: ${desc[after]}, from \`${src[after]}\`"
    echo "- As the unprivileged user \`$run_user\`, binaries in \`${dir[before]}\` and \`${dir[after]}\` (one agent each); $hyperfine_version"
    echo "- CPU busy with other work just before measuring: ${busy}%; load average $load_start at the start, $load_end at the end"
    echo "- Method: $rounds rounds; in each, one \`hyperfine -N --warmup $warmup --runs $runs\` invocation over the"
    echo "  bare \`/bin/true\` and both builds' one-shot commands (their order rotated by one every"
    echo "  round), then each build's own \`capsule-bench latency --configs bare,server\` ($runs runs"
    echo "  after $warmup warm-up runs each)$gap_text and \`capsule-bench throughput --parallel 2"
    echo "  --runs $tput_runs\`, the builds' order alternating every round. Whole run: ${elapsed} s."
    echo
    cat "$out/table.md"
    echo
    echo "After ÷ before is of the medians over all rounds; a per-round ratio is of the two"
    echo "builds' medians in one round (measured seconds apart). For throughput both are of"
    echo "runs per second, so below 1 is slower; for the rest above 1 is slower. The control"
    echo "rows run the same code in both builds' \`capsule-bench\`: their spread is this run's noise."
    echo
    echo "To reproduce: \`sudo bench/ab.sh BEFORE_DIR AFTER_DIR --rounds $rounds --runs $runs --throughput-runs $tput_runs$gap_opts\`."
)
if [[ -n $output ]]; then
    mkdir -p "$(dirname "$output")"
    tmp=$(mktemp "$output.XXXXXX")
    printf '%s\n' "$section" >"$tmp"
    chmod 0644 "$tmp"
    mv "$tmp" "$output"
    log "wrote $output (raw data: hf-*.json, *.jsonl and driver.log in $out)"
else
    log "raw data: hf-*.json, *.jsonl and driver.log in $out"
    printf '%s\n' "$section"
fi
