/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The control plane's durable state: sandboxes, command sessions, tenants
 * and API keys. One interface, two backends behind `struct store_ops`,
 * picked by the scheme of the URL given to store_open(): SQLite
 * ("sqlite:/var/lib/airlock/airlock.db", one node) and PostgreSQL
 * ("postgres://user@host:5432/airlock?sslmode=require", or postgresql://:
 * the whole URL is libpq's connection URI), which several control-plane
 * replicas may share.
 *
 * Rules every backend follows:
 *   - functions return 0 or a negative errno (-ENOENT: no such row,
 *     -EEXIST: duplicate key, -EBUSY: database locked past the busy timeout
 *     (PostgreSQL: a transaction that kept meeting conflicting ones),
 *     -ETIMEDOUT: PostgreSQL's statement timeout, -EIO: anything else the
 *     database reports, a lost connection included); library error codes
 *     never cross this boundary;
 *   - ret_ out-parameters are written only on success, and what they receive
 *     is owned by the caller (free with the matching *_release/_free);
 *   - a store handle is safe to use from many threads at once;
 *   - the schema is versioned: migrations are applied in order, each inside
 *     one transaction, and recorded in a schema_migrations table, so opening
 *     an up-to-date database twice changes nothing.
 *
 * The store never logs: callers decide what is worth a log line.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_HASH_SIZE 32   /* SHA-256 of a token */
#define STORE_LIST_MAX 10000 /* the most rows one list call returns */

struct store;

/* One sandbox row: the desired state the control plane keeps. */
struct store_sandbox {
        char *id;            /* "sbx-" + 16 hex */
        char *tenant_id;     /* owning tenant, or NULL: admin-owned */
        char *template_name; /* template the sandbox was created from */
        char *state;         /* observed: a state of src/daemon/lifecycle.c's table */
        char *desired_state; /* what the last lifecycle verb asked for, or NULL */
        char *error;         /* why it failed, or NULL */
        char *metadata;      /* JSON object text, "{}" when none */
        char *env_keys;      /* JSON array of env variable names (never values) */
        char *snapshot_policy; /* JSON object over the global snapshot policy, or NULL: the global one */
        bool has_idle_timeout;  /* false: the global default applies */
        int64_t idle_timeout_s; /* suspend after this long idle; 0: never */
        int64_t expires_at;     /* Unix ms when its lifetime ends; 0: never */
        int64_t expiry_s;       /* the lifetime it was last given, seconds; 0: none */
        char *on_expiry;        /* "delete" or "suspend" (NULL: "delete") */
        int64_t created_at;  /* Unix time, milliseconds */
        int64_t updated_at;  /* Unix time, milliseconds */
        /* its egress policy (canonical JSON text, lib/netpolicy), written
         * by insert; reads leave it NULL: a policy may be 64 KiB and lists
         * run every second, so it is read alone, store_sandbox_network_get() */
        char *network;
        /* the node it runs on (store_node.name), or NULL: the control
         * plane's local node (one machine; rows made before clusters) */
        char *node;
        /* its own size within its template's: memory (MiB) and vCPUs its
         * VMM's cgroup allows; 0: the template's */
        int64_t memory_mib, vcpus;
};

/* One command session row. The attach token itself is never stored. */
struct store_session {
        char *id;         /* "ses-" + 16 hex */
        char *sandbox_id; /* owning sandbox; deleting it deletes the session */
        char *cmd;        /* JSON array text */
        bool pty;
        uint8_t token_hash[STORE_HASH_SIZE]; /* SHA-256 of the attach token */
        int64_t created_at;                  /* Unix time, milliseconds */
};

/* One operation on a sandbox (create, delete, pause, resume, stop, start,
 * rollback): its progress and outcome, kept after it finished so clients
 * can look it up. */
struct store_operation {
        char *id;              /* "op-" + 16 hex */
        char *sandbox_id;      /* no foreign key: the record outlives a deleted sandbox */
        char *tenant_id;       /* the sandbox's tenant (NULL on insert: taken from the sandbox row) */
        char *verb;            /* "pause" */
        char *state;           /* "pending", "running", "succeeded", "failed" */
        char *error;           /* JSON object text {"code","message"} when failed, else NULL */
        char *result;          /* JSON text when succeeded, else NULL */
        char *idempotency_key; /* the client's Idempotency-Key, or NULL */
        char *request_hash;    /* hex digest of the request that made it, or NULL */
        char *stage;           /* the step it is in ("stopping"), or NULL */
        int progress;          /* 0..100; 100 once succeeded */
        int64_t created_at;    /* Unix time, milliseconds */
        int64_t finished_at;   /* 0 while unfinished */
        /* the control-plane replica carrying it out (store_replica.id), or
         * NULL; while unfinished it renews lease_until (Unix ms), and once
         * that passed another replica may take it over and settle it */
        char *owner;
        int64_t lease_until;
        /* what settling it needs to know (JSON object text: a fork's
         * "child", a delete's "keep_snapshots"), or NULL */
        char *detail;
};

/* One snapshot of a sandbox (the image itself is on the node). */
struct store_snapshot {
        char *id;           /* "snap-" + 16 hex */
        char *sandbox_id;   /* owning sandbox; deleting it deletes the snapshot */
        char *kind;         /* "disk" or "full" */
        int64_t size;       /* bytes the node reported for the image */
        int64_t created_at; /* Unix time, milliseconds */
        bool pinned;        /* taken on demand: retention never deletes it (false: by the scheduler) */
};

/* An image: a full snapshot (memory and disk) of a sandbox, or a kept disk
 * or full snapshot exported, published to the object store under its id; new sandboxes are made from it. Unlike a
 * snapshot it outlives its sandbox. */
struct store_image {
        char *id;            /* "img-" + 16 hex: also its name in the object store */
        char *tenant_id;     /* owner, or NULL: the admin */
        char *name;          /* unique in its owner's scope, or NULL */
        char *sandbox_id;    /* the sandbox it was taken from (which may be gone) */
        char *template_name; /* that sandbox's template */
        int64_t size;        /* bytes of memory the node reported */
        int64_t created_at;  /* Unix time, milliseconds */
        char *kind;          /* "full" (memory and disk: resumes) or "disk" (boots); NULL on insert: "full" */
        char *snapshot_id;   /* the kept snapshot it was exported from, or NULL (taken for it) */
};

/* A volume (docs/volumes.md): a tenant's named, sized persistent disk. */
struct store_volume {
        char *id;           /* "vol-" + 16 hex */
        char *tenant_id;    /* owner, or NULL: the admin */
        char *name;         /* unique in its owner's scope */
        int64_t size;       /* bytes */
        char *node;         /* the node whose store holds its image, or NULL: the local node */
        char *source_id;    /* the volume it is a snapshot of, or NULL */
        int64_t created_at; /* Unix ms (0 on insert: now) */
};

/* A sandbox's hold on a volume: in its slot (0..3), mounted at path. */
struct store_volume_hold {
        char *sandbox_id;
        char *volume_id;
        int slot;
        char *path;
        bool read_only;
};

/* A template built from a spec (docs/templates.md): a tenant's name for a
 * node template named by its content. */
struct store_template {
        char *tenant_id;    /* owner (a tenant id, or "" for the admin's own) */
        char *name;         /* the owner's name for it: unique per owner */
        char *node_name;    /* "c-" + 32 hex: the node's template (content id) */
        char *build_id;     /* "bld-" + 16 hex: the latest build */
        char *state;        /* "building", "ready" or "failed" */
        char *error;        /* failed: why; else NULL */
        char *node;         /* the node that built it (its name; "" for the local node) */
        char *spec;         /* canonical JSON text of the spec */
        uint32_t memory_mib, vcpus; /* the template's machine (0 until known) */
        int64_t created_at, updated_at; /* Unix time, milliseconds */
};

/* One tenant: the owner of sandboxes and of API keys scoped to them. */
struct store_tenant {
        char *id;           /* "ten-" + 16 hex */
        char *name;         /* unique */
        int64_t created_at; /* Unix time, milliseconds */
        char *network;      /* its sandboxes' default egress policy (canonical JSON text), or NULL: the node's */
};

/* One API key as listed: never its hash, let alone the key itself. */
struct store_api_key {
        char *id;           /* "key-" + 16 hex */
        char *tenant_id;    /* NULL: admin scope */
        char *name;         /* what it was called when made, or NULL */
        int64_t created_at; /* Unix time, milliseconds */
};

/* One credential (lib/credstore keeps them here): who owns it, where it may
 * be sent, and its value sealed (never the value itself). */
struct store_secret {
        char *tenant_id;    /* NULL: admin scope */
        char *name;         /* [a-z0-9_-]{1,64}, unique per tenant */
        char *sandbox_id;   /* narrowed to this sandbox, or NULL */
        char *spec;         /* JSON object text: hosts, ports, inject, methods, paths, rate_per_min */
        int64_t expires_at; /* Unix seconds; 0: never */
        int64_t created_at; /* Unix time, milliseconds (0 on insert: now) */
        char *created_by;   /* the API key id that made it, or NULL */
        uint8_t *sealed;    /* the sealed value (lib/credstore); reads by list leave it NULL */
        size_t sealed_len;
};

/* A credential attached to a sandbox: the placeholder its guest sees. */
struct store_sandbox_secret {
        char *sandbox_id;
        char *name;        /* the secret's name (in the sandbox's tenant scope) */
        char *placeholder; /* "airlock_ph_" + 32 hex: not secret */
        char *env_name;    /* the env variable holding the placeholder */
};

/* One audit event: a credential made, attached or deleted (by an API key),
 * or used or refused by the gateway. Never a value. */
struct store_audit_event {
        int64_t id;         /* ascending (set by the store) */
        int64_t ts_ms;      /* Unix time, milliseconds (0 on insert: now) */
        char *tenant_id;    /* the tenant it concerns; NULL: admin scope */
        char *actor;        /* API key id, or "gateway" */
        char *sandbox_id, *secret, *host, *method, *path, *reason; /* each may be NULL */
        int port;           /* 0: none */
        char *action;       /* "secret.create", "secret.attach", "secret.delete", "injected", "refused" */
};

/* A sandbox's lifecycle event: a change of its settled state (created,
 * paused, resumed, stopped, started, suspended, woken, rolled_back, failed,
 * recovering, recovered, lost, archived) or its deletion, as the store saw
 * it, or one the caller appended (store_event_append(): a snapshot taken, a
 * request its policy denied) (GET /v1/events, webhooks). */
struct store_event {
        int64_t id;      /* ascending (set by the store) */
        int64_t ts_ms;   /* Unix time, milliseconds (0 on append: now) */
        char *tenant_id; /* the sandbox's owner; NULL: admin scope */
        char *sandbox_id;
        char *type;      /* "sandbox.paused", ... */
        char *state;     /* its state now (NULL: deleted) */
        char *previous;  /* its state before, or NULL */
        char *detail;    /* JSON object text of what else there is to say, or NULL (a plain change of state) */
};

struct store_node;
struct store_webhook;
struct store_webhook_delivery;
struct store_cap_key;
struct store_replica;

/* The backend interface. Backends embed `struct store` as their first
 * member and point its ops at a static table of these functions. */
/* What store_sandbox_count_by_*() group the sandbox rows by. */
enum store_count_by {
        STORE_COUNT_BY_NODE,
        STORE_COUNT_BY_STATE,
};

struct store_ops {
        const char *scheme; /* URL scheme this backend serves: "sqlite" */
        int (*open)(const char *location, struct store **ret);
        void (*close)(struct store *s);
        int (*schema_version)(struct store *s, unsigned *ret);

        int (*sandbox_insert)(struct store *s, const struct store_sandbox *sb);
        int (*sandbox_get)(struct store *s, const char *id, struct store_sandbox *ret);
        int (*sandbox_list)(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n);
        int (*sandbox_list_tenant)(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                                   size_t *ret_n);
        int (*sandbox_update_state)(struct store *s, const char *id, const char *state, const char *error);
        int (*sandbox_delete)(struct store *s, const char *id);
        int (*sandbox_transition)(struct store *s, const char *id, const char *from, const char *to,
                                  const char *desired);
        int (*sandbox_network_get)(struct store *s, const char *id, char **ret);
        int (*sandbox_network_set)(struct store *s, const char *id, const char *state, const char *network);
        int (*sandbox_expiry_set)(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                                  const char *on_expiry);

        int (*operation_insert)(struct store *s, const struct store_operation *op);
        int (*operation_get)(struct store *s, const char *id, struct store_operation *ret);
        int (*operation_find_by_key)(struct store *s, const char *key, struct store_operation *ret);
        int (*operation_update)(struct store *s, const char *id, const char *state, const char *error,
                                const char *result);
        int (*operation_progress)(struct store *s, const char *id, int progress, const char *stage);
        int (*operation_fail_unfinished)(struct store *s, const char *error);

        int (*snapshot_insert)(struct store *s, const struct store_snapshot *snap);
        int (*snapshot_get)(struct store *s, const char *id, struct store_snapshot *ret);
        int (*snapshot_list)(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                             size_t *ret_n);
        int (*snapshot_delete)(struct store *s, const char *id);

        int (*image_insert)(struct store *s, const struct store_image *img);
        int (*image_get)(struct store *s, const char *id, struct store_image *ret);
        int (*image_find)(struct store *s, const char *tenant_id, const char *name, struct store_image *ret);
        int (*image_list)(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                          struct store_image **ret, size_t *ret_n);
        int (*image_delete)(struct store *s, const char *id);

        int (*volume_insert)(struct store *s, const struct store_volume *v);
        int (*volume_get)(struct store *s, const char *id, struct store_volume *ret);
        int (*volume_find)(struct store *s, const char *tenant_id, const char *name,
                           struct store_volume *ret);
        int (*volume_list)(struct store *s, bool all, const char *tenant_id, size_t max,
                           struct store_volume **ret, size_t *ret_n);
        int (*volume_delete)(struct store *s, const char *id);
        int (*volume_set_node)(struct store *s, const char *id, const char *node);
        int (*volume_usage)(struct store *s, const char *tenant_id, int64_t *ret_bytes, size_t *ret_n);
        int (*volume_hold_insert)(struct store *s, const struct store_volume_hold *h);
        int (*volume_holds_of_volume)(struct store *s, const char *volume_id, struct store_volume_hold **ret,
                                      size_t *ret_n);
        int (*volume_holds_of_sandbox)(struct store *s, const char *sandbox_id,
                                       struct store_volume_hold **ret, size_t *ret_n);

        /* templates; tenant_id "" is the admin's (NULL in a list: every owner's) */
        int (*template_put)(struct store *s, const struct store_template *t, size_t max);
        int (*template_get)(struct store *s, const char *tenant_id, const char *name, struct store_template *ret);
        int (*template_list)(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                             size_t *ret_n);
        int (*template_set_state)(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                                  const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus);
        int (*template_delete)(struct store *s, const char *tenant_id, const char *name);
        int (*template_node_refs)(struct store *s, const char *node_name, size_t *ret_n);

        int (*session_insert)(struct store *s, const struct store_session *ses);
        int (*session_get)(struct store *s, const char *id, struct store_session *ret);
        int (*session_delete)(struct store *s, const char *id);

        int (*api_key_insert)(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]);
        int (*api_key_lookup)(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id);
        int (*api_key_create)(struct store *s, const char *id, const char *tenant_id, const char *name,
                              const uint8_t hash[STORE_HASH_SIZE], size_t max);
        int (*api_key_list)(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret,
                            size_t *ret_n);
        int (*api_key_delete)(struct store *s, const char *id);

        int (*tenant_insert)(struct store *s, const struct store_tenant *t, size_t max);
        int (*tenant_get)(struct store *s, const char *id, struct store_tenant *ret);
        int (*tenant_list)(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n);
        int (*tenant_delete)(struct store *s, const char *id);
        int (*tenant_network_set)(struct store *s, const char *id, const char *network);

        int (*api_key_id)(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id);
        int (*secret_insert)(struct store *s, const struct store_secret *sec);
        int (*secret_get)(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret);
        int (*secret_list)(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret,
                           size_t *ret_n);
        int (*secret_delete)(struct store *s, const char *tenant_id, const char *name);
        int (*secret_users)(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                            size_t *ret_n);
        int (*sandbox_secret_insert)(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a);
        int (*sandbox_secret_list)(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                                   size_t *ret_n);
        int (*sandbox_secret_copy)(struct store *s, const char *from_id, const char *to_id);
        int (*event_insert)(struct store *s, const struct store_event *ev);
        int (*event_list)(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                          size_t max, struct store_event **ret, size_t *ret_n);
        int (*event_last_id)(struct store *s, int64_t before_ms, int64_t *ret);
        /* deletes the events older than hard_before_ms, and those older
         * than before_ms that every webhook has handled */
        int (*event_prune)(struct store *s, int64_t before_ms, int64_t hard_before_ms);
        int (*audit_insert)(struct store *s, const struct store_audit_event *ev, const char *source,
                            const char *boot_id, int64_t seq);
        int (*audit_list)(struct store *s, bool all, const char *tenant_id, const char *sandbox_id,
                          const char *secret, size_t max, struct store_audit_event **ret, size_t *ret_n);
        int (*audit_cursor_get)(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq);
        int (*audit_cursor_set)(struct store *s, const char *source, const char *boot_id, int64_t seq);

        /* a cluster; ret_ pointers are never NULL here, lists are bounded */
        int (*node_insert)(struct store *s, const struct store_node *n);
        int (*node_heartbeat)(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining);
        int (*node_get)(struct store *s, const char *name, struct store_node *ret);
        int (*node_list)(struct store *s, size_t max, struct store_node **ret, size_t *ret_n);
        int (*node_set_draining)(struct store *s, const char *name, bool draining);
        int (*node_delete)(struct store *s, const char *name);
        int (*nodes_mark_lost)(struct store *s, int64_t cutoff, size_t max, char ***ret, size_t *ret_n);
        int (*sandbox_list_node)(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                                 size_t *ret_n);
        int (*sandbox_move)(struct store *s, const char *id, const char *state, const char *from, const char *to);
        int (*sandbox_count_by)(struct store *s, enum store_count_by by, size_t max, char ***ret_names,
                                int64_t **ret_counts, size_t *ret_n);
        int (*join_token_insert)(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE],
                                 int64_t expires_at);
        int (*join_token_check)(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now);
        int (*join_token_delete)(struct store *s, const char *id);
        int (*cluster_ca)(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert,
                          char **ret_key);
        int (*cap_key_publish)(struct store *s, const struct store_cap_key *k);
        int (*cap_key_list)(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n);
        int (*cap_key_delete)(struct store *s, const char *kid);
        int (*replica_seen)(struct store *s, const struct store_replica *r);
        int (*replica_list)(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n);
        int (*replica_delete)(struct store *s, const char *id);
        int (*operation_lease_renew)(struct store *s, const char *owner, int64_t until, uint64_t *ret_n);
        int (*operation_list_expired)(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                                      size_t *ret_n);
        int (*operation_list_unfinished)(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n);
        int (*operation_take_over)(struct store *s, const char *id, const char *owner, int64_t now, int64_t until);

        /* webhooks; max: the limit on the owner's webhooks, keep: the
         * deliveries a webhook keeps */
        int (*webhook_insert)(struct store *s, const struct store_webhook *w, size_t max);
        int (*webhook_get)(struct store *s, const char *id, struct store_webhook *ret);
        int (*webhook_list)(struct store *s, bool all, const char *tenant_id, size_t max, struct store_webhook **ret,
                            size_t *ret_n);
        int (*webhook_delete)(struct store *s, const char *id);
        int (*webhook_advance)(struct store *s, const char *id, int64_t from_cursor, const struct store_webhook *next);
        int (*webhook_delivery_insert)(struct store *s, const struct store_webhook_delivery *d, size_t keep);
        int (*webhook_delivery_list)(struct store *s, const char *webhook_id, int64_t before_id, size_t max,
                                     struct store_webhook_delivery **ret, size_t *ret_n);
};

