/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes sealed artifacts (lib/seal) with what an object store can hand a
 * node. The input, as an object: seal_header_parse() and the streaming
 * reader (fed in pieces whose size the input's last byte picks) with a
 * fixed key must agree: the reader accepts exactly when the header parses,
 * the object is as long as the header says and every stored chunk opens,
 * and then its output is what the ranged API opens. The input, as a
 * plaintext: sealed (4 KiB chunks; a zero byte then a count k stands for
 * k * 64 zeros, so that all-zero chunks occur), read back in slices,
 * decoded equal, and refused once any one bit of it is flipped.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "seal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The corpus' objects were sealed with this key: bytes 0..31. */
static const uint8_t *key(void) {
        static uint8_t k[SEAL_KEY_SIZE];
        for (size_t i = 0; i < sizeof k; i++)
                k[i] = (uint8_t) i;
        return k;
}

#define PLAIN_MAX (256u << 10) /* of a plaintext the input stands for */
#define OPEN_MAX (1u << 20)    /* plaintext the ranged check opens */

/* An empty memfd (one per use, kept across inputs). */
static int scratch_fd(int *fd) {
        if (*fd < 0)
                *fd = memfd_create("fuzz-seal", MFD_CLOEXEC);
        if (*fd < 0 || ftruncate(*fd, 0) < 0)
                abort();
        return *fd;
}

/* Decodes obj into a fresh scratch file in pieces of piece bytes; the
 * first error of feed or finish. */
static int decode(const uint8_t *obj, size_t len, size_t piece, int out) {
        struct seal_reader *r = NULL;
        if (seal_reader_new(key(), out, &r) < 0)
                abort();
        int e = 0;
        for (size_t at = 0; at < len && e == 0; at += piece)
                e = seal_reader_feed(r, obj + at, MIN(piece, len - at));
        int f = seal_reader_finish(r);
        if (e < 0 && f != e) /* sticky */
                abort();
        seal_reader_free(r);
        return e < 0 ? e : f;
}

/* The input as an object. */
static void as_object(const uint8_t *data, size_t size) {
        static int out = -1;
        size_t piece = size > 0 ? 1 + (size_t) data[size - 1] * 13 : 1;
        int rr = decode(data, size, piece, scratch_fd(&out));
        if (rr < 0 && rr != -EBADMSG)
                abort();

        struct seal_header *h = NULL;
        size_t need = 0;
        int r = seal_header_parse(key(), data, size, &need, &h);
        if (r == -EAGAIN) {
                if (need <= size || need > SEAL_HEADER_MAX || rr == 0)
                        abort();
                return;
        }
        if (r < 0) {
                if (r != -EBADMSG || h || rr == 0)
                        abort();
                return;
        }
        /* a header that verifies: the ranged API against the reader */
        uint64_t n = seal_header_chunks(h), cs = seal_header_chunk_size(h),
                 plain = seal_header_plain_size(h);
        if (n != (plain + cs - 1) / cs || seal_header_stored_chunks(h) > n)
                abort();
        bool ok = seal_header_object_size(h) == size;
        uint8_t *buf = plain <= OPEN_MAX ? malloc(MAX(plain, 1)) : NULL;
        for (uint64_t c = 0; c < n && buf; c++) {
                uint64_t off;
                uint32_t len;
                bool hole;
                if (seal_chunk_locate(h, c, &off, &len, &hole) < 0)
                        abort();
                if (!hole && (off < seal_header_size(h) || len > cs + SEAL_TAG_SIZE))
                        abort();
                if (!hole && (off > size || len > size - off)) {
                        ok = false;
                        break;
                }
                if (seal_chunk_open(h, c, hole ? NULL : data + off, len, buf + c * cs) < 0)
                        ok = false;
        }
        if (buf && ok != (rr == 0))
                abort();
        if (buf && rr == 0) {
                uint8_t *got = malloc(MAX(plain, 1));
                struct stat st;
                if (!got || fstat(out, &st) < 0 || (uint64_t) st.st_size != plain ||
                    pread(out, got, plain, 0) != (ssize_t) plain || memcmp(got, buf, plain) != 0)
                        abort();
                free(got);
        }
        free(buf);
        seal_header_free(h);
}

/* The input as a plaintext. */
static void as_plaintext(const uint8_t *data, size_t size) {
        static int plain_fd = -1, out = -1;
        uint8_t *plain = calloc(1, PLAIN_MAX);
        if (!plain)
                abort();
        size_t plen = 0;
        for (size_t i = 0; i < size && plen < PLAIN_MAX; i++) {
                if (data[i] != 0 || i + 1 == size) {
                        plain[plen++] = data[i];
                        continue;
                }
                size_t k = (size_t) data[++i] * 64; /* MIN/MAX evaluate twice */
                k = MAX(k, 1);
                plen += MIN(k, PLAIN_MAX - plen); /* calloc's zeros */
        }
        int fd = scratch_fd(&plain_fd);
        if (plen > 0 && pwrite(fd, plain, plen, 0) != (ssize_t) plen)
                abort();

        struct seal_writer *w = NULL;
        if (seal_writer_new(fd, key(), SEAL_CHUNK_MIN, &w) < 0)
                abort();
        size_t len = (size_t) seal_writer_size(w);
        uint8_t *obj = malloc(len);
        if (!obj)
                abort();
        /* in slices of a size the input picks, crossing every boundary
         * (at most ~256 of them: each seals the chunks it touches) */
        size_t slice = size > 0 ? 1 + (size_t) data[0] * 61 : len;
        slice = MAX(slice, len / 256);
        for (size_t at = 0; at < len; at += slice)
                if (seal_writer_read_at(w, at, obj + at, MIN(slice, len - at)) < 0)
                        abort();
        uint64_t stored = seal_writer_stored_chunks(w);
        seal_writer_free(w);

        if (decode(obj, len, slice, scratch_fd(&out)) < 0)
                abort();
        uint8_t *got = malloc(MAX(plen, 1));
        struct stat st;
        if (!got || fstat(out, &st) < 0 || (size_t) st.st_size != plen ||
            pread(out, got, plen, 0) != (ssize_t) plen || memcmp(got, plain, plen) != 0)
                abort();
        /* the stored chunks are exactly those not all zeros */
        uint64_t want = 0;
        for (size_t c = 0; c * SEAL_CHUNK_MIN < plen; c++) {
                size_t n = MIN((size_t) SEAL_CHUNK_MIN, plen - c * SEAL_CHUNK_MIN);
                for (size_t i = 0; i < n; i++)
                        if (plain[c * SEAL_CHUNK_MIN + i]) {
                                want++;
                                break;
                        }
        }
        if (want != stored)
                abort();
        /* one bit anywhere: refused */
        size_t bit = size > 1 ? ((size_t) data[1] << 8 | data[size / 2]) % (len * 8) : 0;
        obj[bit / 8] ^= (uint8_t) (1u << (bit % 8));
        if (decode(obj, len, slice, scratch_fd(&out)) != -EBADMSG)
                abort();
        free(got);
        free(obj);
        free(plain);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        as_object(data, size);
        as_plaintext(data, size);
        return 0;
}
