/* SPDX-License-Identifier: Apache-2.0 */
#include "template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodemetrics.h"
#include "nodeutil.h"
#include "proto.h"
#include "template-internal.h"
#include "template-store.h"
#include "util.h"

/* How long each build step may run. The python recipe downloads packages. */
#define SCRIPT_TIMEOUT_S (30 * 60)
/* TCG boots take seconds, more on a loaded host. */
#define BOOT_TIMEOUT_MS 120000
#define BUILD_LOG_TAIL 1500
/* Paths: the config bounds directories to 4095 bytes and names to 64, so
 * every path built here fits. */
#define PATH_BUF TEMPLATE_PATH_BUF
#define pathf template_pathf

enum tstate {
        T_UNKNOWN,  /* never looked at */
        T_BUILDING, /* a thread of this process builds it */
        T_READY,
        T_FAILED,
};

static const char *const tstate_names[] = {
        [T_UNKNOWN] = "available",
        [T_BUILDING] = "building",
        [T_READY] = "ready",
        [T_FAILED] = "failed",
};

struct tentry {
        char name[65];
        enum tstate state;
        char *error;                /* T_FAILED */
        struct template_info *info; /* T_READY */
        char hash[HASH_HEX];        /* "" until computed */
        unsigned memory_mib;
        struct template_track track; /* its running script or VM (tlock) */
        /* progress of the build this process runs, for health (tlock) */
        const char *step;           /* one of build_steps[], NULL before the first */
        unsigned step_number;       /* 1-based index into build_steps[] */
        uint64_t build_start_ns;
        char log_path[PATH_BUF];    /* the running build's log, or the failed build's kept log */
        struct tentry *next;
};

/* The steps of a build, in order, as health reports them. */
static const char *const build_steps[] = { "kernel", "initramfs", "rootfs", "boot" };

/* Per-template memory. Everything else gets the default. */
static const struct {
        const char *name;
        unsigned memory_mib;
} memory_table[] = {
        {"minimal", 256},
        {"python", 512},
        {"code-interpreter", 1024}, /* numpy, pandas, matplotlib and a warm Jupyter kernel */
        {"docker", 1024},           /* dockerd, containerd and room for containers */
};
#define DEFAULT_MEMORY_MIB 512

static pthread_mutex_t tlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tcond; /* CLOCK_MONOTONIC; broadcast on every state change */
static struct tentry *entries;
static const struct node_config *tcfg;
static char *tdir;
static enum vmm_accel taccel;
static char *qemu_version;
static bool shutting_down;

struct vmm_config template_vmm_config(const struct template_info *t, const char *rootfs, const char *run_dir,
                                      const char *log_ctx) {
        return (struct vmm_config){
                .qemu_binary = tcfg->qemu_binary,
                .accel = taccel,
                .memory_mib = t->memory_mib,
                .vcpus = t->vcpus,
                .kernel = t->kernel,
                .initrd = t->initrd,
                .cmdline = t->cmdline,
                .rootfs = rootfs,
                .mem_path = t->mem,
                .mem_shared = false,
                .run_dir = run_dir,
                .log_ctx = log_ctx,
        };
}

void template_info_free(struct template_info *t) {
        if (!t)
                return;
        free(t->name);
        free(t->hash);
        free(t->dir);
        free(t->kernel);
        free(t->initrd);
        free(t->rootfs);
        free(t->mem);
        free(t->state);
        free(t->cmdline);
        json_decref(t->env);
        free(t->workdir);
        free(t->user);
        free(t);
}

static unsigned memory_for(const char *name) {
        for (size_t i = 0; i < ARRAY_SIZE(memory_table); i++)
                if (strcmp(memory_table[i].name, name) == 0)
                        return memory_table[i].memory_mib;
        return DEFAULT_MEMORY_MIB;
}

struct template_info *template_info_copy(const struct template_info *t) {
        struct template_info *n = calloc(1, sizeof *n);
        if (!n)
                return NULL;
        n->name = strdup(t->name);
        n->hash = strdup(t->hash);
        n->dir = strdup(t->dir);
        n->kernel = strdup(t->kernel);
        n->initrd = strdup(t->initrd);
        n->rootfs = strdup(t->rootfs);
        n->mem = strdup(t->mem);
        n->state = strdup(t->state);
        n->cmdline = strdup(t->cmdline);
        n->memory_mib = t->memory_mib;
        n->vcpus = t->vcpus;
        n->env = t->env ? json_deep_copy(t->env) : NULL;
        n->workdir = t->workdir ? strdup(t->workdir) : NULL;
        n->user = t->user ? strdup(t->user) : NULL;
        if ((t->env && !n->env) || (t->workdir && !n->workdir) || (t->user && !n->user)) {
                template_info_free(n);
                return NULL;
        }
        if (!n->name || !n->hash || !n->dir || !n->kernel || !n->initrd || !n->rootfs || !n->mem || !n->state ||
            !n->cmdline) {
                template_info_free(n);
                return NULL;
        }
        return n;
}

/* Describes the finished template directory dir (paths only: the caller
 * checked that it exists). */
static struct template_info *info_for(const char *name, const char *hash, const char *dir, const char *kdir,
                                      unsigned memory_mib) {
        struct template_info *t = calloc(1, sizeof *t);
        if (!t)
                return NULL;
        t->name = strdup(name);
        t->hash = strdup(hash);
        t->dir = strdup(dir);
        t->kernel = strdup_printf("%s/vmlinux", kdir);
        t->initrd = strdup_printf("%s/initramfs.cpio", dir);
        t->rootfs = strdup_printf("%s/rootfs.img", dir);
        t->mem = strdup_printf("%s/mem", dir);
        t->state = strdup_printf("%s/state", dir);
        t->cmdline = strdup(TEMPLATE_CMDLINE);
        t->memory_mib = memory_mib;
        t->vcpus = TEMPLATE_VCPUS;
        if (!t->name || !t->hash || !t->dir || !t->kernel || !t->initrd || !t->rootfs || !t->mem || !t->state ||
            !t->cmdline) {
                template_info_free(t);
                return NULL;
        }
        return t;
}

/* Records that the build of e is at step (one of build_steps[]). */
static void build_progress(struct tentry *e, const char *step) {
        pthread_mutex_lock(&tlock);
        for (size_t i = 0; i < ARRAY_SIZE(build_steps); i++)
                if (strcmp(build_steps[i], step) == 0) {
                        e->step = build_steps[i];
                        e->step_number = (unsigned) i + 1;
                }
        pthread_mutex_unlock(&tlock);
}

/* The last non-empty line of a build log (what a failed script said last,
 * e.g. apt's "E: Unable to locate package ..."), at most n - 1 bytes; "" when
 * there is none. */
