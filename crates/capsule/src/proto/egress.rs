//! Egress by name (`egress` of the run spec, docs/egress.md): host
//! patterns, the rules' verdict on a destination, which addresses are
//! local (never reached without `allow_local`), the named host groups,
//! and the variables that point a run's programs at the proxy.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// The proxy's port on the run's own loopback (HTTP and SOCKS5 alike: the
/// first byte tells them apart). Fixed, so runs of one shape share their
/// Landlock rules; each run's network is its own.
pub const PROXY_PORT: u16 = 3128;
/// The proxy's address inside the run.
pub const PROXY_ADDR: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Most patterns `allow_hosts` and `deny_hosts` may hold together (after groups).
pub const MAX_PATTERNS: usize = 4096;

/// `egress`: the run reaches hosts by name through a proxy outside its
/// network, and nothing else. Present (even empty): the proxy runs; an
/// empty `allow_hosts` lets nothing out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Egress {
    /// Host patterns the run may reach: `example.com`, `*.example.com`
    /// (its subdomains, not itself), `*` (any name), `10.1.2.3`,
    /// `[2001:db8::1]`, each with an optional `:port` (default: any port),
    /// or a group, `@pypi` (docs/egress.md).
    pub allow_hosts: Vec<String>,
    /// Patterns refused even when allowed (deny wins).
    pub deny_hosts: Vec<String>,
    /// Let the proxy connect to loopback, private, link-local and metadata
    /// addresses (local registries, tests); refused otherwise, whatever the
    /// name.
    pub allow_local: bool,
    /// Names the proxy resolves to these addresses instead of asking the
    /// host's resolver (a hosts file of the run's own). The addresses are
    /// checked like any other: a local one still needs `allow_local`.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// Ask the client about a host no pattern names instead of refusing it
    /// (`capsule serve`'s JSON lines only: docs/protocol.md, "Asks"). A
    /// deny pattern or a local address is never asked about.
    pub ask: bool,
    /// How long the proxy waits for an answer before refusing (default 60 s).
    #[serde(with = "crate::proto::units::opt_duration")]
    pub ask_timeout: Option<std::time::Duration>,
}

/// How long an ask waits for its answer unless `ask_timeout` says.
pub const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// Every name and address.
    Any,
    /// This name or address literal (lowercase; IPv6 without brackets).
    Exact(String),
    /// Names ending in this suffix (`.example.com`), not the suffix itself.
    Suffix(String),
}

/// One parsed pattern, with the text it came from (the rule reports name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub host: HostMatch,
    pub port: Option<u16>,
    pub text: String,
}

/// Named host groups: `@name` in `allow_hosts` or `deny_hosts`.
pub const GROUPS: &[(&str, &str, &[&str])] = &[
    (
        "apt",
        "Debian and Ubuntu package archives",
        &[
            "deb.debian.org",
            "security.debian.org",
            "*.debian.org",
            "archive.ubuntu.com",
            "security.ubuntu.com",
            "*.archive.ubuntu.com",
            "ports.ubuntu.com",
        ],
    ),
    ("pypi", "the Python Package Index (pip, uv, poetry)", &["pypi.org", "files.pythonhosted.org"]),
    ("npm", "the npm registry (npm, yarn, pnpm)", &["registry.npmjs.org", "registry.yarnpkg.com"]),
    ("crates", "crates.io (cargo)", &["crates.io", "index.crates.io", "static.crates.io", "static.rust-lang.org"]),
    ("go", "Go modules (the module proxy and checksum database)", &["proxy.golang.org", "sum.golang.org"]),
    (
        "github",
        "GitHub (git over HTTPS, the API, release downloads)",
        &[
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "objects.githubusercontent.com",
            "raw.githubusercontent.com",
            "release-assets.githubusercontent.com",
        ],
    ),
];

