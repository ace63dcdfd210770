/* SPDX-License-Identifier: Apache-2.0 */
/* The lifecycle verbs (pause, resume, stop, start) and crash recovery. */
#include "sandbox-internal.h"
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "log.h"
#include "nodeutil.h"
#include "proto.h"
#include "template.h"
#include "util.h"

/* How long stop waits for the guest to flush its file systems. */
#define STOP_SYNC_MS 10000
/* A sandbox whose VMM crashed this many times within CRASH_WINDOW_NS is
 * not recovered again: something in it kills its VM. */
#define CRASH_GIVE_UP ARRAY_SIZE(((struct sandbox *) 0)->crash_ns)
#define CRASH_WINDOW_NS (10 * 60 * 1000000000ULL)

/* ---- lifecycle verbs ---- */

/* Claims s for one verb: it must still be registered, no other verb (or
 * create) may run, and it must be in state `from` (or `from2`). */
int life_begin(struct sandbox *s, enum sandbox_state from, enum sandbox_state from2, const char **ret_state) {
        pthread_mutex_lock(&reg_lock);
        pthread_mutex_lock(&s->lock);
        int r = 0;
        if (reg_find(s->id) != s || s->deleted)
                r = -ENOENT;
        else if (s->life_busy || s->state == SANDBOX_CREATING)
                r = -EBUSY;
        else if (s->state != from && s->state != from2)
                r = -EPERM;
        else
                s->life_busy = true;
        if (ret_state)
                *ret_state = state_name(s->state);
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&reg_lock);
        return r;
}

void life_end(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        s->life_busy = false;
        pthread_mutex_unlock(&s->lock);
}

/* Joins the sandbox thread (it destroys the VMM) and re-arms stop_fd for
 * the next thread: stop_thread() leaves the eventfd readable. */
static void life_stop_thread(struct sandbox *s) {
        if (!s->thread_started)
                return; /* nothing to join, and stop_fd was never written (a read would block) */
        stop_thread(s);
        uint64_t n;
        if (read(s->stop_fd, &n, sizeof n) < 0 && errno != EAGAIN)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot drain the stop eventfd: %m");
}

/* Hands a command to the sandbox thread of s (claimed by life_begin())
 * and waits up to wait_ms (< 0: until done; for commands whose arg lives
 * on the caller's stack) for its result. On a timeout the thread drops the
 * command if it has not started it yet. */
int post_command(struct sandbox *s, enum sandbox_cmd cmd, void *arg, int64_t wait_ms) {
        pthread_mutex_lock(&s->lock);
        s->cmd = cmd;
        s->cmd_arg = arg;
        s->cmd_done = false;
        pthread_mutex_unlock(&s->lock);
        uint64_t one = 1;
        if (write(s->cmd_fd, &one, sizeof one) < 0) {
                int r = negative_errno();
                pthread_mutex_lock(&s->lock);
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
                pthread_mutex_unlock(&s->lock);
                return r;
        }
        struct timespec deadline;
        node_deadline_after_ms(&deadline, wait_ms);
        pthread_mutex_lock(&s->lock);
        int r = 0;
        while (!s->cmd_done && r == 0)
                r = wait_ms < 0 ? -pthread_cond_wait(&s->cond, &s->lock)
                                : -pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
        if (s->cmd_done)
                r = s->cmd_result;
        else {
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_arg = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

static int run_state_command(struct sandbox *s, bool pause, const char **ret_state, char **ret_error) {
        int r = life_begin(s, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED,
                           ret_state);
        if (r < 0)
                return r;
        r = post_command(s, pause ? SANDBOX_CMD_PAUSE : SANDBOX_CMD_RESUME, NULL, LIFECYCLE_CMD_WAIT_MS);
        life_end(s);
        if (r < 0) {
                if (ret_error)
                        *ret_error = strdup_printf("QMP %s failed: %s", pause ? "stop" : "cont", strerror(-r));
                return r == -ETIMEDOUT ? r : -EIO;
        }
        (void) record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox %s", pause ? "paused" : "resumed");
        return 0;
}

int sandbox_pause(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, true, ret_state, ret_error);
}

int sandbox_resume(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, false, ret_state, ret_error);
}

