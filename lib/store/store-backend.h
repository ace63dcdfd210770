/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What every backend of the store shares (store-backend.c): the list of
 * the ops, a statement's parameters and the rows' insert parameters, a row
 * of a result read by column whichever database made it, the readers that
 * turn a row of each table into its struct (so both backends select the
 * same columns in the same order: the column lists below), reading rows
 * into a list (struct store_list), the constant-time API key match, and
 * the statement runner each backend gives store-sql.c (struct store_sql).
 * Private to lib/store.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/*
 * The ops of struct store_ops (but scheme, open and close), each named
 * once: X(p, op) for every op, p the backend's prefix (sqlite, pg) and
 * p_op its function. STORE_CORE_OPS are defined in store-<p>.c itself (the
 * core tables, static there), STORE_FILE_OPS in the files beside it (what
 * of templates and the cluster takes more than one statement), and
 * STORE_SQL_OPS once for both, as store_sql_<op> (store-sql.c).
 */
#define STORE_CORE_OPS(X, p)                                                                                    \
        X(p, schema_version)

#define STORE_FILE_OPS(X, p)                                                                                    \
        X(p, node_heartbeat) X(p, nodes_mark_lost) X(p, join_token_insert) X(p, join_token_check)               \
        X(p, cluster_ca) X(p, operation_list_expired) X(p, operation_list_unfinished)

#define STORE_SQL_OPS(X, p)                                                                                     \
        X(p, sandbox_insert) X(p, sandbox_get) X(p, sandbox_list) X(p, sandbox_list_tenant)                     \
        X(p, sandbox_update_state) X(p, sandbox_delete) X(p, sandbox_transition) X(p, sandbox_network_get)      \
        X(p, sandbox_network_set) X(p, sandbox_expiry_set) X(p, operation_insert) X(p, operation_get)           \
        X(p, operation_find_by_key) X(p, operation_update) X(p, operation_progress)                             \
        X(p, operation_fail_unfinished) X(p, snapshot_insert) X(p, snapshot_get) X(p, snapshot_list)            \
        X(p, snapshot_delete) X(p, session_insert) X(p, session_get) X(p, session_delete)                       \
        X(p, api_key_lookup) X(p, api_key_list) X(p, api_key_delete) X(p, tenant_get) X(p, tenant_list)         \
        X(p, tenant_delete) X(p, tenant_network_set) X(p, image_insert) X(p, image_get) X(p, image_find)        \
        X(p, image_list) X(p, image_delete) X(p, event_insert) X(p, event_list) X(p, event_last_id)             \
        X(p, event_prune) X(p, api_key_id) X(p, secret_insert) X(p, secret_get) X(p, secret_list)               \
        X(p, secret_delete) X(p, secret_users) X(p, sandbox_secret_insert) X(p, sandbox_secret_list)            \
        X(p, sandbox_secret_copy) X(p, audit_insert) X(p, audit_list) X(p, audit_cursor_get)                    \
        X(p, audit_cursor_set) X(p, template_get) X(p, template_list) X(p, template_set_state)                  \
        X(p, template_delete) X(p, template_node_refs) X(p, node_insert) X(p, node_get) X(p, node_list)         \
        X(p, node_set_draining) X(p, node_delete) X(p, sandbox_list_node) X(p, sandbox_move)                    \
        X(p, sandbox_count_by) X(p, join_token_delete) X(p, cap_key_publish) X(p, cap_key_list)                 \
        X(p, cap_key_delete) X(p, replica_seen) X(p, replica_list) X(p, replica_delete)                         \
        X(p, operation_lease_renew) X(p, operation_take_over) X(p, api_key_insert) X(p, api_key_create)         \
        X(p, tenant_insert) X(p, template_put) X(p, volume_insert) X(p, volume_get) X(p, volume_find)           \
        X(p, volume_list) X(p, volume_delete) X(p, volume_usage) X(p, volume_hold_insert)                       \
        X(p, volume_holds_of_volume) X(p, volume_holds_of_sandbox) X(p, volume_set_node)                        \
        X(p, webhook_insert) X(p, webhook_get) X(p, webhook_list) X(p, webhook_delete) X(p, webhook_advance)    \
        X(p, webhook_delivery_insert) X(p, webhook_delivery_list)

