/* Shared helpers of the hostile programs (tests/hostile.rs builds each
 * attack with gcc -O2 -static). Every program prints machine-checkable
 * lines on stdout, unbuffered:
 *   CONTAINED <what> <ERRNO>   an attempt failed with that errno
 *   ESCAPED <what> <detail>    an attempt succeeded where it must not
 *   OPENED <what>              a syscall that is attack surface (not an
 *                              escape by itself) succeeded
 *   INFO <anything>            context for the failure message
 *   DONE                       the program got to its end
 */
#ifndef HOSTILE_H
#define HOSTILE_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((unused)) static const char *en(int e) {
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

__attribute__((unused)) static void out(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    /* write(2) directly: no stdio buffer lost when the process is killed. */
    for (int off = 0; off < n;) {
        ssize_t w = write(1, buf + off, n - off);
        if (w <= 0) return;
        off += w;
    }
}

/* r < 0: CONTAINED what ERRNO (errno of the call); else ESCAPED. */
__attribute__((unused)) static long expect_fail(const char *what, long r) {
    int e = errno;
    if (r < 0)
        out("CONTAINED %s %s", what, en(e));
    else
        out("ESCAPED %s returned %ld", what, r);
    errno = e;
    return r;
}

/* r < 0: CONTAINED what ERRNO; else OPENED what (attack surface reached). */
__attribute__((unused)) static long surface(const char *what, long r) {
    int e = errno;
    if (r < 0)
        out("CONTAINED %s %s", what, en(e));
    else
        out("OPENED %s returned %ld", what, r);
    errno = e;
    return r;
}

/* Writes uid_map/gid_map after unshare(CLONE_NEWUSER): the caller's ids map
 * to themselves, so file permission checks stay those of the caller. */
__attribute__((unused)) static void map_self(uid_t uid, gid_t gid) {
    char b[64];
    int fd = open("/proc/self/setgroups", O_WRONLY);
    if (fd >= 0) { (void)!write(fd, "deny", 4); close(fd); }
    fd = open("/proc/self/uid_map", O_WRONLY);
    if (fd >= 0) { int n = snprintf(b, sizeof b, "%u %u 1", uid, uid); if (write(fd, b, n) < 0) out("INFO uid_map %s", en(errno)); close(fd); }
    fd = open("/proc/self/gid_map", O_WRONLY);
    if (fd >= 0) { int n = snprintf(b, sizeof b, "%u %u 1", gid, gid); if (write(fd, b, n) < 0) out("INFO gid_map %s", en(errno)); close(fd); }
}

#define DONE() out("DONE")
#endif
