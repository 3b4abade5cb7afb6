/* Attack: take all of the user's user namespaces (argv[1] = "user") or
 * inotify instances ("inotify"), at most argv[2] of them, and hold them
 * until stdin closes. The kernel counts both per user at every level of
 * the user namespace chain: without a bound inside the run, its holdings
 * count against the user's host-wide limits (user.max_user_namespaces,
 * fs.inotify.max_user_instances), and every other sandbox or inotify user
 * of that user fails with ENOSPC or EMFILE while the run lives. Prints
 * `HELD n=N stop=ERRNO` (or stop=CAP when it got all it asked for). */
#include "hostile.h"
#include <sys/inotify.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long cap = atol(argv[2]);
    long n = 0;
    int stop = 0;
    if (strcmp(argv[1], "inotify") == 0) {
        for (; n < cap; n++) {
            if (inotify_init1(IN_CLOEXEC) < 0) {
                stop = errno;
                break;
            }
        }
    } else if (strcmp(argv[1], "user") == 0) {
        /* Each namespace held by a child blocked on `hold` until this
         * process exits; each child reports unshare's errno on `res`. */
        int hold[2], res[2];
        if (pipe(hold) < 0 || pipe(res) < 0) return 3;
        for (; n < cap; n++) {
            pid_t p = fork();
            if (p < 0) {
                stop = errno;
                break;
            }
            if (p == 0) {
                close(hold[1]);
                int e = unshare(CLONE_NEWUSER) < 0 ? errno : 0;
                if (write(res[1], &e, sizeof e) < 0) _exit(3);
                char c;
                while (read(hold[0], &c, 1) < 0 && errno == EINTR) {}
                _exit(0);
            }
            int e = 0;
            if (read(res[0], &e, sizeof e) != sizeof e) e = EIO;
            if (e) {
                stop = e;
                break;
            }
        }
    } else {
        return 2;
    }
    if (stop)
        out("HELD n=%ld stop=%s", n, en(stop));
    else
        out("HELD n=%ld stop=CAP", n);
    char c;
    while (read(0, &c, 1) > 0) {}
    DONE();
    return 0;
}
