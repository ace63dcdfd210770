/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* What the files of lib/netpolicy share; not for callers. */

#include <stdarg.h>
#include <stddef.h>

#include "netpolicy.h"

/* IPv4 addresses one IPv6 address can embed: NAT64 of 64:ff9b:1::/48 has
 * four layouts, Teredo two addresses. */
#define NP_EMBEDDED_MAX 4
/* chars of a value quoted back into an error message */
#define NP_QUOTE_MAX 64

/* netpolicy_name_canonical() with the least number of labels and a static
 * phrase saying what is wrong: `"%s" <why>` reads as a sentence. */
int np_name_canonical(const char *in, size_t len, size_t min_labels, char *out, size_t outsz, const char **ret_why);

/* Whether a canonical name is a public suffix (ICANN or private section,
 * and the "*" rule: every unlisted TLD): 1 or 0, -ENOPKG without a list. */
int np_is_public_suffix(const char *name);

/* len bytes of s for an error message: at most NP_QUOTE_MAX chars, other
 * than printable ASCII (and '"', '\\') shown as '?', "..." when cut. */
void np_quote(const char *s, size_t len, char *buf, size_t size);
#define NP_QUOTE_SIZE (NP_QUOTE_MAX + 4)

/* Writes the message into err (when not NULL) and returns -EINVAL. */
int np_fail(char *err, size_t errsz, const char *fmt, ...) _printf_(3, 4);

/* A platform reason's class alone: "loopback" for "platform deny set: loopback". */
const char *np_reason_class(enum netpolicy_reason r);

/* The IPv4 addresses (IPv4-mapped) embedded in an IPv6 address of the
 * forms the platform judges by them (not ::ffff:0:0/96: that is IPv4). */
size_t np_embedded_v4(const struct in6_addr *a, struct in6_addr out[NP_EMBEDDED_MAX]);
