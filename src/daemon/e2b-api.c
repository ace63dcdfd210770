/* SPDX-License-Identifier: Apache-2.0 */
#include "e2b-api.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cap.h"
#include "dataplane.h"
#include "lifecycle.h"
#include "log.h"
#include "macros.h"
#include "nodes.h"
#include "nodeclient.h"
#include "util.h"

#define E2B_CLIENT_ID "airlock"
/* what getInfo() shows as the end of a sandbox without a lifetime: E2B has
 * no "never", and a date the SDK can parse keeps arithmetic on it sane */
#define E2B_NEVER "9999-12-31T23:59:59.000Z"

int e2b_percent_decode(const char *s, size_t len, bool form, char *out, size_t *ret_len) {
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == '%') {
                        if (i + 2 >= len)
                                return -EINVAL;
                        int hi = hex_digit_value(s[i + 1]), lo = hex_digit_value(s[i + 2]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        c = (char) (hi << 4 | lo);
                        i += 2;
                } else if (c == '+' && form)
                        c = ' ';
                if (c == 0)
                        return -EINVAL;
                out[o++] = c;
        }
        out[o] = 0;
        *ret_len = o;
        return 0;
}

/* ---- mapping ---- */

static const char *airlock_template(const struct daemon_config *config, const char *e2b_name) {
        for (size_t i = 0; i < config->n_e2b_templates; i++)
                if (strcmp(config->e2b_templates[i].e2b, e2b_name) == 0)
                        return config->e2b_templates[i].airlock;
        return e2b_name;
}

/* The E2B name an Airlock template goes by (its first alias), else its own. */
static const char *e2b_template(const struct daemon_config *config, const char *airlock_name) {
        for (size_t i = 0; i < config->n_e2b_templates; i++)
                if (strcmp(config->e2b_templates[i].airlock, airlock_name) == 0)
                        return config->e2b_templates[i].e2b;
        return airlock_name;
}

/* E2B knows two states: what is not running (or on its way back) is paused. */
static const char *e2b_state(const char *state) {
        static const char *const paused[] = { "paused", "pausing", "suspended", "suspending", "stopped", "stopping" };
        for (size_t i = 0; i < ARRAY_SIZE(paused); i++)
                if (state && strcmp(state, paused[i]) == 0)
                        return "paused";
        return "running";
}

static bool is_suspended(const char *state) {
        return strcmp(state, "suspended") == 0 || strcmp(state, "suspending") == 0;
}

/* A map of string values, at most one level (E2B's metadata and envVars). */
static int check_string_map(struct api_ctx *ctx, const json_t *o, const char *field) {
        if (!o)
                return 0;
        if (!json_is_object(o))
                return api_fail(ctx, -EINVAL, "'%s' must be an object of strings", field);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *) o, k, v) if (!json_is_string(v)) return api_fail(
                ctx, -EINVAL, "'%s.%.64s' must be a string", field, k);
        return 0;
}

/* E2B's timeout: whole seconds; 0 is "no lifetime". */
static int parse_timeout(struct api_ctx *ctx, const json_t *body, bool *ret_given, int64_t *ret_s) {
        const json_t *t = json_object_get(body, "timeout");
        *ret_given = t && !json_is_null(t);
        *ret_s = 0;
        if (!*ret_given)
                return 0;
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > E2B_TIMEOUT_S_MAX)
                return api_fail(ctx, -EINVAL, "'timeout' must be whole seconds, 0 to %d", E2B_TIMEOUT_S_MAX);
        *ret_s = json_integer_value(t);
        return 0;
}

/* The template sizes getInfo() reports, from the node (0 when unknown). */
static json_t *template_sizes(struct api_ctx *ctx) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "template.list");
        json_t *rep = NULL;
        char err[API_ERRMSG_MAX], addr[NODES_ADDR_MAX];
        if (!req || nodes_any_addr(addr) < 0 || node_call(addr, ctx->config->node_timeout_s, req, &rep, err) < 0)
                return NULL;
        return rep;
}

static json_int_t template_memory_mib(const json_t *sizes, const char *name) {
        const json_t *t;
        size_t i;
        json_array_foreach(json_object_get(sizes, "templates"), i, t) {
                const char *n = json_string_value(json_object_get(t, "name"));
                if (n && strcmp(n, name) == 0)
                        return json_integer_value(json_object_get(t, "memory_mib"));
        }
        return 0;
}

/* The Sandbox object of create, connect and fork replies. */
static json_t *sandbox_reply(struct api_ctx *ctx, const char *id, const char *template_name) {
        char token[65];
        if (e2b_access_token(id, token) < 0)
                return NULL;
        const char *domain = ctx->config->e2b_domain;
        /* the traffic token guards the sandbox's other ports (the code
         * interpreter's requests carry it): the same secret */
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:s}", "sandboxID", id, "templateID", template_name,
                         "alias", e2b_template(ctx->config, template_name), "clientID", E2B_CLIENT_ID, "envdVersion",
                         E2B_ENVD_VERSION, "envdAccessToken", token, "domain", domain[0] ? domain : NULL,
                         "trafficAccessToken", token);
}

