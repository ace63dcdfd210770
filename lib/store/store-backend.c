/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the backends share: statements' parameters and the rows' insert
 * parameters, the row readers of every table, reading rows into lists,
 * and the constant-time API key match (store-backend.h).
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "store-backend.h"
#include "util.h"

int64_t store_now_ms(void) {
        return (int64_t) (now_realtime_ns() / 1000000ULL);
}

static void param(struct store_params *q, struct store_param p) {
        assert(q->n < STORE_PARAMS_MAX); /* the statements are ours */
        q->v[q->n++] = p;
}

void store_param_text(struct store_params *q, const char *v) {
        param(q, (struct store_param){ .kind = STORE_PARAM_TEXT, .null = !v, .v = v });
}

void store_param_int(struct store_params *q, int64_t v) {
        param(q, (struct store_param){ .kind = STORE_PARAM_INT, .i = v });
}

void store_param_null_int(struct store_params *q) {
        param(q, (struct store_param){ .kind = STORE_PARAM_INT, .null = true });
}

void store_param_int_or_null(struct store_params *q, int64_t v) {
        param(q, (struct store_param){ .kind = STORE_PARAM_INT, .null = v == 0, .i = v });
}

void store_param_bool(struct store_params *q, bool v) {
        param(q, (struct store_param){ .kind = STORE_PARAM_BOOL, .i = v ? 1 : 0 });
}

void store_param_blob(struct store_params *q, const void *v, size_t n) {
        param(q, (struct store_param){ .kind = STORE_PARAM_BLOB, .null = !v, .v = v, .len = n });
}

void store_params_sandbox(struct store_params *q, const struct store_sandbox *sb) {
        int64_t now = store_now_ms();
        store_param_text(q, sb->id);
        store_param_text(q, sb->template_name);
        store_param_text(q, sb->state);
        store_param_text(q, sb->error);
        store_param_text(q, sb->metadata ? sb->metadata : "{}");
        store_param_text(q, sb->env_keys ? sb->env_keys : "[]");
        store_param_int(q, sb->created_at ? sb->created_at : now);
        store_param_int(q, sb->updated_at ? sb->updated_at : now);
        store_param_text(q, sb->desired_state);
        store_param_text(q, sb->snapshot_policy);
        if (sb->has_idle_timeout)
                store_param_int(q, sb->idle_timeout_s);
        else
                store_param_null_int(q);
        store_param_text(q, sb->tenant_id);
        store_param_text(q, sb->network);
        store_param_int_or_null(q, sb->expires_at);
        store_param_int_or_null(q, sb->expiry_s);
        store_param_text(q, sb->on_expiry);
        store_param_text(q, sb->node);
        store_param_int_or_null(q, sb->memory_mib);
        store_param_int_or_null(q, sb->vcpus);
}

void store_params_operation(struct store_params *q, const struct store_operation *op) {
        store_param_text(q, op->id);
        store_param_text(q, op->sandbox_id);
        store_param_text(q, op->verb);
        store_param_text(q, op->state);
        store_param_text(q, op->error);
        store_param_text(q, op->result);
        store_param_text(q, op->idempotency_key);
        store_param_int(q, op->created_at ? op->created_at : store_now_ms());
        store_param_text(q, op->request_hash);
        store_param_text(q, op->stage);
        store_param_int(q, op->progress);
        store_param_text(q, op->tenant_id);
        store_param_text(q, op->owner);
        store_param_int_or_null(q, op->lease_until);
        store_param_text(q, op->detail);
}

void store_params_snapshot(struct store_params *q, const struct store_snapshot *snap) {
        store_param_text(q, snap->id);
        store_param_text(q, snap->sandbox_id);
        store_param_text(q, snap->kind);
        store_param_int(q, snap->size);
        store_param_int(q, snap->created_at ? snap->created_at : store_now_ms());
        store_param_bool(q, snap->pinned);
}

void store_params_session(struct store_params *q, const struct store_session *ses) {
        store_param_text(q, ses->id);
        store_param_text(q, ses->sandbox_id);
        store_param_text(q, ses->cmd);
        store_param_bool(q, ses->pty);
        store_param_blob(q, ses->token_hash, STORE_HASH_SIZE);
        store_param_int(q, ses->created_at ? ses->created_at : store_now_ms());
}

void store_params_tenant(struct store_params *q, const struct store_tenant *t, size_t max) {
        store_param_text(q, t->id);
        store_param_text(q, t->name);
        store_param_int(q, t->created_at ? t->created_at : store_now_ms());
        store_param_int(q, (int64_t) MIN(max, (size_t) INT64_MAX));
        store_param_text(q, t->network);
}

