/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates built from specs (template-build.h). Each build runs on a
 * thread of its own: the base's disk (a reflink of another template's, or
 * a root file system a root step makes from a Debian suite or an OCI
 * image), grown to the spec's disk size, with the build context written
 * into it; then a build VM boots from it, the steps run inside as the
 * agent's commands, the start command starts and its readiness is waited
 * for, and the snapshot is saved as template.c saves the built-in ones.
 * Nothing of a failed build stays but its log.
 */
#include "template-build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "buildctx.h"
#include "config.h"
#include "guestops.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodemetrics.h"
#include "nodeutil.h"
#include "template-internal.h"
#include "tplspec.h"
#include "util.h"
#include "vmm.h"

#define CUSTOM_PREFIX TEMPLATE_CUSTOM_PREFIX
#define CUSTOM_ID_HEX TEMPLATE_CUSTOM_ID_HEX
/* A step's command, and a readiness check's wait, at most. */
#define STEP_TIMEOUT_MS (30 * 60 * 1000)
/* How often a readiness check runs again. */
#define READY_POLL_MS 250
/* Where the build context lands in the build VM: written into the disk
 * before it boots, unpacked by the first COPY, gone before the snapshot. */
#define GUEST_CONTEXT_TAR "/.airlock-context.tar"
#define GUEST_CONTEXT_DIR "/.airlock-build"
/* Builds running at once; more wait for a turn. */
#define BUILDS_AT_ONCE 2
#define DEFAULT_MEMORY_MIB 512
#define PATH_BUF TEMPLATE_PATH_BUF

enum cstate {
        C_BUILDING,
        C_READY,
        C_FAILED,
};

static const char *const cstate_names[] = {
        [C_BUILDING] = "building",
        [C_READY] = "ready",
        [C_FAILED] = "failed",
};

/* A build this process ran or runs (the registry; a template built by an
 * earlier run is found on disk instead). */
struct cbuild {
        char name[sizeof(CUSTOM_PREFIX) + CUSTOM_ID_HEX];
        char ctx[64];
        enum cstate state;
        char *error;
        unsigned step, steps;
        char step_text[160];
        uint64_t start_ns, end_ns;
        bool cancelled;
        struct template_track track;
        /* the request, until the build ends */
        struct tplspec *spec;
        char *base, *context, *network;
        struct cbuild *next;
};

static pthread_mutex_t clock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cturn; /* a build slot came free */
static struct cbuild *builds;
static unsigned running;
static bool stopping;

#define pathf template_pathf

static struct cbuild *find(const char *name) {
        for (struct cbuild *b = builds; b; b = b->next)
                if (strcmp(b->name, name) == 0)
                        return b;
        return NULL;
}

static void request_free(struct cbuild *b) {
        tplspec_free(b->spec);
        b->spec = NULL;
        if (b->context)
                (void) unlink(b->context);
        free(b->context);
        free(b->base);
        free(b->network);
        b->context = b->base = b->network = NULL;
}

/* Records the step the build is at (for status), and logs it. */
static void progress(struct cbuild *b, int log_fd, const char *fmt, ...) _printf_(3, 4);
static void progress(struct cbuild *b, int log_fd, const char *fmt, ...) {
        char text[sizeof b->step_text];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        pthread_mutex_lock(&clock_);
        b->step++;
        snprintf(b->step_text, sizeof b->step_text, "%s", text);
        unsigned n = b->step, m = b->steps;
        pthread_mutex_unlock(&clock_);
        if (log_fd >= 0)
                dprintf(log_fd, "\n=== step %u/%u: %s\n", n, m, text);
}

static bool cancelled(struct cbuild *b) {
        pthread_mutex_lock(&clock_);
        bool c = b->cancelled || stopping;
        pthread_mutex_unlock(&clock_);
        return c;
}

/* ---- the template on disk ---- */

/* Where a build is, for template.c's lookup (template_set_build_state()):
 * -EAGAIN building, -EIO failed (*ret_error its message), 0 otherwise (a
 * template built before is on disk, or none is). */
int template_custom_state(const char *name, char **ret_error) {
        pthread_mutex_lock(&clock_);
        struct cbuild *b = find(name);
        enum cstate st = b ? b->state : C_READY;
        if (st == C_FAILED && ret_error)
                *ret_error = b->error ? strdup(b->error) : NULL;
        pthread_mutex_unlock(&clock_);
        return st == C_BUILDING ? -EAGAIN : st == C_FAILED ? -EIO : 0;
}

/* ---- host steps: the base's disk ---- */

/* Runs a host tool with its output in the log; the node's own user. */
static int host_step(struct cbuild *b, const char *log_path, char **ret_error, const char *const argv[]) {
        char *av[16];
        size_t n = 0;
        for (; argv[n] && n < ARRAY_SIZE(av) - 1; n++)
                av[n] = (char *) argv[n];
        av[n] = NULL;
        /* the node's own files: no root needed */
        return template_run_step(&b->track, b->ctx, av, log_path, ret_error);
}

static int64_t file_size(const char *path) {
        struct stat st;
        return stat(path, &st) < 0 ? negative_errno() : (int64_t) st.st_size;
}

/* Grows rootfs to disk_mib (and its ext4 with it) and writes the build
 * context into it: both need a clean file system, so e2fsck first (a
 * template's disk was saved mounted; its journal is replayed). */
