/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Credentials (docs/api.md, "Credentials"; docs/security.md): POST/GET/DELETE
 * /v1/secrets, their attachment to sandboxes (`secrets` of a create: a
 * random placeholder in the guest's env, never the value), and handing the
 * decrypted set to the node (sandbox.secrets.set, over the node socket only)
 * whenever a sandbox gets a VM, loses a secret, or its node restarted. The
 * values live sealed in the store (lib/credstore); the node and the gateway
 * hold them in memory only. No value reaches a reply or a log line.
 */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "apireq.h"
#include "credstore.h"
#include "lifecycle.h"
#include "log.h"
#include "macros.h"
#include "nodes.h"
#include "secretreq.h"
#include "util.h"

#define SECRETS_LIST_MAX 1000

static struct credstore *creds;

int api_secrets_init(const struct daemon_config *config, struct store *store) {
        char path[sizeof config->control_dir + sizeof CREDSTORE_KEY_FILE + 1];
        snprintf(path, sizeof path, "%s/%s", config->control_dir, CREDSTORE_KEY_FILE);
        return credstore_local_new(store, path, &creds);
}

void api_secrets_shutdown(void) {
        credstore_free(TAKE_PTR(creds));
}

static int64_t now_s(void) {
        return (int64_t) (now_realtime_ns() / 1000000000ULL);
}

/* ---- scope ---- */

static bool same_scope(const char *a, const char *b) {
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* ---- audit of the control plane's own actions ---- */

void api_audit_record(struct api_ctx *ctx, const char *action, const char *tenant_id, const char *sandbox_id,
                      const char *secret) {
        struct store_audit_event ev = {
                .tenant_id = (char *) tenant_id,
                .actor = (char *) (ctx->key_id ?: "unknown"),
                .sandbox_id = (char *) sandbox_id,
                .secret = (char *) secret,
                .action = (char *) action,
        };
        int r = store_audit_insert(ctx->store, &ev, NULL, NULL, 0);
        if (r < 0)
                log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to record audit event %s: %m", action);
}

/* ---- metadata as the API shows it ---- */

static json_t *secret_json(const struct credstore_meta *m) {
        char ts[48];
        api_format_time(m->created_at, ts, sizeof ts);
        _cleanup_(json_decrefp) json_t *spec = json_loads(m->spec, 0, NULL);
        json_t *o = json_pack("{s:s, s:s}", "name", m->name, "created_at", ts);
        if (!o)
                return NULL;
        const char *keys[] = { "hosts", "ports", "inject", "methods", "paths", "rate_per_min" };
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if (json_object_get(spec, keys[i]))
                        json_object_set(o, keys[i], json_object_get(spec, keys[i]));
        if (m->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(m->tenant_id));
        if (m->sandbox_id)
                json_object_set_new(o, "sandbox", json_string(m->sandbox_id));
        if (m->created_by)
                json_object_set_new(o, "created_by", json_string(m->created_by));
        if (m->expires_at > 0) {
                api_format_time(m->expires_at * 1000, ts, sizeof ts);
                json_object_set_new(o, "expires_at", json_string(ts));
        } else
                json_object_set_new(o, "expires_at", json_null());
        return o;
}

/* ---- handing the set to the node ---- */

int api_secrets_push(const struct daemon_config *config, struct store *store, const char *sandbox_id, bool always,
                     const char *log_ctx) {
        if (!creds)
                return -ENOTCONN;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(store, sandbox_id, &sb);
        if (r < 0)
                return r;
        struct store_sandbox_secret *a = NULL;
        size_t n = 0;
        r = store_sandbox_secret_list(store, sandbox_id, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, log_ctx, "store: failed to read the secrets of %s: %m",
                                 sandbox_id);
        if (n == 0 && !always) {
                store_sandbox_secret_array_free(a, n);
                return 0;
        }
        _cleanup_(json_decrefp) json_t *set = json_array();
        for (size_t i = 0; set && i < n; i++) {
                _cleanup_(credstore_meta_release) struct credstore_meta m = { 0 };
                char *v = NULL;
                size_t vlen = 0;
                int k = credstore_get(creds, sb.tenant_id, a[i].name, &m, &v, &vlen);
                if (k < 0) {
                        log_errno(LOG_LEVEL_WARN, k, log_ctx, "secret %s of sandbox %s cannot be read: %m", a[i].name,
                                  sandbox_id);
                        continue;
                }
                /* an expired one is not sent: the gateway would refuse it anyway */
                if (m.expires_at == 0 || m.expires_at > now_s()) {
                        json_t *c = secretreq_credential(a[i].name, a[i].placeholder, v, vlen, m.spec, m.expires_at);
                        if (c)
                                json_array_append_new(set, c);
                }
                credstore_value_free(v, vlen);
        }
        store_sandbox_secret_array_free(a, n);
        if (!set)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:O}", "op", "sandbox.secrets.set", "id", sandbox_id, "secrets", set);
        if (!req)
                return -ENOMEM;
        char err[API_ERRMSG_MAX] = "";
        r = nodes_sandbox_call(sandbox_id, config->node_timeout_s, req, NULL, err);
        /* the decrypted values do not outlive the call in this process's
         * heap (jansson frees without wiping) */
        size_t i;
        json_t *c;
        json_array_foreach(set, i, c) {
                json_t *v = json_object_get(c, "value");
                if (json_is_string(v))
                        sodium_memzero((char *) json_string_value(v), json_string_length(v));
        }
        if (r < 0 && r != -ENOENT)
                log_emit(LOG_LEVEL_WARN, log_ctx, "sandbox %s: the node did not take its secrets: %s", sandbox_id,
                         err[0] ? err : api_error_default_message(r));
        else
                log_emit(LOG_LEVEL_INFO, log_ctx, "sandbox %s: %zu secret(s) handed to the node", sandbox_id,
                         json_array_size(set));
        return r;
}

void api_secrets_push_running(const struct daemon_config *config, struct store *store, const char *node,
                              const char *log_ctx) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        int r = store_sandbox_list_node(store, node, STORE_LIST_MAX, &a, &n);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, log_ctx, "store: failed to list sandboxes: %m");
                return;
        }
        for (size_t i = 0; i < n; i++)
                if (strcmp(a[i].state, "running") == 0 || strcmp(a[i].state, "paused") == 0 ||
                    strcmp(a[i].state, "recovering") == 0)
                        (void) api_secrets_push(config, store, a[i].id, false, log_ctx);
        store_sandbox_array_free(a, n);
}

