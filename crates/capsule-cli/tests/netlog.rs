//! The network log (`--net-log`, spec field `net_log`): the exact
//! destinations and counts of a C helper's `connect`, `sendto`, `sendmsg`
//! and `sendmmsg` calls (TCP and UDP over the sandbox's own loopback, IPv4
//! and IPv6, unix sockets by path and abstract name, the i386 ABI), that
//! the calls still work, that sendto without an address is not logged, the
//! table's overflow, the policies (`default`, `strict`, `none`, a file),
//! `--share-net` with a listener on the host, a program's own seccomp
//! listener refused, a FUSE page stalling the read but not PID 1, the
//! summary line, `--meta`, a profile and `capsule serve`.

use capsule_testkit as common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Helper program: one mode per run, prints `key=value` lines. Each mode
/// is both ends of its traffic (the sandbox's loopback is its own).
const HELPER: &str = r#"
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/fuse.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

static const char *en(long r) { return r < 0 ? strerrorname_np(errno) : "OK"; }

static void die(const char *what) {
    printf("error=%s %s\n", what, strerrorname_np(errno));
    exit(1);
}

static struct sockaddr_in sin4(int port) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int udp_bound(int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = sin4(port);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) die("udp bind");
    return s;
}

/* Receives what is pending on a datagram socket; returns the count. */
static int drain(int s) {
    char buf[64];
    int n = 0;
    while (recv(s, buf, sizeof buf, MSG_DONTWAIT) >= 0) n++;
    return n;
}

static long int80(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory", "r8", "r9", "r10", "r11");
    return ret;
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) die(path);
    close(fd);
}

/* A FUSE server that answers INIT, LOOKUP, GETATTR and OPEN of one 4 KiB
   file, and never a READ: whoever faults a page of it in waits for ever
   (or until the server dies). */
