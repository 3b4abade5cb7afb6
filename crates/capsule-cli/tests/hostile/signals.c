/* Attack 2: signals and pidfds to PID 1, to the parent, to every visible
 * process, to host pids given in argv (the supervisor), kill(-1, SIGKILL);
 * last, lowering PID 1's resource limits (it shares this program's uid).
 * The run must still end with this program's own result (exit 0, DONE). */
#include "hostile.h"
#include <dirent.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static int pidfd_open_(pid_t p) { return syscall(SYS_pidfd_open, p, 0); }
static int pidfd_send(int fd, int sig) { return syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0); }

static void info_call(const char *what, long r) {
    if (r < 0) out("INFO %s %s", what, en(errno));
    else out("INFO %s ok", what);
}

int main(int argc, char **argv) {
    /* Host pids (the supervisor, capsule run): invisible. */
    for (int i = 1; i < argc; i++) {
        pid_t p = atoi(argv[i]);
        char w[64];
        snprintf(w, sizeof w, "kill-host-%d", p);
        /* A pid number that exists here is one of this run's (PID 1): not
         * the host process. Only ESRCH is the expected answer for the big
         * host pids the harness passes. */
        expect_fail(w, kill(p, SIGKILL));
        snprintf(w, sizeof w, "pidfd-host-%d", p);
        expect_fail(w, pidfd_open_(p));
    }
    /* PID 1: the kernel protects a namespace's init from its own
     * namespace (SIGKILL/SIGSTOP ignored, others only if handled). */
    int sigs[] = {SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGSTOP, SIGCONT, SIGCHLD, SIGUSR1, SIGSEGV, SIGABRT};
    for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        char w[64];
        snprintf(w, sizeof w, "kill-1-%s", sigabbrev_np(sigs[i]));
        info_call(w, kill(1, sigs[i]));
    }
    int fd = pidfd_open_(1);
    info_call("pidfd_open-1", fd);
    if (fd >= 0) {
        info_call("pidfd_send_signal-1-KILL", pidfd_send(fd, SIGKILL));
        info_call("pidfd_send_signal-1-TERM", pidfd_send(fd, SIGTERM));
        info_call("pidfd_send_signal-1-STOP", pidfd_send(fd, SIGSTOP));
        close(fd);
    }
    /* A /proc/<pid> directory fd is a pidfd too. */
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t p = atoi(e->d_name);
        if (p <= 0 || p == getpid()) continue;
        char path[64], w[64];
        snprintf(path, sizeof path, "/proc/%d", p);
        int pfd = open(path, O_RDONLY | O_DIRECTORY);
        if (pfd < 0) continue;
        snprintf(w, sizeof w, "procfd-%d-KILL", p);
        info_call(w, pidfd_send(pfd, SIGKILL));
        close(pfd);
    }
    if (d) closedir(d);
    if (getppid() != 0) info_call("kill-ppid-KILL", kill(getppid(), SIGKILL));
    info_call("kill-minus1-TERM", kill(-1, SIGTERM));
    info_call("kill-minus1-KILL", kill(-1, SIGKILL));
    /* PID 1's limits: read, never set (last: `strict` may end the run here). */
    struct rlimit cur;
    info_call("prlimit-read-1-NOFILE", prlimit(1, RLIMIT_NOFILE, NULL, &cur));
    const struct { const char *name; int resource; } lims[] = {
        {"NOFILE", RLIMIT_NOFILE}, {"NPROC", RLIMIT_NPROC}, {"CPU", RLIMIT_CPU}, {"AS", RLIMIT_AS}};
    for (unsigned i = 0; i < sizeof lims / sizeof *lims; i++) {
        char w[64];
        snprintf(w, sizeof w, "prlimit-1-%s", lims[i].name);
        struct rlimit zero = {lims[i].resource == RLIMIT_CPU ? 1 : 0, lims[i].resource == RLIMIT_CPU ? 1 : 0};
        expect_fail(w, prlimit(1, lims[i].resource, &zero, NULL));
    }
    /* Still alive, and PID 1 must report this exit code. */
    DONE();
    return 7;
}
