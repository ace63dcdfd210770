/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Data keys for the object store (docs/storage.md, "Encryption"): every
 * image a node uploads is sealed with a fresh random data key that only
 * airlockd makes and opens. The node gets the key in the request that
 * needs it (sandbox.suspend, sandbox.wake), keeps it in memory only, and
 * stores it wrapped by the owning tenant's key-encryption key (KEK), which
 * lib/kms holds: a local key file per tenant (KMS_DIR/TENANT/, by default
 * CONTROL_DIR/kms; the replicas of a cluster share one), or an AES key on
 * a PKCS#11 token (an HSM, or a cloud KMS's PKCS#11 library) the tenant
 * was set to (datakey_set()). Revoking a tenant's KEK destroys it: every image sealed for the
 * tenant stays unreadable, and its wakes and suspends fail with
 * key_revoked (-EKEYREVOKED) until a rotation makes a new one.
 * Sandboxes of the admin scope (no tenant) use the KEK "admin".
 */

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "kms.h"

#define DATAKEY_SIZE KMS_DEK_SIZE
#define DATAKEY_ADMIN "admin" /* the KEK of sandboxes with no tenant */

struct datakey {
        uint8_t key[DATAKEY_SIZE];
        char wrapped[KMS_WRAPPED_MAX + 1];
};

/* Opens the KMS (config->kms_dir); logs and fails when it cannot. */
int datakey_init(const struct daemon_config *config);
void datakey_done(void);

/* A new data key for tenant (NULL: the admin scope), wrapped by its KEK;
 * the tenant's first KEK is made on first use. -EKEYREVOKED when the KEK
 * was revoked (and not rotated since). The caller wipes ret->key. */
int datakey_new(const char *tenant, struct datakey *ret);
/* Unwraps wrapped (a node's report of an image; untrusted) for tenant:
 * -EKEYREVOKED when its KEK is gone, -EBADMSG when it does not open. */
int datakey_open(const char *tenant, const char *wrapped, struct datakey *ret);

/* The state of tenant's KEK: "none" (never used), "active" with its
 * version, or "revoked". */
struct datakey_state {
        const char *kind;  /* "local" or "pkcs11" */
        const char *state;
        unsigned version;  /* local */
        char label[KMS_LABEL_MAX + 1]; /* pkcs11: the key wrapping now */
};
int datakey_state(const char *tenant, struct datakey_state *ret);
/* Whether tenant's KEK is revoked: one access(), for the verbs that check
 * before they start (datakey_state() reads the key to learn its version). */
bool datakey_is_revoked(const char *tenant);
/* A new KEK version for tenant: new images are sealed with it, the older
 * versions still open what they sealed. After a revocation it is the
 * tenant's fresh start (what was sealed before stays unreadable). */
int datakey_rotate(const char *tenant, unsigned *ret_version);
/* Destroys every KEK version of tenant (crypto-shredding): what was sealed
 * for it is unreadable from now on, and nothing new is sealed for it until
 * a rotation (a tenant that had none is marked all the same). */
int datakey_revoke(const char *tenant);
/* Where tenant's KEK is from now on: kind "local" (key files), or
 * "pkcs11" with the label of an AES key on the configured token (made
 * first when generate). What older keys wrapped still opens while they
 * exist. -EHOSTDOWN when no token is configured, -EINVAL for a bad kind
 * or label, -ENOKEY when the token has no such key, -EEXIST when generate
 * finds one. */
int datakey_set(const char *tenant, const char *kind, const char *label, bool generate);
bool datakey_has_pkcs11(void);

/* The cluster's templates key (admin scope; made on first use, shared by
 * the replicas through the KMS directory): seals the templates the nodes
 * share through the object store. Cached for a few minutes. */
int datakey_templates(struct datakey *ret);
