/* SPDX-License-Identifier: Apache-2.0 */
/*
 * QEMU's command line and its process: the accelerator, the host's TSC,
 * argv, QEMU's log and last words (the bottom of the VMM; see vmm-
 * internal.h).
 */
#include "vmm-internal.h"

#include <cpuid.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "host.h"
#include "log.h"
#include "macros.h"
#include "util.h"
#include "vmnet.h"

#define LOG_TAIL_BYTES 2048    /* of qemu.log, quoted when QEMU dies early */

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

void vmm_argv_release(struct vmm_argv *a) {
        for (size_t i = 0; i < a->n; i++)
                free(a->v[i]);
        free(a->v);
        *a = (struct vmm_argv){ 0 };
}

static int vmm_argv_take(struct vmm_argv *a, char *s) {
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

static int vmm_argv_add(struct vmm_argv *a, const char *s) {
        return vmm_argv_take(a, strdup(s));
}

_printf_(2, 3) static int vmm_argv_addf(struct vmm_argv *a, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *s = strdup_vprintf(fmt, ap);
        va_end(ap);
        return vmm_argv_take(a, s);
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

char *vmm_path_join(const char *dir, const char *name) {
        char *s;
        return asprintf(&s, "%s/%s", dir, name) < 0 ? NULL : s;
}

/*
 * The command line of ARCHITECTURE.md's appendix. Boot and restore must build
 * the same machine (same devices, same order) or the migration stream will
 * not load: only -incoming differs.
 */
int vmm_build_argv(const struct vmm_config *c, const struct vmm *v, bool incoming, const char *binary,
                      const char *mem_path, int tap_fd, struct vmm_argv *a) {
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
        if ((r = vmm_argv_add(a, binary)) < 0 ||
            (r = vmm_argv_add(a, "-M")) < 0 ||
            (r = vmm_argv_add(a, "microvm,x-option-roms=off,rtc=on,memory-backend=mem")) < 0 ||
            (r = vmm_argv_add(a, "-accel")) < 0 || (r = vmm_argv_add(a, kvm ? "kvm" : "tcg,tb-size=32")) < 0 ||
            (r = vmm_argv_add(a, "-cpu")) < 0 || (r = vmm_argv_add(a, kvm ? vmm_cpu_arg() : "max")) < 0 ||
            (r = vmm_argv_add(a, "-m")) < 0 || (r = vmm_argv_addf(a, "%u", c->memory_mib)) < 0 ||
            (r = vmm_argv_add(a, "-smp")) < 0 || (r = vmm_argv_addf(a, "%u", c->vcpus)) < 0 ||
            (r = vmm_argv_add(a, "-nodefaults")) < 0 || (r = vmm_argv_add(a, "-no-user-config")) < 0 ||
            (r = vmm_argv_add(a, "-display")) < 0 || (r = vmm_argv_add(a, "none")) < 0 ||
            (r = vmm_argv_add(a, "-no-reboot")) < 0 ||
            /* threads named "CPU n/TCG" (or /KVM): top -H shows where a
             * VM's time goes, and a test sees a paused vCPU stand still */
            (r = vmm_argv_add(a, "-name")) < 0 || (r = vmm_argv_add(a, "airlock,debug-threads=on")) < 0 ||
            /* QEMU's own seccomp filter, every deny option: no exec or
             * fork, no privilege changes, no obsolete syscalls, no
             * scheduler or resource tuning */
            (r = vmm_argv_add(a, "-sandbox")) < 0 ||
            (r = vmm_argv_add(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")) < 0 ||
            (r = vmm_argv_add(a, "-object")) < 0 ||
            (r = c->mem_anonymous ? vmm_argv_addf(a, "memory-backend-ram,id=mem,size=%uM", c->memory_mib)
                                  : vmm_argv_addf(a, "memory-backend-file,id=mem,size=%uM,mem-path=%s,share=%s",
                                              c->memory_mib, mem, c->mem_shared ? "on" : "off")) < 0 ||
            (r = vmm_argv_add(a, "-kernel")) < 0 || (r = vmm_argv_add(a, c->kernel)) < 0 ||
            (r = vmm_argv_add(a, "-initrd")) < 0 || (r = vmm_argv_add(a, c->initrd)) < 0 ||
            (r = vmm_argv_add(a, "-append")) < 0 ||
            (r = vmm_argv_addf(a, VMM_KERNEL_ARGS "%s airlock.root=/dev/vda%s%s", tsc,
                           c->cmdline && *c->cmdline ? " " : "", c->cmdline ?: "")) < 0 ||
            /* "file:" takes the rest verbatim: no escaping here. */
            (r = vmm_argv_add(a, "-serial")) < 0 || (r = vmm_argv_addf(a, "file:%s", v->console_path)) < 0 ||
            (r = vmm_argv_add(a, "-device")) < 0 || (r = vmm_argv_add(a, "virtio-serial-device")) < 0 ||
            (r = vmm_argv_add(a, "-chardev")) < 0 ||
            (r = vmm_argv_addf(a, "socket,id=ch0,path=%s,server=on,wait=off", guest)) < 0 ||
            (r = vmm_argv_add(a, "-device")) < 0 || (r = vmm_argv_add(a, "virtserialport,chardev=ch0,name=airlock.0")) < 0 ||
            /* writeback: guest flushes reach the disk, so a rootfs reflinked
             * after the guest froze its file systems is consistent even if
             * the host crashes later. */
            (r = vmm_argv_add(a, "-drive")) < 0 ||
            (r = vmm_argv_addf(a, "id=d0,file=%s,format=raw,if=none,cache=writeback", rootfs)) < 0 ||
            (r = vmm_argv_add(a, "-device")) < 0 || (r = vmm_argv_add(a, "virtio-blk-device,drive=d0")) < 0 ||
            /* the NIC: a tap in the VMM's network namespace, whose only
             * peer is the egress gateway (lib/vmnet); after the disk, so the
             * devices before it keep their places */
            (r = vmm_argv_add(a, "-netdev")) < 0 || (r = vmm_argv_addf(a, "tap,id=n0,fd=%d", tap_fd)) < 0 ||
            (r = vmm_argv_add(a, "-device")) < 0 ||
            (r = vmm_argv_add(a, "virtio-net-device,netdev=n0,mac=" VMNET_GUEST_MAC)) < 0 ||
            (r = vmm_argv_add(a, "-qmp")) < 0 || (r = vmm_argv_addf(a, "unix:%s,server=on,wait=off", qmp)) < 0)
                return r;
        for (unsigned i = 0; i < VMM_VOLUMES_MAX; i++) {
                _cleanup_free_ char *img = c->volumes[i] ? qemu_escape(c->volumes[i]) : NULL;
                if (c->volumes[i] && !img)
                        return -ENOMEM;
                if ((r = vmm_argv_add(a, "-drive")) < 0 ||
                    (r = img ? vmm_argv_addf(a, "id=v%u,file=%s,format=raw,if=none,cache=writeback", i, img)
                             : vmm_argv_addf(a, "id=v%u,driver=null-co,size=0,if=none", i)) < 0 ||
                    (r = vmm_argv_add(a, "-device")) < 0 ||
                    (r = vmm_argv_addf(a, "virtio-blk-device,drive=v%u,serial=vol%u", i, i)) < 0)
                        return r;
        }
        if (incoming && ((r = vmm_argv_add(a, "-incoming")) < 0 || (r = vmm_argv_add(a, "defer")) < 0))
                return r;
        return 0;
}

/* The whole QEMU command line at debug level: what an operator needs to
 * rerun a VM by hand. */
void vmm_log_cmdline(const struct vmm_argv *a, const char *ctx) {
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

int vmm_pidfd_open(pid_t pid) {
        return (int) syscall(SYS_pidfd_open, pid, 0);
}

bool vmm_process_exited(const struct vmm *v) {
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
bool vmm_process_exits_within(const struct vmm *v, int ms) {
        if (v->pidfd >= 0) {
                struct pollfd p = { .fd = v->pidfd, .events = POLLIN };
                return poll(&p, 1, ms) > 0;
        }
        return vmm_process_exited(v);
}

bool vmm_exited(struct vmm *v) {
        return vmm_process_exited(v);
}

void vmm_sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* PIDFD_GET_INFO (Linux 6.15), its first version: the exit status of a
 * process that is not our child, once its parent reaped it. */
struct pidfd_info_v0 {
        uint64_t mask;
        uint64_t cgroupid;
        uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
        int32_t exit_code;
};

#define PIDFD_GET_INFO_V0 _IOWR(0xFF, 11, struct pidfd_info_v0)
#define PIDFD_INFO_EXIT_ (1ULL << 3)

/* The wait status of the exited process of pidfd that is not our child
 * (airlock-nodemgr started it and reaps it: give it a moment). */
static int foreign_exit_status(int pidfd, int *ret) {
        for (int i = 0; i < 50; i++) {
                struct pidfd_info_v0 info = {.mask = PIDFD_INFO_EXIT_};
                /* ESRCH: gone, but its exit not published yet (a VM whose
                 * exit closes a tap takes a moment longer): ask again */
                int k = ioctl(pidfd, PIDFD_GET_INFO_V0, &info);
                if (k < 0 && errno != ESRCH)
                        return negative_errno();
                if (k >= 0 && (info.mask & PIDFD_INFO_EXIT_)) {
                        *ret = info.exit_code;
                        return 0;
                }
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
        }
        return -ETIMEDOUT;
}

void vmm_exit_describe(struct vmm *v, char *buf, size_t n) {
        siginfo_t si = {0};
        if (waitid((idtype_t) P_PIDFD, (id_t) v->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
            si.si_pid == 0) {
                int status;
                if (errno != ECHILD || foreign_exit_status(v->pidfd, &status) < 0)
                        snprintf(buf, n, "exited");
                else if (WIFEXITED(status))
                        snprintf(buf, n, "exited (status %d)", WEXITSTATUS(status));
                else
                        snprintf(buf, n, "exited (status %d, killed by signal %d)", 128 + WTERMSIG(status),
                                 WTERMSIG(status));
                return;
        }
        if (si.si_code == CLD_EXITED)
                snprintf(buf, n, "exited (status %d)", si.si_status);
        else
                snprintf(buf, n, "exited (status %d, killed by signal %d)", 128 + si.si_status,
                         si.si_status);
}

int vmm_fail_exited(struct vmm *v, const char *when) {
        char tail[LOG_TAIL_BYTES + 1], how[128];
        log_tail(v->log_path, tail, sizeof tail);
        vmm_exit_describe(v, how, sizeof how);
        log_emit(LOG_LEVEL_ERROR, v->log_ctx, "qemu %s during %s; qemu.log ends with: %s", how, when,
                 tail[0] ? tail : "(nothing)");
        return -ECHILD;
}

#define QEMU_LOG_SCAN 8192 /* a register dump is 2-3 KiB: the failure is above it */

static bool is_dump_line(const char *l, size_t len) {
        size_t k = 0;
        while (k < len && k < 7 && (isalnum((unsigned char) l[k]) || l[k] == ' '))
                k++;
        return k >= 2 && k < len && l[k] == '=';
}

/* Appends line[0..len) to out (of n, k used) as printable ASCII (the
 * guest writes its console: any other byte becomes '?'). */
static size_t words_append(char *out, size_t n, size_t k, const char *line, size_t len) {
        for (size_t j = 0; j < len && k + 3 < n; j++) {
                unsigned char c = (unsigned char) line[j];
                out[k++] = c == '\t' ? ' ' : c < 0x20 || c > 0x7e ? '?' : (char) c;
        }
        out[k] = 0;
        return k;
}

/* The last lines of the log at run_dir/name that say something, as
 * vmm_qemu_last_words() says; or, where one of the last lines holds
 * `prefer`, that line alone, without the kernel's "[ seconds] " stamp. */
static void last_words(const char *run_dir, const char *name, const char *prefer, char *out, size_t n) {
        char path[PATH_MAX];
        out[0] = 0;
        if (n == 0 || snprintf(path, sizeof path, "%s/%s", run_dir, name) >= (int) sizeof path)
                return;
        _cleanup_free_ char *tail = malloc(QEMU_LOG_SCAN + 1);
        if (!tail)
                return;
        log_tail_n(path, tail, QEMU_LOG_SCAN + 1);
        const char *hit = NULL;
        for (const char *h = prefer ? strstr(tail, prefer) : NULL; h; h = strstr(h + 1, prefer))
                hit = h; /* the last */
        if (hit) {
                const char *b = hit, *e = strchrnul(hit, '\n');
                while (b > tail && b[-1] != '\n')
                        b--;
                const char *stamp = b[0] == '[' ? memchr(b, ']', (size_t) (e - b)) : NULL;
                if (stamp && stamp < hit)
                        b = stamp + 1 + (stamp[1] == ' ');
                size_t len = (size_t) (e - b);
                while (len > 0 && (b[len - 1] == '\r' || b[len - 1] == ' '))
                        len--;
                words_append(out, n, 0, b, len < QEMU_WORDS_MAX ? len : QEMU_WORDS_MAX);
                return;
        }
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
                k = words_append(out, n, k, keep[i], lens[i]);
                if (i > 0)
                        k = words_append(out, n, k, "; ", 2);
        }
}

void vmm_qemu_last_words(const char *run_dir, char *out, size_t n) {
        last_words(run_dir, "qemu.log", NULL, out, n);
}

void vmm_console_last_words(const char *run_dir, char *out, size_t n) {
        last_words(run_dir, "vm/console.log", "Kernel panic - not syncing", out, n);
}

/* A line for the client after a VM start or restore failed with r at
 * step: QEMU's own words where it left any. */
char *vmm_failure_line(const struct vmm_config *c, const char *step, int r) {
        char words[QEMU_WORDS_MAX + 8];
        vmm_qemu_last_words(c->run_dir, words, sizeof words);
        if (r == -ECHILD)
                return strdup_printf("QEMU exited while %s%s%s", step, words[0] ? ": " : " without a word",
                                     words);
        return strdup_printf("%s failed: %s%s%s", step, strerror(-r), words[0] ? "; QEMU's log ends: " : "", words);
}
