/* SPDX-License-Identifier: Apache-2.0 */
#include "http1.h"

#include <arpa/inet.h>
#include <errno.h>
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macros.h"

/* the head's strings, NUL-terminated: never more than the head itself plus
 * a NUL per string and the origin-form path built for an absolute target */
#define ARENA_MAX (HTTP1_HEAD_MAX + 2 * (HTTP1_HEADERS_MAX + 1) + 16)

enum state {
        ST_HEAD,     /* reading a head (or the CRLFs before one) */
        ST_BODY,     /* after HEAD, until END */
        ST_UPGRADED, /* after an upgrade's END */
};

struct raw_header {
        size_t name_off, name_len, value_off, value_len;
        bool value_open; /* value bytes still being appended */
};

struct http1_parser {
        llhttp_t ll;
        llhttp_settings_t settings; /* llhttp keeps a pointer: lives as long */
        enum state state;
        bool paused;        /* llhttp paused in a callback: resume first */
        uint64_t offset;    /* bytes of the stream consumed */
        uint64_t head_from; /* where the current head began */

        /* the head being read: raw bytes (for the checks llhttp does not
         * make) and its strings */
        uint8_t raw[HTTP1_HEAD_MAX];
        size_t raw_len;
        char arena[ARENA_MAX];
        size_t arena_len;
        size_t url_len;
        bool url_done;
        struct raw_header raw_headers[HTTP1_HEADERS_MAX + 1]; /* one over, to be refused */
        size_t n_raw;
        bool field_open;
        struct http1_header headers[HTTP1_HEADERS_MAX];
        struct http1_head head;
        bool have_head;

        /* events made by the callbacks of one llhttp_execute() */
        struct http1_event queue[4];
        size_t q_first, q_len;

        int error;
        int status;
        const char *reason;
};

static int fail(struct http1_parser *p, int error, int status, const char *reason) {
        if (p->error == 0) {
                p->error = error;
                p->status = status;
                p->reason = reason;
        }
        return p->error;
}

static struct http1_parser *parser_of(llhttp_t *ll) {
        return ll->data;
}

/* llhttp callbacks return this after fail(): llhttp stops with an error */
#define CB_FAIL(p, err, st, why)                                                                                   \
        do {                                                                                                       \
                fail((p), (err), (st), (why));                                                                     \
                return -1;                                                                                         \
        } while (0)

static int push_event(struct http1_parser *p, struct http1_event ev) {
        if (p->q_len == ARRAY_SIZE(p->queue))
                return fail(p, -EIO, 400, "internal: event queue full");
        p->queue[(p->q_first + p->q_len++) % ARRAY_SIZE(p->queue)] = ev;
        return 0;
}

static int arena_append(struct http1_parser *p, const char *at, size_t n) {
        if (n > ARENA_MAX - p->arena_len)
                return fail(p, -E2BIG, 431, "request head too large");
        memcpy(p->arena + p->arena_len, at, n);
        p->arena_len += n;
        return 0;
}

static int arena_nul(struct http1_parser *p) {
        return arena_append(p, "", 1);
}

/* arena_append() for the piece of a string llhttp hands over in parts (the
 * target, a header's name or value): *len counts them. */
static int arena_grow(struct http1_parser *p, const char *at, size_t n, size_t *len) {
        if (arena_append(p, at, n) < 0)
                return -1;
        *len += n;
        return 0;
}

static int on_message_begin(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        p->arena_len = 0;
        p->url_len = 0;
        p->url_done = false;
        p->n_raw = 0;
        p->field_open = false;
        p->have_head = false;
        return 0;
}

/* Limits are checked when an item is complete, not on its pieces: llhttp
 * hands out a piece where a buffer ends, so a check on pieces would see
 * the limit before or after a bad byte in the same item depending on the
 * split (the head's own bound keeps the arena bounded meanwhile). */
static int on_url(llhttp_t *ll, const char *at, size_t n) {
        struct http1_parser *p = parser_of(ll);
        return arena_grow(p, at, n, &p->url_len);
}

