/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit log of credentials (docs/api.md, "Audit"): airlockd's own
 * events (secret.create, secret.attach, secret.delete: api-secrets.c) and
 * the gateway's (a credential injected into a request, or refused), which
 * the node serves by `audit.read` and this file copies into the store: every
 * API_AUDIT_POLL_MS from a thread of its own, and before each GET /v1/audit.
 * Each gateway event is stored once (source: "node" for this machine's own,
 * "node:NAME" for a node of a cluster; gateway boot id; sequence number),
 * and where reading stopped is kept in the store, so a restart of airlockd
 * neither loses nor repeats events. The same reply carries the node's boot
 * id: a node that restarted has lost the sets it held in memory, so every
 * sandbox of it with a VM gets its set again. In a cluster each replica
 * polls the nodes it owns (replica_owns()).
 */
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "replica.h"
#include "util.h"
#include "worker.h"

#define AUDIT_SOURCE "node" /* this machine's own node; "node:NAME" for a cluster's */
#define AUDIT_READ_MAX 1000
#define AUDIT_ROUNDS_MAX 10  /* batches one poll reads at most */
#define AUDIT_FIELD_MAX 2048 /* longer strings from the gateway are dropped */
#define AUDIT_LIST_DEFAULT 100
#define AUDIT_LIST_MAX 1000
#define NODE_BOOT_ID_MAX 64
#define BOOTS_MAX 1024 /* nodes whose boot id is remembered */

static pthread_mutex_t poll_lock = PTHREAD_MUTEX_INITIALIZER;
/* each node's boot id last seen (none before its first reply), by source */
static struct node_boot {
        char source[80];
        char boot[NODE_BOOT_ID_MAX + 1];
} boots[BOOTS_MAX];
static size_t n_boots;

static struct node_boot *boot_of(const char *source) {
        for (size_t i = 0; i < n_boots; i++)
                if (strcmp(boots[i].source, source) == 0)
                        return &boots[i];
        struct node_boot *b = &boots[n_boots < BOOTS_MAX ? n_boots++ : BOOTS_MAX - 1];
        snprintf(b->source, sizeof b->source, "%s", source);
        b->boot[0] = 0;
        return b;
}

static const char *field(const json_t *ev, const char *key) {
        json_t *v = json_object_get(ev, key);
        const char *s = json_string_value(v);
        return s && json_string_length(v) <= AUDIT_FIELD_MAX && strlen(s) == json_string_length(v) ? s : NULL;
}

/* A denial the gateway recorded: not a credential's audit event but the
 * sandbox's lifecycle event sandbox.policy_denied (GET /v1/events,
 * webhooks), its detail what was denied and why; of a sandbox the store
 * no longer has, nothing. */
static int store_policy_denied(struct store *store, const json_t *ev, const char *sandbox,
                               const struct store_sandbox *sb) {
        if (!sandbox || !sb->id)
                return 0;
        json_t *port = json_object_get(ev, "port"), *ts = json_object_get(ev, "ts_ms"),
               *suppressed = json_object_get(ev, "suppressed");
        _cleanup_(json_decrefp) json_t *d = json_pack(
                "{s:s?, s:I, s:s?, s:I}", "host", field(ev, "host"), "port",
                json_is_integer(port) ? json_integer_value(port) : 0, "reason", field(ev, "reason"),
                "suppressed", json_is_integer(suppressed) ? json_integer_value(suppressed) : 0);
        _cleanup_free_ char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
        if (!detail)
                return -ENOMEM;
        struct store_event e = {
                .ts_ms = json_is_integer(ts) && json_integer_value(ts) > 0 ? json_integer_value(ts) : 0,
                .tenant_id = sb->tenant_id,
                .sandbox_id = (char *) sandbox,
                .type = "sandbox.policy_denied",
                .state = sb->state,
                .detail = detail,
        };
        return store_event_append(store, &e);
}

