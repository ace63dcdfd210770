/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * File, fd and time helpers shared by every program, including the static
 * guest agent (so: libc only, no other dependency). All return 0 or a
 * negative errno; out-parameters are written only on success.
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads exactly n bytes. Returns 0, -EPIPE on EOF before n bytes (nothing
 * read at all also gives -EPIPE), or another negative errno. Retries EINTR. */
int fd_read_exact(int fd, void *buf, size_t n);
/* Writes all n bytes, retrying short writes and EINTR. */
int fd_write_all(int fd, const void *buf, size_t n);
/* Little-endian integers in byte buffers (file formats: sealed artifacts,
 * deltas). */
static inline uint32_t le32_load(const uint8_t *p) {
        return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}
static inline uint64_t le64_load(const uint8_t *p) {
        return (uint64_t) le32_load(p) | (uint64_t) le32_load(p + 4) << 32;
}
static inline void le32_store(uint8_t *p, uint32_t v) {
        for (unsigned i = 0; i < 4; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}
static inline void le64_store(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

/* The same at offset off (pread/pwrite: the fd's offset stays). */
int fd_pread_exact(int fd, void *buf, size_t n, uint64_t off);
int fd_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
/* Reads fd until EOF or deadline_ns (CLOCK_MONOTONIC): the first n - 1
 * bytes go into buf (n >= 1), NUL-terminated, the rest is read and
 * dropped. 0 at EOF, -ETIMEDOUT at the deadline, or read's error. */
int fd_read_until_eof(int fd, char *buf, size_t n, uint64_t deadline_ns);
/* Sets (on) or clears FD_CLOEXEC on fd (-1: nothing to do). 0 or a
 * negative errno. */
int fd_set_cloexec(int fd, bool on);

/* Reads a whole file of at most max bytes into a NUL-terminated buffer.
 * -EFBIG when the file is larger than max. */
int file_read_all(const char *path, size_t max, char **ret, size_t *ret_len);
/* Writes data to path through a temporary file and rename(2), so readers see
 * the old or the new content, never a mix. */
int file_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
/* The same without fsync: readers still never see a mix, but a crash may
 * lose the write. For runtime state that is rewritten anyway (the guest's
 * identity files, where an fsync costs a disk flush on every restore). */
int file_write_replace(const char *path, const void *data, size_t len, mode_t mode);

/* mkdir -p with the given mode for created directories. */
int mkdir_p(const char *path, mode_t mode);
/* rm -rf that does not cross mount points. Missing path is success. */
int rm_rf(const char *path);

/* Copies src to dst, trying FICLONE first (instant on btrfs/xfs); falls back
 * to a byte copy that keeps holes. ret_cloned (may be NULL) tells which. */
int file_clone_or_copy(const char *src, const char *dst, bool *ret_cloned);
/* The same between open fds: copies all of in (a regular file, read with
 * pread, so its offset does not matter) into out, which must be empty and
 * writable. FICLONE when both are on one reflink-capable file system, else
 * a copy of the data extents in which holes and all-zero 4 KiB blocks stay
 * holes; out gets in's size. -EINVAL when in is not a regular file. */
int fd_clone_or_copy(int in, int out, bool *ret_cloned);

/* For a supervisor (airlockd, airlock-nodemgr): blocks SIGTERM, SIGINT
 * and SIGCHLD in this thread and every thread started after it, and
 * returns a signalfd (close-on-exec) to read them from, or -errno. */
int signalfd_supervisor(void);

uint64_t now_monotonic_ns(void);
uint64_t now_realtime_ns(void);
/* Unix time in milliseconds (the store's timestamps). */
int64_t now_unix_ms(void);

/* Fills buf with n random bytes from getrandom(2). */
int random_bytes(void *buf, size_t n);
/* Writes prefix + 2*nbytes hex digits + NUL into out (size outlen). */
int random_id(const char *prefix, size_t nbytes, char *out, size_t outlen);

/* Returns true if s is a safe single path component for ids and names:
 * 1..64 chars of [A-Za-z0-9._-], not starting with '.' */
bool name_is_valid(const char *s);
/* A node's name unless it is given one: the host name's first label when
 * it is a valid name (the nodes of a cluster need distinct names), else
 * "node". */
void node_name_default(char out[65]);

/* A user name as the guest's useradd takes it, the one rule of the node
 * and the guest agent: [a-z_][a-z0-9_-]*, at most USER_NAME_MAX bytes. */
#define USER_NAME_MAX 32
bool user_name_is_valid(const char *name);

/* The longest path any peer may name (host API, node, guest). */
#define PATH_SAFE_MAX 4096

/*
 * The one rule for every path a client or the host names inside a sandbox:
 * len bytes, absolute, no NUL, at most PATH_SAFE_MAX bytes, no ".."
 * component. Returns 0, -EINVAL (empty, relative, NUL, "..") or
 * -ENAMETOOLONG.
 */
int path_check(const char *path, size_t len);

/* asprintf() that returns the string, or NULL when out of memory. */
char *strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *strdup_vprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* true when s is one of the NULL-terminated list's strings. */
bool strv_contains(const char *const *list, const char *s);

/* Copies src into dst of size n, NUL-terminated: 0, or -ENAMETOOLONG (dst
 * untouched) when src with its NUL does not fit. The one string copy
 * (banned.h bans strcpy, strcat and strncpy). */
int str_copy(char *dst, size_t n, const char *src);

/* Parses a base-10 unsigned integer with range check. */
int parse_u64(const char *s, uint64_t max, uint64_t *ret);

/* The value of a hex digit (either case), or -1. */
int hex_digit_value(char c);

/* Returns a NUL-terminated copy of data[0..len) that is valid UTF-8: every
 * byte that does not start a complete, shortest-form, non-surrogate sequence
 * <= U+10FFFF is replaced by U+FFFD. NUL bytes are kept (the length tells).
 * *ret_len (may be NULL) gets the output length. Returns NULL on ENOMEM. */
char *utf8_sanitize(const void *data, size_t len, size_t *ret_len);

/* Length of the longest prefix of s[0..len) (valid UTF-8) that ends on a
 * character boundary and is at most max bytes. */
size_t utf8_cut(const char *s, size_t len, size_t max);
