/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apierror.h"
#include "apireq.h"

static char err[API_ERRMSG_MAX];

static json_t *parse(const char *s) {
        json_t *o = NULL;
        assert_int_equal(apireq_parse_object(s, strlen(s), &o, err), 0);
        return o;
}

static void test_parse_object(void **state) {
        json_t *o = NULL;
        assert_int_equal(apireq_parse_object("{bad", 4, &o, err), -EINVAL);
        assert_non_null(strstr(err, "not valid JSON"));
        assert_int_equal(apireq_parse_object("[1]", 3, &o, err), -EINVAL);
        assert_int_equal(apireq_parse_object("{} x", 4, &o, err), -EINVAL);
        assert_int_equal(apireq_parse_object("{\"a\":1,\"a\":2}", 13, &o, err), -EINVAL);
        assert_int_equal(apireq_parse_object("", 0, &o, err), 0);
        assert_true(json_is_object(o));
        json_decref(o);
}

static void test_create(void **state) {
        struct apireq_create c;
        json_t *o = parse("{}");
        assert_int_equal(apireq_parse_create(o, &c, err), 0);
        assert_string_equal(c.template_name, "python");
        assert_int_equal(json_object_size(c.env), 0);
        apireq_create_release(&c);
        json_decref(o);

        /* the parser reads what it knows; the unknown field is
         * apireq_check_body()'s to refuse, which http.c runs first */
        o = parse("{\"template\":\"minimal\",\"env\":{\"A_1\":\"x\"},\"metadata\":{\"k\":\"v\"},\"extra\":[1]}");
        assert_int_equal(apireq_parse_create(o, &c, err), 0);
        assert_string_equal(c.template_name, "minimal");
        assert_string_equal(json_string_value(json_object_get(c.env, "A_1")), "x");
        assert_null(c.network);
        apireq_create_release(&c);
        assert_int_equal(apireq_check_body(o, APIREQ_BODY_CREATE, false, err), -EINVAL);
        assert_string_equal(err, "unknown field \"extra\" in the request body");
        json_decref(o);

        /* network: an object, kept as given for the policy code; null is absent */
        o = parse("{\"network\":{\"mode\":\"deny-all\"}}");
        assert_int_equal(apireq_check_body(o, APIREQ_BODY_CREATE, false, err), 0);
        assert_int_equal(apireq_parse_create(o, &c, err), 0);
        assert_string_equal(json_string_value(json_object_get(c.network, "mode")), "deny-all");
        apireq_create_release(&c);
        json_decref(o);
        o = parse("{\"network\":null}");
        assert_int_equal(apireq_parse_create(o, &c, err), 0);
        assert_null(c.network);
        apireq_create_release(&c);
        json_decref(o);
        o = parse("{\"network\":\"deny-all\"}");
        assert_int_equal(apireq_parse_create(o, &c, err), -EINVAL);
        assert_string_equal(err, "field 'network' must be an object");
        json_decref(o);

        static const char *const bad[] = {
                "{\"template\":5}",           "{\"template\":\"../x\"}",      "{\"template\":\"\"}",
                "{\"env\":[]}",               "{\"env\":{\"A\":1}}",          "{\"env\":{\"1A\":\"x\"}}",
                "{\"env\":{\"A-B\":\"x\"}}",  "{\"metadata\":\"x\"}",         "{\"metadata\":{\"k\":{}}}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                o = parse(bad[i]);
                assert_int_equal(apireq_parse_create(o, &c, err), -EINVAL);
                json_decref(o);
        }
}

