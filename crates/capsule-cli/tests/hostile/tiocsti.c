/* Attack 14: push input into the caller's terminal (TIOCSTI), take it as
 * controlling terminal first (TIOCSCTTY, also stealing), and TIOCLINUX
 * (console selection paste), on fds 0, 1, 2. */
#include "hostile.h"
#include <sys/ioctl.h>
#include <termios.h>

int main(void) {
    out("INFO isatty 0=%d 1=%d 2=%d", isatty(0), isatty(1), isatty(2));
    out("INFO sid=%d pgrp=%d", getsid(0), getpgrp());
    expect_fail("ioctl-TIOCSCTTY-0", ioctl(0, TIOCSCTTY, 0));
    expect_fail("ioctl-TIOCSCTTY-steal-0", ioctl(0, TIOCSCTTY, 1));
    const char *cmd = "echo CAPSULE-INJECTED\n";
    for (int fd = 0; fd <= 2; fd++) {
        char w[64];
        snprintf(w, sizeof w, "ioctl-TIOCSTI-%d", fd);
        long r = 0;
        for (const char *c = cmd; *c && r == 0; c++) r = ioctl(fd, TIOCSTI, c);
        expect_fail(w, r);
        /* TIOCLINUX 3: paste the console selection; 2: set it; 6: get the
         * shift state; 11: report the mouse. */
        char sub[] = {3, 0};
        snprintf(w, sizeof w, "ioctl-TIOCLINUX-paste-%d", fd);
        expect_fail(w, ioctl(fd, TIOCLINUX, sub));
        char sub6[] = {6, 0};
        snprintf(w, sizeof w, "ioctl-TIOCLINUX-shift-%d", fd);
        expect_fail(w, ioctl(fd, TIOCLINUX, sub6));
    }
    DONE();
    return 0;
}
