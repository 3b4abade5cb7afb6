//! The program as "others" (permission-bit mode). isolate runs a box's
//! program as a uid of its own: `box/` and the `tmp` rules' directories
//! are chowned to it for the run, everything else a rule binds is someone
//! else's, so there the permission bits for others decide what the program
//! may do (CMS's home, bound read-write over `/tmp`, relies on it: 0755
//! with only the output files 0722). capsule isolate runs the program as
//! the caller, the owner of those files, so each read-write rule outside
//! the box becomes mounts saying what the bits say, decided by descriptor
//! (links are never followed, nothing is looked up twice):
//!
//! - a directory others may write and search: read-write (create, remove,
//!   rename in it); one they may search only: read-only; one they may not
//!   search: covered by an empty read-only directory;
//! - a file others may write: read-write; one they may read or execute:
//!   read-only; one they may do nothing with: covered by an empty file;
//! - a mount only where an entry differs from its directory, and on every
//!   entry of a sticky directory (others may not remove them there).
//!
//! The stdio files capsule isolate opens for the program (`-i`, `-o`,
//! `-r`) in such a rule are checked with the same bits (isolate opens them
//! as the box's uid).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use capsule::error::strerror;
use capsule::spec::MountOp;

/// The meta file's key saying how the box's files were protected
/// (capsule's own: isolate's meta file has no such field).
pub const META_KEY: &str = "capsule-box-mode";

/// Its value: the program runs as the caller; others' permission bits
/// are enforced by mounts.
pub const MODE: &str = "permission-bits";

/// Its value in subordinate-id mode: the program runs as a uid of the
/// box's own, and the kernel enforces the bits.
pub const SUBORDINATE_MODE: &str = "subordinate-ids";

/// Mount operations one run may get from the bits, at most (each is a
/// mount in the run's namespace).
const MAX_OPS: usize = 1024;

/// Entries walked per run, at most (the walk is paid by every run).
const MAX_ENTRIES: usize = 100_000;

/// What others may do with an entry, as far as mounts can say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadWrite,
    ReadOnly,
    Hidden,
}

/// A directory's access for others: `x` to reach inside, `w` to change it.
pub fn dir_access(mode: u32) -> Access {
    match (mode & 0o001 != 0, mode & 0o002 != 0) {
        (false, _) => Access::Hidden,
        (true, true) => Access::ReadWrite,
        (true, false) => Access::ReadOnly,
    }
}

/// A file's access for others: `w` to write; `r` or `x` to read or run.
pub fn file_access(mode: u32) -> Access {
    if mode & 0o002 != 0 {
        Access::ReadWrite
    } else if mode & 0o005 != 0 {
        Access::ReadOnly
    } else {
        Access::Hidden
    }
}

/// A rule's directory that isolate gives the box's uid: `./box` and what
/// is under it, the `tmp` rules' `./tmp/...` (no `..` on the way).
fn boxs_own(src: &Path, box_dir: &Path) -> bool {
    if src.components().any(|c| c == Component::ParentDir) {
        return false;
    }
    src.starts_with(box_dir.join("box")) || src.starts_with(box_dir.join("tmp"))
}

/// What [`check_stdio`] needs: where every rule is inside, and for the
/// rules whose bits became mounts, their directory on the host.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    dsts: Vec<PathBuf>,
    guarded: Vec<(PathBuf, PathBuf)>,
}

/// The run's mounts with each read-write bind outside the box replaced by
/// what others' bits allow; the [`Guard`] for the stdio files. `say` gets
/// verbose lines.
pub fn refine(ops: Vec<MountOp>, box_dir: &Path, say: &mut dyn FnMut(String)) -> Result<(Vec<MountOp>, Guard), String> {
    let mut w = Walk { out: Vec::new(), added: 0, entries: 0 };
    let mut guard = Guard { dsts: ops.iter().map(|o| o.dst().to_path_buf()).collect(), guarded: Vec::new() };
    for op in ops {
        match op {
            MountOp::Bind { src, dst, try_: false, noexec } if !boxs_own(&src, box_dir) => {
                let before = w.out.len();
                w.rule(&src, &dst, noexec)?;
                say(format!(
                    "Permission bits of {} for others: {} mount{}",
                    src.display(),
                    w.out.len() - before,
                    if w.out.len() - before == 1 { "" } else { "s" }
                ));
                guard.guarded.push((dst, src));
            }
            other => w.out.push(other),
        }
    }
    Ok((w.out, guard))
}

/// The [`Guard`] alone (subordinate-id mode: the kernel enforces the bits
/// for the program, `check_stdio` for the files opened for it).
pub fn guard(ops: &[MountOp], box_dir: &Path) -> Guard {
    let guarded = ops
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind { src, dst, try_: false, .. } if !boxs_own(src, box_dir) => Some((dst.clone(), src.clone())),
            _ => None,
        })
        .collect();
    Guard { dsts: ops.iter().map(|o| o.dst().to_path_buf()).collect(), guarded }
}

