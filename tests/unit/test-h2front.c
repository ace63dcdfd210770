/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's HTTP/2 front (src/gw/h2front.c), driven by a real nghttp2
 * client session on one side and by a test upstream (what it writes, the
 * responses it is given) on the other; the policy is the test's: a.test
 * is allowed, anything else refused.
 */
#include <nghttp2/nghttp2.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "h2front.h"

struct stream_seen {
        int32_t id;
        int status;
        char body[4096];
        size_t body_len;
        bool closed, reset;
};

struct world {
        struct h2front *f;
        nghttp2_session *client;
        char up[1 << 17]; /* what the front wrote upstream */
        size_t up_len;
        int heads;
        char last_host[256], last_path[256];
        int last_body;
        struct stream_seen streams[8];
        size_t n_streams;
        bool goaway;
        const char *secret; /* redacted from responses */
};

static struct stream_seen *seen(struct world *w, int32_t id) {
        for (size_t i = 0; i < w->n_streams; i++)
                if (w->streams[i].id == id)
                        return &w->streams[i];
        assert_true(w->n_streams < 8);
        w->streams[w->n_streams] = (struct stream_seen){.id = id};
        return &w->streams[w->n_streams++];
}

/* --- the front's ops: the test's upstream and policy --- */

static int op_head(void *ud, const struct http1_head *h, const char **why) {
        struct world *w = ud;
        w->heads++;
        snprintf(w->last_host, sizeof w->last_host, "%s", h->host);
        snprintf(w->last_path, sizeof w->last_path, "%s", h->path);
        w->last_body = h->body;
        if (strcmp(h->host, "a.test") != 0) {
                *why = "not allowed";
                return 403;
        }
        size_t len = 0;
        int r = http1_head_serialize(h, NULL, 0, NULL, 0, w->up + w->up_len, sizeof w->up - w->up_len, &len);
        assert_int_equal(r, 0);
        w->up_len += len;
        return 0;
}

static int op_up_write(void *ud, const void *data, size_t len) {
        struct world *w = ud;
        assert_true(len <= sizeof w->up - w->up_len);
        memcpy(w->up + w->up_len, data, len);
        w->up_len += len;
        return 0;
}

static size_t op_up_room(void *ud) {
        struct world *w = ud;
        return sizeof w->up - w->up_len;
}

static size_t op_redact(void *ud, uint8_t *data, size_t len, size_t scanned, bool final) {
        struct world *w = ud;
        if (!w->secret)
                return len;
        size_t sl = strlen(w->secret);
        for (uint8_t *at = data; (at = memmem(at, (size_t) (data + len - at), w->secret, sl)); at += sl)
                memset(at, '*', sl);
        return len;
}

static const struct h2front_ops ops = {op_head, op_up_write, op_up_room, op_redact};

/* --- the client --- */

static ssize_t c_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud) {
        struct world *w = ud;
        size_t used = 0;
        const char *why = NULL;
        int r = h2front_recv(w->f, data, len, &used, &why);
        if (r < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        assert_int_equal(used, len); /* the test's upstream has room */
        return (ssize_t) len;
}

static int c_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
                    const uint8_t *value, size_t vl, uint8_t flags, void *ud) {
        struct stream_seen *st = seen(ud, frame->hd.stream_id);
        if (nl == 7 && memcmp(name, ":status", 7) == 0)
                st->status = atoi((const char *) value);
        return 0;
}

static int c_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
        struct stream_seen *st = seen(ud, id);
        size_t n = len < sizeof st->body - 1 - st->body_len ? len : sizeof st->body - 1 - st->body_len;
        memcpy(st->body + st->body_len, data, n);
        st->body_len += n;
        st->body[st->body_len] = 0;
        return 0;
}

static int c_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud) {
        struct stream_seen *st = seen(ud, id);
        st->closed = true;
        st->reset = error_code != 0;
        return 0;
}

static int c_frame(nghttp2_session *s, const nghttp2_frame *frame, void *ud) {
        struct world *w = ud;
        if (frame->hd.type == NGHTTP2_GOAWAY)
                w->goaway = true;
        return 0;
}