/* The stop itself, for a sandbox claimed by life_begin(); leaves it
 * claimed. flush: the guest syncs its disks first. */
void stop_claimed(struct sandbox *s, bool flush) {
        uint64_t t0 = now_monotonic_ns();
        /* Flush the guest's page cache to the disk image first, or writes
         * not yet synced die with QEMU. A paused guest cannot answer; a
         * guest that does not is stopped anyway (it is ours to stop). */
        struct guestconn *g = NULL;
        if (flush && sandbox_guest(s, &g) >= 0) { /* only a running guest has one */
                _cleanup_(json_decrefp) json_t *empty = json_object();
                int k = empty ? guestconn_call(g, PROTO_SYNC, empty, STOP_SYNC_MS, NULL, NULL) : -ENOMEM;
                if (k < 0)
                        log_errno(LOG_LEVEL_WARN, k, s->ctx, "guest did not flush its disks before stop: %m");
        }
        /* QEMU dies, its end of the guest channel closes: open streams and
         * sessions end ("guest channel closed"); the channel itself stays
         * allocated until start retires it, since ops may still hold it. */
        life_stop_thread(s);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (mem && unlink(mem) < 0 && errno != ENOENT)
                log_errno(LOG_LEVEL_WARN, negative_errno(), s->ctx, "Failed to remove %s: %m", mem);
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_STOPPED;
        s->pid = 0;
        pthread_mutex_unlock(&s->lock);
        (void) record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox stopped in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
}

int sandbox_stop(struct sandbox *s, const char **ret_state, char **ret_error) {
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        stop_claimed(s, true);
        life_end(s);
        (void) ret_error;
        return 0;
}

/* Moves the channel of the previous VM run out of s->gc (s->lock held).
 * Nobody can reach it through s any more; an op that fetched it before the
 * stop may still hold it, so it is freed only when no such op can exist:
 * right away when s has no other holder, else with the last reference. */
static int retire_gc(struct sandbox *s) {
        if (!s->gc)
                return 0;
        struct guestconn **n = realloc(s->retired_gc, (s->n_retired_gc + 1) * sizeof *n);
        if (!n)
                return -ENOMEM;
        s->retired_gc = n;
        s->retired_gc[s->n_retired_gc++] = TAKE_PTR(s->gc);
        /* the registry's reference and the caller's */
        if (__atomic_load_n(&s->refs, __ATOMIC_SEQ_CST) <= 2) {
                for (size_t i = 0; i < s->n_retired_gc; i++)
                        guestconn_free(s->retired_gc[i]);
                s->n_retired_gc = 0;
        }
        return 0;
}

int ram_file_create(struct sandbox *s, const char *path, char **ret_error) {
        /* the RAM file of a boot with share=on, as for a template */
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || ftruncate(fd, (off_t) s->tpl->memory_mib << 20) < 0) {
                int r = negative_errno();
                *ret_error = strdup_printf("cannot create the RAM file %s: %s", path, strerror(-r));
                return r;
        }
        return 0;
}

/* The template of s, looked up once: a sandbox a node took over from an
 * earlier one has none until it needs to boot (the build may still run). */
int sandbox_template(struct sandbox *s, char **ret_error) {
        if (s->tpl)
                return 0;
        int r = template_get(s->template_name, TEMPLATE_WAIT_MS, &s->tpl, ret_error);
        if (r < 0 && !*ret_error)
                *ret_error = strdup_printf("template %s: %s", s->template_name, strerror(-r));
        return r;
}

/* The cold boot of a stopped sandbox claimed by life_begin(); leaves it
 * claimed. On failure it stays stopped and *ret_error says why. */
