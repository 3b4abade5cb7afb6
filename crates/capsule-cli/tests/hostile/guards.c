/* Issue 20, items 5, 6, 12: around a run's limits with other protocols,
 * families and allocation modes.
 *   guards mptcp     (under --tcp-connect 1) MPTCP and SMC reach a TCP
 *                    listener on a port the rule does not list
 *   guards vsock     AF_VSOCK, which no network namespace confines
 *   guards keepsize [FILE]  (under --output-limit 1M) blocks past the size */
#include "hostile.h"
#include <arpa/inet.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#define IPPROTO_SMC_ 256
#ifndef AF_SMC
#define AF_SMC 43
#endif

struct space_resv_ {
    short l_type, l_whence;
    long long l_start, l_len;
    int l_sysid;
    unsigned l_pid;
    int l_pad[4];
};
#define FS_IOC_RESVSP64_ _IOW('X', 42, struct space_resv_)

/* socket() of a protocol around the port rules: fails, or connects to the
 * listener at `to` (ESCAPED). */
static void around(const char *what, int family, int protocol, const struct sockaddr *to, socklen_t len) {
    char name[64];
    snprintf(name, sizeof name, "%s-socket", what);
    int s = socket(family, SOCK_STREAM, protocol);
    if (s < 0) {
        out("CONTAINED %s %s", name, en(errno));
        return;
    }
    out("OPENED %s", name);
    if (!to) { close(s); return; }
    snprintf(name, sizeof name, "%s-connect", what);
    expect_fail(name, connect(s, to, len));
    close(s);
}

static int mptcp(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t n = sizeof a;
    if (l < 0 || bind(l, (void *)&a, sizeof a) || listen(l, 8) || getsockname(l, (void *)&a, &n)) {
        out("INFO listener %s", en(errno));
        return 1;
    }
    out("INFO listening on 127.0.0.1:%d", ntohs(a.sin_port));
    /* The rule holds for plain TCP (Landlock: EACCES). */
    int t = socket(AF_INET, SOCK_STREAM, 0);
    if (t >= 0) out("RULE tcp-connect %s", connect(t, (void *)&a, sizeof a) ? en(errno) : "OK");
    around("mptcp", AF_INET, IPPROTO_MPTCP, (void *)&a, sizeof a);
    around("mptcp6", AF_INET6, IPPROTO_MPTCP, NULL, 0);
    around("smc-inet", AF_INET, IPPROTO_SMC_, (void *)&a, sizeof a);
    around("smc-family", AF_SMC, 0, NULL, 0);
    DONE();
    return 0;
}

static int vsock(void) {
    int s = socket(AF_VSOCK, SOCK_STREAM, 0);
    if (s < 0) {
        out("CONTAINED vsock-socket %s", en(errno));
    } else {
        struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = 47011 };
        if (bind(s, (void *)&a, sizeof a) == 0)
            out("ESCAPED vsock-bind a host vsock port (47011)");
        else
            out("OPENED vsock-socket (bind: %s)", en(errno));
    }
    int d = socket(AF_VSOCK, SOCK_DGRAM, 0);
    if (d < 0) out("CONTAINED vsock-dgram %s", en(errno));
    else out("OPENED vsock-dgram");
    DONE();
    return 0;
}

static int keepsize(const char *path) {
    signal(SIGXFSZ, SIG_IGN);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    char page[4096];
    memset(page, 'x', sizeof page);
    if (fd < 0 || write(fd, page, sizeof page) != (ssize_t)sizeof page) {
        out("INFO file %s", en(errno));
        return 1;
    }
    const long big = 16L << 20;
    struct stat st;
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, big) == 0 && fstat(fd, &st) == 0)
        out("ESCAPED keepsize-fallocate %lld bytes of blocks behind a size of %lld", (long long)st.st_blocks * 512,
            (long long)st.st_size);
    else
        out("CONTAINED keepsize-fallocate %s", en(errno));
    if (fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, big) == 0)
        out("ESCAPED keepsize-zero-range");
    else
        out("CONTAINED keepsize-zero-range %s", en(errno));
    struct space_resv_ r = { .l_whence = SEEK_SET, .l_start = 0, .l_len = big };
    if (ioctl(fd, FS_IOC_RESVSP64_, &r) == 0 && fstat(fd, &st) == 0)
        out("ESCAPED keepsize-resvsp64 %lld bytes of blocks behind a size of %lld", (long long)st.st_blocks * 512,
            (long long)st.st_size);
    else
        out("CONTAINED keepsize-resvsp64 %s", en(errno));
    /* INSERT_RANGE grows the size without RLIMIT_FSIZE's check (ext4). */
    if (fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, big) == 0 && fstat(fd, &st) == 0)
        out("ESCAPED grow-insert-range to a size of %lld", (long long)st.st_size);
    else
        out("CONTAINED grow-insert-range %s", en(errno));
    /* Growing the size is RLIMIT_FSIZE's: EFBIG. */
    if (fallocate(fd, 0, 0, big) == 0)
        out("ESCAPED grow-fallocate to %ld bytes", big);
    else
        out("CONTAINED grow-fallocate %s", en(errno));
    /* Punching a hole frees blocks: it works. */
    out("PUNCH %s", fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) ? en(errno) : "OK");
    if (fstat(fd, &st) == 0) out("INFO size %lld blocks %lld", (long long)st.st_size, (long long)st.st_blocks);
    DONE();
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "mptcp")) return mptcp();
    if (!strcmp(mode, "vsock")) return vsock();
    if (!strcmp(mode, "keepsize")) return keepsize(argc > 2 ? argv[2] : "/tmp/guards-keepsize");
    out("INFO usage: guards mptcp|vsock|keepsize");
    return 2;
}
