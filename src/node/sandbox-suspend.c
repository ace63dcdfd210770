/* SPDX-License-Identifier: Apache-2.0 */
/* Suspend to the object store, wake from it, unarchive (layer 3). */
#include "sandbox-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "objstore.h"
#include "proto.h"
#include "util.h"

/* How long a suspend waits for the guest to write its page cache back. */
#define SUSPEND_SYNC_MS 10000


int sandbox_suspend(struct sandbox *s, const char *snapshot_id, const struct objstore_data_key *key,
                    json_t **ret_info, const char **ret_state, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        bool was_paused = sandbox_state_is(s, SANDBOX_PAUSED);
        _cleanup_free_ char *dir = strdup_printf("%s/suspend", s->dir);
        _cleanup_free_ char *state = strdup_printf("%s/suspend/state", s->dir);
        _cleanup_free_ char *disk = strdup_printf("%s/suspend/rootfs.img", s->dir);
        struct snapshot_job job = { .s = s, .state_path = state, .disk_dst = disk, .leave_paused = true };
        uint64_t t_snap = 0;
        if (!dir || !state || !disk) {
                r = -ENOMEM;
                goto fail;
        }
        (void) rm_rf(dir);
        if ((r = mkdir_p(dir, 0700)) < 0 || (r = sandbox_suspend_intent_write(s, snapshot_id, was_paused, key ? key->wrapped : NULL)) < 0) {
                *ret_error = strdup_printf("cannot create %s: %s", dir, strerror(-r));
                goto fail;
        }
        /* The VM stops for good below: what the guest has not written back
         * yet must be on the disk first, so that even a node killed before
         * the suspend is through (and a recovery that boots the disk)
         * keeps every write the guest acknowledged. */
        if (!was_paused)
                (void) sandbox_guest_sync(s, SUSPEND_SYNC_MS, "suspend");
        /* stays stopped after the snapshot: nothing may change after it */
        r = sandbox_post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        if (r < 0) {
                *ret_error = strdup_printf("full snapshot failed: %s", strerror(-r));
                goto fail;
        }
        /* from here on the snapshot is this sandbox's latest state: a node
         * that starts after a crash resumes it (sandbox-manager.c's suspend_takeover()) */
        r = sandbox_suspend_mark(s, SUSPEND_COMPLETE);
        if (r >= 0)
                r = sandbox_suspend_mark(s, SUSPEND_RELEASED);
        if (r < 0) {
                *ret_error = strdup_printf("cannot record the finished snapshot: %s", strerror(-r));
                goto fail;
        }
        node_hold_point("suspend.snapshot");
        t_snap = now_monotonic_ns();

        /* every node resource goes: VM, run dir, disk, record; the snapshot
         * and the sandbox's snapshots stay, parked (sandbox_park()) */
        sandbox_reg_lock();
        sandbox_reg_remove(s);
        sandbox_reg_unlock();
        pthread_mutex_lock(&s->lock);
        s->deleted = true;
        pthread_mutex_unlock(&s->lock);
        sandbox_deleted(s);
        sandbox_thread_stop(s);
        node_hold_point("suspend.vm-stopped");
        /* the volumes as the snapshot has them (the VM stopped at it): the
         * read-write ones back into the store, where the wake takes them
         * from again (the sandbox still holds them, so nothing else
         * writes them meanwhile); they are not in its image */
        sandbox_volumes_release(s);
        rm_rf(s->run_dir);
        r = sandbox_park(s);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to clean %s: %m", s->dir);
        sandbox_life_end(s);
        /* restorable elsewhere once this lands; here it is already */
        sandbox_upload_start(s->id, snapshot_id, key);
        uint64_t t1 = now_monotonic_ns();
        json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "snapshot", snapshot_id, "memory_bytes",
                              (json_int_t) job.stats.bytes, "snapshot_ms", (json_int_t) ((t_snap - t0) / 1000000ULL),
                              "total_ms", (json_int_t) ((t1 - t0) / 1000000ULL), "pause_ms",
                              (json_int_t) job.stats.pause_ms, "uploaded", false);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox suspended to snapshot %s in %llu ms (snapshot %llu ms); its "
                 "upload runs on", snapshot_id, (unsigned long long) ((t1 - t0) / 1000000ULL),
                 (unsigned long long) ((t_snap - t0) / 1000000ULL));
        *ret_info = o;
        return o ? 0 : -ENOMEM;

