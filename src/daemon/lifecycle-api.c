/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lifecycle verbs of the API (POST /v1/sandboxes/{id}/{pause,resume,
 * stop,start,rollback}) and their operations (GET /v1/operations/{id}). A verb is
 * checked against the table of lifecycle.c, claimed by a compare-and-set of
 * the sandbox row into the verb's transitional state (so two requests
 * racing on one sandbox cannot both start), recorded as an operation row,
 * and carried out by a detached worker thread that calls the node and
 * writes the outcome to the store. Clients poll the operation or ask the
 * request to wait for it. Create and delete (api.c) record operations too
 * but run in the request's own thread; they share the waiting and the
 * finishing here.
 */
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sodium.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "datakey.h"
#include "lifecycle.h"
#include "scheduler.h"
#include "log.h"
#include "macros.h"
#include "nodeclient.h"
#include "nodes.h"
#include "replica-share.h"
#include "util.h"

#define LIFECYCLE_WORKERS_MAX 64          /* verbs running at once, all sandboxes */
#define LIFECYCLE_WAIT_MAX_MS (10 * 60 * 1000) /* ?wait=true gives up after this */
#define LIFECYCLE_RECHECK_S 1 /* ?wait=true re-reads the operation at least this often */
#define LIFECYCLE_START_TIMEOUT_S 300     /* cold boot under TCG: up to 2 minutes for the agent */
#define LIFECYCLE_STOP_TIMEOUT_S 120
/* a rollback stops, clones and cold-boots */
#define LIFECYCLE_ROLLBACK_TIMEOUT_S (LIFECYCLE_STOP_TIMEOUT_S + LIFECYCLE_START_TIMEOUT_S)
/* Progress of a verb once the node has the request: the node does the
 * work in one call and reports nothing until it is done, so this is the
 * only step between 0 (recorded) and 100 (succeeded). */
#define PROGRESS_NODE_CALLED 10
/* A verb cut off by the node going away: how long its worker waits for a
 * node to ask what became of the sandbox (nodemgr restarts one at once). */
#define SETTLE_NODE_WAIT_MS (60 * 1000)
#define SETTLE_RETRY_MS 250

static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_cond = PTHREAD_COND_INITIALIZER;
static unsigned workers;

struct job {
        const struct daemon_config *config;
        struct store *store;
        enum lifecycle_verb verb;
        char op_id[32];
        char sandbox_id[65];
        char from_state[16];
        char transitional[16];
        char snapshot_id[80]; /* rollback: the snapshot to roll back to; suspend/wake: the suspended image */
        char child_id[32];    /* fork: the new sandbox (its row is inserted before the worker starts) */
        bool wait_for_node;   /* settling a failure waits for a node that went away (not at start-up) */
        char *network;        /* start, rollback, wake, fork: the egress policy the VM gets (canonical text) */
        bool has_tenant;
        char tenant[65];      /* the sandbox's owner, whose KEK wraps its images' data keys */
        bool has_key;         /* suspend: the data key its image is sealed with (made before the job) */
        struct datakey key;
};

static void job_free(struct job *j) {
        if (!j)
                return;
        free(j->network);
        sodium_memzero(&j->key, sizeof j->key);
        free(j);
}

int api_request_add_datakey(json_t *req, const struct datakey *key) {
        char b64[sodium_base64_ENCODED_LEN(DATAKEY_SIZE, sodium_base64_VARIANT_ORIGINAL)];
        sodium_bin2base64(b64, sizeof b64, key->key, sizeof key->key, sodium_base64_VARIANT_ORIGINAL);
        int r = json_object_set_new(req, "data_key", json_string(b64)) < 0 ||
                                json_object_set_new(req, "wrapped_key", json_string(key->wrapped)) < 0
                        ? -ENOMEM
                        : 0;
        sodium_memzero(b64, sizeof b64);
        return r;
}

int api_suspended_upload_key(const struct daemon_config *config, struct store *store, const char *id,
                             const char *log_ctx) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(store, id, &sb);
        if (r < 0 || strcmp(sb.state, "suspended") != 0)
                return r < 0 ? r : -ESTALE;
        char snap[96], err[API_ERRMSG_MAX] = "";
        api_suspended_snapshot_id(id, snap, sizeof snap);
        _cleanup_(json_decrefp) json_t *get = json_pack("{s:s, s:s, s:s}", "op", "suspended.get", "snapshot_id", snap,
                                                        "id", id);
        _cleanup_(json_decrefp) json_t *rep = NULL, *up = NULL, *done = NULL;
        r = get ? nodes_sandbox_call(id, config->node_timeout_s, get, &rep, err) : -ENOMEM;
        const char *wrapped = json_string_value(json_object_get(rep, "wrapped_key"));
        if (r < 0 || !json_is_true(json_object_get(rep, "needs_key")) || !wrapped)
                return r < 0 ? r : 0;
        struct datakey key;
        r = datakey_open(sb.tenant_id, wrapped, &key);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, log_ctx, "sandbox %s: its image's upload waits for a data key that does not "
                         "open: %s", id, strerror(-r));
                return r;
        }
        up = json_pack("{s:s, s:s, s:s}", "op", "suspended.upload", "snapshot_id", snap, "id", id);
        r = up ? api_request_add_datakey(up, &key) : -ENOMEM;
        sodium_memzero(&key, sizeof key);
        if (r >= 0)
                r = nodes_sandbox_call(id, config->node_timeout_s, up, &done, err);
        if (r >= 0)
                log_emit(LOG_LEVEL_INFO, log_ctx, "sandbox %s: gave its node the data key its image's upload "
                         "waited for", id);
        return r;
}

/* The data key of sandbox j's suspended image, if it is sealed: its node
 * says how it is wrapped (from its copy, or the object store's manifest),
 * the tenant's KEK opens it. No wrapped key: an image in the clear. */
static int job_wake_key(struct job *j, char err[API_ERRMSG_MAX]) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s}", "op", "suspended.get", "snapshot_id",
                                                        j->snapshot_id, "id", j->sandbox_id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = req ? nodes_sandbox_call(j->sandbox_id, j->config->node_timeout_s, req, &rep, err) : -ENOMEM;
        if (r < 0)
                return r;
        const char *wrapped = json_string_value(json_object_get(rep, "wrapped_key"));
        if (!wrapped)
                return 0;
        r = datakey_open(j->has_tenant ? j->tenant : NULL, wrapped, &j->key);
        if (r == -EKEYREVOKED)
                snprintf(err, API_ERRMSG_MAX, "the key that sealed this sandbox's image was revoked: it cannot be "
                         "opened any more");
        else if (r < 0)
                snprintf(err, API_ERRMSG_MAX, "the image's data key does not open with its tenant's key");
        j->has_key = r >= 0;
        return r;
}

