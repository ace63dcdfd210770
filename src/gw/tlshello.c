/* SPDX-License-Identifier: Apache-2.0 */
#include "tlshello.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>

#include "macros.h"

#define EXT_EARLY_DATA 42
#define EXT_PSK 41
#define EXT_ECH 0xfe0d
#define EXT_ESNI 0xffce

static SSL_CTX *ctx;

static inline void ctx_freep(SSL_CTX **c) {
        SSL_CTX_free(*c);
}

/* What the callback found, for the sniff that started the handshake. */
struct sniff {
        bool done;
        int verdict;
        struct tlshello h;
};

static int bad(struct sniff *st, const char *why) {
        st->verdict = TLSHELLO_BAD;
        st->h.reason = why;
        return 0;
}

/* server_name (RFC 6066 §3): a list of exactly one host_name, which must
 * be a canonical LDH name. OpenSSL itself reads only the first entry. */
static int parse_sni(struct sniff *st, const unsigned char *d, size_t n) {
        if (n < 2 || (size_t) (d[0] << 8 | d[1]) != n - 2)
                return bad(st, "malformed server_name extension");
        if (n < 5)
                return bad(st, "empty server_name list");
        if (d[2] != TLSEXT_NAMETYPE_host_name)
                return bad(st, "server name of a type other than host_name");
        size_t l = (size_t) (d[3] << 8 | d[4]);
        if (5 + l > n)
                return bad(st, "malformed server_name extension");
        if (5 + l < n)
                return bad(st, "more than one server name");
        if (memchr(d + 5, 0, l))
                return bad(st, "NUL in the server name");
        if (gwname_canonical((const char *) d + 5, l, 0, st->h.sni) < 0)
                return bad(st, "server name is not a host name");
        st->h.has_sni = true;
        return 0;
}

/* application_layer_protocol_negotiation (RFC 7301 §3.1): a non-empty list
 * of non-empty protocol names. */
static int parse_alpn(struct sniff *st, const unsigned char *d, size_t n) {
        if (n < 2 || (size_t) (d[0] << 8 | d[1]) != n - 2 || n == 2)
                return bad(st, "malformed ALPN extension");
        for (size_t p = 2; p < n;) {
                size_t l = d[p];
                if (l == 0 || p + 1 + l > n)
                        return bad(st, "malformed ALPN extension");
                const unsigned char *proto = d + p + 1;
                if (l == 2 && memcmp(proto, "h2", 2) == 0)
                        st->h.alpn |= TLSHELLO_ALPN_H2;
                else if (l == 8 && memcmp(proto, "http/1.1", 8) == 0)
                        st->h.alpn |= TLSHELLO_ALPN_HTTP11;
                else
                        st->h.alpn |= TLSHELLO_ALPN_OTHER;
                p += 1 + l;
        }
        st->h.has_alpn = true;
        return 0;
}

/* Called by OpenSSL with the whole ClientHello parsed; reads it and stops
 * the handshake there (RETRY: it pauses, and nothing is written). */
static int hello_cb(SSL *s, int *al, void *arg) {
        struct sniff *st = SSL_get_app_data(s);
        st->done = true;
        st->verdict = TLSHELLO_OK;
        st->h.legacy_version = (uint16_t) SSL_client_hello_get0_legacy_version(s);

        int *exts = NULL;
        size_t n = 0;
        if (!SSL_client_hello_get1_extensions_present(s, &exts, &n)) {
                bad(st, "unreadable extensions");
                return SSL_CLIENT_HELLO_RETRY;
        }
        for (size_t i = 0; i < n; i++)
                switch (exts[i]) {
                case EXT_ECH: st->h.ech = true; break;
                case EXT_ESNI: st->h.esni = true; break;
                case EXT_EARLY_DATA: st->h.early_data = true; break;
                case EXT_PSK: st->h.psk = true; break;
                default: break;
                }
        OPENSSL_free(exts);

        const unsigned char *d;
        size_t len;
        if (SSL_client_hello_get0_ext(s, TLSEXT_TYPE_server_name, &d, &len))
                parse_sni(st, d, len);
        if (st->verdict == TLSHELLO_OK &&
            SSL_client_hello_get0_ext(s, TLSEXT_TYPE_application_layer_protocol_negotiation, &d, &len))
                parse_alpn(st, d, len);
        return SSL_CLIENT_HELLO_RETRY;
}

