/* SPDX-License-Identifier: Apache-2.0 */
#include "vmm.h"

#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <inttypes.h>
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

#include "log.h"
#include "macros.h"
#include "qmp.h"
#include "util.h"

#define QMP_WAIT_MS 10000      /* QEMU start until QMP answers */
#define QMP_CMD_MS 5000        /* one ordinary QMP command */
#define MIGRATE_WAIT_MS 60000  /* device-state save/restore; takes ms with x-ignore-shared */
#define LOG_TAIL_BYTES 2048    /* of qemu.log, quoted when QEMU dies early */


/* ---- accelerator and host facts ---- */

const char *vmm_accel_name(enum vmm_accel a) {
        return a == VMM_ACCEL_KVM ? "kvm" : "tcg";
}

/* true if the whitespace-separated list in line contains word exactly. */
static bool word_in(const char *line, size_t len, const char *word) {
        size_t wl = strlen(word);
        for (size_t i = 0; i < len;) {
                while (i < len && (line[i] == ' ' || line[i] == '\t'))
                        i++;
                size_t j = i;
                while (j < len && line[j] != ' ' && line[j] != '\t')
                        j++;
                if (j - i == wl && memcmp(line + i, word, wl) == 0)
                        return true;
                i = j;
        }
        return false;
}

/* Finds the first "key<spaces>: value" line of /proc/cpuinfo text; returns the
 * value and its length through ret_*. */
static bool cpuinfo_field(const char *text, const char *key, const char **ret_val, size_t *ret_len) {
        size_t kl = strlen(key);
        for (const char *p = text; p && *p;) {
                const char *eol = strchrnul(p, '\n');
                if (strncmp(p, key, kl) == 0 && (p[kl] == ' ' || p[kl] == '\t' || p[kl] == ':')) {
                        const char *colon = memchr(p, ':', (size_t) (eol - p));
                        if (colon) {
                                const char *v = colon + 1;
                                while (*v == ' ' || *v == '\t')
                                        v++;
                                *ret_val = v;
                                *ret_len = (size_t) (eol - v);
                                return true;
                        }
                }
                p = *eol ? eol + 1 : NULL;
        }
        return false;
}

/* Whether KVM is usable; reason says why or why not. */
static bool kvm_usable(char *reason, size_t n) {
        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/cpuinfo", 64u << 20, &info, NULL);
        if (r < 0) {
                snprintf(reason, n, "cannot read /proc/cpuinfo: %s", strerror(-r));
                return false;
        }
        const char *flags;
        size_t len;
        if (!cpuinfo_field(info, "flags", &flags, &len) ||
            !(word_in(flags, len, "vmx") || word_in(flags, len, "svm"))) {
                snprintf(reason, n, "cpu has no vmx/svm flag (PVM host or nested virtualisation off?)");
                return false;
        }
        int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        if (fd < 0) {
                snprintf(reason, n, "cpu has vmx/svm but /dev/kvm does not open read-write: %s", strerror(errno));
                return false;
        }
        close(fd);
        snprintf(reason, n, "cpu has vmx/svm and /dev/kvm opens");
        return true;
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
        if (!cpuinfo_field(info, "cpu MHz", &v, &len))
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
static int build_argv(const struct vmm_config *c, const struct vmm *v, bool incoming, struct argv *a) {
        _cleanup_free_ char *mem = qemu_escape(c->mem_path ?: "");
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
        if ((r = argv_add(a, c->qemu_binary ?: "qemu-system-x86_64")) < 0 ||
            (r = argv_add(a, "-M")) < 0 ||
            (r = argv_add(a, "microvm,x-option-roms=off,rtc=on,memory-backend=mem")) < 0 ||
            (r = argv_add(a, "-accel")) < 0 || (r = argv_add(a, kvm ? "kvm" : "tcg,tb-size=32")) < 0 ||
            (r = argv_add(a, "-cpu")) < 0 || (r = argv_add(a, kvm ? "host" : "max")) < 0 ||
            (r = argv_add(a, "-m")) < 0 || (r = argv_addf(a, "%u", c->memory_mib)) < 0 ||
            (r = argv_add(a, "-smp")) < 0 || (r = argv_addf(a, "%u", c->vcpus)) < 0 ||
            (r = argv_add(a, "-nodefaults")) < 0 || (r = argv_add(a, "-no-user-config")) < 0 ||
            (r = argv_add(a, "-display")) < 0 || (r = argv_add(a, "none")) < 0 ||
            (r = argv_add(a, "-no-reboot")) < 0 ||
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
            (r = argv_addf(a, "console=ttyS0 quiet panic=-1%s airlock.root=/dev/vda%s%s", tsc,
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

/* The last LOG_TAIL_BYTES of qemu.log as one line for an error message. */
static void log_tail(const char *path, char *out, size_t n) {
        out[0] = 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        off_t size = lseek(fd, 0, SEEK_END);
        if (size < 0)
                return;
        size_t want = MIN((size_t) size, MIN((size_t) LOG_TAIL_BYTES, n - 1));
        ssize_t k = pread(fd, out, want, size - (off_t) want);
        if (k < 0)
                return;
        out[k] = 0;
        while (k > 0 && (out[k - 1] == '\n' || out[k - 1] == '\r'))
                out[--k] = 0;
}

/* Forks and execs argv with stdout/stderr on log_fd. */
static int spawn_fork(char *const *argv, int log_fd, int null_fd, pid_t *ret_pid) {
        pid_t pid = fork();
        if (pid < 0)
                return negative_errno();
        if (pid == 0) {
                /* Child: async-signal-safe calls only (the node has threads). */
                static const char msg[] = "airlock: exec of qemu failed\n";
                sigset_t none;
                sigemptyset(&none);
                struct sigaction dfl = { .sa_handler = SIG_DFL };
                for (int sig = 1; sig < NSIG; sig++)
                        if (sig != SIGKILL && sig != SIGSTOP)
                                (void) sigaction(sig, &dfl, NULL); /* SIG_IGN survives exec */
                sigprocmask(SIG_SETMASK, &none, NULL); /* the node blocks signals for signalfd */
                /* Own session: a Ctrl-C meant for the node must not reach its
                 * VMs. No parent-death signal either: a VM outlives a node
                 * that crashed or restarted, and the next node adopts it
                 * (vmm_adopt); the node decides when a VM dies. */
                setsid();
                /* nothing it execs (it may exec nothing: -sandbox) gains
                 * privileges; no core dumps of guest memory */
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 }) < 0)
                        _exit(127);
                if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(log_fd, STDOUT_FILENO) < 0 ||
                    dup2(log_fd, STDERR_FILENO) < 0)
                        _exit(127);
                close_range(3, ~0u, 0);
                execvp(argv[0], argv);
                (void) !write(STDERR_FILENO, msg, sizeof msg - 1);
                _exit(127);
        }
        *ret_pid = pid;
        return 0;
}

static int spawn(char *const *argv, const char *log_path, const char *ctx, pid_t *ret_pid) {
        _cleanup_close_ int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        if (log_fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "failed to open %s: %m", log_path);
        _cleanup_close_ int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), ctx, "failed to open /dev/null: %m");
        int r = spawn_fork(argv, log_fd, null_fd, ret_pid);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx, "fork failed: %m");
        return 0;
}

