//! Boxes: a per-user root directory holding `<id>/` (the box directory,
//! with `box/` the program's working directory) and `<id>.lock` (isolate's
//! lock file: held while a command works on the box, truncated, never
//! removed, at cleanup).

use std::ffi::{CStr, CString};
use std::fs::{self, File};
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use capsule::sys;

use capsule::error::{io_strerror, strerror};

/// Environment variable naming the box root.
pub const ROOT_ENV: &str = "CAPSULE_ISOLATE_ROOT";

/// The box root: `$CAPSULE_ISOLATE_ROOT`, else `capsule-isolate` in the
/// user's runtime directory (`$XDG_RUNTIME_DIR`, else `/run/user/UID`,
/// where it is a private directory of the caller's), else
/// `/tmp/capsule-isolate-UID`; created with mode 0700. It must be a
/// directory of the caller's (not a link) that no one else may write: one
/// another user made first (to keep the caller's boxes out) is refused
/// before anything is written into it.
pub fn root() -> Result<PathBuf, String> {
    let uid = capsule::sys::geteuid();
    let private = |p: &Path| {
        p.is_absolute() && fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    };
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| private(p))
        .or_else(|| Some(PathBuf::from(format!("/run/user/{uid}"))).filter(|p| private(p)));
    let root = match (std::env::var_os(ROOT_ENV), runtime) {
        (Some(r), _) if !r.is_empty() => {
            let r = PathBuf::from(r);
            if !r.is_absolute() {
                return Err(format!("{ROOT_ENV} must be an absolute path, not `{}`", r.display()));
            }
            r
        }
        (_, Some(rt)) => rt.join("capsule-isolate"),
        _ => PathBuf::from(format!("/tmp/capsule-isolate-{uid}")),
    };
    let m = match fs::symlink_metadata(&root) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match fs::DirBuilder::new().mode(0o700).create(&root) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("Cannot create box root {}: {}", root.display(), io_strerror(&e))),
            }
            fs::symlink_metadata(&root).map_err(|e| format!("Cannot stat {}: {}", root.display(), io_strerror(&e)))?
        }
        Err(e) => return Err(format!("Cannot stat {}: {}", root.display(), io_strerror(&e))),
    };
    check_root(&root, &m, uid)?;
    Ok(root)
}

/// Why the box root `root` (its `lstat`) is not one to use, with the fix.
fn check_root(root: &Path, m: &fs::Metadata, uid: u32) -> Result<(), String> {
    let fix = format!("set {ROOT_ENV} to a directory of your own (or XDG_RUNTIME_DIR to your runtime directory)");
    let why = if m.file_type().is_symlink() {
        "is a symbolic link".to_string()
    } else if !m.is_dir() {
        "is not a directory".to_string()
    } else if m.uid() != uid {
        format!("belongs to uid {}, not to you (uid {uid}): another user made it first", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!("may be written by others (mode {:04o})", m.mode() & 0o7777)
    } else {
        return Ok(());
    };
    Err(format!("Box root {} {why}; {fix}", root.display()))
}

/// A box and its held lock. Every operation on the box directory is
/// made from `root`, the box root's descriptor, and follows no link (the
/// program, or anything else running as the caller, may have put one in
/// the place of any directory in it).
pub struct BoxDir {
    pub dir: PathBuf,
    root: OwnedFd,
    name: CString,
    lock: File,
    pub state: State,
}

/// What the lock file records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub initialized: bool,
    pub cg: bool,
    /// `-q` given at `--init`: (blocks, inodes).
    pub quota: Option<(u64, u64)>,
    /// `box/` and `tmp/` may be these subordinate ids' (host numbers):
    /// recorded before they are handed to the box's uid, cleared once
    /// they are the caller's again.
    pub boxed: Option<(u32, u32)>,
}

impl State {
    fn parse(text: &str) -> Option<State> {
        let mut s = State::default();
        let mut lines = text.lines();
        if lines.next()? != "capsule-isolate 1" {
            return None;
        }
        for l in lines {
            match l.split_once('=')? {
                ("init", v) => s.initialized = v == "1",
                ("cg", v) => s.cg = v == "1",
                ("quota", v) => {
                    let (b, i) = v.split_once(',')?;
                    s.quota = Some((b.parse().ok()?, i.parse().ok()?));
                }
                ("boxed", v) => {
                    let (u, g) = v.split_once(',')?;
                    s.boxed = Some((u.parse().ok()?, g.parse().ok()?));
                }
                _ => return None,
            }
        }
        Some(s)
    }

