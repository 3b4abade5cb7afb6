/* Attack 20b: memory bomb: touch MIB (argv[1], default 4096) MiB in 1 MiB
 * chunks, in PROCS (argv[2], default 1) processes. */
#include "hostile.h"
#include <sys/mman.h>

static void bomb(long mib) {
    for (long i = 0; i < mib; i++) {
        char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { out("INFO mmap %s after %ld MiB", en(errno), i); return; }
        memset(p, 0x5a, 1 << 20);
    }
    out("SURVIVED %ld MiB", mib);
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 4096;
    int procs = argc > 2 ? atoi(argv[2]) : 1;
    for (int i = 1; i < procs; i++) if (fork() == 0) { bomb(mib); pause(); _exit(0); }
    bomb(mib);
    return 0;
}
