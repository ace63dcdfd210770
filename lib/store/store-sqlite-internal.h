/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the SQLite backend's files share (store-sqlite.c: the connection,
 * migrations, the core tables and a template's put;
 * store-sqlite-cluster.c: what of the cluster's tables takes more than one
 * statement (a heartbeat, marking nodes lost, join tokens, the CA);
 * store-sqlite-helpers.c: the statement runner, store_sqlite_sql, that
 * store-sql.c runs the ops both backends share through, and a statement's
 * rows as the store_row cursor the shared row readers take,
 * store-backend.h). Private to lib/store.
 */

#include <pthread.h>
#include <sqlite3.h>

#include "store-backend.h"
#include "store.h"

#define SQLITE_CACHE_MAX 128 /* statements kept prepared */

/* The connection; the first member of the backend's handle. Every use of
 * db, its statements included, holds lock. */
struct store_sqlite_conn {
        struct store_backend base; /* must be first */
        sqlite3 *db;
        pthread_mutex_t lock;
        /* statements prepared on their first use and kept, found by the
         * address of their text (and checked against it) */
        struct sqlite_cached {
                const char *sql;
                sqlite3_stmt *st;
        } cache[SQLITE_CACHE_MAX];
        size_t n_cache;
};

/* Maps an SQLite result code to a negative errno. */
int sqlite_to_errno(sqlite3 *db, int rc);


/* Takes the lock and prepares sql (or finds it prepared, reset); on
 * failure the lock is released. */
int sqlite_prep(struct store_sqlite_conn *c, const char *sql, sqlite3_stmt **ret);
/* Resets st (or finalizes it, when the cache was full) and releases the
 * lock sqlite_prep() took. */
void sqlite_done(struct store_sqlite_conn *c, sqlite3_stmt *st);
/* Finalizes the kept statements. */
void sqlite_cache_clear(struct store_sqlite_conn *c);
/* Binds q's parameters to st, the first to ?1. */
void sqlite_bind(sqlite3_stmt *st, const struct store_params *q);
/* Steps a statement without rows; -ENOENT when it changed nothing and
 * need_change. */
int sqlite_step_write(struct store_sqlite_conn *c, sqlite3_stmt *st, bool need_change);

/* A statement's rows as a store_row cursor (store-backend.h): next() steps
 * st, mapping errors through db. */
struct sqlite_rows {
        struct store_row row; /* must be first */
        sqlite3 *db;
        sqlite3_stmt *st;
};
struct sqlite_rows sqlite_rows(sqlite3 *db, sqlite3_stmt *st);
/* Reads at most max rows of st through list into a new array *ret of
 * *ret_n elements; on failure frees what it read (store_rows_list()). */
int sqlite_list(struct store_sqlite_conn *c, sqlite3_stmt *st, const struct store_list *list, size_t max, void *ret,
                size_t *ret_n);
/* Reads the one row of st through read_row into ret; -ENOENT when none. */
int sqlite_one(struct store_sqlite_conn *c, sqlite3_stmt *st, int (*read_row)(const struct store_row *, void *),
               void *ret);

/* One statement as a call of its own (the lock taken, sql prepared with
 * q bound, finalized): a SELECT's rows (sqlite_select_one: the first
 * through read_row, or -ENOENT; sqlite_select_all: at most max through
 * list, store_rows_list()), or a write's count of touched rows
 * (sqlite_write; sqlite_write_one: -ENOENT when it touched none). */
int sqlite_select_one(struct store *s, const char *sql, const struct store_params *q,
                      int (*read_row)(const struct store_row *, void *), void *ret);
int sqlite_select_all(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                      size_t max, void *ret, size_t *ret_n);
int sqlite_write(struct store *s, const char *sql, const struct store_params *q, uint64_t *ret_changed);
/* A SELECT of (hash, tenant_id) rows as a call of its own, every hash
 * compared with hash (store_rows_match_key()). */
int sqlite_select_key_match(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                            char **ret_tenant_id);
int sqlite_write_one(struct store *s, const char *sql, const struct store_params *q);

/* the ops defined in the files beside store-sqlite.c */
STORE_FILE_OPS(STORE_OP_DECLARE, sqlite)

