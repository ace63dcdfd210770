/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's templates built from specs (store_template_*()), each test
 * run against every backend as test-store.c's are (test-store.h: SQLite,
 * and PostgreSQL under tests/unit/with-postgres.sh).
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

#include <cmocka.h>

#include "macros.h"
#include "store.h"
#include "test-store.h"
#include "util.h"

#define NODE_A "c-0123456789abcdef0123456789abcdef"
#define NODE_B "c-fedcba9876543210fedcba9876543210"
#define SPEC "{\"name\":\"web\",\"base\":{\"template\":\"minimal\"},\"steps\":[]}"

/* A row of owner's, named name, building node_name as build build_id. */
static struct store_template tpl(const char *owner, const char *name, const char *node_name, const char *build_id) {
        return (struct store_template){ .tenant_id = (char *) owner, .name = (char *) name,
                                        .node_name = (char *) node_name, .build_id = (char *) build_id,
                                        .state = "building", .node = "", .spec = SPEC };
}

static void add_tenant(struct store *s, const char *id, const char *name) {
        struct store_tenant t = { .id = (char *) id, .name = (char *) name };
        assert_int_equal(store_tenant_insert(s, &t, 100), 0);
}

static size_t refs(struct store *s, const char *node_name) {
        size_t n = SIZE_MAX;
        assert_int_equal(store_template_node_refs(s, node_name, &n), 0);
        return n;
}

