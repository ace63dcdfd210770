/* SPDX-License-Identifier: Apache-2.0 */
#include "api.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apireq.h"
#include "auth.h"
#include "dataplane.h"
#include "lifecycle.h"
#include "log.h"
#include "macros.h"
#include "nodes.h"
#include "scheduler.h"
#include "util.h"


#define NODE_HEALTH_TIMEOUT_S 10
#define EXEC_TIMEOUT_SLACK_S 30
/* a repeated create or delete waits this much longer than the first may take */
#define REPLAY_WAIT_SLACK_S 30

/* The first failed template the node's readiness waits for (not one of
 * those built in the background), or NULL. */
static json_t *first_failed_template(json_t *templates) {
        size_t i;
        json_t *t;
        json_array_foreach(templates, i, t)
                if (json_is_string(json_object_get(t, "name")) && !json_is_true(json_object_get(t, "background")) &&
                    strcmp(json_string_value(json_object_get(t, "state")) ?: "", "failed") == 0)
                        return t;
        return NULL;
}

/* A control plane without a node of its own is healthy when the store
 * answers and some node of its cluster is ready for sandboxes. */
static int cluster_health(struct api_ctx *ctx, struct api_reply *ret) {
        struct store_node *nodes = NULL;
        size_t n = 0, ready = 0;
        int r = store_node_list(ctx->store, STORE_LIST_MAX, &nodes, &n);
        if (r < 0)
                return api_fail(ctx, -EHOSTDOWN, "the store is not available (%s)", strerror(-r));
        for (size_t i = 0; i < n; i++)
                ready += !nodes[i].lost_at && !nodes[i].draining;
        store_node_array_free(nodes, n);
        if (ready == 0)
                return api_fail(ctx, -EHOSTDOWN, "no node of the cluster is ready (%zu joined; see GET /v1/nodes)", n);
        return api_reply_json(ret, MHD_HTTP_OK,
                          json_pack("{s:s, s:{s:I, s:I}}", "status", "ok", "nodes", "ready", (json_int_t) ready,
                                    "total", (json_int_t) n));
}

int api_health(struct api_ctx *ctx, struct api_reply *ret) {
        const struct daemon_config *c = ctx->config;
        if (!c->local_node && !c->join_local)
                return cluster_health(ctx, ret);
        /* this machine's node: on the Unix socket, or joined to the
         * cluster (one machine on a shared store), which it may not be yet */
        char addr[NODES_ADDR_MAX];
        int r = nodes_addr(c->local_node ? NULL : c->local_node_name, addr);
        if (r == -ENOENT)
                return api_fail(ctx, -EHOSTDOWN,
                                "this machine's node %s has not joined the cluster yet (airlock-nodemgr starts it "
                                "with airlockd; its log lines say how far it got)",
                                c->local_node_name);
        if (r < 0)
                return api_fail(ctx, -EHOSTDOWN, "the store is not available (%s)", strerror(-r));
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "health");
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        if (!req)
                return -ENOMEM;
        r = node_call(addr, NODE_HEALTH_TIMEOUT_S, req, &rep, err);
        if (r < 0)
                return api_fail(ctx, -EHOSTDOWN, "the node agent is not available (%.200s)", err);
        const char *accel = json_string_value(json_object_get(rep, "accel"));
        json_t *templates = json_object_get(rep, "templates");
        if (!json_is_array(templates))
                templates = NULL;
        if (!json_is_true(json_object_get(rep, "ready"))) {
                /* 503 either way, with each template's progress; a failed
                 * build is said as such: waiting will not fix it */
                json_t *f = templates ? first_failed_template(templates) : NULL;
                _cleanup_free_ char *msg = NULL;
                if (f) {
                        const char *error = json_string_value(json_object_get(f, "error")) ?: "build failed";
                        const char *log = json_string_value(json_object_get(f, "log"));
                        bool say_log = log && !strstr(error, log); /* a step's error may name it already */
                        msg = strdup_printf("template %s failed: %.600s%s%.300s",
                                            json_string_value(json_object_get(f, "name")), error,
                                            say_log ? "; build log " : "", say_log ? log : "");
                }
                json_t *o = json_pack("{s:{s:s, s:s}, s:o}", "error", "code", f ? "template_failed" : "unavailable",
                                      "message",
                                      f ? (msg ?: "a default template failed to build")
                                        : "the node agent is starting: default templates are still building",
                                      "templates", templates ? json_incref(templates) : json_array());
                return api_reply_json(ret, MHD_HTTP_SERVICE_UNAVAILABLE, o);
        }
        json_t *o = json_pack("{s:s, s:s, s:o}", "status", "ok", "accel", accel ? accel : "unknown", "templates",
                              templates ? json_incref(templates) : json_array());
        const char *why = json_string_value(json_object_get(rep, "accel_reason"));
        if (o && why)
                json_object_set_new(o, "accel_reason", json_string(why));
        const char *cpu = json_string_value(json_object_get(rep, "cpu"));
        if (o && cpu)
                json_object_set_new(o, "cpu", json_string(cpu));
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

/* The array field of op's reply from every node (nodes_targets()), each
 * element marked with its node when there are several; a node that does
 * not answer is left out (and fails the call when it is the only one). */
static int gather(struct api_ctx *ctx, const char *op, const char *field, json_t **ret) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", op), *all = json_array();
        struct nodes_target *t = NULL;
        size_t n = 0;
        if (!req || !all)
                return -ENOMEM;
        int r = nodes_targets(&t, &n), last = -EHOSTDOWN;
        if (r < 0)
                return r;
        size_t answered = 0;
        for (size_t i = 0; i < n; i++) {
                _cleanup_(json_decrefp) json_t *rep = NULL;
                if ((last = node_call(t[i].addr, ctx->config->node_timeout_s, req, &rep, ctx->err)) < 0)
                        continue;
                answered++;
                size_t k;
                json_t *e;
                json_array_foreach(json_object_get(rep, field), k, e) {
                        if (json_is_object(e) && (n > 1 || t[i].name))
                                json_object_set_new(e, "node", json_string(t[i].name ?: API_LOCAL_NODE));
                        json_array_append(all, e);
                }
        }
        nodes_targets_free(t, n);
        if (answered == 0 && n > 0)
                return last;
        ctx->err[0] = 0;
        *ret = TAKE_PTR(all);
        return 0;
}

