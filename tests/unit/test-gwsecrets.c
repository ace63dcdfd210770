/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the credentials airlock-gw holds (src/gw/secrets.c): what
 * the node hands over is validated (a value cannot split a request head, a
 * template holds {value} once), a credential is bound to its hosts, ports,
 * methods and paths, expires, is rate-limited, and every use or refusal is
 * an audit event without the value. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "gw.h"

static const char *ok_secret(void) {
        return "[{\"name\":\"gh\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\","
               "\"value\":\"s3cr3t-value\",\"hosts\":[\"api.github.com\",\"*.example.org\"],"
               "\"inject\":{\"header\":\"Authorization\",\"template\":\"Bearer {value}\"},"
               "\"methods\":[\"GET\"],\"paths\":[\"/repos/\"],\"rate_per_min\":2}]";
}

static int parse(const char *text, struct gw_sandbox *sb, char *msg, size_t n) {
        json_t *a = json_loads(text, 0, NULL);
        assert_non_null(a);
        int r = gw_secrets_parse(a, &sb->secrets, &sb->n_secrets, msg, n);
        json_decref(a);
        return r;
}

static void test_parse_and_pick(void **state) {
        struct gw_sandbox sb = {.id = "sbx-1"};
        char msg[256] = "";
        assert_int_equal(parse(ok_secret(), &sb, msg, sizeof msg), 0);
        assert_int_equal(sb.n_secrets, 1);
        assert_string_equal(sb.secrets[0].header_value, "Bearer s3cr3t-value");
        const char *why;
        /* bound: the exact host and a subdomain of the wildcard, port 443 by default */
        struct gw_secret *s = gw_secrets_pick(&sb, "api.github.com", 443, "GET", "/repos/x", &why);
        assert_ptr_equal(s, &sb.secrets[0]);
        assert_non_null(gw_secrets_pick(&sb, "a.example.org", 443, "GET", "/repos/", &why));
        /* a lookalike, the wildcard's own apex, another port: nothing, no refusal */
        assert_null(gw_secrets_pick(&sb, "api.github.com.evil.test", 443, "GET", "/repos/", &why));
        assert_null(why);
        assert_null(gw_secrets_pick(&sb, "example.org", 443, "GET", "/repos/", &why));
        assert_null(gw_secrets_pick(&sb, "api.github.com", 80, "GET", "/repos/", &why));
        assert_false(gw_secrets_for_host(&sb, "evil.test", 443));
        assert_true(gw_secrets_for_host(&sb, "api.github.com", 443));
        /* another method, another path: refused, and said why */
        assert_null(gw_secrets_pick(&sb, "api.github.com", 443, "POST", "/repos/", &why));
        assert_non_null(why);
        assert_non_null(strstr(why, "method"));
        assert_null(gw_secrets_pick(&sb, "api.github.com", 443, "GET", "/user", &why));
        assert_non_null(strstr(why, "path"));
        /* 2 a minute: two were used above, the next is refused */
        assert_null(gw_secrets_pick(&sb, "api.github.com", 443, "GET", "/repos/y", &why));
        assert_non_null(strstr(why, "rate"));
        /* the audit has the refusals, never the value */
        json_t *r = gw_audit_read(0, 1000);
        char *text = json_dumps(r, 0);
        assert_non_null(strstr(text, "\"refused\""));
        assert_null(strstr(text, "s3cr3t-value"));
        free(text);
        json_decref(r);
        gw_secrets_free(sb.secrets, sb.n_secrets);
}

static void test_expiry_and_basic(void **state) {
        struct gw_sandbox sb = {.id = "sbx-2"};
        char msg[256];
        assert_int_equal(
                parse("[{\"name\":\"old\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"pw\","
                      "\"hosts\":[\"a.test\"],\"inject\":{\"basic\":\"bob\"},\"expires_at\":1}]",
                      &sb, msg, sizeof msg),
                0);
        assert_string_equal(sb.secrets[0].header, "Authorization");
        assert_string_equal(sb.secrets[0].header_value, "Basic Ym9iOnB3"); /* bob:pw */
        const char *why;
        assert_null(gw_secrets_pick(&sb, "a.test", 443, "GET", "/", &why));
        assert_non_null(strstr(why, "expired"));
        gw_secrets_free(sb.secrets, sb.n_secrets);
}

static void test_refused_shapes(void **state) {
        static const char *const bad[] = {
                /* a value with CR LF would split the head */
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"a\\r\\nHost: "
                "e.test\","
                "\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X-Key\",\"template\":\"{value}\"}}]",
                /* {value} twice, and none */
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X-Key\",\"template\":\"{value}{value}\"}}]",
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X-Key\",\"template\":\"static\"}}]",
                /* a header name that is no token, a host that is an address, no hosts, an unknown key */
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X Key:\",\"template\":\"{value}\"}}]",
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[\"10.0.0.1\"],\"inject\":{\"header\":\"X-Key\",\"template\":\"{value}\"}}]",
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[],\"inject\":{\"header\":\"X-Key\",\"template\":\"{value}\"}}]",
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\",\"extra\":"
                "1,"
                "\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X-Key\",\"template\":\"{value}\"}}]",
                /* a basic user with ':' */
                "[{\"name\":\"x\",\"placeholder\":\"airlock_ph_0123456789abcdef0123456789abcdef\",\"value\":\"v\","
                "\"hosts\":[\"a.test\"],\"inject\":{\"basic\":\"a:b\"}}]",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                struct gw_sandbox sb = {.id = "sbx-3"};
                char msg[256] = "";
                assert_int_equal(parse(bad[i], &sb, msg, sizeof msg), -EINVAL);
                assert_true(msg[0] != 0);
                assert_null(strstr(msg, "Host: e.test"));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_and_pick),
                cmocka_unit_test(test_expiry_and_basic),
                cmocka_unit_test(test_refused_shapes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
