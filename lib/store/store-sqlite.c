/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend of the store: one connection in WAL mode, foreign keys on,
 * a busy timeout, statements prepared once at open. A mutex serialises use
 * of the connection and its prepared statements (a statement is stepped and
 * read across several calls, which SQLite's own mutex does not cover).
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "migrations/sqlite.h"
#include "store-sqlite-internal.h"
#include "store.h"

#define SQLITE_BUSY_TIMEOUT_MS 5000

enum stmt_id {
        STMT_SANDBOX_INSERT,
        STMT_SANDBOX_GET,
        STMT_SANDBOX_LIST,
        STMT_SANDBOX_UPDATE,
        STMT_SANDBOX_DELETE,
        STMT_SESSION_INSERT,
        STMT_SESSION_GET,
        STMT_SESSION_DELETE,
        STMT_KEY_UPSERT,
        STMT_KEY_ALL,
        STMT_VERSION,
        STMT_SANDBOX_TRANSITION,
        STMT_OP_INSERT,
        STMT_OP_GET,
        STMT_OP_BY_KEY,
        STMT_OP_UPDATE,
        STMT_OP_PROGRESS,
        STMT_OP_FAIL_UNFINISHED,
        STMT_SNAP_INSERT,
        STMT_SNAP_GET,
        STMT_SNAP_LIST,
        STMT_SNAP_DELETE,
        STMT_SANDBOX_LIST_TENANT,
        STMT_KEY_CREATE,
        STMT_KEY_LIST,
        STMT_KEY_DELETE,
        STMT_TENANT_INSERT,
        STMT_TENANT_GET,
        STMT_TENANT_LIST,
        STMT_TENANT_DELETE,
        STMT_SANDBOX_NETWORK_GET,
        STMT_SANDBOX_NETWORK_SET,
        STMT_TENANT_NETWORK_SET,
        STMT_SANDBOX_EXPIRY_SET,
        _STMT_MAX,
};

static const char *const stmt_sql[_STMT_MAX] = {
        [STMT_SANDBOX_INSERT] = "INSERT INTO sandboxes (id, template, state, error, metadata, env_keys, "
                                "created_at, updated_at, desired_state, snapshot_policy, idle_timeout_s, tenant_id, network, "
                                "expires_at, expiry_s, on_expiry, node, memory_mib, vcpus) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
                                "?19)",
        [STMT_SANDBOX_GET] = "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = ?1",
        [STMT_SANDBOX_LIST] = "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes ORDER BY created_at, id LIMIT ?1",
        [STMT_SANDBOX_UPDATE] = "UPDATE sandboxes SET state = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
        [STMT_SANDBOX_DELETE] = "DELETE FROM sandboxes WHERE id = ?1",
        [STMT_SESSION_INSERT] = "INSERT INTO sessions (id, sandbox_id, cmd, pty, token_hash, created_at) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [STMT_SESSION_GET] = "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = ?1",
        [STMT_SESSION_DELETE] = "DELETE FROM sessions WHERE id = ?1",
        [STMT_KEY_UPSERT] = "INSERT INTO api_keys (name, hash, created_at, id) "
                            "VALUES (?1, ?2, ?3, 'key-' || lower(hex(randomblob(8)))) "
                            "ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at",
        [STMT_KEY_ALL] = "SELECT hash, tenant_id FROM api_keys",
        [STMT_VERSION] = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [STMT_SANDBOX_TRANSITION] = "UPDATE sandboxes SET state = ?3, desired_state = COALESCE(?4, desired_state), "
                                    "error = NULL, updated_at = ?5 WHERE id = ?1 AND state = ?2",
        [STMT_OP_INSERT] = "INSERT INTO operations (id, sandbox_id, verb, state, error, result, idempotency_key, "
                           "created_at, request_hash, stage, progress, tenant_id, owner, lease_until, detail) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                           "COALESCE(?12, (SELECT tenant_id FROM sandboxes WHERE id = ?2)), ?13, ?14, ?15)",
        [STMT_OP_GET] = "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE id = ?1",
        [STMT_OP_BY_KEY] = "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE idempotency_key = ?1",
        [STMT_OP_UPDATE] = "UPDATE operations SET state = ?2, error = ?3, result = ?4, "
                           "finished_at = CASE WHEN ?2 IN ('succeeded', 'failed') THEN ?5 ELSE NULL END, "
                           "progress = CASE WHEN ?2 = 'succeeded' THEN 100 ELSE progress END, "
                           "stage = CASE WHEN ?2 = 'succeeded' THEN NULL ELSE stage END WHERE id = ?1",
        [STMT_OP_PROGRESS] = "UPDATE operations SET progress = ?2, stage = ?3 "
                             "WHERE id = ?1 AND state IN ('pending', 'running')",
        [STMT_OP_FAIL_UNFINISHED] = "UPDATE operations SET state = 'failed', error = ?1, finished_at = ?2 "
                                    "WHERE state IN ('pending', 'running')",
        [STMT_SNAP_INSERT] = "INSERT INTO snapshots (id, sandbox_id, kind, size, created_at, pinned) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [STMT_SNAP_GET] = "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE id = ?1",
        [STMT_SNAP_LIST] = "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE sandbox_id = ?1 "
                           "ORDER BY created_at DESC, id DESC LIMIT ?2",
        [STMT_SNAP_DELETE] = "DELETE FROM snapshots WHERE id = ?1",
        [STMT_SANDBOX_LIST_TENANT] = "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                                     "WHERE tenant_id = ?1 ORDER BY created_at, id LIMIT ?2",
        /* the limit is part of the statement, so two racing creates cannot
         * both pass it; no row inserted means "over the limit" */
        [STMT_KEY_CREATE] = "INSERT INTO api_keys (name, hash, created_at, id, tenant_id, label) "
                            "SELECT ?1, ?2, ?3, ?1, ?4, ?5 "
                            "WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id IS ?4) < ?6",
        [STMT_KEY_LIST] = "SELECT " STORE_API_KEY_COLUMNS " FROM api_keys WHERE tenant_id = ?1 "
                          "ORDER BY created_at, id LIMIT ?2",
        [STMT_KEY_DELETE] = "DELETE FROM api_keys WHERE id = ?1 AND tenant_id IS NOT NULL",
        [STMT_TENANT_INSERT] = "INSERT INTO tenants (id, name, created_at, network) SELECT ?1, ?2, ?3, ?5 "
                               "WHERE (SELECT COUNT(*) FROM tenants) < ?4",
        [STMT_TENANT_GET] = "SELECT " STORE_TENANT_COLUMNS " FROM tenants WHERE id = ?1",
        [STMT_TENANT_LIST] = "SELECT " STORE_TENANT_COLUMNS " FROM tenants ORDER BY created_at, id LIMIT ?1",
        /* the foreign key of sandboxes.tenant_id has no cascade: a tenant
         * that still owns sandboxes is kept, whatever the race */
        [STMT_TENANT_DELETE] = "DELETE FROM tenants WHERE id = ?1 "
                               "AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE tenant_id = ?1) "
                               "AND NOT EXISTS (SELECT 1 FROM images WHERE tenant_id = ?1)",
        [STMT_SANDBOX_NETWORK_GET] = "SELECT network FROM sandboxes WHERE id = ?1",
        [STMT_SANDBOX_NETWORK_SET] = "UPDATE sandboxes SET network = ?3, updated_at = ?4 WHERE id = ?1 AND state = ?2",
        [STMT_TENANT_NETWORK_SET] = "UPDATE tenants SET network = ?2 WHERE id = ?1",
        [STMT_SANDBOX_EXPIRY_SET] = "UPDATE sandboxes SET expires_at = ?2, expiry_s = ?3, "
                                    "on_expiry = COALESCE(?4, on_expiry), updated_at = ?5 WHERE id = ?1",
};