void store_params_image(struct store_params *q, const struct store_image *img) {
        store_param_text(q, img->id);
        store_param_text(q, img->tenant_id);
        store_param_text(q, img->name);
        store_param_text(q, img->sandbox_id);
        store_param_text(q, img->template_name);
        store_param_int(q, img->size);
        store_param_int(q, img->created_at ? img->created_at : store_now_ms());
        store_param_text(q, img->kind ? img->kind : "full");
        store_param_text(q, img->snapshot_id);
}

/* A volume's insert parameters, in STORE_VOLUME_COLUMNS' order. */
void store_params_volume(struct store_params *q, const struct store_volume *v) {
        store_param_text(q, v->id);
        store_param_text(q, v->tenant_id);
        store_param_text(q, v->name);
        store_param_int(q, v->size);
        store_param_text(q, v->node);
        store_param_text(q, v->source_id);
        store_param_int(q, v->created_at ?: store_now_ms());
}

void store_params_template(struct store_params *q, const struct store_template *t, size_t max) {
        int64_t now = store_now_ms();
        store_param_text(q, t->tenant_id);
        store_param_text(q, t->name);
        store_param_text(q, t->node_name);
        store_param_text(q, t->build_id);
        store_param_text(q, t->state);
        store_param_text(q, t->error);
        store_param_text(q, t->node);
        store_param_text(q, t->spec);
        store_param_int(q, t->memory_mib);
        store_param_int(q, t->vcpus);
        store_param_int(q, t->created_at ?: now);
        store_param_int(q, t->updated_at ?: now);
        store_param_int(q, (int64_t) MIN(max, (size_t) INT64_MAX));
}

void store_params_secret(struct store_params *q, const struct store_secret *sec) {
        store_param_text(q, sec->tenant_id);
        store_param_text(q, sec->name);
        store_param_text(q, sec->sandbox_id);
        store_param_text(q, sec->spec);
        store_param_int(q, sec->expires_at);
        store_param_blob(q, sec->sealed, sec->sealed_len);
        store_param_int(q, sec->created_at ? sec->created_at : store_now_ms());
        store_param_text(q, sec->created_by);
}

void store_params_audit_event(struct store_params *q, const struct store_audit_event *ev, const char *source,
                              const char *boot_id, int64_t seq) {
        store_param_int(q, ev->ts_ms ? ev->ts_ms : store_now_ms());
        store_param_text(q, ev->tenant_id);
        store_param_text(q, ev->actor);
        store_param_text(q, ev->sandbox_id);
        store_param_text(q, ev->secret);
        store_param_text(q, ev->host);
        store_param_int_or_null(q, ev->port > 0 ? ev->port : 0);
        store_param_text(q, ev->method);
        store_param_text(q, ev->path);
        store_param_text(q, ev->action);
        store_param_text(q, ev->reason);
        store_param_text(q, source);
        store_param_text(q, boot_id);
        if (source)
                store_param_int(q, seq);
        else
                store_param_null_int(q);
}

void store_params_event(struct store_params *q, const struct store_event *ev) {
        store_param_int(q, ev->ts_ms ? ev->ts_ms : store_now_ms());
        store_param_text(q, ev->tenant_id);
        store_param_text(q, ev->sandbox_id);
        store_param_text(q, ev->type);
        store_param_text(q, ev->state);
        store_param_text(q, ev->previous);
        store_param_text(q, ev->detail);
}

void store_params_webhook(struct store_params *q, const struct store_webhook *w, size_t max) {
        store_param_text(q, w->id);
        store_param_text(q, w->tenant_id);
        store_param_text(q, w->url);
        store_param_text(q, w->events);
        store_param_text(q, w->secret);
        store_param_int(q, w->created_at ?: store_now_ms());
        store_param_int(q, (int64_t) MIN(max, (size_t) INT64_MAX));
}

void store_params_webhook_delivery(struct store_params *q, const struct store_webhook_delivery *d) {
        store_param_text(q, d->webhook_id);
        store_param_int(q, d->event_id);
        store_param_text(q, d->event_type);
        store_param_text(q, d->sandbox_id);
        store_param_int(q, d->ts_ms ?: store_now_ms());
        store_param_int(q, d->attempt);
        store_param_int(q, d->status);
        store_param_text(q, d->error);
        store_param_int(q, d->duration_ms);
}

