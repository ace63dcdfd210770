/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ops both backends run the same way: the same parameters, one
 * statement as a call of its own, each database given its own text of it
 * (SQLite's ?1 and PostgreSQL's $1, their collations and casts). They run
 * through the backend's statement runner (struct store_sql: sqlite_* in
 * store-sqlite-helpers.c, pg_* in store-pg-helpers.c); what differs in
 * more than the text (transactions, PostgreSQL's row locks and advisory
 * locks) stays in store-sqlite-*.c and store-pg-*.c.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-backend.h"
#include "util.h"

#define UNFINISHED "state IN ('pending', 'running')"

/* Runs prim of s's statement runner on the text for its database. */
#define RUN(prim, s, sqlite_sql, pg_sql, ...) \
        (store_sql(s)->prim((s), store_sql(s)->pg ? (pg_sql) : (sqlite_sql), __VA_ARGS__))

/* A SELECT of one row by one text parameter: the row through read_row
 * into ret, or -ENOENT. */
static int select_by(struct store *s, const char *sqlite_sql, const char *pg_sql, const char *arg,
                     int (*read_row)(const struct store_row *, void *), void *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return RUN(select_one, s, sqlite_sql, pg_sql, &q, read_row, ret);
}

/* A write whose only parameter is one text; -ENOENT when it touched no row. */
static int write_by(struct store *s, const char *sqlite_sql, const char *pg_sql, const char *arg) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return RUN(write_one, s, sqlite_sql, pg_sql, &q);
}

/* ---- sandboxes, operations, snapshots, sessions, API keys, tenants ---- */

int store_sql_sandbox_insert(struct store *s, const struct store_sandbox *sb) {
        struct store_params q = { 0 };
        store_params_sandbox(&q, sb);
        return RUN(write, s,
                   "INSERT INTO sandboxes (id, template, state, error, metadata, env_keys, created_at, updated_at, "
                   "desired_state, snapshot_policy, idle_timeout_s, tenant_id, network, expires_at, expiry_s, "
                   "on_expiry, node, memory_mib, vcpus) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                   "?13, ?14, ?15, ?16, ?17, ?18, ?19)",
                   "INSERT INTO sandboxes (id, template, state, error, metadata, env_keys, created_at, updated_at, "
                   "desired_state, snapshot_policy, idle_timeout_s, tenant_id, network, expires_at, expiry_s, "
                   "on_expiry, node, memory_mib, vcpus) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
                   "$13, $14, $15, $16, $17, $18, $19)",
                   &q, NULL);
}

int store_sql_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret) {
        return select_by(s,
                         "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = ?1",
                         "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = $1",
                         id, store_read_sandbox, ret);
}

/* Lists sandboxes: every one (tenant_id NULL) or one tenant's. Ids sort
 * bytewise in both databases, whatever PostgreSQL's collation. */
static int sandbox_list_common(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                               size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   tenant_id ? "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                               "WHERE tenant_id = ?1 ORDER BY created_at, id LIMIT ?2"
                             : "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes ORDER BY created_at, id LIMIT ?2",
                   "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE $1::text IS NULL OR tenant_id = $1 "
                   "ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                   &q, &store_list_sandbox, max, ret, ret_n);
}

int store_sql_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        return sandbox_list_common(s, NULL, max, ret, ret_n);
}

int store_sql_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                                  size_t *ret_n) {
        return sandbox_list_common(s, tenant_id, max, ret, ret_n);
}

int store_sql_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return RUN(write_one, s,
                   "UPDATE sandboxes SET state = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
                   "UPDATE sandboxes SET state = $2, error = $3, updated_at = $4 WHERE id = $1",
                   &q);
}

int store_sql_sandbox_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM sandboxes WHERE id = ?1",
                        "DELETE FROM sandboxes WHERE id = $1",
                        id);
}

int store_sql_sandbox_transition(struct store *s, const char *id, const char *from, const char *to,
                                 const char *desired) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_text(&q, desired);
        store_param_int(&q, store_now_ms());
        /* one statement: its row lock and re-check of the state make two
         * racing verbs serialise, the second finding the state changed */
        int r = RUN(write_one, s,
                    "UPDATE sandboxes SET state = ?3, desired_state = COALESCE(?4, desired_state), error = NULL, "
                    "updated_at = ?5 WHERE id = ?1 AND state = ?2",
                    "UPDATE sandboxes SET state = $3, desired_state = COALESCE($4, desired_state), error = NULL, "
                    "updated_at = $5 WHERE id = $1 AND state = $2",
                    &q);
        return r == -ENOENT ? -ESTALE : r;
}

int store_sql_sandbox_network_get(struct store *s, const char *id, char **ret) {
        return select_by(s,
                         "SELECT network FROM sandboxes WHERE id = ?1",
                         "SELECT network FROM sandboxes WHERE id = $1",
                         id, store_read_text, ret);
}

int store_sql_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, network);
        store_param_int(&q, store_now_ms());
        int r = RUN(write_one, s,
                    "UPDATE sandboxes SET network = ?3, updated_at = ?4 WHERE id = ?1 AND state = ?2",
                    "UPDATE sandboxes SET network = $3, updated_at = $4 WHERE id = $1 AND state = $2",
                    &q);
        return r == -ENOENT ? -ESTALE : r;
}

int store_sql_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                                 const char *on_expiry) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int_or_null(&q, expires_at);
        store_param_int_or_null(&q, expiry_s);
        store_param_text(&q, on_expiry);
        store_param_int(&q, store_now_ms());
        return RUN(write_one, s,
                   "UPDATE sandboxes SET expires_at = ?2, expiry_s = ?3, on_expiry = COALESCE(?4, on_expiry), "
                   "updated_at = ?5 WHERE id = ?1",
                   "UPDATE sandboxes SET expires_at = $2, expiry_s = $3, on_expiry = COALESCE($4, on_expiry), "
                   "updated_at = $5 WHERE id = $1",
                   &q);
}

int store_sql_operation_insert(struct store *s, const struct store_operation *op) {
        struct store_params q = { 0 };
        store_params_operation(&q, op);
        /* a taken idempotency key is the UNIQUE constraint's -EEXIST, in
         * whichever replica the other insert ran */
        return RUN(write, s,
                   "INSERT INTO operations (id, sandbox_id, verb, state, error, result, idempotency_key, "
                   "created_at, request_hash, stage, progress, tenant_id, owner, lease_until, detail) VALUES (?1, "
                   "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, COALESCE(?12, (SELECT tenant_id FROM sandboxes WHERE "
                   "id = ?2)), ?13, ?14, ?15)",
                   "INSERT INTO operations (id, sandbox_id, verb, state, error, result, idempotency_key, "
                   "created_at, request_hash, stage, progress, tenant_id, owner, lease_until, detail) VALUES ($1, "
                   "$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE($12, (SELECT tenant_id FROM sandboxes WHERE "
                   "id = $2)), $13, $14, $15)",
                   &q, NULL);
}

