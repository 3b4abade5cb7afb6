//! `--preset agent` (`capsule run`, `shell`, `why`): the run spec for a
//! coding agent's commands in a project (docs/presets.md, docs/agents.md).
//! Built here, as the caller, from what the caller's directory holds (the
//! repository's root, its real gitdir) and its environment.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use capsule::spec::RunSpec;

/// The presets `--preset` knows.
pub const NAMES: [&str; 1] = ["agent"];

/// Editor and agent configuration a person's tools run or obey, in the
/// project's root: read-only, and kept from being created.
pub const PROJECT_GUARDS: [&str; 11] = [
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude",
    ".codex",
    ".gemini",
    ".cursor",
    ".windsurf",
    ".zed",
    ".devcontainer",
    ".envrc",
];

/// Toolchain caches, shown (writable in the layer, read-only without one).
pub const CACHES: [&str; 8] = [
    "~/.cargo/registry",
    "~/.cargo/git",
    "~/.npm",
    "~/.cache/pip",
    "~/go/pkg/mod",
    "~/.cache/go-build",
    "~/.bun/install/cache",
    "~/.cache/yarn",
];

/// Toolchains and the configuration they need, shown read-only.
pub const TOOLCHAINS: [&str; 8] = [
    "~/.cargo/bin",
    "~/.cargo/config.toml",
    "~/.rustup",
    "~/.bun/bin",
    "~/go/bin",
    "~/.local/bin",
    "~/.gitconfig",
    "~/.config/git/config",
];

/// The hosts an agent's dependency installs and fetches reach by name,
/// through the proxy (`egress`, docs/egress.md): the package indexes and
/// GitHub. More with `--allow-host`; fewer with `--deny-host`.
pub const HOSTS: [&str; 5] = ["@pypi", "@npm", "@crates", "@go", "@github"];

/// Environment variables never passed unless named with `--keep-env`
/// (or set with `--setenv`): exact names, and `*` patterns.
pub const SECRET_ENV: [&str; 26] = [
    "AWS_*",
    "AZURE_*",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITLAB_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "NPM_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "PYPI_TOKEN",
    "HF_TOKEN",
    "DATABASE_URL",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "VAULT_*",
    "*_TOKEN",
    "*_TOKEN_*",
    "*_API_KEY",
    "*_KEY",
    "*_SECRET",
    "*_SECRET_*",
    "*PASSWORD*",
    "*_PASSWD",
    "*_CREDENTIALS",
];

/// Whether the environment variable `name` is one of [`SECRET_ENV`].
pub fn secret_env(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    SECRET_ENV.iter().any(|p| match (p.strip_prefix('*'), p.strip_suffix('*')) {
        (Some(mid), _) if mid.ends_with('*') => n.contains(&mid[..mid.len() - 1]),
        (Some(tail), _) => n.ends_with(tail),
        (None, Some(head)) => n.starts_with(head),
        (None, None) => n == *p,
    })
}

/// The project an agent works in: the root of the git worktree holding
/// `cwd` (not the home or above it), else `cwd`.
fn project_root(cwd: &Path, home: Option<&Path>) -> Result<PathBuf> {
    if home.is_some_and(|h| h.starts_with(cwd)) || cwd == Path::new("/") {
        bail!(
            "--preset agent: the working directory {} is your home or above it, and the preset shows the \
             working directory writable; to fix: cd into the project first",
            cwd.display()
        );
    }
    let found = cwd.ancestors().find(|d| d.join(".git").symlink_metadata().is_ok());
    Ok(match found {
        Some(root) if !home.is_some_and(|h| h.starts_with(root)) => root.to_path_buf(),
        _ => cwd.to_path_buf(),
    })
}

/// A `.git` file's `gitdir:` (a linked worktree, a submodule), absolute.
fn gitdir_of_file(dotgit: &Path) -> Result<PathBuf> {
    let text =
        std::fs::read_to_string(dotgit).with_context(|| format!("--preset agent: reading {}", dotgit.display()))?;
    let Some(rel) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
        bail!("--preset agent: {} is a file without a `gitdir:` line", dotgit.display());
    };
    let dir = dotgit.parent().expect("a file in a directory").join(rel.trim());
    std::fs::canonicalize(&dir).with_context(|| format!("--preset agent: the gitdir of {}", dotgit.display()))
}

/// The repository's directories outside the worktree the agent needs
/// (`dirs`) and what in them is guarded (`guards`).
#[derive(Default)]
struct Git {
    dirs: Vec<PathBuf>,
    guards: Vec<PathBuf>,
    /// The `.git` entry is a file (its `gitdir:` must not change).
    dotgit_file: Option<PathBuf>,
}

