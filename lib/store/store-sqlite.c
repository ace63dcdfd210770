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
#include "util.h"

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
                                "expires_at, expiry_s, on_expiry) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        [STMT_SANDBOX_GET] = "SELECT id, template, state, error, metadata, env_keys, created_at, updated_at, "
                             "desired_state, snapshot_policy, idle_timeout_s, tenant_id, expires_at, expiry_s, on_expiry FROM sandboxes WHERE id = ?1",
        [STMT_SANDBOX_LIST] = "SELECT id, template, state, error, metadata, env_keys, created_at, updated_at, "
                              "desired_state, snapshot_policy, idle_timeout_s, tenant_id, expires_at, expiry_s, on_expiry FROM sandboxes "
                              "ORDER BY created_at, id LIMIT ?1",
        [STMT_SANDBOX_UPDATE] = "UPDATE sandboxes SET state = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
        [STMT_SANDBOX_DELETE] = "DELETE FROM sandboxes WHERE id = ?1",
        [STMT_SESSION_INSERT] = "INSERT INTO sessions (id, sandbox_id, cmd, pty, token_hash, created_at) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [STMT_SESSION_GET] = "SELECT id, sandbox_id, cmd, pty, token_hash, created_at FROM sessions WHERE id = ?1",
        [STMT_SESSION_DELETE] = "DELETE FROM sessions WHERE id = ?1",
        [STMT_KEY_UPSERT] = "INSERT INTO api_keys (name, hash, created_at, id) "
                            "VALUES (?1, ?2, ?3, 'key-' || lower(hex(randomblob(8)))) "
                            "ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at",
        [STMT_KEY_ALL] = "SELECT hash, tenant_id FROM api_keys",
        [STMT_VERSION] = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [STMT_SANDBOX_TRANSITION] = "UPDATE sandboxes SET state = ?3, desired_state = COALESCE(?4, desired_state), "
                                    "error = NULL, updated_at = ?5 WHERE id = ?1 AND state = ?2",
        [STMT_OP_INSERT] = "INSERT INTO operations (id, sandbox_id, verb, state, error, result, idempotency_key, "
                           "created_at, request_hash, stage, progress, tenant_id) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                           "COALESCE(?12, (SELECT tenant_id FROM sandboxes WHERE id = ?2)))",
        [STMT_OP_GET] = "SELECT id, sandbox_id, verb, state, error, result, idempotency_key, created_at, "
                        "finished_at, request_hash, stage, progress, tenant_id FROM operations WHERE id = ?1",
        [STMT_OP_BY_KEY] = "SELECT id, sandbox_id, verb, state, error, result, idempotency_key, created_at, "
                           "finished_at, request_hash, stage, progress, tenant_id FROM operations "
                           "WHERE idempotency_key = ?1",
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
        [STMT_SNAP_GET] = "SELECT id, sandbox_id, kind, size, created_at, pinned FROM snapshots WHERE id = ?1",
        [STMT_SNAP_LIST] = "SELECT id, sandbox_id, kind, size, created_at, pinned FROM snapshots WHERE sandbox_id = ?1 "
                           "ORDER BY created_at DESC, id DESC LIMIT ?2",
        [STMT_SNAP_DELETE] = "DELETE FROM snapshots WHERE id = ?1",
        [STMT_SANDBOX_LIST_TENANT] = "SELECT id, template, state, error, metadata, env_keys, created_at, updated_at, "
                                     "desired_state, snapshot_policy, idle_timeout_s, tenant_id, expires_at, expiry_s, on_expiry FROM sandboxes "
                                     "WHERE tenant_id = ?1 ORDER BY created_at, id LIMIT ?2",
        /* the limit is part of the statement, so two racing creates cannot
         * both pass it; no row inserted means "over the limit" */
        [STMT_KEY_CREATE] = "INSERT INTO api_keys (name, hash, created_at, id, tenant_id, label) "
                            "SELECT ?1, ?2, ?3, ?1, ?4, ?5 "
                            "WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id IS ?4) < ?6",
        [STMT_KEY_LIST] = "SELECT id, tenant_id, label, created_at FROM api_keys WHERE tenant_id = ?1 "
                          "ORDER BY created_at, id LIMIT ?2",
        [STMT_KEY_DELETE] = "DELETE FROM api_keys WHERE id = ?1 AND tenant_id IS NOT NULL",
        [STMT_TENANT_INSERT] = "INSERT INTO tenants (id, name, created_at, network) SELECT ?1, ?2, ?3, ?5 "
                               "WHERE (SELECT COUNT(*) FROM tenants) < ?4",
        [STMT_TENANT_GET] = "SELECT id, name, created_at, network FROM tenants WHERE id = ?1",
        [STMT_TENANT_LIST] = "SELECT id, name, created_at, network FROM tenants ORDER BY created_at, id LIMIT ?1",
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

