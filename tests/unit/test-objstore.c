/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sodium.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "objstore.h"
#include "unit-skip.h"
#include "util.h"

#define SPARSE_SIZE (64u << 20)
#define SHA_OK "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" /* of "" */

/* One fresh store per test: ROOT for the store, SRC for input files, DST
 * for downloads, all under a mkdtemp directory. */
struct fixture {
        char dir[512]; /* under AIRLOCK_TEST_REFLINK_DIR too */
        char *root, *src, *dst;
        struct objstore *o;
};

static int setup_in(void **state, const char *base) {
        struct fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        if ((size_t) snprintf(f->dir, sizeof f->dir, "%s/test-objstore-XXXXXX", base) >= sizeof f->dir) {
                free(f);
                errno = ENAMETOOLONG;
                return -1;
        }
        if (!mkdtemp(f->dir))
                return -1;
        f->root = strdup_printf("%s/store", f->dir);
        f->src = strdup_printf("%s/src", f->dir);
        f->dst = strdup_printf("%s/dst", f->dir);
        if (mkdir(f->src, 0700) < 0)
                return -1;
        int r = objstore_open_local(f->root, &f->o);
        if (r < 0) {
                errno = -r;
                return -1;
        }
        *state = f;
        return 0;
}

static int setup(void **state) {
        return setup_in(state, "/tmp");
}

static int teardown(void **state) {
        struct fixture *f = *state;
        if (!f) /* setup_reflink() without a directory */
                return 0;
        objstore_free(f->o);
        rm_rf(f->dir);
        free(f->root);
        free(f->src);
        free(f->dst);
        free(f);
        return 0;
}

static char *write_file(struct fixture *f, const char *name, const char *data) {
        char *p = strdup_printf("%s/%s", f->src, name);
        assert_non_null(p);
        assert_int_equal(file_write_atomic(p, data, strlen(data), 0644), 0);
        return p;
}

/* 64 MiB with two data regions (1 MiB at 0, 64 KiB at 40 MiB), the rest
 * holes. */
static char *write_sparse(struct fixture *f, const char *name, uint8_t seed) {
        char *p = strdup_printf("%s/%s", f->src, name);
        assert_non_null(p);
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        _cleanup_free_ uint8_t *buf = malloc(1 << 20);
        assert_non_null(buf);
        for (size_t i = 0; i < (1 << 20); i++)
                buf[i] = (uint8_t) (i * 31 + seed);
        assert_int_equal(pwrite(fd, buf, 1 << 20, 0), 1 << 20);
        assert_int_equal(pwrite(fd, buf, 64 << 10, 40 << 20), 64 << 10);
        assert_int_equal(ftruncate(fd, SPARSE_SIZE), 0);
        return p;
}

/* The sparse form (objstore.h) computed the plain way: every byte read,
 * each 4 KiB block tested for zeros; libsodium's SHA-256, not OpenSSL's. */
static void reference_sparse_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        crypto_hash_sha256_state h;
        crypto_hash_sha256_init(&h);
        uint8_t le[8], block[4096], zero[4096] = { 0 };
        for (int i = 0; i < 8; i++)
                le[i] = (uint8_t) ((uint64_t) st.st_size >> (8 * i));
        crypto_hash_sha256_update(&h, le, 8);
        for (uint64_t off = 0;; off += sizeof block) {
                ssize_t k = pread(fd, block, sizeof block, (off_t) off);
                assert_true(k >= 0);
                if (k == 0)
                        break;
                if (memcmp(block, zero, (size_t) k) == 0)
                        continue;
                for (int i = 0; i < 8; i++)
                        le[i] = (uint8_t) (off >> (8 * i));
                crypto_hash_sha256_update(&h, le, 8);
                crypto_hash_sha256_update(&h, block, (unsigned long long) k);
        }
        uint8_t d[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(&h, d);
        sodium_bin2hex(out, OBJSTORE_SHA256_HEX, d, sizeof d);
}

/* SHA-256 of every byte, read plainly: what the sparse-aware hash must equal. */
static void plain_sha256(const char *path, char out[OBJSTORE_SHA256_HEX]) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        crypto_hash_sha256_state h;
        crypto_hash_sha256_init(&h);
        uint8_t buf[65536];
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0)
                crypto_hash_sha256_update(&h, buf, (unsigned long long) k);
        assert_int_equal(k, 0);
        uint8_t d[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(&h, d);
        sodium_bin2hex(out, OBJSTORE_SHA256_HEX, d, sizeof d);
}

static void assert_same_content(const char *a, const char *b) {
        char ha[OBJSTORE_SHA256_HEX], hb[OBJSTORE_SHA256_HEX];
        struct stat sa, sb;
        assert_int_equal(stat(a, &sa), 0);
        assert_int_equal(stat(b, &sb), 0);
        assert_int_equal(sa.st_size, sb.st_size);
        plain_sha256(a, ha);
        plain_sha256(b, hb);
        assert_string_equal(ha, hb);
}

static int count_entries(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        n++;
        closedir(d);
        return n;
}

static int count_keys(struct objstore *o, const char *prefix) {
        _cleanup_(objstore_keys_freep) char **keys = NULL;
        assert_int_equal(objstore_list(o, prefix, &keys), 0);
        int n = 0;
        while (keys[n])
                n++;
        return n;
}