struct store_sqlite {
        struct store_sqlite_conn conn; /* must be first */
        sqlite3_stmt *stmt[_STMT_MAX];
};

/* Maps an SQLite result code to a negative errno: the only place where
 * SQLite's codes are looked at. */
int sqlite_to_errno(sqlite3 *db, int rc) {
        int ext = db ? sqlite3_extended_errcode(db) : rc;
        switch (rc & 0xff) {
        case SQLITE_OK:
        case SQLITE_ROW:
        case SQLITE_DONE:
                return 0;
        case SQLITE_CONSTRAINT:
                if (ext == SQLITE_CONSTRAINT_FOREIGNKEY)
                        return -ENOENT;
                if (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)
                        return -EEXIST;
                return -EINVAL;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_CANTOPEN: {
                int e = db ? sqlite3_system_errno(db) : 0;
                return e > 0 ? -e : -EACCES;
        }
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
                return -EBADMSG;
        case SQLITE_TOOBIG:
                return -E2BIG;
        case SQLITE_MISUSE:
        case SQLITE_RANGE:
                return -EINVAL;
        default:
                return -EIO;
        }
}

static struct store_sqlite *to_sqlite(struct store *s) {
        return (struct store_sqlite *) s;
}

/* Takes the connection lock and resets the statement, ready for binding. */
static sqlite3_stmt *stmt_begin(struct store_sqlite *q, enum stmt_id id) {
        pthread_mutex_lock(&q->conn.lock);
        sqlite3_stmt *st = q->stmt[id];
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return st;
}

