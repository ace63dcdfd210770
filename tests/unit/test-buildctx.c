/* SPDX-License-Identifier: Apache-2.0 */
/* lib/buildctx: build contexts and OCI layers checked as tar streams; each
 * refusal names the entry and what is wrong with it, and the same archive
 * without that entry passes. The archives are made here byte by byte
 * (ustar headers, pax records, an old GNU sparse header, gzip), so that
 * what a hostile client would send is what is tested. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "buildctx.h"

/* ---- a tar, byte by byte ---- */

struct tar {
        uint8_t *data;
        size_t len, cap;
};

static void put(struct tar *t, const void *p, size_t n) {
        if (t->len + n > t->cap) {
                t->cap = (t->len + n) * 2 + 4096;
                t->data = realloc(t->data, t->cap);
                assert_non_null(t->data);
        }
        memcpy(t->data + t->len, p, n);
        t->len += n;
}

/* A number field: octal, or base-256 where it does not fit (as GNU tar
 * writes big sizes). */
static void octal(char *field, size_t width, uint64_t v) {
        if (v < (UINT64_C(1) << (3 * (width - 1)))) {
                snprintf(field, width, "%0*llo", (int) width - 1, (unsigned long long) v);
                return;
        }
        memset(field, 0, width);
        field[0] = (char) 0x80;
        for (size_t i = width - 1; i > 0 && v; i--, v >>= 8)
                field[i] = (char) (v & 0xff);
}

static void checksum(uint8_t h[512]) {
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (size_t i = 0; i < 512; i++)
                sum += h[i];
        snprintf((char *) h + 148, 8, "%06o", sum);
        h[155] = ' ';
}

/* One header: name (<= 99 bytes), type ('0' file, '1' hard link, '2'
 * symlink, '3' char, '4' block, '5' dir, '6' FIFO, 'x' pax), mode, size,
 * link target. */
static void header(struct tar *t, const char *name, char type, unsigned mode, uint64_t size, const char *link) {
        uint8_t h[512] = { 0 };
        assert_true(strlen(name) < 100 && (!link || strlen(link) < 100));
        memcpy(h, name, strlen(name));
        octal((char *) h + 100, 8, mode);
        octal((char *) h + 108, 8, 0);
        octal((char *) h + 116, 8, 0);
        octal((char *) h + 124, 12, size);
        octal((char *) h + 136, 12, 1700000000);
        h[156] = (uint8_t) type;
        if (link)
                memcpy(h + 157, link, strlen(link));
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        checksum(h);
        put(t, h, 512);
}

static void data(struct tar *t, const void *p, size_t n) {
        static const uint8_t zero[512];
        put(t, p, n);
        if (n % 512)
                put(t, zero, 512 - n % 512);
}

static void file(struct tar *t, const char *name, const char *text) {
        header(t, name, '0', 0644, strlen(text), NULL);
        data(t, text, strlen(text));
}

/* A pax header giving the next entry's path (any length). */
static void pax_path(struct tar *t, const char *path) {
        char rec[8192];
        size_t body = strlen(" path=\n") + strlen(path), len = body + 1;
        while ((size_t) snprintf(NULL, 0, "%zu", len) + body != len)
                len++;
        assert_true(len < sizeof rec);
        snprintf(rec, sizeof rec, "%zu path=%s\n", len, path);
        header(t, "PaxHeader", 'x', 0644, len, NULL);
        data(t, rec, len);
}

/* An old GNU sparse file: apparent size `apparent`, one 512-byte block of
 * data at its end. */