static void test_template_put_get_list(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_true(v >= 17);
        add_tenant(s, "ten-a", "a");

        struct store_template t = tpl("ten-a", "web", NODE_A, "bld-0000000000000001");
        t.node = "node-1";
        t.memory_mib = 512;
        t.vcpus = 2;
        assert_int_equal(store_template_put(s, &t), 0);
        struct store_template admin = tpl("", "web", NODE_B, "bld-0000000000000002");
        assert_int_equal(store_template_put(s, &admin), 0);
        struct store_template other = tpl("", "api", NODE_A, "bld-0000000000000003");
        assert_int_equal(store_template_put(s, &other), 0);

        struct store_template got = { 0 };
        assert_int_equal(store_template_get(s, "ten-a", "web", &got), 0);
        assert_string_equal(got.tenant_id, "ten-a");
        assert_string_equal(got.name, "web");
        assert_string_equal(got.node_name, NODE_A);
        assert_string_equal(got.build_id, "bld-0000000000000001");
        assert_string_equal(got.state, "building");
        assert_null(got.error);
        assert_string_equal(got.node, "node-1");
        assert_string_equal(got.spec, SPEC);
        assert_int_equal(got.memory_mib, 512);
        assert_int_equal(got.vcpus, 2);
        assert_true(got.created_at > 0);
        assert_int_equal(got.updated_at, got.created_at);
        store_template_release(&got);
        /* the admin's: "" in, "" out; the local node likewise */
        assert_int_equal(store_template_get(s, "", "web", &got), 0);
        assert_string_equal(got.tenant_id, "");
        assert_string_equal(got.node_name, NODE_B);
        assert_string_equal(got.node, "");
        assert_int_equal(got.memory_mib, 0);
        store_template_release(&got);
        assert_int_equal(store_template_get(s, "ten-a", "api", &got), -ENOENT);
        assert_int_equal(store_template_get(s, "ten-b", "web", &got), -ENOENT);

        /* by name: one owner's, or every owner's */
        struct store_template *a = NULL;
        size_t n = 0;
        assert_int_equal(store_template_list(s, "", 100, &a, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(a[0].name, "api");
        assert_string_equal(a[1].name, "web");
        assert_string_equal(a[1].tenant_id, "");
        store_template_array_free(a, n);
        assert_int_equal(store_template_list(s, "ten-a", 100, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].tenant_id, "ten-a");
        store_template_array_free(a, n);
        assert_int_equal(store_template_list(s, NULL, 100, &a, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(a[0].name, "api");
        assert_string_equal(a[1].name, "web");
        assert_string_equal(a[1].tenant_id, "");
        assert_string_equal(a[2].name, "web");
        assert_string_equal(a[2].tenant_id, "ten-a");
        store_template_array_free(a, n);
        assert_int_equal(store_template_list(s, NULL, 2, &a, &n), 0);
        assert_int_equal(n, 2);
        store_template_array_free(a, n);
        assert_int_equal(store_template_list(s, "ten-none", 100, &a, &n), 0);
        assert_int_equal(n, 0);
        store_template_array_free(a, n);

        /* what the wrappers refuse */
        struct store_template bad = t;
        bad.state = "done";
        assert_int_equal(store_template_put(s, &bad), -EINVAL);
        bad = t;
        bad.tenant_id = NULL; /* NULL means every owner only in a list */
        assert_int_equal(store_template_put(s, &bad), -EINVAL);
        bad = t;
        bad.name = "";
        assert_int_equal(store_template_put(s, &bad), -EINVAL);
        bad = t;
        bad.spec = NULL;
        assert_int_equal(store_template_put(s, &bad), -EINVAL);
        assert_int_equal(store_template_put(s, NULL), -EINVAL);
        assert_int_equal(store_template_get(s, NULL, "web", &got), -EINVAL);
        assert_int_equal(store_template_list(s, NULL, 10, NULL, &n), -EINVAL);
}

/* A new build of a name replaces its row, keeping when it was made. */
static void test_template_replace(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_template t = tpl("", "web", NODE_A, "bld-0000000000000001");
        t.created_at = t.updated_at = 1000;
        t.memory_mib = 256;
        assert_int_equal(store_template_put(s, &t), 0);
        assert_int_equal(store_template_set_state(s, "", "web", "bld-0000000000000001", "failed", "step 2 failed", 0,
                                                  0),
                         0);

        struct store_template t2 = tpl("", "web", NODE_B, "bld-0000000000000002");
        t2.created_at = 5000; /* ignored: the row existed */
        t2.updated_at = 6000;
        t2.node = "node-2";
        t2.spec = "{\"name\":\"web\"}";
        assert_int_equal(store_template_put(s, &t2), 0);
        struct store_template got = { 0 };
        assert_int_equal(store_template_get(s, "", "web", &got), 0);
        assert_int_equal(got.created_at, 1000);
        assert_int_equal(got.updated_at, 6000);
        assert_string_equal(got.node_name, NODE_B);
        assert_string_equal(got.build_id, "bld-0000000000000002");
        assert_string_equal(got.state, "building");
        assert_null(got.error); /* the failed build's error went with it */
        assert_string_equal(got.node, "node-2");
        assert_string_equal(got.spec, "{\"name\":\"web\"}");
        assert_int_equal(got.memory_mib, 0);
        store_template_release(&got);
        assert_int_equal(refs(s, NODE_A), 0);
        assert_int_equal(refs(s, NODE_B), 1);

        struct store_template *a = NULL;
        size_t n = 0;
        assert_int_equal(store_template_list(s, NULL, 100, &a, &n), 0);
        assert_int_equal(n, 1); /* replaced, not added */
        store_template_array_free(a, n);
}

/* Only the row's latest build may settle it. */
static void test_template_set_state(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        add_tenant(s, "ten-a", "a");
        struct store_template t = tpl("ten-a", "web", NODE_A, "bld-0000000000000001");
        t.created_at = t.updated_at = 1000;
        assert_int_equal(store_template_put(s, &t), 0);

        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000001", "ready", NULL, 1024, 2),
                         0);
        struct store_template got = { 0 };
        assert_int_equal(store_template_get(s, "ten-a", "web", &got), 0);
        assert_string_equal(got.state, "ready");
        assert_null(got.error);
        assert_int_equal(got.memory_mib, 1024);
        assert_int_equal(got.vcpus, 2);
        assert_int_equal(got.created_at, 1000);
        assert_true(got.updated_at > 1000);
        store_template_release(&got);
        /* 0: the size stays; an error is set, then cleared */
        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000001", "failed", "no space", 0,
                                                  0),
                         0);
        assert_int_equal(store_template_get(s, "ten-a", "web", &got), 0);
        assert_string_equal(got.state, "failed");
        assert_string_equal(got.error, "no space");
        assert_int_equal(got.memory_mib, 1024);
        assert_int_equal(got.vcpus, 2);
        store_template_release(&got);
        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000001", "ready", NULL, 0, 4), 0);
        assert_int_equal(store_template_get(s, "ten-a", "web", &got), 0);
        assert_null(got.error);
        assert_int_equal(got.memory_mib, 1024);
        assert_int_equal(got.vcpus, 4);
        store_template_release(&got);

        /* another build replaced it: the old one's word is stale */
        struct store_template t2 = tpl("ten-a", "web", NODE_B, "bld-0000000000000002");
        assert_int_equal(store_template_put(s, &t2), 0);
        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000001", "ready", NULL, 0, 0),
                         -ESTALE);
        assert_int_equal(store_template_get(s, "ten-a", "web", &got), 0);
        assert_string_equal(got.state, "building");
        store_template_release(&got);
        /* the same name of another owner is another row */
        assert_int_equal(store_template_set_state(s, "", "web", "bld-0000000000000002", "ready", NULL, 0, 0), -ENOENT);
        assert_int_equal(store_template_delete(s, "ten-a", "web"), 0);
        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000002", "ready", NULL, 0, 0),
                         -ENOENT);
        assert_int_equal(store_template_set_state(s, "ten-a", "web", "bld-0000000000000002", "built", NULL, 0, 0),
                         -EINVAL);
        assert_int_equal(store_template_set_state(s, "ten-a", "web", NULL, "ready", NULL, 0, 0), -EINVAL);
}