void api_suspended_snapshot_id(const char *sandbox_id, char *ret, size_t n) {
        snprintf(ret, n, "%s.suspended", sandbox_id);
}

json_t *api_operation_json(const struct store_operation *op) {
        char ts[48];
        api_format_time(op->created_at, ts, sizeof ts);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", op->id, "sandbox_id", op->sandbox_id, "verb", op->verb,
                              "state", op->state, "created_at", ts);
        if (!o)
                return NULL;
        json_object_set_new(o, "progress", json_integer(op->progress));
        if (op->stage)
                json_object_set_new(o, "stage", json_string(op->stage));
        if (op->finished_at > 0) {
                api_format_time(op->finished_at, ts, sizeof ts);
                json_object_set_new(o, "finished_at", json_string(ts));
        }
        json_t *e = op->error ? json_loads(op->error, 0, NULL) : NULL;
        if (e)
                json_object_set_new(o, "error", e);
        json_t *res = op->result ? json_loads(op->result, 0, NULL) : NULL;
        if (res)
                json_object_set_new(o, "result", res);
        return o;
}

static bool operation_finished(const struct store_operation *op) {
        return strcmp(op->state, "succeeded") == 0 || strcmp(op->state, "failed") == 0;
}

/* Wakes the requests waiting for an operation; call once its outcome is
 * in the store (see api_operation_wait()). */
static void operations_notify(void) {
        pthread_mutex_lock(&workers_lock);
        pthread_cond_broadcast(&workers_cond);
        pthread_mutex_unlock(&workers_lock);
}

/* Writes the final state of an operation; errors only get a log line (the
 * caller has nobody else to tell). */
static void operation_finish(struct store *store, const char *op_id, int r, const char *message, const char *result) {
        _cleanup_free_ char *err_s = NULL;
        if (r < 0) {
                _cleanup_(json_decrefp) json_t *e = json_pack("{s:s, s:s}", "code", api_error_code(r), "message",
                                                              message && *message ? message
                                                                                  : api_error_default_message(r));
                err_s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        }
        int k = store_operation_update(store, op_id, r < 0 ? "failed" : "succeeded", err_s, r < 0 ? NULL : result);
        if (k < 0)
                log_errno(LOG_LEVEL_ERROR, k, NULL, "store: failed to finish operation %s: %m", op_id);
}

void api_operation_finish(struct store *store, const char *op_id, int r, const char *message, const char *result) {
        operation_finish(store, op_id, r, message, result);
        operations_notify();
}

void api_operation_node_called(struct store *store, const char *op_id, const char *stage) {
        int r = store_operation_progress(store, op_id, PROGRESS_NODE_CALLED, stage);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, NULL, "store: failed to record progress of operation %s: %m", op_id);
}

/* set when airlockd begins to shut down: nobody waits for a node any more,
 * and a verb the node's exit cut off is left to the next start */
static atomic_bool shutting_down;

static bool node_gone(int r) {
        return r == -EHOSTDOWN || r == -ECONNRESET || r == -EPIPE || r == -ECONNREFUSED;
}

/* After a failed verb: what is the sandbox now? The node knows. A verb cut
 * off by its node going away may still have happened (a wake restored the
 * VM, and the next node adopts it): the row stays transitional while we
 * wait for that node, and one left so at our own exit is settled by the
 * next airlockd's reconcile. Only a node that answers and does not know
 * the sandbox, or one that never comes back, sends the row back to where
 * the verb started. */
static void job_settle_after_failure(struct job *j, const char *why) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.get", "id", j->sandbox_id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        const char *state = j->from_state, *error = NULL;
        uint64_t deadline = now_monotonic_ns() + (uint64_t) SETTLE_NODE_WAIT_MS * 1000000ULL;
        int r;
        for (;;) {
                r = req ? nodes_sandbox_call(j->sandbox_id, j->config->node_timeout_s, req, &rep, err) : -ENOMEM;
                if (!j->wait_for_node || !node_gone(r) || now_monotonic_ns() >= deadline)
                        break;
                if (atomic_load(&shutting_down))
                        return; /* the row stays transitional: the next start asks */
                (void) usleep(SETTLE_RETRY_MS * 1000);
        }
        if (r >= 0) {
                json_t *sb = json_object_get(rep, "sandbox");
                const char *ns = json_string_value(json_object_get(sb, "state"));
                if (ns && lifecycle_state_is_valid(ns) && !lifecycle_state_is_transitional(ns))
                        state = ns;
                if (strcmp(state, "failed") == 0)
                        error = json_string_value(json_object_get(sb, "error")) ?: why;
        } else if (r == -ENOENT && (strcmp(j->transitional, "suspending") == 0 ||
                                    strcmp(j->transitional, "waking") == 0)) {
                /* a suspend that released the VM finished (its image
                 * landed); a wake that failed left it where it was */
                state = "suspended";
        } else if (r == -ENOENT && strcmp(j->from_state, "archived") == 0) {
                state = "archived"; /* a rollback that could not make it again */
        } else if (r == -ENOENT) {
                state = "failed";
                error = "the node agent does not know this sandbox (lost in a node restart?)";
        }
        r = store_sandbox_update_state(j->store, j->sandbox_id, state, error);
        if (r < 0 && r != -ENOENT)
                log_errno(LOG_LEVEL_ERROR, r, NULL, "store: failed to update sandbox %s: %m", j->sandbox_id);
}

static unsigned verb_timeout_s(const struct daemon_config *config, enum lifecycle_verb verb) {
        switch (verb) {
        case LIFECYCLE_START:
                return LIFECYCLE_START_TIMEOUT_S;
        case LIFECYCLE_STOP:
                return LIFECYCLE_STOP_TIMEOUT_S;
        case LIFECYCLE_ROLLBACK:
                return LIFECYCLE_ROLLBACK_TIMEOUT_S;
        case LIFECYCLE_SUSPEND:
        case LIFECYCLE_WAKE:
        case LIFECYCLE_FORK:
                return LIFECYCLE_START_TIMEOUT_S; /* a full snapshot plus an upload or a restore */
        default:
                return config->node_timeout_s;
        }
}

