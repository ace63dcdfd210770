/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenants and their API keys: POST/GET /v1/tenants, GET/DELETE
 * /v1/tenants/{id}, GET/PUT/DELETE /v1/tenants/{id}/network (the default
 * egress policy of its new sandboxes), POST/GET /v1/tenants/{id}/keys,
 * DELETE /v1/keys/{id}.
 * Admin only (http.c answers 403 to a tenant key before these run). A key
 * is shown once, in the reply that made it; only its SHA-256 is stored.
 * Also the capability signing key: GET/POST /v1/capability-keys.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "auth.h"
#include "datakey.h"
#include "dataplane.h"
#include "log.h"
#include "macros.h"
#include "util.h"

/* Reads the optional string field "name": absent or null leaves *ret NULL;
 * otherwise 1-64 of [A-Za-z0-9._-], not starting with '.'. */
static int body_name(struct api_ctx *ctx, const json_t *body, bool required, const char **ret) {
        json_t *v = json_object_get(body, "name");
        if (!v || json_is_null(v)) {
                if (required)
                        return api_fail(ctx, -EINVAL, "field 'name' is required");
                *ret = NULL;
                return 0;
        }
        if (!json_is_string(v) || !name_is_valid(json_string_value(v)))
                return api_fail(ctx, -EINVAL, "field 'name' must be 1..64 characters of [A-Za-z0-9._-], "
                                              "not starting with '.'");
        *ret = json_string_value(v);
        return 0;
}

static json_t *tenant_json(const struct store_tenant *t) {
        char ts[48];
        api_format_time(t->created_at, ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s, s:s}", "id", t->id, "name", t->name, "created_at", ts);
        json_t *net = NULL;
        if (o && t->network && api_network_json(t->network, &net) >= 0)
                json_object_set_new(o, "network", net);
        return o;
}

static json_t *key_json(const struct store_api_key *k) {
        char ts[48];
        api_format_time(k->created_at, ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s?, s:s}", "id", k->id, "tenant_id", k->tenant_id, "created_at", ts);
        if (o && k->name)
                json_object_set_new(o, "name", json_string(k->name));
        return o;
}

/* The tenant named by a path; a 404 with a message when there is none. */
static int tenant_lookup(struct api_ctx *ctx, const char *id, struct store_tenant *ret) {
        int r = store_tenant_get(ctx->store, id, ret);
        if (r < 0)
                return api_read_fail(ctx, r, "tenant", id);
        return 0;
}

int api_tenant_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        const char *name;
        _cleanup_free_ char *network = NULL;
        int r = body_name(ctx, body, true, &name);
        if (r < 0)
                return r;
        json_t *net = json_object_get(body, "network");
        if (net && !json_is_null(net) && (r = api_network_parse(ctx, net, "network", false, &network)) < 0)
                return r;
        char id[32];
        if ((r = random_id("ten-", 8, id, sizeof id)) < 0)
                return r;
        struct store_tenant t = { .id = id, .name = (char *) name, .network = network };
        r = store_tenant_insert(ctx->store, &t, API_TENANTS_MAX);
        if (r == -EEXIST)
                return api_fail(ctx, r, "a tenant named '%s' exists already", name);
        if (r == -EDQUOT)
                return api_fail(ctx, r, "there are %d tenants already, the most allowed", API_TENANTS_MAX);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert tenant: %m");
        _cleanup_(store_tenant_release) struct store_tenant stored = { 0 };
        if ((r = tenant_lookup(ctx, id, &stored)) < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "created tenant %s (%s)", id, name);
        return api_reply_json(ret, MHD_HTTP_CREATED, tenant_json(&stored));
}

int api_tenant_list(struct api_ctx *ctx, struct api_reply *ret) {
        struct store_tenant *a = NULL;
        size_t n = 0;
        int r = store_tenant_list(ctx->store, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list tenants: %m");
        json_t *arr = api_rows_json(a, n, tenant_json);
        store_tenant_array_free(a, n);
        return api_reply_list(ret, "tenants", arr);
}

int api_tenant_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, tenant_json(&t));
}

