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
#include "e2b-connect.h"
#include "e2b-envd-internal.h"
#include "apierror.h"
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

static void envelope_of(const char *json, uint8_t flags, uint8_t *buf, size_t *len) {
        size_t n = strlen(json);
        buf[0] = flags;
        buf[1] = (uint8_t) (n >> 24);
        buf[2] = (uint8_t) (n >> 16);
        buf[3] = (uint8_t) (n >> 8);
        buf[4] = (uint8_t) n;
        memcpy(buf + 5, json, n);
        *len = n + 5;
}

/* A server stream's request is one envelope holding one JSON object: all
 * else is refused with a message, never half taken. */
static void test_stream_request(void **state) {
        uint8_t buf[256];
        size_t len;
        char err[API_ERRMSG_MAX];
        json_t *o = NULL;
        envelope_of("{\"path\":\"/tmp\"}", 0, buf, &len);
        assert_int_equal(connect_parse_stream_request(buf, len, &o, err), 0);
        assert_string_equal(json_string_value(json_object_get(o, "path")), "/tmp");
        json_decref(o);
        /* short, trailing bytes, a length past the end */
        assert_int_equal(connect_parse_stream_request(buf, 4, &o, err), -EINVAL);
        assert_int_equal(connect_parse_stream_request(buf, len - 1, &o, err), -EINVAL);
        uint8_t two[512];
        memcpy(two, buf, len);
        memcpy(two + len, buf, len);
        assert_int_equal(connect_parse_stream_request(two, 2 * len, &o, err), -EINVAL);
        assert_non_null(strstr(err, "exactly one"));
        /* flags: compressed, end-stream */
        envelope_of("{}", CONNECT_FLAG_COMPRESSED, buf, &len);
        assert_int_equal(connect_parse_stream_request(buf, len, &o, err), -EINVAL);
        assert_non_null(strstr(err, "compressed"));
        envelope_of("{}", CONNECT_FLAG_END_STREAM, buf, &len);
        assert_int_equal(connect_parse_stream_request(buf, len, &o, err), -EINVAL);
        /* not an object, not JSON, duplicate keys */
        static const char *const bad[] = { "[1]", "\"s\"", "{", "{\"a\":1,\"a\":2}" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                envelope_of(bad[i], 0, buf, &len);
                assert_int_equal(connect_parse_stream_request(buf, len, &o, err), -EINVAL);
        }
        /* a length over the limit is refused before anything is read */
        uint8_t huge[5] = { 0, 0x7f, 0xff, 0xff, 0xff };
        assert_int_equal(connect_parse_stream_request(huge, sizeof huge, &o, err), -EINVAL);
        assert_non_null(strstr(err, "1 MiB"));
}

/* What goes out: an envelope's header says the payload's length; the end
 * of a stream is flagged and carries the error by its Connect name. */
static void test_envelopes(void **state) {
        uint8_t *b = NULL;
        size_t n = 0;
        json_t *m = json_pack("{s:{s:{s:i}}}", "event", "start", "pid", 42);
        assert_int_equal(connect_envelope(0, m, &b, &n), 0);
        json_decref(m);
        assert_int_equal(b[0], 0);
        assert_int_equal(((size_t) b[1] << 24 | (size_t) b[2] << 16 | (size_t) b[3] << 8 | b[4]), n - 5);
        assert_memory_equal(b + 5, "{\"event\":{\"start\":{\"pid\":42}}}", n - 5);
        free(b);
        assert_int_equal(connect_end_stream(CONNECT_UNKNOWN, NULL, true, &b, &n), 0);
        assert_int_equal(b[0], CONNECT_FLAG_END_STREAM);
        assert_int_equal(n, 7);
        assert_memory_equal(b + 5, "{}", 2);
        free(b);
        assert_int_equal(connect_end_stream(CONNECT_DEADLINE_EXCEEDED, "late", false, &b, &n), 0);
        assert_memory_equal(b + 5, "{\"error\":{\"code\":\"deadline_exceeded\",\"message\":\"late\"}}", n - 5);
        free(b);
        assert_int_equal(connect_code_http_status(CONNECT_NOT_FOUND), 404);
        assert_int_equal(connect_code_http_status(CONNECT_UNAUTHENTICATED), 401);
        assert_int_equal(connect_code_from_api("not_found"), CONNECT_NOT_FOUND);
        assert_int_equal(connect_code_from_api("guest"), CONNECT_UNAVAILABLE);
        assert_int_equal(connect_code_from_api("whatever"), CONNECT_INTERNAL);
}

