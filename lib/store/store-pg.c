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
        pg->base.ops = &store_pg_ops;
        pg->url_opts = opts;
        pthread_mutex_init(&pg->lock, NULL);
        pthread_cond_init(&pg->returned, NULL);
        int r = conn_params(pg);
        if (r >= 0)
                r = migrate(pg);
        if (r < 0) {
                pg_close(&pg->base);
                return r;
        }
        *ret = &pg->base;
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

static int pg_sandbox_insert(struct store *s, const struct store_sandbox *sb) {
        struct store_params q = { 0 };
        store_params_sandbox(&q, sb);
        return pg_write(s,
                        "INSERT INTO sandboxes (id, template, state, error, metadata, env_keys, created_at, "
                        "updated_at, desired_state, snapshot_policy, idle_timeout_s, tenant_id, network, "
                        "expires_at, expiry_s, on_expiry, node, memory_mib, vcpus) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
                        &q, NULL);
}

/* Runs a SELECT of one row by one text parameter: the row through
 * read_row into ret, or -ENOENT. */
static int select_by(struct store *s, const char *sql, const char *arg,
                     int (*read_row)(const struct store_row *, void *), void *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return pg_select_one(s, sql, &q, read_row, ret);
}

static int pg_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret) {
        return select_by(s, "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = $1", id, store_read_sandbox,
                         ret);
}

/* Lists sandboxes: every one (tenant_id NULL) or one tenant's. Ids sort
 * bytewise, as in SQLite, whatever the database's collation. */
static int sandbox_list_common(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                               size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                             "WHERE $1::text IS NULL OR tenant_id = $1 "
                             "ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                             &q, &store_list_sandbox, max, ret, ret_n);
}

static int pg_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        return sandbox_list_common(s, NULL, max, ret, ret_n);
}

static int pg_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                                  size_t *ret_n) {
        return sandbox_list_common(s, tenant_id, max, ret, ret_n);
}

static int pg_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return pg_write_one(s, "UPDATE sandboxes SET state = $2, error = $3, updated_at = $4 WHERE id = $1", &q);
}

/* A statement whose only parameter is one id; -ENOENT when it touched no row. */
static int write_by(struct store *s, const char *sql, const char *id) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        return pg_write_one(s, sql, &q);
}

static int pg_sandbox_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM sandboxes WHERE id = $1", id);
}

static int pg_sandbox_transition(struct store *s, const char *id, const char *from, const char *to,
                                 const char *desired) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_text(&q, desired);
        store_param_int(&q, store_now_ms());
        /* one statement: its row lock and re-check of the state make two
         * racing verbs serialise, the second finding the state changed */
        int r = pg_write_one(s,
                             "UPDATE sandboxes SET state = $3, desired_state = COALESCE($4, desired_state), "
                             "error = NULL, updated_at = $5 WHERE id = $1 AND state = $2",
                             &q);
        return r == -ENOENT ? -ESTALE : r;
}

static int pg_sandbox_network_get(struct store *s, const char *id, char **ret) {
        return select_by(s, "SELECT network FROM sandboxes WHERE id = $1", id, store_read_text, ret);
}

static int pg_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, network);
        store_param_int(&q, store_now_ms());
        int r = pg_write_one(s, "UPDATE sandboxes SET network = $3, updated_at = $4 WHERE id = $1 AND state = $2",
                             &q);
        return r == -ENOENT ? -ESTALE : r;
}

static int pg_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                                 const char *on_expiry) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int_or_null(&q, expires_at);
        store_param_int_or_null(&q, expiry_s);
        store_param_text(&q, on_expiry);
        store_param_int(&q, store_now_ms());
        return pg_write_one(s,
                            "UPDATE sandboxes SET expires_at = $2, expiry_s = $3, "
                            "on_expiry = COALESCE($4, on_expiry), updated_at = $5 WHERE id = $1",
                            &q);
}

static int pg_operation_insert(struct store *s, const struct store_operation *op) {
        struct store_params q = { 0 };
        store_params_operation(&q, op);
        /* a taken idempotency key is the UNIQUE constraint's -EEXIST, in
         * whichever replica the other insert ran */
        return pg_write(s,
                        "INSERT INTO operations (id, sandbox_id, verb, state, error, result, idempotency_key, "
                        "created_at, request_hash, stage, progress, tenant_id, owner, lease_until, detail) "
                        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, "
                        "COALESCE($12, (SELECT tenant_id FROM sandboxes WHERE id = $2)), $13, $14, $15)",
                        &q, NULL);
}

