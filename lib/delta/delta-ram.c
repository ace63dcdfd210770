/* SPDX-License-Identifier: Apache-2.0 */
/* RAM deltas: see delta.h. */
#include "delta.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "macros.h"
#include "util.h"

/* QEMU's RAM page records (migration/ram.c): a big-endian u64 of the
 * page's offset in its block ORed with these flags; without CONTINUE the
 * block's name follows (u8 length, bytes); a PAGE record then carries the
 * page, a ZERO record one byte. */
#define RAM_FLAG_ZERO 0x02u
#define RAM_FLAG_PAGE 0x08u
#define RAM_FLAG_CONTINUE 0x20u
#define RAM_FLAG_MASK (DELTA_PAGE - 1)

#define REC_LIT 0x01
#define REC_REF 0x02
#define REC_END 0x03
#define HEADER_SIZE 24u
#define IO_BUF (1u << 20)

struct mapped {
        const uint8_t *p;
        size_t size;
};

static int map_file(int fd, struct mapped *ret) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if ((uint64_t) st.st_size > SIZE_MAX)
                return -EFBIG;
        *ret = (struct mapped){ .size = (size_t) st.st_size };
        if (st.st_size == 0)
                return 0;
        void *p = mmap(NULL, ret->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
                return negative_errno();
        (void) madvise(p, ret->size, MADV_SEQUENTIAL);
        ret->p = p;
        return 0;
}

static void unmap_file(struct mapped *m) {
        if (m->p)
                munmap((void *) m->p, m->size);
        *m = (struct mapped){ 0 };
}

static uint64_t be64_get(const uint8_t *p) {
        uint64_t v = 0;
        for (unsigned i = 0; i < 8; i++)
                v = v << 8 | p[i];
        return v;
}

/* ---- writing ---- */

struct zout {
        ZSTD_CCtx *c;
        int fd;
        uint8_t *buf;
        size_t cap;
        uint64_t written;
};

/* Compresses n bytes (end: and ends the frame) and writes what comes out. */
static int zout_put(struct zout *z, const void *data, size_t n, bool end) {
        ZSTD_inBuffer in = { data, n, 0 };
        for (;;) {
                ZSTD_outBuffer out = { z->buf, z->cap, 0 };
                size_t left = ZSTD_compressStream2(z->c, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
                if (ZSTD_isError(left))
                        return -EIO;
                if (out.pos) {
                        int r = fd_pwrite_all(z->fd, z->buf, out.pos, z->written);
                        if (r < 0)
                                return r;
                        z->written += out.pos;
                }
                if (end ? left == 0 : in.pos == in.size)
                        return 0;
        }
}

static int put_lit(struct zout *z, const uint8_t *p, size_t n, struct delta_stats *st) {
        while (n > 0) {
                size_t k = MIN(n, (size_t) DELTA_LIT_MAX);
                uint8_t h[5] = {REC_LIT};
                le32_store(h + 1, (uint32_t) k);
                int r = zout_put(z, h, sizeof h, false);
                if (r >= 0)
                        r = zout_put(z, p, k, false);
                if (r < 0)
                        return r;
                st->ranges++;
                st->changed += k;
                p += k;
                n -= k;
        }
        return 0;
}

/* Where a page record at i carries its page, if the bytes there read as
 * one: *ret_page (its offset in t) and *ret_addr (its offset in the block). */
static bool page_record(const struct mapped *t, size_t i, size_t *ret_page, uint64_t *ret_addr) {
        if (t->size - i < 8)
                return false;
        uint64_t h = be64_get(t->p + i);
        unsigned flags = (unsigned) (h & RAM_FLAG_MASK);
        if (!(flags & RAM_FLAG_PAGE) || (flags & ~(RAM_FLAG_PAGE | RAM_FLAG_CONTINUE)))
                return false;
        size_t p = i + 8;
        if (!(flags & RAM_FLAG_CONTINUE)) {
                if (p >= t->size || t->p[p] == 0 || t->size - p - 1 < t->p[p])
                        return false;
                p += 1 + t->p[p];
        }
        if (t->size - p < DELTA_PAGE)
                return false;
        *ret_page = p;
        *ret_addr = h & ~(uint64_t) RAM_FLAG_MASK;
        return true;
}

int delta_ram_make(int base_fd, int target_fd, int out_fd, int level, struct delta_stats *ret_stats) {
        struct mapped b = { 0 }, t = { 0 };
        struct zout z = { .fd = out_fd, .cap = ZSTD_CStreamOutSize() };
        struct delta_stats st = { 0 };
        int r = map_file(base_fd, &b);
        if (r >= 0)
                r = map_file(target_fd, &t);
        if (r >= 0 && (!(z.c = ZSTD_createCCtx()) || !(z.buf = malloc(z.cap))))
                r = -ENOMEM;
        if (r >= 0 && (ZSTD_isError(ZSTD_CCtx_setParameter(z.c, ZSTD_c_compressionLevel, level)) ||
                       ZSTD_isError(ZSTD_CCtx_setParameter(z.c, ZSTD_c_checksumFlag, 1)) ||
                       ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(z.c, ZSTD_CONTENTSIZE_UNKNOWN))))
                r = -EINVAL;
        if (r >= 0) {
                uint8_t h[HEADER_SIZE];
                memcpy(h, DELTA_RAM_MAGIC, 8);
                le64_store(h + 8, t.size);
                le64_store(h + 16, b.size);
                r = zout_put(&z, h, sizeof h, false);
        }
        size_t i = 0, lit = 0;
        while (r >= 0 && i < t.size) {
                size_t page;
                uint64_t addr;
                if (!page_record(&t, i, &page, &addr)) {
                        i++;
                        continue;
                }
                if (addr > b.size || b.size - addr < DELTA_PAGE || memcmp(t.p + page, b.p + addr, DELTA_PAGE) != 0) {
                        i = page + DELTA_PAGE; /* the page goes as it is */
                        continue;
                }
                uint8_t ref[9] = { REC_REF };
                le64_store(ref + 1, addr);
                if ((r = put_lit(&z, t.p + lit, page - lit, &st)) >= 0)
                        r = zout_put(&z, ref, sizeof ref, false);
                st.shared += DELTA_PAGE;
                i = lit = page + DELTA_PAGE;
        }
        if (r >= 0)
                r = put_lit(&z, t.p + lit, t.size - lit, &st);
        if (r >= 0)
                r = zout_put(&z, (const uint8_t[]){ REC_END }, 1, true);
        st.size = t.size;
        st.written = z.written;
        ZSTD_freeCCtx(z.c);
        free(z.buf);
        unmap_file(&t);
        unmap_file(&b);
        if (r >= 0 && ret_stats)
                *ret_stats = st;
        return r;
}

