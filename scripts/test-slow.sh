#!/usr/bin/env bash
# The slow test stages: what needs a VM or containers. Each stage is one
# command; with none named, all of them, as CI runs them (.ci/run):
#
#   sudo scripts/test-slow.sh cgroups     the cgroup v2 suite (tests/cgroups.rs),
#       the hostile suite's fork and memory bombs and `capsule isolate --cg`
#       (their `cgroup_*` tests) and the Python client's cgroup tests, as root
#       in scripts/vm/cgroup2-vm (a delegated cgroup v2 hierarchy; this kind
#       of machine's own cgroups are hybrid), twice: on the oldest kernel in
#       /boot (Debian 12's 6.1: a fresh cgroup per run) and on the newest
#       (>= 6.12: run cgroups kept per slot and reused, docs/cgroup-reuse.md)
#   sudo scripts/test-slow.sh containers  capsule in Podman and Docker containers
#       without --privileged, the image of deploy/container/Containerfile and
#       deploy/kubernetes under podman kube play (scripts/test-container.sh,
#       docs/containers.md), in the VM on the newest kernel
#   sudo scripts/test-slow.sh systemd     capsule through a systemd user manager's
#       delegated scopes (scripts/test-systemd.sh), in the VM booting systemd
#   sudo scripts/test-slow.sh aarch64     capsule on aarch64: the workspace
#       cross-built here (--target aarch64-unknown-linux-gnu, static), its
#       unit tests (capsule, capsule-nolibc) and the black-box suites of
#       isolation, cgroups, seccomp, layers and the judge run as root in
#       scripts/vm/cgroup2-vm --arch aarch64 (Debian 12's arm64 kernel and
#       userland under QEMU's emulation; scripts/vm/aarch64-rootfs makes the
#       userland once), capsule as the VM's unprivileged user
#
# All of them boot four VMs: the newest kernel's runs the cgroup tests and
# then the containers in one boot. The test executables are built here once
# (`cargo build --workspace --all-targets`, as scripts/test.sh does) and run
# as they are in the VMs, no cargo there. Each stage prints its time, the
# last line all of them (docs/testing.md has the figures).
#
# Root only (QEMU, podman as root in the VM). CAPSULE_TEST_STRICT=1: a stage
# that cannot run is a failure, not a skip. CAPSULE_VM_ALL=1: the cgroup
# stage runs every test executable of the workspace in its VMs, not only
# the cgroup ones.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
strict=${CAPSULE_TEST_STRICT:-0}
vm=$repo/scripts/vm/cgroup2-vm

# --- in the VM (as root): the cgroup tests, then optionally the containers ---
if [ "${1:-}" = --in-vm ]; then
  list=$2
  shift 2
  echo "== in the VM: Linux $(uname -r)"
  export CAPSULE_TEST_STRICT=1 CAPSULE_TEST_CGROUPS=1
  # The executables copied off the 9p share into the VM's memory first, the
  # workspace's binaries beside them (where the harness looks): page faults
  # on a binary read over 9p count as the reader's system time, which the
  # CPU accounting tests measure.
  bins=/var/tmp/capsule-vm-bins
  # The aarch64 VM's root is an overlay (its userland over 9p): the
  # layers' overlayfs cannot have its upper directory there, so /var/tmp
  # (the tests' scratch) is a tmpfs, as on a machine's own disk.
  [ "$(uname -m)" = x86_64 ] || mount -t tmpfs -o mode=1777 tmpfs /var/tmp
  mkdir -p "$bins"
  built=$(dirname "$(dirname "$(head -n1 "$list" | cut -d' ' -f1)")")
  for b in capsule capsule-cli capsule-probe capsule-libtest capsule-bench; do cp "$built/$b" "$bins/"; done
  echo "-- $(uname -m): $(wc -l <"$list") test executables"
  # Every executable runs, the failed ones named at the end.
  failed=()
  # The arm64 package (the aarch64 stage), installed and used as the VM's
  # user, before the tests enable controllers in the delegated cgroup.
  if [ -n "${CAPSULE_VM_DEB:-}" ]; then
    dpkg -i "$CAPSULE_VM_DEB" >/dev/null
    got=$(/.cgroup2-vm/as-user /usr/bin/capsule run -q -- /bin/hostname) || got="failed ($?)"
    [ "$got" = capsule ] || failed+=("the-arm64-package")
    echo "-- $(basename "$CAPSULE_VM_DEB"): installed; capsule run -- hostname as $CGROUP2_VM_USER: $got"
  fi
  while read -r exe filter; do
    t0=$SECONDS
    cp "$exe" "$bins/"
    # Run where cargo runs them: the package's directory.
    # shellcheck disable=SC2086 # FILTER: the test harness's arguments, words
    (cd crates/capsule-cli && "$bins/$(basename "$exe")" --color never $filter) ||
      failed+=("$(basename "${exe%-*}")")
    echo "-- $(basename "${exe%-*}") ${filter:-}: $((SECONDS - t0)) s"
  done <"$list"
  [ ${#failed[@]} = 0 ] || { echo "== FAILED in the VM: ${failed[*]}" >&2; exit 1; }
  # The Python client's cgroup tests: on x86_64 (the aarch64 root has no
  # pytest; the client speaks to capsule's socket, the same on both).
  if [ "$(uname -m)" = x86_64 ]; then
    t0=$SECONDS
    python/ci.sh --cgroups
    echo "-- python --cgroups: $((SECONDS - t0)) s"
  fi
  if [ "${1:-}" = containers ]; then
    # The host makes the image's base from now on (not during the cgroup
    # tests: its CPU would count in the VM's measurements).
    touch "$2/start-base"
    bash scripts/test-container.sh --in-vm "$2" "$3"
  fi
  exit 0
fi

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(cgroups containers systemd aarch64)
for s in "${stages[@]}"; do
  case $s in cgroups | containers | systemd | aarch64) ;; *)
    echo "test-slow.sh: unknown stage '$s' (stages: cgroups containers systemd aarch64; see the head of this file)" >&2
    exit 2
    ;;
  esac
