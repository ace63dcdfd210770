/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend: the connection pool, running a call on a connection
 * (with its retries), statements and transactions, the one place where
 * SQLSTATEs become errnos, and a result's rows as a store_row cursor.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macros.h"
#include "store-pg-internal.h"

/* PostgreSQL's type oids (catalog/pg_type_d.h, which libpq-dev lacks); stable */
#define BOOLOID 16
#define BYTEAOID 17
#define INT8OID 20
#define INT2OID 21
#define INT4OID 23
#define TEXTOID 25

/* how many times a call runs when it keeps meeting serialization failures
 * or deadlocks, before it gives up with -EBUSY */
#define PG_CONFLICT_TRIES 5

/* store_params as PQexecParams() takes them: integers as their decimal
 * text, booleans as "t" or "f", blobs as binary bytea. */
struct pg_params {
        Oid types[STORE_PARAMS_MAX];
        const char *values[STORE_PARAMS_MAX];
        int lengths[STORE_PARAMS_MAX];
        int formats[STORE_PARAMS_MAX];
        char num[STORE_PARAMS_MAX][24]; /* the text of integer parameters */
};

static void pg_params(const struct store_params *q, struct pg_params *ret) {
        for (int i = 0; q && i < q->n; i++) {
                const struct store_param *p = &q->v[i];
                const char *v = NULL;
                int len = 0, format = 0;
                Oid type = TEXTOID;
                switch (p->kind) {
                case STORE_PARAM_TEXT:
                        v = p->v;
                        break;
                case STORE_PARAM_INT:
                        type = INT8OID;
                        snprintf(ret->num[i], sizeof ret->num[i], "%" PRId64, p->i);
                        v = ret->num[i];
                        break;
                case STORE_PARAM_BOOL:
                        type = BOOLOID;
                        v = p->i ? "t" : "f";
                        break;
                case STORE_PARAM_BLOB:
                        type = BYTEAOID;
                        v = p->v;
                        len = (int) p->len;
                        format = 1; /* binary: the bytes as they are */
                        break;
                }
                ret->types[i] = type;
                ret->values[i] = p->null ? NULL : v;
                ret->lengths[i] = len;
                ret->formats[i] = format;
        }
}

/* FNV-1a of a scope (NULL and "": the admin's): the same in every
 * process; two scopes sharing a key only wait for each other */
static uint32_t scope_hash(const char *tenant_id) {
        uint32_t h = 2166136261u;
        for (const char *p = tenant_id ?: ""; *p; p++)
                h = (h ^ (uint8_t) *p) * 16777619u;
        return h;
}

int64_t pg_lock_key_scope(const char *tenant_id) {
        return PG_LOCK_CLASS | 0x80000000 | (scope_hash(tenant_id) & 0x7fffffff);
}

int64_t pg_lock_template_scope(const char *tenant_id) {
        /* bit 31 clear, bit 30 set: neither a key scope's nor a fixed key */
        return PG_LOCK_CLASS | 0x40000000 | (scope_hash(tenant_id) & 0x3fffffff);
}

int64_t pg_lock_webhook_scope(const char *tenant_id) {
        /* bits 31 and 30 clear, bit 29 set: neither of the above nor a fixed key */
        return PG_LOCK_CLASS | 0x20000000 | (scope_hash(tenant_id) & 0x1fffffff);
}

/* Maps a failed statement's result to a negative errno: the only place
 * where SQLSTATEs are looked at. Marks the call broken (its connection is
 * gone or failed) or in conflict (it may run again). */
static int pg_error(struct pg_call *c, const PGresult *res) {
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        if (PQstatus(c->conn) != CONNECTION_OK || (state && strncmp(state, "08", 2) == 0) ||
            (state && strncmp(state, "57P0", 4) == 0)) { /* the server is shutting the session down */
                c->broken = true;
                return -EIO;
        }
        if (!state)
                return -EIO;
        if (strcmp(state, "23505") == 0) /* unique_violation */
                return -EEXIST;
        if (strcmp(state, "23503") == 0) /* foreign_key_violation */
                return -ENOENT;
        if (strncmp(state, "23", 2) == 0) /* NOT NULL, CHECK: as SQLite's other constraints */
                return -EINVAL;
        if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0) { /* serialization, deadlock */
                c->conflict = true;
                return -EBUSY;
        }
        if (strcmp(state, "57014") == 0) /* query_canceled: the statement timeout */
                return -ETIMEDOUT;
        if (strcmp(state, "55P03") == 0) /* lock_not_available */
                return -EBUSY;
        if (strncmp(state, "22", 2) == 0) /* data exception: a value it cannot take */
                return -EINVAL;
        if (strcmp(state, "53100") == 0) /* disk_full */
                return -ENOSPC;
        if (strcmp(state, "53200") == 0) /* out_of_memory */
                return -ENOMEM;
        if (strcmp(state, "42501") == 0) /* insufficient_privilege */
                return -EACCES;
        if (strcmp(state, "25006") == 0) /* read_only_sql_transaction */
                return -EROFS;
        return -EIO;
}

