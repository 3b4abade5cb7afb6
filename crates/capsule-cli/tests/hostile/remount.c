/* Attack 3: in a nested user+mount namespace (where we hold every
 * capability), try to make read-only mounts writable again and to unmount
 * what covers host paths; afterwards, writing through the read-only bind
 * must still fail.
 * usage: remount RO_DIR COVERED_PATH:HOST_MARKER_NAME ... */
#include "hostile.h"
#include <sys/mount.h>

static void try_write(const char *dir, const char *tag) {
    char p[512], w[128];
    snprintf(p, sizeof p, "%s/written-by-sandbox", dir);
    snprintf(w, sizeof w, "write-ro-bind-%s", tag);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        out("ESCAPED %s created %s", w, p);
        close(fd);
        return;
    }
    out("CONTAINED %s %s", w, en(errno));
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *ro = argv[1];
    uid_t uid = getuid();
    gid_t gid = getgid();
    try_write(ro, "before");
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        out("CONTAINED unshare-user-mount %s", en(errno));
    } else {
        out("INFO unshare-user-mount ok");
        map_self(uid, gid);
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    }
    expect_fail("remount-bind-rw-robind", mount(NULL, ro, NULL, MS_REMOUNT | MS_BIND, NULL));
    expect_fail("remount-rw-robind", mount(NULL, ro, NULL, MS_REMOUNT, NULL));
    expect_fail("remount-bind-rw-root", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
    expect_fail("remount-bind-nosuid-off-root", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL));
    /* A fresh bind of the read-only mount, then remount that copy rw. */
    const char *copy = "/tmp/robind-copy";
    mkdir(copy, 0755);
    if (mount(ro, copy, NULL, MS_BIND, NULL) == 0) {
        out("INFO bind-copy ok");
        expect_fail("remount-bind-rw-copy", mount(NULL, copy, NULL, MS_REMOUNT | MS_BIND, NULL));
        try_write(copy, "copy");
    } else {
        out("INFO bind-copy %s", en(errno));
    }
    /* Unmount the read-only bind itself (to reveal what is under it). */
    expect_fail("umount-robind", umount2(ro, 0));
    expect_fail("umount-detach-robind", umount2(ro, MNT_DETACH));
    try_write(ro, "after");
    /* Covered paths: unmounting them must not reveal the host's files. */
    for (int i = 2; i < argc; i++) {
        char path[512], w[600], m[600];
        snprintf(path, sizeof path, "%s", argv[i]);
        char *colon = strchr(path, ':');
        if (!colon) continue;
        *colon = 0;
        const char *name = colon + 1;
        snprintf(w, sizeof w, "umount-detach-%s", path);
        umount2(path, MNT_DETACH) < 0 ? out("CONTAINED %s %s", w, en(errno)) : out("INFO %s ok", w);
        snprintf(m, sizeof m, "%s/%s", path, name);
        snprintf(w, sizeof w, "reveal-%s", path);
        struct stat st;
        if (stat(m, &st) == 0)
            out("ESCAPED %s host file %s visible", w, m);
        else
            out("CONTAINED %s %s", w, en(errno));
    }
    DONE();
    return 0;
}
