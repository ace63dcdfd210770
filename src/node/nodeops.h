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
