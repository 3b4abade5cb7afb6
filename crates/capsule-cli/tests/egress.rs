//! Egress by name (`--allow-host`, spec field `egress`, docs/egress.md):
//! real HTTP servers on the host's loopback that the tests start, names
//! mapped to them by the run's own resolver table (`--resolve-host`), curl
//! and Python inside as the programs. Allowed, denied and wildcard hosts,
//! local addresses refused whatever the name (rebinding, metadata), plain
//! HTTP, CONNECT, SOCKS5, direct connections and programs that ignore the
//! proxy, a large transfer, many concurrent connections, an upstream that
//! fails, and the `network` report of each.

use capsule_testkit as common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// An HTTP/1.1 server on the host's 127.0.0.1: `/big/N` answers N bytes,
/// any other path `hello PATH`. Keeps every request line it saw.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    conns: Arc<AtomicUsize>,
}

impl Server {
    fn start() -> Server {
        let l = TcpListener::bind("127.0.0.1:0").expect("listen on the host's loopback");
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (seen.clone(), conns.clone());
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                c2.fetch_add(1, SeqCst);
                let s3 = s2.clone();
                std::thread::spawn(move || serve_one(c, &s3));
            }
        });
        Server { port, seen, conns }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(c: TcpStream, seen: &Mutex<Vec<String>>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut head = vec![line.trim_end().to_string()];
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        head.push(h.trim_end().to_string());
    }
    seen.lock().unwrap().push(head.join("|"));
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut w = c;
    if let Some(n) = path.strip_prefix("/big/").and_then(|n| n.parse::<usize>().ok()) {
        let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n");
        let chunk = vec![b'x'; 1 << 16];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            if w.write_all(&chunk[..k]).is_err() {
                return;
            }
            left -= k;
        }
    } else {
        let body = format!("hello {path}");
        let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    }
}

/// `capsule run -q --json OPTS -- sh -c SCRIPT`.
fn run(opts: &[&str], script: &str) -> Out {
    let mut c = capsule(&["run", "-q"]);
    c.args(opts).args(&["--", "/bin/sh", "-c", script]).json();
    c.run()
}

fn network(out: &Out) -> Vec<Value> {
    out.json
        .as_ref()
        .and_then(|j| j["network"].as_array().cloned())
        .unwrap_or_else(|| panic!("no network report; {}", out.describe()))
}

/// The report's entry for this host (or direct address), via and verdict.
fn entry<'a>(net: &'a [Value], host: &str, via: &str, verdict: &str) -> &'a Value {
    net.iter()
        .find(|e| (e["host"] == host || e["address"] == host) && e["via"] == via && e["verdict"] == verdict)
        .unwrap_or_else(|| panic!("no {via} {verdict} entry for {host} in {net:#?}"))
}

fn have_curl() -> Result<(), String> {
    if std::path::Path::new("/usr/bin/curl").exists() {
        Ok(())
    } else {
        Err("no /usr/bin/curl".into())
    }
}

fn have_python() -> Result<(), String> {
    if std::path::Path::new("/usr/bin/python3").exists() {
        Ok(())
    } else {
        Err("no /usr/bin/python3".into())
    }
}

#[test]
fn plain_http_to_an_allowed_host_is_proxied_and_reported() {
    require!("plain_http_to_an_allowed_host_is_proxied_and_reported", userns_available());
    require!("plain_http_to_an_allowed_host_is_proxied_and_reported", have_curl());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let out = run(
        &["--allow-host", "allowed.test", "--resolve-host", "allowed.test=127.0.0.1", "--allow-local"],
        &format!("env | grep -c -i '^[a-z_]*proxy=' ; curl -sS http://allowed.test:{p}/a?b=1"),
    );
    out.assert_code(0);
    assert!(out.stdout.ends_with("hello /a?b=1"), "{}", out.describe());
    // HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, their lowercase forms, npm's, yarn's and pip's.
    assert_eq!(out.stdout.lines().next(), Some("13"), "{}", out.describe());
    // Origin form onward, the Host header kept, no proxy headers, one request per connection.
    let seen = srv.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("GET /a?b=1 HTTP/1.1|"), "{seen:?}");
    assert!(seen[0].contains(&format!("|Host: allowed.test:{p}")), "{seen:?}");
    assert!(seen[0].contains("|Connection: close") && !seen[0].contains("Proxy-"), "{seen:?}");
    let net = network(&out);
    assert_eq!(net.len(), 1, "{net:#?}");
    let e = entry(&net, "allowed.test", "http", "allowed");
    assert_eq!(e["address"], "127.0.0.1");
    assert_eq!(e["port"], p);
    assert_eq!(e["rule"], "allowed.test");
    assert_eq!(e["count"], 1);
    assert!(e["bytes_sent"].as_u64().unwrap() > 0 && e["bytes_received"].as_u64().unwrap() > 0, "{e}");
    // The one-line form on stderr without -q.
    let mut c = capsule(&["run"]);
    c.args(&["--allow-host", "allowed.test", "--resolve-host", "allowed.test=127.0.0.1", "--allow-local"]);
    let out = c.args(&["--", "/usr/bin/curl", "-sS", &format!("http://allowed.test:{p}/")]).run();
    out.assert_code(0);
    let want = format!("capsule: egress: allowed.test:{p} via http allowed by allowed.test \u{d7}1 (");
    assert!(out.stderr.lines().any(|l| l.starts_with(&want)), "no `{want}`; {}", out.describe());
}