static int put_string(struct objstore *o, const char *key, const char *data) {
        _cleanup_close_ int fd = memfd_create("test", MFD_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(fd_write_all(fd, data, strlen(data)), 0);
        return objstore_put(o, key, fd);
}

static void test_key_check(void **state) {
        struct fixture *f = *state;
        const char *good[] = {
                "a", "blobs/0123abcd", "snapshots/snap-1/manifest.json", "A.b_c-D/e", "..a", "a..", ".hidden/x", "...",
        };
        for (size_t i = 0; i < ARRAY_SIZE(good); i++)
                assert_int_equal(objstore_key_check(good[i]), 0);
        const char *bad[] = {
                "",      ".",     "..",    "/abs",  "a/",   "a//b", "a/./b", "a/../b", "../a", "a/..",
                "a b",   "a\\b",  "a:b",   "a*b",   "~",    "a\nb", "a\tb",  "caf\xc3\xa9", "a/b?", "%2e%2e",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_int_equal(objstore_key_check(bad[i]), -EINVAL);
        assert_int_equal(objstore_key_check(NULL), -EINVAL);

        char longkey[OBJSTORE_KEY_MAX + 2];
        memset(longkey, 'k', sizeof longkey);
        longkey[OBJSTORE_KEY_MAX] = 0;
        assert_int_equal(objstore_key_check(longkey), 0);
        longkey[OBJSTORE_KEY_MAX] = 'k';
        longkey[OBJSTORE_KEY_MAX + 1] = 0;
        assert_int_equal(objstore_key_check(longkey), -EINVAL);

        /* every entry point refuses them, and the local backend's own
         * directory is not a key */
        assert_int_equal(put_string(f->o, "../escape", "x"), -EINVAL);
        assert_int_equal(put_string(f->o, ".tmp/x", "x"), -EINVAL);
        assert_int_equal(put_string(f->o, ".tmp", "x"), -EINVAL);
        assert_int_equal(objstore_get(f->o, "/etc/passwd", f->dst), -EINVAL);
        assert_int_equal(objstore_exists(f->o, "a//b", NULL), -EINVAL);
        assert_int_equal(objstore_remove(f->o, "a/../b"), -EINVAL);
        char **keys = NULL;
        assert_int_equal(objstore_list(f->o, "../", &keys), -EINVAL);
        assert_int_equal(objstore_list(f->o, "a//", &keys), -EINVAL);
        assert_null(keys);
        char escaped[sizeof f->dir + 16];
        snprintf(escaped, sizeof escaped, "%s/escape", f->dir);
        assert_int_equal(access(escaped, F_OK), -1);
}

static void test_roundtrip(void **state) {
        struct fixture *f = *state;
        assert_int_equal(put_string(f->o, "b", "bee"), 0);
        assert_int_equal(put_string(f->o, "a/y", "why"), 0);
        assert_int_equal(put_string(f->o, "a/x", "ex"), 0);
        assert_int_equal(put_string(f->o, "c/d/e", "deep"), 0);
        assert_int_equal(put_string(f->o, "b", "bumblebee"), 0); /* replaces */

        uint64_t size = 0;
        assert_int_equal(objstore_exists(f->o, "b", &size), 0);
        assert_int_equal(size, 9);
        assert_int_equal(objstore_exists(f->o, "a", &size), -ENOENT); /* a directory, not an object */
        assert_int_equal(objstore_exists(f->o, "nope", &size), -ENOENT);

        assert_int_equal(objstore_get(f->o, "b", f->dst), 0);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(file_read_all(f->dst, 100, &data, &len), 0);
        assert_string_equal(data, "bumblebee");
        free(data);
        struct stat st;
        assert_int_equal(stat(f->dst, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        assert_int_equal(objstore_get(f->o, "nope", f->dst), -ENOENT);
        assert_int_equal(objstore_get(f->o, "a", f->dst), -ENOENT);

        char **keys = NULL;
        assert_int_equal(objstore_list(f->o, "", &keys), 0);
        const char *all[] = { "a/x", "a/y", "b", "c/d/e" };
        for (size_t i = 0; i < ARRAY_SIZE(all); i++)
                assert_string_equal(keys[i], all[i]);
        assert_null(keys[ARRAY_SIZE(all)]);
        objstore_keys_free(keys);
        assert_int_equal(objstore_list(f->o, "a/", &keys), 0);
        assert_string_equal(keys[0], "a/x");
        assert_string_equal(keys[1], "a/y");
        assert_null(keys[2]);
        objstore_keys_free(keys);
        assert_int_equal(count_keys(f->o, "a"), 2);   /* a string prefix */
        assert_int_equal(count_keys(f->o, "a/x"), 1);
        assert_int_equal(count_keys(f->o, "c/"), 1);
        assert_int_equal(count_keys(f->o, "zzz/"), 0);

        assert_int_equal(objstore_remove(f->o, "a/x"), 0);
        assert_int_equal(objstore_remove(f->o, "a/x"), -ENOENT);
        assert_int_equal(objstore_exists(f->o, "a/x", NULL), -ENOENT);
        assert_int_equal(objstore_remove(f->o, "a"), -ENOENT);
        assert_int_equal(objstore_remove(f->o, "c/d/e"), 0);
        _cleanup_free_ char *cdir = strdup_printf("%s/c", f->root);
        assert_int_equal(access(cdir, F_OK), -1); /* empty parents pruned */
        assert_int_equal(count_keys(f->o, ""), 2);

        /* puts leave nothing in ROOT/.tmp, and the root is private */
        _cleanup_free_ char *tmp = strdup_printf("%s/.tmp", f->root);
        assert_int_equal(count_entries(tmp), 0);
        assert_int_equal(stat(f->root, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0700);
        assert_string_equal(objstore_backend_name(f->o), "local");
}

static void test_sparse(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *src = write_sparse(f, "sparse", 7);
        char sparse_hex[OBJSTORE_SHA256_HEX], plain_hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sha256(src, sparse_hex), 0);
        plain_sha256(src, plain_hex);
        assert_string_equal(sparse_hex, plain_hex);
        assert_int_equal(strlen(sparse_hex), 64);

        _cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(lseek(fd, 12345, SEEK_SET), 12345); /* put starts at 0 whatever the offset */
        assert_int_equal(objstore_put(f->o, "big/sparse", fd), 0);
        uint64_t size = 0;
        assert_int_equal(objstore_exists(f->o, "big/sparse", &size), 0);
        assert_int_equal(size, SPARSE_SIZE);
        _cleanup_free_ char *stored = strdup_printf("%s/big/sparse", f->root);
        struct stat st;
        assert_int_equal(stat(stored, &st), 0);
        assert_true(st.st_blocks * 512 < (8 << 20)); /* ~1.1 MiB of data, not 64 */

        assert_int_equal(objstore_get(f->o, "big/sparse", f->dst), 0);
        assert_int_equal(stat(f->dst, &st), 0);
        assert_int_equal(st.st_size, SPARSE_SIZE);
        assert_true(st.st_blocks * 512 < (8 << 20));
        assert_same_content(src, f->dst);
        char got_hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sha256(f->dst, got_hex), 0);
        assert_string_equal(got_hex, plain_hex);

        /* the empty file and a file that is one hole */
        _cleanup_free_ char *empty = write_file(f, "empty", "");
        assert_int_equal(objstore_file_sha256(empty, got_hex), 0);
        assert_string_equal(got_hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_int_equal(truncate(empty, 3 << 20), 0);
        assert_int_equal(objstore_file_sha256(empty, got_hex), 0);
        plain_sha256(empty, plain_hex);
        assert_string_equal(got_hex, plain_hex);
        assert_int_equal(objstore_file_sha256("/nonexistent/x", got_hex), -ENOENT);
}

/* The sparse form names content, not layout: the same bytes with their
 * zeros as holes, as written zeros, or mixed name the same; one byte more
 * or moved does not. Odd sizes and unaligned data included. */
static void test_sparse_name(void **state) {
        struct fixture *f = *state;
        static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, (3 << 20) + 17 };
        _cleanup_free_ uint8_t *buf = calloc(1, (3 << 20) + 17);
        assert_non_null(buf);
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                size_t n = sizes[i];
                memset(buf, 0, n);
                if (n > 0)
                        buf[n - 1] = 0x5a;
                if (n > 8192)
                        memset(buf + 5000, 0x11, 300); /* inside one block, across none */
                _cleanup_free_ char *dense = strdup_printf("%s/dense-%zu", f->src, i);
                _cleanup_free_ char *holes = strdup_printf("%s/holes-%zu", f->src, i);
                _cleanup_close_ int a = open(dense, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                _cleanup_close_ int b = open(holes, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                assert_true(a >= 0 && b >= 0);
                assert_int_equal(write(a, buf, n), (ssize_t) n); /* every zero written */
                assert_int_equal(ftruncate(b, (off_t) n), 0);    /* only the data written */
                if (n > 8192)
                        assert_int_equal(pwrite(b, buf + 5000, 300, 5000), 300);
                if (n > 0)
                        assert_int_equal(pwrite(b, buf + n - 1, 1, (off_t) n - 1), 1);
                char x[OBJSTORE_SHA256_HEX], y[OBJSTORE_SHA256_HEX], ref[OBJSTORE_SHA256_HEX];
                assert_int_equal(objstore_file_sparse_sha256(dense, x), 0);
                assert_int_equal(objstore_file_sparse_sha256(holes, y), 0);
                reference_sparse_sha256(dense, ref);
                assert_string_equal(x, ref);
                assert_string_equal(y, ref);
                if (n > 0) { /* the last byte one block earlier, or a zero more */
                        assert_int_equal(ftruncate(b, (off_t) n + 1), 0);
                        assert_int_equal(objstore_file_sparse_sha256(holes, y), 0);
                        assert_string_not_equal(x, y);
                }
        }
        /* the 64 MiB file of two data runs, hashed without reading its holes */
        _cleanup_free_ char *src = write_sparse(f, "sparse", 7);
        char x[OBJSTORE_SHA256_HEX], ref[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sparse_sha256(src, x), 0);
        reference_sparse_sha256(src, ref);
        assert_string_equal(x, ref);
}

/* A manifest of version 1 (blobs named by the plain SHA-256) still
 * downloads, verified by that name. */
static void test_manifest_v1_downloads(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *p = write_sparse(f, "rootfs.img", 9);
        char hex[OBJSTORE_SHA256_HEX];
        plain_sha256(p, hex);
        _cleanup_free_ char *key = strdup_printf("blobs/%s", hex);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(objstore_put(f->o, key, fd), 0);
        _cleanup_free_ char *m = strdup_printf("{\"version\":1,\"snapshot\":\"old\",\"created_at\":1,\"meta\":{},"
                                               "\"artifacts\":[{\"name\":\"rootfs.img\",\"sha256\":\"%s\",\"size\":%u}]}",
                                               hex, SPARSE_SIZE);
        assert_int_equal(put_string(f->o, "snapshots/old/manifest.json", m), 0);
        assert_int_equal(objstore_snapshot_download(f->o, "old", f->dst, NULL), 0);
        _cleanup_free_ char *got = strdup_printf("%s/rootfs.img", f->dst);
        assert_same_content(p, got);
        /* and is refused when the blob is not what its name says */
        _cleanup_free_ char *stored = strdup_printf("%s/%s", f->root, key);
        _cleanup_close_ int w = open(stored, O_WRONLY | O_CLOEXEC);
        assert_true(w >= 0);
        assert_int_equal(pwrite(w, "x", 1, 1 << 20), 1);
        _cleanup_free_ char *dst2 = strdup_printf("%s/again", f->dst);
        assert_int_equal(objstore_snapshot_download(f->o, "old", dst2, NULL), -EBADMSG);
}

/* Uploads snapshot id with artifacts state (text), rootfs.img (sparse,
 * shared between snapshots made with the same seed) and mem. */
static void upload3(struct fixture *f, const char *id, uint8_t rootfs_seed) {
        _cleanup_free_ char *state = strdup_printf("state of %s", id);
        _cleanup_free_ char *p_state = write_file(f, "state", state);
        _cleanup_free_ char *p_rootfs = write_sparse(f, "rootfs.img", rootfs_seed);
        _cleanup_free_ char *p_mem = write_file(f, "mem", "memory pages");
        const struct objstore_artifact a[] = {
                {.name = "state", .path = p_state},
                {.name = "rootfs.img", .path = p_rootfs},
                {.name = "mem", .path = p_mem},
        };
        _cleanup_(json_decrefp) json_t *meta = json_pack("{s:s,s:i}", "sandbox", "sbx-1", "vcpus", 2);
        assert_int_equal(objstore_snapshot_upload(f->o, id, a, ARRAY_SIZE(a),
                                                  &(struct objstore_upload_opts){.meta = meta}),
                         0);
}

static void test_upload_download(void **state) {
        struct fixture *f = *state;
        upload3(f, "snap-1", 1);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);
        assert_int_equal(count_keys(f->o, "snapshots/"), 1);

        _cleanup_(json_decrefp) json_t *m = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "snap-1", &m), 0);
        assert_int_equal(json_integer_value(json_object_get(m, "version")), 2);
        assert_string_equal(json_string_value(json_object_get(m, "snapshot")), "snap-1");
        assert_true(json_integer_value(json_object_get(m, "created_at")) > 1700000000000LL);
        assert_string_equal(json_string_value(json_object_get(json_object_get(m, "meta"), "sandbox")), "sbx-1");
        json_t *arts = json_object_get(m, "artifacts");
        assert_int_equal(json_array_size(arts), 3);
        json_t *rootfs = json_array_get(arts, 1);
        assert_string_equal(json_string_value(json_object_get(rootfs, "name")), "rootfs.img");
        assert_int_equal(json_integer_value(json_object_get(rootfs, "size")), SPARSE_SIZE);
        _cleanup_free_ char *p_rootfs = strdup_printf("%s/rootfs.img", f->src);
        char hex[OBJSTORE_SHA256_HEX];
        reference_sparse_sha256(p_rootfs, hex);
        assert_string_equal(json_string_value(json_object_get(rootfs, "sparse_sha256")), hex);

        assert_int_equal(objstore_snapshot_download(f->o, "snap-1", f->dst, NULL), 0);
        assert_int_equal(count_entries(f->dst), 3);
        const char *names[] = { "state", "rootfs.img", "mem" };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                _cleanup_free_ char *a = strdup_printf("%s/%s", f->src, names[i]);
                _cleanup_free_ char *b = strdup_printf("%s/%s", f->dst, names[i]);
                assert_same_content(a, b);
        }
        _cleanup_free_ char *got = strdup_printf("%s/rootfs.img", f->dst);
        struct stat st;
        assert_int_equal(stat(got, &st), 0);
        assert_true(st.st_blocks * 512 < (8 << 20)); /* still sparse after the round trip */

        /* an existing snapshot is never replaced */
        _cleanup_free_ char *p = write_file(f, "other", "x");
        const struct objstore_artifact one[] = {{.name = "state", .path = p}};
        assert_int_equal(objstore_snapshot_upload(f->o, "snap-1", one, 1, NULL), -EEXIST);
        assert_int_equal(objstore_snapshot_manifest(f->o, "nope", &m), -ENOENT);
        assert_int_equal(objstore_snapshot_download(f->o, "nope", f->dst, NULL), -ENOENT);
}