static void log_last_line(const char *log_path, char *buf, size_t n) {
        buf[0] = 0;
        _cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return;
        char tail[BUILD_LOG_TAIL + 1];
        off_t off = st.st_size > BUILD_LOG_TAIL ? st.st_size - BUILD_LOG_TAIL : 0;
        ssize_t k = pread(fd, tail, BUILD_LOG_TAIL, off);
        if (k <= 0)
                return;
        tail[k] = 0;
        while (k > 0 && (tail[k - 1] == '\n' || tail[k - 1] == '\r' || tail[k - 1] == ' '))
                tail[--k] = 0;
        const char *start = strrchr(tail, '\n');
        start = start ? start + 1 : tail;
        size_t len = strlen(start);
        if (len >= n)
                len = n - 1;
        memcpy(buf, start, len);
        buf[len] = 0;
        for (char *p = buf; *p; p++) /* one line for the API and the terminal */
                if ((unsigned char) *p < 0x20)
                        *p = ' ';
}

/* Logs the last lines of a build log, for a failed step. */
static void log_tail(const char *ctx, const char *log_path) {
        _cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return;
        off_t off = st.st_size > BUILD_LOG_TAIL ? st.st_size - BUILD_LOG_TAIL : 0;
        char buf[BUILD_LOG_TAIL + 1];
        ssize_t k = pread(fd, buf, BUILD_LOG_TAIL, off);
        if (k <= 0)
                return;
        buf[k] = 0;
        log_emit(LOG_LEVEL_ERROR, ctx, "build log tail (%s):\n%s", log_path, buf);
}

int template_run_step(struct template_track *t, const char *ctx, char *const argv[], const char *log_path, char **ret_error) {
        _cleanup_close_ int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "Failed to open %s: %m", log_path);
        dprintf(log_fd, "+ ");
        for (size_t i = 0; argv[i]; i++)
                dprintf(log_fd, "%s%s", i ? " " : "", argv[i]);
        dprintf(log_fd, "\n");

        uint64_t t0 = now_monotonic_ns();
        pid_t pid;
        pthread_mutex_lock(&tlock);
        int r = shutting_down ? -ECANCELED : node_spawn(argv, log_fd, &pid);
        if (r >= 0)
                t->pgid = pid;
        pthread_mutex_unlock(&tlock);
        if (r < 0) {
                *ret_error = strdup_printf("cannot run %s: %s", argv[0], strerror(-r));
                return r;
        }
        int status = 0;
        r = node_wait_child(pid, SCRIPT_TIMEOUT_S, &status);
        pthread_mutex_lock(&tlock);
        t->pgid = 0;
        pthread_mutex_unlock(&tlock);
        size_t a = 0; /* past "/usr/bin/env NAME=VALUE..." */
        if (strcmp(argv[0], "/usr/bin/env") == 0)
                for (a = 1; argv[a] && strchr(argv[a], '='); a++)
                        ;
        if (!argv[a])
                a = 0;
        const char *prog = strcmp(argv[a], "/bin/bash") == 0 && argv[a + 1] ? argv[a + 1] : argv[a];
        const char *base = strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog;
        if (r == -ETIMEDOUT) {
                log_tail(ctx, log_path);
                *ret_error = strdup_printf("%s timed out after %d s", base, SCRIPT_TIMEOUT_S);
                return r;
        }
        if (r < 0) {
                *ret_error = strdup_printf("waiting for %s failed: %s", base, strerror(-r));
                return r;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                log_tail(ctx, log_path);
                int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                char last[512];
                log_last_line(log_path, last, sizeof last);
                *ret_error = strdup_printf("%s failed with status %d%s%s", base, code, last[0] ? ": " : "", last);
                return -EIO;
        }
        log_emit(LOG_LEVEL_INFO, ctx, "%s done in %llu ms", base,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;
}

/* One build step: run_step(), or under airlock-nodemgr its template.step
 * (the scripts need root: mmdebstrap, device nodes, file ownership in the
 * image). dir/out is where the step's output lands. */
int template_build_step(struct template_track *t, const char *ctx, char *const argv[], const char *step,
                        const char *name, const char *dir, const char *out, const char *kernel_dir,
                        char *const *params, const char *log_path, char **ret_error) {
        if (!vmm_via_nodemgr() && kernel_dir && strcmp(step, "rootfs") == 0) {
                /* as airlock-nodemgr runs a recipe: the kernel's directory in
                 * AIRLOCK_KERNEL_DIR */
                _cleanup_free_ char *env = strdup_printf("AIRLOCK_KERNEL_DIR=%s", kernel_dir);
                char *with_env[8] = {(char *) "/usr/bin/env", env};
                size_t n = 0;
                while (argv[n] && n + 3 < ARRAY_SIZE(with_env)) {
                        with_env[n + 2] = argv[n];
                        n++;
                }
                if (!env || argv[n])
                        return -ENOMEM;
                return template_run_step(t, ctx, with_env, log_path, ret_error);
        }
        if (!vmm_via_nodemgr())
                return template_run_step(t, ctx, argv, log_path, ret_error);
        _cleanup_close_ int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "Failed to open %s: %m", log_path);
        dprintf(log_fd, "+ airlock-nodemgr template.step %s %s -> %s/%s\n", step, name, dir, out);
        uint64_t t0 = now_monotonic_ns();
        int conn = -1;
        int r = vmm_template_step_send(step, name, dir, out, kernel_dir ? kernel_dir : "", params, log_fd, &conn);
        if (r >= 0) {
                /* cancellable while it runs: template_track_kill() */
                pthread_mutex_lock(&tlock);
                if (shutting_down)
                        (void) shutdown(conn, SHUT_RDWR);
                t->mgr_conn = conn;
                t->mgr_pending = true;
                pthread_mutex_unlock(&tlock);
                r = vmm_template_step_wait(conn, ctx);
                pthread_mutex_lock(&tlock);
                t->mgr_pending = false;
                pthread_mutex_unlock(&tlock);
                safe_close(conn);
        } else
                log_errno(LOG_LEVEL_ERROR, r, ctx, "cannot ask airlock-nodemgr for template.step: %m");
        if (r < 0) {
                log_tail(ctx, log_path);
                char last[512];
                log_last_line(log_path, last, sizeof last);
                *ret_error = strdup_printf("%s step failed: %s", step, last[0] ? last : strerror(-r));
                return r;
        }
        log_emit(LOG_LEVEL_INFO, ctx, "%s done in %llu ms (airlock-nodemgr)", step,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
        return 0;
}

/* ---- the build ---- */

