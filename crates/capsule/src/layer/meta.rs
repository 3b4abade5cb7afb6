//! `DIR/layer.json`: the state of each changed path's host original, as it
//! was when the run that changed it ended.
//!
//! ```json
//! {"version": 1, "originals": {
//!   "/etc/foo": {"kind": "file", "size": 12, "mtime_ns": 1700000000123456789, "mode": "0644", "sha256": "…"},
//!   "/etc/new": {"kind": "absent"}}}
//! ```
//! Keys are absolute host paths; a path (or link target) that is not UTF-8
//! is written with `%XX` for each byte of an invalid sequence and `%25`
//! for a `%`, so every key decodes back to its exact bytes.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a host path was when it was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrigKind {
    Absent,
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One recorded original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub kind: OrigKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i64>,
    /// Permission bits as octal text (`"0644"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Hex SHA-256 of a regular file's content (recorded for files the
    /// layer modifies or copied up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symbolic link's target (encoded like the keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl Record {
    pub fn absent() -> Record {
        Record { kind: OrigKind::Absent, size: None, mtime_ns: None, mode: None, sha256: None, target: None }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct MetaFile {
    version: u32,
    #[serde(default)]
    originals: BTreeMap<String, Record>,
}

/// The parsed `layer.json`.
#[derive(Debug, Default, Clone)]
pub struct Meta {
    /// Records by host path.
    pub originals: BTreeMap<PathBuf, Record>,
    /// Keys that are not normalized absolute paths: never used, reported.
    pub bad_keys: Vec<String>,
}

pub const VERSION: u32 = 1;

impl Meta {
    /// Parses `layer.json`'s text; `Err` names what is wrong.
    pub fn parse(text: &str) -> Result<Meta, String> {
        let f: MetaFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if f.version != VERSION {
            return Err(format!("version {} is not supported (this capsule reads version {VERSION})", f.version));
        }
        let mut m = Meta::default();
        for (k, v) in f.originals {
            match decode(&k) {
                Some(p) if is_normalized_abs(&p) => {
                    m.originals.insert(p, v);
                }
                _ => m.bad_keys.push(k),
            }
        }
        Ok(m)
    }

    pub fn to_json(&self) -> String {
        let f = MetaFile {
            version: VERSION,
            originals: self.originals.iter().map(|(k, v)| (encode(k.as_os_str().as_bytes()), v.clone())).collect(),
        };
        let mut s = serde_json::to_string_pretty(&f).expect("serializable");
        s.push('\n');
        s
    }

    /// Drops the records at or below `p`.
    pub fn remove_below(&mut self, p: &Path) {
        self.originals.retain(|k, _| !k.starts_with(p));
    }
}

/// `/a/b` with no `.`, `..`, empty component or trailing slash, no NUL.
pub fn is_normalized_abs(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    if b.first() != Some(&b'/') || b.contains(&0) {
        return false;
    }
    if b == b"/" {
        return true;
    }
    b[1..].split(|&c| c == b'/').all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// Bytes → text that is UTF-8 where the bytes are, `%XX` elsewhere.
pub fn encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    let mut rest = b;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                push_escaped(&mut out, s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                push_escaped(&mut out, std::str::from_utf8(good).expect("valid prefix"));
                let n = e.error_len().unwrap_or(bad.len());
                for byte in &bad[..n] {
                    out.push_str(&format!("%{byte:02X}"));
                }
                rest = &bad[n..];
            }
        }
    }
    out
}

fn push_escaped(out: &mut String, s: &str) {
    for ch in s.chars() {
        if ch == '%' {
            out.push_str("%25");
        } else {
            out.push(ch);
        }
    }
}

/// The inverse of [`encode`]; None for a malformed escape.
pub fn decode_bytes(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

pub fn decode(s: &str) -> Option<PathBuf> {
    decode_bytes(s).map(|b| PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_exactly() {
        for b in [&b"/etc/foo"[..], b"/a%b", b"/lat\xe9in", b"/\xff\xfe%", "/caf\u{e9}".as_bytes()] {
            let e = encode(b);
            assert_eq!(decode_bytes(&e).as_deref(), Some(b), "{e}");
        }
        assert_eq!(encode(b"/a%b"), "/a%25b");
        assert_eq!(encode(b"/x\xff"), "/x%FF");
        assert!(decode_bytes("/bad%zz").is_none());
        assert!(decode_bytes("/bad%2").is_none());
    }

    #[test]
    fn only_normalized_absolute_keys_are_used() {
        let text = r#"{"version": 1, "originals": {
            "/ok/path": {"kind": "absent"},
            "/": {"kind": "dir"},
            "relative": {"kind": "absent"},
            "/a/../etc/passwd": {"kind": "absent"},
            "/a/./b": {"kind": "absent"},
            "/a//b": {"kind": "absent"},
            "/trailing/": {"kind": "absent"}}}"#;
        let m = Meta::parse(text).unwrap();
        let keys: Vec<_> = m.originals.keys().map(|k| k.display().to_string()).collect();
        assert_eq!(keys, ["/", "/ok/path"]);
        assert_eq!(m.bad_keys.len(), 5, "{:?}", m.bad_keys);
    }

    #[test]
    fn version_and_syntax_errors_are_named() {
        assert!(Meta::parse(r#"{"version": 2, "originals": {}}"#).unwrap_err().contains("version 2"));
        assert!(Meta::parse("{").is_err());
        let m = Meta::parse(r#"{"version": 1}"#).unwrap();
        assert!(m.originals.is_empty());
    }

    #[test]
    fn remove_below_keeps_siblings() {
        let mut m = Meta::default();
        for k in ["/a", "/a/b", "/a/b/c", "/ab", "/a-b", "/b"] {
            m.originals.insert(k.into(), Record::absent());
        }
        m.remove_below(Path::new("/a"));
        let keys: Vec<_> = m.originals.keys().map(|k| k.display().to_string()).collect();
        assert_eq!(keys, ["/a-b", "/ab", "/b"]);
        let back = Meta::parse(&m.to_json()).unwrap();
        assert_eq!(back.originals, m.originals);
    }
}
