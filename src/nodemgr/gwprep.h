/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The egress gateway, airlock-gw (src/gw/), as airlock-nodemgr runs it: as
 * its own system user (AIRLOCK_GW_USER, default airlock-gw) with no
 * capabilities and no_new_privs, in the host's network namespace or the one
 * AIRLOCK_EGRESS_NETNS names (/run/netns/NAME: its outbound connections
 * leave from there), serving the node on DATA_DIR/run/gw.sock (0660, group
 * the node's). Restarted when it dies; the node notices (gwclient_tick) and
 * attaches its sandboxes again.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

#define GWPREP_USER_DEFAULT "airlock-gw"
#define GWPREP_SOCKET_NAME "gw.sock"

struct gwprep {
        uid_t uid, node_uid;
        gid_t gid;
        int listen_fd;
        int netns_fd; /* AIRLOCK_EGRESS_NETNS, or -1 */
        char binary[4096];
        char socket_path[108];
        pid_t pid;
        uint64_t started_ns[5]; /* the last starts: more than 5 a minute is a crash loop */
        size_t n_started;
};

/* The user, the socket, the binary and the namespace; sets
 * AIRLOCK_GW_SOCKET for the node. */
int gwprep_setup(const struct daemon_config *c, uid_t node_uid, gid_t node_gid, struct gwprep *ret);
/* Starts it (again). -EAGAIN when it has been restarted too often. */
int gwprep_start(struct gwprep *g);
/* After it failed too often: its socket goes, so the node's calls fail at
 * once (its sandboxes have no network until Airlock restarts). */
void gwprep_give_up(struct gwprep *g);
/* SIGTERM and reap (up to 5 s, then SIGKILL); the socket goes. */
void gwprep_stop(struct gwprep *g);