/* ---- attaching to a new sandbox ---- */

void api_secret_attach_release(struct api_secret_attach *at) {
        if (!at)
                return;
        for (size_t i = 0; i < at->n; i++)
                free(at->names[i]);
        *at = (struct api_secret_attach){ 0 };
}

static int new_placeholder(char out[SECRETREQ_PLACEHOLDER_LEN + 1]) {
        uint8_t b[16];
        randombytes_buf(b, sizeof b);
        memcpy(out, SECRETREQ_PLACEHOLDER_PREFIX, sizeof SECRETREQ_PLACEHOLDER_PREFIX - 1);
        sodium_bin2hex(out + sizeof SECRETREQ_PLACEHOLDER_PREFIX - 1, 33, b, sizeof b);
        return 0;
}

int api_secrets_prepare(struct api_ctx *ctx, const char *tenant_id, const json_t *names, json_t *env,
                        struct api_secret_attach *ret) {
        _cleanup_(api_secret_attach_release) struct api_secret_attach at = { 0 };
        if (!names || json_is_null(names)) {
                *ret = at;
                return 0;
        }
        if (!json_is_array(names) || json_array_size(names) > STORE_SANDBOX_SECRETS_MAX)
                return api_fail(ctx, -EINVAL, "field 'secrets' must be an array of at most %d secret names",
                                STORE_SANDBOX_SECRETS_MAX);
        size_t i;
        json_t *e;
        json_array_foreach(names, i, e) {
                const char *name = json_string_value(e);
                if (!name || !credstore_name_is_valid(name) || strlen(name) != json_string_length(e))
                        return api_fail(ctx, -EINVAL, "field 'secrets[%zu]' must be a secret name", i);
                for (size_t k = 0; k < at.n; k++)
                        if (strcmp(at.names[k], name) == 0)
                                return api_fail(ctx, -EINVAL, "field 'secrets': '%s' is named twice", name);
                _cleanup_(credstore_meta_release) struct credstore_meta m = { 0 };
                int r = creds ? credstore_get(creds, tenant_id, name, &m, NULL, NULL) : -ENOTCONN;
                if (r == -ENOENT)
                        return api_fail(ctx, -EINVAL, "field 'secrets': no secret '%s'", name);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to read secret %s: %m", name);
                if (m.expires_at > 0 && m.expires_at <= now_s())
                        return api_fail(ctx, -EINVAL, "field 'secrets': secret '%s' has expired", name);
                if (m.sandbox_id)
                        return api_fail(ctx, -EINVAL,
                                        "field 'secrets': secret '%s' is narrowed to sandbox %s, not a new one", name,
                                        m.sandbox_id);
                secretreq_env_name(name, at.env[at.n], sizeof at.env[at.n]);
                if (json_object_get(env, at.env[at.n]))
                        return api_fail(ctx, -EINVAL,
                                        "field 'secrets': '%s' would set env %s, which 'env' sets too", name,
                                        at.env[at.n]);
                new_placeholder(at.placeholder[at.n]);
                at.names[at.n] = strdup(name);
                if (!at.names[at.n])
                        return -ENOMEM;
                at.n++;
        }
        for (size_t k = 0; k < at.n; k++)
                if (json_object_set_new(env, at.env[k], json_string(at.placeholder[k])) < 0)
                        return -ENOMEM;
        *ret = at;
        at = (struct api_secret_attach){ 0 };
        return 0;
}

