/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The canonical form of a host name the gateway decides on (a DNS qname,
 * an SNI, a Host header): the policy compares names in this form only, so
 * two spellings of one name can never be judged apart. Internal to the
 * parsers of src/gw/ until lib/netpolicy's canonicaliser replaces it.
 *
 * Canonical: lowercase ASCII, no trailing dot, at most GWNAME_MAX bytes,
 * labels of 1..63 bytes of [a-z0-9-] (and '_' where allowed) that neither
 * start nor end with '-'. A name whose last label is all digits (127.1,
 * 2130706433, 0x7f.1 — IPv4 in the forms resolvers and libc accept) is
 * refused unless GWNAME_NUMERIC_TLD: no real TLD is numeric, so such a
 * name is an address in disguise.
 */

#include <stddef.h>

#define GWNAME_MAX 253

enum {
        GWNAME_UNDERSCORE = 1 << 0,   /* '_' in labels (DNS: _dmarc, _sip._tcp) */
        GWNAME_TRAILING_DOT = 1 << 1, /* one trailing dot is accepted and dropped (a Host "a.test.") */
        GWNAME_NUMERIC_TLD = 1 << 2,  /* the last label may be all digits (DNS: names are not addresses there) */
};

/* Canonicalises in[0..len) (no NUL needed, any NUL byte is refused) into
 * out (GWNAME_MAX + 1 bytes, NUL-terminated). Returns 0, or -EINVAL when it
 * is empty or not a host name by the rules above; out is untouched then. */
int gwname_canonical(const char *in, size_t len, unsigned flags, char *out);
