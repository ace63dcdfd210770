/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The PKCS#11 KMS: AES-256-GCM with a token's secret key, found by its
 * label on every call (so a key deleted by another process is gone at
 * once). The module is dlopen()ed: only the standard's header (p11-kit's)
 * is needed to build, no PKCS#11 library is linked.
 *
 * Sessions: one is opened at kms_open_pkcs11() to log in and stays open
 * for the handle's life (the login lasts while a session is open); each
 * call takes another from a small pool of idle read-only sessions, or
 * opens one, so that threads do not wait for each other (the module locks
 * inside with the OS's mutexes, CKF_OS_LOCKING_OK). A session goes back to
 * the pool only after a call that left no operation active in it; one
 * that the token says is gone empties the pool, and the call is tried once
 * more with a fresh one (a network HSM that reconnected).
 *
 * C_Initialize and C_Finalize are per process, not per handle: a table of
 * the modules this file initialized counts their handles, and the last
 * one finalizes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <p11-kit/pkcs11.h>

#include "kms-internal.h"
#include "log.h"
#include "macros.h"
#include "util.h"

#ifndef CKR_AEAD_DECRYPT_FAILED
#define CKR_AEAD_DECRYPT_FAILED 0x35UL /* PKCS#11 3.0; p11-kit 0.24's header is 2.40 */
#endif

#define IV_SIZE 12
#define TAG_SIZE 16
#define SEALED_SIZE (KMS_DEK_SIZE + TAG_SIZE)
#define BLOB_SIZE (IV_SIZE + SEALED_SIZE)
#define POOL_MAX 8          /* idle sessions kept */
#define PIN_MAX 255         /* bytes of a PIN */
#define TOKEN_LABEL_SIZE 32 /* CK_TOKEN_INFO's blank-padded label */
#define SLOTS_MAX 1024
#define DESTROY_BATCH 16
#define DESTROY_ROUNDS 64 /* of DESTROY_BATCH: a token that destroys nothing cannot loop us */

struct module {
        CK_FUNCTION_LIST_PTR f;
        unsigned refs;
        bool finalize; /* this process' C_Initialize succeeded: finalize at the last handle */
        struct module *next;
};

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *modules;

struct kms_pkcs11 {
        struct kms kms;
        void *dl;
        CK_FUNCTION_LIST_PTR f;
        bool registered;
        CK_SLOT_ID slot;
        CK_SESSION_HANDLE login; /* open for the handle's life: keeps the token logged in */
        bool have_login;
        char token[TOKEN_LABEL_SIZE + 1];
        pthread_mutex_t lock; /* idle */
        CK_SESSION_HANDLE idle[POOL_MAX];
        size_t n_idle;
};

static struct kms_pkcs11 *to_pkcs11(struct kms *k) {
        return (struct kms_pkcs11 *) k;
}

static const char *ckr_name(CK_RV rv) {
        switch (rv) {
        case CKR_OK: return "CKR_OK";
        case CKR_HOST_MEMORY: return "CKR_HOST_MEMORY";
        case CKR_SLOT_ID_INVALID: return "CKR_SLOT_ID_INVALID";
        case CKR_GENERAL_ERROR: return "CKR_GENERAL_ERROR";
        case CKR_FUNCTION_FAILED: return "CKR_FUNCTION_FAILED";
        case CKR_ARGUMENTS_BAD: return "CKR_ARGUMENTS_BAD";
        case CKR_ATTRIBUTE_VALUE_INVALID: return "CKR_ATTRIBUTE_VALUE_INVALID";
        case CKR_DEVICE_ERROR: return "CKR_DEVICE_ERROR";
        case CKR_DEVICE_MEMORY: return "CKR_DEVICE_MEMORY";
        case CKR_DEVICE_REMOVED: return "CKR_DEVICE_REMOVED";
        case CKR_ENCRYPTED_DATA_INVALID: return "CKR_ENCRYPTED_DATA_INVALID";
        case CKR_ENCRYPTED_DATA_LEN_RANGE: return "CKR_ENCRYPTED_DATA_LEN_RANGE";
        case CKR_AEAD_DECRYPT_FAILED: return "CKR_AEAD_DECRYPT_FAILED";
        case CKR_KEY_HANDLE_INVALID: return "CKR_KEY_HANDLE_INVALID";
        case CKR_KEY_TYPE_INCONSISTENT: return "CKR_KEY_TYPE_INCONSISTENT";
        case CKR_KEY_FUNCTION_NOT_PERMITTED: return "CKR_KEY_FUNCTION_NOT_PERMITTED";
        case CKR_MECHANISM_INVALID: return "CKR_MECHANISM_INVALID";
        case CKR_MECHANISM_PARAM_INVALID: return "CKR_MECHANISM_PARAM_INVALID";
        case CKR_OBJECT_HANDLE_INVALID: return "CKR_OBJECT_HANDLE_INVALID";
        case CKR_OPERATION_ACTIVE: return "CKR_OPERATION_ACTIVE";
        case CKR_PIN_INCORRECT: return "CKR_PIN_INCORRECT";
        case CKR_PIN_INVALID: return "CKR_PIN_INVALID";
        case CKR_PIN_LEN_RANGE: return "CKR_PIN_LEN_RANGE";
        case CKR_PIN_EXPIRED: return "CKR_PIN_EXPIRED";
        case CKR_PIN_LOCKED: return "CKR_PIN_LOCKED";
        case CKR_SESSION_CLOSED: return "CKR_SESSION_CLOSED";
        case CKR_SESSION_COUNT: return "CKR_SESSION_COUNT";
        case CKR_SESSION_HANDLE_INVALID: return "CKR_SESSION_HANDLE_INVALID";
        case CKR_SESSION_READ_ONLY: return "CKR_SESSION_READ_ONLY";
        case CKR_TEMPLATE_INCOMPLETE: return "CKR_TEMPLATE_INCOMPLETE";
        case CKR_TEMPLATE_INCONSISTENT: return "CKR_TEMPLATE_INCONSISTENT";
        case CKR_TOKEN_NOT_PRESENT: return "CKR_TOKEN_NOT_PRESENT";
        case CKR_TOKEN_NOT_RECOGNIZED: return "CKR_TOKEN_NOT_RECOGNIZED";
        case CKR_TOKEN_WRITE_PROTECTED: return "CKR_TOKEN_WRITE_PROTECTED";
        case CKR_USER_NOT_LOGGED_IN: return "CKR_USER_NOT_LOGGED_IN";
        case CKR_USER_PIN_NOT_INITIALIZED: return "CKR_USER_PIN_NOT_INITIALIZED";
        case CKR_BUFFER_TOO_SMALL: return "CKR_BUFFER_TOO_SMALL";
        case CKR_CRYPTOKI_NOT_INITIALIZED: return "CKR_CRYPTOKI_NOT_INITIALIZED";
        case CKR_CRYPTOKI_ALREADY_INITIALIZED: return "CKR_CRYPTOKI_ALREADY_INITIALIZED";
        case CKR_FUNCTION_NOT_SUPPORTED: return "CKR_FUNCTION_NOT_SUPPORTED";
        default: return NULL;
        }
}

/* The name of rv, or its number. */
static const char *ckr_str(CK_RV rv, char buf[32]) {
        const char *name = ckr_name(rv);
        if (name)
                return name;
        snprintf(buf, 32, "CKR 0x%lx", (unsigned long) rv);
        return buf;
}

/* The errno contract of kms.h for a CKR_ code. */
static int ckr_errno(CK_RV rv) {
        switch (rv) {
        case CKR_OK: return 0;
        case CKR_HOST_MEMORY:
        case CKR_DEVICE_MEMORY: return -ENOMEM;
        case CKR_PIN_INCORRECT:
        case CKR_PIN_INVALID:
        case CKR_PIN_LEN_RANGE:
        case CKR_PIN_EXPIRED:
        case CKR_PIN_LOCKED:
        case CKR_USER_PIN_NOT_INITIALIZED:
        case CKR_USER_NOT_LOGGED_IN:
        case CKR_KEY_FUNCTION_NOT_PERMITTED:
        case CKR_KEY_TYPE_INCONSISTENT: return -EACCES;
        case CKR_KEY_HANDLE_INVALID:
        case CKR_OBJECT_HANDLE_INVALID: return -EKEYREVOKED; /* deleted between finding it and using it */
        case CKR_ENCRYPTED_DATA_INVALID:
        case CKR_ENCRYPTED_DATA_LEN_RANGE:
        case CKR_AEAD_DECRYPT_FAILED: return -EBADMSG;
        case CKR_DEVICE_REMOVED:
        case CKR_TOKEN_NOT_PRESENT:
        case CKR_TOKEN_NOT_RECOGNIZED:
        case CKR_SESSION_HANDLE_INVALID:
        case CKR_SESSION_CLOSED:
        case CKR_SLOT_ID_INVALID:
        case CKR_CRYPTOKI_NOT_INITIALIZED: return -EHOSTDOWN;
        case CKR_MECHANISM_INVALID:
        case CKR_MECHANISM_PARAM_INVALID:
        case CKR_FUNCTION_NOT_SUPPORTED: return -EOPNOTSUPP;
        default: return -EIO;
        }
}

/* ckr_errno(rv), logged unless it is an answer about the input (a string
 * that does not authenticate, a key that is not there) rather than a
 * problem of the KMS. */
static int ckr_fail(const struct kms_pkcs11 *p, const char *call, CK_RV rv) {
        int r = ckr_errno(rv);
        if (r == -EBADMSG || r == -EKEYREVOKED)
                return r;
        char buf[32];
        log_error("kms: PKCS#11 token '%s': %s failed: %s", p->token, call, ckr_str(rv, buf));
        return r;
}

/* Counts a handle of module f, initializing it for the first one. */
static int module_ref(CK_FUNCTION_LIST_PTR f, const char *path) {
        int r = 0;
        pthread_mutex_lock(&modules_lock);
        struct module *m = modules;
        while (m && m->f != f)
                m = m->next;
        if (m)
                m->refs++;
        else if (!(m = calloc(1, sizeof *m)))
                r = -ENOMEM;
        else {
                CK_C_INITIALIZE_ARGS args = {.flags = CKF_OS_LOCKING_OK};
                CK_RV rv = f->C_Initialize(&args);
                if (rv == CKR_OK || rv == CKR_CRYPTOKI_ALREADY_INITIALIZED) {
                        /* already: someone else in this process uses it; they finalize */
                        *m = (struct module){.f = f, .refs = 1, .finalize = rv == CKR_OK, .next = modules};
                        modules = m;
                } else {
                        char buf[32];
                        log_error("kms: PKCS#11 module %s: C_Initialize failed: %s", path, ckr_str(rv, buf));
                        r = ckr_errno(rv);
                        free(m);
                }
        }
        pthread_mutex_unlock(&modules_lock);
        return r;
}

static void module_unref(CK_FUNCTION_LIST_PTR f) {
        pthread_mutex_lock(&modules_lock);
        for (struct module **pm = &modules; *pm; pm = &(*pm)->next) {
                struct module *m = *pm;
                if (m->f != f)
                        continue;
                if (--m->refs == 0) {
                        if (m->finalize)
                                f->C_Finalize(NULL);
                        *pm = m->next;
                        free(m);
                }
                break;
        }
        pthread_mutex_unlock(&modules_lock);
}

/* The slot of the one present token labelled label. */
static int slot_find(struct kms_pkcs11 *p, const char *label) {
        CK_ULONG n = 0;
        CK_RV rv = p->f->C_GetSlotList(CK_TRUE, NULL, &n);
        if (rv != CKR_OK)
                return ckr_fail(p, "C_GetSlotList", rv);
        _cleanup_free_ CK_SLOT_ID *slots = NULL;
        if (n > 0) {
                n = MIN(n, (CK_ULONG) SLOTS_MAX);
                slots = calloc(n, sizeof *slots);
                if (!slots)
                        return -ENOMEM;
                rv = p->f->C_GetSlotList(CK_TRUE, slots, &n);
                if (rv != CKR_OK) /* CKR_BUFFER_TOO_SMALL: a token came meanwhile; rare enough to fail */
                        return ckr_fail(p, "C_GetSlotList", rv);
        }
        size_t found = 0;
        char seen[256] = "";
        for (CK_ULONG i = 0; i < n; i++) {
                CK_TOKEN_INFO ti;
                if (p->f->C_GetTokenInfo(slots[i], &ti) != CKR_OK || !(ti.flags & CKF_TOKEN_INITIALIZED))
                        continue;
                char l[TOKEN_LABEL_SIZE + 1];
                size_t ln = TOKEN_LABEL_SIZE;
                memcpy(l, ti.label, ln);
                while (ln > 0 && (l[ln - 1] == ' ' || l[ln - 1] == 0))
                        ln--;
                l[ln] = 0;
                if (strcmp(l, label) == 0) {
                        p->slot = slots[i];
                        found++;
                }
                size_t sl = strlen(seen);
                snprintf(seen + sl, sizeof seen - sl, "%s'%s'", sl ? ", " : "", l);
        }
        if (found == 0)
                return log_error_errno(-ENODEV,
                                       "kms: no PKCS#11 token labelled '%s' (initialized tokens: %s)", label,
                                       *seen ? seen : "none");
        if (found > 1)
                return log_error_errno(-ENOTUNIQ, "kms: %zu PKCS#11 tokens are labelled '%s'", found, label);
        return 0;
}

/* The first line of pin_file into pin (PIN_MAX + 1 bytes, the caller's
 * locked buffer, which it wipes). */
static int pin_read(const char *pin_file, char *pin, size_t *ret_len) {
        _cleanup_close_ int fd = open(pin_file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_error_errno(negative_errno(), "kms: cannot open the PIN file %s: %m", pin_file);
        /* the buffer: PIN_MAX + "\r\n"; a longer first line is refused */
        size_t len = 0;
        for (;;) {
                ssize_t k = read(fd, pin + len, PIN_MAX + 1 - len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return log_error_errno(negative_errno(), "kms: cannot read the PIN file %s: %m",
                                               pin_file);
                if (k == 0)
                        break;
                len += (size_t) k;
                if (memchr(pin, '\n', len) || len == PIN_MAX + 1)
                        break;
        }
        char *nl = memchr(pin, '\n', len);
        if (nl)
                len = (size_t) (nl - pin);
        if (len > 0 && pin[len - 1] == '\r')
                len--;
        if (len == 0 || len > PIN_MAX)
                return log_error_errno(-EINVAL,
                                       "kms: the PIN file %s does not start with a PIN of 1..%d bytes",
                                       pin_file, PIN_MAX);
        if (memchr(pin, 0, len))
                return log_error_errno(-EINVAL, "kms: the PIN in %s holds a NUL byte", pin_file);
        *ret_len = len;
        return 0;
}

static int session_open(struct kms_pkcs11 *p, bool rw, CK_SESSION_HANDLE *ret) {
        CK_RV rv = p->f->C_OpenSession(p->slot, CKF_SERIAL_SESSION | (rw ? CKF_RW_SESSION : 0), NULL, NULL,
                                       ret);
        return rv == CKR_OK ? 0 : ckr_fail(p, "C_OpenSession", rv);
}

/* An idle read-only session, or a new one; *ret_pooled says which. */
static int session_get(struct kms_pkcs11 *p, CK_SESSION_HANDLE *ret, bool *ret_pooled) {
        pthread_mutex_lock(&p->lock);
        bool pooled = p->n_idle > 0;
        if (pooled)
                *ret = p->idle[--p->n_idle];
        pthread_mutex_unlock(&p->lock);
        *ret_pooled = pooled;
        return pooled ? 0 : session_open(p, false, ret);
}

static void session_put(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, bool keep) {
        if (keep) {
                pthread_mutex_lock(&p->lock);
                if (p->n_idle < POOL_MAX) {
                        p->idle[p->n_idle++] = s;
                        s = CK_INVALID_HANDLE;
                }
                pthread_mutex_unlock(&p->lock);
        }
        if (s != CK_INVALID_HANDLE)
                p->f->C_CloseSession(s);
}

static void pool_drain(struct kms_pkcs11 *p) {
        pthread_mutex_lock(&p->lock);
        while (p->n_idle > 0)
                p->f->C_CloseSession(p->idle[--p->n_idle]);
        pthread_mutex_unlock(&p->lock);
}

/* The secret keys labelled label: up to max of their handles into ret,
 * how many into *ret_n. */
static int keys_find(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const char *label, CK_OBJECT_HANDLE *ret,
                     CK_ULONG max, CK_ULONG *ret_n) {
        CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
        CK_ATTRIBUTE tmpl[] = {
                {CKA_CLASS, &cls, sizeof cls},
                {CKA_LABEL, (void *) label, strlen(label)},
        };
        CK_RV rv = p->f->C_FindObjectsInit(s, tmpl, ARRAY_SIZE(tmpl));
        if (rv != CKR_OK)
                return ckr_fail(p, "C_FindObjectsInit", rv);
        CK_ULONG n = 0;
        rv = p->f->C_FindObjects(s, ret, max, &n);
        CK_RV rv2 = p->f->C_FindObjectsFinal(s);
        if (rv != CKR_OK)
                return ckr_fail(p, "C_FindObjects", rv);
        if (rv2 != CKR_OK)
                return ckr_fail(p, "C_FindObjectsFinal", rv2);
        *ret_n = n;
        return 0;
}

/* The one secret key labelled label: -ENOKEY when none, -ENOTUNIQ when several. */
static int key_find(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const char *label, CK_OBJECT_HANDLE *ret) {
        CK_OBJECT_HANDLE h[2];
        CK_ULONG n;
        int r = keys_find(p, s, label, h, ARRAY_SIZE(h), &n);
        if (r < 0)
                return r;
        if (n == 0)
                return -ENOKEY;
        if (n > 1)
                return log_error_errno(-ENOTUNIQ, "kms: PKCS#11 token '%s' has several keys labelled '%s'",
                                       p->token, label);
        *ret = h[0];
        return 0;
}

/* One wrap or unwrap: blob is iv || ciphertext || tag. */
struct gcm_call {
        bool decrypt;
        const char *label;
        const uint8_t *aad;
        size_t aad_len;
        uint8_t *blob;         /* encrypt: iv in, the rest out; decrypt: in */
        const uint8_t *in_dek; /* encrypt */
        uint8_t *out_dek;      /* decrypt, written only on success */
};

/* AES-GCM of KMS_DEK_SIZE bytes in into SEALED_SIZE bytes out (ciphertext
 * || tag), or back (decrypt); out is written whole or not at all. A CKR_
 * code; CKR_DATA_LEN_RANGE for a token that gives a wrong length. */
static CK_RV gcm_do(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, CK_OBJECT_HANDLE key, bool decrypt,
                    const uint8_t iv[IV_SIZE], const uint8_t *aad, size_t aad_len, const uint8_t *in,
                    uint8_t *out) {
        CK_GCM_PARAMS gp = {
                .pIv = (CK_BYTE_PTR) iv,
                .ulIvLen = IV_SIZE,
                .ulIvBits = IV_SIZE * 8,
                .pAAD = (CK_BYTE_PTR) aad,
                .ulAADLen = aad_len,
                .ulTagBits = TAG_SIZE * 8,
        };
        CK_MECHANISM m = {CKM_AES_GCM, &gp, sizeof gp};
        /* room for the whole input either way: a token may want it before
         * it knows the tag is good */
        uint8_t buf[SEALED_SIZE];
        CK_ULONG n = sizeof buf, want = decrypt ? KMS_DEK_SIZE : SEALED_SIZE;
        CK_RV rv = decrypt ? p->f->C_DecryptInit(s, &m, key) : p->f->C_EncryptInit(s, &m, key);
        if (rv == CKR_OK)
                rv = decrypt ? p->f->C_Decrypt(s, (CK_BYTE_PTR) in, SEALED_SIZE, buf, &n)
                             : p->f->C_Encrypt(s, (CK_BYTE_PTR) in, KMS_DEK_SIZE, buf, &n);
        if (rv == CKR_OK && n != want)
                rv = CKR_DATA_LEN_RANGE;
        if (rv == CKR_OK)
                memcpy(out, buf, want);
        sodium_memzero(buf, sizeof buf);
        return rv;
}

/*
 * What a failed decryption means. A tag that does not verify should be
 * CKR_ENCRYPTED_DATA_INVALID (or 3.0's CKR_AEAD_DECRYPT_FAILED), but some
 * tokens say CKR_GENERAL_ERROR or CKR_FUNCTION_FAILED (SoftHSM 2.6 does),
 * which a broken token says too. So then the same key seals and opens a
 * probe: when that works the token is fine and the input was bad
 * (-EBADMSG); else it is the token's failure (-EIO, logged).
 */
static int decrypt_failed(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, CK_OBJECT_HANDLE key, CK_RV rv) {
        if (rv != CKR_GENERAL_ERROR && rv != CKR_FUNCTION_FAILED)
                return ckr_fail(p, "C_Decrypt", rv);
        static const uint8_t aad[] = "airlock-kms-probe";
        uint8_t iv[IV_SIZE], plain[KMS_DEK_SIZE] = {}, sealed[SEALED_SIZE], back[KMS_DEK_SIZE];
        randombytes_buf(iv, sizeof iv);
        CK_RV prv = gcm_do(p, s, key, false, iv, aad, sizeof aad, plain, sealed);
        if (prv == CKR_OK)
                prv = gcm_do(p, s, key, true, iv, aad, sizeof aad, sealed, back);
        if (prv == CKR_OK && sodium_is_zero(back, sizeof back))
                return -EBADMSG;
        ckr_fail(p, "C_Decrypt", rv);
        return ckr_fail(p, "an AES-GCM round trip after C_Decrypt failed", prv);
}

static int gcm_run(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const struct gcm_call *c) {
        CK_OBJECT_HANDLE key;
        int r = key_find(p, s, c->label, &key);
        if (r < 0)
                return r;
        if (!c->decrypt) {
                CK_RV rv =
                        gcm_do(p, s, key, false, c->blob, c->aad, c->aad_len, c->in_dek, c->blob + IV_SIZE);
                return rv == CKR_OK ? 0 : ckr_fail(p, "AES-GCM encryption", rv);
        }
        CK_RV rv = gcm_do(p, s, key, true, c->blob, c->aad, c->aad_len, c->blob + IV_SIZE, c->out_dek);
        return rv == CKR_OK ? 0 : decrypt_failed(p, s, key, rv);
}

/* Runs c in a session; a pooled session the token no longer knows is
 * dropped with the rest of the pool and c tried once more in a new one. */
static int gcm_in_session(struct kms_pkcs11 *p, const struct gcm_call *c) {
        for (unsigned attempt = 0;; attempt++) {
                CK_SESSION_HANDLE s;
                bool pooled;
                int r = session_get(p, &s, &pooled);
                if (r < 0)
                        return r;
                r = gcm_run(p, s, c);
                /* these leave no operation active in the session: it can serve again */
                bool clean = r == 0 || r == -EBADMSG || r == -ENOKEY || r == -EKEYREVOKED || r == -ENOTUNIQ;
                session_put(p, s, clean);
                if (r == -EHOSTDOWN && pooled && attempt == 0) {
                        pool_drain(p);
                        continue;
                }
                return r;
        }
}

static int pkcs11_wrap(struct kms *k, const char *tenant, const char *key_ref,
                       const uint8_t dek[KMS_DEK_SIZE], struct kms_wrapped *w) {
        struct kms_pkcs11 *p = to_pkcs11(k);
        w->type = KMS_TYPE_PKCS11;
        snprintf(w->label, sizeof w->label, "%s", key_ref);
        uint8_t aad[KMS_AAD_MAX];
        size_t aad_len = kms_aad(tenant, w, aad);
        randombytes_buf(w->blob, IV_SIZE);
        struct gcm_call c = {
                .label = key_ref,
                .aad = aad,
                .aad_len = aad_len,
                .blob = w->blob,
                .in_dek = dek,
        };
        int r = gcm_in_session(p, &c);
        if (r < 0)
                return r == -EKEYREVOKED ? -ENOKEY : r;
        w->blob_len = BLOB_SIZE;
        return 0;
}

static int pkcs11_unwrap(struct kms *k, const char *tenant, const struct kms_wrapped *w,
                         uint8_t dek[KMS_DEK_SIZE]) {
        struct kms_pkcs11 *p = to_pkcs11(k);
        uint8_t aad[KMS_AAD_MAX], blob[BLOB_SIZE];
        size_t aad_len = kms_aad(tenant, w, aad);
        memcpy(blob, w->blob, BLOB_SIZE);
        struct gcm_call c = {
                .decrypt = true,
                .label = w->label,
                .aad = aad,
                .aad_len = aad_len,
                .blob = blob,
                .out_dek = dek,
        };
        int r = gcm_in_session(p, &c);
        return r == -ENOKEY ? -EKEYREVOKED : r;
}

/* Runs fn on a read-write session, the arguments of generate and destroy
 * checked first. */
static int admin_run(struct kms *k, const char *label,
                     int (*fn)(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const char *label)) {
        if (!k || !kms_label_is_valid(label))
                return -EINVAL;
        if (k->ops != &kms_pkcs11_ops)
                return -EOPNOTSUPP;
        struct kms_pkcs11 *p = to_pkcs11(k);
        CK_SESSION_HANDLE s;
        int r = session_open(p, true, &s);
        if (r < 0)
                return r;
        r = fn(p, s, label);
        p->f->C_CloseSession(s);
        return r;
}

static int generate(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const char *key_label) {
        CK_OBJECT_HANDLE key;
        int r = key_find(p, s, key_label, &key);
        if (r == 0 || r == -ENOTUNIQ)
                return -EEXIST;
        if (r != -ENOKEY)
                return r;
        CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
        CK_KEY_TYPE type = CKK_AES;
        CK_ULONG len = 32;
        CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
        CK_ATTRIBUTE tmpl[] = {
                {CKA_CLASS, &cls, sizeof cls},
                {CKA_KEY_TYPE, &type, sizeof type},
                {CKA_VALUE_LEN, &len, sizeof len},
                {CKA_LABEL, (void *) key_label, strlen(key_label)},
                {CKA_TOKEN, &yes, sizeof yes},
                {CKA_PRIVATE, &yes, sizeof yes},
                {CKA_SENSITIVE, &yes, sizeof yes},
                {CKA_EXTRACTABLE, &no, sizeof no},
                {CKA_ENCRYPT, &yes, sizeof yes},
                {CKA_DECRYPT, &yes, sizeof yes},
                {CKA_WRAP, &no, sizeof no},
                {CKA_UNWRAP, &no, sizeof no},
        };
        CK_MECHANISM m = {CKM_AES_KEY_GEN, NULL, 0};
        CK_RV rv = p->f->C_GenerateKey(s, &m, tmpl, ARRAY_SIZE(tmpl), &key);
        return rv == CKR_OK ? 0 : ckr_fail(p, "C_GenerateKey", rv);
}

int kms_pkcs11_generate(struct kms *k, const char *key_label) {
        return admin_run(k, key_label, generate);
}

static int destroy(struct kms_pkcs11 *p, CK_SESSION_HANDLE s, const char *key_label) {
        size_t total = 0;
        int r = 0;
        for (unsigned round = 0; round < DESTROY_ROUNDS; round++) {
                CK_OBJECT_HANDLE h[DESTROY_BATCH];
                CK_ULONG n;
                if ((r = keys_find(p, s, key_label, h, ARRAY_SIZE(h), &n)) < 0 || n == 0)
                        break;
                for (CK_ULONG i = 0; i < n && r >= 0; i++) {
                        CK_RV rv = p->f->C_DestroyObject(s, h[i]);
                        /* gone meanwhile (another process): as good */
                        if (rv != CKR_OK && rv != CKR_OBJECT_HANDLE_INVALID)
                                r = ckr_fail(p, "C_DestroyObject", rv);
                        total++;
                }
                if (r < 0)
                        break;
        }
        if (r < 0)
                return r;
        return total > 0 ? 0 : -ENOKEY;
}

int kms_pkcs11_destroy(struct kms *k, const char *key_label) {
        return admin_run(k, key_label, destroy);
}

static void pkcs11_free(struct kms *k) {
        struct kms_pkcs11 *p = to_pkcs11(k);
        if (p->f) {
                pool_drain(p);
                /* the last session of the process on the token logs it out */
                if (p->have_login)
                        p->f->C_CloseSession(p->login);
        }
        if (p->registered)
                module_unref(p->f);
        if (p->dl)
                dlclose(p->dl);
        pthread_mutex_destroy(&p->lock);
        free(p);
}

int kms_open_pkcs11(const char *module, const char *token_label, const char *pin_file, struct kms **ret) {
        if (!module || !*module || !token_label || !*token_label || strlen(token_label) > TOKEN_LABEL_SIZE ||
            !pin_file || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct kms_pkcs11 *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->kms.ops = &kms_pkcs11_ops;
        pthread_mutex_init(&p->lock, NULL);
        snprintf(p->token, sizeof p->token, "%s", token_label);
        _cleanup_(kms_freep) struct kms *k = &p->kms;

        p->dl = dlopen(module, RTLD_NOW | RTLD_LOCAL);
        if (!p->dl) {
                int r = access(module, F_OK) < 0 ? -ENOENT : -ELIBBAD;
                return log_error_errno(r, "kms: cannot load the PKCS#11 module %s: %s", module, dlerror());
        }
        CK_C_GetFunctionList get = (CK_C_GetFunctionList) dlsym(p->dl, "C_GetFunctionList");
        if (!get)
                return log_error_errno(-ELIBBAD, "kms: %s is not a PKCS#11 module (no C_GetFunctionList)",
                                       module);
        CK_FUNCTION_LIST_PTR f = NULL;
        CK_RV rv = get(&f);
        if (rv != CKR_OK || !f)
                return log_error_errno(-ELIBBAD, "kms: %s: C_GetFunctionList failed", module);
        int r = module_ref(f, module);
        if (r < 0)
                return r;
        p->f = f;
        p->registered = true;
        if ((r = slot_find(p, token_label)) < 0)
                return r;

        char *pin = sodium_malloc(PIN_MAX + 1);
        if (!pin)
                return -ENOMEM;
        size_t pin_len = 0;
        r = pin_read(pin_file, pin, &pin_len);
        if (r == 0)
                r = session_open(p, false, &p->login);
        if (r == 0) {
                p->have_login = true;
                rv = f->C_Login(p->login, CKU_USER, (CK_UTF8CHAR_PTR) pin, pin_len);
                /* already: another handle of this process logged in to this token */
                if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
                        char buf[32];
                        r = ckr_errno(rv);
                        log_error("kms: PKCS#11 token '%s' refused the login with the PIN in %s: %s%s",
                                  p->token, pin_file, ckr_str(rv, buf),
                                  r == -EACCES ? " (wrong or locked PIN?)" : "");
                }
        }
        sodium_free(pin); /* wipes it */
        if (r < 0)
                return r;
        *ret = TAKE_PTR(k);
        return 0;
}

const struct kms_ops kms_pkcs11_ops = {
        .kind = "pkcs11",
        .type = KMS_TYPE_PKCS11,
        .wrap = pkcs11_wrap,
        .unwrap = pkcs11_unwrap,
        .free = pkcs11_free,
};
