/* The kernel's floors under issue 22's throughput table (bench/scale.sh):
 * runs per second of P worker processes, each doing runs back to back,
 * with nothing of capsule's in them.
 *
 *   scalefloor bare P RUNS PROGRAM
 *       a run is vfork + execve + waitpid of PROGRAM.
 *   scalefloor ns P RUNS PROGRAM
 *       a run is clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS); the
 *       child (PID 1 of the new PID namespace) writes its id maps, makes /
 *       private (recursively), mounts a fresh procfs on /proc, then vfork +
 *       execve + waitpid of PROGRAM; the worker reaps it.
 *   scalefloor ns+cg P RUNS PROGRAM BASE
 *       the same, plus a cgroup per run: mkdir BASE/w<worker>-<run>, opened
 *       O_PATH and given to clone3 with CLONE_INTO_CGROUP, and rmdir after
 *       the reap. BASE must be a cgroup v2 directory the caller may create
 *       cgroups in (its cgroup.subtree_control says which controllers the
 *       runs' cgroups get) and whose common ancestor with the caller's
 *       cgroup lets the caller migrate processes (a delegated subtree).
 *   scalefloor sandbox P RUNS PROGRAM
 *       the kernel work of a default capsule run (`capsule serve`, the
 *       library) of PROGRAM, with none of capsule's user-space logic; found
 *       by `strace -f` of served runs (docs/benchmarks-scale.md, "The
 *       sandbox floor"). Each worker is a long-lived parent like capsule's
 *       supervisor, set up before the clock starts: its own user namespace
 *       (the caller as root), time, mount (/ private), IPC and UTS
 *       namespaces (one set for all workers, re-executed inside its user
 *       namespace as capsule's supervisor is); each worker non-dumpable,
 *       with one loopback-only network namespace it keeps (as a pool of one
 *       per slot would). A run, as capsule's supervisor drives a slot: the
 *       go socket, the done pipe and the control eventfd, PID 1 cloned
 *       (CLONE_VM | CLONE_PIDFD | CLONE_NEWPID, in the user namespace)
 *       ahead, while the run before goes on; at the run's turn /dev/null
 *       sent as its stdin, stdout and stderr (SCM_RIGHTS), its done byte
 *       awaited, and PID 1 reaped (waitid on the pidfd) once the next run
 *       has started, as capsule answers before PID 1 has finished exiting.
 *       PID 1: parent-death signal, new IPC and UTS namespaces, a
 *       detached procfs (fsopen, hidepid=2), a copy of the worker's mount
 *       template (setns into it, unshare(CLONE_NEWNS): the host root
 *       cloned read-only and a read-only tmpfs /dev with the five device
 *       nodes and four symlinks, pivoted into, built once per worker before
 *       the clock, as capsule's long-lived supervisors do), then the run's
 *       own mounts (the procfs on /proc, tmpfs /dev/shm, /tmp and /run),
 *       the Landlock ruleset (capsule's nine path rules), setns
 *       into the kept network, the run's user namespace (the caller's uid
 *       and gid mapped onto the worker's 0), the 12 ucounts sysctls,
 *       non-dumpable, a SIGCHLD signalfd, then the tracee:
 *       clone(CLONE_VM | CLONE_FILES | CLONE_CHILD_CLEARTID), PID 1 asleep
 *       in a futex until its execve. The tracee, in PID 1's user
 *       namespace: a cgroup namespace, default signals, setsid,
 *       no_new_privs, every capability dropped (capsule's default seccomp
 *       filter it inherits: the worker installed it once), the go message,
 *       its stdio on 0-2 with their Landlock rules, chdir /, RLIMIT_CORE 0,
 *       everything but 0-2 close-on-exec, landlock_restrict_self, execve.
 *       PID 1 then waits (two timerfds, poll), reaps, writes the done byte
 *       and exits. Left out: the default secrets' Hide operations (with
 *       the benchmark's HOME they find nothing to hide, and capsule's plan
 *       is dropping them) and the supervisor's own per-run work in user
 *       space (planning, the arena, JSON).
 *   scalefloor sandbox+net P RUNS PROGRAM
 *       the same, but PID 1 makes a network namespace of its own per run
 *       (unshare(CLONE_NEWNET), lo up) instead of joining the kept one:
 *       capsule's default today (Config::own_network).
 *   SCALEFLOOR_U3=1 (sandbox modes only): the user namespaces as capsule
 *       had them before 2026-12-02: PID 1's mapping root onto the worker's
 *       (maps 0 0 1, one more user namespace counted in its ucounts) and
 *       the tracee cloned into one more (CLONE_NEWUSER), where it writes
 *       the caller's ids onto PID 1's root.
 *   SCALEFLOOR_TREE=clone (sandbox modes only): the tree built per run as
 *       capsule did before its mount template (and still does for a
 *       one-shot run): a new mount namespace, open_tree of / recursive and
 *       read-only, the device nodes cloned, the root attached, /dev built,
 *       the run's mounts, pivot_root and the old root detached.
 *   SCALEFLOOR_WITHOUT=PART,... (sandbox modes only) leaves parts out, to
 *       attribute the cost: seccomp, landlock, tree (the mount tree and
 *       pivot; the mount namespace and procfs stay), net (`sandbox`: no join),
 *       ipcuts (the IPC and UTS namespaces), pid1-userns (the run's user
 *       namespace, its maps and the ucounts: the program then runs as the
 *       worker's root, with no capability), ucounts, tracee-userns (with
 *       SCALEFLOOR_U3: the tracee's user namespace and maps), caps (the
 *       capability drops),
 *       pipeline (each run prepared only after the one before is reaped,
 *       serial like the ns floor).
 *
 * RUNS are split evenly over the P workers (RUNS rounded up to a multiple
 * of P); all workers start together, set up, after a pipe releases them,
 * and the time is from the release to the last worker's exit. Prints one line:
 * "MODE P RUNS SECONDS RUNS_PER_SECOND CPU_US_PER_RUN", the last the user
 * and system time of all the workers and their reaped descendants (their
 * set-up included; not the kernel threads' work, such as a network
 * namespace's teardown) per run. Any failed run exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { BARE, NS, NS_CG, SANDBOX, SANDBOX_NET };

static char *prog_argv[2];
static char *const prog_envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
static int outer_uid, outer_gid;
static const char *base;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "scalefloor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die(path);
    close(fd);
}

/* vfork + execve + waitpid; the program's wait status. */
static int run_program(void) {
    pid_t p = vfork();
    if (p == 0) {
        execve(prog_argv[0], prog_argv, prog_envp);
        _exit(127);
    }
    if (p < 0)
        die("vfork");
    int st;
    if (waitpid(p, &st, 0) < 0)
        die("waitpid");
    return st;
}

