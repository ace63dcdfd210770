/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Incremental parser for a text/event-stream body (the WHATWG "Server-Sent
 * Events" format), as served by GET /v1/sessions/{id}/events.
 *
 * Feed it the body in chunks of any size, split anywhere (even inside a CRLF
 * or a UTF-8 sequence); it calls back once per complete event. It handles
 * LF, CRLF and lone-CR line ends, ':' comments, multi-line "data:", "event:",
 * "id:" and a leading byte-order mark. "retry:" and unknown fields are
 * ignored (we never reconnect). An event that is still open when the stream
 * ends is dropped, as the standard says.
 *
 * Memory is bounded: an event whose type plus data (or any single line)
 * exceeds max_event bytes fails the parse with -EMSGSIZE, and the parser then
 * stays failed.
 */

#include <stddef.h>

#include "macros.h"

#define SSE_MAX_EVENT_DEFAULT (1024u * 1024u)

struct sse_event {
        const char *type; /* "message" when the event had no "event:" field */
        const char *data; /* NUL-terminated; the lines joined by '\n' */
        size_t data_len;
        const char *id; /* last "id:" seen on the stream, "" if none */
};

/* Called for each event. The strings are valid only during the call. A
 * negative return stops the parse and is returned by sse_parser_feed(). */
typedef int (*sse_event_fn)(const struct sse_event *ev, void *userdata);

struct sse_parser;

/* max_event == 0 means SSE_MAX_EVENT_DEFAULT. */
int sse_parser_new(size_t max_event, sse_event_fn cb, void *userdata, struct sse_parser **ret);
struct sse_parser *sse_parser_free(struct sse_parser *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sse_parser *, sse_parser_free);

/* Parses len bytes. Returns 0, -EMSGSIZE, -ENOMEM, or the first negative
 * value a callback returned; after an error every later call returns it. */
int sse_parser_feed(struct sse_parser *p, const void *buf, size_t len);
