/* SPDX-License-Identifier: Apache-2.0 */
/* Fork, disk and full snapshots, rollback (layer 3). */
#include "sandbox-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "proto.h"
#include "util.h"

/* How long a snapshot waits for the guest to freeze (and to thaw). */
#define SNAPSHOT_FREEZE_MS 10000

int sandbox_fork(struct sandbox *parent, const char *child_id, const char *network, struct sandbox **ret_child,
                 const char **ret_state, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        int r = sandbox_life_begin(parent, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        /* the child inherits the parent's policy unless told otherwise */
        _cleanup_free_ char *inherited = NULL;
        if (!network) {
                pthread_mutex_lock(&parent->lock);
                inherited = parent->network ? strdup(parent->network) : NULL;
                bool oom = parent->network && !inherited;
                pthread_mutex_unlock(&parent->lock);
                if (oom) {
                        sandbox_life_end(parent);
                        return -ENOMEM;
                }
                network = inherited;
        }
        struct sandbox *c = NULL;
        r = sandbox_register_new(child_id, parent->template_name, parent->env, network, &c, ret_error);
        if (r < 0) {
                sandbox_life_end(parent);
                return r;
        }
        c->execution = 1;
        c->recover_checkpoint = parent->recover_checkpoint;
        c->limits = parent->limits;
        /* read-only volumes only (nodeops refuses a read-write one): the
         * child holds them too, mounted where the parent's memory has them */
        memcpy(c->volumes, parent->volumes, sizeof c->volumes);
        snprintf(c->tenant, sizeof c->tenant, "%s", parent->tenant);
        char *state = strdup_printf("%s/fork.state", c->dir);
        _cleanup_free_ char *disk = strdup_printf("%s/rootfs.img", c->dir);
        if (!state || !disk) {
                free(state);
                sandbox_life_end(parent);
                sandbox_create_abort(c);
                return -ENOMEM;
        }
        /* the parent's memory and disk of one instant; it runs on */
        struct snapshot_job job = { .s = parent, .state_path = state, .disk_dst = disk, .volumes_to = c,
                                    .leave_paused = sandbox_state_is(parent, SANDBOX_PAUSED) };
        r = sandbox_post_command(parent, SANDBOX_CMD_SNAPSHOT, &job, -1);
        sandbox_life_end(parent);
        if (r < 0) {
                *ret_error = strdup_printf("snapshot of %s failed: %s", parent->id, strerror(-r));
                free(state);
                sandbox_create_abort(c);
                return r;
        }
        uint64_t t_snap = now_monotonic_ns();
        /* new identity: hostname, sandbox id, RNG seed */
        r = sandbox_restore_new(c, state, ret_error);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, c->ctx, "forked from %s in %llu ms (snapshot %llu ms, parent paused %llu ms, restore %llu ms)",
                 parent->id, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 (unsigned long long) ((t_snap - t0) / 1000000ULL), (unsigned long long) job.stats.pause_ms,
                 (unsigned long long) c->restore_ms);
        pthread_mutex_lock(&c->lock);
        c->fork_pause_ms = job.stats.pause_ms;
        pthread_mutex_unlock(&c->lock);
        *ret_child = sandbox_ref(c);
        return 0;
}

/* Checks that snapshot_id can be taken: the directory exists (made), s has
 * fewer than SANDBOX_SNAPSHOTS_MAX, and no snapshot of that id (disk or
 * full) is there. -E2BIG / -EEXIST with *ret_error saying so. */
static int snapshot_room(struct sandbox *s, const char *dir, const char *snapshot_id, char **ret_error) {
        _cleanup_free_ char *img = sandbox_snapshot_path(s, snapshot_id), *state = sandbox_snapshot_state_path(s, snapshot_id);
        size_t n = 0;
        int r;
        if (!img || !state)
                return -ENOMEM;
        if ((r = mkdir_p(dir, 0700)) < 0 || (r = sandbox_snapshot_count(s->dir, &n)) < 0) {
                *ret_error = strdup_printf("cannot open %s: %s", dir, strerror(-r));
                return r;
        }
        if (n >= SANDBOX_SNAPSHOTS_MAX) {
                *ret_error = strdup_printf("sandbox %s has %d snapshots already, the most it may have", s->id,
                                           SANDBOX_SNAPSHOTS_MAX);
                return -E2BIG;
        }
        if (access(img, F_OK) == 0 || access(state, F_OK) == 0) {
                *ret_error = strdup_printf("snapshot %s exists", snapshot_id);
                return -EEXIST;
        }
        return 0;
}

