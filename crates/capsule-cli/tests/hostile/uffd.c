/* Attack 13: userfaultfd (user-mode-only faults, what
 * vm.unprivileged_userfaultfd = 0 still allows), and /dev/userfaultfd. */
#include "hostile.h"
#include <linux/userfaultfd.h>
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
int main(void) {
    surface("userfaultfd-user-mode", syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
    surface("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC));
    surface("open-dev-userfaultfd", open("/dev/userfaultfd", O_RDWR));
    DONE();
    return 0;
}
