/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The guest's resolver (docs/network.md, EGRESS.md D1-D13). A query is
 * parsed (dnsmsg.h); a name the policy does not allow is refused here and
 * nothing goes upstream (no tunnel through queries); an allowed A query
 * goes upstream as a fresh query on a socket of its own, connected to the
 * resolver (only its answers arrive there; the id and question must match
 * too); the answer's addresses in the platform deny set are dropped (no
 * rebinding to internal addresses) and the rest are remembered as this
 * sandbox's bindings of the name, which TCP decisions by name require. AAAA
 * gets an empty answer (sandboxes have no IPv6), other types too.
 */
#include "gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dnsmsg.h"
#include "log.h"
#include "macros.h"

#define DNS_TIMEOUT_MS 5000
#define DNS_BUF 1232
#define DNS_TTL_CAP_S 300

/* Who asked: a UDP datagram's sender, or a TCP connection (one query,
 * answered with its length prefix, then closed). */
struct peer {
        struct sockaddr_in udp;
        int tcp_fd; /* -1 for UDP */
};

struct pending {
        struct gw_sandbox *sb;
        int fd;
        struct loop_watch *watch;
        struct loop_timer *timer;
        struct peer guest;
        struct dnsmsg_query q;
        uint16_t id;
};

static void reply_raw(struct gw_sandbox *s, struct peer *to, const uint8_t *buf, size_t len) {
        if (to->tcp_fd >= 0) {
                uint8_t msg[2 + DNS_BUF];
                msg[0] = (uint8_t) (len >> 8);
                msg[1] = (uint8_t) len;
                memcpy(msg + 2, buf, MIN(len, (size_t) DNS_BUF));
                (void) send(to->tcp_fd, msg, 2 + MIN(len, (size_t) DNS_BUF), MSG_DONTWAIT | MSG_NOSIGNAL);
                to->tcp_fd = safe_close(to->tcp_fd);
        } else if (s->dns_fd >= 0)
                (void) sendto(s->dns_fd, buf, len, MSG_DONTWAIT, (const struct sockaddr *) &to->udp, sizeof to->udp);
}

static void reply_rcode(struct gw_sandbox *s, struct peer *to, const struct dnsmsg_query *q, int rcode) {
        uint8_t out[DNS_BUF];
        size_t len;
        if (dnsmsg_reply_rcode(q, rcode, out, sizeof out, &len) >= 0)
                reply_raw(s, to, out, len);
}

static size_t reply_size(const struct peer *to, const struct dnsmsg_query *q) {
        return to->tcp_fd >= 0 ? DNS_BUF : dnsmsg_query_udp_size(q);
}

static void pending_free(struct pending *p) {
        safe_close(p->guest.tcp_fd);
        loop_watch_remove(p->watch);
        loop_timer_cancel(p->timer);
        safe_close(p->fd);
        p->sb->n_pending--;
        gw_sandbox_unref(p->sb);
        free(p);
}

static void pending_timeout(void *userdata) {
        struct pending *p = userdata;
        p->timer = NULL;
        if (!p->sb->detached)
                reply_rcode(p->sb, &p->guest, &p->q, DNSMSG_RCODE_SERVFAIL);
        gw_sandbox_log(p->sb, true, false, p->q.name, (struct in_addr){ 0 }, 53, "the upstream resolver did not answer");
        pending_free(p);
}

static void upstream_readable(int fd, uint32_t events, void *userdata) {
        struct pending *p = userdata;
        uint8_t buf[DNS_BUF];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        struct dnsmsg_answer a;
        int r = n > 0 ? dnsmsg_response_parse(buf, (size_t) n, &p->q, p->id, &a) : -EIO;
        if (r == -ESTALE)
                return; /* not the answer to what was sent: wait for it */
        if (p->sb->detached) {
                pending_free(p);
                return;
        }
        if (r < 0) {
                reply_rcode(p->sb, &p->guest, &p->q, DNSMSG_RCODE_SERVFAIL);
                gw_sandbox_log(p->sb, true, false, p->q.name, (struct in_addr){ 0 }, 53,
                               "the upstream's answer was malformed");
                pending_free(p);
                return;
        }
        /* a chain through a name the policy denies (a deny rule, not merely
         * no allow rule: CDNs answer through names nobody lists) leads
         * there: nothing of it is kept */
        for (size_t i = 0; i < a.n_cname; i++) {
                struct netpolicy_decision d;
                if (!netpolicy_check_name(p->sb->policy, a.cname[i], 0, &d) && d.reason != NETPOLICY_REASON_NO_MATCH) {
                        char why[GWNAME_MAX + 64];
                        snprintf(why, sizeof why, "the answer's CNAME chain passes the denied name %s", a.cname[i]);
                        gw_sandbox_log(p->sb, true, false, p->q.name, (struct in_addr){ 0 }, 53, why);
                        gw_audit_denied(p->sb, p->q.name, 53, why);
                        a.n_addr = 0;
                        a.n_cname = 0;
                        break;
                }
        }
        /* keep what may be dialled; remember it as this sandbox's */
        size_t kept = 0;
        unsigned dropped = 0;
        for (size_t i = 0; i < a.n_addr; i++) {
                if (a.addr[i].family != AF_INET) {
                        dropped++;
                        continue;
                }
                struct in6_addr m = gw_addr_v4(a.addr[i].v4);
                if (netpolicy_platform_denied(&p->sb->gw->config.platform, &m, NULL)) {
                        dropped++;
                        continue;
                }
                gw_sandbox_bind(p->sb, p->q.name, a.addr[i].v4, a.addr[i].ttl);
                a.addr[kept++] = a.addr[i];
        }
        a.n_addr = kept;
        if (dropped)
                gw_sandbox_log(p->sb, true, false, p->q.name, (struct in_addr){ 0 }, 53,
                               "answer addresses in the platform deny set dropped");
        uint8_t out[DNS_BUF];
        size_t len;
        if (dnsmsg_reply_build(&p->q, &a, DNS_TTL_CAP_S, out, reply_size(&p->guest, &p->q), &len) >= 0)
                reply_raw(p->sb, &p->guest, out, len);
        pending_free(p);
}

