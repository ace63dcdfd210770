/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Backend registry and the thin dispatch layer over struct store_ops.
 */
#include "store.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "store-backend.h"

/* Every backend this build knows, by the URL schemes it serves;
 * store_open() picks one by scheme. */
static const struct {
        const char *scheme;
        const struct store_ops *ops;
} store_backends[] = {
        { "sqlite", &store_sqlite_ops },
        { "postgres", &store_pg_ops },
        { "postgresql", &store_pg_ops },
};

int store_open(const char *url, struct store **ret) {
        if (!url || !ret)
                return -EINVAL;
        const char *colon = strchr(url, ':');
        if (!colon || colon == url || colon[1] == 0)
                return -EINVAL;
        size_t n = (size_t) (colon - url);
        for (size_t i = 0; i < ARRAY_SIZE(store_backends); i++) {
                const char *scheme = store_backends[i].scheme;
                if (strlen(scheme) == n && strncmp(scheme, url, n) == 0)
                        return store_backends[i].ops->open(colon + 1, ret);
        }
        return -EPROTONOSUPPORT;
}

void store_close(struct store *s) {
        if (s)
                s->ops->close(s);
}

int store_schema_version(struct store *s, unsigned *ret) {
        return s->ops->schema_version(s, ret);
}

int store_sandbox_insert(struct store *s, const struct store_sandbox *sb) {
        if (!sb || !sb->id || !sb->template_name || !sb->state)
                return -EINVAL;
        return s->ops->sandbox_insert(s, sb);
}

int store_sandbox_get(struct store *s, const char *id, struct store_sandbox *ret) {
        if (!id)
                return -EINVAL;
        return s->ops->sandbox_get(s, id, ret);
}

