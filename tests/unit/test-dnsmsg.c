/* SPDX-License-Identifier: Apache-2.0 */
/* src/gw/dnsmsg: the gateway's DNS messages. What a guest query may be
 * (and the local answer to one that may not), the fresh query upstream,
 * what survives of the upstream's answer (the CNAME chain and the
 * addresses of its end, nothing else) and the reply rebuilt from it. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ldns/ldns.h>

#include "dnsmsg.h"

/* A DNS message written by hand, so that tests can break every field. */
struct msg {
        uint8_t b[4096];
        size_t n;
};

static void put8(struct msg *m, uint8_t v) {
        assert_true(m->n < sizeof m->b);
        m->b[m->n++] = v;
}

static void put16(struct msg *m, uint16_t v) {
        put8(m, (uint8_t) (v >> 8));
        put8(m, (uint8_t) v);
}

static void put32(struct msg *m, uint32_t v) {
        put16(m, (uint16_t) (v >> 16));
        put16(m, (uint16_t) v);
}

static void put_bytes(struct msg *m, const void *p, size_t n) {
        assert_true(m->n + n <= sizeof m->b);
        memcpy(m->b + m->n, p, n);
        m->n += n;
}

/* a dotted name in wire form; "" is the root */
static void put_name(struct msg *m, const char *name) {
        while (*name) {
                const char *dot = strchr(name, '.');
                size_t l = dot ? (size_t) (dot - name) : strlen(name);
                put8(m, (uint8_t) l);
                put_bytes(m, name, l);
                name += l + (dot ? 1 : 0);
        }
        put8(m, 0);
}

enum { QR = 0x8000, TC = 0x0200, RD = 0x0100, RA = 0x0080 };

static void header(struct msg *m, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
        m->n = 0;
        put16(m, id);
        put16(m, flags);
        put16(m, qd);
        put16(m, an);
        put16(m, ns);
        put16(m, ar);
}

static void question(struct msg *m, const char *name, uint16_t type, uint16_t class) {
        put_name(m, name);
        put16(m, type);
        put16(m, class);
}

static void rr(struct msg *m, const char *owner, uint16_t type, uint32_t ttl, const void *rdata, uint16_t rdlen) {
        put_name(m, owner);
        put16(m, type);
        put16(m, DNSMSG_CLASS_IN);
        put32(m, ttl);
        put16(m, rdlen);
        put_bytes(m, rdata, rdlen);
}

static void rr_a(struct msg *m, const char *owner, uint32_t ttl, const char *addr) {
        uint8_t a[4];
        assert_int_equal(inet_pton(AF_INET, addr, a), 1);
        rr(m, owner, DNSMSG_TYPE_A, ttl, a, 4);
}

static void rr_aaaa(struct msg *m, const char *owner, uint32_t ttl, const char *addr) {
        uint8_t a[16];
        assert_int_equal(inet_pton(AF_INET6, addr, a), 1);
        rr(m, owner, DNSMSG_TYPE_AAAA, ttl, a, 16);
}

static void rr_cname(struct msg *m, const char *owner, uint32_t ttl, const char *target) {
        struct msg t = { .n = 0 };
        put_name(&t, target);
        rr(m, owner, DNSMSG_TYPE_CNAME, ttl, t.b, (uint16_t) t.n);
}

static void rr_opt(struct msg *m, uint16_t udp_size, uint8_t ext_rcode, uint8_t version) {
        put8(m, 0); /* root */
        put16(m, LDNS_RR_TYPE_OPT);
        put16(m, udp_size);
        put8(m, ext_rcode);
        put8(m, version);
        put16(m, 0);
        put16(m, 0);
}

/* A guest's query: one question, EDNS optional. */
static void query(struct msg *m, uint16_t id, const char *name, uint16_t type, uint16_t edns) {
        header(m, id, RD, 1, 0, 0, edns ? 1 : 0);
        question(m, name, type, DNSMSG_CLASS_IN);
        if (edns)
                rr_opt(m, edns, 0, 0);
}

