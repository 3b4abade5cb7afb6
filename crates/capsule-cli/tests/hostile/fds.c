/* Attack 16: exhaust fds in this process and in CHILDREN children (argv[1],
 * default 4): raise RLIMIT_NOFILE to its hard limit and open pipes,
 * sockets, eventfds and /dev/null until EMFILE (only /dev/null, with no
 * rlimit change, with argv[2] "simple": what the strict policy allows). */
#include "hostile.h"
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>

static int simple;

static int exhaust(void) {
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    if (!simple) setrlimit(RLIMIT_NOFILE, &r);
    int n = 0, p[2], e = 0;
    for (;;) {
        int k = simple ? 3 : n % 4;
        if (k == 0 && pipe(p) == 0) n += 2;
        else if (k == 1 && socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0) n += 2;
        else if (k == 2 && eventfd(0, 0) >= 0) n += 1;
        else if (open("/dev/null", O_RDONLY) >= 0) n += 1;
        else { e = errno; break; }
    }
    out("FDS pid=%d opened=%d limit=%lld stop=%s", getpid(), n, (long long)r.rlim_cur, en(e));
    return e == EMFILE || e == ENFILE ? 0 : 1;
}

int main(int argc, char **argv) {
    int kids = argc > 1 ? atoi(argv[1]) : 4, bad = 0;
    simple = argc > 2 && !strcmp(argv[2], "simple");
    for (int i = 0; i < kids; i++) {
        pid_t p = fork();
        if (p == 0) _exit(exhaust());
        if (p < 0) out("INFO fork %s", en(errno));
    }
    bad |= exhaust();
    int st;
    while (kids > 0 && wait(&st) > 0) bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    if (!bad) DONE();
    return bad;
}
