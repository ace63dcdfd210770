/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sealed artifacts (format in seal.h): the header and its index of stored
 * chunks, the writer that seals any range of an object on demand, the
 * streaming reader, and ranged access. Every object a reader sees came
 * from an object store, so it is untrusted bytes: the header's fixed
 * fields are bounded before anything is allocated for the rest, and no
 * plaintext leaves this file before its tag verified (fuzz-seal feeds the
 * reader garbage).
 */
#include "seal.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

#define MAGIC "ALKSEAL1"
#define MAGIC_SIZE 8
#define NONCE_SIZE crypto_aead_xchacha20poly1305_ietf_NPUBBYTES /* 24: nonce_base || u64 */
#define HASH_SIZE 32
#define AD_SIZE (HASH_SIZE + 8)
#define HEADER_TAG_INDEX UINT64_MAX
/* the rank table counts stored chunks every RANK_BLOCK chunks (8 words) */
#define RANK_BLOCK 512
#define WORDS_PER_BLOCK (RANK_BLOCK / 64)
/* reader: the unit in which zeros inside a stored chunk stay holes */
#define SPARSE_BLOCK 4096
/* writer: the scan reads data regions in pieces of at least this */
#define SCAN_BUF_MIN (UINT32_C(1) << 20)

_Static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == SEAL_KEY_SIZE, "key size");
_Static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == SEAL_TAG_SIZE, "tag size");
_Static_assert(SEAL_NONCE_BASE_SIZE + 8 == NONCE_SIZE, "nonce size");
_Static_assert(SEAL_HEADER_FIXED == MAGIC_SIZE + 4 + 4 + 8 + SEAL_NONCE_BASE_SIZE, "fixed header");

struct seal_header {
        uint8_t key[SEAL_KEY_SIZE];
        uint8_t *bytes; /* all header_len bytes; the bitmap is bytes + SEAL_HEADER_FIXED */
        uint32_t header_len, chunk_size, bitmap_len;
        uint64_t plain_size, n_chunks, stored;
        uint8_t ad_hash[HASH_SIZE]; /* BLAKE2b-256 of the header before its tag */
        /* rank[b]: stored chunks before chunk b * RANK_BLOCK, b = 0 .. n_blocks
         * (the last entry is the total). 2^25 chunks at most: u32 holds it. */
        uint32_t *rank;
};

struct seal_writer {
        struct seal_header *h;
        int fd;
};

struct seal_reader {
        uint8_t key[SEAL_KEY_SIZE];
        int fd;
        int error; /* sticky */
        bool finished;
        /* the header as it arrives: the fixed part, then the rest into
         * pending's bytes; h once it verified */
        uint8_t fixed[SEAL_HEADER_FIXED];
        size_t have;
        struct seal_header *pending, *h;
        /* the body: the stored chunk being received and its record so far */
        uint64_t chunk;
        uint8_t *buf; /* chunk_size + SEAL_TAG_SIZE */
        size_t buffered;
        /* the nonce_base the object must have (seal_reader_expect_nonce()) */
        uint8_t want_nonce[SEAL_NONCE_BASE_SIZE];
        bool check_nonce;
};

static bool chunk_size_valid(uint32_t cs) {
        return cs >= SEAL_CHUNK_MIN && cs <= SEAL_CHUNK_MAX && (cs & (cs - 1)) == 0;
}

/* The header length that plain_size and a valid chunk_size call for, or 0
 * when it would be over SEAL_HEADER_MAX. */
static uint32_t header_len_for(uint64_t plain_size, uint32_t cs, uint64_t *ret_chunks) {
        uint64_t n = plain_size / cs + (plain_size % cs != 0);
        uint64_t len = SEAL_HEADER_FIXED + (n + 7) / 8 + SEAL_TAG_SIZE;
        if (len > SEAL_HEADER_MAX)
                return 0;
        *ret_chunks = n;
        return (uint32_t) len;
}

/* Checks the fixed fields of an untrusted header; all that is known before
 * the rest of it is fetched or allocated. */
