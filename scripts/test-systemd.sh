#!/usr/bin/env bash
# capsule through a systemd user manager (issue 24): scripts/vm/cgroup2-vm
# --systemd boots the host's systemd in the VM and runs the in-VM half of
# this script as the VM's user from a service once that user's manager runs
# (lingering, XDG_RUNTIME_DIR), as in a login session. Nothing there is
# delegated to the user but through the manager, so every limit below is
# enforced in the scope `capsule` re-starts itself in (`systemd-run --user
# --scope -p Delegate=yes`). Checked:
#   1. `capsule check` names that path;
#   2. `capsule run` with --memory, --pids and --cpu-time: the limits hit,
#      accounting from the cgroup;
#   3. `capsule judge` with --memory: MLE and OK, from the cgroup;
#   4. `capsule serve` with a memory limit in its request;
#   5. the user manager absent, stopped (a socket nobody listens on) or
#      still starting (listening, not answering): capsule says so and runs
#      without cgroups, within CAPSULE_SYSTEMD_TIMEOUT, and a cgroup-only
#      limit is an error that explains delegation; never a hang;
#   6. deploy/systemd/capsule-worker.service as a user unit, with a
#      redis-server: a run job (memory limit hit, from the unit's delegated
#      cgroup) and a judge job done, `systemctl stop` exits 0 (issue 27);
#   7. a manager that refuses the scope: capsule names it and the fix, and
#      goes on without it; a SIGTERM to capsule reaches the run in the scope;
#   8. the cgroup test suite (crates/capsule-cli/tests/cgroups.rs) as this
#      user with CAPSULE_TEST_SYSTEMD=1: every capsule it starts re-starts
#      itself in a scope of the manager's, and each test checks that (the
#      run's scope) besides its verdicts and accounting; the tests that
#      need root to set up a base cgroup, and the sessions' (kept by an
#      agent, which has no cgroups here), are the only ones skipped.
# Run as root after `cargo build --workspace --all-targets`
# (`sudo scripts/test-slow.sh systemd` does both); CAPSULE_TEST_STRICT=1
# makes a missing systemd a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --in-vm ]; then
  repo=$2 B=$3/bin
  fails=0
  fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
  expect() { # expect NAME STATUS PATTERN... -- COMMAND...
    local name=$1 want=$2; shift 2
    local pats=()
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    local out rc=0 t0=$SECONDS
    out=$(timeout 300 "$@" 2>&1) || rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    echo "  [$name: exit $rc in $((SECONDS - t0)) s]"
    [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
    for p in "${pats[@]}"; do grep -qF -- "$p" <<<"$out" || fail "$name: no \`$p\` in its output"; done
  }
  cd /tmp
  echo "== as $(id -un), XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR, $(cat /proc/self/cgroup)"
  echo "== 1. capsule check"
  expect check 0 "ok   cgroup-source:" "re-starts itself in \`systemd-run --user --scope -p Delegate=yes\`" -- "$B/capsule" check
  echo "== 2. capsule run with limits, in a delegated scope"
  # Its own cgroup (system.slice/cgroup2-vm.service) is not delegated:
  # cgroup accounting means the scope.
  expect run-scope 0 "0::/" "cgroup)" -- "$B/capsule" run -- /bin/cat /proc/self/cgroup
  expect run-memory 123 "memory limit" "cgroup)" -- "$B/capsule" run --memory 64M -- "$B/capsule-probe" touch-mib 200
  expect run-memory-ok 0 "touched_mib=20" "cgroup)" -- "$B/capsule" run --memory 64M -- "$B/capsule-probe" touch-mib 20
  expect run-pids 0 "forked=7" "fork_error=EAGAIN" '"accounting": "cgroup"' '"pids_peak": 8' -- \
    sh -c "'$B/capsule' run --pids 8 --json /tmp/pids.json -q -- '$B/capsule-probe' fork-bomb 50 && cat /tmp/pids.json"
  expect run-cpu 124 "cpu time limit" "cgroup)" -- "$B/capsule" run --cpu-time 500ms --wall-time 60s -- "$B/capsule-probe" spin-threads 2
  # CMS's cycle, unmodified: `isolate --cg --init`, a run with --cg-mem in the scope it gets by itself, --cleanup.
  expect isolate-cg-init 0 "/capsule-isolate/7" -- "$B/capsule" isolate --cg -b 7 --init
  expect isolate-cg-run 0 "cg-mem:" "OK (" -- sh -c "'$B/capsule' isolate --cg -b 7 --cg-mem 65536 -M /tmp/iso.meta --run -- /bin/true && cat /tmp/iso.meta"
  expect isolate-cg-cleanup 0 -- "$B/capsule" isolate --cg -b 7 --cleanup
  echo "== 3. capsule judge with --memory"
  # Python: no compile step, which the emulated VM would take long over.
  mkdir -p /tmp/judge-tests && cp "$repo"/examples/aplusb/tests/1.in "$repo"/examples/aplusb/tests/1.out /tmp/judge-tests/
  printf 'a, b = map(int, input().split())\nx = b"x" * (200 << 20)\nprint(a + b)\n' > /tmp/mle.py
  expect judge-ok 0 "OK" -- "$B/capsule" judge --lang python3 "$repo/examples/aplusb/solutions/ok.py" --tests /tmp/judge-tests --memory 64M --time 10s
  expect judge-mle 1 "MLE" -- "$B/capsule" judge --lang python3 /tmp/mle.py --tests /tmp/judge-tests --memory 64M --time 10s --json /tmp/judge.json
  grep -q '"accounting": *"cgroup"' /tmp/judge.json || fail "judge-mle: the verdict's run was not accounted from a cgroup: $(head -c 2000 /tmp/judge.json)"
  echo "== 4. capsule serve with a memory limit"
  req='{"id": 1, "spec": {"argv": ["'"$B"'/capsule-probe", "touch-mib", "200"], "limits": {"memory": "64M"}}}'
  expect serve-memory 0 '"status":"memory-limit"' '"accounting":"cgroup"' -- sh -c "echo '$req' | '$B/capsule' serve"
  echo "== 5. no usable user manager: a named fallback, never a hang"
  expect absent 0 "rusage)" -- env -u XDG_RUNTIME_DIR "$B/capsule" run -- /bin/true
  expect absent-memory 125 "delegat" -- env -u XDG_RUNTIME_DIR "$B/capsule" run --memory 64M -- /bin/true
  expect absent-isolate 2 "Control groups are not available" "systemd-run --user --scope -p Delegate=yes" -- \
    env -u XDG_RUNTIME_DIR CAPSULE_ISOLATE_ROOT=/tmp/iso-absent "$B/capsule" isolate --cg -b 7 --init
  mkdir -p /tmp/stopped/systemd /tmp/hung/systemd
  python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' /tmp/stopped/systemd/private
  expect stopped 0 "cannot connect to" "going on without one" "rusage)" -- \
    env XDG_RUNTIME_DIR=/tmp/stopped "$B/capsule" run -- /bin/true
  python3 -c 'import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8); time.sleep(600)' /tmp/hung/systemd/private &
  hung=$!
  for _ in $(seq 300); do [ -S /tmp/hung/systemd/private ] && break; sleep 0.1; done
  t0=$SECONDS
  expect hung 0 "no answer" "within 2.0 s" "rusage)" -- env XDG_RUNTIME_DIR=/tmp/hung CAPSULE_SYSTEMD_TIMEOUT=2 "$B/capsule" run -- /bin/true
  expect hung-memory 125 "no answer" "delegat" -- env XDG_RUNTIME_DIR=/tmp/hung CAPSULE_SYSTEMD_TIMEOUT=2 "$B/capsule" run --memory 64M -- /bin/true
  expect hung-check 0 "=> \`capsule run\` can work here" -- env XDG_RUNTIME_DIR=/tmp/hung "$B/capsule" check
  [ $((SECONDS - t0)) -lt 120 ] || fail "the hung manager took $((SECONDS - t0)) s"
  kill "$hung"
  echo "== 6. capsule worker as a user service (deploy/systemd), jobs through a real redis-server"
  # The shipped unit as a user unit (docs/scale-out.md, "systemd"): without
  # User=/Group=, capsule from the build, Redis on a port of the test's own.
  redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no >/tmp/redis.log 2>&1 &
  redis=$!
  rcli() { redis-cli -p 6399 "$@"; }
  for _ in $(seq 150); do [ "$(rcli ping 2>/dev/null)" = PONG ] && break; sleep 0.2; done
  units=$XDG_RUNTIME_DIR/systemd/user
  mkdir -p "$units" || fail "worker: cannot create $units"
  sed -e '/^User=/d' -e '/^Group=/d' -e "s|/usr/bin/capsule |$B/capsule |" \
    -e 's|^Environment=CAPSULE_REDIS=.*|Environment=CAPSULE_REDIS=redis://127.0.0.1:6399/0|' \
    "$repo/deploy/systemd/capsule-worker.service" >"$units/capsule-worker.service" || fail "worker: no unit"
  before=$fails
  systemctl --user daemon-reload || fail "worker: systemctl --user daemon-reload"
  expect worker-start 0 -- systemctl --user start capsule-worker
  if [ "$fails" = "$before" ]; then
    rcli XADD capsule:jobs '*' id mem kind run body \
      '{"argv": ["'"$B"'/capsule-probe", "touch-mib", "200"], "limits": {"memory": "64M", "wall_time": "60s"}}' >/dev/null ||
      fail "worker: XADD"
    # One job at a time: the emulated VM is slow enough as it is.
    for _ in $(seq 300); do [ "$(rcli XLEN capsule:results)" -ge 1 ] && break; sleep 0.5; done
    body=$(python3 -c 'import json,sys; r=lambda p: open(p).read(); print(json.dumps({"lang": "python3", "source": r(sys.argv[1]),
      "time": "10s", "tests": [{"name": "1", "input": r(sys.argv[2]), "output": r(sys.argv[3])}]}))' \
      "$repo/examples/aplusb/solutions/ok.py" "$repo/examples/aplusb/tests/1.in" "$repo/examples/aplusb/tests/1.out")
    rcli XADD capsule:jobs '*' id judge kind judge body "$body" >/dev/null || fail "worker: XADD"
    for _ in $(seq 300); do [ "$(rcli XLEN capsule:results)" -ge 2 ] && break; sleep 0.5; done
    expect worker-results 0 '"status":"memory-limit"' '"accounting":"cgroup"' '"verdict":"OK"' -- redis-cli -p 6399 XRANGE capsule:results - +
    # SIGTERM to the worker alone (KillMode=mixed): it exits 0.
    expect worker-stop 0 "Result=success" "ExecMainStatus=0" -- \
      sh -c "systemctl --user stop capsule-worker; systemctl --user show capsule-worker -p Result -p ExecMainStatus"
    expect worker-stats 0 '"state": "stopped"' '"done": 2' -- "$B/capsule" worker --redis redis://127.0.0.1:6399/0 --stats
  fi
  [ "$fails" = "$before" ] || journalctl --user -u capsule-worker --no-pager 2>&1 | tail -30 | sed 's/^/    journal: /'
  kill "$redis" || true
  echo "== 7. a user manager that refuses the scope (app.slice masked): named, with the fix; a signal passed on"
  systemctl --user mask app.slice
  expect refused 0 "refused a delegated scope" "Unit app.slice is masked" "systemctl --user unmask app.slice" \
    "going on without one" "rusage)" -- "$B/capsule" run -- /bin/true
  expect refused-memory 125 "refused a delegated scope" "delegat" -- "$B/capsule" run --memory 64M -- /bin/true
  # `capsule isolate --cg` re-starts the same way (then fails as isolate does without cgroups: status 2).
  expect refused-isolate 2 "refused a delegated scope" "systemctl --user unmask app.slice" -- \
    "$B/capsule" isolate --cg -b 9 --run -- /bin/true
  systemctl --user unmask app.slice
  # The signal once the run's program is there (polled: the scope's start takes a while here).
  expect sigterm 0 "passed on" -- sh -c "'$B/capsule' run -- /bin/sleep 600 & p=\$!;
    i=0; until pgrep -u \$(id -u) -x sleep >/dev/null || [ \$i -ge 600 ]; do sleep 0.1; i=\$((i+1)); done; kill -TERM \$p; wait \$p;
    echo \"status \$?\"; pgrep -u \$(id -u) -x sleep || echo 'SIGTERM passed on'"
  echo "== 8. the cgroup test suite through the user manager's scopes"
  # The tests that make a base cgroup of their own as root; each says why.
  want_skips="agent_serves_its_caller_across_the_leaf_move base_is_restored_with_its_processes"
  want_skips="$want_skips concurrent_instances_share_a_base crashed_instance_is_cleaned_by_next_start"
  want_skips="$want_skips explicit_cgroup_is_used memory_limit_does_not_carry_over"
  # Sessions live in the agent, which has no cgroups here (docs/sessions.md).
  want_skips="$want_skips session_memory_limit_ends_the_command_not_the_session"
  # The binaries copied off the 9p share first, where the harness as root
  # puts them too: page faults on a binary read over 9p count as the
  # probe's own system time (a 300 ms burn measured 0.8 to 2.2 s).
  bins=/var/tmp/capsule-systemd-bins
  mkdir -p "$bins" && cp "$B/capsule" "$B/capsule-cli" "$B/capsule-probe" "$B/cgroups" "$bins/"
  t0=$SECONDS rc=0
  # Left out for time: server_many_runs_leave_no_cgroups (300 runs, a
  # cleanup check with no verdict; the VM stage runs it), judge_mle_with_cgroups
  # (a C++ compile, over a minute here; section 3 judges through the scope)
  # and degraded_* (no cgroups: the host runs them).
  # --show-output: the SKIP lines and figures.
  out=$(cd /tmp && timeout 900 env CAPSULE_TEST_SYSTEMD=1 CAPSULE_TEST_STRICT=1 "$bins/cgroups" --test-threads 2 \
    --show-output --skip server_many_runs_leave_no_cgroups --skip judge_mle_with_cgroups --skip degraded_ 2>&1) || rc=$?
  printf '%s\n' "$out" | grep -E '^(test |SKIP |test result|failures:|---- )|panicked' | sed 's/^/    /'
  echo "  [cgroups: exit $rc in $((SECONDS - t0)) s]"
  [ "$rc" = 0 ] || { printf '%s\n' "$out" | tail -80 | sed 's/^/    /'; fail "cgroups: exit status $rc"; }
  skipped=$(printf '%s\n' "$out" | sed -n 's/^SKIP \([a-z_0-9]*\): .*/\1/p' | sort | xargs)
  [ "$skipped" = "$want_skips" ] || fail "cgroups: skipped [$skipped], expected only [$want_skips]"
  passed=$(printf '%s\n' "$out" | sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p')
  [ "${passed:-0}" -ge 20 ] || fail "cgroups: ${passed:-no} tests passed, expected at least 20 (7 of them skipped)"
  [ "$fails" = 0 ] || { echo "test-systemd.sh: $fails check(s) failed"; exit 1; }
  echo "test-systemd.sh: all passed"
  exit 0
fi

# --- on the host ---------------------------------------------------------------
strict=${CAPSULE_TEST_STRICT:-0}
skip() {
  if [ "$strict" = 1 ]; then echo "test-systemd.sh: $1 (CAPSULE_TEST_STRICT=1)" >&2; exit 1; fi
  echo "SKIP the systemd tests: $1"; exit 0
}
vm=$PWD/scripts/vm/cgroup2-vm
[ "$(id -u)" = 0 ] || skip "they must be started as root (the VM needs it)"
[ -x /lib/systemd/systemd ] || skip "systemd is not installed (the VM boots the host's)"
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
repo=$PWD
target=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/debug
# Staged binaries (a build meanwhile must not change them), and the VM's
# scratch directory: a booting systemd may clean the directory it shares.
scratch=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/systemd-test
rm -rf "$scratch" && mkdir -p "$scratch/bin"
cp "$target/capsule" "$target/capsule-cli" "$target/capsule-probe" "$scratch/bin/"
# The cgroup suite's test executable (section 8), which finds capsule beside it.
exe=$(cargo test --offline -q -p capsule-cli --test cgroups --no-run --message-format=json 2>/dev/null |
  grep '"kind":\["test"\]' | grep '"name":"cgroups"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$exe" ] || { echo "test-systemd.sh: no test executable for the cgroups suite" >&2; exit 1; }
cp "$exe" "$scratch/bin/cgroups"
cp scripts/test-systemd.sh "$scratch/"
chmod -R a+rX "$scratch"
t0=$SECONDS
rc=0
(cd "$scratch" && "$vm" --systemd --timeout 900 -- bash "$scratch/test-systemd.sh" --in-vm "$repo" "$scratch") || rc=$?
echo "test-systemd.sh: $((SECONDS - t0)) s in the VM"
rm -rf "$scratch"
exit $rc
