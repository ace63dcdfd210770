/* SPDX-License-Identifier: Apache-2.0 */
#include "mtls.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define CA_DAYS (10 * 365)
#define CLOCK_SKEW_S 300 /* certificates are valid from a little before they were made */

struct mtls_ctx {
        SSL_CTX *ssl;
        bool server;
        bool join;            /* client that verifies the CA by digest */
        bool peer_optional;   /* server: a client without a certificate is let in (joins) */
        enum mtls_role peer_role;
        X509 *ca;             /* NULL for join */
        char ca_digest[MTLS_DIGEST_HEX + 1]; /* join: what the server's CA must hash to */
};

struct mtls_conn {
        SSL *ssl;
        int fd;
        bool anonymous;
        enum mtls_role peer_role;
        char peer[MTLS_NAME_MAX + 1];
};

static const char *const role_names[] = {
        [MTLS_ROLE_CONTROL] = "airlock-control",
        [MTLS_ROLE_NODE] = "airlock-node",
};

const char *mtls_role_name(enum mtls_role role) {
        return (unsigned) role < ARRAY_SIZE(role_names) ? role_names[role] : "?";
}

bool mtls_name_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > 63 || name[0] == '-' || name[n - 1] == '-')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-'))
                        return false;
        return true;
}

/* ---- PEM and object helpers ---- */

static void x509p(X509 **p) {
        X509_free(*p);
}
static void x509_reqp(X509_REQ **p) {
        X509_REQ_free(*p);
}
static void pkeyp(EVP_PKEY **p) {
        EVP_PKEY_free(*p);
}
static void biop(BIO **p) {
        BIO_free(*p);
}

/* What OpenSSL left in its queue is ours to drop: it never crosses the API. */
static int fail(int r) {
        ERR_clear_error();
        return r;
}

static BIO *pem_bio(const char *pem) {
        if (!pem || strnlen(pem, MTLS_PEM_MAX + 1) > MTLS_PEM_MAX)
                return NULL;
        return BIO_new_mem_buf(pem, -1);
}

static X509 *cert_parse(const char *pem) {
        _cleanup_(biop) BIO *b = pem_bio(pem);
        return b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
}

static EVP_PKEY *key_parse(const char *pem) {
        _cleanup_(biop) BIO *b = pem_bio(pem);
        return b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
}

/* The bytes written to a memory BIO, as a string. */
static int bio_string(BIO *b, char **ret) {
        char *data;
        long n = BIO_get_mem_data(b, &data);
        if (n < 0)
                return -EIO;
        char *s = malloc((size_t) n + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, data, (size_t) n);
        s[n] = 0;
        *ret = s;
        return 0;
}

static int cert_pem(X509 *x, char **ret) {
        _cleanup_(biop) BIO *b = BIO_new(BIO_s_mem());
        if (!b || !PEM_write_bio_X509(b, x))
                return fail(-ENOMEM);
        return bio_string(b, ret);
}

static int key_pem(EVP_PKEY *k, char **ret) {
        _cleanup_(biop) BIO *b = BIO_new(BIO_s_mem());
        if (!b || !PEM_write_bio_PKCS8PrivateKey(b, k, NULL, NULL, 0, NULL, NULL))
                return fail(-ENOMEM);
        return bio_string(b, ret);
}

static EVP_PKEY *key_new(void) {
        return EVP_EC_gen("P-256");
}

/* One text field (O or CN) of a name, into buf. */
static bool name_field(const X509_NAME *name, int nid, char *buf, size_t n) {
        int len = X509_NAME_get_text_by_NID((X509_NAME *) name, nid, buf, (int) n);
        return len > 0 && (size_t) len < n;
}

static int set_serial(X509 *x) {
        uint8_t raw[16];
        if (RAND_bytes(raw, sizeof raw) != 1)
                return -EIO;
        raw[0] &= 0x7f; /* positive */
        BIGNUM *bn = BN_bin2bn(raw, sizeof raw, NULL);
        int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
        BN_free(bn);
        return ok ? 0 : -ENOMEM;
}

static int set_validity(X509 *x, unsigned days) {
        if (!X509_gmtime_adj(X509_getm_notBefore(x), -CLOCK_SKEW_S) ||
            !X509_gmtime_adj(X509_getm_notAfter(x), (long) days * 24 * 3600))
                return -EIO;
        return 0;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
        X509V3_CTX v3;
        X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
        if (!e)
                return -EINVAL;
        int ok = X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
        return ok ? 0 : -ENOMEM;
}

