/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's metrics (docs/metrics.md): what only the node sees (its
 * requests, capability decisions, guest channels, warm pools, template
 * builds), counted here: a leaf every layer may report to. nodereport.h
 * adds the gauges of now (sandboxes, their VMMs) on top and hands the
 * whole to airlockd by node.metrics as lib/metrics' JSON; airlockd adds
 * the node's name as a label and serves them on GET /metrics.
 */

#include <jansson.h>
#include <stdbool.h>

#include "cap.h"

int nodemetrics_init(void);

/* A node request done (op as the table names it, r its result). */
void nodemetrics_request(const char *op, int r, double seconds);
/* A data-plane capability check: allow, refresh_route or deny (why: the
 * deny's static reason). */
void nodemetrics_capability(enum cap_decision d, const char *why);
/* A guest channel broke: "malformed", "failed" (read error), "stalled"
 * (the guest took nothing), "handshake". */
void nodemetrics_guest_error(const char *kind);
/* A warm-pool claim for template: "hit", "waited" (a hit that waited for
 * a refill in flight) or "miss". */
void nodemetrics_pool(const char *template_name, const char *outcome);

/* A warm pool's target size (it follows demand) and the VMs ready in it. */
void nodemetrics_pool_state(const char *template_name, unsigned target, unsigned ready);
/* A template made ready: "built", "fetched" (from the object store) or
 * "failed", and how long it took. */
void nodemetrics_template(const char *template_name, const char *outcome, double seconds);

/* The counters above as lib/metrics JSON (nodereport.h adds the gauges of
 * now). */
json_t *nodemetrics_counters_json(void);