done
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
t_start=$SECONDS times=()
finish() {
  local rc=$?
  echo "test-slow.sh: $([ $rc = 0 ] && echo passed || echo FAILED) in $(((SECONDS - t_start) / 60))m$(((SECONDS - t_start) % 60))s (${times[*]})"
}
trap finish EXIT
timed() { # timed NAME COMMAND...
  local name=$1 t0=$SECONDS
  shift
  echo "=== $name"
  "$@"
  times+=("$name $((SECONDS - t0))s")
  echo "=== $name: $((SECONDS - t0)) s"
}
cannot() {
  if [ "$strict" = 1 ]; then echo "test-slow.sh: $1 (CAPSULE_TEST_STRICT=1)" >&2; exit 1; fi
  echo "SKIP the slow stages ${stages[*]}: $1"
  exit 0
}
[ "$(id -u)" = 0 ] || cannot "they must be started as root (QEMU; podman as root in the VM)"
command -v qemu-system-x86_64 >/dev/null && ls /boot/vmlinuz-* >/dev/null 2>&1 ||
  cannot "QEMU or a kernel image is missing: apt-get install -y qemu-system-x86 linux-image-amd64 busybox-static cpio gzip"
if want containers; then
  command -v podman >/dev/null || cannot "podman is not installed (apt-get install podman uidmap)"
  { [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ]; } || cannot "docker is not installed (apt-get install docker.io)"
  command -v mmdebstrap >/dev/null || cannot "mmdebstrap is not installed (apt-get install mmdebstrap)"
fi
! want systemd || [ -x /lib/systemd/systemd ] || cannot "systemd is not installed (the VM boots the host's)"
if want aarch64; then
  for tool in qemu-system-aarch64 aarch64-linux-gnu-gcc mmdebstrap arch-test; do
    command -v "$tool" >/dev/null || cannot "$tool is missing for the aarch64 stage (README, \"Architectures\": apt-get install qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross mmdebstrap arch-test qemu-user-static binfmt-support)"
  done
fi

# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
tdir=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
if want cgroups || want containers || want systemd; then timed build cargo build --workspace --all-targets; fi

# The test executables, as cargo built them: `EXE [FILTER]` a line.
list=$tdir/slow-tests.list
if want cgroups || want containers; then
  if [ "${CAPSULE_VM_ALL:-0}" = 1 ]; then sel=(--workspace); else sel=(-p capsule-cli --test cgroups --test hostile --test isolate); fi
  cargo test --offline -q "${sel[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        print(m["target"]["name"], m["executable"])' >"$tdir/slow-tests.all"
  if [ "${CAPSULE_VM_ALL:-0}" = 1 ]; then
    cut -d' ' -f2 "$tdir/slow-tests.all" >"$list"
  else
    # The cgroup suite whole; of the others, their cgroup cases.
    awk '$1 == "cgroups" { print $2 } $1 == "hostile" || $1 == "isolate" { print $2, "cgroup_" }' "$tdir/slow-tests.all" >"$list"
  fi
  [ "$(wc -l <"$list")" -ge 3 ] || { echo "test-slow.sh: no test executables found (cargo test --no-run)" >&2; exit 1; }
fi

# The kernels: the oldest in /boot and the newest, which must be >= 6.12.
kernels=$(find /boot -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V)
oldest=$(head -n1 <<<"$kernels") newest=$(tail -n1 <<<"$kernels")
if [ "$(printf '%s\n' 6.12 "$newest" | sort -V | head -n1)" != 6.12 ]; then
  [ "$strict" = 1 ] && { echo "test-slow.sh: no kernel >= 6.12 in /boot for the cgroup reuse tests (.ci/run installs Debian 12's linux-image-6.12.*-amd64-unsigned)" >&2; exit 1; }
  echo "SKIP the cgroup tests with reused cgroups: no kernel >= 6.12 in /boot"
fi

