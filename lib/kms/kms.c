/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin-independent half of lib/kms (format in kms.h): argument
 * checks, the wrapped string (strict parser, formatter), the AAD, and the
 * dispatch to the kind's ops. A wrapped string comes back from the store,
 * so it is untrusted: it is bounded before it is read and parsed to its one
 * canonical form (fuzz-kms-wrapped feeds the parser garbage).
 */
#include "kms.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "kms-internal.h"
#include "util.h"

#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING
#define AAD_PREFIX "airlock-dek-v1"
#define LOCAL_BLOB                                                                                          \
        (crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + KMS_DEK_SIZE +                                      \
         crypto_aead_xchacha20poly1305_ietf_ABYTES)
#define PKCS11_BLOB (12 + KMS_DEK_SIZE + 16)

_Static_assert(LOCAL_BLOB == KMS_BLOB_MAX, "local blob");
_Static_assert(PKCS11_BLOB <= KMS_BLOB_MAX, "pkcs11 blob");
/* the longest string: "v1.pkcs11." label "." base64 */
_Static_assert(10 + KMS_LABEL_MAX + 1 + (KMS_BLOB_MAX + 2) / 3 * 4 <= KMS_WRAPPED_MAX, "wrapped max");

bool kms_tenant_is_valid(const char *tenant) {
        return tenant && strnlen(tenant, 65) <= 64 && name_is_valid(tenant);
}

static bool label_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c == '-';
}

bool kms_label_is_valid(const char *label) {
        if (!label)
                return false;
        size_t n = 0;
        for (; label[n]; n++)
                if (n == KMS_LABEL_MAX || !label_char(label[n]))
                        return false;
        return n > 0;
}

static size_t blob_size(enum kms_type t) {
        return t == KMS_TYPE_LOCAL ? LOCAL_BLOB : PKCS11_BLOB;
}

size_t kms_header_format(const struct kms_wrapped *w, char *buf, size_t size) {
        char tmp[KMS_AAD_MAX];
        int n = w->type == KMS_TYPE_LOCAL ? snprintf(tmp, sizeof tmp, "v1.local.%u", w->version)
                                          : snprintf(tmp, sizeof tmp, "v1.pkcs11.%s", w->label);
        if (buf)
                snprintf(buf, size, "%s", tmp);
        return (size_t) n;
}

size_t kms_aad(const char *tenant, const struct kms_wrapped *w, uint8_t aad[KMS_AAD_MAX]) {
        /* the fields cannot hold a NUL, so NUL-separated is unambiguous */
        size_t pl = sizeof AAD_PREFIX, tl = strlen(tenant) + 1; /* both with their NUL */
        memcpy(aad, AAD_PREFIX, pl);
        memcpy(aad + pl, tenant, tl);
        size_t hl = kms_header_format(w, (char *) aad + pl + tl, KMS_AAD_MAX - pl - tl);
        return pl + tl + hl;
}

int kms_wrapped_parse(const char *s, struct kms_wrapped *ret) {
        if (!s || !ret)
                return -EINVAL;
        size_t n = strnlen(s, KMS_WRAPPED_MAX + 1);
        if (n > KMS_WRAPPED_MAX)
                return -EBADMSG;
        /* from here every read stops at s's NUL, within n + 1 bytes */
        struct kms_wrapped w = {};
        const char *p = s;
        if (strncmp(p, "v1.", 3) != 0)
                return -EBADMSG;
        p += 3;
        if (strncmp(p, "local.", 6) == 0) {
                p += 6;
                w.type = KMS_TYPE_LOCAL;
                if (*p < '1' || *p > '9') /* no leading zero, no sign */
                        return -EBADMSG;
                size_t d = 0;
                for (; p[d] >= '0' && p[d] <= '9'; d++) {
                        if (d == 9) /* KMS_LOCAL_VERSION_MAX has 9 digits */
                                return -EBADMSG;
                        w.version = w.version * 10 + (unsigned) (p[d] - '0');
                }
                p += d;
        } else if (strncmp(p, "pkcs11.", 7) == 0) {
                p += 7;
                w.type = KMS_TYPE_PKCS11;
                size_t d = 0;
                for (; label_char(p[d]); d++)
                        if (d == KMS_LABEL_MAX)
                                return -EBADMSG;
                if (d == 0)
                        return -EBADMSG;
                memcpy(w.label, p, d);
                p += d;
        } else
                return -EBADMSG;
        if (*p != '.')
                return -EBADMSG;
        w.header_len = (size_t) (p - s);
        p++;

        size_t want = blob_size(w.type), chars = sodium_base64_ENCODED_LEN(want, B64_VARIANT) - 1;
        if (strlen(p) != chars)
                return -EBADMSG;
        /* the alphabet first: libsodium 1.0.18 decodes bytes >= 0x80 as if
         * they were base64 characters (found by fuzz-kms-wrapped) */
        for (size_t i = 0; i < chars; i++)
                if (!label_char(p[i]))
                        return -EBADMSG;
        size_t got;
        const char *end;
        /* libsodium refuses non-zero unused bits, so one string per blob */
        if (sodium_base642bin(w.blob, sizeof w.blob, p, chars, NULL, &got, &end, B64_VARIANT) != 0 ||
            end != p + chars || got != want)
                return -EBADMSG;
        w.blob_len = got;
        *ret = w;
        return 0;
}

int kms_wrap(struct kms *k, const char *tenant, const char *key_ref, const uint8_t dek[KMS_DEK_SIZE],
             char out[KMS_WRAPPED_MAX + 1]) {
        if (!k || !dek || !out || !kms_tenant_is_valid(tenant))
                return -EINVAL;
        if (k->ops->type == KMS_TYPE_LOCAL ? key_ref != NULL : !kms_label_is_valid(key_ref))
                return -EINVAL;
        struct kms_wrapped w = {};
        int r = k->ops->wrap(k, tenant, key_ref, dek, &w);
        if (r < 0)
                return r;
        char s[KMS_WRAPPED_MAX + 1];
        size_t hl = kms_header_format(&w, s, sizeof s);
        s[hl] = '.';
        sodium_bin2base64(s + hl + 1, sizeof s - hl - 1, w.blob, w.blob_len, B64_VARIANT);
        memcpy(out, s, strlen(s) + 1);
        return 0;
}

int kms_unwrap(struct kms *k, const char *tenant, const char *wrapped, uint8_t dek[KMS_DEK_SIZE]) {
        if (!k || !dek || !wrapped || !kms_tenant_is_valid(tenant))
                return -EINVAL;
        struct kms_wrapped w;
        int r = kms_wrapped_parse(wrapped, &w);
        if (r < 0)
                return r;
        if (w.type != k->ops->type)
                return -EMEDIUMTYPE;
        return k->ops->unwrap(k, tenant, &w, dek);
}

const char *kms_kind(const struct kms *k) {
        return k ? k->ops->kind : NULL;
}

void kms_free(struct kms *k) {
        if (k)
                k->ops->free(k);
}
