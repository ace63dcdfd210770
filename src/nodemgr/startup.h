/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The start-up steps airlock-nodemgr takes the same way on one machine
 * (main.c) and as a worker of a cluster (worker.c), and their undoing: the
 * node's storage, its listening socket, the egress gateway and what the
 * node finds in its environment; the supervisor's signals; the node's
 * first start; the children it reaps; the stop at the end. A step that
 * fails says so on stderr for whoever started us, as s->prog
 * (config_start_failedv()), and returns the negative errno.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"
#include "gwprep.h"
#include "mgrserver.h"
#include "spawn.h"
#include "storage.h"

/* The node (and the gateway) one airlock-nodemgr runs. */
struct startup {
        const char *prog; /* who the start-failure lines speak for: "airlockd" or "airlock-node" */
        bool check_hint;  /* ... with the line pointing at `airlockd --check` */
        const char *restarts; /* what an operator restarts to get a given-up gateway back ("Airlock") */
        uid_t uid;        /* the node's user */
        gid_t gid;
        int listen_fd;    /* the node's listening socket: every start of it gets it */
        struct storage *storage;
        bool hand_over;   /* the VMs (and the volume they use) stay for the next start */
        struct gwprep gw;
};

#define STARTUP_INIT(p, hint, what)                                                                   \
        {                                                                                           \
                .prog = (p), .check_hint = (hint), .restarts = (what), .listen_fd = -1,             \
                .gw = { .listen_fd = -1, .netns_fd = -1, .pid = -1 },                               \
        }

/* "PROG: error: WHAT" on stderr (config_start_failedv()). Returns r. */
int startup_failed(const struct startup *s, int r, const char *fmt, ...) _printf_(3, 4);

/* nodeprep_storage() for the node's user (s->uid, s->gid). */
int startup_storage(struct startup *s, const struct daemon_config *c);

/* The node's listening socket (0660, root:group), then the egress gateway
 * (before the node: it attaches its sandboxes), then the node's
 * environment: where mgr serves it, and what its jailed VMMs can do with
 * KVM (probed here, as root). */
int startup_node_env(struct startup *s, const struct daemon_config *c, gid_t group, struct mgr_server *mgr);

/* Makes us a child subreaper (the VMs a dead node leaves are ours to reap)
 * and returns the supervisor's signalfd (util.h), or a negative errno. */
int startup_signals(void);

/* The node's first start with start (its user, its socket): a node that
 * does not come up is stopped, and so is the gateway; the failure is said
 * (exited, not ready in time, could not start). *ret_pid: the node. */
int startup_first_node(struct startup *s, const struct daemon_config *c, spawn_start_fn start,
                       struct mgr_server *mgr, pid_t *ret_pid);

/* A child the supervisor reaped with status: the gateway (started again,
 * unless stopping; given up when it keeps failing) or the node (logged,
 * *node_pid = -1: returns true). Anything else is a VM its dead node
 * orphaned: nothing to do. */
bool startup_reaped(struct startup *s, pid_t pid, int status, bool stopping, pid_t *node_pid);

/* "status N" or "signal N" for a wait status, in buf. */
const char *startup_describe(int status, char *buf, size_t n);

/* At the end: the node (if node_pid > 0) stopped with SIGTERM, or with
 * hand_over handed SIGUSR1 to give its VMs to the next start; then the
 * gateway. Logs "stopped". */
void startup_stop(struct startup *s, pid_t node_pid, bool hand_over, struct mgr_server *mgr);

/* After the run: the node's socket goes; the warm pool's directory too,
 * unless the VMs were handed over (then the volume stays mounted for the
 * next start); the storage is closed. */
void startup_release(struct startup *s, const struct daemon_config *c);
