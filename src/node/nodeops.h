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

/* Remembers what health reports. Call once before serving. */
void nodeops_init(const struct node_config *cfg, enum vmm_accel accel, const char *accel_reason);

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

/* Looks up the sandbox named by the request's "id", checks its capability
 * for need (for CAP_ACCESS_PORTS alone: to guest port `port`, else 0),
 * refuses a paused or stopped one (conflict), gets its guest channel when
 * ret_g is given, and names the sandbox in the connection's log context.
 * Replies itself on failure; *ret_s is a reference (sandbox_unref). */
int nodeops_req_sandbox(struct node_conn *c, json_t *req, uint32_t need, uint16_t port, struct sandbox **ret_s,
                        struct guestconn **ret_g);
