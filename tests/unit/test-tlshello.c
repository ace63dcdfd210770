/* SPDX-License-Identifier: Apache-2.0 */
/* src/gw/tlshello: ClientHello sniffing. Real ClientHellos made by an
 * OpenSSL client (with and without SNI, with ALPN, in 1-byte prefixes and
 * split over many records) and crafted ones (ECH, ESNI, early_data, PSK,
 * malformed server_name lists, two names, a NUL in the name). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "tlshello.h"

#define HELLO_MAX (20 * 1024)

struct hello {
        uint8_t b[HELLO_MAX + 64];
        size_t n;
};

/* The first flight of an OpenSSL client: its ClientHello record(s). */
static void client_hello(const char *sni, const unsigned char *alpn, unsigned alpn_len, struct hello *h) {
        SSL_CTX *c = SSL_CTX_new(TLS_client_method());
        assert_non_null(c);
        SSL *s = SSL_new(c);
        assert_non_null(s);
        BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
        SSL_set_bio(s, rb, wb);
        SSL_set_connect_state(s);
        if (sni)
                assert_int_equal(SSL_set_tlsext_host_name(s, sni), 1);
        if (alpn)
                assert_int_equal(SSL_set_alpn_protos(s, alpn, alpn_len), 0);
        assert_int_equal(SSL_do_handshake(s), -1);
        assert_int_equal(SSL_get_error(s, -1), SSL_ERROR_WANT_READ);
        int n = BIO_read(wb, h->b, sizeof h->b);
        assert_true(n > 0);
        h->n = (size_t) n;
        SSL_free(s);
        SSL_CTX_free(c);
}

static uint16_t rd16(const uint8_t *p) {
        return (uint16_t) (p[0] << 8 | p[1]);
}

static void wr16(uint8_t *p, size_t v) {
        p[0] = (uint8_t) (v >> 8);
        p[1] = (uint8_t) v;
}

static void wr24(uint8_t *p, size_t v) {
        p[0] = (uint8_t) (v >> 16);
        wr16(p + 1, v);
}

/* Where the extensions block of a one-record ClientHello starts (its
 * 2-byte length). */
static size_t extensions_at(const struct hello *h) {
        assert_int_equal(h->b[0], 22);
        assert_int_equal(h->b[5], 1); /* client_hello */
        assert_int_equal(rd16(h->b + 3), h->n - 5);
        size_t p = 5 + 4 + 2 + 32;
        p += 1 + h->b[p];         /* session id */
        p += 2 + rd16(h->b + p);  /* cipher suites */
        p += 1 + h->b[p];         /* compression methods */
        assert_int_equal(p + 2 + rd16(h->b + p), h->n);
        return p;
}

/* Appends an extension to a one-record ClientHello, fixing the lengths. */
static void add_ext(struct hello *h, uint16_t type, const void *data, size_t len) {
        size_t at = extensions_at(h);
        assert_true(h->n + 4 + len <= sizeof h->b);
        wr16(h->b + h->n, type);
        wr16(h->b + h->n + 2, len);
        memcpy(h->b + h->n + 4, data, len);
        h->n += 4 + len;
        wr16(h->b + at, h->n - at - 2);
        wr24(h->b + 6, h->n - 9);
        wr16(h->b + 3, h->n - 5);
}

/* The same handshake message re-framed in records of at most step bytes. */
static void reframe(const struct hello *in, size_t step, struct hello *out) {
        const uint8_t *msg = in->b + 5;
        size_t len = in->n - 5;
        out->n = 0;
        for (size_t off = 0; off < len; off += step) {
                size_t k = len - off < step ? len - off : step;
                assert_true(out->n + 5 + k <= sizeof out->b);
                memcpy(out->b + out->n, in->b, 3);
                wr16(out->b + out->n + 3, k);
                memcpy(out->b + out->n + 5, msg + off, k);
                out->n += 5 + k;
        }
}

static int sniff(const struct hello *h, struct tlshello *r) {
        return tlshello_sniff(h->b, h->n, r);
}

static int setup(void **state) {
        (void) state;
        return tlshello_init();
}

static int teardown(void **state) {
        (void) state;
        tlshello_free();
        return 0;
}

static void test_real_hellos(void **state) {
        (void) state;
        struct hello h;
        struct tlshello r;
        client_hello("Api.Example.TEST", NULL, 0, &h);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.has_sni);
        assert_string_equal(r.sni, "api.example.test");
        assert_false(r.ech || r.esni || r.early_data || r.psk || r.has_alpn);
        assert_int_equal(r.legacy_version, 0x0303);
        assert_int_equal(r.record_version, rd16(h.b + 1));
        assert_null(r.reason);

        client_hello(NULL, NULL, 0, &h);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_false(r.has_sni);
        assert_string_equal(r.sni, "");

        static const unsigned char alpn[] = "\002h2\010http/1.1";
        client_hello("a.test", alpn, sizeof alpn - 1, &h);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.has_alpn);
        assert_int_equal(r.alpn, TLSHELLO_ALPN_H2 | TLSHELLO_ALPN_HTTP11);
        static const unsigned char alpn2[] = "\002h2";
        client_hello("a.test", alpn2, sizeof alpn2 - 1, &h);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_int_equal(r.alpn, TLSHELLO_ALPN_H2);
        static const unsigned char alpn3[] = "\003smb\010http/1.1";
        client_hello("a.test", alpn3, sizeof alpn3 - 1, &h);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_int_equal(r.alpn, TLSHELLO_ALPN_OTHER | TLSHELLO_ALPN_HTTP11);
}