static void test_exec(void **state) {
        struct apireq_exec e;
        json_t *o = parse("{\"cmd\":[\"python3\",\"-c\",\"print(6*7)\"],\"stdin\":\"hi\",\"timeout_s\":5}");
        assert_int_equal(apireq_parse_exec(o, 3600, &e, err), 0);
        assert_int_equal(json_array_size(e.cmd), 3);
        assert_null(e.cwd); /* none given: the node's default (the template's WORKDIR, or /root) */
        assert_string_equal(e.stdin_data, "hi");
        assert_int_equal(e.timeout_s, 5);
        apireq_exec_release(&e);
        json_decref(o);

        o = parse("{\"cmd\":[\"ls\"]}");
        assert_int_equal(apireq_parse_exec(o, 3600, &e, err), 0);
        assert_int_equal(e.timeout_s, 60);
        assert_null(e.stdin_data);
        apireq_exec_release(&e);
        json_decref(o);

        static const char *const bad[] = {
                "{}",
                "{\"cmd\":[]}",
                "{\"cmd\":\"ls\"}",
                "{\"cmd\":[\"ls\",1]}",
                "{\"cmd\":[\"\"]}",
                "{\"cmd\":[\"ls\"],\"cwd\":\"relative\"}",
                "{\"cmd\":[\"ls\"],\"cwd\":\"/a/../b\"}",
                "{\"cmd\":[\"ls\"],\"timeout_s\":0}",
                "{\"cmd\":[\"ls\"],\"timeout_s\":3601}",
                "{\"cmd\":[\"ls\"],\"timeout_s\":\"5\"}",
                "{\"cmd\":[\"ls\"],\"stdin\":5}",
                "{\"cmd\":[\"ls\"],\"env\":{\"A\":null}}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                o = parse(bad[i]);
                assert_int_equal(apireq_parse_exec(o, 3600, &e, err), -EINVAL);
                json_decref(o);
        }
        o = parse("{\"cmd\":[]}");
        assert_int_equal(apireq_parse_exec(o, 3600, &e, err), -EINVAL);
        assert_string_equal(err, "field 'cmd' must be a non-empty array of strings");
        json_decref(o);
}

static void test_session(void **state) {
        struct apireq_session s;
        json_t *o = parse("{\"cmd\":[\"bash\"],\"pty\":true,\"rows\":40}");
        assert_int_equal(apireq_parse_session(o, &s, err), 0);
        assert_true(s.pty);
        assert_int_equal(s.rows, 40);
        assert_int_equal(s.cols, 80);
        apireq_session_release(&s);
        json_decref(o);
        o = parse("{\"cmd\":[\"bash\"],\"pty\":1}");
        assert_int_equal(apireq_parse_session(o, &s, err), -EINVAL);
        json_decref(o);
}

static void test_paths(void **state) {
        static const char *const good[] = { "/", "/root", "/a/b.c", "/a/..b", "/a/b../c", "/./x", "//x" };
        static const char *const bad[] = { "", "relative", "..", "/..", "/a/..", "/a/../b", "/../", "a/b" };
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
                assert_int_equal(apireq_check_path(good[i], strlen(good[i]), err), 0);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(apireq_check_path(bad[i], strlen(bad[i]), err), -EINVAL);
        assert_int_equal(apireq_check_path("/a\0b", 4, err), -EINVAL);
        char *big = malloc(5000);
        memset(big, 'a', 5000);
        big[0] = '/';
        assert_int_equal(apireq_check_path(big, 4096, err), 0);
        assert_int_equal(apireq_check_path(big, 4097, err), -EINVAL);
        free(big);
}

static void test_base64(void **state) {
        uint8_t *d = NULL;
        size_t n = 0;
        assert_int_equal(apireq_base64_decode("aGVsbG8=", 8, 100, &d, &n), 0);
        assert_int_equal(n, 5);
        assert_memory_equal(d, "hello", 5);
        free(d);
        assert_int_equal(apireq_base64_decode("", 0, 100, &d, &n), 0);
        assert_int_equal(n, 0);
        free(d);
        assert_int_equal(apireq_base64_decode("aGVsbG8", 7, 100, &d, &n), -EINVAL);
        assert_int_equal(apireq_base64_decode("aGV*bG8=", 8, 100, &d, &n), -EINVAL);
        assert_int_equal(apireq_base64_decode("aGVsbG8=", 8, 4, &d, &n), -EFBIG);
        char *s = NULL;
        assert_int_equal(apireq_base64_encode((const uint8_t *) "hi\n", 3, &s), 0);
        assert_string_equal(s, "aGkK");
        free(s);
}

