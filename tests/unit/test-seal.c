/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/seal: round trips (sizes around a chunk, sparse files), the writer's
 * random access (any slicing, several threads), the streaming reader fed in
 * any pieces, the ranged API, and refusals: every tampering, truncation,
 * extension, wrong key and out-of-bounds header is -EBADMSG, with nothing
 * unverified written, and each against its control (the untampered object
 * decodes).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <sodium.h>

#include "macros.h"
#include "seal.h"
#include "unit-skip.h"
#include "util.h"

#define CS SEAL_CHUNK_MIN /* small chunks: many of them in little data */

struct fixture {
        char dir[64];
        uint8_t key[SEAL_KEY_SIZE], key2[SEAL_KEY_SIZE];
        unsigned files;
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        strcpy(f->dir, "/tmp/test-seal-XXXXXX");
        if (!mkdtemp(f->dir) || sodium_init() < 0)
                return -1;
        randombytes_buf(f->key, sizeof f->key);
        randombytes_buf(f->key2, sizeof f->key2);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        rm_rf(f->dir);
        free(f);
        return 0;
}

static uint64_t rng(uint64_t *x) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        return *x;
}

/* Bytes that are never zero, so that no 4 KiB of them is. */
static void fill(uint8_t *p, size_t n, uint64_t seed) {
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t) (rng(&x) | 1);
}

/* A new empty file in the fixture's directory, open read-write. */
static int new_file(struct fixture *f) {
        _cleanup_free_ char *p = strdup_printf("%s/f%u", f->dir, f->files++);
        assert_non_null(p);
        int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        return fd;
}

/* A file of size bytes, holes all over, the given data written into it. */
static int plain_file(struct fixture *f, uint64_t size) {
        int fd = new_file(f);
        assert_int_equal(ftruncate(fd, (off_t) size), 0);
        return fd;
}

static void put(int fd, uint64_t off, const void *p, size_t n) {
        assert_int_equal(pwrite(fd, p, n, (off_t) off), (ssize_t) n);
}

static void put_random(int fd, uint64_t off, size_t n, uint64_t seed) {
        _cleanup_free_ uint8_t *b = malloc(n ? n : 1);
        assert_non_null(b);
        fill(b, n, seed);
        put(fd, off, b, n);
}

static void put_zeros(int fd, uint64_t off, size_t n) {
        _cleanup_free_ uint8_t *b = calloc(1, n ? n : 1);
        assert_non_null(b);
        put(fd, off, b, n);
}

/* All of fd's bytes. */
static uint8_t *slurp(int fd, size_t *ret_len) {
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        uint8_t *b = malloc((size_t) st.st_size + 1);
        assert_non_null(b);
        assert_int_equal(pread(fd, b, (size_t) st.st_size, 0), st.st_size);
        *ret_len = (size_t) st.st_size;
        return b;
}

/* The whole sealed object of fd, in one read_at. */
static uint8_t *seal_all(int fd, const uint8_t *key, uint32_t cs, size_t *ret_len) {
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(fd, key, cs, &w), 0);
        size_t len = (size_t) seal_writer_size(w);
        uint8_t *obj = malloc(len + 1);
        assert_non_null(obj);
        assert_int_equal(seal_writer_read_at(w, 0, obj, len), 0);
        *ret_len = len;
        return obj;
}

enum { PIECE_WHOLE = 0, PIECE_RANDOM = -1 };

/* Decodes obj into *ret_out (a new file, left open for inspection) fed in
 * pieces of piece bytes (PIECE_WHOLE: one; PIECE_RANDOM: 1 to 3 records'
 * worth at random); returns the first error of feed or finish. */
static int unseal(struct fixture *f, const uint8_t *key, const uint8_t *obj, size_t len, int piece,
                  int *ret_out) {
        int out = new_file(f);
        _cleanup_(seal_reader_freep) struct seal_reader *r = NULL;
        assert_int_equal(seal_reader_new(key, out, &r), 0);
        uint64_t x = len + 12345;
        int e = 0;
        for (size_t at = 0; at < len && e == 0;) {
                size_t k = piece == PIECE_WHOLE    ? len
                           : piece == PIECE_RANDOM ? 1 + rng(&x) % (3 * CS)
                                                   : (size_t) piece;
                k = MIN(k, len - at);
                e = seal_reader_feed(r, obj + at, k);
                at += k;
        }
        if (e == 0)
                e = seal_reader_finish(r);
        else
                assert_int_equal(seal_reader_finish(r), e); /* sticky */
        *ret_out = out;
        return e;
}

/* out holds exactly the plaintext. */
static void assert_same(int out, const uint8_t *plain, size_t plain_len) {
        size_t n;
        _cleanup_free_ uint8_t *got = slurp(out, &n);
        assert_int_equal(n, plain_len);
        assert_memory_equal(got, plain, plain_len);
}

/* out holds at most max bytes, and what it holds is the plaintext's
 * beginning: nothing unverified was written. */
static void assert_verified_prefix(int out, const uint8_t *plain, size_t max) {
        size_t n;
        _cleanup_free_ uint8_t *got = slurp(out, &n);
        assert_true(n <= max);
        if (n > 0)
                assert_memory_equal(got, plain, n);
}

/* Round trip of fd (whose bytes are plain) through seal and unseal. */
static void roundtrip(struct fixture *f, int fd, uint32_t cs, int piece) {
        size_t plen, olen;
        _cleanup_free_ uint8_t *plain = slurp(fd, &plen);
        _cleanup_free_ uint8_t *obj = seal_all(fd, f->key, cs, &olen);
        _cleanup_close_ int out = -1;
        assert_int_equal(unseal(f, f->key, obj, olen, piece, &out), 0);
        assert_same(out, plain, plen);
}

