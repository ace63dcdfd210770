/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeprep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "jail.h"
#include "macros.h"
#include "mgrserver.h"
#include "privsep.h"
#include "spawn.h"
#include "unixsock.h"
#include "util.h"

#define VM_UID_BASE_DEFAULT JAIL_VM_UID_BASE_DEFAULT
#define VM_UIDS 65536u
#define HAND_OVER_DEPTH 16

struct hand_over {
        uid_t uid;
        gid_t gid;
        uid_t vm_base;
        dev_t dev;
        unsigned changed;
};

/* Hands the tree at dirfd/name (not following symlinks, not leaving the
 * file system) over: root's directories and single-link files become the
 * node's; VM files get the node's group with the owner's rights (so the
 * node reaches the files an earlier root node's VMs left). */
static int hand_over_at(struct hand_over *h, int dirfd, const char *name, unsigned depth) {
        if (depth > HAND_OVER_DEPTH)
                return -ELOOP;
        /* what we check is what we change: an O_PATH fd of the inode, not
         * the name again (the node may swap names under us) */
        _cleanup_close_ int pfd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (pfd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        struct stat st;
        if (fstat(pfd, &st) < 0)
                return negative_errno();
        if (st.st_dev != h->dev || S_ISLNK(st.st_mode))
                return 0;
        bool dir = S_ISDIR(st.st_mode);
        bool plain = dir || (S_ISREG(st.st_mode) && st.st_nlink == 1) || S_ISSOCK(st.st_mode);
        bool vm = st.st_uid >= h->vm_base && st.st_uid - h->vm_base < VM_UIDS;
        if (plain && st.st_uid == 0) {
                if (fchownat(pfd, "", h->uid, h->gid, AT_EMPTY_PATH) < 0)
                        return negative_errno();
                h->changed++;
        } else if (plain && vm && st.st_gid != h->gid && !S_ISSOCK(st.st_mode)) {
                char proc[64];
                snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
                mode_t mode = (st.st_mode & 07700) | ((st.st_mode & 0700) >> 3);
                if (fchownat(pfd, "", (uid_t) -1, h->gid, AT_EMPTY_PATH) < 0 || chmod(proc, mode) < 0)
                        return negative_errno();
                h->changed++;
        }
        if (!dir)
                return 0;
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
        _cleanup_close_ int fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        int dfd = dup(fd);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return negative_errno();
        }
        int r = 0;
        for (struct dirent *e; r >= 0 && (e = readdir(d));) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                /* a template build's working tree (a whole Debian root,
                 * deeper than HAND_OVER_DEPTH), maybe still being built by
                 * another node sharing the directory: its builder owns it,
                 * and its recipe removes it when it ends */
                if (depth == 0 && strncmp(e->d_name, ".tmp-", 5) == 0)
                        continue;
                r = hand_over_at(h, fd, e->d_name, depth + 1);
        }
        closedir(d);
        return r;
}

