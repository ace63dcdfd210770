/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what API clients and guests hand lib/netpolicy: the bytes as a
 * policy (what it accepts must format to a canonical text that parses back
 * to an equal policy and formats to the same text), as a host name (SNI,
 * Host, a DNS question: a canonical result is a fixed point, and a name
 * the policy decides), and their first 16 bytes as a destination address
 * (the platform deny set, which must see through embedded IPv4).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_policy(const char *s, size_t size) {
        char err[NETPOLICY_ERR_MAX];
        struct netpolicy *p = (struct netpolicy *) 0x1;
        int r = netpolicy_parse_text(s, size, "network", &p, err, sizeof err);
        if (r < 0) {
                if (p != (struct netpolicy *) 0x1 || strnlen(err, sizeof err) == 0)
                        abort(); /* untouched on failure, and a message says why */
                return;
        }
        if (r == 0) {
                if (p)
                        abort();
                return;
        }
        char *t1 = NULL, *t2 = NULL;
        struct netpolicy *q = NULL;
        if (netpolicy_format(p, &t1) < 0 || netpolicy_parse_text(t1, strlen(t1), "network", &q, err, sizeof err) != 1 ||
            !netpolicy_equal(p, q) || netpolicy_format(q, &t2) < 0 || strcmp(t1, t2) != 0 ||
            strlen(t1) > NETPOLICY_JSON_MAX)
                abort();
        /* decisions on every input must be total; deny-all allows nothing */
        struct netpolicy_decision d;
        bool a = netpolicy_check_name(p, "pypi.org", 443, &d);
        if (a != d.allow || (netpolicy_mode(p) == NETPOLICY_DENY_ALL && a))
                abort();
        free(t1);
        free(t2);
        netpolicy_free(p);
        netpolicy_free(q);
}

static void check_name(const char *s, size_t size, const struct netpolicy *p) {
        char out[NETPOLICY_NAME_MAX + 1], again[NETPOLICY_NAME_MAX + 1];
        memset(out, 0x5a, sizeof out);
        int r = netpolicy_name_canonical(s, size, out, sizeof out);
        if (r < 0) {
                if (out[0] != 0x5a)
                        abort(); /* untouched on failure */
                return;
        }
        size_t n = strlen(out);
        if (n == 0 || n > NETPOLICY_NAME_MAX || netpolicy_name_is_ip(out, n) || out[n - 1] == '.')
                abort();
        for (size_t i = 0; i < n; i++)
                if (!((out[i] >= 'a' && out[i] <= 'z') || (out[i] >= '0' && out[i] <= '9') || out[i] == '-' ||
                      out[i] == '.'))
                        abort();
        if (netpolicy_name_canonical(out, n, again, sizeof again) < 0 || strcmp(out, again) != 0)
                abort();
        /* the policy below allows exactly its three names on 443 and never
         * a subdomain of its exact one */
        struct netpolicy_decision d;
        bool allowed = netpolicy_check_name(p, out, 443, &d);
        size_t ex = strlen("example.com");
        bool sub = n > ex + 1 && out[n - ex - 1] == '.' && strcmp(out + n - ex, "example.com") == 0;
        bool expect = strcmp(out, "a.test") == 0 || sub;
        if (strcmp(out, "deny.example.com") == 0 || (n > 17 && strcmp(out + n - 17, ".deny.example.com") == 0))
                expect = false;
        if (allowed != expect || allowed != d.allow)
                abort();
}

static void check_addr(const uint8_t *data, const struct netpolicy *p) {
        struct in6_addr a;
        memcpy(&a, data, sizeof a);
        enum netpolicy_reason why;
        bool denied = netpolicy_platform_denied(NULL, &a, &why);
        struct netpolicy_decision d;
        bool allowed = netpolicy_check_addr(p, NULL, &a, 443, &d);
        if (denied && (allowed || !netpolicy_reason_is_platform(d.reason) || d.reason != why))
                abort();
        /* an IPv4 address and its 6to4 and NAT64 forms agree */
        struct in6_addr v4 = { .s6_addr = { [10] = 0xff, 0xff, data[0], data[1], data[2], data[3] } };
        struct in6_addr six = { .s6_addr = { 0x20, 0x02, data[0], data[1], data[2], data[3] } };
        struct in6_addr nat = { .s6_addr = { 0x00, 0x64, 0xff, 0x9b, [12] = data[0], data[1], data[2], data[3] } };
        bool d4 = netpolicy_platform_denied(NULL, &v4, NULL);
        if (d4 && (!netpolicy_platform_denied(NULL, &six, NULL) || !netpolicy_platform_denied(NULL, &nat, NULL)))
                abort();
        char buf[NETPOLICY_ADDR_STRING_MAX];
        if (netpolicy_addr_format(&a, buf, sizeof buf) < 0)
                abort();
}

static const struct netpolicy *fixed_policy(void) {
        static struct netpolicy *p;
        static const char text[] = "{\"mode\":\"allowlist\",\"allow\":[{\"host\":\"a.test\",\"ports\":[443]},"
                                   "{\"host\":\"*.example.com\"},{\"cidr\":\"198.18.0.0/15\"}],"
                                   "\"deny\":[{\"host\":\"deny.example.com\"},{\"host\":\"*.deny.example.com\"}]}";
        if (!p && netpolicy_parse_text(text, strlen(text), NULL, &p, NULL, 0) != 1)
                abort();
        return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const struct netpolicy *p = fixed_policy();
        check_policy((const char *) data, size);
        check_name((const char *) data, size, p);
        if (size >= 16)
                check_addr(data, p);
        if (size < NETPOLICY_PLATFORM_STRING_MAX) {
                char s[NETPOLICY_PLATFORM_STRING_MAX];
                memcpy(s, data, size);
                s[size] = '\0';
                struct netpolicy_platform *pl = calloc(1, sizeof *pl);
                char err[NETPOLICY_ERR_MAX];
                if (!pl)
                        abort();
                if (netpolicy_platform_parse(s, pl, err, sizeof err) == 0) {
                        char *t = NULL;
                        struct netpolicy_platform *again = calloc(1, sizeof *again);
                        if (!again || netpolicy_platform_format(pl, &t) < 0 ||
                            netpolicy_platform_parse(t, again, err, sizeof err) < 0 || again->n_open != pl->n_open ||
                            memcmp(again->open, pl->open, pl->n_open * sizeof pl->open[0]) != 0)
                                abort();
                        free(t);
                        free(again);
                }
                free(pl);
        }
        return 0;
}
