/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the gateway's DNS messages (src/gw/dnsmsg.c). The first byte
 * picks what the rest is:
 *   even  a guest's query: dnsmsg_query_parse(), then the local answer or
 *         the upstream query built from it;
 *   odd   an upstream answer to the gateway's query for a.test (A when
 *         bit 1 is clear, AAAA when set), with the id it carries:
 *         dnsmsg_response_parse(), then the reply to the guest built from
 *         it and read back.
 * Invariants: a failed parse leaves *ret alone; an accepted query has a
 * canonical name, class IN, no meta type, and the query built from it
 * parses to the same name; every local answer can be built; an answer
 * keeps at most 8 canonical CNAMEs and 32 addresses of the type asked,
 * and the reply built from it parses back to the same chain and addresses.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dnsmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_canonical(const char *name, unsigned flags) {
        char again[GWNAME_MAX + 1];
        assert(strlen(name) <= GWNAME_MAX);
        assert(gwname_canonical(name, strlen(name), flags, again) == 0 && strcmp(again, name) == 0);
}

static void check_query(const uint8_t *p, size_t n) {
        struct dnsmsg_query q, before;
        memset(&q, 0x5a, sizeof q);
        before = q;
        int r = dnsmsg_query_parse(p, n, &q);
        if (r < 0) {
                assert(r == -EBADMSG && memcmp(&q, &before, sizeof q) == 0);
                return;
        }
        uint8_t out[DNSMSG_EDNS_SIZE];
        size_t len = 0;
        if (r > 0) {
                assert(q.reason);
                assert(r == DNSMSG_RCODE_FORMERR || r == DNSMSG_RCODE_NOTIMP || r == DNSMSG_RCODE_REFUSED);
                /* a local answer always fits in a plain UDP datagram */
                assert(dnsmsg_reply_rcode(&q, r, out, DNSMSG_UDP_PLAIN, &len) == 0 && len <= DNSMSG_UDP_PLAIN);
                return;
        }
        assert(!q.reason && q.has_question && q.qclass == DNSMSG_CLASS_IN && q.qtype != 0);
        assert(q.qtype < 249 || q.qtype > 255);
        assert(q.name[0]);
        check_canonical(q.name, GWNAME_UNDERSCORE | GWNAME_NUMERIC_TLD);
        assert(dnsmsg_reply_rcode(&q, DNSMSG_RCODE_NXDOMAIN, out, DNSMSG_UDP_PLAIN, &len) == 0);
        r = dnsmsg_query_build(&q, 0x4321, out, sizeof out, &len);
        if (q.qtype != DNSMSG_TYPE_A && q.qtype != DNSMSG_TYPE_AAAA) {
                assert(r == -EOPNOTSUPP);
                return;
        }
        assert(r == 0);
        struct dnsmsg_query up;
        assert(dnsmsg_query_parse(out, len, &up) == 0);
        assert(up.id == 0x4321 && up.rd && up.qtype == q.qtype && strcmp(up.name, q.name) == 0);
}

static void check_answer(const struct dnsmsg_query *q, const struct dnsmsg_answer *a) {
        assert(a->n_cname <= DNSMSG_CNAME_MAX && a->n_addr <= DNSMSG_ADDR_MAX);
        int family = q->qtype == DNSMSG_TYPE_A ? AF_INET : AF_INET6;
        for (size_t i = 0; i < a->n_cname; i++) {
                check_canonical(a->cname[i], GWNAME_UNDERSCORE | GWNAME_NUMERIC_TLD);
                assert(strcmp(a->cname[i], q->name) != 0 && a->cname_ttl[i] <= INT32_MAX &&
                       a->min_ttl <= a->cname_ttl[i]);
        }
        for (size_t i = 0; i < a->n_addr; i++)
                assert(a->addr[i].family == family && a->addr[i].ttl <= INT32_MAX && a->min_ttl <= a->addr[i].ttl);
}

static void check_response(const uint8_t *p, size_t n, uint16_t qtype) {
        /* the gateway's query (and the guest's: the same name) */
        static const uint8_t a_test[] = "\001a\004test";
        uint8_t qwire[64];
        memcpy(qwire, "\0\0\001\0\0\001\0\0\0\0\0\0", 12);
        memcpy(qwire + 12, a_test, sizeof a_test);
        qwire[12 + sizeof a_test] = 0;
        qwire[12 + sizeof a_test + 1] = (uint8_t) qtype;
        qwire[12 + sizeof a_test + 2] = 0;
        qwire[12 + sizeof a_test + 3] = 1;
        struct dnsmsg_query q;
        assert(dnsmsg_query_parse(qwire, 12 + sizeof a_test + 4, &q) == 0);

        uint16_t id = n >= 2 ? (uint16_t) (p[0] << 8 | p[1]) : 0;
        struct dnsmsg_answer *a = malloc(sizeof *a), *before = malloc(sizeof *before), *back = malloc(sizeof *back);
        assert(a && before && back);
        memset(a, 0x5a, sizeof *a);
        memcpy(before, a, sizeof *a);
        int r = dnsmsg_response_parse(p, n, &q, id, a);
        if (r < 0) {
                assert(r == -EBADMSG || r == -ESTALE || r == -ELOOP);
                assert(memcmp(a, before, sizeof *a) == 0);
                goto out;
        }
        check_answer(&q, a);
        if (a->rcode > 15)
                a->rcode = DNSMSG_RCODE_SERVFAIL;
        /* the reply to the guest, read back by the same parser */
        static uint8_t out[65535];
        size_t len = 0;
        q.id = 0x7777;
        assert(dnsmsg_reply_build(&q, a, 60, out, sizeof out, &len) == 0);
        assert(dnsmsg_response_parse(out, len, &q, 0x7777, back) == 0);
        assert(back->rcode == a->rcode && back->n_cname == a->n_cname && back->n_addr == a->n_addr);
        for (size_t i = 0; i < a->n_cname; i++)
                assert(strcmp(back->cname[i], a->cname[i]) == 0 && back->cname_ttl[i] <= 60);
        for (size_t i = 0; i < a->n_addr; i++)
                assert(memcmp(&back->addr[i].v6, &a->addr[i].v6, a->addr[i].family == AF_INET ? 4 : 16) == 0 &&
                       back->addr[i].ttl <= 60);
        /* and one truncated to 512 bytes is still a reply */
        assert(dnsmsg_reply_build(&q, a, 60, out, DNSMSG_UDP_PLAIN, &len) == 0 && len <= DNSMSG_UDP_PLAIN);
out:
        free(a);
        free(before);
        free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size == 0)
                return 0;
        if (data[0] % 2 == 0)
                check_query(data + 1, size - 1);
        else
                check_response(data + 1, size - 1, data[0] & 2 ? DNSMSG_TYPE_AAAA : DNSMSG_TYPE_A);
        return 0;
}
