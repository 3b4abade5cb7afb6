/* Attack 5: writes to /proc/sys and /proc/sysrq-trigger, directly and from
 * a nested user namespace. */
#include "hostile.h"

static const char *files[] = {
    "/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/sysrq",
    "/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname",
    "/proc/sys/kernel/modprobe", "/proc/sys/fs/protected_symlinks", "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/ns_last_pid",
};

static void attempt(const char *tag) {
    for (unsigned i = 0; i < sizeof files / sizeof *files; i++) {
        char w[256];
        snprintf(w, sizeof w, "write-%s%s", files[i], tag);
        int fd = open(files[i], O_WRONLY);
        if (fd < 0) { out("CONTAINED %s %s", w, en(errno)); continue; }
        /* sysrq 'h' (help) is harmless if it got through. */
        const char *v = !strcmp(files[i], "/proc/sysrq-trigger") ? "h" : !strcmp(files[i], "/proc/sys/kernel/core_pattern") ? "|/bin/false capsule-hostile" : !strcmp(files[i], "/proc/sys/vm/drop_caches") ? "1" : !strcmp(files[i], "/proc/sys/kernel/ns_last_pid") ? "300" : "capsule-hostile";
        ssize_t n = write(fd, v, strlen(v));
        if (n < 0) out("CONTAINED %s %s", w, en(errno));
        else out("ESCAPED %s wrote %zd bytes", w, n);
        close(fd);
    }
}

int main(void) {
    attempt("");
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER) < 0) {
        out("INFO unshare %s", en(errno));
    } else {
        map_self(uid, gid);
        attempt("-nested-userns");
    }
    DONE();
    return 0;
}
