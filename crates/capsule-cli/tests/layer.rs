//! `capsule layer list|diff|commit|discard|record|review` on layer
//! directories crafted by hand, as the unprivileged test user, over host
//! targets in another scratch directory (never a real system file).

use capsule_testkit as common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// A host scratch directory `h` and a layer `dir` whose upper tree mirrors
/// it (the directories down to `h` copied up with the host's modes, as
/// overlayfs does).
struct Fx {
    h: Scratch,
    _l: Scratch,
    dir: PathBuf,
}

impl Fx {
    fn new(tag: &str) -> Fx {
        let h = Scratch::new(&format!("{tag}-host"));
        let l = Scratch::new(&format!("{tag}-layer"));
        let dir = l.join("L");
        let fx = Fx { h, _l: l, dir };
        fx.sh(r#"mkdir -p "$L/upper" "$L/work"
printf '{"version": 1, "originals": {}}\n' > "$L/layer.json"
p=""; for c in $(echo "$H" | tr / ' '); do p="$p/$c"; mkdir -p "$L/upper$p"; chmod "$(stat -c %a "$p")" "$L/upper$p"; done"#);
        fx
    }

    /// Runs a shell script as the test user with $H (host dir), $L (layer
    /// dir) and $U (the layer's version of $H) set.
    fn sh(&self, script: &str) {
        let full = format!("set -e\nH={}\nL={}\nU=$L/upper$H\n{script}", self.h.s(), self.dir.display());
        let out = as_user(&["sh", "-c", &full]).output().expect("run sh");
        assert!(out.status.success(), "crafting failed: {}\n{script}", String::from_utf8_lossy(&out.stderr));
    }

    fn hp(&self, rel: &str) -> PathBuf {
        self.h.join(rel)
    }

    fn d(&self) -> String {
        self.dir.display().to_string()
    }

    fn layer(&self, args: &[&str]) -> Out {
        let mut c = capsule(&["layer"]);
        c.arg(args[0]).arg(self.d()).args(&args[1..]);
        c.run()
    }

    /// `list` lines with the host directory replaced by `H`, without the
    /// details in parentheses (sizes, special bits).
    fn list(&self) -> Vec<String> {
        self.list_long().iter().map(|l| l.split_once("  (").map_or(l.as_str(), |(a, _)| a).to_string()).collect()
    }

    /// `list` lines with the host directory replaced by `H`.
    fn list_long(&self) -> Vec<String> {
        let out = self.layer(&["list"]);
        out.assert_code(0);
        out.stdout.lines().map(|l| l.replace(&self.h.s(), "H")).collect()
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The python one-liner that sets an overlayfs xattr as the test user.
const SETX: &str =
    "python3 -c 'import os,sys; os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode(), follow_symlinks=False)'";

#[test]
fn each_kind_of_change_listed_diffed_committed() {
    let fx = Fx::new("kinds");
    fx.sh(&format!(
        r#"printf 'one\ntwo\nthree\n' > $H/mod.txt
printf '#!/bin/sh\n' > $H/run.sh; chmod 644 $H/run.sh
ln -s old-target $H/link
printf 'bye\n' > $H/gone.txt
mkdir -p $H/gone-dir/sub; echo x > $H/gone-dir/sub/f
mkdir $H/opq; echo keep > $H/opq/kept; echo drop > $H/opq/dropped
echo f > $H/file-then-dir
echo same > $H/same.txt
# the layer
printf 'one\nTWO\nthree\n' > $U/mod.txt
cp -p $H/run.sh $U/run.sh; chmod 755 $U/run.sh
ln -s new-target $U/link
ln -s somewhere $U/new-link
printf 'hello\n' > $U/new.txt
mknod $U/gone.txt c 0 0
mknod $U/gone-dir c 0 0
mknod $U/never-existed c 0 0
mkdir -p $U/new-dir/a; echo deep > $U/new-dir/a/b.txt; ln -s ../a $U/new-dir/up
mkdir $U/opq; chmod "$(stat -c %a $H/opq)" $U/opq; {SETX} $U/opq user.overlay.opaque y
cp -p $H/opq/kept $U/opq/kept; echo added > $U/opq/added
mkdir $U/file-then-dir; echo in > $U/file-then-dir/inside
cp -p $H/same.txt $U/same.txt"#
    ));
    let want = [
        "M  H/file-then-dir",
        "D  H/gone-dir",
        "D  H/gone.txt",
        "M  H/link",
        "M  H/mod.txt",
        "A  H/new-dir",
        "A  H/new-link",
        "A  H/new.txt",
        "A  H/opq/added",
        "D  H/opq/dropped",
        "M  H/run.sh",
    ];
    assert_eq!(fx.list(), want);
    // --json: kind, path, what.
    let out = fx.layer(&["list", "--json"]);
    out.assert_code(0);
    let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let arr = j.as_array().unwrap();
    assert_eq!(arr.len(), want.len());
    let run = arr.iter().find(|e| e["path"] == fx.hp("run.sh").display().to_string()).unwrap();
    assert_eq!(run["kind"], "M");
    assert_eq!(run["what"], "mode 0644 -> 0755");
    // PATH selects at or below it; a relative PATH is relative to the cwd.
    let out = capsule(&["layer", "list", &fx.d(), "opq"]).cwd(fx.h.path.clone()).run();
    out.assert_code(0);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.describe());
    // diff
    let out = fx.layer(&["diff"]);
    out.assert_code(0);
    let h = fx.h.s();
    for piece in [
        format!("M {h}/mod.txt: content\n--- {h}/mod.txt\n+++ {h}/mod.txt (layer)\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"),
        format!("M {h}/run.sh: mode 0644 -> 0755\n"),
        format!("M {h}/link: symlink old-target -> new-target\n"),
        format!("A {h}/new-dir: new directory\n  + {h}/new-dir/a (directory)\n  + {h}/new-dir/a/b.txt (file, 5 bytes)\n  + {h}/new-dir/up (symlink -> ../a)\n"),
        format!("D {h}/gone-dir: directory\n"),
        format!("M {h}/file-then-dir: type file -> directory\n"),
        format!("A {h}/new.txt: file, 6 bytes\n--- /dev/null\n+++ {h}/new.txt (layer)\n@@ -0,0 +1 @@\n+hello\n"),
    ] {
        assert!(out.stdout.contains(&piece), "diff lacks\n{piece}\n---- in\n{}", out.stdout);
    }
    // The run records the originals when it ends; then commit everything.
    fx.layer(&["record"]).assert_code(0);
    let out = fx.layer(&["commit"]);
    out.assert_code(0);
    assert_eq!(out.stdout.lines().count(), want.len(), "{}", out.describe());
    assert!(out.stdout.contains(&format!("committed  M  {h}/mod.txt\n")), "{}", out.describe());
    assert_eq!(read(&fx.hp("mod.txt")), "one\nTWO\nthree\n");
    assert_eq!(std::fs::metadata(fx.hp("run.sh")).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read_link(fx.hp("link")).unwrap(), Path::new("new-target"));
    assert_eq!(std::fs::read_link(fx.hp("new-link")).unwrap(), Path::new("somewhere"));
    assert_eq!(read(&fx.hp("new.txt")), "hello\n");
    assert!(!fx.hp("gone.txt").exists() && !fx.hp("gone-dir").exists());
    assert_eq!(read(&fx.hp("new-dir/a/b.txt")), "deep\n");
    assert_eq!(std::fs::read_link(fx.hp("new-dir/up")).unwrap(), Path::new("../a"));
    assert_eq!(read(&fx.hp("opq/kept")), "keep\n");
    assert_eq!(read(&fx.hp("opq/added")), "added\n");
    assert!(!fx.hp("opq/dropped").exists());
    assert_eq!(read(&fx.hp("file-then-dir/inside")), "in\n");
    // The new files are the caller's.
    assert_eq!(std::fs::symlink_metadata(fx.hp("new.txt")).unwrap().uid(), h_uid());
    // Nothing left: no change, no temporary beside the destinations, an
    // empty upper tree, no record.
    assert!(fx.list().is_empty());
    let tmp: Vec<_> = std::fs::read_dir(fx.h.path.clone())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".capsule-commit"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    assert_eq!(std::fs::read_dir(fx.dir.join("upper")).unwrap().count(), 0);
    let meta: serde_json::Value = serde_json::from_str(&read(&fx.dir.join("layer.json"))).unwrap();
    assert_eq!(meta["originals"].as_object().unwrap().len(), 0, "{meta}");
    let out = fx.layer(&["commit"]);
    out.assert_code(0);
    assert!(out.stderr.contains("nothing to commit"), "{}", out.describe());
}

fn h_uid() -> u32 {
    h().uid
}

#[test]
fn conflicts_are_refused_and_named_while_the_rest_commits() {
    let fx = Fx::new("conflict");
    fx.sh("echo a0 > $H/a; echo b0 > $H/b; echo a1 > $U/a; echo b1 > $U/b; echo n > $U/new");
    fx.layer(&["record"]).assert_code(0);
    // The host changes `a` after the run, and creates `new`.
    fx.sh("echo a-host > $H/a; echo host > $H/new");
    let out = fx.layer(&["commit"]);
    out.assert_code(1);
    let h = fx.h.s();
    assert!(out.stdout.contains(&format!("committed  M  {h}/b")), "{}", out.describe());
    assert!(
        out.stderr
            .contains(&format!("conflict, not committed: M  {h}/a: changed on the host since the layer recorded it")),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr.contains(&format!("conflict, not committed: M  {h}/new: changed on the host")),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("--force"), "{}", out.describe());
    assert_eq!(read(&fx.hp("a")), "a-host\n");
    assert_eq!(read(&fx.hp("b")), "b1\n");
    assert_eq!(read(&fx.hp("new")), "host\n");
    // The refused entries stay in the layer.
    assert_eq!(fx.list(), ["M  H/a", "M  H/new"]);
    // An entry with no record (its run did not finish) is a conflict too.
    fx.sh("echo c > $U/unrecorded");
    let out = fx.layer(&["commit", &fx.hp("unrecorded").display().to_string()]);
    out.assert_code(1);
    assert!(
        out.stderr.contains("no record of the original; the run that made it did not finish"),
        "{}",
        out.describe()
    );
    // --force overrides.
    let out = fx.layer(&["commit", "--force"]);
    out.assert_code(0);
    assert_eq!(read(&fx.hp("a")), "a1\n");
    assert_eq!(read(&fx.hp("new")), "n\n");
    assert_eq!(read(&fx.hp("unrecorded")), "c\n");
    assert!(fx.list().is_empty());
}

#[test]
fn crafted_layers_are_refused_and_nothing_outside_is_written() {
    let outside = Scratch::new("outside");
    let o = outside.s();
    let fx = Fx::new("crafted");
    fx.sh(&format!(
        r#"echo secret > {o}/victim; mkdir {o}/secret-dir; echo s > {o}/secret-dir/s
# A host directory that is a symbolic link, and the layer's files "below" it.
ln -s {o} $H/via-link
mkdir $U/via-link; echo owned > $U/via-link/victim
# A symbolic link in the upper tree where the host has a directory, with the
# layer's "changes" behind it outside.
mkdir $H/sub; echo mine > $H/sub/file
ln -s {o}/secret-dir $U/sub
# A fuse-overlayfs whiteout naming `..` (in a layer fuse-overlayfs served).
: > $L/fuse; touch $U/.wh...
# A metacopy entry (not made by capsule).
echo m > $H/meta; echo mm > $U/meta; {SETX} $U/meta user.overlay.metacopy ''
# And one good change.
echo ok > $U/good"#
    ));
    assert_eq!(fx.list(), ["D  H/.wh...", "A  H/good", "M  H/meta", "M  H/sub", "M  H/via-link"]);
    fx.layer(&["record"]).assert_code(0);
    // A record whose path is not normalized, pointing outside.
    let meta_path = fx.dir.join("layer.json");
    let mut meta: serde_json::Value = serde_json::from_str(&read(&meta_path)).unwrap();
    meta["originals"][format!("{}/../{}/victim", fx.h.s(), outside.path.file_name().unwrap().to_string_lossy())] =
        serde_json::json!({"kind": "absent"});
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    // Everything crafted is refused even with --force; the rest commits.
    let out = fx.layer(&["commit", "--force"]);
    out.assert_code(1);
    let e = &out.stderr;
    assert!(
        e.contains("via-link: the host's")
            && e.contains("is a symbolic link")
            && e.contains("never commits through a link"),
        "{}",
        out.describe()
    );
    assert!(e.contains("/.wh...: whiteout `.wh...` names no valid entry"), "{}", out.describe());
    assert!(
        e.contains("/meta: it has the user.overlay.metacopy attribute: the layer was not made by capsule"),
        "{}",
        out.describe()
    );
    assert!(e.contains("/../") && e.contains("not a normalized absolute path"), "{}", out.describe());
    assert_eq!(read(&fx.hp("good")), "ok\n");
    assert_eq!(read(&fx.hp("meta")), "m\n");
    // The upper link was committed as what it is, a link: never read through.
    assert_eq!(std::fs::read_link(fx.hp("sub")).unwrap(), outside.join("secret-dir"));
    // Nothing outside changed.
    assert_eq!(read(&outside.join("victim")), "secret\n");
    let names: Vec<_> = std::fs::read_dir(&outside.path).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(std::fs::read_dir(outside.join("secret-dir")).unwrap().count(), 1);
    // An upper tree that is a link is not a layer.
    let l2 = Scratch::new("crafted-l2");
    as_user(&[
        "sh",
        "-c",
        &format!("mkdir {0}/real && ln -s {0}/real {0}/upper && echo '{{\"version\":1}}' > {0}/layer.json", l2.s()),
    ])
    .status()
    .unwrap();
    let out = capsule(&["layer", "commit", &l2.s()]).run();
    out.assert_code(1);
    assert!(out.stderr.contains("is not a layer: its upper is a symlink, not a directory"), "{}", out.describe());
}

#[test]
fn commit_killed_midway_leaves_every_file_old_or_new() {
    const N: usize = 300;
    let fx = Fx::new("kill");
    // Distinct old and new contents of 64 KiB each.
    fx.sh(&format!(
        r#"i=0; while [ $i -lt {N} ]; do
  head -c 65536 /dev/zero | tr '\0' o > $H/f$i; head -c 65536 /dev/zero | tr '\0' n > $U/f$i; i=$((i+1)); done"#
    ));
    fx.layer(&["record"]).assert_code(0);
    let old = vec![b'o'; 65536];
    let new = vec![b'n'; 65536];
    let count_new =
        || (0..N).filter(|i| std::fs::read(fx.hp(&format!("f{i}"))).map(|b| b == new).unwrap_or(false)).count();
    let mut killed_at = None;
    for attempt in 0..3 {
        let mut c = capsule(&["layer", "commit", &fx.d()]);
        let mut run = c.spawn();
        // Kill once about a third of the files are in (the commit goes in
        // name order).
        let mut names: Vec<String> = (0..N).map(|i| format!("f{i}")).collect();
        names.sort();
        let mark = fx.hp(&names[N / 3]);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if std::fs::read(&mark).map(|b| b == new).unwrap_or(false) || !run.alive() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let was_alive = run.alive();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(run.pid(), libc::SIGKILL) };
        let out = run.wait();
        let done = count_new();
        eprintln!("attempt {attempt}: alive at kill {was_alive}, {done}/{N} committed, {:?}", out.signal);
        if was_alive && out.signal == Some(libc::SIGKILL) && done > 0 && done < N {
            killed_at = Some(done);
            break;
        }
        if done == N {
            panic!("the commit of {N} files finished before it could be killed; the test proves nothing");
        }
    }
    let done = killed_at.expect("the commit was never killed midway");
    // Every destination holds exactly the old or the new bytes.
    for i in 0..N {
        let b = std::fs::read(fx.hp(&format!("f{i}"))).unwrap();
        assert!(b == old || b == new, "f{i} is neither old nor new ({} bytes)", b.len());
    }
    // Leftovers beside the destinations are whole files (named only once
    // written and fsynced), at most the one in flight.
    let tmp: Vec<PathBuf> = std::fs::read_dir(&fx.h.path)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".capsule-commit"))
        .collect();
    assert!(tmp.len() <= 1, "{tmp:?}");
    for t in &tmp {
        assert_eq!(std::fs::read(t).unwrap(), new, "{} is not a whole file", t.display());
        std::fs::remove_file(t).unwrap();
    }
    // The layer still lists exactly what was not committed, and a second
    // commit finishes the job.
    assert_eq!(fx.list().len(), N - done);
    let out = fx.layer(&["commit"]);
    out.assert_code(0);
    assert_eq!(count_new(), N);
    assert!(fx.list().is_empty());
}

