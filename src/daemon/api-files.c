/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's files: downloads streamed from the node's NODE_DATA frames,
 * uploads streamed to it as the body arrives, listing and removal
 * (docs/api.md, "Files"). Paths were checked by the caller.
 */
#include "api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "log.h"
#include "macros.h"

/* State of one file download, owned by its MHD response. */
struct download {
        struct node_conn *conn;
        const uint8_t *data; /* current NODE_DATA payload (inside conn's reader) */
        size_t len, off;
        bool done;
        char log_ctx[256];
};

static void download_free(void *cls) {
        struct download *d = cls;
        node_conn_free(d->conn);
        free(d);
}

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct download *d = cls;
        for (;;) {
                if (d->off < d->len) {
                        size_t n = MIN(max, d->len - d->off);
                        memcpy(buf, d->data + d->off, n);
                        d->off += n;
                        return (ssize_t) n;
                }
                if (d->done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                struct node_frame f;
                char err[API_ERRMSG_MAX] = "";
                int r = node_conn_next(d->conn, &f, err);
                if (r <= 0) {
                        log_emit(LOG_LEVEL_WARN, d->log_ctx, "download aborted: %s",
                                 err[0] ? err : "the node agent closed the stream");
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (f.type == PROTO_NODE_DATA) {
                        d->data = f.data;
                        d->len = f.len;
                        d->off = 0;
                        continue;
                }
                bool abort = f.type == PROTO_NODE_END && json_is_true(json_object_get(f.event, "abort"));
                json_decref(f.event);
                if (f.type == PROTO_NODE_END && !abort) {
                        d->done = true;
                        continue;
                }
                log_emit(LOG_LEVEL_WARN, d->log_ctx, "download aborted by the node agent");
                return MHD_CONTENT_READER_END_WITH_ERROR;
        }
}

struct MHD_Response *api_stream_response(struct node_conn **c, uint64_t size, const char *log_ctx) {
        struct download *d = calloc(1, sizeof *d);
        if (!d)
                return NULL;
        snprintf(d->log_ctx, sizeof d->log_ctx, "%s", log_ctx);
        d->conn = TAKE_PTR(*c);
        struct MHD_Response *resp = MHD_create_response_from_callback(size, 64 << 10, download_read, d, download_free);
        if (!resp) {
                *c = TAKE_PTR(d->conn);
                free(d);
        }
        return resp;
}

/* Opens a file.read on the node: its reply, then the file's NODE_DATA. */
static int file_read_open(struct api_ctx *ctx, const char *id, const char *path, const char *user,
                          struct node_conn **ret, json_t **ret_rep) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:s}", "op", "file.read", "id", id, "path", path);
        if (req && user && *user && json_object_set_new(req, "user", json_string(user)) < 0)
                return -ENOMEM;
        return dataplane_call(ctx->config, sb.tenant_id, id, CAP_ACCESS_FILES_READ, req,
                              ctx->config->node_timeout_s, ret, ret_rep, ctx->err);
}

int api_file_read_bytes(struct api_ctx *ctx, const char *id, const char *path, size_t max, uint8_t **ret,
                        size_t *ret_len) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = file_read_open(ctx, id, path, NULL, &c, &rep);
        if (r < 0)
                return r;
        json_int_t size = json_integer_value(json_object_get(rep, "size"));
        if (size < 0 || (uint64_t) size > max)
                return api_fail(ctx, -EFBIG, "'%s' has %lld bytes, more than the %zu this reads", path,
                                (long long) size, max);
        _cleanup_free_ uint8_t *buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        size_t len = 0;
        for (;;) {
                struct node_frame f;
                if ((r = node_conn_next(c, &f, ctx->err)) <= 0)
                        return r == 0 ? api_fail(ctx, -ECONNRESET, "the node agent ended the file early")
                                      : r;
                if (f.type == PROTO_NODE_DATA) {
                        if (f.len > max - len) /* it grew while read */
                                return api_fail(ctx, -EFBIG, "'%s' has more than %zu bytes", path, max);
                        memcpy(buf + len, f.data, f.len);
                        len += f.len;
                        continue;
                }
                bool ok = f.type == PROTO_NODE_END && !json_is_true(json_object_get(f.event, "abort"));
                json_decref(f.event);
                if (!ok)
                        return api_fail(ctx, -EIO, "the node agent aborted the read of '%s'", path);
                break;
        }
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

