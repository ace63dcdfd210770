/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Pure helpers of the airlock CLI: argument syntax (K=V, SBX:/path), URL
 * encoding, base64 and exit-status mapping. No I/O, so the unit tests cover
 * them directly. All return 0 or a negative errno; out-parameters are written
 * only on success.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "macros.h"

/* Cleanup of json_t: jansson (>= 2.9) itself provides json_decrefp(), so
 * _cleanup_(json_decrefp) json_t *j works without a definition here. */

/* Longest sandbox id the CLI accepts; generous, the server makes them short. */
#define CLI_ID_MAX 128

/* True for 1..CLI_ID_MAX chars of [A-Za-z0-9._-] not starting with '.', so an
 * id can never turn into "..", a slash or a query when put in a URL path. */
bool cli_id_is_valid(const char *s);

/* Parses "KEY=VALUE" (KEY non-empty, VALUE may be empty or contain '=') and
 * sets obj[KEY] = VALUE. -EINVAL on a missing '=' or empty key, -EILSEQ when
 * either side is not UTF-8 (JSON strings must be). */
int cli_kv_add(json_t *obj, const char *arg);

/* One side of `airlock cp`: "SBX:/abs/path" names a file in a sandbox,
 * anything else a local path, "-" stdin/stdout. As with `docker cp`, a
 * prefix before the first ':' that is a valid id makes it a sandbox path;
 * write "./a:b" for a local file with a colon in its name. */
struct cli_endpoint {
        char *sandbox; /* NULL for a local path */
        char *path;
};
/* -EINVAL for "", or a sandbox path that is not absolute. */
int cli_endpoint_parse(const char *s, struct cli_endpoint *ret);
void cli_endpoint_done(struct cli_endpoint *e);

/* Percent-encodes every byte outside RFC 3986 "unreserved" (and '/' when
 * keep_slash), upper-case hex. */
int cli_url_escape(const char *s, bool keep_slash, char **ret);

/* Standard base64 with padding (RFC 4648 section 4), as the API uses. */
int cli_b64_encode(const void *data, size_t len, char **ret);
/* Decodes into a NUL-terminated buffer; -EINVAL on malformed input. */
int cli_b64_decode(const char *s, size_t len, char **ret, size_t *ret_len);

/* Maps a result object ({"exit_code":N} and optionally "signal", "timed_out")
 * to a shell exit status: N for 0..255, 128+S for a signal (reported as
 * "signal":S or as a negative exit_code), 124 for a timeout like timeout(1),
 * 255 when the object says nothing usable. */
int cli_exit_status(const json_t *result);

/* Makes the buffer *buf of *cap bytes hold at least need: its size doubles
 * from min_cap until it does. 0, or -ENOMEM with *buf and *cap untouched. */
int cli_buf_reserve(char **buf, size_t *cap, size_t need, size_t min_cap);
