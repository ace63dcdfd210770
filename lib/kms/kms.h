/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Tenant key-encryption keys (KEKs) behind a plugin. Every object-store
 * artifact is encrypted with a random 32-byte data key (DEK); a DEK is
 * stored only wrapped by its tenant's KEK, which stays in the KMS: the
 * control plane wraps and unwraps, a sandbox never sees a KEK. Destroying
 * a KEK makes every DEK it wrapped, and so the data, unreadable.
 *
 * Two kinds of KMS:
 *   local   a directory of key files, DIR/<tenant>/<version>.kek (32 random
 *           bytes, 0600; DIR and DIR/<tenant> 0700). Versions count 1, 2,
 *           3...; the highest wraps, every one still there unwraps.
 *           XChaCha20-Poly1305 with a random 24-byte nonce.
 *   pkcs11  an AES-256 secret key object on a PKCS#11 token (an HSM, or
 *           SoftHSM2), found by its CKA_LABEL; the key never leaves the
 *           token. CKM_AES_GCM with a random 12-byte IV (libsodium's
 *           generator) and a 128-bit tag. The control plane keeps which
 *           label a tenant wraps with (it passes it to kms_wrap()); a new
 *           label is a rotation. Random IVs: keep a label below 2^32 wraps.
 *           Some tokens report a tag that does not verify as
 *           CKR_GENERAL_ERROR (SoftHSM 2.6 does), as a broken token would:
 *           then an AES-GCM round trip under the same key tells the two
 *           apart (-EBADMSG when it works, -EIO when it does not).
 *
 * A wrapped DEK is one self-describing ASCII string, at most
 * KMS_WRAPPED_MAX characters, fields separated by '.':
 *
 *   v1.local.<version>.<base64url(nonce[24] || ciphertext[32] || tag[16])>
 *   v1.pkcs11.<label>.<base64url(iv[12] || ciphertext[32] || tag[16])>
 *
 * version: decimal, 1..KMS_LOCAL_VERSION_MAX, no leading zero. label:
 * 1..KMS_LABEL_MAX characters of [A-Za-z0-9_-]. base64url: RFC 4648 §5
 * without padding, of 72 bytes (local: 96 characters) or 60 (pkcs11: 80);
 * both are multiples of 3, so no character has unused bits. The header is
 * everything before the last '.'; the AEAD's additional data is
 *
 *   "airlock-dek-v1" NUL <tenant> NUL <header>
 *
 * so a wrapped key moved to another tenant, or edited to name another KEK
 * version or label, does not unwrap. There is exactly one encoding of a
 * given wrapping: kms_wrapped_parse() refuses anything else.
 *
 * Tenants are tenant ids (or any name_is_valid() string: 1..64 characters
 * of [A-Za-z0-9._-], not starting with '.'), the same rule as the rest of
 * Airlock's ids and names.
 *
 * Errors (every function returns 0 or a negative errno; ret_ and out
 * parameters are written only on success):
 *   -EINVAL       a bad argument (tenant, label, a key_ref where none
 *                 belongs or none where one is needed)
 *   -EBADMSG      a wrapped string that does not parse or does not
 *                 authenticate (tampered, truncated, too long, another
 *                 tenant's, made with another key of the same name)
 *   -EMEDIUMTYPE  a well-formed wrapped string of the other kind of KMS
 *                 (v1.pkcs11 given to a local KMS and vice versa)
 *   -EKEYREVOKED  unwrap: the KEK the string names is not there (any more):
 *                 destroyed, deleted from the token, or never made. Through
 *                 PKCS#11 a deleted object and one that never existed look
 *                 the same, so both are -EKEYREVOKED
 *   -ENOKEY       wrap: the tenant has no KEK yet (local: kms_local_rotate()
 *                 makes the first) or no key has that label (pkcs11);
 *                 destroy: there was nothing to destroy
 *   -ENOTUNIQ     pkcs11: more than one key object has that label
 *   -EACCES       the KMS refuses us: a wrong PIN, a key not allowed to
 *                 encrypt/decrypt, a lost login
 *   -EHOSTDOWN    the token went away (removed, not present, session gone)
 *   -EIO          any other KMS failure (a corrupt key file, a device error)
 * Key bytes, PINs and DEKs are never logged. What an operator must fix is
 * logged with log_error() (a corrupt key file; the module, the token, the
 * PIN, an unexpected CKR_ code); refusals of wrapped strings are not.
 *
 * Memory: KEK bytes (local) are read into a sodium_malloc()ed (locked,
 * guarded) buffer and wiped after each use; DEKs in this library's buffers
 * are wiped with sodium_memzero(); the caller wipes its own copies.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define KMS_DEK_SIZE 32
#define KMS_WRAPPED_MAX 512 /* characters of a wrapped key's string, NUL excluded */
#define KMS_LABEL_MAX 64    /* characters of a pkcs11 key label */
#define KMS_LOCAL_VERSION_MAX 999999999u
#define KMS_BLOB_MAX 72 /* decoded base64 part: the local kind's 24 + 32 + 16 */

/* One KMS: a directory of key files or a logged-in PKCS#11 token.
 * Thread-safe: any number of threads may wrap and unwrap at once. */
struct kms;

/*
 * Opens the local KMS in dir, creating it (0700, parents too) when missing.
 * -EPERM when dir exists with any permission for group or others (the
 * keys are only as safe as it is), -ENOTDIR when it is not a directory.
 */
int kms_open_local(const char *dir, struct kms **ret);

/*
 * Opens a PKCS#11 token: dlopen()s module (a path, e.g.
 * /usr/lib/softhsm/libsofthsm2.so), C_Initialize with CKF_OS_LOCKING_OK
 * (CKR_CRYPTOKI_ALREADY_INITIALIZED is fine: another user of the module in
 * this process initialized it, and then this handle does not finalize it),
 * finds the one present token whose label is token_label (1..32
 * characters), and logs in as CKU_USER with the PIN on the first line of
 * pin_file (trailing "\n" or "\r\n" dropped; at most 255 bytes).
 * The login is the token's, shared by every handle of this process on it
 * (PKCS#11 has one login state per application and token): a second
 * handle on a token already logged in is not asked for the PIN again.
 * Errors: -ENOENT (module or pin_file missing), -ELIBBAD (not a PKCS#11
 * module), -ENODEV (no token with that label), -ENOTUNIQ (two), -EACCES
 * (wrong or locked PIN), each logged with what to fix.
 */
int kms_open_pkcs11(const char *module, const char *token_label, const char *pin_file, struct kms **ret);

/* Closes every session; C_Finalize when this was the module's last handle
 * and this process initialized it; wipes and frees. NULL is fine. */
void kms_free(struct kms *k);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct kms *, kms_free);