/* The start time of pid in clock ticks since boot (/proc/PID/stat field
 * 22): with the pid it names one process for good, across pid reuse. */
static int process_start_time(pid_t pid, uint64_t *ret) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return n < 0 ? negative_errno() : -EIO;
        buf[n] = 0;
        /* comm may hold spaces and parentheses: fields start after the last ')' */
        char *p = strrchr(buf, ')');
        if (!p)
                return -EIO;
        p++;
        for (int field = 3; field < 22; field++) {
                p = strchr(p + 1, ' ');
                if (!p)
                        return -EIO;
        }
        return sscanf(p + 1, "%" SCNu64, ret) == 1 ? 0 : -EIO;
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
                int r = qmp_connect(v->qmp_path, (int) ((deadline - now) / 1000000), &v->qmp);
                if (r >= 0)
                        return 0;
                if (r == -ENOENT || r == -ECONNREFUSED) {
                        sleep_ms(2);
                        continue;
                }
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
        v->accel = c->accel;
        v->qmp_path = path_join(c->run_dir, "qmp.sock");
        v->guest_path = path_join(c->run_dir, "guest.sock");
        v->console_path = path_join(c->run_dir, "console.log");
        v->log_path = path_join(c->run_dir, "qemu.log");
        v->pid_path = path_join(c->run_dir, "vmm.pid");
        v->log_ctx = strdup(c->log_ctx ?: "");
        if (!v->qmp_path || !v->guest_path || !v->console_path || !v->log_path || !v->pid_path || !v->log_ctx) {
                vmm_destroy(v);
                return -ENOMEM;
        }
        *ret = v;
        return 0;
}

/* Writes run_dir/vmm.pid, so a node that restarts finds this VM again. */
static int record_pid(struct vmm *v) {
        uint64_t start;
        int r = process_start_time(v->pid, &start);
        if (r < 0)
                return r;
        char line[64];
        int n = snprintf(line, sizeof line, "%d %" PRIu64 "\n", (int) v->pid, start);
        return file_write_replace(v->pid_path, line, (size_t) n, 0600);
}

/* Reads run_dir/vmm.pid and returns a pidfd for the process it names, if
 * that very process (same start time) still runs. -ESRCH otherwise. */
