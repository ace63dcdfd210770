/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress policies (docs/api.md, "Network"; the model is docs/network.md):
 * the `network` of a create, GET/PUT /v1/sandboxes/{id}/network and the
 * sandbox's network log. The store keeps every sandbox's policy as the
 * canonical text of lib/netpolicy, resolved once when it was made (its own,
 * else its tenant's default, else the node default); the node keeps a copy
 * and hands it to the gateway. A policy is always parsed here before it is
 * stored or sent, and again by the node, which trusts nothing.
 */
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"
#include "log.h"
#include "macros.h"
#include "nodes.h"
#include "netpolicy.h"
#include "util.h"

#define NETWORK_LOG_DEFAULT 100
#define NETWORK_LOG_MAX 1000
/* PUTs of one sandbox are applied in the order they are stored: the store
 * write and the node call run under one of these (by a hash of the id), so
 * two racing PUTs cannot leave the node with the older one. */
#define NETWORK_STRIPES 16

static pthread_mutex_t put_locks[NETWORK_STRIPES] = {
        [0 ... NETWORK_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER,
};

/* FNV-1a: picks the stripe of a sandbox id. */
static size_t stripe_of(const char *id) {
        uint32_t h = 2166136261u;
        for (const unsigned char *p = (const unsigned char *) id; *p; p++)
                h = (h ^ *p) * 16777619u;
        return h % NETWORK_STRIPES;
}

int api_network_parse(struct api_ctx *ctx, const json_t *j, const char *field, bool required, char **ret) {
        _cleanup_(netpolicy_freep) struct netpolicy *p = NULL;
        char err[NETPOLICY_ERR_MAX] = "";
        int r = j ? netpolicy_parse(j, field, &p, err, sizeof err) : 0;
        if (r == -EINVAL)
                return api_fail(ctx, r, "%s", err);
        if (r == -EFBIG)
                return api_fail(ctx, r, "%s: a policy is at most %u bytes as compact JSON", field,
                                (unsigned) NETPOLICY_JSON_MAX);
        if (r == -ENOPKG)
                return api_fail(ctx, -EIO, "%s: wildcard rules cannot be checked: no public suffix list loads on "
                                           "this host (install the publicsuffix package)", field);
        if (r < 0)
                return r;
        if (r == 0) {
                /* {} leaves the choice to the defaults; a PUT has to make one */
                if (required)
                        return api_fail(ctx, -EINVAL, "%s: the policy is empty: give \"mode\" (\"allow-all\", "
                                                      "\"deny-all\" or \"allowlist\") and its rules", field);
                *ret = NULL;
                return 0;
        }
        return netpolicy_format(p, ret);
}

/* The policy of the node default mode, as canonical text. */
static int node_default(const struct daemon_config *config, char **ret) {
        _cleanup_(netpolicy_freep) struct netpolicy *p = NULL;
        int r = netpolicy_new(config->network_default, &p);
        if (r < 0)
                return r;
        return netpolicy_format(p, ret);
}

int api_network_default(struct api_ctx *ctx, const char *tenant_id, char **ret) {
        if (tenant_id) {
                _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
                int r = store_tenant_get(ctx->store, tenant_id, &t);
                if (r < 0 && r != -ENOENT)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read tenant: %m");
                if (r >= 0 && t.network) {
                        *ret = TAKE_PTR(t.network);
                        return 0;
                }
        }
        return node_default(ctx->config, ret);
}

int api_network_of_sandbox(struct api_ctx *ctx, const char *id, char **ret) {
        _cleanup_free_ char *text = NULL;
        int r = store_sandbox_network_get(ctx->store, id, &text);
        if (r == -ENOENT)
                return api_fail(ctx, r, "sandbox '%.64s' not found", id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read the network policy: %m");
        /* a sandbox made before policies existed has the node default */
        if (!text)
                return node_default(ctx->config, ret);
        *ret = TAKE_PTR(text);
        return 0;
}

int api_network_json(const char *text, json_t **ret) {
        json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(o)) {
                json_decref(o);
                return -EBADMSG;
        }
        *ret = o;
        return 0;
}

/* The sandbox row, as the caller may see it (another tenant's is 404). */
static int lookup(struct api_ctx *ctx, const char *id, struct store_sandbox *ret) {
        int r = store_sandbox_get(ctx->store, id, ret);
        if (r >= 0 && !api_tenant_may_see(ctx, ret->tenant_id)) {
                store_sandbox_release(ret);
                r = -ENOENT;
        }
        if (r < 0)
                return api_read_fail(ctx, r, "sandbox", id);
        return 0;
}

static int reply_policy(struct api_reply *ret, unsigned status, const char *text) {
        json_t *o;
        int r = api_network_json(text, &o);
        if (r < 0)
                return r;
        *ret = (struct api_reply){ .status = status, .body = o };
        return 0;
}

int api_sandbox_network_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        _cleanup_free_ char *text = NULL;
        int r = lookup(ctx, id, &sb);
        if (r < 0 || (r = api_network_of_sandbox(ctx, id, &text)) < 0)
                return r;
        return reply_policy(ret, MHD_HTTP_OK, text);
}

/* Whether a PUT may change the policy of a sandbox in state: not while it
 * is being made or deleted or a verb runs on it (that verb carries the
 * policy it read; the client retries once it is done). A recovery is the
 * node's own: its VM gets the node's copy, which the PUT updates. */
static bool put_allowed(const char *state) {
        return strcmp(state, "recovering") == 0 || !lifecycle_state_is_transitional(state);
}

/* Whether a node holds a sandbox in state, so it gets the new policy now;
 * the others get it with their next start, wake or rollback. */
static bool on_node(const char *state) {
        return strcmp(state, "suspended") != 0 && strcmp(state, "archived") != 0;
}

/* Whether a sandbox in state has a VM whose gateway enforces the policy:
 * then the node must have taken it, or the PUT fails. */
static bool has_vm(const char *state) {
        return strcmp(state, "running") == 0 || strcmp(state, "paused") == 0 || strcmp(state, "recovering") == 0;
}

int api_sandbox_network_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        _cleanup_free_ char *text = NULL;
        int r = api_network_parse(ctx, body, "network", true, &text);
        if (r < 0)
                return r;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = lookup(ctx, id, &sb)) < 0)
                return r;
        if (!put_allowed(sb.state))
                return api_fail(ctx, -EBUSY,
                                "cannot change the network policy: sandbox is %s, try again when it is done",
                                sb.state);
        _cleanup_(json_decrefp) json_t *policy = NULL;
        if ((r = api_network_json(text, &policy)) < 0)
                return r;

        pthread_mutex_t *lock = &put_locks[stripe_of(id)];
        pthread_mutex_lock(lock);
        r = store_sandbox_network_set(ctx->store, id, sb.state, text);
        if (r == -ESTALE) {
                pthread_mutex_unlock(lock);
                return api_fail(ctx, -EBUSY, "cannot change the network policy: the sandbox changed state meanwhile, "
                                             "try again");
        }
        if (r < 0) {
                pthread_mutex_unlock(lock);
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to store the network policy: %m");
        }
        if (on_node(sb.state)) {
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:O}", "op", "sandbox.network.set", "id",
                                                                id, "network", policy);
                char err[API_ERRMSG_MAX] = "";
                r = req ? nodes_sandbox_call(id, ctx->config->node_timeout_s, req, NULL, err) : -ENOMEM;
                if (r == -ENOENT)
                        r = 0; /* the node has no such sandbox (any more): the next start carries it */
                if (r < 0 && has_vm(sb.state)) {
                        pthread_mutex_unlock(lock);
                        log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "sandbox %s: the node did not take the new network "
                                 "policy: %s", id, err);
                        return api_fail(ctx, r, "the policy is stored, but the node did not apply it (its VM keeps the "
                                                "one before until it does: try again): %s",
                                        err[0] ? err : api_error_default_message(r));
                }
                if (r < 0)
                        log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "sandbox %s (%s): the node did not take the new "
                                 "network policy, its next start carries it: %s", id, sb.state, err);
        }
        pthread_mutex_unlock(lock);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: network policy set (mode %s)", id,
                 json_string_value(json_object_get(policy, "mode")) ?: "?");
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = TAKE_PTR(policy) };
        return 0;
}

