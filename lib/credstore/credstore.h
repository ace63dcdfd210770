/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Credentials the gateway injects into a sandbox's requests: where they are
 * kept, behind a backend interface (struct credstore_ops) so another kind of
 * store (a Vault-like service) fits later. The first backend, the local one,
 * seals each value with XChaCha20-Poly1305 (libsodium) under a 32-byte key
 * file in the control plane's own directory (made on first use, 0600) and
 * keeps the sealed bytes and the metadata in airlockd's store (lib/store).
 * The AEAD's additional data names the tenant and the secret, so a sealed
 * value moved to another row does not open.
 *
 * Metadata is never secret; values are: they are returned only by
 * credstore_get() with ret_value, in memory the caller wipes
 * (credstore_value_free()). Nothing here logs.
 *
 * Every function returns 0 or a negative errno: -ENOENT no such secret,
 * -EEXIST the name is taken in that scope, -EBADMSG a sealed value that does
 * not open (wrong key, tampered, moved), -EPERM a key file that is not
 * private, plus what lib/store returns.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

#define CREDSTORE_KEY_SIZE 32
#define CREDSTORE_KEY_FILE "secrets.key"
#define CREDSTORE_NAME_MAX 64
#define CREDSTORE_ENV_NAME_SIZE (CREDSTORE_NAME_MAX + 1) /* its env variable, NUL included */
#define CREDSTORE_VALUE_MAX 8192
/* version byte, nonce, ciphertext, tag */
#define CREDSTORE_SEALED_OVERHEAD (1 + 24 + 16)
#define CREDSTORE_SEALED_MAX (CREDSTORE_VALUE_MAX + CREDSTORE_SEALED_OVERHEAD)

/* A secret's metadata. tenant_id NULL is the admin scope. */
struct credstore_meta {
        char *tenant_id;
        char *name;         /* credstore_name_is_valid() */
        char *sandbox_id;   /* narrowed to this sandbox, or NULL */
        char *spec;         /* JSON object text: hosts, ports, inject, methods, paths, rate_per_min */
        int64_t expires_at; /* Unix seconds; 0: never */
        int64_t created_at; /* Unix time, milliseconds (0 on put: now) */
        char *created_by;   /* the API key id that made it, or NULL */
};

struct credstore;

struct credstore_ops {
        const char *name; /* "local" */
        void (*free)(struct credstore *cs);
        int (*put)(struct credstore *cs, const struct credstore_meta *m, const char *value, size_t len);
        int (*get)(struct credstore *cs, const char *tenant_id, const char *name, struct credstore_meta *ret,
                   char **ret_value, size_t *ret_len);
        int (*list)(struct credstore *cs, const char *tenant_id, size_t max, struct credstore_meta **ret,
                    size_t *ret_n);
        int (*delete)(struct credstore *cs, const char *tenant_id, const char *name);
};

/* Backends embed this first. */
struct credstore {
        const struct credstore_ops *ops;
};

/* [a-z0-9_-]{1,CREDSTORE_NAME_MAX} */
bool credstore_name_is_valid(const char *name);

/*
 * The local backend over store st (which must outlive it), its key at
 * key_path: read when it exists (a regular file of exactly
 * CREDSTORE_KEY_SIZE bytes, owned by this user, no group/other access:
 * else -EPERM or -EBADMSG), else made (random, 0600, appearing whole).
 */
int credstore_local_new(struct store *st, const char *key_path, struct credstore **ret);

/* Frees cs; NULL is fine. */
void credstore_free(struct credstore *cs);
static inline void credstore_freep(struct credstore **cs) {
        credstore_free(*cs);
}

/* Stores a new secret: m (tenant_id, name, spec required) and its value
 * (1..CREDSTORE_VALUE_MAX bytes, no NUL: -EINVAL otherwise). */
int credstore_put(struct credstore *cs, const struct credstore_meta *m, const char *value, size_t len);
/* One secret's metadata, and with ret_value (may be NULL) its value: a
 * NUL-terminated copy of ret_len bytes, freed with credstore_value_free(). */
int credstore_get(struct credstore *cs, const char *tenant_id, const char *name, struct credstore_meta *ret,
                  char **ret_value, size_t *ret_len);
/* One scope's secrets by name, at most max. */
int credstore_list(struct credstore *cs, const char *tenant_id, size_t max, struct credstore_meta **ret, size_t *ret_n);
int credstore_delete(struct credstore *cs, const char *tenant_id, const char *name);

void credstore_meta_release(struct credstore_meta *m);
void credstore_meta_array_free(struct credstore_meta *a, size_t n);
/* Wipes and frees a value from credstore_get(); NULL is fine. */
void credstore_value_free(char *value, size_t len);

/* What a value is sealed for: the additional data names it. */
enum credstore_purpose {
        CREDSTORE_FOR_SECRET,  /* a credential's value (the backends') */
        CREDSTORE_FOR_WEBHOOK, /* a webhook's signing secret, named by the webhook's id */
};

/*
 * The sealing itself (the local backend's; exposed for tests, for other
 * backends that keep sealed bytes, and for webhooks' secrets): *ret =
 * version || nonce || ciphertext, bound to (purpose, tenant_id, name) by
 * the additional data. unseal gives -EBADMSG for anything that does not
 * open: wrong key, other purpose, tenant or name, a changed byte, a short
 * or unknown-version blob.
 */
int credstore_seal(const uint8_t key[CREDSTORE_KEY_SIZE], enum credstore_purpose purpose,
                   const char *tenant_id, const char *name, const char *value, size_t len, uint8_t **ret,
                   size_t *ret_len);
int credstore_unseal(const uint8_t key[CREDSTORE_KEY_SIZE], enum credstore_purpose purpose,
                     const char *tenant_id, const char *name, const uint8_t *sealed, size_t sealed_len,
                     char **ret_value, size_t *ret_len);
/* Reads or makes the key file (see credstore_local_new()). */
int credstore_key_load(const char *path, uint8_t ret[CREDSTORE_KEY_SIZE]);
