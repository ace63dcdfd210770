/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The Airlock wire framing, used on two links:
 *   - host <-> guest agent, over the virtio-serial port (docs/guest-protocol.md)
 *   - airlockd <-> airlock-node, over a local Unix socket (docs/node-protocol.md)
 *   - airlock-node -> airlock-nodemgr, over DATA_DIR/run/nodemgr.sock (lib/mgr)
 *
 * A frame is a 16-byte little-endian header followed by `length` payload
 * bytes:
 *
 *   offset 0  u32 magic    PROTO_MAGIC ("ALK1" on the wire)
 *          4  u8  version  PROTO_VERSION
 *          5  u8  type     enum proto_type
 *          6  u16 flags    reserved, 0
 *          8  u32 stream   request / process / transfer id (0 = connection)
 *         12  u32 length   payload size, <= PROTO_MAX_PAYLOAD
 *
 * Control payloads are one JSON object; data payloads (PROTO_DATA_*) are raw
 * bytes. The decoder never trusts the peer: unknown versions and oversized
 * lengths are errors, and garbage before a magic is skipped (counted) so a
 * reconnecting host can resynchronise on a stream that was cut mid-frame.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_MAGIC 0x314b4c41u /* "ALK1" little-endian */
#define PROTO_VERSION 1
#define PROTO_HEADER_SIZE 16
#define PROTO_MAX_PAYLOAD (1u << 20) /* 1 MiB: bounds every peer allocation */
#define PROTO_DATA_CHUNK (64u << 10) /* what writers use for streamed data */

enum proto_type {
        /* connection */
        PROTO_HELLO = 1,    /* host->guest {"nonce":s,"version":n}; guest->host same nonce back */
        PROTO_PING = 2,     /* either way, {} -> PROTO_RESULT {} */
        PROTO_RESULT = 3,   /* reply to a request on the same stream, JSON */
        PROTO_ERROR = 4,    /* reply: {"errno":n,"message":s} (errno positive) */
        PROTO_IDENTITY = 5, /* host->guest: new sandbox identity, see docs */

        /* processes (stream = process id chosen by the host, != 0) */
        PROTO_EXEC = 16,        /* host->guest: start; reply RESULT {"pid":n} or ERROR */
        PROTO_STDIN = 17,       /* host->guest data */
        PROTO_STDIN_CLOSE = 18, /* host->guest {} */
        PROTO_SIGNAL = 19,      /* host->guest {"signal":n} */
        PROTO_RESIZE = 20,      /* host->guest {"rows":n,"cols":n} */
        PROTO_STDOUT = 21,      /* guest->host data (the PTY when pty=true) */
        PROTO_STDERR = 22,      /* guest->host data */
        PROTO_EXIT = 23,        /* guest->host {"exit_code":n,"signal":n} last frame of a process */
        PROTO_PROCESSES = 24,   /* host->guest {} -> RESULT {"processes":[...]} (every live EXEC process) */
        PROTO_ADOPT = 25,       /* host->guest {"pid":n} on a new stream: re-attach a detached process */

        /* files (stream = transfer id chosen by the host) */
        PROTO_FILE_READ = 32,   /* host->guest {"path":s}; guest: RESULT {"size","mode"}, DATA*, END */
        PROTO_FILE_WRITE = 33,  /* host->guest {"path":s,"mode":n}; host: DATA*, END; guest: RESULT */
        PROTO_FILE_DATA = 34,   /* data, either way */
        PROTO_FILE_END = 35,    /* {} end of a data sequence (or {"abort":true}) */
        PROTO_LIST = 36,        /* {"path":s} -> RESULT {"entries":[...]} */
        PROTO_STAT = 37,        /* {"path":s} -> RESULT {entry} */
        PROTO_RENAME = 38,      /* {"from":s,"to":s} -> RESULT {} */
        PROTO_REMOVE = 39,      /* {"path":s,"recursive":b} -> RESULT {} */
        PROTO_MKDIR = 40,       /* {"path":s,"parents":b} -> RESULT {} */
        PROTO_SYNC = 41,        /* {} -> RESULT {} once sync(2) flushed every file system */
        PROTO_FREEZE = 42,      /* {} -> RESULT {} once the root file system is frozen (FIFREEZE) */
        PROTO_THAW = 43,        /* {} -> RESULT {} once it is thawed again (FITHAW) */
        PROTO_WATCH = 44,       /* host->guest {"path":s,"recursive":b} -> RESULT {}, then WATCH_EVENT* */
        PROTO_WATCH_EVENT = 45, /* guest->host {"name":s,"type":s} a change in a watched directory */
        PROTO_WATCH_END = 46,   /* host->guest {} ends the watch of that stream */
        PROTO_METRICS = 47,     /* {} -> RESULT {cpu, memory and disk use} */
        PROTO_UPGRADE =
                48, /* host->guest {"path":s} staged agent -> RESULT {"agent",...} from the new one */
        PROTO_VOLUME_MOUNT = 49, /* {"slot":n,"path":s,"read_only":b,"wait_ms":n} -> RESULT {"device":s} */
        PROTO_SETATTR = 50,      /* {"path":s,"uid":n,"gid":n,"mode":n} (each optional) -> RESULT {} */

