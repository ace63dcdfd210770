/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Unix stream sockets by path: the one connect and the one listen, so the
 * path-length check, CLOEXEC and the bind-time mode are written once.
 * Both return 0 or a negative errno; *ret_fd is set only on success.
 */

#include <sys/types.h>

/* Connects to path. timeout_ms > 0 sets SO_RCVTIMEO/SO_SNDTIMEO first (the
 * connect and every later read and write wait at most that long); 0 leaves
 * the socket blocking. -ENAMETOOLONG when path does not fit a sockaddr_un;
 * otherwise connect()'s errno as it is (-ENOENT: no socket there,
 * -ECONNREFUSED: nobody listening), for the caller to translate. */
int unix_connect(const char *path, int timeout_ms, int *ret_fd);

/* Listens on path: a stale socket file there is removed, the socket is
 * bound while the umask makes it 0600 (nobody can connect before its mode
 * is set), then given mode and listen(backlog). sock_flags adds to
 * SOCK_STREAM|SOCK_CLOEXEC (SOCK_NONBLOCK for an event loop). The caller
 * chowns it where others need it. */
int unix_listen(const char *path, mode_t mode, int sock_flags, int backlog, int *ret_fd);