static int64_t now_ms(void) {
        return (int64_t) (now_realtime_ns() / 1000000ULL);
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

/* 0 stands for "none" in the columns that take it */
static void bind_int64_or_null(sqlite3_stmt *st, int idx, int64_t v) {
        if (v)
                sqlite3_bind_int64(st, idx, v);
        else
                sqlite3_bind_null(st, idx);
}

static int bind_text(sqlite3_stmt *st, int idx, const char *s) {
        return s ? sqlite3_bind_text(st, idx, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, idx);
}

/* Copies a text column; NULL columns give NULL without an error. */
static int column_strdup(sqlite3_stmt *st, int col, char **ret) {
        const unsigned char *t = sqlite3_column_text(st, col);
        if (!t) {
                *ret = NULL;
                return 0;
        }
        char *c = strdup((const char *) t);
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

/* Steps a statement that returns no rows. */
static int step_done(struct store_sqlite *q, sqlite3_stmt *st) {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
                return 0;
        return sqlite_to_errno(q->conn.db, rc);
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
                sqlite3_bind_int64(st, 2, now_ms());
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
        struct store_sqlite *q = to_sqlite(s);
        int64_t now = now_ms();
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_INSERT);
        bind_text(st, 1, sb->id);
        bind_text(st, 2, sb->template_name);
        bind_text(st, 3, sb->state);
        bind_text(st, 4, sb->error);
        bind_text(st, 5, sb->metadata ? sb->metadata : "{}");
        bind_text(st, 6, sb->env_keys ? sb->env_keys : "[]");
        sqlite3_bind_int64(st, 7, sb->created_at ? sb->created_at : now);
        sqlite3_bind_int64(st, 8, sb->updated_at ? sb->updated_at : now);
        bind_text(st, 9, sb->desired_state);
        bind_text(st, 10, sb->snapshot_policy);
        if (sb->has_idle_timeout)
                sqlite3_bind_int64(st, 11, sb->idle_timeout_s);
        else
                sqlite3_bind_null(st, 11);
        bind_text(st, 12, sb->tenant_id);
        bind_text(st, 13, sb->network);
        bind_int64_or_null(st, 14, sb->expires_at);
        bind_int64_or_null(st, 15, sb->expiry_s);
        bind_text(st, 16, sb->on_expiry);
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

/* Reads the current row of a sandbox SELECT into ret. */
static int read_sandbox_row(sqlite3_stmt *st, struct store_sandbox *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r;
        if ((r = column_strdup(st, 0, &sb.id)) < 0 || (r = column_strdup(st, 1, &sb.template_name)) < 0 ||
            (r = column_strdup(st, 2, &sb.state)) < 0 || (r = column_strdup(st, 3, &sb.error)) < 0 ||
            (r = column_strdup(st, 4, &sb.metadata)) < 0 || (r = column_strdup(st, 5, &sb.env_keys)) < 0 ||
            (r = column_strdup(st, 8, &sb.desired_state)) < 0 || (r = column_strdup(st, 9, &sb.snapshot_policy)) < 0 ||
            (r = column_strdup(st, 11, &sb.tenant_id)) < 0 || (r = column_strdup(st, 14, &sb.on_expiry)) < 0)
                return r;
        if (!sb.id || !sb.template_name || !sb.state || !sb.metadata || !sb.env_keys)
                return -EBADMSG;
        sb.created_at = sqlite3_column_int64(st, 6);
        sb.updated_at = sqlite3_column_int64(st, 7);
        sb.has_idle_timeout = sqlite3_column_type(st, 10) != SQLITE_NULL;
        sb.idle_timeout_s = sb.has_idle_timeout ? sqlite3_column_int64(st, 10) : 0;
        sb.expires_at = sqlite3_column_int64(st, 12); /* NULL reads as 0: never */
        sb.expiry_s = sqlite3_column_int64(st, 13);
        *ret = sb;
        sb = (struct store_sandbox){ 0 };
        return 0;
}

static int read_sandbox_row_any(sqlite3_stmt *st, void *ret) {
        return read_sandbox_row(st, ret);
}

/* Runs a SELECT of one row by one text parameter: the row through
 * read_row into ret, or -ENOENT. */
static int select_one(struct store_sqlite *q, enum stmt_id id, const char *arg,
                      int (*read_row)(sqlite3_stmt *, void *), void *ret) {
        sqlite3_stmt *st = stmt_begin(q, id);
        bind_text(st, 1, arg);
        int rc = sqlite3_step(st);
        int r;
        if (rc == SQLITE_ROW)
                r = read_row(st, ret);
        else if (rc == SQLITE_DONE)
                r = -ENOENT;
        else
                r = sqlite_to_errno(q->conn.db, rc);
        stmt_end(q, st);
        return r;
}

/* Steps st to its end and reads every row with read_row into a growing
 * array (sqlite_collect()). On failure *a and *n still describe what was
 * read, for the caller's array destructor. */
static int collect_rows(struct store_sqlite *q, sqlite3_stmt *st, size_t elem_size,
                        int (*read_row)(sqlite3_stmt *, void *), void **a, size_t *n) {
        return sqlite_collect(&q->conn, st, elem_size, SIZE_MAX, read_row, a, n);
}

static int sqlite_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret) {
        return select_one(to_sqlite(s), STMT_SANDBOX_GET, id, read_sandbox_row_any, ret);
}

/* Lists sandboxes: every one (tenant_id NULL) or one tenant's. */
static int sandbox_list_common(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                               size_t *ret_n) {
        struct store_sqlite *q = to_sqlite(s);
        struct store_sandbox *a = NULL;
        size_t n = 0;
        int r = 0;
        sqlite3_stmt *st;
        if (tenant_id) {
                st = stmt_begin(q, STMT_SANDBOX_LIST_TENANT);
                bind_text(st, 1, tenant_id);
                sqlite3_bind_int64(st, 2, (sqlite3_int64) max);
        } else {
                st = stmt_begin(q, STMT_SANDBOX_LIST);
                sqlite3_bind_int64(st, 1, (sqlite3_int64) max);
        }
        r = collect_rows(q, st, sizeof *a, read_sandbox_row_any, (void **) &a, &n);
        stmt_end(q, st);
        if (r < 0) {
                store_sandbox_array_free(a, n);
                return r;
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

static int sqlite_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        return sandbox_list_common(s, NULL, max, ret, ret_n);
}

static int sqlite_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                                      size_t *ret_n) {
        return sandbox_list_common(s, tenant_id, max, ret, ret_n);
}

/* Runs a one-row UPDATE/DELETE; -ENOENT when it touched nothing. */
static int step_one_change(struct store_sqlite *q, sqlite3_stmt *st) {
        int r = step_done(q, st);
        if (r >= 0 && sqlite3_changes(q->conn.db) == 0)
                r = -ENOENT;
        return r;
}

static int sqlite_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_UPDATE);
        bind_text(st, 1, id);
        bind_text(st, 2, state);
        bind_text(st, 3, error);
        sqlite3_bind_int64(st, 4, now_ms());
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_sandbox_delete(struct store *s, const char *id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_DELETE);
        bind_text(st, 1, id);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_sandbox_transition(struct store *s, const char *id, const char *from, const char *to,
                                     const char *desired) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_TRANSITION);
        bind_text(st, 1, id);
        bind_text(st, 2, from);
        bind_text(st, 3, to);
        bind_text(st, 4, desired);
        sqlite3_bind_int64(st, 5, now_ms());
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r == -ENOENT ? -ESTALE : r;
}

