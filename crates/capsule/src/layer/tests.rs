//! Change detection, records, commit and discard on crafted layers: the
//! "host" is a scratch directory under the temporary directory, and the
//! layer's upper tree mirrors its absolute path.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

static N: AtomicUsize = AtomicUsize::new(0);

/// A scratch host directory and a layer over it.
struct T {
    root: PathBuf,
    host: PathBuf,
    layer: Layer,
}

/// The exclusive lock, waiting a little: other unit tests of this crate
/// fork children, which hold a copy of the lock's descriptor until they
/// exec or exit.
fn lock_ex(l: &Layer) -> LayerLock {
    lock_wait(l, true)
}

fn lock_wait(l: &Layer, exclusive: bool) -> LayerLock {
    let start = std::time::Instant::now();
    loop {
        match l.lock_run(exclusive) {
            Ok(lock) => return lock,
            Err(LayerError::InUse(_)) if start.elapsed() < std::time::Duration::from_secs(10) => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("lock: {e}"),
        }
    }
}

impl T {
    fn new() -> T {
        let root = std::env::temp_dir().join(format!(
            "capsule-layer-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("host")).unwrap();
        let host = root.join("host");
        let layer = Layer::create(root.join("layer")).unwrap();
        let t = T { root, host, layer };
        // The upper tree's copies of the host's directories down to `host`
        // have the host's modes, as overlayfs copies them up.
        let mut up = t.layer.dir().join("upper");
        for c in t.host.strip_prefix("/").unwrap().components() {
            up.push(c);
            let hp = Path::new("/").join(up.strip_prefix(t.layer.dir().join("upper")).unwrap());
            if !up.exists() {
                fs::create_dir(&up).unwrap();
            }
            fs::set_permissions(&up, fs::Permissions::from_mode(fs::metadata(&hp).unwrap().mode() & 0o7777)).unwrap();
        }
        t
    }

    /// Marks the layer as fuse-overlayfs's (what a `--root` run's
    /// supervisor writes), and opens it again.
    fn mark_fuse(&mut self) {
        fs::write(self.layer.dir().join(super::FUSE_MARK), "").unwrap();
        self.layer = Layer::open(self.layer.dir()).unwrap();
        assert!(self.layer.is_fuse());
    }

    /// The host path `rel` (below the scratch host directory).
    fn h(&self, rel: &str) -> PathBuf {
        self.host.join(rel)
    }

    /// The layer's version of the host path `rel`.
    fn u(&self, rel: &str) -> PathBuf {
        self.layer.dir().join("upper").join(self.h(rel).strip_prefix("/").unwrap())
    }

    fn list(&self) -> Vec<String> {
        self.layer
            .changes(std::slice::from_ref(&self.host))
            .unwrap()
            .iter()
            .map(|c| format!("{} {}", c.kind.letter(), c.path.strip_prefix(&self.host).unwrap().display()))
            .collect()
    }

    fn whiteout(&self, rel: &str) {
        let p = self.u(rel);
        let dir = fs::File::open(p.parent().unwrap()).unwrap();
        crate::sys::layer::mknod_whiteout_at(dir.as_raw_fd(), p.file_name().unwrap().as_encoded_bytes()).unwrap();
    }

    fn xattr(&self, rel: &str, name: &str, value: &[u8]) {
        let p = self.u(rel);
        let dir = fs::File::open(p.parent().unwrap()).unwrap();
        crate::sys::layer::set_xattr_at(dir.as_raw_fd(), p.file_name().unwrap().as_encoded_bytes(), name, value)
            .unwrap();
    }

    fn record(&self) {
        let lock = lock_ex(&self.layer);
        self.layer.record_originals(&lock).unwrap();
    }

    fn commit(&self, paths: &[PathBuf], force: bool) -> CommitReport {
        let lock = lock_ex(&self.layer);
        self.layer.commit(&lock, paths, force, false).unwrap()
    }

    /// Paths left in the upper tree below the host directory.
    fn upper_left(&self) -> Vec<String> {
        let base = self.u("");
        let mut v = Vec::new();
        fn walk(d: &Path, base: &Path, v: &mut Vec<String>) {
            let Ok(rd) = fs::read_dir(d) else { return };
            for e in rd {
                let p = e.unwrap().path();
                v.push(p.strip_prefix(base).unwrap().display().to_string());
                if fs::symlink_metadata(&p).unwrap().is_dir() {
                    walk(&p, base, v);
                }
            }
        }
        walk(&base, &base, &mut v);
        v.sort();
        v
    }
}

impl Drop for T {
    fn drop(&mut self) {
        // No `chmod -R` child: a fork would hold other tests' lock files.
        fn open_up(d: &Path) {
            let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o700));
            for e in fs::read_dir(d).into_iter().flatten().flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    open_up(&e.path());
                }
            }
        }
        open_up(&self.root);
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn mkdirs(p: &Path) {
    fs::create_dir_all(p).unwrap();
}