int sandbox_snapshot(struct sandbox *s, const char *snapshot_id, json_t **ret_info, const char **ret_state,
                     char **ret_error) {
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        _cleanup_free_ char *dir = strdup_printf("%s/snapshots", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *dst = sandbox_snapshot_path(s, snapshot_id);
        _cleanup_(json_decrefp) json_t *empty = json_object();
        uint64_t freeze_ms = 0, t0 = now_monotonic_ns();
        struct guestconn *g = NULL;
        bool frozen = false, running;
        struct stat st;
        if (!dir || !rootfs || !dst || !empty) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = snapshot_room(s, dir, snapshot_id, ret_error)) < 0)
                goto out;

        /* A running guest freezes its file systems (which flushes them), so
         * the image is consistent without pausing the VM. A stopped one
         * has flushed at stop. */
        pthread_mutex_lock(&s->lock);
        running = s->state == SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        if (running) {
                r = sandbox_guest(s, &g);
                if (r < 0) {
                        *ret_error = strdup("the guest channel is gone");
                        goto out;
                }
                char *msg = NULL;
                frozen = true; /* a freeze that timed out may still have happened: thaw regardless */
                r = guestconn_call(g, PROTO_FREEZE, empty, SNAPSHOT_FREEZE_MS, NULL, &msg);
                if (r < 0) {
                        *ret_error = strdup_printf("the guest did not freeze its file systems: %s",
                                                   msg ? msg : strerror(-r));
                        free(msg);
                        goto out;
                }
        }
        r = sandbox_clone_replace(s, rootfs, dst);
        if (r < 0)
                *ret_error = strdup_printf("cannot copy the disk image: %s", strerror(-r));

out:
        if (frozen) {
                _cleanup_free_ char *msg = NULL;
                int k = guestconn_call(g, PROTO_THAW, empty, SNAPSHOT_FREEZE_MS, NULL, &msg);
                if (k < 0)
                        log_emit(LOG_LEVEL_WARN, s->ctx, "guest did not thaw (it thaws by itself within 10 s): %s",
                                 msg ? msg : strerror(-k));
                freeze_ms = (now_monotonic_ns() - t0) / 1000000ULL;
        }
        if (r >= 0 && stat(dst, &st) < 0)
                r = negative_errno();
        sandbox_life_end(s);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "snapshot %s failed: %s", snapshot_id,
                         *ret_error ? *ret_error : strerror(-r));
                return r;
        }
        json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I}", "id", snapshot_id, "size",
                              (json_int_t) st.st_blocks * 512, "apparent_size", (json_int_t) st.st_size,
                              "created_at", (json_int_t) (now_realtime_ns() / 1000000ULL), "freeze_ms",
                              (json_int_t) freeze_ms);
        if (!o)
                return -ENOMEM;
        log_emit(LOG_LEVEL_INFO, s->ctx, "snapshot %s taken in %llu ms (frozen %llu ms)", snapshot_id,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL), (unsigned long long) freeze_ms);
        *ret_info = o;
        return 0;
}

int sandbox_snapshot_full(struct sandbox *s, const char *snapshot_id, json_t **ret_info, const char **ret_state,
                          char **ret_error) {
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        _cleanup_free_ char *dir = strdup_printf("%s/snapshots", s->dir);
        _cleanup_free_ char *img = sandbox_snapshot_path(s, snapshot_id);
        _cleanup_free_ char *state = sandbox_snapshot_state_path(s, snapshot_id);
        uint64_t t0 = now_monotonic_ns();
        struct stat st_img = { 0 }, st_state = { 0 };
        struct snapshot_job job = { .s = s, .disk_dst = img, .state_path = state, .volumes_of = snapshot_id };
        if (!dir || !img || !state) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = snapshot_room(s, dir, snapshot_id, ret_error)) < 0)
                goto out;
        job.leave_paused = sandbox_state_is(s, SANDBOX_PAUSED);
        r = sandbox_post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        if (r >= 0 && (stat(img, &st_img) < 0 || stat(state, &st_state) < 0))
                r = negative_errno();
        if (r >= 0) {
                /* which execution it belongs to: a recovery may resume only
                 * one of the execution that failed */
                int k = sandbox_snapshot_execution_set(state, s->execution);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx,
                                  "cannot tag full snapshot %s with its execution (recovery will not resume it): %m",
                                  snapshot_id);
        }
        if (r < 0) {
                (void) unlink(img);
                (void) unlink(state);
                sandbox_volumes_snapshot_delete(s, snapshot_id);
                if (!*ret_error)
                        *ret_error = strdup_printf("full snapshot failed: %s", strerror(-r));
        }