static void test_sizes(void **state) {
        struct fixture *f = *state;
        const uint32_t css[] = { CS, SEAL_CHUNK_DEFAULT };
        for (size_t c = 0; c < ARRAY_SIZE(css); c++) {
                uint32_t cs = css[c];
                const uint64_t sizes[] = { 0, 1, cs - 1, cs, cs + 1, 5 * (uint64_t) cs + 17 };
                for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                        uint64_t size = sizes[i], n = (size + cs - 1) / cs;
                        _cleanup_close_ int fd = plain_file(f, size);
                        put_random(fd, 0, size, i);
                        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
                        assert_int_equal(seal_writer_new(fd, f->key, c == 0 ? cs : 0, &w), 0);
                        uint64_t header_len = SEAL_HEADER_FIXED + (n + 7) / 8 + SEAL_TAG_SIZE;
                        assert_int_equal(seal_writer_chunks(w), n);
                        assert_int_equal(seal_writer_stored_chunks(w), n);
                        assert_int_equal(seal_writer_size(w), header_len + size + n * SEAL_TAG_SIZE);
                        roundtrip(f, fd, cs, PIECE_WHOLE);
                }
        }
}

/* 21 chunks of 64 KiB (the last 123 bytes): data, holes, zeros written as
 * data, a chunk with one byte set, and the file's very last byte set. */
#define SP_CHUNKS 21
#define SP_SIZE (20 * (uint64_t) SEAL_CHUNK_DEFAULT + 123)
static int sparse_file(struct fixture *f) {
        const uint64_t cs = SEAL_CHUNK_DEFAULT;
        int fd = plain_file(f, SP_SIZE);
        put_random(fd, 0, cs, 1);                   /* chunk 0 */
        put_zeros(fd, 5 * cs, 2 * cs);              /* chunks 5, 6: zeros, not holes */
        put_zeros(fd, 7 * cs, cs);                  /* chunk 7: zeros and one byte */
        put(fd, 7 * cs + 777, "\x42", 1);
        put_zeros(fd, 19 * cs, cs);                 /* chunk 19: zeros */
        put(fd, SP_SIZE - 1, "\x01", 1);            /* chunk 20: its last byte */
        return fd;                                  /* the rest: holes */
}

static void test_sparse(void **state) {
        struct fixture *f = *state;
        const uint64_t cs = SEAL_CHUNK_DEFAULT;
        _cleanup_close_ int fd = sparse_file(f);
        size_t plen, olen;
        _cleanup_free_ uint8_t *plain = slurp(fd, &plen);
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(fd, f->key, 0, &w), 0);
        assert_int_equal(seal_writer_chunks(w), SP_CHUNKS);
        assert_int_equal(seal_writer_stored_chunks(w), 3); /* 0, 7, 20 */
        uint64_t header_len = SEAL_HEADER_FIXED + 3 + SEAL_TAG_SIZE;
        assert_int_equal(seal_writer_size(w), header_len + 2 * (cs + SEAL_TAG_SIZE) + 123 + SEAL_TAG_SIZE);
        _cleanup_free_ uint8_t *obj = seal_all(fd, f->key, 0, &olen);

        _cleanup_(seal_header_freep) struct seal_header *h = NULL;
        assert_int_equal(seal_header_parse(f->key, obj, olen, NULL, &h), 0);
        for (uint64_t c = 0; c < SP_CHUNKS; c++) {
                uint64_t off;
                uint32_t len;
                bool hole;
                assert_int_equal(seal_chunk_locate(h, c, &off, &len, &hole), 0);
                assert_int_equal(hole, !(c == 0 || c == 7 || c == 20));
                if (c == 7)
                        assert_int_equal(off, header_len + cs + SEAL_TAG_SIZE);
                if (c == 20)
                        assert_int_equal(len, 123 + SEAL_TAG_SIZE);
        }

        const int pieces[] = { PIECE_WHOLE, 1, PIECE_RANDOM };
        for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
                _cleanup_close_ int out = -1;
                assert_int_equal(unseal(f, f->key, obj, olen, pieces[i], &out), 0);
                assert_same(out, plain, plen);
                /* allocated: chunk 0 (64 KiB) and one 4 KiB block each of
                 * chunks 7 and 20; a little slack for the file system */
                struct stat st;
                assert_int_equal(fstat(out, &st), 0);
                assert_true((uint64_t) st.st_blocks * 512 <= cs + 2 * 4096 + 16384);
        }
}

/* The sealed object of a file of 9 chunks of CS (chunk 3 a hole, chunk 6
 * zeros, the last 100 bytes). */
struct sample {
        int fd;
        uint8_t *plain, *obj;
        size_t plain_len, len;
        uint32_t header_len;
        uint64_t rec[9]; /* chunk -> record offset (0: a hole) */
};
#define SAMPLE_SIZE (8 * (uint64_t) CS + 100)

static void sample_make(struct fixture *f, struct sample *s, const uint8_t *key) {
        s->fd = plain_file(f, SAMPLE_SIZE);
        put_random(s->fd, 0, 3 * CS, 7);
        put_random(s->fd, 4 * CS, 2 * CS, 8);
        put_zeros(s->fd, 6 * CS, CS);
        put_random(s->fd, 7 * CS, CS + 100, 9);
        s->plain = slurp(s->fd, &s->plain_len);
        s->obj = seal_all(s->fd, key, CS, &s->len);
        _cleanup_(seal_header_freep) struct seal_header *h = NULL;
        assert_int_equal(seal_header_parse(key, s->obj, s->len, NULL, &h), 0);
        s->header_len = seal_header_size(h);
        for (uint64_t c = 0; c < 9; c++)
                assert_int_equal(seal_chunk_locate(h, c, &s->rec[c], NULL, NULL), 0);
        assert_int_equal(s->rec[3], 0);
        assert_int_equal(s->rec[6], 0);
}

static void sample_done(struct sample *s) {
        free(s->plain);
        free(s->obj);
        safe_close(s->fd);
}

/* The control: s decodes as it is, whole and in pieces. */
static void sample_control(struct fixture *f, const struct sample *s, const uint8_t *key) {
        for (int piece = PIECE_RANDOM; piece <= 1; piece++) {
                _cleanup_close_ int out = -1;
                assert_int_equal(unseal(f, key, s->obj, s->len, piece, &out), 0);
                assert_same(out, s->plain, s->plain_len);
        }
}

