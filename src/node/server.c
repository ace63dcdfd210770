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
#include "nodeutil.h"
#include "unixsock.h"
#include "util.h"

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned conn_count;
static uint64_t conn_next_id;
static server_dispatch_fn dispatch;

void server_set_dispatch(server_dispatch_fn fn) {
        dispatch = fn;
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
        r = dispatch ? dispatch(c, json_string_value(op), req) : -EOPNOTSUPP;
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

        /* 0600 from bind() on: no window where others could connect */
        _cleanup_close_ int fd = -EBADF;
        int r = unix_listen(path, 0600, SOCK_NONBLOCK, 128, &fd);
        if (r < 0)
                return log_error_errno(r, "Failed to listen on %s: %m", path);
        /* the one group allowed in besides root: airlockd's, when it runs
         * unprivileged (airlock-nodemgr says which) */
        if (group != (gid_t) -1 && (chown(path, (uid_t) -1, group) < 0 || chmod(path, 0660) < 0))
                return log_error_errno(negative_errno(), "Failed to give %s to its group: %m", path);
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