static int parse(const struct msg *m, struct dnsmsg_query *q) {
        return dnsmsg_query_parse(m->b, m->n, q);
}

static void test_query_ok(void **state) {
        (void) state;
        struct msg m;
        struct dnsmsg_query q;
        query(&m, 0x1234, "WwW.Example.TEST", DNSMSG_TYPE_A, 4096);
        assert_int_equal(parse(&m, &q), 0);
        assert_int_equal(q.id, 0x1234);
        assert_true(q.rd);
        assert_true(q.edns);
        assert_int_equal(q.edns_udp_size, 4096);
        assert_int_equal(dnsmsg_query_udp_size(&q), DNSMSG_EDNS_SIZE);
        assert_true(q.has_question);
        assert_int_equal(q.qtype, DNSMSG_TYPE_A);
        assert_string_equal(q.name, "www.example.test");
        /* the guest's spelling is kept for the reply's question */
        assert_int_equal(q.qname_wire_len, 18);
        assert_memory_equal(q.qname_wire, "\003WwW\007Example\004TEST\0", 18);
        assert_null(q.reason);

        query(&m, 1, "a.test", DNSMSG_TYPE_AAAA, 0);
        assert_int_equal(parse(&m, &q), 0);
        assert_false(q.edns);
        assert_int_equal(dnsmsg_query_udp_size(&q), 512);
        /* underscores (service names) and a numeric last label are DNS names */
        query(&m, 1, "_dmarc.a.test", DNSMSG_TYPE_AAAA, 0);
        assert_int_equal(parse(&m, &q), 0);
        assert_string_equal(q.name, "_dmarc.a.test");
        query(&m, 1, "4.3.2.1", DNSMSG_TYPE_A, 0);
        assert_int_equal(parse(&m, &q), 0);
        query(&m, 1, "x.test", DNSMSG_TYPE_HTTPS, 1232); /* answered by the caller, not refused here */
        assert_int_equal(parse(&m, &q), 0);
        assert_int_equal(q.qtype, DNSMSG_TYPE_HTTPS);
        /* 253 characters, labels of 63 */
        char longname[300];
        size_t ln = 0;
        for (int l = 0; l < 4; l++) {
                size_t k = l < 3 ? 63 : 61;
                memset(longname + ln, 'a' + l, k);
                ln += k;
                longname[ln++] = '.';
        }
        longname[ln - 1] = 0;
        assert_int_equal(strlen(longname), 253);
        query(&m, 1, longname, DNSMSG_TYPE_A, 0);
        assert_int_equal(parse(&m, &q), 0);
        assert_string_equal(q.name, longname);
}

/* The query is answered locally with rcode, and why says so. */
static void assert_local(const struct msg *m, int rcode, const char *why) {
        struct dnsmsg_query q;
        memset(&q, 0x5a, sizeof q);
        int r = parse(m, &q);
        if (r != rcode)
                fail_msg("rcode %d, wanted %d (%s)", r, rcode, r > 0 ? q.reason : "");
        assert_non_null(q.reason);
        if (!strstr(q.reason, why))
                fail_msg("reason \"%s\", wanted \"%s\"", q.reason, why);
        assert_int_equal(q.id, 0x4242);
}