static int subject_set(X509_NAME *n, const char *org, const char *cn) {
        if (!X509_NAME_add_entry_by_NID(n, NID_organizationName, MBSTRING_ASC, (const unsigned char *) org, -1, -1,
                                        0) ||
            !X509_NAME_add_entry_by_NID(n, NID_commonName, MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0))
                return -ENOMEM;
        return 0;
}

/* ---- the CA and certificates ---- */

int mtls_ca_create(char **ret_cert_pem, char **ret_key_pem) {
        _cleanup_(pkeyp) EVP_PKEY *k = key_new();
        _cleanup_(x509p) X509 *x = X509_new();
        if (!k || !x)
                return fail(-ENOMEM);
        uint8_t tag[4];
        char cn[64];
        if (RAND_bytes(tag, sizeof tag) != 1)
                return fail(-EIO);
        snprintf(cn, sizeof cn, "airlock cluster CA %02x%02x%02x%02x", tag[0], tag[1], tag[2], tag[3]);
        int r;
        if (!X509_set_version(x, X509_VERSION_3) || (r = set_serial(x)) < 0 || (r = set_validity(x, CA_DAYS)) < 0 ||
            (r = subject_set(X509_get_subject_name(x), "airlock-cluster", cn)) < 0 ||
            !X509_set_issuer_name(x, X509_get_subject_name(x)) || !X509_set_pubkey(x, k) ||
            (r = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")) < 0 ||
            (r = add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign")) < 0 ||
            (r = add_ext(x, x, NID_subject_key_identifier, "hash")) < 0 || !X509_sign(x, k, EVP_sha256()))
                return fail(-EIO);
        _cleanup_free_ char *c = NULL;
        if ((r = cert_pem(x, &c)) < 0)
                return r;
        if ((r = key_pem(k, ret_key_pem)) < 0)
                return r;
        *ret_cert_pem = TAKE_PTR(c);
        return 0;
}

static int digest_of(X509 *x, char ret_hex[MTLS_DIGEST_HEX + 1]) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned n = 0;
        if (!X509_digest(x, EVP_sha256(), md, &n) || n != 32)
                return fail(-EIO);
        for (unsigned i = 0; i < n; i++)
                snprintf(ret_hex + 2 * i, 3, "%02x", md[i]);
        return 0;
}

int mtls_cert_digest(const char *cert_pem, char ret_hex[MTLS_DIGEST_HEX + 1]) {
        _cleanup_(x509p) X509 *x = cert_parse(cert_pem);
        if (!x)
                return fail(-EBADMSG);
        return digest_of(x, ret_hex);
}

int mtls_key_create(char **ret_key_pem) {
        _cleanup_(pkeyp) EVP_PKEY *k = key_new();
        if (!k)
                return fail(-ENOMEM);
        return key_pem(k, ret_key_pem);
}

int mtls_csr_create(const char *key_pem, char **ret_csr_pem) {
        _cleanup_(pkeyp) EVP_PKEY *k = key_parse(key_pem);
        if (!k)
                return fail(-EBADMSG);
        _cleanup_(x509_reqp) X509_REQ *q = X509_REQ_new();
        _cleanup_(biop) BIO *b = BIO_new(BIO_s_mem());
        if (!q || !b || !X509_REQ_set_pubkey(q, k) || !X509_REQ_sign(q, k, EVP_sha256()) ||
            !PEM_write_bio_X509_REQ(b, q))
                return fail(-ENOMEM);
        return bio_string(b, ret_csr_pem);
}

int mtls_cert_issue(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem, enum mtls_role role,
                    const char *name, unsigned days, char **ret_cert_pem) {
        if (!mtls_name_valid(name) || (unsigned) role >= ARRAY_SIZE(role_names) || days == 0 || days > CA_DAYS)
                return -EINVAL;
        _cleanup_(x509p) X509 *ca = cert_parse(ca_cert_pem);
        _cleanup_(pkeyp) EVP_PKEY *ca_key = key_parse(ca_key_pem);
        if (!ca || !ca_key || X509_check_private_key(ca, ca_key) != 1)
                return fail(-EINVAL);
        _cleanup_(biop) BIO *b = pem_bio(csr_pem);
        _cleanup_(x509_reqp) X509_REQ *q = b ? PEM_read_bio_X509_REQ(b, NULL, NULL, NULL) : NULL;
        if (!q)
                return fail(-EBADMSG);
        EVP_PKEY *pub = X509_REQ_get0_pubkey(q); /* borrowed */
        /* the requester proves it holds the key; nothing else of the CSR is used */
        if (!pub || X509_REQ_verify(q, pub) != 1 || !EVP_PKEY_is_a(pub, "EC"))
                return fail(-EBADMSG);
        _cleanup_(x509p) X509 *x = X509_new();
        if (!x)
                return fail(-ENOMEM);
        int r;
        if (!X509_set_version(x, X509_VERSION_3) || (r = set_serial(x)) < 0 || (r = set_validity(x, days)) < 0 ||
            (r = subject_set(X509_get_subject_name(x), role_names[role], name)) < 0 ||
            !X509_set_issuer_name(x, X509_get_subject_name(ca)) || !X509_set_pubkey(x, pub) ||
            (r = add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE")) < 0 ||
            (r = add_ext(x, ca, NID_key_usage, "critical,digitalSignature")) < 0 ||
            (r = add_ext(x, ca, NID_ext_key_usage, "serverAuth,clientAuth")) < 0 ||
            (r = add_ext(x, ca, NID_authority_key_identifier, "keyid:always")) < 0 ||
            !X509_sign(x, ca_key, EVP_sha256()))
                return fail(-EIO);
        return cert_pem(x, ret_cert_pem);
}

/* Role and name of one of our certificates. */
static int cert_identity(X509 *x, enum mtls_role *ret_role, char ret_name[MTLS_NAME_MAX + 1]) {
        char org[32], cn[MTLS_NAME_MAX + 1];
        const X509_NAME *subject = X509_get_subject_name(x);
        if (!subject || !name_field(subject, NID_organizationName, org, sizeof org) ||
            !name_field(subject, NID_commonName, cn, sizeof cn) || !mtls_name_valid(cn))
                return fail(-EBADMSG);
        for (size_t i = 0; i < ARRAY_SIZE(role_names); i++)
                if (strcmp(org, role_names[i]) == 0) {
                        *ret_role = (enum mtls_role) i;
                        memcpy(ret_name, cn, strlen(cn) + 1);
                        return 0;
                }
        return fail(-EBADMSG);
}

int mtls_cert_info(const char *cert_pem, enum mtls_role *ret_role, char ret_name[MTLS_NAME_MAX + 1],
                   int64_t *ret_not_after) {
        _cleanup_(x509p) X509 *x = cert_parse(cert_pem);
        if (!x)
                return fail(-EBADMSG);
        enum mtls_role role;
        char name[MTLS_NAME_MAX + 1];
        int r = cert_identity(x, &role, name);
        if (r < 0)
                return r;
        struct tm tm;
        if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1)
                return fail(-EBADMSG);
        if (ret_role)
                *ret_role = role;
        if (ret_name)
                memcpy(ret_name, name, strlen(name) + 1);
        if (ret_not_after)
                *ret_not_after = (int64_t) timegm(&tm);
        return 0;
}

/* 0 when x chains to ca and is valid now. */
static int chain_verify(X509 *ca, X509 *x) {
        X509_STORE *st = X509_STORE_new();
        X509_STORE_CTX *sc = X509_STORE_CTX_new();
        int ok = st && sc && X509_STORE_add_cert(st, ca) && X509_STORE_CTX_init(sc, st, x, NULL) &&
                 X509_verify_cert(sc) == 1;
        X509_STORE_CTX_free(sc);
        X509_STORE_free(st);
        return ok ? 0 : fail(-EACCES);
}

int mtls_cert_verify(const char *ca_pem, const char *cert_pem, enum mtls_role role, const char *name) {
        _cleanup_(x509p) X509 *ca = cert_parse(ca_pem);
        _cleanup_(x509p) X509 *x = cert_parse(cert_pem);
        if (!ca || !x)
                return fail(-EACCES);
        int r = chain_verify(ca, x);
        if (r < 0)
                return r;
        enum mtls_role got;
        char n[MTLS_NAME_MAX + 1];
        if (cert_identity(x, &got, n) < 0 || got != role || (name && strcmp(n, name) != 0))
                return -EACCES;
        return 0;
}

/* ---- TLS ---- */

void mtls_ctx_free(struct mtls_ctx *ctx) {
        if (!ctx)
                return;
        SSL_CTX_free(ctx->ssl);
        X509_free(ctx->ca);
        free(ctx);
}

static int ctx_alloc(bool server, struct mtls_ctx **ret) {
        struct mtls_ctx *ctx = calloc(1, sizeof *ctx);
        if (!ctx)
                return -ENOMEM;
        ctx->server = server;
        ctx->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
        if (!ctx->ssl || !SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_3_VERSION)) {
                mtls_ctx_free(ctx);
                return fail(-ENOMEM);
        }
        /* a peer that hangs up without close_notify reads as an end, not an error */
        SSL_CTX_set_options(ctx->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_mode(ctx->ssl, SSL_MODE_AUTO_RETRY);
        /* no session tickets: no client resumes (one request per
         * connection, a fresh SSL each), and issuing them cost a quarter
         * of a heartbeat's CPU (docs/benchmarks.md, "Cluster") */
        if (server)
                SSL_CTX_set_num_tickets(ctx->ssl, 0);
        *ret = ctx;
        return 0;
}

int mtls_ctx_new(bool server, const char *ca_pem, const char *cert_pem, const char *key_pem, enum mtls_role peer_role,
                 struct mtls_ctx **ret) {
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *ctx = NULL;
        int r = ctx_alloc(server, &ctx);
        if (r < 0)
                return r;
        ctx->peer_role = peer_role;
        _cleanup_(x509p) X509 *cert = cert_parse(cert_pem);
        _cleanup_(pkeyp) EVP_PKEY *key = key_parse(key_pem);
        ctx->ca = cert_parse(ca_pem);
        if (!cert || !key || !ctx->ca)
                return fail(-EBADMSG);
        if (SSL_CTX_use_certificate(ctx->ssl, cert) != 1 || SSL_CTX_use_PrivateKey(ctx->ssl, key) != 1 ||
            SSL_CTX_check_private_key(ctx->ssl) != 1 ||
            X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx->ssl), ctx->ca) != 1 ||
            /* the CA goes with our certificate: a joining node learns it
             * from the handshake and checks it against its token */
            SSL_CTX_add1_chain_cert(ctx->ssl, ctx->ca) != 1)
                return fail(-EINVAL);
        SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        if (server)
                SSL_CTX_set_session_id_context(ctx->ssl, (const unsigned char *) "airlock", 7);
        *ret = TAKE_PTR(ctx);
        return 0;
}