void store_params_node(struct store_params *q, const struct store_node *n) {
        int64_t now = store_now_ms();
        store_param_text(q, n->name);
        store_param_text(q, n->address);
        store_param_text(q, n->boot_id);
        store_param_text(q, n->info ?: "{}");
        store_param_bool(q, n->draining);
        store_param_int_or_null(q, n->lost_at);
        store_param_int(q, n->joined_at ?: now);
        store_param_int(q, n->heartbeat_at ?: now);
}

void store_params_node_beat(struct store_params *q, const struct store_node *n) {
        store_param_text(q, n->name);
        store_param_text(q, n->address);
        store_param_text(q, n->boot_id);
        store_param_text(q, n->info);
        store_param_int(q, n->heartbeat_at ?: store_now_ms());
}

void store_params_cap_key(struct store_params *q, const struct store_cap_key *k) {
        store_param_text(q, k->kid);
        store_param_text(q, k->public_key);
        store_param_text(q, k->replica);
        store_param_int(q, k->created_at ?: store_now_ms());
}

void store_params_replica(struct store_params *q, const struct store_replica *p) {
        int64_t now = store_now_ms();
        store_param_text(q, p->id);
        store_param_text(q, p->cluster_address);
        store_param_text(q, p->api_address);
        store_param_int(q, p->started_at ?: now);
        store_param_int(q, p->seen_at ?: now);
}

int store_row_strdup(const struct store_row *r, int col, char **ret) {
        const char *t = store_row_text(r, col);
        if (!t) {
                *ret = NULL;
                return 0;
        }
        char *c = strdup(t);
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

int store_read_sandbox(const struct store_row *r, void *ret) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &sb.id)) < 0 || (k = store_row_strdup(r, 1, &sb.template_name)) < 0 ||
            (k = store_row_strdup(r, 2, &sb.state)) < 0 || (k = store_row_strdup(r, 3, &sb.error)) < 0 ||
            (k = store_row_strdup(r, 4, &sb.metadata)) < 0 || (k = store_row_strdup(r, 5, &sb.env_keys)) < 0 ||
            (k = store_row_strdup(r, 8, &sb.desired_state)) < 0 ||
            (k = store_row_strdup(r, 9, &sb.snapshot_policy)) < 0 ||
            (k = store_row_strdup(r, 11, &sb.tenant_id)) < 0 ||
            (k = store_row_strdup(r, 14, &sb.on_expiry)) < 0 || (k = store_row_strdup(r, 15, &sb.node)) < 0)
                return k;
        if (!sb.id || !sb.template_name || !sb.state || !sb.metadata || !sb.env_keys)
                return -EBADMSG;
        sb.created_at = store_row_int64(r, 6);
        sb.updated_at = store_row_int64(r, 7);
        sb.has_idle_timeout = !r->ops->is_null(r, 10);
        sb.idle_timeout_s = store_row_int64(r, 10);
        sb.expires_at = store_row_int64(r, 12); /* NULL reads as 0: never */
        sb.expiry_s = store_row_int64(r, 13);
        sb.memory_mib = store_row_int64(r, 16); /* NULL reads as 0: the template's */
        sb.vcpus = store_row_int64(r, 17);
        *(struct store_sandbox *) ret = sb;
        sb = (struct store_sandbox){ 0 };
        return 0;
}

int store_read_snapshot(const struct store_row *r, void *ret) {
        _cleanup_(store_snapshot_release) struct store_snapshot snap = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &snap.id)) < 0 || (k = store_row_strdup(r, 1, &snap.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 2, &snap.kind)) < 0)
                return k;
        if (!snap.id || !snap.sandbox_id || !snap.kind)
                return -EBADMSG;
        snap.size = store_row_int64(r, 3);
        snap.created_at = store_row_int64(r, 4);
        snap.pinned = store_row_int64(r, 5) != 0;
        *(struct store_snapshot *) ret = snap;
        snap = (struct store_snapshot){ 0 };
        return 0;
}

int store_read_operation(const struct store_row *r, void *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &op.id)) < 0 || (k = store_row_strdup(r, 1, &op.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 2, &op.verb)) < 0 || (k = store_row_strdup(r, 3, &op.state)) < 0 ||
            (k = store_row_strdup(r, 4, &op.error)) < 0 || (k = store_row_strdup(r, 5, &op.result)) < 0 ||
            (k = store_row_strdup(r, 6, &op.idempotency_key)) < 0 ||
            (k = store_row_strdup(r, 9, &op.request_hash)) < 0 || (k = store_row_strdup(r, 10, &op.stage)) < 0 ||
            (k = store_row_strdup(r, 12, &op.tenant_id)) < 0 || (k = store_row_strdup(r, 13, &op.owner)) < 0 ||
            (k = store_row_strdup(r, 15, &op.detail)) < 0)
                return k;
        if (!op.id || !op.sandbox_id || !op.verb || !op.state)
                return -EBADMSG;
        op.created_at = store_row_int64(r, 7);
        op.finished_at = store_row_int64(r, 8); /* NULL reads as 0 */
        op.progress = (int) store_row_int64(r, 11);
        op.lease_until = store_row_int64(r, 14); /* NULL reads as 0 */
        *(struct store_operation *) ret = op;
        op = (struct store_operation){ 0 };
        return 0;
}

