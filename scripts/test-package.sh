#!/usr/bin/env bash
# The release packages as a user gets them (issue 23): scripts/package.sh
# builds the .deb and the tarball from this tree; their contents are
# checked (dpkg-deb -I and -c, tar), the binaries must be static, the
# AppArmor profile must parse; then the .deb is installed, used as the
# unprivileged test user (capsule --version, capsule check, capsule run --
# /bin/true, man -w, completions) and purged, and nothing of it may be left.
# With CAPSULE_PACKAGE_ARCHS naming aarch64 too (scripts/test.sh, where the
# cross toolchain is installed), the arm64 .deb, tarball and wheel are
# checked the same way short of installing them: their files, static
# aarch64 binaries, `capsule --version` through qemu-user's binfmt entry
# (scripts/test-slow.sh aarch64 installs and uses the .deb in its VM).
#
# Run as root (scripts/test.sh does). CAPSULE_TEST_STRICT=1: what cannot be
# checked fails, except the full parse of the profile where the only
# apparmor_parser is older than AppArmor 4 (Debian 12 has 3.0): that is
# printed by name and counted as skipped in the closing line.
set -euo pipefail
cd "$(dirname "$0")/.."
strict=${CAPSULE_TEST_STRICT:-0}
user=capsule-test
passed=0 skipped=0
pass() { echo "ok   $1"; passed=$((passed + 1)); }
fail() {
  echo "FAIL $1" >&2
  echo "package: $passed passed, 1 failed, $skipped skipped"
  exit 1
}
skip() {
  if [ "$strict" = 1 ] && [ "${2:-}" != allowed ]; then fail "$1 (cannot be checked here; CAPSULE_TEST_STRICT=1)"; fi
  echo "SKIP $1"
  [ -z "${CAPSULE_TEST_SKIP_LOG:-}" ] || echo "package: $1" >>"$CAPSULE_TEST_SKIP_LOG"
  skipped=$((skipped + 1))
}

if [ "$(id -u)" != 0 ]; then
  skip "test-package.sh: installing the package needs root"
  echo "package: $passed passed, 0 failed, $skipped skipped"
  exit 0
fi
for tool in dpkg-deb dpkg file man setpriv; do
  command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install dpkg file man-db util-linux)"
done

# CAPSULE_PACKAGE_BUILT=1: scripts/test.sh built them already (with the
# system's libseccomp hidden).
[ "${CAPSULE_PACKAGE_BUILT:-0}" = 1 ] || scripts/package.sh
tdir=${CARGO_TARGET_DIR:-target}
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
deb=$tdir/package/capsule_${version}_amd64.deb
tarball=$tdir/package/capsule-$version-x86_64-linux.tar.gz
[ -f "$deb" ] && [ -f "$tarball" ] && pass "package.sh made $(basename "$deb") and $(basename "$tarball")" \
  || fail "package.sh did not leave $deb and $tarball"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
scratch=$(mktemp -d /tmp/capsule-test-package.XXXXXX)
chmod 755 "$scratch"
trap 'rm -rf "$scratch"' EXIT

# --- the .deb's control fields and files ---------------------------------------
info=$(dpkg-deb -I "$deb")
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = capsule ] && [ "$(field Version)" = "$version" ] && [ "$(field Architecture)" = amd64 ] \
  || fail "control: Package/Version/Architecture: $info"
[ -z "$(field Depends)" ] && [ -z "$(field Pre-Depends)" ] || fail "control: the static package has no Depends: $(field Depends)"
[ "$(field Recommends)" = fuse-overlayfs ] || fail "control: Recommends is '$(field Recommends)', not fuse-overlayfs"
for tool in gcc g++ python3 golang-go rustc fp-compiler default-jdk-headless; do
  field Suggests | tr -d ' ' | tr ',|' '\n\n' | grep -qx "$tool" || fail "control: Suggests lacks $tool: $(field Suggests)"
done
for script in postinst prerm postrm conffiles md5sums; do
  grep -q " $script" <<<"$info" || fail "control archive lacks $script"
done
pass "dpkg-deb -I: capsule $version amd64, no Depends, Recommends fuse-overlayfs, Suggests the presets' toolchains, maintainer scripts"

listing=$(dpkg-deb -c "$deb" | awk '{print $6}')
man_pages="capsule capsule-cli capsule-run capsule-shell capsule-serve capsule-interact capsule-layer capsule-layer-list \
  capsule-layer-commit capsule-presets capsule-judge capsule-isolate capsule-worker capsule-agent capsule-agent-status capsule-check"