/* A table's initializer of op: .op = p_op */
#define STORE_OP_INIT(p, op) .op = p##_##op,
/* Declares p_op with the type of struct store_ops' member op, so a
 * definition that does not match the interface does not compile. */
#define STORE_OP_DECLARE(p, op) extern __typeof__(*((struct store_ops *) 0)->op) p##_##op;
/* Every op of backend p, for its struct store_ops table. */
#define STORE_BACKEND_OPS(p)                                                                                    \
        STORE_CORE_OPS(STORE_OP_INIT, p) STORE_FILE_OPS(STORE_OP_INIT, p) STORE_SQL_OPS(STORE_OP_INIT, store_sql)
STORE_SQL_OPS(STORE_OP_DECLARE, store_sql)

/* A statement's parameters, the first bound to ?1 (SQLite) or $1
 * (PostgreSQL), in the order they are added; each backend binds them its
 * way (integers as 64-bit, booleans as 0 and 1 or PostgreSQL's boolean,
 * blobs as bytes). */
#define STORE_PARAMS_MAX 20
enum store_param_kind {
        STORE_PARAM_TEXT,
        STORE_PARAM_INT,
        STORE_PARAM_BOOL,
        STORE_PARAM_BLOB,
};
struct store_param {
        enum store_param_kind kind;
        bool null;      /* SQL NULL */
        const void *v;  /* text (NUL-terminated) or blob */
        size_t len;     /* a blob's */
        int64_t i;      /* an integer's or boolean's */
};
struct store_params {
        int n;
        struct store_param v[STORE_PARAMS_MAX];
};
void store_param_text(struct store_params *q, const char *v); /* NULL: SQL NULL */
void store_param_int(struct store_params *q, int64_t v);
void store_param_int_or_null(struct store_params *q, int64_t v); /* 0: SQL NULL */
void store_param_null_int(struct store_params *q);
void store_param_bool(struct store_params *q, bool v);
void store_param_blob(struct store_params *q, const void *v, size_t n); /* NULL: SQL NULL */

/* The parameters of a row's insert, in the order of the statements of both
 * backends (a created_at, updated_at, ts_ms or heartbeat_at of 0: now). */
void store_params_sandbox(struct store_params *q, const struct store_sandbox *sb);
void store_params_operation(struct store_params *q, const struct store_operation *op);
void store_params_snapshot(struct store_params *q, const struct store_snapshot *snap);
void store_params_session(struct store_params *q, const struct store_session *ses);
/* ... then the limit max on the number of tenants */
void store_params_tenant(struct store_params *q, const struct store_tenant *t, size_t max);
void store_params_image(struct store_params *q, const struct store_image *img);
void store_params_volume(struct store_params *q, const struct store_volume *v);
/* ... then the limit max on the owner's templates ("" owner: NULL) */
void store_params_template(struct store_params *q, const struct store_template *t, size_t max);
void store_params_secret(struct store_params *q, const struct store_secret *sec);
void store_params_audit_event(struct store_params *q, const struct store_audit_event *ev, const char *source,
                              const char *boot_id, int64_t seq);
void store_params_event(struct store_params *q, const struct store_event *ev);
/* a webhook's id, tenant_id, url, events, secret, created_at, then the
 * limit max on the owner's webhooks */
void store_params_webhook(struct store_params *q, const struct store_webhook *w, size_t max);
/* a delivery's, in STORE_WEBHOOK_DELIVERY_COLUMNS' order but its id */
void store_params_webhook_delivery(struct store_params *q, const struct store_webhook_delivery *d);
void store_params_node(struct store_params *q, const struct store_node *n);
/* a heartbeat's: name, address, boot_id, info, heartbeat_at */
void store_params_node_beat(struct store_params *q, const struct store_node *n);
void store_params_cap_key(struct store_params *q, const struct store_cap_key *k);
void store_params_replica(struct store_params *q, const struct store_replica *p);

