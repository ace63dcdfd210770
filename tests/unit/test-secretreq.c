/* SPDX-License-Identifier: Apache-2.0 */
/* POST /v1/secrets' checks (src/daemon/secretreq.c), and that whatever it
 * accepts becomes a credential object the node and the gateway accept too
 * (lib/credset: one parser, one set of limits). */
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
                /* prefixes are written as the gateway compares requests */
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"paths\":[\"/api/%2e%2E/"
                  "x/\"]}",
                  "must be written as requests are compared: \"/x/\"" },
                { "{\"name\":\"gh\",\"value\":\"tok\",\"hosts\":[\"a.example.com\"],\"paths\":[\"/api;v=1/\"]}",
                  "'paths[0]' is refused: a ';'" },
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

/* The largest request the API takes, in every field, gives an object the
 * node and the gateway take: nothing accepted at the API is dropped later. */
static void test_what_the_api_takes_the_gateway_takes(void **state) {
        (void) state;
        json_t *o = json_pack("{s:s, s:s, s:[], s:[], s:[], s:[], s:s, s:i, s:s}", "name", "gh-app_1", "value",
                              "tok\twith a tab and \xc3\xa9", "hosts", "ports", "methods", "paths", "header",
                              "X-Token: Bearer {value}", "rate_per_min", CREDSET_RATE_MAX, "expires_at",
                              "2030-01-01T00:00:00Z");
        assert_non_null(o);
        char buf[CREDSET_PATH_MAX + 1];
        for (int i = 0; i < CREDSET_HOSTS_MAX; i++) {
                snprintf(buf, sizeof buf, "h%d.example.com", i);
                json_array_append_new(json_object_get(o, "hosts"), json_string(buf));
        }
        for (int i = 0; i < CREDSET_PORTS_MAX; i++)
                json_array_append_new(json_object_get(o, "ports"), json_integer(8000 + i));
        for (int i = 0; i < CREDSET_METHODS_MAX; i++) {
                memset(buf, 'A' + i, CREDSET_METHOD_MAX);
                buf[CREDSET_METHOD_MAX] = 0;
                json_array_append_new(json_object_get(o, "methods"), json_string(buf));
        }
        for (int i = 0; i < CREDSET_PATHS_MAX; i++) {
                memset(buf, 'a' + i, CREDSET_PATH_MAX);
                buf[0] = '/';
                buf[CREDSET_PATH_MAX] = 0;
                json_array_append_new(json_object_get(o, "paths"), json_string(buf));
        }
        struct secretreq q = { 0 };
        char err[API_ERRMSG_MAX] = "";
        assert_int_equal(secretreq_parse(o, NOW, &q, err), 0);
        char *spec = json_dumps(q.spec, JSON_COMPACT);
        json_t *set = json_array();
        json_array_append_new(set, secretreq_credential(q.name, "airlock_ph_0123456789abcdef0123456789abcdef", q.value,
                                                        q.value_len, spec, q.expires_at));
        struct credset_entry e[CREDSET_MAX];
        size_t n = 0;
        char cerr[256] = "";
        if (credset_parse(set, e, &n, cerr, sizeof cerr) < 0)
                fail_msg("the node would refuse what the API took: %s", cerr);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].n_methods, CREDSET_METHODS_MAX);
        assert_int_equal(e[0].n_paths, CREDSET_PATHS_MAX);
        assert_int_equal(e[0].n_hosts, CREDSET_HOSTS_MAX);
        json_decref(set);
        free(spec);
        secretreq_release(&q);

        /* and what the node would refuse, the API refuses: a control character in the value */
        json_object_set_new(o, "value", json_string("tok\x01"));
        assert_int_equal(secretreq_parse(o, NOW, &q, err), -EINVAL);
        assert_non_null(strstr(err, "control character"));
        json_decref(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rfc3339),
                cmocka_unit_test(test_env_name),
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_what_the_api_takes_the_gateway_takes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
