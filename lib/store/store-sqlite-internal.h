/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the SQLite backend's files share (store-sqlite.c: the connection,
 * migrations and the core tables; store-sqlite-secrets.c: credentials and
 * the audit log; store-sqlite-images.c: images; store-sqlite-templates.c:
 * templates built from specs; store-sqlite-cluster.c: nodes, join tokens,
 * the CA, capability keys, replicas and operation leases;
 * store-sqlite-helpers.c: the statement helpers of the files after the
 * first, and a statement's rows as the store_row cursor the shared row
 * readers take, store-backend.h). Private to lib/store.
 */

#include <pthread.h>
#include <sqlite3.h>

#include "store-backend.h"
#include "store.h"

/* The connection; the first member of the backend's handle. Every use of
 * db, its statements included, holds lock. */
struct store_sqlite_conn {
        struct store base; /* must be first */
        sqlite3 *db;
        pthread_mutex_t lock;
};

/* Maps an SQLite result code to a negative errno. */
int sqlite_to_errno(sqlite3 *db, int rc);

/* The admin scope is tenant_id NULL; "COALESCE(tenant_id, '') = ?" with
 * "" for it matches either. */
#define SCOPE_IS(n) "COALESCE(tenant_id, '') = ?" #n

/* Takes the lock and prepares sql; on failure the lock is released. */
int sqlite_prep(struct store_sqlite_conn *c, const char *sql, sqlite3_stmt **ret);
/* Finalizes st and releases the lock sqlite_prep() took. */
void sqlite_done(struct store_sqlite_conn *c, sqlite3_stmt *st);
/* Binds v as text, or NULL. */
void sqlite_bind_str(sqlite3_stmt *st, int idx, const char *v);
/* Steps a statement without rows; -ENOENT when it changed nothing and
 * need_change. */
int sqlite_step_write(struct store_sqlite_conn *c, sqlite3_stmt *st, bool need_change);

/* A statement's rows as a store_row cursor (store-backend.h): next() steps
 * st, mapping errors through db. */
struct sqlite_rows {
        struct store_row row; /* must be first */
        sqlite3 *db;
        sqlite3_stmt *st;
};
struct sqlite_rows sqlite_rows(sqlite3 *db, sqlite3_stmt *st);
/* Reads at most max rows of st through list into a new array *ret of
 * *ret_n elements; on failure frees what it read (store_rows_list()). */
int sqlite_list(struct store_sqlite_conn *c, sqlite3_stmt *st, const struct store_list *list, size_t max, void *ret,
                size_t *ret_n);
/* Reads the one row of st through read_row into ret; -ENOENT when none. */
int sqlite_one(struct store_sqlite_conn *c, sqlite3_stmt *st, int (*read_row)(const struct store_row *, void *),
               void *ret);

int sqlite_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id);
int sqlite_secret_insert(struct store *s, const struct store_secret *sec);
int sqlite_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret);
int sqlite_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n);
int sqlite_secret_delete(struct store *s, const char *tenant_id, const char *name);
int sqlite_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                        size_t *ret_n);
int sqlite_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a);
int sqlite_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                               size_t *ret_n);
int sqlite_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id);
int sqlite_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                        int64_t seq);
int sqlite_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                      size_t max, struct store_audit_event **ret, size_t *ret_n);
int sqlite_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq);
int sqlite_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq);

int sqlite_image_insert(struct store *s, const struct store_image *img);
int sqlite_image_get(struct store *s, const char *id, struct store_image *ret);
int sqlite_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret);
int sqlite_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                      struct store_image **ret, size_t *ret_n);
int sqlite_image_delete(struct store *s, const char *id);

#define STORE_SQLITE_IMAGES_OPS                                                                               \
        .image_insert = sqlite_image_insert, .image_get = sqlite_image_get, .image_find = sqlite_image_find, \
        .image_list = sqlite_image_list, .image_delete = sqlite_image_delete

int sqlite_template_put(struct store *s, const struct store_template *t, size_t max);
int sqlite_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret);
int sqlite_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                         size_t *ret_n);
int sqlite_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                              const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus);
int sqlite_template_delete(struct store *s, const char *tenant_id, const char *name);
int sqlite_template_node_refs(struct store *s, const char *node_name, size_t *ret_n);

