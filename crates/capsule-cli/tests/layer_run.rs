//! End-to-end tests of `capsule run --layer` : real programs change
//! a scratch "project" directory (the working directory) in a layer; the
//! host tree must stay byte-for-byte as it was until `capsule layer commit`,
//! which must then make it what the program saw. Also persistence,
//! stacking, conflicts, locking, hidden paths, and the `--root` layer
//! (fuse-overlayfs) with a package installed by `dpkg -i`.
//!
//! Crafted layer directories (`../` names, links out, a killed commit) are
//! tested in tests/layer.rs. Real system files are only ever read here:
//! `--root` layers are discarded, never committed.

use capsule_testkit as common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

// ---------------------------------------------------------------- fixture

/// A project directory `p` (the runs' working directory), a home `h` (the
/// runs' `$HOME`) and a directory `l` holding the layers, all owned by the
/// test user.
struct Fx {
    p: Scratch,
    h: Scratch,
    l: Scratch,
}

impl Fx {
    fn new(tag: &str) -> Fx {
        Fx {
            p: Scratch::new(&format!("{tag}-proj")),
            h: Scratch::new(&format!("{tag}-home")),
            l: Scratch::new(&format!("{tag}-layers")),
        }
    }

    /// With the layers in a directory of its own directly under /var/tmp,
    /// not in the scratch directory: a stacked run's overlays go around
    /// the directories holding the earlier layers (overlayfs refuses a
    /// layer inside another), one overlay per subdirectory of each, and
    /// the scratch directory's come and go with the tests running beside.
    fn with_own_layer_dir(tag: &str) -> Fx {
        let path = Path::new("/var/tmp").join(unique(&format!("capsule-layer-run-{tag}")));
        std::fs::create_dir(&path).unwrap();
        chown_to_user(&path);
        Fx { p: Scratch::new(&format!("{tag}-proj")), h: Scratch::new(&format!("{tag}-home")), l: Scratch { path } }
    }

    /// The layer directory `name` (not created: the first run makes it).
    fn layer_dir(&self, name: &str) -> PathBuf {
        self.l.join(name)
    }

    fn vars(&self) -> String {
        format!("P={}\nH={}\nL={}\n", self.p.s(), self.h.s(), self.l.s())
    }