int api_tenant_network_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        if (!t.network)
                return api_fail(ctx, -ENOENT, "tenant '%.64s' has no default network policy: its sandboxes get the "
                                              "node default", id);
        json_t *o;
        if ((r = api_network_json(t.network, &o)) < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

int api_tenant_network_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        _cleanup_free_ char *network = NULL;
        int r = api_network_parse(ctx, body, "network", true, &network);
        if (r < 0)
                return r;
        json_t *o;
        if ((r = api_network_json(network, &o)) < 0)
                return r;
        r = store_tenant_network_set(ctx->store, id, network);
        if (r < 0) {
                json_decref(o);
                if (r == -ENOENT)
                        return api_fail(ctx, r, "tenant '%.64s' not found", id);
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update tenant: %m");
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "tenant %s: default network policy set (mode %s)", id,
                 json_string_value(json_object_get(o, "mode")) ?: "?");
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

int api_tenant_network_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        int r = store_tenant_network_set(ctx->store, id, NULL);
        if (r == -ENOENT)
                return api_fail(ctx, r, "tenant '%.64s' not found", id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update tenant: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "tenant %s: default network policy removed (the node default applies)",
                 id);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int api_tenant_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        /* its built templates live on nodes: removed with DELETE
         * /v1/templates/NAME, not behind the owner's back */
        struct store_template *tpls = NULL;
        size_t n_tpls = 0;
        int r = store_template_list(ctx->store, id, 1, &tpls, &n_tpls);
        store_template_array_free(tpls, n_tpls);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list templates: %m");
        if (n_tpls > 0)
                return api_fail(ctx, -EBUSY, "tenant '%.64s' still owns templates: delete them first", id);
        r = store_tenant_delete(ctx->store, id);
        if (r == -ENOENT)
                return api_fail(ctx, r, "tenant '%.64s' not found", id);
        if (r == -EBUSY)
                return api_fail(ctx, r,
                                "tenant '%.64s' still owns sandboxes, images or volumes: delete them first",
                                id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete tenant: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "deleted tenant %s and its keys", id);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int api_key_create(struct api_ctx *ctx, const char *tenant_id, const json_t *body, struct api_reply *ret) {
        const char *name;
        int r = body_name(ctx, body, false, &name);
        if (r < 0)
                return r;
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        if ((r = tenant_lookup(ctx, tenant_id, &t)) < 0)
                return r;
        char id[32], key[AUTH_API_KEY_LEN + 1];
        if ((r = random_id("key-", 8, id, sizeof id)) < 0 || (r = auth_new_api_key(key, sizeof key)) < 0)
                return r;
        uint8_t hash[STORE_HASH_SIZE];
        auth_hash_token(key, hash);
        r = store_api_key_create(ctx->store, id, tenant_id, name, hash, API_KEYS_PER_TENANT_MAX);
        if (r == -ENOENT) /* the tenant went away meanwhile */
                r = api_fail(ctx, r, "tenant '%.64s' not found", tenant_id);
        else if (r == -EDQUOT)
                r = api_fail(ctx, r, "tenant '%.64s' has %d keys already, the most allowed", tenant_id,
                             API_KEYS_PER_TENANT_MAX);
        else if (r < 0)
                r = log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert key: %m");
        if (r < 0) {
                sodium_memzero(key, sizeof key);
                return r;
        }
        char ts[48];
        api_format_time((int64_t) (now_realtime_ns() / 1000000ULL), ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "key", key, "tenant_id", tenant_id, "created_at", ts);
        sodium_memzero(key, sizeof key);
        if (o && name)
                json_object_set_new(o, "name", json_string(name));
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "created key %s for tenant %s", id, tenant_id);
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int api_key_list(struct api_ctx *ctx, const char *tenant_id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, tenant_id, &t);
        if (r < 0)
                return r;
        struct store_api_key *a = NULL;
        size_t n = 0;
        r = store_api_key_list(ctx->store, tenant_id, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list keys: %m");
        json_t *arr = api_rows_json(a, n, key_json);
        store_api_key_array_free(a, n);
        return api_reply_list(ret, "keys", arr);
}

int api_key_delete(struct api_ctx *ctx, const char *key_id, struct api_reply *ret) {
        int r = store_api_key_delete(ctx->store, key_id);
        if (r == -ENOENT)
                return api_fail(ctx, r, "key '%.64s' not found", key_id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete key: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "revoked key %s", key_id);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

/* ---- the tenant's key-encryption key (docs/storage.md, "Encryption") ---- */

static json_t *kms_json(const char *tenant) {
        struct datakey_state st;
        if (datakey_state(tenant, &st) < 0)
                return NULL;
        json_t *o = json_pack("{s:s, s:s, s:s}", "tenant", tenant, "kind", st.kind, "state", st.state);
        if (o && st.version)
                json_object_set_new(o, "version", json_integer(st.version));
        if (o && st.label[0])
                json_object_set_new(o, "label", json_string(st.label));
        return o;
}

int api_tenant_kms_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        const char *kind = json_string_value(json_object_get(body, "kind"));
        json_t *label = json_object_get(body, "label"), *gen = json_object_get(body, "generate");
        if (!kind || (strcmp(kind, "local") != 0 && strcmp(kind, "pkcs11") != 0))
                return api_fail(ctx, -EINVAL, "field 'kind' must be \"local\" or \"pkcs11\"");
        if (gen && !json_is_boolean(gen))
                return api_fail(ctx, -EINVAL, "field 'generate' must be true or false");
        if (strcmp(kind, "local") == 0 && (label || gen))
                return api_fail(ctx, -EINVAL, "a local key takes no 'label' or 'generate'");
        if (strcmp(kind, "pkcs11") == 0 && !json_is_string(label))
                return api_fail(ctx, -EINVAL, "field 'label' (the key's label on the token) is required for pkcs11");
        if (strcmp(kind, "pkcs11") == 0 && !datakey_has_pkcs11())
                return api_fail(ctx, -EINVAL, "no PKCS#11 token is configured (AIRLOCK_PKCS11_MODULE, "
                                              "AIRLOCK_PKCS11_TOKEN, AIRLOCK_PKCS11_PIN_FILE)");
        r = datakey_set(t.id, kind, json_string_value(label), json_is_true(gen));
        if (r == -EINVAL)
                return api_fail(ctx, r, "field 'label' must be 1-56 of [A-Za-z0-9_-]");
        if (r == -ENOKEY)
                return api_fail(ctx, -ENOENT, "the token has no key labelled '%.64s' (set 'generate' to make one)",
                                json_string_value(label));
        if (r == -EEXIST)
                return api_fail(ctx, r, "the token has a key labelled '%.64s' already", json_string_value(label));
        if (r < 0)
                return api_fail(ctx, -EIO, "cannot set the key of tenant %s: %s", t.id, strerror(-r));
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "tenant %s: key-encryption key now %s%s%s", t.id, kind,
                 label ? " " : "", label ? json_string_value(label) : "");
        json_t *o = kms_json(t.id);
        return o ? api_reply_json(ret, MHD_HTTP_OK, o) : -ENOMEM;
}

