/* SPDX-License-Identifier: Apache-2.0 */
#include "mgrserver.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "basestep.h"
#include "host.h"
#include "jail.h"
#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "proto.h"
#include "unixsock.h"
#include "util.h"
#include "vmnet.h"

#define VM_UID_BASE_DEFAULT JAIL_VM_UID_BASE_DEFAULT
#define VM_UIDS 65536u            /* NODE_VMM_UIDS */
#define REQUEST_TIMEOUT_MS 5000   /* a client that does not send its request in time is dropped */

/* A template step running (template.step): its script's process (and
 * process group), the node's connection its reply goes to, and the
 * staging directory its output lands in. The server goes on serving
 * meanwhile; the step ends when its process is reaped (step_finish). */
#define STEPS_MAX 16
struct step {
        pid_t pid; /* 0: a free slot */
        int conn, dir_fd, stage_fd;
        char stage[64];
        char out[sizeof((struct mgr_request *) 0)->out];
        char what[96];    /* "rootfs python", for the log */
        char script[512]; /* for the failure's words */
        uint64_t deadline_ns;
        bool timed_out, abandoned; /* killed: past its time, or the node hung up */
};

struct mgr_server {
        int fd;
        char path[108];
        char *jails_dir;      /* DATA_DIR/run/jails: root's, the VMs' private roots are mounted there */
        uid_t node_uid;
        gid_t node_gid;
        struct mgr_policy policy;
        char *roots[MGR_ROOTS_MAX];
        char *qemu;
        uint64_t sweep_at_ns; /* when to sweep the VM cgroups again (0: never) */
        struct step steps[STEPS_MAX];
        size_t n_steps; /* running */
};

static void steps_check(struct mgr_server *s);
static void steps_kill_all(struct mgr_server *s);
#define STEPS_CHECK_MS 200

const char *mgr_server_path(const struct mgr_server *s) {
        return s->path;
}

int mgr_server_probe_kvm(const struct mgr_server *s) {
        char why[256], env[sizeof why + 2];
        bool kvm = jail_kvm_usable(s->policy.vm_uid_base, why, sizeof why);
        snprintf(env, sizeof env, "%c %s", kvm ? '1' : '0', why);
        return setenv(HOST_KVM_ENV, env, 1) < 0 ? -ENOMEM : 0;
}

int mgr_server_fd(const struct mgr_server *s) {
        return s ? s->fd : -1;
}

int mgr_server_timeout_ms(const struct mgr_server *s) {
        if (!s)
                return -1;
        int steps = s->n_steps ? STEPS_CHECK_MS : -1;
        if (!s->sweep_at_ns)
                return steps;
        uint64_t now = now_monotonic_ns();
        int sweep = now >= s->sweep_at_ns ? 0 : (int) ((s->sweep_at_ns - now) / 1000000 + 1);
        return steps >= 0 ? MIN(steps, sweep) : sweep;
}

void mgr_server_tick(struct mgr_server *s) {
        if (!s)
                return;
        steps_check(s);
        if (!s->sweep_at_ns || now_monotonic_ns() < s->sweep_at_ns)
                return;
        s->sweep_at_ns = 0;
        int swept = jail_cgroup_sweep(s->policy.vm_uid_base, s->policy.vm_uid_count, NULL);
        if (swept > 0)
                log_info("removed %d empty VM cgroup%s of VMs that ended as the airlock-nodemgr before went",
                         swept, swept == 1 ? "" : "s");
}

void mgr_server_free(struct mgr_server *s) {
        if (!s)
                return;
        steps_kill_all(s);
        if (s->fd >= 0) {
                close(s->fd);
                (void) unlink(s->path);
        }
        for (size_t i = 0; i < MGR_ROOTS_MAX; i++)
                free(s->roots[i]);
        free(s->qemu);
        free(s->jails_dir);
        free(s);
}

/* The QEMU binary the node is configured with, absolute (as the node's
 * vmm_jail_setup resolves it). */
static char *resolve_qemu(void) {
        const char *name = getenv("AIRLOCK_QEMU");
        if (!name || !*name)
                name = "qemu-system-x86_64";
        if (strchr(name, '/'))
                return realpath(name, NULL);
        const char *path = getenv("PATH") ?: "/usr/local/bin:/usr/bin:/bin";
        for (const char *d = path; *d;) {
                size_t n = strcspn(d, ":");
                _cleanup_free_ char *cand = strdup_printf("%.*s/%s", (int) n, d, name);
                if (cand && n > 0 && d[0] == '/' && access(cand, X_OK) == 0)
                        return realpath(cand, NULL);
                d += n + (d[n] == ':');
        }
        return NULL;
}

static int add_root(struct mgr_server *s, const char *dir) {
        if (s->policy.n_roots == MGR_ROOTS_MAX)
                return -E2BIG;
        char *p = strdup(dir);
        if (!p)
                return -ENOMEM;
        s->roots[s->policy.n_roots] = p;
        s->policy.roots[s->policy.n_roots++] = p;
        return 0;
}

