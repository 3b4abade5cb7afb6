//! Unique names and per-test directories owned by the capsule user.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use crate::harness::h;
use crate::SCRATCH_ROOT;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{tag}-{}-{}-{nanos:x}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A per-test directory under /var/tmp owned by the capsule user (mode
/// 0755), removed on drop.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let path = Path::new(SCRATCH_ROOT).join(unique(tag));
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_user(&path);
        Scratch { path }
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    pub fn s(&self) -> String {
        self.path.display().to_string()
    }

    /// Writes a file owned by the capsule user.
    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, content).unwrap();
        chown_to_user(&p);
        p
    }

    /// Creates a subdirectory owned by the capsule user.
    pub fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_to_user(&p);
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

pub fn chown_to_user(p: &Path) {
    if h().is_root {
        std::os::unix::fs::chown(p, Some(h().uid), Some(h().gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
    }
}
