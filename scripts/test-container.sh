#!/usr/bin/env bash
# capsule inside Podman containers without --privileged (issue 24,
# docs/containers.md), end to end: Debian's podman runs as root inside
# scripts/vm/cgroup2-vm (this machine's own cgroups are hybrid, which
# crun refuses), each container on the host's root as an overlay
# (`--rootfs /:O`: no image, no registry), capsule in it as the VM's
# unprivileged user. Checked there:
#   1. podman's default options: `capsule check` fails and names the
#      options that fix it; `capsule run` fails naming the same options;
#   2. each documented option alone is not enough (the least set);
#   3. the documented options: `capsule check` passes, runs work;
#   4. AppArmor (securityfs mounted, podman's containers-default profile):
#      runs fail naming `apparmor=unconfined`, which fixes them;
#   5. a delegated cgroup (root, deploy/container/entrypoint.sh,
#      unmask=ALL): `--memory` is enforced with cgroup accounting;
#   6. the hostile suite as the unprivileged user in a container started
#      with the documented options (not the seccomp suite: it checks that
#      `--seccomp none` leaves a process without any filter, and a
#      container's own filter is always there);
#   7. deploy/container/Containerfile built on a base made with mmdebstrap
#      (here, as root, while the VM runs 1-6) and imported: a run and a
#      memory limit from the image;
#   8. deploy/kubernetes played with that image by podman kube play, its
#      workers taking jobs from a real redis-server (scripts/test-kube.sh);
#   9. docker: scripts/test-docker.sh in the same VM (Debian's docker.io,
#      the same image built with docker, the documented docker lines).
# Run as root: `sudo scripts/test-slow.sh containers` (this script with no
# arguments does that), after which a missing podman or VM is a failure
# under CAPSULE_TEST_STRICT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --in-vm ]; then
  B=$2/bin repo=$PWD
  uid=$(id -u "$CGROUP2_VM_USER") gid=$(id -g "$CGROUP2_VM_USER")
  P=(podman --root /tmp/podman/root --runroot /tmp/podman/run --cgroup-manager=cgroupfs --events-backend=file)
  seccomp=$PWD/deploy/seccomp/capsule-container.json
  # /var/tmp on a tmpfs: a --layer directory cannot be on the container's
  # own overlay root (overlayfs refuses an overlay as the upper layer).
  run=("${P[@]}" run --rm --net=none --tmpfs /var/tmp:rw,exec,mode=1777,notmpcopyup)
  as_user=(--user "$uid:$gid")
  documented=(--security-opt "seccomp=$seccomp" --security-opt 'unmask=/proc/*')
  entrypoint=$PWD/deploy/container/entrypoint.sh
  # Not the checkout: conmon leaves an `oom` file in the directory podman
  # runs in when a container's cgroup saw an OOM kill.
  cd /tmp
  fails=0
  fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
  expect() { # expect NAME STATUS PATTERN... -- COMMAND...: status and every pattern in its output
    local name=$1 want=$2; shift 2
    local pats=()
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    local out rc=0 t0=$SECONDS
    out=$("$@" 2>&1) || rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    echo "  [$name: exit $rc in $((SECONDS - t0)) s]"
    [ "$rc" = "$want" ] || fail "$name: exit status $rc, expected $want"
    for p in "${pats[@]}"; do grep -qF -- "$p" <<<"$out" || fail "$name: no \`$p\` in its output"; done
  }
  # The image from the base the host made meanwhile (mmdebstrap, no
  # registry), a run and a limit in it.
  image_checks() {
    local B=$1 run=() opts=(); shift
    while [ "$1" != -- ]; do run+=("$1"); shift; done
    shift; opts=("$@")
    local t0=$SECONDS
    while [ ! -e "$B/../base.tar" ] && [ ! -e "$B/../base.failed" ] && [ $((SECONDS - t0)) -lt 600 ]; do sleep 2; done
    [ -e "$B/../base.tar" ] || { fail "no base root from mmdebstrap: $(cat "$B/../base.failed" 2>/dev/null)"; return; }
    echo "  [the base waited for: $((SECONDS - t0)) s]"
    # One read through the VM's 9p share, then the import from its tmpfs.
    expect copy-base 0 "" -- cp "$B/../base.tar" /tmp/base.tar
    expect import 0 "" -- "${P[@]}" import --quiet /tmp/base.tar localhost/capsule-base
    rm -f /tmp/base.tar
    expect build 0 "COMMIT localhost/capsule" -- "${P[@]}" build --layers=false --network=none --build-arg PROFILE=debug \
      -f "$B/../ctx/deploy/container/Containerfile" -t localhost/capsule "$B/../ctx"
    expect image-run 0 "hello from the image" "capsule: exited with 0" -- \
      "${run[@]}" "${opts[@]}" localhost/capsule capsule run -- /bin/echo hello from the image
    expect image-memory 123 "memory limit" "cgroup)" -- "${run[@]}" --security-opt "seccomp=$seccomp" \
      --security-opt unmask=ALL --security-opt apparmor=unconfined localhost/capsule \
      capsule run --memory 64M --wall-time 120s -- /usr/bin/tail /dev/zero
  }
  echo "== 1. podman's default options: capsule check and capsule run name the options that fix them"
  expect default-check 1 "FAIL container: inside a podman container" "--security-opt seccomp=deploy/seccomp/capsule-container.json" \
    "--security-opt unmask=/proc/*" "=> \`capsule run\` cannot work here" -- \
    "${run[@]}" "${as_user[@]}" --rootfs /:O "$B/capsule" check
  expect default-run 125 "sethostname failed: Operation not permitted" "--security-opt seccomp=deploy/seccomp/capsule-container.json" \
    "--security-opt unmask=/proc/*" -- "${run[@]}" "${as_user[@]}" --rootfs /:O "$B/capsule" run -- /bin/true
  echo "== 2. each option alone is not enough"
  expect seccomp-only 125 "creating the run's /proc" "--security-opt unmask=/proc/*" -- \
    "${run[@]}" "${as_user[@]}" --security-opt "seccomp=$seccomp" --rootfs /:O "$B/capsule" run -- /bin/true
  expect unmask-only 125 "sethostname failed" "--security-opt seccomp=deploy/seccomp/capsule-container.json" -- \
    "${run[@]}" "${as_user[@]}" --security-opt 'unmask=/proc/*' --rootfs /:O "$B/capsule" run -- /bin/true
  echo "== 3. the documented options"
  expect documented-check 0 "warn container: inside a podman container" "its cgroup is read-only" "=> \`capsule run\` can work here" -- \
    "${run[@]}" "${as_user[@]}" "${documented[@]}" --rootfs /:O "$B/capsule" check
  expect documented-run 0 "hello from the sandbox" "capsule: exited with 0" -- \
    "${run[@]}" "${as_user[@]}" "${documented[@]}" --rootfs /:O "$B/capsule" run -- /bin/echo hello from the sandbox
  echo "== 4. AppArmor (podman's containers-default profile)"
  if mount -t securityfs securityfs /sys/kernel/security 2>/dev/null && [ -d /sys/kernel/security/apparmor ]; then
    expect apparmor-run 125 "its AppArmor profile refuses mount" "--security-opt apparmor=unconfined" -- \
      "${run[@]}" "${as_user[@]}" "${documented[@]}" --rootfs /:O "$B/capsule" run -- /bin/true
    expect apparmor-check 1 "FAIL container" "--security-opt apparmor=unconfined" -- \
      "${run[@]}" "${as_user[@]}" "${documented[@]}" --rootfs /:O "$B/capsule" check
    documented+=(--security-opt apparmor=unconfined)
    expect apparmor-unconfined 0 "capsule: exited with 0" -- \
      "${run[@]}" "${as_user[@]}" "${documented[@]}" --rootfs /:O "$B/capsule" run -- /bin/true
  else
    fail "AppArmor is not available in the VM (securityfs, /sys/kernel/security/apparmor)"
  fi
  echo "== 5. a delegated cgroup: root, deploy/container/entrypoint.sh, unmask=ALL"
  delegated=("${run[@]}" --env "CAPSULE_USER=$CGROUP2_VM_USER" --security-opt "seccomp=$seccomp" --security-opt unmask=ALL
    --security-opt apparmor=unconfined --rootfs /:O "$entrypoint")
  expect cgroup-check 0 "ok   cgroup-source: runs get cgroup limits and accounting from own cgroup /sys/fs/cgroup/capsule" -- \
    "${delegated[@]}" "$B/capsule" check
  expect cgroup-memory 123 "memory limit" "cgroup)" -- "${delegated[@]}" "$B/capsule" run --memory 64M -- "$B/capsule-probe" touch-mib 200
  expect cgroup-memory-ok 0 "touched_mib=20" "cgroup)" -- "${delegated[@]}" "$B/capsule" run --memory 64M -- "$B/capsule-probe" touch-mib 20
  echo "== 6. the hostile suite as uid $uid, documented options"
  # Left out: what needs the host's root (setuid_binary, fuse_* with
  # fusectl) and the cgroup bombs, which run in the VM stage's cgroup tests;
  # and the strict policy's kills of calls the container's own profile
  # refuses (its errno outranks capsule's user notification: the call fails
  # with EPERM/ENOSYS and the run is killed on a later call,
  # docs/containers.md).
  left_out=(setuid_binary fuse_ cgroup_ bpf::strict io_uring::strict perf_event_open::strict userfaultfd::strict)
  skips=()
  for t in "${left_out[@]}"; do skips+=(--skip "$t"); done
  # The suite's helper programs, built on the host (gcc in the emulated VM
  # takes minutes), where a test process not run by root looks for them:
  # cargo's CARGO_TARGET_TMPDIR ($3, its path compiled in).
  while read -r t exe; do
    t0=$SECONDS rc=0
    # symlink_swap_race: 10 + 10 runs, not 100 + 100 (11 minutes a policy
    # in the emulated VM, docs/containers.md).
    "${run[@]}" "${as_user[@]}" "${documented[@]}" --env CAPSULE_TEST_STRICT=1 --env CAPSULE_TEST_RACE_RUNS=10 \
      -v "/var/tmp/capsule-test-bins:$3:ro" --rootfs /:O "$B/$exe" \
      --test-threads 2 "${skips[@]}" < /dev/null 2>&1 | grep -v '^test .* ok$' || rc=$?
    echo "  [$t suite: $((SECONDS - t0)) s]"
    [ "$rc" = 0 ] || fail "the $t suite failed in the container"
  done < "${B%/bin}/tests"
  echo "== 7. the image of deploy/container/Containerfile"
  image_checks "$B" "${run[@]}" -- "${as_user[@]}" "${documented[@]}"
  echo "== 8. deploy/kubernetes played by podman kube play with the image (scripts/test-kube.sh)"
  # podman 4.3's kube play gives every container containers-default's
  # AppArmor profile and reads neither the manifest's unconfined annotation
  # nor appArmorProfile (a kubelet reads both): AppArmor is off for the play
  # (podman sees none without securityfs), then back for docker.
  aa_off=false
  if mountpoint -q /sys/kernel/security; then umount -l /sys/kernel/security && aa_off=true; fi
  if "${P[@]}" image exists localhost/capsule; then
    bash "$repo/scripts/test-kube.sh" || fail "deploy/kubernetes under podman kube play"
  else
    fail "deploy/kubernetes: no image localhost/capsule from step 7"
  fi
  if $aa_off; then mount -t securityfs securityfs /sys/kernel/security || fail "securityfs not mounted again"; fi
  echo "== 9. docker (scripts/test-docker.sh)"
  bash "$repo/scripts/test-docker.sh" --in-vm "$repo" "$2" "$3" || fail "docker (scripts/test-docker.sh)"
  [ "$fails" = 0 ] || { echo "test-container.sh: $fails check(s) failed"; exit 1; }
  echo "test-container.sh: all passed"
  exit 0
