//! Language presets (docs/presets.md): for each language a judge accepts,
//! the run spec that compiles a solution and the one that runs it, as
//! profiles shipped with capsule (`crates/capsule-judge/presets/*.toml`,
//! embedded here), completed with what [`Preset::detect`] finds on the machine: the
//! toolchain's real location (through the caller's `PATH`, symbolic links,
//! `rustc --print sysroot`, `JAVA_HOME`, `GOROOT`, ...) and the binds it
//! needs outside the profile's (Debian keeps Go's sources in /usr/share and
//! the JDK's configuration in /etc, for example).
//!
//! ```no_run
//! use capsule_judge::presets;
//! let cpp = presets::get("c++")?;
//! let tc = cpp.detect()?;                      // "g++ 12.2.0", or why not
//! let dir = std::path::Path::new("/var/tmp/submission-1"); // holds solution.cpp
//! let compile = cpp.compile_spec(&tc, dir, false).expect("C++ compiles");
//! let mut run = cpp.run_spec(&tc, dir, Some(256 << 20));
//! run.limits.memory = Some(256 << 20);          // with cgroups
//! # Ok::<(), presets::PresetError>(())
//! ```
//!
//! Detection runs the toolchain's own version query (`gcc
//! -dumpfullversion`, `java -version`, ...) outside the sandbox, as the
//! caller, with the caller's environment: the same programs the caller is
//! about to run in the sandbox, and the only reliable test that they work
//! for this user.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capsule::error::{io_text, SpecError};
use capsule::spec::{self, MountOp, RunSpec};

/// Where the solution's directory is, inside the sandbox.
pub const BOX: &str = "/box";

/// How long a toolchain's version query may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The languages, in the order of [`names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    C,
    Cpp,
    Rust,
    Pascal,
    Python3,
    Bash,
    Java,
    Go,
}

/// One preset as shipped.
#[derive(Debug)]
struct Def {
    lang: Lang,
    name: &'static str,
    aliases: &'static [&'static str],
    source: &'static str,
    compile: &'static str,
    run: &'static str,
    /// How to install the toolchain (Debian's packages).
    install: &'static str,
}

const DEFS: [Def; 8] = [
    Def {
        lang: Lang::C,
        name: "c",
        aliases: &[],
        source: "solution.c",
        compile: include_str!("../presets/c-compile.toml"),
        run: include_str!("../presets/c-run.toml"),
        install: "install gcc and the C library's headers (Debian: apt-get install gcc libc6-dev)",
    },
    Def {
        lang: Lang::Cpp,
        name: "cpp",
        aliases: &["c++", "cc", "cxx"],
        source: "solution.cpp",
        compile: include_str!("../presets/cpp-compile.toml"),
        run: include_str!("../presets/cpp-run.toml"),
        install: "install g++ (Debian: apt-get install g++)",
    },
    Def {
        lang: Lang::Rust,
        name: "rust",
        aliases: &["rs"],
        source: "solution.rs",
        compile: include_str!("../presets/rust-compile.toml"),
        run: include_str!("../presets/rust-run.toml"),
        install: "install rustc (Debian: apt-get install rustc), or a rustup toolchain this user can read",
    },
    Def {
        lang: Lang::Pascal,
        name: "pascal",
        aliases: &["pas", "fpc"],
        source: "solution.pas",
        compile: include_str!("../presets/pascal-compile.toml"),
        run: include_str!("../presets/pascal-run.toml"),
        install: "install Free Pascal (Debian: apt-get install fp-compiler)",
    },
    Def {
        lang: Lang::Python3,
        name: "python3",
        aliases: &["py", "python"],
        source: "solution.py",
        compile: include_str!("../presets/python3-compile.toml"),
        run: include_str!("../presets/python3-run.toml"),
        install: "install Python 3 (Debian: apt-get install python3)",
    },
    Def {
        lang: Lang::Bash,
        name: "bash",
        aliases: &["sh"],
        source: "solution.sh",
        compile: include_str!("../presets/bash-compile.toml"),
        run: include_str!("../presets/bash-run.toml"),
        install: "install bash (Debian: apt-get install bash)",
    },
    Def {
        lang: Lang::Java,
        name: "java",
        aliases: &[],
        source: "Main.java",
        compile: include_str!("../presets/java-compile.toml"),
        run: include_str!("../presets/java-run.toml"),
        install: "install a JDK (Debian: apt-get install openjdk-17-jdk-headless)",
    },
    Def {
        lang: Lang::Go,
        name: "go",
        aliases: &["golang"],
        source: "solution.go",
        compile: include_str!("../presets/go-compile.toml"),
        run: include_str!("../presets/go-run.toml"),
        install: "install Go (Debian: apt-get install golang-go; or Go from https://go.dev/dl in /usr/local/go)",
    },
];

const NAMES: [&str; 8] = ["c", "cpp", "rust", "pascal", "python3", "bash", "java", "go"];

/// Canonical names, in this order: "c", "cpp", "rust", "pascal", "python3",
/// "bash", "java", "go".
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// A preset by canonical name or alias (c++/cc/cxx, rs, pas/fpc,
/// py/python, sh, golang; any case); unknown → an error listing the names.
pub fn get(name: &str) -> Result<Preset, PresetError> {
    let wanted = name.trim().to_ascii_lowercase();
    let def = DEFS
        .iter()
        .find(|d| d.name == wanted || d.aliases.contains(&wanted.as_str()))
        .ok_or_else(|| PresetError::Unknown(name.to_string()))?;
    let parse = |step: &'static str, text: &str| {
        spec::from_toml(text).map_err(|error| PresetError::Profile { preset: def.name, step, error })
    };
    Ok(Preset { def, compile: parse("compile", def.compile)?, run: parse("run", def.run)? })
}

