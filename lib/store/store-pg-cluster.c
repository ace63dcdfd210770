/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PostgreSQL backend: what of a cluster (store.h) takes more than one
 * statement or a row lock (the rest is store-sql.c's; store-sqlite-cluster.c
 * is its twin). Several replicas call these at once, so what must happen once
 * is one statement whose row locks decide: a heartbeat reads the row it
 * updates FOR UPDATE, marking nodes lost and taking an operation over
 * re-check their condition on the row a racing statement left.
 */
#include <errno.h>
#include <stdlib.h>

#include "macros.h"
#include "store-pg-internal.h"

#define UNFINISHED "state IN ('pending', 'running')"

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