int store_sql_operation_get(struct store *s, const char *id, struct store_operation *ret) {
        return select_by(s,
                         "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE id = ?1",
                         "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE id = $1",
                         id, store_read_operation, ret);
}

int store_sql_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret) {
        return select_by(s,
                         "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE idempotency_key = ?1",
                         "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE idempotency_key = $1",
                         key, store_read_operation, ret);
}

int store_sql_operation_update(struct store *s, const char *id, const char *state, const char *error,
                               const char *result) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_text(&q, result);
        store_param_int(&q, store_now_ms());
        return RUN(write_one, s,
                   "UPDATE operations SET state = ?2, error = ?3, result = ?4, finished_at = CASE WHEN ?2 IN "
                   "('succeeded', 'failed') THEN ?5 ELSE NULL END, progress = CASE WHEN ?2 = 'succeeded' THEN 100 "
                   "ELSE progress END, stage = CASE WHEN ?2 = 'succeeded' THEN NULL ELSE stage END WHERE id = ?1",
                   "UPDATE operations SET state = $2, error = $3, result = $4, finished_at = CASE WHEN $2 IN "
                   "('succeeded', 'failed') THEN $5 ELSE NULL END, progress = CASE WHEN $2 = 'succeeded' THEN 100 "
                   "ELSE progress END, stage = CASE WHEN $2 = 'succeeded' THEN NULL ELSE stage END WHERE id = $1",
                   &q);
}

int store_sql_operation_progress(struct store *s, const char *id, int progress, const char *stage) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int(&q, progress);
        store_param_text(&q, stage);
        return RUN(write_one, s,
                   "UPDATE operations SET progress = ?2, stage = ?3 WHERE id = ?1 AND state IN ('pending', "
                   "'running')",
                   "UPDATE operations SET progress = $2, stage = $3 WHERE id = $1 AND state IN ('pending', "
                   "'running')",
                   &q);
}

int store_sql_operation_fail_unfinished(struct store *s, const char *error) {
        struct store_params q = { 0 };
        store_param_text(&q, error);
        store_param_int(&q, store_now_ms());
        return RUN(write, s,
                   "UPDATE operations SET state = 'failed', error = ?1, finished_at = ?2 WHERE state IN ('pending', "
                   "'running')",
                   "UPDATE operations SET state = 'failed', error = $1, finished_at = $2 WHERE state IN ('pending', "
                   "'running')",
                   &q, NULL);
}

int store_sql_snapshot_insert(struct store *s, const struct store_snapshot *snap) {
        struct store_params q = { 0 };
        store_params_snapshot(&q, snap);
        return RUN(write, s,
                   "INSERT INTO snapshots (id, sandbox_id, kind, size, created_at, pinned) VALUES (?1, ?2, ?3, ?4, "
                   "?5, ?6)",
                   "INSERT INTO snapshots (id, sandbox_id, kind, size, created_at, pinned) VALUES ($1, $2, $3, $4, "
                   "$5, $6)",
                   &q, NULL);
}

int store_sql_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret) {
        return select_by(s,
                         "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE id = ?1",
                         "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE id = $1",
                         id, store_read_snapshot, ret);
}

int store_sql_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                            size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE sandbox_id = ?1 ORDER BY created_at "
                   "DESC, id DESC LIMIT ?2",
                   "SELECT " STORE_SNAPSHOT_COLUMNS " FROM snapshots WHERE sandbox_id = $1 ORDER BY created_at "
                   "DESC, id COLLATE \"C\" DESC LIMIT $2",
                   &q, &store_list_snapshot, max, ret, ret_n);
}

int store_sql_snapshot_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM snapshots WHERE id = ?1",
                        "DELETE FROM snapshots WHERE id = $1",
                        id);
}

int store_sql_session_insert(struct store *s, const struct store_session *ses) {
        struct store_params q = { 0 };
        store_params_session(&q, ses);
        return RUN(write, s,
                   "INSERT INTO sessions (id, sandbox_id, cmd, pty, token_hash, created_at) VALUES (?1, ?2, ?3, ?4, "
                   "?5, ?6)",
                   "INSERT INTO sessions (id, sandbox_id, cmd, pty, token_hash, created_at) VALUES ($1, $2, $3, $4, "
                   "$5, $6)",
                   &q, NULL);
}

int store_sql_session_get(struct store *s, const char *id, struct store_session *ret) {
        return select_by(s,
                         "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = ?1",
                         "SELECT " STORE_SESSION_COLUMNS " FROM sessions WHERE id = $1",
                         id, store_read_session, ret);
}

int store_sql_session_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM sessions WHERE id = ?1",
                        "DELETE FROM sessions WHERE id = $1",
                        id);
}

int store_sql_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]) {
        char id[4 + 16 + 1];
        int r = random_id("key-", 8, id, sizeof id);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        store_param_text(&q, id);
        /* an admin-scoped key: counted with the admin scope's, so that it
         * counts for a racing api_key_create() of that scope */
        return RUN(write_limited, s,
                   "INSERT INTO api_keys (name, hash, created_at, id) VALUES (?1, ?2, ?3, ?4) "
                   "ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at",
                   "INSERT INTO api_keys (name, hash, created_at, id) VALUES ($1, $2, $3, $4) "
                   "ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at",
                   &q, STORE_LIMIT_API_KEYS, NULL, NULL);
}

int store_sql_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                             const uint8_t hash[STORE_HASH_SIZE], size_t max) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        store_param_int(&q, store_now_ms());
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        store_param_int(&q, (int64_t) MIN(max, (size_t) INT64_MAX));
        /* the limit is part of the statement, so two racing creates cannot
         * both pass it; no row inserted means "over the limit" */
        uint64_t n = 0;
        int r = RUN(write_limited, s,
                    "INSERT INTO api_keys (name, hash, created_at, id, tenant_id, label) "
                    "SELECT ?1, ?2, ?3, ?1, ?4, ?5 "
                    "WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id IS ?4) < ?6",
                    "INSERT INTO api_keys (name, hash, created_at, id, tenant_id, label) "
                    "SELECT $1, $2, $3, $1, $4, $5 "
                    "WHERE (SELECT COUNT(*) FROM api_keys WHERE tenant_id IS NOT DISTINCT FROM $4) < $6",
                    &q, STORE_LIMIT_API_KEYS, tenant_id, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

/* store.h promises every stored hash is compared in constant time, so no
 * index finds the row: every key's hash and tenant are read (over the
 * connection, with PostgreSQL) and compared here (store_rows_match_key()).
 * A lookup costs O(keys): some 60 bytes a key on the wire and a 32-byte
 * compare, nothing with the keys a control plane has, but with very many
 * keys it grows with them (narrowing by a keyed prefix of the hash would
 * keep the promise then). */
int store_sql_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        return RUN(select_key_match, s,
                   "SELECT hash, tenant_id FROM api_keys",
                   "SELECT hash, tenant_id FROM api_keys",
                   hash, ret_tenant_id);
}

