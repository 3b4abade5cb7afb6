#!/usr/bin/env bash
# deploy/kubernetes played for real (issue 27, docs/containers.md, "The
# Kubernetes manifests under podman kube play"): Debian's podman 4.3 plays
# deploy/kubernetes/deployment.yaml as it ships (hostUsers: false,
# procMount: Unmasked, the Localhost seccomp profile, no privileged flag)
# with the image scripts/test-container.sh built, and its workers take jobs
# from a real redis-server. Checked:
#   1. the Deployment's 3 pods start, each worker a consumer named after
#      its pod (POD_NAME from metadata.name);
#   2. the workers run a run job, a run job over its memory limit and a
#      bash a+b judge job, and post their results;
#   3. the pods run in user namespaces of their own, as uid 1500, with the
#      profile's seccomp filter and no capability;
#   4. `podman pod stop` (SIGTERM, the 300 s grace) ends a worker with 0.
# Not a cluster: no kubelet, scheduler, Service or DNS (docs/containers.md
# says what podman does differently). Run as root inside
# scripts/vm/cgroup2-vm by `scripts/test-container.sh` (its VM, after
# its step 7 built localhost/capsule in the same storage).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
if [ "${CGROUP2_VM:-}" != 1 ] || [ "$(id -u)" != 0 ]; then
  echo "test-kube.sh: runs as root inside the cgroup2 VM, from scripts/test-container.sh" >&2
  exit 2
fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
words() { tr '\n' ' ' | sed 's/ *$//'; }
command -v bpftool >/dev/null || { echo "FAIL: bpftool is not installed (apt-get install bpftool)"; exit 1; }
command -v redis-server >/dev/null || { echo "FAIL: redis-server is not installed"; exit 1; }
podman --root /tmp/podman/root --runroot /tmp/podman/run image exists localhost/capsule || { echo "FAIL: no image localhost/capsule (test-container.sh step 7)"; exit 1; }
# conmon leaves files in the directory podman runs in.
work=$(mktemp -d /tmp/kube.XXXXXX)
cd "$work" || exit 1
# procMount: Unmasked, which podman 4.3 ignores (kube play reads it since
# containers/podman#19885): what a kubelet does for it, empty maskedPaths
# and readonlyPaths, done by a wrapper around crun for the containers the
# manifest asks it for (every container but the pod's infra one).
grep -q '^            procMount: Unmasked$' "$repo/deploy/kubernetes/deployment.yaml" ||
  { echo "FAIL: deploy/kubernetes/deployment.yaml: the worker has no procMount: Unmasked"; exit 1; }
cat >crun-procmount <<'WRAP'
#!/bin/sh
bundle="" prev=""
for a in "$@"; do [ "$prev" = --bundle ] && bundle=$a; prev=$a; done
case " $* " in *" create "*)
  c=$bundle/config.json
  if [ -n "$bundle" ] && ! tr -d ' \n\t' <"$c" | grep -q '"args":\["/catatonit"'; then
    sed -z -i -E 's/"(maskedPaths|readonlyPaths)":[[:space:]]*\[[^]]*\]/"\1":[]/g' "$c" || exit 1
  fi ;;
esac
exec crun "$@"
WRAP
chmod +x crun-procmount
P=(podman --root /tmp/podman/root --runroot /tmp/podman/run --cgroup-manager=cgroupfs --events-backend=file
  --runtime "$work/crun-procmount")
t0=$SECONDS
# hostUsers: false is `--userns=auto`: ranges of the `containers` user
# (the VM's /etc is a throw-away overlay).
grep -q '^containers:' /etc/subuid || echo "containers:2147483647:2147483648" >>/etc/subuid
grep -q '^containers:' /etc/subgid || echo "containers:2147483647:2147483648" >>/etc/subgid
# Redis on the VM's loopback; the pods on the VM's network (kube play
# --network host: podman 4.3's pods with --userns=auto get no route on its
# bridge, "Network is unreachable").
redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no >redis.log 2>&1 &
redis=$!
rcli() { redis-cli -p 6379 "$@"; }
for _ in $(seq 100); do [ "$(rcli ping 2>/dev/null)" = PONG ] && break; sleep 0.2; done
# secret.yaml's Secret (capsule-redis, key url) with this VM's URL, stored
# as podman 4.3 reads a secretKeyRef: JSON of base64 values (a played
# Secret is stored as YAML, which 4.3 cannot read back).
if ! grep -q '^  name: capsule-redis$' "$repo/deploy/kubernetes/secret.yaml" || ! grep -q '^  url: ' "$repo/deploy/kubernetes/secret.yaml"; then
  fail "deploy/kubernetes/secret.yaml: no Secret capsule-redis with a key url"
fi
printf '{"url": "%s"}' "$(printf redis://127.0.0.1:6379/0 | base64 -w0)" | "${P[@]}" secret create capsule-redis - >/dev/null ||
  fail "podman secret create"
# The node's seccomp directory (the kubelet's /var/lib/kubelet/seccomp).
mkdir -p seccomp && cp "$repo/deploy/seccomp/capsule-container.json" seccomp/
echo "== 1. the Deployment's pods"
# --userns=auto:size=65536: what a kubelet gives a pod with hostUsers:
# false (podman's own default, 1024 ids, does not map a runAsUser 10001).
out=$("${P[@]}" kube play --start=false --userns=auto:size=65536 --network host --seccomp-profile-root "$work/seccomp" \
  "$repo/deploy/kubernetes/deployment.yaml" 2>&1) || fail "kube play: $out"