static void reap_ok(pid_t p, const char *what) {
    int st;
    if (waitpid(p, &st, 0) < 0)
        die("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "scalefloor: a %s failed (wait status %#x)\n", what, st);
        exit(1);
    }
}

/* One floor run: fresh user, pid and mount namespaces (in cgroup_fd's
 * cgroup if it is not -1), id maps, / private, a procfs, the program. */
static void floor_run(int cgroup_fd) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS;
    args.exit_signal = SIGCHLD;
    if (cgroup_fd >= 0) {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cgroup_fd;
    }
    long p = syscall(SYS_clone3, &args, sizeof args);
    if (p < 0)
        die(cgroup_fd >= 0 ? "clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_INTO_CGROUP)"
                           : "clone3(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS)");
    if (p == 0) {
        char line[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(line, sizeof line, "0 %d 1", outer_uid);
        write_file("/proc/self/uid_map", line);
        snprintf(line, sizeof line, "0 %d 1", outer_gid);
        write_file("/proc/self/gid_map", line);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            die("making / private");
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            die("mounting /proc");
        int st = run_program();
        _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1);
    }
    reap_ok((pid_t)p, "floor run");
}


/* ---- the sandbox floor (modes sandbox and sandbox+net) ---------------- */

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Parts SCALEFLOOR_WITHOUT may leave out. */
enum {
    W_SECCOMP = 1 << 0,
    W_LANDLOCK = 1 << 1,
    W_TREE = 1 << 2,
    W_NET = 1 << 3,
    W_IPCUTS = 1 << 4,
    W_PID1_USERNS = 1 << 5,
    W_UCOUNTS = 1 << 6,
    W_TRACEE_USERNS = 1 << 7,
    W_CAPS = 1 << 8,
    W_PIPELINE = 1 << 9,
};
static const char *const part_names[] = {"seccomp", "landlock", "tree", "net", "ipcuts",
                                         "pid1-userns", "ucounts", "tracee-userns", "caps", "pipeline"};
static unsigned without;
static int net_per_run;

/* capsule's `default` seccomp policy for x86_64 with the vsock guard, as its
 * supervisor hands it over (129 instructions, flags 0): captured from the
 * memfd it writes it to (strace -f -s 8192 -xx of `capsule run --no-agent`,
 * release build of 2026-12-02 with the rule on PID 1's limits;
 * crates/capsule/src/plan/seccomp/ makes it). Installed
 * once per worker and inherited by its PID 1s and tracees, as capsule's
 * spawner thread does (docs/seccomp.md, "One install for all runs"). */
static struct sock_filter default_filter[] = {
    {0x20, 0, 0, 0x4}, {0x15, 1, 0, 0xc000003e}, {0x6, 0, 0, 0x50026}, {0x20, 0, 0, 0x0},
    {0x35, 0, 2, 0x40000000}, {0x15, 1, 0, 0xffffffff}, {0x6, 0, 0, 0x50026}, {0x35, 45, 0, 0xd5},
    {0x35, 26, 0, 0x8c}, {0x35, 11, 0, 0x86}, {0x15, 2, 0, 0x10}, {0x15, 8, 0, 0x67},
    {0x5, 0, 0, 0x55}, {0x20, 0, 0, 0x18}, {0x15, 0, 1, 0x5412}, {0x6, 0, 0, 0x50001},
    {0x20, 0, 0, 0x18}, {0x15, 0, 1, 0x541c}, {0x6, 0, 0, 0x50001}, {0x5, 0, 0, 0x4e},
    {0x6, 0, 0, 0x50001}, {0x15, 4, 0, 0x86}, {0x15, 4, 0, 0x87}, {0x15, 2, 0, 0x88},
    {0x15, 1, 0, 0x8b}, {0x5, 0, 0, 0x48}, {0x6, 0, 0, 0x50001}, {0x20, 0, 0, 0x10},
    {0x15, 5, 0, 0x0}, {0x15, 4, 0, 0x8}, {0x15, 3, 0, 0x20000}, {0x15, 2, 0, 0x20008},
    {0x15, 1, 0, 0xffffffff}, {0x6, 0, 0, 0x50001}, {0x5, 0, 0, 0x3f}, {0x35, 9, 0, 0xaf},
    {0x35, 3, 0, 0xa4}, {0x15, 1, 0, 0xa3}, {0x5, 0, 0, 0x3b}, {0x6, 0, 0, 0x50001},
    {0x35, 1, 0, 0xa7}, {0x5, 0, 0, 0x38}, {0x35, 1, 0, 0xaa}, {0x6, 0, 0, 0x50001},
    {0x5, 0, 0, 0x35}, {0x35, 3, 0, 0xb3}, {0x35, 1, 0, 0xb1}, {0x6, 0, 0, 0x50001},
    {0x5, 0, 0, 0x31}, {0x15, 2, 0, 0xb3}, {0x15, 1, 0, 0xd4}, {0x5, 0, 0, 0x2e},
    {0x6, 0, 0, 0x50001}, {0x35, 25, 0, 0x131}, {0x35, 9, 0, 0x12a}, {0x35, 3, 0, 0xf7},
    {0x15, 1, 0, 0xf6}, {0x5, 0, 0, 0x28}, {0x6, 0, 0, 0x50001}, {0x35, 1, 0, 0xf8},
    {0x5, 0, 0, 0x25}, {0x35, 1, 0, 0xfb}, {0x6, 0, 0, 0x50001}, {0x5, 0, 0, 0x22},
    {0x15, 4, 0, 0x12a}, {0x15, 4, 0, 0x12e}, {0x15, 11, 0, 0x12f}, {0x15, 1, 0, 0x130},
    {0x5, 0, 0, 0x1d}, {0x6, 0, 0, 0x50001}, {0x20, 0, 0, 0x10}, {0x15, 0, 5, 0x1},
    {0x20, 0, 0, 0x24}, {0x15, 0, 2, 0x0}, {0x20, 0, 0, 0x20}, {0x15, 1, 0, 0x0},
    {0x6, 0, 0, 0x50001}, {0x5, 0, 0, 0x14}, {0x6, 0, 0, 0x50026}, {0x35, 9, 0, 0x143},
    {0x35, 3, 0, 0x13a}, {0x15, 1, 0, 0x139}, {0x5, 0, 0, 0xf}, {0x6, 0, 0, 0x50001},
    {0x35, 1, 0, 0x140}, {0x5, 0, 0, 0xc}, {0x15, 1, 0, 0x142}, {0x6, 0, 0, 0x50001},
    {0x5, 0, 0, 0x9}, {0x35, 5, 0, 0x1ac}, {0x35, 1, 0, 0x144}, {0x6, 0, 0, 0x50001},
    {0x35, 1, 0, 0x1a9}, {0x5, 0, 0, 0x4}, {0x6, 0, 0, 0x50026}, {0x15, 1, 0, 0x1bb},
    {0x5, 0, 0, 0x1}, {0x6, 0, 0, 0x50001}, {0x20, 0, 0, 0x0}, {0x35, 5, 0, 0x11d},
    {0x35, 2, 0, 0x36}, {0x15, 11, 0, 0x29}, {0x6, 0, 0, 0x7fff0000}, {0x15, 13, 0, 0x66},
    {0x6, 0, 0, 0x7fff0000}, {0x35, 2, 0, 0x1a9}, {0x15, 8, 0, 0x167}, {0x6, 0, 0, 0x7fff0000},
    {0x35, 1, 0, 0x40000000}, {0x25, 18, 14, 0x1ab}, {0x15, 2, 0, 0x40000029},
    {0x35, 0, 16, 0x400001a9}, {0x25, 15, 11, 0x400001ab}, {0x20, 0, 0, 0x4},
    {0x15, 4, 13, 0xc000003e}, {0x20, 0, 0, 0x4}, {0x15, 2, 11, 0x40000003}, {0x20, 0, 0, 0x4},
    {0x15, 3, 9, 0x40000003}, {0x20, 0, 0, 0x10}, {0x15, 4, 0, 0x28}, {0x6, 0, 0, 0x7fff0000},
    {0x20, 0, 0, 0x10}, {0x15, 1, 4, 0x1}, {0x6, 0, 0, 0x50026}, {0x6, 0, 0, 0x50061},
    {0x6, 0, 0, 0x5005d}, {0x6, 0, 0, 0x5005f}, {0x6, 0, 0, 0x7fff0000}
};