out:
        sandbox_life_end(s);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "full snapshot %s failed: %s", snapshot_id,
                         *ret_error ? *ret_error : strerror(-r));
                return r;
        }
        json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "id", snapshot_id, "kind", "full",
                              "size", (json_int_t) (st_img.st_blocks + st_state.st_blocks) * 512, "apparent_size",
                              (json_int_t) st_img.st_size, "memory_bytes", (json_int_t) job.stats.bytes, "created_at",
                              (json_int_t) (now_realtime_ns() / 1000000ULL), "pause_ms",
                              (json_int_t) job.stats.pause_ms, "downtime_ms", (json_int_t) job.stats.downtime_ms,
                              "total_ms", (json_int_t) ((now_monotonic_ns() - t0) / 1000000ULL));
        if (!o)
                return -ENOMEM;
        log_emit(LOG_LEVEL_INFO, s->ctx, "full snapshot %s taken in %llu ms (vCPUs stopped %llu ms)", snapshot_id,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 (unsigned long long) job.stats.pause_ms);
        *ret_info = o;
        return 0;
}

int sandbox_rollback(struct sandbox *s, const char *snapshot_id, const char **ret_state, char **ret_error) {
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        uint64_t t0 = now_monotonic_ns();
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *src = sandbox_snapshot_path(s, snapshot_id);
        _cleanup_free_ char *state = sandbox_snapshot_state_path(s, snapshot_id);
        bool running, full;
        if (!rootfs || !src || !state) {
                r = -ENOMEM;
                goto out;
        }
        if (access(src, F_OK) < 0) {
                r = -ENXIO;
                *ret_error = strdup_printf("no snapshot %s of sandbox %s", snapshot_id, s->id);
                goto out;
        }
        /* a full snapshot resumes at its running point; a disk one boots */
        full = access(state, F_OK) == 0;
        pthread_mutex_lock(&s->lock);
        running = s->state == SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        if (running)
                sandbox_stop_claimed(s, !full); /* its memory is thrown away: no flush needed */
        /* the snapshot stays as it is: the sandbox gets a clone of it */
        r = sandbox_clone_replace(s, src, rootfs);
        if (r < 0) {
                *ret_error = strdup_printf("cannot replace the disk image: %s", strerror(-r));
                goto out;
        }
        if (full) {
                /* its memory has the volumes mounted as they were then: they
                 * go back with it (a disk snapshot boots, and keeps them) */
                if ((r = sandbox_volumes_rollback(s, snapshot_id)) < 0) {
                        *ret_error = strdup_printf("cannot put the volumes back: %s", strerror(-r));
                        goto out;
                }
                free(s->restore_state);
                s->restore_state = TAKE_PTR(state);
        }
        r = sandbox_start_claimed(s, ret_error);
        free(s->restore_state);
        s->restore_state = NULL;
out:
        sandbox_life_end(s);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, s->ctx, "rolled back to snapshot %s in %llu ms", snapshot_id,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;
}

int sandbox_snapshot_delete(struct sandbox *s, const char *snapshot_id) {
        _cleanup_free_ char *p = sandbox_snapshot_path(s, snapshot_id);
        _cleanup_free_ char *st = sandbox_snapshot_state_path(s, snapshot_id);
        if (!p || !st)
                return -ENOMEM;
        if (unlink(st) < 0 && errno != ENOENT)
                return negative_errno();
        sandbox_volumes_snapshot_delete(s, snapshot_id);
        return unlink(p) < 0 ? negative_errno() : 0;
}
