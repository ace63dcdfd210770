/* SPDX-License-Identifier: Apache-2.0 */
#include "httpresp.h"

#include <errno.h>
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

struct httpresp {
        llhttp_t ll;
        llhttp_settings_t settings; /* llhttp keeps a pointer: lives as long */
        const struct httpresp_events *ev;
        void *userdata;
        bool head_request;
        size_t head_bytes; /* of the current message's head */
        char *field, *value;
        size_t field_len, value_len;
        json_t *headers;
        char *connection; /* the Connection header's tokens: hop-by-hop names */
        bool informational, done, keep_alive;
        size_t trailing;
        int err; /* a limit's or an event's errno */
        const char *why;
};

static struct httpresp *parser_of(llhttp_t *ll) {
        return (struct httpresp *) ((char *) ll - offsetof(struct httpresp, ll));
}

static int fail(struct httpresp *p, int r, const char *why) {
        p->err = r;
        p->why = why;
        return -1;
}

static int count_head(struct httpresp *p, size_t n) {
        p->head_bytes += n;
        return p->head_bytes > HTTPRESP_HEAD_MAX ? fail(p, -E2BIG, "the response head is too large") : 0;
}

static int append(struct httpresp *p, char **buf, size_t *len, const char *at, size_t n) {
        if (count_head(p, n) < 0)
                return -1;
        char *b = realloc(*buf, *len + n + 1);
        if (!b)
                return fail(p, -ENOMEM, "out of memory");
        memcpy(b + *len, at, n);
        *len += n;
        b[*len] = '\0';
        *buf = b;
        return 0;
}

static int on_message_begin(llhttp_t *ll) {
        struct httpresp *p = parser_of(ll);
        p->head_bytes = 0;
        json_array_clear(p->headers);
        free(p->connection);
        p->connection = NULL;
        return 0;
}

static int on_status(llhttp_t *ll, const char *at, size_t n) {
        (void) at;
        return count_head(parser_of(ll), n);
}

static int on_header_field(llhttp_t *ll, const char *at, size_t n) {
        struct httpresp *p = parser_of(ll);
        return append(p, &p->field, &p->field_len, at, n);
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n) {
        struct httpresp *p = parser_of(ll);
        return append(p, &p->value, &p->value_len, at, n);
}

/* Hop-by-hop and framing headers: this connection's, not the client's. */
static bool hop_by_hop(const char *name) {
        static const char *const names[] = { "connection", "keep-alive", "proxy-connection", "transfer-encoding",
                                             "content-length", "te", "trailer", "upgrade" };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (strcasecmp(name, names[i]) == 0)
                        return true;
        return false;
}

static int on_header_value_complete(llhttp_t *ll) {
        struct httpresp *p = parser_of(ll);
        const char *name = p->field ? p->field : "", *value = p->value ? p->value : "";
        int r = 0;
        if (strcasecmp(name, "connection") == 0) {
                char *c = strdup_printf("%s%s%s", p->connection ? p->connection : "", p->connection ? "," : "", value);
                if (!c)
                        r = fail(p, -ENOMEM, "out of memory");
                free(p->connection);
                p->connection = c;
        } else if (!hop_by_hop(name)) {
                if (json_array_size(p->headers) >= HTTPRESP_HEADERS_MAX)
                        r = fail(p, -E2BIG, "the response has too many headers");
                else {
                        /* NULL for a value that is not UTF-8: that header is dropped */
                        json_t *v = json_stringn(value, p->value_len);
                        if (v)
                                json_array_append_new(p->headers, json_pack("[s%o]", name, p->field_len, v));
                }
        }
        free(p->field);
        free(p->value);
        p->field = p->value = NULL;
        p->field_len = p->value_len = 0;
        return r;
}

/* Whether name is one of the comma-separated tokens of list. */
static bool token_listed(const char *list, const char *name) {
        size_t n = strlen(name);
        for (const char *s = list; s && *s;) {
                s += strspn(s, " \t,");
                size_t k = strcspn(s, " \t,");
                if (k == n && strncasecmp(s, name, n) == 0)
                        return true;
                s += k;
        }
        return false;
}

