/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where a QEMU runs: through airlock-nodemgr (the node's client of it) or in
 * a jail of the node's own: VM uids and cgroups, template RAM copies, the
 * jail's mounts, the spawn, the VM's network namespace.
 */
#include "vmm-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host.h"
#include "jail.h"
#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "qmp.h"
#include "util.h"
#include "vmnet.h"

#define VMM_UID_BASE_DEFAULT JAIL_VM_UID_BASE_DEFAULT
#define VMM_UID_COUNT_DEFAULT 65536u

/* The jail's uid range (vmm_jail_setup), under jail_lock. */
static pthread_mutex_t jail_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t uid_base = VMM_UID_BASE_DEFAULT, uid_count = VMM_UID_COUNT_DEFAULT;

/* ---- the jail: uids, cgroup limits, the template RAM, the spec ---- */

/* What QEMU needs beyond guest RAM: TCG's 32 MiB translation buffer, its
 * heap, page tables and I/O buffers (measured peak: see docs/security.md). */
#define VMM_MEMORY_MARGIN_MIB JAIL_VMM_MEMORY_MARGIN_MIB
#define VMM_PIDS_MAX JAIL_VMM_PIDS_MAX
#define VMM_NOFILE JAIL_VMM_NOFILE
#define RAM_COPIES_MAX 8

static uint8_t *uid_used; /* bitmap over slots: VMs of this node, live or adopted */

static uint32_t uid_cursor;

static char *qemu_path;   /* the binary, absolute (vmm_jail_setup) */

/* AIRLOCK_NODEMGR_SOCKET: airlock-nodemgr starts, signals and cleans up the
 * VMs (the node needs no privilege for them); unset: the node does it
 * itself, as root (AIRLOCK_PRIVSEP=0, tests). */
static char *mgr_socket;

/* One request to airlock-nodemgr; its refusal is logged. */
int vmm_mgr_ask(const struct mgr_request *q, const int *fds, size_t n_fds, char **ret_reply, int *ret_fds,
                   size_t n_ret_fds, const char *ctx) {
        char err[256];
        int got[MGR_FDS_MAX];
        size_t n_got = 0;
        int r = mgr_call(mgr_socket, q, fds, n_fds, ret_reply, got, &n_got, err, sizeof err);
        if (r < 0) {
                if (r != -EBUSY)
                        log_errno(LOG_LEVEL_ERROR, r, ctx, "airlock-nodemgr refused %s: %s: %m", mgr_op_name(q->op),
                                  err[0] ? err : "no answer");
                return r;
        }
        for (size_t i = 0; i < n_ret_fds; i++)
                ret_fds[i] = i < n_got ? got[i] : -1;
        for (size_t i = n_ret_fds; i < n_got; i++)
                close(got[i]);
        return 0;
}

/* An absolute path for name: itself if it has a '/', else the first
 * executable in PATH (the jail execs without a PATH search). */
static int resolve_binary(const char *name, char **ret) {
        if (strchr(name, '/')) {
                char *p = realpath(name, NULL);
                if (!p)
                        return negative_errno();
                *ret = p;
                return 0;
        }
        const char *path = getenv("PATH") ?: "/usr/local/bin:/usr/bin:/bin";
        for (const char *d = path; *d;) {
                size_t n = strcspn(d, ":");
                _cleanup_free_ char *cand = strdup_printf("%.*s/%s", (int) n, d, name);
                if (!cand)
                        return -ENOMEM;
                if (n > 0 && access(cand, X_OK) == 0) {
                        char *p = realpath(cand, NULL);
                        if (!p)
                                return negative_errno();
                        *ret = p;
                        return 0;
                }
                d += n + (d[n] == ':');
        }
        return -ENOENT;
}

int vmm_jail_setup(const char *qemu_binary, uint32_t base, uint32_t count) {
        if (base == 0 || count == 0 || count > (1u << 20) || base > UINT32_MAX - count - 1)
                return -EINVAL;
        const char *sock = getenv("AIRLOCK_NODEMGR_SOCKET");
        if ((!sock || !*sock) && geteuid() != 0)
                return log_error_errno(-EPERM, "jailing VMs needs root or airlock-nodemgr (AIRLOCK_NODEMGR_SOCKET)");
        if (sock && *sock) {
                free(mgr_socket);
                if (!(mgr_socket = strdup(sock)))
                        return -ENOMEM;
                int k = vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_PING }, NULL, 0, NULL, NULL, 0, NULL);
                if (k < 0)
                        return log_error_errno(k, "airlock-nodemgr does not answer on %s: %m", mgr_socket);
        }
        _cleanup_free_ char *bin = NULL;
        int r = resolve_binary(qemu_binary ?: "qemu-system-x86_64", &bin);
        if (r < 0)
                return log_error_errno(r, "cannot find the QEMU binary %s: %m", qemu_binary ?: "qemu-system-x86_64");
        uint8_t *used = calloc((count + 7) / 8, 1);
        if (!used)
                return -ENOMEM;
        pthread_mutex_lock(&jail_lock);
        free(uid_used);
        uid_used = used;
        uid_base = base;
        uid_count = count;
        free(qemu_path);
        qemu_path = TAKE_PTR(bin);
        pthread_mutex_unlock(&jail_lock);
        if (!mgr_socket)
                jail_cgroup_setup();
        log_info("vmm jail: qemu=%s uids %u..%u, namespaces mnt pid ipc uts net, private root; started by %s",
                 qemu_path, (unsigned) base, (unsigned) (base + count - 1), mgr_socket ? mgr_socket : "the node");
        return 0;
}