/* One row of a result: ops read its columns (0-based). */
struct store_row;
struct store_row_ops {
        int (*ncols)(const struct store_row *r);
        bool (*is_null)(const struct store_row *r, int col);
        /* NULL for an SQL NULL; valid until the cursor moves */
        const char *(*text)(const struct store_row *r, int col);
        /* 0 for an SQL NULL; booleans read as 0 or 1 */
        int64_t (*int64)(const struct store_row *r, int col);
        /* NULL for an SQL NULL; valid until the cursor moves */
        const void *(*blob)(const struct store_row *r, int col, size_t *ret_len);
};

/* A cursor over a result: next() moves onto the following row (1), finds
 * none left (0) or fails (negative errno). */
struct store_row {
        const struct store_row_ops *ops;
        int (*next)(struct store_row *r);
};

static inline const char *store_row_text(const struct store_row *r, int col) {
        return r->ops->text(r, col);
}
static inline int64_t store_row_int64(const struct store_row *r, int col) {
        return r->ops->int64(r, col);
}
/* Copies a text column (an SQL NULL gives NULL). */
int store_row_strdup(const struct store_row *r, int col, char **ret);

/* Unix time in milliseconds, the unit of every *_at column (computed here,
 * not by the database, so that both backends write the same numbers). */
int64_t store_now_ms(void);

/* The columns each reader expects, in its order. */
#define STORE_SANDBOX_COLUMNS                                                                           \
        "id, template, state, error, metadata, env_keys, created_at, updated_at, desired_state, "     \
        "snapshot_policy, idle_timeout_s, tenant_id, expires_at, expiry_s, on_expiry, node, memory_mib, vcpus"
#define STORE_SNAPSHOT_COLUMNS "id, sandbox_id, kind, size, created_at, pinned"
#define STORE_OPERATION_COLUMNS                                                                         \
        "id, sandbox_id, verb, state, error, result, idempotency_key, created_at, finished_at, "       \
        "request_hash, stage, progress, tenant_id, owner, lease_until, detail"
#define STORE_SESSION_COLUMNS "id, sandbox_id, cmd, pty, token_hash, created_at"
#define STORE_API_KEY_COLUMNS "id, tenant_id, label, created_at"
#define STORE_TENANT_COLUMNS "id, name, created_at, network"
/* a secret's columns; "SECRET_COLUMNS, sealed" reads its value too */
#define STORE_SECRET_COLUMNS "tenant_id, name, sandbox_id, spec, expires_at, created_at, created_by"
#define STORE_IMAGE_COLUMNS "id, tenant_id, name, sandbox_id, template, size, created_at, kind, snapshot_id"
/* tenant_id and node NULL in the database are "" in the struct */
#define STORE_TEMPLATE_COLUMNS                                                                          \
        "tenant_id, name, node_name, build_id, state, error, node, spec, memory_mib, vcpus, created_at, "  \
        "updated_at"
#define STORE_AUDIT_COLUMNS                                                                             \
        "id, ts_ms, tenant_id, actor, sandbox_id, secret, host, port, method, path, action, reason"
#define STORE_ATTACHMENT_COLUMNS "sandbox_id, name, placeholder, env_name"
#define STORE_EVENT_COLUMNS "id, ts_ms, tenant_id, sandbox_id, type, state, previous, detail"
#define STORE_NODE_COLUMNS "name, address, boot_id, info, draining, lost_at, joined_at, heartbeat_at"
#define STORE_CAP_KEY_COLUMNS "kid, public_key, replica, created_at"
#define STORE_REPLICA_COLUMNS "id, cluster_address, api_address, started_at, seen_at"
/* volumes and their holds (read by store-sql.c's own readers) */
#define STORE_VOLUME_COLUMNS "id, tenant_id, name, size, node, source_id, created_at"
#define STORE_VOLUME_HOLD_COLUMNS "sandbox_id, volume_id, slot, path, read_only"
#define STORE_WEBHOOK_COLUMNS                                                                           \
        "id, tenant_id, url, events, secret, created_at, cursor, attempts, next_at, last_error, delivered, failed"
