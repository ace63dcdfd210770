/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Deltas against a base: what a suspended sandbox stores of its disk and
 * its RAM is what differs from its template's (docs/storage.md, "What a
 * suspend stores"). The base is the template build the sandbox started
 * from; applying a delta to the same base gives the file back byte for
 * byte, and the caller verifies that with the digest it kept of the file.
 *
 * A disk delta (DELTA_DISK_MAGIC), integers little-endian:
 *
 *   0   magic        8   "ALKDISK1"
 *   8   size         u64 the target file's size
 *   16  base_size    u64 the base's size when the delta was made
 *   24  n_ranges     u32
 *   28  reserved     u32 0
 *   32  ranges       n_ranges x { u64 off, u64 len, u64 data }: the ranges
 *                    of the target that differ from the base, in order,
 *                    apart, within size; data is where their bytes are in
 *                    this file (a multiple of DELTA_BLOCK past the header),
 *                    or 0 for a range that is zeros (a hole)
 *   ...  the data of the ranges, each at its data offset
 *
 * Every range's offset and length are multiples of DELTA_BLOCK, except
 * that the last may end at size. The data is cloned into the delta from
 * the target (FICLONERANGE) where the file system shares blocks, and
 * cloned out of it when applied, so a delta on btrfs costs metadata only.
 *
 * A RAM delta (DELTA_RAM_MAGIC) is one zstd frame holding
 *
 *   magic "ALKRAMD1", u64 size (the target's), u64 base_size, then records:
 *   0x01 LIT  u32 len, len bytes     the target's next bytes
 *   0x02 REF  u64 off                DELTA_PAGE bytes of the base from off
 *   0x03 END
 *
 * of a QEMU migration stream (the target) against the RAM file the VM's
 * memory started from (the base): a page record of the stream's "mem"
 * block whose page is the base's page at the same address becomes a REF.
 * The scan only proposes REFs; each is checked byte for byte, so a delta
 * is exact whatever the stream holds. What is left is zstd-compressed.
 *
 * Every function reads and writes its files from their start (pread,
 * pwrite), whatever the fds' offsets; out is an empty file.
 * They check everything a delta says before they act on it (it
 * comes back from an object store): -EBADMSG for a delta that is not
 * well-formed or does not fit its base. Functions return 0 or a negative
 * errno; nothing is logged.
 */

#include <stddef.h>
#include <stdint.h>

#define DELTA_DISK_MAGIC "ALKDISK1"
#define DELTA_RAM_MAGIC "ALKRAMD1"
#define DELTA_BLOCK 4096u
#define DELTA_PAGE 4096u
/* Ranges a disk delta may hold: a fragmented 1 TiB disk's worth. */
#define DELTA_RANGES_MAX (1u << 24)
/* The largest LIT record the writer makes (the reader takes up to this). */
#define DELTA_LIT_MAX (1u << 20)

struct delta_stats {
        uint64_t size;      /* the target's size */
        uint64_t changed;   /* bytes of it that differ from the base (data and zeroed) */
        uint64_t written;   /* bytes of the delta */
        uint64_t shared;    /* disk: bytes found unchanged from shared extents; RAM: pages by REF */
        uint64_t compared;  /* disk: bytes compared byte for byte */
        uint32_t ranges;    /* disk: ranges; RAM: LIT records */
};

/* Writes the disk delta of target against base to out (an empty file).
 * Extents the two files share on the file system (FIEMAP: the same
 * physical blocks) are unchanged without being read; the rest is compared
 * block by block, holes as zeros. */
int delta_disk_make(int base_fd, int target_fd, int out_fd, struct delta_stats *ret_stats);
/* Rebuilds the target into out (an empty file): base cloned (or copied),
 * then every range of delta written over it. -EBADMSG for a delta that is
 * malformed or was made against a base of another size. */
int delta_disk_apply(int base_fd, int delta_fd, int out_fd);

/* Writes the RAM delta of target (a migration stream) against base (the
 * RAM file) to out, zstd at level. */
int delta_ram_make(int base_fd, int target_fd, int out_fd, int level, struct delta_stats *ret_stats);
/* Rebuilds the target into out (an empty file). -EBADMSG as above. */
int delta_ram_apply(int base_fd, int delta_fd, int out_fd);