    /// Runs a shell script on the host as the test user, with $P, $H and
    /// $L set, in $P.
    fn host_sh(&self, script: &str) -> String {
        let full = format!("set -e\n{}cd \"$P\"\n{script}", self.vars());
        let out = as_user(&["sh", "-c", &full]).output().expect("run sh");
        assert!(out.status.success(), "host script failed: {}\n{script}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `capsule run -q [--layer DIR]... OPTS -- sh -c SCRIPT` in $P, with
    /// $P, $H and $L set in the script.
    fn run(&self, layers: &[&str], opts: &[&str], script: &str) -> Out {
        let mut c = self.run_cmd(layers, opts, script);
        c.run()
    }

    fn run_cmd(&self, layers: &[&str], opts: &[&str], script: &str) -> Cmd {
        let mut c = capsule(&["run", "-q"]);
        for l in layers {
            c.arg("--layer").arg(self.layer_dir(l));
        }
        c.args(opts).arg("--").arg("sh").arg("-c").arg(format!("{}{script}", self.vars()));
        c.cwd(self.p.path.clone()).env("HOME", &self.h.s());
        c
    }

    /// `capsule layer VERB DIR ARGS...`.
    fn layer(&self, verb: &str, name: &str, args: &[&str]) -> Out {
        let mut c = capsule(&["layer", verb]);
        c.arg(self.layer_dir(name)).args(args);
        c.run()
    }

    /// `layer list` lines, with the project, home and layers directories
    /// written `P`, `H` and `L`.
    fn list(&self, name: &str) -> Vec<String> {
        let out = self.layer("list", name, &[]);
        out.assert_code(0);
        // Without the details in parentheses (sizes, special bits).
        out.stdout.lines().map(|l| self.short(l.split_once("  (").map_or(l, |(a, _)| a))).collect()
    }

    fn short(&self, s: &str) -> String {
        s.replace(&self.p.s(), "P").replace(&self.h.s(), "H").replace(&self.l.s(), "L")
    }
}

/// A shell snippet printing every entry below `$1`-like `dir` (path, type,
/// permission bits, owner, link target), then the SHA-256 of every file:
/// run in the sandbox it is what the program saw, on the host what is.
fn listing(dir: &str) -> String {
    format!(
        r#"(cd "{dir}" && find . -mindepth 1 -printf '%P %y %m %U %l\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)"#
    )
}

const MARK: &str = "=== listing ===\n";

/// The part of a run's stdout after [`MARK`].
fn after_mark(out: &Out) -> String {
    let (_, l) = out.stdout.split_once(MARK).unwrap_or_else(|| panic!("no listing printed; {}", out.describe()));
    l.to_string()
}

/// Every entry at and below `root`, never following a link: lstat fields
/// (inode, mode, owner, size, link count, mtime and ctime to the
/// nanosecond), the bytes of each file, the target of each link.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(p: &Path, m: &mut BTreeMap<PathBuf, String>) {
        let md = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
        let mut s = format!(
            "ino={} mode={:o} uid={} gid={} size={} nlink={} mtime={}.{:09} ctime={}.{:09}",
            md.ino(),
            md.mode(),
            md.uid(),
            md.gid(),
            md.size(),
            md.nlink(),
            md.mtime(),
            md.mtime_nsec(),
            md.ctime(),
            md.ctime_nsec()
        );
        let ft = md.file_type();
        if ft.is_file() {
            s.push_str(&format!(" content={:?}", std::fs::read(p).unwrap()));
        } else if ft.is_symlink() {
            s.push_str(&format!(" target={:?}", std::fs::read_link(p).unwrap()));
        }
        m.insert(p.to_path_buf(), s);
        if ft.is_dir() {
            let mut kids: Vec<PathBuf> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
            kids.sort();
            for k in kids {
                walk(&k, m);
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(root, &mut m);
    m
}

#[track_caller]
fn assert_same(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>, what: &str) {
    let mut diffs = Vec::new();
    for (k, v) in before {
        match after.get(k) {
            None => diffs.push(format!("gone: {}", k.display())),
            Some(w) if w != v => diffs.push(format!("changed: {}\n  before {v}\n  after  {w}", k.display())),
            _ => {}
        }
    }
    for k in after.keys().filter(|k| !before.contains_key(*k)) {
        diffs.push(format!("new: {}", k.display()));
    }
    assert!(diffs.is_empty(), "{what}: the host tree changed:\n{}", diffs.join("\n"));
}

/// The bytes of a host file (`None`: absent), read as root.
fn host_bytes(p: &str) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

/// The `--root` (fuse-overlayfs) tests take this exclusively, the others
/// shared: a `dpkg -i` in a `--root` layer was seen failing now and then
/// (`unable to truncate for updated status ...: No such file or
/// directory`, `error setting ownership of ...: No such file or
/// directory`) while other layer runs (kernel overlays) started and ended
/// beside it, about one time in eight: not understood yet, reported as a
/// bug. The tests of this file are about each scenario, not that
/// interference.
static FUSE_ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    FUSE_ALONE.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    FUSE_ALONE.write().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- requirements

/// Unprivileged kernel overlayfs: Linux ≥ 5.11, and user namespaces.
fn layers_available() -> Result<(), String> {
    userns_available()?;
    let (major, minor) = kernel_version();
    if (major, minor) < (5, 11) {
        return Err(format!("Linux {major}.{minor} has no overlayfs in user namespaces (5.11 or later)"));
    }
    Ok(())
}

fn in_path(prog: &str) -> bool {
    DEFAULT_PATH.split(':').any(|d| Path::new(d).join(prog).is_file())
}

/// What a `--root` layer run needs: fuse-overlayfs and /dev/fuse.
fn fuse_available() -> Result<(), String> {
    layers_available()?;
    if !in_path("fuse-overlayfs") {
        return Err("fuse-overlayfs is not installed (apt-get install fuse-overlayfs)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing".into());
    }
    Ok(())
}

// ---------------------------------------------------------------- changes

/// Each kind of change a program makes, through the kernel overlays of the
/// working directory: the host is untouched, `list` and `diff` show
/// exactly the changes, `commit` makes the host what the program saw, and
/// the layer is then empty.
#[test]
fn each_kind_of_change_by_a_program_then_committed() {
    require!("each_kind_of_change_by_a_program_then_committed", layers_available());
    let _serial = shared();
    let fx = Fx::new("kinds");
    fx.host_sh(
        r#"printf 'one\ntwo\nthree\n' > mod.txt
echo a > append.txt
echo bye > gone.txt
echo moved > old-name.txt
printf '#!/bin/sh\necho run\n' > run.sh; chmod 644 run.sh
mkdir -p dir-to-file/inner; echo x > dir-to-file/inner/f
mkdir -p opq/b; echo a > opq/a; echo b > opq/b/b
echo f > file-to-dir
echo same > same.txt
mkdir sub; echo deep > sub/deep.txt"#,
    );
    let before = snapshot(&fx.p.path);
    let out = fx.run(
        &["L"],
        &[],
        &format!(
            r#"set -e
sed -i 's/two/TWO/' mod.txt
echo more >> append.txt
rm gone.txt
mv old-name.txt new-name.txt
chmod 755 run.sh
echo hello > new.txt
ln -s mod.txt link
rm -rf dir-to-file; echo now-a-file > dir-to-file
rm -rf opq; mkdir opq; echo fresh > opq/fresh
rm file-to-dir; mkdir file-to-dir; echo in > file-to-dir/inside
touch same.txt
echo deeper >> sub/deep.txt
mkdir -p new-dir/a/b; echo c > new-dir/a/b/c.txt
printf '{MARK}'
{}"#,
            listing("$P")
        ),
    );
    out.assert_code(0);
    let seen = after_mark(&out);
    assert!(seen.contains("new-dir/a/b/c.txt f 644") && seen.contains("link l 777"), "{seen}");
    assert_same(&before, &snapshot(&fx.p.path), "after the run");
    let want = [
        "M  P/append.txt",
        "M  P/dir-to-file",
        "M  P/file-to-dir",
        "D  P/gone.txt",
        "A  P/link",
        "M  P/mod.txt",
        "A  P/new-dir",
        "A  P/new-name.txt",
        "A  P/new.txt",
        "D  P/old-name.txt",
        "D  P/opq/a",
        "D  P/opq/b",
        "A  P/opq/fresh",
        "M  P/run.sh",
        "M  P/sub/deep.txt",
    ];
    assert_eq!(fx.list("L"), want);
    let out = fx.layer("diff", "L", &[]);
    out.assert_code(0);
    let d = fx.short(&out.stdout);
    for piece in [
        "M P/mod.txt: content\n--- P/mod.txt\n+++ P/mod.txt (layer)\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
        "M P/append.txt: content, 2 -> 7 bytes\n--- P/append.txt\n+++ P/append.txt (layer)\n@@ -1 +1,2 @@\n a\n+more\n",
        "M P/run.sh: mode 0644 -> 0755\n",
        "M P/dir-to-file: type directory -> file\n",
        "M P/file-to-dir: type file -> directory\n",
        "D P/gone.txt: file, 4 bytes\n--- P/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
        "A P/new.txt: file, 6 bytes\n--- /dev/null\n+++ P/new.txt (layer)\n@@ -0,0 +1 @@\n+hello\n",
        "A P/link: symlink -> mod.txt\n",
        "A P/new-dir: new directory\n  + P/new-dir/a (directory)\n  + P/new-dir/a/b (directory)\n  + P/new-dir/a/b/c.txt (file, 2 bytes)\n",
        "D P/opq/b: directory\n",
        "A P/opq/fresh: file, 6 bytes\n",
    ] {
        assert!(d.contains(piece), "diff lacks\n{piece}\n---- in\n{d}");
    }
    // Reviewing changed nothing either.
    assert_same(&before, &snapshot(&fx.p.path), "after list and diff");
    let out = fx.layer("commit", "L", &[]);
    out.assert_code(0);
    assert_eq!(out.stdout.lines().count(), want.len(), "{}", out.describe());
    // The host is now what the program saw.
    assert_eq!(fx.host_sh(&listing("$P")), seen);
    // And the layer holds nothing more: no change, no file, no record.
    assert!(fx.list("L").is_empty());
    let files = fx.host_sh("find \"$L/L/upper\" ! -type d");
    assert_eq!(files, "", "files left in the upper tree");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.layer_dir("L").join("layer.json")).unwrap()).unwrap();
    assert_eq!(meta["originals"].as_object().map(|o| o.len()), Some(0), "{meta}");
    let out = fx.layer("commit", "L", &[]);
    out.assert_code(0);
    assert!(out.stderr.contains("nothing to commit"), "{}", out.describe());
    // A run over the emptied layer sees the committed tree.
    let out = fx.run(&["L"], &[], &format!("printf '{MARK}'; {}", listing("$P")));
    out.assert_code(0);
    assert_eq!(after_mark(&out), seen);
}

/// A build writing its outputs in the working directory, and scratch files
/// in /var/tmp, leaves the host clean; writes outside the layer's roots
/// fail as they do without a layer.
#[test]
fn a_build_in_the_working_directory_leaves_the_tree_clean() {
    require!("a_build_in_the_working_directory_leaves_the_tree_clean", layers_available());
    let _serial = shared();
    let fx = Fx::new("build");
    fx.host_sh(
        "printf 'all: out/result.txt\\n\\nout/result.txt: input.txt\\n\\tmkdir -p out\\n\\ttr a-z A-Z < input.txt > out/result.txt\\n' > Makefile
echo hello > input.txt",
    );
    let before = snapshot(&fx.p.path);
    let tmpname = format!("/var/tmp/{}", unique("capsule-layer-run"));
    let out = fx.run(&["L"], &[], &format!("make && cat out/result.txt && echo scratch > {tmpname} && cat {tmpname}"));
    out.assert_code(0);
    assert!(out.stdout.contains("HELLO\n") && out.stdout.contains("scratch\n"), "{}", out.describe());
    assert_same(&before, &snapshot(&fx.p.path), "after make");
    assert!(!Path::new(&tmpname).exists(), "{tmpname} was written on the host");
    let mut want = vec!["A  P/out".to_string(), format!("A  {tmpname}")];
    want.sort();
    assert_eq!(fx.list("L"), want);
    // The next run in the layer finds the build done.
    let out = fx.run(&["L"], &[], "make");
    out.assert_code(0);
    assert!(out.stdout.contains("Nothing to be done") || out.stdout.contains("is up to date"), "{}", out.describe());
    // Outside the roots (the host's /etc, as the test user): the same
    // error as without a layer, at once.
    let script = "set -e; echo x > /etc/capsule-layer-run-test; echo unreachable";
    let plain = fx.run(&[], &[], script);
    let layered = fx.run(&["L"], &[], script);
    for out in [&plain, &layered] {
        assert_eq!(out.code, Some(2), "{}", out.describe());
        assert!(!out.stdout.contains("unreachable"), "{}", out.describe());
        assert!(out.elapsed < Duration::from_secs(20), "{}", out.describe());
    }
    assert!(
        layered.stderr.contains("Read-only file system") || layered.stderr.contains("Permission denied"),
        "{}",
        layered.describe()
    );
    assert_eq!(layered.stderr, plain.stderr);
    assert!(!Path::new("/etc/capsule-layer-run-test").exists());
    assert_eq!(fx.list("L"), want);
}

// ---------------------------------------------------------------- persistence

/// A layer keeps its changes for the next run (a deletion included);
/// `--layer A --layer B` shows A's changes below B's and writes to B only;
/// an earlier layer that does not exist is an error naming it.
#[test]
fn persistence_and_stacking() {
    require!("persistence_and_stacking", layers_available());
    let _serial = shared();
    let fx = Fx::with_own_layer_dir("stack");
    fx.host_sh("echo v0 > f; echo doomed > gone; echo keep > kept");
    let host = snapshot(&fx.p.path);
    fx.run(&["A"], &[], "echo v1 > f; rm gone; mkdir d; echo x > d/x").assert_code(0);
    let out = fx.run(&["A"], &[], "cat f; test ! -e gone && echo gone-is-gone; cat d/x kept");
    out.assert_code(0);
    assert_eq!(out.stdout, "v1\ngone-is-gone\nx\nkeep\n", "{}", out.describe());
    let a_list = fx.list("A");
    assert_eq!(a_list, ["A  P/d", "M  P/f", "D  P/gone"]);
    let a_before = snapshot(&fx.layer_dir("A"));
    // Stacked: B sees A's changes; its writes land in B.
    let out = fx.run(
        &["A", "B"],
        &[],
        "cat f; test ! -e gone && echo gone-is-gone; cat d/x; echo v2 > f; echo new > g; rm kept",
    );
    out.assert_code(0);
    assert_eq!(out.stdout, "v1\ngone-is-gone\nx\n", "{}", out.describe());
    assert_eq!(fx.list("B"), ["M  P/f", "A  P/g", "D  P/kept"]);
    assert_eq!(fx.list("A"), a_list);
    assert_same(&a_before, &snapshot(&fx.layer_dir("A")), "layer A after a run stacked over it");
    assert_same(&host, &snapshot(&fx.p.path), "after the stacked run");
    // Again, both stacked: B's own changes persist too.
    let out = fx.run(&["A", "B"], &[], "cat f g d/x; test ! -e kept && test ! -e gone && echo both-gone");
    out.assert_code(0);
    assert_eq!(out.stdout, "v2\nnew\nx\nboth-gone\n", "{}", out.describe());
    // A missing earlier layer is named; nothing is created for it.
    let out = fx.run(&["missing", "B"], &[], "true");
    out.assert_code(125);
    assert!(
        out.stderr.contains(&format!("{}", fx.layer_dir("missing").display())) && out.stderr.contains("no layer there"),
        "{}",
        out.describe()
    );
    assert!(!fx.layer_dir("missing").exists());
    // A directory that is not a layer is refused as an earlier layer.
    std::fs::create_dir(fx.layer_dir("plain")).unwrap();
    chown_to_user(&fx.layer_dir("plain"));
    let out = fx.run(&["plain", "B"], &[], "true");
    out.assert_code(125);
    assert!(out.stderr.contains("only the last --layer may be new"), "{}", out.describe());
}

/// A run leaves its writes to the kernel's write-back (its overlays are
/// `volatile`): the layer is marked with the boot, the next run mounts it
/// again, `record` settles it, and a mark of another boot (a restart before the
/// layer was synced) stops runs, stacking and commit, not `list`, until
/// `capsule layer recover`.
#[test]
fn a_layer_written_back_later_and_a_restart_caught() {
    require!("a_layer_written_back_later_and_a_restart_caught", layers_available());
    let _serial = shared();
    let fx = Fx::with_own_layer_dir("volatile");
    let a = fx.layer_dir("A");
    let mark = a.join("volatile");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    fx.run(&["A"], &[], "echo v1 > f; sync f").assert_code(0);
    let text = std::fs::read_to_string(&mark).unwrap();
    assert!(text.starts_with(&format!("boot {boot}\n")), "{text:?}");
    let roots: Vec<&str> = text.lines().skip(1).collect();
    assert!(!roots.is_empty(), "{text:?}");
    let incompat = |r: &str| a.join("work").join(r.trim_start_matches('/')).join("work/incompat");
    assert!(roots.iter().any(|r| incompat(r).exists()), "overlayfs left no volatile mark: {roots:?}");
    // overlayfs would refuse these work directories: the run clears its
    // marks; the layer's own stays (nothing was synced).
    let out = fx.run(&["A"], &[], "cat f; echo v2 > g");
    out.assert_code(0);
    assert_eq!(out.stdout, "v1\n", "{}", out.describe());
    assert!(mark.exists(), "the second run removed the layer's mark");
    fx.layer("record", "A", &[]).assert_code(0);
    assert!(!mark.exists(), "record left the mark");
    assert!(roots.iter().all(|r| !incompat(r).exists()), "record left overlayfs's marks");
    // As after a crash: the run's mark names another boot.
    fx.run(&["A"], &[], "echo v3 > f").assert_code(0);
    let forged = std::fs::read_to_string(&mark).unwrap().replacen(&boot, "00000000-0000-0000-0000-00000000beef", 1);
    std::fs::write(&mark, forged).unwrap();
    let out = fx.run(&["A"], &[], "echo never > h");
    out.assert_code(125);
    assert!(
        out.stderr.contains("the machine has restarted since")
            && out.stderr.contains(&format!("capsule layer recover {}", a.display())),
        "{}",
        out.describe()
    );
    let out = fx.run(&["A", "B"], &[], "true");
    out.assert_code(125);
    assert!(out.stderr.contains("the machine has restarted since"), "{}", out.describe());
    let out = fx.layer("commit", "A", &[]);
    out.assert_code(1);
    assert!(out.stderr.contains("capsule layer recover"), "{}", out.describe());
    let out = fx.layer("list", "A", &[]);
    out.assert_code(0);
    assert!(out.stderr.contains("warning") && out.stdout.contains("/f"), "{}", out.describe());
    let out = fx.layer("recover", "A", &[]);
    out.assert_code(0);
    assert!(!mark.exists(), "{}", out.describe());
    let out = fx.run(&["A"], &[], "cat f g; test ! -e h && echo no-h");
    out.assert_code(0);
    assert_eq!(out.stdout, "v3\nv2\nno-h\n", "{}", out.describe());
    let out = fx.layer("commit", "A", &[]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(fx.p.path.join("f")).unwrap(), "v3\n");
    assert!(!mark.exists(), "commit left the mark");
}

// ---------------------------------------------------------------- conflicts

/// A host file changed after the run is a conflict at commit: refused and
/// named (exit 1) while the rest commits; `--force` applies it.
#[test]
fn conflicts_through_a_real_run() {
    require!("conflicts_through_a_real_run", layers_available());
    let _serial = shared();
    let fx = Fx::new("conflict");
    fx.host_sh("echo a0 > a; echo b0 > b");
    fx.run(&["L"], &[], "echo a1 > a; echo b1 > b; echo n > n").assert_code(0);
    fx.host_sh("echo a-host > a");
    let out = fx.layer("commit", "L", &[]);
    out.assert_code(1);
    let p = fx.p.s();
    assert!(
        out.stderr
            .contains(&format!("conflict, not committed: M  {p}/a: changed on the host since the layer recorded it")),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout.contains(&format!("committed  M  {p}/b\n"))
            && out.stdout.contains(&format!("committed  A  {p}/n\n")),
        "{}",
        out.describe()
    );
    assert_eq!(std::fs::read_to_string(fx.p.join("a")).unwrap(), "a-host\n");
    assert_eq!(std::fs::read_to_string(fx.p.join("b")).unwrap(), "b1\n");
    assert_eq!(std::fs::read_to_string(fx.p.join("n")).unwrap(), "n\n");
    assert_eq!(fx.list("L"), ["M  P/a"]);
    let out = fx.layer("commit", "L", &["--force"]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(fx.p.join("a")).unwrap(), "a1\n");
    assert!(fx.list("L").is_empty());
}

// ---------------------------------------------------------------- locking

/// The layer directory is hidden in the sandbox, a run from inside it is
/// refused, and a layer in use refuses a second run and `layer commit`.
#[test]
fn the_layer_is_hidden_and_locked_while_in_use() {
    require!("the_layer_is_hidden_and_locked_while_in_use", layers_available());
    let _serial = shared();
    let fx = Fx::new("lock");
    fx.host_sh("echo a > a");
    fx.run(&["L"], &[], "echo b > b").assert_code(0);
    let l = fx.layer_dir("L");
    // Inside, DIR is an empty directory, neither readable nor writable as
    // the layer.
    let out = fx.run(&["L"], &[], "ls -A \"$L/L\" | wc -l; cat \"$L/L/layer.json\" 2>&1 || echo unreadable; touch \"$L/L/x\" 2>&1 || echo unwritable");
    out.assert_code(0);
    assert!(
        out.stdout.starts_with("0\n") && out.stdout.contains("unreadable\n") && out.stdout.contains("unwritable\n"),
        "{}",
        out.describe()
    );
    // A working directory inside the layer: refused, clearly.
    for cwd in [l.clone(), l.join("upper")] {
        let mut c = fx.run_cmd(&["L"], &[], "pwd");
        let out = c.cwd(cwd.clone()).run();
        out.assert_code(125);
        assert!(
            out.stderr.contains(&format!("is inside the layer {}", l.display()))
                && out.stderr.contains("run from outside the layer directory"),
            "cwd {}: {}",
            cwd.display(),
            out.describe()
        );
    }
    // A run holding the layer: a second run and `layer commit` fail at
    // once, naming the layer.
    let mut holder = fx.run_cmd(&["L"], &[], "echo started; sleep 60").spawn();
    holder.wait_line("started", Duration::from_secs(30));
    let busy = format!("layer {} is in use by a running capsule", l.display());
    let out = fx.run(&["L"], &[], "echo second");
    out.assert_code(125);
    assert!(out.stderr.contains(&busy) && !out.stdout.contains("second"), "{}", out.describe());
    let out = fx.layer("commit", "L", &[]);
    out.assert_code(1);
    assert!(out.stderr.contains(&busy), "{}", out.describe());
    assert!(!fx.p.join("b").exists());
    // The holder ends (SIGTERM kills capsule and its run): the layer is
    // free again, and its change still there.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(holder.pid(), libc::SIGTERM) };
    let out = holder.wait();
    assert!(out.signal == Some(libc::SIGTERM) || out.code.is_some(), "{}", out.describe());
    assert_eq!(fx.list("L"), ["A  P/b"]);
}

// ---------------------------------------------------------------- hidden

/// The secrets hidden by default stay hidden in a layer run, and a
/// `--read-only` path inside a layer root stays read-only.
#[test]
fn secrets_hidden_and_read_only_paths_kept_in_a_layer() {
    require!("secrets_hidden_and_read_only_paths_kept_in_a_layer", layers_available());
    let _serial = shared();
    let fx = Fx::new("hidden");
    fx.host_sh("mkdir -m 700 \"$H/.ssh\"; echo SECRET-KEY > \"$H/.ssh/id_ed25519\"; mkdir ro; echo r > ro/f");
    let home = snapshot(&fx.h.path);
    let proj = snapshot(&fx.p.path);
    let out = fx.run(
        &["L"],
        &["--read-only", "ro"],
        r#"ls -A "$H/.ssh" | wc -l
cat "$H/.ssh/id_ed25519" 2>/dev/null || echo secret-unreadable
(echo k > "$H/.ssh/new") 2>/dev/null || echo ssh-unwritable
(echo x > ro/f) 2>/dev/null || echo ro-f-unwritable
(touch ro/new) 2>/dev/null || echo ro-unwritable
echo w > "$H/notes"; echo w > rw"#,
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "0\nsecret-unreadable\nssh-unwritable\nro-f-unwritable\nro-unwritable\n",
        "{}",
        out.describe()
    );
    assert!(!out.stdout.contains("SECRET-KEY"));
    assert_eq!(fx.list("L"), ["A  H/notes", "A  P/rw"]);
    assert_same(&home, &snapshot(&fx.h.path), "the home");
    assert_same(&proj, &snapshot(&fx.p.path), "the project");
    // The layer holds nothing of the secret.
    let found = fx.host_sh("grep -rl SECRET-KEY \"$L/L\" || true");
    assert_eq!(found, "");
}

// ---------------------------------------------------------------- --root

/// The issue's known obstacle: a system file the caller cannot write is
/// read-only in a layer, but a `--root` run (fuse-overlayfs) changes it in
/// the layer, and only there.
#[test]
fn a_root_layer_changes_system_files_in_the_layer_only() {
    require!("a_root_layer_changes_system_files_in_the_layer_only", fuse_available());
    let _serial = alone();
    let fx = Fx::new("rootlayer");
    let host = host_bytes("/etc/hostname");
    let out = fx.run(&["L"], &[], "echo capsule-x > /etc/hostname");
    assert_eq!(out.code, Some(2), "{}", out.describe());
    assert!(
        out.stderr.contains("Permission denied") || out.stderr.contains("Read-only file system"),
        "{}",
        out.describe()
    );
    assert!(fx.list("L").is_empty());
    fx.layer("discard", "L", &[]).assert_code(0);
    let out = fx.run(&["L"], &["--root"], "echo capsule-x > /etc/hostname; cat /etc/hostname; id -u");
    out.assert_code(0);
    assert!(out.stdout.starts_with("capsule-x\n0\n"), "{}", out.describe());
    assert_eq!(fx.list("L"), ["M  /etc/hostname"]);
    assert_eq!(host_bytes("/etc/hostname"), host, "the host's /etc/hostname changed");
    // The layer is a --root layer from now on: a later run sees the change.
    let out = fx.run(&["L"], &["--root"], "cat /etc/hostname");
    out.assert_code(0);
    assert_eq!(out.stdout, "capsule-x\n", "{}", out.describe());
    fx.layer("discard", "L", &[]).assert_code(0);
    assert_eq!(host_bytes("/etc/hostname"), host);
}

const PKG: &str = "capsule-layer-testpkg";

/// The issue's dpkg scenario: a small `.deb` built here with `dpkg-deb`,
/// installed with `capsule run --root --layer L -- dpkg -i pkg.deb`; the
/// layer then holds its files and dpkg's database, the host nothing, and a
/// second run over the layer runs the program and finds it installed.
#[test]
fn dpkg_installs_a_package_into_a_root_layer() {
    require!("dpkg_installs_a_package_into_a_root_layer", fuse_available());
    require!(
        "dpkg_installs_a_package_into_a_root_layer",
        if in_path("dpkg-deb") && in_path("dpkg") {
            Ok(())
        } else {
            Err("dpkg is not installed (apt-get install dpkg)".to_string())
        }
    );
    let _serial = alone();
    let fx = Fx::new("dpkg");
    fx.host_sh(&format!(
        r#"mkdir -p pkg/DEBIAN pkg/usr/bin pkg/usr/share/{PKG}
cat > pkg/DEBIAN/control <<EOF
Package: {PKG}
Version: 1.0
Architecture: all
Maintainer: capsule tests <capsule-tests@example.invalid>
Description: capsule layer test package
 Installed into a capsule layer by the capsule tests, never on a host.
EOF
printf '#!/bin/sh\necho {PKG} runs\n' > pkg/usr/bin/{PKG}; chmod 755 pkg/usr/bin/{PKG}
echo data > pkg/usr/share/{PKG}/data.txt
dpkg-deb --root-owner-group --build pkg pkg.deb >/dev/null"#
    ));
    let status = host_bytes("/var/lib/dpkg/status");
    let bin = format!("/usr/bin/{PKG}");
    assert!(!Path::new(&bin).exists(), "{bin} is installed on the host: remove it first");
    let out = fx.run(&["L"], &["--root"], "dpkg -i pkg.deb");
    out.assert_code(0);
    let list = fx.list("L");
    for want in [format!("A  {bin}"), format!("A  /usr/share/{PKG}"), "M  /var/lib/dpkg/status".to_string()] {
        assert!(list.contains(&want), "`layer list` lacks {want}: {list:#?}");
    }
    assert!(list.iter().any(|l| l.starts_with(&format!("A  /var/lib/dpkg/info/{PKG}."))), "{list:#?}");
    assert_eq!(host_bytes("/var/lib/dpkg/status"), status, "the host's dpkg status changed");
    assert!(!Path::new(&bin).exists(), "{bin} appeared on the host");
    let out =
        fx.run(&["L"], &["--root"], &format!("{PKG}; dpkg -s {PKG} | grep '^Status:'; cat /usr/share/{PKG}/data.txt"));
    out.assert_code(0);
    assert_eq!(out.stdout, format!("{PKG} runs\nStatus: install ok installed\ndata\n"), "{}", out.describe());
    fx.layer("discard", "L", &[]).assert_code(0);
    assert_eq!(host_bytes("/var/lib/dpkg/status"), status);
}

/// A host file the caller cannot read (a root-only lock file, 0640 like
/// dpkg's) cannot be copied up by any overlay; stacking a hand-made layer
/// holding an empty stand-in makes it writable in the run. The run's layer
/// then holds an empty copy of an empty file it cannot compare by reading:
/// `list`, the originals' record and `commit` must still work.
#[test]
fn an_empty_host_file_the_caller_cannot_read_is_no_obstacle() {
    require!("an_empty_host_file_the_caller_cannot_read_is_no_obstacle", layers_available());
    require!("an_empty_host_file_the_caller_cannot_read_is_no_obstacle", require_root());
    let _serial = shared();
    let fx = Fx::with_own_layer_dir("unreadable");
    // The host file: empty, root's, 0640 (the test runs as root).
    let lock = fx.p.join("lock");
    std::fs::write(&lock, b"").unwrap();
    std::fs::set_permissions(&lock, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let out = fx.run(&["L"], &[], "set -e; : > lock");
    assert_eq!(out.code, Some(2), "{}", out.describe());
    assert!(out.stderr.contains("Permission denied"), "{}", out.describe());
    // The stand-in layer, made by hand.
    fx.host_sh(
        r#"mkdir -p "$L/S/upper$P" "$L/S/work"; chmod 700 "$L/S"
printf '{"version": 1, "originals": {}}\n' > "$L/S/layer.json"
p=""; for c in $(echo "$P" | tr / ' '); do p="$p/$c"; chmod "$(stat -c %a "$p")" "$L/S/upper$p"; done
: > "$L/S/upper$P/lock"; chmod 640 "$L/S/upper$P/lock""#,
    );
    let host = snapshot(&fx.p.path);
    let out = fx.run(&["S", "L"], &[], "set -e; : > lock; echo written > new");
    out.assert_code(0);
    assert_same(&host, &snapshot(&fx.p.path), "after the run");
    assert_eq!(fx.list("L"), ["A  P/new"]);
    let meta = std::fs::read_to_string(fx.layer_dir("L").join("layer.json")).unwrap();
    assert!(
        meta.contains(&format!("\"{}/lock\"", fx.p.s())) && meta.contains(&format!("\"{}/new\"", fx.p.s())),
        "{meta}"
    );
    let out = fx.layer("commit", "L", &[]);
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(fx.p.join("new")).unwrap(), "written\n");
    assert!(fx.list("L").is_empty());
    assert_eq!(std::fs::metadata(&lock).unwrap().uid(), 0);
}

/// A kernel overlay cannot copy up a file whose group (or owner) the run's
/// user namespace does not map (only the caller's uid and gid are): every
/// write to it fails with EOVERFLOW, "Value too large for defined data
/// type", which names nothing. capsule must name the file, its group and
/// what works instead.
#[test]
fn a_file_of_a_group_the_run_cannot_map_is_named() {
    require!("a_file_of_a_group_the_run_cannot_map_is_named", layers_available());
    require!("a_file_of_a_group_the_run_cannot_map_is_named", require_root());
    let _serial = shared();
    let fx = Fx::new("foreign");
    fx.host_sh("echo one > shared.txt; echo mine > mine.txt");
    // The test user's file, in group `adm` (gid 4), which it is not in.
    let shared = fx.p.join("shared.txt");
    std::os::unix::fs::chown(&shared, None, Some(4)).unwrap();
    let group = std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == "4").then(|| f[0].to_string())
        })
        .unwrap_or_default();
    let out = fx.run(&["L"], &[], "echo two >> mine.txt; echo two >> shared.txt");
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(out.stderr.contains("Value too large"), "{}", out.describe());
    let want = format!("{:?}", shared.display().to_string());
    assert!(out.stderr.contains(&want), "the file is not named ({want}): {}", out.describe());
    assert!(
        out.stderr.contains("gid 4") && (group.is_empty() || out.stderr.contains(&format!("`{group}`"))),
        "the group is not named: {}",
        out.describe()
    );
    assert!(out.stderr.contains("--root"), "no way out is given: {}", out.describe());
    // What the run could write is in the layer all the same.
    assert_eq!(fx.list("L"), ["M  P/mine.txt"]);
    // A working directory of that group: new files in it work (it is made
    // in the layer beforehand, as the caller's), and so does deleting.
    fx.host_sh("mkdir grp; echo old > grp/old.txt");
    std::os::unix::fs::chown(fx.p.join("grp"), None, Some(4)).unwrap();
    let mut c = fx.run_cmd(&["L"], &[], "echo new > new.txt && rm old.txt");
    c.cwd(fx.p.join("grp"));
    c.run().assert_code(0);
    assert_eq!(fx.list("L"), ["A  P/grp/new.txt", "D  P/grp/old.txt", "M  P/mine.txt"]);
}

