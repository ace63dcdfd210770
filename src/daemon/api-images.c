/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Images: full snapshots (memory, processes and disk) of a sandbox, or
 * its kept snapshots (disk or full) exported as they are, published to
 * the object store, that outlive their sandbox and its node, and from
 * which new sandboxes are made (POST /v1/sandboxes {"image"}). Scoped like
 * sandboxes: a tenant key sees only its tenant's. E2B's snapshots are
 * these (e2b-api.c).
 *
 * POST /v1/sandboxes/{id}/images {"name"?, "snapshot"?}, GET /v1/images[?sandbox_id=],
 * GET/DELETE /v1/images/{id}.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "apireq.h"
#include "datakey.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "scheduler.h"
#include "util.h"

json_t *api_image_json(const struct store_image *img) {
        char ts[48];
        api_format_time(img->created_at, ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s}", "id", img->id, "sandbox_id", img->sandbox_id, "template",
                              img->template_name, "size", (json_int_t) img->size, "created_at", ts);
        if (o && img->name)
                json_object_set_new(o, "name", json_string(img->name));
        if (o && img->tenant_id)
                json_object_set_new(o, "tenant_id", json_string(img->tenant_id));
        if (o)
                json_object_set_new(o, "kind", json_string(img->kind ? img->kind : "full"));
        if (o && img->snapshot_id)
                json_object_set_new(o, "snapshot_id", json_string(img->snapshot_id));
        return o;
}

int api_image_lookup(struct api_ctx *ctx, const char *id, struct store_image *ret) {
        _cleanup_(store_image_release) struct store_image img = { 0 };
        int r = store_image_get(ctx->store, id, &img);
        if (r >= 0 && !api_tenant_may_see(ctx, img.tenant_id))
                r = -ENOENT;
        if (r < 0)
                return api_read_fail(ctx, r, "image", id);
        *ret = img;
        img = (struct store_image){ 0 };
        return 0;
}

int api_image_find(struct api_ctx *ctx, const char *name, struct store_image *ret) {
        int r = store_image_find(ctx->store, ctx->tenant_id, name, ret);
        if (r < 0)
                return api_read_fail(ctx, r, "image", name);
        return 0;
}

bool api_image_usable_by(const struct store_image *img, const struct api_ctx *ctx, const char *owner) {
        /* the admin may make anyone's sandbox from any image; a sandbox is
         * otherwise made from its own tenant's */
        if (!ctx->tenant_id)
                return true;
        return img->tenant_id && owner && strcmp(img->tenant_id, owner) == 0;
}

/* Removes an image from the object store; one that is not there (any more)
 * counts as removed. */
static int node_image_delete(struct api_ctx *ctx, const char *image_id) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "suspended.delete", "snapshot_id",
                                                        image_id);
        if (!req)
                return -ENOMEM;
        char addr[NODES_ADDR_MAX];
        int r = nodes_any_addr(addr); /* the object store is every node's */
        if (r >= 0)
                r = node_call(addr, ctx->config->node_timeout_s, req, NULL, ctx->err);
        return r == -ENOENT ? 0 : r;
}

