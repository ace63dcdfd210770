/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend: a cluster (store.h): nodes, join tokens, the
 * cluster's CA, capability public keys, replicas, and operation leases
 * (store-sqlite-cluster.c's twin: the same rows, read by the same
 * readers). Several replicas call these at once, so what must happen once
 * is one statement whose row locks decide: a heartbeat reads the row it
 * updates FOR UPDATE, marking nodes lost and taking an operation over
 * re-check their condition on the row a racing statement left.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-pg-internal.h"

#define UNFINISHED "state IN ('pending', 'running')"

/* A statement whose only parameter is one text; -ENOENT when it touched no row. */
static int write_by(struct store *s, const char *sql, const char *arg) {
        struct store_params q = { 0 };
        store_param_text(&q, arg);
        return pg_write_one(s, sql, &q);
}

int pg_node_insert(struct store *s, const struct store_node *n) {
        struct store_params q = { 0 };
        store_params_node(&q, n);
        return pg_write(s, "INSERT INTO nodes (" STORE_NODE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", &q,
                        NULL);
}

int pg_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining) {
        struct store_params q = { 0 };
        store_params_node_beat(&q, n);
        /* the old row is read FOR UPDATE: a racing beat waits for this one
         * to commit, then reads lost_at cleared; a NULL address, boot_id or
         * info keeps what was stored */
        struct store_node_beat *b = NULL;
        size_t nb = 0;
        int r = pg_write_rows(s,
                              "WITH old AS (SELECT name, lost_at FROM nodes WHERE name = $1 FOR UPDATE) "
                              "UPDATE nodes SET address = COALESCE($2, nodes.address), "
                              "boot_id = COALESCE($3, nodes.boot_id), info = COALESCE($4, nodes.info), "
                              "heartbeat_at = $5, lost_at = NULL FROM old WHERE nodes.name = old.name "
                              "RETURNING old.lost_at IS NOT NULL, nodes.draining",
                              &q, &store_list_node_beat, 1, &b, &nb);
        if (r >= 0 && nb == 0)
                r = -ENOENT;
        if (r >= 0) {
                *ret_was_lost = b->was_lost;
                *ret_draining = b->draining;
        }
        free(b);
        return r;
}

int pg_node_get(struct store *s, const char *name, struct store_node *ret) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        return pg_select_one(s, "SELECT " STORE_NODE_COLUMNS " FROM nodes WHERE name = $1", &q, store_read_node, ret);
}

int pg_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s, "SELECT " STORE_NODE_COLUMNS " FROM nodes ORDER BY name COLLATE \"C\" LIMIT $1", &q,
                             &store_list_node, max, ret, ret_n);
}

int pg_node_set_draining(struct store *s, const char *name, bool draining) {
        struct store_params q = { 0 };
        store_param_text(&q, name);
        store_param_bool(&q, draining);
        return pg_write_one(s, "UPDATE nodes SET draining = $2 WHERE name = $1", &q);
}

int pg_node_delete(struct store *s, const char *name) {
        /* a sandbox placed on it meanwhile (not seen by the NOT EXISTS)
         * fails the delete on its foreign key: -ENOENT, read as busy below */
        int r = write_by(s,
                         "DELETE FROM nodes WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE node = $1)",
                         name);
        if (r != -ENOENT)
                return r;
        struct store_node n = { 0 };
        r = pg_node_get(s, name, &n);
        store_node_release(&n);
        return r < 0 ? r : -EBUSY;
}

int pg_nodes_mark_lost(struct store *s, int64_t cutoff, size_t max, char ***ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, cutoff);
        store_param_int(&q, (int64_t) max);
        store_param_int(&q, store_now_ms());
        /* a replica doing the same at once waits on these rows' locks, then
         * re-checks lost_at IS NULL on what this one committed: one of them
         * gets each name. A node that beat meanwhile fails heartbeat_at. */
        return pg_write_rows(s,
                             "WITH marked AS (UPDATE nodes SET lost_at = $3 "
                             "WHERE lost_at IS NULL AND heartbeat_at < $1 AND name IN (SELECT name FROM nodes "
                             "WHERE lost_at IS NULL AND heartbeat_at < $1 ORDER BY name COLLATE \"C\" LIMIT $2) "
                             "RETURNING name) "
                             "SELECT name FROM marked ORDER BY name COLLATE \"C\"",
                             &q, &store_list_string, max, ret, ret_n);
}