struct Walk {
    out: Vec<MountOp>,
    /// Operations beyond one per rule.
    added: usize,
    entries: usize,
}

fn cpath(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: a NUL in the path", p.display()))
}

fn sys_err(what: &str, p: &Path, e: i32) -> String {
    format!("{what} {}: {} (capsule isolate reads the permission bits of read-write rules)", p.display(), strerror(e))
}

impl Walk {
    /// One rule's directory (or file).
    fn rule(&mut self, src: &Path, dst: &Path, noexec: bool) -> Result<(), String> {
        // The path as the caller gave it; the supervisor resolves it again, refusing links of the caller's.
        let fd = capsule::sys::open(&cpath(src)?, libc::O_PATH, 0).map_err(|e| sys_err("open", src, e))?;
        let st = capsule::sys::fstat(fd.as_raw_fd()).map_err(|e| sys_err("stat", src, e))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            let a = file_access(st.st_mode);
            self.emit(src, dst, a, noexec, true);
            return Ok(());
        }
        let dir = capsule::sys::openat(fd.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| sys_err("open", src, e))?;
        let a = dir_access(st.st_mode);
        self.emit(src, dst, a, noexec, true);
        if a != Access::Hidden {
            self.dir(&dir, st.st_mode, src, dst, a, noexec)?;
        }
        Ok(())
    }

    /// A mount saying `a` for the entry `src` at `dst`; `root`: a rule's
    /// own directory, which is not in the sandbox yet.
    fn emit(&mut self, src: &Path, dst: &Path, a: Access, noexec: bool, root: bool) {
        let (src, dst) = (src.to_path_buf(), dst.to_path_buf());
        match a {
            Access::ReadWrite => self.out.push(MountOp::Bind { src, dst, try_: false, noexec }),
            Access::ReadOnly => self.out.push(MountOp::RoBind { src, dst, try_: false, noexec }),
            Access::Hidden => {
                if root {
                    // A cover needs something to cover.
                    self.out.push(MountOp::RoBind { src, dst: dst.clone(), try_: false, noexec });
                }
                self.out.push(MountOp::Hide { path: dst });
            }
        }
    }

    /// The entries of a directory others may reach, whose access is `here`.
    fn dir(
        &mut self,
        dir: &OwnedFd,
        mode: u32,
        src: &Path,
        dst: &Path,
        here: Access,
        noexec: bool,
    ) -> Result<(), String> {
        // Others may remove nothing of someone else's in a sticky directory: every entry is pinned by a mount.
        let sticky = here == Access::ReadWrite && mode & libc::S_ISVTX != 0;
        for name in names(dir.as_raw_fd()).map_err(|e| sys_err("list", src, e))? {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(format!(
                    "{} has more than {MAX_ENTRIES} entries: capsule isolate reads the permission bits of a \
                     read-write rule's whole tree before each run; bind a smaller directory",
                    src.display()
                ));
            }
            let (s, d) = (
                src.join(std::ffi::OsStr::from_bytes(name.as_bytes())),
                dst.join(std::ffi::OsStr::from_bytes(name.as_bytes())),
            );
            let Ok(e) = capsule::sys::openat(dir.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0) else {
                continue; // gone since listed
            };
            let st = capsule::sys::fstat(e.as_raw_fd()).map_err(|e| sys_err("stat", &s, e))?;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    let a = dir_access(st.st_mode);
                    if a != here || sticky {
                        self.more(&s, &d, a, noexec)?;
                    }
                    if a == Access::Hidden {
                        continue;
                    }
                    match capsule::sys::openat(e.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                        Ok(sub) => self.dir(&sub, st.st_mode, &s, &d, a, noexec)?,
                        // The caller cannot list it (its own mode): nothing in it is writable then.
                        Err(_) if a == Access::ReadWrite => self.more(&s, &d, Access::ReadOnly, noexec)?,
                        Err(_) => {}
                    }
                }
                libc::S_IFREG => {
                    let a = file_access(st.st_mode);
                    if a != here || sticky {
                        self.more(&s, &d, a, noexec)?;
                    }
                }
                // Links are not followed (in the sandbox they lead within it); FIFOs, sockets and device
                // nodes hold no data on the disk.
                _ => {}
            }
        }
        Ok(())
    }

    /// [`Walk::emit`] for an entry below a rule's directory, counted.
    fn more(&mut self, src: &Path, dst: &Path, a: Access, noexec: bool) -> Result<(), String> {
        self.added += 1;
        if self.added > MAX_OPS {
            return Err(format!(
                "more than {MAX_OPS} entries under read-write rules differ from their directory in the permission \
                 bits for others (the last: {}): capsule isolate makes a mount of each; give the files the same \
                 bits as their directory, or bind fewer",
                src.display()
            ));
        }
        self.emit(src, dst, a, noexec, false);
        Ok(())
    }
}

