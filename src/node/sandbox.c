/* SPDX-License-Identifier: Apache-2.0 */
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "log.h"
#include "nodeutil.h"
#include "pool.h"
#include "proto.h"
#include "qmp.h"
#include "session.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* How long a create waits for a template that is being built. */
#define TEMPLATE_WAIT_MS (15 * 60 * 1000)
#define GUEST_CONNECT_MS 5000
#define GUEST_HELLO_MS 10000
/* A cold boot (start) runs the whole kernel and init: minutes under TCG. */
#define GUEST_BOOT_HELLO_MS 120000
#define QMP_RUNSTATE_MS 5000
/* pause/resume wait at most this for the sandbox thread (its QMP call is
 * bounded by QMP_RUNSTATE_MS; the rest is slack for a busy host). */
#define LIFECYCLE_CMD_WAIT_MS 15000
#define IDENTITY_MS 10000
/* How often the sandbox thread checks the guest channel. */
#define MONITOR_INTERVAL_MS 250
/* How long stop waits for the guest to flush its file systems. */
#define STOP_SYNC_MS 10000
/* How long a snapshot waits for the guest to freeze (and to thaw). */
#define SNAPSHOT_FREEZE_MS 10000

static const struct node_config *scfg;
static char *sdir;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* A fixed array is enough: max_sandboxes is bounded and small. */
static struct sandbox **reg;
static size_t reg_n, reg_cap;

/* Guards warned_copy: the byte-copy fallback is logged once per node. */
static pthread_mutex_t clone_lock = PTHREAD_MUTEX_INITIALIZER;
static bool warned_copy;


struct sandbox *sandbox_ref(struct sandbox *s) {
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);
        return s;
}

void sandbox_unref(struct sandbox *s) {
        if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST) > 0)
                return;
        /* the thread was joined by delete (or never started) */
        guestconn_free(s->gc);
        for (size_t i = 0; i < s->n_retired_gc; i++)
                guestconn_free(s->retired_gc[i]);
        free(s->retired_gc);
        if (s->stop_fd >= 0)
                close(s->stop_fd);
        if (s->cmd_fd >= 0)
                close(s->cmd_fd);
        template_info_free(s->tpl);
        json_decref(s->env);
        free(s->template_name);
        free(s->dir);
        free(s->run_dir);
        free(s->error);
        free(s->start_error);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
}

/* ---- registry (reg_lock held) ---- */

static struct sandbox *reg_find(const char *id) {
        for (size_t i = 0; i < reg_n; i++)
                if (strcmp(reg[i]->id, id) == 0)
                        return reg[i];
        return NULL;
}

static void reg_remove(struct sandbox *s) {
        for (size_t i = 0; i < reg_n; i++)
                if (reg[i] == s) {
                        reg[i] = reg[--reg_n];
                        return;
                }
}

/* ---- the sandbox thread ---- */

static void set_failed(struct sandbox *s, const char *fmt, ...) _printf_(2, 3);
static void set_failed(struct sandbox *s, const char *fmt, ...) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        pthread_mutex_lock(&s->lock);
        /* a stopped sandbox has no VM left to fail */
        bool first = s->state != SANDBOX_FAILED && s->state != SANDBOX_STOPPED && !s->deleted;
        if (first) {
                s->state = SANDBOX_FAILED;
                free(s->error);
                s->error = strdup(msg);
        }
        pthread_mutex_unlock(&s->lock);
        if (first)
                log_emit(LOG_LEVEL_WARN, s->ctx, "sandbox failed: %s", msg);
}

