/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Between kms.c (arguments, the wrapped string, the AAD) and the two
 * plugins, kms-local.c and kms-pkcs11.c: an ops table. kms.c validates
 * every argument before an op sees it (tenant, label, dek, the parsed
 * string of the op's own kind), so the ops only do the cryptography.
 */

#include "kms.h"

/* "airlock-dek-v1" NUL tenant NUL header: 15 + 65 + the longest header */
#define KMS_AAD_MAX (15 + 65 + 10 + KMS_LABEL_MAX + 1)

struct kms_ops {
        const char *kind;
        enum kms_type type;
        /* Fills w (type and version or label set, header_len and blob)
         * for a checked tenant and key_ref (NULL for local, a valid label
         * for pkcs11). */
        int (*wrap)(struct kms *k, const char *tenant, const char *key_ref, const uint8_t dek[KMS_DEK_SIZE],
                    struct kms_wrapped *w);
        /* w is a parsed string of this kind; dek is written only on success. */
        int (*unwrap)(struct kms *k, const char *tenant, const struct kms_wrapped *w,
                      uint8_t dek[KMS_DEK_SIZE]);
        void (*free)(struct kms *k);
};

struct kms {
        const struct kms_ops *ops;
};

extern const struct kms_ops kms_local_ops;
extern const struct kms_ops kms_pkcs11_ops;

/* A tenant is a name_is_valid() string; a label 1..KMS_LABEL_MAX of [A-Za-z0-9_-]. */
bool kms_tenant_is_valid(const char *tenant);
bool kms_label_is_valid(const char *label);

/* The header "v1.<kind>.<version or label>" of w (type and version or
 * label set) into buf (size bytes, may be NULL); returns its length. */
size_t kms_header_format(const struct kms_wrapped *w, char *buf, size_t size);

/* The AEAD's additional data for tenant and w's header into aad (size
 * KMS_AAD_MAX); its length. */
size_t kms_aad(const char *tenant, const struct kms_wrapped *w, uint8_t aad[KMS_AAD_MAX]);
