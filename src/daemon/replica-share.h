/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * This process's place among the control plane's replicas, as the request
 * handlers and the background loops need it: whose operation a new one is,
 * and which sandboxes' and nodes' background work is this replica's. A
 * leaf: replica.c (the cluster port and the beat) sets it, everybody else
 * only reads it, so nothing below the replica's server has to call up into
 * it. Without a replica (one machine, its own node) every question answers
 * "all of it".
 */

#include <stdbool.h>

#include "store.h"

/* How long an operation's lease lasts past its owner's last renewal: a
 * replica that died is noticed this much later, and the operations it
 * carried are settled by another (api_operation_settle_orphan()). */
#define REPLICA_LEASE_MS 10000

/* replica.c: this process is replica id (on a shared store when
 * shared_store) from now on; forget ends that when id is the one set. */
void replica_share_set_self(const char *id, bool shared_store);
void replica_share_forget(const char *id);
/* replica.c's beat: this replica sorts index-th among count live ones. */
void replica_share_set_live(unsigned index, unsigned count);

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
