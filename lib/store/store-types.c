/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The destructors of what the store hands out (store.h: a struct's
 * release, an array's free): below the dispatch layer (store.c) and the
 * backends, which all call them.
 */
#include <stdlib.h>

#include "store.h"

void store_event_array_free(struct store_event *a, size_t n) {
        for (size_t i = 0; a && i < n; i++) {
                free(a[i].tenant_id);
                free(a[i].sandbox_id);
                free(a[i].type);
                free(a[i].state);
                free(a[i].previous);
                free(a[i].detail);
        }
        free(a);
}

void store_sandbox_release(struct store_sandbox *sb) {
        if (!sb)
                return;
        free(sb->id);
        free(sb->tenant_id);
        free(sb->template_name);
        free(sb->state);
        free(sb->desired_state);
        free(sb->error);
        free(sb->metadata);
        free(sb->env_keys);
        free(sb->snapshot_policy);
        free(sb->network);
        free(sb->on_expiry);
        free(sb->node);
        *sb = (struct store_sandbox){ 0 };
}

void store_sandbox_array_free(struct store_sandbox *a, size_t n) {
        if (!a)
                return;
        for (size_t i = 0; i < n; i++)
                store_sandbox_release(&a[i]);
        free(a);
}

void store_image_release(struct store_image *img) {
        if (!img)
                return;
        free(img->id);
        free(img->tenant_id);
        free(img->name);
        free(img->sandbox_id);
        free(img->template_name);
        free(img->kind);
        free(img->snapshot_id);
        *img = (struct store_image){ 0 };
}

void store_image_array_free(struct store_image *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_image_release(&a[i]);
        free(a);
}

void store_volume_release(struct store_volume *v) {
        if (!v)
                return;
        free(v->id);
        free(v->tenant_id);
        free(v->name);
        free(v->node);
        free(v->source_id);
        *v = (struct store_volume){ 0 };
}

void store_volume_array_free(struct store_volume *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_volume_release(&a[i]);
        free(a);
}

void store_volume_hold_release(struct store_volume_hold *h) {
        if (!h)
                return;
        free(h->sandbox_id);
        free(h->volume_id);
        free(h->path);
        *h = (struct store_volume_hold){ 0 };
}

void store_volume_hold_array_free(struct store_volume_hold *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_volume_hold_release(&a[i]);
        free(a);
}

void store_template_release(struct store_template *t) {
        if (!t)
                return;
        free(t->tenant_id);
        free(t->name);
        free(t->node_name);
        free(t->build_id);
        free(t->state);
        free(t->error);
        free(t->node);
        free(t->spec);
        *t = (struct store_template){ 0 };
}

void store_template_array_free(struct store_template *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_template_release(&a[i]);
        free(a);
}

void store_session_release(struct store_session *ses) {
        if (!ses)
                return;
        free(ses->id);
        free(ses->sandbox_id);
        free(ses->cmd);
        *ses = (struct store_session){ 0 };
}

void store_api_key_release(struct store_api_key *k) {
        if (!k)
                return;
        free(k->id);
        free(k->tenant_id);
        free(k->name);
        *k = (struct store_api_key){ 0 };
}

void store_api_key_array_free(struct store_api_key *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_api_key_release(&a[i]);
        free(a);
}

void store_tenant_release(struct store_tenant *t) {
        if (!t)
                return;
        free(t->id);
        free(t->name);
        free(t->network);
        *t = (struct store_tenant){ 0 };
}

void store_tenant_array_free(struct store_tenant *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_tenant_release(&a[i]);
        free(a);
}

void store_operation_release(struct store_operation *op) {
        if (!op)
                return;
        free(op->id);
        free(op->sandbox_id);
        free(op->tenant_id);
        free(op->verb);
        free(op->state);
        free(op->error);
        free(op->result);
        free(op->idempotency_key);
        free(op->request_hash);
        free(op->stage);
        free(op->detail);
        free(op->owner);
        *op = (struct store_operation){ 0 };
}

void store_operation_array_free(struct store_operation *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_operation_release(&a[i]);
        free(a);
}

void store_snapshot_release(struct store_snapshot *snap) {
        if (!snap)
                return;
        free(snap->id);
        free(snap->sandbox_id);
        free(snap->kind);
        *snap = (struct store_snapshot){ 0 };
}

void store_snapshot_array_free(struct store_snapshot *a, size_t n) {
        for (size_t i = 0; i < n; i++)
                store_snapshot_release(&a[i]);
        free(a);
}

void store_secret_release(struct store_secret *sec) {
        if (!sec)
                return;
        free(sec->tenant_id);
        free(sec->name);
        free(sec->sandbox_id);
        free(sec->spec);
        free(sec->created_by);
        free(sec->sealed);
        *sec = (struct store_secret){ 0 };
}

void store_secret_array_free(struct store_secret *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_secret_release(&a[i]);
        free(a);
}

void store_string_array_free(char **a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                free(a[i]);
        free(a);
}

void store_sandbox_secret_array_free(struct store_sandbox_secret *a, size_t n) {
        for (size_t i = 0; a && i < n; i++) {
                free(a[i].sandbox_id);
                free(a[i].name);
                free(a[i].placeholder);
                free(a[i].env_name);
        }
        free(a);
}

void store_audit_event_release(struct store_audit_event *ev) {
        if (!ev)
                return;
        free(ev->tenant_id);
        free(ev->actor);
        free(ev->sandbox_id);
        free(ev->secret);
        free(ev->host);
        free(ev->method);
        free(ev->path);
        free(ev->reason);
        free(ev->action);
        *ev = (struct store_audit_event){ 0 };
}

void store_audit_event_array_free(struct store_audit_event *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_audit_event_release(&a[i]);
        free(a);
}

void store_node_release(struct store_node *n) {
        if (!n)
                return;
        free(n->name);
        free(n->address);
        free(n->boot_id);
        free(n->info);
        *n = (struct store_node){ 0 };
}

void store_node_array_free(struct store_node *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_node_release(&a[i]);
        free(a);
}

void store_cap_key_array_free(struct store_cap_key *a, size_t n) {
        for (size_t i = 0; a && i < n; i++) {
                free(a[i].kid);
                free(a[i].public_key);
                free(a[i].replica);
        }
        free(a);
}

void store_replica_array_free(struct store_replica *a, size_t n) {
        for (size_t i = 0; a && i < n; i++) {
                free(a[i].id);
                free(a[i].cluster_address);
                free(a[i].api_address);
        }
        free(a);
}

void store_webhook_release(struct store_webhook *w) {
        if (!w)
                return;
        free(w->id);
        free(w->tenant_id);
        free(w->url);
        free(w->events);
        free(w->secret);
        free(w->last_error);
        *w = (struct store_webhook){ 0 };
}

void store_webhook_array_free(struct store_webhook *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_webhook_release(&a[i]);
        free(a);
}

void store_webhook_delivery_release(struct store_webhook_delivery *d) {
        if (!d)
                return;
        free(d->webhook_id);
        free(d->event_type);
        free(d->sandbox_id);
        free(d->error);
        *d = (struct store_webhook_delivery){ 0 };
}

void store_webhook_delivery_array_free(struct store_webhook_delivery *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                store_webhook_delivery_release(&a[i]);
        free(a);
}