static void stmt_end(struct store_sqlite *q, sqlite3_stmt *st) {
        sqlite3_reset(st);
        pthread_mutex_unlock(&q->conn.lock);
}

/* Steps a statement that returns no rows. */
static int step_done(struct store_sqlite *q, sqlite3_stmt *st) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
                return 0;
        return sqlite_to_errno(q->conn.db, rc);
}

/* The prepared statement id run with p bound, as a call of its own: a
 * write (stmt_write: *ret_changed the rows it touched; stmt_write_one:
 * -ENOENT when it touched none) or a SELECT (stmt_select_one: its first
 * row through read_row, or -ENOENT; stmt_select_all: its rows through
 * list, store_rows_list()). */
static int stmt_write(struct store_sqlite *q, enum stmt_id id, const struct store_params *p, uint64_t *ret_changed) {
        sqlite3_stmt *st = stmt_begin(q, id);
        sqlite_bind(st, p);
        int r = step_done(q, st);
        if (r >= 0 && ret_changed)
                *ret_changed = (uint64_t) sqlite3_changes(q->conn.db);
        stmt_end(q, st);
        return r;
}

static int stmt_write_one(struct store_sqlite *q, enum stmt_id id, const struct store_params *p) {
        uint64_t n = 0;
        int r = stmt_write(q, id, p, &n);
        return r < 0 ? r : n == 0 ? -ENOENT : 0;
}

static int stmt_select_one(struct store_sqlite *q, enum stmt_id id, const struct store_params *p,
                           int (*read_row)(const struct store_row *, void *), void *ret) {
        sqlite3_stmt *st = stmt_begin(q, id);
        sqlite_bind(st, p);
        int r = sqlite_one(&q->conn, st, read_row, ret);
        stmt_end(q, st);
        return r;
}

static int stmt_select_all(struct store_sqlite *q, enum stmt_id id, const struct store_params *p,
                           const struct store_list *list, void *ret, size_t *ret_n) {
        sqlite3_stmt *st = stmt_begin(q, id);
        sqlite_bind(st, p);
        int r = sqlite_list(&q->conn, st, list, SIZE_MAX, ret, ret_n);
        stmt_end(q, st);
        return r;
}

static int exec_sql(sqlite3 *db, const char *sql) {
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        return rc == SQLITE_OK ? 0 : sqlite_to_errno(db, rc);
}

static int query_version(sqlite3 *db, unsigned *ret) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, stmt_sql[STMT_VERSION], -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(db, rc);
        rc = sqlite3_step(st);
        int r = rc == SQLITE_ROW ? 0 : sqlite_to_errno(db, rc);
        if (rc == SQLITE_ROW)
                *ret = (unsigned) sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return r;
}

/* Applies every migration newer than the database, one transaction each.
 * BEGIN IMMEDIATE takes the write lock before the version is read, so two
 * processes opening the same fresh database cannot both apply version 1. */