fn write(p: &Path, s: &str) {
    mkdirs(p.parent().unwrap());
    fs::write(p, s).unwrap();
}

/// Copy-up as overlayfs does it: same content, mode and mtime.
fn copy_up(t: &T, rel: &str) {
    let (h, u) = (t.h(rel), t.u(rel));
    mkdirs(u.parent().unwrap());
    fs::copy(&h, &u).unwrap();
    let m = fs::metadata(&h).unwrap();
    fs::set_permissions(&u, m.permissions()).unwrap();
    fs::File::options().write(true).open(&u).unwrap().set_modified(m.modified().unwrap()).unwrap();
}

#[test]
fn each_kind_of_change_is_detected() {
    let t = T::new();
    write(&t.h("mod.txt"), "old\n");
    write(&t.h("same.txt"), "same\n");
    write(&t.h("chmod.sh"), "#!/bin/sh\n");
    write(&t.h("gone.txt"), "bye\n");
    mkdirs(&t.h("gone-dir/sub"));
    write(&t.h("gone-dir/sub/f"), "x");
    symlink("a", t.h("link")).unwrap();
    symlink("same", t.h("link-same")).unwrap();
    write(&t.h("file-then-dir"), "f");
    mkdirs(&t.h("parent"));
    write(&t.h("parent/child"), "1");

    write(&t.u("mod.txt"), "new\n");
    copy_up(&t, "same.txt");
    copy_up(&t, "chmod.sh");
    fs::set_permissions(t.u("chmod.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    t.whiteout("gone.txt");
    t.whiteout("gone-dir");
    t.whiteout("never-existed");
    symlink("b", t.u("link")).unwrap();
    symlink("same", t.u("link-same")).unwrap();
    symlink("target", t.u("new-link")).unwrap();
    write(&t.u("new.txt"), "hello\n");
    write(&t.u("new-dir/a/b.txt"), "deep\n");
    write(&t.u("file-then-dir/inside"), "i");
    // A directory present only because something inside it changed.
    fs::set_permissions(
        t.u("parent"),
        fs::Permissions::from_mode(fs::metadata(t.h("parent")).unwrap().mode() & 0o7777),
    )
    .ok();
    write(&t.u("parent/child"), "2");
    fs::set_permissions(
        t.u("parent"),
        fs::Permissions::from_mode(fs::metadata(t.h("parent")).unwrap().mode() & 0o7777),
    )
    .unwrap();

    assert_eq!(
        t.list(),
        [
            "M chmod.sh",
            "M file-then-dir",
            "D gone-dir",
            "D gone.txt",
            "M link",
            "M mod.txt",
            "A new-dir",
            "A new-link",
            "A new.txt",
            "M parent/child",
        ]
    );
    let all = t.layer.changes(std::slice::from_ref(&t.host)).unwrap();
    let what = |p: &str| all.iter().find(|c| c.path == t.h(p)).unwrap().what.clone();
    assert_eq!(what("chmod.sh"), "mode 0644 -> 0755");
    assert_eq!(what("file-then-dir"), "type file -> directory");
    assert_eq!(what("link"), "symlink a -> b");
    assert_eq!(what("gone-dir"), "directory");
    assert_eq!(what("new.txt"), "file, 6 bytes");
    // Selecting a path: at or below it only.
    let sel = t.layer.changes(&[t.h("parent")]).unwrap();
    assert_eq!(sel.len(), 1);
    assert_eq!(sel[0].path, t.h("parent/child"));
    // Lexical normalization of the selection.
    let sel = t.layer.changes(&[t.h("parent/../new-dir/.")]).unwrap();
    assert_eq!(sel.len(), 1);
    assert!(t.layer.changes(&[PathBuf::from("relative")]).is_err());
}

#[test]
fn opaque_directories_in_both_formats() {
    for fuse in [false, true] {
        let mut t = T::new();
        if fuse {
            t.mark_fuse();
        }
        mkdirs(&t.h("d"));
        write(&t.h("d/kept"), "k\n");
        write(&t.h("d/changed"), "old\n");
        write(&t.h("d/dropped"), "x\n");
        mkdirs(&t.h("d/sub"));
        write(&t.h("d/sub/inner"), "i\n");
        // rm -rf d; mkdir d; recreate some of it.
        mkdirs(&t.u("d"));
        fs::set_permissions(t.u("d"), fs::Permissions::from_mode(fs::metadata(t.h("d")).unwrap().mode() & 0o7777))
            .unwrap();
        if fuse {
            write(&t.u("d/.wh..wh..opq"), "");
        } else {
            t.xattr("d", "user.overlay.opaque", b"y");
        }
        copy_up(&t, "d/kept");
        write(&t.u("d/changed"), "new\n");
        write(&t.u("d/added"), "a\n");
        // A directory inside an opaque one shows none of the host's entries.
        mkdirs(&t.u("d/sub"));
        fs::set_permissions(
            t.u("d/sub"),
            fs::Permissions::from_mode(fs::metadata(t.h("d/sub")).unwrap().mode() & 0o7777),
        )
        .unwrap();
        assert_eq!(t.list(), ["A d/added", "M d/changed", "D d/dropped", "D d/sub/inner"], "fuse format: {fuse}");
    }
}

#[test]
fn fuse_whiteouts_and_foreign_entries() {
    let mut t = T::new();
    t.mark_fuse();
    write(&t.h("a"), "a");
    write(&t.h("b"), "b");
    write(&t.u(".wh.a"), "");
    write(&t.u("b"), "bb");
    t.xattr("b", "user.overlay.metacopy", b"");
    write(&t.u(".wh..."), "");
    let all = t.layer.changes(std::slice::from_ref(&t.host)).unwrap();
    let lines: Vec<String> = all
        .iter()
        .map(|c| format!("{} {}", c.kind.letter(), c.path.strip_prefix(&t.host).unwrap().display()))
        .collect();
    assert_eq!(lines, ["D .wh...", "D a", "M b"]);
    t.record();
    let r = t.commit(std::slice::from_ref(&t.host), true);
    assert_eq!(r.committed.len(), 1, "{r:?}");
    assert_eq!(r.committed[0].path, t.h("a"));
    assert!(!t.h("a").exists());
    let errs: Vec<String> = r.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("/.wh...") && e.contains("names no valid entry")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("/b: ") && e.contains("user.overlay.metacopy")), "{errs:?}");
    assert_eq!(fs::read_to_string(t.h("b")).unwrap(), "b");
}

