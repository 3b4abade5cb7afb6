#!/usr/bin/env bash
# The benchmark of issues 6 and 28: what a copy-on-write layer costs. Untar
# of a generated 4,000-file tarball (plain and gzipped), `make -j2` of a
# generated 40-module C project and untar of the Linux source (Debian's
# linux-source-6.1; skipped, with a message, when it is absent), each bare, in `capsule run --bind` (the
# sandbox, no layer), in
# `capsule run --layer` (kernel overlayfs) and in `capsule run --root
# --layer` (fuse-overlayfs), and, to tell the kernel's price from
# capsule's, without capsule: in `unshare --user --map-current-user
# --keep-caps --mount` (ns: the namespaces alone), in the same with a
# kernel overlay mounted by hand (`mount -t overlay ... userxattr`) over
# the directory capsule's layer uses (overlay: overlayfs alone, its sync
# at unmount included) and mounted `volatile` (overlay-volatile: without
# that sync); interleaved over the rounds, as an unprivileged user;
# medians, p90 and ratios to bare and to ns, written to
# docs/benchmarks-layer.md. bench/layer_driver.py does the measuring.
#
# Usage: bench/layer.sh [--rounds N] [--jobs J] [--output FILE]
#        (defaults: 15 rounds, make -j2, docs/benchmarks-layer.md)
#
# As root: builds with cargo, installs what is missing with apt (gcc, make,
# tar, xz-utils, python3, fuse-overlayfs, jq, util-linux's unshare and mount),
# drops the page cache before every run (a helper of root's, asked through
# two FIFOs; the rest runs as the user),
# creates the system user capsule-bench, stages the binary in
# /var/tmp/capsule-bench, works in
# /var/tmp/capsule-bench-layer (the user's own, also its HOME) and runs as
# that user via setpriv. As an unprivileged user: runs as yourself, in a new
# directory under /var/tmp (not /tmp: the sandbox's /tmp is its own).
# Either way the work directory is removed at the end unless KEEP=1.
# Nothing is deleted before the measurement ends; on ext4 without a journal
# (this development machine's root) creating files is slow for a few
# minutes after many were deleted, so leave 6 minutes between two runs.
#
# Environment:
#   CAPSULE_BIN  use this capsule binary instead of building one
#   CAPSULE_REV  how to describe that binary in the report
#   BENCH_USER   user to benchmark as when started as root (capsule-bench)
#   KEEP=1       keep the work directory (inputs, rounds.tsv) afterwards
#   CAPSULE_BENCH_LINUX  the Linux source tarball
#                (default /usr/src/linux-source-6.1.tar.xz)
set -euo pipefail

die() { printf 'bench/layer.sh: %s\n' "$*" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=15
jobs=2
output=$repo/docs/benchmarks-layer.md
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        --jobs) jobs=${2:?--jobs needs a value}; shift ;;
        --output) output=${2:?--output needs a value}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$rounds'"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$jobs'"
