/* SPDX-License-Identifier: Apache-2.0 */
#include "vmm.h"

#include <cpuid.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host.h"
#include "jail.h"
#include "log.h"
#include "macros.h"
#include "mgr.h"
#include "qmp.h"
#include "util.h"
#include "vmnet.h"

#define QMP_WAIT_MS 10000      /* QEMU start until QMP answers */
#define QMP_CMD_MS 5000        /* one ordinary QMP command */
#define MIGRATE_WAIT_MS 60000  /* device-state save/restore; takes ms with x-ignore-shared */
#define KILL_EXIT_WAIT_MS 30000 /* a SIGKILLed QEMU blocked in I/O, until it exits */
#define LOG_TAIL_BYTES 2048    /* of qemu.log, quoted when QEMU dies early */


#define VMM_UID_BASE_DEFAULT JAIL_VM_UID_BASE_DEFAULT
#define VMM_UID_COUNT_DEFAULT 65536u

/* The jail's uid range (vmm_jail_setup), under jail_lock. */
static pthread_mutex_t jail_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t uid_base = VMM_UID_BASE_DEFAULT, uid_count = VMM_UID_COUNT_DEFAULT;

/* ---- accelerator and host facts ---- */

const char *vmm_accel_name(enum vmm_accel a) {
        return a == VMM_ACCEL_KVM ? "kvm" : "tcg";
}

/* Whether KVM can run this node's VMs: what a jailed VMM can open, not
 * what we can. Under airlock-nodemgr the node cannot tell by itself (it
 * runs without groups or privileges): nodemgr probes it as root and passes
 * the answer on. Without nodemgr the node runs as root and probes the same
 * way (jail_kvm_usable()), for its first VM uid. */
static bool kvm_usable(char *reason, size_t n) {
        const char *probe = getenv(HOST_KVM_ENV);
        if (probe && (probe[0] == '0' || probe[0] == '1') && probe[1] == ' ') {
                snprintf(reason, n, "%s (probed by airlock-nodemgr)", probe + 2);
                return probe[0] == '1';
        }
        pthread_mutex_lock(&jail_lock);
        uid_t first = uid_base;
        pthread_mutex_unlock(&jail_lock);
        return jail_kvm_usable(first, reason, n);
}

int vmm_accel_pick(const char *want, enum vmm_accel *ret, char *reason, size_t n) {
        char buf[256];
        if (!reason || n == 0) {
                reason = buf;
                n = sizeof buf;
        }
        if (!want || strcmp(want, "auto") == 0) {
                bool kvm = kvm_usable(reason, n);
                *ret = kvm ? VMM_ACCEL_KVM : VMM_ACCEL_TCG;
                log_info("accelerator %s (auto): %s", vmm_accel_name(*ret), reason);
                return 0;
        }
        if (strcmp(want, "kvm") == 0) {
                if (!kvm_usable(reason, n)) {
                        log_error("accelerator kvm requested but unusable: %s", reason);
                        return -ENODEV;
                }
                *ret = VMM_ACCEL_KVM;
                log_info("accelerator kvm (requested): %s", reason);
                return 0;
        }
        if (strcmp(want, "tcg") == 0) {
                snprintf(reason, n, "tcg requested");
                *ret = VMM_ACCEL_TCG;
                log_info("accelerator tcg (requested)");
                return 0;
        }
        snprintf(reason, n, "unknown accelerator \"%s\" (auto, kvm or tcg)", want);
        return -EINVAL;
}

/*
 * Under TCG the guest TSC is the host's rdtsc, so the guest needs the host's
 * TSC rate. Most exact first: the kernel's own value (sysfs, on kernels that
 * export it), CPUID 0x15 (crystal ratio, Intel), the hypervisor timing leaf
 * 0x40000010 (VMware/some KVM setups, when we are a VM ourselves), then
 * /proc/cpuinfo "cpu MHz" (the kernel's tsc/cpu_khz where there is no cpufreq
 * driver, which is the case on VMs like these machines).
 */
static int host_tsc_khz_uncached(unsigned long *ret) {
        _cleanup_free_ char *s = NULL;
        if (file_read_all("/sys/devices/system/cpu/cpu0/tsc_freq_khz", 64, &s, NULL) >= 0) {
                uint64_t v;
                s[strcspn(s, "\n")] = 0;
                if (parse_u64(s, 100000000, &v) >= 0 && v > 0) {
                        *ret = (unsigned long) v;
                        return 0;
                }
        }

        unsigned a, b, c, d;
        if (__get_cpuid_max(0, NULL) >= 0x15) {
                __cpuid_count(0x15, 0, a, b, c, d);
                if (a && b && c) {
                        *ret = (unsigned long) ((uint64_t) c * b / a / 1000);
                        return 0;
                }
        }
        __cpuid(1, a, b, c, d);
        if (c & (1u << 31)) { /* running under a hypervisor */
                __cpuid(0x40000000, a, b, c, d);
                if (a >= 0x40000010 && a < 0x40010000) {
                        __cpuid(0x40000010, a, b, c, d);
                        if (a > 0) {
                                *ret = a;
                                return 0;
                        }
                }
        }

        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/cpuinfo", 64u << 20, &info, NULL);
        if (r < 0)
                return r;
        const char *v;
        size_t len;
        if (!host_cpuinfo_field(info, "cpu MHz", &v, &len))
                return -ENOENT;
        char num[32];
        if (len == 0 || len >= sizeof num)
                return -EINVAL;
        memcpy(num, v, len);
        num[len] = 0;
        char *end;
        errno = 0;
        double mhz = strtod(num, &end);
        if (errno != 0 || end == num || mhz < 1.0 || mhz > 100000.0)
                return -EINVAL;
        *ret = (unsigned long) (mhz * 1000.0 + 0.5);
        return 0;
}

int vmm_host_tsc_khz(unsigned long *ret) {
        /* Constant while we run; /proc/cpuinfo can take milliseconds to read
         * on big hosts, and every VM start asks. */
        static unsigned long cached;
        unsigned long khz = __atomic_load_n(&cached, __ATOMIC_RELAXED);
        if (khz == 0) {
                int r = host_tsc_khz_uncached(&khz);
                if (r < 0)
                        return r;
                __atomic_store_n(&cached, khz, __ATOMIC_RELAXED);
        }
        *ret = khz;
        return 0;
}

/* ---- argv building ---- */

struct argv {
        char **v;
        size_t n, cap;
};

static void argv_release(struct argv *a) {
        for (size_t i = 0; i < a->n; i++)
                free(a->v[i]);
        free(a->v);
        *a = (struct argv){ 0 };
}

static int argv_take(struct argv *a, char *s) {
        if (!s)
                return -ENOMEM;
        if (a->n + 2 > a->cap) {
                size_t ncap = a->cap ? a->cap * 2 : 64;
                char **nv = realloc(a->v, ncap * sizeof *nv);
                if (!nv) {
                        free(s);
                        return -ENOMEM;
                }
                a->v = nv;
                a->cap = ncap;
        }
        a->v[a->n++] = s;
        a->v[a->n] = NULL;
        return 0;
}

static int argv_add(struct argv *a, const char *s) {
        return argv_take(a, strdup(s));
}

_printf_(2, 3) static int argv_addf(struct argv *a, const char *fmt, ...) {
        va_list ap;
        char *s;
        va_start(ap, fmt);
        int k = vasprintf(&s, fmt, ap);
        va_end(ap);
        return argv_take(a, k < 0 ? NULL : s);
}

/* QemuOpts values end at a ',' unless it is doubled. */
static char *qemu_escape(const char *s) {
        size_t n = strlen(s), commas = 0;
        for (size_t i = 0; i < n; i++)
                commas += s[i] == ',';
        char *out = malloc(n + commas + 1), *o = out;
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                *o++ = s[i];
                if (s[i] == ',')
                        *o++ = ',';
        }
        *o = 0;
        return out;
}

static char *path_join(const char *dir, const char *name) {
        char *s;
        return asprintf(&s, "%s/%s", dir, name) < 0 ? NULL : s;
}

/*
 * The command line of ARCHITECTURE.md's appendix. Boot and restore must build
 * the same machine (same devices, same order) or the migration stream will
 * not load: only -incoming differs.
 */
