/* SPDX-License-Identifier: Apache-2.0 */
#include "check.h"
#include "host.h"
#include "jail.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock-config.h"
#include "macros.h"
#include "progress.h"
#include "util.h"

#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif
#ifndef EXT4_SUPER_MAGIC
#define EXT4_SUPER_MAGIC 0xEF53
#endif
#ifndef ZFS_SUPER_MAGIC
#define ZFS_SUPER_MAGIC 0x2fc12fc1
#endif

#define QEMU_VERSION_TIMEOUT_MS 10000
#define HTTP_TIMEOUT_MS 3000
#define PORT_GRACE_MS 2000 /* a used port is looked at again this long at start */
#define HTTP_REPLY_MAX (256u << 10)
#define CPUINFO_MAX (64u << 20)

const char *check_status_name(enum check_status s) {
        return s == CHECK_OK ? "ok" : s == CHECK_WARN ? "warn" : "error";
}

/* ---- pure parts ---- */

int check_qemu_version_parse(const char *line, unsigned *ret_major, unsigned *ret_minor,
                             unsigned *ret_micro) {
        static const char prefix[] = "QEMU emulator version ";
        const char *p = line ? strstr(line, prefix) : NULL;
        if (!p)
                return -EINVAL;
        p += strlen(prefix);
        unsigned long v[3] = { 0, 0, 0 };
        size_t i = 0;
        while (i < 3 && isdigit((unsigned char) *p)) {
                char *end;
                v[i++] = strtoul(p, &end, 10);
                if (v[i - 1] > 100000)
                        return -EINVAL;
                p = end;
                if (*p != '.')
                        break;
                p++;
        }
        if (i < 2) /* a major and a minor at least */
                return -EINVAL;
        *ret_major = (unsigned) v[0];
        *ret_minor = (unsigned) v[1];
        *ret_micro = (unsigned) v[2];
        return 0;
}

bool check_words_have(const char *list, const char *want) {
        if (!list || !want)
                return false;
        size_t ll = strlen(list);
        for (const char *w = want; *w;) {
                while (*w == ' ')
                        w++;
                size_t n = strcspn(w, " ");
                if (n == 0)
                        break;
                char word[64];
                if (n >= sizeof word)
                        return false;
                memcpy(word, w, n);
                word[n] = 0;
                if (!host_word_in(list, ll, word))
                        return false;
                w += n;
        }
        return true;
}

int check_cgroup_v2_path(const char *text, char *buf, size_t n) {
        for (const char *p = text; p && *p;) {
                const char *eol = strchrnul(p, '\n');
                if (strncmp(p, "0::", 3) == 0) {
                        size_t len = (size_t) (eol - p - 3);
                        if (len == 0 || len >= n)
                                return -ENOENT;
                        memcpy(buf, p + 3, len);
                        buf[len] = 0;
                        return 0;
                }
                p = *eol ? eol + 1 : NULL;
        }
        return -ENOENT;
}

bool check_fs_type(long f_type, char *buf, size_t n) {
        static const struct {
                long magic;
                const char *name;
        } known[] = {
                { BTRFS_SUPER_MAGIC, "btrfs" },
                { XFS_SUPER_MAGIC, "xfs" },
                { EXT4_SUPER_MAGIC, "ext4" },
                { TMPFS_MAGIC, "tmpfs" },
                { OVERLAYFS_SUPER_MAGIC, "overlay" },
                { NFS_SUPER_MAGIC, "nfs" },
                { ZFS_SUPER_MAGIC, "zfs" },
                { 0x65735546, "fuse" },
                { 0x01021994, "tmpfs" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(known); i++)
                if ((uint32_t) known[i].magic == (uint32_t) f_type) {
                        snprintf(buf, n, "%s", known[i].name);
                        return (uint32_t) f_type == (uint32_t) BTRFS_SUPER_MAGIC ||
                               (uint32_t) f_type == (uint32_t) XFS_SUPER_MAGIC;
                }
        snprintf(buf, n, "unknown (0x%lx)", (unsigned long) (uint32_t) f_type);
        return false;
}

enum check_status check_space_status(uint64_t avail) {
        return avail < CHECK_SPACE_ERROR_BYTES  ? CHECK_ERROR
               : avail < CHECK_SPACE_WARN_BYTES ? CHECK_WARN
                                                : CHECK_OK;
}

void check_format_bytes(uint64_t b, char *buf, size_t n) {
        if (b >= (1ULL << 30))
                snprintf(buf, n, "%.1f GiB", (double) b / (double) (1ULL << 30));
        else if (b >= (1ULL << 20))
                snprintf(buf, n, "%llu MiB", (unsigned long long) (b >> 20));
        else
                snprintf(buf, n, "%llu KiB", (unsigned long long) (b >> 10));
}

/* ---- report ---- */

static struct check_result *add(struct check_report *rep, const char *item) {
        if (rep->n == ARRAY_SIZE(rep->r))
                return &rep->r[rep->n - 1]; /* never: fewer items than slots */
        struct check_result *res = &rep->r[rep->n++];
        *res = (struct check_result){ .item = item };
        return res;
}

/* Replaces what is not UTF-8 (a path, a program's output) with '?': the
 * report is JSON too. */
static void make_utf8(char *s) {
        unsigned char *p = (unsigned char *) s;
        while (*p) {
                size_t len = *p < 0x80             ? 1
                             : (*p & 0xe0) == 0xc0 ? 2
                             : (*p & 0xf0) == 0xe0 ? 3
                             : (*p & 0xf8) == 0xf0 ? 4
                                                   : 0;
                bool ok = len > 0 && !(len == 2 && *p < 0xc2);
                for (size_t i = 1; ok && i < len; i++)
                        ok = (p[i] & 0xc0) == 0x80;
                if (!ok) {
                        *p++ = '?';
                        continue;
                }
                p += len;
        }
}

static void set(struct check_result *res, enum check_status s, const char *fmt, ...) _printf_(3, 4);
static void set(struct check_result *res, enum check_status s, const char *fmt, ...) {
        va_list ap;
        res->status = s;
        va_start(ap, fmt);
        vsnprintf(res->detail, sizeof res->detail, fmt, ap);
        va_end(ap);
        make_utf8(res->detail);
}

static void fix(struct check_result *res, const char *fmt, ...) _printf_(2, 3);
static void fix(struct check_result *res, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->fix, sizeof res->fix, fmt, ap);
        va_end(ap);
        make_utf8(res->fix);
}

