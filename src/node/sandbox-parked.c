/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parked directories (suspended and archived sandboxes keep only their
 * snapshots) and the uploads of suspended sandboxes to the object store
 * (layer 2).
 */
#include "sandbox-internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "objstore.h"
#include "template.h"
#include "util.h"

/* Half of a suspend's upload has landed: a test may hold it there. */
static void sandbox_suspend_blob_landed(const char *snapshot_id, const char *artifact, size_t i, size_t n, void *userdata) {
        if (i == 0 && n > 1)
                node_hold_point("suspend.uploading");
}

/* where suspended sandboxes go (NULL: suspend is refused) */
static struct objstore *objstore;

struct objstore *sandbox_objstore(void) {
        return objstore;
}

void sandbox_set_objstore(struct objstore *o) {
        objstore = o;
        if (o)
                objstore_set_blob_landed(o, sandbox_suspend_blob_landed, NULL);
}

/* ---- a suspended sandbox's snapshots ---- */

/* Its snapshots stay on the node that took them (they are storage, not a
 * running sandbox): the directory keeps snapshots/ and a marker, nothing
 * else. A wake on this node finds them again; takeover leaves such a
 * directory alone; a delete removes it. */
char *sandbox_marker_path(const char *dir) {
        return strdup_printf("%s/" PARKED_MARKER, dir);
}

bool sandbox_dir_is_parked(const char *dir) {
        _cleanup_free_ char *m = sandbox_marker_path(dir);
        return m && access(m, F_OK) == 0;
}

/* Removes everything in dir but snapshots/, the marker and a suspended
 * sandbox's local copy (suspend/: a wake that failed keeps it). */
int sandbox_clear_but_snapshots(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : negative_errno();
        int r = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    strcmp(de->d_name, "snapshots") == 0 || strcmp(de->d_name, PARKED_MARKER) == 0 ||
                    strcmp(de->d_name, "suspend") == 0)
                        continue;
                _cleanup_free_ char *p = strdup_printf("%s/%s", dir, de->d_name);
                int k = p ? rm_rf(p) : -ENOMEM;
                if (k < 0 && r == 0)
                        r = k;
        }
        closedir(d);
        return r;
}

int sandbox_park(struct sandbox *s) {
        size_t n = 0;
        _cleanup_free_ char *m = sandbox_marker_path(s->dir);
        if (!m)
                return -ENOMEM;
        if ((sandbox_snapshot_count(s->dir, &n) < 0 || n == 0) && !sandbox_suspend_is_released(s->dir))
                return rm_rf(s->dir);
        /* what a sandbox made from them again needs */
        pthread_mutex_lock(&s->lock);
        /* cpu: what its memory snapshot resumes on (a wake elsewhere checks) */
        json_t *o = json_pack("{s:s, s:s, s:O, s:I, s:s, s:s}", "tenant", s->tenant, "template", s->template_name,
                              "env", s->env, "execution", (json_int_t) s->execution, "recovery",
                              sandbox_recovery_name(s), "cpu", vmm_cpu_id());
        if (o) {
                sandbox_limits_to_json(s, o);
                sandbox_volumes_to_json(s, o); /* the wake attaches them again */
        }
        /* the template build its disk and RAM come from: what its image is
         * a delta against (sandbox-delta.c) */
        if (o && s->tpl && json_object_set_new(o, "base", json_pack("{s:s, s:s}", "template", s->tpl->name, "hash",
                                                                   s->tpl->hash)) < 0) {
                json_decref(o);
                o = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!text)
                return -ENOMEM;
        int r = file_write_atomic(m, text, strlen(text), 0600);
        if (r < 0)
                return r;
        return sandbox_clear_but_snapshots(s->dir);
}

int sandbox_parked_remove(const char *id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        if (!dir)
                return -ENOMEM;
        if (!sandbox_dir_is_parked(dir))
                return -ENOENT;
        sandbox_upload_cancel(id); /* nothing of it may land after its delete */
        (void) sandbox_waiting_take(id);
        return rm_rf(dir);
}

/* ---- suspend and wake ---- */

/* How long an upload that failed waits before it is tried again: from a
 * second (an object store restarting) doubling to half a minute. */
#define UPLOAD_RETRY_FIRST_MS 1000
#define UPLOAD_RETRY_MAX_MS 30000

bool sandbox_suspend_has(const char *dir, const char *what) {
        _cleanup_free_ char *p = strdup_printf("%s/%s", dir, what);
        return p && access(p, F_OK) == 0;
}