static int fixed_check(const uint8_t p[SEAL_HEADER_FIXED], uint32_t *ret_header_len) {
        if (memcmp(p, MAGIC, MAGIC_SIZE) != 0)
                return -EBADMSG;
        uint32_t header_len = le32_load(p + 8), cs = le32_load(p + 12);
        uint64_t plain_size = le64_load(p + 16), n;
        if (!chunk_size_valid(cs) || plain_size > SEAL_PLAIN_MAX)
                return -EBADMSG;
        if (header_len_for(plain_size, cs, &n) != header_len) /* 0 when over the limit */
                return -EBADMSG;
        *ret_header_len = header_len;
        return 0;
}

static const uint8_t *bitmap(const struct seal_header *h) {
        return h->bytes + SEAL_HEADER_FIXED;
}

/* Word w of the bitmap (bits 64w .. 64w + 63), zero-padded at its end. */
static uint64_t bitmap_word(const struct seal_header *h, uint64_t w) {
        uint64_t at = w * 8;
        if (at + 8 <= h->bitmap_len)
                return le64_load(bitmap(h) + at);
        uint64_t v = 0;
        for (uint64_t i = at; i < h->bitmap_len; i++)
                v |= (uint64_t) bitmap(h)[i] << (8 * (i - at));
        return v;
}

static bool chunk_stored(const struct seal_header *h, uint64_t i) {
        return bitmap(h)[i / 8] >> (i % 8) & 1;
}

/* Stored chunks before chunk i (i <= n_chunks). */
static uint64_t chunk_rank(const struct seal_header *h, uint64_t i) {
        uint64_t r = h->rank[i / RANK_BLOCK];
        for (uint64_t w = i / RANK_BLOCK * WORDS_PER_BLOCK; w < i / 64; w++)
                r += (uint64_t) __builtin_popcountll(bitmap_word(h, w));
        if (i % 64)
                r += (uint64_t) __builtin_popcountll(bitmap_word(h, i / 64) &
                                                     ((UINT64_C(1) << (i % 64)) - 1));
        return r;
}

/* The chunk whose record is the k-th of the body (k < stored). */
static uint64_t chunk_select(const struct seal_header *h, uint64_t k) {
        uint64_t lo = 0, hi = (h->n_chunks + RANK_BLOCK - 1) / RANK_BLOCK; /* rank[lo] <= k < rank[hi] */
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (h->rank[mid] <= k)
                        lo = mid;
                else
                        hi = mid;
        }
        k -= h->rank[lo];
        for (uint64_t w = lo * WORDS_PER_BLOCK;; w++) {
                uint64_t word = bitmap_word(h, w);
                uint64_t c = (uint64_t) __builtin_popcountll(word);
                if (k >= c) {
                        k -= c;
                        continue;
                }
                for (; k > 0; k--)
                        word &= word - 1; /* drops the lowest set bit */
                return w * 64 + (uint64_t) __builtin_ctzll(word);
        }
}

/* The first stored chunk >= i, or n_chunks. */
static uint64_t chunk_next(const struct seal_header *h, uint64_t i) {
        if (i >= h->n_chunks)
                return h->n_chunks;
        uint64_t w = i / 64, word = bitmap_word(h, w) & (UINT64_MAX << (i % 64));
        while (word == 0) {
                if (++w * 64 >= h->n_chunks)
                        return h->n_chunks;
                word = bitmap_word(h, w);
        }
        return MIN(w * 64 + (uint64_t) __builtin_ctzll(word), h->n_chunks);
}

static uint32_t chunk_plain_len(const struct seal_header *h, uint64_t i) {
        if (i + 1 < h->n_chunks)
                return h->chunk_size;
        return (uint32_t) (h->plain_size - i * h->chunk_size);
}

static uint64_t record_size(const struct seal_header *h) {
        return (uint64_t) h->chunk_size + SEAL_TAG_SIZE;
}

static void chunk_nonce(const struct seal_header *h, uint64_t i, uint8_t nonce[NONCE_SIZE]) {
        memcpy(nonce, h->bytes + MAGIC_SIZE + 16, SEAL_NONCE_BASE_SIZE);
        le64_store(nonce + SEAL_NONCE_BASE_SIZE, i);
}

static void chunk_ad(const struct seal_header *h, uint64_t i, uint8_t ad[AD_SIZE]) {
        memcpy(ad, h->ad_hash, HASH_SIZE);
        le64_store(ad + HASH_SIZE, i);
}

