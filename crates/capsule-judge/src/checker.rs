//! How `capsule judge` decides whether an output is right (docs/judge.md):
//! the built-in comparisons (`exact`, `tokens`, `float:EPS`) and a checker
//! program run in a sandbox (testlib's `checker input output answer`).
//!
//! The built-in comparisons are pure functions of the two byte strings;
//! what is wrong is said in one line (`line 3: expected `5`, got `6``).

use std::path::PathBuf;

use capsule::error::io_text;

/// What `--checker` named.
#[derive(Debug, Clone, PartialEq)]
pub enum Checker {
    /// Byte-equal, except that whitespace at the end of each line and
    /// empty lines at the end are ignored.
    Exact,
    /// The same whitespace-separated tokens.
    Tokens,
    /// Tokens; two tokens that are both numbers match when their absolute
    /// or relative error is at most EPS.
    Float(f64),
    /// A program run as `PROGRAM input output answer`: exit 0 accepts, 1
    /// or 2 rejects, anything else is a failure of the checker.
    Program(PathBuf),
}

/// The verdict of a comparison: `Ok(())`, or `Err(what differs)`.
pub type Check = Result<(), String>;

impl Checker {
    /// Parses `--checker`: `exact`, `tokens`, `float:EPS`, or the path of
    /// an executable file (`./exact` for a program of that name).
    pub fn parse(s: &str) -> Result<Checker, String> {
        match s {
            "exact" => return Ok(Checker::Exact),
            "tokens" => return Ok(Checker::Tokens),
            _ => {}
        }
        if let Some(eps) = s.strip_prefix("float:") {
            return match eps.trim().parse::<f64>() {
                Ok(e) if e.is_finite() && e >= 0.0 => Ok(Checker::Float(e)),
                _ => Err(format!("`{s}`: `{eps}` is not a tolerance; give a non-negative number, e.g. float:1e-6")),
            };
        }
        if s == "float" {
            return Err("`float` needs a tolerance: float:EPS, e.g. float:1e-6".into());
        }
        if s.is_empty() {
            return Err("empty; give exact, tokens, float:EPS or the path of a checker program".into());
        }
        let p = PathBuf::from(s);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => {
                use std::os::unix::fs::PermissionsExt;
                if m.permissions().mode() & 0o111 == 0 {
                    return Err(format!("`{s}` is not executable (chmod +x it)"));
                }
                Ok(Checker::Program(p))
            }
            Ok(_) => Err(format!("`{s}` is not a file")),
            Err(e) => Err(format!(
                "`{s}` is neither exact, tokens nor float:EPS, and no checker program is there ({})",
                io_text(&e)
            )),
        }
    }

    /// Compares `output` with `answer` for the built-in checkers; None for
    /// a checker program.
    pub fn compare(&self, output: &[u8], answer: &[u8]) -> Option<Check> {
        Some(match self {
            Checker::Exact => exact(output, answer),
            Checker::Tokens => tokens(output, answer, None),
            Checker::Float(eps) => tokens(output, answer, Some(*eps)),
            Checker::Program(_) => return None,
        })
    }
}

/// Whitespace that `exact` ignores at the end of a line (`\r` included, so
/// CRLF files compare equal to LF ones) and `tokens` splits on.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c')
}

