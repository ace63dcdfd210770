/* SPDX-License-Identifier: Apache-2.0 */
#include "dnsmsg.h"

#include <errno.h>
#include <ldns/ldns.h>
#include <string.h>
#include <sys/socket.h>

#include "macros.h"

static inline void pkt_freep(ldns_pkt **p) {
        if (*p)
                ldns_pkt_free(*p);
}
static inline void rr_freep(ldns_rr **p) {
        if (*p)
                ldns_rr_free(*p);
}
static inline void rdf_freep(ldns_rdf **p) {
        if (*p)
                ldns_rdf_deep_free(*p);
}
#define _cleanup_pkt_ _cleanup_(pkt_freep)
#define _cleanup_rr_ _cleanup_(rr_freep)
#define _cleanup_rdf_ _cleanup_(rdf_freep)

/* TTLs above 2^31 - 1 are read as 0 (RFC 2181 §8). */
static uint32_t ttl_sane(uint32_t ttl) {
        return ttl > INT32_MAX ? 0 : ttl;
}

/* A wire-form name (as ldns holds it: uncompressed labels, then 0) in
 * canonical text; "" for the root. -EINVAL when a label has a byte outside
 * [A-Za-z0-9_-] (a '.' inside a label included: its text would be another
 * name) or the name breaks gwname's rules. */
static int name_from_rdf(const ldns_rdf *rdf, char *out) {
        if (!rdf || ldns_rdf_get_type(rdf) != LDNS_RDF_TYPE_DNAME)
                return -EINVAL;
        const uint8_t *w = ldns_rdf_data(rdf);
        size_t wlen = ldns_rdf_size(rdf), pos = 0, tlen = 0;
        char text[256];
        while (pos < wlen && w[pos] != 0) {
                size_t l = w[pos++];
                if (l > 63 || pos + l > wlen || tlen + l + 1 > sizeof text - 1)
                        return -EINVAL;
                if (tlen > 0)
                        text[tlen++] = '.';
                for (size_t i = 0; i < l; i++) {
                        uint8_t c = w[pos + i];
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              c == '-' || c == '_'))
                                return -EINVAL;
                        text[tlen++] = (char) c;
                }
                pos += l;
        }
        if (pos >= wlen) /* no terminating root label */
                return -EINVAL;
        if (tlen == 0) {
                out[0] = 0;
                return 0;
        }
        return gwname_canonical(text, tlen, GWNAME_UNDERSCORE | GWNAME_NUMERIC_TLD, out);
}

/* Skips a wire name at *pos (labels, ending in a root label or a
 * compression pointer), without following pointers: ldns does that. */
static int wire_skip_name(const uint8_t *buf, size_t end, size_t *pos) {
        size_t p = *pos, total = 0;
        for (;;) {
                if (p >= end)
                        return -EBADMSG;
                uint8_t l = buf[p];
                if (l == 0) {
                        p++;
                        break;
                }
                if ((l & 0xc0) == 0xc0) {
                        if (p + 2 > end)
                                return -EBADMSG;
                        p += 2;
                        break;
                }
                if (l > 63 || (total += l + 1u) > 255)
                        return -EBADMSG;
                p += 1u + l;
        }
        *pos = p;
        return 0;
}

/*
 * The framing of a whole message, checked before ldns reads it: every
 * record's rdata is exactly as long as its RDLENGTH for the types read here
 * (A, AAAA, CNAME), an OPT is in the additional section and owned by the
 * root, and nothing follows the last record. ldns itself stops reading an
 * rdata where its type's fields end and goes on from there, so a record
 * that lies about its length would be read one way here and another way by
 * a strict peer.
 */
static int wire_check_framing(const uint8_t *buf, size_t len) {
        size_t pos = LDNS_HEADER_SIZE;
        unsigned counts[4] = { LDNS_QDCOUNT(buf), LDNS_ANCOUNT(buf), LDNS_NSCOUNT(buf), LDNS_ARCOUNT(buf) };
        for (size_t s = 0; s < 4; s++)
                for (unsigned i = 0; i < counts[s]; i++) {
                        size_t owner = pos;
                        if (wire_skip_name(buf, len, &pos) < 0)
                                return -EBADMSG;
                        if (s == 0) {
                                if (len - pos < 4)
                                        return -EBADMSG;
                                pos += 4;
                                continue;
                        }
                        if (len - pos < 10)
                                return -EBADMSG;
                        uint16_t type = ldns_read_uint16(buf + pos);
                        size_t rdlen = ldns_read_uint16(buf + pos + 8);
                        pos += 10;
                        if (len - pos < rdlen)
                                return -EBADMSG;
                        size_t rdend = pos + rdlen, p = pos;
                        /* an OPT is owned by the root (RFC 6891 §6.1.2); ldns
                         * takes it out of the message without looking */
                        if (type == LDNS_RR_TYPE_OPT && (s != 3 || buf[owner] != 0))
                                return -EBADMSG;
                        if ((type == DNSMSG_TYPE_A && rdlen != 4) || (type == DNSMSG_TYPE_AAAA && rdlen != 16) ||
                            (type == DNSMSG_TYPE_CNAME && (wire_skip_name(buf, rdend, &p) < 0 || p != rdend)))
                                return -EBADMSG;
                        pos = rdend;
                }
        return pos == len ? 0 : -EBADMSG;
}