struct store {
        const struct store_ops *ops;
};

/* The SQLite backend (lib/store/store-sqlite.c). */
extern const struct store_ops store_sqlite_ops;
/* The PostgreSQL backend (lib/store/store-pg.c). */
extern const struct store_ops store_pg_ops;

/* Opens the store named by url ("SCHEME:LOCATION"), choosing the backend
 * from the registered ones by scheme. -EPROTONOSUPPORT for an unknown
 * scheme, -EINVAL for a malformed url, otherwise what the backend returns.
 * Migrations are applied before this returns. */
int store_open(const char *url, struct store **ret);
/* Closes the store; NULL is fine. */
void store_close(struct store *s);
static inline void store_closep(struct store **s) {
        store_close(*s);
}

/* Highest migration version applied to this database. */
int store_schema_version(struct store *s, unsigned *ret);

/* Inserts a sandbox row. -EEXIST when the id is taken, -ENOENT when its
 * tenant_id names no tenant or its node no node. */
int store_sandbox_insert(struct store *s, const struct store_sandbox *sb);
/* Reads one sandbox; -ENOENT when unknown. Release *ret with
 * store_sandbox_release(). */
int store_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret);
/* Reads at most max sandboxes (bounded by STORE_LIST_MAX), oldest first.
 * Free the array with store_sandbox_array_free(). */
