/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: the statement helpers of the tables whose calls prepare
 * their own statement (store-sqlite-secrets.c, store-sqlite-images.c).
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

int sqlite_col_dup(sqlite3_stmt *st, int col, char **ret) {
        const unsigned char *t = sqlite3_column_text(st, col);
        *ret = NULL;
        if (!t)
                return 0;
        *ret = strdup((const char *) t);
        return *ret ? 0 : -ENOMEM;
}

int sqlite_step_write(struct store_sqlite_conn *c, sqlite3_stmt *st, bool need_change) {
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
                return sqlite_to_errno(c->db, rc) ?: -EIO;
        return need_change && sqlite3_changes(c->db) == 0 ? -ENOENT : 0;
}

int sqlite_collect(struct store_sqlite_conn *c, sqlite3_stmt *st, size_t elem, size_t max,
                   int (*read_row)(sqlite3_stmt *, void *), void **a, size_t *n) {
        size_t cap = 0;
        for (;;) {
                int rc = sqlite3_step(st);
                if (rc == SQLITE_DONE)
                        return 0;
                if (rc != SQLITE_ROW)
                        return sqlite_to_errno(c->db, rc) ?: -EIO;
                if (*n >= max)
                        return 0;
                if (*n == cap) {
                        size_t ncap = cap ? cap * 2 : 8;
                        void *na = realloc(*a, ncap * elem);
                        if (!na)
                                return -ENOMEM;
                        memset((char *) na + cap * elem, 0, (ncap - cap) * elem);
                        *a = na;
                        cap = ncap;
                }
                int r = read_row(st, (char *) *a + *n * elem);
                if (r < 0)
                        return r;
                (*n)++;
        }
}
