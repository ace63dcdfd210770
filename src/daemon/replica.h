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
 */

#include <stdint.h>

#include "config.h"
#include "macros.h"
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

/* Publishes this replica's capability public keys at once (after a
 * rotation), not at the next tenth beat. */
void replica_keys_changed(void);

/* The replica of this process, or NULL without a cluster port. */
struct replica *replica_self(void);

/* How long an operation's lease lasts past its owner's last renewal: a
 * replica that died is noticed this much later, and the operations it
 * carried are settled by another (api_operation_take_over()). */
#define REPLICA_LEASE_MS 10000

/* Marks an operation about to be inserted as carried by this replica,
 * with a fresh lease: on a shared store (PostgreSQL); on one machine
 * (SQLite) leaves it without owner (a restart settles all). */
void replica_op_lease(struct store_operation *op);

/* Whether this replica does the background work of a sandbox (by its id:
 * scheduled snapshots, idle suspends, lifetimes) or of a node (by its
 * name: the orphan sweep): on a shared store the live replicas split them
 * by a hash of the key, so that no two take the same scheduled snapshot;
 * alone, all are its. */
bool replica_owns(const char *key);
