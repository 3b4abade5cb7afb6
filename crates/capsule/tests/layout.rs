//! The library's layers, checked: the import direction between its
//! top-level modules (README, "Layout") and what PID 1's code may use.
//!
//! Reads the sources as text. Comments and `#[cfg(test)]` modules are left
//! out (tests may reach across layers); everything else counts, `use`
//! declarations and inline `crate::` paths alike.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module and its layer: a module may use its own layer and
/// the ones below, never one above.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("sys", 1),
    ("proto", 2),
    ("host", 3),
    ("layer", 4),
    ("plan", 5),
    ("child", 6),
    ("supervisor", 7),
    ("endpoints", 8),
    ("sandbox", 9),
    ("check", 9),
];

/// Where `child/` may call functions from; from the other layers below it
/// only types and constants (data the supervisor planned).
const CHILD_CALLS: &[&str] = &["sys", "child"];

/// One source file: its top-level module and its text without comments and
/// test modules.
struct Source {
    path: PathBuf,
    top: String,
    text: String,
}

fn sources(src: &Path) -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    // Files of test modules declared `#[cfg(test)] mod NAME;` in their parent.
    let mut test_files = BTreeSet::new();
    for p in &files {
        let text = fs::read_to_string(p).unwrap();
        let dir = if p.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs") {
            p.parent().unwrap().to_path_buf()
        } else {
            p.with_extension("")
        };
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + 12..];
            let decl = rest.trim_start();
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.split_once(';')).map(|(n, _)| n.trim()) {
                if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    test_files.insert(dir.join(format!("{name}.rs")));
                    test_files.insert(dir.join(name).join("mod.rs"));
                }
            }
        }
    }
    files
        .into_iter()
        .filter(|p| !test_files.contains(p))
        .filter_map(|path| {
            let rel = path.strip_prefix(src).unwrap();
            let first = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
            if first == "lib" || first == "main" {
                return None;
            }
            let raw = fs::read_to_string(&path).unwrap();
            Some(Source { text: without_tests(&without_comments(&raw)), top: first, path })
        })
        .collect()
}

/// The text with `//` comments blanked (string literals kept).
fn without_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for line in s.lines() {
        let b = line.as_bytes();
        let mut in_str = false;
        let mut cut = b.len();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'\\' if in_str => i += 1,
                b'"' => in_str = !in_str,
                b'/' if !in_str && b.get(i + 1) == Some(&b'/') => {
                    cut = i;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// The text without `#[cfg(test)]` items (a module or a function: up to
/// its matching closing brace, or a one-line item).
fn without_tests(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let brace = after.find('{');
        let semi = after.find(';');
        match (brace, semi) {
            (Some(b), Some(sc)) if sc < b => rest = &after[sc + 1..],
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (i, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// Every path that starts with `crate::`, use trees expanded: `use
/// crate::a::{b, c::{D, e}}` gives `a::b`, `a::c::D`, `a::c::e`.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("crate::") {
        let at = from + i;
        from = at + 7;
        // `crate` as a whole word (not `capsule_crate::`), and not `$crate`.
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'$') {
            continue;
        }
        let mut pos = at + 7;
        tree(text, &mut pos, Vec::new(), &mut out);
    }
    out
}

fn skip_ws(text: &str, pos: &mut usize) {
    while text[*pos..].starts_with(|c: char| c.is_whitespace()) {
        *pos += 1;
    }
}

fn ident(text: &str, pos: &mut usize) -> Option<String> {
    let start = *pos;
    while text[*pos..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        *pos += 1;
    }
    (*pos > start).then(|| text[start..*pos].to_string())
}

/// Reads one use tree at `pos` (after a `::`), with `prefix` before it.
fn tree(text: &str, pos: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    loop {
        skip_ws(text, pos);
        if text[*pos..].starts_with('{') {
            *pos += 1;
            loop {
                skip_ws(text, pos);
                if text[*pos..].starts_with('}') {
                    *pos += 1;
                    return;
                }
                tree(text, pos, prefix.clone(), out);
                skip_ws(text, pos);
                if text[*pos..].starts_with(',') {
                    *pos += 1;
                } else if text[*pos..].starts_with('}') {
                    *pos += 1;
                    return;
                } else {
                    return;
                }
            }
        }
        if text[*pos..].starts_with('*') {
            *pos += 1;
            prefix.push("*".into());
            out.push(prefix);
            return;
        }
        let Some(id) = ident(text, pos) else {
            out.push(prefix);
            return;
        };
        prefix.push(id);
        if text[*pos..].starts_with("::") && !text[*pos + 2..].starts_with('<') {
            *pos += 2;
            continue;
        }
        // `as alias` changes nothing about what is imported.
        out.push(prefix);
        return;
    }
}

/// The module paths that exist under `src` (`plan`, `plan::mounts`, ...).
fn module_paths(src: &Path, sources: &[Source]) -> BTreeSet<String> {
    let mut m = BTreeSet::new();
    for s in sources {
        let rel = s.path.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        for n in 1..=parts.len() {
            m.insert(parts[..n].join("::"));
        }
    }
    m
}

/// What is wrong with the sources under `src`: imports against the
/// layers, cycles between top-level modules, functions `child/` takes
/// from above the syscall layer.
fn violations(src: &Path) -> Vec<String> {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let sources = sources(src);
    let modules = module_paths(src, &sources);
    let mut bad = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &sources {
        let Some(&own) = layer.get(s.top.as_str()) else {
            bad.push(format!("{}: top-level module `{}` has no layer in tests/layout.rs", s.path.display(), s.top));
            continue;
        };
        for p in crate_paths(&s.text) {
            let Some(target) = p.first() else { continue };
            if *target == s.top || !modules.contains(target.as_str()) {
                continue;
            }
            graph.entry(s.top.clone()).or_default().insert(target.clone());
            match layer.get(target.as_str()) {
                Some(&t) if t <= own => {}
                _ => bad.push(format!(
                    "{}: `{}` (layer {own}) imports `crate::{}` from a layer above",
                    s.path.display(),
                    s.top,
                    p.join("::")
                )),
            }
            if s.top == "child" && !CHILD_CALLS.contains(&target.as_str()) {
                // Past the module segments, the item must be a type or a
                // constant: not a function, a module alias or a glob.
                let mut n = 1;
                while n < p.len() && modules.contains(p[..=n].join("::").as_str()) {
                    n += 1;
                }
                let item = p.get(n).map(String::as_str).unwrap_or("self");
                if !item.starts_with(|c: char| c.is_ascii_uppercase()) {
                    bad.push(format!(
                        "{}: child/ may take only types and constants from `crate::{}`, not `crate::{}`",
                        s.path.display(),
                        target,
                        p.join("::")
                    ));
                }
            }
        }
    }
    for cycle in cycles(&graph) {
        bad.push(format!("import cycle between top-level modules: {}", cycle.join(" -> ")));
    }
    bad
}

/// Each strongly connected set of more than one module, as a loop.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph.keys().chain(graph.values().flatten()).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) {
            continue;
        }
        let from_n = reach(n);
        if !from_n.contains(*n) {
            continue;
        }
        let mut set: Vec<String> =
            nodes.iter().filter(|m| from_n.contains(**m) && reach(m).contains(*n)).map(|m| (*m).clone()).collect();
        set.sort();
        done.extend(set.iter().cloned());
        set.push(set[0].clone());
        out.push(set);
    }
    out
}