static void test_query_local_answers(void **state) {
        (void) state;
        struct msg m;
        /* refused: meta types (ANY is an amplifier and a bulk channel),
         * other classes, names that are no host names, the root */
        static const uint16_t meta[] = { 249, 250, 251, 252, 253, 254, DNSMSG_TYPE_ANY };
        for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
                query(&m, 0x4242, "a.test", meta[i], 0);
                assert_local(&m, DNSMSG_RCODE_REFUSED, "meta query type");
        }
        header(&m, 0x4242, RD, 1, 0, 0, 0);
        question(&m, "version.bind", 16, 3 /* CH */);
        assert_local(&m, DNSMSG_RCODE_REFUSED, "class is not IN");
        static const char *const bad_names[] = {
                "a\001b.test", "a b.test", "a\\.test", "ex\xc3\xa9.test", "a*.test", "-a.test", "a-.test",
        };
        for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
                query(&m, 0x4242, bad_names[i], DNSMSG_TYPE_A, 0);
                assert_local(&m, DNSMSG_RCODE_REFUSED, "name is not a host name");
        }
        /* a '.' inside a label: its text would read as another name */
        header(&m, 0x4242, RD, 1, 0, 0, 0);
        put_bytes(&m, "\003a.b\004test\0", 10);
        put16(&m, DNSMSG_TYPE_A);
        put16(&m, DNSMSG_CLASS_IN);
        assert_local(&m, DNSMSG_RCODE_REFUSED, "name is not a host name");
        query(&m, 0x4242, "", DNSMSG_TYPE_A, 0);
        assert_local(&m, DNSMSG_RCODE_REFUSED, "root");

        /* other opcodes: NOTIMP (RFC 1035), the question left unread */
        header(&m, 0x4242, RD | (2 << 11), 1, 0, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        assert_local(&m, DNSMSG_RCODE_NOTIMP, "opcode");

        /* malformed, answered FORMERR */
        header(&m, 0x4242, RD, 2, 0, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        question(&m, "e.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "not exactly one question");
        header(&m, 0x4242, RD, 0, 0, 0, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "not exactly one question");
        header(&m, 0x4242, RD, 1, 1, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        assert_local(&m, DNSMSG_RCODE_FORMERR, "answer or authority records");
        header(&m, 0x4242, RD | TC, 1, 0, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "truncated query");
        header(&m, 0x4242, RD, 1, 0, 0, 2);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        rr_opt(&m, 1232, 0, 0);
        rr_opt(&m, 1232, 0, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "additional records beyond one OPT");
        header(&m, 0x4242, RD, 1, 0, 0, 1);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        assert_local(&m, DNSMSG_RCODE_FORMERR, "additional record that is no OPT");
        header(&m, 0x4242, RD, 1, 0, 0, 1);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        rr_opt(&m, 1232, 0, 1);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "EDNS version");
        header(&m, 0x4242, RD, 1, 0, 0, 1); /* an OPT not owned by the root */
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        put_bytes(&m, "\xc0\x0c", 2);
        put16(&m, LDNS_RR_TYPE_OPT);
        put16(&m, 1232);
        put32(&m, 0);
        put16(&m, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "malformed query");
        query(&m, 0x4242, "a.test", 0, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "question type 0 or OPT");
        query(&m, 0x4242, "a.test", LDNS_RR_TYPE_OPT, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "question type 0 or OPT");
        /* cut short, trailing bytes, a label of 64, a pointer loop */
        query(&m, 0x4242, "a.test", DNSMSG_TYPE_A, 0);
        m.n -= 1;
        assert_local(&m, DNSMSG_RCODE_FORMERR, "malformed query");
        query(&m, 0x4242, "a.test", DNSMSG_TYPE_A, 0);
        put8(&m, 0);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "malformed query");
        header(&m, 0x4242, RD, 1, 0, 0, 0);
        put8(&m, 64);
        for (int i = 0; i < 64; i++)
                put8(&m, 'a');
        put8(&m, 0);
        put16(&m, 1);
        put16(&m, 1);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "malformed query");
        header(&m, 0x4242, RD, 1, 0, 0, 0);
        put_bytes(&m, "\001a\xc0\x0c", 4); /* points at itself */
        put16(&m, 1);
        put16(&m, 1);
        assert_local(&m, DNSMSG_RCODE_FORMERR, "malformed query");
        /* sizes: over 512 needs EDNS, over 1232 never */
        header(&m, 0x4242, RD, 1, 0, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, DNSMSG_CLASS_IN);
        memset(m.b + m.n, 0, 600);
        m.n += 600;
        assert_local(&m, DNSMSG_RCODE_FORMERR, "");
        query(&m, 0x4242, "a.test", DNSMSG_TYPE_A, 1232);
        m.n = 1300;
        assert_local(&m, DNSMSG_RCODE_FORMERR, "query too long");
}