#[test]
fn refused_hosts_get_a_403_naming_the_rule_and_the_fix() {
    require!("refused_hosts_get_a_403_naming_the_rule_and_the_fix", userns_available());
    require!("refused_hosts_get_a_403_naming_the_rule_and_the_fix", have_curl());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let out = run(
        &[
            "--allow-host",
            "*.wild.test",
            "--deny-host",
            "bad.wild.test",
            "--resolve-host",
            "a.wild.test=127.0.0.1",
            "--resolve-host",
            "bad.wild.test=127.0.0.1",
            "--resolve-host",
            "wild.test=127.0.0.1",
            "--allow-local",
        ],
        &format!(
            "for h in a.wild.test:{p} bad.wild.test:{p} wild.test:{p} other.test:8443; do \
               curl -sS -D - http://$h/ | tr -d '\\r' | grep -E '^(HTTP|X-Proxy-Error|capsule|hello)'; echo; done"
        ),
    );
    out.assert_code(0);
    let blocks: Vec<&str> = out.stdout.split("\n\n").collect();
    assert!(blocks[0].contains("HTTP/1.1 200") && blocks[0].contains("hello /"), "{}", out.describe());
    assert!(blocks[1].contains("HTTP/1.1 403 Forbidden\nX-Proxy-Error: blocked-by-denylist\n"), "{}", out.describe());
    assert!(
        blocks[1].contains(&format!("capsule: bad.wild.test:{p} is refused by a --deny-host rule")),
        "{}",
        out.describe()
    );
    // `*.wild.test` covers subdomains only.
    assert!(blocks[2].contains("X-Proxy-Error: blocked-by-allowlist"), "{}", out.describe());
    assert!(
        blocks[2].contains(&format!(
            "capsule: wild.test:{p} is not in this run's allowed hosts; --allow-host wild.test:{p} would allow it"
        )),
        "{}",
        out.describe()
    );
    assert!(blocks[3].contains("X-Proxy-Error: blocked-by-allowlist"), "{}", out.describe());
    // Only the allowed one reached the server.
    assert_eq!(srv.seen().len(), 1, "{:?}", srv.seen());
    let net = network(&out);
    assert_eq!(entry(&net, "a.wild.test", "http", "allowed")["rule"], "*.wild.test");
    assert_eq!(entry(&net, "bad.wild.test", "http", "refused")["rule"], "deny-host bad.wild.test");
    assert_eq!(entry(&net, "wild.test", "http", "refused")["rule"], "no allow-host");
    assert_eq!(entry(&net, "other.test", "http", "refused")["port"], 8443);
}