[[ $output == /* ]] || output=$PWD/$output
is_root=false
[[ $(id -u) -eq 0 ]] && is_root=true

missing=()
for pair in gcc:gcc make:make tar:tar xz:xz-utils python3:python3 jq:jq setpriv:util-linux unshare:util-linux mount:mount fuse-overlayfs:fuse-overlayfs; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    $is_root || die "missing tools; install them first: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
        die "apt-get install ${missing[*]} failed"
fi

if [[ -n ${CAPSULE_BIN:-} ]]; then
    built=$CAPSULE_BIN
    [[ -x $built ]] || die "CAPSULE_BIN=$built is not an executable"
    rev=${CAPSULE_REV:-binary given as CAPSULE_BIN}
else
    cargo=$(command -v cargo || true)
    [[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
    [[ -n $cargo ]] || die "cargo not found (or set CAPSULE_BIN to a built capsule binary)"
    built=$(cd "$repo" && "$cargo" build --release -p capsule-cli --message-format=json-render-diagnostics |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "capsule" and .executable != null) | .executable' |
        tail -n 1) || die "cargo build failed"
    [[ -x $built ]] || die "cargo reported no capsule executable"
    rev="git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    [[ -z $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] || rev="$rev with uncommitted changes"
fi

# The work directory is the benchmark user's own and directly under
# /var/tmp: a kernel layer's overlay starts at the highest directory of
# the working directory's chain the user owns, and /var/tmp is one of its
# roots too, so a directory of someone else's between them could not be
# copied up (see docs/benchmarks-layer.md).
if $is_root; then
    user=${BENCH_USER:-capsule-bench}
    id -u "$user" >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin "$user"
    stage=/var/tmp/capsule-bench
    install -d -m 0755 -o root -g root "$stage"
    work=/var/tmp/capsule-bench-layer
    # A previous run's directory (KEEP=1) is only renamed now and deleted
    # at the end: see the driver on deleting before measuring.
    old=
    if [[ -e $work ]]; then
        old=$work.old.$$
        mv "$work" "$old"
    fi
    install -d -m 0755 -o "$user" -g "$(id -g "$user")" "$work"
    as_user=(setpriv "--reuid=$user" "--regid=$(id -g "$user")" --clear-groups)
else
    user=$(id -un)
    stage=$(mktemp -d /var/tmp/capsule-bench-bin.XXXXXX)
    work=$(mktemp -d /var/tmp/capsule-bench-layer.XXXXXX)
    as_user=()
fi
dropper=
cleanup() {
    [[ -n $dropper ]] && kill "$dropper" 2>/dev/null
    if [[ ${KEEP:-} == 1 ]]; then
        echo "bench/layer.sh: kept $work" >&2
    else
        # A layer left by a failed run may hold overlayfs work directories
        # of mode 000.
        chmod -R u+rwx "$work" 2>/dev/null || true
        rm -rf "$work"
    fi
    [[ -n ${fifos:-} ]] && rm -rf "$fifos"
    $is_root || rm -rf "$stage"
    if [[ -n ${old:-} ]]; then
        chmod -R u+rwx "$old" 2>/dev/null || true
        rm -rf "$old"
    fi
}
trap cleanup EXIT
install -m 0755 "$built" "$stage/capsule"
install -m 0755 "$(dirname "$built")/capsule-cli" "$stage/capsule-cli"
install -m 0755 "$repo/bench/layer_driver.py" "$stage/layer_driver.py"
# (sed reads to the end: head's early exit would fail the pipeline.)
fuse_version=$(fuse-overlayfs --version 2>/dev/null | sed -n 's/^fuse-overlayfs: //p') || true
cc_version=$(gcc --version | sed -n 1p)
tar_version=$(tar --version | sed -n 1p)
unshare_version=$(unshare --version | sed -n 1p)
description="capsule ($rev, release build), $cc_version, fuse-overlayfs ${fuse_version:-(version unknown)}, $tar_version, $unshare_version"
py=$(PATH=/usr/local/bin:/usr/bin:/bin command -v python3)
drop_env=()
if $is_root; then
    # The driver, as the user, asks for each drop on req and waits for ack.
    fifos=$stage/drop.$$
    install -d -m 0700 -o "$user" "$fifos"
    mkfifo -m 0600 "$fifos/req" "$fifos/ack"
    chown "$user" "$fifos/req" "$fifos/ack"
    (
        while read -r _ <"$fifos/req"; do
            if sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
                echo ok >"$fifos/ack"
            else
                echo "writing /proc/sys/vm/drop_caches failed (needs root with CAP_SYS_ADMIN)" >"$fifos/ack"
            fi
        done
    ) &
    dropper=$!
    drop_env=(CAPSULE_BENCH_DROP="$fifos")
fi
(cd "$work" && "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" LANG=C.UTF-8 "${drop_env[@]}" \
    ${CAPSULE_BENCH_LINUX:+CAPSULE_BENCH_LINUX="$CAPSULE_BENCH_LINUX"} \
    "$py" "$stage/layer_driver.py" "$stage/capsule" "$work" "$rounds" "$jobs" "$work/report.md" "$description") ||
    die "the benchmark failed"
mkdir -p "$(dirname "$output")"
install -m 0644 "$work/report.md" "$output"
echo "written to $output" >&2