static int prepare_disk(struct cbuild *b, const char *rootfs, unsigned disk_mib, const char *context,
                        const char *log_path, char **ret_error) {
        int64_t size = file_size(rootfs);
        if (size < 0) {
                *ret_error = strdup_printf("cannot stat the base's disk: %s", strerror((int) -size));
                return (int) size;
        }
        uint64_t want = (uint64_t) disk_mib << 20;
        if (disk_mib && want < (uint64_t) size) {
                *ret_error = strdup_printf("disk_mib %u is smaller than the base's disk (%llu MiB)", disk_mib,
                                           (unsigned long long) ((uint64_t) size >> 20));
                return -EINVAL;
        }
        bool grow = disk_mib && want > (uint64_t) size;
        if (!grow && !context)
                return 0;
        /* e2fsck: 0 clean, 1 errors fixed (a replayed journal); more fails */
        const char *fsck[] = { "/bin/sh", "-c", "/sbin/e2fsck -fy \"$0\"; s=$?; [ $s -le 1 ]", rootfs, NULL };
        int r = host_step(b, log_path, ret_error, fsck);
        if (r >= 0 && grow) {
                if (truncate(rootfs, (off_t) want) < 0) {
                        r = negative_errno();
                        *ret_error = strdup_printf("cannot grow the disk to %u MiB: %s", disk_mib, strerror(-r));
                        return r;
                }
                const char *resize[] = { "/sbin/resize2fs", rootfs, NULL };
                r = host_step(b, log_path, ret_error, resize);
        }
        if (r >= 0 && context) {
                _cleanup_free_ char *cmd = strdup_printf("write %s %s", context, GUEST_CONTEXT_TAR + 1);
                const char *write[] = { "/sbin/debugfs", "-w", "-R", cmd, rootfs, NULL };
                r = cmd ? host_step(b, log_path, ret_error, write) : -ENOMEM;
        }
        return r;
}

static void params_free(char ***p) {
        for (size_t i = 0; *p && (*p)[i]; i++)
                free((*p)[i]);
        free(*p);
}

/* A Debian or OCI base's root file system into dir/rootfs.img, as root:
 * airlock-nodemgr's template.step "base" checks the parameters again and
 * runs images/debian.sh or images/oci.sh; without it (the node is root)
 * the script runs here with them in its environment. An OCI archive or
 * layout in the build context is unpacked from it first (as the node's
 * user, into dir/oci-src). */
static int make_rootfs(struct cbuild *b, const char *dir, const char *log_path, char **ret_error) {
        const struct tplspec *spec = b->spec;
        bool debian = spec->base == TPLSPEC_BASE_DEBIAN;
        char rootfs[PATH_BUF], script[PATH_BUF], src[PATH_BUF], disk[16], path[TPLSPEC_PATH_MAX + 1];
        pathf(rootfs, "%s/rootfs.img", dir);
        pathf(script, "%s/%s", template_config()->images_dir, debian ? "debian.sh" : "oci.sh");
        pathf(src, "%s/oci-src", dir);
        snprintf(disk, sizeof disk, "%u", spec->disk_mib);
        const char *in_context = debian ? NULL : tplspec_oci_context_path(spec->from, path, sizeof path);
        int r;
        if (in_context) {
                /* the context was checked (check_context()): still, as the
                 * node's user, into the build's own directory, owning
                 * nothing, setting no mode of its own, changing no directory
                 * that exists; then readable by all, for the unprivileged
                 * user namespace that copies it (images/oci.sh) */
                if (mkdir(src, 0755) < 0 || chmod(src, 0755) < 0)
                        return negative_errno();
                const char *untar[] = { "tar",          "-x",   "--no-same-owner", "--no-same-permissions",
                                        "--no-overwrite-dir", "-f", b->context,  "-C",
                                        src,            "--",   in_context,        NULL };
                const char *readable[] = { "chmod", "-R", "u=rwX,go=rX", "--", src, NULL };
                if ((r = host_step(b, log_path, ret_error, untar)) < 0 ||
                    (r = host_step(b, log_path, ret_error, readable)) < 0)
                        return r;
        }
        /* the parameters: packages as comma lists (each within lib/mgr's
         * bound of one argument) */
        size_t n_pkg = 0;
        while (debian && spec->packages[n_pkg])
                n_pkg++;
        _cleanup_(params_free) char **params = calloc(n_pkg + 4, sizeof(char *));
        if (!params)
                return -ENOMEM;
        size_t k = 0;
        params[k++] = strdup(debian ? "debian" : "oci");
        params[k++] = strdup(disk);
        params[k++] = strdup(spec->from);
        for (size_t i = 0; i < n_pkg;) {
                char list[3072] = "";
                size_t used = 0;
                for (; i < n_pkg && used + strlen(spec->packages[i]) + 2 < sizeof list; i++)
                        used += (size_t) snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "",
                                                  spec->packages[i]);
                params[k++] = strdup(list);
        }
        for (size_t i = 0; i < k; i++)
                if (!params[i])
                        return -ENOMEM;
        /* without airlock-nodemgr: the same environment the root step makes */
        _cleanup_free_ char *e_disk = strdup_printf("MIN_IMAGE_MB=%s", spec->disk_mib ? disk : "");
        _cleanup_free_ char *e_a = NULL, *e_b = NULL;
        if (debian) {
                _cleanup_free_ char *joined = NULL;
                size_t total = 1, at = 0;
                for (size_t i = 3; i < k; i++)
                        total += strlen(params[i]) + 1;
                if ((joined = calloc(total, 1)))
                        for (size_t i = 3; i < k; i++)
                                at += snprintf(joined + at, total - at, "%s%s", i > 3 ? "," : "", params[i]);
                e_a = strdup_printf("SUITE=%s", spec->from);
                e_b = joined ? strdup_printf("PACKAGES=%s", joined) : NULL;
        } else if (in_context) {
                bool layout = strncmp(spec->from, "oci:", 4) == 0;
                e_a = strdup_printf("OCI_REF=%s%s/%s", layout ? "oci:" : "docker-archive:", src,
                                    layout ? spec->from + 4 : in_context);
        } else
                e_a = strdup_printf("OCI_REF=%s", spec->from);
        if (!debian) {
                /* what checks the image's layers (airlock-nodemgr passes its own binary) */
                const char *mgr = getenv("AIRLOCK_NODEMGR_BINARY");
                e_b = strdup_printf("OCI_CHECK=%s", mgr && *mgr ? mgr : AIRLOCK_NODEMGR_PATH);
        }
        if (!e_disk || !e_a || !e_b)
                return -ENOMEM;
        char *argv[8] = { (char *) "env", e_disk, e_a };
        size_t a = 3;
        if (e_b)
                argv[a++] = e_b;
        argv[a++] = (char *) "/bin/bash";
        argv[a++] = script;
        argv[a++] = rootfs;
        r = template_build_step(&b->track, b->ctx, argv, "base", b->name, dir, "rootfs.img", in_context ? src : NULL,
                                params, log_path, ret_error);
        if (in_context)
                (void) rm_rf(src);
        return r;
}

