//! `--preset agent` (docs/presets.md, docs/agents.md), as the unprivileged
//! test user, in a git clone and a linked worktree: sources editable in
//! the preset's layer and on the host after a commit, `git commit` inside,
//! hooks, git config, `.mcp.json` and editor/agent settings neither
//! created nor changed (in the run, nor by a commit of the layer), the
//! home hidden but its caches, secrets kept out of the environment, the
//! `--no-layer` variant, and `capsule why` and `--explain` naming the rule.

use capsule_testkit as common;

use common::*;

/// A home `$S/home` holding a clone `proj` of `$S/src` (and, with
/// `worktree`, its linked worktree `wt`), some dotfiles and a cargo cache.
struct Fx {
    s: Scratch,
}

impl Fx {
    fn new(tag: &str, worktree: bool) -> Fx {
        let fx = Fx { s: Scratch::new(tag) };
        fx.host(&format!(
            "git init -q src && cd src && git config user.email t@e && git config user.name T
             echo one > a.txt && git add a.txt && git commit -qm init && cd ..
             mkdir home && git clone -q src home/proj && cd home/proj
             git config user.email t@e && git config user.name T
             printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-push && chmod +x .git/hooks/pre-push
             mkdir .claude && echo '{{}}' > .claude/settings.json
             {}
             cd $S/home && echo 'alias x=y' > .bashrc && mkdir -p .ssh .cargo/registry && echo key > .ssh/id
             echo cached > .cargo/registry/x",
            if worktree { "git worktree add -q ../wt" } else { "" }
        ));
        fx
    }

