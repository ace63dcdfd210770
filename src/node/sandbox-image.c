/* SPDX-License-Identifier: Apache-2.0 */
/* Images: publish, export of a kept snapshot, create from one (layer 3). */
#include "sandbox-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "objstore.h"
#include "util.h"

/* Where a publish keeps its snapshot until it is uploaded: under the
 * sandboxes directory, not the sandbox's (a delete meanwhile does not pull
 * it away); a node start removes what a killed one left (".tmp-" names are
 * no sandbox's). */
#define PUBLISH_DIR ".tmp-publish-"

int sandbox_publish(struct sandbox *s, const char *image_id, const struct objstore_data_key *key, json_t **ret_info,
                    const char **ret_state, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        _cleanup_free_ char *dir = strdup_printf("%s/" PUBLISH_DIR "%s", sandbox_mgr()->dir, image_id);
        _cleanup_free_ char *state = strdup_printf("%s/" PUBLISH_DIR "%s/state", sandbox_mgr()->dir, image_id);
        _cleanup_free_ char *disk = strdup_printf("%s/" PUBLISH_DIR "%s/rootfs.img", sandbox_mgr()->dir, image_id);
        if (!dir || !state || !disk)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *existing = NULL;
        if (objstore_snapshot_manifest(sandbox_objstore(), image_id, &existing) >= 0) {
                *ret_error = strdup_printf("the object store has %s already", image_id);
                return -EEXIST;
        }
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        (void) rm_rf(dir);
        if ((r = mkdir_p(dir, 0700)) < 0) {
                sandbox_life_end(s);
                *ret_error = strdup_printf("cannot create %s: %s", dir, strerror(-r));
                return r;
        }
        /* memory and disk of one instant; the sandbox runs on (a paused
         * one stays paused) while the image uploads */
        struct snapshot_job job = { .s = s, .state_path = state, .disk_dst = disk,
                                    .leave_paused = sandbox_state_is(s, SANDBOX_PAUSED) };
        r = sandbox_post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        pthread_mutex_lock(&s->lock);
        _cleanup_(json_decrefp) json_t *meta =
                json_pack("{s:s, s:s, s:s, s:s, s:O, s:I, s:s}", "kind", "image", "sandbox", s->id, "tenant",
                          s->tenant, "template", s->template_name, "env", s->env, "execution",
                          (json_int_t) s->execution, "recovery", sandbox_recovery_name(s));
        pthread_mutex_unlock(&s->lock);
        sandbox_life_end(s);
        if (r < 0) {
                *ret_error = strdup_printf("full snapshot failed: %s", strerror(-r));
                (void) rm_rf(dir);
                return r;
        }
        uint64_t t_snap = now_monotonic_ns();
        const struct objstore_artifact art[] = {{.name = "state", .path = state},
                                                {.name = "rootfs.img", .path = disk}};
        r = meta ? objstore_snapshot_upload(sandbox_objstore(), image_id, art, ARRAY_SIZE(art),
                                            &(struct objstore_upload_opts){.meta = meta, .key = key})
                 : -ENOMEM;
        (void) rm_rf(dir);
        if (r < 0) {
                *ret_error = strdup_printf("uploading image %s failed: %s", image_id, strerror(-r));
                return r;
        }
        uint64_t t_up = now_monotonic_ns();
        log_emit(LOG_LEVEL_INFO, s->ctx, "published image %s in %llu ms (snapshot %llu ms, paused %llu ms, upload %llu ms)",
                 image_id, (unsigned long long) ((t_up - t0) / 1000000ULL),
                 (unsigned long long) ((t_snap - t0) / 1000000ULL), (unsigned long long) job.stats.pause_ms,
                 (unsigned long long) ((t_up - t_snap) / 1000000ULL));
        json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "image", image_id, "memory_bytes",
                              (json_int_t) job.stats.bytes, "snapshot_ms", (json_int_t) ((t_snap - t0) / 1000000ULL),
                              "upload_ms", (json_int_t) ((t_up - t_snap) / 1000000ULL), "total_ms",
                              (json_int_t) ((t_up - t0) / 1000000ULL), "pause_ms", (json_int_t) job.stats.pause_ms);
        *ret_info = o;
        return o ? 0 : -ENOMEM;
}

