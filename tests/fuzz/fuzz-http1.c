/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the gateway's HTTP/1.x request parser (src/gw/http1.c) with what
 * a guest sends on a connection. The first two bytes seed the split, the
 * rest is the stream, fed whole and then in pseudo-random pieces.
 * Invariants: the events are the same for both (any split gives the same
 * heads, bodies, ends and error); an event never consumes more than it
 * was given and a body piece lies in what was fed; every head has a
 * canonical Host, an origin-form path and clean header values; and a head
 * re-serialised for the upstream parses back to the same request.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void mix(uint64_t *h, const void *p, size_t n) {
        const uint8_t *b = p;
        for (size_t i = 0; i < n; i++)
                *h = (*h ^ b[i]) * 0x100000001b3ull;
}

static void mix_str(uint64_t *h, const char *s) {
        mix(h, s, strlen(s) + 1);
}

static void mix_u64(uint64_t *h, uint64_t v) {
        mix(h, &v, sizeof v);
}

static void check_head(const struct http1_head *h) {
        assert(h->method && h->target && h->path);
        assert(h->path[0] == '/' || strcmp(h->path, "*") == 0);
        assert(h->version_minor <= 1 && h->n_headers <= HTTP1_HEADERS_MAX && h->start < h->end);
        if (h->host_kind == HTTP1_HOST_NAME) {
                char again[GWNAME_MAX + 1];
                assert(gwname_canonical(h->host, strlen(h->host), 0, again) == 0 && strcmp(again, h->host) == 0);
        }
        size_t n_host = 0;
        for (size_t i = 0; i < h->n_headers; i++) {
                const struct http1_header *hd = &h->headers[i];
                assert(strlen(hd->name) == hd->name_len && strlen(hd->value) == hd->value_len && hd->name_len > 0);
                for (size_t j = 0; j < hd->value_len; j++) {
                        unsigned char c = (unsigned char) hd->value[j];
                        assert(c >= 0x20 || c == '\t');
                        assert(c != 0x7f);
                }
                n_host += strcasecmp(hd->name, "host") == 0;
        }
        assert(n_host == 1);
}

/* The head re-serialised parses back to the same request. */
static void check_round_trip(const struct http1_head *h) {
        static char out[HTTP1_HEAD_MAX + 64];
        size_t len = 0;
        assert(http1_head_serialize(h, NULL, 0, NULL, 0, out, sizeof out, &len) == 0);
        struct http1_parser *p = http1_parser_new();
        assert(p);
        size_t used = 0;
        struct http1_event ev;
        assert(http1_parser_feed(p, (const uint8_t *) out, len, &used, &ev) == 0);
        assert(ev.type == HTTP1_EV_HEAD && used == len);
        const struct http1_head *b = http1_parser_head(p);
        assert(strcmp(b->method, h->method) == 0 && strcmp(b->path, h->path) == 0 && !b->absolute_form);
        assert(strcmp(b->host, h->host) == 0 && b->host_kind == h->host_kind && b->port == h->port);
        assert(b->version_minor == h->version_minor && b->body == h->body &&
               b->content_length == h->content_length && b->upgrade == h->upgrade && b->keep_alive == h->keep_alive);
        assert(b->n_headers == h->n_headers);
        for (size_t i = 0; i < h->n_headers; i++)
                assert(strcmp(b->headers[i].name, h->headers[i].name) == 0 &&
                       strcmp(b->headers[i].value, h->headers[i].value) == 0);
        http1_parser_free(p);
}

/* Feeds in[0..n) in pieces from seed (0: whole); returns a digest of the
 * events. */
static uint64_t run(const uint8_t *in, size_t n, uint64_t seed, bool round_trip) {
        struct http1_parser *p = http1_parser_new();
        assert(p);
        uint64_t h = 0xcbf29ce484222325ull;
        size_t off = 0;
        for (;;) {
                size_t piece = n - off;
                if (seed) {
                        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                        size_t k = (size_t) (seed % 64);
                        piece = piece < k ? piece : k;
                }
                const uint8_t *b = in + off;
                size_t left = piece;
                bool failed = false;
                for (int guard = 0;; guard++) {
                        assert(guard < 1000000);
                        size_t used = SIZE_MAX;
                        struct http1_event ev;
                        int r = http1_parser_feed(p, left ? b : NULL, left, &used, &ev);
                        if (r < 0) {
                                mix_u64(&h, (uint64_t) -r);
                                mix_u64(&h, (uint64_t) http1_parser_status(p));
                                assert(http1_parser_reason(p));
                                failed = true;
                                break;
                        }
                        assert(used <= left);
                        b += used;
                        left -= used;
                        off += used;
                        if (ev.type == HTTP1_EV_NEED_MORE) {
                                assert(left == 0);
                                break;
                        }
                        if (ev.type == HTTP1_EV_HEAD) {
                                const struct http1_head *hd = http1_parser_head(p);
                                assert(hd && hd->end == off);
                                check_head(hd);
                                mix_u64(&h, ev.type);
                                mix_str(&h, hd->method);
                                mix_str(&h, hd->target);
                                mix_str(&h, hd->path);
                                mix_str(&h, hd->host);
                                mix_u64(&h, hd->port);
                                mix_u64(&h, hd->body);
                                mix_u64(&h, hd->content_length);
                                mix_u64(&h, hd->upgrade);
                                mix_u64(&h, hd->keep_alive);
                                mix_u64(&h, hd->start);
                                for (size_t i = 0; i < hd->n_headers; i++) {
                                        mix_str(&h, hd->headers[i].name);
                                        mix_str(&h, hd->headers[i].value);
                                }
                                if (round_trip)
                                        check_round_trip(hd);
                        } else if (ev.type == HTTP1_EV_BODY) {
                                assert(ev.len > 0 && ev.data >= in && ev.data + ev.len <= b);
                                /* pieces differ by split: mix the bytes only */
                                mix(&h, ev.data, ev.len);
                        } else {
                                mix_u64(&h, ev.type);
                                mix_u64(&h, ev.upgrade);
                        }
                }
                if (failed || off == n)
                        break;
        }
        http1_parser_free(p);
        return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 2)
                return 0;
        uint64_t seed = ((uint64_t) data[0] << 8 | data[1]) + 1;
        uint64_t whole = run(data + 2, size - 2, 0, true);
        assert(run(data + 2, size - 2, seed, false) == whole);
        return 0;
}
