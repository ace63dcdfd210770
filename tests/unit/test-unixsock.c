/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "unixsock.h"
#include "util.h"

static void test_listen_connect(void **state) {
        (void) state;
        char dir[] = "/tmp/unixsock-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *path = strdup_printf("%s/s", dir);
        int fd = -1, c = -1;

        /* nobody there yet */
        assert_int_equal(unix_connect(path, 0, &c), -ENOENT);
        assert_int_equal(c, -1);

        /* a stale file at the path is replaced; the mode is what was asked */
        assert_int_equal(file_write_atomic(path, "x", 1, 0644), 0);
        assert_int_equal(unix_listen(path, 0660, 0, 4, &fd), 0);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0660);

        assert_int_equal(unix_connect(path, 1000, &c), 0);
        int a = accept(fd, NULL, NULL);
        assert_true(a >= 0);
        assert_int_equal(write(c, "hi", 2), 2);
        char buf[2];
        assert_int_equal(read(a, buf, 2), 2);
        assert_memory_equal(buf, "hi", 2);
        close(a);
        close(c);

        /* a closed listener: the socket file stays, nobody answers */
        close(fd);
        assert_int_equal(unix_connect(path, 0, &c), -ECONNREFUSED);
        assert_int_equal(rm_rf(dir), 0);
}

static void test_bad_paths(void **state) {
        (void) state;
        char long_path[200];
        memset(long_path, 'a', sizeof long_path - 1);
        long_path[0] = '/';
        long_path[sizeof long_path - 1] = 0;
        int fd = -1;
        assert_int_equal(unix_connect(long_path, 0, &fd), -ENAMETOOLONG);
        assert_int_equal(unix_listen(long_path, 0600, 0, 1, &fd), -ENAMETOOLONG);
        assert_int_equal(unix_connect("", 0, &fd), -EINVAL);
        assert_int_equal(unix_listen(NULL, 0600, 0, 1, &fd), -EINVAL);
        assert_int_equal(fd, -1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_listen_connect),
                cmocka_unit_test(test_bad_paths),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