static bool recipe_exists(const char *name) {
        char path[PATH_BUF];
        if (!name_is_valid(name))
                return false;
        pathf(path, "%s/templates/%s.sh", tcfg->images_dir, name);
        struct stat st;
        return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool file_exists(const char *dir, const char *name) {
        char path[PATH_BUF];
        pathf(path, "%s/%s", dir, name);
        return access(path, F_OK) == 0;
}

/* Takes an exclusive flock on path (created), blocking. */
static int lock_file(const char *path, int *ret_fd) {
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return negative_errno();
        while (flock(fd, LOCK_EX) < 0)
                if (errno != EINTR)
                        return negative_errno();
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Makes sure TEMPLATES_DIR/kernel-<khash>/vmlinux exists. */
static int ensure_kernel(struct tentry *e, const char *ctx, const char *kdir, const char *khash,
                         const char *log_path, char **ret_error) {
        char lock_path[PATH_BUF], script[PATH_BUF];
        if (file_exists(kdir, "vmlinux") && file_exists(kdir, "modules/load.list"))
                return 0;
        pathf(lock_path, "%s/kernel-%s.lock", tdir, khash);
        _cleanup_close_ int lfd = -1;
        int r = lock_file(lock_path, &lfd);
        if (r < 0) {
                *ret_error = strdup_printf("cannot lock %s: %s", lock_path, strerror(-r));
                return r;
        }
        if (file_exists(kdir, "vmlinux") && file_exists(kdir, "modules/load.list"))
                return 0; /* another builder made it while we waited */
        log_emit(LOG_LEVEL_INFO, ctx, "building kernel into %s", kdir);
        pathf(script, "%s/kernel.sh", tcfg->images_dir);
        char *argv[] = { (char *) "/bin/bash", script, (char *) kdir, NULL };
        const char *kname = strrchr(kdir, '/') ? strrchr(kdir, '/') + 1 : kdir;
        return template_build_step(&e->track, ctx, argv, "kernel", "", tdir, kname, NULL, NULL, log_path, ret_error);
}

/* Moves the VM's console and QEMU logs from its run directory into the
 * template directory, and removes the run directory. */
static void keep_logs(const char *run_dir, const char *tmp) {
        /* console.log is in the VM's own vm/ (the jail writes there) */
        static const char *const from_names[] = { "vm/console.log", "qemu.log" };
        static const char *const names[] = { "console.log", "qemu.log" };
        char from[PATH_BUF], to[PATH_BUF];
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                if (pathf(from, "%s/%s", run_dir, from_names[i]) < 0 || pathf(to, "%s/%s", tmp, names[i]) < 0)
                        continue;
                if (rename(from, to) < 0 && errno == EXDEV) {
                        /* another file system: copy (logs are small; bounded) */
                        _cleanup_free_ char *data = NULL;
                        size_t len;
                        if (file_read_all(from, 16u << 20, &data, &len) >= 0)
                                (void) file_write_atomic(to, data, len, 0644);
                }
        }
        rm_rf(run_dir);
}

/* Boots the template VM, waits for its agent, saves the snapshot. */
/* A template's own start (a recipe's NAME.d/etc/airlock/template-start):
 * run once in the build VM before its snapshot, so what it starts (the
 * code interpreter's server) runs in every sandbox restored from it. */
#define TEMPLATE_START "/etc/airlock/template-start"
#define TEMPLATE_START_TIMEOUT_MS (10 * 60 * 1000) /* a cold Python under TCG, numpy and a kernel */

int template_run_start(struct guestconn *g, const char *ctx, char **ret_error) {
        char out[2048]; /* the start of its output, for the build's error */
        _cleanup_free_ char *msg = NULL;
        _cleanup_(json_decrefp) json_t *argv = json_pack("[s]", TEMPLATE_START);
        log_emit(LOG_LEVEL_DEBUG, ctx, "running the template's " TEMPLATE_START " if it has one");
        int code = 0;
        int r = argv ? guestops_run(g, argv, TEMPLATE_START_TIMEOUT_MS, &code, out, sizeof out, &msg) : -ENOMEM;
        if (r == -ENOENT) /* the template has none */
                return 0;
        if (r >= 0 && code != 0) {
                *ret_error = strdup_printf(TEMPLATE_START " exited with %d: %s", code, out);
                return -ECHILD;
        }
        if (r < 0)
                *ret_error = strdup_printf(TEMPLATE_START " failed: %s%s%s", strerror(-r), msg ? ": " : "", msg ?: "");
        else
                log_emit(LOG_LEVEL_INFO, ctx, "ran the template's " TEMPLATE_START);
        return r;
}

int template_boot_and_save(const struct template_boot *b, char **ret_error) {
        const char *ctx = b->ctx, *tmp = b->dir;
        unsigned memory_mib = b->memory_mib;
        _cleanup_free_ char *kernel = strdup_printf("%s/vmlinux", b->kernel_dir);
        _cleanup_free_ char *initrd = strdup_printf("%s/initramfs.cpio", tmp);
        _cleanup_free_ char *rootfs = strdup_printf("%s/rootfs.img", tmp);
        _cleanup_free_ char *mem = strdup_printf("%s/mem", tmp);
        _cleanup_free_ char *state = strdup_printf("%s/state", tmp);
        if (!kernel || !initrd || !rootfs || !mem || !state)
                return -ENOMEM;

        {
                _cleanup_close_ int fd = open(mem, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                if (fd < 0 || ftruncate(fd, (off_t) memory_mib << 20) < 0) {
                        int r = negative_errno();
                        *ret_error = strdup_printf("cannot create the RAM file %s: %s", mem, strerror(-r));
                        return r;
                }
        }

        _cleanup_free_ char *run_dir = NULL;
        int r = node_vm_run_dir(tcfg->data_dir, &run_dir);
        if (r < 0) {
                *ret_error = strdup_printf("cannot create a run directory in %s/run: %s", tcfg->data_dir, strerror(-r));
                return r;
        }
        struct vmm_config vc = {
                .qemu_binary = tcfg->qemu_binary,
                .accel = taccel,
                .memory_mib = memory_mib,
                .vcpus = b->vcpus ? b->vcpus : TEMPLATE_VCPUS,
                .kernel = kernel,
                .initrd = initrd,
                .cmdline = TEMPLATE_CMDLINE,
                .rootfs = rootfs,
                .mem_path = mem,
                .mem_shared = true,
                .run_dir = run_dir,
                .log_ctx = ctx,
        };
        uint64_t t0 = now_monotonic_ns();
        struct vmm *v = NULL;
        _cleanup_free_ char *vmm_error = NULL;
        pthread_mutex_lock(&tlock);
        r = shutting_down ? -ECANCELED : vmm_boot(&vc, &v, &vmm_error);
        if (r >= 0)
                b->track->vmm = v;
        pthread_mutex_unlock(&tlock);
        if (r < 0) {
                keep_logs(run_dir, tmp);
                *ret_error = strdup_printf("template VM did not start: %s (logs in %s)", vmm_error ?: strerror(-r),
                                           tmp);
                return r;
        }
        bool served = false;
        if (b->network_id && gwclient_enabled()) {
                r = gwclient_attach(b->network_id, 1, b->network ? b->network : "{\"mode\":\"allow-all\"}",
                                    v->gw_fds[0], v->gw_fds[1], ctx);
                served = r >= 0;
        }

        int fd = -1;
        struct guestconn *g = NULL;
        const char *step = "connecting to the guest channel";
        r = vmm_guest_connect(v, 10000, &fd);
        if (r >= 0) {
                step = "waiting for the guest agent";
                r = guestconn_open(fd, ctx, BOOT_TIMEOUT_MS, &g);
        }
        if (r >= 0) {
                step = "pinging the guest agent";
                r = guestconn_ping(g, 10000);
        }
        _cleanup_free_ char *start_error = NULL;
        if (r >= 0 && b->work) {
                step = "running the build's steps";
                r = b->work(g, v, b->userdata, &start_error);
        } else if (r >= 0) {
                step = "starting the template's services";
                r = template_run_start(g, ctx, &start_error);
        }
        if (r >= 0) {
                step = "rehearsing a sandbox's start";
                r = guestops_rehearse(g, ctx);
        }
        uint64_t t_boot = now_monotonic_ns();
        /* a guest that did not answer: the VMM's own account of it */
        _cleanup_free_ char *vmm_why = r < 0 && !start_error ? vmm_failure_reason(v) : NULL;
        /* Disconnect before saving: the snapshot then holds an agent that
         * waits for a host, exactly what a restored sandbox needs. */
        guestconn_free(g);
        if (r >= 0) {
                struct timespec ts = { 0, 50 * 1000000L };
                nanosleep(&ts, NULL);
                step = "saving the snapshot";
                r = vmm_save(v, state);
        }
        pthread_mutex_lock(&tlock);
        b->track->vmm = NULL;
        pthread_mutex_unlock(&tlock);
        vmm_destroy(v);
        if (served)
                (void) gwclient_forget(b->network_id, ctx);
        keep_logs(run_dir, tmp);
        /* the build VM's uid owned them; the template is the node's (root's
         * without airlock-nodemgr; no VM opens these: restores get clones
         * and a sealed copy of the RAM) */
        _cleanup_free_ char *console = strdup_printf("%s/console.log", tmp);
        if (vmm_via_nodemgr()) {
                if (console && access(console, F_OK) == 0)
                        (void) vmm_file_reclaim(console, 0644, ctx);
                if (vmm_file_reclaim(rootfs, 0644, ctx) < 0 || vmm_file_reclaim(mem, 0600, ctx) < 0)
                        log_emit(LOG_LEVEL_WARN, ctx, "cannot give the template files back to the node");
        } else {
                if (console)
                        (void) chown(console, 0, 0);
                if (chown(rootfs, 0, 0) < 0 || chmod(rootfs, 0644) < 0 || chown(mem, 0, 0) < 0)
                        log_emit(LOG_LEVEL_WARN, ctx, "cannot give the template files back to root: %s",
                                 strerror(errno));
        }
        if (r < 0) {
                *ret_error = start_error ? TAKE_PTR(start_error)
                                         : strdup_printf("%s failed: %s%s%s (console: %s/console.log)", step,
                                                         strerror(-r), vmm_why ? "; " : "", vmm_why ?: "", tmp);
                return r;
        }
        log_emit(LOG_LEVEL_INFO, ctx, "template VM booted in %llu ms, saved in %llu ms",
                 (unsigned long long) ((t_boot - t0) / 1000000ULL),
                 (unsigned long long) ((now_monotonic_ns() - t_boot) / 1000000ULL));
        return 0;
}

static int write_manifest(const char *tmp, const char *name, const char *hash, unsigned memory_mib,
                          const char *kdir_name, uint64_t build_ms) {
        char when[64];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_t *m = json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:s, s:s}", "name", name, "hash", hash,
                              "memory_mib", (json_int_t) memory_mib, "vcpus", (json_int_t) TEMPLATE_VCPUS, "kernel",
                              kdir_name, "built_at", when, "build_ms", (json_int_t) build_ms, "qemu",
                              qemu_version ? qemu_version : "", "cpu", vmm_cpu_id());
        if (!m)
                return -ENOMEM;
        _cleanup_free_ char *text = json_dumps(m, JSON_INDENT(2));
        json_decref(m);
        if (!text)
                return -ENOMEM;
        _cleanup_free_ char *path = strdup_printf("%s/manifest.json", tmp);
        if (!path)
                return -ENOMEM;
        return file_write_atomic(path, text, strlen(text), 0644);
}