static void test_query_dropped(void **state) {
        (void) state;
        struct msg m;
        struct dnsmsg_query q, before;
        memset(&q, 0x5a, sizeof q);
        before = q;
        /* no id to answer, or a response (answering one could loop) */
        query(&m, 1, "a.test", DNSMSG_TYPE_A, 0);
        for (size_t n = 0; n < 12; n++)
                assert_int_equal(dnsmsg_query_parse(m.b, n, &q), -EBADMSG);
        m.b[2] |= 0x80;
        assert_int_equal(parse(&m, &q), -EBADMSG);
        assert_memory_equal(&q, &before, sizeof q);
        assert_int_equal(dnsmsg_query_parse(NULL, 0, &q), -EBADMSG);
}

/* Parses a message the module wrote, with ldns. */
static ldns_pkt *read_back(const uint8_t *b, size_t n) {
        ldns_pkt *p = NULL;
        assert_int_equal(ldns_wire2pkt(&p, b, n), LDNS_STATUS_OK);
        return p;
}

static void test_reply_rcode(void **state) {
        (void) state;
        struct msg m;
        struct dnsmsg_query q;
        uint8_t out[512];
        size_t n = 0;
        query(&m, 0xbeef, "E.Test", DNSMSG_TYPE_ANY, 1232);
        assert_int_equal(parse(&m, &q), DNSMSG_RCODE_REFUSED);
        assert_int_equal(dnsmsg_reply_rcode(&q, DNSMSG_RCODE_REFUSED, out, sizeof out, &n), 0);
        ldns_pkt *p = read_back(out, n);
        assert_int_equal(ldns_pkt_id(p), 0xbeef);
        assert_true(ldns_pkt_qr(p));
        assert_true(ldns_pkt_rd(p));
        assert_int_equal(ldns_pkt_get_rcode(p), LDNS_RCODE_REFUSED);
        assert_int_equal(ldns_pkt_qdcount(p), 1);
        assert_int_equal(ldns_pkt_ancount(p) + ldns_pkt_nscount(p) + ldns_pkt_arcount(p), 0);
        assert_true(ldns_pkt_edns(p)); /* the query had an OPT */
        /* the question as the guest spelled it */
        assert_memory_equal(out + 12, "\001E\004Test\0\0\xff\0\001", 12);
        ldns_pkt_free(p);

        /* a FORMERR with no readable question has none */
        header(&m, 0x4242, RD, 2, 0, 0, 0);
        assert_int_equal(parse(&m, &q), DNSMSG_RCODE_FORMERR);
        assert_false(q.has_question);
        assert_int_equal(dnsmsg_reply_rcode(&q, DNSMSG_RCODE_FORMERR, out, sizeof out, &n), 0);
        assert_int_equal(n, 12);
        p = read_back(out, n);
        assert_int_equal(ldns_pkt_id(p), 0x4242);
        assert_int_equal(ldns_pkt_get_rcode(p), LDNS_RCODE_FORMERR);
        assert_int_equal(ldns_pkt_qdcount(p), 0);
        ldns_pkt_free(p);

        /* NXDOMAIN for a name outside the policy, nothing sent upstream */
        query(&m, 7, "x7g2k.e.test", DNSMSG_TYPE_A, 0);
        assert_int_equal(parse(&m, &q), 0);
        assert_int_equal(dnsmsg_reply_rcode(&q, DNSMSG_RCODE_NXDOMAIN, out, sizeof out, &n), 0);
        p = read_back(out, n);
        assert_int_equal(ldns_pkt_get_rcode(p), LDNS_RCODE_NXDOMAIN);
        assert_false(ldns_pkt_edns(p));
        ldns_pkt_free(p);

        size_t keep = 99;
        assert_int_equal(dnsmsg_reply_rcode(&q, DNSMSG_RCODE_NXDOMAIN, out, n - 1, &keep), -ENOBUFS);
        assert_int_equal(dnsmsg_reply_rcode(&q, 16, out, sizeof out, &keep), -EINVAL);
        assert_int_equal(keep, 99);
}

