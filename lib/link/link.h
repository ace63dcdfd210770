/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One connection of an internal protocol (lib/proto frames): a Unix socket
 * between programs of one machine, or mutual TLS (lib/mtls) between the
 * control plane and the nodes of a cluster. Both ends read and write
 * frames through here and never look at which it is.
 *
 * An address names the transport and, for TLS, the peer it must be:
 *   unix:/run/airlock/node.sock   (or just the absolute path)
 *   tls:NAME@HOST:PORT            the peer's certificate must name NAME
 *   tls:HOST:PORT                 any peer of the role the TLS context expects
 * HOST is an IPv4 address, [IPv6] or a DNS name.
 *
 * Blocking sockets with a deadline per read and write (link_set_timeout):
 * one past it fails with -EAGAIN, as a plain socket's does.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mtls.h"
#include "proto.h"

#define LINK_ADDR_MAX 300

struct link {
        int fd;                /* the socket; poll it only after link_pending() */
        struct mtls_conn *tls; /* NULL on a plain socket */
};

#define LINK_NULL ((struct link){ .fd = -1, .tls = NULL })

/* A parsed address. */
struct link_addr {
        bool tls;
        char path[108];                 /* unix: the socket path */
        char name[MTLS_NAME_MAX + 1];   /* tls: the peer's name, or "" */
        char host[256];                 /* tls: without brackets */
        uint16_t port;
};

/* Parses an address (above). -EINVAL with what was wrong left to the caller. */
int link_addr_parse(const char *s, struct link_addr *ret);

/* Connects to addr within timeout_ms (which stays the deadline of every
 * read and write): a Unix socket, or TCP and the TLS handshake with tls
 * (required for tls: addresses; -ENOTCONN without). -EHOSTDOWN when nothing
 * listens or the host cannot be reached, -EACCES when the peer's
 * certificate is refused, -ETIMEDOUT. */
int link_connect(const char *addr, struct mtls_ctx *tls, int timeout_ms, struct link *ret);
/* Wraps an accepted socket: plain when tls is NULL, else the TLS handshake
 * as server (fd is taken either way). */
int link_accept(int fd, struct mtls_ctx *tls, int timeout_ms, struct link *ret);
/* Closes; a closed or LINK_NULL link is fine. */
void link_close(struct link *l);

int link_set_timeout(struct link *l, int timeout_ms);
/* Writes one whole frame. -EMSGSIZE when len is too big. */
int link_write_frame(struct link *l, uint8_t type, uint32_t stream, const void *payload, size_t len);
/* Reads once into r: bytes read (> 0), 0 at the end, -EAGAIN, or an errno. */
int link_fill(struct link *l, struct proto_reader *r);
/* Reads until a frame is ready (proto_reader_read()). */
int link_read_frame(struct link *l, struct proto_reader *r, struct proto_header *ret_h, const uint8_t **ret_payload);
/* Whether bytes wait inside the TLS layer, where poll(2) cannot see them. */
bool link_pending(const struct link *l);
/* Waits up to timeout_ms for something to read: 1, 0 on timeout, or -errno. */
int link_wait(struct link *l, int timeout_ms);
/* Without blocking: whether the peer has hung up (nothing more is expected
 * of it: data waiting counts as not hung up). */
bool link_hung_up(struct link *l);
/* The peer's name on a TLS link ("" otherwise) and its role. */
const char *link_peer(const struct link *l, enum mtls_role *ret_role);