int tlshello_init(void) {
        if (ctx)
                return 0;
        _cleanup_(ctx_freep) SSL_CTX *c = SSL_CTX_new(TLS_server_method());
        if (!c)
                return -ENOMEM;
        SSL_CTX_set_client_hello_cb(c, hello_cb, NULL);
        /* OpenSSL 3.0 keeps only the extensions it knows (or is told of) in
         * the parsed ClientHello: ECH and ESNI are registered (never sent,
         * nothing parsed) so that they are seen, and a duplicate refused */
        if (!SSL_CTX_add_custom_ext(c, EXT_ECH, SSL_EXT_CLIENT_HELLO, NULL, NULL, NULL, NULL, NULL) ||
            !SSL_CTX_add_custom_ext(c, EXT_ESNI, SSL_EXT_CLIENT_HELLO, NULL, NULL, NULL, NULL, NULL)) {
                ERR_clear_error();
                return -ENOMEM;
        }
        ctx = TAKE_PTR(c);
        return 0;
}

void tlshello_free(void) {
        SSL_CTX_free(ctx);
        ctx = NULL;
}

int tlshello_sniff(const uint8_t *buf, size_t len, struct tlshello *ret) {
        if (!ctx)
                return -EINVAL;
        /* a handshake record (22) of TLS (major version 3) */
        if (len == 0)
                return TLSHELLO_NEED_MORE;
        if (buf[0] != 22)
                return TLSHELLO_NOT_TLS;
        if (len < 2)
                return TLSHELLO_NEED_MORE;
        if (buf[1] != 3)
                return TLSHELLO_NOT_TLS;
        size_t n = MIN(len, (size_t) TLSHELLO_BUF_MAX);

        struct sniff st = {};
        st.h.record_version = len >= 3 ? (uint16_t) (buf[1] << 8 | buf[2]) : 0;
        SSL *ssl = SSL_new(ctx);
        /* read-only BIO over the caller's bytes; empty means "retry", so
         * that a hello cut short is NEED_MORE, not EOF */
        BIO *rbio = BIO_new_mem_buf(buf, (int) n), *wbio = BIO_new(BIO_s_mem());
        if (!ssl || !rbio || !wbio) {
                SSL_free(ssl);
                BIO_free(rbio);
                BIO_free(wbio);
                ERR_clear_error();
                return -ENOMEM;
        }
        BIO_set_mem_eof_return(rbio, -1);
        /* wbio collects the alert OpenSSL makes when it refuses a hello;
         * it is freed with the SSL, never sent */
        SSL_set_bio(ssl, rbio, wbio);
        SSL_set_app_data(ssl, &st);
        SSL_set_accept_state(ssl);
        int r = SSL_do_handshake(ssl);
        int err = SSL_get_error(ssl, r);
        const char *why = NULL;
        if (!st.done && err != SSL_ERROR_WANT_READ) {
                unsigned long e = ERR_peek_last_error();
                why = e ? ERR_reason_error_string(e) : NULL;
        }
        SSL_free(ssl);
        ERR_clear_error();

        if (st.done) {
                if (st.verdict == TLSHELLO_OK)
                        st.h.reason = NULL;
                *ret = st.h;
                return st.verdict;
        }
        if (err == SSL_ERROR_WANT_READ && n < TLSHELLO_BUF_MAX)
                return TLSHELLO_NEED_MORE;
        *ret = (struct tlshello){
                .reason = err == SSL_ERROR_WANT_READ ? "no complete ClientHello in the first 16 KiB"
                                                     : why ?: "ClientHello refused by OpenSSL",
                .record_version = st.h.record_version,
        };
        return TLSHELLO_BAD;
}