static void test_upload_invalid(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *p = write_file(f, "state", "s");
        const struct objstore_artifact one[] = {{.name = "state", .path = p}};
        const char *bad_ids[] = { "", ".hidden", "../x", "a/b", "a b" };
        for (size_t i = 0; i < ARRAY_SIZE(bad_ids); i++)
                assert_int_equal(objstore_snapshot_upload(f->o, bad_ids[i], one, 1, NULL), -EINVAL);
        assert_int_equal(objstore_snapshot_upload(f->o, "s", one, 0, NULL), -EINVAL);
        struct objstore_artifact many[OBJSTORE_ARTIFACTS_MAX + 1];
        char names[OBJSTORE_ARTIFACTS_MAX + 1][8];
        for (size_t i = 0; i < ARRAY_SIZE(many); i++) {
                snprintf(names[i], sizeof names[i], "a%zu", i);
                many[i] = (struct objstore_artifact){.name = names[i], .path = p};
        }
        assert_int_equal(objstore_snapshot_upload(f->o, "s", many, ARRAY_SIZE(many), NULL), -EINVAL);
        const struct objstore_artifact dup[] = {{.name = "x", .path = p}, {.name = "x", .path = p}};
        assert_int_equal(objstore_snapshot_upload(f->o, "s", dup, 2, NULL), -EINVAL);
        const struct objstore_artifact dots[] = {{.name = "..", .path = p}};
        assert_int_equal(objstore_snapshot_upload(f->o, "s", dots, 1, NULL), -EINVAL);
        const struct objstore_artifact slash[] = {{.name = "a/b", .path = p}};
        assert_int_equal(objstore_snapshot_upload(f->o, "s", slash, 1, NULL), -EINVAL);
        _cleanup_(json_decrefp) json_t *arr = json_array();
        assert_int_equal(
                objstore_snapshot_upload(f->o, "s", one, 1, &(struct objstore_upload_opts){.meta = arr}),
                -EINVAL);
        const struct objstore_artifact missing[] = {{.name = "state", .path = p},
                                                    {.name = "mem", .path = "/nonexistent/mem"}};
        assert_int_equal(objstore_snapshot_upload(f->o, "s", missing, 2, NULL), -ENOENT);
        _cleanup_(json_decrefp) json_t *m = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "s", &m), -ENOENT);

        /* a manifest that could not be read back is refused before any blob */
        _cleanup_(json_decrefp) json_t *huge = json_object();
        _cleanup_free_ char *pad = malloc(OBJSTORE_MANIFEST_MAX + 1);
        memset(pad, 'x', OBJSTORE_MANIFEST_MAX);
        pad[OBJSTORE_MANIFEST_MAX] = 0;
        json_object_set_new(huge, "pad", json_string(pad));
        assert_int_equal(
                objstore_snapshot_upload(f->o, "s", one, 1, &(struct objstore_upload_opts){.meta = huge}),
                -E2BIG);
        _cleanup_(json_decrefp) json_t *nul = json_pack("{s:s%}", "k", "a\0b", (size_t) 3);
        assert_non_null(nul);
        assert_int_equal(
                objstore_snapshot_upload(f->o, "s", one, 1, &(struct objstore_upload_opts){.meta = nul}),
                -EINVAL);
        assert_int_equal(count_keys(f->o, ""), 0);

        /* 16 distinct artifacts of the same content: one blob */
        assert_int_equal(objstore_snapshot_upload(f->o, "s", many, OBJSTORE_ARTIFACTS_MAX, NULL), 0);
        assert_int_equal(count_keys(f->o, "blobs/"), 1);
        assert_int_equal(objstore_snapshot_download(f->o, "s", f->dst, NULL), 0);
        assert_int_equal(count_entries(f->dst), OBJSTORE_ARTIFACTS_MAX);
}