static void *job_main(void *arg) {
        struct job *j = arg;
        const struct lifecycle_transition *t = lifecycle_get(j->verb);
        char ctx[128];
        snprintf(ctx, sizeof ctx, "operation=%s sandbox=%s verb=%s", j->op_id, j->sandbox_id, t->name);

        int r = store_operation_update(j->store, j->op_id, "running", NULL, NULL);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, ctx, "store: failed to mark the operation running: %m");
        api_operation_node_called(j->store, j->op_id, t->transitional);
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", t->node_op, "id", j->sandbox_id);
        if (req && j->snapshot_id[0])
                json_object_set_new(req, "snapshot_id", json_string(j->snapshot_id));
        if (req && j->child_id[0])
                json_object_set_new(req, "child_id", json_string(j->child_id));
        json_t *net = NULL;
        if (req && j->network && api_network_json(j->network, &net) >= 0)
                json_object_set_new(req, "network", net);
        char err[API_ERRMSG_MAX] = "";
        uint64_t t0 = now_monotonic_ns();
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int key_r = j->verb == LIFECYCLE_WAKE ? job_wake_key(j, err) : 0;
        if (req && j->has_key && api_request_add_datakey(req, &j->key) < 0)
                key_r = -ENOMEM;
        sodium_memzero(&j->key, sizeof j->key); /* in the request now, and nowhere else here */
        /* a scheduled snapshot of this sandbox in progress ends first (the
         * node runs one operation per sandbox at a time) */
        bool claimed = key_r >= 0 && scheduler_claim(j->sandbox_id, SCHEDULER_CLAIM_WAIT_MS) >= 0;
        r = key_r < 0 ? key_r /* not sent: the sandbox is as it was */
            : req     ? nodes_sandbox_call(j->sandbox_id, verb_timeout_s(j->config, j->verb), req, &rep, err)
                      : -ENOMEM;
        if (claimed)
                scheduler_release(j->sandbox_id);
        if (req) /* the data key goes no further than the node */
                (void) json_object_del(req, "data_key");
        if (r < 0 && node_gone(r) && atomic_load(&shutting_down)) {
                /* the node went first in a shutdown: whether the verb
                 * happened is not known here. Row and operation stay as
                 * they are; the next start asks the node
                 * (api_lifecycle_reconcile()), and a fork child's row,
                 * still creating, goes on both sides. */
                log_emit(LOG_LEVEL_WARN, ctx, "cut off by the shutdown (%s); the next start settles it",
                         err[0] ? err : api_error_default_message(r));
        } else if (r < 0) {
                log_emit(LOG_LEVEL_WARN, ctx, "failed: %s", err[0] ? err : api_error_default_message(r));
                api_metrics_operation(t->name, false, (double) (now_monotonic_ns() - t0) / 1e9);
                job_settle_after_failure(j, err);
                if (j->child_id[0])
                        (void) store_sandbox_delete(j->store, j->child_id);
                operation_finish(j->store, j->op_id, r, err, NULL);
        } else {
                const char *target = t->target ?: j->from_state; /* fork: the parent goes on as it was */
                int k = store_sandbox_update_state(j->store, j->sandbox_id, target, NULL);
                if (k < 0 && k != -ENOENT)
                        log_errno(LOG_LEVEL_ERROR, k, ctx, "store: failed to update the sandbox: %m");
                _cleanup_(json_decrefp) json_t *res = json_pack("{s:s}", "state", target);
                if (res && j->verb == LIFECYCLE_FORK) {
                        json_t *child = json_object_get(rep, "sandbox");
                        k = store_sandbox_update_state(j->store, j->child_id, "running", NULL);
                        if (k < 0)
                                log_errno(LOG_LEVEL_ERROR, k, ctx, "store: failed to mark the fork child running: %m");
                        json_object_set_new(res, "sandbox", json_pack("{s:s, s:O?}", "id", j->child_id, "execution",
                                                                      json_object_get(child, "execution")));
                        json_object_set(res, "parent_pause_ms", json_object_get(child, "parent_pause_ms") ?: json_null());
                }
                if (res && j->verb == LIFECYCLE_SUSPEND && json_is_object(json_object_get(rep, "suspended")))
                        json_object_set(res, "suspended", json_object_get(rep, "suspended"));
                /* a new VM, a new gateway attachment: the sandbox's secrets
                 * go along (a fork child's only when the fork asked) */
                if (j->verb == LIFECYCLE_START || j->verb == LIFECYCLE_WAKE || j->verb == LIFECYCLE_ROLLBACK)
                        (void) api_secrets_push(j->config, j->store, j->sandbox_id, false, ctx);
                if (j->verb == LIFECYCLE_WAKE) /* maybe on another node */
                        api_volumes_follow(j->config, j->store, j->sandbox_id, ctx);
                if (j->verb == LIFECYCLE_FORK)
                        (void) api_secrets_push(j->config, j->store, j->child_id, false, ctx);
                /* a wake's image, stale now, the node removed itself */
                _cleanup_free_ char *res_s = res ? json_dumps(res, JSON_COMPACT) : NULL;
                operation_finish(j->store, j->op_id, 0, NULL, res_s);
                log_emit(LOG_LEVEL_INFO, ctx, "succeeded in %llu ms",
                         (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
                api_metrics_operation(t->name, true, (double) (now_monotonic_ns() - t0) / 1e9);
        }
        job_free(j);
        pthread_mutex_lock(&workers_lock);
        workers--;
        pthread_cond_broadcast(&workers_cond);
        pthread_mutex_unlock(&workers_lock);
        return NULL;
}

/* Starts the worker for a claimed verb; detached, counted for the drain. */
static int job_spawn(struct job *j) {
        pthread_mutex_lock(&workers_lock);
        if (workers >= LIFECYCLE_WORKERS_MAX) {
                pthread_mutex_unlock(&workers_lock);
                return -EHOSTDOWN;
        }
        workers++;
        pthread_mutex_unlock(&workers_lock);
        pthread_attr_t attr;
        pthread_t th;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = -pthread_create(&th, &attr, job_main, j);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                pthread_mutex_lock(&workers_lock);
                workers--;
                pthread_cond_broadcast(&workers_cond);
                pthread_mutex_unlock(&workers_lock);
        }
        return r;
}