int api_image_key_add(struct api_ctx *ctx, const char *addr, const struct store_image *image, json_t *req) {
        _cleanup_(json_decrefp) json_t *get = json_pack("{s:s, s:s}", "op", "suspended.get", "snapshot_id", image->id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        int r = get ? node_call(addr, ctx->config->node_timeout_s, get, &rep, err) : -ENOMEM;
        if (r == -ENOENT)
                return 0; /* the create says what is missing */
        if (r < 0)
                return api_fail(ctx, r, "cannot read image %s: %s", image->id, err);
        const char *wrapped = json_string_value(json_object_get(rep, "wrapped_key"));
        if (!wrapped)
                return 0;
        struct datakey key;
        r = datakey_open(image->tenant_id, wrapped, &key);
        if (r == -EKEYREVOKED)
                return api_fail(ctx, r, "image %s was sealed with a key that was revoked: it cannot be opened",
                                image->id);
        if (r < 0)
                return api_fail(ctx, -EIO, "the data key of image %s does not open with its owner's key", image->id);
        r = api_request_add_datakey(req, &key);
        sodium_memzero(&key, sizeof key);
        return r;
}

int api_image_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret) {
        int r = apireq_check_body(body, APIREQ_BODY_IMAGE, false, ctx->err);
        if (r < 0)
                return r;
        const json_t *name_j = json_object_get(body, "name"), *snap_j = json_object_get(body, "snapshot");
        const char *name = json_is_null(name_j) ? NULL : json_string_value(name_j);
        const char *snap_id = json_is_null(snap_j) ? NULL : json_string_value(snap_j);
        if ((name_j && !json_is_null(name_j) && !name) || (name && !name_is_valid(name)))
                return api_fail(ctx, -EINVAL, "field 'name' must be 1..64 characters of [A-Za-z0-9._-]");
        if (snap_j && !json_is_null(snap_j) && !snap_id)
                return api_fail(ctx, -EINVAL, "field 'snapshot' must be the id of one of the sandbox's snapshots");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = api_sandbox_lookup(ctx, sandbox_id, &sb)) < 0)
                return r;
        if (!snap_id && (r = api_volume_refuse(ctx, sandbox_id, "publish")) < 0)
                return r;
        /* an export: one of its kept snapshots, as it is */
        _cleanup_(store_snapshot_release) struct store_snapshot snap = { 0 };
        if (snap_id) {
                r = strlen(snap_id) <= 64 ? store_snapshot_get(ctx->store, snap_id, &snap) : -ENOENT;
                if (r == -ENOENT || (r >= 0 && strcmp(snap.sandbox_id, sb.id) != 0))
                        return api_fail(ctx, -ENOENT, "snapshot '%.64s' of sandbox '%.64s' not found", snap_id, sb.id);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read snapshot: %m");
                /* a full snapshot's memory has the volumes mounted, which
                 * an image does not carry; a disk snapshot is its rootfs */
                if (snap.kind && strcmp(snap.kind, "full") == 0 &&
                    (r = api_volume_refuse(ctx, sandbox_id, "export a full snapshot of")) < 0)
                        return r;
        }
        /* the node holds the snapshot files of a sandbox it has (a
         * suspended one is woken for it, as for a command); a new image is
         * the sandbox's memory: it needs its VM */
        bool has_node_copy = strcmp(sb.state, "paused") == 0 || (snap_id && strcmp(sb.state, "stopped") == 0);
        if (!has_node_copy && (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        if (name) {
                _cleanup_(store_image_release) struct store_image taken = { 0 };
                r = store_image_find(ctx->store, sb.tenant_id, name, &taken);
                if (r >= 0)
                        return api_fail(ctx, -EEXIST, "an image named '%.64s' exists (%s)", name, taken.id);
                if (r != -ENOENT)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read image: %m");
        }
        char id[32];
        if ((r = random_id("img-", 8, id, sizeof id)) < 0)
                return r;
        /* one snapshot call per sandbox at a time (the scheduler's too) */
        r = scheduler_claim(sandbox_id, SCHEDULER_CLAIM_WAIT_MS);
        if (r == -EBUSY)
                return api_fail(ctx, r, "cannot publish: another snapshot of sandbox %s is in progress", sandbox_id);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s}", "op", "sandbox.publish", "id", sandbox_id,
                                                        "snapshot_id", id);
        if (req && snap_id)
                json_object_set_new(req, "from_snapshot", json_string(snap.id));
        _cleanup_(json_decrefp) json_t *rep = NULL;
        /* sealed, as every image in the object store, under its owner's key */
        struct datakey key;
        r = req ? datakey_new(sb.tenant_id, &key) : -ENOMEM;
        if (r >= 0) {
                r = api_request_add_datakey(req, &key);
                sodium_memzero(&key, sizeof key);
        } else if (r == -EKEYREVOKED)
                r = api_fail(ctx, r, "cannot publish: the tenant's key was revoked (rotate it to seal new images)");
        if (r >= 0)
                r = nodes_sandbox_call(sandbox_id, SCHEDULER_SNAPSHOT_TIMEOUT_S, req, &rep, ctx->err);
        if (req)
                (void) json_object_del(req, "data_key");
        scheduler_release(sandbox_id);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "sandbox %s: publishing an image failed: %s", sandbox_id,
                         ctx->err);
                return r;
        }
        json_t *info = json_object_get(rep, "published");
        json_t *bytes = json_object_get(info, "memory_bytes");
        struct store_image img = { .id = id, .tenant_id = sb.tenant_id, .name = (char *) name,
                                   .sandbox_id = sb.id, .template_name = sb.template_name,
                                   .size = json_is_integer(bytes) ? json_integer_value(bytes) : 0,
                                   .kind = snap_id ? snap.kind : "full", .snapshot_id = snap_id ? snap.id : NULL };
        r = store_image_insert(ctx->store, &img);
        _cleanup_(store_image_release) struct store_image stored = { 0 };
        if (r >= 0)
                r = store_image_get(ctx->store, id, &stored);
        if (r < 0) {
                /* nobody could use the image without its row */
                char derr[API_ERRMSG_MAX];
                memcpy(derr, ctx->err, sizeof derr);
                (void) store_image_delete(ctx->store, id);
                (void) node_image_delete(ctx, id);
                memcpy(ctx->err, derr, sizeof derr);
                if (r == -EEXIST)
                        return api_fail(ctx, r, "an image named '%.64s' exists", name ?: "");
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to record image: %m");
        }
        json_t *o = api_image_json(&stored);
        static const char *const timings[] = { "snapshot_ms", "upload_ms", "total_ms", "pause_ms" };
        for (size_t k = 0; o && k < ARRAY_SIZE(timings); k++) {
                json_t *t = json_object_get(info, timings[k]);
                if (json_is_integer(t))
                        json_object_set(o, timings[k], t);
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: published image %s%s%s%s%s", sandbox_id, id,
                 name ? " named " : "", name ?: "", snap_id ? " from snapshot " : "", snap_id ? snap.id : "");
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = MHD_HTTP_CREATED, .body = o };
        return 0;
}

