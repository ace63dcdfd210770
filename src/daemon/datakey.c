/* SPDX-License-Identifier: Apache-2.0 */
/* Data keys for the object store: see datakey.h. */
#include "datakey.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "util.h"

static struct kms *kms; /* the key files */
static struct kms *hsm; /* the PKCS#11 token, when one is configured */
static char kms_dir[CONFIG_PATH_MAX + 32];
/* one rotation, revocation or first KEK at a time in this process (lib/kms
 * locks against other processes) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int datakey_init(const struct daemon_config *config) {
        if ((size_t) snprintf(kms_dir, sizeof kms_dir, "%s", config->kms_dir) >= sizeof kms_dir)
                return log_error_errno(-ENAMETOOLONG, "The KMS directory's path is too long");
        int r = kms_open_local(kms_dir, &kms);
        if (r < 0)
                return log_error_errno(r, "Cannot open the key store %s: %m", kms_dir);
        _cleanup_free_ char *state = strdup_printf("%s/.state", kms_dir);
        if (!state || ((r = mkdir_p(state, 0700)) < 0))
                return log_error_errno(state ? r : -ENOMEM, "Cannot create %s/.state: %m", kms_dir);
        if (config->pkcs11_module[0]) {
                r = kms_open_pkcs11(config->pkcs11_module, config->pkcs11_token, config->pkcs11_pin_file, &hsm);
                if (r < 0)
                        return log_error_errno(r, "Cannot open the PKCS#11 token %s through %s: %m",
                                               config->pkcs11_token, config->pkcs11_module);
                log_info("PKCS#11 token %s open: tenants may keep their key-encryption key on it",
                         config->pkcs11_token);
        }
        return 0;
}

void datakey_done(void) {
        kms_free(kms);
        kms_free(hsm);
        kms = hsm = NULL;
}

static const char *owner_of(const char *tenant) {
        return tenant ? tenant : DATAKEY_ADMIN;
}

/*
 * A revocation destroys every version of the tenant's KEK, and the next
 * rotation starts a new generation of KEKs under a name of its own
 * (TENANT, then TENANT.g1, TENANT.g2, ...), whose versions count from 1
 * again. What the node stores is "gN:" + the KMS's wrapped string: an
 * image sealed under a revoked generation is -EKEYREVOKED, never mistaken
 * for one of the new generation's version of the same number.
 */
/* The generation and revocation markers live in DIR/.state: no tenant's
 * KEK directory can be named so (names do not start with '.'). */
static char *generation_path(const char *tenant) {
        return strdup_printf("%s/.state/%s.generation", kms_dir, owner_of(tenant));
}

static unsigned generation_of(const char *tenant) {
        _cleanup_free_ char *p = generation_path(tenant), *text = NULL;
        unsigned g = 0;
        if (p && file_read_all(p, 32, &text, NULL) >= 0 && sscanf(text, "%u", &g) != 1)
                g = 0;
        return g;
}

/* The KMS's name of the tenant's KEK of generation g. */
static void kek_name(const char *tenant, unsigned g, char out[80]) {
        if (g == 0)
                snprintf(out, 80, "%s", owner_of(tenant));
        else
                snprintf(out, 80, "%s.g%u", owner_of(tenant), g);
}

/* The marker a revocation leaves beside the tenant's (now gone) keys, so
 * that its next image is not sealed under a silently made new KEK. */
static char *revoked_path(const char *tenant) {
        return strdup_printf("%s/.state/%s.revoked", kms_dir, owner_of(tenant));
}

static bool is_revoked(const char *tenant) {
        _cleanup_free_ char *p = revoked_path(tenant);
        return p && access(p, F_OK) == 0;
}

bool datakey_is_revoked(const char *tenant) {
        return kms && is_revoked(tenant);
}

/*
 * A tenant whose KEK is on the PKCS#11 token has DIR/.state/TENANT.pkcs11
 * naming its key's label. Its wrapped keys are "p:" + the KMS's string
 * (which names the label: an older label, of before a rotation, still
 * opens what it wrapped). A rotation generates a new key labelled
 * BASE-rN; a revocation destroys the current label's key and those of its
 * rotations.
 */
static char *label_path(const char *tenant) {
        return strdup_printf("%s/.state/%s.pkcs11", kms_dir, owner_of(tenant));
}

static bool tenant_label(const char *tenant, char label[KMS_LABEL_MAX + 1]) {
        _cleanup_free_ char *p = label_path(tenant), *text = NULL;
        if (!p || file_read_all(p, KMS_LABEL_MAX + 2, &text, NULL) < 0)
                return false;
        text[strcspn(text, "\r\n")] = 0;
        if (!*text || strlen(text) > KMS_LABEL_MAX)
                return false;
        snprintf(label, KMS_LABEL_MAX + 1, "%s", text);
        return true;
}