/* ---- reading ---- */

struct zin {
        ZSTD_DCtx *d;
        int fd;
        uint8_t *in, *out;
        size_t in_cap, out_cap;
        ZSTD_inBuffer ib;
        uint64_t fd_off;         /* where the next read of fd starts (pread: fd's offset is not used) */
        size_t out_pos, out_len; /* what is decompressed and not yet taken */
        bool eof, frame_done;
};

/* Decompresses more into z->out (which is empty): 0 once some came out or
 * the frame ended (then z->out_len may be 0); -EBADMSG when the input ends
 * first or is no zstd. */
static int zin_fill(struct zin *z) {
        for (;;) {
                if (z->frame_done)
                        return -EBADMSG; /* the records go on past the frame */
                if (z->ib.pos == z->ib.size) {
                        if (z->eof)
                                return -EBADMSG;
                        ssize_t k = pread(z->fd, z->in, z->in_cap, (off_t) z->fd_off);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0)
                                return negative_errno();
                        z->fd_off += (uint64_t) k;
                        z->ib = (ZSTD_inBuffer){ z->in, (size_t) k, 0 };
                        z->eof = k == 0;
                        continue;
                }
                ZSTD_outBuffer ob = { z->out, z->out_cap, 0 };
                size_t left = ZSTD_decompressStream(z->d, &ob, &z->ib);
                if (ZSTD_isError(left))
                        return -EBADMSG;
                z->frame_done = left == 0;
                z->out_pos = 0;
                z->out_len = ob.pos;
                if (ob.pos || z->frame_done)
                        return 0;
        }
}

/* The next n bytes of the records: at *ret (valid until the next call),
 * n at most z->out_cap; copied into scratch when they straddle a fill. */
