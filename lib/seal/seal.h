/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Sealed artifacts: the encrypted, sparse, chunked form in which snapshot
 * artifacts (disk images of tens of GiB that are mostly holes, RAM files)
 * are kept in an object store. The plaintext is cut into chunks that are
 * encrypted and authenticated each on its own (XChaCha20-Poly1305), so a
 * ranged read of a few chunks works; all-zero chunks are not stored at all;
 * an authenticated header says which chunks are, so that a tampered,
 * swapped, reordered, truncated or extended object is refused. The caller
 * supplies a 32-byte key per artifact (key management is elsewhere).
 *
 * Format, integers little-endian:
 *
 *   header
 *     magic       8   "ALKSEAL1" (the version is its last character)
 *     header_len  u32 bytes of the whole header, bitmap and tag included:
 *                     exactly 40 + bitmap_len + 16
 *     chunk_size  u32 a power of two, SEAL_CHUNK_MIN .. SEAL_CHUNK_MAX
 *     plain_size  u64 bytes of plaintext, <= SEAL_PLAIN_MAX
 *     nonce_base  16  random per artifact (per sealing, in fact)
 *     bitmap      bitmap_len = ceil(n_chunks / 8) bytes, n_chunks =
 *                     ceil(plain_size / chunk_size); bit i (LSB first in
 *                     byte i / 8) set = chunk i is stored; the padding bits
 *                     after bit n_chunks - 1 are zero
 *     tag         16  XChaCha20-Poly1305 tag of the empty message, AD =
 *                     every header byte before the tag, nonce = nonce_base
 *                     || u64 0xffffffffffffffff (no chunk has that index)
 *   body: for each chunk i whose bit is set, in increasing i,
 *     ciphertext  the chunk's plaintext encrypted: chunk_size bytes, the
 *                 last chunk of the artifact plain_size - i * chunk_size
 *     tag         16
 *     nonce = nonce_base || u64 i, AD = BLAKE2b-256(every header byte
 *     before the tag) || u64 i
 *
 * So a stored chunk's record is chunk_size + 16 bytes (only the very last
 * chunk is shorter, and it comes last), and the record of chunk i starts at
 * header_len + rank(i) * (chunk_size + 16), where rank(i) is the number of
 * stored chunks before i; the object is header_len + the records' bytes.
 * Each chunk's AD names the exact header (nonce_base, sizes, bitmap) and
 * its own index: a chunk moved to another place, to another artifact
 * sealed with another key, or with the same key (a fresh nonce_base each
 * sealing), does not open. The writer stores a chunk exactly when a byte of
 * it is not zero; a reader accepts a stored all-zero chunk (it is
 * authentic) and leaves it a hole all the same. The format binds chunks to
 * their header and the header to the key, not to a name: whoever reuses a
 * key for two artifacts must tell them apart some other way.
 *
 * Limits: the header is at most SEAL_HEADER_MAX bytes (checked from its 40
 * fixed bytes, before anything is allocated for the rest), which allows
 * 2^25 - 448 chunks: 128 GiB at 4 KiB chunks, SEAL_PLAIN_MAX (1 TiB) at the
 * default 64 KiB. A writer refuses a file it could not describe (-EFBIG).
 *
 * Rules: functions return 0 or a negative errno; ret_ out-parameters are
 * written only on success. The library never logs. Every refusal of
 * untrusted bytes (wrong key, tampering, truncation, bounds) is -EBADMSG.
 * Keys are copied into the objects and wiped when they are freed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define SEAL_KEY_SIZE 32
#define SEAL_TAG_SIZE 16
#define SEAL_NONCE_BASE_SIZE 16
#define SEAL_HEADER_FIXED 40 /* magic .. nonce_base: enough to know header_len */
#define SEAL_CHUNK_MIN (UINT32_C(4) << 10)
#define SEAL_CHUNK_MAX (UINT32_C(4) << 20)
#define SEAL_CHUNK_DEFAULT (UINT32_C(64) << 10)
#define SEAL_PLAIN_MAX (UINT64_C(1) << 40)
#define SEAL_HEADER_MAX (UINT32_C(4) << 20)

/*
 * Writer: random access to the sealed bytes of a plaintext file, so that an
 * uploader can read any range of the object, from several threads at once
 * (S3 multipart parts in parallel, a part retried). Nothing is sealed ahead:
 * each read encrypts the chunks it touches, so the same range reads the
 * same bytes every time. The plaintext must not change while a writer
 * reads it (snapshot artifacts do not); a file that shrank gives -EIO.
 */
struct seal_writer;

/*
 * Scans plain_fd (a regular file, read with pread; SEEK_DATA moves its
 * file offset anywhere) once to find the stored chunks: holes are skipped
 * without reading them (SEEK_DATA/SEEK_HOLE), the data regions are checked
 * for all-zero chunks. fstat gives plain_size. Keeps a close-on-exec dup of plain_fd:
 * the caller may close its own. chunk_size 0 means SEAL_CHUNK_DEFAULT. A
 * fresh random nonce_base each call. -EINVAL for a bad chunk_size or a fd
 * that is not a regular file, -EFBIG when the file is over SEAL_PLAIN_MAX
 * or its header would be over SEAL_HEADER_MAX.
 */
int seal_writer_new(int plain_fd, const uint8_t key[SEAL_KEY_SIZE], uint32_t chunk_size,
                    struct seal_writer **ret);
/* As seal_writer_new(), with the caller's nonce_base (NULL: random). The
 * same key and nonce_base must never seal two different plaintexts (the
 * keystream would repeat): derive it from the key and the plaintext's
 * hash, as SIV does, which makes sealing deterministic, so that a retried
 * upload sends the same bytes and can resume. */
