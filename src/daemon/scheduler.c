/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The snapshot scheduler (scheduler.h): its thread, one pass over the
 * sandboxes, one visit of a sandbox, the per-sandbox snapshot claim, and
 * what the scheduler remembers between passes (retry times and log limits,
 * in memory only: after a restart the store's rows say what is due).
 */
#include "scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apierror.h"
#include "log.h"
#include "macros.h"
#include "replica.h"
#include "nodeclient.h"
#include "nodes.h"
#include "util.h"
#include "worker.h"

#define SCHEDULER_VISITS_MAX 256     /* running sandboxes looked at per pass (a store read each) */
#define SCHEDULER_WORK_MAX 8         /* sandboxes given node calls per pass */
#define SCHEDULER_DELETES_MAX 16     /* retention deletes per sandbox per pass */
#define SCHEDULER_LOG_EVERY_MS 60000 /* one failure line per sandbox and topic per minute */
#define SCHEDULER_RETRY_MAX_MS 60000 /* a failed kind is tried again after its interval, at most this */
#define SCHEDULER_ID_MAX 65          /* sandbox ids are 1-64 characters */

/* What a failure line is about: a snapshot kind, or these. */
enum {
        TOPIC_PRUNE = _SNAPSHOT_KIND_MAX, /* retention deletes */
        TOPIC_POLICY,                     /* the sandbox's own policy no longer applies */
        _TOPIC_MAX,
};

/* What the scheduler remembers of one running sandbox between passes. */
struct memo {
        char id[SCHEDULER_ID_MAX];
        int64_t retry_ms[_SNAPSHOT_KIND_MAX]; /* no attempt of this kind before (after a failure) */
        int64_t logged_ms[_TOPIC_MAX];        /* the last failure line of this topic */
        unsigned suppressed[_TOPIC_MAX];      /* failure lines not written since */
        bool seen;                            /* running in this pass's listing */
};

struct scheduler {
        const struct daemon_config *config;
        struct store *store;
        struct worker *worker;
        atomic_bool stop; /* read by a pass between its steps */

        /* the scheduler thread's own */
        struct memo *memos; /* sorted by id */
        size_t n_memos, cap_memos;
        int64_t cursor_created_at; /* the last sandbox visited, in the listing's order */
        char cursor_id[SCHEDULER_ID_MAX];
        int64_t node_logged_ms, store_logged_ms;
};

/* ---- the per-sandbox claim ---- */

struct claim {
        struct claim *next;
        char id[SCHEDULER_ID_MAX];
};

static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t claims_cond = PTHREAD_COND_INITIALIZER;
static struct claim *claims;

static bool claimed_locked(const char *id) {
        for (const struct claim *c = claims; c; c = c->next)
                if (strcmp(c->id, id) == 0)
                        return true;
        return false;
}

int scheduler_claim(const char *sandbox_id, unsigned wait_ms) {
        if (!sandbox_id || strlen(sandbox_id) >= SCHEDULER_ID_MAX)
                return -EINVAL;
        struct claim *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        snprintf(c->id, sizeof c->id, "%s", sandbox_id);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long) (wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&claims_lock);
        int k = wait_ms > 0 ? 0 : ETIMEDOUT;
        while (k == 0 && claimed_locked(sandbox_id))
                k = pthread_cond_timedwait(&claims_cond, &claims_lock, &until);
        if (claimed_locked(sandbox_id)) {
                pthread_mutex_unlock(&claims_lock);
                free(c);
                return -EBUSY;
        }
        c->next = claims;
        claims = c;
        pthread_mutex_unlock(&claims_lock);
        return 0;
}

void scheduler_release(const char *sandbox_id) {
        pthread_mutex_lock(&claims_lock);
        for (struct claim **p = &claims; *p; p = &(*p)->next)
                if (strcmp((*p)->id, sandbox_id) == 0) {
                        struct claim *c = *p;
                        *p = c->next;
                        free(c);
                        break;
                }
        pthread_cond_broadcast(&claims_cond);
        pthread_mutex_unlock(&claims_lock);
}

