/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's volumes (the SDK's Volume, Sandbox.create's volumeMounts) on
 * Airlock's (api-volumes.c, docs/volumes.md): POST /volumes {name}, GET
 * /volumes, GET and DELETE /volumes/{volumeID}. An E2B volume has no size:
 * it is made E2B_VOLUME_SIZE large (sparse: it uses what is written). Its
 * token (create and get) reaches its files without a sandbox: the content
 * API, e2b-volume-content.c.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "api.h"
#include "e2b-api.h"
#include "macros.h"

#define E2B_VOLUME_SIZE "10G"

static json_t *volume_json(const struct store_volume *v, bool with_token) {
        json_t *o = json_pack("{s:s, s:s}", "volumeID", v->id, "name", v->name);
        char token[65];
        if (o && with_token) {
                if (e2b_volume_token(v->id, token) < 0) {
                        json_decref(o);
                        return NULL;
                }
                json_object_set_new(o, "token", json_string(token));
                sodium_memzero(token, sizeof token);
        }
        return o;
}

int e2b_volume_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret) {
        const char *name = json_string_value(json_object_get(body, "name"));
        if (!json_is_object(body) || !name || json_object_size(body) != 1)
                return api_fail(ctx, -EINVAL, "the body must be {\"name\": the volume's name}");
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "name", name, "size", E2B_VOLUME_SIZE);
        struct api_reply v1 = {0};
        int r = req ? api_volume_create(ctx, req, &v1) : -ENOMEM;
        if (r < 0)
                return r;
        struct store_volume v = {.id = (char *) json_string_value(json_object_get(v1.body, "id")),
                                 .name = (char *) json_string_value(json_object_get(v1.body, "name"))};
        json_t *o = v.id && v.name ? volume_json(&v, true) : NULL;
        api_reply_release(&v1);
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int e2b_volume_list(struct api_ctx *ctx, struct api_reply *ret) {
        struct api_reply v1 = {0};
        int r = api_volume_list(ctx, &v1);
        if (r < 0)
                return r;
        json_t *arr = json_array(), *e;
        size_t i;
        json_array_foreach(json_object_get(v1.body, "volumes"), i, e) {
                struct store_volume v = {.id = (char *) json_string_value(json_object_get(e, "id")),
                                         .name = (char *) json_string_value(json_object_get(e, "name"))};
                if (arr && v.id && v.name)
                        json_array_append_new(arr, volume_json(&v, false));
        }
        api_reply_release(&v1);
        return api_reply_json(ret, MHD_HTTP_OK, arr);
}

int e2b_volume_get(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        _cleanup_(store_volume_release) struct store_volume v = {0};
        int r = api_volume_lookup(ctx, id, &v);
        if (r < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, volume_json(&v, true));
}

int e2b_volume_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret) {
        return api_volume_delete(ctx, id, ret);
}

int e2b_volume_mounts(struct api_ctx *ctx, const json_t *mounts, json_t **ret) {
        *ret = NULL;
        if (!mounts || json_is_null(mounts))
                return 0;
        size_t i;
        json_t *e;
        if (!json_is_array(mounts))
                return api_fail(ctx, -EINVAL, "'volumeMounts' must be an array of {name, path}");
        _cleanup_(json_decrefp) json_t *list = json_array();
        if (!list)
                return -ENOMEM;
        json_array_foreach(mounts, i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                const char *path = json_string_value(json_object_get(e, "path"));
                if (!json_is_object(e) || json_object_size(e) != 2 || !name || !path)
                        return api_fail(ctx, -EINVAL, "volumeMounts[%zu] must be {name, path}", i);
                if (json_array_append_new(list, json_pack("{s:s, s:s}", "name", name, "path", path)) < 0)
                        return -ENOMEM;
        }
        *ret = json_array_size(list) ? TAKE_PTR(list) : NULL;
        return 0;
}

json_t *e2b_volume_mounts_info(struct api_ctx *ctx, const json_t *volumes) {
        json_t *list = json_array(), *e;
        size_t i;
        json_array_foreach(volumes, i, e) {
                _cleanup_(store_volume_release) struct store_volume v = {0};
                const char *id = json_string_value(json_object_get(e, "id"));
                if (list && id && store_volume_get(ctx->store, id, &v) >= 0)
                        json_array_append_new(
                                list, json_pack("{s:s, s:s}", "name", v.name, "path",
                                                json_string_value(json_object_get(e, "path")) ?: ""));
        }
        return list;
}