bool vmm_uid_slot(uid_t uid, uint32_t *ret) {
        if (uid < uid_base || uid - uid_base >= uid_count)
                return false;
        *ret = uid - uid_base;
        return true;
}

/* Marks uid used or free; false when it is not a VM uid. */
bool vmm_uid_mark(uid_t uid, bool used) {
        pthread_mutex_lock(&jail_lock);
        uint32_t slot;
        bool ok = uid_used && vmm_uid_slot(uid, &slot);
        if (ok) {
                if (used)
                        uid_used[slot / 8] |= (uint8_t) (1u << (slot % 8));
                else
                        uid_used[slot / 8] &= (uint8_t) ~(1u << (slot % 8));
        }
        pthread_mutex_unlock(&jail_lock);
        return ok;
}

/* A free uid, marked used. Round robin, so a uid is not reused at once. */
static int uid_next(uid_t *ret) {
        pthread_mutex_lock(&jail_lock);
        if (!uid_used && !(uid_used = calloc((uid_count + 7) / 8, 1))) {
                pthread_mutex_unlock(&jail_lock);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < uid_count; i++) {
                uint32_t slot = uid_cursor++ % uid_count;
                if (!(uid_used[slot / 8] & (1u << (slot % 8)))) {
                        uid_used[slot / 8] |= (uint8_t) (1u << (slot % 8));
                        *ret = (uid_t) (uid_base + slot);
                        pthread_mutex_unlock(&jail_lock);
                        return 0;
                }
        }
        pthread_mutex_unlock(&jail_lock);
        return -EUSERS;
}

/* A uid and its cgroup with limits: a uid whose cgroup holds processes is
 * in use by a VM we do not know (another node on this host) and skipped.
 * No cgroup controller at all: the uid alone (warned once at setup). */
static int uid_claim(const struct vmm_config *c, uid_t *ret, char **procs, size_t *ret_n) {
        struct jail_cgroup_limits l = {
                .memory_bytes = ((uint64_t) (c->cgroup_memory_mib ?: c->memory_mib) + VMM_MEMORY_MARGIN_MIB) << 20,
                .pids = VMM_PIDS_MAX,
                .cpus = c->cgroup_vcpus ?: c->vcpus,
        };
        for (int tries = 0; tries < 64; tries++) {
                uid_t uid;
                int r = uid_next(&uid);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, c->log_ctx, "no free VM uid: %m");
                r = jail_cgroup_create(uid, &l, procs, ret_n);
                if (r == -EBUSY)
                        continue; /* stays marked: in use elsewhere */
                if (r < 0) {
                        vmm_uid_mark(uid, false);
                        return log_errno(LOG_LEVEL_ERROR, r, c->log_ctx,
                                         "cannot make the cgroup of VM uid %u (not starting it unlimited): %m",
                                         (unsigned) uid);
                }
                *ret = uid;
                return 0;
        }
        return log_errno(LOG_LEVEL_ERROR, -EUSERS, c->log_ctx, "no VM uid with a free cgroup");
}

const char *vmm_qemu_binary(void) {
        return qemu_path;
}

bool vmm_via_nodemgr(void) {
        return mgr_socket != NULL;
}

int vmm_template_step_send(const char *step, const char *name, const char *dir, const char *out,
                           const char *kernel_dir, char *const *params, int log_fd, int *ret_conn) {
        if (!mgr_socket)
                return -EOPNOTSUPP;
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->op = MGR_OP_TEMPLATE_STEP;
        if (str_copy(q->step, sizeof q->step, step) < 0 || str_copy(q->name, sizeof q->name, name) < 0 ||
            str_copy(q->dir, sizeof q->dir, dir) < 0 || str_copy(q->out, sizeof q->out, out) < 0 ||
            str_copy(q->kernel_dir, sizeof q->kernel_dir, kernel_dir) < 0)
                return -ENAMETOOLONG;
        for (size_t i = 0; params && params[i]; i++) {
                if (i == MGR_ARGV_MAX || strlen(params[i]) >= MGR_ARG_MAX) {
                        mgr_request_release(q);
                        return -E2BIG;
                }
                if (!(q->argv[i] = strdup(params[i]))) {
                        mgr_request_release(q);
                        return -ENOMEM;
                }
        }
        int r = mgr_call_send(mgr_socket, q, &log_fd, 1, ret_conn);
        mgr_request_release(q);
        return r;
}