/// The lines of `data` with trailing whitespace cut, trailing empty lines
/// dropped.
fn lines(data: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .map(|l| {
            let end = l.iter().rposition(|&b| !is_space(b)).map_or(0, |i| i + 1);
            &l[..end]
        })
        .collect();
    while v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// `exact`: the same lines, but for whitespace at line ends and empty
/// lines at the end.
pub fn exact(output: &[u8], answer: &[u8]) -> Check {
    let (out, ans) = (lines(output), lines(answer));
    for (i, (o, a)) in out.iter().zip(&ans).enumerate() {
        if o != a {
            return Err(format!("line {}: expected {}, got {}", i + 1, show(a), show(o)));
        }
    }
    if out.len() < ans.len() {
        let n = out.len();
        return Err(format!("the output ends after {n} line{}; expected line {} {}", plural(n), n + 1, show(ans[n])));
    }
    if out.len() > ans.len() {
        let n = ans.len();
        return Err(format!("extra output: line {} {} (expected {n} line{})", n + 1, show(out[n]), plural(n)));
    }
    Ok(())
}

/// `tokens` (`eps` None) and `float:EPS`.
pub fn tokens(output: &[u8], answer: &[u8], eps: Option<f64>) -> Check {
    let (out, ans) = (split_tokens(output), split_tokens(answer));
    for (i, (o, a)) in out.iter().zip(&ans).enumerate() {
        let same = match eps {
            Some(eps) => match (number(o), number(a)) {
                (Some(x), Some(y)) => close(x, y, eps),
                _ => o == a,
            },
            None => o == a,
        };
        if !same {
            return Err(format!("token {}: expected {}, got {}", i + 1, show(a), show(o)));
        }
    }
    if out.len() < ans.len() {
        let n = out.len();
        return Err(format!("the output ends after {n} token{}; expected {} next", plural(n), show(ans[n])));
    }
    if out.len() > ans.len() {
        let n = ans.len();
        return Err(format!("extra output: token {} {} (expected {n} token{})", n + 1, show(out[n]), plural(n)));
    }
    Ok(())
}

fn split_tokens(d: &[u8]) -> Vec<&[u8]> {
    d.split(|&b| is_space(b)).filter(|t| !t.is_empty()).collect()
}

/// A token that is a finite decimal number (`12`, `-0.5`, `1e-9`); not
/// `inf`, `nan` or hexadecimal.
fn number(t: &[u8]) -> Option<f64> {
    let first = *t.first()?;
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return None;
    }
    if !t.iter().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// Absolute or relative (to the answer) error at most `eps`.
fn close(got: f64, want: f64, eps: f64) -> bool {
    let diff = (got - want).abs();
    // A tiny allowance for the representation of EPS and the answer.
    let slack = 1e-15 * want.abs().max(1.0);
    diff <= eps + slack || diff <= eps * want.abs() + slack
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A token or line for a message: quoted, non-printable bytes escaped, cut
/// after 40 characters.
pub fn show(s: &[u8]) -> String {
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(s);
    let mut out = String::from("`");
    for (n, c) in text.chars().enumerate() {
        if n == MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: Check) {
        c.unwrap_or_else(|e| panic!("expected a match, got: {e}"));
    }

    fn bad(c: Check) -> String {
        c.expect_err("expected a mismatch")
    }

    #[test]
    fn parse_names_and_programs() {
        assert_eq!(Checker::parse("exact"), Ok(Checker::Exact));
        assert_eq!(Checker::parse("tokens"), Ok(Checker::Tokens));
        assert_eq!(Checker::parse("float:1e-6"), Ok(Checker::Float(1e-6)));
        assert_eq!(Checker::parse("float:0"), Ok(Checker::Float(0.0)));
        assert_eq!(Checker::parse("float: 0.5"), Ok(Checker::Float(0.5)));
        for bad in ["float:", "float:x", "float:-1", "float:inf", "float:nan", "float:1e400"] {
            let e = Checker::parse(bad).unwrap_err();
            assert!(e.contains("not a tolerance"), "{bad}: {e}");
        }
        assert!(Checker::parse("float").unwrap_err().contains("needs a tolerance"));
        assert!(Checker::parse("").unwrap_err().contains("empty"));
        let e = Checker::parse("/nonexistent/checker").unwrap_err();
        assert!(e.contains("neither exact, tokens nor float:EPS") && e.contains("No such file"), "{e}");
        assert!(Checker::parse("/").unwrap_err().contains("not a file"));
        let dir = std::env::temp_dir().join(format!("capsule-checker-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("chk");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Checker::parse(p.to_str().unwrap()).unwrap_err().contains("not executable"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(Checker::parse(p.to_str().unwrap()), Ok(Checker::Program(p.clone())));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Checker::Program(p).compare(b"a", b"a"), None);
    }

    #[test]
    fn exact_ignores_only_line_end_whitespace_and_final_empty_lines() {
        ok(exact(b"3\n", b"3\n"));
        ok(exact(b"3", b"3\n"));
        ok(exact(b"3 \t\r\n\n\n", b"3\n"));
        ok(exact(b"1 2\r\n3 4\r\n", b"1 2\n3 4\n"));
        ok(exact(b"", b""));
        ok(exact(b"\n\n", b""));
        ok(exact(b"a\n\nb\n", b"a\n\nb"));
        // Leading and inner whitespace count, so do empty lines in between.
        let e = bad(exact(b" 3\n", b"3\n"));
        assert_eq!(e, "line 1: expected `3`, got ` 3`");
        assert!(bad(exact(b"1  2\n", b"1 2\n")).starts_with("line 1:"));
        assert!(bad(exact(b"a\nb\n", b"a\n\nb\n")).starts_with("line 2: expected ``, got `b`"));
        assert_eq!(bad(exact(b"1\n2\n", b"1\n3\n")), "line 2: expected `3`, got `2`");
        assert_eq!(bad(exact(b"1\n", b"1\n2\n")), "the output ends after 1 line; expected line 2 `2`");
        assert_eq!(bad(exact(b"", b"7\n")), "the output ends after 0 lines; expected line 1 `7`");
        assert_eq!(bad(exact(b"1\n2\nx\n", b"1\n2\n")), "extra output: line 3 `x` (expected 2 lines)");
        // Byte-exact otherwise: case, non-UTF-8 bytes.
        assert!(exact(b"Yes\n", b"YES\n").is_err());
        ok(exact(b"\xff\xfe\n", b"\xff\xfe"));
        assert!(exact(b"\xff\n", b"\xfe\n").is_err());
    }

    #[test]
    fn tokens_ignore_all_whitespace() {
        ok(tokens(b"1 2 3", b"1\n2\n3\n", None));
        ok(tokens(b"  1\t2\r\n\n3  ", b"1 2 3", None));
        ok(tokens(b"", b"\n \n", None));
        assert_eq!(bad(tokens(b"1 2 4", b"1 2 3", None)), "token 3: expected `3`, got `4`");
        assert_eq!(bad(tokens(b"1 2", b"1 2 3", None)), "the output ends after 2 tokens; expected `3` next");
        assert_eq!(bad(tokens(b"1 2 3 4", b"1 2 3", None)), "extra output: token 4 `4` (expected 3 tokens)");
        // Numbers are text for `tokens`.
        assert!(tokens(b"1.0", b"1", None).is_err());
        assert!(tokens(b"01", b"1", None).is_err());
        assert!(tokens(b"yes", b"YES", None).is_err());
    }

    #[test]
    fn floats_within_absolute_or_relative_error() {
        let e = Some(1e-6);
        ok(tokens(b"1.0000001", b"1", e));
        ok(tokens(b"0.9999995", b"1", e));
        ok(tokens(b"1", b"1.000000", e));
        ok(tokens(b"-0", b"0", e));
        ok(tokens(b"1e-7", b"0", e));
        // Relative: 1e12 with an error of 1e5 is 1e-7 relative.
        ok(tokens(b"1000000100000", b"1e12", e));
        assert!(tokens(b"1000010000000", b"1e12", e).is_err());
        assert!(tokens(b"1.00001", b"1", e).is_err());
        let msg = bad(tokens(b"3 2.5", b"3 2.4", e));
        assert_eq!(msg, "token 2: expected `2.4`, got `2.5`");
        // Exactly at the tolerance passes.
        ok(tokens(b"0.5", b"0.25", Some(0.25)));
        // EPS 0: numerically equal only.
        ok(tokens(b"2.50", b"2.5", Some(0.0)));
        assert!(tokens(b"2.5000001", b"2.5", Some(0.0)).is_err());
        // Words, and tokens that are not both numbers, compare exactly.
        ok(tokens(b"YES 0.5", b"YES 0.5000001", e));
        assert!(tokens(b"yes", b"YES", e).is_err());
        assert!(tokens(b"abc", b"1", e).is_err());
        assert!(tokens(b"inf", b"1e308", e).is_err());
        ok(tokens(b"nan", b"nan", e));
        assert!(tokens(b"nan", b"0", e).is_err());
        assert!(tokens(b"0x10", b"16", e).is_err());
        assert!(tokens(b"1", b"1 2", e).unwrap_err().contains("ends after 1 token;"));
    }

    #[test]
    fn numbers() {
        assert_eq!(number(b"12"), Some(12.0));
        assert_eq!(number(b"-0.5"), Some(-0.5));
        assert_eq!(number(b"+3"), Some(3.0));
        assert_eq!(number(b".5"), Some(0.5));
        assert_eq!(number(b"1e-9"), Some(1e-9));
        for t in [&b"inf"[..], b"-inf", b"nan", b"NaN", b"infinity", b"1e999", b"", b"-", b"1,5", b"0x1", b"1.2.3"] {
            assert_eq!(number(t), None, "{:?}", String::from_utf8_lossy(t));
        }
    }

    #[test]
    fn messages_are_short_and_printable() {
        assert_eq!(show(b"a\tb"), "`a\\tb`");
        assert_eq!(show(&[b'x'; 100]), format!("`{}...`", "x".repeat(40)));
        assert_eq!(show(b"\xff"), "`\u{fffd}`");
    }

    #[test]
    fn compare_dispatches() {
        assert_eq!(Checker::Exact.compare(b"1 2", b"1  2"), Some(Err("line 1: expected `1  2`, got `1 2`".into())));
        assert_eq!(Checker::Tokens.compare(b"1 2", b"1  2"), Some(Ok(())));
        assert_eq!(Checker::Float(0.1).compare(b"1.05", b"1"), Some(Ok(())));
    }
}