/* A /v1 sandbox object as E2B's ListedSandbox (detail: SandboxDetail). */
static json_t *sandbox_info(struct api_ctx *ctx, const json_t *sb, const json_t *sizes, bool detail) {
        const char *id = json_string_value(json_object_get(sb, "id"));
        const char *tpl = json_string_value(json_object_get(sb, "template"));
        const char *state = json_string_value(json_object_get(sb, "state"));
        const char *started = json_string_value(json_object_get(sb, "created_at"));
        const char *ends = json_string_value(json_object_get(sb, "expires_at"));
        const char *on_expiry = json_string_value(json_object_get(sb, "on_expiry"));
        if (!id || !tpl || !state || !started)
                return NULL;
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:s, s:O, s:o}", "sandboxID", id,
                              "templateID", tpl, "alias", e2b_template(ctx->config, tpl), "clientID", E2B_CLIENT_ID,
                              "startedAt", started, "endAt", ends ? ends : E2B_NEVER, "state", e2b_state(state),
                              "cpuCount", 1, "memoryMB", template_memory_mib(sizes, tpl), "envdVersion",
                              E2B_ENVD_VERSION, "metadata", json_object_get(sb, "metadata") ?: json_object(),
                              "volumeMounts", e2b_volume_mounts_info(ctx, json_object_get(sb, "volumes")));
        if (o && detail) {
                const char *domain = ctx->config->e2b_domain;
                json_object_set_new(o, "domain", domain[0] ? json_string(domain) : json_null());
                json_object_set_new(o, "lifecycle",
                                    json_pack("{s:s, s:b}", "onTimeout",
                                              on_expiry && strcmp(on_expiry, "suspend") == 0 ? "pause" : "kill",
                                              "autoResume", true));
        }
        return o;
}

#define E2B_SETTLE_WAIT_MS (5 * 60 * 1000) /* a suspend under TCG, an upload */
#define E2B_SETTLE_POLL_MS 200

/* Reads the sandbox's row again until no verb is under way (E2B's verbs
 * wait for a pausing sandbox where Airlock's answer 409). */
static int settled(struct api_ctx *ctx, const char *id, struct store_sandbox *sb) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) E2B_SETTLE_WAIT_MS * 1000000ULL;
        for (;;) {
                int r = api_sandbox_lookup(ctx, id, sb);
                if (r < 0 || !lifecycle_state_is_transitional(sb->state) || strcmp(sb->state, "creating") == 0)
                        return r;
                if (now_monotonic_ns() >= deadline)
                        return api_fail(ctx, -EBUSY, "sandbox '%.64s' is still %s", id, sb->state);
                store_sandbox_release(sb);
                struct timespec ts = { 0, E2B_SETTLE_POLL_MS * 1000000L };
                nanosleep(&ts, NULL);
        }
}

/* Runs a /v1 lifecycle verb to its end: 0 once it succeeded. */
static int run_verb(struct api_ctx *ctx, const char *id, const char *verb) {
        struct api_reply rep = { 0 };
        int r = api_sandbox_verb(ctx, id, verb, NULL, NULL, true, &rep);
        if (r >= 0) {
                const char *state = json_string_value(json_object_get(rep.body, "state"));
                const json_t *e = json_object_get(rep.body, "error");
                if (!state || strcmp(state, "succeeded") != 0)
                        r = api_fail(ctx, -EIO, "%s failed: %s", verb,
                                     json_string_value(json_object_get(e, "message")) ?: "the operation did not finish");
        }
        api_reply_release(&rep);
        return r;
}

/* ---- egress ---- */

#define E2B_ALL_TRAFFIC "0.0.0.0/0"

/* One allowOut/denyOut entry as a rule of Airlock's policy: an address or
 * CIDR block by address, anything else a host name (docs/network.md). */
static json_t *network_rule(const char *entry) {
        bool addr = strspn(entry, "0123456789./") == strlen(entry) || strchr(entry, ':');
        if (!addr)
                return json_pack("{s:s}", "host", entry);
        if (strchr(entry, '/'))
                return json_pack("{s:s}", "cidr", entry);
        return json_pack("{s:s+}", "cidr", entry, strchr(entry, ':') ? "/128" : "/32");
}