int api_templates_list(struct api_ctx *ctx, struct api_reply *ret) {
        json_t *t = NULL;
        int r = gather(ctx, "template.list", "templates", &t);
        if (r < 0)
                return r;
        /* the nodes' own (built-in) ones, then the caller's built ones
         * under their names: the nodes' names of those are content ids */
        json_t *all = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                if (all && name && strncmp(name, "c-", 2) != 0) {
                        json_object_set_new(e, "kind", json_string("built-in"));
                        json_array_append(all, e);
                }
        }
        json_decref(t);
        if (!all)
                return -ENOMEM;
        if ((r = api_template_list_own(ctx, all)) < 0) {
                json_decref(all);
                return r;
        }
        return api_reply_json(ret, MHD_HTTP_OK, json_pack("{s:o}", "templates", all));
}

int api_pools_list(struct api_ctx *ctx, struct api_reply *ret) {
        json_t *p = NULL;
        int r = gather(ctx, "pool.list", "pools", &p);
        return r < 0 ? r : api_reply_json(ret, MHD_HTTP_OK, json_pack("{s:o}", "pools", p));
}

/* Best-effort removal of whatever the node of sandbox id (its row still
 * there) may hold for it. */
static void node_forget(const struct daemon_config *config, const char *log_ctx, const char *id) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.delete", "id", id);
        char err[API_ERRMSG_MAX] = "", addr[NODES_ADDR_MAX];
        if (!req || nodes_addr_of_id(id, addr) < 0)
                return;
        int r = node_call(addr, config->node_timeout_s, req, NULL, err);
        if (r < 0 && r != -ENOENT)
                log_emit(LOG_LEVEL_WARN, log_ctx, "cleanup of sandbox %s on the node failed: %s", id, err);
}

/* Undoes a create that will not be answered with 201: the node's side (when
 * it may hold something) and the row, so nothing half-made stays behind. */
static void sandbox_abandon(struct api_ctx *ctx, const char *id, bool on_node) {
        if (on_node)
                node_forget(ctx->config, ctx->log_ctx, id);
        int r = store_sandbox_delete(ctx->store, id);
        if (r < 0 && r != -ENOENT)
                log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to remove sandbox %s: %m", id);
}

/* Whether the HTTP client hung up while we waited (a half-close counts:
 * libmicrohttpd drops such a connection without answering too). */
static bool client_gone(const struct api_ctx *ctx) {
        if (ctx->client_fd < 0)
                return false;
        struct pollfd p = { .fd = ctx->client_fd, .events = POLLRDHUP };
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Replies 422 {"error":{"code":"unprocessable",...}}: apierror.c's table
 * has no errno for it, and this is its only use. */
static int reply_unprocessable(struct api_reply *ret, const char *fmt, ...) _printf_(2, 3);
static int reply_unprocessable(struct api_reply *ret, const char *fmt, ...) {
        char msg[API_ERRMSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        return api_reply_json(ret, MHD_HTTP_UNPROCESSABLE_CONTENT,
                          json_pack("{s:{s:s, s:s}}", "error", "code", "unprocessable", "message", msg));
}

/*
 * The outcome of a finished operation as this request's result: 0 when it
 * succeeded; its error (code and message, so the status is the first
 * request's) when it failed; 409 while it still runs.
 */
static int operation_outcome(struct api_ctx *ctx, const struct store_operation *op) {
        if (strcmp(op->state, "succeeded") == 0)
                return 0;
        if (strcmp(op->state, "failed") != 0)
                return api_fail(ctx, -EBUSY, "the %s with this Idempotency-Key is still in progress (operation %s)",
                                op->verb, op->id);
        _cleanup_(json_decrefp) json_t *e = op->error ? json_loads(op->error, 0, NULL) : NULL;
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        return api_fail(ctx, api_error_from_code(code), "%s", msg ? msg : "the operation failed");
}

/*
 * What identifies a create for Idempotency-Key: the SHA-256 of the parsed
 * request with its defaults filled in and keys sorted, so {} and
 * {"template":"python"} are the same request while another env value is
 * not. Only the digest is stored (env values may be secrets).
 */
static int create_request_hash(const struct apireq_create *c, const char *network, const char *tenant_id,
                               const json_t *secrets, char ret[crypto_hash_sha256_BYTES * 2 + 1]) {
        _cleanup_(json_decrefp) json_t *canon = json_pack("{s:s, s:O, s:O}", "template", c->template_name, "env",
                                                          c->env, "metadata", c->metadata);
        /* only when given: the hash of a request without one stays as it was */
        if (canon && c->snapshot_policy && json_object_set(canon, "snapshot_policy", c->snapshot_policy) < 0)
                return -ENOMEM;
        if (canon && c->has_idle_timeout &&
            json_object_set_new(canon, "idle_timeout_s", json_integer((json_int_t) c->idle_timeout_s)) < 0)
                return -ENOMEM;
        if (canon && tenant_id && json_object_set_new(canon, "tenant", json_string(tenant_id)) < 0)
                return -ENOMEM;
        if (canon && c->recovery && json_object_set_new(canon, "recovery", json_string(c->recovery)) < 0)
                return -ENOMEM;
        if (canon && c->image && json_object_set_new(canon, "image", json_string(c->image)) < 0)
                return -ENOMEM;
        if (canon && c->node && json_object_set_new(canon, "node", json_string(c->node)) < 0)
                return -ENOMEM;
        if (canon && c->node_labels && json_object_set(canon, "node_labels", c->node_labels) < 0)
                return -ENOMEM;
        /* the names as given (not the placeholders, drawn afresh each time) */
        if (canon && json_array_size(secrets) > 0 && json_object_set(canon, "secrets", (json_t *) secrets) < 0)
                return -ENOMEM;
        /* the policy as given, canonical (so spellings of one policy are one
         * request); not the default it got, which a tenant may change */
        if (canon && network && json_object_set_new(canon, "network", json_string(network)) < 0)
                return -ENOMEM;
        _cleanup_free_ char *text = canon ? json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (!text)
                return -ENOMEM;
        uint8_t h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(h, (const uint8_t *) text, strlen(text));
        sodium_bin2hex(ret, crypto_hash_sha256_BYTES * 2 + 1, h, sizeof h);
        return 0;
}

/* The owner of a new sandbox: a tenant key's tenant; for the admin, the
 * tenant named by the body's optional "tenant" (an id), else none. */
static int create_tenant(struct api_ctx *ctx, const json_t *body, const char **ret) {
        json_t *v = json_object_get(body, "tenant");
        if (!v || json_is_null(v)) {
                *ret = ctx->tenant_id;
                return 0;
        }
        const char *t = json_string_value(v);
        if (!t || !name_is_valid(t))
                return api_fail(ctx, -EINVAL, "field 'tenant' must be a tenant id");
        if (ctx->tenant_id) {
                if (strcmp(t, ctx->tenant_id) != 0)
                        return api_fail(ctx, -EPERM,
                                        "field 'tenant': a tenant key creates sandboxes of its own tenant");
                *ret = ctx->tenant_id;
                return 0;
        }
        int r = api_tenant_check(ctx, "field 'tenant'", t);
        if (r < 0)
                return r;
        *ret = json_string_value(v);
        return 0;
}

/* An earlier create with this key: 0 when the key is new, 1 when answered
 * (200 with the first create's sandbox, or its error). */
static int create_replay(struct api_ctx *ctx, const char *key, const char *hash, struct api_reply *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = api_operation_by_key(ctx, key, &op);
        if (r <= 0)
                return r;
        if (strcmp(op.verb, "create") != 0)
                return api_fail(ctx, -EEXIST,
                                "Idempotency-Key already used for %s of sandbox %s (operation %s)", op.verb,
                                op.sandbox_id, op.id);
        if (!op.request_hash || strcmp(op.request_hash, hash) != 0) {
                r = reply_unprocessable(ret, "Idempotency-Key already used for a create with a different request "
                                             "body (operation %s, sandbox %s)", op.id, op.sandbox_id);
                return r < 0 ? r : 1;
        }
        /* the first request still runs: a retry wants its answer, and gets
         * it once the create ends (the create's own bound, and some) */
        _cleanup_(store_operation_release) struct store_operation done = { 0 };
        r = api_operation_wait(ctx, op.id, (uint64_t) (ctx->config->create_timeout_s + REPLAY_WAIT_SLACK_S) * 1000,
                               &done);
        if (r < 0 || (r = operation_outcome(ctx, &done)) < 0)
                return r;
        json_t *o = done.result ? json_loads(done.result, 0, NULL) : NULL;
        if (!o)
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx->log_ctx, "operation %s: unreadable result", op.id);
        json_object_set_new(o, "operation_id", json_string(op.id));
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "create of sandbox %s replayed (operation %s)", op.sandbox_id, op.id);
        r = api_reply_json(ret, MHD_HTTP_OK, o);
        return r < 0 ? r : 1;
}