/* ---- snapshots through the node ---- */

static int64_t now_ms(void) {
        return (int64_t) (now_realtime_ns() / 1000000ULL);
}

static int set_err(char *err, int r, const char *fmt, ...) _printf_(3, 4);
static int set_err(char *err, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, API_ERRMSG_MAX, fmt, ap);
        va_end(ap);
        return r;
}

/* Removes a snapshot's image on the node; an image that is not there
 * (any more) counts as removed. */
static int node_snapshot_delete(const struct daemon_config *config, const char *sandbox_id, const char *snap_id,
                                char *err) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s}", "op", "snapshot.delete", "id", sandbox_id,
                                                        "snapshot_id", snap_id);
        if (!req)
                return -ENOMEM;
        int r = nodes_sandbox_call(sandbox_id, config->node_timeout_s, req, NULL, err);
        return r == -ENOENT ? 0 : r;
}

/* sandbox.snapshot_taken (GET /v1/events, webhooks): which snapshot, of
 * which kind, and whether the schedule took it; a failure is the event's,
 * never the snapshot's. */
static void snapshot_taken_event(struct store *store, const struct store_snapshot *sn) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = {0};
        if (store_sandbox_get(store, sn->sandbox_id, &sb) < 0)
                return;
        _cleanup_(json_decrefp) json_t *d =
                json_pack("{s:s, s:s, s:I, s:b}", "snapshot_id", sn->id, "kind", sn->kind, "size",
                          (json_int_t) sn->size, "scheduled", !sn->pinned);
        _cleanup_free_ char *detail = d ? json_dumps(d, JSON_COMPACT) : NULL;
        struct store_event e = {.tenant_id = sb.tenant_id,
                                .sandbox_id = sb.id,
                                .type = "sandbox.snapshot_taken",
                                .state = sb.state,
                                .detail = detail};
        if (!detail || store_event_append(store, &e) < 0)
                log_emit(LOG_LEVEL_WARN, NULL, "store: failed to record the event of snapshot %s", sn->id);
}

int scheduler_snapshot_take(const struct daemon_config *config, struct store *store, const char *sandbox_id,
                            enum snapshot_kind kind, bool pinned, struct store_snapshot *ret, json_t **ret_info,
                            char *err) {
        const char *kind_s = snapshot_kind_to_string(kind);
        if (!kind_s)
                return -EINVAL;
        char snap_id[32], derr[API_ERRMSG_MAX];
        int r = random_id("snap-", 8, snap_id, sizeof snap_id);
        if (r < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s, s:s}", "op", "sandbox.snapshot", "id",
                                                        sandbox_id, "snapshot_id", snap_id, "kind", kind_s);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if (!req)
                return -ENOMEM;
        r = nodes_sandbox_call(sandbox_id, SCHEDULER_SNAPSHOT_TIMEOUT_S, req, &rep, err);
        if (r < 0)
                return r;
        json_t *info = json_object_get(rep, "snapshot");
        /* a node from before full snapshots ignores "kind" and copies the
         * disk: that image is no full snapshot */
        if (kind == SNAPSHOT_FULL && strcmp(json_string_value(json_object_get(info, "kind")) ?: "", "full") != 0) {
                (void) node_snapshot_delete(config, sandbox_id, snap_id, derr);
                return set_err(err, -EPROTONOSUPPORT,
                               "the node agent does not take full snapshots (it took a disk snapshot)");
        }
        json_t *size = json_object_get(info, "size");
        struct store_snapshot sn = { .id = snap_id, .sandbox_id = (char *) sandbox_id, .kind = (char *) kind_s,
                                     .size = json_is_integer(size) && json_integer_value(size) > 0
                                                     ? json_integer_value(size)
                                                     : 0,
                                     .pinned = pinned };
        r = store_snapshot_insert(store, &sn);
        if (r >= 0)
                r = store_snapshot_get(store, snap_id, ret);
        if (r < 0) {
                /* nobody could use the image without its row: remove both */
                (void) store_snapshot_delete(store, snap_id);
                (void) node_snapshot_delete(config, sandbox_id, snap_id, derr);
                if (r == -ENOENT)
                        return set_err(err, r, "sandbox '%.64s' not found", sandbox_id);
                return set_err(err, r, "store: failed to record the snapshot: %s", strerror(-r));
        }
        snapshot_taken_event(store, ret);
        if (ret_info)
                *ret_info = json_incref(info);
        return 0;
}

