/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * HTTP/2 inside terminated TLS (docs/network.md, "TLS"): the guest's
 * HTTP/2 connection, served by nghttp2, turned into HTTP/1.1 exchanges on
 * the one upstream connection, one at a time. Fed bytes, never sockets.
 *
 * The front announces SETTINGS_MAX_CONCURRENT_STREAMS 1 and no push: one
 * stream is open at a time (nghttp2 refuses more with REFUSED_STREAM, which
 * clients retry), so each stream maps onto one request of a keep-alive
 * HTTP/1.1 connection upstream, and each is decided on its own like an
 * HTTP/1.1 request (a second stream is a second request: a switch of
 * :authority on a reused connection is caught as a switch of Host is).
 *
 * A stream's request is checked twice: by nghttp2's HTTP messaging rules
 * (pseudo-headers, no connection-specific header, content-length against
 * the DATA), and here: the method is a token and not CONNECT, :scheme is
 * https, :path is origin-form ("*" for OPTIONS) of printable ASCII without
 * a fragment, :authority (or host, and both agree when both come) is
 * host[:port], the limits of HTTP/1.1 heads hold (HTTP1_HEADERS_MAX
 * fields, HTTP1_HEAD_MAX bytes of names and values, HTTP1_TARGET_MAX for
 * :path), no trailers. It is then handed to ops->head as a struct
 * http1_head (Host first, cookie crumbs joined, te and expect dropped,
 * Transfer-Encoding: chunked added for a body of unknown length), which
 * decides it and writes its HTTP/1.1 head upstream; the body follows as
 * DATA arrives, framed by its Content-Length or chunked.
 *
 * The upstream's response is parsed strictly (lib/httpresp) and goes back
 * as HEADERS (names lower-cased, hop-by-hop fields gone) and DATA, header
 * values and body passed through ops->redact first.
 *
 * A refused request gets its status and reason as a text/plain response
 * on its stream, then GOAWAY: no stream after it is served. The end of the
 * upstream connection (Connection: close, a broken response, the server
 * closing, a stream the guest reset mid-exchange) ends the HTTP/2
 * connection as well, gracefully, after the stream under way.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

/* Free upstream space h2front_recv needs: a head with a credential, and
 * a DATA frame's payload (16 KiB, the default SETTINGS_MAX_FRAME_SIZE) as
 * a chunk. */
#define H2FRONT_UP_ROOM ((28u << 10) + (16u << 10) + HTTP1_CHUNK_HEADER_MAX + 2)
#define H2FRONT_BODY_BUF (64u << 10) /* response body buffered for the guest */

struct h2front;

struct h2front_ops {
        /* A checked request: decide it, and write its head upstream with
         * up_write (re-serialised, a credential added); 0. Or refuse it: an
         * HTTP status (403, ...) and *why, which the guest is told. */
        int (*head)(void *userdata, const struct http1_head *h, const char **why);
        /* Bytes for the upstream (h2front_recv keeps to the room); a
         * negative errno if they do not fit after all: the connection ends. */
        int (*up_write)(void *userdata, const void *data, size_t len);
        /* How much more up_write may take now. */
        size_t (*up_room)(void *userdata);
        /* Overwrites every credential value in data[0..len) that may reach
         * into data[scanned..len) (the bytes before scanned were looked at
         * already); returns how many leading bytes may go to the guest now
         * (a held tail may be a value's beginning), all of them if final. */
        size_t (*redact)(void *userdata, uint8_t *data, size_t len, size_t scanned, bool final);
};

/* A front with the server's SETTINGS queued. -ENOMEM. */
int h2front_new(const struct h2front_ops *ops, void *userdata, struct h2front **ret);
void h2front_free(struct h2front *f);

/*
 * Guest bytes (the connection's plaintext). Call while ops->up_room() is
 * at least H2FRONT_UP_ROOM; it stops early, with *ret_consumed < len, when
 * the upstream's room falls below that (feed the rest again once it has
 * drained). A negative errno when the connection is broken for good (a
 * bad preface, a flood): whatever h2front_send still gives (a GOAWAY) is
 * sent, then the connection ends; *ret_why says why.
 */
int h2front_recv(struct h2front *f, const uint8_t *data, size_t len, size_t *ret_consumed,
                 const char **ret_why);

/* Up to size bytes for the guest into out; how many. */
size_t h2front_send(struct h2front *f, uint8_t *out, size_t size);

/* How many bytes of upstream plaintext h2front_upstream takes now: 0 when
 * the body buffer is full or the upstream is of no more use. With no
 * response expected it takes them too: any byte, or the end, means the
 * upstream cannot carry another request (GOAWAY, and the guest reconnects). */
size_t h2front_upstream_room(const struct h2front *f);

/* The upstream's plaintext; len 0: it ended (or broke). */
void h2front_upstream(struct h2front *f, const uint8_t *data, size_t len);

/* The upstream cannot be used (its handshake failed): every request is
 * answered status with why, and the connection ends after the first. */
void h2front_upstream_failed(struct h2front *f, int status, const char *why);

/* Whether the upstream connection is still of use: false once it ended,
 * broke, or must not carry another request. */
bool h2front_upstream_wanted(const struct h2front *f);

/* Looks at the buffered body again (ops->redact may now release what it
 * held). */
void h2front_resume(struct h2front *f);

/* Whether the connection is over: nothing more to read, nothing to send. */
bool h2front_done(const struct h2front *f);
