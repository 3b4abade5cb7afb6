#!/usr/bin/env bash
# The benchmark of issue 4 (the long-lived supervisor): the server path and
# whole sandboxing commands next to the bare process, for five workloads,
# all in one interleaved run as an unprivileged user; written to
# docs/benchmarks-server.md.
#
# Usage (from anywhere in the repository):
#   bench/server.sh [--quick] [--rounds N] [--mem-runs N] [--throughput-runs N] [--output FILE]
#
#   --quick              a few runs of everything (checks the set-up, ~1 minute)
#   --rounds N           interleaved rounds (default 10)
#   --mem-runs N         runs of the supervisor memory check (default 100000)
#   --throughput-runs N  pipelined runs per round of the throughput test (default 2000)
#   --output FILE        report to write (default docs/benchmarks-server.md)
#
# Workloads: dynamic /bin/true; a static no-op (bench/noop.c, cc -static -O2);
# `gcc -O2 -o /tmp/... bench/hello.c`; 3M getppid calls (bench/getppid.c,
# cc -O2); a fixed ~1 s of CPU work (bench/cpuloop.c, cc -O2, its iteration
# count calibrated to 1 s of CPU time on this machine before measuring).
#
# Configurations:
# - in-process, timed by target/.../capsule-bench (crates/capsule-testkit/
#   bench/capsule-bench.rs) from one process: bare (vfork + execve + wait4), the
#   capsule server through the library API with 1 client (a sandbox with
#   parallel 1), and both again with 2 concurrent clients (2 threads; the
#   server on one sandbox with parallel 2);
# - whole commands, timed by hyperfine -N: the bare program, `capsule run -q
#   -- X` (one-shot, served by the user's agent, which the warm-up runs
#   start), `capsule run -q --no-agent -- X` (one-shot with a supervisor
#   forked for the run), `bwrap --ro-bind / / X`, `bwrap --unshare-all
#   --die-with-parent --ro-bind / / X` and `unshare -Urmnpif --mount-proc X`
#   (for gcc both bwrap commands also get `--tmpfs /tmp`: gcc needs a
#   writable /tmp, which capsule's host view has and `--ro-bind / /` has not).
#
# Every round runs, workload by workload, one capsule-bench invocation over
# the in-process configurations and one hyperfine invocation over the whole
# commands (which of the two goes first alternates), each with its share of
# the workload's runs and its configurations' order rotated by one every
# round; then one throughput measurement (pipelined /bin/true on a sandbox
# with parallel 2, and bare /bin/true from 2 threads). After the rounds,
# the supervisor's memory check: MEM_RUNS pipelined /bin/true runs with
# parallel 2, its VmRSS, VmHWM, threads, fds, mounts and children read from
# /proc every tenth of the way.
#
# As root (the normal way): builds capsule, capsule-cli and capsule-bench
# with `cargo build --release`, installs hyperfine, bubblewrap, util-linux,
# gcc (and libc6-dev), jq and python3 with apt if missing, creates the
# unprivileged system user capsule-bench, stages the binaries and workloads
# in a world-readable directory (/var/tmp/capsule-bench) and runs everything
# as that user via setpriv. As an unprivileged user: builds with cargo and runs as yourself;
# the tools must be installed.
#
# Environment (the options above win):
#   ROUNDS, MEM_RUNS, THROUGHPUT_RUNS, OUTPUT   as the options
#   TRUE_RUNS, STATIC_RUNS (default 1000), GCC_RUNS (100), GETPPID_RUNS (20),
#   CPU_RUNS (10)     runs per configuration of each workload, over all rounds
#   BENCH_USER        user to benchmark as when started as root (capsule-bench)
#   BENCH_DIR         staging directory when started as root (/var/tmp/capsule-bench)
#   CARGO_TARGET_DIR  honoured by the build
#   CC                C compiler for the workloads (default cc)
set -euo pipefail