static int on_url_complete(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        if (p->url_len > HTTP1_TARGET_MAX)
                CB_FAIL(p, -E2BIG, 414, "request target too long");
        p->url_done = true;
        return arena_nul(p) < 0 ? -1 : 0;
}

static int close_value(struct http1_parser *p) {
        if (p->n_raw == 0 || !p->raw_headers[p->n_raw - 1].value_open)
                return 0;
        p->raw_headers[p->n_raw - 1].value_open = false;
        return arena_nul(p);
}

static int on_header_field(llhttp_t *ll, const char *at, size_t n) {
        struct http1_parser *p = parser_of(ll);
        /* in a chunked body these are trailer fields: the relay passes no
         * trailers, and a header there would escape every check */
        if (p->state != ST_HEAD)
                CB_FAIL(p, -EBADMSG, 400, "trailer fields in a chunked body");
        if (!p->field_open) {
                if (close_value(p) < 0)
                        return -1;
                if (p->n_raw > HTTP1_HEADERS_MAX) /* refused when the last one was complete */
                        CB_FAIL(p, -EIO, 400, "internal: header count");
                p->raw_headers[p->n_raw++] = (struct raw_header){ .name_off = p->arena_len };
                p->field_open = true;
        }
        return arena_grow(p, at, n, &p->raw_headers[p->n_raw - 1].name_len);
}

static int on_header_field_complete(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        if (!p->field_open || arena_nul(p) < 0)
                CB_FAIL(p, -EBADMSG, 400, "malformed header field");
        if (p->n_raw > HTTP1_HEADERS_MAX)
                CB_FAIL(p, -E2BIG, 431, "too many header fields");
        p->field_open = false;
        struct raw_header *h = &p->raw_headers[p->n_raw - 1];
        h->value_off = p->arena_len;
        h->value_open = true;
        return 0;
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n) {
        struct http1_parser *p = parser_of(ll);
        if (p->n_raw == 0 || !p->raw_headers[p->n_raw - 1].value_open)
                CB_FAIL(p, -EBADMSG, 400, "malformed header value");
        return arena_grow(p, at, n, &p->raw_headers[p->n_raw - 1].value_len);
}

static int on_header_value_complete(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        return close_value(p) < 0 ? -1 : 0;
}

static int on_chunk_extension(llhttp_t *ll, const char *at, size_t n) {
        CB_FAIL(parser_of(ll), -EBADMSG, 400, "chunk extension");
}

static bool is_tchar(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(const char *s, size_t n) {
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_tchar((unsigned char) s[i]))
                        return false;
        return true;
}

/* A field value (RFC 9110 §5.5): no control character but HTAB. */
static bool value_clean(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return false;
        }
        return true;
}

struct authority {
        enum http1_host_kind kind;
        char host[GWNAME_MAX + 1];
        uint16_t port;
};

/* host[:port] of a Host header or an absolute-form target: a canonical
 * name, a dotted quad or a bracketed IPv6 address, and a port 1..65535. */
static int parse_authority(const char *s, size_t n, struct authority *ret) {
        struct authority a = {};
        size_t host_end;
        const char *port = NULL;
        if (n == 0)
                return -EINVAL;
        if (s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close)
                        return -EINVAL;
                host_end = (size_t) (close - s) + 1;
                if (host_end < n) {
                        if (s[host_end] != ':')
                                return -EINVAL;
                        port = s + host_end + 1;
                }
                char v6[INET6_ADDRSTRLEN];
                struct in6_addr addr;
                size_t l = host_end - 2;
                if (l == 0 || l >= sizeof v6)
                        return -EINVAL;
                memcpy(v6, s + 1, l);
                v6[l] = 0;
                if (inet_pton(AF_INET6, v6, &addr) != 1 || !inet_ntop(AF_INET6, &addr, a.host, sizeof a.host))
                        return -EINVAL;
                a.kind = HTTP1_HOST_IPV6;
        } else {
                const char *colon = memchr(s, ':', n);
                host_end = colon ? (size_t) (colon - s) : n;
                if (colon)
                        port = colon + 1;
                char v4[INET_ADDRSTRLEN];
                struct in_addr addr;
                if (host_end < sizeof v4) {
                        memcpy(v4, s, host_end);
                        v4[host_end] = 0;
                }
                if (host_end < sizeof v4 && inet_pton(AF_INET, v4, &addr) == 1) {
                        memcpy(a.host, v4, host_end + 1);
                        a.kind = HTTP1_HOST_IPV4;
                } else if (gwname_canonical(s, host_end, GWNAME_TRAILING_DOT, a.host) == 0)
                        a.kind = HTTP1_HOST_NAME;
                else
                        return -EINVAL;
        }
        if (port) {
                size_t pl = n - (size_t) (port - s);
                unsigned v = 0;
                if (pl == 0 || pl > 5)
                        return -EINVAL;
                for (size_t i = 0; i < pl; i++) {
                        if (port[i] < '0' || port[i] > '9')
                                return -EINVAL;
                        v = v * 10 + (unsigned) (port[i] - '0');
                }
                if (v == 0 || v > 65535)
                        return -EINVAL;
                a.port = (uint16_t) v;
        }
        *ret = a;
        return 0;
}

