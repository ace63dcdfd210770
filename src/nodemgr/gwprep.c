/* SPDX-License-Identifier: Apache-2.0 */
#include "gwprep.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock-config.h"
#include "log.h"
#include "macros.h"
#include "nodeprep.h"
#include "privsep.h"
#include "util.h"

/* The egress CA's directory (AIRLOCK_EGRESS_CA_DIR, default
 * DATA_DIR/egress-ca): the gateway's, which makes its key there on the
 * first start; readable by all for the certificate the node puts into
 * templates. Both learn the path from the environment, and so do the
 * template recipes (AIRLOCK_EGRESS_CA_CERT). */
static int ca_dir_prepare(const struct daemon_config *c, uid_t uid, gid_t gid) {
        const char *env = getenv("AIRLOCK_EGRESS_CA_DIR");
        _cleanup_free_ char *dir = env && *env ? strdup(env) : strdup_printf("%s/egress-ca", c->data_dir);
        if (!dir)
                return -ENOMEM;
        if (dir[0] != '/')
                return log_error_errno(-EINVAL, "AIRLOCK_EGRESS_CA_DIR=%s is not an absolute path", dir);
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Cannot create the egress CA directory %s: %m", dir);
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, 0755) < 0)
                return log_error_errno(negative_errno(), "Cannot give the egress CA directory %s to the gateway: %m", dir);
        /* a key left by an earlier install with another gateway uid */
        _cleanup_close_ int key = openat(fd, "ca.key", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (key >= 0 && (fchown(key, uid, gid) < 0 || fchmod(key, 0600) < 0))
                return log_error_errno(negative_errno(), "Cannot give %s/ca.key to the gateway: %m", dir);
        _cleanup_free_ char *cert = strdup_printf("%s/ca.crt", dir);
        if (!cert || setenv("AIRLOCK_EGRESS_CA_DIR", dir, 1) < 0 || setenv("AIRLOCK_EGRESS_CA_CERT", cert, 1) < 0)
                return -ENOMEM;
        return 0;
}

/* DATA_DIR/gw-state: the gateway's journals of its sandboxes' bindings and
 * network logs (src/gw/state.c), its alone (0700), kept across its restarts. */
static int state_dir_prepare(const struct daemon_config *c, uid_t uid, gid_t gid) {
        _cleanup_free_ char *dir = strdup_printf("%s/gw-state", c->data_dir);
        if (!dir)
                return -ENOMEM;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return log_error_errno(negative_errno(), "Cannot create the gateway's state directory %s: %m", dir);
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0)
                return log_error_errno(negative_errno(), "Cannot give the gateway's state directory %s to it: %m", dir);
        return setenv("AIRLOCK_GW_STATE_DIR", dir, 1) < 0 ? -ENOMEM : 0;
}

int gwprep_setup(const struct daemon_config *c, uid_t node_uid, gid_t node_gid, struct gwprep *ret) {
        struct gwprep g = { .node_uid = node_uid, .listen_fd = -1, .netns_fd = -1, .pid = -1 };
        const char *name;
        int r = privsep_user("AIRLOCK_GW_USER", GWPREP_USER_DEFAULT, &g.uid, &g.gid, &name);
        if (r < 0)
                return log_error_errno(r, "Cannot find or create the system user %s: %m",
                                       getenv("AIRLOCK_GW_USER") ?: GWPREP_USER_DEFAULT);
        if (g.uid == node_uid)
                return log_error_errno(-EINVAL, "the gateway's user %s must not be the node's", name);
        const char *bin = getenv("AIRLOCK_GW_BINARY");
        snprintf(g.binary, sizeof g.binary, "%s", bin && *bin ? bin : AIRLOCK_GW_PATH);
        if (access(g.binary, X_OK) < 0)
                return log_error_errno(negative_errno(), "The gateway binary %s is not executable: %m", g.binary);
        const char *ns = getenv("AIRLOCK_EGRESS_NETNS");
        if (ns && *ns) {
                if (strchr(ns, '/') || strcmp(ns, ".") == 0 || strcmp(ns, "..") == 0)
                        return log_error_errno(-EINVAL, "AIRLOCK_EGRESS_NETNS=%s is not a namespace name", ns);
                _cleanup_free_ char *p = strdup_printf("/run/netns/%s", ns);
                g.netns_fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
                if (g.netns_fd < 0)
                        return log_error_errno(negative_errno(), "Cannot open the egress namespace %s: %m",
                                               p ? p : ns);
        }
        if ((r = ca_dir_prepare(c, g.uid, g.gid)) < 0 || (r = state_dir_prepare(c, g.uid, g.gid)) < 0)
                return r;
        char run_dir[sizeof c->node_socket];
        memcpy(run_dir, c->node_socket, sizeof run_dir);
        int n = snprintf(g.socket_path, sizeof g.socket_path, "%s/%s", dirname(run_dir), GWPREP_SOCKET_NAME);
        if (n < 0 || (size_t) n >= sizeof g.socket_path)
                return log_error_errno(-ENAMETOOLONG, "The gateway's socket path is too long");
        if ((r = nodeprep_listen_at(g.socket_path, node_gid, &g.listen_fd)) < 0 ||
            (r = setenv("AIRLOCK_GW_SOCKET", g.socket_path, 1) < 0 ? -ENOMEM : 0) < 0) {
                gwprep_stop(&g);
                return r;
        }
        *ret = g;
        return 0;
}

