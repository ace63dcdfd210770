/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * DNS messages for airlock-gw's resolver (docs/network.md): the guest's
 * queries, the gateway's own queries upstream and the upstream's answers,
 * and the replies to the guest, on libldns. Pure functions on bytes: no
 * sockets, no logging, so tests/fuzz/fuzz-dnsmsg.c runs them on anything.
 *
 * The gateway never forwards guest bytes: a guest query is parsed into a
 * struct dnsmsg_query, a fresh query is built for the upstream, the
 * upstream's answer is parsed into a struct dnsmsg_answer (only the CNAME
 * chain of the name asked and its A/AAAA addresses survive: HTTPS/SVCB,
 * TXT, authority and additional records are dropped — ECH keys travel in
 * HTTPS records, EGRESS.md T5), and the reply to the guest is built from
 * that struct after the caller has filtered the addresses.
 */

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gwname.h"

/* A guest query is at most this long (a plain UDP query: 512 bytes). */
#define DNSMSG_QUERY_MAX 1232
#define DNSMSG_UDP_PLAIN 512
/* The EDNS UDP size the gateway advertises and honours at most (the DNS
 * flag day's value: no fragmentation on any real path). */
#define DNSMSG_EDNS_SIZE 1232
/* An answer keeps at most this many CNAMEs after the name asked, and this
 * many addresses of the end of the chain. */
#define DNSMSG_CNAME_MAX 8
#define DNSMSG_ADDR_MAX 32

#define DNSMSG_TYPE_A 1
#define DNSMSG_TYPE_CNAME 5
#define DNSMSG_TYPE_AAAA 28
#define DNSMSG_TYPE_SVCB 64
#define DNSMSG_TYPE_HTTPS 65
#define DNSMSG_TYPE_ANY 255
#define DNSMSG_CLASS_IN 1

#define DNSMSG_RCODE_NOERROR 0
#define DNSMSG_RCODE_FORMERR 1
#define DNSMSG_RCODE_SERVFAIL 2
#define DNSMSG_RCODE_NXDOMAIN 3
#define DNSMSG_RCODE_NOTIMP 4
#define DNSMSG_RCODE_REFUSED 5

struct dnsmsg_query {
        uint16_t id;
        uint8_t opcode;
        bool rd;   /* recursion desired, echoed in the reply */
        bool edns; /* the query carried an OPT record: the reply carries one */
        /* the guest's EDNS UDP size (0 without EDNS) */
        uint16_t edns_udp_size;
        /* false only in a local FORMERR/NOTIMP answer for a query whose
         * question could not be read: the reply then has none */
        bool has_question;
        uint16_t qtype;
        uint16_t qclass;
        /* the canonical name (policy decides on it; "" for the root) */
        char name[GWNAME_MAX + 1];
        /* the name as the guest spelled it, in wire form: echoed in the
         * reply's question (resolvers using 0x20 case randomisation check
         * it) */
        uint8_t qname_wire[255];
        size_t qname_wire_len;
        /* why a local answer (0 < rcode), for the deny log; NULL otherwise */
        const char *reason;
};

struct dnsmsg_addr {
        int family; /* AF_INET or AF_INET6 */
        union {
                struct in_addr v4;
                struct in6_addr v6;
        };
        uint32_t ttl;
};

struct dnsmsg_answer {
        /* the upstream's rcode, with EDNS' extended bits */
        uint16_t rcode;
        bool truncated; /* TC: the caller retries over TCP */
        /* cname[0] is the target of the name asked, cname[i] that of
         * cname[i-1]; the addresses belong to the last (or to the name asked
         * when there is no CNAME) */
        char cname[DNSMSG_CNAME_MAX][GWNAME_MAX + 1];
        uint32_t cname_ttl[DNSMSG_CNAME_MAX];
        size_t n_cname;
        /* records of the type asked (A for A, AAAA for AAAA) owned by the end
         * of the chain, in the upstream's order; more are dropped */
        struct dnsmsg_addr addr[DNSMSG_ADDR_MAX];
        size_t n_addr;
        /* the lowest TTL of the chain and the addresses (0 when there is
         * neither) */
        uint32_t min_ttl;
};

