/* SPDX-License-Identifier: Apache-2.0 */
#include "formupload.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

#define POST_BUFFER 65536

struct formupload {
        struct MHD_PostProcessor *pp;
        char *json_part, *file_part;
        size_t json_max;
        uint64_t file_max;
        char *json;
        size_t json_len;
        int fd;
        char *path;
        uint64_t file_len;
        crypto_hash_sha256_state sha;
        int error; /* the first failure, reported by formupload_data() */
        char why[160];
};

bool formupload_is_multipart(struct MHD_Connection *conn) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        return ct && strncasecmp(ct, "multipart/form-data", 19) == 0;
}

static enum MHD_Result iterate(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data,
                               uint64_t off, size_t size) {
        struct formupload *u = cls;
        (void) kind, (void) filename, (void) content_type, (void) transfer_encoding, (void) off;
        if (u->error)
                return MHD_NO;
        if (key && strcmp(key, u->json_part) == 0) {
                if (u->json_len + size > u->json_max) {
                        u->error = -EFBIG;
                        snprintf(u->why, sizeof u->why, "part '%s' is larger than %zu bytes", key, u->json_max);
                        return MHD_NO;
                }
                char *n = realloc(u->json, u->json_len + size + 1);
                if (!n) {
                        u->error = -ENOMEM;
                        return MHD_NO;
                }
                memcpy(n + u->json_len, data, size);
                u->json = n;
                u->json_len += size;
                u->json[u->json_len] = 0;
                return MHD_YES;
        }
        if (key && strcmp(key, u->file_part) == 0) {
                if (u->file_len + size > u->file_max) {
                        u->error = -EFBIG;
                        snprintf(u->why, sizeof u->why, "part '%s' is larger than %llu bytes", key,
                                 (unsigned long long) u->file_max);
                        return MHD_NO;
                }
                int r = size ? fd_write_all(u->fd, data, size) : 0;
                if (r < 0) {
                        u->error = r;
                        snprintf(u->why, sizeof u->why, "cannot store part '%s': %s", key, strerror(-r));
                        return MHD_NO;
                }
                crypto_hash_sha256_update(&u->sha, (const uint8_t *) data, size);
                u->file_len += size;
                if (!u->path) /* seen: the part exists even when empty */
                        u->path = strdup("");
                return MHD_YES;
        }
        u->error = -EINVAL;
        snprintf(u->why, sizeof u->why, "unknown form part '%.64s' (expected '%s' and '%s')", key ? key : "",
                 u->json_part, u->file_part);
        return MHD_NO;
}

int formupload_new(struct MHD_Connection *conn, const char *json_part, const char *file_part, const char *tmp_dir,
                   size_t json_max, uint64_t file_max, struct formupload **ret) {
        struct formupload *u = calloc(1, sizeof *u);
        if (!u)
                return -ENOMEM;
        u->fd = -1;
        u->json_max = json_max;
        u->file_max = file_max;
        u->json_part = strdup(json_part);
        u->file_part = strdup(file_part);
        /* an unnamed file of its own: nothing to clean after a crash */
        u->fd = open(tmp_dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
        u->pp = MHD_create_post_processor(conn, POST_BUFFER, iterate, u);
        crypto_hash_sha256_init(&u->sha);
        if (!u->json_part || !u->file_part || u->fd < 0 || !u->pp) {
                int r = u->fd < 0 ? negative_errno() : -EINVAL;
                formupload_free(u);
                return r;
        }
        *ret = u;
        return 0;
}

int formupload_data(struct formupload *u, const char *data, size_t len, char *err, size_t err_size) {
        if (!u->error && MHD_post_process(u->pp, data, len) != MHD_YES && !u->error) {
                u->error = -EINVAL;
                snprintf(u->why, sizeof u->why, "the body is not multipart/form-data");
        }
        if (u->error)
                snprintf(err, err_size, "%s", u->why[0] ? u->why : strerror(-u->error));
        return u->error;
}

int formupload_finish(struct formupload *u, char *err, size_t err_size) {
        /* the post processor says whether it saw the form's end */
        bool whole = !u->pp || MHD_destroy_post_processor(u->pp) == MHD_YES;
        u->pp = NULL;
        if (!u->error && !whole) {
                u->error = -EINVAL;
                snprintf(u->why, sizeof u->why,
                         "the form ends before its closing boundary (a body cut short, or lines not ended by CRLF)");
        }
        if (u->error)
                snprintf(err, err_size, "%s", u->why[0] ? u->why : strerror(-u->error));
        return u->error;
}

const char *formupload_json(struct formupload *u, size_t *ret_len) {
        *ret_len = u->json_len;
        return u->json;
}

const char *formupload_file(struct formupload *u, char sha256_hex[65]) {
        if (!u->path)
                return NULL;
        uint8_t h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_state st = u->sha;
        crypto_hash_sha256_final(&st, h);
        sodium_bin2hex(sha256_hex, 65, h, sizeof h);
        /* the node reads it by a path: /proc/self/fd of the open file */
        free(u->path);
        u->path = strdup_printf("/proc/self/fd/%d", u->fd);
        return u->path;
}

void formupload_free(struct formupload *u) {
        if (!u)
                return;
        if (u->pp)
                MHD_destroy_post_processor(u->pp);
        if (u->fd >= 0)
                close(u->fd);
        free(u->json_part);
        free(u->file_part);
        free(u->json);
        free(u->path);
        free(u);
}