static void test_query_build(void **state) {
        (void) state;
        struct msg m;
        struct dnsmsg_query q;
        uint8_t out[512];
        size_t n = 0;
        query(&m, 1, "A.Test", DNSMSG_TYPE_AAAA, 0);
        assert_int_equal(parse(&m, &q), 0);
        assert_int_equal(dnsmsg_query_build(&q, 0xabcd, out, sizeof out, &n), 0);
        ldns_pkt *p = read_back(out, n);
        assert_int_equal(ldns_pkt_id(p), 0xabcd);
        assert_false(ldns_pkt_qr(p));
        assert_true(ldns_pkt_rd(p));
        assert_int_equal(ldns_pkt_get_opcode(p), LDNS_PACKET_QUERY);
        assert_int_equal(ldns_pkt_qdcount(p), 1);
        assert_int_equal(ldns_pkt_edns_udp_size(p), DNSMSG_EDNS_SIZE);
        ldns_rr *qr = ldns_rr_list_rr(ldns_pkt_question(p), 0);
        assert_int_equal(ldns_rr_get_type(qr), LDNS_RR_TYPE_AAAA);
        assert_int_equal(ldns_rr_get_class(qr), LDNS_RR_CLASS_IN);
        ldns_pkt_free(p);
        /* the canonical name, not the guest's bytes */
        assert_memory_equal(out + 12, "\001a\004test\0", 8);
        /* and the gateway's own parse of it agrees */
        struct dnsmsg_query again;
        assert_int_equal(dnsmsg_query_parse(out, n, &again), 0);
        assert_string_equal(again.name, "a.test");
        assert_int_equal(again.id, 0xabcd);

        size_t keep = 99;
        q.qtype = DNSMSG_TYPE_HTTPS;
        assert_int_equal(dnsmsg_query_build(&q, 1, out, sizeof out, &keep), -EOPNOTSUPP);
        q.qtype = DNSMSG_TYPE_A;
        strcpy(q.name, "A.test");
        assert_int_equal(dnsmsg_query_build(&q, 1, out, sizeof out, &keep), -EINVAL);
        strcpy(q.name, "a.test");
        assert_int_equal(dnsmsg_query_build(&q, 1, out, 20, &keep), -ENOBUFS);
        assert_int_equal(keep, 99);
}

/* The gateway's query for name/type, as dnsmsg_response_parse() gets it. */
static void sent(struct dnsmsg_query *q, const char *name, uint16_t type) {
        struct msg m;
        query(&m, 9, name, type, 0);
        assert_int_equal(parse(&m, q), 0);
}

static void response(struct msg *m, uint16_t id, uint16_t flags, const char *name, uint16_t type, uint16_t an,
                     uint16_t ns, uint16_t ar) {
        header(m, id, QR | RD | RA | flags, 1, an, ns, ar);
        question(m, name, type, DNSMSG_CLASS_IN);
}