int store_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n);
/* Like store_sandbox_list(), only the sandboxes of one tenant. */
int store_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                              size_t *ret_n);
/* Sets state and error (NULL clears it). -ENOENT when unknown. */
int store_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error);
/* Deletes a sandbox and its sessions. -ENOENT when unknown. */
int store_sandbox_delete(struct store *s, const char *id);
/* Frees the strings of one sandbox (not the struct itself); NULL is fine. */
void store_sandbox_release(struct store_sandbox *sb);
/* Frees an array returned by store_sandbox_list(). */
void store_sandbox_array_free(struct store_sandbox *a, size_t n);

/* Compare-and-set of a sandbox's state: sets state to `to` and
 * desired_state to `desired` (NULL keeps it), clearing error, only while the
 * row is in state `from`. -ESTALE when the row is not (any more) in `from`
 * or does not exist: two verbs racing on one sandbox cannot both win. */
int store_sandbox_transition(struct store *s, const char *id, const char *from, const char *to, const char *desired);

/* A sandbox's egress policy: *ret the canonical JSON text (free it), or
 * NULL for a row made before policies existed. -ENOENT when unknown. */
int store_sandbox_network_get(struct store *s, const char *id, char **ret);
/* Replaces a sandbox's egress policy (network: canonical JSON text), only
 * while its row is in state `state`: a verb that claims the sandbox
 * between a caller's read and this write makes it -ESTALE, so the verb
 * (which reads the policy after its claim) never carries an older one.
 * -ESTALE also when the sandbox does not exist. */