/* obj (a tampered copy of s's) is refused, whole and byte by byte, and
 * at most max bytes of verified plaintext were written. */
static void refused(struct fixture *f, const struct sample *s, const uint8_t *obj, size_t len, size_t max) {
        const int pieces[] = { PIECE_WHOLE, 1, PIECE_RANDOM };
        for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
                _cleanup_close_ int out = -1;
                assert_int_equal(unseal(f, f->key, obj, len, pieces[i], &out), -EBADMSG);
                assert_verified_prefix(out, s->plain, max);
        }
}

struct slice_job {
        struct seal_writer *w;
        const uint8_t *whole;
        size_t len;
        uint64_t seed;
        unsigned bad;
};

static void *slice_thread(void *arg) {
        struct slice_job *j = arg;
        uint64_t x = j->seed;
        uint8_t *buf = malloc(j->len);
        if (!buf) {
                j->bad++;
                return NULL;
        }
        for (int i = 0; i < 2000; i++) {
                uint64_t off = rng(&x) % j->len;
                size_t n = 1 + rng(&x) % MIN(j->len - off, 3 * (uint64_t) CS);
                if (seal_writer_read_at(j->w, off, buf, n) < 0 || memcmp(buf, j->whole + off, n) != 0)
                        j->bad++;
        }
        free(buf);
        return NULL;
}

static void test_read_at(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(s.fd, f->key, CS, &w), 0);
        size_t len = (size_t) seal_writer_size(w);
        _cleanup_free_ uint8_t *whole = malloc(len), *buf = malloc(len);
        assert_non_null(whole);
        assert_non_null(buf);
        assert_int_equal(seal_writer_read_at(w, 0, whole, len), 0);

        /* every single byte */
        for (size_t off = 0; off < len; off++) {
                assert_int_equal(seal_writer_read_at(w, off, buf, 1), 0);
                assert_int_equal(buf[0], whole[off]);
        }
        /* ranges that start and end a few bytes around every boundary: the
         * header's end and each record's */
        uint64_t marks[16];
        size_t nm = 0;
        marks[nm++] = 0;
        marks[nm++] = s.header_len;
        for (size_t c = 0; c < 9; c++)
                if (s.rec[c])
                        marks[nm++] = s.rec[c] + MIN((uint64_t) CS + SEAL_TAG_SIZE, s.len - s.rec[c]);
        for (size_t a = 0; a < nm; a++)
                for (size_t b = a; b < nm; b++)
                        for (int da = -3; da <= 3; da++)
                                for (int db = -3; db <= 3; db++) {
                                        int64_t from = (int64_t) marks[a] + da, to = (int64_t) marks[b] + db;
                                        if (from < 0 || to > (int64_t) len || to < from)
                                                continue;
                                        assert_int_equal(seal_writer_read_at(w, (uint64_t) from, buf,
                                                                             (size_t) (to - from)), 0);
                                        assert_memory_equal(buf, whole + from, (size_t) (to - from));
                                }
        /* random slicings of the whole object, read in order */
        uint64_t x = 99;
        for (int round = 0; round < 50; round++) {
                memset(buf, 0, len);
                for (size_t at = 0; at < len;) {
                        size_t k = 1 + rng(&x) % (round % 2 ? 64 : 3 * CS);
                        k = MIN(k, len - at);
                        assert_int_equal(seal_writer_read_at(w, at, buf + at, k), 0);
                        at += k;
                }
                assert_memory_equal(buf, whole, len);
        }
        /* from several threads at once */
        struct slice_job jobs[4];
        pthread_t t[4];
        for (size_t i = 0; i < 4; i++) {
                jobs[i] = (struct slice_job) { .w = w, .whole = whole, .len = len, .seed = i + 1 };
                assert_int_equal(pthread_create(&t[i], NULL, slice_thread, &jobs[i]), 0);
        }
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(pthread_join(t[i], NULL), 0);
                assert_int_equal(jobs[i].bad, 0);
        }
        /* bounds */
        assert_int_equal(seal_writer_read_at(w, len, buf, 0), 0);
        assert_int_equal(seal_writer_read_at(w, len, buf, 1), -EINVAL);
        assert_int_equal(seal_writer_read_at(w, 1, buf, len), -EINVAL);
        assert_int_equal(seal_writer_read_at(w, UINT64_MAX, buf, 2), -EINVAL);
        /* what it read is what the reader takes */
        _cleanup_close_ int out = -1;
        assert_int_equal(unseal(f, f->key, whole, len, PIECE_RANDOM, &out), 0);
        assert_same(out, s.plain, s.plain_len);
        sample_done(&s);
}

static void test_reader_pieces(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        const int pieces[] = {1,           2, 7, 16, 17, CS - 1, CS + SEAL_TAG_SIZE, CS + SEAL_TAG_SIZE + 1,
                              PIECE_RANDOM};
        for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
                _cleanup_close_ int out = -1;
                assert_int_equal(unseal(f, f->key, s.obj, s.len, pieces[i], &out), 0);
                assert_same(out, s.plain, s.plain_len);
        }
        /* the fixtures of the sparse test too, byte by byte */
        _cleanup_close_ int fd = sparse_file(f);
        roundtrip(f, fd, CS, 1);
        roundtrip(f, fd, 0, PIECE_RANDOM);
        sample_done(&s);
}

