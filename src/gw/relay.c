/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's TCP connections (docs/network.md). Every one arrives on the
 * sandbox's listener (nftables redirected it there); its destination comes
 * from conntrack (SO_ORIGINAL_DST), its sandbox from the listener. Then:
 *
 *   - a policy that decides on addresses alone (allow-all or deny-all
 *     without host rules): the destination is checked (the platform deny
 *     set, cidr rules) and dialled, or the guest gets a reset;
 *   - otherwise the first bytes are read (bounded, with a deadline): a TLS
 *     ClientHello gives the SNI, an HTTP/1 request head gives Host; the name
 *     must be allowed for that port AND the gateway must have resolved it to
 *     that very address for this sandbox (no /etc/hosts or forged answer
 *     sends an allowed name elsewhere); TLS without SNI, ECH and anything
 *     that is neither TLS nor HTTP are judged by address (cidr rules) only.
 *     Plain HTTP is parsed for the whole connection: every request's Host
 *     must be the name allowed first (keep-alive), smuggling and CONNECT end
 *     it. The decided bytes are passed on untouched.
 *
 * Denied: a reset for TLS and raw TCP, a 403 naming the reason for HTTP;
 * either way at once, and into the sandbox's network log.
 */
#include "gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http1.h"
#include "log.h"
#include "macros.h"
#include "tlshello.h"
#include "vmnet.h"

#define RELAY_BUF (96u << 10)
#define SNIFF_TIMEOUT_MS 10000
#define CONNECT_TIMEOUT_MS 10000

enum conn_state {
        CONN_DNS, /* DNS over TCP to the gateway: one length-prefixed query */
        CONN_SNIFF,
        CONN_CONNECTING,
        CONN_RELAY,
};

struct buf {
        uint8_t *data;
        size_t off, len;
};

struct conn {
        struct gw_sandbox *sb;
        enum conn_state state;
        int g_fd, u_fd;
        struct loop_watch *g_watch, *u_watch;
        struct loop_timer *timer;
        struct sockaddr_in dst;
        char name[254];           /* the name the connection was allowed for; "" when by address */
        bool http;                /* plain HTTP: every request head is checked */
        struct http1_parser *hp;
        struct buf g2u, u2g;      /* guest -> upstream (the sniffed bytes first), and back */
        bool g_eof, u_eof;        /* read side ended */
        bool g_shut, u_shut;      /* write side shut after the other's EOF */
        struct conn *prev, *next; /* the sandbox's connections */
};

int gw_relay_init(void) {
        return tlshello_init();
}

static void conn_free(struct conn *c) {
        GW_LIST_UNLINK(c->sb->conns, c);
        loop_watch_remove(c->g_watch);
        loop_watch_remove(c->u_watch);
        loop_timer_cancel(c->timer);
        safe_close(c->g_fd);
        safe_close(c->u_fd);
        http1_parser_free(c->hp);
        free(c->g2u.data);
        free(c->u2g.data);
        gw_sandbox_conn_close(c->sb);
        free(c);
}

/* A reset, so the guest sees the refusal at once. */
static void reset_guest(struct conn *c) {
        gw_socket_reset_on_close(c->g_fd);
}