int store_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network);
/* Sets when a sandbox's lifetime ends (Unix ms; 0: never), the lifetime it
 * was given (seconds; 0: none) and what happens then ("delete" or
 * "suspend"; NULL keeps what it had). -ENOENT when there is no such row. */
int store_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                             const char *on_expiry);

/* Inserts an operation row (created_at 0: now; tenant_id NULL: the tenant
 * of its sandbox row, if any). -EEXIST when the id or the idempotency key
 * is taken. */
int store_operation_insert(struct store *s, const struct store_operation *op);
/* Reads one operation; -ENOENT when unknown. Release with
 * store_operation_release(). */
int store_operation_get(struct store *s, const char *id, struct store_operation *ret);
/* The operation created with Idempotency-Key key; -ENOENT when none. */
int store_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret);
/* Sets an operation's state, error and result; a final state
 * ("succeeded"/"failed") also sets finished_at. "succeeded" sets progress
 * to 100 and clears the stage; "failed" keeps both (where it stopped).
 * -ENOENT when unknown. */
int store_operation_update(struct store *s, const char *id, const char *state, const char *error, const char *result);
/* Records how far an unfinished operation got: progress 0..100 (-EINVAL
 * otherwise) and the step it is in (NULL clears it). -ENOENT when no
 * pending or running operation has this id: a finished one keeps what it
 * ended with. */
int store_operation_progress(struct store *s, const char *id, int progress, const char *stage);
/* Marks every pending or running operation failed with error (JSON object
 * text): start-up repair after airlockd stopped while verbs ran. */