/* Rows of any owner and name count as references to a node template. */
static void test_template_delete_and_refs(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        add_tenant(s, "ten-a", "a");
        add_tenant(s, "ten-b", "b");
        assert_int_equal(refs(s, NODE_A), 0);
        struct store_template t1 = tpl("ten-a", "web", NODE_A, "bld-0000000000000001");
        struct store_template t2 = tpl("ten-b", "web", NODE_A, "bld-0000000000000002");
        struct store_template t3 = tpl("", "api", NODE_A, "bld-0000000000000003");
        struct store_template t4 = tpl("", "db", NODE_B, "bld-0000000000000004");
        assert_int_equal(store_template_put(s, &t1), 0);
        assert_int_equal(store_template_put(s, &t2), 0);
        assert_int_equal(store_template_put(s, &t3), 0);
        assert_int_equal(store_template_put(s, &t4), 0);
        assert_int_equal(refs(s, NODE_A), 3);
        assert_int_equal(refs(s, NODE_B), 1);

        assert_int_equal(store_template_delete(s, "ten-a", "web"), 0);
        assert_int_equal(store_template_delete(s, "ten-a", "web"), -ENOENT);
        assert_int_equal(store_template_delete(s, "", "web"), -ENOENT); /* the admin has none called web */
        assert_int_equal(refs(s, NODE_A), 2);
        struct store_template got = { 0 };
        assert_int_equal(store_template_get(s, "ten-b", "web", &got), 0); /* another owner's stays */
        store_template_release(&got);
        assert_int_equal(store_template_delete(s, "", "api"), 0);
        assert_int_equal(refs(s, NODE_A), 1);

        /* a tenant's rows go with it; an unknown tenant has none */
        assert_int_equal(store_tenant_delete(s, "ten-b"), 0);
        assert_int_equal(refs(s, NODE_A), 0);
        assert_int_equal(store_template_get(s, "ten-b", "web", &got), -ENOENT);
        struct store_template t5 = tpl("ten-none", "web", NODE_A, "bld-0000000000000005");
        assert_int_equal(store_template_put(s, &t5), -ENOENT);
        assert_int_equal(refs(s, NODE_A), 0);
        assert_int_equal(store_template_node_refs(s, NULL, &(size_t){ 0 }), -EINVAL);
}

/* STORE_TEMPLATES_MAX rows an owner: a new name past it is refused, a new
 * build of one it has is not, and other owners are not counted. */
static void test_template_limit(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        add_tenant(s, "ten-a", "a");
        char name[32], build[32];
        for (unsigned i = 0; i < STORE_TEMPLATES_MAX; i++) {
                snprintf(name, sizeof name, "t-%03u", i);
                snprintf(build, sizeof build, "bld-%016u", i);
                struct store_template t = tpl("ten-a", name, NODE_A, build);
                assert_int_equal(store_template_put(s, &t), 0);
        }
        struct store_template more = tpl("ten-a", "t-more", NODE_A, "bld-1000000000000000");
        assert_int_equal(store_template_put(s, &more), -EDQUOT);
        assert_int_equal(store_template_get(s, "ten-a", "t-more", &(struct store_template){ 0 }), -ENOENT);
        struct store_template again = tpl("ten-a", "t-007", NODE_B, "bld-1000000000000001");
        assert_int_equal(store_template_put(s, &again), 0);
        struct store_template admin = tpl("", "t-more", NODE_A, "bld-1000000000000002");
        assert_int_equal(store_template_put(s, &admin), 0);
        assert_int_equal(refs(s, NODE_A), STORE_TEMPLATES_MAX);
        assert_int_equal(refs(s, NODE_B), 1);

        struct store_template *a = NULL;
        size_t n = 0;
        assert_int_equal(store_template_list(s, "ten-a", STORE_LIST_MAX + 1, &a, &n), 0);
        assert_int_equal(n, STORE_TEMPLATES_MAX);
        assert_string_equal(a[0].name, "t-000");
        assert_string_equal(a[STORE_TEMPLATES_MAX - 1].name, "t-099");
        store_template_array_free(a, n);

        /* one deleted: room for one more */
        assert_int_equal(store_template_delete(s, "ten-a", "t-000"), 0);
        assert_int_equal(store_template_put(s, &more), 0);
        assert_int_equal(store_template_put(s, &(struct store_template){ .tenant_id = "ten-a", .name = "t-last",
                                                                          .node_name = NODE_A,
                                                                          .build_id = "bld-1000000000000003",
                                                                          .state = "building", .spec = SPEC }),
                         -EDQUOT);
}

