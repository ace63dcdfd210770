/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * HTTP/1.x requests as airlock-gw reads them from a guest connection
 * (plaintext, or inside a terminated TLS stream): a streaming parser on
 * llhttp, compiled in strict mode with no lenient flag, that reports every
 * request head of a keep-alive or pipelined connection, checked, and the
 * bodies in between, so each request is decided on its own (EGRESS.md H1,
 * H3, H4, H7, H8, H9, H13). Fed bytes in any split; no sockets, no logging.
 *
 * The relay never copies guest bytes of a head upstream: it re-serialises
 * the head it was given (http1_head_serialize(), origin-form, headers
 * dropped and added), and re-frames the body from the decoded pieces the
 * parser hands out: as they are for a Content-Length body, each piece as a
 * chunk (http1_chunk_header(), the piece, "\r\n"; HTTP1_CHUNK_LAST at the
 * end) for a chunked one. The upstream so never sees framing the parser
 * did not produce, and both ends agree where every request ends.
 *
 * A request head is refused (the parser fails, for good) when it is
 * malformed for llhttp, or when: Host is missing, repeated or empty or no
 * host[:port]; the target is neither origin-form "/...", nor absolute-form
 * "http(s)://authority/..." whose authority equals Host (no userinfo), nor
 * "*" for OPTIONS, or carries a fragment; the method is CONNECT; the
 * version is not HTTP/1.0 or HTTP/1.1; Content-Length and
 * Transfer-Encoding are both present, either is repeated, or
 * Transfer-Encoding is anything but "chunked" (or is sent with HTTP/1.0);
 * a header line is folded (obs-fold), or a name or value holds CR, LF, NUL
 * or another control character; a chunked body carries chunk extensions or
 * trailer fields (they would pass the relay unchecked); or a limit is hit.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gwname.h"

#define HTTP1_HEAD_MAX (16 * 1024) /* request line, headers and CRLFs before them */
#define HTTP1_HEADERS_MAX 100
#define HTTP1_TARGET_MAX (8 * 1024)
/* http1_chunk_header() writes at most this many bytes */
#define HTTP1_CHUNK_HEADER_MAX 20
#define HTTP1_CHUNK_LAST "0\r\n\r\n"

struct http1_parser;

struct http1_header {
        const char *name; /* NUL-terminated, as sent */
        size_t name_len;
        const char *value; /* NUL-terminated, without surrounding whitespace */
        size_t value_len;
};

enum http1_host_kind {
        HTTP1_HOST_NAME, /* a canonical name (gwname) */
        HTTP1_HOST_IPV4, /* dotted quad */
        HTTP1_HOST_IPV6, /* in inet_ntop()'s form, without brackets */
};

enum http1_body {
        HTTP1_BODY_NONE,
        HTTP1_BODY_LENGTH,  /* content_length bytes */
        HTTP1_BODY_CHUNKED, /* Transfer-Encoding: chunked */
};

enum http1_upgrade {
        HTTP1_UPGRADE_NONE,
        HTTP1_UPGRADE_WEBSOCKET,
        HTTP1_UPGRADE_H2C, /* Upgrade: h2c, or an HTTP2-Settings header: to refuse */
        HTTP1_UPGRADE_OTHER,
};

/* A checked request head. Strings live in the parser: valid from the
 * HTTP1_EV_HEAD event until the feed after the request's HTTP1_EV_END. */
struct http1_head {
        const char *method; /* "GET", "POST", ... */
        unsigned version_minor; /* HTTP/1.0 or HTTP/1.1 */
        const char *target;     /* as sent */
        /* the origin-form target to send upstream: the target itself, or the
         * path and query of an absolute-form one ("/" when it had none);
         * "*" for OPTIONS * */
        const char *path;
        bool absolute_form;
        /* Host (and an absolute-form target's authority, which equals it) */
        enum http1_host_kind host_kind;
        char host[GWNAME_MAX + 1];
        uint16_t port; /* 0 when Host has none */
        const struct http1_header *headers;
        size_t n_headers;
        enum http1_body body;
        uint64_t content_length; /* HTTP1_BODY_LENGTH */
        enum http1_upgrade upgrade;
        bool keep_alive; /* llhttp: another request may follow */
        /* stream offsets: where the head began (after the previous request)
         * and the first byte after its final CRLF */
        uint64_t start, end;
};