int mgr_server_open(const struct daemon_config *c, uid_t node_uid, gid_t node_gid, struct mgr_server **ret) {
        _cleanup_(mgr_server_freep) struct mgr_server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->fd = -1;
        s->node_uid = node_uid;
        s->node_gid = node_gid;
        s->policy.vm_uid_base = VM_UID_BASE_DEFAULT;
        s->policy.vm_uid_count = VM_UIDS;
        const char *base = getenv("AIRLOCK_VMM_UID_BASE");
        uint64_t v;
        if (base && *base) {
                if (parse_u64(base, UINT32_MAX - VM_UIDS - 1, &v) < 0 || v < 1000)
                        return log_error_errno(-EINVAL, "AIRLOCK_VMM_UID_BASE=%s is not a VM uid base", base);
                s->policy.vm_uid_base = (uid_t) v;
        }
        /* airlock-nodemgr alone puts VMs into cgroups and removes them:
         * one whose VM ended while no nodemgr was running is still there;
         * one made in the last seconds (a VM that ended as the nodemgr
         * before went) is looked at again once it is not fresh */
        unsigned fresh = 0;
        int swept = jail_cgroup_sweep(s->policy.vm_uid_base, s->policy.vm_uid_count, &fresh);
        if (swept > 0)
                log_info("removed %d empty VM cgroup%s left from before", swept, swept == 1 ? "" : "s");
        if (fresh > 0)
                s->sweep_at_ns = now_monotonic_ns() + (uint64_t) (JAIL_CGROUP_FRESH_S + 1) * 1000000000ull;
        /* the node's own files: its storage (the loop volume is another
         * file system, hence a root of its own) and a shared templates dir */
        _cleanup_free_ char *vol = strdup_printf("%s/vol", c->data_dir);
        const char *tpl = getenv("AIRLOCK_TEMPLATES_DIR");
        int r;
        if (!vol || (r = add_root(s, vol)) < 0 || (r = add_root(s, c->data_dir)) < 0)
                return -ENOMEM;
        if (tpl && *tpl) {
                /* a root must exist to be one: a new one is made here (and
                 * handed to the node with its other directories right
                 * after, nodeprep_storage()) */
                (void) mkdir_p(tpl, 0755);
                char real[PATH_MAX];
                if (!realpath(tpl, real))
                        log_warn_errno(negative_errno(), "AIRLOCK_TEMPLATES_DIR %s: %m (not served)", tpl);
                else if ((r = add_root(s, real)) < 0)
                        return r;
        }
        s->jails_dir = strdup_printf("%s/run/jails", c->data_dir);
        if (!s->jails_dir)
                return -ENOMEM;
        if ((r = mkdir_p(s->jails_dir, 0700)) < 0)
                return log_error_errno(r, "Failed to create %s: %m", s->jails_dir);
        s->qemu = resolve_qemu();
        if (!s->qemu)
                log_warn("no QEMU binary found (AIRLOCK_QEMU): vmm requests will be refused");

        if (snprintf(s->path, sizeof s->path, "%s/run/%s", c->data_dir, MGR_SOCKET_NAME) >= (int) sizeof s->path)
                return log_error_errno(-ENAMETOOLONG, "%s/run/%s is too long for a socket path", c->data_dir,
                                       MGR_SOCKET_NAME);
        /* 0600 root's from bind() on, until its group is the node's:
         * nobody else connects in between */
        _cleanup_close_ int fd = -1;
        r = unix_listen(s->path, 0600, SOCK_NONBLOCK, 64, &fd);
        if (r == 0 && (chown(s->path, 0, node_gid) < 0 || chmod(s->path, 0660) < 0))
                r = negative_errno();
        if (r < 0)
                return log_error_errno(r, "Failed to listen on %s: %m", s->path);
        s->fd = TAKE_FD(fd);
        log_info("serving the node's requests on %s (uid %u only); VM uids %u..%u; qemu %s", s->path,
                 (unsigned) node_uid, (unsigned) s->policy.vm_uid_base,
                 (unsigned) (s->policy.vm_uid_base + VM_UIDS - 1), s->qemu ?: "(none)");
        *ret = TAKE_PTR(s);
        return 0;
}

static int dirfd_of(DIR *d) {
        return dirfd(d);
}

/* ---- the checks ---- */

/* The four ids of a /proc/PID/status line ("Uid:\tR\tE\tS\tF") all equal
 * want. */