#[test]
fn record_then_commit_everything() {
    let t = T::new();
    write(&t.h("mod.txt"), "one\ntwo\n");
    fs::set_permissions(t.h("mod.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    write(&t.h("gone.txt"), "bye\n");
    mkdirs(&t.h("gone-dir/sub"));
    write(&t.h("gone-dir/sub/f"), "x");
    symlink("a", t.h("link")).unwrap();
    write(&t.h("file-then-dir"), "f");
    mkdirs(&t.h("dir-then-file/x"));
    write(&t.h("same.txt"), "s");

    write(&t.u("mod.txt"), "one\nTWO\n");
    fs::set_permissions(t.u("mod.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    t.whiteout("gone.txt");
    t.whiteout("gone-dir");
    symlink("b", t.u("link")).unwrap();
    write(&t.u("new-dir/a/b.txt"), "deep\n");
    symlink("../b.txt", t.u("new-dir/a/up")).unwrap();
    fs::set_permissions(t.u("new-dir/a"), fs::Permissions::from_mode(0o750)).unwrap();
    write(&t.u("file-then-dir/inside"), "i");
    write(&t.u("dir-then-file"), "now a file");
    copy_up(&t, "same.txt");
    t.record();
    let r = t.commit(&[], false);
    assert!(r.complete(), "{r:?}");
    assert_eq!(r.committed.len(), 7, "{r:?}");
    assert_eq!(fs::read_to_string(t.h("mod.txt")).unwrap(), "one\nTWO\n");
    assert_eq!(fs::metadata(t.h("mod.txt")).unwrap().mode() & 0o7777, 0o600);
    assert!(!t.h("gone.txt").exists() && !t.h("gone-dir").exists());
    assert_eq!(fs::read_link(t.h("link")).unwrap(), Path::new("b"));
    assert_eq!(fs::read_to_string(t.h("new-dir/a/b.txt")).unwrap(), "deep\n");
    assert_eq!(fs::read_link(t.h("new-dir/a/up")).unwrap(), Path::new("../b.txt"));
    assert_eq!(fs::metadata(t.h("new-dir/a")).unwrap().mode() & 0o7777, 0o750);
    assert_eq!(fs::read_to_string(t.h("file-then-dir/inside")).unwrap(), "i");
    assert_eq!(fs::read_to_string(t.h("dir-then-file")).unwrap(), "now a file");
    // No temporary left on the host, nothing left in the layer (the
    // unchanged copy went with the rest), no record left.
    let leftovers: Vec<_> = fs::read_dir(&t.host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".capsule"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(t.upper_left().is_empty(), "{:?}", t.upper_left());
    assert!(t.list().is_empty());
    let m = t.layer.load_meta().unwrap();
    assert!(m.originals.keys().all(|k| !k.starts_with(&t.host)), "{:?}", m.originals);
}

#[test]
fn conflicts_are_refused_and_named_force_overrides() {
    let t = T::new();
    write(&t.h("a"), "a0");
    write(&t.h("b"), "b0");
    write(&t.u("a"), "a1");
    write(&t.u("b"), "b1");
    write(&t.u("new"), "n");
    write(&t.u("norecord"), "x");
    t.record();
    // The host changes a after the run; norecord's run did not finish.
    let lock = lock_ex(&t.layer);
    let mut m = t.layer.load_meta().unwrap();
    m.originals.remove(&t.h("norecord"));
    t.layer.save_meta(&m).unwrap();
    drop(lock);
    write(&t.h("a"), "a-host");
    // And someone created `new` on the host meanwhile.
    write(&t.h("new"), "host's");
    let r = t.commit(&[], false);
    let conflicts: Vec<String> = r.conflicts.iter().map(|c| c.to_string()).collect();
    assert_eq!(conflicts.len(), 3, "{r:?}");
    assert!(conflicts[0].contains("/a: changed on the host"), "{conflicts:?}");
    assert!(conflicts[1].contains("/new: changed on the host") && conflicts[1].contains("created"), "{conflicts:?}");
    assert!(conflicts[2].contains("/norecord: no record of the original"), "{conflicts:?}");
    assert_eq!(r.committed.iter().map(|c| c.path.clone()).collect::<Vec<_>>(), [t.h("b")]);
    assert_eq!(fs::read_to_string(t.h("a")).unwrap(), "a-host");
    assert_eq!(fs::read_to_string(t.h("b")).unwrap(), "b1");
    assert_eq!(t.list(), ["M a", "M new", "A norecord"]);
    // Same size, same mtime, other content: the hash tells.
    write(&t.h("a"), "a0");
    let lock = lock_ex(&t.layer);
    let mut m = t.layer.load_meta().unwrap();
    let rec = m.originals.get_mut(&t.h("a")).unwrap();
    let md = fs::metadata(t.h("a")).unwrap();
    rec.mtime_ns = Some(md.mtime() * 1_000_000_000 + md.mtime_nsec());
    rec.size = Some(2);
    t.layer.save_meta(&m).unwrap();
    drop(lock);
    write(&t.h("a"), "zz");
    fs::File::options().write(true).open(t.h("a")).unwrap().set_modified(md.modified().unwrap()).unwrap();
    let r = t.commit(&[t.h("a")], false);
    assert!(r.conflicts[0].reason.contains("sha256"), "{r:?}");
    let r = t.commit(&[], true);
    assert!(r.complete(), "{r:?}");
    assert_eq!(fs::read_to_string(t.h("a")).unwrap(), "a1");
    assert_eq!(fs::read_to_string(t.h("new")).unwrap(), "n");
    assert_eq!(fs::read_to_string(t.h("norecord")).unwrap(), "x");
    assert!(t.list().is_empty());
}

#[test]
fn opaque_directory_commits_piecemeal_without_losing_anything() {
    let t = T::new();
    mkdirs(&t.h("d"));
    write(&t.h("d/kept"), "k");
    write(&t.h("d/dropped"), "x");
    write(&t.h("d/dropped2"), "y");
    mkdirs(&t.u("d"));
    fs::set_permissions(t.u("d"), fs::Permissions::from_mode(fs::metadata(t.h("d")).unwrap().mode() & 0o7777)).unwrap();
    t.xattr("d", "user.overlay.opaque", b"y");
    copy_up(&t, "d/kept");
    write(&t.u("d/added"), "a");
    t.record();
    // The host changes `dropped2` meanwhile: that deletion conflicts.
    write(&t.h("d/dropped2"), "yy");
    let r = t.commit(&[], false);
    assert_eq!(r.committed.len(), 2, "{r:?}");
    assert_eq!(r.conflicts.len(), 1, "{r:?}");
    assert!(t.h("d/added").exists() && !t.h("d/dropped").exists() && t.h("d/dropped2").exists());
    // The opaque directory stays (it still hides dropped2), with the
    // committed file in it: the layer still shows `added`.
    assert_eq!(t.list(), ["D d/dropped2"]);
    assert!(t.u("d/added").exists());
    let r = t.commit(&[], true);
    assert!(r.complete(), "{r:?}");
    assert!(!t.h("d/dropped2").exists());
    assert!(t.list().is_empty());
    assert!(t.upper_left().is_empty(), "{:?}", t.upper_left());
}

#[test]
fn host_symlink_parent_and_upper_links_are_never_followed() {
    let t = T::new();
    let outside = t.root.join("outside");
    mkdirs(&outside);
    write(&outside.join("victim"), "safe");
    symlink(&outside, t.h("via-link")).unwrap();
    // The layer changes a file below a host directory that is a link.
    write(&t.u("via-link/victim"), "owned");
    // And has a link in its upper tree where a directory of new files
    // would be read from.
    symlink(&outside, t.u("new-dir")).unwrap();
    write(&t.h("plain"), "p");
    write(&t.u("plain"), "p2");
    t.record();
    let r = t.commit(&[], true);
    assert_eq!(fs::read_to_string(outside.join("victim")).unwrap(), "safe");
    let errs: Vec<String> = r.errors.iter().map(|e| e.to_string()).collect();
    assert!(errs.iter().any(|e| e.contains("host/via-link: ") && e.contains("is a symbolic link")), "{r:?}");
    // The upper link is a new symlink, committed as a link (not followed).
    assert_eq!(fs::read_link(t.h("new-dir")).unwrap(), outside);
    assert_eq!(fs::read_to_string(t.h("plain")).unwrap(), "p2");
    assert_eq!(t.list(), ["M via-link"]);
    // A host directory that turns into a link after the scan is refused by
    // the walk from `/` itself.
    let rel = t.h("via-link/victim").as_os_str().as_bytes()[1..].to_vec();
    let why = scan::open_host_parent(&rel).unwrap_err().1;
    assert!(why.contains("via-link is a symbolic link"), "{why}");
    // The upper side is read beneath its root and through no link.
    let rel = t.h("new-dir").as_os_str().as_bytes()[1..].to_vec();
    assert!(commit::open_upper(&t.layer, &join(&rel, b"victim"), libc::O_RDONLY).is_err());
}

#[test]
fn locks_and_discard() {
    let t = T::new();
    let a = t.layer.lock_run(false).unwrap();
    let b = t.layer.lock_run(false).unwrap();
    let err = t.layer.lock_run(true).unwrap_err().to_string();
    assert!(err.contains("is in use by a running capsule"), "{err}");
    drop((a, b));
    let ex = lock_ex(&t.layer);
    assert!(t.layer.lock_run(false).is_err());
    // A shared lock does not allow changes.
    drop(ex);
    let sh = lock_wait(&t.layer, false);
    assert!(t.layer.commit(&sh, &[], false, false).is_err());
    drop(sh);
    // overlayfs leaves a mode-000 work directory.
    let work = t.layer.dir().join("work/work");
    mkdirs(&work);
    write(&work.join("x"), "");
    fs::set_permissions(&work, fs::Permissions::from_mode(0o000)).unwrap();
    write(&t.u("f"), "f");
    let dir = t.layer.dir().to_path_buf();
    let layer = Layer::open(&dir).unwrap();
    let lock = lock_ex(&layer);
    layer.discard(lock).unwrap();
    assert!(!dir.exists());
}

#[test]
fn create_refuses_what_is_not_a_layer() {
    let t = T::new();
    let d = t.root.join("busy");
    write(&d.join("precious"), "p");
    let e = Layer::create(&d).unwrap_err().to_string();
    assert!(e.contains("not empty") && e.contains("precious"), "{e}");
    let e = Layer::open(&d).unwrap_err().to_string();
    assert!(e.contains("no upper/"), "{e}");
    fs::create_dir(t.root.join("real-upper")).unwrap();
    let d2 = t.root.join("linked");
    fs::create_dir(&d2).unwrap();
    symlink(t.root.join("real-upper"), d2.join("upper")).unwrap();
    let e = Layer::open(&d2).unwrap_err().to_string();
    assert!(e.contains("symlink, not a directory"), "{e}");
    // Idempotent on a layer.
    Layer::create(t.layer.dir()).unwrap();
    // Discard refuses a layer-looking directory without layer.json.
    let d3 = t.root.join("no-json");
    mkdirs(&d3.join("upper"));
    let l3 = Layer::open(&d3).unwrap();
    let lock = lock_ex(&l3);
    let e = l3.discard(lock).unwrap_err().to_string();
    assert!(e.contains("no layer.json"), "{e}");
    assert!(d3.join("upper").exists());
}

#[test]
fn diff_shows_text_binary_modes_links_and_dirs() {
    let t = T::new();
    write(&t.h("text"), "a\nb\nc\nd\ne\nf\ng\nh\n");
    write(&t.u("text"), "a\nb\nc\nd\nE\nf\ng\nh\n");
    fs::write(t.h("bin"), [0u8, 1, 2]).unwrap();
    fs::write(t.u("bin"), [0u8, 1, 2, 3]).unwrap();
    write(&t.h("mode"), "m");
    copy_up(&t, "mode");
    fs::set_permissions(t.u("mode"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("x", t.h("l")).unwrap();
    symlink("y", t.u("l")).unwrap();
    write(&t.u("nd/f"), "new\n");
    write(&t.h("del"), "gone\n");
    t.whiteout("del");
    let mut out = Vec::new();
    t.layer.diff(std::slice::from_ref(&t.host), &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let h = t.host.display().to_string();
    for want in [
        format!("M {h}/bin: content, 3 -> 4 bytes\n  binary: 3 bytes, sha256 ae4b3280e56e2faf83f414a6e3dabe9d5fbe18976544c05fed121accb85b53fc -> 4 bytes, sha256 "),
        format!("D {h}/del: file, 5 bytes\n--- {h}/del\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"),
        format!("M {h}/l: symlink x -> y\n"),
        format!("M {h}/mode: mode 0644 -> 0755\n"),
        format!("A {h}/nd: new directory\n  + {h}/nd/f (file, 4 bytes)\n"),
        format!("M {h}/text: content\n--- {h}/text\n+++ {h}/text (layer)\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n"),
    ] {
        assert!(out.contains(&want), "missing\n{want}\nin\n{out}");
    }
    assert!(!out.contains("--- /dev/null\n+++") || out.contains("nd"), "{out}");
}

#[test]
fn empty_sha256_is_the_hash_of_an_empty_file() {
    let p = std::env::temp_dir().join(format!("capsule-empty-sha-{}", std::process::id()));
    fs::write(&p, b"").unwrap();
    let mut f = fs::File::open(&p).unwrap();
    assert_eq!(node::sha256(&mut f).unwrap(), node::EMPTY_SHA256);
    fs::remove_file(&p).unwrap();
}

/// In a layer fuse-overlayfs did not serve, its marker names and xattrs
/// are files a program wrote: listed and committed as files, deleting
/// nothing; fuse-overlayfs may not serve such a layer afterwards.
#[test]
fn fuse_markers_in_a_kernel_layer_are_files() {
    let mut t = T::new();
    write(&t.h("a"), "a");
    mkdirs(&t.h("d"));
    write(&t.h("d/k"), "k");
    mkdirs(&t.h("e"));
    write(&t.h("e/k"), "k");
    write(&t.u(".wh.a"), "");
    mkdirs(&t.u("d"));
    fs::set_permissions(t.u("d"), fs::Permissions::from_mode(fs::metadata(t.h("d")).unwrap().mode() & 0o7777)).unwrap();
    write(&t.u("d/.wh..wh..opq"), "");
    mkdirs(&t.u("e"));
    fs::set_permissions(t.u("e"), fs::Permissions::from_mode(fs::metadata(t.h("e")).unwrap().mode() & 0o7777)).unwrap();
    t.xattr("e", "user.fuseoverlayfs.opaque", b"y");
    assert_eq!(t.list(), ["A .wh.a", "A d/.wh..wh..opq"]);
    let e = t.layer.check_fuse_ready().unwrap_err().to_string();
    assert!(e.contains(".wh.") && e.contains("without --root"), "{e}");
    t.record();
    let r = t.commit(std::slice::from_ref(&t.host), false);
    assert!(r.complete(), "{r:?}");
    assert_eq!(fs::read_to_string(t.h("a")).unwrap(), "a");
    assert_eq!(fs::read_to_string(t.h("d/k")).unwrap(), "k");
    assert_eq!(fs::read_to_string(t.h("e/k")).unwrap(), "k");
    assert!(t.h(".wh.a").is_file() && t.h("d/.wh..wh..opq").is_file());
    // The same names in a layer fuse-overlayfs served are its markers.
    write(&t.u(".wh.a"), "");
    t.mark_fuse();
    assert!(t.layer.check_fuse_ready().is_ok());
    assert_eq!(t.list(), ["D a"]);
}

/// A sparse file is compared and committed without reading or writing
/// its holes.
#[test]
fn sparse_files_keep_their_holes() {
    use std::os::unix::fs::FileExt;
    let t = T::new();
    let big = 1u64 << 40;
    let f = fs::File::create(t.u("big")).unwrap();
    f.write_all_at(b"a", 0).unwrap();
    f.write_all_at(b"z", big).unwrap();
    drop(f);
    let c = t.layer.changes(std::slice::from_ref(&t.host)).unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].size, c[0].sparse), (Some(big + 1), true));
    assert!(c[0].to_string().ends_with("big  (1099511627777 bytes, sparse)"), "{}", c[0]);
    let mut out = Vec::new();
    t.layer.diff(&[], &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("content not read"), "{out}");
    t.record();
    let r = t.commit(&[], false);
    assert!(r.complete(), "{r:?}");
    let md = fs::metadata(t.h("big")).unwrap();
    assert_eq!(md.len(), big + 1);
    assert!(md.blocks() < 1024, "{} blocks", md.blocks());
    let f = fs::File::open(t.h("big")).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, big).unwrap();
    assert_eq!(&b, b"z");
    // Two sparse copies compare equal without reading the holes.
    let mut a = fs::File::open(t.h("big")).unwrap();
    let mut b = fs::File::open(t.h("big")).unwrap();
    assert!(super::node::same_content(&mut a, &mut b).unwrap());
}

/// Setuid and setgid bits are listed and dropped at commit unless kept;
/// dropped, they stay in the layer as a recorded mode change.
#[test]
fn special_bits_listed_and_dropped_unless_kept() {
    let t = T::new();
    write(&t.u("s"), "s");
    fs::set_permissions(t.u("s"), fs::Permissions::from_mode(0o4755)).unwrap();
    write(&t.u("k"), "k");
    fs::set_permissions(t.u("k"), fs::Permissions::from_mode(0o4700)).unwrap();
    let c = t.layer.changes(std::slice::from_ref(&t.host)).unwrap();
    assert_eq!(c.iter().map(|c| c.special.clone()).collect::<Vec<_>>(), [vec!["setuid"], vec!["setuid"]]);
    t.record();
    let r = t.commit(&[t.h("s")], false);
    assert!(r.complete(), "{r:?}");
    assert_eq!(r.special_bits_dropped, [t.h("s")]);
    assert_eq!(fs::metadata(t.h("s")).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(t.list(), ["A k", "M s"]);
    let lock = lock_ex(&t.layer);
    let r = t.layer.commit(&lock, &[], false, true).unwrap();
    assert!(r.complete() && r.special_bits_dropped.is_empty(), "{r:?}");
    assert_eq!(fs::metadata(t.h("s")).unwrap().mode() & 0o7777, 0o4755);
    assert_eq!(fs::metadata(t.h("k")).unwrap().mode() & 0o7777, 0o4700);
}

/// What a run could not change (`DIR/protected`: hidden or read-only in a
/// run) is never committed, even with --force: not an entry at or below
/// it, not the deletion of a directory holding it; a path shown again,
/// writable, below a hidden one is committed.
#[test]
fn protected_paths_are_never_committed() {
    let t = T::new();
    mkdirs(&t.h("home/.ssh"));
    write(&t.h("home/.ssh/id"), "KEY");
    mkdirs(&t.h("proj/ro"));
    write(&t.h("proj/ro/f"), "r");
    mkdirs(&t.h("cfg/open"));
    write(&t.h("cfg/open/x"), "x");
    let enc = |p: PathBuf| super::meta::encode(p.as_os_str().as_bytes());
    let g = serde_json::json!({"version": 1, "runs": [
        {"protected": [enc(t.h("home/.ssh"))], "open": []},
        {"protected": [enc(t.h("proj/ro")), enc(t.h("cfg"))], "open": [enc(t.h("cfg/open"))]}]});
    fs::write(t.layer.dir().join("protected"), g.to_string()).unwrap();
    for d in ["home", "home/.ssh", "proj", "proj/ro", "cfg", "cfg/open"] {
        mkdirs(&t.u(d));
        fs::set_permissions(t.u(d), fs::Permissions::from_mode(fs::metadata(t.h(d)).unwrap().mode() & 0o7777)).unwrap();
    }
    t.whiteout("home/.ssh/id");
    write(&t.u("home/.ssh/new"), "n");
    write(&t.u("cfg/open/x"), "y");
    write(&t.u("cfg/other"), "o");
    t.whiteout("proj/ro/f");
    t.record();
    let r = t.commit(&[], true);
    let refused: Vec<String> =
        r.errors.iter().map(|e| e.path.strip_prefix(&t.host).unwrap().display().to_string()).collect();
    assert_eq!(refused, ["cfg/other", "home/.ssh/id", "home/.ssh/new", "proj/ro/f"], "{r:?}");
    assert!(r.errors.iter().all(|e| e.reason.contains("no run could change it")), "{r:?}");
    assert_eq!(r.committed.len(), 1, "{r:?}");
    assert_eq!(fs::read_to_string(t.h("cfg/open/x")).unwrap(), "y");
    assert_eq!(fs::read_to_string(t.h("home/.ssh/id")).unwrap(), "KEY");
    assert_eq!(fs::read_to_string(t.h("proj/ro/f")).unwrap(), "r");
    // Deleting a directory holding a protected path is refused too.
    fs::remove_dir_all(t.u("proj")).unwrap();
    t.whiteout("proj");
    t.record();
    let r = t.commit(&[t.h("proj")], true);
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert!(r.errors[0].reason.contains("it would delete"), "{r:?}");
    assert_eq!(fs::read_to_string(t.h("proj/ro/f")).unwrap(), "r");
}

/// A directory keeps the setgid bit the host's directory already had (a
/// group-shared one) when its mode changes; a new one does not get it.
#[test]
fn a_directory_keeps_the_hosts_own_setgid_bit() {
    let t = T::new();
    mkdirs(&t.h("shared"));
    fs::set_permissions(t.h("shared"), fs::Permissions::from_mode(0o2775)).unwrap();
    mkdirs(&t.u("shared"));
    fs::set_permissions(t.u("shared"), fs::Permissions::from_mode(0o2755)).unwrap();
    mkdirs(&t.u("new"));
    fs::set_permissions(t.u("new"), fs::Permissions::from_mode(0o2755)).unwrap();
    t.record();
    let r = t.commit(&[], false);
    assert!(r.complete(), "{r:?}");
    assert_eq!(fs::metadata(t.h("shared")).unwrap().mode() & 0o7777, 0o2755);
    assert_eq!(fs::metadata(t.h("new")).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(r.special_bits_dropped, [t.h("new")]);
}

/// fuse-overlayfs's attribute alone, deep in a kernel layer, keeps
/// fuse-overlayfs from serving it; a kernel whiteout does not.
#[test]
fn a_fuse_attribute_in_a_kernel_layer_is_found() {
    let t = T::new();
    mkdirs(&t.h("d/e"));
    write(&t.h("gone"), "g");
    t.whiteout("gone");
    mkdirs(&t.u("d/e"));
    assert!(t.layer.check_fuse_ready().is_ok());
    t.xattr("d/e", "user.fuseoverlayfs.opaque", b"y");
    let e = t.layer.check_fuse_ready().unwrap_err().to_string();
    assert!(e.contains("/d/e was written"), "{e}");
}

/// overlayfs's marks of a `volatile` mount under `work/ROOT/work`, mode
/// 000 as the kernel leaves them.
fn plant_incompat(t: &T, root: &Path) -> PathBuf {
    let inner = t.layer.dir().join("work").join(root.strip_prefix("/").unwrap()).join("work");
    mkdirs(&inner.join("incompat/volatile"));
    write(&inner.join("incompat/volatile/dirty"), "");
    for p in
        [inner.join("incompat/volatile/dirty"), inner.join("incompat/volatile"), inner.join("incompat"), inner.clone()]
    {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o000)).unwrap();
    }
    inner
}

fn boot() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string()
}

/// A volatile run's marks: settled in the same boot (both marks gone, the
/// next mount possible), refused after a restart until recovered; list's
/// check sees the restart too; a mark capsule cannot read is named.
#[test]
fn a_volatile_layer_is_settled_or_refused_after_a_restart() {
    let t = T::new();
    let lock = lock_ex(&t.layer);
    assert_eq!(t.layer.settle(&lock).unwrap(), Settled::Clean);
    let mark = t.layer.dir().join(VOLATILE_MARK);
    // Marked as a run marks it, then the kernel's marks planted.
    assert!(t.layer.begin_volatile(&lock, std::slice::from_ref(&t.host)).unwrap());
    assert_eq!(fs::read_to_string(&mark).unwrap(), format!("boot {}\n{}\n", boot(), t.host.display()));
    let inner = plant_incompat(&t, &t.host);
    assert!(t.layer.interrupted().unwrap().is_none());
    // The next run: overlayfs's marks go, the layer's stays.
    t.layer.ready_for_mount(&lock).unwrap();
    assert!(mark.exists() && !inner.join("incompat").exists());
    plant_incompat(&t, &t.host);
    assert_eq!(t.layer.settle(&lock).unwrap(), Settled::Synced);
    assert!(!mark.exists() && !inner.join("incompat").exists(), "marks left");
    assert_eq!(t.layer.settle(&lock).unwrap(), Settled::Clean);
    // Written in another boot: refused, named, until recovered.
    fs::write(&mark, format!("boot 00000000-1111-2222-3333-444444444444\n{}\n", t.host.display())).unwrap();
    plant_incompat(&t, &t.host);
    assert_eq!(t.layer.interrupted().unwrap().as_deref(), Some("00000000-1111-2222-3333-444444444444"));
    let e = t.layer.settle(&lock).unwrap_err();
    assert!(matches!(e, LayerError::Interrupted { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("capsule layer recover") && msg.contains(&t.layer.dir().display().to_string()), "{msg}");
    assert!(matches!(t.layer.check_interrupted(), Err(LayerError::Interrupted { .. })));
    assert!(matches!(t.layer.ready_for_mount(&lock), Err(LayerError::Interrupted { .. })));
    assert!(matches!(t.layer.commit(&lock, &[], false, false), Err(LayerError::Interrupted { .. })));
    assert!(mark.exists() && inner.join("incompat").exists(), "a refused settle removed a mark");
    assert!(t.layer.recover(&lock).unwrap());
    assert!(!mark.exists() && !inner.join("incompat").exists(), "recover left a mark");
    assert!(!t.layer.recover(&lock).unwrap());
    // A mark that is not capsule's format: named; recover clears every
    // root of the `roots` file.
    fs::write(&mark, "boot \x1b[31mred\n").unwrap();
    let msg = t.layer.settle(&lock).unwrap_err().to_string();
    assert!(!msg.contains('\x1b') && msg.contains("capsule layer recover"), "{msg:?}");
    fs::write(&mark, "garbage\n").unwrap();
    fs::write(t.layer.dir().join("roots"), format!("{}\n", t.host.display())).unwrap();
    plant_incompat(&t, &t.host);
    let msg = t.layer.settle(&lock).unwrap_err().to_string();
    assert!(msg.contains("volatile") && msg.contains("capsule layer recover"), "{msg}");
    assert!(t.layer.recover(&lock).unwrap());
    assert!(!mark.exists() && !inner.join("incompat").exists(), "recover left a mark");
    // A shared lock may not settle.
    drop(lock);
    let shared = lock_wait(&t.layer, false);
    assert!(t.layer.settle(&shared).is_err());
}
