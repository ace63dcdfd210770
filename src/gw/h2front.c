/* SPDX-License-Identifier: Apache-2.0 */
#include "h2front.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "httpresp.h"
#include "macros.h"

/* names and values of one request, and the Host and cookie lines built
 * from them */
#define ARENA_MAX (2 * HTTP1_HEAD_MAX + 64)
#define REFUSAL_MAX 512

struct h2front {
        nghttp2_session *s;
        const struct h2front_ops *ops;
        void *userdata;
        /* h2front_send's target while nghttp2 writes */
        uint8_t *out;
        size_t out_size, out_len;

        /* the stream under way (0: none), and its request */
        int32_t stream;
        char arena[ARENA_MAX];
        size_t arena_len, field_bytes;
        struct http1_header fields[HTTP1_HEADERS_MAX + 4];
        size_t n_fields;
        const char *method, *scheme, *authority, *path;
        size_t authority_len;
        int refuse_status; /* found while the headers came: answered at their end */
        const char *refuse_why;
        struct http1_head head;
        struct http1_header head_fields[HTTP1_HEADERS_MAX + 4]; /* head's: Host, ..., cookie, framing */
        bool sent_up;                                           /* its head went upstream */
        bool chunked;                                           /* its body goes upstream chunked */
        bool req_done;                                          /* the guest ended the stream */
        bool resp_local;                                        /* the response is the front's own refusal */
        bool resp_submitted;                                    /* the response's HEADERS are */
        bool resp_done;                                         /* the response's body is all in body */
        bool deferred;                                          /* nghttp2 waits for body bytes */
        struct httpresp *resp;
        uint8_t *body;
        size_t body_off, body_len, body_scanned;

        bool up_usable;     /* the upstream may carry another request */
        bool goaway;        /* GOAWAY submitted */
        int up_fail_status; /* h2front_upstream_failed() */
        char up_fail_why[200];
};

static void go_away(struct h2front *f) {
        if (f->goaway)
                return;
        f->goaway = true;
        /* the stream under way is still served; none after it */
        (void) nghttp2_submit_goaway(f->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(f->s),
                                     NGHTTP2_NO_ERROR, NULL, 0);
}

static void upstream_unusable(struct h2front *f) {
        f->up_usable = false;
        go_away(f);
}

static void exchange_reset(struct h2front *f) {
        f->stream = 0;
        f->arena_len = f->field_bytes = f->n_fields = 0;
        f->method = f->scheme = f->authority = f->path = NULL;
        f->authority_len = 0;
        f->refuse_status = 0;
        f->refuse_why = NULL;
        f->sent_up = f->chunked = f->req_done = false;
        f->resp_local = f->resp_submitted = f->resp_done = f->deferred = false;
        httpresp_free(f->resp);
        f->resp = NULL;
        f->body_off = f->body_len = f->body_scanned = 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *userdata) {
        struct h2front *f = userdata;
        if (stream != f->stream)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        uint8_t *p = f->body + f->body_off;
        size_t may = f->resp_local
                             ? f->body_len
                             : f->ops->redact(f->userdata, p, f->body_len, f->body_scanned, f->resp_done);
        f->body_scanned = f->body_len;
        size_t n = MIN(length, may);
        if (n == 0 && !(f->resp_done && f->body_len == 0)) {
                f->deferred = true;
                return NGHTTP2_ERR_DEFERRED;
        }
        memcpy(buf, p, n);
        f->body_off += n;
        f->body_len -= n;
        f->body_scanned -= n;
        if (f->body_len == 0)
                f->body_off = 0;
        if (f->resp_done && f->body_len == 0)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t) n;
}

/* nghttp2 asks for the body again (it was deferred for want of bytes). */
static void resume(struct h2front *f) {
        if (f->deferred && f->stream) {
                f->deferred = false;
                (void) nghttp2_session_resume_data(f->s, f->stream);
        }
}

static void body_put(struct h2front *f, const void *data, size_t len) {
        if (f->body_off > 0) {
                memmove(f->body, f->body + f->body_off, f->body_len);
                f->body_off = 0;
        }
        memcpy(f->body + f->body_len, data, len); /* h2front_upstream_room() bounded it */
        f->body_len += len;
        resume(f);
}

