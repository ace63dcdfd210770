/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The backend-independent half of the object store: the handle and its
 * dispatch (keys checked first), and snapshots on top of any backend:
 * content-addressed blobs, a manifest written last, verification on both
 * ways, delete and garbage collection.
 */
#include "objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "seal.h"
#include "util.h"

#define BLOB_PREFIX "blobs/"
#define SNAPSHOT_PREFIX "snapshots/"
#define MANIFEST_NAME "manifest.json"
/* 1: artifacts named by the SHA-256 of their bytes ("sha256"); 2: by that
 * of their sparse form ("sparse_sha256"); 3 (sealed, objstore-sealed.c):
 * blobs named by a keyed hash ("blob"), the meta and the artifacts'
 * digests sealed under the snapshot's data key ("sealed"). */
#define MANIFEST_VERSION 2
#define MANIFEST_VERSION_SEALED 3
#define HASH_BUF_SIZE (1u << 20)
#define SPARSE_BLOCK 4096

struct objstore {
        const struct objstore_ops *ops;
        void *data;
        /* Readers: every call but delete and gc, which take it exclusively
         * so they never remove a blob an upload in flight is about to use. */
        pthread_rwlock_t lock;
        objstore_blob_landed_fn blob_landed; /* NULL: nobody listens */
        void *blob_landed_userdata;
};

void objstore_set_blob_landed(struct objstore *o, objstore_blob_landed_fn fn, void *userdata) {
        o->blob_landed = fn;
        o->blob_landed_userdata = userdata;
}