int api_operation_wait(struct api_ctx *ctx, const char *op_id, uint64_t max_ms, struct store_operation *ret) {
        uint64_t deadline = now_monotonic_ns() + max_ms * 1000000ULL;
        for (;;) {
                _cleanup_(store_operation_release) struct store_operation op = { 0 };
                /* Read under workers_lock: whoever finishes an operation
                 * writes its outcome to the store and then broadcasts under
                 * this lock, so the wake-up cannot fall between this read
                 * and the wait below. */
                pthread_mutex_lock(&workers_lock);
                int r = store_operation_get(ctx->store, op_id, &op);
                if (r < 0) {
                        pthread_mutex_unlock(&workers_lock);
                        return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read operation: %m");
                }
                if (max_ms == 0 || operation_finished(&op) || now_monotonic_ns() >= deadline ||
                    atomic_load(ctx->stopping)) {
                        pthread_mutex_unlock(&workers_lock);
                        *ret = op;
                        op = (struct store_operation){ 0 };
                        return 0;
                }
                /* Woken by any finishing operation; the periodic wake
                 * re-checks the shutdown flag and operations nobody in
                 * this process runs. */
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += LIFECYCLE_RECHECK_S;
                (void) pthread_cond_timedwait(&workers_cond, &workers_lock, &until);
                pthread_mutex_unlock(&workers_lock);
        }
}

/* Replies with the operation: at once (202), or with ?wait=true once it
 * finished (200; 202 if it still runs after LIFECYCLE_WAIT_MAX_MS). */
static int reply_operation(struct api_ctx *ctx, const char *op_id, bool wait, struct api_reply *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = api_operation_wait(ctx, op_id, wait ? LIFECYCLE_WAIT_MAX_MS : 0, &op);
        if (r < 0)
                return r;
        json_t *o = api_operation_json(&op);
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = operation_finished(&op) && wait ? MHD_HTTP_OK : MHD_HTTP_ACCEPTED,
                                   .body = o };
        return 0;
}

bool api_idempotency_key_is_valid(const char *k) {
        size_t n = strlen(k);
        if (n == 0 || n > API_IDEMPOTENCY_KEY_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (k[i] < 0x21 || k[i] > 0x7e)
                        return false;
        return true;
}

int api_idempotency_key_check(struct api_ctx *ctx, const char *key) {
        if (key && !api_idempotency_key_is_valid(key))
                return api_fail(ctx, -EINVAL, "Idempotency-Key must be 1-%d printable ASCII characters",
                                API_IDEMPOTENCY_KEY_MAX);
        return 0;
}

int api_operation_insert(struct api_ctx *ctx, struct store_operation *op) {
        replica_op_lease(op);
        int r = store_operation_insert(ctx->store, op);
        if (r < 0 && !(r == -EEXIST && op->idempotency_key))
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert operation: %m");
        return r;
}

int api_operation_by_key(struct api_ctx *ctx, const char *key, struct store_operation *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = store_operation_find_by_key(ctx->store, key, &op);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to look up an operation: %m");
        /* another tenant's key: refused without a word about its request */
        if (!api_tenant_may_see(ctx, op.tenant_id))
                return api_fail(ctx, -EEXIST, "Idempotency-Key already used for another request");
        *ret = op;
        op = (struct store_operation){ 0 };
        return 1;
}

/* An earlier request with the same key: the same operation, if it was for
 * the same verb on the same sandbox. 1 when answered, 0 when the key is new. */
static int replay_by_key(struct api_ctx *ctx, const char *id, const char *verb, const char *key, bool wait,
                         struct api_reply *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = api_operation_by_key(ctx, key, &op);
        if (r <= 0)
                return r;
        if (strcmp(op.sandbox_id, id) != 0 || strcmp(op.verb, verb) != 0)
                return api_fail(ctx, -EEXIST,
                                "Idempotency-Key already used for %s of sandbox %s (operation %s)", op.verb,
                                op.sandbox_id, op.id);
        r = reply_operation(ctx, op.id, wait, ret);
        return r < 0 ? r : 1;
}

/* rollback's body {"snapshot":"ID"}: a snapshot of this sandbox. */
static int rollback_snapshot(struct api_ctx *ctx, const char *id, const json_t *body, char *ret, size_t n) {
        const char *snap = json_string_value(json_object_get(body, "snapshot"));
        if (!snap)
                return api_fail(ctx, -EINVAL, "field \"snapshot\" (a snapshot id) is required");
        _cleanup_(store_snapshot_release) struct store_snapshot sn = { 0 };
        int r = strlen(snap) < n ? store_snapshot_get(ctx->store, snap, &sn) : -ENOENT;
        if (r == -ENOENT || (r >= 0 && strcmp(sn.sandbox_id, id) != 0))
                return api_fail(ctx, -ENOENT, "snapshot '%.64s' of sandbox '%.64s' not found", snap, id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read snapshot: %m");
        snprintf(ret, n, "%s", sn.id);
        return 0;
}

/* The row of a fork's child, "creating" until the worker has it running:
 * the parent's template, metadata, env keys (the env itself goes along
 * inside the VM), egress policy and node (the fork is a copy on its disk). */
static int fork_child_insert(struct api_ctx *ctx, const struct store_sandbox *parent, const char *network,
                             const char *child_id) {
        struct store_sandbox row = { .id = (char *) child_id, .tenant_id = parent->tenant_id,
                                     .template_name = parent->template_name, .state = "creating",
                                     .metadata = parent->metadata, .env_keys = parent->env_keys,
                                     .network = (char *) network, .node = parent->node,
                                     .memory_mib = parent->memory_mib, .vcpus = parent->vcpus };
        int r = store_sandbox_insert(ctx->store, &row);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert the fork child: %m");
        return 0;
}

int api_sandbox_wake(struct api_ctx *ctx, const char *id) {
        struct api_reply rep = { 0 };
        int r = api_sandbox_verb(ctx, id, "wake", NULL, NULL, true, &rep);
        if (r >= 0) {
                const char *st = json_string_value(json_object_get(rep.body, "state"));
                if (!st || strcmp(st, "succeeded") != 0) {
                        const char *msg = json_string_value(json_object_get(json_object_get(rep.body, "error"),
                                                                            "message"));
                        r = api_fail(ctx, -EIO, "waking the suspended sandbox failed: %s", msg ?: "it did not finish");
                }
        }
        api_reply_release(&rep);
        return r;
}

/* A sandbox must be running to take commands; a suspended one is woken
 * first, transparently (sb is read again). */
int api_sandbox_require_running(struct api_ctx *ctx, struct store_sandbox *sb) {
        if (strcmp(sb->state, "suspended") == 0) {
                _cleanup_free_ char *id = strdup(sb->id);
                if (!id)
                        return -ENOMEM;
                int r = api_sandbox_wake(ctx, id);
                if (r < 0)
                        return r;
                store_sandbox_release(sb);
                *sb = (struct store_sandbox){ 0 };
                if ((r = api_sandbox_lookup(ctx, id, sb)) < 0)
                        return r;
        }
        if (strcmp(sb->state, "running") == 0)
                return 0;
        if (strcmp(sb->state, "creating") == 0)
                return api_fail(ctx, -EBUSY, "sandbox '%s' is still being created", sb->id);
        return api_fail(ctx, -EBUSY, "sandbox '%s' is %s%s%.160s", sb->id, sb->state, sb->error ? ": " : "",
                        sb->error ? sb->error : "");
}

/* A wake of a suspended sandbox whose node is away (lost, draining, or no
 * member any more) goes to another node that holds its template, if its
 * image is whole in the object store the nodes share (the new node says
 * so): the row moves there first. A lost or removed node's sandbox with no
 * such image cannot wake (409: the latest state may be on that node
 * alone); a draining node's wakes there when no other node fits. */
static int wake_placement(struct api_ctx *ctx, const struct store_sandbox *sb) {
        if (!sb->node)
                return 0;
        _cleanup_(store_node_release) struct store_node n = { 0 };
        int r = store_node_get(ctx->store, sb->node, &n);
        if (r < 0 && r != -ENOENT)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read node: %m");
        const char *why = r == -ENOENT ? "no member of the cluster"
                          : n.lost_at  ? "lost"
                          : n.draining ? "draining"
                                       : NULL;
        if (!why)
                return 0;
        bool must = !n.draining || n.lost_at;
        _cleanup_free_ char *to = NULL;
        char addr[NODES_ADDR_MAX], err[API_ERRMSG_MAX] = "", snap[96];
        /* its image resumes only where the VMs have the CPU of the node it
         * was suspended on (what that node last said; a removed node's is
         * unknown, and the new node checks the image itself) */
        _cleanup_(json_decrefp) json_t *was = n.info ? json_loads(n.info, 0, NULL) : NULL;
        struct nodes_want want = { .template_name = sb->template_name,
                                   .cpu = json_string_value(json_object_get(was, "cpu")) };
        r = nodes_place(&want, &to, err);
        if (r == -EXDEV)
                return api_fail(ctx, -EXDEV, "cannot wake: its node %s is %s, and %s", sb->node, why, err);
        if (r >= 0 && !(to && strcmp(to, sb->node) == 0))
                r = nodes_addr(to, addr);
        else if (r >= 0)
                r = -EHOSTDOWN; /* only the draining node itself fits */
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if (r >= 0) {
                api_suspended_snapshot_id(sb->id, snap, sizeof snap);
                _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "suspended.get", "snapshot_id",
                                                                snap);
                r = req ? node_call(addr, ctx->config->node_timeout_s, req, &rep, err) : -ENOMEM;
                if (r >= 0 && !json_is_true(json_object_get(rep, "uploaded")))
                        r = -ENOENT;
        }
        if (r < 0)
                return must ? api_fail(ctx, -EBUSY,
                                       "cannot wake: its node %s is %s, and no other node can wake it (%s)",
                                       sb->node, why,
                                       r == -ENOENT ? "its image is not whole in the object store"
                                       : err[0]     ? err
                                                    : strerror(-r))
                            : 0;
        r = store_sandbox_move(ctx->store, sb->id, "suspended", sb->node, to);
        if (r == -ESTALE || r == -ENOENT)
                return api_fail(ctx, -EBUSY, "cannot wake: the sandbox changed meanwhile, try again");
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to move sandbox: %m");
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: its node %s is %s: waking it on %s", sb->id, sb->node, why,
                 to ?: API_LOCAL_NODE);
        return 0;
}

