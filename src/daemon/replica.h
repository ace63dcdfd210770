/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * This airlockd as one replica of a cluster's control plane
 * (docs/cluster.md). With --cluster-listen it
 *   - takes the cluster's CA from the store (the first replica made it),
 *     and a certificate of its own for this run, named by its replica id;
 *   - serves nodes on that port over mutual TLS: cluster.join (a join
 *     token, a CSR: the node's certificate back) and cluster.heartbeat
 *     (capacity, usage, templates into the store; what the node should be,
 *     the capability public keys and the replicas' addresses back);
 *   - publishes its capability public keys and its own row in the store;
 *   - every beat, marks nodes that went silent lost, and their sandboxes
 *     with them; a lost node that beats again is reconciled: what it still
 *     runs is adopted, what the store deleted is removed from it.
 * Without --cluster-listen, nothing starts: one machine, its own node.
 *
 * What the handlers and loops ask of this replica (replica_owns(),
 * replica_op_lease()) is in replica-share.h, below them; a key rotation
 * reaches the replica through dataplane_set_key_publisher(), registered
 * here at start. Nothing calls up into replica.c but main.c and the node
 * admin API (join tokens).
 */

#include <stdint.h>

#include "config.h"
#include "macros.h"
#include "replica-share.h"
#include "store.h"

struct replica;

int replica_start(const struct daemon_config *config, struct store *store, struct replica **ret);
/* Stops serving and the beat; NULL is fine. */
void replica_stop(struct replica *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct replica *, replica_stop)

/* Makes a join token valid for ttl_s seconds: its text (alj1-…) into
 * out (CLUSTER_TOKEN_MAX bytes) and its id into ret_id (17 bytes).
 * -ENOTCONN when this replica has no cluster port (no CA to name). */
int replica_join_token(struct replica *r, int64_t ttl_s, char *out, size_t n, char ret_id[17],
                       int64_t *ret_expires_at);

/* The replica of this process, or NULL without a cluster port. */
struct replica *replica_self(void);
