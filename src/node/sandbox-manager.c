/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox manager's start and stop: the takeover of what a node before
 * this one left, shutdown and hand-over (layer 4, the top).
 */
#include "sandbox-internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "objstore.h"
#include "proto.h"
#include "util.h"

/* How long a clean shutdown waits for the guest to flush its disks. */
#define SHUTDOWN_SYNC_MS 5000

/* How long shutdown and hand-over wait for a verb in progress. */
#define SHUTDOWN_BUSY_WAIT_NS (30 * 1000000000ULL)

/* How long a node's stop may spend saving its sandboxes' VMs, all of them
 * together (a service manager waits 90 s): those after it are stopped as
 * they are, and the next node boots their disks. */
#define SHUTDOWN_SAVE_BUDGET_NS (45 * 1000000000ULL)

/* At most this many sandboxes are flushed, saved and stopped at once at a
 * node's stop (one a CPU below it): a save is QEMU writing the VM's
 * memory out, a core and the disk's bandwidth. */
#define SHUTDOWN_SAVERS_MAX 8

static int suspend_takeover(struct sandbox *s, bool vm_adopted) {
        _cleanup_free_ char *dir = strdup_printf("%s/suspend", s->dir);
        if (!dir)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *o = sandbox_suspend_intent_read(s->dir);
        if (!o) {
                (void) rm_rf(dir); /* nothing of a suspend that had begun */
                return 0;
        }
        const char *snap = json_string_value(json_object_get(o, "snapshot"));
        bool was_paused = json_is_true(json_object_get(o, "was_paused"));
        bool whole = sandbox_suspend_has(s->dir, SUSPEND_COMPLETE);
        int ret = 0;
        if (vm_adopted) {
                /* its VM still runs (paused since the snapshot, or woken from
                 * it): it goes on as it was before the suspend */
                s->resume_after_adopt = !was_paused;
                log_emit(LOG_LEVEL_WARN, s->ctx, "an earlier node was stopped while suspending or waking this "
                         "sandbox; its VM goes on%s", was_paused ? " (paused, as it was)" : "");
        } else if (whole) {
                /* the VM is gone, the snapshot is whole and nothing ran after
                 * it: it is the sandbox's latest state, processes included */
                _cleanup_free_ char *disk = strdup_printf("%s/rootfs.img", dir);
                _cleanup_free_ char *state = strdup_printf("%s/state", dir);
                _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
                char *resume = strdup_printf("%s/resume.state", s->dir);
                if (!disk || !state || !rootfs || !resume || rename(disk, rootfs) < 0 || rename(state, resume) < 0) {
                        int r = resume ? negative_errno() : -ENOMEM;
                        free(resume);
                        log_errno(LOG_LEVEL_WARN, r, s->ctx, "cannot take the snapshot of the interrupted suspend "
                                  "over (its disk is booted instead): %m");
                } else {
                        free(s->resume_state);
                        s->resume_state = resume;
                        ret = 1;
                        log_emit(LOG_LEVEL_WARN, s->ctx, "an earlier node was stopped while suspending or waking "
                                 "this sandbox, after its snapshot: resuming that snapshot");
                }
        }
        /* it runs here again: an image that did land is stale */
        if (whole && sandbox_objstore()) {
                int k = objstore_snapshot_delete(sandbox_objstore(), snap);
                if (k < 0 && k != -ENOENT)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot remove the stale snapshot %s: %m", snap);
        }
        (void) rm_rf(dir);
        return ret;
}

/* The VM an earlier node saved at its stop (shutdown_save()): resumed by
 * the recovery, paused again if it was; when that VM still runs (the node
 * died between the save and the kill), it goes on as it was. */
static int stop_takeover(struct sandbox *s, bool vm_adopted) {
        _cleanup_free_ char *state = strdup_printf("%s/" STOP_STATE, s->dir);
        _cleanup_free_ char *paused = strdup_printf("%s/" STOP_PAUSED, s->dir);
        if (!state || !paused)
                return -ENOMEM;
        bool was_paused = access(paused, F_OK) == 0;
        (void) unlink(paused);
        if (access(state, F_OK) < 0)
                return 0;
        if (vm_adopted) {
                s->resume_after_adopt = !was_paused;
                (void) unlink(state);
                return 0;
        }
        char *resume = strdup_printf("%s/resume.state", s->dir);
        if (!resume || rename(state, resume) < 0) {
                int r = resume ? negative_errno() : -ENOMEM;
                free(resume);
                (void) unlink(state);
                return log_errno(LOG_LEVEL_WARN, r, s->ctx,
                                 "cannot take over the VM saved at the node's stop "
                                 "(its disk is booted instead): %m");
        }
        free(s->resume_state);
        s->resume_state = resume;
        s->resume_saved = true;
        s->resume_paused = was_paused;
        return 1;
}