static void notice_ignore(void *arg, const char *message) {
        /* the store never logs; libpq's default prints notices to stderr */
}

/* Whether an idle connection is still there: a healthy idle one has
 * nothing to read, so bytes waiting are the server's goodbye (a FATAL
 * message, then the end of the stream), or now and then a notice. */
static bool conn_alive(PGconn *conn) {
        for (unsigned i = 0; i < 4 && PQstatus(conn) == CONNECTION_OK; i++) {
                struct pollfd p = { .fd = PQsocket(conn), .events = POLLIN };
                if (poll(&p, 1, 0) <= 0)
                        return true;
                if (!PQconsumeInput(conn))
                        return false;
                (void) PQisBusy(conn); /* parses what came */
                PGnotify *n;
                while ((n = PQnotifies(conn)))
                        PQfreemem(n);
        }
        return PQstatus(conn) == CONNECTION_OK;
}

static void pool_drop(struct store_pg *pg, PGconn *conn) {
        PQfinish(conn);
        pthread_mutex_lock(&pg->lock);
        pg->n_open--;
        pthread_cond_signal(&pg->returned);
        pthread_mutex_unlock(&pg->lock);
}

/* Lends a connection: an idle one (reset when the server dropped it while
 * it waited), a new one while fewer than PG_POOL_MAX are open, or else the
 * next one given back. */
static int pool_get(struct store_pg *pg, PGconn **ret) {
        PGconn *conn = NULL;
        pthread_mutex_lock(&pg->lock);
        while (pg->n_idle == 0 && pg->n_open >= PG_POOL_MAX)
                pthread_cond_wait(&pg->returned, &pg->lock);
        if (pg->n_idle > 0)
                conn = pg->idle[--pg->n_idle];
        else
                pg->n_open++;
        pthread_mutex_unlock(&pg->lock);

        if (!conn) {
                conn = PQconnectdbParams(pg->keywords, pg->values, 0);
                if (conn)
                        PQsetNoticeProcessor(conn, notice_ignore, NULL);
        } else if (!conn_alive(conn))
                PQreset(conn);
        if (!conn || PQstatus(conn) != CONNECTION_OK) {
                /* libpq's message may name the host and user: not passed on */
                pool_drop(pg, conn);
                return conn ? -EIO : -ENOMEM;
        }
        *ret = conn;
        return 0;
}

/* Takes a connection back; one that failed or is inside a transaction
 * still is closed instead. */
static void pool_put(struct store_pg *pg, PGconn *conn) {
        if (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE) {
                pool_drop(pg, conn);
                return;
        }
        pthread_mutex_lock(&pg->lock);
        pg->idle[pg->n_idle++] = conn;
        pthread_cond_signal(&pg->returned);
        pthread_mutex_unlock(&pg->lock);
}

void pg_pool_close(struct store_pg *pg) {
        for (size_t i = 0; i < pg->n_idle; i++)
                PQfinish(pg->idle[i]);
        pg->n_idle = pg->n_open = 0;
}

static void pg_rollback(struct pg_call *c) {
        c->in_tx = false;
        PGresult *res = PQexec(c->conn, "ROLLBACK");
        PQclear(res);
}

int pg_run(struct store_pg *pg, int (*fn)(struct pg_call *c, void *ctx), void *ctx) {
        bool reset = false;
        for (unsigned tries = 1;; tries++) {
                struct pg_call c = { 0 };
                int r = pool_get(pg, &c.conn);
                if (r < 0)
                        return r;
                r = fn(&c, ctx);
                if (c.in_tx)
                        pg_rollback(&c);
                if (c.broken)
                        PQreset(c.conn); /* pool_put() closes it if that failed */
                pool_put(pg, c.conn);
                if (r >= 0)
                        return r;
                if (c.conflict && tries < PG_CONFLICT_TRIES) {
                        /* it rolled back: wait a little, longer each time, jittered */
                        usleep(500 * (1u << tries) + randombytes_uniform(1000 * (1u << tries)));
                        continue;
                }
                if (c.broken && !c.wrote && !reset) {
                        reset = true;
                        continue;
                }
                return r;
        }
}