fn git_of(root: &Path) -> Result<Git> {
    let dotgit = root.join(".git");
    let mut g = Git::default();
    let Ok(meta) = dotgit.symlink_metadata() else { return Ok(g) };
    let (gitdir, common) = if meta.is_file() {
        let gitdir = gitdir_of_file(&dotgit)?;
        let common = match std::fs::read_to_string(gitdir.join("commondir")) {
            Ok(c) => std::fs::canonicalize(gitdir.join(c.trim())).unwrap_or(gitdir.clone()),
            Err(_) => gitdir.clone(), // a submodule's gitdir is its own
        };
        g.dotgit_file = Some(dotgit.clone());
        (gitdir, common)
    } else {
        (dotgit.clone(), dotgit.clone())
    };
    for d in [&common, &gitdir] {
        if !d.starts_with(root) && !g.dirs.contains(d) {
            g.dirs.push(d.clone());
        }
    }
    g.guards.push(common.join("hooks"));
    g.guards.push(common.join("config"));
    if gitdir != common {
        // A linked worktree's own settings (extensions.worktreeConfig).
        g.guards.push(gitdir.join("config.worktree"));
    }
    // Submodules' gitdirs: their hooks and settings too.
    let mut stack = vec![common.join("modules")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if p.join("HEAD").is_file() {
                g.guards.push(p.join("hooks"));
                g.guards.push(p.join("config"));
                stack.push(p.join("modules"));
            } else {
                stack.push(p); // a submodule named a/b
            }
        }
    }
    Ok(g)
}

/// Applies the preset `name` to `spec` before the command line's own
/// filesystem rules (which then override it): `layered` is false with
/// `--no-layer`.
pub fn apply(name: &str, spec: &mut RunSpec, cwd: &Path, layered: bool) -> Result<()> {
    if name != "agent" {
        bail!("--preset {name}: no such preset (there is: {})", NAMES.join(", "));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let root = project_root(cwd, home.as_deref())?;
    let git = git_of(&root)?;
    let fs = &mut spec.filesystem;
    fs.hide.push("~".into());
    fs.read_only.extend(TOOLCHAINS.iter().map(PathBuf::from));
    fs.allow.extend(CACHES.iter().map(PathBuf::from));
    if layered {
        // Shown from the layer's view: writes land in the layer.
        fs.allow.push(root.clone());
        fs.allow.extend(git.dirs.iter().cloned());
    } else {
        fs.writable.push(root.clone());
        fs.writable.extend(git.dirs.iter().cloned());
        if root.join(".git").is_dir() {
            // A mount point cannot be renamed away and replaced.
            fs.writable.push(root.join(".git"));
        }
    }
    let mut guards: Vec<PathBuf> = PROJECT_GUARDS.iter().map(|g| root.join(g)).collect();
    guards.extend(git.guards);
    guards.extend(git.dotgit_file);
    if !layered {
        // Without a layer a missing path cannot be stood in for (docs/presets.md).
        // git reads config.worktree only with extensions.worktreeConfig,
        // which is set in the (guarded) config.
        guards.retain(|g| g.symlink_metadata().is_ok() || !g.ends_with("config.worktree"));
        let missing: Vec<&PathBuf> = guards.iter().filter(|g| g.symlink_metadata().is_err()).collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "--preset agent --no-layer: these do not exist, and without a layer capsule cannot keep the program \
                 from creating them without making them on your disk, which it does not do: {}; to fix: run in a \
                 layer (drop --no-layer: the preset's default), or create them yourself (empty directories, `{{}}` \
                 in .mcp.json), which are then mounted read-only",
                names.join(" ")
            );
        }
    }
    fs.guard.extend(guards);
    // The network by name, beside the command line's hosts (`--share-net` instead: the host's, all of it).
    if !spec.share_net {
        let e = spec.egress.get_or_insert_with(Default::default);
        for h in HOSTS {
            if !e.allow_hosts.iter().any(|a| a == h) {
                e.allow_hosts.push(h.to_string());
            }
        }
    }
    // The caller's environment, but the secrets.
    spec.keep_env.extend(std::env::vars_os().filter_map(|(k, _)| {
        let k = k.into_string().ok()?;
        let plain = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        (plain && !secret_env(&k)).then_some(k)
    }));
    Ok(())
}

/// The preset's layer when none is given: `$XDG_STATE_HOME/capsule/agent`,
/// else `~/.local/state/capsule/agent`.
/// Its parent is made (mode 0700) if missing.
pub fn default_layer() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let state = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let dir = match (state, home) {
        (Some(s), _) => s.join("capsule"),
        (None, Some(h)) => h.join(".local/state/capsule"),
        (None, None) => bail!("--preset agent: no layer given and no HOME to keep one in; to fix: --layer DIR"),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("--preset agent: making {} for its layer (or give --layer DIR)", dir.display()))?;
    Ok(dir.join("agent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for s in ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "gh_token", "MY_API_KEY", "DB_PASSWORD", "X_TOKEN_2"] {
            assert!(secret_env(s), "{s}");
        }
        for s in ["PATH", "HOME", "LANG", "TERM", "CARGO_HOME", "TOKENIZERS_PARALLELISM", "EDITOR"] {
            assert!(!secret_env(s), "{s}");
        }
    }
}