fi

# --- on the host ---------------------------------------------------------------
# `sudo scripts/test-slow.sh containers` boots the VM (and shares its boot
# with the cgroup tests when it runs both); it calls the two steps below.
case ${1:-} in
  --prepare) stage=$2 ;;
  --base) stage=$2 ;;
  "") exec scripts/test-slow.sh containers ;;
  *) echo "usage: scripts/test-container.sh [--prepare STAGE | --base STAGE | --in-vm STAGE HELPERS_DIR]" >&2; exit 2 ;;
esac
if [ "$1" = --base ]; then
  # The image's base, made while the VM runs, once the VM asks for it
  # (STAGE/start-base): Debian's essential packages and passwd (useradd),
  # no documentation.
  while [ ! -e "$stage/start-base" ]; do sleep 1; done
  [ ! -e "$stage/vm-done" ] || exit 0
  t=$SECONDS
  if mmdebstrap --quiet --variant=essential --include=passwd,mount --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$stage/base.tmp.tar" >"$stage/base.log" 2>&1; then
    chmod a+r "$stage/base.tmp.tar" && mv "$stage/base.tmp.tar" "$stage/base.tar"
    echo "test-container.sh: the image's base made in $((SECONDS - t)) s ($(du -m "$stage/base.tar" | cut -f1) MB)"
  else
    tail -n 5 "$stage/base.log" >"$stage/base.failed"
  fi
  exit 0
