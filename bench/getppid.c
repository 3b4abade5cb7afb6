/* A workload of bench/server.sh and bench/seccomp.sh: 3,000,000 getppid
 * system calls (through syscall(2), so that no libc could answer from a
 * cache), i.e. the cost of system calls inside the sandbox (seccomp filter
 * included).
 *
 * `getppid --own-filter` first installs the smallest seccomp filter there
 * is, one instruction that allows every call: bench/seccomp.sh runs it with
 * `--seccomp none` to show what the kernel charges for having any filter
 * at all, whatever the filter says. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--own-filter") == 0) {
        struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        struct sock_fprog prog = {.len = 1, .filter = allow};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
            perror("getppid: installing the one-instruction filter");
            return 1;
        }
    } else if (argc > 1) {
        fprintf(stderr, "usage: getppid [--own-filter]\n");
        return 2;
    }
    for (long i = 0; i < 3000000; i++)
        syscall(SYS_getppid);
    return 0;
}