        /* airlockd <-> airlock-node */
        PROTO_NODE_REQUEST = 64, /* {"op":s, ...} */
        PROTO_NODE_REPLY = 65,   /* {"ok":true,...} or {"error":{"code":s,"message":s}} */
        PROTO_NODE_EVENT = 66,   /* streamed event, JSON */
        PROTO_NODE_DATA = 67,    /* streamed raw bytes (file transfers) */
        PROTO_NODE_END = 68,     /* end of a stream {} */

        /* airlock-node -> airlock-nodemgr (lib/mgr): one request per connection */
        PROTO_MGR_REQUEST = 80, /* {"op":s, ...} (+ fds) */
        PROTO_MGR_REPLY = 81,   /* {"ok":true,...} or {"error":{"errno":n,"message":s}} */

        /* airlock-node -> airlock-gw (src/node/gwclient.h): one request per connection */
        PROTO_GW_REQUEST = 96, /* {"op":s, ...} (+ fds) */
        PROTO_GW_REPLY = 97,   /* {"ok":true,...} or {"error":{"errno":n,"message":s}} */
};

struct proto_header {
        uint8_t version;
        uint8_t type;
        uint16_t flags;
        uint32_t stream;
        uint32_t length;
};

/* Encodes a header into out[PROTO_HEADER_SIZE]. */
void proto_header_encode(const struct proto_header *h, uint8_t out[PROTO_HEADER_SIZE]);
/* Decodes and validates a header: -EBADMSG on bad magic, -EPROTONOSUPPORT on
 * an unknown version, -EMSGSIZE when length > PROTO_MAX_PAYLOAD. */
int proto_header_decode(const uint8_t in[PROTO_HEADER_SIZE], struct proto_header *ret);

/* The header of a frame of len payload bytes, for writers that are not an
 * fd (a TLS connection). -EMSGSIZE if len is too big. */
int proto_frame_header(uint8_t type, uint32_t stream, size_t len, uint8_t out[PROTO_HEADER_SIZE]);
/* Writes one whole frame to a blocking fd. -EMSGSIZE if len is too big. */
int proto_write_frame(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len);

/*
 * Incremental decoder for a byte stream (non-blocking or blocking reads).
 * Feed bytes with proto_reader_feed(); pull frames with proto_reader_next().
 * The reader owns at most PROTO_HEADER_SIZE + PROTO_MAX_PAYLOAD bytes.
 * The unread bytes are buf[start..len): popping a frame only advances
 * start, and the rest moves to the front only when room is needed, so a
 * peer sending many small frames costs linear time, not a memmove of the
 * whole buffer per frame.
 */
struct proto_reader {
        uint8_t *buf;
        size_t start;     /* first unread byte; frames are handed out from here */
        size_t len, cap;  /* end of the buffered bytes, allocated size */
        uint64_t skipped; /* garbage bytes dropped while looking for a magic */
};

int proto_reader_init(struct proto_reader *r);
void proto_reader_release(struct proto_reader *r);
/* Drops buffered bytes (used when the peer reconnects). */
void proto_reader_reset(struct proto_reader *r);
/* Reads once from fd into the buffer. Returns bytes read (>0), 0 on EOF,
 * -EAGAIN when nothing is available, or a negative errno. */
int proto_reader_fill(struct proto_reader *r, int fd);
/* proto_reader_fill() with another source: rd reads like read(2) but
 * returns a negative errno (a TLS connection's). */
int proto_reader_fill_with(struct proto_reader *r, ssize_t (*rd)(void *ctx, void *buf, size_t n), void *ctx);
/* Appends bytes (for tests and fuzzers). -ENOBUFS if the buffer is full. */
int proto_reader_feed(struct proto_reader *r, const void *data, size_t len);
/*
 * Takes the next complete frame. Returns 1 and sets *ret_h and *ret_payload
 * (valid until the next call on r), 0 when more bytes are needed, or a
 * negative errno for an unrecoverable header (unknown version, oversize).
 * Bytes before a magic are skipped and counted in r->skipped. The frame stays
 * in the buffer until proto_reader_pop(): call it when done with the payload.
 */
int proto_reader_next(struct proto_reader *r, struct proto_header *ret_h, const uint8_t **ret_payload);
/* Releases the frame last returned by proto_reader_next()/proto_reader_read(). */
void proto_reader_pop(struct proto_reader *r, const struct proto_header *h);
/* Blocking convenience: fills from fd until one frame is ready. Returns 1 with
 * the frame (pop it after), 0 on EOF, or a negative errno. */
int proto_reader_read(struct proto_reader *r, int fd, struct proto_header *ret_h, const uint8_t **ret_payload);

/* Human name of a frame type, for logs ("exec", "stdout", ...). */
const char *proto_type_name(uint8_t type);

/* Where a volume may be mounted in a guest (VOLUME_MOUNT; airlockd and
 * the node check it first): an absolute path of at most
 * PROTO_VOLUME_PATH_MAX bytes whose components are plain (no "", "." or
 * ".."), not "/" and not on or under the system's own trees (/bin, /boot,
 * /dev, /etc, /lib*, /proc, /run, /sbin, /sys, /usr), which a volume
 * would hide. */
#define PROTO_VOLUME_PATH_MAX 1024
bool proto_volume_path_is_allowed(const char *path);
