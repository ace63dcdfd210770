/* SPDX-License-Identifier: Apache-2.0 */
/* Disk deltas: see delta.h. */
#include "delta.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

#define HEADER_FIXED 32u
#define RANGE_BYTES 24u
#define FIEMAP_BATCH 512u
#define COMPARE_CHUNK (1u << 20)

/* What FIEMAP says is at the same physical place is the same data, unless
 * the extent is one of these (not yet placed, compressed, inline...). */
#define EXTENT_UNSHAREABLE                                                                            \
        (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_ENCRYPTED | \
         FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_UNWRITTEN)

struct extent {
        uint64_t logical, physical, length;
        bool shareable;
};

struct extents {
        struct extent *v;
        size_t n, cap;
};

struct range {
        uint64_t off, len;
        bool data; /* false: zeros */
};

struct ranges {
        struct range *v;
        size_t n, cap;
};

static int grow(void **v, size_t *cap, size_t n, size_t size) {
        if (n < *cap)
                return 0;
        size_t ncap = *cap ? *cap * 2 : 64;
        void *nv = reallocarray(*v, ncap, size);
        if (!nv)
                return -ENOMEM;
        *v = nv;
        *cap = ncap;
        return 0;
}

/* Every extent of fd, in order (after the file's dirty data is placed). */
static int extents_read(int fd, struct extents *ret) {
        size_t bytes = sizeof(struct fiemap) + FIEMAP_BATCH * sizeof(struct fiemap_extent);
        _cleanup_free_ struct fiemap *fm = malloc(bytes);
        struct extents x = { 0 };
        if (!fm)
                return -ENOMEM;
        for (uint64_t start = 0;;) {
                memset(fm, 0, bytes);
                fm->fm_start = start;
                fm->fm_length = FIEMAP_MAX_OFFSET - start;
                fm->fm_flags = FIEMAP_FLAG_SYNC;
                fm->fm_extent_count = FIEMAP_BATCH;
                if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
                        free(x.v);
                        return negative_errno();
                }
                if (fm->fm_mapped_extents == 0)
                        break;
                bool last = false;
                for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
                        const struct fiemap_extent *e = &fm->fm_extents[i];
                        if (grow((void **) &x.v, &x.cap, x.n, sizeof *x.v) < 0) {
                                free(x.v);
                                return -ENOMEM;
                        }
                        x.v[x.n++] = (struct extent){ .logical = e->fe_logical, .physical = e->fe_physical,
                                                      .length = e->fe_length,
                                                      .shareable = !(e->fe_flags & EXTENT_UNSHAREABLE) };
                        last = e->fe_flags & FIEMAP_EXTENT_LAST;
                        start = e->fe_logical + e->fe_length;
                }
                if (last)
                        break;
        }
        *ret = x;
        return 0;
}

/* The extent of x that holds offset pos, else NULL; *next gets where the
 * next extent after pos starts (UINT64_MAX: none). *hint speeds up a walk
 * in increasing pos. */
static const struct extent *extent_at(const struct extents *x, uint64_t pos, size_t *hint, uint64_t *next) {
        size_t i = *hint;
        while (i < x->n && x->v[i].logical + x->v[i].length <= pos)
                i++;
        *hint = i;
        if (i < x->n && x->v[i].logical <= pos) {
                *next = x->v[i].logical + x->v[i].length;
                return &x->v[i];
        }
        *next = i < x->n ? x->v[i].logical : UINT64_MAX;
        return NULL;
}

/* Adds [off, off + len) to r, merged with the last range when it adjoins
 * and is of the same kind. */
static int ranges_add(struct ranges *r, uint64_t off, uint64_t len, bool data) {
        if (len == 0)
                return 0;
        if (r->n && r->v[r->n - 1].data == data && r->v[r->n - 1].off + r->v[r->n - 1].len == off) {
                r->v[r->n - 1].len += len;
                return 0;
        }
        if (r->n >= DELTA_RANGES_MAX)
                return -E2BIG;
        if (grow((void **) &r->v, &r->cap, r->n, sizeof *r->v) < 0)
                return -ENOMEM;
        r->v[r->n++] = (struct range){ .off = off, .len = len, .data = data };
        return 0;
}

static bool all_zero(const uint8_t *p, size_t n) {
        return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Reads n bytes at off; past EOF (or a short file) they read as zeros. */
static int read_zeros_past_eof(int fd, uint64_t off, uint8_t *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t k = pread(fd, buf + got, n - got, (off_t) (off + got));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return negative_errno();
                if (k == 0)
                        break;
                got += (size_t) k;
        }
        memset(buf + got, 0, n - got);
        return 0;
}

/* Compares [off, end) of target with base block by block: the changed
 * blocks become ranges (zeros where the target's block is zeros). A side
 * that is a hole there (base_hole, target_hole) is zeros and not read. */
