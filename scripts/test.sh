#!/usr/bin/env bash
# Runs capsule's whole test suite: unit tests, whole-process tests and the
# black-box tests that run the real binary as an unprivileged user, then the
# cgroup v2 tests inside ../shared/vm/cgroup2-vm (a VM with a pure, delegated
# cgroup v2 hierarchy: this kind of machine's own cgroups are hybrid).
#
# Run it as root (the black-box tests create the unprivileged user
# `capsule-test` and drop to it with setpriv; capsule itself refuses root;
# the VM needs root), or as an unprivileged user (the root-only tests and
# the VM stage then skip, with a reason).
# CAPSULE_TEST_STRICT=1 turns every skip into a failure where the feature
# must exist (CI sets it); CAPSULE_TEST_VM=0 leaves out the VM stage;
# CAPSULE_CI_VM_ALL=1 runs the whole suite in the VM, not only the cgroup
# tests. Extra arguments go to the host `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust (rustup) first" >&2; exit 1; }
strict=${CAPSULE_TEST_STRICT:-0}

cargo build --workspace --all-targets
# Lints: clippy's default set, every warning an error. It ships with the
# toolchain (rustup's default profile); without it the step is skipped, and
# in strict mode that is a failure like any other skip.
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets -- -D warnings
elif [ "$strict" = 1 ]; then
  echo "test.sh: cargo clippy is not installed (rustup component add clippy); strict mode needs the lint step" >&2
  exit 1
else
  echo "test.sh: skipping the lint step: cargo clippy is not installed (rustup component add clippy)" >&2
fi
# Formatting: rustfmt.toml's settings; a file rustfmt would change fails
# the suite (`cargo fmt --all` fixes it). Skipped like clippy without it.
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
elif [ "$strict" = 1 ]; then
  echo "test.sh: cargo fmt is not installed (rustup component add rustfmt); strict mode needs the format check" >&2
  exit 1
else
  echo "test.sh: skipping the format check: cargo fmt is not installed (rustup component add rustfmt)" >&2
fi
# (Not `--bins`: it would build the front end `capsule`, a no_std program
# linked without a C library, with the test harness, which cannot link; the
# other binaries are named, capsule-cli's and capsule-testkit's test helpers.
# The black-box tests run the binaries `cargo build` made above.)
# On this machine: everything but the cgroup v2 tests, which need a delegated
# cgroup v2 hierarchy and run in the VM below (they would only skip here, and
# a skip must not count as a pass); of those, the degraded-mode ones
# (`degraded_*`) run here, where there is no delegation. `server` and
# `library` are `capsule serve` and the library API (issue 4); their cgroup
# checks are the `server_*` tests of `cgroups`, run in the VM.
cargo test --workspace --lib --test layout --bin capsule-cli --bin capsule-probe --bin capsule-bench --bin capsule-libtest --test cli --test isolation --test filesystem --test server --test library --test landlock --test seccomp --test layer --test layer_run --test shell --test netlog --test judging_io --test presets --test judge --test agent "$@"
cargo test -p capsule-cli --test cgroups "$@" degraded_
# `capsule serve --per-cpu` (a pinned supervisor per CPU behind a front that
# shares the requests out): the protocol's tests once more, through the
# front. Left out: those that look inside one supervisor process (its
# threads, spares and filters), `--shared-network` (which --per-cpu
# refuses) and the per_cpu tests themselves (they ran above).
CAPSULE_TEST_PER_CPU=1 cargo test -p capsule-cli --test server "$@" -- --skip serve_concurrent_runs_have_their_own_network \
  --skip serve_idle_spares_are_not_in_uninterruptible_sleep --skip served_runs_inherit_their_own_filter_and_no_other \
  --skip serve_loop_takes_short_turns_and_its_programs_do_not --skip per_cpu
# The library (`Config::per_cpu`) the same way: tests/library.rs with capsule-libtest's sandboxes per CPU.
CAPSULE_TEST_PER_CPU=1 cargo test -p capsule-cli --test library "$@" -- --skip per_cpu
# The hostile-program suite (issue 5); its fork and memory bombs
# (`cgroup_*`) need cgroups and run in the VM stage below.
cargo test -p capsule-cli --test hostile "$@" -- --skip cgroup_
# `capsule isolate` (issue 26); its `--cg` cases (`cgroup_*`) run in the VM stage.
cargo test -p capsule-cli --test isolate "$@" -- --skip cgroup_
# `capsule worker` on a redis-server the tests start (docs/scale-out.md).
cargo test -p capsule-cli --test worker "$@"
# The black-box suites of `capsule run` once more, served by agents (the
# warm supervisor `capsule run` reuses by default; the passes above fork a
# supervisor per run, which is what most of their checks are about).
# Last of the cargo suites here: its agents idle out 3 s after.
CAPSULE_TEST_AGENT=1 cargo test -p capsule-cli --test cli --test isolation --test filesystem --test seccomp --test landlock --test shell --test layer_run --test judging_io --test netlog "$@"