/* Describes how the (not yet reaped) QEMU process ended. */
static void describe_exit(struct vmm *v, char *buf, size_t n) {
        siginfo_t si = { 0 };
        if (waitid((idtype_t) P_PIDFD, (id_t) v->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) {
                snprintf(buf, n, "vmm exited");
                return;
        }
        if (si.si_code == CLD_EXITED)
                snprintf(buf, n, "vmm exited (status %d)", si.si_status);
        else
                snprintf(buf, n, "vmm exited (status %d, killed by signal %d)", 128 + si.si_status, si.si_status);
}

/* IDENTITY: the sandbox id as hostname, its env, the wall clock and a fresh
 * RNG seed, so clones of one snapshot never share random state. */
static int send_identity(struct sandbox *s, struct guestconn *g, char **ret_message) {
        uint8_t seed[32];
        char seed_hex[65];
        int r = random_bytes(seed, sizeof seed);
        if (r < 0)
                return r;
        node_hex(seed, sizeof seed, seed_hex);
        json_t *req = json_pack("{s:s, s:s, s:O, s:I, s:s}", "sandbox_id", s->id, "hostname", s->id, "env", s->env,
                                "time_ns", (json_int_t) now_realtime_ns(), "seed", seed_hex);
        r = req ? guestconn_call(g, PROTO_IDENTITY, req, IDENTITY_MS, NULL, ret_message) : -ENOMEM;
        json_decref(req);
        explicit_bzero(seed, sizeof seed);
        explicit_bzero(seed_hex, sizeof seed_hex);
        return r;
}

/* Takes over the warm VM create claimed from the pool: resumes it and
 * installs the identity. On failure the warm VM is destroyed and the rootfs
 * replaced by a fresh clone, so that start_vm() can restore cold. */
static int start_pooled(struct sandbox *s) {
        struct pool_vm *pv = TAKE_PTR(s->pool_vm);
        _cleanup_free_ char *msg = NULL;
        uint64_t t0 = now_monotonic_ns();
        int r = pool_vm_resume(pv);
        uint64_t t_resumed = now_monotonic_ns();
        if (r >= 0)
                r = send_identity(s, pv->gc, &msg);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "warm VM %s failed: %s%s%s; restoring cold", pv->ctx,
                         strerror(-r), msg ? ": " : "", msg ?: "");
                pool_vm_free(pv); /* the run dir is s->run_dir now and is reused */
                _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
                if (!rootfs)
                        return -ENOMEM;
                /* the guest may have written to it: start from the template again */
                if (unlink(rootfs) < 0 && errno != ENOENT)
                        return negative_errno();
                int k = file_clone_or_copy(s->tpl->rootfs, rootfs, NULL);
                return k < 0 ? k : r;
        }
        uint64_t t_done = now_monotonic_ns();

        pthread_mutex_lock(&s->lock);
        s->vmm = TAKE_PTR(pv->vmm);
        s->gc = TAKE_PTR(pv->gc);
        s->pid = s->vmm->pid;
        s->restore_ms = (t_done - t0) / 1000000ULL;
        s->pool_hit = true;
        pthread_mutex_unlock(&s->lock);
        log_emit(LOG_LEVEL_INFO, s->ctx,
                 "sandbox made from warm VM %s of %s-%s: restore_ms=%llu (resume %llu ms, identity %llu ms) pid=%d",
                 pv->ctx, s->tpl->name, s->tpl->hash, (unsigned long long) s->restore_ms,
                 (unsigned long long) ((t_resumed - t0) / 1000000ULL),
                 (unsigned long long) ((t_done - t_resumed) / 1000000ULL), (int) s->pid);
        pool_vm_free(pv);
        return 0;
}

/* Restores the VM and installs its identity. On failure *ret_error says why;
 * everything started is torn down again. */
