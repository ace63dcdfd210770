/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Addresses: ranges, the platform deny set with its operator opens and
 * self addresses, and the IPv4 addresses IPv6 forms embed. IPv4 is
 * IPv4-mapped throughout, so one table walk serves both families.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy-internal.h"
#include "util.h"

#define V4(a, b, c, d, n) { .addr = { .s6_addr = { [10] = 0xff, 0xff, a, b, c, d } }, .prefix = 96 + (n) }
#define V6(n, ...) { .addr = { .s6_addr = { __VA_ARGS__ } }, .prefix = (n) }

struct range {
        struct netpolicy_cidr c;
        enum netpolicy_reason reason;
        /* the operator may open it; the rest stay denied inside any open */
        bool openable;
};

/* Within each family, the unopenable ranges first, and narrower ranges
 * before the wider ones holding them, so the reason is the most specific. */
static const struct range ranges[] = {
        { V4(169, 254, 169, 254, 32), NETPOLICY_REASON_METADATA, false },
        { V4(100, 100, 100, 200, 32), NETPOLICY_REASON_METADATA, false }, /* Alibaba, inside CGNAT */
        { V4(168, 63, 129, 16, 32), NETPOLICY_REASON_METADATA, false },   /* Azure's wire server */
        { V4(0, 0, 0, 0, 8), NETPOLICY_REASON_THIS_NETWORK, false },
        { V4(127, 0, 0, 0, 8), NETPOLICY_REASON_LOOPBACK, false },
        { V4(169, 254, 0, 0, 16), NETPOLICY_REASON_LINK_LOCAL, false },
        { V4(224, 0, 0, 0, 4), NETPOLICY_REASON_MULTICAST, false },
        { V4(255, 255, 255, 255, 32), NETPOLICY_REASON_BROADCAST, false },
        { V4(240, 0, 0, 0, 4), NETPOLICY_REASON_RESERVED, false },
        { V4(10, 0, 0, 0, 8), NETPOLICY_REASON_PRIVATE, true },
        { V4(100, 64, 0, 0, 10), NETPOLICY_REASON_SHARED, true },
        { V4(172, 16, 0, 0, 12), NETPOLICY_REASON_PRIVATE, true },
        { V4(192, 0, 0, 0, 24), NETPOLICY_REASON_IETF, true },
        { V4(192, 0, 2, 0, 24), NETPOLICY_REASON_DOCUMENTATION, true },
        { V4(192, 168, 0, 0, 16), NETPOLICY_REASON_PRIVATE, true },
        { V4(198, 51, 100, 0, 24), NETPOLICY_REASON_DOCUMENTATION, true },
        { V4(203, 0, 113, 0, 24), NETPOLICY_REASON_DOCUMENTATION, true },

        { V6(128), NETPOLICY_REASON_UNSPECIFIED, false },
        { V6(128, [15] = 1), NETPOLICY_REASON_LOOPBACK, false },
        { V6(128, 0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, 0x54), NETPOLICY_REASON_METADATA, false },
        { V6(10, 0xfe, 0x80), NETPOLICY_REASON_LINK_LOCAL, false },
        { V6(10, 0xfe, 0xc0), NETPOLICY_REASON_SITE_LOCAL, false },
        { V6(8, 0xff), NETPOLICY_REASON_MULTICAST, false },
        { V6(64, 0x01, 0x00), NETPOLICY_REASON_DISCARD, false },
        { V6(7, 0xfc), NETPOLICY_REASON_UNIQUE_LOCAL, true },
        { V6(32, 0x20, 0x01, 0x0d, 0xb8), NETPOLICY_REASON_DOCUMENTATION, true },
        { V6(20, 0x3f, 0xff), NETPOLICY_REASON_DOCUMENTATION, true },
};

bool netpolicy_addr_is_v4(const struct in6_addr *addr) {
        return addr && IN6_IS_ADDR_V4MAPPED(addr);
}

static bool cidr_is_v4(const struct netpolicy_cidr *c) {
        return c->prefix >= 96 && IN6_IS_ADDR_V4MAPPED(&c->addr);
}