bool check_report_has_error(const struct check_report *r) {
        for (size_t i = 0; i < r->n; i++)
                if (r->r[i].status == CHECK_ERROR)
                        return true;
        return false;
}

void check_report_print(const struct check_report *r, FILE *f) {
        for (size_t i = 0; i < r->n; i++) {
                const struct check_result *x = &r->r[i];
                fprintf(f, "%-5s  %-10s %s", check_status_name(x->status), x->item, x->detail);
                if (x->status != CHECK_OK && x->fix[0])
                        fprintf(f, "; fix: %s", x->fix);
                fputc('\n', f);
        }
}

json_t *check_report_json(const struct check_report *r) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < r->n; i++) {
                const struct check_result *x = &r->r[i];
                json_t *o =
                        json_pack("{s:s, s:s, s:s, s:o}", "item", x->item, "status",
                                  check_status_name(x->status), "detail", x->detail, "fix",
                                  x->status != CHECK_OK && x->fix[0] ? json_string(x->fix) : json_null());
                if (!o || json_array_append_new(a, o) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

/* ---- helpers ---- */

/* The deepest existing directory on the way to path (path itself when it
 * exists), into buf. */
static void existing_ancestor(const char *path, char *buf, size_t n) {
        snprintf(buf, n, "%s", path);
        struct stat st;
        while (stat(buf, &st) < 0) {
                char *slash = strrchr(buf, '/');
                if (!slash || slash == buf) {
                        snprintf(buf, n, "/");
                        return;
                }
                *slash = 0;
        }
}

/* Whether path is a mount point other than its parent's file system. */
static bool is_mounted_below(const char *path) {
        char parent[PATH_MAX];
        struct stat a, b;
        snprintf(parent, sizeof parent, "%s/..", path);
        return stat(path, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* The program name on PATH (plus the sbin dirs a user's PATH may lack), or
 * path itself when it has a '/', into buf; -ENOENT when nowhere. */
static int find_program(const char *name, char *buf, size_t n) {
        if (strchr(name, '/')) {
                if (access(name, X_OK) < 0)
                        return negative_errno();
                snprintf(buf, n, "%s", name);
                return 0;
        }
        const char *env = getenv("PATH");
        char path[4096];
        snprintf(path, sizeof path, "%s:/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin",
                 env && *env ? env : "");
        for (const char *d = path; *d;) {
                size_t len = strcspn(d, ":");
                if (len > 0 && (size_t) snprintf(buf, n, "%.*s/%s", (int) len, d, name) < n &&
                    access(buf, X_OK) == 0)
                        return 0;
                d += len + (d[len] == ':');
        }
        return -ENOENT;
}

/* Runs argv (no shell) with stdout into out (n bytes, NUL-terminated,
 * stderr appended too), killed after timeout_ms. 0 when it exited 0. */
static int run_capture(char *const argv[], char *out, size_t n, int timeout_ms) {
        int p[2];
        out[0] = 0;
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        _cleanup_close_ int rd = p[0];
        pid_t pid = fork();
        if (pid < 0) {
                close(p[1]);
                return negative_errno();
        }
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(p[1], STDOUT_FILENO) < 0 ||
                    dup2(p[1], STDERR_FILENO) < 0)
                        _exit(126);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                execv(argv[0], argv);
                _exit(127);
        }
        close(p[1]);
        bool timed_out =
                fd_read_until_eof(rd, out, n, now_monotonic_ns() + (uint64_t) timeout_ms * 1000000ULL) ==
                -ETIMEDOUT;
        if (timed_out)
                kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return negative_errno();
        if (timed_out)
                return -ETIMEDOUT;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                return -ENOEXEC;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* "127.0.0.1:7420" of a socket address, into buf. */
static void addr_text(const struct sockaddr_storage *a, char *buf, size_t n) {
        char host[INET6_ADDRSTRLEN] = "?";
        if (a->ss_family == AF_INET6) {
                const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *) a;
                inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
                snprintf(buf, n, "[%s]:%u", host, ntohs(a6->sin6_port));
        } else {
                const struct sockaddr_in *a4 = (const struct sockaddr_in *) a;
                inet_ntop(AF_INET, &a4->sin_addr, host, sizeof host);
                snprintf(buf, n, "%s:%u", host, ntohs(a4->sin_port));
        }
}

static uint16_t addr_port(const struct sockaddr_storage *a) {
        return ntohs(a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *) a)->sin6_port
                                              : ((const struct sockaddr_in *) a)->sin_port);
}

/*
 * GET path from addr over HTTP/1.0 (a tiny client: the daemon links no HTTP
 * client library; the reply is bounded and every wait has a deadline).
 * *ret_status gets the status; *ret_body the parsed JSON body (NULL when it
 * is not JSON).
 */
static int http_get_json(const struct sockaddr_storage *addr, socklen_t len, const char *path,
                         int *ret_status, json_t **ret_body) {
        struct sockaddr_storage to = *addr;
        /* a wildcard address is reached on loopback */
        if (to.ss_family == AF_INET && ((struct sockaddr_in *) &to)->sin_addr.s_addr == htonl(INADDR_ANY))
                ((struct sockaddr_in *) &to)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (to.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *) &to)->sin6_addr))
                ((struct sockaddr_in6 *) &to)->sin6_addr = in6addr_loopback;
        _cleanup_close_ int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        uint64_t deadline = now_monotonic_ns() + HTTP_TIMEOUT_MS * 1000000ULL;
        if (connect(fd, (struct sockaddr *) &to, len) < 0) {
                if (errno != EINPROGRESS)
                        return negative_errno();
                struct pollfd pf = { .fd = fd, .events = POLLOUT };
                if (poll(&pf, 1, HTTP_TIMEOUT_MS) <= 0)
                        return -ETIMEDOUT;
                int e = 0;
                socklen_t el = sizeof e;
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e)
                        return -(e ?: EIO);
        }
        char req[512];
        int k = snprintf(req, sizeof req,
                         "GET %s HTTP/1.0\r\nHost: airlock\r\nAccept: application/json\r\n\r\n", path);
        if (k < 0 || (size_t) k >= sizeof req)
                return -ENAMETOOLONG;
        for (size_t off = 0; off < (size_t) k;) {
                struct pollfd pf = { .fd = fd, .events = POLLOUT };
                uint64_t now = now_monotonic_ns();
                if (now >= deadline || poll(&pf, 1, (int) ((deadline - now) / 1000000ULL) + 1) <= 0)
                        return -ETIMEDOUT;
                ssize_t w = send(fd, req + off, (size_t) k - off, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                        return negative_errno();
                if (w > 0)
                        off += (size_t) w;
        }
        _cleanup_free_ char *buf = malloc(HTTP_REPLY_MAX + 1);
        if (!buf)
                return -ENOMEM;
        size_t got = 0;
        for (;;) {
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                uint64_t now = now_monotonic_ns();
                if (now >= deadline || poll(&pf, 1, (int) ((deadline - now) / 1000000ULL) + 1) <= 0)
                        return -ETIMEDOUT;
                ssize_t r = recv(fd, buf + got, HTTP_REPLY_MAX - got, 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (r < 0)
                        return negative_errno();
                if (r == 0)
                        break;
                got += (size_t) r;
                if (got == HTTP_REPLY_MAX)
                        return -EFBIG;
        }
        buf[got] = 0;
        int status;
        if (sscanf(buf, "HTTP/1.%*c %3d", &status) != 1)
                return -EPROTO;
        const char *body = strstr(buf, "\r\n\r\n");
        *ret_status = status;
        *ret_body = body ? json_loadb(body + 4, got - (size_t) (body + 4 - buf), 0, NULL) : NULL;
        return 0;
}

/* ---- the items ---- */

static void check_user(const struct daemon_config *c, bool airlockd_answers, struct check_result *res) {
        uid_t uid = geteuid();
        const char *privsep = getenv("AIRLOCK_PRIVSEP");
        if (uid == 0 && privsep && strcmp(privsep, "0") == 0) {
                set(res, CHECK_WARN,
                    "root, with AIRLOCK_PRIVSEP=0: airlockd and the node keep root (a development "
                    "setting)");
                fix(res,
                    "unset AIRLOCK_PRIVSEP: airlockd then runs as `airlock` and the node as `airlock-node`");
        } else if (uid == 0)
                set(res, CHECK_OK,
                    "root (airlockd then runs the API as `airlock`, the node as `airlock-node`, "
                    "each VM under a uid of its own)");
        else if (airlockd_answers) {
                set(res, CHECK_WARN,
                    "uid %u, not root: fine for looking, but some checks see less than root would",
                    (unsigned) uid);
                fix(res, "sudo airlockd --check, for the whole picture");
        } else {
                set(res, CHECK_ERROR,
                    "uid %u, not root: airlockd must start as root (it creates its users, sets up "
                    "storage, jails the VMs, then drops privileges)",
                    (unsigned) uid);
                fix(res, "start it with sudo: sudo ./run.sh (or sudo airlockd)");
        }
}

/* The first VM uid (AIRLOCK_VMM_UID_BASE, as airlock-nodemgr reads it). */
static uid_t vm_uid_base(void) {
        const char *s = getenv("AIRLOCK_VMM_UID_BASE");
        uint64_t v;
        if (s && *s && parse_u64(s, UINT32_MAX - 65536, &v) >= 0 && v >= 1000)
                return (uid_t) v;
        return JAIL_VM_UID_BASE_DEFAULT;
}

/* Returns whether the node will run its VMs under KVM. */
static bool check_accel(const struct daemon_config *c, struct check_result *res) {
        if (strcmp(c->accel, "tcg") == 0) {
                set(res, CHECK_OK,
                    "tcg (AIRLOCK_ACCEL=tcg): software emulation, every feature works, slower");
                return false;
        }
        bool want_kvm = strcmp(c->accel, "kvm") == 0;
        enum check_status bad = want_kvm ? CHECK_ERROR : CHECK_WARN;
        const char *as =
                want_kvm ? "AIRLOCK_ACCEL=kvm, but kvm is unusable" : "tcg (software emulation, slower)";
        const char *then = want_kvm ? "; or set AIRLOCK_ACCEL=auto to run under TCG"
                                    : "; VMs run under TCG meanwhile (every feature works)";
        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/cpuinfo", CPUINFO_MAX, &info, NULL);
        if (r < 0) {
                set(res, bad, "%s: cannot read /proc/cpuinfo: %s", as, strerror(-r));
                fix(res, "mount /proc%s", then);
                return false;
        }
        if (!host_cpu_has_virt(info)) {
                set(res, bad, "%s: the cpu has no vmx/svm flag", as);
                fix(res,
                    "enable VT-x/AMD-V in the firmware, or nested virtualisation when this machine is a "
                    "VM%s",
                    then);
                return false;
        }
        /* as airlock-nodemgr probes it for the node: root opens it, then
         * a process of a VM's uid alone opens a node of its own (the
         * jail's) and creates a VM */
        char why[256];
        if (!host_kvm_usable(why, sizeof why)) {
                int e = access("/dev/kvm", F_OK) < 0 ? errno : 0;
                set(res, bad, "%s: %s", as, why);
                if (e == ENOENT)
                        fix(res, "modprobe kvm_intel (or kvm_amd)%s", then);
                else if (geteuid() != 0)
                        fix(res, "run the check as root, as airlockd starts (root opens /dev/kvm for the VMs)%s",
                            then);
                else
                        fix(res, "check dmesg for kvm errors (another hypervisor holding VT-x?)%s", then);
                return false;
        }
        if (geteuid() != 0) {
                set(res, bad == CHECK_ERROR ? CHECK_ERROR : CHECK_WARN,
                    "kvm for root, but not checked for the VMs' uids (the check is not root)");
                fix(res, "run the check as root, as airlockd starts");
                return false;
        }
        uid_t vm = vm_uid_base();
        const char *probe_fix = NULL;
        if (jail_kvm_probe(vm, vm, why, sizeof why, &probe_fix) < 0) {
                set(res, bad, "%s: the cpu has vmx/svm and /dev/kvm opens for root, but %s", as, why);
                fix(res, "%s%s", probe_fix, then);
                return false;
        }
        set(res, CHECK_OK, "kvm (%s): the cpu has vmx/svm; %s", want_kvm ? "AIRLOCK_ACCEL=kvm" : "auto", why);
        return true;
}

/* `qemu-system-x86_64 -cpu help` (QEMU 7.2: about 12 KiB) */
#define CPU_HELP_MAX (64u << 10)

/* The VMs' CPU under KVM: host (snapshots resume on hosts of this CPU), or
 * a named model QEMU knows ("enforce": a host without one of its features
 * refuses to start the VM). */
static void check_cpu_model(const struct daemon_config *c, bool kvm, struct check_result *res) {
        if (!kvm) {
                set(res, CHECK_OK, "tcg: the VMs get QEMU's max CPU (snapshots resume on every TCG node)%s",
                    strcmp(c->cpu_model, "host") != 0 ? "; AIRLOCK_CPU_MODEL applies under KVM" : "");
                return;
        }
        if (strcmp(c->cpu_model, "host") == 0) {
                char sig[64];
                int r = host_cpu_signature(sig, sizeof sig);
                if (r < 0) {
                        set(res, CHECK_ERROR, "host: cannot read this CPU's vendor, family, model and stepping: %s",
                            strerror(-r));
                        fix(res, "mount /proc; or set AIRLOCK_CPU_MODEL to a QEMU CPU model");
                        return;
                }
                set(res, CHECK_OK,
                    "host (%s): full speed; suspended and full snapshots resume on hosts of this CPU alone (in a "
                    "cluster of unlike nodes, AIRLOCK_CPU_MODEL=a QEMU model every node has)",
                    sig);
                return;
        }
        char bin[PATH_MAX];
        _cleanup_free_ char *out = malloc(CPU_HELP_MAX);
        if (!out) {
                set(res, CHECK_ERROR, "out of memory");
                return;
        }
        int r = find_program(c->qemu_binary, bin, sizeof bin);
        if (r >= 0)
                r = run_capture((char *const[]){ bin, (char *) "-cpu", (char *) "help", NULL }, out, CPU_HELP_MAX,
                                QEMU_VERSION_TIMEOUT_MS);
        if (r < 0) {
                set(res, CHECK_WARN, "%s: cannot ask %s for its CPU models: %s", c->cpu_model, c->qemu_binary,
                    strerror(-r));
                return;
        }
        /* "x86 NAME   description" lines */
        bool known = false;
        size_t len = strlen(c->cpu_model);
        for (const char *p = out; p && *p && !known; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                known = strncmp(p, "x86 ", 4) == 0 && strncmp(p + 4, c->cpu_model, len) == 0 &&
                        (p[4 + len] == ' ' || p[4 + len] == '\n' || p[4 + len] == 0);
        if (!known) {
                set(res, CHECK_ERROR, "AIRLOCK_CPU_MODEL=%s is not a CPU model of %s", c->cpu_model, c->qemu_binary);
                fix(res, "pick one of `%s -cpu help` (one every node of the cluster has), or host", c->qemu_binary);
                return;
        }
        set(res, CHECK_OK,
            "%s: snapshots resume on every node that runs this model (a host without one of its features refuses "
            "to start VMs: QEMU's enforce)",
            c->cpu_model);
}

/* A real FICLONE between two unnamed files of dir: 1 works, 0 not, <0 could
 * not try (xfs made without reflink=1 says EOPNOTSUPP only when asked). */
static int probe_reflink(const char *dir) {
        _cleanup_close_ int a = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        _cleanup_close_ int b = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (a < 0 || b < 0)
                return negative_errno();
        char block[4096] = { 1 };
        if (fd_write_all(a, block, sizeof block) < 0)
                return -EIO;
        return ioctl(b, FICLONE, a) == 0 ? 1 : 0;
}

static void check_storage(const struct daemon_config *c, struct check_result *res) {
        const char *mode = getenv("AIRLOCK_STORAGE");
        char dir[CONFIG_PATH_MAX], fs[64], vol[CONFIG_PATH_MAX + 8];
        existing_ancestor(c->data_dir, dir, sizeof dir);
        bool exists = strcmp(dir, c->data_dir) == 0;
        struct statfs sf;
        if (statfs(dir, &sf) < 0) {
                set(res, CHECK_ERROR, "cannot look at %s: %s", dir, strerror(errno));
                fix(res, "make the data dir reachable, or use another --data-dir");
                return;
        }
        bool reflinks = check_fs_type((long) sf.f_type, fs, sizeof fs);
        const char *where = exists ? "" : " (to be made)";
        if (mode && strcmp(mode, "copy") == 0) {
                set(res, CHECK_WARN,
                    "AIRLOCK_STORAGE=copy: every sandbox disk is a full copy of its template's "
                    "(slow creates, no sharing); %s is on %s",
                    c->data_dir, fs);
                fix(res, "unset AIRLOCK_STORAGE");
                return;
        }
        if (reflinks && exists && (uint32_t) sf.f_type == (uint32_t) XFS_SUPER_MAGIC &&
            probe_reflink(dir) == 0)
                reflinks = false; /* xfs made without reflink=1 */
        if (reflinks) {
                set(res, CHECK_OK, "%s%s is on %s: sandbox disks are reflinks of their template's",
                    c->data_dir, where, fs);
                return;
        }
        snprintf(vol, sizeof vol, "%s/vol", c->data_dir);
        if (is_mounted_below(vol)) {
                struct statfs vf;
                char vfs[64] = "?";
                if (statfs(vol, &vf) == 0)
                        (void) check_fs_type((long) vf.f_type, vfs, sizeof vfs);
                set(res, CHECK_OK,
                    "%s is on %s (no reflinks); the loop volume %s (%s) is mounted: sandbox disks "
                    "are reflinks there",
                    c->data_dir, fs, vol, vfs);
                return;
        }
        char mkfs[PATH_MAX], mount_bin[PATH_MAX];
        bool loop = access("/dev/loop-control", F_OK) == 0;
        bool have_mkfs = find_program("mkfs.btrfs", mkfs, sizeof mkfs) == 0;
        bool have_mount = find_program("mount", mount_bin, sizeof mount_bin) == 0;
        const char *gib = getenv("AIRLOCK_VOLUME_GIB");
        if (loop && have_mkfs && have_mount) {
                set(res, CHECK_OK,
                    "%s%s is on %s, without reflinks: the node makes %s/volume.btrfs (%s "
                    "GiB, sparse) and loop-mounts it at %s",
                    c->data_dir, where, fs, c->data_dir, gib && *gib ? gib : "64", vol);
                return;
        }
        set(res, CHECK_WARN,
            "%s%s is on %s, without reflinks, and the btrfs loop volume cannot be made (%s%s%s): "
            "sandbox disks will be full copies (slow)",
            c->data_dir, where, fs, loop ? "" : "no /dev/loop-control", !loop && !have_mkfs ? ", " : "",
            have_mkfs ? "" : "no mkfs.btrfs");
        fix(res, "%s%sor put the data dir on btrfs or xfs (--data-dir)",
            have_mkfs ? "" : "apt-get install btrfs-progs, ", loop ? "" : "modprobe loop, ");
}

static void check_cgroups(struct check_result *res) {
        _cleanup_free_ char *self = NULL;
        if (file_read_all("/proc/self/cgroup", 65536, &self, NULL) < 0) {
                set(res, CHECK_WARN, "cannot read /proc/self/cgroup: VMs run without cgroup limits");
                fix(res, "mount /proc");
                return;
        }
        char path[1024], v2_missing[512] = "";
        if (check_cgroup_v2_path(self, path, sizeof path) == 0) {
                static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
                for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
                        char dir[1200], file[1300];
                        snprintf(dir, sizeof dir, "%s%s", roots[i], strcmp(path, "/") ? path : "");
                        snprintf(file, sizeof file, "%s/cgroup.controllers", dir);
                        _cleanup_free_ char *ctl = NULL, *sub = NULL;
                        if (file_read_all(file, 4096, &ctl, NULL) < 0)
                                continue;
                        ctl[strcspn(ctl, "\n")] = 0;
                        if (!check_words_have(ctl, "cpu memory pids")) {
                                snprintf(v2_missing, sizeof v2_missing,
                                         "v2 at %.200s offers only \"%.200s\"", dir, ctl);
                                continue;
                        }
                        snprintf(file, sizeof file, "%s/cgroup.subtree_control", dir);
                        bool delegated = file_read_all(file, 4096, &sub, NULL) >= 0 &&
                                         check_words_have(sub, "cpu memory pids");
                        if (!delegated && geteuid() == 0 && access(file, W_OK) < 0) {
                                set(res, CHECK_WARN,
                                    "v2 at %s has cpu, memory and pids, but cannot enable them for "
                                    "the VMs' cgroups (%s is not writable here)",
                                    dir, file);
                                fix(res, "run airlockd as root in a cgroup that may delegate them (systemd: "
                                         "Delegate=yes)");
                                return;
                        }
                        set(res, CHECK_OK, "v2 at %s: cpu, memory and pids %s", dir,
                            delegated ? "enabled for the VMs' cgroups"
                                      : "available (the node enables them)");
                        return;
                }
        }
        /* v1, as the jail uses it: each controller's own hierarchy */
        static const char *const ctls[] = { "memory", "pids", "cpu" };
        char have[64] = "", miss[64] = "";
        for (size_t k = 0; k < ARRAY_SIZE(ctls); k++) {
                bool ok = false;
                for (const char *p = self; p && *p && !ok;) {
                        const char *eol = strchrnul(p, '\n');
                        const char *c1 = memchr(p, ':', (size_t) (eol - p));
                        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t) (eol - c1 - 1)) : NULL;
                        if (c2) {
                                char list[256];
                                snprintf(list, sizeof list, "%.*s", (int) (c2 - c1 - 1), c1 + 1);
                                for (char *q = list; *q; q++)
                                        if (*q == ',')
                                                *q = ' ';
                                if (check_words_have(list, ctls[k])) {
                                        char dir[1200];
                                        int len = (int) (eol - c2 - 1);
                                        bool root = len == 1 && c2[1] == '/';
                                        snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%.*s", ctls[k],
                                                 root ? 0 : len, c2 + 1);
                                        /* the node's cgroups are made by root */
                                        ok = access(dir, geteuid() == 0 ? W_OK : F_OK) == 0;
                                }
                        }
                        p = *eol ? eol + 1 : NULL;
                }
                snprintf(ok ? have + strlen(have) : miss + strlen(miss), 24, "%s%s",
                         (ok ? have : miss)[0] ? ", " : "", ctls[k]);
        }
        if (!miss[0]) {
                set(res, CHECK_OK, "v1: %s hierarchies usable (no io limits on v1)", have);
                return;
        }
        if (have[0])
                set(res, CHECK_WARN, "v1: only %s usable: VMs get no %s limit%s%s", have, miss,
                    v2_missing[0] ? "; " : "", v2_missing);
        else
                set(res, CHECK_WARN,
                    "no usable cgroup controllers (v2 cpu, memory, pids, or v1 hierarchies): VMs run "
                    "without memory, pids or cpu limits%s%s",
                    v2_missing[0] ? "; " : "", v2_missing);
        fix(res,
            "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) and run airlockd where cpu, memory "
            "and "
            "pids are delegated, or mount the v1 %s hierarchies",
            miss[0] ? miss : "memory, pids and cpu");
}