enum http1_event_type {
        HTTP1_EV_NEED_MORE, /* every byte given was consumed: feed more */
        HTTP1_EV_HEAD,      /* a request head is complete: http1_parser_head() */
        HTTP1_EV_BODY,      /* data/len: decoded body bytes, inside the buffer fed */
        HTTP1_EV_END,       /* the request is complete */
};

struct http1_event {
        enum http1_event_type type;
        const uint8_t *data;
        size_t len;
        /* HTTP1_EV_END of a request with Upgrade and Connection: upgrade:
         * whatever follows is another protocol (the parser takes no more) */
        bool upgrade;
};

struct http1_parser *http1_parser_new(void);
struct http1_parser *http1_parser_free(struct http1_parser *p);

/*
 * Feeds bytes of the connection, and stops at the first event: returns 0
 * with *ret_consumed (how many of the len bytes were used; the caller
 * feeds the rest again, after acting on the event) and *ret_event. One
 * request gives HTTP1_EV_HEAD, any number of HTTP1_EV_BODY, then
 * HTTP1_EV_END (the END of a request without a body comes on the call
 * after its HEAD, with nothing consumed, also when len is 0). An event may
 * consume no bytes; HTTP1_EV_NEED_MORE consumes all of them.
 *
 * Errors, for good (the same error on every later call): -EBADMSG for a
 * malformed or refused request, -E2BIG for a limit (head, headers,
 * target), -EPROTO after an upgrade's END. http1_parser_status() and
 * http1_parser_reason() say what to answer and why. Body pieces read
 * before the error in the same bytes are handed out first, so that every
 * split gives the same events (a chunked body found broken after some of
 * it was relayed: the relay closes both ends).
 */
int http1_parser_feed(struct http1_parser *p, const uint8_t *buf, size_t len, size_t *ret_consumed,
                      struct http1_event *ret_event);

/* The head of the current request (after its HTTP1_EV_HEAD), else NULL. */
const struct http1_head *http1_parser_head(const struct http1_parser *p);

/* After a failed feed: the HTTP status to answer (400, 405 for CONNECT,
 * 414, 431, 505) and a static reason for the log; 0 and NULL before. */
int http1_parser_status(const struct http1_parser *p);
const char *http1_parser_reason(const struct http1_parser *p);

struct http1_extra_header {
        const char *name;
        const char *value;
};

/*
 * Re-serialises h for the upstream: "METHOD PATH HTTP/1.x", h's headers in
 * their order minus those whose name is in drop (case-insensitive), then
 * add, then the empty line; no NUL is written. -EINVAL when an added name
 * is no token or an added value holds a control character (CR, LF, NUL:
 * a credential with a newline cannot split the head, EGRESS.md H9) or
 * leading or trailing whitespace; -ENOBUFS when it does not fit outsz.
 * *ret_len is set on success only.
 */
int http1_head_serialize(const struct http1_head *h, const struct http1_extra_header *add, size_t n_add,
                         const char *const *drop, size_t n_drop, char *out, size_t outsz, size_t *ret_len);

/* host[:port] as a Host header carries it (a canonical name, a dotted
 * quad or a bracketed IPv6 address; a port 1..65535) into h->host_kind,
 * h->host and h->port (0 without one); -EINVAL when it is none of them.
 * For a request that came another way (HTTP/2's :authority). */
int http1_authority_parse(const char *s, size_t n, struct http1_head *h);

/* Whether s[0..n) is a token (a method, a header name: RFC 9110 tchar). */
bool http1_token(const char *s, size_t n);

/* Whether a header value holds no control character but HTAB. */
bool http1_value_clean(const char *s, size_t n);

/* The chunk-size line for a chunk of len > 0 bytes ("%zx\r\n") in out
 * (HTTP1_CHUNK_HEADER_MAX bytes); returns its length. */
size_t http1_chunk_header(size_t len, char *out);