int vmm_template_step_wait(int conn, const char *ctx) {
        char err[256];
        int r = mgr_call_recv(conn, NULL, NULL, NULL, err, sizeof err);
        if (r < 0)
                log_errno(LOG_LEVEL_ERROR, r, ctx, "airlock-nodemgr's template.step failed: %s: %m",
                          err[0] ? err : "no answer");
        return r;
}

int vmm_file_reclaim(const char *path, unsigned mode, const char *ctx) {
        if (!mgr_socket)
                return -EOPNOTSUPP;
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        if (str_copy(q->path, sizeof q->path, path) < 0)
                return -ENAMETOOLONG;
        q->op = MGR_OP_FILE_RECLAIM;
        q->mode = mode;
        return vmm_mgr_ask(q, NULL, 0, NULL, NULL, 0, ctx);
}

/* Removes the cgroup of a VM uid whose VM is gone. */
int vmm_cgroup_remove(uid_t uid, const char *ctx) {
        if (!mgr_socket)
                return jail_cgroup_remove(uid);
        return vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_CGROUP_REMOVE, .uid = uid }, NULL, 0, NULL, NULL, 0, ctx);
}

/* SIGKILLs a VM process that is not our child (started by airlock-nodemgr
 * or by an earlier node) and waits up to wait_ms for it to end. */
int vmm_kill_pid(pid_t pid, int pidfd, uint64_t start_time, uid_t uid, int wait_ms, const char *ctx) {
        int r = 0;
        if (mgr_socket)
                r = vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_VMM_SIGNAL, .pid = pid, .start_time = start_time,
                                                   .uid = uid, .signal = SIGKILL },
                            NULL, 0, NULL, NULL, 0, ctx);
        else if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0)
                r = negative_errno();
        if (r >= 0) {
                struct pollfd p = { .fd = pidfd, .events = POLLIN };
                (void) poll(&p, 1, wait_ms);
        }
        return r;
}

void vmm_kill(struct vmm *v) {
        if (!v || v->pid <= 0 || vmm_process_exited(v))
                return;
        if (mgr_socket || v->adopted)
                (void) vmm_kill_pid(v->pid, v->pidfd, v->start_time, v->uid, 0, v->log_ctx);
        else
                (void) kill(v->pid, SIGKILL);
}

/* Ends a VM's jail bookkeeping once its process is gone. */
void vmm_uid_release(struct vmm *v) {
        if (v->uid == 0)
                return;
        int r = vmm_cgroup_remove(v->uid, v->log_ctx);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, v->log_ctx, "cannot remove the cgroup of uid %u: %m", (unsigned) v->uid);
        vmm_uid_mark(v->uid, false);
        v->uid = 0;
}

/*
 * The template RAM for share=off restores. QEMU 7.2 opens mem-path
 * O_RDWR even for a private mapping, so a jailed QEMU given the template
 * file itself could write it, and with it the memory of every sandbox of
 * that template. It gets a sealed memfd copy instead (F_SEAL_WRITE: no one
 * writes it; private mappings still work), one per template file, shared
 * by all its VMs like the file's page cache was; without holes (below).
 */
struct ram_copy {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
        int fd;
};

static struct ram_copy ram_copies[RAM_COPIES_MAX];

static size_t n_ram_copies;

static pthread_mutex_t ram_lock = PTHREAD_MUTEX_INITIALIZER;

/* Writes zeros over [from, to) of fd. */
static int write_zeros(int fd, off_t from, off_t to) {
        static const char zeros[1 << 16];
        for (off_t o = from; o < to;) {
                ssize_t k = pwrite(fd, zeros, (size_t) MIN(to - o, (off_t) sizeof zeros), o);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO;
                o += k;
        }
        return 0;
}

/*
 * The copy has no holes: the file's are written as zeros. A VM maps the
 * copy privately, and the first migration of any of them (fork, full
 * snapshot, suspend) reads all of its RAM; a read of a hole made the
 * kernel allocate and clear a page there and then, inside the pause
 * (~420 ms of a 512 MiB guest's first fork), and charged it to the cgroup
 * of the VM that read it, which the kernel OOM-killed for it on a 1 GiB
 * template. Written here, the pages are the node's, cleared once per
 * template: the memory the first migration took anyway. (fallocate()
 * would allocate them but leave the clearing to the first read.)
 */