/* The header's tag: of the empty message, with the header as AD. */
static void header_tag(const struct seal_header *h, uint8_t tag[SEAL_TAG_SIZE]) {
        uint8_t nonce[NONCE_SIZE], none[1] = {};
        chunk_nonce(h, HEADER_TAG_INDEX, nonce);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                none, tag, NULL, none, 0, h->bytes, h->header_len - SEAL_TAG_SIZE, NULL, nonce, h->key);
}

/* The rank table and the AD hash of a header whose fields are set. The
 * padding bits after the last chunk must be zero: one encoding per header. */
static int header_index(struct seal_header *h) {
        if (h->n_chunks % 8 && bitmap(h)[h->bitmap_len - 1] >> (h->n_chunks % 8))
                return -EBADMSG;
        uint64_t n_blocks = (h->n_chunks + RANK_BLOCK - 1) / RANK_BLOCK;
        h->rank = malloc((n_blocks + 1) * sizeof *h->rank);
        if (!h->rank)
                return -ENOMEM;
        uint64_t r = 0;
        for (uint64_t b = 0; b < n_blocks; b++) {
                h->rank[b] = (uint32_t) r;
                for (uint64_t w = b * WORDS_PER_BLOCK; w < (b + 1) * WORDS_PER_BLOCK; w++)
                        r += (uint64_t) __builtin_popcountll(bitmap_word(h, w));
        }
        h->rank[n_blocks] = (uint32_t) r;
        h->stored = r;
        crypto_generichash(h->ad_hash, sizeof h->ad_hash, h->bytes, h->header_len - SEAL_TAG_SIZE, NULL, 0);
        return 0;
}

void seal_header_free(struct seal_header *h) {
        if (!h)
                return;
        sodium_memzero(h->key, sizeof h->key);
        free(h->bytes);
        free(h->rank);
        free(h);
}

/* An empty header for plain_size and a valid chunk size: fields set, the
 * nonce_base, bitmap and tag left for the caller. -EFBIG when too large. */
static int header_alloc(const uint8_t key[SEAL_KEY_SIZE], uint64_t plain_size, uint32_t cs,
                        struct seal_header **ret) {
        uint64_t n;
        uint32_t header_len = plain_size <= SEAL_PLAIN_MAX ? header_len_for(plain_size, cs, &n) : 0;
        if (header_len == 0)
                return -EFBIG;
        _cleanup_(seal_header_freep) struct seal_header *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        h->bytes = calloc(1, header_len);
        if (!h->bytes)
                return -ENOMEM;
        memcpy(h->key, key, SEAL_KEY_SIZE);
        h->header_len = header_len;
        h->chunk_size = cs;
        h->bitmap_len = header_len - SEAL_HEADER_FIXED - SEAL_TAG_SIZE;
        h->plain_size = plain_size;
        h->n_chunks = n;
        memcpy(h->bytes, MAGIC, MAGIC_SIZE);
        le32_store(h->bytes + 8, header_len);
        le32_store(h->bytes + 12, cs);
        le64_store(h->bytes + 16, plain_size);
        *ret = TAKE_PTR(h);
        return 0;
}

/* Verifies the tag of a header whose bytes are all in, then indexes it. */
static int header_finish(struct seal_header *h) {
        uint8_t tag[SEAL_TAG_SIZE];
        header_tag(h, tag);
        /* constant time */
        int r = sodium_memcmp(tag, h->bytes + h->header_len - SEAL_TAG_SIZE, SEAL_TAG_SIZE);
        sodium_memzero(tag, sizeof tag);
        if (r != 0)
                return -EBADMSG;
        return header_index(h);
}

/* A header to receive the rest of an untrusted one whose fixed part (at
 * fixed) passed fixed_check(): bytes allocated, the fixed part in. */
static int header_start(const uint8_t key[SEAL_KEY_SIZE], const uint8_t *fixed, struct seal_header **ret) {
        struct seal_header *h = NULL;
        int r = header_alloc(key, le64_load(fixed + 16), le32_load(fixed + 12), &h);
        if (r < 0)
                return r == -EFBIG ? -EBADMSG : r;
        if (h->header_len != le32_load(fixed + 8)) { /* fixed_check() saw to it */
                seal_header_free(h);
                return -EBADMSG;
        }
        memcpy(h->bytes, fixed, SEAL_HEADER_FIXED);
        *ret = h;
        return 0;
}

