/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for lib/proto: header codec, frame writer and the incremental
 * reader (resync, split frames, limits). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto.h"

/* Encodes one frame into a fresh buffer (header + payload). */
static uint8_t *frame_build(uint8_t type, uint32_t stream, const void *payload, size_t len,
                            size_t *ret_len) {
        uint8_t *b = malloc(PROTO_HEADER_SIZE + len);
        assert_non_null(b);
        proto_header_encode(
                &(struct proto_header){
                        .version = PROTO_VERSION, .type = type, .stream = stream, .length = (uint32_t) len },
                b);
        if (len)
                memcpy(b + PROTO_HEADER_SIZE, payload, len);
        *ret_len = PROTO_HEADER_SIZE + len;
        return b;
}

static void test_header_roundtrip(void **state) {
        uint8_t raw[PROTO_HEADER_SIZE];
        struct proto_header h = { .version = PROTO_VERSION,
                                  .type = PROTO_EXEC,
                                  .flags = 0x1234,
                                  .stream = 0xdeadbeef,
                                  .length = 77 },
                            out;
        proto_header_encode(&h, raw);
        assert_memory_equal(raw, "ALK1", 4);
        assert_int_equal(proto_header_decode(raw, &out), 0);
        assert_int_equal(out.version, PROTO_VERSION);
        assert_int_equal(out.type, PROTO_EXEC);
        assert_int_equal(out.flags, 0x1234);
        assert_int_equal(out.stream, 0xdeadbeef);
        assert_int_equal(out.length, 77);
        /* little-endian on the wire */
        assert_int_equal(raw[8], 0xef);
        assert_int_equal(raw[12], 77);
}

static void test_header_rejects(void **state) {
        uint8_t raw[PROTO_HEADER_SIZE];
        struct proto_header out = { .type = 99 };

        proto_header_encode(
                &(struct proto_header){ .version = PROTO_VERSION, .length = PROTO_MAX_PAYLOAD + 1 }, raw);
        assert_int_equal(proto_header_decode(raw, &out), -EMSGSIZE);
        assert_int_equal(out.type, 99); /* untouched on failure */

        proto_header_encode(&(struct proto_header){ .version = 2 }, raw);
        assert_int_equal(proto_header_decode(raw, &out), -EPROTONOSUPPORT);

        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION }, raw);
        raw[0] = 'X';
        assert_int_equal(proto_header_decode(raw, &out), -EBADMSG);

        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION, .length = PROTO_MAX_PAYLOAD },
                            raw);
        assert_int_equal(proto_header_decode(raw, &out), 0);
        assert_int_equal(out.length, PROTO_MAX_PAYLOAD);
}

static void test_reader_roundtrip_fd(void **state) {
        int sv[2];
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        assert_int_equal(proto_write_frame(sv[0], PROTO_PING, 7, "{}", 2), 0);
        assert_int_equal(proto_write_frame(sv[0], PROTO_STDIN_CLOSE, 9, NULL, 0), 0);
        assert_int_equal(proto_reader_init(&r), 0);

        assert_int_equal(proto_reader_read(&r, sv[1], &h, &p), 1);
        assert_int_equal(h.type, PROTO_PING);
        assert_int_equal(h.stream, 7);
        assert_int_equal(h.length, 2);
        assert_memory_equal(p, "{}", 2);
        proto_reader_pop(&r, &h);

        assert_int_equal(proto_reader_read(&r, sv[1], &h, &p), 1);
        assert_int_equal(h.type, PROTO_STDIN_CLOSE);
        assert_int_equal(h.length, 0);
        proto_reader_pop(&r, &h);

        close(sv[0]);
        assert_int_equal(proto_reader_read(&r, sv[1], &h, &p), 0); /* EOF */
        close(sv[1]);
        assert_int_equal(proto_write_frame(-1, PROTO_PING, 0, NULL, PROTO_MAX_PAYLOAD + 1), -EMSGSIZE);
        proto_reader_release(&r);
}

static void test_reader_split_feeds(void **state) {
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        size_t n;
        uint8_t *f = frame_build(PROTO_STDOUT, 3, "hello world", 11, &n);

        assert_int_equal(proto_reader_init(&r), 0);
        /* one byte at a time: nothing until the very last byte */
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(proto_reader_next(&r, &h, &p), 0);
                assert_int_equal(proto_reader_feed(&r, f + i, 1), 0);
        }
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        assert_int_equal(h.type, PROTO_STDOUT);
        assert_memory_equal(p, "hello world", 11);
        proto_reader_pop(&r, &h);
        assert_int_equal(proto_reader_next(&r, &h, &p), 0);
        assert_int_equal(r.skipped, 0);
        free(f);
        proto_reader_release(&r);
}

