#!/usr/bin/env bash
# capsule inside Docker containers without --privileged (issue 24,
# docs/containers.md): Debian's docker.io (dockerd, its containerd, runc)
# as root inside scripts/vm/cgroup2-vm. scripts/test-container.sh runs
# this in the same VM after its podman checks, with what it staged there
# (the binaries, the hostile suite's test executable, the image's build
# context and its mmdebstrap base): usage, in the VM as root,
#   test-docker.sh --in-vm REPO STAGE HELPERS_DIR
# (HELPERS_DIR: where the hostile suite looks for its helper programs).
# Checked, each container from the image of deploy/container/Containerfile
# (`docker import` of the base, `docker build`, no registry), capsule in it
# as uid 1500:
#   1. docker's default options: `capsule check` fails naming the option
#      that fixes it, `capsule run` fails; with each documented option left
#      out in turn, the missing one is named;
#   2. the documented options (docs/containers.md): `capsule check` passes,
#      a run works;
#   3. a delegated cgroup (the documented line: the entrypoint as root):
#      `capsule check` names it, `--memory 64M` ends in a memory limit,
#      accounted from the cgroup;
#   4. the hostile suite (its `::default` variants) as uid 1500 with the
#      documented options, its test executable and helpers mounted read-only.
set -euo pipefail