/// A language preset: its compile and run profiles.
#[derive(Debug, Clone)]
pub struct Preset {
    def: &'static Def,
    compile: RunSpec,
    run: RunSpec,
}

/// The toolchain [`Preset::detect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// What it says it is: `g++ 12.2.0`, `rustc 1.63.0`, `openjdk 17.0.15`.
    pub version: String,
    /// The compiler (for Python and bash: the interpreter), absolute, with
    /// every symbolic link resolved: the compile spec's `argv[0]`.
    pub program: PathBuf,
    /// The program the run spec starts, for languages that run under one
    /// (python3, bash, java); `None` for native programs.
    pub runtime: Option<PathBuf>,
    /// Host paths bound read-only at the same place, beyond the profile's
    /// binds: the toolchain's home when it lies elsewhere (`/usr/local/go`,
    /// a rustup sysroot) and what its links point to (`/etc/java-17-openjdk`,
    /// `/usr/share/go-1.19`). In the compile spec, and in the run spec when
    /// there is a runtime.
    pub binds: Vec<PathBuf>,
    /// Directories put in front of the sandbox's `PATH`.
    pub path: Vec<PathBuf>,
    /// Environment the toolchain needs (`GOROOT`).
    pub env: BTreeMap<String, String>,
    /// Candidates passed over, and why (`/root/.cargo/bin/rustc: Permission
    /// denied (EACCES)`).
    pub skipped: Vec<String>,
}

/// A preset that does not exist, or a toolchain that is missing or not
/// usable here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PresetError {
    #[error("unknown language `{0}`: expected one of c, cpp, rust, pascal, python3, bash, java, go (or an alias: c++, cc, cxx, rs, pas, fpc, py, python, sh, golang)")]
    Unknown(String),
    /// No candidate program exists.
    #[error("preset `{preset}`: `{program}` not found (looked in {searched}); to fix: {fix}")]
    NotFound { preset: &'static str, program: String, searched: String, fix: String },
    /// Candidates exist, none works for this user.
    #[error("preset `{preset}`: no usable `{program}`: {reasons}; to fix: {fix}")]
    Unusable { preset: &'static str, program: String, reasons: String, fix: String },
    /// The toolchain runs but lacks a part it needs.
    #[error("preset `{preset}`: {what}; to fix: {fix}")]
    Incomplete { preset: &'static str, what: String, fix: String },
    /// A shipped profile does not parse (a defect of this build).
    #[error("preset `{preset}`: the shipped {step} profile is invalid: {error}")]
    Profile { preset: &'static str, step: &'static str, error: SpecError },
}

impl Preset {
    /// The canonical name.
    pub fn name(&self) -> &'static str {
        self.def.name
    }

    /// The other names `get` accepts.
    pub fn aliases(&self) -> &'static [&'static str] {
        self.def.aliases
    }

    /// The file name the source must have in the box directory
    /// ("solution.c", "solution.cpp", "solution.rs", "solution.pas",
    /// "solution.py", "solution.sh", "Main.java", "solution.go").
    pub fn source_name(&self) -> &'static str {
        self.def.source
    }

    /// The shipped compile profile (TOML), as embedded.
    pub fn compile_profile(&self) -> &'static str {
        self.def.compile
    }

    /// The shipped run profile (TOML), as embedded.
    pub fn run_profile(&self) -> &'static str {
        self.def.run
    }

    /// Finds the toolchain here (as the calling user).
    pub fn detect(&self) -> Result<Toolchain, PresetError> {
        let env = Search::from_env();
        let mut tc = match self.def.lang {
            Lang::C => self.detect_gcc(&env, "gcc"),
            Lang::Cpp => self.detect_gcc(&env, "g++"),
            Lang::Rust => self.detect_rust(&env),
            Lang::Pascal => self.detect_fpc(&env),
            Lang::Python3 => self.detect_python(&env),
            Lang::Bash => self.detect_bash(&env),
            Lang::Java => self.detect_java(&env),
            Lang::Go => self.detect_go(&env),
        }?;
        self.keep_needed_binds(&mut tc);
        Ok(tc)
    }

    /// Leaves in `tc.binds` only what the profiles do not show already,
    /// each once, none beneath another.
    fn keep_needed_binds(&self, tc: &mut Toolchain) {
        let mut binds: Vec<PathBuf> = Vec::new();
        let mut all = std::mem::take(&mut tc.binds);
        all.sort();
        for b in all {
            let shown = covered(&self.compile.mounts, &b) && (tc.runtime.is_none() || covered(&self.run.mounts, &b));
            if !shown && !binds.iter().any(|o| b.starts_with(o)) {
                binds.push(b);
            }
        }
        tc.binds = binds;
    }

    /// The spec that compiles `box_dir/<source_name>` inside the sandbox:
    /// box_dir is bound read-write at /box, cwd /box, the result left in
    /// box_dir. None: the language has no compile step (every shipped
    /// preset has one; Python's byte-compiles, bash's checks the syntax).
    /// `cgroups`: whether the supervisor has cgroups (without them, the
    /// cgroup-only limits memory, cpu_bandwidth and cpus are left out;
    /// pids and the rest stay).
    pub fn compile_spec(&self, tc: &Toolchain, box_dir: &Path, cgroups: bool) -> Option<RunSpec> {
        let mut spec = self.compile.clone();
        if let Some(a0) = spec.argv.first_mut() {
            *a0 = tc.program.display().to_string();
        }
        add_toolchain(&mut spec, tc);
        spec.mounts.push(MountOp::Bind { src: absolute(box_dir), dst: BOX.into(), try_: false, noexec: false });
        if !cgroups {
            spec.limits.memory = None;
            spec.limits.cpu_bandwidth = None;
            spec.limits.cpus = None;
        }
        Some(spec)
    }

    /// The spec that runs the compiled program: box_dir bound read-only at
    /// /box, cwd /box. No time limit, stdin/stdout unset (the caller sets
    /// them). `memory`: the run's memory limit, for runtimes that must be
    /// told (java's -Xmx, GOMEMLIMIT); the caller sets limits.memory itself.
    pub fn run_spec(&self, tc: &Toolchain, box_dir: &Path, memory: Option<u64>) -> RunSpec {
        let mut spec = self.run.clone();
        if let Some(rt) = &tc.runtime {
            if let Some(a0) = spec.argv.first_mut() {
                *a0 = rt.display().to_string();
            }
            add_toolchain(&mut spec, tc);
        }
        match (self.def.lang, memory) {
            (Lang::Java, Some(m)) => {
                let at = 1.min(spec.argv.len());
                spec.argv.insert(at, format!("-Xmx{}m", java_heap(m) >> 20));
            }
            (Lang::Go, Some(m)) => {
                // The runtime's soft limit: the GC works harder near it
                // instead of letting the heap reach the hard limit.
                spec.env.insert("GOMEMLIMIT".into(), (m / 10 * 9).to_string());
            }
            _ => {}
        }
        spec.mounts.push(MountOp::RoBind { src: absolute(box_dir), dst: BOX.into(), try_: false, noexec: false });
        spec
    }
}