static void test_stdin_signal(void **state) {
        struct apireq_stdin in;
        json_t *o = parse("{\"data\":\"aGkK\"}");
        assert_int_equal(apireq_parse_stdin(o, &in, err), 0);
        assert_int_equal(in.len, 3);
        assert_false(in.close);
        apireq_stdin_release(&in);
        json_decref(o);
        o = parse("{\"text\":\"ls\\n\",\"close\":true}");
        assert_int_equal(apireq_parse_stdin(o, &in, err), 0);
        assert_int_equal(in.len, 3);
        assert_true(in.close);
        apireq_stdin_release(&in);
        json_decref(o);
        o = parse("{\"close\":true}");
        assert_int_equal(apireq_parse_stdin(o, &in, err), 0);
        assert_int_equal(in.len, 0);
        apireq_stdin_release(&in);
        json_decref(o);
        static const char *const bad[] = { "{}", "{\"data\":\"!!\"}", "{\"data\":1}", "{\"text\":\"a\",\"data\":\"YQ==\"}",
                                           "{\"text\":\"a\",\"close\":\"yes\"}" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                o = parse(bad[i]);
                assert_int_equal(apireq_parse_stdin(o, &in, err), -EINVAL);
                json_decref(o);
        }

        int sig = 0;
        o = parse("{\"signal\":9}");
        assert_int_equal(apireq_parse_signal(o, &sig, err), 0);
        assert_int_equal(sig, 9);
        json_decref(o);
        o = parse("{\"signal\":\"SIGTERM\"}");
        assert_int_equal(apireq_parse_signal(o, &sig, err), 0);
        assert_int_equal(sig, SIGTERM);
        json_decref(o);
        o = parse("{\"signal\":\"kill\"}");
        assert_int_equal(apireq_parse_signal(o, &sig, err), 0);
        assert_int_equal(sig, SIGKILL);
        json_decref(o);
        static const char *const badsig[] = { "{}", "{\"signal\":0}", "{\"signal\":65}", "{\"signal\":\"NOPE\"}",
                                              "{\"signal\":true}" };
        for (size_t i = 0; i < sizeof badsig / sizeof badsig[0]; i++) {
                o = parse(badsig[i]);
                assert_int_equal(apireq_parse_signal(o, &sig, err), -EINVAL);
                json_decref(o);
        }
}

static void expect_refused(const char *body, enum apireq_body kind, const char *msg) {
        json_t *o = parse(body);
        assert_int_equal(apireq_check_body(o, kind, false, err), -EINVAL);
        assert_string_equal(err, msg);
        assert_int_equal(apireq_check_body(o, kind, true, err), 0); /* lenient lets it pass */
        json_decref(o);
}

static void expect_accepted(const char *body, enum apireq_body kind) {
        json_t *o = parse(body);
        assert_int_equal(apireq_check_body(o, kind, false, err), 0);
        json_decref(o);
}