want="./usr/bin/capsule ./usr/bin/capsule-cli ./etc/apparmor.d/capsule ./usr/share/doc/capsule/README.md
  ./usr/share/doc/capsule/copyright ./usr/share/doc/capsule/docs/seccomp.md ./usr/share/doc/capsule/docs/isolate.md
  ./usr/share/bash-completion/completions/capsule ./usr/share/bash-completion/completions/capsule-cli
  ./usr/share/zsh/vendor-completions/_capsule ./usr/share/fish/vendor_completions.d/capsule.fish"
for p in $man_pages; do want="$want ./usr/share/man/man1/$p.1.gz"; done
for p in $want; do
  grep -qx "$p" <<<"$listing" || fail "dpkg-deb -c: $p is missing"
done
# A hidden subcommand (the library's supervisor) has no page.
! grep -q "capsule-supervise" <<<"$listing" || fail "dpkg-deb -c: a page for the hidden subcommand supervise"
dpkg-deb -c "$deb" | awk '$2 != "root/root" {print; bad=1} END {exit bad}' || fail "dpkg-deb -c: files not owned by root"
pass "dpkg-deb -c: binaries, $(grep -c '/man1/' <<<"$listing") man pages, bash/zsh/fish completions, AppArmor profile, docs, copyright"

# --- the tarball ------------------------------------------------------------------
name=capsule-$version-x86_64-linux
tar -C "$scratch" -xzf "$tarball"
for p in bin/capsule bin/capsule-cli LICENSE README.md etc/apparmor.d/capsule share/man/man1/capsule.1.gz \
  share/man/man1/capsule-run.1.gz share/bash-completion/completions/capsule share/zsh/site-functions/_capsule \
  share/fish/vendor_completions.d/capsule.fish; do
  [ -e "$scratch/$name/$p" ] || fail "tarball: $name/$p is missing"
done
cmp -s LICENSE "$scratch/$name/LICENSE" || fail "tarball: LICENSE differs from the tree's"
for b in capsule capsule-cli; do
  desc=$(file -b "$scratch/$name/bin/$b")
  case $desc in
    *"statically linked"* | *"static-pie linked"*) ;;
    *) fail "tarball: bin/$b is not static: $desc" ;;
  esac
  # ldd says so too (glibc's ldd: "not a dynamic executable" or "statically linked").
  libs=$(ldd "$scratch/$name/bin/$b" 2>&1 || true)
  grep -Eq "not a dynamic executable|statically linked" <<<"$libs" || fail "tarball: ldd finds libraries in bin/$b: $libs"
done
got=$("$scratch/$name/bin/capsule" --version)
[ "$got" = "capsule $version (commit $commit)" ] || fail "tarball: capsule --version printed '$got', not 'capsule $version (commit $commit)'"
pass "tarball: static binaries (file, ldd), man pages, completions, profile, README, LICENSE; --version names commit $commit"

# --- the AppArmor profile -----------------------------------------------------------
profile=deploy/apparmor/capsule
grep -q '^abi <abi/4.0>,' "$profile" && [ "$(grep -c '^  userns,$' "$profile")" = 2 ] \
  && grep -q '^profile capsule /usr{,/local}/bin/capsule flags=(unconfined) {' "$profile" \
  && grep -q '^profile capsule-cli /usr{,/local}/bin/capsule-cli flags=(unconfined) {' "$profile" \
  || fail "$profile: abi 4.0 and userns, for both binaries at their installed paths"
if ! command -v apparmor_parser >/dev/null; then
  skip "apparmor-profile-parse: apparmor_parser is missing (apt-get install apparmor)"
elif [ -e /etc/apparmor.d/abi/4.0 ]; then
  apparmor_parser -Q -K "$profile" || fail "apparmor_parser -Q rejects $profile"
  pass "apparmor_parser $(apparmor_parser --version | sed -n '1s/.*version //p') parses $profile (abi 4.0)"