static bool status_ids(const char *status, const char *key, unsigned want) {
        const char *l = strstr(status, key);
        if (!l)
                return false;
        unsigned ids[4];
        if (sscanf(l + strlen(key), " %u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) != 4)
                return false;
        return ids[0] == want && ids[1] == want && ids[2] == want && ids[3] == want;
}

/* Proves that pid is one of the VMs: the process with that start time
 * (held by a pidfd, so the pid cannot be reused under us), running with
 * the VM uid and gid in all four slots, executing the configured QEMU.
 * Returns the pidfd, -ESRCH when no such process lives, -EPERM when it is
 * not a VM. A VM that is exiting has released its memory, and with it
 * its /proc/PID/exe, before it becomes a zombie (QEMU ending on a QMP
 * quit or a SIGKILL, or killed by its seccomp filter and dumping core):
 * its uid alone names it then, and *ret_exiting says so (it may still be
 * signalled, not used). A live process always has an executable, and no
 * other process runs with a VM uid. */
static int vm_process(const struct mgr_server *s, pid_t pid, uint64_t start_time, uid_t uid, bool *ret_exiting) {
        *ret_exiting = false;
        if (!s->qemu)
                return -EPERM;
        _cleanup_close_ int pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
                return -ESRCH;
        uint64_t have;
        if (jail_process_start_time(pid, &have) < 0 || have != start_time)
                return -ESRCH;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
        _cleanup_free_ char *st = NULL;
        if (file_read_all(path, 65536, &st, NULL) < 0)
                return -ESRCH;
        if (!status_ids(st, "\nUid:", uid) || !status_ids(st, "\nGid:", uid))
                return -EPERM;
        struct stat want, exe;
        snprintf(path, sizeof path, "/proc/%d/exe", (int) pid);
        if (stat(path, &exe) < 0 && errno == ENOENT) {
                *ret_exiting = true;
                return TAKE_FD(pidfd);
        }
        if (stat(s->qemu, &want) < 0 || stat(path, &exe) < 0)
                return -EPERM;
        if (want.st_dev != exe.st_dev || want.st_ino != exe.st_ino)
                return -EPERM;
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (poll(&p, 1, 0) != 0)
                return -ESRCH; /* exited while we looked */
        return TAKE_FD(pidfd);
}

/* ---- the handlers: 0 or a negative errno; msg says why ---- */

static int do_vmm(const struct mgr_server *s, const struct mgr_request *q, char *msg, size_t n) {
        bool exiting;
        int fd = vm_process(s, q->pid, q->start_time, q->uid, &exiting);
        if (fd >= 0 && exiting && q->op != MGR_OP_VMM_SIGNAL) {
                close(fd);
                fd = -ESRCH;
        }
        if (fd < 0) {
                snprintf(msg, n, "pid %d is not a VM with uid %u", (int) q->pid, (unsigned) q->uid);
                return fd;
        }
        int r = 0;
        if (q->op == MGR_OP_VMM_SIGNAL && syscall(SYS_pidfd_send_signal, fd, q->signal, NULL, 0) < 0) {
                r = negative_errno();
                snprintf(msg, n, "cannot signal pid %d", (int) q->pid);
        }
        close(fd);
        return r;
}

/* The network namespace of one of our VMs (an nsfs fd), or a negative errno. */
static int vm_netns(const struct mgr_server *s, const struct mgr_request *q, char *msg, size_t n) {
        bool exiting;
        _cleanup_close_ int pidfd = vm_process(s, q->pid, q->start_time, q->uid, &exiting);
        if (pidfd >= 0 && exiting) {
                close(pidfd);
                pidfd = -ESRCH;
        }
        if (pidfd < 0) {
                snprintf(msg, n, "pid %d is not a VM with uid %u", (int) q->pid, (unsigned) q->uid);
                return pidfd;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int) q->pid);
        _cleanup_close_ int ns = open(path, O_RDONLY | O_CLOEXEC);
        /* still that process after the open (the pidfd names it alone) */
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (ns < 0 || poll(&p, 1, 0) != 0) {
                snprintf(msg, n, "pid %d is gone", (int) q->pid);
                return -ESRCH;
        }
        return TAKE_FD(ns);
}

/* New gateway sockets in the network namespace of one of our VMs. */
static int do_net_listen(const struct mgr_server *s, const struct mgr_request *q, int *ret_fds, char *msg,
                         size_t n) {
        _cleanup_close_ int ns = vm_netns(s, q, msg, n);
        return ns < 0 ? ns : vmnet_listen(ns, &ret_fds[0], &ret_fds[1], msg, n);
}

/* A connection from inside the namespace of one of our VMs to a port of
 * its guest: the only address such a socket reaches is the guest's. */
static int do_net_connect(const struct mgr_server *s, const struct mgr_request *q, int *ret_fd, char *msg,
                          size_t n) {
        _cleanup_close_ int ns = vm_netns(s, q, msg, n);
        return ns < 0 ? ns : vmnet_connect(ns, q->port, ret_fd, msg, n);
}

static int do_cgroup_remove(const struct mgr_request *q, char *msg, size_t n) {
        int r = jail_cgroup_remove(q->uid);
        if (r < 0)
                snprintf(msg, n, "cannot remove the cgroup of uid %u", (unsigned) q->uid);
        return r;
}

/* Opens path (checked by the parser to lie under a root) without following
 * a symlink: an O_PATH fd. */
static int open_node_path(const struct mgr_server *s, const char *path, char *msg, size_t n) {
        for (size_t i = 0; i < s->policy.n_roots; i++)
                if (strcmp(path, s->policy.roots[i]) == 0) { /* a root itself (template.step's dir) */
                        int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd < 0)
                                snprintf(msg, n, "cannot open %.512s", path);
                        return fd < 0 ? negative_errno() : fd;
                }
        int ri = mgr_path_check(&s->policy, path);
        if (ri < 0) {
                snprintf(msg, n, "%.512s is outside the node's storage", path);
                return -EINVAL;
        }
        const char *root = s->policy.roots[ri];
        _cleanup_close_ int root_fd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root_fd < 0) {
                snprintf(msg, n, "cannot open %.512s", root);
                return negative_errno();
        }
        int fd = mgr_open_beneath(root_fd, root, path, 0);
        if (fd < 0)
                snprintf(msg, n, "cannot open %.512s without following a link", path);
        return fd;
}

/* Whether the node may hand st to a VM: the node's own (its uid, or the
 * uid it runs as now) or a VM's, never root's or anyone else's that was
 * linked in; a regular file with one link, or a directory. */
static bool node_owned(const struct mgr_server *s, uid_t caller, const struct stat *st) {
        if (st->st_uid != s->node_uid && st->st_uid != caller && !mgr_policy_vm_uid(&s->policy, st->st_uid))
                return false;
        return S_ISDIR(st->st_mode) || (S_ISREG(st->st_mode) && st->st_nlink == 1);
}

/* chown uid:node's group and chmod of an O_PATH fd (the inode we
 * checked, whatever its path became since). */
static int give_fd(const struct mgr_server *s, int fd, uid_t uid, unsigned mode) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (fchownat(fd, "", uid, s->node_gid, AT_EMPTY_PATH) < 0 || chmod(proc, mode) < 0)
                return negative_errno();
        return 0;
}

/* open_node_path(), and what it opened in *ret_st. */
static int open_node_stat(const struct mgr_server *s, const char *path, struct stat *ret_st, char *msg, size_t n) {
        _cleanup_close_ int fd = open_node_path(s, path, msg, n);
        if (fd < 0)
                return fd;
        if (fstat(fd, ret_st) < 0)
                return negative_errno();
        return TAKE_FD(fd);
}

static int do_file_give(const struct mgr_server *s, uid_t caller, const struct mgr_request *q, char *msg, size_t n) {
        struct stat st;
        _cleanup_close_ int fd = open_node_stat(s, q->path, &st, msg, n);
        if (fd < 0)
                return fd;
        bool dir = S_ISDIR(st.st_mode);
        /* files only 0600/0660, dirs 0700/2770 */
        if (!node_owned(s, caller, &st) || dir != (q->mode == 0700 || q->mode == 02770)) {
                snprintf(msg, n, "%.512s is not a VM file of the node", q->path);
                return -EPERM;
        }
        int r = give_fd(s, fd, q->uid, q->mode);
        if (r < 0)
                snprintf(msg, n, "cannot hand %.512s to uid %u", q->path, (unsigned) q->uid);
        return r;
}

