/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Terminated TLS (docs/network.md, "TLS"): where a name decides (an
 * allowlist's host rules) or a credential applies, the gateway is the
 * guest's TLS server, with a certificate for the exact name the guest
 * asked for (ca.c), and the upstream's TLS client, verifying its
 * certificate for that name (the system's trust store and
 * AIRLOCK_UPSTREAM_CA) before a byte is forwarded. In between, every
 * request is parsed (http1.c): its Host must be the TLS name (no fronting
 * inside the tunnel), upgrades are refused, its head is re-serialised with
 * the credential bound to that host, method and path (the guest's own
 * header of that name dropped), and its body re-framed. Responses go back
 * as they are, with every credential value in them overwritten. A guest
 * that offers h2 in ALPN speaks HTTP/2 to the gateway (h2front.c): each
 * stream becomes one such HTTP/1.1 request upstream, decided the same way.
 *
 * OpenSSL works on BIO pairs, never on the sockets: the loop moves bytes
 * between the sockets and the pairs' network ends, so one pump drives both
 * handshakes and both directions without blocking, and every buffer is
 * bounded (the pairs' sizes, the plaintext buffers).
 */
#include "gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ca.h"
#include "credset.h"
#include "h2front.h"
#include "http1.h"
#include "log.h"
#include "macros.h"

/* per connection: 2 pairs of 2 x PAIR_BUF, 3 x PLAIN_BUF (320 KiB) */
#define PAIR_BUF (32u << 10)  /* ciphertext buffered per direction and side */
#define PLAIN_BUF (64u << 10) /* plaintext buffered per direction */
/* free space needed before feeding a head: HTTP1_HEAD_MAX and a credential */
#define HEAD_ROOM (28u << 10)
#define HANDSHAKE_TIMEOUT_MS 10000
#define REDACT_HOLD_MS 100

struct pbuf {
        uint8_t *data;
        size_t off, len; /* data[off..off+len) is pending */
};

struct term {
        struct gw_sandbox *sb;
        int g_fd, u_fd;
        struct loop_watch *g_watch, *u_watch;
        struct loop_timer *timer;    /* the handshakes' deadline */
        struct loop_timer *throttle; /* bandwidth: when to read again */
        struct loop_timer *release_timer; /* redaction: when a held tail goes anyway */
        bool release_held;
        struct sockaddr_in dst;
        char name[254];
        SSL *g_ssl, *u_ssl;
        BIO *g_net, *u_net; /* the network ends of the BIO pairs */
        bool u_connected, g_hs, u_hs;
        bool g_sock_eof, u_sock_eof; /* the TCP peers closed */
        bool g_done, u_done;         /* no more plaintext from that side */
        bool g_closed, u_closed;     /* our close_notify sent */
        bool refused;                /* a refusal is on its way to the guest: nothing more is read */
        int refusal_status;          /* the last refusal: for an HTTP/2 front that starts after it */
        char refusal_why[200];
        struct http1_parser *hp;
        struct h2front *h2;  /* the guest speaks HTTP/2 (ALPN h2); NULL: HTTP/1.x */
        bool h2_up_ended;    /* h2: the upstream's end was told to the front */
        bool chunked;        /* the current request's body */
        struct pbuf gp;      /* guest plaintext not yet parsed */
        struct pbuf up;      /* to the upstream, re-serialised */
        struct pbuf down;    /* to the guest */
        size_t down_scanned; /* redaction: bytes of down already checked */
        struct term *prev, *next;
};

static SSL_CTX *guest_ctx, *upstream_ctx;

static bool alpn_find(const unsigned char *in, unsigned inlen, const char *proto, const unsigned char **out,
                      unsigned char *outlen) {
        size_t pl = strlen(proto);
        for (unsigned i = 0; i < inlen;) {
                unsigned l = in[i];
                if (i + 1 + l > inlen)
                        break;
                if (l == pl && memcmp(in + i + 1, proto, pl) == 0) {
                        *out = in + i + 1;
                        *outlen = (unsigned char) l;
                        return true;
                }
                i += 1 + l;
        }
        return false;
}

/* h2 when the guest offers it (the front turns it into HTTP/1.1), else
 * http/1.1; a guest that offers neither speaks HTTP/1.x without ALPN. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg) {
        if (alpn_find(in, inlen, "h2", out, outlen) || alpn_find(in, inlen, "http/1.1", out, outlen))
                return SSL_TLSEXT_ERR_OK;
        return SSL_TLSEXT_ERR_NOACK;
}

/* The operator's extra CAs (AIRLOCK_UPSTREAM_CA, opened by airlock-nodemgr). */
static int add_upstream_cas(int fd) {
        FILE *f = fdopen(fd, "re");
        if (!f)
                return negative_errno();
        STACK_OF(X509_INFO) *infos = PEM_X509_INFO_read(f, NULL, NULL, NULL);
        fclose(f);
        X509_STORE *store = SSL_CTX_get_cert_store(upstream_ctx);
        int n = 0;
        for (int i = 0; infos && i < sk_X509_INFO_num(infos); i++) {
                X509_INFO *x = sk_X509_INFO_value(infos, i);
                if (x->x509 && X509_STORE_add_cert(store, x->x509) == 1)
                        n++;
        }
        sk_X509_INFO_pop_free(infos, X509_INFO_free);
        if (n == 0)
                return log_error_errno(-EINVAL, "AIRLOCK_UPSTREAM_CA holds no certificate");
        log_info("upstream TLS also trusts %d certificate(s) of AIRLOCK_UPSTREAM_CA", n);
        return 0;
}

int gw_tlsterm_init(const char *ca_dir, int upstream_ca_fd) {
        int r = gw_ca_open(ca_dir);
        if (r < 0)
                return r;
        guest_ctx = SSL_CTX_new(TLS_server_method());
        upstream_ctx = SSL_CTX_new(TLS_client_method());
        if (!guest_ctx || !upstream_ctx)
                return -ENOMEM;
        SSL_CTX_set_min_proto_version(guest_ctx, TLS1_2_VERSION);
        SSL_CTX_set_min_proto_version(upstream_ctx, TLS1_2_VERSION);
        SSL_CTX_set_max_early_data(guest_ctx, 0); /* no 0-RTT: replayable data is never accepted */
        SSL_CTX_set_alpn_select_cb(guest_ctx, alpn_select, NULL);
        SSL_CTX_set_verify(upstream_ctx, SSL_VERIFY_PEER, NULL);
        if (SSL_CTX_set_default_verify_paths(upstream_ctx) != 1)
                log_warn("cannot load the system's trust store for upstream TLS");
        if (upstream_ca_fd >= 0 && (r = add_upstream_cas(upstream_ca_fd)) < 0)
                return r;
        static const unsigned char alpn[] = "\x08http/1.1";
        SSL_CTX_set_alpn_protos(upstream_ctx, alpn, sizeof alpn - 1);
        return 0;
}

static void term_free(struct term *t) {
        GW_LIST_UNLINK(t->sb->terms, t);
        loop_watch_remove(t->g_watch);
        loop_watch_remove(t->u_watch);
        loop_timer_cancel(t->timer);
        loop_timer_cancel(t->throttle);
        loop_timer_cancel(t->release_timer);
        safe_close(t->g_fd);
        safe_close(t->u_fd);
        SSL_free(t->g_ssl); /* frees its end of the pair */
        SSL_free(t->u_ssl);
        BIO_free(t->g_net);
        BIO_free(t->u_net);
        http1_parser_free(t->hp);
        h2front_free(t->h2);
        free(t->gp.data);
        free(t->up.data);
        free(t->down.data);
        gw_sandbox_conn_close(t->sb);
        free(t);
}

static void reset(struct term *t) {
        gw_socket_reset_on_close(t->g_fd);
        term_free(t);
}

static size_t room(const struct pbuf *b) {
        return PLAIN_BUF - b->off - b->len;
}

/* Makes the free space contiguous at the end. */
static void compact(struct pbuf *b) {
        if (b->off > 0) {
                memmove(b->data, b->data + b->off, b->len);
                b->off = 0;
        }
}

static void put(struct pbuf *b, const void *p, size_t n) {
        compact(b);
        memcpy(b->data + b->len, p, n); /* callers checked room() */
        b->len += n;
}

static const char *status_text(int status) {
        switch (status) {
        case 400: return "Bad Request";
        case 403: return "Forbidden";
        case 405: return "Method Not Allowed";
        case 414: return "URI Too Long";
        case 431: return "Request Header Fields Too Large";
        case 505: return "HTTP Version Not Supported";
        default: return "Bad Gateway";
        }
}

/* Refuses what the guest asked, inside its TLS session when it has one:
 * a 403 (or 502 for an upstream at fault) naming the reason, then the end. */
static void refuse_quietly(struct term *t, int status, const char *host, const char *why) {
        t->refusal_status = status;
        snprintf(t->refusal_why, sizeof t->refusal_why, "%s", why);
        if (t->h2) { /* only the upstream fails this way once HTTP/2 is spoken */
                h2front_upstream_failed(t->h2, status, why);
                return;
        }
        t->refused = true;
        t->up.len = 0;
        t->down.len = 0;
        t->down.off = 0;
        t->down_scanned = 0;
        char body[384], msg[640];
        int bl = snprintf(body, sizeof body, "airlock: egress to %s:%u refused: %s\n",
                          host && *host ? host : t->name, (unsigned) ntohs(t->dst.sin_port), why);
        int ml = snprintf(msg, sizeof msg,
                          "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: "
                          "close\r\n\r\n%s",
                          status, status_text(status), bl, body);
        put(&t->down, msg, (size_t) ml);
        t->u_done = true; /* nothing more comes from there */
}

static void refuse(struct term *t, int status, const char *host, const char *why) {
        gw_sandbox_log(t->sb, false, false, host && *host ? host : t->name, t->dst.sin_addr,
                       ntohs(t->dst.sin_port), why);
        refuse_quietly(t, status, host, why);
}

static void pump(struct term *t);
static void update_interest(struct term *t);

/* The longest credential text that must not reach the guest. */
static size_t redact_span(const struct term *t) {
        size_t m = 0;
        for (size_t i = 0; i < t->sb->n_secrets; i++) {
                const struct gw_secret *s = &t->sb->secrets[i];
                m = MAX(m, s->value_len);
                if (s->encoded)
                        m = MAX(m, strlen(s->encoded));
        }
        return m;
}

static void overwrite_all(uint8_t *p, size_t n, const char *needle, size_t nl) {
        if (nl == 0 || nl > n)
                return;
        for (uint8_t *at = p; (at = memmem(at, (size_t) (p + n - at), needle, nl)); at += nl)
                memset(at, '*', nl);
}

/* The longest suffix of p[0..n), shorter than needle, that needle begins
 * with: where a value split across reads may have begun. */
static size_t partial_tail(const uint8_t *p, size_t n, const char *needle, size_t nl) {
        for (size_t i = n - MIN(n, nl - 1); i < n; i++)
                if (p[i] == (uint8_t) needle[0] && memcmp(p + i, needle, n - i) == 0)
                        return n - i;
        return 0;
}

static void release(void *userdata) {
        struct term *t = userdata;
        t->release_timer = NULL;
        t->release_held = true;
        pump(t);
}

/* Overwrites every credential value in p[0..n), also one split across
 * reads (scanned: the bytes looked at before): a tail that may begin a
 * value is held back until more comes, the response ends (final), or
 * REDACT_HOLD_MS pass without more (a kept-alive response may end in
 * bytes that only look like a value's start). Returns how many bytes of p
 * may go to the guest. */
static size_t redact_bytes(struct term *t, uint8_t *p, size_t n, size_t scanned, bool final) {
        size_t span = redact_span(t);
        if (span == 0)
                return n;
        size_t from = scanned >= span - 1 ? scanned - (span - 1) : 0, hold = 0;
        for (size_t i = 0; i < t->sb->n_secrets; i++) {
                const struct gw_secret *s = &t->sb->secrets[i];
                const char *texts[2] = { s->value, s->encoded };
                for (size_t j = 0; j < 2 && texts[j]; j++) {
                        size_t nl = strlen(texts[j]);
                        overwrite_all(p + from, n - from, texts[j], nl);
                        hold = MAX(hold, partial_tail(p, n, texts[j], nl));
                }
        }
        if (final || t->release_held || hold == 0) {
                t->release_held = false;
                return n;
        }
        if (!t->release_timer)
                (void) loop_timer_add(t->sb->gw->loop, REDACT_HOLD_MS, release, t, &t->release_timer);
        return n - hold;
}

/* HTTP/1.x: the upstream's bytes in down, as they go. */
static size_t redact(struct term *t) {
        if (t->refused)
                return t->down.len;
        size_t may = redact_bytes(t, t->down.data + t->down.off, t->down.len, t->down_scanned, t->u_done);
        t->down_scanned = t->down.len;
        return may;
}

/* One request of the guest (an HTTP/1.x head, or an HTTP/2 stream's):
 * decided, logged when refused, then re-serialised into up. Returns 0, or
 * the HTTP status to refuse with and *why. */
static int decide(struct term *t, const struct http1_head *h, const char **why) {
        uint16_t port = ntohs(t->dst.sin_port);
        const char *refusal = NULL;
        if (h->host_kind != HTTP1_HOST_NAME || strcmp(h->host, t->name) != 0)
                refusal = t->h2 ? ":authority differs from the TLS name (domain fronting)"
                                : "the Host header differs from the TLS name (domain fronting)";
        else if (h->port != 0 && h->port != port)
                refusal = t->h2 ? ":authority names another port" : "the Host header names another port";
        else if (h->upgrade != HTTP1_UPGRADE_NONE)
                refusal = "protocol upgrades are not allowed";
        if (refusal) {
                gw_sandbox_log(t->sb, false, false, h->host, t->dst.sin_addr, port, refusal);
                *why = refusal;
                return 403;
        }
        /* where a credential is scoped to paths, the path the origin will
         * read decides, and is what goes on: "/api/%2e%2e/admin" is
         * "/admin"; what origins read two ways ("/api/..%2fadmin") is
         * refused here */
        struct http1_head as_sent = *h;
        char canon[HTTP1_TARGET_MAX + 1];
        if (gw_secrets_path_scoped(t->sb, t->name, port)) {
                const char *bad = NULL;
                size_t len = strlen(h->path);
                if (h->absolute_form)
                        bad = "an absolute-form request target where a credential is scoped to paths";
                else if (len >= sizeof canon)
                        bad = "the request target is too long";
                else
                        (void) credset_path_canonical(h->path, len, canon, sizeof canon, &bad);
                if (bad) {
                        gw_sandbox_log(t->sb, false, false, h->host, t->dst.sin_addr, port, bad);
                        *why = bad;
                        return 400;
                }
                as_sent.path = canon;
                h = &as_sent;
        }
        struct http1_extra_header add[1];
        size_t n_add = 0;
        const char *drop[GW_SECRETS_MAX];
        size_t n_drop = 0;
        /* the guest's own header of a credential bound here never passes:
         * only the gateway puts one in */
        for (size_t i = 0; i < t->sb->n_secrets; i++)
                if (gw_secret_binds(&t->sb->secrets[i], t->name, port))
                        drop[n_drop++] = t->sb->secrets[i].header;
        *why = NULL;
        struct gw_secret *s = gw_secrets_pick(t->sb, t->name, port, h->method, h->path, why);
        if (!s && *why) {
                gw_sandbox_log(t->sb, false, false, h->host, t->dst.sin_addr, port, *why);
                return 403;
        }
        if (s) {
                add[n_add++] = (struct http1_extra_header){s->header, s->header_value};
                gw_audit(t->sb, s, t->name, port, h->method, h->path, true, "injected");
        }
        compact(&t->up);
        size_t len;
        int r = http1_head_serialize(h, add, n_add, drop, n_drop, (char *) t->up.data + t->up.len,
                                     room(&t->up), &len);
        if (r < 0) {
                *why = "the request head cannot be passed on";
                gw_sandbox_log(t->sb, false, false, h->host, t->dst.sin_addr, port, *why);
                return 403;
        }
        t->up.len += len;
        return 0;
}

/* An HTTP/1.x request head: decided, or refused with the connection's end. */
static int on_head(struct term *t) {
        const struct http1_head *h = http1_parser_head(t->hp);
        const char *why = NULL;
        int status = decide(t, h, &why);
        if (status != 0) {
                refuse_quietly(t, status, h->host, why);
                return -EPERM;
        }
        t->chunked = h->body == HTTP1_BODY_CHUNKED;
        return 0;
}

/* Feeds guest plaintext to the parser while up has room. */
static bool parse_guest(struct term *t) {
        bool progress = false;
        while (!t->refused && room(&t->up) >= HEAD_ROOM) {
                size_t give = MIN(t->gp.len, room(&t->up) - HEAD_ROOM / 2);
                size_t used = 0;
                struct http1_event ev;
                int r = http1_parser_feed(t->hp, t->gp.data + t->gp.off, give, &used, &ev);
                if (r < 0) {
                        refuse(t, http1_parser_status(t->hp) ?: 400, t->name,
                               http1_parser_reason(t->hp) ?: "malformed HTTP request");
                        return true;
                }
                t->gp.off += used;
                t->gp.len -= used;
                if (used)
                        progress = true;
                if (ev.type == HTTP1_EV_NEED_MORE)
                        break;
                progress = true;
                if (ev.type == HTTP1_EV_HEAD) {
                        if (on_head(t) < 0)
                                return true;
                } else if (ev.type == HTTP1_EV_BODY) {
                        if (t->chunked) {
                                char ch[HTTP1_CHUNK_HEADER_MAX];
                                put(&t->up, ch, http1_chunk_header(ev.len, ch));
                                put(&t->up, ev.data, ev.len);
                                put(&t->up, "\r\n", 2);
                        } else
                                put(&t->up, ev.data, ev.len);
                } else if (ev.type == HTTP1_EV_END && t->chunked) {
                        put(&t->up, HTTP1_CHUNK_LAST, strlen(HTTP1_CHUNK_LAST));
                        t->chunked = false;
                }
        }
        if (t->gp.len == 0)
                t->gp.off = 0;
        return progress;
}

/* Socket -> the pair's network end, as the sandbox's bandwidth allows
 * (up: the guest's socket). */
static bool net_in(struct term *t, bool up, int fd, BIO *net, bool *eof) {
        bool progress = false;
        while (!*eof) {
                char *p;
                ssize_t space = BIO_nwrite0(net, &p);
                size_t allowed = space > 0 ? gw_bandwidth_allow(t->sb, up, (size_t) space) : 0;
                if (allowed == 0)
                        break;
                ssize_t n = read(fd, p, allowed);
                if (n > 0) {
                        gw_bandwidth_take(t->sb, up, (size_t) n);
                        BIO_nwrite(net, &p, (int) n);
                        progress = true;
                        continue;
                }
                if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                        *eof = true;
                        BIO_shutdown_wr(net);
                        progress = true;
                }
                break;
        }
        return progress;
}

/* The pair's network end -> socket. -1 when the socket is broken. */
static int net_out(int fd, BIO *net) {
        int progress = 0;
        for (;;) {
                char *p;
                ssize_t avail = BIO_nread0(net, &p);
                if (avail <= 0)
                        break;
                ssize_t n = send(fd, p, (size_t) avail, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0)
                        return errno == EAGAIN || errno == EINTR ? progress : -1;
                BIO_nread(net, &p, (int) n);
                progress = 1;
        }
        return progress;
}

/* SSL_read into b. Returns whether anything moved; *done on the peer's end. */
static bool ssl_in(SSL *ssl, struct pbuf *b, bool *done, bool *failed) {
        compact(b);
        size_t space = room(b);
        if (space == 0 || *done)
                return false;
        size_t n = 0;
        int r = SSL_read_ex(ssl, b->data + b->len, space, &n);
        if (r == 1) {
                b->len += n;
                return true;
        }
        int e = SSL_get_error(ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                return false;
        *done = true;
        if (e != SSL_ERROR_ZERO_RETURN)
                *failed = true; /* a truncation or an error: the other side hears of it as an end too */
        return true;
}

static bool ssl_out(SSL *ssl, struct pbuf *b, size_t limit, bool *failed) {
        if (limit == 0)
                return false;
        size_t n = 0;
        int r = SSL_write_ex(ssl, b->data + b->off, limit, &n);
        if (r == 1) {
                b->off += n;
                b->len -= n;
                if (b->len == 0)
                        b->off = 0;
                return true;
        }
        int e = SSL_get_error(ssl, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                *failed = true;
        return false;
}

static const char *upstream_failure(struct term *t) {
        long v = SSL_get_verify_result(t->u_ssl);
        if (v != X509_V_OK)
                return X509_verify_cert_error_string(v);
        return "the TLS handshake with the destination failed";
}

/* --- HTTP/2 (h2front.c): the front's view of this connection --- */

static int h2_head(void *userdata, const struct http1_head *h, const char **why) {
        return decide(userdata, h, why);
}

static int h2_up_write(void *userdata, const void *data, size_t len) {
        struct term *t = userdata;
        if (len > PLAIN_BUF - t->up.len)
                return -ENOBUFS;
        put(&t->up, data, len);
        return 0;
}

static size_t h2_up_room(void *userdata) {
        struct term *t = userdata;
        return PLAIN_BUF - t->up.len;
}

static size_t h2_redact(void *userdata, uint8_t *data, size_t len, size_t scanned, bool final) {
        return redact_bytes(userdata, data, len, scanned, final);
}

static const struct h2front_ops h2_ops = {
        .head = h2_head,
        .up_write = h2_up_write,
        .up_room = h2_up_room,
        .redact = h2_redact,
};

/* The guest's handshake is done: if it chose h2, the front takes over its
 * plaintext (and hears of an upstream that failed before). */
static int h2_start(struct term *t) {
        const unsigned char *proto = NULL;
        unsigned len = 0;
        SSL_get0_alpn_selected(t->g_ssl, &proto, &len);
        if (len != 2 || memcmp(proto, "h2", 2) != 0)
                return 0;
        int r = h2front_new(&h2_ops, t, &t->h2);
        if (r < 0)
                return r;
        if (t->refused) { /* the upstream's handshake failed: the refusal is said in HTTP/2 */
                t->refused = false;
                t->down.off = t->down.len = 0;
                h2front_upstream_failed(t->h2, t->refusal_status, t->refusal_why);
                t->h2_up_ended = true; /* told: its first request hears why, then GOAWAY */
        }
        return 0;
}

/* Guest plaintext into the front while up has room. */
static bool h2_guest(struct term *t, bool *failed) {
        bool progress = false;
        while (t->gp.len > 0 && h2_up_room(t) >= H2FRONT_UP_ROOM) {
                size_t used = 0;
                const char *why = NULL;
                if (h2front_recv(t->h2, t->gp.data + t->gp.off, t->gp.len, &used, &why) < 0) {
                        char msg[160];
                        snprintf(msg, sizeof msg, "HTTP/2: %s", why ? why : "broken");
                        gw_sandbox_log(t->sb, false, false, t->name, t->dst.sin_addr, ntohs(t->dst.sin_port),
                                       msg);
                        *failed = true;
                        return true;
                }
                if (used == 0)
                        break;
                t->gp.off += used;
                t->gp.len -= used;
                progress = true;
        }
        if (t->gp.len == 0)
                t->gp.off = 0;
        return progress;
}

/* Upstream plaintext into the front, as much as it takes. */
static bool h2_upstream(struct term *t) {
        bool progress = false;
        uint8_t buf[16u << 10];
        size_t want;
        while (!t->u_done && (want = h2front_upstream_room(t->h2)) > 0) {
                size_t n = 0;
                int r = SSL_read_ex(t->u_ssl, buf, MIN(want, sizeof buf), &n);
                if (r != 1) {
                        int e = SSL_get_error(t->u_ssl, r);
                        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
                                t->u_done = true;
                                progress = true;
                        }
                        break;
                }
                h2front_upstream(t->h2, buf, n);
                progress = true;
        }
        return progress;
}

/* The front's frames into down. */
static bool h2_out(struct term *t) {
        h2front_resume(t->h2);
        compact(&t->down);
        size_t n = h2front_send(t->h2, t->down.data + t->down.len, room(&t->down));
        t->down.len += n;
        return n > 0;
}

/* The ends of an HTTP/2 connection: the upstream goes once the front has
 * no use for it, the guest once the front is done (or the guest is). */
static void h2_ends(struct term *t) {
        if (!h2front_upstream_wanted(t->h2) && t->up.len == 0 && !t->u_closed) {
                if (t->u_hs) {
                        (void) SSL_shutdown(t->u_ssl);
                        (void) net_out(t->u_fd, t->u_net);
                }
                t->u_closed = t->u_done = t->h2_up_ended = true;
        }
        if ((h2front_done(t->h2) || t->g_done) && t->down.len == 0 && !t->g_closed) {
                (void) SSL_shutdown(t->g_ssl);
                t->g_closed = true;
                (void) net_out(t->g_fd, t->g_net);
        }
}

/* One step of a handshake: 1 done, 0 waiting for bytes, -1 failed. */
static int handshake_step(SSL *ssl) {
        int r = SSL_do_handshake(ssl);
        if (r == 1)
                return 1;
        int e = SSL_get_error(ssl, r);
        return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

/* Once both handshakes are done, their timeout ends. */
static void handshakes_done(struct term *t) {
        if (t->g_hs && t->u_hs) {
                loop_timer_cancel(t->timer);
                t->timer = NULL;
        }
}

/* Moves everything that can move; ends the connection when all is said. */
static void pump(struct term *t) {
        bool progress, g_failed = false, u_failed = false;
        do {
                progress = false;
                if (!t->refused || !t->g_hs) /* a refusal waits for the handshake that carries it */
                        progress |= net_in(t, true, t->g_fd, t->g_net, &t->g_sock_eof);
                if (t->u_connected && !t->u_closed)
                        progress |= net_in(t, false, t->u_fd, t->u_net, &t->u_sock_eof);
                if (!t->g_hs) {
                        int r = handshake_step(t->g_ssl);
                        if (r > 0) {
                                t->g_hs = progress = true;
                                if (h2_start(t) < 0) {
                                        term_free(t);
                                        return;
                                }
                                handshakes_done(t);
                        } else if (r < 0) {
                                char why[96];
                                snprintf(why, sizeof why, "the guest's TLS handshake failed: %s",
                                         ERR_reason_error_string(ERR_peek_last_error()) ?: "the guest ended it");
                                ERR_clear_error();
                                gw_sandbox_log(t->sb, false, false, t->name, t->dst.sin_addr, ntohs(t->dst.sin_port),
                                               why);
                                (void) net_out(t->g_fd, t->g_net); /* its alert */
                                term_free(t);
                                return;
                        }
                }
                if (t->u_connected && !t->u_hs && !t->u_closed) {
                        int r = handshake_step(t->u_ssl);
                        if (r > 0) {
                                t->u_hs = progress = true;
                                handshakes_done(t);
                        } else if (r < 0) {
                                char why[160];
                                snprintf(why, sizeof why, "the destination's certificate: %s", upstream_failure(t));
                                t->u_closed = true;
                                refuse(t, 502, t->name, why);
                                progress = true;
                        }
                }
                if (t->g_hs && !t->refused)
                        progress |= ssl_in(t->g_ssl, &t->gp, &t->g_done, &g_failed);
                if (t->g_hs && !t->refused)
                        progress |= t->h2 ? h2_guest(t, &g_failed) : parse_guest(t);
                if (t->u_hs && !t->u_closed && t->up.len)
                        progress |= ssl_out(t->u_ssl, &t->up, t->up.len, &u_failed);
                if (t->h2) {
                        if (t->u_hs && !t->u_closed)
                                progress |= h2_upstream(t);
                        if (t->u_done && !t->h2_up_ended) { /* it ended or broke: the front hears of it once */
                                t->h2_up_ended = true;
                                h2front_upstream(t->h2, NULL, 0);
                                progress = true;
                        }
                        progress |= h2_out(t);
                        if (t->down.len)
                                progress |= ssl_out(t->g_ssl, &t->down, t->down.len, &g_failed);
                } else {
                        if (t->u_hs && !t->u_done && !t->refused)
                                progress |= ssl_in(t->u_ssl, &t->down, &t->u_done, &u_failed);
                        if (t->g_hs && t->down.len) {
                                size_t may = redact(t), before = t->down.len;
                                progress |= ssl_out(t->g_ssl, &t->down, may, &g_failed);
                                t->down_scanned -= before - t->down.len; /* from the first pending byte */
                        }
                }
                int o = net_out(t->g_fd, t->g_net);
                if (o < 0)
                        g_failed = true;
                progress |= o > 0;
                if (t->u_connected) {
                        o = net_out(t->u_fd, t->u_net);
                        if (o < 0)
                                u_failed = true;
                        progress |= o > 0;
                }
                if (g_failed) {
                        term_free(t);
                        return;
                }
                if (u_failed) {
                        t->u_done = true; /* the guest gets what came, then the end */
                        if (t->h2 && !t->h2_up_ended)
                                progress = true; /* one more round tells the front */
                }
        } while (progress);

        if (t->h2) {
                h2_ends(t);
                if (t->g_closed && BIO_ctrl_pending(t->g_net) == 0) {
                        term_free(t);
                        return;
                }
                update_interest(t);
                return;
        }

        /* ends: the guest finished sending -> the upstream hears close_notify */
        if (t->g_done && t->gp.len == 0 && t->up.len == 0 && t->u_hs && !t->u_closed) {
                (void) SSL_shutdown(t->u_ssl);
                (void) net_out(t->u_fd, t->u_net);
                t->u_closed = true;
        }
        /* the upstream finished (or failed, or a refusal is written):
         * once the guest has it all, close_notify and the end */
        if ((t->u_done || u_failed) && t->g_hs && t->down.len == 0 && !t->g_closed) {
                (void) SSL_shutdown(t->g_ssl);
                t->g_closed = true;
                (void) net_out(t->g_fd, t->g_net);
        }
        if (t->g_closed && BIO_ctrl_pending(t->g_net) == 0) {
                term_free(t);
                return;
        }
        if (t->g_done && t->g_sock_eof && t->u_done) {
                term_free(t);
                return;
        }
        update_interest(t);
}

static void unthrottle(void *userdata) {
        struct term *t = userdata;
        t->throttle = NULL;
        update_interest(t);
}

/* Whether a side may be read now; if not, a timer looks again when the
 * sandbox's bandwidth allows. */
static bool may_read(struct term *t, bool up) {
        return gw_bandwidth_may_read(t->sb, up, &t->throttle, unthrottle, t);
}

static void update_interest(struct term *t) {
        uint32_t g = 0, u = 0;
        if (!t->g_sock_eof && (!t->refused || !t->g_hs) && BIO_ctrl_get_write_guarantee(t->g_net) > 0 &&
            may_read(t, true))
                g |= EPOLLIN;
        if (BIO_ctrl_pending(t->g_net) > 0)
                g |= EPOLLOUT;
        if (!t->u_connected)
                u = EPOLLOUT;
        else if (!t->u_closed || BIO_ctrl_pending(t->u_net) > 0) {
                if (!t->u_sock_eof && BIO_ctrl_get_write_guarantee(t->u_net) > 0 && may_read(t, false))
                        u |= EPOLLIN;
                if (BIO_ctrl_pending(t->u_net) > 0)
                        u |= EPOLLOUT;
        }
        (void) loop_watch_set(t->g_watch, g);
        if (t->u_watch)
                (void) loop_watch_set(t->u_watch, u);
}

static void timeout(void *userdata) {
        struct term *t = userdata;
        t->timer = NULL;
        gw_sandbox_log(t->sb, false, false, t->name, t->dst.sin_addr, ntohs(t->dst.sin_port),
                       t->u_connected ? "the TLS handshakes did not finish within 10 s"
                                      : "the destination did not answer");
        reset(t);
}

static void guest_event(int fd, uint32_t events, void *userdata) {
        pump(userdata);
}

static void upstream_event(int fd, uint32_t events, void *userdata) {
        struct term *t = userdata;
        if (!t->u_connected) {
                int err = 0;
                socklen_t l = sizeof err;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err != 0) {
                        gw_sandbox_log(t->sb, false, false, t->name, t->dst.sin_addr, ntohs(t->dst.sin_port),
                                       err == ECONNREFUSED ? "the destination refused the connection"
                                                           : "the destination cannot be reached");
                        reset(t);
                        return;
                }
                t->u_connected = true;
        }
        pump(t);
}

static SSL *side(SSL_CTX *ctx, BIO **ret_net) {
        SSL *ssl = SSL_new(ctx);
        BIO *inner = NULL, *net = NULL;
        if (!ssl || BIO_new_bio_pair(&inner, PAIR_BUF, &net, PAIR_BUF) != 1) {
                SSL_free(ssl);
                return NULL;
        }
        SSL_set_bio(ssl, inner, inner);
        *ret_net = net;
        return ssl;
}

int gw_tlsterm_start(struct gw_sandbox *sb, int g_fd, const struct sockaddr_in *dst, const char *name,
                     const uint8_t *hello, size_t hello_len) {
        struct term *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        *t = (struct term){.sb = sb, .g_fd = g_fd, .u_fd = -1, .dst = *dst};
        gw_sandbox_conn_open(sb);
        GW_LIST_PUSH(sb->terms, t);
        snprintf(t->name, sizeof t->name, "%s", name);
        X509 *leaf, *ca;
        EVP_PKEY *key;
        int r = 0;
        t->gp.data = malloc(PLAIN_BUF);
        t->up.data = malloc(PLAIN_BUF);
        t->down.data = malloc(PLAIN_BUF);
        t->hp = http1_parser_new();
        t->g_ssl = side(guest_ctx, &t->g_net);
        t->u_ssl = side(upstream_ctx, &t->u_net);
        if (!t->gp.data || !t->up.data || !t->down.data || !t->hp || !t->g_ssl || !t->u_ssl)
                r = -ENOMEM;
        if (r >= 0 && (r = gw_ca_leaf(name, &leaf, &key, &ca)) >= 0 &&
            (SSL_use_certificate(t->g_ssl, leaf) != 1 || SSL_use_PrivateKey(t->g_ssl, key) != 1 ||
             SSL_add1_chain_cert(t->g_ssl, ca) != 1))
                r = -EIO;
        if (r >= 0) {
                SSL_set_accept_state(t->g_ssl);
                SSL_set_connect_state(t->u_ssl);
                /* the upstream is verified for the very name the guest asked for */
                if (SSL_set_tlsext_host_name(t->u_ssl, name) != 1 || SSL_set1_host(t->u_ssl, name) != 1)
                        r = -EIO;
                SSL_set_hostflags(t->u_ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        }
        /* the ClientHello the relay sniffed goes in first */
        char *p;
        if (r >= 0 && BIO_nwrite0(t->g_net, &p) < (int) hello_len)
                r = -ENOBUFS;
        if (r >= 0) {
                memcpy(p, hello, hello_len);
                BIO_nwrite(t->g_net, &p, (int) hello_len);
        }
        if (r >= 0) {
                t->u_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (t->u_fd < 0 || (connect(t->u_fd, (const struct sockaddr *) dst, sizeof *dst) < 0 &&
                                    errno != EINPROGRESS))
                        r = negative_errno();
        }
        if (r >= 0) {
                int one = 1;
                (void) setsockopt(t->u_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                r = loop_watch_add(sb->gw->loop, t->g_fd, EPOLLIN, guest_event, t, &t->g_watch);
        }
        if (r >= 0)
                r = loop_watch_add(sb->gw->loop, t->u_fd, EPOLLOUT, upstream_event, t, &t->u_watch);
        if (r >= 0)
                r = loop_timer_add(sb->gw->loop, HANDSHAKE_TIMEOUT_MS, timeout, t, &t->timer);
        if (r < 0) {
                reset(t);
                return r;
        }
        gw_sandbox_log(sb, false, true, name, dst->sin_addr, ntohs(dst->sin_port),
                       "allowed by name (TLS terminated)");
        pump(t);
        return 0;
}

void gw_tlsterm_close_all(struct gw_sandbox *s) {
        while (s->terms)
                reset(s->terms);
}
