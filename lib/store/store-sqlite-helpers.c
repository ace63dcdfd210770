/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: the statement helpers of the tables whose calls prepare
 * their own statement (store-sqlite-secrets.c, store-sqlite-images.c,
 * store-sqlite-templates.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "store-sqlite-internal.h"

int sqlite_prep(struct store_sqlite_conn *c, const char *sql, sqlite3_stmt **ret) {
        pthread_mutex_lock(&c->lock);
        int rc = sqlite3_prepare_v2(c->db, sql, -1, ret, NULL);
        if (rc != SQLITE_OK) {
                int r = sqlite_to_errno(c->db, rc);
                pthread_mutex_unlock(&c->lock);
                return r < 0 ? r : -EIO;
        }
        return 0;
}

void sqlite_done(struct store_sqlite_conn *c, sqlite3_stmt *st) {
        sqlite3_finalize(st);
        pthread_mutex_unlock(&c->lock);
}

void sqlite_bind_str(sqlite3_stmt *st, int idx, const char *v) {
        if (v)
                sqlite3_bind_text(st, idx, v, -1, SQLITE_STATIC);
        else
                sqlite3_bind_null(st, idx);
}

int sqlite_step_write(struct store_sqlite_conn *c, sqlite3_stmt *st, bool need_change) {
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
                return sqlite_to_errno(c->db, rc) ?: -EIO;
        return need_change && sqlite3_changes(c->db) == 0 ? -ENOENT : 0;
}

static struct sqlite_rows *rows_of(const struct store_row *r) {
        return (struct sqlite_rows *) r;
}

static int rows_ncols(const struct store_row *r) {
        return sqlite3_column_count(rows_of(r)->st);
}

static bool rows_is_null(const struct store_row *r, int col) {
        return sqlite3_column_type(rows_of(r)->st, col) == SQLITE_NULL;
}

static const char *rows_text(const struct store_row *r, int col) {
        return (const char *) sqlite3_column_text(rows_of(r)->st, col);
}

static int64_t rows_int64(const struct store_row *r, int col) {
        return sqlite3_column_int64(rows_of(r)->st, col);
}

static const void *rows_blob(const struct store_row *r, int col, size_t *ret_len) {
        sqlite3_stmt *st = rows_of(r)->st;
        const void *b = sqlite3_column_blob(st, col);
        *ret_len = b ? (size_t) sqlite3_column_bytes(st, col) : 0;
        return b;
}

static int rows_next(struct store_row *r) {
        struct sqlite_rows *q = rows_of(r);
        int rc = sqlite3_step(q->st);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return sqlite_to_errno(q->db, rc) ?: -EIO;
}

static const struct store_row_ops sqlite_row_ops = {
        .ncols = rows_ncols,
        .is_null = rows_is_null,
        .text = rows_text,
        .int64 = rows_int64,
        .blob = rows_blob,
};

struct sqlite_rows sqlite_rows(sqlite3 *db, sqlite3_stmt *st) {
        return (struct sqlite_rows){ .row = { .ops = &sqlite_row_ops, .next = rows_next }, .db = db, .st = st };
}

int sqlite_list(struct store_sqlite_conn *c, sqlite3_stmt *st, const struct store_list *list, size_t max, void *ret,
                size_t *ret_n) {
        struct sqlite_rows rows = sqlite_rows(c->db, st);
        return store_rows_list(&rows.row, list, max, ret, ret_n);
}

int sqlite_one(struct store_sqlite_conn *c, sqlite3_stmt *st, int (*read_row)(const struct store_row *, void *),
               void *ret) {
        struct sqlite_rows rows = sqlite_rows(c->db, st);
        return store_rows_one(&rows.row, read_row, ret);
}