static void test_interrupted_upload_gc(void **state) {
        struct fixture *f = *state;
        upload3(f, "complete", 1);

        /* An upload that died after its blobs and before its manifest, and a
         * put that died half-way, in ROOT/.tmp. */
        _cleanup_free_ char *orphan = write_file(f, "orphan", "half an upload");
        char hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sha256(orphan, hex), 0);
        _cleanup_free_ char *key = strdup_printf("blobs/%s", hex);
        _cleanup_close_ int fd = open(orphan, O_RDONLY | O_CLOEXEC);
        assert_int_equal(objstore_put(f->o, key, fd), 0);
        _cleanup_free_ char *stray = strdup_printf("%s/.tmp/put-deadbeef", f->root);
        assert_int_equal(file_write_atomic(stray, "partial", 7, 0600), 0);
        assert_int_equal(count_keys(f->o, "blobs/"), 4);

        _cleanup_(json_decrefp) json_t *m = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "interrupted", &m), -ENOENT);
        assert_int_equal(objstore_snapshot_download(f->o, "interrupted", f->dst, NULL), -ENOENT);

        /* young leftovers are left alone (an upload may be in progress) */
        assert_int_equal(objstore_gc(f->o, 3600), 0);
        assert_int_equal(count_keys(f->o, "blobs/"), 4);

        assert_int_equal(objstore_gc(f->o, 0), 2);
        assert_int_equal(objstore_exists(f->o, key, NULL), -ENOENT);
        assert_int_equal(access(stray, F_OK), -1);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);
        assert_int_equal(objstore_snapshot_download(f->o, "complete", f->dst, NULL), 0);
        assert_int_equal(objstore_gc(f->o, 0), 0);
}

/* A cancelled upload stops before its next blob and never writes its
 * manifest: nothing restorable lands. Control: the same upload, not
 * cancelled, lands whole. */
static void cancel_after_first(const char *snapshot_id, const char *artifact, size_t i, size_t n, void *userdata) {
        if (i == 0)
                atomic_store((atomic_bool *) userdata, true);
}

static void test_cancelled_upload(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *p_state = write_file(f, "state", "the state");
        _cleanup_free_ char *p_rootfs = write_sparse(f, "rootfs.img", 3);
        const struct objstore_artifact a[] = {{.name = "state", .path = p_state},
                                              {.name = "rootfs.img", .path = p_rootfs}};
        _cleanup_(json_decrefp) json_t *m = NULL;

        atomic_bool cancel = true;
        assert_int_equal(
                objstore_snapshot_upload(f->o, "c", a, 2, &(struct objstore_upload_opts){.cancel = &cancel}),
                -ECANCELED);
        assert_int_equal(count_keys(f->o, "blobs/"), 0); /* before the first hash was through */

        atomic_store(&cancel, false);
        objstore_set_blob_landed(f->o, cancel_after_first, &cancel);
        assert_int_equal(
                objstore_snapshot_upload(f->o, "c", a, 2, &(struct objstore_upload_opts){.cancel = &cancel}),
                -ECANCELED);
        assert_int_equal(count_keys(f->o, "blobs/"), 1);
        assert_int_equal(objstore_snapshot_manifest(f->o, "c", &m), -ENOENT);
        assert_int_equal(objstore_snapshot_download(f->o, "c", f->dst, NULL), -ENOENT);

        objstore_set_blob_landed(f->o, NULL, NULL);
        atomic_store(&cancel, false);
        assert_int_equal(
                objstore_snapshot_upload(f->o, "c", a, 2, &(struct objstore_upload_opts){.cancel = &cancel}),
                0);
        assert_int_equal(objstore_snapshot_download(f->o, "c", f->dst, NULL), 0);
        _cleanup_free_ char *got = strdup_printf("%s/rootfs.img", f->dst);
        assert_same_content(p_rootfs, got);
}

