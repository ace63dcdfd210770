/* SPDX-License-Identifier: Apache-2.0 */
/* The parser of an untrusted server's HTTP/1.x response (lib/httpresp). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "httpresp.h"

struct got {
        unsigned status;
        json_t *headers;
        int64_t length;
        char body[1 << 16];
        size_t body_len;
};

static int on_head(void *userdata, unsigned status, json_t *headers, int64_t length) {
        struct got *g = userdata;
        g->status = status;
        g->headers = json_deep_copy(headers);
        g->length = length;
        return 0;
}

static int on_body(void *userdata, const uint8_t *data, size_t len) {
        struct got *g = userdata;
        assert_true(g->body_len + len < sizeof g->body);
        memcpy(g->body + g->body_len, data, len);
        g->body_len += len;
        return 0;
}

static const struct httpresp_events events = { .head = on_head, .body = on_body };

/* Feeds text in reads of step bytes, then (with close) the end. */
static int parse(const char *method, const char *text, size_t step, bool close, struct got *g) {
        memset(g, 0, sizeof *g);
        struct httpresp *p;
        assert_int_equal(httpresp_new(method, &events, g, &p), 0);
        const char *why;
        int r = 0;
        size_t n = strlen(text);
        for (size_t off = 0; off < n && r == 0; off += step)
                r = httpresp_feed(p, (const uint8_t *) text + off, n - off < step ? n - off : step, &why);
        if (r == 0 && close)
                r = httpresp_feed(p, NULL, 0, &why);
        httpresp_free(p);
        return r;
}

static const char *header(struct got *g, const char *name) {
        size_t i;
        json_t *h;
        json_array_foreach(g->headers, i, h)
                if (strcmp(json_string_value(json_array_get(h, 0)), name) == 0)
                        return json_string_value(json_array_get(h, 1));
        return NULL;
}

