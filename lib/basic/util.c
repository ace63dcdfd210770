/* SPDX-License-Identifier: Apache-2.0 */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "macros.h"


/* One transfer of a whole buffer: step moves at most n bytes of p (a
 * read(), write() or getrandom() of fd), repeated past EINTR and short
 * counts until n are done. A step that moves nothing (end of file): -EPIPE. */
enum transfer { TRANSFER_READ, TRANSFER_WRITE, TRANSFER_RANDOM, TRANSFER_PREAD, TRANSFER_PWRITE };

/* off: where TRANSFER_PREAD and TRANSFER_PWRITE start (the others ignore it). */
static int transfer_all(enum transfer how, int fd, uint8_t *p, size_t n, uint64_t off) {
        while (n > 0) {
                ssize_t k = how == TRANSFER_READ     ? read(fd, p, n)
                            : how == TRANSFER_WRITE  ? write(fd, p, n)
                            : how == TRANSFER_PREAD  ? pread(fd, p, n, (off_t) off)
                            : how == TRANSFER_PWRITE ? pwrite(fd, p, n, (off_t) off)
                                                     : getrandom(p, n, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        return -EPIPE;
                p += k;
                n -= (size_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

int fd_read_exact(int fd, void *buf, size_t n) {
        return transfer_all(TRANSFER_READ, fd, buf, n, 0);
}

int fd_write_all(int fd, const void *buf, size_t n) {
        return transfer_all(TRANSFER_WRITE, fd, (uint8_t *) buf, n, 0);
}

int fd_pread_exact(int fd, void *buf, size_t n, uint64_t off) {
        return transfer_all(TRANSFER_PREAD, fd, buf, n, off);
}

int fd_pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
        return transfer_all(TRANSFER_PWRITE, fd, (uint8_t *) buf, n, off);
}

int fd_read_until_eof(int fd, char *buf, size_t n, uint64_t deadline_ns) {
        size_t len = 0;
        int r = 0;
        buf[0] = 0;
        for (;;) {
                uint64_t now = now_monotonic_ns();
                if (now >= deadline_ns) {
                        r = -ETIMEDOUT;
                        break;
                }
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int k = poll(&p, 1,
                             (int) MIN((deadline_ns - now + 999999ULL) / 1000000ULL, (uint64_t) INT32_MAX));
                if (k < 0 && errno != EINTR) {
                        r = negative_errno();
                        break;
                }
                if (k <= 0)
                        continue;
                char chunk[1024];
                ssize_t got = read(fd, chunk, sizeof chunk);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0)
                        r = negative_errno();
                if (got <= 0)
                        break;
                size_t take = MIN((size_t) got, n - 1 - len);
                memcpy(buf + len, chunk, take);
                len += take;
        }
        buf[len] = 0;
        return r;
}

int fd_set_cloexec(int fd, bool on) {
        if (fd < 0)
                return 0;
        int flags = fcntl(fd, F_GETFD);
        if (flags < 0)
                return negative_errno();
        int want = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC;
        if (want != flags && fcntl(fd, F_SETFD, want) < 0)
                return negative_errno();
        return 0;
}

int file_read_all(const char *path, size_t max, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        size_t cap = 4096, len = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len == cap) {
                        if (cap > max)
                                return -EFBIG;
                        size_t ncap = MIN(cap * 2, max + 1);
                        char *nb = realloc(buf, ncap + 1);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                        cap = ncap;
                }
                ssize_t k = read(fd, buf + len, cap - len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        break;
                len += (size_t) k;
                if (len > max)
                        return -EFBIG;
        }
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_len)
                *ret_len = len;
        return 0;
}

static int file_write_renamed(const char *path, const void *data, size_t len, mode_t mode, bool sync) {
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int) getpid()) >= (int) sizeof tmp)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return negative_errno();
        int r = fd_write_all(fd, data, len);
        if (r >= 0 && sync && fsync(fd) < 0)
                r = negative_errno();
        if (r >= 0 && rename(tmp, path) < 0)
                r = negative_errno();
        if (r < 0)
                unlink(tmp);
        return r;
}

int file_write_atomic(const char *path, const void *data, size_t len, mode_t mode) {
        return file_write_renamed(path, data, len, mode, true);
}

