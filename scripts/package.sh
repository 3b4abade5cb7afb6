#!/usr/bin/env bash
# Builds capsule's release packages from this tree into target/package/,
# for x86_64 and aarch64 (or the architectures named: package.sh x86_64):
#   capsule_VERSION_amd64.deb, capsule_VERSION_arm64.deb
#                                      (dpkg-deb; install with dpkg -i or apt install ./FILE)
#   capsule-VERSION-x86_64-linux.tar.gz, capsule-VERSION-aarch64-linux.tar.gz
#                                      (the same files as a /usr/local tree)
#   capsule_sandbox-VERSION-py3-none-manylinux...x86_64.whl, ...aarch64.whl and .tar.gz
#                                      (the Python client, its wheels with both binaries: python/build_wheel.py)
# aarch64 is cross-built (README, "Architectures": the target's standard
# library, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross).
# The .deb and the tarball hold the static binaries capsule and capsule-cli (no Depends: no
# library is loaded at run time), man pages and bash/zsh/fish completions
# made from capsule-cli's parser (crates/capsule-docgen), the AppArmor
# profile deploy/apparmor/capsule, README and docs. Needs a Rust toolchain,
# dpkg-deb, gzip and tar; runs as any user.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
. scripts/cargo-env.sh
for tool in cargo dpkg-deb gzip tar file; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool not found" >&2; exit 1; }
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "package.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(x86_64 aarch64)
for arch in "${archs[@]}"; do
  case $arch in x86_64 | aarch64) ;; *) echo "package.sh: unknown architecture '$arch' (x86_64, aarch64)" >&2; exit 2 ;; esac
done
tdir=${CARGO_TARGET_DIR:-target}
out=$tdir/package

# The binaries, static: .cargo/config.toml links both targets statically
# (crt-static); the front end links no C library at all (build.rs).
for arch in "${archs[@]}"; do
  if [ "$arch" = aarch64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null ||
      { echo "package.sh: aarch64-linux-gnu-gcc not found (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)" >&2; exit 1; }
  fi
  cargo build --release --target "$arch-unknown-linux-gnu" -p capsule-cli
  for b in capsule capsule-cli; do
    f=$tdir/$arch-unknown-linux-gnu/release/$b
    desc=$(file -b "$f")
    case $desc in
      *"statically linked"* | *"static-pie linked"*) ;;
      *) echo "package.sh: $f is not static: $desc" >&2; exit 1 ;;
    esac
    case $arch:$desc in
      x86_64:*x86-64* | aarch64:*"ARM aarch64"*) ;;
      *) echo "package.sh: $f is not an $arch program: $desc" >&2; exit 1 ;;
    esac
  done
done
# Man pages and completions: from the debug build the test suite makes too.
rm -rf "$out"
mkdir -p "$out"
gen=$out/gen
cargo run -q --target x86_64-unknown-linux-gnu -p capsule-docgen -- "$gen"

