/* SPDX-License-Identifier: Apache-2.0 */
#include "worker.h"

#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock-config.h"
#include "cluster.h"
#include "config.h"
#include "host.h"
#include "log.h"
#include "macros.h"
#include "mgrserver.h"
#include "nodeprep.h"
#include "privsep.h"
#include "spawn.h"
#include "startup.h"
#include "util.h"

#define TOKEN_ENV "AIRLOCK_JOIN_TOKEN"
#define NODE_START_TIMEOUT_S 60 /* as airlockd waits for its node */
#define JOIN_RETRY_MIN_S 2
#define JOIN_RETRY_MAX_S 60

/* The node we run: its user, the listening socket every start of it gets,
 * its storage and the gateway. We speak for airlock-node, which execed us:
 * "airlock-node: error: WHAT" (the log lines before it say more). */
static struct startup node = STARTUP_INIT("airlock-node", false, "the node");

/* The node's arguments, and where its join token comes from. */
static struct {
        char *const *args;      /* airlock-node's own, passed on as they are */
        const char *token_file; /* AIRLOCK_JOIN_TOKEN_FILE */
        char *token;            /* AIRLOCK_JOIN_TOKEN as the operator gave it to airlock-node */
        char *crt;              /* DATA_DIR/cluster/node.crt: there once it joined */
} join;

static int set_path(char *dst, size_t n, const char *fmt, ...) _printf_(3, 4);
static int set_path(char *dst, size_t n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(dst, n, fmt, ap);
        va_end(ap);
        return k < 0 || (size_t) k >= n ? -ENAMETOOLONG : 0;
}

/* What airlock-node handed over in the environment (node_config_export),
 * in the shape the rest of airlock-nodemgr takes. */
static int worker_config(struct daemon_config *ret) {
        struct daemon_config c = {
                .action = CONFIG_RUN,
                .spawn_node = true,
                .log_level = LOG_LEVEL_INFO,
                .node_start_timeout_s = NODE_START_TIMEOUT_S,
        };
        const char *dir = getenv("AIRLOCK_DATA_DIR"), *bin = getenv("AIRLOCK_NODE_BINARY");
        const char *sock = getenv("AIRLOCK_SOCKET"), *keys = getenv("AIRLOCK_CAP_KEYS_DIR");
        const char *level = getenv("AIRLOCK_LOG_LEVEL");
        if (!dir || dir[0] != '/' || !bin || bin[0] != '/')
                return log_error_errno(-EINVAL, "AIRLOCK_DATA_DIR and AIRLOCK_NODE_BINARY must be absolute paths "
                                                "(airlock-node started as root with --join sets them)");
        if (level && *level && log_level_from_string(level, &c.log_level) < 0)
                return log_error_errno(-EINVAL, "AIRLOCK_LOG_LEVEL=%s is not a log level", level);
        if (set_path(c.data_dir, sizeof c.data_dir, "%s", dir) < 0 ||
            set_path(c.node_binary, sizeof c.node_binary, "%s", bin) < 0)
                return log_error_errno(-ENAMETOOLONG, "The data dir or the node binary's path is too long");
        size_t n = strlen(c.data_dir);
        while (n > 1 && c.data_dir[n - 1] == '/')
                c.data_dir[--n] = 0;
        int r = sock && *sock ? set_path(c.node_socket, sizeof c.node_socket, "%s", sock)
                              : set_path(c.node_socket, sizeof c.node_socket, "%s/run/node.sock", c.data_dir);
        if (r < 0 || c.node_socket[0] != '/')
                return log_error_errno(-EINVAL, "The node's socket %s/run/node.sock is not an absolute path short "
                                                "enough for a Unix socket (--socket)",
                                       sock && *sock ? sock : c.data_dir);
        r = keys && *keys ? set_path(c.cap_keys_dir, sizeof c.cap_keys_dir, "%s", keys)
                          : set_path(c.cap_keys_dir, sizeof c.cap_keys_dir, "%s/cluster/keys", c.data_dir);
        if (r < 0)
                return log_error_errno(r, "The capability keys' directory's path is too long");
        *ret = c;
        return 0;
}

/* The operator's AIRLOCK_JOIN_TOKEN out of our environment: the gateway
 * and whatever else we start must not inherit it. Wiped where
 * /proc/PID/environ shows it. */
static int take_env_token(void) {
        char *env = getenv(TOKEN_ENV);
        if (!env)
                return 0;
        if (*env && !(join.token = strdup(env)))
                return -ENOMEM;
        explicit_bzero(env, strlen(env));
        return unsetenv(TOKEN_ENV) < 0 ? -ENOMEM : 0;
}

static void token_free(char *s) {
        if (s) {
                explicit_bzero(s, strlen(s));
                free(s);
        }
}

/* "AIRLOCK_JOIN_TOKEN=TOKEN" for one start of the node (free with
 * token_free): from the token file, read again at each start (a file
 * removed after the join is no error), else the operator's environment.
 * -ENOKEY when there is none, -EBADMSG when it is not a token. */