int pg_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, node);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                             "WHERE ($1::text IS NULL AND node IS NULL) OR node = $1 "
                             "ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                             &q, &store_list_sandbox, max, ret, ret_n);
}

int pg_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, state);
        store_param_text(&q, from);
        store_param_text(&q, to);
        store_param_int(&q, store_now_ms());
        uint64_t changed = 0;
        /* -ENOENT from the write: `to` is no node (its foreign key) */
        int r = pg_write(s,
                         "UPDATE sandboxes SET node = $4, updated_at = $5 "
                         "WHERE id = $1 AND state = $2 AND node IS NOT DISTINCT FROM $3",
                         &q, &changed);
        return r < 0 ? r : changed == 0 ? -ESTALE : 0;
}

int pg_sandbox_count_by(struct store *s, enum store_count_by by, size_t max, char ***ret_names, int64_t **ret_counts,
                        size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        struct store_node_count *a = NULL;
        size_t n = 0;
        /* NULL (the local node) first, as SQLite sorts it */
        int r = pg_select_all(s,
                              by == STORE_COUNT_BY_STATE ? "SELECT state, COUNT(*) FROM sandboxes GROUP BY state "
                                                           "ORDER BY state COLLATE \"C\" LIMIT $1"
                                                         : "SELECT node, COUNT(*) FROM sandboxes GROUP BY node "
                                                           "ORDER BY node COLLATE \"C\" NULLS FIRST LIMIT $1",
                              &q, &store_list_node_count, max, &a, &n);
        return r < 0 ? r : store_node_counts_split(a, n, ret_names, ret_counts, ret_n);
}

/* A join token call: the token's row (if any) read, the expired tokens
 * deleted, on one connection. */
struct token_call {
        const char *id;
        const uint8_t *hash;
        int64_t now, expires_at;
        bool insert; /* else check */
};

static int delete_expired_tokens(struct pg_call *c, int64_t now) {
        struct store_params q = { 0 };
        store_param_int(&q, now);
        return pg_exec(c, true, "DELETE FROM join_tokens WHERE expires_at <= $1", &q, NULL, NULL);
}

static int token_run(struct pg_call *c, void *ctx) {
        struct token_call *t = ctx;
        struct store_params q = { 0 };
        store_param_text(&q, t->id);
        if (t->insert) {
                store_param_blob(&q, t->hash, STORE_HASH_SIZE);
                store_param_int(&q, t->now);
                store_param_int(&q, t->expires_at);
                int r = delete_expired_tokens(c, t->now);
                if (r < 0)
                        return r;
                return pg_exec(c, true, "INSERT INTO join_tokens (id, hash, created_at, expires_at) VALUES "
                                        "($1, $2, $3, $4)",
                               &q, NULL, NULL);
        }
        struct store_join_token row = { 0 };
        int r = pg_call_select_one(c, "SELECT hash, expires_at FROM join_tokens WHERE id = $1", &q,
                                   store_read_join_token, &row);
        if (r < 0 && r != -ENOENT)
                return r;
        bool found = r >= 0;
        r = delete_expired_tokens(c, t->now);
        if (r < 0)
                return r;
        return store_join_token_verdict(found, &row, t->hash, t->now);
}

int pg_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t expires_at) {
        struct token_call t = { .id = id, .hash = hash, .now = store_now_ms(), .expires_at = expires_at,
                                .insert = true };
        return pg_run(to_pg(s), token_run, &t);
}

int pg_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now) {
        struct token_call t = { .id = id, .hash = hash, .now = now };
        return pg_run(to_pg(s), token_run, &t);
}

int pg_join_token_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM join_tokens WHERE id = $1", id);
}

struct ca_call {
        const char *cert, *key;
        struct store_ca_pem got;
};

static int ca_run(struct pg_call *c, void *ctx) {
        struct ca_call *a = ctx;
        struct store_params q = { 0 };
        store_param_text(&q, a->cert);
        store_param_text(&q, a->key);
        store_param_int(&q, store_now_ms());
        /* a racing insert waits on the first one's key and does nothing;
         * the SELECT, a statement of its own, sees whichever committed */
        int r = pg_exec(c, true,
                        "INSERT INTO cluster_ca (id, cert, key, created_at) VALUES (1, $1, $2, $3) "
                        "ON CONFLICT (id) DO NOTHING",
                        &q, NULL, NULL);
        if (r < 0)
                return r;
        return pg_call_select_one(c, "SELECT cert, key FROM cluster_ca WHERE id = 1", NULL, store_read_ca_pem,
                                  &a->got);
}