/* Fills q from a query with an id; returns the rcode to answer (0: resolve). */
static int query_check(const uint8_t *buf, size_t len, struct dnsmsg_query *q) {
#define LOCAL(rc, why)                                                                                             \
        do {                                                                                                       \
                q->reason = (why);                                                                                 \
                return (rc);                                                                                       \
        } while (0)
        if (len > DNSMSG_QUERY_MAX)
                LOCAL(DNSMSG_RCODE_FORMERR, "query too long");
        if (q->opcode != LDNS_PACKET_QUERY)
                LOCAL(DNSMSG_RCODE_NOTIMP, "opcode is not QUERY");
        if (LDNS_TC_WIRE(buf))
                LOCAL(DNSMSG_RCODE_FORMERR, "truncated query");
        if (LDNS_QDCOUNT(buf) != 1)
                LOCAL(DNSMSG_RCODE_FORMERR, "not exactly one question");
        if (LDNS_ANCOUNT(buf) != 0 || LDNS_NSCOUNT(buf) != 0)
                LOCAL(DNSMSG_RCODE_FORMERR, "answer or authority records in a query");
        if (LDNS_ARCOUNT(buf) > 1)
                LOCAL(DNSMSG_RCODE_FORMERR, "additional records beyond one OPT");

        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        if (wire_check_framing(buf, len) < 0 || ldns_wire2pkt(&pkt, buf, len) != LDNS_STATUS_OK)
                LOCAL(DNSMSG_RCODE_FORMERR, "malformed query");
        /* ldns takes an OPT out of the additional section and a TSIG too:
         * the one additional record was an OPT when neither remains */
        if (LDNS_ARCOUNT(buf) == 1) {
                if (ldns_rr_list_rr_count(ldns_pkt_additional(pkt)) != 0 || ldns_pkt_tsig(pkt))
                        LOCAL(DNSMSG_RCODE_FORMERR, "additional record that is no OPT");
                q->edns = true;
                q->edns_udp_size = ldns_pkt_edns_udp_size(pkt);
                if (ldns_pkt_edns_version(pkt) != 0)
                        LOCAL(DNSMSG_RCODE_FORMERR, "EDNS version is not 0");
        }
        if (!q->edns && len > DNSMSG_UDP_PLAIN)
                LOCAL(DNSMSG_RCODE_FORMERR, "query over 512 bytes without EDNS");

        ldns_rr *rr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        const ldns_rdf *owner = rr ? ldns_rr_owner(rr) : NULL;
        if (!owner || ldns_rdf_size(owner) > sizeof q->qname_wire)
                LOCAL(DNSMSG_RCODE_FORMERR, "malformed question");
        memcpy(q->qname_wire, ldns_rdf_data(owner), ldns_rdf_size(owner));
        q->qname_wire_len = ldns_rdf_size(owner);
        q->qtype = ldns_rr_get_type(rr);
        q->qclass = ldns_rr_get_class(rr);
        q->has_question = true;

        if (q->qtype == 0 || q->qtype == LDNS_RR_TYPE_OPT)
                LOCAL(DNSMSG_RCODE_FORMERR, "question type 0 or OPT");
        /* TKEY, TSIG, IXFR, AXFR, MAILB, MAILA, ANY */
        if (q->qtype >= LDNS_RR_TYPE_TKEY && q->qtype <= LDNS_RR_TYPE_ANY)
                LOCAL(DNSMSG_RCODE_REFUSED, "meta query type (ANY, AXFR, ...)");
        if (q->qclass != DNSMSG_CLASS_IN)
                LOCAL(DNSMSG_RCODE_REFUSED, "class is not IN");
        if (name_from_rdf(owner, q->name) < 0)
                LOCAL(DNSMSG_RCODE_REFUSED, "name is not a host name");
        if (q->name[0] == 0)
                LOCAL(DNSMSG_RCODE_REFUSED, "query for the root");
        return 0;
#undef LOCAL
}