static int ram_copy_make(int in, off_t size, int *ret) {
        _cleanup_close_ int fd = memfd_create("airlock-template-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, size) < 0)
                return negative_errno();
        for (off_t off = 0; off < size;) {
                off_t data = lseek(in, off, SEEK_DATA);
                if (data < 0 && errno != ENXIO)
                        return negative_errno();
                if (data < 0 || data > size)
                        data = size;
                int r = write_zeros(fd, off, data);
                if (r < 0)
                        return r;
                if (data == size)
                        break;
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0 || lseek(fd, data, SEEK_SET) < 0)
                        return negative_errno();
                for (off_t o = data; o < hole;) {
                        ssize_t k = sendfile(fd, in, &o, (size_t) MIN(hole - o, (off_t) 1 << 30));
                        if (k < 0 && errno != EINTR)
                                return negative_errno();
                        if (k == 0)
                                return -EIO;
                }
                off = hole;
        }
        /* EBUSY: the kernel still holds references to pages just written
         * (the copy's own, briefly): they drop in a moment */
        int k;
        for (int i = 0; (k = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) < 0 &&
                        errno == EBUSY && i < 50;
             i++)
                nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
        if (k < 0)
                return negative_errno();
        *ret = TAKE_FD(fd);
        return 0;
}

static int dup_to(int fd, int *ret) {
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (d < 0)
                return negative_errno();
        *ret = d;
        return 0;
}

/* A new fd (the caller closes it) of the sealed copy of the RAM file path. */
static int template_ram_fd(const char *path, const char *ctx, int *ret) {
        _cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "cannot open the RAM file %s: %m", path);
        pthread_mutex_lock(&ram_lock);
        int r = -ENOENT;
        for (size_t i = 0; i < n_ram_copies && r == -ENOENT; i++) {
                struct ram_copy *c = &ram_copies[i];
                if (c->dev == st.st_dev && c->ino == st.st_ino && c->size == st.st_size &&
                    c->mtime.tv_sec == st.st_mtim.tv_sec && c->mtime.tv_nsec == st.st_mtim.tv_nsec)
                        r = dup_to(c->fd, ret);
        }
        if (r == -ENOENT) {
                uint64_t t0 = now_monotonic_ns();
                int fd;
                r = ram_copy_make(in, st.st_size, &fd);
                if (r >= 0) {
                        if (n_ram_copies == RAM_COPIES_MAX) { /* VMs keep theirs */
                                close(ram_copies[0].fd);
                                memmove(ram_copies, ram_copies + 1, sizeof ram_copies[0] * --n_ram_copies);
                        }
                        ram_copies[n_ram_copies++] = (struct ram_copy){ st.st_dev, st.st_ino, st.st_size, st.st_mtim,
                                                                        fd };
                        log_emit(LOG_LEVEL_INFO, ctx, "sealed copy of the template RAM %s made in %llu ms", path,
                                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
                        r = dup_to(fd, ret);
                }
        }
        pthread_mutex_unlock(&ram_lock);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "cannot copy the RAM file %s: %m", path);
        return 0;
}

/* A file the jailed QEMU writes: its uid owns it, no one else may. */
static int give_file(const char *path, uid_t uid, const char *ctx) {
        if (chown(path, uid, uid) < 0 || chmod(path, 0600) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "cannot hand %s to uid %u: %m", path,
                                 (unsigned) uid);
        return 0;
}

_Static_assert(VMM_VOLUMES_MAX == MGR_VOLUMES_MAX, "the machine's volume slots and vmm.spawn's volumes");

/* Text of the jail's mounts: the spec borrows these strings. */
struct jail_paths {
        char link[4][PATH_MAX];
        char *disk, *mem, *root;
        char *volumes[VMM_VOLUMES_MAX];
};

static void jail_paths_release(struct jail_paths *p) {
        free(p->disk);
        free(p->mem);
        free(p->root);
        for (size_t i = 0; i < VMM_VOLUMES_MAX; i++)
                free(p->volumes[i]);
}