/// flock(2) on the layer's lock file, as a running capsule would hold it.
fn hold_lock(dir: &Path, exclusive: bool) -> OwnedFd {
    let f = std::fs::File::open(dir.join("layer.lock")).unwrap_or_else(|_| {
        std::fs::File::create(dir.join("layer.lock")).unwrap();
        std::fs::File::open(dir.join("layer.lock")).unwrap()
    });
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    // SAFETY: flock on an fd we own.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) }, 0);
    f.into()
}

#[test]
fn a_layer_in_use_is_refused() {
    let fx = Fx::new("lock");
    fx.sh("echo a > $U/a");
    let ex = hold_lock(&fx.dir, true);
    for args in [&["commit"][..], &["list"], &["diff"], &["discard"], &["record"]] {
        let out = fx.layer(args);
        out.assert_code(1);
        assert!(
            out.stderr.contains(&format!("layer {} is in use by a running capsule", fx.d())),
            "{args:?}: {}",
            out.describe()
        );
    }
    drop(ex);
    // A layer stacked read-only below a run (shared lock) can be listed,
    // not committed.
    let sh = hold_lock(&fx.dir, false);
    fx.layer(&["list"]).assert_code(0);
    fx.layer(&["diff"]).assert_code(0);
    let out = fx.layer(&["commit"]);
    out.assert_code(1);
    assert!(out.stderr.contains("in use by a running capsule"), "{}", out.describe());
    drop(sh);
    assert!(!fx.hp("a").exists());
}

