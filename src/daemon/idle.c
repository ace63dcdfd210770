/* SPDX-License-Identifier: Apache-2.0 */
#include "idle.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "lifecycle.h"
#include "log.h"
#include "macros.h"
#include "replica.h"
#include "nodes.h"
#include "nodeclient.h"
#include "util.h"
#include "worker.h"

struct idle_watch {
        const struct daemon_config *config;
        struct store *store;
        struct worker *worker;
        uint64_t next_idle; /* monotonic ns: when idleness is looked at next */
        atomic_bool stopping; /* for the api_ctx of the verbs it starts */
};

/* The timeout that applies to one sandbox, in ms; 0: never. */
static uint64_t timeout_ms(const struct idle_watch *w, const struct store_sandbox *sb) {
        uint64_t s = sb->has_idle_timeout ? (uint64_t) sb->idle_timeout_s : w->config->idle_timeout_s;
        return s * 1000ULL;
}

/* One pass over one node: suspends every running sandbox idle for too long. */
static void check_node(struct idle_watch *w, const char *addr) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "op", "sandbox.list");
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX];
        if (!req || node_call(addr, w->config->node_timeout_s, req, &rep, err) < 0)
                return; /* the node is restarting: next time */
        json_t *list = json_object_get(rep, "sandboxes"), *e;
        size_t i;
        /* suspended copies whose sealed upload a node restart cut off */
        json_array_foreach(json_object_get(rep, "uploads_waiting_key"), i, e) {
                const char *id = json_string_value(e);
                if (id && name_is_valid(id) && replica_owns(id))
                        (void) api_suspended_upload_key(w->config, w->store, id, "idle");
        }
        json_array_foreach(list, i, e) {
                const char *id = json_string_value(json_object_get(e, "id"));
                json_t *idle = json_object_get(e, "idle_ms");
                if (!id || !json_is_integer(idle) ||
                    strcmp(json_string_value(json_object_get(e, "state")) ?: "", "running") != 0 ||
                    !replica_owns(id))
                        continue;
                _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
                if (store_sandbox_get(w->store, id, &sb) < 0 || strcmp(sb.state, "running") != 0)
                        continue;
                uint64_t limit = timeout_ms(w, &sb);
                if (limit == 0 || (uint64_t) json_integer_value(idle) < limit)
                        continue;
                char log_ctx[96];
                snprintf(log_ctx, sizeof log_ctx, "idle sandbox=%s", id);
                struct api_ctx ctx = { .config = w->config, .store = w->store, .stopping = &w->stopping,
                                       .log_ctx = log_ctx, .client_fd = -1 };
                struct api_reply r = { 0 };
                log_emit(LOG_LEVEL_INFO, log_ctx, "idle for %lld s (limit %llu s): suspending",
                         (long long) (json_integer_value(idle) / 1000), (unsigned long long) (limit / 1000));
                int k = api_sandbox_verb(&ctx, id, "suspend", NULL, NULL, false, &r);
                if (k < 0) /* e.g. a verb started meanwhile: it is not idle after all */
                        log_emit(LOG_LEVEL_INFO, log_ctx, "not suspended: %s", ctx.err[0] ? ctx.err : strerror(-k));
                api_reply_release(&r);
        }
}

/* One pass over every node. */
static void check(struct idle_watch *w) {
        struct nodes_target *t = NULL;
        size_t n = 0;
        if (nodes_targets(&t, &n) < 0)
                return;
        for (size_t i = 0; i < n && !atomic_load(&w->stopping); i++)
                check_node(w, t[i].addr);
        nodes_targets_free(t, n);
}

/* One pass over the lifetimes: a sandbox whose lifetime is over is
 * deleted, or suspended (its clock then stops until it is back). */
static void expire(struct idle_watch *w) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list(w->store, STORE_LIST_MAX, &a, &n) < 0)
                return;
        int64_t now = now_unix_ms();
        for (size_t i = 0; i < n; i++) {
                struct store_sandbox *sb = &a[i];
                if (!sb->expires_at || sb->expires_at > now || lifecycle_state_is_transitional(sb->state) ||
                    strcmp(sb->state, "creating") == 0 || !replica_owns(sb->id))
                        continue;
                bool suspend = sb->on_expiry && strcmp(sb->on_expiry, "suspend") == 0;
                char log_ctx[96];
                snprintf(log_ctx, sizeof log_ctx, "lifetime sandbox=%s", sb->id);
                struct api_ctx ctx = { .config = w->config, .store = w->store, .stopping = &w->stopping,
                                       .log_ctx = log_ctx, .client_fd = -1 };
                struct api_reply r = { 0 };
                int k = 0;
                if (suspend && (strcmp(sb->state, "running") == 0 || strcmp(sb->state, "paused") == 0)) {
                        log_emit(LOG_LEVEL_INFO, log_ctx, "its lifetime is over: suspending");
                        k = api_sandbox_verb(&ctx, sb->id, "suspend", NULL, NULL, false, &r);
                } else if (!suspend) {
                        log_emit(LOG_LEVEL_INFO, log_ctx, "its lifetime is over: deleting");
                        k = api_sandbox_delete(&ctx, sb->id, NULL, false, &r);
                }
                api_reply_release(&r);
                if (k < 0) {
                        log_emit(LOG_LEVEL_WARN, log_ctx, "not ended: %s", ctx.err[0] ? ctx.err : strerror(-k));
                        continue; /* next pass */
                }
                if (suspend) /* suspended (or on its way): no clock until it is back */
                        (void) store_sandbox_expiry_set(w->store, sb->id, 0, sb->expiry_s, NULL);
        }
        store_sandbox_array_free(a, n);
}

/* lifetimes are looked at this often (idleness at idle_check_ms) */
#define EXPIRE_CHECK_MS 1000

/* One pass of the worker: lifetimes every time, idleness when it is due. */
static int idle_pass(void *arg) {
        struct idle_watch *w = arg;
        expire(w);
        if (now_monotonic_ns() >= w->next_idle) {
                check(w);
                w->next_idle = now_monotonic_ns() + (uint64_t) w->config->idle_check_ms * 1000000ULL;
        }
        return 0;
}

int idle_watch_start(const struct daemon_config *config, struct store *store, struct idle_watch **ret) {
        struct idle_watch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (struct idle_watch){ .config = config, .store = store,
                                  .next_idle = now_monotonic_ns() + (uint64_t) config->idle_check_ms * 1000000ULL };
        int r = worker_start(idle_pass, w, MIN(config->idle_check_ms, EXPIRE_CHECK_MS), WORKER_WAIT_FIRST,
                             &w->worker);
        if (r < 0) {
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

void idle_watch_stop(struct idle_watch *w) {
        if (!w)
                return;
        atomic_store(&w->stopping, true);
        worker_stop(w->worker);
        free(w);
}
