#!/usr/bin/env bash
# Checks README's Set-up on a fresh machine (issue 23): builds a minimal
# Debian 12 (or Ubuntu 24.04) root with mmdebstrap, adds sudo and an
# unprivileged user `reader` who may use it, clones this clone's committed
# HEAD there, and runs as `reader` README's Set-up install block and its
# first command (judging the example) exactly as written, then, with
# --suite, its second one (`sudo scripts/test.sh`). Not part of CI: it
# downloads a distribution. About 5 minutes and 2.6 GB in DIR without
# --suite; with it about 8 GB (docs/install-check.md).
#
# usage (as root): scripts/check-fresh-machine.sh [--suite] [--keep] [debian12|ubuntu24.04] [DIR]
#   DIR        where the root goes (default /var/tmp/capsule-fresh-DISTRO; emptied first)
#   --suite    also run README's command 2, the whole test suite
#   --keep     keep DIR afterwards (default: removed when everything passed;
#              kept, for a look, when a step failed)
# Environment: DEBIAN_MIRROR, UBUNTU_MIRROR; UBUNTU_KEYRING (default
# /usr/share/keyrings/ubuntu-archive-keyring.gpg, package ubuntu-keyring).
#
# The root is entered with unshare + pivot_root, not chroot: a chrooted
# process may not create user namespaces, which capsule needs.
# Two adaptations to the machine this runs on, not to the README: the host's
# extra CA certificates (/usr/local/share/ca-certificates, e.g. a TLS
# proxy's) are put into the root, and where sh.rustup.rs does not resolve
# the same script is taken from static.rust-lang.org/rustup/rustup-init.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=0
keep=0
distro=debian12
dir=""
for a in "$@"; do
  case "$a" in
    --suite) suite=1 ;;
    --keep) keep=1 ;;
    debian12 | ubuntu24.04) distro=$a ;;
    -*) echo "check-fresh-machine.sh: unknown option $a" >&2; exit 2 ;;
    *) dir=$a ;;
  esac
done
dir=${dir:-/var/tmp/capsule-fresh-$distro}
case "$(realpath -m "$dir")" in
  / | /home | /root | /tmp | /var | /var/tmp | /work) echo "check-fresh-machine.sh: $dir would be emptied: name a directory of its own" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "check-fresh-machine.sh: run it as root (mmdebstrap, mounts)" >&2; exit 1; }
for tool in mmdebstrap unshare pivot_root git curl; do
  command -v "$tool" >/dev/null || { echo "check-fresh-machine.sh: $tool is missing (apt-get install mmdebstrap util-linux git curl)" >&2; exit 1; }
done
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "check-fresh-machine.sh: note: uncommitted changes are not checked (the root clones HEAD)" >&2

log() { echo "== $(date -u +%T) $*"; }

# README's Set-up: the first sh block is what to install, the second the
# test suite's tools, the third holds the two commands.
setup_block() {
  awk -v want="$1" '/^## Set-up/ { s = 1; next } s && /^## / { exit }
    s && /^```sh$/ { n++; inb = 1; next } s && inb && /^```$/ { inb = 0; next }
    s && inb && n == want { print }' README.md
}
install_block=$(setup_block 1)
tools_block=$(setup_block 2)
cmd1=$(setup_block 3 | grep -m1 '^cargo run ')
cmd2=$(setup_block 3 | grep -m1 '^sudo scripts/test.sh')
[ -n "$install_block" ] && [ -n "$tools_block" ] && [ -n "$cmd1" ] && [ -n "$cmd2" ] ||
  { echo "check-fresh-machine.sh: cannot find README's Set-up blocks" >&2; exit 1; }
install_block=${install_block//<capsule\'s repository>//srv/capsule.git}
if ! curl -sSfI --max-time 20 https://sh.rustup.rs >/dev/null 2>&1; then
  log "sh.rustup.rs is unreachable here: taking rustup's script from static.rust-lang.org"
  install_block=${install_block//https:\/\/sh.rustup.rs/https://static.rust-lang.org/rustup/rustup-init.sh}
fi

# Runs "$@" as root inside the root $dir/root. /tmp stays on the root's
# disk, as on a fresh Debian 12 or Ubuntu 24.04; /run is a tmpfs there too.
enter() {
  unshare --mount --pid --fork --propagation private -- /bin/bash -euc '
    r=$1; shift
    mount --bind "$r" "$r"
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    mount --rbind /sys "$r/sys"
    mount -t tmpfs -o mode=0755 tmpfs "$r/run"
    mkdir -p "$r/.oldroot"
    cd "$r"
    pivot_root . .oldroot
    cd /
    umount -l /.oldroot
    rmdir /.oldroot
    exec env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' enter "$dir/root" "$@"
}

rm -rf "$dir"
mkdir -p "$dir"
log "building a minimal $distro root in $dir/root"
case "$distro" in
  debian12)
    mmdebstrap --variant=minbase --include=sudo bookworm "$dir/root" \
      "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm main" \
      "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main" >"$dir/mmdebstrap.log" 2>&1 ;;
  ubuntu24.04)
    keyring=${UBUNTU_KEYRING:-/usr/share/keyrings/ubuntu-archive-keyring.gpg}
    [ -r "$keyring" ] || { echo "check-fresh-machine.sh: no Ubuntu archive keyring at $keyring (package ubuntu-keyring, or UBUNTU_KEYRING=)" >&2; exit 1; }
    m=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
    # Ubuntu's apt is not Priority: required, so minbase leaves it out.
    mmdebstrap --variant=minbase --include=apt,sudo --keyring="$keyring" noble "$dir/root" \
      "deb $m noble main universe" "deb $m noble-updates main universe" \
      "deb $m noble-security main universe" >"$dir/mmdebstrap.log" 2>&1 ;;
esac
root=$dir/root
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
echo "127.0.1.1 $(cat "$root/etc/hostname" 2>/dev/null || hostname)" >>"$root/etc/hosts"
git clone -q --bare . "$root/srv/capsule.git"
enter /bin/bash -euc '
  useradd -m -s /bin/bash -G sudo reader
  echo "reader ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/reader
  chown -R reader:reader /srv/capsule.git
'
# As the reader, in a login shell, one step a file.
as_reader() {
  printf '%s\n' "set -euxo pipefail" "$2" >"$root/home/reader/$1.sh"
  log "$1"
  enter su - reader -c "DEBIAN_FRONTEND=noninteractive bash $1.sh"
}
as_reader install "$install_block"
as_reader command1 ". \"\$HOME/.cargo/env\"; cd capsule; git log -1 --format=%H; $cmd1"
if [ "$suite" = 1 ]; then
  as_reader test-tools "$tools_block"
  as_reader command2 ". \"\$HOME/.cargo/env\"; cd capsule; $cmd2"
fi
log "$distro: README's Set-up passed"
[ "$keep" = 1 ] || rm -rf "$dir"
