/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The credential audit log (src/daemon/api-audit.c) against a fake
 * airlock-node serving audit.read on a temporary Unix socket and a real
 * SQLite store: the gateway's events are stored once each (read twice, they
 * are not repeated), with their sandbox's tenant; a gateway that restarted
 * is read from its start; where reading stopped survives a restart of the
 * store; a tenant sees its own events; airlockd's own events carry the key.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"
#include "config.h"
#include "macros.h"
#include "nodes.h"
#include "proto.h"
#include "store.h"
#include "util.h"

static char dir[64];
static char url[128];
static struct daemon_config config;
static int node_fd = -1;
static pthread_t node_thread;
static atomic_bool stopping;

/* what the fake gateway holds, and what the last audit.read asked */
static pthread_mutex_t gw_lock = PTHREAD_MUTEX_INITIALIZER;
static char gw_boot[32] = "boot-a";
static json_t *gw_events; /* array, ascending seq */
static json_int_t last_after = -1;
static unsigned reads;

static void send_json(int fd, json_t *o) {
        char *s = json_dumps(o, JSON_COMPACT);
        proto_write_frame(fd, PROTO_NODE_REPLY, 0, s, strlen(s));
        free(s);
        json_decref(o);
}

static void *node_conn_thread(void *arg) {
        int fd = (int) (intptr_t) arg;
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        proto_reader_init(&r);
        if (proto_reader_read(&r, fd, &h, &p) == 1 && h.type == PROTO_NODE_REQUEST) {
                json_t *req = json_loadb((const char *) p, h.length, 0, NULL);
                proto_reader_pop(&r, &h);
                const char *op = json_string_value(json_object_get(req, "op"));
                if (op && strcmp(op, "audit.read") == 0) {
                        json_int_t after = json_integer_value(json_object_get(req, "after"));
                        json_int_t limit = json_integer_value(json_object_get(req, "limit"));
                        pthread_mutex_lock(&gw_lock);
                        last_after = after;
                        reads++;
                        json_t *out = json_array();
                        json_int_t next = 0;
                        size_t i;
                        json_t *e;
                        json_array_foreach(gw_events, i, e) {
                                json_int_t seq = json_integer_value(json_object_get(e, "seq"));
                                if (seq > next)
                                        next = seq;
                                if (seq > after && (json_int_t) json_array_size(out) < limit)
                                        json_array_append(out, e);
                        }
                        send_json(fd, json_pack("{s:b, s:s, s:o, s:I, s:s}", "ok", 1, "boot_id", gw_boot, "events", out,
                                                "next", next, "node_boot_id", "node-1"));
                        pthread_mutex_unlock(&gw_lock);
                } else
                        send_json(fd, json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "code", "not_found", "message",
                                                "no such sandbox"));
                json_decref(req);
        }
        proto_reader_release(&r);
        close(fd);
        return NULL;
}

