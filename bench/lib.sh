# shellcheck shell=bash disable=SC2034,SC2154
# Set-up shared by bench/server.sh, bench/ab.sh and bench/scale.sh (sourced;
# the caller defines die, log, is_root, repo and bench_user).

# Installs the packages named (duplicates allowed) with apt as root; as
# another user, fails naming them.
install_missing() {
    (($#)) || return 0
    local pkgs
    mapfile -t pkgs < <(printf '%s\n' "$@" | sort -u)
    $is_root || die "missing tools; install them first: apt-get install ${pkgs[*]}"
    log "installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null; } ||
        die "apt-get install ${pkgs[*]} failed"
}

# The packages of the `command:package` pairs whose command is missing.
missing_of() {
    local pair
    for pair in "$@"; do
        command -v "${pair%%:*}" >/dev/null 2>&1 || printf '%s\n' "${pair#*:}"
    done
}

# Builds the release binaries; sets built_capsule and built_bench. cargo is
# asked where it put them: .cargo/config.toml sets a build target, which
# changes the path.
build_release() {
    local cargo artifacts
    cargo=$(command -v cargo || true)
    [[ -z $cargo && -x $HOME/.cargo/bin/cargo ]] && cargo=$HOME/.cargo/bin/cargo
    [[ -n $cargo ]] || die "cargo not found"
    log "building: cargo build --release -p capsule-cli -p capsule-testkit --bin capsule --bin capsule-cli --bin capsule-bench"
    artifacts=$(cd "$repo" && "$cargo" build --release -p capsule-cli -p capsule-testkit --bin capsule --bin capsule-cli \
        --bin capsule-bench --message-format=json-render-diagnostics |
        jq -r 'select(.reason == "compiler-artifact" and (.target.kind | index("bin")) and .executable != null)
               | "\(.target.name)\t\(.executable)"') || die "cargo build failed"
    built_capsule=$(awk -F'\t' '$1 == "capsule" { print $2 }' <<<"$artifacts" | tail -n 1)
    built_bench=$(awk -F'\t' '$1 == "capsule-bench" { print $2 }' <<<"$artifacts" | tail -n 1)
    [[ -x $built_capsule && -x $built_bench ]] || die "cargo reported no capsule or capsule-bench executable"
}

# Picks who measures and where: as root, the system user $bench_user
# (created if missing) and the world-readable $BENCH_DIR (default: the
# second argument), its output directory OUT (the first) emptied; otherwise
# the caller, in a fresh temporary directory. Sets stage, out, as_user and
# run_user.
stage_and_user() {
    if $is_root; then
        stage=${BENCH_DIR:-$2}
        if ! id -u "$bench_user" >/dev/null 2>&1; then
            log "creating system user $bench_user"
            useradd -r -M -s /usr/sbin/nologin "$bench_user"
        fi
        install -d -m 0755 -o root -g root "$stage"
        out=$stage/$1
        rm -rf "$out"
        install -d -m 0755 -o "$bench_user" -g "$(id -gn "$bench_user")" "$out"
        as_user=(setpriv "--reuid=$bench_user" "--regid=$(id -g "$bench_user")" --clear-groups)
        run_user=$bench_user
    else
        stage=$(mktemp -d "${TMPDIR:-/tmp}/capsule-bench.XXXXXX")
        out=$stage/$1
        mkdir "$out"
        as_user=()
        run_user=$(id -un)
    fi
}

# Copies the built binaries into the stage.
install_binaries() {
    install -m 0755 "$built_capsule" "$stage/capsule"
    install -m 0755 "$(dirname "$built_capsule")/capsule-cli" "$stage/capsule-cli"
    install -m 0755 "$built_bench" "$stage/capsule-bench"
}