bool sandbox_suspend_is_released(const char *dir) {
        return sandbox_suspend_has(dir, SUSPEND_RELEASED);
}

int sandbox_suspend_mark(struct sandbox *s, const char *what) {
        _cleanup_free_ char *p = strdup_printf("%s/%s", s->dir, what);
        return p ? file_write_atomic(p, "", 0, 0600) : -ENOMEM;
}

int sandbox_suspend_intent_write(struct sandbox *s, const char *snapshot_id, bool was_paused, const char *wrapped) {
        _cleanup_free_ char *p = strdup_printf("%s/" SUSPEND_INTENT, s->dir);
        /* the data key only wrapped: no node keeps one it could open */
        _cleanup_(json_decrefp) json_t *o = json_pack("{s:s, s:b, s:s*}", "snapshot", snapshot_id, "was_paused",
                                                      was_paused, "wrapped_key", wrapped);
        _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (!p || !text)
                return -ENOMEM;
        return file_write_atomic(p, text, strlen(text), 0600);
}

/* The intent of the suspend in dir (SANDBOXES/ID): NULL when there is none. */
json_t *sandbox_suspend_intent_read(const char *dir) {
        _cleanup_free_ char *p = strdup_printf("%s/" SUSPEND_INTENT, dir), *text = NULL;
        size_t len;
        if (!p || file_read_all(p, 4096, &text, &len) < 0)
                return NULL;
        json_t *o = json_loadb(text, len, 0, NULL);
        const char *snap = json_string_value(json_object_get(o, "snapshot"));
        if (!snap || !name_is_valid(snap)) {
                json_decref(o);
                return NULL;
        }
        return o;
}

/* Whether SANDBOXES/id holds the released local copy of suspended image
 * snapshot_id (and so whether it can wake from it here). */
bool sandbox_suspended_local(const char *id, const char *snapshot_id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        if (!dir || !name_is_valid(id) || !sandbox_dir_is_parked(dir) || !sandbox_suspend_is_released(dir))
                return false;
        _cleanup_(json_decrefp) json_t *intent = sandbox_suspend_intent_read(dir);
        return intent && strcmp(json_string_value(json_object_get(intent, "snapshot")), snapshot_id) == 0;
}

/* What a suspended sandbox's image carries and a wake needs (its parked
 * marker, which sandbox_park() wrote, and its id), or NULL. */