int seal_writer_new_nonce(int plain_fd, const uint8_t key[SEAL_KEY_SIZE], uint32_t chunk_size,
                          const uint8_t nonce_base[SEAL_NONCE_BASE_SIZE], struct seal_writer **ret);
/* The sealed object's size in bytes, header included. */
uint64_t seal_writer_size(const struct seal_writer *w);
/* How many chunks the object stores (not all-zero), and how many there are. */
uint64_t seal_writer_stored_chunks(const struct seal_writer *w);
uint64_t seal_writer_chunks(const struct seal_writer *w);
/*
 * Fills buf with the len sealed bytes at off, any range (header and chunks
 * across their boundaries) within seal_writer_size(): -EINVAL when off +
 * len is beyond it; -EIO when the plaintext shrank. Thread-safe: the
 * writer is read-only after seal_writer_new(); chunks wholly inside the
 * range are sealed in place in buf, the partial ones at its ends in a
 * scratch buffer of this call, with no lock at all.
 */
int seal_writer_read_at(struct seal_writer *w, uint64_t off, void *buf, size_t len);
/* Wipes the key, closes the dup and frees; NULL is fine. */
void seal_writer_free(struct seal_writer *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct seal_writer *, seal_writer_free);

/*
 * Reader: streaming decode into a plaintext file. Bytes are fed in order
 * from offset 0, in pieces of any size (as they arrive from a download);
 * memory is bounded by the header plus one chunk. The header is verified
 * before anything else is used, each chunk before a byte of it is written.
 * Stored chunks are written with pwrite at their offsets, except for the
 * all-zero 4 KiB blocks in them; all-zero chunks are never written; so the
 * output is sparse. After a refusal, what out_fd holds is what verified
 * (the chunks before the bad byte) and the caller should throw it away.
 * Not thread-safe: one reader is one stream.
 */
struct seal_reader;

/* out_fd: an empty regular file open for writing (-EINVAL otherwise: its
 * old bytes would show through the holes); a close-on-exec dup is kept. */
int seal_reader_new(const uint8_t key[SEAL_KEY_SIZE], int out_fd, struct seal_reader **ret);
/* Before the first feed: refuse (-EBADMSG) an object whose nonce_base is
 * not this one. A sealer that derived it from the plaintext's digest
 * (seal_writer_new_nonce()) thereby names the plaintext: with this check a
 * reader knows the object is that plaintext's and not another's sealed
 * with the same key, without hashing what it wrote. */
void seal_reader_expect_nonce(struct seal_reader *r, const uint8_t nonce_base[SEAL_NONCE_BASE_SIZE]);
/* Consumes len bytes of the object. -EBADMSG for a bad header (bounds,
 * wrong key, tampering), a chunk that does not open, or bytes past the
 * object's end; -errno when writing fails. Errors are sticky: every later
 * feed and the finish return the same. */
int seal_reader_feed(struct seal_reader *r, const void *data, size_t len);
/* After the last byte: -EBADMSG when the object was cut short (or an error
 * of a feed), else sets out_fd's size to plain_size. */
int seal_reader_finish(struct seal_reader *r);
/* Wipes the key and the chunk buffer, closes the dup; NULL is fine. */
void seal_reader_free(struct seal_reader *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct seal_reader *, seal_reader_free);

/*
 * Ranged access, for a reader that fetches only part of an object: parse
 * and verify the header (the first SEAL_HEADER_FIXED bytes say how long it
 * is), locate the chunks of a plaintext range, fetch their records and open
 * them. A parsed header is read-only: share it between threads.
 */
struct seal_header;

/*
 * Verifies the header at the start of the len bytes of data (bytes after it
 * are ignored). -EAGAIN when len is too short to know or verify it, with
 * *ret_need (may be NULL) the total length needed: SEAL_HEADER_FIXED, then
 * header_len; -EBADMSG when it is bad (decided from the fixed fields before
 * asking for more, so an absurd header_len is never fetched or allocated).
 */
int seal_header_parse(const uint8_t key[SEAL_KEY_SIZE], const void *data, size_t len, size_t *ret_need,
                      struct seal_header **ret);
void seal_header_free(struct seal_header *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct seal_header *, seal_header_free);

uint64_t seal_header_plain_size(const struct seal_header *h);
uint32_t seal_header_chunk_size(const struct seal_header *h);
uint64_t seal_header_chunks(const struct seal_header *h);        /* n_chunks */
uint64_t seal_header_stored_chunks(const struct seal_header *h);
uint32_t seal_header_size(const struct seal_header *h);          /* header_len */
uint64_t seal_header_object_size(const struct seal_header *h);   /* the whole object */

/*
 * Where chunk's record is in the object: *ret_off and *ret_len (its sealed
 * bytes: plaintext + SEAL_TAG_SIZE), and *ret_hole false; for a chunk that
 * is not stored (all zeros) *ret_hole is true and off and len are 0. Any
 * ret_ may be NULL. -ERANGE when chunk >= seal_header_chunks(). O(1): a
 * table counts the stored chunks every 512.
 */
int seal_chunk_locate(const struct seal_header *h, uint64_t chunk, uint64_t *ret_off, uint32_t *ret_len,
                      bool *ret_hole);
/*
 * Verifies and decrypts chunk's record (len bytes as located) into
 * plain_out, which holds the chunk's plaintext: chunk_size bytes, the last
 * chunk's plain_size - chunk * chunk_size. A hole opens from len 0 as
 * zeros. -EBADMSG when the record does not open or len is not its length
 * (plain_out is then zeroed: never unverified plaintext), -ERANGE for a
 * chunk past the end. sealed and plain_out must not overlap.
 */
int seal_chunk_open(const struct seal_header *h, uint64_t chunk, const void *sealed, size_t len,
                    void *plain_out);