/// A spec as a TOML profile (`capsule run --profile` reads it back).
pub fn to_toml(spec: &RunSpec) -> Result<String, String> {
    toml::to_string(spec).map_err(|e| format!("the spec has no TOML form: {e}"))
}

/// The JVM's maximum heap for a run's memory limit: the limit less a
/// reserve for what is not heap (metaspace, JIT code, thread stacks, the
/// class-data archive): a quarter of it, between 32 and 128 MiB, and never
/// less than half the limit.
pub fn java_heap(memory: u64) -> u64 {
    let reserve = (memory / 4).clamp(32 << 20, 128 << 20);
    memory.saturating_sub(reserve).max(memory / 2).max(1 << 20)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Adds the toolchain's binds (those the spec does not show already),
/// `PATH` entries and environment.
fn add_toolchain(spec: &mut RunSpec, tc: &Toolchain) {
    for b in &tc.binds {
        if !covered(&spec.mounts, b) {
            spec.mounts.push(MountOp::RoBind { src: b.clone(), dst: b.clone(), try_: false, noexec: false });
        }
    }
    if !tc.path.is_empty() {
        let mut parts: Vec<String> = tc.path.iter().map(|p| p.display().to_string()).collect();
        let old = spec.env.get("PATH").cloned().unwrap_or_else(|| spec::DEFAULT_PATH.to_string());
        parts.extend(old.split(':').filter(|p| !p.is_empty()).map(String::from));
        let mut seen = Vec::new();
        parts.retain(|p| {
            if seen.contains(p) {
                false
            } else {
                seen.push(p.clone());
                true
            }
        });
        spec.env.insert("PATH".into(), parts.join(":"));
    }
    for (k, v) in &tc.env {
        spec.env.insert(k.clone(), v.clone());
    }
}

/// Whether `path` (absolute, links resolved) is visible at the same place
/// through one of `mounts`' binds.
fn covered(mounts: &[MountOp], path: &Path) -> bool {
    mounts.iter().any(|m| match m {
        MountOp::Bind { src, dst, .. } | MountOp::RoBind { src, dst, .. } => src == dst && path.starts_with(src),
        _ => false,
    })
}

// ---------------------------------------------------------------- detection

/// Where programs are looked for: the caller's `PATH`, then standard
/// directories; the caller's home for `~/.cargo/bin`.
#[derive(Debug, Clone)]
struct Search {
    path: Option<OsString>,
    home: Option<PathBuf>,
}

impl Search {
    fn from_env() -> Search {
        Search {
            path: std::env::var_os("PATH"),
            home: std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from),
        }
    }
}

/// The standard directories looked in after `PATH`.
const STANDARD_DIRS: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// A candidate program: as found (through `PATH`), and with its links
/// resolved.
#[derive(Debug)]
struct Cand<'a> {
    path: &'a Path,
    real: &'a Path,
}