int pg_exec(struct pg_call *c, bool write, const char *sql, const struct store_params *q, PGresult **ret_res,
            uint64_t *ret_changed) {
        if (write && !c->in_tx)
                c->wrote = true;
        struct pg_params p;
        pg_params(q, &p);
        PGresult *res = PQexecParams(c->conn, sql, q ? q->n : 0, q ? p.types : NULL, q ? p.values : NULL,
                                     q ? p.lengths : NULL, q ? p.formats : NULL, 1 /* binary rows */);
        ExecStatusType st = PQresultStatus(res); /* PGRES_FATAL_ERROR for NULL */
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                int r = !res && PQstatus(c->conn) == CONNECTION_OK ? -ENOMEM : pg_error(c, res);
                PQclear(res);
                return r;
        }
        if (ret_changed)
                *ret_changed = strtoull(PQcmdTuples(res), NULL, 10); /* "" for a statement that counts none */
        if (ret_res)
                *ret_res = res;
        else
                PQclear(res);
        return 0;
}

int pg_exec_script(struct pg_call *c, const char *sql) {
        PGresult *res = PQexec(c->conn, sql);
        ExecStatusType st = PQresultStatus(res);
        int r = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : pg_error(c, res);
        PQclear(res);
        return r;
}

int pg_begin(struct pg_call *c) {
        int r = pg_exec(c, false, "BEGIN", NULL, NULL, NULL);
        if (r >= 0)
                c->in_tx = true;
        return r;
}

int pg_commit(struct pg_call *c) {
        c->wrote = true; /* from here it may have committed */
        c->in_tx = false;
        return pg_exec(c, false, "COMMIT", NULL, NULL, NULL);
}

int pg_lock(struct pg_call *c, int64_t key) {
        struct store_params q = { 0 };
        store_param_int(&q, key);
        return pg_exec(c, false, "SELECT pg_advisory_xact_lock($1)", &q, NULL, NULL);
}

/* A result's rows as a store_row cursor. */
struct pg_rows {
        struct store_row row; /* must be first */
        const PGresult *res;
        int i, n;
};

static const struct pg_rows *rows_of(const struct store_row *r) {
        return (const struct pg_rows *) r;
}

static int rows_ncols(const struct store_row *r) {
        return PQnfields(rows_of(r)->res);
}

static bool rows_is_null(const struct store_row *r, int col) {
        const struct pg_rows *p = rows_of(r);
        return PQgetisnull(p->res, p->i, col);
}

static const char *rows_text(const struct store_row *r, int col) {
        const struct pg_rows *p = rows_of(r);
        return PQgetisnull(p->res, p->i, col) ? NULL : PQgetvalue(p->res, p->i, col);
}

static int64_t rows_int64(const struct store_row *r, int col) {
        const struct pg_rows *p = rows_of(r);
        Oid t = PQftype(p->res, col);
        int len = PQgetlength(p->res, p->i, col);
        if (PQgetisnull(p->res, p->i, col) || len < 1 || len > 8 ||
            (t != INT8OID && t != INT4OID && t != INT2OID && t != BOOLOID))
                return 0;
        /* binary: big-endian two's complement (a boolean is one byte, 0 or 1) */
        const uint8_t *v = (const uint8_t *) PQgetvalue(p->res, p->i, col);
        uint64_t u = (v[0] & 0x80) && t != BOOLOID ? UINT64_MAX : 0;
        for (int k = 0; k < len; k++)
                u = u << 8 | v[k];
        return (int64_t) u;
}

static const void *rows_blob(const struct store_row *r, int col, size_t *ret_len) {
        const struct pg_rows *p = rows_of(r);
        if (PQgetisnull(p->res, p->i, col)) {
                *ret_len = 0;
                return NULL;
        }
        *ret_len = (size_t) PQgetlength(p->res, p->i, col);
        return PQgetvalue(p->res, p->i, col);
}

static int rows_next(struct store_row *r) {
        struct pg_rows *p = (struct pg_rows *) r;
        if (p->i + 1 >= p->n)
                return 0;
        p->i++;
        return 1;
}

static const struct store_row_ops pg_row_ops = {
        .ncols = rows_ncols,
        .is_null = rows_is_null,
        .text = rows_text,
        .int64 = rows_int64,
        .blob = rows_blob,
};

static struct pg_rows pg_rows(const PGresult *res) {
        return (struct pg_rows){
                .row = { .ops = &pg_row_ops, .next = rows_next },
                .res = res,
                .i = -1,
                .n = PQntuples(res),
        };
}

DEFINE_TRIVIAL_CLEANUP_FUNC(PGresult *, PQclear);

/* One statement as a call (pg_run()); run again, its result starts over. */
struct statement {
        bool write;
        bool rows; /* a write's RETURNING rows are wanted */
        const char *sql;
        const struct store_params *q;
        PGresult *res;
        uint64_t changed;
};

static int statement_run(struct pg_call *c, void *ctx) {
        struct statement *st = ctx;
        PQclear(st->res);
        st->res = NULL;
        return pg_exec(c, st->write, st->sql, st->q, st->write && !st->rows ? NULL : &st->res, &st->changed);
}

