//! The language of `--lang`: a preset ([`crate::presets`])
//! and the toolchain found for it on this machine.

use std::path::Path;

use crate::presets::{self, Preset, Toolchain};
use capsule::RunSpec;

pub struct Lang {
    preset: Preset,
    toolchain: Toolchain,
}

impl Lang {
    /// The preset named `name` (or an alias) and its toolchain; the error
    /// says what is missing and how to install it.
    pub fn find(name: &str) -> Result<Lang, String> {
        let preset = presets::get(name).map_err(|e| format!("--lang {name}: {e}"))?;
        let toolchain = preset.detect().map_err(|e| format!("--lang {name}: {e}"))?;
        Ok(Lang { preset, toolchain })
    }

    pub fn name(&self) -> &'static str {
        self.preset.name()
    }

    /// What the toolchain says it is (`g++ 12.2.0`).
    pub fn version(&self) -> &str {
        &self.toolchain.version
    }

    /// The file name the source gets in the box directory.
    pub fn source_name(&self) -> &'static str {
        self.preset.source_name()
    }

    pub fn compile_spec(&self, box_dir: &Path, cgroups: bool) -> Option<RunSpec> {
        self.preset.compile_spec(&self.toolchain, box_dir, cgroups)
    }

    pub fn run_spec(&self, box_dir: &Path, memory: u64) -> RunSpec {
        self.preset.run_spec(&self.toolchain, box_dir, Some(memory))
    }

    /// Whether an address-space limit (RLIMIT_AS) can stand in for the
    /// memory limit without cgroups: not for runtimes that reserve far
    /// more address space than they use (the JVM, Go).
    pub fn address_space_limit_works(&self) -> bool {
        !matches!(self.preset.name(), "java" | "go")
    }
}
