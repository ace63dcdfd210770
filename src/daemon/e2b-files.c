/* SPDX-License-Identifier: Apache-2.0 */
/* envd's POST /files, as the call's user (GET is api_file_read()): the
 * SDK's uploads, multipart/form-data (a part named "file" per file, its
 * filename the destination) or one octet-stream
 * body (gzip-encoded when the SDK was asked to: zlib inflates it), each
 * streamed to the node as a file.write while it arrives. MHD's post
 * processor parses the multipart framing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "apireq.h"
#include "dataplane.h"
#include "e2b-envd-internal.h"
#include "log.h"
#include "nodeclient.h"
#include "util.h"

#define UPLOAD_PARTS_MAX 1000 /* files in one multipart write */
#define POST_BUFFER 65536

struct e2b_upload {
        struct MHD_PostProcessor *pp; /* multipart; NULL: octet-stream */
        struct api_ctx *ctx;          /* of the call feeding it now */
        char sandbox_id[HTTP_ID_MAX];
        char user[33];
        char query_path[APIREQ_PATH_MAX + 1]; /* ?path= ("" when absent) */
        /* the file being written */
        struct node_conn *conn;
        char part_name[APIREQ_PATH_MAX + 1]; /* its part's filename */
        uint64_t part_off;                   /* the part's bytes taken so far */
        char path[APIREQ_PATH_MAX + 1];
        uint64_t bytes;
        /* the first failure, answered at the end */
        int r;
        unsigned status;
        char err[API_ERRMSG_MAX];
        json_t *written; /* [{"name","path","type"}] */
        size_t parts;
        /* Content-Encoding: gzip (octet-stream only) */
        bool gzip, gzip_end;
        z_stream z;
};

static int failed(struct e2b_upload *u, int r, unsigned status, const char *msg) {
        if (u->r == 0) {
                u->r = r;
                u->status = status;
                snprintf(u->err, sizeof u->err, "%s", msg && *msg ? msg : api_error_default_message(r));
        }
        if (u->conn) {
                (void) node_conn_send_end(u->conn, true);
                node_conn_free(u->conn);
                u->conn = NULL;
        }
        return r;
}

/* A node refusal of the file being written: an unknown user is 401. */
static int node_failed(struct e2b_upload *u, int r) {
        unsigned status = e2b_unknown_user(u->ctx, u->user, r) ? 401 : api_error_status(r);
        return failed(u, r, status, u->ctx->err);
}

/* file.write of u->path as u->user, its upload open in u->conn. */
static int upload_open(struct e2b_upload *u) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(u->ctx, u->sandbox_id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(u->ctx, &sb)) < 0)
                return r;
        struct envd_call c = { .user = u->user };
        _cleanup_(json_decrefp) json_t *req = e2b_file_req(
                &c, json_pack("{s:s, s:s, s:s, s:i}", "op", "file.write", "id", u->sandbox_id, "path", u->path, "mode",
                              0644));
        if (!req)
                return -ENOMEM;
        return dataplane_open_upload(u->ctx->config, sb.tenant_id, u->sandbox_id, CAP_ACCESS_FILES_WRITE, req, &u->conn,
                                     u->ctx->err);
}

/* Ends the file being written: the node's reply says whether it landed. */
static int part_end(struct e2b_upload *u) {
        if (!u->conn)
                return 0;
        struct api_reply rep = { 0 };
        int r = api_upload_finish(u->ctx, u->conn, u->path, u->bytes, &rep);
        node_conn_free(u->conn);
        u->conn = NULL;
        api_reply_release(&rep);
        if (r < 0)
                return node_failed(u, r);
        const char *slash = strrchr(u->path, '/');
        json_t *w = json_pack("{s:s, s:s, s:s}", "name", slash ? slash + 1 : u->path, "path", u->path, "type", "file");
        if (!w || json_array_append_new(u->written, w) < 0)
                return failed(u, -ENOMEM, 500, NULL);
        return 0;
}

