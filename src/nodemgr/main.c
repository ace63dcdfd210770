/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-nodemgr: the one process of an Airlock machine that keeps root.
 * airlockd started as root execs it with the same arguments; it
 *
 *   1. creates the system user `airlock` on the first start, gives it
 *      DATA_DIR/control (the store, the admin token, the capability keys;
 *      moved there from DATA_DIR by the first start of this version) and
 *      keeps DATA_DIR itself root's (airlockd can pass, not rename);
 *   2. sets up the node's storage (mounting the btrfs loop volume where
 *      needed), hands its directories to the system user `airlock-node`,
 *      makes its socket (open to the `airlock` group) and starts
 *      airlock-node as `airlock-node` (src/nodemgr/nodeprep.c), restarts it
 *      when it dies, like airlockd did, and serves its privileged requests
 *      (DATA_DIR/run/nodemgr.sock, src/nodemgr/mgrserver.c): the VMs are
 *      started here, jailed;
 *   3. starts the egress gateway airlock-gw as `airlock-gw` (src/nodemgr/
 *      gwprep.c) and restarts it when it dies;
 *   4. starts airlockd as `airlock` (no supplementary groups, no_new_privs,
 *      --no-spawn-node) and lives as long as it does.
 *
 * SIGTERM/SIGINT: airlockd stops first, then the node (which stops the VMs
 * after a guest sync). airlockd dying any other way: the node gets SIGUSR1
 * and hands its VMs over to the next start, as before. The VMs are our
 * children (and we are a child subreaper): they are reaped here.
 *
 * `airlock-nodemgr --worker NODE_ARGS...` is the same for a node of a
 * cluster on a machine without airlockd: what airlock-node started as root
 * with --join becomes (src/nodemgr/worker.c).
 */
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock-config.h"
#include "basestep.h"
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
#include "worker.h"

#define ARGS_MAX 256

/* airlockd's argv: the binary, the arguments it was given, and
 * --no-spawn-node (the node is ours). */
static int daemon_argv(int argc, char **argv, const char *binary, char **out, size_t n) {
        if ((size_t) argc + 2 > n)
                return -E2BIG;
        out[0] = (char *) binary;
        for (int i = 1; i < argc; i++)
                out[i] = argv[i];
        out[argc] = (char *) "--no-spawn-node";
        out[argc + 1] = NULL;
        return 0;
}

/* Forks and execs argv (as uid/gid with drop, else as root), with the
 * signal mask cleared. It must not outlive us: nobody would supervise it
 * (set after the drop: changing credentials clears it). */
static int spawn_child(char *const argv[], bool drop, uid_t uid, gid_t gid, pid_t *ret_pid) {
        pid_t pid = fork();
        if (pid < 0)
                return log_error_errno(negative_errno(), "Failed to fork %s: %m", argv[0]);
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                pid_t parent = getppid();
                if ((drop && privsep_drop(uid, gid) < 0) || prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 ||
                    getppid() != parent)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        *ret_pid = pid;
        return 0;
}

static int spawn_daemon(char **argv, uid_t uid, gid_t gid, pid_t *ret_pid) {
        int r = spawn_child(argv, true, uid, gid, ret_pid);
        if (r >= 0)
                log_info("started airlockd pid=%d as uid %u", (int) *ret_pid, (unsigned) uid);
        return r;
}

/* airlockd ended with status: *clean and *exit_code say how; a start that
 * failed (it said why, it served nothing) sets *stopping. */
static void daemon_ended(int status, bool *clean, int *exit_code, bool *stopping) {
        char how[32];
        *clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        if (*clean)
                log_info("airlockd exited (%s)", startup_describe(status, how, sizeof how));
        else if (*exit_code == AIRLOCKD_EXIT_START_FAILED) {
                /* nothing to hand over */
                log_error("airlockd did not start; stopping the node");
                *stopping = true;
        } else
                log_error("airlockd exited (%s)", startup_describe(status, how, sizeof how));
}

/* ---- one machine on a shared store ---- */

/* The token airlockd writes, and the log level, for the joined node. */
static struct {
        char token_path[CONFIG_PATH_MAX + 64];
        const char *log_level;
} joined;