static int on_headers_complete(llhttp_t *ll) {
        struct httpresp *p = parser_of(ll);
        unsigned status = llhttp_get_status_code(ll);
        if (status < 100 || status > 599) /* llhttp takes any three digits */
                return fail(p, -EBADMSG, "the status is not an HTTP status (100-599)");
        if (status == 101)
                return fail(p, -EBADMSG, "the server switched protocols, which no request asked for");
        if (status < 200) {
                p->informational = true; /* 100 Continue and the like: the response follows */
                return 0;
        }
        if (p->connection) { /* the headers Connection names are this hop's too */
                size_t i = 0;
                while (i < json_array_size(p->headers)) {
                        const char *name = json_string_value(json_array_get(json_array_get(p->headers, i), 0));
                        if (token_listed(p->connection, name))
                                json_array_remove(p->headers, i);
                        else
                                i++;
                }
        }
        int64_t length = (ll->flags & F_CONTENT_LENGTH) && !(ll->flags & F_CHUNKED) ? (int64_t) ll->content_length
                                                                                      : -1;
        int r = p->ev->head(p->userdata, status, p->headers, length);
        if (r < 0)
                return fail(p, r, "the response head could not be passed on");
        return p->head_request ? 1 : 0; /* 1: a HEAD's response has no body */
}

static int on_body(llhttp_t *ll, const char *at, size_t n) {
        struct httpresp *p = parser_of(ll);
        if (p->informational)
                return 0;
        int r = p->ev->body(p->userdata, (const uint8_t *) at, n);
        return r < 0 ? fail(p, r, "the response body could not be passed on") : 0;
}

static int on_message_complete(llhttp_t *ll) {
        struct httpresp *p = parser_of(ll);
        if (p->informational) {
                p->informational = false;
                return 0;
        }
        p->done = true;
        p->keep_alive = llhttp_should_keep_alive(ll);
        return HPE_PAUSED; /* nothing after the response is read */
}

int httpresp_new(const char *method, const struct httpresp_events *ev, void *userdata, struct httpresp **ret) {
        if (!method || !ev || !ev->head || !ev->body)
                return -EINVAL;
        struct httpresp *p = calloc(1, sizeof *p);
        if (!p || !(p->headers = json_array())) {
                free(p);
                return -ENOMEM;
        }
        p->ev = ev;
        p->userdata = userdata;
        p->head_request = strcmp(method, "HEAD") == 0;
        llhttp_settings_init(&p->settings);
        p->settings.on_message_begin = on_message_begin;
        p->settings.on_status = on_status;
        p->settings.on_header_field = on_header_field;
        p->settings.on_header_value = on_header_value;
        p->settings.on_header_value_complete = on_header_value_complete;
        p->settings.on_headers_complete = on_headers_complete;
        p->settings.on_body = on_body;
        p->settings.on_message_complete = on_message_complete;
        /* strict: llhttp's lenient flags are never set */
        llhttp_init(&p->ll, HTTP_RESPONSE, &p->settings);
        *ret = p;
        return 0;
}

void httpresp_free(struct httpresp *p) {
        if (!p)
                return;
        json_decref(p->headers);
        free(p->field);
        free(p->value);
        free(p->connection);
        free(p);
}

int httpresp_feed(struct httpresp *p, const uint8_t *data, size_t len, const char **ret_why) {
        *ret_why = "";
        if (p->done)
                return 1;
        if (p->err < 0) {
                *ret_why = p->why;
                return p->err;
        }
        llhttp_errno_t e = len > 0 ? llhttp_execute(&p->ll, (const char *) data, len) : llhttp_finish(&p->ll);
        if (p->done) {
                const char *end = len > 0 && e == HPE_PAUSED ? llhttp_get_error_pos(&p->ll) : NULL;
                if (end && end >= (const char *) data && end <= (const char *) data + len)
                        p->trailing = len - (size_t) (end - (const char *) data);
                return 1;
        }
        if (p->err < 0) {
                *ret_why = p->why;
                return p->err;
        }
        if (e != HPE_OK) {
                *ret_why = llhttp_get_error_reason(&p->ll) ?: llhttp_errno_name(e);
                return -EBADMSG;
        }
        if (len == 0) {
                *ret_why = "the server closed the connection before its response ended";
                return -EBADMSG;
        }
        return 0;
}

bool httpresp_keep_alive(const struct httpresp *p) {
        return p->done && p->keep_alive;
}

size_t httpresp_trailing(const struct httpresp *p) {
        return p->done ? p->trailing : 0;
}
