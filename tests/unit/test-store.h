/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the store's unit tests share (test-store.c, test-store-templates.c):
 * the backends under test, each test's fresh database (setup(), teardown()),
 * and the raw_*() helpers that prepare a database behind the store's back.
 * Include after <cmocka.h>.
 */

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "macros.h"
#include "migrations/pg.h"
#include "migrations/sqlite.h"
#include "store.h"
#include "unit-skip.h"
#include "util.h"

/* One backend under test: the prestate of each test (main()). */
struct backend {
        const char *name;
        bool pg;
        const char *const *migrations;
        size_t n_migrations;
        char dir[256];   /* SQLite: the test's directory */
        char url[1024];  /* what store_open() is given */
        const char *why; /* set when it cannot run here */
};

static struct backend sqlite_backend = {
        .name = "sqlite",
        .migrations = store_sqlite_migrations,
        .n_migrations = ARRAY_SIZE(store_sqlite_migrations),
};
static struct backend pg_backend = {
        .name = "postgresql",
        .pg = true,
        .migrations = store_pg_migrations,
        .n_migrations = ARRAY_SIZE(store_pg_migrations),
};

static inline void notice_ignore(void *arg, const char *message) {
}

/* A connection of our own to the PostgreSQL test database, or NULL. */
static inline PGconn *raw_pg(const struct backend *b) {
        PGconn *c = PQconnectdb(b->url);
        if (PQstatus(c) != CONNECTION_OK) {
                fprintf(stderr, "cannot connect to AIRLOCK_TEST_PG_URL: %s", PQerrorMessage(c));
                PQfinish(c);
                return NULL;
        }
        PQsetNoticeProcessor(c, notice_ignore, NULL);
        return c;
}

/* Runs SQL (several statements) on the backend's database behind the
 * store's back: 0, or -1 with what failed on stderr. */
static inline int raw_exec(const struct backend *b, const char *sql) {
        if (b->pg) {
                PGconn *c = raw_pg(b);
                if (!c)
                        return -1;
                PGresult *res = PQexec(c, sql);
                int st = PQresultStatus(res);
                int r = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
                if (r < 0)
                        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
                PQclear(res);
                PQfinish(c);
                return r;
        }
        char path[300];
        snprintf(path, sizeof path, "%s/airlock.db", b->dir);
        sqlite3 *db = NULL;
        int rc = sqlite3_open(path, &db);
        if (rc == SQLITE_OK)
                rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
                fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
        sqlite3_close(db);
        return rc == SQLITE_OK ? 0 : -1;
}

/* The one integer a query gives, or -1. */
static inline long raw_count(const struct backend *b, const char *sql) {
        long n = -1;
        if (b->pg) {
                PGconn *c = raw_pg(b);
                if (!c)
                        return -1;
                PGresult *res = PQexec(c, sql);
                if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
                        n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
                PQclear(res);
                PQfinish(c);
                return n;
        }
        char path[300];
        snprintf(path, sizeof path, "%s/airlock.db", b->dir);
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
                n = (long) sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return n;
}

/* Makes the database an airlockd of migration version v left it. */
static inline void raw_migrate_to(const struct backend *b, unsigned v) {
        assert_int_equal(raw_exec(b, "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY NOT NULL, "
                                     "applied_at BIGINT NOT NULL)"),
                         0);
        for (unsigned i = 0; i < v; i++) {
                assert_int_equal(raw_exec(b, b->migrations[i]), 0);
                char sql[128];
                snprintf(sql, sizeof sql, "INSERT INTO schema_migrations VALUES (%u, 0)", i + 1);
                assert_int_equal(raw_exec(b, sql), 0);
        }
}

/* A fresh, empty database for each test: a new SQLite file, or the
 * PostgreSQL test database with its schema dropped and made again. */
static inline int setup(void **state) {
        struct backend *b = *state;
        b->why = NULL;
        if (b->pg) {
                const char *u = getenv("AIRLOCK_TEST_PG_URL");
                if (!u || !*u) {
                        b->why = "AIRLOCK_TEST_PG_URL is not set (meson test runs this binary under "
                                 "tests/unit/with-postgres.sh, which starts a server and sets it)";
                        return 0;
                }
                snprintf(b->url, sizeof b->url, "%s", u);
                return raw_exec(b, "DROP SCHEMA public CASCADE; CREATE SCHEMA public;");
        }
        snprintf(b->dir, sizeof b->dir, "/tmp/test-store-XXXXXX");
        if (!mkdtemp(b->dir))
                return -1;
        snprintf(b->url, sizeof b->url, "sqlite:%s/airlock.db", b->dir);
        return 0;
}

static inline int teardown(void **state) {
        struct backend *b = *state;
        if (!b->pg)
                rm_rf(b->dir);
        return 0;
}

/* The test's backend; skips the test when that cannot run here. */
#define BACKEND                                             \
        ({                                                  \
                struct backend *b_ = *state;                \
                if (b_->why)                                \
                        unit_skip("%s: %s", b_->name, b_->why); \
                b_;                                         \
        })
/* The URL of the test's database. */
#define URL (BACKEND->url)

/* Opens a second handle on the test database (as another replica would). */
static inline struct store *open_pg(const struct backend *b) {
        struct store *s = NULL;
        assert_int_equal(store_open(b->url, &s), 0);
        return s;
}
