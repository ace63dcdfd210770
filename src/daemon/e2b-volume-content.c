/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's volume content API: a Volume's files without a sandbox of the
 * caller's, reached with the volume's token (e2b_volume_token()) at
 * /volumecontent/VOLUME/{dir,path,file}. Airlock's volumes are ext4 images
 * that only a guest kernel mounts (docs/volumes.md): the host never parses
 * what a guest wrote. So each request goes to a guest that has the volume
 * mounted, its agent taking the mount as "/" (the node's file ops with
 * "volume"; a symlink or ".." cannot leave it):
 *
 *  - the sandbox that holds it read-write, while it runs (one that does not
 *    run is a 409 naming its state);
 *  - for a read, a running sandbox that holds it read-only;
 *  - else a helper sandbox made for it: the minimal template, no network,
 *    the volume at /volume (read-write when nothing else holds it), shared
 *    by the requests for that volume in flight here and deleted when the
 *    last one ends (a stream's end: the request's). A write while others
 *    hold it read-only is a 409.
 *
 * A create or delete of the volume that finds a helper holding it waits
 * for it to go (api-volumes.c). A helper that airlockd did not live to
 * delete ends with its lifetime, HELPER_LIFETIME_S.
 *
 * Paths are the volume's ("/" its root; a relative one is taken from it).
 * Entries are E2B's VolumeEntryStat. A volume's token does not expire; it
 * is worth its volume's files, nothing else (a helper is made under the
 * volume's owner, who is billed and sees it while it lives).
 */
#include "e2b-volume-content.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "apireq.h"
#include "dataplane.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "util.h"

#define ID_MAX 65 /* a volume or sandbox id, with its NUL */
#define HELPER_TEMPLATE "minimal"
#define HELPER_MOUNT "/volume"
/* how long a request waits for another's helper (of the wrong mode, or
 * going) before it answers 503 */
#define HELPER_WAIT_S 120
/* a helper's lifetime, should airlockd not live to delete it (a stream
 * longer than this loses its helper) */
#define HELPER_LIFETIME_S 3600
#define LIST_DEPTH_MAX 16
#define LIST_ENTRIES_MAX 10000

/* A helper sandbox: one per volume at a time, its users the requests in
 * flight. */
struct helper {
        struct helper *next;
        char volume_id[ID_MAX];
        char sandbox_id[ID_MAX]; /* "" while it is made */
        bool read_write;
        bool going; /* being deleted, or its create failed: wait for it to go */
        unsigned users;
};

static pthread_mutex_t helpers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t helpers_changed = PTHREAD_COND_INITIALIZER;
static struct helper *helpers;

struct e2b_volume_use {
        /* what the helper's delete needs once the request that made it is gone */
        const struct daemon_config *config;
        struct store *store;
        const atomic_bool *stopping;
        char *tenant_id;
        char log_ctx[256];
        char volume_id[ID_MAX];
        char sandbox_id[ID_MAX];  /* the guest with the volume mounted */
        char sandbox_tenant[ID_MAX]; /* its owner ("" the admin), for the data plane */
        struct helper *helper;         /* NULL: a sandbox that holds the volume anyway */
        /* an upload's, for its reply */
        char path[APIREQ_PATH_MAX + 1];
        int64_t uid, gid;
};

static struct helper *helper_find(const char *volume_id) {
        for (struct helper *h = helpers; h; h = h->next)
                if (strcmp(h->volume_id, volume_id) == 0)
                        return h;
        return NULL;
}

static void helper_unlink(struct helper *h) {
        for (struct helper **p = &helpers; *p; p = &(*p)->next)
                if (*p == h) {
                        *p = h->next;
                        break;
                }
        free(h);
}

