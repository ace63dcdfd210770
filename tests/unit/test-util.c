/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "unit-skip.h"
#include "util.h"

static int check(const char *p) {
        return path_check(p, strlen(p));
}

static void test_path_check(void **state) {
        (void) state;
        assert_int_equal(check("/"), 0);
        assert_int_equal(check("/root/file.txt"), 0);
        assert_int_equal(check("/a/..b/c.."), 0);
        assert_int_equal(check("/a/./b"), 0);
        assert_int_equal(check("//double//slash/"), 0);
        assert_int_equal(check(""), -EINVAL);
        assert_int_equal(check("relative"), -EINVAL);
        assert_int_equal(check("/.."), -EINVAL);
        assert_int_equal(check("/a/../b"), -EINVAL);
        assert_int_equal(check("/a/.."), -EINVAL);
        assert_int_equal(check("/a/b/../../etc"), -EINVAL);
        assert_int_equal(path_check("/a\0b", 4), -EINVAL);
        assert_int_equal(path_check(NULL, 0), -EINVAL);

        char buf[PATH_SAFE_MAX + 2];
        memset(buf, 'x', sizeof buf);
        buf[0] = '/';
        assert_int_equal(path_check(buf, PATH_SAFE_MAX), 0);
        assert_int_equal(path_check(buf, PATH_SAFE_MAX + 1), -ENAMETOOLONG);
}

static void test_name_is_valid(void **state) {
        (void) state;
        assert_true(name_is_valid("sbx-0123abcd"));
        assert_true(name_is_valid("python"));
        assert_false(name_is_valid(""));
        assert_false(name_is_valid(NULL));
        assert_false(name_is_valid(".hidden"));
        assert_false(name_is_valid("a/b"));
        assert_false(name_is_valid("a b"));
        char longname[66];
        memset(longname, 'a', 65);
        longname[65] = 0;
        assert_false(name_is_valid(longname));
        longname[64] = 0;
        assert_true(name_is_valid(longname));
}

static void test_parse_u64(void **state) {
        (void) state;
        uint64_t v = 7;
        assert_int_equal(parse_u64("42", 100, &v), 0);
        assert_int_equal(v, 42);
        assert_int_equal(parse_u64("101", 100, &v), -ERANGE);
        assert_int_equal(parse_u64("-1", 100, &v), -EINVAL);
        assert_int_equal(parse_u64("", 100, &v), -EINVAL);
        assert_int_equal(parse_u64("12x", 100, &v), -ERANGE);
        assert_int_equal(v, 42); /* untouched on failure */
}

static void test_str_copy(void **state) {
        (void) state;
        char buf[4] = "xyz";
        assert_int_equal(str_copy(buf, sizeof buf, "abcd"), -ENAMETOOLONG);
        assert_string_equal(buf, "xyz"); /* untouched on failure */
        assert_int_equal(str_copy(buf, sizeof buf, "abc"), 0);
        assert_string_equal(buf, "abc");
        assert_int_equal(str_copy(buf, sizeof buf, ""), 0);
        assert_string_equal(buf, "");
}

static void test_strv_contains(void **state) {
        (void) state;
        const char *const list[] = { "a", "bc", NULL };
        assert_true(strv_contains(list, "a"));
        assert_true(strv_contains(list, "bc"));
        assert_false(strv_contains(list, "b"));
        assert_false(strv_contains(list, ""));
        assert_false(strv_contains(NULL, "a"));
}

static void test_random_id(void **state) {
        (void) state;
        char a[64], b[64];
        assert_int_equal(random_id("sbx-", 8, a, sizeof a), 0);
        assert_int_equal(random_id("sbx-", 8, b, sizeof b), 0);
        assert_int_equal(strlen(a), 4 + 16);
        assert_string_not_equal(a, b);
        assert_true(name_is_valid(a));
        char small[8];
        assert_int_equal(random_id("sbx-", 8, small, sizeof small), -EINVAL);
}