/* ---- what the scheduler remembers ---- */

static int memo_cmp(const void *a, const void *b) {
        return strcmp(((const struct memo *) a)->id, ((const struct memo *) b)->id);
}

/* The memo of sandbox id, added when there is none yet; NULL on ENOMEM. */
static struct memo *memo_get(struct scheduler *s, const char *id) {
        struct memo key = { 0 };
        snprintf(key.id, sizeof key.id, "%s", id);
        struct memo *m = s->n_memos ? bsearch(&key, s->memos, s->n_memos, sizeof *m, memo_cmp) : NULL;
        if (m)
                return m;
        if (s->n_memos == s->cap_memos) {
                size_t ncap = s->cap_memos ? s->cap_memos * 2 : 16;
                struct memo *na = realloc(s->memos, ncap * sizeof *na);
                if (!na)
                        return NULL;
                s->memos = na;
                s->cap_memos = ncap;
        }
        size_t i = 0;
        while (i < s->n_memos && strcmp(s->memos[i].id, key.id) < 0)
                i++;
        memmove(&s->memos[i + 1], &s->memos[i], (s->n_memos - i) * sizeof *s->memos);
        s->memos[i] = key;
        s->n_memos++;
        return &s->memos[i];
}

/* Forgets the sandboxes that are not running (any more): a sandbox that
 * runs again starts afresh. */
static void memo_sweep(struct scheduler *s, const struct store_sandbox *a, size_t n) {
        for (size_t i = 0; i < n && s->n_memos > 0; i++) {
                if (strcmp(a[i].state, "running") != 0 || strlen(a[i].id) >= SCHEDULER_ID_MAX)
                        continue;
                struct memo key = { 0 };
                snprintf(key.id, sizeof key.id, "%s", a[i].id);
                struct memo *m = bsearch(&key, s->memos, s->n_memos, sizeof *m, memo_cmp);
                if (m)
                        m->seen = true;
        }
        size_t k = 0;
        for (size_t i = 0; i < s->n_memos; i++)
                if (s->memos[i].seen) {
                        s->memos[i].seen = false;
                        s->memos[k++] = s->memos[i];
                }
        s->n_memos = k;
}

/* Writes a failure line about one sandbox, unless one about the same topic
 * was written less than SCHEDULER_LOG_EVERY_MS ago. */
static void memo_log(struct memo *m, unsigned topic, int64_t now, const char *fmt, ...) _printf_(4, 5);
static void memo_log(struct memo *m, unsigned topic, int64_t now, const char *fmt, ...) {
        if (m->logged_ms[topic] && now - m->logged_ms[topic] < SCHEDULER_LOG_EVERY_MS && now >= m->logged_ms[topic]) {
                m->suppressed[topic]++;
                return;
        }
        char msg[API_ERRMSG_MAX + 128], ctx[96];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(ctx, sizeof ctx, "component=scheduler sandbox=%s", m->id);
        if (m->suppressed[topic])
                log_emit(LOG_LEVEL_WARN, ctx, "%s (and %u more like it since the last line)", msg,
                         m->suppressed[topic]);
        else
                log_emit(LOG_LEVEL_WARN, ctx, "%s", msg);
        m->logged_ms[topic] = now;
        m->suppressed[topic] = 0;
}

/* ---- one visit ---- */

static bool node_unreachable(int r) {
        return r == -EHOSTDOWN || r == -ECONNREFUSED;
}