void mtls_ctx_allow_anonymous(struct mtls_ctx *ctx) {
        ctx->peer_optional = true;
        SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER, NULL);
}

int mtls_ctx_new_join(const char *ca_digest, struct mtls_ctx **ret) {
        if (!ca_digest || strlen(ca_digest) != MTLS_DIGEST_HEX)
                return -EINVAL;
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *ctx = NULL;
        int r = ctx_alloc(false, &ctx);
        if (r < 0)
                return r;
        ctx->join = true;
        memcpy(ctx->ca_digest, ca_digest, MTLS_DIGEST_HEX + 1);
        ctx->peer_role = MTLS_ROLE_CONTROL;
        /* verified after the handshake, against the CA the caller checks */
        SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_NONE, NULL);
        *ret = TAKE_PTR(ctx);
        return 0;
}

void mtls_conn_free(struct mtls_conn *c) {
        if (!c)
                return;
        if (c->ssl) {
                /* best effort, never blocking: the fd may be a dead peer's */
                int fl = fcntl(c->fd, F_GETFL);
                if (fl >= 0)
                        (void) fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
                (void) SSL_shutdown(c->ssl);
                SSL_free(c->ssl);
        }
        if (c->fd >= 0)
                close(c->fd);
        ERR_clear_error();
        free(c);
}