int dnsmsg_query_parse(const uint8_t *buf, size_t len, struct dnsmsg_query *ret) {
        if (!buf || len < LDNS_HEADER_SIZE || LDNS_QR_WIRE(buf))
                return -EBADMSG;
        struct dnsmsg_query q = {
                .id = LDNS_ID_WIRE(buf),
                .opcode = LDNS_OPCODE_WIRE(buf),
                .rd = LDNS_RD_WIRE(buf),
        };
        int rcode = query_check(buf, len, &q);
        if (rcode == 0)
                q.reason = NULL;
        *ret = q;
        return rcode;
}

size_t dnsmsg_query_udp_size(const struct dnsmsg_query *q) {
        if (!q->edns || q->edns_udp_size <= DNSMSG_UDP_PLAIN)
                return DNSMSG_UDP_PLAIN;
        return MIN(q->edns_udp_size, (size_t) DNSMSG_EDNS_SIZE);
}

/* Appends a record (owner and rdata are taken, also on failure) to a
 * section; a question has no rdata. */
static int push_rr(ldns_pkt *pkt, ldns_pkt_section section, ldns_rdf *owner, uint16_t type, uint32_t ttl,
                   ldns_rdf *rdata) {
        _cleanup_rdf_ ldns_rdf *o = owner, *d = rdata;
        _cleanup_rr_ ldns_rr *rr = ldns_rr_new();
        if (!rr || !o || (section != LDNS_SECTION_QUESTION && !d))
                return -ENOMEM;
        ldns_rr_set_owner(rr, TAKE_PTR(o));
        ldns_rr_set_type(rr, type);
        ldns_rr_set_class(rr, LDNS_RR_CLASS_IN);
        if (section == LDNS_SECTION_QUESTION)
                ldns_rr_set_question(rr, true);
        else {
                ldns_rr_set_ttl(rr, ttl);
                if (!ldns_rr_push_rdf(rr, d))
                        return -ENOMEM;
                d = NULL;
        }
        if (!ldns_pkt_push_rr(pkt, section, rr))
                return -ENOMEM;
        rr = NULL;
        return 0;
}

/* The header and question of a reply to q. */
static int reply_new(const struct dnsmsg_query *q, int rcode, ldns_pkt **ret) {
        if (rcode < 0 || rcode > 15)
                return -EINVAL;
        _cleanup_pkt_ ldns_pkt *pkt = ldns_pkt_new();
        if (!pkt)
                return -ENOMEM;
        ldns_pkt_set_id(pkt, q->id);
        ldns_pkt_set_qr(pkt, true);
        ldns_pkt_set_opcode(pkt, q->opcode);
        ldns_pkt_set_rd(pkt, q->rd);
        ldns_pkt_set_ra(pkt, true);
        ldns_pkt_set_rcode(pkt, (uint8_t) rcode);
        if (q->has_question) {
                if (q->qname_wire_len == 0 || q->qname_wire_len > sizeof q->qname_wire)
                        return -EINVAL;
                int r = push_rr(pkt, LDNS_SECTION_QUESTION,
                                ldns_dname_new_frm_data((uint16_t) q->qname_wire_len, q->qname_wire), q->qtype, 0,
                                NULL);
                if (r < 0)
                        return r;
                /* push_rr set the class to IN; the question keeps the guest's */
                ldns_rr_set_class(ldns_rr_list_rr(ldns_pkt_question(pkt), 0), q->qclass);
        }
        if (q->edns)
                ldns_pkt_set_edns_udp_size(pkt, DNSMSG_EDNS_SIZE);
        *ret = TAKE_PTR(pkt);
        return 0;
}

static int pkt_write(const ldns_pkt *pkt, uint8_t *out, size_t outsz, size_t *ret_len) {
        uint8_t *wire = NULL;
        size_t size = 0;
        if (ldns_pkt2wire(&wire, pkt, &size) != LDNS_STATUS_OK || !wire) {
                free(wire);
                return -ENOMEM;
        }
        int r = 0;
        if (size > outsz)
                r = -ENOBUFS;
        else {
                memcpy(out, wire, size);
                *ret_len = size;
        }
        free(wire);
        return r;
}

int dnsmsg_reply_rcode(const struct dnsmsg_query *q, int rcode, uint8_t *out, size_t outsz, size_t *ret_len) {
        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        int r = reply_new(q, rcode, &pkt);
        if (r < 0)
                return r;
        return pkt_write(pkt, out, outsz, ret_len);
}

