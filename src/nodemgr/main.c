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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock-config.h"
#include "basestep.h"
#include "config.h"
#include "gwprep.h"
#include "host.h"
#include "log.h"
#include "macros.h"
#include "mgrserver.h"
#include "nodeprep.h"
#include "privsep.h"
#include "spawn.h"
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

static int spawn_daemon(char **argv, uid_t uid, gid_t gid, pid_t *ret_pid) {
        pid_t pid = fork();
        if (pid < 0)
                return log_error_errno(negative_errno(), "Failed to fork airlockd: %m");
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                /* it must not outlive us: nobody would supervise its node
                 * (after the drop: changing credentials clears it) */
                pid_t parent = getppid();
                if (privsep_drop(uid, gid) < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
                        _exit(126);
                execv(argv[0], argv);
                _exit(127);
        }
        log_info("started airlockd pid=%d as uid %u", (int) pid, (unsigned) uid);
        *ret_pid = pid;
        return 0;
}

/* The node we run: its user, and the listening socket every start of it
 * gets (we made it: the node cannot write DATA_DIR/run). */
static struct {
        uid_t uid;
        gid_t gid;
        int listen_fd;
        struct storage *storage;
        bool hand_over; /* the VMs (and the volume they use) stay for the next start */
} node = { .listen_fd = -1 };

static struct gwprep gw = { .listen_fd = -1, .netns_fd = -1, .pid = -1 };

/* spawn_start_fn: starts the node as its user and waits until it says it
 * is ready (nodeprep_start). */
static int start_node(const struct daemon_config *c, void *userdata, pid_t *ret_pid) {
        return nodeprep_start(c, node.uid, node.gid, node.listen_fd, NULL, NULL, userdata, ret_pid);
}

static const char *describe(int status, char *buf, size_t n) {
        if (WIFEXITED(status))
                snprintf(buf, n, "status %d", WEXITSTATUS(status));
        else
                snprintf(buf, n, "signal %d", WTERMSIG(status));
        return buf;
}