#[test]
fn local_addresses_are_refused_whatever_the_name() {
    require!("local_addresses_are_refused_whatever_the_name", userns_available());
    require!("local_addresses_are_refused_whatever_the_name", have_curl());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    // A name that resolves (rebinds) to loopback, one with a public and a
    // private address, the cloud metadata addresses as literals: allowed by
    // name, refused by address, before any connection (so no traffic
    // leaves for the public one either).
    let out = run(
        &[
            "--allow-host",
            "*",
            "--resolve-host",
            "rebind.test=127.0.0.1",
            "--resolve-host",
            "mixed.test=93.184.216.34,10.1.2.3",
        ],
        &format!(
            "for u in http://rebind.test:{p}/ http://mixed.test/ http://169.254.169.254/latest/meta-data/ \
               'http://[fd00:ec2::254]/' http://127.0.0.1:{p}/; do \
               curl -sS --noproxy '' -D - \"$u\" | tr -d '\\r' | grep -E '^(HTTP|X-Proxy-Error|capsule)'; echo; done"
        ),
    );
    out.assert_code(0);
    let blocks: Vec<&str> = out.stdout.split("\n\n").filter(|b| !b.trim().is_empty()).collect();
    assert_eq!(blocks.len(), 5, "{}", out.describe());
    for b in &blocks {
        assert!(
            b.contains("HTTP/1.1 403 Forbidden\nX-Proxy-Error: blocked-local-address\n"),
            "{b}; {}",
            out.describe()
        );
        assert!(b.contains("--allow-local would allow it"), "{b}");
    }
    assert!(blocks[0].contains("127.0.0.1 is loopback"), "{}", blocks[0]);
    assert!(blocks[1].contains("10.1.2.3 is private"), "{}", blocks[1]);
    assert!(blocks[2].contains("169.254.169.254 is a cloud metadata address"), "{}", blocks[2]);
    assert!(blocks[3].contains("fd00:ec2::254 is a cloud metadata address"), "{}", blocks[3]);
    assert!(srv.seen().is_empty() && srv.conns.load(SeqCst) == 0, "the server was reached");
    let net = network(&out);
    let e = entry(&net, "rebind.test", "http", "refused");
    assert_eq!(e["rule"], "127.0.0.1 is loopback; allow-local");
    assert_eq!(e["address"], "127.0.0.1");
    assert_eq!(entry(&net, "169.254.169.254", "http", "refused")["address"], "169.254.169.254");
}

#[test]
fn connect_tunnels_and_socks5_reach_allowed_hosts_only() {
    require!("connect_tunnels_and_socks5_reach_allowed_hosts_only", userns_available());
    require!("connect_tunnels_and_socks5_reach_allowed_hosts_only", have_curl());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let opts = ["--allow-host", "ok.test", "--resolve-host", "ok.test=127.0.0.1", "--allow-local"];
    let out = run(
        &opts,
        &format!(
            "curl -sS -p http://ok.test:{p}/tunnel; echo; \
             curl -sS -x socks5h://127.0.0.1:3128 http://ok.test:{p}/socks; echo; \
             curl -sS -x socks5h://127.0.0.1:3128 http://no.test:{p}/ 2>&1; echo socks-refused=$?; \
             curl -sS -p http://no.test:{p}/ 2>&1; echo connect-refused=$?"
        ),
    );
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "hello /tunnel", "{}", out.describe());
    assert_eq!(lines[1], "hello /socks", "{}", out.describe());
    // curl: 97, the SOCKS proxy refused; 56, the CONNECT got a 403.
    assert!(out.stdout.contains("socks-refused=97"), "{}", out.describe());
    assert!(out.stdout.contains("connect-refused=56") && out.stdout.contains("403"), "{}", out.describe());
    // The tunnel carried the request as the program sent it.
    assert!(srv.seen().iter().any(|s| s.starts_with("GET /tunnel HTTP/1.1|")), "{:?}", srv.seen());
    let net = network(&out);
    assert!(entry(&net, "ok.test", "connect", "allowed")["bytes_received"].as_u64().unwrap() > 0);
    assert_eq!(entry(&net, "ok.test", "socks", "allowed")["address"], "127.0.0.1");
    assert_eq!(entry(&net, "no.test", "socks", "refused")["rule"], "no allow-host");
    assert_eq!(entry(&net, "no.test", "connect", "refused")["rule"], "no allow-host");
}