static void test_files(void **state) {
        (void) state;
        char dir[] = "/tmp/airlock-test-util-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *nested = strdup_printf("%s/a/b/c", dir);
        assert_int_equal(mkdir_p(nested, 0755), 0);
        assert_int_equal(mkdir_p(nested, 0755), 0);

        _cleanup_free_ char *f = strdup_printf("%s/a/file", dir);
        assert_int_equal(file_write_atomic(f, "hello", 5, 0600), 0);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(file_read_all(f, 100, &data, &len), 0);
        assert_int_equal(len, 5);
        assert_string_equal(data, "hello");
        free(data);
        data = NULL;
        assert_int_equal(file_read_all(f, 4, &data, &len), -EFBIG);
        assert_null(data);

        /* a sparse file keeps its holes and content through clone-or-copy */
        _cleanup_free_ char *sparse = strdup_printf("%s/sparse", dir);
        int fd = open(sparse, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "end", 3, 64 << 20), 3);
        assert_int_equal(pwrite(fd, "start", 5, 0), 5);
        close(fd);
        _cleanup_free_ char *copy = strdup_printf("%s/copy", dir);
        bool cloned = true;
        assert_int_equal(file_clone_or_copy(sparse, copy, &cloned), 0);
        struct stat a, b;
        assert_int_equal(stat(sparse, &a), 0);
        assert_int_equal(stat(copy, &b), 0);
        assert_int_equal(a.st_size, b.st_size);
        assert_true(b.st_blocks * 512 < (1 << 20)); /* still sparse */
        char buf[5];
        fd = open(copy, O_RDONLY | O_CLOEXEC);
        assert_int_equal(pread(fd, buf, 3, 64 << 20), 3);
        assert_memory_equal(buf, "end", 3);
        assert_int_equal(pread(fd, buf, 5, 0), 5);
        assert_memory_equal(buf, "start", 5);
        close(fd);
        assert_int_equal(file_clone_or_copy(sparse, copy, NULL), -EEXIST);

        assert_int_equal(rm_rf(dir), 0);
        assert_int_equal(access(dir, F_OK), -1);
        assert_int_equal(rm_rf(dir), 0); /* missing is fine */
}

/* Copies between fds: content identical, holes and explicitly written zero
 * blocks stay (or become) holes, the source offset does not matter. With
 * AIRLOCK_TEST_REFLINK_DIR on btrfs/xfs it must be a reflink. */
static void check_fd_clone(const char *base, bool want_clone) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/airlock-test-fdclone-XXXXXX", base);
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *src = strdup_printf("%s/src", dir), *dst = strdup_printf("%s/dst", dir);
        _cleanup_free_ char *zeros = calloc(1, 1 << 20);
        assert_non_null(zeros);
        int in = open(src, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        assert_true(in >= 0);
        assert_int_equal(pwrite(in, "head", 4, 0), 4);
        assert_int_equal(pwrite(in, zeros, 1 << 20, 4 << 20), 1 << 20); /* allocated, but zero */
        assert_int_equal(pwrite(in, "tail", 4, (32 << 20) - 4), 4);
        assert_int_equal(fsync(in), 0);
        assert_int_equal(lseek(in, 100, SEEK_SET), 100);
        int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(out >= 0);
        bool cloned = !want_clone;
        assert_int_equal(fd_clone_or_copy(in, out, &cloned), 0);
        if (want_clone && !cloned) {
                close(in);
                close(out);
                rm_rf(dir);
                fail_msg("fd_clone_or_copy() copied instead of cloning in %s: AIRLOCK_TEST_REFLINK_DIR must be on "
                         "a filesystem with reflinks (btrfs, XFS with reflink=1)",
                         base);
        }
        close(out);
        struct stat a, b;
        assert_int_equal(fstat(in, &a), 0);
        assert_int_equal(stat(dst, &b), 0);
        assert_int_equal(b.st_size, 32 << 20);
        if (!cloned)
                assert_true(b.st_blocks < a.st_blocks); /* the zero MiB became a hole */
        _cleanup_free_ char *x = NULL, *y = NULL;
        size_t xl = 0, yl = 0;
        assert_int_equal(file_read_all(src, 64 << 20, &x, &xl), 0);
        assert_int_equal(file_read_all(dst, 64 << 20, &y, &yl), 0);
        assert_int_equal(xl, yl);
        assert_memory_equal(x, y, xl);
        close(in);

        /* only regular files are copied */
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        out = open(dst, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_int_equal(fd_clone_or_copy(p[0], out, NULL), -EINVAL);
        close(out);
        close(p[0]);
        close(p[1]);
        assert_int_equal(rm_rf(dir), 0);
}

static void test_fd_clone_or_copy(void **state) {
        (void) state;
        check_fd_clone("/tmp", false);
}

static void test_fd_clone_reflink(void **state) {
        (void) state;
        const char *reflink = getenv("AIRLOCK_TEST_REFLINK_DIR");
        if (!reflink || !*reflink)
                unit_skip("AIRLOCK_TEST_REFLINK_DIR is not set: name a directory on a filesystem with reflinks "
                          "(btrfs, XFS with reflink=1); ./test.sh sets it to its btrfs test volume");
        check_fd_clone(reflink, true);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_str_copy),
                cmocka_unit_test(test_strv_contains),
                cmocka_unit_test(test_path_check), cmocka_unit_test(test_name_is_valid),
                cmocka_unit_test(test_parse_u64),  cmocka_unit_test(test_random_id),
                cmocka_unit_test(test_files),      cmocka_unit_test(test_fd_clone_or_copy),
                cmocka_unit_test(test_fd_clone_reflink),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