int seal_header_parse(const uint8_t key[SEAL_KEY_SIZE], const void *data, size_t len, size_t *ret_need,
                      struct seal_header **ret) {
        if (!key || (!data && len > 0) || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        if (len < SEAL_HEADER_FIXED) {
                if (ret_need)
                        *ret_need = SEAL_HEADER_FIXED;
                return -EAGAIN;
        }
        uint32_t header_len;
        int r = fixed_check(data, &header_len);
        if (r < 0)
                return r;
        if (len < header_len) {
                if (ret_need)
                        *ret_need = header_len;
                return -EAGAIN;
        }
        _cleanup_(seal_header_freep) struct seal_header *h = NULL;
        r = header_start(key, data, &h);
        if (r < 0)
                return r;
        memcpy(h->bytes, data, header_len);
        r = header_finish(h);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(h);
        return 0;
}

uint64_t seal_header_plain_size(const struct seal_header *h) {
        return h ? h->plain_size : 0;
}

uint32_t seal_header_chunk_size(const struct seal_header *h) {
        return h ? h->chunk_size : 0;
}

uint64_t seal_header_chunks(const struct seal_header *h) {
        return h ? h->n_chunks : 0;
}

uint64_t seal_header_stored_chunks(const struct seal_header *h) {
        return h ? h->stored : 0;
}

uint32_t seal_header_size(const struct seal_header *h) {
        return h ? h->header_len : 0;
}

uint64_t seal_header_object_size(const struct seal_header *h) {
        if (!h)
                return 0;
        uint64_t size = h->header_len + h->stored * record_size(h);
        if (h->n_chunks > 0 && chunk_stored(h, h->n_chunks - 1)) /* the short last chunk */
                size -= h->chunk_size - chunk_plain_len(h, h->n_chunks - 1);
        return size;
}

int seal_chunk_locate(const struct seal_header *h, uint64_t chunk, uint64_t *ret_off, uint32_t *ret_len,
                      bool *ret_hole) {
        if (!h)
                return -EINVAL;
        if (chunk >= h->n_chunks)
                return -ERANGE;
        bool hole = !chunk_stored(h, chunk);
        if (ret_off)
                *ret_off = hole ? 0 : h->header_len + chunk_rank(h, chunk) * record_size(h);
        if (ret_len)
                *ret_len = hole ? 0 : chunk_plain_len(h, chunk) + SEAL_TAG_SIZE;
        if (ret_hole)
                *ret_hole = hole;
        return 0;
}

/* Verifies and decrypts chunk's record (plen + tag bytes at sealed) into
 * out; out may be sealed itself (libsodium checks the tag over the
 * ciphertext first, then decrypts in place). out is zeroed on failure. */
static int chunk_decrypt(const struct seal_header *h, uint64_t chunk, const uint8_t *sealed, uint32_t plen,
                         uint8_t *out) {
        uint8_t nonce[NONCE_SIZE], ad[AD_SIZE];
        chunk_nonce(h, chunk, nonce);
        chunk_ad(h, chunk, ad);
        if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(out, NULL, sealed, plen, sealed + plen, ad,
                                                                sizeof ad, nonce, h->key) != 0) {
                sodium_memzero(out, plen);
                return -EBADMSG;
        }
        return 0;
}

int seal_chunk_open(const struct seal_header *h, uint64_t chunk, const void *sealed, size_t len,
                    void *plain_out) {
        if (!h || (!sealed && len > 0) || !plain_out)
                return -EINVAL;
        if (chunk >= h->n_chunks)
                return -ERANGE;
        uint32_t plen = chunk_plain_len(h, chunk);
        if (!chunk_stored(h, chunk)) {
                memset(plain_out, 0, plen);
                return len == 0 ? 0 : -EBADMSG;
        }
        if (len != (size_t) plen + SEAL_TAG_SIZE) {
                memset(plain_out, 0, plen);
                return -EBADMSG;
        }
        return chunk_decrypt(h, chunk, sealed, plen, plain_out);
}

/* Writer */

