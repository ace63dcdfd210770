/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Client side of the node protocol (docs/node-protocol.md): one connection
 * per request to an airlock-node (lib/link: its Unix socket on this
 * machine, mutual TLS to a node of the cluster), NODE_REQUEST out, NODE_REPLY back,
 * then optional streams (NODE_DATA / NODE_EVENT ... NODE_END) either way.
 * Every read has a deadline (SO_RCVTIMEO); a read that runs past it fails
 * with -ETIMEDOUT. A node that cannot be reached gives -EHOSTDOWN, a node
 * that hangs up mid-request -ECONNRESET, and a node error reply the errno of
 * its code (apierror.h) with the node's message copied to err.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "macros.h"
#include "proto.h"

struct node_conn {
        struct link link;
        struct proto_reader reader;
        struct proto_header pending; /* NODE_DATA frame still in the reader */
        bool has_pending;
};

/* The TLS configuration for nodes at tls: addresses (the replica's
 * certificate; peers must be nodes of the cluster). Set once at start. */
void node_client_set_tls(struct mtls_ctx *tls);

/* Connects to a node at node_addr (a link address: its socket path on this
 * machine, or tls:NAME@HOST:PORT); timeout_s bounds the connection and every
 * later read and write (change it with node_conn_set_timeout()). */
int node_conn_open(const char *node_addr, unsigned timeout_s, struct node_conn **ret);
/* Closes the connection; NULL is fine. */
void node_conn_free(struct node_conn *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct node_conn *, node_conn_free)

/* Sets the read/write deadline of each later socket operation. */
int node_conn_set_timeout(struct node_conn *c, unsigned timeout_s);

/* Sends one NODE_REQUEST with the JSON object req. */
int node_conn_send_request(struct node_conn *c, const json_t *req);
/* Sends raw bytes as NODE_DATA frames of at most PROTO_DATA_CHUNK each. */
int node_conn_send_data(struct node_conn *c, const void *data, size_t len);
/* Sends NODE_END ({} or {"abort":true}). */
int node_conn_send_end(struct node_conn *c, bool abort);

/*
 * Reads the NODE_REPLY. On {"ok":true,...} stores the reply object in *ret
 * (may be NULL to discard it). On an error reply returns the errno of its
 * code and copies its message to err (API_ERRMSG_MAX bytes, may be NULL).
 * -EBADMSG when the node sends something that is not a reply object.
 */
int node_conn_read_reply(struct node_conn *c, json_t **ret, char *err);

/* One frame of a stream, as node_conn_next() returns it. */
struct node_frame {
        uint8_t type;         /* PROTO_NODE_EVENT, PROTO_NODE_DATA, PROTO_NODE_END */
        json_t *event;        /* parsed object for NODE_EVENT / NODE_END, else NULL */
        const uint8_t *data;  /* payload for NODE_DATA, valid until the next call */
        size_t len;
};

/*
 * Reads the next stream frame into *ret (release ret->event with
 * json_decref). Returns 1 with a frame, 0 on EOF, or a negative errno.
 * A NODE_REPLY inside a stream (a late error) is returned as its errno.
 */
int node_conn_next(struct node_conn *c, struct node_frame *ret, char *err);

/* Waits up to timeout_ms for the next frame: 1 when one is buffered or the
 * socket is readable (EOF included), 0 on timeout, or a negative errno. */
int node_conn_wait(struct node_conn *c, int timeout_ms);

/*
 * One complete request/reply exchange on a fresh connection: the common
 * case for ops without streams. *ret gets the reply object on success.
 */
int node_call(const char *node_addr, unsigned timeout_s, const json_t *req, json_t **ret, char *err);
