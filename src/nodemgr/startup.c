/* SPDX-License-Identifier: Apache-2.0 */
#include "startup.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "nodeprep.h"
#include "util.h"

int startup_failed(const struct startup *s, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        r = config_start_failedv(s->prog, s->check_hint, r, fmt, ap);
        va_end(ap);
        return r;
}

int startup_storage(struct startup *s, const struct daemon_config *c) {
        int r = nodeprep_storage(c, s->uid, s->gid, &s->storage);
        if (r < 0)
                return startup_failed(s, r, "cannot set up the node's storage in %s: %m%s", c->data_dir,
                                      r == -ENOSPC ? " (the disk is full: free space, or use --data-dir on a larger "
                                                     "disk)"
                                                   : "");
        return 0;
}

int startup_node_env(struct startup *s, const struct daemon_config *c, gid_t group, struct mgr_server *mgr) {
        int r;
        if ((r = nodeprep_listen(c, group, &s->listen_fd)) < 0)
                return startup_failed(s, r, "cannot open the node's socket %s: %m", c->node_socket);
        /* the egress gateway, before the node: it attaches its sandboxes */
        if ((r = gwprep_setup(c, s->uid, s->gid, &s->gw)) < 0 || (r = gwprep_start(&s->gw)) < 0)
                return startup_failed(s, r, "cannot start the egress gateway airlock-gw: %m");
        /* the node asks us for what needs root (src/node/vmm.c) */
        if (setenv("AIRLOCK_NODEMGR_SOCKET", mgr_server_path(mgr), 1) < 0)
                return -ENOMEM;
        /* the node, without groups, cannot open /dev/kvm itself; what its
         * jailed VMMs can is probed here, as root, and passed on */
        return mgr_server_probe_kvm(mgr);
}

int startup_signals(void) {
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
                return log_error_errno(negative_errno(), "Failed to become a child subreaper: %m");
        int sfd = signalfd_supervisor();
        if (sfd < 0)
                return log_error_errno(sfd, "Failed to set up signal handling: %m");
        return sfd;
}

int startup_first_node(struct startup *s, const struct daemon_config *c, spawn_start_fn start,
                       struct mgr_server *mgr, pid_t *ret_pid) {
        int r = start(c, mgr, ret_pid);
        if (r >= 0)
                return 0;
        if (r != -ECHILD && *ret_pid > 0)
                (void) spawn_stop(*ret_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
        *ret_pid = -1;
        gwprep_stop(&s->gw);
        if (r == -ECHILD)
                return startup_failed(s, r, "airlock-node exited while starting; its error line above "
                                            "(prog=airlock-node) says why");
        if (r == -ETIMEDOUT)
                return startup_failed(s, r, "airlock-node did not say it was ready within %us; its log lines "
                                            "above (prog=airlock-node) say where it stopped",
                                      c->node_start_timeout_s);
        return startup_failed(s, r, "cannot start airlock-node (%s): %m", c->node_binary);
}

const char *startup_describe(int status, char *buf, size_t n) {
        if (WIFEXITED(status))
                snprintf(buf, n, "status %d", WEXITSTATUS(status));
        else
                snprintf(buf, n, "signal %d", WTERMSIG(status));
        return buf;
}

bool startup_reaped(struct startup *s, pid_t pid, int status, bool stopping, pid_t *node_pid) {
        char how[32];
        if (pid == s->gw.pid) {
                log_error("airlock-gw pid=%d exited (%s)", (int) pid, startup_describe(status, how, sizeof how));
                s->gw.pid = -1;
                if (!stopping && s->gw.listen_fd >= 0 && gwprep_start(&s->gw) < 0) {
                        log_error("airlock-gw keeps failing; sandboxes have no network until %s restarts",
                                  s->restarts);
                        gwprep_give_up(&s->gw);
                }
                return false;
        }
        if (pid == *node_pid) {
                log_error("airlock-node pid=%d exited (%s)", (int) pid, startup_describe(status, how, sizeof how));
                *node_pid = -1;
                return true;
        }
        /* anything else: a VM its dead node orphaned */
        return false;
}

void startup_stop(struct startup *s, pid_t node_pid, bool hand_over, struct mgr_server *mgr) {
        if (node_pid > 0 && !hand_over) {
                int r = spawn_stop(node_pid, SIGTERM, SPAWN_STOP_GRACE_S, mgr_server_serve_for, mgr);
                if (r < 0)
                        log_warn_errno(r, "Failed to stop airlock-node: %m");
        } else if (node_pid > 0) {
                /* airlockd crashed: keep the VMs for the next start */
                log_warn("handing the VMs over to the next start");
                s->hand_over = true;
                (void) spawn_stop(node_pid, SIGUSR1, 3600, mgr_server_serve_for, mgr);
        }
        gwprep_stop(&s->gw);
        log_info("stopped");
}

void startup_release(struct startup *s, const struct daemon_config *c) {
        if (s->listen_fd >= 0) {
                s->listen_fd = safe_close(s->listen_fd);
                (void) unlink(c->node_socket);
        }
        if (s->storage && !s->hand_over) {
                /* the node emptied its warm pool; the dir is in DATA_DIR,
                 * which it cannot write (rmdir fails if it is not empty) */
                _cleanup_free_ char *pool = strdup_printf("%s/pool", s->storage->root);
                if (pool)
                        (void) rmdir(pool);
        }
        if (s->storage && s->hand_over)
                s->storage->mounted_volume = false; /* the next start takes it over */
        storage_close(s->storage);
        s->storage = NULL;
}