static void test_headers(void **state) {
        uint64_t ms = 1;
        assert_int_equal(connect_parse_timeout(NULL, &ms), 0);
        assert_int_equal(ms, 0);
        assert_int_equal(connect_parse_timeout("60000", &ms), 0);
        assert_int_equal(ms, 60000);
        static const char *const bad_t[] = { "", "-1", "1.5", " 5", "12345678901", "0x10" };
        for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++)
                assert_int_equal(connect_parse_timeout(bad_t[i], &ms), -EINVAL);
        char user[33];
        assert_int_equal(connect_basic_user(NULL, user, sizeof user), 0);
        assert_string_equal(user, "");
        assert_int_equal(connect_basic_user("Basic cm9vdDo=", user, sizeof user), 0); /* "root:" */
        assert_string_equal(user, "root");
        assert_int_equal(connect_basic_user("basic dXNlcjpwdw==", user, sizeof user), 0); /* "user:pw" */
        assert_string_equal(user, "user");
        static const char *const bad_u[] = {
                "Bearer cm9vdDo=", "Basic !!!", "Basic cm9vdA==" /* no colon */, "Basic Ojo=" /* "::" */,
                "Basic Um9vdDo=" /* "Root:" */, "Basic Li4vZXRjOg==" /* "../etc:" */,
        };
        for (size_t i = 0; i < sizeof bad_u / sizeof bad_u[0]; i++)
                assert_int_equal(connect_basic_user(bad_u[i], user, sizeof user), -EINVAL);
        assert_true(connect_user_is_valid("user"));
        assert_true(connect_user_is_valid("_apt"));
        assert_false(connect_user_is_valid("9lives"));
        assert_false(connect_user_is_valid("a b"));
        assert_false(connect_user_is_valid("abcdefghijklmnopqrstuvwxyzabcdefg")); /* 33 */
}

/* A file op's user goes to the node; the node's "unknown user" answer is
 * told apart from other invalid ones and becomes envd's words. */
static void test_file_user(void **state) {
        struct envd_call c = { .user = "alice" };
        json_t *req = e2b_file_req(&c, json_pack("{s:s, s:s}", "op", "file.stat", "path", "/x"));
        assert_non_null(req);
        assert_string_equal(json_string_value(json_object_get(req, "user")), "alice");
        json_decref(req);
        c.user = "";
        req = e2b_file_req(&c, json_pack("{s:s}", "op", "file.list"));
        assert_non_null(req);
        assert_null(json_object_get(req, "user")); /* none given: the node's root */
        json_decref(req);
        assert_null(e2b_file_req(&c, NULL));

        struct api_ctx api = { 0 };
        snprintf(api.err, sizeof api.err, "unknown user 'bob'");
        assert_false(e2b_unknown_user(&api, "bob", -EACCES));
        assert_true(e2b_unknown_user(&api, "bob", -EINVAL));
        assert_string_equal(api.err, "invalid username: 'bob'");
        snprintf(api.err, sizeof api.err, "field \"path\" must be an absolute path");
        assert_false(e2b_unknown_user(&api, "bob", -EINVAL));
        assert_string_equal(api.err, "field \"path\" must be an absolute path");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_file_user),
                cmocka_unit_test(test_percent_decode),
                cmocka_unit_test(test_access_token),
                cmocka_unit_test(test_stream_request),
                cmocka_unit_test(test_envelopes),
                cmocka_unit_test(test_headers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
