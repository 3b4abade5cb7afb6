//! What no run of a layer could change: the paths hidden or read-only in
//! a run (the secrets, `--read-only`, `hide`), which the supervisor writes
//! to `DIR/protected` before each run, outside `upper/` (no run sees it).
//! Commit refuses, even with `--force`, an entry at or below such a path
//! and a deletion or replacement of a directory holding one, whatever the
//! upper tree says: a crafted layer, or a marker misread, cannot reach
//! them.
//!
//! ```json
//! {"version": 1, "runs": [{"protected": ["/home/me/.ssh"], "open": []}]}
//! ```
//! One entry per distinct set of rules (most runs of a layer share one);
//! `open` are the paths shown again, writable, below a hidden one. A path
//! is protected when, in some recorded run, the nearest of these paths at
//! or above it is a protected one. Paths are encoded like `layer.json`'s
//! keys; only paths that existed when the run started are recorded (a
//! missing secret is not hidden, and the run may create it), except the
//! `guard` paths, recorded whether or not they exist (a missing one had a
//! read-only stand-in: no run could create it).

use serde::{Deserialize, Serialize};

use super::meta::{decode_bytes, encode};
use super::node::Node;
use super::scan::{Item, Upper};
use super::{host_path, is_at_or_below, quote_path};
use crate::host::fsrules::Action;
use crate::proto::spec::{MountOp, RunSpec};

/// The file, in the layer directory.
pub const GUARD_FILE: &str = "protected";
/// Most distinct rule sets kept (the oldest go first).
const MAX_RUNS: usize = 64;

/// The rules of one run, as absolute paths encoded like `layer.json`'s keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRules {
    #[serde(default)]
    pub protected: Vec<String>,
    #[serde(default)]
    pub open: Vec<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GuardFile {
    pub version: u32,
    #[serde(default)]
    pub runs: Vec<RunRules>,
}

fn push_path(out: &mut Vec<String>, p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    // Missing: not covered in the run. A link on the way: the layer
    // mirrors the real path.
    if std::fs::symlink_metadata(p).is_err() {
        return;
    }
    out.push(encode(p.as_os_str().as_bytes()));
    if let Ok(real) = std::fs::canonicalize(p) {
        if real != p {
            out.push(encode(real.as_os_str().as_bytes()));
        }
    }
}

/// The rules of a run of `spec` (as the supervisor plans its filesystem).
pub(crate) fn rules_of(spec: &RunSpec) -> Result<RunRules, String> {
    let homes = crate::host::fsrules::caller_homes(crate::sys::geteuid());
    let actions = crate::host::fsrules::plan(&spec.filesystem, &homes, spec.empty_root).map_err(|e| e.to_string())?;
    let mut r = RunRules::default();
    for a in actions.iter() {
        match a {
            Action::Hide { path, .. } | Action::Reveal { path, read_only: true, .. } => {
                push_path(&mut r.protected, path)
            }
            Action::Reveal { path, read_only: false, .. } => push_path(&mut r.open, path),
            Action::StandIn { path, .. } => {
                use std::os::unix::ffi::OsStrExt;
                // Missing or not: no run could create or change it.
                r.protected.push(encode(path.as_os_str().as_bytes()));
                push_path(&mut r.protected, path);
            }
            _ => {}
        }
    }
    for m in &spec.mounts {
        if let MountOp::Hide { path } = m {
            push_path(&mut r.protected, path);
        }
    }
    r.protected.sort();
    r.protected.dedup();
    r.open.sort();
    r.open.dedup();
    Ok(r)
}

impl GuardFile {
    /// Adds `rules` unless an equal set is there; false when nothing changed.
    pub fn add(&mut self, rules: RunRules) -> bool {
        if self.runs.contains(&rules) {
            return false;
        }
        self.runs.push(rules);
        if self.runs.len() > MAX_RUNS {
            self.runs.remove(0);
        }
        true
    }
}

/// Paths relative to `/` (no leading slash).
type Rels = Vec<Vec<u8>>;

/// The decoded rules: (protected, open) per run.
#[derive(Debug, Default)]
pub struct Guard {
    runs: Vec<(Rels, Rels)>,
}

fn rel_of(s: &str) -> Option<Vec<u8>> {
    let b = decode_bytes(s)?;
    let p = host_path(b.strip_prefix(b"/")?);
    super::meta::is_normalized_abs(&p).then(|| b[1..].to_vec())
}

impl Guard {
    pub fn from_file(f: &GuardFile) -> Result<Guard, String> {
        let mut runs = Vec::new();
        for r in &f.runs {
            let conv = |v: &[String]| -> Result<Rels, String> {
                v.iter().map(|s| rel_of(s).ok_or_else(|| format!("`{s}` is not a normalized absolute path"))).collect()
            };
            runs.push((conv(&r.protected)?, conv(&r.open)?));
        }
        Ok(Guard { runs })
    }

    /// Why committing `item` could change what no run could, if it could.
    pub fn refusal(&self, item: &Item) -> Option<String> {
        let p = &item.rel[..];
        // Deleting or replacing a host directory removes what is in it.
        let removes_below =
            matches!(item.host, Node::Dir { .. }) && !matches!(item.upper, Upper::Entry(Node::Dir { .. }));
        for (protected, open) in &self.runs {
            let nearest = protected
                .iter()
                .map(|r| (r, true))
                .chain(open.iter().map(|r| (r, false)))
                .filter(|(r, _)| is_at_or_below(p, r))
                .max_by_key(|(r, _)| r.len());
            if let Some((r, true)) = nearest {
                return Some(format!(
                    "{} was hidden or read-only in a run of this layer, so no run could change it; capsule does not commit it, even with --force",
                    quote_path(&host_path(r))
                ));
            }
            if removes_below {
                if let Some(q) = protected.iter().find(|q| q.as_slice() != p && is_at_or_below(q, p)) {
                    return Some(format!(
                        "it would delete {}, which was hidden or read-only in a run of this layer (no run could change it); capsule does not commit it, even with --force",
                        quote_path(&host_path(q))
                    ));
                }
            }
        }
        None
    }
}