int objstore_new(const struct objstore_ops *ops, void *data, struct objstore **ret) {
        if (!ops || !ops->put || !ops->get || !ops->exists || !ops->remove || !ops->list || !ops->free || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct objstore *o = calloc(1, sizeof *o);
        if (!o)
                return -ENOMEM;
        int r = pthread_rwlock_init(&o->lock, NULL);
        if (r != 0) {
                free(o);
                return -r;
        }
        o->ops = ops;
        o->data = data;
        *ret = o;
        return 0;
}

void *objstore_backend_data(struct objstore *o) {
        return o ? o->data : NULL;
}

const char *objstore_backend_name(struct objstore *o) {
        return o ? o->ops->name : NULL;
}

void objstore_free(struct objstore *o) {
        if (!o)
                return;
        o->ops->free(o);
        pthread_rwlock_destroy(&o->lock);
        free(o);
}

static bool char_is_safe(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
}

int objstore_key_check(const char *key) {
        if (!key)
                return -EINVAL;
        size_t n = strnlen(key, OBJSTORE_KEY_MAX + 1);
        if (n == 0 || n > OBJSTORE_KEY_MAX)
                return -EINVAL;
        size_t start = 0;
        for (size_t i = 0; i <= n; i++) {
                if (i < n && key[i] != '/') {
                        if (!char_is_safe(key[i]))
                                return -EINVAL;
                        continue;
                }
                size_t len = i - start;
                if (len == 0) /* leading, trailing or doubled '/' */
                        return -EINVAL;
                if (key[start] == '.' && (len == 1 || (len == 2 && key[start + 1] == '.')))
                        return -EINVAL;
                start = i + 1;
        }
        return 0;
}

/* A list prefix: "" or a key, optionally ending in '/'. */
static int prefix_check(const char *prefix) {
        if (!prefix)
                return -EINVAL;
        size_t n = strnlen(prefix, OBJSTORE_KEY_MAX + 1);
        if (n == 0)
                return 0;
        if (n > OBJSTORE_KEY_MAX)
                return -EINVAL;
        char buf[OBJSTORE_KEY_MAX + 1];
        memcpy(buf, prefix, n + 1);
        if (buf[n - 1] == '/')
                buf[n - 1] = 0;
        return objstore_key_check(buf);
}

int objstore_put(struct objstore *o, const char *key, int fd) {
        if (!o || fd < 0)
                return -EINVAL;
        int r = objstore_key_check(key);
        if (r < 0)
                return r;
        pthread_rwlock_rdlock(&o->lock);
        r = o->ops->put(o, key, fd);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

int objstore_get(struct objstore *o, const char *key, const char *dst_path) {
        if (!o || !dst_path || !*dst_path)
                return -EINVAL;
        int r = objstore_key_check(key);
        if (r < 0)
                return r;
        pthread_rwlock_rdlock(&o->lock);
        r = o->ops->get(o, key, dst_path);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

int objstore_exists(struct objstore *o, const char *key, uint64_t *ret_size) {
        if (!o)
                return -EINVAL;
        int r = objstore_key_check(key);
        if (r < 0)
                return r;
        uint64_t size = 0;
        pthread_rwlock_rdlock(&o->lock);
        r = o->ops->exists(o, key, &size);
        pthread_rwlock_unlock(&o->lock);
        if (r >= 0 && ret_size)
                *ret_size = size;
        return r;
}

int objstore_remove(struct objstore *o, const char *key) {
        if (!o)
                return -EINVAL;
        int r = objstore_key_check(key);
        if (r < 0)
                return r;
        pthread_rwlock_rdlock(&o->lock);
        r = o->ops->remove(o, key);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

int objstore_list(struct objstore *o, const char *prefix, char ***ret_keys) {
        if (!o || !ret_keys)
                return -EINVAL;
        int r = prefix_check(prefix);
        if (r < 0)
                return r;
        pthread_rwlock_rdlock(&o->lock);
        r = o->ops->list(o, prefix, ret_keys);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

static int cmp_strp(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

int objstore_keylist_add(struct objstore_keylist *kl, const char *key) {
        if (kl->n >= OBJSTORE_LIST_MAX)
                return -E2BIG;
        if (kl->n + 2 > kl->cap) {
                size_t cap = MAX(kl->cap * 2, (size_t) 16);
                char **v = realloc(kl->v, cap * sizeof *v);
                if (!v)
                        return -ENOMEM;
                kl->v = v;
                kl->cap = cap;
        }
        if (!(kl->v[kl->n] = strdup(key)))
                return -ENOMEM;
        kl->v[++kl->n] = NULL;
        return 0;
}

int objstore_keylist_finish(struct objstore_keylist *kl, char ***ret_keys) {
        if (!kl->v && !(kl->v = calloc(1, sizeof *kl->v))) /* no keys: just the NULL */
                return -ENOMEM;
        qsort(kl->v, kl->n, sizeof *kl->v, cmp_strp);
        *ret_keys = TAKE_PTR(kl->v);
        kl->n = kl->cap = 0;
        return 0;
}

void objstore_keylist_release(struct objstore_keylist *kl) {
        objstore_keys_free(TAKE_PTR(kl->v)); /* kept NULL-terminated by add */
}

void objstore_keys_free(char **keys) {
        if (!keys)
                return;
        for (char **k = keys; *k; k++)
                free(*k);
        free(keys);
}

static void md_ctx_freep(EVP_MD_CTX **c) {
        EVP_MD_CTX_free(*c);
}

/* How an artifact is named: by the SHA-256 of its bytes (manifest version
 * 1), or of its sparse form (version 2). */
enum digest_kind { DIGEST_PLAIN, DIGEST_SPARSE };

static int digest_hex(EVP_MD_CTX *h, char out[OBJSTORE_SHA256_HEX]) {
        uint8_t digest[32];
        unsigned digest_len = 0;
        if (EVP_DigestFinal_ex(h, digest, &digest_len) != 1 || digest_len != sizeof digest)
                return -EIO;
        sodium_bin2hex(out, OBJSTORE_SHA256_HEX, digest, sizeof digest);
        return 0;
}

static void digest_u64(EVP_MD_CTX *h, uint64_t x) {
        uint8_t le[8];
        for (size_t i = 0; i < sizeof le; i++)
                le[i] = (uint8_t) (x >> (8 * i));
        EVP_DigestUpdate(h, le, sizeof le);
}

static bool block_is_zero(const uint8_t *p, size_t n) {
        size_t i = 0;
        for (uint64_t w; i + sizeof w <= n; i += sizeof w) {
                memcpy(&w, p + i, sizeof w);
                if (w)
                        return false;
        }
        for (; i < n; i++)
                if (p[i])
                        return false;
        return true;
}

/* Reads exactly n bytes at off: -EIO when the file ended first (it shrank
 * under us). */
static int pread_full(int fd, uint8_t *buf, size_t n, off_t off) {
        for (size_t got = 0; got < n;) {
                ssize_t k = pread(fd, buf + got, n - got, off + (off_t) got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO;
                got += (size_t) k;
        }
        return 0;
}

/*
 * The sparse form of a file of size bytes: size as 8 bytes little-endian,
 * then, for each 4 KiB block (at offsets that are multiples of 4096; the
 * last one may be shorter) that is not all zeros, its offset as 8 bytes
 * little-endian and its bytes. It does not depend on which zeros are holes,
 * so a copy that keeps or makes holes names the same; holes are skipped
 * without reading them (SEEK_DATA/SEEK_HOLE), so a 1 GiB disk image with
 * 300 MB of data costs 300 MB of hashing, not 1 GiB.
 */
static int fd_sha256_sparse(int fd, off_t size, uint8_t *buf, EVP_MD_CTX *h, const atomic_bool *cancel) {
        digest_u64(h, (uint64_t) size);
        for (off_t next = 0; next < size;) {
                off_t data = lseek(fd, next, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : negative_errno(); /* only a hole is left */
                if (data >= size)
                        return 0;
                off_t hole = lseek(fd, data, SEEK_HOLE);
                if (hole < 0)
                        return negative_errno();
                /* whole blocks, each once */
                off_t from = MAX(data - data % SPARSE_BLOCK, next);
                off_t to = MIN(hole + (SPARSE_BLOCK - hole % SPARSE_BLOCK) % SPARSE_BLOCK, size);
                for (off_t off = from; off < to;) {
                        if (cancel && atomic_load(cancel))
                                return -ECANCELED;
                        size_t k = (size_t) MIN((off_t) HASH_BUF_SIZE, to - off);
                        int r = pread_full(fd, buf, k, off);
                        if (r < 0)
                                return r;
                        for (size_t b = 0; b < k; b += SPARSE_BLOCK) {
                                size_t len = MIN((size_t) SPARSE_BLOCK, k - b);
                                if (block_is_zero(buf + b, len))
                                        continue;
                                digest_u64(h, (uint64_t) off + b);
                                EVP_DigestUpdate(h, buf + b, len);
                        }
                        off += (off_t) k;
                }
                next = MAX(to, next + 1);
        }
        return 0;
}

/* The SHA-256 of the first size bytes of fd, holes as zeros without reading them. */
static int fd_sha256_plain(int fd, off_t size, uint8_t *buf, EVP_MD_CTX *h, const atomic_bool *cancel) {
        for (off_t off = 0; off < size;) {
                off_t data = lseek(fd, off, SEEK_DATA);
                if (data < 0) {
                        if (errno != ENXIO)
                                return negative_errno();
                        data = size; /* only a hole is left */
                }
                data = MIN(data, size);
                if (data > off)
                        memset(buf, 0, HASH_BUF_SIZE);
                while (off < data) {
                        size_t k = (size_t) MIN((off_t) HASH_BUF_SIZE, data - off);
                        EVP_DigestUpdate(h, buf, k);
                        off += (off_t) k;
                }
                if (off >= size)
                        break;
                off_t hole = lseek(fd, data, SEEK_HOLE);
                if (hole < 0)
                        return negative_errno();
                hole = MIN(hole, size);
                while (off < hole) {
                        if (cancel && atomic_load(cancel))
                                return -ECANCELED;
                        ssize_t k = pread(fd, buf, (size_t) MIN((off_t) HASH_BUF_SIZE, hole - off), off);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return k < 0 ? negative_errno() : -EIO; /* shrank under us */
                        EVP_DigestUpdate(h, buf, (size_t) k);
                        off += k;
                }
        }
        return 0;
}

/* Names fd's content by kind. OpenSSL's SHA-256, not libsodium's: it uses
 * the CPU's SHA extensions (1.8 GB/s here against libsodium's 0.43;
 * BLAKE2b would be 1.2). */
static int fd_digest(int fd, enum digest_kind kind, const atomic_bool *cancel, char out[OBJSTORE_SHA256_HEX],
                     uint64_t *ret_size) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        _cleanup_free_ uint8_t *buf = malloc(HASH_BUF_SIZE);
        _cleanup_(md_ctx_freep) EVP_MD_CTX *h = EVP_MD_CTX_new();
        if (!buf || !h || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1)
                return -ENOMEM;
        int r = kind == DIGEST_SPARSE ? fd_sha256_sparse(fd, st.st_size, buf, h, cancel)
                                      : fd_sha256_plain(fd, st.st_size, buf, h, cancel);
        if (r >= 0)
                r = digest_hex(h, out);
        if (r >= 0 && ret_size)
                *ret_size = (uint64_t) st.st_size;
        return r;
}

static int file_digest(const char *path, enum digest_kind kind, char out[OBJSTORE_SHA256_HEX]) {
        if (!path || !out)
                return -EINVAL;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        char hex[OBJSTORE_SHA256_HEX];
        int r = fd_digest(fd, kind, NULL, hex, NULL);
        if (r < 0)
                return r;
        memcpy(out, hex, sizeof hex);
        return 0;
}

int objstore_file_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]) {
        return file_digest(path, DIGEST_PLAIN, out);
}

int objstore_file_sparse_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]) {
        return file_digest(path, DIGEST_SPARSE, out);
}

/* Artifact names become file names in download's dst_dir: one safe
 * component, never "." or "..". */
static bool artifact_name_is_valid(const char *s) {
        size_t n = strnlen(s, 65);
        if (n == 0 || n > 64 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!char_is_safe(s[i]))
                        return false;
        return true;
}

static bool sha256_hex_is_valid(const char *s) {
        if (strlen(s) != OBJSTORE_SHA256_HEX - 1)
                return false;
        for (const char *p = s; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

static bool json_is_uint(const json_t *j) {
        return json_is_integer(j) && json_integer_value(j) >= 0;
}

/* One artifact entry of a manifest already checked by manifest_check(). */
static enum digest_kind manifest_digest_kind(json_t *m) {
        return json_integer_value(json_object_get(m, "version")) == 1 ? DIGEST_PLAIN : DIGEST_SPARSE;
}

static const char *digest_field(enum digest_kind kind) {
        return kind == DIGEST_PLAIN ? "sha256" : "sparse_sha256";
}

bool objstore_manifest_is_sealed(json_t *m) {
        return json_integer_value(json_object_get(m, "version")) == MANIFEST_VERSION_SEALED;
}

/* The field naming an artifact's blob. */
static const char *blob_field(json_t *m) {
        return objstore_manifest_is_sealed(m) ? "blob" : digest_field(manifest_digest_kind(m));
}

void objstore_manifest_artifact(json_t *m, size_t i, const char **name, const char **blob, uint64_t *size) {
        json_t *a = json_array_get(json_object_get(m, "artifacts"), i);
        *name = json_string_value(json_object_get(a, "name"));
        *blob = json_string_value(json_object_get(a, blob_field(m)));
        *size = (uint64_t) json_integer_value(json_object_get(a, "size"));
}

static size_t manifest_count(json_t *m) {
        return json_array_size(json_object_get(m, "artifacts"));
}

static int manifest_check(json_t *m) {
        json_t *v = json_object_get(m, "version");
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MANIFEST_VERSION_SEALED)
                return -EBADMSG;
        bool sealed = objstore_manifest_is_sealed(m);
        /* exactly the fields of its version: none missing, nothing unknown
         * (a sealed one has key and sealed where the others have meta) */
        if (!json_is_object(m) || json_object_size(m) != (sealed ? 6 : 5))
                return -EBADMSG;
        const char *field = blob_field(m);
        v = json_object_get(m, "snapshot");
        if (!json_is_string(v) || !name_is_valid(json_string_value(v)))
                return -EBADMSG;
        if (!json_is_uint(json_object_get(m, "created_at")))
                return -EBADMSG;
        if (!sealed && !json_is_object(json_object_get(m, "meta")))
                return -EBADMSG;
        if (sealed) {
                json_t *k = json_object_get(m, "key"), *box = json_object_get(m, "sealed");
                if (!json_is_string(k) || json_string_length(k) == 0 || json_string_length(k) > OBJSTORE_WRAPPED_KEY_MAX ||
                    !json_is_string(box) || json_string_length(box) == 0)
                        return -EBADMSG;
        }
        json_t *arts = json_object_get(m, "artifacts");
        size_t n = json_array_size(arts);
        if (!json_is_array(arts) || n == 0 || n > OBJSTORE_ARTIFACTS_MAX)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                json_t *a = json_array_get(arts, i);
                json_t *name = json_object_get(a, "name"), *sha = json_object_get(a, field);
                if (!json_is_object(a) || json_object_size(a) != 3 || !json_is_string(name) ||
                    !json_is_string(sha) || !json_is_uint(json_object_get(a, "size")))
                        return -EBADMSG;
                if (!artifact_name_is_valid(json_string_value(name)) || !sha256_hex_is_valid(json_string_value(sha)))
                        return -EBADMSG;
                for (size_t j = 0; j < i; j++)
                        if (json_equal(name, json_object_get(json_array_get(arts, j), "name")))
                                return -EBADMSG;
        }
        return 0;
}

int objstore_manifest_parse(const char *data, size_t len, json_t **ret) {
        if (!ret || (!data && len > 0))
                return -EINVAL;
        if (len == 0 || len > OBJSTORE_MANIFEST_MAX)
                return -EBADMSG;
        /* no NUL in strings (the default), duplicate keys are an error */
        _cleanup_(json_decrefp) json_t *m = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
        if (!m || manifest_check(m) < 0)
                return -EBADMSG;
        *ret = TAKE_PTR(m);
        return 0;
}

static char *manifest_key(const char *snapshot_id) {
        return strdup_printf(SNAPSHOT_PREFIX "%s/" MANIFEST_NAME, snapshot_id);
}

static char *blob_key(const char *sha) {
        return strdup_printf(BLOB_PREFIX "%s", sha);
}

/* A private directory for files fetched only to be read here (backends
 * only get() into files). */
static char *tmpdir_new(void) {
        const char *base = secure_getenv("TMPDIR");
        _cleanup_free_ char *t = strdup_printf("%s/objstore-XXXXXX", base && *base ? base : "/tmp");
        if (!t || !mkdtemp(t))
                return NULL;
        return TAKE_PTR(t);
}

/* Reads a small object (at most max bytes) into memory. -EFBIG when it is
 * larger, without fetching it. */
static int read_small(struct objstore *o, const char *key, size_t max, char **ret, size_t *ret_len) {
        uint64_t size = 0;
        int r = o->ops->exists(o, key, &size);
        if (r < 0)
                return r;
        if (size > max)
                return -EFBIG;
        _cleanup_free_ char *dir = tmpdir_new();
        if (!dir)
                return negative_errno();
        _cleanup_free_ char *path = strdup_printf("%s/object", dir);
        r = path ? o->ops->get(o, key, path) : -ENOMEM;
        if (r >= 0)
                r = file_read_all(path, max, ret, ret_len);
        (void) rm_rf(dir);
        return r;
}

/* Loads and checks snapshot_id's manifest; a manifest that names another
 * snapshot (copied or renamed by hand) is malformed too. */
static int manifest_load(struct objstore *o, const char *snapshot_id, json_t **ret) {
        _cleanup_free_ char *key = manifest_key(snapshot_id);
        if (!key)
                return -ENOMEM;
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = read_small(o, key, OBJSTORE_MANIFEST_MAX, &data, &len);
        if (r == -EFBIG)
                return -EBADMSG;
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *m = NULL;
        r = objstore_manifest_parse(data, len, &m);
        if (r < 0)
                return r;
        if (strcmp(json_string_value(json_object_get(m, "snapshot")), snapshot_id) != 0)
                return -EBADMSG;
        *ret = TAKE_PTR(m);
        return 0;
}

/* Checks a landed blob: its size and, where the backend is plain files, the
 * hash of what is actually stored. -EBADMSG when it does not match. */
static int blob_verify(struct objstore *o, const char *key, const char *sha, uint64_t size, const atomic_bool *cancel) {
        uint64_t got = 0;
        int r = o->ops->exists(o, key, &got);
        if (r == -ENOENT)
                return -EBADMSG;
        if (r < 0)
                return r;
        if (got != size)
                return -EBADMSG;
        if (!o->ops->local_path)
                return 0;
        _cleanup_free_ char *path = NULL;
        r = o->ops->local_path(o, key, &path);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -EBADMSG : negative_errno();
        char hex[OBJSTORE_SHA256_HEX];
        r = fd_digest(fd, DIGEST_SPARSE, cancel, hex, NULL); /* what uploads name blobs by */
        if (r < 0)
                return r;
        return strcmp(hex, sha) == 0 ? 0 : -EBADMSG;
}

/* Makes blobs/<sha> hold fd's content and verifies it. An existing blob of
 * the right size is kept (dedup) unless it fails verification, in which
 * case it is replaced once. A blob that still fails (the source changed
 * while it was uploaded) is removed: its name would lie about its content. */
static int blob_ensure(struct objstore *o, const char *ctx, const char *name, int fd, const char *sha,
                       uint64_t size, const atomic_bool *cancel) {
        _cleanup_free_ char *key = blob_key(sha);
        if (!key)
                return -ENOMEM;
        uint64_t got = 0;
        bool present = o->ops->exists(o, key, &got) >= 0 && got == size;
        int r = present ? 0 : o->ops->put(o, key, fd);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to upload artifact %s: %m", name);
        r = blob_verify(o, key, sha, size, cancel);
        if (r == -EBADMSG && present) {
                log_emit(LOG_LEVEL_WARN, ctx, "stored blob %s for artifact %s is corrupt, replacing it", sha, name);
                r = o->ops->put(o, key, fd);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to upload artifact %s: %m", name);
                r = blob_verify(o, key, sha, size, cancel);
        }
        if (r == -EBADMSG) {
                (void) o->ops->remove(o, key);
                return log_errno(LOG_LEVEL_ERROR, r, ctx,
                                 "artifact %s did not verify after upload (changed meanwhile?)", name);
        }
        if (r < 0 && r != -ECANCELED)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to verify artifact %s: %m", name);
        if (r < 0)
                return r;
        return 0;
}

struct upload {
        size_t n;
        int fd[OBJSTORE_ARTIFACTS_MAX];
        char sha[OBJSTORE_ARTIFACTS_MAX][OBJSTORE_SHA256_HEX];
        uint64_t size[OBJSTORE_ARTIFACTS_MAX];
        /* sealed (a data key given): each artifact's sealed form and blob */
        struct seal_writer *sealed[OBJSTORE_ARTIFACTS_MAX];
        char blob[OBJSTORE_ARTIFACTS_MAX][OBJSTORE_SHA256_HEX];
        /* a shared artifact whose sealed blob is there already: its size */
        bool present[OBJSTORE_ARTIFACTS_MAX];
        uint64_t present_size[OBJSTORE_ARTIFACTS_MAX];
};

static void upload_release(struct upload *u) {
        for (size_t i = 0; i < u->n; i++) {
                closep(&u->fd[i]);
                seal_writer_free(u->sealed[i]);
        }
}

/* ---- sealed artifacts (manifest version 3) ----
 *
 * The snapshot's data key (a random 32 bytes the caller got from its KMS,
 * which keeps only the wrapped form) never meets the data: artifact i is
 * sealed (lib/seal) with its own key, derived from the data key with
 * libsodium's KDF (subkey i + 1, context "alksnap1"), and the manifest's
 * secrets (the caller's meta, each artifact's digest and plain size) with
 * subkey 0. The nonce of an artifact is a keyed hash of its content, as in
 * SIV: sealing is deterministic (a retried upload sends the same bytes and
 * resumes), and the same key never seals two different contents under one
 * nonce. Its blob is named by another keyed hash: the store's operator
 * learns neither the content's hash nor which snapshots share content. */
#define SEAL_KDF_CONTEXT "alksnap1"

static void derive_key(const uint8_t data_key[OBJSTORE_DATA_KEY_SIZE], uint64_t id, uint8_t out[SEAL_KEY_SIZE]) {
        crypto_kdf_derive_from_key(out, SEAL_KEY_SIZE, id, SEAL_KDF_CONTEXT, data_key);
}

/* A shared artifact's key comes from its content instead (convergent
 * encryption): BLAKE2b of a tag, its digest and size. Whoever seals the same
 * content gets the same sealed blob, stored once; only who knows the
 * digest (a sealed manifest holds it) can open it. */
#define SHARED_KEY_TAG "airlock-shared-artifact-v1"
static void shared_key(const char *sha, uint64_t size, uint8_t out[SEAL_KEY_SIZE]) {
        uint8_t msg[sizeof SHARED_KEY_TAG + (OBJSTORE_SHA256_HEX - 1) + 8];
        memcpy(msg, SHARED_KEY_TAG, sizeof SHARED_KEY_TAG);
        memcpy(msg + sizeof SHARED_KEY_TAG, sha, OBJSTORE_SHA256_HEX - 1);
        for (size_t i = 0; i < 8; i++)
                msg[sizeof SHARED_KEY_TAG + OBJSTORE_SHA256_HEX - 1 + i] = (uint8_t) (size >> (8 * i));
        crypto_generichash(out, SEAL_KEY_SIZE, msg, sizeof msg, NULL, 0);
}

/* The nonce_base and the blob name of content (sha, size) under an
 * artifact key. */
static void sealed_names(const uint8_t key[SEAL_KEY_SIZE], const char *sha, uint64_t size,
                         uint8_t nonce[SEAL_NONCE_BASE_SIZE], char blob[OBJSTORE_SHA256_HEX]) {
        uint8_t msg[1 + (OBJSTORE_SHA256_HEX - 1) + 8], h[32]; /* tag, hex digest, size */
        memcpy(msg + 1, sha, OBJSTORE_SHA256_HEX - 1);
        for (size_t i = 0; i < 8; i++)
                msg[OBJSTORE_SHA256_HEX + i] = (uint8_t) (size >> (8 * i));
        msg[0] = 'n';
        crypto_generichash(nonce, SEAL_NONCE_BASE_SIZE, msg, sizeof msg, key, SEAL_KEY_SIZE);
        msg[0] = 'b';
        crypto_generichash(h, sizeof h, msg, sizeof msg, key, SEAL_KEY_SIZE);
        sodium_bin2hex(blob, OBJSTORE_SHA256_HEX, h, sizeof h);
}

#define SEALED_AD "airlock-manifest-v3"

/* The manifest's sealed part: base64 of nonce || XChaCha20-Poly1305 of
 * the JSON inner, bound to the snapshot id. */
static char *seal_inner(const uint8_t data_key[OBJSTORE_DATA_KEY_SIZE], const char *snapshot_id, const char *inner) {
        uint8_t k[SEAL_KEY_SIZE];
        derive_key(data_key, 0, k);
        size_t n = strlen(inner), len = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + n +
                                        crypto_aead_xchacha20poly1305_ietf_ABYTES;
        _cleanup_free_ uint8_t *box = malloc(len);
        _cleanup_free_ char *ad = strdup_printf(SEALED_AD "|%s", snapshot_id);
        char *out = box && ad ? malloc(sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL)) : NULL;
        if (out) {
                randombytes_buf(box, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
                crypto_aead_xchacha20poly1305_ietf_encrypt(box + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, NULL,
                                                           (const uint8_t *) inner, n, (const uint8_t *) ad,
                                                           strlen(ad), NULL, box, k);
                sodium_bin2base64(out, sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL), box, len,
                                  sodium_base64_VARIANT_ORIGINAL);
        }
        sodium_memzero(k, sizeof k);
        return out;
}

/* Opens a sealed manifest's inner part: {"meta":{},"artifacts":{NAME:
 * {"sparse_sha256":HEX,"size":N}}} with an entry for each artifact.
 * -EBADMSG when it does not open (another key) or is malformed. */
static int open_inner(json_t *m, const uint8_t data_key[OBJSTORE_DATA_KEY_SIZE], json_t **ret) {
        const char *b64 = json_string_value(json_object_get(m, "sealed"));
        const char *snapshot_id = json_string_value(json_object_get(m, "snapshot"));
        size_t b64len = strlen(b64), len = 0;
        _cleanup_free_ uint8_t *box = malloc(b64len);
        _cleanup_free_ char *ad = strdup_printf(SEALED_AD "|%s", snapshot_id);
        if (!box || !ad)
                return -ENOMEM;
        if (sodium_base642bin(box, b64len, b64, b64len, NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
            len < crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES)
                return -EBADMSG;
        size_t n = len - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES - crypto_aead_xchacha20poly1305_ietf_ABYTES;
        _cleanup_free_ char *inner = malloc(n + 1);
        uint8_t k[SEAL_KEY_SIZE];
        derive_key(data_key, 0, k);
        unsigned long long got = 0;
        int r = inner && crypto_aead_xchacha20poly1305_ietf_decrypt(
                                 (uint8_t *) inner, &got, NULL, box + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
                                 len - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, (const uint8_t *) ad,
                                 strlen(ad), box, k) == 0
                        ? 0
                        : -EBADMSG;
        sodium_memzero(k, sizeof k);
        if (r < 0)
                return inner ? r : -ENOMEM;
        _cleanup_(json_decrefp) json_t *o = json_loadb(inner, (size_t) got, JSON_REJECT_DUPLICATES, NULL);
        sodium_memzero(inner, n);
        json_t *arts = json_object_get(o, "artifacts");
        if (!json_is_object(json_object_get(o, "meta")) || !json_is_object(arts))
                return -EBADMSG;
        for (size_t i = 0; i < manifest_count(m); i++) {
                const char *name, *blob;
                uint64_t size;
                objstore_manifest_artifact(m, i, &name, &blob, &size);
                json_t *a = json_object_get(arts, name);
                const char *sha = json_string_value(json_object_get(a, "sparse_sha256"));
                if (!sha || !sha256_hex_is_valid(sha) || !json_is_uint(json_object_get(a, "size")))
                        return -EBADMSG;
        }
        *ret = TAKE_PTR(o);
        return 0;
}

int objstore_manifest_meta(json_t *m, const uint8_t *data_key, json_t **ret_meta) {
        if (!m || !ret_meta)
                return -EINVAL;
        if (!objstore_manifest_is_sealed(m)) {
                *ret_meta = json_incref(json_object_get(m, "meta"));
                return 0;
        }
        if (!data_key)
                return -ENOKEY;
        _cleanup_(json_decrefp) json_t *inner = NULL;
        int r = open_inner(m, data_key, &inner);
        if (r < 0)
                return r;
        *ret_meta = json_incref(json_object_get(inner, "meta"));
        return 0;
}

const char *objstore_manifest_wrapped_key(json_t *m) {
        return objstore_manifest_is_sealed(m) ? json_string_value(json_object_get(m, "key")) : NULL;
}

struct sealed_source {
        struct seal_writer *w;
        const atomic_bool *cancel;
};

static int sealed_read_at(void *userdata, uint64_t off, void *buf, size_t len) {
        struct sealed_source *src = userdata;
        if (src->cancel && atomic_load(src->cancel))
                return -ECANCELED;
        return seal_writer_read_at(src->w, off, buf, len);
}

/* Makes blob hold artifact i's sealed form: sealed as the backend reads
 * it where it can (put_source: S3's parts), else written to a temporary
 * file beside the artifact (on the local backend then a reflink) and put;
 * its size checked. A blob of the right size is there already when a
 * retried upload got this far: the same key and content seal to the same
 * bytes. */
static int sealed_blob_ensure(struct objstore *o, const char *ctx, const char *name, const char *path,
                              struct seal_writer *w, const char *blob, const atomic_bool *cancel) {
        _cleanup_free_ char *key = blob_key(blob);
        if (!key)
                return -ENOMEM;
        uint64_t want = seal_writer_size(w), got = 0;
        if (o->ops->exists(o, key, &got) >= 0 && got == want)
                return 0;
        if (o->ops->put_source) {
                struct sealed_source src = { .w = w, .cancel = cancel };
                int r = o->ops->put_source(o, key, want, sealed_read_at, &src);
                if (r < 0)
                        return r == -ECANCELED ? r
                                               : log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to upload artifact %s: %m",
                                                           name);
                if (o->ops->exists(o, key, &got) < 0 || got != want)
                        return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "artifact %s did not land whole", name);
                return 0;
        }
        _cleanup_free_ char *dir = strdup(path);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (!slash)
                return -ENOMEM;
        *slash = 0;
        _cleanup_free_ char *tmp = strdup_printf("%s/.%s-sealed-XXXXXX", dir, name);
        _cleanup_free_ uint8_t *buf = malloc(HASH_BUF_SIZE);
        _cleanup_close_ int fd = tmp && buf ? mkostemp(tmp, O_CLOEXEC) : -1;
        if (fd < 0)
                return tmp && buf ? negative_errno() : -ENOMEM;
        int r = 0;
        for (uint64_t off = 0; off < want && r >= 0;) {
                if (cancel && atomic_load(cancel)) {
                        r = -ECANCELED;
                        break;
                }
                size_t k = (size_t) MIN((uint64_t) HASH_BUF_SIZE, want - off);
                r = seal_writer_read_at(w, off, buf, k);
                if (r >= 0)
                        r = fd_write_all(fd, buf, k);
                off += k;
        }
        if (r >= 0)
                r = o->ops->put(o, key, fd);
        (void) unlink(tmp);
        if (r < 0)
                return r == -ECANCELED ? r : log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to upload artifact %s: %m", name);
        if (o->ops->exists(o, key, &got) < 0 || got != want)
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "artifact %s did not land whole", name);
        return 0;
}