int start_claimed(struct sandbox *s, char **ret_error) {
        int r;
        char *err = NULL;
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!mem) {
                r = -ENOMEM;
                goto fail;
        }
        r = sandbox_template(s, &err);
        if (r < 0)
                goto fail;
        /* a sandbox taken over without its VM has no run dir yet */
        if (!s->run_dir && (r = node_vm_run_dir(scfg->data_dir, &s->run_dir)) < 0) {
                err = strdup_printf("cannot create a run directory under %s/run: %s", scfg->data_dir, strerror(-r));
                goto fail;
        }
        if (!s->restore_state && (r = ram_file_create(s, mem, &err)) < 0)
                goto fail;
        pthread_mutex_lock(&s->lock);
        r = retire_gc(s);
        s->cold_boot = true;
        s->start_done = false;
        s->start_result = 0;
        free(s->start_error);
        s->start_error = NULL;
        free(s->error);
        s->error = NULL;
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                goto fail;

        uint64_t t0 = now_monotonic_ns();
        r = run_sandbox_thread(s, &err);
        if (r < 0) {
                life_stop_thread(s); /* it has returned already: only joins */
                goto fail;
        }
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_RUNNING;
        s->execution++;
        pthread_mutex_unlock(&s->lock);
        (void) record_save(s);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox started (cold boot) in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;

fail:
        if (mem)
                (void) unlink(mem);
        log_emit(LOG_LEVEL_WARN, s->ctx, "start failed: %s", err ? err : strerror(-r));
        if (ret_error)
                *ret_error = err;
        else
                free(err);
        return r;
}

