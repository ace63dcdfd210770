/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The S3 backend against a real S3 server: OpenStack Swift with its s3api,
 * which tests/unit/with-swift.sh starts around this binary and describes
 * in AIRLOCK_TEST_S3_{ENDPOINT,REGION,BUCKET,ACCESS_KEY_FILE,SECRET_KEY_FILE}.
 * The URL parser's cases need no server.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "macros.h"
#include "objstore.h"
#include "unit-skip.h"
#include "util.h"

/* ---- the URL ---- */

static void test_url_parses(void **state) {
        (void) state;
        struct objstore_s3_location l;
        char err[256];
        assert_int_equal(objstore_s3_parse_url("s3://my-bucket?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1",
                                               &l, err, sizeof err),
                         0);
        assert_string_equal(l.bucket, "my-bucket");
        assert_string_equal(l.endpoint, "http://127.0.0.1:9000");
        assert_string_equal(l.region, "eu-west-1");
        assert_string_equal(l.prefix, "");
        assert_true(l.path_style);

        assert_int_equal(objstore_s3_parse_url("s3://b12/air/lock/?endpoint=https://s3.example:443/", &l, err,
                                               sizeof err),
                         0);
        assert_string_equal(l.prefix, "air/lock/");
        assert_string_equal(l.endpoint, "https://s3.example:443");
        assert_string_equal(l.region, "us-east-1");

        /* no endpoint: AWS, addressed by host name */
        assert_int_equal(objstore_s3_parse_url("s3://snapshots?region=eu-central-1", &l, err, sizeof err), 0);
        assert_string_equal(l.endpoint, "https://s3.eu-central-1.amazonaws.com");
        assert_false(l.path_style);
}

static void test_url_refuses(void **state) {
        (void) state;
        static const char *const bad[] = {
                "http://bucket",                              /* not s3:// */
                "s3://",                                       /* no bucket */
                "s3://UPPER",                                  /* bucket names are lowercase */
                "s3://ab",                                     /* too short */
                "s3://-bucket",                                /* starts with '-' */
                "s3://bucket/../x",                            /* a prefix with .. */
                "s3://bucket/a//b",                            /* empty segment */
                "s3://bucket?endpoint=ftp://h",                /* not http(s) */
                "s3://bucket?endpoint=http://h/path",          /* a path on the endpoint */
                "s3://bucket?endpoint=http://u@h",             /* credentials in the URL */
                "s3://bucket?region=EU",                       /* region charset */
                "s3://bucket?region=",                         /* empty */
                "s3://bucket?colour=blue",                     /* unknown parameter */
                "s3://bucket?endpoint",                        /* no value */
                "s3://bucket?endpoint=http://h%00",            /* NUL */
                "s3://bucket?endpoint=http://h%zz",            /* bad escape */
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                struct objstore_s3_location l;
                char err[256] = "";
                int r = objstore_s3_parse_url(bad[i], &l, err, sizeof err);
                if (r != -EINVAL)
                        fail_msg("%s: accepted", bad[i]);
                assert_true(err[0] != 0); /* says why */
        }
}

/* ---- against the server ---- */

struct server {
        struct objstore_s3_location where;
        char *access, *secret;
};

static int read_line(const char *env, char **ret) {
        const char *path = getenv(env);
        if (!path)
                return -ENOENT;
        _cleanup_free_ char *t = NULL;
        int r = file_read_all(path, 1024, &t, NULL);
        if (r < 0)
                return r;
        t[strcspn(t, "\r\n")] = 0;
        *ret = TAKE_PTR(t);
        return 0;
}

