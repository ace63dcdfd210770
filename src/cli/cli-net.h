/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Egress policies on the command line (`airlock create`, `airlock net`):
 * the flags as a policy object for the API, and a policy and its log as
 * text. No I/O but the FILE the formatters write to, so the unit tests
 * cover them. The API checks the policy (docs/network.md); these only put
 * the flags into its shape and refuse what has no shape:
 *
 *   --net MODE            "mode": MODE (allow-all, deny-all, allowlist)
 *   --allow HOSTS         allow host rules, HOSTS comma-separated, each
 *                         HOST or HOST:PORT (without a port the API's
 *                         default ports, 80 and 443); implies allowlist
 *   --allow-cidr C[:P,..] one allow cidr rule (repeatable), ports optional:
 *                         203.0.113.0/24:5432, 198.51.100.7:22,80,
 *                         2001:db8::/32:443, [2001:db8::1]:22
 *   --deny HOSTS          deny host rules, as --allow
 *   --deny-cidr C[:P,..]  one deny cidr rule, as --allow-cidr
 *
 * Rules keep the order they were given in (a deny beats an allow whatever
 * the order; the order names rules in the log).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#define CLI_NET_ERR_MAX 256
#define CLI_NET_RULES_MAX 256 /* per list, as the API */

enum cli_net_flag {
        CLI_NET_MODE,
        CLI_NET_ALLOW,
        CLI_NET_ALLOW_CIDR,
        CLI_NET_DENY,
        CLI_NET_DENY_CIDR,
};

struct cli_net {
        char *mode;   /* --net, or NULL */
        json_t *allow; /* rules, or NULL before the first */
        json_t *deny;
};

/* Releases what the flags collected; the struct may be reused zeroed. */
void cli_net_done(struct cli_net *n);

/* Adds one flag's argument, all its rules or none. -EINVAL with a message
 * in err (CLI_NET_ERR_MAX bytes) for an empty host, a bad port, a second
 * --net or more than CLI_NET_RULES_MAX rules; -ENOMEM. */
int cli_net_add(struct cli_net *n, enum cli_net_flag flag, const char *arg, char *err);

/* Whether any flag was given. */
bool cli_net_given(const struct cli_net *n);

/* The policy the flags make, {"mode"?, "allow"?, "deny"?} (a new
 * reference); -ENODATA when no flag was given. */
int cli_net_policy(const struct cli_net *n, json_t **ret);

/* A policy object as text: "mode: M", then one rule per line,
 * "allow  host  pypi.org  ports 80,443" / "deny   cidr  198.51.100.0/24  all ports". */
int cli_net_print(const json_t *policy, FILE *f);

/* A network log ({"entries":[{"ts_ms","kind","name"?,"addr"?,"port"?,
 * "action","reason"}]}) as a table: TIME KIND DESTINATION ACTION REASON. */
int cli_net_log_print(const json_t *log, FILE *f);