struct sealed_sink {
        struct seal_reader *rd;
        uint64_t fed, stored;
};

static int sealed_feed(void *userdata, const void *buf, size_t len) {
        struct sealed_sink *k = userdata;
        if (len > k->stored - k->fed)
                return -EBADMSG; /* longer than its manifest says */
        k->fed += len;
        return seal_reader_feed(k->rd, buf, len);
}

/* Feeds blob key's bytes to the sink: streamed where the backend can
 * (get_stream), else through a temporary file beside part. */
static int blob_feed(struct objstore *o, const char *key, const char *part, struct sealed_sink *sink) {
        if (o->ops->get_stream)
                return o->ops->get_stream(o, key, sealed_feed, sink);
        _cleanup_free_ char *sealed = strdup_printf("%s~sealed", part);
        _cleanup_free_ uint8_t *buf = malloc(HASH_BUF_SIZE);
        if (!sealed || !buf)
                return -ENOMEM;
        int r = o->ops->get(o, key, sealed);
        if (r < 0)
                return r;
        _cleanup_close_ int in = open(sealed, O_RDONLY | O_CLOEXEC);
        (void) unlink(sealed);
        if (in < 0)
                return negative_errno();
        for (;;) {
                ssize_t n = read(in, buf, HASH_BUF_SIZE);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? negative_errno() : 0;
                if ((r = sealed_feed(sink, buf, (size_t) n)) < 0)
                        return r;
        }
}

