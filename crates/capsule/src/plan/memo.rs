//! The last mount plan a supervisor made, kept for the next run whose spec
//! asks for the same tree: a served run of the same shape then checks the
//! plan's sources against the host (as a PID 1 prepared ahead is checked
//! before use) instead of planning the filesystem rules and looking up
//! every default secret again (docs/latency.md, "The plan kept").
//!
//! Only plans that hold no descriptor are kept (no bind or `file` source,
//! no layer, no fuse-overlayfs root): a copy is then the same operations
//! with fresh per-run cells.

use std::cell::Cell;
use std::rc::Rc;

use super::mounts::{sources_unchanged, Base, MountPlan, Op, PlanError};
use crate::proto::spec::{Filesystem, MountOp, RunSpec};

/// What of a spec [`MountPlan::prepare`] reads (with the supervisor's
/// homes and euid, which do not change).
#[derive(PartialEq)]
struct Key {
    mounts: Vec<MountOp>,
    filesystem: Filesystem,
    empty_root: bool,
    tmp_size: Option<u64>,
    share_net: bool,
    /// A `guard`'s stand-in is made only in a layer.
    layered: bool,
}

impl Key {
    fn of(spec: &RunSpec) -> Key {
        Key {
            mounts: spec.mounts.clone(),
            filesystem: spec.filesystem.clone(),
            empty_root: spec.empty_root,
            tmp_size: spec.tmp_size,
            share_net: spec.share_net,
            layered: !spec.layers.is_empty(),
        }
    }

    fn matches(&self, spec: &RunSpec) -> bool {
        self.mounts == spec.mounts
            && self.filesystem == spec.filesystem
            && self.empty_root == spec.empty_root
            && self.tmp_size == spec.tmp_size
            && self.share_net == spec.share_net
            && self.layered != spec.layers.is_empty()
    }
}

/// A kept plan, the names its operations index, and its spec's [`Key`].
pub(crate) struct PlanMemo {
    key: Key,
    plan: MountPlan,
    names: Vec<String>,
}

impl PlanMemo {
    /// Keeps `plan` (as [`MountPlan::prepare`] made it for `spec`, before
    /// any per-run addition) when it holds no descriptor.
    pub(crate) fn keep(spec: &RunSpec, plan: &MountPlan, names: &[String]) -> Option<PlanMemo> {
        Some(PlanMemo { key: Key::of(spec), plan: copy(plan)?, names: names.to_vec() })
    }

    /// Whether `spec` asks for the tree this plan was made for.
    pub(crate) fn same_tree(&self, spec: &RunSpec) -> bool {
        self.key.matches(spec)
    }

    /// A copy of the kept plan for a run of `spec`, and its names, when the
    /// spec asks for the same tree and the plan still holds ([`Self::holds`]).
    #[cfg(test)]
    fn reuse(&self, spec: &RunSpec, me: u32) -> Option<(MountPlan, Vec<String>)> {
        self.same_tree(spec).then(|| self.holds(me)).flatten()
    }

    /// A copy of the kept plan and its names when every source still
    /// resolves to what it did (`sources_unchanged`, `me` as in
    /// [`MountPlan::prepare`]) and every missing path is vouched for by a
    /// directory that can (one that could not is given the chance again by
    /// a new plan).
    fn holds(&self, me: u32) -> Option<(MountPlan, Vec<String>)> {
        if !self.plan.parents.iter().all(|p| p.vouches()) {
            return None;
        }
        if !sources_unchanged(&self.plan.sources, &self.plan.parents, me) {
            return None;
        }
        Some((copy(&self.plan)?, self.names.clone()))
    }
}

/// A supervisor's kept plans, one per tree, the oldest dropped past
/// [`PlanMemos::MAX`].
#[derive(Default)]
pub(crate) struct PlanMemos(Vec<PlanMemo>);

impl PlanMemos {
    /// A judge alternates a few trees: compile, run, check.
    const MAX: usize = 4;

