/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The nodes of a cluster (docs/cluster.md): GET /v1/nodes, GET and DELETE
 * /v1/nodes/{name}, POST /v1/nodes/{name}/drain and /undrain, and POST
 * /v1/nodes/tokens (a join token). Admin only (http.c answers 403 to a
 * tenant key before these run). A token is shown once, in the reply that
 * made it; the store keeps a hash of its secret.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "cluster.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "replica.h"
#include "util.h"

/* join tokens live an hour unless asked otherwise, a week at the most */
#define TOKEN_TTL_DEFAULT_S 3600
#define TOKEN_TTL_MAX_S (7 * 24 * 3600)
/* what drain suspends: running sandboxes idle at least this long */
#define DRAIN_IDLE_MS 60000

static const char *node_state(const struct store_node *n) {
        return n->lost_at ? "lost" : n->draining ? "draining" : "ready";
}

static json_t *node_json(const struct store_node *n, int64_t sandboxes) {
        char joined[48], beat[48];
        api_format_time(n->joined_at, joined, sizeof joined);
        api_format_time(n->heartbeat_at, beat, sizeof beat);
        json_t *info = json_loads(n->info ?: "{}", 0, NULL);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:O?, s:O?, s:O?, s:O?, s:O?}", "name", n->name,
                              "state", node_state(n), "address", n->address, "joined_at", joined, "last_heartbeat",
                              beat, "sandboxes", (json_int_t) sandboxes, "labels", json_object_get(info, "labels"),
                              "capacity", json_object_get(info, "capacity"), "usage", json_object_get(info, "usage"),
                              "templates", json_object_get(info, "templates"), "cpu", json_object_get(info, "cpu"));
        json_decref(info);
        if (o && n->lost_at) {
                char lost[48];
                api_format_time(n->lost_at, lost, sizeof lost);
                json_object_set_new(o, "lost_at", json_string(lost));
        }
        return o;
}

static int64_t count_of(char **names, int64_t *counts, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (names[i] && strcmp(names[i], name) == 0)
                        return counts[i];
        return 0;
}

int api_node_list(struct api_ctx *ctx, struct api_reply *ret) {
        struct store_node *a = NULL;
        size_t n = 0, n_counts = 0;
        char **names = NULL;
        int64_t *counts = NULL;
        int r = store_node_list(ctx->store, STORE_LIST_MAX, &a, &n);
        if (r >= 0)
                r = store_sandbox_count_by_node(ctx->store, &names, &counts, &n_counts);
        if (r < 0) {
                store_node_array_free(a, n);
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list nodes: %m");
        }
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
                json_array_append_new(arr, node_json(&a[i], count_of(names, counts, n_counts, a[i].name)));
        store_node_array_free(a, n);
        store_string_array_free(names, n_counts);
        free(counts);
        return api_reply_list(ret, "nodes", arr);
}

static int lookup(struct api_ctx *ctx, const char *name, struct store_node *ret) {
        int r = store_node_get(ctx->store, name, ret);
        if (r < 0)
                return api_read_fail(ctx, r, "node", name);
        return 0;
}

int api_node_get(struct api_ctx *ctx, const char *name, struct api_reply *ret) {
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int r = lookup(ctx, name, &n);
        if (r < 0)
                return r;
        struct store_sandbox *a = NULL;
        size_t k = 0;
        r = store_sandbox_list_node(ctx->store, name, STORE_LIST_MAX, &a, &k);
        store_sandbox_array_free(a, k);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list its sandboxes: %m");
        return api_reply_json(ret, MHD_HTTP_OK, node_json(&n, (int64_t) k));
}

int api_node_token_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        json_t *ttl = json_object_get(body, "ttl_s");
        int64_t ttl_s = TOKEN_TTL_DEFAULT_S;
        if (ttl && !json_is_null(ttl)) {
                if (!json_is_integer(ttl) || json_integer_value(ttl) < 60 || json_integer_value(ttl) > TOKEN_TTL_MAX_S)
                        return api_fail(ctx, -EINVAL, "field 'ttl_s' must be whole seconds from 60 to %d",
                                        TOKEN_TTL_MAX_S);
                ttl_s = json_integer_value(ttl);
        }
        char token[CLUSTER_TOKEN_MAX], id[17];
        int64_t expires_at;
        int r = replica_join_token(replica_self(), ttl_s, token, sizeof token, id, &expires_at);
        if (r == -ENOTCONN)
                return api_fail(ctx, -EBUSY,
                                "this airlockd serves no cluster: start it with --cluster-listen HOST:PORT (and a "
                                "PostgreSQL --store for several replicas; docs/cluster.md)");
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to make a join token: %m");
        char exp[48];
        api_format_time(expires_at, exp, sizeof exp);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "join token %s made, valid until %s", id, exp);
        json_t *o = json_pack("{s:s, s:s, s:s}", "id", id, "token", token, "expires_at", exp);
        explicit_bzero(token, sizeof token);
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int api_node_delete(struct api_ctx *ctx, const char *name, struct api_reply *ret) {
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int r = lookup(ctx, name, &n);
        if (r < 0)
                return r;
        r = store_node_delete(ctx->store, name);
        if (r == -EBUSY)
                return api_fail(ctx, -EBUSY,
                                "node %s still has sandboxes: delete them (or, for a lost node, wake their suspended "
                                "images elsewhere) first",
                                name);
        if (r == -ENOENT)
                return api_fail(ctx, r, "node '%.64s' not found", name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to remove node: %m");
        nodes_addr_forget(name);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "node %s removed from the cluster", name);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

/* Suspends the node's running sandboxes that have been idle a while: a
 * draining node keeps what is busy and lets go of what is not. The ids it
 * started suspends for, in *ret. */
static json_t *suspend_idle(struct api_ctx *ctx, const struct store_node *n) {
        json_t *ids = json_array();
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "sandbox.list");
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX];
        if (!ids || !req || node_call(n->address, ctx->config->node_timeout_s, req, &rep, err) < 0)
                return ids;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(rep, "sandboxes"), i, e) {
                const char *id = json_string_value(json_object_get(e, "id"));
                json_t *idle = json_object_get(e, "idle_ms");
                if (!id || !json_is_integer(idle) || json_integer_value(idle) < DRAIN_IDLE_MS ||
                    strcmp(json_string_value(json_object_get(e, "state")) ?: "", "running") != 0)
                        continue;
                struct api_ctx vctx = *ctx;
                vctx.tenant_id = NULL; /* the admin's drain acts on every tenant's */
                struct api_reply r = { 0 };
                if (api_sandbox_verb(&vctx, id, "suspend", NULL, NULL, false, &r) >= 0)
                        json_array_append_new(ids, json_string(id));
                api_reply_release(&r);
        }
        return ids;
}

int api_node_drain(struct api_ctx *ctx, const char *name, bool drain, struct api_reply *ret) {
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int r = lookup(ctx, name, &n);
        if (r < 0)
                return r;
        if ((r = store_node_set_draining(ctx->store, name, drain)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update node: %m");
        n.draining = drain;
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "node %s %s", name,
                 drain ? "draining: nothing new is placed there" : "ready again");
        json_t *o = node_json(&n, 0);
        if (o) {
                json_object_del(o, "sandboxes");
                if (drain && !n.lost_at)
                        json_object_set_new(o, "suspending", suspend_idle(ctx, &n));
        }
        return api_reply_json(ret, MHD_HTTP_OK, o);
}
