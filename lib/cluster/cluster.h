/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the nodes of a cluster and its control-plane replicas say to each
 * other (docs/cluster.md, "Protocol"), in one place for both ends: the join
 * token's text, and the two requests a node sends to a replica's cluster
 * port, with their strict parsers (what a replica reads comes from the
 * network: every field is typed and bounded, fuzzed by fuzz-cluster).
 *
 *   cluster.join       (before the node has a certificate) token, CSR, name,
 *                      address, labels, capacity: the reply carries its
 *                      certificate
 *   cluster.heartbeat  (with it) address, labels, capacity, usage and the
 *                      templates it holds: the reply carries what the node
 *                      should be (ready, draining), the capability public
 *                      keys and the replicas' cluster addresses
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define CLUSTER_TOKEN_PREFIX "alj1"
#define CLUSTER_TOKEN_ID_HEX 16
#define CLUSTER_TOKEN_SECRET_HEX 32
#define CLUSTER_TOKEN_MAX 160
#define CLUSTER_LABELS_MAX 16
#define CLUSTER_LABEL_MAX 63        /* key or value: [A-Za-z0-9._-] */
#define CLUSTER_TEMPLATES_MAX 256
#define CLUSTER_ADDR_MAX 300
#define CLUSTER_CONTROL_MAX 16      /* replica addresses a node keeps */
#define CLUSTER_KEYS_MAX 64         /* capability public keys in a reply */
#define CLUSTER_REQUEST_MAX (64 << 10)

/* A join token: alj1-<CA digest, 64 hex>-<id, 16 hex>-<secret, 32 hex>. The
 * digest lets the node authenticate the control plane; the store keeps the
 * id and a hash of the secret. */
struct cluster_token {
        char ca_digest[65];
        char id[CLUSTER_TOKEN_ID_HEX + 1];
        char secret[CLUSTER_TOKEN_SECRET_HEX + 1];
};

/* Parses a token (surrounding whitespace ignored). -EINVAL when malformed. */
int cluster_token_parse(const char *s, struct cluster_token *ret);
/* Formats one (CLUSTER_TOKEN_MAX bytes suffice). */
void cluster_token_format(const struct cluster_token *t, char *out, size_t n);

struct cluster_label {
        char key[CLUSTER_LABEL_MAX + 1];
        char value[CLUSTER_LABEL_MAX + 1];
};

#define CLUSTER_CPU_MAX 95

/* What a node has. */
struct cluster_capacity {
        uint32_t cpus;
        uint64_t memory_mib;
        uint64_t disk_bytes;
        uint32_t max_sandboxes;
};

/* What it uses now. */
struct cluster_usage {
        uint32_t sandboxes;      /* VMs it runs (warm pools not counted) */
        uint64_t memory_mib;     /* the memory those VMs were given */
        uint64_t disk_free_bytes;
};

/* A node's own description, in both requests. */
struct cluster_node_info {
        char name[64];                     /* join: the name it asks for */
        char address[CLUSTER_ADDR_MAX];    /* HOST:PORT the replicas reach its TLS port at */
        char boot_id[40];                  /* changes at each node start */
        char cpu[CLUSTER_CPU_MAX + 1];     /* the CPU its VMs get ("kvm:host:...", "tcg:max"; src/node/vmm.h):
                                            * a saved VM resumes only on a node of the same; "" from a node
                                            * that does not say */
        struct cluster_label labels[CLUSTER_LABELS_MAX];
        size_t n_labels;
        struct cluster_capacity capacity;
        struct cluster_usage usage;
        char **templates;                  /* ready templates, NULL-terminated (heartbeat) */
        size_t n_templates;
        bool wants_templates_key;          /* heartbeat: asks for the cluster's templates key */
};

void cluster_node_info_release(struct cluster_node_info *n);

/* Parses labels "k=v,k2=v2" (an operator's flag). -EINVAL naming nothing:
 * the caller says which flag. */
int cluster_labels_parse(const char *s, struct cluster_label *ret, size_t *ret_n);
/* The labels as a JSON object. */
json_t *cluster_labels_json(const struct cluster_label *l, size_t n);
/* Whether labels hold every key=value of want (a JSON object of strings). */
bool cluster_labels_match(const struct cluster_label *l, size_t n, const json_t *want);

/* The request body of cluster.join / cluster.heartbeat. */
json_t *cluster_join_request(const char *token, const char *csr_pem, const struct cluster_node_info *n);
json_t *cluster_heartbeat_request(const struct cluster_node_info *n);

/* Strict parsers of those bodies: every field typed and bounded. On error
 * writes what was wrong to err (256 bytes) and returns -EINVAL. The join's
 * token and CSR are returned borrowed from req. */
int cluster_join_parse(const json_t *req, const char **ret_token, const char **ret_csr, struct cluster_node_info *ret,
                       char *err);
int cluster_heartbeat_parse(const json_t *req, struct cluster_node_info *ret, char *err);

/* Whether s is HOST:PORT (an IPv4 address, a DNS name or [IPv6]). */
bool cluster_address_valid(const char *s);