/* Runs a SELECT as a call of its own; *ret its rows. */
static int select_rows(struct store *s, const char *sql, const struct store_params *q, PGresult **ret) {
        struct statement st = { .sql = sql, .q = q };
        int r = pg_run(to_pg(s), statement_run, &st);
        if (r < 0) {
                PQclear(st.res);
                return r;
        }
        *ret = st.res;
        return 0;
}

int pg_call_select_one(struct pg_call *c, const char *sql, const struct store_params *q,
                       int (*read_row)(const struct store_row *, void *), void *ret) {
        _cleanup_(PQclearp) PGresult *res = NULL;
        int r = pg_exec(c, false, sql, q, &res, NULL);
        if (r < 0)
                return r;
        struct pg_rows rows = pg_rows(res);
        return store_rows_one(&rows.row, read_row, ret);
}

int pg_select_one(struct store *s, const char *sql, const struct store_params *q,
                  int (*read_row)(const struct store_row *, void *), void *ret) {
        _cleanup_(PQclearp) PGresult *res = NULL;
        int r = select_rows(s, sql, q, &res);
        if (r < 0)
                return r;
        struct pg_rows rows = pg_rows(res);
        return store_rows_one(&rows.row, read_row, ret);
}

int pg_select_all(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n) {
        _cleanup_(PQclearp) PGresult *res = NULL;
        int r = select_rows(s, sql, q, &res);
        if (r < 0)
                return r;
        struct pg_rows rows = pg_rows(res);
        return store_rows_list(&rows.row, list, max, ret, ret_n);
}

int pg_select_key_match(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                        char **ret_tenant_id) {
        _cleanup_(PQclearp) PGresult *res = NULL;
        int r = select_rows(s, sql, NULL, &res);
        if (r < 0)
                return r;
        struct pg_rows rows = pg_rows(res);
        return store_rows_match_key(&rows.row, hash, ret_tenant_id);
}

int pg_write(struct store *s, const char *sql, const struct store_params *q, uint64_t *ret_changed) {
        struct statement st = { .write = true, .sql = sql, .q = q };
        int r = pg_run(to_pg(s), statement_run, &st);
        if (r >= 0 && ret_changed)
                *ret_changed = st.changed;
        return r;
}

int pg_write_rows(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n) {
        struct statement st = { .write = true, .rows = true, .sql = sql, .q = q };
        int r = pg_run(to_pg(s), statement_run, &st);
        _cleanup_(PQclearp) PGresult *res = st.res;
        if (r < 0)
                return r;
        struct pg_rows rows = pg_rows(res);
        return store_rows_list(&rows.row, list, max, ret, ret_n);
}

int pg_write_one(struct store *s, const char *sql, const struct store_params *q) {
        uint64_t n = 0;
        int r = pg_write(s, sql, q, &n);
        return r < 0 ? r : n == 0 ? -ENOENT : 0;
}

struct locked_write {
        int64_t key;
        const char *sql;
        const struct store_params *q;
        uint64_t changed;
};

static int locked_write_run(struct pg_call *c, void *ctx) {
        struct locked_write *w = ctx;
        int r;
        if ((r = pg_begin(c)) < 0 || (r = pg_lock(c, w->key)) < 0 ||
            (r = pg_exec(c, true, w->sql, w->q, NULL, &w->changed)) < 0)
                return r;
        return pg_commit(c);
}

int pg_write_locked(struct store *s, int64_t key, const char *sql, const struct store_params *q, uint64_t *ret_changed) {
        struct locked_write w = { .key = key, .sql = sql, .q = q };
        int r = pg_run(to_pg(s), locked_write_run, &w);
        if (r >= 0 && ret_changed)
                *ret_changed = w.changed;
        return r;
}

static int pg_write_limited(struct store *s, const char *sql, const struct store_params *q, enum store_limit limit,
                            const char *scope, uint64_t *ret_changed) {
        int64_t key = limit == STORE_LIMIT_TENANTS     ? PG_LOCK_TENANTS
                      : limit == STORE_LIMIT_TEMPLATES ? pg_lock_template_scope(scope)
                      : limit == STORE_LIMIT_WEBHOOKS  ? pg_lock_webhook_scope(scope)
                                                       : pg_lock_key_scope(scope);
        return pg_write_locked(s, key, sql, q, ret_changed);
}

const struct store_sql store_pg_sql = {
        .pg = true,
        .select_one = pg_select_one,
        .select_all = pg_select_all,
        .write = pg_write,
        .write_one = pg_write_one,
        .write_limited = pg_write_limited,
        .select_key_match = pg_select_key_match,
};