/* spawn_start_fn: this machine's node as `airlock-node --join` as root,
 * which becomes airlock-nodemgr --worker (src/nodemgr/worker.c): its own
 * storage, node and gateway in DATA_DIR, joined through our airlockd. It
 * must not outlive us. */
static int start_joined_node(const struct daemon_config *c, void *userdata, pid_t *ret_pid) {
        const char *argv[] = { c->node_binary, "--join", c->advertise, "--join-token-file", joined.token_path,
                               "--data-dir", c->data_dir, "--cluster-listen", c->local_node_listen, "--advertise",
                               c->local_node_listen, "--node-name", c->local_node_name, "--log-level",
                               joined.log_level, NULL };
        *ret_pid = -1;
        int r = spawn_child((char *const *) argv, false, 0, 0, ret_pid);
        if (r >= 0)
                log_info("started this machine's node %s (airlock-node --join %s) pid=%d", c->local_node_name,
                         c->advertise, (int) *ret_pid);
        return r;
}

/* airlockd (unprivileged, the replica) first; once it wrote the join token,
 * the node; both watched until airlockd ends, then the node is stopped
 * (its VMs with it, as on one machine). */
static int run_joined(const struct daemon_config *c, char **dargv, uid_t uid, gid_t gid, const char *user) {
        static const char *const levels[] = { "debug", "info", "warn", "error" };
        joined.log_level = levels[MIN((size_t) c->log_level, ARRAY_SIZE(levels) - 1)];
        snprintf(joined.token_path, sizeof joined.token_path, "%s/%s", c->control_dir, CONFIG_LOCAL_NODE_TOKEN_FILE);
        (void) unlink(joined.token_path); /* the last start's: wait for this one's */
        _cleanup_close_ int sfd = startup_signals();
        if (sfd < 0)
                return sfd;
        pid_t daemon_pid = -1, node_pid = -1;
        int r = setenv(CONFIG_LOCAL_NODE_ENV, "1", 1) < 0 ? -ENOMEM : spawn_daemon(dargv, uid, gid, &daemon_pid);
        (void) unsetenv(CONFIG_LOCAL_NODE_ENV);
        if (r < 0)
                return config_start_failed(r, "cannot start airlockd as %s: %m", user);

        uint64_t restarts[SPAWN_RESTARTS_MAX + 1], started = now_monotonic_ns();
        size_t n_restarts = 0;
        bool stopping = false, clean = false, waiting_said = false;
        int exit_code = 1;
        while (daemon_pid > 0) {
                if (node_pid < 0 && !stopping && access(joined.token_path, R_OK) == 0 &&
                    start_joined_node(c, NULL, &node_pid) < 0) {
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                }
                if (node_pid < 0 && !stopping && !waiting_said &&
                    now_monotonic_ns() - started > (uint64_t) c->node_start_timeout_s * 1000000000ULL) {
                        log_warn("airlockd has not made the join token %s yet; the node starts when it has",
                                 joined.token_path);
                        waiting_said = true;
                }
                struct pollfd pfd = { .fd = sfd, .events = POLLIN };
                if (poll(&pfd, 1, node_pid < 0 ? 100 : -1) <= 0 || !(pfd.revents & POLLIN))
                        continue;
                struct signalfd_siginfo si;
                if (read(sfd, &si, sizeof si) != (ssize_t) sizeof si)
                        continue;
                if (si.ssi_signo != SIGCHLD) {
                        log_info("received %s; stopping airlockd, then the node", strsignal((int) si.ssi_signo));
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                        continue;
                }
                int status;
                char how[32];
                bool node_exited = false;
                for (pid_t p; (p = waitpid(-1, &status, WNOHANG)) > 0;) {
                        if (p == node_pid) {
                                log_error("this machine's node exited (%s)", startup_describe(status, how, sizeof how));
                                node_pid = -1;
                                node_exited = true;
                        } else if (p == daemon_pid) {
                                daemon_pid = -1;
                                daemon_ended(status, &clean, &exit_code, &stopping);
                        }
                }
                if (node_exited && daemon_pid > 0 && !stopping &&
                    spawn_restart(c, restarts, &n_restarts, start_joined_node, NULL, NULL, &node_pid) < 0) {
                        log_error("this machine's node keeps failing; stopping so a supervisor can restart Airlock");
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                }
        }
        if (node_pid > 0 && (r = spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, NULL, NULL)) < 0)
                log_warn_errno(r, "Failed to stop this machine's node: %m");
        return exit_code == 0 && (clean || stopping) ? 0 : -ECHILD;
}