static void check_namespaces(struct check_result *res) {
        static const char *const ns[] = { "mnt", "pid", "ipc", "uts", "net" };
        char missing[64] = "";
        for (size_t i = 0; i < ARRAY_SIZE(ns); i++) {
                char p[64];
                snprintf(p, sizeof p, "/proc/self/ns/%s", ns[i]);
                if (access(p, F_OK) < 0)
                        snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                                 missing[0] ? " " : "", ns[i]);
        }
        _cleanup_free_ char *max = NULL, *clone = NULL;
        char users[160] = "user namespaces: not needed (the jail starts from root)";
        if (file_read_all("/proc/sys/user/max_user_namespaces", 64, &max, NULL) >= 0) {
                max[strcspn(max, "\n")] = 0;
                bool clone_known =
                        file_read_all("/proc/sys/kernel/unprivileged_userns_clone", 64, &clone, NULL) >= 0;
                if (clone_known)
                        clone[strcspn(clone, "\n")] = 0;
                snprintf(users, sizeof users,
                         "user namespaces: max %s%s%s (not needed: the jail starts from root)", max,
                         clone_known ? ", unprivileged_userns_clone=" : "", clone_known ? clone : "");
        }
        if (missing[0]) {
                set(res, CHECK_ERROR, "the kernel lacks %s namespaces: the VMM jail cannot start VMs; %s",
                    missing, users);
                fix(res, "a kernel with CONFIG_NAMESPACES and the mount, pid, ipc, uts and net namespaces "
                         "(Debian's has them)");
                return;
        }
        set(res, CHECK_OK, "mnt, pid, ipc, uts and net (the VMM jail's); %s", users);
}