/* Landlock (linux/landlock.h of Debian 12 predates the net and scoped fields). */
#define LL_WRITE_FILE (1ULL << 1)
#define LL_TRUNCATE (1ULL << 14)
#define LL_FS_WRITE_ABI1 (0x1ffeULL & ~((1ULL << 2) | (1ULL << 3))) /* write, remove, make_* */
#define LL_REFER (1ULL << 13)
struct ll_ruleset_attr {
    uint64_t fs, net, scoped;
};
struct ll_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));
static uint64_t ll_fs, ll_scoped;

/* capsule's writable places in the default host view: a file grant (write
 * and truncate) or, for the directories, every handled right. */
static const struct {
    const char *path;
    int dir;
} ll_paths[] = {{"/proc", 0},     {"/dev/null", 0}, {"/dev/zero", 0}, {"/dev/full", 0}, {"/dev/random", 0},
                {"/dev/urandom", 0}, {"/dev/shm", 1}, {"/tmp", 1},      {"/run", 1}};
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom"};
static const char *const host_nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
/* PID 1's ucounts (plan/rlimits.rs UCOUNTS with the default limits). */
static const struct {
    const char *file, *value;
} ucounts[] = {{"sys/user/max_user_namespaces", "256"},   {"sys/user/max_pid_namespaces", "256"},
               {"sys/user/max_mnt_namespaces", "256"},    {"sys/user/max_net_namespaces", "256"},
               {"sys/user/max_ipc_namespaces", "256"},    {"sys/user/max_uts_namespaces", "256"},
               {"sys/user/max_cgroup_namespaces", "257"}, {"sys/user/max_time_namespaces", "256"},
               {"sys/user/max_inotify_instances", "8"},   {"sys/user/max_inotify_watches", "8192"},
               {"sys/user/max_fanotify_groups", "8"},     {"sys/user/max_fanotify_marks", "8192"}};

/* The worker's state, shared with its PID 1s and tracees (CLONE_VM). */
static int cap_last_cap;
static int kept_net = -1, self_pidfd = -1;
/* The worker's mount template (a mount namespace), or -1: SCALEFLOOR_TREE=clone. */
static int tmpl_ns = -1;
static char tracee_uid_map[32], tracee_gid_map[32];
/* SCALEFLOOR_U3: the tracee in a user namespace of its own (capsule before 2026-12-02). */
static int tracee_u3;

/* A run slot: one run's descriptors, results and stacks. A worker cycles
 * through three: the run going on, the next one's PID 1 prepared ahead,
 * and the previous one's PID 1, which may still be exiting (tearing its
 * namespaces down) on its stack until the worker reaps it. */
#define PID1_STACK (1 << 20)
#define TRACEE_STACK (256 << 10)
struct slot {
    char *stacks; /* PID1_STACK for PID 1, then TRACEE_STACK for its tracee */
    int go[2], done[2], control, null[3], pidfd;
    int proc, ruleset;        /* PID 1's, shared with its tracee */
    int busy;                 /* a PID 1 not reaped yet */
    volatile int tracee_status;
    volatile pid_t clear_word; /* CLONE_CHILD_CLEARTID: cleared at the tracee's execve or exit */
    const char *volatile fail_what;
    volatile int fail_errno;
};
static struct slot slots[3];

/* The slot whose stacks the calling PID 1 or tracee runs on (they share
 * the worker's memory, thread-local storage included); NULL elsewhere. */
static struct slot *me(void) {
    char here;
    for (int i = 0; i < 3; i++)
        if (&here >= slots[i].stacks && &here < slots[i].stacks + PID1_STACK + TRACEE_STACK)
            return &slots[i];
    return NULL;
}

/* A child's failure: recorded for the worker, which reports it. */
static int child_fail(const char *what) {
    struct slot *s = me();
    if (!s) {
        fprintf(stderr, "scalefloor: %s: %s\n", what, strerror(errno));
        _exit(1);
    }
    s->fail_errno = errno;
    s->fail_what = what;
    _exit(1);
}

