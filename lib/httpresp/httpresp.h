/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One HTTP/1.x response read from a server Airlock does not trust: a
 * server in the guest on one of its service ports (the node,
 * docs/network.md "Service ports"), or an upstream behind the gateway's
 * HTTP/2 front (src/gw/h2front.c). Parsed with llhttp in strict response
 * mode, fed bytes, never a socket. It gives the status, the end-to-end
 * headers (hop-by-hop ones and the body's framing removed: the caller
 * frames the body itself), the body as it arrives, de-chunked, and the
 * end. Informational responses (1xx) are skipped; a switch of protocols
 * (101) is refused (no request Airlock sends asks for one).
 *
 * Limits: the head (status line and headers) at most HTTPRESP_HEAD_MAX
 * bytes, HTTPRESP_HEADERS_MAX headers; a header whose value is not UTF-8
 * is dropped (the node protocol is JSON).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define HTTPRESP_HEAD_MAX (64u << 10)
#define HTTPRESP_HEADERS_MAX 100

struct httpresp_events {
        /* the final response's head: status, headers [[name, value], ...]
         * (borrowed for the call), length the body's size or -1 */
        int (*head)(void *userdata, unsigned status, json_t *headers, int64_t length);
        int (*body)(void *userdata, const uint8_t *data, size_t len);
};

struct httpresp;

/* For a response to a request with method (a HEAD's response has no body). */
int httpresp_new(const char *method, const struct httpresp_events *ev, void *userdata, struct httpresp **ret);
void httpresp_free(struct httpresp *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct httpresp *, httpresp_free);

/* Feeds len bytes (len 0: the server closed its end). 1 once the response
 * is complete (what follows is ignored), 0 when it needs more, or a
 * negative errno: -EBADMSG for bytes that are no HTTP/1.x response (*ret_why
 * says what), -E2BIG over a limit, or an event's own error. */
int httpresp_feed(struct httpresp *p, const uint8_t *data, size_t len, const char **ret_why);

/* Once complete: whether the server keeps its connection open for another
 * request (llhttp: HTTP/1.1 without Connection: close, a body that did not
 * end with the connection). */
bool httpresp_keep_alive(const struct httpresp *p);

/* Once complete: how many bytes of the feed that completed it came after
 * the response (a server that sends what no request asked for). */
size_t httpresp_trailing(const struct httpresp *p);
