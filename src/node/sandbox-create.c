/* SPDX-License-Identifier: Apache-2.0 */
/* Create and delete (layer 3). */
#include "sandbox-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "guestconn.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "pool.h"
#include "template.h"
#include "util.h"

/* how long a delete waits for the guest to flush a read-write volume */
#define DELETE_SYNC_MS 5000

int sandbox_create(const struct sandbox_create_opts *o, const char *template_name, struct sandbox **ret,
                   char **ret_error) {
        const char *id = o->id;
        _cleanup_free_ char *rootfs = NULL;
        char *err = NULL;
        int r;

        struct sandbox *s;
        r = sandbox_new(id, template_name, o->env, o->network, &s);
        if (r < 0)
                return r;
        sandbox_first_execution(s, o);

        r = sandbox_reg_add(s, ret_error);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }

        uint64_t t0 = now_monotonic_ns();
        r = template_get(template_name, o->template_wait_ms ? (int) o->template_wait_ms : TEMPLATE_WAIT_MS, &s->tpl,
                         &err);
        if (r < 0) {
                char progress[128];
                template_progress_text(template_name, progress, sizeof progress);
                if (r == -ENOENT)
                        err = strdup_printf("no template %s", template_name);
                else if (r == -EAGAIN) {
                        err = strdup_printf("template %s is still being built%s%s%s: the build goes on, try again "
                                            "in a minute",
                                            template_name, progress[0] ? " (" : "", progress, progress[0] ? ")" : "");
                        r = -EINPROGRESS;
                }
                else if (r == -EIO) {
                        char *m = strdup_printf("template %s failed to build: %s", template_name, err ? err : "?");
                        free(err);
                        err = m;
                } else if (!err)
                        err = strdup_printf("template %s: %s", template_name, strerror(-r));
                goto fail;
        }
        if ((r = sandbox_limits_check(&s->limits, s->tpl, &err)) < 0)
                goto fail;
        if (s->tpl->env && json_object_size(s->tpl->env) > 0) {
                /* a template built from a spec: its environment under the create's */
                json_t *merged = json_deep_copy(s->tpl->env);
                if (!merged || json_object_update(merged, s->env) < 0) {
                        json_decref(merged);
                        r = -ENOMEM;
                        goto fail;
                }
                pthread_mutex_lock(&s->lock);
                json_decref(s->env);
                s->env = merged;
                pthread_mutex_unlock(&s->lock);
        }
        uint64_t t_tpl = now_monotonic_ns();
        if (t_tpl - t0 > 1000000000ULL)
                log_emit(LOG_LEVEL_INFO, s->ctx, "waited %llu ms for template %s",
                         (unsigned long long) ((t_tpl - t0) / 1000000ULL), template_name);

        s->dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        rootfs = strdup_printf("%s/%s/rootfs.img", sandbox_mgr()->dir, id);
        if (!s->dir || !rootfs) {
                r = -ENOMEM;
                goto fail;
        }
        rm_rf(s->dir); /* nothing of ours can be there: the id was free */
        /* a warm VM brings its directory (moved to s->dir) and its run dir;
         * one of its template's size, so a smaller sandbox restores cold */
        if (!s->limits.memory_mib && !s->limits.vcpus && !sandbox_has_volumes(s) &&
            pool_claim(s->tpl, s->dir, s->ctx, &s->pool_vm) > 0) {
                s->run_dir = TAKE_PTR(s->pool_vm->run_dir);
                goto start_thread;
        }
        if (mkdir(s->dir, 0700) < 0) {
                r = negative_errno();
                err = strdup_printf("cannot create %s: %s", s->dir, strerror(-r));
                goto fail;
        }
        r = node_vm_run_dir(sandbox_mgr()->cfg->data_dir, &s->run_dir);
        if (r < 0) {
                err = strdup_printf("cannot create a run directory under %s/run: %s", sandbox_mgr()->cfg->data_dir, strerror(-r));
                goto fail;
        }
        bool cloned = false;
        r = file_clone_or_copy(s->tpl->rootfs, rootfs, &cloned);
        bool warn = r >= 0 && !cloned && sandbox_warn_copy_once();
        if (r < 0) {
                err = strdup_printf("cannot copy the template disk: %s", strerror(-r));
                goto fail;
        }
        if (warn)
                log_emit(LOG_LEVEL_WARN, s->ctx,
                         "rootfs was byte-copied, not reflinked: %s and %s are not on one reflink-capable "
                         "file system (btrfs/xfs); creates will be slow and use disk (logged once)",
                         s->tpl->rootfs, sandbox_mgr()->dir);
        if ((r = sandbox_volumes_attach(s, NULL, &err)) < 0)
                goto fail;