int store_read_session(const struct store_row *r, void *ret) {
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &ses.id)) < 0 || (k = store_row_strdup(r, 1, &ses.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 2, &ses.cmd)) < 0)
                return k;
        size_t n = 0;
        const void *h = r->ops->blob(r, 4, &n);
        if (!ses.id || !ses.sandbox_id || !ses.cmd || !h || n != STORE_HASH_SIZE)
                return -EBADMSG;
        memcpy(ses.token_hash, h, STORE_HASH_SIZE);
        ses.pty = store_row_int64(r, 3) != 0;
        ses.created_at = store_row_int64(r, 5);
        *(struct store_session *) ret = ses;
        ses = (struct store_session){ 0 };
        return 0;
}

int store_read_api_key(const struct store_row *r, void *ret) {
        _cleanup_(store_api_key_release) struct store_api_key key = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &key.id)) < 0 || (k = store_row_strdup(r, 1, &key.tenant_id)) < 0 ||
            (k = store_row_strdup(r, 2, &key.name)) < 0)
                return k;
        if (!key.id)
                return -EBADMSG;
        key.created_at = store_row_int64(r, 3);
        *(struct store_api_key *) ret = key;
        key = (struct store_api_key){ 0 };
        return 0;
}

int store_read_tenant(const struct store_row *r, void *ret) {
        _cleanup_(store_tenant_release) struct store_tenant t = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &t.id)) < 0 || (k = store_row_strdup(r, 1, &t.name)) < 0 ||
            (k = store_row_strdup(r, 3, &t.network)) < 0)
                return k;
        if (!t.id || !t.name)
                return -EBADMSG;
        t.created_at = store_row_int64(r, 2);
        *(struct store_tenant *) ret = t;
        t = (struct store_tenant){ 0 };
        return 0;
}

int store_read_secret(const struct store_row *r, void *ret) {
        _cleanup_(store_secret_release) struct store_secret sec = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &sec.tenant_id)) < 0 || (k = store_row_strdup(r, 1, &sec.name)) < 0 ||
            (k = store_row_strdup(r, 2, &sec.sandbox_id)) < 0 || (k = store_row_strdup(r, 3, &sec.spec)) < 0 ||
            (k = store_row_strdup(r, 6, &sec.created_by)) < 0)
                return k;
        if (!sec.name || !sec.spec)
                return -EBADMSG;
        sec.expires_at = store_row_int64(r, 4);
        sec.created_at = store_row_int64(r, 5);
        if (r->ops->ncols(r) > 7) { /* selected with its sealed value */
                size_t n = 0;
                const void *b = r->ops->blob(r, 7, &n);
                if (!b || n == 0)
                        return -EBADMSG;
                sec.sealed = malloc(n);
                if (!sec.sealed)
                        return -ENOMEM;
                memcpy(sec.sealed, b, n);
                sec.sealed_len = n;
        }
        *(struct store_secret *) ret = sec;
        sec = (struct store_secret){ 0 };
        return 0;
}

int store_read_image(const struct store_row *r, void *ret) {
        _cleanup_(store_image_release) struct store_image img = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &img.id)) < 0 || (k = store_row_strdup(r, 1, &img.tenant_id)) < 0 ||
            (k = store_row_strdup(r, 2, &img.name)) < 0 || (k = store_row_strdup(r, 3, &img.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 4, &img.template_name)) < 0 || (k = store_row_strdup(r, 7, &img.kind)) < 0 ||
            (k = store_row_strdup(r, 8, &img.snapshot_id)) < 0)
                return k;
        if (!img.id || !img.sandbox_id || !img.template_name || !img.kind)
                return -EBADMSG;
        img.size = store_row_int64(r, 5);
        img.created_at = store_row_int64(r, 6);
        *(struct store_image *) ret = img;
        img = (struct store_image){ 0 };
        return 0;
}

