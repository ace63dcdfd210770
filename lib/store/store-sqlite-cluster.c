/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: what of a cluster (store.h) takes more than one
 * statement (the rest is store-sql.c's). Each call prepares its own
 * statements. What must be atomic
 * across processes sharing the file (a heartbeat that finds its node lost,
 * marking nodes lost) runs in a BEGIN IMMEDIATE transaction: SQLite's
 * write lock is taken before anything is read.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-sqlite-internal.h"

#define UNFINISHED "state IN ('pending', 'running')"

static struct store_sqlite_conn *to_conn(struct store *s) {
        return (struct store_sqlite_conn *) s;
}

/* Prepares sql on a connection whose lock the caller holds. */
static int prepare(struct store_sqlite_conn *c, const char *sql, sqlite3_stmt **ret) {
        int rc = sqlite3_prepare_v2(c->db, sql, -1, ret, NULL);
        return rc == SQLITE_OK ? 0 : sqlite_to_errno(c->db, rc) ?: -EIO;
}

static int exec_locked(struct store_sqlite_conn *c, const char *sql) {
        int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
        return rc == SQLITE_OK ? 0 : sqlite_to_errno(c->db, rc) ?: -EIO;
}

/* Takes the lock and begins a write transaction; on failure the lock is
 * released. */
static int tx_begin(struct store_sqlite_conn *c) {
        pthread_mutex_lock(&c->lock);
        int r = exec_locked(c, "BEGIN IMMEDIATE");
        if (r < 0)
                pthread_mutex_unlock(&c->lock);
        return r;
}

/* Commits when r is not an error, else rolls back; releases the lock. */
static int tx_end(struct store_sqlite_conn *c, int r) {
        if (r >= 0)
                r = exec_locked(c, "COMMIT");
        if (r < 0)
                (void) exec_locked(c, "ROLLBACK");
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* In the caller's transaction: reads what the node was, then records the
 * beat (a NULL address, boot_id or info keeps what was stored). */
static int heartbeat_locked(struct store_sqlite_conn *c, const struct store_node *n, struct store_node_beat *b) {
        sqlite3_stmt *st;
        int r = prepare(c, "SELECT lost_at IS NOT NULL, draining FROM nodes WHERE name = ?1", &st);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_params_node_beat(&q, n);
        sqlite_bind(st, &q); /* ?1 only */
        r = sqlite_one(c, st, store_read_node_beat, b);
        sqlite3_finalize(st);
        if (r < 0)
                return r;
        r = prepare(c,
                    "UPDATE nodes SET address = COALESCE(?2, address), boot_id = COALESCE(?3, boot_id), "
                    "info = COALESCE(?4, info), heartbeat_at = ?5, lost_at = NULL WHERE name = ?1",
                    &st);
        if (r < 0)
                return r;
        sqlite_bind(st, &q);
        r = sqlite_step_write(c, st, true);
        sqlite3_finalize(st);
        return r;
}

int sqlite_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining) {
        struct store_sqlite_conn *c = to_conn(s);
        struct store_node_beat b = { 0 };
        int r = tx_begin(c);
        if (r < 0)
                return r;
        r = tx_end(c, heartbeat_locked(c, n, &b));
        if (r < 0)
                return r;
        *ret_was_lost = b.was_lost;
        *ret_draining = b.draining;
        return 0;
}

#define SILENT_NODES "SELECT name FROM nodes WHERE lost_at IS NULL AND heartbeat_at < ?1 ORDER BY name LIMIT ?2"

/* In the caller's transaction: the names, then the same rows marked. */
static int mark_lost_locked(struct store_sqlite_conn *c, int64_t cutoff, size_t max, char ***a, size_t *n) {
        struct store_params q = { 0 };
        store_param_int(&q, cutoff);
        store_param_int(&q, (int64_t) max);
        store_param_int(&q, store_now_ms());
        sqlite3_stmt *st;
        int r = prepare(c, SILENT_NODES, &st);
        if (r < 0)
                return r;
        sqlite_bind(st, &q); /* ?3 unused */
        r = sqlite_list(c, st, &store_list_string, max, a, n);
        sqlite3_finalize(st);
        if (r < 0 || *n == 0)
                return r;
        r = prepare(c, "UPDATE nodes SET lost_at = ?3 WHERE name IN (" SILENT_NODES ")", &st);
        if (r < 0)
                return r;
        sqlite_bind(st, &q);
        r = sqlite_step_write(c, st, false);
        sqlite3_finalize(st);
        return r;
}

int sqlite_nodes_mark_lost(struct store *s, int64_t cutoff, size_t max, char ***ret, size_t *ret_n) {
        struct store_sqlite_conn *c = to_conn(s);
        char **a = NULL;
        size_t n = 0;
        int r = tx_begin(c);
        if (r < 0)
                return r;
        r = tx_end(c, mark_lost_locked(c, cutoff, max, &a, &n));
        if (r < 0) {
                store_string_array_free(a, n);
                return r;
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

/* Deletes the tokens expired at now; the caller holds the lock. */
static int delete_expired_tokens(struct store_sqlite_conn *c, int64_t now) {
        sqlite3_stmt *st;
        int r = prepare(c, "DELETE FROM join_tokens WHERE expires_at <= ?1", &st);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_param_int(&q, now);
        sqlite_bind(st, &q);
        r = sqlite_step_write(c, st, false);
        sqlite3_finalize(st);
        return r;
}

int sqlite_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE],
                             int64_t expires_at) {
        struct store_sqlite_conn *c = to_conn(s);
        int64_t now = store_now_ms();
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "INSERT INTO join_tokens (id, hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
                            &st);
        if (r < 0)
                return r;
        r = delete_expired_tokens(c, now);
        if (r >= 0) {
                struct store_params q = { 0 };
                store_param_text(&q, id);
                store_param_blob(&q, hash, STORE_HASH_SIZE);
                store_param_int(&q, now);
                store_param_int(&q, expires_at);
                sqlite_bind(st, &q);
                r = sqlite_step_write(c, st, false);
        }
        sqlite_done(c, st);
        return r;
}

