/* SPDX-License-Identifier: Apache-2.0 */
/* The node's metrics: see nodemetrics.h. */
#include "nodemetrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

static struct metrics_registry *reg;
static struct metrics_family *requests, *request_seconds, *caps, *guest_errors, *pool, *pool_target, *pool_ready,
        *templates, *template_seconds;

int nodemetrics_init(void) {
        int r = metrics_registry_new(&reg);
        static const double build_buckets[] = { 1, 5, 15, 30, 60, 120, 300, 600, 1800 };
        if (r >= 0)
                r = metrics_family(reg, "airlock_node_requests_total", METRICS_COUNTER,
                                   "Requests the node served, by operation and outcome",
                                   (const char *const[]){ "op", "outcome", NULL }, NULL, 0, &requests);
        if (r >= 0)
                r = metrics_family(reg, "airlock_node_request_seconds", METRICS_HISTOGRAM,
                                   "How long the node took to serve a request, by operation",
                                   (const char *const[]){ "op", NULL }, metrics_latency_buckets,
                                   metrics_latency_buckets_n, &request_seconds);
        if (r >= 0)
                r = metrics_family(reg, "airlock_capability_decisions_total", METRICS_COUNTER,
                                   "Execution capabilities checked by the node, by decision (and a deny's reason)",
                                   (const char *const[]){ "decision", "reason", NULL }, NULL, 0, &caps);
        if (r >= 0)
                r = metrics_family(reg, "airlock_guest_channel_errors_total", METRICS_COUNTER,
                                   "Guest channels that broke, by kind", (const char *const[]){ "kind", NULL }, NULL, 0,
                                   &guest_errors);
        if (r >= 0)
                r = metrics_family(reg, "airlock_pool_claims_total", METRICS_COUNTER,
                                   "Creates that asked the warm pool, by template and outcome (hit; waited: a hit "
                                   "that waited for a refill in flight; miss)",
                                   (const char *const[]){ "template", "outcome", NULL }, NULL, 0, &pool);
        if (r >= 0)
                r = metrics_family(reg, "airlock_pool_target", METRICS_GAUGE,
                                   "Warm VMs a pool keeps: its size, more while creates of its template outrun it",
                                   (const char *const[]){ "template", NULL }, NULL, 0, &pool_target);
        if (r >= 0)
                r = metrics_family(reg, "airlock_pool_ready", METRICS_GAUGE, "Warm VMs ready in a pool now",
                                   (const char *const[]){ "template", NULL }, NULL, 0, &pool_ready);
        if (r >= 0)
                r = metrics_family(reg, "airlock_template_builds_total", METRICS_COUNTER,
                                   "Templates made ready, by template and outcome (built, fetched, failed)",
                                   (const char *const[]){ "template", "outcome", NULL }, NULL, 0, &templates);
        if (r >= 0)
                r = metrics_family(reg, "airlock_template_build_seconds", METRICS_HISTOGRAM,
                                   "How long a template took to be ready, by outcome",
                                   (const char *const[]){ "outcome", NULL }, build_buckets,
                                   sizeof build_buckets / sizeof build_buckets[0], &template_seconds);
        return r;
}

void nodemetrics_request(const char *op, int r, double seconds) {
        metrics_add(requests, (const char *const[]){ op, r >= 0 ? "ok" : "error" }, 1);
        metrics_observe(request_seconds, (const char *const[]){ op }, seconds);
}

void nodemetrics_capability(enum cap_decision d, const char *why) {
        const char *name = d == CAP_ALLOW ? "allow" : d == CAP_REFRESH_ROUTE ? "refresh_route" : "deny";
        metrics_add(caps, (const char *const[]){ name, d == CAP_DENY && why ? why : "" }, 1);
}

void nodemetrics_guest_error(const char *kind) {
        metrics_add(guest_errors, (const char *const[]){ kind }, 1);
}

void nodemetrics_pool(const char *template_name, const char *outcome) {
        metrics_add(pool, (const char *const[]){ template_name, outcome }, 1);
}

void nodemetrics_pool_state(const char *template_name, unsigned target, unsigned ready) {
        metrics_set(pool_target, (const char *const[]){ template_name }, target);
        metrics_set(pool_ready, (const char *const[]){ template_name }, ready);
}

void nodemetrics_template(const char *template_name, const char *outcome, double seconds) {
        metrics_add(templates, (const char *const[]){ template_name, outcome }, 1);
        metrics_observe(template_seconds, (const char *const[]){ outcome }, seconds);
}

json_t *nodemetrics_counters_json(void) {
        return metrics_to_json(reg);
}