#define STORE_WEBHOOK_DELIVERY_COLUMNS                                                                  \
        "id, webhook_id, event_id, event_type, sandbox_id, ts_ms, attempt, status, error, duration_ms"

/* Readers: the current row into *ret (the struct named), which they fill
 * only on success. -EBADMSG for a row that breaks the schema's promises. */
int store_read_sandbox(const struct store_row *r, void *ret);
int store_read_snapshot(const struct store_row *r, void *ret);
int store_read_operation(const struct store_row *r, void *ret);
int store_read_session(const struct store_row *r, void *ret);
int store_read_api_key(const struct store_row *r, void *ret);
int store_read_tenant(const struct store_row *r, void *ret);
int store_read_secret(const struct store_row *r, void *ret);
int store_read_image(const struct store_row *r, void *ret);
int store_read_volume(const struct store_row *r, void *ret);
int store_read_volume_hold(const struct store_row *r, void *ret);
int store_read_template(const struct store_row *r, void *ret);
int store_read_audit_event(const struct store_row *r, void *ret);
int store_read_event(const struct store_row *r, void *ret);
int store_read_attachment(const struct store_row *r, void *ret);
int store_read_webhook(const struct store_row *r, void *ret);
int store_read_webhook_delivery(const struct store_row *r, void *ret);
/* where reading a gateway's audit events stopped (boot_id, seq) */
struct store_audit_cursor {
        char *boot_id;
        int64_t seq;
};
int store_read_audit_cursor(const struct store_row *r, void *ret);
int store_read_node(const struct store_row *r, void *ret);
int store_read_cap_key(const struct store_row *r, void *ret);
int store_read_replica(const struct store_row *r, void *ret);
/* what a heartbeat found: "lost_at IS NOT NULL, draining" */
struct store_node_beat {
        bool was_lost, draining;
};
int store_read_node_beat(const struct store_row *r, void *ret);
/* a group of store_sandbox_count_by_node(): "node, COUNT(*)" */
struct store_node_count {
        char *node; /* NULL: the local node */
        int64_t count;
};
int store_read_node_count(const struct store_row *r, void *ret);
/* Turns n groups into store_sandbox_count_by_node()'s parallel arrays and
 * their length, taking the names; frees a (on failure too). */
int store_node_counts_split(struct store_node_count *a, size_t n, char ***ret_names, int64_t **ret_counts,
                            size_t *ret_n);
/* the cluster's CA: "cert, key" */
struct store_ca_pem {
        char *cert, *key;
};
int store_read_ca_pem(const struct store_row *r, void *ret);
/* a join token's stored secret hash and expiry: "hash, expires_at" */
struct store_join_token {
        uint8_t hash[STORE_HASH_SIZE];
        int64_t expires_at;
};
int store_read_join_token(const struct store_row *r, void *ret);
/* store_join_token_check()'s answer for the row read (found: there was
 * one): the same -ENOENT for an unknown id and a wrong secret, the hash
 * compared in constant time. */
int store_join_token_verdict(bool found, const struct store_join_token *t, const uint8_t hash[STORE_HASH_SIZE],
                             int64_t now);
/* one integer column, NULL reads as 0 (int64_t *) */
int store_read_int64(const struct store_row *r, void *ret);
/* one text column, NULL allowed (char **) */
int store_read_text(const struct store_row *r, void *ret);
/* one text column, never NULL (char **) */
int store_read_string(const struct store_row *r, void *ret);

/* Reads the first row through read_row into ret; -ENOENT when there is none. */
int store_rows_one(struct store_row *r, int (*read_row)(const struct store_row *, void *), void *ret);

