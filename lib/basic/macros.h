/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Small language helpers used everywhere: scope-bound cleanup in the style of
 * systemd, ownership transfer, and array sizes.
 *
 *   _cleanup_free_ char *p = malloc(n);     freed when p leaves scope
 *   _cleanup_close_ int fd = open(...);     closed when fd leaves scope
 *   return TAKE_PTR(p);                     hands ownership to the caller
 */

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define _warn_unused_ __attribute__((warn_unused_result))

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

/* Moves the pointer out of a cleanup variable: the variable becomes NULL. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _p_ = (p);                                                           \
                (p) = NULL;                                                                        \
                _p_;                                                                               \
        })
#define TAKE_FD(fd)                                                                                \
        ({                                                                                         \
                int _fd_ = (fd);                                                                   \
                (fd) = -1;                                                                         \
                _fd_;                                                                              \
        })

/* Defines foo_freep() for use with _cleanup_(foo_freep). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
        static inline void func##p(type *p) {                                                      \
                if (*p)                                                                            \
                        func(*p);                                                                  \
        }

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Closes fd if it is one; returns -1 to assign back: fd = safe_close(fd). */
static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Returns -errno of the last failed libc call, never 0. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}