/* The first bits of a and b agree. */
static bool prefix_equal(const struct in6_addr *a, const struct in6_addr *b, unsigned bits) {
        unsigned full = bits / 8, rest = bits % 8;
        if (memcmp(a->s6_addr, b->s6_addr, full) != 0)
                return false;
        if (rest == 0)
                return true;
        uint8_t mask = (uint8_t) (0xff << (8 - rest));
        return ((a->s6_addr[full] ^ b->s6_addr[full]) & mask) == 0;
}

static void clear_host_bits(struct in6_addr *a, unsigned bits) {
        for (unsigned i = 0; i < 16; i++) {
                if (bits >= 8 * (i + 1))
                        continue;
                unsigned keep = bits > 8 * i ? bits - 8 * i : 0;
                a->s6_addr[i] &= (uint8_t) (0xff00 >> keep);
        }
}

bool netpolicy_cidr_contains(const struct netpolicy_cidr *c, const struct in6_addr *addr) {
        if (!c || !addr || c->prefix > 128)
                return false;
        /* an IPv6 range never holds an IPv4 address, even ::/0 */
        if (cidr_is_v4(c) != (bool) IN6_IS_ADDR_V4MAPPED(addr))
                return false;
        return prefix_equal(&c->addr, addr, c->prefix);
}

/* Both ranges of one family hold a common address. */
static bool cidr_overlap(const struct netpolicy_cidr *a, const struct netpolicy_cidr *b) {
        if (cidr_is_v4(a) != cidr_is_v4(b))
                return false;
        return prefix_equal(&a->addr, &b->addr, MIN(a->prefix, b->prefix));
}

int netpolicy_addr_format(const struct in6_addr *addr, char *buf, size_t size) {
        if (!addr || !buf || size == 0)
                return -EINVAL;
        char tmp[INET6_ADDRSTRLEN];
        const char *r = IN6_IS_ADDR_V4MAPPED(addr) ? inet_ntop(AF_INET, addr->s6_addr + 12, tmp, sizeof tmp)
                                                   : inet_ntop(AF_INET6, addr, tmp, sizeof tmp);
        if (!r)
                return -EINVAL;
        return str_copy(buf, size, tmp) < 0 ? -ENOBUFS : 0;
}

int netpolicy_cidr_format(const struct netpolicy_cidr *c, char *buf, size_t size) {
        if (!c || !buf || c->prefix > 128)
                return -EINVAL;
        char a[INET6_ADDRSTRLEN];
        int r = netpolicy_addr_format(&c->addr, a, sizeof a);
        if (r < 0)
                return r;
        int n = snprintf(buf, size, "%s/%u", a, cidr_is_v4(c) ? c->prefix - 96u : c->prefix);
        return n < 0 || (size_t) n >= size ? -ENOBUFS : 0;
}

