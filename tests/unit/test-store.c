/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's unit tests, each run against every backend: SQLite (a fresh
 * database file) and PostgreSQL (the database at AIRLOCK_TEST_PG_URL, its
 * schema emptied before each test; meson runs this binary under
 * tests/unit/with-postgres.sh, which starts a throwaway server and sets
 * it). The tests speak only store.h, but for the few that prepare a
 * database by hand (raw_*(), each backend's own client). What they share
 * with test-store-templates.c is in test-store.h.
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

static void test_open_bad_url(void **state) {
        struct store *s = NULL;
        assert_int_equal(store_open("nocolon", &s), -EINVAL);
        assert_int_equal(store_open("mysql://localhost/x", &s), -EPROTONOSUPPORT);
        assert_int_equal(store_open("sqlite:", &s), -EINVAL);
        /* PostgreSQL: not a connection URI, a malformed one, no server */
        assert_int_equal(store_open("postgres:host=x", &s), -EINVAL);
        assert_int_equal(store_open("postgresql://h/db?nosuchoption=1", &s), -EINVAL);
        assert_int_equal(store_open("postgresql:///x?host=/nonexistent&connect_timeout=2", &s), -EIO);
        assert_null(s);
}

static void test_migrations_idempotent(void **state) {
        struct store *s = NULL;
        unsigned v1 = 0, v2 = 0;
        assert_int_equal(store_open(URL, &s), 0);
        assert_int_equal(store_schema_version(s, &v1), 0);
        assert_true(v1 >= 1);
        struct store_sandbox sb = { .id = "sbx-keep", .template_name = "python", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        store_close(s);

        s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        assert_int_equal(store_schema_version(s, &v2), 0);
        assert_int_equal(v1, v2);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-keep", &got), 0); /* data survives reopen */
        store_sandbox_release(&got);
        store_close(s);
}

static void test_sandbox_crud(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_sandbox sb = {
                .id = "sbx-0001", .template_name = "python", .state = "creating",
                .metadata = "{\"owner\":\"me\"}", .env_keys = "[\"A\"]",
        };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        assert_int_equal(store_sandbox_insert(s, &sb), -EEXIST);

        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-0001", &got), 0);
        assert_string_equal(got.template_name, "python");
        assert_string_equal(got.state, "creating");
        assert_string_equal(got.metadata, "{\"owner\":\"me\"}");
        assert_string_equal(got.env_keys, "[\"A\"]");
        assert_null(got.error);
        assert_true(got.created_at > 0);
        store_sandbox_release(&got);

        assert_int_equal(store_sandbox_update_state(s, "sbx-0001", "failed", "vm died"), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-0001", &got), 0);
        assert_string_equal(got.state, "failed");
        assert_string_equal(got.error, "vm died");
        store_sandbox_release(&got);

        struct store_sandbox sb2 = { .id = "sbx-0002", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb2), 0);
        struct store_sandbox *a = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_list(s, 100, &a, &n), 0);
        assert_int_equal(n, 2);
        store_sandbox_array_free(a, n);
        assert_int_equal(store_sandbox_list(s, 1, &a, &n), 0);
        assert_int_equal(n, 1);
        store_sandbox_array_free(a, n);

        assert_int_equal(store_sandbox_delete(s, "sbx-0001"), 0);
        assert_int_equal(store_sandbox_delete(s, "sbx-0001"), -ENOENT);
        assert_int_equal(store_sandbox_get(s, "sbx-0001", &got), -ENOENT);
        assert_int_equal(store_sandbox_update_state(s, "sbx-nope", "running", NULL), -ENOENT);
}

static void test_sessions(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_sandbox sb = { .id = "sbx-s", .template_name = "python", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);

        struct store_session ses = { .id = "ses-1", .sandbox_id = "sbx-s", .cmd = "[\"bash\"]", .pty = true };
        memset(ses.token_hash, 0xab, sizeof ses.token_hash);
        assert_int_equal(store_session_insert(s, &ses), 0);
        assert_int_equal(store_session_insert(s, &ses), -EEXIST);
        struct store_session orphan = { .id = "ses-2", .sandbox_id = "sbx-none", .cmd = "[]" };
        assert_int_equal(store_session_insert(s, &orphan), -ENOENT); /* foreign key */

        struct store_session got = { 0 };
        assert_int_equal(store_session_get(s, "ses-1", &got), 0);
        assert_string_equal(got.sandbox_id, "sbx-s");
        assert_string_equal(got.cmd, "[\"bash\"]");
        assert_true(got.pty);
        assert_memory_equal(got.token_hash, ses.token_hash, STORE_HASH_SIZE);
        store_session_release(&got);

        /* deleting the sandbox deletes its sessions */
        assert_int_equal(store_sandbox_delete(s, "sbx-s"), 0);
        assert_int_equal(store_session_get(s, "ses-1", &got), -ENOENT);
        assert_int_equal(store_session_delete(s, "ses-1"), -ENOENT);
}

static void test_api_keys(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        uint8_t h1[STORE_HASH_SIZE], h2[STORE_HASH_SIZE];
        memset(h1, 1, sizeof h1);
        memset(h2, 2, sizeof h2);
        assert_int_equal(store_api_key_check(s, h1), -EACCES);
        assert_int_equal(store_api_key_insert(s, "admin", h1), 0);
        assert_int_equal(store_api_key_check(s, h1), 0);
        assert_int_equal(store_api_key_check(s, h2), -EACCES);
        /* re-inserting a name replaces its hash: the old token is revoked */
        assert_int_equal(store_api_key_insert(s, "admin", h2), 0);
        assert_int_equal(store_api_key_check(s, h2), 0);
        assert_int_equal(store_api_key_check(s, h1), -EACCES);
        /* the same hash under two names is refused */
        assert_int_equal(store_api_key_insert(s, "other", h2), -EEXIST);
}

static void test_lifecycle_rows(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_true(v >= 2);

        struct store_sandbox sb = { .id = "sbx-life", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-life", &got), 0);
        assert_null(got.desired_state);
        store_sandbox_release(&got);

        /* compare-and-set: only from the expected state */
        assert_int_equal(store_sandbox_transition(s, "sbx-life", "running", "pausing", "paused"), 0);
        assert_int_equal(store_sandbox_transition(s, "sbx-life", "running", "pausing", "paused"), -ESTALE);
        assert_int_equal(store_sandbox_transition(s, "sbx-none", "running", "pausing", "paused"), -ESTALE);
        assert_int_equal(store_sandbox_update_state(s, "sbx-life", "paused", NULL), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-life", &got), 0);
        assert_string_equal(got.state, "paused");
        assert_string_equal(got.desired_state, "paused"); /* kept by update_state */
        store_sandbox_release(&got);
        /* NULL desired keeps the previous one */
        assert_int_equal(store_sandbox_transition(s, "sbx-life", "paused", "resuming", NULL), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-life", &got), 0);
        assert_string_equal(got.state, "resuming");
        assert_string_equal(got.desired_state, "paused");
        store_sandbox_release(&got);

        struct store_operation op = { .id = "op-1", .sandbox_id = "sbx-life", .verb = "pause", .state = "pending",
                                      .idempotency_key = "k1" };
        assert_int_equal(store_operation_insert(s, &op), 0);
        assert_int_equal(store_operation_insert(s, &op), -EEXIST); /* same id */
        struct store_operation op2 = { .id = "op-2", .sandbox_id = "sbx-life", .verb = "stop", .state = "pending",
                                       .idempotency_key = "k1" };
        assert_int_equal(store_operation_insert(s, &op2), -EEXIST); /* same key */
        op2.idempotency_key = NULL;
        assert_int_equal(store_operation_insert(s, &op2), 0);
        op2.id = "op-3";
        assert_int_equal(store_operation_insert(s, &op2), 0); /* many rows without a key */
        struct store_operation bad = { .id = "op-4", .sandbox_id = "sbx-life", .verb = "stop", .state = "bogus" };
        assert_int_equal(store_operation_insert(s, &bad), -EINVAL);

        struct store_operation g = { 0 };
        assert_int_equal(store_operation_find_by_key(s, "k1", &g), 0);
        assert_string_equal(g.id, "op-1");
        assert_string_equal(g.verb, "pause");
        assert_string_equal(g.state, "pending");
        assert_int_equal(g.finished_at, 0);
        assert_true(g.created_at > 0);
        store_operation_release(&g);
        assert_int_equal(store_operation_find_by_key(s, "nokey", &g), -ENOENT);
        assert_int_equal(store_operation_get(s, "op-none", &g), -ENOENT);

        assert_int_equal(store_operation_update(s, "op-1", "running", NULL, NULL), 0);
        assert_int_equal(store_operation_get(s, "op-1", &g), 0);
        assert_string_equal(g.state, "running");
        assert_int_equal(g.finished_at, 0);
        store_operation_release(&g);
        assert_int_equal(store_operation_update(s, "op-1", "succeeded", NULL, "{\"state\":\"paused\"}"), 0);
        assert_int_equal(store_operation_get(s, "op-1", &g), 0);
        assert_string_equal(g.state, "succeeded");
        assert_string_equal(g.result, "{\"state\":\"paused\"}");
        assert_null(g.error);
        assert_true(g.finished_at >= g.created_at);
        store_operation_release(&g);
        assert_int_equal(store_operation_update(s, "op-none", "failed", NULL, NULL), -ENOENT);
        assert_int_equal(store_operation_update(s, "op-1", "bogus", NULL, NULL), -EINVAL);

        /* start-up repair fails what was unfinished, nothing else */
        assert_int_equal(store_operation_fail_unfinished(s, "{\"code\":\"internal\"}"), 0);
        assert_int_equal(store_operation_get(s, "op-2", &g), 0);
        assert_string_equal(g.state, "failed");
        assert_string_equal(g.error, "{\"code\":\"internal\"}");
        assert_true(g.finished_at > 0);
        store_operation_release(&g);
        assert_int_equal(store_operation_get(s, "op-1", &g), 0);
        assert_string_equal(g.state, "succeeded");
        store_operation_release(&g);

        /* operations outlive their sandbox */
        assert_int_equal(store_sandbox_delete(s, "sbx-life"), 0);
        assert_int_equal(store_operation_get(s, "op-1", &g), 0);
        store_operation_release(&g);
}

static void test_operation_progress(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_true(v >= 4);

        struct store_operation op = { .id = "op-p", .sandbox_id = "sbx-p", .verb = "create", .state = "running",
                                      .idempotency_key = "kp", .request_hash = "abc123" };
        assert_int_equal(store_operation_insert(s, &op), 0);
        struct store_operation g = { 0 };
        assert_int_equal(store_operation_find_by_key(s, "kp", &g), 0);
        assert_int_equal(g.progress, 0); /* a new operation has done nothing yet */
        assert_null(g.stage);
        assert_string_equal(g.request_hash, "abc123");
        store_operation_release(&g);

        assert_int_equal(store_operation_progress(s, "op-p", 10, "creating"), 0);
        assert_int_equal(store_operation_get(s, "op-p", &g), 0);
        assert_int_equal(g.progress, 10);
        assert_string_equal(g.stage, "creating");
        assert_string_equal(g.state, "running");
        store_operation_release(&g);
        assert_int_equal(store_operation_progress(s, "op-p", 101, NULL), -EINVAL);
        assert_int_equal(store_operation_progress(s, "op-p", -1, NULL), -EINVAL);
        assert_int_equal(store_operation_progress(s, "op-none", 10, NULL), -ENOENT);

        /* success means done: 100, no stage */
        assert_int_equal(store_operation_update(s, "op-p", "succeeded", NULL, "{}"), 0);
        assert_int_equal(store_operation_get(s, "op-p", &g), 0);
        assert_int_equal(g.progress, 100);
        assert_null(g.stage);
        store_operation_release(&g);
        /* a finished operation keeps what it ended with */
        assert_int_equal(store_operation_progress(s, "op-p", 50, "again"), -ENOENT);

        /* failure keeps the last step, also through start-up repair */
        struct store_operation f = { .id = "op-f", .sandbox_id = "sbx-p", .verb = "stop", .state = "pending",
                                     .progress = 5, .stage = "queued" };
        assert_int_equal(store_operation_insert(s, &f), 0);
        assert_int_equal(store_operation_progress(s, "op-f", 10, "stopping"), 0);
        assert_int_equal(store_operation_update(s, "op-f", "failed", "{\"code\":\"timeout\"}", NULL), 0);
        assert_int_equal(store_operation_get(s, "op-f", &g), 0);
        assert_int_equal(g.progress, 10);
        assert_string_equal(g.stage, "stopping");
        assert_null(g.request_hash);
        store_operation_release(&g);
        struct store_operation u = { .id = "op-u", .sandbox_id = "sbx-p", .verb = "delete", .state = "running" };
        assert_int_equal(store_operation_insert(s, &u), 0);
        assert_int_equal(store_operation_progress(s, "op-u", 10, "deleting"), 0);
        assert_int_equal(store_operation_fail_unfinished(s, "{\"code\":\"internal\"}"), 0);
        assert_int_equal(store_operation_get(s, "op-u", &g), 0);
        assert_string_equal(g.state, "failed");
        assert_int_equal(g.progress, 10);
        assert_string_equal(g.stage, "deleting");
        store_operation_release(&g);

        struct store_operation bad = { .id = "op-b", .sandbox_id = "sbx-p", .verb = "stop", .state = "pending",
                                       .progress = 150 };
        assert_int_equal(store_operation_insert(s, &bad), -EINVAL);
}

static void test_snapshots(void **state) {
        struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_sandbox sb = { .id = "sbx-snap", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        struct store_snapshot a = { .id = "snap-a", .sandbox_id = "sbx-snap", .kind = "disk", .size = 4096,
                                    .created_at = 1000 };
        struct store_snapshot b = { .id = "snap-b", .sandbox_id = "sbx-snap", .kind = "disk", .size = 8192,
                                    .created_at = 2000 };
        assert_int_equal(store_snapshot_insert(s, &a), 0);
        assert_int_equal(store_snapshot_insert(s, &b), 0);
        assert_int_equal(store_snapshot_insert(s, &a), -EEXIST);
        struct store_snapshot orphan = { .id = "snap-o", .sandbox_id = "sbx-none", .kind = "disk" };
        assert_int_equal(store_snapshot_insert(s, &orphan), -ENOENT); /* foreign key */
        struct store_snapshot bad = { .id = "snap-x", .sandbox_id = "sbx-snap", .kind = "disk", .size = -1 };
        assert_int_equal(store_snapshot_insert(s, &bad), -EINVAL);

        struct store_snapshot g = { 0 };
        assert_int_equal(store_snapshot_get(s, "snap-a", &g), 0);
        assert_string_equal(g.sandbox_id, "sbx-snap");
        assert_string_equal(g.kind, "disk");
        assert_int_equal(g.size, 4096);
        assert_int_equal(g.created_at, 1000);
        store_snapshot_release(&g);
        assert_int_equal(store_snapshot_get(s, "snap-none", &g), -ENOENT);

        struct store_snapshot *list = NULL;
        size_t n = 0;
        assert_int_equal(store_snapshot_list(s, "sbx-snap", 10, &list, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(list[0].id, "snap-b"); /* newest first */
        assert_string_equal(list[1].id, "snap-a");
        store_snapshot_array_free(list, n);
        assert_int_equal(store_snapshot_list(s, "sbx-snap", 1, &list, &n), 0);
        assert_int_equal(n, 1);
        store_snapshot_array_free(list, n);

        assert_int_equal(store_snapshot_delete(s, "snap-a"), 0);
        assert_int_equal(store_snapshot_delete(s, "snap-a"), -ENOENT);

        /* deleting the sandbox deletes its snapshots */
        assert_int_equal(store_sandbox_delete(s, "sbx-snap"), 0);
        assert_int_equal(store_snapshot_get(s, "snap-b", &g), -ENOENT);
        assert_int_equal(store_snapshot_list(s, "sbx-snap", 10, &list, &n), 0);
        assert_int_equal(n, 0);
        store_snapshot_array_free(list, n);
        store_close(s);
}

static void test_snapshot_pinned_and_policy(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_true(v >= 5);

        /* a sandbox without a policy of its own uses the global one: NULL */
        struct store_sandbox plain = { .id = "sbx-plain", .template_name = "minimal", .state = "running" };
        struct store_sandbox own = { .id = "sbx-own", .template_name = "minimal", .state = "running",
                                     .snapshot_policy = "{\"disk_every\":0}" };
        assert_int_equal(store_sandbox_insert(s, &plain), 0);
        assert_int_equal(store_sandbox_insert(s, &own), 0);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-plain", &got), 0);
        assert_null(got.snapshot_policy);
        store_sandbox_release(&got);
        assert_int_equal(store_sandbox_get(s, "sbx-own", &got), 0);
        assert_string_equal(got.snapshot_policy, "{\"disk_every\":0}");
        store_sandbox_release(&got);
        struct store_sandbox *a = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_list(s, 10, &a, &n), 0);
        assert_int_equal(n, 2);
        for (size_t i = 0; i < n; i++)
                if (strcmp(a[i].id, "sbx-own") == 0)
                        assert_string_equal(a[i].snapshot_policy, "{\"disk_every\":0}");
                else
                        assert_null(a[i].snapshot_policy);
        store_sandbox_array_free(a, n);

        /* idle timeout: absent (the global default), 0 (never) or seconds */
        assert_int_equal(store_sandbox_get(s, "sbx-plain", &got), 0);
        assert_false(got.has_idle_timeout);
        store_sandbox_release(&got);
        struct store_sandbox never = { .id = "sbx-never", .template_name = "minimal", .state = "running",
                                       .has_idle_timeout = true, .idle_timeout_s = 0 };
        struct store_sandbox soon = { .id = "sbx-soon", .template_name = "minimal", .state = "running",
                                      .has_idle_timeout = true, .idle_timeout_s = 90 };
        assert_int_equal(store_sandbox_insert(s, &never), 0);
        assert_int_equal(store_sandbox_insert(s, &soon), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-never", &got), 0);
        assert_true(got.has_idle_timeout);
        assert_int_equal(got.idle_timeout_s, 0);
        store_sandbox_release(&got);
        assert_int_equal(store_sandbox_list(s, 10, &a, &n), 0);
        for (size_t i = 0; i < n; i++)
                if (strcmp(a[i].id, "sbx-soon") == 0)
                        assert_int_equal(a[i].idle_timeout_s, 90);
        store_sandbox_array_free(a, n);
        assert_int_equal(store_sandbox_delete(s, "sbx-never"), 0);
        assert_int_equal(store_sandbox_delete(s, "sbx-soon"), 0);

        /* pinned round-trips, through get and list */
        struct store_snapshot on_demand = { .id = "snap-p", .sandbox_id = "sbx-own", .kind = "disk", .size = 1,
                                            .created_at = 1000, .pinned = true };
        struct store_snapshot scheduled = { .id = "snap-s", .sandbox_id = "sbx-own", .kind = "full", .size = 2,
                                            .created_at = 2000, .pinned = false };
        assert_int_equal(store_snapshot_insert(s, &on_demand), 0);
        assert_int_equal(store_snapshot_insert(s, &scheduled), 0);
        struct store_snapshot g = { 0 };
        assert_int_equal(store_snapshot_get(s, "snap-p", &g), 0);
        assert_true(g.pinned);
        store_snapshot_release(&g);
        assert_int_equal(store_snapshot_get(s, "snap-s", &g), 0);
        assert_false(g.pinned);
        assert_string_equal(g.kind, "full");
        store_snapshot_release(&g);
        struct store_snapshot *list = NULL;
        assert_int_equal(store_snapshot_list(s, "sbx-own", 10, &list, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(list[0].id, "snap-s");
        assert_false(list[0].pinned);
        assert_true(list[1].pinned);
        store_snapshot_array_free(list, n);
}

/* A database an older airlockd left at migration from, with sql run in it
 * (its rows), opened by this one: every migration applied since. */
static struct store *open_upgraded(struct backend *b, unsigned from, const char *sql) {
        raw_migrate_to(b, from);
        assert_int_equal(raw_exec(b, sql), 0);
        struct store *s = NULL;
        assert_int_equal(store_open(b->url, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_int_equal(v, b->n_migrations);
        assert_true(v > from);
        return s;
}

/* A database written by an airlockd before migration 5: its snapshots were
 * all taken on demand, so they come out pinned; its sandboxes have no
 * policy of their own. */
static void test_migration_5_upgrade(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s =
                open_upgraded(b, 4,
                              "INSERT INTO sandboxes (id, template, state, created_at, updated_at) "
                              "VALUES ('sbx-old', 'minimal', 'running', 1, 1);"
                              "INSERT INTO snapshots (id, sandbox_id, kind, size, created_at) "
                              "VALUES ('snap-old', 'sbx-old', 'disk', 4096, 5)");
        struct store_snapshot g = { 0 };
        assert_int_equal(store_snapshot_get(s, "snap-old", &g), 0);
        assert_true(g.pinned);
        assert_int_equal(g.size, 4096);
        store_snapshot_release(&g);
        struct store_sandbox sb = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-old", &sb), 0);
        assert_null(sb.snapshot_policy);
        store_sandbox_release(&sb);
}

/* Tenants, their keys and what they own (migration 7). */
static void test_tenants_and_keys(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        uint8_t admin[STORE_HASH_SIZE], ka[STORE_HASH_SIZE], kb[STORE_HASH_SIZE], kc[STORE_HASH_SIZE];
        memset(admin, 1, sizeof admin);
        memset(ka, 2, sizeof ka);
        memset(kb, 3, sizeof kb);
        memset(kc, 4, sizeof kc);
        assert_int_equal(store_api_key_insert(s, "admin", admin), 0);

        struct store_tenant a = { .id = "ten-a", .name = "alpha" }, b = { .id = "ten-b", .name = "beta" };
        assert_int_equal(store_tenant_insert(s, &a, 2), 0);
        struct store_tenant dup = { .id = "ten-c", .name = "alpha" };
        assert_int_equal(store_tenant_insert(s, &dup, 10), -EEXIST); /* names are unique */
        assert_int_equal(store_tenant_insert(s, &b, 2), 0);
        struct store_tenant c = { .id = "ten-c", .name = "gamma" };
        assert_int_equal(store_tenant_insert(s, &c, 2), -EDQUOT); /* the limit */

        struct store_tenant *ts = NULL;
        size_t n = 0;
        assert_int_equal(store_tenant_list(s, 10, &ts, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ts[0].name, "alpha");
        assert_true(ts[0].created_at > 0);
        store_tenant_array_free(ts, n);
        struct store_tenant g = { 0 };
        assert_int_equal(store_tenant_get(s, "ten-b", &g), 0);
        assert_string_equal(g.name, "beta");
        store_tenant_release(&g);
        assert_int_equal(store_tenant_get(s, "ten-x", &g), -ENOENT);

        /* keys: scope comes back with the lookup; the limit is per tenant */
        assert_int_equal(store_api_key_create(s, "key-a", "ten-a", "ci", ka, 1), 0);
        assert_int_equal(store_api_key_create(s, "key-a2", "ten-a", NULL, kc, 1), -EDQUOT);
        assert_int_equal(store_api_key_create(s, "key-b", "ten-b", NULL, kb, 1), 0);
        assert_int_equal(store_api_key_create(s, "key-x", "ten-x", NULL, kc, 1), -ENOENT);
        assert_int_equal(store_api_key_create(s, "key-a3", "ten-b", NULL, ka, 5), -EEXIST); /* same hash */
        char *tid = (char *) "untouched";
        assert_int_equal(store_api_key_lookup(s, admin, &tid), 0);
        assert_null(tid);
        assert_int_equal(store_api_key_lookup(s, ka, &tid), 0);
        assert_string_equal(tid, "ten-a");
        free(tid);
        tid = (char *) "untouched";
        assert_int_equal(store_api_key_lookup(s, kc, &tid), -EACCES);
        assert_string_equal(tid, "untouched");
        assert_int_equal(store_api_key_check(s, kb), 0);

        struct store_api_key *ks = NULL;
        assert_int_equal(store_api_key_list(s, "ten-a", 10, &ks, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(ks[0].id, "key-a");
        assert_string_equal(ks[0].tenant_id, "ten-a");
        assert_string_equal(ks[0].name, "ci");
        store_api_key_array_free(ks, n);

        /* revoking works at once; the admin key cannot be revoked this way */
        assert_int_equal(store_api_key_delete(s, "key-a"), 0);
        assert_int_equal(store_api_key_check(s, ka), -EACCES);
        assert_int_equal(store_api_key_delete(s, "key-a"), -ENOENT);
        assert_int_equal(store_api_key_list(s, "ten-a", 10, &ks, &n), 0);
        assert_int_equal(n, 0);
        store_api_key_array_free(ks, n);

        /* sandboxes belong to a tenant (or to nobody: admin-owned) */
        struct store_sandbox sa = { .id = "sbx-a", .tenant_id = "ten-a", .template_name = "minimal", .state = "running" };
        struct store_sandbox sn = { .id = "sbx-n", .template_name = "minimal", .state = "running" };
        struct store_sandbox sx = { .id = "sbx-x", .tenant_id = "ten-x", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sa), 0);
        assert_int_equal(store_sandbox_insert(s, &sn), 0);
        assert_int_equal(store_sandbox_insert(s, &sx), -ENOENT);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-a", &got), 0);
        assert_string_equal(got.tenant_id, "ten-a");
        store_sandbox_release(&got);
        assert_int_equal(store_sandbox_get(s, "sbx-n", &got), 0);
        assert_null(got.tenant_id);
        store_sandbox_release(&got);
        struct store_sandbox *sbs = NULL;
        assert_int_equal(store_sandbox_list_tenant(s, "ten-a", 10, &sbs, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(sbs[0].id, "sbx-a");
        store_sandbox_array_free(sbs, n);
        assert_int_equal(store_sandbox_list_tenant(s, "ten-b", 10, &sbs, &n), 0);
        assert_int_equal(n, 0);
        store_sandbox_array_free(sbs, n);
        assert_int_equal(store_sandbox_list(s, 10, &sbs, &n), 0);
        assert_int_equal(n, 2);
        store_sandbox_array_free(sbs, n);

        /* an operation takes its sandbox's tenant unless told, and keeps it */
        struct store_operation op = { .id = "op-1", .sandbox_id = "sbx-a", .verb = "pause", .state = "running" };
        assert_int_equal(store_operation_insert(s, &op), 0);
        struct store_operation op2 = { .id = "op-2", .sandbox_id = "sbx-new", .tenant_id = "ten-b", .verb = "create",
                                       .state = "running", .idempotency_key = "k2" };
        assert_int_equal(store_operation_insert(s, &op2), 0);
        struct store_operation go = { 0 };
        assert_int_equal(store_operation_get(s, "op-1", &go), 0);
        assert_string_equal(go.tenant_id, "ten-a");
        store_operation_release(&go);
        assert_int_equal(store_operation_find_by_key(s, "k2", &go), 0);
        assert_string_equal(go.tenant_id, "ten-b");
        store_operation_release(&go);

        /* a tenant with sandboxes stays; without, it goes with its keys */
        assert_int_equal(store_tenant_delete(s, "ten-a"), -EBUSY);
        assert_int_equal(store_sandbox_delete(s, "sbx-a"), 0);
        assert_int_equal(store_tenant_delete(s, "ten-a"), 0);
        assert_int_equal(store_tenant_delete(s, "ten-a"), -ENOENT);
        assert_int_equal(store_tenant_delete(s, "ten-b"), 0);
        assert_int_equal(store_api_key_check(s, kb), -EACCES);
        assert_int_equal(store_api_key_check(s, admin), 0);
}

/* A database from before migration 7: its admin key gets an id and stays
 * admin-scoped, its sandboxes are admin-owned. */
static void test_migration_7_upgrade(void **state) {
        struct backend *b = BACKEND;
        raw_migrate_to(b, 6);
        assert_int_equal(raw_exec(b, b->pg ? "INSERT INTO api_keys (name, hash, created_at) "
                                             "VALUES ('admin', decode(repeat('00', 32), 'hex'), 1)"
                                           : "INSERT INTO api_keys (name, hash, created_at) "
                                             "VALUES ('admin', zeroblob(32), 1)"),
                         0);
        assert_int_equal(raw_exec(b, "INSERT INTO sandboxes (id, template, state, created_at, updated_at) "
                                     "VALUES ('sbx-old', 'minimal', 'running', 1, 1)"),
                         0);

        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        uint8_t zero[STORE_HASH_SIZE] = { 0 };
        char *tid = (char *) "untouched";
        assert_int_equal(store_api_key_lookup(s, zero, &tid), 0);
        assert_null(tid);
        struct store_sandbox sb = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-old", &sb), 0);
        assert_null(sb.tenant_id);
        store_sandbox_release(&sb);
        assert_int_equal(store_api_key_delete(s, "key-admin"), -ENOENT);
}

/* Egress policies: a sandbox's is written by insert, read alone (lists and
 * gets leave the field NULL), replaced only from the state the caller read;
 * a tenant's default is read with the tenant and can be cleared. */
/* A lifetime: none at first; set, read back through get and list; a
 * suspend stops the clock and keeps the timeout; what happens at its end
 * stays unless given again. */
static void test_sandbox_lifetimes(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_sandbox sb = { .id = "sbx-life", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-life", &got), 0);
        assert_int_equal(got.expires_at, 0);
        assert_int_equal(got.expiry_s, 0);
        assert_null(got.on_expiry);
        store_sandbox_release(&got);

        assert_int_equal(store_sandbox_expiry_set(s, "sbx-life", 1796000000000, 300, "suspend"), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-life", &got), 0);
        assert_int_equal(got.expires_at, 1796000000000);
        assert_int_equal(got.expiry_s, 300);
        assert_string_equal(got.on_expiry, "suspend");
        store_sandbox_release(&got);
        assert_int_equal(store_sandbox_expiry_set(s, "sbx-life", 0, 300, NULL), 0);
        struct store_sandbox *a = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_list(s, 10, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(a[0].expires_at, 0);
        assert_int_equal(a[0].expiry_s, 300);
        assert_string_equal(a[0].on_expiry, "suspend");
        store_sandbox_array_free(a, n);

        assert_int_equal(store_sandbox_expiry_set(s, "sbx-nope", 1, 1, NULL), -ENOENT);
        assert_int_equal(store_sandbox_expiry_set(s, "sbx-life", -1, 1, NULL), -EINVAL);
        assert_int_equal(store_sandbox_expiry_set(s, "sbx-life", 1, 1, "explode"), -EINVAL);
        /* and an insert can carry one */
        struct store_sandbox born = { .id = "sbx-born", .template_name = "minimal", .state = "running",
                                      .expires_at = 5000, .expiry_s = 5, .on_expiry = (char *) "delete" };
        assert_int_equal(store_sandbox_insert(s, &born), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-born", &got), 0);
        assert_int_equal(got.expires_at, 5000);
        assert_string_equal(got.on_expiry, "delete");
        store_sandbox_release(&got);
}

static void test_network_policies(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_sandbox sb = { .id = "sbx-net", .template_name = "minimal", .state = "running",
                                    .network = (char *) "{\"mode\":\"deny-all\"}" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        struct store_sandbox old = { .id = "sbx-none", .template_name = "minimal", .state = "stopped" };
        assert_int_equal(store_sandbox_insert(s, &old), 0);

        char *net = NULL;
        assert_int_equal(store_sandbox_network_get(s, "sbx-net", &net), 0);
        assert_string_equal(net, "{\"mode\":\"deny-all\"}");
        free(net);
        net = (char *) "untouched";
        assert_int_equal(store_sandbox_network_get(s, "sbx-none", &net), 0);
        assert_null(net); /* a row from before policies */
        net = (char *) "untouched";
        assert_int_equal(store_sandbox_network_get(s, "sbx-nope", &net), -ENOENT);
        assert_string_equal(net, "untouched");

        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-net", &got), 0);
        assert_null(got.network);
        store_sandbox_release(&got);

        /* compare-and-set on the state the caller read */
        assert_int_equal(store_sandbox_network_set(s, "sbx-net", "stopped", "{\"mode\":\"allow-all\"}"), -ESTALE);
        assert_int_equal(store_sandbox_network_get(s, "sbx-net", &net), 0);
        assert_string_equal(net, "{\"mode\":\"deny-all\"}");
        free(net);
        assert_int_equal(store_sandbox_network_set(s, "sbx-net", "running", "{\"mode\":\"allow-all\"}"), 0);
        assert_int_equal(store_sandbox_network_get(s, "sbx-net", &net), 0);
        assert_string_equal(net, "{\"mode\":\"allow-all\"}");
        free(net);
        assert_int_equal(store_sandbox_network_set(s, "sbx-nope", "running", "{}"), -ESTALE);
        assert_int_equal(store_sandbox_network_set(s, "sbx-net", "running", NULL), -EINVAL);
        /* the policy goes with the row */
        assert_int_equal(store_sandbox_delete(s, "sbx-net"), 0);
        assert_int_equal(store_sandbox_network_get(s, "sbx-net", &net), -ENOENT);

        struct store_tenant t = { .id = "ten-a", .name = "a", .network = (char *) "{\"mode\":\"deny-all\"}" };
        assert_int_equal(store_tenant_insert(s, &t, 10), 0);
        struct store_tenant u = { .id = "ten-b", .name = "b" };
        assert_int_equal(store_tenant_insert(s, &u, 10), 0);
        struct store_tenant tg = { 0 };
        assert_int_equal(store_tenant_get(s, "ten-a", &tg), 0);
        assert_string_equal(tg.network, "{\"mode\":\"deny-all\"}");
        store_tenant_release(&tg);
        assert_int_equal(store_tenant_get(s, "ten-b", &tg), 0);
        assert_null(tg.network);
        store_tenant_release(&tg);
        assert_int_equal(store_tenant_network_set(s, "ten-b", "{\"mode\":\"allow-all\"}"), 0);
        assert_int_equal(store_tenant_network_set(s, "ten-a", NULL), 0);
        struct store_tenant *a = NULL;
        size_t n = 0;
        assert_int_equal(store_tenant_list(s, 10, &a, &n), 0);
        assert_int_equal(n, 2);
        assert_null(a[0].network);
        assert_string_equal(a[1].network, "{\"mode\":\"allow-all\"}");
        store_tenant_array_free(a, n);
        assert_int_equal(store_tenant_network_set(s, "ten-nope", NULL), -ENOENT);
}

/* Lifecycle events: appended by the store for each settled state and each
 * delete, named by where the sandbox came from, scoped to its tenant, read
 * after a cursor. */
static void test_events(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_tenant t = { .id = "ten-e", .name = "evented" };
        assert_int_equal(store_tenant_insert(s, &t, 10), 0);
        int64_t start = -1;
        assert_int_equal(store_event_last_id(s, 0, &start), 0);
        struct store_sandbox a = { .id = "sbx-ev-a", .tenant_id = "ten-e", .template_name = "minimal",
                                   .state = "creating" };
        struct store_sandbox b = { .id = "sbx-ev-b", .template_name = "minimal", .state = "creating" };
        assert_int_equal(store_sandbox_insert(s, &a), 0);
        assert_int_equal(store_sandbox_insert(s, &b), 0);
        assert_int_equal(store_sandbox_update_state(s, "sbx-ev-a", "running", NULL), 0);
        assert_int_equal(store_sandbox_transition(s, "sbx-ev-a", "running", "pausing", NULL), 0); /* none */
        assert_int_equal(store_sandbox_update_state(s, "sbx-ev-a", "paused", NULL), 0);
        assert_int_equal(store_sandbox_transition(s, "sbx-ev-a", "paused", "resuming", NULL), 0);
        assert_int_equal(store_sandbox_update_state(s, "sbx-ev-a", "running", NULL), 0);
        assert_int_equal(store_sandbox_update_state(s, "sbx-ev-a", "running", NULL), 0); /* no change: none */
        assert_int_equal(store_sandbox_update_state(s, "sbx-ev-b", "running", NULL), 0);
        assert_int_equal(store_sandbox_delete(s, "sbx-ev-a"), 0);

        struct store_event *e = NULL;
        size_t n = 0;
        assert_int_equal(store_event_list(s, true, NULL, NULL, start, 100, &e, &n), 0);
        static const char *const want[][3] = {
                { "sbx-ev-a", "sandbox.created", "running" }, { "sbx-ev-a", "sandbox.paused", "paused" },
                { "sbx-ev-a", "sandbox.resumed", "running" }, { "sbx-ev-b", "sandbox.created", "running" },
                { "sbx-ev-a", "sandbox.deleted", NULL },
        };
        assert_int_equal(n, 5);
        for (size_t i = 0; i < n; i++) {
                assert_string_equal(e[i].sandbox_id, want[i][0]);
                assert_string_equal(e[i].type, want[i][1]);
                if (want[i][2])
                        assert_string_equal(e[i].state, want[i][2]);
                else
                        assert_null(e[i].state);
                assert_true(i == 0 || e[i].id > e[i - 1].id);
                assert_true(e[i].ts_ms > 0);
        }
        assert_string_equal(e[1].previous, "pausing");
        assert_string_equal(e[0].tenant_id, "ten-e");
        assert_null(e[3].tenant_id);
        int64_t second = e[1].id;
        store_event_array_free(e, n);
        /* the tenant's own, after a cursor; one sandbox's */
        assert_int_equal(store_event_list(s, false, "ten-e", NULL, second, 100, &e, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(e[0].type, "sandbox.resumed");
        assert_string_equal(e[1].type, "sandbox.deleted");
        store_event_array_free(e, n);
        assert_int_equal(store_event_list(s, false, NULL, NULL, start, 100, &e, &n), 0); /* the admin scope's */
        assert_int_equal(n, 1);
        assert_string_equal(e[0].sandbox_id, "sbx-ev-b");
        store_event_array_free(e, n);
        assert_int_equal(store_event_list(s, true, NULL, "sbx-ev-b", start, 100, &e, &n), 0);
        assert_int_equal(n, 1);
        store_event_array_free(e, n);
        int64_t last = 0;
        assert_int_equal(store_event_last_id(s, 0, &last), 0);
        assert_true(last > second);

        /* the newest of those older than a time: an event of a minute ago
         * (ts_ms given; within what a prune keeps), then one of now */
        int64_t minute_ago = now_unix_ms() - 60000;
        struct store_event old = {
                .sandbox_id = "sbx-ev-old", .type = "sandbox.snapshot_taken", .ts_ms = minute_ago};
        struct store_event fresh = {.sandbox_id = "sbx-ev-new", .type = "sandbox.snapshot_taken"};
        assert_int_equal(store_event_append(s, &old), 0);
        int64_t old_id = 0, newest = 0, before = -1;
        assert_int_equal(store_event_last_id(s, 0, &old_id), 0);
        assert_int_equal(store_event_append(s, &fresh), 0);
        assert_int_equal(store_event_last_id(s, 0, &newest), 0);
        assert_true(newest > old_id && old_id > last);
        assert_int_equal(store_event_last_id(s, minute_ago + 30000, &before), 0);
        assert_int_equal(before, old_id);
        assert_int_equal(store_event_last_id(s, minute_ago, &before), 0); /* older than: not at */
        assert_int_equal(before, 0);
        assert_int_equal(store_event_last_id(s, -1, &before), -EINVAL);
}

/* A webhook as the tests make it: owner tenant_id (NULL: the admin's). */
static int webhook_add(struct store *s, const char *id, const char *tenant_id, int64_t created_at) {
        struct store_webhook w = { .id = (char *) id, .tenant_id = (char *) tenant_id,
                                   .url = "https://hooks.example/in", .events = "*", .secret = "whsec",
                                   .created_at = created_at };
        return store_webhook_insert(s, &w);
}

/* Webhooks: made in a scope under its limit, starting after the newest
 * event; listed by scope; moved on by a compare-and-set of their cursor
 * that adds to their counters; gone with their tenant. */
static void test_webhooks(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(b->url, &s), 0);
        struct store_tenant t = { .id = "ten-w", .name = "hooked" };
        assert_int_equal(store_tenant_insert(s, &t, 10), 0);
        struct store_event ev = { .sandbox_id = "sbx-w", .type = "sandbox.snapshot_taken" };
        assert_int_equal(store_event_append(s, &ev), 0);
        int64_t last = 0;
        assert_int_equal(store_event_last_id(s, 0, &last), 0);
        assert_true(last > 0);

        /* what the caller says of its progress is not read on insert */
        struct store_webhook a = { .id = "wh-a", .tenant_id = "ten-w", .url = "https://a.example/hook",
                                   .events = "sandbox.created,sandbox.deleted", .secret = "sa", .created_at = 1000,
                                   .cursor = 77, .attempts = 3, .next_at = 9, .last_error = "x", .delivered = 5,
                                   .failed = 6 };
        assert_int_equal(store_webhook_insert(s, &a), 0);
        assert_int_equal(store_webhook_insert(s, &a), -EEXIST);
        assert_int_equal(webhook_add(s, "wh-admin", NULL, 2000), 0);
        assert_int_equal(webhook_add(s, "wh-x", "ten-none", 0), -ENOENT);
        struct store_webhook nourl = { .id = "wh-y", .events = "*", .secret = "s" };
        assert_int_equal(store_webhook_insert(s, &nourl), -EINVAL);

        struct store_webhook g = { 0 };
        assert_int_equal(store_webhook_get(s, "wh-a", &g), 0);
        assert_string_equal(g.id, "wh-a");
        assert_string_equal(g.tenant_id, "ten-w");
        assert_string_equal(g.url, "https://a.example/hook");
        assert_string_equal(g.events, "sandbox.created,sandbox.deleted");
        assert_string_equal(g.secret, "sa");
        assert_int_equal(g.created_at, 1000);
        assert_int_equal(g.cursor, last); /* only what comes after it */
        assert_int_equal(g.attempts, 0);
        assert_int_equal(g.next_at, 0);
        assert_null(g.last_error);
        assert_int_equal(g.delivered, 0);
        assert_int_equal(g.failed, 0);
        store_webhook_release(&g);
        assert_int_equal(store_webhook_get(s, "wh-admin", &g), 0);
        assert_null(g.tenant_id);
        assert_true(g.created_at == 2000);
        store_webhook_release(&g);
        assert_int_equal(store_webhook_get(s, "wh-none", &g), -ENOENT);

        /* scopes: the tenant's, the admin's, every owner's */
        struct store_webhook *l = NULL;
        size_t n = 0;
        assert_int_equal(store_webhook_list(s, false, "ten-w", &l, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(l[0].id, "wh-a");
        store_webhook_array_free(l, n);
        assert_int_equal(store_webhook_list(s, false, NULL, &l, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(l[0].id, "wh-admin");
        store_webhook_array_free(l, n);
        assert_int_equal(store_webhook_list(s, true, NULL, &l, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(l[0].id, "wh-a"); /* by created_at */
        assert_string_equal(l[1].id, "wh-admin");
        store_webhook_array_free(l, n);

        /* the limit is per owner */
        for (int i = 1; i < STORE_WEBHOOKS_MAX; i++) {
                char id[32];
                snprintf(id, sizeof id, "wh-t%02d", i);
                assert_int_equal(webhook_add(s, id, "ten-w", 1000 + i), 0);
        }
        assert_int_equal(webhook_add(s, "wh-over", "ten-w", 0), -EDQUOT);
        assert_int_equal(webhook_add(s, "wh-admin2", NULL, 3000), 0);
        assert_int_equal(store_webhook_list(s, false, "ten-w", &l, &n), 0);
        assert_int_equal(n, STORE_WEBHOOKS_MAX);
        store_webhook_array_free(l, n);

        /* delivered: the cursor moves on, the counters add up */
        struct store_webhook next = { .cursor = last + 1, .delivered = 1 };
        assert_int_equal(store_webhook_advance(s, "wh-a", last, &next), 0);
        /* a failed try: the cursor stays, the retry is noted */
        next = (struct store_webhook){ .cursor = last + 1, .attempts = 1, .next_at = 5000, .last_error = "HTTP 500",
                                       .failed = 1 };
        assert_int_equal(store_webhook_advance(s, "wh-a", last + 1, &next), 0);
        assert_int_equal(store_webhook_get(s, "wh-a", &g), 0);
        assert_int_equal(g.cursor, last + 1);
        assert_int_equal(g.attempts, 1);
        assert_int_equal(g.next_at, 5000);
        assert_string_equal(g.last_error, "HTTP 500");
        store_webhook_release(&g);
        next = (struct store_webhook){ .cursor = last + 3, .delivered = 2, .failed = 1 };
        assert_int_equal(store_webhook_advance(s, "wh-a", last + 1, &next), 0);
        assert_int_equal(store_webhook_get(s, "wh-a", &g), 0);
        assert_int_equal(g.cursor, last + 3);
        assert_int_equal(g.attempts, 0);
        assert_int_equal(g.next_at, 0);
        assert_null(g.last_error);
        assert_int_equal(g.delivered, 3);
        assert_int_equal(g.failed, 2);
        store_webhook_release(&g);
        /* another replica moved it on first; one that is gone; never back */
        assert_int_equal(store_webhook_advance(s, "wh-a", last + 1, &next), -ESTALE);
        assert_int_equal(store_webhook_advance(s, "wh-none", last + 1, &next), -ENOENT);
        next.cursor = last;
        assert_int_equal(store_webhook_advance(s, "wh-a", last + 3, &next), -EINVAL);

        assert_int_equal(store_webhook_delete(s, "wh-admin"), 0);
        assert_int_equal(store_webhook_delete(s, "wh-admin"), -ENOENT);
        assert_int_equal(store_webhook_get(s, "wh-admin", &g), -ENOENT);

        /* a tenant's go with it, and their deliveries with them */
        struct store_webhook_delivery d = { .webhook_id = "wh-a", .event_id = last, .event_type = "sandbox.created",
                                            .attempt = 1, .status = 204 };
        assert_int_equal(store_webhook_delivery_insert(s, &d), 0);
        assert_int_equal(store_tenant_delete(s, "ten-w"), 0);
        assert_int_equal(store_webhook_get(s, "wh-a", &g), -ENOENT);
        assert_int_equal(store_webhook_list(s, true, NULL, &l, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(l[0].id, "wh-admin2");
        store_webhook_array_free(l, n);
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM webhook_deliveries"), 0);
}

/* A webhook's deliveries: newest first, paged by id, pruned to the newest
 * STORE_WEBHOOK_DELIVERIES_KEEP, gone with it. */
static void test_webhook_deliveries(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(b->url, &s), 0);
        assert_int_equal(webhook_add(s, "wh-d", NULL, 0), 0);
        struct store_webhook_delivery d1 = { .webhook_id = "wh-d", .event_id = 1, .event_type = "sandbox.created",
                                             .sandbox_id = "sbx-1", .attempt = 1, .status = 500,
                                             .error = "HTTP 500", .duration_ms = 12 };
        struct store_webhook_delivery d2 = { .webhook_id = "wh-d", .event_id = 1, .event_type = "sandbox.created",
                                             .sandbox_id = "sbx-1", .ts_ms = 1234, .attempt = 2, .status = 200,
                                             .duration_ms = 7 };
        assert_int_equal(store_webhook_delivery_insert(s, &d1), 0);
        assert_int_equal(store_webhook_delivery_insert(s, &d2), 0);
        struct store_webhook_delivery orphan = { .webhook_id = "wh-none", .event_id = 1, .event_type = "x" };
        assert_int_equal(store_webhook_delivery_insert(s, &orphan), -ENOENT);
        struct store_webhook_delivery bad = { .webhook_id = "wh-d", .event_type = "x", .attempt = -1 };
        assert_int_equal(store_webhook_delivery_insert(s, &bad), -EINVAL);

        struct store_webhook_delivery *l = NULL;
        size_t n = 0;
        assert_int_equal(store_webhook_delivery_list(s, "wh-d", 0, 10, &l, &n), 0);
        assert_int_equal(n, 2);
        assert_true(l[0].id > l[1].id);
        assert_string_equal(l[0].webhook_id, "wh-d");
        assert_int_equal(l[0].attempt, 2);
        assert_int_equal(l[0].status, 200);
        assert_null(l[0].error);
        assert_int_equal(l[0].ts_ms, 1234);
        assert_int_equal(l[0].duration_ms, 7);
        assert_int_equal(l[1].event_id, 1);
        assert_string_equal(l[1].event_type, "sandbox.created");
        assert_string_equal(l[1].sandbox_id, "sbx-1");
        assert_int_equal(l[1].attempt, 1);
        assert_int_equal(l[1].status, 500);
        assert_string_equal(l[1].error, "HTTP 500");
        assert_true(l[1].ts_ms > 0);
        assert_int_equal(l[1].duration_ms, 12);
        int64_t newest = l[0].id;
        store_webhook_delivery_array_free(l, n);
        assert_int_equal(store_webhook_delivery_list(s, "wh-d", newest, 10, &l, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(l[0].attempt, 1);
        store_webhook_delivery_array_free(l, n);
        assert_int_equal(store_webhook_delivery_list(s, "wh-d", 0, 1, &l, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(l[0].id, newest);
        store_webhook_delivery_array_free(l, n);

        /* KEEP + 3 in all: the 3 oldest go */
        for (int i = 0; i <= STORE_WEBHOOK_DELIVERIES_KEEP; i++) {
                struct store_webhook_delivery d = { .webhook_id = "wh-d", .event_id = 100 + i,
                                                    .event_type = "sandbox.paused", .attempt = 1, .status = 204 };
                assert_int_equal(store_webhook_delivery_insert(s, &d), 0);
        }
        assert_int_equal(store_webhook_delivery_list(s, "wh-d", 0, STORE_LIST_MAX, &l, &n), 0);
        assert_int_equal(n, STORE_WEBHOOK_DELIVERIES_KEEP);
        assert_int_equal(l[0].event_id, 100 + STORE_WEBHOOK_DELIVERIES_KEEP);
        assert_int_equal(l[n - 1].event_id, 101);
        store_webhook_delivery_array_free(l, n);

        assert_int_equal(store_webhook_delete(s, "wh-d"), 0);
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM webhook_deliveries"), 0);
        assert_int_equal(store_webhook_delivery_list(s, "wh-d", 0, 10, &l, &n), 0);
        assert_int_equal(n, 0);
        store_webhook_delivery_array_free(l, n);
}

/* Whether an event of sandbox_id is kept (listed). */
static bool event_kept(struct store *s, const char *sandbox_id) {
        struct store_event *e = NULL;
        size_t n = 0;
        assert_int_equal(store_event_list(s, true, NULL, sandbox_id, 0, 10, &e, &n), 0);
        store_event_array_free(e, n);
        return n > 0;
}

/* Appends n fresh events: among any 256 appends one prunes. */
static void events_fill(struct store *s, int n) {
        for (int i = 0; i < n; i++) {
                struct store_event ev = { .sandbox_id = "sbx-fill", .type = "sandbox.snapshot_taken" };
                assert_int_equal(store_event_append(s, &ev), 0);
        }
}

/* Events the caller appends, with their detail; the prune keeps what a
 * webhook has yet to handle up to a day, past the hour. */
static void test_event_append_and_prune(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        int64_t start = 0;
        assert_int_equal(store_event_last_id(s, 0, &start), 0);
        struct store_event snap = { .tenant_id = NULL, .sandbox_id = "sbx-p", .type = "sandbox.snapshot_taken",
                                    .state = "running", .detail = "{\"snapshot_id\":\"snap-1\"}" };
        assert_int_equal(store_event_append(s, &snap), 0);
        struct store_sandbox sb = { .id = "sbx-p", .template_name = "minimal", .state = "creating" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        assert_int_equal(store_sandbox_update_state(s, "sbx-p", "running", NULL), 0);
        struct store_event notype = { .sandbox_id = "sbx-p" };
        assert_int_equal(store_event_append(s, &notype), -EINVAL);

        struct store_event *e = NULL;
        size_t n = 0;
        assert_int_equal(store_event_list(s, false, NULL, "sbx-p", start, 10, &e, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(e[0].type, "sandbox.snapshot_taken");
        assert_string_equal(e[0].detail, "{\"snapshot_id\":\"snap-1\"}");
        assert_string_equal(e[0].state, "running");
        assert_null(e[0].previous);
        assert_true(e[0].ts_ms > 0);
        assert_string_equal(e[1].type, "sandbox.created");
        assert_null(e[1].detail); /* a plain change of state */
        store_event_array_free(e, n);

        /* handled by the webhook (its cursor starts there) and past the hour */
        int64_t now = (int64_t) (now_realtime_ns() / 1000000ULL);
        struct store_event done = { .ts_ms = now - 2 * 3600 * 1000, .sandbox_id = "sbx-done", .type = "sandbox.x" };
        assert_int_equal(store_event_append(s, &done), 0);
        assert_int_equal(webhook_add(s, "wh-p", NULL, 0), 0);
        /* not handled yet: past the hour, within the day, and past the day */
        struct store_event mid = { .ts_ms = now - 2 * 3600 * 1000, .sandbox_id = "sbx-mid",
                                   .type = "sandbox.policy_denied", .detail = "{\"host\":\"evil.example\"}" };
        struct store_event old = { .ts_ms = now - 25 * 3600 * 1000, .sandbox_id = "sbx-old", .type = "sandbox.x" };
        assert_int_equal(store_event_append(s, &mid), 0);
        assert_int_equal(store_event_append(s, &old), 0);
        assert_true(event_kept(s, "sbx-mid"));
        events_fill(s, 256);
        assert_false(event_kept(s, "sbx-done"));
        assert_false(event_kept(s, "sbx-old"));
        assert_true(event_kept(s, "sbx-mid"));
        assert_true(event_kept(s, "sbx-p")); /* within the hour */

        /* the webhook passed it: it goes */
        struct store_webhook w = { 0 };
        assert_int_equal(store_webhook_get(s, "wh-p", &w), 0);
        int64_t last = 0;
        assert_int_equal(store_event_last_id(s, 0, &last), 0);
        struct store_webhook next = { .cursor = last, .delivered = 1 };
        assert_int_equal(store_webhook_advance(s, "wh-p", w.cursor, &next), 0);
        store_webhook_release(&w);
        events_fill(s, 256);
        assert_false(event_kept(s, "sbx-mid"));
        assert_true(event_kept(s, "sbx-p"));
}

/* A database of version 18: its events read with no detail, and a new
 * webhook starts after them. */
static void test_migration_19_upgrade(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s =
                open_upgraded(b, 18, "INSERT INTO sandbox_events (ts_ms, sandbox_id, type, state) "
                                     "VALUES (1, 'sbx-old', 'sandbox.created', 'running')");
        struct store_event *e = NULL;
        size_t n = 0;
        assert_int_equal(store_event_list(s, true, NULL, NULL, 0, 10, &e, &n), 0);
        assert_int_equal(n, 1);
        assert_null(e[0].detail);
        int64_t id = e[0].id;
        store_event_array_free(e, n);
        assert_int_equal(webhook_add(s, "wh-up", NULL, 0), 0);
        struct store_webhook w = { 0 };
        assert_int_equal(store_webhook_get(s, "wh-up", &w), 0);
        assert_int_equal(w.cursor, id);
        store_webhook_release(&w);
}

static void test_images(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_tenant t = { .id = "ten-i", .name = "imaging" };
        assert_int_equal(store_tenant_insert(s, &t, 10), 0);
        struct store_image a = { .id = "img-a", .tenant_id = "ten-i", .name = "base", .sandbox_id = "sbx-1",
                                 .template_name = "python", .size = 512, .created_at = 1000 };
        struct store_image b = { .id = "img-b", .tenant_id = "ten-i", .sandbox_id = "sbx-2",
                                 .template_name = "python", .created_at = 2000 };
        struct store_image admin = { .id = "img-c", .name = "base", .sandbox_id = "sbx-1",
                                     .template_name = "minimal", .created_at = 3000 };
        assert_int_equal(store_image_insert(s, &a), 0);
        assert_int_equal(store_image_insert(s, &b), 0);
        assert_int_equal(store_image_insert(s, &admin), 0); /* a name is unique in its scope only */
        struct store_image dup = { .id = "img-d", .tenant_id = "ten-i", .name = "base", .sandbox_id = "sbx-3",
                                   .template_name = "python" };
        assert_int_equal(store_image_insert(s, &dup), -EEXIST);
        struct store_image unnamed = { .id = "img-e", .tenant_id = "ten-i", .sandbox_id = "sbx-3",
                                       .template_name = "python", .created_at = 1500 };
        assert_int_equal(store_image_insert(s, &unnamed), 0); /* any number without a name */
        struct store_image bad = { .id = "img-f", .tenant_id = "ten-none", .sandbox_id = "sbx-3",
                                   .template_name = "python" };
        assert_true(store_image_insert(s, &bad) < 0); /* an unknown owner */

        struct store_image g = { 0 };
        assert_int_equal(store_image_get(s, "img-a", &g), 0);
        assert_string_equal(g.tenant_id, "ten-i");
        assert_string_equal(g.name, "base");
        assert_string_equal(g.sandbox_id, "sbx-1");
        assert_string_equal(g.template_name, "python");
        assert_int_equal(g.size, 512);
        assert_int_equal(g.created_at, 1000);
        store_image_release(&g);
        assert_int_equal(store_image_find(s, "ten-i", "base", &g), 0);
        assert_string_equal(g.id, "img-a");
        store_image_release(&g);
        assert_int_equal(store_image_find(s, NULL, "base", &g), 0);
        assert_string_equal(g.id, "img-c");
        store_image_release(&g);
        assert_int_equal(store_image_find(s, "ten-i", "other", &g), -ENOENT);
        assert_int_equal(store_image_get(s, "img-zz", &g), -ENOENT);

        struct store_image *l = NULL;
        size_t n = 0;
        assert_int_equal(store_image_list(s, false, "ten-i", NULL, 10, &l, &n), 0);
        assert_int_equal(n, 3); /* newest first, the tenant's only */
        assert_string_equal(l[0].id, "img-b");
        assert_string_equal(l[1].id, "img-e");
        assert_string_equal(l[2].id, "img-a");
        store_image_array_free(l, n);
        assert_int_equal(store_image_list(s, false, "ten-i", "sbx-1", 10, &l, &n), 0);
        assert_int_equal(n, 1);
        store_image_array_free(l, n);
        assert_int_equal(store_image_list(s, true, NULL, NULL, 2, &l, &n), 0);
        assert_int_equal(n, 2); /* the bound */
        assert_string_equal(l[0].id, "img-c");
        store_image_array_free(l, n);

        /* a tenant that owns images stays */
        assert_int_equal(store_tenant_delete(s, "ten-i"), -EBUSY);
        assert_int_equal(store_image_delete(s, "img-a"), 0);
        assert_int_equal(store_image_delete(s, "img-a"), -ENOENT);
        assert_int_equal(store_image_delete(s, "img-b"), 0);
        assert_int_equal(store_image_delete(s, "img-e"), 0);
        assert_int_equal(store_tenant_delete(s, "ten-i"), 0);
}

#define GIB ((int64_t) 1 << 30)

static void add_sandbox(struct store *s, const char *id, const char *tenant_id) {
        struct store_sandbox sb = { .id = (char *) id, .tenant_id = (char *) tenant_id,
                                    .template_name = "python", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
}

static int hold(struct store *s, const char *sandbox_id, const char *volume_id, int slot, bool read_only) {
        struct store_volume_hold h = { .sandbox_id = (char *) sandbox_id, .volume_id = (char *) volume_id,
                                       .slot = slot, .path = "/mnt/data", .read_only = read_only };
        return store_volume_hold_insert(s, &h);
}

/* Volumes (migration 18): an owner's named disks, read back by id and by
 * name, listed per owner and for all, counted for quotas; held by
 * sandboxes in slots, one read-write holder at most; a held volume stays,
 * the holds go with their sandbox; a tenant with volumes stays. */
static void test_volumes(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_tenant tv = { .id = "ten-v", .name = "v" }, tw = { .id = "ten-w", .name = "w" };
        assert_int_equal(store_tenant_insert(s, &tv, 10), 0);
        assert_int_equal(store_tenant_insert(s, &tw, 10), 0);

        struct store_volume a = { .id = "vol-a", .tenant_id = "ten-v", .name = "data", .size = GIB,
                                  .created_at = 1000 };
        struct store_volume b = { .id = "vol-b", .tenant_id = "ten-v", .name = "cache", .size = 2 * GIB,
                                  .node = "node-1", .created_at = 2000 };
        struct store_volume c = { .id = "vol-c", .name = "data", .size = 512 << 20, .source_id = "vol-a",
                                  .created_at = 3000 };
        struct store_volume w = { .id = "vol-w", .tenant_id = "ten-w", .name = "data", .size = 100,
                                  .created_at = 1500 };
        assert_int_equal(store_volume_insert(s, &a), 0);
        assert_int_equal(store_volume_insert(s, &b), 0);
        assert_int_equal(store_volume_insert(s, &c), 0); /* a name is unique per owner only */
        assert_int_equal(store_volume_insert(s, &w), 0);
        struct store_volume dup = { .id = "vol-d", .tenant_id = "ten-v", .name = "data", .size = 1 };
        assert_int_equal(store_volume_insert(s, &dup), -EEXIST);
        dup = (struct store_volume){ .id = "vol-d", .name = "data", .size = 1 }; /* the admin's too */
        assert_int_equal(store_volume_insert(s, &dup), -EEXIST);
        dup = (struct store_volume){ .id = "vol-a", .tenant_id = "ten-w", .name = "other", .size = 1 };
        assert_int_equal(store_volume_insert(s, &dup), -EEXIST); /* the id */
        dup = (struct store_volume){ .id = "vol-d", .tenant_id = "ten-none", .name = "data", .size = 1 };
        assert_int_equal(store_volume_insert(s, &dup), -ENOENT); /* an unknown owner */
        /* a volume follows its read-write holder to another node */
        struct store_volume moved = {0};
        assert_int_equal(store_volume_set_node(s, "vol-b", "node-2"), 0);
        assert_int_equal(store_volume_get(s, "vol-b", &moved), 0);
        assert_string_equal(moved.node, "node-2");
        store_volume_release(&moved);
        assert_int_equal(store_volume_set_node(s, "vol-b", NULL), 0);
        assert_int_equal(store_volume_get(s, "vol-b", &moved), 0);
        assert_null(moved.node);
        store_volume_release(&moved);
        assert_int_equal(store_volume_set_node(s, "vol-b", "node-1"), 0);
        assert_int_equal(store_volume_set_node(s, "vol-none", "node-1"), -ENOENT);
        dup = (struct store_volume){ .id = "vol-d", .name = "zero", .size = 0 };
        assert_int_equal(store_volume_insert(s, &dup), -EINVAL);
        dup = (struct store_volume){ .id = "vol-d", .size = 1 };
        assert_int_equal(store_volume_insert(s, &dup), -EINVAL);
        struct store_volume now = { .id = "vol-n", .tenant_id = "ten-w", .name = "now", .size = 1 };
        assert_int_equal(store_volume_insert(s, &now), 0);

        struct store_volume g = { 0 };
        assert_int_equal(store_volume_get(s, "vol-b", &g), 0);
        assert_string_equal(g.id, "vol-b");
        assert_string_equal(g.tenant_id, "ten-v");
        assert_string_equal(g.name, "cache");
        assert_int_equal(g.size, 2 * GIB);
        assert_string_equal(g.node, "node-1");
        assert_null(g.source_id);
        assert_int_equal(g.created_at, 2000);
        store_volume_release(&g);
        assert_int_equal(store_volume_get(s, "vol-c", &g), 0);
        assert_null(g.tenant_id);
        assert_null(g.node);
        assert_string_equal(g.source_id, "vol-a");
        store_volume_release(&g);
        assert_int_equal(store_volume_get(s, "vol-n", &g), 0);
        assert_true(g.created_at > 1000000); /* 0: now */
        store_volume_release(&g);
        assert_int_equal(store_volume_get(s, "vol-zz", &g), -ENOENT);
        assert_int_equal(store_volume_find(s, "ten-v", "data", &g), 0);
        assert_string_equal(g.id, "vol-a");
        store_volume_release(&g);
        assert_int_equal(store_volume_find(s, NULL, "data", &g), 0);
        assert_string_equal(g.id, "vol-c");
        store_volume_release(&g);
        assert_int_equal(store_volume_find(s, "ten-w", "data", &g), 0);
        assert_string_equal(g.id, "vol-w");
        store_volume_release(&g);
        assert_int_equal(store_volume_find(s, "ten-v", "other", &g), -ENOENT);
        assert_int_equal(store_volume_find(s, NULL, "cache", &g), -ENOENT);

        struct store_volume *l = NULL;
        size_t n = 0;
        assert_int_equal(store_volume_list(s, false, "ten-v", 10, &l, &n), 0);
        assert_int_equal(n, 2); /* newest first, the tenant's only */
        assert_string_equal(l[0].id, "vol-b");
        assert_string_equal(l[1].id, "vol-a");
        store_volume_array_free(l, n);
        assert_int_equal(store_volume_list(s, false, NULL, 10, &l, &n), 0);
        assert_int_equal(n, 1); /* the admin's */
        assert_string_equal(l[0].id, "vol-c");
        store_volume_array_free(l, n);
        assert_int_equal(store_volume_list(s, true, NULL, 10, &l, &n), 0);
        assert_int_equal(n, 5); /* every owner's */
        assert_string_equal(l[0].id, "vol-n");
        assert_string_equal(l[1].id, "vol-c");
        assert_string_equal(l[2].id, "vol-b");
        assert_string_equal(l[3].id, "vol-w");
        assert_string_equal(l[4].id, "vol-a");
        store_volume_array_free(l, n);
        assert_int_equal(store_volume_list(s, true, "ten-v", 2, &l, &n), 0);
        assert_int_equal(n, 2); /* the bound */
        store_volume_array_free(l, n);

        int64_t bytes = -1;
        assert_int_equal(store_volume_usage(s, "ten-v", &bytes, &n), 0);
        assert_int_equal(bytes, 3 * GIB);
        assert_int_equal(n, 2);
        assert_int_equal(store_volume_usage(s, NULL, &bytes, &n), 0);
        assert_int_equal(bytes, 512 << 20);
        assert_int_equal(n, 1);
        assert_int_equal(store_volume_usage(s, "ten-x", &bytes, &n), 0);
        assert_int_equal(bytes, 0);
        assert_int_equal(n, 0);

        /* holds */
        add_sandbox(s, "sbx-1", "ten-v");
        add_sandbox(s, "sbx-2", "ten-v");
        add_sandbox(s, "sbx-3", NULL);
        assert_int_equal(hold(s, "sbx-1", "vol-a", 0, false), 0);
        assert_int_equal(hold(s, "sbx-2", "vol-a", 0, false), -EEXIST); /* a second writer */
        assert_int_equal(hold(s, "sbx-1", "vol-b", 0, true), -EEXIST);  /* a taken slot */
        assert_int_equal(hold(s, "sbx-2", "vol-a", 0, true), 0);
        assert_int_equal(hold(s, "sbx-3", "vol-a", 3, true), 0);
        assert_int_equal(hold(s, "sbx-1", "vol-b", 1, true), 0);
        assert_int_equal(hold(s, "sbx-2", "vol-b", 2, true), 0); /* two readers */
        /* another owner's volume: the daemon's to refuse, not the store's */
        assert_int_equal(hold(s, "sbx-3", "vol-w", 0, false), 0);
        assert_int_equal(hold(s, "sbx-1", "vol-zz", 2, true), -ENOENT);
        assert_int_equal(hold(s, "sbx-zz", "vol-a", 0, true), -ENOENT);
        assert_int_equal(hold(s, "sbx-1", "vol-c", 4, true), -EINVAL);
        assert_int_equal(hold(s, "sbx-1", "vol-c", -1, true), -EINVAL);
        struct store_volume_hold bad = { .sandbox_id = "sbx-1", .volume_id = "vol-c", .slot = 2 };
        assert_int_equal(store_volume_hold_insert(s, &bad), -EINVAL); /* no path */

        struct store_volume_hold *h = NULL;
        assert_int_equal(store_volume_holds_of_volume(s, "vol-a", &h, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(h[0].sandbox_id, "sbx-1");
        assert_string_equal(h[0].volume_id, "vol-a");
        assert_int_equal(h[0].slot, 0);
        assert_string_equal(h[0].path, "/mnt/data");
        assert_false(h[0].read_only);
        assert_string_equal(h[1].sandbox_id, "sbx-2");
        assert_true(h[1].read_only);
        assert_string_equal(h[2].sandbox_id, "sbx-3");
        assert_int_equal(h[2].slot, 3);
        assert_true(h[2].read_only);
        store_volume_hold_array_free(h, n);
        assert_int_equal(store_volume_holds_of_sandbox(s, "sbx-2", &h, &n), 0);
        assert_int_equal(n, 2); /* by slot */
        assert_string_equal(h[0].volume_id, "vol-a");
        assert_int_equal(h[0].slot, 0);
        assert_string_equal(h[1].volume_id, "vol-b");
        assert_int_equal(h[1].slot, 2);
        store_volume_hold_array_free(h, n);
        assert_int_equal(store_volume_holds_of_volume(s, "vol-c", &h, &n), 0);
        assert_int_equal(n, 0);
        store_volume_hold_array_free(h, n);

        /* a held volume stays; its holds go with their sandboxes */
        assert_int_equal(store_volume_delete(s, "vol-a"), -EBUSY);
        assert_int_equal(store_volume_get(s, "vol-a", &g), 0);
        store_volume_release(&g);
        assert_int_equal(store_sandbox_delete(s, "sbx-1"), 0);
        assert_int_equal(store_volume_holds_of_sandbox(s, "sbx-1", &h, &n), 0);
        assert_int_equal(n, 0);
        store_volume_hold_array_free(h, n);
        assert_int_equal(store_volume_delete(s, "vol-a"), -EBUSY); /* still read by two */
        add_sandbox(s, "sbx-4", "ten-v");
        assert_int_equal(hold(s, "sbx-4", "vol-a", 0, false), 0); /* the writer gone, another may write */
        assert_int_equal(store_sandbox_delete(s, "sbx-2"), 0);
        assert_int_equal(store_volume_holds_of_volume(s, "vol-a", &h, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(h[0].sandbox_id, "sbx-3");
        assert_string_equal(h[1].sandbox_id, "sbx-4");
        assert_false(h[1].read_only);
        store_volume_hold_array_free(h, n);
        assert_int_equal(store_sandbox_delete(s, "sbx-4"), 0);

        /* a tenant with volumes stays (their images are on nodes: the
         * volumes go first, each from its node), held or not */
        assert_int_equal(store_tenant_delete(s, "ten-w"), -EBUSY);
        assert_int_equal(store_volume_get(s, "vol-w", &g), 0);
        store_volume_release(&g);
        assert_int_equal(store_sandbox_delete(s, "sbx-3"), 0);
        assert_int_equal(store_volume_delete(s, "vol-a"), 0);
        assert_int_equal(store_volume_delete(s, "vol-a"), -ENOENT);
        assert_int_equal(store_volume_get(s, "vol-a", &g), -ENOENT);
        assert_int_equal(store_tenant_delete(s, "ten-w"), -EBUSY); /* vol-w, vol-n: not held */
        assert_int_equal(store_volume_delete(s, "vol-w"), 0);
        assert_int_equal(store_volume_delete(s, "vol-n"), 0);
        assert_int_equal(store_tenant_delete(s, "ten-w"), 0);
        assert_int_equal(store_volume_get(s, "vol-w", &g), -ENOENT);
        assert_int_equal(store_volume_get(s, "vol-n", &g), -ENOENT);
        assert_int_equal(store_volume_usage(s, "ten-w", &bytes, &n), 0);
        assert_int_equal(n, 0);
        assert_int_equal(store_volume_list(s, true, NULL, 10, &l, &n), 0);
        assert_int_equal(n, 2); /* vol-c and vol-b */
        store_volume_array_free(l, n);
}

/* Two replicas racing on volumes, RACE_VOLS rounds: both insert a
 * read-write hold of one volume (one wins, the other is told -EEXIST); one
 * deletes another volume while the other holds it (the hold wins and the
 * delete is -EBUSY, or the delete wins and the hold is -ENOENT: never a
 * hold of a volume gone). */
enum { RACE_VOLS = 20 };
struct volume_race {
        struct store *s;
        pthread_barrier_t *start;
        char side; /* 'a' deletes, 'b' holds */
        int held[RACE_VOLS], other[RACE_VOLS];
};

static void *volume_race_run(void *arg) {
        struct volume_race *x = arg;
        for (unsigned i = 0; i < RACE_VOLS; i++) {
                char sbx[16], vol[16], del[16];
                snprintf(sbx, sizeof sbx, "sbx-%c%02u", x->side, i);
                snprintf(vol, sizeof vol, "vol-r%02u", i);
                snprintf(del, sizeof del, "vol-d%02u", i);
                pthread_barrier_wait(x->start);
                x->held[i] = hold(x->s, sbx, vol, 0, false);
                pthread_barrier_wait(x->start);
                x->other[i] = x->side == 'a' ? store_volume_delete(x->s, del)
                                             : hold(x->s, sbx, del, 1, true);
        }
        return NULL;
}

static void test_volume_races(void **state) {
        _cleanup_(store_closep) struct store *s1 = NULL;
        _cleanup_(store_closep) struct store *s2 = NULL;
        assert_int_equal(store_open(URL, &s1), 0);
        assert_int_equal(store_open(URL, &s2), 0);
        for (unsigned i = 0; i < RACE_VOLS; i++) {
                char id[16];
                snprintf(id, sizeof id, "sbx-a%02u", i);
                add_sandbox(s1, id, NULL);
                snprintf(id, sizeof id, "sbx-b%02u", i);
                add_sandbox(s1, id, NULL);
                snprintf(id, sizeof id, "vol-r%02u", i);
                struct store_volume v = { .id = id, .name = id, .size = 1 };
                assert_int_equal(store_volume_insert(s1, &v), 0);
                snprintf(id, sizeof id, "vol-d%02u", i);
                assert_int_equal(store_volume_insert(s1, &v), 0);
        }

        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        struct volume_race a = { .s = s1, .start = &start, .side = 'a' };
        struct volume_race b = { .s = s2, .start = &start, .side = 'b' };
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, volume_race_run, &a), 0);
        assert_int_equal(pthread_create(&t2, NULL, volume_race_run, &b), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_barrier_destroy(&start);
        for (unsigned i = 0; i < RACE_VOLS; i++) {
                assert_int_equal((a.held[i] == 0) + (b.held[i] == 0), 1);
                assert_int_equal((a.held[i] == -EEXIST) + (b.held[i] == -EEXIST), 1);
                if (a.other[i] == 0)
                        assert_int_equal(b.other[i], -ENOENT);
                else {
                        assert_int_equal(a.other[i], -EBUSY);
                        assert_int_equal(b.other[i], 0);
                }
                char id[16];
                snprintf(id, sizeof id, "vol-d%02u", i);
                struct store_volume_hold *h = NULL;
                size_t n = SIZE_MAX;
                assert_int_equal(store_volume_holds_of_volume(s1, id, &h, &n), 0);
                assert_int_equal(n, a.other[i] == 0 ? 0 : 1);
                store_volume_hold_array_free(h, n);
        }
}

/* A database an airlockd before volumes left (migration 17) gets the
 * tables on open; its sandboxes may hold volumes then. */
static void test_migration_18_upgrade(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s =
                open_upgraded(b, 17, "INSERT INTO sandboxes (id, template, state, created_at, updated_at) "
                                     "VALUES ('sbx-old', 'minimal', 'running', 1, 1)");
        struct store_volume vol = { .id = "vol-1", .name = "data", .size = GIB };
        assert_int_equal(store_volume_insert(s, &vol), 0);
        assert_int_equal(hold(s, "sbx-old", "vol-1", 0, false), 0);
        assert_int_equal(store_volume_delete(s, "vol-1"), -EBUSY);
}

/* A cluster's nodes: joined, read back, drained; a silent one is marked
 * lost once, and the heartbeat after tells it was lost once; a node that
 * a sandbox names stays. */
static void test_nodes(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_node a = { .name = "node-a", .address = "tls:node-a@10.0.0.1:7443", .boot_id = "b1",
                                .info = "{\"cpus\":4}", .joined_at = 1000, .heartbeat_at = 2000 };
        struct store_node b = { .name = "node-b", .address = "tls:node-b@10.0.0.2:7443" };
        assert_int_equal(store_node_insert(s, &b), 0);
        assert_int_equal(store_node_insert(s, &a), 0);
        assert_int_equal(store_node_insert(s, &a), -EEXIST);
        struct store_node bad = { .name = "Node_A", .address = "x" };
        assert_int_equal(store_node_insert(s, &bad), -EINVAL);

        struct store_node g = { 0 };
        assert_int_equal(store_node_get(s, "node-a", &g), 0);
        assert_string_equal(g.address, a.address);
        assert_string_equal(g.boot_id, "b1");
        assert_string_equal(g.info, "{\"cpus\":4}");
        assert_false(g.draining);
        assert_int_equal(g.lost_at, 0);
        assert_int_equal(g.joined_at, 1000);
        assert_int_equal(g.heartbeat_at, 2000);
        store_node_release(&g);
        assert_int_equal(store_node_get(s, "node-b", &g), 0);
        assert_string_equal(g.info, "{}");
        assert_null(g.boot_id);
        assert_true(g.joined_at > 0 && g.heartbeat_at == g.joined_at);
        store_node_release(&g);
        assert_int_equal(store_node_get(s, "node-z", &g), -ENOENT);

        struct store_node *l = NULL;
        size_t n = 0;
        assert_int_equal(store_node_list(s, 10, &l, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(l[0].name, "node-a"); /* by name */
        assert_string_equal(l[1].name, "node-b");
        store_node_array_free(l, n);
        assert_int_equal(store_node_list(s, 1, &l, &n), 0);
        assert_int_equal(n, 1);
        store_node_array_free(l, n);

        assert_int_equal(store_node_set_draining(s, "node-a", true), 0);
        assert_int_equal(store_node_set_draining(s, "node-z", true), -ENOENT);
        bool lost = true, draining = false;
        struct store_node beat = { .name = "node-a", .boot_id = "b2", .heartbeat_at = 3000 };
        assert_int_equal(store_node_heartbeat(s, &beat, &lost, &draining), 0);
        assert_false(lost);
        assert_true(draining);
        assert_int_equal(store_node_get(s, "node-a", &g), 0);
        assert_string_equal(g.boot_id, "b2");
        assert_string_equal(g.address, a.address); /* NULL keeps it */
        assert_string_equal(g.info, "{\"cpus\":4}");
        assert_int_equal(g.heartbeat_at, 3000);
        store_node_release(&g);
        beat.name = "node-z";
        assert_int_equal(store_node_heartbeat(s, &beat, NULL, NULL), -ENOENT);

        /* node-a beat at 3000, node-b now: only node-a is silent before 5000 */
        char **names = NULL;
        assert_int_equal(store_nodes_mark_lost(s, 5000, &names, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(names[0], "node-a");
        store_string_array_free(names, n);
        assert_int_equal(store_nodes_mark_lost(s, 5000, &names, &n), 0);
        assert_int_equal(n, 0); /* once */
        store_string_array_free(names, n);
        assert_int_equal(store_node_get(s, "node-a", &g), 0);
        assert_true(g.lost_at > 0);
        store_node_release(&g);
        beat = (struct store_node){ .name = "node-a", .heartbeat_at = 6000 };
        assert_int_equal(store_node_heartbeat(s, &beat, &lost, NULL), 0);
        assert_true(lost);
        assert_int_equal(store_node_heartbeat(s, &beat, &lost, NULL), 0);
        assert_false(lost);
        assert_int_equal(store_node_get(s, "node-a", &g), 0);
        assert_int_equal(g.lost_at, 0);
        store_node_release(&g);

        struct store_sandbox sb = { .id = "sbx-on-a", .template_name = "minimal", .state = "running",
                                    .node = "node-a" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        assert_int_equal(store_node_delete(s, "node-a"), -EBUSY);
        assert_int_equal(store_node_delete(s, "node-z"), -ENOENT);
        assert_int_equal(store_sandbox_delete(s, "sbx-on-a"), 0);
        assert_int_equal(store_node_delete(s, "node-a"), 0);
        assert_int_equal(store_node_delete(s, "node-a"), -ENOENT);
}

/* A sandbox's node is written by insert and read by every read; the
 * local node's are those with none. */
static void test_sandbox_nodes(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_node nd = { .name = "n1", .address = "unix:/run/n1.sock" };
        assert_int_equal(store_node_insert(s, &nd), 0);
        struct store_tenant t = { .id = "ten-n", .name = "n" };
        assert_int_equal(store_tenant_insert(s, &t, 10), 0);
        struct store_sandbox sb = { .id = "sbx-1", .template_name = "minimal", .state = "running", .node = "n1",
                                    .tenant_id = "ten-n", .created_at = 10 };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        sb = (struct store_sandbox){ .id = "sbx-2", .template_name = "minimal", .state = "running", .node = "n1",
                                     .created_at = 20 };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        sb = (struct store_sandbox){ .id = "sbx-3", .template_name = "minimal", .state = "running",
                                     .created_at = 30 };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        sb = (struct store_sandbox){ .id = "sbx-4", .template_name = "minimal", .state = "running", .node = "n9" };
        assert_int_equal(store_sandbox_insert(s, &sb), -ENOENT); /* no such node */

        struct store_sandbox g = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-1", &g), 0);
        assert_string_equal(g.node, "n1");
        store_sandbox_release(&g);
        assert_int_equal(store_sandbox_get(s, "sbx-3", &g), 0);
        assert_null(g.node);
        store_sandbox_release(&g);
        struct store_sandbox *a = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_list(s, 10, &a, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(a[1].node, "n1");
        assert_null(a[2].node);
        store_sandbox_array_free(a, n);
        assert_int_equal(store_sandbox_list_tenant(s, "ten-n", 10, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].node, "n1");
        store_sandbox_array_free(a, n);

        assert_int_equal(store_sandbox_list_node(s, "n1", 10, &a, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(a[0].id, "sbx-1"); /* oldest first */
        assert_string_equal(a[1].id, "sbx-2");
        store_sandbox_array_free(a, n);
        assert_int_equal(store_sandbox_list_node(s, "n1", 1, &a, &n), 0);
        assert_int_equal(n, 1);
        store_sandbox_array_free(a, n);
        assert_int_equal(store_sandbox_list_node(s, NULL, 10, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].id, "sbx-3");
        store_sandbox_array_free(a, n);

        char **names = NULL;
        int64_t *counts = NULL;
        assert_int_equal(store_sandbox_count_by_node(s, &names, &counts, &n), 0);
        assert_int_equal(n, 2);
        assert_null(names[0]); /* the local node's group first */
        assert_int_equal(counts[0], 1);
        assert_string_equal(names[1], "n1");
        assert_int_equal(counts[1], 2);
        store_string_array_free(names, n);
        free(counts);

        /* a move: only from the state and node it was read in */
        struct store_node n2 = { .name = "n2", .address = "unix:/run/n2.sock" };
        assert_int_equal(store_node_insert(s, &n2), 0);
        assert_int_equal(store_sandbox_move(s, "sbx-1", "suspended", "n1", "n2"), -ESTALE); /* not suspended */
        assert_int_equal(store_sandbox_move(s, "sbx-1", "running", "n2", "n1"), -ESTALE);   /* not on n2 */
        assert_int_equal(store_sandbox_move(s, "sbx-1", "running", "n1", "n9"), -ENOENT);   /* no node n9 */
        assert_int_equal(store_sandbox_move(s, "sbx-1", "running", "n1", "n2"), 0);
        assert_int_equal(store_sandbox_move(s, "sbx-3", "running", NULL, "n2"), 0);
        assert_int_equal(store_sandbox_move(s, "sbx-nope", "running", NULL, "n2"), -ESTALE);
        assert_int_equal(store_sandbox_get(s, "sbx-1", &g), 0);
        assert_string_equal(g.node, "n2");
        store_sandbox_release(&g);
        assert_int_equal(store_sandbox_list_node(s, "n2", 10, &a, &n), 0);
        assert_int_equal(n, 2);
        store_sandbox_array_free(a, n);
}

/* Join tokens: the right secret joins; a wrong one and an unknown id get
 * the same answer; an expired one is told once, then gone. */
static void test_join_tokens(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        uint8_t h[STORE_HASH_SIZE], wrong[STORE_HASH_SIZE];
        memset(h, 0x5a, sizeof h);
        memcpy(wrong, h, sizeof h);
        wrong[STORE_HASH_SIZE - 1] ^= 1;
        /* insert deletes what expired by the clock: an hour from now */
        int64_t exp = (int64_t) (now_realtime_ns() / 1000000) + 3600 * 1000;
        assert_int_equal(store_join_token_insert(s, "jt-1", h, exp), 0);
        assert_int_equal(store_join_token_insert(s, "jt-1", h, exp), -EEXIST);
        assert_int_equal(store_join_token_insert(s, "jt-x", h, 0), -EINVAL);
        assert_int_equal(store_join_token_check(s, "jt-1", h, exp - 1), 0);
        assert_int_equal(store_join_token_check(s, "jt-1", h, exp - 1), 0); /* any number of joins */
        assert_int_equal(store_join_token_check(s, "jt-1", wrong, exp - 1), -ENOENT);
        assert_int_equal(store_join_token_check(s, "jt-9", h, exp - 1), -ENOENT);
        assert_int_equal(store_join_token_insert(s, "jt-2", h, exp + 1), 0);
        assert_int_equal(store_join_token_check(s, "jt-1", h, exp), -EKEYEXPIRED);
        assert_int_equal(store_join_token_check(s, "jt-1", h, exp - 1), -ENOENT); /* deleted as it went */
        assert_int_equal(store_join_token_check(s, "jt-2", h, exp), 0);

        assert_int_equal(store_join_token_insert(s, "jt-3", h, 1), 0); /* expired already */
        assert_int_equal(store_join_token_insert(s, "jt-4", h, exp), 0); /* deletes jt-3 */
        assert_int_equal(store_join_token_check(s, "jt-3", h, 0), -ENOENT);
        assert_int_equal(store_join_token_delete(s, "jt-2"), 0);
        assert_int_equal(store_join_token_delete(s, "jt-2"), -ENOENT);
        assert_int_equal(store_join_token_check(s, "jt-2", h, 0), -ENOENT);
        assert_int_equal(store_join_token_check(s, "jt-4", h, 0), 0);
        assert_int_equal(store_join_token_check(s, "jt-4", wrong, exp), -ENOENT); /* expiry not told */
}

/* The first CA stored wins: a replica with another one gets the first. */
static void test_cluster_ca(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        _cleanup_(store_closep) struct store *s2 = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        assert_int_equal(store_open(URL, &s2), 0);
        char *cert = NULL, *key = NULL;
        assert_int_equal(store_cluster_ca(s, "CERT-1", "KEY-1", &cert, &key), 0);
        assert_string_equal(cert, "CERT-1");
        assert_string_equal(key, "KEY-1");
        free(cert);
        free(key);
        assert_int_equal(store_cluster_ca(s2, "CERT-2", "KEY-2", &cert, &key), 0);
        assert_string_equal(cert, "CERT-1");
        assert_string_equal(key, "KEY-1");
        free(cert);
        free(key);
}

/* Capability keys (replaced by kid) and replicas (refreshed by id). */
static void test_cap_keys_and_replicas(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_cap_key k1 = { .kid = "k1", .public_key = "aa", .replica = "rep-1", .created_at = 100 };
        struct store_cap_key k2 = { .kid = "k2", .public_key = "bb", .replica = "rep-2", .created_at = 50 };
        assert_int_equal(store_cap_key_publish(s, &k1), 0);
        assert_int_equal(store_cap_key_publish(s, &k2), 0);
        k1.public_key = "cc";
        assert_int_equal(store_cap_key_publish(s, &k1), 0);
        struct store_cap_key *ka = NULL;
        size_t n = 0;
        assert_int_equal(store_cap_key_list(s, 10, &ka, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ka[0].kid, "k2"); /* oldest first */
        assert_string_equal(ka[1].public_key, "cc");
        assert_string_equal(ka[1].replica, "rep-1");
        assert_int_equal(ka[1].created_at, 100);
        store_cap_key_array_free(ka, n);
        assert_int_equal(store_cap_key_list(s, 1, &ka, &n), 0);
        assert_int_equal(n, 1);
        store_cap_key_array_free(ka, n);
        assert_int_equal(store_cap_key_delete(s, "k2"), 0);
        assert_int_equal(store_cap_key_delete(s, "k2"), -ENOENT);

        struct store_replica r1 = { .id = "rep-1", .cluster_address = "10.0.0.1:7000", .started_at = 10,
                                    .seen_at = 1000 };
        struct store_replica r2 = { .id = "rep-2", .api_address = "10.0.0.2:8080", .started_at = 20,
                                    .seen_at = 500 };
        assert_int_equal(store_replica_seen(s, &r1), 0);
        assert_int_equal(store_replica_seen(s, &r2), 0);
        r2.seen_at = 2000;
        r2.started_at = 99;
        assert_int_equal(store_replica_seen(s, &r2), 0);
        struct store_replica *ra = NULL;
        assert_int_equal(store_replica_list(s, 0, 10, &ra, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(ra[0].id, "rep-1"); /* by id */
        assert_string_equal(ra[0].cluster_address, "10.0.0.1:7000");
        assert_null(ra[0].api_address);
        assert_int_equal(ra[1].seen_at, 2000);
        assert_int_equal(ra[1].started_at, 20); /* kept */
        store_replica_array_free(ra, n);
        assert_int_equal(store_replica_list(s, 1500, 10, &ra, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(ra[0].id, "rep-2");
        store_replica_array_free(ra, n);
        assert_int_equal(store_replica_delete(s, "rep-1"), 0);
        assert_int_equal(store_replica_delete(s, "rep-1"), -ENOENT);
}

/* Operation leases: renewed by their owner, listed once they ran out,
 * taken over by one replica (compare-and-set), never when renewed or
 * finished. */
static void test_operation_leases(void **state) {
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        struct store_operation op = { .id = "op-a", .sandbox_id = "sbx-a", .verb = "create", .state = "running",
                                      .owner = "rep-1", .lease_until = 1000, .created_at = 1 };
        assert_int_equal(store_operation_insert(s, &op), 0);
        op = (struct store_operation){ .id = "op-b", .sandbox_id = "sbx-b", .verb = "fork", .state = "pending",
                                       .owner = "rep-1", .lease_until = 1000, .created_at = 2,
                                       .detail = "{\"child\":\"sbx-k\"}" };
        assert_int_equal(store_operation_insert(s, &op), 0);
        op = (struct store_operation){ .id = "op-c", .sandbox_id = "sbx-c", .verb = "stop", .state = "running",
                                       .owner = "rep-2", .lease_until = 1000, .created_at = 3 };
        assert_int_equal(store_operation_insert(s, &op), 0);
        op = (struct store_operation){ .id = "op-d", .sandbox_id = "sbx-d", .verb = "stop", .state = "running" };
        assert_int_equal(store_operation_insert(s, &op), 0); /* no owner: no lease */

        struct store_operation g = { 0 };
        assert_int_equal(store_operation_get(s, "op-a", &g), 0);
        assert_string_equal(g.owner, "rep-1");
        assert_int_equal(g.lease_until, 1000);
        assert_null(g.detail);
        store_operation_release(&g);
        assert_int_equal(store_operation_get(s, "op-b", &g), 0);
        assert_string_equal(g.detail, "{\"child\":\"sbx-k\"}"); /* migration 13 */
        store_operation_release(&g);
        assert_int_equal(store_operation_get(s, "op-d", &g), 0);
        assert_null(g.owner);
        assert_int_equal(g.lease_until, 0);
        store_operation_release(&g);

        assert_int_equal(store_operation_update(s, "op-b", "succeeded", NULL, "{}"), 0);
        uint64_t renewed = 0;
        assert_int_equal(store_operation_lease_renew(s, "rep-1", 5000, &renewed), 0);
        assert_int_equal(renewed, 1); /* the finished one is not */
        assert_int_equal(store_operation_lease_renew(s, "rep-9", 5000, NULL), 0);

        struct store_operation *a = NULL;
        size_t n = 0;
        assert_int_equal(store_operation_list_expired(s, 2000, 10, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].id, "op-c");
        assert_string_equal(a[0].owner, "rep-2");
        store_operation_array_free(a, n);
        assert_int_equal(store_operation_list_expired(s, 6000, 1, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].id, "op-a"); /* oldest first, bounded */
        store_operation_array_free(a, n);

        /* two takers of op-c: the first wins, the second finds its lease new */
        assert_int_equal(store_operation_take_over(s, "op-c", "rep-3", 2000, 9000), 0);
        assert_int_equal(store_operation_take_over(s, "op-c", "rep-4", 2000, 9000), -ESTALE);
        assert_int_equal(store_operation_get(s, "op-c", &g), 0);
        assert_string_equal(g.owner, "rep-3");
        assert_int_equal(g.lease_until, 9000);
        store_operation_release(&g);
        assert_int_equal(store_operation_take_over(s, "op-a", "rep-3", 2000, 9000), -ESTALE); /* renewed */
        assert_int_equal(store_operation_take_over(s, "op-b", "rep-3", 9999, 20000), -ESTALE); /* finished */
        assert_int_equal(store_operation_take_over(s, "op-d", "rep-3", 9999, 20000), -ESTALE); /* no lease */
        assert_int_equal(store_operation_take_over(s, "op-z", "rep-3", 9999, 20000), -ESTALE);

        /* an airlockd alone on its store lists what it left, leased or not */
        assert_int_equal(store_operation_list_unfinished(s, 10, &a, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(a[0].id, "op-a");
        assert_string_equal(a[1].id, "op-c");
        assert_string_equal(a[2].id, "op-d"); /* no lease, and listed */
        store_operation_array_free(a, n);
        assert_int_equal(store_operation_list_unfinished(s, 1, &a, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(a[0].id, "op-a");
        store_operation_array_free(a, n);
}

/* Replicas racing on two handles: each silent node is marked lost for
 * one of them, one beat of a lost node sees it lost, one taker wins. */
struct race {
        struct store *s;
        pthread_barrier_t *start;
        char **names;
        size_t n;
        bool lost;
        int r, taken;
};

static void *race_run(void *arg) {
        struct race *x = arg;
        pthread_barrier_wait(x->start);
        x->r = store_nodes_mark_lost(x->s, 5000, &x->names, &x->n);
        pthread_barrier_wait(x->start);
        struct store_node beat = { .name = "race-00", .heartbeat_at = 6000 };
        if (x->r >= 0)
                x->r = store_node_heartbeat(x->s, &beat, &x->lost, NULL);
        pthread_barrier_wait(x->start);
        x->taken = store_operation_take_over(x->s, "op-race", "rep-x", 2000, 9000);
        return NULL;
}

static void test_cluster_races(void **state) {
        _cleanup_(store_closep) struct store *s1 = NULL;
        _cleanup_(store_closep) struct store *s2 = NULL;
        assert_int_equal(store_open(URL, &s1), 0);
        assert_int_equal(store_open(URL, &s2), 0);
        enum { NODES = 40 };
        for (unsigned i = 0; i < NODES; i++) {
                char name[16];
                snprintf(name, sizeof name, "race-%02u", i);
                struct store_node nd = { .name = name, .address = "x", .joined_at = 1, .heartbeat_at = 1000 };
                assert_int_equal(store_node_insert(s1, &nd), 0);
        }
        struct store_operation op = { .id = "op-race", .sandbox_id = "sbx-r", .verb = "create",
                                      .state = "running", .owner = "rep-dead", .lease_until = 1000 };
        assert_int_equal(store_operation_insert(s1, &op), 0);

        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        struct race x1 = { .s = s1, .start = &start }, x2 = { .s = s2, .start = &start };
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, race_run, &x1), 0);
        assert_int_equal(pthread_create(&t2, NULL, race_run, &x2), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_barrier_destroy(&start);
        assert_int_equal(x1.r, 0);
        assert_int_equal(x2.r, 0);
        assert_int_equal(x1.n + x2.n, NODES);
        unsigned seen[NODES] = { 0 };
        for (size_t i = 0; i < x1.n + x2.n; i++) {
                const char *name = i < x1.n ? x1.names[i] : x2.names[i - x1.n];
                seen[strtoul(name + 5, NULL, 10)]++;
        }
        for (unsigned i = 0; i < NODES; i++)
                assert_int_equal(seen[i], 1);
        store_string_array_free(x1.names, x1.n);
        store_string_array_free(x2.names, x2.n);
        assert_int_equal(x1.lost + x2.lost, 1);
        assert_int_equal((x1.taken == 0) + (x2.taken == 0), 1);
        assert_int_equal((x1.taken == -ESTALE) + (x2.taken == -ESTALE), 1);
}

/* Sandboxes and operations made before clusters: on the local node, no
 * owner, no lease. */
static void test_migration_12_upgrade(void **state) {
        struct backend *b = BACKEND;
        raw_migrate_to(b, 11);
        assert_int_equal(raw_exec(b, "INSERT INTO sandboxes (id, template, state, created_at, updated_at) "
                                     "VALUES ('sbx-old', 'minimal', 'running', 1, 1);"
                                     "INSERT INTO operations (id, sandbox_id, verb, state, created_at) "
                                     "VALUES ('op-old', 'sbx-old', 'create', 'running', 1)"),
                         0);
        _cleanup_(store_closep) struct store *s = NULL;
        assert_int_equal(store_open(URL, &s), 0);
        unsigned v = 0;
        assert_int_equal(store_schema_version(s, &v), 0);
        assert_true(v >= 12);
        struct store_sandbox sb = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-old", &sb), 0);
        assert_null(sb.node);
        store_sandbox_release(&sb);
        struct store_operation op = { 0 };
        assert_int_equal(store_operation_get(s, "op-old", &op), 0);
        assert_null(op.owner);
        assert_int_equal(op.lease_until, 0);
        store_operation_release(&op);
        char **names = NULL;
        int64_t *counts = NULL;
        size_t n = 0;
        assert_int_equal(store_sandbox_count_by_node(s, &names, &counts, &n), 0);
        assert_int_equal(n, 1);
        assert_null(names[0]);
        assert_int_equal(counts[0], 1);
        store_string_array_free(names, n);
        free(counts);
        struct store_operation *a = NULL;
        assert_int_equal(store_operation_list_expired(s, INT64_MAX, 10, &a, &n), 0);
        assert_int_equal(n, 0); /* never leased: not taken over */
        store_operation_array_free(a, n);
        assert_int_equal(store_operation_list_unfinished(s, 10, &a, &n), 0);
        assert_int_equal(n, 1); /* but the restart of its airlockd finds it */
        assert_string_equal(a[0].id, "op-old");
        store_operation_array_free(a, n);
}

/* PostgreSQL only: what several replicas sharing one database rely on. */

/* Two replicas adding to one tenant at once, each n times through add
 * (its nth thing: 0 made, limit_errno refused): how many were made and
 * refused in all. */
struct limit_race {
        struct store *s;
        int (*add)(struct store *s, unsigned nth);
        unsigned from, n; /* the first nth, and how many */
        int limit_errno;
        unsigned made, limited;
};

static void *limit_race_run(void *arg) {
        struct limit_race *k = arg;
        for (unsigned i = 0; i < k->n; i++) {
                int r = k->add(k->s, k->from + i);
                if (r == 0)
                        k->made++;
                else if (r == k->limit_errno)
                        k->limited++;
        }
        return NULL;
}

static void limit_race(struct backend *b, const char *tenant_id, int (*add)(struct store *s, unsigned nth),
                       unsigned n, int limit_errno, unsigned *ret_made, unsigned *ret_limited) {
        _cleanup_(store_closep) struct store *s1 = open_pg(b);
        _cleanup_(store_closep) struct store *s2 = open_pg(b);
        struct store_tenant t = { .id = (char *) tenant_id, .name = (char *) tenant_id };
        assert_int_equal(store_tenant_insert(s1, &t, 10), 0);
        struct limit_race k1 = { .s = s1, .add = add, .from = 1000, .n = n, .limit_errno = limit_errno };
        struct limit_race k2 = { .s = s2, .add = add, .from = 2000, .n = n, .limit_errno = limit_errno };
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, limit_race_run, &k1), 0);
        assert_int_equal(pthread_create(&t2, NULL, limit_race_run, &k2), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        *ret_made = k1.made + k2.made;
        *ret_limited = k1.limited + k2.limited;
}

static int race_key_add(struct store *s, unsigned nth) {
        char id[32];
        uint8_t h[STORE_HASH_SIZE];
        snprintf(id, sizeof id, "key-%016u", nth);
        memset(h, 0, sizeof h);
        memcpy(h, &nth, sizeof nth);
        return store_api_key_create(s, id, "ten-race", NULL, h, 7);
}

/* Two replicas adding keys to one tenant at once never pass its limit:
 * the count and the insert are one transaction under the scope's lock. */
static void test_pg_key_limit_across_replicas(void **state) {
        struct backend *b = BACKEND;
        unsigned made, limited;
        limit_race(b, "ten-race", race_key_add, 10, -EDQUOT, &made, &limited);
        assert_int_equal(made, 7);
        assert_int_equal(limited, 13);
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM api_keys WHERE tenant_id = 'ten-race'"), 7);
}

static int race_webhook_add(struct store *s, unsigned nth) {
        char id[32];
        snprintf(id, sizeof id, "wh-%016u", nth);
        return webhook_add(s, id, "ten-wrace", 0);
}

/* The same of webhooks and their limit. */
static void test_pg_webhook_limit_across_replicas(void **state) {
        struct backend *b = BACKEND;
        unsigned made, limited;
        limit_race(b, "ten-wrace", race_webhook_add, 20, -EDQUOT, &made, &limited);
        assert_int_equal(made, STORE_WEBHOOKS_MAX);
        assert_int_equal(limited, 40 - STORE_WEBHOOKS_MAX);
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM webhooks WHERE tenant_id = 'ten-wrace'"),
                         STORE_WEBHOOKS_MAX);
}

struct opener {
        const char *url;
        int r;
};

static void *opener_run(void *arg) {
        struct opener *o = arg;
        struct store *s = NULL;
        o->r = store_open(o->url, &s);
        store_close(s);
        return NULL;
}

/* Replicas starting together on an empty database: every one opens it,
 * and each migration ran once. */
static void test_pg_concurrent_migrations(void **state) {
        struct backend *b = BACKEND;
        struct opener o[4];
        pthread_t t[4];
        for (size_t i = 0; i < ARRAY_SIZE(o); i++) {
                o[i] = (struct opener){ .url = b->url, .r = 1 };
                assert_int_equal(pthread_create(&t[i], NULL, opener_run, &o[i]), 0);
        }
        for (size_t i = 0; i < ARRAY_SIZE(o); i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(o[i].r, 0);
        }
        assert_int_equal(raw_count(b, "SELECT COUNT(*) FROM schema_migrations"), (long) b->n_migrations);
        assert_int_equal(raw_count(b, "SELECT MAX(version) FROM schema_migrations"), (long) b->n_migrations);
}

/* An Idempotency-Key taken through one replica is taken for the other. */
static void test_pg_idempotency_across_replicas(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s1 = open_pg(b);
        _cleanup_(store_closep) struct store *s2 = open_pg(b);
        struct store_operation a = { .id = "op-000000000000000a", .sandbox_id = "sbx-x", .verb = "create",
                                     .state = "pending", .idempotency_key = "k-1" };
        struct store_operation c = a;
        c.id = "op-000000000000000c";
        assert_int_equal(store_operation_insert(s1, &a), 0);
        assert_int_equal(store_operation_insert(s2, &c), -EEXIST);
        struct store_operation got = { 0 };
        assert_int_equal(store_operation_find_by_key(s2, "k-1", &got), 0);
        assert_string_equal(got.id, a.id);
        store_operation_release(&got);
        /* control: another key goes in */
        c.idempotency_key = "k-2";
        assert_int_equal(store_operation_insert(s2, &c), 0);
}

/* The server drops the store's idle connections (a restart, a failover,
 * an administrator): the next calls open new ones and succeed. The
 * termination waits until those sessions have ended, so their goodbye is
 * on the socket before the next call (a write sent on a connection that
 * dies under it is -EIO: it may have committed, so it is not sent again). */
static void test_pg_connection_lost(void **state) {
        struct backend *b = BACKEND;
        _cleanup_(store_closep) struct store *s = open_pg(b);
        struct store_sandbox sb = { .id = "sbx-conn", .template_name = "minimal", .state = "running" };
        assert_int_equal(store_sandbox_insert(s, &sb), 0);
        assert_int_equal(raw_exec(b, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                                     "WHERE datname = current_database() AND pid <> pg_backend_pid()"),
                         0);
        struct store_sandbox got = { 0 };
        assert_int_equal(store_sandbox_get(s, "sbx-conn", &got), 0);
        assert_string_equal(got.state, "running");
        store_sandbox_release(&got);
        /* and a write */
        assert_int_equal(raw_exec(b, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                                     "WHERE datname = current_database() AND pid <> pg_backend_pid()"),
                         0);
        assert_int_equal(store_sandbox_update_state(s, "sbx-conn", "paused", NULL), 0);
        assert_int_equal(store_sandbox_get(s, "sbx-conn", &got), 0);
        assert_string_equal(got.state, "paused");
        store_sandbox_release(&got);
}

/* The tests every backend runs, each with the backend as its state. */
#define BACKEND_TESTS(b)                                                                           \
        cmocka_unit_test_prestate_setup_teardown(test_migrations_idempotent, setup, teardown, b),  \
        cmocka_unit_test_prestate_setup_teardown(test_sandbox_crud, setup, teardown, b),           \
        cmocka_unit_test_prestate_setup_teardown(test_sessions, setup, teardown, b),               \
        cmocka_unit_test_prestate_setup_teardown(test_api_keys, setup, teardown, b),               \
        cmocka_unit_test_prestate_setup_teardown(test_lifecycle_rows, setup, teardown, b),         \
        cmocka_unit_test_prestate_setup_teardown(test_operation_progress, setup, teardown, b),     \
        cmocka_unit_test_prestate_setup_teardown(test_snapshots, setup, teardown, b),              \
        cmocka_unit_test_prestate_setup_teardown(test_snapshot_pinned_and_policy, setup, teardown, b), \
        cmocka_unit_test_prestate_setup_teardown(test_migration_5_upgrade, setup, teardown, b),    \
        cmocka_unit_test_prestate_setup_teardown(test_tenants_and_keys, setup, teardown, b),       \
        cmocka_unit_test_prestate_setup_teardown(test_migration_7_upgrade, setup, teardown, b),    \
        cmocka_unit_test_prestate_setup_teardown(test_network_policies, setup, teardown, b),       \
        cmocka_unit_test_prestate_setup_teardown(test_sandbox_lifetimes, setup, teardown, b),      \
        cmocka_unit_test_prestate_setup_teardown(test_images, setup, teardown, b),                 \
        cmocka_unit_test_prestate_setup_teardown(test_volumes, setup, teardown, b),                \
        cmocka_unit_test_prestate_setup_teardown(test_migration_18_upgrade, setup, teardown, b),   \
        cmocka_unit_test_prestate_setup_teardown(test_volume_races, setup, teardown, b),           \
        cmocka_unit_test_prestate_setup_teardown(test_events, setup, teardown, b),                 \
        cmocka_unit_test_prestate_setup_teardown(test_webhooks, setup, teardown, b),               \
        cmocka_unit_test_prestate_setup_teardown(test_webhook_deliveries, setup, teardown, b),     \
        cmocka_unit_test_prestate_setup_teardown(test_event_append_and_prune, setup, teardown, b), \
        cmocka_unit_test_prestate_setup_teardown(test_migration_19_upgrade, setup, teardown, b),   \
        cmocka_unit_test_prestate_setup_teardown(test_nodes, setup, teardown, b),                  \
        cmocka_unit_test_prestate_setup_teardown(test_sandbox_nodes, setup, teardown, b),          \
        cmocka_unit_test_prestate_setup_teardown(test_join_tokens, setup, teardown, b),            \
        cmocka_unit_test_prestate_setup_teardown(test_cluster_ca, setup, teardown, b),             \
        cmocka_unit_test_prestate_setup_teardown(test_cap_keys_and_replicas, setup, teardown, b),  \
        cmocka_unit_test_prestate_setup_teardown(test_operation_leases, setup, teardown, b),       \
        cmocka_unit_test_prestate_setup_teardown(test_cluster_races, setup, teardown, b),          \
        cmocka_unit_test_prestate_setup_teardown(test_migration_12_upgrade, setup, teardown, b)

int main(void) {
        const struct CMUnitTest sqlite_tests[] = {
                cmocka_unit_test(test_open_bad_url),
                BACKEND_TESTS(&sqlite_backend),
        };
        const struct CMUnitTest pg_tests[] = {
                BACKEND_TESTS(&pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_key_limit_across_replicas, setup, teardown,
                                                         &pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_webhook_limit_across_replicas, setup, teardown,
                                                         &pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_concurrent_migrations, setup, teardown,
                                                         &pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_idempotency_across_replicas, setup, teardown,
                                                         &pg_backend),
                cmocka_unit_test_prestate_setup_teardown(test_pg_connection_lost, setup, teardown, &pg_backend),
        };
        int failed = cmocka_run_group_tests_name("sqlite", sqlite_tests, NULL, NULL);
        failed += cmocka_run_group_tests_name("postgresql", pg_tests, NULL, NULL);
        return unit_exit(failed);
}