static void check_qemu(const struct daemon_config *c, struct check_result *res) {
        char bin[PATH_MAX], out[2048];
        int r = find_program(c->qemu_binary, bin, sizeof bin);
        if (r < 0) {
                set(res, CHECK_ERROR, "QEMU %s not found%s", c->qemu_binary,
                    strchr(c->qemu_binary, '/') ? "" : " on PATH");
                fix(res, "apt-get install qemu-system-x86 (or point AIRLOCK_QEMU at qemu-system-x86_64)");
                return;
        }
        r = run_capture((char *const[]){ bin, (char *) "--version", NULL }, out, sizeof out,
                        QEMU_VERSION_TIMEOUT_MS);
        out[strcspn(out, "\n")] = 0;
        unsigned major, minor, micro;
        if (r < 0 || check_qemu_version_parse(out, &major, &minor, &micro) < 0) {
                set(res, CHECK_ERROR, "%s --version %s%s%.200s", bin,
                    r == -ETIMEDOUT ? "did not answer within 10 s"
                    : r < 0         ? "failed"
                                    : "printed no QEMU version",
                    out[0] ? ": " : "", out);
                fix(res,
                    "reinstall it (apt-get install --reinstall qemu-system-x86) or point AIRLOCK_QEMU at a "
                    "working qemu-system-x86_64");
                return;
        }
        const char *extra = strchr(out, '(');
        if (major < CHECK_QEMU_MIN_MAJOR ||
            (major == CHECK_QEMU_MIN_MAJOR && minor < CHECK_QEMU_MIN_MINOR)) {
                set(res, CHECK_ERROR,
                    "%s is QEMU %u.%u.%u, older than %u.%u (the oldest Airlock is built and tested "
                    "on)",
                    bin, major, minor, micro, CHECK_QEMU_MIN_MAJOR, CHECK_QEMU_MIN_MINOR);
                fix(res,
                    "install QEMU %u.%u or newer (Debian 12: apt-get install qemu-system-x86), or point "
                    "AIRLOCK_QEMU at one",
                    CHECK_QEMU_MIN_MAJOR, CHECK_QEMU_MIN_MINOR);
                return;
        }
        set(res, CHECK_OK, "%s: QEMU %u.%u.%u%s%.120s (%u.%u or newer needed)", bin, major, minor, micro,
            extra ? " " : "", extra ?: "", CHECK_QEMU_MIN_MAJOR, CHECK_QEMU_MIN_MINOR);
}