/* mkdir (mode, if missing) and hand the tree over. */
static int hand_over(struct hand_over *h, const char *path, mode_t mode) {
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Failed to create %s: %m", path);
        struct stat st;
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return log_error_errno(-ENOTDIR, "%s is not a directory", path);
        h->dev = st.st_dev;
        h->changed = 0;
        int r = hand_over_at(h, AT_FDCWD, path, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to hand %s to uid %u: %m", path, (unsigned) h->uid);
        if (h->changed)
                log_info("handed %u entries of %s to the node user (uid %u)", h->changed, path, (unsigned) h->uid);
        return 0;
}

int nodeprep_storage(const struct daemon_config *c, uid_t uid, gid_t gid, struct storage **ret) {
        const char *mode = getenv("AIRLOCK_STORAGE");
        const char *gib_s = getenv("AIRLOCK_VOLUME_GIB");
        uint64_t gib = 64;
        if (gib_s && *gib_s && parse_u64(gib_s, 1 << 20, &gib) < 0)
                return log_error_errno(-EINVAL, "AIRLOCK_VOLUME_GIB=%s is not a size in GiB", gib_s);
        struct hand_over h = { .uid = uid, .gid = gid, .vm_base = VM_UID_BASE_DEFAULT };
        const char *base = getenv("AIRLOCK_VMM_UID_BASE");
        uint64_t v;
        if (base && *base && parse_u64(base, UINT32_MAX - VM_UIDS - 1, &v) >= 0)
                h.vm_base = (uid_t) v;

        _cleanup_(storage_closep) struct storage *st = NULL;
        int r = storage_open(c->data_dir, (unsigned) gib, !mode || strcmp(mode, "copy") != 0, &st);
        if (r < 0)
                return log_error_errno(r, "Failed to open storage in %s: %m", c->data_dir);
        if (setenv("AIRLOCK_STORAGE_ROOT", st->root, 1) < 0 ||
            setenv("AIRLOCK_STORAGE_REFLINK", st->reflink ? "1" : "0", 1) < 0)
                return -ENOMEM;

        /* the volume's root is the node's; DATA_DIR itself stays root's */
        if (strcmp(st->root, c->data_dir) != 0 && (r = hand_over(&h, st->root, 0755)) < 0)
                return r;
        static const char *const dirs[] = { "templates", "sandboxes", "pool", "objstore", "bases" };
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                _cleanup_free_ char *p = strdup_printf("%s/%s", st->root, dirs[i]);
                if (!p)
                        return -ENOMEM;
                if ((r = hand_over(&h, p, 0755)) < 0)
                        return r;
        }
        /* the volume store: tenants' data, the node's alone */
        _cleanup_free_ char *vols = strdup_printf("%s/volumes", st->root);
        if (!vols)
                return -ENOMEM;
        if ((r = hand_over(&h, vols, 0700)) < 0)
                return r;
        _cleanup_free_ char *run = strdup_printf("%s/run", c->data_dir);
        _cleanup_free_ char *vm = strdup_printf("%s/run/vm", c->data_dir);
        _cleanup_free_ char *lock = strdup_printf("%s/node.lock", c->data_dir);
        if (!run || !vm || !lock)
                return -ENOMEM;
        if ((r = mkdir_p(run, 0711)) < 0 || (r = hand_over(&h, vm, 0700)) < 0)
                return r;
        _cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lfd < 0 || fchown(lfd, uid, gid) < 0)
                return log_error_errno(negative_errno(), "Failed to hand %s to the node: %m", lock);
        static const char *const envs[] = { "AIRLOCK_TEMPLATES_DIR", "AIRLOCK_OBJSTORE_DIR" };
        for (size_t i = 0; i < ARRAY_SIZE(envs); i++) {
                const char *d = getenv(envs[i]);
                if (d && *d && (r = mkdir_p(d, 0755)) >= 0 && (r = hand_over(&h, d, 0755)) < 0)
                        return r;
        }
        *ret = TAKE_PTR(st);
        return 0;
}