static int read_network_row(sqlite3_stmt *st, void *ret) {
        return column_strdup(st, 0, ret);
}

static int sqlite_sandbox_network_get(struct store *s, const char *id, char **ret) {
        return select_one(to_sqlite(s), STMT_SANDBOX_NETWORK_GET, id, read_network_row, ret);
}

static int sqlite_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_NETWORK_SET);
        bind_text(st, 1, id);
        bind_text(st, 2, state);
        bind_text(st, 3, network);
        sqlite3_bind_int64(st, 4, now_ms());
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r == -ENOENT ? -ESTALE : r;
}

static int sqlite_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                                     const char *on_expiry) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SANDBOX_EXPIRY_SET);
        bind_text(st, 1, id);
        bind_int64_or_null(st, 2, expires_at);
        bind_int64_or_null(st, 3, expiry_s);
        bind_text(st, 4, on_expiry);
        sqlite3_bind_int64(st, 5, now_ms());
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_operation_insert(struct store *s, const struct store_operation *op) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_OP_INSERT);
        bind_text(st, 1, op->id);
        bind_text(st, 2, op->sandbox_id);
        bind_text(st, 3, op->verb);
        bind_text(st, 4, op->state);
        bind_text(st, 5, op->error);
        bind_text(st, 6, op->result);
        bind_text(st, 7, op->idempotency_key);
        sqlite3_bind_int64(st, 8, op->created_at ? op->created_at : now_ms());
        bind_text(st, 9, op->request_hash);
        bind_text(st, 10, op->stage);
        sqlite3_bind_int(st, 11, op->progress);
        bind_text(st, 12, op->tenant_id);
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

