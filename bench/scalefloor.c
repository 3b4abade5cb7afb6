/* The kernel's floors under issue 22's throughput table (bench/scale.sh):
 * runs per second of P worker processes, each doing runs back to back,
 * with nothing of capsule's in them.
 *
 *   scalefloor bare P RUNS PROGRAM
 *       a run is vfork + execve + waitpid of PROGRAM.
 *   scalefloor ns P RUNS PROGRAM
 *       a run is clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS); the
 *       child (PID 1 of the new PID namespace) writes its id maps, makes /
 *       private (recursively), mounts a fresh procfs on /proc, then vfork +
 *       execve + waitpid of PROGRAM; the worker reaps it.
 *   scalefloor ns+cg P RUNS PROGRAM BASE
 *       the same, plus a cgroup per run: mkdir BASE/w<worker>-<run>, opened
 *       O_PATH and given to clone3 with CLONE_INTO_CGROUP, and rmdir after
 *       the reap. BASE must be a cgroup v2 directory the caller may create
 *       cgroups in (its cgroup.subtree_control says which controllers the
 *       runs' cgroups get) and whose common ancestor with the caller's
 *       cgroup lets the caller migrate processes (a delegated subtree).
 *
 * RUNS are split evenly over the P workers (RUNS rounded up to a multiple
 * of P); all workers start together after a pipe releases them, and the
 * time is from the release to the last worker's exit. Prints one line:
 * "MODE P RUNS SECONDS RUNS_PER_SECOND". Any failed run exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { BARE, NS, NS_CG };

static char *prog_argv[2];
static char *const prog_envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
static int outer_uid, outer_gid;
static const char *base;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "scalefloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die(path);
    close(fd);
}

/* vfork + execve + waitpid; the program's wait status. */
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

static void reap_ok(pid_t p, const char *what) {
    int st;
    if (waitpid(p, &st, 0) < 0)
        die("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "scalefloor: a %s failed (wait status %#x)\n", what, st);
        exit(1);
    }
}

/* One floor run: fresh user, pid and mount namespaces (in cgroup_fd's
 * cgroup if it is not -1), id maps, / private, a procfs, the program. */
static void floor_run(int cgroup_fd) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS;
    args.exit_signal = SIGCHLD;
    if (cgroup_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cgroup_fd;
    }
    long p = syscall(SYS_clone3, &args, sizeof args);
    if (p < 0)
        die(cgroup_fd >= 0 ? "clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_INTO_CGROUP)"
                           : "clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS)");
    if (p == 0) {
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
        int st = run_program();
        _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1);
    }
    reap_ok((pid_t)p, "floor run");
}

static void worker(enum mode m, int w, int runs) {
    char path[4096];
    for (int i = 0; i < runs; i++) {
        if (m == BARE) {
            int st = run_program();
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "scalefloor: the program failed bare (wait status %#x)\n", st);
                exit(1);
            }
        } else if (m == NS) {
            floor_run(-1);
        } else {
            snprintf(path, sizeof path, "%s/w%d-%d", base, w, i);
            if (mkdir(path, 0755) != 0)
                die(path);
            int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0)
                die(path);
            floor_run(fd);
            close(fd);
            if (rmdir(path) != 0)
                die(path);
        }
    }
}

int main(int argc, char **argv) {
    enum mode m;
    if (argc >= 2 && strcmp(argv[1], "bare") == 0 && argc == 5)
        m = BARE;
    else if (argc >= 2 && strcmp(argv[1], "ns") == 0 && argc == 5)
        m = NS;
    else if (argc >= 2 && strcmp(argv[1], "ns+cg") == 0 && argc == 6)
        m = NS_CG, base = argv[5];
    else {
        fprintf(stderr, "usage: scalefloor bare|ns P RUNS PROGRAM\n       scalefloor ns+cg P RUNS PROGRAM BASE\n");
        return 2;
    }
    int p = atoi(argv[2]), runs = atoi(argv[3]);
    if (p < 1 || p > 4096 || runs < 1) {
        fprintf(stderr, "scalefloor: P must be 1 to 4096 and RUNS at least 1\n");
        return 2;
    }
    int per = (runs + p - 1) / p;
    prog_argv[0] = argv[4];
    outer_uid = getuid();
    outer_gid = getgid();
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0)
        die("pipe2");
    pid_t *pids = calloc(p, sizeof *pids);
    if (!pids)
        die("calloc");
    for (int w = 0; w < p; w++) {
        pids[w] = fork();
        if (pids[w] < 0)
            die("fork");
        if (pids[w] == 0) {
            char b;
            close(go[1]);
            if (read(go[0], &b, 1) != 0)
                _exit(1);
            worker(m, w, per);
            _exit(0);
        }
    }
    close(go[0]);
    double t0 = now_s();
    close(go[1]); /* releases every worker at once (end of file) */
    for (int w = 0; w < p; w++)
        reap_ok(pids[w], "worker");
    double secs = now_s() - t0;
    printf("%s %d %d %.6f %.1f\n", argv[1], p, per * p, secs, per * p / secs);
    return 0;
}