impl Preset {
    /// The toolchain of the first candidate for `program` (in `PATH`, the
    /// standard directories, then `extra`) that `check` accepts; the
    /// others, and why, in its `skipped`.
    fn find(
        &self,
        s: &Search,
        program: &str,
        extra: &[PathBuf],
        check: impl Fn(&Cand) -> Result<Toolchain, String>,
    ) -> Result<Toolchain, PresetError> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(p) = &s.path {
            dirs.extend(std::env::split_paths(p).filter(|d| d.is_absolute()));
        }
        dirs.extend(STANDARD_DIRS.iter().map(PathBuf::from));
        dirs.extend(extra.iter().cloned());
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut skipped = Vec::new();
        // Directories this user cannot search (/root/.cargo/bin as anyone
        // but root): whether the program is there is unknown, so they are
        // named only when nothing usable is found.
        let mut blocked = Vec::new();
        for d in dirs {
            let cand = d.join(program);
            if seen.contains(&cand) {
                continue;
            }
            seen.push(cand.clone());
            match std::fs::metadata(&cand) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    blocked.push(format!(
                        "{}: {} (a directory on the way is not accessible to this user)",
                        cand.display(),
                        io_text(&e)
                    ));
                    continue;
                }
                Err(e) => {
                    skipped.push(format!("{}: {}", cand.display(), io_text(&e)));
                    continue;
                }
                Ok(m) if !m.is_file() => continue,
                Ok(_) => {}
            }
            let real = match std::fs::canonicalize(&cand) {
                Ok(r) => r,
                Err(e) => {
                    skipped.push(format!("{}: {}", cand.display(), io_text(&e)));
                    continue;
                }
            };
            match check(&Cand { path: &cand, real: &real }) {
                Ok(mut tc) => {
                    tc.skipped = skipped;
                    return Ok(tc);
                }
                Err(why) => skipped.push(format!("{}: {why}", cand.display())),
            }
        }
        let fix = self.def.install.to_string();
        skipped.extend(blocked);
        if skipped.is_empty() {
            let searched: Vec<String> =
                seen.iter().filter_map(|c| c.parent()).map(|d| d.display().to_string()).collect();
            Err(PresetError::NotFound {
                preset: self.def.name,
                program: program.into(),
                searched: searched.join(", "),
                fix,
            })
        } else {
            Err(PresetError::Unusable {
                preset: self.def.name,
                program: program.into(),
                reasons: skipped.join("; "),
                fix,
            })
        }
    }

    fn detect_gcc(&self, s: &Search, program: &str) -> Result<Toolchain, PresetError> {
        self.find(s, program, &[], |c| {
            let version = first_line(&probe(c.path, &["-dumpfullversion"], &[])?);
            let mut tc = toolchain(c.real, format!("{program} {version}"));
            // A compiler under /usr uses /usr/include, which the profile
            // binds; elsewhere, its prefix holds its headers and libraries.
            match home_of(c.real) {
                Some(home) if home != Path::new("/usr") => {
                    tc.path.push(home.join("bin"));
                    tc.binds.push(home);
                }
                _ => {
                    if !Path::new("/usr/include/stdio.h").exists() {
                        return Err("the C library's headers are missing (/usr/include/stdio.h)".into());
                    }
                }
            }
            Ok(tc)
        })
    }

    fn detect_rust(&self, s: &Search) -> Result<Toolchain, PresetError> {
        // rustc links with `cc`, which the sandbox finds in /usr/bin.
        if !["/usr/bin/cc", "/bin/cc"].iter().any(|p| Path::new(p).exists()) {
            return Err(PresetError::Incomplete {
                preset: self.def.name,
                what: "rustc links with `cc`, and /usr/bin/cc is missing".into(),
                fix: "install a C compiler (Debian: apt-get install gcc)".into(),
            });
        }
        let extra: Vec<PathBuf> = s.home.iter().map(|h| h.join(".cargo/bin")).collect();
        self.find(s, "rustc", &extra, |c| {
            // `rustc` may be rustup's proxy, which needs the caller's
            // environment: ask it for the real toolchain, then use that.
            let text = first_line(&probe(c.path, &["--print", "sysroot"], &[])?);
            let sysroot = std::fs::canonicalize(&text)
                .map_err(|e| format!("its sysroot {text} is not usable by this user: {}", io_text(&e)))?;
            let real = sysroot.join("bin/rustc");
            let out = probe(&real, &["--version"], &[]).map_err(|why| format!("its sysroot's rustc: {why}"))?;
            // `rustc 1.63.0` (of `rustc 1.75.0 (82e1608df 2023-12-21)`)
            let version = first_line(&out).split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            let mut tc = toolchain(&real, version);
            if sysroot != Path::new("/usr") {
                tc.path.push(sysroot.join("bin"));
                tc.binds.push(sysroot.clone());
            }
            tc.binds.extend(outside_links(&sysroot.join("lib/rustlib"), 4));
            Ok(tc)
        })
    }

    fn detect_fpc(&self, s: &Search) -> Result<Toolchain, PresetError> {
        self.find(s, "fpc", &[], |c| {
            let version = first_line(&probe(c.path, &["-iV"], &[])?);
            let mut tc = toolchain(c.real, format!("fpc {version}"));
            if let Some(home) = home_of(c.real).filter(|h| h != Path::new("/usr")) {
                tc.path.push(home.join("bin"));
                tc.binds.push(home);
            }
            // The compiler proper (ppcx64), which the driver runs.
            let ppc = first_line(&probe(c.path, &["-PB"], &[])?);
            let real = std::fs::canonicalize(&ppc)
                .map_err(|e| format!("its compiler `{ppc}` (fpc -PB) is not usable: {}", io_text(&e)))?;
            tc.binds.extend(real.parent().map(Path::to_path_buf));
            Ok(tc)
        })
    }

    fn detect_python(&self, s: &Search) -> Result<Toolchain, PresetError> {
        const QUERY: &str = "import sys, sysconfig\nprint(sys.executable)\nprint(sys.base_prefix)\nprint(sysconfig.get_path('stdlib'))\nprint('%d.%d.%d' % sys.version_info[:3])";
        self.find(s, "python3", &[], |c| {
            let out = probe(c.path, &["-I", "-c", QUERY], &[])?;
            let lines: Vec<&str> = out.lines().collect();
            let [exe, prefix, stdlib, version] = lines[..] else {
                return Err(format!("unexpected answer to its query: {out:?}"));
            };
            // pyenv's shims and virtual environments: the interpreter itself.
            let real = std::fs::canonicalize(exe).map_err(|e| format!("its interpreter {exe}: {}", io_text(&e)))?;
            let mut tc = toolchain(&real, format!("Python {version}"));
            tc.runtime = Some(real.clone());
            if let Ok(prefix) = std::fs::canonicalize(prefix) {
                if prefix != Path::new("/usr") && prefix != Path::new("/") {
                    tc.binds.push(prefix);
                }
            }
            tc.binds.push(real);
            if let Ok(stdlib) = std::fs::canonicalize(stdlib) {
                tc.binds.extend(outside_links(&stdlib, 1));
            }
            Ok(tc)
        })
    }

    fn detect_bash(&self, s: &Search) -> Result<Toolchain, PresetError> {
        self.find(s, "bash", &[], |c| {
            let out = probe(c.path, &["-c", "printf '%s\\n' \"$BASH_VERSION\""], &[])?;
            // `5.2.15(1)-release`
            let v = first_line(&out);
            let mut tc = toolchain(c.real, format!("bash {}", v.split('(').next().unwrap_or(&v)));
            tc.runtime = Some(c.real.to_path_buf());
            tc.binds.push(c.real.to_path_buf());
            Ok(tc)
        })
    }

    fn detect_java(&self, s: &Search) -> Result<Toolchain, PresetError> {
        let extra = [PathBuf::from("/usr/lib/jvm/default-java/bin")];
        self.find(s, "javac", &extra, |c| {
            let home =
                home_of(c.real).ok_or_else(|| format!("{} is not in a JDK's bin directory", c.real.display()))?;
            let java = home.join("bin/java");
            // javac is a JVM too: `java -version` tells whether the JDK
            // runs for this user, faster than `javac -version`.
            let out =
                probe(&java, &["-Xshare:auto", "-version"], &[]).map_err(|why| format!("its JDK's java: {why}"))?;
            // `openjdk version "17.0.15" 2025-04-15`
            let line = first_line(&out);
            let version = match (line.split_whitespace().next(), line.split('"').nth(1)) {
                (Some(vendor), Some(v)) => format!("{vendor} {v}"),
                _ => line.clone(),
            };
            let mut tc = toolchain(c.real, version);
            tc.runtime = Some(java);
            tc.path.push(home.join("bin"));
            tc.binds.push(home.clone());
            for sub in ["conf", "lib"] {
                tc.binds.extend(outside_links(&home.join(sub), 4));
            }
            Ok(tc)
        })
    }

    fn detect_go(&self, s: &Search) -> Result<Toolchain, PresetError> {
        let extra = [PathBuf::from("/usr/local/go/bin"), PathBuf::from("/usr/lib/go/bin")];
        self.find(s, "go", &extra, |c| {
            // No toolchain download, no go.env of the caller's.
            let out = probe(c.path, &["version"], &[("GOTOOLCHAIN", "local"), ("GOENV", "off")])?;
            // `go version go1.19.8 linux/amd64`
            let version = out.split_whitespace().nth(2).unwrap_or("go").to_string();
            let goroot = home_of(c.real).filter(|r| r.join("src/runtime").is_dir()).ok_or_else(|| {
                format!("{} is not in a Go root (no src/runtime beside its bin directory)", c.real.display())
            })?;
            let mut tc = toolchain(c.real, version);
            tc.env.insert("GOROOT".into(), goroot.display().to_string());
            tc.path.push(goroot.join("bin"));
            tc.binds.push(goroot.clone());
            tc.binds.extend(outside_links(&goroot, 3));
            Ok(tc)
        })
    }
}

