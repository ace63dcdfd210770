/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node's report of now, on top of its counters (nodemetrics.h): the
 * sandboxes by state, each VMM's CPU and memory, and each running
 * sandbox's usage over the last hour, sampled by a thread. Reads the
 * sandbox registry; nothing below calls it.
 */

#include <jansson.h>
#include <stdbool.h>

/* Starts sampling each running sandbox's usage every NODEREPORT_SAMPLE_S
 * (AIRLOCK_USAGE_SAMPLE_S, 1..3600, overrides it), keeping the last
 * NODEREPORT_KEEP samples: an hour at the default. */
#define NODEREPORT_SAMPLE_S 30
#define NODEREPORT_KEEP 120
int nodereport_start(void);
void nodereport_stop(void);
/* Sandbox id's usage: {"now":{ts_ms, cpu_pct?, memory_bytes, disk_bytes},
 * "history":[...oldest first], "sample_s":N}; -ENOENT when the node has
 * no such sandbox. cpu_pct is of one CPU (200: two busy vCPUs), between a
 * sample and the one before it. */
int nodereport_usage(const char *id, json_t **ret);

/* The node's counters (nodemetrics_counters_json()) with the gauges of now
 * (sandboxes by state; with per_sandbox, each running sandbox's VMM CPU
 * seconds and resident memory, labelled by sandbox id), as lib/metrics
 * JSON. */
json_t *nodereport_metrics_json(bool per_sandbox);
