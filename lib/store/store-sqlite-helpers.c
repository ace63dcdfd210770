/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: the statement helpers of the calls that prepare their
 * own statement (store-sqlite-cluster.c, and store-sql.c through
 * store_sqlite_sql), and a statement's rows as a store_row cursor.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "store-sqlite-internal.h"

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

int sqlite_prep(struct store_sqlite_conn *c, const char *sql, sqlite3_stmt **ret) {
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < c->n_cache; i++)
                if (c->cache[i].sql == sql && strcmp(sqlite3_sql(c->cache[i].st), sql) == 0) {
                        *ret = c->cache[i].st;
                        return 0;
                }
        bool keep = c->n_cache < ARRAY_SIZE(c->cache);
        int rc = sqlite3_prepare_v3(c->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, ret, NULL);
        if (rc != SQLITE_OK) {
                int r = sqlite_to_errno(c->db, rc);
                pthread_mutex_unlock(&c->lock);
                return r < 0 ? r : -EIO;
        }
        if (keep)
                c->cache[c->n_cache++] = (struct sqlite_cached){ sql, *ret };
        return 0;
}

void sqlite_done(struct store_sqlite_conn *c, sqlite3_stmt *st) {
        bool kept = false;
        for (size_t i = 0; i < c->n_cache && !kept; i++)
                kept = c->cache[i].st == st;
        if (kept) {
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
        } else
                sqlite3_finalize(st);
        pthread_mutex_unlock(&c->lock);
}

void sqlite_cache_clear(struct store_sqlite_conn *c) {
        for (size_t i = 0; i < c->n_cache; i++)
                sqlite3_finalize(c->cache[i].st);
        c->n_cache = 0;
}

void sqlite_bind(sqlite3_stmt *st, const struct store_params *q) {
        for (int i = 0; q && i < q->n; i++) {
                const struct store_param *p = &q->v[i];
                if (p->null)
                        sqlite3_bind_null(st, i + 1);
                else if (p->kind == STORE_PARAM_TEXT)
                        sqlite3_bind_text(st, i + 1, p->v, -1, SQLITE_STATIC);
                else if (p->kind == STORE_PARAM_BLOB)
                        sqlite3_bind_blob(st, i + 1, p->v, (int) p->len, SQLITE_STATIC);
                else
                        sqlite3_bind_int64(st, i + 1, p->i);
        }
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

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

/* Takes the lock and prepares sql with q bound (sqlite_done() it). */
static int prep_bound(struct store_sqlite_conn *c, const char *sql, const struct store_params *q, sqlite3_stmt **ret) {
        int r = sqlite_prep(c, sql, ret);
        if (r >= 0)
                sqlite_bind(*ret, q);
        return r;
}

int sqlite_select_one(struct store *s, const char *sql, const struct store_params *q,
                      int (*read_row)(const struct store_row *, void *), void *ret) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = prep_bound(c, sql, q, &st);
        if (r < 0)
                return r;
        r = sqlite_one(c, st, read_row, ret);
        sqlite_done(c, st);
        return r;
}

int sqlite_select_all(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                      size_t max, void *ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = prep_bound(c, sql, q, &st);
        if (r < 0)
                return r;
        r = sqlite_list(c, st, list, max, ret, ret_n);
        sqlite_done(c, st);
        return r;
}

int sqlite_select_key_match(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                            char **ret_tenant_id) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, sql, &st);
        if (r < 0)
                return r;
        struct sqlite_rows rows = sqlite_rows(c->db, st);
        r = store_rows_match_key(&rows.row, hash, ret_tenant_id);
        sqlite_done(c, st);
        return r;
}

int sqlite_write(struct store *s, const char *sql, const struct store_params *q, uint64_t *ret_changed) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = prep_bound(c, sql, q, &st);
        if (r < 0)
                return r;
        r = sqlite_step_write(c, st, false);
        if (r >= 0 && ret_changed)
                *ret_changed = (uint64_t) sqlite3_changes(c->db);
        sqlite_done(c, st);
        return r;
}

int sqlite_write_one(struct store *s, const char *sql, const struct store_params *q) {
        uint64_t n = 0;
        int r = sqlite_write(s, sql, q, &n);
        return r < 0 ? r : n == 0 ? -ENOENT : 0;
}

/* One statement, so the count and the write see one state. */
static int sqlite_write_limited(struct store *s, const char *sql, const struct store_params *q, enum store_limit limit,
                                const char *scope, uint64_t *ret_changed) {
        return sqlite_write(s, sql, q, ret_changed);
}

const struct store_sql store_sqlite_sql = {
        .pg = false,
        .select_one = sqlite_select_one,
        .select_all = sqlite_select_all,
        .write = sqlite_write,
        .write_one = sqlite_write_one,
        .write_limited = sqlite_write_limited,
        .select_key_match = sqlite_select_key_match,
};
