/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The egress policy of a sandbox: the `network` JSON the API stores and the
 * gateway enforces, its strict parser and canonical form, the decisions the
 * gateway asks (a name and a port; an address and a port), the platform
 * deny set no policy can lift, and host-name canonicalisation, so that one
 * function decides what a name is (docs/network.md, /shared/design/EGRESS.md).
 *
 *   {"mode": "allowlist",
 *    "allow": [{"host": "pypi.org"}, {"host": "*.pythonhosted.org", "ports": [443]},
 *              {"cidr": "203.0.113.0/24", "ports": [5432]}],
 *    "deny":  [{"host": "gist.github.com"}, {"cidr": "198.51.100.0/24"}]}
 *
 * Modes: "allow-all" (everything but the deny rules and the platform deny
 * set; allow rules are refused), "deny-all" (no rules at all), "allowlist"
 * (only what an allow rule matches, minus the deny rules; at least one allow
 * rule). Without "mode", "allowlist" when "allow" is given; an object with
 * neither is "not specified" (the caller applies the tenant's default, then
 * the node's); deny rules without a mode are refused, never dropped.
 *
 * Rules name exactly one of:
 *   "host": a DNS name, matched exactly, or "*.x.y": strict subdomains of
 *           x.y at any depth (never x.y itself); never a wildcard on a public
 *           suffix (*.com, *.co.uk, *.github.io: libpsl, ICANN and private
 *           sections). ASCII only (IDNs in their xn-- form), no IP literals.
 *   "cidr": "a.b.c.d/n", "x::/n" or a bare address (/32, /128), host bits
 *           zero. IPv4-mapped IPv6 (::ffff:a.b.c.d) is written as IPv4.
 * and optionally "ports": 1..NETPOLICY_PORTS_MAX distinct ports 1..65535.
 * Ports left out: [80, 443] for an allow host rule, every port for cidr rules
 * and for deny rules (a denied name is denied on every port, DNS included).
 *
 * Decisions: deny beats allow. Host rules decide names (HTTP Host, TLS SNI,
 * DNS queries), cidr rules decide addresses (raw TCP by destination); the
 * platform deny set applies to every address under every mode, before any
 * rule (netpolicy_platform_denied()).
 *
 * Addresses are struct in6_addr; an IPv4 address is IPv4-mapped
 * (::ffff:a.b.c.d) and is then IPv4 in every respect: it matches IPv4 rules
 * only, and IPv6 rules (even ::/0) match only addresses outside
 * ::ffff:0:0/96.
 *
 * Rules: functions return 0 or a negative errno; ret_ out-parameters are
 * written only on success. No I/O except libpsl reading the system's public
 * suffix list once (psl_latest(NULL): /usr/share/publicsuffix, else libpsl's
 * built-in copy). The library never logs. A parsed policy is immutable: share
 * it read-only between threads.
 */

#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "macros.h"

#define NETPOLICY_RULES_MAX 256         /* allow rules, and deny rules, each */
#define NETPOLICY_PORTS_MAX 32          /* ports of one rule */
#define NETPOLICY_JSON_MAX (64u << 10)  /* bytes of a policy as compact JSON */
#define NETPOLICY_NAME_MAX 253          /* chars of a canonical host name */
#define NETPOLICY_LABEL_MAX 63          /* chars of one label */
#define NETPOLICY_ERR_MAX 256           /* enough for every error message */
#define NETPOLICY_PLATFORM_OPEN_MAX 64  /* operator-opened ranges */
#define NETPOLICY_PLATFORM_SELF_MAX 256 /* always-denied addresses and ranges */
#define NETPOLICY_PLATFORM_STRING_MAX 4096
#define NETPOLICY_ADDR_STRING_MAX INET6_ADDRSTRLEN
#define NETPOLICY_CIDR_STRING_MAX (INET6_ADDRSTRLEN + 4) /* with "/128" */
#define NETPOLICY_DECISION_STRING_MAX 96

enum netpolicy_mode {
        NETPOLICY_ALLOW_ALL,
        NETPOLICY_DENY_ALL,
        NETPOLICY_ALLOWLIST,
        _NETPOLICY_MODE_MAX,
};

/* "allow-all", "deny-all", "allowlist"; NULL for anything else. */
const char *netpolicy_mode_to_string(enum netpolicy_mode m);
/* The mode a string names; -EINVAL for anything else. */
int netpolicy_mode_from_string(const char *s, enum netpolicy_mode *ret);

/* An address range. prefix counts bits of the in6_addr: an IPv4 range
 * a.b.c.d/n is ::ffff:a.b.c.d/(96 + n). Host bits are zero. */
struct netpolicy_cidr {
        struct in6_addr addr;
        uint8_t prefix;
};

/* Why a decision came out as it did, for the deny log. */
enum netpolicy_reason {
        NETPOLICY_REASON_MODE_ALLOW_ALL, /* "mode allow-all" */
        NETPOLICY_REASON_MODE_DENY_ALL,  /* "mode deny-all" */
        NETPOLICY_REASON_ALLOW_RULE,     /* "allowed by an allow rule": rule says which */
        NETPOLICY_REASON_DENY_RULE,      /* "denied by a deny rule": rule says which */
        NETPOLICY_REASON_NO_MATCH,       /* "no allow rule matches" */
        NETPOLICY_REASON_BAD_NAME,       /* not a host name netpolicy_name_canonical() accepts */
        NETPOLICY_REASON_IP_LITERAL,     /* an IP literal given as a name: only cidr rules decide addresses */
        NETPOLICY_REASON_NO_POLICY,      /* no policy (NULL): fail closed */
        /* the platform deny set, "platform deny set: ..." */
        NETPOLICY_REASON_SELF,          /* the gateway's or host's own addresses */
        NETPOLICY_REASON_UNSPECIFIED,   /* ::/128 */
        NETPOLICY_REASON_THIS_NETWORK,  /* 0.0.0.0/8 */
        NETPOLICY_REASON_LOOPBACK,      /* 127.0.0.0/8, ::1 */
        NETPOLICY_REASON_PRIVATE,       /* 10/8, 172.16/12, 192.168/16 */
        NETPOLICY_REASON_SHARED,        /* 100.64.0.0/10, carrier-grade NAT */
        NETPOLICY_REASON_LINK_LOCAL,    /* 169.254/16, fe80::/10 */
        NETPOLICY_REASON_METADATA,      /* 169.254.169.254, fd00:ec2::254, 100.100.100.200, 168.63.129.16 */
        NETPOLICY_REASON_IETF,          /* 192.0.0.0/24, IETF protocol assignments */
        NETPOLICY_REASON_DOCUMENTATION, /* 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20 */
        NETPOLICY_REASON_MULTICAST,     /* 224/4, ff00::/8 */
        NETPOLICY_REASON_RESERVED,      /* 240/4 */
        NETPOLICY_REASON_BROADCAST,     /* 255.255.255.255 */
        NETPOLICY_REASON_UNIQUE_LOCAL,  /* fc00::/7 */
        NETPOLICY_REASON_SITE_LOCAL,    /* fec0::/10, deprecated */
        NETPOLICY_REASON_DISCARD,       /* 100::/64 */
        _NETPOLICY_REASON_MAX,
};

/* A short static string for the reason; "unknown reason" for others. */
const char *netpolicy_reason_to_string(enum netpolicy_reason r);
/* Whether the reason is one of the platform deny set's. */
bool netpolicy_reason_is_platform(enum netpolicy_reason r);

struct netpolicy_decision {
        bool allow;
        enum netpolicy_reason reason;
        int rule; /* the index in allow[] or deny[] for ALLOW_RULE / DENY_RULE, else -1 */
};

/* The decision as one line for a log: "allowed by rule allow[2]", "denied by
 * rule deny[0]", "platform deny set: loopback", "no allow rule matches";
 * -ENOBUFS when size is under NETPOLICY_DECISION_STRING_MAX and it does
 * not fit. */
int netpolicy_decision_format(const struct netpolicy_decision *d, char *buf, size_t size);

struct netpolicy;
struct netpolicy_platform;

void netpolicy_free(struct netpolicy *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct netpolicy *, netpolicy_free);

/*
 * Parses the policy object j (strictly: unknown keys at any level, wrong
 * types, values out of range and limits are errors). field names it in
 * messages ("network" when NULL): `network.allow[2]: unknown field "prots"
 * (accepted: "host", "cidr", "ports")`. Returns 1 and *ret when j specifies
 * a policy, 0 and *ret = NULL when it specifies nothing ({}: the caller
 * applies its default), -EINVAL with a message for the API client in err
 * (errsz bytes, NETPOLICY_ERR_MAX is enough; err may be NULL), -EFBIG when j
 * is over NETPOLICY_JSON_MAX as compact JSON, -ENOMEM, and -ENOPKG when a
 * wildcard rule cannot be checked because no public suffix list loads.
 */
int netpolicy_parse(const json_t *j, const char *field, struct netpolicy **ret, char *err, size_t errsz);
/* The same from JSON text (len bytes, no NUL needed): duplicate keys and
 * trailing bytes are errors; -EFBIG over NETPOLICY_JSON_MAX bytes. */
int netpolicy_parse_text(const char *text, size_t len, const char *field, struct netpolicy **ret, char *err,
                         size_t errsz);

/* A policy of mode allow-all or deny-all without rules (a node's default);
 * -EINVAL for allowlist, which needs rules. */
int netpolicy_new(enum netpolicy_mode mode, struct netpolicy **ret);

/*
 * The canonical form: compact JSON with sorted keys, "mode" always present,
 * "allow" and "deny" only when they hold rules, in the order given (a
 * decision's rule index refers to it); names canonical, ranges as
 * inet_ntop() writes them, ports sorted, default ports written out ("ports"
 * absent means every port). netpolicy_parse(netpolicy_format(p)) is equal
 * to p, and formatting that gives the same text. *ret is free()d.
 */
int netpolicy_format(const struct netpolicy *p, char **ret);
/* The canonical form as a new JSON object (json_decref()). */
int netpolicy_to_json(const struct netpolicy *p, json_t **ret);
/* Same mode and the same rules in the same order. NULL equals only NULL. */
bool netpolicy_equal(const struct netpolicy *a, const struct netpolicy *b);

/* The mode; deny-all for NULL (no policy denies everything). */
enum netpolicy_mode netpolicy_mode(const struct netpolicy *p);
/* Rule counts (0 for NULL). */
size_t netpolicy_n_allow(const struct netpolicy *p);
size_t netpolicy_n_deny(const struct netpolicy *p);

/* Whether any decision depends on a name: host allow rules of an allowlist,
 * or host deny rules (allow-all, allowlist). Then the gateway has to see the
 * Host or SNI of connections; otherwise it can decide by address alone. */
bool netpolicy_needs_names(const struct netpolicy *p);

/*
 * Decides a connection to, or a DNS query for (port 0: "any port"), a host
 * name. name is canonicalised first (netpolicy_name_canonical()): one it
 * refuses is denied (BAD_NAME, IP_LITERAL). Then: deny-all denies; a
 * matching deny rule with the port denies; allow-all allows; an allowlist
 * allows when an allow host rule matches with the port. For port 0 a name is
 * allowed when some port would be. Only host rules take part. NULL p
 * denies. Returns whether it is allowed; *ret (may be NULL) says why.
 */
bool netpolicy_check_name(const struct netpolicy *p, const char *name, uint16_t port,
                          struct netpolicy_decision *ret);

/*
 * Decides a connection by its destination address (raw TCP: no name), port
 * 0 meaning any: the platform deny set first (pl, may be NULL: the default
 * set), then deny cidr rules (matched by the address and also by an IPv4
 * address embedded in it: 6to4, NAT64, Teredo, IPv4-compatible), then
 * allow-all allows, deny-all denies, an allowlist allows when an allow cidr
 * rule matches the address (as it is) with the port. Only cidr rules take
 * part. NULL p denies (after the platform set). Returns whether it is
 * allowed; *ret (may be NULL) says why.
 */
bool netpolicy_check_addr(const struct netpolicy *p, const struct netpolicy_platform *pl,
                          const struct in6_addr *addr, uint16_t port, struct netpolicy_decision *ret);

/*
 * The platform deny set: ranges no sandbox or tenant policy can lift. Fixed:
 *   IPv4  0.0.0.0/8 10/8 100.64/10 127/8 169.254/16 172.16/12 192.0.0/24
 *         192.0.2/24 192.168/16 198.51.100/24 203.0.113/24 224/4 240/4
 *         255.255.255.255, and the metadata addresses 169.254.169.254,
 *         100.100.100.200, 168.63.129.16
 *   IPv6  ::/128 ::1 fc00::/7 fd00:ec2::254 fe80::/10 fec0::/10 ff00::/8
 *         2001:db8::/32 3fff::/20 100::/64
 *   IPv6 forms that embed IPv4 are judged by every IPv4 address they embed:
 *         ::ffff:0:0/96 (mapped: IPv4 itself), ::/96 (compatible),
 *         64:ff9b::/96 and 64:ff9b:1::/48 (NAT64; the local-use /48 by
 *         every RFC 6052 layout its prefixes of 48..96 bits allow, each
 *         one must be outside the set: fail closed, as the layout is the
 *         translator's choice),
 *         2002::/16 (6to4), 2001::/32 (Teredo: server and client)
 * 198.18.0.0/15 (benchmarking) is not in it: tests use it as their internet.
 *
 * The operator may open ranges (open[]), which lifts the deny for exactly
 * those ranges; never for the unopenable ones: this network, loopback,
 * link-local, multicast, reserved, broadcast, ::, ::1, site-local, discard,
 * and the metadata addresses, which stay denied inside an opened range.
 * self[] are always denied, opened or not: the gateway's own addresses, the
 * host's, the sandboxes' supernet.
 *
 * A zeroed struct is the default set, nothing opened, no self.
 */
struct netpolicy_platform {
        size_t n_open;
        struct netpolicy_cidr open[NETPOLICY_PLATFORM_OPEN_MAX];
        size_t n_self;
        struct netpolicy_cidr self[NETPOLICY_PLATFORM_SELF_MAX];
};

/*
 * Parses the operator's comma-separated list of ranges to open
 * ("203.0.113.0/24,10.1.0.0/16"; spaces around entries are fine, "" opens
 * nothing) into *ret, with no self addresses. -EINVAL with a message in err
 * for a bad range, one that opens nothing (outside the deny set), one that
 * overlaps an unopenable range, over NETPOLICY_PLATFORM_OPEN_MAX entries or
 * NETPOLICY_PLATFORM_STRING_MAX bytes.
 */
int netpolicy_platform_parse(const char *s, struct netpolicy_platform *ret, char *err, size_t errsz);
/* The opened ranges as the same comma-separated list (no spaces). */
int netpolicy_platform_format(const struct netpolicy_platform *pl, char **ret);
/* Adds addr/prefix (prefix counts bits of addr's own family: 0..32 for an
 * IPv4-mapped addr, 0..128 otherwise) to the always-denied set. Host bits
 * are cleared. -EINVAL for a bad prefix, -ENOSPC when full. */
int netpolicy_platform_add_self(struct netpolicy_platform *pl, const struct in6_addr *addr, unsigned prefix);

/* Whether addr is in the platform deny set as pl adjusts it (NULL: the
 * default set); *ret_reason (may be NULL) says which part, when denied. */
bool netpolicy_platform_denied(const struct netpolicy_platform *pl, const struct in6_addr *addr,
                               enum netpolicy_reason *ret_reason);

/*
 * Canonicalises a host name of len bytes (no NUL needed) into out (outsz
 * bytes, NETPOLICY_NAME_MAX + 1 is enough): lowercase, one trailing dot
 * stripped, LDH labels (letters, digits, hyphen, not first or last) of
 * 1..63 chars, at least two labels, at most 253 chars. Errors, out
 * untouched: -EILSEQ for a byte outside ASCII (IDNs go in their xn-- form),
 * -EADDRNOTAVAIL for an IP literal (netpolicy_name_is_ip()) or a name whose
 * last label is all digits (no top-level domain is), -ENAMETOOLONG over
 * 253 chars or a label over 63, -ENOBUFS when out is too small, -EINVAL for
 * everything else (NUL, empty labels, other characters, one label).
 */
int netpolicy_name_canonical(const char *in, size_t len, char *out, size_t outsz);
/* Whether len bytes of s are an IP literal in any form a resolver or
 * inet_aton() takes: dotted quads, fewer parts ("127.1"), octal and hex
 * parts ("0x7f.1", "017700000001"), IPv6 with or without brackets and zone;
 * one trailing dot ignored. */
bool netpolicy_name_is_ip(const char *s, size_t len);

/*
 * Ranges: "a.b.c.d/n", IPv6 "x::/n", or a bare address (/32, /128), with
 * host bits zero and the prefix in decimal without leading zeros; IPv6 in
 * ::ffff:0:0/96 is refused (written as IPv4). -EINVAL with a message
 * (naming the canonical form when host bits are set) in err.
 */
int netpolicy_cidr_parse(const char *s, size_t len, struct netpolicy_cidr *ret, char *err, size_t errsz);
/* "203.0.113.0/24", "2001:db8::/32" into buf (NETPOLICY_CIDR_STRING_MAX). */
int netpolicy_cidr_format(const struct netpolicy_cidr *c, char *buf, size_t size);
bool netpolicy_cidr_contains(const struct netpolicy_cidr *c, const struct in6_addr *addr);

/* An address and port from a sockaddr_in (made IPv4-mapped) or
 * sockaddr_in6; -EAFNOSUPPORT for other families, -EINVAL when len is
 * short. ret_port may be NULL. */
int netpolicy_addr_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct in6_addr *ret_addr,
                                 uint16_t *ret_port);
/* The address as text, IPv4-mapped ones as a.b.c.d (NETPOLICY_ADDR_STRING_MAX). */
int netpolicy_addr_format(const struct in6_addr *addr, char *buf, size_t size);
/* Whether addr is IPv4 (IPv4-mapped). */
bool netpolicy_addr_is_v4(const struct in6_addr *addr);
