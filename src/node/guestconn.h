/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The host end of one guest channel (docs/guest-protocol.md): a connected
 * stream socket to QEMU's chardev, one reader thread that demultiplexes
 * frames by stream id, and a mutex-protected writer. Thread-safe.
 *
 * Requests (EXEC, LIST, IDENTITY...) use guestconn_call() on a fresh stream;
 * long-lived streams (process output, file data) register a handler that the
 * reader thread calls for every frame on that stream. Handlers must not block
 * for long: they may wait on a bounded queue, never on the guest.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct guestconn;

/* Frame handler: type is a PROTO_* value. Called on the reader thread. When
 * the channel dies, every open stream's handler is called once more with
 * type 0 (and payload NULL) so waiters can fail instead of hanging. */
typedef void (*guestconn_handler_fn)(void *userdata, uint8_t type, const uint8_t *payload, size_t len);

/* Takes ownership of fd. Sends HELLO with a fresh nonce and waits up to
 * timeout_ms for the agent's HELLO reply (skipping stale bytes), then starts
 * the reader thread. ctx is a log context ("sandbox=sbx-1"). */
int guestconn_open(int fd, const char *ctx, int timeout_ms, struct guestconn **ret);

/* Stops the reader, fails open streams (handlers get type 0), closes the fd.
 * NULL-safe. */
void guestconn_free(struct guestconn *g);

/* Shuts the channel down at once, both ways: every send blocked on the
 * guest fails (-EPIPE) and the reader ends, failing every stream. For a
 * sandbox being deleted, so that a guest that stopped reading cannot hold
 * the delete up for the send stall timeout. The fd stays open until
 * guestconn_free(). NULL-safe. */
void guestconn_shutdown(struct guestconn *g);

/* false once the channel has failed (EOF, I/O error, protocol error). */
bool guestconn_alive(struct guestconn *g);

/* What the agent's HELLO reply said it does beyond the first protocol
 * ("features"): an older agent ignores request fields it does not know
 * (it would run a process of another user as root), so the node asks for
 * these only where the agent has them. A lie hurts only the guest itself. */
#define GUESTCONN_FEATURE_USER (1u << 0)      /* EXEC "user" */
#define GUESTCONN_FEATURE_PROCESSES (1u << 1) /* PROCESSES, ADOPT, EXEC "tag" */
#define GUESTCONN_FEATURE_WATCH (1u << 2)     /* WATCH, WATCH_EVENT, WATCH_END */
#define GUESTCONN_FEATURE_METRICS (1u << 3)   /* METRICS */
#define GUESTCONN_FEATURE_FILES_USER (1u << 4) /* "user" on file requests and WATCH */
#define GUESTCONN_FEATURE_UPGRADE (1u << 5)    /* UPGRADE: replaced in place */
#define GUESTCONN_FEATURE_VOLUMES (1u << 6)    /* VOLUME_MOUNT */
#define GUESTCONN_FEATURE_FILES_ROOT (1u << 7) /* "root" on file requests, SETATTR, atime and ctime */
bool guestconn_has(struct guestconn *g, unsigned feature);

/* The agent's name as its HELLO (or the last UPGRADE) said,
 * "airlock-guest 0.2.0"; "" when it did not. */
#define GUESTCONN_AGENT_MAX 64
void guestconn_agent(struct guestconn *g, char buf[static GUESTCONN_AGENT_MAX]);
/* An UPGRADE's RESULT came: the new agent's name and features are these. */
void guestconn_agent_replaced(struct guestconn *g, json_t *result);
/* Requests waiting for their answer (guestconn_call*()) right now. */
size_t guestconn_calls_in_flight(struct guestconn *g);

/* Sends a JSON request of the given type on a new stream and waits up to
 * timeout_ms for RESULT or ERROR on it. On RESULT: 0 and *ret_result (owned
 * by caller; may be NULL if not wanted). On ERROR: the guest's -errno and,
 * if ret_message, its message. -ETIMEDOUT, -ECONNRESET when the channel
 * died. `req` is not consumed. */
int guestconn_call(struct guestconn *g, uint8_t type, json_t *req, int timeout_ms, json_t **ret_result,
                   char **ret_message);

/* Like guestconn_call() on a stream already opened with
 * guestconn_stream_open(): the first RESULT or ERROR on that stream answers
 * the call, every other frame still goes to the stream's handler (in wire
 * order, so for EXEC the handler sees no STDOUT before the call has its
 * RESULT). For requests that start a long-lived stream: EXEC, FILE_READ,
 * FILE_WRITE. -ENOENT for an unknown stream, -EBUSY if a call already waits
 * on it, -ECANCELED if the stream is closed meanwhile. */
int guestconn_call_stream(struct guestconn *g, uint32_t stream, uint8_t type, json_t *req, int timeout_ms,
                          json_t **ret_result, char **ret_message);

/* Allocates a new stream id and registers handler for it. */
int guestconn_stream_open(struct guestconn *g, guestconn_handler_fn handler, void *userdata, uint32_t *ret_stream);
/* Unregisters; after it returns the handler is never called again for it. */
void guestconn_stream_close(struct guestconn *g, uint32_t stream);

/* Sends one frame (raw payload / JSON object) on a stream. Thread-safe;
 * blocks while the guest is not reading (virtio-serial backpressure), but a
 * guest that takes nothing for 60 s gets its channel closed (-ETIMEDOUT). */
int guestconn_send(struct guestconn *g, uint8_t type, uint32_t stream, const void *payload, size_t len);
int guestconn_send_json(struct guestconn *g, uint8_t type, uint32_t stream, json_t *obj);

/* Round-trip latency probe: PING -> RESULT. */
/* When the channel last carried use (a request that does work, output,
 * an exit; not pings, syncs, replies): CLOCK_MONOTONIC ns, 0 if never. */
uint64_t guestconn_used_ns(struct guestconn *g);
/* Sets it back to used_ns (what guestconn_used_ns() said before): for the
 * node's own housekeeping that went through frames of use (an agent's
 * staging is a FILE_WRITE). */
void guestconn_used_restore(struct guestconn *g, uint64_t used_ns);

int guestconn_ping(struct guestconn *g, int timeout_ms);