static void sparse(struct tar *t, const char *name, uint64_t apparent) {
        uint8_t h[512] = { 0 };
        memcpy(h, name, strlen(name));
        octal((char *) h + 100, 8, 0644);
        octal((char *) h + 108, 8, 0);
        octal((char *) h + 116, 8, 0);
        octal((char *) h + 124, 12, 512);
        octal((char *) h + 136, 12, 1700000000);
        h[156] = 'S';
        memcpy(h + 257, "ustar  ", 8); /* GNU's magic */
        octal((char *) h + 386, 12, apparent - 512); /* the map: offset, then bytes */
        octal((char *) h + 398, 12, 512);
        octal((char *) h + 483, 12, apparent); /* the real size */
        checksum(h);
        put(t, h, 512);
        uint8_t block[512];
        memset(block, 'x', sizeof block);
        data(t, block, sizeof block);
}

static void end(struct tar *t) {
        static const uint8_t zero[1024];
        put(t, zero, sizeof zero);
}

static void tar_free(struct tar *t) {
        free(t->data);
        *t = (struct tar){ 0 };
}

static void gzip(const struct tar *in, struct tar *out) {
        z_stream z = { 0 };
        assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
        size_t cap = deflateBound(&z, in->len) + 64;
        out->data = malloc(cap);
        assert_non_null(out->data);
        z.next_in = in->data;
        z.avail_in = (uInt) in->len;
        z.next_out = out->data;
        z.avail_out = (uInt) cap;
        assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
        out->len = cap - z.avail_out;
        deflateEnd(&z);
}

/* ---- checks ---- */

static int check(enum buildctx_kind kind, const struct buildctx_limits *lim, const struct tar *t, char *err) {
        struct buildctx *c = NULL;
        assert_int_equal(buildctx_new(kind, lim, &c), 0);
        int r = buildctx_feed_mem(c, t->data, t->len, err);
        buildctx_free(c);
        return r;
}

/* The context refused with r, err naming the entry and saying why. */
static void assert_refused(const struct tar *t, int r, const char *entry, const char *why) {
        char err[BUILDCTX_ERR_MAX] = "";
        int k = check(BUILDCTX_CONTEXT, NULL, t, err);
        if (k != r || !strstr(err, entry) || !strstr(err, why))
                fail_msg("expected %d naming '%s' with '%s', got %d: %s", r, entry, why, k, err);
        assert_non_null(strstr(err, "build context: "));
}

/* A context that a real build has: directories, files, links inside. */
static void good_context(struct tar *t) {
        header(t, "./", '5', 0755, 0, NULL);
        header(t, "./app/", '5', 02775, 0, NULL); /* setgid on a directory: its group only */
        file(t, "./app/server.js", "console.log(1)\n");
        file(t, "./data.txt", "data\n");
        header(t, "./app/data", '2', 0777, 0, "../data.txt");
        header(t, "./app/node_modules/.bin/x", '2', 0777, 0, "../x/cli.js");
        header(t, "./app/same.txt", '1', 0644, 0, "data.txt");
        header(t, "./run.sh", '0', 0755, 0, NULL);
}

static void test_a_real_context_passes(void **state) {
        (void) state;
        struct tar t = { 0 };
        good_context(&t);
        end(&t);
        struct buildctx *c = NULL;
        char err[BUILDCTX_ERR_MAX] = "";
        assert_int_equal(buildctx_new(BUILDCTX_CONTEXT, NULL, &c), 0);
        if (buildctx_feed_mem(c, t.data, t.len, err) < 0)
                fail_msg("refused: %s", err);
        assert_int_equal(buildctx_entries(c), 8);
        assert_int_equal(buildctx_total_bytes(c), 20);
        assert_true(buildctx_has(c, "app"));
        assert_true(buildctx_has(c, "./app/"));
        assert_true(buildctx_has(c, "app/server.js"));
        assert_true(buildctx_has(c, "app//./node_modules"));
        assert_true(buildctx_has(c, "."));
        assert_false(buildctx_has(c, "nope"));
        assert_false(buildctx_has(c, "app/nope"));
        buildctx_free(c);
        /* compressed: the same */
        struct tar z = { 0 };
        gzip(&t, &z);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &z, err), 0);
        tar_free(&z);
        tar_free(&t);
        /* an empty file is an empty context */
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &(struct tar){ 0 }, err), 0);
}