int sandbox_create_from_image(const struct sandbox_create_opts *o, const char *image_id,
                              const struct objstore_data_key *key, struct sandbox **ret, char **ret_error) {
        const char *id = o->id;
        uint64_t t0 = now_monotonic_ns();
        if (!sandbox_objstore())
                return -EOPNOTSUPP;
        _cleanup_(json_decrefp) json_t *manifest = NULL, *meta = NULL;
        int r = sandbox_manifest_read(image_id, &manifest, ret_error);
        if (r < 0)
                return r == -ENXIO ? -ENOENT : r;
        r = objstore_manifest_meta(manifest, key ? key->key : NULL, &meta);
        if (r < 0) {
                *ret_error = strdup_printf(r == -ENOKEY ? "image %s is sealed and the create brought no data key"
                                                        : "image %s does not open with the data key given",
                                           image_id);
                return -EBADMSG;
        }
        const char *kind = json_string_value(json_object_get(meta, "kind"));
        const char *tpl = json_string_value(json_object_get(meta, "template"));
        json_t *image_env = json_object_get(meta, "env");
        const char *boot = json_string_value(json_object_get(meta, "boot"));
        if (!kind || strcmp(kind, "image") != 0 || !tpl || !name_is_valid(tpl) || !json_is_object(image_env) ||
            (boot && strcmp(boot, "cold") != 0)) {
                *ret_error = strdup_printf("%s is not an image", image_id);
                return -EBADMSG;
        }
        bool cold = boot != NULL; /* a disk only */
        /* the image's environment, and what this create adds over it */
        _cleanup_(json_decrefp) json_t *merged = json_deep_copy(image_env);
        if (!merged || (o->env && json_object_update(merged, o->env) < 0))
                return -ENOMEM;
        struct sandbox *s = NULL;
        r = sandbox_register_new(id, tpl, merged, o->network, &s, ret_error);
        if (r < 0)
                return r;
        sandbox_first_execution(s, o);
        if ((s->limits.memory_mib || s->limits.vcpus) &&
            ((r = sandbox_template(s, ret_error)) < 0 || (r = sandbox_limits_check(&s->limits, s->tpl, ret_error)) < 0)) {
                sandbox_new_abort(s);
                return r;
        }
        /* a new identity, as a fork child gets (sandbox_restore_new()); an
         * image of a disk boots it */
        uint64_t t_down;
        r = sandbox_download_restore(s, image_id, key ? key->key : NULL, false, cold, &t_down, ret_error);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox made from %simage %s in %llu ms (download %llu ms, %s %llu ms)",
                 cold ? "disk " : "", image_id, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 (unsigned long long) ((t_down - t0) / 1000000ULL), cold ? "boot" : "restore",
                 (unsigned long long) (cold ? (now_monotonic_ns() - t_down) / 1000000ULL : s->restore_ms));
        *ret = sandbox_ref(s);
        return 0;
}

int sandbox_export(struct sandbox *s, const char *snapshot_id, const char *image_id,
                   const struct objstore_data_key *key, json_t **ret_info, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        struct objstore *o = sandbox_objstore();
        if (!o)
                return -EOPNOTSUPP;
        _cleanup_free_ char *img = sandbox_snapshot_path(s, snapshot_id), *snap_state = sandbox_snapshot_state_path(s, snapshot_id);
        _cleanup_free_ char *dir = strdup_printf("%s/" PUBLISH_DIR "%s", sandbox_mgr()->dir, image_id);
        _cleanup_free_ char *state = strdup_printf("%s/state", dir ?: "");
        _cleanup_free_ char *disk = strdup_printf("%s/rootfs.img", dir ?: "");
        if (!img || !snap_state || !dir || !state || !disk)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *existing = NULL;
        if (objstore_snapshot_manifest(o, image_id, &existing) >= 0) {
                *ret_error = strdup_printf("the object store has %s already", image_id);
                return -EEXIST;
        }
        (void) rm_rf(dir);
        int r = mkdir_p(dir, 0700);
        if (r < 0) {
                *ret_error = strdup_printf("cannot create %s: %s", dir, strerror(-r));
                return r;
        }
        /* clones first: a snapshot's files never change, and retention
         * deleting it meanwhile takes nothing from the clones */
        bool full = access(snap_state, F_OK) == 0;
        r = sandbox_clone_replace(s, img, disk);
        if (r >= 0 && full)
                r = sandbox_clone_replace(s, snap_state, state);
        if (r < 0) {
                (void) rm_rf(dir);
                if (r == -ENOENT) {
                        *ret_error = strdup_printf("no snapshot %s of sandbox %s", snapshot_id, s->id);
                        return -ENXIO;
                }
                *ret_error = strdup_printf("cannot copy snapshot %s: %s", snapshot_id, strerror(-r));
                return r;
        }
        struct stat st;
        uint64_t memory_bytes = full && stat(state, &st) == 0 ? (uint64_t) st.st_size : 0;
        pthread_mutex_lock(&s->lock);
        _cleanup_(json_decrefp) json_t *meta =
                json_pack("{s:s, s:s, s:s, s:s, s:s, s:O, s:I, s:s}", "kind", "image", "snapshot", snapshot_id,
                          "sandbox", s->id, "tenant", s->tenant, "template", s->template_name, "env", s->env,
                          "execution", (json_int_t) s->execution, "recovery", sandbox_recovery_name(s));
        pthread_mutex_unlock(&s->lock);
        if (meta && !full)
                json_object_set_new(meta, "boot", json_string("cold"));
        const struct objstore_artifact art[] = {{.name = "rootfs.img", .path = disk},
                                                {.name = "state", .path = state}};
        r = meta ? objstore_snapshot_upload(o, image_id, art, full ? 2 : 1,
                                            &(struct objstore_upload_opts){.meta = meta, .key = key})
                 : -ENOMEM;
        (void) rm_rf(dir);
        if (r < 0) {
                *ret_error = strdup_printf("uploading image %s failed: %s", image_id, strerror(-r));
                return r;
        }
        uint64_t ms = (now_monotonic_ns() - t0) / 1000000ULL;
        log_emit(LOG_LEVEL_INFO, s->ctx, "exported %s snapshot %s as image %s in %llu ms", full ? "full" : "disk",
                 snapshot_id, image_id, (unsigned long long) ms);
        json_t *info = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "image", image_id, "snapshot", snapshot_id, "kind",
                                 full ? "full" : "disk", "memory_bytes", (json_int_t) memory_bytes, "upload_ms",
                                 (json_int_t) ms, "total_ms", (json_int_t) ms);
        *ret_info = info;
        return info ? 0 : -ENOMEM;
}