#[test]
fn discard_removes_the_layer_and_only_a_layer() {
    let fx = Fx::new("discard");
    fx.sh("echo a > $U/a; mkdir -p $L/work/work/x; chmod 000 $L/work/work");
    let out = fx.layer(&["discard"]);
    out.assert_code(0);
    assert!(!fx.dir.exists());
    assert!(!fx.hp("a").exists());
    // Not a layer: refused, nothing removed.
    let other = Scratch::new("discard-other");
    other.write("precious", b"p");
    let out = capsule(&["layer", "discard", &other.s()]).run();
    out.assert_code(1);
    assert!(out.stderr.contains("is not a layer: it has no upper/ directory"), "{}", out.describe());
    assert_eq!(read(&other.join("precious")), "p");
    let out = capsule(&["layer", "list", &other.join("missing").display().to_string()]).run();
    out.assert_code(1);
    assert!(out.stderr.contains("No such file or directory (ENOENT)"), "{}", out.describe());
}

/// Reads the pty's output until `until` appears (or `t` passes).
fn read_until(master: i32, seen: &mut String, until: &str, t: Duration) -> bool {
    let deadline = Instant::now() + t;
    while !seen.contains(until) {
        if Instant::now() > deadline {
            return false;
        }
        let mut pfd = libc::pollfd { fd: master, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 50) } > 0 {
            let mut buf = [0u8; 4096];
            // SAFETY: buf is valid for its length.
            let n = unsafe { libc::read(master, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return seen.contains(until);
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n as usize]));
        }
    }
    true
}