/* Undoes a verb that will not run: the fork child's row (child, when
 * inserted), the claim (sb and t, when the row was claimed), and its
 * operation fails with r and the message in ctx->err. Returns r. */
static int verb_abort(struct api_ctx *ctx, const char *op_id, const struct store_sandbox *sb,
                      const struct lifecycle_transition *t, const char *child, int r) {
        if (child)
                (void) store_sandbox_delete(ctx->store, child);
        if (sb)
                (void) store_sandbox_transition(ctx->store, sb->id, t->transitional, sb->state, NULL);
        api_operation_finish(ctx->store, op_id, r, ctx->err, NULL);
        return r;
}

int api_sandbox_verb(struct api_ctx *ctx, const char *id, const char *verb_name, const json_t *body,
                     const char *idempotency_key, bool wait, struct api_reply *ret) {
        enum lifecycle_verb verb;
        int r = lifecycle_verb_from_name(verb_name, &verb);
        if (r < 0)
                return api_fail(ctx, -ENOENT, "no such verb");
        const struct lifecycle_transition *t = lifecycle_get(verb);
        if ((r = api_idempotency_key_check(ctx, idempotency_key)) < 0)
                return r;

        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        r = store_sandbox_get(ctx->store, id, &sb);
        if (r >= 0 && !api_tenant_may_see(ctx, sb.tenant_id))
                r = -ENOENT; /* another tenant's: as if there were none */
        if (r < 0)
                return api_read_fail(ctx, r, "sandbox", id);
        if (idempotency_key && (r = replay_by_key(ctx, id, t->name, idempotency_key, wait, ret)) != 0)
                return r < 0 ? r : 0;
        char snapshot_id[80] = "", child_id[32] = "";
        /* a fork child gets its parent's secrets only when asked */
        json_t *fork_secrets = json_object_get(body, "secrets");
        if (fork_secrets && !json_is_boolean(fork_secrets))
                return api_fail(ctx, -EINVAL, "field 'secrets' must be true or false");
        if (verb == LIFECYCLE_ROLLBACK && (r = rollback_snapshot(ctx, id, body, snapshot_id, sizeof snapshot_id)) < 0)
                return r;
        if (verb == LIFECYCLE_SUSPEND || verb == LIFECYCLE_WAKE)
                api_suspended_snapshot_id(id, snapshot_id, sizeof snapshot_id);

        r = lifecycle_check(verb, sb.state);
        if (r == -EBUSY)
                return api_fail(ctx, -EBUSY, "cannot %s: another operation is in progress (sandbox is %s)", t->name,
                                sb.state);
        if (r < 0)
                return api_fail(ctx, -EBUSY, "cannot %s: sandbox is %s", t->name, sb.state);
        if ((verb == LIFECYCLE_WAKE || verb == LIFECYCLE_SUSPEND) && datakey_is_revoked(sb.tenant_id))
                return api_fail(ctx, -EKEYREVOKED, "cannot %s: the tenant's key was revoked, so its sandboxes' "
                                "images cannot be opened or sealed", t->name);
        if (verb == LIFECYCLE_WAKE && (r = wake_placement(ctx, &sb)) < 0)
                return r;
        if (verb == LIFECYCLE_FORK && (r = api_volume_fork_holds(ctx, id, NULL)) < 0)
                return r;

        /* the operation first, then the claim: a replica that dies between
         * the two leaves an operation whose lease runs out (its settle
         * finds the row unclaimed), never a claimed row that no operation
         * settles; the detail says what settling it needs (a fork's child) */
        char op_id[32];
        if ((verb == LIFECYCLE_FORK && (r = random_id("sbx-", 8, child_id, sizeof child_id)) < 0) ||
            (r = random_id("op-", 8, op_id, sizeof op_id)) < 0)
                return r;
        _cleanup_free_ char *detail = child_id[0] ? strdup_printf("{\"child\":\"%s\"}", child_id) : NULL;
        if (child_id[0] && !detail)
                return -ENOMEM;
        struct store_operation op = { .id = op_id, .sandbox_id = (char *) id, .verb = (char *) t->name,
                                      .state = "pending", .idempotency_key = (char *) idempotency_key,
                                      .detail = detail };
        r = api_operation_insert(ctx, &op);
        /* the same key raced in from a second request: answer with its operation */
        if (r == -EEXIST && idempotency_key && (r = replay_by_key(ctx, id, t->name, idempotency_key, wait, ret)) != 0)
                return r < 0 ? r : 0;
        if (r < 0)
                return r;

        /* claim: only one request moves the row out of its current state */
        r = store_sandbox_transition(ctx->store, id, sb.state, t->transitional, t->target);
        if (r == -ESTALE)
                return verb_abort(ctx, op_id, NULL, NULL, NULL,
                                  api_fail(ctx, -EBUSY, "cannot %s: the sandbox changed state meanwhile, try again",
                                           t->name));
        if (r < 0)
                return verb_abort(ctx, op_id, NULL, NULL, NULL,
                                  log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to update sandbox: %m"));

        /* the verbs that give the sandbox a VM carry its egress policy, read
         * after the claim: a PUT stored before it is seen, one after it
         * waits for the verb (api-network.c) */
        _cleanup_free_ char *network = NULL;
        if ((verb == LIFECYCLE_START || verb == LIFECYCLE_ROLLBACK || verb == LIFECYCLE_WAKE ||
             verb == LIFECYCLE_FORK) &&
            (r = api_network_of_sandbox(ctx, id, &network)) < 0)
                return verb_abort(ctx, op_id, &sb, t, NULL, r);
        if (verb == LIFECYCLE_FORK && (r = fork_child_insert(ctx, &sb, network, child_id)) < 0)
                return verb_abort(ctx, op_id, &sb, t, NULL, r);
        if (verb == LIFECYCLE_FORK && (r = api_volume_fork_holds(ctx, id, child_id)) < 0)
                return verb_abort(ctx, op_id, &sb, t, child_id, r);
        if (verb == LIFECYCLE_FORK && json_is_true(fork_secrets) && (r = api_secrets_fork(ctx, id, child_id)) < 0)
                return verb_abort(ctx, op_id, &sb, t, child_id, r);
        struct job *j = calloc(1, sizeof *j);
        if (!j)
                return verb_abort(ctx, op_id, &sb, t, child_id[0] ? child_id : NULL, -ENOMEM);
        *j = (struct job){ .config = ctx->config, .store = ctx->store, .verb = verb, .wait_for_node = true,
                           .network = TAKE_PTR(network) };
        snprintf(j->op_id, sizeof j->op_id, "%s", op_id);
        snprintf(j->sandbox_id, sizeof j->sandbox_id, "%s", id);
        snprintf(j->from_state, sizeof j->from_state, "%s", sb.state);
        snprintf(j->transitional, sizeof j->transitional, "%s", t->transitional);
        snprintf(j->snapshot_id, sizeof j->snapshot_id, "%s", snapshot_id);
        snprintf(j->child_id, sizeof j->child_id, "%s", child_id);
        if (sb.tenant_id) {
                j->has_tenant = true;
                snprintf(j->tenant, sizeof j->tenant, "%s", sb.tenant_id);
        }
        /* a suspend's image is sealed with a data key of its own */
        if (verb == LIFECYCLE_SUSPEND && (r = datakey_new(sb.tenant_id, &j->key)) < 0) {
                job_free(j);
                return verb_abort(ctx, op_id, &sb, t, NULL,
                                  r == -EKEYREVOKED
                                          ? api_fail(ctx, r, "cannot suspend: the tenant's key was revoked (rotate "
                                                             "it to seal new images)")
                                          : api_fail(ctx, -EIO, "cannot suspend: no data key: %s", strerror(-r)));
        }
        j->has_key = verb == LIFECYCLE_SUSPEND;
        r = job_spawn(j);
        if (r < 0) {
                job_free(j);
                return verb_abort(ctx, op_id, &sb, t, child_id[0] ? child_id : NULL,
                                  api_fail(ctx, r, "too many operations in progress, try again later"));
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "sandbox %s: %s started as %s", id, t->name, op_id);
        return reply_operation(ctx, op_id, wait, ret);
}

int api_operation_get(struct api_ctx *ctx, const char *op_id, struct api_reply *ret) {
        _cleanup_(store_operation_release) struct store_operation op = { 0 };
        int r = store_operation_get(ctx->store, op_id, &op);
        if (r >= 0 && !api_tenant_may_see(ctx, op.tenant_id))
                r = -ENOENT; /* another tenant's: as if there were none */
        if (r < 0)
                return api_read_fail(ctx, r, "operation", op_id);
        json_t *o = api_operation_json(&op);
        if (!o)
                return -ENOMEM;
        *ret = (struct api_reply){ .status = MHD_HTTP_OK, .body = o };
        return 0;
}

void api_lifecycle_shutdown_begin(void) {
        atomic_store(&shutting_down, true);
}

void api_lifecycle_drain(unsigned timeout_s) {
        api_lifecycle_shutdown_begin();
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_s;
        pthread_mutex_lock(&workers_lock);
        while (workers > 0)
                if (pthread_cond_timedwait(&workers_cond, &workers_lock, &deadline) != 0)
                        break;
        unsigned left = workers;
        pthread_mutex_unlock(&workers_lock);
        if (left > 0)
                log_warn("%u lifecycle operations still running at shutdown", left);
}

void api_lifecycle_reconcile(const struct daemon_config *config, struct store *store) {
        /* A delete cut off is finished as a replica finishes another's
         * (each step is idempotent): its node may have removed the VM
         * already, and the sandbox is not to come back as failed. Alone on
         * its store, operations carry no lease (none "expires"): every
         * unfinished one is listed. */
        struct store_operation *ops = NULL;
        size_t n_ops = 0;
        if (store_operation_list_unfinished(store, STORE_LIST_MAX, &ops, &n_ops) >= 0)
                for (size_t i = 0; i < n_ops; i++)
                        if (strcmp(ops[i].verb, "delete") == 0) {
                                log_warn("sandbox %s was being deleted when airlockd stopped; finishing it",
                                         ops[i].sandbox_id);
                                api_operation_settle_orphan(config, store, &ops[i]);
                        }
        store_operation_array_free(ops, n_ops);
        int r = store_operation_fail_unfinished(store, "{\"code\":\"internal\",\"message\":\"airlockd stopped while "
                                                       "the operation ran\"}");
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, NULL, "store: failed to close unfinished operations: %m");
        struct store_sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list(store, STORE_LIST_MAX, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(a[i].state, "creating") == 0 || !lifecycle_state_is_transitional(a[i].state))
                        continue;
                /* a verb was cut off: take whatever the node reports */
                struct job j = { .config = config, .store = store };
                snprintf(j.sandbox_id, sizeof j.sandbox_id, "%s", a[i].id);
                snprintf(j.from_state, sizeof j.from_state, "failed");
                snprintf(j.transitional, sizeof j.transitional, "%s", a[i].state);
                log_warn("sandbox %s was %s when airlockd stopped; asking the node", a[i].id, a[i].state);
                job_settle_after_failure(&j, "airlockd stopped during a lifecycle operation");
        }
        store_sandbox_array_free(a, n);
}