/* Each hostile entry after the good context: refused, naming it. */
static void test_hostile_entries_are_refused(void **state) {
        (void) state;
        static const struct {
                const char *name;
                char type;
                unsigned mode;
                const char *link;
                const char *shown, *why;
        } cases[] = {
                { "../x", '0', 0644, NULL, "../x", "climbs out ('..')" },
                { "./app/../../x", '0', 0644, NULL, "../../x", "climbs out" },
                { "/etc/x", '0', 0644, NULL, "/etc/x", "is an absolute path" },
                { "out", '2', 0777, "/etc", "'out' is a symbolic link to '/etc', an absolute path", "stay inside" },
                { "app/up", '2', 0777, "../../etc", "'app/up' is a symbolic link to '../../etc'", "climbs out" },
                { "app/mid", '2', 0777, "x/../../..", "'app/mid'", "climbs ('..') after a name" },
                { "pw", '1', 0644, "/etc/passwd", "'pw' is a hard link to '/etc/passwd', outside the context", "" },
                { "pw", '1', 0644, "../../etc/passwd", "'pw' is a hard link to '../../etc/passwd'", "outside" },
                { "ln", '1', 0644, "later.txt", "'ln' is a hard link to 'later.txt'", "no file among the entries" },
                { "ln", '1', 0644, "app", "'ln' is a hard link to 'app'", "a directory" },
                { "ln", '1', 0644, "app/data", "'ln' is a hard link to 'app/data'", "not a regular file" },
                { "tty", '3', 0644, NULL, "'tty'", "is a character device" },
                { "sda", '4', 0644, NULL, "'sda'", "is a block device" },
                { "fifo", '6', 0644, NULL, "'fifo'", "is a FIFO" },
                { "suid", '0', 04755, NULL, "'suid'", "is set-user-ID" },
                { "sgid", '0', 02755, NULL, "'sgid'", "is set-group-ID" },
                { "app", '2', 0777, "data.txt", "'app' appears twice", "as a directory, then as a symbolic link" },
                { "app/data", '2', 0777, "server.js", "'app/data' appears twice", "symbolic link" },
                { "app/data/x", '0', 0644, NULL, "'app/data/x' goes through the symbolic link 'app/data'", "" },
                { "data.txt/x", '0', 0644, NULL, "'data.txt/x' lies under 'data.txt'", "a file" },
                { "bad\n\x01\xff", '0', 0644, NULL, "'bad\\x0a\\x01\\xff'", "set-user-ID" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                struct tar t = { 0 };
                good_context(&t);
                unsigned mode = cases[i].mode;
                if (strncmp(cases[i].name, "bad", 3) == 0)
                        mode = 04755;
                header(&t, cases[i].name, cases[i].type, mode, 0, cases[i].link);
                end(&t);
                assert_refused(&t, -EBADMSG, cases[i].shown, cases[i].why);
                tar_free(&t);
        }
}

/* A link out, then a file written through it: the file is refused (the
 * link already was, on its own). */
static void test_a_file_through_a_link_is_refused(void **state) {
        (void) state;
        struct tar t = { 0 };
        header(&t, "d/", '5', 0755, 0, NULL);
        header(&t, "d/l", '2', 0777, 0, ".."); /* the root: allowed */
        file(&t, "d/l/x", "through\n");
        end(&t);
        assert_refused(&t, -EBADMSG, "'d/l/x' goes through the symbolic link 'd/l'", "");
        tar_free(&t);
        /* and the one link that climbs after a name: refused at once */
        t = (struct tar){ 0 };
        header(&t, "d/", '5', 0755, 0, NULL);
        header(&t, "d/l", '2', 0777, 0, "..");
        header(&t, "d/t", '2', 0777, 0, "l/../..");
        end(&t);
        assert_refused(&t, -EBADMSG, "'d/t' is a symbolic link to 'l/../..'", "after a name");
        tar_free(&t);
}

static void test_limits(void **state) {
        (void) state;
        struct buildctx_limits lim = buildctx_context_limits;
        char err[BUILDCTX_ERR_MAX];
        struct tar t = { 0 };
        /* entries */
        lim.entries = 3;
        for (int i = 0; i < 4; i++) {
                char name[16];
                snprintf(name, sizeof name, "f%d", i);
                file(&t, name, "x");
        }
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), -EFBIG);
        assert_non_null(strstr(err, "more than 3 entries"));
        lim.entries = 4;
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), 0);
        tar_free(&t);
        /* one file's size, all files' */
        lim = buildctx_context_limits;
        lim.file_bytes = 1000;
        lim.total_bytes = 1500;
        static char kb[1000];
        memset(kb, 'k', sizeof kb);
        kb[sizeof kb - 1] = 0;
        file(&t, "a", kb);
        file(&t, "b", kb);
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), -EFBIG);
        assert_non_null(strstr(err, "the files add up to more than 1.5 KiB (at 'b')"));
        tar_free(&t);
        header(&t, "big", '0', 0644, 1001, NULL);
        static char kb2[1001];
        data(&t, kb2, sizeof kb2);
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), -EFBIG);
        assert_non_null(strstr(err, "'big' is 1001 bytes: one file may have at most 1000 bytes"));
        tar_free(&t);
        /* depth and length */
        lim = buildctx_context_limits;
        lim.depth = 3;
        file(&t, "a/b/c", "x");
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), 0);
        tar_free(&t);
        file(&t, "a/b/c/d", "x");
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, &lim, &t, err), -EFBIG);
        assert_non_null(strstr(err, "'a/b/c/d' is more than 3 components deep"));
        tar_free(&t);
        char longp[1200];
        memset(longp, 'p', sizeof longp);
        longp[sizeof longp - 1] = 0;
        for (size_t i = 200; i < sizeof longp - 1; i += 200)
                longp[i] = '/';
        pax_path(&t, longp);
        file(&t, "placeholder", "x");
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), -EFBIG);
        assert_non_null(strstr(err, "is 1199 bytes long: at most 1024"));
        tar_free(&t);
        longp[300] = 0; /* 300 bytes, through pax: fine */
        pax_path(&t, longp);
        file(&t, "placeholder", "x");
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), 0);
        tar_free(&t);
        memset(longp, 'q', 300); /* one component of 300 bytes */
        pax_path(&t, longp);
        file(&t, "placeholder", "x");
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), -EFBIG);
        assert_non_null(strstr(err, "a component of 300 bytes: at most 255"));
        tar_free(&t);
}

