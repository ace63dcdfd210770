/* SPDX-License-Identifier: Apache-2.0 */
/* The node's metrics: see nodemetrics.h. */
#include "nodemetrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "sandbox.h"
#include "util.h"

static struct metrics_registry *reg;
static struct metrics_family *requests, *request_seconds, *caps, *guest_errors, *pool, *templates,
        *template_seconds;

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
                                   "Creates that asked the warm pool, by template and outcome (hit, miss)",
                                   (const char *const[]){ "template", "outcome", NULL }, NULL, 0, &pool);
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

void nodemetrics_pool(const char *template_name, bool hit) {
        metrics_add(pool, (const char *const[]){ template_name, hit ? "hit" : "miss" }, 1);
}

void nodemetrics_template(const char *template_name, const char *outcome, double seconds) {
        metrics_add(templates, (const char *const[]){ template_name, outcome }, 1);
        metrics_observe(template_seconds, (const char *const[]){ outcome }, seconds);
}

/* A VMM's CPU seconds (utime + stime of /proc/PID/stat) and resident
 * bytes (VmRSS of /proc/PID/status): the process its cgroup holds. */
static int vmm_usage(long long pid, double *ret_cpu, double *ret_rss) {
        char path[64];
        _cleanup_free_ char *stat = NULL, *status = NULL;
        snprintf(path, sizeof path, "/proc/%lld/stat", pid);
        int r = file_read_all(path, 4096, &stat, NULL);
        if (r < 0)
                return r;
        /* after the command's ")" (which may itself hold spaces): fields 3.. */
        const char *p = strrchr(stat, ')');
        unsigned long long utime = 0, stime = 0;
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
                return -EBADMSG;
        snprintf(path, sizeof path, "/proc/%lld/status", pid);
        if ((r = file_read_all(path, 16384, &status, NULL)) < 0)
                return r;
        const char *rss = strstr(status, "\nVmRSS:");
        unsigned long long kb = 0;
        if (!rss || sscanf(rss + 7, "%llu", &kb) != 1)
                return -EBADMSG;
        long hz = sysconf(_SC_CLK_TCK);
        *ret_cpu = (double) (utime + stime) / (double) (hz > 0 ? hz : 100);
        *ret_rss = (double) kb * 1024;
        return 0;
}

json_t *nodemetrics_json(bool per_sandbox) {
        /* the gauges of now, in a registry of this call's */
        _cleanup_(metrics_registry_freep) struct metrics_registry *now = NULL;
        struct metrics_family *by_state = NULL, *cpu = NULL, *rss = NULL;
        if (metrics_registry_new(&now) < 0 ||
            metrics_family(now, "airlock_node_sandboxes", METRICS_GAUGE, "Sandboxes on the node, by state",
                           (const char *const[]){ "state", NULL }, NULL, 0, &by_state) < 0)
                return NULL;
        if (per_sandbox &&
            (metrics_family(now, "airlock_sandbox_cpu_seconds_total", METRICS_COUNTER,
                            "CPU time of a sandbox's VMM process (its vCPUs and devices) since it started",
                            (const char *const[]){ "sandbox", NULL }, NULL, 0, &cpu) < 0 ||
             metrics_family(now, "airlock_sandbox_memory_bytes", METRICS_GAUGE,
                            "Resident memory of a sandbox's VMM process (guest RAM it touched, and QEMU's own)",
                            (const char *const[]){ "sandbox", NULL }, NULL, 0, &rss) < 0))
                return NULL;
        _cleanup_(json_decrefp) json_t *list = sandbox_list_json();
        size_t i;
        json_t *s;
        static const char *const states[] = { "running", "paused", "stopped", "failed", "recovering" };
        for (size_t k = 0; k < sizeof states / sizeof states[0]; k++)
                metrics_set(by_state, (const char *const[]){ states[k] }, 0);
        json_array_foreach(list, i, s) {
                const char *st = json_string_value(json_object_get(s, "state"));
                const char *id = json_string_value(json_object_get(s, "id"));
                json_int_t pid = json_integer_value(json_object_get(s, "pid"));
                metrics_add(by_state, (const char *const[]){ st ? st : "unknown" }, 1);
                double c, m;
                if (per_sandbox && id && pid > 0 && vmm_usage(pid, &c, &m) >= 0) {
                        metrics_add(cpu, (const char *const[]){ id }, c);
                        metrics_set(rss, (const char *const[]){ id }, m);
                }
        }
        json_t *own = metrics_to_json(reg), *gauges = metrics_to_json(now);
        json_t *fams = json_object_get(own, "families");
        if (!own || !gauges || json_array_extend(fams, json_object_get(gauges, "families")) < 0) {
                json_decref(own);
                json_decref(gauges);
                return NULL;
        }
        json_decref(gauges);
        return own;
}