static void test_reader_misuse(void **state) {
        struct fixture *f = *state;
        _cleanup_close_ int full = plain_file(f, 1);
        struct seal_reader *r = NULL;
        assert_int_equal(seal_reader_new(f->key, full, &r), -EINVAL); /* not empty */
        assert_null(r);
        _cleanup_close_ int dir = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dir >= 0);
        assert_int_equal(seal_reader_new(f->key, dir, &r), -EINVAL);
        struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(dir, f->key, 0, &w), -EINVAL);
        assert_int_equal(seal_writer_new(full, f->key, 4095, &w), -EINVAL);
        assert_int_equal(seal_writer_new(full, f->key, 3 * 4096, &w), -EINVAL);
        assert_int_equal(seal_writer_new(full, f->key, SEAL_CHUNK_MAX * 2, &w), -EINVAL);
        assert_null(w);
        /* nothing fed: cut short */
        _cleanup_close_ int out = new_file(f);
        assert_int_equal(seal_reader_new(f->key, out, &r), 0);
        assert_int_equal(seal_reader_finish(r), -EBADMSG);
        seal_reader_free(r);
        seal_reader_free(NULL);
        seal_writer_free(NULL);
        seal_header_free(NULL);
}

/* Files the writer cannot describe, made sparse: never read. */
static void test_writer_limits(void **state) {
        struct fixture *f = *state;
        struct seal_writer *w = NULL;
        _cleanup_close_ int huge = plain_file(f, SEAL_PLAIN_MAX + 1);
        assert_int_equal(seal_writer_new(huge, f->key, SEAL_CHUNK_MAX, &w), -EFBIG);
        /* 200 GiB in 4 KiB chunks: a 6.25 MiB bitmap */
        _cleanup_close_ int big = plain_file(f, UINT64_C(200) << 30);
        assert_int_equal(seal_writer_new(big, f->key, SEAL_CHUNK_MIN, &w), -EFBIG);
        assert_null(w);
        /* the largest size 4 KiB chunks allow, and one chunk more */
        uint64_t max_chunks = (uint64_t) (SEAL_HEADER_MAX - SEAL_HEADER_FIXED - SEAL_TAG_SIZE) * 8;
        assert_int_equal(ftruncate(big, (off_t) (max_chunks * SEAL_CHUNK_MIN)), 0);
        assert_int_equal(seal_writer_new(big, f->key, SEAL_CHUNK_MIN, &w), 0);
        assert_int_equal(seal_writer_chunks(w), max_chunks);
        assert_int_equal(seal_writer_stored_chunks(w), 0);
        seal_writer_free(w);
        w = NULL;
        assert_int_equal(ftruncate(big, (off_t) (max_chunks * SEAL_CHUNK_MIN + 1)), 0);
        assert_int_equal(seal_writer_new(big, f->key, SEAL_CHUNK_MIN, &w), -EFBIG);
}

/* 1M chunks of 4 KiB (4 GiB, sparse), 500 scattered runs with data: the
 * rank table and the bitmap walk against a plain count. */
static void test_big_sparse(void **state) {
        struct fixture *f = *state;
        const uint64_t n = UINT64_C(1) << 20;
        _cleanup_close_ int fd = plain_file(f, n * CS);
        _cleanup_free_ uint8_t *set = calloc(1, n);
        assert_non_null(set);
        uint64_t x = 4242;
        set[0] = set[n - 1] = 1;
        put(fd, 0, "\x01", 1);
        put(fd, n * CS - 1, "\x01", 1);
        for (int i = 0; i < 500; i++) {
                /* runs of 1..40 neighbours, so whole words and blocks fill */
                uint64_t c = rng(&x) % n, run = 1 + rng(&x) % 40;
                for (uint64_t k = c; k < MIN(n, c + run); k++) {
                        set[k] = 1;
                        put(fd, k * CS + rng(&x) % CS, "\x07", 1);
                }
        }
        uint64_t t0 = now_monotonic_ns();
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(fd, f->key, CS, &w), 0);
        uint64_t t1 = now_monotonic_ns();
        uint64_t stored = 0;
        for (uint64_t c = 0; c < n; c++)
                stored += set[c];
        assert_int_equal(seal_writer_stored_chunks(w), stored);
        uint64_t header_len = SEAL_HEADER_FIXED + n / 8 + SEAL_TAG_SIZE;
        _cleanup_free_ uint8_t *hdr = malloc(header_len);
        assert_non_null(hdr);
        assert_int_equal(seal_writer_read_at(w, 0, hdr, header_len), 0);
        _cleanup_(seal_header_freep) struct seal_header *h = NULL;
        size_t need = 0;
        assert_int_equal(seal_header_parse(f->key, hdr, 100, &need, &h), -EAGAIN);
        assert_int_equal(need, header_len);
        assert_int_equal(seal_header_parse(f->key, hdr, header_len, NULL, &h), 0);

        uint64_t t2 = now_monotonic_ns();
        uint64_t rank = 0;
        for (uint64_t c = 0; c < n; c++) {
                uint64_t off;
                bool hole;
                assert_int_equal(seal_chunk_locate(h, c, &off, NULL, &hole), 0);
                assert_int_equal(hole, !set[c]);
                if (set[c])
                        assert_int_equal(off, header_len + rank++ * (CS + SEAL_TAG_SIZE));
        }
        uint64_t t3 = now_monotonic_ns();
        printf("1M chunks: writer scan %.1f ms, locate %.0f ns each\n", (double) (t1 - t0) / 1e6,
               (double) (t3 - t2) / (double) n);
        /* records read one by one at their offsets (the writer's select)
         * open as the chunk their offset names */
        _cleanup_free_ uint8_t *rec = malloc(CS + SEAL_TAG_SIZE), *plain = malloc(CS);
        assert_non_null(rec);
        assert_non_null(plain);
        for (int i = 0; i < 300; i++) {
                uint64_t c;
                do
                        c = rng(&x) % n;
                while (!set[c]);
                uint64_t off;
                uint32_t len;
                assert_int_equal(seal_chunk_locate(h, c, &off, &len, NULL), 0);
                assert_int_equal(seal_writer_read_at(w, off, rec, len), 0);
                assert_int_equal(seal_chunk_open(h, c, rec, len, plain), 0);
        }
}