/* A sparse file of 100 GiB apparent size (512 bytes of data): refused by
 * its apparent size, before any of it is read. */
static void test_a_huge_sparse_file_is_refused(void **state) {
        (void) state;
        char err[BUILDCTX_ERR_MAX];
        struct tar t = { 0 };
        file(&t, "ok", "x");
        sparse(&t, "holes", 100 * (UINT64_C(1) << 30));
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), -EFBIG);
        assert_non_null(strstr(err, "'holes' is 100 GiB (a sparse file's apparent size): one file may have at most 1 GiB"));
        tar_free(&t);
        /* a small sparse file is a file */
        sparse(&t, "holes", 1 << 20);
        end(&t);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), 0);
        tar_free(&t);
}

/* 64 MiB of zeros in 4 files, gzip'd: over 100 times its compressed size
 * past 16 MiB. The same files of random bytes pass. */
static void test_a_decompression_bomb_is_refused(void **state) {
        (void) state;
        char err[BUILDCTX_ERR_MAX];
        size_t n = 16u << 20;
        uint8_t *buf = calloc(1, n);
        assert_non_null(buf);
        for (int pass = 0; pass < 2; pass++) {
                struct tar t = { 0 }, z = { 0 };
                if (pass == 1)
                        for (size_t i = 0; i < n; i++)
                                buf[i] = (uint8_t) (rand() >> 7);
                for (int i = 0; i < 4; i++) {
                        char name[16];
                        snprintf(name, sizeof name, "zero%d", i);
                        header(&t, name, '0', 0644, n, NULL);
                        data(&t, buf, n);
                }
                end(&t);
                gzip(&t, &z);
                int r = check(BUILDCTX_CONTEXT, NULL, &z, err);
                if (pass == 0) {
                        assert_int_equal(r, -EFBIG);
                        assert_non_null(strstr(err, "unpacks to more than 100 times its compressed size past 16 MiB"));
                        assert_non_null(strstr(err, "decompression bomb"));
                } else if (r != 0)
                        fail_msg("random data refused: %s", err);
                tar_free(&t);
                tar_free(&z);
        }
        free(buf);
}

