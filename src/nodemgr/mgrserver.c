/* SPDX-License-Identifier: Apache-2.0 */
#include "mgrserver.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "jail.h"
#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "proto.h"
#include "util.h"

#define VM_UID_BASE_DEFAULT 2000000u
#define VM_UIDS 65536u            /* NODE_VMM_UIDS */
#define REQUEST_TIMEOUT_MS 5000   /* a client that does not send its request in time is dropped */

struct mgr_server {
        int fd;
        char path[108];
        uid_t node_uid;
        gid_t node_gid;
        struct mgr_policy policy;
        char *roots[MGR_ROOTS_MAX];
        char *qemu;
};

int mgr_server_fd(const struct mgr_server *s) {
        return s ? s->fd : -1;
}

void mgr_server_free(struct mgr_server *s) {
        if (!s)
                return;
        if (s->fd >= 0) {
                close(s->fd);
                (void) unlink(s->path);
        }
        for (size_t i = 0; i < MGR_ROOTS_MAX; i++)
                free(s->roots[i]);
        free(s->qemu);
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
        /* the node's own files: its storage (the loop volume is another
         * file system, hence a root of its own) and a shared templates dir */
        _cleanup_free_ char *vol = strdup_printf("%s/vol", c->data_dir);
        const char *tpl = getenv("AIRLOCK_TEMPLATES_DIR");
        int r;
        if (!vol || (r = add_root(s, vol)) < 0 || (r = add_root(s, c->data_dir)) < 0)
                return -ENOMEM;
        if (tpl && *tpl) {
                char real[PATH_MAX];
                if (!realpath(tpl, real))
                        log_warn_errno(negative_errno(), "AIRLOCK_TEMPLATES_DIR %s: %m (not served)", tpl);
                else if ((r = add_root(s, real)) < 0)
                        return r;
        }
        s->qemu = resolve_qemu();
        if (!s->qemu)
                log_warn("no QEMU binary found (AIRLOCK_QEMU): vmm requests will be refused");

        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (snprintf(s->path, sizeof s->path, "%s/run/%s", c->data_dir, MGR_SOCKET_NAME) >= (int) sizeof s->path)
                return log_error_errno(-ENAMETOOLONG, "%s/run/%s is too long for a socket path", c->data_dir,
                                       MGR_SOCKET_NAME);
        memcpy(sa.sun_path, s->path, sizeof s->path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        (void) unlink(s->path);
        /* the mode is there from bind() on: nobody connects in between */
        mode_t old = umask(0177);
        r = bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 ? negative_errno() : 0;
        umask(old);
        if (r == 0 && (chown(s->path, 0, node_gid) < 0 || chmod(s->path, 0660) < 0 || listen(fd, 64) < 0))
                r = negative_errno();
        if (r < 0) {
                close(fd);
                return log_error_errno(r, "Failed to listen on %s: %m", s->path);
        }
        s->fd = fd;
        log_info("serving the node's requests on %s (uid %u only); VM uids %u..%u; qemu %s", s->path,
                 (unsigned) node_uid, (unsigned) s->policy.vm_uid_base,
                 (unsigned) (s->policy.vm_uid_base + VM_UIDS - 1), s->qemu ?: "(none)");
        *ret = TAKE_PTR(s);
        return 0;
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
 * not a VM. */
static int vm_process(const struct mgr_server *s, pid_t pid, uint64_t start_time, uid_t uid) {
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
        int fd = vm_process(s, q->pid, q->start_time, q->uid);
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

static int do_cgroup_remove(const struct mgr_request *q, char *msg, size_t n) {
        int r = jail_cgroup_remove(q->uid);
        if (r < 0)
                snprintf(msg, n, "cannot remove the cgroup of uid %u", (unsigned) q->uid);
        return r;
}

static int do_file_give(const struct mgr_server *s, const struct mgr_request *q, char *msg, size_t n) {
        const char *root = s->policy.roots[q->root];
        _cleanup_close_ int root_fd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root_fd < 0) {
                snprintf(msg, n, "cannot open %.512s", root);
                return negative_errno();
        }
        _cleanup_close_ int fd = mgr_open_beneath(root_fd, root, q->path, 0);
        if (fd < 0) {
                snprintf(msg, n, "cannot open %.512s without following a link", q->path);
                return fd;
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        bool dir = S_ISDIR(st.st_mode);
        /* only what the node or a VM owns: never a file of root or of anyone
         * else that was linked in; files only 0600/0660, dirs 0700/2770 */
        if ((!S_ISREG(st.st_mode) && !dir) || (dir != (q->mode == 0700 || q->mode == 02770)) ||
            (st.st_uid != s->node_uid && !mgr_policy_vm_uid(&s->policy, st.st_uid)) ||
            (S_ISREG(st.st_mode) && st.st_nlink != 1)) {
                snprintf(msg, n, "%.512s is not a VM file of the node", q->path);
                return -EPERM;
        }
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (fchownat(fd, "", q->uid, s->node_gid, AT_EMPTY_PATH) < 0 || chmod(proc, q->mode) < 0) {
                snprintf(msg, n, "cannot hand %.512s to uid %u", q->path, (unsigned) q->uid);
                return negative_errno();
        }
        return 0;
}

static void reply(int fd, int r, const char *msg, json_t *extra) {
        json_t *o = r < 0 ? json_pack("{s{siss}}", "error", "errno", -r, "message", msg)
                          : json_pack("{sb}", "ok", 1);
        if (o && extra && r >= 0)
                json_object_update(o, extra);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
                (void) mgr_send(fd, PROTO_MGR_REPLY, s, strlen(s), NULL, 0);
        free(s);
        json_decref(o);
}

void mgr_server_serve_one(struct mgr_server *s) {
        _cleanup_close_ int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return;
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return;
        if (cred.uid != s->node_uid) {
                /* closed unanswered: nothing of ours reaches anyone else */
                log_warn("refusing a request from pid %d uid %u on %s: only uid %u may ask", (int) cred.pid,
                         (unsigned) cred.uid, s->path, (unsigned) s->node_uid);
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
        /* no op takes fds yet */
        for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
        struct mgr_request q;
        char msg[1024] = "";
        r = n_fds ? -EINVAL : mgr_request_parse(req, n, &s->policy, &q, msg, sizeof msg);
        if (r < 0) {
                if (n_fds)
                        snprintf(msg, sizeof msg, "unexpected fds");
                log_warn("refusing a request from pid %d: %s", (int) cred.pid, msg);
                reply(fd, r, msg, NULL);
                return;
        }
        json_t *extra = NULL;
        switch (q.op) {
        case MGR_OP_PING:
                extra = json_pack("{si}", "uid", (json_int_t) cred.uid);
                r = 0;
                break;
        case MGR_OP_VMM_VERIFY:
        case MGR_OP_VMM_SIGNAL:
                r = do_vmm(s, &q, msg, sizeof msg);
                break;
        case MGR_OP_CGROUP_REMOVE:
                r = do_cgroup_remove(&q, msg, sizeof msg);
                break;
        case MGR_OP_FILE_GIVE:
                r = do_file_give(s, &q, msg, sizeof msg);
                break;
        default:
                r = -EINVAL;
                snprintf(msg, sizeof msg, "unknown op");
        }
        if (r < 0)
                log_warn_errno(r, "refused %s from pid %d: %s: %m", mgr_op_name(q.op), (int) cred.pid, msg);
        else
                log_debug("served %s for pid %d", mgr_op_name(q.op), (int) cred.pid);
        reply(fd, r, msg, extra);
        json_decref(extra);
}
