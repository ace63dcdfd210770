/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "macros.h"
#include "mtls.h"

/* Two clusters' CAs, and certificates of each role from the first. */
static char *ca, *ca_key, *other_ca, *other_ca_key;

struct ident {
        char *key, *cert;
};
static struct ident control1, node1, node2, stranger;

static void issue(const char *c, const char *k, enum mtls_role role, const char *name, struct ident *ret) {
        _cleanup_free_ char *csr = NULL;
        assert_int_equal(mtls_key_create(&ret->key), 0);
        assert_int_equal(mtls_csr_create(ret->key, &csr), 0);
        assert_int_equal(mtls_cert_issue(c, k, csr, role, name, 30, &ret->cert), 0);
}

static int setup(void **state) {
        if (mtls_ca_create(&ca, &ca_key) < 0 || mtls_ca_create(&other_ca, &other_ca_key) < 0)
                return -1;
        issue(ca, ca_key, MTLS_ROLE_CONTROL, "replica-1", &control1);
        issue(ca, ca_key, MTLS_ROLE_NODE, "node-a", &node1);
        issue(ca, ca_key, MTLS_ROLE_NODE, "node-b", &node2);
        issue(other_ca, other_ca_key, MTLS_ROLE_CONTROL, "replica-1", &stranger);
        return 0;
}

static void ident_free(struct ident *i) {
        free(i->key);
        free(i->cert);
}

static int teardown(void **state) {
        ident_free(&control1);
        ident_free(&node1);
        ident_free(&node2);
        ident_free(&stranger);
        free(ca);
        free(ca_key);
        free(other_ca);
        free(other_ca_key);
        return 0;
}

static void test_names(void **state) {
        assert_true(mtls_name_valid("node-a"));
        assert_true(mtls_name_valid("n1"));
        assert_false(mtls_name_valid(""));
        assert_false(mtls_name_valid("-a"));
        assert_false(mtls_name_valid("a-"));
        assert_false(mtls_name_valid("Node"));
        assert_false(mtls_name_valid("a/b"));
        assert_false(mtls_name_valid("0123456789012345678901234567890123456789012345678901234567890123"));
}

static void test_certificates(void **state) {
        enum mtls_role role;
        char name[MTLS_NAME_MAX + 1];
        int64_t not_after;
        assert_int_equal(mtls_cert_info(node1.cert, &role, name, &not_after), 0);
        assert_int_equal(role, MTLS_ROLE_NODE);
        assert_string_equal(name, "node-a");
        assert_true(not_after > 0);
        assert_int_equal(mtls_cert_info(control1.cert, &role, name, NULL), 0);
        assert_int_equal(role, MTLS_ROLE_CONTROL);

        assert_int_equal(mtls_cert_verify(ca, node1.cert, MTLS_ROLE_NODE, "node-a"), 0);
        assert_int_equal(mtls_cert_verify(ca, node1.cert, MTLS_ROLE_NODE, NULL), 0);
        assert_int_equal(mtls_cert_verify(ca, node1.cert, MTLS_ROLE_NODE, "node-b"), -EACCES);
        assert_int_equal(mtls_cert_verify(ca, node1.cert, MTLS_ROLE_CONTROL, NULL), -EACCES);
        assert_int_equal(mtls_cert_verify(other_ca, node1.cert, MTLS_ROLE_NODE, NULL), -EACCES);
        assert_int_equal(mtls_cert_verify(ca, stranger.cert, MTLS_ROLE_CONTROL, NULL), -EACCES);
        /* a CA is not one of ours to be a peer */
        assert_int_equal(mtls_cert_info(ca, &role, name, NULL), -EBADMSG);

        char d1[MTLS_DIGEST_HEX + 1], d2[MTLS_DIGEST_HEX + 1];
        assert_int_equal(mtls_cert_digest(ca, d1), 0);
        assert_int_equal(mtls_cert_digest(other_ca, d2), 0);
        assert_int_equal(strlen(d1), MTLS_DIGEST_HEX);
        assert_string_not_equal(d1, d2);
        assert_int_equal(mtls_cert_digest("not a certificate", d1), -EBADMSG);
}