static int start_vm(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!rootfs || !mem)
                return -ENOMEM;
        struct template_info *t = s->tpl;
        struct vmm_config vc = template_vmm_config(t, rootfs, s->run_dir, s->ctx);
        /* a start boots the sandbox's own disk with fresh RAM of its own; a
         * create maps the template's RAM copy-on-write */
        if (s->cold_boot) {
                vc.mem_path = mem;
                vc.mem_shared = true;
        }

        uint64_t t0 = now_monotonic_ns();
        struct vmm *v = NULL;
        int r = s->cold_boot ? vmm_boot(&vc, &v) : vmm_restore(&vc, t->state, &v);
        if (r < 0) {
                *ret_error = strdup_printf("%s the VM failed: %s", s->cold_boot ? "booting" : "restoring",
                                           strerror(-r));
                return r;
        }
        uint64_t t_restored = now_monotonic_ns();

        int fd = -1;
        struct guestconn *g = NULL;
        const char *step = "connecting to the guest channel";
        r = vmm_guest_connect(v, GUEST_CONNECT_MS, &fd);
        if (r >= 0) {
                step = "guest agent handshake";
                r = guestconn_open(fd, s->ctx, s->cold_boot ? GUEST_BOOT_HELLO_MS : GUEST_HELLO_MS, &g);
        }
        uint64_t t_hello = now_monotonic_ns();
        if (r >= 0) {
                step = "installing the identity";
                _cleanup_free_ char *msg = NULL;
                r = send_identity(s, g, &msg);
                if (r < 0 && msg) {
                        *ret_error = strdup_printf("installing the identity failed: %s", msg);
                        guestconn_free(g);
                        vmm_destroy(v);
                        return r;
                }
        }
        if (r < 0) {
                char why[128] = "";
                if (vmm_exited(v))
                        describe_exit(v, why, sizeof why);
                *ret_error = strdup_printf("%s failed: %s%s%s", step, strerror(-r), why[0] ? "; " : "", why);
                guestconn_free(g);
                vmm_destroy(v);
                return r;
        }
        uint64_t t_done = now_monotonic_ns();

        pthread_mutex_lock(&s->lock);
        s->vmm = v;
        s->gc = g;
        s->pid = v->pid;
        s->restore_ms = (t_done - t0) / 1000000ULL;
        pthread_mutex_unlock(&s->lock);
        log_emit(LOG_LEVEL_INFO, s->ctx,
                 "sandbox restored from %s-%s: restore_ms=%llu (vmm %llu ms, guest hello %llu ms, identity %llu ms) pid=%d",
                 t->name, t->hash, (unsigned long long) s->restore_ms,
                 (unsigned long long) ((t_restored - t0) / 1000000ULL),
                 (unsigned long long) ((t_hello - t_restored) / 1000000ULL),
                 (unsigned long long) ((t_done - t_hello) / 1000000ULL), (int) v->pid);
        return 0;
}

/* Carries out a pause/resume request on the VMM this thread owns (QMP is
 * single-threaded, and only this thread may destroy the VMM). */