/* Decimal without sign or leading zeros, at most max. */
static int parse_prefix(const char *s, size_t len, unsigned max, unsigned *ret) {
        if (len == 0 || len > 3 || (len > 1 && s[0] == '0'))
                return -EINVAL;
        unsigned v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned) (s[i] - '0');
        }
        if (v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

int netpolicy_cidr_parse(const char *s, size_t len, struct netpolicy_cidr *ret, char *err, size_t errsz) {
        if (!s || !ret)
                return -EINVAL;
        char q[NP_QUOTE_SIZE];
        np_quote(s, len, q, sizeof q);
        static const char accepted[] = "a range is a.b.c.d/n (n 0..32), an IPv6 x::/n (n 0..128) or one address";
        char buf[NETPOLICY_CIDR_STRING_MAX];
        if (len == 0 || len >= sizeof buf || memchr(s, '\0', len))
                return np_fail(err, errsz, "\"%s\" is not an address range: %s", q, accepted);
        memcpy(buf, s, len);
        buf[len] = '\0';
        char *slash = strchr(buf, '/');
        if (slash)
                *slash = '\0';
        bool v6 = strchr(buf, ':') != NULL;
        struct netpolicy_cidr c = {};
        unsigned max = v6 ? 128 : 32, prefix = max;
        if (v6) {
                if (inet_pton(AF_INET6, buf, &c.addr) != 1)
                        return np_fail(err, errsz, "\"%s\" is not an address range: %s", q, accepted);
        } else {
                /* inet_pton() takes only a.b.c.d, without leading zeros:
                 * none of inet_aton()'s other spellings */
                struct in_addr a4;
                if (inet_pton(AF_INET, buf, &a4) != 1)
                        return np_fail(err, errsz, "\"%s\" is not an address range: %s", q, accepted);
                c.addr.s6_addr[10] = c.addr.s6_addr[11] = 0xff;
                memcpy(c.addr.s6_addr + 12, &a4, 4);
        }
        if (slash && parse_prefix(slash + 1, strlen(slash + 1), max, &prefix) < 0)
                return np_fail(err, errsz, "\"%s\": the prefix length must be a number from 0 to %u", q, max);
        if (v6 && IN6_IS_ADDR_V4MAPPED(&c.addr) && prefix >= 96)
                return np_fail(err, errsz, "\"%s\" is IPv4-mapped IPv6: write IPv4 ranges as a.b.c.d/n", q);
        c.prefix = (uint8_t) (v6 ? prefix : 96 + prefix);
        struct netpolicy_cidr net = c;
        clear_host_bits(&net.addr, net.prefix);
        if (memcmp(&net.addr, &c.addr, sizeof c.addr) != 0) {
                char canon[NETPOLICY_CIDR_STRING_MAX];
                if (netpolicy_cidr_format(&net, canon, sizeof canon) < 0)
                        return -EINVAL;
                return np_fail(err, errsz, "\"%s\" has host bits set: the range is %s", q, canon);
        }
        *ret = c;
        return 0;
}

int netpolicy_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct in6_addr *ret_addr,
                                 uint16_t *ret_port) {
        if (!sa || !ret_addr || len < (socklen_t) sizeof(sa_family_t))
                return -EINVAL;
        struct in6_addr a = {};
        uint16_t port;
        if (sa->sa_family == AF_INET) {
                if (len < (socklen_t) sizeof(struct sockaddr_in))
                        return -EINVAL;
                const struct sockaddr_in *in = (const struct sockaddr_in *) sa;
                a.s6_addr[10] = a.s6_addr[11] = 0xff;
                memcpy(a.s6_addr + 12, &in->sin_addr, 4);
                port = ntohs(in->sin_port);
        } else if (sa->sa_family == AF_INET6) {
                if (len < (socklen_t) sizeof(struct sockaddr_in6))
                        return -EINVAL;
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;
                a = in6->sin6_addr;
                port = ntohs(in6->sin6_port);
        } else
                return -EAFNOSUPPORT;
        *ret_addr = a;
        if (ret_port)
                *ret_port = port;
        return 0;
}

static void v4_at(struct in6_addr *out, uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
        *out = (struct in6_addr) {};
        out->s6_addr[10] = out->s6_addr[11] = 0xff;
        out->s6_addr[12] = a;
        out->s6_addr[13] = b;
        out->s6_addr[14] = c;
        out->s6_addr[15] = d;
}

static bool starts_with(const struct in6_addr *a, const uint8_t *p, size_t n) {
        return memcmp(a->s6_addr, p, n) == 0;
}