static int do_file_reclaim(const struct mgr_server *s, uid_t caller, const struct mgr_request *q, char *msg,
                           size_t n) {
        struct stat st;
        _cleanup_close_ int fd = open_node_stat(s, q->path, &st, msg, n);
        if (fd < 0)
                return fd;
        if (!S_ISREG(st.st_mode) || !node_owned(s, caller, &st)) {
                snprintf(msg, n, "%.512s is not a VM file of the node", q->path);
                return -EPERM;
        }
        int r = give_fd(s, fd, s->node_uid, q->mode);
        if (r < 0)
                snprintf(msg, n, "cannot give %.512s back to the node", q->path);
        return r;
}

/* ---- template.step ---- */

#define TEMPLATE_STEP_TIMEOUT_S 3600

/* Removes what dirfd/name holds (ours: a staging dir only root can write),
 * without following links. */
static void remove_at(int dirfd, const char *name, unsigned depth) {
        struct stat st;
        if (depth > 16 || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        if (S_ISDIR(st.st_mode)) {
                int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                if (d) {
                        for (struct dirent *e; (e = readdir(d));)
                                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                                        remove_at(dirfd_of(d), e->d_name, depth + 1);
                        closedir(d);
                } else if (fd >= 0)
                        close(fd);
                (void) unlinkat(dirfd, name, AT_REMOVEDIR);
        } else
                (void) unlinkat(dirfd, name, 0);
}

/* Gives what dirfd/name holds to the node user, children first (so the
 * node cannot change a dir under us while we walk it); never follows a
 * link, never a file with more than one link. */
static int give_tree_at(const struct mgr_server *s, int dirfd, const char *name, unsigned depth) {
        struct stat st;
        if (depth > 16)
                return -ELOOP;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return negative_errno();
        if (S_ISDIR(st.st_mode)) {
                int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
                if (!d) {
                        if (fd >= 0)
                                close(fd);
                        return -EIO;
                }
                int r = 0;
                for (struct dirent *e; r >= 0 && (e = readdir(d));)
                        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                                r = give_tree_at(s, dirfd_of(d), e->d_name, depth + 1);
                closedir(d);
                if (r < 0)
                        return r;
        } else if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
                return 0; /* links stay root's (the node may remove them) */
        return fchownat(dirfd, name, s->node_uid, s->node_gid, AT_SYMLINK_NOFOLLOW) < 0 ? negative_errno() : 0;
}

/* images/kernel.sh, images/initramfs.sh or images/templates/NAME.sh, as
 * root, with a fixed argv: the output goes into a fresh staging dir only
 * root can enter (fd 3 of the script, named /proc/self/fd/3: no path the
 * node could redirect), the kernel it packs is read through fd 4. Then the
 * result is given to the node user and renamed into dir/out. */
static int step_start(struct mgr_server *s, const struct mgr_request *q, int log_fd, int conn, char *msg,
                      size_t n) {
        struct step *slot = NULL;
        for (size_t i = 0; i < STEPS_MAX && !slot; i++)
                if (s->steps[i].pid == 0)
                        slot = &s->steps[i];
        if (!slot) {
                snprintf(msg, n, "%d template steps run already", STEPS_MAX);
                return -EBUSY;
        }
        const char *images = getenv("AIRLOCK_IMAGES_DIR");
        if (!images || !*images)
                images = AIRLOCK_IMAGES_PATH;
        const char *guest = getenv("AIRLOCK_GUEST_BINARY");
        if (!guest || !*guest)
                guest = AIRLOCK_GUEST_PATH;
        bool kernel = strcmp(q->step, "kernel") == 0, initramfs = strcmp(q->step, "initramfs") == 0;
        bool base = strcmp(q->step, "base") == 0;
        _cleanup_free_ char *script = NULL;
        _cleanup_(base_step_env_freep) char **base_env = NULL;
        _cleanup_free_ char **envp = NULL;
        if (base) {
                int r = base_step_prepare(q->argv, images, q->kernel_dir[0] != 0, &script, &base_env, msg, n);
                if (r < 0)
                        return r;
                /* ours, then the base's parameters */
                size_t ne = 0, nb = 0;
                while (environ[ne])
                        ne++;
                while (base_env[nb])
                        nb++;
                if (!(envp = calloc(ne + nb + 1, sizeof *envp)))
                        return -ENOMEM;
                memcpy(envp, environ, ne * sizeof *envp);
                memcpy(envp + ne, base_env, nb * sizeof *envp);
        } else if (!kernel && !initramfs && q->kernel_dir[0]) {
                /* a recipe: the kernel's directory as AIRLOCK_KERNEL_DIR (fd 4) */
                size_t ne = 0;
                while (environ[ne])
                        ne++;
                if (!(envp = calloc(ne + 2, sizeof *envp)))
                        return -ENOMEM;
                memcpy(envp, environ, ne * sizeof *envp);
                envp[ne] = (char *) "AIRLOCK_KERNEL_DIR=/proc/self/fd/4";
        }
        if (!base)
                script = kernel      ? strdup_printf("%s/kernel.sh", images)
                         : initramfs ? strdup_printf("%s/initramfs.sh", images)
                                     : strdup_printf("%s/templates/%s.sh", images, q->name);
        if (!script)
                return -ENOMEM;
        struct stat st;
        if (stat(script, &st) < 0 || !S_ISREG(st.st_mode)) {
                snprintf(msg, n, "no recipe %.512s", script);
                return -ENOENT;
        }
        _cleanup_close_ int dir_fd = open_node_path(s, q->dir, msg, n);
        if (dir_fd < 0)
                return dir_fd;
        _cleanup_close_ int kdir_fd = -1;
        if ((initramfs || (!kernel && q->kernel_dir[0])) &&
            (kdir_fd = open_node_path(s, q->kernel_dir, msg, n)) < 0)
                return kdir_fd;
        char stage[64];
        uint8_t rnd[8];
        if (random_bytes(rnd, sizeof rnd) < 0)
                return -EIO;
        snprintf(stage, sizeof stage, ".stage-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3],
                 rnd[4], rnd[5], rnd[6], rnd[7]);
        if (mkdirat(dir_fd, stage, 0700) < 0) {
                snprintf(msg, n, "cannot make a staging dir in %.512s", q->dir);
                return negative_errno();
        }
        int r = 0;
        _cleanup_close_ int null_fd = -1;
        _cleanup_close_ int stage_fd = openat(dir_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat sst;
        if (stage_fd < 0 || fstat(stage_fd, &sst) < 0 || sst.st_uid != 0) {
                r = -EPERM; /* someone swapped it */
                goto out;
        }
        char out[128];
        snprintf(out, sizeof out, "/proc/self/fd/3/%s", q->out);
        /* every step writes stage/out (the scripts make their temp dirs
         * next to it, in the stage too) */
        char *argv[8] = { (char *) "/bin/bash", script, NULL };
        if (kernel)
                argv[2] = out;
        else if (initramfs) {
                argv[2] = (char *) "/proc/self/fd/4";
                argv[3] = (char *) guest;
                argv[4] = out;
        } else
                argv[2] = out;
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        pid_t pid = fork();
        if (pid < 0) {
                r = negative_errno();
                goto out;
        }
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGPIPE, SIG_DFL);
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                int a = fcntl(stage_fd, F_DUPFD_CLOEXEC, 10), b = kdir_fd >= 0 ? fcntl(kdir_fd, F_DUPFD_CLOEXEC, 10) : -1;
                if (null_fd < 0 || a < 0 || dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0 ||
                    dup2(a, 3) < 0 || (b >= 0 && dup2(b, 4) < 0))
                        _exit(126);
                /* these and nothing else: an fd inherited from whoever
                 * started us (a shell's, above 9) would push the script's
                 * own fds past what dash redirects (mmdebstrap's `cat >&11`
                 * failed with "Bad fd number") */
                (void) close_range(b >= 0 ? 5 : 4, ~0u, 0);
                if (envp)
                        execve(argv[0], argv, envp);
                else
                        execv(argv[0], argv);
                _exit(127);
        }
        log_info("template.step %s %s: %s (pid %d) into %s/%s", q->step, q->name, script, (int) pid, q->dir, q->out);
        /* running: the rest when it is reaped (step_finish) */
        *slot = (struct step){ .pid = pid,
                             .conn = conn,
                             .dir_fd = TAKE_FD(dir_fd),
                             .stage_fd = TAKE_FD(stage_fd),
                             .deadline_ns = now_monotonic_ns() + (uint64_t) TEMPLATE_STEP_TIMEOUT_S * 1000000000ULL };
        snprintf(slot->stage, sizeof slot->stage, "%s", stage);
        snprintf(slot->out, sizeof slot->out, "%s", q->out);
        snprintf(slot->what, sizeof slot->what, "%s %s", q->step, q->name);
        snprintf(slot->script, sizeof slot->script, "%s", script);
        s->n_steps++;
        return 0;
out:
        remove_at(dir_fd, stage, 0);
        return r;
}