    fn text(&self) -> String {
        let mut t = format!("capsule-isolate 1\ninit={}\ncg={}\n", u8::from(self.initialized), u8::from(self.cg));
        if let Some((b, i)) = self.quota {
            t.push_str(&format!("quota={b},{i}\n"));
        }
        if let Some((u, g)) = self.boxed {
            t.push_str(&format!("boxed={u},{g}\n"));
        }
        t
    }
}

/// isolate's `lock_box`: None when the box has no lock file (or an empty
/// one, outside `--init`). Dies as isolate does on a busy box, a box in the
/// other control group mode or an unfinished `--init`; for `--run`, also
/// on a box whose directory or `box/` is not a directory of its own (a
/// link put in its place).
pub fn lock(root: &Path, id: u32, init: bool, cleanup: bool, cg: bool, wait: bool) -> Result<Option<BoxDir>, String> {
    let croot = cstring(root)?;
    let rootfd = sys::open(&croot, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
        .map_err(|e| format!("Cannot open box root {}: {}", root.display(), strerror(e)))?;
    // The root checked again where it was opened.
    let m = rootfd
        .try_clone()
        .and_then(|fd| File::from(fd).metadata())
        .map_err(|e| format!("Cannot stat {}: {}", root.display(), io_strerror(&e)))?;
    check_root(root, &m, sys::geteuid())?;
    let name = root.join(format!("{id}.lock"));
    let lname = CString::new(format!("{id}.lock")).expect("no NUL");
    let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK | if init { libc::O_CREAT } else { 0 };
    let mut f = match sys::openat(rootfd.as_raw_fd(), &lname, flags, 0o600) {
        Ok(fd) => File::from(fd),
        Err(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(format!("Cannot open {}: {}", name.display(), strerror(e))),
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!("Cannot open {}: not a regular file", name.display()));
    }
    let locked =
        if wait { capsule::sys::flock_exclusive(f.as_raw_fd()) } else { capsule::sys::flock_nb(f.as_raw_fd(), true) };
    match locked {
        Ok(()) => {}
        Err(libc::EWOULDBLOCK) => return Err("This box is currently in use by another process".into()),
        Err(e) => return Err(format!("Cannot lock {}: {}", name.display(), strerror(e))),
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| format!("Cannot read {}: {}", name.display(), io_strerror(&e)))?;
    let dir = root.join(id.to_string());
    let b = |state| BoxDir { dir, root: rootfd, name: CString::new(id.to_string()).expect("no NUL"), lock: f, state };
    if text.is_empty() {
        if init {
            return Ok(Some(b(State { cg, ..State::default() })));
        }
        return Ok(None);
    }
    let state = State::parse(&text).ok_or_else(|| format!("Lock file {} has incompatible format", name.display()))?;
    if state.cg != cg {
        return Err("This box was initialized with an incompatible control group mode".into());
    }
    if !state.initialized && !init && !cleanup {
        return Err("This box was not initialized properly".into());
    }
    // What may still be the box uid's stays recorded until it is the caller's again.
    let b = b(if init { State { cg, boxed: state.boxed, ..State::default() } } else { state });
    if !init && !cleanup {
        b.open_box()?;
    }
    Ok(Some(b))
}

fn cstring(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| format!("{}: a path with a NUL byte", p.display()))
}

impl BoxDir {
    /// Records the state in the lock file.
    pub fn write_state(&mut self) -> Result<(), String> {
        self.store(&self.state)
    }

    fn store(&self, state: &State) -> Result<(), String> {
        let t = state.text();
        let mut f = &self.lock;
        let r = f.set_len(0).and_then(|_| f.rewind()).and_then(|_| f.write_all(t.as_bytes()));
        r.map_err(|e| format!("Cannot write lock file: {}", io_strerror(&e)))
    }

    /// `--init`: a fresh box directory with an empty `box/`.
    pub fn init(&mut self, quota: Option<(u64, u64)>) -> Result<(), String> {
        self.state.initialized = false;
        self.write_state()?;
        self.remove()?;
        let fail = |p: &Path, e| format!("Cannot create {}: {}", p.display(), strerror(e));
        sys::mkdirat(self.root.as_raw_fd(), &self.name, 0o700).map_err(|e| fail(&self.dir, e))?;
        let dir = self.open_dir()?;
        sys::mkdirat(dir.as_raw_fd(), c"box", 0o700).map_err(|e| fail(&self.dir.join("box"), e))?;
        self.state.quota = quota;
        self.state.boxed = None;
        self.state.initialized = true;
        self.write_state()
    }

