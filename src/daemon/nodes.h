/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The nodes sandboxes run on, as this replica sees them (docs/cluster.md):
 * this machine's own airlock-node (its Unix socket; a sandbox row without
 * a node) and the nodes that joined the cluster (rows of the store's nodes
 * table, reached over mutual TLS at their address). Where a sandbox's
 * requests go (nodes_addr_of*), and where a new one goes (nodes_place).
 *
 * Nothing here is the truth: addresses are cached for a few seconds, the
 * store is read again after.
 */

#include <jansson.h>
#include <stdbool.h>

#include "config.h"
#include "link.h"
#include "store.h"

#define NODES_ADDR_MAX LINK_ADDR_MAX
/* placement: candidates compared (best of this many, chosen at random) */
#define NODES_PLACE_CHOICES 2

/* Set once at start, before any request. */
void nodes_init(const struct daemon_config *config, struct store *store);

/* The address of node name (NULL: the local node's socket). -ENOENT when
 * the cluster has no such node. */
int nodes_addr(const char *name, char out[NODES_ADDR_MAX]);
/* The address of the node sandbox row sb is on. */
int nodes_addr_of(const struct store_sandbox *sb, char out[NODES_ADDR_MAX]);
/* The same by sandbox id (reads its row). -ENOENT when no such sandbox. */
int nodes_addr_of_id(const char *sandbox_id, char out[NODES_ADDR_MAX]);
/* Forgets the cached address of name (a node that moved or left). */
void nodes_addr_forget(const char *name);

/* What a new sandbox needs of its node. */
struct nodes_want {
        const char *template_name; /* it must hold it ready (the local node: assumed) */
        const char *node;          /* pinned to this node, or NULL */
        const json_t *labels;      /* every key=value must match, or NULL */
        const char *cpu;           /* its VMs' CPU must be this (a saved VM's: "kvm:host:..."), or NULL */
};

/*
 * Picks the node for a new sandbox: among nodes that are ready (not
 * draining, not lost, heard from lately), hold the template ready (when
 * none does: any, which builds it on demand) and have room (sandboxes
 * under their max), the best of
 * NODES_PLACE_CHOICES taken at random by weighted free capacity; the local
 * node when the config places there. *ret_node gets its name (NULL: the
 * local node; free it). -EHOSTDOWN with a message in err (API_ERRMSG_MAX)
 * when none fits, -EXDEV when nodes would fit but none has w->cpu (err
 * names the CPUs they have), -ENOENT when a pinned node is not a member.
 */
int nodes_place(const struct nodes_want *w, char **ret_node, char *err);

/* The nodes a request for every node goes to: the local one (when this
 * replica has one) and every joined node not lost. Fills names (NULL for
 * the local one) and addresses, at most max; free names with
 * nodes_targets_free(). */
struct nodes_target {
        char *name;
        char addr[NODES_ADDR_MAX];
};
int nodes_targets(struct nodes_target **ret, size_t *ret_n);
void nodes_targets_free(struct nodes_target *a, size_t n);

/* node_call() (nodeclient.h) to the node of sandbox sandbox_id: what a
 * request about one sandbox uses. -ENOENT when there is no such row. */
int nodes_sandbox_call(const char *sandbox_id, unsigned timeout_s, const json_t *req, json_t **ret, char *err);

/* The address of some node, for requests any node can answer (the object
 * store's contents, template facts): the local one when this replica has
 * one, else the first joined node not lost. -EHOSTDOWN when there is none. */
int nodes_any_addr(char out[NODES_ADDR_MAX]);