static void test_not_a_tar(void **state) {
        (void) state;
        char err[BUILDCTX_ERR_MAX];
        struct tar t = { 0 };
        put(&t, "PK\x03\x04 this is a zip file, not a tar at all........", 50);
        uint8_t pad[2048] = { 1 };
        put(&t, pad, sizeof pad);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), -EBADMSG);
        assert_non_null(strstr(err, "not a tar archive"));
        tar_free(&t);
        /* a tar cut in the middle of a file */
        file(&t, "a", "hello");
        header(&t, "b", '0', 0644, 4096, NULL);
        put(&t, pad, 100);
        assert_int_equal(check(BUILDCTX_CONTEXT, NULL, &t, err), -EBADMSG);
        tar_free(&t);
}

/* After a refusal the checker refuses whatever comes (a layer after a bad
 * one), from a file descriptor as from memory. */
static void test_refusal_sticks_and_fd_reads(void **state) {
        (void) state;
        char err[BUILDCTX_ERR_MAX];
        struct tar bad = { 0 }, good = { 0 };
        file(&bad, "../x", "x");
        end(&bad);
        good_context(&good);
        end(&good);
        int fd = memfd_create("ctx", MFD_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, good.data, good.len), (ssize_t) good.len);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        struct buildctx *c = NULL;
        assert_int_equal(buildctx_new(BUILDCTX_LAYERS, NULL, &c), 0);
        assert_int_equal(buildctx_feed_fd(c, fd, err), 0);
        assert_int_equal(buildctx_feed_mem(c, bad.data, bad.len, err), -EBADMSG);
        assert_non_null(strstr(err, "image layer 2: '../x' climbs out"));
        assert_int_equal(buildctx_feed_mem(c, good.data, good.len, err), -EBADMSG);
        assert_non_null(strstr(err, "an earlier archive was refused"));
        buildctx_free(c);
        close(fd);
        tar_free(&bad);
        tar_free(&good);
}

