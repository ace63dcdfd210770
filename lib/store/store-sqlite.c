/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend of the store: one connection in WAL mode, foreign keys on,
 * a busy timeout, each statement prepared on its first use and kept
 * (store-sqlite-helpers.c). A mutex serialises use of the connection and
 * its prepared statements (a statement is stepped and read across several
 * calls, which SQLite's own mutex does not cover). Opening and the
 * migrations are here; the ops are store-sql.c's, but for the cluster's
 * few that take a transaction (store-sqlite-cluster.c).
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

#define VERSION_SQL "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"

struct store_sqlite {
        struct store_sqlite_conn conn; /* must be first */
};

static struct store_sqlite *to_sqlite(struct store *s) {
        return (struct store_sqlite *) s;
}

static int exec_sql(sqlite3 *db, const char *sql) {
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        return rc == SQLITE_OK ? 0 : sqlite_to_errno(db, rc);
}

static int query_version(sqlite3 *db, unsigned *ret) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, VERSION_SQL, -1, &st, NULL);
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
        sqlite_cache_clear(&q->conn);
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
        q->conn.base = (struct store_backend){ .store.ops = &store_sqlite_ops, .sql = &store_sqlite_sql };
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
        *ret = &q->conn.base.store;
        return 0;
fail:
        sqlite_close(&q->conn.base.store);
        return r;
}

static int sqlite_schema_version(struct store *s, unsigned *ret) {
        int64_t v = 0;
        int r = sqlite_select_one(s, VERSION_SQL, NULL, store_read_int64, &v);
        if (r < 0)
                return r;
        *ret = (unsigned) v;
        return 0;
}

const struct store_ops store_sqlite_ops = {
        .scheme = "sqlite",
        .open = sqlite_open,
        .close = sqlite_close,
        STORE_BACKEND_OPS(sqlite)
};
