/* The floor under issue 4's server targets: what the kernel charges for
 * the least a run with "fresh pid, mount and user namespaces" can be, with
 * nothing of capsule's in it. bench/server.sh runs it beside capsule-bench
 * and reports both.
 *
 * A "floor run" is: clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS); the
 * child (PID 1 of the new PID namespace) writes its own id maps, makes its
 * mounts private and mounts a fresh procfs on /proc (a new PID namespace
 * needs one: the host's /proc would show the host's processes), then
 * vfork + execve of the program and waitpid. No /dev, /tmp or /run of its
 * own, no cgroup, no seccomp, no Landlock, no second user namespace, no
 * supervisor: every one of those is extra in capsule.
 *
 *   nsfloor throughput RUNS PROGRAM
 *       2 worker processes, each running floor runs back to back; then the
 *       same number of bare vfork + execve + waitpid runs from 2 workers.
 *       Prints "throughput floor R bare B runs/s".
 *   nsfloor latency RUNS PROGRAM
 *       One client. The floor run's PID 1 is prepared ahead (namespaces,
 *       maps, procfs done, waiting on a pipe), as capsule prepares its
 *       next PID 1 while idle; timed is only the request: a byte to the
 *       waiting PID 1 -> vfork + execve + waitpid there -> a byte back.
 *       Alternates with bare vfork + execve + waitpid runs from the same
 *       process. Prints "latency floor F bare B ms (medians)".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *prog_argv[2];
static char *const prog_envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
static int outer_uid, outer_gid;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "nsfloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die(path);
    close(fd);
}

/* vfork + execve + waitpid; the program's exit status. */
static int run_program(void) {
    pid_t p = vfork();
    if (p == 0) {
        execve(prog_argv[0], prog_argv, prog_envp);
        _exit(127);
    }
    if (p < 0)
        die("vfork");
    int st;
    if (waitpid(p, &st, 0) < 0)
        die("waitpid");
    return st;
}

/* In the new namespaces: id maps, private mounts, a fresh procfs. */
static void enter(void) {
    char line[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(line, sizeof line, "0 %d 1", outer_uid);
    write_file("/proc/self/uid_map", line);
    snprintf(line, sizeof line, "0 %d 1", outer_gid);
    write_file("/proc/self/gid_map", line);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("making / private");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        die("mounting /proc");
}

struct spare {
    int go[2], done[2];
};

static int floor_child(void *arg) {
    struct spare *s = arg;
    enter();
    if (s) {
        /* Prepared: wait for the request, answer when the program is reaped. */
        char b;
        if (read(s->go[0], &b, 1) != 1)
            _exit(1);
        b = run_program() == 0 ? 0 : 1;
        if (write(s->done[1], &b, 1) != 1)
            _exit(1);
        _exit(0);
    }
    _exit(run_program() == 0 ? 0 : 1);
}

static char stack[1 << 16];

static pid_t clone_floor(struct spare *s) {
    pid_t p = clone(floor_child, stack + sizeof stack, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, s);
    if (p < 0)
        die("clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS)");
    return p;
}

static void reap_ok(pid_t p, const char *what) {
    int st;
    if (waitpid(p, &st, 0) < 0)
        die("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "nsfloor: a %s run failed (status %#x)\n", what, st);
        exit(1);
    }
}

static double two_workers(int runs, int floor) {
    double t0 = now_ms();
    pid_t w = fork();
    if (w < 0)
        die("fork");
    for (int i = 0; i < runs / 2; i++) {
        if (floor)
            reap_ok(clone_floor(NULL), "floor");
        else if (run_program() != 0) {
            fprintf(stderr, "nsfloor: the program failed bare\n");
            exit(1);
        }
    }
    if (w == 0)
        _exit(0);
    reap_ok(w, "worker");
    return runs / ((now_ms() - t0) / 1e3);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "throughput") != 0 && strcmp(argv[1], "latency") != 0)) {
        fprintf(stderr, "usage: nsfloor throughput|latency RUNS PROGRAM\n");
        return 2;
    }
    int runs = atoi(argv[2]);
    if (runs < 2) {
        fprintf(stderr, "nsfloor: RUNS must be at least 2\n");
        return 2;
    }
    prog_argv[0] = argv[3];
    outer_uid = getuid();
    outer_gid = getgid();
    if (strcmp(argv[1], "throughput") == 0) {
        double floor = two_workers(runs, 1);
        double bare = two_workers(runs, 0);
        printf("throughput floor %.0f bare %.0f runs/s\n", floor, bare);
        return 0;
    }
    double *f = calloc(runs, sizeof *f), *b = calloc(runs, sizeof *b);
    if (!f || !b)
        die("calloc");
    for (int i = 0; i < runs; i++) {
        struct spare s;
        if (pipe2(s.go, O_CLOEXEC) != 0 || pipe2(s.done, O_CLOEXEC) != 0)
            die("pipe2");
        pid_t p = clone_floor(&s);
        /* Let the spare finish preparing (untimed), as capsule's does while idle. */
        usleep(2000);
        double t0 = now_ms();
        char c = 0;
        if (write(s.go[1], &c, 1) != 1 || read(s.done[0], &c, 1) != 1 || c != 0) {
            fprintf(stderr, "nsfloor: a prepared floor run failed\n");
            return 1;
        }
        f[i] = now_ms() - t0;
        reap_ok(p, "prepared floor");
        for (int k = 0; k < 2; k++)
            close(s.go[k]), close(s.done[k]);
        usleep(2000); /* the same pause before the bare run */
        t0 = now_ms();
        if (run_program() != 0) {
            fprintf(stderr, "nsfloor: the program failed bare\n");
            return 1;
        }
        b[i] = now_ms() - t0;
    }
    qsort(f, runs, sizeof *f, cmp);
    qsort(b, runs, sizeof *b, cmp);
    printf("latency floor %.3f bare %.3f ms (medians)\n", f[runs / 2], b[runs / 2]);
    return 0;
}