static int zin_take(struct zin *z, size_t n, uint8_t *scratch, const uint8_t **ret) {
        if (z->out_len - z->out_pos >= n) {
                *ret = z->out + z->out_pos;
                z->out_pos += n;
                return 0;
        }
        size_t got = 0;
        while (got < n) {
                if (z->out_pos == z->out_len) {
                        int r = zin_fill(z);
                        if (r < 0)
                                return r;
                        if (z->out_len == 0)
                                return -EBADMSG; /* the frame ended inside a record */
                }
                size_t k = MIN(n - got, z->out_len - z->out_pos);
                memcpy(scratch + got, z->out + z->out_pos, k);
                z->out_pos += k;
                got += k;
        }
        *ret = scratch;
        return 0;
}

struct wout {
        int fd;
        uint8_t *buf;
        size_t len;
        uint64_t total;
};

static int wout_flush(struct wout *w) {
        int r = w->len ? fd_pwrite_all(w->fd, w->buf, w->len, w->total - w->len) : 0;
        w->len = 0;
        return r;
}

static int wout_put(struct wout *w, const uint8_t *p, size_t n) {
        while (n > 0) {
                if (w->len == IO_BUF) {
                        int r = wout_flush(w);
                        if (r < 0)
                                return r;
                }
                size_t k = MIN(n, IO_BUF - w->len);
                memcpy(w->buf + w->len, p, k);
                w->len += k;
                w->total += k;
                p += k;
                n -= k;
        }
        return 0;
}

int delta_ram_apply(int base_fd, int delta_fd, int out_fd) {
        struct mapped b = { 0 };
        struct zin z = { .fd = delta_fd, .in_cap = ZSTD_DStreamInSize(), .out_cap = ZSTD_DStreamOutSize() };
        struct wout w = { .fd = out_fd };
        _cleanup_free_ uint8_t *scratch = NULL;
        int r = map_file(base_fd, &b);
        if (r >= 0 && (!(z.d = ZSTD_createDCtx()) || !(z.in = malloc(z.in_cap)) || !(z.out = malloc(z.out_cap)) ||
                       !(w.buf = malloc(IO_BUF)) || !(scratch = malloc(MAX(z.out_cap, (size_t) HEADER_SIZE)))))
                r = -ENOMEM;
        z.ib = (ZSTD_inBuffer){ z.in, 0, 0 };
        const uint8_t *p;
        uint64_t size = 0;
        if (r >= 0 && (r = zin_take(&z, HEADER_SIZE, scratch, &p)) >= 0) {
                size = le64_load(p + 8);
                if (memcmp(p, DELTA_RAM_MAGIC, 8) != 0 || le64_load(p + 16) != b.size)
                        r = -EBADMSG;
        }
        for (bool end = false; r >= 0 && !end;) {
                if ((r = zin_take(&z, 1, scratch, &p)) < 0)
                        break;
                switch (p[0]) {
                case REC_LIT: {
                        if ((r = zin_take(&z, 4, scratch, &p)) < 0)
                                break;
                        size_t n = le32_load(p);
                        if (n == 0 || n > DELTA_LIT_MAX || n > size - w.total) {
                                r = -EBADMSG;
                                break;
                        }
                        while (n > 0 && r >= 0) {
                                size_t k = MIN(n, z.out_cap);
                                if ((r = zin_take(&z, k, scratch, &p)) >= 0)
                                        r = wout_put(&w, p, k);
                                n -= k;
                        }
                        break;
                }
                case REC_REF: {
                        if ((r = zin_take(&z, 8, scratch, &p)) < 0)
                                break;
                        uint64_t off = le64_load(p);
                        if (off > b.size || b.size - off < DELTA_PAGE || DELTA_PAGE > size - w.total) {
                                r = -EBADMSG;
                                break;
                        }
                        r = wout_put(&w, b.p + off, DELTA_PAGE);
                        break;
                }
                case REC_END:
                        end = true;
                        break;
                default:
                        r = -EBADMSG;
                }
        }
        /* all of the target, one whole frame, nothing after it */
        if (r >= 0 && (w.total != size || z.out_pos != z.out_len))
                r = -EBADMSG;
        while (r >= 0 && !z.frame_done) {
                r = zin_fill(&z);
                if (r >= 0 && z.out_len)
                        r = -EBADMSG;
        }
        if (r >= 0 && (z.ib.pos != z.ib.size || pread(z.fd, scratch, 1, (off_t) z.fd_off) != 0))
                r = -EBADMSG;
        if (r >= 0)
                r = wout_flush(&w);
        ZSTD_freeDCtx(z.d);
        free(z.in);
        free(z.out);
        free(w.buf);
        unmap_file(&b);
        return r;
}