/* Builds template e (hash and kernel hash given) unless its directory
 * exists. Runs without tlock held. */
static int build(struct tentry *e, const char *hash, const char *khash, unsigned memory_mib,
                 struct template_info **ret, char **ret_error) {
        char ctx[128], final[PATH_BUF], kdir[PATH_BUF], lock_path[PATH_BUF], tmp[PATH_BUF], log_path[PATH_BUF], kdir_name[64];
        int r;

        snprintf(ctx, sizeof ctx, "template=%s", e->name);
        pathf(final, "%s/%s-%s", tdir, e->name, hash);
        snprintf(kdir_name, sizeof kdir_name, "kernel-%s", khash);
        pathf(kdir, "%s/%s", tdir, kdir_name);

        /* other processes building the same template hold this lock */
        _cleanup_close_ int lfd = -1;
        if (!file_exists(final, "manifest.json")) {
                pathf(lock_path, "%s/%s-%s.lock", tdir, e->name, hash);
                r = lock_file(lock_path, &lfd);
                if (r < 0) {
                        *ret_error = strdup_printf("cannot lock %s: %s", lock_path, strerror(-r));
                        return r;
                }
        }

        if (file_exists(final, "manifest.json")) {
                if (!file_exists(kdir, "vmlinux")) {
                        *ret_error = strdup_printf("%s exists but its kernel %s is missing", final, kdir);
                        return -ENOENT;
                }
                struct template_info *t = info_for(e->name, hash, final, kdir, memory_mib);
                if (!t)
                        return -ENOMEM;
                *ret = t;
                return 0;
        }

        uint64_t t0 = now_monotonic_ns();
        char rnd[17];
        r = random_id("", 8, rnd, sizeof rnd);
        if (r < 0)
                return r;
        pathf(tmp, "%s/.tmp-%s-%s-%d-%s", tdir, e->name, hash, (int) getpid(), rnd);
        if (mkdir(tmp, 0755) < 0) {
                r = negative_errno();
                *ret_error = strdup_printf("cannot create %s: %s", tmp, strerror(-r));
                return r;
        }
        /* in a cluster, another node may have built it, or be building it */
        struct template_claim *claim = NULL;
        r = template_store_fetch_or_claim(e->name, hash, kdir, tmp, ctx, &claim);
        if (r > 0) {
                if (rename(tmp, final) < 0) {
                        r = negative_errno();
                        *ret_error = strdup_printf("cannot rename %s to %s: %s", tmp, final, strerror(-r));
                        rm_rf(tmp);
                        return r;
                }
                nodemetrics_template(e->name, "fetched", (double) (now_monotonic_ns() - t0) / 1e9);
                struct template_info *t = info_for(e->name, hash, final, kdir, memory_mib);
                if (!t)
                        return -ENOMEM;
                *ret = t;
                return 0;
        }
        if (r == -ECANCELED) {
                rm_rf(tmp);
                return r;
        }
        if (r < 0 && r != -ENOKEY)
                log_emit(LOG_LEVEL_WARN, ctx, "the object store's templates failed (%s): building here", strerror(-r));

        pathf(log_path, "%s/build.log", tmp);
        log_emit(LOG_LEVEL_INFO, ctx, "building template %s-%s (memory %u MiB), log %s", e->name, hash, memory_mib,
                 log_path);
        pthread_mutex_lock(&tlock);
        e->build_start_ns = t0;
        snprintf(e->log_path, sizeof e->log_path, "%s", log_path);
        pthread_mutex_unlock(&tlock);

        char script[PATH_BUF], out[PATH_BUF], initramfs_script[PATH_BUF];
        build_progress(e, "kernel");
        r = ensure_kernel(e, ctx, kdir, khash, log_path, ret_error);
        if (r >= 0) {
                build_progress(e, "initramfs");
                pathf(initramfs_script, "%s/initramfs.sh", tcfg->images_dir);
                pathf(out, "%s/initramfs.cpio", tmp);
                char *argv[] = { (char *) "/bin/bash", initramfs_script, kdir, tcfg->guest_binary, out, NULL };
                r = template_build_step(&e->track, ctx, argv, "initramfs", "", tmp, "initramfs.cpio", kdir, NULL, log_path,
                                           ret_error);
        }
        if (r >= 0) {
                build_progress(e, "rootfs");
                pathf(script, "%s/templates/%s.sh", tcfg->images_dir, e->name);
                pathf(out, "%s/rootfs.img", tmp);
                char *argv[] = { (char *) "/bin/bash", script, out, NULL };
                /* with the kernel's directory: a recipe may take its
                 * container modules (images/kernel.sh rootfs-modules) */
                r = template_build_step(&e->track, ctx, argv, "rootfs", e->name, tmp, "rootfs.img", kdir,
                                        NULL, log_path, ret_error);
        }
        if (r >= 0) {
                build_progress(e, "boot");
                r = template_boot_and_save(&(struct template_boot){ .ctx = ctx, .dir = tmp, .kernel_dir = kdir,
                                                                   .memory_mib = memory_mib, .track = &e->track },
                                           ret_error);
        }
        uint64_t build_ms = (now_monotonic_ns() - t0) / 1000000ULL;
        if (r >= 0) {
                r = write_manifest(tmp, e->name, hash, memory_mib, kdir_name, build_ms);
                if (r < 0)
                        *ret_error = strdup_printf("cannot write manifest.json: %s", strerror(-r));
        }
        if (r >= 0 && rename(tmp, final) < 0) {
                r = negative_errno();
                *ret_error = strdup_printf("cannot rename %s to %s: %s", tmp, final, strerror(-r));
        }
        if (r < 0) {
                /* keep the log beside the templates for whoever investigates */
                char failed_log[PATH_BUF];
                pathf(failed_log, "%s/%s-%s.failed.log", tdir, e->name, hash);
                bool kept = rename(log_path, failed_log) == 0;
                pthread_mutex_lock(&tlock);
                snprintf(e->log_path, sizeof e->log_path, "%s", kept ? failed_log : "");
                pthread_mutex_unlock(&tlock);
                if (kept) {
                        char *msg = *ret_error ? strdup_printf("%s; build log %s", *ret_error, failed_log) : NULL;
                        if (msg) {
                                free(*ret_error);
                                *ret_error = msg;
                        }
                }
                rm_rf(tmp);
                template_store_release(claim);
                nodemetrics_template(e->name, "failed", (double) (now_monotonic_ns() - t0) / 1e9);
                return r;
        }
        log_emit(LOG_LEVEL_INFO, ctx, "template %s-%s built in %llu ms", e->name, hash, (unsigned long long) build_ms);
        nodemetrics_template(e->name, "built", (double) build_ms / 1e3);
        template_store_publish(claim, final, kdir, ctx);
        struct template_info *t = info_for(e->name, hash, final, kdir, memory_mib);
        if (!t)
                return -ENOMEM;
        *ret = t;
        return 0;
}