int store_sandbox_list(struct store *s, size_t max, struct store_sandbox **ret, size_t *ret_n) {
        return s->ops->sandbox_list(s, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_sandbox_list_tenant(struct store *s, const char *tenant_id, size_t max, struct store_sandbox **ret,
                              size_t *ret_n) {
        if (!tenant_id)
                return -EINVAL;
        return s->ops->sandbox_list_tenant(s, tenant_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

/* ---- lifecycle events ---- */

/* The event of a sandbox moving from previous into state, or NULL when
 * state is no settled one (a verb in progress). */
static const char *event_type(const char *previous, const char *state) {
        static const struct {
                const char *from, *to, *type; /* from NULL: any */
        } map[] = {
                { "creating", "running", "sandbox.created" },     { "resuming", "running", "sandbox.resumed" },
                { "starting", "running", "sandbox.started" },     { "waking", "running", "sandbox.woken" },
                { "rolling_back", "running", "sandbox.rolled_back" }, { "recovering", "running", "sandbox.recovered" },
                { "failed", "running", "sandbox.recovered" },     { "lost", "running", "sandbox.recovered" },
                { NULL, "paused", "sandbox.paused" },             { NULL, "stopped", "sandbox.stopped" },
                { NULL, "suspended", "sandbox.suspended" },       { NULL, "failed", "sandbox.failed" },
                { NULL, "recovering", "sandbox.recovering" },     { NULL, "lost", "sandbox.lost" },
                { NULL, "archived", "sandbox.archived" },
        };
        if (previous && strcmp(previous, state) == 0)
                return NULL;
        for (size_t i = 0; i < ARRAY_SIZE(map); i++)
                if (strcmp(map[i].to, state) == 0 && (!map[i].from || (previous && strcmp(map[i].from, previous) == 0)))
                        return map[i].type;
        return NULL; /* running after a fork or a pause that failed: nothing changed for a client */
}

/* Appends an event. Every 256th append (of this process) prunes: what is
 * older than STORE_EVENTS_KEEP_MS and every webhook handled, and whatever
 * is older than STORE_EVENTS_WEBHOOK_KEEP_MS; a failed prune is tried
 * again 256 appends later. */
static int event_append(struct store *s, const struct store_event *ev) {
        static atomic_uint appended;
        int r = s->ops->event_insert(s, ev);
        if (r >= 0 && atomic_fetch_add(&appended, 1) % 256 == 0) {
                int64_t now = store_now_ms();
                (void) s->ops->event_prune(s, now - STORE_EVENTS_KEEP_MS, now - STORE_EVENTS_WEBHOOK_KEEP_MS);
        }
        return r;
}

/* Appends an event of the store's own; a failure is the event's, never the
 * change's. */
static void event_add(struct store *s, const char *tenant, const char *id, const char *type, const char *state,
                      const char *previous) {
        struct store_event ev = { .tenant_id = (char *) tenant, .sandbox_id = (char *) id, .type = (char *) type,
                                  .state = (char *) state, .previous = (char *) previous };
        (void) event_append(s, &ev);
}

/* After a change of id's state from before (read just before it) to state. */
static void state_changed(struct store *s, const struct store_sandbox *before, const char *id, const char *state) {
        const char *type = event_type(before->state, state);
        if (type)
                event_add(s, before->tenant_id, id, type, state, before->state);
}

int store_sandbox_update_state(struct store *s, const char *id, const char *state, const char *error) {
        if (!id || !state)
                return -EINVAL;
        _cleanup_(store_sandbox_release) struct store_sandbox before = { 0 };
        bool known = s->ops->sandbox_get(s, id, &before) >= 0;
        int r = s->ops->sandbox_update_state(s, id, state, error);
        if (r >= 0 && known)
                state_changed(s, &before, id, state);
        return r;
}

int store_sandbox_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        _cleanup_(store_sandbox_release) struct store_sandbox before = { 0 };
        bool known = s->ops->sandbox_get(s, id, &before) >= 0;
        int r = s->ops->sandbox_delete(s, id);
        if (r >= 0 && known)
                event_add(s, before.tenant_id, id, "sandbox.deleted", NULL, before.state);
        return r;
}

int store_event_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, int64_t after_id,
                     size_t max, struct store_event **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->event_list(s, all, tenant_id, sandbox_id, after_id, MIN(max, (size_t) STORE_LIST_MAX), ret,
                                  ret_n);
}

int store_event_last_id(struct store *s, int64_t before_ms, int64_t *ret) {
        return ret && before_ms >= 0 ? s->ops->event_last_id(s, before_ms, ret) : -EINVAL;
}

int store_event_append(struct store *s, const struct store_event *ev) {
        if (!ev || !ev->sandbox_id || !ev->type || !*ev->type || ev->ts_ms < 0)
                return -EINVAL;
        return event_append(s, ev);
}

/* ---- webhooks ---- */

int store_webhook_insert(struct store *s, const struct store_webhook *w) {
        if (!w || !w->id || !*w->id || !w->url || !*w->url || !w->events || !*w->events || !w->secret ||
            w->created_at < 0)
                return -EINVAL;
        return s->ops->webhook_insert(s, w, STORE_WEBHOOKS_MAX);
}

int store_webhook_get(struct store *s, const char *id, struct store_webhook *ret) {
        if (!id || !ret)
                return -EINVAL;
        return s->ops->webhook_get(s, id, ret);
}

int store_webhook_list(struct store *s, bool all, const char *tenant_id, struct store_webhook **ret,
                       size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->webhook_list(s, all, tenant_id, STORE_LIST_MAX, ret, ret_n);
}

int store_webhook_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->webhook_delete(s, id);
}

int store_webhook_advance(struct store *s, const char *id, int64_t from_cursor, const struct store_webhook *next) {
        /* a cursor never goes back: what it passed may be pruned already */
        if (!id || !next || from_cursor < 0 || next->cursor < from_cursor || next->attempts < 0 ||
            next->next_at < 0 || next->delivered < 0 || next->failed < 0)
                return -EINVAL;
        return s->ops->webhook_advance(s, id, from_cursor, next);
}

int store_webhook_delivery_insert(struct store *s, const struct store_webhook_delivery *d) {
        if (!d || !d->webhook_id || !d->event_type || d->ts_ms < 0 || d->attempt < 0 || d->status < 0 ||
            d->duration_ms < 0)
                return -EINVAL;
        return s->ops->webhook_delivery_insert(s, d, STORE_WEBHOOK_DELIVERIES_KEEP);
}

int store_webhook_delivery_list(struct store *s, const char *webhook_id, int64_t before_id, size_t max,
                                struct store_webhook_delivery **ret, size_t *ret_n) {
        if (!webhook_id || before_id < 0 || !ret || !ret_n)
                return -EINVAL;
        return s->ops->webhook_delivery_list(s, webhook_id, before_id, MIN(max, (size_t) STORE_LIST_MAX), ret,
                                             ret_n);
}

int store_image_insert(struct store *s, const struct store_image *img) {
        if (!img || !img->id || !img->sandbox_id || !img->template_name)
                return -EINVAL;
        return s->ops->image_insert(s, img);
}

int store_image_get(struct store *s, const char *id, struct store_image *ret) {
        if (!id || !ret)
                return -EINVAL;
        return s->ops->image_get(s, id, ret);
}

int store_image_find(struct store *s, const char *tenant_id, const char *name, struct store_image *ret) {
        if (!name || !ret)
                return -EINVAL;
        return s->ops->image_find(s, tenant_id, name, ret);
}

int store_image_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, size_t max,
                     struct store_image **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->image_list(s, all, tenant_id, sandbox_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_image_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->image_delete(s, id);
}

int store_volume_insert(struct store *s, const struct store_volume *v) {
        if (!v || !v->id || !v->name || !*v->name || v->size <= 0 || v->created_at < 0)
                return -EINVAL;
        return s->ops->volume_insert(s, v);
}

int store_volume_get(struct store *s, const char *id, struct store_volume *ret) {
        if (!id || !ret)
                return -EINVAL;
        return s->ops->volume_get(s, id, ret);
}

int store_volume_find(struct store *s, const char *tenant_id, const char *name, struct store_volume *ret) {
        if (!name || !ret)
                return -EINVAL;
        return s->ops->volume_find(s, tenant_id, name, ret);
}

int store_volume_list(struct store *s, bool all, const char *tenant_id, size_t max,
                      struct store_volume **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->volume_list(s, all, tenant_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_volume_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->volume_delete(s, id);
}

int store_volume_set_node(struct store *s, const char *id, const char *node) {
        if (!id)
                return -EINVAL;
        return s->ops->volume_set_node(s, id, node);
}

int store_volume_usage(struct store *s, const char *tenant_id, int64_t *ret_bytes, size_t *ret_n) {
        if (!ret_bytes || !ret_n)
                return -EINVAL;
        return s->ops->volume_usage(s, tenant_id, ret_bytes, ret_n);
}

int store_volume_hold_insert(struct store *s, const struct store_volume_hold *h) {
        if (!h || !h->sandbox_id || !h->volume_id || !h->path || h->slot < 0 ||
            h->slot >= STORE_VOLUME_SLOTS)
                return -EINVAL;
        return s->ops->volume_hold_insert(s, h);
}

int store_volume_holds_of_volume(struct store *s, const char *volume_id, struct store_volume_hold **ret,
                                 size_t *ret_n) {
        if (!volume_id || !ret || !ret_n)
                return -EINVAL;
        return s->ops->volume_holds_of_volume(s, volume_id, ret, ret_n);
}

int store_volume_holds_of_sandbox(struct store *s, const char *sandbox_id, struct store_volume_hold **ret,
                                  size_t *ret_n) {
        if (!sandbox_id || !ret || !ret_n)
                return -EINVAL;
        return s->ops->volume_holds_of_sandbox(s, sandbox_id, ret, ret_n);
}

static bool template_state_is_valid(const char *state) {
        return state && (strcmp(state, "building") == 0 || strcmp(state, "ready") == 0 ||
                         strcmp(state, "failed") == 0);
}

int store_template_put(struct store *s, const struct store_template *t) {
        if (!t || !t->tenant_id || !t->name || !*t->name || !t->node_name || !t->build_id ||
            !template_state_is_valid(t->state) || !t->spec || t->created_at < 0 || t->updated_at < 0)
                return -EINVAL;
        return s->ops->template_put(s, t, STORE_TEMPLATES_MAX);
}

int store_template_get(struct store *s, const char *tenant_id, const char *name, struct store_template *ret) {
        if (!tenant_id || !name || !ret)
                return -EINVAL;
        return s->ops->template_get(s, tenant_id, name, ret);
}

int store_template_list(struct store *s, const char *tenant_id, size_t max, struct store_template **ret,
                        size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->template_list(s, tenant_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_template_set_state(struct store *s, const char *tenant_id, const char *name, const char *build_id,
                             const char *state, const char *error, uint32_t memory_mib, uint32_t vcpus) {
        if (!tenant_id || !name || !build_id || !template_state_is_valid(state))
                return -EINVAL;
        return s->ops->template_set_state(s, tenant_id, name, build_id, state, error, memory_mib, vcpus);
}

int store_template_delete(struct store *s, const char *tenant_id, const char *name) {
        if (!tenant_id || !name)
                return -EINVAL;
        return s->ops->template_delete(s, tenant_id, name);
}

int store_template_node_refs(struct store *s, const char *node_name, size_t *ret_n) {
        if (!node_name || !ret_n)
                return -EINVAL;
        return s->ops->template_node_refs(s, node_name, ret_n);
}

int store_session_insert(struct store *s, const struct store_session *ses) {
        if (!ses || !ses->id || !ses->sandbox_id || !ses->cmd)
                return -EINVAL;
        return s->ops->session_insert(s, ses);
}

int store_session_get(struct store *s, const char *id, struct store_session *ret) {
        if (!id)
                return -EINVAL;
        return s->ops->session_get(s, id, ret);
}

int store_session_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->session_delete(s, id);
}

int store_api_key_insert(struct store *s, const char *name, const uint8_t hash[STORE_HASH_SIZE]) {
        if (!name || !*name || !hash)
                return -EINVAL;
        return s->ops->api_key_insert(s, name, hash);
}

int store_api_key_check(struct store *s, const uint8_t hash[STORE_HASH_SIZE]) {
        _cleanup_free_ char *tenant_id = NULL;
        return store_api_key_lookup(s, hash, &tenant_id);
}

int store_api_key_lookup(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        if (!hash || !ret_tenant_id)
                return -EINVAL;
        return s->ops->api_key_lookup(s, hash, ret_tenant_id);
}

int store_api_key_create(struct store *s, const char *id, const char *tenant_id, const char *name,
                         const uint8_t hash[STORE_HASH_SIZE], size_t max) {
        if (!id || !*id || !hash)
                return -EINVAL;
        return s->ops->api_key_create(s, id, tenant_id, name, hash, max);
}

int store_api_key_list(struct store *s, const char *tenant_id, size_t max, struct store_api_key **ret, size_t *ret_n) {
        if (!tenant_id)
                return -EINVAL;
        return s->ops->api_key_list(s, tenant_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_api_key_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->api_key_delete(s, id);
}

int store_tenant_insert(struct store *s, const struct store_tenant *t, size_t max) {
        if (!t || !t->id || !t->name)
                return -EINVAL;
        return s->ops->tenant_insert(s, t, max);
}

int store_tenant_get(struct store *s, const char *id, struct store_tenant *ret) {
        if (!id)
                return -EINVAL;
        return s->ops->tenant_get(s, id, ret);
}

int store_tenant_list(struct store *s, size_t max, struct store_tenant **ret, size_t *ret_n) {
        return s->ops->tenant_list(s, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_tenant_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->tenant_delete(s, id);
}

int store_tenant_network_set(struct store *s, const char *id, const char *network) {
        if (!id)
                return -EINVAL;
        return s->ops->tenant_network_set(s, id, network);
}

int store_sandbox_transition(struct store *s, const char *id, const char *from, const char *to, const char *desired) {
        if (!id || !from || !to)
                return -EINVAL;
        _cleanup_(store_sandbox_release) struct store_sandbox before = { 0 };
        const char *type = event_type(from, to);
        bool known = type && s->ops->sandbox_get(s, id, &before) >= 0;
        int r = s->ops->sandbox_transition(s, id, from, to, desired);
        if (r >= 0 && known)
                event_add(s, before.tenant_id, id, type, to, from);
        return r;
}

int store_sandbox_network_get(struct store *s, const char *id, char **ret) {
        if (!id || !ret)
                return -EINVAL;
        return s->ops->sandbox_network_get(s, id, ret);
}

int store_sandbox_expiry_set(struct store *s, const char *id, int64_t expires_at, int64_t expiry_s,
                             const char *on_expiry) {
        if (!id || expires_at < 0 || expiry_s < 0 ||
            (on_expiry && strcmp(on_expiry, "delete") != 0 && strcmp(on_expiry, "suspend") != 0))
                return -EINVAL;
        return s->ops->sandbox_expiry_set(s, id, expires_at, expiry_s, on_expiry);
}

int store_sandbox_network_set(struct store *s, const char *id, const char *state, const char *network) {
        if (!id || !state || !network)
                return -EINVAL;
        return s->ops->sandbox_network_set(s, id, state, network);
}

static bool operation_state_is_valid(const char *state) {
        return state && (strcmp(state, "pending") == 0 || strcmp(state, "running") == 0 ||
                         strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0);
}

int store_operation_insert(struct store *s, const struct store_operation *op) {
        if (!op || !op->id || !op->sandbox_id || !op->verb || !operation_state_is_valid(op->state) ||
            op->progress < 0 || op->progress > 100)
                return -EINVAL;
        return s->ops->operation_insert(s, op);
}

int store_operation_get(struct store *s, const char *id, struct store_operation *ret) {
        if (!id)
                return -EINVAL;
        return s->ops->operation_get(s, id, ret);
}

int store_operation_find_by_key(struct store *s, const char *key, struct store_operation *ret) {
        if (!key || !*key)
                return -EINVAL;
        return s->ops->operation_find_by_key(s, key, ret);
}

int store_operation_update(struct store *s, const char *id, const char *state, const char *error, const char *result) {
        if (!id || !operation_state_is_valid(state))
                return -EINVAL;
        return s->ops->operation_update(s, id, state, error, result);
}

int store_operation_progress(struct store *s, const char *id, int progress, const char *stage) {
        if (!id || progress < 0 || progress > 100)
                return -EINVAL;
        return s->ops->operation_progress(s, id, progress, stage);
}

int store_operation_fail_unfinished(struct store *s, const char *error) {
        return s->ops->operation_fail_unfinished(s, error);
}

int store_snapshot_insert(struct store *s, const struct store_snapshot *snap) {
        if (!snap || !snap->id || !snap->sandbox_id || !snap->kind || snap->size < 0)
                return -EINVAL;
        return s->ops->snapshot_insert(s, snap);
}

int store_snapshot_get(struct store *s, const char *id, struct store_snapshot *ret) {
        if (!id)
                return -EINVAL;
        return s->ops->snapshot_get(s, id, ret);
}

int store_snapshot_list(struct store *s, const char *sandbox_id, size_t max, struct store_snapshot **ret,
                        size_t *ret_n) {
        if (!sandbox_id)
                return -EINVAL;
        return s->ops->snapshot_list(s, sandbox_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_snapshot_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->snapshot_delete(s, id);
}

int store_api_key_id(struct store *s, const uint8_t hash[STORE_HASH_SIZE], char **ret_id) {
        if (!hash || !ret_id)
                return -EINVAL;
        return s->ops->api_key_id(s, hash, ret_id);
}

int store_secret_insert(struct store *s, const struct store_secret *sec) {
        if (!sec || !sec->name || !sec->spec || !sec->sealed || sec->sealed_len == 0)
                return -EINVAL;
        return s->ops->secret_insert(s, sec);
}

int store_secret_get(struct store *s, const char *tenant_id, const char *name, struct store_secret *ret) {
        if (!name || !ret)
                return -EINVAL;
        return s->ops->secret_get(s, tenant_id, name, ret);
}

int store_secret_list(struct store *s, const char *tenant_id, size_t max, struct store_secret **ret, size_t *ret_n) {
        return s->ops->secret_list(s, tenant_id, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_secret_delete(struct store *s, const char *tenant_id, const char *name) {
        if (!name)
                return -EINVAL;
        return s->ops->secret_delete(s, tenant_id, name);
}

int store_secret_users(struct store *s, const char *tenant_id, const char *name, size_t max, char ***ret,
                       size_t *ret_n) {
        if (!name)
                return -EINVAL;
        return s->ops->secret_users(s, tenant_id, name, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_sandbox_secret_insert(struct store *s, const char *tenant_id, const struct store_sandbox_secret *a) {
        if (!a || !a->sandbox_id || !a->name || !a->placeholder || !a->env_name)
                return -EINVAL;
        return s->ops->sandbox_secret_insert(s, tenant_id, a);
}

int store_sandbox_secret_list(struct store *s, const char *sandbox_id, struct store_sandbox_secret **ret,
                              size_t *ret_n) {
        if (!sandbox_id)
                return -EINVAL;
        return s->ops->sandbox_secret_list(s, sandbox_id, ret, ret_n);
}

int store_sandbox_secret_copy(struct store *s, const char *from_id, const char *to_id) {
        if (!from_id || !to_id)
                return -EINVAL;
        return s->ops->sandbox_secret_copy(s, from_id, to_id);
}

int store_audit_insert(struct store *s, const struct store_audit_event *ev, const char *source, const char *boot_id,
                       int64_t seq) {
        if (!ev || !ev->actor || !ev->action || (source && !boot_id))
                return -EINVAL;
        return s->ops->audit_insert(s, ev, source, boot_id, seq);
}

int store_audit_list(struct store *s, bool all, const char *tenant_id, const char *sandbox_id, const char *secret,
                     size_t max, struct store_audit_event **ret, size_t *ret_n) {
        return s->ops->audit_list(s, all, tenant_id, sandbox_id, secret, MIN(max, (size_t) STORE_LIST_MAX), ret,
                                  ret_n);
}

int store_audit_cursor_get(struct store *s, const char *source, char **ret_boot_id, int64_t *ret_seq) {
        if (!source || !ret_boot_id || !ret_seq)
                return -EINVAL;
        return s->ops->audit_cursor_get(s, source, ret_boot_id, ret_seq);
}

int store_audit_cursor_set(struct store *s, const char *source, const char *boot_id, int64_t seq) {
        if (!source || !boot_id)
                return -EINVAL;
        return s->ops->audit_cursor_set(s, source, boot_id, seq);
}

/* [a-z0-9-], 1..STORE_NODE_NAME_MAX: what a certificate's CN may be */
static bool node_name_is_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > STORE_NODE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-'))
                        return false;
        return true;
}

int store_node_insert(struct store *s, const struct store_node *n) {
        if (!n || !node_name_is_valid(n->name) || !n->address || n->joined_at < 0 || n->heartbeat_at < 0)
                return -EINVAL;
        return s->ops->node_insert(s, n);
}

int store_node_heartbeat(struct store *s, const struct store_node *n, bool *ret_was_lost, bool *ret_draining) {
        if (!n || !n->name || n->heartbeat_at < 0)
                return -EINVAL;
        bool was_lost = false, draining = false;
        int r = s->ops->node_heartbeat(s, n, &was_lost, &draining);
        if (r < 0)
                return r;
        if (ret_was_lost)
                *ret_was_lost = was_lost;
        if (ret_draining)
                *ret_draining = draining;
        return 0;
}

int store_node_get(struct store *s, const char *name, struct store_node *ret) {
        if (!name || !ret)
                return -EINVAL;
        return s->ops->node_get(s, name, ret);
}

int store_node_list(struct store *s, size_t max, struct store_node **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->node_list(s, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_node_set_draining(struct store *s, const char *name, bool draining) {
        if (!name)
                return -EINVAL;
        return s->ops->node_set_draining(s, name, draining);
}

int store_node_delete(struct store *s, const char *name) {
        if (!name)
                return -EINVAL;
        return s->ops->node_delete(s, name);
}

int store_nodes_mark_lost(struct store *s, int64_t cutoff, char ***ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        /* more than STORE_LIST_MAX silent nodes: the rest on the next call */
        return s->ops->nodes_mark_lost(s, cutoff, STORE_LIST_MAX, ret, ret_n);
}

int store_sandbox_move(struct store *s, const char *id, const char *state, const char *from, const char *to) {
        if (!id || !state)
                return -EINVAL;
        _cleanup_(store_sandbox_release) struct store_sandbox before = { 0 };
        bool known = s->ops->sandbox_get(s, id, &before) >= 0;
        int r = s->ops->sandbox_move(s, id, state, from, to);
        if (r >= 0 && known)
                state_changed(s, &before, id, state);
        return r;
}

int store_sandbox_list_node(struct store *s, const char *node, size_t max, struct store_sandbox **ret,
                            size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->sandbox_list_node(s, node, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_sandbox_count_by_node(struct store *s, char ***ret_names, int64_t **ret_counts, size_t *ret_n) {
        if (!ret_names || !ret_counts || !ret_n)
                return -EINVAL;
        return s->ops->sandbox_count_by(s, STORE_COUNT_BY_NODE, STORE_LIST_MAX, ret_names, ret_counts, ret_n);
}

int store_sandbox_count_by_state(struct store *s, char ***ret_names, int64_t **ret_counts, size_t *ret_n) {
        if (!ret_names || !ret_counts || !ret_n)
                return -EINVAL;
        return s->ops->sandbox_count_by(s, STORE_COUNT_BY_STATE, STORE_LIST_MAX, ret_names, ret_counts, ret_n);
}

int store_join_token_insert(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE],
                            int64_t expires_at) {
        if (!id || !*id || !hash || expires_at <= 0)
                return -EINVAL;
        return s->ops->join_token_insert(s, id, hash, expires_at);
}

int store_join_token_check(struct store *s, const char *id, const uint8_t hash[STORE_HASH_SIZE], int64_t now) {
        if (!id || !hash)
                return -EINVAL;
        return s->ops->join_token_check(s, id, hash, now);
}

int store_join_token_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->join_token_delete(s, id);
}

int store_cluster_ca(struct store *s, const char *cert_pem, const char *key_pem, char **ret_cert,
                     char **ret_key) {
        if (!cert_pem || !key_pem || !ret_cert || !ret_key)
                return -EINVAL;
        return s->ops->cluster_ca(s, cert_pem, key_pem, ret_cert, ret_key);
}

int store_cap_key_publish(struct store *s, const struct store_cap_key *k) {
        if (!k || !k->kid || !*k->kid || !k->public_key || k->created_at < 0)
                return -EINVAL;
        return s->ops->cap_key_publish(s, k);
}

int store_cap_key_list(struct store *s, size_t max, struct store_cap_key **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->cap_key_list(s, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_cap_key_delete(struct store *s, const char *kid) {
        if (!kid)
                return -EINVAL;
        return s->ops->cap_key_delete(s, kid);
}

int store_replica_seen(struct store *s, const struct store_replica *r) {
        if (!r || !r->id || !*r->id || r->started_at < 0 || r->seen_at < 0)
                return -EINVAL;
        return s->ops->replica_seen(s, r);
}

int store_replica_list(struct store *s, int64_t since, size_t max, struct store_replica **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->replica_list(s, since, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_replica_delete(struct store *s, const char *id) {
        if (!id)
                return -EINVAL;
        return s->ops->replica_delete(s, id);
}

int store_operation_lease_renew(struct store *s, const char *owner, int64_t until, uint64_t *ret_n) {
        if (!owner)
                return -EINVAL;
        uint64_t n = 0;
        int r = s->ops->operation_lease_renew(s, owner, until, &n);
        if (r >= 0 && ret_n)
                *ret_n = n;
        return r;
}

int store_operation_list_expired(struct store *s, int64_t now, size_t max, struct store_operation **ret,
                                 size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->operation_list_expired(s, now, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_operation_list_unfinished(struct store *s, size_t max, struct store_operation **ret, size_t *ret_n) {
        if (!ret || !ret_n)
                return -EINVAL;
        return s->ops->operation_list_unfinished(s, MIN(max, (size_t) STORE_LIST_MAX), ret, ret_n);
}

int store_operation_take_over(struct store *s, const char *id, const char *owner, int64_t now, int64_t until) {
        if (!id || !owner)
                return -EINVAL;
        return s->ops->operation_take_over(s, id, owner, now, until);
}

bool store_sandbox_holds_volumes(struct store *s, const char *sandbox_id) {
        struct store_volume_hold *holds = NULL;
        size_t n = 0;
        if (store_volume_holds_of_sandbox(s, sandbox_id, &holds, &n) < 0)
                return false;
        store_volume_hold_array_free(holds, n);
        return n > 0;
}