int store_operation_fail_unfinished(struct store *s, const char *error);
/* Frees the strings of one operation; NULL is fine. */
void store_operation_release(struct store_operation *op);
void store_operation_array_free(struct store_operation *a, size_t n);

/* Inserts a snapshot row (created_at 0: now). -ENOENT when its sandbox does
 * not exist, -EEXIST when the id is taken. */
int store_snapshot_insert(struct store *s, const struct store_snapshot *snap);
/* Reads one snapshot; -ENOENT when unknown. Release with
 * store_snapshot_release(). */
int store_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret);
/* Reads at most max snapshots of one sandbox (bounded by STORE_LIST_MAX),
 * newest first. Free with store_snapshot_array_free(). */
int store_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                        size_t *ret_n);
/* Deletes a snapshot row. -ENOENT when unknown. */
int store_snapshot_delete(struct store *s, const char *id);
/* Frees the strings of one snapshot; NULL is fine. */
void store_snapshot_release(struct store_snapshot *snap);
/* Frees an array returned by store_snapshot_list(). */
void store_snapshot_array_free(struct store_snapshot *a, size_t n);

/* Inserts a session row. -ENOENT when its sandbox does not exist, -EEXIST
 * when the id is taken. */
/* Images (tenant_id NULL is the admin scope). Inserts one (created_at 0:
 * now): -EEXIST when the scope has its name already. */
int store_image_insert(struct store *s, const struct store_image *img);
/* Reads one image by id, or by name in a scope; -ENOENT when unknown.
 * Release with store_image_release(). */
int store_image_get(struct store *s, const char *id, struct store_image *ret);
int store_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret);
/* Reads at most max images (bounded by STORE_LIST_MAX), newest first: of
 * every scope when all, otherwise of tenant_id's; only those taken from
 * sandbox_id unless it is NULL. Free with store_image_array_free(). */
int store_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                     struct store_image **ret, size_t *ret_n);
/* Deletes an image row. -ENOENT when unknown. */
int store_image_delete(struct store *s, const char *id);
void store_image_release(struct store_image *img);
void store_image_array_free(struct store_image *a, size_t n);

/* Volumes (docs/volumes.md; tenant_id NULL is the admin scope). A
 * tenant's go with it (deleting the tenant deletes them); a volume held by
 * a sandbox cannot be deleted. Holds go with their sandbox (deleting its
 * row deletes them). */
#define STORE_VOLUME_SLOTS 4 /* a sandbox holds at most this many, slots 0..3 */
/* Inserts a volume (created_at 0: now). -EEXIST when the id is taken or
 * its owner has a volume of that name, -ENOENT when tenant_id names no
 * tenant, -EINVAL without an id or a name or with a size under 1. */
int store_volume_insert(struct store *s, const struct store_volume *v);
/* Reads one volume by id, or by owner (NULL: the admin) and name; -ENOENT
 * when unknown. Release with store_volume_release(). */
int store_volume_get(struct store *s, const char *id, struct store_volume *ret);
int store_volume_find(struct store *s, const char *tenant_id, const char *name, struct store_volume *ret);
/* Reads at most max volumes (bounded by STORE_LIST_MAX), newest first:
 * every owner's when all, otherwise tenant_id's (NULL: the admin's). Free
 * with store_volume_array_free(). */
int store_volume_list(struct store *s, bool all, const char *tenant_id, size_t max,
                      struct store_volume **ret, size_t *ret_n);
/* Deletes a volume row. -ENOENT when unknown, -EBUSY while a sandbox
 * holds it (decided by the database: a hold inserted meanwhile fails the
 * delete on its foreign key, still -EBUSY). */
int store_volume_delete(struct store *s, const char *id);
/* Records that volume id's image is now on node (NULL: the local node):
 * where its read-write holder, woken on another node, puts it back.
 * -ENOENT when there is no such volume (or node). */
int store_volume_set_node(struct store *s, const char *id, const char *node);
/* The bytes and the number of volumes tenant_id (NULL: the admin) owns,
 * for quotas. */
int store_volume_usage(struct store *s, const char *tenant_id, int64_t *ret_bytes, size_t *ret_n);
/* Inserts a hold. -EEXIST when the sandbox's slot is taken or, for a
 * read-write hold, the volume has a read-write holder already (a unique
 * index: two racing inserts cannot both win); -ENOENT when the sandbox or
 * the volume does not exist; -EINVAL for a slot out of 0..3 or no path. */
int store_volume_hold_insert(struct store *s, const struct store_volume_hold *h);
/* The holds of a volume (by sandbox id, then slot), and of a sandbox (by
 * slot). Free with store_volume_hold_array_free(). */
int store_volume_holds_of_volume(struct store *s, const char *volume_id, struct store_volume_hold **ret,
                                 size_t *ret_n);
int store_volume_holds_of_sandbox(struct store *s, const char *sandbox_id, struct store_volume_hold **ret,
                                  size_t *ret_n);
/* Whether sandbox_id holds any volume (false too when the store cannot
 * say: for the background loops that leave such sandboxes alone). */
bool store_sandbox_holds_volumes(struct store *s, const char *sandbox_id);
void store_volume_release(struct store_volume *v);
void store_volume_array_free(struct store_volume *a, size_t n);
void store_volume_hold_release(struct store_volume_hold *h);
void store_volume_hold_array_free(struct store_volume_hold *a, size_t n);

/* Templates built from specs. A tenant's go with it (deleting the tenant
 * deletes them); node_name is no reference: the node templates are the
 * nodes' (store_template_node_refs() tells whether a row still names one). */
#define STORE_TEMPLATES_MAX 100
/* Inserts or replaces the row of (tenant_id, name): a new build of that name
 * replaces the old row, created_at kept when it existed. -EDQUOT when the
 * owner has STORE_TEMPLATES_MAX (100) rows and this is a new name, -ENOENT
 * when tenant_id names no tenant. created_at, updated_at 0: now. */
int store_template_put(struct store *s, const struct store_template *t);
/* -ENOENT when unknown. Release with store_template_release(). */
int store_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret);
/* At most max rows (bounded by STORE_LIST_MAX), by name: of tenant_id, or every owner's when tenant_id is NULL. */
int store_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret, size_t *ret_n);
/* Sets state, error (may be NULL), memory_mib and vcpus (0: unchanged) and updated_at, only while the row's build_id is
 * build_id: -ESTALE when another build replaced it, -ENOENT when the row is gone. */