int file_write_replace(const char *path, const void *data, size_t len, mode_t mode) {
        return file_write_renamed(path, data, len, mode, false);
}

int mkdir_p(const char *path, mode_t mode) {
        char buf[PATH_MAX];
        size_t n = strlen(path);
        if (n == 0 || n >= sizeof buf)
                return -EINVAL;
        memcpy(buf, path, n + 1);
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                if (mkdir(buf, mode) < 0 && errno != EEXIST)
                        return negative_errno();
                *p = '/';
        }
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return negative_errno();
        return 0;
}

static int rm_rf_at(int parent_fd, const char *name, dev_t dev) {
        struct stat st;
        if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (!S_ISDIR(st.st_mode))
                return unlinkat(parent_fd, name, 0) < 0 && errno != ENOENT ? negative_errno() : 0;
        if (st.st_dev != dev)
                return -EXDEV; /* a mount point: refuse to descend */
        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -ENOMEM;
        }
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                int k = rm_rf_at(dirfd(d), de->d_name, dev);
                if (k < 0 && r == 0)
                        r = k;
        }
        closedir(d);
        if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                r = negative_errno();
        return r;
}

int rm_rf(const char *path) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        return rm_rf_at(AT_FDCWD, path, st.st_dev);
}

/* True when the n bytes at p are all zero. */
static bool mem_is_zero(const char *p, size_t n) {
        return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Writes the data extents of in to out: holes are never read, and blocks of
 * zeros inside data extents are skipped too (guest memory images are full of
 * them), so they become holes in out. out's size is set at the end. */
static int fd_copy_sparse(int in, int out, off_t size) {
        const size_t bufsize = 1 << 20, block = 4096;
        _cleanup_free_ char *buf = malloc(bufsize);
        if (!buf)
                return -ENOMEM;
        for (off_t off = 0; off < size;) {
                off_t data = lseek(in, off, SEEK_DATA);
                if (data < 0) {
                        if (errno == ENXIO)
                                break; /* only a hole is left */
                        return negative_errno();
                }
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0)
                        return negative_errno();
                hole = MIN(hole, size);
                for (off_t p = data; p < hole;) {
                        size_t want = (size_t) MIN((off_t) bufsize, hole - p);
                        ssize_t k = pread(in, buf, want, p);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return k < 0 ? negative_errno() : -EIO; /* shrank under us */
                        for (size_t i = 0; i < (size_t) k; i += block) {
                                size_t len = MIN(block, (size_t) k - i);
                                if (mem_is_zero(buf + i, len))
                                        continue;
                                ssize_t w = pwrite(out, buf + i, len, p + (off_t) i);
                                if (w != (ssize_t) len)
                                        return w < 0 ? negative_errno() : -EIO;
                        }
                        p += k;
                }
                off = hole;
        }
        if (ftruncate(out, size) < 0)
                return negative_errno();
        return 0;
}