static int network_list(struct api_ctx *ctx, const json_t *list, const char *field, bool *ret_all, json_t *rules) {
        if (!list)
                return 0;
        if (!json_is_array(list))
                return api_fail(ctx, -EINVAL,
                                "'network.%s' must be a list of addresses, CIDR blocks or host names", field);
        const json_t *e;
        size_t i;
        json_array_foreach(list, i, e) {
                const char *s = json_string_value(e);
                if (!s || !*s)
                        return api_fail(ctx, -EINVAL, "'network.%s' must be a list of addresses, CIDR blocks or host "
                                        "names", field);
                if (strcmp(s, E2B_ALL_TRAFFIC) == 0) {
                        *ret_all = true;
                        continue;
                }
                json_t *rule = network_rule(s);
                if (!rule || json_array_append_new(rules, rule) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/*
 * E2B's egress options as an Airlock policy (/v1's "network" body; the
 * gateway's parser checks what is in it). E2B's allowOut wins over its
 * denyOut, Airlock's deny over its allow, so: denyOut with all traffic and
 * an allowOut is an allowlist (no allowOut: deny-all); a denyOut without it
 * denies what it names and allows the rest, and an allowOut then would be
 * exceptions Airlock cannot make, refused; allowOut alone changes nothing.
 * allow_internet_access false is deny-all. *ret NULL: nothing asked for.
 */
static int network_policy(struct api_ctx *ctx, const json_t *net, const json_t *internet, json_t **ret) {
        *ret = NULL;
        static const char *const unsupported[] = { "rules", "egressProxy", "maskRequestHost", "httpsPorts" };
        for (size_t i = 0; net && i < ARRAY_SIZE(unsupported); i++) {
                const json_t *v = json_object_get(net, unsupported[i]);
                if (v && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0) &&
                    !(json_is_array(v) && json_array_size(v) == 0))
                        return api_fail(ctx, -EINVAL, "'network.%s' is not supported by Airlock (docs/e2b.md)",
                                        unsupported[i]);
        }
        if (net && json_is_true(json_object_get(net, "allowPublicTraffic")))
                return api_fail(ctx, -EINVAL, "'network.allowPublicTraffic': a sandbox's ports always need its "
                                "traffic token on Airlock (docs/e2b.md)");
        if (net && !json_is_object(net))
                return api_fail(ctx, -EINVAL, "'network' must be an object");
        _cleanup_(json_decrefp) json_t *allow = json_array(), *deny = json_array();
        bool allow_all = false, deny_all = false;
        int r;
        if (!allow || !deny)
                return -ENOMEM;
        if ((r = network_list(ctx, json_object_get(net, "allowOut"), "allowOut", &allow_all, allow)) < 0 ||
            (r = network_list(ctx, json_object_get(net, "denyOut"), "denyOut", &deny_all, deny)) < 0)
                return r;
        if (internet && !json_is_null(internet) && !json_is_boolean(internet))
                return api_fail(ctx, -EINVAL, "'allow_internet_access' must be a boolean");
        if (json_is_false(internet))
                deny_all = true;
        if (deny_all && !allow_all) {
                /* everything the allowlist does not name is denied already */
                *ret = json_array_size(allow) ? json_pack("{s:s, s:O}", "mode", "allowlist", "allow", allow)
                                              : json_pack("{s:s}", "mode", "deny-all");
                return *ret ? 0 : -ENOMEM;
        }
        if (json_array_size(deny) && json_array_size(allow))
                return api_fail(ctx, -EINVAL, "'network.allowOut' as exceptions to a 'denyOut' that is not all traffic "
                                "(" E2B_ALL_TRAFFIC ") is not supported: Airlock's deny rules win (docs/network.md)");
        if (json_array_size(deny))
                *ret = json_pack("{s:s, s:O}", "mode", "allow-all", "deny", deny);
        else if (net || internet)
                *ret = json_pack("{s:s}", "mode", "allow-all");
        return *ret || (!net && !internet) ? 0 : -ENOMEM;
}

/* ---- handlers ---- */

/* 200 with a JSON array and, when there is more, X-Next-Token. */
static int reply_page(const json_t *items, const char *next, struct api_reply *ret) {
        _cleanup_free_ char *text = json_dumps(items, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        if (!resp)
                return -ENOMEM;
        text = NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (next && next[0])
                MHD_add_response_header(resp, "X-Next-Token", next);
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
        return 0;
}

/* ---- snapshots: Airlock's images ---- */

/* The caller's image with this id or name; -ENOENT (message set) when none. */
static int snapshot_lookup(struct api_ctx *ctx, const char *id_or_name, struct store_image *ret) {
        if (!name_is_valid(id_or_name))
                return api_fail(ctx, -ENOENT, "snapshot '%.64s' not found", id_or_name);
        int r = api_image_lookup(ctx, id_or_name, ret);
        if (r == -ENOENT)
                r = api_image_find(ctx, id_or_name, ret);
        if (r == -ENOENT)
                return api_fail(ctx, r, "snapshot '%.64s' not found", id_or_name);
        return r;
}

static json_t *snapshot_info(const struct store_image *img) {
        return json_pack("{s:s, s:[s*]}", "snapshotID", img->id, "names", img->name);
}

int e2b_snapshot_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret) {
        const json_t *name = json_object_get(body, "name");
        if (name && !json_is_null(name) && !json_is_string(name))
                return api_fail(ctx, -EINVAL, "'name' must be a string");
        _cleanup_(json_decrefp) json_t *v1_body = json_object();
        if (!v1_body || (json_is_string(name) && json_object_set(v1_body, "name", (json_t *) name) < 0))
                return -ENOMEM;
        struct api_reply v1 = { 0 };
        int r = api_image_create(ctx, sandbox_id, v1_body, &v1);
        if (r < 0)
                return r;
        const json_t *o = v1.body;
        json_t *info = json_pack("{s:s, s:[s*]}", "snapshotID", json_string_value(json_object_get(o, "id")) ?: "",
                                 "names", json_string_value(json_object_get(o, "name")));
        api_reply_release(&v1);
        if (!info)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = MHD_HTTP_CREATED, .body = info };
        return 0;
}

int e2b_snapshot_list(struct api_ctx *ctx, const struct e2b_list_query *q, struct api_reply *ret) {
        uint64_t limit = E2B_LIST_LIMIT_DEFAULT;
        if (q->limit && (parse_u64(q->limit, E2B_LIST_LIMIT_MAX, &limit) < 0 || limit == 0))
                return api_fail(ctx, -EINVAL, "'limit' must be 1 to %d", E2B_LIST_LIMIT_MAX);
        /* the page after the image "<created_at ms>_<id>" (newest first) */
        uint64_t cur_at = 0;
        const char *cur_id = NULL;
        if (q->next_token && *q->next_token) {
                const char *us = strchr(q->next_token, '_');
                char at[24];
                size_t tl = us ? (size_t) (us - q->next_token) : 0;
                if (!us || tl == 0 || tl >= sizeof at || !name_is_valid(us + 1))
                        return api_fail(ctx, -EINVAL, "'nextToken' is not one this server gave out");
                memcpy(at, q->next_token, tl);
                at[tl] = 0;
                if (parse_u64(at, INT64_MAX, &cur_at) < 0)
                        return api_fail(ctx, -EINVAL, "'nextToken' is not one this server gave out");
                cur_id = us + 1;
        }
        struct store_image *a = NULL;
        size_t n = 0;
        int r = api_image_list_rows(ctx, q->sandbox_id && *q->sandbox_id ? q->sandbox_id : NULL, &a, &n);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *out = json_array();
        char next[96] = "";
        const struct store_image *last = NULL; /* the last one given */
        size_t taken = 0;
        for (size_t i = 0; out && i < n; i++) {
                const struct store_image *img = &a[i];
                if (q->name && *q->name && (!img->name || strcmp(img->name, q->name) != 0))
                        continue;
                if (cur_id && ((uint64_t) img->created_at > cur_at ||
                               ((uint64_t) img->created_at == cur_at && strcmp(img->id, cur_id) >= 0)))
                        continue;
                if (taken == limit) {
                        snprintf(next, sizeof next, "%lld_%s", (long long) last->created_at, last->id);
                        break;
                }
                if (json_array_append_new(out, snapshot_info(img)) < 0) {
                        store_image_array_free(a, n);
                        return -ENOMEM;
                }
                last = img;
                taken++;
        }
        store_image_array_free(a, n);
        if (!out)
                return -ENOMEM;
        return reply_page(out, next, ret);
}

int e2b_snapshot_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_image_release) struct store_image img = { 0 };
        int r = snapshot_lookup(ctx, id, &img);
        if (r < 0)
                return r;
        return api_image_delete(ctx, img.id, ret);
}