/* Deletes the helper's sandbox, as its owner. */
static void helper_delete(struct e2b_volume_use *u, const char *sandbox_id) {
        struct api_ctx ctx = { .config = u->config, .store = u->store, .stopping = u->stopping,
                               .log_ctx = u->log_ctx, .client_fd = -1, .tenant_id = u->tenant_id };
        struct api_reply rep = { 0 };
        int r = api_sandbox_delete(&ctx, sandbox_id, NULL, false, &rep);
        api_reply_release(&rep);
        if (r < 0 && r != -ENOENT)
                log_emit(LOG_LEVEL_WARN, u->log_ctx, "volume %s: its helper sandbox %s was not deleted: %s",
                         u->volume_id, sandbox_id, ctx.err[0] ? ctx.err : strerror(-r));
}

void e2b_volume_use_end(struct e2b_volume_use *u) {
        if (!u)
                return;
        struct helper *h = u->helper;
        if (h) {
                pthread_mutex_lock(&helpers_lock);
                bool last = --h->users == 0;
                if (last)
                        h->going = true;
                pthread_mutex_unlock(&helpers_lock);
                if (last) {
                        if (h->sandbox_id[0])
                                helper_delete(u, h->sandbox_id);
                        pthread_mutex_lock(&helpers_lock);
                        helper_unlink(h);
                        pthread_cond_broadcast(&helpers_changed);
                        pthread_mutex_unlock(&helpers_lock);
                }
        }
        free(u->tenant_id);
        free(u);
}

/* Makes the helper sandbox of h (its users wait for it). */
static int helper_make(struct api_ctx *ctx, struct helper *h) {
        _cleanup_(json_decrefp) json_t *body = json_pack(
                "{s:s, s:[{s:s, s:s, s:b}], s:{s:s}, s:{s:s}}", "template", HELPER_TEMPLATE, "volumes", "name",
                h->volume_id, "path", HELPER_MOUNT, "read_only", !h->read_write, "metadata", API_VOLUME_HELPER_METADATA,
                h->volume_id, "network", "mode", "deny-all");
        struct api_reply rep = { 0 };
        int r = body ? api_sandbox_create(ctx, body, NULL, &rep) : -ENOMEM;
        const char *id = r >= 0 ? json_string_value(json_object_get(rep.body, "id")) : NULL;
        pthread_mutex_lock(&helpers_lock);
        if (id)
                snprintf(h->sandbox_id, sizeof h->sandbox_id, "%s", id);
        else
                h->going = true; /* its users see it failed; the last one unlinks it */
        pthread_cond_broadcast(&helpers_changed);
        pthread_mutex_unlock(&helpers_lock);
        api_reply_release(&rep);
        if (r >= 0 && !id)
                r = api_fail(ctx, -EIO, "the helper sandbox of volume %s has no id", h->volume_id);
        if (r >= 0 && store_sandbox_expiry_set(ctx->store, h->sandbox_id, now_unix_ms() + HELPER_LIFETIME_S * 1000,
                                               HELPER_LIFETIME_S, "delete") < 0)
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "volume %s: its helper sandbox %s has no lifetime",
                         h->volume_id, h->sandbox_id);
        if (r >= 0)
                log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "volume %s: helper sandbox %s (%s) for its files",
                         h->volume_id, h->sandbox_id, h->read_write ? "read-write" : "read-only");
        return r;
}

/* Joins (or makes) the helper of the volume, read-write when asked; u->helper. */
static int helper_use(struct api_ctx *ctx, struct e2b_volume_use *u, bool read_write) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += HELPER_WAIT_S;
        pthread_mutex_lock(&helpers_lock);
        for (;;) {
                struct helper *h = helper_find(u->volume_id);
                if (!h) {
                        h = calloc(1, sizeof *h);
                        if (!h) {
                                pthread_mutex_unlock(&helpers_lock);
                                return -ENOMEM;
                        }
                        snprintf(h->volume_id, sizeof h->volume_id, "%s", u->volume_id);
                        h->read_write = read_write;
                        h->users = 1;
                        h->next = helpers;
                        helpers = h;
                        u->helper = h;
                        pthread_mutex_unlock(&helpers_lock);
                        return helper_make(ctx, h);
                }
                if (!h->going && (h->read_write || !read_write)) {
                        h->users++;
                        u->helper = h;
                        /* one being made: wait for it */
                        while (!h->sandbox_id[0] && !h->going)
                                pthread_cond_wait(&helpers_changed, &helpers_lock);
                        bool failed = h->going && !h->sandbox_id[0];
                        pthread_mutex_unlock(&helpers_lock);
                        return failed ? api_fail(ctx, -EAGAIN, "the helper sandbox of volume %s failed to start; "
                                                               "try again", u->volume_id)
                                      : 0;
                }
                /* going, or read-only where this one writes: wait for its end */
                if (pthread_cond_timedwait(&helpers_changed, &helpers_lock, &until) == ETIMEDOUT) {
                        pthread_mutex_unlock(&helpers_lock);
                        return api_fail(ctx, -EAGAIN, "volume %s is busy with other requests for its files; "
                                                      "try again", u->volume_id);
                }
        }
}