/* The node we run: its user, the listening socket every start of it gets
 * (we made it: the node cannot write DATA_DIR/run), its storage, and the
 * gateway. We speak for airlockd, which execed us. */
static struct startup node = STARTUP_INIT("airlockd", true, "Airlock");

/* spawn_start_fn: starts the node as its user and waits until it says it
 * is ready (nodeprep_start). */
static int start_node(const struct daemon_config *c, void *userdata, pid_t *ret_pid) {
        return nodeprep_start(c, node.uid, node.gid, node.listen_fd, NULL, NULL, userdata, ret_pid);
}

static int run(const struct daemon_config *c, int argc, char **argv) {
        uid_t uid;
        gid_t gid;
        const char *user;
        int r;
        uid_t node_uid;
        gid_t node_gid;
        const char *node_user;
        if ((r = privsep_control_dir(c)) < 0)
                return config_start_failed(r, "cannot set up the data dir %s: %m%s", c->data_dir,
                                          r == -ENOSPC ? " (the disk is full: free space)" : "");
        if ((r = privsep_user("AIRLOCK_USER", PRIVSEP_USER_DEFAULT, &uid, &gid, &user)) < 0 ||
            (r = privsep_user("AIRLOCK_NODE_USER", PRIVSEP_NODE_USER_DEFAULT, &node_uid, &node_gid,
                              &node_user)) < 0)
                return config_start_failed(r, "cannot find or create the system users %s and %s: %m",
                                          getenv("AIRLOCK_USER") ?: PRIVSEP_USER_DEFAULT,
                                          getenv("AIRLOCK_NODE_USER") ?: PRIVSEP_NODE_USER_DEFAULT);
        if ((r = privsep_hand_over(c, uid, gid)) < 0)
                return config_start_failed(r, "cannot hand %s to the user %s: %m", c->control_dir, user);
        if (c->join_local) {
                const char *daemon_bin = getenv("AIRLOCK_DAEMON_BINARY");
                char *dargv[ARGS_MAX];
                if ((r = daemon_argv(argc, argv, daemon_bin && *daemon_bin ? daemon_bin
                                                                           : AIRLOCK_DAEMON_PATH,
                                     dargv, ARRAY_SIZE(dargv))) < 0)
                        return log_error_errno(r, "Too many arguments");
                return run_joined(c, dargv, uid, gid, user);
        }
        if (node_uid == uid || node_gid == gid)
                return config_start_failed(
                        log_error_errno(-EINVAL, "the node user %s must not be airlockd's user %s",
                                        node_user, user),
                        "the node user %s must not be airlockd's user %s (AIRLOCK_NODE_USER, "
                        "AIRLOCK_USER)",
                        node_user, user);
        char run_dir[sizeof c->node_socket];
        memcpy(run_dir, c->node_socket, sizeof run_dir);
        if ((r = mkdir_p(dirname(run_dir), 0711)) < 0)
                return config_start_failed(log_error_errno(r, "Failed to create %s: %m", run_dir),
                                          "cannot create %s: %m", run_dir);
        _cleanup_(mgr_server_freep) struct mgr_server *mgr = NULL;
        if ((r = mgr_server_open(c, node_uid, node_gid, &mgr)) < 0)
                return config_start_failed(r, "cannot open the node manager's socket in %s: %m", run_dir);
        /* the node's storage (we mount the loop volume), its directories
         * handed to its user, its listening socket (airlockd's group
         * connects), the gateway */
        node.uid = node_uid;
        node.gid = node_gid;
        if ((r = startup_storage(&node, c)) < 0 || (r = startup_node_env(&node, c, gid, mgr)) < 0)
                return r;
        struct group *g = getgrgid(gid);
        if (!g || setenv("AIRLOCK_SOCKET_GROUP", g->gr_name, 1) < 0)
                return log_error_errno(-ENOENT, "No group %u for user %s", (unsigned) gid, user);

        const char *daemon_bin = getenv("AIRLOCK_DAEMON_BINARY");
        if (!daemon_bin || !*daemon_bin)
                daemon_bin = AIRLOCK_DAEMON_PATH;
        char *dargv[ARGS_MAX];
        if ((r = daemon_argv(argc, argv, daemon_bin, dargv, ARRAY_SIZE(dargv))) < 0)
                return log_error_errno(r, "Too many arguments");

        _cleanup_close_ int sfd = startup_signals();
        if (sfd < 0)
                return sfd;

        pid_t node_pid = -1, daemon_pid = -1;
        uint64_t restarts[SPAWN_RESTARTS_MAX + 1];
        size_t n_restarts = 0;
        if (c->spawn_node && (r = startup_first_node(&node, c, start_node, mgr, &node_pid)) < 0)
                return r;
        if ((r = spawn_daemon(dargv, uid, gid, &daemon_pid)) < 0) {
                if (node_pid > 0)
                        (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
                return config_start_failed(r, "cannot start airlockd as %s: %m", user);
        }

        bool stopping = false, clean = false;
        int exit_code = 1;
        while (daemon_pid > 0) {
                struct pollfd pfd[2] = { { .fd = sfd, .events = POLLIN }, { .fd = mgr_server_fd(mgr), .events = POLLIN } };
                if (poll(pfd, 2, mgr_server_timeout_ms(mgr)) < 0)
                        continue; /* EINTR */
                mgr_server_tick(mgr);
                if (pfd[1].revents & POLLIN)
                        mgr_server_serve_one(mgr);
                if (!(pfd[0].revents & POLLIN))
                        continue;
                struct signalfd_siginfo si;
                ssize_t k = read(sfd, &si, sizeof si);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k != (ssize_t) sizeof si) {
                        log_error_errno(k < 0 ? negative_errno() : -EIO, "Failed to read signalfd: %m");
                        kill(daemon_pid, SIGTERM);
                        stopping = true;
                        continue;
                }
                if (si.ssi_signo != SIGCHLD) {
                        log_info("received %s; stopping airlockd, then the node", strsignal((int) si.ssi_signo));
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                        continue;
                }
                int status;
                bool node_exited = false;
                for (pid_t p; (p = waitpid(-1, &status, WNOHANG)) > 0;) {
                        if (mgr_server_reaped(mgr, p, status))
                                continue;
                        if (p != daemon_pid) {
                                node_exited |= startup_reaped(&node, p, status, stopping, &node_pid);
                                continue;
                        }
                        daemon_pid = -1;
                        daemon_ended(status, &clean, &exit_code, &stopping);
                }
                if (node_exited && daemon_pid > 0 && !stopping &&
                    spawn_restart(c, restarts, &n_restarts, start_node, mgr_server_serve_for, mgr, &node_pid) < 0) {
                        log_error("airlock-node keeps failing; stopping so a supervisor can restart Airlock");
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                }
        }
        /* airlockd crashed: the VMs are kept for the next start */
        startup_stop(&node, node_pid, !(clean || stopping), mgr);
        return exit_code == 0 && (clean || stopping) ? 0 : -ECHILD;
}

int main(int argc, char **argv) {
        if (argc >= 2 && strcmp(argv[1], "--worker") == 0)
                return worker_main(argc - 2, argv + 2);
        if (argc >= 2 && strcmp(argv[1], "--check-oci-layout") == 0)
                return base_step_check_layout_main(argc - 2, argv + 2);
        struct daemon_config config;
        char err[512] = "";
        if (config_load(argc, argv, &config, err, sizeof err) < 0) {
                fprintf(stderr, "airlock-nodemgr: %s\n", err);
                return 2;
        }
        /* one write per log line: airlockd, airlock-nodemgr and the node
         * share the terminal (or log file), and unbuffered stderr writes a
         * line in pieces that the others' lines cut through */
        setvbuf(stderr, NULL, _IOLBF, 0);
        log_setup("airlock-nodemgr", config.log_level);
        if (geteuid() != 0) {
                log_error("airlock-nodemgr must run as root (it is what airlockd becomes when started as root)");
                return 1;
        }
        signal(SIGPIPE, SIG_IGN);
        int r = run(&config, argc, argv);
        startup_release(&node, &config);
        return r < 0 ? 1 : 0;
}