int mtls_conn_set_timeout(struct mtls_conn *c, int timeout_ms) {
        struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
            setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
                return -errno;
        return 0;
}

/* Maps a failed SSL call to an errno. */
static int ssl_errno(struct mtls_conn *c, int ret) {
        int e = SSL_get_error(c->ssl, ret), saved = errno;
        ERR_clear_error();
        switch (e) {
        case SSL_ERROR_ZERO_RETURN: return -ECONNRESET;
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE: return -EAGAIN; /* a deadline, or a non-blocking socket */
        case SSL_ERROR_SYSCALL:
                if (saved == EAGAIN || saved == EWOULDBLOCK)
                        return -EAGAIN;
                return saved > 0 ? -saved : -ECONNRESET;
        default: return -EPROTO;
        }
}

/* After the handshake: who the peer is, and whether it may be. */
static int conn_check_peer(struct mtls_ctx *ctx, struct mtls_conn *c, const char *peer_name) {
        X509 *peer = SSL_get0_peer_certificate(c->ssl); /* borrowed */
        if (ctx->join) {
                /* the chain the server sent must end in the CA of the
                 * token's digest, and its certificate chain to it */
                STACK_OF(X509) *chain = SSL_get_peer_cert_chain(c->ssl);
                int n = chain ? sk_X509_num(chain) : 0;
                if (!peer || n < 2)
                        return -EACCES;
                X509 *root = sk_X509_value(chain, n - 1);
                char hex[MTLS_DIGEST_HEX + 1];
                if (digest_of(root, hex) < 0 || strcmp(hex, ctx->ca_digest) != 0 || chain_verify(root, peer) < 0)
                        return -EACCES;
        } else if (!peer) {
                if (!(ctx->server && ctx->peer_optional))
                        return -EACCES;
                c->anonymous = true;
                return 0;
        } else if (SSL_get_verify_result(c->ssl) != X509_V_OK)
                return -EACCES;
        if (cert_identity(peer, &c->peer_role, c->peer) < 0 || c->peer_role != ctx->peer_role ||
            (peer_name && strcmp(c->peer, peer_name) != 0))
                return fail(-EACCES);
        return 0;
}

