/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The cluster's mutual TLS (OpenSSL): the certificates that name who is who
 * in a cluster, and the connections on which both ends prove it.
 *
 * One certificate authority per cluster (EC P-256, kept in the store by the
 * control plane: PostgreSQL is the cluster's root of trust) signs two kinds
 * of certificates, told apart by their subject's organisation:
 *   MTLS_ROLE_CONTROL  "airlock-control", CN = the replica's id
 *   MTLS_ROLE_NODE     "airlock-node",    CN = the node's name
 * The CA, never the requester, chooses the role and the name: a CSR only
 * carries the public key. Connections are TLS 1.3 only; each side requires
 * the other's certificate, checks that it chains to the cluster's CA and
 * that it has the role expected of the peer (a node never accepts another
 * node as its control plane), and the caller may pin the peer's name.
 *
 * A node joining the cluster has no CA yet: the control plane sends it
 * along with its own certificate, and the node accepts it only when its
 * SHA-256 matches the digest in the join token (mtls_ctx_new_join).
 *
 * PEM text in and out: everything here is small, and the store and the
 * files keep PEM. Functions return 0 or a negative errno; OpenSSL's error
 * queue is cleared and never crosses this boundary. Blocking sockets with
 * deadlines (SO_RCVTIMEO/SO_SNDTIMEO): a read or write past it fails with
 * -ETIMEDOUT. Nothing here logs.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macros.h"

#define MTLS_NAME_MAX 64        /* a replica id or node name: [a-z0-9-], 1..63 */
#define MTLS_DIGEST_HEX 64      /* SHA-256 as lowercase hex */
#define MTLS_PEM_MAX (16 << 10) /* any certificate, key or CSR we accept */

enum mtls_role {
        MTLS_ROLE_CONTROL,
        MTLS_ROLE_NODE,
};

/* The subject organisation of a role: "airlock-control" or "airlock-node". */
const char *mtls_role_name(enum mtls_role role);

/* Whether name is a valid replica id or node name: 1-63 of [a-z0-9-], not
 * starting or ending with '-'. */
bool mtls_name_valid(const char *name);

/* A new cluster CA: EC P-256 key and a self-signed CA certificate valid for
 * ten years. Free both with free() (the key with explicit_bzero first). */
int mtls_ca_create(char **ret_cert_pem, char **ret_key_pem);
/* SHA-256 of a certificate's DER, lowercase hex (MTLS_DIGEST_HEX + 1 bytes).
 * -EBADMSG when cert_pem is not one certificate. */
int mtls_cert_digest(const char *cert_pem, char ret_hex[MTLS_DIGEST_HEX + 1]);

/* A new EC P-256 private key, PEM (PKCS#8). */
int mtls_key_create(char **ret_key_pem);
/* A certificate signing request for key_pem (its subject is not used: the
 * CA names the holder). */
int mtls_csr_create(const char *key_pem, char **ret_csr_pem);
/* Signs csr_pem's public key as role/name for days days (a fresh random
 * serial). -EBADMSG for a malformed or unsigned CSR, -EINVAL for a bad name. */
int mtls_cert_issue(const char *ca_cert_pem, const char *ca_key_pem, const char *csr_pem, enum mtls_role role,
                    const char *name, unsigned days, char **ret_cert_pem);
/* What a certificate says: role, name, expiry (Unix seconds). -EBADMSG when
 * it is not one of ours. */
int mtls_cert_info(const char *cert_pem, enum mtls_role *ret_role, char ret_name[MTLS_NAME_MAX + 1],
                   int64_t *ret_not_after);
/* 0 when cert_pem is signed by ca_pem, valid now and names role/name (name
 * NULL: any); -EACCES otherwise. */
int mtls_cert_verify(const char *ca_pem, const char *cert_pem, enum mtls_role role, const char *name);

/* A TLS configuration: our certificate and key, the CA our peers must
 * chain to, and the role they must have. */
struct mtls_ctx;
int mtls_ctx_new(bool server, const char *ca_pem, const char *cert_pem, const char *key_pem, enum mtls_role peer_role,
                 struct mtls_ctx **ret);
/* A server configuration that also lets in clients without a certificate
 * (a joining node: its first request is the join, and the server allows it
 * nothing else); those with one are verified as ever. */
void mtls_ctx_allow_anonymous(struct mtls_ctx *ctx);
/* A joining node's client configuration: the server's certificate must
 * chain to the CA it sent along, and that CA must hash to ca_digest (the
 * join token's); the client has no certificate yet. */
int mtls_ctx_new_join(const char *ca_digest, struct mtls_ctx **ret);
void mtls_ctx_free(struct mtls_ctx *ctx);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mtls_ctx *, mtls_ctx_free)

/* One TLS connection over a connected stream socket. */
struct mtls_conn;
/* The handshake as client on fd (taken: closed on failure too); peer_name,
 * when not NULL, must be the name in the server's certificate. -EACCES when
 * the server's certificate is refused, -ETIMEDOUT past timeout_ms (which
 * also becomes the deadline of later reads and writes), -ECONNRESET when
 * the peer hung up, -EPROTO for any other TLS failure. */
int mtls_connect(struct mtls_ctx *ctx, int fd, const char *peer_name, int timeout_ms, struct mtls_conn **ret);
/* The handshake as server on fd (taken, as above). */
int mtls_accept(struct mtls_ctx *ctx, int fd, int timeout_ms, struct mtls_conn **ret);
/* Sends close_notify (best effort) and closes the socket; NULL is fine. */
void mtls_conn_free(struct mtls_conn *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mtls_conn *, mtls_conn_free)

/* The verified peer's name and role; "" for a client that sent no
 * certificate (a server's peer_optional: a joining node). */
const char *mtls_conn_peer(const struct mtls_conn *c, enum mtls_role *ret_role);
/* The last certificate of the chain the peer sent, PEM: on a join
 * connection, the cluster's CA (already checked against the digest). */
int mtls_conn_peer_chain_root(const struct mtls_conn *c, char **ret_pem);
int mtls_conn_fd(const struct mtls_conn *c);
/* Sets the deadline of each later read and write. */
int mtls_conn_set_timeout(struct mtls_conn *c, int timeout_ms);
/* Reads up to n bytes: > 0, 0 at a clean end (close_notify or EOF), or a
 * negative errno (-EAGAIN on a non-blocking socket with nothing ready). */
ssize_t mtls_read(struct mtls_conn *c, void *buf, size_t n);
/* Writes all n bytes, or fails. */
int mtls_write_all(struct mtls_conn *c, const void *buf, size_t n);
/* Whether decrypted bytes wait inside the TLS layer: poll(2) on the socket
 * does not see them, so check this first. */
bool mtls_pending(const struct mtls_conn *c);
/* Without blocking: true when the peer closed (close_notify, EOF, reset). */
bool mtls_peer_closed(struct mtls_conn *c);
