/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "util.h"
#include "vmm.h"

bool node_path_is_valid(const char *p) {
        return p && path_check(p, strnlen(p, NODE_PATH_MAX + 1)) == 0;
}

bool node_user_name_is_valid(const char *name) {
        return user_name_is_valid(name);
}

const char *node_errno_code(int r) {
        switch (-r) {
        case EINVAL:
        case ENAMETOOLONG:
        case EBADMSG:
                return "invalid";
        case ENOENT:
        case ESRCH:
                return "not_found";
        case EEXIST:
        case EBUSY:
        case EALREADY:
                return "conflict";
        case EFBIG:
        case E2BIG:
        case EMSGSIZE:
                return "too_large";
        case EAGAIN:
        case ENOSPC:
        case EMFILE:
        case EUSERS:
                return "unavailable";
        case ETIMEDOUT:
                return "timeout";
        case EXDEV:
                return "cpu_mismatch";
        case ECONNRESET:
        case EPIPE:
        case EPROTO:
        case ECONNREFUSED:
        case ENOTCONN:
                return "guest";
        default:
                return "internal";
        }
}

const char *node_guest_errno_code(int guest_errno) {
        switch (guest_errno) {
        case ENOENT:
                return "not_found";
        case EINVAL:
        case ENOTDIR:
        case EISDIR:
        case ENAMETOOLONG: /* a component over NAME_MAX: the path asked for */
        case ELOOP:        /* a symlink loop on the path asked for */
                return "invalid";
        case EFBIG:
                return "too_large";
        case EEXIST:    /* mkdir of a name that is taken */
        case ENOTEMPTY: /* a rename onto, or a remove of, a directory with files */
                return "conflict";
        case EACCES: /* the request's user may not (a cwd, a program) */
        case EPERM:
                return "forbidden";
        default:
                return "guest";
        }
}

char *node_base64_encode(const void *data, size_t len) {
        size_t n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
        char *out = malloc(n);
        if (!out)
                return NULL;
        sodium_bin2base64(out, n, data, len, sodium_base64_VARIANT_ORIGINAL);
        return out;
}

int node_base64_decode(const char *s, uint8_t **ret, size_t *ret_len) {
        size_t slen = strlen(s);
        size_t cap = slen / 4 * 3 + 3;
        _cleanup_free_ uint8_t *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        size_t n = 0;
        const char *end = NULL;
        if (sodium_base642bin(buf, cap, s, slen, NULL, &n, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
            end != s + slen)
                return -EINVAL;
        *ret = TAKE_PTR(buf);
        *ret_len = n;
        return 0;
}

void node_hex(const uint8_t *data, size_t n, char *out) {
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[data[i] >> 4];
                out[2 * i + 1] = digits[data[i] & 15];
        }
        out[2 * n] = 0;
}

/* The number of the last run dir made; starts after those an earlier node
 * left (node_vm_run_dirs_sweep), so an adopted VM's dir is never reused. */
static uint64_t run_dir_counter;

int node_vm_run_dir(const char *data_dir, char **ret) {
        uint64_t n = __atomic_add_fetch(&run_dir_counter, 1, __ATOMIC_SEQ_CST);
        char *base = NULL, *dir = NULL;
        if (asprintf(&base, "%s/run/vm", data_dir) < 0)
                return -ENOMEM;
        int r = mkdir_p(base, 0700);
        if (r >= 0 && asprintf(&dir, "%s/%llu", base, (unsigned long long) n) < 0)
                r = -ENOMEM;
        free(base);
        if (r < 0)
                return r;
        rm_rf(dir);
        if (mkdir(dir, 0700) < 0) {
                r = negative_errno();
                free(dir);
                return r;
        }
        *ret = dir;
        return 0;
}

int node_vm_run_dirs_sweep(const char *data_dir, bool (*keep)(const char *path, void *userdata), void *userdata) {
        _cleanup_free_ char *base = NULL;
        if (asprintf(&base, "%s/run/vm", data_dir) < 0)
                return -ENOMEM;
        DIR *d = opendir(base);
        if (!d)
                return errno == ENOENT ? 0 : negative_errno();
        uint64_t max = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                uint64_t n = 0;
                if (parse_u64(de->d_name, UINT64_MAX / 2, &n) >= 0 && n > max)
                        max = n;
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "%s/%s", base, de->d_name) < 0) {
                        closedir(d);
                        return -ENOMEM;
                }
                if (keep && keep(path, userdata))
                        continue;
                int r = vmm_kill_recorded(path);
                if (r < 0)
                        log_warn_errno(r, "Failed to end the VM recorded in %s: %m", path);
                (void) rm_rf(path);
        }
        closedir(d);
        __atomic_store_n(&run_dir_counter, max, __ATOMIC_SEQ_CST);
        return 0;
}

int node_run_link(const char *run_dir, const char *name, const char *target, char **ret_link) {
        _cleanup_free_ char *link = NULL, *tmp = NULL;
        if (asprintf(&link, "%s/%s", run_dir, name) < 0 || asprintf(&tmp, "%s/%s.tmp", run_dir, name) < 0)
                return -ENOMEM;
        (void) unlink(tmp);
        if (symlink(target, tmp) < 0)
                return negative_errno();
        if (rename(tmp, link) < 0) {
                int r = negative_errno();
                (void) unlink(tmp);
                return r;
        }
        if (ret_link)
                *ret_link = TAKE_PTR(link);
        return 0;
}