int api_sandbox_network_log(struct api_ctx *ctx, const char *id, const char *limit_s, struct api_reply *ret) {
        uint64_t limit = NETWORK_LOG_DEFAULT;
        if (limit_s && (parse_u64(limit_s, NETWORK_LOG_MAX, &limit) < 0 || limit == 0))
                return api_fail(ctx, -EINVAL, "query parameter 'limit' must be a number from 1 to %d", NETWORK_LOG_MAX);
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        /* the log is the gateway's, of the VM it serves: none without one
         * (a suspended sandbox is not woken for it) */
        if (strcmp(sb.state, "running") != 0 && strcmp(sb.state, "paused") != 0)
                return api_fail(ctx, -EBUSY, "sandbox '%s' is %s: the network log is kept while it has a VM (running "
                                             "or paused)", id, sb.state);
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:I}", "op", "sandbox.network.log", "id", id,
                                                        "limit", (json_int_t) limit);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if (!req)
                return -ENOMEM;
        r = nodes_sandbox_call(id, ctx->config->node_timeout_s, req, &rep, ctx->err);
        if (r < 0)
                return r;
        json_t *entries = json_object_get(rep, "entries");
        if (!json_is_array(entries))
                return api_fail(ctx, -EIO, "the node answered without a network log");
        json_t *o = json_pack("{s:O}", "entries", entries);
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = o };
        return 0;
}