// ---------------------------------------------------------------- --layer-size

/// Bytes the entries at and below `p` take on disk (`du`), no link followed.
fn disk_usage(p: &Path) -> u64 {
    let m = std::fs::symlink_metadata(p).unwrap();
    let mut n = m.blocks() * 512;
    if m.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            n += disk_usage(&e.unwrap().path());
        }
    }
    n
}

/// The overlayfs opaque mark of `p`.
fn opaque_mark(p: &Path) -> bool {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = [0u8; 8];
    // SAFETY: c is NUL-terminated; buf is writable for its length.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), c"user.overlay.opaque".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n == 1 && buf[0] == b'y'
}

/// Every entry below `root` (a layer's upper tree at some directory), by
/// path relative to it: type, permission bits, size, blocks (holes kept),
/// link count of files, content, link target, whiteout, opaque mark; not
/// times (two runs make them).
fn layer_tree(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, p: &Path, m: &mut BTreeMap<PathBuf, String>) {
        use std::os::unix::fs::FileTypeExt;
        let md = std::fs::symlink_metadata(p).unwrap();
        let ft = md.file_type();
        let s = if ft.is_char_device() {
            format!("char {}", md.rdev())
        } else if ft.is_dir() {
            format!("dir {:o} opaque={}", md.mode() & 0o7777, opaque_mark(p))
        } else if ft.is_file() {
            let content = if md.len() < 4096 { format!("{:?}", std::fs::read(p).unwrap()) } else { "(large)".into() };
            format!(
                "file {:o} size={} sparse={} nlink={} {content}",
                md.mode() & 0o7777,
                md.len(),
                md.blocks() * 512 < md.len(),
                md.nlink()
            )
        } else if ft.is_symlink() {
            format!("link {:?}", std::fs::read_link(p).unwrap())
        } else {
            format!("other {:o}", md.mode())
        };
        m.insert(p.strip_prefix(root).unwrap().to_path_buf(), s);
        if ft.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(root, &e.unwrap().path(), m);
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(root, root, &mut m);
    m
}