static void test_response_chain(void **state) {
        (void) state;
        struct dnsmsg_query q;
        struct dnsmsg_answer a;
        struct msg m;
        sent(&q, "a.test", DNSMSG_TYPE_A);
        /* a -> b -> c, c's addresses; everything else dropped: another
         * name's address, an AAAA in an A answer, HTTPS and TXT records,
         * authority and additional sections */
        response(&m, 77, 0, "a.test", DNSMSG_TYPE_A, 8, 1, 1);
        rr_a(&m, "e.test", 60, "198.51.100.66");
        rr_cname(&m, "A.TEST", 300, "B.test");
        rr_cname(&m, "b.test", 200, "c.test");
        rr_a(&m, "c.test", 100, "198.18.0.1");
        rr_aaaa(&m, "c.test", 100, "2001:db8::1");
        rr(&m, "c.test", DNSMSG_TYPE_HTTPS, 100, "\0\001\0", 3);
        rr(&m, "c.test", 16, 100, "\004ech!", 5);
        rr_a(&m, "C.test", 50, "198.18.0.2");
        rr_a(&m, "c.test", 10, "203.0.113.9"); /* authority */
        rr_a(&m, "c.test", 10, "203.0.113.10"); /* additional */
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 77, &a), 0);
        assert_int_equal(a.rcode, 0);
        assert_false(a.truncated);
        assert_int_equal(a.n_cname, 2);
        assert_string_equal(a.cname[0], "b.test");
        assert_string_equal(a.cname[1], "c.test");
        assert_int_equal(a.cname_ttl[0], 300);
        assert_int_equal(a.n_addr, 2);
        char s[INET6_ADDRSTRLEN];
        assert_int_equal(a.addr[0].family, AF_INET);
        assert_string_equal(inet_ntop(AF_INET, &a.addr[0].v4, s, sizeof s), "198.18.0.1");
        assert_string_equal(inet_ntop(AF_INET, &a.addr[1].v4, s, sizeof s), "198.18.0.2");
        assert_int_equal(a.addr[1].ttl, 50);
        assert_int_equal(a.min_ttl, 50);

        /* AAAA: only AAAA records, TTLs above 2^31 read as 0 */
        sent(&q, "a.test", DNSMSG_TYPE_AAAA);
        response(&m, 78, 0, "a.test", DNSMSG_TYPE_AAAA, 2, 0, 0);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        rr_aaaa(&m, "a.test", 0x80000000u, "::ffff:127.0.0.1");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 78, &a), 0);
        assert_int_equal(a.n_addr, 1);
        assert_int_equal(a.addr[0].family, AF_INET6);
        assert_int_equal(a.addr[0].ttl, 0);
        assert_int_equal(a.min_ttl, 0);

        /* NXDOMAIN at the end of a chain, truncated, extended rcode */
        sent(&q, "a.test", DNSMSG_TYPE_A);
        response(&m, 79, TC | DNSMSG_RCODE_NXDOMAIN, "a.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr_cname(&m, "a.test", 30, "gone.test");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 79, &a), 0);
        assert_int_equal(a.rcode, DNSMSG_RCODE_NXDOMAIN);
        assert_true(a.truncated);
        assert_int_equal(a.n_cname, 1);
        assert_int_equal(a.n_addr, 0);
        response(&m, 80, 0, "a.test", DNSMSG_TYPE_A, 0, 0, 1);
        rr_opt(&m, 1232, 1, 0);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 80, &a), 0);
        assert_int_equal(a.rcode, 16); /* BADVERS */

        /* at most 32 addresses are kept */
        response(&m, 81, 0, "a.test", DNSMSG_TYPE_A, 40, 0, 0);
        for (int i = 0; i < 40; i++) {
                char ip[32];
                snprintf(ip, sizeof ip, "198.18.1.%d", i);
                rr_a(&m, "a.test", 60, ip);
        }
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 81, &a), 0);
        assert_int_equal(a.n_addr, DNSMSG_ADDR_MAX);

        /* a chain of 8 is read, one of 9 is not; nor is a loop */
        char names[10][16];
        for (int len = 8; len <= 9; len++) {
                response(&m, 82, 0, "a.test", DNSMSG_TYPE_A, (uint16_t) len, 0, 0);
                for (int i = 0; i < len; i++) {
                        snprintf(names[i + 1], sizeof names[i + 1], "c%d.test", i + 1);
                        rr_cname(&m, i == 0 ? "a.test" : names[i], 60, names[i + 1]);
                }
                assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 82, &a), len == 8 ? 0 : -ELOOP);
        }
        response(&m, 83, 0, "a.test", DNSMSG_TYPE_A, 2, 0, 0);
        rr_cname(&m, "a.test", 60, "b.test");
        rr_cname(&m, "b.test", 60, "a.test");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 83, &a), -ELOOP);
        response(&m, 83, 0, "a.test", DNSMSG_TYPE_A, 3, 0, 0);
        rr_cname(&m, "a.test", 60, "b.test");
        rr_cname(&m, "b.test", 60, "c.test");
        rr_cname(&m, "c.test", 60, "b.test");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 83, &a), -ELOOP);
        /* two CNAMEs for one name, a CNAME to a name that is none */
        response(&m, 84, 0, "a.test", DNSMSG_TYPE_A, 2, 0, 0);
        rr_cname(&m, "a.test", 60, "b.test");
        rr_cname(&m, "a.test", 60, "e.test");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 84, &a), -EBADMSG);
        response(&m, 84, 0, "a.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr_cname(&m, "a.test", 60, "e\001.test");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 84, &a), -EBADMSG);
}