/* The guest for a request on the volume's files (see the top). */
static int target(struct api_ctx *ctx, struct e2b_volume_use *u, bool write) {
        _cleanup_(store_volume_release) struct store_volume v = { 0 };
        int r = api_volume_lookup(ctx, u->volume_id, &v);
        if (r < 0)
                return r;
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        if ((r = store_volume_holds_of_volume(ctx->store, v.id, &holds, &n)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read volume holds: %m");
        bool others = false;
        const char *via = NULL;
        for (size_t i = 0; i < n && r >= 0 && !via; i++) {
                _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
                if (api_sandbox_lookup(ctx, holds[i].sandbox_id, &sb) < 0 || api_volume_helper_of(&sb, v.id))
                        continue; /* gone meanwhile, or ours: helper_use() joins it */
                others = true;
                bool running = strcmp(sb.state, "running") == 0;
                if (!holds[i].read_only && !running)
                        r = api_fail(ctx, -EBUSY,
                                     "volume '%s' is held read-write by sandbox %s, which is %s: its files are "
                                     "reached while it runs",
                                     v.name, sb.id, sb.state);
                else if (!holds[i].read_only || (running && !write)) {
                        via = holds[i].sandbox_id;
                        snprintf(u->sandbox_tenant, sizeof u->sandbox_tenant, "%s", sb.tenant_id ?: "");
                } else if (write)
                        r = api_fail(ctx, -EBUSY,
                                     "volume '%s' is held read-only by sandbox %s: it is written only when no "
                                     "sandbox holds it, or by its one read-write holder",
                                     v.name, sb.id);
        }
        if (via)
                snprintf(u->sandbox_id, sizeof u->sandbox_id, "%s", via);
        store_volume_hold_array_free(holds, n);
        if (r < 0 || via)
                return r;
        if ((r = helper_use(ctx, u, !others)) < 0)
                return r;
        snprintf(u->sandbox_id, sizeof u->sandbox_id, "%s", u->helper->sandbox_id);
        snprintf(u->sandbox_tenant, sizeof u->sandbox_tenant, "%s", ctx->tenant_id ?: "");
        return 0;
}

int e2b_volume_use_begin(struct api_ctx *ctx, const char *volume_id, bool write, struct e2b_volume_use **ret) {
        struct e2b_volume_use *u = calloc(1, sizeof *u);
        if (!u)
                return -ENOMEM;
        *u = (struct e2b_volume_use){ .config = ctx->config, .store = ctx->store, .stopping = ctx->stopping,
                                      .uid = -1, .gid = -1 };
        if (ctx->tenant_id && !(u->tenant_id = strdup(ctx->tenant_id))) {
                free(u);
                return -ENOMEM;
        }
        snprintf(u->log_ctx, sizeof u->log_ctx, "%s", ctx->log_ctx);
        snprintf(u->volume_id, sizeof u->volume_id, "%s", volume_id);
        int r = target(ctx, u, write);
        if (r < 0) {
                e2b_volume_use_end(u);
                return r;
        }
        *ret = u;
        return 0;
}

int e2b_volume_path(const char *raw, char out[APIREQ_PATH_MAX + 1], char *err) {
        if (!raw)
                return snprintf(err, API_ERRMSG_MAX, "query parameter 'path' is required"), -EINVAL;
        int n = snprintf(out, APIREQ_PATH_MAX + 1, "%s%s", raw[0] == '/' ? "" : "/", raw);
        if (n < 0 || n > APIREQ_PATH_MAX)
                return snprintf(err, API_ERRMSG_MAX, "path is longer than %d bytes", APIREQ_PATH_MAX), -EINVAL;
        return apireq_check_path(out, (size_t) n, err);
}

/* ---- the node's file ops, on the volume ---- */

/* The owner of the guest's sandbox, as the data plane takes it (NULL: the admin). */
static const char *sandbox_tenant(const struct e2b_volume_use *u) {
        return u->sandbox_tenant[0] ? u->sandbox_tenant : NULL;
}

/* One file op on the guest: req gets the sandbox and the volume. */
static int content_call(struct api_ctx *ctx, const struct e2b_volume_use *u, uint32_t access, json_t *req,
                        struct node_conn **ret_conn, json_t **ret_reply) {
        _cleanup_(json_decrefp) json_t *m = req;
        if (!m || json_object_set_new(m, "id", json_string(u->sandbox_id)) < 0 ||
            json_object_set_new(m, "volume", json_string(u->volume_id)) < 0)
                return -ENOMEM;
        return dataplane_call(ctx->config, sandbox_tenant(u), u->sandbox_id, access, m,
                              ctx->config->node_timeout_s, ret_conn, ret_reply, ctx->err);
}

static void time_field(json_t *o, const char *key, const json_t *seconds) {
        char ts[48];
        api_format_time(json_is_integer(seconds) ? json_integer_value(seconds) * 1000 : 0, ts, sizeof ts);
        json_object_set_new(o, key, json_string(ts));
}

/* A node entry as E2B's VolumeEntryStat at path. */
static json_t *entry_stat(const json_t *e, const char *path) {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!type || !name)
                return NULL;
        const char *t = strcmp(type, "file") == 0      ? "file"
                        : strcmp(type, "dir") == 0     ? "directory"
                        : strcmp(type, "symlink") == 0 ? "symlink"
                                                       : "unknown";
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "name", strcmp(path, "/") == 0 ? "/" : name,
                              "path", path, "type", t, "size", json_integer_value(json_object_get(e, "size")),
                              "mode", json_integer_value(json_object_get(e, "mode")), "uid",
                              json_integer_value(json_object_get(e, "uid")), "gid",
                              json_integer_value(json_object_get(e, "gid")));
        if (!o)
                return NULL;
        time_field(o, "mtime", json_object_get(e, "mtime"));
        time_field(o, "atime", json_object_get(e, "atime"));
        time_field(o, "ctime", json_object_get(e, "ctime"));
        const char *target = json_string_value(json_object_get(e, "symlink_target"));
        if (target)
                json_object_set_new(o, "target", json_string(target));
        return o;
}