int api_secrets_record(struct api_ctx *ctx, const char *tenant_id, const char *sandbox_id,
                       const struct api_secret_attach *at) {
        for (size_t i = 0; i < at->n; i++) {
                struct store_sandbox_secret a = { .sandbox_id = (char *) sandbox_id,
                                                  .name = at->names[i],
                                                  .placeholder = (char *) at->placeholder[i],
                                                  .env_name = (char *) at->env[i] };
                int r = store_sandbox_secret_insert(ctx->store, tenant_id, &a);
                if (r == -ENOENT)
                        return api_fail(ctx, -EINVAL, "field 'secrets': no secret '%s'", at->names[i]);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to attach secret %s: %m",
                                         at->names[i]);
        }
        return 0;
}

void api_secrets_attached(struct api_ctx *ctx, const char *tenant_id, const char *sandbox_id,
                          const struct api_secret_attach *at) {
        for (size_t i = 0; i < at->n; i++)
                api_audit_record(ctx, "secret.attach", tenant_id, sandbox_id, at->names[i]);
        if (at->n > 0)
                (void) api_secrets_push(ctx->config, ctx->store, sandbox_id, true, ctx->log_ctx);
}

/* ---- the resource ---- */

int api_secret_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        _cleanup_(secretreq_release) struct secretreq q = { 0 };
        int r = secretreq_parse(body, now_s(), &q, ctx->err);
        if (r < 0)
                return r;
        const char *tenant_id;
        if ((r = api_scope_of(ctx, q.tenant, "secrets", &tenant_id)) < 0)
                return r;
        if (!creds)
                return api_fail(ctx, -EIO, "the credential store is not available");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if (q.sandbox) {
                r = store_sandbox_get(ctx->store, q.sandbox, &sb);
                if (r == -ENOENT ||
                    (r >= 0 && (!api_tenant_may_see(ctx, sb.tenant_id) || !same_scope(sb.tenant_id, tenant_id))))
                        return api_fail(ctx, -EINVAL, "field 'sandbox': no sandbox '%.64s' in this scope", q.sandbox);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read sandbox: %m");
        }
        _cleanup_free_ char *spec = json_dumps(q.spec, JSON_COMPACT | JSON_SORT_KEYS);
        if (!spec)
                return -ENOMEM;
        struct credstore_meta m = { .tenant_id = (char *) tenant_id,
                                    .name = q.name,
                                    .sandbox_id = q.sandbox,
                                    .spec = spec,
                                    .expires_at = q.expires_at,
                                    .created_by = (char *) ctx->key_id };
        r = credstore_put(creds, &m, q.value, q.value_len);
        if (r == -EEXIST)
                return api_fail(ctx, -EEXIST, "a secret '%s' exists already", q.name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to store secret %s: %m", q.name);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "secret %s created in scope %s", q.name, tenant_id ?: "admin");
        api_audit_record(ctx, "secret.create", tenant_id, q.sandbox, q.name);

        /* narrowed to a sandbox that exists: attached to it at once (its
         * guest did not get the env variable; the placeholder is listed
         * by GET /v1/sandboxes/{id}/secrets) */
        if (q.sandbox) {
                _cleanup_(api_secret_attach_release) struct api_secret_attach at = { .n = 1 };
                at.names[0] = strdup(q.name);
                if (!at.names[0])
                        return -ENOMEM;
                secretreq_env_name(q.name, at.env[0], sizeof at.env[0]);
                new_placeholder(at.placeholder[0]);
                if ((r = api_secrets_record(ctx, tenant_id, q.sandbox, &at)) < 0)
                        return r;
                api_secrets_attached(ctx, tenant_id, q.sandbox, &at);
        }
        _cleanup_(credstore_meta_release) struct credstore_meta got = { 0 };
        r = credstore_get(creds, tenant_id, q.name, &got, NULL, NULL);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to read secret %s back: %m", q.name);
        return api_reply_json(ret, MHD_HTTP_CREATED, secret_json(&got));
}