/* Ends a create or delete that failed: its operation fails with r and
 * the message in ctx->err (both also go to the client). */
static int operation_fail(struct api_ctx *ctx, const char *op_id, int r) {
        api_operation_finish(ctx->store, op_id, r, ctx->err, NULL);
        return r;
}

int api_sandbox_create(struct api_ctx *ctx, const json_t *body, const char *idempotency_key, struct api_reply *ret) {
        _cleanup_(apireq_create_release) struct apireq_create c = { 0 };
        _cleanup_free_ char *policy_s = NULL, *net_given = NULL, *net_s = NULL;
        _cleanup_(json_decrefp) json_t *net = NULL;
        /* a bad policy is refused before anything exists, never dropped */
        int r = apireq_parse_create(body, &c, ctx->err);
        if (r < 0 ||
            (r = apireq_check_snapshot_policy(c.snapshot_policy, &ctx->config->snapshot_policy, &policy_s,
                                              ctx->err)) < 0 ||
            (r = api_network_parse(ctx, c.network, "network", false, &net_given)) < 0)
                return r;
        if ((r = api_idempotency_key_check(ctx, idempotency_key)) < 0)
                return r;
        const char *tenant_id = NULL; /* NULL: the admin owns it */
        if ((r = create_tenant(ctx, body, &tenant_id)) < 0)
                return r;
        /* from an image: its template, and the node restores it */
        _cleanup_(store_image_release) struct store_image image = { 0 };
        if (c.image) {
                if ((r = api_image_lookup(ctx, c.image, &image)) < 0)
                        return r;
                if (!api_image_usable_by(&image, ctx, tenant_id))
                        return api_fail(ctx, -EPERM,
                                        "image '%.64s' belongs to another tenant than the sandbox", c.image);
                free(c.template_name);
                if (!(c.template_name = strdup(image.template_name)))
                        return -ENOMEM;
        }
        /* one of the owner's templates: the node knows it by its content id,
         * and it lives on the node that built it */
        _cleanup_free_ char *node_template = NULL, *template_node = NULL;
        if (!c.image && (r = api_template_resolve(ctx, tenant_id, c.template_name, &node_template, &template_node)) < 0)
                return r;
        if (template_node && c.node && strcmp(template_node, c.node) != 0)
                return api_fail(ctx, -EINVAL, "template '%.64s' is on node %s, not %.64s", c.template_name,
                                template_node, c.node);
        const char *run_template = node_template ? node_template : c.template_name;
        /* none given ({} included): the tenant's default, else the node's */
        if (net_given)
                net_s = strdup(net_given);
        else if ((r = api_network_default(ctx, tenant_id, &net_s)) < 0)
                return r;
        if (!net_s || (r = api_network_json(net_s, &net)) < 0)
                return net_s ? r : -ENOMEM;
        char hash[crypto_hash_sha256_BYTES * 2 + 1];
        r = create_request_hash(&c, net_given, tenant_id, json_object_get(body, "secrets"), hash);
        if (r < 0)
                return r;
        if (idempotency_key && (r = create_replay(ctx, idempotency_key, hash, ret)) != 0)
                return r < 0 ? r : 0;

        /* its volumes: the owner's, free for this use, on one node */
        _cleanup_(api_volume_attach_release) struct api_volume_attach vols = {0};
        if ((r = api_volume_attach_prepare(ctx, tenant_id, c.volumes, &vols)) < 0)
                return r;
        if (c.image && vols.n)
                return api_fail(ctx, -EINVAL, "a sandbox made from an image takes no volumes yet");
        /* where it must run: a node asked for or its template's, else its
         * volumes' (NULL: the local node) */
        const char *pinned = c.node ? c.node : template_node;
        if (vols.n && pinned && (!vols.node || strcmp(pinned, vols.node) != 0))
                return api_fail(ctx, -EINVAL, "volume '%s' is on node %s, not %s", vols.volumes[0].name,
                                vols.node ? vols.node : "(local)", pinned);

        /* named secrets: checked before anything exists; their
         * placeholders join env (the guest never sees a value) */
        _cleanup_(api_secret_attach_release) struct api_secret_attach secrets = { 0 };
        if ((r = api_secrets_prepare(ctx, tenant_id, json_object_get(body, "secrets"), c.env, &secrets)) < 0)
                return r;

        char id[32], op_id[32];
        if ((r = random_id("sbx-", 8, id, sizeof id)) < 0 || (r = random_id("op-", 8, op_id, sizeof op_id)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *keys = json_array();
        if (!keys)
                return -ENOMEM;
        const char *k;
        json_t *v;
        json_object_foreach(c.env, k, v) json_array_append_new(keys, json_string(k));
        _cleanup_free_ char *keys_s = json_dumps(keys, JSON_COMPACT);
        _cleanup_free_ char *md_s = json_dumps(c.metadata, JSON_COMPACT | JSON_SORT_KEYS);
        if (!keys_s || !md_s)
                return -ENOMEM;

        /* where it runs: decided before anything is stored, so that a
         * create no node can take leaves nothing behind */
        _cleanup_free_ char *node = NULL;
        char node_addr[NODES_ADDR_MAX];
        struct nodes_want want = { .template_name = run_template, .node = pinned ? pinned : vols.node,
                                   .labels = c.node_labels };
        if ((r = nodes_place(&want, &node, ctx->err)) < 0 || (r = nodes_addr(node, node_addr)) < 0)
                return r;

        /* the operation first: its unique key is what tells two racing
         * requests with the same Idempotency-Key apart */
        struct store_operation op = { .id = op_id, .sandbox_id = id, .tenant_id = (char *) tenant_id,
                                      .verb = "create", .state = "running",
                                      .idempotency_key = (char *) idempotency_key, .request_hash = hash };
        r = api_operation_insert(ctx, &op);
        if (r == -EEXIST && idempotency_key && (r = create_replay(ctx, idempotency_key, hash, ret)) != 0)
                return r < 0 ? r : 0;
        if (r < 0)
                return r;

        struct store_sandbox row = {
                .id = id, .tenant_id = (char *) tenant_id, .template_name = c.template_name, .state = "creating",
                .metadata = md_s, .env_keys = keys_s,
                .snapshot_policy = policy_s, .has_idle_timeout = c.has_idle_timeout,
                .idle_timeout_s = c.idle_timeout_s, .network = net_s, .node = node,
                .memory_mib = c.memory_mib, .vcpus = c.vcpus,
        };
        r = store_sandbox_insert(ctx->store, &row);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert sandbox: %m");
                return operation_fail(ctx, op_id, r);
        }
        if ((r = api_secrets_record(ctx, tenant_id, id, &secrets)) < 0 ||
            (r = api_volume_attach_record(ctx, id, &vols)) < 0) {
                sandbox_abandon(ctx, id, false);
                return operation_fail(ctx, op_id, r);
        }

        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "op", "sandbox.create", "id",
                                                        id, "template", run_template, "env", c.env, "metadata",
                                                        c.metadata, "network", net);
        /* the node keeps the owner: capabilities for it must name it */
        if (req && tenant_id)
                json_object_set_new(req, "tenant", json_string(tenant_id));
        if (req && c.recovery)
                json_object_set_new(req, "recovery", json_string(c.recovery));
        if (req && (c.memory_mib || c.vcpus)) {
                json_t *limits = json_object();
                if (limits && c.memory_mib)
                        json_object_set_new(limits, "memory_mib", json_integer(c.memory_mib));
                if (limits && c.vcpus)
                        json_object_set_new(limits, "vcpus", json_integer(c.vcpus));
                json_object_set_new(req, "limits", limits);
        }
        if (req && c.image)
                json_object_set_new(req, "image", json_string(image.id));
        if (req && vols.n)
                json_object_set(req, "volumes", vols.node_request);
        if (req && c.template_wait_s)
                json_object_set_new(req, "template_wait_ms", json_integer(c.template_wait_s * 1000));
        if (!req) {
                sandbox_abandon(ctx, id, false);
                return operation_fail(ctx, op_id, -ENOMEM);
        }
        if (c.image && (r = api_image_key_add(ctx, node_addr, &image, req)) < 0) {
                sandbox_abandon(ctx, id, false);
                return operation_fail(ctx, op_id, r);
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "creating sandbox %s from %s %s (operation %s)", id,
                 c.image ? "image" : "template", c.image ? image.id : c.template_name, op_id);
        api_operation_node_called(ctx->store, op_id, "creating");
        _cleanup_(json_decrefp) json_t *node_rep = NULL;
        r = node_call(node_addr, ctx->config->create_timeout_s, req, &node_rep, ctx->err);
        (void) json_object_del(req, "data_key"); /* no further than the node */
        if (r < 0) {
                /* A transport failure leaves the node's side unknown: make
                 * sure it holds nothing for this id either. */
                sandbox_abandon(ctx, id, r == -ETIMEDOUT || r == -ECONNRESET || r == -EBADMSG);
                /* (from an image the node's message says what is missing) */
                if (r == -ENOENT && !c.image)
                        return operation_fail(ctx, op_id, api_fail(ctx, r,
                                                                   "template '%.64s' not found", c.template_name));
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "sandbox %s: create failed: %s", id, ctx->err);
                return operation_fail(ctx, op_id, r);
        }
        /* A create can take minutes; a client that gave up meanwhile would
         * never learn the id, and nobody could delete the sandbox. With an
         * Idempotency-Key it can: the retry gets this sandbox. */
        if (client_gone(ctx) && !idempotency_key) {
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "client went away while sandbox %s was created; removing it",
                         id);
                sandbox_abandon(ctx, id, true);
                return operation_fail(ctx, op_id, api_fail(ctx, -ECONNRESET, "the client closed the connection"));
        }
        r = store_sandbox_update_state(ctx->store, id, "running", NULL);
        if (r < 0) {
                sandbox_abandon(ctx, id, true);
                log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update sandbox: %m");
                return operation_fail(ctx, op_id, r);
        }
        api_secrets_attached(ctx, tenant_id, id, &secrets);
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return operation_fail(ctx, op_id, r);
        /* how the node made it (warm pool or cold restore, and how fast):
         * only the create reply knows; the operation's result keeps it for
         * a replay */
        _cleanup_(json_decrefp) json_t *o = api_sandbox_row_json(&sb);
        if (!o)
                return operation_fail(ctx, op_id, -ENOMEM);
        json_t *nsb = json_object_get(node_rep, "sandbox");
        dataplane_route_learn(id, node_addr, nsb);
        json_t *pool = json_object_get(nsb, "pool"), *ms = json_object_get(nsb, "restore_ms");
        if (json_is_string(pool))
                json_object_set(o, "pool", pool);
        if (json_is_integer(ms))
                json_object_set(o, "restore_ms", ms);
        _cleanup_free_ char *result = json_dumps(o, JSON_COMPACT);
        if (!result)
                return operation_fail(ctx, op_id, -ENOMEM);
        api_operation_finish(ctx->store, op_id, 0, NULL, result);
        json_object_set_new(o, "operation_id", json_string(op_id));
        return api_reply_json(ret, MHD_HTTP_CREATED, TAKE_PTR(o));
}