# The installed tree under PREFIX ($1) and ETC ($2), with man pages
# compressed and the zsh completions in ZSH ($3, relative to PREFIX).
stage() {
  local prefix=$1 etc=$2 zsh=$3 p
  install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
    "$prefix/$zsh" "$prefix/share/fish/vendor_completions.d" "$prefix/share/doc/capsule/docs" "$etc/apparmor.d"
  for b in capsule capsule-cli; do
    install -m 755 "$bin/$b" "$prefix/bin/$b"
    "$strip" --strip-unneeded "$prefix/bin/$b" 2>/dev/null || true
  done
  for p in "$gen"/man/man1/*.1; do
    gzip -9n <"$p" >"$prefix/share/man/man1/$(basename "$p").gz"
  done
  # capsule-cli(1) is capsule(1): a link, as man-db expects of a .gz page.
  rm "$prefix/share/man/man1/capsule-cli.1.gz"
  ln -s capsule.1.gz "$prefix/share/man/man1/capsule-cli.1.gz"
  install -m 644 "$gen"/completions/bash/* "$prefix/share/bash-completion/completions/"
  install -m 644 "$gen"/completions/zsh/* "$prefix/$zsh/"
  install -m 644 "$gen"/completions/fish/* "$prefix/share/fish/vendor_completions.d/"
  install -m 644 README.md "$prefix/share/doc/capsule/"
  install -m 644 docs/*.md "$prefix/share/doc/capsule/docs/"
  install -m 644 deploy/apparmor/capsule "$etc/apparmor.d/capsule"
}

for arch in "${archs[@]}"; do
  bin=$tdir/$arch-unknown-linux-gnu/release
  debarch=$([ "$arch" = aarch64 ] && echo arm64 || echo amd64)
  strip=strip
  [ "$arch" = "$(uname -m)" ] || strip=$arch-linux-gnu-strip
  # --- the .deb -----------------------------------------------------------------
  root=$out/deb
  stage "$root/usr" "$root/etc" share/zsh/vendor-completions
  install -m 644 deploy/debian/copyright "$root/usr/share/doc/capsule/copyright"
  install -d "$root/DEBIAN"
  install -m 755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$root/DEBIAN/"
  echo /etc/apparmor.d/capsule >"$root/DEBIAN/conffiles"
  (cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  cat >"$root/DEBIAN/control" <<CONTROL
Package: capsule
Version: $version
Architecture: $debarch
Maintainer: ${CAPSULE_MAINTAINER:-capsule maintainers <maintainers@users.noreply.a-seed-594554e4.example>}
Installed-Size: $size
Section: utils
Priority: optional
Recommends: fuse-overlayfs
Suggests: gcc, g++, python3, default-jdk-headless | openjdk-17-jdk-headless, golang-go, rustc, fp-compiler
Description: run untrusted programs in an unprivileged Linux sandbox
 capsule runs untrusted, possibly multi-process programs (a solution on an
 online judge, a compiler, a build step, an unknown script) as an
 unprivileged user in fresh user, PID and mount namespaces, with cgroup v2
 limits, seccomp and Landlock, and reports exactly how they ended; it
 judges solutions with language presets (capsule judge).
 .
 The binaries are static. fuse-overlayfs serves --root runs in a layer;
 the suggested compilers and interpreters are what the language presets
 use. The AppArmor profile lets capsule create user namespaces where
 AppArmor restricts them (Ubuntu 23.10 and later); it is loaded where
 AppArmor is active and its parser supports it. "capsule check" tells
 whether this machine can run capsule.
CONTROL
  deb=$out/capsule_${version}_${debarch}.deb
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null

  # --- the tarball --------------------------------------------------------------
  name=capsule-$version-$arch-linux
  tree=$out/tar/$name
  # zsh's own directory under /usr/local: share/zsh/site-functions.
  stage "$tree" "$tree/etc" share/zsh/site-functions
  install -m 644 README.md LICENSE "$tree/"
  tarball=$out/$name.tar.gz
  tar -C "$out/tar" --owner=0 --group=0 --numeric-owner --sort=name -czf "$tarball" "$name"
  rm -rf "$root" "$out/tar"
  echo "package.sh: $deb"
  echo "package.sh: $tarball"
done
rm -rf "$gen"

# --- the Python wheel and sdist (python/build_wheel.py, standard library only) --
# The platform wheel carries these static binaries: `pip install` of it alone
# gives a working sandbox; the sdist finds capsule on PATH.
if command -v python3 >/dev/null; then
  sdist=--sdist
  for arch in "${archs[@]}"; do
    python3 python/build_wheel.py --bins "$tdir/$arch-unknown-linux-gnu/release" --arch "$arch" --out "$out" $sdist |
      sed 's/^/package.sh: /'
    sdist=
  done
else
  echo "package.sh: python3 not found: no Python wheel" >&2
fi