/* Moves bytes both ways until neither side has more to say. */
static void exchange(struct world *w) {
        for (int round = 0; round < 64; round++) {
                assert_int_equal(nghttp2_session_send(w->client), 0);
                uint8_t buf[1 << 16];
                size_t n = h2front_send(w->f, buf, sizeof buf);
                if (n > 0)
                        assert_int_equal(nghttp2_session_mem_recv(w->client, buf, n), (ssize_t) n);
                if (n == 0 && !nghttp2_session_want_write(w->client))
                        return;
        }
}

static struct world *world_new(void) {
        struct world *w = calloc(1, sizeof *w);
        assert_non_null(w);
        assert_int_equal(h2front_new(&ops, w, &w->f), 0);
        nghttp2_session_callbacks *cb;
        assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
        nghttp2_session_callbacks_set_send_callback(cb, c_send);
        nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, c_frame);
        assert_int_equal(nghttp2_session_client_new(&w->client, cb, w), 0);
        nghttp2_session_callbacks_del(cb);
        assert_int_equal(nghttp2_submit_settings(w->client, NGHTTP2_FLAG_NONE, NULL, 0), 0);
        exchange(w);
        return w;
}

static void world_free(struct world *w) {
        nghttp2_session_del(w->client);
        h2front_free(w->f);
        free(w);
}

#define NV(n, v)                                                                                            \
        { (uint8_t *) (n), (uint8_t *) (v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

struct body_src {
        const char *data;
        size_t off, len;
};

static ssize_t c_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *source, void *ud) {
        struct body_src *b = source->ptr;
        size_t n = b->len - b->off < length ? b->len - b->off : length;
        memcpy(buf, b->data + b->off, n);
        b->off += n;
        if (b->off == b->len)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t) n;
}

static int32_t request(struct world *w, const nghttp2_nv *nv, size_t n, struct body_src *body) {
        nghttp2_data_provider prd = {.source.ptr = body, .read_callback = c_read};
        int32_t id = nghttp2_submit_request(w->client, NULL, nv, n, body ? &prd : NULL, NULL);
        assert_true(id > 0);
        exchange(w);
        return id;
}

static void upstream_says(struct world *w, const char *response) {
        h2front_upstream(w->f, (const uint8_t *) response, strlen(response));
        exchange(w);
}

static int32_t get(struct world *w, const char *authority, const char *path) {
        nghttp2_nv nv[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", authority),
                           NV(":path", path)};
        return request(w, nv, 4, NULL);
}