start_thread:
        r = sandbox_thread_start(s, &err);
        if (r < 0)
                goto fail;
        sandbox_make_visible(s);
        *ret = sandbox_ref(s);
        return 0;

fail:
        log_emit(LOG_LEVEL_WARN, s->ctx, "create failed: %s", err ? err : strerror(-r));
        if (ret_error)
                *ret_error = err;
        else
                free(err);
        sandbox_create_abort(s);
        return r;
}

/* Deletes s, which the caller already took out of the registry (its
 * registry reference is now the caller's). */
static void sandbox_delete_removed(struct sandbox *s, bool keep_snapshots) {
        uint64_t t0 = now_monotonic_ns();
        /* its disk goes, but a read-write volume outlives it: what the guest
         * wrote there and has not written back yet must reach the volume's
         * image before QEMU dies (a guest that does not answer in time is
         * deleted anyway) */
        if (sandbox_volume_rw(s))
                (void) sandbox_guest_sync(s, DELETE_SYNC_MS, "delete");
        pthread_mutex_lock(&s->lock);
        s->deleted = true;
        /* the guest goes anyway: one that stopped reading its channel must
         * not keep the sandbox thread (an idle probe blocked on a send) and
         * so this delete waiting for up to a minute */
        guestconn_shutdown(s->gc);
        pthread_mutex_unlock(&s->lock);
        sandbox_deleted(s);
        sandbox_thread_stop(s);
        sandbox_volumes_release(s);
        rm_rf(s->run_dir);
        _cleanup_free_ char *gone = keep_snapshots ? NULL : strdup_printf("%s" DELETING_SUFFIX, s->dir);
        int r;
        if (keep_snapshots)
                r = sandbox_park(s);
        else if (gone && rename(s->dir, gone) >= 0) {
                node_hold_point("delete.renamed");
                r = rm_rf(gone);
        } else
                r = rm_rf(s->dir);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox deleted%s in %llu ms", keep_snapshots ? " (snapshots kept)" : "",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        sandbox_unref(s);
}

int sandbox_delete(const char *id, bool keep_snapshots) {
        sandbox_reg_lock();
        struct sandbox *s = sandbox_reg_find(id);
        int r = 0;
        if (!s)
                r = -ENOENT;
        else if (s->state == SANDBOX_CREATING)
                r = -EBUSY;
        else {
                /* a lifecycle verb owns the sandbox thread until it is done */
                pthread_mutex_lock(&s->lock);
                r = s->life_busy ? -EBUSY : 0;
                pthread_mutex_unlock(&s->lock);
                if (r == 0)
                        sandbox_reg_remove(s);
        }
        sandbox_reg_unlock();
        if (r == -ENOENT && !keep_snapshots && sandbox_parked_remove(id) >= 0)
                log_info("sandbox=%s removed the snapshots it kept while suspended", id);
        /* the gateway's journal of it goes (a suspended one's too: the node
         * does not know it); one archived with its snapshots keeps it */
        bool forget = !keep_snapshots && gwclient_enabled();
        if (r == -ENOENT && forget)
                (void) gwclient_forget(id, NULL);
        if (r < 0)
                return r;
        /* its credentials go at once, not with the last reference */
        pthread_mutex_lock(&s->lock);
        sandbox_secrets_free(TAKE_PTR(s->secrets));
        pthread_mutex_unlock(&s->lock);
        sandbox_delete_removed(s, keep_snapshots);
        if (forget)
                (void) gwclient_forget(id, NULL);
        node_hold_point("delete.removed"); /* a test's way to cut airlockd off after the VM went */
        return 0;
}