int e2b_sandbox_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        /* what Airlock cannot do is refused, never dropped */
        static const char *const unsupported[] = { "mcp", "iam" };
        for (size_t i = 0; i < ARRAY_SIZE(unsupported); i++) {
                const json_t *v = json_object_get(body, unsupported[i]);
                if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
                        return api_fail(ctx, -EINVAL, "'%s' is not supported by Airlock's E2B front door (docs/e2b.md)",
                                        unsupported[i]);
        }
        const json_t *tpl_j = json_object_get(body, "templateID");
        if (tpl_j && !json_is_string(tpl_j))
                return api_fail(ctx, -EINVAL, "'templateID' must be a string");
        const char *tpl = airlock_template(ctx->config, tpl_j ? json_string_value(tpl_j) : "base");
        /* not an alias: a snapshot's id or name makes the sandbox from it */
        _cleanup_(store_image_release) struct store_image image = { 0 };
        int k = tpl_j && tpl == json_string_value(tpl_j) ? snapshot_lookup(ctx, tpl, &image) : -ENOENT;
        if (k < 0 && k != -ENOENT)
                return k;
        if (k >= 0)
                tpl = image.template_name;
        ctx->err[0] = 0;
        const json_t *md = json_object_get(body, "metadata"), *env = json_object_get(body, "envVars");
        const json_t *internet = json_object_get(body, "allow_internet_access");
        const json_t *auto_pause = json_object_get(body, "autoPause");
        bool timeout_given;
        int64_t timeout_s;
        int r;
        if ((r = check_string_map(ctx, md, "metadata")) < 0 || (r = check_string_map(ctx, env, "envVars")) < 0 ||
            (r = parse_timeout(ctx, body, &timeout_given, &timeout_s)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *policy = NULL;
        if ((r = network_policy(ctx, json_object_get(body, "network"), internet, &policy)) < 0)
                return r;
        if (auto_pause && !json_is_boolean(auto_pause) && !json_is_null(auto_pause))
                return api_fail(ctx, -EINVAL, "'autoPause' must be a boolean");
        _cleanup_(json_decrefp) json_t *volumes = NULL;
        if ((r = e2b_volume_mounts(ctx, json_object_get(body, "volumeMounts"), &volumes)) < 0)
                return r;

        _cleanup_(json_decrefp) json_t *req = image.id ? json_pack("{s:s}", "image", image.id)
                                                       : json_pack("{s:s}", "template", tpl);
        if (!req)
                return -ENOMEM;
        if (md)
                json_object_set(req, "metadata", (json_t *) md);
        if (env)
                json_object_set(req, "env", (json_t *) env);
        if (policy)
                json_object_set(req, "network", policy);
        if (volumes)
                json_object_set(req, "volumes", volumes);
        /* a template still building: a retryable 503 saying how far it
         * got, well before the SDK's request times out (not a create that
         * blocks for the minutes a build takes) */
        if (!image.id)
                json_object_set_new(req, "template_wait_s", json_integer(API_SDK_TEMPLATE_WAIT_S));
        struct api_reply v1 = { 0 };
        r = api_sandbox_create(ctx, req, NULL, &v1);
        if (r < 0)
                return r;
        _cleanup_free_ char *id = strdup(json_string_value(json_object_get(v1.body, "id")) ?: "");
        api_reply_release(&v1);
        if (!id || !*id)
                return -ENOMEM;
        if (timeout_s > 0 &&
            (r = api_sandbox_set_lifetime(ctx, id, timeout_s,
                                          json_is_true(auto_pause) ? "suspend" : "delete")) < 0)
                return r;
        json_t *o = sandbox_reply(ctx, id, tpl);
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = MHD_HTTP_CREATED, .body = o };
        return 0;
}

