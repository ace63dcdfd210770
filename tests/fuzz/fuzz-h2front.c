/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the gateway's HTTP/2 front (src/gw/h2front.c) with what a guest
 * sends on an HTTP/2 connection and what an upstream answers. The input is
 * a list of records: a byte (its low bit: 0 the guest, 1 the upstream), a
 * length byte, that many bytes; the guest's stream starts with the client
 * preface, so the fuzzer works on frames. The policy allows a.test only.
 *
 * The invariant that matters: what the front wrote upstream is well-framed
 * HTTP/1.1 (the gateway's own strict parser reads it without an error, and
 * every request in it is for a.test), whatever the guest did: no request
 * smuggled into a body, no body longer than its framing, no head for a
 * refused stream. Plus: the front never writes more upstream than the room
 * it was told, never asks for more response bytes than it said it takes,
 * and sanitizers stay quiet.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h2front.h"
#include "http1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define UP_BUF (1u << 20)

struct fuzz_world {
        uint8_t *up;
        size_t up_len, up_parsed;
        struct http1_parser *check;
};

static int op_head(void *ud, const struct http1_head *h, const char **why) {
        struct fuzz_world *w = ud;
        if (strcmp(h->host, "a.test") != 0) {
                *why = "not allowed";
                return 403;
        }
        size_t len = 0;
        if (http1_head_serialize(h, NULL, 0, NULL, 0, (char *) w->up + w->up_len, UP_BUF - w->up_len, &len) <
            0) {
                *why = "too large";
                return 403;
        }
        w->up_len += len;
        return 0;
}

static int op_up_write(void *ud, const void *data, size_t len) {
        struct fuzz_world *w = ud;
        assert(len <= UP_BUF - w->up_len);
        memcpy(w->up + w->up_len, data, len);
        w->up_len += len;
        return 0;
}

static size_t op_up_room(void *ud) {
        struct fuzz_world *w = ud;
        return UP_BUF - w->up_len;
}

static size_t op_redact(void *ud, uint8_t *data, size_t len, size_t scanned, bool final) {
        static const char secret[] = "s3cr3t";
        for (uint8_t *at = data; (at = memmem(at, (size_t) (data + len - at), secret, 6)); at += 6)
                memset(at, '*', 6);
        return len;
}

static const struct h2front_ops ops = {op_head, op_up_write, op_up_room, op_redact};

/* What went upstream since the last look parses as HTTP/1.1 requests to a.test. */
static void check_upstream(struct fuzz_world *w) {
        while (w->up_parsed < w->up_len) {
                size_t used = 0;
                struct http1_event ev;
                int r = http1_parser_feed(w->check, w->up + w->up_parsed, w->up_len - w->up_parsed, &used,
                                          &ev);
                assert(r == 0);
                w->up_parsed += used;
                if (ev.type == HTTP1_EV_HEAD)
                        assert(strcmp(http1_parser_head(w->check)->host, "a.test") == 0);
                if (ev.type == HTTP1_EV_NEED_MORE)
                        break;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct fuzz_world w = {.up = malloc(UP_BUF), .check = http1_parser_new()};
        struct h2front *f = NULL;
        assert(w.up && w.check && h2front_new(&ops, &w, &f) == 0);
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        size_t used = 0;
        const char *why;
        bool broken = h2front_recv(f, (const uint8_t *) preface, sizeof preface - 1, &used, &why) < 0;
        uint8_t out[1 << 16];
        for (size_t off = 0; off + 2 <= size && !broken;) {
                bool upstream = data[off] & 1;
                size_t len = data[off + 1];
                off += 2;
                len = len < size - off ? len : size - off;
                if (upstream) {
                        size_t room = h2front_upstream_room(f);
                        size_t give = len < room ? len : room;
                        if (give > 0 || len == 0)
                                h2front_upstream(f, data + off, give);
                } else {
                        size_t at = 0;
                        while (at < len && !broken) {
                                if (op_up_room(&w) < H2FRONT_UP_ROOM) {
                                        w.up_len = w.up_parsed = 0; /* the upstream took it all */
                                        continue;
                                }
                                broken = h2front_recv(f, data + off + at, len - at, &used, &why) < 0;
                                assert(broken || used <= len - at);
                                if (!broken && used == 0)
                                        break;
                                at += used;
                                check_upstream(&w);
                        }
                }
                off += len;
                check_upstream(&w);
                while (h2front_send(f, out, sizeof out) > 0)
                        ;
                h2front_resume(f);
                (void) h2front_done(f);
                (void) h2front_upstream_wanted(f);
        }
        h2front_free(f);
        http1_parser_free(w.check);
        free(w.up);
        return 0;
}