static int label_write(const char *tenant, const char *label) {
        _cleanup_free_ char *p = label_path(tenant), *text = strdup_printf("%s\n", label);
        return p && text ? file_write_atomic(p, text, strlen(text), 0600) : -ENOMEM;
}

/* BASE and N of a label BASE-rN (N 1 for a label without the suffix). */
static unsigned label_rotation(const char *label, char base[KMS_LABEL_MAX + 1]) {
        snprintf(base, KMS_LABEL_MAX + 1, "%s", label);
        char *r = strrchr(base, '-');
        unsigned n = 0;
        int end = 0;
        if (r && r[1] == 'r' && sscanf(r + 2, "%u%n", &n, &end) == 1 && r[2 + end] == 0 && n >= 2) {
                *r = 0;
                return n;
        }
        return 1;
}

static bool label_is_valid(const char *l) {
        size_t n = strlen(l);
        return n >= 1 && n <= KMS_LABEL_MAX - 8 && strspn(l, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789_-") == n;
}

int datakey_new(const char *tenant, struct datakey *ret) {
        if (!kms)
                return -ENOTCONN;
        if (is_revoked(tenant))
                return -EKEYREVOKED;
        randombytes_buf(ret->key, sizeof ret->key);
        char label[KMS_LABEL_MAX + 1];
        if (tenant_label(tenant, label)) {
                char wrapped[KMS_WRAPPED_MAX + 1];
                int r = hsm ? kms_wrap(hsm, owner_of(tenant), label, ret->key, wrapped) : -EHOSTDOWN;
                if (r >= 0 && (size_t) snprintf(ret->wrapped, sizeof ret->wrapped, "p:%s", wrapped) >= sizeof ret->wrapped)
                        r = -E2BIG;
                if (r == -ENOKEY)
                        r = -EKEYREVOKED; /* its key is gone from the token */
                if (r < 0)
                        sodium_memzero(ret->key, sizeof ret->key);
                return r;
        }
        unsigned g = generation_of(tenant);
        char name[80], wrapped[KMS_WRAPPED_MAX + 1];
        kek_name(tenant, g, name);
        int r = kms_wrap(kms, name, NULL, ret->key, wrapped);
        if (r == -ENOKEY) { /* its first image: its first KEK */
                pthread_mutex_lock(&lock);
                r = kms_wrap(kms, name, NULL, ret->key, wrapped);
                if (r == -ENOKEY && !is_revoked(tenant)) {
                        unsigned v = 0;
                        r = kms_local_rotate(kms, name, &v);
                        if (r >= 0) {
                                log_info("key-encryption key %s version %u made for its first image", name, v);
                                r = kms_wrap(kms, name, NULL, ret->key, wrapped);
                        }
                } else if (r == -ENOKEY)
                        r = -EKEYREVOKED;
                pthread_mutex_unlock(&lock);
        }
        if (r >= 0 && (size_t) snprintf(ret->wrapped, sizeof ret->wrapped, "g%u:%s", g, wrapped) >= sizeof ret->wrapped)
                r = -E2BIG;
        if (r < 0)
                sodium_memzero(ret->key, sizeof ret->key);
        return r;
}

int datakey_open(const char *tenant, const char *wrapped, struct datakey *ret) {
        if (!kms)
                return -ENOTCONN;
        if (is_revoked(tenant))
                return -EKEYREVOKED;
        if (strncmp(wrapped, "p:", 2) == 0) {
                if (!hsm)
                        return -EHOSTDOWN;
                int r = kms_unwrap(hsm, owner_of(tenant), wrapped + 2, ret->key);
                if (r < 0)
                        return r == -EKEYREVOKED || r == -EHOSTDOWN || r == -EACCES ? r : -EBADMSG;
                snprintf(ret->wrapped, sizeof ret->wrapped, "%s", wrapped);
                return 0;
        }
        unsigned g = 0;
        int n = 0;
        if (sscanf(wrapped, "g%u:%n", &g, &n) != 1 || n == 0 || g > generation_of(tenant))
                return -EBADMSG;
        if (g < generation_of(tenant))
                return -EKEYREVOKED; /* a generation a revocation destroyed */
        char name[80];
        kek_name(tenant, g, name);
        int r = kms_unwrap(kms, name, wrapped + n, ret->key);
        if (r < 0)
                return r == -EKEYREVOKED ? r : -EBADMSG;
        snprintf(ret->wrapped, sizeof ret->wrapped, "%s", wrapped);
        return 0;
}

int datakey_state(const char *tenant, struct datakey_state *ret) {
        if (!kms)
                return -ENOTCONN;
        char label[KMS_LABEL_MAX + 1];
        bool on_hsm = tenant_label(tenant, label);
        if (is_revoked(tenant)) {
                *ret = (struct datakey_state){ .kind = on_hsm ? "pkcs11" : "local", .state = "revoked" };
                return 0;
        }
        if (on_hsm) {
                *ret = (struct datakey_state){ .kind = "pkcs11", .state = "active" };
                snprintf(ret->label, sizeof ret->label, "%s", label);
                return 0;
        }
        /* the highest version is what wraps: a wrap says which one */
        uint8_t probe[DATAKEY_SIZE] = { 0 };
        char wrapped[KMS_WRAPPED_MAX + 1], name[80];
        kek_name(tenant, generation_of(tenant), name);
        int r = kms_wrap(kms, name, NULL, probe, wrapped);
        if (r == -ENOKEY) {
                *ret = (struct datakey_state){ .kind = "local", .state = "none" };
                return 0;
        }
        struct kms_wrapped w;
        if (r >= 0)
                r = kms_wrapped_parse(wrapped, &w);
        if (r < 0)
                return r;
        *ret = (struct datakey_state){ .kind = "local", .state = "active", .version = w.version };
        return 0;
}

int datakey_rotate(const char *tenant, unsigned *ret_version) {
        if (!kms)
                return -ENOTCONN;
        char label[KMS_LABEL_MAX + 1];
        if (tenant_label(tenant, label)) {
                /* a new key on the token, BASE-rN+1; the older ones open
                 * what they wrapped (after a revocation, there are none) */
                if (!hsm)
                        return -EHOSTDOWN;
                char base[KMS_LABEL_MAX + 1], next[KMS_LABEL_MAX + 16];
                unsigned n = label_rotation(label, base);
                snprintf(next, sizeof next, "%s-r%u", base, n + 1);
                pthread_mutex_lock(&lock);
                int r = kms_pkcs11_generate(hsm, next);
                if (r >= 0)
                        r = label_write(tenant, next);
                _cleanup_free_ char *p = revoked_path(tenant);
                if (r >= 0 && p && unlink(p) < 0 && errno != ENOENT)
                        r = negative_errno();
                pthread_mutex_unlock(&lock);
                if (r >= 0 && ret_version)
                        *ret_version = n + 1;
                return r;
        }
        pthread_mutex_lock(&lock);
        _cleanup_free_ char *p = revoked_path(tenant), *gp = generation_path(tenant);
        int r = p && gp ? 0 : -ENOMEM;
        unsigned g = generation_of(tenant);
        if (r >= 0 && is_revoked(tenant)) {
                /* after a revocation: a new generation, never the old names */
                char text[16];
                snprintf(text, sizeof text, "%u\n", ++g);
                r = file_write_atomic(gp, text, strlen(text), 0600);
        }
        char name[80];
        kek_name(tenant, g, name);
        if (r >= 0)
                r = kms_local_rotate(kms, name, ret_version);
        if (r >= 0 && unlink(p) < 0 && errno != ENOENT)
                r = negative_errno();
        pthread_mutex_unlock(&lock);
        return r;
}

int datakey_revoke(const char *tenant) {
        if (!kms)
                return -ENOTCONN;
        pthread_mutex_lock(&lock);
        _cleanup_free_ char *p = revoked_path(tenant);
        /* the marker first: from now on nothing new is sealed for it, even
         * if the destruction below is cut short */
        int r = p ? file_write_atomic(p, "", 0, 0600) : -ENOMEM;
        char name[80], label[KMS_LABEL_MAX + 1];
        kek_name(tenant, generation_of(tenant), name);
        if (r >= 0 && tenant_label(tenant, label)) {
                /* the current key and those of its rotations */
                char base[KMS_LABEL_MAX + 1], l[KMS_LABEL_MAX + 16];
                unsigned n = label_rotation(label, base);
                r = hsm ? 0 : -EHOSTDOWN;
                for (unsigned i = 1; r >= 0 && i <= n; i++) {
                        if (i == 1)
                                snprintf(l, sizeof l, "%s", base);
                        else
                                snprintf(l, sizeof l, "%s-r%u", base, i);
                        int k = kms_pkcs11_destroy(hsm, l);
                        if (k < 0 && k != -ENOKEY)
                                r = k;
                }
        } else if (r >= 0)
                r = kms_local_destroy(kms, name);
        pthread_mutex_unlock(&lock);
        return r == -ENOKEY ? 0 : r; /* none made yet: nothing to destroy, and none will be */
}

int datakey_set(const char *tenant, const char *kind, const char *label, bool generate) {
        if (!kms)
                return -ENOTCONN;
        _cleanup_free_ char *lp = label_path(tenant), *rp = revoked_path(tenant);
        if (!lp || !rp)
                return -ENOMEM;
        int r;
        pthread_mutex_lock(&lock);
        if (strcmp(kind, "local") == 0) {
                /* what the token wrapped still opens while its keys are there */
                r = unlink(lp) < 0 && errno != ENOENT ? negative_errno() : 0;
        } else if (strcmp(kind, "pkcs11") == 0) {
                r = !hsm ? -EHOSTDOWN : label && label_is_valid(label) ? 0 : -EINVAL;
                if (r >= 0 && generate)
                        r = kms_pkcs11_generate(hsm, label);
                if (r >= 0) { /* the key must be there and wrap */
                        uint8_t probe[KMS_DEK_SIZE] = { 0 };
                        char wrapped[KMS_WRAPPED_MAX + 1];
                        r = kms_wrap(hsm, owner_of(tenant), label, probe, wrapped);
                }
                if (r >= 0)
                        r = label_write(tenant, label);
        } else
                r = -EINVAL;
        /* a new place for its key is a fresh start after a revocation */
        if (r >= 0 && unlink(rp) < 0 && errno != ENOENT)
                r = negative_errno();
        pthread_mutex_unlock(&lock);
        return r;
}

bool datakey_has_pkcs11(void) {
        return hsm != NULL;
}

/*
 * The cluster's templates key: one data key, of the admin scope, that
 * seals the templates nodes share through the object store (a template
 * is the same for every tenant). Its wrapped form is kept in
 * DIR/.state/templates.key, made by the first replica that needs it; each
 * replica holds it opened for TEMPLATES_KEY_CACHE_MS at most, so a
 * revocation of the admin KEK stops it within that time.
 */
#define TEMPLATES_KEY_CACHE_MS (5 * 60 * 1000)

static int templates_key_make(const char *path) {
        struct datakey k;
        int r = datakey_new(NULL, &k);
        sodium_memzero(k.key, sizeof k.key);
        if (r < 0)
                return r;
        /* made beside, then linked: of two replicas making one at once,
         * the first link wins and the other reads it */
        _cleanup_free_ char *tmp = strdup_printf("%s.%d", path, (int) getpid());
        if (!tmp)
                return -ENOMEM;
        if ((r = file_write_atomic(tmp, k.wrapped, strlen(k.wrapped), 0600)) < 0)
                return r;
        r = link(tmp, path) < 0 && errno != EEXIST ? -errno : 0;
        (void) unlink(tmp);
        if (r >= 0)
                log_info("the cluster's templates key made (%s)", path);
        return r;
}

int datakey_templates(struct datakey *ret) {
        static struct datakey cached;
        static uint64_t cached_until_ms;
        if (!kms)
                return -ENOTCONN;
        _cleanup_free_ char *path = strdup_printf("%s/.state/templates.key", kms_dir);
        if (!path)
                return -ENOMEM;
        pthread_mutex_lock(&lock);
        uint64_t now = now_monotonic_ns() / 1000000ULL;
        bool fresh = cached_until_ms > now && !is_revoked(NULL);
        if (fresh)
                *ret = cached;
        pthread_mutex_unlock(&lock);
        if (fresh)
                return 0;
        int r = 0;
        for (int attempt = 0; attempt < 2; attempt++) {
                _cleanup_free_ char *wrapped = NULL;
                r = file_read_all(path, KMS_WRAPPED_MAX + 8, &wrapped, NULL);
                if (r == -ENOENT) {
                        if ((r = templates_key_make(path)) < 0)
                                return r;
                        continue;
                }
                if (r < 0)
                        return r;
                wrapped[strcspn(wrapped, "\r\n")] = 0;
                r = datakey_open(NULL, wrapped, ret);
                if (r == -EKEYREVOKED && !is_revoked(NULL)) {
                        /* the admin KEK was revoked, then rotated: the old key
                         * opens nothing any more, a new one takes its place
                         * (the templates sealed with the old one are built anew) */
                        log_warn("the cluster's templates key was wrapped by a revoked KEK: making a new one");
                        (void) unlink(path);
                        if ((r = templates_key_make(path)) < 0)
                                return r;
                        continue;
                }
                break;
        }
        if (r < 0)
                return r;
        pthread_mutex_lock(&lock);
        cached = *ret;
        cached_until_ms = now + TEMPLATES_KEY_CACHE_MS;
        pthread_mutex_unlock(&lock);
        return 0;
}