static int build_argv(const struct vmm_config *c, const struct vmm *v, bool incoming, const char *binary,
                      const char *mem_path, int tap_fd, struct argv *a) {
        _cleanup_free_ char *mem = qemu_escape(mem_path ?: "");
        _cleanup_free_ char *rootfs = qemu_escape(c->rootfs);
        _cleanup_free_ char *guest = qemu_escape(v->guest_path);
        _cleanup_free_ char *qmp = qemu_escape(v->qmp_path);
        if (!mem || !rootfs || !guest || !qmp)
                return -ENOMEM;

        unsigned long khz = 0;
        int r = vmm_host_tsc_khz(&khz);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, c->log_ctx,
                          "cannot determine the host TSC frequency, booting without tsc_early_khz: %m");
        char tsc[64] = "";
        if (khz > 0)
                snprintf(tsc, sizeof tsc, " tsc_early_khz=%lu", khz);

        bool kvm = c->accel == VMM_ACCEL_KVM;
        if ((r = argv_add(a, binary)) < 0 ||
            (r = argv_add(a, "-M")) < 0 ||
            (r = argv_add(a, "microvm,x-option-roms=off,rtc=on,memory-backend=mem")) < 0 ||
            (r = argv_add(a, "-accel")) < 0 || (r = argv_add(a, kvm ? "kvm" : "tcg,tb-size=32")) < 0 ||
            (r = argv_add(a, "-cpu")) < 0 || (r = argv_add(a, kvm ? vmm_cpu_arg() : "max")) < 0 ||
            (r = argv_add(a, "-m")) < 0 || (r = argv_addf(a, "%u", c->memory_mib)) < 0 ||
            (r = argv_add(a, "-smp")) < 0 || (r = argv_addf(a, "%u", c->vcpus)) < 0 ||
            (r = argv_add(a, "-nodefaults")) < 0 || (r = argv_add(a, "-no-user-config")) < 0 ||
            (r = argv_add(a, "-display")) < 0 || (r = argv_add(a, "none")) < 0 ||
            (r = argv_add(a, "-no-reboot")) < 0 ||
            /* threads named "CPU n/TCG" (or /KVM): top -H shows where a
             * VM's time goes, and a test sees a paused vCPU stand still */
            (r = argv_add(a, "-name")) < 0 || (r = argv_add(a, "airlock,debug-threads=on")) < 0 ||
            /* QEMU's own seccomp filter, every deny option: no exec or
             * fork, no privilege changes, no obsolete syscalls, no
             * scheduler or resource tuning */
            (r = argv_add(a, "-sandbox")) < 0 ||
            (r = argv_add(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")) < 0 ||
            (r = argv_add(a, "-object")) < 0 ||
            (r = c->mem_anonymous ? argv_addf(a, "memory-backend-ram,id=mem,size=%uM", c->memory_mib)
                                  : argv_addf(a, "memory-backend-file,id=mem,size=%uM,mem-path=%s,share=%s",
                                              c->memory_mib, mem, c->mem_shared ? "on" : "off")) < 0 ||
            (r = argv_add(a, "-kernel")) < 0 || (r = argv_add(a, c->kernel)) < 0 ||
            (r = argv_add(a, "-initrd")) < 0 || (r = argv_add(a, c->initrd)) < 0 ||
            (r = argv_add(a, "-append")) < 0 ||
            (r = argv_addf(a, VMM_KERNEL_ARGS "%s airlock.root=/dev/vda%s%s", tsc,
                           c->cmdline && *c->cmdline ? " " : "", c->cmdline ?: "")) < 0 ||
            /* "file:" takes the rest verbatim: no escaping here. */
            (r = argv_add(a, "-serial")) < 0 || (r = argv_addf(a, "file:%s", v->console_path)) < 0 ||
            (r = argv_add(a, "-device")) < 0 || (r = argv_add(a, "virtio-serial-device")) < 0 ||
            (r = argv_add(a, "-chardev")) < 0 ||
            (r = argv_addf(a, "socket,id=ch0,path=%s,server=on,wait=off", guest)) < 0 ||
            (r = argv_add(a, "-device")) < 0 || (r = argv_add(a, "virtserialport,chardev=ch0,name=airlock.0")) < 0 ||
            /* writeback: guest flushes reach the disk, so a rootfs reflinked
             * after the guest froze its file systems is consistent even if
             * the host crashes later. */
            (r = argv_add(a, "-drive")) < 0 ||
            (r = argv_addf(a, "id=d0,file=%s,format=raw,if=none,cache=writeback", rootfs)) < 0 ||
            (r = argv_add(a, "-device")) < 0 || (r = argv_add(a, "virtio-blk-device,drive=d0")) < 0 ||
            /* the NIC: a tap in the VMM's network namespace, whose only
             * peer is the egress gateway (lib/vmnet); after the disk, so the
             * devices before it keep their places */
            (r = argv_add(a, "-netdev")) < 0 || (r = argv_addf(a, "tap,id=n0,fd=%d", tap_fd)) < 0 ||
            (r = argv_add(a, "-device")) < 0 ||
            (r = argv_add(a, "virtio-net-device,netdev=n0,mac=" VMNET_GUEST_MAC)) < 0 ||
            (r = argv_add(a, "-qmp")) < 0 || (r = argv_addf(a, "unix:%s,server=on,wait=off", qmp)) < 0)
                return r;
        if (incoming && ((r = argv_add(a, "-incoming")) < 0 || (r = argv_add(a, "defer")) < 0))
                return r;
        return 0;
}

/* The whole QEMU command line at debug level: what an operator needs to
 * rerun a VM by hand. */
static void log_cmdline(const struct argv *a, const char *ctx) {
        char line[4096];
        size_t off = 0;
        for (size_t i = 0; i < a->n && off < sizeof line; i++) {
                int k = snprintf(line + off, sizeof line - off, "%s%s", i ? " " : "", a->v[i]);
                if (k < 0)
                        return;
                off += (size_t) k;
        }
        log_emit(LOG_LEVEL_DEBUG, ctx, "starting %s", line);
}

/* ---- process ---- */

/* The last n - 1 bytes of a log, NUL-terminated, trailing newlines cut. */
static void log_tail_n(const char *path, char *out, size_t n) {
        out[0] = 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        off_t size = lseek(fd, 0, SEEK_END);
        if (size < 0)
                return;
        size_t want = MIN((size_t) size, n - 1);
        ssize_t k = pread(fd, out, want, size - (off_t) want);
        if (k < 0)
                return;
        out[k] = 0;
        while (k > 0 && (out[k - 1] == '\n' || out[k - 1] == '\r'))
                out[--k] = 0;
}

/* The last LOG_TAIL_BYTES of qemu.log for the node's log. */
static void log_tail(const char *path, char *out, size_t n) {
        log_tail_n(path, out, MIN(n, (size_t) LOG_TAIL_BYTES + 1));
}

static int pidfd_open_(pid_t pid) {
        return (int) syscall(SYS_pidfd_open, pid, 0);
}

static bool process_exited(const struct vmm *v) {
        if (v->pidfd >= 0) {
                struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                return poll(&p, 1, 0) > 0;
        }
        /* No pidfd (old kernel): look without reaping. */
        siginfo_t si = { 0 };
        if (waitid(P_PID, (id_t) v->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
                return errno == ECHILD;
        return si.si_pid != 0;
}

/* Gives a dying QEMU up to ms to finish exiting, so that a failure is
 * reported with its last words rather than as a broken socket. */
static bool process_exits_within(const struct vmm *v, int ms) {
        if (v->pidfd >= 0) {
                struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                return poll(&p, 1, ms) > 0;
        }
        return process_exited(v);
}

bool vmm_exited(struct vmm *v) {
        return process_exited(v);
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int fail_exited(struct vmm *v, const char *when) {
        char tail[LOG_TAIL_BYTES + 1];
        log_tail(v->log_path, tail, sizeof tail);
        log_emit(LOG_LEVEL_ERROR, v->log_ctx, "qemu exited during %s; qemu.log ends with: %s", when,
                 tail[0] ? tail : "(nothing)");
        return -ECHILD;
}

/* QEMU's last words in run_dir/qemu.log for a client: its last lines that
 * say something (at most QEMU_WORDS_MAX bytes), joined by "; ", without
 * the register dump QEMU adds to a vCPU's failure ("RAX=...", "CS =...",
 * "Code=..."); "" when it wrote none. */
#define QEMU_WORDS_MAX 600
#define QEMU_LOG_SCAN 8192 /* a register dump is 2-3 KiB: the failure is above it */
static bool is_dump_line(const char *l, size_t len) {
        size_t k = 0;
        while (k < len && k < 7 && (isalnum((unsigned char) l[k]) || l[k] == ' '))
                k++;
        return k >= 2 && k < len && l[k] == '=';
}

static void qemu_last_words(const char *run_dir, char *out, size_t n) {
        char path[PATH_MAX];
        out[0] = 0;
        if (n == 0 || snprintf(path, sizeof path, "%s/qemu.log", run_dir) >= (int) sizeof path)
                return;
        _cleanup_free_ char *tail = malloc(QEMU_LOG_SCAN + 1);
        if (!tail)
                return;
        log_tail_n(path, tail, QEMU_LOG_SCAN + 1);
        /* the lines that say something, newest last, within QEMU_WORDS_MAX */
        const char *keep[64];
        size_t lens[64], nk = 0, total = 0;
        for (char *e = tail + strlen(tail); e > tail && nk < ARRAY_SIZE(keep);) {
                char *b = e;
                while (b > tail && b[-1] != '\n')
                        b--;
                size_t len = (size_t) (e - b);
                while (len > 0 && (b[len - 1] == '\r' || b[len - 1] == ' '))
                        len--;
                if (len > 0 && !is_dump_line(b, len)) {
                        if (total + len + 2 > QEMU_WORDS_MAX)
                                break;
                        keep[nk] = b;
                        lens[nk++] = len;
                        total += len + 2;
                }
                e = b > tail ? b - 1 : tail;
        }
        size_t k = 0;
        for (size_t i = nk; i-- > 0 && k + 3 < n;) {
                for (size_t j = 0; j < lens[i] && k + 3 < n; j++)
                        out[k++] = keep[i][j] == '\t' ? ' ' : keep[i][j];
                if (i > 0 && k + 3 < n) {
                        out[k++] = ';';
                        out[k++] = ' ';
                }
        }
        out[k] = 0;
}

/* A line for the client after a VM start or restore failed with r at
 * step: QEMU's own words where it left any. */
static char *failure_line(const struct vmm_config *c, const char *step, int r) {
        char words[QEMU_WORDS_MAX + 8];
        qemu_last_words(c->run_dir, words, sizeof words);
        if (r == -ECHILD)
                return strdup_printf("QEMU exited while %s%s%s", step, words[0] ? ": " : " without a word",
                                     words);
        return strdup_printf("%s failed: %s%s%s", step, strerror(-r), words[0] ? "; QEMU's log ends: " : "", words);
}

/* ---- the jail: uids, cgroup limits, the template RAM, the spec ---- */

/* What QEMU needs beyond guest RAM: TCG's 32 MiB translation buffer, its
 * heap, page tables and I/O buffers (measured peak: see docs/security.md). */
#define VMM_MEMORY_MARGIN_MIB JAIL_VMM_MEMORY_MARGIN_MIB
#define VMM_PIDS_MAX JAIL_VMM_PIDS_MAX
#define VMM_NOFILE JAIL_VMM_NOFILE
#define RAM_COPIES_MAX 8

static uint8_t *uid_used; /* bitmap over slots: VMs of this node, live or adopted */
static uint32_t uid_cursor;
static char *qemu_path;   /* the binary, absolute (vmm_jail_setup) */
/* AIRLOCK_NODEMGR_SOCKET: airlock-nodemgr starts, signals and cleans up the
 * VMs (the node needs no privilege for them); unset: the node does it
 * itself, as root (AIRLOCK_PRIVSEP=0, tests). */
static char *mgr_socket;

/* One request to airlock-nodemgr; its refusal is logged. */
static int mgr_ask(const struct mgr_request *q, const int *fds, size_t n_fds, char **ret_reply, int *ret_fds,
                   size_t n_ret_fds, const char *ctx) {
        char err[256];
        int got[MGR_FDS_MAX];
        size_t n_got = 0;
        int r = mgr_call(mgr_socket, q, fds, n_fds, ret_reply, got, &n_got, err, sizeof err);
        if (r < 0) {
                if (r != -EBUSY)
                        log_errno(LOG_LEVEL_ERROR, r, ctx, "airlock-nodemgr refused %s: %s: %m", mgr_op_name(q->op),
                                  err[0] ? err : "no answer");
                return r;
        }
        for (size_t i = 0; i < n_ret_fds; i++)
                ret_fds[i] = i < n_got ? got[i] : -1;
        for (size_t i = n_ret_fds; i < n_got; i++)
                close(got[i]);
        return 0;
}

/* An absolute path for name: itself if it has a '/', else the first
 * executable in PATH (the jail execs without a PATH search). */
static int resolve_binary(const char *name, char **ret) {
        if (strchr(name, '/')) {
                char *p = realpath(name, NULL);
                if (!p)
                        return negative_errno();
                *ret = p;
                return 0;
        }
        const char *path = getenv("PATH") ?: "/usr/local/bin:/usr/bin:/bin";
        for (const char *d = path; *d;) {
                size_t n = strcspn(d, ":");
                _cleanup_free_ char *cand = strdup_printf("%.*s/%s", (int) n, d, name);
                if (!cand)
                        return -ENOMEM;
                if (n > 0 && access(cand, X_OK) == 0) {
                        char *p = realpath(cand, NULL);
                        if (!p)
                                return negative_errno();
                        *ret = p;
                        return 0;
                }
                d += n + (d[n] == ':');
        }
        return -ENOENT;
}

int vmm_jail_setup(const char *qemu_binary, uint32_t base, uint32_t count) {
        if (base == 0 || count == 0 || count > (1u << 20) || base > UINT32_MAX - count - 1)
                return -EINVAL;
        const char *sock = getenv("AIRLOCK_NODEMGR_SOCKET");
        if ((!sock || !*sock) && geteuid() != 0)
                return log_error_errno(-EPERM, "jailing VMs needs root or airlock-nodemgr (AIRLOCK_NODEMGR_SOCKET)");
        if (sock && *sock) {
                free(mgr_socket);
                if (!(mgr_socket = strdup(sock)))
                        return -ENOMEM;
                int k = mgr_ask(&(struct mgr_request){ .op = MGR_OP_PING }, NULL, 0, NULL, NULL, 0, NULL);
                if (k < 0)
                        return log_error_errno(k, "airlock-nodemgr does not answer on %s: %m", mgr_socket);
        }
        _cleanup_free_ char *bin = NULL;
        int r = resolve_binary(qemu_binary ?: "qemu-system-x86_64", &bin);
        if (r < 0)
                return log_error_errno(r, "cannot find the QEMU binary %s: %m", qemu_binary ?: "qemu-system-x86_64");
        uint8_t *used = calloc((count + 7) / 8, 1);
        if (!used)
                return -ENOMEM;
        pthread_mutex_lock(&jail_lock);
        free(uid_used);
        uid_used = used;
        uid_base = base;
        uid_count = count;
        free(qemu_path);
        qemu_path = TAKE_PTR(bin);
        pthread_mutex_unlock(&jail_lock);
        if (!mgr_socket)
                jail_cgroup_setup();
        log_info("vmm jail: qemu=%s uids %u..%u, namespaces mnt pid ipc uts net, private root; started by %s",
                 qemu_path, (unsigned) base, (unsigned) (base + count - 1), mgr_socket ? mgr_socket : "the node");
        return 0;
}

static bool uid_slot(uid_t uid, uint32_t *ret) {
        if (uid < uid_base || uid - uid_base >= uid_count)
                return false;
        *ret = uid - uid_base;
        return true;
}

/* Marks uid used or free; false when it is not a VM uid. */
static bool uid_mark(uid_t uid, bool used) {
        pthread_mutex_lock(&jail_lock);
        uint32_t slot;
        bool ok = uid_used && uid_slot(uid, &slot);
        if (ok) {
                if (used)
                        uid_used[slot / 8] |= (uint8_t) (1u << (slot % 8));
                else
                        uid_used[slot / 8] &= (uint8_t) ~(1u << (slot % 8));
        }
        pthread_mutex_unlock(&jail_lock);
        return ok;
}

/* A free uid, marked used. Round robin, so a uid is not reused at once. */
static int uid_next(uid_t *ret) {
        pthread_mutex_lock(&jail_lock);
        if (!uid_used && !(uid_used = calloc((uid_count + 7) / 8, 1))) {
                pthread_mutex_unlock(&jail_lock);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < uid_count; i++) {
                uint32_t slot = uid_cursor++ % uid_count;
                if (!(uid_used[slot / 8] & (1u << (slot % 8)))) {
                        uid_used[slot / 8] |= (uint8_t) (1u << (slot % 8));
                        *ret = (uid_t) (uid_base + slot);
                        pthread_mutex_unlock(&jail_lock);
                        return 0;
                }
        }
        pthread_mutex_unlock(&jail_lock);
        return -EUSERS;
}

/* A uid and its cgroup with limits: a uid whose cgroup holds processes is
 * in use by a VM we do not know (another node on this host) and skipped.
 * No cgroup controller at all: the uid alone (warned once at setup). */
static int uid_claim(const struct vmm_config *c, uid_t *ret, char **procs, size_t *ret_n) {
        struct jail_cgroup_limits l = {
                .memory_bytes = ((uint64_t) (c->cgroup_memory_mib ?: c->memory_mib) + VMM_MEMORY_MARGIN_MIB) << 20,
                .pids = VMM_PIDS_MAX,
                .cpus = c->cgroup_vcpus ?: c->vcpus,
        };
        for (int tries = 0; tries < 64; tries++) {
                uid_t uid;
                int r = uid_next(&uid);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, c->log_ctx, "no free VM uid: %m");
                r = jail_cgroup_create(uid, &l, procs, ret_n);
                if (r == -EBUSY)
                        continue; /* stays marked: in use elsewhere */
                if (r < 0) {
                        uid_mark(uid, false);
                        return log_errno(LOG_LEVEL_ERROR, r, c->log_ctx,
                                         "cannot make the cgroup of VM uid %u (not starting it unlimited): %m",
                                         (unsigned) uid);
                }
                *ret = uid;
                return 0;
        }
        return log_errno(LOG_LEVEL_ERROR, -EUSERS, c->log_ctx, "no VM uid with a free cgroup");
}

bool vmm_via_nodemgr(void) {
        return mgr_socket != NULL;
}

int vmm_template_step(const char *step, const char *name, const char *dir, const char *out, const char *kernel_dir,
                      char *const *params, int log_fd, const char *ctx) {
        if (!mgr_socket)
                return -EOPNOTSUPP;
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->op = MGR_OP_TEMPLATE_STEP;
        if (str_copy(q->step, sizeof q->step, step) < 0 || str_copy(q->name, sizeof q->name, name) < 0 ||
            str_copy(q->dir, sizeof q->dir, dir) < 0 || str_copy(q->out, sizeof q->out, out) < 0 ||
            str_copy(q->kernel_dir, sizeof q->kernel_dir, kernel_dir) < 0)
                return -ENAMETOOLONG;
        for (size_t i = 0; params && params[i]; i++) {
                if (i == MGR_ARGV_MAX || strlen(params[i]) >= MGR_ARG_MAX) {
                        mgr_request_release(q);
                        return -E2BIG;
                }
                if (!(q->argv[i] = strdup(params[i]))) {
                        mgr_request_release(q);
                        return -ENOMEM;
                }
        }
        int r = mgr_ask(q, &log_fd, 1, NULL, NULL, 0, ctx);
        mgr_request_release(q);
        return r;
}

int vmm_file_reclaim(const char *path, unsigned mode, const char *ctx) {
        if (!mgr_socket)
                return -EOPNOTSUPP;
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        if (str_copy(q->path, sizeof q->path, path) < 0)
                return -ENAMETOOLONG;
        q->op = MGR_OP_FILE_RECLAIM;
        q->mode = mode;
        return mgr_ask(q, NULL, 0, NULL, NULL, 0, ctx);
}

/* Removes the cgroup of a VM uid whose VM is gone. */
static int cgroup_remove(uid_t uid, const char *ctx) {
        if (!mgr_socket)
                return jail_cgroup_remove(uid);
        return mgr_ask(&(struct mgr_request){ .op = MGR_OP_CGROUP_REMOVE, .uid = uid }, NULL, 0, NULL, NULL, 0, ctx);
}

/* SIGKILLs a VM process that is not our child (started by airlock-nodemgr
 * or by an earlier node) and waits up to wait_ms for it to end. */
static int kill_vm(pid_t pid, int pidfd, uint64_t start_time, uid_t uid, int wait_ms, const char *ctx) {
        int r = 0;
        if (mgr_socket)
                r = mgr_ask(&(struct mgr_request){ .op = MGR_OP_VMM_SIGNAL, .pid = pid, .start_time = start_time,
                                                   .uid = uid, .signal = SIGKILL },
                            NULL, 0, NULL, NULL, 0, ctx);
        else if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0)
                r = negative_errno();
        if (r >= 0) {
                struct pollfd p = { .fd = pidfd, .events = POLLIN };
                (void) poll(&p, 1, wait_ms);
        }
        return r;
}
void vmm_kill(struct vmm *v) {
        if (!v || v->pid <= 0 || process_exited(v))
                return;
        if (mgr_socket || v->adopted)
                (void) kill_vm(v->pid, v->pidfd, v->start_time, v->uid, 0, v->log_ctx);
        else
                (void) kill(v->pid, SIGKILL);
}

/* Ends a VM's jail bookkeeping once its process is gone. */
static void uid_release(struct vmm *v) {
        if (v->uid == 0)
                return;
        int r = cgroup_remove(v->uid, v->log_ctx);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, v->log_ctx, "cannot remove the cgroup of uid %u: %m", (unsigned) v->uid);
        uid_mark(v->uid, false);
        v->uid = 0;
}

/*
 * The template RAM for share=off restores. QEMU 7.2 opens mem-path
 * O_RDWR even for a private mapping, so a jailed QEMU given the template
 * file itself could write it, and with it the memory of every sandbox of
 * that template. It gets a sealed memfd copy instead (F_SEAL_WRITE: no one
 * writes it; private mappings still work), one per template file, shared
 * by all its VMs like the file's page cache was; without holes (below).
 */
struct ram_copy {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
        int fd;
};
static struct ram_copy ram_copies[RAM_COPIES_MAX];
static size_t n_ram_copies;
static pthread_mutex_t ram_lock = PTHREAD_MUTEX_INITIALIZER;

/* Writes zeros over [from, to) of fd. */
static int write_zeros(int fd, off_t from, off_t to) {
        static const char zeros[1 << 16];
        for (off_t o = from; o < to;) {
                ssize_t k = pwrite(fd, zeros, (size_t) MIN(to - o, (off_t) sizeof zeros), o);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? negative_errno() : -EIO;
                o += k;
        }
        return 0;
}

/*
 * The copy has no holes: the file's are written as zeros. A VM maps the
 * copy privately, and the first migration of any of them (fork, full
 * snapshot, suspend) reads all of its RAM; a read of a hole made the
 * kernel allocate and clear a page there and then, inside the pause
 * (~420 ms of a 512 MiB guest's first fork), and charged it to the cgroup
 * of the VM that read it, which the kernel OOM-killed for it on a 1 GiB
 * template. Written here, the pages are the node's, cleared once per
 * template: the memory the first migration took anyway. (fallocate()
 * would allocate them but leave the clearing to the first read.)
 */
static int ram_copy_make(int in, off_t size, int *ret) {
        _cleanup_close_ int fd = memfd_create("airlock-template-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, size) < 0)
                return negative_errno();
        for (off_t off = 0; off < size;) {
                off_t data = lseek(in, off, SEEK_DATA);
                if (data < 0 && errno != ENXIO)
                        return negative_errno();
                if (data < 0 || data > size)
                        data = size;
                int r = write_zeros(fd, off, data);
                if (r < 0)
                        return r;
                if (data == size)
                        break;
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0 || lseek(fd, data, SEEK_SET) < 0)
                        return negative_errno();
                for (off_t o = data; o < hole;) {
                        ssize_t k = sendfile(fd, in, &o, (size_t) MIN(hole - o, (off_t) 1 << 30));
                        if (k < 0 && errno != EINTR)
                                return negative_errno();
                        if (k == 0)
                                return -EIO;
                }
                off = hole;
        }
        /* EBUSY: the kernel still holds references to pages just written
         * (the copy's own, briefly): they drop in a moment */
        int k;
        for (int i = 0; (k = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) < 0 &&
                        errno == EBUSY && i < 50;
             i++)
                nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
        if (k < 0)
                return negative_errno();
        *ret = TAKE_FD(fd);
        return 0;
}

static int dup_to(int fd, int *ret) {
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (d < 0)
                return negative_errno();
        *ret = d;
        return 0;
}

/* A new fd (the caller closes it) of the sealed copy of the RAM file path. */
static int template_ram_fd(const char *path, const char *ctx, int *ret) {
        _cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (in < 0 || fstat(in, &st) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "cannot open the RAM file %s: %m", path);
        pthread_mutex_lock(&ram_lock);
        int r = -ENOENT;
        for (size_t i = 0; i < n_ram_copies && r == -ENOENT; i++) {
                struct ram_copy *c = &ram_copies[i];
                if (c->dev == st.st_dev && c->ino == st.st_ino && c->size == st.st_size &&
                    c->mtime.tv_sec == st.st_mtim.tv_sec && c->mtime.tv_nsec == st.st_mtim.tv_nsec)
                        r = dup_to(c->fd, ret);
        }
        if (r == -ENOENT) {
                uint64_t t0 = now_monotonic_ns();
                int fd;
                r = ram_copy_make(in, st.st_size, &fd);
                if (r >= 0) {
                        if (n_ram_copies == RAM_COPIES_MAX) { /* VMs keep theirs */
                                close(ram_copies[0].fd);
                                memmove(ram_copies, ram_copies + 1, sizeof ram_copies[0] * --n_ram_copies);
                        }
                        ram_copies[n_ram_copies++] = (struct ram_copy){ st.st_dev, st.st_ino, st.st_size, st.st_mtim,
                                                                        fd };
                        log_emit(LOG_LEVEL_INFO, ctx, "sealed copy of the template RAM %s made in %llu ms", path,
                                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
                        r = dup_to(fd, ret);
                }
        }
        pthread_mutex_unlock(&ram_lock);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "cannot copy the RAM file %s: %m", path);
        return 0;
}

/* A file the jailed QEMU writes: its uid owns it, no one else may. */
static int give_file(const char *path, uid_t uid, const char *ctx) {
        if (chown(path, uid, uid) < 0 || chmod(path, 0600) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "cannot hand %s to uid %u: %m", path,
                                 (unsigned) uid);
        return 0;
}

/* Text of the jail's mounts: the spec borrows these strings. */
struct jail_paths {
        char link[4][PATH_MAX];
        char *disk, *mem, *root;
};

static void jail_paths_release(struct jail_paths *p) {
        free(p->disk);
        free(p->mem);
        free(p->root);
}

/* The jail of c: what the private root holds, each at its host path. */
static int jail_mounts(const struct vmm_config *c, const struct vmm *v, const char *binary, bool proc,
                       struct jail_paths *p, struct jail_mount *m, size_t *ret_n) {
        size_t n = 0;
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, "/usr", "/usr", -1 };
        static const char *const merged[] = { "/lib", "/lib64", "/bin", "/sbin" };
        for (size_t i = 0; i < ARRAY_SIZE(merged); i++) {
                struct stat st;
                if (lstat(merged[i], &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        ssize_t k = readlink(merged[i], p->link[i], sizeof p->link[i] - 1);
                        if (k <= 0)
                                return negative_errno();
                        p->link[i][k] = 0;
                        m[n++] = (struct jail_mount){ JAIL_SYMLINK, p->link[i], merged[i], -1 };
                } else if (S_ISDIR(st.st_mode))
                        m[n++] = (struct jail_mount){ JAIL_BIND_RO, merged[i], merged[i], -1 };
        }
        if (access("/etc/ld.so.cache", R_OK) == 0)
                m[n++] = (struct jail_mount){ JAIL_BIND_RO, "/etc/ld.so.cache", "/etc/ld.so.cache", -1 };
        if (strncmp(binary, "/usr/", 5) != 0)
                m[n++] = (struct jail_mount){ JAIL_BIND_RO, binary, binary, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, c->kernel, c->kernel, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RO, c->initrd, c->initrd, -1 };
        m[n++] = (struct jail_mount){ JAIL_BIND_RW, v->vm_dir, v->vm_dir, -1 };
        /* The disk at the path QEMU is given (the run dir's disk.img link):
         * a bind of the file itself, so a reopen by path (migrations) finds
         * it even after a warm VM's disk moved on the host. */
        if (!(p->disk = realpath(c->rootfs, NULL)))
                return negative_errno();
        m[n++] = (struct jail_mount){ JAIL_BIND_RW, p->disk, c->rootfs, -1 };
        if (c->mem_shared && !c->mem_anonymous) {
                if (!(p->mem = realpath(c->mem_path, NULL)))
                        return negative_errno();
                m[n++] = (struct jail_mount){ JAIL_BIND_RW, p->mem, c->mem_path, -1 };
        }
        static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++)
                m[n++] = (struct jail_mount){ JAIL_BIND_DEV, devs[i], devs[i], -1 };
        if (c->accel == VMM_ACCEL_KVM)
                m[n++] = (struct jail_mount){ JAIL_DEV_NODE, "/dev/kvm", "/dev/kvm", -1 }; /* its own node */
        /* only for mem-path=/proc/self/fd/3 (the sealed template RAM) */
        if (proc)
                m[n++] = (struct jail_mount){ JAIL_PROC, NULL, "/proc", -1 };
        *ret_n = n;
        return 0;
}

