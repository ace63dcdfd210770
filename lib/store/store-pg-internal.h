/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the PostgreSQL backend's files share (store-pg-helpers.c: the
 * connection pool, statements, transactions, the error mapping and a
 * result's rows as a store_row cursor; store-pg.c: opening, migrations and
 * the core tables; store-pg-secrets.c: credentials and the audit log;
 * store-pg-images.c: images; store-pg-templates.c: templates built from
 * specs; store-pg-cluster.c: nodes, join tokens, the CA, capability keys,
 * replicas and operation leases). Private to
 * lib/store.
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
#define PG_PARAMS_MAX 20 /* parameters of one statement */

struct store_pg {
        struct store base; /* must be first */
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

/* A statement's parameters, $1 first, in the order they are added. */
struct pg_params {
        int n;
        Oid types[PG_PARAMS_MAX];
        const char *values[PG_PARAMS_MAX];
        int lengths[PG_PARAMS_MAX];
        int formats[PG_PARAMS_MAX];
        char num[PG_PARAMS_MAX][24]; /* the text of integer parameters */
};
void pg_add_text(struct pg_params *q, const char *v); /* NULL: SQL NULL */
void pg_add_int(struct pg_params *q, int64_t v);
void pg_add_int_or_null(struct pg_params *q, int64_t v); /* 0: SQL NULL */
void pg_add_null_int(struct pg_params *q);
void pg_add_bool(struct pg_params *q, bool v);
void pg_add_bytea(struct pg_params *q, const void *v, size_t n);

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
int pg_exec(struct pg_call *c, bool write, const char *sql, const struct pg_params *q, PGresult **ret_res,
            uint64_t *ret_changed);
/* Runs SQL text without parameters (the migrations: several statements). */
int pg_exec_script(struct pg_call *c, const char *sql);
/* Runs a SELECT on the call's connection: its first row through read_row
 * into ret, or -ENOENT. */
int pg_call_select_one(struct pg_call *c, const char *sql, const struct pg_params *q,
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

/* One statement as a call of its own, for the calls that are one:
 * a SELECT's rows (pg_select_one: the first through read_row, or -ENOENT;
 * pg_select_all: at most max through list into a new array *ret of *ret_n
 * elements, store_rows_list()), or a write's count of touched rows
 * (pg_write; pg_write_one: -ENOENT when it touched none). */
int pg_select_one(struct store *s, const char *sql, const struct pg_params *q,
                  int (*read_row)(const struct store_row *, void *), void *ret);
int pg_select_all(struct store *s, const char *sql, const struct pg_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n);
/* A SELECT of (hash, tenant_id) rows as a call of its own, every hash
 * compared with hash (store_rows_match_key()). */
int pg_select_key_match(struct store *s, const char *sql, const uint8_t hash[STORE_HASH_SIZE],
                        char **ret_tenant_id);
int pg_write(struct store *s, const char *sql, const struct pg_params *q, uint64_t *ret_changed);
/* A write whose RETURNING rows are wanted, as a call of its own: at most
 * max of them through read_row, as pg_select_all() collects them. */
int pg_write_rows(struct store *s, const char *sql, const struct pg_params *q, const struct store_list *list,
                  size_t max, void *ret, size_t *ret_n);
int pg_write_one(struct store *s, const char *sql, const struct pg_params *q);
/* A write in a transaction of its own that first takes the advisory lock
 * key: what it reads (a count under a limit) cannot change under it before
 * it commits, in this process or any other. */
int pg_write_locked(struct store *s, int64_t key, const char *sql, const struct pg_params *q, uint64_t *ret_changed);

/* The admin scope is tenant_id NULL; "COALESCE(tenant_id, '') = $n" with
 * "" for it matches either. */
#define PG_SCOPE_IS(n) "COALESCE(tenant_id, '') = $" #n

int pg_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id);
int pg_secret_insert(struct store *s, const struct store_secret *sec);
int pg_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret);
int pg_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n);
int pg_secret_delete(struct store *s, const char *tenant_id, const char *name);
int pg_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                    size_t *ret_n);
int pg_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a);
int pg_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                           size_t *ret_n);
int pg_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id);
int pg_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                    int64_t seq);
int pg_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                  size_t max, struct store_audit_event **ret, size_t *ret_n);
int pg_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq);
int pg_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq);

int pg_image_insert(struct store *s, const struct store_image *img);
int pg_image_get(struct store *s, const char *id, struct store_image *ret);
int pg_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret);
int pg_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                  struct store_image **ret, size_t *ret_n);
int pg_image_delete(struct store *s, const char *id);