/* Downloads artifact i of a sealed manifest into part, opened chunk by
 * chunk as it arrives (each authenticated before a byte of it is
 * written). The artifact is the one the manifest names without hashing
 * it again: its nonce_base must be the one the sealer derived from the
 * plaintext's digest and size in the sealed inner part (sealed_names()),
 * and the header that binds every chunk binds that nonce. */
static int fetch_sealed(struct objstore *o, const char *ctx, const char *name, const char *blob, uint64_t stored,
                        const uint8_t key[SEAL_KEY_SIZE], const char *sha, uint64_t size, const char *part) {
        uint8_t nonce[SEAL_NONCE_BASE_SIZE];
        char want_blob[OBJSTORE_SHA256_HEX];
        sealed_names(key, sha, size, nonce, want_blob);
        if (strcmp(want_blob, blob) != 0)
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "artifact %s does not match its manifest", name);
        _cleanup_free_ char *k = blob_key(blob);
        _cleanup_close_ int out = open(part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (!k)
                return -ENOMEM;
        if (out < 0)
                return negative_errno();
        struct sealed_sink sink = { .stored = stored };
        int r = seal_reader_new(key, out, &sink.rd);
        if (r >= 0) {
                seal_reader_expect_nonce(sink.rd, nonce);
                r = blob_feed(o, k, part, &sink);
                if (r >= 0)
                        r = sink.fed == stored ? seal_reader_finish(sink.rd) : -EBADMSG;
        }
        seal_reader_free(sink.rd);
        uint64_t got = 0;
        if (r == -ENOENT && o->ops->exists(o, k, &got) == -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "blob %s of artifact %s is missing", blob, name);
        if (r == -EBADMSG)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "artifact %s does not match its manifest (tampered, "
                                 "corrupt or another key's)", name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to download artifact %s: %m", name);
        struct stat st;
        if (fstat(out, &st) < 0)
                return negative_errno();
        if ((uint64_t) st.st_size != size) /* the nonce says so already: a second look costs nothing */
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "artifact %s does not match its manifest", name);
        return 0;
}