int http1_authority_parse(const char *s, size_t n, struct http1_head *h) {
        struct authority a;
        int r = parse_authority(s, n, &a);
        if (r < 0)
                return r;
        h->host_kind = a.kind;
        memcpy(h->host, a.host, sizeof h->host);
        h->port = a.port;
        return 0;
}

bool http1_token(const char *s, size_t n) {
        return is_token(s, n);
}

bool http1_value_clean(const char *s, size_t n) {
        return value_clean(s, n);
}

static bool authority_eq(const struct authority *a, const struct authority *b) {
        return a->kind == b->kind && a->port == b->port && strcmp(a->host, b->host) == 0;
}

static int upgrade_kind(const char *v, size_t n) {
        int kind = HTTP1_UPGRADE_OTHER;
        /* a comma-separated list of protocols; h2c anywhere in it wins */
        for (size_t i = 0; i < n;) {
                while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
                        i++;
                size_t b = i;
                while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t' && v[i] != '/')
                        i++;
                size_t l = i - b;
                if (l == 3 && strncasecmp(v + b, "h2c", 3) == 0)
                        return HTTP1_UPGRADE_H2C;
                if (l == 9 && strncasecmp(v + b, "websocket", 9) == 0 && b == 0 && i == n)
                        kind = HTTP1_UPGRADE_WEBSOCKET;
                while (i < n && v[i] != ',')
                        i++;
        }
        return kind;
}

/* Whether a Connection header of h (its values without surrounding
 * whitespace) names the option token t: a comma list, case-insensitive
 * (RFC 9110 §7.6.1). */
static bool connection_has(const struct http1_head *h, const char *t) {
        size_t tl = strlen(t);
        for (size_t k = 0; k < h->n_headers; k++) {
                const struct http1_header *o = &h->headers[k];
                if (strcasecmp(o->name, "Connection") != 0)
                        continue;
                const char *v = o->value;
                for (size_t i = 0, n = o->value_len; i < n;) {
                        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
                                i++;
                        size_t b = i;
                        while (i < n && v[i] != ',')
                                i++;
                        size_t e = i;
                        while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
                                e--;
                        if (e - b == tl && strncasecmp(v + b, t, tl) == 0)
                                return true;
                }
        }
        return false;
}