static int migrate(sqlite3 *db) {
        int r = exec_sql(db, "CREATE TABLE IF NOT EXISTS schema_migrations ("
                             "version INTEGER PRIMARY KEY NOT NULL, applied_at INTEGER NOT NULL)");
        if (r < 0)
                return r;
        for (;;) {
                r = exec_sql(db, "BEGIN IMMEDIATE");
                if (r < 0)
                        return r;
                unsigned v = 0;
                r = query_version(db, &v);
                if (r < 0)
                        goto rollback;
                if (v > ARRAY_SIZE(store_sqlite_migrations)) {
                        r = -EPROTO; /* written by a newer airlockd */
                        goto rollback;
                }
                if (v == ARRAY_SIZE(store_sqlite_migrations))
                        return exec_sql(db, "COMMIT");
                r = exec_sql(db, store_sqlite_migrations[v]);
                if (r < 0)
                        goto rollback;
                sqlite3_stmt *st = NULL;
                int rc = sqlite3_prepare_v2(db, "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                                            -1, &st, NULL);
                if (rc != SQLITE_OK) {
                        r = sqlite_to_errno(db, rc);
                        goto rollback;
                }
                sqlite3_bind_int64(st, 1, (sqlite3_int64) v + 1);
                sqlite3_bind_int64(st, 2, store_now_ms());
                rc = sqlite3_step(st);
                r = rc == SQLITE_DONE ? 0 : sqlite_to_errno(db, rc);
                sqlite3_finalize(st);
                if (r < 0)
                        goto rollback;
                r = exec_sql(db, "COMMIT");
                if (r < 0)
                        goto rollback;
        }
rollback:
        (void) exec_sql(db, "ROLLBACK");
        return r;
}

static void sqlite_close(struct store *s) {
        struct store_sqlite *q = to_sqlite(s);
        if (!q)
                return;
        for (size_t i = 0; i < _STMT_MAX; i++)
                sqlite3_finalize(q->stmt[i]);
        sqlite3_close_v2(q->conn.db);
        pthread_mutex_destroy(&q->conn.lock);
        free(q);
}

static int sqlite_open(const char *location, struct store **ret) {
        if (!location || !*location)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        struct store_sqlite *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->conn.base.ops = &store_sqlite_ops;
        pthread_mutex_init(&q->conn.lock, NULL);

        int r;
        int rc = sqlite3_open_v2(location, &q->conn.db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX |
                                         SQLITE_OPEN_NOFOLLOW,
                                 NULL);
        if (rc != SQLITE_OK) {
                r = sqlite_to_errno(q->conn.db, rc);
                goto fail;
        }
        sqlite3_extended_result_codes(q->conn.db, 1);
        sqlite3_busy_timeout(q->conn.db, SQLITE_BUSY_TIMEOUT_MS);
        r = exec_sql(q->conn.db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
        if (r < 0)
                goto fail;
        r = migrate(q->conn.db);
        if (r < 0)
                goto fail;
        for (size_t i = 0; i < _STMT_MAX; i++) {
                rc = sqlite3_prepare_v3(q->conn.db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &q->stmt[i], NULL);
                if (rc != SQLITE_OK) {
                        r = sqlite_to_errno(q->conn.db, rc);
                        goto fail;
                }
        }
        *ret = &q->conn.base;
        return 0;
fail:
        sqlite_close(&q->conn.base);
        return r;
}

static int sqlite_schema_version(struct store *s, unsigned *ret) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_VERSION);
        int rc = sqlite3_step(st);
        int r = rc == SQLITE_ROW ? 0 : sqlite_to_errno(q->conn.db, rc);
        if (rc == SQLITE_ROW)
                *ret = (unsigned) sqlite3_column_int64(st, 0);
        stmt_end(q, st);
        return r;
}

static int sqlite_sandbox_insert(struct store *s, const struct store_sandbox *sb) {
        struct store_params q = { 0 };
        store_params_sandbox(&q, sb);
        return stmt_write(to_sqlite(s), STMT_SANDBOX_INSERT, &q, NULL);
}

/* Runs the SELECT id of one row by one text parameter: the row through
 * read_row into ret, or -ENOENT. */
static int select_by(struct store *s, enum stmt_id id, const char *arg,
                     int (*read_row)(const struct store_row *, void *), void *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return stmt_select_one(to_sqlite(s), id, &q, read_row, ret);
}

/* Runs the write id whose only parameter is one text; -ENOENT when it
 * touched no row. */