static void test_issue_refuses(void **state) {
        _cleanup_free_ char *csr = NULL, *cert = NULL;
        assert_int_equal(mtls_csr_create(node1.key, &csr), 0);
        assert_int_equal(mtls_cert_issue(ca, ca_key, csr, MTLS_ROLE_NODE, "Bad Name", 30, &cert), -EINVAL);
        assert_int_equal(mtls_cert_issue(ca, ca_key, "garbage", MTLS_ROLE_NODE, "n", 30, &cert), -EBADMSG);
        /* a CSR whose signature does not match its key: bytes flipped in the middle */
        char *bad = strdup(csr);
        size_t mid = strlen(bad) / 2;
        bad[mid] = bad[mid] == 'A' ? 'B' : 'A';
        assert_true(mtls_cert_issue(ca, ca_key, bad, MTLS_ROLE_NODE, "n", 30, &cert) < 0);
        free(bad);
        assert_null(cert);
        assert_int_equal(mtls_cert_issue(ca, other_ca_key, csr, MTLS_ROLE_NODE, "n", 30, &cert), -EINVAL);
}

/* A server on one end of a socketpair, in a thread: handshake, echo one
 * line, then wait for the client's close. */
struct server {
        struct mtls_ctx *ctx;
        int fd;
        int result;
        char peer[MTLS_NAME_MAX + 1];
        pthread_t t;
};

static void *server_run(void *arg) {
        struct server *s = arg;
        struct mtls_conn *c = NULL;
        s->result = mtls_accept(s->ctx, s->fd, 5000, &c);
        if (s->result < 0)
                return NULL;
        snprintf(s->peer, sizeof s->peer, "%s", mtls_conn_peer(c, NULL));
        char buf[64];
        ssize_t n = mtls_read(c, buf, sizeof buf);
        if (n > 0)
                s->result = mtls_write_all(c, buf, (size_t) n);
        while (mtls_read(c, buf, sizeof buf) > 0) {
        }
        mtls_conn_free(c);
        return NULL;
}

/* Connects a client ctx to a server ctx; returns the client's result and
 * the server's in *server_result. */
static int pair(struct mtls_ctx *client, struct mtls_ctx *server, const char *peer_name, int *server_result,
                char *server_saw) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct server s = { .ctx = server, .fd = sv[1] };
        assert_int_equal(pthread_create(&s.t, NULL, server_run, &s), 0);
        struct mtls_conn *c = NULL;
        int r = mtls_connect(client, sv[0], peer_name, 5000, &c);
        if (r >= 0) {
                /* TLS 1.3: a client learns that the server refused its
                 * certificate only when it reads */
                char buf[8];
                r = mtls_write_all(c, "ping", 4);
                ssize_t n = r < 0 ? r : mtls_read(c, buf, sizeof buf);
                if (n == 4) {
                        assert_memory_equal(buf, "ping", 4);
                        assert_false(mtls_peer_closed(c));
                } else
                        r = n < 0 ? (int) n : -ECONNRESET;
                mtls_conn_free(c);
        }
        pthread_join(s.t, NULL);
        *server_result = s.result;
        if (server_saw)
                strcpy(server_saw, s.peer);
        return r;
}

static void test_mutual_tls(void **state) {
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *node_server = NULL, *control_client = NULL, *node_client = NULL,
                                                  *stranger_client = NULL;
        assert_int_equal(mtls_ctx_new(true, ca, node1.cert, node1.key, MTLS_ROLE_CONTROL, &node_server), 0);
        assert_int_equal(mtls_ctx_new(false, ca, control1.cert, control1.key, MTLS_ROLE_NODE, &control_client), 0);
        assert_int_equal(mtls_ctx_new(false, ca, node2.cert, node2.key, MTLS_ROLE_NODE, &node_client), 0);
        assert_int_equal(
                mtls_ctx_new(false, other_ca, stranger.cert, stranger.key, MTLS_ROLE_NODE, &stranger_client), 0);
        int sr;
        char saw[MTLS_NAME_MAX + 1];

        /* the control: a replica reaches the node it names */
        assert_int_equal(pair(control_client, node_server, "node-a", &sr, saw), 0);
        assert_int_equal(sr, 0);
        assert_string_equal(saw, "replica-1");
        /* the node is not the one the replica wanted */
        assert_int_equal(pair(control_client, node_server, "node-b", &sr, NULL), -EACCES);
        /* another node is no control plane to a node */
        assert_true(pair(node_client, node_server, NULL, &sr, NULL) < 0);
        assert_true(sr < 0);
        /* another cluster's replica: neither side accepts the other */
        assert_true(pair(stranger_client, node_server, NULL, &sr, NULL) < 0);
        assert_true(sr < 0);
}