int store_sql_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret,
                           size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_API_KEY_COLUMNS " FROM api_keys WHERE tenant_id = ?1 ORDER BY created_at, id "
                   "LIMIT ?2",
                   "SELECT " STORE_API_KEY_COLUMNS " FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id "
                   "COLLATE \"C\" LIMIT $2",
                   &q, &store_list_api_key, max, ret, ret_n);
}

int store_sql_api_key_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM api_keys WHERE id = ?1 AND tenant_id IS NOT NULL",
                        "DELETE FROM api_keys WHERE id = $1 AND tenant_id IS NOT NULL",
                        id);
}

int store_sql_tenant_insert(struct store *s, const struct store_tenant *t, size_t max) {
        struct store_params q = { 0 };
        store_params_tenant(&q, t, max);
        uint64_t n = 0;
        int r = RUN(write_limited, s,
                    "INSERT INTO tenants (id, name, created_at, network) SELECT ?1, ?2, ?3, ?5 "
                    "WHERE (SELECT COUNT(*) FROM tenants) < ?4",
                    "INSERT INTO tenants (id, name, created_at, network) SELECT $1, $2, $3, $5 "
                    "WHERE (SELECT COUNT(*) FROM tenants) < $4",
                    &q, STORE_LIMIT_TENANTS, NULL, &n);
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

int store_sql_tenant_get(struct store *s, const char *id, struct store_tenant *ret) {
        return select_by(s,
                         "SELECT " STORE_TENANT_COLUMNS " FROM tenants WHERE id = ?1",
                         "SELECT " STORE_TENANT_COLUMNS " FROM tenants WHERE id = $1",
                         id, store_read_tenant, ret);
}

int store_sql_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_TENANT_COLUMNS " FROM tenants ORDER BY created_at, id LIMIT ?1",
                   "SELECT " STORE_TENANT_COLUMNS " FROM tenants ORDER BY created_at, id COLLATE \"C\" LIMIT $1",
                   &q, &store_list_tenant, max, ret, ret_n);
}

int store_sql_tenant_delete(struct store *s, const char *id) {
        /* the foreign key of sandboxes.tenant_id has no cascade: a tenant
         * that still owns sandboxes, images or volumes (whose data is on
         * nodes) is kept, whatever the race; one inserted for it meanwhile
         * (not seen by the NOT EXISTS) fails the delete on its foreign
         * key: still -EBUSY */
        int r = write_by(s,
                         "DELETE FROM tenants WHERE id = ?1"
                         " AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE tenant_id = ?1)"
                         " AND NOT EXISTS (SELECT 1 FROM images WHERE tenant_id = ?1)"
                         " AND NOT EXISTS (SELECT 1 FROM volumes WHERE tenant_id = ?1)",
                         "DELETE FROM tenants WHERE id = $1"
                         " AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE tenant_id = $1)"
                         " AND NOT EXISTS (SELECT 1 FROM images WHERE tenant_id = $1)"
                         " AND NOT EXISTS (SELECT 1 FROM volumes WHERE tenant_id = $1)",
                         id);
        if (r != -ENOENT)
                return r;
        /* the foreign key's -ENOENT, or nothing deleted: unknown, or it
         * still owns sandboxes */
        struct store_tenant t = { 0 };
        r = store_sql_tenant_get(s, id, &t);
        store_tenant_release(&t);
        return r < 0 ? r : -EBUSY;
}

int store_sql_tenant_network_set(struct store *s, const char *id, const char *network) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, network);
        return RUN(write_one, s,
                   "UPDATE tenants SET network = ?2 WHERE id = ?1",
                   "UPDATE tenants SET network = $2 WHERE id = $1",
                   &q);
}

/* ---- images ---- */

int store_sql_image_insert(struct store *s, const struct store_image *img) {
        struct store_params q = { 0 };
        store_params_image(&q, img);
        return RUN(write, s,
                   "INSERT INTO images (" STORE_IMAGE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                   "INSERT INTO images (" STORE_IMAGE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                   &q, NULL);
}

int store_sql_image_get(struct store *s, const char *id, struct store_image *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        return RUN(select_one, s,
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE id = ?1",
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE id = $1",
                   &q, store_read_image, ret);
}

int store_sql_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return RUN(select_one, s,
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE " SCOPE_IS(1) " AND name = ?2",
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q, store_read_image, ret);
}

int store_sql_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                         struct store_image **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE (?1 OR " SCOPE_IS(2) ") AND (?3 IS NULL OR "
                   "sandbox_id = ?3) ORDER BY created_at DESC, id DESC LIMIT ?4",
                   "SELECT " STORE_IMAGE_COLUMNS " FROM images WHERE ($1 OR " PG_SCOPE_IS(2) ") AND ($3 IS NULL OR "
                   "sandbox_id = $3) ORDER BY created_at DESC, id COLLATE \"C\" DESC LIMIT $4",
                   &q, &store_list_image, max, ret, ret_n);
}

int store_sql_image_delete(struct store *s, const char *id) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        return RUN(write_one, s,
                   "DELETE FROM images WHERE id = ?1",
                   "DELETE FROM images WHERE id = $1",
                   &q);
}

/* ---- volumes and their holds ---- */

/* what store_volume_usage() reads: "SUM(size), COUNT(*)" */
struct volume_usage {
        int64_t bytes, n;
};

static int read_volume_usage(const struct store_row *r, void *ret) {
        *(struct volume_usage *) ret = (struct volume_usage){ store_row_int64(r, 0), store_row_int64(r, 1) };
        return 0;
}

int store_sql_volume_insert(struct store *s, const struct store_volume *v) {
        struct store_params q = { 0 };
        store_params_volume(&q, v);
        /* a taken (owner, name) is the unique index's -EEXIST, an unknown
         * owner the foreign key's -ENOENT */
        return RUN(write, s,
                   "INSERT INTO volumes (" STORE_VOLUME_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   "INSERT INTO volumes (" STORE_VOLUME_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7)",
                   &q, NULL);
}

int store_sql_volume_get(struct store *s, const char *id, struct store_volume *ret) {
        return select_by(s,
                         "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE id = ?1",
                         "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE id = $1",
                         id, store_read_volume, ret);
}