/*
 * Parses a query the guest sent (the payload of a UDP datagram, or of a TCP
 * message without its length prefix). Returns:
 *   0   a query to resolve: QUERY, one question of class IN, no answer or
 *       authority records, at most an OPT in the additional section, not
 *       truncated, a type that is no meta type, a canonical name;
 *   > 0 the rcode to answer locally with dnsmsg_reply_rcode() (*ret filled,
 *       ret->reason says why): FORMERR for a malformed query that has an id
 *       (has_question false when the question was unreadable), NOTIMP for
 *       another opcode, REFUSED for ANY and the other meta types (AXFR,
 *       IXFR, MAILA/B, TKEY, TSIG: amplification and bulk channels), other
 *       classes, the root, and names with bytes outside [A-Za-z0-9_-];
 *   -EBADMSG when nothing must be answered: shorter than a header, or a
 *       response (QR set: answering one could loop). *ret untouched.
 */
int dnsmsg_query_parse(const uint8_t *buf, size_t len, struct dnsmsg_query *ret);

/* The size a UDP reply to q may have: 512 without EDNS, else the guest's
 * EDNS size within [512, DNSMSG_EDNS_SIZE]. */
size_t dnsmsg_query_udp_size(const struct dnsmsg_query *q);

/* A reply to q with only rcode (REFUSED, NXDOMAIN, FORMERR, SERVFAIL,
 * NOTIMP, or NOERROR for an empty answer): the guest's id, RD, its question
 * when it has one, an OPT when the query had one. -ENOBUFS when it does not
 * fit in outsz, -EINVAL for an rcode above 15. */
int dnsmsg_reply_rcode(const struct dnsmsg_query *q, int rcode, uint8_t *out, size_t outsz, size_t *ret_len);

/* A fresh query for the upstream resolver asking q's canonical name and
 * type with id new_id (random, chosen by the caller), RD set, EDNS
 * advertising DNSMSG_EDNS_SIZE. Only A and AAAA are built (-EOPNOTSUPP for
 * other types: the caller answers those itself); -ENOBUFS when it does not
 * fit in outsz. */
int dnsmsg_query_build(const struct dnsmsg_query *q, uint16_t new_id, uint8_t *out, size_t outsz, size_t *ret_len);

/*
 * Parses the upstream's answer to the query built from sent_q with id
 * sent_id. Returns 0 with *ret filled, or (*ret untouched):
 *   -ESTALE  not the answer to what was sent: no response, another id,
 *            opcode, question name, type or class (the gateway drops it:
 *            a forged or late datagram, EGRESS.md D2);
 *   -ELOOP   a CNAME chain longer than DNSMSG_CNAME_MAX or with a loop;
 *   -EBADMSG malformed, two CNAMEs for one name, or a CNAME to a name that
 *            is not a host name.
 * Only answer-section records of class IN are read; anything that is not
 * the chain or an address of the end of the chain is dropped.
 */
int dnsmsg_response_parse(const uint8_t *buf, size_t len, const struct dnsmsg_query *sent_q, uint16_t sent_id,
                          struct dnsmsg_answer *ret);

/*
 * The reply to the guest's query q, rebuilt from a (whose addresses the
 * caller has filtered): q's id, RD and question as the guest spelled it,
 * RA, a's rcode, the CNAME chain from q's name and then a's addresses, each
 * TTL at most ttl_cap; an OPT when the query had one. When the whole reply
 * does not fit in outsz (pass dnsmsg_query_udp_size() for UDP) it is sent
 * truncated: the question alone with TC set, and the guest retries over
 * TCP. -ENOBUFS when not even that fits; -EINVAL when a's rcode is above 15.
 */
int dnsmsg_reply_build(const struct dnsmsg_query *q, const struct dnsmsg_answer *a, uint32_t ttl_cap, uint8_t *out,
                       size_t outsz, size_t *ret_len);