else
  # An older parser: everything but abi 4.0 and `userns,` (unknown to it) still parses.
  sed 's#^abi <abi/4.0>,#abi <abi/3.0>,#; /^  userns,$/d' "$profile" >"$scratch/capsule-abi3"
  apparmor_parser -Q -K "$scratch/capsule-abi3" 2>/dev/null || fail "apparmor_parser -Q rejects $profile (under abi 3.0, without userns,)"
  pass "apparmor_parser parses $profile's attachments, flags and includes (under abi 3.0)"
  skip "apparmor-abi-4.0: apparmor_parser $(apparmor_parser --version | sed -n '1s/.*version //p') has no abi 4.0 (/etc/apparmor.d/abi/4.0 is missing): $profile's abi 4.0 and userns, rules are not checked here" allowed
fi

# --- the maintainer scripts' AppArmor decisions -------------------------------------
# In a mount namespace of its own, with AppArmor's files faked on tmpfs
# (/sys/module/apparmor, /sys/kernel/security/apparmor) and a stand-in
# apparmor_parser that logs its arguments and parses abi 4.0 or not.
dpkg-deb -e "$deb" "$scratch/control"
cat >"$scratch/fake-aa.sh" <<'FAKE'
set -eu
s=$1 control=$2
mkdir -p "$s/fakebin"
cat >"$s/fakebin/apparmor_parser" <<'PARSER'
#!/bin/sh
echo "$*" >>"$AA_LOG"
case " $* " in *" -Q "*) [ "$AA_ABI4" = 1 ] ;; *) exit 0 ;; esac
PARSER
chmod 755 "$s/fakebin/apparmor_parser"
export PATH="$s/fakebin:$PATH" AA_LOG="$s/aa.log"
: >"$AA_LOG"
mount -t tmpfs none /sys/module
mount -t tmpfs none /sys/kernel/security
# AppArmor absent: nothing is run.
AA_ABI4=1 sh "$control/postinst" configure
[ ! -s "$AA_LOG" ] || { echo "postinst ran apparmor_parser without AppArmor: $(cat "$AA_LOG")"; exit 1; }
mkdir -p /sys/module/apparmor/parameters /sys/kernel/security/apparmor
echo N >/sys/module/apparmor/parameters/enabled
AA_ABI4=1 sh "$control/postinst" configure
[ ! -s "$AA_LOG" ] || { echo "postinst ran apparmor_parser with AppArmor disabled: $(cat "$AA_LOG")"; exit 1; }
echo Y >/sys/module/apparmor/parameters/enabled
# Active, but the parser is older than abi 4.0: parsed, not loaded.
AA_ABI4=0 sh "$control/postinst" configure 2>"$s/postinst.err"
[ "$(cat "$AA_LOG")" = "-Q -K /etc/apparmor.d/capsule" ] || { echo "postinst with an AppArmor 3 parser ran: $(cat "$AA_LOG")"; exit 1; }
grep -q "not loaded: this AppArmor parser does not understand it" "$s/postinst.err" || { echo "postinst did not say why it did not load"; exit 1; }
# Active, abi 4.0 understood: loaded (replaced), without a cache.
: >"$AA_LOG"
AA_ABI4=1 sh "$control/postinst" configure
[ "$(tr '\n' ';' <"$AA_LOG")" = "-Q -K /etc/apparmor.d/capsule;-r -K /etc/apparmor.d/capsule;" ] || { echo "postinst with an AppArmor 4 parser ran: $(cat "$AA_LOG")"; exit 1; }
: >"$AA_LOG"
AA_ABI4=1 sh "$control/postinst" abort-upgrade
[ ! -s "$AA_LOG" ] || { echo "postinst abort-upgrade loaded the profile"; exit 1; }
# prerm remove unloads what is loaded, by name; nothing else.
printf 'bwrap (unconfined)\ncapsule-cli (unconfined)\n' >/sys/kernel/security/apparmor/profiles
: >/sys/kernel/security/apparmor/.remove
sh "$control/prerm" upgrade
[ ! -s /sys/kernel/security/apparmor/.remove ] || { echo "prerm upgrade unloaded a profile"; exit 1; }
sh "$control/prerm" remove
[ "$(cat /sys/kernel/security/apparmor/.remove)" = capsule-cli ] || { echo "prerm remove wrote '$(cat /sys/kernel/security/apparmor/.remove)' to .remove"; exit 1; }
printf 'capsule (unconfined)\n' >/sys/kernel/security/apparmor/profiles
sh "$control/prerm" remove
[ "$(cat /sys/kernel/security/apparmor/.remove)" = capsule ] || { echo "prerm remove did not unload capsule"; exit 1; }
printf 'bwrap (unconfined)\n' >/sys/kernel/security/apparmor/profiles
: >/sys/kernel/security/apparmor/.remove
sh "$control/prerm" remove
[ ! -s /sys/kernel/security/apparmor/.remove ] || { echo "prerm remove unloaded a profile that is not loaded"; exit 1; }
FAKE
if [ ! -d /etc/apparmor.d ]; then
  # postinst looks for the installed profile, a stand-in on a tmpfs there.
  skip "maintainer-scripts: /etc/apparmor.d is missing (apt-get install apparmor)"
