//! Test support for capsule, never installed: the harness of the black-box
//! tests of the `capsule` CLI (crates/capsule-cli/tests, which use it as
//! `use capsule_testkit as common;`), the helpers those tests run
//! (`capsule-probe` inside the sandbox, `capsule-libtest` for the library
//! API) and the benchmark driver `capsule-bench` (bench/).
//!
//! * The binaries under test come from the target directory the test
//!   executable runs from (`target/<triple>/<profile>/`, the parent of its
//!   `deps/`). `cargo test -p capsule-cli` builds `capsule` and
//!   `capsule-cli` itself, not the helpers of this package: build them all
//!   with `cargo build --workspace --all-targets` (scripts/test.sh does)
//!   before running the tests, and again after changing a helper.
//! * As root, the tests run capsule as an unprivileged user (`capsule-test`,
//!   created on first use) through `setpriv --reuid --regid --clear-groups`,
//!   so the spawned pid *is* capsule once setpriv exec'd. Both binaries are
//!   copied to a world-readable directory under /var/tmp (not /tmp: the
//!   sandbox's /tmp is private). As any other user, capsule runs directly.
//! * Missing kernel features make a test print `SKIP <test>: <reason>` (and
//!   append it to `$CAPSULE_TEST_SKIP_LOG`, which scripts/test.sh sums up)
//!   and pass, unless `CAPSULE_TEST_STRICT=1` (CI), where they fail.
//! * The probe (`capsule-probe`) prints `key=value` lines; [`Kv`] parses them.
//! * In the cgroup v2 VM (`scripts/vm/cgroup2-vm --as-root`: root with
//!   `CGROUP2_VM=1`), the unprivileged user is the VM's (`CGROUP2_VM_USER`,
//!   default `cgvm`), and every capsule invocation gets a delegated scope of
//!   its own, `/sys/fs/cgroup/delegated/scope-<unique>` (like `systemd-run
//!   --user --scope -p Delegate=yes`): capsule enables controllers on its
//!   base cgroup, which then cannot hold processes, so invocations must not
//!   share one. The scope is checked (see [`Out::cgroup_leftovers`]) and
//!   removed when capsule has exited.
//! * The cgroup tests use [`require_cgroups!`]: they skip where no delegated
//!   cgroup v2 hierarchy exists (the host), even under
//!   `CAPSULE_TEST_STRICT=1`, and fail instead under `CAPSULE_TEST_CGROUPS=1`.
//! * `CAPSULE_TEST_SYSTEMD=1` (scripts/test-systemd.sh, in `cgroup2-vm
//!   --systemd`): the tests run as the logged-in user, make no user and no
//!   cgroup, and capsule gets its cgroups by re-starting itself in a scope
//!   of the user's systemd manager, which the harness checks it did (see
//!   the `systemd` module). The cgroup tests then must run (as under
//!   `CAPSULE_TEST_CGROUPS=1`); those that need root to set up their
//!   cgroups say why they do not apply (`not_in_systemd_mode!`).

mod cgroup;
mod harness;
mod host;
mod kv;
mod procs;
mod pty;
mod run;
mod scratch;
mod skip;
mod subids;
mod systemd;

use std::time::Duration;

pub use cgroup::*;
pub use harness::*;
pub use host::*;
pub use kv::*;
pub use procs::*;
pub use pty::*;
pub use run::*;
pub use scratch::*;
pub use skip::*;
pub use subids::*;
pub use systemd::*;

pub const TEST_USER: &str = "capsule-test";
/// The second unprivileged user of the tests that need two ([`harness::other_user`]).
pub const OTHER_USER: &str = "capsule-test2";
pub const BIN_ROOT: &str = "/var/tmp/capsule-test-bins";
pub const SCRATCH_ROOT: &str = "/var/tmp/capsule-test-scratch";
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Upper bound for any single capsule invocation; a hang fails the test.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
