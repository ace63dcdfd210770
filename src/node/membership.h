/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's membership in a cluster (docs/cluster.md). Started with
 * --join, the node joins once: a key of its own, a certificate request and
 * the join token go to a replica's cluster port (TLS, the replica
 * authenticated by the CA digest in the token), and the cluster's CA signs
 * its certificate for its name. It keeps, in DATA_DIR/cluster/ (0700):
 *
 *   node.key, node.crt, ca.crt   its identity and the cluster's CA
 *   control                      the replicas' cluster addresses, one a line
 *   keys/public/KID.pub          the capability keys the replicas sign with
 *
 * Then it serves the node protocol to the replicas on its TLS port (the
 * peer must be a replica of the same CA) and heartbeats to one replica
 * after another: what it has, what it uses, the templates it holds. The
 * reply says whether it is draining and carries the capability public
 * keys and the replicas' addresses, which it writes down.
 *
 * Without --join all of this is off: a node of one machine, reached on its
 * Unix socket only.
 */

#include <stdbool.h>

struct node_config;

/* Takes the join token airlock-nodemgr passes (AIRLOCK_JOIN_TOKEN) out of
 * the environment, before a thread or a child could see it; the join uses
 * it instead of --join-token-file (which the node's user may not read). */
int membership_take_token(void);
/* Joins (once), opens the TLS port and starts heartbeating. 0 when the
 * node is not in a cluster. Logs what failed. */
int membership_start(const struct node_config *cfg);
/* Stops heartbeating and closes the TLS port (waits for its threads). */
void membership_stop(void);
/* Whether the control plane says this node is draining. */
bool membership_draining(void);
/* Asks a replica for the capability keys now (a capability signed by a
 * key this node has not seen: a replica that started or rotated its key
 * since the last heartbeat). At most once a second: a caller within a
 * second of the last refresh waits for the next; 0 when keys were written
 * (or another caller's refresh since it asked got them). */
int membership_refresh_keys(void);