#[test]
fn the_library_keeps_its_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(bad.is_empty(), "the layers of crates/capsule/src (README, \"Layout\") are broken:\n{}", bad.join("\n"));
}

/// The checker finds what it is for: a scratch tree with a cycle, an
/// upward import and a function PID 1 takes from `plan`.
#[test]
fn the_checker_finds_cycles_upward_imports_and_child_calls() {
    let dir = std::env::temp_dir().join(format!("capsule-layout-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let write = |p: &str, text: &str| {
        let p = dir.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    write("lib.rs", "mod sys; mod plan; mod child; mod host;\n");
    write("sys/mod.rs", "// crate::plan::x() in a comment does not count\npub fn f() {}\n");
    write("host.rs", "use crate::sys;\n");
    write(
        "plan/mod.rs",
        "pub mod mounts;\nuse crate::child::{Step, pid1};\n#[cfg(test)]\nmod tests { use crate::supervisor::X; }\n#[cfg(test)]\nmod more;\n",
    );
    write("plan/more.rs", "use crate::supervisor::Y;\n");
    write("plan/mounts.rs", "pub struct MountPlan; pub fn prepare() {}\n");
    write(
        "child/mod.rs",
        "use crate::plan::mounts::{MountPlan, prepare};\nuse crate::sys::{self, f};\nfn g() { crate::plan::mounts::prepare(); let _ = crate::host::sys; }\n",
    );
    let bad = violations(&dir);
    let _ = fs::remove_dir_all(&dir);
    let has = |s: &str| bad.iter().any(|b| b.contains(s));
    assert!(has("imports `crate::child::Step` from a layer above"), "{bad:#?}");
    assert!(has("import cycle between top-level modules: child -> plan -> child"), "{bad:#?}");
    assert!(has("not `crate::plan::mounts::prepare`"), "{bad:#?}");
    assert!(has("not `crate::host::sys`"), "{bad:#?}");
    assert!(!has("MountPlan"), "{bad:#?}");
    assert!(!has("sys::f"), "{bad:#?}");
    assert!(!has("supervisor"), "test modules are left out: {bad:#?}");
    assert!(!has("crate::plan::x"), "comments are left out: {bad:#?}");
    assert_eq!(bad.len(), 6, "{bad:#?}");
}
