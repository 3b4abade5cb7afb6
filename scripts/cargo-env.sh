# Sourced by the scripts that build: puts a Rust toolchain's cargo on PATH.
# Under `sudo` (README), HOME is root's: without a rustup toolchain of
# root's, the one rustup installed for the user who ran sudo is used (its
# RUSTUP_HOME; cargo's caches stay root's), before any distribution cargo
# on PATH (Debian's `rustc` recommends an older one). Else rustup's usual
# places, when cargo is not on PATH.
if [ -n "${SUDO_USER:-}" ] && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  h=$(getent passwd "$SUDO_USER" | cut -d: -f6)
  if [ -n "$h" ] && [ -x "$h/.cargo/bin/cargo" ]; then
    export PATH="$h/.cargo/bin:$PATH"
    [ -d "$h/.rustup" ] && export RUSTUP_HOME="${RUSTUP_HOME:-$h/.rustup}"
  fi
fi
if ! command -v cargo >/dev/null; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