static void sys_ok(long r, const char *what) {
    if (r < 0)
        child_fail(what);
}

static void write_at(int dir, const char *file, const char *text) {
    int fd = openat(dir, file, O_WRONLY | O_CLOEXEC);
    sys_ok(fd, file);
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n)
        child_fail(file);
    close(fd);
}

static int open_beneath(int root, const char *path) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
    sys_ok(fd, path);
    return fd;
}

static void attach(int from, int to, const char *what) {
    sys_ok(move_mount(from, "", to, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH), what);
}

static void set_attr(int fd, unsigned flags, uint64_t set, const char *what) {
    struct mount_attr a = {.attr_set = set};
    sys_ok(mount_setattr(fd, "", AT_EMPTY_PATH | flags, &a, sizeof a), what);
}

static int new_tmpfs(const char *size, const char *mode, unsigned attrs) {
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    sys_ok(fs, "fsopen tmpfs");
    sys_ok(fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0), "fsconfig size");
    sys_ok(fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0), "fsconfig mode");
    sys_ok(fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0), "fsconfig create tmpfs");
    int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
    sys_ok(m, "fsmount tmpfs");
    close(fs);
    return m;
}

static void loopback_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sys_ok(s, "socket");
    struct ifreq r;
    memset(&r, 0, sizeof r);
    strcpy(r.ifr_name, "lo");
    sys_ok(ioctl(s, SIOCGIFFLAGS, &r), "SIOCGIFFLAGS lo");
    r.ifr_flags |= IFF_UP;
    sys_ok(ioctl(s, SIOCSIFFLAGS, &r), "SIOCSIFFLAGS lo");
    close(s);
}

/* The host root cloned read-only, attached over /, and the five device
 * nodes cloned (child/mounts.rs's clone_sources and attach_root). */