int sqlite_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        int r = sqlite_prep(c, "SELECT hash, expires_at FROM join_tokens WHERE id = ?1", &st);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_param_text(&q, id);
        sqlite_bind(st, &q);
        struct store_join_token t = { 0 };
        r = sqlite_one(c, st, store_read_join_token, &t);
        sqlite3_reset(st); /* done reading before the delete */
        if (r >= 0 || r == -ENOENT) {
                bool found = r >= 0;
                r = delete_expired_tokens(c, now);
                if (r >= 0)
                        r = store_join_token_verdict(found, &t, hash, now);
        }
        sqlite_done(c, st);
        return r;
}

int sqlite_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert, char **ret_key) {
        struct store_params q = { 0 };
        store_param_text(&q, cert_pem);
        store_param_text(&q, key_pem);
        store_param_int(&q, store_now_ms());
        /* the first CA stored stays: a second insert does nothing */
        int r = sqlite_write(s,
                             "INSERT INTO cluster_ca (id, cert, key, created_at) VALUES (1, ?1, ?2, ?3) "
                             "ON CONFLICT (id) DO NOTHING",
                             &q, NULL);
        if (r < 0)
                return r;
        struct store_ca_pem ca = { 0 };
        r = sqlite_select_one(s, "SELECT cert, key FROM cluster_ca WHERE id = 1", NULL, store_read_ca_pem, &ca);
        if (r < 0)
                return r;
        *ret_cert = ca.cert;
        *ret_key = ca.key;
        return 0;
}

/* The unfinished operations sql selects (?1 now, ?2 max), oldest first. */
static int list_operations(struct store *s, const char *sql, int64_t now, size_t max, struct store_operation **ret,
                           size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, now);
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s, sql, &q, &store_list_operation, max, ret, ret_n);
}

int sqlite_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                                  size_t *ret_n) {
        return list_operations(s,
                               "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE " UNFINISHED
                               " AND lease_until < ?1 ORDER BY created_at, id LIMIT ?2",
                               now, max, ret, ret_n);
}

int sqlite_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n) {
        /* ?1 is bound and unused: one binder for both lists */
        return list_operations(s,
                               "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE " UNFINISHED
                               " ORDER BY created_at, id LIMIT ?2",
                               0, max, ret, ret_n);
}