/* The base's disk, initramfs and kernel into dir. */
static int prepare_base(struct cbuild *b, const char *dir, const char *log_path, struct template_info **ret_base,
                        char **ret_error) {
        struct template_info *base = NULL;
        /* a Debian or OCI base boots the kernel and initramfs of the
         * minimal template (the agent lives in the initramfs) */
        const char *from = b->spec->base == TPLSPEC_BASE_TEMPLATE ? b->base : "minimal";
        int r = template_get(from, STEP_TIMEOUT_MS, &base, ret_error);
        if (r < 0) {
                if (!*ret_error)
                        *ret_error = strdup_printf("base template %s: %s", b->spec->from,
                                                   r == -ENOENT ? "no such template" : strerror(-r));
                return r;
        }
        char rootfs[PATH_BUF], initrd[PATH_BUF];
        pathf(rootfs, "%s/rootfs.img", dir);
        pathf(initrd, "%s/initramfs.cpio", dir);
        r = file_clone_or_copy(base->initrd, initrd, NULL);
        if (r >= 0 && b->spec->base == TPLSPEC_BASE_TEMPLATE)
                r = file_clone_or_copy(base->rootfs, rootfs, NULL);
        if (r < 0) {
                *ret_error = strdup_printf("cannot copy the base template's files: %s", strerror(-r));
                template_info_free(base);
                return r;
        }
        if (b->spec->base != TPLSPEC_BASE_TEMPLATE && (r = make_rootfs(b, dir, log_path, ret_error)) < 0) {
                template_info_free(base);
                return r;
        }
        *ret_base = base;
        return 0;
}

/* What images/oci.sh kept of an OCI image's config in the root file
 * system (/etc/airlock/oci-config.json, read without mounting it): its
 * environment, working directory and user become the build's defaults. */
#define OCI_CONFIG "/etc/airlock/oci-config.json"
#define OCI_CONFIG_MAX (1u << 20)

static int oci_defaults(const char *rootfs, json_t *env, char **cwd, char **user, char **ret_error) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        pid_t pid = fork();
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);
                if (dup2(p[1], 1) < 0 || null < 0 || dup2(null, 2) < 0)
                        _exit(127);
                execl("/sbin/debugfs", "debugfs", "-R", "cat " OCI_CONFIG, rootfs, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        _cleanup_free_ char *buf = malloc(OCI_CONFIG_MAX + 1);
        size_t len = 0;
        for (ssize_t k; buf && len < OCI_CONFIG_MAX && (k = read(p[0], buf + len, OCI_CONFIG_MAX - len)) != 0;) {
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        break;
                len += (size_t) k;
        }
        close(p[0]);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !buf)
                return pid < 0 ? -errno : -ENOMEM;
        _cleanup_(json_decrefp) json_t *cfg = json_loadb(buf, len, 0, NULL);
        json_t *c = json_object_get(cfg, "config");
        if (!json_is_object(cfg)) {
                *ret_error = strdup("the OCI image has no readable config");
                return -EBADMSG;
        }
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(c, "Env"), i, e) {
                const char *kv = json_string_value(e), *eq = kv ? strchr(kv, '=') : NULL;
                if (!eq || eq == kv || i >= TPLSPEC_ENV_MAX * 4)
                        continue;
                _cleanup_free_ char *key = strndup(kv, (size_t) (eq - kv));
                if (!key || json_object_set_new(env, key, json_string(eq + 1)) < 0)
                        return -ENOMEM;
        }
        const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
        if (wd && wd[0] == '/') {
                free(*cwd);
                if (!(*cwd = strdup(wd)))
                        return -ENOMEM;
        }
        /* "name", "uid" or "user:group": the user's part */
        const char *u = json_string_value(json_object_get(c, "User"));
        if (u && *u && *u != ':') {
                free(*user);
                if (!(*user = strndup(u, strcspn(u, ":"))))
                        return -ENOMEM;
        }
        return 0;
}

/* ---- in the build VM ---- */

struct work {
        struct cbuild *b;
        int log_fd;
        json_t *env;
        char *cwd, *user;
        bool context_unpacked;
};

static json_t *argv_json(char *const *argv) {
        json_t *a = json_array();
        for (size_t i = 0; a && argv[i]; i++)
                if (json_array_append_new(a, json_string(argv[i])) < 0)
                        return (json_decref(a), NULL);
        return a;
}

/* Runs argv in the build VM to its end; *ret_error says what failed
 * (`what` names the step). As root when as_root, else as the build's
 * user. */
