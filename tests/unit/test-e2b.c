/* SPDX-License-Identifier: Apache-2.0 */
/* The E2B front door's pure parts: percent-decoding (the list's triple-
 * encoded metadata filter) and the envd access tokens. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "e2b-api.h"
#include "util.h"

static void decode_ok(const char *in, bool form, const char *want) {
        char out[256];
        size_t n = 0;
        assert_int_equal(e2b_percent_decode(in, strlen(in), form, out, &n), 0);
        assert_int_equal(n, strlen(want));
        assert_string_equal(out, want);
}

static void test_percent_decode(void **state) {
        decode_ok("plain", false, "plain");
        decode_ok("a%20b", false, "a b");
        decode_ok("a+b", true, "a b");
        decode_ok("a+b", false, "a+b"); /* decodeURIComponent keeps '+' */
        decode_ok("%C3%A9%2f", false, "\xc3\xa9/");
        /* the SDK's metadata value "probe run=a b", after the query's own
         * decoding: the form's escapes, then the pair's */
        decode_ok("probe%2520run%3Da%2520b", true, "probe%20run=a%20b");
        decode_ok("probe%20run", false, "probe run");
        char out[16];
        size_t n;
        static const char *const bad[] = { "%", "%4", "%zz", "a%0", "%00" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(e2b_percent_decode(bad[i], strlen(bad[i]), false, out, &n), -EINVAL);
        /* the length given, not the NUL: bytes after it are not read */
        assert_int_equal(e2b_percent_decode("ab%41", 2, false, out, &n), 0);
        assert_string_equal(out, "ab");
}

/* A token is the sandbox's alone, the same each time it is asked for, and
 * another key (another installation) makes another. */
static void test_access_token(void **state) {
        char dir[] = "/tmp/test-e2b-XXXXXX";
        assert_non_null(mkdtemp(dir));
        struct daemon_config c = { 0 };
        snprintf(c.control_dir, sizeof c.control_dir, "%s", dir);
        assert_int_equal(e2b_init(&c), 0);
        char a[65], a2[65], b[65];
        assert_int_equal(e2b_access_token("sbx-0123456789abcdef", a), 0);
        assert_int_equal(e2b_access_token("sbx-0123456789abcdef", a2), 0);
        assert_int_equal(e2b_access_token("sbx-fedcba9876543210", b), 0);
        assert_int_equal(strlen(a), 64);
        assert_string_equal(a, a2);
        assert_string_not_equal(a, b);
        assert_int_equal(e2b_init(&c), 0); /* loaded again: the same key */
        assert_int_equal(e2b_access_token("sbx-0123456789abcdef", a2), 0);
        assert_string_equal(a, a2);
        char key[512];
        snprintf(key, sizeof key, "%s/e2b.key", dir);
        assert_int_equal(unlink(key), 0);
        assert_int_equal(e2b_init(&c), 0); /* a new installation */
        assert_int_equal(e2b_access_token("sbx-0123456789abcdef", a2), 0);
        assert_string_not_equal(a, a2);
        /* a key file that is not one is refused, not used */
        assert_int_equal(file_write_atomic(key, "short", 5, 0600), 0);
        assert_int_equal(e2b_init(&c), -EBADMSG);
        assert_int_equal(rm_rf(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_percent_decode),
                cmocka_unit_test(test_access_token),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
