/* SPDX-License-Identifier: Apache-2.0 */
#include "proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "macros.h"

static void put_u16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t) v;
        p[1] = (uint8_t) (v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) {
        return (uint16_t) (p[0] | (p[1] << 8));
}
static uint32_t get_u32(const uint8_t *p) {
        return (uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) | ((uint32_t) p[3] << 24);
}

void proto_header_encode(const struct proto_header *h, uint8_t out[PROTO_HEADER_SIZE]) {
        put_u32(out, PROTO_MAGIC);
        out[4] = h->version;
        out[5] = h->type;
        put_u16(out + 6, h->flags);
        put_u32(out + 8, h->stream);
        put_u32(out + 12, h->length);
}

int proto_header_decode(const uint8_t in[PROTO_HEADER_SIZE], struct proto_header *ret) {
        if (get_u32(in) != PROTO_MAGIC)
                return -EBADMSG;
        if (in[4] != PROTO_VERSION)
                return -EPROTONOSUPPORT;
        uint32_t len = get_u32(in + 12);
        if (len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;
        *ret = (struct proto_header){
                .version = in[4],
                .type = in[5],
                .flags = get_u16(in + 6),
                .stream = get_u32(in + 8),
                .length = len,
        };
        return 0;
}

int proto_frame_header(uint8_t type, uint32_t stream, size_t len, uint8_t out[PROTO_HEADER_SIZE]) {
        if (len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;
        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION, .type = type,
                                                     .stream = stream, .length = (uint32_t) len },
                            out);
        return 0;
}

int proto_write_frame(int fd, uint8_t type, uint32_t stream, const void *payload, size_t len) {
        uint8_t hdr[PROTO_HEADER_SIZE];
        int r = proto_frame_header(type, stream, len, hdr);
        if (r < 0)
                return r;
        struct iovec iov[2] = { { hdr, sizeof hdr }, { (void *) payload, len } };
        int cnt = len > 0 ? 2 : 1;
        size_t total = sizeof hdr + len, done = 0;
        while (done < total) {
                ssize_t k = writev(fd, iov, cnt);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                done += (size_t) k;
                /* advance the iovecs past what was written */
                size_t adv = (size_t) k;
                for (int i = 0; i < cnt && adv > 0; i++) {
                        size_t take = MIN(adv, iov[i].iov_len);
                        iov[i].iov_base = (uint8_t *) iov[i].iov_base + take;
                        iov[i].iov_len -= take;
                        adv -= take;
                }
        }
        return 0;
}

#define READER_CAP (PROTO_HEADER_SIZE + PROTO_MAX_PAYLOAD)

int proto_reader_init(struct proto_reader *r) {
        *r = (struct proto_reader){ 0 };
        r->cap = 64 << 10; /* grows to READER_CAP only for big frames */
        r->buf = malloc(r->cap);
        return r->buf ? 0 : -ENOMEM;
}

void proto_reader_release(struct proto_reader *r) {
        if (!r)
                return;
        free(r->buf);
        *r = (struct proto_reader){ 0 };
}

void proto_reader_reset(struct proto_reader *r) {
        r->start = r->len = 0;
}

/* Moves the unread bytes to the front of the buffer. */
static void reader_compact(struct proto_reader *r) {
        if (r->start == 0)
                return;
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
}

/* Makes room for `need` unread bytes in all (compacting first, growing up to
 * one maximal frame). */
static int reader_reserve(struct proto_reader *r, size_t need) {
        if (r->start + need <= r->cap)
                return 0;
        reader_compact(r);
        if (need <= r->cap)
                return 0;
        if (need > READER_CAP)
                return -ENOBUFS;
        size_t ncap = MAX(need, MIN(r->cap * 2, (size_t) READER_CAP));
        uint8_t *nb = realloc(r->buf, ncap);
        if (!nb)
                return -ENOMEM;
        r->buf = nb;
        r->cap = ncap;
        return 0;
}

int proto_reader_fill_with(struct proto_reader *r, ssize_t (*rd)(void *ctx, void *buf, size_t n), void *ctx) {
        if (r->len == r->cap) {
                int k = reader_reserve(r, r->len - r->start + 1);
                if (k < 0)
                        return k;
        }
        for (;;) {
                ssize_t k = rd(ctx, r->buf + r->len, r->cap - r->len);
                if (k == -EINTR)
                        continue;
                if (k < 0)
                        return k == -EWOULDBLOCK ? -EAGAIN : (int) k;
                r->len += (size_t) k;
                return (int) k;
        }
}

static ssize_t fd_read(void *ctx, void *buf, size_t n) {
        ssize_t k = read(*(int *) ctx, buf, n);
        return k < 0 ? negative_errno() : k;
}

int proto_reader_fill(struct proto_reader *r, int fd) {
        return proto_reader_fill_with(r, fd_read, &fd);
}

int proto_reader_feed(struct proto_reader *r, const void *data, size_t len) {
        int k = reader_reserve(r, r->len - r->start + len);
        if (k < 0)
                return k;
        memcpy(r->buf + r->len, data, len);
        r->len += len;
        return 0;
}