/* The lab's server, or a skip saying how to get one. */
static struct server *server(void) {
        static struct server s;
        static bool have;
        if (have)
                return &s;
        const char *ep = getenv("AIRLOCK_TEST_S3_ENDPOINT"), *bucket = getenv("AIRLOCK_TEST_S3_BUCKET"),
                   *region = getenv("AIRLOCK_TEST_S3_REGION");
        if (!ep || !bucket || !region || read_line("AIRLOCK_TEST_S3_ACCESS_KEY_FILE", &s.access) < 0 ||
            read_line("AIRLOCK_TEST_S3_SECRET_KEY_FILE", &s.secret) < 0)
                return NULL;
        _cleanup_free_ char *url = strdup_printf("s3://%s/t%u?endpoint=%s&region=%s", bucket,
                                                 randombytes_uniform(1000000), ep, region);
        char err[256];
        assert_non_null(url);
        if (objstore_s3_parse_url(url, &s.where, err, sizeof err) < 0)
                fail_msg("%s: %s", url, err);
        have = true;
        return &s;
}

#define NEED_SERVER(s)                                                                                   \
        struct server *s = server();                                                                     \
        if (!s) {                                                                                        \
                unit_skip("no S3 server: run under tests/unit/with-swift.sh");                          \
                return;                                                                                  \
        }

static struct objstore *open_store(struct server *s) {
        struct objstore *o = NULL;
        int r = objstore_open_s3(&s->where, s->access, s->secret, &o);
        if (r < 0)
                fail_msg("cannot open the S3 store: %s", strerror(-r));
        return o;
}

/* A temp file of size bytes: zeros but for a random 4 KiB at every step
 * bytes, and the last byte 0x5a (a trailing hole would hide a short copy). */
static int make_file(const char *dir, const char *name, uint64_t size, uint64_t step, char **ret_path) {
        _cleanup_free_ char *path = strdup_printf("%s/%s", dir, name);
        assert_non_null(path);
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t) size), 0);
        uint8_t buf[4096];
        for (uint64_t off = 0; step && off + sizeof buf < size; off += step) {
                randombytes_buf(buf, sizeof buf);
                assert_int_equal(pwrite(fd, buf, sizeof buf, (off_t) off), (ssize_t) sizeof buf);
        }
        if (size) {
                uint8_t last = 0x5a;
                assert_int_equal(pwrite(fd, &last, 1, (off_t) size - 1), 1);
        }
        *ret_path = TAKE_PTR(path);
        return 0;
}

static void assert_same_file(const char *a, const char *b) {
        char ha[OBJSTORE_SHA256_HEX], hb[OBJSTORE_SHA256_HEX];
        struct stat sa, sb;
        assert_int_equal(stat(a, &sa), 0);
        assert_int_equal(stat(b, &sb), 0);
        assert_int_equal(sa.st_size, sb.st_size);
        assert_int_equal(objstore_file_sha256(a, ha), 0);
        assert_int_equal(objstore_file_sha256(b, hb), 0);
        assert_string_equal(ha, hb);
}

static char *tmpdir(void) {
        char *t = strdup("/tmp/test-objstore-s3-XXXXXX");
        assert_non_null(t);
        assert_non_null(mkdtemp(t));
        return t;
}