die() { printf 'bench/server.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"
quick=false
rounds=${ROUNDS:-}
mem_runs=${MEM_RUNS:-}
tput_runs=${THROUGHPUT_RUNS:-}
output=${OUTPUT:-$repo/docs/benchmarks-server.md}
while (($#)); do
    case $1 in
        --quick) quick=true ;;
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --mem-runs) mem_runs=${2:?--mem-runs needs a value}; shift ;;
        --throughput-runs) tput_runs=${2:?--throughput-runs needs a value}; shift ;;
        --output) output=${2:?--output needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
if $quick; then
    rounds=${rounds:-2} mem_runs=${mem_runs:-2000} tput_runs=${tput_runs:-500}
    : "${TRUE_RUNS:=40}" "${STATIC_RUNS:=40}" "${GCC_RUNS:=4}" "${GETPPID_RUNS:=2}" "${CPU_RUNS:=2}"
fi
rounds=${rounds:-10}
mem_runs=${mem_runs:-100000}
tput_runs=${tput_runs:-2000}
cc=${CC:-cc}
bench_user=${BENCH_USER:-capsule-bench}
for v in rounds mem_runs tput_runs; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done

is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

# --- tools -------------------------------------------------------------------
mapfile -t missing < <(missing_of hyperfine:hyperfine bwrap:bubblewrap jq:jq setpriv:util-linux unshare:util-linux \
    python3:python3 "$cc":gcc gcc:gcc)
# The static no-op needs the static C library.
[[ -e /usr/lib/x86_64-linux-gnu/libc.a || -e /usr/lib64/libc.a || -e /usr/lib/libc.a ]] || missing+=(libc6-dev)
install_missing "${missing[@]}"
bwrap_bin=$(command -v bwrap)
unshare_bin=$(command -v unshare)
gcc_bin=$(command -v gcc)

# --- build -------------------------------------------------------------------
build_release

# --- stage and pick the user -----------------------------------------------------
stage_and_user server-out /var/tmp/capsule-bench
install_binaries
capsule=$stage/capsule
# The library starts its supervisor from the full tool (the front end would
# only execute it).
capsule_cli=$stage/capsule-cli
bench=$stage/capsule-bench
log "compiling the workloads: $cc -static -O2 bench/noop.c; $cc -O2 bench/getppid.c bench/cpuloop.c"
"$cc" -static -O2 -Wall -o "$stage/noop" "$repo/bench/noop.c" || die "$cc -static failed on bench/noop.c"
"$cc" -O2 -Wall -o "$stage/getppid" "$repo/bench/getppid.c" || die "$cc failed on bench/getppid.c"
"$cc" -O2 -Wall -o "$stage/nsfloor" "$repo/bench/nsfloor.c" || die "$cc failed on bench/nsfloor.c"
chmod 0755 "$stage/nsfloor"
"$cc" -O2 -Wall -o "$stage/cpuloop" "$repo/bench/cpuloop.c" || die "$cc failed on bench/cpuloop.c"
install -m 0644 "$repo/bench/hello.c" "$stage/hello.c"
chmod 0755 "$stage/noop" "$stage/getppid" "$stage/cpuloop"

# Everything below runs as the benchmark user, in the staging directory, with
# a minimal environment.
as_bench() {
    (cd "$stage" && "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage" LANG=C.UTF-8 "$@")
}

# gcc's output in the host's /tmp for the bare and unshare commands (removed
# at the end); the sandboxes have their own /tmp.
hello_out=/tmp/capsule-bench-hello
rm -f "$hello_out" "$hello_out"0 "$hello_out"1
trap 'rm -f "$hello_out" "$hello_out"0 "$hello_out"1' EXIT

log "calibrating bench/cpuloop.c to 1 s of CPU time"
cpu_iters=$(as_bench "$stage/cpuloop" --calibrate) || die "cpuloop --calibrate failed"

# --- workloads and commands ------------------------------------------------------
# name, label, total runs per configuration, warm-up runs per round, argv.
# `{t}` in the argv is the in-process client's number (the two concurrent
# bare gcc runs must not write the same file); hyperfine gets it empty.
wl_names=(true static gcc getppid cpu)
declare -A wl_label wl_total wl_warm wl_argv
wl_label=([true]="dynamic \`/bin/true\`" [static]="static no-op (\`cc -static -O2\`)"
    [gcc]="\`gcc -O2 hello.c\`" [getppid]="3M \`getppid\` calls" [cpu]="1 s CPU loop")
wl_total=([true]=${TRUE_RUNS:-1000} [static]=${STATIC_RUNS:-1000} [gcc]=${GCC_RUNS:-100}
    [getppid]=${GETPPID_RUNS:-20} [cpu]=${CPU_RUNS:-10})
wl_warm=([true]=5 [static]=5 [gcc]=1 [getppid]=0 [cpu]=0)
wl_argv=([true]=/bin/true [static]=$stage/noop [gcc]="$gcc_bin -O2 -o $hello_out{t} $stage/hello.c"
    [getppid]=$stage/getppid [cpu]="$stage/cpuloop $cpu_iters")
workloads=$out/workloads.tsv
: >"$workloads"
declare -A wl_per
for w in "${wl_names[@]}"; do
    [[ ${wl_total[$w]} =~ ^[1-9][0-9]*$ ]] || die "the run count of $w must be a positive integer"
    wl_per[$w]=$(((wl_total[$w] + rounds - 1) / rounds))
    printf '%s\t%s\t%s\t%s\n' "$w" "${wl_warm[$w]}" "${wl_per[$w]}" "${wl_argv[$w]}" >>"$workloads"
done
chmod 0644 "$workloads"

hf_configs=(bare capsule-run capsule-fork bwrap bwrap-all unshare)
# The whole command of configuration $1 for workload $2.
command_of() {
    local x=${wl_argv[$2]//\{t\}/} tmp=
    [[ $2 == gcc ]] && tmp="--tmpfs /tmp "
    case $1 in
        bare) printf '%s' "$x" ;;
        capsule-run) printf '%s' "$capsule run -q -- $x" ;;
        capsule-fork) printf '%s' "$capsule run -q --no-agent -- $x" ;;
        bwrap) printf '%s' "$bwrap_bin --ro-bind / / $tmp$x" ;;
        bwrap-all) printf '%s' "$bwrap_bin --unshare-all --die-with-parent --ro-bind / / $tmp$x" ;;
        unshare) printf '%s' "$unshare_bin -Urmnpif --mount-proc $x" ;;
    esac
}

