/* SPDX-License-Identifier: Apache-2.0 */
/*
 * /v1/webhooks (docs/webhooks.md): an owner's webhooks, made, listed and
 * deleted, and each one's delivery log. The deliveries are webhook.c's;
 * these handlers only read and write the store, so none of them waits on
 * an endpoint (a new webhook's host is resolved once, to check it).
 */
#include "api.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macros.h"
#include "util.h"
#include "webhook.h"

#define DELIVERIES_DEFAULT 100
#define DELIVERIES_MAX 500

static json_t *webhook_json(const struct store_webhook *w) {
        char ts[48];
        api_format_time(w->created_at, ts, sizeof ts);
        json_t *events = json_array();
        if (!events)
                return NULL;
        if (strcmp(w->events, "*") == 0)
                json_array_append_new(events, json_string("*"));
        else
                for (const char *p = w->events; *p;) {
                        const char *e = strchrnul(p, ',');
                        json_array_append_new(events, json_stringn(p, (size_t) (e - p)));
                        p = *e ? e + 1 : e;
                }
        json_t *o = json_pack("{s:s, s:s, s:o, s:s, s:I, s:I, s:i}", "id", w->id, "url", w->url, "events",
                              events, "created_at", ts, "delivered", (json_int_t) w->delivered, "failed",
                              (json_int_t) w->failed, "attempts", w->attempts);
        if (!o)
                return NULL;
        json_object_set_new(o, "tenant_id", w->tenant_id ? json_string(w->tenant_id) : json_null());
        json_object_set_new(o, "last_error", w->last_error ? json_string(w->last_error) : json_null());
        if (w->attempts > 0 && w->next_at > 0) {
                api_format_time(w->next_at, ts, sizeof ts);
                json_object_set_new(o, "next_attempt_at", json_string(ts));
        }
        return o;
}

static json_t *delivery_json(const struct store_webhook_delivery *d) {
        char ts[48];
        api_format_time(d->ts_ms, ts, sizeof ts);
        json_t *o = json_pack("{s:I, s:I, s:s, s:s, s:i, s:i, s:I, s:b}", "id", (json_int_t) d->id,
                              "event_id", (json_int_t) d->event_id, "event_type", d->event_type, "ts", ts,
                              "attempt", d->attempt, "status", d->status, "duration_ms",
                              (json_int_t) d->duration_ms, "delivered", !d->error);
        if (o && d->sandbox_id)
                json_object_set_new(o, "sandbox_id", json_string(d->sandbox_id));
        if (o && d->error)
                json_object_set_new(o, "error", json_string(d->error));
        return o;
}