/* ---- registry ---- */

/* Finds or adds the entry of a template with a recipe (tlock held). */
static struct tentry *entry_get(const char *name) {
        for (struct tentry *e = entries; e; e = e->next)
                if (strcmp(e->name, name) == 0)
                        return e;
        if (!recipe_exists(name))
                return NULL;
        struct tentry *e = calloc(1, sizeof *e);
        if (!e)
                return NULL;
        snprintf(e->name, sizeof e->name, "%s", name);
        e->memory_mib = memory_for(name);
        e->next = entries;
        entries = e;
        return e;
}

/* Whether the build in dir is for another CPU than ours (its manifest's
 * "cpu"): a node of that CPU (a TCG and a KVM node sharing the templates
 * dir) still uses it. A build that does not say is an older node's. */
static bool other_cpu(const char *dir) {
        char path[PATH_BUF];
        pathf(path, "%s/manifest.json", dir);
        _cleanup_(json_decrefp) json_t *m = json_load_file(path, 0, NULL);
        const char *cpu = json_string_value(json_object_get(m, "cpu"));
        return cpu && strcmp(cpu, vmm_cpu_id()) != 0;
}

/* Removes TEMPLATES_DIR/NAME-OTHERHASH: builds of this template that the
 * current one supersedes (another guest agent, recipe or QEMU). Running
 * sandboxes do not need them: their rootfs is their own reflink and the RAM
 * file stays alive while QEMU maps it. Nodes sharing a templates dir must
 * therefore run one version; a build for another CPU stays (other_cpu()). */
static void prune_superseded(const char *name, const char *keep_hash) {
        DIR *d = opendir(tdir);
        if (!d)
                return;
        size_t nlen = strlen(name), hlen = strlen(keep_hash);
        for (struct dirent *de; (de = readdir(d));) {
                const char *n = de->d_name;
                if (strncmp(n, name, nlen) != 0 || n[nlen] != '-')
                        continue;
                const char *h = n + nlen + 1;
                size_t k = strspn(h, "0123456789abcdef");
                bool is_lock = strcmp(h + k, ".lock") == 0;
                if (k != hlen || (h[k] && !is_lock) || strncmp(h, keep_hash, hlen) == 0)
                        continue;
                char path[PATH_BUF];
                pathf(path, "%s/%s", tdir, n);
                if (!is_lock && other_cpu(path))
                        continue;
                if (!is_lock)
                        log_info("template=%s removing superseded build %s", name, path);
                int r = is_lock ? (unlink(path) < 0 ? negative_errno() : 0) : rm_rf(path);
                if (r < 0)
                        log_warn("template=%s cannot remove %s: %s", name, path, strerror(-r));
        }
        closedir(d);
}