/*
 * Folds the node's view of one sandbox into the stored row: the node knows
 * the observed state (a VM that died is failed, one the node is booting
 * again is recovering, a recovered one runs again), and that verdict is
 * persisted. node_sb NULL means "node does not know it": failed. The row
 * changes only by compare-and-set from the state it was read in, so a verb
 * that claimed the sandbox meanwhile keeps its claim.
 */
/* Where the suspended image of sandbox id is: the node's reply
 * {"local": B, "uploaded": B} (uploaded: the object store holds it whole,
 * any node can wake it), or NULL when nowhere or the node cannot say. */
static json_t *suspended_image_get(struct api_ctx *ctx, const char *id) {
        char snap[96];
        api_suspended_snapshot_id(id, snap, sizeof snap);
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s}", "op", "suspended.get", "snapshot_id",
                                                        snap, "id", id);
        json_t *rep = NULL;
        char err[API_ERRMSG_MAX], addr[NODES_ADDR_MAX];
        if (!req || nodes_addr_of_id(id, addr) < 0 ||
            node_call(addr, ctx->config->node_timeout_s, req, &rep, err) < 0)
                return NULL;
        return rep;
}

/* Whether sandbox id's suspend finished: its image is on the node or in
 * the object store. */
static bool suspended_image_landed(struct api_ctx *ctx, const char *id) {
        _cleanup_(json_decrefp) json_t *rep = suspended_image_get(ctx, id);
        return rep != NULL;
}