static void fuse_serve(int fd) {
    static char buf[1 << 17];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < (ssize_t)sizeof(struct fuse_in_header)) {
            if (n < 0 && errno == EINTR) continue;
            _exit(0);
        }
        struct fuse_in_header *in = (struct fuse_in_header *)buf;
        struct { struct fuse_out_header h; char body[256]; } out;
        memset(&out, 0, sizeof out);
        size_t len = 0;
        struct fuse_attr attr = {0};
        attr.ino = in->nodeid == FUSE_ROOT_ID ? 1 : 2;
        attr.mode = in->nodeid == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0644;
        attr.size = in->nodeid == FUSE_ROOT_ID ? 0 : 4096;
        attr.nlink = 1;
        attr.blksize = 4096;
        switch (in->opcode) {
        case FUSE_INIT: {
            struct fuse_init_out *o = (struct fuse_init_out *)out.body;
            o->major = FUSE_KERNEL_VERSION;
            o->minor = FUSE_KERNEL_MINOR_VERSION;
            o->max_write = 4096;
            o->max_readahead = 4096;
            len = sizeof *o;
            break;
        }
        case FUSE_LOOKUP: {
            struct fuse_entry_out *o = (struct fuse_entry_out *)out.body;
            attr.ino = 2;
            attr.mode = S_IFREG | 0644;
            attr.size = 4096;
            o->nodeid = 2;
            o->attr = attr;
            len = sizeof *o;
            break;
        }
        case FUSE_GETATTR: {
            struct fuse_attr_out *o = (struct fuse_attr_out *)out.body;
            o->attr = attr;
            len = sizeof *o;
            break;
        }
        case FUSE_OPEN: {
            struct fuse_open_out *o = (struct fuse_open_out *)out.body;
            o->fh = 1;
            len = sizeof *o;
            break;
        }
        case FUSE_READ:
            continue; /* never answered */
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
            continue; /* no reply expected */
        default:
            out.h.error = -ENOSYS;
        }
        out.h.len = sizeof out.h + len;
        out.h.unique = in->unique;
        if (write(fd, &out, out.h.len) < 0 && errno != ENOENT) _exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *m = argv[1];
    int port = argc > 2 ? atoi(argv[2]) : 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(m, "tcp")) {
        /* Two clients connect to a listener and each sends a line. */
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = sin4(port);
        int one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0) die("listen");
        char got[64] = "";
        for (int i = 0; i < 2; i++) {
            int c = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
            if (write(c, "hello", 5) != 5) die("write");
            int s = accept(l, NULL, NULL);
            char buf[16] = {0};
            if (s < 0 || read(s, buf, 5) != 5) die("read");
            strcat(got, buf);
            strcat(got, i ? "" : ",");
        }
        printf("tcp_received=%s\n", got);
    } else if (!strcmp(m, "udp4")) {
        /* sendto with an address three times, then a connected socket:
           connect, send, sendto without an address. */
        int r = udp_bound(port);
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = sin4(port);
        for (int i = 0; i < 3; i++)
            if (sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a) != 1) die("sendto");
        int c = socket(AF_INET, SOCK_DGRAM, 0);
        if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
        if (send(c, "y", 1, 0) != 1) die("send");
        if (sendto(c, "z", 1, 0, NULL, 0) != 1) die("sendto null");
        printf("udp4_received=%d\n", drain(r));
    } else if (!strcmp(m, "udp6")) {
        int r = socket(AF_INET6, SOCK_DGRAM, 0);
        struct sockaddr_in6 a = {0};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(port);
        a.sin6_addr = in6addr_loopback;
        if (r < 0 || bind(r, (struct sockaddr *)&a, sizeof a) < 0) {
            printf("udp6=unavailable %s\n", strerrorname_np(errno));
            return 0;
        }
        int s = socket(AF_INET6, SOCK_DGRAM, 0);
        for (int i = 0; i < 2; i++)
            if (sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a) != 1) die("sendto6");
        printf("udp6_received=%d\n", drain(r));
    } else if (!strcmp(m, "msg")) {
        /* sendmsg with msg_name twice, with no name once (connected);
           sendmmsg of three messages: two to PORT, one to PORT+1. */
        int r1 = udp_bound(port), r2 = udp_bound(port + 1);
        struct sockaddr_in a = sin4(port), b = sin4(port + 1);
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        struct iovec iov = {"m", 1};
        struct msghdr h = {0};
        h.msg_name = &a;
        h.msg_namelen = sizeof a;
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        for (int i = 0; i < 2; i++)
            if (sendmsg(s, &h, 0) != 1) die("sendmsg");
        int c = socket(AF_INET, SOCK_DGRAM, 0);
        if (connect(c, (struct sockaddr *)&b, sizeof b) < 0) die("connect");
        h.msg_name = NULL;
        h.msg_namelen = 0;
        if (sendmsg(c, &h, 0) != 1) die("sendmsg connected");
        struct mmsghdr v[3] = {0};
        struct sockaddr_in *to[3] = {&a, &b, &a};
        for (int i = 0; i < 3; i++) {
            v[i].msg_hdr.msg_name = to[i];
            v[i].msg_hdr.msg_namelen = sizeof a;
            v[i].msg_hdr.msg_iov = &iov;
            v[i].msg_hdr.msg_iovlen = 1;
        }
        printf("sendmmsg=%d\n", sendmmsg(s, v, 3, 0));
        printf("received=%d+%d\n", drain(r1), drain(r2));
    } else if (!strcmp(m, "unix")) {
        /* A stream socket by path (argv[2] a directory), a datagram
           socket by abstract name. */
        struct sockaddr_un a = {0};
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof a.sun_path, "%s/s.sock", argv[2]);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0) die("unix listen");
        int c = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) die("unix connect");
        struct sockaddr_un b = {0};
        b.sun_family = AF_UNIX;
        memcpy(b.sun_path, "\0capsule-netlog\\1", 17);
        socklen_t blen = offsetof(struct sockaddr_un, sun_path) + 17;
        int r = socket(AF_UNIX, SOCK_DGRAM, 0);
        if (bind(r, (struct sockaddr *)&b, blen) < 0) die("abstract bind");
        int s = socket(AF_UNIX, SOCK_DGRAM, 0);
        if (sendto(s, "u", 1, 0, (struct sockaddr *)&b, blen) != 1) die("abstract sendto");
        printf("unix=OK abstract_received=%d\n", drain(r));
    } else if (!strcmp(m, "many")) {
        /* sendto N distinct ports (nobody listens: UDP does not care). */
        int n = atoi(argv[3]);
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        int sent = 0;
        for (int i = 0; i < n; i++) {
            struct sockaddr_in a = sin4(port + i);
            sent += sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a) == 1;
        }
        printf("many_sent=%d\n", sent);
    } else if (!strcmp(m, "i386")) {
        /* The i386 ABI from this 64-bit program (int $0x80; its pointers
           must lie below 4 GiB): socketcall(SYS_CONNECT) and connect(). */
        unsigned *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
        if (mem == MAP_FAILED) die("mmap");
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = sin4(port);
        if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0) die("listen");
        memcpy(mem + 64, &a, sizeof a);
        unsigned addr = (unsigned)(unsigned long)(mem + 64);
        int c1 = socket(AF_INET, SOCK_STREAM, 0), c2 = socket(AF_INET, SOCK_STREAM, 0);
        mem[0] = c1; mem[1] = addr; mem[2] = sizeof a;
        long r1 = int80(102, 3, (long)(unsigned long)mem, 0);
        long r2 = int80(362, c2, addr, sizeof a);
        printf("socketcall_connect=%ld connect=%ld\n", r1, r2);
    } else if (!strcmp(m, "refused")) {
        /* connect (a policy may refuse it), then sendto. */
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = sin4(port);
        long r = connect(s, (struct sockaddr *)&a, sizeof a);
        printf("connect=%ld errno=%s\n", r, en(r));
        r = sendto(s, "x", 1, 0, (struct sockaddr *)&a, sizeof a);
        printf("sendto=%ld\n", r);
    } else if (!strcmp(m, "connect-badfd")) {
        struct sockaddr_in a = sin4(port);
        long r = connect(-1, (struct sockaddr *)&a, sizeof a);
        printf("connect=%ld errno=%s\n", r, en(r));
    } else if (!strcmp(m, "ping")) {
        /* Connect to a listener of the host (with --share-net). */
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = sin4(port);
        if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
        if (write(c, "ping", 4) != 4) die("write");
        printf("ping=OK\n");
    } else if (!strcmp(m, "fuse-stall")) {
        /* connect() with its address in a page of a FUSE file whose
           server never answers reads: whoever reads the address (the
           network log) stalls until the server dies. */
        char map[64];
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
            printf("fuse=unavailable unshare %s\n", strerrorname_np(errno));
            return 0;
        }
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1", uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "0 %u 1", gid);
        write_file("/proc/self/gid_map", map);
        int fd = open(argv[2], O_RDWR);
        char opts[128];
        snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
        if (fd < 0 || mkdir("/tmp/f", 0755) < 0 || mount("capsule", "/tmp/f", "fuse", 0, opts) < 0) {
            printf("fuse=unavailable mount %s\n", strerrorname_np(errno));
            return 0;
        }
        pid_t server = fork();
        if (server == 0) fuse_serve(fd);
        int f = open("/tmp/f/file", O_RDONLY);
        if (f < 0) die("open the FUSE file");
        void *page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, f, 0);
        if (page == MAP_FAILED) die("mmap the FUSE file");
        /* Closed now, while the server answers its FLUSH: one sent at exit,
           after the server was killed, would never be answered, and the
           kernel would keep this process (the last holder of /dev/fuse)
           waiting for ever. */
        close(f);
        printf("fuse=mapped\n");
        int s = socket(AF_INET, SOCK_STREAM, 0);
        long r = connect(s, (struct sockaddr *)page, sizeof(struct sockaddr_in));
        printf("connect=%ld errno=%s\n", r, en(r));
        kill(server, SIGKILL);
    } else if (!strcmp(m, "listener")) {
        /* A filter with a listener of the program's own. */
        struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
        struct sock_fprog prog = { 1, f };
        long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
        printf("listener=%ld errno=%s\n", r, en(r));
    } else if (!strcmp(m, "nothing")) {
        printf("nothing=OK\n");
    } else {
        return 2;
    }
    return 0;
}
"#;