static void test_put_get_list_remove(void **state) {
        (void) state;
        NEED_SERVER(s);
        _cleanup_(objstore_freep) struct objstore *o = open_store(s);
        assert_string_equal(objstore_backend_name(o), "s3");
        _cleanup_free_ char *dir = tmpdir(), *small = NULL, *empty = NULL;
        make_file(dir, "small", 100000, 30000, &small);
        make_file(dir, "empty", 0, 0, &empty);

        _cleanup_close_ int fd = open(small, O_RDONLY | O_CLOEXEC), efd = open(empty, O_RDONLY | O_CLOEXEC);
        assert_int_equal(objstore_exists(o, "a/one", NULL), -ENOENT);
        assert_int_equal(objstore_put(o, "a/one", fd), 0);
        assert_int_equal(objstore_put(o, "a/two", efd), 0);
        assert_int_equal(objstore_put(o, "b/three", fd), 0);
        uint64_t size = 0, mtime = 0;
        assert_int_equal(objstore_exists(o, "a/one", &size), 0);
        assert_int_equal(size, 100000);
        assert_int_equal(objstore_exists(o, "a/two", &size), 0);
        assert_int_equal(size, 0);
        assert_int_equal(objstore_backend_name(o)[0], 's');
        assert_int_equal(objstore_s3_ops.mtime(o, "a/one", &mtime), 0);
        assert_true(mtime + 300 > (uint64_t) time(NULL) && mtime < (uint64_t) time(NULL) + 300);

        _cleanup_free_ char *got = strdup_printf("%s/got", dir), *got_empty = strdup_printf("%s/got-empty", dir);
        assert_int_equal(objstore_get(o, "a/one", got), 0);
        assert_same_file(small, got);
        assert_int_equal(objstore_get(o, "a/two", got_empty), 0);
        assert_same_file(empty, got_empty);
        assert_int_equal(objstore_get(o, "a/none", got), -ENOENT);

        _cleanup_(objstore_keys_freep) char **keys = NULL;
        assert_int_equal(objstore_list(o, "a/", &keys), 0);
        assert_non_null(keys[0]);
        assert_string_equal(keys[0], "a/one");
        assert_string_equal(keys[1], "a/two");
        assert_null(keys[2]);
        objstore_keys_free(TAKE_PTR(keys));
        assert_int_equal(objstore_list(o, "", &keys), 0);
        assert_string_equal(keys[2], "b/three");
        assert_null(keys[3]);

        assert_int_equal(objstore_remove(o, "a/one"), 0);
        assert_int_equal(objstore_remove(o, "a/one"), -ENOENT);
        assert_int_equal(objstore_remove(o, "a/two"), 0);
        assert_int_equal(objstore_remove(o, "b/three"), 0);
        objstore_keys_free(TAKE_PTR(keys));
        assert_int_equal(objstore_list(o, "", &keys), 0);
        assert_null(keys[0]);
        assert_int_equal(rm_rf(dir), 0);
}

static void test_wrong_secret_and_bucket(void **state) {
        (void) state;
        NEED_SERVER(s);
        struct objstore *o = NULL;
        /* control: the right ones open */
        assert_int_equal(objstore_open_s3(&s->where, s->access, s->secret, &o), 0);
        objstore_free(o);
        o = NULL;
        _cleanup_free_ char *wrong = strdup_printf("%sx", s->secret);
        assert_int_equal(objstore_open_s3(&s->where, s->access, wrong, &o), -EACCES);
        assert_null(o);
        struct objstore_s3_location none = s->where;
        snprintf(none.bucket, sizeof none.bucket, "no-such-bucket-%u", randombytes_uniform(100000));
        assert_int_equal(objstore_open_s3(&none, s->access, s->secret, &o), -ENOENT);
        assert_null(o);
}

struct hook {
        uint32_t fail_at; /* 0: never */
        uint32_t sent;
};

static int count_parts(const char *key, uint32_t part, void *userdata) {
        (void) key;
        struct hook *h = userdata;
        if (h->fail_at && part == h->fail_at)
                return -EIO;
        __atomic_add_fetch(&h->sent, 1, __ATOMIC_SEQ_CST);
        return 0;
}

/* 44 MiB, mostly holes: six 8 MiB parts, four at once. A put cut off at
 * part 4 leaves an upload the next put resumes, sending only what is
 * missing; a reader never sees the half-done object. */