int api_secret_list(struct api_ctx *ctx, const char *tenant_q, struct api_reply *ret) {
        const char *tenant_id;
        int r = api_scope_of(ctx, tenant_q, "secrets", &tenant_id);
        if (r < 0)
                return r;
        if (!creds)
                return api_fail(ctx, -EIO, "the credential store is not available");
        struct credstore_meta *a = NULL;
        size_t n = 0;
        r = credstore_list(creds, tenant_id, SECRETS_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to list secrets: %m");
        json_t *list = api_rows_json(a, n, secret_json);
        credstore_meta_array_free(a, n);
        return api_reply_list(ret, "secrets", list);
}

static int secret_lookup(struct api_ctx *ctx, const char *name, const char *tenant_q, const char **ret_scope,
                         struct credstore_meta *ret) {
        int r = api_scope_of(ctx, tenant_q, "secrets", ret_scope);
        if (r < 0)
                return r;
        if (!creds)
                return api_fail(ctx, -EIO, "the credential store is not available");
        r = credstore_name_is_valid(name) ? credstore_get(creds, *ret_scope, name, ret, NULL, NULL) : -ENOENT;
        if (r == -ENOENT)
                return api_fail(ctx, -ENOENT, "secret '%.64s' not found", name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to read secret: %m");
        return 0;
}

int api_secret_get(struct api_ctx *ctx, const char *name, const char *tenant_q, struct api_reply *ret) {
        _cleanup_(credstore_meta_release) struct credstore_meta m = { 0 };
        const char *scope;
        int r = secret_lookup(ctx, name, tenant_q, &scope, &m);
        if (r < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, secret_json(&m));
}

int api_secret_delete(struct api_ctx *ctx, const char *name, const char *tenant_q, struct api_reply *ret) {
        _cleanup_(credstore_meta_release) struct credstore_meta m = { 0 };
        const char *scope;
        int r = secret_lookup(ctx, name, tenant_q, &scope, &m);
        if (r < 0)
                return r;
        char **users = NULL;
        size_t n = 0;
        r = store_secret_users(ctx->store, scope, name, STORE_LIST_MAX, &users, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read who uses %s: %m", name);
        r = credstore_delete(creds, scope, name);
        if (r < 0) {
                store_string_array_free(users, n);
                if (r == -ENOENT)
                        return api_fail(ctx, -ENOENT, "secret '%.64s' not found", name);
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to delete secret %s: %m", name);
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "secret %s deleted from scope %s (%zu sandbox(es) lose it)", name,
                 scope ?: "admin", n);
        api_audit_record(ctx, "secret.delete", scope, NULL, name);
        /* the sandboxes that had it lose it now, not at their next start */
        for (size_t i = 0; i < n; i++)
                (void) api_secrets_push(ctx->config, ctx->store, users[i], true, ctx->log_ctx);
        store_string_array_free(users, n);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int api_sandbox_secrets_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        struct store_sandbox_secret *a = NULL;
        size_t n = 0;
        r = store_sandbox_secret_list(ctx->store, id, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read its secrets: %m");
        json_t *list = json_array();
        for (size_t i = 0; list && i < n; i++)
                json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "name", a[i].name, "env", a[i].env_name,
                                                      "placeholder", a[i].placeholder));
        store_sandbox_secret_array_free(a, n);
        _cleanup_(json_decrefp) json_t *o = json_pack("{s:o}", "secrets", list);
        if (!o)
                return -ENOMEM;
        /* what the node holds in memory now (names only), when it holds
         * the sandbox: null otherwise */
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.secrets.get", "id", id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        r = req ? nodes_sandbox_call(id, ctx->config->node_timeout_s, req, &rep, err) : -ENOMEM;
        json_t *names = r >= 0 ? json_object_get(rep, "names") : NULL;
        json_object_set(o, "node", json_is_array(names) ? names : json_null());
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = TAKE_PTR(o) };
        return 0;
}

int api_secrets_fork(struct api_ctx *ctx, const char *parent_id, const char *child_id) {
        int r = store_sandbox_secret_copy(ctx->store, parent_id, child_id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to give fork %s the secrets: %m",
                                 child_id);
        return 0;
}