/* ---- vmm.spawn ---- */

#define SPAWN_VOLUME0 6 /* run dir, vm dir, kernel, initrd, disk, mem, then the volumes */
#define SPAWN_FILES (SPAWN_VOLUME0 + MGR_VOLUMES_MAX)

struct spawn_files {
        int fd[SPAWN_FILES];   /* O_PATH, opened without following a link */
        int tree[SPAWN_FILES]; /* a detached bind mount of that very inode (open_tree) */
};

static void spawn_files_release(struct spawn_files *f) {
        for (size_t i = 0; i < SPAWN_FILES; i++) {
                if (f->fd[i] >= 0)
                        close(f->fd[i]);
                if (f->tree[i] >= 0)
                        close(f->tree[i]);
        }
}

/* The jail binds slot i from this tree: the inode we checked, whatever
 * its path became since. */
static int spawn_tree(struct spawn_files *f, size_t i) {
        long t = syscall(SYS_open_tree, f->fd[i], "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        if (t < 0)
                return negative_errno();
        f->tree[i] = (int) t;
        return 0;
}

/* Opens path into slot i; want_dir or a regular file. */
static int spawn_open(const struct mgr_server *s, struct spawn_files *f, size_t i, const char *path, bool want_dir,
                      char *msg, size_t n) {
        int fd = open_node_path(s, path, msg, n);
        if (fd < 0)
                return fd;
        f->fd[i] = fd;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
                snprintf(msg, n, "%.512s is not a %s", path, want_dir ? "directory" : "regular file");
                return -EINVAL;
        }
        return 0;
}

static int spawn_give(const struct mgr_server *s, uid_t caller, struct spawn_files *f, size_t i, const char *path,
                      uid_t uid, unsigned mode, char *msg, size_t n) {
        struct stat st;
        if (fstat(f->fd[i], &st) < 0)
                return negative_errno();
        if (!node_owned(s, caller, &st)) {
                snprintf(msg, n, "%.512s is not a VM file of the node", path);
                return -EPERM;
        }
        int r = give_fd(s, f->fd[i], uid, mode);
        if (r < 0)
                snprintf(msg, n, "cannot hand %.512s to uid %u", path, (unsigned) uid);
        return r;
}