/* The entry of path, from file.stat. */
static int stat_of(struct api_ctx *ctx, const struct e2b_volume_use *u, const char *path, json_t **ret) {
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = content_call(ctx, u, CAP_ACCESS_FILES_READ, json_pack("{s:s, s:s}", "op", "file.stat", "path", path),
                             NULL, &rep);
        if (r < 0)
                return r;
        return (*ret = entry_stat(json_object_get(rep, "entry"), path)) ? 0 : -ENOMEM;
}

static int reply_stat(struct api_ctx *ctx, const struct e2b_volume_use *u, const char *path, struct api_reply *ret) {
        json_t *e = NULL;
        int r = stat_of(ctx, u, path, &e);
        return r < 0 ? r : api_reply_json(ret, MHD_HTTP_OK, e);
}

/* Owner, group and mode of path, those given (-1: unchanged). */
static int set_attr(struct api_ctx *ctx, const struct e2b_volume_use *u, const char *path, int64_t uid, int64_t gid,
                    int64_t mode) {
        if (uid < 0 && gid < 0 && mode < 0)
                return 0;
        json_t *req = json_pack("{s:s, s:s}", "op", "file.setattr", "path", path);
        const int64_t v[] = { uid, gid, mode };
        static const char *const keys[] = { "uid", "gid", "mode" };
        for (size_t i = 0; req && i < ARRAY_SIZE(v); i++)
                if (v[i] >= 0 && json_object_set_new(req, keys[i], json_integer((json_int_t) v[i])) < 0) {
                        json_decref(TAKE_PTR(req));
                        break;
                }
        return content_call(ctx, u, CAP_ACCESS_FILES_WRITE, req, NULL, NULL);
}

