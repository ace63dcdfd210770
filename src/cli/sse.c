/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli-util.h"
#include "sse.h"

/* A line may carry a field name ahead of its value, so a value of exactly
 * max_event bytes still fits on one line. */
#define SSE_LINE_SLACK 64

/* A growable byte buffer that refuses to grow past a limit. */
struct sse_buf {
        char *p;
        size_t len, cap;
};

struct sse_parser {
        size_t max_event;
        sse_event_fn cb;
        void *userdata;

        struct sse_buf line; /* the line being read, without its terminator */
        struct sse_buf data; /* "data:" values of the open event, each + '\n' */
        struct sse_buf type; /* "event:" value of the open event */
        struct sse_buf id;   /* last event id; survives across events */

        bool seen_first_byte; /* a BOM is only skipped at the very start */
        size_t bom_matched;   /* bytes of EF BB BF matched so far */
        bool after_cr;        /* a line just ended in CR: a following LF is part of it */
        int error;            /* sticky: once failed, the stream is unusable */
};

static void sse_buf_release(struct sse_buf *b) {
        free(b->p);
        *b = (struct sse_buf){};
}

/* Appends n bytes and keeps one spare byte for a terminating NUL. */
static int sse_buf_append(struct sse_buf *b, const char *s, size_t n, size_t limit) {
        if (n > limit || b->len > limit - n)
                return -EMSGSIZE;
        if (cli_buf_reserve(&b->p, &b->cap, b->len + n + 1, 128) < 0)
                return -ENOMEM;
        if (n > 0)
                memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = '\0';
        return 0;
}

static int sse_buf_set(struct sse_buf *b, const char *s, size_t n, size_t limit) {
        b->len = 0;
        return sse_buf_append(b, s, n, limit);
}

int sse_parser_new(size_t max_event, sse_event_fn cb, void *userdata, struct sse_parser **ret) {
        if (!cb || !ret)
                return -EINVAL;
        struct sse_parser *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->max_event = max_event ? max_event : SSE_MAX_EVENT_DEFAULT;
        p->cb = cb;
        p->userdata = userdata;
        *ret = p;
        return 0;
}

struct sse_parser *sse_parser_free(struct sse_parser *p) {
        if (!p)
                return NULL;
        sse_buf_release(&p->line);
        sse_buf_release(&p->data);
        sse_buf_release(&p->type);
        sse_buf_release(&p->id);
        free(p);
        return NULL;
}

static int sse_dispatch(struct sse_parser *p) {
        /* An event without data is not dispatched, but it still resets the
         * event type (WHATWG "dispatch the event", step 2). */
        if (p->data.len == 0) {
                p->type.len = 0;
                return 0;
        }
        /* Drop the '\n' appended after the last data line. */
        p->data.len--;
        p->data.p[p->data.len] = '\0';

        struct sse_event ev = {
                .type = p->type.len > 0 ? p->type.p : "message",
                .data = p->data.p,
                .data_len = p->data.len,
                .id = p->id.len > 0 ? p->id.p : "",
        };
        int r = p->cb(&ev, p->userdata);
        p->data.len = 0;
        p->type.len = 0;
        return r < 0 ? r : 0;
}

static int sse_process_line(struct sse_parser *p, const char *line, size_t len) {
        if (len == 0)
                return sse_dispatch(p);
        if (line[0] == ':')
                return 0; /* comment, typically a keep-alive */

        const char *colon = memchr(line, ':', len);
        size_t flen = colon ? (size_t)(colon - line) : len;
        const char *value = colon ? colon + 1 : line + len;
        size_t vlen = len - (size_t)(value - line);
        if (vlen > 0 && value[0] == ' ') {
                value++;
                vlen--;
        }

        /* type and data share one budget: together they are "the event". */
        if (flen == 4 && memcmp(line, "data", 4) == 0) {
                int r = sse_buf_append(&p->data, value, vlen, p->max_event - MIN(p->type.len, p->max_event));
                if (r < 0)
                        return r;
                return sse_buf_append(&p->data, "\n", 1, p->max_event - MIN(p->type.len, p->max_event));
        }
        if (flen == 5 && memcmp(line, "event", 5) == 0)
                return sse_buf_set(&p->type, value, vlen, p->max_event - MIN(p->data.len, p->max_event));
        if (flen == 2 && memcmp(line, "id", 2) == 0) {
                /* The standard ignores ids containing NUL. */
                if (memchr(value, '\0', vlen))
                        return 0;
                return sse_buf_set(&p->id, value, vlen, p->max_event);
        }
        return 0; /* "retry" and unknown fields */
}

static int sse_feed_bytes(struct sse_parser *p, const char *s, size_t len) {
        while (len > 0) {
                if (p->after_cr) {
                        p->after_cr = false;
                        if (s[0] == '\n') {
                                s++;
                                len--;
                                continue;
                        }
                }

                size_t n = 0;
                while (n < len && s[n] != '\n' && s[n] != '\r')
                        n++;

                int r = sse_buf_append(&p->line, s, n, p->max_event + SSE_LINE_SLACK);
                if (r < 0)
                        return r;
                if (n == len)
                        return 0; /* line continues in the next chunk */

                p->after_cr = s[n] == '\r';
                r = sse_process_line(p, p->line.p, p->line.len);
                p->line.len = 0;
                if (r < 0)
                        return r;
                s += n + 1;
                len -= n + 1;
        }
        return 0;
}

int sse_parser_feed(struct sse_parser *p, const void *buf, size_t len) {
        static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
        const unsigned char *s = buf;

        if (!p)
                return -EINVAL;
        if (p->error < 0)
                return p->error;

        /* Skip a UTF-8 byte-order mark at the start of the stream, which may
         * itself arrive split across chunks. */
        while (!p->seen_first_byte && len > 0) {
                if (s[0] == bom[p->bom_matched]) {
                        p->bom_matched++;
                        s++;
                        len--;
                        if (p->bom_matched == sizeof(bom))
                                p->seen_first_byte = true;
                        continue;
                }
                p->seen_first_byte = true;
                /* A partial BOM followed by something else was real data. */
                int r = sse_feed_bytes(p, (const char *)bom, p->bom_matched);
                if (r < 0)
                        return (p->error = r);
        }

        int r = sse_feed_bytes(p, (const char *)s, len);
        if (r < 0)
                p->error = r;
        return r;
}
