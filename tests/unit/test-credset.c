/* SPDX-License-Identifier: Apache-2.0 */
/* lib/credset: request paths as the origin reads them (credset-path.c),
 * and credential path prefixes that must be written that way. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "credset.h"

static void expect_path(const char *in, const char *want) {
        char out[256];
        const char *why = NULL;
        int r = credset_path_canonical(in, strlen(in), out, sizeof out, &why);
        if (r != 0)
                print_message("%s: %d %s\n", in, r, why ? why : "");
        assert_int_equal(r, 0);
        assert_string_equal(out, want);
}

static void expect_refused(const char *in, const char *why_part) {
        char out[256] = "untouched";
        const char *why = NULL;
        assert_int_equal(credset_path_canonical(in, strlen(in), out, sizeof out, &why), -EINVAL);
        assert_non_null(why);
        if (!strstr(why, why_part))
                print_message("%s: \"%s\" lacks \"%s\"\n", in, why, why_part);
        assert_non_null(strstr(why, why_part));
}

/* The spellings an independent probe of the gateway got a credential
 * scoped to "/api/" into "/admin" with: each is "/admin" or refused. */
static void test_path_attacks(void **state) {
        (void) state;
        expect_path("/api/../admin", "/admin");
        expect_path("/api/%2e%2e/admin", "/admin");
        expect_path("/api/%2E%2E/admin", "/admin");
        expect_path("/api/.%2e/admin", "/admin");
        expect_path("/api/x/../../admin", "/admin");
        expect_path("/api//../admin", "/api/admin"); /* RFC 3986: ".." takes the empty segment */
        expect_refused("/api/..%2fadmin", "escaped '/'");
        expect_refused("/api/%2e%2e%2fadmin", "escaped '/'");
        expect_refused("/api/..%5cadmin", "escaped '/' or '\\'");
        expect_refused("/api/..;/admin", "';'");
        expect_refused("/api/..\\admin", "'\\'");
        expect_refused("/api/../../admin", "above the root");
        expect_refused("/..", "above the root");
}

static void test_path_canonical(void **state) {
        (void) state;
        expect_path("/", "/");
        expect_path("/api/x", "/api/x");
        expect_path("/api/x?a=../b&c=%2f;", "/api/x?a=../b&c=%2f;"); /* the query is the origin's */
        expect_path("/a/./b/.", "/a/b/");
        expect_path("/a/b/..", "/a/");
        expect_path("/.", "/");
        expect_path("/a/..", "/");
        expect_path("/%7euser/%41%62c", "/~user/Abc"); /* unreserved: decoded */
        expect_path("/a%3ab%2a%25", "/a%3Ab%2A%25");   /* reserved and '%': kept, in capitals */
        expect_path("/a//b", "/a//b");
        expect_path("/a..b/.c/..d", "/a..b/.c/..d");
        expect_refused("", "origin-form");
        expect_refused("api/x", "origin-form");
        expect_refused("http://a.test/api", "origin-form");
        expect_refused("*", "origin-form");
        expect_refused("/a%2", "two hex digits");
        expect_refused("/a%g0", "two hex digits");
        expect_refused("/a%00", "control character");
        expect_refused("/a%0d%0a", "control character");
        expect_refused("/a b", "space");
        expect_refused("/a#b", "'#'");
        expect_refused("/\xc3\xa9", "outside ASCII");

        /* never longer than it came: len + 1 bytes do, len do not */
        char out[8];
        const char *why = NULL;
        assert_int_equal(credset_path_canonical("/a/b/c", 6, out, 6, &why), -ENOBUFS);
        assert_int_equal(credset_path_canonical("/a/b/c", 6, out, 7, &why), 0);
        assert_string_equal(out, "/a/b/c");
        /* no NUL needed in the input */
        assert_int_equal(credset_path_canonical("/a/../bXYZ", 7, out, sizeof out, &why), 0);
        assert_string_equal(out, "/b");
}

/* A credential's path prefixes are taken only as the gateway will compare
 * them: canonical. */
static void test_credential_paths_canonical(void **state) {
        (void) state;
        static const char *const bad[] = { "/api/../admin/", "/api/%2e%2e/", "/api/%41", "/api;x/", "/a\\\\b" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                char text[512];
                snprintf(text, sizeof text,
                         "[{\"name\":\"tok\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\","
                         "\"value\":\"v\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"Authorization\","
                         "\"template\":\"Bearer {value}\"},\"paths\":[\"%s\"]}]",
                         bad[i]);
                json_error_t e;
                json_t *a = json_loads(text, 0, &e);
                assert_non_null(a);
                struct credset_entry set[CREDSET_MAX];
                size_t n = 0;
                char err[256] = "";
                assert_int_equal(credset_parse(a, set, &n, err, sizeof err), -EINVAL);
                assert_non_null(strstr(err, "secrets[0].paths[0]"));
                json_decref(a);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_path_attacks),
                cmocka_unit_test(test_path_canonical),
                cmocka_unit_test(test_credential_paths_canonical),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