static int pg_operation_get(struct store *s, const char *id, struct store_operation *ret) {
        return select_by(s, "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE id = $1", id,
                         store_read_operation, ret);
}

static int pg_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret) {
        return select_by(s, "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE idempotency_key = $1", key,
                         store_read_operation, ret);
}

static int pg_operation_update(struct store *s, const char *id, const char *state, const char *error,
                               const char *result) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_text(&q, result);
        store_param_int(&q, store_now_ms());
        return pg_write_one(s,
                            "UPDATE operations SET state = $2, error = $3, result = $4, "
                            "finished_at = CASE WHEN $2 IN ('succeeded', 'failed') THEN $5 ELSE NULL END, "
                            "progress = CASE WHEN $2 = 'succeeded' THEN 100 ELSE progress END, "
                            "stage = CASE WHEN $2 = 'succeeded' THEN NULL ELSE stage END WHERE id = $1",
                            &q);
}

static int pg_operation_progress(struct store *s, const char *id, int progress, const char *stage) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int(&q, progress);
        store_param_text(&q, stage);
        return pg_write_one(s,
                            "UPDATE operations SET progress = $2, stage = $3 "
                            "WHERE id = $1 AND state IN ('pending', 'running')",
                            &q);
}

static int pg_operation_fail_unfinished(struct store *s, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return pg_write(s,
                        "UPDATE operations SET state = 'failed', error = $1, finished_at = $2 "
                        "WHERE state IN ('pending', 'running')",
                        &q, NULL);
}

static int pg_snapshot_insert(struct store *s, const struct store_snapshot *snap) {
        struct store_params q = { 0 };
        store_params_snapshot(&q, snap);
        return pg_write(s,
                        "INSERT INTO snapshots (id, sandbox_id, kind, size, created_at, pinned) "
                        "VALUES ($1, $2, $3, $4, $5, $6)",
                        &q, NULL);
}

static int pg_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret) {
        return select_by(s, "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE id = $1", id,
                         store_read_snapshot, ret);
}

static int pg_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                            size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE sandbox_id = $1 "
                             "ORDER BY created_at DESC, id COLLATE \"C\" DESC LIMIT $2",
                             &q, &store_list_snapshot, max, ret, ret_n);
}

static int pg_snapshot_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM snapshots WHERE id = $1", id);
}

static int pg_session_insert(struct store *s, const struct store_session *ses) {
        struct store_params q = { 0 };
        store_params_session(&q, ses);
        return pg_write(s,
                        "INSERT INTO sessions (id, sandbox_id, cmd, pty, token_hash, created_at) "
                        "VALUES ($1, $2, $3, $4, $5, $6)",
                        &q, NULL);
}

static int pg_session_get(struct store *s, const char *id, struct store_session *ret) {
        return select_by(s, "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = $1", id, store_read_session,
                         ret);
}

static int pg_session_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM sessions WHERE id = $1", id);
}

static int pg_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]) {
        char id[4 + 16 + 1];
        int r = random_id("key-", 8, id, sizeof id);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        store_param_text(&q, id);
        /* an admin-scoped key: under the admin scope's lock, so that it
         * counts for a racing api_key_create() of that scope */
        return pg_write_locked(s, pg_lock_key_scope(NULL),
                               "INSERT INTO api_keys (name, hash, created_at, id) VALUES ($1, $2, $3, $4) "
                               "ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at",
                               &q, NULL);
}

/* store.h promises every stored hash is compared in constant time, so no
 * index finds the row: every key's hash and tenant come over the
 * connection and are compared here (store_rows_match_key()). A lookup
 * costs O(keys): some 60 bytes a key on the wire and a 32-byte compare,
 * nothing with the keys a control plane has, but with very many keys it
 * grows with them (narrowing by a keyed prefix of the hash would keep the
 * promise then). */
static int pg_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        return pg_select_key_match(s, "SELECT hash, tenant_id FROM api_keys", hash, ret_tenant_id);
}