static void deny(struct conn *c, const char *name, const char *why) {
        gw_sandbox_log(c->sb, false, false, name, c->dst.sin_addr, ntohs(c->dst.sin_port), why);
        if (c->http) {
                char body[256], msg[512];
                int bl = snprintf(body, sizeof body, "airlock: egress to %s:%u denied: %s\n", name && *name ? name : "?",
                                  (unsigned) ntohs(c->dst.sin_port), why);
                int ml = snprintf(msg, sizeof msg,
                                  "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                                  "Connection: close\r\n\r\n%s",
                                  bl, body);
                (void) send(c->g_fd, msg, (size_t) ml, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else
                reset_guest(c);
        conn_free(c);
}

static void update_interest(struct conn *c);

static void unthrottle(void *userdata) {
        struct conn *c = userdata;
        c->timer = NULL;
        update_interest(c);
}

/* Whether a side may be read now; if not, a timer looks again when the
 * sandbox's bandwidth allows (the conn's timer is free while it relays). */
static bool may_read(struct conn *c, bool guest_side) {
        return gw_bandwidth_may_read(c->sb, guest_side, &c->timer, unthrottle, c);
}

static void update_interest(struct conn *c) {
        uint32_t g = 0, u = 0;
        if (c->state == CONN_RELAY) {
                if (!c->g_eof && c->g2u.len == 0 && may_read(c, true))
                        g |= EPOLLIN;
                if (c->u2g.len > 0)
                        g |= EPOLLOUT;
                if (!c->u_eof && c->u2g.len == 0 && may_read(c, false))
                        u |= EPOLLIN;
                if (c->g2u.len > 0)
                        u |= EPOLLOUT;
        } else if (c->state == CONN_CONNECTING)
                u = EPOLLOUT;
        else
                g = EPOLLIN;
        if (c->g_watch)
                (void) loop_watch_set(c->g_watch, g);
        if (c->u_watch)
                (void) loop_watch_set(c->u_watch, u);
}

/* Plain HTTP: every request head of the stream must name the host the
 * connection was allowed for. 0 to go on, < 0 to end the connection. */
static int check_http(struct conn *c, const uint8_t *data, size_t len) {
        while (c->hp) {
                size_t used = 0;
                struct http1_event ev;
                int r = http1_parser_feed(c->hp, data, len, &used, &ev);
                if (r < 0) {
                        gw_sandbox_log(c->sb, false, false, c->name, c->dst.sin_addr, ntohs(c->dst.sin_port),
                                       http1_parser_reason(c->hp) ?: "malformed HTTP request");
                        return r;
                }
                data += used;
                len -= used;
                if (ev.type == HTTP1_EV_HEAD) {
                        const struct http1_head *h = http1_parser_head(c->hp);
                        if (h->host_kind != HTTP1_HOST_NAME || strcmp(h->host, c->name) != 0) {
                                gw_sandbox_log(c->sb, false, false, h->host, c->dst.sin_addr,
                                               ntohs(c->dst.sin_port),
                                               "Host changed on a kept-alive connection");
                                return -EPERM;
                        }
                        if (h->upgrade != HTTP1_UPGRADE_NONE) {
                                gw_sandbox_log(c->sb, false, false, h->host, c->dst.sin_addr,
                                               ntohs(c->dst.sin_port), "protocol upgrades are not allowed");
                                return -EPERM;
                        }
                } else if (ev.type == HTTP1_EV_NEED_MORE)
                        return 0;
        }
        return 0;
}

static void relay_io(struct conn *c, bool guest_side, uint32_t events) {
        int from = guest_side ? c->g_fd : c->u_fd;
        struct buf *in = guest_side ? &c->g2u : &c->u2g;  /* what from sends */
        struct buf *out = guest_side ? &c->u2g : &c->g2u; /* what from receives */
        bool *from_eof = guest_side ? &c->g_eof : &c->u_eof;
        size_t allowed = gw_bandwidth_allow(c->sb, guest_side, RELAY_BUF);
        if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !*from_eof && in->len == 0 && allowed > 0) {
                ssize_t n = read(from, in->data, allowed);
                if (n > 0) {
                        gw_bandwidth_take(c->sb, guest_side, (size_t) n);
                        in->off = 0;
                        in->len = (size_t) n;
                        if (guest_side && c->http && check_http(c, in->data, in->len) < 0) {
                                reset_guest(c);
                                conn_free(c);
                                return;
                        }
                } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                        if (n < 0) { /* a reset: pass it on */
                                conn_free(c);
                                return;
                        }
                        *from_eof = true;
                }
        }
        if ((events & EPOLLOUT) && out->len > 0) {
                ssize_t n = send(from, out->data + out->off, out->len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n > 0) {
                        out->off += (size_t) n;
                        out->len -= (size_t) n;
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                        conn_free(c);
                        return;
                }
        }
        /* the other side's EOF goes on once its bytes are out */
        if (c->g_eof && c->g2u.len == 0 && !c->u_shut) {
                (void) shutdown(c->u_fd, SHUT_WR);
                c->u_shut = true;
        }
        if (c->u_eof && c->u2g.len == 0 && !c->g_shut) {
                (void) shutdown(c->g_fd, SHUT_WR);
                c->g_shut = true;
        }
        if (c->g_shut && c->u_shut) {
                conn_free(c);
                return;
        }
        update_interest(c);
}

static void guest_event(int fd, uint32_t events, void *userdata);
static void upstream_event(int fd, uint32_t events, void *userdata);

static void decide_addr(struct conn *c);

static void timeout(void *userdata) {
        struct conn *c = userdata;
        c->timer = NULL;
        /* the guest said nothing: a protocol where the server speaks first
         * (SSH, SMTP), decided by address like any raw TCP; but a head begun
         * and never finished is no way around a name rule */
        if (c->state == CONN_SNIFF && c->g2u.len == 0) {
                decide_addr(c);
                return;
        }
        deny(c, c->name, c->state == CONN_CONNECTING ? "the destination did not answer" : "no request within 10 s");
}

