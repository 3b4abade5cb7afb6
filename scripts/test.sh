#!/usr/bin/env bash
# The README's test command: everything that needs no VM and no container,
# on this machine. Builds (with the system's libseccomp hidden), lints,
# checks formatting, runs the unit tests, the whole-process tests and the
# black-box suites that run the real binary as an unprivileged user (judge,
# layers, protocol, per-CPU front, hostile programs, `capsule isolate`,
# `capsule worker` on a real redis-server, agents), builds and installs the
# release packages, and runs the Python client's suite. About 5 minutes from
# a warm build on 2 CPUs, 7 from a fresh clone (docs/testing.md). Each stage
# prints its time; the last line sums them up with every skipped test and
# its reason, and what is left to the slow stages (scripts/test-slow.sh:
# the cgroup v2 VMs, containers, systemd, aarch64).
#
# Run it as root (the black-box tests create the unprivileged user
# `capsule-test` and drop to it with setpriv; capsule itself refuses root),
# or as an unprivileged user (the root-only checks then skip, each named in
# the summary). CAPSULE_TEST_STRICT=1 turns every skip of a feature that
# must exist into a failure (CI sets it). Extra arguments go to each
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust (rustup) first" >&2; exit 1; }
strict=${CAPSULE_TEST_STRICT:-0}
skip_log=$(mktemp /tmp/capsule-test-skips.XXXXXX)
chmod 644 "$skip_log"
export CAPSULE_TEST_SKIP_LOG=$skip_log
t_start=$SECONDS times=() current=""
summary() {
  local rc=$? n
  rm -f "$skip_log.sum"
  n=$(sort -u "$skip_log" | tee "$skip_log.sum" | wc -l)
  local skipped="skipped none"
  [ "$n" = 0 ] || skipped="skipped $n: $(paste -sd';' "$skip_log.sum" | sed 's/;/; /g')"
  local took="$(((SECONDS - t_start) / 60))m$(((SECONDS - t_start) % 60))s (${times[*]})"
  if [ "$rc" = 0 ]; then
    echo "test.sh: passed in $took; $skipped; left to scripts/test-slow.sh (VMs, as root): the cgroup v2 tests on two kernels, podman, kube, docker, systemd, aarch64"
  else
    echo "test.sh: FAILED in stage '$current' after $took; $skipped" >&2
  fi
  rm -f "$skip_log" "$skip_log.sum"
}
trap summary EXIT
# stage NAME COMMAND...: runs COMMAND, timed.
stage() {
  current=$1
  shift
  local t0=$SECONDS
  echo "=== $current"
  "$@"
  times+=("$current $((SECONDS - t0))s")
  echo "=== $current: $((SECONDS - t0)) s"
}
# lint NAME COMPONENT COMMAND...: a toolchain component's check (rustup's
# default profile has both); without the component a skip, in strict mode
# a failure like any other.
lint() {
  local name=$1 component=$2
  shift 2
  if cargo "$component" --version >/dev/null 2>&1; then
    stage "$name" cargo "$component" "$@"
  elif [ "$strict" = 1 ]; then
    echo "test.sh: cargo $component is not installed (rustup component add $component); strict mode needs it" >&2
    exit 1
  else
    echo "$name: cargo $component is not installed (rustup component add $component)" >>"$skip_log"
  fi
}