static void test_multipart_resume_and_gc(void **state) {
        (void) state;
        NEED_SERVER(s);
        _cleanup_(objstore_freep) struct objstore *o = open_store(s);
        _cleanup_free_ char *dir = tmpdir(), *big = NULL;
        make_file(dir, "big", 44ull << 20, 3ull << 20, &big);
        _cleanup_close_ int fd = open(big, O_RDONLY | O_CLOEXEC);
        struct hook h = { .fail_at = 4 };
        objstore_s3_set_part_hook(o, count_parts, &h);

        assert_int_equal(objstore_put(o, "blobs/big", fd), -EIO);
        assert_int_equal(objstore_exists(o, "blobs/big", NULL), -ENOENT); /* nothing half done shows */
        uint32_t first = h.sent;
        assert_true(first >= 1 && first <= 5);

        h = (struct hook){ 0 };
        assert_int_equal(objstore_put(o, "blobs/big", fd), 0);
        assert_int_equal(h.sent, 6 - first); /* only the missing parts went again */
        uint64_t size = 0;
        assert_int_equal(objstore_exists(o, "blobs/big", &size), 0);
        assert_int_equal(size, 44ull << 20);
        _cleanup_free_ char *got = strdup_printf("%s/got", dir);
        assert_int_equal(objstore_get(o, "blobs/big", got), 0);
        assert_same_file(big, got);
        struct stat st;
        assert_int_equal(stat(got, &st), 0);
        assert_true((uint64_t) st.st_blocks * 512 < (8ull << 20)); /* written sparse */

        /* a failed put leaves an upload; gc aborts it (but not a young one) */
        h = (struct hook){ .fail_at = 1 };
        assert_int_equal(objstore_put(o, "blobs/left", fd), -EIO);
        assert_int_equal(objstore_s3_ops.gc_tmp(o, 3600), 0);
        assert_int_equal(objstore_s3_ops.gc_tmp(o, 0), 1);
        assert_int_equal(objstore_s3_ops.gc_tmp(o, 0), 0);
        /* and the next put of that key starts over, whole */
        h = (struct hook){ 0 };
        assert_int_equal(objstore_put(o, "blobs/left", fd), 0);
        assert_int_equal(h.sent, 6);
        assert_int_equal(objstore_remove(o, "blobs/big"), 0);
        assert_int_equal(objstore_remove(o, "blobs/left"), 0);
        assert_int_equal(rm_rf(dir), 0);
}

/* Snapshots through the generic layer; a blob changed behind the store's
 * back is refused at download, and nothing of it is left. */
static void test_snapshot_round_trip_and_corrupt_blob(void **state) {
        (void) state;
        NEED_SERVER(s);
        _cleanup_(objstore_freep) struct objstore *o = open_store(s);
        _cleanup_free_ char *dir = tmpdir(), *disk = NULL, *mem = NULL;
        make_file(dir, "disk", 20ull << 20, 5ull << 20, &disk);
        make_file(dir, "mem", 3ull << 20, 1ull << 20, &mem);
        const struct objstore_artifact art[] = {{.name = "rootfs.img", .path = disk},
                                                {.name = "mem", .path = mem}};
        assert_int_equal(objstore_snapshot_upload(o, "snap-1", art, 2, NULL), 0);
        assert_int_equal(objstore_snapshot_upload(o, "snap-1", art, 2, NULL), -EEXIST);
        _cleanup_free_ char *out = strdup_printf("%s/out", dir), *out_disk = strdup_printf("%s/out/rootfs.img", dir),
                            *out_mem = strdup_printf("%s/out/mem", dir);
        assert_int_equal(objstore_snapshot_download(o, "snap-1", out, NULL), 0);
        assert_same_file(disk, out_disk);
        assert_same_file(mem, out_mem);
        assert_int_equal(rm_rf(out), 0);

        /* overwrite mem's blob with other bytes of the same size */
        _cleanup_(json_decrefp) json_t *m = NULL;
        assert_int_equal(objstore_snapshot_manifest(o, "snap-1", &m), 0);
        const char *sha = json_string_value(json_object_get(json_array_get(json_object_get(m, "artifacts"), 1),
                                                            "sparse_sha256"));
        assert_non_null(sha);
        _cleanup_free_ char *key = strdup_printf("blobs/%s", sha), *other = NULL;
        make_file(dir, "other", 3ull << 20, 1ull << 20, &other);
        _cleanup_close_ int fd = open(other, O_RDONLY | O_CLOEXEC);
        assert_int_equal(objstore_put(o, key, fd), 0);
        assert_int_equal(objstore_snapshot_download(o, "snap-1", out, NULL), -EBADMSG);
        assert_int_equal(access(out_mem, F_OK), -1);
        assert_int_equal(access(out_disk, F_OK), -1);

        assert_int_equal(objstore_snapshot_delete(o, "snap-1"), 0);
        _cleanup_(objstore_keys_freep) char **keys = NULL;
        assert_int_equal(objstore_list(o, "", &keys), 0);
        assert_null(keys[0]);
        assert_int_equal(rm_rf(dir), 0);
}