fn toolchain(program: &Path, version: String) -> Toolchain {
    Toolchain {
        version,
        program: program.to_path_buf(),
        runtime: None,
        binds: Vec::new(),
        path: Vec::new(),
        env: BTreeMap::new(),
        skipped: Vec::new(),
    }
}

/// The directory above a program's `bin` directory (`/usr` for
/// `/usr/bin/gcc`), or None.
fn home_of(real: &Path) -> Option<PathBuf> {
    let bin = real.parent()?;
    (bin.file_name()? == "bin").then(|| bin.parent().map(Path::to_path_buf)).flatten()
}

fn first_line(s: &str) -> String {
    s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_string()
}

/// Directories that hold many unrelated things: a link's target is bound
/// through its first directory below one of these, never through one of
/// these themselves.
const BROAD: [&str; 16] = [
    "/",
    "/etc",
    "/etc/ssl",
    "/etc/ssl/certs",
    "/usr",
    "/usr/share",
    "/usr/share/doc",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local",
    "/usr/local/share",
    "/usr/local/lib",
    "/opt",
    "/var",
    "/var/lib",
    "/home",
];

/// What the symbolic links under `dir` (at most `depth` levels down, not
/// following links) point to outside `dir`, as the directories to bind:
/// each target's first directory below a [`BROAD`] one (`/etc/java-17-openjdk`
/// for `/etc/java-17-openjdk/security/java.security`), or the target itself.
/// Dangling links are left out.
fn outside_links(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut budget = 50_000usize;
    while let Some((d, level)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            if budget == 0 {
                return out;
            }
            budget -= 1;
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_dir() {
                if level + 1 < depth {
                    stack.push((p, level + 1));
                }
            } else if ft.is_symlink() {
                let Ok(target) = std::fs::canonicalize(&p) else { continue };
                if target.starts_with(dir) {
                    continue;
                }
                let bind = bind_root(&target);
                if !out.iter().any(|o| bind.starts_with(o)) {
                    out.retain(|o| !o.starts_with(&bind));
                    out.push(bind);
                }
            }
        }
    }
    out.sort();
    out
}

/// The directory to bind for `target`: its first ancestor (or itself) that
/// is not a [`BROAD`] directory.
fn bind_root(target: &Path) -> PathBuf {
    let mut acc = PathBuf::new();
    for c in target.components() {
        acc.push(c);
        if !BROAD.iter().any(|b| Path::new(b) == acc) {
            return acc;
        }
    }
    target.to_path_buf()
}

/// Runs `program args` (stdin /dev/null, `LC_ALL=C` and `env` over the
/// caller's environment) and returns its output (stdout, then stderr) when
/// it exits with 0 within [`PROBE_TIMEOUT`]; else why not.
fn probe(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    probe_within(program, args, env, PROBE_TIMEOUT)
}