static void suspended_takeover(const char *id, const char *dir) {
        if (!sandbox_suspend_is_released(dir) || sandbox_suspend_has(dir, SUSPEND_UPLOADED) || !sandbox_objstore())
                return;
        _cleanup_(json_decrefp) json_t *intent = sandbox_suspend_intent_read(dir);
        if (!intent) {
                log_warn("sandbox=%s its suspended copy names no image: not uploaded (it wakes here only)", id);
                return;
        }
        if (json_object_get(intent, "wrapped_key")) {
                /* its data key was in memory only: the control plane opens
                 * the wrapped one again and gives it (suspended.upload) */
                log_info("sandbox=%s its suspended image waits for its data key to be uploaded", id);
                sandbox_waiting_add(id);
                return;
        }
        log_info("sandbox=%s resuming the upload of its suspended image", id);
        sandbox_upload_start(id, json_string_value(json_object_get(intent, "snapshot")), NULL);
}

static void wake_takeover(const char *dir) {
        _cleanup_free_ char *marker = strdup_printf("%s/" WAKE_SNAPSHOT, dir), *snap = NULL;
        size_t len;
        if (marker && file_read_all(marker, 128, &snap, &len) >= 0 && len == strlen(snap) && name_is_valid(snap) &&
            sandbox_objstore()) {
                int k = objstore_snapshot_delete(sandbox_objstore(), snap);
                if (k < 0 && k != -ENOENT)
                        log_warn_errno(k, "cannot remove the stale snapshot %s of a woken sandbox: %m", snap);
                else if (k >= 0)
                        log_info("removed the stale snapshot %s (its wake finished, its node did not)", snap);
        }
        _cleanup_free_ char *wake_dir = strdup_printf("%s/wake", dir);
        if (wake_dir)
                (void) rm_rf(wake_dir);
}

/* ---- public ---- */

/* Builds the sandbox an earlier node recorded in SANDBOXES/name and
 * registers it. Its VM, if it still runs, is only reconnected over QMP here
 * (s->adopt_vmm); the thread takes it over later. */
static int takeover_one(const char *name, const char *dir) {
        _cleanup_(sandbox_record_release) struct sandbox_record rec = { 0 };
        int r = sandbox_record_load(dir, name, &rec);
        if (r < 0)
                return r;
        /* what a wake cut off left: never a sandbox's state (a suspend's
         * is looked at below, once we know whether its VM still runs) */
        wake_takeover(dir);
        struct sandbox *s;
        r = sandbox_new(name, rec.template_name, rec.env, rec.network, &s);
        if (r < 0)
                return r;
        r = sandbox_tenant_from_json(s, rec.json);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        s->dir = strdup(dir);
        s->execution = rec.execution;
        s->recover_checkpoint = rec.recover_checkpoint;
        s->limits = rec.limits;
        memcpy(s->volumes, rec.volumes, sizeof s->volumes);
        s->recoveries = rec.recoveries ? json_deep_copy(rec.recoveries) : NULL;
        if (!s->dir) {
                sandbox_unref(s);
                return -ENOMEM;
        }
        if (strcmp(rec.state, "stopped") == 0)
                s->state = SANDBOX_STOPPED;
        else {
                /* only a run dir of ours, under DATA_DIR/run/vm/ */
                _cleanup_free_ char *prefix = strdup_printf("%s/run/vm/", sandbox_mgr()->cfg->data_dir);
                bool ours = prefix && rec.run_dir && strncmp(rec.run_dir, prefix, strlen(prefix)) == 0 &&
                            !strchr(rec.run_dir + strlen(prefix), '/');
                if (ours && vmm_adopt(rec.run_dir, sandbox_mgr()->accel, s->ctx, &s->adopt_vmm) >= 0 &&
                    !(s->run_dir = strdup(rec.run_dir))) {
                        sandbox_unref(s);
                        return -ENOMEM;
                }
                /* adopted: CREATING (hidden) until the thread has the guest;
                 * else its VM is gone and recovery boots it again */
                if (!s->adopt_vmm)
                        s->state = SANDBOX_FAILED;
        }
        r = s->state == SANDBOX_STOPPED ? 0 : stop_takeover(s, s->adopt_vmm != NULL);
        if (r >= 0 && !s->resume_state)
                r = suspend_takeover(s, s->adopt_vmm != NULL);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        if (r > 0 && s->state == SANDBOX_STOPPED)
                s->state = SANDBOX_FAILED; /* cannot be: a suspend needs a VM; resume it all the same */
        r = sandbox_reg_add(s, NULL);
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, s->ctx, "more sandboxes on disk than max_sandboxes=%u: left as it is",
                         sandbox_mgr()->cfg->max_sandboxes);
                sandbox_unref(s);
                return 0; /* keep the directory */
        }
        return 1;
}