static void build_entry(struct tentry *e) {
        char hash[HASH_HEX], khash[HASH_HEX];
        char *error = NULL;
        struct template_info *info = NULL;

        e->state = T_BUILDING;
        e->step = NULL;
        e->step_number = 0;
        e->build_start_ns = now_monotonic_ns();
        e->log_path[0] = 0;
        pthread_mutex_unlock(&tlock);
        int r = template_hash(tcfg, qemu_version, e->name, e->memory_mib, hash, khash, &error);
        if (r >= 0) {
                pthread_mutex_lock(&tlock);
                snprintf(e->hash, sizeof e->hash, "%s", hash);
                pthread_mutex_unlock(&tlock);
                r = build(e, hash, khash, e->memory_mib, &info, &error);
                if (r >= 0)
                        prune_superseded(e->name, hash);
        }
        pthread_mutex_lock(&tlock);
        if (r >= 0) {
                snprintf(e->hash, sizeof e->hash, "%s", hash);
                template_info_free(e->info);
                e->info = info;
                free(e->error);
                e->error = NULL;
                e->state = T_READY;
        } else {
                free(e->error);
                e->error = error ? error : strdup_printf("build failed: %s", strerror(-r));
                e->state = T_FAILED;
                log_emit(LOG_LEVEL_ERROR, NULL, "template=%s build failed: %s", e->name,
                         e->error ? e->error : "(no message)");
        }
        pthread_cond_broadcast(&tcond);
}

/* ---- templates built from specs (template-build.c builds them) ---- */

bool template_custom_name(const char *name) {
        size_t n = strlen(TEMPLATE_CUSTOM_PREFIX);
        if (!name || strncmp(name, TEMPLATE_CUSTOM_PREFIX, n) != 0 || strlen(name) != n + TEMPLATE_CUSTOM_ID_HEX)
                return false;
        return strspn(name + n, "0123456789abcdef") == TEMPLATE_CUSTOM_ID_HEX;
}

static template_build_state_fn build_state;

void template_set_build_state(template_build_state_fn fn) {
        build_state = fn;
}

/* Reads TEMPLATES_DIR/<name>/manifest.json into a template_info. */
static int custom_load(const char *name, struct template_info **ret, char **ret_error) {
        char dir[PATH_BUF], path[PATH_BUF], kdir[PATH_BUF];
        if (pathf(dir, "%s/%s", template_dir(), name) < 0 || pathf(path, "%s/manifest.json", dir) < 0)
                return -ENAMETOOLONG;
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = file_read_all(path, 1u << 20, &text, &len);
        if (r < 0)
                return r == -ENOENT ? -ENOENT : r;
        _cleanup_(json_decrefp) json_t *m = json_loadb(text, len, 0, NULL);
        const char *kernel = json_string_value(json_object_get(m, "kernel"));
        json_int_t mem = json_integer_value(json_object_get(m, "memory_mib"));
        json_int_t vcpus = json_integer_value(json_object_get(m, "vcpus"));
        json_t *env = json_object_get(m, "env");
        json_t *workdir = json_object_get(m, "workdir"), *user = json_object_get(m, "user");
        if (!kernel || strchr(kernel, '/') || mem < 16 || vcpus < 1 || vcpus > 256 || (env && !json_is_object(env)) ||
            pathf(kdir, "%s/%s", template_dir(), kernel) < 0) {
                if (ret_error)
                        *ret_error = strdup_printf("%s is not a template's manifest", path);
                return -EBADMSG;
        }
        struct template_info *t = info_for(name, name + strlen(TEMPLATE_CUSTOM_PREFIX), dir, kdir, (unsigned) mem);
        if (!t)
                return -ENOMEM;
        t->vcpus = (unsigned) vcpus;
        t->env = env ? json_deep_copy(env) : NULL;
        t->workdir = json_is_string(workdir) ? strdup(json_string_value(workdir)) : NULL;
        t->user = json_is_string(user) ? strdup(json_string_value(user)) : NULL;
        if ((env && !t->env) || (json_is_string(workdir) && !t->workdir) || (json_is_string(user) && !t->user)) {
                template_info_free(t);
                return -ENOMEM;
        }
        if (access(t->kernel, F_OK) < 0) {
                if (ret_error)
                        *ret_error = strdup_printf("template %s: its kernel %s is missing", name, t->kernel);
                template_info_free(t);
                return -ENOENT;
        }
        *ret = t;
        return 0;
}

/* A custom template: the build's state while this process builds it (or
 * saw it fail), else what is on disk. */
static int custom_get(const char *name, struct template_info **ret, char **ret_error) {
        int r = build_state ? build_state(name, ret_error) : 0;
        if (r < 0)
                return r;
        return custom_load(name, ret, ret_error);
}

static void custom_list(json_t *arr) {
        DIR *d = opendir(template_dir());
        if (!d)
                return;
        for (struct dirent *de; (de = readdir(d));) {
                if (!template_custom_name(de->d_name))
                        continue;
                struct template_info *t = NULL;
                if (custom_load(de->d_name, &t, NULL) < 0)
                        continue;
                json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I}", "name", t->name, "state", "ready",
                                                     "hash", t->hash, "memory_mib", (json_int_t) t->memory_mib));
                template_info_free(t);
        }
        closedir(d);
}

int template_get(const char *name, int wait_ms, struct template_info **ret, char **ret_error) {
        if (template_custom_name(name))
                return custom_get(name, ret, ret_error);
        struct timespec deadline;
        node_deadline_after_ms(&deadline, wait_ms);

        pthread_mutex_lock(&tlock);
        struct tentry *e = entry_get(name);
        if (!e) {
                pthread_mutex_unlock(&tlock);
                return -ENOENT;
        }
        bool waited = false;
        for (;;) {
                if (e->state == T_READY) {
                        struct template_info *t = template_info_copy(e->info);
                        pthread_mutex_unlock(&tlock);
                        if (!t)
                                return -ENOMEM;
                        *ret = t;
                        return 0;
                }
                if (e->state == T_FAILED && waited) {
                        /* the build we waited for failed: report it, the
                         * next request retries */
                        if (ret_error)
                                *ret_error = e->error ? strdup(e->error) : NULL;
                        pthread_mutex_unlock(&tlock);
                        return -EIO;
                }
                if (e->state != T_BUILDING) {
                        if (shutting_down) {
                                pthread_mutex_unlock(&tlock);
                                return -ECANCELED;
                        }
                        build_entry(e);
                        waited = true;
                        continue;
                }
                waited = true;
                if (pthread_cond_timedwait(&tcond, &tlock, &deadline) == ETIMEDOUT && e->state == T_BUILDING) {
                        pthread_mutex_unlock(&tlock);
                        return -EAGAIN;
                }
        }
}

