/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local KMS: DIR/<tenant>/<version>.kek, 32 random bytes each. Every
 * wrap and unwrap reads its key file again (a few microseconds), so a
 * rotation or a destroy by another process (the CLI) counts at once: no
 * key is cached. The key is read into one sodium_malloc()ed buffer per
 * handle, under a mutex, and wiped after each use. Rotations and destroys
 * also take flock() on DIR, against other processes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kms-internal.h"
#include "log.h"
#include "macros.h"
#include "util.h"

#define KEK_SIZE crypto_aead_xchacha20poly1305_ietf_KEYBYTES
#define NONCE_SIZE crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_SIZE crypto_aead_xchacha20poly1305_ietf_ABYTES
#define TMP_PREFIX ".tmp-"
#define SHRED_MAX 4096 /* bytes overwritten of a key file (they are 32) */

_Static_assert(KEK_SIZE == 32, "KEK size");

struct kms_local {
        struct kms kms;
        int dfd;              /* DIR */
        pthread_mutex_t lock; /* kek; this process' rotations and destroys */
        uint8_t *kek;         /* sodium_malloc()ed: locked, guarded, wiped after each use */
};

static struct kms_local *to_local(struct kms *k) {
        return (struct kms_local *) k;
}

/* "<version>.kek" -> version; false for any other name. */
static bool version_from_name(const char *name, unsigned *ret) {
        unsigned v = 0;
        size_t d = 0;
        if (name[0] < '1' || name[0] > '9')
                return false;
        for (; name[d] >= '0' && name[d] <= '9'; d++) {
                if (d == 9)
                        return false;
                v = v * 10 + (unsigned) (name[d] - '0');
        }
        if (strcmp(name + d, ".kek") != 0)
                return false;
        *ret = v;
        return true;
}

/* DIR/<tenant> as a directory fd; with create, made (0700) when missing. */
static int tenant_open(struct kms_local *l, const char *tenant, bool create) {
        if (create) {
                if (mkdirat(l->dfd, tenant, 0700) == 0) {
                        if (fsync(l->dfd) < 0)
                                return negative_errno();
                } else if (errno != EEXIST)
                        return negative_errno();
        }
        int fd = openat(l->dfd, tenant, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd;
}

/* The tenant's directory tfd, to read (a descriptor of its own). */
static int dir_read(int tfd, DIR **ret) {
        int fd = openat(tfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                safe_close(fd);
                return -ENOMEM;
        }
        *ret = d;
        return 0;
}

/* The highest key version in the tenant's directory, 0 when there is none. */
static int version_max(int tfd, unsigned *ret) {
        DIR *d;
        int r = dir_read(tfd, &d);
        if (r < 0)
                return r;
        unsigned max = 0, v;
        for (struct dirent *e; (e = readdir(d));)
                if (version_from_name(e->d_name, &v) && v > max)
                        max = v;
        closedir(d);
        *ret = max;
        return 0;
}

/* Reads key file version into l->kek (the caller holds l->lock and wipes
 * it). -ENOENT when it is not there; -EIO, logged, when it is not a
 * 32-byte regular file. */
static int kek_read(struct kms_local *l, int tfd, const char *tenant, unsigned version) {
        char name[32];
        snprintf(name, sizeof name, "%u.kek", version);
        _cleanup_close_ int fd = openat(tfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return -ENOENT;
                /* ELOOP: a symlink, which we never make */
                return log_error_errno(errno == ELOOP ? -EIO : negative_errno(),
                                       "kms: cannot open the key file %s/%s: %m", tenant, name);
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode) || st.st_size != KEK_SIZE)
                return log_error_errno(-EIO, "kms: the key file %s/%s is not %d bytes: corrupt", tenant,
                                       name, KEK_SIZE);
        int r = fd_read_exact(fd, l->kek, KEK_SIZE);
        return r < 0 ? log_error_errno(r == -EPIPE ? -EIO : r, "kms: cannot read the key file %s/%s: %m",
                                       tenant, name)
                     : 0;
}

