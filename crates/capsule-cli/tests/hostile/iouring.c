/* Attack 10: io_uring. */
#include "hostile.h"
#include <linux/io_uring.h>
int main(void) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    long fd = surface("io_uring_setup", syscall(SYS_io_uring_setup, 8, &p));
    if (fd >= 0) {
        surface("io_uring_register", syscall(SYS_io_uring_register, fd, IORING_REGISTER_PROBE, NULL, 0));
        surface("io_uring_enter", syscall(SYS_io_uring_enter, fd, 0, 0, 0, NULL, 0));
    } else {
        surface("io_uring_enter", syscall(SYS_io_uring_enter, 3, 0, 0, 0, NULL, 0));
    }
    DONE();
    return 0;
}
