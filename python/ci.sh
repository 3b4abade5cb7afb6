#!/usr/bin/env bash
# The Python client's checks (issue 25), a stage of scripts/test.sh:
#   1. mypy --strict on the package, its tests and tools;
#   2. the pytest suite against the checkout's real `capsule serve`
#      (the debug build test.sh made; $CAPSULE_BIN), as the unprivileged
#      user capsule-test when root (capsule refuses root);
#   3. the platform wheel and the sdist (build_wheel.py, from the release
#      binaries of scripts/package.sh when built, else the debug ones),
#      each installed with pip into a fresh venv and used with no capsule on
#      PATH and no $CAPSULE_BIN: the wheel runs its bundled binary; the
#      sdist finds none, then finds the one put on PATH.
# Needs python3 (>= 3.9) with venv, pytest, mypy, setuptools and wheel
# (.ci/run installs Debian's). CAPSULE_PY_TESTS picks tests (pytest -k).
# The cgroup v2 tests (memory-limit, cpu-time-limit) need delegated
# cgroups: scripts/test-slow.sh runs `ci.sh --cgroups` in its VMs.
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
tdir=${CARGO_TARGET_DIR:-../target}
triple=x86_64-unknown-linux-gnu
debug=$tdir/$triple/debug
release=$tdir/$triple/release
user=capsule-test
cgroups=false
[ "${1:-}" = --cgroups ] && cgroups=true

# Without them the stage is skipped, saying why; a failure under
# CAPSULE_TEST_STRICT=1 (CI), like test.sh's other skips.
for m in pytest mypy venv; do
  if ! "$py" -c "import $m" 2>/dev/null; then
    why="$py has no $m module (apt-get install python3-pytest mypy python3-venv python3-pip python3-setuptools python3-wheel)"
    [ "${CAPSULE_TEST_STRICT:-0}" = 1 ] && { echo "python/ci.sh: $why (CAPSULE_TEST_STRICT=1)" >&2; exit 1; }
    echo "SKIP the Python client's tests: $why"
    exit 0
  fi
done

# Everything the test user runs, world-readable under /var/tmp (the
# checkout may be in a home only root can read).
stage=$(mktemp -d /var/tmp/capsule-py.XXXXXX)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
mkdir "$stage/bin" "$stage/dist" "$stage/bare"
for b in capsule capsule-cli; do install -m 755 "$debug/$b" "$stage/bin/$b"; done
cp -r src tests pyproject.toml bench.py build_wheel.py "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +

as_user() {
  if [ "$(id -u)" = 0 ]; then
    id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" ${CAPSULE_PY_GROUPS:---clear-groups} -- "$@"
  else
    "$@"
  fi
}
pytest_args=(-p no:cacheprovider -q --durations=5 -o "cache_dir=$stage/.cache")
[ -n "${CAPSULE_PY_TESTS:-}" ] && pytest_args+=(-k "$CAPSULE_PY_TESTS")
base_env=(env -i PATH=/usr/bin:/bin HOME="$stage" LANG=C.UTF-8 CAPSULE_TEST_STRICT="${CAPSULE_TEST_STRICT:-0}")

if $cgroups; then
  # In scripts/test-slow.sh's cgroup2 VM, as root there: a delegated scope of
  # the VM user's own (as the Rust harness gives each capsule), the shell
  # moved into it, then only the tests that need cgroups, which must pass.
  [ "${CGROUP2_VM:-}" = 1 ] && [ "$(id -u)" = 0 ] || { echo "python/ci.sh --cgroups: run it as root in the cgroup2 VM" >&2; exit 1; }
  user=${CGROUP2_VM_USER:-cgvm}
  d=/sys/fs/cgroup/delegated
  for c in cpu memory pids cpuset; do
    grep -qw "$c" "$d/cgroup.subtree_control" || echo "+$c" >"$d/cgroup.subtree_control"
  done
  scope=$d/capsule-py-$$
  mkdir "$scope"
  chown "$user:" "$scope" "$scope/cgroup.procs" "$scope/cgroup.threads" "$scope/cgroup.subtree_control"
  echo $$ >"$scope/cgroup.procs"
  chmod -R a+rX "$stage"
  cd "$stage"
  CAPSULE_PY_GROUPS=--init-groups as_user "${base_env[@]}" CAPSULE_TEST_CGROUPS=1 CAPSULE_BIN="$stage/bin/capsule" \
    PYTHONPATH="$stage/src" "$py" -m pytest "${pytest_args[@]}" -m cgroups -rs tests
  exit 0
fi

echo "== python: mypy --strict"
(cd "$stage" && MYPYPATH=src:tests "$py" -m mypy --strict --cache-dir /dev/null src/capsule_sandbox tests bench.py build_wheel.py)

echo "== python: pytest against $debug/capsule serve"
(cd "$stage" && as_user "${base_env[@]}" CAPSULE_BIN="$stage/bin/capsule" PYTHONPATH="$stage/src" \
  "$py" -m pytest "${pytest_args[@]}" -rs tests) | tee "$stage/pytest.log"
# Each skipped test with its reason (-rs) into scripts/test.sh's summary.
[ -z "${CAPSULE_TEST_SKIP_LOG:-}" ] ||
  sed -n 's/^SKIPPED \[[0-9]*\] \(.*\)$/python \1/p' "$stage/pytest.log" >>"$CAPSULE_TEST_SKIP_LOG"

echo "== python: the wheel and the sdist, installed with pip"
wbins=$debug
[ -x "$release/capsule" ] && [ -x "$release/capsule-cli" ] && wbins=$release
"$py" build_wheel.py --bins "$wbins" --out "$stage/dist" --sdist
"$py" -m venv "$stage/wheel-venv"
"$stage/wheel-venv/bin/pip" install -q --no-index "$stage"/dist/*.whl
# --system-site-packages: Debian's setuptools and wheel build the sdist offline.
"$py" -m venv --system-site-packages "$stage/sdist-venv"
"$stage/sdist-venv/bin/pip" install -q --no-index --no-build-isolation "$stage"/dist/*.tar.gz
chmod -R a+rX "$stage"
smoke='
import os, shutil, sys
import capsule_sandbox as cs
want = sys.argv[1]
assert "CAPSULE_BIN" not in os.environ
assert (shutil.which("capsule") is None) == (want in ("bundled", "none")), shutil.which("capsule")
if want == "none":
    try:
        cs.find_capsule()
    except cs.BinaryNotFound as e:
        print("no capsule:", e)
        sys.exit(0)
    sys.exit("found a capsule where none is")
found = cs.find_capsule()
assert found == (cs.bundled_binary() if want == "bundled" else want), (found, want)
with cs.Sandbox(parallel=2) as sb:
    r = sb.run(["/bin/sh", "-c", "echo hello from $0"], stdout=cs.Capture())
    assert r.ok and r.stdout is not None and r.stdout.text == "hello from /bin/sh\n", r.raw
print(want, "capsule works:", found)
'
as_user "${base_env[@]}" "$stage/wheel-venv/bin/python" -c "$smoke" bundled
as_user "${base_env[@]}" "$stage/sdist-venv/bin/python" -c "$smoke" none
cp "$stage/bin/capsule" "$stage/bin/capsule-cli" "$stage/bare/"
as_user "${base_env[@]}" PATH="$stage/bare:/usr/bin:/bin" "$stage/sdist-venv/bin/python" -c "$smoke" "$stage/bare/capsule"