/* ---- peers ---- */

/* Who may be on the other end of v's sockets. */
static int vmm_peer(const struct vmm *v, struct jail_peer *ret) {
        struct stat st = { .st_dev = v->exe_dev, .st_ino = v->exe_ino };
        /* the binary recorded at its start (a QEMU upgrade since does not
         * disown running VMs); records without one: the configured binary */
        if (v->exe_ino == 0 && (!qemu_path || stat(qemu_path, &st) < 0))
                return qemu_path ? negative_errno() : -ENOENT;
        *ret = (struct jail_peer){ .pid = v->pid, .pidfd = v->pidfd, .start_time = v->start_time, .uid = v->uid,
                                   .exe_dev = st.st_dev, .exe_ino = st.st_ino };
        return 0;
}

/* Connects to one of v's sockets and proves the listener is v's QEMU
 * before a byte goes either way. -ENOENT/-ECONNREFUSED while it is not
 * there yet; -EPERM (logged) for anyone else. */
static int vmm_connect(struct vmm *v, const char *path, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(path);
        if (n >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, n + 1);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return negative_errno();
        struct jail_peer want;
        int r = vmm_peer(v, &want);
        if (r >= 0 && mgr_socket) {
                /* an unprivileged node cannot look at another uid's
                 * /proc/PID/exe: airlock-nodemgr proves the binary (and the
                 * uid, and the start time), with a pidfd of its own */
                want.exe_ino = 0;
                r = mgr_ask(&(struct mgr_request){ .op = MGR_OP_VMM_VERIFY, .pid = v->pid,
                                                   .start_time = v->start_time, .uid = v->uid },
                            NULL, 0, NULL, NULL, 0, v->log_ctx);
                if (r < 0 && r != -ENOMEM)
                        r = -EPERM;
        }
        if (r >= 0)
                r = jail_peer_verify(fd, &want);
        if (r < 0) {
                if (r == -ENOENT || r == -ECONNREFUSED) /* those mean "not there yet" to callers */
                        r = -EPERM;
                struct ucred cred = { 0 };
                socklen_t len = sizeof cred;
                (void) getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
                return log_errno(LOG_LEVEL_ERROR, r == -EPERM ? -EPERM : r, v->log_ctx,
                                 "refusing %s: its listener (pid %d uid %u) is not this VM's QEMU (pid %d uid %u): %m",
                                 path, (int) cred.pid, (unsigned) cred.uid, (int) v->pid, (unsigned) v->uid);
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* QEMU sets up the QMP socket early but answers only once its main loop
 * runs; retry connecting until then, and notice if it dies instead. */
static int wait_qmp(struct vmm *v) {
        uint64_t deadline = now_monotonic_ns() + QMP_WAIT_MS * 1000000ull;
        for (;;) {
                if (process_exited(v))
                        return fail_exited(v, "start-up");
                uint64_t now = now_monotonic_ns();
                if (now >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx,
                                         "qemu did not answer on QMP within %d ms", QMP_WAIT_MS);
                int fd;
                int r = vmm_connect(v, v->qmp_path, &fd);
                if (r == -ENOENT || r == -ECONNREFUSED) {
                        sleep_ms(2);
                        continue;
                }
                if (r < 0)
                        return r;
                r = qmp_connect_fd(fd, (int) ((deadline - now) / 1000000), &v->qmp);
                if (r >= 0)
                        return 0;
                if (process_exits_within(v, 500))
                        return fail_exited(v, "start-up");
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "QMP handshake with qemu failed: %m");
        }
}

static int vmm_new(const struct vmm_config *c, struct vmm **ret) {
        if (!c || !c->kernel || !c->initrd || !c->rootfs || (!c->mem_path && !c->mem_anonymous) || !c->run_dir ||
            c->memory_mib == 0 ||
            c->vcpus == 0)
                return -EINVAL;

        struct vmm *v = calloc(1, sizeof *v);
        if (!v)
                return -ENOMEM;
        v->pid = -1;
        v->pidfd = -1;
        v->gw_fds[0] = v->gw_fds[1] = -1;
        v->accel = c->accel;
        v->vm_dir = path_join(c->run_dir, "vm");
        v->qmp_path = path_join(c->run_dir, "vm/qmp.sock");
        v->guest_path = path_join(c->run_dir, "vm/guest.sock");
        v->console_path = path_join(c->run_dir, "vm/console.log");
        v->log_path = path_join(c->run_dir, "qemu.log");
        v->pid_path = path_join(c->run_dir, "vmm.pid");
        v->log_ctx = strdup(c->log_ctx ?: "");
        if (!v->vm_dir || !v->qmp_path || !v->guest_path || !v->console_path || !v->log_path || !v->pid_path ||
            !v->log_ctx) {
                vmm_destroy(v);
                return -ENOMEM;
        }
        *ret = v;
        return 0;
}

/* Writes run_dir/vmm.pid ("PID STARTTIME UID EXEDEV EXEINO"), so a node
 * that restarts finds this VM again, checks its peers and cleans up after
 * it. */
static int record_pid(struct vmm *v) {
        int r = jail_process_start_time(v->pid, &v->start_time);
        if (r < 0)
                return r;
        char line[128];
        int n = snprintf(line, sizeof line, "%d %" PRIu64 " %u %" PRIu64 " %" PRIu64 "\n", (int) v->pid,
                         v->start_time, (unsigned) v->uid, (uint64_t) v->exe_dev, (uint64_t) v->exe_ino);
        return file_write_replace(v->pid_path, line, (size_t) n, 0600);
}

/* Reads run_dir/vmm.pid and returns a pidfd for the process it names, if
 * that very process (same start time) still runs. -ESRCH otherwise. The
 * uid is 0 in records of unjailed VMs (older nodes). */
static int recorded_pidfd(const char *pid_path, pid_t *ret_pid, uint64_t *ret_start, uid_t *ret_uid,
                          struct vmm *ret_exe) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = file_read_all(pid_path, 128, &text, &len);
        if (r < 0)
                return r == -ENOENT ? -ESRCH : r;
        int pid;
        uint64_t want, have, dev = 0, ino = 0;
        unsigned uid = 0;
        int k = sscanf(text, "%d %" SCNu64 " %u %" SCNu64 " %" SCNu64, &pid, &want, &uid, &dev, &ino);
        if (k < 2 || pid <= 1)
                return -EBADMSG;
        if (ret_uid)
                *ret_uid = (uid_t) uid;
        if (ret_exe && k == 5) {
                ret_exe->exe_dev = (dev_t) dev;
                ret_exe->exe_ino = (ino_t) ino;
        }
        int fd = pidfd_open_(pid);
        if (fd < 0)
                return -ESRCH;
        /* checked after the pidfd exists: it cannot come to name another process */
        if (jail_process_start_time(pid, &have) < 0 || have != want) {
                close(fd);
                return -ESRCH;
        }
        *ret_pid = pid;
        if (ret_start)
                *ret_start = want;
        return fd;
}