# The release packages (issue 23): scripts/package.sh's .deb and tarball,
# built from this tree (a release build of capsule-cli), checked, installed,
# used as the test user and purged (scripts/test-package.sh; root only).
scripts/test-package.sh
# A clone builds without the system's libseccomp (issue 23): the seccomp
# filters are compiled in Rust.
scripts/test-fresh-build.sh

# The Python client capsule-sandbox (issue 25): mypy --strict, its pytest
# suite against this tree's `capsule serve` as the test user, its wheel and
# sdist installed with pip and used with no capsule on PATH (python/ci.sh;
# about a minute). Its cgroup tests run in the VM below.
python/ci.sh

# --- the cgroup v2 stage, in the VM -------------------------------------------
# As root there, the harness gives each capsule invocation a delegated scope
# of its own and runs capsule as the VM user; CAPSULE_TEST_CGROUPS=1 makes a
# missing cgroup feature a failure, not a skip. The VM shares this directory
# read-write (target/ is built above) and sees the host's root, toolchain
# included, read-only. Software emulation: about 1.5 minutes a kernel.
[ "${CAPSULE_TEST_VM:-1}" = 0 ] && exit 0
vm=../shared/vm/cgroup2-vm
why=""
if [ ! -x "$vm" ]; then
  why="$vm is missing"
elif [ "$(id -u)" != 0 ]; then
  why="the cgroup2 VM must be started as root"
elif ! command -v qemu-system-x86_64 >/dev/null || ! ls /boot/vmlinuz-* >/dev/null 2>&1; then
  why="QEMU or a kernel image is missing: apt-get install -y qemu-system-x86 linux-image-amd64 busybox-static cpio gzip"
fi
if [ -n "$why" ]; then
  if [ "$strict" = 1 ]; then
    echo "test.sh: the cgroup v2 tests cannot run: $why (CAPSULE_TEST_STRICT=1)" >&2
    exit 1
  fi
  echo "SKIP cgroup v2 tests in the VM: $why"
  exit 0
fi
if [ "${CAPSULE_CI_VM_ALL:-0}" = 1 ]; then
  vm_tests="--workspace"
  vm_hostile=true
else
  vm_tests="-p capsule-cli --test cgroups"
  # The hostile suite's fork and memory bombs.
  vm_hostile="cargo test --offline -p capsule-cli --test hostile cgroup_"
  # ... and `capsule isolate --cg` (issue 26).
  vm_hostile="$vm_hostile && cargo test --offline -p capsule-cli --test isolate cgroup_"
fi
vm_env=()
[ -n "${CARGO_TARGET_DIR:-}" ] && vm_env=(--env CARGO_TARGET_DIR)
# Twice where the host has both: on the oldest kernel in /boot (Debian 12's
# 6.1: a fresh cgroup per run) and on the newest (>= 6.12: run cgroups kept
# per slot and reused, docs/cgroup-reuse.md), so the cgroup tests check
# both ways. The VM boots the newest /boot/vmlinuz-* it sees: each run gets
# a private /boot holding only its kernel.
kernels=$(ls /boot/vmlinuz-* | sed 's|^/boot/vmlinuz-||' | sort -V)
oldest=$(head -n1 <<<"$kernels") newest=$(tail -n1 <<<"$kernels")
reuse_kernel() { [ "$(printf '%s\n' 6.12 "$1" | sort -V | head -n1)" = 6.12 ]; }
if ! reuse_kernel "$newest"; then
  if [ "$strict" = 1 ]; then
    echo "test.sh: no kernel >= 6.12 in /boot for the cgroup reuse tests (CAPSULE_TEST_STRICT=1; .ci/run installs Debian 12's linux-image-6.12.*-amd64-unsigned)" >&2
    exit 1
  fi
  echo "SKIP cgroup v2 tests with reused cgroups: no kernel >= 6.12 in /boot"
fi
for k in $(printf '%s\n' "$oldest" "$newest" | uniq); do
  echo "== cgroup v2 tests in $vm, Linux $k"
  unshare -m --propagation private -- bash -euo pipefail -c '
    boot=$(mktemp -d)
    mount -t tmpfs -o size=64m capsule-boot "$boot"
    cp "/boot/vmlinuz-$0" "$boot/"
    mount --bind "$boot" /boot
    rc=0
    "$@" || rc=$?
    umount /boot "$boot"
    rmdir "$boot"
    exit $rc' "$k" scripts/vm-retry "$vm" --as-root --timeout 1200 "${vm_env[@]}" -- bash -c \
    "uname -r; export CAPSULE_TEST_STRICT=1 CAPSULE_TEST_CGROUPS=1; cargo test --offline $vm_tests && $vm_hostile && python/ci.sh --cgroups"
done

# --- containers and the systemd user manager (issue 24), in the VM too -------
# capsule in Podman containers without --privileged: default options named
# by capsule check and run, the documented ones, the hostile and seccomp
# suites as the unprivileged user; then capsule run, judge and serve with
# limits through the user manager's delegated scope, and a manager absent,
# stopped or silent (docs/containers.md).
scripts/test-container.sh
scripts/test-systemd.sh
