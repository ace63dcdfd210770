/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeclient.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apierror.h"
#include "util.h"


/* The control plane's side of mutual TLS: set once at start, before any
 * request, in a cluster; NULL on one machine (Unix sockets only). */
static struct mtls_ctx *cluster_tls;

void node_client_set_tls(struct mtls_ctx *tls) {
        cluster_tls = tls;
}

int node_conn_set_timeout(struct node_conn *c, unsigned timeout_s) {
        return link_set_timeout(&c->link, (int) (timeout_s ? timeout_s : 1) * 1000);
}

int node_conn_open(const char *node_addr, unsigned timeout_s, struct node_conn **ret) {
        struct node_conn *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->link = LINK_NULL;
        int r = proto_reader_init(&c->reader);
        if (r >= 0)
                r = link_connect(node_addr, cluster_tls, (int) (timeout_s ? timeout_s : 1) * 1000, &c->link);
        if (r < 0) {
                node_conn_free(c);
                /* a bad address is ours; anything else (missing socket,
                 * refused, a certificate refused) is a node not there for us */
                return r == -EINVAL || r == -ENOMEM ? r : -EHOSTDOWN;
        }
        *ret = c;
        return 0;
}

void node_conn_free(struct node_conn *c) {
        if (!c)
                return;
        link_close(&c->link);
        proto_reader_release(&c->reader);
        free(c);
}

/* Socket errors as the API should see them. */
static int io_errno(int r) {
        if (r == -EAGAIN || r == -EWOULDBLOCK)
                return -ETIMEDOUT;
        if (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN)
                return -ECONNRESET;
        return r;
}

int node_conn_send_request(struct node_conn *c, const json_t *req) {
        _cleanup_free_ char *s = json_dumps(req, JSON_COMPACT);
        if (!s)
                return -ENOMEM;
        size_t len = strlen(s);
        int r = len > PROTO_MAX_PAYLOAD ? -EMSGSIZE : io_errno(link_write_frame(&c->link, PROTO_NODE_REQUEST, 0, s, len));
        explicit_bzero(s, len); /* a request may carry a data key (sandbox.suspend, sandbox.wake) */
        return r;
}

int node_conn_send_data(struct node_conn *c, const void *data, size_t len) {
        const uint8_t *p = data;
        while (len > 0) {
                size_t k = MIN(len, (size_t) PROTO_DATA_CHUNK);
                int r = link_write_frame(&c->link, PROTO_NODE_DATA, 0, p, k);
                if (r < 0)
                        return io_errno(r);
                p += k;
                len -= k;
        }
        return 0;
}

int node_conn_send_end(struct node_conn *c, bool abort) {
        const char *body = abort ? "{\"abort\":true}" : "{}";
        return io_errno(link_write_frame(&c->link, PROTO_NODE_END, 0, body, strlen(body)));
}

static void set_err(char *err, const char *msg) {
        if (err)
                snprintf(err, API_ERRMSG_MAX, "%s", msg);
}

static void set_err_frame(char *err, const char *what, uint8_t type) {
        if (err)
                snprintf(err, API_ERRMSG_MAX, "unexpected %s frame %s", proto_type_name(type), what);
}

/* Turns an {"ok":false,"error":{...}} object into its errno and message. */
static int reply_error(const json_t *o, char *err) {
        json_t *e = json_object_get(o, "error");
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        int r = api_error_from_code(code);
        set_err(err, msg && *msg ? msg : api_error_default_message(r));
        return r;
}

/* Releases a NODE_DATA frame handed out by the previous node_conn_next(). */
static void drop_pending(struct node_conn *c) {
        if (c->has_pending) {
                proto_reader_pop(&c->reader, &c->pending);
                c->has_pending = false;
        }
}

/* Reads one frame; -ECONNRESET on EOF. */
static int read_frame(struct node_conn *c, struct proto_header *h, const uint8_t **payload) {
        drop_pending(c);
        int r = link_read_frame(&c->link, &c->reader, h, payload);
        if (r == 0)
                return -ECONNRESET;
        return r < 0 ? io_errno(r) : 0;
}

int node_conn_read_reply(struct node_conn *c, json_t **ret, char *err) {
        struct proto_header h;
        const uint8_t *payload;
        int r = read_frame(c, &h, &payload);
        if (r < 0) {
                set_err(err, r == -ETIMEDOUT ? "the node agent did not answer in time"
                                                   : "the node agent closed the connection");
                return r;
        }
        if (h.type != PROTO_NODE_REPLY) {
                proto_reader_pop(&c->reader, &h);
                set_err_frame(err, "from the node agent", h.type);
                return -EBADMSG;
        }
        _cleanup_(json_decrefp) json_t *o = json_loadb((const char *) payload, h.length, JSON_ALLOW_NUL, NULL);
        proto_reader_pop(&c->reader, &h);
        if (!json_is_object(o)) {
                set_err(err, "malformed reply from the node agent");
                return -EBADMSG;
        }
        if (!json_is_true(json_object_get(o, "ok")))
                return reply_error(o, err);
        if (ret)
                *ret = TAKE_PTR(o);
        return 0;
}

int node_conn_next(struct node_conn *c, struct node_frame *ret, char *err) {
        struct proto_header h;
        const uint8_t *payload;
        drop_pending(c);
        int r = link_read_frame(&c->link, &c->reader, &h, &payload);
        if (r == 0)
                return 0;
        if (r < 0)
                return io_errno(r);
        struct node_frame f = { .type = h.type };
        if (h.type == PROTO_NODE_DATA) {
                /* the payload stays in the reader until the next call */
                c->pending = h;
                c->has_pending = true;
                f.data = payload;
                f.len = h.length;
                *ret = f;
                return 1;
        }
        json_t *o = h.length > 0 ? json_loadb((const char *) payload, h.length, JSON_ALLOW_NUL, NULL) : json_object();
        proto_reader_pop(&c->reader, &h);
        if (!json_is_object(o)) {
                json_decref(o);
                set_err(err, "malformed stream frame from the node agent");
                return -EBADMSG;
        }
        if (h.type == PROTO_NODE_REPLY) {
                r = json_is_true(json_object_get(o, "ok")) ? -EBADMSG : reply_error(o, err);
                json_decref(o);
                return r;
        }
        if (h.type != PROTO_NODE_EVENT && h.type != PROTO_NODE_END) {
                json_decref(o);
                set_err_frame(err, "in a node stream", h.type);
                return -EBADMSG;
        }
        f.event = o;
        *ret = f;
        return 1;
}

int node_conn_wait(struct node_conn *c, int timeout_ms) {
        struct proto_header h;
        const uint8_t *payload;
        drop_pending(c);
        int r = proto_reader_next(&c->reader, &h, &payload);
        if (r != 0)
                return r < 0 ? r : 1; /* a whole frame is already buffered */
        return link_wait(&c->link, timeout_ms);
}

int node_call(const char *node_addr, unsigned timeout_s, const json_t *req, json_t **ret, char *err) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        int r = node_conn_open(node_addr, timeout_s, &c);
        if (r < 0) {
                set_err(err, "the node agent is not reachable");
                return r;
        }
        r = node_conn_send_request(c, req);
        if (r < 0) {
                set_err(err, "failed to send the request to the node agent");
                return r;
        }
        return node_conn_read_reply(c, ret, err);
}