int store_read_volume(const struct store_row *r, void *ret) {
        _cleanup_(store_volume_release) struct store_volume v = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &v.id)) < 0 || (k = store_row_strdup(r, 1, &v.tenant_id)) < 0 ||
            (k = store_row_strdup(r, 2, &v.name)) < 0 || (k = store_row_strdup(r, 4, &v.node)) < 0 ||
            (k = store_row_strdup(r, 5, &v.source_id)) < 0)
                return k;
        if (!v.id || !v.name)
                return -EBADMSG;
        v.size = store_row_int64(r, 3);
        v.created_at = store_row_int64(r, 6);
        *(struct store_volume *) ret = v;
        v = (struct store_volume){ 0 };
        return 0;
}

int store_read_volume_hold(const struct store_row *r, void *ret) {
        _cleanup_(store_volume_hold_release) struct store_volume_hold h = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &h.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 1, &h.volume_id)) < 0 || (k = store_row_strdup(r, 3, &h.path)) < 0)
                return k;
        int64_t slot = store_row_int64(r, 2);
        if (!h.sandbox_id || !h.volume_id || !h.path || slot < 0 || slot >= STORE_VOLUME_SLOTS)
                return -EBADMSG;
        h.slot = (int) slot;
        h.read_only = store_row_int64(r, 4) != 0;
        *(struct store_volume_hold *) ret = h;
        h = (struct store_volume_hold){ 0 };
        return 0;
}

/* NULL in a text column as "" */
static int strdup_or_empty(const struct store_row *r, int col, char **ret) {
        char *c = strdup(store_row_text(r, col) ?: "");
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

int store_read_template(const struct store_row *r, void *ret) {
        _cleanup_(store_template_release) struct store_template t = { 0 };
        int k;
        if ((k = strdup_or_empty(r, 0, &t.tenant_id)) < 0 || (k = store_row_strdup(r, 1, &t.name)) < 0 ||
            (k = store_row_strdup(r, 2, &t.node_name)) < 0 || (k = store_row_strdup(r, 3, &t.build_id)) < 0 ||
            (k = store_row_strdup(r, 4, &t.state)) < 0 || (k = store_row_strdup(r, 5, &t.error)) < 0 ||
            (k = strdup_or_empty(r, 6, &t.node)) < 0 || (k = store_row_strdup(r, 7, &t.spec)) < 0)
                return k;
        if (!t.name || !t.node_name || !t.build_id || !t.state || !t.spec)
                return -EBADMSG;
        int64_t memory_mib = store_row_int64(r, 8), vcpus = store_row_int64(r, 9);
        if (memory_mib < 0 || memory_mib > UINT32_MAX || vcpus < 0 || vcpus > UINT32_MAX)
                return -EBADMSG;
        t.memory_mib = (uint32_t) memory_mib;
        t.vcpus = (uint32_t) vcpus;
        t.created_at = store_row_int64(r, 10);
        t.updated_at = store_row_int64(r, 11);
        *(struct store_template *) ret = t;
        t = (struct store_template){ 0 };
        return 0;
}

int store_read_event(const struct store_row *r, void *ret) {
        struct store_event e = { .id = store_row_int64(r, 0), .ts_ms = store_row_int64(r, 1) };
        int k;
        if ((k = store_row_strdup(r, 2, &e.tenant_id)) < 0 || (k = store_row_strdup(r, 3, &e.sandbox_id)) < 0 ||
            (k = store_row_strdup(r, 4, &e.type)) < 0 || (k = store_row_strdup(r, 5, &e.state)) < 0 ||
            (k = store_row_strdup(r, 6, &e.previous)) < 0 || (k = store_row_strdup(r, 7, &e.detail)) < 0 ||
            !e.sandbox_id || !e.type) {
                store_event_array_free(NULL, 0);
                free(e.tenant_id);
                free(e.sandbox_id);
                free(e.type);
                free(e.state);
                free(e.previous);
                free(e.detail);
                return k < 0 ? k : -EBADMSG;
        }
        *(struct store_event *) ret = e;
        return 0;
}

int store_read_webhook(const struct store_row *r, void *ret) {
        _cleanup_(store_webhook_release) struct store_webhook w = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &w.id)) < 0 || (k = store_row_strdup(r, 1, &w.tenant_id)) < 0 ||
            (k = store_row_strdup(r, 2, &w.url)) < 0 || (k = store_row_strdup(r, 3, &w.events)) < 0 ||
            (k = store_row_strdup(r, 4, &w.secret)) < 0 || (k = store_row_strdup(r, 9, &w.last_error)) < 0)
                return k;
        int64_t attempts = store_row_int64(r, 7);
        if (!w.id || !w.url || !w.events || !w.secret || attempts < 0 || attempts > INT_MAX)
                return -EBADMSG;
        w.created_at = store_row_int64(r, 5);
        w.cursor = store_row_int64(r, 6);
        w.attempts = (int) attempts;
        w.next_at = store_row_int64(r, 8);
        w.delivered = store_row_int64(r, 10);
        w.failed = store_row_int64(r, 11);
        *(struct store_webhook *) ret = w;
        w = (struct store_webhook){ 0 };
        return 0;
}