int vmm_adopt(const char *run_dir, enum vmm_accel accel, const char *log_ctx, struct vmm **ret) {
        struct vmm_config c = { .kernel = "-", .initrd = "-", .rootfs = "-", .mem_path = "-", .run_dir = run_dir,
                                .memory_mib = 1, .vcpus = 1, .accel = accel, .log_ctx = log_ctx };
        struct vmm *v;
        int r = vmm_new(&c, &v);
        if (r < 0)
                return r;
        v->adopted = true;
        uid_t uid = 0;
        r = recorded_pidfd(v->pid_path, &v->pid, &v->start_time, &uid, v);
        if (r < 0) {
                v->pid = -1;
                vmm_destroy(v);
                return r;
        }
        v->pidfd = r;
        /* ours again: its peers are checked against it, its cgroup goes with it */
        v->uid = uid;
        if (!uid_mark(uid, true))
                log_emit(LOG_LEVEL_WARN, v->log_ctx, "adopting pid %d, recorded with uid %u outside the VM uids",
                         (int) v->pid, (unsigned) uid);
        int fd;
        r = vmm_connect(v, v->qmp_path, &fd);
        if (r >= 0)
                r = qmp_connect_fd(fd, QMP_WAIT_MS, &v->qmp);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot reconnect to QMP of pid %d: %m", (int) v->pid);
                vmm_destroy(v); /* a VM we cannot drive is of no use: it goes */
                return r;
        }
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm adopted pid=%d uid=%u", (int) v->pid, (unsigned) v->uid);
        *ret = v;
        return 0;
}

