/* SPDX-License-Identifier: Apache-2.0 */
#include "portproxy.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cap.h"
#include "conn.h"
#include "httpresp.h"
#include "log.h"
#include "nodeops-req.h"
#include "nodeutil.h"
#include "sandbox.h"
#include "util.h"

#define PORT_CONNECT_MS 5000
/* no byte either way for this long ends the request */
#define PORT_IDLE_MS 60000
#define METHOD_MAX 16
#define TARGET_MAX 8192
#define HEADER_NAME_MAX 256
#define HEADER_VALUE_MAX 8192
#define HEADERS_MAX 100
#define REQUEST_HEAD_MAX (64u << 10)

/* ---- the request as airlockd sent it: checked again, the guest gets only well-formed bytes ---- */

static bool tchar(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               strchr("!#$%&'*+-.^_`|~", c);
}

static bool token_valid(const char *s, size_t max) {
        size_t n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!tchar((unsigned char) s[i]))
                        return false;
        return true;
}

/* An origin-form target: "/" then visible ASCII, no '#'. */
static bool target_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > TARGET_MAX || s[0] != '/')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] <= 0x20 || (unsigned char) s[i] >= 0x7f || s[i] == '#')
                        return false;
        return true;
}

/* A field value: visible characters, spaces and tabs inside, none of CR,
 * LF, NUL or other controls. */
static bool value_valid(const char *s, size_t n) {
        if (n > HEADER_VALUE_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return false;
        }
        return true;
}

/* Builds the request head into *ret; a reason in why on a bad field. */
static int request_head(json_t *req, uint16_t port, const char **ret_method, bool *ret_chunked, char **ret,
                        size_t *ret_len, const char **why) {
        const char *method = json_string_value(json_object_get(req, "method"));
        const char *target = json_string_value(json_object_get(req, "target"));
        json_t *headers = json_object_get(req, "headers"), *length = json_object_get(req, "length");
        if (!method || !token_valid(method, METHOD_MAX)) {
                *why = "\"method\" must be an HTTP method token";
                return -EINVAL;
        }
        if (!target || !target_valid(target)) {
                *why = "\"target\" must be a path (and query) of visible ASCII, at most 8192 bytes";
                return -EINVAL;
        }
        if (!json_is_array(headers) || json_array_size(headers) > HEADERS_MAX) {
                *why = "\"headers\" must be an array of at most 100 [name, value] pairs";
                return -EINVAL;
        }
        if (!json_is_integer(length) || json_integer_value(length) < -1) {
                *why = "\"length\" must be the body's size, or -1 when unknown";
                return -EINVAL;
        }
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return -ENOMEM;
        fprintf(f, "%s %s HTTP/1.1\r\n", method, target);
        bool host = false;
        size_t i;
        json_t *h;
        json_array_foreach(headers, i, h) {
                const char *name = json_string_value(json_array_get(h, 0));
                json_t *v = json_array_get(h, 1);
                if (json_array_size(h) != 2 || !name || !token_valid(name, HEADER_NAME_MAX) || !json_is_string(v) ||
                    !value_valid(json_string_value(v), json_string_length(v))) {
                        fclose(f);
                        *why = "a header is not a [name, value] pair of a token and a field value";
                        return -EINVAL;
                }
                /* framing and hops are this connection's: the node sets them */
                if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
                    strcasecmp(name, "connection") == 0 || strcasecmp(name, "upgrade") == 0 ||
                    strcasecmp(name, "te") == 0 || strcasecmp(name, "keep-alive") == 0)
                        continue;
                host |= strcasecmp(name, "host") == 0;
                fprintf(f, "%s: %s\r\n", name, json_string_value(v));
        }
        if (!host)
                fprintf(f, "Host: localhost:%u\r\n", (unsigned) port);
        json_int_t n = json_integer_value(length);
        if (n >= 0)
                fprintf(f, "Content-Length: %lld\r\n", (long long) n);
        else
                fprintf(f, "Transfer-Encoding: chunked\r\n");
        fprintf(f, "Connection: close\r\n\r\n");
        if (fclose(f) != 0)
                return -ENOMEM;
        if (len > REQUEST_HEAD_MAX) {
                *why = "the request head is larger than 64 KiB";
                return -E2BIG;
        }
        *ret_method = method;
        *ret_chunked = n < 0;
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* ---- the guest's socket ---- */