/* The state a verb leaves its sandbox in when it succeeds (fork: its
 * parent's, which it keeps; delete: gone). */
static const char *verb_target(const char *verb, const char *from) {
        enum lifecycle_verb v;
        if (lifecycle_verb_from_name(verb, &v) < 0)
                return NULL;
        const struct lifecycle_transition *t = lifecycle_get(v);
        return t->target ? t->target : from;
}

static const char settle_why[] = "the control-plane replica carrying it stopped";

/* A field of an operation's detail (JSON object text), or NULL. */
static json_t *detail_get(const struct store_operation *op, const char *key, json_t **ret_detail) {
        *ret_detail = op->detail ? json_loads(op->detail, 0, NULL) : NULL;
        return json_object_get(*ret_detail, key);
}

/* A delete whose replica stopped: done again from where it got (each step
 * is idempotent), or failed when it never claimed the row. node_r and
 * node_state: what the sandbox's node said of it. */
static void settle_delete(const struct daemon_config *config, struct store *store, const struct store_operation *op,
                          const struct store_sandbox *sb, const char *node_state, int node_r) {
        if (strcmp(sb->state, "deleting") != 0) {
                api_operation_finish(store, op->id, -EIO, settle_why, NULL);
                return;
        }
        _cleanup_(json_decrefp) json_t *detail = NULL;
        bool keep = json_is_true(detail_get(op, "keep_snapshots", &detail));
        char err[API_ERRMSG_MAX] = "", addr[NODES_ADDR_MAX], snap[96];
        _cleanup_(store_node_release) struct store_node n = { 0 };
        bool lost = sb->node && store_node_get(store, sb->node, &n) >= 0 && n.lost_at;
        int r = 0;
        if (node_state && !lost) {
                _cleanup_(json_decrefp) json_t *del = json_pack("{s:s, s:s, s:b}", "op", "sandbox.delete", "id",
                                                                sb->id, "keep_snapshots", keep);
                r = del ? nodes_sandbox_call(sb->id, config->node_timeout_s, del, NULL, err) : -ENOMEM;
        } else if (node_r < 0 && node_r != -ENOENT && !lost)
                r = node_r; /* its node is there but did not answer */
        if (r < 0 && r != -ENOENT) {
                /* the VM may still be there: a DELETE again will see */
                (void) store_sandbox_update_state(store, sb->id, "failed", "a delete was interrupted: delete it again");
                api_operation_finish(store, op->id, r, settle_why, NULL);
                return;
        }
        /* a suspended one's image: in the object store every node shares */
        api_suspended_snapshot_id(sb->id, snap, sizeof snap);
        _cleanup_(json_decrefp) json_t *sdel = json_pack("{s:s, s:s}", "op", "suspended.delete", "snapshot_id", snap);
        if (sdel && nodes_any_addr(addr) >= 0 && (r = node_call(addr, config->node_timeout_s, sdel, NULL, err)) < 0 &&
            r != -ENOENT)
                log_warn("sandbox %s: its suspended image may be left in the object store: %s", sb->id, err);
        r = keep ? store_sandbox_update_state(store, sb->id, "archived", NULL) : store_sandbox_delete(store, sb->id);
        api_operation_finish(store, op->id, r < 0 && r != -ENOENT ? r : 0, NULL,
                             keep ? "{\"state\":\"archived\"}" : "{\"state\":\"deleted\"}");
        log_info("operation %s (delete %s): its replica stopped; finished here: %s", op->id, sb->id,
                 keep ? "archived" : "deleted");
}