static int clone_root(int nodes[5]) {
    int root = open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    sys_ok(root, "open_tree /");
    set_attr(root, AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "mount_setattr /");
    for (int i = 0; i < 5; i++) {
        nodes[i] = open_tree(AT_FDCWD, host_nodes[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        sys_ok(nodes[i], host_nodes[i]);
        set_attr(nodes[i], 0, MOUNT_ATTR_NOSUID, host_nodes[i]);
    }
    sys_ok(move_mount(root, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH), "attaching the root");
    return root;
}

/* /dev as child/mounts.rs's build_dev makes it: a tmpfs with the nodes and
 * four symlinks, /dev/shm's tmpfs unless `shm` is 0 (the template's), then
 * read-only. */
static void build_dev(int root, int nodes[5], int shm) {
    int at = open_beneath(root, "/dev");
    int dev = new_tmpfs("1048576", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    for (int i = 0; i < 5; i++) {
        int f = openat(dev, dev_nodes[i], O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0666);
        sys_ok(f, dev_nodes[i]);
        close(f);
    }
    sys_ok(mkdirat(dev, "shm", 01777), "mkdir /dev/shm");
    sys_ok(symlinkat("/proc/self/fd", dev, "fd"), "symlink");
    sys_ok(symlinkat("/proc/self/fd/0", dev, "stdin"), "symlink");
    sys_ok(symlinkat("/proc/self/fd/1", dev, "stdout"), "symlink");
    sys_ok(symlinkat("/proc/self/fd/2", dev, "stderr"), "symlink");
    attach(dev, at, "attaching /dev");
    for (int i = 0; i < 5; i++) {
        int t = openat(dev, dev_nodes[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
        sys_ok(t, dev_nodes[i]);
        attach(nodes[i], t, "attaching a device node");
        close(t);
        close(nodes[i]);
    }
    if (shm) {
        int shm_at = openat(dev, "shm", O_PATH | O_DIRECTORY | O_CLOEXEC);
        sys_ok(shm_at, "/dev/shm");
        int fs = new_tmpfs("67108864", "1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        attach(fs, shm_at, "attaching /dev/shm");
        close(fs);
        close(shm_at);
    }
    set_attr(dev, 0, MOUNT_ATTR_RDONLY, "making /dev read-only");
    close(dev);
    close(at);
}

/* The pivot into `root` and the old root detached. */
static void pivot_into(int root) {
    sys_ok(fchdir(root), "fchdir");
    sys_ok(syscall(SYS_pivot_root, ".", "."), "pivot_root");
    sys_ok(umount2(".", MNT_DETACH), "detaching the old root");
    sys_ok(chdir("/"), "chdir /");
}

/* PID 1's step 9: the default host view's tree, as capsule's mount plan
 * builds it (child/mounts.rs), then the pivot. */
static void build_tree(int proc) {
    int nodes[5];
    int root = clone_root(nodes);
    int at = open_beneath(root, "/proc");
    attach(proc, at, "attaching /proc");
    close(at);
    build_dev(root, nodes, 1);
    at = open_beneath(root, "/tmp");
    int tmp = new_tmpfs("134217728", "1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    attach(tmp, at, "attaching /tmp");
    close(tmp);
    close(at);
    close(open_beneath(root, "/run")); /* capsule looks it up twice (the mount point, then the mount) */
    at = open_beneath(root, "/run");
    int run = new_tmpfs("16777216", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    attach(run, at, "attaching /run");
    close(run);
    close(at);
    pivot_into(root);
    close(root);
}

/* The worker's mount template (capsule's supervisor/template.rs): the root
 * clone and /dev without its shm tmpfs, pivoted into, in a namespace a child
 * builds and the worker keeps by a descriptor. Not timed. */
static void build_template(void) {
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        die("pipe2");
    pid_t c = fork();
    if (c < 0)
        die("fork");
    if (c == 0) {
        sys_ok(unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (the template)");
        int nodes[5];
        int root = clone_root(nodes);
        build_dev(root, nodes, 0);
        pivot_into(root);
        char b = 1;
        if (write(ready[1], &b, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(ready[1]);
    char b;
    if (read(ready[0], &b, 1) != 1) {
        fprintf(stderr, "scalefloor: building the mount template failed\n");
        exit(1);
    }
    close(ready[0]);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)c);
    tmpl_ns = open(path, O_RDONLY | O_CLOEXEC);
    sys_ok(tmpl_ns, path);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
}

/* PID 1's steps 8-9 on the template: the run's own mounts in its copy, in
 * capsule's order (/dev/shm, /tmp, /run, the procfs last). */
static void tree_fresh_parts(int proc) {
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    sys_ok(root, "open /");
    static const struct {
        const char *at, *size, *mode;
        unsigned attrs;
    } fresh[] = {
        {"/dev/shm", "67108864", "1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV},
        {"/tmp", "134217728", "1777", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV},
        {"/run", "16777216", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC},
    };
    for (size_t i = 0; i < sizeof fresh / sizeof fresh[0]; i++) {
        int at = open_beneath(root, fresh[i].at);
        int fs = new_tmpfs(fresh[i].size, fresh[i].mode, fresh[i].attrs);
        attach(fs, at, fresh[i].at);
        close(fs);
        close(at);
    }
    int at = open_beneath(root, "/proc");
    attach(proc, at, "attaching /proc");
    close(at);
    close(root);
}

/* PID 1's step 10: the ruleset and its path rules. */
static int build_ruleset(void) {
    struct ll_ruleset_attr attr = {.fs = ll_fs, .scoped = ll_scoped};
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    sys_ok(rs, "landlock_create_ruleset");
    for (size_t i = 0; i < sizeof ll_paths / sizeof ll_paths[0]; i++) {
        int fd = open(ll_paths[i].path, O_PATH | O_CLOEXEC);
        sys_ok(fd, ll_paths[i].path);
        struct stat st;
        sys_ok(fstat(fd, &st), ll_paths[i].path);
        uint64_t file = ll_fs & (LL_WRITE_FILE | LL_TRUNCATE);
        struct ll_path_beneath pb = {.allowed_access = ll_paths[i].dir && S_ISDIR(st.st_mode) ? ll_fs : file,
                                     .parent_fd = fd};
        sys_ok(syscall(SYS_landlock_add_rule, rs, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &pb, 0), ll_paths[i].path);
        close(fd);
    }
    return rs;
}

static void drop_caps(void) {
    /* NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE and their locks. */
    sys_ok(prctl(PR_SET_SECUREBITS, 0xefUL), "securebits");
    for (int cap = 0; cap <= cap_last_cap; cap++)
        if (prctl(PR_CAPBSET_DROP, (unsigned long)cap) != 0 && errno != EINVAL)
            child_fail("PR_CAPBSET_DROP");
    sys_ok(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "PR_CAP_AMBIENT_CLEAR_ALL");
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    sys_ok(syscall(SYS_capset, &h, d), "capset");
}

/* The tracee (child/tracee.rs), on PID 1's memory and descriptor table. */
static int tracee_main(void *arg) {
    struct slot *s = arg;
    prctl(PR_SET_NAME, "floor-tracee");
    if (tracee_u3 && !(without & W_TRACEE_USERNS)) {
        write_at(s->proc, "self/setgroups", "deny");
        write_at(s->proc, "self/gid_map", tracee_gid_map);
        write_at(s->proc, "self/uid_map", tracee_uid_map);
    }
    sys_ok(unshare(CLONE_NEWCGROUP), "unshare(CLONE_NEWCGROUP)");
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig <= 64; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &dfl, NULL); /* glibc refuses its own two, as capsule ignores */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    sys_ok(setsid(), "setsid");
    sys_ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs");
    if (!(without & W_CAPS))
        drop_caps();
    /* The seccomp filter: inherited from the worker (see sandbox_worker_setup's caller). */
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    if (recvmsg(s->go[1], &msg, MSG_CMSG_CLOEXEC) != 1)
        child_fail("recvmsg (go)");
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(3 * sizeof(int))) {
        errno = EBADMSG;
        child_fail("the go message");
    }
    int fds[3];
    memcpy(fds, CMSG_DATA(c), sizeof fds);
    for (int i = 0; i < 3; i++)
        sys_ok(dup2(fds[i], i), "dup2");
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    if (s->ruleset >= 0) {
        /* The stdio that are files or character devices open for writing get a rule. */
        for (int i = 0; i < 3; i++) {
            struct stat st;
            int fl = fcntl(i, F_GETFL);
            if (fstat(i, &st) == 0 && (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) && fl >= 0 &&
                (fl & O_ACCMODE) != O_RDONLY) {
                struct ll_path_beneath pb = {.allowed_access = ll_fs & (LL_WRITE_FILE | LL_TRUNCATE), .parent_fd = i};
                (void)syscall(SYS_landlock_add_rule, s->ruleset, 1, &pb, 0);
            }
        }
    }
    sys_ok(chdir("/"), "chdir");
    struct rlimit core = {0, 0};
    sys_ok(setrlimit(RLIMIT_CORE, &core), "setrlimit");
    sys_ok(syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC), "close_range");
    if (s->ruleset >= 0)
        sys_ok(syscall(SYS_landlock_restrict_self, s->ruleset, 0), "landlock_restrict_self");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    execve(prog_argv[0], prog_argv, prog_envp);
    child_fail("execve");
    return 1;
}

/* PID 1 (child/pid1.rs and wait.rs), in the worker's user namespace. */
static int pid1_main(void *arg) {
    struct slot *s = arg;
    prctl(PR_SET_NAME, "floor-pid1");
    /* Only this run's descriptors (not the other slots', nor the worker's ends of this one's). */
    int keep[] = {self_pidfd, kept_net, s->go[1], s->done[1], s->control, tmpl_ns};
    int n = sizeof keep / sizeof keep[0];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && keep[j] < keep[j - 1]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned from = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < (int)from)
            continue;
        if ((unsigned)keep[i] > from)
            syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0);
        from = (unsigned)keep[i] + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
    sigaction(SIGBUS, &dfl, NULL);
    sys_ok(prctl(PR_SET_PDEATHSIG, SIGKILL), "PR_SET_PDEATHSIG");
    struct pollfd pf = {.fd = self_pidfd, .events = POLLIN};
    if (poll(&pf, 1, 0) > 0)
        _exit(1);
    if (!(without & W_IPCUTS))
        sys_ok(unshare(CLONE_NEWIPC | CLONE_NEWUTS), "unshare(CLONE_NEWIPC | CLONE_NEWUTS)");
    int fs = fsopen("proc", FSOPEN_CLOEXEC);
    sys_ok(fs, "fsopen proc");
    sys_ok(fsconfig(fs, FSCONFIG_SET_STRING, "hidepid", "2", 0), "fsconfig hidepid");
    sys_ok(fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0), "fsconfig create proc");
    s->proc = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    sys_ok(s->proc, "fsmount proc");
    close(fs);
    if (tmpl_ns >= 0 && !(without & W_TREE)) {
        sys_ok(setns(tmpl_ns, CLONE_NEWNS), "setns (the mount template)");
        close(tmpl_ns);
        sys_ok(unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)");
        tree_fresh_parts(s->proc);
    } else {
        sys_ok(unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)");
        if (!(without & W_TREE))
            build_tree(s->proc);
    }
    s->ruleset = without & W_LANDLOCK ? -1 : build_ruleset();
    if (net_per_run) {
        sys_ok(unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)");
        loopback_up();
    } else if (!(without & W_NET)) {
        sys_ok(setns(kept_net, CLONE_NEWNET), "setns (the kept network)");
    }
    if (!(without & W_PID1_USERNS)) {
        sys_ok(unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER) (PID 1)");
        write_at(s->proc, "self/setgroups", "deny");
        write_at(s->proc, "self/gid_map", tracee_u3 ? "0 0 1\n" : tracee_gid_map);
        write_at(s->proc, "self/uid_map", tracee_u3 ? "0 0 1\n" : tracee_uid_map);
        if (!(without & W_UCOUNTS))
            for (size_t i = 0; i < sizeof ucounts / sizeof ucounts[0]; i++)
                /* U3 was counted on top: one more user namespace. */
                write_at(s->proc, ucounts[i].file, tracee_u3 && i == 0 ? "257" : ucounts[i].value);
    }
    sys_ok(prctl(PR_SET_PDEATHSIG, SIGKILL), "PR_SET_PDEATHSIG");
    if (poll(&pf, 1, 0) > 0)
        _exit(1);
    sys_ok(prctl(PR_SET_DUMPABLE, 0), "PR_SET_DUMPABLE");
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    sys_ok(sfd, "signalfd");
    s->clear_word = 1;
    int flags = CLONE_VM | CLONE_FILES | CLONE_CHILD_CLEARTID | SIGCHLD;
    if (tracee_u3 && !(without & W_TRACEE_USERNS))
        flags |= CLONE_NEWUSER;
    pid_t tracee = clone(tracee_main, s->stacks + PID1_STACK + TRACEE_STACK, flags, s, NULL, NULL,
                         (pid_t *)&s->clear_word);
    sys_ok(tracee, "clone (the tracee)");
    /* Asleep (interruptibly) until the tracee has exec'd or died: the kernel clears the word then. */
    while (__atomic_load_n(&s->clear_word, __ATOMIC_SEQ_CST) != 0)
        syscall(SYS_futex, &s->clear_word, FUTEX_WAIT, 1, NULL, NULL, 0);
    if (s->ruleset >= 0)
        close(s->ruleset);
    close(s->go[1]);
    close(0);
    close(1);
    close(2);
    int wall = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    int cpu = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    sys_ok(wall | cpu, "timerfd_create");
    for (;;) {
        struct pollfd p[5] = {{.fd = sfd, .events = POLLIN},
                              {.fd = self_pidfd, .events = POLLIN},
                              {.fd = wall, .events = POLLIN},
                              {.fd = cpu, .events = POLLIN},
                              {.fd = s->control, .events = POLLIN}};
        sys_ok(poll(p, 5, -1), "poll");
        if (p[1].revents)
            _exit(1);
        struct signalfd_siginfo si[4];
        while (read(sfd, si, sizeof si) > 0) {
        }
        int st;
        pid_t r;
        while ((r = wait4(-1, &st, WNOHANG | __WALL, NULL)) > 0) {
            if (r != tracee)
                continue;
            s->tracee_status = st;
            if (wait4(-1, &st, WNOHANG | __WALL, NULL) >= 0) { /* (errno is shared: not looked at) */
                errno = EBUSY;
                child_fail("the tracee left processes behind");
            }
            struct rusage ru;
            getrusage(RUSAGE_CHILDREN, &ru);
            if (write(s->done[1], "d", 1) != 1)
                child_fail("writing the done byte");
            _exit(0);
        }
    }
}

/* The supervisor's set-up, in the benchmark's main process before the
 * workers are forked (not timed): a user namespace with the caller as
 * root, then a re-execution inside it, as capsule's supervisor does, so
 * that the memory PID 1 and the tracee share, non-dumpable, belongs to
 * that namespace and their /proc files to its root (the caller). Then the
 * time, mount (/ private), IPC and UTS namespaces shared by every run. */
static void sandbox_supervisor(char **argv) {
    char line[64];
    const char *ids = getenv("SCALEFLOOR_OUTER_IDS");
    if (!ids) {
        outer_uid = getuid();
        outer_gid = getgid();
        if (unshare(CLONE_NEWUSER) != 0)
            die("unshare(CLONE_NEWUSER)");
        write_file("/proc/self/setgroups", "deny");
        snprintf(line, sizeof line, "0 %d 1\n", outer_gid);
        write_file("/proc/self/gid_map", line);
        snprintf(line, sizeof line, "0 %d 1\n", outer_uid);
        write_file("/proc/self/uid_map", line);
        snprintf(line, sizeof line, "%d %d", outer_uid, outer_gid);
        setenv("SCALEFLOOR_OUTER_IDS", line, 1);
        execv("/proc/self/exe", argv);
        die("re-executing /proc/self/exe");
    }
    if (sscanf(ids, "%d %d", &outer_uid, &outer_gid) != 2) {
        fprintf(stderr, "scalefloor: bad SCALEFLOOR_OUTER_IDS\n");
        exit(2);
    }
    if (unshare(CLONE_NEWTIME) == 0) {
        int t = open("/proc/self/ns/time_for_children", O_RDONLY | O_CLOEXEC);
        if (t < 0 || setns(t, CLONE_NEWTIME) != 0)
            die("joining the time namespace");
        close(t);
    } else if (errno != EINVAL) {
        die("unshare(CLONE_NEWTIME)");
    }
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0)
        die("unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("making / private");
    if (sethostname("capsule", 7) != 0)
        die("sethostname");
}

/* A worker's own set-up (not timed): the network it keeps, a pidfd of
 * itself for PID 1 to watch, non-dumpable, the stacks. */
static void sandbox_worker_setup(void) {
    char line[64];
    const char *tree = getenv("SCALEFLOOR_TREE");
    if (tree && strcmp(tree, "clone") != 0) {
        fprintf(stderr, "scalefloor: SCALEFLOOR_TREE: unknown value '%s' (only 'clone')\n", tree);
        exit(1);
    }
    if (!tree && !(without & W_TREE))
        build_template();
    if (!net_per_run && !(without & W_NET)) {
        /* The kept network, made by a helper in this user namespace (the worker stays in the host's). */
        int ready[2], hold[2];
        if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0)
            die("pipe2");
        pid_t h = fork();
        if (h < 0)
            die("fork");
        if (h == 0) {
            char b = 0;
            if (unshare(CLONE_NEWNET) != 0)
                die("unshare(CLONE_NEWNET)");
            loopback_up();
            if (write(ready[1], &b, 1) != 1)
                _exit(1);
            close(hold[1]);
            (void)read(hold[0], &b, 1);
            _exit(0);
        }
        char b;
        close(ready[1]);
        close(hold[0]);
        if (read(ready[0], &b, 1) != 1) {
            fprintf(stderr, "scalefloor: making the kept network failed\n");
            exit(1);
        }
        snprintf(line, sizeof line, "/proc/%d/ns/net", (int)h);
        kept_net = open(line, O_RDONLY | O_CLOEXEC);
        if (kept_net < 0)
            die(line);
        close(hold[1]);
        close(ready[0]);
        reap_ok(h, "network helper");
    }
    if (prctl(PR_SET_DUMPABLE, 0) != 0)
        die("PR_SET_DUMPABLE");
    self_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (self_pidfd < 0)
        die("pidfd_open");
    /* The run's uid and gid (the caller's) mapped onto the worker's root (SCALEFLOOR_U3: onto PID 1's). */
    snprintf(tracee_uid_map, sizeof tracee_uid_map, "%d 0 1\n", outer_uid);
    snprintf(tracee_gid_map, sizeof tracee_gid_map, "%d 0 1\n", outer_gid);
    for (int i = 0; i < 3; i++) {
        slots[i].stacks = mmap(NULL, PID1_STACK + TRACEE_STACK, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (slots[i].stacks == MAP_FAILED)
            die("mmap (stacks)");
    }
}

/* A slot's run fails: what its PID 1 or tracee recorded. */
static void slot_failed(struct slot *s, const char *what, int code) {
    if (s->fail_what)
        fprintf(stderr, "scalefloor: a sandbox run failed: %s: %s\n", s->fail_what, strerror(s->fail_errno));
    else
        fprintf(stderr, "scalefloor: a sandbox run failed: %s (%d; program wait status %#x)\n", what, code,
                s->tracee_status);
    exit(1);
}

/* Reaps the slot's PID 1, which has sent its done byte (or died). */
static void slot_reap(struct slot *s) {
    if (!s->busy)
        return;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, &si, WEXITED) != 0)
        die("waitid (PID 1)");
    if (si.si_code != CLD_EXITED || si.si_status != 0)
        slot_failed(s, "PID 1's exit", si.si_status);
    close(s->pidfd);
    s->busy = 0;
}

/* Prepares a run in the slot ahead of its go, as capsule's supervisor
 * does: the run's descriptors and PID 1, which builds the sandbox; its
 * tracee then waits for the go message. */
static void slot_prepare(struct slot *s) {
    slot_reap(s);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->go) != 0)
        die("socketpair");
    if (pipe2(s->done, O_CLOEXEC) != 0 || fcntl(s->done[0], F_SETFL, O_NONBLOCK) != 0)
        die("pipe2");
    s->control = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->control < 0)
        die("eventfd");
    s->tracee_status = -1;
    s->fail_what = NULL;
    s->proc = s->ruleset = -1;
    s->pidfd = -1;
    pid_t p = clone(pid1_main, s->stacks + PID1_STACK, CLONE_VM | CLONE_PIDFD | CLONE_NEWPID | SIGCHLD, s,
                    &s->pidfd);
    if (p < 0)
        die("clone (PID 1)");
    s->busy = 1;
    close(s->go[1]);
    close(s->done[1]);
    for (int i = 0; i < 3; i++) {
        s->null[i] = open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (s->null[i] < 0)
            die("/dev/null");
    }
}

