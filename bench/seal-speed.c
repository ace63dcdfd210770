/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What sealing costs an artifact upload and unsealing its download
 * (lib/seal): a plaintext file of SIZE MiB in 64 KiB chunks, 40% random
 * data, 15% zeros written as data, 45% holes (a snapshot disk image is
 * mostly holes), in the page cache. Sealing: seal_writer_new (the scan)
 * plus reading the whole object in 8 MiB parts, as an S3 multipart upload
 * does, from THREADS threads; unsealing: seal_reader fed in 1 MiB pieces
 * into a new file beside the plaintext. MB/s of plaintext (and of the
 * stored data), median of RUNS. The raw baseline: libsodium's
 * XChaCha20-Poly1305 over the same stored bytes in memory, nothing else.
 *
 *   build/bench/seal-speed [SIZE_MIB [RUNS [THREADS [DIR]]]]   (256 5 1 /tmp)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "macros.h"
#include "seal.h"
#include "util.h"

#define PART (8u << 20)
#define PIECE (1u << 20)

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, (size_t) n, sizeof *v, cmp_double);
        return v[n / 2];
}

struct part_job {
        struct seal_writer *w;
        uint64_t size;
        unsigned index, threads;
        int r;
};

/* Parts index, index + threads, ... each into a buffer of its own. */
static void *part_thread(void *arg) {
        struct part_job *j = arg;
        uint8_t *buf = malloc(PART);
        if (!buf) {
                j->r = -ENOMEM;
                return NULL;
        }
        for (uint64_t off = (uint64_t) j->index * PART; off < j->size && j->r == 0;
             off += (uint64_t) j->threads * PART)
                j->r = seal_writer_read_at(j->w, off, buf, (size_t) MIN((uint64_t) PART, j->size - off));
        free(buf);
        return NULL;
}