int api_file_read(struct api_ctx *ctx, const char *id, const char *path, const char *user,
                  struct api_reply *ret) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = file_read_open(ctx, id, path, user, &c, &rep);
        if (r < 0)
                return r;

        char log_ctx[256];
        snprintf(log_ctx, sizeof log_ctx, "%s sandbox=%s", ctx->log_ctx, id);
        struct MHD_Response *resp = api_stream_response(&c, MHD_SIZE_UNKNOWN, log_ctx);
        if (!resp)
                return -ENOMEM;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        json_t *size = json_object_get(rep, "size"), *mode = json_object_get(rep, "mode");
        char num[32];
        if (json_is_integer(size)) {
                snprintf(num, sizeof num, "%lld", (long long) json_integer_value(size));
                MHD_add_response_header(resp, "X-Airlock-Size", num);
        }
        if (json_is_integer(mode)) {
                snprintf(num, sizeof num, "%llo", (unsigned long long) json_integer_value(mode) & 07777);
                MHD_add_response_header(resp, "X-Airlock-Mode", num);
        }
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
        return 0;
}

int api_file_remove(struct api_ctx *ctx, const char *id, const char *path, bool recursive, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:s, s:b}", "op", "file.remove", "id", id, "path", path, "recursive", recursive);
        r = dataplane_call(ctx->config, sb.tenant_id, id, CAP_ACCESS_FILES_WRITE, req, ctx->config->node_timeout_s, NULL,
                           NULL, ctx->err);
        return r < 0 ? r : api_reply_empty(ret);
}

int api_file_list(struct api_ctx *ctx, const char *id, const char *path, struct api_reply *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s}", "op", "file.list", "id", id, "path", path);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        r = dataplane_call(ctx->config, sb.tenant_id, id, CAP_ACCESS_FILES_READ, req, ctx->config->node_timeout_s, NULL,
                           &rep, ctx->err);
        if (r < 0)
                return r;
        json_t *entries = json_object_get(rep, "entries");
        json_t *o = json_pack("{s:o}", "entries", json_is_array(entries) ? json_incref(entries) : json_array());
        /* the node passes on at most 10000 entries: say when there were more */
        if (o && json_is_true(json_object_get(rep, "truncated")))
                json_object_set_new(o, "truncated", json_true());
        return api_reply_json(ret, MHD_HTTP_OK, o);
}

int api_upload_begin(struct api_ctx *ctx, const char *id, const char *path, uint32_t mode, struct node_conn **ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s, s:I}", "op", "file.write", "id", id, "path",
                                                        path, "mode", (json_int_t) mode);
        return dataplane_open_upload(ctx->config, sb.tenant_id, id, CAP_ACCESS_FILES_WRITE, req, ret, ctx->err);
}

int api_upload_chunk(struct node_conn *c, const void *data, size_t len) {
        return node_conn_send_data(c, data, len);
}

int api_upload_finish(struct api_ctx *ctx, struct node_conn *c, const char *path, uint64_t size, struct api_reply *ret) {
        /* A failed send usually means the node already answered (and hung
         * up): its reply says why, so read it either way. */
        (void) node_conn_send_end(c, false);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = node_conn_read_reply(c, &rep, ctx->err);
        if (r < 0)
                return r;
        json_t *sz = json_object_get(rep, "size");
        return api_reply_json(ret, MHD_HTTP_OK,
                          json_pack("{s:s, s:I}", "path", path,
                                    "size", json_is_integer(sz) ? json_integer_value(sz) : (json_int_t) size));
}
