/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "link.h"
#include "macros.h"

static void test_addr_parse(void **state) {
        struct link_addr a;
        assert_int_equal(link_addr_parse("unix:/run/x.sock", &a), 0);
        assert_false(a.tls);
        assert_string_equal(a.path, "/run/x.sock");
        assert_int_equal(link_addr_parse("/run/y.sock", &a), 0);
        assert_string_equal(a.path, "/run/y.sock");
        assert_int_equal(link_addr_parse("tls:node-a@10.0.0.2:7422", &a), 0);
        assert_true(a.tls);
        assert_string_equal(a.name, "node-a");
        assert_string_equal(a.host, "10.0.0.2");
        assert_int_equal(a.port, 7422);
        assert_int_equal(link_addr_parse("tls:[::1]:7422", &a), 0);
        assert_string_equal(a.host, "::1");
        assert_string_equal(a.name, "");
        assert_int_equal(link_addr_parse("tls:node.example.org:1", &a), 0);
        assert_string_equal(a.host, "node.example.org");

        const char *bad[] = { "", "unix:", "unix:relative", "tcp:1.2.3.4:5", "tls:1.2.3.4", "tls:1.2.3.4:0",
                              "tls:1.2.3.4:65536", "tls:1.2.3.4:x", "tls:Bad@1.2.3.4:5", "tls:@1.2.3.4:5",
                              "tls:::1:5", "tls:[::1]5", "tls::5", "tls:a@b@c:5" };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_int_equal(link_addr_parse(bad[i], &a), -EINVAL);
        assert_int_equal(link_addr_parse(NULL, &a), -EINVAL);
}

static char *ca, *ca_key, *node_key, *node_cert, *ctl_key, *ctl_cert;

static void issue(enum mtls_role role, const char *name, char **key, char **cert) {
        _cleanup_free_ char *csr = NULL;
        assert_int_equal(mtls_key_create(key), 0);
        assert_int_equal(mtls_csr_create(*key, &csr), 0);
        assert_int_equal(mtls_cert_issue(ca, ca_key, csr, role, name, 1, cert), 0);
}

struct echo {
        int fd;
        struct mtls_ctx *tls;
        size_t frames;
        pthread_t t;
};

/* Echoes every frame back, with its type and stream, until the end. */
static void *echo_run(void *arg) {
        struct echo *e = arg;
        struct link l;
        if (link_accept(e->fd, e->tls, 5000, &l) < 0)
                return NULL;
        struct proto_reader r;
        assert_int_equal(proto_reader_init(&r), 0);
        struct proto_header h;
        const uint8_t *p;
        while (link_read_frame(&l, &r, &h, &p) > 0) {
                assert_int_equal(link_write_frame(&l, h.type, h.stream, p, h.length), 0);
                proto_reader_pop(&r, &h);
                e->frames++;
        }
        proto_reader_release(&r);
        link_close(&l);
        return NULL;
}

/* Frames of every size class cross a link both ways unchanged. */
static void roundtrip(struct mtls_ctx *server, struct mtls_ctx *client) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct echo e = { .fd = sv[1], .tls = server };
        assert_int_equal(pthread_create(&e.t, NULL, echo_run, &e), 0);
        struct link l = LINK_NULL;
        if (client) {
                struct mtls_conn *c = NULL;
                assert_int_equal(mtls_connect(client, sv[0], "node-a", 5000, &c), 0);
                l = (struct link){ .fd = mtls_conn_fd(c), .tls = c };
                enum mtls_role role;
                assert_string_equal(link_peer(&l, &role), "node-a");
                assert_int_equal(role, MTLS_ROLE_NODE);
        } else
                l.fd = sv[0];
        assert_int_equal(link_set_timeout(&l, 5000), 0);
        struct proto_reader r;
        assert_int_equal(proto_reader_init(&r), 0);
        size_t sizes[] = { 0, 1, 16 << 10, (16 << 10) + 1, PROTO_MAX_PAYLOAD };
        uint8_t *buf = malloc(PROTO_MAX_PAYLOAD);
        for (size_t i = 0; i < PROTO_MAX_PAYLOAD; i++)
                buf[i] = (uint8_t) (i * 7);
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                assert_int_equal(link_write_frame(&l, PROTO_NODE_DATA, (uint32_t) i, buf, sizes[i]), 0);
                struct proto_header h;
                const uint8_t *p;
                assert_int_equal(link_read_frame(&l, &r, &h, &p), 1);
                assert_int_equal(h.type, PROTO_NODE_DATA);
                assert_int_equal(h.stream, i);
                assert_int_equal(h.length, sizes[i]);
                if (sizes[i])
                        assert_memory_equal(p, buf, sizes[i]);
                proto_reader_pop(&r, &h);
        }
        assert_int_equal(link_write_frame(&l, PROTO_NODE_DATA, 0, buf, PROTO_MAX_PAYLOAD + 1), -EMSGSIZE);
        assert_false(link_hung_up(&l));
        assert_int_equal(link_wait(&l, 10), 0);
        free(buf);
        proto_reader_release(&r);
        link_close(&l);
        link_close(&l); /* twice is fine */
        pthread_join(e.t, NULL);
        assert_int_equal(e.frames, ARRAY_SIZE(sizes));
}

static void test_frames_plain(void **state) {
        roundtrip(NULL, NULL);
}

static void test_frames_tls(void **state) {
        assert_int_equal(mtls_ca_create(&ca, &ca_key), 0);
        issue(MTLS_ROLE_NODE, "node-a", &node_key, &node_cert);
        issue(MTLS_ROLE_CONTROL, "replica-1", &ctl_key, &ctl_cert);
        _cleanup_(mtls_ctx_freep) struct mtls_ctx *server = NULL, *client = NULL;
        assert_int_equal(mtls_ctx_new(true, ca, node_cert, node_key, MTLS_ROLE_CONTROL, &server), 0);
        assert_int_equal(mtls_ctx_new(false, ca, ctl_cert, ctl_key, MTLS_ROLE_NODE, &client), 0);
        roundtrip(server, client);
        free(ca);
        free(ca_key);
        free(node_key);
        free(node_cert);
        free(ctl_key);
        free(ctl_cert);
}

static void test_connect_errors(void **state) {
        struct link l;
        assert_int_equal(link_connect("unix:/nonexistent/airlock.sock", NULL, 1000, &l), -EHOSTDOWN);
        assert_int_equal(link_connect("tls:127.0.0.1:1", NULL, 1000, &l), -ENOTCONN);
        assert_int_equal(link_connect("bogus", NULL, 1000, &l), -EINVAL);
}

int main(void) {
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_addr_parse),
                cmocka_unit_test(test_frames_plain),
                cmocka_unit_test(test_frames_tls),
                cmocka_unit_test(test_connect_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