static int write_by(struct store *s, enum stmt_id id, const char *arg) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return stmt_write_one(to_sqlite(s), id, &q);
}

static int sqlite_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret) {
        return select_by(s, STMT_SANDBOX_GET, id, store_read_sandbox, ret);
}

/* Lists sandboxes: every one (tenant_id NULL) or one tenant's. */
static int sandbox_list_common(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                               size_t *ret_n) {
        struct store_params q = { 0 };
        if (tenant_id)
                store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return stmt_select_all(to_sqlite(s), tenant_id ? STMT_SANDBOX_LIST_TENANT : STMT_SANDBOX_LIST, &q,
                               &store_list_sandbox, ret, ret_n);
}

static int sqlite_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        return sandbox_list_common(s, NULL, max, ret, ret_n);
}

static int sqlite_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                                      size_t *ret_n) {
        return sandbox_list_common(s, tenant_id, max, ret, ret_n);
}

static int sqlite_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return stmt_write_one(to_sqlite(s), STMT_SANDBOX_UPDATE, &q);
}

static int sqlite_sandbox_delete(struct store *s, const char *id) {
        return write_by(s, STMT_SANDBOX_DELETE, id);
}

static int sqlite_sandbox_transition(struct store *s, const char *id, const char *from, const char *to,
                                     const char *desired) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_text(&q, desired);
        store_param_int(&q, store_now_ms());
        int r = stmt_write_one(to_sqlite(s), STMT_SANDBOX_TRANSITION, &q);
        return r == -ENOENT ? -ESTALE : r;
}

static int sqlite_sandbox_network_get(struct store *s, const char *id, char **ret) {
        return select_by(s, STMT_SANDBOX_NETWORK_GET, id, store_read_text, ret);
}

static int sqlite_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, network);
        store_param_int(&q, store_now_ms());
        int r = stmt_write_one(to_sqlite(s), STMT_SANDBOX_NETWORK_SET, &q);
        return r == -ENOENT ? -ESTALE : r;
}

static int sqlite_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                                     const char *on_expiry) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int_or_null(&q, expires_at);
        store_param_int_or_null(&q, expiry_s);
        store_param_text(&q, on_expiry);
        store_param_int(&q, store_now_ms());
        return stmt_write_one(to_sqlite(s), STMT_SANDBOX_EXPIRY_SET, &q);
}

static int sqlite_operation_insert(struct store *s, const struct store_operation *op) {
        struct store_params q = { 0 };
        store_params_operation(&q, op);
        return stmt_write(to_sqlite(s), STMT_OP_INSERT, &q, NULL);
}

static int sqlite_operation_get(struct store *s, const char *id, struct store_operation *ret) {
        return select_by(s, STMT_OP_GET, id, store_read_operation, ret);
}

static int sqlite_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret) {
        return select_by(s, STMT_OP_BY_KEY, key, store_read_operation, ret);
}

static int sqlite_operation_update(struct store *s, const char *id, const char *state, const char *error,
                                   const char *result) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_text(&q, result);
        store_param_int(&q, store_now_ms());
        return stmt_write_one(to_sqlite(s), STMT_OP_UPDATE, &q);
}

static int sqlite_operation_progress(struct store *s, const char *id, int progress, const char *stage) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int(&q, progress);
        store_param_text(&q, stage);
        return stmt_write_one(to_sqlite(s), STMT_OP_PROGRESS, &q);
}

static int sqlite_operation_fail_unfinished(struct store *s, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return stmt_write(to_sqlite(s), STMT_OP_FAIL_UNFINISHED, &q, NULL);
}

static int sqlite_snapshot_insert(struct store *s, const struct store_snapshot *snap) {
        struct store_params q = { 0 };
        store_params_snapshot(&q, snap);
        return stmt_write(to_sqlite(s), STMT_SNAP_INSERT, &q, NULL);
}

static int sqlite_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret) {
        return select_by(s, STMT_SNAP_GET, id, store_read_snapshot, ret);
}

static int sqlite_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                                size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return stmt_select_all(to_sqlite(s), STMT_SNAP_LIST, &q, &store_list_snapshot, ret, ret_n);
}

static int sqlite_snapshot_delete(struct store *s, const char *id) {
        return write_by(s, STMT_SNAP_DELETE, id);
}

