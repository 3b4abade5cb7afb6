//! Links the front end (`capsule`, src/front.rs) without a C library: its
//! own `_start`, no start files, no libc, a static executable that needs
//! no relocation at start (the objects are position-independent code, so
//! the linker resolves everything itself).
//!
//! Also names the git commit `--version` prints (CAPSULE_GIT_COMMIT): the
//! environment's CAPSULE_GIT_COMMIT where set (a build from an exported
//! tree), else `git rev-parse` of the source tree, else `unknown`.
use std::process::Command;

fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie", "-Wl,--gc-sections"] {
        println!("cargo:rustc-link-arg-bin=capsule={arg}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CAPSULE_GIT_COMMIT");
    let commit = std::env::var("CAPSULE_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(git_commit);
    println!("cargo:rustc-env=CAPSULE_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}

fn git(args: &[&str]) -> Option<String> {
    // A tree owned by another user (a clone built with `sudo scripts/test.sh`) is read all the same.
    let out = Command::new("git").args(["-c", "safe.directory=*"]).args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

/// The commit checked out, rebuilt when HEAD moves (a commit, a checkout):
/// HEAD, the branch it names and packed-refs are watched where they exist
/// (a path that does not exist would rerun this script on every build).
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched =
        vec![git(&["rev-parse", "--git-path", "HEAD"])?, git(&["rev-parse", "--git-path", "packed-refs"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    for p in watched {
        let p = std::path::Path::new(&p);
        let p = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().ok()?.join(p) };
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    Some(commit)
}