/* The manifest as compact JSON, refused (before any blob is uploaded) when
 * objstore_manifest_parse() could not read it back: too large, or a meta
 * the strict parser refuses (a string with a NUL). */
static int manifest_build(const char *snapshot_id, const struct objstore_artifact *a, const struct upload *u,
                          json_t *meta, const struct objstore_data_key *key, char **ret, size_t *ret_len) {
        _cleanup_(json_decrefp) json_t *arts = json_array(), *inner = json_object();
        if (!arts || !inner)
                return -ENOMEM;
        for (size_t i = 0; i < u->n; i++) {
                uint64_t stored = !key            ? u->size[i]
                                  : u->present[i] ? u->present_size[i]
                                                  : seal_writer_size(u->sealed[i]);
                json_t *entry =
                        key ? json_pack("{s:s,s:s,s:I}", "name", a[i].name, "blob", u->blob[i], "size",
                                        (json_int_t) stored)
                            : json_pack("{s:s,s:s,s:I}", "name", a[i].name, digest_field(DIGEST_SPARSE),
                                        u->sha[i], "size", (json_int_t) stored);
                json_t *secret = key ? json_pack("{s:s,s:I}", "sparse_sha256", u->sha[i], "size",
                                                 (json_int_t) u->size[i])
                                     : NULL;
                if (secret && a[i].shared && json_object_set_new(secret, "shared", json_true()) < 0)
                        secret = (json_decref(secret), NULL);
                if (json_array_append_new(arts, entry) < 0 ||
                    (key && json_object_set_new(inner, a[i].name, secret) < 0))
                        return -ENOMEM;
        }
        _cleanup_(json_decrefp) json_t *m = NULL;
        if (key) {
                _cleanup_(json_decrefp) json_t *secret = json_pack("{s:o,s:O}", "meta",
                                                                   meta ? json_incref(meta) : json_object(),
                                                                   "artifacts", inner);
                _cleanup_free_ char *text = secret ? json_dumps(secret, JSON_COMPACT) : NULL;
                _cleanup_free_ char *box = text ? seal_inner(key->key, snapshot_id, text) : NULL;
                if (text)
                        sodium_memzero(text, strlen(text));
                if (!box)
                        return -ENOMEM;
                m = json_pack("{s:i,s:s,s:I,s:s,s:s,s:O}", "version", MANIFEST_VERSION_SEALED, "snapshot", snapshot_id,
                              "created_at", (json_int_t) (now_realtime_ns() / 1000000), "key", key->wrapped, "sealed",
                              box, "artifacts", arts);
        } else
                m = json_pack("{s:i,s:s,s:I,s:o,s:O}", "version", MANIFEST_VERSION, "snapshot", snapshot_id,
                              "created_at", (json_int_t) (now_realtime_ns() / 1000000), "meta",
                              meta ? json_incref(meta) : json_object(), "artifacts", arts);
        if (!m)
                return -ENOMEM;
        _cleanup_free_ char *s = json_dumps(m, JSON_COMPACT);
        if (!s)
                return -ENOMEM;
        size_t len = strlen(s);
        if (len > OBJSTORE_MANIFEST_MAX)
                return -E2BIG;
        _cleanup_(json_decrefp) json_t *check = NULL;
        if (objstore_manifest_parse(s, len, &check) < 0)
                return -EINVAL;
        *ret = TAKE_PTR(s);
        *ret_len = len;
        return 0;
}