static void test_split(void **state) {
        (void) state;
        struct hello h, split;
        struct tlshello r;
        client_hello("a.test", NULL, 0, &h);
        /* every prefix (the bytes as they arrive one at a time) needs more,
         * the whole is read; *ret is untouched until then */
        for (size_t k = 0; k < h.n; k++) {
                memset(&r, 0x5a, sizeof r);
                struct tlshello before = r;
                assert_int_equal(tlshello_sniff(h.b, k, &r), TLSHELLO_NEED_MORE);
                assert_memory_equal(&r, &before, sizeof r);
        }
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_string_equal(r.sni, "a.test");
        /* the hello split over records (of 1, 7 and 100 bytes): OpenSSL
         * reassembles it, and finds the same name */
        static const size_t steps[] = { 1, 7, 100 };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
                reframe(&h, steps[i], &split);
                assert_true(split.n > h.n);
                if (split.n <= TLSHELLO_BUF_MAX) {
                        for (size_t k = 0; k < split.n; k += 13)
                                assert_int_equal(tlshello_sniff(split.b, k, &r), TLSHELLO_NEED_MORE);
                        assert_int_equal(sniff(&split, &r), TLSHELLO_OK);
                        assert_true(r.has_sni);
                        assert_string_equal(r.sni, "a.test");
                } else /* 1-byte records: more than 16 KiB on the wire */
                        assert_int_equal(sniff(&split, &r), TLSHELLO_BAD);
        }
        /* bytes after the hello are not looked at */
        memcpy(h.b + h.n, "\x17\x03\x03\x00\x05hello", 10);
        h.n += 10;
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
}

static void test_not_tls(void **state) {
        (void) state;
        struct tlshello r;
        static const char *const others[] = {
                "GET / HTTP/1.1\r\n", "SSH-2.0-OpenSSH_9.2\r\n", "\x80\x2e\x01\x03\x01", "\x16\x02\x00", "PRI * HTTP/2.0",
                "\x15\x03\x03\x00\x02\x02\x28",
        };
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
                assert_int_equal(tlshello_sniff((const uint8_t *) others[i], strlen(others[i]), &r),
                                 TLSHELLO_NOT_TLS);
        assert_int_equal(tlshello_sniff((const uint8_t *) "", 0, &r), TLSHELLO_NEED_MORE);
        assert_int_equal(tlshello_sniff((const uint8_t *) "\x16", 1, &r), TLSHELLO_NEED_MORE);
        assert_int_equal(tlshello_sniff((const uint8_t *) "\x16\x03", 2, &r), TLSHELLO_NEED_MORE);
        /* a handshake record that holds no ClientHello */
        assert_int_equal(tlshello_sniff((const uint8_t *) "\x16\x03\x01\x00\x05hello", 10, &r), TLSHELLO_BAD);
        assert_non_null(r.reason);

        /* a hello that claims more than 16 KiB: more is needed until 16 KiB
         * are there, then it is refused */
        static uint8_t big[TLSHELLO_BUF_MAX + 100];
        memset(big, 0, sizeof big);
        memcpy(big, "\x16\x03\x01\x40\x00\x01\x00\x4e\x20\x03\x03", 11);
        assert_int_equal(tlshello_sniff(big, 10000, &r), TLSHELLO_NEED_MORE);
        assert_int_equal(tlshello_sniff(big, sizeof big, &r), TLSHELLO_BAD);
        assert_string_equal(r.reason, "no complete ClientHello in the first 16 KiB");
}