impl Egress {
    /// Checks every pattern and resolver entry; `field` is `egress`.
    pub fn validate(&self) -> Result<(), SpecError> {
        let (allow, deny) = self.patterns()?;
        if allow.len() + deny.len() > MAX_PATTERNS {
            return Err(SpecError::new("egress", format!("more than {MAX_PATTERNS} host patterns")));
        }
        for name in self.resolve.keys() {
            if normalize_name(name).is_none() {
                return Err(SpecError::new(
                    format!("egress.resolve.{name:?}"),
                    "not a host name (letters, digits, `-`, `_` and dots)",
                ));
            }
        }
        if self.ask_timeout.is_some() && !self.ask {
            return Err(SpecError::new("egress.ask_timeout", "only with `ask: true`"));
        }
        if self.ask_timeout.is_some_and(|t| t.is_zero() || t > std::time::Duration::from_secs(3600)) {
            return Err(SpecError::new("egress.ask_timeout", "between 1 ms and 1 hour"));
        }
        for (name, addrs) in &self.resolve {
            if addrs.is_empty() {
                return Err(SpecError::new(format!("egress.resolve.{name}"), "give at least one address"));
            }
        }
        Ok(())
    }

    /// The allow and deny patterns, groups expanded.
    pub fn patterns(&self) -> Result<(Vec<Pattern>, Vec<Pattern>), SpecError> {
        let parse = |field: &str, list: &[String]| -> Result<Vec<Pattern>, SpecError> {
            let mut out = Vec::new();
            for (i, p) in list.iter().enumerate() {
                let err = |msg: String| SpecError::new(format!("egress.{field}[{i}]"), msg);
                match p.strip_prefix('@') {
                    Some(g) => {
                        let (_, _, hosts) = GROUPS.iter().find(|(n, _, _)| *n == g).ok_or_else(|| {
                            let names: Vec<String> = GROUPS.iter().map(|(n, _, _)| format!("@{n}")).collect();
                            err(format!("no host group {p:?}; the groups are {}", names.join(", ")))
                        })?;
                        for h in *hosts {
                            let mut pat = Pattern::parse(h).map_err(&err)?;
                            pat.text = format!("{h} ({p})");
                            out.push(pat);
                        }
                    }
                    None => out.push(Pattern::parse(p).map_err(err)?),
                }
            }
            Ok(out)
        };
        Ok((parse("allow_hosts", &self.allow_hosts)?, parse("deny_hosts", &self.deny_hosts)?))
    }
}

impl Pattern {
    /// `host`, `*.domain`, `*`, an IPv4 address or `[IPv6]`, with an optional `:port`.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let text = s.trim();
        let (host, port) = split_host_port(text).ok_or_else(|| {
            format!(
                "{text:?} is not a host pattern (`example.com`, `*.example.com`, `*`, an address; `:PORT` optional)"
            )
        })?;
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| format!("{p:?} is not a port"))?),
        };
        let host = if host == "*" {
            HostMatch::Any
        } else if let Some(rest) = host.strip_prefix("*.") {
            let name = normalize_name(rest).ok_or_else(|| format!("{rest:?} is not a host name"))?;
            HostMatch::Suffix(format!(".{name}"))
        } else {
            HostMatch::Exact(
                normalize_host(host)
                    .ok_or_else(|| format!("{host:?} is not a host name or address (wildcards only as `*.` first)"))?,
            )
        };
        Ok(Pattern { host, port, text: text.to_string() })
    }

    /// Whether it covers `host` (normalized) on `port`.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match &self.host {
            HostMatch::Any => true,
            HostMatch::Exact(h) => h == host,
            HostMatch::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
}

/// `host[:port]`, `[v6][:port]`; a bare IPv6 address has no port.
pub fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return match after {
            "" => Some((h, None)),
            a => Some((h, Some(a.strip_prefix(':')?))),
        };
    }
    match s.matches(':').count() {
        0 => Some((s, None)),
        1 => s.split_once(':').map(|(h, p)| (h, Some(p))),
        _ => s.parse::<Ipv6Addr>().ok().map(|_| (s, None)),
    }
}

/// A host name as matched: lowercase, no final dot; None unless made of
/// letters, digits, `-` and `_` in dot-separated labels (so that every name
/// recorded or printed is plain).
pub fn normalize_name(s: &str) -> Option<String> {
    let s = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(s)
}

