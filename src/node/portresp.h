/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The response of a server in the guest on one of its service ports
 * (docs/network.md, "Service ports"): guest bytes, parsed with llhttp in
 * strict response mode, fed bytes, never a socket. It gives the status,
 * the end-to-end headers (hop-by-hop ones and the body's framing removed:
 * the API frames the body itself), the body as it arrives, de-chunked, and
 * the end. Informational responses (1xx) are skipped; a switch of
 * protocols (101) is refused (the request never asks for one).
 *
 * Limits: the head (status line and headers) at most PORTRESP_HEAD_MAX
 * bytes, PORTRESP_HEADERS_MAX headers; a header whose value is not UTF-8
 * is dropped (the node protocol is JSON).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macros.h"

#define PORTRESP_HEAD_MAX (64u << 10)
#define PORTRESP_HEADERS_MAX 100

struct portresp_events {
        /* the final response's head: status, headers [[name, value], ...]
         * (borrowed for the call), length the body's size or -1 */
        int (*head)(void *userdata, unsigned status, json_t *headers, int64_t length);
        int (*body)(void *userdata, const uint8_t *data, size_t len);
};

struct portresp;

/* For a response to a request with method (a HEAD's response has no body). */
int portresp_new(const char *method, const struct portresp_events *ev, void *userdata, struct portresp **ret);
void portresp_free(struct portresp *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct portresp *, portresp_free);

/* Feeds len bytes (len 0: the server closed its end). 1 once the response
 * is complete (what follows is ignored), 0 when it needs more, or a
 * negative errno: -EBADMSG for bytes that are no HTTP/1.x response (*ret_why
 * says what), -E2BIG over a limit, or an event's own error. */
int portresp_feed(struct portresp *p, const uint8_t *data, size_t len, const char **ret_why);