static void run_command(struct sandbox *s, struct vmm *v) {
        uint64_t n;
        if (read(s->cmd_fd, &n, sizeof n) < 0 && errno != EAGAIN)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot read the command eventfd: %m");
        pthread_mutex_lock(&s->lock);
        enum sandbox_cmd cmd = s->cmd;
        pthread_mutex_unlock(&s->lock);
        if (cmd == SANDBOX_CMD_NONE)
                return; /* the requester gave up waiting */
        bool pause = cmd == SANDBOX_CMD_PAUSE;
        int r = v ? qmp_execute(v->qmp, pause ? "stop" : "cont", NULL, QMP_RUNSTATE_MS, NULL) : -ECONNRESET;
        if (r < 0)
                log_emit(LOG_LEVEL_WARN, s->ctx, "QMP %s failed: %s (%s)", pause ? "stop" : "cont", strerror(-r),
                         v ? qmp_last_error(v->qmp) : "vmm gone");
        pthread_mutex_lock(&s->lock);
        if (r >= 0 && s->state == (pause ? SANDBOX_RUNNING : SANDBOX_PAUSED))
                s->state = pause ? SANDBOX_PAUSED : SANDBOX_RUNNING;
        if (s->cmd == cmd) {
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_result = r;
                s->cmd_done = true;
                pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
}

static void *sandbox_thread(void *arg) {
        struct sandbox *s = arg;
        char *error = NULL;

        /* a warm VM when create claimed one; cold when not or when it failed */
        int r = s->pool_vm ? start_pooled(s) : -ENOENT;
        if (r < 0)
                r = start_vm(s, &error);
        pthread_mutex_lock(&s->lock);
        s->start_done = true;
        s->start_result = r;
        s->start_error = error;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
                return NULL;

        /* Watch until delete asks us to stop. */
        for (;;) {
                pthread_mutex_lock(&s->lock);
                struct vmm *v = s->vmm;
                pthread_mutex_unlock(&s->lock);

                struct pollfd p[3] = { { .fd = s->stop_fd, .events = POLLIN },
                                       { .fd = s->cmd_fd, .events = POLLIN },
                                       { .fd = v ? v->pidfd : -1, .events = POLLIN } };
                int k = poll(p, v ? 3 : 2, MONITOR_INTERVAL_MS);
                if (k < 0 && errno != EINTR)
                        break;
                if (p[0].revents & POLLIN)
                        break;
                if (p[1].revents & POLLIN) {
                        run_command(s, v);
                        continue;
                }
                if (v && (p[2].revents & POLLIN)) {
                        char why[128];
                        describe_exit(v, why, sizeof why);
                        set_failed(s, "%s", why);
                        pthread_mutex_lock(&s->lock);
                        s->vmm = NULL;
                        pthread_mutex_unlock(&s->lock);
                        vmm_destroy(v); /* reaps it */
                        continue;
                }
                if (!guestconn_alive(s->gc)) {
                        /* QEMU closes the channel as it dies: give its exit a
                         * moment to show, so the error names the real cause */
                        if (v) {
                                struct pollfd q = { .fd = v->pidfd, .events = POLLIN };
                                if (poll(&q, 1, 300) > 0)
                                        continue;
                        }
                        set_failed(s, "guest channel closed");
                }
        }

        pthread_mutex_lock(&s->lock);
        struct vmm *v = s->vmm;
        s->vmm = NULL;
        if (s->cmd != SANDBOX_CMD_NONE) { /* nobody else will carry it out */
                s->cmd = SANDBOX_CMD_NONE;
                s->cmd_result = -ECANCELED;
                s->cmd_done = true;
                pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->lock);
        vmm_destroy(v);
        return NULL;
}

/* Asks the sandbox thread to destroy the VMM and waits for it. */
static void stop_thread(struct sandbox *s) {
        if (!s->thread_started)
                return;
        uint64_t one = 1;
        if (write(s->stop_fd, &one, sizeof one) < 0)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot signal the sandbox thread: %m");
        pthread_join(s->thread, NULL);
        s->thread_started = false;
}

/* ---- public ---- */

int sandbox_manager_init(const struct node_config *cfg, const char *sandboxes_dir) {
        scfg = cfg;
        sdir = strdup(sandboxes_dir);
        if (!sdir)
                return -ENOMEM;
        reg_cap = cfg->max_sandboxes;
        reg = calloc(reg_cap, sizeof *reg);
        if (!reg)
                return -ENOMEM;

        int r = node_vm_run_dirs_clean(cfg->data_dir);
        if (r < 0)
                log_warn_errno(r, "Failed to remove %s/run/vm: %m", cfg->data_dir);
        r = mkdir_p(sdir, 0700);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", sdir);
        DIR *d = opendir(sdir);
        if (!d)
                return log_error_errno(negative_errno(), "Failed to open %s: %m", sdir);
        for (struct dirent *de; (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                char path[4400];
                snprintf(path, sizeof path, "%s/%s", sdir, de->d_name);
                log_info("sandbox=%s removing leftover of an earlier run: %s", de->d_name, path);
                r = rm_rf(path);
                if (r < 0)
                        log_warn_errno(r, "Failed to remove %s: %m", path);
        }
        closedir(d);
        return 0;
}

/* Undoes a create that failed before or after the thread started. */
static void create_abort(struct sandbox *s) {
        pthread_mutex_lock(&reg_lock);
        reg_remove(s);
        pthread_mutex_unlock(&reg_lock);
        stop_thread(s);
        pool_vm_free(TAKE_PTR(s->pool_vm)); /* claimed, but the thread never took it over */
        if (s->run_dir)
                rm_rf(s->run_dir);
        if (s->dir) {
                int r = rm_rf(s->dir);
                if (r < 0)
                        log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        }
        sandbox_unref(s);
}

/* Starts the sandbox's own thread (it restores or boots the VM and then
 * watches it) and waits until the VM is up or failed. On failure *ret_error
 * says why. */
static int run_sandbox_thread(struct sandbox *s, char **ret_error) {
        int r = -pthread_create(&s->thread, NULL, sandbox_thread, s);
        if (r < 0) {
                *ret_error = strdup_printf("cannot start the sandbox thread: %s", strerror(-r));
                return r;
        }
        s->thread_started = true;
        pthread_mutex_lock(&s->lock);
        while (!s->start_done)
                pthread_cond_wait(&s->cond, &s->lock);
        r = s->start_result;
        if (r < 0)
                *ret_error = TAKE_PTR(s->start_error);
        pthread_mutex_unlock(&s->lock);
        return r;
}

int sandbox_create(const char *id, const char *template_name, json_t *env, struct sandbox **ret, char **ret_error) {
        _cleanup_free_ char *rootfs = NULL;
        char *err = NULL;
        int r;

        struct sandbox *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        snprintf(s->id, sizeof s->id, "%s", id);
        snprintf(s->ctx, sizeof s->ctx, "sandbox=%s", id);
        s->refs = 1; /* the registry's */
        s->state = SANDBOX_CREATING;
        s->stop_fd = eventfd(0, EFD_CLOEXEC);
        s->cmd_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        pthread_mutex_init(&s->lock, NULL);
        node_cond_init(&s->cond); /* pause/resume wait on it with a deadline */
        s->template_name = strdup(template_name);
        s->env = env ? json_incref(env) : json_object();
        if (s->stop_fd < 0 || s->cmd_fd < 0 || !s->template_name || !s->env) {
                r = s->stop_fd < 0 || s->cmd_fd < 0 ? negative_errno() : -ENOMEM;
                sandbox_unref(s);
                return r;
        }

        pthread_mutex_lock(&reg_lock);
        if (reg_find(id))
                r = -EEXIST;
        else if (reg_n >= reg_cap)
                r = -EUSERS;
        else {
                reg[reg_n++] = s;
                r = 0;
        }
        pthread_mutex_unlock(&reg_lock);
        if (r < 0) {
                if (ret_error)
                        *ret_error = r == -EEXIST ? strdup_printf("sandbox %s exists", id)
                                                  : strdup_printf("node at capacity (%u sandboxes)", scfg->max_sandboxes);
                sandbox_unref(s);
                return r;
        }

        uint64_t t0 = now_monotonic_ns();
        r = template_get(template_name, TEMPLATE_WAIT_MS, &s->tpl, &err);
        if (r < 0) {
                if (r == -ENOENT)
                        err = strdup_printf("no template %s", template_name);
                else if (r == -EAGAIN)
                        err = strdup_printf("template %s is still building", template_name);
                else if (r == -EIO) {
                        char *m = strdup_printf("template %s failed to build: %s", template_name, err ? err : "?");
                        free(err);
                        err = m;
                } else if (!err)
                        err = strdup_printf("template %s: %s", template_name, strerror(-r));
                goto fail;
        }
        uint64_t t_tpl = now_monotonic_ns();
        if (t_tpl - t0 > 1000000000ULL)
                log_emit(LOG_LEVEL_INFO, s->ctx, "waited %llu ms for template %s",
                         (unsigned long long) ((t_tpl - t0) / 1000000ULL), template_name);

        s->dir = strdup_printf("%s/%s", sdir, id);
        rootfs = strdup_printf("%s/%s/rootfs.img", sdir, id);
        if (!s->dir || !rootfs) {
                r = -ENOMEM;
                goto fail;
        }
        rm_rf(s->dir); /* nothing of ours can be there: the id was free */
        /* a warm VM brings its directory (moved to s->dir) and its run dir */
        if (pool_claim(s->tpl, s->dir, s->ctx, &s->pool_vm) > 0) {
                s->run_dir = TAKE_PTR(s->pool_vm->run_dir);
                goto start_thread;
        }
        if (mkdir(s->dir, 0700) < 0) {
                r = negative_errno();
                err = strdup_printf("cannot create %s: %s", s->dir, strerror(-r));
                goto fail;
        }
        r = node_vm_run_dir(scfg->data_dir, &s->run_dir);
        if (r < 0) {
                err = strdup_printf("cannot create a run directory under %s/run: %s", scfg->data_dir, strerror(-r));
                goto fail;
        }
        bool cloned = false;
        r = file_clone_or_copy(s->tpl->rootfs, rootfs, &cloned);
        pthread_mutex_lock(&clone_lock);
        bool warn = r >= 0 && !cloned && !warned_copy;
        if (warn)
                warned_copy = true;
        pthread_mutex_unlock(&clone_lock);
        if (r < 0) {
                err = strdup_printf("cannot copy the template disk: %s", strerror(-r));
                goto fail;
        }
        if (warn)
                log_emit(LOG_LEVEL_WARN, s->ctx,
                         "rootfs was byte-copied, not reflinked: %s and %s are not on one reflink-capable "
                         "file system (btrfs/xfs); creates will be slow and use disk (logged once)",
                         s->tpl->rootfs, sdir);

start_thread:
        r = run_sandbox_thread(s, &err);
        if (r < 0)
                goto fail;
        /* visible from now on (lock order: reg_lock, then s->lock) */
        pthread_mutex_lock(&reg_lock);
        pthread_mutex_lock(&s->lock);
        if (s->state == SANDBOX_CREATING)
                s->state = SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&reg_lock);

        *ret = sandbox_ref(s);
        return 0;

fail:
        log_emit(LOG_LEVEL_WARN, s->ctx, "create failed: %s", err ? err : strerror(-r));
        if (ret_error)
                *ret_error = err;
        else
                free(err);
        create_abort(s);
        return r;
}

int sandbox_get(const char *id, struct sandbox **ret) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = reg_find(id);
        if (s && s->state == SANDBOX_CREATING)
                s = NULL;
        if (s)
                sandbox_ref(s);
        pthread_mutex_unlock(&reg_lock);
        if (!s)
                return -ENOENT;
        *ret = s;
        return 0;
}