static void test_ranged(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        struct seal_header *h = NULL;
        size_t need = 0;
        assert_int_equal(seal_header_parse(f->key, s.obj, 0, &need, &h), -EAGAIN);
        assert_int_equal(need, SEAL_HEADER_FIXED);
        assert_int_equal(seal_header_parse(f->key, s.obj, SEAL_HEADER_FIXED - 1, &need, &h), -EAGAIN);
        assert_int_equal(need, SEAL_HEADER_FIXED);
        assert_int_equal(seal_header_parse(f->key, s.obj, SEAL_HEADER_FIXED, &need, &h), -EAGAIN);
        assert_int_equal(need, s.header_len);
        assert_int_equal(seal_header_parse(f->key, s.obj, s.header_len - 1, &need, &h), -EAGAIN);
        assert_null(h);
        assert_int_equal(seal_header_parse(f->key2, s.obj, s.header_len, &need, &h), -EBADMSG);
        assert_null(h);
        assert_int_equal(seal_header_parse(f->key, s.obj, s.header_len, NULL, &h), 0); /* just the header */
        assert_int_equal(seal_header_plain_size(h), SAMPLE_SIZE);
        assert_int_equal(seal_header_chunk_size(h), CS);
        assert_int_equal(seal_header_chunks(h), 9);
        assert_int_equal(seal_header_stored_chunks(h), 7);
        assert_int_equal(seal_header_object_size(h), s.len);

        uint8_t plain[CS];
        for (uint64_t c = 0; c < 9; c++) {
                uint64_t off;
                uint32_t len;
                bool hole;
                assert_int_equal(seal_chunk_locate(h, c, &off, &len, &hole), 0);
                size_t plen = c == 8 ? 100 : CS;
                assert_int_equal(hole, c == 3 || c == 6);
                assert_int_equal(len, hole ? 0 : plen + SEAL_TAG_SIZE);
                memset(plain, 0x55, sizeof plain);
                assert_int_equal(seal_chunk_open(h, c, s.obj + off, len, plain), 0);
                assert_memory_equal(plain, s.plain + c * CS, plen);
                if (hole)
                        continue;
                /* wrong length, another chunk's record, a flipped bit */
                assert_int_equal(seal_chunk_open(h, c, s.obj + off, len - 1, plain), -EBADMSG);
                uint64_t other = s.rec[c == 0 ? 1 : 0];
                if (c != 8)
                        assert_int_equal(seal_chunk_open(h, c, s.obj + other, len, plain), -EBADMSG);
                _cleanup_free_ uint8_t *bad = malloc(len);
                assert_non_null(bad);
                memcpy(bad, s.obj + off, len);
                bad[len / 2] ^= 0x10;
                memset(plain, 0x55, sizeof plain);
                assert_int_equal(seal_chunk_open(h, c, bad, len, plain), -EBADMSG);
                for (size_t i = 0; i < plen; i++)
                        assert_int_equal(plain[i], 0); /* no unverified plaintext */
        }
        assert_int_equal(seal_chunk_open(h, 3, s.obj, 5, plain), -EBADMSG); /* bytes for a hole */
        assert_int_equal(seal_chunk_locate(h, 9, NULL, NULL, NULL), -ERANGE);
        assert_int_equal(seal_chunk_open(h, 9, s.obj, 0, plain), -ERANGE);
        seal_header_free(h);
        sample_done(&s);
}

/* The header's bytes, its bitmap's bits, a chunk's ciphertext and tag. */
static void test_tamper_flip(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        _cleanup_free_ uint8_t *t = malloc(s.len);
        assert_non_null(t);
        /* every header byte (fixed fields, bitmap, tag), one bit each time */
        for (size_t i = 0; i < s.header_len; i++)
                for (int bit = 0; bit < 8; bit += 3) {
                        memcpy(t, s.obj, s.len);
                        t[i] ^= (uint8_t) (1u << bit);
                        refused(f, &s, t, s.len, 0);
                }
        /* the bitmap: a stored chunk cleared, a hole set, a padding bit */
        const size_t bm = SEAL_HEADER_FIXED;
        const unsigned bits[] = { 0, 3, 6, 8, 9, 15 };
        for (size_t i = 0; i < ARRAY_SIZE(bits); i++) {
                memcpy(t, s.obj, s.len);
                t[bm + bits[i] / 8] ^= (uint8_t) (1u << (bits[i] % 8));
                refused(f, &s, t, s.len, 0);
        }
        /* a chunk's ciphertext (first, middle, last byte) and its tag: the
         * chunks before it were verified and written, nothing from it */
        for (uint64_t c = 0; c < 9; c++) {
                if (!s.rec[c])
                        continue;
                size_t plen = c == 8 ? 100 : CS;
                const size_t at[] = { 0, plen / 2, plen - 1, plen, plen + SEAL_TAG_SIZE - 1 };
                for (size_t i = 0; i < ARRAY_SIZE(at); i++) {
                        memcpy(t, s.obj, s.len);
                        t[s.rec[c] + at[i]] ^= 0x80;
                        refused(f, &s, t, s.len, c * CS);
                }
        }
        sample_done(&s);
}

static void test_tamper_swap(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        _cleanup_free_ uint8_t *t = malloc(s.len);
        assert_non_null(t);
        const size_t rl = CS + SEAL_TAG_SIZE;
        /* neighbours, and around a hole */
        const uint64_t pairs[][2] = { { 0, 1 }, { 1, 2 }, { 2, 4 }, { 0, 7 } };
        for (size_t i = 0; i < ARRAY_SIZE(pairs); i++) {
                uint64_t a = pairs[i][0], b = pairs[i][1];
                memcpy(t, s.obj, s.len);
                memcpy(t + s.rec[a], s.obj + s.rec[b], rl);
                memcpy(t + s.rec[b], s.obj + s.rec[a], rl);
                refused(f, &s, t, s.len, a * CS);
        }
        /* a record duplicated over the next one */
        memcpy(t, s.obj, s.len);
        memcpy(t + s.rec[2], s.obj + s.rec[1], rl);
        refused(f, &s, t, s.len, 2 * CS);
        /* the first five records rotated by one */
        memcpy(t, s.obj, s.len);
        memcpy(t + s.rec[0], s.obj + s.rec[1], s.rec[7] - s.rec[1]);
        memcpy(t + s.rec[7] - rl, s.obj + s.rec[0], rl);
        refused(f, &s, t, s.len, 0);
        sample_done(&s);
}

