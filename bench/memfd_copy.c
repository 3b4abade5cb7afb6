/*
 * What runc's defence against CVE-2019-5736 would cost capsule per run:
 * copy the binary into a sealed memfd (and later execute that copy instead of
 * /proc/self/exe). capsule instead makes the run's PID 1 non-dumpable.
 *
 * Usage: memfd_copy BINARY ITERATIONS [WARMUP]
 *
 * Each iteration, like runc's cloned_binary does once per container start:
 *   open(BINARY) + fstat, memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING
 *   [| MFD_EXEC]), sendfile loop until the whole file is copied,
 *   fcntl(F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE),
 *   close(BINARY)
 * and then, timed separately, close(memfd), which frees the copy's pages.
 * Prints one line per measured iteration: "<copy ns>\t<free ns>".
 * Built by bench/run.sh with `cc -O2`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U /* Linux 6.3; older kernels reject it with EINVAL */
#endif

static unsigned int mfd_exec = MFD_EXEC;

static void die(const char *what)
{
    fprintf(stderr, "memfd_copy: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        die("clock_gettime");
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One sealed copy of path; returns the memfd. */
static int sealed_copy(const char *path)
{
    int src = open(path, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        die("open");
    struct stat st;
    if (fstat(src, &st) != 0)
        die("fstat");
    int fd = memfd_create("capsule", MFD_CLOEXEC | MFD_ALLOW_SEALING | mfd_exec);
    if (fd < 0 && errno == EINVAL && mfd_exec) {
        mfd_exec = 0; /* kernel before 6.3: memfds are executable anyway */
        fd = memfd_create("capsule", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    }
    if (fd < 0)
        die("memfd_create");
    off_t left = st.st_size;
    while (left > 0) {
        ssize_t n = sendfile(fd, src, NULL, (size_t)left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("sendfile");
        }
        if (n == 0) {
            errno = EIO;
            die("sendfile: short file");
        }
        left -= n;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0)
        die("fcntl(F_ADD_SEALS)");
    close(src);
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: memfd_copy BINARY ITERATIONS [WARMUP]\n");
        return 2;
    }
    const char *path = argv[1];
    long iterations = strtol(argv[2], NULL, 10);
    long warmup = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
    if (iterations < 1 || warmup < 0) {
        fprintf(stderr, "memfd_copy: ITERATIONS must be positive, WARMUP non-negative\n");
        return 2;
    }
    for (long i = 0; i < warmup; i++)
        close(sealed_copy(path));
    for (long i = 0; i < iterations; i++) {
        uint64_t t0 = now_ns();
        int fd = sealed_copy(path);
        uint64_t t1 = now_ns();
        close(fd);
        uint64_t t2 = now_ns();
        printf("%llu\t%llu\n", (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1));
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