#[test]
fn direct_connections_and_programs_ignoring_the_proxy_reach_nothing() {
    require!("direct_connections_and_programs_ignoring_the_proxy_reach_nothing", userns_available());
    require!("direct_connections_and_programs_ignoring_the_proxy_reach_nothing", have_python());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let script = format!(
        "import socket\n\
         for a in [('192.0.2.1', 80), ('127.0.0.1', {p}), ('2001:db8::1', 443)]:\n\
         \x20   fam = socket.AF_INET6 if ':' in a[0] else socket.AF_INET\n\
         \x20   s = socket.socket(fam)\n\
         \x20   try:\n\
         \x20       s.connect(a); print(a[0], 'connected')\n\
         \x20   except OSError as e:\n\
         \x20       print(a[0], 'failed', e.errno)\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         try:\n\
         \x20   u.sendto(b'q', ('192.0.2.53', 53)); print('udp sent')\n\
         except OSError as e:\n\
         \x20   print('udp failed', e.errno)\n"
    );
    // Without Landlock the network alone stops them: no route out, and the
    // host's loopback is not the run's (nothing listens there).
    let out =
        run(&["--allow-host", "*", "--allow-local", "--no-landlock"], &format!("/usr/bin/python3 -c \"{script}\""));
    out.assert_code(0);
    let want = "192.0.2.1 failed 101\n127.0.0.1 failed 111\n2001:db8::1 failed 101\nudp failed 101\n";
    assert_eq!(out.stdout, want, "{}", out.describe());
    // With it (Linux >= 6.7), TCP connects go to the proxy's port only: EACCES first.
    let out = run(&["--allow-host", "*", "--allow-local"], &format!("/usr/bin/python3 -c \"{script}\""));
    out.assert_code(0);
    if out.json.as_ref().is_some_and(|j| j["landlock"] == "full") {
        let want = "192.0.2.1 failed 13\n127.0.0.1 failed 13\n2001:db8::1 failed 13\nudp failed 101\n";
        assert_eq!(out.stdout, want, "{}", out.describe());
    }
    assert_eq!(srv.conns.load(SeqCst), 0, "the host's server was reached");
    let net = network(&out);
    let d = entry(&net, "192.0.2.1", "direct", "refused");
    assert_eq!(d["port"], 80);
    assert_eq!(d["count"], 1);
    assert!(d["rule"].as_str().unwrap().starts_with("no route"), "{d}");
    entry(&net, "2001:db8::1", "direct", "refused");
    entry(&net, "192.0.2.53", "direct", "refused");
    // The run's own loopback is not egress.
    assert!(!net.iter().any(|e| e["address"] == "127.0.0.1"), "{net:#?}");
    // Without --net-log, the log itself stays out of the result.
    assert!(out.json.as_ref().unwrap().get("net_log").is_none(), "{}", out.describe());
}

#[test]
fn a_large_transfer_and_many_concurrent_connections() {
    require!("a_large_transfer_and_many_concurrent_connections", userns_available());
    require!("a_large_transfer_and_many_concurrent_connections", have_curl());
    require!("a_large_transfer_and_many_concurrent_connections", have_python());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let big = 64 << 20;
    let script = format!(
        "import threading, urllib.request\n\
         res = []\n\
         def get(i):\n\
         \x20   res.append(urllib.request.urlopen('http://many.test:{p}/n%d' % i, timeout=60).read())\n\
         ts = [threading.Thread(target=get, args=(i,)) for i in range(48)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         print('ok', sum(1 for i, r in enumerate(sorted(res)) if r.startswith(b'hello /n')))\n"
    );
    let out = run(
        &["--allow-host", "many.test", "--resolve-host", "many.test=127.0.0.1", "--allow-local"],
        &format!(
            "curl -sS -o /dev/null -w '%{{size_download}}\\n' http://many.test:{p}/big/{big} && \
             /usr/bin/python3 -c \"{script}\""
        ),
    );
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], big.to_string(), "{}", out.describe());
    assert_eq!(lines[1], "ok 48", "{}", out.describe());
    let net = network(&out);
    assert_eq!(net.len(), 1, "{net:#?}");
    let e = entry(&net, "many.test", "http", "allowed");
    assert_eq!(e["count"], 49);
    assert!(e["bytes_received"].as_u64().unwrap() > big, "{e}");
}

#[test]
fn a_failing_upstream_or_proxy_leaves_the_run_without_network() {
    require!("a_failing_upstream_or_proxy_leaves_the_run_without_network", userns_available());
    require!("a_failing_upstream_or_proxy_leaves_the_run_without_network", have_curl());
    let _g = procs_shared();
    // A port nothing listens on.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let srv = Server::start();
    let out = run(
        &["--allow-host", "down.test", "--resolve-host", "down.test=127.0.0.1", "--allow-local"],
        &format!(
            "curl -sS -D - http://down.test:{dead}/ | tr -d '\\r' | grep -E '^(HTTP|X-Proxy-Error)'; \
             grep -vc Iface /proc/net/route; grep -c ':' /proc/net/dev; \
             curl -sS --noproxy '*' http://127.0.0.1:{}/ 2>/dev/null; echo direct=$?",
            srv.port
        ),
    );
    out.assert_code(0);
    let want = "HTTP/1.1 502 Bad Gateway\nX-Proxy-Error: connect-failed\n0\n1\ndirect=7\n";
    assert_eq!(out.stdout, want, "{}", out.describe());
    let net = network(&out);
    let e = entry(&net, "down.test", "http", "allowed");
    assert!(e["error"].as_str().unwrap().contains("Connection refused"), "{e}");
    assert_eq!(srv.conns.load(SeqCst), 0);
}