static int recorded_pidfd(const char *pid_path, pid_t *ret_pid) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = file_read_all(pid_path, 64, &text, &len);
        if (r < 0)
                return r == -ENOENT ? -ESRCH : r;
        int pid;
        uint64_t want, have;
        if (sscanf(text, "%d %" SCNu64, &pid, &want) != 2 || pid <= 1)
                return -EBADMSG;
        int fd = pidfd_open_(pid);
        if (fd < 0)
                return -ESRCH;
        /* checked after the pidfd exists: it cannot come to name another process */
        if (process_start_time(pid, &have) < 0 || have != want) {
                close(fd);
                return -ESRCH;
        }
        *ret_pid = pid;
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
        r = recorded_pidfd(v->pid_path, &v->pid);
        if (r < 0) {
                v->pid = -1;
                vmm_destroy(v);
                return r;
        }
        v->pidfd = r;
        r = qmp_connect(v->qmp_path, QMP_WAIT_MS, &v->qmp);
        if (r < 0) {
                log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "cannot reconnect to QMP of pid %d: %m", (int) v->pid);
                vmm_destroy(v); /* a VM we cannot drive is of no use: it goes */
                return r;
        }
        log_emit(LOG_LEVEL_INFO, v->log_ctx, "vm adopted pid=%d", (int) v->pid);
        *ret = v;
        return 0;
}

int vmm_kill_recorded(const char *run_dir) {
        _cleanup_free_ char *pid_path = path_join(run_dir, "vmm.pid");
        if (!pid_path)
                return -ENOMEM;
        pid_t pid;
        int fd = recorded_pidfd(pid_path, &pid);
        if (fd == -ESRCH)
                return 0;
        if (fd < 0)
                return fd;
        int r = 0;
        if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) < 0)
                r = negative_errno();
        else {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                (void) poll(&p, 1, 1000);
                log_info("killed the VM pid=%d an earlier node left in %s", (int) pid, run_dir);
        }
        close(fd);
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

        struct argv a = { 0 };
        r = build_argv(c, v, incoming, &a);
        if (r >= 0) {
                log_cmdline(&a, v->log_ctx);
                r = spawn(a.v, v->log_path, v->log_ctx, &v->pid);
        }
        argv_release(&a);
        if (r < 0)
                goto fail;

        v->pidfd = pidfd_open_(v->pid);
        if (v->pidfd < 0)
                log_errno(LOG_LEVEL_WARN, negative_errno(), v->log_ctx, "pidfd_open failed, polling instead: %m");
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
                        if (ret_info)
                                *ret_info = TAKE_PTR(st);
                        return 0;
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

int vmm_boot(const struct vmm_config *c, struct vmm **ret) {
        uint64_t t0 = now_monotonic_ns();
        struct vmm *v;
        int r = vmm_start(c, false, &v);
        if (r < 0)
                return r;
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

int vmm_restore(const struct vmm_config *c, const char *state_path, struct vmm **ret) {
        uint64_t t0 = now_monotonic_ns();
        if (!c || !state_path)
                return -EINVAL;
        /* Open first: a missing snapshot should not cost a QEMU start. */
        _cleanup_close_ int fd = open(state_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return log_errno(LOG_LEVEL_ERROR, negative_errno(), c->log_ctx, "failed to open %s: %m", state_path);

        struct vmm *v;
        int r = vmm_start(c, true, &v);
        if (r < 0)
                return r;
        uint64_t t1 = now_monotonic_ns();
        r = restore_state(v, fd, !c->mem_anonymous);
        if (r < 0) {
                vmm_destroy(v);
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
        if (r >= 0 && (fsync(fd) < 0 || rename(tmp, path) < 0))
                r = log_errno(LOG_LEVEL_ERROR, negative_errno(), v->log_ctx, "failed to store %s: %m", path);
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

/* Live full snapshots: fast enough that the precopy converges under TCG
 * dirtying, and a stop short enough to be a pause, not an outage. */
#define SNAPSHOT_BANDWIDTH (8ULL << 30) /* bytes/s: a local file, not a network */
#define SNAPSHOT_DOWNTIME_MS 20

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
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t n = strlen(v->guest_path);
        if (n >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, v->guest_path, n + 1);

        uint64_t deadline = now_monotonic_ns() + (uint64_t) MAX(timeout_ms, 0) * 1000000ull;
        for (;;) {
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return negative_errno();
                if (connect(fd, (struct sockaddr *) &sa, sizeof sa) >= 0) {
                        *ret_fd = fd;
                        return 0;
                }
                int r = negative_errno();
                close(fd);
                if (r != -ENOENT && r != -ECONNREFUSED)
                        return log_errno(LOG_LEVEL_ERROR, r, v->log_ctx, "failed to connect to %s: %m",
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

void vmm_destroy(struct vmm *v) {
        if (!v)
                return;
        qmp_free(v->qmp);
        if (v->adopted && v->pidfd >= 0) {
                /* Not our child: whoever inherited it reaps it; the pidfd
                 * still names this process alone. */
                if (syscall(SYS_pidfd_send_signal, v->pidfd, SIGKILL, NULL, 0) >= 0) {
                        struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                        (void) poll(&p, 1, 2000);
                }
        } else if (v->pid > 0) {
                /* Not reaped yet, so the pid cannot have been reused. */
                (void) kill(v->pid, SIGKILL);
                int status;
                while (waitpid(v->pid, &status, 0) < 0 && errno == EINTR)
                        ;
        }
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