int nodeprep_listen_at(const char *path, gid_t group, int *ret_fd) {
        _cleanup_close_ int fd = -1;
        /* 0600 root's until its group is the node's: nobody else connects
         * in between */
        int r = unix_listen(path, 0600, SOCK_NONBLOCK, 128, &fd);
        if (r == -ENAMETOOLONG)
                return log_error_errno(r, "Socket path %s is too long", path);
        if (r == 0 && (chown(path, 0, group) < 0 || chmod(path, 0660) < 0))
                r = negative_errno();
        if (r < 0)
                return log_error_errno(r, "Failed to listen on %s: %m", path);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int nodeprep_listen(const struct daemon_config *c, gid_t group, int *ret_fd) {
        return nodeprep_listen_at(c->node_socket, group, ret_fd);
}

int nodeprep_cluster(const struct daemon_config *c, uid_t uid, gid_t gid) {
        struct hand_over h = { .uid = uid, .gid = gid, .vm_base = VM_UID_BASE_DEFAULT };
        _cleanup_free_ char *dir = strdup_printf("%s/cluster", c->data_dir);
        if (!dir)
                return -ENOMEM;
        int r = hand_over(&h, dir, 0700);
        if (r < 0)
                return r;
        /* the node keeps its key here: its alone, also when an earlier
         * node running as root made the directory */
        if (chmod(dir, 0700) < 0)
                return log_error_errno(negative_errno(), "Failed to chmod %s: %m", dir);
        /* the capability keys the node writes (membership.c): by default
         * DATA_DIR/cluster/keys, handed over above */
        size_t n = strlen(dir);
        if (strncmp(c->cap_keys_dir, dir, n) == 0 && (c->cap_keys_dir[n] == '/' || !c->cap_keys_dir[n]))
                return 0;
        if ((r = mkdir_p(c->cap_keys_dir, 0755)) < 0)
                return log_error_errno(r, "Failed to create %s: %m", c->cap_keys_dir);
        return hand_over(&h, c->cap_keys_dir, 0755);
}

int nodeprep_spawn(const struct daemon_config *c, uid_t uid, gid_t gid, int listen_fd, char *const *args,
                   const char *env, pid_t *ret_pid, int *ret_ready_fd) {
        if (access(c->node_binary, X_OK) < 0)
                return log_error_errno(negative_errno(), "Node binary %s is not executable: %m", c->node_binary);
        if (setenv("AIRLOCK_NODE_LISTEN_FD", "3", 1) < 0 || setenv("AIRLOCK_NODE_READY_FD", "4", 1) < 0)
                return -ENOMEM;
        /* the argv and the environment, built before the fork (no
         * allocation after it): the fixed arguments, then args; our
         * environment, and env for this child only */
        size_t n_args = 0, n_env = 0;
        while (args && args[n_args])
                n_args++;
        while (environ[n_env])
                n_env++;
        _cleanup_free_ char **argv = calloc(8 + n_args, sizeof *argv);
        _cleanup_free_ char **envp = calloc(n_env + 2, sizeof *envp);
        if (!argv || !envp)
                return -ENOMEM;
        size_t k = 0;
        argv[k++] = (char *) c->node_binary;
        argv[k++] = (char *) "--data-dir";
        argv[k++] = (char *) c->data_dir;
        argv[k++] = (char *) "--socket";
        argv[k++] = (char *) c->node_socket;
        argv[k++] = (char *) "--cap-keys-dir";
        argv[k++] = (char *) c->cap_keys_dir;
        for (size_t i = 0; i < n_args; i++)
                argv[k++] = args[i];
        memcpy(envp, environ, n_env * sizeof *envp);
        envp[n_env] = (char *) env;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                close(p[0]);
                close(p[1]);
                return log_error_errno(r, "Failed to fork the node agent: %m");
        }
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGPIPE, SIG_DFL);
                /* fds 3 and 4 (dup2 clears close-on-exec); the rest is
                 * close-on-exec already */
                int l = fcntl(listen_fd, F_DUPFD_CLOEXEC, 10), w = fcntl(p[1], F_DUPFD_CLOEXEC, 10);
                if (l < 0 || w < 0 || dup2(l, 3) < 0 || dup2(w, 4) < 0)
                        _exit(126);
                if (privsep_drop(uid, gid) < 0)
                        _exit(126);
                /* after the drop: changing credentials clears it. Our death
                 * hands the VMs over to the next start. */
                if (prctl(PR_SET_PDEATHSIG, SIGUSR1) < 0 || getppid() != parent)
                        _exit(127);
                execve(c->node_binary, argv, envp);
                /* no log_*() after fork: its lock may be held by a thread
                 * that does not exist here; one write says why */
                int e = errno;
                dprintf(STDERR_FILENO, "level=error prog=airlock-nodemgr msg=\"cannot run %s as the node user: %s%s\"\n",
                        c->node_binary, strerror(e),
                        e == EACCES ? " (the binary and every directory above it must be reachable by other users; "
                                      "a checkout under /root, mode 0700, is not)"
                                    : "");
                _exit(127);
        }
        close(p[1]);
        log_info("started airlock-node pid=%d as uid %u binary=%s", (int) pid, (unsigned) uid, c->node_binary);
        *ret_pid = pid;
        *ret_ready_fd = p[0];
        return 0;
}

int nodeprep_start(const struct daemon_config *c, uid_t uid, gid_t gid, int listen_fd, char *const *args,
                   const char *env, struct mgr_server *mgr, pid_t *ret_pid) {
        pid_t pid;
        int ready_fd;
        *ret_pid = -1;
        int r = nodeprep_spawn(c, uid, gid, listen_fd, args, env, &pid, &ready_fd);
        if (r < 0)
                return r;
        _cleanup_close_ int ready = ready_fd;
        *ret_pid = pid;
        uint64_t deadline = now_monotonic_ns() + (uint64_t) c->node_start_timeout_s * 1000000000ULL;
        for (;;) {
                struct pollfd p[2] = { { .fd = ready, .events = POLLIN }, { .fd = mgr_server_fd(mgr), .events = POLLIN } };
                if (poll(p, 2, 50) > 0) {
                        if (p[1].revents & POLLIN)
                                mgr_server_serve_one(mgr);
                        char b;
                        if ((p[0].revents & POLLIN) && read(ready, &b, 1) == 1)
                                return 0;
                }
                if (spawn_exited_early(pid) < 0)
                        return -ECHILD;
                if (now_monotonic_ns() >= deadline)
                        return -ETIMEDOUT;
        }
}