/* A query's number: absent -1; else decimal digits at most max. */
static int query_number(struct api_ctx *ctx, const char *key, const char *s, int64_t max, int64_t *ret) {
        *ret = -1;
        if (!s)
                return 0;
        uint64_t v;
        if (parse_u64(s, (uint64_t) max, &v) < 0)
                return api_fail(ctx, -EINVAL, "query parameter '%s' must be a number, at most %lld", key,
                                (long long) max);
        *ret = (int64_t) v;
        return 0;
}

static int query_attrs(struct api_ctx *ctx, const struct e2b_volume_query *q, int64_t *uid, int64_t *gid,
                       int64_t *mode) {
        int r;
        if ((r = query_number(ctx, "uid", q->uid, UINT32_MAX - 1, uid)) < 0 ||
            (r = query_number(ctx, "gid", q->gid, UINT32_MAX - 1, gid)) < 0 ||
            (r = query_number(ctx, "mode", q->mode, 07777, mode)) < 0)
                return r;
        return 0;
}

/* ---- the endpoints ---- */

/* Appends the entries of dir (and, while depth > 1, its directories'). */
static int list_tree(struct api_ctx *ctx, const struct e2b_volume_use *u, const char *dir, unsigned depth,
                     json_t *out) {
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = content_call(ctx, u, CAP_ACCESS_FILES_READ, json_pack("{s:s, s:s}", "op", "file.list", "path", dir),
                             NULL, &rep);
        if (r < 0)
                return r;
        const json_t *e;
        size_t i;
        json_array_foreach(json_object_get(rep, "entries"), i, e) {
                char path[APIREQ_PATH_MAX + 1];
                const char *name = json_string_value(json_object_get(e, "name"));
                if (!name || snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, name) >=
                                     (int) sizeof path)
                        continue; /* too deep to name */
                if (json_array_size(out) >= LIST_ENTRIES_MAX)
                        return api_fail(ctx, -EMSGSIZE, "more than %d entries: list less deep",
                                        LIST_ENTRIES_MAX);
                if (json_array_append_new(out, entry_stat(e, path)) < 0)
                        return -ENOMEM;
                bool sub = strcmp(json_string_value(json_object_get(e, "type")) ?: "", "dir") == 0;
                if (sub && depth > 1 && (r = list_tree(ctx, u, path, depth - 1, out)) < 0)
                        return r;
        }
        return 0;
}

int e2b_volume_dir_list(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                        struct api_reply *ret) {
        int64_t depth;
        int r = query_number(ctx, "depth", q->depth, LIST_DEPTH_MAX, &depth);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        if ((r = list_tree(ctx, u, q->path, depth > 0 ? (unsigned) depth : 1, out)) < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, TAKE_PTR(out));
}

int e2b_volume_dir_make(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                        struct api_reply *ret) {
        int64_t uid, gid, mode;
        int r = query_attrs(ctx, q, &uid, &gid, &mode);
        if (r < 0)
                return r;
        /* force: its parents too, and one that exists is fine */
        r = content_call(ctx, u, CAP_ACCESS_FILES_WRITE,
                         json_pack("{s:s, s:s, s:b}", "op", "file.mkdir", "path", q->path, "parents", q->force),
                         NULL, NULL);
        if (r >= 0)
                r = set_attr(ctx, u, q->path, uid, gid, mode);
        if (r < 0)
                return r;
        json_t *e = NULL;
        if ((r = stat_of(ctx, u, q->path, &e)) < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_CREATED, e);
}