/// A run that writes past `--layer-size` gets ENOSPC, capsule says the
/// limit was reached, and the layer then holds at most the limit (what it
/// held before included); the host is untouched. The layers of these
/// tests lie inside a root (`/var/tmp`), as `~/try` lies in the home.
#[test]
fn a_run_writing_past_layer_size_gets_enospc() {
    require!("a_run_writing_past_layer_size_gets_enospc", layers_available());
    let _serial = shared();
    let fx = Fx::new("size-past");
    fx.host_sh("echo host > host.txt");
    let host = snapshot(&fx.p.path);
    // What the layer holds counts: a first run without a limit.
    fx.run(&["L"], &[], "head -c 300000 /dev/zero > first.bin").assert_code(0);
    let limit = 1u64 << 20;
    let out = fx.run(
        &["L"],
        &["--layer-size", "1M"],
        "echo more >> host.txt; head -c 3000000 /dev/urandom > big.bin; echo dd=$?; ls -l big.bin",
    );
    assert!(out.stdout.contains("dd=1"), "{}", out.describe());
    assert!(out.stderr.contains("No space left on device"), "{}", out.describe());
    assert!(
        out.stderr.contains("--layer-size") && out.stderr.contains("ENOSPC"),
        "capsule does not say the limit was reached: {}",
        out.describe()
    );
    let upper = fx.layer_dir("L").join("upper");
    let used = disk_usage(&upper);
    assert!(used <= limit, "the layer holds {used} bytes, over the limit of {limit}");
    // What was written up to the limit is in the layer.
    let big = std::fs::metadata(join_upper(&upper, &fx.p.join("big.bin"))).unwrap().len();
    assert!(big > 300_000, "big.bin holds {big} bytes in the layer");
    assert_eq!(std::fs::read_to_string(join_upper(&upper, &fx.p.join("host.txt"))).unwrap(), "host\nmore\n");
    assert_same(&host, &snapshot(&fx.p.path), "after the runs");
    // A layer already at its limit: the run is refused, naming both.
    let out = fx.run(&["L"], &["--layer-size", "64k"], "true");
    assert_ne!(out.code, Some(0), "{}", out.describe());
    assert!(out.stderr.contains("already holds") && out.stderr.contains("65536"), "{}", out.describe());
}

