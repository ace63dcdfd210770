/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Hostile build inputs, checked before anything is unpacked
 * (docs/templates.md, "Limits"; docs/security.md, "Hostile build
 * inputs"): a template build's context (a tar the client uploads) and an
 * OCI image's layers (tars, one after the other). Each archive is read
 * once, as a stream, with libarchive: tar (ustar, pax, GNU) plain or
 * compressed with gzip, bzip2, xz or zstd, nothing else, and no external
 * program. No file is written, opened or looked up: the checker sees only
 * the bytes it is handed.
 *
 * A build context (BUILDCTX_CONTEXT) is refused for an entry that
 *   - is an absolute path, or has a ".." component;
 *   - is a symbolic link whose target is absolute, climbs out of the
 *     context, or climbs ("..") anywhere but at its start;
 *   - lies under a symbolic link or a file seen earlier;
 *   - is a hard link to a path outside, or to anything but a regular file
 *     seen earlier;
 *   - is a character or block device, a FIFO or a socket;
 *   - has the setuid bit, or the setgid bit on anything but a directory;
 *   - names a path seen earlier as another kind of entry (a directory
 *     that becomes a link, a link given twice);
 * and for the limits: entries, a path's bytes and components, one file's
 * size (a sparse file's apparent size), the sizes added up, and the ratio
 * of the bytes unpacked to the bytes read (a decompression bomb).
 *
 * OCI layers (BUILDCTX_LAYERS) keep what an image needs: absolute and
 * climbing link targets (they resolve inside the image's root), setuid
 * files, FIFOs, and hard links to an earlier layer's files; they are
 * refused for absolute and ".." paths, devices, an entry under a
 * symbolic link (of this layer or an earlier one), a whiteout (".wh.")
 * of "." or "..", or an unknown ".wh..wh." marker, and the limits, taken
 * over all the layers fed.
 *
 * Untrusted bytes: every count and size is bounded, the memory kept is
 * bounded by the limits (names_bytes), fuzzed (tests/fuzz/fuzz-buildctx.c).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define BUILDCTX_ERR_MAX 512

enum buildctx_kind {
        BUILDCTX_CONTEXT, /* a template build's context */
        BUILDCTX_LAYERS,  /* an OCI image's layers, lowest first */
};

struct buildctx_limits {
        uint64_t entries;     /* entries in all (every layer's) */
        uint64_t total_bytes; /* the regular files' sizes added up */
        uint64_t file_bytes;  /* one file's size (a sparse one's apparent size) */
        uint64_t names_bytes; /* the bytes of the paths kept to check later entries */
        uint64_t ratio;       /* bytes unpacked per byte read, at most ... */
        uint64_t ratio_from;  /* ... once this many bytes were unpacked */
        unsigned path_bytes;  /* one path's (and one link target's) */
        unsigned depth;       /* one path's components */
};

/* The limits of a build context (docs/templates.md): 200000 entries, 2 GiB
 * in all, 1 GiB a file, paths of 1024 bytes and 64 components, at most
 * 100 times the compressed size past 16 MiB. */
extern const struct buildctx_limits buildctx_context_limits;
/* The limits of an OCI image's layers: 1000000 entries, 16 GiB in all,
 * 8 GiB a file, paths of 4096 bytes and 256 components, at most 200 times
 * the compressed size past 256 MiB. */
extern const struct buildctx_limits buildctx_layer_limits;

struct buildctx;

/* A checker for kind, with limits (copied; NULL: the kind's defaults). */
int buildctx_new(enum buildctx_kind kind, const struct buildctx_limits *limits, struct buildctx **ret);
/* NULL-safe. */
void buildctx_free(struct buildctx *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct buildctx *, buildctx_free);

/* Reads one archive (a context, or the next layer) to its end: from fd's
 * current offset by read(), or from memory. 0 when every entry passed;
 * -EBADMSG for a refused entry or an archive that is no tar, -EFBIG past
 * a limit, -ENOMEM, -EIO for a read that failed; err (BUILDCTX_ERR_MAX
 * bytes) then says which entry and why, in words a client can act on. A
 * checker that refused one archive refuses every later one. */
int buildctx_feed_fd(struct buildctx *c, int fd, char *err);
int buildctx_feed_mem(struct buildctx *c, const void *data, size_t size, char *err);

/* Whether the archives fed hold path (relative, as a spec names it: "a/b",
 * "./a/", "." for the root): an entry of that name, or a directory made
 * for the entries under it. */
bool buildctx_has(const struct buildctx *c, const char *path);

/* Entries read so far (every archive's), and the regular files' sizes
 * added up. */
uint64_t buildctx_entries(const struct buildctx *c);
uint64_t buildctx_total_bytes(const struct buildctx *c);