int api_image_list_rows(struct api_ctx *ctx, const char *sandbox_id, struct store_image **ret, size_t *ret_n) {
        int r = store_image_list(ctx->store, !ctx->tenant_id, ctx->tenant_id, sandbox_id, STORE_LIST_MAX, ret, ret_n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to list images: %m");
        return 0;
}

int api_image_list(struct api_ctx *ctx, const char *sandbox_id, struct api_reply *ret) {
        struct store_image *a = NULL;
        size_t n = 0;
        int r = api_image_list_rows(ctx, sandbox_id, &a, &n);
        if (r < 0)
                return r;
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
                if (json_array_append_new(arr, api_image_json(&a[i])) < 0) {
                        json_decref(arr);
                        arr = NULL;
                }
        store_image_array_free(a, n);
        return api_reply_list(ret, "images", arr);
}

int api_image_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_image_release) struct store_image img = { 0 };
        int r = api_image_lookup(ctx, id, &img);
        if (r < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, api_image_json(&img));
}

int api_image_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_image_release) struct store_image img = { 0 };
        int r = api_image_lookup(ctx, id, &img);
        if (r < 0)
                return r;
        /* the data first: a row without data would be a broken image, data
         * without a row only a leftover */
        if ((r = node_image_delete(ctx, img.id)) < 0) {
                log_emit(LOG_LEVEL_WARN, ctx->log_ctx, "image %s: cannot delete it from the object store: %s", img.id,
                         ctx->err);
                return r;
        }
        r = store_image_delete(ctx->store, img.id);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to delete image: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "deleted image %s", img.id);
        *ret = (struct api_reply){ .status = MHD_HTTP_NO_CONTENT };
        return 0;
}
