/* SPDX-License-Identifier: Apache-2.0 */
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macros.h"
#include "unixsock.h"
#include "util.h"

int link_addr_parse(const char *s, struct link_addr *ret) {
        struct link_addr a = { 0 };
        if (!s)
                return -EINVAL;
        if (strncmp(s, "unix:", 5) == 0 || s[0] == '/') {
                const char *p = s[0] == '/' ? s : s + 5;
                if (p[0] != '/' || strlen(p) >= sizeof a.path)
                        return -EINVAL;
                memcpy(a.path, p, strlen(p) + 1);
                *ret = a;
                return 0;
        }
        if (strncmp(s, "tls:", 4) != 0)
                return -EINVAL;
        a.tls = true;
        const char *p = s + 4, *at = strchr(p, '@');
        if (at) {
                size_t n = (size_t) (at - p);
                if (n == 0 || n > MTLS_NAME_MAX)
                        return -EINVAL;
                memcpy(a.name, p, n);
                a.name[n] = 0;
                if (!mtls_name_valid(a.name))
                        return -EINVAL;
                p = at + 1;
        }
        const char *colon;
        if (p[0] == '[') {
                const char *end = strchr(p, ']');
                if (!end || end[1] != ':' || end - p - 1 <= 0 || (size_t) (end - p - 1) >= sizeof a.host)
                        return -EINVAL;
                memcpy(a.host, p + 1, (size_t) (end - p - 1));
                colon = end + 1;
        } else {
                colon = strrchr(p, ':');
                if (!colon || colon == p || (size_t) (colon - p) >= sizeof a.host)
                        return -EINVAL;
                memcpy(a.host, p, (size_t) (colon - p));
                if (strchr(a.host, ':') || strchr(a.host, '@'))
                        return -EINVAL;
        }
        uint64_t port;
        if (parse_u64(colon + 1, 65535, &port) < 0 || port == 0)
                return -EINVAL;
        a.port = (uint16_t) port;
        *ret = a;
        return 0;
}

void link_close(struct link *l) {
        if (l->tls)
                mtls_conn_free(l->tls); /* closes the fd */
        else if (l->fd >= 0)
                close(l->fd);
        *l = LINK_NULL;
}

int link_set_timeout(struct link *l, int timeout_ms) {
        if (l->tls)
                return mtls_conn_set_timeout(l->tls, timeout_ms);
        struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
        if (setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
            setsockopt(l->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
                return negative_errno();
        return 0;
}

static int connect_unix(const struct link_addr *a, int timeout_ms, struct link *ret) {
        struct link l = LINK_NULL;
        int r = unix_connect(a->path, timeout_ms, &l.fd);
        if (r < 0)
                return r == -ENOENT || r == -ECONNREFUSED ? -EHOSTDOWN : r;
        *ret = l;
        return 0;
}

/* A TCP connection to one address within the deadline. */
static int connect_tcp_one(const struct addrinfo *ai, uint64_t deadline) {
        _cleanup_close_ int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                if (errno != EINPROGRESS)
                        return negative_errno();
                uint64_t now = now_monotonic_ns();
                struct pollfd p = { .fd = fd, .events = POLLOUT };
                int k = now >= deadline ? 0 : poll(&p, 1, (int) ((deadline - now + 999999) / 1000000));
                if (k == 0)
                        return -ETIMEDOUT;
                if (k < 0)
                        return negative_errno();
                int err = 0;
                socklen_t n = sizeof err;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0)
                        return negative_errno();
                if (err)
                        return -err;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
                return negative_errno();
        /* frames are small requests and replies: send them at once */
        int one = 1;
        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return TAKE_FD(fd);
}

static int connect_tls(const struct link_addr *a, struct mtls_ctx *tls, int timeout_ms, struct link *ret) {
        if (!tls)
                return -ENOTCONN;
        uint64_t deadline = now_monotonic_ns() + (uint64_t) timeout_ms * 1000000ULL;
        char port[8];
        snprintf(port, sizeof port, "%u", a->port);
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG }, *res = NULL;
        int k = getaddrinfo(a->host, port, &hints, &res);
        if (k != 0)
                return k == EAI_SYSTEM ? negative_errno() : -EHOSTDOWN;
        int fd = -EHOSTDOWN;
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                fd = connect_tcp_one(ai, deadline);
                if (fd >= 0 || fd == -ETIMEDOUT)
                        break;
        }
        freeaddrinfo(res);
        if (fd < 0)
                return fd == -ECONNREFUSED || fd == -ENETUNREACH || fd == -EHOSTUNREACH ? -EHOSTDOWN : fd;
        uint64_t now = now_monotonic_ns();
        int left = now >= deadline ? 1 : (int) ((deadline - now + 999999) / 1000000);
        struct mtls_conn *c = NULL;
        int r = mtls_connect(tls, fd, a->name[0] ? a->name : NULL, left, &c);
        if (r < 0)
                return r;
        /* the handshake's deadline was what was left; reads get the whole */
        if ((r = mtls_conn_set_timeout(c, timeout_ms)) < 0) {
                mtls_conn_free(c);
                return r;
        }
        *ret = (struct link){ .fd = mtls_conn_fd(c), .tls = c };
        return 0;
}

