/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's metrics (docs/metrics.md): what only the node sees (its
 * requests, capability decisions, guest channels, warm pools, template
 * builds, its sandboxes and their VMMs), counted here and handed to
 * airlockd by node.metrics as lib/metrics' JSON; airlockd adds the node's
 * name as a label and serves them on GET /metrics.
 */

#include <jansson.h>
#include <stdbool.h>

#include "cap.h"

int nodemetrics_init(void);
/* Starts sampling each running sandbox's usage every NODEMETRICS_SAMPLE_S
 * (AIRLOCK_USAGE_SAMPLE_S, 1..3600, overrides it), keeping the last
 * NODEMETRICS_KEEP samples: an hour at the default. */
#define NODEMETRICS_SAMPLE_S 30
#define NODEMETRICS_KEEP 120
int nodemetrics_start(void);
void nodemetrics_stop(void);
/* Sandbox id's usage: {"now":{ts_ms, cpu_pct?, memory_bytes, disk_bytes},
 * "history":[...oldest first], "sample_s":N}; -ENOENT when the node has
 * no such sandbox. cpu_pct is of one CPU (200: two busy vCPUs), between a
 * sample and the one before it. */
int nodemetrics_usage(const char *id, json_t **ret);

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

/* Everything as lib/metrics JSON, with the gauges of now (sandboxes by
 * state; with per_sandbox, each running sandbox's VMM CPU seconds and
 * resident memory, labelled by sandbox id). */
json_t *nodemetrics_json(bool per_sandbox);