int main(int argc, char **argv) {
        uint64_t size = (argc > 1 ? strtoull(argv[1], NULL, 10) : 256) << 20;
        int runs = argc > 2 ? atoi(argv[2]) : 5;
        unsigned threads = argc > 3 ? (unsigned) atoi(argv[3]) : 1;
        const char *dir = argc > 4 ? argv[4] : "/tmp";
        if (size == 0 || runs < 1 || runs > 99 || threads < 1 || threads > 64 || sodium_init() < 0)
                return 2;
        const uint32_t cs = SEAL_CHUNK_DEFAULT;
        uint8_t key[SEAL_KEY_SIZE];
        randombytes_buf(key, sizeof key);

        _cleanup_free_ char *plain_path = strdup_printf("%s/seal-speed-plain-XXXXXX", dir);
        _cleanup_close_ int plain = mkostemp(plain_path, O_CLOEXEC);
        if (plain < 0 || ftruncate(plain, (off_t) size) < 0) {
                perror("plaintext file");
                return 1;
        }
        unlink(plain_path);
        _cleanup_free_ uint8_t *chunk = malloc(cs), *zeros = calloc(1, cs);
        if (!chunk || !zeros)
                return 1;
        uint64_t x = 88172645463325252ull, data = 0;
        for (uint64_t off = 0; off < size; off += cs) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                unsigned pick = (unsigned) (x % 100);
                size_t n = (size_t) MIN((uint64_t) cs, size - off);
                if (pick < 40) {
                        randombytes_buf(chunk, n);
                        chunk[0] |= 1;
                        data += n;
                } else if (pick >= 55)
                        continue; /* a hole */
                if (pwrite(plain, pick < 40 ? chunk : zeros, n, (off_t) off) != (ssize_t) n) {
                        perror("pwrite");
                        return 1;
                }
        }
        printf("plaintext %lu MiB, %.1f%% data, 64 KiB chunks, %u thread(s), median of %d runs\n",
               (unsigned long) (size >> 20), 100.0 * (double) data / (double) size, threads, runs);

        /* sealing */
        double t_seal[99], t_scan[99];
        uint64_t sealed = 0, stored = 0;
        for (int i = 0; i < runs; i++) {
                uint64_t t0 = now_monotonic_ns();
                struct seal_writer *w = NULL;
                if (seal_writer_new(plain, key, cs, &w) < 0)
                        return 1;
                uint64_t t1 = now_monotonic_ns();
                sealed = seal_writer_size(w);
                stored = seal_writer_stored_chunks(w);
                struct part_job jobs[64];
                pthread_t t[64];
                for (unsigned k = 0; k < threads; k++) {
                        jobs[k] = (struct part_job){.w = w, .size = sealed, .index = k, .threads = threads};
                        if (pthread_create(&t[k], NULL, part_thread, &jobs[k]) != 0)
                                return 1;
                }
                for (unsigned k = 0; k < threads; k++)
                        if (pthread_join(t[k], NULL) != 0 || jobs[k].r < 0)
                                return 1;
                uint64_t t2 = now_monotonic_ns();
                seal_writer_free(w);
                t_seal[i] = (double) (t2 - t0) / 1e9;
                t_scan[i] = (double) (t1 - t0) / 1e9;
        }

        /* the object once, in memory, for the reader */
        _cleanup_free_ uint8_t *obj = malloc(sealed);
        struct seal_writer *w = NULL;
        if (!obj || seal_writer_new(plain, key, cs, &w) < 0 || seal_writer_read_at(w, 0, obj, sealed) < 0)
                return 1;
        seal_writer_free(w);

        double t_open[99];
        for (int i = 0; i < runs; i++) {
                _cleanup_free_ char *out_path = strdup_printf("%s/seal-speed-out-XXXXXX", dir);
                _cleanup_close_ int out = mkostemp(out_path, O_CLOEXEC);
                if (out < 0)
                        return 1;
                unlink(out_path);
                uint64_t t0 = now_monotonic_ns();
                struct seal_reader *r = NULL;
                if (seal_reader_new(key, out, &r) < 0)
                        return 1;
                for (uint64_t off = 0; off < sealed; off += PIECE)
                        if (seal_reader_feed(r, obj + off, (size_t) MIN((uint64_t) PIECE, sealed - off)) < 0)
                                return 1;
                if (seal_reader_finish(r) < 0)
                        return 1;
                uint64_t t1 = now_monotonic_ns();
                seal_reader_free(r);
                t_open[i] = (double) (t1 - t0) / 1e9;
        }

        /* the raw baseline: the stored bytes through the AEAD, in memory */
        double t_raw[99];
        uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES] = {}, ad[40] = {}, tag[16];
        for (int i = 0; i < runs; i++) {
                uint64_t t0 = now_monotonic_ns();
                for (uint64_t c = 0; c < stored; c++) {
                        memcpy(nonce + 16, &c, 8);
                        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(chunk, tag, NULL, chunk, cs, ad,
                                                                            sizeof ad, NULL, nonce, key);
                }
                t_raw[i] = (double) (now_monotonic_ns() - t0) / 1e9;
        }

        double mb = (double) size / 1e6, mb_data = (double) stored * cs / 1e6;
        double s = median(t_seal, runs), sc = median(t_scan, runs), o = median(t_open, runs),
               raw = median(t_raw, runs);
        printf("object   %.1f MB (%lu of %lu chunks stored)\n", (double) sealed / 1e6,
               (unsigned long) stored, (unsigned long) ((size + cs - 1) / cs));
        printf("seal     %7.1f ms  %7.0f MB/s plaintext  %7.0f MB/s stored data  (scan alone %.1f ms)\n",
               s * 1e3, mb / s, mb_data / s, sc * 1e3);
        printf("unseal   %7.1f ms  %7.0f MB/s plaintext  %7.0f MB/s stored data\n", o * 1e3, mb / o,
               mb_data / o);
        printf("raw AEAD %7.1f ms                         %7.0f MB/s stored data (1 thread, in memory)\n",
               raw * 1e3, mb_data / raw);
        return 0;
}