static void start_connect(struct conn *c) {
        gw_sandbox_log(c->sb, false, true, c->name, c->dst.sin_addr, ntohs(c->dst.sin_port),
                       c->name[0] ? "allowed by name" : "allowed by address");
        loop_timer_cancel(c->timer);
        c->timer = NULL;
        c->u_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int r = c->u_fd < 0 ? negative_errno() : 0;
        if (r >= 0 && connect(c->u_fd, (struct sockaddr *) &c->dst, sizeof c->dst) < 0 && errno != EINPROGRESS)
                r = negative_errno();
        if (r >= 0) { /* a relay adds no delay of its own: what comes is sent */
                int one = 1;
                (void) setsockopt(c->u_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (r >= 0)
                r = loop_watch_add(c->sb->gw->loop, c->u_fd, EPOLLOUT, upstream_event, c, &c->u_watch);
        if (r >= 0)
                r = loop_timer_add(c->sb->gw->loop, CONNECT_TIMEOUT_MS, timeout, c, &c->timer);
        if (r < 0) {
                reset_guest(c);
                conn_free(c);
                return;
        }
        c->state = CONN_CONNECTING;
        update_interest(c);
}

/* deny() for what the policy (or the platform deny set) decided: also an
 * audit event, which the control plane turns into sandbox.policy_denied. */
static void policy_deny(struct conn *c, const char *name, const char *why) {
        char a[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &c->dst.sin_addr, a, sizeof a);
        gw_audit_denied(c->sb, name && *name ? name : a, ntohs(c->dst.sin_port), why);
        deny(c, name, why);
}

/* Decides by address: no name, or a policy with no host rules. */
static void decide_addr(struct conn *c) {
        struct in6_addr a = gw_addr_v4(c->dst.sin_addr);
        struct netpolicy_decision d;
        if (!netpolicy_check_addr(c->sb->policy, &c->sb->gw->config.platform, &a, ntohs(c->dst.sin_port), &d)) {
                char why[NETPOLICY_DECISION_STRING_MAX];
                (void) netpolicy_decision_format(&d, why, sizeof why);
                policy_deny(c, c->name, why);
                return;
        }
        start_connect(c);
}

/* Hands a TLS connection allowed by name to tlsterm.c, with the
 * ClientHello it sent. */
static void terminate(struct conn *c) {
        struct gw_sandbox *s = c->sb;
        int fd = TAKE_FD(c->g_fd);
        struct sockaddr_in dst = c->dst;
        char name[sizeof c->name];
        snprintf(name, sizeof name, "%s", c->name);
        loop_watch_remove(c->g_watch);
        c->g_watch = NULL;
        gw_sandbox_ref(s);
        /* the hello outlives the conn: copied */
        size_t len = c->g2u.len;
        uint8_t hello[TLSHELLO_BUF_MAX];
        memcpy(hello, c->g2u.data, MIN(len, sizeof hello));
        conn_free(c);
        if (gw_tlsterm_start(s, fd, &dst, name, hello, MIN(len, sizeof hello)) < 0)
                gw_sandbox_log(s, false, false, name, dst.sin_addr, ntohs(dst.sin_port), "cannot terminate its TLS");
        gw_sandbox_unref(s);
}

static void decide_name(struct conn *c, const char *name, bool tls) {
        snprintf(c->name, sizeof c->name, "%s", name);
        struct in6_addr a = gw_addr_v4(c->dst.sin_addr);
        enum netpolicy_reason pr;
        if (netpolicy_platform_denied(&c->sb->gw->config.platform, &a, &pr)) {
                policy_deny(c, name, netpolicy_reason_to_string(pr));
                return;
        }
        struct netpolicy_decision d;
        if (!netpolicy_check_name(c->sb->policy, name, ntohs(c->dst.sin_port), &d)) {
                char why[NETPOLICY_DECISION_STRING_MAX];
                (void) netpolicy_decision_format(&d, why, sizeof why);
                policy_deny(c, name, why);
                return;
        }
        /* allowed by a rule (not merely by allow-all): the address must be
         * one the gateway resolved the name to for this sandbox */
        bool by_rule = netpolicy_mode(c->sb->policy) == NETPOLICY_ALLOWLIST;
        if (by_rule && !gw_sandbox_bound(c->sb, name, c->dst.sin_addr)) {
                policy_deny(c, name,
                            "the gateway did not resolve the name to that address for this sandbox");
                return;
        }
        /* TLS is terminated where its name decided (so Host can be checked
         * against it inside) or a credential may go in; else passed through */
        if (tls && (by_rule || gw_secrets_for_host(c->sb, name, ntohs(c->dst.sin_port)))) {
                terminate(c);
                return;
        }
        start_connect(c);
}

static void sniff(struct conn *c) {
        struct buf *b = &c->g2u;
        ssize_t n = read(c->g_fd, b->data + b->len, TLSHELLO_BUF_MAX - b->len);
        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                conn_free(c); /* gone before it said anything */
                return;
        }
        b->len += (size_t) n;
        if (b->data[0] == 0x16) { /* a TLS handshake record */
                struct tlshello h;
                int r = tlshello_sniff(b->data, b->len, &h);
                if (r == TLSHELLO_NEED_MORE)
                        return;
                if (r == TLSHELLO_BAD || r < 0) {
                        deny(c, "", r < 0 ? "cannot read the ClientHello" : h.reason);
                        return;
                }
                if (r == TLSHELLO_OK) {
                        if (h.ech || h.esni) {
                                deny(c, h.sni, "encrypted ClientHello (ECH/ESNI) hides the name");
                                return;
                        }
                        if (h.has_sni)
                                decide_name(c, h.sni, true);
                        else
                                decide_addr(c); /* no name: cidr rules alone */
                        return;
                }
        }
        /* HTTP/1? */
        c->hp = http1_parser_new();
        if (!c->hp) {
                reset_guest(c);
                conn_free(c);
                return;
        }
        size_t used;
        struct http1_event ev;
        int r = http1_parser_feed(c->hp, b->data, b->len, &used, &ev);
        if (r >= 0 && ev.type == HTTP1_EV_HEAD) {
                const struct http1_head *h = http1_parser_head(c->hp);
                c->http = true;
                if (h->host_kind != HTTP1_HOST_NAME) {
                        deny(c, h->host, "a Host that is an address: only cidr rules decide addresses");
                        return;
                }
                if (h->upgrade != HTTP1_UPGRADE_NONE) {
                        deny(c, h->host, "protocol upgrades are not allowed");
                        return;
                }
                /* the parser starts over on the whole stream in relay
                 * (h lives in the parser: the name is copied first) */
                snprintf(c->name, sizeof c->name, "%s", h->host);
                c->hp = http1_parser_free(c->hp);
                c->hp = http1_parser_new();
                if (!c->hp || check_http(c, b->data, b->len) < 0) {
                        reset_guest(c);
                        conn_free(c);
                        return;
                }
                char name[254];
                snprintf(name, sizeof name, "%s", c->name);
                decide_name(c, name, false);
                return;
        }
        if (r >= 0 && ev.type == HTTP1_EV_NEED_MORE) {
                c->hp = http1_parser_free(c->hp);
                if (b->len < TLSHELLO_BUF_MAX)
                        return; /* maybe more of a head */
                c->http = true; /* fail closed: a name was due and none came */
                deny(c, "", "no complete request head in the first 16 KiB");
                return;
        }
        /* neither TLS nor HTTP (or a refused request): by address */
        bool looked_http = r < 0 && http1_parser_status(c->hp) != 400;
        const char *why = r < 0 ? http1_parser_reason(c->hp) : NULL;
        c->hp = http1_parser_free(c->hp);
        if (looked_http) {
                c->http = true;
                deny(c, "", why ?: "refused HTTP request");
                return;
        }
        decide_addr(c);
}

/* DNS over TCP (a truncated answer's retry): the query is read here, the
 * resolver (dns.c) takes the connection. */
static void dns_read(struct conn *c) {
        struct buf *b = &c->g2u;
        ssize_t n = read(c->g_fd, b->data + b->len, 2 + 1232 - b->len);
        if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                conn_free(c);
                return;
        }
        b->len += (size_t) n;
        if (b->len < 2)
                return;
        size_t want = (size_t) b->data[0] << 8 | b->data[1];
        if (want == 0 || want > 1232) {
                reset_guest(c);
                conn_free(c);
                return;
        }
        if (b->len < 2 + want)
                return;
        struct gw_sandbox *s = c->sb;
        int fd = TAKE_FD(c->g_fd);
        uint8_t msg[1232];
        memcpy(msg, b->data + 2, want);
        loop_watch_remove(c->g_watch);
        c->g_watch = NULL;
        gw_sandbox_ref(s);
        conn_free(c);
        gw_dns_tcp(s, fd, msg, want);
        gw_sandbox_unref(s);
}