echo "  [kube play: $((SECONDS - t0)) s]"
# podman 4.3's cgroupfs manager attaches a deny-all device program to each
# pod's own cgroup (its infra container then fails opening /dev/null):
# detached, the containers keep the device programs crun gives each.
for cg in /sys/fs/cgroup/libpod_parent/*/; do
  for id in $(bpftool cgroup show "$cg" | awk '$2 == "cgroup_device" {print $1}'); do
    bpftool cgroup detach "$cg" device id "$id" || fail "bpftool cgroup detach $cg device id $id"
  done
done
pods=$("${P[@]}" pod ps --format '{{.Name}}' | sort | words)
[ "$pods" = "capsule-worker-pod-0 capsule-worker-pod-1 capsule-worker-pod-2" ] || fail "pods: $pods"
for pod in $pods; do
  out=$(timeout 180 "${P[@]}" pod start "$pod" 2>&1) || fail "pod start $pod: $out"
done
echo "  [the pods started: $((SECONDS - t0)) s]"
"${P[@]}" ps -a --format '{{.Names}} {{.Status}}' | sed 's/^/    /'
echo "== 2. jobs through Redis"
rcli XADD capsule:jobs '*' id echo kind run body '{"argv": ["/bin/echo", "hello from a pod"], "limits": {"wall_time": "60s"}}' >/dev/null
rcli XADD capsule:jobs '*' id mem kind run body \
  '{"argv": ["/usr/bin/tail", "/dev/zero"], "limits": {"memory": "64M", "wall_time": "60s"}}' >/dev/null
body=$(python3 -c 'import json,sys; r=lambda p: open(p).read(); print(json.dumps({"lang": "bash", "source": r(sys.argv[1]),
  "time": "10s", "tests": [{"name": "1", "input": r(sys.argv[2]), "output": r(sys.argv[3])}]}))' \
  "$repo/examples/aplusb/solutions/ok.sh" "$repo/examples/aplusb/tests/1.in" "$repo/examples/aplusb/tests/1.out")
rcli XADD capsule:jobs '*' id judge kind judge body "$body" >/dev/null
t=$SECONDS
while [ "$(rcli XLEN capsule:results)" -lt 3 ] && [ $((SECONDS - t)) -lt 240 ]; do sleep 1; done
echo "  [3 jobs: $((SECONDS - t)) s]"
results=$(rcli XRANGE capsule:results - +)
printf '%s\n' "$results" | sed 's/^/    /' | cut -c1-400
result_of() { printf '%s\n' "$results" | grep -A8 -x "$1" | grep -A1 -x result | tail -n1; }
grep -q '"status":"exited"' <<<"$(result_of echo)" || fail "the run job: $(result_of echo)"
# The pod's /sys/fs/cgroup is read-only (podman's and a kubelet's default
# without privileged): the worker runs in degraded mode, and a memory limit
# is an error naming the missing delegation.
mem=$(result_of mem)
if ! grep -q cgroup <<<"$mem" || grep -q '"status":"exited"' <<<"$mem"; then fail "the memory job: $mem"; fi
grep -q '"verdict":"OK"' <<<"$(result_of judge)" || fail "the judge job: $(result_of judge)"
# Each job's worker is one of the pods (--consumer "$POD_NAME"), and so is
# every consumer of the group.
workers=$(printf '%s\n' "$results" | grep -A1 -x worker | grep -v '^worker$\|^--$' | sort -u | words)
consumers=$(rcli XINFO CONSUMERS capsule:jobs capsule | grep -A1 -x name | grep -v '^name$\|^--$' | sort | words)
echo "  workers: $workers; consumers: $consumers"
for w in $workers $consumers; do
  case " $pods " in *" $w "*) ;; *) fail "\`$w\` is not one of the pods' names" ;; esac
done
if [ -z "$workers" ] || [ -z "$consumers" ]; then fail "no worker or consumer names"; fi
echo "== 3. what the pods run in"
c=capsule-worker-pod-0-worker
inside=$(timeout 60 "${P[@]}" exec "$c" sh -c 'id -u; cat /proc/self/uid_map; grep -E "^(CapEff|Seccomp):" /proc/self/status; capsule check' 2>&1)
printf '%s\n' "$inside" | sed 's/^/    /'
[ "$(printf '%s\n' "$inside" | head -n1)" = 1500 ] || fail "the worker does not run as uid 1500"
printf '%s\n' "$inside" | sed -n 2p | grep -qE '^ +0 +[0-9]+ +65536$' || fail "the pod has no user namespace of its own (uid_map)"
printf '%s\n' "$inside" | grep -q '^CapEff:[[:space:]]*0000000000000000$' || fail "the worker has capabilities"
printf '%s\n' "$inside" | grep -q '^Seccomp:[[:space:]]*2$' || fail "the worker has no seccomp filter"
printf '%s\n' "$inside" | grep -q 'can work here' || fail "capsule check in the pod"
echo "== 4. the pod stopped: SIGTERM, the worker exits 0"
t=$SECONDS
timeout 120 "${P[@]}" pod stop capsule-worker-pod-1 >/dev/null || fail "pod stop"
status=$("${P[@]}" inspect capsule-worker-pod-1-worker --format '{{.State.ExitCode}}')
echo "  [pod stop: $((SECONDS - t)) s, the worker's exit status $status]"
[ "$status" = 0 ] || fail "the stopped worker's exit status is $status"
if [ "$fails" != 0 ]; then
  for c in $("${P[@]}" ps -a --format '{{.Names}}' | grep worker); do
    "${P[@]}" logs "$c" 2>&1 | tail -n 5 | sed "s/^/    $c: /"
  done
fi
timeout 120 "${P[@]}" pod rm -f -a >/dev/null 2>&1
kill "$redis" 2>/dev/null
echo "test-kube.sh: $((SECONDS - t0)) s"
[ "$fails" = 0 ] || { echo "test-kube.sh: $fails check(s) failed"; exit 1; }
echo "test-kube.sh: all passed"