int fd_clone_or_copy(int in, int out, bool *ret_cloned) {
        struct stat st;
        if (fstat(in, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (ioctl(out, FICLONE, in) == 0) {
                if (ret_cloned)
                        *ret_cloned = true;
                return 0;
        }
        int r = fd_copy_sparse(in, out, st.st_size);
        if (r < 0)
                return r;
        if (ret_cloned)
                *ret_cloned = false;
        return 0;
}

int file_clone_or_copy(const char *src, const char *dst, bool *ret_cloned) {
        _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return negative_errno();
        struct stat st;
        if (fstat(in, &st) < 0)
                return negative_errno();
        _cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
        if (out < 0)
                return negative_errno();
        int r = fd_clone_or_copy(in, out, ret_cloned);
        if (r < 0)
                unlink(dst);
        return r;
}

uint64_t now_monotonic_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

uint64_t now_realtime_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

int random_bytes(void *buf, size_t n) {
        return transfer_all(TRANSFER_RANDOM, -1, buf, n, 0);
}

int random_id(const char *prefix, size_t nbytes, char *out, size_t outlen) {
        uint8_t raw[32];
        size_t plen = strlen(prefix);
        if (nbytes > sizeof raw || plen + nbytes * 2 + 1 > outlen)
                return -EINVAL;
        int r = random_bytes(raw, nbytes);
        if (r < 0)
                return r;
        memcpy(out, prefix, plen);
        for (size_t i = 0; i < nbytes; i++)
                snprintf(out + plen + i * 2, 3, "%02x", raw[i]);
        return 0;
}

bool name_is_valid(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 64 || s[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

int hex_digit_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int parse_u64(const char *s, uint64_t max, uint64_t *ret) {
        if (!s || !*s || *s == '-' || *s == '+')
                return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int path_check(const char *path, size_t len) {
        if (!path || len == 0 || path[0] != '/' || memchr(path, 0, len))
                return -EINVAL;
        if (len > PATH_SAFE_MAX)
                return -ENAMETOOLONG;
        for (size_t i = 0; i < len;) {
                while (i < len && path[i] == '/')
                        i++;
                size_t start = i;
                while (i < len && path[i] != '/')
                        i++;
                if (i - start == 2 && path[start] == '.' && path[start + 1] == '.')
                        return -EINVAL;
        }
        return 0;
}

char *strdup_vprintf(const char *fmt, va_list ap) {
        char *s = NULL;
        return vasprintf(&s, fmt, ap) < 0 ? NULL : s;
}

char *strdup_printf(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *s = strdup_vprintf(fmt, ap);
        va_end(ap);
        return s;
}

void node_name_default(char out[65]) {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) < 0)
                host[0] = 0;
        host[strcspn(host, ".")] = 0;
        snprintf(out, 65, "%s", name_is_valid(host) ? host : "node");
}

bool user_name_is_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > USER_NAME_MAX || !((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
                return false;
        for (const char *p = name + 1; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
                        return false;
        return true;
}

bool strv_contains(const char *const *list, const char *s) {
        for (size_t i = 0; list && list[i]; i++)
                if (strcmp(list[i], s) == 0)
                        return true;
        return false;
}

int str_copy(char *dst, size_t n, const char *src) {
        size_t len = strlen(src);
        if (len >= n)
                return -ENAMETOOLONG;
        memcpy(dst, src, len + 1);
        return 0;
}

int signalfd_supervisor(void) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGCHLD);
        /* blocked before any thread exists, so every thread inherits it */
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;
        int fd = signalfd(-1, &mask, SFD_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int64_t now_unix_ms(void) {
        return (int64_t) (now_realtime_ns() / 1000000ULL);
}

/* Length of the valid UTF-8 sequence at p (1..4), or the negated length of
 * its longest valid prefix (at least 1) when it is invalid, so that one
 * U+FFFD replaces a "maximal subpart" as Unicode recommends. */
static int utf8_seq(const uint8_t *p, size_t avail) {
        uint8_t c = p[0];
        int need;
        uint8_t lo = 0x80, hi = 0xbf;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
                need = 2;
                if (c == 0xe0)
                        lo = 0xa0;
                else if (c == 0xed)
                        hi = 0x9f; /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
                need = 3;
                if (c == 0xf0)
                        lo = 0x90;
                else if (c == 0xf4)
                        hi = 0x8f; /* <= U+10FFFF */
        } else
                return -1;

        for (int i = 1; i <= need; i++) {
                if ((size_t) i >= avail)
                        return -i;
                uint8_t b = p[i];
                if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
                        return -i;
        }
        return need + 1;
}

char *utf8_sanitize(const void *data, size_t len, size_t *ret_len) {
        const uint8_t *in = data;
        /* worst case: every byte becomes the 3-byte U+FFFD */
        if (len > (SIZE_MAX - 1) / 3)
                return NULL;
        char *out = malloc(len * 3 + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len;) {
                int k = utf8_seq(in + i, len - i);
                if (k > 0) {
                        memcpy(out + o, in + i, (size_t) k);
                        o += (size_t) k;
                        i += (size_t) k;
                } else {
                        memcpy(out + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i += (size_t) -k;
                }
        }
        out[o] = 0;
        if (ret_len)
                *ret_len = o;
        return out;
}

size_t utf8_cut(const char *s, size_t len, size_t max) {
        if (len <= max)
                return len;
        size_t n = max;
        /* back up over continuation bytes to the start of a character */
        while (n > 0 && ((uint8_t) s[n] & 0xc0) == 0x80)
                n--;
        return n;
}