/* The jail of c: what the private root holds, each at its host path. */
static int jail_mounts(const struct vmm_config *c, const struct vmm *v, const char *binary, bool proc,
                       struct jail_paths *p, struct jail_mount *m, size_t *ret_n) {
        size_t n = 0;
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, "/usr", "/usr", -1 };
        static const char *const merged[] = { "/lib", "/lib64", "/bin", "/sbin" };
        for (size_t i = 0; i < ARRAY_SIZE(merged); i++) {
                struct stat st;
                if (lstat(merged[i], &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        ssize_t k = readlink(merged[i], p->link[i], sizeof p->link[i] - 1);
                        if (k <= 0)
                                return negative_errno();
                        p->link[i][k] = 0;
                        m[n++] = (struct jail_mount){ JAIL_SYMLINK, p->link[i], merged[i], -1 };
                } else if (S_ISDIR(st.st_mode))
                        m[n++] = (struct jail_mount){ JAIL_BIND_RO, merged[i], merged[i], -1 };
        }
        if (access("/etc/ld.so.cache", R_OK) == 0)
                m[n++] = (struct jail_mount){ JAIL_BIND_RO, "/etc/ld.so.cache", "/etc/ld.so.cache", -1 };
        if (strncmp(binary, "/usr/", 5) != 0)
                m[n++] = (struct jail_mount){ JAIL_BIND_RO, binary, binary, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, c->kernel, c->kernel, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, c->initrd, c->initrd, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RW, v->vm_dir, v->vm_dir, -1 };
        /* The disk at the path QEMU is given (the run dir's disk.img link):
         * a bind of the file itself, so a reopen by path (migrations) finds
         * it even after a warm VM's disk moved on the host. */
        if (!(p->disk = realpath(c->rootfs, NULL)))
                return negative_errno();
        m[n++] = (struct jail_mount){ JAIL_BIND_RW, p->disk, c->rootfs, -1 };
        /* the volumes the same way, each at the path QEMU is given */
        for (size_t i = 0; i < VMM_VOLUMES_MAX; i++) {
                if (!c->volumes[i])
                        continue;
                if (!(p->volumes[i] = realpath(c->volumes[i], NULL)))
                        return negative_errno();
                m[n++] = (struct jail_mount){ JAIL_BIND_RW, p->volumes[i], c->volumes[i], -1 };
        }
        if (c->mem_shared && !c->mem_anonymous) {
                if (!(p->mem = realpath(c->mem_path, NULL)))
                        return negative_errno();
                m[n++] = (struct jail_mount){ JAIL_BIND_RW, p->mem, c->mem_path, -1 };
        }
        static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++)
                m[n++] = (struct jail_mount){ JAIL_BIND_DEV, devs[i], devs[i], -1 };
        if (c->accel == VMM_ACCEL_KVM)
                m[n++] = (struct jail_mount){ JAIL_DEV_NODE, "/dev/kvm", "/dev/kvm", -1 }; /* its own node */
        /* only for mem-path=/proc/self/fd/3 (the sealed template RAM) */
        if (proc)
                m[n++] = (struct jail_mount){ JAIL_PROC, NULL, "/proc", -1 };
        *ret_n = n;
        return 0;
}

/* The JSON number key of reply, or -EBADMSG. */
static int reply_u64(json_t *o, const char *key, uint64_t *ret) {
        json_t *x = json_object_get(o, key);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
                return -EBADMSG;
        *ret = (uint64_t) json_integer_value(x);
        return 0;
}

/* vmm_spawn_jailed() through airlock-nodemgr: the node prepares what is its
 * own (the VM dir, the RAM file of a boot, the sealed template RAM, the
 * command line, QEMU's log), nodemgr checks it all, hands the VM's files
 * to its uid, makes the cgroup and starts the jail; we get a pidfd. */