static int compare_span(int base_fd, int target_fd, uint64_t off, uint64_t end, bool base_hole,
                        bool target_hole, struct ranges *r, struct delta_stats *st) {
        _cleanup_free_ uint8_t *a = calloc(1, COMPARE_CHUNK), *b = calloc(1, COMPARE_CHUNK);
        if (!a || !b)
                return -ENOMEM;
        while (off < end) {
                size_t n = (size_t) MIN((uint64_t) COMPARE_CHUNK, end - off);
                int k;
                if ((!target_hole && (k = read_zeros_past_eof(target_fd, off, a, n)) < 0) ||
                    (!base_hole && (k = read_zeros_past_eof(base_fd, off, b, n)) < 0))
                        return k;
                st->compared += n;
                for (size_t i = 0; i < n; i += DELTA_BLOCK) {
                        size_t m = MIN((size_t) DELTA_BLOCK, n - i);
                        if (memcmp(a + i, b + i, m) == 0)
                                continue;
                        if ((k = ranges_add(r, off + i, m, !target_hole && !all_zero(a + i, m))) < 0)
                                return k;
                }
                off += n;
        }
        return 0;
}

/* The ranges of target that differ from base. */
static int diff(int base_fd, int target_fd, uint64_t size, uint64_t base_size, struct ranges *r,
                struct delta_stats *st) {
        struct extents t = { 0 }, b = { 0 };
        int k = extents_read(target_fd, &t);
        if (k >= 0)
                k = extents_read(base_fd, &b);
        /* a file system without FIEMAP: every byte compared */
        if (k == -EOPNOTSUPP || k == -ENOTTY) {
                free(t.v);
                free(b.v);
                return compare_span(base_fd, target_fd, 0, size, false, false, r, st);
        }
        size_t th = 0, bh = 0;
        for (uint64_t pos = 0; k >= 0 && pos < size;) {
                uint64_t tnext, bnext;
                const struct extent *te = extent_at(&t, pos, &th, &tnext);
                const struct extent *be = pos < base_size ? extent_at(&b, pos, &bh, &bnext) : NULL;
                if (pos >= base_size)
                        bnext = UINT64_MAX;
                /* [pos, uniform) is one extent (or hole) in each file */
                uint64_t uniform = MIN(MIN(tnext, bnext), size);
                if (pos < base_size)
                        uniform = MIN(uniform, base_size);
                uniform = MAX(uniform, pos + 1);
                /* whole blocks: a boundary inside one widens the span to it,
                 * and then it is not one extent any more: compared whole */
                uint64_t end = MIN((uniform + DELTA_BLOCK - 1) / DELTA_BLOCK * DELTA_BLOCK, size);
                bool exact = end == uniform;
                if (exact && !te && !be)
                        ; /* zeros in both */
                else if (exact && te && be && te->shareable && be->shareable &&
                         te->physical - te->logical == be->physical - be->logical)
                        st->shared += end - pos; /* the same blocks on the disk */
                else /* written (a guest rewrites much as it was: a journal, zeros) */
                        k = compare_span(base_fd, target_fd, pos, end, exact && !be, exact && !te, r, st);
                pos = end;
        }
        free(t.v);
        free(b.v);
        return k;
}

/* Copies len bytes from in at in_off to out at out_off: a clone where the
 * file system can (block-aligned), else copy_file_range, else read/write. */
