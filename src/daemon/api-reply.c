/* SPDX-License-Identifier: Apache-2.0 */
/* The handlers' common ground (api-reply.h): a leaf, below every api*.c. */
#include "api-reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store.h"
#include "util.h"

int api_fail(struct api_ctx *ctx, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
        va_end(ap);
        return r;
}

void api_reply_release(struct api_reply *r) {
        if (!r)
                return;
        json_decref(r->body);
        if (r->response)
                MHD_destroy_response(r->response);
        *r = (struct api_reply){ 0 };
}

int api_reply_json(struct api_reply *ret, unsigned status, json_t *body) {
        if (!body)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = status, .body = body };
        return 0;
}

int api_reply_empty(struct api_reply *ret) {
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int api_read_fail(struct api_ctx *ctx, int r, const char *what, const char *name) {
        if (r == -ENOENT)
                return api_fail(ctx, r, "%s '%.64s' not found", what, name);
        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read %s: %m", what);
}

int api_reply_list(struct api_reply *ret, const char *field, json_t *arr) {
        if (!arr)
                return -ENOMEM;
        return api_reply_json(ret, MHD_HTTP_OK, json_pack("{s:o}", field, arr));
}

void api_format_time(int64_t ms, char *buf, size_t n) {
        time_t t = (time_t) (ms / 1000);
        struct tm tm;
        char tbuf[32];
        gmtime_r(&t, &tm);
        strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf, n, "%s.%03dZ", tbuf, (int) (ms % 1000));
}

bool api_tenant_may_see(const struct api_ctx *ctx, const char *tenant_id) {
        if (!ctx->tenant_id)
                return true;
        return tenant_id && strcmp(ctx->tenant_id, tenant_id) == 0;
}

int api_tenant_check(struct api_ctx *ctx, const char *field, const char *id) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r = store_tenant_get(ctx->store, id, &t);
        if (r == -ENOENT)
                return api_fail(ctx, -EINVAL, "%s: no tenant '%.64s'", field, id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read tenant: %m");
        return 0;
}

int api_scope_of(struct api_ctx *ctx, const char *given, const char *what, const char **ret) {
        if (!given || !*given) {
                *ret = ctx->tenant_id;
                return 0;
        }
        if (ctx->tenant_id) {
                if (strcmp(given, ctx->tenant_id) != 0)
                        return api_fail(ctx, -EPERM, "'tenant': a tenant key manages its own tenant's %s",
                                        what);
                *ret = ctx->tenant_id;
                return 0;
        }
        if (!name_is_valid(given))
                return api_fail(ctx, -EINVAL, "'tenant' must be a tenant id");
        int r = api_tenant_check(ctx, "'tenant'", given);
        if (r < 0)
                return r;
        *ret = given;
        return 0;
}

json_t *api_event_json(const struct store_event *e) {
        char ts[48];
        api_format_time(e->ts_ms, ts, sizeof ts);
        json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:I}", "id", (json_int_t) e->id, "type", e->type,
                              "sandbox_id", e->sandbox_id, "ts", ts, "ts_ms", (json_int_t) e->ts_ms);
        if (o && e->state)
                json_object_set_new(o, "state", json_string(e->state));
        if (o && e->previous)
                json_object_set_new(o, "previous", json_string(e->previous));
        if (o && e->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(e->tenant_id));
        json_t *detail = o && e->detail ? json_loads(e->detail, 0, NULL) : NULL;
        if (json_is_object(detail))
                json_object_set_new(o, "detail", detail);
        else
                json_decref(detail);
        return o;
}

/* Looks up a sandbox row, turning "no row" into a 404 with a message.
 * Another tenant's sandbox is "no row" too, with the same message. */
int api_sandbox_lookup(struct api_ctx *ctx, const char *id, struct store_sandbox *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(ctx->store, id, &sb);
        if (r >= 0 && !api_tenant_may_see(ctx, sb.tenant_id))
                r = -ENOENT;
        if (r < 0)
                return api_read_fail(ctx, r, "sandbox", id);
        *ret = sb;
        sb = (struct store_sandbox){ 0 };
        return 0;
}

json_t *api_sandbox_row_json(const struct store_sandbox *sb) {
        char ts[48];
        api_format_time(sb->created_at, ts, sizeof ts);
        json_t *md = json_loads(sb->metadata, 0, NULL);
        json_t *keys = json_loads(sb->env_keys, 0, NULL);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "id", sb->id, "template", sb->template_name, "state",
                              sb->state, "created_at", ts, "metadata", md ? md : json_object(), "env_keys",
                              keys ? keys : json_array());
        if (o && sb->error)
                json_object_set_new(o, "error", json_string(sb->error));
        if (o)
                json_object_set_new(o, "desired_state", json_string(sb->desired_state ? sb->desired_state : "running"));
        json_t *policy = sb->snapshot_policy ? json_loads(sb->snapshot_policy, 0, NULL) : NULL;
        if (o && policy)
                json_object_set_new(o, "snapshot_policy", policy);
        else
                json_decref(policy);
        if (o && sb->has_idle_timeout)
                json_object_set_new(o, "idle_timeout_s", json_integer((json_int_t) sb->idle_timeout_s));
        if (o && sb->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(sb->tenant_id));
        /* where it runs: a node of the cluster, or this machine's own */
        if (o)
                json_object_set_new(o, "node", json_string(sb->node ?: API_LOCAL_NODE));
        if (o && sb->expires_at) {
                char exp[48];
                api_format_time(sb->expires_at, exp, sizeof exp);
                json_object_set_new(o, "expires_at", json_string(exp));
        }
        /* also while its clock stands (suspended): what its end will do */
        if (o && (sb->expires_at || sb->expiry_s))
                json_object_set_new(o, "on_expiry", json_string(sb->on_expiry ?: "delete"));
        /* its own size, when smaller than its template's */
        if (o && sb->memory_mib)
                json_object_set_new(o, "memory_mib", json_integer((json_int_t) sb->memory_mib));
        if (o && sb->vcpus)
                json_object_set_new(o, "vcpus", json_integer((json_int_t) sb->vcpus));
        return o;
}
