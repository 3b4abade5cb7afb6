/* Attack 8: lift RLIMIT_CORE, become dumpable, chdir into a writable
 * directory (argv[1]) and crash. */
#include "hostile.h"
#include <sys/prctl.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
    struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
    expect_fail("setrlimit-core-unlimited", setrlimit(RLIMIT_CORE, &r));
    getrlimit(RLIMIT_CORE, &r);
    out("INFO RLIMIT_CORE soft=%lld hard=%lld", (long long)r.rlim_cur, (long long)r.rlim_max);
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_CORE, &r);
    out("INFO dumpable before=%d", prctl(PR_GET_DUMPABLE));
    prctl(PR_SET_DUMPABLE, 1);
    out("INFO dumpable=%d", prctl(PR_GET_DUMPABLE));
    if (argc > 1 && chdir(argv[1]) < 0) out("INFO chdir %s", en(errno));
    out("CRASHING");
    *(volatile int *)0 = 1;
    return 0;
}