int vmm_kill_recorded(const char *run_dir) {
        _cleanup_free_ char *pid_path = path_join(run_dir, "vmm.pid");
        if (!pid_path)
                return -ENOMEM;
        pid_t pid;
        uid_t uid = 0;
        uint64_t start = 0;
        int fd = recorded_pidfd(pid_path, &pid, &start, &uid, NULL);
        if (fd == -ESRCH) {
                uint32_t slot;
                if (uid_slot(uid, &slot)) /* its VM is gone; its cgroup may be left */
                        (void) cgroup_remove(uid, NULL);
                return 0;
        }
        if (fd < 0)
                return fd;
        int r = kill_vm(pid, fd, start, uid, 1000, NULL);
        if (r >= 0) {
                log_info("killed the VM pid=%d an earlier node left in %s", (int) pid, run_dir);
                uint32_t slot;
                if (uid_slot(uid, &slot))
                        (void) cgroup_remove(uid, NULL);
        }
        close(fd);
        return r;
}

/* The JSON number key of reply, or -EBADMSG. */
static int reply_u64(json_t *o, const char *key, uint64_t *ret) {
        json_t *x = json_object_get(o, key);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
                return -EBADMSG;
        *ret = (uint64_t) json_integer_value(x);
        return 0;
}

/* spawn_jailed() through airlock-nodemgr: the node prepares what is its
 * own (the VM dir, the RAM file of a boot, the sealed template RAM, the
 * command line, QEMU's log), nodemgr checks it all, hands the VM's files
 * to its uid, makes the cgroup and starts the jail; we get a pidfd. */
static int spawn_remote(const struct vmm_config *c, struct vmm *v, bool incoming, const char *binary) {
        _cleanup_free_ struct mgr_request *q = calloc(1, sizeof *q);
        struct argv a = { 0 };
        _cleanup_close_ int ram_fd = -1, log_fd = -1;
        _cleanup_free_ char *disk = NULL;
        int r;
        if (!q)
                return -ENOMEM;
        (void) rm_rf(v->vm_dir); /* of the VM before (another uid) */
        if (mkdir(v->vm_dir, 0700) < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m", v->vm_dir);
        bool template_ram = !c->mem_shared && !c->mem_anonymous;
        if (c->mem_shared && !c->mem_anonymous) {
                _cleanup_close_ int mfd = open(c->mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (mfd < 0)
                        return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m",
                                         c->mem_path);
        }
        if (template_ram && (r = template_ram_fd(c->mem_path, v->log_ctx, &ram_fd)) < 0)
                return r;
        if (!(disk = realpath(c->rootfs, NULL)))
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot resolve %s: %m", c->rootfs);
        if ((r = build_argv(c, v, incoming, binary, template_ram ? "/proc/self/fd/3" : c->mem_path, template_ram ? 4 : 3, &a)) < 0)
                return r;
        log_cmdline(&a, v->log_ctx);
        log_fd = open(v->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        if (log_fd < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot open %s: %m", v->log_path);
                goto out;
        }
        if (a.n > MGR_ARGV_MAX) {
                r = log_errno(LOG_LEVEL_ERROR, -E2BIG, v->log_ctx, "QEMU command line too long: %m");
                goto out;
        }
        q->op = MGR_OP_VMM_SPAWN;
        q->template_ram = template_ram;
        q->kvm = c->accel == VMM_ACCEL_KVM;
        /* what the jail's cgroup allows (QEMU's -m and -smp are in argv) */
        q->memory_mib = c->cgroup_memory_mib ?: c->memory_mib;
        q->vcpus = c->cgroup_vcpus ?: c->vcpus;
        for (size_t i = 0; i < a.n; i++)
                q->argv[i] = a.v[i];
        struct {
                char *dst;
                const char *src;
        } paths[] = { { q->run_dir, c->run_dir }, { q->kernel, c->kernel },    { q->initrd, c->initrd },
                      { q->disk, disk },          { q->disk_target, c->rootfs },
                      { q->mem, c->mem_shared && !c->mem_anonymous ? c->mem_path : "" } };
        for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
                if ((r = str_copy(paths[i].dst, MGR_PATH_MAX, paths[i].src)) < 0)
                        goto out;
        }
        int fds[2] = { log_fd, ram_fd };
        for (int tries = 0; tries < 64; tries++) {
                if ((r = uid_next(&v->uid)) < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "no free VM uid: %m");
                        goto out;
                }
                q->uid = v->uid;
                _cleanup_free_ char *reply = NULL;
                int got[3]; /* its pidfd, the gateway's sockets */
                r = mgr_ask(q, fds, template_ram ? 2 : 1, &reply, got, ARRAY_SIZE(got), v->log_ctx);
                int pidfd = got[0];
                if (r == -EBUSY) { /* stays marked: in use elsewhere */
                        v->uid = 0;
                        continue;
                }
                if (r < 0) {
                        uid_mark(v->uid, false);
                        v->uid = 0;
                        goto out;
                }
                json_t *o = json_loads(reply, 0, NULL);
                uint64_t pid = 0, dev = 0, ino = 0;
                r = pidfd < 0 || got[1] < 0 || got[2] < 0 ? -EBADMSG : 0;
                if (r >= 0)
                        r = reply_u64(o, "pid", &pid);
                if (r >= 0)
                        r = reply_u64(o, "start_time", &v->start_time);
                if (r >= 0)
                        r = reply_u64(o, "exe_dev", &dev);
                if (r >= 0)
                        r = reply_u64(o, "exe_ino", &ino);
                json_decref(o);
                if (r < 0) {
                        log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "bad vmm.spawn reply from airlock-nodemgr: %m");
                        for (size_t i = 0; i < ARRAY_SIZE(got); i++)
                                safe_close(got[i]);
                        uid_release(v);
                        goto out;
                }
                v->pid = (pid_t) pid;
                v->pidfd = pidfd;
                v->gw_fds[0] = got[1];
                v->gw_fds[1] = got[2];
                v->exe_dev = (dev_t) dev;
                v->exe_ino = (ino_t) ino;
                goto out;
        }
        r = log_errno(LOG_LEVEL_ERROR, -EUSERS, v->log_ctx, "no VM uid with a free cgroup");
out:
        for (size_t i = 0; i < MGR_ARGV_MAX && q->argv[i]; i++)
                q->argv[i] = NULL; /* a's */
        argv_release(&a);
        return r;
}