int gwprep_start(struct gwprep *g) {
        uint64_t now = now_monotonic_ns();
        if (g->n_started == ARRAY_SIZE(g->started_ns) && now - g->started_ns[0] < 60ull * 1000000000ull)
                return -EAGAIN;
        if (g->n_started == ARRAY_SIZE(g->started_ns)) {
                memmove(g->started_ns, g->started_ns + 1, sizeof g->started_ns - sizeof g->started_ns[0]);
                g->n_started--;
        }
        g->started_ns[g->n_started++] = now;
        char peer[32];
        snprintf(peer, sizeof peer, "%u", (unsigned) g->node_uid);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return log_error_errno(negative_errno(), "Failed to fork airlock-gw: %m");
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (g->netns_fd >= 0 && setns(g->netns_fd, CLONE_NEWNET) < 0)
                        _exit(125);
                /* the operator's extra CAs for upstream TLS, opened here: the
                 * gateway's user need not reach the file */
                const char *ca = getenv("AIRLOCK_UPSTREAM_CA");
                int ca_fd = ca && *ca ? open(ca, O_RDONLY | O_CLOEXEC) : -1;
                if (ca && *ca && ca_fd < 0) {
                        dprintf(STDERR_FILENO, "level=error prog=airlock-nodemgr msg=\"cannot open AIRLOCK_UPSTREAM_CA=%s: %s\"\n",
                                ca, strerror(errno));
                        _exit(125);
                }
                if (dup2(g->listen_fd, 3) < 0 || (ca_fd >= 0 && dup2(ca_fd, 4) < 0))
                        _exit(125);
                (void) close_range(ca_fd >= 0 ? 5 : 4, ~0u, 0);
                if (setenv("AIRLOCK_GW_LISTEN_FD", "3", 1) < 0 || setenv("AIRLOCK_GW_PEER_UID", peer, 1) < 0 ||
                    (ca_fd >= 0 && setenv("AIRLOCK_UPSTREAM_CA_FD", "4", 1) < 0))
                        _exit(125);
                if (privsep_drop(g->uid, g->gid) < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
                        _exit(126);
                execl(g->binary, g->binary, (char *) NULL);
                /* no log_*() after fork; one write says why */
                int e = errno;
                dprintf(STDERR_FILENO, "level=error prog=airlock-nodemgr msg=\"cannot run %s as the gateway user: %s%s\"\n",
                        g->binary, strerror(e),
                        e == EACCES ? " (the binary and every directory above it must be reachable by other users)" : "");
                _exit(127);
        }
        g->pid = pid;
        log_info("started airlock-gw pid=%d as uid %u", (int) pid, (unsigned) g->uid);
        return 0;
}

void gwprep_give_up(struct gwprep *g) {
        /* the node's calls are refused at once instead of waiting in a
         * backlog nobody accepts */
        g->listen_fd = safe_close(g->listen_fd);
        if (g->socket_path[0])
                (void) unlink(g->socket_path);
}

void gwprep_stop(struct gwprep *g) {
        if (g->pid > 0) {
                (void) kill(g->pid, SIGTERM);
                int status;
                for (int i = 0; i < 500 && waitpid(g->pid, &status, WNOHANG) == 0; i++)
                        usleep(10000);
                if (waitpid(g->pid, &status, WNOHANG) == 0) {
                        (void) kill(g->pid, SIGKILL);
                        (void) waitpid(g->pid, &status, 0);
                }
                g->pid = -1;
        }
        g->listen_fd = safe_close(g->listen_fd);
        g->netns_fd = safe_close(g->netns_fd);
        if (g->socket_path[0])
                (void) unlink(g->socket_path);
}