/* The snapshots of a sandbox as retention sees them (pointing into a). */
static int retention_view(const struct store_snapshot *a, size_t n, struct retention_snapshot **ret) {
        struct retention_snapshot *v = calloc(n ? n : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                enum snapshot_kind k;
                v[i] = (struct retention_snapshot){ .id = a[i].id, .created_ms = a[i].created_at,
                                                    .pinned = a[i].pinned };
                /* an unknown kind is kept: retention only judges what it knows */
                v[i].kind = snapshot_kind_from_string(a[i].kind, &k) < 0 ? _SNAPSHOT_KIND_MAX : k;
        }
        *ret = v;
        return 0;
}

/* Deletes what retention lets go of (node image, then row), at most
 * SCHEDULER_DELETES_MAX; the rest next pass. Returns how many node calls
 * it made, or the error that ended it. */
static int prune(struct scheduler *s, struct memo *m, const struct retention_policy *p, const char *sandbox_id) {
        struct store_snapshot *a = NULL;
        size_t n = 0;
        int r = store_snapshot_list(s->store, sandbox_id, STORE_LIST_MAX, &a, &n);
        if (r < 0) {
                memo_log(m, TOPIC_PRUNE, now_ms(), "store: failed to list snapshots: %s", strerror(-r));
                return r;
        }
        _cleanup_free_ struct retention_snapshot *v = NULL;
        _cleanup_free_ bool *keep = calloc(n ? n : 1, sizeof *keep);
        if (!keep || retention_view(a, n, &v) < 0) {
                store_snapshot_array_free(a, n);
                return -ENOMEM;
        }
        int64_t now = now_ms();
        size_t n_del = retention_select(p, v, n, now, keep), done = 0;
        char ctx[96], err[API_ERRMSG_MAX] = "";
        snprintf(ctx, sizeof ctx, "component=scheduler sandbox=%s", sandbox_id);
        for (size_t i = 0; i < n && n_del > 0 && done < SCHEDULER_DELETES_MAX && !atomic_load(&s->stop); i++) {
                if (keep[i])
                        continue;
                r = node_snapshot_delete(s->config, sandbox_id, a[i].id, err);
                if (r < 0) {
                        memo_log(m, TOPIC_PRUNE, now, "cannot delete snapshot %s on the node: %s", a[i].id,
                                 err[0] ? err : strerror(-r));
                        break;
                }
                r = store_snapshot_delete(s->store, a[i].id);
                if (r < 0 && r != -ENOENT) {
                        memo_log(m, TOPIC_PRUNE, now, "store: failed to delete snapshot %s: %s", a[i].id,
                                 strerror(-r));
                        break;
                }
                r = 0;
                log_emit(LOG_LEVEL_DEBUG, ctx, "retention deleted %s snapshot %s", a[i].kind, a[i].id);
                done++;
        }
        store_snapshot_array_free(a, n);
        return r < 0 ? r : (int) done;
}

/* Takes one scheduled snapshot of a claimed sandbox; returns the node's
 * error for the caller to judge. */