static void test_framings(void **state) {
        (void) state;
        struct got g;
        for (size_t step = 1; step <= 64; step *= 4) {
                assert_int_equal(parse("GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhelloEXTRA", step,
                                       false, &g),
                                 1);
                assert_int_equal(g.status, 200);
                assert_int_equal(g.length, 5);
                assert_int_equal(g.body_len, 5);
                assert_memory_equal(g.body, "hello", 5);
                assert_string_equal(header(&g, "X-A"), "b");
                assert_null(header(&g, "Content-Length"));
                json_decref(g.headers);

                assert_int_equal(parse("GET",
                                       "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                                       "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                                       step, false, &g),
                                 1);
                assert_int_equal(g.status, 201);
                assert_int_equal(g.length, -1);
                assert_int_equal(g.body_len, 5);
                assert_memory_equal(g.body, "abcde", 5);
                assert_null(header(&g, "Transfer-Encoding"));
                json_decref(g.headers);
        }
        /* a body up to the close */
        assert_int_equal(parse("GET", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nup to the end", 7, true, &g),
                         1);
        assert_int_equal(g.body_len, strlen("up to the end"));
        json_decref(g.headers);
        /* HEAD: the length, no body */
        assert_int_equal(parse("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 64, false, &g), 1);
        assert_int_equal(g.length, 100);
        assert_int_equal(g.body_len, 0);
        json_decref(g.headers);
        /* 204: none either */
        assert_int_equal(parse("GET", "HTTP/1.1 204 No Content\r\nX: y\r\n\r\n", 64, false, &g), 1);
        assert_int_equal(g.status, 204);
        json_decref(g.headers);
}

/* What follows a response in its last read, and whether the connection
 * stays open: what the gateway's HTTP/2 front decides reuse by. */
static void test_keep_alive_and_trailing_bytes(void **state) {
        (void) state;
        struct got g;
        struct {
                const char *text;
                bool keep_alive;
                size_t trailing;
        } cases[] = {
                { "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, 0 },
                { "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200", true, 12 },
                { "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, 0 },
                { "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 0 },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                memset(&g, 0, sizeof g);
                struct httpresp *p;
                const char *why;
                assert_int_equal(httpresp_new("GET", &events, &g, &p), 0);
                assert_false(httpresp_keep_alive(p)); /* not before the end */
                assert_int_equal(httpresp_feed(p, (const uint8_t *) cases[i].text, strlen(cases[i].text), &why), 1);
                assert_int_equal(httpresp_keep_alive(p), cases[i].keep_alive);
                assert_int_equal(httpresp_trailing(p), cases[i].trailing);
                httpresp_free(p);
                json_decref(g.headers);
        }
}

static void test_hops_and_informational(void **state) {
        (void) state;
        struct got g;
        assert_int_equal(parse("GET",
                               "HTTP/1.1 100 Continue\r\n\r\n"
                               "HTTP/1.1 404 Not Found\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n"
                               "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nno",
                               5, false, &g),
                         1);
        assert_int_equal(g.status, 404);
        /* the end-to-end ones, in order, repeats kept */
        assert_int_equal(json_array_size(g.headers), 2);
        assert_string_equal(json_string_value(json_array_get(json_array_get(g.headers, 0), 1)), "a=1");
        assert_string_equal(json_string_value(json_array_get(json_array_get(g.headers, 1), 1)), "b=2");
        assert_memory_equal(g.body, "no", 2);
        json_decref(g.headers);
}

static void test_refusals(void **state) {
        (void) state;
        struct got g;
        /* bare LF, a switch of protocols, no HTTP at all, cut short */
        assert_int_equal(parse("GET", "HTTP/1.1 200 OK\nX: y\n\n", 64, true, &g), -EBADMSG);
        assert_int_equal(parse("GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", 64, true, &g),
                         -EBADMSG);
        assert_int_equal(parse("GET", "SSH-2.0-OpenSSH_9.2\r\n", 64, true, &g), -EBADMSG);
        assert_int_equal(parse("GET", "HTTP/1.1 600 OK\r\nContent-Length: 0\r\n\r\n", 64, true, &g), -EBADMSG);
        assert_int_equal(parse("GET", "HTTP/1.1 099 OK\r\nContent-Length: 0\r\n\r\n", 64, true, &g), -EBADMSG);
        assert_int_equal(parse("GET", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 64, true, &g), -EBADMSG);
        json_decref(g.headers);
        assert_int_equal(parse("GET", "HTTP/1.1 200 OK\r\nContent-Len", 64, true, &g), -EBADMSG);
        assert_int_equal(parse("GET", "", 64, true, &g), -EBADMSG);
        /* smuggling: two lengths, or a length and chunked */
        assert_int_equal(parse("GET", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 64, true, &g),
                         -EBADMSG);
        assert_true(parse("GET", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                          64, true, &g) < 0);
        json_decref(g.headers);

        /* limits: the head's size, the number of headers */
        size_t n = HTTPRESP_HEAD_MAX + 100;
        char *big = malloc(n + 64);
        assert_non_null(big);
        strcpy(big, "HTTP/1.1 200 OK\r\nX: ");
        size_t off = strlen(big);
        memset(big + off, 'a', n - off);
        strcpy(big + n, "\r\n\r\n");
        assert_int_equal(parse("GET", big, 4096, true, &g), -E2BIG);
        free(big);
        char many[HTTPRESP_HEADERS_MAX * 16 + 64] = "HTTP/1.1 200 OK\r\n";
        for (int i = 0; i <= HTTPRESP_HEADERS_MAX; i++)
                snprintf(many + strlen(many), sizeof many - strlen(many), "X-%d: v\r\n", i);
        strcat(many, "\r\n");
        assert_int_equal(parse("GET", many, 512, true, &g), -E2BIG);

        /* a value that is no UTF-8 is dropped, the rest stays */
        assert_int_equal(parse("GET", "HTTP/1.1 200 OK\r\nX-Bad: \xff\xfe\r\nX-Good: ok\r\nContent-Length: 0\r\n\r\n", 64,
                               false, &g),
                         1);
        assert_null(header(&g, "X-Bad"));
        assert_string_equal(header(&g, "X-Good"), "ok");
        json_decref(g.headers);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_framings),
                cmocka_unit_test(test_keep_alive_and_trailing_bytes),
                cmocka_unit_test(test_hops_and_informational),
                cmocka_unit_test(test_refusals),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
