//! Seccomp: the hook where the tracee installs its filter, last, right
//! before execve. Filters are compiled once per supervisor; the policies
//! themselves (default, strict, compile, policy files) are a later issue,
//! until then a run installs no filter.

use crate::sys::{self, Errno};

/// A compiled classic-BPF program.
#[derive(Clone, Default)]
pub struct Filter {
    pub(crate) program: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions)", self.program.len())
    }
}

/// Installs `filter` on the calling thread (child side; `no_new_privs` set).
pub(crate) fn install(filter: &[libc::sock_filter]) -> Result<(), Errno> {
    if filter.is_empty() {
        return Ok(());
    }
    sys::seccomp_install(filter)
}