else
  out=$(unshare -m --propagation private -- sh -c '
    mount -t tmpfs none /etc/apparmor.d && : >/etc/apparmor.d/capsule && sh "$@"' \
    fake-aa "$scratch/fake-aa.sh" "$scratch" "$scratch/control" 2>&1) || fail "maintainer scripts: $out"
  pass "maintainer scripts: no AppArmor or disabled: nothing; AppArmor 3 parser: not loaded, says why; AppArmor 4: apparmor_parser -r -K; prerm remove unloads what is loaded"
fi

# --- install, use as the test user, purge ----------------------------------------------
if ! grep -q "^$user:" /etc/passwd; then
  useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
fi
uid=$(id -u "$user") gid=$(id -g "$user")
as_user() { (cd / && setpriv --reuid="$uid" --regid="$gid" --clear-groups -- env -i PATH=/usr/bin:/bin "$@"); }
dpkg -s capsule >/dev/null 2>&1 && fail "a capsule package is installed already: dpkg --purge capsule first"
# (Only the directories there are: find's status for a missing one, such as
# /var/cache/apparmor without AppArmor's package, would end the script.)
snapshot() {
  local d
  for d in /usr /etc /var/lib/dpkg/info /var/cache/apparmor; do
    if [ -e "$d" ]; then find "$d" -xdev 2>/dev/null; fi
  done | sort
}
snapshot >"$scratch/before"
dpkg -i "$deb" >"$scratch/dpkg-i.log" 2>&1 || { cat "$scratch/dpkg-i.log" >&2; fail "dpkg -i $deb"; }
purge() { dpkg --purge capsule >"$scratch/purge.log" 2>&1; }
trap 'purge || true; rm -rf "$scratch"' EXIT
[ "$(dpkg-query -W -f '${Status}' capsule)" = "install ok installed" ] || fail "dpkg -i: capsule is not installed"
pass "dpkg -i $(basename "$deb")"

got=$(as_user capsule --version) && [ "$got" = "capsule $version (commit $commit)" ] \
  || fail "capsule --version as $user: '$got'"
got=$(as_user capsule-cli --version) && [ "$got" = "capsule $version (commit $commit)" ] \
  || fail "capsule-cli --version as $user: '$got'"
pass "capsule --version and capsule-cli --version as $user: capsule $version (commit $commit)"
as_user capsule check >"$scratch/check.out" 2>&1 || { cat "$scratch/check.out" >&2; fail "capsule check as $user"; }
grep -q '^=> `capsule run` can work here' "$scratch/check.out" || fail "capsule check as $user: $(tail -1 "$scratch/check.out")"
pass "capsule check as $user: $(tail -1 "$scratch/check.out")"
as_user capsule run -q -- /bin/true || fail "capsule run -q -- /bin/true as $user (/usr/bin/capsule)"
got=$(as_user capsule run -q -- /bin/hostname) && [ "$got" = capsule ] || fail "capsule run -- hostname as $user: '$got'"
pass "capsule run -- /bin/true as $user, the installed binaries (and hostname in the sandbox: $got)"
# capsule-cli(1) is a link to capsule(1): man -w names the page it reads.
for p in capsule:capsule capsule-run:capsule-run capsule-cli:capsule; do
  got=$(as_user man -w "${p%:*}" 2>&1) && [ "$got" = "/usr/share/man/man1/${p#*:}.1.gz" ] \
    || fail "man -w ${p%:*} as $user: '$got'"
done
as_user man -P cat capsule-run 2>/dev/null | grep -q -- '--wall-time' || fail "man capsule-run as $user: no --wall-time"
pass "man -w capsule, capsule-run, capsule-cli as $user: /usr/share/man/man1/"
if command -v bash >/dev/null; then
  got=$(as_user bash -c '. /usr/share/bash-completion/completions/capsule && complete -p capsule') \
    || fail "bash completion for capsule"
  pass "bash completion: $got"
fi

purge || { cat "$scratch/purge.log" >&2; fail "dpkg --purge capsule"; }
trap 'rm -rf "$scratch"' EXIT
dpkg -s capsule >/dev/null 2>&1 && fail "dpkg --purge: capsule is still known to dpkg"
snapshot >"$scratch/after"
if ! diff "$scratch/before" "$scratch/after" >"$scratch/diff"; then
  cat "$scratch/diff" >&2
  fail "dpkg --purge capsule: the system is not as it was (the diff above)"
fi
pass "dpkg --purge capsule: nothing of it is left in /usr, /etc, /var/lib/dpkg/info, /var/cache/apparmor"

# --- aarch64: the arm64 .deb, tarball and wheel --------------------------------------
if [[ " ${CAPSULE_PACKAGE_ARCHS:-x86_64} " == *" aarch64 "* ]]; then
  adeb=$tdir/package/capsule_${version}_arm64.deb
  atar=$tdir/package/capsule-$version-aarch64-linux.tar.gz
  [ -f "$adeb" ] && [ -f "$atar" ] || fail "package.sh did not leave $adeb and $atar"
  [ "$(dpkg-deb -f "$adeb" Architecture)" = arm64 ] && [ "$(dpkg-deb -f "$adeb" Version)" = "$version" ] ||
    fail "arm64 control: $(dpkg-deb -f "$adeb" Package Version Architecture)"
  # The same files as the amd64 package's, and the same tree in the tarball.
  files() { dpkg-deb -c "$1" | awk '{ print $6 }' | sort; }
  diff <(files "$deb") <(files "$adeb") >"$scratch/adiff" || { cat "$scratch/adiff" >&2; fail "the arm64 .deb's files differ from the amd64 one's"; }
  mkdir -p "$scratch/arm64"
  dpkg-deb -x "$adeb" "$scratch/arm64/deb"
  tar -C "$scratch/arm64" -xzf "$atar"
  for f in deb/usr/bin/capsule deb/usr/bin/capsule-cli "capsule-$version-aarch64-linux/bin/capsule" \
    "capsule-$version-aarch64-linux/bin/capsule-cli"; do
    desc=$(file -b "$scratch/arm64/$f")
    case $desc in
      *"ARM aarch64"*"statically linked"* | *"ARM aarch64"*"static-pie linked"*) ;;
      *) fail "arm64: $f is not a static aarch64 program: $desc" ;;
    esac
  done
  pass "arm64 .deb and tarball: Architecture arm64, the amd64 package's files, static aarch64 binaries"
  # The arm64 wheel: its tags and binaries.
  awhl=$(compgen -G "$tdir/package/capsule_sandbox-$version-py3-none-manylinux_2_17_aarch64.*.whl" | head -n1 || true)
  [ -n "$awhl" ] || fail "package.sh did not leave the manylinux_2_17_aarch64 wheel in $tdir/package"
  python3 - "$awhl" "$scratch/arm64/whl" <<'PY' || fail "the aarch64 wheel: $awhl"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
