/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static void test_redact(void **state) {
        (void) state;
        char buf[64];
        const char *token = "alk_0123456789abcdef0123456789abcdef";
        const char *out = log_redact(token, buf, sizeof buf);
        assert_ptr_equal(out, buf);
        assert_null(strstr(out, "0123456789abcdef"));
        assert_int_equal(strncmp(out, "alk_", 4), 0);
        assert_non_null(strstr(out, "redacted"));
        /* short secrets are hidden whole */
        assert_string_equal(log_redact("abc", buf, sizeof buf), "(redacted)");
        assert_string_equal(log_redact(NULL, buf, sizeof buf), "(null)");
        /* a tiny buffer never overflows */
        char tiny[4];
        log_redact(token, tiny, sizeof tiny);
        assert_true(strlen(tiny) < sizeof tiny);
}

static void test_levels(void **state) {
        (void) state;
        enum log_level l = LOG_LEVEL_ERROR;
        assert_int_equal(log_level_from_string("debug", &l), 0);
        assert_int_equal(l, LOG_LEVEL_DEBUG);
        assert_int_equal(log_level_from_string("loud", &l), -EINVAL);
        assert_int_equal(log_level_from_string(NULL, &l), -EINVAL);
        assert_int_equal(l, LOG_LEVEL_DEBUG);
}

/* One event is one line, whatever the message holds. */
static void test_one_line(void **state) {
        (void) state;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        int saved = dup(STDERR_FILENO);
        dup2(fds[1], STDERR_FILENO);
        log_setup("test", LOG_LEVEL_INFO);
        log_emit(LOG_LEVEL_INFO, "sandbox=sbx-1", "two\nlines \"quoted\" \x01");
        log_emit(LOG_LEVEL_DEBUG, NULL, "hidden below the level");
        assert_int_equal(log_errno(LOG_LEVEL_ERROR, -ENOENT, NULL, "open failed: %m"), -ENOENT);
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
        close(fds[1]);
        char buf[4096] = { 0 };
        ssize_t n = read(fds[0], buf, sizeof buf - 1);
        close(fds[0]);
        assert_true(n > 0);
        char *nl = strchr(buf, '\n');
        assert_non_null(nl);
        *nl = 0;
        assert_non_null(strstr(buf, "level=info prog=test sandbox=sbx-1 msg=\"two\\nlines \\\"quoted\\\" \\x01\""));
        char *second = nl + 1;
        assert_null(strstr(second, "hidden"));
        assert_non_null(strstr(second, "level=error"));
        assert_non_null(strstr(second, "No such file or directory"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_redact),
                cmocka_unit_test(test_levels),
                cmocka_unit_test(test_one_line),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