int store_sql_volume_find(struct store *s, const char *tenant_id, const char *name,
                          struct store_volume *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return RUN(select_one, s,
                   "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE " SCOPE_IS(1) " AND name = ?2",
                   "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q, store_read_volume, ret);
}

int store_sql_volume_list(struct store *s, bool all, const char *tenant_id, size_t max,
                          struct store_volume **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE (?1 OR " SCOPE_IS(2) ") "
                   "ORDER BY created_at DESC, id DESC LIMIT ?3",
                   "SELECT " STORE_VOLUME_COLUMNS " FROM volumes WHERE ($1 OR " PG_SCOPE_IS(2) ") "
                   "ORDER BY created_at DESC, id COLLATE \"C\" DESC LIMIT $3",
                   &q, &store_list_volume, max, ret, ret_n);
}

int store_sql_volume_delete(struct store *s, const char *id) {
        /* the holds' foreign key has no cascade: a held volume is kept,
         * whatever the race; a hold inserted meanwhile (not seen by the NOT
         * EXISTS) fails the delete on its foreign key: still -EBUSY */
        int r = write_by(s,
                         "DELETE FROM volumes WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM sandbox_volumes "
                         "WHERE volume_id = ?1)",
                         "DELETE FROM volumes WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM sandbox_volumes "
                         "WHERE volume_id = $1)",
                         id);
        if (r != -ENOENT)
                return r;
        /* the foreign key's -ENOENT, or nothing deleted: unknown, or held */
        struct store_volume v = { 0 };
        r = store_sql_volume_get(s, id, &v);
        store_volume_release(&v);
        return r < 0 ? r : -EBUSY;
}

int store_sql_volume_set_node(struct store *s, const char *id, const char *node) {
        struct store_params q = {0};
        store_param_text(&q, id);
        store_param_text(&q, node);
        uint64_t changed = 0;
        /* -ENOENT from the write: node is no node (its foreign key) */
        int r = RUN(write, s, "UPDATE volumes SET node = ?2 WHERE id = ?1",
                    "UPDATE volumes SET node = $2 WHERE id = $1", &q, &changed);
        return r < 0 ? r : changed == 0 ? -ENOENT : 0;
}

int store_sql_volume_usage(struct store *s, const char *tenant_id, int64_t *ret_bytes, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        struct volume_usage u = { 0 };
        /* PostgreSQL's SUM of a BIGINT is a NUMERIC: cast back */
        int r = RUN(select_one, s,
                    "SELECT COALESCE(SUM(size), 0), COUNT(*) FROM volumes WHERE " SCOPE_IS(1),
                    "SELECT COALESCE(SUM(size), 0)::bigint, COUNT(*) FROM volumes WHERE " PG_SCOPE_IS(1),
                    &q, read_volume_usage, &u);
        if (r < 0)
                return r;
        *ret_bytes = u.bytes;
        *ret_n = (size_t) u.n;
        return 0;
}

int store_sql_volume_hold_insert(struct store *s, const struct store_volume_hold *h) {
        struct store_params q = { 0 };
        store_param_text(&q, h->sandbox_id);
        store_param_text(&q, h->volume_id);
        store_param_int(&q, h->slot);
        store_param_text(&q, h->path);
        store_param_bool(&q, h->read_only);
        /* a taken slot (the primary key) or a second read-write holder (the
         * partial unique index) is -EEXIST; an unknown sandbox or volume
         * the foreign keys' -ENOENT */
        return RUN(write, s,
                   "INSERT INTO sandbox_volumes (" STORE_VOLUME_HOLD_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5)",
                   "INSERT INTO sandbox_volumes (" STORE_VOLUME_HOLD_COLUMNS ") VALUES ($1, $2, $3, $4, $5)",
                   &q, NULL);
}

int store_sql_volume_holds_of_volume(struct store *s, const char *volume_id, struct store_volume_hold **ret,
                                     size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, volume_id);
        return RUN(select_all, s,
                   "SELECT " STORE_VOLUME_HOLD_COLUMNS " FROM sandbox_volumes WHERE volume_id = ?1 ORDER BY "
                   "sandbox_id, slot",
                   "SELECT " STORE_VOLUME_HOLD_COLUMNS " FROM sandbox_volumes WHERE volume_id = $1 ORDER BY "
                   "sandbox_id COLLATE \"C\", slot",
                   &q, &store_list_volume_hold, STORE_LIST_MAX, ret, ret_n);
}

int store_sql_volume_holds_of_sandbox(struct store *s, const char *sandbox_id,
                                      struct store_volume_hold **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        return RUN(select_all, s,
                   "SELECT " STORE_VOLUME_HOLD_COLUMNS " FROM sandbox_volumes WHERE sandbox_id = ?1 "
                   "ORDER BY slot",
                   "SELECT " STORE_VOLUME_HOLD_COLUMNS " FROM sandbox_volumes WHERE sandbox_id = $1 "
                   "ORDER BY slot",
                   &q, &store_list_volume_hold, STORE_VOLUME_SLOTS, ret, ret_n);
}

/* ---- sandboxes' lifecycle events ---- */

int store_sql_event_insert(struct store *s, const struct store_event *ev) {
        struct store_params q = { 0 };
        store_params_event(&q, ev);
        return RUN(write, s,
                   "INSERT INTO sandbox_events (ts_ms, tenant_id, sandbox_id, type, state, previous, detail) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   "INSERT INTO sandbox_events (ts_ms, tenant_id, sandbox_id, type, state, previous, detail) "
                   "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                   &q, NULL);
}

int store_sql_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                         size_t max, struct store_event **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, after_id);
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_EVENT_COLUMNS " FROM sandbox_events WHERE id > ?1 AND (?2 OR " SCOPE_IS(3)
                   ") AND (?4 IS NULL OR sandbox_id = ?4) ORDER BY id LIMIT ?5",
                   "SELECT " STORE_EVENT_COLUMNS " FROM sandbox_events WHERE id > $1 AND ($2 OR " PG_SCOPE_IS(3)
                   ") AND ($4::text IS NULL OR sandbox_id = $4) ORDER BY id LIMIT $5",
                   &q, &store_list_event, max, ret, ret_n);
}

int store_sql_event_last_id(struct store *s, int64_t before_ms, int64_t *ret) {
        struct store_params q = {0};
        store_param_int(&q, before_ms);
        return RUN(select_one, s,
                   "SELECT COALESCE(MAX(id), 0) FROM sandbox_events WHERE ?1 = 0 OR ts_ms < ?1",
                   "SELECT COALESCE(MAX(id), 0) FROM sandbox_events WHERE $1 = 0 OR ts_ms < $1", &q,
                   store_read_int64, ret);
}