# --- sanity: every command works for this user -------------------------------------
log "capsule check (as $run_user)"
check_out=$(as_bench "$capsule" check 2>&1) || true
printf '%s\n' "$check_out" | sed 's/^/    /' >&2
check_summary=$(printf '%s\n' "$check_out" | tail -n 1 | sed 's/^=> //')
for w in true static gcc; do
    for c in "${hf_configs[@]}"; do
        # shellcheck disable=SC2046  # the command lines are meant to be split into words
        err=$(as_bench $(command_of "$c" "$w") 2>&1) || die "'$(command_of "$c" "$w")' fails as $run_user: ${err:-no output}"
    done
done
: >"$out/raw.jsonl"
chmod 0666 "$out/raw.jsonl"
as_bench "$bench" latency --workloads "$workloads" --only true --configs server,server-2 --capsule "$capsule_cli" \
    --raw "$out/raw.jsonl" >/dev/null || die "capsule-bench fails as $run_user (see above)"
: >"$out/raw.jsonl"

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
vms=$(pgrep -c qemu || true)
((vms == 0)) || log "warning: $vms qemu processes are running; the numbers will be noisy"

start_time=$(date +%s)
vms_during=0
log "$rounds rounds over ${wl_names[*]}; runs per round and configuration: $(for w in "${wl_names[@]}"; do printf '%s %s, ' "$w" "${wl_per[$w]}"; done)throughput $tput_runs"
for ((r = 1; r <= rounds; r++)); do
    for i in "${!wl_names[@]}"; do
        w=${wl_names[i]}
        hf_args=(-N --style none --warmup "${wl_warm[$w]}" --runs "${wl_per[$w]}" --export-json "$out/hf-$w-$(printf '%03d' "$r").json")
        n=${#hf_configs[@]}
        for ((k = 0; k < n; k++)); do
            c=${hf_configs[(r - 1 + k) % n]}
            hf_args+=(-n "$c" "$(command_of "$c" "$w")")
        done
        driver=(as_bench "$bench" latency --workloads "$workloads" --only "$w" --first-round "$r"
            --capsule "$capsule_cli" --raw "$out/raw.jsonl")
        if (((r + i) % 2)); then
            "${driver[@]}" >>"$out/driver.log" || die "capsule-bench latency failed in round $r ($w)"
            as_bench hyperfine "${hf_args[@]}" >&2 || die "hyperfine failed in round $r: hyperfine ${hf_args[*]}"
        else
            as_bench hyperfine "${hf_args[@]}" >&2 || die "hyperfine failed in round $r: hyperfine ${hf_args[*]}"
            "${driver[@]}" >>"$out/driver.log" || die "capsule-bench latency failed in round $r ($w)"
        fi
    done
    as_bench "$bench" throughput --runs "$tput_runs" --parallel 2 --round "$r" --capsule "$capsule_cli" \
        --raw "$out/raw.jsonl" >>"$out/driver.log" || die "capsule-bench throughput failed in round $r"
    # The kernel's floor (bench/nsfloor.c): fresh user + pid + mount
    # namespaces and a procfs per run, nothing of capsule's.
    for kind in throughput latency; do
        n=$tput_runs
        [[ $kind == latency ]] && n=$(((wl_per[true] + 1) / 2 * 2))
        line=$(as_bench "$stage/nsfloor" "$kind" "$n" /bin/true) || die "nsfloor $kind failed in round $r"
        echo "nsfloor: $line" >>"$out/driver.log"
        read -r _ _ a _ b _ <<<"$line"
        printf '{"kind": "floor", "what": "%s", "round": %d, "floor": %s, "bare": %s}\n' \
            "$kind" "$r" "$a" "$b" >>"$out/raw.jsonl"
    done
    if pgrep qemu >/dev/null; then
        vms_during=$((vms_during + 1))
        log "warning: a qemu process is running (round $r); the numbers will be noisy"
    fi
    log "round $r/$rounds done after $(($(date +%s) - start_time)) s: $(tail -n 1 "$out/driver.log")"
done

log "supervisor memory: $mem_runs pipelined runs of /bin/true, parallel 2"
as_bench "$bench" memory --runs "$mem_runs" --parallel 2 --capsule "$capsule_cli" --raw "$out/raw.jsonl" |
    tee -a "$out/driver.log" >&2 || die "capsule-bench memory failed"
elapsed=$(($(date +%s) - start_time))

# --- statistics ----------------------------------------------------------------------
# Writes $out/results.md from raw.jsonl (capsule-bench) and the hyperfine exports.
wl_spec=$(for w in "${wl_names[@]}"; do printf '%s\t%s\t%s\n' "$w" "${wl_label[$w]}" "${wl_argv[$w]//\{t\}/}"; done)
cmd_spec=$(for w in "${wl_names[@]}"; do for c in "${hf_configs[@]}"; do
    printf '%s\t%s\t%s\n' "$w" "$c" "$(command_of "$c" "$w")"; done; done)
python3 - "$out" "$rounds" "$stage/" "$wl_spec" "$cmd_spec" <<'PY' || die "computing the statistics failed (raw data in $out)"
import glob, json, math, os, re, statistics as st, sys
from collections import defaultdict

out, rounds, stage, wl_spec, cmd_spec = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
workloads = [l.split("\t") for l in wl_spec.strip().split("\n")]
commands = {(w, c): cmd for w, c, cmd in (l.split("\t") for l in cmd_spec.strip().split("\n"))}
short = lambda s: s  # full paths: the staging directory is named in the header

lat = defaultdict(list)            # (workload, config) -> [sample]
tput = defaultdict(list)           # config -> [runs/s]
mem, sandbox = [], None
floor = defaultdict(list)          # "throughput" | "latency" -> [{floor, bare}]
for line in open(f"{out}/raw.jsonl"):
    x = json.loads(line)
    if x["kind"] == "latency":
        lat[(x["workload"], x["config"])].append(x)
    elif x["kind"] == "throughput":
        tput[x["config"]].append(x["per_sec"])
    elif x["kind"] == "memory":
        mem.append(x)
    elif x["kind"] == "sandbox" and sandbox is None:
        sandbox = x
    elif x["kind"] == "floor":
        floor[x["what"]].append(x)

hf = defaultdict(list)             # (workload, config) -> [ms]
hf_round = defaultdict(dict)       # (workload, round) -> {config: median ms}
for path in sorted(glob.glob(f"{out}/hf-*.json")):
    w, r = re.match(r".*/hf-(\w+)-(\d+)\.json$", path).groups()
    for res in json.load(open(path))["results"]:
        ms = [t * 1e3 for t in res["times"]]
        hf[(w, res["command"])] += ms
        hf_round[(w, int(r))][res["command"]] = st.median(ms)


def p99(xs):  # nearest rank
    v = sorted(xs)
    return v[max(1, math.ceil(0.99 * len(v))) - 1]


def f3(x):
    return f"{x:.3f}" if x < 100 else f"{x:.1f}"


IN = [("bare", "bare: vfork + execve + wait4 from the driver", "bare"),
      ("server", "capsule server, 1 client (`Sandbox`, parallel 1)", "bare"),
      ("bare-2", "bare, 2 concurrent clients (2 threads)", "bare-2"),
      ("server-2", "capsule server, 2 concurrent clients (parallel 2)", "bare-2")]
HF = ["bare", "capsule-run", "capsule-fork", "bwrap", "bwrap-all", "unshare"]
med = {}
lines = []
for w, label, argv in workloads:
    lines += [f"### {label}", "", f"`{short(argv)}`", "",
              "| Configuration | Runs | Median (ms) | p99 (ms) | × bare | Program CPU, median (ms) | CPU × bare |",
              "|:---|---:|---:|---:|---:|---:|---:|"]
    for c, name, base in IN:
        s = lat.get((w, c))
        if not s:
            continue
        wall = [x["wall_ms"] for x in s]
        cpu = [x["cpu_ms"] for x in s]
        med[(w, c)] = st.median(wall)
        med[(w, c, "cpu")] = st.median(cpu)
        bw = [x["wall_ms"] for x in lat[(w, base)]]
        bc = [x["cpu_ms"] for x in lat[(w, base)]]
        cr = f"{st.median(cpu) / st.median(bc):.3f}" if st.median(bc) > 0.05 else "—"
        lines.append(f"| {name} | {len(wall)} | {f3(st.median(wall))} | {f3(p99(wall))} | "
                     f"{st.median(wall) / st.median(bw):.3f} | {f3(st.median(cpu))} | {cr} |")
    for c in HF:
        t = hf.get((w, c))
        if not t:
            continue
        med[(w, "hf-" + c)] = st.median(t)
        b = st.median(hf[(w, "bare")])
        lines.append(f"| `{short(commands[(w, c)])}` | {len(t)} | {f3(st.median(t))} | {f3(p99(t))} | "
                     f"{st.median(t) / b:.3f} | | |")
    lines.append("")
with open(f"{out}/latency.md", "w") as f:
    f.write("\n".join(lines))

# Throughput.
lines = ["| /bin/true, 2 at a time | Rounds | Median (runs/s) | Min … max (runs/s) |", "|:---|---:|---:|---:|"]
names = {"server": "capsule server, `parallel` 2, pipelined", "bare": "bare, 2 threads of vfork + execve + wait4"}
for c in ("server", "bare"):
    v = tput.get(c)
    if v:
        lines.append(f"| {names[c]} | {len(v)} | {st.median(v):.0f} | {min(v):.0f} … {max(v):.0f} |")
with open(f"{out}/throughput.md", "w") as f:
    f.write("\n".join(lines) + "\n")

# Supervisor memory.
def val(x, k):
    return "—" if x.get(k) is None else str(x[k])
lines = ["| Runs done | VmRSS (KiB) | VmHWM (KiB) | Threads | Open fds | Mounts | Children | Zombies |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|"]
for x in mem:
    lines.append(f"| {x['runs_done']:,} | {val(x, 'rss_kib')} | {val(x, 'hwm_kib')} | {val(x, 'threads')} | "
                 f"{val(x, 'fds')} | {val(x, 'mounts')} | {val(x, 'children')} | {val(x, 'zombies')} |")
if mem:
    lines += ["", f"{mem[-1]['runs_done']:,} runs in {mem[-1]['secs']:.1f} s "
              f"({mem[-1]['runs_done'] / mem[-1]['secs']:.0f} runs/s, checkpoints included)."]
with open(f"{out}/memory.md", "w") as f:
    f.write("\n".join(lines) + "\n")

# Targets.
def ok(b):
    return "**met**" if b else "**not met**"
T = ["| Target (issue 4) | Measured | |", "|:---|:---|:---|"]
if ("true", "server") in med:
    r = med[("true", "server")] / med[("true", "bare")]
    T.append(f"| server `/bin/true` ≤ 1.3× bare | {r:.2f}× ({f3(med[('true', 'server')])} vs "
             f"{f3(med[('true', 'bare')])} ms, medians, 1 client, in-process) | {ok(r <= 1.3)} |")
if floor["latency"]:
    fl = st.median([x["floor"] / x["bare"] for x in floor["latency"]])
    T.append(f"| (the kernel's floor for it: a prepared PID 1 in fresh user, pid and mount namespaces "
             f"with a procfs, one pipe each way, `bench/nsfloor.c`) | {fl:.2f}× bare (median of "
             f"{len(floor['latency'])} per-round ratios; {st.median([x['floor'] for x in floor['latency']]):.3f} "
             f"vs {st.median([x['bare'] for x in floor['latency']]):.3f} ms) | "
             f"{'below 1.3×' if fl <= 1.3 else '**above 1.3×**'} |")
if tput.get("server"):
    v = st.median(tput["server"])
    T.append(f"| ≥ 1000 sandboxed `/bin/true` per second with `--parallel 2` | {v:.0f}/s (median of "
             f"{len(tput['server'])} rounds) | {ok(v >= 1000)} |")
if floor["throughput"]:
    fv = st.median([x["floor"] for x in floor["throughput"]])
    T.append(f"| (the kernel's floor for it: fresh user, pid and mount namespaces and a procfs per run, "
             f"2 workers, `bench/nsfloor.c`) | {fv:.0f}/s (median of {len(floor['throughput'])} rounds; "
             f"bare from the same program {st.median([x['bare'] for x in floor['throughput']]):.0f}/s) | "
             f"{'above 1000/s' if fv >= 1000 else '**below 1000/s**'} |")
if ("true", "hf-capsule-run") in med and ("true", "hf-bwrap-all") in med:
    r = med[("true", "hf-capsule-run")] / med[("true", "hf-bwrap-all")]
    rr = [x["capsule-run"] / x["bwrap-all"] for (w, _), x in hf_round.items()
          if w == "true" and "capsule-run" in x and "bwrap-all" in x]
    T.append(f"| one-shot `capsule run -- /bin/true` ≤ 0.75× `bwrap --unshare-all` (served by the user's "
             f"agent, `docs/agent.md`) | {r:.2f}× (medians; "
             f"median of {len(rr)} per-round ratios {st.median(rr):.2f}) | {ok(r <= 0.75)} |")
if ("true", "hf-capsule-fork") in med and ("true", "hf-bwrap-all") in med:
    r = med[("true", "hf-capsule-fork")] / med[("true", "hf-bwrap-all")]
    T.append(f"| (the same with a supervisor forked for the run: `capsule run --no-agent`) | {r:.2f}× "
             f"({f3(med[('true', 'hf-capsule-fork')])} vs {f3(med[('true', 'hf-bwrap-all')])} ms, medians) | |")
for w, lim in (("cpu", 1.0), ("gcc", 3.0)):
    if (w, "server") in med:
        o = 100 * (med[(w, "server")] / med[(w, "bare")] - 1)
        oc = 100 * (med[(w, "server", "cpu")] / med[(w, "bare", "cpu")] - 1)
        name = "CPU loop" if w == "cpu" else "`gcc -O2`"
        T.append(f"| {name} overhead ≤ {lim:g}% (wall time seen by the client, setup included) | {o:+.2f}% "
                 f"({f3(med[(w, 'server')])} vs {f3(med[(w, 'bare')])} ms); program CPU time {oc:+.2f}% | "
                 f"{ok(o <= lim)} |")
if mem:
    rss = [x["rss_kib"] for x in mem if x.get("rss_kib") is not None]
    if rss:
        T.append(f"| supervisor ≤ 10 MiB RSS | max VmRSS {max(rss) / 1024:.2f} MiB, VmHWM "
                 f"{(mem[-1].get('hwm_kib') or 0) / 1024:.2f} MiB | {ok(max(rss) <= 10 * 1024)} |")
    warm = next((x for x in mem if x["runs_done"] >= 1000), mem[0])
    last = mem[-1]
    if warm is not last and last.get("rss_kib") is not None:
        d = last["rss_kib"] - warm["rss_kib"]
        # The kept networks hold two fds each (the namespace, its sockstat), made on demand up
        # to 5 × parallel + 2 (docs/network-reuse.md): the other fds must not change, the
        # networks must stay within that bound.
        own = lambda x: None if x.get("fds") is None else x["fds"] - (x.get("net_fds") or 0)
        nets = lambda x: None if x.get("net_fds") is None else x["net_fds"] // 2
        nets_ok = (nets(last) or 0) <= 5 * 2 + 2
        same = (all(warm.get(k) == last.get(k) for k in ("threads", "mounts")) and own(warm) == own(last)
                and nets_ok and not last.get("zombies"))
        flat = d <= 256 and same
        T.append(f"| supervisor flat over {last['runs_done']:,} runs | VmRSS {d:+d} KiB from run "
                 f"{warm['runs_done']:,} to {last['runs_done']:,}; threads {val(warm, 'threads')} → "
                 f"{val(last, 'threads')}, fds but the kept networks' {own(warm)} → {own(last)}, kept networks "
                 f"{nets(warm)} → {nets(last)} (at most 12), mounts "
                 f"{val(warm, 'mounts')} → {val(last, 'mounts')}, zombies {val(last, 'zombies')} | "
                 f"{ok(flat)} (flat: ≤ 256 KiB, the rest unchanged) |")
with open(f"{out}/targets.md", "w") as f:
    f.write("\n".join(T) + "\n")
with open(f"{out}/sandbox.txt", "w") as f:
    f.write((sandbox or {}).get("cgroups", "unknown"))
PY

# --- report ------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
[[ -n $cpu ]] || cpu=$(uname -m)
commit=git\ $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    commit="$commit with uncommitted changes"
fi
capsule_version=$("$capsule" --version 2>/dev/null || echo capsule)
bwrap_version=$("$bwrap_bin" --version 2>/dev/null | head -n 1)
unshare_version=$("$unshare_bin" --version 2>/dev/null | head -n 1)
hyperfine_version=$(hyperfine --version | head -n 1)
cc_version=$("$cc" --version 2>/dev/null | head -n 1)
reproduce="sudo bench/server.sh --rounds $rounds --mem-runs $mem_runs --throughput-runs $tput_runs"
$quick && reproduce="sudo bench/server.sh --quick --rounds $rounds --mem-runs $mem_runs --throughput-runs $tput_runs"

mkdir -p "$(dirname "$output")"
tmp=$(mktemp "$output.XXXXXX")
{
    echo "# Benchmarks: the long-lived supervisor"
    echo
    echo "Runs of a long-lived supervisor (the library API, \`capsule serve\`'s engine)"
    echo "next to the bare process, one-shot \`capsule run\`, bubblewrap and unshare(1),"
    echo "for five workloads; the targets of issue 4 at the end."
    echo "Generated by \`bench/server.sh\`; do not edit by hand."
    echo
    echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- Kernel: $(uname -srm)"
    echo "- CPU: $cpu ($(nproc) CPUs online)"
    echo "- capsule: $capsule_version ($commit), release build"
    echo "- Tools: $bwrap_version; $unshare_version; $hyperfine_version; ${cc_version:-$cc}"
    echo "- As the unprivileged user \`$run_user\`, binaries and workloads in \`$stage\`"
    echo "- CPU busy with other work just before measuring: ${busy}%; qemu processes running: $vms (and in $vms_during of the $rounds rounds)"
    echo "- \`capsule check\` on this machine: $check_summary"
    echo "- The supervisor's cgroups: $(cat "$out/sandbox.txt")"
    echo "- Method: $rounds rounds; in each, workload by workload, one \`capsule-bench latency\`"
    echo "  invocation over the in-process configurations and one \`hyperfine -N\` invocation"
    echo "  over the whole commands (which goes first alternates; the configurations' order"
    echo "  rotates by one every round), then one throughput measurement; the memory check"
    echo "  after the last round. Whole run: ${elapsed} s."
    echo
    echo "## Targets"
    echo
    cat "$out/targets.md"
    echo
    echo "The runtime overheads compare the medians of the wall time the client sees"
    echo "(\`Sandbox::run\` + \`wait\` against vfork + execve + wait4, so the sandbox's"
    echo "set-up and tear-down are included); the program's CPU time (user + system of"
    echo "its processes: wait4's rusage bare, the result's \`cpu_user_ms + cpu_system_ms\`"
    echo "in the sandbox) is given beside it."
    echo
    echo "## Latency per workload"
    echo
    echo "Medians and 99th percentiles (nearest rank: with fewer than 100 runs, the"
    echo "slowest) over all rounds. In-process rows (\`crates/capsule-testkit/bench/capsule-bench.rs\`):"
    echo "the time from the start request to the result in the same process; × bare"
    echo "is the ratio of the medians to the bare row with as many clients. Command rows"
    echo "(hyperfine): the whole command from exec to exit, × bare against the bare"
    echo "command. Each run's environment is \`PATH\` alone. For \`gcc\`, the in-process"
    echo "bare clients write \`${hello_out}0\` and \`${hello_out}1\`, the sandboxes their own \`/tmp\`;"
    echo "both bwrap commands get \`--tmpfs /tmp\` (gcc needs a writable \`/tmp\`)."
    echo
    cat "$out/latency.md"
    echo
    echo "## Throughput"
    echo
    echo "Per round, $tput_runs runs of \`/bin/true\` on a sandbox with \`parallel\` 2, pipelined"
    echo "(up to 16 requests outstanding, results taken in order), after 50 warm-up runs;"
    echo "and as many bare runs from 2 threads."
    echo
    cat "$out/throughput.md"
    echo
    echo "## Supervisor memory"
    echo
    echo "$mem_runs pipelined runs of \`/bin/true\` on one sandbox with \`parallel\` 2; at each"
    echo "checkpoint the queue is drained, 200 ms pass, and the supervisor's \`/proc/<pid>\`"
    echo "is read (\`status\`, \`fd/\`, \`mountinfo\`, \`task/*/children\`; — where it is not"
    echo "readable by the user). Children include PID 1s prepared ahead for the next runs."
    echo
    cat "$out/memory.md"
    echo
    echo "To reproduce: \`$reproduce\` from the repository root (see the header of the script)."
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$output"
log "wrote $output (raw data: raw.jsonl, hf-*.json and driver.log in $out)"
cat "$output"