int e2b_sandbox_metrics(struct api_ctx *ctx, const char *id, const char *start, const char *end,
                        struct api_reply *ret) {
        uint64_t from = 0, to = UINT64_MAX;
        if ((start && parse_u64(start, INT64_MAX, &from) < 0) || (end && parse_u64(end, INT64_MAX, &to) < 0))
                return api_fail(ctx, -EINVAL, "'start' and 'end' are Unix times in seconds");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        int64_t now_ms = now_unix_ms();
        uint64_t now_s = (uint64_t) now_ms / 1000;
        /* Airlock keeps no history: the sample of now, when it is asked
         * for and there is a VM to ask */
        if (strcmp(sb.state, "running") == 0 && from <= now_s && now_s <= to) {
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.metrics", "id", id);
                _cleanup_(json_decrefp) json_t *rep = NULL;
                if (!req)
                        return -ENOMEM;
                if ((r = dataplane_call(ctx->config, sb.tenant_id, id, CAP_ACCESS_EXEC, req, ctx->config->node_timeout_s,
                                        NULL, &rep, ctx->err)) < 0)
                        return r;
                const json_t *m = json_object_get(rep, "metrics");
                char ts[48];
                api_format_time(now_ms, ts, sizeof ts);
                json_t *o = json_pack("{s:s, s:I, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "timestamp", ts, "timestampUnix",
                                      (json_int_t) now_s, "cpuCount", json_object_get(m, "cpu_count"), "cpuUsedPct",
                                      json_object_get(m, "cpu_used_pct"), "memUsed", json_object_get(m, "mem_used"),
                                      "memTotal", json_object_get(m, "mem_total"), "memCache",
                                      json_object_get(m, "mem_cache"), "diskUsed", json_object_get(m, "disk_used"),
                                      "diskTotal", json_object_get(m, "disk_total"));
                if (!o || json_array_append_new(out, o) < 0)
                        return -ENOMEM;
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = json_incref(out) };
        return 0;
}

#define E2B_FORK_MAX 16 /* children of one fork request */

int e2b_sandbox_fork(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        bool given;
        int64_t timeout_s;
        int r = parse_timeout(ctx, body, &given, &timeout_s);
        if (r < 0)
                return r;
        const json_t *count_j = json_object_get(body, "count");
        json_int_t count = count_j && !json_is_null(count_j) ? json_integer_value(count_j) : 1;
        if ((count_j && !json_is_null(count_j) && !json_is_integer(count_j)) || count < 1 || count > E2B_FORK_MAX)
                return api_fail(ctx, -EINVAL, "'count' must be 1 to %d", E2B_FORK_MAX);
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = api_sandbox_lookup(ctx, id, &sb)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        /* one after another: the node forks a sandbox once at a time */
        for (json_int_t i = 0; i < count; i++) {
                struct api_reply v1 = { 0 };
                ctx->err[0] = 0;
                r = api_sandbox_verb(ctx, id, "fork", NULL, NULL, true, &v1);
                const json_t *op = v1.body;
                const char *state = json_string_value(json_object_get(op, "state"));
                const char *child = json_string_value(
                        json_object_get(json_object_get(json_object_get(op, "result"), "sandbox"), "id"));
                json_t *item;
                if (r >= 0 && state && strcmp(state, "succeeded") == 0 && child) {
                        if (timeout_s > 0)
                                (void) api_sandbox_set_lifetime(ctx, child, timeout_s, NULL);
                        item = json_pack("{s:o}", "sandbox", sandbox_reply(ctx, child, sb.template_name));
                } else {
                        const char *msg = r < 0 ? (ctx->err[0] ? ctx->err : api_error_default_message(r))
                                                : json_string_value(json_object_get(json_object_get(op, "error"),
                                                                                    "message"));
                        item = json_pack("{s:{s:i, s:s}}", "error", "code", r < 0 ? (int) api_error_status(r) : 500,
                                         "message", msg ?: "the fork did not finish");
                }
                api_reply_release(&v1);
                if (!item || json_array_append_new(out, item) < 0)
                        return -ENOMEM;
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_CREATED, .body = json_incref(out) };
        return 0;
}