/* The same plaintext sealed with another key, and again with the same key
 * (a fresh nonce_base): its chunks do not fit into the first object, nor
 * does its header before the first object's chunks. */
static void test_tamper_foreign(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        const uint8_t *keys[] = { f->key2, f->key };
        for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
                size_t len2;
                _cleanup_free_ uint8_t *o2 = seal_all(s.fd, keys[k], CS, &len2);
                assert_int_equal(len2, s.len);
                assert_memory_not_equal(o2, s.obj, s.len);
                /* the other object itself decodes with its key */
                _cleanup_close_ int out = -1;
                assert_int_equal(unseal(f, keys[k], o2, len2, PIECE_WHOLE, &out), 0);
                assert_same(out, s.plain, s.plain_len);
                _cleanup_free_ uint8_t *t = malloc(s.len);
                assert_non_null(t);
                for (uint64_t c = 0; c < 9; c++) {
                        if (!s.rec[c])
                                continue;
                        memcpy(t, s.obj, s.len);
                        memcpy(t + s.rec[c], o2 + s.rec[c],
                               c == 8 ? 100 + SEAL_TAG_SIZE : CS + SEAL_TAG_SIZE);
                        refused(f, &s, t, s.len, c * CS);
                }
                /* its header in front of our chunks: the first chunk fails
                 * (another key: the header already) */
                memcpy(t, s.obj, s.len);
                memcpy(t, o2, s.header_len);
                if (keys[k] == f->key) {
                        _cleanup_close_ int out2 = -1;
                        assert_int_equal(unseal(f, f->key, t, s.len, PIECE_WHOLE, &out2), -EBADMSG);
                        assert_verified_prefix(out2, s.plain, 0);
                } else
                        refused(f, &s, t, s.len, 0);
        }
        sample_done(&s);
}

/* A reader told the nonce_base to expect opens the object sealed with it
 * and refuses, before writing a byte, the same plaintext sealed with
 * another: the nonce names the content the sealer meant. */
static void test_expected_nonce(void **state) {
        struct fixture *f = *state;
        int fd = plain_file(f, 5 * CS + 77);
        put_random(fd, 0, 5 * CS + 77, 42);
        uint8_t nonce[SEAL_NONCE_BASE_SIZE], other[SEAL_NONCE_BASE_SIZE];
        memset(nonce, 0xa5, sizeof nonce);
        memset(other, 0x5a, sizeof other);
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new_nonce(fd, f->key, CS, nonce, &w), 0);
        size_t len = (size_t) seal_writer_size(w);
        _cleanup_free_ uint8_t *obj = malloc(len);
        assert_non_null(obj);
        assert_int_equal(seal_writer_read_at(w, 0, obj, len), 0);
        const uint8_t *want[] = { nonce, other };
        for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
                _cleanup_close_ int out = new_file(f);
                _cleanup_(seal_reader_freep) struct seal_reader *r = NULL;
                assert_int_equal(seal_reader_new(f->key, out, &r), 0);
                seal_reader_expect_nonce(r, want[i]);
                int e = seal_reader_feed(r, obj, len);
                if (e == 0)
                        e = seal_reader_finish(r);
                assert_int_equal(e, i == 0 ? 0 : -EBADMSG);
                struct stat st;
                assert_int_equal(fstat(out, &st), 0);
                assert_int_equal(st.st_size, i == 0 ? (off_t) (5 * CS + 77) : 0);
        }
        close(fd);
}

static void test_truncated(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        /* a cut in every region: every length in the header, around each
         * record's start and tag, and every 61st byte; feed succeeds,
         * finish refuses, and what was written is the verified records
         * before the cut */
        _cleanup_close_ int out = new_file(f);
        for (size_t cut = 0; cut < s.len; cut++) {
                bool near = cut < s.header_len + 20 || cut % 61 == 0 || cut + 20 > s.len;
                for (uint64_t c = 0; c < 9; c++)
                        if (s.rec[c] && (cut + 20 > s.rec[c] + MIN(CS, s.len - s.rec[c] - SEAL_TAG_SIZE) &&
                                         cut < s.rec[c] + CS + SEAL_TAG_SIZE + 20))
                                near = true;
                if (!near)
                        continue;
                assert_int_equal(ftruncate(out, 0), 0);
                _cleanup_(seal_reader_freep) struct seal_reader *r = NULL;
                assert_int_equal(seal_reader_new(f->key, out, &r), 0);
                assert_int_equal(seal_reader_feed(r, s.obj, cut), 0);
                assert_int_equal(seal_reader_finish(r), -EBADMSG);
                assert_int_equal(seal_reader_feed(r, s.obj + cut, 1), -EBADMSG); /* sticky */
                /* the end of the plaintext of the last whole record */
                size_t max = 0;
                for (uint64_t c = 0; c < 9; c++) {
                        size_t plen = c == 8 ? 100 : CS;
                        if (s.rec[c] && s.rec[c] + plen + SEAL_TAG_SIZE <= cut)
                                max = c * CS + plen;
                }
                assert_verified_prefix(out, s.plain, max);
        }
        sample_done(&s);
}