#define STORE_PG_IMAGES_OPS                                                                               \
        .image_insert = pg_image_insert, .image_get = pg_image_get, .image_find = pg_image_find,         \
        .image_list = pg_image_list, .image_delete = pg_image_delete

int pg_template_put(struct store *s, const struct store_template *t, size_t max);
int pg_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret);
int pg_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                     size_t *ret_n);
int pg_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                          const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus);
int pg_template_delete(struct store *s, const char *tenant_id, const char *name);
int pg_template_node_refs(struct store *s, const char *node_name, size_t *ret_n);

#define STORE_PG_TEMPLATES_OPS                                                                            \
        .template_put = pg_template_put, .template_get = pg_template_get,                                 \
        .template_list = pg_template_list, .template_set_state = pg_template_set_state,                   \
        .template_delete = pg_template_delete, .template_node_refs = pg_template_node_refs

int pg_event_insert(struct store *s, const struct store_event *ev);
int pg_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                  size_t max, struct store_event **ret, size_t *ret_n);
int pg_event_last_id(struct store *s, int64_t *ret);
int pg_event_prune(struct store *s, int64_t before_ms);
#define STORE_PG_EVENTS_OPS                                                                                   \
        .event_insert = pg_event_insert, .event_list = pg_event_list, .event_last_id = pg_event_last_id,     \
        .event_prune = pg_event_prune

#define STORE_PG_SECRETS_OPS                                                                              \
        .api_key_id = pg_api_key_id, .secret_insert = pg_secret_insert, .secret_get = pg_secret_get,     \
        .secret_list = pg_secret_list, .secret_delete = pg_secret_delete, .secret_users = pg_secret_users, \
        .sandbox_secret_insert = pg_sandbox_secret_insert, .sandbox_secret_list = pg_sandbox_secret_list, \
        .sandbox_secret_copy = pg_sandbox_secret_copy, .audit_insert = pg_audit_insert,                   \
        .audit_list = pg_audit_list, .audit_cursor_get = pg_audit_cursor_get,                             \
        .audit_cursor_set = pg_audit_cursor_set

int pg_node_insert(struct store *s, const struct store_node *n);
int pg_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining);
int pg_node_get(struct store *s, const char *name, struct store_node *ret);
int pg_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n);
int pg_node_set_draining(struct store *s, const char *name, bool draining);
int pg_node_delete(struct store *s, const char *name);
int pg_nodes_mark_lost(struct store *s, int64_t cutoff, size_t max, char ***ret, size_t *ret_n);
int pg_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to);
int pg_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret, size_t *ret_n);
int pg_sandbox_count_by(struct store *s, enum store_count_by by, size_t max, char ***ret_names, int64_t **ret_counts,
                        size_t *ret_n);
int pg_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t expires_at);
int pg_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now);
int pg_join_token_delete(struct store *s, const char *id);
int pg_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert, char **ret_key);
int pg_cap_key_publish(struct store *s, const struct store_cap_key *k);
int pg_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n);
int pg_cap_key_delete(struct store *s, const char *kid);
int pg_replica_seen(struct store *s, const struct store_replica *r);
int pg_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n);
int pg_replica_delete(struct store *s, const char *id);
int pg_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n);
int pg_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                              size_t *ret_n);
int pg_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n);
int pg_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until);

#define STORE_PG_CLUSTER_OPS                                                                                  \
        .node_insert = pg_node_insert, .node_heartbeat = pg_node_heartbeat, .node_get = pg_node_get,         \
        .node_list = pg_node_list, .node_set_draining = pg_node_set_draining, .node_delete = pg_node_delete, \
        .nodes_mark_lost = pg_nodes_mark_lost, .sandbox_list_node = pg_sandbox_list_node,                    \
        .sandbox_move = pg_sandbox_move,                                                                     \
        .sandbox_count_by = pg_sandbox_count_by, .join_token_insert = pg_join_token_insert,        \
        .join_token_check = pg_join_token_check, .join_token_delete = pg_join_token_delete,                  \
        .cluster_ca = pg_cluster_ca, .cap_key_publish = pg_cap_key_publish, .cap_key_list = pg_cap_key_list, \
        .cap_key_delete = pg_cap_key_delete, .replica_seen = pg_replica_seen,                                \
        .replica_list = pg_replica_list, .replica_delete = pg_replica_delete,                                \
        .operation_lease_renew = pg_operation_lease_renew,                                                   \
        .operation_list_expired = pg_operation_list_expired,                                                 \
        .operation_list_unfinished = pg_operation_list_unfinished, .operation_take_over = pg_operation_take_over