size_t np_embedded_v4(const struct in6_addr *a, struct in6_addr out[NP_EMBEDDED_MAX]) {
        static const uint8_t zero96[12] = {};
        static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };
        static const uint8_t nat64_local[6] = { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 };
        static const uint8_t sixtofour[2] = { 0x20, 0x02 };
        static const uint8_t teredo[4] = { 0x20, 0x01, 0x00, 0x00 };
        const uint8_t *b = a->s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))
                return 0;
        /* IPv4-compatible ::a.b.c.d (deprecated), NAT64 64:ff9b::/96 */
        if (starts_with(a, zero96, sizeof zero96) || starts_with(a, nat64, sizeof nat64)) {
                v4_at(&out[0], b[12], b[13], b[14], b[15]);
                return 1;
        }
        /* NAT64 local use 64:ff9b:1::/48: the network picks a prefix of
         * 48..96 bits, so every RFC 6052 layout that fits (bits 64..71 are
         * the u octet, never address) */
        if (starts_with(a, nat64_local, sizeof nat64_local)) {
                v4_at(&out[0], b[6], b[7], b[9], b[10]);  /* /48 */
                v4_at(&out[1], b[7], b[9], b[10], b[11]); /* /56 */
                v4_at(&out[2], b[9], b[10], b[11], b[12]); /* /64 */
                v4_at(&out[3], b[12], b[13], b[14], b[15]); /* /96 */
                return 4;
        }
        /* 6to4 2002:AABB:CCDD::/48 */
        if (starts_with(a, sixtofour, sizeof sixtofour)) {
                v4_at(&out[0], b[2], b[3], b[4], b[5]);
                return 1;
        }
        /* Teredo 2001:0::/32: the server, then the client (bits inverted) */
        if (starts_with(a, teredo, sizeof teredo)) {
                v4_at(&out[0], b[4], b[5], b[6], b[7]);
                v4_at(&out[1], (uint8_t) ~b[12], (uint8_t) ~b[13], (uint8_t) ~b[14], (uint8_t) ~b[15]);
                return 2;
        }
        return 0;
}

static bool in_list(const struct netpolicy_cidr *list, size_t n, const struct in6_addr *a) {
        for (size_t i = 0; i < n; i++)
                if (netpolicy_cidr_contains(&list[i], a))
                        return true;
        return false;
}

/* The address alone, without the IPv4 it may embed. */
static bool denied_direct(const struct netpolicy_platform *pl, const struct in6_addr *a,
                          enum netpolicy_reason *ret) {
        if (pl && in_list(pl->self, MIN(pl->n_self, (size_t) NETPOLICY_PLATFORM_SELF_MAX), a)) {
                *ret = NETPOLICY_REASON_SELF;
                return true;
        }
        for (size_t i = 0; i < ARRAY_SIZE(ranges); i++)
                if (!ranges[i].openable && netpolicy_cidr_contains(&ranges[i].c, a)) {
                        *ret = ranges[i].reason;
                        return true;
                }
        if (pl && in_list(pl->open, MIN(pl->n_open, (size_t) NETPOLICY_PLATFORM_OPEN_MAX), a))
                return false;
        for (size_t i = 0; i < ARRAY_SIZE(ranges); i++)
                if (ranges[i].openable && netpolicy_cidr_contains(&ranges[i].c, a)) {
                        *ret = ranges[i].reason;
                        return true;
                }
        return false;
}

bool netpolicy_platform_denied(const struct netpolicy_platform *pl, const struct in6_addr *addr,
                               enum netpolicy_reason *ret_reason) {
        enum netpolicy_reason r = NETPOLICY_REASON_UNSPECIFIED;
        bool denied = true; /* no address: fail closed */
        if (addr) {
                denied = denied_direct(pl, addr, &r);
                struct in6_addr v4[NP_EMBEDDED_MAX];
                size_t n = denied ? 0 : np_embedded_v4(addr, v4);
                for (size_t i = 0; i < n && !denied; i++)
                        denied = denied_direct(pl, &v4[i], &r);
        }
        if (denied && ret_reason)
                *ret_reason = r;
        return denied;
}

int netpolicy_platform_add_self(struct netpolicy_platform *pl, const struct in6_addr *addr, unsigned prefix) {
        if (!pl || !addr)
                return -EINVAL;
        bool v4 = IN6_IS_ADDR_V4MAPPED(addr);
        if (prefix > (v4 ? 32u : 128u))
                return -EINVAL;
        if (pl->n_self >= NETPOLICY_PLATFORM_SELF_MAX)
                return -ENOSPC;
        struct netpolicy_cidr c = { .addr = *addr, .prefix = (uint8_t) (v4 ? 96 + prefix : prefix) };
        /* an IPv6 range that would hold every IPv4 address keeps its family */
        clear_host_bits(&c.addr, c.prefix);
        pl->self[pl->n_self++] = c;
        return 0;
}