static int do_vmm_spawn(const struct mgr_server *s, uid_t caller, const struct mgr_request *q, const int *fds,
                        json_t **ret_extra, int *ret_fds, char *msg, size_t n) {
        if (!s->qemu || strcmp(q->argv[0], s->qemu) != 0) {
                snprintf(msg, n, "argv[0] is not the QEMU binary %s", s->qemu ?: "(none)");
                return -EPERM;
        }
        /* QEMU's output: a file the node opened for writing; the RAM: a
         * sealed memfd nobody can write */
        struct stat st;
        int fl = fcntl(fds[0], F_GETFL);
        if (fstat(fds[0], &st) < 0 || !S_ISREG(st.st_mode) || fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
                snprintf(msg, n, "fd 0 is not a log file open for writing");
                return -EINVAL;
        }
        if (q->template_ram) {
                int seals = fcntl(fds[1], F_GET_SEALS);
                if (seals < 0 || !(seals & F_SEAL_WRITE) || !(seals & F_SEAL_SHRINK)) {
                        snprintf(msg, n, "fd 1 is not a sealed memfd");
                        return -EINVAL;
                }
        }
        _cleanup_free_ char *vm_dir = strdup_printf("%s/vm", q->run_dir);
        _cleanup_free_ char *root_dir = strdup_printf("%s/%u", s->jails_dir, (unsigned) q->uid);
        if (!vm_dir || !root_dir)
                return -ENOMEM;
        struct spawn_files f;
        for (size_t i = 0; i < SPAWN_FILES; i++)
                f.fd[i] = f.tree[i] = -1;
        int r, null_fd = -1, gw[2] = { -1, -1 };
        struct vmnet net = { -1, -1 };
        if ((r = spawn_open(s, &f, 0, q->run_dir, true, msg, n)) < 0 ||
            (r = spawn_open(s, &f, 1, vm_dir, true, msg, n)) < 0 ||
            (r = spawn_open(s, &f, 2, q->kernel, false, msg, n)) < 0 ||
            (r = spawn_open(s, &f, 3, q->initrd, false, msg, n)) < 0 ||
            (r = spawn_open(s, &f, 4, q->disk, false, msg, n)) < 0 ||
            (q->mem[0] && (r = spawn_open(s, &f, 5, q->mem, false, msg, n)) < 0))
                goto out;
        for (size_t i = 0; i < q->n_volumes; i++)
                if ((r = spawn_open(s, &f, SPAWN_VOLUME0 + i, q->volumes[i], false, msg, n)) < 0 ||
                    (r = spawn_give(s, caller, &f, SPAWN_VOLUME0 + i, q->volumes[i], q->uid, 0660, msg, n)) <
                            0)
                        goto out;
        /* the VM's own: its dir (setgid: what QEMU makes there is the
         * node's group), its disk, the RAM file of a boot */
        if ((r = spawn_give(s, caller, &f, 1, vm_dir, q->uid, 02770, msg, n)) < 0 ||
            (r = spawn_give(s, caller, &f, 4, q->disk, q->uid, 0660, msg, n)) < 0 ||
            (q->mem[0] && (r = spawn_give(s, caller, &f, 5, q->mem, q->uid, 0660, msg, n)) < 0))
                goto out;
        for (size_t i = 1; i < SPAWN_FILES; i++)
                if (f.fd[i] >= 0 && (r = spawn_tree(&f, i)) < 0) {
                        snprintf(msg, n, "open_tree failed");
                        goto out;
                }
        if (mkdir(root_dir, 0700) < 0 && errno != EEXIST) {
                r = negative_errno();
                snprintf(msg, n, "cannot create %s", root_dir);
                goto out;
        }

        struct jail_mount m[JAIL_MOUNTS_MAX];
        size_t k = 0;
        char links[4][PATH_MAX];
        m[k++] = (struct jail_mount){ JAIL_BIND_RO, "/usr", "/usr", -1 };
        static const char *const merged[] = { "/lib", "/lib64", "/bin", "/sbin" };
        for (size_t i = 0; i < ARRAY_SIZE(merged); i++) {
                struct stat ls;
                if (lstat(merged[i], &ls) < 0)
                        continue;
                if (S_ISLNK(ls.st_mode)) {
                        ssize_t l = readlink(merged[i], links[i], sizeof links[i] - 1);
                        if (l <= 0) {
                                r = -EIO;
                                goto out;
                        }
                        links[i][l] = 0;
                        m[k++] = (struct jail_mount){ JAIL_SYMLINK, links[i], merged[i], -1 };
                } else if (S_ISDIR(ls.st_mode))
                        m[k++] = (struct jail_mount){ JAIL_BIND_RO, merged[i], merged[i], -1 };
        }
        if (access("/etc/ld.so.cache", R_OK) == 0)
                m[k++] = (struct jail_mount){ JAIL_BIND_RO, "/etc/ld.so.cache", "/etc/ld.so.cache", -1 };
        if (strncmp(s->qemu, "/usr/", 5) != 0)
                m[k++] = (struct jail_mount){ JAIL_BIND_RO, s->qemu, s->qemu, -1 };
        m[k++] = (struct jail_mount){ JAIL_BIND_RO, NULL, q->kernel, f.tree[2] };
        m[k++] = (struct jail_mount){ JAIL_BIND_RO, NULL, q->initrd, f.tree[3] };
        m[k++] = (struct jail_mount){ JAIL_BIND_RW, NULL, vm_dir, f.tree[1] };
        m[k++] = (struct jail_mount){ JAIL_BIND_RW, NULL, q->disk_target, f.tree[4] };
        if (q->mem[0])
                m[k++] = (struct jail_mount){ JAIL_BIND_RW, NULL, q->mem, f.tree[5] };
        for (size_t i = 0; i < q->n_volumes; i++)
                m[k++] = (struct jail_mount){JAIL_BIND_RW, NULL, q->volume_targets[i],
                                             f.tree[SPAWN_VOLUME0 + i]};
        static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++)
                m[k++] = (struct jail_mount){ JAIL_BIND_DEV, devs[i], devs[i], -1 };
        /* its own /dev/kvm node (the host's may be 0600 root:root) */
        if (q->kvm)
                m[k++] = (struct jail_mount){ JAIL_DEV_NODE, "/dev/kvm", "/dev/kvm", -1 };
        if (q->template_ram)
                m[k++] = (struct jail_mount){ JAIL_PROC, NULL, "/proc", -1 };

        char *procs[JAIL_CGROUPS_MAX] = { 0 };
        size_t n_procs = 0;
        struct jail_cgroup_limits l = {
                .memory_bytes = ((uint64_t) q->memory_mib + JAIL_VMM_MEMORY_MARGIN_MIB) << 20,
                .pids = JAIL_VMM_PIDS_MAX,
                .cpus = q->vcpus,
        };
        r = jail_cgroup_create(q->uid, &l, procs, &n_procs);
        if (r < 0) {
                snprintf(msg, n, r == -EBUSY ? "uid %u is in use" : "cannot make the cgroup of uid %u",
                         (unsigned) q->uid);
                goto out;
        }
        /* its network: the namespace with its tap, and the gateway's
         * sockets in it, before QEMU runs (nothing fails after that) */
        if ((r = vmnet_create(&net, msg, n)) < 0 || (r = vmnet_listen(net.netns_fd, &gw[0], &gw[1], msg, n)) < 0) {
                (void) jail_cgroup_remove(q->uid);
                jail_cgroup_procs_free(procs, n_procs);
                goto out;
        }
        int keep[2], n_keep = 0;
        if (q->template_ram)
                keep[n_keep++] = fds[1];
        keep[n_keep++] = net.tap_fd;
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        struct jail_spec spec = {
                .binary = s->qemu,
                .argv = q->argv,
                .uid = q->uid,
                .gid = q->uid,
                .root_dir = root_dir,
                .mounts = m,
                .n_mounts = k,
                .cgroup_procs = (const char *const *) procs,
                .n_cgroups = n_procs,
                .stdin_fd = null_fd,
                .stdout_fd = fds[0],
                .keep_fds = keep,
                .n_keep_fds = n_keep,
                .join_netns = true,
                .netns_fd = net.netns_fd,
                .nofile = JAIL_VMM_NOFILE,
                .nproc = JAIL_VMM_PIDS_MAX,
        };
        pid_t pid = -1;
        int pidfd = -1;
        struct stat bst;
        r = null_fd < 0 ? -EIO : stat(s->qemu, &bst) < 0 ? negative_errno() : jail_spawn(&spec, &pid, &pidfd);
        jail_cgroup_procs_free(procs, n_procs);
        if (r < 0) {
                snprintf(msg, n, "cannot start the jailed QEMU");
                (void) jail_cgroup_remove(q->uid);
                goto out;
        }
        uint64_t start = 0;
        (void) jail_process_start_time(pid, &start);
        *ret_extra = json_pack("{sisIsIsI}", "pid", (json_int_t) pid, "start_time", (json_int_t) start, "exe_dev",
                               (json_int_t) bst.st_dev, "exe_ino", (json_int_t) bst.st_ino);
        ret_fds[0] = pidfd;
        ret_fds[1] = TAKE_FD(gw[0]);
        ret_fds[2] = TAKE_FD(gw[1]);
        log_info("started VM pid=%d uid=%u for the node (%s)", (int) pid, (unsigned) q->uid, q->run_dir);
        r = 0;