/* The request: the go message with the run's stdio (SCM_RIGHTS). */
static void slot_go(struct slot *s) {
    char g = 'g';
    struct iovec iov = {.iov_base = &g, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof s->null)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof s->null);
    memcpy(CMSG_DATA(c), s->null, sizeof s->null);
    if (sendmsg(s->go[0], &msg, MSG_NOSIGNAL) != 1) {
        slot_reap(s);
        slot_failed(s, "sending the go message", errno);
    }
    for (int i = 0; i < 3; i++)
        close(s->null[i]);
}

/* The result: PID 1's done byte (it then exits, reaped later). */
static void slot_wait(struct slot *s) {
    char d = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->done[0], .events = POLLIN}, {.fd = s->pidfd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            die("poll");
        if (read(s->done[0], &d, 1) == 1)
            break;
        if (pf[1].revents) {
            slot_reap(s);
            slot_failed(s, "PID 1 exited without a result", 0);
        }
    }
    if (!WIFEXITED(s->tracee_status) || WEXITSTATUS(s->tracee_status) != 0)
        slot_failed(s, "the program failed", 0);
    close(s->go[0]);
    close(s->done[0]);
    close(s->control);
}

/* A worker's sandbox runs: each run's PID 1 is prepared while the run
 * before goes on, and reaped once the run after has started. */