int pg_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert, char **ret_key) {
        struct ca_call a = { .cert = cert_pem, .key = key_pem };
        int r = pg_run(to_pg(s), ca_run, &a);
        if (r < 0)
                return r;
        *ret_cert = a.got.cert;
        *ret_key = a.got.key;
        return 0;
}

int pg_cap_key_publish(struct store *s, const struct store_cap_key *k) {
        struct store_params q = { 0 };
        store_params_cap_key(&q, k);
        return pg_write(s,
                        "INSERT INTO cap_keys (" STORE_CAP_KEY_COLUMNS ") VALUES ($1, $2, $3, $4) "
                        "ON CONFLICT (kid) DO UPDATE SET public_key = excluded.public_key, "
                        "replica = excluded.replica, created_at = excluded.created_at",
                        &q, NULL);
}

int pg_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_CAP_KEY_COLUMNS " FROM cap_keys "
                             "ORDER BY created_at, kid COLLATE \"C\" LIMIT $1",
                             &q, &store_list_cap_key, max, ret, ret_n);
}

int pg_cap_key_delete(struct store *s, const char *kid) {
        return write_by(s, "DELETE FROM cap_keys WHERE kid = $1", kid);
}

int pg_replica_seen(struct store *s, const struct store_replica *p) {
        struct store_params q = { 0 };
        store_params_replica(&q, p);
        /* started_at stays what the first row said */
        return pg_write(s,
                        "INSERT INTO replicas (" STORE_REPLICA_COLUMNS ") VALUES ($1, $2, $3, $4, $5) "
                        "ON CONFLICT (id) DO UPDATE SET cluster_address = excluded.cluster_address, "
                        "api_address = excluded.api_address, seen_at = excluded.seen_at",
                        &q, NULL);
}

int pg_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, since);
        store_param_int(&q, (int64_t) max);
        return pg_select_all(s,
                             "SELECT " STORE_REPLICA_COLUMNS " FROM replicas WHERE seen_at >= $1 "
                             "ORDER BY id COLLATE \"C\" LIMIT $2",
                             &q, &store_list_replica, max, ret, ret_n);
}

int pg_replica_delete(struct store *s, const char *id) {
        return write_by(s, "DELETE FROM replicas WHERE id = $1", id);
}

int pg_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n) {
        struct store_params q = { 0 };
        store_param_text(&q, owner);
        store_param_int(&q, until);
        return pg_write(s, "UPDATE operations SET lease_until = $2 WHERE owner = $1 AND " UNFINISHED, &q, ret_n);
}

/* The operations sql selects, with its parameters q, oldest first. */
static int list_operations(struct store *s, const char *sql, const struct store_params *q, size_t max,
                           struct store_operation **ret, size_t *ret_n) {
        return pg_select_all(s, sql, q, &store_list_operation, max, ret, ret_n);
}

int pg_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                              size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, now);
        store_param_int(&q, (int64_t) max);
        return list_operations(s,
                               "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE " UNFINISHED
                               " AND lease_until < $1 ORDER BY created_at, id COLLATE \"C\" LIMIT $2",
                               &q, max, ret, ret_n);
}

int pg_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n) {
        struct store_params q = { 0 };
        store_param_int(&q, (int64_t) max);
        return list_operations(s,
                               "SELECT " STORE_OPERATION_COLUMNS " FROM operations WHERE " UNFINISHED
                               " ORDER BY created_at, id COLLATE \"C\" LIMIT $1",
                               &q, max, ret, ret_n);
}

int pg_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until) {
        struct store_params q = { 0 };
        store_param_text(&q, id);
        store_param_text(&q, owner);
        store_param_int(&q, now);
        store_param_int(&q, until);
        /* one statement: a second taker waits on the row, then re-checks
         * the lease the first one set and finds it running */
        int r = pg_write_one(s,
                             "UPDATE operations SET owner = $2, lease_until = $4 "
                             "WHERE id = $1 AND " UNFINISHED " AND lease_until < $3",
                             &q);
        return r == -ENOENT ? -ESTALE : r;
}