static int guest_run(struct work *w, struct guestconn *g, const char *what, json_t *argv, bool as_root,
                     char **ret_error) {
        _cleanup_free_ char *msg = NULL;
        int code = 0;
        int r = argv ? guestops_exec(g,
                                     &(struct guestops_exec){ .argv = argv, .env = w->env, .cwd = as_root ? "/" : w->cwd,
                                                              .user = as_root ? NULL : w->user, .out_fd = w->log_fd },
                                     STEP_TIMEOUT_MS, &code, &msg)
                     : -ENOMEM;
        if (r == -ENOENT)
                *ret_error = strdup_printf("%s: %s not found in the image", what,
                                           json_string_value(json_array_get(argv, 0)));
        else if (r == -ETIMEDOUT)
                *ret_error = strdup_printf("%s: still running after %d s", what, STEP_TIMEOUT_MS / 1000);
        else if (r < 0)
                *ret_error = strdup_printf("%s: %s%s%s", what, strerror(-r), msg ? ": " : "", msg ?: "");
        else if (code != 0) {
                *ret_error = strdup_printf("%s exited with %d", what, code);
                r = -ECHILD;
        }
        return r;
}

/* COPY: the context unpacked once, then each source to dst as Docker
 * does (a directory's contents; into dst/ when dst ends in / or there
 * are several sources). Files stay root's. */
static const char copy_script[] =
        "set -e; to=$1; shift; cd " GUEST_CONTEXT_DIR "\n"
        "dir=; case $to in */) dir=1 ;; esac; [ $# -gt 1 ] && dir=1\n"
        "for s in \"$@\"; do\n"
        "  if [ -d \"$s\" ]; then mkdir -p \"$to\"; cp -a \"$s/.\" \"$to/\";\n"
        "  elif [ -n \"$dir\" ]; then mkdir -p \"$to\"; cp -a \"$s\" \"$to/\";\n"
        "  else mkdir -p \"$(dirname \"$to\")\"; cp -a \"$s\" \"$to\"; fi\n"
        "done\n";

static int step_copy(struct work *w, struct guestconn *g, const struct tplspec_step *st, const char *what,
                     char **ret_error) {
        if (!w->context_unpacked) {
                _cleanup_(json_decrefp) json_t *unpack =
                        json_pack("[s, s, s]", "/bin/sh", "-c",
                                  "set -e; mkdir -p " GUEST_CONTEXT_DIR "; tar -xf " GUEST_CONTEXT_TAR
                                  " -C " GUEST_CONTEXT_DIR "; rm -f " GUEST_CONTEXT_TAR);
                int r = guest_run(w, g, "unpacking the build context", unpack, true, ret_error);
                if (r < 0)
                        return r;
                w->context_unpacked = true;
        }
        _cleanup_free_ char *to = st->dst[0] == '/' ? strdup(st->dst)
                                                      : strdup_printf("%s%s%s", w->cwd,
                                                                      w->cwd[strlen(w->cwd) - 1] == '/' ? "" : "/",
                                                                      st->dst);
        _cleanup_(json_decrefp) json_t *argv = to ? json_pack("[s, s, s, s, s]", "/bin/sh", "-c", copy_script, "sh", to)
                                                  : NULL;
        for (size_t i = 0; argv && st->srcs[i]; i++)
                if (json_array_append_new(argv, json_string(st->srcs[i])) < 0)
                        return -ENOMEM;
        return guest_run(w, g, what, argv, true, ret_error);
}