# Every test file is run by a stage here or in scripts/test-slow.sh (a new
# one left out of both would never run).
for t in crates/*/tests/*.rs; do
  n=$(basename "$t" .rs)
  grep -Eq -- "--test $n( |$)|\\b$n\\b.*cgroup_|\\\$1 == \"$n\"" scripts/test.sh scripts/test-slow.sh ||
    { echo "test.sh: $t is run by no stage (scripts/test.sh, scripts/test-slow.sh)" >&2; exit 1; }
done
# The debug build the black-box tests run; a dependency on the system's
# libseccomp fails it (scripts/without-libseccomp).
stage build scripts/without-libseccomp cargo build --workspace --all-targets
lint clippy clippy --workspace --all-targets -- -D warnings
lint format fmt --all -- --check
# (Not `--bins`: it would build the front end `capsule`, a no_std program
# linked without a C library, with the test harness, which cannot link; the
# other binaries are named, capsule-cli's and capsule-testkit's test helpers.)
# The cgroup v2 suite needs a delegated cgroup v2 hierarchy
# (scripts/test-slow.sh runs it in a VM); its degraded-mode tests
# (`degraded_*`, no delegation) run here.
stage tests cargo test --workspace --lib --test layout --bin capsule-cli --bin capsule-probe --bin capsule-bench \
  --bin capsule-libtest --test cli --test isolation --test filesystem --test server --test library --test landlock \
  --test seccomp --test layer --test layer_run --test shell --test netlog --test judging_io --test presets --test judge \
  --test agent --test egress --test explain --test mcp --test agent_preset --test session "$@"
stage degraded cargo test -p capsule-cli --test cgroups "$@" degraded_
# `capsule serve --per-cpu` (a pinned supervisor per CPU behind a front):
# the protocol's tests once more through the front, but those that look
# inside one supervisor process (threads, spares, filters),
# `--shared-network` (which --per-cpu refuses) and the per_cpu tests
# themselves (they ran above); the library (`Config::per_cpu`) the same way.
per_cpu() {
  CAPSULE_TEST_PER_CPU=1 cargo test -p capsule-cli --test server "$@" -- --skip serve_concurrent_runs_have_their_own_network \
    --skip serve_idle_spares_are_not_in_uninterruptible_sleep --skip served_runs_inherit_their_own_filter_and_no_other \
    --skip serve_loop_takes_short_turns_and_its_programs_do_not --skip per_cpu
  CAPSULE_TEST_PER_CPU=1 cargo test -p capsule-cli --test library "$@" -- --skip per_cpu
}
stage per-cpu per_cpu "$@"
# The hostile-program suite and `capsule isolate`; their cgroup cases
# (`cgroup_*`: fork and memory bombs, `--cg`) run in the slow stages' VMs.
stage hostile cargo test -p capsule-cli --test hostile "$@" -- --skip cgroup_
stage isolate cargo test -p capsule-cli --test isolate "$@" -- --skip cgroup_
# `capsule worker` on a redis-server the tests start (docs/scale-out.md).
stage worker cargo test -p capsule-cli --test worker "$@"
# The black-box suites of `capsule run` once more, served by agents (the
# warm supervisor `capsule run` reuses by default; the passes above fork a
# supervisor per run, which is what most of their checks are about).
stage agent env CAPSULE_TEST_AGENT=1 cargo test -p capsule-cli --test cli --test isolation --test filesystem \
  --test seccomp --test landlock --test shell --test layer_run --test judging_io --test netlog --test egress --test explain "$@"
# The release packages: one release build (libseccomp hidden again),
# scripts/package.sh's .deb and tarball checked, installed, used as the
# test user and purged (scripts/test-package.sh; root only); the arm64
# ones too where the cross toolchain is (README, "Architectures").
packages() {
  local archs=(x86_64)
  if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu &&
    command -v aarch64-linux-gnu-gcc >/dev/null; then
    archs+=(aarch64)
  elif [ "$strict" = 1 ]; then
    echo "test.sh: no aarch64 cross toolchain for the arm64 packages (rustup target add aarch64-unknown-linux-gnu; apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)" >&2
    return 1
  else
    echo "SKIP the arm64 packages: no aarch64 cross toolchain"
    echo "packages: the arm64 packages: no aarch64 cross toolchain (README, Architectures)" >>"$skip_log"
  fi
  scripts/without-libseccomp scripts/package.sh "${archs[@]}"
  CAPSULE_PACKAGE_BUILT=1 CAPSULE_PACKAGE_ARCHS="${archs[*]}" scripts/test-package.sh
}
stage packages packages
# The Python client capsule-sandbox: mypy --strict, its pytest suite against
# this tree's `capsule serve` as the test user, its wheel (the release
# binaries above) and sdist installed with pip and used with no capsule on
# PATH (python/ci.sh).
stage python python/ci.sh