/* Puts bytes from memory: the backends take fds, so through a memfd. */
static int put_bytes(struct objstore *o, const char *key, const char *data, size_t len) {
        _cleanup_close_ int fd = memfd_create("objstore-put", MFD_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        int r = fd_write_all(fd, data, len);
        if (r < 0)
                return r;
        return o->ops->put(o, key, fd);
}

/* Artifact i of an upload: its digest (which names it), and with a key
 * its sealed form. */
struct prepare {
        struct objstore *o;
        struct upload *u;
        size_t i;
        bool shared;
        const char *known; /* the artifact's digest as the caller knows it, or NULL */
        const struct objstore_data_key *key;
        const atomic_bool *cancel;
        int r;
        bool sealing; /* failed sealing, not hashing */
};

static void *prepare_main(void *arg) {
        struct prepare *p = arg;
        struct upload *u = p->u;
        size_t i = p->i;
        struct stat st;
        if (p->known && fstat(u->fd[i], &st) >= 0 && S_ISREG(st.st_mode)) {
                memcpy(u->sha[i], p->known, OBJSTORE_SHA256_HEX);
                u->size[i] = (uint64_t) st.st_size;
        } else
                p->r = fd_digest(u->fd[i], DIGEST_SPARSE, p->cancel, u->sha[i], &u->size[i]);
        if (p->r < 0 || !p->key)
                return NULL;
        uint8_t k[SEAL_KEY_SIZE], nonce[SEAL_NONCE_BASE_SIZE];
        if (p->shared)
                shared_key(u->sha[i], u->size[i], k);
        else
                derive_key(p->key->key, i + 1, k);
        sealed_names(k, u->sha[i], u->size[i], nonce, u->blob[i]);
        /* a shared blob another snapshot stored already is not sealed
         * again (puts land whole: its size is the sealed one) */
        _cleanup_free_ char *bkey = p->shared ? blob_key(u->blob[i]) : NULL;
        if (bkey && p->o->ops->exists(p->o, bkey, &u->present_size[i]) >= 0) {
                u->present[i] = true;
                sodium_memzero(k, sizeof k);
                return NULL;
        }
        p->sealing = true;
        p->r = seal_writer_new_nonce(u->fd[i], k, 0, nonce, &u->sealed[i]);
        sodium_memzero(k, sizeof k);
        return NULL;
}

static int snapshot_upload_locked(struct objstore *o, const char *snapshot_id, const struct objstore_artifact *a,
                                  size_t n, json_t *meta, const struct objstore_data_key *key,
                                  const atomic_bool *cancel, const char *ctx) {
        _cleanup_free_ char *mkey = manifest_key(snapshot_id);
        if (!mkey)
                return -ENOMEM;
        uint64_t size = 0;
        int r = o->ops->exists(o, mkey, &size);
        if (r >= 0)
                return -EEXIST;
        if (r != -ENOENT)
                return r;

        /* Each artifact is opened once, so what is hashed and what is put is
         * the same file even if its path is replaced meanwhile. */
        uint64_t t0 = now_monotonic_ns();
        _cleanup_(upload_release) struct upload u = { 0 };
        for (size_t i = 0; i < n; i++) {
                u.fd[u.n++] = open(a[i].path, O_RDONLY | O_CLOEXEC);
                if (u.fd[i] < 0)
                        return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "failed to open artifact %s: %m",
                                         a[i].name);
        }
        /* hashed (and scanned for sealing) side by side: the artifacts'
         * reads and hashes are CPU-bound, and nothing else runs yet */
        struct prepare jobs[OBJSTORE_ARTIFACTS_MAX];
        pthread_t threads[OBJSTORE_ARTIFACTS_MAX];
        bool started[OBJSTORE_ARTIFACTS_MAX] = { false };
        for (size_t i = 0; i < n; i++) {
                jobs[i] = (struct prepare){ .o = o, .u = &u, .i = i, .shared = a[i].shared,
                                            .known = a[i].sparse_sha256, .key = key, .cancel = cancel };
                if (i + 1 < n)
                        started[i] = pthread_create(&threads[i], NULL, prepare_main, &jobs[i]) == 0;
                if (!started[i])
                        prepare_main(&jobs[i]);
        }
        r = 0;
        for (size_t i = 0; i < n; i++) {
                if (started[i])
                        pthread_join(threads[i], NULL);
                if (jobs[i].r < 0 && r >= 0) {
                        r = jobs[i].r;
                        log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to %s artifact %s: %m",
                                  jobs[i].sealing ? "seal" : "hash", a[i].name);
                }
        }
        if (r < 0)
                return r;
        _cleanup_free_ char *manifest = NULL;
        size_t len = 0;
        r = manifest_build(snapshot_id, a, &u, meta, key, &manifest, &len);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_DEBUG, ctx, "artifacts hashed%s in %llu ms", key ? " and scanned for sealing" : "",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));

        for (size_t i = 0; i < n; i++) {
                if (cancel && atomic_load(cancel))
                        return -ECANCELED;
                r = key && u.present[i] ? 0
                    : key ? sealed_blob_ensure(o, ctx, a[i].name, a[i].path, u.sealed[i], u.blob[i], cancel)
                          : blob_ensure(o, ctx, a[i].name, u.fd[i], u.sha[i], u.size[i], cancel);
                if (r < 0)
                        return r;
                if (o->blob_landed)
                        o->blob_landed(snapshot_id, a[i].name, i, n, o->blob_landed_userdata);
        }
        if (cancel && atomic_load(cancel))
                return -ECANCELED; /* no manifest: what landed is garbage gc removes */
        r = put_bytes(o, mkey, manifest, len);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to write the manifest: %m");
        return 0;
}