int store_read_webhook_delivery(const struct store_row *r, void *ret) {
        _cleanup_(store_webhook_delivery_release) struct store_webhook_delivery d = { 0 };
        int k;
        if ((k = store_row_strdup(r, 1, &d.webhook_id)) < 0 || (k = store_row_strdup(r, 3, &d.event_type)) < 0 ||
            (k = store_row_strdup(r, 4, &d.sandbox_id)) < 0 || (k = store_row_strdup(r, 8, &d.error)) < 0)
                return k;
        int64_t attempt = store_row_int64(r, 6), status = store_row_int64(r, 7);
        if (!d.webhook_id || !d.event_type || attempt < INT_MIN || attempt > INT_MAX || status < INT_MIN ||
            status > INT_MAX)
                return -EBADMSG;
        d.id = store_row_int64(r, 0);
        d.event_id = store_row_int64(r, 2);
        d.ts_ms = store_row_int64(r, 5);
        d.attempt = (int) attempt;
        d.status = (int) status;
        d.duration_ms = store_row_int64(r, 9);
        *(struct store_webhook_delivery *) ret = d;
        d = (struct store_webhook_delivery){ 0 };
        return 0;
}

int store_read_audit_event(const struct store_row *r, void *ret) {
        _cleanup_(store_audit_event_release) struct store_audit_event e = { 0 };
        int k;
        if ((k = store_row_strdup(r, 2, &e.tenant_id)) < 0 || (k = store_row_strdup(r, 3, &e.actor)) < 0 ||
            (k = store_row_strdup(r, 4, &e.sandbox_id)) < 0 || (k = store_row_strdup(r, 5, &e.secret)) < 0 ||
            (k = store_row_strdup(r, 6, &e.host)) < 0 || (k = store_row_strdup(r, 8, &e.method)) < 0 ||
            (k = store_row_strdup(r, 9, &e.path)) < 0 || (k = store_row_strdup(r, 10, &e.action)) < 0 ||
            (k = store_row_strdup(r, 11, &e.reason)) < 0)
                return k;
        if (!e.actor || !e.action)
                return -EBADMSG;
        e.id = store_row_int64(r, 0);
        e.ts_ms = store_row_int64(r, 1);
        e.port = (int) store_row_int64(r, 7);
        *(struct store_audit_event *) ret = e;
        e = (struct store_audit_event){ 0 };
        return 0;
}

int store_read_attachment(const struct store_row *r, void *ret) {
        struct store_sandbox_secret a = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &a.sandbox_id)) < 0 || (k = store_row_strdup(r, 1, &a.name)) < 0 ||
            (k = store_row_strdup(r, 2, &a.placeholder)) < 0 || (k = store_row_strdup(r, 3, &a.env_name)) < 0 ||
            (k = a.sandbox_id && a.name && a.placeholder && a.env_name ? 0 : -EBADMSG) < 0) {
                free(a.sandbox_id);
                free(a.name);
                free(a.placeholder);
                free(a.env_name);
                return k;
        }
        *(struct store_sandbox_secret *) ret = a;
        return 0;
}

int store_read_audit_cursor(const struct store_row *r, void *ret) {
        char *boot_id = NULL;
        int k = store_row_strdup(r, 0, &boot_id);
        if (k < 0)
                return k;
        if (!boot_id)
                return -EBADMSG;
        *(struct store_audit_cursor *) ret = (struct store_audit_cursor){ boot_id, store_row_int64(r, 1) };
        return 0;
}

int store_read_node(const struct store_row *r, void *ret) {
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &n.name)) < 0 || (k = store_row_strdup(r, 1, &n.address)) < 0 ||
            (k = store_row_strdup(r, 2, &n.boot_id)) < 0 || (k = store_row_strdup(r, 3, &n.info)) < 0)
                return k;
        if (!n.name || !n.address || !n.info)
                return -EBADMSG;
        n.draining = store_row_int64(r, 4) != 0;
        n.lost_at = store_row_int64(r, 5); /* NULL reads as 0: not lost */
        n.joined_at = store_row_int64(r, 6);
        n.heartbeat_at = store_row_int64(r, 7);
        *(struct store_node *) ret = n;
        n = (struct store_node){ 0 };
        return 0;
}