static void test_join_and_anonymous(void **state) {
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *control_server = NULL, *strict = NULL, *join_ok = NULL,
                                                  *join_bad = NULL;
        assert_int_equal(mtls_ctx_new(true, ca, control1.cert, control1.key, MTLS_ROLE_NODE, &control_server), 0);
        assert_int_equal(mtls_ctx_new(true, ca, node1.cert, node1.key, MTLS_ROLE_CONTROL, &strict), 0);
        mtls_ctx_allow_anonymous(control_server);
        char digest[MTLS_DIGEST_HEX + 1], other[MTLS_DIGEST_HEX + 1];
        assert_int_equal(mtls_cert_digest(ca, digest), 0);
        assert_int_equal(mtls_cert_digest(other_ca, other), 0);
        assert_int_equal(mtls_ctx_new_join(digest, &join_ok), 0);
        assert_int_equal(mtls_ctx_new_join(other, &join_bad), 0);
        assert_int_equal(mtls_ctx_new_join("abc", &join_bad), -EINVAL);

        int sr;
        char saw[MTLS_NAME_MAX + 1] = "x";
        /* a joining node without a certificate reaches a replica whose CA
         * hashes to its token's digest, and is anonymous there */
        assert_int_equal(pair(join_ok, control_server, NULL, &sr, saw), 0);
        assert_int_equal(sr, 0);
        assert_string_equal(saw, "");
        /* a token of another cluster: refused before anything is sent */
        assert_int_equal(pair(join_bad, control_server, NULL, &sr, NULL), -EACCES);
        /* a server that wants certificates lets no anonymous client in */
        assert_true(pair(join_ok, strict, NULL, &sr, NULL) < 0);
        assert_true(sr < 0);

        /* the CA the join connection saw is the cluster's */
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct server s = { .ctx = control_server, .fd = sv[1] };
        assert_int_equal(pthread_create(&s.t, NULL, server_run, &s), 0);
        struct mtls_conn *c = NULL;
        assert_int_equal(mtls_connect(join_ok, sv[0], NULL, 5000, &c), 0);
        _cleanup_free_ char *root = NULL;
        assert_int_equal(mtls_conn_peer_chain_root(c, &root), 0);
        char got[MTLS_DIGEST_HEX + 1];
        assert_int_equal(mtls_cert_digest(root, got), 0);
        assert_string_equal(got, digest);
        enum mtls_role role;
        assert_string_equal(mtls_conn_peer(c, &role), "replica-1");
        assert_int_equal(role, MTLS_ROLE_CONTROL);
        mtls_conn_free(c);
        pthread_join(s.t, NULL);
}

static void test_peer_closed_and_eof(void **state) {
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *node_server = NULL, *control_client = NULL;
        assert_int_equal(mtls_ctx_new(true, ca, node1.cert, node1.key, MTLS_ROLE_CONTROL, &node_server), 0);
        assert_int_equal(mtls_ctx_new(false, ca, control1.cert, control1.key, MTLS_ROLE_NODE, &control_client), 0);
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct server s = { .ctx = node_server, .fd = sv[1] };
        assert_int_equal(pthread_create(&s.t, NULL, server_run, &s), 0);
        struct mtls_conn *c = NULL;
        assert_int_equal(mtls_connect(control_client, sv[0], NULL, 5000, &c), 0);
        assert_int_equal(mtls_write_all(c, "x", 1), 0);
        char b[4];
        assert_int_equal(mtls_read(c, b, sizeof b), 1);
        /* the server waits for us: nothing to read, not closed */
        assert_int_equal(mtls_conn_set_timeout(c, 100), 0);
        assert_int_equal(mtls_read(c, b, sizeof b), -EAGAIN);
        assert_false(mtls_peer_closed(c));
        mtls_conn_free(c);
        pthread_join(s.t, NULL);
        assert_int_equal(s.result, 0);
}

int main(void) {
        signal(SIGPIPE, SIG_IGN); /* a refused peer hangs up while the other writes */
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_certificates),
                cmocka_unit_test(test_issue_refuses),
                cmocka_unit_test(test_mutual_tls),
                cmocka_unit_test(test_join_and_anonymous),
                cmocka_unit_test(test_peer_closed_and_eof),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
