/* SPDX-License-Identifier: Apache-2.0 */
/* Fork, suspend and wake, disk and full snapshots, rollback (images: sandbox-image.c). */
#include "sandbox-internal.h"
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "log.h"
#include "nodeutil.h"
#include "objstore.h"
#include "proto.h"
#include "session.h"
#include "util.h"

/* How long a snapshot waits for the guest to freeze (and to thaw). */
#define SNAPSHOT_FREEZE_MS 10000
/* How long a suspend waits for the guest to write its page cache back. */
#define SUSPEND_SYNC_MS 10000

/* where suspended sandboxes go (NULL: suspend is refused) */
static struct objstore *objstore;

struct objstore *sandbox_objstore(void) {
        return objstore;
}

/* ---- a suspended sandbox's snapshots ---- */

/* Its snapshots stay on the node that took them (they are storage, not a
 * running sandbox): the directory keeps snapshots/ and a marker, nothing
 * else. A wake on this node finds them again; takeover leaves such a
 * directory alone; a delete removes it. */
static char *marker_path(const char *dir) {
        return strdup_printf("%s/" PARKED_MARKER, dir);
}

bool sandbox_dir_is_parked(const char *dir) {
        _cleanup_free_ char *m = marker_path(dir);
        return m && access(m, F_OK) == 0;
}

/* Removes everything in dir but snapshots/, the marker and a suspended
 * sandbox's local copy (suspend/: a wake that failed keeps it). */
static int clear_but_snapshots(const char *dir) {
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

static int snapshot_count(const char *dir, size_t *ret);
static bool suspend_is_released(const char *dir);

int sandbox_park(struct sandbox *s) {
        size_t n = 0;
        _cleanup_free_ char *m = marker_path(s->dir);
        if (!m)
                return -ENOMEM;
        if ((snapshot_count(s->dir, &n) < 0 || n == 0) && !suspend_is_released(s->dir))
                return rm_rf(s->dir);
        /* what a sandbox made from them again needs */
        pthread_mutex_lock(&s->lock);
        /* cpu: what its memory snapshot resumes on (a wake elsewhere checks) */
        json_t *o = json_pack("{s:s, s:s, s:O, s:I, s:s, s:s}", "tenant", s->tenant, "template", s->template_name,
                              "env", s->env, "execution", (json_int_t) s->execution, "recovery",
                              sandbox_recovery_name(s), "cpu", vmm_cpu_id());
        if (o)
                sandbox_limits_to_json(s, o);
        pthread_mutex_unlock(&s->lock);
        _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!text)
                return -ENOMEM;
        int r = file_write_atomic(m, text, strlen(text), 0600);
        if (r < 0)
                return r;
        return clear_but_snapshots(s->dir);
}

/* Undoes a fork or wake that failed: as create_abort(), except that the
 * snapshots parked in a suspended sandbox's directory stay. */
void new_abort(struct sandbox *s) {
        if (s->dir && sandbox_dir_is_parked(s->dir)) {
                (void) clear_but_snapshots(s->dir);
                free(s->dir);
                s->dir = NULL;
        }
        create_abort(s);
}

static void upload_cancel(const char *id);
static bool waiting_take(const char *id);

int sandbox_parked_remove(const char *id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
        if (!dir)
                return -ENOMEM;
        if (!sandbox_dir_is_parked(dir))
                return -ENOENT;
        upload_cancel(id); /* nothing of it may land after its delete */
        (void) waiting_take(id);
        return rm_rf(dir);
}

/* ---- fork ---- */

/* Registers a new sandbox id (CREATING, hidden) for fork and wake; its
 * directory is made fresh (a woken sandbox finds its snapshots again if
 * they were parked here). On failure *ret_error says why. */
