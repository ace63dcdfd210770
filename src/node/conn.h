/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One client connection of the node protocol (docs/node-protocol.md) and
 * the replies an op sends on it: a leaf, so every op replies without
 * calling up into the server that dispatched it. The server (server.c)
 * owns the connection's thread and hands it to the op.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "macros.h"
#include "proto.h"

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