int e2b_sandbox_update_network(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        _cleanup_(json_decrefp) json_t *policy = NULL;
        /* the update replaces the whole configuration: nothing named is allow-all */
        int r = network_policy(ctx, body, json_object_get(body, "allow_internet_access"), &policy);
        if (r < 0)
                return r;
        if (!policy && !(policy = json_pack("{s:s}", "mode", "allow-all")))
                return -ENOMEM;
        struct api_reply v1 = { 0 };
        if ((r = api_sandbox_network_put(ctx, id, policy, &v1)) < 0)
                return r;
        api_reply_release(&v1);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

/* Whether ports is what an allowOut host becomes: the default of a host
 * rule, [80, 443] (lib/netpolicy). */
static bool host_default_ports(const json_t *ports) {
        return json_array_size(ports) == 2 && json_integer_value(json_array_get(ports, 0)) == 80 &&
               json_integer_value(json_array_get(ports, 1)) == 443;
}

/* The entries of E2B's allowOut or denyOut for rules that are a plain host
 * or address block; false when a rule says more (other ports), which E2B's
 * lists cannot. */
static bool network_entries(const json_t *rules, json_t *out) {
        size_t i;
        const json_t *rule;
        json_array_foreach(rules, i, rule) {
                const json_t *host = json_object_get(rule, "host"), *ports = json_object_get(rule, "ports");
                const json_t *v = host ?: json_object_get(rule, "cidr");
                size_t plain = 1 + (host && ports && host_default_ports(ports));
                if (json_object_size(rule) != plain || !json_is_string(v) ||
                    json_array_append_new(out, json_string(json_string_value(v))) < 0)
                        return false;
        }
        return true;
}

/* The sandbox's egress policy the way E2B's getInfo() reads it: network
 * {allowOut, denyOut} and allowInternetAccess, onto o. A policy E2B's
 * lists cannot say (ports, other modes) is left out, not bent. */
static int network_info(struct api_ctx *ctx, const char *id, json_t *o) {
        _cleanup_free_ char *text = NULL;
        _cleanup_(json_decrefp) json_t *policy = NULL;
        int r = api_network_of_sandbox(ctx, id, &text);
        if (r < 0 || (r = api_network_json(text, &policy)) < 0)
                return r;
        const char *mode = json_string_value(json_object_get(policy, "mode")) ?: "";
        _cleanup_(json_decrefp) json_t *allow = json_array(), *deny = json_array();
        if (!allow || !deny)
                return -ENOMEM;
        bool internet = true, ok;
        if (strcmp(mode, "deny-all") == 0) {
                internet = false;
                ok = json_array_append_new(deny, json_string(E2B_ALL_TRAFFIC)) == 0;
        } else if (strcmp(mode, "allowlist") == 0)
                ok = network_entries(json_object_get(policy, "allow"), allow) &&
                     json_array_append_new(deny, json_string(E2B_ALL_TRAFFIC)) == 0;
        else if (strcmp(mode, "allow-all") == 0)
                ok = network_entries(json_object_get(policy, "deny"), deny);
        else
                ok = false;
        json_object_set_new(o, "allowInternetAccess", json_boolean(internet));
        if (!ok || (json_array_size(allow) == 0 && json_array_size(deny) == 0))
                return 0;
        json_t *net = json_object();
        if (!net || json_object_set_new(o, "network", net) < 0)
                return -ENOMEM;
        if (json_array_size(allow))
                json_object_set(net, "allowOut", allow);
        if (json_array_size(deny))
                json_object_set(net, "denyOut", deny);
        return 0;
}

int e2b_sandbox_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        struct api_reply v1 = { 0 };
        int r = api_sandbox_get(ctx, id, &v1);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *sizes = template_sizes(ctx);
        json_t *o = sandbox_info(ctx, v1.body, sizes, true);
        api_reply_release(&v1);
        if (!o)
                return -ENOMEM;
        if ((r = network_info(ctx, id, o)) < 0) {
                json_decref(o);
                return r;
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = o };
        return 0;
}

/* ?metadata=: "k=v&k2=v2" as a form decodes it, each key and value then
 * percent-decoded once more (the SDK encodes them before it builds the
 * form). NULL ret: none given. */
