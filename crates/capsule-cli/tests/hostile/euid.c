/* Attack 7: installed setuid-root by the harness; prints its ids. */
#include "hostile.h"
int main(void) {
    out("IDS uid=%u euid=%u gid=%u egid=%u", getuid(), geteuid(), getgid(), getegid());
    /* With euid 0 this would succeed; as anyone else EPERM. */
    expect_fail("setuid-0", setuid(0));
    DONE();
    return 0;
}