fn type_line(master: i32, s: &str) {
    let b = format!("{s}\n");
    // SAFETY: b is valid for its length.
    assert_eq!(unsafe { libc::write(master, b.as_ptr().cast(), b.len()) }, b.len() as isize);
}

const PROMPT: &str = "[sh]ell, [q]uit? ";

#[test]
fn review_menu_through_a_pty() {
    let fx = Fx::new("review");
    fx.sh("echo a0 > $H/a; echo a1 > $U/a; echo new > $U/b; echo c > $U/c");
    fx.layer(&["record"]).assert_code(0);
    let pty = open_pty();
    let m = pty.master.as_raw_fd();
    let dup = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut c = capsule(&["layer", "review", &fx.d()]);
    c.stdio(dup(&pty.slave), dup(&pty.slave), dup(&pty.slave));
    let run = c.spawn();
    let mut seen = String::new();
    let h = fx.h.s();
    let step = |seen: &mut String, answer: &str, until: &str| {
        seen.clear();
        type_line(m, answer);
        assert!(read_until(m, seen, until, Duration::from_secs(20)), "after `{answer}`, no `{until}` in:\n{seen}");
    };
    assert!(read_until(m, &mut seen, PROMPT, Duration::from_secs(20)), "no menu:\n{seen}");
    assert!(seen.contains("holds 3 change(s):") && seen.contains(&format!("  M  {h}/a  (3 bytes)\n")), "{seen}");
    step(&mut seen, "l", PROMPT);
    assert!(seen.contains(&format!("  A  {h}/b  (4 bytes)\n  A  {h}/c  (2 bytes)\n")), "{seen}");
    step(&mut seen, "d", PROMPT);
    assert!(seen.contains(&format!("--- {h}/a\n+++ {h}/a (layer)\n")), "{seen}");
    step(&mut seen, "x", PROMPT);
    assert!(seen.contains("unknown choice `x`"), "{seen}");
    // `sh`: a shell in the layer's files, then the menu again.
    step(&mut seen, "sh", "exit it to come back to the menu");
    step(&mut seen, "echo shell-in-$(basename \"$PWD\")-$((6*7)); exit", PROMPT);
    assert!(seen.contains("shell-in-upper-42"), "{seen}");
    // Commit some: yes to a, no to b, yes to c.
    step(&mut seen, "s", "? [y/n] ");
    assert!(seen.contains(&format!("commit M  {h}/a (content; 3 bytes)? [y/n] ")), "{seen}");
    step(&mut seen, "y", "? [y/n] ");
    step(&mut seen, "n", "? [y/n] ");
    step(&mut seen, "y", PROMPT);
    assert!(seen.contains(&format!("committed  M  {h}/a\ncommitted  A  {h}/c\n")), "{seen}");
    assert!(seen.contains("holds 1 change(s):"), "{seen}");
    assert_eq!(read(&fx.hp("a")), "a1\n");
    assert_eq!(read(&fx.hp("c")), "c\n");
    assert!(!fx.hp("b").exists());
    // Ignore: the layer is kept as it is.
    step(&mut seen, "i", "comes back to it");
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(fx.list(), ["A  H/b"]);
    // Again: commit all, and the menu ends by itself.
    let mut c = capsule(&["layer", "review", &fx.d()]);
    c.stdio(dup(&pty.slave), dup(&pty.slave), dup(&pty.slave));
    let run = c.spawn();
    seen.clear();
    assert!(read_until(m, &mut seen, PROMPT, Duration::from_secs(20)), "no menu:\n{seen}");
    step(&mut seen, "c", "holds no changes");
    run.wait().assert_code(0);
    assert_eq!(read(&fx.hp("b")), "new\n");
    // End of input is "keep the layer", never a hang.
    fx.sh("mkdir -p $U; echo d > $U/d");
    let out = capsule(&["layer", "review", &fx.d()]).run();
    out.assert_code(0);
    assert!(out.stderr.contains("the layer is kept"), "{}", out.describe());
    assert!(!fx.hp("d").exists());
}