void template_progress_text(const char *name, char *buf, size_t n) {
        buf[0] = 0;
        pthread_mutex_lock(&tlock);
        struct tentry *e = template_custom_name(name) ? NULL : entry_get(name);
        if (e && e->state == T_BUILDING) {
                uint64_t s = (now_monotonic_ns() - e->build_start_ns) / 1000000000ULL;
                if (e->step)
                        snprintf(buf, n, "step %u of %zu (%s), %llu s so far", e->step_number,
                                 ARRAY_SIZE(build_steps), e->step, (unsigned long long) s);
                else
                        snprintf(buf, n, "%llu s so far", (unsigned long long) s);
        }
        pthread_mutex_unlock(&tlock);
}

int template_peek(const char *name, struct template_info **ret) {
        if (template_custom_name(name))
                return custom_get(name, ret, NULL);
        pthread_mutex_lock(&tlock);
        struct tentry *e = entry_get(name);
        struct template_info *t = e && e->state == T_READY ? template_info_copy(e->info) : NULL;
        int r = !e ? -ENOENT : e->state != T_READY ? -EAGAIN : t ? 0 : -ENOMEM;
        pthread_mutex_unlock(&tlock);
        if (r >= 0)
                *ret = t;
        return r;
}

int template_build_dir(const char *name, const char *hash, char **ret_dir) {
        size_t hl = hash ? strlen(hash) : 0;
        if (!name || !name_is_valid(name) || hl < 16 || hl > 64 || strspn(hash, "0123456789abcdef") != hl)
                return -EINVAL;
        _cleanup_free_ char *dir = strdup_printf("%s/%s-%s", tdir, name, hash);
        _cleanup_free_ char *manifest = dir ? strdup_printf("%s/manifest.json", dir) : NULL;
        if (!manifest)
                return -ENOMEM;
        /* a build is whole once its manifest names it (written last) */
        _cleanup_(json_decrefp) json_t *m = json_load_file(manifest, 0, NULL);
        const char *h = json_string_value(json_object_get(m, "hash"));
        if (!h || strcmp(h, hash) != 0)
                return -ENOENT;
        *ret_dir = TAKE_PTR(dir);
        return 0;
}

static void *prebuild_thread(void *arg) {
        /* the node's readiness first, then what is built in the background */
        for (size_t i = 0; i < tcfg->n_prebuild + tcfg->n_prebuild_background; i++) {
                const char *name = i < tcfg->n_prebuild ? tcfg->prebuild[i]
                                                        : tcfg->prebuild_background[i - tcfg->n_prebuild];
                struct template_info *t = NULL;
                char *error = NULL;
                uint64_t t0 = now_monotonic_ns();
                int r = template_get(name, 24 * 3600 * 1000, &t, &error);
                if (r == -ENOENT)
                        log_error("template=%s prebuild: no recipe %s/templates/%s.sh", name, tcfg->images_dir,
                                  name);
                else if (r < 0)
                        log_error("template=%s prebuild failed: %s", name, error ? error : strerror(-r));
                else
                        log_info("template=%s ready (%s) after %llu ms", name, t->dir,
                                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000ULL));
                template_info_free(t);
                free(error);
        }
        return NULL;
}

int template_prebuild_start(void) {
        pthread_t t;
        int r = pthread_create(&t, NULL, prebuild_thread, NULL);
        if (r != 0)
                return -r;
        pthread_detach(t);
        return 0;
}

static void entry_probe(struct tentry *e);

/* A building entry's progress into o: steps, elapsed_ms, step, step_number (tlock held). */
static void build_progress_json(json_t *o, const struct tentry *e, uint64_t now) {
        json_object_set_new(o, "steps", json_integer((json_int_t) ARRAY_SIZE(build_steps)));
        json_object_set_new(o, "elapsed_ms", json_integer((json_int_t) ((now - e->build_start_ns) / 1000000ULL)));
        if (e->step) {
                json_object_set_new(o, "step", json_string(e->step));
                json_object_set_new(o, "step_number", json_integer(e->step_number));
        }
}

/* One prebuilt template's entry of the health report (tlock held). */
static json_t *prebuild_json(const char *name, const struct tentry *e, uint64_t now) {
        if (!e) /* entry_get() found no recipe */
                return json_pack("{s:s, s:s, s:o}", "name", name, "state", "failed", "error",
                                 json_sprintf("no recipe %s/templates/%s.sh", tcfg->images_dir, name));
        json_t *o = json_pack("{s:s, s:s}", "name", name, "state", tstate_names[e->state]);
        if (!o)
                return NULL;
        if (e->state == T_BUILDING)
                build_progress_json(o, e, now);
        if (e->state == T_FAILED)
                json_object_set_new(o, "error", json_string(e->error ? e->error : "build failed"));
        if ((e->state == T_BUILDING || e->state == T_FAILED) && e->log_path[0])
                json_object_set_new(o, "log", json_string(e->log_path));
        return o;
}

json_t *template_prebuild_status(bool *ret_ready, bool *ret_failed) {
        json_t *arr = json_array();
        bool ready = true, failed = false;
        uint64_t now = now_monotonic_ns();
        pthread_mutex_lock(&tlock);
        for (size_t i = 0; arr && i < tcfg->n_prebuild + tcfg->n_prebuild_background; i++) {
                bool background = i >= tcfg->n_prebuild;
                const char *name = background ? tcfg->prebuild_background[i - tcfg->n_prebuild] : tcfg->prebuild[i];
                struct tentry *e = entry_get(name);
                if (e && e->state == T_UNKNOWN)
                        entry_probe(e); /* built by an earlier run: ready without a build */
                if (!background) {
                        ready = ready && e && e->state == T_READY;
                        failed = failed || !e || e->state == T_FAILED;
                }
                json_t *o = prebuild_json(name, e, now);
                if (o && background)
                        json_object_set_new(o, "background", json_true());
                if (o)
                        json_array_append_new(arr, o);
        }
        pthread_mutex_unlock(&tlock);
        *ret_ready = ready;
        *ret_failed = failed;
        return arr;
}

/* Checks an untouched entry against the disk: a template directory another
 * process (or an earlier run) built makes it ready without a build. */
