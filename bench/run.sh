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
#   WALL_RUNS         runs that measure the wall-time limit's overshoot (default 50)
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
install -m 0755 "$(dirname "$built")/capsule-cli" "$stage/capsule-cli"
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

# ROUNDS hyperfine invocations over all commands, the order rotated by one
# every round (each command goes first, second, ... equally often when ROUNDS
# is a multiple of the number of commands). Every round's runs are in
# $out/round-NNN.json; the memfd copies of all rounds in $out/memfd.tsv.
ncmds=${#cmds[@]}
log "$rounds rounds of: hyperfine -N --warmup $warmup --runs $per_round (all $ncmds commands, order rotated), then $memfd_per_round memfd copies"
: >"$out/memfd.tsv"
for ((r = 1; r <= rounds; r++)); do
    json=$out/round-$(printf '%03d' "$r").json
    hf_args=(-N --style none --warmup "$warmup" --runs "$per_round" --export-json "$json")
    for ((k = 0; k < ncmds; k++)); do
        i=$(((r - 1 + k) % ncmds))
        hf_args+=(-n "${names[i]}" "${cmds[i]}")
    done
    as_bench hyperfine "${hf_args[@]}" >&2 || die "hyperfine failed in round $r: hyperfine ${hf_args[*]}"
    as_bench "$memfd_copy" "$capsule" "$memfd_per_round" 2 >>"$out/memfd.tsv" ||
        die "bench/memfd_copy failed in round $r"
    log "round $r/$rounds (ms): $(jq -r '[.results[] | "\(.command) \(.mean * 1e6 | round / 1e3)"] | join(", ")' "$json"), memfd copy $(
        tail -n "$memfd_per_round" "$out/memfd.tsv" | awk '{ s += $1 } END { printf "%.3f", s / NR / 1e6 }')"
done

# --- wall-time limit overshoot ---------------------------------------------------------
# WALL_RUNS runs of a program that outlives a 100 ms wall-time limit; capsule's
# wall_time_ms (from the program's execve to the death of its first process)
# minus the limit is how late the kill came.
wall_runs=${WALL_RUNS:-50}
[[ $wall_runs =~ ^[1-9][0-9]*$ ]] || die "WALL_RUNS must be a positive integer, got '$wall_runs'"
log "$wall_runs runs of: capsule run --wall-time 100ms -- /bin/sleep 10"
: >"$out/walltime.tsv"
for ((i = 1; i <= wall_runs; i++)); do
    rm -f "$out/wall.meta"
    as_bench "$capsule" run -q --wall-time 100ms --meta "$out/wall.meta" -- /bin/sleep 10 && die "the wall-time run exited 0"
    grep -q '^status:wall-time-limit$' "$out/wall.meta" || die "the wall-time run did not end at its limit: $(cat "$out/wall.meta")"
    sed -n 's/^wall_time_ms://p' "$out/wall.meta" >>"$out/walltime.tsv"
done
python3 - "$out" <<'PY' || die "wall-time statistics failed"
import statistics as st, sys
out = sys.argv[1]
late = sorted(float(x) - 100.0 for x in open(f"{out}/walltime.tsv") if x.strip())
p95 = late[min(len(late) - 1, int(round(0.95 * (len(late) - 1))))]
with open(f"{out}/walltime.md", "w") as f:
    f.write("\n".join([
        "## Wall-time limit overshoot",
        "",
        f"{len(late)} runs of `capsule run --wall-time 100ms -- /bin/sleep 10`: the reported",
        "`wall_time_ms` (from the program's `execve` to the death of its first process)",
        "minus the 100 ms limit. The limit is a timerfd armed at the program's `execve`;",
        "when it fires, PID 1 kills every process of the run and reaps the first.",
        "",
        "| Overshoot (ms) | Mean | Median | 95th percentile | Max |",
        "|:---|---:|---:|---:|---:|",
        f"| past the limit | {st.mean(late):.3f} | {st.median(late):.3f} | {p95:.3f} | {late[-1]:.3f} |",
        "",
    ]))
PY

# --- statistics ----------------------------------------------------------------------
# Writes $out/results.md (the tables), $out/memfd.md (the memfd section) and
# $out/rounds.tsv (per-round means and ratios). Commands are passed in the
# order bare, capsule, bwrap, unshare.
python3 - "$out" "$rounds" "$stage/" "$capsule_size" "$run_user" "${names[@]}" "${cmds[@]}" <<'PY' ||
import json, math, statistics as st, sys