static int submit(struct h2front *f, unsigned status, const nghttp2_nv *fields, size_t n) {
        nghttp2_nv nva[HTTPRESP_HEADERS_MAX + 2];
        char st[4];
        snprintf(st, sizeof st, "%03u", status % 1000);
        nva[0] = (nghttp2_nv){(uint8_t *) ":status", (uint8_t *) st, 7, 3, NGHTTP2_NV_FLAG_NONE};
        memcpy(nva + 1, fields, n * sizeof *fields);
        nghttp2_data_provider body = {.read_callback = read_body};
        int r = nghttp2_submit_response(f->s, f->stream, nva, n + 1, &body);
        if (r == 0)
                f->resp_submitted = true;
        return r;
}

/* The front's own answer on the stream under way: status and why, then
 * no more streams. */
static void refuse(struct h2front *f, int status, const char *why) {
        if (!f->stream)
                return;
        go_away(f);
        if (f->resp_submitted) { /* too late for a status: the stream is cut */
                (void) nghttp2_submit_rst_stream(f->s, NGHTTP2_FLAG_NONE, f->stream, NGHTTP2_INTERNAL_ERROR);
                return;
        }
        httpresp_free(f->resp);
        f->resp = NULL;
        f->resp_local = f->resp_done = true;
        char text[REFUSAL_MAX];
        int tl = snprintf(text, sizeof text, "airlock: egress to %s refused: %s\n",
                          f->authority ? f->authority : "this host", why);
        f->body_off = 0;
        f->body_len = (size_t) MIN(tl, (int) sizeof text - 1);
        memcpy(f->body, text, f->body_len);
        char cl[24];
        snprintf(cl, sizeof cl, "%zu", f->body_len);
        nghttp2_nv fields[] = {
                {(uint8_t *) "content-type", (uint8_t *) "text/plain", 12, 10, NGHTTP2_NV_FLAG_NONE},
                {(uint8_t *) "content-length", (uint8_t *) cl, 14, strlen(cl), NGHTTP2_NV_FLAG_NONE},
        };
        if (submit(f, (unsigned) status, fields, ARRAY_SIZE(fields)) != 0)
                (void) nghttp2_submit_rst_stream(f->s, NGHTTP2_FLAG_NONE, f->stream, NGHTTP2_INTERNAL_ERROR);
}

static int up_put(struct h2front *f, const void *data, size_t len) {
        return f->ops->up_write(f->userdata, data, len);
}

/* --- the upstream's response --- */

static int resp_head(void *userdata, unsigned status, json_t *headers, int64_t length) {
        struct h2front *f = userdata;
        size_t n = json_array_size(headers), total = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *h = json_array_get(headers, i);
                total += json_string_length(json_array_get(h, 0)) +
                         json_string_length(json_array_get(h, 1)) + 2;
        }
        char *scratch = malloc(total + 1);
        nghttp2_nv fields[HTTPRESP_HEADERS_MAX + 1];
        if (!scratch)
                return -ENOMEM;
        size_t k = 0, at = 0;
        for (size_t i = 0; i < n && k < HTTPRESP_HEADERS_MAX; i++) {
                json_t *h = json_array_get(headers, i);
                const char *name = json_string_value(json_array_get(h, 0));
                const char *value = json_string_value(json_array_get(h, 1));
                size_t nl = json_string_length(json_array_get(h, 0)),
                       vl = json_string_length(json_array_get(h, 1));
                char *nm = scratch + at;
                for (size_t j = 0; j < nl; j++) /* HTTP/2 field names are lower case */
                        nm[j] = (char) tolower((unsigned char) name[j]);
                at += nl + 1;
                char *v = scratch + at;
                memcpy(v, value, vl);
                at += vl + 1;
                (void) f->ops->redact(f->userdata, (uint8_t *) v, vl, 0, true);
                fields[k++] = (nghttp2_nv){(uint8_t *) nm, (uint8_t *) v, nl, vl, NGHTTP2_NV_FLAG_NONE};
        }
        char cl[24];
        if (length >= 0 && status != 204 && status != 304) {
                snprintf(cl, sizeof cl, "%lld", (long long) length);
                fields[k++] = (nghttp2_nv){(uint8_t *) "content-length", (uint8_t *) cl, 14, strlen(cl),
                                           NGHTTP2_NV_FLAG_NONE};
        }
        int r = submit(f, status, fields, k);
        free(scratch);
        return r == 0 ? 0 : -EIO;
}