/// A name or an address literal (IPv6 without brackets), normalized;
/// addresses in their canonical form.
pub fn normalize_host(s: &str) -> Option<String> {
    let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        // `127.1`, `2130706433`: forms resolvers read as addresses; refused.
        return None;
    }
    normalize_name(s)
}

/// What the rules say of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by this pattern.
    Allowed(String),
    /// Refused by this deny pattern.
    Denied(String),
    /// No allow pattern covers it.
    NotAllowed,
}

/// The rules of one run, parsed once.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub allow: Vec<Pattern>,
    pub deny: Vec<Pattern>,
}

impl Rules {
    pub fn new(e: &Egress) -> Result<Rules, SpecError> {
        let (allow, deny) = e.patterns()?;
        Ok(Rules { allow, deny })
    }

    /// The verdict on `host` (normalized) at `port`: deny wins.
    pub fn verdict(&self, host: &str, port: u16) -> Verdict {
        if let Some(p) = self.deny.iter().find(|p| p.matches(host, port)) {
            return Verdict::Denied(p.text.clone());
        }
        match self.allow.iter().find(|p| p.matches(host, port)) {
            Some(p) => Verdict::Allowed(p.text.clone()),
            None => Verdict::NotAllowed,
        }
    }
}

/// Why an address is local (not reached without `allow_local`), or None
/// for a public one. Addresses embedding an IPv4 one (mapped, NAT64, 6to4)
/// are judged by it.
pub fn local_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => local_v4(a),
        IpAddr::V6(a) => {
            let s = a.segments();
            let o = a.octets();
            let v4 = |i: usize| Ipv4Addr::new(o[i], o[i + 1], o[i + 2], o[i + 3]);
            if let Some(m) = a.to_ipv4_mapped() {
                return local_v4(m).map(|_| "an IPv4-mapped local address");
            }
            if a.is_unspecified() {
                return Some("the unspecified address");
            }
            if a.is_loopback() {
                return Some("loopback");
            }
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return local_v4(v4(12)).map(|_| "a NAT64 address of a local one");
            }
            if s[0] == 0x2002 {
                return local_v4(v4(2)).map(|_| "a 6to4 address of a local one");
            }
            if s[0..6] == [0, 0, 0, 0, 0, 0] {
                return Some("an IPv4-compatible address (deprecated)");
            }
            if a == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                return Some("a cloud metadata address");
            }
            match s[0] {
                x if x & 0xfe00 == 0xfc00 => Some("a unique local address (fc00::/7)"),
                x if x & 0xffc0 == 0xfe80 => Some("link-local"),
                x if x & 0xffc0 == 0xfec0 => Some("site-local"),
                x if x & 0xff00 == 0xff00 => Some("multicast"),
                0x2001 if s[1] == 0x0db8 => Some("a documentation address"),
                0x2001 if s[1] == 0 => Some("a Teredo address"),
                0x0100 if s[1..4] == [0, 0, 0] => Some("a discard address"),
                _ => None,
            }
        }
    }
}

fn local_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    match o {
        [169, 254, 169, 254] | [169, 254, 170, 2] | [100, 100, 100, 200] => Some("a cloud metadata address"),
        [0, ..] => Some("the unspecified network"),
        [127, ..] => Some("loopback"),
        [10, ..] => Some("private"),
        [172, b, ..] if b & 0xf0 == 16 => Some("private"),
        [192, 168, ..] => Some("private"),
        [169, 254, ..] => Some("link-local"),
        [100, b, ..] if b & 0xc0 == 64 => Some("shared (carrier-grade NAT)"),
        [192, 0, 0, _] => Some("IETF protocol assignments"),
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Some("a documentation address"),
        [198, b, ..] if b & 0xfe == 18 => Some("a benchmarking address"),
        [a, ..] if a >= 224 => Some("multicast or reserved"),
        _ => None,
    }
}