static int parse_metadata_filter(struct api_ctx *ctx, const char *q, json_t **ret) {
        *ret = NULL;
        if (!q || !*q)
                return 0;
        _cleanup_(json_decrefp) json_t *filter = json_object();
        size_t qlen = strlen(q);
        if (!filter || qlen > 4096)
                return filter ? api_fail(ctx, -EINVAL, "'metadata' is longer than 4096 bytes") : -ENOMEM;
        _cleanup_free_ char *a = malloc(qlen + 1), *b = malloc(qlen + 1);
        if (!a || !b)
                return -ENOMEM;
        for (const char *p = q; *p;) {
                size_t len = strcspn(p, "&");
                const char *eq = memchr(p, '=', len);
                size_t kl = eq ? (size_t) (eq - p) : len, n;
                char key[256];
                if (kl == 0 || e2b_percent_decode(p, kl, true, a, &n) < 0 || e2b_percent_decode(a, n, false, b, &n) < 0 ||
                    n >= sizeof key)
                        return api_fail(ctx, -EINVAL, "'metadata' must be key=value pairs joined by '&'");
                memcpy(key, b, n + 1);
                const char *v = eq ? eq + 1 : "";
                size_t vl = eq ? len - kl - 1 : 0;
                if (e2b_percent_decode(v, vl, true, a, &n) < 0 || e2b_percent_decode(a, n, false, b, &n) < 0)
                        return api_fail(ctx, -EINVAL, "'metadata' has a value that is not percent-encoded");
                json_object_set_new(filter, key, json_stringn(b, n));
                p += len + (p[len] == '&');
        }
        *ret = TAKE_PTR(filter);
        return 0;
}

static bool metadata_matches(const json_t *md, const json_t *filter) {
        const char *k;
        const json_t *want;
        json_object_foreach((json_t *) filter, k, want) {
                const json_t *have = json_object_get(md, k);
                if (!json_is_string(have) || !json_equal(have, want))
                        return false;
        }
        return true;
}

/* X-Next-Token: where the last page ended, as "<created_at>_<id>". */
struct cursor {
        char created_at[48];
        char id[64];
};

static int cmp_cursor(const json_t *sb, const struct cursor *c) {
        int k = strcmp(json_string_value(json_object_get(sb, "created_at")) ?: "", c->created_at);
        return k ? k : strcmp(json_string_value(json_object_get(sb, "id")) ?: "", c->id);
}

static int cmp_created(const void *a, const void *b) {
        const json_t *x = *(json_t *const *) a, *y = *(json_t *const *) b;
        int k = strcmp(json_string_value(json_object_get(x, "created_at")) ?: "",
                       json_string_value(json_object_get(y, "created_at")) ?: "");
        return k ? k : strcmp(json_string_value(json_object_get(x, "id")) ?: "",
                              json_string_value(json_object_get(y, "id")) ?: "");
}