static int local_wrap(struct kms *k, const char *tenant, const char *key_ref,
                      const uint8_t dek[KMS_DEK_SIZE], struct kms_wrapped *w) {
        struct kms_local *l = to_local(k);
        _cleanup_close_ int tfd = tenant_open(l, tenant, false);
        if (tfd < 0)
                return tfd == -ENOENT ? -ENOKEY : tfd;
        unsigned version;
        int r = version_max(tfd, &version);
        if (r < 0)
                return r;
        if (version == 0)
                return -ENOKEY;
        w->type = KMS_TYPE_LOCAL;
        w->version = version;
        uint8_t aad[KMS_AAD_MAX];
        size_t aad_len = kms_aad(tenant, w, aad);
        randombytes_buf(w->blob, NONCE_SIZE);

        pthread_mutex_lock(&l->lock);
        r = kek_read(l, tfd, tenant, version);
        if (r == 0)
                crypto_aead_xchacha20poly1305_ietf_encrypt(w->blob + NONCE_SIZE, NULL, dek, KMS_DEK_SIZE,
                                                           aad, aad_len, NULL, w->blob, l->kek);
        sodium_memzero(l->kek, KEK_SIZE);
        pthread_mutex_unlock(&l->lock);
        if (r < 0)
                return r == -ENOENT ? -ENOKEY : r; /* destroyed since we looked */
        w->blob_len = NONCE_SIZE + KMS_DEK_SIZE + TAG_SIZE;
        return 0;
}

static int local_unwrap(struct kms *k, const char *tenant, const struct kms_wrapped *w,
                        uint8_t dek[KMS_DEK_SIZE]) {
        struct kms_local *l = to_local(k);
        _cleanup_close_ int tfd = tenant_open(l, tenant, false);
        if (tfd < 0)
                return tfd == -ENOENT ? -EKEYREVOKED : tfd;
        uint8_t aad[KMS_AAD_MAX], plain[KMS_DEK_SIZE];
        size_t aad_len = kms_aad(tenant, w, aad);

        pthread_mutex_lock(&l->lock);
        int r = kek_read(l, tfd, tenant, w->version);
        if (r == 0 && crypto_aead_xchacha20poly1305_ietf_decrypt(plain, NULL, NULL, w->blob + NONCE_SIZE,
                                                                 KMS_DEK_SIZE + TAG_SIZE, aad, aad_len,
                                                                 w->blob, l->kek) != 0)
                r = -EBADMSG;
        sodium_memzero(l->kek, KEK_SIZE);
        pthread_mutex_unlock(&l->lock);
        if (r == 0)
                memcpy(dek, plain, KMS_DEK_SIZE);
        sodium_memzero(plain, sizeof plain);
        return r == -ENOENT ? -EKEYREVOKED : r;
}

/* Holds l->lock and flock(DIR) for a rotation or a destroy. */
static int dir_lock(struct kms_local *l) {
        pthread_mutex_lock(&l->lock);
        while (flock(l->dfd, LOCK_EX) < 0) {
                if (errno == EINTR)
                        continue;
                int r = negative_errno();
                pthread_mutex_unlock(&l->lock);
                return r;
        }
        return 0;
}

static void dir_unlock(struct kms_local *l) {
        flock(l->dfd, LOCK_UN);
        pthread_mutex_unlock(&l->lock);
}

/* Writes a new random key as version in tfd: a temporary file, fsync, then
 * linkat() (which never replaces), so the name holds a whole key or none. */
