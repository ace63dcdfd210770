/* SPDX-License-Identifier: Apache-2.0 */
#include "conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "nodeutil.h"
#include "util.h"

/* How long a client may take to send its request (and each upload frame). */
#define REQUEST_TIMEOUT_MS 60000

static int conn_send_json(struct node_conn *c, uint8_t type, json_t *obj) {
        if (c->broken)
                return -EPIPE;
        _cleanup_free_ char *s = json_dumps(obj, JSON_COMPACT);
        if (!s)
                return -ENOMEM;
        int r = link_write_frame(&c->link, type, 0, s, strlen(s));
        if (r < 0 && r != -EMSGSIZE)
                c->broken = true;
        return r;
}

int conn_reply_ok(struct node_conn *c, json_t *extra) {
        json_t *o = extra ? extra : json_object();
        if (!o)
                return -ENOMEM;
        json_object_set_new(o, "ok", json_true());
        int r = conn_send_json(c, PROTO_NODE_REPLY, o);
        if (r == -EMSGSIZE) {
                json_decref(o);
                return conn_reply_error(c, r, "internal", "reply larger than one frame (%u bytes)",
                                        PROTO_MAX_PAYLOAD);
        }
        c->replied = true;
        json_decref(o);
        return r;
}

int conn_reply_error(struct node_conn *c, int r, const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);

        if (r >= 0)
                r = -EINVAL;
        log_emit(strcmp(code, "internal") == 0 ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG, c->ctx,
                 "request failed: code=%s %s", code, msg);
        json_t *o = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", code, "message", msg);
        if (o) {
                conn_send_json(c, PROTO_NODE_REPLY, o);
                json_decref(o);
        }
        c->replied = true;
        return r;
}

int conn_reply_errno(struct node_conn *c, int r, const char *what) {
        return conn_reply_error(c, r, node_errno_code(r), "%s: %s", what, strerror(r < 0 ? -r : EINVAL));
}

int conn_send_event(struct node_conn *c, json_t *obj) {
        if (!obj)
                return -ENOMEM;
        int r = conn_send_json(c, PROTO_NODE_EVENT, obj);
        json_decref(obj);
        return r;
}

int conn_send_data(struct node_conn *c, const void *data, size_t len) {
        if (c->broken)
                return -EPIPE;
        int r = link_write_frame(&c->link, PROTO_NODE_DATA, 0, data, len);
        if (r < 0)
                c->broken = true;
        return r;
}

int conn_send_end(struct node_conn *c, json_t *extra) {
        json_t *o = extra ? extra : json_object();
        if (!o)
                return -ENOMEM;
        int r = conn_send_json(c, PROTO_NODE_END, o);
        json_decref(o);
        return r;
}

int conn_read_frame(struct node_conn *c, int timeout_ms, struct proto_header *ret_h, const uint8_t **ret_payload) {
        int t = timeout_ms < 0 ? REQUEST_TIMEOUT_MS : timeout_ms;
        uint64_t deadline = now_monotonic_ns() + (uint64_t) t * 1000000ULL;
        for (;;) {
                int r = proto_reader_next(&c->reader, ret_h, ret_payload);
                if (r != 0)
                        return r;
                uint64_t now = now_monotonic_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                r = link_wait(&c->link, (int) ((deadline - now + 999999) / 1000000));
                if (r < 0)
                        return r;
                if (r == 0)
                        continue; /* the deadline decides */
                r = link_fill(&c->link, &c->reader);
                if (r == 0)
                        return 0;
                if (r < 0 && r != -EAGAIN)
                        return r;
        }
}

void conn_pop_frame(struct node_conn *c, const struct proto_header *h) {
        proto_reader_pop(&c->reader, h);
}

bool conn_hung_up(struct node_conn *c) {
        /* nothing more is expected from a client mid-stream */
        return c->broken || link_hung_up(&c->link);
}