static void test_response_not_ours(void **state) {
        (void) state;
        struct dnsmsg_query q;
        struct dnsmsg_answer a, before;
        struct msg m;
        memset(&a, 0x5a, sizeof a);
        before = a;
        sent(&q, "a.test", DNSMSG_TYPE_A);
        /* the control: the right answer is read */
        response(&m, 100, 0, "a.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        struct dnsmsg_answer ok;
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &ok), 0);
        /* forged or late: another id, no response, another name, type, class */
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 101, &a), -ESTALE);
        m.b[2] &= 0x7f;
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -ESTALE);
        response(&m, 100, 0, "e.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr_a(&m, "e.test", 60, "198.51.100.66");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -ESTALE);
        response(&m, 100, 0, "a.test", DNSMSG_TYPE_AAAA, 0, 0, 0);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -ESTALE);
        header(&m, 100, QR, 1, 0, 0, 0);
        question(&m, "a.test", DNSMSG_TYPE_A, 3);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -ESTALE);
        header(&m, 100, QR, 0, 0, 0, 0);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -ESTALE);
        /* malformed: an address of the wrong length, cut short, trailing
         * bytes, a CNAME whose name runs past its rdata */
        response(&m, 100, 0, "a.test", DNSMSG_TYPE_A, 2, 0, 0);
        rr(&m, "a.test", DNSMSG_TYPE_A, 60, "\xc6\x12\0\001\0", 5);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -EBADMSG);
        response(&m, 100, 0, "a.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr_a(&m, "a.test", 60, "198.18.0.1");
        assert_int_equal(dnsmsg_response_parse(m.b, m.n - 1, &q, 100, &a), -EBADMSG);
        put8(&m, 0);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -EBADMSG);
        response(&m, 100, 0, "a.test", DNSMSG_TYPE_A, 1, 0, 0);
        rr(&m, "a.test", DNSMSG_TYPE_CNAME, 60, "\001b\004test", 7); /* no root label inside */
        rr_a(&m, "b.test", 60, "198.18.0.1");
        m.b[7] = 2;
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &q, 100, &a), -EBADMSG);
        assert_int_equal(dnsmsg_response_parse(m.b, 11, &q, 100, &a), -EBADMSG);
        assert_memory_equal(&a, &before, sizeof a);
}