int register_new(const char *id, const char *template_name, json_t *env, const char *network,
                 struct sandbox **ret, char **ret_error) {
        struct sandbox *s;
        int r = sandbox_new(id, template_name, env, network, &s);
        if (r < 0)
                return r;
        r = reg_add(s, ret_error);
        if (r < 0) {
                sandbox_unref(s);
                return r;
        }
        s->dir = strdup_printf("%s/%s", sdir, id);
        if (!s->dir) {
                new_abort(s);
                return -ENOMEM;
        }
        if (sandbox_dir_is_parked(s->dir))
                (void) clear_but_snapshots(s->dir);
        else
                (void) rm_rf(s->dir);
        if ((mkdir(s->dir, 0700) < 0 && errno != EEXIST) || (r = node_vm_run_dir(scfg->data_dir, &s->run_dir)) < 0) {
                r = r < 0 ? r : negative_errno();
                *ret_error = strdup_printf("cannot create the directories of %s: %s", id, strerror(-r));
                new_abort(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* Restores the full snapshot at state_path into s (registered by
 * register_new(), its disk in place), installs its identity and makes it
 * visible. The state file is removed afterwards: the VM has loaded it. */
static int restore_new(struct sandbox *s, char *state_path, char **ret_error) {
        s->restore_state = state_path;
        int r = sandbox_template(s, ret_error);
        if (r >= 0)
                r = run_sandbox_thread(s, ret_error);
        (void) unlink(state_path);
        free(s->restore_state);
        s->restore_state = NULL;
        if (r < 0) {
                new_abort(s);
                return r;
        }
        sandbox_make_visible(s);
        return 0;
}

int sandbox_fork(struct sandbox *parent, const char *child_id, const char *network, struct sandbox **ret_child,
                 const char **ret_state, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        int r = life_begin(parent, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
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
                        life_end(parent);
                        return -ENOMEM;
                }
                network = inherited;
        }
        struct sandbox *c = NULL;
        r = register_new(child_id, parent->template_name, parent->env, network, &c, ret_error);
        if (r < 0) {
                life_end(parent);
                return r;
        }
        c->execution = 1;
        c->recover_checkpoint = parent->recover_checkpoint;
        c->limits = parent->limits;
        snprintf(c->tenant, sizeof c->tenant, "%s", parent->tenant);
        char *state = strdup_printf("%s/fork.state", c->dir);
        _cleanup_free_ char *disk = strdup_printf("%s/rootfs.img", c->dir);
        if (!state || !disk) {
                free(state);
                life_end(parent);
                create_abort(c);
                return -ENOMEM;
        }
        /* the parent's memory and disk of one instant; it runs on */
        struct snapshot_job job = { .s = parent, .state_path = state, .disk_dst = disk,
                                    .leave_paused = sandbox_state_is(parent, SANDBOX_PAUSED) };
        r = post_command(parent, SANDBOX_CMD_SNAPSHOT, &job, -1);
        life_end(parent);
        if (r < 0) {
                *ret_error = strdup_printf("snapshot of %s failed: %s", parent->id, strerror(-r));
                free(state);
                create_abort(c);
                return r;
        }
        uint64_t t_snap = now_monotonic_ns();
        /* new identity: hostname, sandbox id, RNG seed */
        r = restore_new(c, state, ret_error);
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

/* ---- suspend and wake ---- */

/* Half of a suspend's upload has landed: a test may hold it there. */
static void suspend_blob_landed(const char *snapshot_id, const char *artifact, size_t i, size_t n, void *userdata) {
        if (i == 0 && n > 1)
                node_hold_point("suspend.uploading");
}

void sandbox_set_objstore(struct objstore *o) {
        objstore = o;
        if (o)
                objstore_set_blob_landed(o, suspend_blob_landed, NULL);
}

/*
 * A suspend leaves SANDBOXES/ID/suspend/: "intent" (the snapshot id and
 * whether the sandbox was paused) from the start, "complete" once the full
 * snapshot in state + rootfs.img is whole, "released" once the VM is to be
 * stopped for it (from then on that snapshot is the sandbox), and
 * "uploaded" once the object store holds it whole. A node that finds the
 * directory unparked took over from one killed mid-suspend (or mid-wake);
 * see suspend_takeover(). Parked, it is a suspended sandbox: it wakes from
 * this copy on this node, from the object store elsewhere once uploaded.
 */
#define SUSPEND_INTENT "suspend/intent"
#define SUSPEND_COMPLETE "suspend/complete"
#define SUSPEND_RELEASED "suspend/released"
#define SUSPEND_UPLOADED "suspend/uploaded"

/* How long an upload that failed waits before it is tried again: from a
 * second (an object store restarting) doubling to half a minute. */
#define UPLOAD_RETRY_FIRST_MS 1000
#define UPLOAD_RETRY_MAX_MS 30000

static bool suspend_has(const char *dir, const char *what) {
        _cleanup_free_ char *p = strdup_printf("%s/%s", dir, what);
        return p && access(p, F_OK) == 0;
}

static bool suspend_is_released(const char *dir) {
        return suspend_has(dir, SUSPEND_RELEASED);
}

static int suspend_mark(struct sandbox *s, const char *what) {
        _cleanup_free_ char *p = strdup_printf("%s/%s", s->dir, what);
        return p ? file_write_atomic(p, "", 0, 0600) : -ENOMEM;
}

static int suspend_intent_write(struct sandbox *s, const char *snapshot_id, bool was_paused, const char *wrapped) {
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
static json_t *suspend_intent_read(const char *dir) {
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
static bool suspended_local(const char *id, const char *snapshot_id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
        if (!dir || !name_is_valid(id) || !sandbox_dir_is_parked(dir) || !suspend_is_released(dir))
                return false;
        _cleanup_(json_decrefp) json_t *intent = suspend_intent_read(dir);
        return intent && strcmp(json_string_value(json_object_get(intent, "snapshot")), snapshot_id) == 0;
}

/* What a suspended sandbox's image carries and a wake needs (its parked
 * marker, which sandbox_park() wrote, and its id), or NULL. */
static json_t *suspended_meta(const char *id) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
        _cleanup_free_ char *m = dir ? marker_path(dir) : NULL, *text = NULL;
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
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, j->id);
        _cleanup_free_ char *state = strdup_printf("%s/%s/suspend/state", sdir, j->id);
        _cleanup_free_ char *disk = strdup_printf("%s/%s/suspend/rootfs.img", sdir, j->id);
        _cleanup_(json_decrefp) json_t *meta = suspended_meta(j->id);
        if (!dir || !state || !disk || !meta)
                return -ENOMEM;
        /* an older image of this id is stale (this copy is newer) */
        int r = objstore_snapshot_delete(objstore, j->snapshot_id);
        if (r < 0 && r != -ENOENT)
                return r;
        uint64_t t0 = now_monotonic_ns();
        const struct objstore_artifact art[] = { { "state", state }, { "rootfs.img", disk } };
        struct objstore_data_key key = { .wrapped = j->wrapped };
        if (j->sealed)
                memcpy(key.key, j->data_key, sizeof key.key);
        r = objstore_snapshot_upload_sealed(objstore, j->snapshot_id, art, ARRAY_SIZE(art), meta,
                                            j->sealed ? &key : NULL, &j->cancel);
        sodium_memzero(key.key, sizeof key.key);
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

static void waiting_add(const char *id) {
        pthread_mutex_lock(&waiting_lock);
        if (n_waiting < WAITING_MAX)
                snprintf(waiting[n_waiting++], sizeof waiting[0], "%s", id);
        pthread_mutex_unlock(&waiting_lock);
}

/* Takes id off the list; whether it was on it. */
static bool waiting_take(const char *id) {
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

static bool waiting_has(const char *id) {
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
static void upload_start(const char *id, const char *snapshot_id, const struct objstore_data_key *key) {
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
        upload_cancel(id); /* one that finished (or, never, still runs) */
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
static void upload_cancel(const char *id) {
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

/* Asks a running guest to write its page cache back (best effort: a guest
 * that does not answer still gets stopped). */
static void guest_sync(struct sandbox *s, const char *why) {
        struct guestconn *g = NULL;
        if (sandbox_guest(s, &g) < 0)
                return;
        _cleanup_(json_decrefp) json_t *empty = json_object();
        int k = empty ? guestconn_call(g, PROTO_SYNC, empty, SUSPEND_SYNC_MS, NULL, NULL) : -ENOMEM;
        if (k < 0)
                log_errno(LOG_LEVEL_WARN, k, s->ctx, "guest did not flush its disks before %s: %m", why);
}

int suspend_takeover(struct sandbox *s, bool vm_adopted) {
        _cleanup_free_ char *dir = strdup_printf("%s/suspend", s->dir);
        if (!dir)
                return -ENOMEM;
        _cleanup_(json_decrefp) json_t *o = suspend_intent_read(s->dir);
        if (!o) {
                (void) rm_rf(dir); /* nothing of a suspend that had begun */
                return 0;
        }
        const char *snap = json_string_value(json_object_get(o, "snapshot"));
        bool was_paused = json_is_true(json_object_get(o, "was_paused"));
        bool whole = suspend_has(s->dir, SUSPEND_COMPLETE);
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
        if (whole && objstore) {
                int k = objstore_snapshot_delete(objstore, snap);
                if (k < 0 && k != -ENOENT)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot remove the stale snapshot %s: %m", snap);
        }
        (void) rm_rf(dir);
        return ret;
}

void suspended_takeover(const char *id, const char *dir) {
        if (!suspend_is_released(dir) || suspend_has(dir, SUSPEND_UPLOADED) || !objstore)
                return;
        _cleanup_(json_decrefp) json_t *intent = suspend_intent_read(dir);
        if (!intent) {
                log_warn("sandbox=%s its suspended copy names no image: not uploaded (it wakes here only)", id);
                return;
        }
        if (json_object_get(intent, "wrapped_key")) {
                /* its data key was in memory only: the control plane opens
                 * the wrapped one again and gives it (suspended.upload) */
                log_info("sandbox=%s its suspended image waits for its data key to be uploaded", id);
                waiting_add(id);
                return;
        }
        log_info("sandbox=%s resuming the upload of its suspended image", id);
        upload_start(id, json_string_value(json_object_get(intent, "snapshot")), NULL);
}

int sandbox_suspend(struct sandbox *s, const char *snapshot_id, const struct objstore_data_key *key,
                    json_t **ret_info, const char **ret_state, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!objstore)
                return -EOPNOTSUPP;
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
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
        if ((r = mkdir_p(dir, 0700)) < 0 || (r = suspend_intent_write(s, snapshot_id, was_paused, key ? key->wrapped : NULL)) < 0) {
                *ret_error = strdup_printf("cannot create %s: %s", dir, strerror(-r));
                goto fail;
        }
        /* The VM stops for good below: what the guest has not written back
         * yet must be on the disk first, so that even a node killed before
         * the suspend is through (and a recovery that boots the disk)
         * keeps every write the guest acknowledged. */
        if (!was_paused)
                guest_sync(s, "suspend");
        /* stays stopped after the snapshot: nothing may change after it */
        r = post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        if (r < 0) {
                *ret_error = strdup_printf("full snapshot failed: %s", strerror(-r));
                goto fail;
        }
        /* from here on the snapshot is this sandbox's latest state: a node
         * that starts after a crash resumes it (suspend_takeover()) */
        r = suspend_mark(s, SUSPEND_COMPLETE);
        if (r >= 0)
                r = suspend_mark(s, SUSPEND_RELEASED);
        if (r < 0) {
                *ret_error = strdup_printf("cannot record the finished snapshot: %s", strerror(-r));
                goto fail;
        }
        node_hold_point("suspend.snapshot");
        t_snap = now_monotonic_ns();

        /* every node resource goes: VM, run dir, disk, record; the snapshot
         * and the sandbox's snapshots stay, parked (sandbox_park()) */
        pthread_mutex_lock(&reg_lock);
        reg_remove(s);
        pthread_mutex_unlock(&reg_lock);
        pthread_mutex_lock(&s->lock);
        s->deleted = true;
        pthread_mutex_unlock(&s->lock);
        session_sandbox_deleted(s);
        stop_thread(s);
        node_hold_point("suspend.vm-stopped");
        rm_rf(s->run_dir);
        r = sandbox_park(s);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to clean %s: %m", s->dir);
        life_end(s);
        /* restorable elsewhere once this lands; here it is already */
        upload_start(s->id, snapshot_id, key);
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
                int k = post_command(s, SANDBOX_CMD_RESUME, NULL, LIFECYCLE_CMD_WAIT_MS);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot resume after the failed suspend: %m");
        }
        if (dir)
                (void) rm_rf(dir);
        life_end(s);
        log_emit(LOG_LEVEL_WARN, s->ctx, "suspend failed: %s", *ret_error ? *ret_error : strerror(-r));
        return r;
}

#define WAKE_SNAPSHOT "wake/snapshot"

/* Reads the manifest of object store snapshot snapshot_id: -ENXIO when it
 * is not (completely) there. */
int manifest_read(const char *snapshot_id, json_t **ret, char **ret_error) {
        int r = objstore_snapshot_manifest(objstore, snapshot_id, ret);
        if (r >= 0)
                return 0;
        *ret_error = r == -ENOENT ? strdup_printf("snapshot %s is not in the object store (or never finished "
                                                  "uploading)",
                                                  snapshot_id)
                                  : strdup_printf("cannot read snapshot %s: %s", snapshot_id, strerror(-r));
        return r == -ENOENT ? -ENXIO : r;
}

/* Downloads object store snapshot snapshot_id into s (registered by
 * register_new()) and restores it, or with cold (an image of a disk only)
 * boots its disk. mark: write which image this is for wake_takeover().
 * *ret_t_down: when the download was done. On failure s is gone
 * (new_abort()). */
int download_restore(struct sandbox *s, const char *snapshot_id, const uint8_t *data_key, bool mark, bool cold,
                     uint64_t *ret_t_down, char **ret_error) {
        _cleanup_free_ char *dir = strdup_printf("%s/wake", s->dir);
        _cleanup_free_ char *disk = strdup_printf("%s/wake/rootfs.img", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *wake_marker = strdup_printf("%s/" WAKE_SNAPSHOT, s->dir);
        char *state = strdup_printf("%s/wake/state", s->dir);
        if (!dir || !disk || !rootfs || !state || !wake_marker) {
                free(state);
                new_abort(s);
                return -ENOMEM;
        }
        int r = objstore_snapshot_download_sealed(objstore, snapshot_id, dir, data_key);
        if (r >= 0 && rename(disk, rootfs) < 0)
                r = negative_errno();
        /* which image this is: a node that takes the sandbox over after the
         * wake made it visible removes it as stale (wake_takeover()) */
        if (r >= 0 && mark)
                r = file_write_atomic(wake_marker, snapshot_id, strlen(snapshot_id), 0600);
        if (r < 0) {
                *ret_error = r == -EBADMSG
                                     ? strdup_printf("snapshot %s does not open: corrupt, tampered with, or sealed "
                                                     "with another key", snapshot_id)
                                     : strdup_printf("downloading snapshot %s failed: %s", snapshot_id, strerror(-r));
                free(state);
                new_abort(s);
                return r;
        }
        *ret_t_down = now_monotonic_ns();
        if (cold) {
                free(state);
                (void) rm_rf(dir);
                return boot_new(s, ret_error);
        }
        r = restore_new(s, state, ret_error);
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
                objstore_snapshot_release(objstore, l->manifest);
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
static void remove_later(const char *path, json_t *manifest) {
        struct leftovers *l = calloc(1, sizeof *l);
        char name[32];
        if (l && path && random_id(".trash-", 8, name, sizeof name) >= 0 &&
            (l->path = strdup_printf("%s/%s", sdir, name)) && rename(path, l->path) < 0) {
                free(l->path);
                l->path = NULL;
        }
        if (!l || (path && !l->path))
                (void) rm_rf(path);
        if (!l) {
                objstore_snapshot_release(objstore, manifest);
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

/* Restores s (registered by register_new()) from its suspended copy on
 * this node, which stays whole until the wake is through: its disk is
 * cloned out of suspend/ (the VM writes it), its state hard-linked (only
 * read; the same inode, so what the suspend wrote is still in the page
 * cache, where a clone would be read from the disk again). *ret_t_down:
 * when the copy was ready. On failure s is gone (new_abort()). */
static int local_restore(struct sandbox *s, uint64_t *ret_t_down, char **ret_error) {
        _cleanup_free_ char *disk = strdup_printf("%s/suspend/rootfs.img", s->dir);
        _cleanup_free_ char *state = strdup_printf("%s/suspend/state", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        char *restore = strdup_printf("%s/wake.state", s->dir);
        int r = disk && state && rootfs && restore ? clone_replace(s, disk, rootfs) : -ENOMEM;
        if (r >= 0) {
                (void) unlink(restore);
                if (link(state, restore) < 0) /* restore_new() removes what it loaded: this link */
                        r = negative_errno();
        }
        if (r < 0) {
                *ret_error = strdup_printf("cannot copy the suspended snapshot: %s", strerror(-r));
                free(restore);
                new_abort(s);
                return r;
        }
        *ret_t_down = now_monotonic_ns();
        return restore_new(s, restore, ret_error); /* takes restore */
}

void wake_takeover(const char *dir) {
        _cleanup_free_ char *marker = strdup_printf("%s/" WAKE_SNAPSHOT, dir), *snap = NULL;
        size_t len;
        if (marker && file_read_all(marker, 128, &snap, &len) >= 0 && len == strlen(snap) && name_is_valid(snap) &&
            objstore) {
                int k = objstore_snapshot_delete(objstore, snap);
                if (k < 0 && k != -ENOENT)
                        log_warn_errno(k, "cannot remove the stale snapshot %s of a woken sandbox: %m", snap);
                else if (k >= 0)
                        log_info("removed the stale snapshot %s (its wake finished, its node did not)", snap);
        }
        _cleanup_free_ char *wake_dir = strdup_printf("%s/wake", dir);
        if (wake_dir)
                (void) rm_rf(wake_dir);
}

int sandbox_wake(const char *id, const char *snapshot_id, const char *network, const struct objstore_data_key *key,
                 struct sandbox **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!objstore)
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
        bool local = suspended_local(id, snapshot_id);
        _cleanup_(json_decrefp) json_t *manifest = NULL, *local_meta = NULL, *sealed_meta = NULL;
        _cleanup_free_ char *dir = strdup_printf("%s/%s/wake", sdir, id);
        _cleanup_free_ char *copy = strdup_printf("%s/%s/suspend", sdir, id);
        _cleanup_free_ char *sandbox_dir = strdup_printf("%s/%s", sdir, id);
        _cleanup_free_ char *marker = sandbox_dir ? marker_path(sandbox_dir) : NULL;
        struct sandbox *s = NULL;
        json_t *meta = NULL;
        int r;
        if (!dir || !copy || !marker)
                return -ENOMEM;
        if (local) {
                upload_cancel(id);
                (void) waiting_take(id);
                meta = local_meta = suspended_meta(id);
        } else {
                r = manifest_read(snapshot_id, &manifest, ret_error);
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
        r = register_new(id, tpl, env, network, &s, ret_error);
        if (r < 0)
                goto fail;
        s->execution = (unsigned) exe + 1;
        if (sandbox_tenant_from_json(s, meta) < 0 || sandbox_recovery_from_json(meta, &s->recover_checkpoint) < 0 ||
            sandbox_limits_from_json(meta, &s->limits) < 0) {
                *ret_error = strdup_printf("snapshot %s names an invalid owner, recovery or limits", snapshot_id);
                new_abort(s);
                r = -EBADMSG;
                goto fail;
        }
        uint64_t t_down;
        r = local ? local_restore(s, &t_down, ret_error)
                  : download_restore(s, snapshot_id, key ? key->key : NULL, true, false, &t_down, ret_error);
        if (r < 0)
                goto fail;
        uint64_t t_restored = now_monotonic_ns();
        node_hold_point("wake.visible");
        (void) unlink(marker); /* its snapshots belong to a running sandbox again */
        /* it runs here now: its image is stale, and removed here rather than
         * by airlockd after the reply, which a crash of either could lose
         * (before wake/ and suspend/ go: a node killed in between finds
         * them, see wake_takeover() and suspend_takeover()) */
        json_t *stale = NULL;
        int k = objstore_snapshot_withdraw(objstore, snapshot_id, &stale);
        if (k < 0 && k != -ENOENT)
                log_errno(LOG_LEVEL_WARN, k, s->ctx, "cannot remove the stale snapshot %s: %m", snapshot_id);
        node_hold_point("wake.restored");
        (void) rm_rf(dir);
        remove_later(copy, stale); /* its blobs and the copy: only space now */
        uint64_t t1 = now_monotonic_ns();
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox woken from snapshot %s in %llu ms (%s %llu ms, restore %llu ms, "
                 "removing the image and the copy %llu ms)", snapshot_id, (unsigned long long) ((t1 - t0) / 1000000ULL),
                 local ? "copied on this node" : "download", (unsigned long long) ((t_down - t0) / 1000000ULL),
                 (unsigned long long) s->restore_ms, (unsigned long long) ((t1 - t_restored) / 1000000ULL));
        *ret = sandbox_ref(s);
        return 0;

fail:
        /* still suspended here: the upload the wake stopped goes on */
        if (local && suspended_local(id, snapshot_id) && !suspend_has(sandbox_dir, SUSPEND_UPLOADED))
                upload_start(id, snapshot_id, key);
        return r;
}

/* Boots s (registered by register_new(), its disk in place) as a start
 * does, and makes it visible. On failure s is gone (new_abort()). */
int boot_new(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        int r = mem ? sandbox_template(s, ret_error) : -ENOMEM;
        if (r >= 0)
                r = ram_file_create(s, mem, ret_error);
        s->cold_boot = true;
        if (r >= 0)
                r = run_sandbox_thread(s, ret_error);
        if (r < 0)
                new_abort(s);
        else
                sandbox_make_visible(s);
        return r;
}

int sandbox_unarchive(const char *id, const char *snapshot_id, const char *network, struct sandbox **ret,
                      char **ret_error) {
        _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
        _cleanup_free_ char *marker = dir ? marker_path(dir) : NULL, *text = NULL;
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
        r = register_new(id, tpl, env, network, &s, ret_error);
        if (r < 0)
                return r;
        s->execution = (unsigned) exe + 1;
        if (sandbox_tenant_from_json(s, meta) < 0 || sandbox_recovery_from_json(meta, &s->recover_checkpoint) < 0 ||
            sandbox_limits_from_json(meta, &s->limits) < 0) {
                *ret_error = strdup_printf("the kept snapshots of %s name an invalid owner, recovery or limits", id);
                new_abort(s);
                return -EBADMSG;
        }
        _cleanup_free_ char *img = snapshot_path(s, snapshot_id), *state = snapshot_state_path(s, snapshot_id);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        char *restore = strdup_printf("%s/restore.state", s->dir);
        if (!img || !state || !rootfs || !restore) {
                free(restore);
                new_abort(s);
                return -ENOMEM;
        }
        if (access(img, F_OK) < 0) {
                *ret_error = strdup_printf("no snapshot %s of sandbox %s", snapshot_id, id);
                free(restore);
                new_abort(s);
                return -ENXIO;
        }
        bool full = access(state, F_OK) == 0;
        r = clone_replace(s, img, rootfs);
        if (r >= 0 && full)
                r = clone_replace(s, state, restore); /* restore_new() removes what it loaded */
        if (r < 0) {
                *ret_error = strdup_printf("cannot copy snapshot %s: %s", snapshot_id, strerror(-r));
                free(restore);
                new_abort(s);
                return r;
        }
        if (full)
                r = restore_new(s, restore, ret_error); /* takes restore */
        else {
                free(restore);
                r = boot_new(s, ret_error); /* a disk snapshot boots, as a start does */
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
        if (!objstore)
                return -EOPNOTSUPP;
        if (!suspended_local(id, snapshot_id))
                return -ENOENT;
        if (!waiting_take(id))
                return -EALREADY; /* uploading, or uploaded */
        log_info("sandbox=%s its suspended image's data key came: uploading it", id);
        upload_start(id, snapshot_id, key);
        return 0;
}

bool sandbox_suspended_waits_for_key(const char *id) {
        return id && waiting_has(id);
}

int sandbox_suspended_get(const char *id, const char *snapshot_id, bool *ret_local, bool *ret_uploaded,
                          char **ret_wrapped_key) {
        if (!objstore)
                return -EOPNOTSUPP;
        /* the local copy knows whether its upload landed (the marker comes
         * after the manifest) and its key: no round trip to the object
         * store, which may be far, or down */
        if (id && suspended_local(id, snapshot_id)) {
                _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
                _cleanup_(json_decrefp) json_t *intent = dir ? suspend_intent_read(dir) : NULL;
                if (!dir)
                        return -ENOMEM;
                const char *w = json_string_value(json_object_get(intent, "wrapped_key"));
                *ret_wrapped_key = w ? strdup(w) : NULL;
                if (w && !*ret_wrapped_key)
                        return -ENOMEM;
                *ret_local = true;
                *ret_uploaded = suspend_has(dir, SUSPEND_UPLOADED);
                return 0;
        }
        _cleanup_(json_decrefp) json_t *m = NULL;
        int r = objstore_snapshot_manifest(objstore, snapshot_id, &m);
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
        if (!objstore)
                return -EOPNOTSUPP;
        bool local = false;
        if (id && name_is_valid(id)) {
                upload_cancel(id); /* nothing of it may land after its delete */
                (void) waiting_take(id);
                _cleanup_free_ char *dir = strdup_printf("%s/%s", sdir, id);
                _cleanup_free_ char *copy = strdup_printf("%s/%s/suspend", sdir, id);
                if (!dir || !copy)
                        return -ENOMEM;
                if (suspended_local(id, snapshot_id)) {
                        size_t n = 0; /* only the copy kept it: all of it goes */
                        int r = snapshot_count(dir, &n) < 0 || n == 0 ? rm_rf(dir) : rm_rf(copy);
                        if (r < 0)
                                return r;
                        local = true;
                }
        }
        int r = objstore_snapshot_delete(objstore, snapshot_id);
        return r == -ENOENT && local ? 0 : r;
}

/* ---- a full snapshot's execution ---- */

#define EXECUTION_XATTR "user.airlock.execution"

int snapshot_execution_set(const char *state_path, unsigned execution) {
        char v[16];
        int n = snprintf(v, sizeof v, "%u", execution);
        return setxattr(state_path, EXECUTION_XATTR, v, (size_t) n, 0) < 0 ? negative_errno() : 0;
}

int snapshot_execution_get(const char *state_path, unsigned *ret) {
        char v[16];
        ssize_t n = getxattr(state_path, EXECUTION_XATTR, v, sizeof v - 1);
        if (n < 0)
                return negative_errno();
        v[n] = 0;
        char *end;
        errno = 0;
        unsigned long x = strtoul(v, &end, 10);
        if (n == 0 || *end || errno || x > UINT32_MAX)
                return -EBADMSG;
        *ret = (unsigned) x;
        return 0;
}

/* ---- disk snapshots ---- */

/* SANDBOXES/ID/snapshots/SNAP.img */
char *snapshot_path(struct sandbox *s, const char *snapshot_id) {
        return strdup_printf("%s/snapshots/%s.img", s->dir, snapshot_id);
}

/* Counts the snapshots of s by their disk images (temporary ones included:
 * they are snapshots being made; a full snapshot's state file goes with
 * its image). */
static int snapshot_count(const char *sandbox_dir, size_t *ret) {
        _cleanup_free_ char *d = strdup_printf("%s/snapshots", sandbox_dir);
        if (!d)
                return -ENOMEM;
        DIR *dir = opendir(d);
        if (!dir)
                return negative_errno();
        size_t n = 0;
        for (struct dirent *de; (de = readdir(dir));)
                if (strstr(de->d_name, ".img"))
                        n++;
        closedir(dir);
        *ret = n;
        return 0;
}

/* SANDBOXES/ID/snapshots/SNAP.state: the RAM and device state of a full
 * snapshot. */
char *snapshot_state_path(struct sandbox *s, const char *snapshot_id) {
        return strdup_printf("%s/snapshots/%s.state", s->dir, snapshot_id);
}

/* Checks that snapshot_id can be taken: the directory exists (made), s has
 * fewer than SANDBOX_SNAPSHOTS_MAX, and no snapshot of that id (disk or
 * full) is there. -E2BIG / -EEXIST with *ret_error saying so. */
static int snapshot_room(struct sandbox *s, const char *dir, const char *snapshot_id, char **ret_error) {
        _cleanup_free_ char *img = snapshot_path(s, snapshot_id), *state = snapshot_state_path(s, snapshot_id);
        size_t n = 0;
        int r;
        if (!img || !state)
                return -ENOMEM;
        if ((r = mkdir_p(dir, 0700)) < 0 || (r = snapshot_count(s->dir, &n)) < 0) {
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

/* Clones src to dst through a temporary name beside dst, so dst is either
 * absent or complete. */
int clone_replace(struct sandbox *s, const char *src, const char *dst) {
        _cleanup_free_ char *tmp = strdup_printf("%s.tmp", dst);
        if (!tmp)
                return -ENOMEM;
        (void) unlink(tmp);
        bool cloned = false;
        int r = file_clone_or_copy(src, tmp, &cloned);
        if (r >= 0 && rename(tmp, dst) < 0)
                r = negative_errno();
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        if (!cloned) {
                pthread_mutex_lock(&clone_lock);
                bool warn = !warned_copy;
                warned_copy = true;
                pthread_mutex_unlock(&clone_lock);
                if (warn)
                        log_emit(LOG_LEVEL_WARN, s->ctx, "storage cannot reflink: disk images are copied byte by byte");
        }
        return 0;
}

int sandbox_snapshot(struct sandbox *s, const char *snapshot_id, json_t **ret_info, const char **ret_state,
                     char **ret_error) {
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        _cleanup_free_ char *dir = strdup_printf("%s/snapshots", s->dir);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *dst = snapshot_path(s, snapshot_id);
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
        r = clone_replace(s, rootfs, dst);
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
        life_end(s);
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
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        _cleanup_free_ char *dir = strdup_printf("%s/snapshots", s->dir);
        _cleanup_free_ char *img = snapshot_path(s, snapshot_id);
        _cleanup_free_ char *state = snapshot_state_path(s, snapshot_id);
        uint64_t t0 = now_monotonic_ns();
        struct stat st_img = { 0 }, st_state = { 0 };
        struct snapshot_job job = { .s = s, .disk_dst = img, .state_path = state };
        if (!dir || !img || !state) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = snapshot_room(s, dir, snapshot_id, ret_error)) < 0)
                goto out;
        job.leave_paused = sandbox_state_is(s, SANDBOX_PAUSED);
        r = post_command(s, SANDBOX_CMD_SNAPSHOT, &job, -1);
        if (r >= 0 && (stat(img, &st_img) < 0 || stat(state, &st_state) < 0))
                r = negative_errno();
        if (r >= 0) {
                /* which execution it belongs to: a recovery may resume only
                 * one of the execution that failed */
                int k = snapshot_execution_set(state, s->execution);
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx,
                                  "cannot tag full snapshot %s with its execution (recovery will not resume it): %m",
                                  snapshot_id);
        }
        if (r < 0) {
                (void) unlink(img);
                (void) unlink(state);
                if (!*ret_error)
                        *ret_error = strdup_printf("full snapshot failed: %s", strerror(-r));
        }
out:
        life_end(s);
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
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        uint64_t t0 = now_monotonic_ns();
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *src = snapshot_path(s, snapshot_id);
        _cleanup_free_ char *state = snapshot_state_path(s, snapshot_id);
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
                stop_claimed(s, !full); /* its memory is thrown away: no flush needed */
        /* the snapshot stays as it is: the sandbox gets a clone of it */
        r = clone_replace(s, src, rootfs);
        if (r < 0) {
                *ret_error = strdup_printf("cannot replace the disk image: %s", strerror(-r));
                goto out;
        }
        if (full) {
                free(s->restore_state);
                s->restore_state = TAKE_PTR(state);
        }
        r = start_claimed(s, ret_error);
        free(s->restore_state);
        s->restore_state = NULL;
out:
        life_end(s);
        if (r < 0)
                return r;
        log_emit(LOG_LEVEL_INFO, s->ctx, "rolled back to snapshot %s in %llu ms", snapshot_id,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;
}

int sandbox_snapshot_delete(struct sandbox *s, const char *snapshot_id) {
        _cleanup_free_ char *p = snapshot_path(s, snapshot_id);
        _cleanup_free_ char *st = snapshot_state_path(s, snapshot_id);
        if (!p || !st)
                return -ENOMEM;
        if (unlink(st) < 0 && errno != ENOENT)
                return negative_errno();
        return unlink(p) < 0 ? negative_errno() : 0;
}
