/* Attack 20a: fork bomb. "count": fork until it fails, report the errno
 * and how many, exit 0. "bomb": fork forever in every process. */
#include "hostile.h"
#include <time.h>

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bomb")) {
        for (;;) fork();
    }
    int n = 0, e = 0;
    for (int tries = 0; tries < 200000; tries++) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p > 0) { n++; continue; }
        e = errno;
        if (e != EAGAIN) break;
        if (tries > 2000) break;
    }
    out("FORKS made=%d stop=%s", n, en(e));
    DONE();
    return 0;
}