/// The variables that point a run's programs at the proxy (set unless the
/// spec sets them itself): the usual ones, lower- and uppercase, and
/// those npm, yarn and pip read.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let http = format!("http://{PROXY_ADDR}:{PROXY_PORT}");
    let socks = format!("socks5h://{PROXY_ADDR}:{PROXY_PORT}");
    let none = "localhost,127.0.0.1,::1".to_string();
    let mut v = Vec::new();
    for (k, val) in [("HTTP_PROXY", &http), ("HTTPS_PROXY", &http), ("ALL_PROXY", &socks), ("NO_PROXY", &none)] {
        v.push((k, val.clone()));
    }
    for (k, val) in [("http_proxy", &http), ("https_proxy", &http), ("all_proxy", &socks), ("no_proxy", &none)] {
        v.push((k, val.clone()));
    }
    for k in ["npm_config_proxy", "npm_config_https_proxy", "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "PIP_PROXY"] {
        v.push((k, http.clone()));
    }
    // git and curl read `http_proxy`/`https_proxy`/`all_proxy` (git's `https://` remotes too).
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> Rules {
        let e = Egress {
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
            deny_hosts: deny.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        e.validate().unwrap();
        Rules::new(&e).unwrap()
    }

    #[test]
    fn patterns_and_verdicts() {
        let r = rules(&["example.com", "*.example.org", "api.test:443", "10.1.2.3", "[2001:db8::1]:80"], &[]);
        assert_eq!(r.verdict("example.com", 80), Verdict::Allowed("example.com".into()));
        assert_eq!(r.verdict("www.example.com", 80), Verdict::NotAllowed);
        assert_eq!(r.verdict("a.b.example.org", 1), Verdict::Allowed("*.example.org".into()));
        assert_eq!(r.verdict("example.org", 1), Verdict::NotAllowed);
        assert_eq!(r.verdict("evilexample.org", 1), Verdict::NotAllowed);
        assert_eq!(r.verdict("api.test", 443), Verdict::Allowed("api.test:443".into()));
        assert_eq!(r.verdict("api.test", 80), Verdict::NotAllowed);
        assert_eq!(r.verdict("10.1.2.3", 5), Verdict::Allowed("10.1.2.3".into()));
        assert_eq!(r.verdict("2001:db8::1", 80), Verdict::Allowed("[2001:db8::1]:80".into()));
        let r = rules(&["*"], &["*.bad.test", "good.test:22"]);
        assert_eq!(r.verdict("x.bad.test", 80), Verdict::Denied("*.bad.test".into()));
        assert_eq!(r.verdict("good.test", 22), Verdict::Denied("good.test:22".into()));
        assert_eq!(r.verdict("good.test", 443), Verdict::Allowed("*".into()));
        assert_eq!(rules(&[], &[]).verdict("a.test", 1), Verdict::NotAllowed);
    }

    #[test]
    fn groups_expand() {
        let r = rules(&["@pypi"], &[]);
        assert_eq!(r.verdict("files.pythonhosted.org", 443), Verdict::Allowed("files.pythonhosted.org (@pypi)".into()));
        let e = Egress { allow_hosts: vec!["@nope".into()], ..Default::default() };
        assert!(e.validate().unwrap_err().to_string().contains("@pypi"));
    }

    #[test]
    fn bad_patterns() {
        for p in ["", "a b", "*x.com", "a.*.com", "x.com:0", "x.com:99999", "[::1", "ex%61mple.com", "127.1", "a..b"] {
            assert!(Pattern::parse(p).is_err(), "{p:?} parsed");
        }
        assert_eq!(Pattern::parse("EXAMPLE.com.").unwrap().host, HostMatch::Exact("example.com".into()));
    }

    #[test]
    fn local_addresses() {
        for a in [
            "127.0.0.1",
            "10.0.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "ff02::1",
        ] {
            assert!(local_kind(a.parse().unwrap()).is_some(), "{a} is local");
        }
        for a in ["93.184.216.34", "172.32.0.1", "2606:2800:220:1::1", "::ffff:93.184.216.34", "64:ff9b::5db8:d822"] {
            assert_eq!(local_kind(a.parse().unwrap()), None, "{a} is public");
        }
    }
}
