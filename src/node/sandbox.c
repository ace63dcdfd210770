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
#include "proto.h"
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
#define IDENTITY_MS 10000
/* How often the sandbox thread checks the guest channel. */
#define MONITOR_INTERVAL_MS 250

static const struct node_config *scfg;
static char *sdir;
static enum vmm_accel saccel;

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
        if (s->stop_fd >= 0)
                close(s->stop_fd);
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
        bool first = s->state != SANDBOX_FAILED && !s->deleted;
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

/* Restores the VM and installs its identity. On failure *ret_error says why;
 * everything started is torn down again. */
static int start_vm(struct sandbox *s, char **ret_error) {
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", s->dir);
        if (!rootfs)
                return -ENOMEM;
        struct template_info *t = s->tpl;
        struct vmm_config vc = {
                .qemu_binary = scfg->qemu_binary,
                .accel = saccel,
                .memory_mib = t->memory_mib,
                .vcpus = t->vcpus,
                .kernel = t->kernel,
                .initrd = t->initrd,
                .cmdline = t->cmdline,
                .rootfs = rootfs,
                .mem_path = t->mem,
                .mem_shared = false,
                .run_dir = s->run_dir,
                .log_ctx = s->ctx,
        };

        uint64_t t0 = now_monotonic_ns();
        struct vmm *v = NULL;
        int r = vmm_restore(&vc, t->state, &v);
        if (r < 0) {
                *ret_error = strdup_printf("restoring the VM failed: %s", strerror(-r));
                return r;
        }
        uint64_t t_restored = now_monotonic_ns();

        int fd = -1;
        struct guestconn *g = NULL;
        const char *step = "connecting to the guest channel";
        r = vmm_guest_connect(v, GUEST_CONNECT_MS, &fd);
        if (r >= 0) {
                step = "guest agent handshake";
                r = guestconn_open(fd, s->ctx, GUEST_HELLO_MS, &g);
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

static void *sandbox_thread(void *arg) {
        struct sandbox *s = arg;
        char *error = NULL;

        int r = start_vm(s, &error);
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

                struct pollfd p[2] = { { .fd = s->stop_fd, .events = POLLIN }, { .fd = v ? v->pidfd : -1, .events = POLLIN } };
                int k = poll(p, v ? 2 : 1, MONITOR_INTERVAL_MS);
                if (k < 0 && errno != EINTR)
                        break;
                if (p[0].revents & POLLIN)
                        break;
                if (v && (p[1].revents & POLLIN)) {
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

int sandbox_manager_init(const struct node_config *cfg, const char *sandboxes_dir, enum vmm_accel accel) {
        scfg = cfg;
        saccel = accel;
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
        if (s->run_dir)
                rm_rf(s->run_dir);
        if (s->dir) {
                int r = rm_rf(s->dir);
                if (r < 0)
                        log_errno(LOG_LEVEL_WARN, r, s->ctx, "Failed to remove %s: %m", s->dir);
        }
        sandbox_unref(s);
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
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->template_name = strdup(template_name);
        s->env = env ? json_incref(env) : json_object();
        if (s->stop_fd < 0 || !s->template_name || !s->env) {
                r = s->stop_fd < 0 ? negative_errno() : -ENOMEM;
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

        r = -pthread_create(&s->thread, NULL, sandbox_thread, s);
        if (r < 0) {
                err = strdup_printf("cannot start the sandbox thread: %s", strerror(-r));
                goto fail;
        }
        s->thread_started = true;
        pthread_mutex_lock(&s->lock);
        while (!s->start_done)
                pthread_cond_wait(&s->cond, &s->lock);
        r = s->start_result;
        if (r < 0) {
                err = s->start_error;
                s->start_error = NULL;
        }
        pthread_mutex_unlock(&s->lock);
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
        else
                reg_remove(s);
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

json_t *sandbox_json(struct sandbox *s) {
        pthread_mutex_lock(&s->lock);
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I}", "id", s->id, "template", s->template_name, "state",
                              s->state == SANDBOX_RUNNING ? "running" : s->state == SANDBOX_FAILED ? "failed" : "creating",
                              "pid", (json_int_t) s->pid, "restore_ms", (json_int_t) s->restore_ms);
        if (o && s->state == SANDBOX_FAILED && s->error)
                json_object_set_new(o, "error", json_string(s->error));
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
