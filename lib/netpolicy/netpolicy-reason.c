/* SPDX-License-Identifier: Apache-2.0 */
/* Why a connection was allowed or denied, in words: the one table of
 * reasons, below the policy's files (netpolicy.c, netpolicy-addr.c). */
#include <stdbool.h>
#include <stddef.h>

#include "netpolicy-internal.h"

#define PLATFORM "platform deny set: "
static const struct {
        const char *text;
        const char *class; /* the platform's: text without PLATFORM */
} reasons[_NETPOLICY_REASON_MAX] = {
        [NETPOLICY_REASON_MODE_ALLOW_ALL] = { "mode allow-all" },
        [NETPOLICY_REASON_MODE_DENY_ALL] = { "mode deny-all" },
        [NETPOLICY_REASON_ALLOW_RULE] = { "allowed by an allow rule" },
        [NETPOLICY_REASON_DENY_RULE] = { "denied by a deny rule" },
        [NETPOLICY_REASON_NO_MATCH] = { "no allow rule matches" },
        [NETPOLICY_REASON_BAD_NAME] = { "not a valid host name" },
        [NETPOLICY_REASON_IP_LITERAL] = { "an IP literal where a host name is needed" },
        [NETPOLICY_REASON_NO_POLICY] = { "no policy" },
#define P(r, c) [r] = { PLATFORM c, c }
        P(NETPOLICY_REASON_SELF, "the gateway's or host's own address"),
        P(NETPOLICY_REASON_UNSPECIFIED, "unspecified address"),
        P(NETPOLICY_REASON_THIS_NETWORK, "this network (0.0.0.0/8)"),
        P(NETPOLICY_REASON_LOOPBACK, "loopback"),
        P(NETPOLICY_REASON_PRIVATE, "private network"),
        P(NETPOLICY_REASON_SHARED, "shared address space (CGNAT)"),
        P(NETPOLICY_REASON_LINK_LOCAL, "link-local"),
        P(NETPOLICY_REASON_METADATA, "cloud metadata service"),
        P(NETPOLICY_REASON_IETF, "IETF protocol assignments"),
        P(NETPOLICY_REASON_DOCUMENTATION, "documentation range"),
        P(NETPOLICY_REASON_MULTICAST, "multicast"),
        P(NETPOLICY_REASON_RESERVED, "reserved"),
        P(NETPOLICY_REASON_BROADCAST, "broadcast"),
        P(NETPOLICY_REASON_UNIQUE_LOCAL, "unique local (fc00::/7)"),
        P(NETPOLICY_REASON_SITE_LOCAL, "site-local (deprecated)"),
        P(NETPOLICY_REASON_DISCARD, "discard-only (100::/64)"),
#undef P
};

const char *netpolicy_reason_to_string(enum netpolicy_reason r) {
        return (unsigned) r < _NETPOLICY_REASON_MAX && reasons[r].text ? reasons[r].text : "unknown reason";
}

bool netpolicy_reason_is_platform(enum netpolicy_reason r) {
        return (unsigned) r < _NETPOLICY_REASON_MAX && reasons[r].class;
}

const char *np_reason_class(enum netpolicy_reason r) {
        return netpolicy_reason_is_platform(r) ? reasons[r].class : netpolicy_reason_to_string(r);
}