wheel = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
tags = [l.split(": ")[1] for l in z.read(wheel).decode().splitlines() if l.startswith("Tag: ")]
assert tags == ["py3-none-manylinux_2_17_aarch64", "py3-none-manylinux2014_aarch64", "py3-none-musllinux_1_1_aarch64"], tags
for b in ("capsule", "capsule-cli"):
    z.extract(f"capsule_sandbox/bin/{b}", sys.argv[2])
PY
  for b in capsule capsule-cli; do
    desc=$(file -b "$scratch/arm64/whl/capsule_sandbox/bin/$b")
    [[ $desc == *"ARM aarch64"*static* ]] || fail "the aarch64 wheel's $b: $desc"
  done
  pass "$(basename "$awhl"): the three aarch64 tags, static aarch64 binaries"
  # Running them here: qemu-user through binfmt_misc (the front end
  # executes capsule-cli, an arm64 program too).
  if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    chmod -R a+rX "$scratch/arm64"
    got=$("$scratch/arm64/deb/usr/bin/capsule" --version)
    [ "$got" = "capsule $version (commit $commit)" ] || fail "arm64: capsule --version printed '$got'"
    pass "arm64: capsule --version under qemu-user names commit $commit"
  else
    skip "arm64: capsule --version: no qemu-aarch64 binfmt entry (apt-get install qemu-user-static binfmt-support)"
  fi
fi
echo "package: $passed passed, 0 failed, $skipped skipped"