/* A database an airlockd before templates left (migration 16) gets the
 * table on open. */
static void test_migration_17_upgrade(void **state) {
        struct backend *b = BACKEND;
        raw_migrate_to(b, 16);
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(b->url, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_int_equal(v, b->n_migrations);
        struct store_template t = tpl("", "web", NODE_A, "bld-0000000000000001");
        assert_int_equal(store_template_put(s, &t), 0);
        assert_int_equal(refs(s, NODE_A), 1);
}

/* PostgreSQL only: two replicas putting new names for one owner at once
 * never pass its limit (the count and the write under the owner's lock). */
struct put_race {
        struct store *s;
        unsigned from; /* the first of the names it puts */
        unsigned made, limited;
};

static void *put_race_run(void *arg) {
        struct put_race *p = arg;
        for (unsigned i = 0; i < 10; i++) {
                char name[32];
                snprintf(name, sizeof name, "r-%u", p->from + i);
                struct store_template t = tpl("ten-race", name, NODE_A, "bld-0000000000000001");
                int r = store_template_put(p->s, &t);
                if (r == 0)
                        p->made++;
                else if (r == -EDQUOT)
                        p->limited++;
        }
        return NULL;
}

static void test_pg_template_limit_across_replicas(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s1 = open_pg(b);
        _cleanup_(store_closep) struct store *s2 = open_pg(b);
        add_tenant(s1, "ten-race", "race");
        for (unsigned i = 0; i < STORE_TEMPLATES_MAX - 7; i++) {
                char name[32];
                snprintf(name, sizeof name, "f-%u", i);
                struct store_template t = tpl("ten-race", name, NODE_B, "bld-0000000000000001");
                assert_int_equal(store_template_put(s1, &t), 0);
        }
        struct put_race p1 = { .s = s1, .from = 1000 }, p2 = { .s = s2, .from = 2000 };
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, put_race_run, &p1), 0);
        assert_int_equal(pthread_create(&t2, NULL, put_race_run, &p2), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        assert_int_equal(p1.made + p2.made, 7);
        assert_int_equal(p1.limited + p2.limited, 13);
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM templates WHERE tenant_id = 'ten-race'"),
                         STORE_TEMPLATES_MAX);
}

/* The tests every backend runs, each with the backend as its state. */
#define BACKEND_TESTS(b)                                                                              \
        cmocka_unit_test_prestate_setup_teardown(test_template_put_get_list, setup, teardown, b),     \
        cmocka_unit_test_prestate_setup_teardown(test_template_replace, setup, teardown, b),          \
        cmocka_unit_test_prestate_setup_teardown(test_template_set_state, setup, teardown, b),        \
        cmocka_unit_test_prestate_setup_teardown(test_template_delete_and_refs, setup, teardown, b),  \
        cmocka_unit_test_prestate_setup_teardown(test_template_limit, setup, teardown, b),            \
        cmocka_unit_test_prestate_setup_teardown(test_migration_17_upgrade, setup, teardown, b)

int main(void) {
        const struct CMUnitTest sqlite_tests[] = {
                BACKEND_TESTS(&sqlite_backend),
        };
        const struct CMUnitTest pg_tests[] = {
                BACKEND_TESTS(&pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_template_limit_across_replicas, setup, teardown,
                                                         &pg_backend),
        };
        int failed = cmocka_run_group_tests_name("sqlite", sqlite_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("postgresql", pg_tests, NULL, NULL);
        return unit_exit(failed);
}
