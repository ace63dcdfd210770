/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The ops of docs/node-protocol.md: validation of every request field and
 * the mapping onto sandboxes, sessions, templates and guest requests.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm.h"

struct guestconn;
struct node_config;
struct node_conn;
struct sandbox;

/* How long a guest call that is no transfer waits for its answer. */
#define NODEOPS_GUEST_CALL_MS 30000

/* Remembers what health reports. Call once before serving. */
void nodeops_init(const struct node_config *cfg, enum vmm_accel accel, const char *accel_reason);

/* The config nodeops_init() was given. */
const struct node_config *nodeops_config(void);

/* Runs one request. The op replies itself; a negative return without a
 * reply makes the server reply with the errno's code. */
int nodeops_dispatch(struct node_conn *c, const char *op, json_t *req);

/* Waits up to timeout_s for the lifecycle ops in flight (create, suspend,
 * wake, ...) to finish and reply; returns how many still run. A stopping
 * node calls it once it accepts no more connections, so that a verb it
 * did is never left without its answer. */
unsigned nodeops_lifecycle_drain(unsigned timeout_s);

/* The request's "network", checked as an egress policy (netpolicy_parse():
 * the node trusts nothing): *ret its canonical text, or NULL when absent,
 * null or {} (required: refused). Replies "invalid" itself on failure. */
int nodeops_field_network(struct node_conn *c, json_t *req, bool required, char **ret);
/* The optional data key of a request: "data_key" (base64 of 32 bytes)
 * with "wrapped_key" (its KMS-wrapped form, what a manifest records), both
 * or neither. *ret_has false when absent; -EINVAL (replied) when
 * malformed. The caller wipes key->key. */
struct objstore_data_key;
int nodeops_field_data_key(struct node_conn *c, json_t *req, struct objstore_data_key *key, bool *ret_has);

/* The request validators below reply "invalid" themselves on failure. */

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