fn join_upper(upper: &Path, host: &Path) -> PathBuf {
    upper.join(host.strip_prefix("/").unwrap())
}

/// A run within `--layer-size` leaves the layer as the same run without
/// the option does: new, changed and deleted files (whiteouts only where
/// something below shows), a directory replaced wholesale (opaque), a
/// layer-only directory replaced, links, FIFOs, hard links and holes.
#[test]
fn a_run_within_layer_size_ends_as_without_it() {
    require!("a_run_within_layer_size_ends_as_without_it", layers_available());
    let _serial = shared();
    let fx = Fx::new("size-same");
    fx.host_sh(
        r#"echo host > host.txt; echo gone > host-gone.txt; echo early > gone-early.txt
mkdir -p hostdir/sub; echo a > hostdir/a; echo b > hostdir/sub/b; mkdir keepdir; echo k > keepdir/k"#,
    );
    let first = r#"set -e
echo keep > keep.txt; echo old > layer-only.txt; mkdir -p ldir/sub; echo x > ldir/sub/x; rm gone-early.txt
echo k2 >> keepdir/k"#;
    let second = r#"set -e
echo changed >> keep.txt
rm layer-only.txt host-gone.txt
rm -rf hostdir; mkdir hostdir; echo n > hostdir/new
rm -rf ldir; mkdir ldir; echo y > ldir/y
echo new > new.txt; mkdir -p nd/a; echo z > nd/a/z
echo h >> host.txt; chmod 600 host.txt; chmod 700 keepdir
ln -s keep.txt lnk; mkfifo ff; ln new.txt hard.txt
truncate -s 1G sparse
echo back > gone-early.txt"#;
    for (name, opts) in [("A", &[][..]), ("B", &["--layer-size", "8M"][..])] {
        fx.run(&[name], &[], first).assert_code(0);
        let out = fx.run(&[name], opts, second);
        out.assert_code(0);
        assert!(!out.stderr.contains("layer-size"), "{}", out.describe());
    }
    assert_eq!(fx.list("A"), fx.list("B"));
    let tree = |l: &str| layer_tree(&join_upper(&fx.layer_dir(l).join("upper"), &fx.p.path));
    let (a, b) = (tree("A"), tree("B"));
    assert_eq!(a, b, "the staged layer differs from the direct one");
    // The scenario covers what it says.
    assert!(b[Path::new("hostdir")].contains("opaque=true"), "{b:?}");
    assert!(b[Path::new("host-gone.txt")].starts_with("char 0"), "{b:?}");
    assert!(!b.contains_key(Path::new("layer-only.txt")), "{b:?}");
    assert!(b[Path::new("sparse")].contains("sparse=true"), "{b:?}");
    assert!(b[Path::new("hard.txt")].contains("nlink=2"), "{b:?}");
}

/// A bad `--layer-size` is a clear error naming it, before anything runs.
#[test]
fn a_bad_layer_size_is_a_clear_error() {
    require!("a_bad_layer_size_is_a_clear_error", layers_available());
    let _serial = shared();
    let fx = Fx::new("size-bad");
    for (layers, opts, want) in [
        (&["L"][..], &["--layer-size", "12Q"][..], "--layer-size"),
        (&["L"][..], &["--layer-size", "0"][..], "layer_size: must be at least 4096 bytes"),
        (&[][..], &["--layer-size", "1M"][..], "layer_size: limits the writable layer"),
        (
            &["L"][..],
            &["--root", "--layer-size", "1M"][..],
            "layer_size: a `root` run's layer is served by fuse-overlayfs",
        ),
    ] {
        let out = fx.run(layers, opts, "echo ran > ran.txt");
        assert_ne!(out.code, Some(0), "{opts:?}: {}", out.describe());
        assert!(out.stderr.contains(want), "{opts:?}: want {want:?}: {}", out.describe());
        assert!(
            !fx.p.join("ran.txt").exists()
                && !fx.layer_dir("L").join("upper").join(fx.p.path.strip_prefix("/").unwrap()).join("ran.txt").exists()
        );
    }
}