/* Layers keep what images have, and refuse what escapes. */
static void test_layers(void **state) {
        (void) state;
        char err[BUILDCTX_ERR_MAX];
        struct tar l1 = { 0 }, l2 = { 0 };
        header(&l1, "etc/", '5', 0755, 0, NULL);
        file(&l1, "etc/passwd", "root:x:0:0::/root:/bin/sh\n");
        header(&l1, "usr/bin/", '5', 0755, 0, NULL);
        header(&l1, "usr/bin/passwd", '0', 04755, 0, NULL);           /* setuid: an image has them */
        header(&l1, "usr/bin/python", '2', 0777, 0, "/usr/bin/python3"); /* absolute: inside the image */
        header(&l1, "lib", '2', 0777, 0, "usr/lib");
        header(&l1, "run/initctl", '6', 0600, 0, NULL);
        header(&l1, "tmp/", '5', 01777, 0, NULL);
        end(&l1);
        header(&l2, "etc/.wh.passwd", '0', 0644, 0, NULL);
        header(&l2, "usr/bin/.wh..wh..opq", '0', 0644, 0, NULL);
        header(&l2, "usr/bin/pw", '1', 0755, 0, "usr/bin/passwd"); /* to a lower layer's file */
        header(&l2, ".wh.lib", '0', 0644, 0, NULL);
        header(&l2, "lib/", '5', 0755, 0, NULL); /* a directory now: entries under it are fine */
        file(&l2, "lib/libx.so", "x");
        end(&l2);
        struct buildctx *c = NULL;
        assert_int_equal(buildctx_new(BUILDCTX_LAYERS, NULL, &c), 0);
        if (buildctx_feed_mem(c, l1.data, l1.len, err) < 0 || buildctx_feed_mem(c, l2.data, l2.len, err) < 0)
                fail_msg("refused: %s", err);
        assert_false(buildctx_has(c, "etc/passwd"));
        assert_true(buildctx_has(c, "lib/libx.so"));
        buildctx_free(c);

        static const struct {
                const char *name;
                char type;
                const char *link;
                const char *why;
        } cases[] = {
                { "../x", '0', NULL, "image layer 2: '../x' climbs out ('..')" },
                { "/etc/x", '0', NULL, "image layer 2: '/etc/x' is an absolute path" },
                { "lib/x.so", '0', NULL, "image layer 2: 'lib/x.so' goes through the symbolic link 'lib'" },
                { "etc/.wh..", '0', NULL, "'etc/.wh..' whites out '.', which is no name in its directory" },
                { "etc/.wh...", '0', NULL, "'etc/.wh...' whites out '..', which is no name" },
                { ".wh.", '0', NULL, "'.wh.' whites out ''" },
                { "etc/.wh..wh.plnk", '0', NULL, "'etc/.wh..wh.plnk' is an unknown whiteout marker" },
                { "etc/.wh.x", '5', NULL, "'etc/.wh.x' is a whiteout that is a directory" },
                { "dev/tty", '3', NULL, "'dev/tty' is a character device" },
                { "dev/sda", '4', NULL, "'dev/sda' is a block device" },
                { "x", '1', "/etc/shadow", "'x' is a hard link to '/etc/shadow', outside the image" },
                { "x", '1', "nothing", "'x' is a hard link to 'nothing', which is no file among the entries" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                struct tar t = { 0 };
                header(&t, cases[i].name, cases[i].type, 0644, 0, cases[i].link);
                end(&t);
                assert_int_equal(buildctx_new(BUILDCTX_LAYERS, NULL, &c), 0);
                assert_int_equal(buildctx_feed_mem(c, l1.data, l1.len, err), 0);
                int r = buildctx_feed_mem(c, t.data, t.len, err);
                if (r != -EBADMSG || !strstr(err, cases[i].why))
                        fail_msg("%s: expected '%s', got %d: %s", cases[i].name, cases[i].why, r, err);
                buildctx_free(c);
                tar_free(&t);
        }
        /* a directory that becomes a link within one layer */
        struct tar t = { 0 };
        file(&t, "a/b", "x");
        header(&t, "a", '2', 0777, 0, "/");
        end(&t);
        assert_int_equal(check(BUILDCTX_LAYERS, NULL, &t, err), -EBADMSG);
        assert_non_null(strstr(err, "'a' appears twice: as a directory, then as a symbolic link"));
        tar_free(&t);
        tar_free(&l1);
        tar_free(&l2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_real_context_passes),
                cmocka_unit_test(test_hostile_entries_are_refused),
                cmocka_unit_test(test_a_file_through_a_link_is_refused),
                cmocka_unit_test(test_limits),
                cmocka_unit_test(test_a_huge_sparse_file_is_refused),
                cmocka_unit_test(test_a_decompression_bomb_is_refused),
                cmocka_unit_test(test_not_a_tar),
                cmocka_unit_test(test_refusal_sticks_and_fd_reads),
                cmocka_unit_test(test_layers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