static int resp_body(void *userdata, const uint8_t *data, size_t len) {
        struct h2front *f = userdata;
        if (len > H2FRONT_BODY_BUF - f->body_len)
                return -ENOBUFS; /* fed more than h2front_upstream_room() said */
        body_put(f, data, len);
        return 0;
}

static const struct httpresp_events resp_events = {.head = resp_head, .body = resp_body};

size_t h2front_upstream_room(const struct h2front *f) {
        if (!f->up_usable)
                return 0;
        if (f->resp && !f->resp_done)
                return H2FRONT_BODY_BUF - f->body_len;
        /* none expected: read anyway, so that the origin closing an idle
         * connection (or sending what nobody asked for) is seen at once */
        return H2FRONT_BODY_BUF;
}

void h2front_upstream(struct h2front *f, const uint8_t *data, size_t len) {
        if (!f->resp || f->resp_done) {
                /* bytes no request asked for, or the end of an idle connection */
                upstream_unusable(f);
                return;
        }
        const char *why = NULL;
        int r = httpresp_feed(f->resp, data, len, &why);
        if (r == 1) {
                f->resp_done = true;
                if (!httpresp_keep_alive(f->resp) || httpresp_trailing(f->resp) > 0)
                        upstream_unusable(f);
                resume(f); /* for the end of the stream */
        } else if (r < 0) {
                char msg[160];
                snprintf(msg, sizeof msg, "the destination's response: %s", why && *why ? why : "broken");
                upstream_unusable(f);
                refuse(f, 502, msg);
        }
}

void h2front_upstream_failed(struct h2front *f, int status, const char *why) {
        snprintf(f->up_fail_why, sizeof f->up_fail_why, "%s", why);
        f->up_fail_status = status;
        f->up_usable = false;
        /* the guest hears why: on the stream under way, or on its first
         * (GOAWAY now would end the connection before it asked) */
        if (f->stream)
                refuse(f, status, f->up_fail_why);
}

bool h2front_upstream_wanted(const struct h2front *f) {
        return f->up_usable;
}

/* --- the guest's requests --- */

static const char *arena_add(struct h2front *f, const uint8_t *s, size_t n) {
        if (n + 1 > ARENA_MAX - f->arena_len)
                return NULL;
        char *p = f->arena + f->arena_len;
        memcpy(p, s, n);
        p[n] = '\0';
        f->arena_len += n + 1;
        return p;
}

static bool is_field(const struct http1_header *h, const char *name) {
        return h->name_len == strlen(name) && memcmp(h->name, name, h->name_len) == 0;
}

/* The methods HTTP/1.1 requests through the gateway may have: llhttp's
 * (http1.c refuses the rest), so both versions pass the same set. */
