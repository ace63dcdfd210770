/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the PostgreSQL backend's files share (store-pg-helpers.c: the
 * connection pool, statements, transactions, the error mapping, a
 * result's rows as a store_row cursor and the statement runner,
 * store_pg_sql, that store-sql.c runs the ops both backends share
 * through; store-pg.c: opening, migrations, the core tables and a
 * template's put; store-pg-cluster.c: what of the cluster's tables takes
 * more than one statement or a row lock). Private to lib/store.
 *
 * Every call borrows one connection from the handle's pool for its
 * duration, so no two threads ever use one PGconn. Statements are
 * parameterised (PQexecParams, values never spliced into SQL), their rows
 * come back in binary form.
 */

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "store-backend.h"
#include "store.h"

#define PG_POOL_MAX 8    /* connections one handle opens at the most */

struct store_pg {
        struct store_backend base; /* must be first */
        /* PQconnectdbParams()'s arguments: the URL's parameters with our
         * defaults (connect and statement timeouts) where it sets none */
        PQconninfoOption *url_opts;
        const char **keywords, **values;
        char *options; /* the "options" value we made, or NULL */
        pthread_mutex_t lock; /* guards the pool below */
        pthread_cond_t returned;
        PGconn *idle[PG_POOL_MAX];
        size_t n_idle; /* connections in idle[] */
        size_t n_open; /* those and the ones lent to calls */
};

/* One call's use of a connection, from pg_run(). */
struct pg_call {
        PGconn *conn;
        bool in_tx;    /* between pg_begin() and its end */
        bool wrote;    /* sent what may have committed: the call is not run again */
        bool broken;   /* the connection failed */
        bool conflict; /* a serialization failure or deadlock: the call may run again */
};


static inline struct store_pg *to_pg(struct store *s) {
        return (struct store_pg *) s;
}

/* Closes the pool's connections (none may be lent). */
void pg_pool_close(struct store_pg *pg);

/* Runs fn(call, ctx) on a connection from the pool as one call, and again
 * (on a connection reset once) when the connection broke before anything
 * that may have committed was sent, or (a few times) after a serialization
 * failure or a deadlock. fn's statements go through pg_exec(); a
 * transaction fn leaves open is rolled back. */
int pg_run(struct store_pg *pg, int (*fn)(struct pg_call *c, void *ctx), void *ctx);

/* Runs one statement on the call's connection: *ret_res its result when
 * wanted (PQclear it), *ret_changed the rows it touched. write: it changes
 * data (outside a transaction, the call is not repeated once it is sent). */
int pg_exec(struct pg_call *c, bool write, const char *sql, const struct store_params *q, PGresult **ret_res,
            uint64_t *ret_changed);
/* Runs SQL text without parameters (the migrations: several statements). */
int pg_exec_script(struct pg_call *c, const char *sql);
/* Runs a SELECT on the call's connection: its first row through read_row
 * into ret, or -ENOENT. */
int pg_call_select_one(struct pg_call *c, const char *sql, const struct store_params *q,
                       int (*read_row)(const struct store_row *, void *), void *ret);
int pg_begin(struct pg_call *c);
int pg_commit(struct pg_call *c);
/* Takes the transaction-scoped advisory lock key (pg_advisory_xact_lock). */
int pg_lock(struct pg_call *c, int64_t key);

/* The advisory lock keys: our class in the high half, what is locked in
 * the low one, so that every replica of the control plane agrees. */
#define PG_LOCK_CLASS ((int64_t) 0x41726c6b << 32) /* "Arlk" */
#define PG_LOCK_MIGRATIONS (PG_LOCK_CLASS | 1)
#define PG_LOCK_TENANTS (PG_LOCK_CLASS | 2) /* the tenant count */
/* the API key count of one scope (tenant_id NULL: the admin's) */
int64_t pg_lock_key_scope(const char *tenant_id);
/* the template count of one owner (tenant_id "" or NULL: the admin's) */
int64_t pg_lock_template_scope(const char *tenant_id);
/* the webhook count of one owner (tenant_id NULL: the admin's) */
int64_t pg_lock_webhook_scope(const char *tenant_id);

/* One statement as a call of its own, for the calls that are one:
 * a SELECT's rows (pg_select_one: the first through read_row, or -ENOENT;
 * pg_select_all: at most max through list into a new array *ret of *ret_n
 * elements, store_rows_list()), or a write's count of touched rows
 * (pg_write; pg_write_one: -ENOENT when it touched none). */
int pg_select_one(struct store *s, const char *sql, const struct store_params *q,
                  int (*read_row)(const struct store_row *, void *), void *ret);
int pg_select_all(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n);
/* A SELECT of (hash, tenant_id) rows as a call of its own, every hash
 * compared with hash (store_rows_match_key()). */
int pg_select_key_match(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                        char **ret_tenant_id);
int pg_write(struct store *s, const char *sql, const struct store_params *q, uint64_t *ret_changed);
/* A write whose RETURNING rows are wanted, as a call of its own: at most
 * max of them through list, as pg_select_all() reads them. */
int pg_write_rows(struct store *s, const char *sql, const struct store_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n);
int pg_write_one(struct store *s, const char *sql, const struct store_params *q);
/* A write in a transaction of its own that first takes the advisory lock
 * key: what it reads (a count under a limit) cannot change under it before
 * it commits, in this process or any other. */
int pg_write_locked(struct store *s, int64_t key, const char *sql, const struct store_params *q, uint64_t *ret_changed);


/* the ops defined in the files beside store-pg.c */
STORE_FILE_OPS(STORE_OP_DECLARE, pg)