static int spawn_remote(const struct vmm_config *c, struct vmm *v, bool incoming, const char *binary) {
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        struct vmm_argv a = { 0 };
        _cleanup_close_ int ram_fd = -1, log_fd = -1;
        _cleanup_free_ char *disk = NULL;
        int r;
        if (!q)
                return -ENOMEM;
        (void) rm_rf(v->vm_dir); /* of the VM before (another uid) */
        if (mkdir(v->vm_dir, 0700) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m", v->vm_dir);
        bool template_ram = !c->mem_shared && !c->mem_anonymous;
        if (c->mem_shared && !c->mem_anonymous) {
                _cleanup_close_ int mfd = open(c->mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (mfd < 0)
                        return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m",
                                         c->mem_path);
        }
        if (template_ram && (r = template_ram_fd(c->mem_path, v->log_ctx, &ram_fd)) < 0)
                return r;
        if (!(disk = realpath(c->rootfs, NULL)))
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot resolve %s: %m", c->rootfs);
        if ((r = vmm_build_argv(c, v, incoming, binary, template_ram ? "/proc/self/fd/3" : c->mem_path, template_ram ? 4 : 3, &a)) < 0)
                return r;
        vmm_log_cmdline(&a, v->log_ctx);
        log_fd = open(v->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        if (log_fd < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot open %s: %m", v->log_path);
                goto out;
        }
        if (a.n > MGR_ARGV_MAX) {
                r = log_errno(LOG_LEVEL_ERROR, -E2BIG, v->log_ctx, "QEMU command line too long: %m");
                goto out;
        }
        q->op = MGR_OP_VMM_SPAWN;
        q->template_ram = template_ram;
        q->kvm = c->accel == VMM_ACCEL_KVM;
        /* what the jail's cgroup allows (QEMU's -m and -smp are in argv) */
        q->memory_mib = c->cgroup_memory_mib ?: c->memory_mib;
        q->vcpus = c->cgroup_vcpus ?: c->vcpus;
        for (size_t i = 0; i < a.n; i++)
                q->argv[i] = a.v[i];
        struct {
                char *dst;
                const char *src;
        } paths[] = { { q->run_dir, c->run_dir }, { q->kernel, c->kernel },    { q->initrd, c->initrd },
                      { q->disk, disk },          { q->disk_target, c->rootfs },
                      { q->mem, c->mem_shared && !c->mem_anonymous ? c->mem_path : "" } };
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                if ((r = str_copy(paths[i].dst, MGR_PATH_MAX, paths[i].src)) < 0)
                        goto out;
        }
        for (size_t i = 0; i < VMM_VOLUMES_MAX; i++) {
                if (!c->volumes[i])
                        continue;
                _cleanup_free_ char *img = realpath(c->volumes[i], NULL);
                if (!img) {
                        r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot resolve %s: %m",
                                      c->volumes[i]);
                        goto out;
                }
                if ((r = str_copy(q->volumes[q->n_volumes], MGR_PATH_MAX, img)) < 0 ||
                    (r = str_copy(q->volume_targets[q->n_volumes], MGR_PATH_MAX, c->volumes[i])) < 0)
                        goto out;
                q->n_volumes++;
        }
        int fds[2] = { log_fd, ram_fd };
        for (int tries = 0; tries < 64; tries++) {
                if ((r = uid_next(&v->uid)) < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "no free VM uid: %m");
                        goto out;
                }
                q->uid = v->uid;
                _cleanup_free_ char *reply = NULL;
                int got[3]; /* its pidfd, the gateway's sockets */
                r = vmm_mgr_ask(q, fds, template_ram ? 2 : 1, &reply, got, ARRAY_SIZE(got), v->log_ctx);
                int pidfd = got[0];
                if (r == -EBUSY) { /* stays marked: in use elsewhere */
                        v->uid = 0;
                        continue;
                }
                if (r < 0) {
                        vmm_uid_mark(v->uid, false);
                        v->uid = 0;
                        goto out;
                }
                json_t *o = json_loads(reply, 0, NULL);
                uint64_t pid = 0, dev = 0, ino = 0;
                r = pidfd < 0 || got[1] < 0 || got[2] < 0 ? -EBADMSG : 0;
                if (r >= 0)
                        r = reply_u64(o, "pid", &pid);
                if (r >= 0)
                        r = reply_u64(o, "start_time", &v->start_time);
                if (r >= 0)
                        r = reply_u64(o, "exe_dev", &dev);
                if (r >= 0)
                        r = reply_u64(o, "exe_ino", &ino);
                json_decref(o);
                if (r < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "bad vmm.spawn reply from airlock-nodemgr: %m");
                        for (size_t i = 0; i < ARRAY_SIZE(got); i++)
                                safe_close(got[i]);
                        vmm_uid_release(v);
                        goto out;
                }
                v->pid = (pid_t) pid;
                v->pidfd = pidfd;
                v->gw_fds[0] = got[1];
                v->gw_fds[1] = got[2];
                v->exe_dev = (dev_t) dev;
                v->exe_ino = (ino_t) ino;
                goto out;
        }
        r = log_errno(LOG_LEVEL_ERROR, -EUSERS, v->log_ctx, "no VM uid with a free cgroup");
out:
        for (size_t i = 0; i < MGR_ARGV_MAX && q->argv[i]; i++)
                q->argv[i] = NULL; /* a's */
        vmm_argv_release(&a);
        return r;
}