/* "local" or "pkcs11". */
const char *kms_kind(const struct kms *k);

/*
 * Wraps dek under the tenant's KEK into out, a NUL-terminated string of at
 * most KMS_WRAPPED_MAX characters (the format above). key_ref names the
 * KEK where the KMS does not know it by itself: pkcs11, the key's label
 * (required); local, NULL (the tenant's highest version wraps). A fresh
 * random nonce each call: wrapping the same DEK twice gives two strings.
 */
int kms_wrap(struct kms *k, const char *tenant, const char *key_ref, const uint8_t dek[KMS_DEK_SIZE],
             char out[KMS_WRAPPED_MAX + 1]);

/*
 * Unwraps a string made by kms_wrap() for the same tenant into dek. The
 * string names its KEK (version or label), so no key_ref: a tenant whose
 * label or version changed still unwraps what the old KEK wrapped, for as
 * long as that KEK exists. wrapped is untrusted: it is parsed strictly,
 * and at most KMS_WRAPPED_MAX + 1 of its bytes are read.
 */
int kms_unwrap(struct kms *k, const char *tenant, const char *wrapped, uint8_t dek[KMS_DEK_SIZE]);

/*
 * local: makes a new KEK version for tenant (the first one too: version
 * 1), written to a temporary file, fsync()ed and linked into place, so a
 * key file is whole or absent; *ret_version (may be NULL) says which. Safe
 * against concurrent rotations in this and other processes (flock on
 * DIR). -EOPNOTSUPP on a pkcs11 KMS; -EOVERFLOW past KMS_LOCAL_VERSION_MAX.
 */
int kms_local_rotate(struct kms *k, const char *tenant, unsigned *ret_version);

/*
 * local: crypto-shredding. Overwrites every KEK version of tenant (and any
 * temporary key file a crashed rotation left) with random bytes, fsync()s,
 * unlinks them, removes DIR/<tenant> and fsync()s the directories; from
 * then on every DEK they wrapped is -EKEYREVOKED. On copy-on-write file
 * systems and SSDs the overwrite is best effort: what makes the data
 * unreadable is that no copy of the key is left anywhere (no backups of
 * DIR). -ENOKEY when the tenant had no KEK; -EOPNOTSUPP on a pkcs11 KMS.
 */
int kms_local_destroy(struct kms *k, const char *tenant);

/*
 * pkcs11: generates an AES-256 token key labelled key_label (CKM_AES_KEY_GEN;
 * CKA_TOKEN, CKA_PRIVATE, CKA_SENSITIVE true; CKA_EXTRACTABLE, CKA_WRAP,
 * CKA_UNWRAP false; CKA_ENCRYPT and CKA_DECRYPT true). -EEXIST when a key
 * with that label exists (checked first: two processes generating the same
 * label at once can both succeed, and then wrap gives -ENOTUNIQ).
 * -EOPNOTSUPP on a local KMS.
 */
int kms_pkcs11_generate(struct kms *k, const char *key_label);

/* pkcs11: destroys every secret key labelled key_label (C_DestroyObject):
 * what it wrapped is -EKEYREVOKED from then on. -ENOKEY when there is none;
 * -EOPNOTSUPP on a local KMS. */
int kms_pkcs11_destroy(struct kms *k, const char *key_label);

/* A wrapped string taken apart (kms_wrapped_parse()). */
enum kms_type {
        KMS_TYPE_LOCAL,
        KMS_TYPE_PKCS11,
};

struct kms_wrapped {
        enum kms_type type;
        unsigned version;              /* local */
        char label[KMS_LABEL_MAX + 1]; /* pkcs11; "" for local */
        size_t header_len;             /* bytes of "v1.<kind>.<version or label>" */
        uint8_t blob[KMS_BLOB_MAX];    /* the decoded base64url part */
        size_t blob_len;               /* 72 (local) or 60 (pkcs11) */
};

/*
 * Parses a wrapped string (untrusted: reads at most KMS_WRAPPED_MAX + 1
 * bytes of it) strictly, as the format above says: -EBADMSG for anything
 * else. Authenticates nothing: kms_unwrap() does. The control plane may
 * use it to see which kind of KMS and which KEK a stored DEK needs.
 */
int kms_wrapped_parse(const char *s, struct kms_wrapped *ret);
