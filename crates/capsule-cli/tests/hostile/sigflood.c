/* Attack 18: for SECONDS (argv[1], default 1) send every signal (but
 * SIGKILL to -1, which would end the flood's helpers) to PID 1 and to -1,
 * with a helper child doing the same (none with argv[2] "solo": for the
 * strict policy, which forbids processes); then exit 0. */
#include "hostile.h"
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static long flood(double secs, int to_minus1) {
    long sent = 0;
    double end = now() + secs;
    while (now() < end) {
        for (int s = 1; s < 65; s++) {
            if (s == SIGKILL && to_minus1) continue;
            if (kill(1, s) == 0) sent++;
            if (to_minus1 && s != SIGSTOP && kill(-1, s) == 0) sent++;
        }
        kill(1, SIGKILL);
        kill(1, SIGSTOP);
        kill(1, SIGCONT);
    }
    return sent;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    /* We are hit by the helper's kill(-1): ignore what can be ignored,
     * SIGSTOP is answered by the SIGCONTs. */
    for (int s = 1; s < 65; s++) signal(s, SIG_IGN);
    int solo = argc > 2 && !strcmp(argv[2], "solo");
    pid_t helper = solo ? -1 : fork();
    if (helper == 0) {
        for (int s = 1; s < 65; s++) signal(s, SIG_IGN);
        flood(secs, 0);
        _exit(0);
    }
    long sent = flood(secs, 1);
    /* The helper may be stopped by our kill(-1, SIGSTOP)s: wake it up. */
    int st = 0;
    if (helper > 0) {
        kill(helper, SIGCONT);
        waitpid(helper, &st, 0);
    }
    out("INFO sent=%ld helper-status=%d", sent, st);
    DONE();
    return 0;
}