int store_read_cap_key(const struct store_row *r, void *ret) {
        struct store_cap_key c = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &c.kid)) < 0 || (k = store_row_strdup(r, 1, &c.public_key)) < 0 ||
            (k = store_row_strdup(r, 2, &c.replica)) < 0 || (k = c.kid && c.public_key ? 0 : -EBADMSG) < 0) {
                free(c.kid);
                free(c.public_key);
                free(c.replica);
                return k;
        }
        c.created_at = store_row_int64(r, 3);
        *(struct store_cap_key *) ret = c;
        return 0;
}

int store_read_replica(const struct store_row *r, void *ret) {
        struct store_replica p = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &p.id)) < 0 || (k = store_row_strdup(r, 1, &p.cluster_address)) < 0 ||
            (k = store_row_strdup(r, 2, &p.api_address)) < 0 || (k = p.id ? 0 : -EBADMSG) < 0) {
                free(p.id);
                free(p.cluster_address);
                free(p.api_address);
                return k;
        }
        p.started_at = store_row_int64(r, 3);
        p.seen_at = store_row_int64(r, 4);
        *(struct store_replica *) ret = p;
        return 0;
}

int store_read_node_beat(const struct store_row *r, void *ret) {
        *(struct store_node_beat *) ret = (struct store_node_beat){
                .was_lost = store_row_int64(r, 0) != 0,
                .draining = store_row_int64(r, 1) != 0,
        };
        return 0;
}

int store_read_node_count(const struct store_row *r, void *ret) {
        char *node = NULL;
        int k = store_row_strdup(r, 0, &node);
        if (k < 0)
                return k;
        *(struct store_node_count *) ret = (struct store_node_count){ node, store_row_int64(r, 1) };
        return 0;
}

static void node_count_array_free(struct store_node_count *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                free(a[i].node);
        free(a);
}

int store_node_counts_split(struct store_node_count *a, size_t n, char ***ret_names, int64_t **ret_counts,
                            size_t *ret_n) {
        char **names = calloc(n ?: 1, sizeof *names);
        int64_t *counts = calloc(n ?: 1, sizeof *counts);
        if (!names || !counts) {
                free(names);
                free(counts);
                node_count_array_free(a, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                names[i] = a[i].node;
                counts[i] = a[i].count;
        }
        free(a);
        *ret_names = names;
        *ret_counts = counts;
        *ret_n = n;
        return 0;
}

int store_read_ca_pem(const struct store_row *r, void *ret) {
        struct store_ca_pem ca = { 0 };
        int k;
        if ((k = store_row_strdup(r, 0, &ca.cert)) < 0 || (k = store_row_strdup(r, 1, &ca.key)) < 0 ||
            (k = ca.cert && ca.key ? 0 : -EBADMSG) < 0) {
                free(ca.cert);
                free(ca.key);
                return k;
        }
        *(struct store_ca_pem *) ret = ca;
        return 0;
}

int store_read_join_token(const struct store_row *r, void *ret) {
        size_t n = 0;
        const void *h = r->ops->blob(r, 0, &n);
        if (!h || n != STORE_HASH_SIZE)
                return -EBADMSG;
        struct store_join_token *t = ret;
        memcpy(t->hash, h, STORE_HASH_SIZE);
        t->expires_at = store_row_int64(r, 1);
        return 0;
}

int store_join_token_verdict(bool found, const struct store_join_token *t, const uint8_t hash[STORE_HASH_SIZE],
                             int64_t now) {
        if (!found || sodium_memcmp(t->hash, hash, STORE_HASH_SIZE) != 0)
                return -ENOENT;
        return t->expires_at <= now ? -EKEYEXPIRED : 0;
}

int store_read_int64(const struct store_row *r, void *ret) {
        *(int64_t *) ret = store_row_int64(r, 0);
        return 0;
}

int store_read_text(const struct store_row *r, void *ret) {
        return store_row_strdup(r, 0, ret);
}

int store_read_string(const struct store_row *r, void *ret) {
        char *s = NULL;
        int k = store_row_strdup(r, 0, &s);
        if (k < 0)
                return k;
        if (!s)
                return -EBADMSG;
        *(char **) ret = s;
        return 0;
}

int store_rows_one(struct store_row *r, int (*read_row)(const struct store_row *, void *), void *ret) {
        int k = r->next(r);
        if (k < 0)
                return k;
        return k == 0 ? -ENOENT : read_row(r, ret);
}

/* Reads at most max rows through read_row into a growing array of
 * elem-sized elements; on failure *a and *n still describe what was read. */
static int rows_collect(struct store_row *r, size_t elem, size_t max,
                        int (*read_row)(const struct store_row *, void *), void **a, size_t *n) {
        size_t cap = 0;
        while (*n < max) {
                int k = r->next(r);
                if (k <= 0)
                        return k;
                if (*n == cap) {
                        size_t ncap = cap ? cap * 2 : 8;
                        void *na = realloc(*a, ncap * elem);
                        if (!na)
                                return -ENOMEM;
                        memset((char *) na + cap * elem, 0, (ncap - cap) * elem);
                        *a = na;
                        cap = ncap;
                }
                k = read_row(r, (char *) *a + *n * elem);
                if (k < 0)
                        return k;
                (*n)++;
        }
        return 0;
}

int store_rows_list(struct store_row *r, const struct store_list *list, size_t max, void *ret, size_t *ret_n) {
        void *a = NULL;
        size_t n = 0;
        int k = rows_collect(r, list->elem, max, list->read_row, &a, &n);
        if (k < 0) {
                list->array_free(a, n);
                return k;
        }
        *(void **) ret = a;
        *ret_n = n;
        return 0;
}

static void node_beat_array_free(struct store_node_beat *a, size_t n) {
        free(a);
}

/* store_list_<name>: rows of type read by reader, an array of them freed
 * by free_array (through a wrapper of the destructor's own type). */
#define STORE_LIST(name, type, reader, free_array)                                       \
        static void name##_list_free(void *a, size_t n) {                               \
                free_array(a, n);                                                        \
        }                                                                                \
        const struct store_list store_list_##name = { sizeof(type), reader, name##_list_free }