/* Prepares the jail of c and starts QEMU in it. */
int vmm_spawn_jailed(const struct vmm_config *c, struct vmm *v, bool incoming) {
        char *procs[JAIL_CGROUPS_MAX] = { 0 };
        size_t n_procs = 0;
        struct jail_paths paths = { 0 };
        struct vmm_argv a = { 0 };
        _cleanup_close_ int ram_fd = -1, log_fd = -1, null_fd = -1;
        struct vmnet net = { -1, -1 };
        const char *binary = qemu_path;
        _cleanup_free_ char *own_binary = NULL;
        int r = 0;
        if (!binary) { /* vmm_jail_setup() not called (tests) */
                r = resolve_binary(c->qemu_binary ?: "qemu-system-x86_64", &own_binary);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot find the QEMU binary: %m");
                pthread_mutex_lock(&jail_lock);
                if (!qemu_path)
                        qemu_path = strdup(own_binary);
                pthread_mutex_unlock(&jail_lock);
                binary = own_binary;
        }
        if (mgr_socket)
                return spawn_remote(c, v, incoming, binary);

        r = uid_claim(c, &v->uid, procs, &n_procs);
        if (r < 0)
                return r;
        /* run_dir (root's): vmm.pid, qemu.log, the disk link, root/ (the
         * mount point of the private root); vm/: the VM's own */
        paths.root = vmm_path_join(c->run_dir, "root");
        if (!paths.root) {
                r = -ENOMEM;
                goto out;
        }
        /* a run dir is reused by a stop/start or rollback: files of the
         * VM before (another uid) go */
        (void) rm_rf(v->vm_dir);
        if ((mkdir(paths.root, 0700) < 0 && errno != EEXIST) || mkdir(v->vm_dir, 0700) < 0 ||
            chown(v->vm_dir, v->uid, v->uid) < 0 || chmod(v->vm_dir, 0700) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot prepare %s: %m", v->vm_dir);
                goto out;
        }
        if ((r = give_file(c->rootfs, v->uid, v->log_ctx)) < 0)
                goto out;
        for (size_t i = 0; i < VMM_VOLUMES_MAX; i++)
                if (c->volumes[i] && (r = give_file(c->volumes[i], v->uid, v->log_ctx)) < 0)
                        goto out;
        bool template_ram = !c->mem_shared && !c->mem_anonymous;
        if (c->mem_shared && !c->mem_anonymous) {
                _cleanup_close_ int mfd = open(c->mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (mfd < 0) {
                        r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m",
                                      c->mem_path);
                        goto out;
                }
                if ((r = give_file(c->mem_path, v->uid, v->log_ctx)) < 0)
                        goto out;
        }
        if (template_ram && (r = template_ram_fd(c->mem_path, v->log_ctx, &ram_fd)) < 0)
                goto out;

        struct jail_mount mounts[JAIL_MOUNTS_MAX];
        size_t n_mounts = 0;
        r = jail_mounts(c, v, binary, template_ram, &paths, mounts, &n_mounts);
        if (r < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot assemble the VM's root: %m");
                goto out;
        }
        char net_err[256];
        if ((r = vmnet_create(&net, net_err, sizeof net_err)) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot make the VM's network: %s", net_err);
                goto out;
        }
        r = vmm_build_argv(c, v, incoming, binary, template_ram ? "/proc/self/fd/3" : c->mem_path, template_ram ? 4 : 3,
                       &a);
        if (r < 0)
                goto out;
        vmm_log_cmdline(&a, v->log_ctx);

        log_fd = open(v->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (log_fd < 0 || null_fd < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot open %s: %m", v->log_path);
                goto out;
        }
        int keep[2], n_keep = 0;
        if (ram_fd >= 0)
                keep[n_keep++] = ram_fd;
        keep[n_keep++] = net.tap_fd;
        struct jail_spec spec = {
                .binary = binary,
                .argv = a.v,
                .uid = v->uid,
                .gid = v->uid,
                .root_dir = paths.root,
                .mounts = mounts,
                .n_mounts = n_mounts,
                .cgroup_procs = (const char *const *) procs,
                .n_cgroups = n_procs,
                .stdin_fd = null_fd,
                .stdout_fd = log_fd,
                .keep_fds = keep,
                .n_keep_fds = n_keep,
                .join_netns = true,
                .netns_fd = net.netns_fd,
                .nofile = VMM_NOFILE,
                .nproc = VMM_PIDS_MAX,
        };
        struct stat bst;
        if (stat(binary, &bst) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot stat %s: %m", binary);
                goto out;
        }
        v->exe_dev = bst.st_dev;
        v->exe_ino = bst.st_ino;
        /* the gateway's sockets before QEMU: nothing can fail after it runs */
        if ((r = vmnet_listen(net.netns_fd, &v->gw_fds[0], &v->gw_fds[1], net_err, sizeof net_err)) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot open the gateway's sockets: %s", net_err);
                goto out;
        }
        r = jail_spawn(&spec, &v->pid, &v->pidfd);
        if (r < 0)
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot start the jailed QEMU: %m");
out:
        vmnet_release(&net);
        vmm_argv_release(&a);
        jail_paths_release(&paths);
        jail_cgroup_procs_free(procs, n_procs);
        if (r < 0 && v->pid <= 0)
                vmm_uid_release(v);
        return r;
}

/* A root node's way into a VM's network namespace: the very process's,
 * still that process after the open (its pidfd). */
static int vm_netns(const struct vmm *v) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int) v->pid);
        _cleanup_close_ int ns = open(path, O_RDONLY | O_CLOEXEC);
        if (ns < 0 || vmm_process_exited(v))
                return log_errno(LOG_LEVEL_ERROR, ns < 0 ? negative_errno() : -ESRCH, v->log_ctx,
                                 "cannot open the VM's network namespace: %m");
        return TAKE_FD(ns);
}