int store_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                             const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus);
/* -ENOENT when unknown. */
int store_template_delete(struct store *s, const char *tenant_id, const char *name);
/* How many rows (any owner, any name) name node_name. */
int store_template_node_refs(struct store *s, const char *node_name, size_t *ret_n);
void store_template_release(struct store_template *t);
void store_template_array_free(struct store_template *a, size_t n);

int store_session_insert(struct store *s, const struct store_session *ses);
/* Reads one session; -ENOENT when unknown. Release with
 * store_session_release(). */
int store_session_get(struct store *s, const char *id, struct store_session *ret);
/* Deletes a session. -ENOENT when unknown. */
int store_session_delete(struct store *s, const char *id);
/* Frees the strings of one session; NULL is fine. */
void store_session_release(struct store_session *ses);

/* Inserts or replaces the key called name (one hash per name: writing the
 * admin key again revokes its previous token). */
int store_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]);
/* 0 when hash belongs to a key, -EACCES otherwise. Every stored hash is
 * compared in constant time, so timing tells nothing about near misses. */
int store_api_key_check(struct store *s, const uint8_t hash[STORE_HASH_SIZE]);
/* Like store_api_key_check(), and tells the key's scope: *ret_tenant_id is
 * the tenant's id (free it), or NULL for an admin key. */
int store_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id);
/* Adds key id ("key-" + 16 hex) of tenant_id (NULL: admin scope), name
 * optional. -EEXIST when the id or hash is taken, -ENOENT when the tenant
 * does not exist, -EDQUOT when the tenant already has max keys. */
int store_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                         const uint8_t hash[STORE_HASH_SIZE], size_t max);
/* The keys of one tenant, at most max (bounded by STORE_LIST_MAX), oldest
 * first. Free with store_api_key_array_free(). */
int store_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret, size_t *ret_n);
/* Revokes (deletes) a tenant's key; the admin key cannot be deleted this
 * way. -ENOENT when no tenant key has this id. */
int store_api_key_delete(struct store *s, const char *id);
void store_api_key_release(struct store_api_key *k);
void store_api_key_array_free(struct store_api_key *a, size_t n);

/* Inserts a tenant (created_at 0: now). -EEXIST when the id or name is
 * taken, -EDQUOT when max tenants exist already. */
int store_tenant_insert(struct store *s, const struct store_tenant *t, size_t max);
/* Reads one tenant; -ENOENT when unknown. */
int store_tenant_get(struct store *s, const char *id, struct store_tenant *ret);
/* At most max tenants (bounded by STORE_LIST_MAX), oldest first. Free with
 * store_tenant_array_free(). */
int store_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n);
/* Deletes a tenant and its keys and templates. -ENOENT when unknown,
 * -EBUSY while it still owns sandboxes, images or volumes. */
int store_tenant_delete(struct store *s, const char *id);
/* Sets a tenant's default egress policy (canonical JSON text; NULL: back
 * to the node's). Sandboxes made before keep theirs. -ENOENT when unknown. */
int store_tenant_network_set(struct store *s, const char *id, const char *network);
void store_tenant_release(struct store_tenant *t);
void store_tenant_array_free(struct store_tenant *a, size_t n);

/* The id of the API key whose token hashes to hash (after
 * store_api_key_lookup() accepted it): for records of who did what.
 * -ENOENT when none. */
int store_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id);

/*
 * Credentials (sealed by lib/credstore; the store never sees a value).
 * tenant_id NULL is the admin scope throughout: names are unique per scope.
 */
#define STORE_SANDBOX_SECRETS_MAX 16
/* -EEXIST when the scope has the name, -ENOENT when the tenant does not exist. */
int store_secret_insert(struct store *s, const struct store_secret *sec);
/* With its sealed value. -ENOENT when unknown. */
int store_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret);
/* One scope's secrets by name, without sealed values. */
int store_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n);
/* Deletes a secret and its attachments to sandboxes. -ENOENT when unknown. */
int store_secret_delete(struct store *s, const char *tenant_id, const char *name);
/* The ids of the sandboxes a secret is attached to (free with
 * store_string_array_free()). */
int store_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                       size_t *ret_n);
void store_secret_release(struct store_secret *sec);
void store_secret_array_free(struct store_secret *a, size_t n);
void store_string_array_free(char **a, size_t n);

/* Attaches secret a->name of scope tenant_id to sandbox a->sandbox_id.
 * -ENOENT when the secret or the sandbox does not exist, -EEXIST when
 * attached already. */
int store_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a);
/* A sandbox's attachments, by name. */
int store_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                              size_t *ret_n);
/* Gives sandbox to_id the attachments of from_id, same placeholders (a fork
 * child: its memory holds them). */
int store_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id);
void store_sandbox_secret_array_free(struct store_sandbox_secret *a, size_t n);

/* Appends an audit event. source/boot_id/seq (all NULL/0 for the control
 * plane's own) identify an event read from a gateway: one already stored
 * is skipped (returns 0), so reading a range twice adds nothing. */
int store_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                       int64_t seq);
/* Newest first, at most max: all scopes (all) or tenant_id's (NULL: the
 * admin scope); sandbox_id, secret filter when not NULL. */
int store_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                     size_t max, struct store_audit_event **ret, size_t *ret_n);
void store_audit_event_release(struct store_audit_event *ev);

/* Sandboxes' lifecycle events. The store appends them itself: every call
 * that changes a sandbox's state (update_state, transition, move) into a
 * settled one, and every delete, adds one (after the change: a crash in
 * between loses the event, never the change). Those after after_id (0:
 * from the oldest kept), oldest first, in the caller's scope (all, or the
 * tenant's; tenant_id NULL with !all: the admin scope's), at most max.
 * Events are pruned as new ones come: those older than
 * STORE_EVENTS_KEEP_MS once every webhook has handled them (its cursor is
 * at or past their id), and whatever is older than
 * STORE_EVENTS_WEBHOOK_KEEP_MS, handled or not (a webhook that far behind
 * misses them). */