static void guest_event(int fd, uint32_t events, void *userdata) {
        struct conn *c = userdata;
        if (c->state == CONN_DNS)
                dns_read(c);
        else if (c->state == CONN_SNIFF)
                sniff(c);
        else if (c->state == CONN_RELAY)
                relay_io(c, true, events);
        else if (events & (EPOLLHUP | EPOLLERR))
                conn_free(c);
}

static void upstream_event(int fd, uint32_t events, void *userdata) {
        struct conn *c = userdata;
        if (c->state == CONN_CONNECTING) {
                int err = 0;
                socklen_t l = sizeof err;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err != 0) {
                        gw_sandbox_log(c->sb, false, false, c->name, c->dst.sin_addr, ntohs(c->dst.sin_port),
                                       err == ECONNREFUSED ? "the destination refused the connection"
                                                           : "the destination cannot be reached");
                        reset_guest(c);
                        conn_free(c);
                        return;
                }
                loop_timer_cancel(c->timer);
                c->timer = NULL;
                c->state = CONN_RELAY;
                c->g2u.off = 0; /* the sniffed bytes go first */
                update_interest(c);
                return;
        }
        relay_io(c, false, events);
}

void gw_relay_close_all(struct gw_sandbox *s) {
        gw_tlsterm_close_all(s);
        while (s->conns) {
                reset_guest(s->conns);
                conn_free(s->conns);
        }
}