static void test_corrupt_blob(void **state) {
        struct fixture *f = *state;
        upload3(f, "snap-c", 3);
        _cleanup_free_ char *p_mem = strdup_printf("%s/mem", f->src);
        char hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sparse_sha256(p_mem, hex), 0);
        _cleanup_free_ char *blob = strdup_printf("%s/blobs/%s", f->root, hex);
        {
                /* flip one byte in place: same size, wrong content */
                _cleanup_close_ int fd = open(blob, O_WRONLY | O_CLOEXEC);
                assert_true(fd >= 0);
                assert_int_equal(pwrite(fd, "M", 1, 0), 1);
        }
        assert_int_equal(objstore_snapshot_download(f->o, "snap-c", f->dst, NULL), -EBADMSG);
        assert_int_equal(count_entries(f->dst), 0);

        /* a missing blob is as bad */
        _cleanup_free_ char *p_state = strdup_printf("%s/state", f->src);
        char shex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sparse_sha256(p_state, shex), 0);
        _cleanup_free_ char *skey = strdup_printf("blobs/%s", shex);
        assert_int_equal(objstore_remove(f->o, skey), 0);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-c", f->dst, NULL), -EBADMSG);
        assert_int_equal(count_entries(f->dst), 0);

        /* the next upload of the same content notices and repairs the blob */
        upload3(f, "snap-d", 3);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-c", f->dst, NULL),
                         -EBADMSG); /* its state differs */
        assert_int_equal(objstore_snapshot_download(f->o, "snap-d", f->dst, NULL), 0);
        _cleanup_free_ char *got = strdup_printf("%s/mem", f->dst);
        assert_same_content(p_mem, got);
}

static void test_dedup_delete(void **state) {
        struct fixture *f = *state;
        upload3(f, "snap-a", 5);
        upload3(f, "snap-b", 5); /* same rootfs and mem, its own state */
        assert_int_equal(count_keys(f->o, "blobs/"), 4);

        assert_int_equal(objstore_snapshot_delete(f->o, "snap-a"), 0);
        _cleanup_(json_decrefp) json_t *m = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "snap-a", &m), -ENOENT);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-b", f->dst, NULL), 0);
        _cleanup_free_ char *got = strdup_printf("%s/state", f->dst);
        char *data = NULL;
        assert_int_equal(file_read_all(got, 100, &data, NULL), 0);
        assert_string_equal(data, "state of snap-b");
        free(data);

        assert_int_equal(objstore_snapshot_delete(f->o, "snap-b"), 0);
        assert_int_equal(objstore_snapshot_delete(f->o, "snap-b"), -ENOENT);
        assert_int_equal(objstore_snapshot_delete(f->o, "../x"), -EINVAL);
        assert_int_equal(count_keys(f->o, ""), 0);
        assert_int_equal(count_entries(f->root), 1); /* only .tmp is left */
}

/* A delete in two steps: withdrawn, the snapshot is not restorable at
 * once and its blobs stay; released, those no other snapshot references
 * go. A snapshot uploaded between the two keeps what it shares. */
static void test_withdraw_release(void **state) {
        struct fixture *f = *state;
        upload3(f, "snap-a", 6);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);
        json_t *m = NULL;
        assert_int_equal(objstore_snapshot_withdraw(f->o, "snap-a", &m), 0);
        assert_non_null(m);
        _cleanup_(json_decrefp) json_t *gone = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "snap-a", &gone), -ENOENT);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-a", f->dst, NULL), -ENOENT);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);

        upload3(f, "snap-b", 6); /* the same rootfs and mem, its own state */
        assert_int_equal(count_keys(f->o, "blobs/"), 4);
        objstore_snapshot_release(f->o, m);
        json_decref(m);
        assert_int_equal(count_keys(f->o, "blobs/"), 3);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-b", f->dst, NULL), 0);

        json_t *none = NULL;
        assert_int_equal(objstore_snapshot_withdraw(f->o, "snap-a", &none), -ENOENT);
        assert_null(none);
        assert_int_equal(objstore_snapshot_withdraw(f->o, "snap-b", NULL), -EINVAL);
}

static const char manifest_ok[] =
        "{\"version\":1,\"snapshot\":\"snap-1\",\"created_at\":1767225600000,\"meta\":{\"k\":[1,2]},"
        "\"artifacts\":[{\"name\":\"state\",\"sha256\":"
        "\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"size\":0}]}";

static int parse(const char *s) {
        json_t *m = NULL;
        int r = objstore_manifest_parse(s, strlen(s), &m);
        assert_true(r < 0 ? m == NULL : m != NULL);
        json_decref(m);
        return r;
}

/* manifest_ok with its single artifact replaced */
static int parse_artifacts(const char *arts) {
        _cleanup_free_ char *s = strdup_printf("{\"version\":1,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},"
                                               "\"artifacts\":%s}",
                                               arts);
        return parse(s);
}

static void test_manifest_parse(void **state) {
        struct fixture *f = *state;
        assert_int_equal(parse(manifest_ok), 0);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"), 0);

        /* bad hex */
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B"
                                         "934CA495991B7852B855\",\"size\":1}]"),
                         -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"e3b0\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "0\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"g3b0c44298fc1c149afbf4c8996fb92427ae41e4649b"
                                         "934ca495991b7852b855\",\"size\":1}]"),
                         -EBADMSG);
        /* duplicate names, duplicate keys */
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1},"
                                         "{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"),
                         -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"name\":\"b\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"),
                         -EBADMSG);
        /* wrong types and values */
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":-1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":\"1\"}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1.0}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":7,\"sha256\":\"" SHA_OK "\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"..\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a/b\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"\",\"sha256\":\"" SHA_OK "\",\"size\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1,\"x\":1}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\"}]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[\"a\"]"), -EBADMSG);
        assert_int_equal(parse_artifacts("[]"), -EBADMSG);
        assert_int_equal(parse_artifacts("{}"), -EBADMSG);
        assert_int_equal(parse_artifacts("null"), -EBADMSG);
        const char *bad[] = {
                "", "[]", "null", "{}", "{\"version\":1}", manifest_ok + 1,
                "{\"version\":\"1\",\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"artifacts\":[]}",
                "{\"version\":2,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}", /* 2 names blobs otherwise */
                "{\"version\":1,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sparse_sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":3,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sparse_sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"snapshot\":\"../s\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"snapshot\":\"s\",\"created_at\":-5,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"snapshot\":\"s\",\"created_at\":0,\"meta\":[],\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"extra\":1,\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"version\":1,\"snapshot\":\"s\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
                "{\"version\":1,\"snapshot\":\"s\\u0000x\",\"created_at\":0,\"meta\":{},\"artifacts\":"
                "[{\"name\":\"a\",\"sha256\":\"" SHA_OK "\",\"size\":1}]}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_int_equal(parse(bad[i]), -EBADMSG);
        _cleanup_free_ char *trailing = strdup_printf("%s garbage", manifest_ok);
        assert_int_equal(parse(trailing), -EBADMSG);
        json_t *m = NULL;
        assert_int_equal(objstore_manifest_parse(manifest_ok, strlen(manifest_ok) - 1, &m), -EBADMSG);

        /* 16 artifacts are fine, 17 are not */
        char arts[4096] = "[";
        for (int i = 0; i < OBJSTORE_ARTIFACTS_MAX + 1; i++) {
                char one[160];
                snprintf(one, sizeof one, "%s{\"name\":\"a%d\",\"sha256\":\"" SHA_OK "\",\"size\":%d}", i ? "," : "",
                         i, i);
                strcat(arts, one);
                if (i == OBJSTORE_ARTIFACTS_MAX - 1) {
                        _cleanup_free_ char *s16 = strdup_printf("%s]", arts);
                        assert_int_equal(parse_artifacts(s16), 0);
                }
        }
        strcat(arts, "]");
        assert_int_equal(parse_artifacts(arts), -EBADMSG);

        /* too big: valid JSON, padded past 64 KiB with whitespace */
        size_t n = OBJSTORE_MANIFEST_MAX + 1;
        _cleanup_free_ char *big = malloc(n);
        memset(big, ' ', n);
        memcpy(big, manifest_ok, strlen(manifest_ok));
        assert_int_equal(objstore_manifest_parse(big, n - 1, &m), 0);
        json_decref(m);
        m = NULL;
        assert_int_equal(objstore_manifest_parse(big, n, &m), -EBADMSG);
        assert_null(m);

        /* a stored manifest goes through the same checks: malformed, too
         * big, or naming another snapshot */
        assert_int_equal(put_string(f->o, "snapshots/bad/manifest.json", "{\"version\":1}"), 0);
        assert_int_equal(objstore_snapshot_manifest(f->o, "bad", &m), -EBADMSG);
        assert_int_equal(objstore_snapshot_download(f->o, "bad", f->dst, NULL), -EBADMSG);
        _cleanup_close_ int fd = memfd_create("big", MFD_CLOEXEC);
        assert_int_equal(fd_write_all(fd, big, n), 0);
        assert_int_equal(objstore_put(f->o, "snapshots/big/manifest.json", fd), 0);
        assert_int_equal(objstore_snapshot_manifest(f->o, "big", &m), -EBADMSG);
        assert_int_equal(put_string(f->o, "snapshots/other/manifest.json", manifest_ok), 0); /* says snap-1 */
        assert_int_equal(objstore_snapshot_manifest(f->o, "other", &m), -EBADMSG);
        assert_null(m);

        /* while any manifest is unreadable gc removes no blob */
        assert_int_equal(put_string(f->o, "blobs/" SHA_OK, ""), 0);
        assert_int_equal(objstore_gc(f->o, 0), 0);
        assert_int_equal(count_keys(f->o, "blobs/"), 1);
        assert_int_equal(objstore_snapshot_delete(f->o, "bad"), 0); /* deletable all the same */
        assert_int_equal(objstore_snapshot_delete(f->o, "big"), 0);
        assert_int_equal(objstore_snapshot_delete(f->o, "other"), 0);
        assert_int_equal(objstore_gc(f->o, 0), 1);
}

