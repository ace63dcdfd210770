/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the parser of what a (hostile) server in the guest answers on a
 * service port (src/node/httpresp.c). The first byte picks the request's
 * method (HEAD or GET) and how the rest is cut into reads; the rest is
 * the server's bytes, then its close.
 * Invariants: at most one head, with a final status (200..599), at most
 * HTTPRESP_HEADERS_MAX headers, every one a [name, value] pair of strings
 * with no hop-by-hop or framing name and no CR, LF or NUL in it; body
 * bytes only after the head, never for HEAD, never more than the declared
 * length; the result is 1, 0 or an errno.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "httpresp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
        int heads;
        bool head_request;
        int64_t length;
        uint64_t body;
};

static int on_head(void *userdata, unsigned status, json_t *headers, int64_t length) {
        struct seen *s = userdata;
        assert(s->heads++ == 0);
        assert(status >= 200 && status <= 599);
        assert(json_array_size(headers) <= HTTPRESP_HEADERS_MAX);
        size_t i;
        json_t *h;
        json_array_foreach(headers, i, h) {
                const char *n = json_string_value(json_array_get(h, 0));
                json_t *v = json_array_get(h, 1);
                assert(json_array_size(h) == 2 && n && json_is_string(v));
                assert(strcasecmp(n, "content-length") != 0 && strcasecmp(n, "transfer-encoding") != 0 &&
                       strcasecmp(n, "connection") != 0);
                assert(!strpbrk(n, "\r\n") && !strpbrk(json_string_value(v), "\r\n"));
                assert(strlen(json_string_value(v)) == json_string_length(v));
        }
        s->length = length;
        return 0;
}

static int on_body(void *userdata, const uint8_t *data, size_t len) {
        struct seen *s = userdata;
        assert(s->heads == 1 && !s->head_request && data && len > 0);
        s->body += len;
        assert(s->length < 0 || s->body <= (uint64_t) s->length);
        return 0;
}

static const struct httpresp_events events = { .head = on_head, .body = on_body };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        struct seen s = { .head_request = data[0] & 1, .length = -1 };
        size_t step = 1 + (data[0] >> 1); /* 1..128 bytes a read */
        struct httpresp *p = NULL;
        assert(httpresp_new(s.head_request ? "HEAD" : "GET", &events, &s, &p) == 0);
        int r = 0;
        const char *why = NULL;
        for (size_t off = 1; off < size && r == 0; off += step) {
                size_t n = size - off < step ? size - off : step;
                r = httpresp_feed(p, data + off, n, &why);
                assert(why);
        }
        if (r == 0)
                r = httpresp_feed(p, NULL, 0, &why);
        assert(r == 1 || r == 0 || r == -EBADMSG || r == -E2BIG || r == -ENOMEM);
        assert(r != 0); /* after the close it is complete or refused */
        if (r == 1)
                assert(s.heads == 1);
        httpresp_free(p);
        return 0;
}