static void check_space(const struct daemon_config *c, struct check_result *res) {
        char dir[CONFIG_PATH_MAX], vol[CONFIG_PATH_MAX + 8], a[32], b[32];
        existing_ancestor(c->data_dir, dir, sizeof dir);
        struct statvfs sv;
        if (statvfs(dir, &sv) < 0) {
                set(res, CHECK_ERROR, "cannot look at %s: %s", dir, strerror(errno));
                fix(res, "make the data dir reachable, or use another --data-dir");
                return;
        }
        uint64_t avail = (uint64_t) sv.f_bavail * sv.f_frsize;
        enum check_status s = check_space_status(avail);
        check_format_bytes(avail, a, sizeof a);
        check_format_bytes(CHECK_SPACE_ERROR_BYTES, b, sizeof b);
        snprintf(vol, sizeof vol, "%s/vol", c->data_dir);
        struct statvfs vv;
        if (is_mounted_below(vol) && statvfs(vol, &vv) == 0) {
                uint64_t vavail = (uint64_t) vv.f_bavail * vv.f_frsize;
                char va[32];
                check_format_bytes(vavail, va, sizeof va);
                enum check_status vs = check_space_status(vavail);
                set(res, MAX(s, vs), "%s free on the file system of %s, %s on its loop volume %s", a, dir,
                    va, vol);
                s = MAX(s, vs);
        } else
                set(res, s, "%s free on the file system of %s", a, dir);
        if (s == CHECK_ERROR)
                fix(res,
                    "airlockd needs at least %s (templates ~1.5 GiB, then each sandbox's changes): free "
                    "space "
                    "or use --data-dir on a larger disk",
                    b);
        else if (s == CHECK_WARN)
                fix(res, "templates take ~1.5 GiB and each sandbox its changes: free space, or use "
                         "--data-dir on a "
                         "larger disk, before it runs out");
}