static void sandbox_merge(struct api_ctx *ctx, struct store_sandbox *sb, const json_t *node_sb) {
        /* creating: the node may not know it yet; suspended, archived: no
         * node holds it; a verb in progress: its worker settles the row */
        if (strcmp(sb->state, "creating") == 0 || strcmp(sb->state, "suspended") == 0 ||
            strcmp(sb->state, "archived") == 0 ||
            (lifecycle_state_is_transitional(sb->state) && strcmp(sb->state, "recovering") != 0))
                return;
        const char *state = "failed", *error = NULL;
        if (!node_sb && suspended_image_landed(ctx, sb->id))
                state = "suspended"; /* its suspend finished, but its reply never came (a node or airlockd died) */
        else if (!node_sb)
                error = "the node agent does not know this sandbox";
        else {
                state = json_string_value(json_object_get(node_sb, "state")) ?: "";
                if (!lifecycle_state_is_valid(state) || strcmp(state, "creating") == 0)
                        return;
                if (strcmp(state, "failed") == 0)
                        error = json_string_value(json_object_get(node_sb, "error")) ?: "the sandbox failed";
        }
        if (strcmp(state, sb->state) == 0 && (!error || (sb->error && strcmp(error, sb->error) == 0)))
                return;
        int r = store_sandbox_transition(ctx->store, sb->id, sb->state, state, NULL);
        if (r >= 0 && error)
                r = store_sandbox_update_state(ctx->store, sb->id, state, error);
        if (r < 0) {
                if (r != -ESTALE)
                        log_errno(LOG_LEVEL_WARN, r, ctx->log_ctx, "store: failed to update %s: %m", sb->id);
                return;
        }
        char *e = error ? strdup(error) : NULL, *st = strdup(state);
        if ((error && !e) || !st) {
                free(e);
                free(st);
                return;
        }
        log_emit(strcmp(state, "failed") == 0 ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, ctx->log_ctx,
                 "sandbox %s: %s -> %s%s%s (reported by the node)", sb->id, sb->state, state, error ? ": " : "",
                 error ?: "");
        free(sb->error);
        free(sb->state);
        sb->error = e;
        sb->state = st;
}

/* The sandbox as the API shows it: the stored row plus what only the node
 * knows (its current execution, the recoveries it made, its guest agent). */