/* A TCP connect to the guest's port from the VM's namespace works. */
static bool port_accepts(struct vmm *v, unsigned port) {
        int fd = -1;
        if (vmm_net_connect(v, (uint16_t) port, &fd) < 0)
                return false;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int err = -1;
        socklen_t len = sizeof err;
        bool ok = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
        close(fd);
        return ok;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

/* The start command, left running into the snapshot, and its readiness. */
static int start_and_wait(struct work *w, struct guestconn *g, struct vmm *v, char **ret_error) {
        const struct tplspec *spec = w->b->spec;
        _cleanup_(json_decrefp) json_t *argv = argv_json(spec->start);
        struct guestops_proc *p = NULL;
        _cleanup_free_ char *msg = NULL;
        int r = argv ? guestops_spawn(g,
                                      &(struct guestops_exec){ .argv = argv, .env = w->env, .cwd = w->cwd,
                                                               .user = w->user, .out_fd = w->log_fd },
                                      &p, &msg)
                     : -ENOMEM;
        if (r < 0) {
                *ret_error = r == -ENOENT ? strdup_printf("start: %s not found in the image", spec->start[0])
                                          : strdup_printf("start: %s%s%s", strerror(-r), msg ? ": " : "", msg ?: "");
                return r;
        }
        uint64_t deadline = now_monotonic_ns() + (uint64_t) spec->ready_timeout_s * 1000000000ULL;
        _cleanup_(json_decrefp) json_t *check = spec->ready_cmd ? argv_json(spec->ready_cmd) : NULL;
        bool ready = !spec->ready_port && !spec->ready_cmd;
        for (unsigned tries = 0; !ready; tries++) {
                int code;
                if (guestops_proc_wait(p, 0, &code) >= 0) {
                        *ret_error = strdup_printf("the start command exited with %d before it was ready", code);
                        r = -ECHILD;
                        break;
                }
                if (cancelled(w->b)) {
                        r = -ECANCELED;
                        break;
                }
                if (spec->ready_port)
                        ready = port_accepts(v, spec->ready_port);
                else {
                        _cleanup_free_ char *m = NULL;
                        int k = check ? guestops_exec(g,
                                                      &(struct guestops_exec){ .argv = check, .env = w->env,
                                                                               .cwd = w->cwd, .user = w->user,
                                                                               .out_fd = tries == 0 ? w->log_fd : -1 },
                                                      spec->ready_timeout_s * 1000, &code, &m)
                                      : -ENOMEM;
                        if (k == -ENOENT) {
                                *ret_error = strdup_printf("ready: %s not found in the image", spec->ready_cmd[0]);
                                r = k;
                                break;
                        }
                        ready = k >= 0 && code == 0;
                }
                if (ready)
                        break;
                if (now_monotonic_ns() > deadline) {
                        *ret_error = spec->ready_port
                                             ? strdup_printf("port %u did not accept within %u s", spec->ready_port,
                                                             spec->ready_timeout_s)
                                             : strdup_printf("the readiness command did not succeed within %u s",
                                                             spec->ready_timeout_s);
                        r = -ETIMEDOUT;
                        break;
                }
                sleep_ms(READY_POLL_MS);
        }
        /* stop following it: it runs on into the snapshot */
        guestops_proc_release(p);
        if (r >= 0 && w->log_fd >= 0)
                dprintf(w->log_fd, "ready\n");
        return r;
}

static int work(struct guestconn *g, struct vmm *v, void *userdata, char **ret_error) {
        struct work *w = userdata;
        struct cbuild *b = w->b;
        const struct tplspec *spec = b->spec;
        int r = 0;
        for (size_t i = 0; i < spec->n_steps && r >= 0; i++) {
                const struct tplspec_step *st = &spec->steps[i];
                char what[64];
                snprintf(what, sizeof what, "steps[%zu]", i);
                if (cancelled(b))
                        return -ECANCELED;
                switch (st->kind) {
                case TPLSPEC_RUN: {
                        _cleanup_free_ char *joined = NULL;
                        bool shell = st->argv[0] && st->argv[1] && st->argv[2] && !st->argv[3] &&
                                     strcmp(st->argv[0], "/bin/sh") == 0 && strcmp(st->argv[1], "-c") == 0;
                        progress(b, w->log_fd, "RUN %.120s", shell ? st->argv[2] : st->argv[0]);
                        _cleanup_(json_decrefp) json_t *argv = argv_json(st->argv);
                        snprintf(what, sizeof what, "steps[%zu] (RUN)", i);
                        r = guest_run(w, g, what, argv, false, ret_error);
                        break;
                }
                case TPLSPEC_COPY:
                        progress(b, w->log_fd, "COPY %s%s to %s", st->srcs[0], st->srcs[1] ? " ..." : "", st->dst);
                        snprintf(what, sizeof what, "steps[%zu] (COPY)", i);
                        r = step_copy(w, g, st, what, ret_error);
                        break;
                case TPLSPEC_ENV:
                        progress(b, w->log_fd, "ENV %s", st->key);
                        r = json_object_set_new(w->env, st->key, json_string(st->value)) < 0 ? -ENOMEM : 0;
                        break;
                case TPLSPEC_WORKDIR: {
                        progress(b, w->log_fd, "WORKDIR %s", st->path);
                        _cleanup_(json_decrefp) json_t *argv = json_pack("[s, s, s]", "mkdir", "-p", st->path);
                        snprintf(what, sizeof what, "steps[%zu] (WORKDIR)", i);
                        r = guest_run(w, g, what, argv, true, ret_error);
                        if (r >= 0) {
                                free(w->cwd);
                                r = (w->cwd = strdup(st->path)) ? 0 : -ENOMEM;
                        }
                        break;
                }
                case TPLSPEC_USER: {
                        progress(b, w->log_fd, "USER %s", st->path);
                        _cleanup_(json_decrefp) json_t *argv = json_pack("[s, s, s]", "id", "-u", st->path);
                        r = guest_run(w, g, "USER", argv, true, ret_error);
                        if (r == -ECHILD) {
                                free(*ret_error);
                                *ret_error = strdup_printf("steps[%zu]: user %s does not exist in the image", i,
                                                           st->path);
                        }
                        if (r >= 0) {
                                free(w->user);
                                r = (w->user = strdup(st->path)) ? 0 : -ENOMEM;
                        }
                        break;
                }
                }
        }
        if (r >= 0 && w->context_unpacked) {
                _cleanup_(json_decrefp) json_t *argv = json_pack("[s, s, s]", "rm", "-rf", GUEST_CONTEXT_DIR);
                r = guest_run(w, g, "removing the build context", argv, true, ret_error);
        }
        if (r >= 0)
                r = template_run_start(g, b->ctx, ret_error);
        if (r >= 0 && spec->start) {
                progress(b, w->log_fd, "start %.100s%s", spec->start[0],
                         spec->ready_port ? " (ready: port)" : spec->ready_cmd ? " (ready: command)" : "");
                r = start_and_wait(w, g, v, ret_error);
        }
        if (r >= 0) {
                /* the disk complete without the RAM: a template built on
                 * this one boots from it */
                _cleanup_(json_decrefp) json_t *argv = json_pack("[s]", "sync");
                r = guest_run(w, g, "sync", argv, true, ret_error);
                if (r == -ENOENT) {
                        free(*ret_error);
                        *ret_error = NULL;
                        r = 0;
                }
        }
        if (r >= 0)
                progress(b, w->log_fd, "snapshot");
        return r;
}

/* ---- the build ---- */

/* Whether a step copies from the build context (then the context goes
 * into the disk; an OCI base's archive in it is the host's only). */
static bool has_copy(const struct tplspec *spec) {
        for (size_t i = 0; i < spec->n_steps; i++)
                if (spec->steps[i].kind == TPLSPEC_COPY)
                        return true;
        return false;
}

static int write_manifest(const char *dir, struct cbuild *b, const struct template_info *base, unsigned memory_mib,
                          unsigned vcpus, const struct work *w, uint64_t build_ms) {
        char when[64], kname[PATH_BUF];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        /* the kernel directory's name, beside the templates */
        const char *k = base->kernel;
        const char *slash = strrchr(k, '/');
        snprintf(kname, sizeof kname, "%.*s", (int) (slash - k), k);
        const char *kdir = strrchr(kname, '/') ? strrchr(kname, '/') + 1 : kname;
        _cleanup_(json_decrefp) json_t *m =
                json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:s, s:s, s:b, s:O, s:o}", "name", b->name, "hash",
                          b->name + strlen(CUSTOM_PREFIX), "memory_mib", (json_int_t) memory_mib, "vcpus",
                          (json_int_t) vcpus, "kernel", kdir, "built_at", when, "build_ms", (json_int_t) build_ms,
                          "qemu", template_qemu_version(), "cpu", vmm_cpu_id(), "custom", 1, "env", w->env, "spec",
                          tplspec_to_json(b->spec));
        if (!m)
                return -ENOMEM;
        if (w->cwd && strcmp(w->cwd, "/") != 0)
                json_object_set_new(m, "workdir", json_string(w->cwd));
        if (w->user)
                json_object_set_new(m, "user", json_string(w->user));
        _cleanup_free_ char *text = json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS);
        char path[PATH_BUF];
        if (!text || pathf(path, "%s/manifest.json", dir) < 0)
                return -ENOMEM;
        return file_write_atomic(path, text, strlen(text), 0644);
}