/* Prepares the jail of c and starts QEMU in it. */
static int spawn_jailed(const struct vmm_config *c, struct vmm *v, bool incoming) {
        char *procs[JAIL_CGROUPS_MAX] = { 0 };
        size_t n_procs = 0;
        struct jail_paths paths = { 0 };
        struct argv a = { 0 };
        _cleanup_close_ int ram_fd = -1, log_fd = -1, null_fd = -1;
        struct vmnet net = { -1, -1 };
        const char *binary = qemu_path;
        _cleanup_free_ char *own_binary = NULL;
        int r = 0;
        if (!binary) { /* vmm_jail_setup() not called (tests) */
                r = resolve_binary(c->qemu_binary ?: "qemu-system-x86_64", &own_binary);
                if (r < 0)
                        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot find the QEMU binary: %m");
                pthread_mutex_lock(&jail_lock);
                if (!qemu_path)
                        qemu_path = strdup(own_binary);
                pthread_mutex_unlock(&jail_lock);
                binary = own_binary;
        }
        if (mgr_socket)
                return spawn_remote(c, v, incoming, binary);

        r = uid_claim(c, &v->uid, procs, &n_procs);
        if (r < 0)
                return r;
        /* run_dir (root's): vmm.pid, qemu.log, the disk link, root/ (the
         * mount point of the private root); vm/: the VM's own */
        paths.root = path_join(c->run_dir, "root");
        if (!paths.root) {
                r = -ENOMEM;
                goto out;
        }
        /* a run dir is reused by a stop/start or rollback: files of the
         * VM before (another uid) go */
        (void) rm_rf(v->vm_dir);
        if ((mkdir(paths.root, 0700) < 0 && errno != EEXIST) || mkdir(v->vm_dir, 0700) < 0 ||
            chown(v->vm_dir, v->uid, v->uid) < 0 || chmod(v->vm_dir, 0700) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot prepare %s: %m", v->vm_dir);
                goto out;
        }
        if ((r = give_file(c->rootfs, v->uid, v->log_ctx)) < 0)
                goto out;
        bool template_ram = !c->mem_shared && !c->mem_anonymous;
        if (c->mem_shared && !c->mem_anonymous) {
                _cleanup_close_ int mfd = open(c->mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (mfd < 0) {
                        r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot create %s: %m",
                                      c->mem_path);
                        goto out;
                }
                if ((r = give_file(c->mem_path, v->uid, v->log_ctx)) < 0)
                        goto out;
        }
        if (template_ram && (r = template_ram_fd(c->mem_path, v->log_ctx, &ram_fd)) < 0)
                goto out;

        struct jail_mount mounts[JAIL_MOUNTS_MAX];
        size_t n_mounts = 0;
        r = jail_mounts(c, v, binary, template_ram, &paths, mounts, &n_mounts);
        if (r < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot assemble the VM's root: %m");
                goto out;
        }
        char net_err[256];
        if ((r = vmnet_create(&net, net_err, sizeof net_err)) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot make the VM's network: %s", net_err);
                goto out;
        }
        r = build_argv(c, v, incoming, binary, template_ram ? "/proc/self/fd/3" : c->mem_path, template_ram ? 4 : 3,
                       &a);
        if (r < 0)
                goto out;
        log_cmdline(&a, v->log_ctx);

        log_fd = open(v->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (log_fd < 0 || null_fd < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot open %s: %m", v->log_path);
                goto out;
        }
        int keep[2], n_keep = 0;
        if (ram_fd >= 0)
                keep[n_keep++] = ram_fd;
        keep[n_keep++] = net.tap_fd;
        struct jail_spec spec = {
                .binary = binary,
                .argv = a.v,
                .uid = v->uid,
                .gid = v->uid,
                .root_dir = paths.root,
                .mounts = mounts,
                .n_mounts = n_mounts,
                .cgroup_procs = (const char *const *) procs,
                .n_cgroups = n_procs,
                .stdin_fd = null_fd,
                .stdout_fd = log_fd,
                .keep_fds = keep,
                .n_keep_fds = n_keep,
                .join_netns = true,
                .netns_fd = net.netns_fd,
                .nofile = VMM_NOFILE,
                .nproc = VMM_PIDS_MAX,
        };
        struct stat bst;
        if (stat(binary, &bst) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "cannot stat %s: %m", binary);
                goto out;
        }
        v->exe_dev = bst.st_dev;
        v->exe_ino = bst.st_ino;
        /* the gateway's sockets before QEMU: nothing can fail after it runs */
        if ((r = vmnet_listen(net.netns_fd, &v->gw_fds[0], &v->gw_fds[1], net_err, sizeof net_err)) < 0) {
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot open the gateway's sockets: %s", net_err);
                goto out;
        }
        r = jail_spawn(&spec, &v->pid, &v->pidfd);
        if (r < 0)
                r = log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot start the jailed QEMU: %m");
out:
        vmnet_release(&net);
        argv_release(&a);
        jail_paths_release(&paths);
        jail_cgroup_procs_free(procs, n_procs);
        if (r < 0 && v->pid <= 0)
                uid_release(v);
        return r;
}

/* A root node's way into a VM's network namespace: the very process's,
 * still that process after the open (its pidfd). */
static int vm_netns(const struct vmm *v) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int) v->pid);
        _cleanup_close_ int ns = open(path, O_RDONLY | O_CLOEXEC);
        if (ns < 0 || process_exited(v))
                return log_errno(LOG_LEVEL_ERROR, ns < 0 ? negative_errno() : -ESRCH, v->log_ctx,
                                 "cannot open the VM's network namespace: %m");
        return TAKE_FD(ns);
}

int vmm_net_listen(const struct vmm *v, int *ret_tcp_fd, int *ret_dns_fd) {
        if (mgr_socket) {
                int got[2];
                int r = mgr_ask(&(struct mgr_request){ .op = MGR_OP_NET_LISTEN, .pid = v->pid,
                                                       .start_time = v->start_time, .uid = v->uid },
                                NULL, 0, NULL, got, ARRAY_SIZE(got), v->log_ctx);
                if (r < 0)
                        return r;
                if (got[0] < 0 || got[1] < 0) {
                        safe_close(got[0]);
                        safe_close(got[1]);
                        return log_errno(LOG_LEVEL_ERROR, -EBADMSG, v->log_ctx,
                                         "airlock-nodemgr answered net.listen without the sockets: %m");
                }
                *ret_tcp_fd = got[0];
                *ret_dns_fd = got[1];
                return 0;
        }
        char err[256];
        _cleanup_close_ int ns = vm_netns(v);
        if (ns < 0)
                return ns;
        int r = vmnet_listen(ns, ret_tcp_fd, ret_dns_fd, err, sizeof err);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot open the gateway's sockets: %s", err);
        return 0;
}

int vmm_net_connect(const struct vmm *v, uint16_t port, int *ret_fd) {
        if (mgr_socket) {
                int got = -1;
                int r = mgr_ask(&(struct mgr_request){ .op = MGR_OP_NET_CONNECT, .pid = v->pid,
                                                       .start_time = v->start_time, .uid = v->uid, .port = port },
                                NULL, 0, NULL, &got, 1, v->log_ctx);
                if (r < 0)
                        return r;
                if (got < 0)
                        return log_errno(LOG_LEVEL_ERROR, -EBADMSG, v->log_ctx,
                                         "airlock-nodemgr answered net.connect without the socket: %m");
                *ret_fd = got;
                return 0;
        }
        char err[256];
        _cleanup_close_ int ns = vm_netns(v);
        if (ns < 0)
                return ns;
        int r = vmnet_connect(ns, port, ret_fd, err, sizeof err);
        if (r < 0)
                log_errno(LOG_LEVEL_WARN, r, v->log_ctx, "cannot connect to guest port %u: %s", (unsigned) port, err);
        return r;
}

/* Spawns QEMU for c and connects QMP. */
static int vmm_start(const struct vmm_config *c, bool incoming, struct vmm **ret) {
        struct vmm *v;
        int r = vmm_new(c, &v);
        if (r < 0)
                return r;

        struct sockaddr_un sa;
        if (strlen(v->qmp_path) >= sizeof sa.sun_path || strlen(v->guest_path) >= sizeof sa.sun_path) {
                r = log_errno(LOG_LEVEL_ERROR, -ENAMETOOLONG, v->log_ctx,
                              "run dir %s is too long for Unix socket paths", c->run_dir);
                goto fail;
        }
        /* Leftovers of an earlier QEMU would make us connect to nothing. */
        (void) unlink(v->qmp_path);
        (void) unlink(v->guest_path);

        r = spawn_jailed(c, v, incoming);
        if (r < 0)
                goto fail;
        r = record_pid(v);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "failed to write %s: %m", v->pid_path);
                goto fail;
        }

        r = wait_qmp(v);
        if (r < 0)
                goto fail;

        *ret = v;
        return 0;
fail:
        vmm_destroy(v);
        return r;
}

/* x-ignore-shared: both ends of one stream must agree (it changes the
 * stream's format). On for template snapshots (the RAM file is the memory
 * snapshot), off for full snapshots (the stream carries RAM). */
static int set_ignore_shared(struct vmm *v, bool on) {
        _cleanup_(json_decrefp) json_t *args =
                json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared", "state", on);
        if (!args)
                return -ENOMEM;
        int r = qmp_execute(v->qmp, "migrate-set-capabilities", args, QMP_CMD_MS, NULL);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "migrate-set-capabilities failed: %m (%s)",
                                 qmp_last_error(v->qmp));
        return 0;
}

/* Polls query-migrate until the migration completed or failed; *ret_info
 * (may be NULL) gets the last answer. */
static int wait_migration_info(struct vmm *v, const char *what, json_t **ret_info) {
        uint64_t deadline = now_monotonic_ns() + MIGRATE_WAIT_MS * 1000000ull;
        for (;;) {
                _cleanup_(json_decrefp) json_t *st = NULL;
                int r = qmp_execute(v->qmp, "query-migrate", NULL, QMP_CMD_MS, &st);
                if (r < 0) {
                        if (process_exits_within(v, 500))
                                return fail_exited(v, what);
                        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "query-migrate failed: %m (%s)",
                                         qmp_last_error(v->qmp));
                }
                const char *status = json_string_value(json_object_get(st, "status"));
                if (status && strcmp(status, "completed") == 0) {
                        /* QEMU says completed a moment before its migration
                         * thread leaves the finish-migrate run state (and
                         * fills in the downtime): a cont in between is
                         * refused ("Migration is not finalized yet"), seen
                         * under nested KVM. Done when the run state moved on. */
                        _cleanup_(json_decrefp) json_t *rs = NULL;
                        r = qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &rs);
                        bool settled = r < 0 || strcmp(json_string_value(json_object_get(rs, "status")) ?: "",
                                                       "finish-migrate") != 0;
                        if (settled || now_monotonic_ns() >= deadline) {
                                if (ret_info)
                                        *ret_info = TAKE_PTR(st);
                                return 0;
                        }
                        sleep_ms(1);
                        continue;
                }
                if (status && (strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)) {
                        const char *desc = json_string_value(json_object_get(st, "error-desc"));
                        return log_errno(LOG_LEVEL_ERROR, -EIO, v->log_ctx, "%s %s: %s", what, status,
                                         desc ?: "no error description");
                }
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx, "%s still %s after %d ms", what,
                                         status ?: "not started", MIGRATE_WAIT_MS);
                sleep_ms(1);
        }
}