static void test_check_fields(void **state) {
        /* every kind: its fields spelt right pass, one misspelt is named */
        static const struct {
                enum apireq_body kind;
                const char *good, *bad, *name;
        } cases[] = {
                { APIREQ_BODY_NONE, "{}", "{\"wait\":true}", "wait" },
                { APIREQ_BODY_CREATE,
                  "{\"template\":\"m\",\"env\":{\"netwrok\":\"x\"},\"metadata\":{\"any\":\"x\"},"
                  "\"snapshot_policy\":{\"disk_every\":0,\"full_every\":0,\"full_keep\":1,"
                  "\"tiers\":[{\"every\":1,\"for\":2}]},\"idle_timeout_s\":0,\"recovery\":\"boot\","
                  "\"tenant\":\"t\",\"network\":{\"anything\":1}}",
                  "{\"template\":\"m\",\"netwrok\":{}}", "netwrok" },
                { APIREQ_BODY_EXEC,
                  "{\"cmd\":[\"a\"],\"env\":{},\"cwd\":\"/\",\"stdin\":\"\",\"timeout_s\":1}",
                  "{\"cmd\":[\"a\"],\"timeout\":1}", "timeout" },
                { APIREQ_BODY_SESSION,
                  "{\"cmd\":[\"a\"],\"env\":{},\"cwd\":\"/\",\"pty\":true,\"rows\":1,\"cols\":1}",
                  "{\"cmd\":[\"a\"],\"tty\":true}", "tty" },
                { APIREQ_BODY_STDIN, "{\"data\":\"\",\"text\":\"\",\"close\":true}", "{\"txt\":\"x\"}", "txt" },
                { APIREQ_BODY_SIGNAL, "{\"signal\":9}", "{\"sig\":9}", "sig" },
                { APIREQ_BODY_ROLLBACK, "{\"snapshot\":\"s\"}", "{\"snapshot_id\":\"s\"}", "snapshot_id" },
                { APIREQ_BODY_SNAPSHOT, "{\"kind\":\"disk\"}", "{\"type\":\"disk\"}", "type" },
                { APIREQ_BODY_NAME, "{\"name\":\"n\"}", "{\"nam\":\"n\"}", "nam" },
                { APIREQ_BODY_NAME, "{\"name\":\"n\"}", "{\"name\":\"n\",\"network\":{}}", "network" },
                { APIREQ_BODY_TENANT, "{\"name\":\"n\",\"network\":{}}", "{\"name\":\"n\",\"netwrok\":{}}",
                  "netwrok" },
                { APIREQ_BODY_NETWORK, "{\"mode\":\"allowlist\",\"allow\":[],\"deny\":[]}",
                  "{\"mode\":\"deny-all\",\"egress\":{}}", "egress" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                char msg[128];
                snprintf(msg, sizeof msg, "unknown field \"%s\" in the request body", cases[i].name);
                expect_accepted(cases[i].good, cases[i].kind);
                expect_accepted("{}", cases[i].kind);
                expect_refused(cases[i].bad, cases[i].kind, msg);
        }
        assert_int_equal(apireq_check_body(NULL, APIREQ_BODY_EXEC, false, err), 0); /* no body */
        assert_int_equal(apireq_check_body(NULL, _APIREQ_BODY_MAX, false, err), -EINVAL);

        /* nested objects airlockd interprets are strict, free-form maps not */
        expect_refused("{\"snapshot_policy\":{\"disk_evry\":0}}", APIREQ_BODY_CREATE,
                       "unknown field \"disk_evry\" in \"snapshot_policy\"");
        expect_refused("{\"snapshot_policy\":{\"tiers\":[{\"every\":1,\"for\":2},{\"every\":1,\"fro\":2}]}}",
                       APIREQ_BODY_CREATE, "unknown field \"fro\" in \"snapshot_policy.tiers[1]\"");
        /* wrong types inside are the policy parser's to name */
        expect_accepted("{\"snapshot_policy\":{\"tiers\":[5]}}", APIREQ_BODY_CREATE);
        expect_accepted("{\"snapshot_policy\":{\"tiers\":{\"x\":1}}}", APIREQ_BODY_CREATE);
        expect_accepted("{\"snapshot_policy\":7}", APIREQ_BODY_CREATE);

        /* the key is shown as one line of printable ASCII, cut at 64 bytes */
        expect_refused("{\"a\\nb\\u00e9\":1}", APIREQ_BODY_NONE, "unknown field \"a?b??\" in the request body");
        char big[200], msg[160];
        memset(big, 0, sizeof big);
        memcpy(big, "{\"", 2);
        memset(big + 2, 'k', 100);
        memcpy(big + 102, "\":1}", 4);
        snprintf(msg, sizeof msg, "unknown field \"%.64s...\" in the request body", big + 2);
        expect_refused(big, APIREQ_BODY_NONE, msg);

        /* the plain function: where names the object, non-objects refused */
        static const char *const known[] = { "a", NULL };
        json_t *o = parse("{\"a\":1,\"b\":2}");
        assert_int_equal(apireq_check_fields(o, known, "x.y", false, err), -EINVAL);
        assert_string_equal(err, "unknown field \"b\" in \"x.y\"");
        assert_int_equal(apireq_check_fields(o, known, "x.y", true, err), 0);
        json_decref(o);
        o = json_integer(1);
        assert_int_equal(apireq_check_fields(o, known, "x", true, err), -EINVAL);
        assert_string_equal(err, "field 'x' must be an object");
        json_decref(o);
}

static void test_error_table(void **state) {
        assert_int_equal(api_error_status(-EINVAL), 400);
        assert_int_equal(api_error_status(-EACCES), 401);
        assert_int_equal(api_error_status(-ENOENT), 404);
        assert_int_equal(api_error_status(-EOPNOTSUPP), 405);
        assert_int_equal(api_error_status(-EFBIG), 413);
        assert_int_equal(api_error_status(-EREMOTEIO), 502);
        assert_int_equal(api_error_status(-EHOSTDOWN), 503);
        assert_int_equal(api_error_status(-ETIMEDOUT), 504);
        assert_int_equal(api_error_status(-ENOTTY), 500);
        assert_string_equal(api_error_code(-ENOENT), "not_found");
        assert_int_equal(api_error_from_code("guest"), -EREMOTEIO);
        assert_int_equal(api_error_from_code("unavailable"), -EHOSTDOWN);
        assert_int_equal(api_error_from_code("conflict"), -EEXIST);
        assert_int_equal(api_error_from_code("weird"), -EIO);
        assert_int_equal(api_error_from_code(NULL), -EIO);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_object), cmocka_unit_test(test_create),
                cmocka_unit_test(test_exec),         cmocka_unit_test(test_session),
                cmocka_unit_test(test_paths),        cmocka_unit_test(test_base64),
                cmocka_unit_test(test_stdin_signal), cmocka_unit_test(test_check_fields),
                cmocka_unit_test(test_error_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