out:
        vmnet_release(&net);
        safe_close(gw[0]);
        safe_close(gw[1]);
        if (null_fd >= 0)
                close(null_fd);
        spawn_files_release(&f);
        return r;
}

static void reply(int fd, int r, const char *msg, json_t *extra, const int *pass_fds, size_t n_pass) {
        json_t *o = r < 0 ? json_pack("{s{siss}}", "error", "errno", -r, "message", msg)
                          : json_pack("{sb}", "ok", 1);
        if (o && extra && r >= 0)
                json_object_update(o, extra);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
                (void) mgr_send(fd, PROTO_MGR_REPLY, s, strlen(s), pass_fds, r >= 0 ? n_pass : 0);
        free(s);
        json_decref(o);
}

/* The end of step st, whose process ended with status: its output given
 * to the node and moved into place, the reply sent (unless the node hung
 * up), the slot freed. */
static void step_finish(struct mgr_server *s, struct step *st, int status) {
        char msg[1024] = "";
        int r = 0;
        if (st->abandoned || st->timed_out) {
                r = st->abandoned ? -ECANCELED : -ETIMEDOUT;
                snprintf(msg, sizeof msg, "%s %s", st->what, st->abandoned ? "cancelled" : "timed out");
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                snprintf(msg, sizeof msg, "%s failed (%s %d)", st->script, WIFEXITED(status) ? "exit status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                r = -EIO;
        } else if ((r = give_tree_at(s, st->stage_fd, st->out, 0)) < 0 ||
                   renameat(st->stage_fd, st->out, st->dir_fd, st->out) < 0) {
                /* the node's now: children first, then into place */
                r = r < 0 ? r : negative_errno();
                snprintf(msg, sizeof msg, "cannot move %s into place", st->out);
        }
        remove_at(st->dir_fd, st->stage, 0);
        if (r < 0)
                log_warn_errno(r, "template.step %s (pid %d): %s: %m", st->what, (int) st->pid, msg);
        else
                log_info("template.step %s (pid %d) done", st->what, (int) st->pid);
        if (!st->abandoned)
                reply(st->conn, r, msg, NULL, NULL, 0);
        safe_close(st->conn);
        safe_close(st->dir_fd);
        safe_close(st->stage_fd);
        *st = (struct step){ 0 };
        s->n_steps--;
}

/* Kills step st's process group (it is reaped later). */
static void step_kill(struct step *st) {
        kill(-st->pid, SIGKILL);
        kill(st->pid, SIGKILL);
}

bool mgr_server_reaped(struct mgr_server *s, pid_t pid, int status) {
        for (size_t i = 0; s && pid > 0 && i < STEPS_MAX; i++)
                if (s->steps[i].pid == pid) {
                        step_finish(s, &s->steps[i], status);
                        return true;
                }
        return false;
}

/* Each running step: ended (reaped here), past its time, or abandoned by
 * the node (a build cancelled, a node stopping: its connection shut). */
static void steps_check(struct mgr_server *s) {
        for (size_t i = 0; s->n_steps && i < STEPS_MAX; i++) {
                struct step *st = &s->steps[i];
                if (st->pid == 0)
                        continue;
                int status = 0;
                if (waitpid(st->pid, &status, WNOHANG) == st->pid) {
                        step_finish(s, st, status);
                        continue;
                }
                struct pollfd p = { .fd = st->conn, .events = POLLIN | POLLRDHUP };
                bool gone = poll(&p, 1, 0) > 0; /* the node sends nothing more: readable is its end */
                if (gone && !st->abandoned) {
                        log_info("template.step %s (pid %d): the node hung up; killing it", st->what, (int) st->pid);
                        st->abandoned = true;
                        step_kill(st);
                } else if (!st->timed_out && !st->abandoned && now_monotonic_ns() > st->deadline_ns) {
                        st->timed_out = true;
                        step_kill(st);
                }
        }
}

/* Stopping: every running step killed and waited for, its stage removed. */
static void steps_kill_all(struct mgr_server *s) {
        for (size_t i = 0; s->n_steps && i < STEPS_MAX; i++) {
                struct step *st = &s->steps[i];
                if (st->pid == 0)
                        continue;
                log_info("template.step %s (pid %d): stopping; killing it", st->what, (int) st->pid);
                st->abandoned = true;
                step_kill(st);
                int status = 0;
                while (waitpid(st->pid, &status, 0) < 0 && errno == EINTR)
                        ;
                step_finish(s, st, status);
        }
}

void mgr_server_serve_one(struct mgr_server *s) {
        _cleanup_close_ int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return;
        /* the node user, no one else (root included) */
        if (cred.uid != s->node_uid) {
                /* closed unanswered: nothing of ours reaches anyone else */
                log_warn("refusing a request from pid %d uid %u on %s: only the node (uid %u) may ask",
                         (int) cred.pid, (unsigned) cred.uid, s->path, (unsigned) s->node_uid);
                return;
        }
        struct timeval tv = { REQUEST_TIMEOUT_MS / 1000, (REQUEST_TIMEOUT_MS % 1000) * 1000 };
        (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        _cleanup_free_ char *req = NULL;
        size_t n;
        int fds[MGR_FDS_MAX];
        size_t n_fds = 0;
        int r = mgr_recv(fd, PROTO_MGR_REQUEST, MGR_REQUEST_MAX, &req, &n, fds, &n_fds);
        if (r < 0) {
                log_warn_errno(r, "bad request frame from pid %d: %m", (int) cred.pid);
                return;
        }
        _cleanup_free_ struct mgr_request *q = malloc(sizeof *q);
        char msg[1024] = "";
        r = q ? mgr_request_parse(req, n, &s->policy, q, msg, sizeof msg) : -ENOMEM;
        /* vmm.spawn takes 1 fd, or 2 with the template RAM; template.step 1 */
        size_t want_fds = q && r >= 0 ? (q->op == MGR_OP_VMM_SPAWN ? (q->template_ram ? 2 : 1)
                                          : q->op == MGR_OP_TEMPLATE_STEP ? 1
                                                                          : 0)
                                      : 0;
        if (r >= 0 && n_fds != want_fds) {
                snprintf(msg, sizeof msg, "%zu fds for %s", n_fds, mgr_op_name(q->op));
                mgr_request_release(q);
                r = -EINVAL;
        }
        if (r < 0) {
                for (size_t i = 0; i < n_fds; i++)
                        close(fds[i]);
                log_warn("refusing a request from pid %d: %s", (int) cred.pid, msg);
                reply(fd, r, msg, NULL, NULL, 0);
                return;
        }
        json_t *extra = NULL;
        bool async = false;
        int out_fds[3] = { -1, -1, -1 }; /* what the reply passes on */
        size_t n_out = 0;
        switch (q->op) {
        case MGR_OP_PING:
                extra = json_pack("{si}", "uid", (json_int_t) cred.uid);
                r = 0;
                break;
        case MGR_OP_VMM_VERIFY:
        case MGR_OP_VMM_SIGNAL:
                r = do_vmm(s, q, msg, sizeof msg);
                break;
        case MGR_OP_CGROUP_REMOVE:
                r = do_cgroup_remove(q, msg, sizeof msg);
                break;
        case MGR_OP_FILE_GIVE:
                r = do_file_give(s, cred.uid, q, msg, sizeof msg);
                break;
        case MGR_OP_VMM_SPAWN:
                r = do_vmm_spawn(s, cred.uid, q, fds, &extra, out_fds, msg, sizeof msg);
                n_out = 3;
                break;
        case MGR_OP_NET_LISTEN:
                r = do_net_listen(s, q, out_fds, msg, sizeof msg);
                n_out = 2;
                break;
        case MGR_OP_NET_CONNECT:
                r = do_net_connect(s, q, &out_fds[0], msg, sizeof msg);
                n_out = 1;
                break;
        case MGR_OP_FILE_RECLAIM:
                r = do_file_reclaim(s, cred.uid, q, msg, sizeof msg);
                break;
        case MGR_OP_TEMPLATE_STEP:
                /* runs on: the reply comes when it ends (step_finish) */
                r = step_start(s, q, fds[0], fd, msg, sizeof msg);
                async = r >= 0;
                break;
        default:
                r = -EINVAL;
                snprintf(msg, sizeof msg, "unknown op");
        }
        for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
        if (async) {
                TAKE_FD(fd); /* the step's now */
                mgr_request_release(q);
                return;
        }
        if (r < 0)
                log_warn_errno(r, "refused %s from pid %d: %s: %m", mgr_op_name(q->op), (int) cred.pid, msg);
        else
                log_debug("served %s for pid %d", mgr_op_name(q->op), (int) cred.pid);
        reply(fd, r, msg, extra, out_fds, n_out);
        json_decref(extra);
        for (size_t i = 0; i < ARRAY_SIZE(out_fds); i++)
                safe_close(out_fds[i]);
        mgr_request_release(q);
}

void mgr_server_serve_for(void *userdata, int ms) {
        struct mgr_server *s = userdata;
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        if (poll(&p, 1, s->n_steps ? MIN(ms, STEPS_CHECK_MS) : ms) > 0)
                mgr_server_serve_one(s);
        steps_check(s);
}
