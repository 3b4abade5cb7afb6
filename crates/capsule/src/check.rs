//! `capsule check`: placeholder being written by a helper session.
// Temporary API shim until the real report lands (same signatures).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckItem { pub name: String }
pub fn run_checks() -> Vec<CheckItem> { Vec::new() }
pub fn can_run(_: &[CheckItem]) -> bool { false }
pub fn render(_: &[CheckItem]) -> String { "capsule check is not built yet\n".into() }