#define STORE_EVENTS_KEEP_MS (3600 * 1000)
#define STORE_EVENTS_WEBHOOK_KEEP_MS (24 * 3600 * 1000)
int store_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                     size_t max, struct store_event **ret, size_t *ret_n);
/* Appends an event the store does not make itself ("sandbox.snapshot_taken",
 * "sandbox.policy_denied", with ev->detail), pruning as the store's own do;
 * ts_ms 0: now, otherwise used as given. ev->id is ignored. -EINVAL
 * without a sandbox_id or a type. */
int store_event_append(struct store *s, const struct store_event *ev);
/* The newest event's id (0: none): where a stream that wants only what
 * comes next starts. before_ms, unless 0: of the events older than that
 * (Unix ms). */
int store_event_last_id(struct store *s, int64_t before_ms, int64_t *ret);
void store_event_array_free(struct store_event *a, size_t n);
void store_audit_event_array_free(struct store_audit_event *a, size_t n);
/* Where reading a gateway's events stopped: its boot id and the last
 * sequence number stored. -ENOENT when never read. */
int store_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq);
int store_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq);

/*
 * Webhooks: an owner's (tenant_id NULL: the admin scope) endpoints that
 * lifecycle events are POSTed to, in the order of sandbox_events. The
 * store keeps how far each got (its cursor) and its retries; the caller
 * (the delivery worker, on whichever replica) delivers and advances the
 * cursor with store_webhook_advance(), a compare-and-set, so that of
 * replicas delivering at once one moves each webhook on. A tenant's go
 * with it.
 */
#define STORE_WEBHOOKS_MAX 32             /* per owner (tenant or admin scope) */
#define STORE_WEBHOOK_DELIVERIES_KEEP 500 /* per webhook, newest kept */

struct store_webhook {
        char *id;           /* "wh-" + 16 hex, made by the caller */
        char *tenant_id;    /* owner, or NULL: the admin scope */
        char *url;          /* where events are POSTed */
        char *events;       /* event types, comma-separated, or "*": every one */
        char *secret;       /* what signs its deliveries, as its caller keeps it (sealed) */
        int64_t created_at; /* Unix ms (0 on insert: now) */
        /* how far it got, set by the store on insert and by
         * store_webhook_advance() after: */
        int64_t cursor;     /* the last sandbox_events id it handled (done with: delivered or skipped) */
        int attempts;       /* failed tries at the event after cursor */
        int64_t next_at;    /* Unix ms: no try before (0: now) */
        char *last_error;   /* why the last try failed, or NULL */
        int64_t delivered;  /* events delivered (advance: how many more) */
        int64_t failed;     /* failed tries (advance: how many more) */
};

/* One try at delivering one event to a webhook. */
struct store_webhook_delivery {
        int64_t id;          /* ascending (set by the store) */
        char *webhook_id;
        int64_t event_id;    /* the sandbox_events id */
        char *event_type;
        char *sandbox_id;    /* or NULL */
        int64_t ts_ms;       /* Unix ms of the try (0 on insert: now) */
        int attempt;         /* 1 for the first try at this event */
        int status;          /* the HTTP status answered; 0: none (no answer) */
        char *error;         /* why it failed, or NULL: delivered */
        int64_t duration_ms; /* how long the try took */
};

/* Adds webhook w (id, url, events and secret required; created_at 0:
 * now). Its cursor starts at the newest event's id (store_event_last_id()),
 * so it gets only what comes after; attempts, next_at, last_error and the
 * counters start at 0 and NULL (w's are not read). -EEXIST when the id is
 * taken, -ENOENT when tenant_id names no tenant, -EDQUOT when the owner
 * has STORE_WEBHOOKS_MAX already (counted and inserted at once: racing
 * inserts, on any replica, cannot pass it). */
int store_webhook_insert(struct store *s, const struct store_webhook *w);
/* Reads one webhook; -ENOENT when unknown. Release with
 * store_webhook_release(). */
int store_webhook_get(struct store *s, const char *id, struct store_webhook *ret);
/* Every owner's webhooks (all: the delivery worker's view), or the scope
 * of tenant_id (NULL: the admin scope's) only, by created_at then id. Free
 * with store_webhook_array_free(). */
int store_webhook_list(struct store *s, bool all, const char *tenant_id, struct store_webhook **ret,
                       size_t *ret_n);
/* Deletes a webhook and its deliveries. -ENOENT when unknown. */
int store_webhook_delete(struct store *s, const char *id);
/* Moves webhook id on from from_cursor (the cursor it was read with): sets
 * its cursor (never below from_cursor: -EINVAL), attempts, next_at and
 * last_error to next's, and adds next->delivered and next->failed to its
 * counters (increments here). A compare-and-set: -ESTALE when its cursor
 * is no longer from_cursor (another replica moved it on), -ENOENT when it
 * is gone. Events a webhook does not want must be stepped over too: an
 * event older than STORE_EVENTS_KEEP_MS is kept while a cursor is below it. */
int store_webhook_advance(struct store *s, const char *id, int64_t from_cursor, const struct store_webhook *next);
/* Appends a delivery (ts_ms 0: now) and prunes the webhook's to the newest
 * STORE_WEBHOOK_DELIVERIES_KEEP (a later statement: after a crash in
 * between, the next append prunes). -ENOENT when the webhook is gone. */
int store_webhook_delivery_insert(struct store *s, const struct store_webhook_delivery *d);
/* A webhook's deliveries, newest first, those before before_id (0: from
 * the newest), at most max (bounded by STORE_LIST_MAX). Free with
 * store_webhook_delivery_array_free(). */
int store_webhook_delivery_list(struct store *s, const char *webhook_id, int64_t before_id, size_t max,
                                struct store_webhook_delivery **ret, size_t *ret_n);
/* Free the strings of one (not the struct itself); NULL is fine. */
void store_webhook_release(struct store_webhook *w);
void store_webhook_delivery_release(struct store_webhook_delivery *d);
void store_webhook_array_free(struct store_webhook *a, size_t n);
void store_webhook_delivery_array_free(struct store_webhook_delivery *a, size_t n);

/*
 * A cluster (docs/cluster.md): worker nodes that joined with a token and
 * heartbeat to the control-plane replicas, the cluster's CA, every
 * replica's capability public keys, the replicas themselves.
 */