#[test]
fn the_program_cannot_take_the_proxys_port() {
    require!("the_program_cannot_take_the_proxys_port", userns_available());
    require!("the_program_cannot_take_the_proxys_port", have_python());
    let _g = procs_shared();
    // The program takes the proxy's port itself: impossible while the
    // proxy listens (EADDRINUSE), and connecting elsewhere leads nowhere.
    let script = "import socket, errno\n\
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        try:\n\
        \x20   s.bind(('127.0.0.1', 3128)); print('bound')\n\
        except OSError as e:\n\
        \x20   print('bind', errno.errorcode[e.errno])\n";
    let out = run(&["--allow-host", "x.test"], &format!("/usr/bin/python3 -c \"{script}\""));
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), "bind EADDRINUSE", "{}", out.describe());
}

#[test]
fn egress_spec_errors_name_the_field() {
    require!("egress_spec_errors_name_the_field", userns_available());
    let _g = procs_shared();
    let out = capsule(&["run", "--allow-host", "a.*.test", "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(
        out.stderr.contains("egress.allow_hosts[0]") && out.stderr.contains("wildcards only as `*.` first"),
        "{}",
        out.describe()
    );
    let out = capsule(&["run", "--share-net", "--allow-host", "a.test", "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("egress") && out.stderr.contains("share_net"), "{}", out.describe());
    let out = capsule(&["run", "--allow-host", "@nosuch", "--", "/bin/true"]).run();
    out.assert_code(125);
    assert!(out.stderr.contains("@pypi"), "{}", out.describe());
    // A profile's [egress] table, a group, and flags added to it.
    let dir = Scratch::new("egress-profile");
    let profile =
        dir.write("p.toml", b"[egress]\nallow_hosts = [\"@pypi\"]\ndeny_hosts = [\"files.pythonhosted.org\"]\n");
    let out = run(
        &["--profile", &profile.display().to_string(), "--allow-host", "extra.test"],
        "curl -s -D - http://files.pythonhosted.org/ | tr -d '\\r' | grep X-Proxy; \
         curl -s -D - http://other.test/ | tr -d '\\r' | grep X-Proxy",
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "X-Proxy-Error: blocked-by-denylist\nX-Proxy-Error: blocked-by-allowlist\n",
        "{}",
        out.describe()
    );
    let net = network(&out);
    assert_eq!(entry(&net, "files.pythonhosted.org", "http", "refused")["rule"], "deny-host files.pythonhosted.org");
}

/// With `--explain`, what the proxy refused is among the run's
/// `violations` (kind `network`, the host by name, the rule, the option
/// that would allow it), and so is a direct connection past the proxy,
/// whose fix is the proxy, not `--share-net`.
#[test]
fn refusals_are_violations_with_explain() {
    require!("refusals_are_violations_with_explain", userns_available());
    require!("refusals_are_violations_with_explain", have_curl());
    let _g = procs_shared();
    let srv = Server::start();
    let p = srv.port;
    let out = run(
        &[
            "--explain",
            "--allow-host",
            "ok.test",
            "--deny-host",
            "no.ok.test",
            "--resolve-host",
            "ok.test=127.0.0.1",
            "--allow-local",
        ],
        &format!(
            "curl -sS -o /dev/null http://other.test:{p}/; curl -sS -o /dev/null http://no.ok.test:{p}/; \
             curl -sS --noproxy '*' --max-time 5 -o /dev/null http://192.0.2.1:{p}/; true"
        ),
    );
    out.assert_code(0);
    let v = out.json.as_ref().and_then(|j| j["violations"].as_array().cloned()).unwrap_or_default();
    let find = |host: &str| {
        v.iter().find(|e| e["kind"] == "network" && e["host"] == host).unwrap_or_else(|| panic!("{host}: {v:#?}"))
    };
    let other = find("other.test");
    assert_eq!((other["port"].as_u64(), other["syscall"].as_str()), (Some(p as u64), Some("proxy (http)")), "{other}");
    assert_eq!(other["fix"], format!("--allow-host other.test:{p}"), "{other}");
    assert!(find("no.ok.test")["fix"].as_str().unwrap().starts_with("none while --deny-host no.ok.test"), "{v:#?}");
    let direct = find("192.0.2.1");
    // Landlock's port rule refuses the TCP connect first where it holds; else the missing route.
    let full = out.json.as_ref().is_some_and(|j| j["landlock"] == "full");
    assert_eq!(direct["errno"], if full { "EACCES" } else { "ENETUNREACH" }, "{direct}");
    assert!(direct["fix"].as_str().unwrap().contains("through the proxy"), "{direct}");
    assert!(out.stderr.contains(&format!("network other.test:{p} (proxy (http))")), "{}", out.describe());
    assert!(srv.seen().is_empty(), "{:?}", srv.seen());
}