int dnsmsg_query_build(const struct dnsmsg_query *q, uint16_t new_id, uint8_t *out, size_t outsz, size_t *ret_len) {
        if (q->qtype != DNSMSG_TYPE_A && q->qtype != DNSMSG_TYPE_AAAA)
                return -EOPNOTSUPP;
        /* only a canonical name goes upstream: re-check it, the struct may
         * not come from dnsmsg_query_parse() */
        char name[GWNAME_MAX + 1];
        if (gwname_canonical(q->name, strnlen(q->name, sizeof q->name), GWNAME_UNDERSCORE | GWNAME_NUMERIC_TLD,
                             name) < 0 ||
            strcmp(name, q->name) != 0)
                return -EINVAL;
        _cleanup_pkt_ ldns_pkt *pkt = ldns_pkt_new();
        if (!pkt)
                return -ENOMEM;
        ldns_pkt_set_id(pkt, new_id);
        ldns_pkt_set_opcode(pkt, LDNS_PACKET_QUERY);
        ldns_pkt_set_rd(pkt, true);
        ldns_pkt_set_edns_udp_size(pkt, DNSMSG_EDNS_SIZE);
        int r = push_rr(pkt, LDNS_SECTION_QUESTION, ldns_dname_new_frm_str(name), q->qtype, 0, NULL);
        if (r < 0)
                return r;
        return pkt_write(pkt, out, outsz, ret_len);
}

/* Whether rr is an IN record owned by the canonical name. */
static bool rr_owned_by(const ldns_rr *rr, const char *name) {
        char owner[GWNAME_MAX + 1];
        return ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN && name_from_rdf(ldns_rr_owner(rr), owner) == 0 &&
               strcmp(owner, name) == 0;
}

int dnsmsg_response_parse(const uint8_t *buf, size_t len, const struct dnsmsg_query *sent_q, uint16_t sent_id,
                          struct dnsmsg_answer *ret) {
        if (!buf || len < LDNS_HEADER_SIZE)
                return -EBADMSG;
        if (!LDNS_QR_WIRE(buf) || LDNS_ID_WIRE(buf) != sent_id || LDNS_OPCODE_WIRE(buf) != LDNS_PACKET_QUERY ||
            LDNS_QDCOUNT(buf) != 1)
                return -ESTALE;
        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        if (wire_check_framing(buf, len) < 0 || ldns_wire2pkt(&pkt, buf, len) != LDNS_STATUS_OK)
                return -EBADMSG;
        const ldns_rr *qrr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        char qname[GWNAME_MAX + 1];
        if (!qrr || name_from_rdf(ldns_rr_owner(qrr), qname) < 0 || strcmp(qname, sent_q->name) != 0 ||
            ldns_rr_get_type(qrr) != sent_q->qtype || ldns_rr_get_class(qrr) != LDNS_RR_CLASS_IN)
                return -ESTALE;

        /* a is about 10 KiB: built on the heap, copied out at the end */
        _cleanup_free_ struct dnsmsg_answer *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->rcode = ldns_pkt_get_rcode(pkt);
        if (ldns_pkt_edns(pkt))
                a->rcode |= (uint16_t) (ldns_pkt_edns_extended_rcode(pkt) << 4);
        a->truncated = ldns_pkt_tc(pkt);
        uint32_t min_ttl = UINT32_MAX;

        const ldns_rr_list *an = ldns_pkt_answer(pkt);
        size_t n = ldns_rr_list_rr_count(an);
        const char *end = sent_q->name;
        for (;;) {
                const ldns_rr *cname = NULL;
                for (size_t i = 0; i < n; i++) {
                        const ldns_rr *rr = ldns_rr_list_rr(an, i);
                        if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_CNAME || !rr_owned_by(rr, end))
                                continue;
                        if (cname)
                                return -EBADMSG; /* two CNAMEs for one name */
                        cname = rr;
                }
                if (!cname)
                        break;
                if (a->n_cname == DNSMSG_CNAME_MAX)
                        return -ELOOP;
                char target[GWNAME_MAX + 1];
                if (ldns_rr_rd_count(cname) != 1 || name_from_rdf(ldns_rr_rdf(cname, 0), target) < 0 ||
                    target[0] == 0)
                        return -EBADMSG;
                if (strcmp(target, sent_q->name) == 0)
                        return -ELOOP;
                for (size_t i = 0; i < a->n_cname; i++)
                        if (strcmp(target, a->cname[i]) == 0)
                                return -ELOOP;
                uint32_t ttl = ttl_sane(ldns_rr_ttl(cname));
                memcpy(a->cname[a->n_cname], target, sizeof target);
                a->cname_ttl[a->n_cname] = ttl;
                min_ttl = MIN(min_ttl, ttl);
                end = a->cname[a->n_cname++];
        }

        /* the addresses of the type asked, owned by the end of the chain */
        int family = sent_q->qtype == DNSMSG_TYPE_A ? AF_INET : sent_q->qtype == DNSMSG_TYPE_AAAA ? AF_INET6 : 0;
        size_t alen = family == AF_INET ? 4 : 16;
        for (size_t i = 0; family && i < n && a->n_addr < DNSMSG_ADDR_MAX; i++) {
                const ldns_rr *rr = ldns_rr_list_rr(an, i);
                if (ldns_rr_get_type(rr) != sent_q->qtype || !rr_owned_by(rr, end))
                        continue;
                const ldns_rdf *d = ldns_rr_rd_count(rr) == 1 ? ldns_rr_rdf(rr, 0) : NULL;
                if (!d || ldns_rdf_size(d) != alen)
                        return -EBADMSG;
                struct dnsmsg_addr *ad = &a->addr[a->n_addr++];
                ad->family = family;
                if (family == AF_INET)
                        memcpy(&ad->v4, ldns_rdf_data(d), 4);
                else
                        memcpy(&ad->v6, ldns_rdf_data(d), 16);
                ad->ttl = ttl_sane(ldns_rr_ttl(rr));
                min_ttl = MIN(min_ttl, ad->ttl);
        }
        a->min_ttl = min_ttl == UINT32_MAX ? 0 : min_ttl;
        *ret = *a;
        return 0;
}