static json_t *sandbox_json_with_node(const struct store_sandbox *sb, const json_t *node_sb) {
        json_t *o = api_sandbox_row_json(sb);
        json_t *exe = json_object_get(node_sb, "execution"), *rec = json_object_get(node_sb, "recoveries");
        json_t *idle = json_object_get(node_sb, "idle_ms"), *recovery = json_object_get(node_sb, "recovery");
        json_t *agent = json_object_get(node_sb, "agent");
        if (o && json_is_integer(exe))
                json_object_set(o, "execution", exe);
        if (o && json_is_integer(idle))
                json_object_set(o, "idle_ms", idle);
        if (o && json_is_array(rec))
                json_object_set(o, "recoveries", rec);
        if (o && json_is_string(recovery))
                json_object_set(o, "recovery", recovery);
        if (o && json_is_object(agent))
                json_object_set(o, "agent", agent);
        return o;
}

int api_sandbox_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.get", "id", id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX], addr[NODES_ADDR_MAX];
        if (!req)
                return -ENOMEM;
        r = nodes_addr_of(&sb, addr);
        if (r >= 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, &rep, err);
        json_t *node_sb = r >= 0 ? json_object_get(rep, "sandbox") : NULL;
        if (r >= 0 || r == -ENOENT)
                sandbox_merge(ctx, &sb, node_sb);
        /* node unreachable: answer with what the store knows */
        json_t *o = sandbox_json_with_node(&sb, node_sb);
        if (o)
                api_volume_holds_add(ctx, id, o);
        if (o && strcmp(sb.state, "suspended") == 0) {
                /* restorable on another node only once its upload landed */
                _cleanup_(json_decrefp) json_t *img = suspended_image_get(ctx, id);
                json_t *up = json_object_get(img, "uploaded");
                if (json_is_boolean(up))
                        json_object_set(o, "image_uploaded", up);
                /* its node restarted mid-upload and lost the data key */
                if (json_is_true(json_object_get(img, "needs_key")))
                        (void) api_suspended_upload_key(ctx->config, ctx->store, id, ctx->log_ctx);
        }
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

int api_sandbox_agent_upgrade(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = {0};
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        if (strcmp(sb.state, "running") != 0)
                return api_fail(
                        ctx, -EBUSY,
                        "sandbox %s is %s: only a running sandbox's agent is upgraded (a stopped, paused "
                        "or suspended one is upgraded once it runs again)",
                        id, sb.state);
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s}", "op", "sandbox.agent.upgrade", "id", id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "", addr[NODES_ADDR_MAX];
        if (!req)
                return -ENOMEM;
        r = nodes_addr_of(&sb, addr);
        if (r >= 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, &rep, err);
        if (r < 0)
                return api_fail(ctx, r, "%s", err[0] ? err : "the node did not answer");
        return api_reply_json(ret, MHD_HTTP_OK,
                              sandbox_json_with_node(&sb, json_object_get(rep, "sandbox")));
}

/* Whether o (as the API shows it) runs guest agent version agent (NULL:
 * any). */
static bool agent_matches(json_t *o, const char *agent) {
        const char *v = json_string_value(json_object_get(json_object_get(o, "agent"), "version"));
        return !agent || (v && strcmp(v, agent) == 0);
}

int api_sandbox_list(struct api_ctx *ctx, const char *agent, struct api_reply *ret) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        int r = ctx->tenant_id ? store_sandbox_list_tenant(ctx->store, ctx->tenant_id, STORE_LIST_MAX, &a, &n)
                               : store_sandbox_list(ctx->store, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list sandboxes: %m");

        /* what each node the rows name runs: one sandbox.list per node */
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "sandbox.list");
        _cleanup_(json_decrefp) json_t *lists = json_object(); /* node name ("" local) -> its list, or null */
        if (!req || !lists) {
                store_sandbox_array_free(a, n);
                return -ENOMEM;
        }
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++) {
                const char *key = a[i].node ?: "";
                json_t *node_list = json_object_get(lists, key);
                if (!node_list) {
                        _cleanup_(json_decrefp) json_t *rep = NULL;
                        char err[API_ERRMSG_MAX], addr[NODES_ADDR_MAX];
                        bool have = nodes_addr_of(&a[i], addr) >= 0 &&
                                    node_call(addr, ctx->config->node_timeout_s, req, &rep, err) >= 0 &&
                                    json_is_array(json_object_get(rep, "sandboxes"));
                        json_object_set(lists, key, have ? json_object_get(rep, "sandboxes") : json_null());
                        node_list = json_object_get(lists, key);
                }
                if (json_is_array(node_list)) {
                        json_t *found = NULL, *e;
                        size_t j;
                        json_array_foreach(node_list, j, e) {
                                const char *nid = json_string_value(json_object_get(e, "id"));
                                if (nid && strcmp(nid, a[i].id) == 0) {
                                        found = e;
                                        break;
                                }
                        }
                        sandbox_merge(ctx, &a[i], found);
                        json_t *o = sandbox_json_with_node(&a[i], found);
                        if (agent_matches(o, agent))
                                json_array_append_new(arr, o);
                        else
                                json_decref(o);
                        continue;
                }
                if (!agent) /* a sandbox no node answers for: its agent is unknown */
                        json_array_append_new(arr, api_sandbox_row_json(&a[i]));
        }
        store_sandbox_array_free(a, n);
        return api_reply_list(ret, "sandboxes", arr);
}

/* An earlier delete with this key: 0 when the key is new, 1 when answered
 * (204 again, or the first delete's error). */
static int delete_replay(struct api_ctx *ctx, const char *id, const char *key, struct api_reply *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = api_operation_by_key(ctx, key, &op);
        if (r <= 0)
                return r;
        if (strcmp(op.verb, "delete") != 0 || strcmp(op.sandbox_id, id) != 0)
                return api_fail(ctx, -EEXIST,
                                "Idempotency-Key already used for %s of sandbox %s (operation %s)", op.verb,
                                op.sandbox_id, op.id);
        _cleanup_(store_operation_release) struct store_operation done = { 0 };
        r = api_operation_wait(ctx, op.id, (uint64_t) (ctx->config->node_timeout_s + REPLAY_WAIT_SLACK_S) * 1000,
                               &done);
        if (r < 0 || (r = operation_outcome(ctx, &done)) < 0)
                return r;
        r = api_reply_empty(ret);
        return r < 0 ? r : 1;
}

