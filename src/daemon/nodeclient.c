/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeclient.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "apierror.h"
#include "util.h"


int node_conn_set_timeout(struct node_conn *c, unsigned timeout_s) {
        struct timeval tv = { .tv_sec = timeout_s ? timeout_s : 1 };
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
            setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
                return negative_errno();
        return 0;
}

int node_conn_open(const char *socket_path, unsigned timeout_s, struct node_conn **ret) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(socket_path);
        if (n == 0 || n >= sizeof sa.sun_path)
                return -EINVAL;
        memcpy(sa.sun_path, socket_path, n + 1);

        struct node_conn *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
                int r = negative_errno();
                free(c);
                return r;
        }
        int r = proto_reader_init(&c->reader);
        if (r >= 0)
                r = node_conn_set_timeout(c, timeout_s);
        if (r >= 0 && connect(c->fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                /* missing socket, refused, permission: the node is not there for us */
                r = -EHOSTDOWN;
        if (r < 0) {
                node_conn_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

void node_conn_free(struct node_conn *c) {
        if (!c)
                return;
        if (c->fd >= 0)
                close(c->fd);
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
        if (len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;
        return io_errno(proto_write_frame(c->fd, PROTO_NODE_REQUEST, 0, s, len));
}

int node_conn_send_data(struct node_conn *c, const void *data, size_t len) {
        const uint8_t *p = data;
        while (len > 0) {
                size_t k = MIN(len, (size_t) PROTO_DATA_CHUNK);
                int r = proto_write_frame(c->fd, PROTO_NODE_DATA, 0, p, k);
                if (r < 0)
                        return io_errno(r);
                p += k;
                len -= k;
        }
        return 0;
}

int node_conn_send_end(struct node_conn *c, bool abort) {
        const char *body = abort ? "{\"abort\":true}" : "{}";
        return io_errno(proto_write_frame(c->fd, PROTO_NODE_END, 0, body, strlen(body)));
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
        int r = proto_reader_read(&c->reader, c->fd, h, payload);
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
        int r = proto_reader_read(&c->reader, c->fd, &h, &payload);
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
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        r = poll(&pfd, 1, timeout_ms);
        if (r < 0)
                return errno == EINTR ? 0 : negative_errno();
        return r > 0 ? 1 : 0;
}

int node_call(const char *socket_path, unsigned timeout_s, const json_t *req, json_t **ret, char *err) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        int r = node_conn_open(socket_path, timeout_s, &c);
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