static int build(struct cbuild *b, const char *log_path, char **ret_error) {
        const char *tdir = template_dir();
        char tmp[PATH_BUF], final[PATH_BUF], rnd[17];
        int r = random_id("", 8, rnd, sizeof rnd);
        if (r < 0)
                return r;
        pathf(final, "%s/%s", tdir, b->name);
        pathf(tmp, "%s/.tmp-%s-%d-%s", tdir, b->name, (int) getpid(), rnd);
        if (mkdir(tmp, 0755) < 0) {
                r = negative_errno();
                *ret_error = strdup_printf("cannot create %s: %s", tmp, strerror(-r));
                return r;
        }
        _cleanup_close_ int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        uint64_t t0 = now_monotonic_ns();
        const struct tplspec *spec = b->spec;
        struct template_info *base = NULL;
        progress(b, log_fd, "base %s%s", spec->base == TPLSPEC_BASE_TEMPLATE ? "template " : spec->base == TPLSPEC_BASE_DEBIAN ? "debian " : "", spec->from);
        r = prepare_base(b, tmp, log_path, &base, ret_error);
        char rootfs[PATH_BUF];
        pathf(rootfs, "%s/rootfs.img", tmp);
        if (r >= 0)
                r = prepare_disk(b, rootfs, spec->disk_mib, has_copy(spec) ? b->context : NULL, log_path,
                                 ret_error);
        if (r >= 0 && cancelled(b))
                r = -ECANCELED;
        unsigned memory_mib = spec->memory_mib ? spec->memory_mib
                              : spec->base == TPLSPEC_BASE_TEMPLATE ? base->memory_mib
                                                                     : DEFAULT_MEMORY_MIB;
        unsigned vcpus = spec->vcpus ? spec->vcpus : spec->base == TPLSPEC_BASE_TEMPLATE ? base->vcpus : 1;
        struct work w = { .b = b, .log_fd = log_fd };
        if (r >= 0) {
                /* the base template's defaults go on under the spec's */
                bool inherit = spec->base == TPLSPEC_BASE_TEMPLATE;
                w.env = inherit && base->env ? json_deep_copy(base->env) : json_object();
                w.cwd = strdup(inherit && base->workdir ? base->workdir : "/");
                w.user = inherit && base->user ? strdup(base->user) : NULL;
                if (!w.env || !w.cwd || (inherit && base->user && !w.user))
                        r = -ENOMEM;
                if (r >= 0 && spec->base == TPLSPEC_BASE_OCI)
                        r = oci_defaults(rootfs, w.env, &w.cwd, &w.user, ret_error);
        }
        if (r >= 0) {
                progress(b, log_fd, "boot the build VM (%u MiB, %u vCPU)", memory_mib, vcpus);
                char kdir[PATH_BUF];
                snprintf(kdir, sizeof kdir, "%s", base->kernel);
                *strrchr(kdir, '/') = 0;
                /* the build's network: the gateway serves it under the
                 * template's name, with the request's policy */
                r = template_boot_and_save(&(struct template_boot){ .ctx = b->ctx, .dir = tmp, .kernel_dir = kdir,
                                                                    .memory_mib = memory_mib, .vcpus = vcpus,
                                                                    .track = &b->track, .work = work,
                                                                    .userdata = &w, .network_id = b->name,
                                                                    .network = b->network },
                                           ret_error);
        }
        uint64_t build_ms = (now_monotonic_ns() - t0) / 1000000ULL;
        if (r >= 0) {
                r = write_manifest(tmp, b, base, memory_mib, vcpus, &w, build_ms);
                if (r < 0)
                        *ret_error = strdup_printf("cannot write manifest.json: %s", strerror(-r));
        }
        if (r >= 0 && rename(tmp, final) < 0) {
                r = negative_errno();
                *ret_error = strdup_printf("cannot rename %s to %s: %s", tmp, final, strerror(-r));
        }
        if (r < 0)
                rm_rf(tmp);
        if (log_fd >= 0)
                dprintf(log_fd, r >= 0 ? "\n=== built in %llu ms\n" : "\n=== failed after %llu ms\n",
                        (unsigned long long) build_ms);
        json_decref(w.env);
        free(w.cwd);
        free(w.user);
        template_info_free(base);
        return r;
}