int store_sql_event_prune(struct store *s, int64_t before_ms, int64_t hard_before_ms) {
        struct store_params q = { 0 };
        store_param_int(&q, before_ms);
        store_param_int(&q, hard_before_ms);
        /* an event past before_ms stays while a webhook's cursor is below
         * it (no webhook: the COALESCE lets every one go); the MIN is one
         * subquery, computed once, not once a row */
        return RUN(write, s,
                   "DELETE FROM sandbox_events WHERE ts_ms < ?2 OR (ts_ms < ?1 AND id <= COALESCE((SELECT "
                   "MIN(cursor) FROM webhooks), id))",
                   "DELETE FROM sandbox_events WHERE ts_ms < $2 OR (ts_ms < $1 AND id <= COALESCE((SELECT "
                   "MIN(cursor) FROM webhooks), id))",
                   &q, NULL);
}

/* ---- webhooks and their deliveries ---- */

int store_sql_webhook_insert(struct store *s, const struct store_webhook *w, size_t max) {
        struct store_params q = { 0 };
        store_params_webhook(&q, w, max);
        /* the limit is part of the statement (run under the owner's lock on
         * PostgreSQL: write_limited), so racing inserts cannot both pass
         * it; no row inserted means "over the limit". The cursor is read in
         * the same statement: no event comes between it and the row. */
        uint64_t n = 0;
        int r = RUN(write_limited, s,
                    "INSERT INTO webhooks (id, tenant_id, url, events, secret, created_at, cursor) "
                    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, (SELECT COALESCE(MAX(id), 0) FROM sandbox_events) "
                    "WHERE (SELECT COUNT(*) FROM webhooks WHERE tenant_id IS ?2) < ?7",
                    "INSERT INTO webhooks (id, tenant_id, url, events, secret, created_at, cursor) "
                    "SELECT $1, $2, $3, $4, $5, $6, (SELECT COALESCE(MAX(id), 0) FROM sandbox_events) "
                    "WHERE (SELECT COUNT(*) FROM webhooks WHERE tenant_id IS NOT DISTINCT FROM $2) < $7",
                    &q, STORE_LIMIT_WEBHOOKS, w->tenant_id, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

int store_sql_webhook_get(struct store *s, const char *id, struct store_webhook *ret) {
        return select_by(s,
                         "SELECT " STORE_WEBHOOK_COLUMNS " FROM webhooks WHERE id = ?1",
                         "SELECT " STORE_WEBHOOK_COLUMNS " FROM webhooks WHERE id = $1",
                         id, store_read_webhook, ret);
}

int store_sql_webhook_list(struct store *s, bool all, const char *tenant_id, size_t max, struct store_webhook **ret,
                           size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_WEBHOOK_COLUMNS " FROM webhooks WHERE (?1 OR " SCOPE_IS(2) ") "
                   "ORDER BY created_at, id LIMIT ?3",
                   "SELECT " STORE_WEBHOOK_COLUMNS " FROM webhooks WHERE ($1 OR " PG_SCOPE_IS(2) ") "
                   "ORDER BY created_at, id COLLATE \"C\" LIMIT $3",
                   &q, &store_list_webhook, max, ret, ret_n);
}

int store_sql_webhook_delete(struct store *s, const char *id) {
        /* its deliveries go by their foreign key's cascade */
        return write_by(s,
                        "DELETE FROM webhooks WHERE id = ?1",
                        "DELETE FROM webhooks WHERE id = $1",
                        id);
}

int store_sql_webhook_advance(struct store *s, const char *id, int64_t from_cursor, const struct store_webhook *next) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_int(&q, from_cursor);
        store_param_int(&q, next->cursor);
        store_param_int(&q, next->attempts);
        store_param_int(&q, next->next_at);
        store_param_text(&q, next->last_error);
        store_param_int(&q, next->delivered);
        store_param_int(&q, next->failed);
        /* one statement, a compare-and-set on the cursor: of two replicas
         * that delivered the same event, the second finds it moved */
        int r = RUN(write_one, s,
                    "UPDATE webhooks SET cursor = ?3, attempts = ?4, next_at = ?5, last_error = ?6, "
                    "delivered = delivered + ?7, failed = failed + ?8 WHERE id = ?1 AND cursor = ?2",
                    "UPDATE webhooks SET cursor = $3, attempts = $4, next_at = $5, last_error = $6, "
                    "delivered = delivered + $7, failed = failed + $8 WHERE id = $1 AND cursor = $2",
                    &q);
        if (r != -ENOENT)
                return r;
        /* nothing changed: the row is gone, or its cursor moved */
        int64_t found = 0;
        r = select_by(s,
                      "SELECT 1 FROM webhooks WHERE id = ?1",
                      "SELECT 1 FROM webhooks WHERE id = $1",
                      id, store_read_int64, &found);
        return r < 0 ? r : -ESTALE;
}

int store_sql_webhook_delivery_insert(struct store *s, const struct store_webhook_delivery *d, size_t keep) {
        struct store_params q = { 0 };
        store_params_webhook_delivery(&q, d);
        /* -ENOENT: the webhook's foreign key (it was deleted) */
        int r = RUN(write, s,
                    "INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, sandbox_id, ts_ms, attempt, "
                    "status, error, duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    "INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, sandbox_id, ts_ms, attempt, "
                    "status, error, duration_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    &q, NULL);
        if (r < 0)
                return r;
        /* the keep newest stay: every row at or below the id of the one
         * after them goes (none when there are keep or fewer: the subquery
         * is NULL); a walk of keep entries of the (webhook_id, id) index */
        struct store_params p = { 0 };
        store_param_text(&p, d->webhook_id);
        store_param_int(&p, (int64_t) MIN(keep, (size_t) INT64_MAX));
        return RUN(write, s,
                   "DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND id <= (SELECT id FROM "
                   "webhook_deliveries WHERE webhook_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                   "DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND id <= (SELECT id FROM "
                   "webhook_deliveries WHERE webhook_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
                   &p, NULL);
}

int store_sql_webhook_delivery_list(struct store *s, const char *webhook_id, int64_t before_id, size_t max,
                                    struct store_webhook_delivery **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, webhook_id);
        store_param_int(&q, before_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_WEBHOOK_DELIVERY_COLUMNS " FROM webhook_deliveries WHERE webhook_id = ?1 AND "
                   "(?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3",
                   "SELECT " STORE_WEBHOOK_DELIVERY_COLUMNS " FROM webhook_deliveries WHERE webhook_id = $1 AND "
                   "($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3",
                   &q, &store_list_webhook_delivery, max, ret, ret_n);
}

/* ---- credentials, their attachments, the audit log ---- */

int store_sql_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id) {
        struct store_params q = { 0 };
        store_param_blob(&q, hash, STORE_HASH_SIZE);
        char *id = NULL;
        int r = RUN(select_one, s,
                    "SELECT id FROM api_keys WHERE hash = ?1",
                    "SELECT id FROM api_keys WHERE hash = $1",
                    &q, store_read_text, &id);
        if (r >= 0 && !id)
                r = -ENOENT;
        if (r < 0)
                return r;
        *ret_id = id;
        return 0;
}