/* Waits for fd to be ready for events; -ETIMEDOUT after timeout_ms. */
static int wait_fd(int fd, short events, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = events };
        for (;;) {
                int r = poll(&p, 1, timeout_ms);
                if (r > 0)
                        return 0;
                if (r == 0)
                        return -ETIMEDOUT;
                if (errno != EINTR)
                        return negative_errno();
        }
}

static int send_all(int fd, const void *data, size_t len) {
        const uint8_t *p = data;
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return negative_errno();
                        int r = wait_fd(fd, POLLOUT, PORT_IDLE_MS);
                        if (r < 0)
                                return r;
                        continue;
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

static int connect_wait(int fd) {
        int r = wait_fd(fd, POLLOUT, PORT_CONNECT_MS);
        if (r < 0)
                return r;
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                return negative_errno();
        return -err;
}

/* ---- the response, passed on as it comes ---- */

struct relay {
        struct node_conn *c;
        bool replied;
};

static int relay_head(void *userdata, unsigned status, json_t *headers, int64_t length) {
        struct relay *x = userdata;
        json_t *o = json_pack("{s:i, s:O}", "status", (int) status, "headers", headers);
        if (o && length >= 0)
                json_object_set_new(o, "length", json_integer(length));
        x->replied = true;
        return conn_reply_ok(x->c, o);
}

static int relay_body(void *userdata, const uint8_t *data, size_t len) {
        struct relay *x = userdata;
        for (size_t off = 0; off < len;) {
                size_t n = MIN(len - off, (size_t) PROTO_DATA_CHUNK);
                int r = conn_send_data(x->c, data + off, n);
                if (r < 0)
                        return r;
                off += n;
        }
        return 0;
}

static const struct httpresp_events relay_events = { .head = relay_head, .body = relay_body };

/* A failure after the head went out ends the stream with "abort". */
static int fail_stream(struct relay *x, int r, const char *code, const char *what, uint16_t port) {
        if (x->replied) {
                log_emit(LOG_LEVEL_WARN, x->c->ctx, "port %u: %s", (unsigned) port, what);
                (void) conn_send_end(x->c, json_pack("{s:b}", "abort", 1));
                return r;
        }
        return conn_reply_error(x->c, r, code, "port %u: %s", (unsigned) port, what);
}

/* The client's body: NODE_DATA frames up to NODE_END, into the guest
 * (chunked when its size is unknown). Once the guest stopped reading, the
 * rest is read and dropped, so its response can still be passed on. */
static int forward_body(struct node_conn *c, int fd, bool chunked, bool *ret_aborted) {
        bool guest_gone = false;
        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                int r = conn_read_frame(c, PORT_IDLE_MS, &h, &payload);
                if (r <= 0)
                        return r == 0 ? -ECONNRESET : r;
                if (h.type == PROTO_NODE_END) {
                        json_t *end = json_loadb((const char *) payload, h.length, 0, NULL);
                        *ret_aborted = json_is_true(json_object_get(end, "abort"));
                        json_decref(end);
                        conn_pop_frame(c, &h);
                        if (chunked && !guest_gone && !*ret_aborted)
                                (void) send_all(fd, "0\r\n\r\n", 5);
                        return 0;
                }
                if (h.type != PROTO_NODE_DATA) {
                        conn_pop_frame(c, &h);
                        return -EBADMSG;
                }
                if (!guest_gone && h.length > 0) {
                        char size[24];
                        int k = snprintf(size, sizeof size, "%x\r\n", (unsigned) h.length);
                        r = chunked ? send_all(fd, size, (size_t) k) : 0;
                        if (r >= 0)
                                r = send_all(fd, payload, h.length);
                        if (r >= 0 && chunked)
                                r = send_all(fd, "\r\n", 2);
                        guest_gone = r < 0;
                }
                conn_pop_frame(c, &h);
        }
}