static int kek_create(struct kms_local *l, int tfd, unsigned version) {
        char tmp[sizeof TMP_PREFIX + 16], hex[17], name[32];
        uint8_t rnd[8];
        randombytes_buf(rnd, sizeof rnd);
        sodium_bin2hex(hex, sizeof hex, rnd, sizeof rnd);
        snprintf(tmp, sizeof tmp, TMP_PREFIX "%s", hex);
        snprintf(name, sizeof name, "%u.kek", version);
        _cleanup_close_ int fd =
                openat(tfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return negative_errno();
        randombytes_buf(l->kek, KEK_SIZE);
        int r = fd_write_all(fd, l->kek, KEK_SIZE);
        sodium_memzero(l->kek, KEK_SIZE);
        if (r == 0 && fsync(fd) < 0)
                r = negative_errno();
        if (r == 0 && linkat(tfd, tmp, tfd, name, 0) < 0)
                r = negative_errno();
        /* the temporary name goes either way (a key never used needs no shredding) */
        if (unlinkat(tfd, tmp, 0) < 0 && r == 0)
                r = negative_errno();
        if (r == 0 && fsync(tfd) < 0)
                r = negative_errno();
        return r;
}

/* The arguments of rotate and destroy checked, and the directory locked
 * (dir_unlock() it). */
static int admin_lock(struct kms *k, const char *tenant, struct kms_local **ret) {
        if (!k || !kms_tenant_is_valid(tenant))
                return -EINVAL;
        if (k->ops != &kms_local_ops)
                return -EOPNOTSUPP;
        int r = dir_lock(to_local(k));
        if (r < 0)
                return r;
        *ret = to_local(k);
        return 0;
}

int kms_local_rotate(struct kms *k, const char *tenant, unsigned *ret_version) {
        struct kms_local *l;
        int r = admin_lock(k, tenant, &l);
        if (r < 0)
                return r;
        unsigned version = 0;
        int tfd = tenant_open(l, tenant, true);
        r = tfd;
        if (tfd >= 0)
                r = version_max(tfd, &version);
        if (r >= 0 && version >= KMS_LOCAL_VERSION_MAX)
                r = -EOVERFLOW;
        if (r >= 0)
                r = kek_create(l, tfd, ++version);
        safe_close(tfd);
        dir_unlock(l);
        if (r < 0)
                return r;
        if (ret_version)
                *ret_version = version;
        return 0;
}

/* Overwrites name in tfd with random bytes, syncs and unlinks it. Only
 * regular files: anything else is left alone (-EIO). */
static int shred(int tfd, const char *name) {
        _cleanup_close_ int fd = openat(tfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EIO;
        uint8_t junk[SHRED_MAX];
        size_t n = (size_t) MIN((off_t) SHRED_MAX, st.st_size);
        randombytes_buf(junk, n);
        if (n > 0 && pwrite(fd, junk, n, 0) != (ssize_t) n)
                return negative_errno();
        if (fdatasync(fd) < 0)
                return negative_errno();
        if (unlinkat(tfd, name, 0) < 0 && errno != ENOENT)
                return negative_errno();
        return 1;
}

/* One pass over the tenant's directory shredding key files (and the
 * temporary ones of a crashed rotation); how many, or -errno. */
static int shred_pass(int tfd) {
        DIR *d;
        int r = dir_read(tfd, &d);
        if (r < 0)
                return r;
        int n = 0;
        unsigned v;
        for (struct dirent *e; r >= 0 && (e = readdir(d));) {
                if (!version_from_name(e->d_name, &v) &&
                    strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
                        continue;
                r = shred(tfd, e->d_name);
                n += r > 0;
        }
        closedir(d);
        return r < 0 ? r : n;
}

int kms_local_destroy(struct kms *k, const char *tenant) {
        struct kms_local *l;
        int r = admin_lock(k, tenant, &l);
        if (r < 0)
                return r;
        int tfd = tenant_open(l, tenant, false), total = 0;
        r = tfd == -ENOENT ? -ENOKEY : tfd;
        /* passes until one finds nothing: readdir need not show entries
         * after one was unlinked during it */
        while (r >= 0 && (r = shred_pass(tfd)) > 0)
                total += r;
        if (r >= 0 && fsync(tfd) < 0)
                r = negative_errno();
        safe_close(tfd);
        if (r >= 0) {
                /* a file that is not ours keeps the directory: the keys are gone all the same */
                if (unlinkat(l->dfd, tenant, AT_REMOVEDIR) < 0 && errno != ENOTEMPTY && errno != EEXIST)
                        r = negative_errno();
                else if (fsync(l->dfd) < 0)
                        r = negative_errno();
        }
        dir_unlock(l);
        if (r < 0)
                return r;
        return total > 0 ? 0 : -ENOKEY;
}

static void local_free(struct kms *k) {
        struct kms_local *l = to_local(k);
        safe_close(l->dfd);
        sodium_free(l->kek);
        pthread_mutex_destroy(&l->lock);
        free(l);
}

int kms_open_local(const char *dir, struct kms **ret) {
        if (!dir || !*dir || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        int r = mkdir_p(dir, 0700);
        if (r < 0 && r != -ENOTDIR)
                return r;
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return negative_errno();
        struct stat st;
        if (fstat(dfd, &st) < 0)
                return negative_errno();
        if (st.st_mode & 077)
                return -EPERM;
        struct kms_local *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->kek = sodium_malloc(KEK_SIZE);
        if (!l->kek) {
                free(l);
                return -ENOMEM;
        }
        l->kms.ops = &kms_local_ops;
        l->dfd = TAKE_FD(dfd);
        pthread_mutex_init(&l->lock, NULL);
        *ret = &l->kms;
        return 0;
}

const struct kms_ops kms_local_ops = {
        .kind = "local",
        .type = KMS_TYPE_LOCAL,
        .wrap = local_wrap,
        .unwrap = local_unwrap,
        .free = local_free,
};