int check_format_read(const char *control_dir, unsigned *ret_format) {
        _cleanup_free_ char *path = strdup_printf("%s/%s", control_dir, CHECK_FORMAT_FILE), *text = NULL;
        if (!path)
                return -ENOMEM;
        size_t len;
        int r = file_read_all(path, 64, &text, &len);
        if (r == -ENOENT || r == -ENOTDIR) {
                *ret_format = CHECK_DATA_FORMAT;
                return 0;
        }
        if (r == -EFBIG)
                return -EBADMSG;
        if (r < 0)
                return r;
        if (len > 0 && text[len - 1] == '\n')
                text[--len] = 0;
        uint64_t v;
        if (strlen(text) != len || !isdigit((unsigned char) text[0]) ||
            parse_u64(text, UINT32_MAX, &v) < 0 || v == 0)
                return -EBADMSG;
        *ret_format = (unsigned) v;
        return 0;
}

int check_format_write(const char *control_dir) {
        _cleanup_free_ char *path = strdup_printf("%s/%s", control_dir, CHECK_FORMAT_FILE);
        if (!path)
                return -ENOMEM;
        if (access(path, F_OK) == 0)
                return 0;
        char text[16];
        int k = snprintf(text, sizeof text, "%u\n", CHECK_DATA_FORMAT);
        return file_write_atomic(path, text, (size_t) k, 0600);
}

