/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dispatch over struct credstore_ops, and what every backend shares:
 * names, sealing (XChaCha20-Poly1305, additional data naming tenant and
 * secret) and the key file.
 */
#include "credstore.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

#define SEAL_VERSION 1
#define NONCE_SIZE crypto_aead_xchacha20poly1305_ietf_NPUBBYTES

_Static_assert(CREDSTORE_SEALED_OVERHEAD ==
                       1 + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES,
               "sealed layout");
_Static_assert(CREDSTORE_KEY_SIZE == crypto_aead_xchacha20poly1305_ietf_KEYBYTES, "key size");

bool credstore_name_is_valid(const char *name) {
        if (!name)
                return false;
        size_t n = strlen(name);
        if (n == 0 || n > CREDSTORE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

/* What a sealed value is for, the first part of its additional data: a
 * value sealed for one purpose does not open for another. */
static const char *ad_prefix(enum credstore_purpose purpose) {
        switch (purpose) {
        case CREDSTORE_FOR_SECRET: return "airlock-secret-v1";
        case CREDSTORE_FOR_WEBHOOK: return "airlock-webhook-secret-v1";
        }
        return NULL;
}

/* AD = purpose NUL tenant NUL name: NUL cannot occur in any of them, so no
 * two (purpose, tenant, name) give the same bytes. The admin scope is "". */
static int make_ad(enum credstore_purpose purpose, const char *tenant_id, const char *name, uint8_t **ret,
                   size_t *ret_len) {
        const char *p = ad_prefix(purpose);
        if (!p || !credstore_name_is_valid(name) || (tenant_id && strlen(tenant_id) > 256))
                return -EINVAL;
        const char *t = tenant_id ?: "";
        size_t pl = strlen(p) + 1, n = pl + strlen(t) + 1 + strlen(name);
        uint8_t *ad = malloc(n);
        if (!ad)
                return -ENOMEM;
        memcpy(ad, p, pl);
        memcpy(ad + pl, t, strlen(t) + 1);
        memcpy(ad + pl + strlen(t) + 1, name, strlen(name));
        *ret = ad;
        *ret_len = n;
        return 0;
}

/* libsodium ready and the additional data of (tenant_id, name). */
static int crypto_begin(enum credstore_purpose purpose, const char *tenant_id, const char *name,
                        uint8_t **ret_ad, size_t *ret_ad_len) {
        if (sodium_init() < 0)
                return -EIO;
        return make_ad(purpose, tenant_id, name, ret_ad, ret_ad_len);
}

int credstore_seal(const uint8_t key[CREDSTORE_KEY_SIZE], enum credstore_purpose purpose,
                   const char *tenant_id, const char *name, const char *value, size_t len, uint8_t **ret,
                   size_t *ret_len) {
        if (!key || !value || len == 0 || len > CREDSTORE_VALUE_MAX || memchr(value, 0, len))
                return -EINVAL;
        _cleanup_free_ uint8_t *ad = NULL;
        size_t ad_len;
        int r = crypto_begin(purpose, tenant_id, name, &ad, &ad_len);
        if (r < 0)
                return r;
        size_t n = len + CREDSTORE_SEALED_OVERHEAD;
        uint8_t *out = malloc(n);
        if (!out)
                return -ENOMEM;
        out[0] = SEAL_VERSION;
        randombytes_buf(out + 1, NONCE_SIZE);
        unsigned long long clen = 0;
        crypto_aead_xchacha20poly1305_ietf_encrypt(out + 1 + NONCE_SIZE, &clen, (const uint8_t *) value, len, ad,
                                                   ad_len, NULL, out + 1, key);
        *ret = out;
        *ret_len = 1 + NONCE_SIZE + (size_t) clen;
        return 0;
}

int credstore_unseal(const uint8_t key[CREDSTORE_KEY_SIZE], enum credstore_purpose purpose,
                     const char *tenant_id, const char *name, const uint8_t *sealed, size_t sealed_len,
                     char **ret_value, size_t *ret_len) {
        if (!key || !sealed)
                return -EINVAL;
        if (sealed_len <= CREDSTORE_SEALED_OVERHEAD || sealed_len > CREDSTORE_SEALED_MAX || sealed[0] != SEAL_VERSION)
                return -EBADMSG;
        _cleanup_free_ uint8_t *ad = NULL;
        size_t ad_len;
        int r = crypto_begin(purpose, tenant_id, name, &ad, &ad_len);
        if (r < 0)
                return r;
        size_t max = sealed_len - CREDSTORE_SEALED_OVERHEAD;
        char *v = malloc(max + 1);
        if (!v)
                return -ENOMEM;
        unsigned long long mlen = 0;
        if (crypto_aead_xchacha20poly1305_ietf_decrypt((uint8_t *) v, &mlen, NULL, sealed + 1 + NONCE_SIZE,
                                                       sealed_len - 1 - NONCE_SIZE, ad, ad_len, sealed + 1, key) != 0) {
                free(v);
                return -EBADMSG;
        }
        v[mlen] = 0;
        *ret_value = v;
        *ret_len = (size_t) mlen;
        return 0;
}

void credstore_value_free(char *value, size_t len) {
        if (!value)
                return;
        sodium_memzero(value, len);
        free(value);
}

/* Reads an existing key file, refusing one others could read or change. */
static int key_read(const char *path, uint8_t ret[CREDSTORE_KEY_SIZE]) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0077))
                return -EPERM;
        if (st.st_size != CREDSTORE_KEY_SIZE)
                return -EBADMSG;
        uint8_t k[CREDSTORE_KEY_SIZE];
        int r = fd_read_exact(fd, k, sizeof k);
        if (r < 0) {
                sodium_memzero(k, sizeof k);
                return r == -EPIPE ? -EBADMSG : r;
        }
        memcpy(ret, k, sizeof k);
        sodium_memzero(k, sizeof k);
        return 0;
}