fail:
        /* it goes on as it was */
        if (!was_paused && sandbox_state_is(s, SANDBOX_PAUSED)) {
                int k = sandbox_post_command(s, SANDBOX_CMD_RESUME, NULL, LIFECYCLE_CMD_WAIT_MS);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot resume after the failed suspend: %m");
        }
        if (dir)
                (void) rm_rf(dir);
        sandbox_life_end(s);
        log_emit(LOG_LEVEL_WARN, s->ctx, "suspend failed: %s", *ret_error ? *ret_error : strerror(-r));
        return r;
}

/* Reads the manifest of object store snapshot snapshot_id: -ENXIO when it
 * is not (completely) there. */
int sandbox_manifest_read(const char *snapshot_id, json_t **ret, char **ret_error) {
        int r = objstore_snapshot_manifest(sandbox_objstore(), snapshot_id, ret);
        if (r >= 0)
                return 0;
        *ret_error = r == -ENOENT ? strdup_printf("snapshot %s is not in the object store (or never finished "
                                                  "uploading)",
                                                  snapshot_id)
                                  : strdup_printf("cannot read snapshot %s: %s", snapshot_id, strerror(-r));
        return r == -ENOENT ? -ENXIO : r;
}

/* Downloads object store snapshot snapshot_id into s (registered by
 * sandbox_register_new()) and restores it, or with cold (an image of a disk only)
 * boots its disk. mark: write which image this is for wake_takeover() (sandbox-manager.c).
 * *ret_t_down: when the download was done. On failure s is gone
 * (sandbox_new_abort()). */