static int wait_migration(struct vmm *v, const char *what) {
        return wait_migration_info(v, what, NULL);
}

int vmm_boot(const struct vmm_config *c, struct vmm **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        struct vmm *v;
        int r = vmm_start(c, false, &v);
        if (r < 0) {
                if (ret_error && c && c->run_dir)
                        *ret_error = failure_line(c, "starting QEMU", r);
                return r;
        }
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm booting pid=%d accel=%s mem=%uMiB ms=%llu", (int) v->pid,
                 vmm_accel_name(v->accel), c->memory_mib,
                 (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
        *ret = v;
        return 0;
}

/* Logs a failed QMP step with QEMU's own explanation. */
static int qmp_failed(struct vmm *v, int r, const char *what) {
        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "%s failed: %m (%s)", what, qmp_last_error(v->qmp));
}

/* Sends a migration command whose only argument is a URI. */
static int qmp_uri(struct vmm *v, const char *cmd, const char *uri) {
        _cleanup_(json_decrefp) json_t *args = json_pack("{s:s}", "uri", uri);
        if (!args)
                return -ENOMEM;
        int r = qmp_execute(v->qmp, cmd, args, QMP_CMD_MS, NULL);
        return r < 0 ? qmp_failed(v, r, cmd) : 0;
}

/* The QMP half of a restore, on a QEMU waiting with -incoming defer. fd is
 * the state file; QEMU receives its own copy. */
static int restore_state(struct vmm *v, int fd, bool ignore_shared) {
        int r = set_ignore_shared(v, ignore_shared);
        if (r < 0)
                return r;
        r = qmp_send_fd(v->qmp, fd, "state");
        if (r < 0)
                return qmp_failed(v, r, "getfd");
        r = qmp_uri(v, "migrate-incoming", "fd:state");
        if (r < 0)
                return r;
        r = wait_migration(v, "restore");
        if (r < 0)
                return r;
        /* Without -S QEMU already resumes after an incoming migration; `cont`
         * makes "running on return" independent of that default (it is a
         * no-op on a running VM). */
        r = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL);
        return r < 0 ? qmp_failed(v, r, "cont") : 0;
}

int vmm_restore(const struct vmm_config *c, const char *state_path, struct vmm **ret, char **ret_error) {
        uint64_t t0 = now_monotonic_ns();
        if (!c || !state_path || !c->run_dir)
                return -EINVAL;
        /* Open first: a missing snapshot should not cost a QEMU start. */
        _cleanup_close_ int fd = open(state_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                int r = log_errno(LOG_LEVEL_ERROR, negative_errno(), c->log_ctx, "failed to open %s: %m", state_path);
                if (ret_error)
                        *ret_error = strdup_printf("cannot open the saved state: %s", strerror(-r));
                return r;
        }
        int r = vmm_state_cpu_check(state_path, ret_error);
        if (r < 0) {
                log_emit(LOG_LEVEL_ERROR, c->log_ctx, "not restoring %s: %s", state_path,
                         ret_error && *ret_error ? *ret_error : strerror(-r));
                return r;
        }

        struct vmm *v;
        r = vmm_start(c, true, &v);
        if (r < 0) {
                if (ret_error)
                        *ret_error = failure_line(c, "starting QEMU", r);
                return r;
        }
        uint64_t t1 = now_monotonic_ns();
        r = restore_state(v, fd, !c->mem_anonymous);
        if (r < 0) {
                /* QEMU quits when an incoming stream fails: its words first */
                if (r != -ECHILD && process_exits_within(v, 500))
                        r = -ECHILD;
                vmm_destroy(v);
                if (ret_error)
                        *ret_error = failure_line(c, "loading the saved state", r);
                return r;
        }
        uint64_t t2 = now_monotonic_ns();
        /* start = process spawn until QMP answers, load = device state in and
         * running: the two halves of the restore latency. */
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm restored pid=%d accel=%s ms=%llu start_ms=%llu load_ms=%llu",
                 (int) v->pid, vmm_accel_name(v->accel), (unsigned long long) ((t2 - t0) / 1000000),
                 (unsigned long long) ((t1 - t0) / 1000000), (unsigned long long) ((t2 - t1) / 1000000));
        *ret = v;
        return 0;
}

/* The QMP half of a save: device state into fd. */
static int save_state(struct vmm *v, int fd) {
        int r = set_ignore_shared(v, true);
        if (r < 0)
                return r;
        r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL);
        if (r < 0)
                return qmp_failed(v, r, "stop");
        r = qmp_send_fd(v->qmp, fd, "save");
        if (r < 0)
                return qmp_failed(v, r, "getfd");
        r = qmp_uri(v, "migrate", "fd:save");
        if (r < 0)
                return r;
        return wait_migration(v, "save");
}

/* Ends writing a state file QEMU streamed into fd (our fd shares the file
 * description QEMU wrote through): after a save that returned r >= 0 it is
 * synced and renamed from tmp to path; otherwise, or when that fails, tmp
 * is removed. Returns r or the failure. */
static int state_file_finish(struct vmm *v, int fd, const char *tmp, const char *path, int r) {
        /* the CPU it needs, with it from the start (a file system without
         * xattrs keeps it untagged: restored as before) */
        int t = r >= 0 ? vmm_state_cpu_tag(fd) : 0;
        if (t < 0 && t != -ENOTSUP)
                log_errno(LOG_LEVEL_WARN, t, v->log_ctx, "cannot tag %s with its CPU %s: %m", path, vmm_cpu_id());
        if (r >= 0 && (fsync(fd) < 0 || rename(tmp, path) < 0))
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to store %s: %m", path);
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

int vmm_end_migration(struct vmm *v) {
        if (!v || !v->qmp)
                return -EINVAL;
        int r = qmp_execute(v->qmp, "migrate_cancel", NULL, QMP_CMD_MS, NULL);
        if (r < 0)
                return qmp_failed(v, r, "migrate_cancel");
        uint64_t deadline = now_monotonic_ns() + MIGRATE_WAIT_MS * 1000000ull;
        for (;;) {
                _cleanup_(json_decrefp) json_t *st = NULL;
                r = qmp_execute(v->qmp, "query-migrate", NULL, QMP_CMD_MS, &st);
                if (r < 0)
                        return qmp_failed(v, r, "query-migrate");
                /* no migration ever ("status" absent), or one that is over */
                const char *status = json_string_value(json_object_get(st, "status")) ?: "none";
                if (strcmp(status, "none") == 0 || strcmp(status, "completed") == 0 ||
                    strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)
                        return 0;
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx,
                                         "a migration an earlier node began is still %s after %d ms", status,
                                         MIGRATE_WAIT_MS);
                sleep_ms(1);
        }
}

/* Live full snapshots: fast enough that the precopy converges under TCG
 * dirtying, and a stop short enough to be a pause, not an outage. */
#define SNAPSHOT_BANDWIDTH (8ULL << 30) /* bytes/s: a local file, not a network */
#define SNAPSHOT_DOWNTIME_MS 20

/* A VM left paused after a snapshot is in QEMU's "postmigrate" state, from
 * which QEMU refuses to migrate again ("Can't migrate the vm that was
 * paused due to previous migration"): a paused sandbox could take one full
 * snapshot, fork or suspend, then no other. cont and stop at once make it
 * an ordinary paused VM (its vCPUs run for the moment between the two). */
static int leave_postmigrate(struct vmm *v) {
        _cleanup_(json_decrefp) json_t *st = NULL;
        int r = qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &st);
        if (r < 0)
                return qmp_failed(v, r, "query-status");
        if (strcmp(json_string_value(json_object_get(st, "status")) ?: "", "postmigrate") != 0)
                return 0;
        if ((r = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL)) < 0)
                return qmp_failed(v, r, "cont (leaving postmigrate)");
        if ((r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL)) < 0)
                return qmp_failed(v, r, "stop (leaving postmigrate)");
        return 0;
}