static int token_env(char **ret) {
        char *text = NULL;
        const char *tok = join.token;
        *ret = NULL;
        if (join.token_file) {
                int r = file_read_all(join.token_file, CLUSTER_TOKEN_MAX + 64, &text, NULL);
                if (r < 0)
                        return r;
                tok = text;
        }
        if (!tok)
                return -ENOKEY;
        struct cluster_token t;
        int r = cluster_token_parse(tok, &t);
        token_free(text);
        if (r < 0)
                return -EBADMSG;
        char canon[CLUSTER_TOKEN_MAX];
        cluster_token_format(&t, canon, sizeof canon);
        explicit_bzero(&t, sizeof t);
        *ret = strdup_printf(TOKEN_ENV "=%s", canon);
        explicit_bzero(canon, sizeof canon);
        return *ret ? 0 : -ENOMEM;
}

static bool joined(void) {
        return access(join.crt, F_OK) == 0;
}

/* spawn_start_fn: the node as its user, with its arguments and the token;
 * waits until it says it is ready. */
static int start_node(const struct daemon_config *c, void *userdata, pid_t *ret_pid) {
        char *env = NULL;
        int r = token_env(&env);
        if (r < 0 && !joined())
                log_warn_errno(r, "no join token for airlock-node (%s): %m%s", join.token_file ?: "AIRLOCK_JOIN_TOKEN",
                               r == -EBADMSG ? " (`airlock nodes token` prints alj1-...)" : "");
        r = nodeprep_start(c, node.uid, node.gid, node.listen_fd, join.args, env, userdata, ret_pid);
        token_free(env);
        return r;
}

/* DATA_DIR: root's, passable (0711), as on one machine. */
static int data_dir_prepare(const struct daemon_config *c) {
        int r = mkdir_p(c->data_dir, 0711);
        if (r < 0)
                return log_error_errno(r, "Failed to create the data dir %s: %m", c->data_dir);
        struct stat st;
        if (lstat(c->data_dir, &st) < 0)
                return log_error_errno(negative_errno(), "Cannot stat %s: %m", c->data_dir);
        /* the node may pass through, never rename or replace anything */
        if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
                return log_error_errno(-EPERM, "The data dir %s must be a directory owned by root", c->data_dir);
        if (chmod(c->data_dir, (st.st_mode & 0755) | 0711) < 0)
                return log_error_errno(negative_errno(), "Cannot chmod %s: %m", c->data_dir);
        char run_dir[sizeof c->node_socket];
        memcpy(run_dir, c->node_socket, sizeof run_dir);
        _cleanup_free_ char *run = strdup_printf("%s/run", c->data_dir);
        if (!run)
                return -ENOMEM;
        /* before mgr_server_open() makes run/jails below it, 0700 */
        if ((r = mkdir_p(run, 0711)) < 0 || (r = mkdir_p(dirname(run_dir), 0711)) < 0)
                return log_error_errno(r, "Failed to create %s: %m", run);
        return 0;
}