static void *node_main(void *arg) {
        for (;;) {
                int c = accept4(node_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                pthread_t t;
                pthread_create(&t, NULL, node_conn_thread, (void *) (intptr_t) c);
                pthread_detach(t);
        }
}

static json_t *event(json_int_t seq, const char *sandbox, const char *action) {
        return json_pack("{s:I, s:I, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "seq", seq, "ts_ms",
                         (json_int_t) 1800000000000 + seq, "sandbox", sandbox, "secret", "gh", "host", "api.github.com",
                         "port", 443, "method", "GET", "path", "/user", "action", action, "reason", "ok");
}

static int setup(void **state) {
        snprintf(dir, sizeof dir, "/tmp/test-audit-XXXXXX");
        if (!mkdtemp(dir))
                return -1;
        snprintf(url, sizeof url, "sqlite:%s/airlock.db", dir);
        snprintf(config.node_socket, sizeof config.node_socket, "%s/node.sock", dir);
        config.node_timeout_s = 5;
        config.local_node = true; /* one machine: its own node */
        node_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", config.node_socket);
        if (bind(node_fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(node_fd, 16) < 0)
                return -1;
        gw_events = json_array();
        return pthread_create(&node_thread, NULL, node_main, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
        shutdown(node_fd, SHUT_RDWR);
        close(node_fd);
        pthread_join(node_thread, NULL);
        json_decref(gw_events);
        rm_rf(dir);
        return 0;
}

static json_t *audit(struct store *st, const char *tenant, const char *sandbox, const char *secret, const char *limit) {
        struct api_ctx ctx = { .config = &config,
                               .store = st,
                               .stopping = &stopping,
                               .log_ctx = "test",
                               .client_fd = -1,
                               .tenant_id = tenant };
        struct api_reply rep = { 0 };
        int r = api_audit_get(&ctx, sandbox, secret, limit, &rep);
        if (r < 0)
                return NULL;
        assert_int_equal(rep.status, 200);
        json_t *ev = json_incref(json_object_get(rep.body, "events"));
        api_reply_release(&rep);
        return ev;
}

static void test_gateway_events(void **state) {
        struct store *st = NULL;
        assert_int_equal(store_open(url, &st), 0);
        nodes_init(&config, st); /* the fake node is the local one */
        struct store_tenant t = { .id = "ten-a", .name = "a" };
        assert_int_equal(store_tenant_insert(st, &t, 10), 0);
        struct store_sandbox sb = {
                .id = "sbx-a", .tenant_id = "ten-a", .template_name = "minimal", .state = "running"
        };
        assert_int_equal(store_sandbox_insert(st, &sb), 0);

        pthread_mutex_lock(&gw_lock);
        json_array_append_new(gw_events, event(1, "sbx-a", "injected"));
        json_array_append_new(gw_events, event(2, "sbx-admin", "refused"));
        json_array_append_new(gw_events, event(3, "sbx-a", "refused"));
        /* malformed: skipped, never stored */
        json_array_append_new(gw_events, json_pack("{s:s}", "action", "injected"));
        pthread_mutex_unlock(&gw_lock);

        json_t *ev = audit(st, NULL, NULL, NULL, NULL);
        assert_non_null(ev);
        assert_int_equal(json_array_size(ev), 3);
        json_t *newest = json_array_get(ev, 0);
        assert_string_equal(json_string_value(json_object_get(newest, "action")), "refused");
        assert_string_equal(json_string_value(json_object_get(newest, "actor")), "gateway");
        assert_string_equal(json_string_value(json_object_get(newest, "tenant_id")), "ten-a");
        assert_string_equal(json_string_value(json_object_get(newest, "host")), "api.github.com");
        assert_int_equal(json_integer_value(json_object_get(newest, "port")), 443);
        assert_int_equal(json_integer_value(json_object_get(newest, "ts_ms")), 1800000000003);
        json_decref(ev);

        /* read again: nothing repeated, and the node was asked after 3 */
        ev = audit(st, NULL, NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 3);
        json_decref(ev);
        pthread_mutex_lock(&gw_lock);
        assert_int_equal(last_after, 3);
        pthread_mutex_unlock(&gw_lock);

        /* a tenant sees its sandbox's events only; filters */
        ev = audit(st, "ten-a", NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 2);
        json_decref(ev);
        ev = audit(st, "ten-b", NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 0);
        json_decref(ev);
        ev = audit(st, NULL, "sbx-admin", "gh", "1");
        assert_int_equal(json_array_size(ev), 1);
        json_decref(ev);
        assert_null(audit(st, NULL, NULL, NULL, "0"));
        assert_null(audit(st, NULL, NULL, NULL, "1001"));

        /* the gateway restarted: its new sequence is read from the start */
        pthread_mutex_lock(&gw_lock);
        snprintf(gw_boot, sizeof gw_boot, "boot-b");
        json_array_clear(gw_events);
        json_array_append_new(gw_events, event(1, "sbx-a", "injected"));
        json_array_append_new(gw_events, event(2, "sbx-a", "injected"));
        pthread_mutex_unlock(&gw_lock);
        ev = audit(st, NULL, NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 5);
        json_decref(ev);

        /* airlockd restarts: where reading stopped is in the store */
        store_close(st);
        st = NULL;
        assert_int_equal(store_open(url, &st), 0);
        nodes_init(&config, st);
        pthread_mutex_lock(&gw_lock);
        unsigned before = reads;
        pthread_mutex_unlock(&gw_lock);
        ev = audit(st, NULL, NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 5);
        json_decref(ev);
        pthread_mutex_lock(&gw_lock);
        assert_int_equal(last_after, 2);
        assert_int_equal(reads, before + 1);
        pthread_mutex_unlock(&gw_lock);

        /* airlockd's own events carry the key that did it */
        struct api_ctx ctx = { .config = &config,
                               .store = st,
                               .stopping = &stopping,
                               .log_ctx = "test",
                               .client_fd = -1,
                               .tenant_id = "ten-a",
                               .key_id = "key-0123456789abcdef" };
        api_audit_record(&ctx, "secret.create", "ten-a", NULL, "gh");
        ev = audit(st, "ten-a", NULL, NULL, NULL);
        assert_int_equal(json_array_size(ev), 5);
        newest = json_array_get(ev, 0);
        assert_string_equal(json_string_value(json_object_get(newest, "action")), "secret.create");
        assert_string_equal(json_string_value(json_object_get(newest, "actor")), "key-0123456789abcdef");
        json_decref(ev);
        store_close(st);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_gateway_events, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