static int pg_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                             const uint8_t hash[STORE_HASH_SIZE], size_t max) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        store_param_int(&q, (int64_t) MIN(max, (size_t) INT64_MAX));
        /* the count and the insert under the scope's lock: a racing create
         * (in any process) waits, then counts this one (a statement under
         * READ COMMITTED sees what committed before it started) */
        uint64_t n = 0;
        int r = pg_write_locked(s, pg_lock_key_scope(tenant_id),
                                "INSERT INTO api_keys (name, hash, created_at, id, tenant_id, label) "
                                "SELECT $1, $2, $3, $1, $4, $5 "
                                "WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id IS NOT DISTINCT FROM $4) < $6",
                                &q, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

static int pg_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret,
                           size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_API_KEY_COLUMNS " FROM api_keys WHERE tenant_id = $1 "
                             "ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                             &q, &store_list_api_key, max, ret, ret_n);
}

static int pg_api_key_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM api_keys WHERE id = $1 AND tenant_id IS NOT NULL", id);
}

static int pg_tenant_insert(struct store *s, const struct store_tenant *t, size_t max) {
        struct store_params q = { 0 };
        store_params_tenant(&q, t, max);
        uint64_t n = 0;
        int r = pg_write_locked(s, PG_LOCK_TENANTS,
                                "INSERT INTO tenants (id, name, created_at, network) SELECT $1, $2, $3, $5 "
                                "WHERE (SELECT COUNT(*) FROM tenants) < $4",
                                &q, &n);
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

static int pg_tenant_get(struct store *s, const char *id, struct store_tenant *ret) {
        return select_by(s, "SELECT " STORE_TENANT_COLUMNS " FROM tenants WHERE id = $1", id, store_read_tenant,
                         ret);
}

static int pg_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_TENANT_COLUMNS " FROM tenants ORDER BY created_at, id COLLATE \"C\" "
                             "LIMIT $1",
                             &q, &store_list_tenant, max, ret, ret_n);
}

static int pg_tenant_delete(struct store *s, const char *id) {
        /* a sandbox or image inserted for it meanwhile (not seen by the NOT
         * EXISTS) fails the delete on their foreign key: still -EBUSY */
        int r = write_by(s,
                         "DELETE FROM tenants WHERE id = $1 "
                         "AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE tenant_id = $1) "
                         "AND NOT EXISTS (SELECT 1 FROM images WHERE tenant_id = $1)",
                         id);
        if (r == 0)
                return 0;
        if (r != -ENOENT)
                return r;
        /* the foreign key's -ENOENT, or nothing deleted: unknown, or it
         * still owns sandboxes */
        struct store_tenant t = { 0 };
        r = pg_tenant_get(s, id, &t);
        store_tenant_release(&t);
        return r < 0 ? r : -EBUSY;
}

static int pg_tenant_network_set(struct store *s, const char *id, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, network);
        return pg_write_one(s, "UPDATE tenants SET network = $2 WHERE id = $1", &q);
}

/* Templates built from specs: the admin's rows and the local node are NULL in
 * the table, "" in the struct. */
int pg_template_put(struct store *s, const struct store_template *t, size_t max) {
        struct store_params q = { 0 };
        store_params_template(&q, t, max);
        /* the count and the write under the owner's lock: a racing put of a
         * new name (in any process) waits, then counts this one (a statement
         * under READ COMMITTED sees what committed before it started); a
         * replaced row keeps its created_at */
        uint64_t n = 0;
        int r = pg_write_locked(s, pg_lock_template_scope(t->tenant_id),
                                "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                                "SELECT NULLIF($1, ''), $2, $3, $4, $5, $6, NULLIF($7, ''), $8, $9, $10, $11, $12 "
                                "WHERE EXISTS (SELECT 1 FROM templates WHERE " PG_SCOPE_IS(1) " AND name = $2) "
                                "OR (SELECT COUNT(*) FROM templates WHERE " PG_SCOPE_IS(1) ") < $13 "
                                "ON CONFLICT ((COALESCE(tenant_id, '')), name) DO UPDATE SET "
                                "node_name = excluded.node_name, build_id = excluded.build_id, "
                                "state = excluded.state, error = excluded.error, node = excluded.node, "
                                "spec = excluded.spec, memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                                "updated_at = excluded.updated_at",
                                &q, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

const struct store_ops store_pg_ops = {
        .scheme = "postgresql",
        .open = pg_open,
        .close = pg_close,
        STORE_BACKEND_OPS(pg)
};