fi
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
target=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/debug
rm -rf "$stage" && mkdir -p "$stage/bin"
cp "$target/capsule" "$target/capsule-cli" "$target/capsule-probe" "$stage/bin/"
for t in hostile; do
  exe=$(cargo test --offline -q -p capsule-cli --test "$t" --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["test"\]' | grep "\"name\":\"$t\"" | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
  [ -x "$exe" ] || { echo "test-container.sh: no test executable for $t" >&2; exit 1; }
  cp "$exe" "$stage/bin/"
  echo "$t $(basename "$exe")" >> "$stage/tests"
  # Its helper programs, built as root into /var/tmp/capsule-test-bins
  # (gcc -static; a test that needs them builds them): the container
  # mounts them where a test not run by root finds them.
  "$exe" --exact bpf::default -q >/dev/null
done
# The image's build context (deploy/container/Containerfile): the
# checkout's layout, the binaries without their debug information.
mkdir -p "$stage/ctx/deploy/container" "$stage/ctx/target/x86_64-unknown-linux-gnu/debug"
cp deploy/container/Containerfile deploy/container/entrypoint.sh "$stage/ctx/deploy/container/"
for b in capsule capsule-cli; do
  objcopy --strip-debug "$target/$b" "$stage/ctx/target/x86_64-unknown-linux-gnu/debug/$b"
done
chmod -R a+rX "$stage"
