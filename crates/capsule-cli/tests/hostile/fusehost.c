/* Not an attack: the user's own FUSE mount on the host (like sshfs or
 * rclone), for the test that a run aborting its stuck FUSE connections
 * leaves it alone. Run as root: mounts on argv[1] for uid argv[2], gid
 * argv[3] (what fusermount3 does for a user), then serves it, as that
 * user, in a child that lives until the mount goes: a root directory
 * holding one empty file, `file`. Prints `MOUNTED` once the mount is
 * there. */
#include "hostile.h"
#include <linux/fuse.h>
#include <grp.h>
#include <sys/mount.h>

/* Answers INIT, LOOKUP, GETATTR, OPEN and FLUSH; ENOSYS else. */
static void serve(int fd) {
    static char buf[FUSE_MIN_READ_BUFFER];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < (ssize_t)sizeof(struct fuse_in_header)) _exit(0);
        struct fuse_in_header *in = (struct fuse_in_header *)buf;
        struct { struct fuse_out_header h; char body[256]; } o;
        memset(&o, 0, sizeof o);
        size_t len = 0;
        struct fuse_attr attr = {0};
        int root = in->nodeid == FUSE_ROOT_ID;
        attr.ino = root ? 1 : 2;
        attr.mode = root ? S_IFDIR | 0755 : S_IFREG | 0644;
        attr.nlink = 1;
        attr.uid = in->uid;
        attr.gid = in->gid;
        switch (in->opcode) {
        case FUSE_INIT: {
            struct fuse_init_out *i = (struct fuse_init_out *)o.body;
            i->major = FUSE_KERNEL_VERSION;
            i->minor = FUSE_KERNEL_MINOR_VERSION;
            i->max_write = 4096;
            len = sizeof *i;
            break;
        }
        case FUSE_LOOKUP:
            if (strcmp(buf + sizeof *in, "file") != 0) {
                o.h.error = -ENOENT;
                break;
            }
            struct fuse_entry_out *e = (struct fuse_entry_out *)o.body;
            e->nodeid = 2;
            e->attr = attr;
            e->attr.ino = 2;
            e->attr.mode = S_IFREG | 0644;
            len = sizeof *e;
            break;
        case FUSE_GETATTR: {
            struct fuse_attr_out *a = (struct fuse_attr_out *)o.body;
            a->attr = attr;
            len = sizeof *a;
            break;
        }
        case FUSE_OPEN:
        case FUSE_OPENDIR:
            len = sizeof(struct fuse_open_out);
            break;
        case FUSE_FLUSH:
        case FUSE_RELEASE:
        case FUSE_RELEASEDIR:
            break;
        case FUSE_FORGET:
        case FUSE_BATCH_FORGET:
            continue;
        default:
            o.h.error = -ENOSYS;
        }
        o.h.len = sizeof o.h + len;
        o.h.unique = in->unique;
        if (write(fd, &o, o.h.len) < 0 && errno != ENOENT) _exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    unsigned uid = (unsigned)atoi(argv[2]), gid = (unsigned)atoi(argv[3]);
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        out("INFO opening /dev/fuse: %s", en(errno));
        return 3;
    }
    char opts[128];
    snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=%u,group_id=%u", fd, uid, gid);
    if (mount("fusehost", argv[1], "fuse.fusehost", MS_NOSUID | MS_NODEV, opts) < 0) {
        out("INFO mounting on %s: %s", argv[1], en(errno));
        return 3;
    }
    pid_t server = fork();
    if (server < 0) return 3;
    if (server == 0) {
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) _exit(3);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        serve(fd);
    }
    out("MOUNTED server=%d", server);
    return 0;
}