/* The format item; *ret_refuse when a start must not go on. */
static void check_format(const struct daemon_config *c, struct check_result *res) {
        struct stat st;
        if (stat(c->data_dir, &st) < 0) {
                set(res, CHECK_OK, "%s does not exist yet: the first start makes it (format %u)",
                    c->data_dir, CHECK_DATA_FORMAT);
                return;
        }
        unsigned format;
        int r = check_format_read(c->control_dir, &format);
        if (r == -EACCES) {
                set(res, CHECK_WARN, "cannot read %s/%s as uid %u", c->control_dir, CHECK_FORMAT_FILE,
                    (unsigned) geteuid());
                fix(res, "run the check as root");
        } else if (r == -EBADMSG) {
                set(res, CHECK_ERROR,
                    "%s/%s holds no format number: this data dir was not left by Airlock as it is",
                    c->control_dir, CHECK_FORMAT_FILE);
                fix(res,
                    "restore the file (a data dir of this version has \"%u\" in it) or use another "
                    "--data-dir",
                    CHECK_DATA_FORMAT);
        } else if (r < 0) {
                set(res, CHECK_ERROR, "cannot read %s/%s: %s", c->control_dir, CHECK_FORMAT_FILE,
                    strerror(-r));
                fix(res, "make it readable, or use another --data-dir");
        } else if (format > CHECK_DATA_FORMAT) {
                set(res, CHECK_ERROR,
                    "data dir %s has format %u, newer than this airlockd %s knows (%u): a newer "
                    "Airlock wrote it",
                    c->data_dir, format, AIRLOCK_VERSION, CHECK_DATA_FORMAT);
                fix(res, "run the newer Airlock on it, or start this one with another --data-dir");
        } else
                set(res, CHECK_OK, "data dir %s: format %u%s", c->data_dir, format,
                    access(c->control_dir, F_OK) < 0 ? " (made at the first start)" : "");
}

static void check_binaries(const struct daemon_config *c, struct check_result *res) {
        const char *mgr = getenv("AIRLOCK_NODEMGR_BINARY");
        const char *guest = getenv("AIRLOCK_GUEST_BINARY");
        const char *bins[] = {
                c->node_binary,
                mgr && *mgr ? mgr : AIRLOCK_NODEMGR_PATH,
                guest && *guest ? guest : AIRLOCK_GUEST_PATH,
        };
        char missing[1024] = "";
        for (size_t i = 0; i < ARRAY_SIZE(bins); i++)
                if (access(bins[i], i == 2 ? R_OK : X_OK) < 0)
                        snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                                 "%s%.600s (%s)", missing[0] ? ", " : "", bins[i], strerror(errno));
        if (missing[0]) {
                set(res, CHECK_ERROR, "missing: %s", missing);
                if (AIRLOCK_INSTALLED)
                        fix(res, "reinstall the package: apt install --reinstall airlock");
                else
                        fix(res, "build them: ninja -C %s (./run.sh builds, too)", AIRLOCK_BUILD_DIR);
                return;
        }
        set(res, CHECK_OK, "airlock-node, airlock-nodemgr and airlock-guest found (%s, %s)", c->node_binary,
            bins[1]);
}

/* The item for an airlockd answering at addr: what its health says. */
static void describe_health(const char *where, int status, const json_t *body, struct check_result *res) {
        const json_t *err = json_object_get(body, "error");
        const char *code = json_string_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        const json_t *templates = json_object_get(body, "templates");
        if (status == 200 && json_is_object(body)) {
                const char *accel = json_string_value(json_object_get(body, "accel"));
                set(res, CHECK_OK,
                    "airlockd answers on %s: ready (node reachable, accel %s, %zu default "
                    "template%s ready)",
                    where, accel ?: "?", json_array_size(templates),
                    json_array_size(templates) == 1 ? "" : "s");
                return;
        }
        if (status == 503 && code && strcmp(code, "template_failed") == 0) {
                set(res, CHECK_ERROR, "airlockd answers on %s, but %.400s", where,
                    msg ?: "a default template failed");
                fix(res, "read the build log and fix the cause; then restart airlockd, or create a sandbox "
                         "of that "
                         "template, to build it again");
                return;
        }
        if (status == 503 && json_is_array(templates)) {
                char d[CHECK_DETAIL_MAX] = "";
                size_t i;
                json_t *t;
                json_array_foreach(templates, i, t) {
                        if (strcmp(json_string_value(json_object_get(t, "state")) ?: "", "ready") == 0)
                                continue;
                        char one[400];
                        progress_describe(t, one, sizeof one);
                        snprintf(d + strlen(d), sizeof d - strlen(d), "%s%s", d[0] ? "; " : "", one);
                }
                set(res, CHECK_WARN, "airlockd answers on %s, not ready yet: %.400s", where,
                    d[0] ? d : "default templates still building");
                fix(res, "wait: the build goes on by itself (GET /v1/health answers 200 once it is done)");
                return;
        }
        if (status == 503 && code) {
                set(res, CHECK_ERROR, "airlockd answers on %s, but: %.400s", where, msg ?: code);
                fix(res,
                    "read airlockd's log (the prog=airlock-node lines say why the node is down); restart "
                    "airlockd");
                return;
        }
        set(res, CHECK_ERROR, "%s is in use by something that is not airlockd (GET /v1/health: HTTP %d)",
            where, status);
        fix(res, "stop it, or give airlockd another address with --listen HOST:PORT");
}

int check_listen_probe(const struct sockaddr_storage *addr, socklen_t len) {
        if (addr_port(addr) == 0)
                return 0;
        _cleanup_close_ int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        /* as libmicrohttpd binds: a port with connections in TIME_WAIT is free */
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (addr->ss_family == AF_INET6)
                (void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, (const struct sockaddr *) addr, len) < 0)
                return negative_errno();
        return 0;
}

void check_listen_message(const char *listen, int r, char *buf, size_t n) {
        if (r == -EADDRINUSE)
                snprintf(buf, n,
                         "cannot listen on %s: address in use (another airlockd?); stop it or use --listen "
                         "HOST:PORT",
                         listen);
        else if (r == -EADDRNOTAVAIL)
                snprintf(buf, n,
                         "cannot listen on %s: no such address on this machine; use --listen with one of "
                         "its addresses (127.0.0.1:7420)",
                         listen);
        else if (r == -EACCES)
                snprintf(buf, n,
                         "cannot listen on %s: permission denied (a port below 1024 needs privileges "
                         "airlockd drops); use --listen HOST:PORT with a port above 1023",
                         listen);
        else
                snprintf(buf, n, "cannot listen on %s: %s; use --listen HOST:PORT", listen, strerror(-r));
}