int vmm_net_listen(const struct vmm *v, int *ret_tcp_fd, int *ret_dns_fd) {
        if (mgr_socket) {
                int got[2];
                int r = vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_NET_LISTEN, .pid = v->pid,
                                                       .start_time = v->start_time, .uid = v->uid },
                                NULL, 0, NULL, got, ARRAY_SIZE(got), v->log_ctx);
                if (r < 0)
                        return r;
                if (got[0] < 0 || got[1] < 0) {
                        safe_close(got[0]);
                        safe_close(got[1]);
                        return log_errno(LOG_LEVEL_ERROR, -EBADMSG, v->log_ctx,
                                         "airlock-nodemgr answered net.listen without the sockets: %m");
                }
                *ret_tcp_fd = got[0];
                *ret_dns_fd = got[1];
                return 0;
        }
        char err[256];
        _cleanup_close_ int ns = vm_netns(v);
        if (ns < 0)
                return ns;
        int r = vmnet_listen(ns, ret_tcp_fd, ret_dns_fd, err, sizeof err);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot open the gateway's sockets: %s", err);
        return 0;
}

int vmm_net_connect(const struct vmm *v, uint16_t port, int *ret_fd) {
        if (mgr_socket) {
                int got = -1;
                int r = vmm_mgr_ask(&(struct mgr_request){ .op = MGR_OP_NET_CONNECT, .pid = v->pid,
                                                       .start_time = v->start_time, .uid = v->uid, .port = port },
                                NULL, 0, NULL, &got, 1, v->log_ctx);
                if (r < 0)
                        return r;
                if (got < 0)
                        return log_errno(LOG_LEVEL_ERROR, -EBADMSG, v->log_ctx,
                                         "airlock-nodemgr answered net.connect without the socket: %m");
                *ret_fd = got;
                return 0;
        }
        char err[256];
        _cleanup_close_ int ns = vm_netns(v);
        if (ns < 0)
                return ns;
        int r = vmnet_connect(ns, port, ret_fd, err, sizeof err);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, v->log_ctx, "cannot connect to guest port %u: %s", (unsigned) port, err);
        return r;
}

/* ---- accelerator and host facts ---- */

const char *vmm_accel_name(enum vmm_accel a) {
        return a == VMM_ACCEL_KVM ? "kvm" : "tcg";
}

/* Whether KVM can run this node's VMs: what a jailed VMM can open, not
 * what we can. Under airlock-nodemgr the node cannot tell by itself (it
 * runs without groups or privileges): nodemgr probes it as root and passes
 * the answer on. Without nodemgr the node runs as root and probes the same
 * way (jail_kvm_usable()), for its first VM uid. */
static bool kvm_usable(char *reason, size_t n) {
        const char *probe = getenv(HOST_KVM_ENV);
        if (probe && (probe[0] == '0' || probe[0] == '1') && probe[1] == ' ') {
                snprintf(reason, n, "%s (probed by airlock-nodemgr)", probe + 2);
                return probe[0] == '1';
        }
        pthread_mutex_lock(&jail_lock);
        uid_t first = uid_base;
        pthread_mutex_unlock(&jail_lock);
        return jail_kvm_usable(first, reason, n);
}

int vmm_accel_pick(const char *want, enum vmm_accel *ret, char *reason, size_t n) {
        char buf[256];
        if (!reason || n == 0) {
                reason = buf;
                n = sizeof buf;
        }
        if (!want || strcmp(want, "auto") == 0) {
                bool kvm = kvm_usable(reason, n);
                *ret = kvm ? VMM_ACCEL_KVM : VMM_ACCEL_TCG;
                log_info("accelerator %s (auto): %s", vmm_accel_name(*ret), reason);
                return 0;
        }
        if (strcmp(want, "kvm") == 0) {
                if (!kvm_usable(reason, n)) {
                        log_error("accelerator kvm requested but unusable: %s", reason);
                        return -ENODEV;
                }
                *ret = VMM_ACCEL_KVM;
                log_info("accelerator kvm (requested): %s", reason);
                return 0;
        }
        if (strcmp(want, "tcg") == 0) {
                snprintf(reason, n, "tcg requested");
                *ret = VMM_ACCEL_TCG;
                log_info("accelerator tcg (requested)");
                return 0;
        }
        snprintf(reason, n, "unknown accelerator \"%s\" (auto, kvm or tcg)", want);
        return -EINVAL;
}