/* Deletes s, which the caller already took out of the registry (its
 * registry reference is now the caller's). */
static void delete_removed(struct sandbox *s) {
        uint64_t t0 = now_monotonic_ns();
        pthread_mutex_lock(&s->lock);
        s->deleted = true;
        pthread_mutex_unlock(&s->lock);
        session_sandbox_deleted(s);
        stop_thread(s);
        rm_rf(s->run_dir);
        int r = rm_rf(s->dir);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox deleted in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        sandbox_unref(s);
}

int sandbox_delete(const char *id) {
        pthread_mutex_lock(&reg_lock);
        struct sandbox *s = reg_find(id);
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
                        reg_remove(s);
        }
        pthread_mutex_unlock(&reg_lock);
        if (r < 0)
                return r;
        delete_removed(s);
        return 0;
}

void sandbox_delete_all(void) {
        /* creates still restoring finish in moments; one stuck waiting for a
         * template another process builds is not waited for (its QEMU, if
         * any, dies with us through PDEATHSIG) */
        uint64_t deadline = now_monotonic_ns() + 10 * 1000000000ULL;
        for (;;) {
                pthread_mutex_lock(&reg_lock);
                struct sandbox *s = NULL;
                for (size_t i = 0; i < reg_n && !s; i++)
                        if (reg[i]->state != SANDBOX_CREATING)
                                s = reg[i];
                if (s)
                        reg_remove(s);
                bool creating = !s && reg_n > 0;
                pthread_mutex_unlock(&reg_lock);
                if (s) {
                        delete_removed(s);
                        continue;
                }
                if (!creating || now_monotonic_ns() > deadline)
                        return;
                /* a create is restoring right now: it finishes in moments */
                struct timespec ts = { 0, 20 * 1000000L };
                nanosleep(&ts, NULL);
        }
}

