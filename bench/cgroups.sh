#!/usr/bin/env bash
# Per-run cost of capsule's cgroup work (create the run's cgroups, write the
# limits, read cpu.stat/memory.peak, remove everything) on a real cgroup v2
# hierarchy: `capsule run -- /bin/true` with cgroups next to the same run
# with --no-cgroups (and a bare /bin/true for scale), measured in
# interleaved hyperfine rounds inside the cgroup v2 VM, written to
# docs/benchmarks-cgroups.md.
#
# Usage (from anywhere in the repository, as root):
#   bench/cgroups.sh [RUNS]        RUNS per command, default 300
#
# Where: the development machines have a hybrid cgroup v1/v2 layout without
# v2 controllers, so capsule runs there in degraded mode. The only pure
# cgroup v2 hierarchy at hand is the QEMU VM scripts/vm/cgroup2-vm
# (software emulation, no KVM): absolute times there are inflated many times
# over, the ratio of the two capsule commands is the number that carries over.
#
# Method: the RUNS are split over ROUNDS hyperfine invocations (like
# bench/run.sh), each over all three commands with RUNS/ROUNDS runs apiece
# (rounded up), the order rotated by one every round; the cgroups ÷
# no-cgroups ratio is also taken per round and summarised by its median and
# spread. Inside the VM, as root: enable cpu, memory, pids and cpuset in
# /sys/fs/cgroup/delegated/cgroup.subtree_control, create the sibling
# cgroups bench-leaf (for the benchmark's own processes) and bench-base
# (empty, handed to capsule with --cgroup), chown both to the VM user, move
# the shell into bench-leaf, drop to the VM user with setpriv and time
#   /bin/true
#   capsule run -q --no-cgroups -- /bin/true
#   capsule run -q --require-cgroups --cgroup .../bench-base -- /bin/true
# One --meta run of each capsule command first must report `accounting:
# cgroup` resp. `accounting: rusage`, and no cgroup may be left under
# bench-base at the end; anything else aborts. The capsule binary is copied
# to the VM's tmpfs so that its exec does not go through 9p.
#
# Steps on the host: builds the release binary with `cargo build --release
# -p capsule-cli --bin capsule --bin capsule-cli` (the front end and the
# full tool it executes; the test helper capsule-probe is not needed),
# copies them to a world-readable staging directory (BENCH_DIR), writes
# the VM-side script there, runs it in
# the VM with the staging directory as the VM's shared working directory,
# and computes the statistics with python3.
#
# Environment:
#   CAPSULE_BIN       use this capsule binary instead of building one
#   CAPSULE_REV       how to describe that binary in the report (e.g. "git 1f5bae1")
#   CARGO_TARGET_DIR  honoured by the build (the binary is looked up there)
#   ROUNDS            hyperfine invocations (default 10; at most RUNS)
#   WARMUP            warm-up runs per command in each round (default 3)
#   VM                the VM script (default scripts/vm/cgroup2-vm)
#   VM_CPUS, VM_MEM   its --cpus and --mem (default 2 and 4096)
#   VM_TIMEOUT        its --timeout in seconds (default 3600)
#   BENCH_DIR         staging directory (default /var/tmp/capsule-bench-cgroups)
#   OUTPUT            report to write (default docs/benchmarks-cgroups.md in the repository)
set -euo pipefail