int objstore_snapshot_upload(struct objstore *o, const char *snapshot_id, const struct objstore_artifact *a,
                             size_t n, const struct objstore_upload_opts *opts) {
        static const struct objstore_upload_opts none = {0};
        if (!opts)
                opts = &none;
        json_t *meta = opts->meta;
        const struct objstore_data_key *key = opts->key;
        if (!o || !name_is_valid(snapshot_id) || !a || n == 0 || n > OBJSTORE_ARTIFACTS_MAX ||
            (meta && !json_is_object(meta)))
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (!a[i].name || !a[i].path || !artifact_name_is_valid(a[i].name) ||
                    (a[i].sparse_sha256 && !sha256_hex_is_valid(a[i].sparse_sha256)))
                        return -EINVAL;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(a[i].name, a[j].name) == 0)
                                return -EINVAL;
        }
        char ctx[96];
        snprintf(ctx, sizeof ctx, "snapshot=%s", snapshot_id);
        uint64_t t0 = now_monotonic_ns();
        pthread_rwlock_rdlock(&o->lock);
        int r = snapshot_upload_locked(o, snapshot_id, a, n, meta, key, opts->cancel, ctx);
        pthread_rwlock_unlock(&o->lock);
        if (r >= 0)
                log_emit(LOG_LEVEL_INFO, ctx, "snapshot uploaded%s: %zu artifacts, %llu ms", key ? " (sealed)" : "", n,
                         (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
        return r;
}

int objstore_snapshot_manifest(struct objstore *o, const char *snapshot_id, json_t **ret_manifest) {
        if (!o || !name_is_valid(snapshot_id) || !ret_manifest)
                return -EINVAL;
        pthread_rwlock_rdlock(&o->lock);
        int r = manifest_load(o, snapshot_id, ret_manifest);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

/* Makes the renames into dir durable. */
static int fsync_dir(const char *dir) {
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return negative_errno();
        return 0;
}

/* Temporary names in dst_dir: '~' is not allowed in artifact names, so they
 * never collide with an artifact. */
static char *part_path(const char *dst_dir, const char *name) {
        return strdup_printf("%s/.%s~part", dst_dir, name);
}

static int fetch_verified(struct objstore *o, const char *ctx, const char *name, enum digest_kind kind,
                          const char *sha, uint64_t size, const char *part) {
        _cleanup_free_ char *key = blob_key(sha);
        if (!key)
                return -ENOMEM;
        int r = o->ops->get(o, key, part);
        uint64_t got = 0;
        if (r == -ENOENT && o->ops->exists(o, key, &got) == -ENOENT) /* not dst_dir vanishing */
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "blob %s of artifact %s is missing", sha, name);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to download artifact %s: %m", name);
        _cleanup_close_ int fd = open(part, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        char hex[OBJSTORE_SHA256_HEX];
        r = fd_digest(fd, kind, NULL, hex, &got);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to hash artifact %s: %m", name);
        if (got != size || strcmp(hex, sha) != 0)
                return log_errno(LOG_LEVEL_ERROR, -EBADMSG, ctx, "artifact %s does not match its manifest", name);
        return 0;
}

static int snapshot_download_locked(struct objstore *o, const char *snapshot_id, const char *dst_dir,
                                    const uint8_t *data_key, const char *const *only, const char *ctx) {
        _cleanup_(json_decrefp) json_t *m = NULL, *inner = NULL;
        int r = manifest_load(o, snapshot_id, &m);
        if (r < 0)
                return r;
        bool sealed = objstore_manifest_is_sealed(m);
        if (sealed && !data_key)
                return log_errno(LOG_LEVEL_ERROR, -ENOKEY, ctx, "the snapshot is sealed and no data key was given");
        if (sealed && (r = open_inner(m, data_key, &inner)) < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "the snapshot's manifest does not open with this data key");
        r = mkdir_p(dst_dir, 0700);
        if (r < 0)
                return r;

        /* Everything is fetched and verified under temporary names first, so
         * no unverified file ever appears under an artifact's name. */
        size_t n = manifest_count(m), landed = 0;
        char *part[OBJSTORE_ARTIFACTS_MAX] = { 0 }, *final[OBJSTORE_ARTIFACTS_MAX] = { 0 };
        for (size_t i = 0; i < n && r >= 0; i++) {
                const char *name, *sha;
                uint64_t size;
                objstore_manifest_artifact(m, i, &name, &sha, &size);
                if (only && !strv_contains(only, name))
                        continue;
                part[i] = part_path(dst_dir, name);
                final[i] = strdup_printf("%s/%s", dst_dir, name);
                if (!part[i] || !final[i])
                        r = -ENOMEM;
                else if (sealed) {
                        json_t *a = json_object_get(json_object_get(inner, "artifacts"), name);
                        const char *plain_sha = json_string_value(json_object_get(a, "sparse_sha256"));
                        uint64_t plain_size = (uint64_t) json_integer_value(json_object_get(a, "size"));
                        uint8_t k[SEAL_KEY_SIZE];
                        if (json_is_true(json_object_get(a, "shared")))
                                shared_key(plain_sha, plain_size, k);
                        else
                                derive_key(data_key, i + 1, k);
                        r = fetch_sealed(o, ctx, name, sha, size, k, plain_sha, plain_size, part[i]);
                        sodium_memzero(k, sizeof k);
                } else
                        r = fetch_verified(o, ctx, name, manifest_digest_kind(m), sha, size, part[i]);
        }
        while (r >= 0 && landed < n) {
                if (part[landed] && rename(part[landed], final[landed]) < 0)
                        r = negative_errno();
                else
                        landed++;
        }
        if (r >= 0)
                r = fsync_dir(dst_dir);
        for (size_t i = 0; i < n; i++) {
                if (r < 0 && part[i])
                        (void) unlink(part[i]);
                if (r < 0 && i < landed && final[i])
                        (void) unlink(final[i]);
                free(part[i]);
                free(final[i]);
        }
        return r;
}

int objstore_snapshot_download(struct objstore *o, const char *snapshot_id, const char *dst_dir,
                               const struct objstore_download_opts *opts) {
        static const struct objstore_download_opts none = {0};
        if (!opts)
                opts = &none;
        if (!o || !name_is_valid(snapshot_id) || !dst_dir || !*dst_dir)
                return -EINVAL;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "snapshot=%s", snapshot_id);
        pthread_rwlock_rdlock(&o->lock);
        int r = snapshot_download_locked(o, snapshot_id, dst_dir, opts->data_key, opts->only, ctx);
        pthread_rwlock_unlock(&o->lock);
        return r;
}

/* The sha256 of every blob some manifest references, sorted. -EBADMSG when
 * a manifest cannot be read: then nobody knows what it still needs. */
static int collect_refs(struct objstore *o, char ***ret, size_t *ret_n) {
        _cleanup_(objstore_keys_freep) char **keys = NULL;
        int r = o->ops->list(o, SNAPSHOT_PREFIX, &keys);
        if (r < 0)
                return r;
        _cleanup_(objstore_keys_freep) char **refs = calloc(1, sizeof *refs);
        size_t n = 0;
        if (!refs)
                return -ENOMEM;
        for (char **k = keys; *k; k++) {
                /* snapshots/<id>/manifest.json; anything else is not ours */
                const char *id = *k + strlen(SNAPSHOT_PREFIX), *slash = strchr(id, '/');
                if (!slash || strcmp(slash + 1, MANIFEST_NAME) != 0)
                        continue;
                _cleanup_free_ char *sid = strndup(id, (size_t) (slash - id));
                if (!sid)
                        return -ENOMEM;
                _cleanup_(json_decrefp) json_t *m = NULL;
                r = name_is_valid(sid) ? manifest_load(o, sid, &m) : -EBADMSG;
                if (r == -ENOENT)
                        continue; /* deleted meanwhile (another process) */
                if (r < 0) {
                        log_errno(LOG_LEVEL_WARN, r, NULL, "unreadable manifest %s: %m", *k);
                        return r;
                }
                size_t c = manifest_count(m);
                char **nr = realloc(refs, (n + c + 1) * sizeof *refs);
                if (!nr)
                        return -ENOMEM;
                refs = nr;
                for (size_t i = 0; i < c; i++) {
                        const char *name, *sha;
                        uint64_t size;
                        objstore_manifest_artifact(m, i, &name, &sha, &size);
                        refs[n] = strdup(sha);
                        refs[n + 1] = NULL;
                        if (!refs[n])
                                return -ENOMEM;
                        n++;
                }
        }
        qsort(refs, n, sizeof *refs, cmp_strp);
        *ret = TAKE_PTR(refs);
        *ret_n = n;
        return 0;
}

static bool refs_contain(char **refs, size_t n, const char *sha) {
        return bsearch(&sha, refs, n, sizeof *refs, cmp_strp) != NULL;
}

/* Removes snapshot_id's manifest: from then on it is not restorable.
 * *ret_manifest: what it said (NULL when it did not parse: its blobs are
 * left to gc). */
static int snapshot_withdraw_locked(struct objstore *o, const char *snapshot_id, const char *mkey,
                                    const char *ctx, json_t **ret_manifest) {
        _cleanup_(json_decrefp) json_t *m = NULL;
        int r = manifest_load(o, snapshot_id, &m);
        if (r < 0 && r != -EBADMSG)
                return r;
        bool readable = r >= 0;
        r = o->ops->remove(o, mkey);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "failed to remove the manifest: %m");
        if (!readable)
                log_emit(LOG_LEVEL_WARN, ctx, "deleted a malformed manifest; its blobs are left to gc");
        *ret_manifest = TAKE_PTR(m);
        return 0;
}