fn probe_within(program: &Path, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args).env("LC_ALL", "C").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| io_text(&e))?;
    let readers: Vec<_> = [
        child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
        child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut r| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = r.by_ref().take(1 << 20).read_to_end(&mut b);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
            let _ = tx.send(b);
        });
        rx
    })
    .collect();
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{} {}` did not finish within {:?}", program.display(), args.join(" "), timeout));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(io_text(&e)),
        }
    };
    let mut out = String::new();
    for rx in readers {
        // A child the program left behind may hold the pipe: do not wait for it.
        if let Ok(b) = rx.recv_timeout(Duration::from_secs(2)) {
            out.push_str(&String::from_utf8_lossy(&b));
        }
    }
    if status.success() {
        Ok(out)
    } else {
        let why = first_line(&out);
        Err(format!(
            "`{} {}` failed ({status}){}",
            program.display(),
            args.join(" "),
            if why.is_empty() { String::new() } else { format!(": {why}") }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fake() -> Toolchain {
        Toolchain {
            version: "x 1".into(),
            program: "/opt/tc/bin/cc1".into(),
            runtime: Some("/opt/tc/bin/rt".into()),
            binds: vec!["/opt/tc".into(), "/usr/lib/x".into()],
            path: vec!["/opt/tc/bin".into()],
            env: [("TC".to_string(), "1".to_string())].into(),
            skipped: Vec::new(),
        }
    }

    #[test]
    fn names_and_aliases() {
        assert_eq!(names(), &["c", "cpp", "rust", "pascal", "python3", "bash", "java", "go"]);
        for (alias, name) in [
            ("c", "c"),
            ("C++", "cpp"),
            ("cc", "cpp"),
            ("cxx", "cpp"),
            ("rs", "rust"),
            ("pas", "pascal"),
            ("fpc", "pascal"),
            ("py", "python3"),
            ("python", "python3"),
            ("sh", "bash"),
            ("golang", "go"),
            (" java ", "java"),
        ] {
            assert_eq!(get(alias).unwrap().name(), name, "{alias}");
        }
        let sources: Vec<&str> = names().iter().map(|n| get(n).unwrap().source_name()).collect();
        assert_eq!(
            sources,
            [
                "solution.c",
                "solution.cpp",
                "solution.rs",
                "solution.pas",
                "solution.py",
                "solution.sh",
                "Main.java",
                "solution.go"
            ]
        );
    }

    #[test]
    fn unknown_names_list_the_presets() {
        for bad in ["", "cobol", "c#", "python2"] {
            let e = get(bad).unwrap_err();
            assert!(matches!(e, PresetError::Unknown(_)), "{bad}: {e:?}");
            let msg = e.to_string();
            for n in names() {
                assert!(msg.contains(n), "{bad}: {msg}");
            }
            assert!(msg.contains(&format!("`{bad}`")), "{msg}");
        }
    }

    /// Every shipped profile parses, validates with a /box, and keeps to the
    /// preset rules: an empty root, /box as cwd, a /tmp tmpfs, a /dev, no
    /// address-space limit, and the policy of its kind.
    #[test]
    fn shipped_profiles_parse_and_validate() {
        for n in names() {
            let p = get(n).unwrap();
            for (step, text) in [("compile", p.compile_profile()), ("run", p.run_profile())] {
                let mut s = spec::from_toml(text).unwrap_or_else(|e| panic!("{n}-{step}: {e}"));
                s.mounts.push(MountOp::Bind {
                    src: "/var/tmp/box".into(),
                    dst: BOX.into(),
                    try_: false,
                    noexec: false,
                });
                s.validate().unwrap_or_else(|e| panic!("{n}-{step}: {e}"));
                assert!(s.empty_root, "{n}-{step}");
                assert_eq!(s.cwd.as_deref(), Some(Path::new(BOX)), "{n}-{step}");
                assert!(s.limits.pids.is_some(), "{n}-{step}: a process limit");
                assert!(s.limits.address_space.is_none(), "{n}-{step}");
                assert!(
                    s.limits.wall_time.is_none() || step == "compile",
                    "{n}-{step}: the caller sets the run's time"
                );
                if step == "compile" {
                    // What the report's limits say when --compile-time is not given.
                    assert_eq!(s.limits.wall_time, Some(crate::COMPILE_TIME), "{n}-{step}");
                }
                assert!(
                    s.mounts
                        .iter()
                        .any(|m| matches!(m, MountOp::Tmpfs { dst, size: Some(_), .. } if dst == Path::new("/tmp"))),
                    "{n}-{step}"
                );
                assert!(
                    s.mounts.iter().any(|m| matches!(m, MountOp::Dev { dst } if dst == Path::new("/dev"))),
                    "{n}-{step}"
                );
                assert!(s.stdin.is_none() && s.stdout.is_none() && s.stderr.is_none(), "{n}-{step}");
                let policy = s.seccomp.to_string();
                if step == "compile" {
                    assert_eq!(policy, "compile", "{n}");
                    assert_eq!(s.limits.cpu_bandwidth, Some(1.0), "{n}");
                    assert!(s.limits.memory.is_some(), "{n}");
                } else {
                    let want = match *n {
                        "python3" => "python",
                        "java" => "jvm",
                        "go" => "go",
                        "bash" => "bash",
                        _ => "strict",
                    };
                    assert_eq!(policy, want, "{n}");
                    assert!(s.limits.memory.is_none() && s.limits.cpu_bandwidth.is_none(), "{n}: the caller sets them");
                }
                // The file on disk is the embedded one.
                let disk =
                    std::fs::read_to_string(format!("{}/presets/{n}-{step}.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
                assert_eq!(disk, text);
            }
        }
    }

    #[test]
    fn compile_spec_binds_the_box_and_the_toolchain() {
        let tc = fake();
        for n in names() {
            let p = get(n).unwrap();
            let dir = Path::new("/var/tmp/sub");
            let s = p.compile_spec(&tc, dir, true).unwrap();
            s.validate().unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(s.argv[0], "/opt/tc/bin/cc1", "{n}");
            assert!(s.argv.iter().any(|a| a == p.source_name()), "{n}: {:?}", s.argv);
            assert_eq!(
                s.mounts.last(),
                Some(&MountOp::Bind { src: dir.into(), dst: BOX.into(), try_: false, noexec: false }),
                "{n}"
            );
            assert!(s.mounts.contains(&MountOp::RoBind {
                src: "/opt/tc".into(),
                dst: "/opt/tc".into(),
                try_: false,
                noexec: false
            }));
            // /usr/lib/x is under the profile's /usr/lib: not bound twice.
            assert!(!s.mounts.iter().any(|m| m.dst() == Path::new("/usr/lib/x")), "{n}");
            assert!(s.env["PATH"].starts_with("/opt/tc/bin:"), "{n}: {}", s.env["PATH"]);
            assert_eq!(s.env["TC"], "1");
            assert!(s.limits.memory.is_some() && s.limits.cpu_bandwidth == Some(1.0), "{n}");
            let s = p.compile_spec(&tc, dir, false).unwrap();
            s.validate().unwrap();
            assert!(s.limits.memory.is_none() && s.limits.cpu_bandwidth.is_none() && s.limits.cpus.is_none(), "{n}");
            assert!(s.limits.pids.is_some() && s.limits.wall_time.is_some(), "{n}: the other limits stay");
        }
    }

    #[test]
    fn run_spec_binds_the_box_read_only() {
        let mut native = fake();
        native.runtime = None;
        for n in names() {
            let p = get(n).unwrap();
            let interpreted = ["python3", "bash", "java"].contains(n);
            let tc = if interpreted { fake() } else { native.clone() };
            let s = p.run_spec(&tc, Path::new("/var/tmp/sub"), None);
            s.validate().unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(
                s.mounts.last(),
                Some(&MountOp::RoBind { src: "/var/tmp/sub".into(), dst: BOX.into(), try_: false, noexec: false }),
                "{n}"
            );
            assert!(s.limits.memory.is_none() && s.limits.wall_time.is_none(), "{n}");
            let has_tc = s.mounts.iter().any(|m| m.dst() == Path::new("/opt/tc"));
            if interpreted {
                assert_eq!(s.argv[0], "/opt/tc/bin/rt", "{n}");
                assert!(has_tc, "{n}");
            } else {
                assert_eq!(s.argv, ["./solution"], "{n}");
                assert!(!has_tc, "{n}: a native program needs no toolchain");
            }
        }
    }

    #[test]
    fn runtimes_are_told_the_memory() {
        let java = get("java").unwrap();
        let s = java.run_spec(&fake(), Path::new("/b"), Some(256 << 20));
        assert_eq!(s.argv[1], "-Xmx192m", "{:?}", s.argv);
        assert_eq!(s.argv.last().unwrap(), "Main");
        assert!(!java.run_spec(&fake(), Path::new("/b"), None).argv.iter().any(|a| a.starts_with("-Xmx")));
        let go = get("go").unwrap();
        let s = go.run_spec(&fake(), Path::new("/b"), Some(100 << 20));
        assert_eq!(s.env["GOMEMLIMIT"], ((100u64 << 20) / 10 * 9).to_string());
        assert!(!go.run_spec(&fake(), Path::new("/b"), None).env.contains_key("GOMEMLIMIT"));
        assert_eq!(java_heap(1 << 30), (1 << 30) - (128 << 20));
        assert_eq!(java_heap(64 << 20), 32 << 20);
        assert_eq!(java_heap(128 << 20), 96 << 20);
        assert_eq!(java_heap(40 << 20), 20 << 20);
    }

    #[test]
    fn specs_round_trip_through_toml() {
        for n in names() {
            let p = get(n).unwrap();
            let s = p.compile_spec(&fake(), Path::new("/b"), true).unwrap();
            assert_eq!(spec::from_toml(&to_toml(&s).unwrap()).unwrap(), s, "{n}");
            let s = p.run_spec(&fake(), Path::new("/b"), Some(1 << 30));
            assert_eq!(spec::from_toml(&to_toml(&s).unwrap()).unwrap(), s, "{n}");
        }
    }

    #[test]
    fn relative_box_dirs_are_made_absolute() {
        let p = get("c").unwrap();
        let s = p.run_spec(&fake(), Path::new("sub"), None);
        let want = std::env::current_dir().unwrap().join("sub");
        assert_eq!(
            s.mounts.last().unwrap(),
            &MountOp::RoBind { src: want, dst: BOX.into(), try_: false, noexec: false }
        );
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("capsule-presets-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn script(dir: &Path, name: &str, text: &str, mode: u32) {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn search(dir: &Path) -> Search {
        Search { path: Some(dir.as_os_str().to_owned()), home: None }
    }

    #[test]
    fn find_skips_unusable_candidates_and_says_why() {
        let d = scratch("find");
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        for x in [&a, &b, &c] {
            std::fs::create_dir_all(x).unwrap();
        }
        let p = get("c").unwrap();
        let check = |c: &Cand| -> Result<Toolchain, String> {
            let out = probe(c.path, &["-v"], &[])?;
            if out.contains("old") {
                return Err("too old".into());
            }
            Ok(toolchain(c.real, first_line(&out)))
        };
        // Not executable (even root cannot run a file without an x bit),
        // then one the check refuses, then one that works.
        script(&a, "zz-cc", "#!/bin/sh\necho 9\n", 0o644);
        script(&b, "zz-cc", "#!/bin/sh\necho old\n", 0o755);
        script(&c, "zz-cc", "#!/bin/sh\necho 1.2.3\n", 0o755);
        let s = Search { path: Some(std::env::join_paths([&a, &b, &c]).unwrap()), home: None };
        let tc = p.find(&s, "zz-cc", &[], check).unwrap();
        assert_eq!(tc.program, c.join("zz-cc"));
        assert_eq!(tc.version, "1.2.3");
        assert_eq!(tc.skipped.len(), 2, "{:?}", tc.skipped);
        assert!(
            tc.skipped[0].starts_with(&a.join("zz-cc").display().to_string()) && tc.skipped[0].contains("EACCES"),
            "{:?}",
            tc.skipped
        );
        assert_eq!(tc.skipped[1], format!("{}: too old", b.join("zz-cc").display()));
        // Only unusable candidates: Unusable, with each reason and the fix.
        script(&c, "zz-cc", "#!/bin/sh\necho broken >&2\nexit 3\n", 0o755);
        let e = p.find(&s, "zz-cc", &[], check).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PresetError::Unusable { .. }), "{msg}");
        assert!(
            msg.contains("EACCES")
                && msg.contains("too old")
                && msg.contains("broken")
                && msg.contains("exit status: 3"),
            "{msg}"
        );
        assert!(msg.contains("apt-get install gcc"), "{msg}");
        // None at all: NotFound, naming where it looked.
        let e = p.find(&search(&a), "zz-none", &[], check).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PresetError::NotFound { .. }), "{msg}");
        assert!(
            msg.contains(&a.display().to_string()) && msg.contains("/usr/bin") && msg.contains("`zz-none` not found"),
            "{msg}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn probe_times_out_and_reports_failures() {
        let d = scratch("probe");
        script(&d, "ok", "#!/bin/sh\necho \"$LC_ALL $X $1\"\n", 0o755);
        assert_eq!(probe(&d.join("ok"), &["a"], &[("X", "y")]).unwrap(), "C y a\n");
        let e = probe(&d.join("missing"), &[], &[]).unwrap_err();
        assert!(e.contains("ENOENT"), "{e}");
        script(&d, "slow", "#!/bin/sh\nexec sleep 10\n", 0o755);
        let t = Instant::now();
        let e = probe_within(&d.join("slow"), &[], &[], Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("did not finish within 300ms"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        script(&d, "fails", "#!/bin/sh\necho out; echo 'no licence' >&2; exit 2\n", 0o755);
        let e = probe(&d.join("fails"), &["-x"], &[]).unwrap_err();
        assert!(e.contains("fails -x` failed (exit status: 2): out"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_out_of_a_toolchain_become_binds() {
        let d = scratch("links");
        let home = d.join("home");
        let other = d.join("etc-jdk");
        std::fs::create_dir_all(home.join("conf/security")).unwrap();
        std::fs::create_dir_all(other.join("security")).unwrap();
        std::fs::write(other.join("security/java.security"), "x").unwrap();
        std::fs::write(other.join("net.properties"), "x").unwrap();
        std::os::unix::fs::symlink(other.join("security/java.security"), home.join("conf/security/java.security"))
            .unwrap();
        std::os::unix::fs::symlink(other.join("net.properties"), home.join("conf/net.properties")).unwrap();
        // Inside the home, dangling, and too deep: not bound.
        std::os::unix::fs::symlink("security", home.join("conf/inside")).unwrap();
        std::os::unix::fs::symlink(d.join("nothing"), home.join("conf/dangling")).unwrap();
        let got = outside_links(&home.join("conf"), 4);
        // `d` is below /tmp, which is not broad: the bind is its first
        // component below the broad ones.
        let root = bind_root(&other);
        assert_eq!(got, vec![root.clone()], "{got:?}");
        assert!(other.starts_with(&root));
        assert!(outside_links(&home.join("conf"), 1).len() == 1, "net.properties is one level down");
        assert_eq!(
            bind_root(Path::new("/etc/java-17-openjdk/security/java.security")),
            Path::new("/etc/java-17-openjdk")
        );
        assert_eq!(bind_root(Path::new("/usr/share/go-1.19/src")), Path::new("/usr/share/go-1.19"));
        assert_eq!(bind_root(Path::new("/etc/ssl/certs/java/cacerts")), Path::new("/etc/ssl/certs/java"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn detected_binds_are_only_the_extras() {
        let p = get("java").unwrap();
        let mut tc = fake();
        tc.binds = ["/etc/jdk/b", "/usr/lib/jvm/x", "/etc/jdk", "/etc/jdk", "/srv/a", "/usr/lib/x86_64-linux-gnu"]
            .map(PathBuf::from)
            .to_vec();
        p.keep_needed_binds(&mut tc);
        assert_eq!(tc.binds, ["/etc/jdk", "/srv/a"].map(PathBuf::from));
        // A native preset's binds count against its compile profile only.
        let p = get("c").unwrap();
        tc.runtime = None;
        tc.binds = vec!["/usr/include/x".into(), "/usr/bin".into()];
        p.keep_needed_binds(&mut tc);
        assert!(tc.binds.is_empty(), "{:?}", tc.binds);
    }

    #[test]
    fn home_and_coverage() {
        assert_eq!(home_of(Path::new("/usr/bin/gcc")), Some(PathBuf::from("/usr")));
        assert_eq!(home_of(Path::new("/usr/local/go/bin/go")), Some(PathBuf::from("/usr/local/go")));
        assert_eq!(home_of(Path::new("/opt/x/gcc")), None);
        let m = vec![
            MountOp::RoBind { src: "/usr/lib".into(), dst: "/usr/lib".into(), try_: false, noexec: false },
            MountOp::RoBind { src: "/srv/a".into(), dst: "/b".into(), try_: false, noexec: false },
        ];
        assert!(covered(&m, Path::new("/usr/lib/jvm/x")));
        assert!(!covered(&m, Path::new("/usr/lib64")));
        assert!(!covered(&m, Path::new("/srv/a/x")), "shown elsewhere");
    }
}