int e2b_sandbox_list(struct api_ctx *ctx, const struct e2b_list_query *q, struct api_reply *ret) {
        bool want_running = true, want_paused = true;
        if (q->state && *q->state) {
                want_running = want_paused = false;
                for (const char *p = q->state; *p;) {
                        size_t len = strcspn(p, ",");
                        if (len == 7 && strncmp(p, "running", 7) == 0)
                                want_running = true;
                        else if (len == 6 && strncmp(p, "paused", 6) == 0)
                                want_paused = true;
                        else
                                return api_fail(ctx, -EINVAL, "'state' must list running and/or paused");
                        p += len + (p[len] == ',');
                }
        }
        uint64_t limit = E2B_LIST_LIMIT_DEFAULT;
        if (q->limit && (parse_u64(q->limit, E2B_LIST_LIMIT_MAX, &limit) < 0 || limit == 0))
                return api_fail(ctx, -EINVAL, "'limit' must be 1 to %d", E2B_LIST_LIMIT_MAX);
        bool asc = false;
        if (q->order && strcmp(q->order, "asc") != 0 && strcmp(q->order, "desc") != 0)
                return api_fail(ctx, -EINVAL, "'order' must be asc or desc");
        asc = q->order && strcmp(q->order, "asc") == 0;
        struct cursor cur = { "", "" };
        bool have_cursor = q->next_token && *q->next_token;
        if (have_cursor) {
                const char *us = strrchr(q->next_token, '_');
                size_t tl = us ? (size_t) (us - q->next_token) : 0;
                if (!us || tl == 0 || tl >= sizeof cur.created_at || strlen(us + 1) >= sizeof cur.id ||
                    !name_is_valid(us + 1))
                        return api_fail(ctx, -EINVAL, "'nextToken' is not one this server gave out");
                memcpy(cur.created_at, q->next_token, tl);
                snprintf(cur.id, sizeof cur.id, "%s", us + 1);
        }
        _cleanup_(json_decrefp) json_t *filter = NULL;
        int r = parse_metadata_filter(ctx, q->metadata, &filter);
        if (r < 0)
                return r;

        struct api_reply v1 = { 0 };
        if ((r = api_sandbox_list(ctx, NULL, &v1)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *all = json_incref(json_object_get(v1.body, "sandboxes"));
        api_reply_release(&v1);
        size_t n = json_array_size(all);
        _cleanup_free_ json_t **sel = calloc(n ? n : 1, sizeof *sel);
        if (!all || !sel)
                return -ENOMEM;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *sb = json_array_get(all, i);
                const char *st = json_string_value(json_object_get(sb, "state")) ?: "";
                if (strcmp(st, "creating") == 0 || strcmp(st, "archived") == 0 || strcmp(st, "deleting") == 0)
                        continue; /* not there for E2B (yet, or any more) */
                bool paused = strcmp(e2b_state(st), "paused") == 0;
                if ((paused && !want_paused) || (!paused && !want_running))
                        continue;
                if (filter && !metadata_matches(json_object_get(sb, "metadata"), filter))
                        continue;
                if (have_cursor && (asc ? cmp_cursor(sb, &cur) <= 0 : cmp_cursor(sb, &cur) >= 0))
                        continue;
                sel[m++] = sb;
        }
        qsort(sel, m, sizeof *sel, cmp_created);
        _cleanup_(json_decrefp) json_t *sizes = template_sizes(ctx);
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        size_t take = MIN(m, (size_t) limit);
        for (size_t k = 0; k < take; k++) {
                json_t *sb = sel[asc ? k : m - 1 - k];
                json_t *o = sandbox_info(ctx, sb, sizes, false);
                if (!o || json_array_append_new(out, o) < 0)
                        return -ENOMEM;
        }
        char next[sizeof cur.created_at + sizeof cur.id + 2] = "";
        if (take < m) {
                json_t *last = sel[asc ? take - 1 : m - take];
                snprintf(next, sizeof next, "%s_%s", json_string_value(json_object_get(last, "created_at")) ?: "",
                         json_string_value(json_object_get(last, "id")) ?: "");
        }
        return reply_page(out, next, ret);
}

int e2b_sandbox_kill(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = settled(ctx, id, &sb);
        return r < 0 ? r : api_sandbox_delete(ctx, id, NULL, false, ret);
}

int e2b_sandbox_set_timeout(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        bool given;
        int64_t timeout_s;
        int r = parse_timeout(ctx, body, &given, &timeout_s);
        if (r < 0)
                return r;
        if (!given)
                return api_fail(ctx, -EINVAL, "'timeout' is required");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = api_sandbox_lookup(ctx, id, &sb)) < 0)
                return r;
        /* a paused one has no clock running: its lifetime starts again
         * when it is connected to, from the timeout it keeps */
        if (is_suspended(sb.state))
                r = store_sandbox_expiry_set(ctx->store, id, 0, timeout_s, NULL);
        else
                r = api_sandbox_set_lifetime(ctx, id, timeout_s, NULL);
        if (r == -ENOENT)
                return api_fail(ctx, r, "sandbox '%.64s' not found", id);
        if (r < 0)
                return r;
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int e2b_sandbox_pause(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        const json_t *memory = json_object_get(body, "memory");
        if (memory && !json_is_boolean(memory))
                return api_fail(ctx, -EINVAL, "'memory' must be a boolean");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0)
                return r;
        if (is_suspended(sb.state))
                return api_fail(ctx, -EBUSY, "sandbox '%.64s' is already paused", id);
        /* (without memory E2B keeps the disk only; a suspend keeps both,
         * which is more than was asked, never less) */
        if ((r = run_verb(ctx, id, "suspend")) < 0)
                return r;
        /* its clock stops with it; a connect starts it again */
        (void) store_sandbox_expiry_set(ctx->store, id, 0, sb.expiry_s, NULL);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}

int e2b_sandbox_connect(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret) {
        bool given;
        int64_t timeout_s;
        int r = parse_timeout(ctx, body, &given, &timeout_s);
        if (r < 0)
                return r;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = settled(ctx, id, &sb)) < 0)
                return r;
        const char *verb = is_suspended(sb.state)             ? "wake"
                           : strcmp(sb.state, "paused") == 0  ? "resume"
                           : strcmp(sb.state, "stopped") == 0 ? "start"
                                                              : NULL;
        if (verb && (r = run_verb(ctx, id, verb)) < 0)
                return r;
        int64_t now = now_unix_ms();
        if (verb) {
                /* back: its clock starts again, from the timeout asked for
                 * now or the one it had */
                int64_t s = given ? timeout_s : sb.expiry_s;
                if (s > 0 && (r = api_sandbox_set_lifetime(ctx, id, s, NULL)) < 0)
                        return r;
        } else if (given && timeout_s > 0 && sb.expires_at && sb.expires_at < now + timeout_s * 1000) {
                /* running: E2B only ever lengthens a running one's lifetime */
                if ((r = api_sandbox_set_lifetime(ctx, id, timeout_s, NULL)) < 0)
                        return r;
        }
        json_t *o = sandbox_reply(ctx, id, sb.template_name);
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = verb ? MHD_HTTP_CREATED : MHD_HTTP_OK, .body = o };
        return 0;
}