int api_tenant_kms_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        json_t *o = kms_json(t.id);
        return o ? api_reply_json(ret, MHD_HTTP_OK, o) : api_fail(ctx, -EIO, "cannot read the tenant's key state");
}

int api_tenant_kms_rotate(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        unsigned version = 0;
        r = datakey_rotate(t.id, &version);
        if (r < 0)
                return api_fail(ctx, -EIO, "cannot make a new key for tenant %s: %s", t.id, strerror(-r));
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "tenant %s: key-encryption key rotated to version %u", t.id, version);
        json_t *o = kms_json(t.id);
        return o ? api_reply_json(ret, MHD_HTTP_CREATED, o) : -ENOMEM;
}

int api_tenant_kms_revoke(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = tenant_lookup(ctx, id, &t);
        if (r < 0)
                return r;
        r = datakey_revoke(t.id);
        if (r < 0)
                return api_fail(ctx, -EIO, "cannot revoke the key of tenant %s: %s", t.id, strerror(-r));
        log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "tenant %s: key-encryption key revoked and destroyed; its sealed "
                 "images cannot be opened any more", t.id);
        json_t *o = kms_json(t.id);
        return o ? api_reply_json(ret, MHD_HTTP_OK, o) : -ENOMEM;
}

/* ---- capability signing keys (docs/security.md, "Key rotation") ---- */

int api_capability_keys_get(struct api_ctx *ctx, struct api_reply *ret) {
        char kid[CAP_KID_MAX + 1];
        dataplane_current_kid(kid);
        return api_reply_json(ret, MHD_HTTP_OK, json_pack("{s:s}", "current", kid));
}

int api_capability_keys_rotate(struct api_ctx *ctx, struct api_reply *ret) {
        char kid[CAP_KID_MAX + 1], previous[CAP_KID_MAX + 1];
        int r = dataplane_rotate_key(ctx->config, kid, previous);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "capability key rotated to %s", kid);
        return api_reply_json(ret, MHD_HTTP_CREATED, json_pack("{s:s, s:s?}", "current", kid, "previous",
                                                      previous[0] ? previous : NULL));
}