    /// The mount plan for a run of `spec` and its names: a kept plan's copy
    /// when it still holds, else `make`'s (given the names to fill), kept
    /// in its tree's place when it holds no descriptor.
    pub(crate) fn plan(
        &mut self,
        spec: &RunSpec,
        me: u32,
        make: impl FnOnce(&mut Vec<String>) -> Result<MountPlan, PlanError>,
    ) -> Result<(MountPlan, Vec<String>), PlanError> {
        let kept = self.0.iter().position(|m| m.same_tree(spec));
        if let Some(reused) = kept.and_then(|i| self.0[i].holds(me)) {
            return Ok(reused);
        }
        let mut names = vec![String::new(), String::new()];
        let plan = make(&mut names)?;
        if let Some(memo) = PlanMemo::keep(spec, &plan, &names) {
            match kept {
                Some(i) => self.0[i] = memo,
                None => {
                    if self.0.len() == Self::MAX {
                        self.0.remove(0);
                    }
                    self.0.push(memo);
                }
            }
        }
        Ok((plan, names))
    }
}

/// `plan` again with fresh per-run cells; None when it holds a descriptor
/// (or a fuse-overlayfs root, whose pointers are into its own arguments).
fn copy(plan: &MountPlan) -> Option<MountPlan> {
    let base = match &plan.base {
        Base::HostView => Base::HostView,
        Base::EmptyRoot { size } => Base::EmptyRoot { size: size.clone() },
        Base::Fuse { .. } => return None,
    };
    if plan.stage.is_some() {
        return None;
    }
    let fresh = || Cell::new(-1);
    let ops = plan
        .ops
        .iter()
        .map(|op| {
            Some(match op {
                Op::Bind { src: None, dst, attrs, name, .. } => {
                    Op::Bind { src: None, dst: dst.clone(), attrs: *attrs, clone: fresh(), name: *name }
                }
                Op::Bind { src: Some(_), .. } | Op::File { .. } | Op::Overlay { .. } => return None,
                Op::Tmpfs { dst, size, mode, attrs, optional, name } => Op::Tmpfs {
                    dst: dst.clone(),
                    size: size.clone(),
                    mode,
                    attrs: *attrs,
                    optional: *optional,
                    name: *name,
                },
                Op::Proc { dst, name } => Op::Proc { dst: dst.clone(), name: *name },
                Op::Dev { dst, name, .. } => Op::Dev { dst: dst.clone(), nodes: Default::default(), name: *name },
                Op::Dir { dst, name } => Op::Dir { dst: dst.clone(), name: *name },
                Op::FileData { dst, content, name } => {
                    Op::FileData { dst: dst.clone(), content: content.clone(), name: *name }
                }
                Op::Symlink { target, dst, name } => {
                    Op::Symlink { target: target.clone(), dst: dst.clone(), name: *name }
                }
                Op::Hide { dst, holes, name, .. } => {
                    Op::Hide { dst: dst.clone(), holes: *holes, cover: fresh(), name: *name }
                }
                Op::Save { dst, slot, name } => Op::Save { dst: dst.clone(), slot: *slot, name: *name },
                Op::StandIn { dst, name } => Op::StandIn { dst: dst.clone(), name: *name },
                Op::Reveal { dst, slot, attrs, name } => {
                    Op::Reveal { dst: dst.clone(), slot: *slot, attrs: *attrs, name: *name }
                }
            })
        })
        .collect::<Option<Vec<Op>>>()?;
    Some(MountPlan {
        base,
        ops,
        needs_scratch: plan.needs_scratch,
        saved: plan.saved.iter().map(|_| fresh()).collect(),
        sources: Rc::clone(&plan.sources),
        parents: Rc::clone(&plan.parents),
        stage: None,
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::host::fsrules::Homes;
    use crate::proto::spec::MountOp;
    use crate::sys;

    /// A plan's operations as kind and path, to compare two plans.
    fn shape(plan: &MountPlan) -> Vec<String> {
        plan.ops
            .iter()
            .map(|op| {
                let kind = match op {
                    Op::Hide { .. } => "hide",
                    Op::Tmpfs { .. } => "tmpfs",
                    Op::Proc { .. } => "proc",
                    Op::Dev { .. } => "dev",
                    Op::Bind { .. } => "bind",
                    _ => "other",
                };
                format!("{kind} {}", op.dst().to_string_lossy())
            })
            .collect()
    }

    #[test]
    fn a_default_plan_is_kept_reused_and_dropped_when_the_secrets_change() {
        // A home on a filesystem whose directory times vouch, not under the fresh /tmp.
        let home = PathBuf::from(format!("/var/tmp/capsule-memo-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".config")).unwrap();
        struct Rm(PathBuf);
        impl Drop for Rm {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _rm = Rm(home.clone());
        let (me, homes) = (u32::MAX, Homes::at(&home));
        let spec = RunSpec::new(["/bin/true"]);
        let plan_now = |spec: &RunSpec| {
            let mut names = vec![String::new(), String::new()];
            // As if prepared a minute from now: every directory has settled.
            let later = sys::realtime_coarse_s() + 60;
            let plan = MountPlan::prepare_at(spec, me, &homes, &mut names, None, later).unwrap();
            (plan, names)
        };
        let (plan, names) = plan_now(&spec);
        let memo = PlanMemo::keep(&spec, &plan, &names).expect("the default plan holds no descriptor");
        let (copy, copy_names) = memo.reuse(&spec, me).expect("nothing changed, yet the plan was not reused");
        assert_eq!(shape(&copy), shape(&plan));
        assert_eq!(copy_names, names);
        assert!(Rc::ptr_eq(&copy.sources, &plan.sources), "the sources are shared, not copied");
        // Another tree: not this plan.
        let mut other = spec.clone();
        other.tmp_size = Some(1 << 20);
        assert!(!memo.same_tree(&other) && memo.reuse(&other, me).is_none());
        // A secret appears: the kept plan no longer holds (a new plan hides it).
        let tick = || std::thread::sleep(std::time::Duration::from_millis(1100));
        tick();
        std::fs::write(home.join(".netrc"), "x").unwrap();
        assert!(memo.reuse(&spec, me).is_none(), "a new ~/.netrc goes unnoticed");
        let (with, _) = plan_now(&spec);
        let netrc = format!("hide {}", home.join(".netrc").display());
        assert!(shape(&with).contains(&netrc), "{:?}", shape(&with));
        let memo = PlanMemo::keep(&spec, &with, &names).unwrap();
        assert!(memo.reuse(&spec, me).is_some());
        // ... and goes: that plan no longer holds either.
        std::fs::remove_file(home.join(".netrc")).unwrap();
        assert!(memo.reuse(&spec, me).is_none(), "a removed ~/.netrc still covered");
        // A directory that changed too recently to vouch: no reuse (planned again, it may settle).
        let mut names = vec![String::new(), String::new()];
        let fresh = MountPlan::prepare(&spec, me, &homes, &mut names, None).unwrap_or_else(|e| panic!("{e}"));
        let memo = PlanMemo::keep(&spec, &fresh, &names).unwrap();
        assert!(fresh.parents.iter().any(|p| !p.vouches()));
        assert!(memo.reuse(&spec, me).is_none());
    }

    #[test]
    fn plans_are_kept_one_per_tree_the_oldest_dropped() {
        let home = PathBuf::from(format!("/var/tmp/capsule-memos-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let homes = Homes::at(&home);
        let later = sys::realtime_coarse_s() + 60; // every directory settled
        let made = std::cell::Cell::new(0);
        let mut memos = PlanMemos::default();
        let mut plan = |spec: &RunSpec| {
            let make = |names: &mut Vec<String>| {
                made.set(made.get() + 1);
                MountPlan::prepare_at(spec, u32::MAX, &homes, names, None, later)
            };
            memos.plan(spec, u32::MAX, make).unwrap();
            made.get()
        };
        let tree = |mib: u64| {
            let mut s = RunSpec::new(["/bin/true"]);
            s.tmp_size = Some(mib << 20);
            s
        };
        assert_eq!(plan(&tree(1)), 1);
        assert_eq!(plan(&tree(1)), 1, "the kept plan was not reused");
        for mib in 2..=PlanMemos::MAX as u64 {
            plan(&tree(mib));
        }
        assert_eq!(plan(&tree(1)), PlanMemos::MAX, "one of four trees was dropped");
        plan(&tree(9)); // a fifth: the oldest (tree 1) goes
        assert_eq!(plan(&tree(1)), PlanMemos::MAX + 2, "a fifth tree did not drop the oldest");
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn plans_holding_descriptors_are_not_kept() {
        let mut spec = RunSpec::new(["/bin/true"]);
        spec.mounts.push(MountOp::RoBind { src: "/usr".into(), dst: "/mnt".into(), try_: false, noexec: false });
        let mut names = vec![String::new(), String::new()];
        let plan =
            MountPlan::prepare(&spec, u32::MAX, &Homes::at(Path::new("/nonexistent")), &mut names, None).unwrap();
        assert!(PlanMemo::keep(&spec, &plan, &names).is_none());
    }
}