/* A fork whose replica stopped: its child (the detail names it) is kept
 * if its node runs it, else removed. Whether it runs; *ret_result the
 * fork's result then. */
static bool settle_fork_child(const struct daemon_config *config, struct store *store,
                              const struct store_operation *op, char **ret_result) {
        _cleanup_(json_decrefp) json_t *detail = NULL;
        const char *child = json_string_value(detail_get(op, "child", &detail));
        _cleanup_(store_sandbox_release) struct store_sandbox c = { 0 };
        if (!child || store_sandbox_get(store, child, &c) < 0)
                return false;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.get", "id", child);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        int r = req ? nodes_sandbox_call(child, config->node_timeout_s, req, &rep, err) : -ENOMEM;
        const char *state = r >= 0 ? json_string_value(json_object_get(json_object_get(rep, "sandbox"), "state")) : NULL;
        bool runs = strcmp(c.state, "creating") != 0 ||
                    (state && strcmp(state, "running") == 0 &&
                     store_sandbox_transition(store, child, "creating", "running", NULL) >= 0);
        if (!runs) {
                if (r >= 0) {
                        _cleanup_(json_decrefp) json_t *del = json_pack("{s:s, s:s}", "op", "sandbox.delete", "id", child);
                        (void) nodes_sandbox_call(child, config->node_timeout_s, del, NULL, err);
                }
                if (r >= 0 || r == -ENOENT)
                        (void) store_sandbox_delete(store, child);
                else
                        (void) store_sandbox_transition(store, child, "creating", "failed", NULL);
                return false;
        }
        _cleanup_(json_decrefp) json_t *res = json_pack("{s:{s:s}}", "sandbox", "id", child);
        *ret_result = res ? json_dumps(res, JSON_COMPACT) : NULL;
        return true;
}

