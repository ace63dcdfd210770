/* SPDX-License-Identifier: Apache-2.0 */
/* POST /v1/secrets' checks (src/daemon/secretreq.c) and the node's check of
 * a credential set (src/node/credcheck.c sits in another library: the
 * fuzzers drive both; this covers the cases by name). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "apierror.h"
#include "secretreq.h"

#define NOW 1800000000

static void test_rfc3339(void **state) {
        int64_t t = -1;
        assert_int_equal(secretreq_parse_rfc3339("2026-12-31T23:59:59Z", &t), 0);
        assert_int_equal(t, 1798761599);
        assert_int_equal(secretreq_parse_rfc3339("2000-02-29T12:00:00.123456z", &t), 0);
        assert_int_equal(t, 951825600);
        assert_int_equal(secretreq_parse_rfc3339("2000-02-29T13:30:00+01:30", &t), 0);
        assert_int_equal(t, 951825600);
        assert_int_equal(secretreq_parse_rfc3339("2000-02-29T10:00:00-02:00", &t), 0);
        assert_int_equal(t, 951825600);
        assert_int_equal(secretreq_parse_rfc3339("1970-01-01T00:00:00Z", &t), 0);
        assert_int_equal(t, 0);
        const char *bad[] = { "2026-12-31",
                              "2026-13-01T00:00:00Z",
                              "2026-02-30T00:00:00Z",
                              "2026-12-31T24:00:00Z",
                              "2026-12-31T23:59:59",
                              "2026-12-31T23:59:59+1:00",
                              "2026-12-31T23:59:59Zjunk",
                              "2026-12-31T23:59:59.Z",
                              "tomorrow",
                              "" };
        t = 42;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(secretreq_parse_rfc3339(bad[i], &t), -EINVAL);
        assert_int_equal(t, 42); /* untouched */
}

static void test_env_name(void **state) {
        char out[65];
        secretreq_env_name("gh-app_2", out, sizeof out);
        assert_string_equal(out, "GH_APP_2");
}

static int parse(const char *text, struct secretreq *q, char *err) {
        json_t *o = json_loads(text, JSON_ALLOW_NUL, NULL);
        assert_non_null(o);
        int r = secretreq_parse(o, NOW, q, err);
        json_decref(o);
        return r;
}

static void test_parse(void **state) {
        struct secretreq q = { 0 };
        char err[API_ERRMSG_MAX] = "";
        assert_int_equal(parse("{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"API.GitHub.com.\",\"*.Example.com\","
                               "\"api.github.com\"]}",
                               &q, err),
                         0);
        assert_string_equal(q.name, "gh");
        assert_int_equal(q.value_len, 3);
        assert_int_equal(q.expires_at, 0);
        char *spec = json_dumps(q.spec, JSON_COMPACT | JSON_SORT_KEYS);
        /* canonical, deduplicated hosts; the defaults filled in */
        assert_string_equal(spec, "{\"hosts\":[\"api.github.com\",\"*.example.com\"],\"inject\":{\"header\":"
                                  "\"Authorization\",\"template\":\"Bearer {value}\"},\"methods\":[],\"paths\":[],"
                                  "\"ports\":[443],\"rate_per_min\":0}");
        json_t *cred = secretreq_credential(q.name, "airlock_ph_0123456789abcdef0123456789abcdef", q.value, q.value_len,
                                            spec, 1900000000);
        assert_non_null(cred);
        assert_string_equal(json_string_value(json_object_get(cred, "value")), "tok");
        assert_int_equal(json_integer_value(json_object_get(cred, "expires_at")), 1900000000);
        assert_int_equal(json_object_size(cred), 10);
        json_decref(cred);
        free(spec);
        secretreq_release(&q);

        assert_int_equal(parse("{\"name\":\"b\",\"value\":\"pw\",\"hosts\":[\"a.example.com\"],\"basic\":\"ci\","
                               "\"expires_at\":\"2030-01-01T00:00:00Z\",\"ports\":[8443]}",
                               &q, err),
                         0);
        assert_true(q.expires_at > NOW);
        assert_string_equal(json_string_value(json_object_get(json_object_get(q.spec, "inject"), "basic")), "ci");
        secretreq_release(&q);

        static const struct {
                const char *body, *needle;
        } bad[] = {
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"header\":\"X: {value}{value}\"}",
                  "exactly once" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"header\":\"X: a\\r\\nY: "
                  "{value}\"}",
                  "printable" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"header\":\"Content-Length: "
                  "{value}\"}",
                  "does not inject" },
                { "{\"name\":\"gh\",\"value\":\"t\\u0000k\",\"hosts\":[\"a.example.com\"]}", "NUL" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"10.0.0.1\"]}", "hosts[0]" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"*.co.uk\"]}", "public suffix" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"expires_at\":1700000000}",
                  "in the past" },
                { "{\"name\":\"g\\u0000h\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"]}", "'name'" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"paths\":[\"/a b\"]}",
                  "paths[0]" },
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                err[0] = 0;
                q = (struct secretreq){ 0 };
                assert_int_equal(parse(bad[i].body, &q, err), -EINVAL);
                if (!strstr(err, bad[i].needle))
                        fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].needle);
                assert_null(q.name); /* untouched */
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rfc3339),
                cmocka_unit_test(test_env_name),
                cmocka_unit_test(test_parse),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