int sandbox_start(struct sandbox *s, const char **ret_state, char **ret_error) {
        int r = life_begin(s, SANDBOX_STOPPED, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        r = start_claimed(s, ret_error);
        life_end(s); /* on failure still stopped: the disk is untouched, a later start may work */
        return r;
}

/* ---- crash recovery ---- */

/* The newest full snapshot of s taken in its current execution (tagged by
 * sandbox_snapshot_full()): 1 with its id and time, or 0 when there is none.
 * One from an earlier execution is never used: the disk has moved on since
 * (a start, wake, rollback or recovery came after it), and resuming it would
 * take the sandbox back past writes it acknowledged after that event. */
static int checkpoint_of_execution(struct sandbox *s, char *ret, size_t n, int64_t *ret_at_ms) {
        _cleanup_free_ char *d = strdup_printf("%s/snapshots", s->dir);
        DIR *dir = d ? opendir(d) : NULL;
        if (!dir)
                return 0;
        struct timespec best = { 0 };
        int found = 0;
        for (struct dirent *de; (de = readdir(dir));) {
                size_t len = strlen(de->d_name);
                if (len <= 6 || len - 6 >= n || strcmp(de->d_name + len - 6, ".state") != 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                _cleanup_free_ char *path = strdup_printf("%s/%s", d, de->d_name);
                unsigned exe;
                if (!path || snapshot_execution_get(path, &exe) < 0 || exe != s->execution)
                        continue;
                if (found && (st.st_mtim.tv_sec < best.tv_sec ||
                              (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec <= best.tv_nsec)))
                        continue;
                best = st.st_mtim;
                snprintf(ret, n, "%.*s", (int) (len - 6), de->d_name);
                found = 1;
        }
        closedir(dir);
        if (found)
                *ret_at_ms = (int64_t) best.tv_sec * 1000 + best.tv_nsec / 1000000;
        return found;
}

struct recovery {
        struct sandbox *s; /* a reference */
        char reason[256];
};

/* Brings a failed sandbox back as a new execution: a cold boot of its own
 * disk (the freshest state it has: every write the guest synced is there;
 * its file systems replay their journals as after a power cut), or, for a
 * sandbox that opted in, a resume of the newest full snapshot of the
 * execution that died (its processes kept, later writes lost). Runs on a thread of its own, claimed like a verb,
 * so a delete meanwhile is refused with -EBUSY or wins before it starts. */
static void *recover_thread(void *arg) {
        struct recovery *rc = arg;
        struct sandbox *s = rc->s;
        char *err = NULL;
        int r;
        if (life_begin(s, SANDBOX_FAILED, SANDBOX_FAILED, NULL) < 0)
                goto out;
        pthread_mutex_lock(&s->lock);
        s->recovering = true;
        uint64_t now = now_monotonic_ns();
        /* the oldest of the last CRASH_GIVE_UP crashes, then this one */
        bool give_up = s->crash_ns[0] && now - s->crash_ns[0] < CRASH_WINDOW_NS;
        memmove(s->crash_ns, s->crash_ns + 1, sizeof s->crash_ns - sizeof s->crash_ns[0]);
        s->crash_ns[CRASH_GIVE_UP - 1] = now;
        pthread_mutex_unlock(&s->lock);
        if (give_up) {
                log_emit(LOG_LEVEL_ERROR, s->ctx, "not recovering: the VM failed %zu times within %llu minutes",
                         CRASH_GIVE_UP, (unsigned long long) (CRASH_WINDOW_NS / 60000000000ULL));
                pthread_mutex_lock(&s->lock);
                s->recovering = false;
                recoveries_add(s, rc->reason, "none", false, "failed too often: left failed", NULL, 0);
                pthread_mutex_unlock(&s->lock);
                (void) record_save(s);
                life_end(s);
                goto out;
        }
        life_stop_thread(s); /* joins the thread of the VM that died */
        pthread_mutex_lock(&s->lock);
        s->state = SANDBOX_STOPPED;
        pthread_mutex_unlock(&s->lock);
        /* by default the disk as the crash left it; a checkpoint only
         * when asked for, and only one of this execution */
        char snap[80] = "", how[160] = "cold boot of its disk";
        int64_t snap_at = 0;
        bool resumed = false, resumed_suspend = false;
        if (s->resume_state) {
                resumed_suspend = true;
                /* the whole snapshot of a suspend the node died in: nothing
                 * ran after it, so it is the latest state there is */
                s->restore_state = TAKE_PTR(s->resume_state);
                snprintf(how, sizeof how, "resumed the snapshot of the suspend it was in when the node stopped");
        } else if (s->recover_checkpoint && checkpoint_of_execution(s, snap, sizeof snap, &snap_at) > 0) {
                _cleanup_free_ char *img = snapshot_path(s, snap);
                _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
                if (img && rootfs && clone_replace(s, img, rootfs) >= 0) {
                        s->restore_state = snapshot_state_path(s, snap);
                        resumed = true;
                        snprintf(how, sizeof how, "resumed full snapshot %s (writes after it are lost)", snap);
                }
        } else if (s->recover_checkpoint)
                snprintf(how, sizeof how, "cold boot of its disk (no full snapshot of the execution that failed)");
        log_emit(LOG_LEVEL_WARN, s->ctx, "recovering the sandbox (%s): %s", rc->reason, how);
        r = start_claimed(s, &err);
        if (resumed_suspend && s->restore_state)
                (void) unlink(s->restore_state); /* loaded (or unusable): nobody else needs it */
        free(s->restore_state);
        s->restore_state = NULL;
        pthread_mutex_lock(&s->lock);
        s->recovering = false;
        if (r < 0) {
                s->state = SANDBOX_FAILED;
                free(s->error);
                s->error = strdup_printf("recovery failed: %s", err ? err : strerror(-r));
        }
        recoveries_add(s, rc->reason, how, r >= 0, r < 0 ? s->error : NULL, resumed ? snap : NULL, snap_at);
        pthread_mutex_unlock(&s->lock);
        (void) record_save(s);
        life_end(s);
        log_emit(r < 0 ? LOG_LEVEL_ERROR : LOG_LEVEL_INFO, s->ctx, "recovery %s", r < 0 ? "failed" : "done");
out:
        free(err);
        sandbox_unref(s);
        free(rc);
        return NULL;
}

void recover_schedule(struct sandbox *s, const char *reason) {
        if (!scfg->recover)
                return;
        struct recovery *rc = calloc(1, sizeof *rc);
        if (!rc)
                return;
        rc->s = sandbox_ref(s);
        snprintf(rc->reason, sizeof rc->reason, "%s", reason);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = -pthread_create(&t, &attr, recover_thread, rc);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, s->ctx, "cannot start the recovery thread: %m");
                sandbox_unref(s);
                free(rc);
        }
}