static int part_begin(struct e2b_upload *u, const char *dest) {
        if (++u->parts > UPLOAD_PARTS_MAX)
                return failed(u, -E2BIG, 400, "more than 1000 files in one write");
        struct envd_call c = { .api = u->ctx, .sandbox_id = u->sandbox_id, .user = u->user };
        if (!dest || e2b_resolve_path(&c, dest, u->path, sizeof u->path) < 0)
                return failed(u, -EINVAL, 400, "each file needs a destination path of at most 4096 bytes, without '..'");
        u->bytes = 0;
        int r = upload_open(u);
        return r < 0 ? node_failed(u, r) : 0;
}

static int part_data(struct e2b_upload *u, const char *data, size_t len) {
        u->bytes += len;
        if (u->bytes > u->ctx->config->max_upload)
                return failed(u, -EFBIG, 413, "a file is over the upload limit");
        int r = len ? api_upload_chunk(u->conn, data, len) : 0;
        /* the node stopped reading: it has answered; its reply says why */
        return r < 0 ? part_end(u) : 0;
}

/* A gzip body's bytes: inflated as they come, what comes out goes to the
 * node; the upload limit counts the inflated bytes (a small body may not
 * become a huge file). */
static int gzip_data(struct e2b_upload *u, const char *data, size_t len) {
        uint8_t out[65536];
        u->z.next_in = (Bytef *) data;
        u->z.avail_in = (uInt) len;
        while (u->z.avail_in > 0 || u->z.avail_out == 0) {
                if (u->gzip_end && u->z.avail_in > 0)
                        return failed(u, -EINVAL, 400, "bytes after the end of the gzip stream");
                if (u->gzip_end)
                        break;
                u->z.next_out = out;
                u->z.avail_out = sizeof out;
                int k = inflate(&u->z, Z_NO_FLUSH);
                if (k != Z_OK && k != Z_STREAM_END && k != Z_BUF_ERROR)
                        return failed(u, -EINVAL, 400, "the body is not valid gzip");
                size_t n = sizeof out - u->z.avail_out;
                int r = n ? part_data(u, (const char *) out, n) : 0;
                if (r < 0 || u->r < 0)
                        return r < 0 ? r : u->r;
                if (k == Z_STREAM_END)
                        u->gzip_end = true;
                if (k == Z_BUF_ERROR || (n == 0 && u->z.avail_in == 0))
                        break;
        }
        return 0;
}

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size) {
        struct e2b_upload *u = cls;
        (void) kind;
        (void) content_type;
        (void) transfer_encoding;
        if (u->r < 0)
                return MHD_NO;
        if (!key || strcmp(key, "file") != 0)
                return MHD_YES; /* no other field means anything */
        /* MHD may open a part with an empty call at offset 0 and give
         * its bytes at offset 0 next (short parts): a part goes on while
         * it has the same filename and the offset where it stopped; bytes
         * given again are skipped (a multi-file write naming one path
         * twice in a row keeps the first) */
        bool same = u->conn && strcmp(u->part_name, filename ?: "") == 0;
        if (same && off < u->part_off) {
                uint64_t seen = u->part_off - off;
                if (seen >= size)
                        return MHD_YES;
                data += seen;
                size -= seen;
                off += seen;
        }
        if (off == 0 && !(same && u->part_off == 0)) {
                /* single writes name the path in the query (and, the SDK,
                 * in the filename); multi-file ones in each filename */
                const char *dest = u->query_path[0] ? u->query_path : filename;
                snprintf(u->part_name, sizeof u->part_name, "%s", filename ?: "");
                if (part_end(u) < 0 || part_begin(u, dest) < 0)
                        return MHD_NO;
        }
        u->part_off = off + size;
        return part_data(u, data, size) < 0 ? MHD_NO : MHD_YES;
}

