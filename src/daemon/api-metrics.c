/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /metrics: Prometheus' text format (docs/metrics.md). What airlockd
 * counts itself (HTTP requests by route and status, lifecycle operations
 * by verb and outcome, with latency histograms), the gauges of now that
 * the store knows (sandboxes by state, nodes and their capacity and
 * usage), and what each node counted (node.metrics: its requests,
 * capability decisions, guest channel errors, warm pools, template builds,
 * sandboxes; with ?per_sandbox=1 each sandbox's VMM CPU and memory),
 * under a `node` label. Scraped with the metrics token
 * (CONTROL_DIR/metrics.token) or the admin token.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "auth.h"
#include "dataplane.h"
#include "log.h"
#include "macros.h"
#include "metrics.h"
#include "nodeclient.h"
#include "nodes.h"
#include "util.h"

/* How long a scrape waits for one node's metrics. */
#define NODE_METRICS_TIMEOUT_S 5

static struct metrics_registry *reg;
static struct metrics_family *http_total, *http_seconds, *ops_total, *ops_seconds;
static uint8_t metrics_token_hash[STORE_HASH_SIZE];
static bool have_token;

int api_metrics_init(const struct daemon_config *config) {
        int r = metrics_registry_new(&reg);
        if (r >= 0)
                r = metrics_family(reg, "airlock_http_requests_total", METRICS_COUNTER,
                                   "API requests answered, by route, method and status",
                                   (const char *const[]){ "route", "method", "code", NULL }, NULL, 0, &http_total);
        if (r >= 0)
                r = metrics_family(reg, "airlock_http_request_seconds", METRICS_HISTOGRAM,
                                   "How long API requests took to answer, by route and method",
                                   (const char *const[]){ "route", "method", NULL }, metrics_latency_buckets,
                                   metrics_latency_buckets_n, &http_seconds);
        if (r >= 0)
                r = metrics_family(reg, "airlock_operations_total", METRICS_COUNTER,
                                   "Lifecycle operations finished, by verb and outcome (succeeded, failed)",
                                   (const char *const[]){ "verb", "outcome", NULL }, NULL, 0, &ops_total);
        if (r >= 0)
                r = metrics_family(reg, "airlock_operation_seconds", METRICS_HISTOGRAM,
                                   "How long lifecycle operations took on their node, by verb",
                                   (const char *const[]){ "verb", NULL }, metrics_latency_buckets,
                                   metrics_latency_buckets_n, &ops_seconds);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the metrics: %m");
        r = auth_metrics_token_init(config->control_dir, metrics_token_hash);
        if (r < 0)
                return log_error_errno(r, "Failed to set up %s/" AUTH_METRICS_TOKEN_FILE ": %m", config->control_dir);
        have_token = true;
        return 0;
}

bool api_metrics_token_ok(const char *token) {
        return have_token && auth_token_matches(token, metrics_token_hash);
}

void api_metrics_http(const char *route, const char *method, unsigned status, double seconds) {
        char code[8];
        snprintf(code, sizeof code, "%u", status);
        metrics_add(http_total, (const char *const[]){ route, method, code }, 1);
        metrics_observe(http_seconds, (const char *const[]){ route, method }, seconds);
}

void api_metrics_operation(const char *verb, bool ok, double seconds) {
        metrics_add(ops_total, (const char *const[]){ verb, ok ? "succeeded" : "failed" }, 1);
        metrics_observe(ops_seconds, (const char *const[]){ verb }, seconds);
}

/* Sandboxes by state, as the store has them. */
static int store_gauges(struct api_ctx *ctx, struct metrics_registry *now) {
        struct metrics_family *f = NULL;
        int r = metrics_family(now, "airlock_sandboxes", METRICS_GAUGE, "Sandboxes, by state (the store's rows)",
                               (const char *const[]){ "state", NULL }, NULL, 0, &f);
        char **names = NULL;
        int64_t *counts = NULL;
        size_t n = 0;
        if (r >= 0 && (r = store_sandbox_count_by_state(ctx->store, &names, &counts, &n)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to count sandboxes: %m");
        for (size_t i = 0; i < n; i++)
                metrics_set(f, (const char *const[]){ names[i] ? names[i] : "" }, (double) counts[i]);
        store_string_array_free(names, n);
        free(counts);
        return r;
}

/* The cluster's nodes as their last heartbeat described them. */
static int node_gauges(struct api_ctx *ctx, struct metrics_registry *now) {
        struct store_node *nodes = NULL;
        size_t n = 0;
        int r = store_node_list(ctx->store, STORE_LIST_MAX, &nodes, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list nodes: %m");
        static const struct {
                const char *name, *help, *section, *field;
        } g[] = {
                { "airlock_node_capacity_memory_bytes", "A node's memory", "capacity", "memory_mib" },
                { "airlock_node_capacity_cpus", "A node's CPUs", "capacity", "cpus" },
                { "airlock_node_capacity_disk_bytes", "A node's data disk", "capacity", "disk_bytes" },
                { "airlock_node_capacity_sandboxes", "The sandboxes a node may hold", "capacity", "max_sandboxes" },
                { "airlock_node_usage_memory_bytes", "Memory a node's sandboxes' templates take", "usage",
                  "memory_mib" },
                { "airlock_node_usage_sandboxes", "Sandboxes on a node, by its heartbeat", "usage", "sandboxes" },
                { "airlock_node_usage_disk_free_bytes", "Free space on a node's data disk", "usage",
                  "disk_free_bytes" },
        };
        struct metrics_family *fam[ARRAY_SIZE(g)], *state = NULL, *beat = NULL;
        for (size_t k = 0; r >= 0 && k < ARRAY_SIZE(g); k++)
                r = metrics_family(now, g[k].name, METRICS_GAUGE, g[k].help, (const char *const[]){ "node", NULL },
                                   NULL, 0, &fam[k]);
        if (r >= 0)
                r = metrics_family(now, "airlock_node_up", METRICS_GAUGE,
                                   "A cluster node: 1 ready, 0 lost (draining counts as ready)",
                                   (const char *const[]){ "node", "state", NULL }, NULL, 0, &state);
        if (r >= 0)
                r = metrics_family(now, "airlock_node_heartbeat_age_seconds", METRICS_GAUGE,
                                   "Time since a node's last heartbeat", (const char *const[]){ "node", NULL }, NULL,
                                   0, &beat);
        int64_t now_ms = now_unix_ms();
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const char *name = nodes[i].name;
                _cleanup_(json_decrefp) json_t *info = nodes[i].info ? json_loads(nodes[i].info, 0, NULL) : NULL;
                for (size_t k = 0; k < ARRAY_SIZE(g); k++) {
                        json_t *v = json_object_get(json_object_get(info, g[k].section), g[k].field);
                        if (!json_is_integer(v))
                                continue;
                        double x = (double) json_integer_value(v);
                        if (strcmp(g[k].field, "memory_mib") == 0)
                                x *= 1024 * 1024;
                        metrics_set(fam[k], (const char *const[]){ name }, x);
                }
                const char *st = nodes[i].lost_at ? "lost" : nodes[i].draining ? "draining" : "ready";
                metrics_set(state, (const char *const[]){ name, st }, nodes[i].lost_at ? 0 : 1);
                metrics_set(beat, (const char *const[]){ name }, (double) (now_ms - nodes[i].heartbeat_at) / 1000.0);
        }
        store_node_array_free(nodes, n);
        return r;
}

int api_metrics_get(struct api_ctx *ctx, bool per_sandbox, struct api_reply *ret) {
        _cleanup_(metrics_registry_freep) struct metrics_registry *now = NULL;
        int r = metrics_registry_new(&now);
        if (r < 0)
                return r;
        if ((r = store_gauges(ctx, now)) < 0 || (r = node_gauges(ctx, now)) < 0)
                return r;
        struct metrics_family *scraped = NULL;
        if ((r = metrics_family(now, "airlock_node_scrape_ok", METRICS_GAUGE,
                                "Whether a node answered this scrape's node.metrics (1) or not (0)",
                                (const char *const[]){ "node", NULL }, NULL, 0, &scraped)) < 0)
                return r;

        /* each node's, in a registry of its own: one that sends something
         * malformed is dropped whole */
        struct nodes_target *t = NULL;
        size_t n = 0;
        if ((r = nodes_targets(&t, &n)) < 0)
                return r;
        _cleanup_free_ struct metrics_registry **regs = calloc(n + 2, sizeof *regs);
        size_t n_regs = 0;
        if (!regs) {
                nodes_targets_free(t, n);
                return -ENOMEM;
        }
        regs[n_regs++] = reg;
        regs[n_regs++] = now;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:b}", "op", "node.metrics", "per_sandbox", per_sandbox);
        for (size_t i = 0; req && i < n; i++) {
                const char *name = t[i].name ? t[i].name : API_LOCAL_NODE;
                _cleanup_(json_decrefp) json_t *rep = NULL;
                char err[API_ERRMSG_MAX] = "";
                struct metrics_registry *one = NULL;
                int k = node_call(t[i].addr, NODE_METRICS_TIMEOUT_S, req, &rep, err);
                if (k >= 0 && (k = metrics_registry_new(&one)) >= 0 &&
                    (k = metrics_merge_json(one, json_object_get(rep, "metrics"), "node", name)) < 0)
                        log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "node %s sent metrics that do not parse: dropped", name);
                else if (k < 0)
                        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "node %s gave no metrics: %s", name,
                                 err[0] ? err : strerror(-k));
                metrics_set(scraped, (const char *const[]){ name }, k >= 0 ? 1 : 0);
                if (k >= 0)
                        regs[n_regs++] = one;
                else
                        metrics_registry_free(one);
        }
        nodes_targets_free(t, n);
        char *text = NULL;
        size_t len = 0;
        r = req ? metrics_render(regs, n_regs, &text, &len) : -ENOMEM;
        for (size_t i = 2; i < n_regs; i++)
                metrics_registry_free(regs[i]);
        if (r < 0)
                return r;
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(text);
                return -ENOMEM;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
        return 0;
}

