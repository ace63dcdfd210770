/* SPDX-License-Identifier: Apache-2.0 */
/* lib/delta: disk and RAM deltas give their target back, byte for byte,
 * and refuse what is not a delta of their base. */
#include <errno.h>
#include <fcntl.h>
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

#include "delta.h"
#include "macros.h"
#include "unit-skip.h"
#include "util.h"

#define MIB (1u << 20)

static char *path_in(const char *dir, const char *name) {
        char *p = strdup_printf("%s/%s", dir, name);
        assert_non_null(p);
        return p;
}

static int create(const char *path) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        return fd;
}

static void fill_random(uint8_t *p, size_t n) {
        assert_int_equal(random_bytes(p, n), 0);
}

static void write_at(int fd, uint64_t off, const void *p, size_t n) {
        assert_int_equal(fd_pwrite_all(fd, p, n, off), 0);
}

/* Whether the whole files a and b hold the same bytes. */
static void assert_same(int a, int b) {
        struct stat sa, sb;
        assert_int_equal(fstat(a, &sa), 0);
        assert_int_equal(fstat(b, &sb), 0);
        assert_int_equal(sa.st_size, sb.st_size);
        _cleanup_free_ uint8_t *x = malloc(MIB), *y = malloc(MIB);
        for (off_t off = 0; off < sa.st_size; off += MIB) {
                size_t n = (size_t) MIN((off_t) MIB, sa.st_size - off);
                assert_int_equal(fd_pread_exact(a, x, n, (uint64_t) off), 0);
                assert_int_equal(fd_pread_exact(b, y, n, (uint64_t) off), 0);
                assert_memory_equal(x, y, n);
        }
}

/* base: 4 MiB, random data with a 1 MiB hole in the middle; target: a
 * copy (clone where dir can) with a block changed, a block zeroed, the
 * hole partly written, and 64 KiB more at the end. */
static void disk_case(const char *dir, bool clone) {
        _cleanup_free_ char *bp = path_in(dir, "base"), *tp = path_in(dir, "target"), *dp = path_in(dir, "delta"),
                           *op = path_in(dir, "out");
        _cleanup_free_ uint8_t *buf = malloc(4 * MIB);
        assert_non_null(buf);
        fill_random(buf, 4 * MIB);
        memset(buf + MIB, 0, MIB);
        int base = create(bp);
        write_at(base, 0, buf, MIB);
        write_at(base, 2 * MIB, buf + 2 * MIB, 2 * MIB);
        assert_int_equal(fsync(base), 0);
        int target = create(tp);
        bool cloned = false;
        assert_int_equal(fd_clone_or_copy(base, target, &cloned), 0);
        assert_int_equal(cloned, clone);
        uint8_t block[DELTA_BLOCK];
        fill_random(block, sizeof block);
        write_at(target, 5 * DELTA_BLOCK, block, sizeof block);
        memset(block, 0, sizeof block);
        write_at(target, 2 * MIB + 7 * DELTA_BLOCK, block, sizeof block);
        fill_random(buf, 3 * DELTA_BLOCK);
        write_at(target, MIB + 3 * DELTA_BLOCK, buf, 3 * DELTA_BLOCK);
        write_at(target, 4 * MIB, buf, 64 << 10);
        assert_int_equal(fsync(target), 0);

        int delta = create(dp), out = create(op);
        struct delta_stats st;
        assert_int_equal(delta_disk_make(base, target, delta, &st), 0);
        assert_int_equal(st.size, 4 * MIB + (64 << 10));
        /* what changed and no more: 1 + 1 + 3 blocks, and the 64 KiB */
        assert_int_equal(st.changed, 5 * DELTA_BLOCK + (64 << 10));
        if (clone)
                assert_true(st.shared >= 3 * MIB - 3 * DELTA_BLOCK); /* not read */
        else
                assert_int_equal(st.shared, 0);
        assert_int_equal(delta_disk_apply(base, delta, out), 0);
        assert_same(target, out);

        /* the base of another size, a broken delta: refused, nothing written */
        int other = create(path_in(dir, "other"));
        write_at(other, 0, buf, DELTA_BLOCK);
        int out2 = create(path_in(dir, "out2"));
        assert_int_equal(delta_disk_apply(other, delta, out2), -EBADMSG);
        struct stat s2;
        assert_int_equal(fstat(out2, &s2), 0);
        assert_int_equal(s2.st_size, 0);
        uint8_t bad[8] = "ALKDISK0";
        write_at(delta, 0, bad, sizeof bad);
        assert_int_equal(delta_disk_apply(base, delta, out2), -EBADMSG);
        write_at(delta, 0, DELTA_DISK_MAGIC, 8);
        uint8_t huge[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f };
        write_at(delta, 32 + 8, huge, sizeof huge); /* the first range's length */
        assert_int_equal(delta_disk_apply(base, delta, out2), -EBADMSG);
        assert_int_equal(ftruncate(delta, 20), 0);
        assert_int_equal(delta_disk_apply(base, delta, out2), -EBADMSG);
        close(other);
        close(out2);
        close(base);
        close(target);
        close(delta);
        close(out);
        assert_int_equal(rm_rf(dir), 0);
}

static void test_disk_copy(void **state) {
        (void) state;
        char dir[] = "/tmp/test-delta-XXXXXX";
        assert_non_null(mkdtemp(dir));
        disk_case(dir, false);
}

/* tmpfs has no FIEMAP: every byte is compared */
static void test_disk_no_fiemap(void **state) {
        (void) state;
        char dir[] = "/dev/shm/test-delta-XXXXXX";
        assert_non_null(mkdtemp(dir));
        disk_case(dir, false);
}