static int handshake(struct mtls_ctx *ctx, int fd, const char *peer_name, int timeout_ms, struct mtls_conn **ret) {
        struct mtls_conn *c = calloc(1, sizeof *c);
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->fd = fd;
        c->peer_role = (enum mtls_role) - 1;
        int r = mtls_conn_set_timeout(c, timeout_ms);
        if (r >= 0 && (!(c->ssl = SSL_new(ctx->ssl)) || SSL_set_fd(c->ssl, fd) != 1))
                r = fail(-ENOMEM);
        if (r >= 0) {
                int k = ctx->server ? SSL_accept(c->ssl) : SSL_connect(c->ssl);
                if (k != 1) {
                        long v = SSL_get_verify_result(c->ssl);
                        r = ssl_errno(c, k);
                        if (r == -EAGAIN)
                                r = -ETIMEDOUT;
                        else if (r == -EPROTO && v != X509_V_OK)
                                r = -EACCES;
                }
        }
        if (r >= 0)
                r = conn_check_peer(ctx, c, peer_name);
        if (r < 0) {
                mtls_conn_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

int mtls_connect(struct mtls_ctx *ctx, int fd, const char *peer_name, int timeout_ms, struct mtls_conn **ret) {
        if (!ctx || ctx->server || fd < 0)
                return -EINVAL;
        return handshake(ctx, fd, peer_name, timeout_ms, ret);
}

int mtls_accept(struct mtls_ctx *ctx, int fd, int timeout_ms, struct mtls_conn **ret) {
        if (!ctx || !ctx->server || fd < 0)
                return -EINVAL;
        return handshake(ctx, fd, NULL, timeout_ms, ret);
}

const char *mtls_conn_peer(const struct mtls_conn *c, enum mtls_role *ret_role) {
        if (ret_role)
                *ret_role = c->peer_role;
        return c->anonymous ? "" : c->peer;
}

int mtls_conn_peer_chain_root(const struct mtls_conn *c, char **ret_pem) {
        STACK_OF(X509) *chain = SSL_get_peer_cert_chain(c->ssl);
        int n = chain ? sk_X509_num(chain) : 0;
        if (n < 1)
                return -ENOENT;
        return cert_pem(sk_X509_value(chain, n - 1), ret_pem);
}

int mtls_conn_fd(const struct mtls_conn *c) {
        return c->fd;
}

ssize_t mtls_read(struct mtls_conn *c, void *buf, size_t n) {
        size_t got = 0;
        if (n == 0)
                return 0;
        int k = SSL_read_ex(c->ssl, buf, n, &got);
        if (k == 1)
                return (ssize_t) got;
        int r = ssl_errno(c, k);
        return r == -ECONNRESET && SSL_get_error(c->ssl, k) == SSL_ERROR_ZERO_RETURN ? 0 : r;
}

int mtls_write_all(struct mtls_conn *c, const void *buf, size_t n) {
        const uint8_t *p = buf;
        while (n > 0) {
                size_t done = 0;
                int k = SSL_write_ex(c->ssl, p, n, &done);
                if (k != 1)
                        return ssl_errno(c, k);
                p += done;
                n -= done;
        }
        return 0;
}

bool mtls_pending(const struct mtls_conn *c) {
        return SSL_pending(c->ssl) > 0;
}

bool mtls_peer_closed(struct mtls_conn *c) {
        if (mtls_pending(c))
                return false;
        struct pollfd p = { .fd = c->fd, .events = POLLIN | POLLRDHUP };
        if (poll(&p, 1, 0) <= 0)
                return false;
        if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
                return true;
        /* readable: a close_notify, or data (a ticket, a frame) */
        int fl = fcntl(c->fd, F_GETFL);
        if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return false;
        char b;
        size_t got = 0;
        int k = SSL_peek_ex(c->ssl, &b, 1, &got);
        int e = k == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, k);
        ERR_clear_error();
        (void) fcntl(c->fd, F_SETFL, fl);
        return e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL;
}