int sandbox_download_restore(struct sandbox *s, const char *snapshot_id, const uint8_t *data_key, bool mark, bool cold,
                     uint64_t *ret_t_down, char **ret_error) {
        _cleanup_free_ char *dir = strdup_printf("%s/wake", s->dir);
        _cleanup_free_ char *disk = strdup_printf("%s/wake/rootfs.img", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *wake_marker = strdup_printf("%s/" WAKE_SNAPSHOT, s->dir);
        char *state = strdup_printf("%s/wake/state", s->dir);
        if (!dir || !disk || !rootfs || !state || !wake_marker) {
                free(state);
                sandbox_new_abort(s);
                return -ENOMEM;
        }
        /* an image of deltas: its own artifacts, then its state and disk
         * rebuilt against its template (sandbox-delta.c) */
        _cleanup_(json_decrefp) json_t *manifest = NULL, *meta = NULL;
        char *delta_error = NULL;
        int r = objstore_snapshot_manifest(sandbox_objstore(), snapshot_id, &manifest);
        if (r >= 0 && objstore_manifest_meta(manifest, data_key, &meta) >= 0 && sandbox_delta_of(meta)) {
                static const char *const own[] = {"state.delta", "rootfs.delta", "volume0", "volume1",
                                                  "volume2",     "volume3",      NULL};
                _Static_assert(SANDBOX_VOLUMES_MAX == 4, "own names every volume artifact");
                r = objstore_snapshot_download(
                        sandbox_objstore(), snapshot_id, dir,
                        &(struct objstore_download_opts){.data_key = data_key, .only = own});
                if (r >= 0)
                        r = sandbox_delta_reassemble(sandbox_objstore(), snapshot_id, data_key, meta, dir,
                                                     &delta_error);
        } else if (r >= 0)
                r = objstore_snapshot_download(sandbox_objstore(), snapshot_id, dir,
                                               &(struct objstore_download_opts){ .data_key = data_key });
        if (r >= 0 && rename(disk, rootfs) < 0)
                r = negative_errno();
        /* the volumes its memory has mounted, as the image carries them */
        char *volumes_error = NULL;
        if (r >= 0 && (r = sandbox_volumes_attach(s, dir, &volumes_error)) < 0 && !delta_error)
                delta_error = volumes_error;
        else
                free(volumes_error);
        /* which image this is: a node that takes the sandbox over after the
         * wake made it visible removes it as stale (sandbox-manager.c's wake_takeover()) */
        if (r >= 0 && mark)
                r = file_write_atomic(wake_marker, snapshot_id, strlen(snapshot_id), 0600);
        if (r < 0) {
                *ret_error = delta_error ? delta_error
                             : r == -EBADMSG
                                     ? strdup_printf("snapshot %s does not open: corrupt, tampered with, or sealed "
                                                     "with another key", snapshot_id)
                                     : strdup_printf("downloading snapshot %s failed: %s", snapshot_id, strerror(-r));
                delta_error = NULL;
                free(state);
                sandbox_new_abort(s);
                return r;
        }
        *ret_t_down = now_monotonic_ns();
        if (cold) {
                free(state);
                (void) rm_rf(dir);
                return sandbox_boot_new(s, ret_error);
        }
        r = sandbox_restore_new(s, state, ret_error);
        if (r >= 0 && !mark)
                (void) rm_rf(dir);
        return r;
}

struct leftovers {
        char *path;        /* renamed out of the way, or NULL */
        json_t *manifest;  /* a withdrawn image's, or NULL */
};

static void *leftovers_thread(void *userdata) {
        struct leftovers *l = userdata;
        if (l->manifest)
                objstore_snapshot_release(sandbox_objstore(), l->manifest);
        int r = l->path ? rm_rf(l->path) : 0;
        if (r < 0)
                log_warn_errno(r, "Failed to remove %s: %m", l->path);
        json_decref(l->manifest);
        free(l->path);
        free(l);
        return NULL;
}

/* Removes what a wake leaves off the answer's path (unlinking a 1 GiB disk
 * image takes tens of ms): path, renamed at once under a name no sandbox
 * has (a node start removes such leftovers), and the blobs of a withdrawn
 * image (objstore_gc() removes those a stopped node missed). Takes
 * manifest. */
static void sandbox_remove_later(const char *path, json_t *manifest) {
        struct leftovers *l = calloc(1, sizeof *l);
        char name[32];
        if (l && path && random_id(".trash-", 8, name, sizeof name) >= 0 &&
            (l->path = strdup_printf("%s/%s", sandbox_mgr()->dir, name)) && rename(path, l->path) < 0) {
                free(l->path);
                l->path = NULL;
        }
        if (!l || (path && !l->path))
                (void) rm_rf(path);
        if (!l) {
                objstore_snapshot_release(sandbox_objstore(), manifest);
                json_decref(manifest);
                return;
        }
        l->manifest = manifest;
        pthread_t t;
        pthread_attr_t attr;
        bool started = pthread_attr_init(&attr) == 0;
        if (started) {
                (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                started = pthread_create(&t, &attr, leftovers_thread, l) == 0;
                pthread_attr_destroy(&attr);
        }
        if (!started)
                (void) leftovers_thread(l);
}

/* Restores s (registered by sandbox_register_new()) from its suspended copy on
 * this node, which stays whole until the wake is through: its disk is
 * cloned out of suspend/ (the VM writes it), its state hard-linked (only
 * read; the same inode, so what the suspend wrote is still in the page
 * cache, where a clone would be read from the disk again). *ret_t_down:
 * when the copy was ready. On failure s is gone (sandbox_new_abort()). */
static int sandbox_local_restore(struct sandbox *s, uint64_t *ret_t_down, char **ret_error) {
        _cleanup_free_ char *disk = strdup_printf("%s/suspend/rootfs.img", s->dir);
        _cleanup_free_ char *state = strdup_printf("%s/suspend/state", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        char *restore = strdup_printf("%s/wake.state", s->dir);
        int r = disk && state && rootfs && restore ? sandbox_clone_replace(s, disk, rootfs) : -ENOMEM;
        if (r >= 0) {
                (void) unlink(restore);
                if (link(state, restore) < 0) /* sandbox_restore_new() removes what it loaded: this link */
                        r = negative_errno();
        }
        if (r < 0) {
                *ret_error = strdup_printf("cannot copy the suspended snapshot: %s", strerror(-r));
                free(restore);
                sandbox_new_abort(s);
                return r;
        }
        *ret_t_down = now_monotonic_ns();
        return sandbox_restore_new(s, restore, ret_error); /* takes restore */
}

int sandbox_wake(const char *id, const char *snapshot_id, const char *network, const struct objstore_data_key *key,
                 struct sandbox **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        /* A wake whose reply a crash lost (of this node or airlockd) is
         * asked again: the sandbox runs here already, so it is awake. */
        struct sandbox *awake = NULL;
        if (sandbox_get(id, &awake) >= 0) {
                log_emit(LOG_LEVEL_INFO, awake->ctx, "wake: the sandbox runs here already");
                *ret = awake;
                return 0;
        }
        /* from this node's copy when it has one (its upload stops: the
         * copy is the sandbox again), else from the object store */
        bool local = sandbox_suspended_local(id, snapshot_id);
        _cleanup_(json_decrefp) json_t *manifest = NULL, *local_meta = NULL, *sealed_meta = NULL;
        _cleanup_free_ char *dir = strdup_printf("%s/%s/wake", sandbox_mgr()->dir, id);
        _cleanup_free_ char *copy = strdup_printf("%s/%s/suspend", sandbox_mgr()->dir, id);
        _cleanup_free_ char *sandbox_dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        _cleanup_free_ char *marker = sandbox_dir ? sandbox_marker_path(sandbox_dir) : NULL;
        _cleanup_free_ char *volumes_error = NULL; /* before the first goto: freed at every exit */
        struct sandbox *s = NULL;
        json_t *meta = NULL;
        int r;
        if (!dir || !copy || !marker)
                return -ENOMEM;
        if (local) {
                sandbox_upload_cancel(id);
                (void) sandbox_waiting_take(id);
                meta = local_meta = sandbox_suspended_meta(id);
        } else {
                r = sandbox_manifest_read(snapshot_id, &manifest, ret_error);
                if (r < 0)
                        return r;
                r = objstore_manifest_meta(manifest, key ? key->key : NULL, &sealed_meta);
                if (r == -ENOKEY) {
                        *ret_error = strdup_printf("snapshot %s is sealed and the wake brought no data key",
                                                   snapshot_id);
                        return -ENOKEY;
                }
                if (r < 0) {
                        *ret_error = strdup_printf("snapshot %s does not open with the data key given", snapshot_id);
                        return -EBADMSG;
                }
                meta = sealed_meta;
        }
        const char *sid = json_string_value(json_object_get(meta, "sandbox"));
        const char *tpl = json_string_value(json_object_get(meta, "template"));
        json_t *env = json_object_get(meta, "env");
        json_int_t exe = json_integer_value(json_object_get(meta, "execution"));
        if (!sid || strcmp(sid, id) != 0 || !tpl || !name_is_valid(tpl) || !json_is_object(env) || exe < 0 ||
            exe >= UINT32_MAX || json_object_get(meta, "kind")) {
                *ret_error = strdup_printf("snapshot %s is not a suspended state of sandbox %s", snapshot_id, id);
                r = -EBADMSG;
                goto fail;
        }
        /* its memory and CPU state resume only on the CPU they ran on: say
         * so before anything is downloaded (an image from before the
         * field: as before) */
        const char *cpu = json_string_value(json_object_get(meta, "cpu"));
        if (cpu && strcmp(cpu, vmm_cpu_id()) != 0) {
                *ret_error = strdup_printf("sandbox %s was suspended from a VM with CPU %s and this node's VMs have "
                                           "%s: it wakes only on a node with that CPU (the same AIRLOCK_ACCEL and "
                                           "AIRLOCK_CPU_MODEL)",
                                           id, cpu, vmm_cpu_id());
                r = -EXDEV;
                goto fail;
        }
        r = sandbox_register_new(id, tpl, env, network, &s, ret_error);
        if (r < 0)
                goto fail;
        s->execution = (unsigned) exe + 1;
        if (sandbox_tenant_from_json(s, meta) < 0 ||
            sandbox_recovery_from_json(meta, &s->recover_checkpoint) < 0 ||
            sandbox_limits_from_json(meta, &s->limits) < 0 ||
            sandbox_volumes_from_json(meta, s->volumes, &volumes_error) < 0) {
                *ret_error =
                        strdup_printf("snapshot %s names an invalid owner, recovery, limits or volumes%s%s",
                                      snapshot_id, volumes_error ? ": " : "", volumes_error ?: "");
                sandbox_new_abort(s);
                r = -EBADMSG;
                goto fail;
        }
        /* its memory has them mounted: the same volumes in the same slots,
         * from this node's store, where the suspend put them (a wake from
         * the object store takes the image's) */
        if (local && (r = sandbox_volumes_attach(s, NULL, ret_error)) < 0) {
                sandbox_new_abort(s);
                goto fail;
        }
        uint64_t t_down;
        r = local ? sandbox_local_restore(s, &t_down, ret_error)
                  : sandbox_download_restore(s, snapshot_id, key ? key->key : NULL, true, false, &t_down, ret_error);
        if (r < 0)
                goto fail;
        uint64_t t_restored = now_monotonic_ns();
        node_hold_point("wake.visible");
        (void) unlink(marker); /* its snapshots belong to a running sandbox again */
        /* it runs here now: its image is stale, and removed here rather than
         * by airlockd after the reply, which a crash of either could lose
         * (before wake/ and suspend/ go: a node killed in between finds
         * them, see wake_takeover() and suspend_takeover() in sandbox-manager.c) */
        json_t *stale = NULL;
        int k = objstore_snapshot_withdraw(sandbox_objstore(), snapshot_id, &stale);
        if (k < 0 && k != -ENOENT)
                log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot remove the stale snapshot %s: %m", snapshot_id);
        node_hold_point("wake.restored");
        (void) rm_rf(dir);
        sandbox_remove_later(copy, stale); /* its blobs and the copy: only space now */
        uint64_t t1 = now_monotonic_ns();
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox woken from snapshot %s in %llu ms (%s %llu ms, restore %llu ms, "
                 "removing the image and the copy %llu ms)", snapshot_id, (unsigned long long) ((t1 - t0) / 1000000ULL),
                 local ? "copied on this node" : "download", (unsigned long long) ((t_down - t0) / 1000000ULL),
                 (unsigned long long) s->restore_ms, (unsigned long long) ((t1 - t_restored) / 1000000ULL));
        *ret = sandbox_ref(s);
        return 0;

fail:
        /* still suspended here: the upload the wake stopped goes on */
        if (local && sandbox_suspended_local(id, snapshot_id) && !sandbox_suspend_has(sandbox_dir, SUSPEND_UPLOADED))
                sandbox_upload_start(id, snapshot_id, key);
        return r;
}

int sandbox_unarchive(const char *id, const char *snapshot_id, const char *network, struct sandbox **ret,
                      char **ret_error) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        _cleanup_free_ char *marker = dir ? sandbox_marker_path(dir) : NULL, *text = NULL;
        size_t len;
        if (!marker)
                return -ENOMEM;
        int r = file_read_all(marker, 256 * 1024, &text, &len);
        if (r < 0)
                return r == -ENOENT ? -ENOENT : r;
        _cleanup_(json_decrefp) json_t *meta = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
        const char *tpl = json_string_value(json_object_get(meta, "template"));
        json_t *env = json_object_get(meta, "env");
        json_int_t exe = json_integer_value(json_object_get(meta, "execution"));
        if (!tpl || !name_is_valid(tpl) || !json_is_object(env) || exe < 0 || exe >= UINT32_MAX) {
                *ret_error = strdup_printf("the kept snapshots of %s have no valid record", id);
                return -EBADMSG;
        }
        struct sandbox *s = NULL;
        r = sandbox_register_new(id, tpl, env, network, &s, ret_error);
        if (r < 0)
                return r;
        s->execution = (unsigned) exe + 1;
        if (sandbox_tenant_from_json(s, meta) < 0 || sandbox_recovery_from_json(meta, &s->recover_checkpoint) < 0 ||
            sandbox_limits_from_json(meta, &s->limits) < 0) {
                *ret_error = strdup_printf("the kept snapshots of %s name an invalid owner, recovery or limits", id);
                sandbox_new_abort(s);
                return -EBADMSG;
        }
        _cleanup_free_ char *img = sandbox_snapshot_path(s, snapshot_id), *state = sandbox_snapshot_state_path(s, snapshot_id);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        char *restore = strdup_printf("%s/restore.state", s->dir);
        if (!img || !state || !rootfs || !restore) {
                free(restore);
                sandbox_new_abort(s);
                return -ENOMEM;
        }
        if (access(img, F_OK) < 0) {
                *ret_error = strdup_printf("no snapshot %s of sandbox %s", snapshot_id, id);
                free(restore);
                sandbox_new_abort(s);
                return -ENXIO;
        }
        bool full = access(state, F_OK) == 0;
        r = sandbox_clone_replace(s, img, rootfs);
        if (r >= 0 && full)
                r = sandbox_clone_replace(s, state, restore); /* sandbox_restore_new() removes what it loaded */
        if (r < 0) {
                *ret_error = strdup_printf("cannot copy snapshot %s: %s", snapshot_id, strerror(-r));
                free(restore);
                sandbox_new_abort(s);
                return r;
        }
        if (full)
                r = sandbox_restore_new(s, restore, ret_error); /* takes restore */
        else {
                free(restore);
                r = sandbox_boot_new(s, ret_error); /* a disk snapshot boots, as a start does */
        }
        if (r < 0)
                return r;
        (void) unlink(marker); /* its snapshots belong to a sandbox again */
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox made again from its kept %s snapshot %s", full ? "full" : "disk",
                 snapshot_id);
        *ret = sandbox_ref(s);
        return 0;
}

int sandbox_suspended_upload(const char *id, const char *snapshot_id, const struct objstore_data_key *key) {
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        if (!sandbox_suspended_local(id, snapshot_id))
                return -ENOENT;
        if (!sandbox_waiting_take(id))
                return -EALREADY; /* uploading, or uploaded */
        log_info("sandbox=%s its suspended image's data key came: uploading it", id);
        sandbox_upload_start(id, snapshot_id, key);
        return 0;
}

bool sandbox_suspended_waits_for_key(const char *id) {
        return id && sandbox_waiting_has(id);
}

int sandbox_suspended_get(const char *id, const char *snapshot_id, bool *ret_local, bool *ret_uploaded,
                          char **ret_wrapped_key) {
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        /* the local copy knows whether its upload landed (the marker comes
         * after the manifest) and its key: no round trip to the object
         * store, which may be far, or down */
        if (id && sandbox_suspended_local(id, snapshot_id)) {
                _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
                _cleanup_(json_decrefp) json_t *intent = dir ? sandbox_suspend_intent_read(dir) : NULL;
                if (!dir)
                        return -ENOMEM;
                const char *w = json_string_value(json_object_get(intent, "wrapped_key"));
                *ret_wrapped_key = w ? strdup(w) : NULL;
                if (w && !*ret_wrapped_key)
                        return -ENOMEM;
                *ret_local = true;
                *ret_uploaded = sandbox_suspend_has(dir, SUSPEND_UPLOADED);
                return 0;
        }
        _cleanup_(json_decrefp) json_t *m = NULL;
        int r = objstore_snapshot_manifest(sandbox_objstore(), snapshot_id, &m);
        if (r < 0 && r != -ENOENT)
                return r;
        if (r == -ENOENT)
                return -ENOENT;
        const char *w = objstore_manifest_wrapped_key(m);
        *ret_wrapped_key = w ? strdup(w) : NULL;
        if (w && !*ret_wrapped_key)
                return -ENOMEM;
        *ret_uploaded = true;
        *ret_local = false;
        return 0;
}

int sandbox_suspended_delete(const char *id, const char *snapshot_id) {
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        bool local = false;
        if (id && name_is_valid(id)) {
                sandbox_upload_cancel(id); /* nothing of it may land after its delete */
                (void) sandbox_waiting_take(id);
                _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
                _cleanup_free_ char *copy = strdup_printf("%s/%s/suspend", sandbox_mgr()->dir, id);
                if (!dir || !copy)
                        return -ENOMEM;
                if (sandbox_suspended_local(id, snapshot_id)) {
                        size_t n = 0; /* only the copy kept it: all of it goes */
                        int r = sandbox_snapshot_count(dir, &n) < 0 || n == 0 ? rm_rf(dir) : rm_rf(copy);
                        if (r < 0)
                                return r;
                        local = true;
                }
        }
        int r = objstore_snapshot_delete(sandbox_objstore(), snapshot_id);
        return r == -ENOENT && local ? 0 : r;
}