int api_webhook_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        json_t *url = json_object_get(body, "url"), *tenant = json_object_get(body, "tenant"),
               *secret = json_object_get(body, "secret");
        if (!json_is_string(url))
                return api_fail(ctx, -EINVAL,
                                "field 'url' is required: the http:// or https:// URL to POST to");
        if ((tenant && !json_is_string(tenant)) || (secret && !json_is_string(secret)))
                return api_fail(ctx, -EINVAL, "fields 'tenant' and 'secret' must be strings");
        const char *owner;
        int r = api_scope_of(ctx, json_string_value(tenant), "webhooks", &owner);
        if (r < 0)
                return r;
        _cleanup_free_ char *events = NULL;
        _cleanup_(webhook_secret_freep) char *sec = NULL;
        if ((r = webhook_events_parse(json_object_get(body, "events"), &events, ctx->err, sizeof ctx->err)) <
                    0 ||
            (r = webhook_secret_take(json_string_value(secret), &sec, ctx->err, sizeof ctx->err)) < 0)
                return r;
        struct webhook_target t;
        r = webhook_target_check(&ctx->config->webhook_platform, json_string_value(url), &t, ctx->err,
                                 sizeof ctx->err);
        if (r == -EACCES || r == -EADDRNOTAVAIL)
                return api_fail(ctx, -EINVAL, "field 'url': %s", ctx->err);
        if (r < 0)
                return r;

        char id[32];
        if ((r = random_id("wh-", 8, id, sizeof id)) < 0)
                return r;
        /* kept sealed: the store's readers cannot sign as Airlock */
        _cleanup_free_ char *sealed = NULL;
        uint8_t key[CREDSTORE_KEY_SIZE];
        r = webhook_key_load(ctx->config, key);
        if (r >= 0)
                r = webhook_secret_seal(key, owner, id, sec, &sealed);
        sodium_memzero(key, sizeof key);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "failed to seal a webhook's secret: %m");
        struct store_webhook w = {.id = id,
                                  .tenant_id = (char *) owner,
                                  .url = (char *) json_string_value(url),
                                  .events = events,
                                  .secret = sealed,
                                  .created_at = now_unix_ms()};
        r = store_webhook_insert(ctx->store, &w);
        if (r == -EDQUOT)
                return api_fail(ctx, -EDQUOT, "%s has %d webhooks already, the most one owner may have",
                                owner ? owner : "the admin", STORE_WEBHOOKS_MAX);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to add a webhook: %m");
        _cleanup_(store_webhook_release) struct store_webhook got = {0};
        if ((r = store_webhook_get(ctx->store, id, &got)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx,
                                 "store: failed to read webhook %s back: %m", id);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "webhook %s to %s://%s:%u for %s in scope %s", id,
                 t.https ? "https" : "http", t.host, t.port, events, owner ?: "admin");
        json_t *o = webhook_json(&got);
        /* the secret is shown once, here: the owner verifies with it */
        if (o)
                json_object_set_new(o, "secret", json_string(sec));
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int api_webhook_list(struct api_ctx *ctx, const char *tenant_q, struct api_reply *ret) {
        const char *owner;
        int r = api_scope_of(ctx, tenant_q, "webhooks", &owner);
        if (r < 0)
                return r;
        struct store_webhook *w = NULL;
        size_t n = 0;
        if ((r = store_webhook_list(ctx->store, false, owner, &w, &n)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list webhooks: %m");
        json_t *list = api_rows_json(w, n, webhook_json);
        store_webhook_array_free(w, n);
        return api_reply_list(ret, "webhooks", list);
}

/* The webhook id as the caller may see it (another tenant's is a 404 too). */
static int lookup(struct api_ctx *ctx, const char *id, struct store_webhook *ret) {
        int r = store_webhook_get(ctx->store, id, ret);
        if (r >= 0 && !api_tenant_may_see(ctx, ret->tenant_id)) {
                store_webhook_release(ret);
                r = -ENOENT;
        }
        return r < 0 ? api_read_fail(ctx, r, "webhook", id) : 0;
}

int api_webhook_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_webhook_release) struct store_webhook w = {0};
        int r = lookup(ctx, id, &w);
        return r < 0 ? r : api_reply_json(ret, MHD_HTTP_OK, webhook_json(&w));
}

int api_webhook_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_webhook_release) struct store_webhook w = {0};
        int r = lookup(ctx, id, &w);
        if (r < 0)
                return r;
        r = store_webhook_delete(ctx->store, id);
        if (r < 0)
                return api_read_fail(ctx, r, "webhook", id);
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "webhook %s deleted", id);
        *ret = (struct api_reply){.status = MHD_HTTP_NO_CONTENT};
        return 0;
}

int api_webhook_deliveries(struct api_ctx *ctx, const char *id, const char *limit_s, const char *before_s,
                           struct api_reply *ret) {
        uint64_t limit = DELIVERIES_DEFAULT, before = 0;
        if (limit_s && (parse_u64(limit_s, DELIVERIES_MAX, &limit) < 0 || limit == 0))
                return api_fail(ctx, -EINVAL, "query parameter 'limit' must be 1-%d", DELIVERIES_MAX);
        if (before_s && parse_u64(before_s, INT64_MAX, &before) < 0)
                return api_fail(ctx, -EINVAL, "query parameter 'before' must be a delivery id");
        _cleanup_(store_webhook_release) struct store_webhook w = {0};
        int r = lookup(ctx, id, &w);
        if (r < 0)
                return r;
        struct store_webhook_delivery *d = NULL;
        size_t n = 0;
        if ((r = store_webhook_delivery_list(ctx->store, id, (int64_t) before, (size_t) limit, &d, &n)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read deliveries: %m");
        json_t *list = api_rows_json(d, n, delivery_json);
        store_webhook_delivery_array_free(d, n);
        return api_reply_list(ret, "deliveries", list);
}