void gw_relay_accept(int fd, uint32_t events, void *userdata) {
        struct gw_sandbox *s = userdata;
        for (int i = 0; i < 16; i++) {
                int g = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (g < 0)
                        return;
                struct sockaddr_in dst;
                socklen_t dl = sizeof dst;
                if (s->n_conns >= GW_CONNS_MAX || getsockopt(g, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) < 0 ||
                    dst.sin_family != AF_INET) {
                        gw_socket_reset_on_close(g);
                        close(g);
                        continue;
                }
                struct conn *c = calloc(1, sizeof *c);
                uint8_t *b1 = malloc(RELAY_BUF), *b2 = malloc(RELAY_BUF);
                if (!c || !b1 || !b2) {
                        free(c);
                        free(b1);
                        free(b2);
                        close(g);
                        continue;
                }
                *c = (struct conn){ .sb = s, .g_fd = g, .u_fd = -1, .dst = dst, .g2u.data = b1, .u2g.data = b2 };
                gw_sandbox_conn_open(s);
                GW_LIST_PUSH(s->conns, c);
                int one = 1;
                (void) setsockopt(g, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                if (loop_watch_add(s->gw->loop, g, EPOLLIN, guest_event, c, &c->g_watch) < 0) {
                        conn_free(c);
                        continue;
                }
                struct in_addr gw_addr;
                (void) inet_pton(AF_INET, VMNET_GATEWAY_ADDR, &gw_addr);
                if (dst.sin_addr.s_addr == gw_addr.s_addr && ntohs(dst.sin_port) == VMNET_DNS_PORT) {
                        c->state = CONN_DNS;
                        if (loop_timer_add(s->gw->loop, SNIFF_TIMEOUT_MS, timeout, c, &c->timer) < 0)
                                conn_free(c);
                        continue;
                }
                if (dst.sin_addr.s_addr == gw_addr.s_addr) {
                        /* its resolver is all of the gateway a guest may reach
                         * (its listener too: nothing is read from it first) */
                        deny(c, "", "the gateway's own address");
                        continue;
                }
                if (!netpolicy_needs_names(s->policy) && netpolicy_mode(s->policy) != NETPOLICY_ALLOWLIST &&
                    !gw_secrets_on_port(s, ntohs(dst.sin_port))) { /* a credential's TLS is read for its name */
                        decide_addr(c); /* allow-all or deny-all: the address decides */
                        continue;
                }
                /* a cidr rule admits any protocol: nothing to read first */
                struct in6_addr a6 = gw_addr_v4(dst.sin_addr);
                struct netpolicy_decision d;
                if (netpolicy_check_addr(s->policy, &s->gw->config.platform, &a6, ntohs(dst.sin_port), &d) &&
                    d.reason == NETPOLICY_REASON_ALLOW_RULE) {
                        start_connect(c);
                        continue;
                }
                c->state = CONN_SNIFF;
                if (loop_timer_add(s->gw->loop, SNIFF_TIMEOUT_MS, timeout, c, &c->timer) < 0)
                        conn_free(c);
        }
}