json_t *sandbox_suspended_meta(const char *id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, id);
        _cleanup_free_ char *m = dir ? sandbox_marker_path(dir) : NULL, *text = NULL;
        size_t len;
        if (!m || file_read_all(m, 1 << 20, &text, &len) < 0)
                return NULL;
        json_t *o = json_loadb(text, len, 0, NULL);
        if (!json_is_object(o) || json_object_set_new(o, "sandbox", json_string(id)) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

/*
 * Uploads of suspended sandboxes' local copies run after their suspend
 * answered, one thread each: a suspend releases the VM as soon as its
 * snapshot is durable here, and the sandbox becomes restorable on another
 * node once its upload lands (the manifest last; the node then marks
 * "uploaded"). A wake here or a delete cancels the upload first; one that
 * fails is tried again, and a node that starts again resumes what a
 * stopped one left.
 */
struct upload_job {
        struct upload_job *next;
        char id[65];
        char snapshot_id[65];
        /* the data key the control plane gave the suspend, in memory only
         * (locked, wiped at the end); sealed: it seals the upload */
        bool sealed;
        uint8_t data_key[OBJSTORE_DATA_KEY_SIZE];
        char wrapped[OBJSTORE_WRAPPED_KEY_MAX + 1];
        uint64_t started_ns;
        atomic_bool cancel;
        atomic_bool done;
        pthread_t thread;
};

static pthread_mutex_t uploads_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_cond_t uploads_cond = PTHREAD_COND_INITIALIZER;

static struct upload_job *uploads;

static int upload_once(struct upload_job *j) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "sandbox=%s", j->id);
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sandbox_mgr()->dir, j->id);
        _cleanup_free_ char *state = strdup_printf("%s/%s/suspend/state", sandbox_mgr()->dir, j->id);
        _cleanup_free_ char *disk = strdup_printf("%s/%s/suspend/rootfs.img", sandbox_mgr()->dir, j->id);
        _cleanup_(json_decrefp) json_t *meta = sandbox_suspended_meta(j->id);
        if (!dir || !state || !disk || !meta)
                return -ENOMEM;
        /* an older image of this id is stale (this copy is newer) */
        int r = objstore_snapshot_delete(objstore, j->snapshot_id);
        if (r < 0 && r != -ENOENT)
                return r;
        uint64_t t0 = now_monotonic_ns();
        /* what differs from its template, the template shared with every
         * image of it; whole when there is no template build to take */
        const struct objstore_artifact whole[] = { { .name = "state", .path = state },
                                                   { .name = "rootfs.img", .path = disk } };
        _cleanup_(sandbox_delta_release) struct sandbox_delta delta = { 0 };
        const struct objstore_artifact *art = whole;
        size_t n = ARRAY_SIZE(whole);
        if (sandbox_delta_make(j->id, meta, &delta) >= 0) {
                art = delta.art;
                n = ARRAY_SIZE(delta.art);
        }
        /* and its volumes, so that any node can wake it with them */
        struct objstore_artifact all[ARRAY_SIZE(delta.art) + SANDBOX_VOLUMES_MAX];
        char *volume_paths[SANDBOX_VOLUMES_MAX] = {0};
        memcpy(all, art, n * sizeof *art);
        size_t n_volumes = sandbox_volumes_upload(meta, all + n, volume_paths);
        struct objstore_data_key key = { .wrapped = j->wrapped };
        if (j->sealed)
                memcpy(key.key, j->data_key, sizeof key.key);
        r = objstore_snapshot_upload(objstore, j->snapshot_id, all, n + n_volumes,
                                     &(struct objstore_upload_opts){.meta = meta,
                                                                    .key = j->sealed ? &key : NULL,
                                                                    .cancel = &j->cancel});
        sodium_memzero(key.key, sizeof key.key);
        for (size_t i = 0; i < n_volumes; i++)
                free(volume_paths[i]);
        if (art == delta.art) { /* made for the upload only */
                (void) unlink(delta.paths[0]);
                (void) unlink(delta.paths[1]);
        }
        if (r < 0)
                return r;
        node_hold_point("suspend.uploaded");
        _cleanup_free_ char *marker = strdup_printf("%s/" SUSPEND_UPLOADED, dir);
        r = marker ? file_write_atomic(marker, "", 0, 0600) : -ENOMEM;
        if (r < 0)
                return r;
        uint64_t t1 = now_monotonic_ns();
        log_emit(LOG_LEVEL_INFO, ctx, "suspended image %s restorable from the object store %llu ms after the "
                 "suspend answered (upload %llu ms)", j->snapshot_id,
                 (unsigned long long) ((t1 - j->started_ns) / 1000000ULL), (unsigned long long) ((t1 - t0) / 1000000ULL));
        return 0;
}

static void *upload_thread(void *userdata) {
        struct upload_job *j = userdata;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "sandbox=%s", j->id);
        for (unsigned wait_ms = UPLOAD_RETRY_FIRST_MS;; wait_ms = MIN(wait_ms * 2, UPLOAD_RETRY_MAX_MS)) {
                int r = upload_once(j);
                if (r >= 0 || atomic_load(&j->cancel))
                        break;
                log_errno(LOG_LEVEL_WARN, r, ctx, "uploading the suspended image %s failed (it wakes from this "
                          "node's copy meanwhile); trying again in %u s: %m", j->snapshot_id, (wait_ms + 999) / 1000);
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until); /* the condition variable's clock */
                until.tv_sec += wait_ms / 1000;
                until.tv_nsec += (long) (wait_ms % 1000) * 1000000;
                if (until.tv_nsec >= 1000000000) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000;
                }
                pthread_mutex_lock(&uploads_lock);
                while (!atomic_load(&j->cancel) &&
                       pthread_cond_timedwait(&uploads_cond, &uploads_lock, &until) != ETIMEDOUT)
                        ;
                pthread_mutex_unlock(&uploads_lock);
                if (atomic_load(&j->cancel))
                        break;
        }
        atomic_store(&j->done, true);
        return NULL;
}

static void upload_job_free(struct upload_job *j) {
        if (!j)
                return;
        sodium_munlock(j->data_key, sizeof j->data_key); /* wipes it too */
        free(j);
}

/* Suspended copies a node found at its start whose upload needs a data
 * key only the control plane can give (it asks: sandbox.list and
 * suspended.get say which; suspended.upload gives it). */