/* Rate limit: a token bucket per sandbox. */
static bool take_token(struct gw_sandbox *s) {
        uint64_t now = loop_now_ms();
        s->dns_tokens = MIN(2.0 * GW_DNS_QPS, s->dns_tokens + (double) (now - s->dns_tokens_at) * GW_DNS_QPS / 1000.0);
        s->dns_tokens_at = now;
        if (s->dns_tokens < 1.0)
                return false;
        s->dns_tokens -= 1.0;
        return true;
}

static void resolve(struct gw_sandbox *s, struct peer *guest, const struct dnsmsg_query *q) {
        if (s->n_pending >= GW_DNS_PENDING_MAX) {
                reply_rcode(s, guest, q, DNSMSG_RCODE_REFUSED);
                return;
        }
        struct pending *p = calloc(1, sizeof *p);
        if (!p)
                return;
        p->fd = -1;
        p->q = *q;
        p->guest = *guest;
        guest->tcp_fd = -1; /* the pending query's now */
        p->sb = s;
        gw_sandbox_ref(s);
        s->n_pending++;
        uint8_t out[DNS_BUF];
        size_t len;
        int r = getrandom(&p->id, sizeof p->id, 0) == sizeof p->id ? 0 : -EIO;
        if (r >= 0)
                r = dnsmsg_query_build(q, p->id, out, sizeof out, &len);
        if (r >= 0 && (p->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
                r = negative_errno();
        if (r >= 0 && connect(p->fd, (const struct sockaddr *) &s->gw->config.dns_upstream, sizeof s->gw->config.dns_upstream) < 0)
                r = negative_errno();
        if (r >= 0 && send(p->fd, out, len, 0) != (ssize_t) len)
                r = -EIO;
        if (r >= 0)
                r = loop_watch_add(s->gw->loop, p->fd, EPOLLIN, upstream_readable, p, &p->watch);
        if (r >= 0)
                r = loop_timer_add(s->gw->loop, DNS_TIMEOUT_MS, pending_timeout, p, &p->timer);
        if (r < 0) {
                log_warn_errno(r, "sandbox=%s cannot ask the upstream resolver: %m", s->id);
                reply_rcode(s, &p->guest, q, DNSMSG_RCODE_SERVFAIL);
                pending_free(p);
        }
}

/* One query from the guest: answered here, or sent upstream. */
static void query(struct gw_sandbox *s, struct peer *from, const uint8_t *buf, size_t n) {
        struct dnsmsg_query q;
        int r = dnsmsg_query_parse(buf, n, &q);
        if (r < 0)
                return;
        if (!take_token(s)) {
                reply_rcode(s, from, &q, DNSMSG_RCODE_REFUSED);
                return;
        }
        if (r > 0) {
                reply_rcode(s, from, &q, r);
                gw_sandbox_log(s, true, false, q.name, (struct in_addr){ 0 }, 53, q.reason ?: "refused");
                return;
        }
        struct netpolicy_decision d;
        if (!netpolicy_check_name(s->policy, q.name, 0, &d)) {
                char why[NETPOLICY_DECISION_STRING_MAX];
                (void) netpolicy_decision_format(&d, why, sizeof why);
                /* answered here; nothing about the name leaves the machine */
                reply_rcode(s, from, &q, DNSMSG_RCODE_REFUSED);
                gw_sandbox_log(s, true, false, q.name, (struct in_addr){ 0 }, 53, why);
                gw_audit_denied(s, q.name, 53, why);
                return;
        }
        if (q.qtype != DNSMSG_TYPE_A) {
                reply_rcode(s, from, &q, DNSMSG_RCODE_NOERROR); /* no IPv6, no other records */
                return;
        }
        resolve(s, from, &q);
}

void gw_dns_tcp(struct gw_sandbox *s, int fd, const uint8_t *msg, size_t len) {
        struct peer p = { .tcp_fd = fd };
        query(s, &p, msg, len);
        safe_close(p.tcp_fd); /* unanswered (malformed): closed */
}

void gw_dns_readable(int fd, uint32_t events, void *userdata) {
        struct gw_sandbox *s = userdata;
        /* a few per wakeup: one sandbox cannot starve the others */
        for (int i = 0; i < 16; i++) {
                uint8_t buf[DNS_BUF];
                struct peer from = { .tcp_fd = -1 };
                socklen_t fl = sizeof from.udp;
                ssize_t n = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *) &from.udp, &fl);
                if (n < 0)
                        return;
                if (fl != sizeof from.udp || from.udp.sin_family != AF_INET)
                        continue;
                query(s, &from, buf, (size_t) n);
        }
}