static void test_reply_build(void **state) {
        (void) state;
        struct dnsmsg_query q, sq;
        struct dnsmsg_answer a;
        struct msg m;
        query(&m, 0x5151, "WWW.A.test", DNSMSG_TYPE_A, 1232);
        assert_int_equal(parse(&m, &q), 0);
        sent(&sq, "www.a.test", DNSMSG_TYPE_A);
        response(&m, 5, 0, "www.a.test", DNSMSG_TYPE_A, 4, 0, 0);
        rr_cname(&m, "www.a.test", 3600, "cdn.test");
        rr_a(&m, "cdn.test", 86400, "198.18.0.1");
        rr_a(&m, "cdn.test", 86400, "10.0.0.1");
        rr(&m, "cdn.test", DNSMSG_TYPE_HTTPS, 100, "\0\001\0", 3);
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &sq, 5, &a), 0);
        /* the caller drops the address in its deny set */
        a.addr[1] = a.addr[0];
        a.n_addr = 1;
        uint8_t out[1232];
        size_t n = 0;
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, sizeof out, &n), 0);
        ldns_pkt *p = read_back(out, n);
        assert_int_equal(ldns_pkt_id(p), 0x5151);
        assert_true(ldns_pkt_qr(p) && ldns_pkt_rd(p) && ldns_pkt_ra(p));
        assert_false(ldns_pkt_tc(p));
        assert_true(ldns_pkt_edns(p));
        assert_int_equal(ldns_pkt_ancount(p), 2);
        assert_int_equal(ldns_pkt_nscount(p), 0);
        ldns_rr *c = ldns_rr_list_rr(ldns_pkt_answer(p), 0), *r = ldns_rr_list_rr(ldns_pkt_answer(p), 1);
        assert_int_equal(ldns_rr_get_type(c), LDNS_RR_TYPE_CNAME);
        assert_int_equal(ldns_rr_ttl(c), 60);
        assert_int_equal(ldns_rr_get_type(r), LDNS_RR_TYPE_A);
        assert_int_equal(ldns_rr_ttl(r), 60);
        assert_memory_equal(ldns_rdf_data(ldns_rr_rdf(r, 0)), "\xc6\x12\0\001", 4);
        ldns_pkt_free(p);
        /* the question as the guest spelled it */
        assert_memory_equal(out + 12, "\003WWW\001A\004test\0", 12);
        /* read back by the gateway's own parser: the same chain and address */
        struct dnsmsg_answer back;
        assert_int_equal(dnsmsg_response_parse(out, n, &q, 0x5151, &back), 0);
        assert_int_equal(back.n_cname, 1);
        assert_string_equal(back.cname[0], "cdn.test");
        assert_int_equal(back.n_addr, 1);
        assert_memory_equal(&back.addr[0].v4, "\xc6\x12\0\001", 4);

        /* too large for the guest's 512 bytes: the question alone, TC set */
        query(&m, 0x5252, "a.test", DNSMSG_TYPE_AAAA, 0);
        assert_int_equal(parse(&m, &q), 0);
        sent(&sq, "a.test", DNSMSG_TYPE_AAAA);
        response(&m, 6, 0, "a.test", DNSMSG_TYPE_AAAA, 32, 0, 0);
        for (int i = 0; i < 32; i++) {
                char ip[64];
                snprintf(ip, sizeof ip, "2001:db8::%x", i + 1);
                rr_aaaa(&m, "a.test", 60, ip);
        }
        assert_int_equal(dnsmsg_response_parse(m.b, m.n, &sq, 6, &a), 0);
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, sizeof out, &n), 0);
        assert_true(n > 512);
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, dnsmsg_query_udp_size(&q), &n), 0);
        p = read_back(out, n);
        assert_true(ldns_pkt_tc(p));
        assert_int_equal(ldns_pkt_qdcount(p), 1);
        assert_int_equal(ldns_pkt_ancount(p), 0);
        ldns_pkt_free(p);
        size_t keep = 99;
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, 12, &keep), -ENOBUFS);
        /* addresses of another family than asked are not sent */
        a.addr[0].family = AF_INET;
        a.n_addr = 1;
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, sizeof out, &n), 0);
        p = read_back(out, n);
        assert_int_equal(ldns_pkt_ancount(p), 0);
        ldns_pkt_free(p);
        a.rcode = 16;
        assert_int_equal(dnsmsg_reply_build(&q, &a, 60, out, sizeof out, &keep), -EINVAL);
        assert_int_equal(keep, 99);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_query_ok),         cmocka_unit_test(test_query_local_answers),
                cmocka_unit_test(test_query_dropped),    cmocka_unit_test(test_reply_rcode),
                cmocka_unit_test(test_query_build),      cmocka_unit_test(test_response_chain),
                cmocka_unit_test(test_response_not_ours), cmocka_unit_test(test_reply_build),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
