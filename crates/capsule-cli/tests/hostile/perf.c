/* Attack 11: perf_event_open (user-space only, own process: what
 * perf_event_paranoid 2 allows). */
#include "hostile.h"
#include <linux/perf_event.h>
int main(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    surface("perf_event_open-self-hw", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    surface("perf_event_open-self-sw", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    surface("perf_event_open-cpu-wide", syscall(SYS_perf_event_open, &a, -1, 0, -1, 0));
    DONE();
    return 0;
}