static int run(const struct daemon_config *c, int argc, char **argv) {
        uid_t uid;
        gid_t gid;
        const char *user;
        int r;
        uid_t node_uid;
        gid_t node_gid;
        const char *node_user;
        const char *full = "";
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
         * handed to its user, its listening socket */
        node.uid = node_uid;
        node.gid = node_gid;
        if ((r = nodeprep_storage(c, node_uid, node_gid, &node.storage)) < 0) {
                if (r == -ENOSPC)
                        full = " (the disk is full: free space, or use --data-dir on a larger disk)";
                return config_start_failed(r, "cannot set up the node's storage in %s: %m%s", c->data_dir,
                                          full);
        }
        if ((r = nodeprep_listen(c, gid, &node.listen_fd)) < 0)
                return config_start_failed(r, "cannot open the node's socket %s: %m", c->node_socket);
        /* the egress gateway, before the node: it attaches its sandboxes */
        if ((r = gwprep_setup(c, node_uid, node_gid, &gw)) < 0 || (r = gwprep_start(&gw)) < 0)
                return config_start_failed(r, "cannot start the egress gateway airlock-gw: %m");
        /* the node asks us for what needs root (src/node/vmm.c) */
        if (setenv("AIRLOCK_NODEMGR_SOCKET", mgr_server_path(mgr), 1) < 0)
                return -ENOMEM;
        /* the node, without groups, cannot open /dev/kvm itself; what its
         * jailed VMMs can is probed here, as root, and passed on */
        if ((r = mgr_server_probe_kvm(mgr)) < 0)
                return r;
        struct group *g = getgrgid(gid);
        if (!g || setenv("AIRLOCK_SOCKET_GROUP", g->gr_name, 1) < 0)
                return log_error_errno(-ENOENT, "No group %u for user %s", (unsigned) gid, user);

        const char *daemon_bin = getenv("AIRLOCK_DAEMON_BINARY");
        if (!daemon_bin || !*daemon_bin)
                daemon_bin = AIRLOCK_BUILD_DIR "/src/daemon/airlockd";
        char *dargv[ARGS_MAX];
        if ((r = daemon_argv(argc, argv, daemon_bin, dargv, ARRAY_SIZE(dargv))) < 0)
                return log_error_errno(r, "Too many arguments");

        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                return log_error_errno(negative_errno(), "Failed to become a child subreaper: %m");
        _cleanup_close_ int sfd = signalfd_supervisor();
        if (sfd < 0)
                return log_error_errno(sfd, "Failed to set up signal handling: %m");

        pid_t node_pid = -1, daemon_pid = -1;
        uint64_t restarts[SPAWN_RESTARTS_MAX + 1];
        size_t n_restarts = 0;
        if (c->spawn_node) {
                r = start_node(c, mgr, &node_pid);
                if (r < 0) {
                        if (r != -ECHILD && node_pid > 0)
                                (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
                        if (r == -ECHILD)
                                return config_start_failed(
                                        r, "airlock-node exited while starting; its error line "
                                           "above (prog=airlock-node) says why");
                        if (r == -ETIMEDOUT)
                                return config_start_failed(
                                        r,
                                        "airlock-node did not say it was ready within %us; its "
                                        "log lines above (prog=airlock-node) say where it stopped",
                                        c->node_start_timeout_s);
                        return config_start_failed(r, "cannot start airlock-node (%s): %m", c->node_binary);
                }
        }
        if ((r = spawn_daemon(dargv, uid, gid, &daemon_pid)) < 0) {
                if (node_pid > 0)
                        (void) spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
                return config_start_failed(r, "cannot start airlockd as %s: %m", user);
        }

        bool stopping = false, clean = false;
        int exit_code = 1;
        while (daemon_pid > 0) {
                struct pollfd pfd[2] = { { .fd = sfd, .events = POLLIN }, { .fd = mgr_server_fd(mgr), .events = POLLIN } };
                if (poll(pfd, 2, -1) < 0)
                        continue; /* EINTR */
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
                char how[32];
                bool node_exited = false;
                for (pid_t p; (p = waitpid(-1, &status, WNOHANG)) > 0;) {
                        if (p == daemon_pid) {
                                daemon_pid = -1;
                                clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                                exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
                                if (clean)
                                        log_info("airlockd exited (%s)", describe(status, how, sizeof how));
                                else if (exit_code == AIRLOCKD_EXIT_START_FAILED) {
                                        /* it said why; it served nothing, so
                                         * there is nothing to hand over */
                                        log_error("airlockd did not start; stopping the node");
                                        stopping = true;
                                } else
                                        log_error("airlockd exited (%s)", describe(status, how, sizeof how));
                        } else if (p == gw.pid) {
                                log_error("airlock-gw pid=%d exited (%s)", (int) p, describe(status, how, sizeof how));
                                gw.pid = -1;
                                if (!stopping && gw.listen_fd >= 0 && gwprep_start(&gw) < 0) {
                                        log_error("airlock-gw keeps failing; sandboxes have no network until "
                                                  "Airlock restarts");
                                        gwprep_give_up(&gw);
                                }
                        } else if (p == node_pid) {
                                log_error("airlock-node pid=%d exited (%s)", (int) p, describe(status, how, sizeof how));
                                node_pid = -1;
                                node_exited = true;
                        }
                        /* anything else: a VM its dead node orphaned */
                }
                if (node_exited && daemon_pid > 0 && !stopping &&
                    spawn_restart(c, restarts, &n_restarts, start_node, mgr_server_serve_for, mgr, &node_pid) < 0) {
                        log_error("airlock-node keeps failing; stopping so a supervisor can restart Airlock");
                        stopping = true;
                        kill(daemon_pid, SIGTERM);
                }
        }
        if (node_pid > 0) {
                if (clean || stopping) {
                        r = spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
                        if (r < 0)
                                log_warn_errno(r, "Failed to stop airlock-node: %m");
                } else {
                        /* airlockd crashed: keep the VMs for the next start */
                        log_warn("handing the VMs over to the next start");
                        node.hand_over = true;
                        (void) spawn_stop(node_pid, SIGUSR1, 3600, mgr_server_serve_for, mgr);
                }
        }
        gwprep_stop(&gw);
        log_info("stopped");
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
        if (node.listen_fd >= 0) {
                close(node.listen_fd);
                (void) unlink(config.node_socket);
        }
        if (node.storage && !node.hand_over) {
                /* the node emptied its warm pool; the dir is in DATA_DIR,
                 * which it cannot write (rmdir fails if it is not empty) */
                _cleanup_free_ char *pool = strdup_printf("%s/pool", node.storage->root);
                if (pool)
                        (void) rmdir(pool);
        }
        if (node.storage && node.hand_over)
                node.storage->mounted_volume = false; /* the next start takes it over */
        storage_close(node.storage);
        return r < 0 ? 1 : 0;
}
