/* A workload of bench/server.sh: a fixed amount of pure CPU work (an
 * xorshift64 chain, no system calls, no memory traffic), so that a slower
 * run means the CPU did the same work more slowly, not more work.
 *
 *   cpuloop N            N iterations
 *   cpuloop --calibrate  prints the N that takes about 1 s of CPU time here
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t spin(uint64_t n) {
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    volatile uint64_t sink;
    if (argc == 2 && strcmp(argv[1], "--calibrate") == 0) {
        /* Best of 5 runs of 50M iterations: the machine's speed, not its load. */
        const uint64_t n = 50000000;
        double best = 1e9;
        for (int i = 0; i < 5; i++) {
            double t = cpu_seconds();
            sink = spin(n);
            t = cpu_seconds() - t;
            if (t < best)
                best = t;
        }
        printf("%llu\n", (unsigned long long)(n / best));
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: cpuloop N | cpuloop --calibrate\n");
        return 2;
    }
    sink = spin(strtoull(argv[1], NULL, 10));
    (void)sink;
    return 0;
}