int link_connect(const char *addr, struct mtls_ctx *tls, int timeout_ms, struct link *ret) {
        struct link_addr a;
        int r = link_addr_parse(addr, &a);
        if (r < 0)
                return r;
        return a.tls ? connect_tls(&a, tls, timeout_ms, ret) : connect_unix(&a, timeout_ms, ret);
}

int link_accept(int fd, struct mtls_ctx *tls, int timeout_ms, struct link *ret) {
        if (!tls) {
                *ret = (struct link){ .fd = fd, .tls = NULL };
                return 0;
        }
        int one = 1;
        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct mtls_conn *c = NULL;
        int r = mtls_accept(tls, fd, timeout_ms, &c);
        if (r < 0)
                return r;
        *ret = (struct link){ .fd = mtls_conn_fd(c), .tls = c };
        return 0;
}

int link_write_frame(struct link *l, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        if (!l->tls)
                return proto_write_frame(l->fd, type, stream, payload, len);
        uint8_t hdr[PROTO_HEADER_SIZE];
        int r = proto_frame_header(type, stream, len, hdr);
        if (r < 0)
                return r;
        /* small frames in one TLS record */
        if (len <= 16 << 10) {
                uint8_t buf[PROTO_HEADER_SIZE + (16 << 10)];
                memcpy(buf, hdr, sizeof hdr);
                if (len)
                        memcpy(buf + sizeof hdr, payload, len);
                return mtls_write_all(l->tls, buf, sizeof hdr + len);
        }
        if ((r = mtls_write_all(l->tls, hdr, sizeof hdr)) < 0)
                return r;
        return mtls_write_all(l->tls, payload, len);
}

static ssize_t tls_read(void *ctx, void *buf, size_t n) {
        return mtls_read(ctx, buf, n);
}

int link_fill(struct link *l, struct proto_reader *r) {
        if (!l->tls)
                return proto_reader_fill(r, l->fd);
        return proto_reader_fill_with(r, tls_read, l->tls);
}

int link_read_frame(struct link *l, struct proto_reader *r, struct proto_header *ret_h, const uint8_t **ret_payload) {
        for (;;) {
                int k = proto_reader_next(r, ret_h, ret_payload);
                if (k != 0)
                        return k;
                k = link_fill(l, r);
                if (k <= 0)
                        return k;
        }
}

bool link_pending(const struct link *l) {
        return l->tls && mtls_pending(l->tls);
}

int link_wait(struct link *l, int timeout_ms) {
        if (link_pending(l))
                return 1;
        struct pollfd p = { .fd = l->fd, .events = POLLIN };
        int k = poll(&p, 1, timeout_ms);
        if (k < 0)
                return errno == EINTR ? 0 : negative_errno();
        return k > 0;
}

bool link_hung_up(struct link *l) {
        if (l->tls)
                return mtls_peer_closed(l->tls);
        struct pollfd p = { .fd = l->fd, .events = POLLIN | POLLRDHUP };
        if (poll(&p, 1, 0) <= 0)
                return false;
        if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
                return true;
        if (p.revents & POLLIN) {
                char b;
                return recv(l->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
        }
        return false;
}

const char *link_peer(const struct link *l, enum mtls_role *ret_role) {
        if (!l->tls) {
                if (ret_role)
                        *ret_role = (enum mtls_role) - 1;
                return "";
        }
        return mtls_conn_peer(l->tls, ret_role);
}
