/* SPDX-License-Identifier: Apache-2.0 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "nodeops.h"
#include "nodeutil.h"
#include "util.h"

/* How long a client may take to send its request (and each upload frame). */
#define REQUEST_TIMEOUT_MS 60000

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned conn_count;
static uint64_t conn_next_id;

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

static void conn_handle(struct node_conn *c) {
        struct proto_header h;
        const uint8_t *payload;

        int r = conn_read_frame(c, -1, &h, &payload);
        if (r <= 0) {
                if (r < 0 && r != -ECONNRESET)
                        log_emit(LOG_LEVEL_DEBUG, c->ctx, "no request read: %s", strerror(-r));
                if (r == -EMSGSIZE || r == -EPROTONOSUPPORT)
                        conn_reply_error(c, r, "invalid", "bad frame header");
                return;
        }
        if (h.type != PROTO_NODE_REQUEST) {
                conn_reply_error(c, -EINVAL, "invalid", "expected a node-request frame, got %s",
                                 proto_type_name(h.type));
                return;
        }
        json_error_t jerr;
        json_t *req = json_loadb((const char *) payload, h.length, JSON_REJECT_DUPLICATES, &jerr);
        conn_pop_frame(c, &h);
        if (!req || !json_is_object(req)) {
                json_decref(req);
                conn_reply_error(c, -EINVAL, "invalid", "request is not a JSON object");
                return;
        }
        json_t *op = json_object_get(req, "op");
        if (!json_is_string(op)) {
                json_decref(req);
                conn_reply_error(c, -EINVAL, "invalid", "field \"op\" must be a string");
                return;
        }
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " op=%.40s", json_string_value(op));

        uint64_t t0 = now_monotonic_ns();
        r = nodeops_dispatch(c, json_string_value(op), req);
        if (r < 0 && !c->replied)
                conn_reply_errno(c, r, json_string_value(op));
        log_emit(LOG_LEVEL_DEBUG, c->ctx, "request done: r=%d ms=%llu", r,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        json_decref(req);
}

/* The TLS handshake of a cluster connection: the time a client may take. */
#define HANDSHAKE_TIMEOUT_MS 10000

struct conn_start {
        struct node_conn *c;
        int fd;
        struct mtls_ctx *tls;
};

static void *conn_thread(void *arg) {
        struct conn_start st = *(struct conn_start *) arg;
        free(arg);
        struct node_conn *c = st.c;
        int r = link_accept(st.fd, st.tls, HANDSHAKE_TIMEOUT_MS, &c->link);
        if (r < 0)
                log_emit(LOG_LEVEL_INFO, c->ctx, "TLS handshake failed: %s", strerror(-r));
        else {
                if (st.tls) {
                        enum mtls_role role;
                        const char *peer = link_peer(&c->link, &role);
                        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " peer=%s", peer);
                }
                /* a client that stops reading must not pin a thread forever */
                struct timeval sndto = { .tv_sec = 60 };
                setsockopt(c->link.fd, SOL_SOCKET, SO_SNDTIMEO, &sndto, sizeof sndto);
                conn_handle(c);
        }
        proto_reader_release(&c->reader);
        link_close(&c->link);
        free(c);
        pthread_mutex_lock(&conn_lock);
        conn_count--;
        pthread_mutex_unlock(&conn_lock);
        return NULL;
}

int server_listen(const char *path, gid_t group, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);

        /* the parent directory: private (or as airlock-nodemgr made it) */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                int r = mkdir_p(dir, 0700);
                if (r < 0)
                        return log_error_errno(r, "Failed to create %s: %m", dir);
        }

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error_errno(negative_errno(), "Failed to create socket: %m");
        if (unlink(path) < 0 && errno != ENOENT)
                return log_error_errno(negative_errno(), "Failed to remove stale socket %s: %m", path);
        /* umask makes the socket 0600 from the start: no window where others could connect */
        mode_t old = umask(0177);
        int r = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        int saved = errno;
        umask(old);
        if (r < 0)
                return log_error_errno(-saved, "Failed to bind %s: %m", path);
        /* the one group allowed in besides root: airlockd's, when it runs
         * unprivileged (airlock-nodemgr says which) */
        if (group != (gid_t) -1 && chown(path, (uid_t) -1, group) < 0)
                return log_error_errno(negative_errno(), "Failed to chown %s: %m", path);
        if (chmod(path, group != (gid_t) -1 ? 0660 : 0600) < 0)
                return log_error_errno(negative_errno(), "Failed to chmod %s: %m", path);
        if (listen(fd, 128) < 0)
                return log_error_errno(negative_errno(), "Failed to listen on %s: %m", path);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int server_listen_tcp(const char *addr, int *ret_fd) {
        struct link_addr a;
        char spec[LINK_ADDR_MAX];
        snprintf(spec, sizeof spec, "tls:%s", addr);
        int r = link_addr_parse(spec, &a);
        if (r < 0 || a.name[0])
                return log_error_errno(-EINVAL, "Bad cluster listen address '%s' (HOST:PORT)", addr);
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICHOST }, *res = NULL;
        char port[8];
        snprintf(port, sizeof port, "%u", a.port);
        int k = getaddrinfo(a.host, port, &hints, &res);
        if (k != 0)
                return log_error_errno(-EINVAL, "Bad cluster listen address '%s': %s", addr, gai_strerror(k));
        _cleanup_close_ int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
                r = negative_errno();
                freeaddrinfo(res);
                return log_error_errno(r, "Failed to listen on %s: %m", addr);
        }
        freeaddrinfo(res);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int server_accept(int listen_fd, struct mtls_ctx *tls, const struct node_config *cfg) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
                if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                        return 0;
                return log_warn_errno(negative_errno(), "accept failed: %m");
        }

        struct node_conn *c = calloc(1, sizeof *c);
        struct conn_start *st = malloc(sizeof *st);
        if (!c || !st || proto_reader_init(&c->reader) < 0) {
                free(c);
                free(st);
                close(fd);
                return -ENOMEM;
        }
        c->link = LINK_NULL;
        *st = (struct conn_start){ .c = c, .fd = fd, .tls = tls };

        pthread_mutex_lock(&conn_lock);
        bool full = conn_count >= cfg->max_connections;
        if (!full)
                conn_count++;
        c->id = ++conn_next_id;
        pthread_mutex_unlock(&conn_lock);
        snprintf(c->ctx, sizeof c->ctx, "conn=%llu", (unsigned long long) c->id);

        if (full) {
                if (!tls) {
                        /* a bounded refusal: the socket is blocking, but the reply is tiny */
                        c->link.fd = fd;
                        struct timeval tv = { .tv_sec = 1 };
                        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
                        conn_reply_error(c, -EAGAIN, "unavailable", "too many connections (%u)",
                                         cfg->max_connections);
                        link_close(&c->link);
                } else
                        close(fd); /* no handshake for it: the replica retries */
                proto_reader_release(&c->reader);
                free(c);
                free(st);
                return 0;
        }

        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 512 << 10);
        pthread_t t;
        int r = pthread_create(&t, &attr, conn_thread, st);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                pthread_mutex_lock(&conn_lock);
                conn_count--;
                pthread_mutex_unlock(&conn_lock);
                proto_reader_release(&c->reader);
                close(fd);
                free(c);
                free(st);
                return log_warn_errno(-r, "Failed to start connection thread: %m");
        }
        return 0;
}