int store_sql_secret_insert(struct store *s, const struct store_secret *sec) {
        struct store_params q = { 0 };
        store_params_secret(&q, sec);
        return RUN(write, s,
                   "INSERT INTO secrets (tenant_id, name, sandbox_id, spec, expires_at, sealed, created_at, "
                   "created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   "INSERT INTO secrets (tenant_id, name, sandbox_id, spec, expires_at, sealed, created_at, "
                   "created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                   &q, NULL);
}

int store_sql_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return RUN(select_one, s,
                   "SELECT " STORE_SECRET_COLUMNS ", sealed FROM secrets WHERE " SCOPE_IS(1) " AND name = ?2",
                   "SELECT " STORE_SECRET_COLUMNS ", sealed FROM secrets WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q, store_read_secret, ret);
}

int store_sql_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret,
                          size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_SECRET_COLUMNS " FROM secrets WHERE " SCOPE_IS(1) " ORDER BY name LIMIT ?2",
                   "SELECT " STORE_SECRET_COLUMNS " FROM secrets WHERE " PG_SCOPE_IS(1) " ORDER BY name COLLATE "
                   "\"C\" LIMIT $2",
                   &q, &store_list_secret, max, ret, ret_n);
}

int store_sql_secret_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        return RUN(write_one, s,
                   "DELETE FROM secrets WHERE " SCOPE_IS(1) " AND name = ?2",
                   "DELETE FROM secrets WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q);
}

int store_sql_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                           size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, name);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT a.sandbox_id FROM sandbox_secrets a JOIN secrets s ON s.id = a.secret_id WHERE "
                   "COALESCE(s.tenant_id, '') = ?1 AND s.name = ?2 ORDER BY a.sandbox_id LIMIT ?3",
                   "SELECT a.sandbox_id FROM sandbox_secrets a JOIN secrets s ON s.id = a.secret_id WHERE "
                   "COALESCE(s.tenant_id, '') = $1 AND s.name = $2 ORDER BY a.sandbox_id COLLATE \"C\" LIMIT $3",
                   &q, &store_list_string, max, ret, ret_n);
}

int store_sql_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a) {
        struct store_params q = { 0 };
        store_param_text(&q, a->sandbox_id);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, a->name);
        store_param_text(&q, a->placeholder);
        store_param_text(&q, a->env_name);
        /* no secret row: nothing inserted, -ENOENT */
        return RUN(write_one, s,
                   "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) SELECT ?1, id, "
                   "name, ?4, ?5 FROM secrets WHERE " SCOPE_IS(2) " AND name = ?3",
                   "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) SELECT $1, id, "
                   "name, $4, $5 FROM secrets WHERE " PG_SCOPE_IS(2) " AND name = $3",
                   &q);
}

int store_sql_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                                  size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, sandbox_id);
        return RUN(select_all, s,
                   "SELECT " STORE_ATTACHMENT_COLUMNS " FROM sandbox_secrets WHERE sandbox_id = ?1 ORDER BY name",
                   "SELECT " STORE_ATTACHMENT_COLUMNS " FROM sandbox_secrets WHERE sandbox_id = $1 ORDER BY name "
                   "COLLATE \"C\"",
                   &q, &store_list_attachment, STORE_LIST_MAX, ret, ret_n);
}

int store_sql_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id) {
        struct store_params q = { 0 };
        store_param_text(&q, from_id);
        store_param_text(&q, to_id);
        return RUN(write, s,
                   "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) SELECT ?2, "
                   "secret_id, name, placeholder, env_name FROM sandbox_secrets WHERE sandbox_id = ?1",
                   "INSERT INTO sandbox_secrets (sandbox_id, secret_id, name, placeholder, env_name) SELECT $2, "
                   "secret_id, name, placeholder, env_name FROM sandbox_secrets WHERE sandbox_id = $1",
                   &q, NULL);
}

int store_sql_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source,
                           const char *boot_id, int64_t seq) {
        struct store_params q = { 0 };
        store_params_audit_event(&q, ev, source, boot_id, seq);
        /* a gateway event already stored (same source, boot, seq) is skipped */
        return RUN(write, s,
                   "INSERT OR IGNORE INTO audit_events (ts_ms, tenant_id, actor, sandbox_id, secret, host, port, "
                   "method, path, action, reason, source, boot_id, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                   "?10, ?11, ?12, ?13, ?14)",
                   "INSERT INTO audit_events (ts_ms, tenant_id, actor, sandbox_id, secret, host, port, method, "
                   "path, action, reason, source, boot_id, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
                   "$11, $12, $13, $14) ON CONFLICT DO NOTHING",
                   &q, NULL);
}

int store_sql_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                         size_t max, struct store_audit_event **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_bool(&q, all);
        store_param_text(&q, tenant_id ?: "");
        store_param_text(&q, sandbox_id);
        store_param_text(&q, secret);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_AUDIT_COLUMNS " FROM audit_events WHERE (?1 OR " SCOPE_IS(2) ") AND (?3 IS NULL "
                   "OR sandbox_id = ?3) AND (?4 IS NULL OR secret = ?4) ORDER BY id DESC LIMIT ?5",
                   "SELECT " STORE_AUDIT_COLUMNS " FROM audit_events WHERE ($1 OR " PG_SCOPE_IS(2) ") AND ($3 IS "
                   "NULL OR sandbox_id = $3) AND ($4 IS NULL OR secret = $4) ORDER BY id DESC LIMIT $5",
                   &q, &store_list_audit_event, max, ret, ret_n);
}

int store_sql_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq) {
        struct store_params q = { 0 };
        store_param_text(&q, source);
        struct store_audit_cursor cur = { 0 };
        int r = RUN(select_one, s,
                    "SELECT boot_id, seq FROM audit_cursors WHERE source = ?1",
                    "SELECT boot_id, seq FROM audit_cursors WHERE source = $1",
                    &q, store_read_audit_cursor, &cur);
        if (r < 0)
                return r;
        *ret_boot_id = cur.boot_id;
        *ret_seq = cur.seq;
        return 0;
}

int store_sql_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq) {
        struct store_params q = { 0 };
        store_param_text(&q, source);
        store_param_text(&q, boot_id);
        store_param_int(&q, seq);
        return RUN(write, s,
                   "INSERT INTO audit_cursors (source, boot_id, seq) VALUES (?1, ?2, ?3) ON CONFLICT(source) DO "
                   "UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq",
                   "INSERT INTO audit_cursors (source, boot_id, seq) VALUES ($1, $2, $3) ON CONFLICT (source) DO "
                   "UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq",
                   &q, NULL);
}

