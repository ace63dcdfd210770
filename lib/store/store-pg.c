/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend of the store: the URL (postgres:// or postgresql://)
 * goes to libpq as a connection URI; a pool of at most PG_POOL_MAX
 * connections, opened as calls need them, lends one to each call
 * (store-pg-helpers.c). Nothing that matters is kept in this process:
 * several control-plane replicas may share one database, so whatever
 * SQLite gets from its single writer comes from PostgreSQL here —
 * compare-and-set as one UPDATE ... WHERE state = ..., uniqueness from
 * the schema's constraints, limits (keys per tenant, tenants) from a
 * transaction holding an advisory lock of their scope while it counts and
 * inserts, migrations from a transaction holding the migrations' lock.
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "migrations/pg.h"
#include "store-pg-internal.h"
#include "store.h"
#include "util.h"

/* unless the URL says otherwise: how long a connection attempt and a
 * statement may take */
#define PG_CONNECT_TIMEOUT_S "10"
#define PG_STATEMENT_TIMEOUT "-c statement_timeout=30000"

static void pg_close(struct store *s) {
        struct store_pg *pg = to_pg(s);
        if (!pg)
                return;
        pg_pool_close(pg);
        pthread_cond_destroy(&pg->returned);
        pthread_mutex_destroy(&pg->lock);
        PQconninfoFree(pg->url_opts);
        free(pg->keywords);
        free(pg->values);
        free(pg->options);
        free(pg);
}

/* PQconnectdbParams()'s arguments from the URL's parameters, adding the
 * connect timeout, the statement timeout (to the server options, unless
 * they set one) and UTF-8 where the URL leaves them out. */
static int conn_params(struct store_pg *pg) {
        size_t n = 0;
        for (PQconninfoOption *o = pg->url_opts; o->keyword; o++)
                n++;
        pg->keywords = calloc(n + 4, sizeof *pg->keywords);
        pg->values = calloc(n + 4, sizeof *pg->values);
        if (!pg->keywords || !pg->values)
                return -ENOMEM;
        bool has_timeout = false, has_options = false, has_encoding = false;
        size_t k = 0;
        for (PQconninfoOption *o = pg->url_opts; o->keyword; o++) {
                if (!o->val)
                        continue;
                const char *val = o->val;
                if (strcmp(o->keyword, "connect_timeout") == 0)
                        has_timeout = true;
                else if (strcmp(o->keyword, "client_encoding") == 0)
                        has_encoding = true;
                else if (strcmp(o->keyword, "options") == 0) {
                        has_options = true;
                        if (!strstr(val, "statement_timeout")) {
                                pg->options = strdup_printf("%s " PG_STATEMENT_TIMEOUT, val);
                                if (!pg->options)
                                        return -ENOMEM;
                                val = pg->options;
                        }
                }
                pg->keywords[k] = o->keyword;
                pg->values[k++] = val;
        }
        if (!has_timeout) {
                pg->keywords[k] = "connect_timeout";
                pg->values[k++] = PG_CONNECT_TIMEOUT_S;
        }
        if (!has_options) {
                pg->keywords[k] = "options";
                pg->values[k++] = PG_STATEMENT_TIMEOUT;
        }
        if (!has_encoding) {
                pg->keywords[k] = "client_encoding";
                pg->values[k++] = "UTF8";
        }
        return 0;
}

static int read_version(const struct store_row *r, void *ret) {
        *(unsigned *) ret = (unsigned) store_row_int64(r, 0);
        return 0;
}

#define VERSION_SQL "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"

/* Applies the migration after the database's version, if any (*done when
 * there is none), in one transaction with its schema_migrations row. The
 * migrations' advisory lock, taken before the version is read, makes
 * replicas opening one database at once apply each version once: the
 * second waits, then reads the version the first committed. */
static int migrate_one(struct pg_call *c, void *ctx) {
        bool *done = ctx;
        unsigned v = 0;
        int r;
        /* no statement timeout: a migration may rewrite a big table, and
         * waiting for another replica's may take as long */
        if ((r = pg_begin(c)) < 0 || (r = pg_exec(c, false, "SET LOCAL statement_timeout = 0", NULL, NULL, NULL)) < 0 ||
            (r = pg_lock(c, PG_LOCK_MIGRATIONS)) < 0 ||
            (r = pg_exec(c, false,
                         "CREATE TABLE IF NOT EXISTS schema_migrations ("
                         "version INTEGER PRIMARY KEY NOT NULL, applied_at BIGINT NOT NULL)",
                         NULL, NULL, NULL)) < 0 ||
            (r = pg_call_select_one(c, VERSION_SQL, NULL, read_version, &v)) < 0)
                return r;
        if (v > ARRAY_SIZE(store_pg_migrations))
                return -EPROTO; /* written by a newer airlockd */
        if (v == ARRAY_SIZE(store_pg_migrations)) {
                *done = true;
                return 0; /* pg_run() rolls the transaction back: nothing changed */
        }
        struct store_params q = { 0 };
        store_param_int(&q, v + 1);
        store_param_int(&q, store_now_ms());
        if ((r = pg_exec_script(c, store_pg_migrations[v])) < 0 ||
            (r = pg_exec(c, false, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", &q, NULL,
                         NULL)) < 0)
                return r;
        return pg_commit(c);
}

static int migrate(struct store_pg *pg) {
        bool done = false;
        while (!done) {
                int r = pg_run(pg, migrate_one, &done);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int pg_open(const char *location, struct store **ret) {
        if (!location || !*location)
                return -EINVAL;
        if (sodium_init() < 0)
                return -EIO;
        /* store_open() took the scheme off; libpq reads "postgres:" and
         * "postgresql:" URIs alike */
        _cleanup_free_ char *url = strdup_printf("postgresql:%s", location);
        if (!url)
                return -ENOMEM;
        char *err = NULL;
        PQconninfoOption *opts = PQconninfoParse(url, &err);
        if (!opts) {
                /* err says what is wrong with the URL, which may hold a
                 * password: not passed on */
                int r = err ? -EINVAL : -ENOMEM;
                PQfreemem(err);
                return r;
        }
        struct store_pg *pg = calloc(1, sizeof *pg);
        if (!pg) {
                PQconninfoFree(opts);
                return -ENOMEM;
        }
        pg->base = (struct store_backend){ .store.ops = &store_pg_ops, .sql = &store_pg_sql };
        pg->url_opts = opts;
        pthread_mutex_init(&pg->lock, NULL);
        pthread_cond_init(&pg->returned, NULL);
        int r = conn_params(pg);
        if (r >= 0)
                r = migrate(pg);
        if (r < 0) {
                pg_close(&pg->base.store);
                return r;
        }
        *ret = &pg->base.store;
        return 0;
}

static int pg_schema_version(struct store *s, unsigned *ret) {
        unsigned v = 0;
        int r = pg_select_one(s, VERSION_SQL, NULL, read_version, &v);
        if (r < 0)
                return r;
        *ret = v;
        return 0;
}

const struct store_ops store_pg_ops = {
        .scheme = "postgresql",
        .open = pg_open,
        .close = pg_close,
        STORE_BACKEND_OPS(pg)
};
