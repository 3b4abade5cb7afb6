//! Names as people see them: a path goes to a terminal as is when every
//! byte of it is printable UTF-8, else in double quotes with C escapes
//! (git's quoting): `\a \b \t \n \v \f \r \" \\`, and `\ooo` (octal) for
//! each byte of another control character, of a Unicode format character
//! that reorders or hides text (bidirectional overrides, zero-width), or
//! of an invalid UTF-8 sequence. An escape sequence in a name can then
//! neither erase nor forge a line. Machine output (`--json`) stays exact.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Unicode characters that are printable in Rust's sense but change how
/// the text around them shows.
fn deceptive(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

fn plain(c: char) -> bool {
    !c.is_control() && !deceptive(c) && c != '"' && c != '\\'
}

/// `b` as shown to people: unchanged when plain, else quoted.
pub fn quote(b: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(b) {
        if s.chars().all(plain) {
            return s.to_string();
        }
    }
    let mut out = String::with_capacity(b.len() + 2);
    out.push('"');
    let mut rest = b;
    while !rest.is_empty() {
        let (good, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (g, b) = rest.split_at(e.valid_up_to());
                (std::str::from_utf8(g).expect("valid prefix"), b)
            }
        };
        for c in good.chars() {
            match c {
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\x0b' => out.push_str("\\v"),
                '\x0c' => out.push_str("\\f"),
                '\r' => out.push_str("\\r"),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if plain(c) => out.push(c),
                c => {
                    let mut buf = [0u8; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\{byte:03o}"));
                    }
                }
            }
        }
        if bad.is_empty() {
            break;
        }
        // One invalid byte at a time: what follows may be valid again.
        out.push_str(&format!("\\{:03o}", bad[0]));
        rest = &bad[1..];
    }
    out.push('"');
    out
}

/// A path as shown to people ([`quote`]).
pub fn quote_path(p: &Path) -> String {
    quote(p.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_unchanged_others_quoted_like_git() {
        assert_eq!(quote(b"/home/u/caf\xc3\xa9 x.txt"), "/home/u/caf\u{e9} x.txt");
        assert_eq!(quote(b"/p/x\x1b[2K\rM  evil\nA  forged"), r#""/p/x\033[2K\rM  evil\nA  forged""#);
        assert_eq!(quote(b"bad\xff"), r#""bad\377""#);
        assert_eq!(quote(b"\xe2\x80\xaeexe.txt"), r#""\342\200\256exe.txt""#);
        assert_eq!(quote(b"a\"b\\c\td\x07\x7f"), r#""a\"b\\c\td\a\177""#);
        assert_eq!(quote(b"\xc2\x9b1m"), r#""\302\2331m""#);
        assert_eq!(quote(b"\xf0\x9f\x98\x80\xc3"), r#""😀\303""#);
        assert_eq!(quote(b""), "");
    }
}