int sandbox_guest(struct sandbox *s, struct guestconn **ret) {
        pthread_mutex_lock(&s->lock);
        int r = s->state == SANDBOX_RUNNING && !s->deleted && s->gc ? 0 : -ECONNRESET;
        if (r >= 0)
                *ret = s->gc;
        pthread_mutex_unlock(&s->lock);
        return r;
}

char *sandbox_error(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        char *e = s->deleted ? strdup("sandbox deleted") : s->error ? strdup(s->error) : NULL;
        pthread_mutex_unlock(&s->lock);
        return e;
}

static const char *state_name(enum sandbox_state st) {
        switch (st) {
        case SANDBOX_RUNNING:
                return "running";
        case SANDBOX_FAILED:
                return "failed";
        case SANDBOX_PAUSED:
                return "paused";
        case SANDBOX_STOPPED:
                return "stopped";
        case SANDBOX_CREATING:
        default:
                return "creating";
        }
}

const char *sandbox_state_name(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        const char *n = state_name(s->state);
        pthread_mutex_unlock(&s->lock);
        return n;
}

json_t *sandbox_json(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I}", "id", s->id, "template", s->template_name, "state",
                              state_name(s->state),
                              "pid", (json_int_t) s->pid, "restore_ms", (json_int_t) s->restore_ms);
        if (o && s->state == SANDBOX_FAILED && s->error)
                json_object_set_new(o, "error", json_string(s->error));
        if (o)
                json_object_set_new(o, "pool", json_string(s->pool_hit ? "hit" : "miss"));
        pthread_mutex_unlock(&s->lock);
        return o;
}

