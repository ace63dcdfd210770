/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the frame reader the agent and the node run on untrusted bytes.
 * The first input byte picks the feed size (to split frames at every
 * offset), the rest is the byte stream. Checks the reader's invariants:
 * returned frames lie inside the buffer and respect the payload limit, and
 * refused headers never make it allocate beyond one maximal frame.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct proto_reader r;
        if (size == 0 || proto_reader_init(&r) < 0)
                return 0;
        size_t step = (size_t) data[0] % 64 + 1;
        data++, size--;

        for (size_t off = 0; off < size;) {
                size_t n = size - off < step ? size - off : step;
                if (proto_reader_feed(&r, data + off, n) < 0)
                        proto_reader_reset(&r);
                off += n;
                for (;;) {
                        struct proto_header h;
                        const uint8_t *p;
                        int k = proto_reader_next(&r, &h, &p);
                        if (k == 0)
                                break;
                        if (k < 0) {
                                /* what the agent does: skip the bad header */
                                proto_reader_pop(&r, &(struct proto_header){ .length = 0 });
                                continue;
                        }
                        assert(h.length <= PROTO_MAX_PAYLOAD);
                        assert(p == r.buf + r.start + PROTO_HEADER_SIZE);
                        assert(r.start + PROTO_HEADER_SIZE + (size_t) h.length <= r.len);
                        (void) proto_type_name(h.type);
                        proto_reader_pop(&r, &h);
                }
                assert(r.cap <= PROTO_HEADER_SIZE + PROTO_MAX_PAYLOAD && r.start <= r.len && r.len <= r.cap);
        }
        if (size >= PROTO_HEADER_SIZE) {
                struct proto_header h;
                uint8_t raw[PROTO_HEADER_SIZE];
                if (proto_header_decode(data, &h) == 0) {
                        proto_header_encode(&h, raw);
                        assert(proto_header_decode(raw, &h) == 0);
                }
        }
        proto_reader_release(&r);
        return 0;
}