static int open_check(const struct netpolicy_cidr *c, const char *q, char *err, size_t errsz) {
        bool opens = false;
        for (size_t i = 0; i < ARRAY_SIZE(ranges); i++) {
                if (!cidr_overlap(c, &ranges[i].c))
                        continue;
                if (ranges[i].openable) {
                        opens = true;
                        continue;
                }
                /* a metadata address inside an opened range stays denied */
                if (ranges[i].reason == NETPOLICY_REASON_METADATA && c->prefix < ranges[i].c.prefix)
                        continue;
                char r[NETPOLICY_CIDR_STRING_MAX];
                if (netpolicy_cidr_format(&ranges[i].c, r, sizeof r) < 0)
                        return -EINVAL;
                return np_fail(err, errsz, "\"%s\" cannot be opened: it overlaps %s (%s), which stays denied", q, r,
                               np_reason_class(ranges[i].reason));
        }
        if (!opens)
                return np_fail(err, errsz,
                               "\"%s\" is not in the platform deny set, so opening it changes nothing "
                               "(only private, shared, documentation and unique local ranges can be opened)",
                               q);
        return 0;
}

int netpolicy_platform_parse(const char *s, struct netpolicy_platform *ret, char *err, size_t errsz) {
        if (!s || !ret)
                return -EINVAL;
        size_t len = strnlen(s, NETPOLICY_PLATFORM_STRING_MAX + 1);
        if (len > NETPOLICY_PLATFORM_STRING_MAX)
                return np_fail(err, errsz, "the list of opened ranges is longer than %d bytes",
                               NETPOLICY_PLATFORM_STRING_MAX);
        _cleanup_free_ struct netpolicy_platform *pl = calloc(1, sizeof *pl);
        if (!pl)
                return -ENOMEM;
        size_t start = 0;
        bool empty = true;
        for (size_t i = 0; i < len; i++)
                if (s[i] != ' ' && s[i] != '\t')
                        empty = false;
        for (size_t i = 0; !empty && i <= len; i++) {
                if (i < len && s[i] != ',')
                        continue;
                size_t a = start, b = i;
                start = i + 1;
                while (a < b && (s[a] == ' ' || s[a] == '\t'))
                        a++;
                while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
                        b--;
                if (a == b)
                        return np_fail(err, errsz, "the list of opened ranges has an empty entry (entries are "
                                                   "separated by single commas)");
                if (pl->n_open >= NETPOLICY_PLATFORM_OPEN_MAX)
                        return np_fail(err, errsz, "at most %d ranges can be opened", NETPOLICY_PLATFORM_OPEN_MAX);
                char q[NP_QUOTE_SIZE], why[NETPOLICY_ERR_MAX];
                np_quote(s + a, b - a, q, sizeof q);
                struct netpolicy_cidr c;
                if (netpolicy_cidr_parse(s + a, b - a, &c, why, sizeof why) < 0)
                        return np_fail(err, errsz, "opened range %s", why);
                int r = open_check(&c, q, err, errsz);
                if (r < 0)
                        return r;
                pl->open[pl->n_open++] = c;
        }
        *ret = *pl;
        return 0;
}

int netpolicy_platform_format(const struct netpolicy_platform *pl, char **ret) {
        if (!pl || !ret || pl->n_open > NETPOLICY_PLATFORM_OPEN_MAX)
                return -EINVAL;
        size_t size = pl->n_open * (NETPOLICY_CIDR_STRING_MAX + 1) + 1;
        _cleanup_free_ char *s = malloc(size);
        if (!s)
                return -ENOMEM;
        size_t n = 0;
        s[0] = '\0';
        for (size_t i = 0; i < pl->n_open; i++) {
                if (i > 0)
                        s[n++] = ',';
                int r = netpolicy_cidr_format(&pl->open[i], s + n, size - n);
                if (r < 0)
                        return r;
                n += strlen(s + n);
        }
        *ret = TAKE_PTR(s);
        return 0;
}