    fn host(&self, script: &str) -> String {
        let full = format!("set -e\nS={}\ncd \"$S\"\n{script}", self.s.s());
        let out = as_user(&["sh", "-c", &full]).output().expect("run sh");
        assert!(out.status.success(), "host script failed: {}\n{script}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn home(&self) -> String {
        self.s.join("home").display().to_string()
    }

    /// `capsule VERB OPTS -- sh -c SCRIPT` in `home/DIR`, `$HOME` the fixture's.
    fn cmd(&self, dir: &str, verb: &[&str], script: Option<&str>) -> Cmd {
        let mut c = capsule(verb);
        if let Some(s) = script {
            c.args(&["--", "/bin/sh", "-c", s]);
        }
        c.cwd(self.s.join("home").join(dir)).env("HOME", &self.home());
        c
    }

    fn layer(&self) -> String {
        format!("{}/.local/state/capsule/agent", self.home())
    }
}

/// `try NAME CMD`: prints `NAME ok` or `NAME no`.
const TRY: &str =
    "t() { n=$1; shift; if ( eval \"$*\" ) 2>/dev/null; then echo \"$n ok\"; else echo \"$n no\"; fi; }\n";

fn says(out: &Out, name: &str, what: &str) {
    let line = format!("{name} {what}");
    assert!(out.stdout.lines().any(|l| l == line), "expected `{line}`; {}", out.describe());
}

#[test]
fn agent_preset_in_a_clone() {
    let fx = Fx::new("agent-clone", false);
    let script = format!(
        "{TRY}t edit 'echo two > a.txt'
         t new 'mkdir -p src && echo fn > src/new.rs'
         t commit 'git add -A && git commit -qm inside'
         t hook-new 'echo evil > .git/hooks/pre-commit'
         t hook-change 'echo evil >> .git/hooks/pre-push'
         t git-config 'echo \"[core] hooksPath = /tmp\" >> .git/config'
         t mcp 'echo {{}} > .mcp.json'
         t vscode 'mkdir -p .vscode && echo {{}} > .vscode/settings.json'
         t claude-change 'echo evil > .claude/settings.json'
         t claude-new 'echo evil > .claude/other.json'
         t bashrc 'echo evil >> ~/.bashrc'
         t ssh 'cat ~/.ssh/id'
         t cache-read 'grep -q cached ~/.cargo/registry/x'
         t cache-write 'echo new > ~/.cargo/registry/y'
         echo \"env GITHUB_TOKEN=${{GITHUB_TOKEN-unset}} OPENAI_API_KEY=${{OPENAI_API_KEY-unset}} AWS_SECRET_ACCESS_KEY=${{AWS_SECRET_ACCESS_KEY-unset}} FOO=${{FOO-unset}}\""
    );
    let out = fx
        .cmd("proj", &["run", "-q", "--no-review", "--preset", "agent", "--keep-env", "OPENAI_API_KEY"], Some(&script))
        .env("GITHUB_TOKEN", "s1")
        .env("OPENAI_API_KEY", "s2")
        .env("AWS_SECRET_ACCESS_KEY", "s3")
        .env("FOO", "bar")
        .run();
    out.assert_code(0);
    for ok in ["edit", "new", "commit", "cache-read", "cache-write"] {
        says(&out, ok, "ok");
    }
    for no in ["hook-new", "hook-change", "git-config", "mcp", "vscode", "claude-change", "claude-new", "bashrc", "ssh"]
    {
        says(&out, no, "no");
    }
    assert!(
        out.stdout.contains("env GITHUB_TOKEN=unset OPENAI_API_KEY=s2 AWS_SECRET_ACCESS_KEY=unset FOO=bar"),
        "{}",
        out.stdout
    );
    // The host is untouched until the layer is committed; the stand-ins
    // are no change.
    let proj = fx.s.join("home/proj");
    assert_eq!(std::fs::read_to_string(proj.join("a.txt")).unwrap(), "one\n");
    let list = capsule(&["layer", "list", &fx.layer()]).run();
    list.assert_code(0);
    for absent in [".mcp.json", ".vscode", ".git/hooks/pre-commit", ".git/config", ".bashrc"] {
        assert!(!list.stdout.contains(absent), "{absent} listed: {}", list.stdout);
    }
    assert!(list.stdout.contains("/proj/a.txt") && list.stdout.contains("/proj/src"), "{}", list.stdout);
    capsule(&["layer", "commit", &fx.layer()]).run().assert_code(0);
    assert_eq!(std::fs::read_to_string(proj.join("a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(proj.join("src/new.rs")).unwrap(), "fn\n");
    assert!(fx.host("cd home/proj && git log --format=%s -1").contains("inside"));
    assert!(!proj.join(".mcp.json").exists() && !proj.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read_to_string(proj.join(".claude/settings.json")).unwrap(), "{}\n");

    // A run without the preset over the same layer may create them in the
    // layer; no commit takes them to the host, even with --force.
    let layer = fx.layer();
    let plain = "echo {} > .mcp.json; echo evil > .git/hooks/pre-commit; echo ok > b.txt";
    fx.cmd("proj", &["run", "-q", "--no-review", "--layer", &layer], Some(plain)).run().assert_code(0);
    let commit = capsule(&["layer", "commit", &layer, "--force"]).run();
    commit.assert_code(1);
    assert!(
        commit.stderr.contains(".mcp.json") && commit.stderr.contains("hidden or read-only"),
        "{}",
        commit.describe()
    );
    assert!(!proj.join(".mcp.json").exists() && !proj.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read_to_string(proj.join("b.txt")).unwrap(), "ok\n");

    // `capsule why` agrees, and --explain names the preset's rule.
    let why = |p: &str| fx.cmd("proj", &["why", "--preset", "agent", "--write", p], None).run();
    let w = why(".mcp.json");
    w.assert_code(1);
    assert!(w.stdout.contains("rule guard") && w.stdout.contains("--preset agent"), "{}", w.describe());
    why(".git/hooks/pre-commit").assert_code(1);
    why(".git/config").assert_code(1);
    why(&format!("{}/.bashrc", fx.home())).assert_code(1);
    why("a.txt").assert_code(0);
    why(".git/objects/x").assert_code(0);
    let out = fx
        .cmd("proj", &["run", "-q", "--no-review", "--explain", "--preset", "agent"], Some("touch .mcp.json; true"))
        .json()
        .run();
    out.assert_code(0);
    let v = out.json()["violations"].as_array().cloned().unwrap_or_default();
    let mcp = v.iter().find(|v| v["path"].as_str().is_some_and(|p| p.ends_with("/proj/.mcp.json"))).expect("reported");
    assert!(mcp["rule"].as_str().unwrap().contains("--preset agent"), "{mcp}");
}

#[test]
fn agent_preset_in_a_linked_worktree() {
    let fx = Fx::new("agent-worktree", true);
    let script = format!(
        "{TRY}t edit 'echo wt > a.txt'
         t commit 'git commit -qam in-worktree'
         t hook-new 'echo evil > ../proj/.git/hooks/pre-commit'
         t git-config 'echo evil >> ../proj/.git/config'
         t dotgit 'echo gitdir: /tmp > .git'
         t mcp 'echo {{}} > .mcp.json'
         t main-files 'cat ../proj/a.txt'"
    );
    let out = fx.cmd("wt", &["run", "-q", "--no-review", "--preset", "agent"], Some(&script)).run();
    out.assert_code(0);
    for ok in ["edit", "commit"] {
        says(&out, ok, "ok");
    }
    // The main worktree's files are not the agent's (only its gitdir).
    for no in ["hook-new", "git-config", "dotgit", "mcp", "main-files"] {
        says(&out, no, "no");
    }
    capsule(&["layer", "commit", &fx.layer()]).run().assert_code(0);
    assert!(fx.host("cd home/wt && git log --format=%s -1").contains("in-worktree"));
    assert!(fx.host("cat home/wt/.git").starts_with("gitdir: "));
    assert!(!fx.s.join("home/proj/.git/hooks/pre-commit").exists());
}

#[test]
fn agent_preset_without_a_layer() {
    let fx = Fx::new("agent-nolayer", false);
    // What is missing cannot be kept from being created without a layer.
    let out = fx.cmd("proj", &["run", "-q", "--preset", "agent", "--no-layer"], Some("true")).run();
    out.assert_code(125);
    assert!(out.stderr.contains(".mcp.json") && out.stderr.contains("drop --no-layer"), "{}", out.describe());
    fx.host(
        "cd home/proj && mkdir .vscode .idea .codex .gemini .cursor .windsurf .zed .devcontainer
         echo '{}' > .mcp.json && touch .envrc",
    );
    let script = format!(
        "{TRY}t edit 'echo two > a.txt'
         t commit 'git commit -qam direct'
         t hook-new 'echo evil > .git/hooks/pre-commit'
         t git-config 'echo evil >> .git/config'
         t mcp 'echo evil > .mcp.json'
         t vscode 'echo {{}} > .vscode/settings.json'
         t replace-git 'mv .git .git-old'
         t bashrc 'echo evil >> ~/.bashrc'
         t cache-write 'echo new > ~/.cargo/registry/y'"
    );
    let out = fx.cmd("proj", &["run", "-q", "--preset", "agent", "--no-layer"], Some(&script)).run();
    out.assert_code(0);
    for ok in ["edit", "commit"] {
        says(&out, ok, "ok");
    }
    for no in ["hook-new", "git-config", "mcp", "vscode", "replace-git", "bashrc", "cache-write"] {
        says(&out, no, "no");
    }
    let proj = fx.s.join("home/proj");
    assert_eq!(std::fs::read_to_string(proj.join("a.txt")).unwrap(), "two\n");
    assert!(fx.host("cd home/proj && git log --format=%s -1").contains("direct"));
    assert_eq!(std::fs::read_to_string(proj.join(".mcp.json")).unwrap(), "{}\n");
    assert!(!proj.join(".git/hooks/pre-commit").exists() && !proj.join(".vscode/settings.json").exists());
}

/// The preset's network is the package indexes and GitHub by name, through
/// the proxy: the run has the proxy's variables, a host outside the groups
/// is refused with the option that would allow it, and `--share-net`
/// instead leaves the proxy out.
#[test]
fn agent_preset_reaches_package_indexes_by_name() {
    require!("agent_preset_reaches_package_indexes_by_name", userns_available());
    let project = Scratch::new("agent-net");
    chown_to_user(&project.join("."));
    let why = |extra: &[&str]| {
        let layer = project.join("layer").display().to_string();
        let mut c = capsule(&["why", "--preset", "agent", "--layer", &layer]);
        c.args(extra).cwd(project.join("."));
        c.run()
    };
    let out = why(&["--host", "pypi.org"]);
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let out = why(&["--host", "example.com"]);
    assert_eq!(out.code, Some(1), "{}", out.describe());
    assert!(out.stdout.contains("--allow-host"), "{}", out.describe());
    let layer = project.join("layer").display().to_string();
    let mut c = capsule(&[
        "run",
        "-q",
        "--no-review",
        "--preset",
        "agent",
        "--layer",
        &layer,
        "--",
        "/bin/sh",
        "-c",
        "echo $HTTPS_PROXY",
    ]);
    c.cwd(project.join("."));
    let out = c.run();
    assert_eq!((out.code, out.stdout.trim()), (Some(0), "http://127.0.0.1:3128"), "{}", out.describe());
}