static void test_a_get_becomes_an_http1_request_and_its_response_comes_back(void **state) {
        struct world *w = world_new();
        nghttp2_nv nv[] = {NV(":method", "GET"),      NV(":scheme", "https"), NV(":authority", "a.test"),
                           NV(":path", "/hello?x=1"), NV("accept", "*/*"),    NV("cookie", "a=1"),
                           NV("cookie", "b=2"),       NV("te", "trailers")};
        int32_t id = request(w, nv, 8, NULL);
        w->up[w->up_len] = 0;
        assert_string_equal(
                w->up, "GET /hello?x=1 HTTP/1.1\r\nHost: a.test\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n");
        upstream_says(w, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Thing: yes\r\n\r\nhello");
        struct stream_seen *st = seen(w, id);
        assert_int_equal(st->status, 200);
        assert_string_equal(st->body, "hello");
        assert_true(st->closed && !st->reset);
        assert_false(w->goaway);
        assert_true(h2front_upstream_wanted(w->f));

        /* the same connection carries the next request: a second exchange */
        w->up_len = 0;
        id = get(w, "a.test", "/two");
        w->up[w->up_len] = 0;
        assert_string_equal(w->up, "GET /two HTTP/1.1\r\nHost: a.test\r\n\r\n");
        upstream_says(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n");
        st = seen(w, id);
        assert_int_equal(st->status, 200);
        assert_string_equal(st->body, "two");
        world_free(w);
}

static void test_an_authority_switch_on_a_reused_connection_is_refused(void **state) {
        struct world *w = world_new();
        int32_t first = get(w, "a.test", "/");
        upstream_says(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_int_equal(seen(w, first)->status, 200);
        size_t before = w->up_len;
        int32_t second = get(w, "e.test", "/echo");
        struct stream_seen *st = seen(w, second);
        assert_int_equal(st->status, 403);
        assert_non_null(strstr(st->body, "refused: not allowed"));
        assert_int_equal(w->up_len, before); /* nothing went upstream */
        assert_true(w->goaway);
        assert_true(h2front_done(w->f) || nghttp2_session_want_read(w->client));
        world_free(w);
}

static void test_bodies_are_framed_for_http1(void **state) {
        struct world *w = world_new();
        struct body_src b = {"0123456789", 0, 10};
        nghttp2_nv chunked[] = {NV(":method", "POST"), NV(":scheme", "https"), NV(":authority", "a.test"),
                                NV(":path", "/up")};
        int32_t id = request(w, chunked, 4, &b);
        w->up[w->up_len] = 0;
        assert_string_equal(w->up, "POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   "a\r\n0123456789\r\n0\r\n\r\n");
        upstream_says(w, "HTTP/1.1 204 No Content\r\n\r\n");
        assert_int_equal(seen(w, id)->status, 204);

        w->up_len = 0;
        struct body_src b2 = {"abc", 0, 3};
        nghttp2_nv sized[] = {NV(":method", "PUT"), NV(":scheme", "https"), NV(":authority", "a.test:443"),
                              NV(":path", "/up"), NV("content-length", "3")};
        id = request(w, sized, 5, &b2);
        w->up[w->up_len] = 0;
        assert_string_equal(w->up, "PUT /up HTTP/1.1\r\nHost: a.test:443\r\ncontent-length: 3\r\n\r\nabc");
        upstream_says(w, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
        assert_int_equal(seen(w, id)->status, 201);
        world_free(w);
}

static void refused_with(const nghttp2_nv *nv, size_t n, int status) {
        struct world *w = world_new();
        int32_t id = request(w, nv, n, NULL);
        assert_int_equal(w->up_len, 0);
        assert_int_equal(w->heads, 0);
        struct stream_seen *st = seen(w, id);
        if (status)
                assert_int_equal(st->status, status);
        else
                assert_true(st->reset); /* nghttp2 itself refused it */
        world_free(w);
}

static void test_requests_http1_could_not_carry_are_refused(void **state) {
        nghttp2_nv http[] = {NV(":method", "GET"), NV(":scheme", "http"), NV(":authority", "a.test"),
                             NV(":path", "/")};
        refused_with(http, 4, 400);
        nghttp2_nv space[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a.test"),
                              NV(":path", "/a b")};
        refused_with(space, 4, 0); /* nghttp2 checks :path's characters */
        nghttp2_nv frag[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a.test"),
                             NV(":path", "/a#b")};
        refused_with(frag, 4, 400);
        nghttp2_nv notoken[] = {NV(":method", "G(T"), NV(":scheme", "https"), NV(":authority", "a.test"),
                                NV(":path", "/")};
        refused_with(notoken, 4, 0);
        nghttp2_nv userinfo[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "u@a.test"),
                                 NV(":path", "/")};
        refused_with(userinfo, 4, 400);
        nghttp2_nv twohosts[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a.test"),
                                 NV(":path", "/"), NV("host", "e.test")};
        refused_with(twohosts, 5, 400);
        nghttp2_nv upgrade[] = {NV(":method", "GET"), NV(":scheme", "https"), NV(":authority", "a.test"),
                                NV(":path", "/"), NV("upgrade", "websocket")};
        refused_with(upgrade, 5, 0); /* a connection-specific field: nghttp2 resets the stream */
        nghttp2_nv connect[] = {NV(":method", "CONNECT"), NV(":authority", "a.test:443")};
        refused_with(connect, 2, 405);
        nghttp2_nv unknown[] = {NV(":method", "POWT"), NV(":scheme", "https"), NV(":authority", "a.test"),
                                NV(":path", "/")};
        refused_with(unknown, 4, 405); /* a token, but no method the HTTP/1.1 path takes */
}

static void test_too_many_fields_answer_431(void **state) {
        nghttp2_nv nv[HTTP1_HEADERS_MAX + 8];
        char names[HTTP1_HEADERS_MAX + 4][16];
        size_t n = 0;
        nv[n++] = (nghttp2_nv) NV(":method", "GET");
        nv[n++] = (nghttp2_nv) NV(":scheme", "https");
        nv[n++] = (nghttp2_nv) NV(":authority", "a.test");
        nv[n++] = (nghttp2_nv) NV(":path", "/");
        for (size_t i = 0; i < HTTP1_HEADERS_MAX + 1; i++) {
                int l = snprintf(names[i], sizeof names[i], "x-h%zu", i);
                nv[n++] = (nghttp2_nv){(uint8_t *) names[i], (uint8_t *) "v", (size_t) l, 1,
                                       NGHTTP2_NV_FLAG_NONE};
        }
        refused_with(nv, n, 431);
}

static void test_responses_are_redacted_and_a_closing_upstream_ends_the_connection(void **state) {
        struct world *w = world_new();
        w->secret = "s3cr3t";
        int32_t id = get(w, "a.test", "/leak");
        upstream_says(
                w, "HTTP/1.1 200 OK\r\nX-Echo: key s3cr3t\r\nConnection: close\r\nContent-Length: 13\r\n\r\n"
                   "got s3cr3t ok");
        struct stream_seen *st = seen(w, id);
        assert_int_equal(st->status, 200);
        assert_string_equal(st->body, "got ****** ok");
        assert_false(h2front_upstream_wanted(w->f));
        assert_true(w->goaway);
        assert_true(h2front_done(w->f));
        world_free(w);
}

/* An origin that closes its kept-alive connection between requests: the
 * guest hears GOAWAY (and opens a new connection), not a 502 later. */
static void test_an_idle_upstream_that_closes_ends_the_connection_gracefully(void **state) {
        struct world *w = world_new();
        int32_t id = get(w, "a.test", "/");
        upstream_says(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_int_equal(seen(w, id)->status, 200);
        assert_true(h2front_upstream_room(w->f) > 0); /* idle, and still read */
        assert_false(w->goaway);
        h2front_upstream(w->f, NULL, 0);
        exchange(w);
        assert_true(w->goaway);
        assert_false(h2front_upstream_wanted(w->f));
        assert_true(h2front_done(w->f));
        world_free(w);
}

static void test_a_broken_response_answers_502(void **state) {
        struct world *w = world_new();
        int32_t id = get(w, "a.test", "/");
        upstream_says(w, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
        assert_int_equal(seen(w, id)->status, 502);
        assert_false(h2front_upstream_wanted(w->f));

        /* and the upstream's end before a response is a 502 too */
        struct world *w2 = world_new();
        id = get(w2, "a.test", "/");
        h2front_upstream(w2->f, NULL, 0);
        exchange(w2);
        assert_int_equal(seen(w2, id)->status, 502);
        world_free(w);
        world_free(w2);
}

static void test_a_failed_upstream_is_said_to_every_request(void **state) {
        struct world *w = world_new();
        h2front_upstream_failed(w->f, 502, "the destination's certificate: expired");
        exchange(w);
        int32_t id = get(w, "a.test", "/");
        struct stream_seen *st = seen(w, id);
        assert_int_equal(st->status, 502);
        assert_non_null(strstr(st->body, "certificate: expired"));
        assert_int_equal(w->up_len, 0);
        world_free(w);
}

static void test_a_bad_preface_breaks_the_connection(void **state) {
        struct h2front *f;
        assert_int_equal(h2front_new(&ops, NULL, &f), 0);
        const char *h1 = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
        size_t used;
        const char *why = NULL;
        assert_true(h2front_recv(f, (const uint8_t *) h1, strlen(h1), &used, &why) < 0);
        assert_non_null(why);
        h2front_free(f);
}

/* --- raw frames, for what a well-behaved client never sends --- */

static size_t frame(uint8_t *out, uint8_t type, uint8_t flags, uint32_t stream, const void *payload,
                    size_t len) {
        out[0] = (uint8_t) (len >> 16), out[1] = (uint8_t) (len >> 8), out[2] = (uint8_t) len;
        out[3] = type, out[4] = flags;
        out[5] = (uint8_t) (stream >> 24), out[6] = (uint8_t) (stream >> 16),
        out[7] = (uint8_t) (stream >> 8);
        out[8] = (uint8_t) stream;
        memcpy(out + 9, payload, len);
        return 9 + len;
}

/* A request's header block: literal fields without indexing, no Huffman. */
static size_t get_block(uint8_t *out, const char *authority) {
        const char *nv[] = {":method", "GET", ":scheme", "https", ":authority", authority, ":path", "/"};
        size_t n = 0;
        for (size_t i = 0; i < 8; i += 2) {
                out[n++] = 0;
                for (size_t j = 0; j < 2; j++) {
                        size_t l = strlen(nv[i + j]);
                        out[n++] = (uint8_t) l;
                        memcpy(out + n, nv[i + j], l);
                        n += l;
                }
        }
        return n;
}

/* Whether the front's output holds RST_STREAM(stream, code). */
static bool has_rst(const uint8_t *p, size_t n, uint32_t stream, uint32_t code) {
        for (size_t at = 0; at + 9 <= n;) {
                size_t len = (size_t) p[at] << 16 | (size_t) p[at + 1] << 8 | p[at + 2];
                uint32_t id = (uint32_t) p[at + 5] << 24 | (uint32_t) p[at + 6] << 16 |
                              (uint32_t) p[at + 7] << 8 | p[at + 8];
                if (p[at + 3] == NGHTTP2_RST_STREAM && id == stream && len == 4 &&
                    ((uint32_t) p[at + 9] << 24 | (uint32_t) p[at + 10] << 16 | (uint32_t) p[at + 11] << 8 |
                     p[at + 12]) == code)
                        return true;
                at += 9 + len;
        }
        return false;
}

static void test_a_second_stream_at_once_is_refused_for_a_retry(void **state) {
        struct world *w = calloc(1, sizeof *w);
        assert_non_null(w);
        assert_int_equal(h2front_new(&ops, w, &w->f), 0);
        uint8_t in[1024], block[256], out[1 << 16];
        size_t n = 0;
        memcpy(in, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
        n += 24;
        n += frame(in + n, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
        size_t bl = get_block(block, "a.test");
        n += frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, block,
                   bl);
        n += frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3, block,
                   bl);
        size_t used = 0;
        const char *why = NULL;
        assert_int_equal(h2front_recv(w->f, in, n, &used, &why), 0);
        assert_int_equal(used, n);
        size_t got = h2front_send(w->f, out, sizeof out);
        assert_true(has_rst(out, got, 3, NGHTTP2_REFUSED_STREAM));
        assert_false(has_rst(out, got, 1, NGHTTP2_REFUSED_STREAM));
        w->up[w->up_len] = 0;
        assert_string_equal(w->up, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); /* the first alone went */
        assert_int_equal(w->heads, 1);
        h2front_free(w->f);
        free(w);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_get_becomes_an_http1_request_and_its_response_comes_back),
                cmocka_unit_test(test_an_authority_switch_on_a_reused_connection_is_refused),
                cmocka_unit_test(test_bodies_are_framed_for_http1),
                cmocka_unit_test(test_requests_http1_could_not_carry_are_refused),
                cmocka_unit_test(test_too_many_fields_answer_431),
                cmocka_unit_test(test_responses_are_redacted_and_a_closing_upstream_ends_the_connection),
                cmocka_unit_test(test_an_idle_upstream_that_closes_ends_the_connection_gracefully),
                cmocka_unit_test(test_a_broken_response_answers_502),
                cmocka_unit_test(test_a_failed_upstream_is_said_to_every_request),
                cmocka_unit_test(test_a_bad_preface_breaks_the_connection),
                cmocka_unit_test(test_a_second_stream_at_once_is_refused_for_a_retry),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