int api_sandbox_set_lifetime(struct api_ctx *ctx, const char *id, int64_t timeout_s, const char *on_expiry) {
        int64_t at = timeout_s > 0 ? now_unix_ms() + timeout_s * 1000 : 0;
        int r = store_sandbox_expiry_set(ctx->store, id, at, timeout_s, on_expiry);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx,
                                 "store: failed to set the sandbox's lifetime: %m");
        return r;
}

int api_sandbox_delete(struct api_ctx *ctx, const char *id, const char *idempotency_key, bool keep_snapshots,
                       struct api_reply *ret) {
        int r = api_idempotency_key_check(ctx, idempotency_key);
        if (r < 0)
                return r;
        /* before the lookup: after the first delete the row is gone */
        if (idempotency_key && (r = delete_replay(ctx, id, idempotency_key, ret)) != 0)
                return r < 0 ? r : 0;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        r = lifecycle_check(LIFECYCLE_DELETE, sb.state);
        if (r < 0)
                return api_fail(ctx, -EBUSY,
                                "cannot delete: %ssandbox is %s", r == -EBUSY ? "an operation is in progress, " : "",
                                sb.state);
        /* an archive is made again from a snapshot by a rollback, which
         * does not carry volumes yet */
        if (keep_snapshots && (r = api_volume_refuse(ctx, id, "archive (keep_snapshots)")) < 0)
                return r;
        /* archive rather than delete only what has snapshots to keep */
        if (keep_snapshots) {
                struct store_snapshot *snaps = NULL;
                size_t n_snaps = 0;
                keep_snapshots = store_snapshot_list(ctx->store, id, 1, &snaps, &n_snaps) >= 0 && n_snaps > 0;
                store_snapshot_array_free(snaps, n_snaps);
        }

        /* the operation first, then the claim (as the verbs do: a replica
         * dying between them leaves an operation to settle, never a
         * claimed row without one) */
        char op_id[32];
        struct store_operation op = { .id = op_id, .sandbox_id = (char *) id, .verb = "delete", .state = "running",
                                      .idempotency_key = (char *) idempotency_key,
                                      .detail = keep_snapshots ? "{\"keep_snapshots\":true}" : NULL };
        if ((r = random_id("op-", 8, op_id, sizeof op_id)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert operation: %m");
        r = api_operation_insert(ctx, &op);
        /* the same key raced in from a second request: answer with its outcome */
        if (r == -EEXIST && idempotency_key && (r = delete_replay(ctx, id, idempotency_key, ret)) != 0)
                return r < 0 ? r : 0;
        if (r < 0)
                return r;
        /* claim, as the verbs do: a verb cannot start on a sandbox being deleted */
        r = store_sandbox_transition(ctx->store, id, sb.state, "deleting", NULL);
        if (r == -ESTALE)
                return operation_fail(ctx, op_id,
                                      api_fail(ctx, -EBUSY,
                                               "cannot delete: the sandbox changed state meanwhile, try again"));
        if (r < 0)
                return operation_fail(
                        ctx, op_id, log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update sandbox: %m"));
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:b}", "op", "sandbox.delete", "id", id,
                                                        "keep_snapshots", keep_snapshots);
        api_operation_node_called(ctx->store, op_id, "deleting");
        bool claimed = scheduler_claim(id, SCHEDULER_CLAIM_WAIT_MS) >= 0; /* see job_main() */
        char addr[NODES_ADDR_MAX];
        r = !req ? -ENOMEM : nodes_addr_of(&sb, addr);
        /* a lost node is not asked: the row goes, and the node removes
         * the VM when it comes back (replica.c, reconcile_node()) */
        if (r >= 0 && strcmp(sb.state, "lost") != 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, NULL, ctx->err);
        if (claimed)
                scheduler_release(id);
        dataplane_route_forget(id);
        if (r < 0 && r != -ENOENT) {
                /* keep the row as it was: the VM may still exist */
                (void) store_sandbox_update_state(ctx->store, id, sb.state, sb.error);
                return operation_fail(ctx, op_id, r);
        }
        ctx->err[0] = 0; /* a node not_found is fine */
        if (strcmp(sb.state, "suspended") == 0) {
                /* its image in the object store goes with it */
                char snap[96];
                api_suspended_snapshot_id(id, snap, sizeof snap);
                _cleanup_(json_decrefp) json_t *del = json_pack("{s:s, s:s, s:s}", "op", "suspended.delete",
                                                                "snapshot_id", snap, "id", id);
                r = del ? node_call(addr, ctx->config->node_timeout_s, del, NULL, ctx->err) : -ENOMEM;
                if (r < 0 && r != -ENOENT) {
                        (void) store_sandbox_update_state(ctx->store, id, sb.state, sb.error);
                        return operation_fail(ctx, op_id, r);
                }
                ctx->err[0] = 0;
        }
        if (keep_snapshots) {
                /* the row and its snapshots stay; a rollback makes it again */
                r = store_sandbox_update_state(ctx->store, id, "archived", NULL);
                if (r < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to archive sandbox: %m");
                        return operation_fail(ctx, op_id, r);
                }
                api_operation_finish(ctx->store, op_id, 0, NULL, "{\"state\":\"archived\"}");
                log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "archived sandbox %s, snapshots kept (operation %s)", id, op_id);
                _cleanup_(store_sandbox_release) struct store_sandbox archived = { 0 };
                if ((r = api_sandbox_lookup(ctx, id, &archived)) < 0)
                        return r;
                return api_reply_json(ret, MHD_HTTP_OK, api_sandbox_row_json(&archived));
        }
        /* a running (or stopped) one put its read-write copies back into
         * its node's store: where its volumes are now, also after a wake
         * elsewhere whose record a crash cut off */
        if (strcmp(sb.state, "lost") != 0 && strcmp(sb.state, "suspended") != 0)
                api_volumes_follow(ctx->config, ctx->store, id, ctx->log_ctx);
        r = store_sandbox_delete(ctx->store, id);
        if (r < 0 && r != -ENOENT) {
                log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete sandbox: %m");
                return operation_fail(ctx, op_id, r);
        }
        api_operation_finish(ctx->store, op_id, 0, NULL, "{\"state\":\"deleted\"}");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "deleted sandbox %s (operation %s)", id, op_id);
        return api_reply_empty(ret);
}