/* The api item; returns whether an airlockd answers there. */
static bool check_api(const struct daemon_config *c, struct check_result *res) {
        char where[80];
        addr_text(&c->listen_addr, where, sizeof where);
        int r = check_listen_probe(&c->listen_addr, c->listen_addr_len);
        if (r == 0) {
                set(res, CHECK_OK, "%s is free (no airlockd running there)", c->listen);
                return false;
        }
        if (r != -EADDRINUSE) {
                char m[CHECK_DETAIL_MAX];
                check_listen_message(c->listen, r, m, sizeof m);
                char *semi = strrchr(m, ';');
                if (semi) {
                        *semi = 0;
                        fix(res, "%s", semi + 2);
                }
                set(res, CHECK_ERROR, "%s", m);
                return false;
        }
        int status = 0;
        _cleanup_(json_decrefp) json_t *body = NULL;
        r = http_get_json(&c->listen_addr, c->listen_addr_len, "/v1/health", &status, &body);
        if (r < 0) {
                set(res, CHECK_ERROR, "%s is in use, and GET /v1/health there fails: %s", c->listen,
                    strerror(-r));
                fix(res,
                    "stop what listens there (another airlockd that hangs?), or use --listen HOST:PORT");
                return false;
        }
        describe_health(c->listen, status, body, res);
        return status == 200 || status == 503;
}

void check_host(const struct daemon_config *c, struct check_report *rep) {
        *rep = (struct check_report){ 0 };
        struct check_result api = { .item = "api" };
        bool answers = check_api(c, &api);
        check_user(c, answers, add(rep, "user"));
        bool kvm = check_accel(c, add(rep, "accel"));
        check_cpu_model(c, kvm, add(rep, "cpu"));
        check_storage(c, add(rep, "storage"));
        check_cgroups(add(rep, "cgroups"));
        check_namespaces(add(rep, "namespaces"));
        check_qemu(c, add(rep, "qemu"));
        check_space(c, add(rep, "space"));
        check_format(c, add(rep, "format"));
        check_binaries(c, add(rep, "binaries"));
        *add(rep, "api") = api;
}

int check_main(const struct daemon_config *c) {
        struct check_report rep;
        check_host(c, &rep);
        if (c->json) {
                _cleanup_(json_decrefp) json_t *j = check_report_json(&rep);
                if (!j || json_dumpf(j, stdout, JSON_INDENT(2)) < 0 || fputc('\n', stdout) == EOF) {
                        fprintf(stderr, "airlockd: cannot write the report\n");
                        return 1;
                }
        } else
                check_report_print(&rep, stdout);
        if (fflush(stdout) == EOF)
                return 1;
        return check_report_has_error(&rep) ? 1 : 0;
}

/* "airlockd: error: DETAIL; FIX" on err. */
static void say(FILE *err, const struct check_result *res) {
        fprintf(err, "airlockd: error: %s%s%s\n", res->detail, res->fix[0] ? "; " : "", res->fix);
}

int check_startup(const struct daemon_config *c, FILE *err) {
        struct check_result res;
        bool failed = false;
        const char *mgr_socket = getenv("AIRLOCK_NODEMGR_SOCKET");

        /* only a start that spawns the node needs root (airlock-nodemgr
         * runs airlockd unprivileged with --no-spawn-node) */
        if (c->spawn_node && geteuid() != 0 && !(mgr_socket && *mgr_socket)) {
                res = (struct check_result){ .item = "user" };
                check_user(c, false, &res);
                say(err, &res);
                failed = true;
        }
        res = (struct check_result){ .item = "format" };
        check_format(c, &res);
        if (res.status == CHECK_ERROR) {
                say(err, &res);
                failed = true;
        }
        if (c->spawn_node) {
                res = (struct check_result){ .item = "accel" };
                bool kvm = check_accel(c, &res); /* an error only when kvm is asked for */
                if (res.status == CHECK_ERROR) {
                        say(err, &res);
                        failed = true;
                }
                res = (struct check_result){ .item = "cpu" };
                check_cpu_model(c, kvm, &res); /* an error: a model QEMU does not have */
                if (res.status == CHECK_ERROR) {
                        say(err, &res);
                        failed = true;
                }
                res = (struct check_result){ .item = "qemu" };
                check_qemu(c, &res);
                if (res.status == CHECK_ERROR) {
                        say(err, &res);
                        failed = true;
                }
        }
        res = (struct check_result){ .item = "space" };
        check_space(c, &res);
        if (res.status == CHECK_ERROR) {
                say(err, &res);
                failed = true;
        }
        /* an airlockd that is stopping (a restart right after a kill) lets
         * go of the port in a moment: give it that */
        int r = check_listen_probe(&c->listen_addr, c->listen_addr_len);
        for (uint64_t until = now_monotonic_ns() + PORT_GRACE_MS * 1000000ULL;
             r == -EADDRINUSE && now_monotonic_ns() < until;) {
                nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000000L }, NULL);
                r = check_listen_probe(&c->listen_addr, c->listen_addr_len);
        }
        if (r < 0) {
                char m[CHECK_DETAIL_MAX];
                int status = 0;
                _cleanup_(json_decrefp) json_t *body = NULL;
                if (r == -EADDRINUSE &&
                    http_get_json(&c->listen_addr, c->listen_addr_len, "/v1/health", &status, &body) == 0 &&
                    (status == 200 || status == 503) && json_is_object(body))
                        snprintf(m, sizeof m,
                                 "cannot listen on %s: an airlockd already serves it (GET /v1/health "
                                 "answers %d); stop it or use --listen HOST:PORT",
                                 c->listen, status);
                else
                        check_listen_message(c->listen, r, m, sizeof m);
                fprintf(err, "airlockd: error: %s\n", m);
                failed = true;
        }
        if (failed)
                fprintf(err, "airlockd: %s`airlockd --check` checks the whole host\n",
                        c->spawn_node ? "nothing was started; " : "");
        fflush(err);
        return failed ? -EINVAL : 0;
}