#define STORE_NODE_NAME_MAX 63

/* One worker node, as it joined and as its last heartbeat described it. */
struct store_node {
        char *name;          /* [a-z0-9-], ≤ STORE_NODE_NAME_MAX: its certificate's CN */
        char *address;       /* where replicas reach its node protocol (a lib/link address) */
        char *boot_id;       /* its airlock-node process's: a new one is a restart */
        char *info;          /* the last heartbeat's JSON object text (labels, capacity, usage, templates) */
        bool draining;       /* the operator's: nothing new is placed there */
        int64_t lost_at;     /* Unix ms it was found silent (store_nodes_mark_lost()), 0 while not */
        int64_t joined_at;   /* Unix ms */
        int64_t heartbeat_at; /* Unix ms of its last heartbeat */
};

/* Adds a node that joined (joined_at, heartbeat_at 0: now). -EEXIST when
 * the name is taken: a machine rejoining under a name that exists must be
 * deleted from the cluster first. */
int store_node_insert(struct store *s, const struct store_node *n);
/* Records a heartbeat: address, boot_id, info, heartbeat_at (0: now), and
 * clears lost_at. *ret_was_lost (may be NULL) tells whether it was lost, so
 * that the caller reconciles its sandboxes once, and *ret_draining what the
 * operator wants of it. -ENOENT when the node is not (any more) a member.
 * One statement or one transaction: two replicas serving beats of one
 * node at once cannot both see it as lost. */
int store_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining);
/* Reads one node; -ENOENT when unknown. */
int store_node_get(struct store *s, const char *name, struct store_node *ret);
/* At most max nodes (bounded by STORE_LIST_MAX), by name. */
int store_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n);
/* Sets or clears draining. -ENOENT when unknown. */
int store_node_set_draining(struct store *s, const char *name, bool draining);
/* Removes a node from the cluster. -ENOENT when unknown, -EBUSY while
 * sandbox rows name it. */
int store_node_delete(struct store *s, const char *name);
/* Marks lost (lost_at = now) every node not lost yet whose last heartbeat
 * is older than cutoff (Unix ms), and returns their names (free with
 * store_string_array_free()). Atomic: of replicas doing this at once, one
 * gets each name. */
int store_nodes_mark_lost(struct store *s, int64_t cutoff, char ***ret, size_t *ret_n);
void store_node_release(struct store_node *n);
void store_node_array_free(struct store_node *a, size_t n);

/* The sandboxes placed on node (NULL: the local node's, node IS NULL),
 * at most max, oldest first. */
int store_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                            size_t *ret_n);
/* Moves sandbox id from node `from` to node `to` (NULL: the local node),
 * only while its row is in state `state` and on `from` (a suspended
 * sandbox woken elsewhere): -ESTALE otherwise, -ENOENT when `to` is no
 * node. */
int store_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to);
/* How many sandbox rows each node has: parallel arrays of names (NULL:
 * the local node) and counts; for placement. Free names with
 * store_string_array_free() (NULL entries are fine). */
int store_sandbox_count_by_node(struct store *s, char ***ret_names, int64_t **ret_counts, size_t *ret_n);
/* The same by state (the metrics' sandboxes by state). */
int store_sandbox_count_by_state(struct store *s, char ***ret_names, int64_t **ret_counts, size_t *ret_n);

/* Join tokens (alj1-…, lib/cluster): only the SHA-256 of the secret is
 * kept. A token serves any number of joins until it expires or is deleted. */
int store_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE],
                            int64_t expires_at);
/* 0 when token id exists, its secret hashes to hash (compared in constant
 * time) and it has not expired at now (Unix ms); -ENOENT when unknown or
 * the secret is wrong (the same answer), -EKEYEXPIRED when expired. */
int store_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now);
/* -ENOENT when unknown. Expired tokens are deleted by
 * store_join_token_check() and store_join_token_insert() as they go. */
int store_join_token_delete(struct store *s, const char *id);

/* The cluster's CA (lib/mtls, PEM): stores cert_pem and key_pem unless a CA
 * is stored already, and gives back the stored one (*ret_cert, *ret_key:
 * free them), so that replicas starting at once agree on the first. */
int store_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert,
                     char **ret_key);

/* One replica's capability public key, which nodes fetch with heartbeats. */
struct store_cap_key {
        char *kid;
        char *public_key; /* hex, as cap-keydir writes it */
        char *replica;    /* the replica that signs with it */
        int64_t created_at;
};
/* Adds or replaces (by kid) a public key. */
int store_cap_key_publish(struct store *s, const struct store_cap_key *k);
/* At most max keys, oldest first. */
int store_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n);
/* -ENOENT when unknown. */
int store_cap_key_delete(struct store *s, const char *kid);
void store_cap_key_array_free(struct store_cap_key *a, size_t n);

/* One control-plane replica, as it last said it was alive. */
struct store_replica {
        char *id;              /* "rep-" + 16 hex, new at each start */
        char *cluster_address; /* where nodes reach it (host:port), or NULL */
        char *api_address;     /* its public API (host:port), or NULL */
        int64_t started_at;
        int64_t seen_at;
};
/* Inserts or refreshes (seen_at 0: now) a replica's row. */
int store_replica_seen(struct store *s, const struct store_replica *r);
/* The replicas seen at or after since (Unix ms), at most max, by id. */
int store_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n);
/* -ENOENT when unknown. */
int store_replica_delete(struct store *s, const char *id);
void store_replica_array_free(struct store_replica *a, size_t n);

/* Renews the lease of every unfinished operation owner carries: until
 * (Unix ms). *ret_n (may be NULL) the number renewed. */
int store_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n);
/* The unfinished operations whose lease ran out before now (an owner
 * that died), at most max, oldest first. */
int store_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                                 size_t *ret_n);
/* Every unfinished operation, leased or not, at most max, oldest first:
 * what an airlockd alone on its store (no leases) left when it stopped. */
int store_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n);
/* Makes owner the carrier of operation id, with lease until, only while
 * its lease ran out before now and it is unfinished: -ESTALE otherwise (a
 * replica that took it first, or its owner renewed it). */
int store_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until);