/// A directory's entry names, but `.` and `..`.
fn names(dir: RawFd) -> Result<Vec<CString>, i32> {
    let mut buf = vec![0u8; 32 << 10];
    let mut out = Vec::new();
    loop {
        let n = capsule::sys::getdents64(dir, &mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        for name in capsule::sys::dirent_names(&buf[..n]) {
            let name = name?;
            if name != b"." && name != b".." {
                out.push(CString::new(name).map_err(|_| libc::EIO)?);
            }
        }
    }
}

/// Whether the program, as others, could open `path` (as the sandbox sees
/// it: relative to `/box`) the way capsule isolate is about to open it for
/// its stdio: checked in the guarded rule that holds it, component by
/// component, without following links. Paths in no guarded rule pass.
pub fn check_stdio(guard: &Guard, path: &str, write: bool) -> Result<(), String> {
    let fail = |why: &str| Err(format!("open(\"{path}\"): {why}"));
    let inside = if path.starts_with('/') { PathBuf::from(path) } else { Path::new("/box").join(path) };
    let inside: PathBuf = inside.components().filter(|c| *c != Component::CurDir).collect();
    // The rule holding it: the deepest of the run's operations whose place is a prefix of it.
    let deepest = guard.dsts.iter().filter(|d| inside.starts_with(d)).max_by_key(|d| d.components().count());
    let Some((dst, src)) = deepest.and_then(|d| guard.guarded.iter().find(|g| &g.0 == d)) else { return Ok(()) };
    let rest: Vec<&std::ffi::OsStr> = inside.strip_prefix(dst).expect("a prefix").iter().collect();
    let denied = "Permission denied (the permission bits for others, which capsule isolate enforces)";
    let mut dir = capsule::sys::open(&cpath(src)?, libc::O_PATH | libc::O_DIRECTORY, 0).map_err(strerror)?;
    let mut mode = capsule::sys::fstat(dir.as_raw_fd()).map_err(strerror)?.st_mode;
    for (i, name) in rest.iter().enumerate() {
        if mode & 0o001 == 0 {
            return fail(denied);
        }
        let last = i + 1 == rest.len();
        let c = CString::new(name.as_bytes()).map_err(|_| format!("open(\"{path}\"): Invalid argument"))?;
        let e = match capsule::sys::openat(dir.as_raw_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(e) => e,
            // A new file: others must be able to write its directory.
            Err(libc::ENOENT) if last && write => return if mode & 0o002 == 0 { fail(denied) } else { Ok(()) },
            Err(e) => return fail(&strerror(e)),
        };
        let st = capsule::sys::fstat(e.as_raw_fd()).map_err(strerror)?;
        let t = st.st_mode & libc::S_IFMT;
        if t == libc::S_IFLNK {
            return fail("a link in a read-write rule whose permission bits capsule isolate enforces, not followed");
        }
        if last {
            let bit = if write { 0o002 } else { 0o004 };
            return if st.st_mode & bit == 0 { fail(denied) } else { Ok(()) };
        }
        (dir, mode) = (e, st.st_mode);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_bits() {
        // CMS: allow_writing_none (0755), allow_writing_only's files (0722), allow_writing_all (0777).
        assert_eq!(dir_access(0o755), Access::ReadOnly);
        assert_eq!(dir_access(0o777), Access::ReadWrite);
        assert_eq!(dir_access(0o1777), Access::ReadWrite);
        assert_eq!(dir_access(0o700), Access::Hidden);
        assert_eq!(dir_access(0o776), Access::Hidden);
        assert_eq!(file_access(0o755), Access::ReadOnly);
        assert_eq!(file_access(0o722), Access::ReadWrite);
        assert_eq!(file_access(0o711), Access::ReadOnly);
        assert_eq!(file_access(0o600), Access::Hidden);
    }

    #[test]
    fn the_box_and_tmp_rules_are_the_programs() {
        let b = Path::new("/r/3");
        assert!(boxs_own(Path::new("/r/3/box"), b));
        assert!(boxs_own(Path::new("/r/3/box/sub"), b));
        assert!(boxs_own(Path::new("/r/3/tmp/dev:shm"), b));
        assert!(!boxs_own(Path::new("/r/3/boxes"), b));
        assert!(!boxs_own(Path::new("/r/3/box/../../x"), b));
        assert!(!boxs_own(Path::new("/home/cms/home"), b));
    }
}