static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
        uint8_t *p = buf;
        while (n > 0) {
                ssize_t k = pread(fd, p, n, (off_t) off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO; /* shrank under us */
                p += k;
                n -= (size_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

static bool mem_is_zero(const uint8_t *p, size_t n) {
        /* the first byte alone decides most data chunks; memcmp against
         * itself shifted is libc's vectorised loop for the rest */
        return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Sets the bitmap bits of the chunks of fd that are not all zeros: the
 * holes (SEEK_DATA/SEEK_HOLE) are never read, each chunk that a data region
 * touches is read once, whole. */
static int writer_scan(struct seal_header *h, int fd) {
        const uint32_t cs = h->chunk_size;
        const size_t bufsize = MAX(cs, SCAN_BUF_MIN); /* both powers of two: a multiple of cs */
        _cleanup_free_ uint8_t *buf = malloc(bufsize);
        if (!buf)
                return -ENOMEM;
        uint8_t *bits = h->bytes + SEAL_HEADER_FIXED;
        int r = 0;
        /* chunks before next are decided */
        for (uint64_t next = 0; next < h->n_chunks;) {
                off_t data = lseek(fd, (off_t) (next * cs), SEEK_DATA);
                if (data < 0) {
                        if (errno == ENXIO)
                                break; /* only a hole is left */
                        r = negative_errno();
                        break;
                }
                if ((uint64_t) data >= h->plain_size)
                        break;
                off_t hole = lseek(fd, data, SEEK_HOLE);
                if (hole < 0) {
                        r = negative_errno();
                        break;
                }
                uint64_t end = MIN((uint64_t) hole, h->plain_size);
                uint64_t last = (end - 1) / cs; /* the last chunk this region touches */
                for (uint64_t c = MAX((uint64_t) data / cs, next); c <= last;) {
                        uint64_t from = c * cs,
                                 to = MIN(MIN((last + 1) * cs, h->plain_size), from + bufsize);
                        r = pread_full(fd, buf, to - from, from);
                        if (r < 0)
                                break;
                        for (uint64_t p = from; p < to; p += cs, c++)
                                if (!mem_is_zero(buf + (p - from), MIN(cs, to - p)))
                                        bits[c / 8] |= (uint8_t) (1u << (c % 8));
                }
                if (r < 0)
                        break;
                next = last + 1;
        }
        sodium_memzero(buf, bufsize);
        return r;
}

int seal_writer_new(int plain_fd, const uint8_t key[SEAL_KEY_SIZE], uint32_t chunk_size,
                    struct seal_writer **ret) {
        return seal_writer_new_nonce(plain_fd, key, chunk_size, NULL, ret);
}

int seal_writer_new_nonce(int plain_fd, const uint8_t key[SEAL_KEY_SIZE], uint32_t chunk_size,
                          const uint8_t nonce_base[SEAL_NONCE_BASE_SIZE], struct seal_writer **ret) {
        if (plain_fd < 0 || !key || !ret)
                return -EINVAL;
        if (chunk_size == 0)
                chunk_size = SEAL_CHUNK_DEFAULT;
        if (!chunk_size_valid(chunk_size))
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct stat st;
        if (fstat(plain_fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        _cleanup_(seal_header_freep) struct seal_header *h = NULL;
        int r = header_alloc(key, (uint64_t) st.st_size, chunk_size, &h);
        if (r < 0)
                return r;
        if (nonce_base)
                memcpy(h->bytes + MAGIC_SIZE + 16, nonce_base, SEAL_NONCE_BASE_SIZE);
        else
                randombytes_buf(h->bytes + MAGIC_SIZE + 16, SEAL_NONCE_BASE_SIZE);
        r = writer_scan(h, plain_fd);
        if (r < 0)
                return r;
        r = header_index(h);
        if (r < 0)
                return r;
        header_tag(h, h->bytes + h->header_len - SEAL_TAG_SIZE);

        _cleanup_close_ int fd = fcntl(plain_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        struct seal_writer *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->h = TAKE_PTR(h);
        w->fd = TAKE_FD(fd);
        *ret = w;
        return 0;
}

void seal_writer_free(struct seal_writer *w) {
        if (!w)
                return;
        seal_header_free(w->h);
        safe_close(w->fd);
        free(w);
}

uint64_t seal_writer_size(const struct seal_writer *w) {
        return w ? seal_header_object_size(w->h) : 0;
}

uint64_t seal_writer_stored_chunks(const struct seal_writer *w) {
        return w ? w->h->stored : 0;
}

uint64_t seal_writer_chunks(const struct seal_writer *w) {
        return w ? w->h->n_chunks : 0;
}

/* Reads stored chunk i and seals it in place: out gets its record
 * (plaintext length + tag bytes). On failure out holds no plaintext. */
static int chunk_seal(const struct seal_writer *w, uint64_t i, uint8_t *out) {
        const struct seal_header *h = w->h;
        uint32_t plen = chunk_plain_len(h, i);
        int r = pread_full(w->fd, out, plen, i * h->chunk_size);
        if (r < 0) {
                sodium_memzero(out, plen);
                return r;
        }
        uint8_t nonce[NONCE_SIZE], ad[AD_SIZE];
        chunk_nonce(h, i, nonce);
        chunk_ad(h, i, ad);
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(out, out + plen, NULL, out, plen, ad, sizeof ad,
                                                            NULL, nonce, h->key);
        return 0;
}

/* A scratch record buffer of one read_at() call, wiped when it goes. */
struct scratch {
        uint8_t *p;
        size_t size;
};

static void scratch_done(struct scratch *s) {
        if (s->p) {
                sodium_memzero(s->p, s->size);
                free(s->p);
        }
}

int seal_writer_read_at(struct seal_writer *w, uint64_t off, void *buf, size_t len) {
        if (!w || (!buf && len > 0))
                return -EINVAL;
        const struct seal_header *h = w->h;
        uint64_t size = seal_header_object_size(h);
        if (off > size || len > size - off)
                return -EINVAL;
        uint8_t *p = buf;
        if (off < h->header_len) {
                size_t k = (size_t) MIN((uint64_t) len, h->header_len - off);
                memcpy(p, h->bytes + off, k);
                p += k, off += k, len -= k;
        }
        if (len == 0)
                return 0;

        _cleanup_(scratch_done) struct scratch s = {};
        uint64_t body = off - h->header_len;
        uint64_t in = body % record_size(h); /* where the range starts in its first record */
        for (uint64_t c = chunk_select(h, body / record_size(h)); len > 0; c = chunk_next(h, c + 1)) {
                size_t rlen = chunk_plain_len(h, c) + SEAL_TAG_SIZE;
                size_t k = (size_t) MIN((uint64_t) len, rlen - in);
                if (k == rlen) {
                        /* the whole record: sealed where it goes */
                        int r = chunk_seal(w, c, p);
                        if (r < 0)
                                return r;
                } else {
                        if (!s.p) {
                                s.size = record_size(h);
                                s.p = malloc(s.size);
                                if (!s.p)
                                        return -ENOMEM;
                        }
                        int r = chunk_seal(w, c, s.p);
                        if (r < 0)
                                return r;
                        memcpy(p, s.p + in, k);
                }
                p += k, len -= k, in = 0;
        }
        return 0;
}

/* Reader */

int seal_reader_new(const uint8_t key[SEAL_KEY_SIZE], int out_fd, struct seal_reader **ret) {
        if (!key || out_fd < 0 || !ret)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct stat st;
        if (fstat(out_fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode) || st.st_size != 0)
                return -EINVAL;
        _cleanup_close_ int fd = fcntl(out_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        struct seal_reader *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        memcpy(r->key, key, SEAL_KEY_SIZE);
        r->fd = TAKE_FD(fd);
        *ret = r;
        return 0;
}

void seal_reader_expect_nonce(struct seal_reader *r, const uint8_t nonce_base[SEAL_NONCE_BASE_SIZE]) {
        memcpy(r->want_nonce, nonce_base, SEAL_NONCE_BASE_SIZE);
        r->check_nonce = true;
}

void seal_reader_free(struct seal_reader *r) {
        if (!r)
                return;
        if (r->buf) {
                sodium_memzero(r->buf, record_size(r->h));
                free(r->buf);
        }
        sodium_memzero(r->key, sizeof r->key);
        seal_header_free(r->pending);
        seal_header_free(r->h);
        safe_close(r->fd);
        free(r);
}

static int reader_fail(struct seal_reader *r, int error) {
        r->error = error;
        return error;
}

static int pwrite_full(int fd, const uint8_t *p, size_t n, uint64_t off) {
        while (n > 0) {
                ssize_t k = pwrite(fd, p, n, (off_t) off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO;
                p += k;
                n -= (size_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

/* Writes a verified chunk's plaintext at its offset, each run of blocks
 * that are not all zeros in one pwrite: the zeros stay holes. */
static int reader_write(struct seal_reader *r, uint64_t chunk, const uint8_t *plain, uint32_t plen) {
        uint64_t base = chunk * r->h->chunk_size;
        for (uint32_t at = 0; at < plen;) {
                uint32_t n = MIN((uint32_t) SPARSE_BLOCK, plen - at);
                if (mem_is_zero(plain + at, n)) {
                        at += n;
                        continue;
                }
                uint32_t end = at + n;
                while (end < plen) {
                        n = MIN((uint32_t) SPARSE_BLOCK, plen - end);
                        if (mem_is_zero(plain + end, n))
                                break;
                        end += n;
                }
                int k = pwrite_full(r->fd, plain + at, end - at, base + at);
                if (k < 0)
                        return k;
                at = end;
        }
        return 0;
}

/* Takes header bytes; 1 when the header is complete and verified. */
static int reader_header(struct seal_reader *r, const uint8_t **data, size_t *len) {
        if (r->have < SEAL_HEADER_FIXED) {
                size_t k = MIN(*len, SEAL_HEADER_FIXED - r->have);
                memcpy(r->fixed + r->have, *data, k);
                r->have += k, *data += k, *len -= k;
                if (r->have < SEAL_HEADER_FIXED)
                        return 0;
                uint32_t header_len;
                int e = fixed_check(r->fixed, &header_len);
                if (e < 0)
                        return e;
                if (r->check_nonce && memcmp(r->fixed + MAGIC_SIZE + 16, r->want_nonce, SEAL_NONCE_BASE_SIZE) != 0)
                        return -EBADMSG; /* another plaintext's sealing */
                e = header_start(r->key, r->fixed, &r->pending); /* at most SEAL_HEADER_MAX */
                if (e < 0)
                        return e;
        }
        struct seal_header *h = r->pending;
        size_t k = MIN(*len, h->header_len - r->have);
        memcpy(h->bytes + r->have, *data, k);
        r->have += k, *data += k, *len -= k;
        if (r->have < h->header_len)
                return 0;
        int e = header_finish(h);
        if (e < 0)
                return e;
        r->h = TAKE_PTR(r->pending);
        r->chunk = chunk_next(r->h, 0);
        if (r->h->stored > 0) {
                r->buf = malloc(record_size(r->h));
                if (!r->buf)
                        return -ENOMEM;
        }
        return 1;
}

int seal_reader_feed(struct seal_reader *r, const void *data, size_t len) {
        if (!r || (!data && len > 0))
                return -EINVAL;
        if (r->error)
                return r->error;
        if (r->finished)
                return -EINVAL;
        const uint8_t *p = data;
        while (len > 0) {
                if (!r->h) {
                        int e = reader_header(r, &p, &len);
                        if (e < 0)
                                return reader_fail(r, e);
                        continue;
                }
                const struct seal_header *h = r->h;
                if (r->chunk >= h->n_chunks)
                        return reader_fail(r, -EBADMSG); /* past the last record */
                uint32_t plen = chunk_plain_len(h, r->chunk);
                size_t rlen = (size_t) plen + SEAL_TAG_SIZE;
                int e;
                if (r->buffered == 0 && len >= rlen) {
                        /* a whole record in the piece: opened from there */
                        e = chunk_decrypt(h, r->chunk, p, plen, r->buf);
                        p += rlen, len -= rlen;
                } else {
                        size_t k = MIN(len, rlen - r->buffered);
                        memcpy(r->buf + r->buffered, p, k);
                        r->buffered += k, p += k, len -= k;
                        if (r->buffered < rlen)
                                break;
                        r->buffered = 0;
                        e = chunk_decrypt(h, r->chunk, r->buf, plen, r->buf);
                }
                if (e >= 0)
                        e = reader_write(r, r->chunk, r->buf, plen);
                if (e < 0)
                        return reader_fail(r, e);
                r->chunk = chunk_next(h, r->chunk + 1);
        }
        return 0;
}

int seal_reader_finish(struct seal_reader *r) {
        if (!r)
                return -EINVAL;
        if (r->error)
                return r->error;
        if (r->finished)
                return 0;
        if (!r->h || r->chunk < r->h->n_chunks)
                return reader_fail(r, -EBADMSG); /* cut short */
        if (ftruncate(r->fd, (off_t) r->h->plain_size) < 0)
                return reader_fail(r, negative_errno());
        r->finished = true;
        return 0;
}