static bool method_known(const char *m) {
#define XX(num, name, string)                                                                               \
        if (strcmp(m, #string) == 0)                                                                        \
                return true;
        HTTP_METHOD_MAP(XX)
#undef XX
        return false;
}

static bool path_ok(const char *path, size_t n) {
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (path[i] <= 0x20 || path[i] >= 0x7f || path[i] == '#')
                        return false;
        return true;
}

static int refusal(const char **why, int status, const char *text) {
        *why = text;
        return status;
}

/* The request's headers are all here: check it, build its HTTP/1.1 head
 * and hand it to ops->head. Returns the status to refuse with, or 0. */
static int request_ready(struct h2front *f, bool end_stream, const char **why) {
        if (f->refuse_status) {
                *why = f->refuse_why;
                return f->refuse_status;
        }
        if (f->up_fail_status) {
                *why = f->up_fail_why;
                return f->up_fail_status;
        }
        if (!f->up_usable) {
                *why = "the destination's connection has ended";
                return 502;
        }
        if (!f->method || !http1_token(f->method, strlen(f->method)))
                return refusal(why, 400, "no method, or one that is no token");
        if (strcmp(f->method, "CONNECT") == 0)
                return refusal(why, 405, "CONNECT");
        if (!method_known(f->method))
                return refusal(why, 405, "a method the gateway does not know");
        if (!f->scheme || strcmp(f->scheme, "https") != 0)
                return refusal(why, 400, ":scheme is not https");
        if (!f->path ||
            !(f->path[0] == '/' || (strcmp(f->path, "*") == 0 && strcmp(f->method, "OPTIONS") == 0)))
                return refusal(why, 400, ":path is not origin-form");
        if (strlen(f->path) > HTTP1_TARGET_MAX)
                return refusal(why, 414, ":path is too long");
        if (!path_ok(f->path, strlen(f->path)))
                return refusal(why, 400, ":path holds a space, a control character or a fragment");

        struct http1_head *h = &f->head;
        *h = (struct http1_head){.method = f->method,
                                 .version_minor = 1,
                                 .target = f->path,
                                 .path = f->path,
                                 .keep_alive = true};
        /* :authority, or a host field; both must agree */
        const struct http1_header *host = NULL;
        size_t cookies = 0, cookie_bytes = 0;
        for (size_t i = 0; i < f->n_fields; i++) {
                const struct http1_header *fl = &f->fields[i];
                if (is_field(fl, "host")) {
                        if (host)
                                return refusal(why, 400, "more than one host field");
                        host = fl;
                } else if (is_field(fl, "cookie")) {
                        cookies++;
                        cookie_bytes += fl->value_len + 2;
                }
        }
        const char *auth = f->authority ? f->authority : host ? host->value : NULL;
        size_t auth_len = f->authority ? f->authority_len : host ? host->value_len : 0;
        if (!auth || auth_len == 0)
                return refusal(why, 400, "no :authority");
        if (http1_authority_parse(auth, auth_len, h) < 0)
                return refusal(why, 400, ":authority is not host[:port]");
        if (host && f->authority) {
                struct http1_head other = {};
                if (http1_authority_parse(host->value, host->value_len, &other) < 0 ||
                    other.host_kind != h->host_kind || other.port != h->port ||
                    strcmp(other.host, h->host) != 0)
                        return refusal(why, 400, "the host field differs from :authority");
        }
        f->authority = auth; /* for a refusal's text */

        /* the HTTP/1.1 fields: Host first, then the guest's in order */
        struct http1_header *out = f->head_fields;
        size_t n = 0;
        out[n++] = (struct http1_header){"Host", 4, auth, auth_len};
        char *cookie = NULL;
        bool has_length = false;
        if (cookies > 0) {
                if (cookie_bytes + 1 > ARENA_MAX - f->arena_len)
                        return refusal(why, 431, "the request's header fields are too large");
                cookie = f->arena + f->arena_len;
                cookie[0] = '\0';
        }
        size_t cookie_len = 0;
        for (size_t i = 0; i < f->n_fields; i++) {
                const struct http1_header *fl = &f->fields[i];
                if (is_field(fl, "host") || is_field(fl, "te") || is_field(fl, "expect"))
                        continue;
                if (is_field(fl, "cookie")) {
                        if (cookie_len > 0) {
                                memcpy(cookie + cookie_len, "; ", 2);
                                cookie_len += 2;
                        }
                        memcpy(cookie + cookie_len, fl->value, fl->value_len);
                        cookie_len += fl->value_len;
                        cookie[cookie_len] = '\0';
                        continue;
                }
                if (is_field(fl, "content-length")) {
                        has_length = true;
                        char *end = NULL;
                        unsigned long long v = strtoull(fl->value, &end, 10);
                        if (!end || *end || fl->value_len == 0 || fl->value_len > 19 || fl->value[0] < '0' ||
                            fl->value[0] > '9') /* strtoull takes a sign and spaces */
                                return refusal(why, 400, "content-length is no number");
                        h->content_length = v;
                }
                out[n++] = *fl;
        }
        if (cookie) {
                f->arena_len += cookie_len + 1;
                out[n++] = (struct http1_header){"cookie", 6, cookie, cookie_len};
        }
        if (end_stream)
                h->body = HTTP1_BODY_NONE;
        else if (has_length)
                h->body = h->content_length > 0 ? HTTP1_BODY_LENGTH : HTTP1_BODY_NONE;
        else {
                h->body = HTTP1_BODY_CHUNKED;
                out[n++] = (struct http1_header){"Transfer-Encoding", 17, "chunked", 7};
        }
        h->headers = out;
        h->n_headers = n;

        int status = f->ops->head(f->userdata, h, why);
        if (status != 0)
                return status;
        f->sent_up = true;
        f->chunked = h->body == HTTP1_BODY_CHUNKED;
        if (httpresp_new(f->method, &resp_events, f, &f->resp) < 0) {
                upstream_unusable(f); /* its request went; no response can be read */
                return refusal(why, 502, "out of memory");
        }
        return 0;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *userdata) {
        struct h2front *f = userdata;
        if (frame->hd.type != NGHTTP2_HEADERS)
                return 0;
        if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* trailers would pass unchecked: reset */
        if (f->stream != 0 || f->goaway) {
                /* a second stream at once (sent before our SETTINGS arrived),
                 * or one after GOAWAY: not processed, which the client may
                 * retry (its fields and DATA are ignored: not f->stream) */
                (void) nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                                 NGHTTP2_REFUSED_STREAM);
                return 0;
        }
        exchange_reset(f);
        f->stream = frame->hd.stream_id;
        return 0;
}

static void refuse_later(struct h2front *f, int status, const char *why) {
        if (!f->refuse_status) {
                f->refuse_status = status;
                f->refuse_why = why;
        }
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *userdata) {
        struct h2front *f = userdata;
        if (frame->hd.stream_id != f->stream || f->refuse_status)
                return 0;
        f->field_bytes += namelen + valuelen;
        if (f->field_bytes > HTTP1_HEAD_MAX) {
                refuse_later(f, 431, "the request's header fields are too large");
                return 0;
        }
        const char *n = arena_add(f, name, namelen), *v = arena_add(f, value, valuelen);
        if (!n || !v) {
                refuse_later(f, 431, "the request's header fields are too large");
                return 0;
        }
        if (namelen > 0 && name[0] == ':') {
                /* nghttp2 let only the four request pseudo-headers through, once each */
                if (strcmp(n, ":method") == 0)
                        f->method = v;
                else if (strcmp(n, ":scheme") == 0)
                        f->scheme = v;
                else if (strcmp(n, ":path") == 0)
                        f->path = v;
                else if (strcmp(n, ":authority") == 0) {
                        f->authority = v;
                        f->authority_len = valuelen;
                } else
                        refuse_later(f, 400, "an unknown pseudo-header");
                return 0;
        }
        if (f->n_fields >= HTTP1_HEADERS_MAX) {
                refuse_later(f, 431, "too many header fields");
                return 0;
        }
        if (!http1_token(n, namelen) || !http1_value_clean(v, valuelen) ||
            (valuelen > 0 &&
             (v[0] == ' ' || v[0] == '\t' || v[valuelen - 1] == ' ' || v[valuelen - 1] == '\t'))) {
                refuse_later(f, 400,
                             "a header field name is no token, or its value holds a control character");
                return 0;
        }
        f->fields[f->n_fields++] = (struct http1_header){n, namelen, v, valuelen};
        return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *userdata) {
        struct h2front *f = userdata;
        if (frame->hd.stream_id == 0 || frame->hd.stream_id != f->stream)
                return 0;
        bool end_stream = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
                const char *why = NULL;
                int status = request_ready(f, end_stream, &why);
                if (status != 0)
                        refuse(f, status, why ? why : "refused");
        } else if (frame->hd.type == NGHTTP2_DATA && end_stream && f->sent_up && f->chunked &&
                   up_put(f, HTTP1_CHUNK_LAST, strlen(HTTP1_CHUNK_LAST)) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (end_stream)
                f->req_done = true;
        return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data, size_t len,
                         void *userdata) {
        struct h2front *f = userdata;
        if (stream != f->stream || !f->sent_up || len == 0)
                return 0; /* a refused stream's body goes nowhere */
        char ch[HTTP1_CHUNK_HEADER_MAX];
        size_t hl = f->chunked ? http1_chunk_header(len, ch) : 0;
        if (f->ops->up_room(f->userdata) < hl + len + 2)
                return NGHTTP2_ERR_CALLBACK_FAILURE; /* h2front_recv was fed without the room */
        if ((hl && up_put(f, ch, hl) < 0) || up_put(f, data, len) < 0 || (hl && up_put(f, "\r\n", 2) < 0))
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        return f->ops->up_room(f->userdata) < H2FRONT_UP_ROOM ? NGHTTP2_ERR_PAUSE : 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream, uint32_t error_code, void *userdata) {
        struct h2front *f = userdata;
        if (stream != f->stream)
                return 0;
        /* an exchange cut half-way leaves the upstream connection in the
         * middle of a request or a response: it cannot carry another */
        if (f->sent_up && !(f->req_done && f->resp_done))
                upstream_unusable(f);
        exchange_reset(f);
        return 0;
}

static ssize_t on_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *userdata) {
        struct h2front *f = userdata;
        size_t n = MIN(len, f->out_size - f->out_len);
        if (n == 0)
                return NGHTTP2_ERR_WOULDBLOCK;
        memcpy(f->out + f->out_len, data, n);
        f->out_len += n;
        return (ssize_t) n;
}