static void sandbox_runs(int runs) {
    for (int i = 0; i < runs; i++) {
        struct slot *s = &slots[i % 3];
        slot_go(s);
        if (without & W_PIPELINE) {
            /* Serial, like the ns floor: the result, the reap, then the next PID 1. */
            slot_wait(s);
            slot_reap(s);
            if (i + 1 < runs)
                slot_prepare(&slots[(i + 1) % 3]);
            continue;
        }
        if (i + 1 < runs)
            slot_prepare(&slots[(i + 1) % 3]);
        slot_wait(s);
    }
    for (int i = 0; i < 3; i++)
        slot_reap(&slots[i]);
}

/* Parses SCALEFLOOR_WITHOUT; -1 on an unknown part. */
static int parse_without(const char *s) {
    char buf[256];
    if (!s || !*s)
        return 0;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof part_names / sizeof part_names[0] && strcmp(tok, part_names[i]) != 0)
            i++;
        if (i == sizeof part_names / sizeof part_names[0]) {
            fprintf(stderr, "scalefloor: SCALEFLOOR_WITHOUT: unknown part '%s'\n", tok);
            return -1;
        }
        without |= 1U << i;
    }
    return 0;
}

/* The host's Landlock ABI decides the handled rights, as in capsule's plan/landlock.rs. */
static void landlock_masks(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
    if (abi < 1) {
        fprintf(stderr, "scalefloor: Landlock is not available here: the sandbox modes run without it\n");
        without |= W_LANDLOCK;
        return;
    }
    ll_fs = LL_FS_WRITE_ABI1 | (abi >= 2 ? LL_REFER : 0) | (abi >= 3 ? LL_TRUNCATE : 0);
    ll_scoped = abi >= 6 ? 3 : 0; /* abstract unix sockets and signals */
}

