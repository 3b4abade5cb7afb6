//! The compiled seccomp filters, cached per policy, guards and network log, in sealed memfds.

use std::rc::Rc;

use crate::child::SealedFilter;
use crate::error::SysError;
use crate::plan::seccomp::{Filter, Guards};
use crate::proto::policy::PolicyName;
use crate::proto::spec::RunSpec;
use crate::sys::{self};

/// The seccomp filters of a supervisor: each policy is compiled once (a
/// policy file again only when it changed) into a sealed memfd that the
/// supervisor maps read-only; every PID 1 created after that sees the
/// mapping, and its tracee installs the filter straight from it: no copy
/// per run, and the request carries only the policy's name
/// (docs/seccomp.md).
#[derive(Default)]
pub(crate) struct Filters {
    pub(crate) compiled: Vec<(FilterKey, Option<FileStamp>, Rc<SealedFilter>)>,
}

/// Policy, the run's guards, what the filter watches ([`watch`]).
pub(crate) type FilterKey = (PolicyName, Guards, u8);

/// What identifies a version of a policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

impl Filters {
    /// The filter of `spec`'s policy with its guards (`seccomp::with_guards`)
    /// and, when `net_log`, the network log (`seccomp::with_net_log`),
    /// compiled on first use.
    pub(crate) fn get(&mut self, spec: &RunSpec) -> Result<Rc<SealedFilter>, String> {
        let (name, guards) = (&spec.seccomp, Guards::of(spec));
        let stamp = Self::stamp(name)?;
        match self.find(name, guards, watch(spec), stamp) {
            Some(f) => Ok(f),
            None => self.compile(name, guards, watch(spec), stamp),
        }
    }

    /// The filter of `spec` if it is compiled already (and, for a policy
    /// file, the file has not changed since).
    pub(crate) fn compiled(&self, spec: &RunSpec) -> Result<Option<Rc<SealedFilter>>, String> {
        Ok(self.find(&spec.seccomp, Guards::of(spec), watch(spec), Self::stamp(&spec.seccomp)?))
    }

    pub(crate) fn find(
        &self,
        name: &PolicyName,
        guards: Guards,
        net_log: u8,
        stamp: Option<FileStamp>,
    ) -> Option<Rc<SealedFilter>> {
        self.compiled
            .iter()
            .find(|((n, g, l), s, _)| n == name && *g == guards && *l == net_log && *s == stamp)
            .map(|c| c.2.clone())
    }

    /// What identifies the version of a policy file (None: a built-in).
    pub(crate) fn stamp(name: &PolicyName) -> Result<Option<FileStamp>, String> {
        Ok(match name {
            PolicyName::File(path) => {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::metadata(path).map_err(|e| format!("seccomp policy file {}: {e}", path.display()))?;
                Some(FileStamp {
                    dev: m.dev(),
                    ino: m.ino(),
                    size: m.size(),
                    mtime: (m.mtime(), m.mtime_nsec()),
                    ctime: (m.ctime(), m.ctime_nsec()),
                })
            }
            _ => None,
        })
    }

    /// Compiles policy `name` (replacing an older version of its file).
    pub(crate) fn compile(
        &mut self,
        name: &PolicyName,
        guards: Guards,
        net_log: u8,
        stamp: Option<FileStamp>,
    ) -> Result<Rc<SealedFilter>, String> {
        let mut filter: Filter = crate::plan::seccomp::compile(name).map_err(|e| e.to_string())?;
        filter =
            crate::plan::seccomp::with_guards(&filter, guards).map_err(|e| format!("seccomp policy {name}: {e}"))?;
        if net_log > 0 {
            filter = crate::plan::seccomp::with_watch(&filter, net_log > 1)
                .map_err(|e| format!("seccomp policy {name}: {e}"))?;
        }
        let map = sys::SealedMap::new(c"capsule-seccomp", &filter.program)
            .map_err(|e| SysError::new("memfd_create (seccomp filter)", e).to_string())?;
        // A changed file replaces its old version (runs prepared with the
        // old one are no longer used: see `start`).
        self.compiled.retain(|((n, g, l), _, _)| !(n == name && *g == guards && *l == net_log));
        let early = crate::plan::seccomp::allows_tracee_epilogue(&filter.program);
        let inherit = !filter.notify && crate::plan::seccomp::allows_child_path(&filter.program);
        let sealed =
            Rc::new(SealedFilter { map, notify: filter.notify, net_log_from: filter.net_log_from, early, inherit });
        self.compiled.push(((name.clone(), guards, net_log), stamp, sealed.clone()));
        Ok(sealed)
    }
}

/// What a run's filter sends to PID 1 besides the policy's `kill`: 0
/// nothing, 1 the network log, 2 the network log and `explain`'s file
/// calls.
pub(crate) fn watch(spec: &RunSpec) -> u8 {
    if spec.explain {
        2
    } else {
        u8::from(spec.logs_net())
    }
}