out, rounds, stage, size, user = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
rest = sys.argv[6:]
names, cmds = rest[:len(rest) // 2], rest[len(rest) // 2:]
bare, cap, bw, us = names

per = []  # one {name: [seconds, ...]} per round, in order
for r in range(1, rounds + 1):
    path = f"{out}/round-{r:03d}.json"
    with open(path) as f:
        res = {x["command"]: x["times"] for x in json.load(f)["results"]}
    if sorted(res) != sorted(names) or not all(res.values()):
        sys.exit(f"unexpected hyperfine JSON in {path}")
    per.append(res)
times = {n: [t for res in per for t in res[n]] for n in names}  # chronological


def stats(xs):
    q = max(1, len(xs) // 4)
    return {"mean": st.fmean(xs), "sd": st.stdev(xs) if len(xs) > 1 else 0.0, "med": st.median(xs),
            "lo": min(xs), "hi": max(xs), "q1": st.fmean(xs[:q]), "q4": st.fmean(xs[-q:])}


def ms(x):
    return f"{x * 1000:.3f}"


def ratio(a, b):  # of the means, with σ propagated from both
    r = a["mean"] / b["mean"]
    return f"{r:.2f} ± {r * math.hypot(a['sd'] / a['mean'], b['sd'] / b['mean']):.2f}"


def round_ratios(a, b):
    return [st.fmean(res[a]) / st.fmean(res[b]) for res in per]


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q1, _, q3 = st.quantiles(xs, n=4, method="inclusive")
    return q1, q3


S = {n: stats(times[n]) for n in names}
lines = ["| Command | Mean ± σ (ms) | Median (ms) | Min … Max (ms) | First ¼ → last ¼ (ms) | × bare `/bin/true` |",
         "|:---|---:|---:|---:|---:|---:|"]
for n, c in zip(names, cmds):
    s = S[n]
    lines.append(f"| `{c.replace(stage, '')}` | {ms(s['mean'])} ± {ms(s['sd'])} | {ms(s['med'])} | "
                 f"{ms(s['lo'])} … {ms(s['hi'])} | {ms(s['q1'])} → {ms(s['q4'])} | "
                 f"{'1.00' if n == bare else ratio(s, S[bare])} |")
lines += ["", f"| Ratio (of mean run times) | Median of the {rounds} per-round ratios | Per-round IQR | Per-round min … max "
          "| All runs: means (± σ) | All runs: medians |", "|:---|---:|---:|---:|---:|---:|"]
rows = []
for label, a, b in (("capsule ÷ bwrap", cap, bw), ("capsule ÷ unshare", cap, us)):
    rr = round_ratios(a, b)
    rows.append(rr)
    q1, q3 = quartiles(rr)
    lines.append(f"| {label} | **{st.median(rr):.2f}** | {q1:.2f} … {q3:.2f} | {min(rr):.2f} … {max(rr):.2f} | "
                 f"{ratio(S[a], S[b])} | {S[a]['med'] / S[b]['med']:.2f} |")
lines += ["", "Overhead over the bare process (mean difference): "
          f"capsule {ms(S[cap]['mean'] - S[bare]['mean'])} ms, bwrap {ms(S[bw]['mean'] - S[bare]['mean'])} ms, "
          f"unshare {ms(S[us]['mean'] - S[bare]['mean'])} ms."]
with open(f"{out}/results.md", "w") as f:
    f.write("\n".join(lines) + "\n")

with open(f"{out}/rounds.tsv", "w") as f:
    f.write("round\tfirst\t" + "\t".join(f"{n} mean (ms)" for n in names) + "\tcapsule/bwrap\tcapsule/unshare\n")
    for r, res in enumerate(per):
        f.write(f"{r + 1}\t{next(iter(res))}\t" + "\t".join(ms(st.fmean(res[n])) for n in names)
                + f"\t{rows[0][r]:.4f}\t{rows[1][r]:.4f}\n")

# The memfd copy: one "<copy ns>\t<free ns>" line per iteration.
with open(f"{out}/memfd.tsv") as f:
    pairs = [tuple(int(v) / 1e9 for v in line.split("\t")) for line in f if line.strip()]
if not pairs or any(len(p) != 2 for p in pairs):
    sys.exit(f"unexpected output of memfd_copy in {out}/memfd.tsv")
copy = stats([p[0] for p in pairs])
free = stats([p[1] for p in pairs])
both = stats([p[0] + p[1] for p in pairs])
run = S[cap]["mean"]
overhead = S[cap]["mean"] - S[bare]["mean"]
lines = [
    "## Why PID 1 is non-dumpable instead of a memfd copy of the binary",
    "",
    "CVE-2019-5736: a sandboxed program that can open the runtime's binary through",
    "`/proc/<pid>/exe` can overwrite it on the host. runc's defence copies its binary",
    "into a sealed memfd at every start and re-executes itself from the copy.",
    "capsule instead makes PID 1, the only capsule process the program can see,",
    "non-dumpable with one `prctl(PR_SET_DUMPABLE, 0)`, so its `/proc/1/exe` cannot",
    "be opened from inside at all. What the copy would cost every `capsule run`,",
    f"timed by `bench/memfd_copy.c` (`cc -O2`; {len(pairs)} iterations spread over the {rounds} rounds,",
    f"as `{user}`): open the capsule release binary ({size / 2**20:.1f} MiB, {size} bytes),",
    "`memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING)` (plus `MFD_EXEC` on Linux 6.3",
    "and later), `sendfile` the whole binary into it, `fcntl(F_ADD_SEALS,",
    "F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)`; then, timed",
    "separately, `close` the memfd, which frees the copy.",
    "",
    "| Per run | Mean ± σ (ms) | Median (ms) | Min … Max (ms) | ÷ mean `capsule run` |",
    "|:---|---:|---:|---:|---:|",
]
for label, s in (("Create, copy, seal", copy), ("Close (free the copy)", free), ("Together", both)):
    lines.append(f"| {label} | {ms(s['mean'])} ± {ms(s['sd'])} | {ms(s['med'])} | {ms(s['lo'])} … {ms(s['hi'])} | "
                 f"{100 * s['mean'] / run:.1f} % |")
lines += [
    "",
    f"Creating the sealed copy alone would add **{ms(copy['mean'])} ms** to every run:",
    f"**{100 * copy['mean'] / run:.0f} %** of capsule's mean run time of {ms(run)} ms and "
    f"{100 * copy['mean'] / overhead:.0f} % of its",
    f"{ms(overhead)} ms overhead over the bare process; with freeing it, {ms(both['mean'])} ms.",
    "That is a lower bound: the re-execution from the copy comes on top, and every",
    f"live copy holds another {size / 2**20:.1f} MiB of memory for as long as a process runs",
    "from it, where the installed binary's pages are shared by all runs.",
]
with open(f"{out}/memfd.md", "w") as f:
    f.write("\n".join(lines) + "\n")
PY
    die "computing the statistics failed (raw data in $out)"

# --- report ------------------------------------------------------------------------
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
cc_version=$("$cc" --version 2>/dev/null | head -n 1)

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
    echo "- Tools: $bwrap_version; $unshare_version; $hyperfine_version; ${cc_version:-$cc}"
    echo "- Method: $rounds rounds, each one \`hyperfine -N --warmup $warmup --runs $per_round\` invocation"
    echo "  over all four commands, their order rotated by one every round"
    echo "  ($((rounds * per_round)) runs per command in all), as the unprivileged user"
    echo "  \`$run_user\`, binary copied to \`$stage\`"
    echo "- CPU busy with other work just before measuring: ${busy}%"
    echo "- \`capsule check\` on this machine: $check_summary"
    echo
    cat "$out/results.md"
    echo
    echo "Statistics are over all runs of all rounds. The per-round ratios compare"
    echo "commands measured seconds apart, so load that drifts during the measurement"
    echo "largely cancels out of them; the ratios of all runs carry σ propagated from"
    echo "both means. A large change from the first to the last quarter of a command's"
    echo "runs means the load on the machine changed during the measurement; re-run on"
    echo "a quiet machine before comparing. \`capsule run -q\` includes its full run"
    echo "(sandbox setup, accounting, result reporting); the bwrap and unshare lines"
    echo "create the namespaces and mounts only."
    echo
    cat "$out/memfd.md"
    echo
    cat "$out/walltime.md"
    echo
    echo "## The cost of cgroups"
    echo
    echo "What the cgroup work (a fresh cgroup per run, limits, accounting, removal)"
    echo "adds to a run is measured inside the cgroup v2 VM by \`bench/cgroups.sh\`,"
    echo "in [docs/benchmarks-cgroups.md](benchmarks-cgroups.md): this machine's"
    echo "cgroups are hybrid, so the runs above use none (\`accounting: rusage\`)."
    echo
    echo "## The long-lived supervisor"
    echo
    echo "Runs of a long-lived supervisor (the library API, \`capsule serve\`) for five"
    echo "workloads next to the bare process, bwrap, unshare and one-shot \`capsule run\`,"
    echo "their throughput, the supervisor's memory over many runs and the targets of"
    echo "issue 4 are measured by \`bench/server.sh\`, in"
    echo "[docs/benchmarks-server.md](benchmarks-server.md)."
    echo
    echo "## Seccomp"
    echo
    echo "What the seccomp policies cost inside the sandbox (3M \`getppid\` calls and"
    echo "\`g++ -O2\` of a 1000-line file under \`none\`, an allow-all filter, \`default\`,"
    echo "\`strict\`/\`compile\`) is measured by \`bench/seccomp.sh\`, in"
    echo "[docs/benchmarks-seccomp.md](benchmarks-seccomp.md)."
    echo
    echo "## Layers"
    echo
    echo "What a copy-on-write layer costs (untar of a 4,000-file tarball and \`make -j2\`"
    echo "of a 40-module C project, bare, in \`capsule run --bind\`, in \`--layer\` with kernel"
    echo "overlayfs and in \`--root --layer\` with fuse-overlayfs) is measured by"
    echo "\`bench/layer.sh\`, in [docs/benchmarks-layer.md](benchmarks-layer.md)."
    echo
    echo "To reproduce: \`sudo env ROUNDS=$rounds WARMUP=$warmup MEMFD_ITERS=$memfd_iters bench/run.sh $runs\`"
    echo "from the repository root (see the header of the script)."
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$output"
log "wrote $output (raw data: hyperfine exports, memfd.tsv and rounds.tsv in $out)"
cat "$output"