int credstore_key_load(const char *path, uint8_t ret[CREDSTORE_KEY_SIZE]) {
        if (!path || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        int r = key_read(path, ret);
        if (r != -ENOENT)
                return r;
        /* a whole key appears or none: written to a private temporary file,
         * then linked in place (link fails if another process won the race,
         * whose key is then read) */
        char tmp[4096];
        if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int) getpid()) >= (int) sizeof tmp)
                return -ENAMETOOLONG;
        (void) unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        uint8_t k[CREDSTORE_KEY_SIZE];
        randombytes_buf(k, sizeof k);
        r = fd_write_all(fd, k, sizeof k);
        sodium_memzero(k, sizeof k);
        if (r >= 0 && fchmod(fd, 0600) < 0)
                r = -errno;
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        if (r >= 0 && link(tmp, path) < 0 && errno != EEXIST)
                r = -errno;
        (void) unlink(tmp);
        if (r < 0)
                return r;
        return key_read(path, ret);
}

void credstore_meta_release(struct credstore_meta *m) {
        if (!m)
                return;
        free(m->tenant_id);
        free(m->name);
        free(m->sandbox_id);
        free(m->spec);
        free(m->created_by);
        *m = (struct credstore_meta){ 0 };
}

void credstore_meta_array_free(struct credstore_meta *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                credstore_meta_release(&a[i]);
        free(a);
}

void credstore_free(struct credstore *cs) {
        if (cs)
                cs->ops->free(cs);
}

int credstore_put(struct credstore *cs, const struct credstore_meta *m, const char *value, size_t len) {
        if (!cs || !m || !credstore_name_is_valid(m->name) || !m->spec || !value || len == 0 ||
            len > CREDSTORE_VALUE_MAX || memchr(value, 0, len))
                return -EINVAL;
        return cs->ops->put(cs, m, value, len);
}

int credstore_get(struct credstore *cs, const char *tenant_id, const char *name, struct credstore_meta *ret,
                  char **ret_value, size_t *ret_len) {
        if (!cs || !credstore_name_is_valid(name) || !ret || (ret_value && !ret_len))
                return -EINVAL;
        return cs->ops->get(cs, tenant_id, name, ret, ret_value, ret_len);
}

int credstore_list(struct credstore *cs, const char *tenant_id, size_t max, struct credstore_meta **ret,
                   size_t *ret_n) {
        if (!cs || !ret || !ret_n)
                return -EINVAL;
        return cs->ops->list(cs, tenant_id, max, ret, ret_n);
}

int credstore_delete(struct credstore *cs, const char *tenant_id, const char *name) {
        if (!cs || !credstore_name_is_valid(name))
                return -EINVAL;
        return cs->ops->delete (cs, tenant_id, name);
}