static void *build_thread(void *arg) {
        struct cbuild *b = arg;
        pthread_mutex_lock(&clock_);
        while (running >= BUILDS_AT_ONCE && !b->cancelled && !stopping)
                pthread_cond_wait(&cturn, &clock_);
        running++;
        pthread_mutex_unlock(&clock_);

        char log_path[PATH_BUF];
        pathf(log_path, "%s/%s.log", template_dir(), b->name);
        char *error = NULL;
        int r = cancelled(b) ? -ECANCELED : build(b, log_path, &error);
        if (r < 0 && !error)
                error = strdup_printf(r == -ECANCELED ? "the build was cancelled" : "the build failed: %s",
                                      strerror(-r));
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, b->ctx, "build failed: %s", error ? error : "?");
                _cleanup_close_ int fd = open(log_path, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (fd >= 0 && error)
                        dprintf(fd, "error: %s\n", error);
        } else
                log_emit(LOG_LEVEL_INFO, b->ctx, "built in %llu ms",
                         (unsigned long long) ((now_monotonic_ns() - b->start_ns) / 1000000ULL));
        nodemetrics_template("custom", r >= 0 ? "built" : "failed",
                             (double) (now_monotonic_ns() - b->start_ns) / 1e9);
        pthread_mutex_lock(&clock_);
        request_free(b);
        b->state = r >= 0 ? C_READY : C_FAILED;
        free(b->error);
        b->error = r >= 0 ? NULL : error;
        if (r >= 0)
                free(error);
        b->end_ns = now_monotonic_ns();
        running--;
        pthread_cond_broadcast(&cturn);
        pthread_mutex_unlock(&clock_);
        return NULL;
}

/* The context, checked again as airlockd checked it (lib/buildctx: no
 * entry that escapes, no device or setuid file, within the limits; read
 * as a stream, nothing unpacked), must hold every path the spec names
 * (tplspec_context_paths()). */
