/* SPDX-License-Identifier: Apache-2.0 */
#include "unixsock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "macros.h"

static int address(const char *path, struct sockaddr_un *ret) {
        *ret = (struct sockaddr_un){ .sun_family = AF_UNIX };
        if (!path || !path[0])
                return -EINVAL;
        size_t n = strlen(path);
        if (n >= sizeof ret->sun_path)
                return -ENAMETOOLONG;
        memcpy(ret->sun_path, path, n + 1);
        return 0;
}

int unix_connect(const char *path, int timeout_ms, int *ret_fd) {
        struct sockaddr_un sa;
        int r = address(path, &sa);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (timeout_ms > 0) {
                struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
                if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
                    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
                        return negative_errno();
        }
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return negative_errno();
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int unix_listen(const char *path, mode_t mode, int sock_flags, int backlog, int *ret_fd) {
        struct sockaddr_un sa;
        int r = address(path, &sa);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | sock_flags, 0);
        if (fd < 0)
                return negative_errno();
        if (unlink(path) < 0 && errno != ENOENT)
                return negative_errno();
        mode_t old = umask(0177);
        r = bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 ? negative_errno() : 0;
        umask(old);
        if (r < 0)
                return r;
        if ((mode != 0600 && chmod(path, mode) < 0) || listen(fd, backlog) < 0) {
                r = negative_errno();
                (void) unlink(path);
                return r;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}