void api_operation_settle_orphan(const struct daemon_config *config, struct store *store,
                                 const struct store_operation *op) {
        const char *why = settle_why;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(store, op->sandbox_id, &sb);
        if (r == -ENOENT) {
                /* a delete that got as far as removing the row did it all */
                api_operation_finish(store, op->id, strcmp(op->verb, "delete") == 0 ? 0 : -EIO, why, NULL);
                return;
        }
        if (r < 0)
                return; /* the store is away: the lease runs out again, and the next beat retries */
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.get", "id", op->sandbox_id);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char err[API_ERRMSG_MAX] = "";
        r = req ? nodes_sandbox_call(op->sandbox_id, config->node_timeout_s, req, &rep, err) : -ENOMEM;
        const char *node_state = r >= 0 ? json_string_value(json_object_get(json_object_get(rep, "sandbox"), "state"))
                                        : NULL;
        if (node_state && (!lifecycle_state_is_valid(node_state) || lifecycle_state_is_transitional(node_state)))
                node_state = NULL;
        if (strcmp(op->verb, "create") == 0) {
                /* the node made it: it is the client's (with its key the
                 * retry finds it); else nothing of it stays. A row that is
                 * running already was marked so by its replica at the last
                 * moment. */
                if (strcmp(sb.state, "running") == 0 ||
                    (node_state && strcmp(node_state, "running") == 0 &&
                     store_sandbox_transition(store, sb.id, "creating", "running", NULL) >= 0)) {
                        _cleanup_(store_sandbox_release) struct store_sandbox now = { 0 };
                        _cleanup_(json_decrefp) json_t *o =
                                store_sandbox_get(store, sb.id, &now) >= 0 ? api_sandbox_row_json(&now) : NULL;
                        _cleanup_free_ char *res = o ? json_dumps(o, JSON_COMPACT) : NULL;
                        api_operation_finish(store, op->id, 0, NULL, res ?: "{}");
                        log_info("operation %s (create %s): its replica stopped; the node has it running: adopted",
                                 op->id, sb.id);
                        return;
                }
                if (strcmp(sb.state, "creating") != 0) {
                        /* not ours to undo: deleted, or a verb claimed it */
                } else if (r >= 0 || r == -ENOENT) {
                        if (r >= 0) {
                                _cleanup_(json_decrefp) json_t *del =
                                        json_pack("{s:s, s:s}", "op", "sandbox.delete", "id", sb.id);
                                (void) nodes_sandbox_call(sb.id, config->node_timeout_s, del, NULL, err);
                        }
                        (void) store_sandbox_delete(store, sb.id);
                } else
                        (void) store_sandbox_transition(store, sb.id, "creating", "failed", NULL);
                api_operation_finish(store, op->id, -EIO, why, NULL);
                log_info("operation %s (create %s): its replica stopped before the sandbox ran: failed", op->id, sb.id);
                return;
        }
        if (strcmp(op->verb, "delete") == 0) {
                settle_delete(config, store, op, &sb, node_state, r);
                return;
        }
        /* a verb: the sandbox takes what its node reports; the verb
         * succeeded if that is where it was going (a fork: if its child
         * runs) */
        _cleanup_free_ char *result = NULL;
        bool child_runs = strcmp(op->verb, "fork") == 0 && settle_fork_child(config, store, op, &result);
        const char *target = verb_target(op->verb, node_state);
        if (!lifecycle_state_is_transitional(sb.state)) {
                /* never claimed, or its worker settled the row, then died
                 * before the operation */
                bool done = strcmp(op->verb, "fork") == 0 ? child_runs : target && strcmp(sb.state, target) == 0;
                api_operation_finish(store, op->id, done ? 0 : -EIO, done ? NULL : why, done ? result : NULL);
                return;
        }
        struct job j = { .config = config, .store = store };
        snprintf(j.sandbox_id, sizeof j.sandbox_id, "%s", sb.id);
        snprintf(j.from_state, sizeof j.from_state, "failed");
        snprintf(j.transitional, sizeof j.transitional, "%s", sb.state);
        job_settle_after_failure(&j, why);
        _cleanup_(store_sandbox_release) struct store_sandbox now = { 0 };
        bool done = store_sandbox_get(store, sb.id, &now) >= 0 &&
                    (strcmp(op->verb, "fork") == 0 ? child_runs : target && strcmp(now.state, target) == 0);
        api_operation_finish(store, op->id, done ? 0 : -EIO, done ? NULL : why, done ? result : NULL);
        log_info("operation %s (%s %s): its replica stopped; settled as %s, the sandbox %s", op->id, op->verb, sb.id,
                 done ? "succeeded" : "failed", now.state ?: "gone");
}