static int relay_response(struct relay *x, int fd, const char *method, uint16_t port) {
        _cleanup_(httpresp_freep) struct httpresp *p = NULL;
        int r = httpresp_new(method, &relay_events, x, &p);
        if (r < 0)
                return r;
        uint8_t buf[64 << 10];
        for (;;) {
                r = wait_fd(fd, POLLIN, PORT_IDLE_MS);
                if (r == -ETIMEDOUT)
                        return fail_stream(x, r, "timeout", "the server sent nothing for 60 s", port);
                if (r < 0)
                        return fail_stream(x, r, "bad_gateway", "cannot read from the server", port);
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0)
                        n = 0; /* a reset: like a close, the parser says whether the response was whole */
                const char *why;
                r = httpresp_feed(p, buf, (size_t) n, &why);
                if (r == 1)
                        return conn_send_end(x->c, NULL);
                if (r < 0 && x->c->broken)
                        return r; /* the client is gone */
                if (r < 0) {
                        char msg[256];
                        snprintf(msg, sizeof msg, "the server's response is not usable: %s", why);
                        return fail_stream(x, r == -ENOMEM ? r : -ENETUNREACH, "bad_gateway", msg, port);
                }
        }
}

int portproxy_http(struct node_conn *c, json_t *req) {
        json_t *pv = json_object_get(req, "port");
        if (!json_is_integer(pv) || json_integer_value(pv) < 1 || json_integer_value(pv) > UINT16_MAX)
                return conn_reply_error(c, -EINVAL, "invalid", "\"port\" must be 1..65535");
        uint16_t port = (uint16_t) json_integer_value(pv);
        const char *method, *why = "";
        bool chunked;
        _cleanup_free_ char *head = NULL;
        size_t head_len;
        int r = request_head(req, port, &method, &chunked, &head, &head_len, &why);
        if (r < 0)
                return conn_reply_error(c, r, r == -E2BIG ? "too_large" : "invalid", "%s", why);
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if ((r = nodeops_req_sandbox(c, req, CAP_ACCESS_PORTS, port, &s, NULL)) < 0)
                return r;

        struct relay x = { .c = c };
        _cleanup_close_ int fd = -1;
        r = sandbox_port_connect(s, port, &fd);
        if (r == -ESRCH)
                return conn_reply_error(c, -EBUSY, "conflict", "sandbox %s has no running VM", s->id);
        if (r < 0)
                return conn_reply_error(c, -EIO, "internal", "cannot reach the sandbox's network: %s", strerror(-r));
        r = connect_wait(fd);
        if (r == -ECONNREFUSED)
                return conn_reply_error(c, -ENETUNREACH, "bad_gateway", "nothing listens on port %u in the sandbox",
                                        (unsigned) port);
        if (r == -ETIMEDOUT)
                return conn_reply_error(c, r, "timeout", "port %u in the sandbox did not answer in 5 s",
                                        (unsigned) port);
        if (r < 0)
                return conn_reply_error(c, -ENETUNREACH, "bad_gateway", "cannot connect to port %u in the sandbox: %s",
                                        (unsigned) port, strerror(-r));
        bool aborted = false;
        r = send_all(fd, head, head_len);
        int body = forward_body(c, fd, chunked, &aborted);
        if (body < 0)
                return conn_reply_error(c, body, "invalid", "reading the request body failed: %s", strerror(-body));
        if (aborted)
                return conn_reply_error(c, -ECANCELED, "invalid", "the request was aborted by the client");
        /* (no half-close: some servers end the connection on it) */
        return relay_response(&x, fd, method, port);
}