int api_exec(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        _cleanup_(apireq_exec_release) struct apireq_exec e = { 0 };
        int r = apireq_parse_exec(body, ctx->config->exec_max_timeout_s, &e, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = api_sandbox_lookup(ctx, id, &sb)) < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;

        _cleanup_(json_decrefp) json_t *req = json_pack(
                "{s:s, s:s, s:O, s:O, s:s*, s:I, s:I}", "op", "exec", "id", id, "cmd", e.cmd, "env", e.env, "cwd", e.cwd,
                "timeout_s", (json_int_t) e.timeout_s, "max_output", (json_int_t) ctx->config->exec_max_output);
        if (!req)
                return -ENOMEM;
        if (e.stdin_data)
                json_object_set_new(req, "stdin", json_string(e.stdin_data));
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = dataplane_call(ctx->config, sb.tenant_id, id, CAP_ACCESS_EXEC, req, e.timeout_s + EXEC_TIMEOUT_SLACK_S,
                           NULL, &rep, ctx->err);
        if (r < 0)
                return r;
        json_t *code = json_object_get(rep, "exit_code");
        /* Pass the string objects through: output may hold NUL bytes. */
        json_t *out = json_object_get(rep, "stdout"), *err = json_object_get(rep, "stderr");
        _cleanup_(json_decrefp) json_t *empty = json_string("");
        json_t *o = json_pack("{s:O, s:O, s:O, s:b, s:b, s:b}", "exit_code", json_is_integer(code) ? code : json_null(),
                              "stdout", json_is_string(out) ? out : empty, "stderr", json_is_string(err) ? err : empty,
                              "stdout_truncated",
                              json_is_true(json_object_get(rep, "stdout_truncated")), "stderr_truncated",
                              json_is_true(json_object_get(rep, "stderr_truncated")), "timed_out",
                              json_is_true(json_object_get(rep, "timed_out")));
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

void api_reconcile_startup(const struct daemon_config *config, struct store *store) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list(store, STORE_LIST_MAX, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(a[i].state, "creating") != 0)
                        continue;
                log_warn("sandbox %s was being created when airlockd stopped; removing it", a[i].id);
                node_forget(config, NULL, a[i].id);
                (void) store_sandbox_delete(store, a[i].id);
        }
        store_sandbox_array_free(a, n);
        api_lifecycle_reconcile(config, store);
}

/* ---- snapshots ---- */

/* an on-demand snapshot waits this long for a scheduled one of the same
 * sandbox to finish */
#define SNAPSHOT_CLAIM_WAIT_MS 30000

static json_t *snapshot_json(const struct store_snapshot *sn) {
        char ts[48];
        api_format_time(sn->created_at, ts, sizeof ts);
        return json_pack("{s:s, s:s, s:s, s:I, s:s, s:b}", "id", sn->id, "sandbox_id", sn->sandbox_id, "kind", sn->kind,
                         "size", (json_int_t) sn->size, "created_at", ts, "pinned", sn->pinned);
}

int api_snapshot_create(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        json_t *kind_j = json_object_get(body, "kind");
        enum snapshot_kind kind = SNAPSHOT_DISK;
        if (kind_j && !json_is_null(kind_j) &&
            (!json_is_string(kind_j) || snapshot_kind_from_string(json_string_value(kind_j), &kind) < 0))
                return api_fail(ctx, -EINVAL, "kind must be \"disk\" or \"full\"");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        /* a disk image can be copied while the VM is off, memory only
         * while there is a VM (paused: its vCPUs already stand still) */
        if (strcmp(sb.state, "running") != 0 &&
            strcmp(sb.state, kind == SNAPSHOT_FULL ? "paused" : "stopped") != 0)
                return api_fail(ctx, -EBUSY, "cannot take a %s snapshot: sandbox is %s", snapshot_kind_to_string(kind),
                                sb.state);
        /* one snapshot call per sandbox at a time: a scheduled one that
         * runs is short, wait for it */
        r = scheduler_claim(id, SNAPSHOT_CLAIM_WAIT_MS);
        if (r == -EBUSY)
                return api_fail(ctx, r, "cannot snapshot: another snapshot of sandbox %s is in progress", id);
        if (r < 0)
                return r;
        _cleanup_(store_snapshot_release) struct store_snapshot stored = { 0 };
        _cleanup_(json_decrefp) json_t *info = NULL;
        r = scheduler_snapshot_take(ctx->config, ctx->store, id, kind, true, &stored, &info, ctx->err);
        scheduler_release(id);
        if (r < 0) {
                if (r != -ENOENT && r != -EBUSY && r != -EEXIST)
                        log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "sandbox %s: %s snapshot failed: %s", id,
                                 snapshot_kind_to_string(kind), ctx->err);
                return r;
        }
        json_t *o = snapshot_json(&stored);
        if (o) {
                /* how long the guest was held: only the node's reply knows */
                json_t *fm = json_object_get(info, "freeze_ms"), *pm = json_object_get(info, "pause_ms");
                json_object_set_new(o, "freeze_ms", json_integer(json_integer_value(fm)));
                if (json_is_integer(pm))
                        json_object_set(o, "pause_ms", pm);
                /* how a full snapshot went: the node's own measurements */
                static const char *const timings[] = { "downtime_ms", "total_ms", "memory_bytes" };
                for (size_t k = 0; k < ARRAY_SIZE(timings); k++) {
                        json_t *t = json_object_get(info, timings[k]);
                        if (json_is_integer(t))
                                json_object_set(o, timings[k], t);
                }
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: %s snapshot %s taken", id, stored.kind, stored.id);
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int api_snapshot_list(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        struct store_snapshot *a = NULL;
        size_t n = 0;
        r = store_snapshot_list(ctx->store, id, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list snapshots: %m");
        json_t *arr = api_rows_json(a, n, snapshot_json);
        store_snapshot_array_free(a, n);
        return api_reply_list(ret, "snapshots", arr);
}