STORE_LIST(sandbox, struct store_sandbox, store_read_sandbox, store_sandbox_array_free);
STORE_LIST(snapshot, struct store_snapshot, store_read_snapshot, store_snapshot_array_free);
STORE_LIST(operation, struct store_operation, store_read_operation, store_operation_array_free);
STORE_LIST(api_key, struct store_api_key, store_read_api_key, store_api_key_array_free);
STORE_LIST(tenant, struct store_tenant, store_read_tenant, store_tenant_array_free);
STORE_LIST(secret, struct store_secret, store_read_secret, store_secret_array_free);
STORE_LIST(image, struct store_image, store_read_image, store_image_array_free);
STORE_LIST(volume, struct store_volume, store_read_volume, store_volume_array_free);
STORE_LIST(volume_hold, struct store_volume_hold, store_read_volume_hold, store_volume_hold_array_free);
STORE_LIST(template, struct store_template, store_read_template, store_template_array_free);
STORE_LIST(audit_event, struct store_audit_event, store_read_audit_event, store_audit_event_array_free);
STORE_LIST(event, struct store_event, store_read_event, store_event_array_free);
STORE_LIST(attachment, struct store_sandbox_secret, store_read_attachment, store_sandbox_secret_array_free);
STORE_LIST(node, struct store_node, store_read_node, store_node_array_free);
STORE_LIST(cap_key, struct store_cap_key, store_read_cap_key, store_cap_key_array_free);
STORE_LIST(replica, struct store_replica, store_read_replica, store_replica_array_free);
STORE_LIST(string, char *, store_read_string, store_string_array_free);
STORE_LIST(node_count, struct store_node_count, store_read_node_count, node_count_array_free);
STORE_LIST(node_beat, struct store_node_beat, store_read_node_beat, node_beat_array_free);
STORE_LIST(webhook, struct store_webhook, store_read_webhook, store_webhook_array_free);
STORE_LIST(webhook_delivery, struct store_webhook_delivery, store_read_webhook_delivery,
           store_webhook_delivery_array_free);

int store_rows_match_key(struct store_row *r, const uint8_t hash[STORE_HASH_SIZE], char **ret_tenant_id) {
        _cleanup_free_ char *tenant_id = NULL;
        bool found = false;
        for (;;) {
                int k = r->next(r);
                if (k < 0)
                        return k;
                if (k == 0)
                        break;
                size_t n = 0;
                const void *h = r->ops->blob(r, 0, &n);
                /* no early exit: every row is compared */
                bool match = h && n == STORE_HASH_SIZE && sodium_memcmp(h, hash, STORE_HASH_SIZE) == 0;
                if (match && !found) {
                        found = true;
                        k = store_row_strdup(r, 1, &tenant_id);
                        if (k < 0)
                                return k;
                }
        }
        if (!found)
                return -EACCES;
        *ret_tenant_id = TAKE_PTR(tenant_id);
        return 0;
}