#define STORE_SQLITE_TEMPLATES_OPS                                                                        \
        .template_put = sqlite_template_put, .template_get = sqlite_template_get,                         \
        .template_list = sqlite_template_list, .template_set_state = sqlite_template_set_state,           \
        .template_delete = sqlite_template_delete, .template_node_refs = sqlite_template_node_refs

int sqlite_event_insert(struct store *s, const struct store_event *ev);
int sqlite_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                      size_t max, struct store_event **ret, size_t *ret_n);
int sqlite_event_last_id(struct store *s, int64_t *ret);
int sqlite_event_prune(struct store *s, int64_t before_ms);
#define STORE_SQLITE_EVENTS_OPS                                                                               \
        .event_insert = sqlite_event_insert, .event_list = sqlite_event_list,                                 \
        .event_last_id = sqlite_event_last_id, .event_prune = sqlite_event_prune

#define STORE_SQLITE_SECRETS_OPS                                                                                       \
        .api_key_id = sqlite_api_key_id, .secret_insert = sqlite_secret_insert, .secret_get = sqlite_secret_get,       \
        .secret_list = sqlite_secret_list, .secret_delete = sqlite_secret_delete, .secret_users = sqlite_secret_users, \
        .sandbox_secret_insert = sqlite_sandbox_secret_insert, .sandbox_secret_list = sqlite_sandbox_secret_list,      \
        .sandbox_secret_copy = sqlite_sandbox_secret_copy, .audit_insert = sqlite_audit_insert,                        \
        .audit_list = sqlite_audit_list, .audit_cursor_get = sqlite_audit_cursor_get,                                  \
        .audit_cursor_set = sqlite_audit_cursor_set

int sqlite_node_insert(struct store *s, const struct store_node *n);
int sqlite_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining);
int sqlite_node_get(struct store *s, const char *name, struct store_node *ret);
int sqlite_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n);
int sqlite_node_set_draining(struct store *s, const char *name, bool draining);
int sqlite_node_delete(struct store *s, const char *name);
int sqlite_nodes_mark_lost(struct store *s, int64_t cutoff, size_t max, char ***ret, size_t *ret_n);
int sqlite_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to);
int sqlite_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                             size_t *ret_n);
int sqlite_sandbox_count_by(struct store *s, enum store_count_by by, size_t max, char ***ret_names, int64_t **ret_counts,
                                 size_t *ret_n);
int sqlite_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t expires_at);
int sqlite_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now);
int sqlite_join_token_delete(struct store *s, const char *id);
int sqlite_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert, char **ret_key);
int sqlite_cap_key_publish(struct store *s, const struct store_cap_key *k);
int sqlite_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n);
int sqlite_cap_key_delete(struct store *s, const char *kid);
int sqlite_replica_seen(struct store *s, const struct store_replica *r);
int sqlite_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n);
int sqlite_replica_delete(struct store *s, const char *id);
int sqlite_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n);
int sqlite_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                                  size_t *ret_n);
int sqlite_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n);
int sqlite_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until);

#define STORE_SQLITE_CLUSTER_OPS                                                                                  \
        .node_insert = sqlite_node_insert, .node_heartbeat = sqlite_node_heartbeat, .node_get = sqlite_node_get, \
        .node_list = sqlite_node_list, .node_set_draining = sqlite_node_set_draining,                            \
        .node_delete = sqlite_node_delete, .nodes_mark_lost = sqlite_nodes_mark_lost,                            \
        .sandbox_list_node = sqlite_sandbox_list_node, .sandbox_count_by = sqlite_sandbox_count_by,    \
        .sandbox_move = sqlite_sandbox_move,                                                                     \
        .join_token_insert = sqlite_join_token_insert, .join_token_check = sqlite_join_token_check,              \
        .join_token_delete = sqlite_join_token_delete, .cluster_ca = sqlite_cluster_ca,                          \
        .cap_key_publish = sqlite_cap_key_publish, .cap_key_list = sqlite_cap_key_list,                          \
        .cap_key_delete = sqlite_cap_key_delete, .replica_seen = sqlite_replica_seen,                            \
        .replica_list = sqlite_replica_list, .replica_delete = sqlite_replica_delete,                            \
        .operation_lease_renew = sqlite_operation_lease_renew,                                                   \
        .operation_list_expired = sqlite_operation_list_expired,                                                 \
        .operation_list_unfinished = sqlite_operation_list_unfinished,                                           \
        .operation_take_over = sqlite_operation_take_over