int e2b_volume_path_stat(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                         struct api_reply *ret) {
        return reply_stat(ctx, u, q->path, ret);
}

int e2b_volume_path_update(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                           struct api_reply *ret) {
        static const char *const keys[] = { "uid", "gid", "mode" };
        static const int64_t max[] = { UINT32_MAX - 1, UINT32_MAX - 1, 07777 };
        int64_t v[3] = { -1, -1, -1 };
        const char *key;
        json_t *value;
        json_object_foreach((json_t *) q->body, key, value) {
                size_t i = 0;
                while (i < ARRAY_SIZE(keys) && strcmp(key, keys[i]) != 0)
                        i++;
                if (i == ARRAY_SIZE(keys))
                        return api_fail(ctx, -EINVAL, "unknown field '%.64s': the body is {uid, gid, mode}", key);
                if (json_is_null(value))
                        continue;
                if (!json_is_integer(value) || json_integer_value(value) < 0 || json_integer_value(value) > max[i])
                        return api_fail(ctx, -EINVAL, "'%s' must be a number, at most %lld", keys[i],
                                        (long long) max[i]);
                v[i] = json_integer_value(value);
        }
        int r = set_attr(ctx, u, q->path, v[0], v[1], v[2]);
        return r < 0 ? r : reply_stat(ctx, u, q->path, ret);
}

int e2b_volume_path_remove(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                           struct api_reply *ret) {
        if (strcmp(q->path, "/") == 0)
                return api_fail(ctx, -EINVAL, "the volume's root is not removed: remove what is in it");
        int r = content_call(ctx, u, CAP_ACCESS_FILES_WRITE,
                             json_pack("{s:s, s:s, s:b}", "op", "file.remove", "path", q->path, "recursive", true),
                             NULL, NULL);
        return r < 0 ? r : api_reply_empty(ret);
}

int e2b_volume_file_read(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                         struct api_reply *ret) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = content_call(ctx, u, CAP_ACCESS_FILES_READ,
                             json_pack("{s:s, s:s}", "op", "file.read", "path", q->path), &c, &rep);
        if (r < 0)
                return r;
        json_t *size = json_object_get(rep, "size");
        struct MHD_Response *resp =
                api_stream_response(&c, json_is_integer(size) ? (uint64_t) json_integer_value(size) : MHD_SIZE_UNKNOWN,
                                    ctx->log_ctx);
        if (!resp)
                return -ENOMEM;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
        return 0;
}

int e2b_volume_file_write_begin(struct api_ctx *ctx, struct e2b_volume_use *u, const struct e2b_volume_query *q,
                                struct node_conn **ret) {
        int64_t mode;
        int r = query_attrs(ctx, q, &u->uid, &u->gid, &mode);
        if (r < 0)
                return r;
        snprintf(u->path, sizeof u->path, "%s", q->path);
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:s, s:s, s:I}", "op", "file.write", "id", u->sandbox_id, "volume",
                          u->volume_id, "path", q->path, "mode", (json_int_t) (mode >= 0 ? mode : 0644));
        if (!req)
                return -ENOMEM;
        return dataplane_open_upload(ctx->config, sandbox_tenant(u), u->sandbox_id, CAP_ACCESS_FILES_WRITE,
                                     req, ret, ctx->err);
}

int e2b_volume_file_write_end(struct api_ctx *ctx, struct e2b_volume_use *u, struct node_conn *c,
                              struct api_reply *ret) {
        /* a failed send usually means the node answered already: its reply says why */
        (void) node_conn_send_end(c, false);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = node_conn_read_reply(c, &rep, ctx->err);
        if (r >= 0)
                r = set_attr(ctx, u, u->path, u->uid, u->gid, -1);
        return r < 0 ? r : reply_stat(ctx, u, u->path, ret);
}