static int sqlite_session_insert(struct store *s, const struct store_session *ses) {
        struct store_params q = { 0 };
        store_params_session(&q, ses);
        return stmt_write(to_sqlite(s), STMT_SESSION_INSERT, &q, NULL);
}

static int sqlite_session_get(struct store *s, const char *id, struct store_session *ret) {
        return select_by(s, STMT_SESSION_GET, id, store_read_session, ret);
}

static int sqlite_session_delete(struct store *s, const char *id) {
        return write_by(s, STMT_SESSION_DELETE, id);
}

static int sqlite_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        return stmt_write(to_sqlite(s), STMT_KEY_UPSERT, &q, NULL);
}

static int sqlite_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_ALL);
        struct sqlite_rows rows = sqlite_rows(q->conn.db, st);
        int r = store_rows_match_key(&rows.row, hash, ret_tenant_id);
        stmt_end(q, st);
        return r;
}

static int sqlite_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                                 const uint8_t hash[STORE_HASH_SIZE], size_t max) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        store_param_int(&q, (int64_t) MIN(max, (size_t) INT64_MAX));
        uint64_t n = 0;
        int r = stmt_write(to_sqlite(s), STMT_KEY_CREATE, &q, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

static int sqlite_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret,
                               size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return stmt_select_all(to_sqlite(s), STMT_KEY_LIST, &q, &store_list_api_key, ret, ret_n);
}

static int sqlite_api_key_delete(struct store *s, const char *id) {
        return write_by(s, STMT_KEY_DELETE, id);
}

static int sqlite_tenant_insert(struct store *s, const struct store_tenant *t, size_t max) {
        struct store_params q = { 0 };
        store_params_tenant(&q, t, max);
        uint64_t n = 0;
        int r = stmt_write(to_sqlite(s), STMT_TENANT_INSERT, &q, &n);
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

static int sqlite_tenant_get(struct store *s, const char *id, struct store_tenant *ret) {
        return select_by(s, STMT_TENANT_GET, id, store_read_tenant, ret);
}

static int sqlite_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return stmt_select_all(to_sqlite(s), STMT_TENANT_LIST, &q, &store_list_tenant, ret, ret_n);
}

static int sqlite_tenant_delete(struct store *s, const char *id) {
        int r = write_by(s, STMT_TENANT_DELETE, id);
        if (r != -ENOENT)
                return r;
        /* nothing deleted: unknown, or it still owns sandboxes */
        struct store_tenant t = { 0 };
        r = sqlite_tenant_get(s, id, &t);
        store_tenant_release(&t);
        return r < 0 ? r : -EBUSY;
}

static int sqlite_tenant_network_set(struct store *s, const char *id, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, network);
        return stmt_write_one(to_sqlite(s), STMT_TENANT_NETWORK_SET, &q);
}

/* Templates built from specs: the admin's rows and the local node are NULL in
 * the table, "" in the struct. */
int sqlite_template_put(struct store *s, const struct store_template *t, size_t max) {
        struct store_params q = { 0 };
        store_params_template(&q, t, max);
        /* one statement, so the count and the write see one state; a
         * replaced row keeps its created_at */
        uint64_t n = 0;
        int r = sqlite_write(s,
                             "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                             "SELECT NULLIF(?1, ''), ?2, ?3, ?4, ?5, ?6, NULLIF(?7, ''), ?8, ?9, ?10, ?11, ?12 "
                             "WHERE EXISTS (SELECT 1 FROM templates WHERE " SCOPE_IS(1) " AND name = ?2) "
                             "OR (SELECT COUNT(*) FROM templates WHERE " SCOPE_IS(1) ") < ?13 "
                             "ON CONFLICT (COALESCE(tenant_id, ''), name) DO UPDATE SET "
                             "node_name = excluded.node_name, build_id = excluded.build_id, state = excluded.state, "
                             "error = excluded.error, node = excluded.node, spec = excluded.spec, "
                             "memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                             "updated_at = excluded.updated_at",
                             &q, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

const struct store_ops store_sqlite_ops = {
        .scheme = "sqlite",
        .open = sqlite_open,
        .close = sqlite_close,
        STORE_BACKEND_OPS(sqlite)
};