/* Stores one gateway event; its tenant is its sandbox's. */
static int store_gateway_event(struct store *store, const json_t *ev, const char *source, const char *boot_id) {
        json_t *seq = json_object_get(ev, "seq");
        const char *action = field(ev, "action");
        if (!json_is_integer(seq) || json_integer_value(seq) <= 0 || !action)
                return -EBADMSG;
        const char *sandbox = field(ev, "sandbox");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if (sandbox && store_sandbox_get(store, sandbox, &sb) < 0)
                sb = (struct store_sandbox){ 0 };
        json_t *port = json_object_get(ev, "port"), *ts = json_object_get(ev, "ts_ms");
        if (strcmp(action, "denied") == 0)
                return store_policy_denied(store, ev, sandbox, &sb);
        struct store_audit_event e = {
                .ts_ms = json_is_integer(ts) && json_integer_value(ts) > 0 ? json_integer_value(ts) : 0,
                .tenant_id = sb.tenant_id,
                .actor = "gateway",
                .sandbox_id = (char *) sandbox,
                .secret = (char *) field(ev, "secret"),
                .host = (char *) field(ev, "host"),
                .port = json_is_integer(port) && json_integer_value(port) > 0 && json_integer_value(port) <= 65535
                                ? (int) json_integer_value(port)
                                : 0,
                .method = (char *) field(ev, "method"),
                .path = (char *) field(ev, "path"),
                .reason = (char *) field(ev, "reason"),
                .action = (char *) action,
        };
        return store_audit_insert(store, &e, source, boot_id, json_integer_value(seq));
}

/* One audit.read; *ret_more when a full batch came (read on). */
static int poll_round(const struct daemon_config *config, struct store *store, const char *addr, const char *source,
                      bool *ret_node_restarted, bool *ret_more) {
        _cleanup_free_ char *cur_boot = NULL;
        int64_t after = 0;
        int r = store_audit_cursor_get(store, source, &cur_boot, &after);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_WARN, r, NULL, "store: failed to read the audit cursor: %m");
        _cleanup_(json_decrefp) json_t *rep = NULL;
        const char *gboot = NULL;
        for (int attempt = 0; attempt < 2; attempt++) {
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:I, s:i}", "op", "audit.read", "after",
                                                                (json_int_t) after, "limit", AUDIT_READ_MAX);
                char err[API_ERRMSG_MAX] = "";
                json_decref(TAKE_PTR(rep));
                r = req ? node_call(addr, config->node_timeout_s, req, &rep, err) : -ENOMEM;
                if (r < 0)
                        return r;
                const char *nb = json_string_value(json_object_get(rep, "node_boot_id"));
                struct node_boot *b = boot_of(source);
                if (nb && strlen(nb) <= NODE_BOOT_ID_MAX && strcmp(nb, b->boot) != 0) {
                        *ret_node_restarted = true;
                        snprintf(b->boot, sizeof b->boot, "%s", nb);
                }
                gboot = json_string_value(json_object_get(rep, "boot_id"));
                if (!gboot || strlen(gboot) > NODE_BOOT_ID_MAX)
                        return 0; /* no gateway answered: nothing to read */
                /* a new gateway counts from the start again */
                if (cur_boot && strcmp(cur_boot, gboot) == 0)
                        break;
                if (after == 0)
                        break;
                after = 0;
        }
        json_t *events = json_object_get(rep, "events");
        size_t i;
        json_t *ev;
        int64_t last = after;
        json_array_foreach(events, i, ev) {
                int k = store_gateway_event(store, ev, source, gboot);
                if (k < 0 && k != -EBADMSG)
                        return log_errno(LOG_LEVEL_WARN, k, NULL, "store: failed to store an audit event: %m");
                json_int_t s = json_integer_value(json_object_get(ev, "seq"));
                if (s > last)
                        last = s;
        }
        json_t *next = json_object_get(rep, "next");
        if (json_is_integer(next) && json_integer_value(next) > last)
                last = json_integer_value(next);
        r = store_audit_cursor_set(store, source, gboot, last);
        if (r < 0)
                return log_errno(LOG_LEVEL_WARN, r, NULL, "store: failed to write the audit cursor: %m");
        *ret_more = json_array_size(events) >= AUDIT_READ_MAX;
        return 0;
}