[ "${1:-}" = --in-vm ] || { echo "usage: test-docker.sh --in-vm REPO STAGE HELPERS_DIR (see scripts/test-container.sh)" >&2; exit 2; }
repo=$2 stage=$3 helpers=$4
B=$stage/bin
cd /tmp
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # expect NAME STATUS PATTERN... -- COMMAND...: status and every pattern in its output
  local name=$1 want=$2; shift 2
  local pats=()
  while [ "$1" != -- ]; do pats+=("$1"); shift; done
  shift
  local out rc=0 t0=$SECONDS
  out=$(timeout 600 "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  echo "  [$name: exit $rc in $((SECONDS - t0)) s]"
  [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
  for p in "${pats[@]}"; do grep -qF -- "$p" <<<"$out" || fail "$name: no \`$p\` in its output"; done
}
t_all=$SECONDS
# dockerd on the VM's tmpfs, no bridge (every container runs --net=none),
# cgroups made directly (no systemd in the VM); it starts its own containerd.
# Debian's client by its path: /usr/local/bin may hold another docker.
mkdir -p /tmp/docker
D=(/usr/bin/docker --host unix:///tmp/docker/docker.sock)
# AppArmor as on a Debian host (test-container.sh mounted it already):
# dockerd then loads its docker-default profile.
mountpoint -q /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security || true
/usr/sbin/dockerd --host unix:///tmp/docker/docker.sock --data-root /tmp/docker/root --exec-root /tmp/docker/exec \
  --pidfile /tmp/docker/dockerd.pid --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
  --exec-opt native.cgroupdriver=cgroupfs --storage-driver=overlay2 >/tmp/docker/dockerd.log 2>&1 &
dockerd=$!
for _ in $(seq 300); do "${D[@]}" version >/dev/null 2>&1 && break; sleep 0.5; done
if ! "${D[@]}" version >/dev/null 2>&1; then
  tail -20 /tmp/docker/dockerd.log | sed 's/^/    dockerd: /'
  echo "FAIL: dockerd did not start"; exit 1
fi
echo "== docker $("${D[@]}" version --format '{{.Server.Version}}'), up in $((SECONDS - t_all)) s"
echo "== 0. the image: docker import of the base, docker build of deploy/container/Containerfile"
expect import 0 "sha256:" -- "${D[@]}" import "$stage/base.tar" localhost/capsule-base
# The classic builder (BuildKit is not in Debian's docker.io 20.10).
expect build 0 "Successfully tagged localhost/capsule" -- env DOCKER_BUILDKIT=0 "${D[@]}" build --network=none \
  --build-arg PROFILE=debug -f "$stage/ctx/deploy/container/Containerfile" -t localhost/capsule "$stage/ctx"
seccomp=$repo/deploy/seccomp/capsule-container.json
run=("${D[@]}" run --rm --net=none --tmpfs "/var/tmp:rw,exec,mode=1777")
as_user=(--user 1500:1500)
documented=(--security-opt "seccomp=$seccomp" --security-opt systempaths=unconfined --security-opt apparmor=unconfined)
image=localhost/capsule
# One container per option set: `capsule check`, then `capsule run ARGS`
# (each docker run costs 10-20 s in the emulated VM); their statuses
# printed as `[check: exit N]`, `[run: exit N]`.
both=(sh -c 'capsule check; echo "[check: exit $?]"; capsule run "$@"; echo "[run: exit $?]"' sh)
echo "== 1. docker's default options: capsule check names the option that fixes them"
# docker's profile refuses unshare(CLONE_NEWUSER) (EPERM) and clone3
# (ENOSYS): check names the seccomp profile, and so does the run's clone3
# error (its own words: "clone3, the supervisor's fork").
expect default 0 "FAIL container: inside a docker container" "--security-opt seccomp=deploy/seccomp/capsule-container.json" \
  "=> \`capsule run\` cannot work here" "[check: exit 1]" "capsule: error:" \
  "its seccomp profile refuses the sandbox's set-up (clone3, the supervisor's fork): start it with \`--security-opt seccomp=" \
  "[run: exit 125]" -- \
  "${run[@]}" "${as_user[@]}" "$image" "${both[@]}" -- /bin/true
echo "== 1b. the seccomp profile alone: the masked /proc is named next, with docker's option"
expect seccomp-only 0 "--security-opt systempaths=unconfined" "=> \`capsule run\` cannot work here" "[check: exit 1]" \
  "[run: exit 125]" -- "${run[@]}" "${as_user[@]}" --security-opt "seccomp=$seccomp" --security-opt apparmor=unconfined \
  "$image" "${both[@]}" -- /bin/true
echo "== 1c. without apparmor=unconfined: docker-default refuses mount, named"
expect apparmor 0 "its AppArmor profile refuses mount" "--security-opt apparmor=unconfined" "[run: exit 125]" -- \
  "${run[@]}" "${as_user[@]}" --security-opt "seccomp=$seccomp" --security-opt systempaths=unconfined "$image" \
  "${both[@]}" -- /bin/true
echo "== 2. the documented options"
# The read-only cgroup is named with its docker option (a warning).
expect documented 0 "warn container: inside a docker container" "--cap-add SYS_ADMIN" "=> \`capsule run\` can work here" \
  "[check: exit 0]" "hello from the sandbox" "capsule: exited with 0" "[run: exit 0]" -- \
  "${run[@]}" "${as_user[@]}" "${documented[@]}" "$image" "${both[@]}" -- /bin/echo hello from the sandbox
echo "== 3. a delegated cgroup: the entrypoint as root with --cap-add SYS_ADMIN"
expect cgroup 0 "ok   cgroup-source: runs get cgroup limits and accounting from own cgroup /sys/fs/cgroup/capsule" \
  "[check: exit 0]" "memory limit" "cgroup)" "[run: exit 123]" -- "${run[@]}" "${documented[@]}" --cap-add SYS_ADMIN \
  "$image" "${both[@]}" --memory 64M --wall-time 120s -- /usr/bin/tail /dev/zero
echo "== 4. the hostile suite as uid 1500, documented options"
# Left out as in test-container.sh (the host's root, the cgroup bombs),
# symlink_swap_race (nothing container-specific, only slow) and, for time,
# the `::strict` variants: the same attacks under capsule's strict policy,
# which docker's options do not change (the podman container runs them). The VM's /usr over the image's (python3 and the
# tools the tests use; the image is merged-/usr), the checkout (the
# suite's sources) and the executable read-only.
left_out=(setuid_binary fuse_ cgroup_ symlink_swap_race ::strict)
skips=()
for t in "${left_out[@]}"; do skips+=(--skip "$t"); done
while read -r t exe; do
  t0=$SECONDS rc=0
  "${run[@]}" "${as_user[@]}" "${documented[@]}" --env CAPSULE_TEST_STRICT=1 -v /usr:/usr:ro -v "$repo:$repo:ro" \
    -v "$B:$B:ro" -v "/var/tmp/capsule-test-bins:$helpers:ro" --entrypoint "$B/$exe" "$image" \
    --test-threads 2 "${skips[@]}" </dev/null 2>&1 | grep -v '^test .* ok$' || rc=$?
  echo "  [$t suite: $((SECONDS - t0)) s]"
  [ "$rc" = 0 ] || fail "the $t suite failed in the docker container"
done <"$stage/tests"
kill "$dockerd"
wait "$dockerd" || true
echo "test-docker.sh: $((SECONDS - t_all)) s"
[ "$fails" = 0 ] || { echo "test-docker.sh: $fails check(s) failed"; exit 1; }
echo "test-docker.sh: all passed"
