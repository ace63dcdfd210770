/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A node request's fields and its sandbox, checked before an op runs: the
 * validators every op file shares (nodeops.c, nodeops-*.c, portproxy.c).
 * Each replies on the connection itself when it refuses ("invalid",
 * "forbidden", "refresh_route", "conflict", "not_found"), so an op can
 * `if ((r = nodeops_field_...(...)) < 0) return r;`. Calls only down: the
 * sandbox registry, capcheck, conn.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How long a guest call that is no transfer waits for its answer. */
#define NODEOPS_GUEST_CALL_MS 30000

struct guestconn;
struct node_config;
struct node_conn;
struct sandbox;

/* Remembers the node's config for the checks (nodeops_init() calls it). */
void nodeops_req_init(const struct node_config *cfg);
/* The config nodeops_init() was given. */
const struct node_config *nodeops_config(void);

/* The request's key: a string of at most max bytes, or NULL when absent
 * (required: refused). */
int nodeops_field_string(struct node_conn *c, json_t *req, const char *key, bool required, size_t max,
                         const char **ret);
/* The request's key, required: a name (name_is_valid()). */
int nodeops_field_name(struct node_conn *c, json_t *req, const char *key, const char **ret);
/* "user": a user name of the guest (absent: NULL, the request's uid). */
int nodeops_field_user(struct node_conn *c, json_t *req, const char **ret);
/* The request's key: an object of environment variables, names without
 * "=" (absent: an empty object). Returns a new reference. */
int nodeops_field_env(struct node_conn *c, json_t *req, const char *key, json_t **ret);
/* The request's key: a non-empty array of strings. Returns a new reference. */
int nodeops_field_cmd(struct node_conn *c, json_t *req, const char *key, json_t **ret);

/* The request's "network", checked as an egress policy (netpolicy_parse():
 * the node trusts nothing): *ret its canonical text, or NULL when absent,
 * null or {} (required: refused). Replies "invalid" itself on failure. */
int nodeops_field_network(struct node_conn *c, json_t *req, bool required, char **ret);
/* The request validators below reply "invalid" themselves on failure. */

/* The optional data key of a request: "data_key" (base64 of 32 bytes)
 * with "wrapped_key" (its KMS-wrapped form, what a manifest records), both
 * or neither. *ret_has false when absent; -EINVAL (replied) when
 * malformed. The caller wipes key->key. */
struct objstore_data_key;
int nodeops_field_data_key(struct node_conn *c, json_t *req, struct objstore_data_key *key, bool *ret_has);

/* The request's key: an absolute path without "..", or NULL when absent (required: refused). */
int nodeops_field_path(struct node_conn *c, json_t *req, const char *key, bool required, const char **ret);
/* The request's key: a boolean (absent or null: def). */
int nodeops_field_bool(struct node_conn *c, json_t *req, const char *key, bool def, bool *ret);
/* The request's key: an integer in min..max (absent or null: def). */
int nodeops_field_uint(struct node_conn *c, json_t *req, const char *key, uint64_t def, uint64_t min, uint64_t max,
                       uint64_t *ret);

/* Looks up the sandbox named by the request's "id", checks its capability
 * for need (for CAP_ACCESS_PORTS alone: to guest port `port`, else 0),
 * refuses a paused or stopped one (conflict), gets its guest channel when
 * ret_g is given, and names the sandbox in the connection's log context.
 * Replies itself on failure; *ret_s is a reference (sandbox_unref). */
int nodeops_req_sandbox(struct node_conn *c, json_t *req, uint32_t need, uint16_t port, struct sandbox **ret_s,
                        struct guestconn **ret_g);

/* Replies with a guest call's failure r: the guest's ERROR (msg), else the transport problem. */
int nodeops_reply_guest_failure(struct node_conn *c, int r, const char *msg, const char *what);

/* The capability of a data-plane request ("cap"), checked against s as this
 * node runs it now (docs/security.md): allow, or a reply "refresh_route"
 * (the right sandbox, another execution or node: the caller re-resolves)
 * or "forbidden". The token itself is never logged. */
int nodeops_req_capability(struct node_conn *c, json_t *req, struct sandbox *s, uint32_t need, uint16_t port);