/* Runs an operation SELECT bound to one text parameter. */
static int operation_select(struct store *s, enum stmt_id id, const char *arg, struct store_operation *ret) {
        struct store_sqlite *q = to_sqlite(s);
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        sqlite3_stmt *st = stmt_begin(q, id);
        bind_text(st, 1, arg);
        int rc = sqlite3_step(st);
        int r = 0;
        if (rc == SQLITE_DONE)
                r = -ENOENT;
        else if (rc != SQLITE_ROW)
                r = sqlite_to_errno(q->conn.db, rc);
        else if ((r = column_strdup(st, 0, &op.id)) >= 0 && (r = column_strdup(st, 1, &op.sandbox_id)) >= 0 &&
                 (r = column_strdup(st, 2, &op.verb)) >= 0 && (r = column_strdup(st, 3, &op.state)) >= 0 &&
                 (r = column_strdup(st, 4, &op.error)) >= 0 && (r = column_strdup(st, 5, &op.result)) >= 0 &&
                 (r = column_strdup(st, 6, &op.idempotency_key)) >= 0 &&
                 (r = column_strdup(st, 9, &op.request_hash)) >= 0 && (r = column_strdup(st, 10, &op.stage)) >= 0 &&
                 (r = column_strdup(st, 12, &op.tenant_id)) >= 0) {
                if (!op.id || !op.sandbox_id || !op.verb || !op.state)
                        r = -EBADMSG;
                op.created_at = sqlite3_column_int64(st, 7);
                op.finished_at = sqlite3_column_int64(st, 8); /* NULL reads as 0 */
                op.progress = sqlite3_column_int(st, 11);
        }
        stmt_end(q, st);
        if (r < 0)
                return r;
        *ret = op;
        op = (struct store_operation){ 0 };
        return 0;
}

static int sqlite_operation_get(struct store *s, const char *id, struct store_operation *ret) {
        return operation_select(s, STMT_OP_GET, id, ret);
}

static int sqlite_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret) {
        return operation_select(s, STMT_OP_BY_KEY, key, ret);
}