static void entry_probe(struct tentry *e) {
        char hash[HASH_HEX], khash[HASH_HEX], final[PATH_BUF], kdir[PATH_BUF];
        char *error = NULL;
        unsigned mem = e->memory_mib;
        pthread_mutex_unlock(&tlock);
        int r = template_hash(tcfg, qemu_version, e->name, mem, hash, khash, &error);
        free(error);
        bool built = false;
        if (r >= 0) {
                pathf(final, "%s/%s-%s", tdir, e->name, hash);
                pathf(kdir, "%s/kernel-%s", tdir, khash);
                built = file_exists(final, "manifest.json") && file_exists(kdir, "vmlinux");
        }
        pthread_mutex_lock(&tlock);
        if (r < 0 || e->state != T_UNKNOWN)
                return;
        snprintf(e->hash, sizeof e->hash, "%s", hash);
        if (built) {
                struct template_info *t = info_for(e->name, hash, final, kdir, mem);
                if (t) {
                        e->info = t;
                        e->state = T_READY;
                }
        }
}

json_t *template_list_json(void) {
        json_t *arr = json_array();
        if (!arr)
                return NULL;
        char dir[PATH_BUF];
        pathf(dir, "%s/templates", tcfg->images_dir);
        DIR *d = opendir(dir);
        pthread_mutex_lock(&tlock);
        for (struct dirent *de; d && (de = readdir(d));) {
                size_t n = strlen(de->d_name);
                if (n <= 3 || n > 64 + 3 || strcmp(de->d_name + n - 3, ".sh") != 0)
                        continue;
                char name[68];
                snprintf(name, sizeof name, "%.*s", (int) (n - 3), de->d_name);
                struct tentry *e = entry_get(name);
                if (e && e->state == T_UNKNOWN)
                        entry_probe(e);
        }
        if (d)
                closedir(d);
        for (struct tentry *e = entries; e; e = e->next) {
                json_t *o = json_pack("{s:s, s:s, s:I}", "name", e->name, "state", tstate_names[e->state],
                                      "memory_mib", (json_int_t) e->memory_mib);
                if (!o)
                        continue;
                if (e->hash[0])
                        json_object_set_new(o, "hash", json_string(e->hash));
                if (e->state == T_FAILED && e->error)
                        json_object_set_new(o, "error", json_string(e->error));
                json_array_append_new(arr, o);
        }
        pthread_mutex_unlock(&tlock);
        custom_list(arr);
        return arr;
}

/* Removes TEMPLATES_DIR/.tmp-* directories whose builder process is gone. */
static void remove_stale_temps(void) {
        DIR *d = opendir(tdir);
        if (!d)
                return;
        for (struct dirent *de; (de = readdir(d));) {
                if (strncmp(de->d_name, ".tmp-", 5) != 0)
                        continue;
                /* .tmp-NAME-HASH-PID-RND: the pid is the second to last field */
                char copy[256];
                snprintf(copy, sizeof copy, "%s", de->d_name);
                char *last = strrchr(copy, '-');
                if (!last)
                        continue;
                *last = 0;
                char *pid_s = strrchr(copy, '-');
                uint64_t pid;
                if (!pid_s || parse_u64(pid_s + 1, INT32_MAX, &pid) < 0)
                        continue;
                if ((pid_t) pid != getpid() && kill((pid_t) pid, 0) < 0 && errno == ESRCH) {
                        char path[PATH_BUF];
                        pathf(path, "%s/%s", tdir, de->d_name);
                        log_info("removing %s (its builder, pid %llu, is gone)", path, (unsigned long long) pid);
                        rm_rf(path);
                }
        }
        closedir(d);
}

/* The gateway makes the egress CA on its first start (AIRLOCK_EGRESS_CA_DIR,
 * set by airlock-nodemgr): templates are built with its certificate in
 * their trust store (the recipes read AIRLOCK_EGRESS_CA_CERT), so the node
 * waits for it. No gateway (AIRLOCK_PRIVSEP=0): no CA, nothing to trust. */
static int egress_ca_wait(void) {
        const char *dir = getenv("AIRLOCK_EGRESS_CA_DIR");
        if (!dir || !*dir || !getenv("AIRLOCK_GW_SOCKET"))
                return unsetenv("AIRLOCK_EGRESS_CA_CERT") < 0 ? -errno : 0;
        _cleanup_free_ char *cert = strdup_printf("%s/ca.crt", dir);
        if (!cert)
                return -ENOMEM;
        for (int i = 0; access(cert, R_OK) < 0; i++) {
                if (i >= 300)
                        return log_error_errno(-ENOENT, "The gateway has not made the egress CA %s in 30 s", cert);
                struct timespec ts = { 0, 100 * 1000000L };
                nanosleep(&ts, NULL);
        }
        /* before any thread: the recipes inherit the environment */
        return setenv("AIRLOCK_EGRESS_CA_CERT", cert, 1) < 0 ? -errno : 0;
}

int template_init(const struct node_config *cfg, const char *templates_dir, enum vmm_accel accel) {
        tcfg = cfg;
        taccel = accel;
        tdir = strdup(templates_dir);
        if (!tdir)
                return -ENOMEM;
        node_cond_init(&tcond);

        int r = mkdir_p(tdir, 0755);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", tdir);
        r = node_program_version(cfg->qemu_binary, &qemu_version);
        if (r < 0)
                return log_error_errno(r, "Failed to run %s --version: %m", cfg->qemu_binary);
        log_info("qemu: %s", qemu_version);
        r = egress_ca_wait();
        if (r < 0)
                return r;
        remove_stale_temps();
        return 0;
}

/* Kills what t runs now; tlock held. */
static void track_kill_locked(struct template_track *t) {
        if (t->pgid > 0)
                kill(-t->pgid, SIGKILL);
        if (t->mgr_pending)
                (void) shutdown(t->mgr_conn, SHUT_RDWR);
        if (t->vmm)
                vmm_kill(t->vmm);
}

void template_shutdown(void) {
        template_store_shutdown();
        pthread_mutex_lock(&tlock);
        shutting_down = true;
        for (struct tentry *e = entries; e; e = e->next)
                track_kill_locked(&e->track);
        pthread_mutex_unlock(&tlock);
}

void template_shutdown_wait(int ms) {
        struct timespec deadline;
        node_deadline_after_ms(&deadline, ms);
        pthread_mutex_lock(&tlock);
        for (;;) {
                bool building = false;
                for (struct tentry *e = entries; e && !building; e = e->next)
                        building = e->state == T_BUILDING;
                if (!building || pthread_cond_timedwait(&tcond, &tlock, &deadline) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&tlock);
}

void template_track_kill(struct template_track *t) {
        pthread_mutex_lock(&tlock);
        track_kill_locked(t);
        pthread_mutex_unlock(&tlock);
}

const char *template_dir(void) {
        return tdir;
}

const struct node_config *template_config(void) {
        return tcfg;
}

const char *template_qemu_version(void) {
        return qemu_version ? qemu_version : "";
}

bool template_shutting_down(void) {
        pthread_mutex_lock(&tlock);
        bool r = shutting_down;
        pthread_mutex_unlock(&tlock);
        return r;
}