/* node_vm_run_dirs_sweep() keeps the run dirs of adopted VMs. */
static bool run_dir_adopted(const char *path, void *userdata) {
        (void) userdata;
        return sandbox_reg_has_run_dir(path);
}

int sandbox_manager_init(const struct node_config *cfg, enum vmm_accel accel, const char *sandboxes_dir) {
        int r = sandbox_registry_init(cfg, accel, sandboxes_dir);
        if (r < 0)
                return r;

        r = mkdir_p(sandbox_mgr()->dir, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", sandbox_mgr()->dir);
        DIR *d = opendir(sandbox_mgr()->dir);
        if (!d)
                return log_error_errno(negative_errno(), "Failed to open %s: %m", sandbox_mgr()->dir);
        for (struct dirent *de; (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *path = strdup_printf("%s/%s", sandbox_mgr()->dir, de->d_name);
                if (!path) {
                        closedir(d);
                        return -ENOMEM;
                }
                size_t nlen = strlen(de->d_name), slen = strlen(DELETING_SUFFIX);
                if (nlen > slen && strcmp(de->d_name + nlen - slen, DELETING_SUFFIX) == 0) {
                        log_info("finishing the removal of a deleted sandbox's %s", path);
                        if ((r = rm_rf(path)) < 0)
                                log_warn_errno(r, "Failed to remove %s: %m", path);
                        continue;
                }
                if (name_is_valid(de->d_name) && sandbox_dir_is_parked(path)) {
                        /* a record in a parked directory: a wake (or a rollback
                         * of an archived sandbox) made it visible again, and its
                         * node stopped before it unparked it */
                        _cleanup_free_ char *rec = strdup_printf("%s/sandbox.json", path);
                        _cleanup_free_ char *marker = strdup_printf("%s/" PARKED_MARKER, path);
                        if (!rec || !marker || access(rec, F_OK) < 0) {
                                suspended_takeover(de->d_name, path); /* a suspended or archived sandbox */
                                continue;
                        }
                        log_info("sandbox=%s was made again from what it kept; taking it over", de->d_name);
                        (void) unlink(marker);
                }
                r = name_is_valid(de->d_name) ? takeover_one(de->d_name, path) : -EBADMSG;
                if (r >= 0)
                        continue;
                log_info("sandbox=%s removing what an unfinished create left (%s): %s", de->d_name,
                         r == -ENOENT ? "no record" : strerror(-r), path);
                r = rm_rf(path);
                if (r < 0)
                        log_warn_errno(r, "Failed to remove %s: %m", path);
        }
        closedir(d);

        /* VMs nobody adopts (warm pools, template builds, unfinished
         * creates) end here */
        r = node_vm_run_dirs_sweep(cfg->data_dir, run_dir_adopted, NULL);
        if (r < 0)
                log_warn_errno(r, "Failed to clean %s/run/vm: %m", cfg->data_dir);

        /* take the adopted VMs over; recover the sandboxes whose VM is gone */
        struct sandbox **all = NULL;
        size_t n = 0;
        if ((r = sandbox_reg_all(true, &all, &n)) < 0)
                return r;
        unsigned adopted = 0, recovering = 0, stopped = 0;
        for (size_t i = 0; i < n; i++) {
                struct sandbox *s = all[i];
                if (s->adopt_vmm) {
                        _cleanup_free_ char *err = NULL;
                        r = sandbox_thread_start(s, &err);
                        if (r >= 0) {
                                adopted++;
                                (void) sandbox_record_save(s);
                        } else {
                                pthread_mutex_lock(&s->lock);
                                s->state = SANDBOX_CREATING; /* sandbox_set_failed() takes it from here */
                                pthread_mutex_unlock(&s->lock);
                                sandbox_set_failed(s, "%s", err ? err : strerror(-r));
                        }
                }
                if (sandbox_state_is(s, SANDBOX_FAILED)) {
                        recovering++;
                        const char *why = s->error ?: "the VM was gone when the node started";
                        sandbox_recover_schedule(s, s->resume_saved ? "the node stopped; its VM was saved"
                                                                    : why);
                } else if (sandbox_state_is(s, SANDBOX_STOPPED))
                        stopped++;
                sandbox_unref(s);
        }
        free(all);
        if (n > 0)
                log_info("took over %zu sandboxes of an earlier node: %u VMs adopted, %u stopped, %u being recovered", n,
                         adopted, stopped, recovering);
        /* the adopted may run an older guest agent than this node's */
        r = sandbox_agent_upgrader_start();
        if (r < 0)
                return log_error_errno(r, "Failed to start the guest agent upgrader: %m");
        return 0;
}

/* Takes one sandbox out of the registry for shutdown or hand-over, or NULL
 * when none is left. A sandbox that a create or a verb still works on is
 * waited for, up to a deadline (a create waiting for a template build
 * another process runs would wait for minutes); after that it is taken as
 * it is. */
static struct sandbox *take_next(uint64_t deadline) {
        for (;;) {
                bool empty;
                struct sandbox *s = sandbox_reg_take_idle(now_monotonic_ns() > deadline, &empty);
                if (s || empty)
                        return s;
                struct timespec ts = { 0, 20 * 1000000L };
                nanosleep(&ts, NULL);
        }
}

/* Saves a running or paused sandbox's VM (its memory and devices; the
 * disk stays as the stopped VM leaves it) into DIR/STOP_STATE, for the
 * next node to resume: its processes go on after a restart or an
 * upgrade. Whether it was saved. */
static bool shutdown_save(struct sandbox *s) {
        bool paused = sandbox_state_is(s, SANDBOX_PAUSED);
        if (!paused && !sandbox_state_is(s, SANDBOX_RUNNING))
                return false;
        _cleanup_free_ char *state = strdup_printf("%s/" STOP_STATE, s->dir);
        _cleanup_free_ char *marker = strdup_printf("%s/" STOP_PAUSED, s->dir);
        if (!state || !marker)
                return false;
        uint64_t t0 = now_monotonic_ns();
        struct snapshot_job job = { .s = s, .state_path = state, .leave_paused = true };
        /* the marker first: a state without it is a running VM's */
        int r = paused ? sandbox_suspend_mark(s, STOP_PAUSED) : 0;
        if (r >= 0)
                r = sandbox_post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        if (r < 0) {
                (void) unlink(state);
                (void) unlink(marker);
                log_errno(LOG_LEVEL_WARN, r, s->ctx,
                          "cannot save the VM for the node's stop (the next node boots "
                          "its disk): %m");
                return false;
        }
        log_emit(LOG_LEVEL_INFO, s->ctx,
                 "VM saved for the node's stop in %llu ms (%llu MiB); the next node "
                 "resumes it%s",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL),
                 (unsigned long long) (job.stats.bytes >> 20), paused ? ", paused" : "");
        return true;
}

struct shutdown_pass {
        uint64_t deadline;   /* for a verb in progress */
        uint64_t save_until; /* for saving VMs */
};

/* One of the threads of a node's stop: takes the sandboxes one at a time
 * until none is left. */
static void *shutdown_sandboxes(void *arg) {
        const struct shutdown_pass *p = arg;
        uint64_t deadline = p->deadline, save_until = p->save_until;
        for (struct sandbox *s; (s = take_next(deadline));) {
                /* the guest flushes its disks (a paused or failed one
                 * cannot): what a boot of the disk finds, should the saved
                 * VM not resume */
                (void) sandbox_guest_sync(s, SHUTDOWN_SYNC_MS, "the node's shutdown");
                bool saved = now_monotonic_ns() < save_until && shutdown_save(s);
                pthread_mutex_lock(&s->lock);
                s->deleted = true; /* ops still holding it see "gone" */
                bool had_vm = s->thread_started;
                pthread_mutex_unlock(&s->lock);
                sandbox_deleted(s);
                sandbox_thread_stop(s);
                if (s->run_dir)
                        rm_rf(s->run_dir);
                if (had_vm && !saved)
                        log_emit(LOG_LEVEL_INFO, s->ctx, "VM stopped for the node shutdown; the next node boots it "
                                 "again");
                sandbox_unref(s);
        }
        return NULL;
}

void sandbox_shutdown_all(void) {
        sandbox_agent_upgrader_stop();
        struct shutdown_pass p = {.deadline = now_monotonic_ns() + SHUTDOWN_BUSY_WAIT_NS,
                                  .save_until = now_monotonic_ns() + SHUTDOWN_SAVE_BUDGET_NS};
        unsigned want = node_cpus_within(1, SHUTDOWN_SAVERS_MAX), n = 0;
        pthread_t more[SHUTDOWN_SAVERS_MAX];
        for (unsigned i = 1; i < want; i++) /* one fewer: this thread is one */
                if (pthread_create(&more[n], NULL, shutdown_sandboxes, &p) == 0)
                        n++;
        shutdown_sandboxes(&p);
        for (unsigned i = 0; i < n; i++)
                pthread_join(more[i], NULL);
}

void sandbox_hand_over_all(void) {
        sandbox_agent_upgrader_stop();
        uint64_t deadline = now_monotonic_ns() + SHUTDOWN_BUSY_WAIT_NS;
        for (struct sandbox *s; (s = take_next(deadline));) {
                pthread_mutex_lock(&s->lock);
                s->hand_over = true;
                s->deleted = true;
                pthread_mutex_unlock(&s->lock);
                sandbox_deleted(s);
                sandbox_thread_stop(s);
                sandbox_unref(s);
        }
}