static void test_extended(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        _cleanup_free_ uint8_t *t = malloc(s.len + CS + SEAL_TAG_SIZE);
        assert_non_null(t);
        memcpy(t, s.obj, s.len);
        const size_t extra[] = { 1, 16, CS + SEAL_TAG_SIZE };
        for (size_t i = 0; i < ARRAY_SIZE(extra); i++) {
                memset(t + s.len, 0, extra[i]);
                if (i == 2)
                        memcpy(t + s.len, s.obj + s.rec[0], extra[i]); /* a whole record again */
                refused(f, &s, t, s.len + extra[i], s.plain_len);
        }
        /* the extra byte in a feed of its own, after a complete object */
        _cleanup_close_ int out = new_file(f);
        _cleanup_(seal_reader_freep) struct seal_reader *r = NULL;
        assert_int_equal(seal_reader_new(f->key, out, &r), 0);
        assert_int_equal(seal_reader_feed(r, s.obj, s.len), 0);
        assert_int_equal(seal_reader_feed(r, "", 1), -EBADMSG);
        assert_int_equal(seal_reader_finish(r), -EBADMSG);
        /* an empty artifact and one byte more */
        _cleanup_close_ int empty = plain_file(f, 0);
        size_t elen;
        _cleanup_free_ uint8_t *eobj = seal_all(empty, f->key, 0, &elen);
        assert_int_equal(elen, SEAL_HEADER_FIXED + SEAL_TAG_SIZE);
        _cleanup_close_ int out2 = -1;
        assert_int_equal(unseal(f, f->key, eobj, elen, PIECE_WHOLE, &out2), 0);
        eobj[elen] = 0;
        _cleanup_close_ int out3 = -1;
        assert_int_equal(unseal(f, f->key, eobj, elen + 1, PIECE_WHOLE, &out3), -EBADMSG);
        sample_done(&s);
}

static void test_wrong_key(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        _cleanup_close_ int out = -1;
        assert_int_equal(unseal(f, f->key2, s.obj, s.len, PIECE_WHOLE, &out), -EBADMSG);
        assert_verified_prefix(out, s.plain, 0);
        uint8_t k[SEAL_KEY_SIZE];
        memcpy(k, f->key, sizeof k);
        k[31] ^= 1;
        _cleanup_close_ int out2 = -1;
        assert_int_equal(unseal(f, k, s.obj, s.len, 1, &out2), -EBADMSG);
        assert_verified_prefix(out2, s.plain, 0);
        sample_done(&s);
}

/* A fixed header part with the given fields. */
static void fixed(uint8_t p[SEAL_HEADER_FIXED], uint32_t header_len, uint32_t cs, uint64_t plain_size) {
        memcpy(p, "ALKSEAL1", 8);
        for (int i = 0; i < 4; i++) {
                p[8 + i] = (uint8_t) (header_len >> (8 * i));
                p[12 + i] = (uint8_t) (cs >> (8 * i));
        }
        for (int i = 0; i < 8; i++)
                p[16 + i] = (uint8_t) (plain_size >> (8 * i));
        memset(p + 24, 0xab, SEAL_NONCE_BASE_SIZE);
}

static uint32_t hlen(uint64_t plain_size, uint32_t cs) {
        uint64_t n = (plain_size + cs - 1) / cs;
        return (uint32_t) (SEAL_HEADER_FIXED + (n + 7) / 8 + SEAL_TAG_SIZE);
}

/* Out-of-bounds fields are refused from the 40 fixed bytes alone: parse
 * says -EBADMSG, not -EAGAIN (it would ask for, and a reader allocate,
 * header_len bytes); the reader refuses at its 40th byte. */
static void test_bounds(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        sample_control(f, &s, f->key);
        const struct {
                uint32_t header_len, cs;
                uint64_t plain_size;
        } bad[] = {
                {UINT32_MAX, CS, 1000}, /* absurd header_len */
                {SEAL_HEADER_MAX + 1, CS, 1000},
                {hlen(1000, CS) + 1, CS, 1000}, /* inconsistent */
                {hlen(1000, CS) - 1, CS, 1000},
                {0, CS, 1000},
                {hlen(1000, CS), 0, 1000}, /* chunk sizes */
                {hlen(1000, 2048), 2048, 1000},
                {hlen(1000, 3 * 4096), 3 * 4096, 1000},
                {hlen(1000, 4097), 4097, 1000},
                {hlen(1000, SEAL_CHUNK_MAX * 2), SEAL_CHUNK_MAX * 2, 1000},
                {hlen(1000, UINT32_C(1) << 31), UINT32_C(1) << 31, 1000},
                {hlen(SEAL_PLAIN_MAX + 1, SEAL_CHUNK_MAX), SEAL_CHUNK_MAX,
                 SEAL_PLAIN_MAX + 1}, /* plain_size */
                {hlen(UINT64_MAX / 2, SEAL_CHUNK_MAX), SEAL_CHUNK_MAX, UINT64_MAX / 2},
                {0, SEAL_CHUNK_MAX, UINT64_MAX},
                {hlen(SEAL_PLAIN_MAX, CS), CS, SEAL_PLAIN_MAX}, /* bitmap over the max */
        };
        uint8_t p[SEAL_HEADER_FIXED];
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                fixed(p, bad[i].header_len, bad[i].cs, bad[i].plain_size);
                struct seal_header *h = NULL;
                size_t need = 7;
                assert_int_equal(seal_header_parse(f->key, p, sizeof p, &need, &h), -EBADMSG);
                assert_int_equal(need, 7);
                assert_null(h);
                _cleanup_close_ int out = new_file(f);
                _cleanup_(seal_reader_freep) struct seal_reader *r = NULL;
                assert_int_equal(seal_reader_new(f->key, out, &r), 0);
                assert_int_equal(seal_reader_feed(r, p, sizeof p - 1), 0);
                assert_int_equal(seal_reader_feed(r, p + sizeof p - 1, 1), -EBADMSG);
        }
        /* the magic */
        fixed(p, hlen(1000, CS), CS, 1000);
        struct seal_header *h = NULL;
        size_t need = 0;
        assert_int_equal(seal_header_parse(f->key, p, sizeof p, &need, &h),
                         -EAGAIN); /* sane: asks for the rest */
        assert_int_equal(need, hlen(1000, CS));
        p[7] = '2';
        assert_int_equal(seal_header_parse(f->key, p, sizeof p, &need, &h), -EBADMSG);
        /* the largest sane header is asked for, and refused by its tag */
        uint64_t max_plain = (uint64_t) (SEAL_HEADER_MAX - SEAL_HEADER_FIXED - SEAL_TAG_SIZE) * 8 * CS;
        fixed(p, SEAL_HEADER_MAX, CS, max_plain);
        assert_int_equal(seal_header_parse(f->key, p, sizeof p, &need, &h), -EAGAIN);
        assert_int_equal(need, SEAL_HEADER_MAX);
        _cleanup_free_ uint8_t *big = calloc(1, SEAL_HEADER_MAX);
        assert_non_null(big);
        memcpy(big, p, sizeof p);
        assert_int_equal(seal_header_parse(f->key, big, SEAL_HEADER_MAX, &need, &h), -EBADMSG);
        assert_null(h);
        sample_done(&s);
}