static int sqlite_operation_update(struct store *s, const char *id, const char *state, const char *error,
                                   const char *result) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_OP_UPDATE);
        bind_text(st, 1, id);
        bind_text(st, 2, state);
        bind_text(st, 3, error);
        bind_text(st, 4, result);
        sqlite3_bind_int64(st, 5, now_ms());
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_operation_progress(struct store *s, const char *id, int progress, const char *stage) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_OP_PROGRESS);
        bind_text(st, 1, id);
        sqlite3_bind_int(st, 2, progress);
        bind_text(st, 3, stage);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_operation_fail_unfinished(struct store *s, const char *error) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_OP_FAIL_UNFINISHED);
        bind_text(st, 1, error);
        sqlite3_bind_int64(st, 2, now_ms());
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_snapshot_insert(struct store *s, const struct store_snapshot *snap) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SNAP_INSERT);
        bind_text(st, 1, snap->id);
        bind_text(st, 2, snap->sandbox_id);
        bind_text(st, 3, snap->kind);
        sqlite3_bind_int64(st, 4, snap->size);
        sqlite3_bind_int64(st, 5, snap->created_at ? snap->created_at : now_ms());
        sqlite3_bind_int(st, 6, snap->pinned ? 1 : 0);
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

/* Reads the current row of a snapshot SELECT into ret. */
static int read_snapshot_row(sqlite3_stmt *st, struct store_snapshot *ret) {
        _cleanup_(store_snapshot_release) struct store_snapshot snap = { 0 };
        int r;
        if ((r = column_strdup(st, 0, &snap.id)) < 0 || (r = column_strdup(st, 1, &snap.sandbox_id)) < 0 ||
            (r = column_strdup(st, 2, &snap.kind)) < 0)
                return r;
        if (!snap.id || !snap.sandbox_id || !snap.kind)
                return -EBADMSG;
        snap.size = sqlite3_column_int64(st, 3);
        snap.created_at = sqlite3_column_int64(st, 4);
        snap.pinned = sqlite3_column_int(st, 5) != 0;
        *ret = snap;
        snap = (struct store_snapshot){ 0 };
        return 0;
}

static int read_snapshot_row_any(sqlite3_stmt *st, void *ret) {
        return read_snapshot_row(st, ret);
}

static int sqlite_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret) {
        return select_one(to_sqlite(s), STMT_SNAP_GET, id, read_snapshot_row_any, ret);
}

static int sqlite_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                                size_t *ret_n) {
        struct store_sqlite *q = to_sqlite(s);
        struct store_snapshot *a = NULL;
        size_t n = 0;
        int r = 0;
        sqlite3_stmt *st = stmt_begin(q, STMT_SNAP_LIST);
        bind_text(st, 1, sandbox_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64) max);
        r = collect_rows(q, st, sizeof *a, read_snapshot_row_any, (void **) &a, &n);
        stmt_end(q, st);
        if (r < 0) {
                store_snapshot_array_free(a, n);
                return r;
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

static int sqlite_snapshot_delete(struct store *s, const char *id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SNAP_DELETE);
        bind_text(st, 1, id);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_session_insert(struct store *s, const struct store_session *ses) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SESSION_INSERT);
        bind_text(st, 1, ses->id);
        bind_text(st, 2, ses->sandbox_id);
        bind_text(st, 3, ses->cmd);
        sqlite3_bind_int(st, 4, ses->pty ? 1 : 0);
        sqlite3_bind_blob(st, 5, ses->token_hash, STORE_HASH_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 6, ses->created_at ? ses->created_at : now_ms());
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_session_get(struct store *s, const char *id, struct store_session *ret) {
        struct store_sqlite *q = to_sqlite(s);
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        sqlite3_stmt *st = stmt_begin(q, STMT_SESSION_GET);
        bind_text(st, 1, id);
        int rc = sqlite3_step(st);
        int r = 0;
        if (rc == SQLITE_DONE)
                r = -ENOENT;
        else if (rc != SQLITE_ROW)
                r = sqlite_to_errno(q->conn.db, rc);
        else if ((r = column_strdup(st, 0, &ses.id)) >= 0 && (r = column_strdup(st, 1, &ses.sandbox_id)) >= 0 &&
                 (r = column_strdup(st, 2, &ses.cmd)) >= 0) {
                ses.pty = sqlite3_column_int(st, 3) != 0;
                const void *h = sqlite3_column_blob(st, 4);
                if (!ses.id || !ses.sandbox_id || !ses.cmd || !h || sqlite3_column_bytes(st, 4) != STORE_HASH_SIZE)
                        r = -EBADMSG;
                else
                        memcpy(ses.token_hash, h, STORE_HASH_SIZE);
                ses.created_at = sqlite3_column_int64(st, 5);
        }
        stmt_end(q, st);
        if (r < 0)
                return r;
        *ret = ses;
        ses = (struct store_session){ 0 };
        return 0;
}