/* A backend with only the required ops (as S3 will be), forwarding to a
 * local store: the snapshot layer must not depend on the optional ones. */
static struct objstore *inner(struct objstore *o) {
        return objstore_backend_data(o);
}
static int fw_put(struct objstore *o, const char *key, int fd) {
        return objstore_put(inner(o), key, fd);
}
static int fw_get(struct objstore *o, const char *key, const char *dst) {
        return objstore_get(inner(o), key, dst);
}
static int fw_exists(struct objstore *o, const char *key, uint64_t *ret) {
        return objstore_exists(inner(o), key, ret);
}
static int fw_remove(struct objstore *o, const char *key) {
        return objstore_remove(inner(o), key);
}
static int fw_list(struct objstore *o, const char *prefix, char ***ret) {
        return objstore_list(inner(o), prefix, ret);
}
static void fw_free(struct objstore *o) {
        objstore_free(inner(o));
}
static const struct objstore_ops forward_ops = {
        .name = "forward", .put = fw_put, .get = fw_get, .exists = fw_exists,
        .remove = fw_remove, .list = fw_list, .free = fw_free,
};

/* ---- sealed snapshots ---- */

/* Whether any file under dir holds needle. */
static bool tree_contains(const char *dir, const char *needle) {
        DIR *d = opendir(dir);
        assert_non_null(d);
        bool found = false;
        struct dirent *e;
        while (!found && (e = readdir(d))) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *p = strdup_printf("%s/%s", dir, e->d_name);
                struct stat st;
                assert_int_equal(lstat(p, &st), 0);
                if (S_ISDIR(st.st_mode)) {
                        found = tree_contains(p, needle);
                        continue;
                }
                _cleanup_free_ char *data = NULL;
                size_t len = 0;
                assert_int_equal(file_read_all(p, 256 << 20, &data, &len), 0);
                found = memmem(data, len, needle, strlen(needle)) != NULL;
        }
        closedir(d);
        return found;
}

#define MARK "airlock-known-plaintext-0123456789"

static char *write_marked(struct fixture *f, const char *name) {
        _cleanup_free_ char *text = NULL;
        for (int i = 0; i < 2000; i++) {
                char *next = strdup_printf("%s%s line %d\n", text ? text : "", MARK, i);
                free(text);
                text = next;
        }
        return write_file(f, name, text);
}

static const struct objstore_data_key test_key = { .key = { 1, 2, 3 }, .wrapped = "v1.test.1.wrapped-form" };

/* The blobs in the store. */
static size_t blob_count(struct fixture *f) {
        _cleanup_(objstore_keys_freep) char **keys = NULL;
        assert_int_equal(objstore_list(f->o, "blobs/", &keys), 0);
        size_t n = 0;
        while (keys[n])
                n++;
        return n;
}

/* A shared artifact (a delta's base) is stored once, in the clear and
 * sealed alike, whatever key each snapshot has; each snapshot opens it;
 * only its own artifacts are fetched when it asks for those. */
static void test_shared_artifacts(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *base = write_marked(f, "base"), *d1 = write_sparse(f, "d1", 3),
                            *d2 = write_sparse(f, "d2", 4);
        const struct objstore_artifact a1[] = {{.name = "state.delta", .path = d1},
                                               {.name = "base.mem", .path = base, .shared = true}};
        const struct objstore_artifact a2[] = {{.name = "state.delta", .path = d2},
                                               {.name = "base.mem", .path = base, .shared = true}};
        struct objstore_data_key k2 = test_key;
        k2.key[0] ^= 7;
        assert_int_equal(objstore_snapshot_upload(f->o, "s1", a1, 2,
                                                  &(struct objstore_upload_opts){.key = &test_key}),
                         0);
        assert_int_equal(blob_count(f), 2);
        assert_int_equal(
                objstore_snapshot_upload(f->o, "s2", a2, 2, &(struct objstore_upload_opts){.key = &k2}), 0);
        assert_int_equal(blob_count(f), 3); /* the base once */
        assert_false(tree_contains(f->root, MARK));
        /* a snapshot of other content under the same name is its own blob */
        _cleanup_free_ char *other = write_sparse(f, "other", 5);
        const struct objstore_artifact a3[] = {{.name = "base.mem", .path = other, .shared = true}};
        assert_int_equal(
                objstore_snapshot_upload(f->o, "s3", a3, 1, &(struct objstore_upload_opts){.key = &k2}), 0);
        assert_int_equal(blob_count(f), 4);

        char want[OBJSTORE_SHA256_HEX], got[OBJSTORE_SHA256_HEX];
        _cleanup_free_ char *out_base = strdup_printf("%s/base.mem", f->dst),
                            *out_delta = strdup_printf("%s/state.delta", f->dst);
        assert_int_equal(objstore_file_sha256(base, want), 0);
        /* only its own: the base is not fetched */
        static const char *const own[] = {"state.delta", NULL};
        assert_int_equal(objstore_snapshot_download(
                                 f->o, "s2", f->dst,
                                 &(struct objstore_download_opts){.data_key = k2.key, .only = own}),
                         0);
        assert_int_equal(access(out_base, F_OK), -1);
        assert_int_equal(objstore_file_sha256(out_delta, got), 0);
        assert_int_equal(objstore_file_sha256(d2, want), 0);
        assert_string_equal(want, got);
        /* and all of it, the base opened by each snapshot's manifest */
        assert_int_equal(
                objstore_snapshot_download(f->o, "s1", f->dst,
                                           &(struct objstore_download_opts){.data_key = test_key.key}),
                0);
        assert_int_equal(objstore_file_sha256(base, want), 0);
        assert_int_equal(objstore_file_sha256(out_base, got), 0);
        assert_string_equal(want, got);
        /* the base stays while a snapshot needs it */
        assert_int_equal(objstore_snapshot_delete(f->o, "s1"), 0);
        assert_int_equal(blob_count(f), 3);
        assert_int_equal(unlink(out_base), 0);
        assert_int_equal(objstore_snapshot_download(f->o, "s2", f->dst,
                                                    &(struct objstore_download_opts){.data_key = k2.key}),
                         0);
        assert_int_equal(objstore_file_sha256(out_base, got), 0);
        assert_string_equal(want, got);
        assert_int_equal(objstore_snapshot_delete(f->o, "s2"), 0);
        assert_int_equal(blob_count(f), 1);

        /* in the clear: content-addressed anyway */
        assert_int_equal(objstore_snapshot_upload(f->o, "c1", a1, 2, NULL), 0);
        assert_int_equal(objstore_snapshot_upload(f->o, "c2", a2, 2, NULL), 0);
        assert_int_equal(blob_count(f), 4);
}