/* Reads what one node's gateway recorded since the last poll. */
static int audit_poll_node(const struct daemon_config *config, struct store *store, const char *name,
                           const char *addr) {
        char source[80];
        if (name)
                snprintf(source, sizeof source, AUDIT_SOURCE ":%s", name);
        else
                snprintf(source, sizeof source, AUDIT_SOURCE);
        bool restarted = false, more = true;
        int r = 0;
        pthread_mutex_lock(&poll_lock);
        for (int i = 0; more && i < AUDIT_ROUNDS_MAX; i++) {
                more = false;
                r = poll_round(config, store, addr, source, &restarted, &more);
                if (r < 0)
                        break;
        }
        pthread_mutex_unlock(&poll_lock);
        if (restarted) {
                log_emit(LOG_LEVEL_INFO, NULL, "node %s has a new boot id: handing it the secrets of its sandboxes",
                         name ?: API_LOCAL_NODE);
                api_secrets_push_running(config, store, name, NULL);
        }
        return r;
}

/* Reads what the gateways of the nodes this replica owns recorded. */
static int audit_poll(const struct daemon_config *config, struct store *store) {
        struct nodes_target *t = NULL;
        size_t n = 0;
        int r = nodes_targets(&t, &n);
        for (size_t i = 0; r >= 0 && i < n; i++)
                if (!t[i].name || replica_owns(t[i].name))
                        (void) audit_poll_node(config, store, t[i].name, t[i].addr);
        nodes_targets_free(t, n);
        return r;
}

static json_t *event_json(const struct store_audit_event *e) {
        char ts[48];
        api_format_time(e->ts_ms, ts, sizeof ts);
        json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:s}", "id", (json_int_t) e->id, "ts", ts, "ts_ms",
                              (json_int_t) e->ts_ms, "actor", e->actor, "action", e->action);
        if (!o)
                return NULL;
        const struct {
                const char *key, *v;
        } opt[] = { { "tenant_id", e->tenant_id }, { "sandbox", e->sandbox_id }, { "secret", e->secret },
                    { "host", e->host },           { "method", e->method },      { "path", e->path },
                    { "reason", e->reason } };
        for (size_t i = 0; i < ARRAY_SIZE(opt); i++)
                if (opt[i].v)
                        json_object_set_new(o, opt[i].key, json_string(opt[i].v));
        if (e->port > 0)
                json_object_set_new(o, "port", json_integer(e->port));
        return o;
}

int api_audit_get(struct api_ctx *ctx, const char *sandbox, const char *secret, const char *limit_s,
                  struct api_reply *ret) {
        uint64_t limit = AUDIT_LIST_DEFAULT;
        if (limit_s && (parse_u64(limit_s, AUDIT_LIST_MAX, &limit) < 0 || limit == 0)) {
                snprintf(ctx->err, sizeof ctx->err, "query parameter 'limit' must be 1-%d", AUDIT_LIST_MAX);
                return -EINVAL;
        }
        if ((sandbox && (strlen(sandbox) == 0 || strlen(sandbox) > 64)) ||
            (secret && (strlen(secret) == 0 || strlen(secret) > 64))) {
                snprintf(ctx->err, sizeof ctx->err, "query parameters 'sandbox' and 'secret' must be names");
                return -EINVAL;
        }
        /* what the gateway did up to now is in the answer (a node that does
         * not answer only makes it older) */
        (void) audit_poll(ctx->config, ctx->store);
        struct store_audit_event *a = NULL;
        size_t n = 0;
        int r = store_audit_list(ctx->store, !ctx->tenant_id, ctx->tenant_id, sandbox, secret, (size_t) limit, &a, &n);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read the audit log: %m");
        json_t *list = api_rows_json(a, n, event_json);
        store_audit_event_array_free(a, n);
        return api_reply_list(ret, "events", list);
}

struct api_audit_poller {
        const struct daemon_config *config;
        struct store *store;
        struct worker *worker;
};

static int poller_pass(void *arg) {
        struct api_audit_poller *p = arg;
        (void) audit_poll(p->config, p->store);
        return 0;
}

int api_audit_poller_start(const struct daemon_config *config, struct store *store, struct api_audit_poller **ret) {
        struct api_audit_poller *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->config = config;
        p->store = store;
        int r = worker_start(poller_pass, p, API_AUDIT_POLL_MS, 0, &p->worker);
        if (r < 0) {
                free(p);
                return r;
        }
        *ret = p;
        return 0;
}

void api_audit_poller_stop(struct api_audit_poller *p) {
        if (!p)
                return;
        worker_stop(p->worker);
        free(p);
}