static int run(const struct daemon_config *c) {
        const char *user;
        int r;
        if ((r = data_dir_prepare(c)) < 0)
                return startup_failed(&node, r, "cannot set up the data dir %s: %m%s", c->data_dir,
                                    r == -ENOSPC ? " (the disk is full: free space)" : "");
        if ((r = privsep_user("AIRLOCK_NODE_USER", PRIVSEP_NODE_USER_DEFAULT, &node.uid, &node.gid, &user)) < 0)
                return startup_failed(&node, r, "cannot find or create the system user %s: %m",
                                    getenv("AIRLOCK_NODE_USER") ?: PRIVSEP_NODE_USER_DEFAULT);
        _cleanup_(mgr_server_freep) struct mgr_server *mgr = NULL;
        if ((r = mgr_server_open(c, node.uid, node.gid, &mgr)) < 0)
                return startup_failed(&node, r, "cannot open the node manager's socket in %s/run: %m",
                                      c->data_dir);
        if ((r = startup_storage(&node, c)) < 0)
                return r;
        if ((r = nodeprep_cluster(c, node.uid, node.gid)) < 0)
                return startup_failed(&node, r, "cannot give %s/cluster to the user %s: %m", c->data_dir, user);
        /* a first join needs the token: say so now, not after the start */
        char *env = NULL;
        r = token_env(&env);
        token_free(env);
        if (r < 0 && !joined()) {
                if (r == -ENOKEY)
                        return startup_failed(&node, r, "joining the cluster needs a join token (--join-token-file; "
                                               "`airlock nodes token` makes one)");
                if (r == -EBADMSG)
                        return startup_failed(&node, r, "%s holds no join token (`airlock nodes token` prints alj1-...)",
                                            join.token_file ?: TOKEN_ENV);
                return startup_failed(&node, r, "cannot read the join token %s: %m", join.token_file);
        }
        /* no airlockd here to connect: root's alone (0660 root:root) */
        if ((r = startup_node_env(&node, c, 0, mgr)) < 0)
                return r;

        _cleanup_close_ int sfd = startup_signals();
        if (sfd < 0)
                return sfd;

        pid_t node_pid = -1;
        if ((r = startup_first_node(&node, c, start_node, mgr, &node_pid)) < 0)
                return r;
        log_info("worker: airlock-node pid=%d started as %s, serving its requests on %s", (int) node_pid, user,
                 mgr_server_path(mgr));

        uint64_t restarts[SPAWN_RESTARTS_MAX + 1];
        size_t n_restarts = 0;
        uint64_t restart_at = 0; /* a node that has not joined yet: its next start */
        unsigned retry_s = JOIN_RETRY_MIN_S;
        int exit_code = 0;
        for (;;) {
                int timeout = -1;
                if (restart_at) {
                        uint64_t now = now_monotonic_ns();
                        timeout = now >= restart_at ? 0 : (int) ((restart_at - now) / 1000000) + 1;
                }
                int mgr_timeout = mgr_server_timeout_ms(mgr);
                if (mgr_timeout >= 0 && (timeout < 0 || mgr_timeout < timeout))
                        timeout = mgr_timeout;
                struct pollfd pfd[2] = { { .fd = sfd, .events = POLLIN }, { .fd = mgr_server_fd(mgr), .events = POLLIN } };
                if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
                        log_error_errno(negative_errno(), "poll failed: %m; stopping");
                        exit_code = 1;
                        break;
                }
                mgr_server_tick(mgr);
                if (pfd[1].revents & POLLIN)
                        mgr_server_serve_one(mgr);
                struct signalfd_siginfo si = { 0 };
                ssize_t k = pfd[0].revents & POLLIN ? read(sfd, &si, sizeof si) : 0;
                if (k < 0 && errno != EINTR && errno != EAGAIN) {
                        log_error_errno(negative_errno(), "Failed to read signalfd: %m; stopping");
                        exit_code = 1;
                        break;
                }
                if (k == (ssize_t) sizeof si && si.ssi_signo != SIGCHLD) {
                        log_info("received %s; stopping the node", strsignal((int) si.ssi_signo));
                        break;
                }
                int status;
                bool node_exited = false;
                for (pid_t p; k == (ssize_t) sizeof si && (p = waitpid(-1, &status, WNOHANG)) > 0;)
                        if (!mgr_server_reaped(mgr, p, status))
                                node_exited |= startup_reaped(&node, p, status, false, &node_pid);
                if (node_exited && !joined()) {
                        /* no replica answered, or one refused: the control
                         * plane may come up later (the node's log line
                         * says why); its crash-loop limit is for a node
                         * that runs */
                        log_warn("airlock-node has not joined the cluster; starting it again in %us", retry_s);
                        restart_at = now_monotonic_ns() + (uint64_t) retry_s * 1000000000ULL;
                        retry_s = MIN(retry_s * 2, (unsigned) JOIN_RETRY_MAX_S);
                } else if (node_exited &&
                           spawn_restart(c, restarts, &n_restarts, start_node, mgr_server_serve_for, mgr, &node_pid) < 0) {
                        log_error("airlock-node keeps failing; stopping so a supervisor can restart it");
                        node_pid = -1;
                        exit_code = 1;
                        break;
                }
                if (restart_at && now_monotonic_ns() >= restart_at) {
                        restart_at = 0;
                        if ((r = start_node(c, mgr, &node_pid)) < 0) {
                                log_error_errno(r, "starting airlock-node again failed: %m; stopping");
                                if (r != -ECHILD && node_pid > 0)
                                        (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for,
                                                         mgr);
                                node_pid = -1;
                                exit_code = 1;
                                break;
                        }
                }
        }
        startup_stop(&node, node_pid, false, mgr);
        return exit_code == 0 ? 0 : -ECHILD;
}

int worker_main(int argc, char **argv) {
        /* one write per log line: we and the node share the terminal */
        setvbuf(stderr, NULL, _IOLBF, 0);
        log_setup("airlock-nodemgr", LOG_LEVEL_INFO);
        struct daemon_config config;
        if (worker_config(&config) < 0)
                return 2;
        log_setup("airlock-nodemgr", config.log_level);
        if (geteuid() != 0) {
                log_error("airlock-nodemgr --worker must run as root (it is what airlock-node becomes when started "
                          "as root with --join)");
                return 1;
        }
        signal(SIGPIPE, SIG_IGN);
        join.args = argv;
        const char *file = getenv("AIRLOCK_JOIN_TOKEN_FILE");
        join.token_file = file && *file ? file : NULL;
        join.crt = strdup_printf("%s/cluster/node.crt", config.data_dir);
        if (!join.crt || take_env_token() < 0) {
                log_error("Out of memory");
                return 1;
        }
        int r = run(&config);
        startup_release(&node, &config);
        token_free(join.token);
        free(join.crt);
        return r < 0 ? 1 : 0;
}
