/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node protocol's server (docs/node-protocol.md): the Unix socket the
 * control plane of this machine connects to, and in a cluster a TCP port
 * with mutual TLS (lib/link) for its replicas; one detached thread per
 * connection (bounded), one request per connection.
 * The connection thread reads the NODE_REQUEST frame, hands it to the
 * dispatch function set at start-up and closes the connection when the op
 * returns.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conn.h"

struct node_config;

/* What runs one request: the op named in it, with the connection to reply
 * on (conn.h). Returns 0 or a negative errno; a failed op that sent no
 * reply gets conn_reply_errno(). main.c sets nodeops_dispatch() before the
 * first accept: the one place where the server's thread calls up. */
typedef int (*server_dispatch_fn)(struct node_conn *c, const char *op, json_t *req);
void server_set_dispatch(server_dispatch_fn fn);

/* Binds the socket (stale socket unlinked, mode 0600, parent created 0700;
 * with group other than -1: that group's and mode 0660). Returns the
 * listening fd. */
int server_listen(const char *path, gid_t group, int *ret_fd);

/* Accepts one pending connection on listen_fd and starts its thread; with
 * tls, the thread does the TLS handshake first (the client must be a
 * replica of the cluster). When max_connections threads are running, the
 * client gets an "unavailable" reply instead (plain sockets) or is closed
 * (TLS). Never blocks for long. */
int server_accept(int listen_fd, struct mtls_ctx *tls, const struct node_config *cfg);
/* Binds a TCP listener on addr ("HOST:PORT"): the cluster's port. */
int server_listen_tcp(const char *addr, int *ret_fd);