/* ---- templates ---- */

/* The admin's templates and the local node are NULL in the table, "" in
 * the struct. */
int store_sql_template_put(struct store *s, const struct store_template *t, size_t max) {
        struct store_params q = { 0 };
        store_params_template(&q, t, max);
        /* the count and the write as one: a racing put of a new name waits,
         * then counts this one; a replaced row keeps its created_at */
        uint64_t n = 0;
        int r = RUN(write_limited, s,
                    "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                    "SELECT NULLIF(?1, ''), ?2, ?3, ?4, ?5, ?6, NULLIF(?7, ''), ?8, ?9, ?10, ?11, ?12 "
                    "WHERE EXISTS (SELECT 1 FROM templates WHERE " SCOPE_IS(1) " AND name = ?2) "
                    "OR (SELECT COUNT(*) FROM templates WHERE " SCOPE_IS(1) ") < ?13 "
                    "ON CONFLICT (COALESCE(tenant_id, ''), name) DO UPDATE SET "
                    "node_name = excluded.node_name, build_id = excluded.build_id, state = excluded.state, "
                    "error = excluded.error, node = excluded.node, spec = excluded.spec, "
                    "memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                    "updated_at = excluded.updated_at",
                    "INSERT INTO templates (" STORE_TEMPLATE_COLUMNS ") "
                    "SELECT NULLIF($1, ''), $2, $3, $4, $5, $6, NULLIF($7, ''), $8, $9, $10, $11, $12 "
                    "WHERE EXISTS (SELECT 1 FROM templates WHERE " PG_SCOPE_IS(1) " AND name = $2) "
                    "OR (SELECT COUNT(*) FROM templates WHERE " PG_SCOPE_IS(1) ") < $13 "
                    "ON CONFLICT ((COALESCE(tenant_id, '')), name) DO UPDATE SET "
                    "node_name = excluded.node_name, build_id = excluded.build_id, "
                    "state = excluded.state, error = excluded.error, node = excluded.node, "
                    "spec = excluded.spec, memory_mib = excluded.memory_mib, vcpus = excluded.vcpus, "
                    "updated_at = excluded.updated_at",
                    &q, STORE_LIMIT_TEMPLATES, t->tenant_id, &n); /* -ENOENT: the tenant's foreign key */
        return r < 0 ? r : n == 0 ? -EDQUOT : 0;
}

int store_sql_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        return RUN(select_one, s,
                   "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE " SCOPE_IS(1) " AND name = ?2",
                   "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q, store_read_template, ret);
}

int store_sql_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                            size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE (?1 IS NULL OR " SCOPE_IS(1) ") ORDER BY "
                   "name, COALESCE(tenant_id, '') LIMIT ?2",
                   "SELECT " STORE_TEMPLATE_COLUMNS " FROM templates WHERE ($1::text IS NULL OR " PG_SCOPE_IS(1)
                   ") ORDER BY name COLLATE \"C\", COALESCE(tenant_id, '') COLLATE \"C\" LIMIT $2",
                   &q, &store_list_template, max, ret, ret_n);
}

int store_sql_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                                 const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        store_param_text(&q, build_id);
        store_param_text(&q, state);
        store_param_text(&q, error);
        store_param_int(&q, memory_mib);
        store_param_int(&q, vcpus);
        store_param_int(&q, store_now_ms());
        int r = RUN(write_one, s,
                    "UPDATE templates SET state = ?4, error = ?5, memory_mib = CASE WHEN ?6 > 0 THEN ?6 ELSE "
                    "memory_mib END, vcpus = CASE WHEN ?7 > 0 THEN ?7 ELSE vcpus END, updated_at = ?8 WHERE "
                    SCOPE_IS(1) " AND name = ?2 AND build_id = ?3",
                    "UPDATE templates SET state = $4, error = $5, memory_mib = CASE WHEN $6 > 0 THEN $6 ELSE "
                    "memory_mib END, vcpus = CASE WHEN $7 > 0 THEN $7 ELSE vcpus END, updated_at = $8 WHERE "
                    PG_SCOPE_IS(1) " AND name = $2 AND build_id = $3",
                    &q);
        if (r != -ENOENT)
                return r;
        /* nothing changed: the row is gone, or another build replaced it */
        struct store_template t = { 0 };
        r = store_sql_template_get(s, tenant_id, name, &t);
        store_template_release(&t);
        return r < 0 ? r : -ESTALE;
}

int store_sql_template_delete(struct store *s, const char *tenant_id, const char *name) {
        struct store_params q = { 0 };
        store_param_text(&q, tenant_id);
        store_param_text(&q, name);
        return RUN(write_one, s,
                   "DELETE FROM templates WHERE " SCOPE_IS(1) " AND name = ?2",
                   "DELETE FROM templates WHERE " PG_SCOPE_IS(1) " AND name = $2",
                   &q);
}

int store_sql_template_node_refs(struct store *s, const char *node_name, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, node_name);
        int64_t n = 0;
        int r = RUN(select_one, s,
                    "SELECT COUNT(*) FROM templates WHERE node_name = ?1",
                    "SELECT COUNT(*) FROM templates WHERE node_name = $1",
                    &q, store_read_int64, &n);
        if (r < 0)
                return r;
        *ret_n = (size_t) n;
        return 0;
}

/* ---- a cluster: nodes, join tokens, capability keys, replicas, operation leases ---- */

int store_sql_node_insert(struct store *s, const struct store_node *n) {
        struct store_params q = { 0 };
        store_params_node(&q, n);
        return RUN(write, s,
                   "INSERT INTO nodes (" STORE_NODE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   "INSERT INTO nodes (" STORE_NODE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                   &q, NULL);
}

int store_sql_node_get(struct store *s, const char *name, struct store_node *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        return RUN(select_one, s,
                   "SELECT " STORE_NODE_COLUMNS " FROM nodes WHERE name = ?1",
                   "SELECT " STORE_NODE_COLUMNS " FROM nodes WHERE name = $1",
                   &q, store_read_node, ret);
}

int store_sql_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_NODE_COLUMNS " FROM nodes ORDER BY name LIMIT ?1",
                   "SELECT " STORE_NODE_COLUMNS " FROM nodes ORDER BY name COLLATE \"C\" LIMIT $1",
                   &q, &store_list_node, max, ret, ret_n);
}

int store_sql_node_set_draining(struct store *s, const char *name, bool draining) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_bool(&q, draining);
        return RUN(write_one, s,
                   "UPDATE nodes SET draining = ?2 WHERE name = ?1",
                   "UPDATE nodes SET draining = $2 WHERE name = $1",
                   &q);
}

