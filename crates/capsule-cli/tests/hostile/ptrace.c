/* Attack 1: ptrace PID 1, the parent, every process visible in /proc, and
 * (argv) host pids of other runs and of the supervisor.
 * usage: ptrace [HOSTPID:MARKER ...] | ptrace hold MARKER */
#include "hostile.h"
#include <dirent.h>
#include <sys/ptrace.h>

static void attach(const char *who, pid_t pid) {
    char what[128];
    snprintf(what, sizeof what, "ptrace-attach-%s", who);
    if (expect_fail(what, ptrace(PTRACE_ATTACH, pid, 0, 0)) == 0) ptrace(PTRACE_DETACH, pid, 0, 0);
    snprintf(what, sizeof what, "ptrace-seize-%s", who);
    if (expect_fail(what, ptrace(PTRACE_SEIZE, pid, 0, 0)) == 0) ptrace(PTRACE_DETACH, pid, 0, 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "hold")) {
        out("READY %s", argv[2]);
        sleep(120);
        return 0;
    }
    attach("pid1", 1);
    if (getppid() != 1) attach("parent", getppid());
    /* Every other process the sandbox can see. */
    DIR *d = opendir("/proc");
    struct dirent *e;
    int seen = 0;
    while (d && (e = readdir(d))) {
        pid_t p = atoi(e->d_name);
        if (p <= 0 || p == getpid()) continue;
        seen++;
        char who[64];
        snprintf(who, sizeof who, "proc-%d", p);
        attach(who, p);
    }
    if (d) closedir(d);
    out("INFO other processes in /proc: %d", seen);
    /* Host pids of processes outside the run (another run, the supervisor):
     * they must not exist here (ESRCH), or be someone else (no marker). */
    for (int i = 1; i < argc; i++) {
        pid_t p = atoi(argv[i]);
        const char *marker = strchr(argv[i], ':');
        marker = marker ? marker + 1 : "";
        char what[128], path[64], cmd[4096] = "";
        snprintf(what, sizeof what, "kill0-host-%d", p);
        if (kill(p, 0) < 0) {
            out("CONTAINED %s %s", what, en(errno));
        } else {
            snprintf(path, sizeof path, "/proc/%d/cmdline", p);
            int fd = open(path, O_RDONLY);
            ssize_t n = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : 0;
            if (fd >= 0) close(fd);
            for (ssize_t j = 0; j < n; j++) if (!cmd[j]) cmd[j] = ' ';
            if (n > 0) cmd[n] = 0;
            if (*marker && strstr(cmd, marker))
                out("ESCAPED %s visible: %s", what, cmd);
            else
                out("INFO pid %d exists here but is this run's own: %s", p, cmd);
        }
        snprintf(what, sizeof what, "host-%d", p);
        /* Attaching: ESRCH (invisible) or EPERM; success is an escape only
         * if it is not this run's own process, reported above. */
        attach(what, p);
    }
    DONE();
    return 0;
}