static int copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t len) {
        if (len % DELTA_BLOCK == 0) {
                struct file_clone_range fcr = { .src_fd = in, .src_offset = in_off, .src_length = len,
                                                .dest_offset = out_off };
                if (ioctl(out, FICLONERANGE, &fcr) == 0)
                        return 0;
        }
        while (len > 0) {
                loff_t i = (loff_t) in_off, o = (loff_t) out_off;
                ssize_t k = copy_file_range(in, &i, out, &o, (size_t) MIN(len, (uint64_t) 1 << 30), 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                in_off += (uint64_t) k;
                out_off += (uint64_t) k;
                len -= (uint64_t) k;
        }
        _cleanup_free_ uint8_t *buf = len ? malloc(COMPARE_CHUNK) : NULL;
        if (len && !buf)
                return -ENOMEM;
        while (len > 0) {
                size_t n = (size_t) MIN(len, (uint64_t) COMPARE_CHUNK);
                ssize_t k = pread(in, buf, n, (off_t) in_off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO;
                int r = fd_pwrite_all(out, buf, (size_t) k, out_off);
                if (r < 0)
                        return r;
                in_off += (uint64_t) k;
                out_off += (uint64_t) k;
                len -= (uint64_t) k;
        }
        return 0;
}

static uint64_t header_size(size_t n_ranges) {
        uint64_t h = HEADER_FIXED + (uint64_t) n_ranges * RANGE_BYTES;
        return (h + DELTA_BLOCK - 1) / DELTA_BLOCK * DELTA_BLOCK;
}

int delta_disk_make(int base_fd, int target_fd, int out_fd, struct delta_stats *ret_stats) {
        struct stat tst, bst;
        if (fstat(target_fd, &tst) < 0 || fstat(base_fd, &bst) < 0)
                return negative_errno();
        struct delta_stats st = { .size = (uint64_t) tst.st_size };
        struct ranges r = { 0 };
        int k = diff(base_fd, target_fd, (uint64_t) tst.st_size, (uint64_t) bst.st_size, &r, &st);
        uint64_t hsize = header_size(r.n);
        _cleanup_free_ uint8_t *h = k >= 0 ? calloc(1, hsize) : NULL;
        if (k >= 0 && !h)
                k = -ENOMEM;
        if (k < 0) {
                free(r.v);
                return k;
        }
        memcpy(h, DELTA_DISK_MAGIC, 8);
        le64_store(h + 8, (uint64_t) tst.st_size);
        le64_store(h + 16, (uint64_t) bst.st_size);
        le32_store(h + 24, (uint32_t) r.n);
        uint64_t data = hsize;
        for (size_t i = 0; i < r.n; i++) {
                uint8_t *e = h + HEADER_FIXED + i * RANGE_BYTES;
                le64_store(e, r.v[i].off);
                le64_store(e + 8, r.v[i].len);
                le64_store(e + 16, r.v[i].data ? data : 0);
                st.changed += r.v[i].len;
                if (r.v[i].data)
                        data += (r.v[i].len + DELTA_BLOCK - 1) / DELTA_BLOCK * DELTA_BLOCK;
        }
        k = fd_pwrite_all(out_fd, h, hsize, 0);
        data = hsize;
        for (size_t i = 0; k >= 0 && i < r.n; i++) {
                if (!r.v[i].data)
                        continue;
                k = copy_range(target_fd, r.v[i].off, out_fd, data, r.v[i].len);
                data += (r.v[i].len + DELTA_BLOCK - 1) / DELTA_BLOCK * DELTA_BLOCK;
        }
        if (k >= 0 && ftruncate(out_fd, (off_t) data) < 0)
                k = negative_errno();
        st.ranges = (uint32_t) r.n;
        st.written = data;
        free(r.v);
        if (k >= 0 && ret_stats)
                *ret_stats = st;
        return k;
}

int delta_disk_apply(int base_fd, int delta_fd, int out_fd) {
        struct stat dst, bst;
        uint8_t fixed[HEADER_FIXED];
        if (fstat(delta_fd, &dst) < 0 || fstat(base_fd, &bst) < 0)
                return negative_errno();
        int k = fd_pread_exact(delta_fd, fixed, sizeof fixed, 0);
        if (k < 0)
                return k == -EPIPE ? -EBADMSG : k;
        uint64_t size = le64_load(fixed + 8), base_size = le64_load(fixed + 16);
        uint32_t n = le32_load(fixed + 24);
        uint64_t hsize = header_size(n);
        if (memcmp(fixed, DELTA_DISK_MAGIC, 8) != 0 || n > DELTA_RANGES_MAX || fixed[28] | fixed[29] | fixed[30] | fixed[31] ||
            base_size != (uint64_t) bst.st_size || hsize > (uint64_t) dst.st_size || size > (UINT64_C(1) << 50))
                return -EBADMSG;
        _cleanup_free_ uint8_t *table = malloc(MAX((size_t) n * RANGE_BYTES, (size_t) 1));
        if (!table)
                return -ENOMEM;
        if (n && (k = fd_pread_exact(delta_fd, table, (size_t) n * RANGE_BYTES, HEADER_FIXED)) < 0)
                return k == -EPIPE ? -EBADMSG : k;
        /* every range checked before anything is written */
        uint64_t prev_end = 0;
        for (uint32_t i = 0; i < n; i++) {
                const uint8_t *e = table + (size_t) i * RANGE_BYTES;
                uint64_t off = le64_load(e), len = le64_load(e + 8), data = le64_load(e + 16);
                if (len == 0 || off % DELTA_BLOCK || off < prev_end || off > size || len > size - off ||
                    (len % DELTA_BLOCK && off + len != size) ||
                    (data && (data % DELTA_BLOCK || data < hsize || data > (uint64_t) dst.st_size ||
                              len > (uint64_t) dst.st_size - data)))
                        return -EBADMSG;
                prev_end = off + len;
        }
        if ((k = fd_clone_or_copy(base_fd, out_fd, NULL)) < 0)
                return k;
        if (ftruncate(out_fd, (off_t) size) < 0)
                return negative_errno();
        _cleanup_free_ uint8_t *zeros = NULL;
        for (uint32_t i = 0; i < n && k >= 0; i++) {
                const uint8_t *e = table + (size_t) i * RANGE_BYTES;
                uint64_t off = le64_load(e), len = le64_load(e + 8), data = le64_load(e + 16);
                if (data) {
                        k = copy_range(delta_fd, data, out_fd, off, len);
                        continue;
                }
                if (fallocate(out_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) off, (off_t) len) == 0)
                        continue;
                if (!zeros && !(zeros = calloc(1, COMPARE_CHUNK)))
                        return -ENOMEM;
                for (uint64_t p = 0; p < len && k >= 0; p += COMPARE_CHUNK)
                        k = fd_pwrite_all(out_fd, zeros, (size_t) MIN((uint64_t) COMPARE_CHUNK, len - p), off + p);
        }
        return k;
}