int store_sql_node_delete(struct store *s, const char *name) {
        /* a sandbox placed on it meanwhile (not seen by the NOT EXISTS)
         * fails the delete on its foreign key: -ENOENT, read as busy below */
        int r = write_by(s,
                         "DELETE FROM nodes WHERE name = ?1 AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE node = ?1)",
                         "DELETE FROM nodes WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE node = $1)",
                         name);
        if (r != -ENOENT)
                return r;
        struct store_node n = { 0 };
        r = store_sql_node_get(s, name, &n);
        store_node_release(&n);
        return r < 0 ? r : -EBUSY;
}

int store_sql_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                                size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, node);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE node IS ?1 ORDER BY created_at, id LIMIT "
                   "?2",
                   "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE ($1::text IS NULL AND node IS NULL) OR "
                   "node = $1 ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                   &q, &store_list_sandbox, max, ret, ret_n);
}

int store_sql_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_int(&q, store_now_ms());
        uint64_t changed = 0;
        /* -ENOENT from the write: `to` is no node (its foreign key) */
        int r = RUN(write, s,
                    "UPDATE sandboxes SET node = ?4, updated_at = ?5 WHERE id = ?1 AND state = ?2 AND node IS ?3",
                    "UPDATE sandboxes SET node = $4, updated_at = $5 WHERE id = $1 AND state = $2 AND node IS NOT "
                    "DISTINCT FROM $3",
                    &q, &changed);
        return r < 0 ? r : changed == 0 ? -ESTALE : 0;
}

int store_sql_sandbox_count_by(struct store *s, enum store_count_by by, size_t max, char ***ret_names,
                               int64_t **ret_counts, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        struct store_node_count *a = NULL;
        size_t n = 0;
        bool state = by == STORE_COUNT_BY_STATE;
        /* NULL (the local node) first, as SQLite sorts it */
        int r = RUN(select_all, s,
                    state ? "SELECT state, COUNT(*) FROM sandboxes GROUP BY state ORDER BY state LIMIT ?1"
                          : "SELECT node, COUNT(*) FROM sandboxes GROUP BY node ORDER BY node LIMIT ?1",
                    state ? "SELECT state, COUNT(*) FROM sandboxes GROUP BY state ORDER BY state COLLATE \"C\" LIMIT $1"
                          : "SELECT node, COUNT(*) FROM sandboxes GROUP BY node "
                            "ORDER BY node COLLATE \"C\" NULLS FIRST LIMIT $1",
                    &q, &store_list_node_count, max, &a, &n);
        return r < 0 ? r : store_node_counts_split(a, n, ret_names, ret_counts, ret_n);
}

int store_sql_join_token_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM join_tokens WHERE id = ?1",
                        "DELETE FROM join_tokens WHERE id = $1",
                        id);
}

int store_sql_cap_key_publish(struct store *s, const struct store_cap_key *k) {
        struct store_params q = { 0 };
        store_params_cap_key(&q, k);
        return RUN(write, s,
                   "INSERT INTO cap_keys (" STORE_CAP_KEY_COLUMNS ") VALUES (?1, ?2, ?3, ?4) ON CONFLICT (kid) DO "
                   "UPDATE SET public_key = excluded.public_key, replica = excluded.replica, created_at = "
                   "excluded.created_at",
                   "INSERT INTO cap_keys (" STORE_CAP_KEY_COLUMNS ") VALUES ($1, $2, $3, $4) ON CONFLICT (kid) DO "
                   "UPDATE SET public_key = excluded.public_key, replica = excluded.replica, created_at = "
                   "excluded.created_at",
                   &q, NULL);
}

int store_sql_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_CAP_KEY_COLUMNS " FROM cap_keys ORDER BY created_at, kid LIMIT ?1",
                   "SELECT " STORE_CAP_KEY_COLUMNS " FROM cap_keys ORDER BY created_at, kid COLLATE \"C\" LIMIT $1",
                   &q, &store_list_cap_key, max, ret, ret_n);
}

int store_sql_cap_key_delete(struct store *s, const char *kid) {
        return write_by(s,
                        "DELETE FROM cap_keys WHERE kid = ?1",
                        "DELETE FROM cap_keys WHERE kid = $1",
                        kid);
}

int store_sql_replica_seen(struct store *s, const struct store_replica *p) {
        struct store_params q = { 0 };
        store_params_replica(&q, p);
        /* started_at stays what the first row said */
        return RUN(write, s,
                   "INSERT INTO replicas (" STORE_REPLICA_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) "
                   "DO UPDATE SET cluster_address = excluded.cluster_address, api_address = excluded.api_address, "
                   "seen_at = excluded.seen_at",
                   "INSERT INTO replicas (" STORE_REPLICA_COLUMNS ") VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) "
                   "DO UPDATE SET cluster_address = excluded.cluster_address, api_address = excluded.api_address, "
                   "seen_at = excluded.seen_at",
                   &q, NULL);
}

int store_sql_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, since);
        store_param_int(&q, (int64_t) max);
        return RUN(select_all, s,
                   "SELECT " STORE_REPLICA_COLUMNS " FROM replicas WHERE seen_at >= ?1 ORDER BY id LIMIT ?2",
                   "SELECT " STORE_REPLICA_COLUMNS " FROM replicas WHERE seen_at >= $1 ORDER BY id COLLATE \"C\" "
                   "LIMIT $2",
                   &q, &store_list_replica, max, ret, ret_n);
}

int store_sql_replica_delete(struct store *s, const char *id) {
        return write_by(s,
                        "DELETE FROM replicas WHERE id = ?1",
                        "DELETE FROM replicas WHERE id = $1",
                        id);
}

int store_sql_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, owner);
        store_param_int(&q, until);
        return RUN(write, s,
                   "UPDATE operations SET lease_until = ?2 WHERE owner = ?1 AND " UNFINISHED,
                   "UPDATE operations SET lease_until = $2 WHERE owner = $1 AND " UNFINISHED,
                   &q, ret_n);
}

int store_sql_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, owner);
        store_param_int(&q, now);
        store_param_int(&q, until);
        /* one statement, a compare-and-set on the lease: a second taker
         * waits on the row, then re-checks the lease the first one set and
         * finds it running */
        int r = RUN(write_one, s,
                    "UPDATE operations SET owner = ?2, lease_until = ?4 WHERE id = ?1 AND " UNFINISHED " AND "
                    "lease_until < ?3",
                    "UPDATE operations SET owner = $2, lease_until = $4 WHERE id = $1 AND " UNFINISHED " AND "
                    "lease_until < $3",
                    &q);
        return r == -ENOENT ? -ESTALE : r;
}