/* The format as seal.h documents it, written here with libsodium alone: a
 * reference sealer over plain (mask: which chunks to store, padding bits
 * included, so that it can also make what the writer never does). */
static uint8_t *ref_seal(const uint8_t *key, const uint8_t *plain, uint64_t plen, uint32_t cs,
                         const uint8_t *mask, const uint8_t nonce_base[SEAL_NONCE_BASE_SIZE],
                         size_t *ret_len) {
        uint64_t n = (plen + cs - 1) / cs, bl = (n + 7) / 8, hl = SEAL_HEADER_FIXED + bl + SEAL_TAG_SIZE;
        uint8_t *o = calloc(1, hl + plen + n * SEAL_TAG_SIZE);
        assert_non_null(o);
        fixed(o, (uint32_t) hl, cs, plen);
        memcpy(o + 24, nonce_base, SEAL_NONCE_BASE_SIZE);
        memcpy(o + SEAL_HEADER_FIXED, mask, bl);
        uint8_t nonce[24], ad[40], none[1] = {};
        memcpy(nonce, nonce_base, 16);
        memset(nonce + 16, 0xff, 8);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(none, o + hl - 16, NULL, none, 0, o, hl - 16,
                                                            NULL, nonce, key);
        crypto_generichash(ad, 32, o, hl - 16, NULL, 0);
        size_t at = hl;
        for (uint64_t i = 0; i < n; i++) {
                if (!(mask[i / 8] >> (i % 8) & 1))
                        continue;
                size_t len = (size_t) MIN((uint64_t) cs, plen - i * cs);
                for (int b = 0; b < 8; b++)
                        nonce[16 + b] = ad[32 + b] = (uint8_t) (i >> (8 * b));
                crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                        o + at, o + at + len, NULL, plain + i * cs, len, ad, sizeof ad, NULL, nonce, key);
                at += len + SEAL_TAG_SIZE;
        }
        *ret_len = at;
        return o;
}

static void test_format(void **state) {
        struct fixture *f = *state;
        struct sample s = {};
        sample_make(f, &s, f->key);
        /* the writer's object is the reference's, given its nonce_base */
        const uint8_t mask[2] = { 0xb7, 0x01 }; /* chunks 0-2, 4, 5, 7, 8 */
        size_t len;
        _cleanup_free_ uint8_t *o = ref_seal(f->key, s.plain, s.plain_len, CS, mask, s.obj + 24, &len);
        assert_int_equal(len, s.len);
        assert_memory_equal(o, s.obj, len);
        assert_memory_equal(o, "ALKSEAL1", 8);
        assert_int_equal(s.header_len, SEAL_HEADER_FIXED + 2 + SEAL_TAG_SIZE);

        /* a stored chunk of zeros (6) is authentic: it decodes, as a hole */
        uint8_t nb[SEAL_NONCE_BASE_SIZE];
        randombytes_buf(nb, sizeof nb);
        const uint8_t mask6[2] = { 0xf7, 0x01 };
        _cleanup_free_ uint8_t *o6 = ref_seal(f->key, s.plain, s.plain_len, CS, mask6, nb, &len);
        _cleanup_close_ int out = -1;
        assert_int_equal(unseal(f, f->key, o6, len, PIECE_RANDOM, &out), 0);
        assert_same(out, s.plain, s.plain_len);
        _cleanup_close_ int ref = plain_file(f, 0), ref_out = -1;
        put(ref, 0, s.plain, s.plain_len);
        _cleanup_(seal_writer_freep) struct seal_writer *w = NULL;
        assert_int_equal(seal_writer_new(ref, f->key, CS, &w), 0);
        assert_int_equal(seal_writer_stored_chunks(w), 7); /* the writer skips it */
        struct stat a, b;
        assert_int_equal(unseal(f, f->key, s.obj, s.len, PIECE_WHOLE, &ref_out), 0);
        assert_int_equal(fstat(out, &a), 0);
        assert_int_equal(fstat(ref_out, &b), 0);
        assert_int_equal(a.st_blocks, b.st_blocks);

        /* a padding bit set, under a valid tag: one encoding per header */
        const uint8_t maskp[2] = { 0xb7, 0x03 };
        _cleanup_free_ uint8_t *op = ref_seal(f->key, s.plain, s.plain_len, CS, maskp, nb, &len);
        struct seal_header *h = NULL;
        assert_int_equal(seal_header_parse(f->key, op, len, NULL, &h), -EBADMSG);
        _cleanup_close_ int out2 = -1;
        assert_int_equal(unseal(f, f->key, op, len, PIECE_WHOLE, &out2), -EBADMSG);
        assert_verified_prefix(out2, s.plain, 0);
        sample_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sparse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_read_at, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reader_pieces, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reader_misuse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_writer_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_big_sparse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ranged, setup, teardown),
                cmocka_unit_test_setup_teardown(test_format, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tamper_flip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tamper_swap, setup, teardown),
                cmocka_unit_test_setup_teardown(test_tamper_foreign, setup, teardown),
                cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
                cmocka_unit_test_setup_teardown(test_expected_nonce, setup, teardown),
                cmocka_unit_test_setup_teardown(test_extended, setup, teardown),
                cmocka_unit_test_setup_teardown(test_wrong_key, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