/* Whether any object in the store holds needle (each fetched whole). */
static bool store_contains(struct objstore *o, const char *dir, const char *needle) {
        _cleanup_(objstore_keys_freep) char **keys = NULL;
        assert_int_equal(objstore_list(o, "", &keys), 0);
        bool found = false;
        for (char **k = keys; *k && !found; k++) {
                _cleanup_free_ char *p = strdup_printf("%s/fetched", dir), *data = NULL;
                size_t len = 0;
                assert_int_equal(objstore_get(o, *k, p), 0);
                assert_int_equal(file_read_all(p, 256 << 20, &data, &len), 0);
                found = memmem(data, len, needle, strlen(needle)) != NULL;
                unlink(p);
        }
        return found;
}

/* Sealed through S3: the bucket holds none of the plaintext (artifacts
 * or environment) while the same snapshot in the clear does; the data
 * key brings it back whole, sparse. */
static void test_sealed_snapshot(void **state) {
        (void) state;
        NEED_SERVER(s);
        _cleanup_(objstore_freep) struct objstore *o = open_store(s);
        _cleanup_free_ char *dir = tmpdir(), *disk = NULL, *mem = NULL;
        make_file(dir, "disk", 24ull << 20, 6ull << 20, &disk);
        mem = strdup_printf("%s/mem", dir);
        _cleanup_free_ char *text = NULL;
        for (int i = 0; i < 3000; i++) {
                char *next = strdup_printf("%sairlock-known-plaintext %d\n", text ? text : "", i);
                free(text);
                text = next;
        }
        assert_int_equal(file_write_atomic(mem, text, strlen(text), 0600), 0);
        const struct objstore_artifact art[] = {{.name = "rootfs.img", .path = disk},
                                                {.name = "state", .path = mem}};
        _cleanup_(json_decrefp) json_t *meta = json_pack("{s:{s:s}}", "env", "TOKEN", "airlock-known-plaintext-env");
        assert_int_equal(
                objstore_snapshot_upload(o, "clear", art, 2, &(struct objstore_upload_opts){.meta = meta}),
                0);
        assert_true(store_contains(o, dir, "airlock-known-plaintext")); /* the control */
        assert_int_equal(objstore_snapshot_delete(o, "clear"), 0);

        const struct objstore_data_key key = { .key = { 42 }, .wrapped = "v1.test.1.x" };
        assert_int_equal(objstore_snapshot_upload(o, "sealed", art, 2,
                                                  &(struct objstore_upload_opts){.meta = meta, .key = &key}),
                         0);
        assert_false(store_contains(o, dir, "airlock-known-plaintext"));
        _cleanup_free_ char *out = strdup_printf("%s/out", dir), *out_disk = strdup_printf("%s/out/rootfs.img", dir),
                            *out_mem = strdup_printf("%s/out/state", dir);
        assert_int_equal(objstore_snapshot_download(o, "sealed", out, NULL), -ENOKEY);
        assert_int_equal(objstore_snapshot_download(o, "sealed", out,
                                                    &(struct objstore_download_opts){.data_key = key.key}),
                         0);
        assert_same_file(disk, out_disk);
        assert_same_file(mem, out_mem);
        assert_int_equal(objstore_snapshot_delete(o, "sealed"), 0);
        assert_int_equal(rm_rf(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_url_parses),
                cmocka_unit_test(test_url_refuses),
                cmocka_unit_test(test_put_get_list_remove),
                cmocka_unit_test(test_wrong_secret_and_bucket),
                cmocka_unit_test(test_multipart_resume_and_gc),
                cmocka_unit_test(test_snapshot_round_trip_and_corrupt_blob),
                cmocka_unit_test(test_sealed_snapshot),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