static void test_reader_resync(void **state) {
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        size_t n;
        uint8_t *f = frame_build(PROTO_PING, 1, "{}", 2, &n);
        static const char garbage[] = "xxALK"; /* a partial magic too */

        assert_int_equal(proto_reader_init(&r), 0);
        assert_int_equal(proto_reader_feed(&r, garbage, 5), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 0);
        assert_int_equal(proto_reader_feed(&r, f, n), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        assert_int_equal(h.type, PROTO_PING);
        assert_int_equal(r.skipped, 5);
        proto_reader_pop(&r, &h);

        /* garbage between two frames */
        assert_int_equal(proto_reader_feed(&r, "\0\1\2\3\4\5\6", 7), 0);
        assert_int_equal(proto_reader_feed(&r, f, n), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        assert_int_equal(r.skipped, 12);
        proto_reader_pop(&r, &h);

        /* a reset drops a half frame */
        assert_int_equal(proto_reader_feed(&r, f, n - 1), 0);
        proto_reader_reset(&r);
        assert_int_equal(proto_reader_feed(&r, f, n), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        proto_reader_pop(&r, &h);
        free(f);
        proto_reader_release(&r);
}

static void test_reader_bad_headers(void **state) {
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        uint8_t raw[PROTO_HEADER_SIZE];

        assert_int_equal(proto_reader_init(&r), 0);
        proto_header_encode(
                &(struct proto_header){ .version = PROTO_VERSION, .length = PROTO_MAX_PAYLOAD + 1 }, raw);
        assert_int_equal(proto_reader_feed(&r, raw, sizeof raw), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), -EMSGSIZE);
        /* the reader grew nothing for it */
        assert_true(r.cap < PROTO_MAX_PAYLOAD);
        proto_reader_reset(&r);

        proto_header_encode(&(struct proto_header){ .version = 9, .length = 1 }, raw);
        assert_int_equal(proto_reader_feed(&r, raw, sizeof raw), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), -EPROTONOSUPPORT);
        proto_reader_release(&r);
}

static void test_reader_max_payload(void **state) {
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p;
        size_t n;
        uint8_t *payload = malloc(PROTO_MAX_PAYLOAD);
        assert_non_null(payload);
        for (size_t i = 0; i < PROTO_MAX_PAYLOAD; i++)
                payload[i] = (uint8_t) (i * 31);
        uint8_t *f = frame_build(PROTO_FILE_DATA, 42, payload, PROTO_MAX_PAYLOAD, &n);

        assert_int_equal(proto_reader_init(&r), 0);
        assert_int_equal(proto_reader_feed(&r, f, 1000), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 0);
        assert_int_equal(proto_reader_feed(&r, f + 1000, n - 1000), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        assert_int_equal(h.length, PROTO_MAX_PAYLOAD);
        assert_memory_equal(p, payload, PROTO_MAX_PAYLOAD);
        /* nothing beyond one maximal frame fits */
        assert_int_equal(proto_reader_feed(&r, "x", 1), -ENOBUFS);
        proto_reader_pop(&r, &h);
        assert_int_equal(r.len, 0);
        free(f);
        free(payload);
        proto_reader_release(&r);
}

/* A peer sending many small frames after one big one (which grew the
 * buffer to 1 MiB) must cost linear time: popping a frame must not move
 * the rest of the buffer (a memmove per frame made a 1 MiB read of 17-byte
 * frames cost 30 GB of copying). Frames after a pop stay where they were,
 * and the bytes are right across refills that compact. */
static void test_reader_pop_moves_nothing(void **state) {
        struct proto_reader r;
        struct proto_header h;
        const uint8_t *p, *prev = NULL;
        size_t n, big_n;
        uint8_t *zeros = calloc(1, 512 << 10);
        assert_non_null(zeros);
        uint8_t *big = frame_build(PROTO_STDOUT, 9, zeros, 512 << 10, &big_n);
        free(zeros);
        uint8_t *f = frame_build(PROTO_STDOUT, 7, "x", 1, &n);
        uint8_t *stream = malloc(1000 * n);
        assert_non_null(stream);
        for (size_t i = 0; i < 1000; i++) {
                memcpy(stream + i * n, f, n);
                stream[i * n + PROTO_HEADER_SIZE] = (uint8_t) i;
        }

        assert_int_equal(proto_reader_init(&r), 0);
        assert_int_equal(proto_reader_feed(&r, big, big_n), 0);
        assert_int_equal(proto_reader_feed(&r, stream, 1000 * n), 0);
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        proto_reader_pop(&r, &h);
        for (size_t i = 0; i < 1000; i++) {
                assert_int_equal(proto_reader_next(&r, &h, &p), 1);
                assert_int_equal(h.length, 1);
                assert_int_equal(p[0], (uint8_t) i);
                if (prev)
                        assert_ptr_equal(p, prev + n); /* nothing moved */
                prev = p;
                proto_reader_pop(&r, &h);
                /* a refill in the middle: the unread part moves once */
                if (i == 500) {
                        assert_int_equal(proto_reader_feed(&r, f, n), 0);
                        prev = NULL;
                }
        }
        assert_int_equal(proto_reader_next(&r, &h, &p), 1);
        assert_int_equal(p[0], 'x');
        proto_reader_pop(&r, &h);
        assert_int_equal(proto_reader_next(&r, &h, &p), 0);
        assert_int_equal(r.len, 0);
        assert_int_equal(r.start, 0);
        free(stream);
        free(f);
        free(big);
        proto_reader_release(&r);
}

static void test_type_names(void **state) {
        assert_string_equal(proto_type_name(PROTO_EXEC), "exec");
        assert_string_equal(proto_type_name(PROTO_FILE_END), "file-end");
        assert_string_equal(proto_type_name(PROTO_FREEZE), "freeze");
        assert_string_equal(proto_type_name(PROTO_THAW), "thaw");
        assert_string_equal(proto_type_name(250), "unknown");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_header_roundtrip),    cmocka_unit_test(test_header_rejects),
                cmocka_unit_test(test_reader_roundtrip_fd), cmocka_unit_test(test_reader_split_feeds),
                cmocka_unit_test(test_reader_resync),       cmocka_unit_test(test_reader_bad_headers),
                cmocka_unit_test(test_reader_max_payload),  cmocka_unit_test(test_type_names),
                cmocka_unit_test(test_reader_pop_moves_nothing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