int node_lock_data_dir(const char *data_dir, unsigned wait_s) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/node.lock", data_dir) < 0)
                return -ENOMEM;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return negative_errno();
        uint64_t deadline = now_monotonic_ns() + (uint64_t) wait_s * 1000000000ULL;
        bool told = false;
        while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int r = negative_errno();
                if (r != -EWOULDBLOCK || now_monotonic_ns() >= deadline) {
                        close(fd);
                        return r == -EWOULDBLOCK ? -EBUSY : r;
                }
                if (!told)
                        log_info("waiting for the previous airlock-node to release %s", path);
                told = true;
                struct timespec ts = { 0, 50 * 1000000L };
                nanosleep(&ts, NULL);
        }
        return 0; /* fd stays open: the lock lives as long as the process */
}

void node_cond_init(pthread_cond_t *cond) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &ca);
        pthread_condattr_destroy(&ca);
}

void node_deadline_after_ms(struct timespec *ts, int64_t ms) {
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += (time_t) (ms / 1000);
        ts->tv_nsec += (long) (ms % 1000) * 1000000L;
        if (ts->tv_nsec >= 1000000000L) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000L;
        }
}

void node_hold_point(const char *point) {
        const char *list = getenv("AIRLOCK_TEST_HOLD");
        size_t n = strlen(point);
        for (const char *p = list; p && *p;) {
                size_t k = strcspn(p, ",");
                if (k == n && strncmp(p, point, n) == 0) {
                        const char *release = getenv("AIRLOCK_TEST_HOLD_RELEASE");
                        log_warn("test hold point %s reached (AIRLOCK_TEST_HOLD): blocking until %s", point,
                                 release && *release ? release : "killed");
                        while (!(release && *release && access(release, F_OK) == 0))
                                (void) usleep(50 * 1000);
                        log_warn("test hold point %s released", point);
                        return;
                }
                p += k + (p[k] == ',');
        }
}

uint64_t node_meminfo_kib(const char *field) {
        FILE *f = fopen("/proc/meminfo", "re");
        unsigned long long kib = 0;
        if (!f)
                return 0;
        char line[128];
        size_t n = strlen(field);
        while (fgets(line, sizeof line, f))
                if (strncmp(line, field, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%llu", &kib) == 1)
                        break;
        fclose(f);
        return kib;
}

const char *node_agent_version(const char *agent) {
        const char *sp = strrchr(agent, ' ');
        return sp ? sp + 1 : agent;
}

/* The number a version part starts with (0 for none), *p moved to the next part. */
static unsigned long version_part(const char **p) {
        unsigned long v = 0;
        for (; **p >= '0' && **p <= '9'; (*p)++)
                v = v < ULONG_MAX / 10 ? v * 10 + (unsigned long) (**p - '0') : ULONG_MAX;
        *p += strcspn(*p, ".");
        if (**p == '.')
                (*p)++;
        return v;
}

int node_agent_version_cmp(const char *a, const char *b) {
        const char *p = node_agent_version(a), *q = node_agent_version(b);
        while (*p || *q) {
                unsigned long x = version_part(&p), y = version_part(&q);
                if (x != y)
                        return x < y ? -1 : 1;
        }
        return 0;
}

/* ---- child processes ---- */

int node_spawn(char *const argv[], int out_fd, pid_t *ret_pid) {
        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return negative_errno();
        sigset_t empty;
        sigemptyset(&empty);

        pid_t pid = fork();
        if (pid < 0)
                return negative_errno();
        if (pid == 0) {
                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGPIPE, SIG_DFL);
                signal(SIGINT, SIG_DFL);
                signal(SIGTERM, SIG_DFL);
                signal(SIGQUIT, SIG_DFL);
                sigprocmask(SIG_SETMASK, &empty, NULL);
                if (dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0)
                        _exit(127);
                execvp(argv[0], argv);
                _exit(127);
        }
        *ret_pid = pid;
        return 0;
}

int node_wait_child(pid_t pid, unsigned timeout_s, int *ret_status) {
        uint64_t deadline = now_monotonic_ns() + (uint64_t) timeout_s * 1000000000ULL;
        for (;;) {
                int status;
                pid_t k = waitpid(pid, &status, WNOHANG);
                if (k == pid) {
                        *ret_status = status;
                        return 0;
                }
                if (k < 0 && errno != EINTR)
                        return negative_errno();
                if (now_monotonic_ns() > deadline) {
                        kill(-pid, SIGKILL);
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        return -ETIMEDOUT;
                }
                struct timespec ts = {0, 20 * 1000000L};
                nanosleep(&ts, NULL);
        }
}

int node_program_version(const char *program, char **ret) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        _cleanup_close_ int rd = p[0];
        char *argv[] = {(char *) program, (char *) "--version", NULL};
        pid_t pid;
        int r = node_spawn(argv, p[1], &pid);
        close(p[1]);
        if (r < 0)
                return r;
        char buf[1024];
        size_t len = 0;
        for (;;) {
                ssize_t k = read(rd, buf + len, sizeof buf - 1 - len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                len += (size_t) k;
                if (len == sizeof buf - 1)
                        break;
        }
        buf[len] = 0;
        int status;
        r = node_wait_child(pid, 30, &status);
        if (r < 0)
                return r;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || len == 0)
                return -ENOEXEC;
        buf[strcspn(buf, "\n")] = 0;
        char *s = strdup(buf);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

unsigned node_cpus_within(unsigned lo, unsigned hi) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < (long) lo)
                return lo;
        return cpus > (long) hi ? hi : (unsigned) cpus;
}