    /// The box directory, opened (`O_PATH`) without following a link.
    fn open_dir(&self) -> Result<OwnedFd, String> {
        sys::openat(self.root.as_raw_fd(), &self.name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
            .map_err(|e| not_own(&self.dir, e))
    }

    /// `box/`, opened (`O_PATH`) without following a link.
    fn open_box(&self) -> Result<OwnedFd, String> {
        let dir = self.open_dir()?;
        sys::openat(dir.as_raw_fd(), c"box", libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
            .map_err(|e| not_own(&self.dir.join("box"), e))
    }

    /// Removes the box directory (if any); a link in its place is removed,
    /// not followed.
    pub fn remove(&self) -> Result<(), String> {
        if let Some((uid, gid)) = self.state.boxed {
            // The program's files are its uid's: the caller's again first (in a namespace mapping it).
            let ns =
                capsule::host::subids::Namespace::create(capsule::spec::SubordinateIds { uid, gid }).map_err(|e| {
                    format!("Cannot remove {}: its files are uid {uid}'s (a subordinate id): {e}", self.dir.display())
                })?;
            self.chown_tree(&ns, false)?;
        }
        let root = self.root.as_raw_fd();
        let fail = |e: String| format!("Cannot remove {e}");
        let st = match sys::lstat_at(root, &self.name) {
            Err(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(fail(format!("{}: {}", self.dir.display(), strerror(e)))),
            Ok(st) => st,
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return sys::unlinkat(root, &self.name, false)
                .map_err(|e| fail(format!("{}: {}", self.dir.display(), strerror(e))));
        }
        let top = open_dir(root, &self.name).map_err(|e| fail(format!("{}: {}", self.dir.display(), strerror(e))))?;
        sweep(top, Sweep::All, &self.dir).map_err(fail)?;
        sys::unlinkat(root, &self.name, true).map_err(|e| fail(format!("{}: {}", self.dir.display(), strerror(e))))
    }

    /// `--cleanup`: the directory removed, the lock file emptied.
    pub fn cleanup(self) -> Result<(), String> {
        self.remove()?;
        self.lock.set_len(0).map_err(|e| format!("Cannot truncate lock file: {}", io_strerror(&e)))
    }

    /// After a run, without `--special-files`: removes what the program
    /// left in `box/` that is neither a regular file nor a directory
    /// (links, FIFOs, sockets), as isolate does, so that the caller never
    /// follows a link the program made; however the program set the modes
    /// (they are put back as it left them). Returns how many were removed.
    /// Where that fails, the box is marked uninitialized and removed: a
    /// link must never be left for the caller to follow.
    pub fn remove_special(&self) -> Result<usize, String> {
        let swept = self.open_dir().and_then(|dir| {
            let top = open_dir(dir.as_raw_fd(), c"box").map_err(|e| not_own(&self.dir.join("box"), e))?;
            sweep(top, Sweep::Special, &self.dir.join("box")).map_err(|e| format!("Cannot remove {e}"))
        });
        swept.map_err(|e| {
            let state = State { initialized: false, ..self.state.clone() };
            match (self.store(&state), self.remove()) {
                (_, Ok(())) => format!("{e}; the box was removed (run --init again)"),
                (Ok(()), Err(e2)) => format!("{e}; {e2}; the box is marked uninitialized (run --init or --cleanup)"),
                (Err(e1), Err(e2)) => format!("{e}; {e1}; {e2}"),
            }
        })
    }
}

impl BoxDir {
    /// Subordinate-id mode: `box/` and the `tmp` rules' directories, all
    /// they hold, handed to the box's uid and gid (`to_box`) or back to the
    /// caller, as isolate's `chowntree` does, by a helper that is root in
    /// `ns` (it maps the caller to 0, the box's ids to 1). The walk goes by
    /// descriptor and follows no link (a link itself changes owner); the
    /// state records the hand-over first and forgets it once undone.
    pub fn chown_tree(&self, ns: &capsule::host::subids::Namespace, to_box: bool) -> Result<(), String> {
        let mut state = self.state.clone();
        if to_box {
            state.boxed = Some((ns.ids.uid, ns.ids.gid));
            self.store(&state)?;
        }
        let id = u32::from(to_box);
        ns.run(|| {
            let dir = self.open_dir()?;
            for name in [c"box", c"tmp"] {
                let path = self.dir.join(name.to_str().expect("ASCII"));
                let top = match open_dir(dir.as_raw_fd(), name) {
                    Ok(top) => top,
                    Err(libc::ENOENT) if name == c"tmp" => continue,
                    Err(e) => return Err(not_own(&path, e)),
                };
                sweep(top, Sweep::Chown(id, id), &path).map_err(|e| format!("Cannot change the owner of {e}"))?;
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        if !to_box {
            state.boxed = None;
            self.store(&state)?;
        }
        Ok(())
    }
}

/// The error for a box directory that is not a directory of its own.
fn not_own(p: &Path, e: i32) -> String {
    match e {
        libc::ELOOP | libc::ENOTDIR => {
            format!(
                "{} is not a directory (a link or another file was put in its place): run --init again",
                p.display()
            )
        }
        _ => format!("Cannot open {}: {}", p.display(), strerror(e)),
    }
}

/// Descriptors a sweep keeps open on the way down; directories above them
/// are opened again through `..` on the way up.
const OPEN_DIRS: usize = 32;

/// A directory a sweep is in.
struct Frame {
    fd: Option<OwnedFd>,
    dev: u64,
    ino: u64,
    /// Its name in its parent.
    name: CString,
    /// Its mode as found, when the sweep had to give its owner rwx.
    mode: Option<u32>,
    /// The entries still to look at.
    pending: Vec<CString>,
}

/// Opens the directory `name` in `dir` for reading, never through a link,
/// first giving its owner the rights to list it and to remove in it where
/// the program took them away: (descriptor, lstat, mode as found if changed).
fn open_dir(dir: RawFd, name: &CStr) -> Result<(OwnedFd, libc::stat, Option<u32>), i32> {
    let p = sys::openat(dir, name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)?;
    let st = sys::fstat(p.as_raw_fd())?;
    let mut changed = None;
    if st.st_mode & 0o700 != 0o700 {
        sys::chmod_fd(p.as_raw_fd(), (st.st_mode & 0o7777) | 0o700)?;
        changed = Some(st.st_mode & 0o7777);
    }
    let fd = sys::reopen(p.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
    Ok((fd, st, changed))
}

/// The names in a directory (`.` and `..` left out).
fn list(fd: RawFd) -> Result<Vec<CString>, i32> {
    let mut buf = vec![0u8; 32 << 10];
    let mut names = Vec::new();
    loop {
        let n = sys::getdents64(fd, &mut buf)?;
        if n == 0 {
            return Ok(names);
        }
        for name in sys::dirent_names(&buf[..n]) {
            let name = name?;
            if name != b"." && name != b".." {
                names.push(CString::new(name).map_err(|_| libc::EIO)?);
            }
        }
    }
}

/// What a [`sweep`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Removes everything.
    All,
    /// Removes what is neither a regular file nor a directory.
    Special,
    /// Gives everything, `top` too, this owner (uid, gid).
    Chown(u32, u32),
}

/// Walks the tree of the directory `top` (at `path`, for messages) by
/// descriptor, following no link, doing `what`; puts back the modes it
/// changed (but where it removes). Iterative, with a bounded number of
/// open descriptors, however deep the program made it. Returns how many
/// non-directories were removed.
fn sweep(top: (OwnedFd, libc::stat, Option<u32>), what: Sweep, path: &Path) -> Result<usize, String> {
    let all = what == Sweep::All;
    let (fd, st, mode) = top;
    let pending = list(fd.as_raw_fd()).map_err(|e| format!("{}: {}", path.display(), strerror(e)))?;
    let mut frames =
        vec![Frame { fd: Some(fd), dev: st.st_dev, ino: st.st_ino, name: CString::default(), mode, pending }];
    let at = |frames: &[Frame], name: Option<&CStr>| {
        let mut p = path.to_path_buf();
        for f in &frames[1..] {
            p.push(std::ffi::OsStr::from_bytes(f.name.to_bytes()));
        }
        if let Some(n) = name {
            p.push(std::ffi::OsStr::from_bytes(n.to_bytes()));
        }
        p
    };
    let fail =
        |frames: &[Frame], name: Option<&CStr>, e: i32| format!("{}: {}", at(frames, name).display(), strerror(e));
    let mut removed = 0;
    loop {
        let f = frames.last_mut().expect("the top stays");
        let dir = f.fd.as_ref().expect("the current directory is open").as_raw_fd();
        if let Some(name) = f.pending.pop() {
            let st = match sys::lstat_at(dir, &name) {
                Ok(st) => st,
                Err(libc::ENOENT) => continue,
                Err(e) => return Err(fail(&frames, Some(&name), e)),
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    // An empty directory goes at once; others are walked.
                    if all {
                        match sys::unlinkat(dir, &name, true) {
                            Ok(()) => continue,
                            Err(libc::ENOTEMPTY | libc::EEXIST) => {}
                            Err(e) => return Err(fail(&frames, Some(&name), e)),
                        }
                    }
                    let (fd, st, mode) = open_dir(dir, &name).map_err(|e| fail(&frames, Some(&name), e))?;
                    let pending = list(fd.as_raw_fd()).map_err(|e| fail(&frames, Some(&name), e))?;
                    frames.push(Frame { fd: Some(fd), dev: st.st_dev, ino: st.st_ino, name, mode, pending });
                    let n = frames.len();
                    if n > OPEN_DIRS + 1 {
                        frames[n - OPEN_DIRS - 1].fd = None;
                    }
                }
                _ if matches!(what, Sweep::Chown(..)) => {
                    let Sweep::Chown(uid, gid) = what else { unreachable!() };
                    sys::chown_at(dir, &name, uid, gid).map_err(|e| fail(&frames, Some(&name), e))?;
                }
                libc::S_IFREG if !all => {}
                _ => {
                    sys::unlinkat(dir, &name, false).map_err(|e| fail(&frames, Some(&name), e))?;
                    removed += 1;
                }
            }
            continue;
        }
        // This directory is done.
        let done = frames.pop().expect("the top stays");
        let fd = done.fd.expect("the current directory is open");
        if let (false, Some(m)) = (all, done.mode) {
            sys::chmod_fd(fd.as_raw_fd(), m).map_err(|e| fail(&frames, Some(&done.name), e))?;
        }
        if let Sweep::Chown(uid, gid) = what {
            sys::chown_at(fd.as_raw_fd(), c"", uid, gid).map_err(|e| fail(&frames, Some(&done.name), e))?;
        }
        let Some(parent) = frames.last() else { return Ok(removed) };
        if parent.fd.is_none() {
            let want = (parent.dev, parent.ino);
            let up = sys::openat(fd.as_raw_fd(), c"..", libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
                .map_err(|e| fail(&frames, None, e))?;
            let st = sys::fstat(up.as_raw_fd()).map_err(|e| fail(&frames, None, e))?;
            if (st.st_dev, st.st_ino) != want {
                return Err(fail(&frames, None, libc::ESTALE));
            }
            frames.last_mut().expect("just seen").fd = Some(up);
        }
        if all {
            let parent = frames.last().expect("just seen").fd.as_ref().expect("opened").as_raw_fd();
            sys::unlinkat(parent, &done.name, true).map_err(|e| fail(&frames, Some(&done.name), e))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree deeper than the descriptors a sweep keeps open, with a link
    /// and a FIFO at every level and directories of mode 0311: the special
    /// sweep removes those alone and puts the modes back; the full one
    /// removes the rest.
    #[test]
    fn deep_sweeps() {
        let base = std::env::temp_dir().join(format!("capsule-sweep-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let mut d = base.clone();
        let depth = OPEN_DIRS * 3;
        for i in 0..depth {
            fs::create_dir_all(&d).unwrap();
            std::os::unix::fs::symlink("/etc/passwd", d.join("l")).unwrap();
            assert!(std::process::Command::new("mkfifo").arg(d.join("f")).status().unwrap().success());
            fs::write(d.join("file"), i.to_string()).unwrap();
            d.push("d");
        }
        let top = || {
            let c = CString::new(base.as_os_str().as_encoded_bytes()).unwrap();
            let p = sys::open(&c, libc::O_PATH | libc::O_DIRECTORY, 0).unwrap();
            let st = sys::fstat(p.as_raw_fd()).unwrap();
            (sys::reopen(p.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECTORY).unwrap(), st, None)
        };
        let mut d = base.clone();
        for _ in 1..depth {
            d.push("d");
            fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o311)).unwrap();
        }
        assert_eq!(sweep(top(), Sweep::Special, &base).unwrap(), 2 * depth);
        let mut d = base.clone();
        for i in 0..depth {
            assert!(fs::symlink_metadata(d.join("l")).is_err() && fs::symlink_metadata(d.join("f")).is_err());
            assert_eq!(fs::read_to_string(d.join("file")).unwrap(), i.to_string());
            if i > 0 {
                assert_eq!(fs::symlink_metadata(&d).unwrap().mode() & 0o7777, 0o311);
            }
            d.push("d");
        }
        sweep(top(), Sweep::All, &base).unwrap();
        assert_eq!(fs::read_dir(&base).unwrap().count(), 0);
        fs::remove_dir(&base).unwrap();
    }
}