/* What a list of one kind of row is: the size of an element, the reader
 * that fills one, and the destructor of an array of them (what a list call
 * frees when it fails half-way). */
struct store_list {
        size_t elem;
        int (*read_row)(const struct store_row *r, void *ret);
        void (*array_free)(void *a, size_t n);
};
extern const struct store_list store_list_sandbox, store_list_snapshot, store_list_operation, store_list_api_key,
        store_list_tenant, store_list_secret, store_list_image, store_list_template, store_list_audit_event,
        store_list_event, store_list_attachment, store_list_node, store_list_cap_key, store_list_replica,
        store_list_string, store_list_node_count, store_list_node_beat, store_list_volume, store_list_volume_hold,
        store_list_webhook, store_list_webhook_delivery;

/* Reads at most max rows through list into a new array: *ret (a pointer to
 * the element type's array pointer) and *ret_n on success; on failure what
 * was read is freed and *ret, *ret_n are left untouched. */
int store_rows_list(struct store_row *r, const struct store_list *list, size_t max, void *ret, size_t *ret_n);

/* How a backend runs one statement as a call of its own (the lock or a
 * pooled connection taken for it), the same for both: a SELECT's first row
 * through read_row (select_one; -ENOENT when there is none) or at most max
 * rows through list (select_all, store_rows_list()), or a write and the
 * rows it touched (write; write_one: -ENOENT when it touched none). pg:
 * which of a statement's two texts the database takes. */
/* What a limited write counts: API keys, templates or webhooks of the
 * scope (a tenant id; NULL or "": the admin's), or tenants. */
enum store_limit {
        STORE_LIMIT_API_KEYS,
        STORE_LIMIT_TEMPLATES,
        STORE_LIMIT_TENANTS,
        STORE_LIMIT_WEBHOOKS,
};
struct store_sql {
        bool pg;
        int (*select_one)(struct store *s, const char *sql, const struct store_params *q,
                          int (*read_row)(const struct store_row *, void *), void *ret);
        int (*select_all)(struct store *s, const char *sql, const struct store_params *q,
                          const struct store_list *list, size_t max, void *ret, size_t *ret_n);
        int (*write)(struct store *s, const char *sql, const struct store_params *q, uint64_t *ret_changed);
        int (*write_one)(struct store *s, const char *sql, const struct store_params *q);
        /* a write that counts rows of one scope against a limit: PostgreSQL
         * runs it in a transaction holding the scope's advisory lock, so a
         * racing one (in any process) waits, then counts this one; SQLite's
         * one statement under its one writer needs nothing more */
        int (*write_limited)(struct store *s, const char *sql, const struct store_params *q, enum store_limit limit,
                             const char *scope, uint64_t *ret_changed);
        /* a SELECT of (hash, tenant_id) rows: store_rows_match_key() */
        int (*select_key_match)(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                                char **ret_tenant_id);
};
extern const struct store_sql store_sqlite_sql, store_pg_sql;

/* The head of a backend's handle: the store, and the statement runner
 * store-sql.c runs the backend's ops through. */
struct store_backend {
        struct store store; /* must be first */
        const struct store_sql *sql;
};
static inline const struct store_sql *store_sql(const struct store *s) {
        return ((const struct store_backend *) s)->sql;
}

/* The admin scope is tenant_id NULL; "COALESCE(tenant_id, '') = ?n" (SQLite)
 * or "= $n" (PostgreSQL) with "" for it matches either. */
#define SCOPE_IS(n) "COALESCE(tenant_id, '') = ?" #n
#define PG_SCOPE_IS(n) "COALESCE(tenant_id, '') = $" #n

/* Compares hash with the hash in column 0 of every row (api_keys: hash,
 * tenant_id), in constant time and without stopping at a match, so timing
 * tells nothing about near misses: 0 and *ret_tenant_id (column 1, NULL
 * for the admin scope) when one matched, -EACCES when none did. */
int store_rows_match_key(struct store_row *r, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id);
