/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SQLite backend: a cluster (store.h): nodes, join tokens, the cluster's
 * CA, capability public keys, replicas, and operation leases. Each call
 * prepares its own statements, as the secrets do. What must be atomic
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

/* Runs a write of one text parameter; -ENOENT when it touched nothing. */
static int write_by(struct store *s, const char *sql, const char *arg) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return sqlite_write_one(s, sql, &q);
}

int sqlite_node_insert(struct store *s, const struct store_node *n) {
        struct store_params q = { 0 };
        store_params_node(&q, n);
        return sqlite_write(s, "INSERT INTO nodes (" STORE_NODE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                            &q, NULL);
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

int sqlite_node_get(struct store *s, const char *name, struct store_node *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        return sqlite_select_one(s, "SELECT " STORE_NODE_COLUMNS " FROM nodes WHERE name = ?1", &q, store_read_node,
                                 ret);
}

int sqlite_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s, "SELECT " STORE_NODE_COLUMNS " FROM nodes ORDER BY name LIMIT ?1", &q,
                                 &store_list_node, max, ret, ret_n);
}

int sqlite_node_set_draining(struct store *s, const char *name, bool draining) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_bool(&q, draining);
        return sqlite_write_one(s, "UPDATE nodes SET draining = ?2 WHERE name = ?1", &q);
}

int sqlite_node_delete(struct store *s, const char *name) {
        /* the foreign key of sandboxes.node keeps a node they name, whatever
         * the race (its -ENOENT is read as "still named" below) */
        int r = write_by(s,
                         "DELETE FROM nodes WHERE name = ?1 AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE node = ?1)",
                         name);
        if (r != -ENOENT)
                return r;
        struct store_node n = { 0 };
        r = sqlite_node_get(s, name, &n);
        store_node_release(&n);
        return r < 0 ? r : -EBUSY;
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

int sqlite_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                             size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, node);
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s,
                                 "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE node IS ?1 "
                                 "ORDER BY created_at, id LIMIT ?2",
                                 &q, &store_list_sandbox, max, ret, ret_n);
}

int sqlite_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_int(&q, store_now_ms());
        /* -ENOENT from the write: `to` is no node (its foreign key) */
        uint64_t changed = 0;
        int r = sqlite_write(s,
                             "UPDATE sandboxes SET node = ?4, updated_at = ?5 "
                             "WHERE id = ?1 AND state = ?2 AND node IS ?3",
                             &q, &changed);
        return r < 0 ? r : changed == 0 ? -ESTALE : 0;
}

int sqlite_sandbox_count_by(struct store *s, enum store_count_by by, size_t max, char ***ret_names,
                            int64_t **ret_counts, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        struct store_node_count *a = NULL;
        size_t n = 0;
        /* NULL (the local node) sorts first */
        int r = sqlite_select_all(
                s,
                by == STORE_COUNT_BY_STATE
                        ? "SELECT state, COUNT(*) FROM sandboxes GROUP BY state ORDER BY state LIMIT ?1"
                        : "SELECT node, COUNT(*) FROM sandboxes GROUP BY node ORDER BY node LIMIT ?1",
                &q, &store_list_node_count, max, &a, &n);
        return r < 0 ? r : store_node_counts_split(a, n, ret_names, ret_counts, ret_n);
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

int sqlite_join_token_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM join_tokens WHERE id = ?1", id);
}

int sqlite_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert, char **ret_key) {
        struct store_sqlite_conn *c = to_conn(s);
        sqlite3_stmt *st;
        /* the first CA stored stays: a second insert does nothing */
        int r = sqlite_prep(c,
                            "INSERT INTO cluster_ca (id, cert, key, created_at) VALUES (1, ?1, ?2, ?3) "
                            "ON CONFLICT (id) DO NOTHING",
                            &st);
        if (r < 0)
                return r;
        struct store_params q = { 0 };
        store_param_text(&q, cert_pem);
        store_param_text(&q, key_pem);
        store_param_int(&q, store_now_ms());
        sqlite_bind(st, &q);
        r = sqlite_step_write(c, st, false);
        sqlite3_finalize(st);
        struct store_ca_pem ca = { 0 };
        if (r >= 0)
                r = prepare(c, "SELECT cert, key FROM cluster_ca WHERE id = 1", &st);
        if (r >= 0) {
                r = sqlite_one(c, st, store_read_ca_pem, &ca);
                sqlite3_finalize(st);
        }
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;
        *ret_cert = ca.cert;
        *ret_key = ca.key;
        return 0;
}

int sqlite_cap_key_publish(struct store *s, const struct store_cap_key *k) {
        struct store_params q = { 0 };
        store_params_cap_key(&q, k);
        return sqlite_write(s,
                            "INSERT INTO cap_keys (" STORE_CAP_KEY_COLUMNS ") VALUES (?1, ?2, ?3, ?4) "
                            "ON CONFLICT (kid) DO UPDATE SET public_key = excluded.public_key, "
                            "replica = excluded.replica, created_at = excluded.created_at",
                            &q, NULL);
}

int sqlite_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s, "SELECT " STORE_CAP_KEY_COLUMNS " FROM cap_keys ORDER BY created_at, kid LIMIT ?1",
                                 &q, &store_list_cap_key, max, ret, ret_n);
}

int sqlite_cap_key_delete(struct store *s, const char *kid) {
        return write_by(s, "DELETE FROM cap_keys WHERE kid = ?1", kid);
}

int sqlite_replica_seen(struct store *s, const struct store_replica *p) {
        struct store_params q = { 0 };
        store_params_replica(&q, p);
        /* started_at stays what the first row said */
        return sqlite_write(s,
                            "INSERT INTO replicas (" STORE_REPLICA_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5) "
                            "ON CONFLICT (id) DO UPDATE SET cluster_address = excluded.cluster_address, "
                            "api_address = excluded.api_address, seen_at = excluded.seen_at",
                            &q, NULL);
}

int sqlite_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, since);
        store_param_int(&q, (int64_t) max);
        return sqlite_select_all(s,
                                 "SELECT " STORE_REPLICA_COLUMNS " FROM replicas WHERE seen_at >= ?1 ORDER BY id LIMIT ?2",
                                 &q, &store_list_replica, max, ret, ret_n);
}

int sqlite_replica_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM replicas WHERE id = ?1", id);
}

int sqlite_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, owner);
        store_param_int(&q, until);
        return sqlite_write(s, "UPDATE operations SET lease_until = ?2 WHERE owner = ?1 AND " UNFINISHED, &q, ret_n);
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

int sqlite_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, owner);
        store_param_int(&q, now);
        store_param_int(&q, until);
        /* compare-and-set on the lease: of two takers the second finds it renewed */
        int r = sqlite_write_one(s,
                                 "UPDATE operations SET owner = ?2, lease_until = ?4 "
                                 "WHERE id = ?1 AND " UNFINISHED " AND lease_until < ?3",
                                 &q);
        return r == -ENOENT ? -ESTALE : r;
}