int vmm_snapshot(struct vmm *v, const char *state_path, bool leave_paused, int (*paused)(void *userdata),
                 void *userdata, struct vmm_snapshot_stats *ret_stats) {
        uint64_t t0 = now_monotonic_ns();
        if (!v || !v->qmp || !state_path)
                return -EINVAL;
        _cleanup_free_ char *tmp = strdup_printf("%s.tmp", state_path);
        if (!tmp)
                return -ENOMEM;
        (void) unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to create %s: %m", tmp);

        _cleanup_(json_decrefp) json_t *params = json_pack("{s:I, s:I}", "max-bandwidth",
                                                           (json_int_t) SNAPSHOT_BANDWIDTH, "downtime-limit",
                                                           (json_int_t) SNAPSHOT_DOWNTIME_MS);
        _cleanup_(json_decrefp) json_t *info = NULL;
        bool stopped = false;
        uint64_t t_done = 0, t_run = 0;
        int r = params ? 0 : -ENOMEM;
        if (r >= 0)
                r = set_ignore_shared(v, false);
        if (r >= 0 && (r = qmp_execute(v->qmp, "migrate-set-parameters", params, QMP_CMD_MS, NULL)) < 0)
                r = qmp_failed(v, r, "migrate-set-parameters");
        if (r >= 0 && (r = qmp_send_fd(v->qmp, fd, "snap")) < 0)
                r = qmp_failed(v, r, "getfd");
        if (r >= 0)
                r = leave_postmigrate(v);
        /* Live only where dirty tracking is the hardware's (KVM): under
         * TCG (QEMU 7.2) a live stream restored into a guest that later
         * crashed in 1 of 3 tries (timer-wheel corruption); stopped first,
         * 10 of 10 were sound. The pause is then the whole save. */
        uint64_t t_stop = now_monotonic_ns();
        if (r >= 0 && v->accel != VMM_ACCEL_KVM && (r = qmp_execute(v->qmp, "stop", NULL, QMP_CMD_MS, NULL)) < 0)
                r = qmp_failed(v, r, "stop");
        if (r >= 0)
                r = qmp_uri(v, "migrate", "fd:snap");
        if (r >= 0) {
                r = wait_migration_info(v, "snapshot", &info);
                /* one still running when we give up is cancelled: left
                 * alone it would complete later and stop the vCPUs of a
                 * VM we think runs (postmigrate), and refuse the next */
                if (r == -ETIMEDOUT)
                        (void) vmm_end_migration(v);
                /* completed or failed during completion: stopped either way
                 * until we say cont (QEMU restarts a VM only when precopy
                 * itself failed) */
                stopped = true;
                t_done = now_monotonic_ns();
        }
        if (r >= 0 && paused)
                r = paused(userdata);
        if (stopped && !leave_paused) {
                int k = qmp_execute(v->qmp, "cont", NULL, QMP_CMD_MS, NULL);
                if (k < 0) {
                        qmp_failed(v, k, "cont after the snapshot");
                        if (r >= 0)
                                r = k;
                }
                t_run = now_monotonic_ns();
        }
        /* durability off the pause path */
        r = state_file_finish(v, fd, tmp, state_path, r);
        if (r < 0)
                return r;
        struct stat st = { 0 };
        (void) fstat(fd, &st);
        /* stopped before the migration (TCG): the whole save was downtime */
        uint64_t downtime = v->accel == VMM_ACCEL_KVM
                                    ? (uint64_t) json_integer_value(json_object_get(info, "downtime"))
                                    : (t_done - t_stop) / 1000000ULL;
        struct vmm_snapshot_stats stats = {
                .total_ms = (now_monotonic_ns() - t0) / 1000000ULL,
                .downtime_ms = downtime,
                .pause_ms = downtime + (t_run > t_done ? (t_run - t_done) / 1000000ULL : 0),
                .bytes = (uint64_t) st.st_size,
        };
        log_emit(LOG_LEVEL_INFO, v->log_ctx,
                 "vm snapshot path=%s bytes=%llu ms=%llu downtime_ms=%llu pause_ms=%llu%s", state_path,
                 (unsigned long long) stats.bytes, (unsigned long long) stats.total_ms,
                 (unsigned long long) stats.downtime_ms, (unsigned long long) stats.pause_ms,
                 leave_paused ? " (left paused)" : "");
        if (ret_stats)
                *ret_stats = stats;
        return 0;
}

int vmm_save(struct vmm *v, const char *state_path) {
        uint64_t t0 = now_monotonic_ns();
        if (!v || !v->qmp || !state_path)
                return -EINVAL;

        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp.XXXXXX", state_path) < 0) {
                tmp = NULL;
                return -ENOMEM;
        }
        /* A temporary name, renamed on success: a reader never sees half a
         * state file, and a failed save leaves the old one in place. */
        _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to create %s: %m", tmp);

        int r = state_file_finish(v, fd, tmp, state_path, save_state(v, fd));
        if (r < 0)
                return r;
        struct stat st = { 0 };
        (void) fstat(fd, &st);
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm state saved path=%s bytes=%lld ms=%llu", state_path,
                 (long long) st.st_size, (unsigned long long) ((now_monotonic_ns() - t0) / 1000000));
        return 0;
}

int vmm_guest_connect(struct vmm *v, int timeout_ms, int *ret_fd) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ull;
        for (;;) {
                /* every connection is checked again: a reconnect is never
                 * trusted because an earlier one was */
                int r = vmm_connect(v, v->guest_path, ret_fd);
                if (r >= 0)
                        return 0;
                if (r != -ENOENT && r != -ECONNREFUSED)
                        return r == -EPERM ? r
                                           : log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "failed to connect to %s: %m",
                                                       v->guest_path);
                if (process_exited(v))
                        return fail_exited(v, "guest channel set-up");
                if (now_monotonic_ns() >= deadline)
                        return log_errno(LOG_LEVEL_ERROR, -ETIMEDOUT, v->log_ctx, "guest channel %s did not appear",
                                         v->guest_path);
                sleep_ms(2);
        }
}

static void vmm_free(struct vmm *v) {
        free(v->vm_dir);
        free(v->qmp_path);
        free(v->guest_path);
        free(v->console_path);
        free(v->log_path);
        free(v->pid_path);
        free(v->log_ctx);
        free(v);
}

void vmm_forget(struct vmm *v) {
        if (!v)
                return;
        qmp_free(v->qmp);
        if (v->pidfd >= 0)
                close(v->pidfd);
        vmm_free(v);
}

/* A VM that could not be killed (airlock-nodemgr gone: only it may signal
 * a jailed VMM) must not be forgotten, or it runs on with no owner: its run
 * dir, with the vmm.pid record, moves aside to RUN_DIR.stray, which the
 * next node's sweep of run/vm finds and ends (node_vm_run_dirs_sweep). Its
 * uid and cgroup stay taken until then. */
static void vmm_strand(struct vmm *v) {
        _cleanup_free_ char *dir = v->pid_path ? strdup(v->pid_path) : NULL;
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash)
                *slash = 0;
        _cleanup_free_ char *aside = slash ? strdup_printf("%s.stray", dir) : NULL;
        if (!aside || rename(dir, aside) < 0)
                log_errno(LOG_LEVEL_ERROR, aside ? negative_errno() : -ENOMEM, v->log_ctx,
                          "cannot stop VM pid %d nor keep its record (it may run on unowned): %m", (int) v->pid);
        else
                log_emit(LOG_LEVEL_ERROR, v->log_ctx,
                         "cannot stop VM pid %d (airlock-nodemgr gone?); its record moved to %s, the next node start "
                         "ends it",
                         (int) v->pid, aside);
        if (v->pidfd >= 0)
                close(v->pidfd);
        vmm_free(v);
}

/* qemu_last_words() of a running (or ended) VM: its log is run_dir/qemu.log. */
static void vm_last_words(const struct vmm *v, char *out, size_t n) {
        out[0] = 0;
        const char *slash = v->log_path ? strrchr(v->log_path, '/') : NULL;
        char dir[PATH_MAX];
        if (slash && (size_t) (slash - v->log_path) < sizeof dir) {
                memcpy(dir, v->log_path, (size_t) (slash - v->log_path));
                dir[slash - v->log_path] = 0;
                qemu_last_words(dir, out, n);
        }
}

/* Run states in which the vCPUs will not run again without a reset. */
static bool state_is_dead(const char *st) {
        static const char *const dead[] = { "internal-error", "guest-panicked", "shutdown" };
        for (size_t i = 0; i < ARRAY_SIZE(dead); i++)
                if (strcmp(st, dead[i]) == 0)
                        return true;
        return false;
}

char *vmm_stopped_reason(struct vmm *v) {
        if (!v || !v->qmp)
                return NULL;
        _cleanup_(json_decrefp) json_t *st = NULL;
        if (qmp_execute(v->qmp, "query-status", NULL, QMP_CMD_MS, &st) < 0)
                return NULL;
        const char *status = json_string_value(json_object_get(st, "status"));
        if (!status || !state_is_dead(status))
                return NULL;
        char words[QEMU_WORDS_MAX + 8];
        vm_last_words(v, words, sizeof words);
        return strdup_printf("the VM's vCPUs stopped: QEMU run state %s%s%s", status, words[0] ? "; QEMU said: " : "",
                             words);
}

char *vmm_failure_reason(struct vmm *v) {
        if (!v)
                return NULL;
        if (process_exits_within(v, 300)) {
                char words[QEMU_WORDS_MAX + 8];
                vm_last_words(v, words, sizeof words);
                return strdup_printf("QEMU exited%s%s", words[0] ? ": " : "", words);
        }
        return vmm_stopped_reason(v);
}

bool vmm_events_stop(struct vmm *v) {
        if (!v || !v->qmp)
                return false;
        uint64_t before = qmp_event_count(v->qmp);
        int n = qmp_read_events(v->qmp);
        if (n < 0)
                return false; /* a broken QMP connection: QEMU's exit shows on its pidfd */
        uint64_t got = qmp_event_count(v->qmp) - before;
        if (got > QMP_EVENT_RING)
                return true; /* more than the ring remembers: ask */
        for (uint64_t i = 0; i < got; i++) {
                const char *e = qmp_event_recent(v->qmp, (size_t) i);
                if (e && (strcmp(e, "STOP") == 0 || strcmp(e, "GUEST_PANICKED") == 0 || strcmp(e, "SHUTDOWN") == 0))
                        return true;
        }
        return false;
}

int vmm_event_fd(const struct vmm *v) {
        return v && v->qmp ? qmp_fd(v->qmp) : -1;
}

void vmm_destroy(struct vmm *v) {
        if (!v)
                return;
        qmp_free(v->qmp);
        v->gw_fds[0] = safe_close(v->gw_fds[0]);
        v->gw_fds[1] = safe_close(v->gw_fds[1]);
        if ((v->adopted || mgr_socket) && v->pidfd >= 0) {
                /* Not our child: whoever inherited it (or airlock-nodemgr,
                 * which started it) reaps it; the pidfd still names this
                 * process alone. */
                int r = process_exited(v) ? 0 : kill_vm(v->pid, v->pidfd, v->start_time, v->uid, 2000, v->log_ctx);
                if (!process_exited(v)) {
                        /* killed, but a thread blocked in disk I/O (a loaded
                         * host, a slow volume) holds its exit: it will go.
                         * Refused: one already ending on its own (a QEMU that
                         * quit) goes in a moment; one airlock-nodemgr could
                         * not reach is stranded below. */
                        if (r >= 0)
                                log_emit(LOG_LEVEL_WARN, v->log_ctx,
                                         "VM pid %d still exiting 2 s after SIGKILL; waiting up to %d s more",
                                         (int) v->pid, KILL_EXIT_WAIT_MS / 1000);
                        struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                        (void) poll(&p, 1, r >= 0 ? KILL_EXIT_WAIT_MS : 2000);
                }
                if (!process_exited(v)) {
                        vmm_strand(v);
                        return;
                }
        } else if (v->pid > 0) {
                /* Not reaped yet, so the pid cannot have been reused. */
                (void) kill(v->pid, SIGKILL);
                int status;
                while (waitpid(v->pid, &status, 0) < 0 && errno == EINTR)
                        ;
        }
        /* gone now (killed and reaped, or seen to exit): its cgroup and uid go too */
        uid_release(v);
        if (v->pidfd >= 0)
                close(v->pidfd);
        if (v->qmp_path)
                (void) unlink(v->qmp_path);
        if (v->guest_path)
                (void) unlink(v->guest_path);
        if (v->pid_path && v->pid > 0)
                (void) unlink(v->pid_path);
        vmm_free(v);
}