# The VM with the cgroup tests on kernel $1, then the containers if $2 is
# `containers` (the stage prepared by scripts/test-container.sh --prepare).
cgroup_vm() {
  local k=$1 extra=()
  [ "${2:-}" != containers ] || extra=(containers "$stage" "$tdir/x86_64-unknown-linux-gnu/tmp")
  "$vm" --kernel "$k" --as-root --timeout 3600 --env CAPSULE_VM_ALL -- bash scripts/test-slow.sh --in-vm "$list" "${extra[@]}"
}
# The containers' stage: binaries and the image's build context staged
# (a build meanwhile must not change them), the image's base made on the
# host while the VM runs (once the VM asks for it).
containers_prepare() {
  stage=$tdir/container-test
  scripts/test-container.sh --prepare "$stage"
  scripts/test-container.sh --base "$stage" &
  base_job=$!
}
containers_done() {
  local rc=$1
  touch "$stage/start-base" "$stage/vm-done"
  wait "$base_job" || true
  rm -rf "$stage"
  return "$rc"
}
with_containers() { # the newest kernel's VM: cgroup tests, then containers
  containers_prepare
  local rc=0
  if want cgroups; then cgroup_vm "$newest" containers || rc=$?; else
    touch "$stage/start-base"
    "$vm" --kernel "$newest" --as-root --timeout 2700 -- bash scripts/test-container.sh --in-vm "$stage" \
      "$tdir/x86_64-unknown-linux-gnu/tmp" || rc=$?
  fi
  containers_done "$rc"
}

if want cgroups && [ "$oldest" != "$newest" ]; then timed "cgroups-$oldest" cgroup_vm "$oldest"; fi
if want containers; then
  timed "$(want cgroups && echo "cgroups+containers" || echo containers)-$newest" with_containers
elif want cgroups; then
  timed "cgroups-$newest" cgroup_vm "$newest"
fi
if want systemd; then timed systemd scripts/test-systemd.sh; fi

# --- aarch64: cross-built here, run in the arm64 VM ---------------------------
# The suites: the unit tests of the syscall layer and the policy compiler
# (capsule, capsule-nolibc) and the black-box ones of isolation, cgroups
# limits and accounting, seccomp verdicts, layers and the judge.
aarch64_stage() {
  local a64=aarch64-unknown-linux-gnu list=$tdir/aarch64-tests.list
  rustup target list --installed 2>/dev/null | grep -qx $a64 ||
    { echo "test-slow.sh: the Rust standard library for $a64 is not installed (rustup target add $a64; README, \"Architectures\")" >&2; return 1; }
  # The userland (made once; a fresh machine takes minutes of qemu-user)
  # while the cross build runs.
  local t0=$SECONDS rootfs_log=$tdir/aarch64-rootfs.log rootfs
  scripts/vm/aarch64-rootfs >"$rootfs_log" 2>&1 &
  rootfs=$!
  timed "aarch64 build" cargo build --workspace --all-targets --target $a64
  wait "$rootfs" || { cat "$rootfs_log" >&2; echo "test-slow.sh: scripts/vm/aarch64-rootfs failed" >&2; return 1; }
  times+=("aarch64 rootfs (beside the build) $((SECONDS - t0))s")
  cargo test --offline -q --workspace --no-run --target $a64 --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
# In this order: the unit tests first (the quickest word on the syscall layer).
want = [("lib", "capsule"), ("lib", "capsule_nolibc"), ("test", "seccomp"), ("test", "isolation"), ("test", "cgroups"),
        ("test", "layer"), ("test", "layer_run"), ("test", "judge")]
found = {}
for m in map(json.loads, sys.stdin):
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        found[(t["kind"][0], t["name"].replace("-", "_"))] = m["executable"]
# layer_run without the layers of the whole root (--root): the VM'"'"'s root
# is its userland over 9p under an overlay, no real machine'"'"'s, and a layer
# of all of it outlasts any timeout under emulation (scripts/test.sh runs
# them on the host).
# judge: one test per path of a judgement (compile and run, time, memory
# and seccomp verdicts, a checker, an interactor): each compiles its C++
# under emulation, the whole suite takes 8 minutes there (the host runs it).
args = {("test", "layer_run"): " --skip a_root_layer_changes_system_files_in_the_layer_only --skip dpkg_installs_a_package_into_a_root_layer",
        ("test", "judge"): " aplusb_ok_is_accepted aplusb_tle aplusb_mle aplusb_sys_names_the_call checker_program guess_ok"}
for w in want:
    if w in found:
        print(found[w] + args.get(w, ""))' >"$list"
  [ "$(wc -l <"$list")" = 8 ] || { echo "test-slow.sh: expected 8 aarch64 test executables, found: $(cut -d' ' -f1 "$list" | xargs)" >&2; return 1; }
  # The arm64 package, as scripts/test.sh made it (else made here).
  local version
  version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
  export CAPSULE_VM_DEB=$tdir/package/capsule_${version}_arm64.deb
  [ -f "$CAPSULE_VM_DEB" ] || timed "aarch64 package" scripts/package.sh aarch64
  # The target directory shared too: the executables run from there.
  timed "aarch64 VM" "$vm" --arch aarch64 --as-root --timeout 3600 --share "$tdir" --env CAPSULE_VM_DEB \
    -- bash scripts/test-slow.sh --in-vm "$list"
}
if want aarch64; then timed aarch64 aarch64_stage; fi