die() { printf 'bench/cgroups.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-${RUNS:-300}}
rounds=${ROUNDS:-10}
warmup=${WARMUP:-3}
vm=${VM:-$repo/scripts/vm/cgroup2-vm}
vm_cpus=${VM_CPUS:-2}
vm_mem=${VM_MEM:-4096}
vm_timeout=${VM_TIMEOUT:-3600}
stage=${BENCH_DIR:-/var/tmp/capsule-bench-cgroups}
output=${OUTPUT:-$repo/docs/benchmarks-cgroups.md}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$runs'"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$rounds'"
[[ $warmup =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer, got '$warmup'"
[[ $vm_cpus =~ ^[1-9][0-9]*$ ]] || die "VM_CPUS must be a positive integer, got '$vm_cpus'"
[[ $vm_mem =~ ^[1-9][0-9]*$ ]] || die "VM_MEM must be a positive integer (MB), got '$vm_mem'"
[[ $vm_timeout =~ ^[1-9][0-9]*$ ]] || die "VM_TIMEOUT must be a positive integer (s), got '$vm_timeout'"
((rounds <= runs)) || rounds=$runs
per_round=$(((runs + rounds - 1) / rounds))

[[ $(id -u) -eq 0 ]] || die "must run as root (the VM script starts QEMU and creates its user)"
[[ -x $vm ]] || die "the cgroup v2 VM script $vm is missing (set VM)"
for tool in hyperfine jq python3 setpriv; do
    # The VM sees the host's root file system, so the host's tools are the VM's.
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing; install it first (apt-get install $tool)"
done

# --- capsule binary ------------------------------------------------------------
if [[ -n ${CAPSULE_BIN:-} ]]; then
    built=$CAPSULE_BIN
    [[ -x $built ]] || die "CAPSULE_BIN=$built is not an executable"
else
    cargo=$(command -v cargo || true)
    [[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
    [[ -n $cargo ]] || die "cargo not found (or set CAPSULE_BIN to a built capsule binary)"
    log "building: cargo build --release -p capsule-cli --bin capsule --bin capsule-cli"
    # Ask cargo where it put the binary: .cargo/config.toml sets a build
    # target, which changes the path.
    built=$(cd "$repo" && "$cargo" build --release -p capsule-cli --bin capsule --bin capsule-cli --message-format=json-render-diagnostics |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "capsule"
                      and (.target.kind | index("bin")) and .executable != null) | .executable' | tail -n 1)
    [[ -n $built && -x $built ]] || die "build finished but cargo reported no capsule executable"
fi

# --- stage -----------------------------------------------------------------------
# The staging directory becomes the VM's working directory, shared
# read-write; the VM-side script runs as root there and copies its results
# to out/ (the host's ownership applies, and QEMU writes as root).
install -d -m 0755 -o root -g root "$stage"
rm -rf "$stage/out"
install -d -m 0755 "$stage/out"
install -m 0755 "$built" "$stage/capsule"
install -m 0755 "$(dirname "$built")/capsule-cli" "$stage/capsule-cli"
out=$stage/out
# The VM user's working directory inside the VM (its tmpfs).
vm_work=/tmp/capsule-bench

cat >"$stage/inner.sh" <<'INNER'
#!/bin/bash
# Written by bench/cgroups.sh; runs as root inside the cgroup v2 VM.
# usage: inner.sh RUNS_PER_ROUND ROUNDS WARMUP WORKDIR
set -euo pipefail
per_round=$1 rounds=$2 warmup=$3 work=$4
export PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
fail() { printf 'inner.sh: %s\n' "$*" >&2; exit 1; }
shared=$PWD
cg=/sys/fs/cgroup
del=$cg/delegated
[[ -d $del ]] || fail "$del is missing"
[[ $(stat -f -c %T $cg) == cgroup2fs ]] || fail "$cg is not a cgroup2 mount"
uid=$(stat -c %u $del) gid=$(stat -c %g $del)
((uid != 0)) || fail "$del is owned by root, expected the VM user"

# Everything the user runs works in /tmp (the VM's tmpfs): the binary, so
# that its exec does not go through 9p, and hyperfine's exports.
install -d -m 0755 "$work"
install -m 0755 "$shared/capsule" "$work/capsule"
install -m 0755 "$shared/capsule-cli" "$work/capsule-cli"
install -d -m 0755 -o "$uid" -g "$gid" "$work/out"
capsule="$work/capsule"

# Sibling cgroups under the delegated one: bench-leaf for hyperfine and this
# shell, bench-base (empty) for capsule.
echo "+cpu +memory +pids +cpuset" >$del/cgroup.subtree_control
base=$del/bench-base
for c in bench-leaf bench-base; do
    mkdir $del/$c
    chown "$uid:$gid" $del/$c $del/$c/cgroup.procs $del/$c/cgroup.subtree_control $del/$c/cgroup.threads
done
echo $$ >$del/bench-leaf/cgroup.procs
as_user() {
    (cd "$work" && setpriv --reuid="$uid" --regid="$gid" --init-groups \
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" LANG=C.UTF-8 "$@")
}
leftovers() { (cd $base && find . -mindepth 1 -type d | sort | tr '\n' ' '); }

{
    echo "vm_kernel=$(uname -srm)"
    echo "vm_cpus=$(nproc)"
    echo "vm_cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)"
    echo "vm_user=$(id -un "$uid" 2>/dev/null || echo "$uid") (uid $uid)"
    echo "controllers=$(cat $base/cgroup.controllers)"
    echo "hyperfine=$(hyperfine --version | head -n 1)"
} >"$shared/out/vm-info"
as_user "$capsule" check >"$shared/out/check.txt" 2>&1 || true

names=("/bin/true (bare)" "capsule run --no-cgroups" "capsule run (cgroups)")
cmds=(
    "/bin/true"
    "$capsule run -q --no-cgroups -- /bin/true"
    "$capsule run -q --require-cgroups --cgroup $base -- /bin/true"
)
for i in "${!cmds[@]}"; do
    printf '%s\t%s\n' "${names[i]}" "${cmds[i]}"
done >"$shared/out/commands"
# Sanity: one --meta run of each capsule command, the accounting it reports.
for i in 1 2; do
    want=rusage
    ((i == 2)) && want=cgroup
    meta=$work/out/check-$i.meta
    # shellcheck disable=SC2086  # the command lines are meant to be split into words
    as_user ${cmds[i]/ -q / -q --meta $meta } || fail "'${cmds[i]}' failed (exit $?)"
    got=$(sed -n 's/^accounting://p' "$meta")
    [[ $got == "$want" ]] || fail "'${cmds[i]}' reported accounting '${got:-none}', expected '$want': $(cat "$meta")"
    cp "$meta" "$shared/out/"
done
[[ -z $(leftovers) ]] || fail "cgroups left under $base after the check runs: $(leftovers)"
echo "base_subtree_control_after=$(cat $base/cgroup.subtree_control)" >>"$shared/out/vm-info"

ncmds=${#cmds[@]}
for ((r = 1; r <= rounds; r++)); do
    json=$work/out/round-$(printf '%03d' "$r").json
    hf_args=(-N --style none --warmup "$warmup" --runs "$per_round" --export-json "$json")
    for ((k = 0; k < ncmds; k++)); do
        i=$(((r - 1 + k) % ncmds))
        hf_args+=(-n "${names[i]}" "${cmds[i]}")
    done
    as_user hyperfine "${hf_args[@]}" >&2 || fail "hyperfine failed in round $r: hyperfine ${hf_args[*]}"
    cp "$json" "$shared/out/"
    printf '==> round %d/%d (ms): %s\n' "$r" "$rounds" \
        "$(jq -r '[.results[] | "\(.command) \(.mean * 1e6 | round / 1e3)"] | join(", ")' "$json")" >&2
done
[[ -z $(leftovers) ]] || fail "cgroups left under $base after the benchmark: $(leftovers)"
echo "done" >"$shared/out/complete"
INNER
chmod 0755 "$stage/inner.sh"

# --- measure -----------------------------------------------------------------------
# The VM's vCPUs are threads of one host process: whatever else runs on the
# host slows them down. Measure how busy the CPUs are for a second before,
# and how much of the host's CPU time during the run went to other work
# (busy ticks minus what the VM used, which is reaped into our children's times).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
child_ticks() { awk '{ sub(/^.*\) /, ""); print $14 + $15 }' "/proc/$$/stat"; }
read -r total0 idle0 < <(cpu_ticks)
sleep 1
read -r total1 idle1 < <(cpu_ticks)
busy=$(awk -v t=$((total1 - total0)) -v i=$((idle1 - idle0)) 'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }')
if ((busy > 10)); then
    log "warning: the host's CPUs are ${busy}% busy with other work; the VM's numbers will be noisy"
fi

log "in the VM ($vm, $vm_cpus CPUs): $rounds rounds of hyperfine -N --warmup $warmup --runs $per_round (3 commands, order rotated)"
read -r total0 idle0 < <(cpu_ticks)
kids0=$(child_ticks)
start=$(date +%s)
(cd "$stage" && "$vm" --as-root --cpus "$vm_cpus" --mem "$vm_mem" --timeout "$vm_timeout" -- \
    bash ./inner.sh "$per_round" "$rounds" "$warmup" "$vm_work") ||
    die "the benchmark in the VM failed (exit $?); partial data in $out"
elapsed=$(($(date +%s) - start))
read -r total1 idle1 < <(cpu_ticks)
kids1=$(child_ticks)
[[ -f $out/complete ]] || die "the VM exited without finishing the benchmark; partial data in $out"
other=$(awk -v t=$((total1 - total0)) -v i=$((idle1 - idle0)) -v k=$((kids1 - kids0)) \
    'BEGIN { o = t - i - k; printf "%.0f", (t > 0 && o > 0 ? 100 * o / t : 0) }')
log "VM finished after ${elapsed}s; the host's CPUs spent ${other}% of that time on other work"
if ((other > 10)); then
    log "warning: other work on the host pulls the cgroups/no-cgroups ratio towards 1; re-run on a quiet host"
fi

# --- statistics ----------------------------------------------------------------------
# Writes $out/results.md (the tables, the verdict) and $out/rounds.tsv.
# Commands are passed in the order bare, no-cgroups, cgroups.
python3 - "$out" "$rounds" "$vm_work" <<'PY' ||
import json, math, statistics as st, sys

out, rounds, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
TARGET = 1.15
per = []  # one {name: [seconds, ...]} per round, in order
for r in range(1, rounds + 1):
    path = f"{out}/round-{r:03d}.json"
    with open(path) as f:
        results = json.load(f)["results"]
    per.append({x["command"]: x["times"] for x in results})
names = ["/bin/true (bare)", "capsule run --no-cgroups", "capsule run (cgroups)"]
bare, nocg, cg = names
for r, res in enumerate(per, 1):
    if sorted(res) != sorted(names) or not all(res.values()):
        sys.exit(f"unexpected hyperfine JSON in round {r}")
times = {n: [t for res in per for t in res[n]] for n in names}  # chronological
lines = {}
with open(f"{out}/commands") as f:
    for line in f:
        name, _, cmd = line.rstrip("\n").partition("\t")
        lines[name] = cmd.replace(workdir + "/", "")


def stats(xs):
    q = max(1, len(xs) // 4)
    return {"mean": st.fmean(xs), "sd": st.stdev(xs) if len(xs) > 1 else 0.0, "med": st.median(xs),
            "lo": min(xs), "hi": max(xs), "q1": st.fmean(xs[:q]), "q4": st.fmean(xs[-q:])}


def ms(x):
    return f"{x * 1000:.1f}"


def ratio(a, b):  # of the means, with σ propagated from both
    r = a["mean"] / b["mean"]
    return f"{r:.2f} ± {r * math.hypot(a['sd'] / a['mean'], b['sd'] / b['mean']):.2f}"


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q1, _, q3 = st.quantiles(xs, n=4, method="inclusive")
    return q1, q3


S = {n: stats(times[n]) for n in names}
md = ["| Command | Mean ± σ (ms) | Median (ms) | Min … Max (ms) | First ¼ → last ¼ (ms) | × bare `/bin/true` |",
      "|:---|---:|---:|---:|---:|---:|"]
for n in names:
    s = S[n]
    md.append(f"| `{lines[n]}` | {ms(s['mean'])} ± {ms(s['sd'])} | {ms(s['med'])} | {ms(s['lo'])} … {ms(s['hi'])} | "
              f"{ms(s['q1'])} → {ms(s['q4'])} | {'1.00' if n == bare else ratio(s, S[bare])} |")

rr = [st.fmean(res[cg]) / st.fmean(res[nocg]) for res in per]
dd = [st.fmean(res[cg]) - st.fmean(res[nocg]) for res in per]
q1, q3 = quartiles(rr)
med_r = st.median(rr)
md += ["", f"| Ratio (of mean run times) | Median of the {rounds} per-round ratios | Per-round IQR | Per-round min … max "
       "| All runs: means (± σ) | All runs: medians |", "|:---|---:|---:|---:|---:|---:|",
       f"| cgroups ÷ `--no-cgroups` | **{med_r:.2f}** | {q1:.2f} … {q3:.2f} | {min(rr):.2f} … {max(rr):.2f} | "
       f"{ratio(S[cg], S[nocg])} | {S[cg]['med'] / S[nocg]['med']:.2f} |"]

d_mean = S[cg]["mean"] - S[nocg]["mean"]
d_se = math.sqrt(S[cg]["sd"] ** 2 / len(times[cg]) + S[nocg]["sd"] ** 2 / len(times[nocg]))
dq1, dq3 = quartiles(dd)
md += ["", "| Cost of the cgroup work per run, in the VM | ms |", "|:---|---:|",
       f"| Difference of the means (± standard error) | **{ms(d_mean)} ± {ms(d_se)}** |",
       f"| Difference of the medians | {ms(S[cg]['med'] - S[nocg]['med'])} |",
       f"| Median of the {rounds} per-round differences (IQR) | {ms(st.median(dd))} ({ms(dq1)} … {ms(dq3)}) |",
       f"| For scale: `capsule run --no-cgroups` over bare `/bin/true` (means) | {ms(S[nocg]['mean'] - S[bare]['mean'])} |"]

pct = 100 * (med_r - 1)
if med_r <= TARGET and q3 <= TARGET:
    verdict = (f"**Target met**: the cgroup work adds {pct:.0f} % (median per-round ratio {med_r:.2f}; "
               f"IQR {q1:.2f} … {q3:.2f}) to a `/bin/true` run, within the 15 % budget.")
elif med_r <= TARGET:
    verdict = (f"**Target met by the median, not clearly**: the cgroup work adds {pct:.0f} % (median per-round "
               f"ratio {med_r:.2f}), but the per-round IQR {q1:.2f} … {q3:.2f} reaches past 1.15.")
elif q1 <= TARGET:
    verdict = (f"**Target missed by the median, not clearly**: the cgroup work adds {pct:.0f} % (median per-round "
               f"ratio {med_r:.2f}), the per-round IQR {q1:.2f} … {q3:.2f} reaches below 1.15.")
else:
    verdict = (f"**Target missed**: the cgroup work adds {pct:.0f} % (median per-round ratio {med_r:.2f}; "
               f"IQR {q1:.2f} … {q3:.2f}) to a `/bin/true` run, more than the 15 % budget.")
with open(f"{out}/results.md", "w") as f:
    f.write("\n".join(md) + "\n")
with open(f"{out}/verdict.md", "w") as f:
    f.write(verdict + "\n")
with open(f"{out}/rounds.tsv", "w") as f:
    f.write("round\tfirst\t" + "\t".join(f"{n} mean (ms)" for n in names) + "\tcgroups/no-cgroups\tdifference (ms)\n")
    for r, res in enumerate(per):
        f.write(f"{r + 1}\t{next(iter(res))}\t" + "\t".join(f"{st.fmean(res[n]) * 1000:.3f}" for n in names)
                + f"\t{rr[r]:.4f}\t{dd[r] * 1000:.3f}\n")
PY
    die "computing the statistics failed (raw data in $out)"

# --- report ------------------------------------------------------------------------
if [[ -n ${CAPSULE_BIN:-} ]]; then
    commit=${CAPSULE_REV:-binary given as CAPSULE_BIN}
else
    commit=git\ $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
    # Only changes that go into the capsule binary count (not tests, the
    # test support crate, benchmarks or documentation).
    if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no -- Cargo.toml Cargo.lock .cargo crates \
        ':!crates/*/tests/*' ':!crates/capsule-testkit' 2>/dev/null) ]]; then
        commit="$commit with uncommitted changes"
    fi
fi
info() { sed -n "s/^$1=//p" "$out/vm-info" | head -n 1; }
capsule_version=$("$stage/capsule" --version 2>/dev/null || echo capsule)
check_summary=$(tail -n 1 "$out/check.txt" | sed 's/^=> //')
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
qemu_version=$(qemu-system-x86_64 --version 2>/dev/null | head -n 1 || echo QEMU)
base_after=$(info base_subtree_control_after)

mkdir -p "$(dirname "$output")"
tmp=$(mktemp "$output.XXXXXX")
{
    echo "# Benchmarks: the cost of cgroups per run"
    echo
    echo "What the cgroup work adds to a one-shot \`capsule run -q -- /bin/true\`: the"
    echo "same run with cgroups (create the run's cgroups, write the limits, start the"
    echo "program in them, read \`cpu.stat\`/\`memory.peak\`, remove everything) and with"
    echo "\`--no-cgroups\` (no cgroup work at all, rusage accounting), on a pure"
    echo "cgroup v2 hierarchy. Target: at most 15 % on top of the run (go-sandbox"
    echo "measured 245 µs for cgroup create + destroy, a third of a bare process start)."
    echo "Generated by \`bench/cgroups.sh\`; do not edit by hand."
    echo
    echo "**Where: a software-emulated VM.** The development machine's cgroups are"
    echo "hybrid (v1 controllers), so capsule runs there without cgroups. The only"
    echo "real cgroup v2 hierarchy at hand is \`cgroup2-vm\`: QEMU with TCG (no KVM),"
    echo "where every instruction is translated and every system call, page fault and"
    echo "exec is many times slower than on hardware. **Absolute times below are"
    echo "inflated accordingly and say nothing about a real machine; the ratio of the"
    echo "two capsule runs, measured side by side, is the number that carries over.**"
    echo
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Host: $(uname -srm), ${cpu:-$(uname -m)} ($(nproc) CPUs online)"
    echo "- VM: \`$vm\`, $qemu_version, TCG software emulation, $(info vm_cpus) vCPUs, ${vm_mem} MB;"
    echo "  kernel $(info vm_kernel); cgroup2 controllers of the base: \`$(info controllers)\`"
    echo "- capsule: $capsule_version ($commit), release build, statically linked"
    echo "- Tools: $(info hyperfine)"
    echo "- Method: $rounds rounds, each one \`hyperfine -N --warmup $warmup --runs $per_round\` invocation"
    echo "  over all three commands, their order rotated by one every round"
    echo "  ($((rounds * per_round)) runs per command in all), as the VM user $(info vm_user);"
    echo "  binary copied to the VM's tmpfs (\`$vm_work\`) so its exec does not go through 9p"
    echo "- cgroups: as root in the VM, \`+cpu +memory +pids +cpuset\` enabled in"
    echo "  \`/sys/fs/cgroup/delegated\`, under it \`bench-leaf\` (holding hyperfine) and"
    echo "  \`bench-base\` (empty, passed with \`--cgroup\`), both chowned to the VM user."
    echo "  \`--require-cgroups\` makes any run that would fall back to degraded mode fail."
    echo "  One \`--meta\` run of each capsule command reported \`accounting: cgroup\` resp."
    echo "  \`accounting: rusage\`, and no cgroup was left under \`bench-base\` afterwards"
    echo "  (its \`cgroup.subtree_control\` after the runs: \`${base_after:-empty}\`)."
    echo "- \`capsule check\` in the VM: $check_summary"
    echo "- Host CPUs busy with other work: ${busy}% just before, ${other}% during the ${elapsed} s"
    echo "  in the VM (the vCPUs are host threads: other work on the host slows them down)"
    echo
    if ((other > 10)); then
        echo "**Warning: the host spent ${other}% of its CPU time on other work during the"
        echo "measurement.** Contention delays every process hand-over between the VM's"
        echo "vCPUs, by about as much in both capsule runs, which inflates the absolute times"
        echo "and pulls the ratio towards 1. Re-run on a quiet host before relying on it."
        echo
    fi
    cat "$out/results.md"
    echo
    cat "$out/verdict.md"
    echo
    echo "What the cgroup run does here, every invocation (the one-shot \`capsule run\`"
    echo "is its own supervisor; \`crates/capsule/src/host/cgroups.rs\` has the details): as"
    echo "\`bench-base\` has no controllers enabled for its children, create"
    echo "\`bench-base/capsule-leaf\` (for the processes of \`bench-base\`, none here) and"
    echo "enable the controllers in \`bench-base\`; create the run's cgroup and the"
    echo "program's below it and write the limits; start the program in its cgroup;"
    echo "after it, read the accounting (\`cpu.stat\`, \`memory.peak\`, \`pids.peak\`,"
    echo "\`memory.events\`), kill what is left, remove the cgroups, disable the"
    echo "controllers in \`bench-base\` again and remove the leaf. A supervisor that"
    echo "serves many runs pays the set-up and restore of \`bench-base\` once."
    echo
    echo "Statistics are over all runs of all rounds. The per-round ratios compare"
    echo "commands measured seconds apart, so load that drifts during the measurement"
    echo "largely cancels out of them; the ratios of all runs carry σ propagated from"
    echo "both means. A large change from the first to the last quarter of a command's"
    echo "runs, or a large share of host CPU busy with other work, means the numbers"
    echo "are noisy; re-run on a quiet host before comparing. The \`--no-cgroups\` run"
    echo "also does less accounting work (one \`wait4\` rusage instead of the cgroup"
    echo "files), which is part of what is compared."
    echo
    echo "To reproduce: \`sudo env ROUNDS=$rounds WARMUP=$warmup bench/cgroups.sh $runs\`"
    echo "from the repository root (see the header of the script; needs the VM script"
    echo "\`$vm\` and its packages qemu-system-x86, linux-image-amd64, busybox-static)."
    echo "On a machine with a delegated cgroup v2 subtree of its own, the absolute cost"
    echo "is the difference of \`capsule run -q --cgroup SUBTREE -- /bin/true\` and"
    echo "\`capsule run -q --no-cgroups -- /bin/true\` under \`hyperfine -N\`."
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$output"
log "wrote $output (raw data: hyperfine exports, rounds.tsv, check output in $out)"
cat "$output"
