/* SPDX-License-Identifier: Apache-2.0 */
#include "jail.h"


#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/kvm.h>

#include "host.h"
#include "log.h"
#include "macros.h"
#include "util.h"

/* ---- the plan: everything the child does, prepared by the parent ---- */

enum step_op {
        STEP_MKDIR,
        STEP_MKFILE,
        STEP_BIND,
        STEP_SYMLINK,
        STEP_PROC,
        STEP_MKNOD,
};

struct step {
        enum step_op op;
        enum jail_mount_kind kind; /* STEP_BIND */
        const char *source;        /* borrowed from the spec */
        int tree_fd;               /* STEP_BIND with source NULL */
        dev_t rdev;                /* STEP_MKNOD */
        char *target;              /* root_dir + the jail path */
};

struct plan {
        struct step *steps;
        size_t n, cap;
        bool dev_nodes; /* a STEP_MKNOD: the private root allows device nodes */
};

static void plan_release(struct plan *p) {
        for (size_t i = 0; i < p->n; i++)
                free(p->steps[i].target);
        free(p->steps);
        *p = (struct plan){ 0 };
}

static int plan_add_fd(struct plan *p, enum step_op op, enum jail_mount_kind kind, const char *source, int tree_fd,
                       const char *root, const char *path, size_t path_len) {
        if (p->n == p->cap) {
                size_t ncap = p->cap ? p->cap * 2 : 64;
                struct step *ns = realloc(p->steps, ncap * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                p->steps = ns;
                p->cap = ncap;
        }
        char *t;
        if (asprintf(&t, "%s%.*s", root, (int) path_len, path) < 0)
                return -ENOMEM;
        p->steps[p->n++] =
                (struct step){ .op = op, .kind = kind, .source = source, .tree_fd = tree_fd, .target = t };
        return 0;
}

static int plan_add(struct plan *p, enum step_op op, enum jail_mount_kind kind, const char *source,
                    const char *root, const char *path, size_t path_len) {
        return plan_add_fd(p, op, kind, source, -1, root, path, path_len);
}

static bool plan_has_dir(const struct plan *p, const char *root, const char *path, size_t len) {
        size_t rl = strlen(root);
        for (size_t i = 0; i < p->n; i++)
                if (p->steps[i].op == STEP_MKDIR && strlen(p->steps[i].target) == rl + len &&
                    memcmp(p->steps[i].target + rl, path, len) == 0)
                        return true;
        return false;
}

/* The directories above path (not path itself), each once. */
static int plan_parents(struct plan *p, const char *root, const char *path) {
        for (const char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
                size_t len = (size_t) (s - path);
                if (plan_has_dir(p, root, path, len))
                        continue;
                int r = plan_add(p, STEP_MKDIR, 0, NULL, root, path, len);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int plan_build(const struct jail_spec *s, struct plan *p) {
        const char *root = s->root_dir;
        for (size_t i = 0; i < s->n_mounts; i++) {
                const struct jail_mount *m = &s->mounts[i];
                size_t len = strlen(m->target);
                int r = plan_parents(p, root, m->target);
                if (r < 0)
                        return r;
                switch (m->kind) {
                case JAIL_SYMLINK:
                        r = plan_add(p, STEP_SYMLINK, m->kind, m->source, root, m->target, len);
                        break;
                case JAIL_PROC:
                        r = plan_add(p, STEP_MKDIR, 0, NULL, root, m->target, len);
                        if (r >= 0)
                                r = plan_add(p, STEP_PROC, m->kind, NULL, root, m->target, len);
                        break;
                case JAIL_DEV_NODE: {
                        struct stat st;
                        if (stat(m->source, &st) < 0)
                                return -errno;
                        if (!S_ISCHR(st.st_mode))
                                return -EINVAL;
                        r = plan_add(p, STEP_MKNOD, m->kind, NULL, root, m->target, len);
                        if (r >= 0) {
                                p->steps[p->n - 1].rdev = st.st_rdev;
                                p->dev_nodes = true;
                        }
                        break;
                }
                default: {
                        struct stat st;
                        if (m->source ? stat(m->source, &st) < 0 : fstat(m->tree_fd, &st) < 0)
                                return -errno;
                        bool dir = S_ISDIR(st.st_mode);
                        if (m->kind == JAIL_BIND_DEV && !S_ISCHR(st.st_mode))
                                return -EINVAL;
                        if (!dir || !plan_has_dir(p, root, m->target, len))
                                r = plan_add(p, dir ? STEP_MKDIR : STEP_MKFILE, 0, NULL, root, m->target, len);
                        if (r >= 0)
                                r = plan_add_fd(p, STEP_BIND, m->kind, m->source, m->source ? -1 : m->tree_fd, root,
                                                m->target, len);
                }
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- validation ---- */

static bool path_ok(const char *p) {
        if (!p || p[0] != '/' || strlen(p) >= PATH_MAX)
                return false;
        for (const char *s = p; *s; s++) {
                if (s[0] == '/' && (s[1] == '/' || (s[1] == 0 && s != p)))
                        return false;
                if (s[0] == '/' && s[1] == '.' && (s[2] == '/' || s[2] == 0 || (s[2] == '.' && (s[3] == '/' || s[3] == 0))))
                        return false;
        }
        return true;
}

static bool under(const char *path, const char *dir) {
        size_t n = strlen(dir);
        return strncmp(path, dir, n) == 0 && path[n] == '/';
}

int jail_spec_validate(const struct jail_spec *s) {
        if (!s || !path_ok(s->binary) || !s->argv || !s->argv[0] || s->uid == 0 || s->gid == 0 ||
            s->uid == (uid_t) -1 || s->gid == (gid_t) -1 || !path_ok(s->root_dir) || s->n_mounts > JAIL_MOUNTS_MAX ||
            (s->n_mounts && !s->mounts) || s->n_cgroups > JAIL_CGROUPS_MAX || (s->n_cgroups && !s->cgroup_procs) ||
            s->n_keep_fds > JAIL_KEEP_FDS_MAX || (s->n_keep_fds && !s->keep_fds) || s->stdin_fd < 0 ||
            s->stdout_fd < 0 || s->nofile < 64 || s->nproc < 16)
                return -EINVAL;
        if (s->join_netns && s->netns_fd < 0)
                return -EINVAL;
        for (size_t i = 0; i < s->n_keep_fds; i++)
                if (s->keep_fds[i] < 0)
                        return -EINVAL;
        for (size_t i = 0; i < s->n_cgroups; i++)
                if (!path_ok(s->cgroup_procs[i]))
                        return -EINVAL;
        for (size_t i = 0; i < s->n_mounts; i++) {
                const struct jail_mount *m = &s->mounts[i];
                if (!path_ok(m->target) || strcmp(m->target, "/") == 0 || m->kind > JAIL_DEV_NODE)
                        return -EINVAL;
                bool tree = m->kind != JAIL_SYMLINK && m->kind != JAIL_PROC && m->kind != JAIL_DEV_NODE &&
                            !m->source;
                if (tree ? m->tree_fd <= STDERR_FILENO
                         : m->kind == JAIL_SYMLINK ? !m->source || !*m->source
                                                   : m->kind != JAIL_PROC && !path_ok(m->source))
                        return -EINVAL;
                /* creating a mount point under an earlier bind would write
                 * into (or fail on) the host directory behind it */
                for (size_t j = 0; j < i; j++)
                        if (s->mounts[j].kind != JAIL_SYMLINK && under(m->target, s->mounts[j].target))
                                return -EINVAL;
        }
        return 0;
}

/* ---- the child: async-signal-safe calls and raw syscalls only ---- */

/* glibc's set*id wrappers signal every thread it believes exists; after a
 * raw clone3 of a threaded process those threads are not there. The
 * groups go first, then the gid, then the uid (which drops every
 * capability). */
static long raw_drop_to(uid_t uid, gid_t gid) {
        if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0)
                return -1;
        return syscall(SYS_setresuid, uid, uid, uid);
}

/* A device node of uid/gid, mode 0600, with the numbers rdev. */
static int make_dev_node(const char *path, dev_t rdev, uid_t uid, gid_t gid) {
        if (mknod(path, S_IFCHR | 0600, rdev) < 0)
                return -1;
        return chown(path, uid, gid);
}

_noreturn_ static void child_fail(int fd, const char *step) {
        int e = errno;
        char num[16];
        size_t k = sizeof num;
        num[--k] = '\n';
        do {
                num[--k] = (char) ('0' + e % 10);
                e /= 10;
        } while (e && k > 0);
        static const char pre[] = "airlock-jail: ";
        static const char mid[] = " failed: errno ";
        (void) !write(fd, pre, sizeof pre - 1);
        (void) !write(fd, step, strlen(step));
        (void) !write(fd, mid, sizeof mid - 1);
        (void) !write(fd, num + k, sizeof num - k);
        _exit(127);
}

static int child_write_file(const char *path, const char *text) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t n = write(fd, text, strlen(text));
        int e = errno;
        close(fd);
        errno = e;
        return n < 0 ? -1 : 0;
}

static int child_bind(const struct step *st) {
        if (st->source ? mount(st->source, st->target, NULL, MS_BIND, NULL) < 0
                       : syscall(SYS_move_mount, st->tree_fd, "", AT_FDCWD, st->target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return -1;
        unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID;
        switch (st->kind) {
        case JAIL_BIND_RO:
                fl |= MS_RDONLY | MS_NODEV;
                break;
        case JAIL_BIND_RW:
                fl |= MS_NODEV | MS_NOEXEC;
                break;
        default:
                fl |= MS_NOEXEC;
        }
        return mount(NULL, st->target, NULL, fl, NULL);
}

static int child_loopback_up(void) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        struct ifreq ifr = { 0 };
        memcpy(ifr.ifr_name, "lo", 3);
        int r = ioctl(fd, SIOCGIFFLAGS, &ifr);
        if (r >= 0) {
                ifr.ifr_flags |= IFF_UP;
                r = ioctl(fd, SIOCSIFFLAGS, &ifr);
        }
        close(fd);
        return r;
}

_noreturn_ static void child(const struct jail_spec *s, const struct plan *p) {
        int log = s->stdout_fd;
        sigset_t none;
        sigemptyset(&none);
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void) sigaction(sig, &dfl, NULL); /* SIG_IGN survives exec */
        sigprocmask(SIG_SETMASK, &none, NULL);            /* the node blocks signals for signalfd */
        /* Own session: a Ctrl-C meant for the node must not reach it. No
         * parent-death signal: a VM outlives a restarting node. */
        setsid();

        /* Into the VM's cgroups first: nothing it allocates escapes them. */
        for (size_t i = 0; i < s->n_cgroups; i++)
                if (child_write_file(s->cgroup_procs[i], "0") < 0)
                        child_fail(log, "joining the cgroup");
        if (s->join_netns && setns(s->netns_fd, CLONE_NEWNET) < 0)
                child_fail(log, "joining the VM's network namespace");

        /* The private root: a tmpfs holding only the planned paths, with
         * exactly the modes asked for (the caller's umask may be 077). */
        umask(0);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                child_fail(log, "making mounts private");
        /* nodev unless it holds a node of the jail's own: read-only once
         * pivoted, it can hold no other */
        unsigned long root_nodev = p->dev_nodes ? 0 : MS_NODEV;
        if (mount("tmpfs", s->root_dir, "tmpfs", MS_NOSUID | root_nodev | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=4k") < 0)
                child_fail(log, "mounting the root tmpfs");
        for (size_t i = 0; i < p->n; i++) {
                const struct step *st = &p->steps[i];
                int fd;
                switch (st->op) {
                case STEP_MKDIR:
                        if (mkdir(st->target, 0755) < 0 && errno != EEXIST)
                                child_fail(log, "mkdir");
                        break;
                case STEP_MKFILE:
                        fd = open(st->target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                        if (fd < 0)
                                child_fail(log, "creating a mount point");
                        close(fd);
                        break;
                case STEP_BIND:
                        if (child_bind(st) < 0)
                                child_fail(log, "bind mount");
                        break;
                case STEP_SYMLINK:
                        if (symlink(st->source, st->target) < 0)
                                child_fail(log, "symlink");
                        break;
                case STEP_PROC:
                        if (mount("proc", st->target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                                child_fail(log, "mounting proc");
                        break;
                case STEP_MKNOD:
                        if (make_dev_node(st->target, st->rdev, s->uid, s->gid) < 0)
                                child_fail(log, "making a device node");
                        break;
                }
        }
        /* The fds it gets: stdio, then the ones passed on purpose as 3, 4,
         * ...; first moved above the range they are copied into. After the
         * binds: a bind may come from an fd (tree_fd). */
        int kept[JAIL_KEEP_FDS_MAX];
        for (size_t i = 0; i < s->n_keep_fds; i++)
                if ((kept[i] = fcntl(s->keep_fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
                        child_fail(log, "dup");
        int in = fcntl(s->stdin_fd, F_DUPFD_CLOEXEC, 64), out = fcntl(s->stdout_fd, F_DUPFD_CLOEXEC, 64);
        if (in < 0 || out < 0)
                child_fail(log, "dup");
        if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0)
                child_fail(log, "dup2");
        log = STDERR_FILENO;
        for (size_t i = 0; i < s->n_keep_fds; i++)
                if (dup2(kept[i], (int) (3 + i)) < 0) /* dup2 clears FD_CLOEXEC */
                        child_fail(log, "dup2");
        close_range((unsigned) (3 + s->n_keep_fds), ~0u, 0);

        if (chdir(s->root_dir) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
            chdir("/") < 0)
                child_fail(log, "pivot_root");
        if (mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | root_nodev | MS_NOEXEC, NULL) < 0)
                child_fail(log, "making the root read-only");

        if (child_loopback_up() < 0)
                child_fail(log, "bringing up lo");
        if (sethostname("airlock-vmm", 11) < 0)
                child_fail(log, "sethostname");

        if (setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 }) < 0 ||
            setrlimit(RLIMIT_NOFILE, &(struct rlimit){ s->nofile, s->nofile }) < 0 ||
            setrlimit(RLIMIT_NPROC, &(struct rlimit){ s->nproc, s->nproc }) < 0)
                child_fail(log, "setrlimit");
        for (int cap = 0; cap < 64; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        child_fail(log, "dropping the capability bounding set");
        /* Changing every uid from 0 clears all capabilities. */
        if (raw_drop_to(s->uid, s->gid) < 0)
                child_fail(log, "dropping privileges");
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                child_fail(log, "no_new_privs");

        /* what QEMU creates in its dir (sockets, console log) is open to the
         * dir's group (the node's, setgid) and to no one else */
        umask(0007);
        static char *const empty_env[] = { NULL };
        execve(s->binary, s->argv, empty_env);
        child_fail(log, "exec");
}

int jail_spawn(const struct jail_spec *s, pid_t *ret_pid, int *ret_pidfd) {
        int r = jail_spec_validate(s);
        if (r < 0)
                return r;
        struct plan p = { 0 };
        r = plan_build(s, &p);
        if (r < 0) {
                plan_release(&p);
                return r;
        }
        int pidfd = -1;
        struct clone_args args = {
                .flags = CLONE_PIDFD | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
                         (s->join_netns ? 0 : CLONE_NEWNET),
                .pidfd = (uint64_t) (uintptr_t) &pidfd,
                .exit_signal = SIGCHLD,
        };
        long pid = syscall(SYS_clone3, &args, sizeof args);
        if (pid == 0)
                child(s, &p);
        r = pid < 0 ? -errno : 0;
        plan_release(&p);
        if (r < 0)
                return r;
        *ret_pid = (pid_t) pid;
        *ret_pidfd = pidfd;
        return 0;
}

/* ---- the KVM probe ---- */

enum kvm_probe_step {
        PROBE_OK,
        PROBE_NAMESPACE,
        PROBE_TMPFS,
        PROBE_NODE,
        PROBE_DROP,
        PROBE_OPEN,
        PROBE_VERSION,
        PROBE_CREATE_VM,
};

/* What an operator does when a step fails. */
static const char *const kvm_probe_fixes[] = {
        [PROBE_NAMESPACE] = "start airlockd as root with CAP_SYS_ADMIN (not in a container that withholds it)",
        [PROBE_TMPFS] = "start airlockd as root with CAP_SYS_ADMIN (not in a container that withholds it)",
        [PROBE_NODE] = "start airlockd as real root with CAP_MKNOD, outside a user namespace (each VM gets a "
                       "/dev/kvm node of its own); or set AIRLOCK_ACCEL=tcg",
        [PROBE_DROP] = "start airlockd as root (it drops each VM to a uid of its own)",
        [PROBE_OPEN] = "let the VMs' uids open /dev/kvm (10:232): the devices cgroup or a security module "
                       "(AppArmor, SELinux) denies it; or set AIRLOCK_ACCEL=tcg",
        [PROBE_VERSION] = "use a kernel whose KVM speaks API version 12 (any since 2.6.22)",
        [PROBE_CREATE_VM] = "check dmesg for kvm errors (another hypervisor holding VT-x/AMD-V, or a PVM host "
                            "that runs only PVM guests); or set AIRLOCK_ACCEL=tcg",
};

static const char *const kvm_probe_steps[] = {
        [PROBE_NAMESPACE] = "making a private mount namespace",
        [PROBE_TMPFS] = "mounting a tmpfs for the VM's /dev/kvm",
        [PROBE_NODE] = "making the VM's own /dev/kvm node",
        [PROBE_DROP] = "dropping to the VM's uid",
        [PROBE_OPEN] = "opening /dev/kvm read-write as the VM's uid",
        [PROBE_VERSION] = "KVM_GET_API_VERSION",
        [PROBE_CREATE_VM] = "KVM_CREATE_VM",
};

/* The child of jail_kvm_probe(): one byte of step and four of errno to fd. */
_noreturn_ static void kvm_probe_child(int fd, dev_t rdev, uid_t uid, gid_t gid) {
        struct {
                uint8_t step;
                int32_t err;
        } __attribute__((packed)) res = { PROBE_OK, 0 };
        int kvm = -1;
        long v;
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                res.step = PROBE_NAMESPACE;
        else if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=16") < 0)
                res.step = PROBE_TMPFS;
        else if (make_dev_node("/dev/kvm", rdev, uid, gid) < 0)
                res.step = PROBE_NODE;
        else if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || raw_drop_to(uid, gid) < 0)
                res.step = PROBE_DROP;
        else if ((kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC)) < 0)
                res.step = PROBE_OPEN;
        else if ((v = ioctl(kvm, KVM_GET_API_VERSION, 0)) != KVM_API_VERSION)
                res.step = PROBE_VERSION, errno = v < 0 ? errno : EPROTO;
        else if (ioctl(kvm, KVM_CREATE_VM, 0UL) < 0)
                res.step = PROBE_CREATE_VM;
        res.err = res.step == PROBE_OK ? 0 : errno;
        (void) !write(fd, &res, sizeof res);
        _exit(0);
}

int jail_kvm_probe(uid_t uid, gid_t gid, char *reason, size_t n, const char **ret_fix) {
        const char *unused;
        if (!ret_fix)
                ret_fix = &unused;
        *ret_fix = "modprobe kvm_intel (or kvm_amd); or set AIRLOCK_ACCEL=tcg";
        struct stat st;
        if (stat("/dev/kvm", &st) < 0) {
                int e = errno;
                snprintf(reason, n, "no /dev/kvm: %s", strerror(e));
                return -e;
        }
        if (!S_ISCHR(st.st_mode)) {
                snprintf(reason, n, "/dev/kvm is not a character device");
                return -ENODEV;
        }
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                int e = errno;
                snprintf(reason, n, "cannot probe /dev/kvm: pipe: %s", strerror(e));
                return -e;
        }
        pid_t pid = fork();
        if (pid == 0) {
                close(fds[0]);
                kvm_probe_child(fds[1], st.st_rdev, uid, gid);
        }
        int e = errno;
        close(fds[1]);
        if (pid < 0) {
                close(fds[0]);
                snprintf(reason, n, "cannot probe /dev/kvm: fork: %s", strerror(e));
                return -e;
        }
        struct {
                uint8_t step;
                int32_t err;
        } __attribute__((packed)) res = { PROBE_NAMESPACE, EIO };
        ssize_t k = read(fds[0], &res, sizeof res);
        close(fds[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        if (k != (ssize_t) sizeof res || res.step >= ARRAY_SIZE(kvm_probe_steps)) {
                snprintf(reason, n, "cannot probe /dev/kvm: the probe process gave no answer");
                return -EIO;
        }
        if (res.step != PROBE_OK) {
                snprintf(reason, n, "a VM's uid %u cannot use /dev/kvm (%s failed: %s)", (unsigned) uid,
                         kvm_probe_steps[res.step], strerror(res.err));
                *ret_fix = kvm_probe_fixes[res.step];
                return res.err > 0 ? -res.err : -EIO;
        }
        snprintf(reason, n, "a VM's uid %u opens its own /dev/kvm node (host node %04o %u:%u) and creates a VM",
                 (unsigned) uid, (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid, (unsigned) st.st_gid);
        return 0;
}

bool jail_kvm_usable(uid_t uid, char *reason, size_t n) {
        if (!host_kvm_usable(reason, n))
                return false;
        /* not root: nothing jails VMs here, root opened it for whoever asks */
        if (geteuid() != 0)
                return true;
        char why[200];
        const char *fix = NULL;
        if (jail_kvm_probe(uid, (gid_t) uid, why, sizeof why, &fix) < 0) {
                snprintf(reason, n, "cpu has vmx/svm and /dev/kvm opens for root, but %s; fix: %s", why, fix);
                return false;
        }
        snprintf(reason, n, "cpu has vmx/svm; %s", why);
        return true;
}

/* ---- peers ---- */

/* The fields of /proc/PID/stat after comm (which may hold spaces and
 * parentheses: they start after the last ')'), NUL-terminated in buf. */
static int proc_stat_fields(pid_t pid, char *buf, size_t n, char **ret) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t k = read(fd, buf, n - 1);
        int e = errno;
        close(fd);
        if (k <= 0)
                return k < 0 ? -e : -EIO;
        buf[k] = 0;
        char *q = strrchr(buf, ')');
        if (!q || q[1] != ' ')
                return -EIO;
        *ret = q + 2; /* field 3, the state */
        return 0;
}

int jail_process_start_time(pid_t pid, uint64_t *ret) {
        char buf[1024], *q = NULL;
        int r = proc_stat_fields(pid, buf, sizeof buf, &q);
        if (r < 0)
                return r;
        for (int field = 3; field < 22; field++) {
                q = strchr(q, ' ');
                if (!q)
                        return -EIO;
                q++;
        }
        return sscanf(q, "%" SCNu64, ret) == 1 ? 0 : -EIO;
}

int jail_peer_verify(int fd, const struct jail_peer *want) {
        if (fd < 0 || !want || want->pid <= 0 || want->pidfd < 0)
                return -EINVAL;
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        if (cred.pid != want->pid || cred.uid != want->uid)
                return -EPERM;
        uint64_t start;
        int r = jail_process_start_time(cred.pid, &start);
        if (r < 0)
                return r == -ENOENT ? -EPERM : r;
        if (start != want->start_time)
                return -EPERM;
        if (want->exe_ino != 0) {
                char exe[64];
                snprintf(exe, sizeof exe, "/proc/%d/exe", (int) cred.pid);
                struct stat st;
                if (stat(exe, &st) < 0)
                        return errno == ENOENT ? -EPERM : -errno;
                if (st.st_dev != want->exe_dev || st.st_ino != want->exe_ino)
                        return -EPERM;
        }
        /* alive after the reads: /proc/PID was this process, not a reuse */
        struct pollfd pfd = { .fd = want->pidfd, .events = POLLIN };
        r = poll(&pfd, 1, 0);
        if (r < 0)
                return -errno;
        return r == 0 ? 0 : -EPERM;
}

/* ---- cgroups ---- */

#define CG_MAX 3

static struct {
        int version;            /* 2, 1, or 0: none usable */
        size_t n;
        char *dir[CG_MAX];      /* the node's cgroup in each hierarchy in use */
        const char *ctl[CG_MAX]; /* v1: the controller of dir[i]; v2: NULL */
} cg;
static pthread_once_t cg_once = PTHREAD_ONCE_INIT;

static const char *const cg_controllers[CG_MAX] = { "memory", "pids", "cpu" };

static bool word_in_list(const char *list, const char *word, char sep) {
        size_t wl = strlen(word);
        for (const char *p = list; p && *p;) {
                while (*p == sep || *p == ' ' || *p == '\n')
                        p++;
                size_t n = strcspn(p, sep == ',' ? ",\n" : " \n");
                if (n == wl && memcmp(p, word, wl) == 0)
                        return true;
                p += n;
        }
        return false;
}

static int cg_write(const char *dir, const char *file, const char *value) {
        _cleanup_free_ char *path = strdup_printf("%s/%s", dir, file);
        if (!path)
                return -ENOMEM;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return write(fd, value, strlen(value)) < 0 ? -errno : 0;
}

/* The node's own cgroup path in the hierarchy whose /proc/self/cgroup
 * list field is want (v2: ""), or NULL. */
static char *self_cgroup(const char *text, const char *controller) {
        for (const char *line = text; line && *line;) {
                const char *eol = strchrnul(line, '\n');
                const char *c1 = memchr(line, ':', (size_t) (eol - line));
                const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t) (eol - c1 - 1)) : NULL;
                if (c2) {
                        _cleanup_free_ char *list = strndup(c1 + 1, (size_t) (c2 - c1 - 1));
                        bool match = list && (controller ? word_in_list(list, controller, ',') : !*list);
                        if (match)
                                return strndup(c2 + 1, (size_t) (eol - c2 - 1));
                }
                line = *eol ? eol + 1 : NULL;
        }
        return NULL;
}

static bool cg_try_v2(const char *self) {
        const char *roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
        _cleanup_free_ char *path = self_cgroup(self, NULL);
        if (!path)
                return false;
        for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
                _cleanup_free_ char *dir = strdup_printf("%s%s", roots[i], strcmp(path, "/") ? path : "");
                _cleanup_free_ char *ctl_path = dir ? strdup_printf("%s/cgroup.controllers", dir) : NULL;
                _cleanup_free_ char *ctl = NULL, *sub = NULL, *sub_path = NULL;
                if (!ctl_path || file_read_all(ctl_path, 4096, &ctl, NULL) < 0)
                        continue;
                bool all = true;
                for (size_t k = 0; k < CG_MAX; k++)
                        all = all && word_in_list(ctl, cg_controllers[k], ' ');
                if (!all) {
                        log_info("vmm cgroups: v2 %s offers \"%.*s\", not memory+pids+cpu", dir,
                                 (int) strcspn(ctl, "\n"), ctl);
                        continue;
                }
                /* children get the controllers only if the node's cgroup
                 * delegates them (fails with processes in a non-root one) */
                int r = cg_write(dir, "cgroup.subtree_control", "+memory +pids +cpu");
                if (r < 0) {
                        log_warn_errno(r, "vmm cgroups: cannot enable memory, pids, cpu below %s: %m", dir);
                        continue;
                }
                (void) cg_write(dir, "cgroup.subtree_control", "+io");
                cg.version = 2;
                cg.dir[0] = TAKE_PTR(dir);
                cg.n = 1;
                return true;
        }
        return false;
}

static void cg_try_v1(const char *self) {
        for (size_t k = 0; k < CG_MAX; k++) {
                _cleanup_free_ char *path = self_cgroup(self, cg_controllers[k]);
                if (!path)
                        continue;
                _cleanup_free_ char *dir = strdup_printf("/sys/fs/cgroup/%s%s", cg_controllers[k],
                                                         strcmp(path, "/") ? path : "");
                if (!dir || access(dir, W_OK) < 0)
                        continue;
                cg.ctl[cg.n] = cg_controllers[k];
                cg.dir[cg.n++] = TAKE_PTR(dir);
        }
        if (cg.n > 0)
                cg.version = 1;
}

/* An empty /sys/fs/cgroup: a /sys mounted without the cgroup file systems
 * (what `ip netns exec` does in its mount namespace). */
static bool cg_fs_missing(void) {
        DIR *d = opendir("/sys/fs/cgroup");
        if (!d)
                return true;
        bool empty = true;
        for (struct dirent *e; empty && (e = readdir(d));)
                empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        closedir(d);
        return empty;
}

static void cg_setup_once(void) {
        _cleanup_free_ char *self = NULL;
        if (file_read_all("/proc/self/cgroup", 65536, &self, NULL) < 0) {
                log_warn("vmm cgroups: cannot read /proc/self/cgroup: VMs run without cgroup limits");
                return;
        }
        if (!cg_try_v2(self))
                cg_try_v1(self);
        if (cg.version == 0) {
                log_warn("vmm cgroups: no usable controller (v2 memory+pids+cpu or v1 memory/pids/cpu): "
                         "VMs run without cgroup limits%s",
                         cg_fs_missing() ? " (nothing is mounted on /sys/fs/cgroup: `ip netns exec` mounts a /sys "
                                           "of its own; `nsenter --net=/run/netns/NAME` enters only the network "
                                           "namespace)"
                                         : "");
                return;
        }
        char list[256] = "";
        for (size_t i = 0; i < cg.n; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " " : "", cg.dir[i]);
        log_info("vmm cgroups: v%d, one cgroup per VM below %s (memory, pids, cpu%s)", cg.version, list,
                 cg.version == 2 ? ", io weight default" : "; no io limit on v1");
}

void jail_cgroup_setup(void) {
        pthread_once(&cg_once, cg_setup_once);
}

bool jail_cgroup_available(void) {
        jail_cgroup_setup();
        return cg.version != 0;
}

static char *cg_path(size_t i, uid_t uid) {
        return strdup_printf("%s/airlock-vm-%u", cg.dir[i], (unsigned) uid);
}

/* An empty VM cgroup made less than this long ago (seconds: a claim is
 * joined within a second, a few under load) is a claim another node
 * on this host just made on its uid (its QEMU is about to join it), not a
 * leftover: neither taken over nor swept (both raced: a VM then failed to
 * join its own cgroup, or two VMs shared a uid). */
#define CG_CLAIM_FRESH_S JAIL_CGROUP_FRESH_S

static bool cg_fresh(int dir_fd, const char *name) {
        struct stat st;
        struct timespec now;
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || clock_gettime(CLOCK_REALTIME, &now) < 0)
                return false;
        return now.tv_sec - st.st_ctim.tv_sec < CG_CLAIM_FRESH_S;
}

/* Removes one VM cgroup; retries while its last process is still exiting. */
static int cg_rmdir(const char *path) {
        for (int tries = 0;; tries++) {
                if (rmdir(path) >= 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY || tries >= 100)
                        return -errno;
                struct timespec ts = { 0, 10 * 1000000L };
                nanosleep(&ts, NULL);
        }
}

int jail_cgroup_remove(uid_t uid) {
        jail_cgroup_setup();
        int ret = 0;
        for (size_t i = 0; i < cg.n; i++) {
                _cleanup_free_ char *p = cg_path(i, uid);
                int r = p ? cg_rmdir(p) : -ENOMEM;
                if (r < 0 && ret == 0)
                        ret = r;
        }
        return ret;
}

int jail_cgroup_sweep(uid_t base, uint32_t count, unsigned *ret_fresh) {
        jail_cgroup_setup();
        int removed = 0;
        unsigned fresh = 0;
        for (size_t i = 0; i < cg.n; i++) {
                DIR *d = opendir(cg.dir[i]);
                if (!d)
                        continue;
                struct dirent *e;
                while ((e = readdir(d))) {
                        unsigned uid;
                        int end = 0;
                        if (e->d_type != DT_DIR || sscanf(e->d_name, "airlock-vm-%u%n", &uid, &end) != 1 ||
                            e->d_name[end] != '\0' || uid < base || uid - base >= count)
                                continue;
                        /* one try: EBUSY is a live VM's, and stays */
                        if (cg_fresh(dirfd(d), e->d_name))
                                fresh++; /* (empty or not: counted, looked at again) */
                        else if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) >= 0)
                                removed++;
                }
                closedir(d);
        }
        if (ret_fresh)
                *ret_fresh = fresh;
        return removed;
}

static int cg_limit(size_t i, const char *dir, const struct jail_cgroup_limits *l) {
        char v[64];
        int r = 0;
        const char *ctl = cg.ctl[i];
        if (cg.version == 2) {
                snprintf(v, sizeof v, "%" PRIu64, l->memory_bytes);
                if ((r = cg_write(dir, "memory.max", v)) < 0)
                        return r;
                (void) cg_write(dir, "memory.swap.max", "0");
                snprintf(v, sizeof v, "%u", l->pids);
                if ((r = cg_write(dir, "pids.max", v)) < 0)
                        return r;
                snprintf(v, sizeof v, "%u 100000", l->cpus * 100000);
                return cg_write(dir, "cpu.max", v);
        }
        if (strcmp(ctl, "memory") == 0) {
                snprintf(v, sizeof v, "%" PRIu64, l->memory_bytes);
                if ((r = cg_write(dir, "memory.limit_in_bytes", v)) < 0)
                        return r;
                r = cg_write(dir, "memory.memsw.limit_in_bytes", v); /* only with swap accounting */
                return r == -ENOENT ? 0 : r;
        }
        if (strcmp(ctl, "pids") == 0) {
                snprintf(v, sizeof v, "%u", l->pids);
                return cg_write(dir, "pids.max", v);
        }
        snprintf(v, sizeof v, "%u", l->cpus * 100000);
        if ((r = cg_write(dir, "cpu.cfs_period_us", "100000")) < 0)
                return r;
        return cg_write(dir, "cpu.cfs_quota_us", v);
}

void jail_cgroup_procs_free(char **procs, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(procs[i]);
}

int jail_cgroup_create(uid_t uid, const struct jail_cgroup_limits *l, char **ret_procs, size_t *ret_n) {
        jail_cgroup_setup();
        if (!l || l->memory_bytes == 0 || l->pids == 0 || l->cpus == 0)
                return -EINVAL;
        size_t made = 0;
        int r = 0;
        for (size_t i = 0; i < cg.n; i++)
                ret_procs[i] = NULL;
        for (size_t i = 0; i < cg.n && r >= 0; i++) {
                _cleanup_free_ char *p = cg_path(i, uid);
                if (!p) {
                        r = -ENOMEM;
                        break;
                }
                if (mkdir(p, 0755) < 0) {
                        /* left by a VM that is gone, or in use by a live
                         * one, or just claimed by another node */
                        r = errno != EEXIST       ? -errno
                            : cg_fresh(AT_FDCWD, p) ? -EBUSY
                            : rmdir(p) < 0          ? -errno
                                                    : 0;
                        if (r == 0 && mkdir(p, 0755) < 0)
                                r = -errno;
                        if (r < 0)
                                break;
                }
                made++;
                r = cg_limit(i, p, l);
                if (r >= 0 && !(ret_procs[i] = strdup_printf("%s/cgroup.procs", p)))
                        r = -ENOMEM;
        }
        if (r < 0) {
                jail_cgroup_procs_free(ret_procs, made);
                for (size_t i = 0; i < made; i++) {
                        _cleanup_free_ char *p = cg_path(i, uid);
                        if (p)
                                (void) rmdir(p);
                }
                return r;
        }
        *ret_n = cg.n;
        return 0;
}