#define WAITING_MAX 1024

static char waiting[WAITING_MAX][65];

static size_t n_waiting;

static pthread_mutex_t waiting_lock = PTHREAD_MUTEX_INITIALIZER;

void sandbox_waiting_add(const char *id) {
        pthread_mutex_lock(&waiting_lock);
        if (n_waiting < WAITING_MAX)
                snprintf(waiting[n_waiting++], sizeof waiting[0], "%s", id);
        pthread_mutex_unlock(&waiting_lock);
}

/* Takes id off the list; whether it was on it. */
bool sandbox_waiting_take(const char *id) {
        bool found = false;
        pthread_mutex_lock(&waiting_lock);
        for (size_t i = 0; i < n_waiting && !found; i++)
                if (strcmp(waiting[i], id) == 0) {
                        memcpy(waiting[i], waiting[--n_waiting], sizeof waiting[0]);
                        found = true;
                }
        pthread_mutex_unlock(&waiting_lock);
        return found;
}

bool sandbox_waiting_has(const char *id) {
        bool found = false;
        pthread_mutex_lock(&waiting_lock);
        for (size_t i = 0; i < n_waiting && !found; i++)
                found = strcmp(waiting[i], id) == 0;
        pthread_mutex_unlock(&waiting_lock);
        return found;
}

json_t *sandbox_uploads_waiting_json(void) {
        json_t *a = json_array();
        pthread_mutex_lock(&waiting_lock);
        for (size_t i = 0; a && i < n_waiting; i++)
                json_array_append_new(a, json_string(waiting[i]));
        pthread_mutex_unlock(&waiting_lock);
        return a;
}

/* Starts the upload of suspended sandbox id's local copy, sealed with key
 * when given (else in the clear). */
void sandbox_upload_start(const char *id, const char *snapshot_id, const struct objstore_data_key *key) {
        struct upload_job *j = calloc(1, sizeof *j);
        if (!j) {
                log_warn("sandbox=%s cannot upload its suspended image: out of memory (it wakes here only)", id);
                return;
        }
        if (key) {
                (void) sodium_mlock(j->data_key, sizeof j->data_key); /* kept off swap where allowed */
                memcpy(j->data_key, key->key, sizeof j->data_key);
                snprintf(j->wrapped, sizeof j->wrapped, "%s", key->wrapped);
                j->sealed = true;
        }
        snprintf(j->id, sizeof j->id, "%s", id);
        snprintf(j->snapshot_id, sizeof j->snapshot_id, "%s", snapshot_id);
        j->started_ns = now_monotonic_ns();
        atomic_init(&j->cancel, false);
        atomic_init(&j->done, false);
        sandbox_upload_cancel(id); /* one that finished (or, never, still runs) */
        pthread_mutex_lock(&uploads_lock);
        int r = pthread_create(&j->thread, NULL, upload_thread, j);
        if (r != 0) {
                pthread_mutex_unlock(&uploads_lock);
                log_warn("sandbox=%s cannot start the upload of its suspended image: %s (it wakes here only)", id,
                         strerror(r));
                upload_job_free(j);
                return;
        }
        j->next = uploads;
        uploads = j;
        pthread_mutex_unlock(&uploads_lock);
}

/* Stops the upload of suspended sandbox id, if one runs, and waits for it:
 * afterwards nothing of it lands any more. */
void sandbox_upload_cancel(const char *id) {
        pthread_mutex_lock(&uploads_lock);
        struct upload_job *j = NULL;
        for (struct upload_job **p = &uploads; *p; p = &(*p)->next)
                if (strcmp((*p)->id, id) == 0) {
                        j = *p;
                        *p = j->next;
                        break;
                }
        if (j) {
                atomic_store(&j->cancel, true);
                pthread_cond_broadcast(&uploads_cond);
        }
        pthread_mutex_unlock(&uploads_lock);
        if (!j)
                return;
        if (!atomic_load(&j->done))
                log_info("sandbox=%s stopping the upload of its suspended image %s", id, j->snapshot_id);
        (void) pthread_join(j->thread, NULL);
        upload_job_free(j);
}

void sandbox_uploads_stop(void) {
        pthread_mutex_lock(&uploads_lock);
        for (struct upload_job *j = uploads; j; j = j->next)
                atomic_store(&j->cancel, true);
        pthread_cond_broadcast(&uploads_cond);
        pthread_mutex_unlock(&uploads_lock);
}
