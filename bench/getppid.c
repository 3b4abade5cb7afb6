/* A workload of bench/server.sh: 3,000,000 getppid system calls (through
 * syscall(2), so that no libc could answer from a cache), i.e. the cost of
 * system calls inside the sandbox (seccomp filter included). */
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    for (long i = 0; i < 3000000; i++)
        syscall(SYS_getppid);
    return 0;
}