/* ---- one sandbox ---- */

int api_sandbox_metrics(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *o = json_pack("{s:s, s:s, s:n, s:[], s:i}", "sandbox_id", sb.id, "state",
                                                      sb.state, "now", "history", "sample_s", 30);
        if (!o)
                return -ENOMEM;
        /* its node samples what its VMM and disk use; a sandbox no node
         * holds (suspended, archived, lost) has none */
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.usage", "id", sb.id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        r = req ? nodes_sandbox_call(sb.id, ctx->config->node_timeout_s, req, &rep, err) : -ENOMEM;
        json_t *usage = json_object_get(rep, "usage");
        if (r >= 0 && json_is_object(usage))
                json_object_update_existing(o, usage);
        else if (r < 0 && r != -ENOENT)
                log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: no usage from its node: %s", sb.id,
                         err[0] ? err : strerror(-r));
        /* and, running, the guest's own view (its kernel's numbers) */
        if (strcmp(sb.state, "running") == 0) {
                _cleanup_(json_decrefp) json_t *greq = json_pack("{s:s, s:s}", "op", "sandbox.metrics", "id", sb.id);
                _cleanup_(json_decrefp) json_t *grep = NULL;
                char gerr[API_ERRMSG_MAX] = "";
                if (greq && dataplane_call(ctx->config, sb.tenant_id, sb.id, CAP_ACCESS_EXEC, greq,
                                           ctx->config->node_timeout_s, NULL, &grep, gerr) >= 0 &&
                    json_is_object(json_object_get(grep, "metrics")))
                        json_object_set(o, "guest", json_object_get(grep, "metrics"));
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = TAKE_PTR(o) };
        return 0;
}