static void worker(enum mode m, int w, int runs) {
    char path[4096];
    if (m == SANDBOX || m == SANDBOX_NET) {
        sandbox_runs(runs);
        return;
    }
    for (int i = 0; i < runs; i++) {
        if (m == BARE) {
            int st = run_program();
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "scalefloor: the program failed bare (wait status %#x)\n", st);
                exit(1);
            }
        } else if (m == NS) {
            floor_run(-1);
        } else {
            snprintf(path, sizeof path, "%s/w%d-%d", base, w, i);
            if (mkdir(path, 0755) != 0)
                die(path);
            int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0)
                die(path);
            floor_run(fd);
            close(fd);
            if (rmdir(path) != 0)
                die(path);
        }
    }
}

int main(int argc, char **argv) {
    enum mode m;
    if (argc >= 2 && strcmp(argv[1], "bare") == 0 && argc == 5)
        m = BARE;
    else if (argc >= 2 && strcmp(argv[1], "ns") == 0 && argc == 5)
        m = NS;
    else if (argc >= 2 && strcmp(argv[1], "ns+cg") == 0 && argc == 6)
        m = NS_CG, base = argv[5];
    else if (argc >= 2 && strcmp(argv[1], "sandbox") == 0 && argc == 5)
        m = SANDBOX;
    else if (argc >= 2 && strcmp(argv[1], "sandbox+net") == 0 && argc == 5)
        m = SANDBOX_NET, net_per_run = 1;
    else {
        fprintf(stderr, "usage: scalefloor bare|ns|sandbox|sandbox+net P RUNS PROGRAM\n"
                        "       scalefloor ns+cg P RUNS PROGRAM BASE\n");
        return 2;
    }
    if (m == SANDBOX || m == SANDBOX_NET) {
        if (parse_without(getenv("SCALEFLOOR_WITHOUT")) != 0)
            return 2;
        const char *u3 = getenv("SCALEFLOOR_U3");
        if (u3 && strcmp(u3, "0") != 0 && strcmp(u3, "1") != 0) {
            fprintf(stderr, "scalefloor: SCALEFLOOR_U3: unknown value '%s' (0 or 1)\n", u3);
            return 2;
        }
        tracee_u3 = u3 && strcmp(u3, "1") == 0;
        if ((without & W_TRACEE_USERNS) && !tracee_u3) {
            fprintf(stderr, "scalefloor: SCALEFLOOR_WITHOUT=tracee-userns needs SCALEFLOOR_U3=1 (the tracee has no user "
                            "namespace of its own otherwise)\n");
            return 2;
        }
        landlock_masks();
        FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "r");
        if (!f || fscanf(f, "%d", &cap_last_cap) != 1)
            die("/proc/sys/kernel/cap_last_cap");
        fclose(f);
    }
    int p = atoi(argv[2]), runs = atoi(argv[3]);
    if (p < 1 || p > 4096 || runs < 1) {
        fprintf(stderr, "scalefloor: P must be 1 to 4096 and RUNS at least 1\n");
        return 2;
    }
    int per = (runs + p - 1) / p;
    prog_argv[0] = argv[4];
    if (m == SANDBOX || m == SANDBOX_NET) {
        sandbox_supervisor(argv);
    } else {
        outer_uid = getuid();
        outer_gid = getgid();
    }
    int go[2], ready[2];
    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(ready, O_CLOEXEC) != 0)
        die("pipe2");
    pid_t *pids = calloc(p, sizeof *pids);
    if (!pids)
        die("calloc");
    for (int w = 0; w < p; w++) {
        pids[w] = fork();
        if (pids[w] < 0)
            die("fork");
        if (pids[w] == 0) {
            char b = 'r';
            close(go[1]);
            close(ready[0]);
            if (m == SANDBOX || m == SANDBOX_NET) {
                sandbox_worker_setup();
                if (!(without & W_SECCOMP)) {
                    /* Once, on the thread that creates the PID 1s: they and their tracees inherit it. */
                    struct sock_fprog prog = {.len = sizeof default_filter / sizeof default_filter[0],
                                              .filter = default_filter};
                    sys_ok(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs");
                    sys_ok(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog), "seccomp");
                }
                slot_prepare(&slots[0]); /* the first run's PID 1, ahead, as a warm supervisor has it */
            }
            if (write(ready[1], &b, 1) != 1)
                _exit(1);
            close(ready[1]);
            if (read(go[0], &b, 1) != 0)
                _exit(1);
            worker(m, w, per);
            _exit(0);
        }
    }
    close(go[0]);
    close(ready[1]);
    /* Every worker set up (a failed one closes its end without a byte). */
    for (int w = 0; w < p; w++) {
        char b;
        if (read(ready[0], &b, 1) != 1) {
            fprintf(stderr, "scalefloor: a worker failed to set up\n");
            close(go[1]);
            for (int i = 0; i < p; i++)
                waitpid(pids[i], NULL, 0);
            return 1;
        }
    }
    double t0 = now_s();
    close(go[1]); /* releases every worker at once (end of file) */
    for (int w = 0; w < p; w++)
        reap_ok(pids[w], "worker");
    double secs = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("%s %d %d %.6f %.1f %.1f\n", argv[1], p, per * p, secs, per * p / secs, cpu * 1e6 / (per * p));
    return 0;
}