fn have_gcc() -> Result<(), String> {
    match Command::new("gcc").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`gcc` is missing (apt-get install gcc libc6-dev)".into()),
    }
}

/// The helper, built once per test in `dir`, world-executable.
fn helper(dir: &Scratch) -> String {
    let src = dir.write("netlog.c", HELPER.as_bytes());
    let out = dir.join("netlog");
    let o = Command::new("gcc").arg("-O1").arg("-o").arg(&out).arg(&src).output().expect("run gcc");
    assert!(o.status.success(), "compiling the helper: {}", String::from_utf8_lossy(&o.stderr));
    chown_to_user(&out);
    out.display().to_string()
}

/// `capsule run -q --net-log OPTS -- ARGV` with a `--json` result.
fn run(opts: &[&str], argv: &[&str]) -> Out {
    let mut c = capsule(&["run", "-q", "--net-log"]);
    c.args(opts).arg("--").args(argv).json();
    c.run()
}

#[track_caller]
fn assert_ok(out: &Out) {
    out.assert_code(0);
    assert_eq!(out.status(), "exited", "{}", out.describe());
}

/// A log entry as the result has it.
fn inet(syscall: &str, address: &str, port: u16, count: u64) -> Value {
    let family = if address.contains(':') { "inet6" } else { "inet" };
    json!({"syscall": syscall, "family": family, "address": address, "port": port, "count": count})
}