/* Drops the first n unread bytes: O(1), nothing moves. */
static void reader_consume(struct proto_reader *r, size_t n) {
        r->start += n;
        if (r->start == r->len)
                r->start = r->len = 0;
}

int proto_reader_next(struct proto_reader *r, struct proto_header *ret_h, const uint8_t **ret_payload) {
        static const uint8_t magic[4] = { 'A', 'L', 'K', '1' };

        for (;;) {
                const uint8_t *b = r->buf + r->start;
                size_t avail = r->len - r->start;
                if (avail < 4)
                        return 0;
                if (memcmp(b, magic, 4) != 0) {
                        /* resync: skip to the next possible magic start */
                        const uint8_t *p = memmem(b + 1, avail - 1, magic, 4);
                        size_t drop = p ? (size_t) (p - b) : avail - 3;
                        r->skipped += drop;
                        reader_consume(r, drop);
                        continue;
                }
                if (avail < PROTO_HEADER_SIZE)
                        return 0;
                struct proto_header h;
                int k = proto_header_decode(b, &h);
                if (k < 0)
                        return k;
                size_t total = PROTO_HEADER_SIZE + h.length;
                if (avail < total) {
                        k = reader_reserve(r, total);
                        return k < 0 ? k : 0;
                }
                *ret_h = h;
                *ret_payload = b + PROTO_HEADER_SIZE;
                return 1;
        }
}

void proto_reader_pop(struct proto_reader *r, const struct proto_header *h) {
        reader_consume(r, PROTO_HEADER_SIZE + h->length);
}

static const char *const volume_system_paths[] = { "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64",
                                                   "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr" };

bool proto_volume_path_is_allowed(const char *path) {
        if (!path || path[0] != '/' || strlen(path) > PROTO_VOLUME_PATH_MAX || !path[1])
                return false;
        for (const char *c = path; *c == '/';) {
                size_t n = strcspn(c + 1, "/");
                if (n == 0 || (n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.'))
                        return false;
                for (size_t i = 1; i <= n; i++)
                        if ((unsigned char) c[i] < 0x20 || c[i] == 0x7f)
                                return false;
                c += 1 + n;
        }
        for (size_t i = 0; i < sizeof volume_system_paths / sizeof volume_system_paths[0]; i++) {
                size_t n = strlen(volume_system_paths[i]);
                if (strncmp(path, volume_system_paths[i], n) == 0 && (path[n] == 0 || path[n] == '/'))
                        return false;
        }
        return true;
}

const char *proto_type_name(uint8_t type) {
        switch (type) {
        case PROTO_HELLO: return "hello";
        case PROTO_PING: return "ping";
        case PROTO_RESULT: return "result";
        case PROTO_ERROR: return "error";
        case PROTO_IDENTITY: return "identity";
        case PROTO_EXEC: return "exec";
        case PROTO_STDIN: return "stdin";
        case PROTO_STDIN_CLOSE: return "stdin-close";
        case PROTO_SIGNAL: return "signal";
        case PROTO_RESIZE: return "resize";
        case PROTO_STDOUT: return "stdout";
        case PROTO_STDERR: return "stderr";
        case PROTO_EXIT: return "exit";
        case PROTO_PROCESSES: return "processes";
        case PROTO_ADOPT: return "adopt";
        case PROTO_FILE_READ: return "file-read";
        case PROTO_FILE_WRITE: return "file-write";
        case PROTO_FILE_DATA: return "file-data";
        case PROTO_FILE_END: return "file-end";
        case PROTO_LIST: return "list";
        case PROTO_STAT: return "stat";
        case PROTO_RENAME: return "rename";
        case PROTO_REMOVE: return "remove";
        case PROTO_MKDIR: return "mkdir";
        case PROTO_SYNC: return "sync";
        case PROTO_FREEZE: return "freeze";
        case PROTO_THAW: return "thaw";
        case PROTO_WATCH: return "watch";
        case PROTO_WATCH_EVENT: return "watch-event";
        case PROTO_WATCH_END: return "watch-end";
        case PROTO_METRICS: return "metrics";
        case PROTO_UPGRADE: return "upgrade";
        case PROTO_VOLUME_MOUNT: return "volume_mount";
        case PROTO_SETATTR: return "setattr";
        case PROTO_NODE_REQUEST: return "node-request";
        case PROTO_NODE_REPLY: return "node-reply";
        case PROTO_NODE_EVENT: return "node-event";
        case PROTO_NODE_DATA: return "node-data";
        case PROTO_NODE_END: return "node-end";
        case PROTO_MGR_REQUEST: return "mgr-request";
        case PROTO_MGR_REPLY: return "mgr-reply";
        default: return "unknown";
        }
}

int proto_reader_read(struct proto_reader *r, int fd, struct proto_header *ret_h, const uint8_t **ret_payload) {
        for (;;) {
                int k = proto_reader_next(r, ret_h, ret_payload);
                if (k != 0)
                        return k;
                k = proto_reader_fill(r, fd);
                if (k == 0)
                        return 0;
                if (k < 0)
                        return k;
        }
}
