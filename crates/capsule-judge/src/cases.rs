//! The tests of a `--tests DIR`: every `DIR/*.in`, in natural order (`2`
//! before `10`), with its answer `DIR/<stem>.out`, else `DIR/<stem>.ans`.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use capsule::error::io_text;

/// One test.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The file stem (`1`, `sample-2`).
    pub name: String,
    pub input: PathBuf,
    /// The expected output (or, for an interactive problem, whatever the
    /// interactor is given as its second argument).
    pub answer: Option<PathBuf>,
}

/// Lists the tests of `dir`, with absolute paths free of symbolic links
/// (the sandbox resolves them on its own, from `/`). `answers_needed`: a
/// test without an answer file is an error (not for an interactive
/// problem).
pub fn find(dir: &Path, answers_needed: bool) -> Result<Vec<Case>, String> {
    let shown = dir.display();
    let meta = std::fs::metadata(dir).map_err(|e| format!("--tests `{shown}`: {}", io_text(&e)))?;
    if !meta.is_dir() {
        return Err(format!("--tests `{shown}` is not a directory"));
    }
    let dir = &std::fs::canonicalize(dir).map_err(|e| format!("--tests `{shown}`: {}", io_text(&e)))?;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("--tests `{shown}`: cannot list it: {}", io_text(&e)))?;
    let mut cases = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("--tests `{shown}`: cannot list it: {}", io_text(&e)))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".in") else { continue };
        if stem.is_empty() {
            continue;
        }
        let input = real_file(&dir.join(name))?;
        let answer = ["out", "ans"].iter().map(|ext| dir.join(format!("{stem}.{ext}"))).find(|p| p.is_file());
        let answer = answer.map(|a| real_file(&a)).transpose()?;
        if answers_needed && answer.is_none() {
            return Err(format!(
                "test `{stem}`: `{}` has no answer: neither `{stem}.out` nor `{stem}.ans` is in `{shown}`",
                input.display()
            ));
        }
        cases.push(Case { name: stem.to_string(), input, answer });
    }
    if cases.is_empty() {
        return Err(format!("--tests `{shown}` holds no tests (files named NAME.in, with NAME.out or NAME.ans)"));
    }
    cases.sort_by(|a, b| natural(&a.name, &b.name));
    Ok(cases)
}

/// `p` with every symbolic link resolved; it must be a regular file.
fn real_file(p: &Path) -> Result<PathBuf, String> {
    let real = std::fs::canonicalize(p).map_err(|e| format!("`{}`: {}", p.display(), io_text(&e)))?;
    if !real.is_file() {
        return Err(format!("`{}` is not a regular file", p.display()));
    }
    Ok(real)
}

/// Natural order: runs of digits compare as numbers (`2` < `10`, `02` after
/// `2` when otherwise equal), the rest byte by byte.
pub fn natural(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let (dx, rx) = split_digits(x);
                let (dy, ry) = split_digits(y);
                let (tx, ty) = (trim_zeros(dx), trim_zeros(dy));
                let o = tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty));
                if o != Ordering::Equal {
                    return o;
                }
                x = rx;
                y = ry;
            }
            (Some(p), Some(q)) => {
                if p != q {
                    return p.cmp(q);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(n)
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().position(|&b| b != b'0').unwrap_or(s.len());
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["10", "2", "1", "b", "a10", "a2", "a", "01", "sample-10", "sample-9", "100", "9x", "9"];
        v.sort_by(|a, b| natural(a, b));
        assert_eq!(v, ["01", "1", "2", "9", "9x", "10", "100", "a", "a2", "a10", "b", "sample-9", "sample-10"]);
        assert_eq!(natural("007", "7"), "007".cmp("7"));
        assert_eq!(natural("99999999999999999999999", "100000000000000000000000"), Ordering::Less);
        assert_eq!(natural("x", "x"), Ordering::Equal);
    }

    fn dir(files: &[&str]) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "capsule-cases-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for f in files {
            std::fs::write(d.join(f), "x").unwrap();
        }
        d
    }

    #[test]
    fn finds_tests_and_answers() {
        let d = dir(&["10.in", "10.out", "2.in", "2.ans", "1.in", "1.out", "1.ans", "notes.txt", ".in", "x.out"]);
        let d = std::fs::canonicalize(d).unwrap();
        let cases = find(&d, true).unwrap();
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["1", "2", "10"]);
        assert_eq!(cases[0].answer, Some(d.join("1.out")), ".out wins over .ans");
        assert_eq!(cases[1].answer, Some(d.join("2.ans")));
        assert_eq!(cases[2].input, d.join("10.in"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn errors_name_the_problem() {
        let d = dir(&["1.in", "1.out", "2.in"]);
        let e = find(&d, true).unwrap_err();
        assert!(e.contains("test `2`") && e.contains("neither `2.out` nor `2.ans`"), "{e}");
        // Interactive problems need no answers.
        let cases = find(&d, false).unwrap();
        assert_eq!(cases[1].answer, None);
        std::fs::remove_dir_all(&d).unwrap();

        let d = dir(&["1.out", "readme"]);
        std::os::unix::fs::symlink("readme", d.join("4.in")).unwrap();
        let e = find(&d, true).unwrap_err();
        assert!(e.contains("test `4`") && e.contains("has no answer"), "{e}");
        std::fs::remove_file(d.join("4.in")).unwrap();
        let e = find(&d, true).unwrap_err();
        assert!(e.contains("holds no tests"), "{e}");
        let e = find(&d.join("missing"), true).unwrap_err();
        assert!(e.contains("--tests") && e.contains("No such file or directory"), "{e}");
        let e = find(&d.join("readme"), true).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::create_dir(d.join("3.in")).unwrap();
        let e = find(&d, true).unwrap_err();
        assert!(e.contains("3.in` is not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