static void test_disk_reflink(void **state) {
        (void) state;
        const char *reflink = getenv("AIRLOCK_TEST_REFLINK_DIR");
        if (!reflink || !*reflink)
                unit_skip("AIRLOCK_TEST_REFLINK_DIR is not set: name a directory on a filesystem with reflinks "
                          "(btrfs, XFS with reflink=1); ./test.sh sets it to its btrfs test volume");
        _cleanup_free_ char *dir = strdup_printf("%s/test-delta-XXXXXX", reflink);
        assert_non_null(mkdtemp(dir));
        disk_case(dir, true);
}

/* A migration stream as QEMU 7.2 writes it, enough of it: a page record of
 * block "mem" with its name, CONTINUE records, a ZERO record, device
 * bytes between them. */
static void put_be64(uint8_t *p, uint64_t v) {
        for (int i = 7; i >= 0; i--, v >>= 8)
                p[i] = (uint8_t) v;
}

static size_t page_record(uint8_t *p, uint64_t addr, unsigned flags, const char *block, const uint8_t *page) {
        size_t n = 0;
        put_be64(p, addr | flags);
        n += 8;
        if (block) {
                p[n++] = (uint8_t) strlen(block);
                memcpy(p + n, block, strlen(block));
                n += strlen(block);
        }
        if (page) {
                memcpy(p + n, page, DELTA_PAGE);
                n += DELTA_PAGE;
        } else
                p[n++] = 0;
        return n;
}

static void test_ram(void **state) {
        (void) state;
        char dir[] = "/tmp/test-delta-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *bp = path_in(dir, "mem"), *tp = path_in(dir, "state"), *dp = path_in(dir, "delta"),
                           *op = path_in(dir, "out");
        const size_t pages = 64;
        _cleanup_free_ uint8_t *mem = malloc(pages * DELTA_PAGE), *s = malloc(2 * pages * (DELTA_PAGE + 16) + 4096);
        assert_non_null(mem);
        assert_non_null(s);
        fill_random(mem, pages * DELTA_PAGE);
        int base = create(bp);
        write_at(base, 0, mem, pages * DELTA_PAGE);

        size_t n = 0;
        memcpy(s, "QEVM\0\0\0\3device-bytes", 20); /* a header of sorts */
        n = 20;
        n += page_record(s + n, 0, 0x08, "mem", mem);                     /* same as the base */
        for (size_t i = 1; i < 40; i++)
                n += page_record(s + n, i * DELTA_PAGE, 0x28, NULL, mem + i * DELTA_PAGE);
        uint8_t changed[DELTA_PAGE];
        fill_random(changed, sizeof changed);
        n += page_record(s + n, 40 * DELTA_PAGE, 0x28, NULL, changed);     /* a dirty page */
        n += page_record(s + n, 41 * DELTA_PAGE, 0x22, NULL, NULL);        /* a zero page */
        n += page_record(s + n, 42 * DELTA_PAGE, 0x28, NULL, mem + 42 * DELTA_PAGE);
        n += page_record(s + n, pages * DELTA_PAGE, 0x28, NULL, changed); /* past the base */
        n += page_record(s + n, 0, 0x08, "pc.rom", changed);
        memcpy(s + n, "\x10tail-of-device-state", 21);
        n += 21;
        int target = create(tp);
        write_at(target, 0, s, n);

        int delta = create(dp), out = create(op);
        struct delta_stats st;
        assert_int_equal(delta_ram_make(base, target, delta, 3, &st), 0);
        assert_int_equal(st.size, n);
        assert_int_equal(st.shared, 41 * DELTA_PAGE); /* pages 0-39 and 42 */
        assert_true(st.written < n / 8);
        assert_int_equal(delta_ram_apply(base, delta, out), 0);
        assert_same(target, out);

        /* another base, a damaged or cut delta, bytes after it: refused */
        assert_int_equal(ftruncate(out, 0), 0);
        int other = create(path_in(dir, "other"));
        write_at(other, 0, mem, DELTA_PAGE);
        assert_int_equal(delta_ram_apply(other, delta, out), -EBADMSG);
        struct stat ds;
        assert_int_equal(fstat(delta, &ds), 0);
        _cleanup_free_ uint8_t *d = malloc((size_t) ds.st_size);
        assert_int_equal(fd_pread_exact(delta, d, (size_t) ds.st_size, 0), 0);
        int cut = create(path_in(dir, "cut"));
        write_at(cut, 0, d, (size_t) ds.st_size - 5);
        assert_int_equal(lseek(base, 0, SEEK_SET), 0);
        assert_int_equal(delta_ram_apply(base, cut, out), -EBADMSG);
        int longer = create(path_in(dir, "longer"));
        write_at(longer, 0, d, (size_t) ds.st_size);
        write_at(longer, (uint64_t) ds.st_size, "x", 1);
        assert_int_equal(delta_ram_apply(base, longer, out), -EBADMSG);
        d[ds.st_size / 2] ^= 0x40;
        int flipped = create(path_in(dir, "flipped"));
        write_at(flipped, 0, d, (size_t) ds.st_size);
        assert_int_equal(delta_ram_apply(base, flipped, out), -EBADMSG);
        close(other);
        close(cut);
        close(longer);
        close(flipped);
        close(base);
        close(target);
        close(delta);
        close(out);
        assert_int_equal(rm_rf(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_disk_copy),
                cmocka_unit_test(test_disk_no_fiemap),
                cmocka_unit_test(test_disk_reflink),
                cmocka_unit_test(test_ram),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
