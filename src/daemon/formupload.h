/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * A multipart/form-data request body with one JSON part and one file part
 * (POST /v1/templates: "request", the JSON a plain request would send, and
 * "context", the build context tar), parsed by libmicrohttpd's post
 * processor as the body arrives. The JSON part is kept in memory (at most
 * json_max bytes), the file part streams into a temporary file (at most
 * file_max bytes) whose SHA-256 is taken on the way.
 */

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct formupload;

/* Whether the request's Content-Type is multipart/form-data. */
bool formupload_is_multipart(struct MHD_Connection *conn);

/* json_part, file_part: the parts' names; tmp_dir: where the file goes. */
int formupload_new(struct MHD_Connection *conn, const char *json_part, const char *file_part, const char *tmp_dir,
                   size_t json_max, uint64_t file_max, struct formupload **ret);
/* Feeds body bytes. -EFBIG past a limit, -EINVAL for a body that is not
 * the form (err, err_size: why). */
int formupload_data(struct formupload *u, const char *data, size_t len, char *err, size_t err_size);
/* The body ended: -EINVAL (err: why) unless the form ended with its
 * closing boundary. A body cut short (the file's last bytes lost, but every
 * part begun) or with bare LF line ends is refused here. */
int formupload_finish(struct formupload *u, char *err, size_t err_size);
/* The JSON part's text (NULL when absent; owned by u), the file's path
 * (NULL when absent) and its SHA-256 in hex (65 bytes). */
const char *formupload_json(struct formupload *u, size_t *ret_len);
const char *formupload_file(struct formupload *u, char sha256_hex[65]);
/* Removes the temporary file; NULL-safe. */
void formupload_free(struct formupload *u);