json_t *sandbox_list_json(void) {
        json_t *arr = json_array();
        if (!arr)
                return NULL;
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < reg_n; i++)
                if (reg[i]->state != SANDBOX_CREATING)
                        json_array_append_new(arr, sandbox_json(reg[i]));
        pthread_mutex_unlock(&reg_lock);
        return arr;
}

/* ---- lifecycle verbs ---- */

/* Claims s for one verb: it must still be registered, no other verb (or
 * create) may run, and it must be in state `from` (or `from2`). */
static int life_begin(struct sandbox *s, enum sandbox_state from, enum sandbox_state from2, const char **ret_state) {
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

static void life_end(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        s->life_busy = false;
        pthread_mutex_unlock(&s->lock);
}

/* Joins the sandbox thread (it destroys the VMM) and re-arms stop_fd for
 * the next thread: stop_thread() leaves the eventfd readable. */
static void life_stop_thread(struct sandbox *s) {
        stop_thread(s);
        uint64_t n;
        if (read(s->stop_fd, &n, sizeof n) < 0 && errno != EAGAIN)
                log_emit(LOG_LEVEL_WARN, s->ctx, "cannot drain the stop eventfd: %m");
}

static int run_state_command(struct sandbox *s, bool pause, const char **ret_state, char **ret_error) {
        int r = life_begin(s, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED, pause ? SANDBOX_RUNNING : SANDBOX_PAUSED,
                           ret_state);
        if (r < 0)
                return r;
        pthread_mutex_lock(&s->lock);
        s->cmd = pause ? SANDBOX_CMD_PAUSE : SANDBOX_CMD_RESUME;
        s->cmd_done = false;
        pthread_mutex_unlock(&s->lock);
        uint64_t one = 1;
        if (write(s->cmd_fd, &one, sizeof one) < 0) {
                r = negative_errno();
                pthread_mutex_lock(&s->lock);
                s->cmd = SANDBOX_CMD_NONE;
                pthread_mutex_unlock(&s->lock);
                life_end(s);
                if (ret_error)
                        *ret_error = strdup_printf("cannot reach the sandbox thread: %s", strerror(-r));
                return r;
        }
        struct timespec deadline;
        node_deadline_after_ms(&deadline, LIFECYCLE_CMD_WAIT_MS);
        pthread_mutex_lock(&s->lock);
        r = 0;
        while (!s->cmd_done && r == 0)
                r = -pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
        if (s->cmd_done)
                r = s->cmd_result;
        else
                s->cmd = SANDBOX_CMD_NONE; /* the thread drops it if it has not started it */
        s->life_busy = false;
        pthread_mutex_unlock(&s->lock);
        if (r < 0) {
                if (ret_error)
                        *ret_error = strdup_printf("QMP %s failed: %s", pause ? "stop" : "cont", strerror(-r));
                return r == -ETIMEDOUT ? r : -EIO;
        }
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox %s", pause ? "paused" : "resumed");
        return 0;
}

int sandbox_pause(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, true, ret_state, ret_error);
}

int sandbox_resume(struct sandbox *s, const char **ret_state, char **ret_error) {
        return run_state_command(s, false, ret_state, ret_error);
}