static void test_crafted_extensions(void **state) {
        (void) state;
        struct hello base, h;
        struct tlshello r;
        client_hello("a.test", NULL, 0, &base);

        h = base;
        add_ext(&h, 0xfe0d, "\0\0\001\0\001\001\0\0\0", 9);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.ech);
        assert_false(r.esni);
        assert_string_equal(r.sni, "a.test"); /* the outer name */

        h = base;
        add_ext(&h, 0xffce, "\x13\x01\0\x1d\0\0", 6);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.esni);
        assert_false(r.ech);

        h = base;
        add_ext(&h, 42, "", 0);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.early_data);
        assert_false(r.psk);

        /* a PSK (last, as it must be): identity, age, one binder */
        uint8_t psk[2 + 2 + 8 + 4 + 2 + 1 + 32] = { 0, 14, 0, 8, 't', 'i', 'c', 'k', 'e', 't', '!', '!', 0, 0, 0, 1,
                                                     0, 33, 32 };
        h = base;
        add_ext(&h, 42, "", 0);
        add_ext(&h, 41, psk, sizeof psk);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
        assert_true(r.early_data);
        assert_true(r.psk);

        /* one extension twice, also one OpenSSL only knows because we told
         * it: refused by OpenSSL */
        h = base;
        add_ext(&h, 0xfe0d, "\0", 1);
        add_ext(&h, 0xfe0d, "\0", 1);
        assert_int_equal(sniff(&h, &r), TLSHELLO_BAD);
        h = base;
        add_ext(&h, 42, "", 0);
        add_ext(&h, 42, "", 0);
        assert_int_equal(sniff(&h, &r), TLSHELLO_BAD);
        /* a PSK that is not the last extension */
        h = base;
        add_ext(&h, 41, psk, sizeof psk);
        add_ext(&h, 42, "", 0);
        assert_int_equal(sniff(&h, &r), TLSHELLO_BAD);

        /* ALPN lists that are malformed */
        static const struct {
                const char *d;
                size_t n;
        } bad_alpn[] = { { "\0", 1 }, { "\0\0", 2 }, { "\0\004\002h2", 5 }, { "\0\003\0h2", 5 }, { "\0\002\003h", 4 } };
        client_hello(NULL, NULL, 0, &base);
        for (size_t i = 0; i < sizeof bad_alpn / sizeof bad_alpn[0]; i++) {
                h = base;
                add_ext(&h, 16, bad_alpn[i].d, bad_alpn[i].n);
                assert_int_equal(sniff(&h, &r), TLSHELLO_BAD);
                assert_string_equal(r.reason, "malformed ALPN extension");
        }
}

/* A hello without SNI given this server_name extension body. */
static int with_sni_ext(const void *d, size_t n, struct tlshello *r) {
        struct hello h;
        client_hello(NULL, NULL, 0, &h);
        add_ext(&h, 0, d, n);
        return sniff(&h, r);
}

static void test_sni_checks(void **state) {
        (void) state;
        struct tlshello r;
        /* the control: one host_name, crafted the same way */
        assert_int_equal(with_sni_ext("\0\011\0\0\006A.TEST", 11, &r), TLSHELLO_OK);
        assert_string_equal(r.sni, "a.test");

        static const struct {
                const char *d;
                size_t n;
                const char *why;
        } bad[] = {
                { "\0\011\0\0\006a.test" "\0\0\006e.test", 20, "malformed server_name extension" }, /* list len */
                { "\0\022\0\0\006a.test\0\0\006e.test", 20, "more than one server name" },
                { "\0\022\0\0\006a.test\001\0\006e.test", 20, "more than one server name" },
                { "\0\011\001\0\006a.test", 11, "server name of a type other than host_name" },
                { "\0\011\0\0\006a\0test", 11, "NUL in the server name" },
                { "\0\012\0\0\007a.test.", 12, "server name is not a host name" },
                { "\0\012\0\0\0071.2.3.4", 12, "server name is not a host name" },
                { "\0\011\0\0\006a_test", 11, "server name is not a host name" },
                { "\0\011\0\0\006a..est", 11, "server name is not a host name" },
                { "\0\003\0\0\0", 5, "server name is not a host name" },
                { "\0\011\0\0\007a.test", 11, "malformed server_name extension" },
                { "\0\0", 2, "empty server_name list" },
                { "", 0, "malformed server_name extension" },
                { "\0\001\0", 3, "empty server_name list" },
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                memset(&r, 0, sizeof r);
                int v = with_sni_ext(bad[i].d, bad[i].n, &r);
                if (v != TLSHELLO_BAD)
                        fail_msg("case %zu: %d", i, v);
                if (!r.reason || strcmp(r.reason, bad[i].why) != 0)
                        fail_msg("case %zu: %s, wanted %s", i, r.reason, bad[i].why);
        }
        /* a name over 253 bytes */
        uint8_t longsni[5 + 300];
        memset(longsni + 5, 'a', 300);
        for (size_t i = 5 + 60; i < sizeof longsni; i += 61)
                longsni[i] = '.';
        wr16(longsni, 303);
        longsni[2] = 0;
        wr16(longsni + 3, 300);
        assert_int_equal(with_sni_ext(longsni, sizeof longsni, &r), TLSHELLO_BAD);
        assert_string_equal(r.reason, "server name is not a host name");
        /* two server_name extensions */
        struct hello h;
        client_hello("a.test", NULL, 0, &h);
        add_ext(&h, 0, "\0\011\0\0\006e.test", 11);
        assert_int_equal(sniff(&h, &r), TLSHELLO_BAD);
}

static void test_uninitialised(void **state) {
        (void) state;
        struct hello h;
        struct tlshello r;
        client_hello("a.test", NULL, 0, &h);
        tlshello_free();
        assert_int_equal(sniff(&h, &r), -EINVAL);
        assert_int_equal(tlshello_init(), 0);
        assert_int_equal(tlshello_init(), 0);
        assert_int_equal(sniff(&h, &r), TLSHELLO_OK);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_real_hellos),        cmocka_unit_test(test_split),
                cmocka_unit_test(test_not_tls),            cmocka_unit_test(test_crafted_extensions),
                cmocka_unit_test(test_sni_checks),         cmocka_unit_test(test_uninitialised),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