static int sqlite_session_delete(struct store *s, const char *id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_SESSION_DELETE);
        bind_text(st, 1, id);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_UPSERT);
        bind_text(st, 1, name);
        sqlite3_bind_blob(st, 2, hash, STORE_HASH_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now_ms());
        int r = step_done(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        struct store_sqlite *q = to_sqlite(s);
        _cleanup_free_ char *tenant_id = NULL;
        bool found = false;
        int r = 0;
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_ALL);
        for (;;) {
                int rc = sqlite3_step(st);
                if (rc == SQLITE_DONE)
                        break;
                if (rc != SQLITE_ROW) {
                        r = sqlite_to_errno(q->conn.db, rc);
                        break;
                }
                const void *h = sqlite3_column_blob(st, 0);
                /* no early exit: every row is compared */
                bool match = h && sqlite3_column_bytes(st, 0) == STORE_HASH_SIZE &&
                             sodium_memcmp(h, hash, STORE_HASH_SIZE) == 0;
                if (match && !found) {
                        found = true;
                        r = column_strdup(st, 1, &tenant_id);
                        if (r < 0)
                                break;
                }
        }
        stmt_end(q, st);
        if (r < 0)
                return r;
        if (!found)
                return -EACCES;
        *ret_tenant_id = TAKE_PTR(tenant_id);
        return 0;
}

static int sqlite_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                                 const uint8_t hash[STORE_HASH_SIZE], size_t max) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_CREATE);
        bind_text(st, 1, id);
        sqlite3_bind_blob(st, 2, hash, STORE_HASH_SIZE, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now_ms());
        bind_text(st, 4, tenant_id);
        bind_text(st, 5, name);
        sqlite3_bind_int64(st, 6, (sqlite3_int64) MIN(max, (size_t) INT64_MAX));
        int r = step_done(q, st); /* -ENOENT: the tenant's foreign key */
        if (r >= 0 && sqlite3_changes(q->conn.db) == 0)
                r = -EDQUOT;
        stmt_end(q, st);
        return r;
}

static int read_api_key_row(sqlite3_stmt *st, void *ret) {
        _cleanup_(store_api_key_release) struct store_api_key k = { 0 };
        int r;
        if ((r = column_strdup(st, 0, &k.id)) < 0 || (r = column_strdup(st, 1, &k.tenant_id)) < 0 ||
            (r = column_strdup(st, 2, &k.name)) < 0)
                return r;
        if (!k.id)
                return -EBADMSG;
        k.created_at = sqlite3_column_int64(st, 3);
        *(struct store_api_key *) ret = k;
        k = (struct store_api_key){ 0 };
        return 0;
}

static int sqlite_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret,
                               size_t *ret_n) {
        struct store_sqlite *q = to_sqlite(s);
        struct store_api_key *a = NULL;
        size_t n = 0;
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_LIST);
        bind_text(st, 1, tenant_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64) max);
        int r = collect_rows(q, st, sizeof *a, read_api_key_row, (void **) &a, &n);
        stmt_end(q, st);
        if (r < 0) {
                store_api_key_array_free(a, n);
                return r;
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

static int sqlite_api_key_delete(struct store *s, const char *id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_KEY_DELETE);
        bind_text(st, 1, id);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

static int sqlite_tenant_insert(struct store *s, const struct store_tenant *t, size_t max) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_TENANT_INSERT);
        bind_text(st, 1, t->id);
        bind_text(st, 2, t->name);
        sqlite3_bind_int64(st, 3, t->created_at ? t->created_at : now_ms());
        sqlite3_bind_int64(st, 4, (sqlite3_int64) MIN(max, (size_t) INT64_MAX));
        bind_text(st, 5, t->network);
        int r = step_done(q, st);
        if (r >= 0 && sqlite3_changes(q->conn.db) == 0)
                r = -EDQUOT;
        stmt_end(q, st);
        return r;
}