/* Sealed, nothing of the plaintext is in the store (the artifacts, the
 * meta and its environment): the control, the same upload in the clear,
 * shows the marker. The data key opens it again whole; no key is -ENOKEY,
 * another key -EBADMSG, and neither leaves a file behind. */
static void test_sealed_round_trip(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *mem = write_marked(f, "mem"), *disk = write_sparse(f, "disk", 9);
        const struct objstore_artifact a[] = {{.name = "state", .path = mem},
                                              {.name = "rootfs.img", .path = disk}};
        _cleanup_(json_decrefp) json_t *meta = json_pack("{s:{s:s}}", "env", "TOKEN", MARK "-env");
        assert_int_equal(
                objstore_snapshot_upload(f->o, "clear", a, 2, &(struct objstore_upload_opts){.meta = meta}),
                0);
        assert_true(tree_contains(f->root, MARK));
        assert_int_equal(objstore_snapshot_delete(f->o, "clear"), 0);
        assert_false(tree_contains(f->root, MARK));

        assert_int_equal(
                objstore_snapshot_upload(f->o, "sealed", a, 2,
                                         &(struct objstore_upload_opts){.meta = meta, .key = &test_key}),
                0);
        assert_false(tree_contains(f->root, MARK)); /* nor the env's value */
        _cleanup_(json_decrefp) json_t *m = NULL, *got = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "sealed", &m), 0);
        assert_true(objstore_manifest_is_sealed(m));
        assert_string_equal(objstore_manifest_wrapped_key(m), test_key.wrapped);
        assert_int_equal(objstore_manifest_meta(m, NULL, &got), -ENOKEY);
        struct objstore_data_key other = test_key;
        other.key[0] ^= 1;
        assert_int_equal(objstore_manifest_meta(m, other.key, &got), -EBADMSG);
        assert_int_equal(objstore_manifest_meta(m, test_key.key, &got), 0);
        assert_true(json_equal(got, meta));
        /* holes are not stored: the 64 MiB disk's blob is about its data */
        const char *name, *blob;
        uint64_t size;
        objstore_manifest_artifact(m, 1, &name, &blob, &size);
        assert_string_equal(name, "rootfs.img");
        assert_true(size < (2u << 20));

        assert_int_equal(objstore_snapshot_download(f->o, "sealed", f->dst, NULL), -ENOKEY);
        assert_int_equal(objstore_snapshot_download(f->o, "sealed", f->dst, NULL), -ENOKEY);
        assert_int_equal(objstore_snapshot_download(f->o, "sealed", f->dst,
                                                    &(struct objstore_download_opts){.data_key = other.key}),
                         -EBADMSG);
        _cleanup_free_ char *out_mem = strdup_printf("%s/state", f->dst), *out_disk = strdup_printf("%s/rootfs.img", f->dst);
        assert_int_equal(access(out_mem, F_OK), -1);
        assert_int_equal(
                objstore_snapshot_download(f->o, "sealed", f->dst,
                                           &(struct objstore_download_opts){.data_key = test_key.key}),
                0);
        char h1[OBJSTORE_SHA256_HEX], h2[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sha256(mem, h1), 0);
        assert_int_equal(objstore_file_sha256(out_mem, h2), 0);
        assert_string_equal(h1, h2);
        assert_int_equal(objstore_file_sha256(disk, h1), 0);
        assert_int_equal(objstore_file_sha256(out_disk, h2), 0);
        assert_string_equal(h1, h2);
        struct stat st;
        assert_int_equal(stat(out_disk, &st), 0);
        assert_true((uint64_t) st.st_blocks * 512 < (8u << 20)); /* holes again */

        /* deterministic: the same key and content seal to the same blob */
        assert_int_equal(
                objstore_snapshot_upload(f->o, "again", a, 2,
                                         &(struct objstore_upload_opts){.meta = meta, .key = &test_key}),
                0);
        _cleanup_(json_decrefp) json_t *m2 = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "again", &m2), 0);
        const char *blob2;
        objstore_manifest_artifact(m2, 1, &name, &blob2, &size);
        assert_string_equal(blob, blob2);
        assert_int_equal(objstore_snapshot_delete(f->o, "sealed"), 0);
        assert_int_equal(objstore_snapshot_delete(f->o, "again"), 0);
}

/* A flipped byte in a sealed blob, or two snapshots' blobs swapped, is
 * refused and leaves nothing; the control downloads before the tampering. */