/* Removes the blobs of manifest m that no manifest references any more.
 * It only frees space: what it misses objstore_gc() removes later. */
static void blobs_release_locked(struct objstore *o, json_t *m, const char *ctx) {
        _cleanup_(objstore_keys_freep) char **refs = NULL;
        size_t nrefs = 0;
        int r = collect_refs(o, &refs, &nrefs);
        if (r < 0) {
                log_errno(LOG_LEVEL_WARN, r, ctx, "keeping the snapshot's blobs for gc: %m");
                return;
        }
        for (size_t i = 0; i < manifest_count(m); i++) {
                const char *name, *sha;
                uint64_t size;
                objstore_manifest_artifact(m, i, &name, &sha, &size);
                if (refs_contain(refs, nrefs, sha))
                        continue;
                _cleanup_free_ char *key = blob_key(sha);
                r = key ? o->ops->remove(o, key) : -ENOMEM;
                if (r < 0 && r != -ENOENT) /* ENOENT: a duplicate artifact, removed already */
                        log_errno(LOG_LEVEL_WARN, r, ctx, "failed to remove blob %s: %m", sha);
        }
        log_emit(LOG_LEVEL_INFO, ctx, "snapshot deleted");
}

static int snapshot_delete_common(struct objstore *o, const char *snapshot_id, json_t **ret_manifest) {
        if (!o || !name_is_valid(snapshot_id))
                return -EINVAL;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "snapshot=%s", snapshot_id);
        _cleanup_free_ char *mkey = manifest_key(snapshot_id);
        if (!mkey)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *m = NULL;
        pthread_rwlock_wrlock(&o->lock);
        int r = snapshot_withdraw_locked(o, snapshot_id, mkey, ctx, &m);
        if (r >= 0 && m && !ret_manifest)
                blobs_release_locked(o, m, ctx);
        pthread_rwlock_unlock(&o->lock);
        if (r >= 0 && ret_manifest)
                *ret_manifest = TAKE_PTR(m);
        return r;
}

int objstore_snapshot_delete(struct objstore *o, const char *snapshot_id) {
        return snapshot_delete_common(o, snapshot_id, NULL);
}

int objstore_snapshot_withdraw(struct objstore *o, const char *snapshot_id, json_t **ret_manifest) {
        if (!ret_manifest)
                return -EINVAL;
        *ret_manifest = NULL;
        return snapshot_delete_common(o, snapshot_id, ret_manifest);
}

void objstore_snapshot_release(struct objstore *o, json_t *manifest) {
        if (!o || !manifest)
                return;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "snapshot=%s", json_string_value(json_object_get(manifest, "snapshot")) ?: "?");
        pthread_rwlock_wrlock(&o->lock);
        blobs_release_locked(o, manifest, ctx);
        pthread_rwlock_unlock(&o->lock);
}

/* Whether an unreferenced blob is old enough to be garbage: without a way
 * to tell its age, only when min_age_s is 0. */
static bool blob_is_old(struct objstore *o, const char *key, unsigned min_age_s, uint64_t now_s) {
        if (min_age_s == 0)
                return true;
        uint64_t t = 0;
        if (!o->ops->mtime || o->ops->mtime(o, key, &t) < 0)
                return false;
        return t + min_age_s <= now_s;
}

static int gc_locked(struct objstore *o, unsigned min_age_s) {
        int n = 0, r;
        if (o->ops->gc_tmp) {
                r = o->ops->gc_tmp(o, min_age_s);
                if (r < 0)
                        log_warn_errno(r, "objstore gc: failed to remove leftovers of puts: %m");
                else
                        n += r;
        }
        _cleanup_(objstore_keys_freep) char **refs = NULL;
        size_t nrefs = 0;
        r = collect_refs(o, &refs, &nrefs);
        if (r < 0) {
                log_warn_errno(r, "objstore gc: removing no blob while a manifest is unreadable: %m");
                return n;
        }
        _cleanup_(objstore_keys_freep) char **blobs = NULL;
        r = o->ops->list(o, BLOB_PREFIX, &blobs);
        if (r < 0)
                return r;
        uint64_t now_s = now_realtime_ns() / 1000000000ULL;
        for (char **k = blobs; *k; k++) {
                if (refs_contain(refs, nrefs, *k + strlen(BLOB_PREFIX)) || !blob_is_old(o, *k, min_age_s, now_s))
                        continue;
                r = o->ops->remove(o, *k);
                if (r >= 0)
                        n++;
                else if (r != -ENOENT)
                        log_warn_errno(r, "objstore gc: failed to remove %s: %m", *k);
        }
        return n;
}

int objstore_gc(struct objstore *o, unsigned min_age_s) {
        if (!o)
                return -EINVAL;
        pthread_rwlock_wrlock(&o->lock);
        int r = gc_locked(o, min_age_s);
        pthread_rwlock_unlock(&o->lock);
        if (r > 0)
                log_info("objstore gc: removed %d objects", r);
        return r;
}