int e2b_upload_begin(struct api_ctx *ctx, struct MHD_Connection *conn, const char *sandbox_id, const char *user,
                     const char *path, struct e2b_upload **ret, struct api_reply *reply) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *ce = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
        bool gzip = ce && strcasecmp(ce, "gzip") == 0;
        if (ce && !gzip && strcasecmp(ce, "identity") != 0)
                return e2b_rest_error(reply, 415, "an upload's Content-Encoding is gzip or identity"), 1;
        bool multipart = ct && strncasecmp(ct, "multipart/form-data", 19) == 0;
        bool octet = ct && strncasecmp(ct, "application/octet-stream", 24) == 0;
        if (gzip && !octet)
                return e2b_rest_error(reply, 415, "gzip uploads are application/octet-stream"), 1;
        if (!multipart && !octet)
                return e2b_rest_error(reply, 400, "uploads are multipart/form-data or application/octet-stream"), 1;
        if (octet && !*path)
                return e2b_rest_error(reply, 400, "an octet-stream upload needs the query parameter 'path'"), 1;
        struct e2b_upload *u = calloc(1, sizeof *u);
        if (!u || !(u->written = json_array())) {
                free(u);
                return -ENOMEM;
        }
        u->ctx = ctx;
        /* 16 + window bits: a gzip header, not zlib's */
        if (gzip && inflateInit2(&u->z, 16 + MAX_WBITS) != Z_OK) {
                json_decref(u->written);
                free(u);
                return -ENOMEM;
        }
        u->gzip = gzip;
        snprintf(u->sandbox_id, sizeof u->sandbox_id, "%s", sandbox_id);
        snprintf(u->user, sizeof u->user, "%s", user);
        snprintf(u->query_path, sizeof u->query_path, "%s", path);
        if (multipart && !(u->pp = MHD_create_post_processor(conn, POST_BUFFER, on_part, u))) {
                e2b_upload_free(u);
                return e2b_rest_error(reply, 400, "the multipart body has no usable boundary"), 1;
        }
        if (octet && part_begin(u, path) < 0) {
                e2b_rest_error(reply, u->status, u->err);
                e2b_upload_free(u);
                return 1;
        }
        *ret = u;
        return 0;
}

int e2b_upload_data(struct e2b_upload *u, struct api_ctx *ctx, const char *data, size_t len, struct api_reply *reply) {
        u->ctx = ctx;
        if (u->r == 0) {
                if (u->pp) {
                        if (MHD_post_process(u->pp, data, len) != MHD_YES)
                                (void) failed(u, -EINVAL, 400, "the multipart body is malformed");
                } else if (u->gzip)
                        (void) gzip_data(u, data, len);
                else
                        (void) part_data(u, data, len);
        }
        if (u->r < 0) {
                e2b_rest_error(reply, u->status, u->err);
                return 1;
        }
        return 0;
}

void e2b_upload_finish(struct e2b_upload *u, struct api_ctx *ctx, struct api_reply *reply) {
        u->ctx = ctx;
        if (u->pp && u->r == 0 && MHD_destroy_post_processor(u->pp) != MHD_YES)
                (void) failed(u, -EINVAL, 400, "the multipart body ended early");
        u->pp = NULL;
        if (u->r == 0 && u->gzip && !u->gzip_end)
                (void) failed(u, -EINVAL, 400, "the gzip stream ended early");
        if (u->r == 0)
                (void) part_end(u);
        if (u->r == 0 && json_array_size(u->written) == 0)
                (void) failed(u, -EINVAL, 400, "the upload has no part named 'file'");
        if (u->r < 0)
                return e2b_rest_error(reply, u->status, u->err);
        *reply = (struct api_reply){ .status = MHD_HTTP_OK, .body = json_incref(u->written) };
}

void e2b_upload_free(struct e2b_upload *u) {
        if (!u)
                return;
        if (u->pp)
                (void) MHD_destroy_post_processor(u->pp);
        if (u->conn) {
                (void) node_conn_send_end(u->conn, true);
                node_conn_free(u->conn);
        }
        if (u->gzip)
                inflateEnd(&u->z);
        json_decref(u->written);
        free(u);
}