/* The target's form; builds head->path. */
static int check_target(struct http1_parser *p, struct http1_head *h, const struct authority *host) {
        const char *t = h->target;
        size_t n = p->url_len;
        if (memchr(t, '#', n))
                return fail(p, -EBADMSG, 400, "fragment in the request target");
        if (t[0] == '/') {
                h->path = t;
                return 0;
        }
        if (strcmp(t, "*") == 0) {
                if (strcmp(h->method, "OPTIONS") != 0)
                        return fail(p, -EBADMSG, 400, "asterisk target of a method other than OPTIONS");
                h->path = t;
                return 0;
        }
        size_t scheme = strncasecmp(t, "http://", 7) == 0 ? 7 : strncasecmp(t, "https://", 8) == 0 ? 8 : 0;
        if (scheme == 0)
                return fail(p, -EBADMSG, 400, "request target is neither origin-form nor absolute-form");
        const char *auth = t + scheme;
        size_t alen = strcspn(auth, "/?");
        if (memchr(auth, '@', alen))
                return fail(p, -EBADMSG, 400, "userinfo in the request target");
        struct authority a;
        if (parse_authority(auth, alen, &a) < 0)
                return fail(p, -EBADMSG, 400, "malformed authority in the request target");
        if (!authority_eq(&a, host))
                return fail(p, -EBADMSG, 400, "request target's authority differs from Host");
        h->absolute_form = true;
        const char *rest = auth + alen;
        if (rest[0] == '/')
                h->path = rest;
        else {
                /* "http://a.test" or "http://a.test?q": the path is "/" */
                size_t off = p->arena_len;
                if (arena_append(p, "/", 1) < 0 || arena_append(p, rest, strlen(rest)) < 0 || arena_nul(p) < 0)
                        return p->error;
                h->path = p->arena + off;
        }
        return 0;
}