static void test_sealed_tamper(void **state) {
        struct fixture *f = *state;
        _cleanup_free_ char *mem = write_marked(f, "mem"), *mem2 = write_file(f, "mem2", "other state\n");
        const struct objstore_artifact a[] = {{.name = "state", .path = mem}},
                                       b[] = {{.name = "state", .path = mem2}};
        assert_int_equal(
                objstore_snapshot_upload(f->o, "a", a, 1, &(struct objstore_upload_opts){.key = &test_key}),
                0);
        assert_int_equal(
                objstore_snapshot_upload(f->o, "b", b, 1, &(struct objstore_upload_opts){.key = &test_key}),
                0);
        assert_int_equal(
                objstore_snapshot_download(f->o, "a", f->dst,
                                           &(struct objstore_download_opts){.data_key = test_key.key}),
                0); /* control */
        assert_int_equal(rm_rf(f->dst), 0);

        _cleanup_(json_decrefp) json_t *ma = NULL, *mb = NULL;
        assert_int_equal(objstore_snapshot_manifest(f->o, "a", &ma), 0);
        assert_int_equal(objstore_snapshot_manifest(f->o, "b", &mb), 0);
        const char *name, *blob_a, *blob_b;
        uint64_t size;
        objstore_manifest_artifact(ma, 0, &name, &blob_a, &size);
        objstore_manifest_artifact(mb, 0, &name, &blob_b, &size);
        _cleanup_free_ char *pa = strdup_printf("%s/blobs/%s", f->root, blob_a),
                            *pb = strdup_printf("%s/blobs/%s", f->root, blob_b),
                            *saved = strdup_printf("%s/saved", f->dir);
        /* one byte flipped in the middle */
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        assert_int_equal(file_read_all(pa, 1 << 20, &data, &len), 0);
        assert_int_equal(file_write_atomic(saved, data, len, 0600), 0);
        data[len / 2] ^= 0x20;
        assert_int_equal(file_write_atomic(pa, data, len, 0600), 0);
        assert_int_equal(
                objstore_snapshot_download(f->o, "a", f->dst,
                                           &(struct objstore_download_opts){.data_key = test_key.key}),
                -EBADMSG);
        _cleanup_free_ char *out = strdup_printf("%s/state", f->dst);
        assert_int_equal(access(out, F_OK), -1);
        /* b's blob in a's place (same key, another snapshot's content) */
        assert_int_equal(rename(saved, pa), 0);
        _cleanup_free_ char *bdata = NULL;
        assert_int_equal(file_read_all(pb, 1 << 20, &bdata, &len), 0);
        assert_int_equal(file_write_atomic(pa, bdata, len, 0600), 0);
        assert_int_equal(
                objstore_snapshot_download(f->o, "a", f->dst,
                                           &(struct objstore_download_opts){.data_key = test_key.key}),
                -EBADMSG);
        assert_int_equal(access(out, F_OK), -1);
}

static void test_minimal_backend(void **state) {
        struct fixture *f = *state;
        struct objstore *o = NULL;
        const struct objstore_ops incomplete = { .name = "x", .put = fw_put };
        assert_int_equal(objstore_new(&incomplete, f->o, &o), -EINVAL);
        assert_int_equal(objstore_new(&forward_ops, f->o, &o), 0);
        struct objstore *local = f->o; /* o owns it now, teardown frees o */
        f->o = o;
        assert_string_equal(objstore_backend_name(o), "forward");

        upload3(f, "snap-m", 4);
        upload3(f, "snap-n", 4);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-m", f->dst, NULL), 0);
        assert_int_equal(objstore_snapshot_delete(f->o, "snap-m"), 0);
        assert_int_equal(count_keys(local, "blobs/"), 3);

        /* without mtime, gc cannot tell an orphan's age: only min_age 0 removes */
        assert_int_equal(put_string(f->o, "blobs/" SHA_OK, ""), 0);
        assert_int_equal(objstore_gc(f->o, 3600), 0);
        assert_int_equal(objstore_gc(f->o, 0), 1);

        /* without local_path, corruption is caught on download */
        _cleanup_free_ char *p_mem = strdup_printf("%s/mem", f->src);
        char hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sparse_sha256(p_mem, hex), 0);
        _cleanup_free_ char *blob = strdup_printf("%s/blobs/%s", f->root, hex);
        assert_int_equal(file_write_atomic(blob, "MEMORY PAGES", 12, 0600), 0);
        _cleanup_free_ char *dst2 = strdup_printf("%s/dst2", f->dir);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-n", dst2, NULL), -EBADMSG);
        assert_int_equal(count_entries(dst2), 0);
}

/* With AIRLOCK_TEST_REFLINK_DIR naming a directory on btrfs or xfs, puts
 * and gets of files on it are reflinks: the stored blocks are shared.
 * -errno when the filesystem cannot say (no FIEMAP: no reflinks either). */
static int extent_shared(const char *path) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        union {
                struct fiemap fm;
                char buf[sizeof(struct fiemap) + sizeof(struct fiemap_extent)];
        } u = { .fm = { .fm_length = FIEMAP_MAX_OFFSET, .fm_flags = FIEMAP_FLAG_SYNC, .fm_extent_count = 1 } };
        if (ioctl(fd, FS_IOC_FIEMAP, &u.fm) < 0)
                return -errno;
        assert_int_equal(u.fm.fm_mapped_extents, 1);
        return !!(u.fm.fm_extents[0].fe_flags & FIEMAP_EXTENT_SHARED);
}

static void assert_shared(const char *path, const char *base) {
        int r = extent_shared(path);
        if (r <= 0)
                fail_msg("%s does not share its blocks (%s): AIRLOCK_TEST_REFLINK_DIR=%s must be on a filesystem "
                         "with reflinks (btrfs, XFS with reflink=1), and the object store must clone onto it",
                         path, r < 0 ? strerror(-r) : "a copy, not a reflink", base);
}

/* The store of test_reflink in AIRLOCK_TEST_REFLINK_DIR; none (the test
 * skips) without it. teardown() removes it, also when the test failed. */
static int setup_reflink(void **state) {
        const char *base = getenv("AIRLOCK_TEST_REFLINK_DIR");
        *state = NULL;
        if (!base || !*base)
                return 0;
        if (setup_in(state, base) < 0) {
                fprintf(stderr, "cannot make a store under AIRLOCK_TEST_REFLINK_DIR=%s: %s\n", base, strerror(errno));
                return -1;
        }
        return 0;
}

static void test_reflink(void **state) {
        struct fixture *f = *state;
        const char *base = getenv("AIRLOCK_TEST_REFLINK_DIR");
        if (!f)
                unit_skip("AIRLOCK_TEST_REFLINK_DIR is not set: name a directory on a filesystem with reflinks "
                          "(btrfs, XFS with reflink=1); ./test.sh sets it to its btrfs test volume");
        upload3(f, "snap-r", 9);
        _cleanup_free_ char *src = strdup_printf("%s/rootfs.img", f->src);
        char hex[OBJSTORE_SHA256_HEX];
        assert_int_equal(objstore_file_sparse_sha256(src, hex), 0);
        _cleanup_free_ char *blob = strdup_printf("%s/blobs/%s", f->root, hex);
        assert_shared(blob, base);
        assert_int_equal(objstore_snapshot_download(f->o, "snap-r", f->dst, NULL), 0);
        _cleanup_free_ char *got = strdup_printf("%s/rootfs.img", f->dst);
        assert_shared(got, base);
        assert_same_content(src, got);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_key_check, setup, teardown),
                cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sparse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sparse_name, setup, teardown),
                cmocka_unit_test_setup_teardown(test_manifest_v1_downloads, setup, teardown),
                cmocka_unit_test_setup_teardown(test_upload_download, setup, teardown),
                cmocka_unit_test_setup_teardown(test_upload_invalid, setup, teardown),
                cmocka_unit_test_setup_teardown(test_interrupted_upload_gc, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cancelled_upload, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_blob, setup, teardown),
                cmocka_unit_test_setup_teardown(test_dedup_delete, setup, teardown),
                cmocka_unit_test_setup_teardown(test_withdraw_release, setup, teardown),
                cmocka_unit_test_setup_teardown(test_manifest_parse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sealed_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_shared_artifacts, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sealed_tamper, setup, teardown),
                cmocka_unit_test_setup_teardown(test_minimal_backend, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reflink, setup_reflink, teardown),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