#[track_caller]
fn assert_log(out: &Out, want: &[Value]) {
    assert_eq!(out.json()["net_log"], Value::Array(want.to_vec()), "{}", out.describe());
    assert!(out.json().get("net_log_dropped").is_none(), "{}", out.describe());
}

#[test]
fn tcp_and_udp_destinations_are_counted_and_the_traffic_flows() {
    require!("tcp_and_udp_destinations_are_counted_and_the_traffic_flows", userns_available());
    require!("tcp_and_udp_destinations_are_counted_and_the_traffic_flows", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-inet");
    let h = helper(&dir);
    let out = run(&[], &[&h, "tcp", "7001"]);
    assert_ok(&out);
    assert_eq!(out.kv().get("tcp_received"), Some("hello,hello"), "{}", out.describe());
    assert_log(&out, &[inet("connect", "127.0.0.1", 7001, 2)]);

    // sendto with an address ×3, connect ×1; send and sendto(NULL) on the
    // connected socket are not logged, and every datagram arrives.
    let out = run(&[], &[&h, "udp4", "7002"]);
    assert_ok(&out);
    assert_eq!(out.kv().get("udp4_received"), Some("5"), "{}", out.describe());
    assert_log(&out, &[inet("sendto", "127.0.0.1", 7002, 3), inet("connect", "127.0.0.1", 7002, 1)]);

    let out = run(&[], &[&h, "udp6", "7003"]);
    assert_ok(&out);
    match out.kv().get("udp6") {
        Some(why) => skip(
            "tcp_and_udp_destinations_are_counted_and_the_traffic_flows (IPv6)",
            &format!("no IPv6 loopback: {why}"),
        ),
        None => {
            assert_eq!(out.kv().get("udp6_received"), Some("2"), "{}", out.describe());
            assert_log(&out, &[inet("sendto", "::1", 7003, 2)]);
        }
    }
}

#[test]
fn sendmsg_and_sendmmsg_names_are_logged() {
    require!("sendmsg_and_sendmmsg_names_are_logged", userns_available());
    require!("sendmsg_and_sendmmsg_names_are_logged", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-msg");
    let h = helper(&dir);
    let out = run(&[], &[&h, "msg", "7010"]);
    assert_ok(&out);
    let kv = out.kv();
    assert_eq!(kv.get("sendmmsg"), Some("3"), "{}", out.describe());
    // 2 sendmsg + 2 of sendmmsg to 7010; 1 connected sendmsg + 1 of
    // sendmmsg to 7011.
    assert_eq!(kv.get("received"), Some("4+2"), "{}", out.describe());
    assert_log(
        &out,
        &[
            inet("sendmsg", "127.0.0.1", 7010, 2),
            inet("connect", "127.0.0.1", 7011, 1),
            inet("sendmmsg", "127.0.0.1", 7010, 2),
            inet("sendmmsg", "127.0.0.1", 7011, 1),
        ],
    );
}

#[test]
fn unix_socket_paths_and_abstract_names() {
    require!("unix_socket_paths_and_abstract_names", userns_available());
    require!("unix_socket_paths_and_abstract_names", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-unix");
    let h = helper(&dir);
    let out = run(&[], &[&h, "unix", "/tmp"]);
    assert_ok(&out);
    assert_eq!(out.kv().get("unix"), Some("OK abstract_received=1"), "{}", out.describe());
    assert_log(
        &out,
        &[
            json!({"syscall": "connect", "family": "unix", "address": "/tmp/s.sock", "count": 1}),
            json!({"syscall": "sendto", "family": "unix", "address": "@capsule-netlog\\\\1", "count": 1}),
        ],
    );
}

#[test]
fn a_full_table_counts_what_it_drops() {
    require!("a_full_table_counts_what_it_drops", userns_available());
    require!("a_full_table_counts_what_it_drops", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-many");
    let h = helper(&dir);
    let out = run(&[], &[&h, "many", "20000", "300"]);
    assert_ok(&out);
    assert_eq!(out.kv().get("many_sent"), Some("300"), "{}", out.describe());
    let log = out.json()["net_log"].as_array().unwrap_or_else(|| panic!("{}", out.describe())).clone();
    assert_eq!(log.len(), 256, "{}", out.describe());
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e, &inet("sendto", "127.0.0.1", 20000 + i as u16, 1), "{}", out.describe());
    }
    assert_eq!(out.json()["net_log_dropped"], 44, "{}", out.describe());
}

#[test]
fn policies_win_and_none_gets_a_filter_for_the_log() {
    require!("policies_win_and_none_gets_a_filter_for_the_log", userns_available());
    require!("policies_win_and_none_gets_a_filter_for_the_log", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-policies");
    let h = helper(&dir);
    // strict: a program without network calls has an empty log; connect
    // is the policy's to kill, not the log's to let through.
    let out = run(&["--seccomp", "strict"], &[&h, "nothing"]);
    assert_ok(&out);
    assert_log(&out, &[]);
    let out = run(&["--seccomp", "strict"], &[&h, "connect-badfd", "7020"]);
    assert_eq!(out.status(), "forbidden-syscall", "{}", out.describe());
    assert_eq!(out.json()["syscall"], "connect", "{}", out.describe());
    assert!(!out.stdout.contains("connect="), "{}", out.describe());
    assert_log(&out, &[]);
    // default: the call runs (and fails: a bad descriptor), logged.
    let out = run(&["--seccomp", "default"], &[&h, "connect-badfd", "7020"]);
    assert_ok(&out);
    assert_eq!(out.kv().get("connect"), Some("-1 errno=EBADF"), "{}", out.describe());
    assert_log(&out, &[inet("connect", "127.0.0.1", 7020, 1)]);
    // A policy's errno wins too: connect refused by the filter, not
    // logged; sendto logged.
    let file = dir.write(
        "refuse.toml",
        b"default_action = \"allow\"\n[[rule]]\nsyscall = \"connect\"\naction = \"errno ECONNREFUSED\"\n",
    );
    let out = run(&["--seccomp", &file.display().to_string()], &[&h, "refused", "7021"]);
    assert_ok(&out);
    let kv = out.kv();
    assert_eq!(kv.get("connect"), Some("-1 errno=ECONNREFUSED"), "{}", out.describe());
    assert_eq!(kv.get("sendto"), Some("1"), "{}", out.describe());
    assert_log(&out, &[inet("sendto", "127.0.0.1", 7021, 1)]);
    // none: a filter that only logs (Seccomp: 2), which also sees the
    // i386 ABI the policy lets through.
    let out = run(&["--seccomp", "none"], &["/bin/sh", "-c", "grep Seccomp: /proc/self/status"]);
    assert_ok(&out);
    assert_eq!(out.stdout.split_whitespace().collect::<Vec<_>>(), ["Seccomp:", "2"], "{}", out.describe());
    assert_log(&out, &[]);
    let out = run(&["--seccomp", "none"], &[&h, "udp4", "7022"]);
    assert_ok(&out);
    assert_log(&out, &[inet("sendto", "127.0.0.1", 7022, 3), inet("connect", "127.0.0.1", 7022, 1)]);
    // The log's listener is the only one: a program's own is refused.
    for policy in ["default", "none"] {
        let out = run(&["--seccomp", policy], &[&h, "listener"]);
        assert_ok(&out);
        assert_eq!(out.kv().get("listener"), Some("-1 errno=EBUSY"), "{policy}: {}", out.describe());
    }
    // Without the log, `none` is no filter at all.
    let mut c = capsule(&["run", "-q", "--seccomp", "none", "--", "/bin/sh", "-c", "grep Seccomp: /proc/self/status"]);
    let out = c.json().run();
    assert_ok(&out);
    assert_eq!(out.stdout.split_whitespace().collect::<Vec<_>>(), ["Seccomp:", "0"], "{}", out.describe());
    assert!(out.json().get("net_log").is_none(), "{}", out.describe());
    let out = run(&["--seccomp", "none"], &[&h, "i386", "7023"]);
    assert_ok(&out);
    let kv = out.kv();
    if kv.get("socketcall_connect").is_some_and(|v| v.starts_with(&format!("-{} ", libc::ENOSYS))) {
        skip("policies_win_and_none_gets_a_filter_for_the_log (i386)", "the kernel has no IA32 emulation");
        return;
    }
    assert_eq!(kv.get("socketcall_connect"), Some("0 connect=0"), "{}", out.describe());
    assert_log(&out, &[inet("i386:connect", "127.0.0.1", 7023, 2)]);
}

/// PID 1 has another process read the address: one whose page the
/// program serves itself (FUSE) and never delivers stalls that reader, not
/// PID 1, which still ends the run at its wall-time limit.
#[test]
fn a_stalled_read_does_not_stall_pid1() {
    require!("a_stalled_read_does_not_stall_pid1", userns_available());
    require!("a_stalled_read_does_not_stall_pid1", have_gcc());
    if !std::path::Path::new("/dev/fuse").exists() {
        skip("a_stalled_read_does_not_stall_pid1", "/dev/fuse is missing (modprobe fuse)");
        return;
    }
    let _g = procs_shared();
    let dir = Scratch::new("netlog-fuse");
    let h = helper(&dir);
    // (/dev is read-only; --dev-bind lets the program open the node.)
    let opts = ["--no-landlock", "--dev-bind", "/dev/fuse", "/tmp/fuse", "--wall-time", "1s"];
    let out = run(&opts, &[&h, "fuse-stall", "/tmp/fuse"]);
    if let Some(why) = out.kv().get("fuse").filter(|v| v.starts_with("unavailable")) {
        skip("a_stalled_read_does_not_stall_pid1", &format!("cannot mount FUSE in a user namespace: {why}"));
        return;
    }
    assert_eq!(out.kv().get("fuse"), Some("mapped"), "{}", out.describe());
    assert_eq!(out.status(), "wall-time-limit", "{}", out.describe());
    assert!(out.elapsed < Duration::from_secs(20), "{}", out.describe());
    // The call never ran, so nothing was recorded.
    assert!(!out.stdout.contains("connect="), "{}", out.describe());
    assert_log(&out, &[]);
}

#[test]
fn share_net_logs_a_connection_to_the_host() {
    require!("share_net_logs_a_connection_to_the_host", userns_available());
    require!("share_net_logs_a_connection_to_the_host", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-share");
    let h = helper(&dir);
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen on the host's loopback");
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).map(|_| b.to_vec())
    });
    let out = run(&["--share-net"], &[&h, "ping", &port.to_string()]);
    assert_ok(&out);
    assert_eq!(out.kv().get("ping"), Some("OK"), "{}", out.describe());
    assert_eq!(server.join().unwrap().expect("read the ping"), b"ping");
    assert_log(&out, &[inet("connect", "127.0.0.1", port, 1)]);
}

#[test]
fn summary_line_meta_and_profile() {
    require!("summary_line_meta_and_profile", userns_available());
    require!("summary_line_meta_and_profile", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-summary");
    let h = helper(&dir);
    let profile = dir.write("p.toml", b"net_log = true\n");
    let mut c = capsule(&["run", "--profile", &profile.display().to_string(), "--", &h, "udp4", "7030"]);
    let out = c.meta().run();
    out.assert_code(0);
    let line = "capsule: network: sendto 127.0.0.1:7030 \u{d7}3, connect 127.0.0.1:7030 \u{d7}1";
    assert!(out.stderr.lines().any(|l| l == line), "no `{line}`; {}", out.describe());
    let meta = out.meta.clone().unwrap_or_default();
    assert!(
        meta.lines().any(|l| l == "net_log:sendto 127.0.0.1:7030 \u{d7}3, connect 127.0.0.1:7030 \u{d7}1"),
        "{meta}"
    );
    // -q: no summary, and no network line either.
    let out = capsule(&["run", "-q", "--net-log", "--", &h, "udp4", "7030"]).run();
    out.assert_code(0);
    assert!(!out.stderr.contains("capsule:"), "{}", out.describe());
    // An empty log says so.
    let out = capsule(&["run", "--net-log", "--", &h, "nothing"]).run();
    out.assert_code(0);
    assert!(out.stderr.lines().any(|l| l == "capsule: network: none"), "{}", out.describe());
    // Without --net-log, nothing about the network.
    let out = capsule(&["run", "--", &h, "udp4", "7030"]).run();
    out.assert_code(0);
    assert!(!out.stderr.contains("network"), "{}", out.describe());
}

#[test]
fn serve_returns_the_log() {
    require!("serve_returns_the_log", userns_available());
    require!("serve_returns_the_log", have_gcc());
    let _g = procs_shared();
    let dir = Scratch::new("netlog-serve");
    let h = helper(&dir);
    let requests = [
        json!({"id": 1, "spec": {"argv": [&h, "udp4", "7040"], "net_log": true}}),
        json!({"id": 2, "spec": {"argv": [&h, "udp4", "7040"]}}),
        json!({"id": 3, "spec": {"argv": [&h, "tcp", "7041"], "net_log": true, "seccomp": "none"}}),
    ];
    let text: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let path: PathBuf = dir.write("requests", text.as_bytes());
    let capsule_bin = h_capsule();
    let mut child = as_user(&["timeout", "60", &capsule_bin, "serve"])
        .stdin(std::fs::File::open(&path).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn capsule serve");
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    let responses: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let result = |id: u64| {
        responses
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["result"].clone())
            .unwrap_or_else(|| panic!("no response {id}: {stdout}\n{stderr}"))
    };
    let r1 = result(1);
    assert_eq!(r1["status"], "exited", "{r1}");
    assert_eq!(
        r1["net_log"],
        json!([inet("sendto", "127.0.0.1", 7040, 3), inet("connect", "127.0.0.1", 7040, 1)]),
        "{r1}"
    );
    let r2 = result(2);
    assert_eq!(r2["status"], "exited", "{r2}");
    assert!(r2.get("net_log").is_none(), "{r2}");
    let r3 = result(3);
    assert_eq!(r3["net_log"], json!([inet("connect", "127.0.0.1", 7041, 2)]), "{r3}");
    let _ = std::io::stderr().flush();
}

fn h_capsule() -> String {
    h().capsule.display().to_string()
}
