//! How a supervisor works (fixed for its life) and where its cgroups come from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// How a supervisor works; fixed for its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Most runs at once, each with its own PID 1 and cgroup (default 1).
    pub parallel: usize,
    /// Where the runs' cgroups come from.
    pub cgroup: CgroupConfig,
    /// Prepare the next runs' PID 1 (namespaces, mount tree, the program's
    /// user namespace and cgroup) ahead of their requests, while the
    /// supervisor is idle or every slot is busy, each fresh and used once
    /// (default true).
    pub prepare_ahead: bool,
    /// The `capsule` binary to start the supervisor from (default:
    /// `$CAPSULE_BIN`, else `capsule` beside the running executable, else
    /// `capsule` in `PATH`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capsule_bin: Option<PathBuf>,
    /// Give each run a loopback-only network namespace of its own (default
    /// true): concurrent runs cannot reach each other over 127.0.0.1 nor
    /// collide on a port. A PID 1 prepared ahead creates it while idle
    /// (docs/benchmarks-server.md has the cost). False: all runs of the
    /// supervisor share one (`capsule serve --shared-network`).
    pub own_network: bool,
    /// With `own_network`: a network namespace made for each run and torn
    /// down after it (default false: a network is kept per slot and lent to
    /// one run at a time, taken back only when the run left no socket in
    /// it; its statistics carry over, docs/network-reuse.md).
    pub fresh_network: bool,
    /// One supervisor per CPU (min(`parallel`, CPUs) of them, the slots
    /// shared out), each pinned with its runs to a CPU of its own; runs go
    /// to the one with the fewest slots taken (default false; `capsule
    /// serve --per-cpu`, docs/protocol.md "One supervisor per CPU"). Not
    /// with `own_network` false: each supervisor's networks are its own.
    /// Left out of the JSON when false: an agent's identity is its
    /// config's JSON, which the front end writes by hand.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_cpu: bool,
    /// The supervisor's user namespace maps the caller to 0 and these
    /// subordinate ids to 1, for runs whose spec asks for them
    /// (`RunSpec::subordinate`): it is `user_ns`, made by the caller with
    /// `newuidmap`/`newgidmap` (`host::subids::Namespace`), which the
    /// supervisor joins instead of making its own. Only the one-shot
    /// client sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subordinate: Option<crate::proto::spec::SubordinateIds>,
    /// That user namespace's descriptor, in the process that starts the
    /// supervisor (not carried across its re-execution).
    #[serde(skip)]
    pub user_ns: Option<i32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            parallel: 1,
            cgroup: CgroupConfig::default(),
            prepare_ahead: true,
            capsule_bin: None,
            own_network: true,
            fresh_network: false,
            per_cpu: false,
            subordinate: None,
            user_ns: None,
        }
    }
}

/// Most runs a supervisor runs at once.
pub const MAX_PARALLEL: usize = 1024;

impl Config {
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.parallel == 0 || self.parallel > MAX_PARALLEL {
            return Err(SpecError::new(
                "parallel",
                format!("{} is not a number of runs between 1 and {MAX_PARALLEL}", self.parallel),
            ));
        }
        if self.per_cpu && !self.own_network {
            return Err(SpecError::new(
                "per_cpu",
                "one supervisor per CPU cannot share one network among all runs (own_network false, \
                 --shared-network): each supervisor's networks are its own"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// The supervisors of a `per_cpu` config: one per CPU of `cpus` (at
    /// most `parallel`), each with its share of the slots and `per_cpu` off.
    pub fn per_cpu_shares(&self, cpus: &[usize]) -> Vec<(usize, Config)> {
        let n = self.parallel.min(cpus.len()).max(1);
        (0..n)
            .map(|i| {
                let share = self.parallel / n + usize::from(i < self.parallel % n);
                (cpus.get(i).copied().unwrap_or(0), Config { parallel: share, per_cpu: false, ..self.clone() })
            })
            .collect()
    }
}

/// Run-spec settings of the cgroup subtree (profile table `[cgroup]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupConfig {
    /// Use this delegated cgroup as the base.
    pub path: Option<PathBuf>,
    /// Make degraded mode (no cgroups) an error.
    pub require: bool,
    /// Do not use cgroups (degraded mode on purpose).
    pub disable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots shared out over at most as many supervisors as CPUs, and
    /// no per-CPU supervisors with one network for all runs.
    #[test]
    fn per_cpu_shares_and_refusal() {
        let c = Config { parallel: 5, per_cpu: true, ..Config::default() };
        let shares: Vec<(usize, usize)> = c.per_cpu_shares(&[2, 7]).iter().map(|(cpu, s)| (*cpu, s.parallel)).collect();
        assert_eq!(shares, vec![(2, 3), (7, 2)]);
        assert!(c.per_cpu_shares(&[0, 1]).iter().all(|(_, s)| !s.per_cpu));
        let one = Config { parallel: 1, per_cpu: true, ..Config::default() };
        assert_eq!(one.per_cpu_shares(&[0, 1, 2]).len(), 1);
        let shared = Config { per_cpu: true, own_network: false, ..Config::default() };
        assert_eq!(shared.validate().unwrap_err().field, "per_cpu");
    }
}