/* The stop itself, for a sandbox claimed by life_begin(); leaves it claimed. */
static void stop_claimed(struct sandbox *s) {
        uint64_t t0 = now_monotonic_ns();
        /* Flush the guest's page cache to the disk image first, or writes
         * not yet synced die with QEMU. A paused guest cannot answer; a
         * guest that does not is stopped anyway (it is ours to stop). */
        struct guestconn *g = NULL;
        if (sandbox_guest(s, &g) >= 0) { /* only a running guest has one */
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
        log_emit(LOG_LEVEL_INFO, s->ctx, "sandbox stopped in %llu ms",
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
}

int sandbox_stop(struct sandbox *s, const char **ret_state, char **ret_error) {
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_PAUSED, ret_state);
        if (r < 0)
                return r;
        stop_claimed(s);
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

/* The cold boot of a stopped sandbox claimed by life_begin(); leaves it
 * claimed. On failure it stays stopped and *ret_error says why. */
static int start_claimed(struct sandbox *s, char **ret_error) {
        int r;
        char *err = NULL;
        _cleanup_free_ char *mem = strdup_printf("%s/mem", s->dir);
        if (!mem) {
                r = -ENOMEM;
                goto fail;
        }
        {
                /* the RAM file of a boot with share=on, as for a template */
                _cleanup_close_ int fd = open(mem, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd < 0 || ftruncate(fd, (off_t) s->tpl->memory_mib << 20) < 0) {
                        r = negative_errno();
                        err = strdup_printf("cannot create the RAM file %s: %s", mem, strerror(-r));
                        goto fail;
                }
        }
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
        pthread_mutex_unlock(&s->lock);
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

/* ---- disk snapshots ---- */

/* SANDBOXES/ID/snapshots/SNAP.img */
static char *snapshot_path(struct sandbox *s, const char *snapshot_id) {
        return strdup_printf("%s/snapshots/%s.img", s->dir, snapshot_id);
}

/* Counts the snapshot images of s (temporary files included: they are
 * snapshots being made). */
static int snapshot_count(struct sandbox *s, size_t *ret) {
        _cleanup_free_ char *d = strdup_printf("%s/snapshots", s->dir);
        if (!d)
                return -ENOMEM;
        DIR *dir = opendir(d);
        if (!dir)
                return negative_errno();
        size_t n = 0;
        for (struct dirent *de; (de = readdir(dir));)
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        n++;
        closedir(dir);
        *ret = n;
        return 0;
}

/* Clones src to dst through a temporary name beside dst, so dst is either
 * absent or complete. */
static int clone_replace(struct sandbox *s, const char *src, const char *dst) {
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
        size_t n = 0;
        struct stat st;
        if (!dir || !rootfs || !dst || !empty) {
                r = -ENOMEM;
                goto out;
        }
        if ((r = mkdir_p(dir, 0700)) < 0 || (r = snapshot_count(s, &n)) < 0) {
                *ret_error = strdup_printf("cannot open %s: %s", dir, strerror(-r));
                goto out;
        }
        if (n >= SANDBOX_SNAPSHOTS_MAX) {
                r = -E2BIG;
                *ret_error = strdup_printf("sandbox %s has %d snapshots already, the most it may have", s->id,
                                           SANDBOX_SNAPSHOTS_MAX);
                goto out;
        }
        if (access(dst, F_OK) == 0) {
                r = -EEXIST;
                *ret_error = strdup_printf("snapshot %s exists", snapshot_id);
                goto out;
        }

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

int sandbox_rollback(struct sandbox *s, const char *snapshot_id, const char **ret_state, char **ret_error) {
        int r = life_begin(s, SANDBOX_RUNNING, SANDBOX_STOPPED, ret_state);
        if (r < 0)
                return r;
        uint64_t t0 = now_monotonic_ns();
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        _cleanup_free_ char *src = snapshot_path(s, snapshot_id);
        bool running;
        if (!rootfs || !src) {
                r = -ENOMEM;
                goto out;
        }
        if (access(src, F_OK) < 0) {
                r = -ENXIO;
                *ret_error = strdup_printf("no snapshot %s of sandbox %s", snapshot_id, s->id);
                goto out;
        }
        pthread_mutex_lock(&s->lock);
        running = s->state == SANDBOX_RUNNING;
        pthread_mutex_unlock(&s->lock);
        if (running)
                stop_claimed(s);
        /* the snapshot stays as it is: the sandbox gets a clone of it */
        r = clone_replace(s, src, rootfs);
        if (r < 0) {
                *ret_error = strdup_printf("cannot replace the disk image: %s", strerror(-r));
                goto out;
        }
        r = start_claimed(s, ret_error);
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
        if (!p)
                return -ENOMEM;
        return unlink(p) < 0 ? negative_errno() : 0;
}
