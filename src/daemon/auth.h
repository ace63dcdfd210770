/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Bearer tokens. Only SHA-256 hashes of tokens are stored or compared, and
 * every comparison is constant-time (sodium_memcmp). Tokens never reach a
 * log line.
 *
 *   admin token:   "alk_" + 64 hex, in DATA_DIR/admin.token (0600)
 *   tenant key:    "alk_" + 64 hex, returned once when the key is made
 *   attach token:  64 hex, returned once when a session is created
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define AUTH_TOKEN_MAX 256         /* longest bearer token accepted */
#define AUTH_ATTACH_TOKEN_LEN 64   /* hex chars of an attach token */
#define AUTH_ADMIN_TOKEN_FILE "admin.token"
#define AUTH_METRICS_TOKEN_FILE "metrics.token"
#define AUTH_API_KEY_LEN 68        /* "alk_" + 64 hex */

/* SHA-256 of a token string. */
void auth_hash_token(const char *token, uint8_t ret[STORE_HASH_SIZE]);

/*
 * Extracts the token from an Authorization header value ("Bearer TOKEN",
 * scheme case-insensitive). -EACCES when absent, malformed or longer than
 * AUTH_TOKEN_MAX. *ret points into header.
 */
int auth_parse_bearer(const char *header, const char **ret);

/* Constant-time check of token against a stored hash. */
bool auth_token_matches(const char *token, const uint8_t hash[STORE_HASH_SIZE]);

/* Fills out (at least AUTH_ATTACH_TOKEN_LEN + 1 bytes) with a fresh random
 * attach token: 32 random bytes as hex. */
int auth_new_attach_token(char *out, size_t n);

/* Fills out (at least AUTH_API_KEY_LEN + 1 bytes) with a fresh API key:
 * "alk_" + 32 random bytes as hex, like the admin token. */
int auth_new_api_key(char *out, size_t n);

/*
 * Makes sure DATA_DIR/admin.token exists (created with O_EXCL, mode 0600,
 * holding a fresh "alk_" token; an existing file is reused) and that its
 * hash is the store's "admin" API key (on a shared store, with several
 * replicas: the key "admin-<hash prefix>", one per replica's token).
 * *ret_created (may be NULL) tells whether a new token was written.
 */
int auth_admin_token_init(struct store *s, const char *data_dir, bool shared, bool *ret_created);

/* Makes sure DATA_DIR/metrics.token exists (as the admin token's file) and
 * gives its hash: the token a Prometheus scrapes GET /metrics with (it
 * reads nothing else). */
int auth_metrics_token_init(const char *data_dir, uint8_t ret_hash[STORE_HASH_SIZE]);