static int take(struct scheduler *s, struct memo *m, const struct retention_policy *p, const char *sandbox_id,
                enum snapshot_kind kind) {
        char err[API_ERRMSG_MAX] = "", ctx[96];
        _cleanup_(store_snapshot_release) struct store_snapshot sn = { 0 };
        snprintf(ctx, sizeof ctx, "component=scheduler sandbox=%s", sandbox_id);
        uint64_t t0 = now_monotonic_ns();
        int r = scheduler_snapshot_take(s->config, s->store, sandbox_id, kind, false, &sn, NULL, err);
        int64_t now = now_ms();
        if (r >= 0) {
                m->retry_ms[kind] = 0;
                log_emit(LOG_LEVEL_DEBUG, ctx, "scheduled %s snapshot %s taken in %llu ms", sn.kind, sn.id,
                         (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
                return 0;
        }
        /* the node's "conflict" (it is busy with the sandbox: a verb runs,
         * or the sandbox just left "running"): next pass */
        if (r == -EBUSY || r == -EEXIST || node_unreachable(r)) {
                log_emit(LOG_LEVEL_DEBUG, ctx, "scheduled %s snapshot not taken: %s", snapshot_kind_to_string(kind),
                         err[0] ? err : strerror(-r));
                return r;
        }
        int64_t every_ms = (kind == SNAPSHOT_FULL ? p->full_every_s : p->disk_every_s) * 1000;
        /* a node without this kind will not have it in a minute either */
        m->retry_ms[kind] = now + (r == -EPROTONOSUPPORT ? every_ms : MIN(every_ms, SCHEDULER_RETRY_MAX_MS));
        memo_log(m, kind, now, "scheduled %s snapshot failed: %s", snapshot_kind_to_string(kind),
                 err[0] ? err : strerror(-r));
        return r;
}

/* The newest scheduled (unpinned) snapshot of each kind, 0 for none. */
static int last_scheduled(struct store *store, const char *sandbox_id, int64_t ret[_SNAPSHOT_KIND_MAX]) {
        struct store_snapshot *a = NULL;
        size_t n = 0;
        int r = store_snapshot_list(store, sandbox_id, STORE_LIST_MAX, &a, &n);
        if (r < 0)
                return r;
        for (size_t k = 0; k < _SNAPSHOT_KIND_MAX; k++)
                ret[k] = 0;
        for (size_t i = 0; i < n; i++) {
                enum snapshot_kind k;
                if (!a[i].pinned && snapshot_kind_from_string(a[i].kind, &k) >= 0)
                        ret[k] = MAX(ret[k], a[i].created_at);
        }
        store_snapshot_array_free(a, n);
        return 0;
}

/*
 * Visits one running sandbox: 1 when it called the node, 0 when there was
 * nothing to do (or it was skipped), -EHOSTDOWN when the node cannot be
 * reached (the pass ends).
 */
static int visit(struct scheduler *s, const struct store_sandbox *sb) {
        int64_t now = now_ms();
        struct memo *m = memo_get(s, sb->id);
        if (!m)
                return 0;
        struct retention_policy p = s->config->snapshot_policy;
        if (sb->snapshot_policy) {
                /* checked against the global policy at create; a global
                 * policy changed since may not combine with it */
                _cleanup_free_ char *msg = NULL;
                if (retention_policy_from_string(sb->snapshot_policy, &s->config->snapshot_policy, &p, &msg) < 0) {
                        memo_log(m, TOPIC_POLICY, now, "its snapshot policy no longer applies (%s); no scheduled "
                                 "snapshots and no retention", msg ? msg : "out of memory");
                        return 0;
                }
        }
        int64_t last[_SNAPSHOT_KIND_MAX];
        int r = last_scheduled(s->store, sb->id, last);
        if (r < 0) {
                memo_log(m, TOPIC_PRUNE, now, "store: failed to list snapshots: %s", strerror(-r));
                return 0;
        }
        bool due[_SNAPSHOT_KIND_MAX], any = false;
        for (size_t k = 0; k < _SNAPSHOT_KIND_MAX; k++) {
                /* none yet: an interval after the sandbox last changed state */
                int64_t since = last[k] ? last[k] : sb->updated_at;
                due[k] = retention_due(&p, (enum snapshot_kind) k, since, now) && now >= m->retry_ms[k];
                any |= due[k];
        }
        /* retention ages snapshots out whether or not one is due; ask it
         * only while a scheduled snapshot exists or is about to */
        if (!any && last[SNAPSHOT_DISK] == 0 && last[SNAPSHOT_FULL] == 0)
                return 0;

        /* an on-demand snapshot of this sandbox runs: not now */
        if (scheduler_claim(sb->id, 0) < 0)
                return 0;
        /* the listing may be a pass old: a verb may have claimed it since */
        _cleanup_(store_sandbox_release) struct store_sandbox cur = { 0 };
        if (store_sandbox_get(s->store, sb->id, &cur) < 0 || strcmp(cur.state, "running") != 0) {
                scheduler_release(sb->id);
                return 0;
        }
        bool called = false;
        for (size_t k = 0; k < _SNAPSHOT_KIND_MAX && !atomic_load(&s->stop); k++) {
                if (!due[k])
                        continue;
                called = true;
                r = take(s, m, &p, sb->id, (enum snapshot_kind) k);
                if (node_unreachable(r)) {
                        scheduler_release(sb->id);
                        return -EHOSTDOWN;
                }
        }
        if (!atomic_load(&s->stop)) {
                r = prune(s, m, &p, sb->id);
                called |= r > 0;
                if (node_unreachable(r)) {
                        scheduler_release(sb->id);
                        return -EHOSTDOWN;
                }
        }
        scheduler_release(sb->id);
        return called ? 1 : 0;
}

/* ---- the pass and the thread ---- */

/* Whether sandbox b comes after the cursor in the listing's order
 * (created_at, then id). */
static bool after_cursor(const struct scheduler *s, const struct store_sandbox *b) {
        if (b->created_at != s->cursor_created_at)
                return b->created_at > s->cursor_created_at;
        return strcmp(b->id, s->cursor_id) > 0;
}

static void pass(struct scheduler *s) {
        struct store_sandbox *a = NULL;
        size_t n = 0;
        int64_t now = now_ms();
        int r = store_sandbox_list(s->store, STORE_LIST_MAX, &a, &n);
        if (r < 0) {
                if (now - s->store_logged_ms >= SCHEDULER_LOG_EVERY_MS || now < s->store_logged_ms) {
                        log_errno(LOG_LEVEL_WARN, r, "component=scheduler", "store: failed to list sandboxes: %m");
                        s->store_logged_ms = now;
                }
                return;
        }
        memo_sweep(s, a, n);
        /* round-robin: start after the sandbox the last pass visited last */
        size_t start = 0;
        while (start < n && !after_cursor(s, &a[start]))
                start++;
        if (start == n)
                start = 0;
        size_t visits = 0, worked = 0;
        for (size_t i = 0; i < n && visits < SCHEDULER_VISITS_MAX && worked < SCHEDULER_WORK_MAX; i++) {
                if (atomic_load(&s->stop))
                        break;
                const struct store_sandbox *sb = &a[(start + i) % n];
                /* a verb in progress, paused, stopped, failed, creating: not ours to touch */
                if (strcmp(sb->state, "running") != 0 || strlen(sb->id) >= SCHEDULER_ID_MAX ||
                    !replica_owns(sb->id))
                        continue;
                visits++;
                s->cursor_created_at = sb->created_at;
                snprintf(s->cursor_id, sizeof s->cursor_id, "%s", sb->id);
                r = visit(s, sb);
                if (r == -EHOSTDOWN) {
                        if (now - s->node_logged_ms >= SCHEDULER_LOG_EVERY_MS || now < s->node_logged_ms) {
                                log_emit(LOG_LEVEL_WARN, "component=scheduler",
                                         "the node agent is not reachable; scheduled snapshots wait for it");
                                s->node_logged_ms = now;
                        }
                        break;
                }
                if (r > 0)
                        worked++;
        }
        store_sandbox_array_free(a, n);
}

static int scheduler_pass(void *arg) {
        pass(arg);
        return 0;
}

int scheduler_start(const struct daemon_config *config, struct store *store, struct scheduler **ret) {
        struct scheduler *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (struct scheduler){ .config = config, .store = store };
        atomic_init(&s->stop, false);
        int r = worker_start(scheduler_pass, s, config->snapshot_tick_ms, WORKER_WAIT_FIRST, &s->worker);
        if (r < 0) {
                free(s);
                return r;
        }
        _cleanup_(json_decrefp) json_t *p = retention_policy_json(&config->snapshot_policy);
        _cleanup_free_ char *p_s = p ? json_dumps(p, JSON_COMPACT) : NULL;
        log_info("snapshot scheduler started: every %u ms, policy %s", config->snapshot_tick_ms, p_s ? p_s : "?");
        *ret = s;
        return 0;
}

void scheduler_stop(struct scheduler *s) {
        if (!s)
                return;
        atomic_store(&s->stop, true);
        worker_stop(s->worker);
        free(s->memos);
        free(s);
        log_info("snapshot scheduler stopped");
}