int h2front_new(const struct h2front_ops *ops, void *userdata, struct h2front **ret) {
        struct h2front *f = calloc(1, sizeof *f);
        nghttp2_session_callbacks *cb = NULL;
        if (!f || !(f->body = malloc(H2FRONT_BODY_BUF)) || nghttp2_session_callbacks_new(&cb) != 0)
                goto nomem;
        f->ops = ops;
        f->userdata = userdata;
        f->up_usable = true;
        nghttp2_session_callbacks_set_send_callback(cb, on_send);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
        int r = nghttp2_session_server_new(&f->s, cb, f);
        nghttp2_session_callbacks_del(cb);
        if (r != 0)
                goto nomem;
        const nghttp2_settings_entry settings[] = {
                {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1},
                {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HTTP1_HEAD_MAX + 32 * HTTP1_HEADERS_MAX},
        };
        if (nghttp2_submit_settings(f->s, NGHTTP2_FLAG_NONE, settings, ARRAY_SIZE(settings)) != 0)
                goto nomem;
        *ret = f;
        return 0;
nomem:
        h2front_free(f);
        return -ENOMEM;
}

void h2front_free(struct h2front *f) {
        if (!f)
                return;
        nghttp2_session_del(f->s);
        httpresp_free(f->resp);
        free(f->body);
        free(f);
}

int h2front_recv(struct h2front *f, const uint8_t *data, size_t len, size_t *ret_consumed,
                 const char **ret_why) {
        *ret_consumed = 0;
        *ret_why = NULL;
        ssize_t n = nghttp2_session_mem_recv(f->s, data, len);
        if (n < 0) {
                *ret_why = nghttp2_strerror((int) n);
                return n == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EBADMSG;
        }
        *ret_consumed = (size_t) n;
        return 0;
}

size_t h2front_send(struct h2front *f, uint8_t *out, size_t size) {
        f->out = out;
        f->out_size = size;
        f->out_len = 0;
        if (size > 0)
                (void) nghttp2_session_send(f->s); /* a fatal error shows as !want_write */
        f->out = NULL;
        return f->out_len;
}

void h2front_resume(struct h2front *f) {
        if (f->body_len > 0) /* a tail redaction held may go now */
                resume(f);
}

bool h2front_done(const struct h2front *f) {
        return !nghttp2_session_want_read(f->s) && !nghttp2_session_want_write(f->s);
}
