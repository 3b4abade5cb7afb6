//! Boxes: a per-user root directory holding `<id>/` (the box directory,
//! with `box/` the program's working directory) and `<id>.lock` (isolate's
//! lock file: held while a command works on the box, truncated, never
//! removed, at cleanup).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Environment variable naming the box root.
pub const ROOT_ENV: &str = "CAPSULE_ISOLATE_ROOT";

/// `io::Error` as `%m` prints it.
pub fn io_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => super::rules::errno_text(n),
        None => e.to_string(),
    }
}

/// The box root: `$CAPSULE_ISOLATE_ROOT`, else `$XDG_RUNTIME_DIR/capsule-isolate`,
/// else `/tmp/capsule-isolate-UID`; created with mode 0700, and it must be
/// a directory of the caller's (not a link) that no one else may write.
pub fn root() -> Result<PathBuf, String> {
    let uid = capsule::sys::geteuid();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| {
        p.is_absolute() && fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    });
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
    match fs::DirBuilder::new().mode(0o700).create(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("Cannot create box root {}: {}", root.display(), io_text(&e))),
    }
    let m = fs::symlink_metadata(&root).map_err(|e| format!("Cannot stat {}: {}", root.display(), io_text(&e)))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(format!(
            "Box root {} must be a directory owned by uid {uid} that no one else may write (not a link); set {ROOT_ENV} to another",
            root.display()
        ));
    }
    Ok(root)
}

/// A box and its held lock.
pub struct BoxDir {
    pub dir: PathBuf,
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
        t
    }
}

/// isolate's `lock_box`: None when the box has no lock file (or an empty
/// one, outside `--init`). Dies as isolate does on a busy box, a box in the
/// other control group mode or an unfinished `--init`.
pub fn lock(root: &Path, id: u32, init: bool, cleanup: bool, cg: bool, wait: bool) -> Result<Option<BoxDir>, String> {
    let name = root.join(format!("{id}.lock"));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(init)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&name);
    let mut f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("Cannot open {}: {}", name.display(), io_text(&e))),
    };
    let locked =
        if wait { capsule::sys::flock_exclusive(f.as_raw_fd()) } else { capsule::sys::flock_nb(f.as_raw_fd(), true) };
    match locked {
        Ok(()) => {}
        Err(libc::EWOULDBLOCK) => return Err("This box is currently in use by another process".into()),
        Err(e) => return Err(format!("Cannot lock {}: {}", name.display(), super::rules::errno_text(e))),
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| format!("Cannot read {}: {}", name.display(), io_text(&e)))?;
    let dir = root.join(id.to_string());
    if text.is_empty() {
        if init {
            return Ok(Some(BoxDir { dir, lock: f, state: State { cg, ..State::default() } }));
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
    Ok(Some(BoxDir { dir, lock: f, state: if init { State { cg, ..State::default() } } else { state } }))
}

impl BoxDir {
    /// Records the state in the lock file.
    pub fn write_state(&mut self) -> Result<(), String> {
        let t = self.state.text();
        let r = self.lock.set_len(0).and_then(|_| self.lock.rewind()).and_then(|_| self.lock.write_all(t.as_bytes()));
        r.map_err(|e| format!("Cannot write lock file: {}", io_text(&e)))
    }

    /// `--init`: a fresh box directory with an empty `box/`.
    pub fn init(&mut self, quota: Option<(u64, u64)>) -> Result<(), String> {
        self.state.initialized = false;
        self.write_state()?;
        self.remove()?;
        for d in [self.dir.clone(), self.dir.join("box")] {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .map_err(|e| format!("Cannot create {}: {}", d.display(), io_text(&e)))?;
        }
        self.state.quota = quota;
        self.state.initialized = true;
        self.write_state()
    }

    /// Removes the box directory (if any).
    pub fn remove(&self) -> Result<(), String> {
        match fs::symlink_metadata(&self.dir) {
            Err(_) => Ok(()),
            Ok(_) => remove_tree(&self.dir).map_err(|e| format!("Cannot remove {}: {e}", self.dir.display())),
        }
    }

    /// `--cleanup`: the directory removed, the lock file emptied.
    pub fn cleanup(self) -> Result<(), String> {
        self.remove()?;
        self.lock.set_len(0).map_err(|e| format!("Cannot truncate lock file: {}", io_text(&e)))
    }
}

/// Removes a tree without following links, making directories the program
/// left unreadable or unwritable (mode 000) removable first.
pub fn remove_tree(path: &Path) -> Result<(), String> {
    let m = fs::symlink_metadata(path).map_err(|e| format!("{}: {}", path.display(), io_text(&e)))?;
    if !m.is_dir() {
        return fs::remove_file(path).map_err(|e| format!("{}: {}", path.display(), io_text(&e)));
    }
    if m.mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {}", path.display(), io_text(&e)))?;
    }
    let entries = fs::read_dir(path).map_err(|e| format!("{}: {}", path.display(), io_text(&e)))?;
    for e in entries {
        let e = e.map_err(|e| format!("{}: {}", path.display(), io_text(&e)))?;
        remove_tree(&e.path())?;
    }
    fs::remove_dir(path).map_err(|e| format!("{}: {}", path.display(), io_text(&e)))
}

/// After a run, without `--special-files`: removes what the program left
/// in `dir` that is neither a regular file nor a directory (links, FIFOs,
/// sockets), as isolate does, so that the caller never follows a link the
/// program made. Returns how many were removed.
pub fn remove_special(dir: &Path) -> Result<usize, String> {
    let mut n = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return Err(format!("Cannot read {}: {}", dir.display(), io_text(&e))),
    };
    for e in entries {
        let e = e.map_err(|e| format!("Cannot read {}: {}", dir.display(), io_text(&e)))?;
        let path = e.path();
        let t = e.file_type().map_err(|e| format!("Cannot stat {}: {}", path.display(), io_text(&e)))?;
        if t.is_dir() {
            if fs::symlink_metadata(&path).is_ok_and(|m| m.mode() & 0o500 == 0o500) {
                n += remove_special(&path)?;
            }
        } else if !t.is_file() {
            fs::remove_file(&path).map_err(|e| format!("Cannot remove {}: {}", path.display(), io_text(&e)))?;
            n += 1;
        }
    }
    Ok(n)
}