static int check_context(const struct tplspec *spec, const char *context, char **ret_error) {
        _cleanup_free_ const char **srcs = tplspec_context_paths(spec);
        if (!srcs)
                return -ENOMEM;
        if (!context) {
                if (srcs[0])
                        *ret_error = strdup_printf("'%s' needs a build context", srcs[0]);
                return srcs[0] ? -EINVAL : 0;
        }
        _cleanup_close_ int fd = open(context, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        _cleanup_(buildctx_freep) struct buildctx *c = NULL;
        char err[BUILDCTX_ERR_MAX] = "";
        int r = buildctx_new(BUILDCTX_CONTEXT, NULL, &c);
        if (r >= 0)
                r = buildctx_feed_fd(c, fd, err);
        if (r == -ENOMEM || r == -EIO)
                return r;
        if (r < 0) {
                *ret_error = strdup(err);
                return -EINVAL;
        }
        for (size_t i = 0; srcs[i]; i++)
                if (!buildctx_has(c, srcs[i])) {
                        *ret_error = strdup_printf("'%s' is not in the build context", srcs[i]);
                        return -EINVAL;
                }
        return 0;
}

int template_custom_build(const struct template_build_request *q, char **ret_error) {
        char err[TPLSPEC_ERR_MAX] = "";
        _cleanup_(tplspec_freep) struct tplspec *spec = NULL;
        if (!template_custom_name(q->name)) {
                *ret_error = strdup_printf("'%s' is not a template build's name (c- and 32 hex digits)", q->name);
                return -EINVAL;
        }
        int r = tplspec_parse_json(q->spec, &spec, err);
        if (r < 0) {
                *ret_error = strdup(err);
                return -EINVAL;
        }
        if (spec->base == TPLSPEC_BASE_TEMPLATE && (!q->base || !name_is_valid(q->base))) {
                *ret_error = strdup("a template base needs the node's name of that template");
                return -EINVAL;
        }
        r = check_context(spec, q->context, ret_error);
        if (r < 0)
                return r;

        pthread_mutex_lock(&clock_);
        struct cbuild *b = find(q->name);
        if (b && b->state == C_BUILDING) {
                pthread_mutex_unlock(&clock_);
                return -EBUSY;
        }
        char dir[PATH_BUF], manifest[PATH_BUF];
        pathf(dir, "%s/%s", template_dir(), q->name);
        pathf(manifest, "%s/manifest.json", dir);
        if (access(manifest, F_OK) == 0) {
                pthread_mutex_unlock(&clock_);
                return 1;
        }
        if (stopping) {
                pthread_mutex_unlock(&clock_);
                return -ECANCELED;
        }
        if (!b) {
                b = calloc(1, sizeof *b);
                if (!b) {
                        pthread_mutex_unlock(&clock_);
                        return -ENOMEM;
                }
                snprintf(b->name, sizeof b->name, "%s", q->name);
                snprintf(b->ctx, sizeof b->ctx, "template=%s", q->name);
                b->next = builds;
                builds = b;
        }
        free(b->error);
        b->error = NULL;
        b->state = C_BUILDING;
        b->cancelled = false;
        b->step = 0;
        b->steps = 3 + (unsigned) spec->n_steps + (spec->start ? 1 : 0);
        snprintf(b->step_text, sizeof b->step_text, "waiting for a build slot");
        b->start_ns = now_monotonic_ns();
        b->end_ns = 0;
        b->spec = TAKE_PTR(spec);
        b->base = q->base ? strdup(q->base) : NULL;
        b->network = q->network ? strdup(q->network) : NULL;
        char log_path[PATH_BUF], ctx_path[PATH_BUF];
        pathf(log_path, "%s/%s.log", template_dir(), q->name);
        (void) unlink(log_path);
        r = 0;
        if (q->context) {
                pathf(ctx_path, "%s/.context-%s.tar", template_dir(), q->name);
                if (rename(q->context, ctx_path) < 0 && (r = file_clone_or_copy(q->context, ctx_path, NULL)) >= 0)
                        (void) unlink(q->context);
                b->context = strdup(ctx_path);
        }
        pthread_t t;
        if (r >= 0 && (!q->context || b->context) && (q->network == NULL || b->network) &&
            (r = -pthread_create(&t, NULL, build_thread, b)) == 0) {
                pthread_detach(t);
                pthread_mutex_unlock(&clock_);
                log_emit(LOG_LEVEL_INFO, b->ctx, "build started (%u steps)", b->steps);
                return 0;
        }
        request_free(b);
        b->state = C_FAILED;
        b->error = strdup_printf("cannot start the build: %s", strerror(r < 0 ? -r : ENOMEM));
        pthread_mutex_unlock(&clock_);
        return r < 0 ? r : -ENOMEM;
}

int template_custom_status(const char *name, json_t **ret) {
        pthread_mutex_lock(&clock_);
        struct cbuild *b = find(name);
        json_t *o = NULL;
        if (b) {
                uint64_t end = b->end_ns ? b->end_ns : now_monotonic_ns();
                o = json_pack("{s:s, s:s, s:I, s:I, s:s, s:I}", "name", name, "state", cstate_names[b->state], "step",
                              (json_int_t) b->step, "steps", (json_int_t) b->steps, "step_text", b->step_text,
                              "elapsed_ms", (json_int_t) ((end - b->start_ns) / 1000000ULL));
                if (o && b->error)
                        json_object_set_new(o, "error", json_string(b->error));
        }
        pthread_mutex_unlock(&clock_);
        if (!b) {
                struct template_info *t = NULL;
                int r = template_peek(name, &t);
                if (r < 0)
                        return r;
                template_info_free(t);
                o = json_pack("{s:s, s:s}", "name", name, "state", "ready");
        }
        if (!o)
                return -ENOMEM;
        char log_path[PATH_BUF];
        pathf(log_path, "%s/%s.log", template_dir(), name);
        int64_t size = file_size(log_path);
        json_object_set_new(o, "log_bytes", json_integer(size > 0 ? size : 0));
        *ret = o;
        return 0;
}

int template_custom_log(const char *name, uint64_t offset, size_t max, char **ret_data, size_t *ret_len,
                        bool *ret_done) {
        char log_path[PATH_BUF];
        if (!template_custom_name(name) || pathf(log_path, "%s/%s.log", template_dir(), name) < 0)
                return -ENOENT;
        pthread_mutex_lock(&clock_);
        struct cbuild *b = find(name);
        bool done = !b || b->state != C_BUILDING;
        pthread_mutex_unlock(&clock_);
        _cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return b ? (*ret_data = NULL, *ret_len = 0, *ret_done = done, 0) : negative_errno();
        char *buf = malloc(max ? max : 1);
        if (!buf)
                return -ENOMEM;
        ssize_t k = pread(fd, buf, max, (off_t) offset);
        if (k < 0) {
                free(buf);
                return negative_errno();
        }
        struct stat st;
        /* done only once everything was read */
        if (fstat(fd, &st) == 0 && (uint64_t) st.st_size > offset + (uint64_t) k)
                done = false;
        *ret_data = buf;
        *ret_len = (size_t) k;
        *ret_done = done;
        return 0;
}

int template_custom_delete(const char *name) {
        if (!template_custom_name(name))
                return -ENOENT;
        char dir[PATH_BUF], log_path[PATH_BUF];
        pathf(dir, "%s/%s", template_dir(), name);
        pathf(log_path, "%s/%s.log", template_dir(), name);
        /* a build of it is cancelled, and waited for: it removes its own
         * files (the entry is looked up anew each time, under the lock: a
         * second delete may free it meanwhile) */
        bool known = false;
        for (int i = 0; i < 600; i++) {
                pthread_mutex_lock(&clock_);
                struct cbuild *b = find(name);
                bool building = b && b->state == C_BUILDING;
                known = known || b != NULL;
                if (building) {
                        b->cancelled = true;
                        pthread_cond_broadcast(&cturn);
                        template_track_kill(&b->track);
                }
                pthread_mutex_unlock(&clock_);
                if (!building)
                        break;
                sleep_ms(100);
        }
        known = known || access(dir, F_OK) == 0 || access(log_path, F_OK) == 0;
        (void) rm_rf(dir);
        (void) unlink(log_path);
        pthread_mutex_lock(&clock_);
        for (struct cbuild **p = &builds; *p; p = &(*p)->next)
                if (strcmp((*p)->name, name) == 0 && (*p)->state != C_BUILDING) {
                        struct cbuild *gone = *p;
                        *p = gone->next;
                        free(gone->error);
                        free(gone);
                        break;
                }
        pthread_mutex_unlock(&clock_);
        return known ? 0 : -ENOENT;
}

void template_custom_shutdown(void) {
        /* the module's lock, then template.c's (template_track_kill):
         * the one order they are taken in */
        pthread_mutex_lock(&clock_);
        stopping = true;
        pthread_cond_broadcast(&cturn);
        for (struct cbuild *b = builds; b; b = b->next)
                template_track_kill(&b->track);
        pthread_mutex_unlock(&clock_);
}

void template_custom_shutdown_wait(int ms) {
        struct timespec deadline;
        node_deadline_after_ms(&deadline, ms);
        pthread_mutex_lock(&clock_);
        while (running > 0 && pthread_cond_timedwait(&cturn, &clock_, &deadline) != ETIMEDOUT)
                ;
        pthread_mutex_unlock(&clock_);
}

static void __attribute__((constructor)) init_cond(void) {
        node_cond_init(&cturn);
}