static int read_tenant_row(sqlite3_stmt *st, void *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int r;
        if ((r = column_strdup(st, 0, &t.id)) < 0 || (r = column_strdup(st, 1, &t.name)) < 0 ||
            (r = column_strdup(st, 3, &t.network)) < 0)
                return r;
        if (!t.id || !t.name)
                return -EBADMSG;
        t.created_at = sqlite3_column_int64(st, 2);
        *(struct store_tenant *) ret = t;
        t = (struct store_tenant){ 0 };
        return 0;
}

static int sqlite_tenant_get(struct store *s, const char *id, struct store_tenant *ret) {
        return select_one(to_sqlite(s), STMT_TENANT_GET, id, read_tenant_row, ret);
}

static int sqlite_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n) {
        struct store_sqlite *q = to_sqlite(s);
        struct store_tenant *a = NULL;
        size_t n = 0;
        sqlite3_stmt *st = stmt_begin(q, STMT_TENANT_LIST);
        sqlite3_bind_int64(st, 1, (sqlite3_int64) max);
        int r = collect_rows(q, st, sizeof *a, read_tenant_row, (void **) &a, &n);
        stmt_end(q, st);
        if (r < 0) {
                store_tenant_array_free(a, n);
                return r;
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

static int sqlite_tenant_delete(struct store *s, const char *id) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_TENANT_DELETE);
        bind_text(st, 1, id);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        if (r != -ENOENT)
                return r;
        /* nothing deleted: unknown, or it still owns sandboxes */
        struct store_tenant t = { 0 };
        r = sqlite_tenant_get(s, id, &t);
        store_tenant_release(&t);
        return r < 0 ? r : -EBUSY;
}

static int sqlite_tenant_network_set(struct store *s, const char *id, const char *network) {
        struct store_sqlite *q = to_sqlite(s);
        sqlite3_stmt *st = stmt_begin(q, STMT_TENANT_NETWORK_SET);
        bind_text(st, 1, id);
        bind_text(st, 2, network);
        int r = step_one_change(q, st);
        stmt_end(q, st);
        return r;
}

const struct store_ops store_sqlite_ops = {
        .scheme = "sqlite",
        .open = sqlite_open,
        .close = sqlite_close,
        .schema_version = sqlite_schema_version,
        .sandbox_insert = sqlite_sandbox_insert,
        .sandbox_get = sqlite_sandbox_get,
        .sandbox_list = sqlite_sandbox_list,
        .sandbox_list_tenant = sqlite_sandbox_list_tenant,
        .sandbox_update_state = sqlite_sandbox_update_state,
        .sandbox_delete = sqlite_sandbox_delete,
        .sandbox_transition = sqlite_sandbox_transition,
        .sandbox_network_get = sqlite_sandbox_network_get,
        .sandbox_network_set = sqlite_sandbox_network_set,
        .sandbox_expiry_set = sqlite_sandbox_expiry_set,
        .operation_insert = sqlite_operation_insert,
        .operation_get = sqlite_operation_get,
        .operation_find_by_key = sqlite_operation_find_by_key,
        .operation_update = sqlite_operation_update,
        .operation_progress = sqlite_operation_progress,
        .operation_fail_unfinished = sqlite_operation_fail_unfinished,
        .snapshot_insert = sqlite_snapshot_insert,
        .snapshot_get = sqlite_snapshot_get,
        .snapshot_list = sqlite_snapshot_list,
        .snapshot_delete = sqlite_snapshot_delete,
        .session_insert = sqlite_session_insert,
        .session_get = sqlite_session_get,
        .session_delete = sqlite_session_delete,
        .api_key_insert = sqlite_api_key_insert,
        .api_key_lookup = sqlite_api_key_lookup,
        .api_key_create = sqlite_api_key_create,
        .api_key_list = sqlite_api_key_list,
        .api_key_delete = sqlite_api_key_delete,
        .tenant_insert = sqlite_tenant_insert,
        .tenant_get = sqlite_tenant_get,
        .tenant_list = sqlite_tenant_list,
        .tenant_delete = sqlite_tenant_delete,
        .tenant_network_set = sqlite_tenant_network_set,
        STORE_SQLITE_SECRETS_OPS,
        STORE_SQLITE_IMAGES_OPS,
};