int dnsmsg_reply_build(const struct dnsmsg_query *q, const struct dnsmsg_answer *a, uint32_t ttl_cap, uint8_t *out,
                       size_t outsz, size_t *ret_len) {
        if (!q->has_question || a->n_cname > DNSMSG_CNAME_MAX || a->n_addr > DNSMSG_ADDR_MAX)
                return -EINVAL;
        _cleanup_pkt_ ldns_pkt *pkt = NULL;
        int r = reply_new(q, a->rcode, &pkt);
        if (r < 0)
                return r;

        /* owner of the next record: the guest's spelling of its name first */
        _cleanup_rdf_ ldns_rdf *owner = ldns_dname_new_frm_data((uint16_t) q->qname_wire_len, q->qname_wire);
        if (!owner)
                return -ENOMEM;
        for (size_t i = 0; i < a->n_cname; i++) {
                char name[GWNAME_MAX + 1];
                /* the caller's struct: only canonical names go out */
                if (gwname_canonical(a->cname[i], strnlen(a->cname[i], sizeof a->cname[i]),
                                     GWNAME_UNDERSCORE | GWNAME_NUMERIC_TLD, name) < 0)
                        return -EINVAL;
                ldns_rdf *target = ldns_dname_new_frm_str(name);
                r = push_rr(pkt, LDNS_SECTION_ANSWER, TAKE_PTR(owner), DNSMSG_TYPE_CNAME,
                            MIN(a->cname_ttl[i], ttl_cap), target);
                if (r < 0)
                        return r;
                owner = ldns_dname_new_frm_str(name);
                if (!owner)
                        return -ENOMEM;
        }
        int family = q->qtype == DNSMSG_TYPE_A ? AF_INET : q->qtype == DNSMSG_TYPE_AAAA ? AF_INET6 : 0;
        for (size_t i = 0; i < a->n_addr; i++) {
                const struct dnsmsg_addr *ad = &a->addr[i];
                if (ad->family != family) /* only addresses of the type asked */
                        continue;
                ldns_rdf *d = family == AF_INET ? ldns_rdf_new_frm_data(LDNS_RDF_TYPE_A, 4, &ad->v4)
                                                : ldns_rdf_new_frm_data(LDNS_RDF_TYPE_AAAA, 16, &ad->v6);
                r = push_rr(pkt, LDNS_SECTION_ANSWER, ldns_rdf_clone(owner), q->qtype, MIN(ad->ttl, ttl_cap), d);
                if (r < 0)
                        return r;
        }
        r = pkt_write(pkt, out, outsz, ret_len);
        if (r != -ENOBUFS)
                return r;

        /* too large for the guest's buffer: the question alone, truncated */
        ldns_pkt_free(TAKE_PTR(pkt));
        r = reply_new(q, a->rcode, &pkt);
        if (r < 0)
                return r;
        ldns_pkt_set_tc(pkt, true);
        return pkt_write(pkt, out, outsz, ret_len);
}
