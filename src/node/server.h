/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The node protocol's server (docs/node-protocol.md): the Unix socket the
 * control plane of this machine connects to, and in a cluster a TCP port
 * with mutual TLS (lib/link) for its replicas; one detached thread per
 * connection (bounded), one request per connection.
 * The connection thread reads the NODE_REQUEST frame, hands it to
 * nodeops_dispatch() and closes the connection when the op returns.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "link.h"
#include "macros.h"
#include "proto.h"

struct node_config;

/* One client connection, owned by its thread. */
struct node_conn {
        struct link link;
        struct proto_reader reader;
        bool replied; /* a NODE_REPLY went out */
        bool broken;  /* a write failed: the client is gone */
        uint64_t id;
        char ctx[96]; /* "conn=N op=..." for log lines */
};

/* Sends NODE_REPLY {"ok":true, ...fields of extra}. extra (may be NULL) is
 * consumed. */
int conn_reply_ok(struct node_conn *c, json_t *extra);

/* Sends NODE_REPLY {"ok":false,"error":{"code":code,"message":...}}. Returns
 * the negative errno r so an op can `return conn_reply_error(...)`; r == 0
 * is turned into -EINVAL. */
int conn_reply_error(struct node_conn *c, int r, const char *code, const char *fmt, ...) _printf_(4, 5);

/* Replies with the code node_errno_code(r) and the message "<what>: <strerror>". */
int conn_reply_errno(struct node_conn *c, int r, const char *what);

/* Stream frames after the reply: NODE_EVENT (obj consumed), NODE_DATA, and
 * NODE_END (extra may be NULL; consumed). */
int conn_send_event(struct node_conn *c, json_t *obj);
int conn_send_data(struct node_conn *c, const void *data, size_t len);
int conn_send_end(struct node_conn *c, json_t *extra);

/* Reads the next frame from the client, waiting up to timeout_ms (-1: the
 * socket's default). Returns 1 with the frame (call conn_pop_frame() when
 * done), 0 on EOF, -ETIMEDOUT or another negative errno. */
int conn_read_frame(struct node_conn *c, int timeout_ms, struct proto_header *ret_h, const uint8_t **ret_payload);
/* Releases the frame conn_read_frame() returned. */
void conn_pop_frame(struct node_conn *c, const struct proto_header *h);

/* true when the client closed its end (non-blocking check; used by long
 * streams to stop early). */
bool conn_hung_up(struct node_conn *c);

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