/* Every check of a complete head llhttp does not make; fills p->head. */
static int check_head(struct http1_parser *p) {
        struct http1_head *h = &p->head;
        *h = (struct http1_head){ .start = p->head_from };
        if (close_value(p) < 0)
                return p->error;
        if (!p->url_done || p->url_len == 0)
                return fail(p, -EBADMSG, 400, "no request target");
        uint8_t method = llhttp_get_method(&p->ll);
        h->method = llhttp_method_name(method);
        if (method == HTTP_CONNECT)
                return fail(p, -EBADMSG, 405, "CONNECT");
        if (llhttp_get_http_major(&p->ll) != 1 || llhttp_get_http_minor(&p->ll) > 1)
                return fail(p, -EBADMSG, 505, "HTTP version other than 1.0 and 1.1");
        h->version_minor = llhttp_get_http_minor(&p->ll);
        h->target = p->arena;

        size_t n_host = 0, n_cl = 0, n_te = 0;
        const struct http1_header *host = NULL, *te = NULL;
        for (size_t i = 0; i < p->n_raw; i++) {
                const struct raw_header *r = &p->raw_headers[i];
                struct http1_header *o = &p->headers[i];
                char *v = p->arena + r->value_off;
                size_t vl = r->value_len;
                /* llhttp drops leading whitespace but keeps trailing */
                while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                        vl--;
                v[vl] = 0;
                *o = (struct http1_header){ .name = p->arena + r->name_off, .name_len = r->name_len, .value = v,
                                            .value_len = vl };
                if (!is_token(o->name, o->name_len))
                        return fail(p, -EBADMSG, 400, "header name is not a token");
                if (!value_clean(v, vl))
                        return fail(p, -EBADMSG, 400, "control character in a header value");
                if (strcasecmp(o->name, "Host") == 0) {
                        n_host++;
                        host = o;
                } else if (strcasecmp(o->name, "Content-Length") == 0)
                        n_cl++;
                else if (strcasecmp(o->name, "Transfer-Encoding") == 0) {
                        n_te++;
                        te = o;
                } else if (strcasecmp(o->name, "Upgrade") == 0) {
                        int k = upgrade_kind(v, vl);
                        if (k == HTTP1_UPGRADE_H2C || h->upgrade == HTTP1_UPGRADE_H2C)
                                h->upgrade = HTTP1_UPGRADE_H2C;
                        else /* a second Upgrade header is no plain websocket */
                                h->upgrade = h->upgrade != HTTP1_UPGRADE_NONE ? HTTP1_UPGRADE_OTHER : k;
                } else if (strcasecmp(o->name, "HTTP2-Settings") == 0)
                        h->upgrade = HTTP1_UPGRADE_H2C;
        }
        h->headers = p->headers;
        h->n_headers = p->n_raw;

        if (n_host != 1)
                return fail(p, -EBADMSG, 400, n_host == 0 ? "no Host header" : "more than one Host header");
        struct authority a;
        if (host->value_len == 0)
                return fail(p, -EBADMSG, 400, "empty Host header");
        if (parse_authority(host->value, host->value_len, &a) < 0)
                return fail(p, -EBADMSG, 400, "Host is not host[:port]");
        h->host_kind = a.kind;
        memcpy(h->host, a.host, sizeof h->host);
        h->port = a.port;
        if (check_target(p, h, &a) < 0)
                return p->error;

        /* framing (EGRESS.md H8); llhttp refuses most of it already */
        if (n_cl > 1)
                return fail(p, -EBADMSG, 400, "more than one Content-Length");
        if (n_te > 1)
                return fail(p, -EBADMSG, 400, "more than one Transfer-Encoding");
        if (n_cl && n_te)
                return fail(p, -EBADMSG, 400, "both Content-Length and Transfer-Encoding");
        if (te && (te->value_len != 7 || strcasecmp(te->value, "chunked") != 0))
                return fail(p, -EBADMSG, 400, "Transfer-Encoding other than chunked");
        if (te && h->version_minor == 0)
                return fail(p, -EBADMSG, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (te) {
                if (!(p->ll.flags & F_CHUNKED))
                        return fail(p, -EBADMSG, 400, "Transfer-Encoding other than chunked");
                h->body = HTTP1_BODY_CHUNKED;
        } else if ((p->ll.flags & F_CONTENT_LENGTH) && p->ll.content_length > 0) {
                h->body = HTTP1_BODY_LENGTH;
                h->content_length = p->ll.content_length;
        }
        /* from the values as the head keeps them (llhttp's own reading
         * differs on whitespace around a token, and the re-serialised
         * head must mean the same: fuzz-http1's round trip) */
        bool close = connection_has(h, "close");
        h->keep_alive = h->version_minor >= 1 ? !close : !close && connection_has(h, "keep-alive");
        return 0;
}

/* What llhttp lets through of the raw head and the relay must not see:
 * a protocol other than HTTP/1.x in the request line (llhttp also takes
 * RTSP and ICE), folded lines (llhttp joins obs-fold into the value), and
 * any CR, LF or NUL that is not part of a CRLF line end. */
static int check_raw(struct http1_parser *p) {
        const uint8_t *r = p->raw;
        size_t n = p->raw_len, i = 0;
        while (i + 1 < n && r[i] == '\r' && r[i + 1] == '\n')
                i += 2; /* empty lines before the request line (RFC 9112 §2.2) */
        const uint8_t *eol = memmem(r + i, n - i, "\r\n", 2);
        if (!eol || eol - (r + i) < 9 || (memcmp(eol - 9, " HTTP/1.1", 9) != 0 && memcmp(eol - 9, " HTTP/1.0", 9) != 0))
                return fail(p, -EBADMSG, 505, "protocol is not HTTP/1.0 or HTTP/1.1");
        for (size_t j = i; j < n; j++) {
                if (r[j] == 0)
                        return fail(p, -EBADMSG, 400, "NUL in the request head");
                if (r[j] == '\r' && (j + 1 == n || r[j + 1] != '\n'))
                        return fail(p, -EBADMSG, 400, "CR without LF in the request head");
                if (r[j] == '\n' && (j == 0 || r[j - 1] != '\r'))
                        return fail(p, -EBADMSG, 400, "LF without CR in the request head");
                if (r[j] == '\n' && j + 1 < n && (r[j + 1] == ' ' || r[j + 1] == '\t'))
                        return fail(p, -EBADMSG, 400, "folded header line (obs-fold)");
        }
        return 0;
}

static int on_headers_complete(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        if (check_head(p) < 0)
                return -1;
        p->have_head = true;
        p->state = ST_BODY;
        if (push_event(p, (struct http1_event){ .type = HTTP1_EV_HEAD }) < 0)
                return -1;
        /* stop here: the caller decides on the head before any body byte */
        return HPE_PAUSED;
}

static int on_body(llhttp_t *ll, const char *at, size_t n) {
        struct http1_parser *p = parser_of(ll);
        if (n == 0)
                return 0;
        return push_event(p, (struct http1_event){ .type = HTTP1_EV_BODY, .data = (const uint8_t *) at, .len = n }) <
                               0
                       ? -1
                       : 0;
}

/* a pause after every chunk: one llhttp_execute() gives one body piece */
static int on_chunk_complete(llhttp_t *ll) {
        return HPE_PAUSED;
}

static int on_message_complete(llhttp_t *ll) {
        struct http1_parser *p = parser_of(ll);
        bool upgrade = llhttp_get_upgrade(ll);
        if (push_event(p, (struct http1_event){ .type = HTTP1_EV_END, .upgrade = upgrade }) < 0)
                return -1;
        p->state = upgrade ? ST_UPGRADED : ST_HEAD;
        return HPE_PAUSED;
}

struct http1_parser *http1_parser_new(void) {
        struct http1_parser *p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        llhttp_settings_init(&p->settings);
        p->settings.on_message_begin = on_message_begin;
        p->settings.on_url = on_url;
        p->settings.on_url_complete = on_url_complete;
        p->settings.on_header_field = on_header_field;
        p->settings.on_header_field_complete = on_header_field_complete;
        p->settings.on_header_value = on_header_value;
        p->settings.on_header_value_complete = on_header_value_complete;
        p->settings.on_headers_complete = on_headers_complete;
        p->settings.on_body = on_body;
        p->settings.on_chunk_complete = on_chunk_complete;
        p->settings.on_chunk_extension_name = on_chunk_extension;
        p->settings.on_chunk_extension_value = on_chunk_extension;
        p->settings.on_message_complete = on_message_complete;
        /* strict: llhttp.c is built with LLHTTP_STRICT_MODE, and no
         * llhttp_set_lenient_*() is ever called */
        llhttp_init(&p->ll, HTTP_REQUEST, &p->settings);
        p->ll.data = p;
        p->state = ST_HEAD;
        return p;
}

struct http1_parser *http1_parser_free(struct http1_parser *p) {
        free(p);
        return NULL;
}

static struct http1_event pop_event(struct http1_parser *p) {
        struct http1_event ev = p->queue[p->q_first];
        p->q_first = (p->q_first + 1) % ARRAY_SIZE(p->queue);
        p->q_len--;
        return ev;
}

/* One llhttp_execute() over buf[0..len): *ret_used bytes consumed, events
 * queued by the callbacks. */
static int step(struct http1_parser *p, const uint8_t *buf, size_t len, size_t *ret_used) {
        enum state was = p->state;
        size_t give = len;
        if (was == ST_HEAD) {
                if (p->raw_len == 0)
                        p->head_from = p->offset;
                give = MIN(len, HTTP1_HEAD_MAX - p->raw_len);
        }
        if (p->paused) {
                llhttp_resume(&p->ll);
                p->paused = false;
        }
        llhttp_errno_t e = llhttp_execute(&p->ll, (const char *) buf, give);
        size_t used = give;
        if (e == HPE_PAUSED) {
                used = (size_t) ((const uint8_t *) llhttp_get_error_pos(&p->ll) - buf);
                p->paused = true;
        } else if (e != HPE_OK) {
                /* body pieces before the error are still handed out */
                const char *at = llhttp_get_error_pos(&p->ll);
                if (at >= (const char *) buf && at <= (const char *) buf + give)
                        *ret_used = (size_t) (at - (const char *) buf);
                if (e == HPE_PAUSED_H2_UPGRADE)
                        return fail(p, -EBADMSG, 505, "HTTP/2 connection preface");
                return fail(p, -EBADMSG, 400, llhttp_get_error_reason(&p->ll) ?: llhttp_errno_name(e));
        }

        if (was == ST_HEAD) {
                memcpy(p->raw + p->raw_len, buf, used);
                p->raw_len += used;
                if (p->state != ST_HEAD) { /* the head is complete */
                        if (check_raw(p) < 0) {
                                p->q_len = 0; /* its HEAD is not handed out */
                                return p->error;
                        }
                        p->head.end = p->offset + used;
                        p->raw_len = 0;
                } else if (p->raw_len == HTTP1_HEAD_MAX)
                        return fail(p, -E2BIG, 431, "request head too large");
        }
        p->offset += used;
        *ret_used = used;
        return 0;
}

int http1_parser_feed(struct http1_parser *p, const uint8_t *buf, size_t len, size_t *ret_consumed,
                      struct http1_event *ret_event) {
        if (!buf && len > 0)
                return -EINVAL;
        /* events made before an error come first: the same events for any
         * split of the bytes */
        if (p->q_len > 0) {
                *ret_event = pop_event(p);
                *ret_consumed = 0;
                return 0;
        }
        if (p->error)
                return p->error;
        if (p->state == ST_UPGRADED)
                return fail(p, -EPROTO, 400, "the connection switched protocols");
        if (!buf)
                buf = (const uint8_t *) "";

        /* llhttp pauses after every chunk, also where that made no event
         * (the chunk's data came in an earlier call): go on until there is
         * an event or every byte is used */
        size_t total = 0;
        for (unsigned guard = 0;; guard++) {
                size_t used = 0;
                if (guard > 2 * len + 8)
                        return fail(p, -EIO, 400, "internal: llhttp makes no progress");
                int r = step(p, buf + total, len - total, &used);
                total += used;
                if (r < 0 && p->q_len == 0)
                        return r;
                if (r < 0)
                        break;
                if (p->q_len > 0 || !p->paused)
                        break;
        }
        *ret_consumed = total;
        *ret_event = p->q_len > 0 ? pop_event(p) : (struct http1_event){ .type = HTTP1_EV_NEED_MORE };
        return 0;
}

const struct http1_head *http1_parser_head(const struct http1_parser *p) {
        return p->have_head ? &p->head : NULL;
}

int http1_parser_status(const struct http1_parser *p) {
        return p->status;
}

const char *http1_parser_reason(const struct http1_parser *p) {
        return p->reason;
}

static bool dropped(const char *name, const char *const *drop, size_t n_drop) {
        for (size_t i = 0; i < n_drop; i++)
                if (drop[i] && strcasecmp(name, drop[i]) == 0)
                        return true;
        return false;
}

int http1_head_serialize(const struct http1_head *h, const struct http1_extra_header *add, size_t n_add,
                         const char *const *drop, size_t n_drop, char *out, size_t outsz, size_t *ret_len) {
        for (size_t i = 0; i < n_add; i++) {
                const char *v = add[i].value;
                size_t vl = v ? strlen(v) : 0;
                if (!add[i].name || !is_token(add[i].name, strlen(add[i].name)) || !v || !value_clean(v, vl) ||
                    (vl > 0 && (v[0] == ' ' || v[0] == '\t' || v[vl - 1] == ' ' || v[vl - 1] == '\t')))
                        return -EINVAL;
        }
        if (!h->method || !h->path || h->version_minor > 1)
                return -EINVAL;
        size_t pos = 0;
#define PUT(s, n)                                                                                                  \
        do {                                                                                                       \
                size_t n_ = (n);                                                                                   \
                if (n_ > outsz - pos)                                                                              \
                        return -ENOBUFS;                                                                           \
                memcpy(out + pos, (s), n_);                                                                        \
                pos += n_;                                                                                         \
        } while (0)
#define PUTS(s) PUT((s), strlen(s))
        PUTS(h->method);
        PUTS(" ");
        PUTS(h->path);
        PUTS(h->version_minor ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
        for (size_t i = 0; i < h->n_headers; i++) {
                const struct http1_header *hd = &h->headers[i];
                if (dropped(hd->name, drop, n_drop))
                        continue;
                PUT(hd->name, hd->name_len);
                PUTS(": ");
                PUT(hd->value, hd->value_len);
                PUTS("\r\n");
        }
        for (size_t i = 0; i < n_add; i++) {
                PUTS(add[i].name);
                PUTS(": ");
                PUTS(add[i].value);
                PUTS("\r\n");
        }
        PUTS("\r\n");
#undef PUTS
#undef PUT
        *ret_len = pos;
        return 0;
}

size_t http1_chunk_header(size_t len, char *out) {
        int n = snprintf(out, HTTP1_CHUNK_HEADER_MAX, "%zx\r\n", len);
        return n > 0 ? (size_t) n : 0;
}
