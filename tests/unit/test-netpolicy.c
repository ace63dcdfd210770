/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netpolicy.h"

#define SENTINEL ((struct netpolicy *) 0x5a5a)

static struct netpolicy *parse_ok(const char *json) {
        char err[NETPOLICY_ERR_MAX] = "";
        struct netpolicy *p = NULL;
        int r = netpolicy_parse_text(json, strlen(json), "network", &p, err, sizeof err);
        if (r != 1)
                print_message("parse %s: %d %s\n", json, r, err);
        assert_int_equal(r, 1);
        assert_non_null(p);
        return p;
}

/* The exact message, the error and an untouched *ret. */
static void expect_error_field(const char *json, const char *field, int code, const char *msg) {
        char err[NETPOLICY_ERR_MAX] = "";
        struct netpolicy *p = SENTINEL;
        int r = netpolicy_parse_text(json, strlen(json), field, &p, err, sizeof err);
        if (r != code || strcmp(err, msg) != 0)
                print_message("input %s\n  got %d: %s\n want %d: %s\n", json, r, err, code, msg);
        assert_int_equal(r, code);
        assert_string_equal(err, msg);
        assert_ptr_equal(p, SENTINEL);
}

static void expect_error(const char *json, const char *msg) {
        expect_error_field(json, "network", -EINVAL, msg);
}

/* {"mode":"allowlist","allow":[{"host":HOST}]}: the message for the host */
static void expect_host_error(const char *host_json, const char *msg) {
        char json[2048];
        snprintf(json, sizeof json, "{\"mode\":\"allowlist\",\"allow\":[{\"host\":%s}]}", host_json);
        expect_error(json, msg);
}

static void expect_cidr_error(const char *cidr_json, const char *msg) {
        char json[2048];
        snprintf(json, sizeof json, "{\"mode\":\"allowlist\",\"allow\":[{\"cidr\":%s}]}", cidr_json);
        expect_error(json, msg);
}

static void expect_ports_error(const char *ports_json, const char *msg) {
        char json[4096];
        snprintf(json, sizeof json, "{\"mode\":\"allowlist\",\"allow\":[{\"host\":\"a.test\",\"ports\":%s}]}",
                 ports_json);
        expect_error(json, msg);
}

static char *format(const struct netpolicy *p) {
        char *s = NULL;
        assert_int_equal(netpolicy_format(p, &s), 0);
        return s;
}

static struct in6_addr addr(const char *s) {
        struct in6_addr a = {};
        struct in_addr a4;
        if (inet_pton(AF_INET, s, &a4) == 1) {
                a.s6_addr[10] = a.s6_addr[11] = 0xff;
                memcpy(a.s6_addr + 12, &a4, 4);
        } else if (inet_pton(AF_INET6, s, &a) != 1) {
                print_message("bad address in test: %s\n", s);
                fail();
        }
        return a;
}

static void test_modes(void **state) {
        (void) state;
        struct netpolicy *p = SENTINEL;
        char err[NETPOLICY_ERR_MAX];
        /* nothing said: the caller's default applies */
        assert_int_equal(netpolicy_parse_text("{}", 2, "network", &p, err, sizeof err), 0);
        assert_null(p);

        p = parse_ok("{\"mode\":\"allow-all\"}");
        assert_int_equal(netpolicy_mode(p), NETPOLICY_ALLOW_ALL);
        netpolicy_free(p);
        p = parse_ok("{\"mode\":\"deny-all\",\"allow\":[],\"deny\":[]}");
        assert_int_equal(netpolicy_mode(p), NETPOLICY_DENY_ALL);
        netpolicy_free(p);
        /* allow without a mode is an allowlist */
        p = parse_ok("{\"allow\":[{\"host\":\"pypi.org\"}]}");
        assert_int_equal(netpolicy_mode(p), NETPOLICY_ALLOWLIST);
        assert_int_equal(netpolicy_n_allow(p), 1);
        assert_int_equal(netpolicy_n_deny(p), 0);
        netpolicy_free(p);
        p = parse_ok("{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"gist.github.com\"}]}");
        assert_int_equal(netpolicy_n_deny(p), 1);
        netpolicy_free(p);

        expect_error("{\"deny\":[{\"host\":\"gist.github.com\"}]}",
                     "network.mode: is needed with deny rules: \"allow-all\" (everything but them) or "
                     "\"allowlist\" (with allow rules)");
        expect_error("{\"mode\":\"deny-all\",\"deny\":[{\"cidr\":\"198.18.0.0/15\"}]}",
                     "network: mode \"deny-all\" takes no rules (it denies everything); for some destinations "
                     "use \"allowlist\"");
        expect_error("{\"mode\":\"deny-all\",\"allow\":[{\"host\":\"a.test\"}]}",
                     "network: mode \"deny-all\" takes no rules (it denies everything); for some destinations "
                     "use \"allowlist\"");
        expect_error("{\"mode\":\"allow-all\",\"allow\":[{\"host\":\"a.test\"}]}",
                     "network.allow: mode \"allow-all\" takes only deny rules (everything else is allowed); to "
                     "allow only some destinations use \"allowlist\"");
        expect_error("{\"mode\":\"allowlist\"}", "network.allow: mode \"allowlist\" needs at least one allow rule");
        expect_error("{\"allow\":[]}", "network.allow: mode \"allowlist\" needs at least one allow rule");
        expect_error("{\"mode\":\"allowlist\",\"deny\":[{\"host\":\"a.test\"}]}",
                     "network.allow: mode \"allowlist\" needs at least one allow rule");

        enum netpolicy_mode m;
        for (unsigned i = 0; i < _NETPOLICY_MODE_MAX; i++) {
                assert_int_equal(netpolicy_mode_from_string(netpolicy_mode_to_string(i), &m), 0);
                assert_int_equal(m, i);
        }
        assert_null(netpolicy_mode_to_string(_NETPOLICY_MODE_MAX));
        assert_int_equal(netpolicy_mode_from_string("Allow-All", &m), -EINVAL);

        assert_int_equal(netpolicy_new(NETPOLICY_DENY_ALL, &p), 0);
        char *s = format(p);
        assert_string_equal(s, "{\"mode\":\"deny-all\"}");
        free(s);
        netpolicy_free(p);
        p = SENTINEL;
        assert_int_equal(netpolicy_new(NETPOLICY_ALLOWLIST, &p), -EINVAL);
        assert_ptr_equal(p, SENTINEL);
}

static void test_structure_errors(void **state) {
        (void) state;
        expect_error("[]", "network: must be an object with \"mode\", \"allow\" and \"deny\"");
        expect_error("{\"mode\":\"allow-all\",\"egress\":true}",
                     "network: unknown field \"egress\" (accepted: \"mode\", \"allow\", \"deny\")");
        expect_error("{\"Mode\":\"deny-all\"}",
                     "network: unknown field \"Mode\" (accepted: \"mode\", \"allow\", \"deny\")");
        expect_error("{\"mode\":1}", "network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");
        expect_error("{\"mode\":\"allow_all\"}", "network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");
        expect_error("{\"mode\":null}", "network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");
        expect_error("{\"mode\":\"allow-all\",\"allow\":{}}", "network.allow: must be an array of rules");
        expect_error("{\"mode\":\"allow-all\",\"deny\":\"a.test\"}", "network.deny: must be an array of rules");
        expect_error("{\"allow\":[{\"host\":\"a.test\"},\"b.test\"]}",
                     "network.allow[1]: must be an object with \"host\" or \"cidr\", and optionally \"ports\"");
        expect_error("{\"allow\":[{\"host\":\"a.test\"},{\"host\":\"b.test\"},{\"host\":\"c.test\",\"prots\":[1]}]}",
                     "network.allow[2]: unknown field \"prots\" (accepted: \"host\", \"cidr\", \"ports\")");
        expect_error("{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"a.test\",\"methods\":[\"GET\"]}]}",
                     "network.deny[0]: unknown field \"methods\" (accepted: \"host\", \"cidr\", \"ports\")");
        expect_error("{\"allow\":[{\"host\":\"a.test\",\"cidr\":\"198.18.0.0/15\"}]}",
                     "network.allow[0]: has both \"host\" and \"cidr\": a rule names one of them");
        expect_error("{\"allow\":[{\"ports\":[443]}]}",
                     "network.allow[0]: needs \"host\" (a name) or \"cidr\" (an address range)");
        expect_error("{\"allow\":[{}]}", "network.allow[0]: needs \"host\" (a name) or \"cidr\" (an address range)");
        /* a control character in an unknown key is not echoed */
        expect_error("{\"mode\":\"deny-all\",\"x\\ny\":1}",
                     "network: unknown field \"x?y\" (accepted: \"mode\", \"allow\", \"deny\")");

        /* not JSON, trailing bytes, duplicate keys (a second "mode" must not
         * win or lose silently) */
        expect_error("{\"mode\":", "network: not valid JSON: unexpected token near end of file (line 1, column 8)");
        expect_error("{\"mode\":\"deny-all\"} x",
                     "network: not valid JSON: end of file expected near 'x' (line 1, column 21)");
        expect_error("{\"mode\":\"deny-all\",\"mode\":\"allow-all\"}",
                     "network: not valid JSON: duplicate object key near '\"mode\"' (line 1, column 25)");

        /* the caller's field name */
        expect_error_field("{\"mode\":\"x\"}", "tenant.default_network", -EINVAL,
                           "tenant.default_network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");
        expect_error_field("{\"mode\":\"x\"}", NULL, -EINVAL,
                           "network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");

        /* not an object at all, as a json_t */
        char err[NETPOLICY_ERR_MAX];
        struct netpolicy *p = SENTINEL;
        json_t *j = json_string("allow-all");
        assert_int_equal(netpolicy_parse(j, "network", &p, err, sizeof err), -EINVAL);
        assert_string_equal(err, "network: must be an object with \"mode\", \"allow\" and \"deny\"");
        assert_ptr_equal(p, SENTINEL);
        json_decref(j);
        assert_int_equal(netpolicy_parse(NULL, "network", &p, NULL, 0), -EINVAL); /* err may be NULL */
        assert_ptr_equal(p, SENTINEL);
        /* a NUL inside the mode (possible in a json_t) is not "deny-all" */
        j = json_pack("{s:s#}", "mode", "allow-all\0x", (size_t) 11);
        assert_int_equal(netpolicy_parse(j, "network", &p, err, sizeof err), -EINVAL);
        assert_string_equal(err, "network.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"");
        json_decref(j);
}

static void test_host_errors(void **state) {
        (void) state;
        expect_host_error("443", "network.allow[0].host: must be a string, a host name (\"example.com\") or a "
                                 "wildcard on one (\"*.example.com\")");
        expect_host_error("\"\"", "network.allow[0].host: \"\" is empty");
        expect_host_error("\".\"", "network.allow[0].host: \".\" is empty");
        expect_host_error("\"localhost\"",
                          "network.allow[0].host: \"localhost\" has one label: a host name has at least two "
                          "(\"example.com\")");
        expect_host_error("\"a..test\"", "network.allow[0].host: \"a..test\" has an empty label");
        expect_host_error("\".a.test\"", "network.allow[0].host: \".a.test\" has an empty label");
        expect_host_error("\"a.test..\"", "network.allow[0].host: \"a.test..\" has an empty label");
        expect_host_error("\"a_b.test\"", "network.allow[0].host: \"a_b.test\" has a character other than letters, "
                                          "digits, hyphens and dots");
        expect_host_error("\"a b.test\"", "network.allow[0].host: \"a b.test\" has a character other than letters, "
                                          "digits, hyphens and dots");
        expect_host_error("\"a.test:443\"", "network.allow[0].host: \"a.test:443\" has a character other than "
                                            "letters, digits, hyphens and dots");
        expect_host_error("\"https://a.test\"", "network.allow[0].host: \"https://a.test\" has a character other "
                                                "than letters, digits, hyphens and dots");
        expect_host_error("\"-a.test\"", "network.allow[0].host: \"-a.test\" has a label that starts or ends with "
                                         "a hyphen");
        expect_host_error("\"a-.test\"", "network.allow[0].host: \"a-.test\" has a label that starts or ends with "
                                         "a hyphen");
        /* NUL: jansson refuses it in text, a json_t may hold it */
        expect_host_error("\"a.test\\u0000.evil.com\"",
                          "network: not valid JSON: \\u0000 is not allowed without JSON_ALLOW_NUL (line 1, column 60)");
        json_t *j = json_pack("{s:[{s:s#}]}", "allow", "host", "a.test\0.evil.com", (size_t) 16);
        char err[NETPOLICY_ERR_MAX];
        struct netpolicy *np = SENTINEL;
        assert_int_equal(netpolicy_parse(j, NULL, &np, err, sizeof err), -EINVAL);
        assert_string_equal(err, "network.allow[0].host: \"a.test?.evil.com\" contains a NUL byte");
        assert_ptr_equal(np, SENTINEL);
        json_decref(j);
        expect_host_error("\"b\\u00fccher.de\"",
                          "network.allow[0].host: \"b??cher.de\" is not ASCII: write an internationalised name in "
                          "its punycode form (xn--...)");
        expect_host_error("\"a.123\"", "network.allow[0].host: \"a.123\" ends in an all-numeric label: no top-level "
                                       "domain is, so it is an address or a mistake");
        /* IP literals in every spelling */
        const char *ips[] = { "1.2.3.4", "127.1", "0x7f.1", "2130706433", "::1", "[::1]", "2001:db8::1",
                              "198.18.0.1." };
        for (size_t i = 0; i < ARRAY_SIZE(ips); i++) {
                char h[64], msg[256];
                snprintf(h, sizeof h, "\"%s\"", ips[i]);
                snprintf(msg, sizeof msg, "network.allow[0].host: \"%s\" is an IP address: name addresses with "
                                          "\"cidr\"",
                         ips[i]);
                expect_host_error(h, msg);
        }
        /* lengths: labels up to 63, names up to 253 */
        char label[80], json[700], msg[700];
        memset(label, 'a', 64);
        label[64] = '\0';
        snprintf(json, sizeof json, "\"%s.test\"", label);
        snprintf(msg, sizeof msg, "network.allow[0].host: \"%.64s...\" has a label longer than 63 characters", label);
        expect_host_error(json, msg);
        char name[300];
        memset(name, 'a', sizeof name);
        for (size_t i = 63; i < 254; i += 64)
                name[i] = '.';
        name[254] = '\0'; /* 254 chars */
        snprintf(json, sizeof json, "\"%s\"", name);
        snprintf(msg, sizeof msg, "network.allow[0].host: \"%.64s...\" is longer than 253 characters", name);
        expect_host_error(json, msg);

        /* wildcards: only the whole first label, never on a public suffix */
        expect_host_error("\"a.*.test\"", "network.allow[0].host: \"a.*.test\": a wildcard is allowed only as the "
                                          "whole first label (\"*.example.com\" matches the subdomains of "
                                          "example.com)");
        expect_host_error("\"*a.test\"", "network.allow[0].host: \"*a.test\": a wildcard is allowed only as the "
                                         "whole first label (\"*.example.com\" matches the subdomains of "
                                         "example.com)");
        expect_host_error("\"*.*.test\"", "network.allow[0].host: \"*.*.test\": a wildcard is allowed only as the "
                                          "whole first label (\"*.example.com\" matches the subdomains of "
                                          "example.com)");
        expect_host_error("\"*\"", "network.allow[0].host: \"*\": a wildcard is allowed only as the whole first "
                                   "label (\"*.example.com\" matches the subdomains of example.com)");
        expect_host_error("\"*.\"", "network.allow[0].host: \"*.\" is empty");
        expect_host_error("\"*.0.1\"",
                          "network.allow[0].host: \"*.0.1\" is a wildcard on an IP address: name addresses with "
                          "\"cidr\"");
        const char *suffixes[] = { "com", "co.uk", "github.io", "s3.amazonaws.com", "test", "CO.UK." };
        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                char h[64], canon[64];
                snprintf(h, sizeof h, "\"*.%s\"", suffixes[i]);
                assert_int_equal(netpolicy_name_canonical(suffixes[i], strlen(suffixes[i]), canon, sizeof canon) < 0,
                                 strchr(suffixes[i], '.') == NULL);
                if (!strchr(suffixes[i], '.'))
                        strcpy(canon, suffixes[i]);
                snprintf(msg, sizeof msg,
                         "network.allow[0].host: \"*.%s\" is a wildcard on the public suffix \"%s\", under which "
                         "anyone can register names: allow the domains themselves",
                         suffixes[i], canon);
                expect_host_error(h, msg);
        }
        /* ... but the suffix itself, and wildcards below a registrable name, are fine */
        struct netpolicy *p = parse_ok("{\"allow\":[{\"host\":\"github.io\"},{\"host\":\"*.octocat.github.io\"},"
                                       "{\"host\":\"*.example.co.uk\"},{\"host\":\"*.a.test\"}]}");
        netpolicy_free(p);
        /* a wildcard over 253 characters in all */
        memset(name, 'a', sizeof name);
        for (size_t i = 63; i < 252; i += 64)
                name[i] = '.';
        name[252] = '\0'; /* a 252-char base: valid alone, 254 with "*." */
        snprintf(json, sizeof json, "\"*.%s\"", name);
        snprintf(msg, sizeof msg, "network.allow[0].host: \"*.%.62s...\" is longer than 253 characters", name);
        expect_host_error(json, msg);
}

static void test_cidr_errors(void **state) {
        (void) state;
        expect_cidr_error("[\"10.0.0.0/8\"]", "network.allow[0].cidr: must be a string, \"a.b.c.d/n\" or \"x::/n\"");
        static const char accepted[] = "a range is a.b.c.d/n (n 0..32), an IPv6 x::/n (n 0..128) or one address";
        const char *bad[] = { "", "300.1.1.1/8", "010.0.0.0/8", "10.0.0/8", "10.1", "a.b.c.d/8", "2001:db8::g/32",
                              " 10.0.0.0/8", "0x0a.0.0.0/8",
                              "12345678901234567890123456789012345678901234567890123456789" };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                char j[128], msg[256];
                snprintf(j, sizeof j, "\"%s\"", bad[i]);
                snprintf(msg, sizeof msg, "network.allow[0].cidr: \"%s\" is not an address range: %s", bad[i],
                         accepted);
                expect_cidr_error(j, msg);
        }
        const char *bad_prefix[][2] = {
                { "10.0.0.0/33", "32" }, { "10.0.0.0/08", "32" }, { "10.0.0.0/", "32" },   { "10.0.0.0/-1", "32" },
                { "::/129", "128" },     { "::/+1", "128" },      { "10.0.0.0/1x", "32" }, { "10.0.0.0/1000", "32" },
                { "10.0.0.0/8/8", "32" }, { "2001:db8::/32 ", "128" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad_prefix); i++) {
                char j[128], msg[256];
                snprintf(j, sizeof j, "\"%s\"", bad_prefix[i][0]);
                snprintf(msg, sizeof msg, "network.allow[0].cidr: \"%s\": the prefix length must be a number from 0 "
                                          "to %s",
                         bad_prefix[i][0], bad_prefix[i][1]);
                expect_cidr_error(j, msg);
        }
        expect_cidr_error("\"203.0.113.7/24\"",
                          "network.allow[0].cidr: \"203.0.113.7/24\" has host bits set: the range is 203.0.113.0/24");
        expect_cidr_error("\"10.1.2.3/12\"",
                          "network.allow[0].cidr: \"10.1.2.3/12\" has host bits set: the range is 10.0.0.0/12");
        expect_cidr_error("\"2001:db8::1/32\"",
                          "network.allow[0].cidr: \"2001:db8::1/32\" has host bits set: the range is 2001:db8::/32");
        expect_cidr_error("\"::ffff:10.0.0.0/104\"", "network.allow[0].cidr: \"::ffff:10.0.0.0/104\" is "
                                                     "IPv4-mapped IPv6: write IPv4 ranges as a.b.c.d/n");
        expect_cidr_error("\"::ffff:198.18.0.1\"", "network.allow[0].cidr: \"::ffff:198.18.0.1\" is IPv4-mapped "
                                                   "IPv6: write IPv4 ranges as a.b.c.d/n");
}

static void test_ports_errors(void **state) {
        (void) state;
        static const char shape[] = "network.allow[0].ports: must be an array of 1 to 32 distinct port numbers "
                                    "(1-65535)";
        expect_ports_error("443", shape);
        expect_ports_error("[]", shape);
        expect_ports_error("\"443\"", shape);
        char many[512], json[1024];
        for (int n = 32; n <= 33; n++) {
                size_t off = (size_t) snprintf(many, sizeof many, "[");
                for (int i = 1; i <= n; i++)
                        off += (size_t) snprintf(many + off, sizeof many - off, "%s%d", i > 1 ? "," : "", i);
                snprintf(many + off, sizeof many - off, "]");
                if (n == 33) {
                        expect_ports_error(many, shape);
                        break;
                }
                snprintf(json, sizeof json, "{\"allow\":[{\"host\":\"a.test\",\"ports\":%s}]}", many);
                netpolicy_free(parse_ok(json));
        }

        expect_ports_error("[443,0]", "network.allow[0].ports[1]: must be an integer from 1 to 65535");
        expect_ports_error("[65536]", "network.allow[0].ports[0]: must be an integer from 1 to 65535");
        expect_ports_error("[-443]", "network.allow[0].ports[0]: must be an integer from 1 to 65535");
        expect_ports_error("[443.0]", "network.allow[0].ports[0]: must be an integer from 1 to 65535");
        expect_ports_error("[\"443\"]", "network.allow[0].ports[0]: must be an integer from 1 to 65535");
        expect_ports_error("[true]", "network.allow[0].ports[0]: must be an integer from 1 to 65535");
        expect_ports_error("[99999999999999999999]",
                           "network: not valid JSON: too big integer near '99999999999999999999' (line 1, "
                           "column 75)");
        expect_ports_error("[443,80,443]", "network.allow[0].ports: port 443 is listed twice");
        expect_error("{\"mode\":\"allow-all\",\"deny\":[{\"cidr\":\"198.18.0.0/15\",\"ports\":[22,22]}]}",
                     "network.deny[0].ports: port 22 is listed twice");
}

static void test_limits(void **state) {
        (void) state;
        /* 256 rules of each kind are fine, 257 are not */
        size_t size = 300 * 40 + 256;
        char *json = malloc(size);
        assert_non_null(json);
        for (int n = 256; n <= 257; n++) {
                size_t off = (size_t) snprintf(json, size, "{\"mode\":\"allow-all\",\"deny\":[");
                for (int i = 0; i < n; i++)
                        off += (size_t) snprintf(json + off, size - off, "%s{\"host\":\"h%d.test\"}", i ? "," : "", i);
                snprintf(json + off, size - off, "]}");
                if (n == 256) {
                        struct netpolicy *p = parse_ok(json);
                        assert_int_equal(netpolicy_n_deny(p), 256);
                        netpolicy_free(p);
                } else
                        expect_error(json, "network.deny: has 257 rules, at most 256");
                /* the same as allow rules */
                off = (size_t) snprintf(json, size, "{\"allow\":[");
                for (int i = 0; i < n; i++)
                        off += (size_t) snprintf(json + off, size - off, "%s{\"host\":\"h%d.test\"}", i ? "," : "", i);
                snprintf(json + off, size - off, "]}");
                if (n == 256)
                        netpolicy_free(parse_ok(json));
                else
                        expect_error(json, "network.allow: has 257 rules, at most 256");
        }
        free(json);

        /* 64 KiB of JSON: as text (whitespace counts: it is what was sent) */
        char *big = malloc(NETPOLICY_JSON_MAX + 2);
        assert_non_null(big);
        memset(big, ' ', NETPOLICY_JSON_MAX + 1);
        big[NETPOLICY_JSON_MAX + 1] = '\0';
        memcpy(big, "{\"mode\":\"deny-all\"}", 19);
        struct netpolicy *p = SENTINEL;
        assert_int_equal(netpolicy_parse_text(big, NETPOLICY_JSON_MAX, NULL, &p, NULL, 0), 1);
        assert_int_equal(netpolicy_mode(p), NETPOLICY_DENY_ALL);
        netpolicy_free(p);
        expect_error_field(big, "network", -EFBIG, "network: the policy is 65537 bytes of JSON, at most 65536");
        free(big);

        /* ... and as a json_t: 256 valid deny rules of long names */
        json_t *deny = json_array();
        char name[260];
        memset(name, 'a', sizeof name);
        for (size_t i = 63; i < 253; i += 64)
                name[i] = '.';
        name[253] = '\0';
        for (int i = 0; i < 256; i++)
                assert_int_equal(json_array_append_new(deny, json_pack("{s:s}", "host", name)), 0);
        json_t *j = json_pack("{s:s,s:o}", "mode", "allow-all", "deny", deny);
        size_t n = json_dumpb(j, NULL, 0, JSON_COMPACT);
        assert_true(n > NETPOLICY_JSON_MAX);
        char err[NETPOLICY_ERR_MAX], want[NETPOLICY_ERR_MAX];
        p = SENTINEL;
        assert_int_equal(netpolicy_parse(j, "network", &p, err, sizeof err), -EFBIG);
        snprintf(want, sizeof want, "network: the policy is %zu bytes of JSON, at most 65536", n);
        assert_string_equal(err, want);
        assert_ptr_equal(p, SENTINEL);
        /* under the limit with a few rules fewer */
        while (json_dumpb(j, NULL, 0, JSON_COMPACT) > NETPOLICY_JSON_MAX)
                assert_int_equal(json_array_remove(deny, 0), 0);
        assert_int_equal(netpolicy_parse(j, "network", &p, err, sizeof err), 1);
        assert_int_equal(netpolicy_n_deny(p), json_array_size(deny));
        netpolicy_free(p);
        json_decref(j);
}


static void round_trip(const char *in, const char *canonical) {
        struct netpolicy *p = parse_ok(in);
        char *t = format(p);
        if (strcmp(t, canonical) != 0)
                print_message("input %s\n  got %s\n want %s\n", in, t, canonical);
        assert_string_equal(t, canonical);
        struct netpolicy *q = parse_ok(t);
        assert_true(netpolicy_equal(p, q));
        char *t2 = format(q);
        assert_string_equal(t, t2);
        json_t *j = NULL;
        assert_int_equal(netpolicy_to_json(p, &j), 0);
        char *t3 = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        assert_string_equal(t, t3);
        json_decref(j);
        free(t);
        free(t2);
        free(t3);
        netpolicy_free(p);
        netpolicy_free(q);
}

static void test_format(void **state) {
        (void) state;
        /* the example, spelled loosely */
        round_trip("{\"mode\": \"allowlist\",\n"
                   " \"allow\": [{\"host\": \"PyPI.org.\"}, {\"host\": \"*.PythonHosted.org\", \"ports\": [443]},\n"
                   "           {\"cidr\": \"203.0.113.0/24\", \"ports\": [5432]}],\n"
                   " \"deny\":  [{\"host\": \"gist.github.com\"}, {\"cidr\": \"198.51.100.0/24\"}]}",
                   "{\"allow\":[{\"host\":\"pypi.org\",\"ports\":[80,443]},{\"host\":\"*.pythonhosted.org\","
                   "\"ports\":[443]},{\"cidr\":\"203.0.113.0/24\",\"ports\":[5432]}],\"deny\":[{\"host\":"
                   "\"gist.github.com\"},{\"cidr\":\"198.51.100.0/24\"}],\"mode\":\"allowlist\"}");
        /* ports sorted; bare addresses get their full prefix; IPv6 as inet_ntop writes it */
        round_trip("{\"allow\":[{\"ports\":[8443,22,443],\"host\":\"a.test\"},{\"cidr\":\"198.18.0.1\"},"
                   "{\"cidr\":\"2001:DB8:0:0:0::/32\",\"ports\":[443]},{\"cidr\":\"2001:0db8::1\"},"
                   "{\"cidr\":\"0.0.0.0/0\"},{\"cidr\":\"::/0\"}]}",
                   "{\"allow\":[{\"host\":\"a.test\",\"ports\":[22,443,8443]},{\"cidr\":\"198.18.0.1/32\"},"
                   "{\"cidr\":\"2001:db8::/32\",\"ports\":[443]},{\"cidr\":\"2001:db8::1/128\"},"
                   "{\"cidr\":\"0.0.0.0/0\"},{\"cidr\":\"::/0\"}],\"mode\":\"allowlist\"}");
        round_trip("{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"gist.github.com\",\"ports\":[443]},"
                   "{\"host\":\"*.evil.test\"}]}",
                   "{\"deny\":[{\"host\":\"gist.github.com\",\"ports\":[443]},{\"host\":\"*.evil.test\"}],"
                   "\"mode\":\"allow-all\"}");
        round_trip("{\"mode\":\"allow-all\",\"deny\":[]}", "{\"mode\":\"allow-all\"}");
        round_trip("{\"mode\":\"deny-all\"}", "{\"mode\":\"deny-all\"}");
        round_trip("{\"allow\":[{\"host\":\"xn--bcher-kva.de\"}]}",
                   "{\"allow\":[{\"host\":\"xn--bcher-kva.de\",\"ports\":[80,443]}],\"mode\":\"allowlist\"}");

        /* equality sees every difference */
        const char *variants[] = {
                "{\"allow\":[{\"host\":\"a.test\"}]}",
                "{\"allow\":[{\"host\":\"*.a.test\"}]}",
                "{\"allow\":[{\"host\":\"b.test\"}]}",
                "{\"allow\":[{\"host\":\"a.test\",\"ports\":[443]}]}",
                "{\"allow\":[{\"host\":\"a.test\",\"ports\":[80,443,8080]}]}",
                "{\"allow\":[{\"host\":\"a.test\"},{\"host\":\"a.test\"}]}",
                "{\"allow\":[{\"cidr\":\"198.18.0.0/15\"}]}",
                "{\"allow\":[{\"cidr\":\"198.18.0.0/16\"}]}",
                "{\"allow\":[{\"cidr\":\"198.18.0.0/15\",\"ports\":[443]}]}",
                "{\"allow\":[{\"host\":\"a.test\"}],\"deny\":[{\"host\":\"b.a.test\"}]}",
                "{\"mode\":\"allow-all\"}",
                "{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"a.test\"}]}",
                "{\"mode\":\"deny-all\"}",
        };
        for (size_t i = 0; i < ARRAY_SIZE(variants); i++)
                for (size_t k = 0; k < ARRAY_SIZE(variants); k++) {
                        struct netpolicy *a = parse_ok(variants[i]), *b = parse_ok(variants[k]);
                        assert_int_equal(netpolicy_equal(a, b), i == k);
                        netpolicy_free(a);
                        netpolicy_free(b);
                }
        assert_true(netpolicy_equal(NULL, NULL));
        char *s = NULL;
        assert_int_equal(netpolicy_format(NULL, &s), -EINVAL);
        assert_null(s);
}

/* name, port -> allowed, reason, rule */
struct name_case {
        const char *name;
        uint16_t port;
        bool allow;
        enum netpolicy_reason reason;
        int rule;
};

static void check_names(const char *policy, const struct name_case *cases, size_t n) {
        struct netpolicy *p = parse_ok(policy);
        for (size_t i = 0; i < n; i++) {
                struct netpolicy_decision d = { .rule = 99 };
                bool a = netpolicy_check_name(p, cases[i].name, cases[i].port, &d);
                if (a != cases[i].allow || d.reason != cases[i].reason || d.rule != cases[i].rule)
                        print_message("%s: %s:%u: got %d %s [%d]\n", policy, cases[i].name, cases[i].port, a,
                                      netpolicy_reason_to_string(d.reason), d.rule);
                assert_int_equal(a, cases[i].allow);
                assert_int_equal(d.allow, cases[i].allow);
                assert_int_equal(d.reason, cases[i].reason);
                assert_int_equal(d.rule, cases[i].rule);
                assert_int_equal(netpolicy_check_name(p, cases[i].name, cases[i].port, NULL), cases[i].allow);
        }
        netpolicy_free(p);
}

#define ALLOWED(r) true, NETPOLICY_REASON_ALLOW_RULE, r
#define DENIED(r) false, NETPOLICY_REASON_DENY_RULE, r
#define NOMATCH false, NETPOLICY_REASON_NO_MATCH, -1

static void test_match_names(void **state) {
        (void) state;
        static const struct name_case allowlist[] = {
                /* exact, any case, one trailing dot, default ports 80 and 443 */
                { "pypi.org", 443, ALLOWED(0) },
                { "PyPI.ORG.", 80, ALLOWED(0) },
                { "pypi.org", 8080, NOMATCH },
                { "pypi.org", 0, ALLOWED(0) },
                { "www.pypi.org", 443, NOMATCH },
                { "pypi.org.evil.test", 443, NOMATCH },
                { "xpypi.org", 443, NOMATCH },
                { "pypi.org..", 443, false, NETPOLICY_REASON_BAD_NAME, -1 },
                /* wildcard: strict subdomains at any depth, on its ports only */
                { "files.pythonhosted.org", 443, ALLOWED(1) },
                { "a.b.c.pythonhosted.org", 443, ALLOWED(1) },
                { "pythonhosted.org", 443, NOMATCH },
                { "files.pythonhosted.org", 80, NOMATCH },
                { "xpythonhosted.org", 443, NOMATCH },
                { "files.pythonhosted.org.evil.test", 443, NOMATCH },
                /* deny beats allow, on its ports (here every port) */
                { "github.com", 443, ALLOWED(2) },
                { "api.github.com", 443, ALLOWED(3) },
                { "gist.github.com", 443, DENIED(0) },
                { "GIST.github.com.", 80, DENIED(0) },
                { "gist.github.com", 0, DENIED(0) },
                { "x.gist.github.com", 443, ALLOWED(3) },
                /* a deny on some ports: others stay allowed, and for "any port"
                 * the name is allowed only while some port is */
                { "ssh.dev.test", 22, DENIED(1) },
                { "ssh.dev.test", 443, ALLOWED(4) },
                { "ssh.dev.test", 0, ALLOWED(4) },
                { "web.dev.test", 80, DENIED(2) },
                { "web.dev.test", 443, DENIED(3) },
                { "web.dev.test", 0, DENIED(2) },
                /* cidr rules never match names, nor names IP literals */
                { "203.0.113.5", 5432, false, NETPOLICY_REASON_IP_LITERAL, -1 },
                { "[::1]", 443, false, NETPOLICY_REASON_IP_LITERAL, -1 },
                { "localhost", 443, false, NETPOLICY_REASON_BAD_NAME, -1 },
                { "a.test\tb", 443, false, NETPOLICY_REASON_BAD_NAME, -1 },
                { "", 443, false, NETPOLICY_REASON_BAD_NAME, -1 },
        };
        check_names("{\"mode\":\"allowlist\",\"allow\":[{\"host\":\"pypi.org\"},"
                    "{\"host\":\"*.pythonhosted.org\",\"ports\":[443]},{\"host\":\"github.com\"},"
                    "{\"host\":\"*.github.com\"},{\"host\":\"*.dev.test\",\"ports\":[22,443,80]},"
                    "{\"cidr\":\"203.0.113.0/24\",\"ports\":[5432]}],"
                    "\"deny\":[{\"host\":\"gist.github.com\"},{\"host\":\"ssh.dev.test\",\"ports\":[22]},"
                    "{\"host\":\"web.dev.test\",\"ports\":[80,22]},{\"host\":\"web.dev.test\",\"ports\":[443]},"
                    "{\"cidr\":\"198.51.100.0/24\"}]}",
                    allowlist, ARRAY_SIZE(allowlist));

        static const struct name_case allow_all[] = {
                { "example.org", 443, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "example.org", 0, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "gist.github.com", 443, DENIED(0) },
                { "gist.github.com", 0, DENIED(0) },
                { "x.evil.test", 8080, DENIED(1) },
                { "evil.test", 8080, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                /* a deny on some ports leaves the name resolvable for the rest */
                { "mail.test", 25, DENIED(2) },
                { "mail.test", 443, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "mail.test", 0, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "1.2.3.4", 443, false, NETPOLICY_REASON_IP_LITERAL, -1 },
        };
        check_names("{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"gist.github.com\"},{\"host\":\"*.evil.test\"},"
                    "{\"host\":\"mail.test\",\"ports\":[25]}]}",
                    allow_all, ARRAY_SIZE(allow_all));

        static const struct name_case deny_all[] = {
                { "pypi.org", 443, false, NETPOLICY_REASON_MODE_DENY_ALL, -1 },
                { "pypi.org", 0, false, NETPOLICY_REASON_MODE_DENY_ALL, -1 },
        };
        check_names("{\"mode\":\"deny-all\"}", deny_all, ARRAY_SIZE(deny_all));

        /* an allowlist of addresses alone answers no name */
        static const struct name_case cidr_only[] = {
                { "pypi.org", 0, NOMATCH },
        };
        check_names("{\"allow\":[{\"cidr\":\"198.18.0.0/15\"}]}", cidr_only, ARRAY_SIZE(cidr_only));

        struct netpolicy_decision d;
        assert_false(netpolicy_check_name(NULL, "pypi.org", 443, &d));
        assert_int_equal(d.reason, NETPOLICY_REASON_NO_POLICY);
        struct netpolicy *p = parse_ok("{\"mode\":\"allow-all\"}");
        assert_false(netpolicy_check_name(p, NULL, 443, &d));
        assert_int_equal(d.reason, NETPOLICY_REASON_BAD_NAME);
        /* a name longer than any may be is refused, not cut to size */
        char name[600];
        memset(name, 'a', sizeof name);
        for (size_t i = 50; i < sizeof name; i += 51)
                name[i] = '.';
        name[sizeof name - 1] = '\0';
        assert_false(netpolicy_check_name(p, name, 443, &d));
        assert_int_equal(d.reason, NETPOLICY_REASON_BAD_NAME);
        name[254] = '\0';
        assert_false(netpolicy_check_name(p, name, 443, &d));
        name[253] = '\0';
        assert_true(netpolicy_check_name(p, name, 443, &d));
        netpolicy_free(p);
}

struct addr_case {
        const char *addr;
        uint16_t port;
        bool allow;
        enum netpolicy_reason reason;
        int rule;
};

static void check_addrs(const char *policy, const struct netpolicy_platform *pl, const struct addr_case *cases,
                        size_t n) {
        struct netpolicy *p = policy ? parse_ok(policy) : NULL;
        for (size_t i = 0; i < n; i++) {
                struct in6_addr a = addr(cases[i].addr);
                struct netpolicy_decision d = { .rule = 99 };
                bool r = netpolicy_check_addr(p, pl, &a, cases[i].port, &d);
                if (r != cases[i].allow || d.reason != cases[i].reason || d.rule != cases[i].rule)
                        print_message("%s: %s port %u: got %d %s [%d]\n", policy, cases[i].addr, cases[i].port, r,
                                      netpolicy_reason_to_string(d.reason), d.rule);
                assert_int_equal(r, cases[i].allow);
                assert_int_equal(d.allow, cases[i].allow);
                assert_int_equal(d.reason, cases[i].reason);
                assert_int_equal(d.rule, cases[i].rule);
        }
        netpolicy_free(p);
}

static void test_match_addrs(void **state) {
        (void) state;
        static const struct addr_case allowlist[] = {
                { "198.18.5.1", 5432, ALLOWED(1) },
                { "198.18.5.1", 443, NOMATCH },
                { "198.18.5.1", 0, ALLOWED(1) },
                { "::ffff:198.18.5.1", 5432, ALLOWED(1) },
                { "198.19.0.1", 22, ALLOWED(2) },
                { "198.19.0.1", 65535, ALLOWED(2) },
                { "198.19.1.1", 22, DENIED(0) },
                { "198.19.1.1", 0, DENIED(0) },
                { "8.8.8.8", 443, NOMATCH },
                { "2606:4700::1", 443, ALLOWED(3) },
                { "2606:4700::1", 80, NOMATCH },
                { "2606:4701::1", 443, NOMATCH },
                /* host rules never decide addresses */
                { "198.20.0.1", 443, NOMATCH },
                /* a deny rule also sees the IPv4 inside 6to4, NAT64 and Teredo ... */
                { "2002:c613:0101::1", 443, DENIED(0) },
                { "64:ff9b::c613:101", 443, DENIED(0) },
                { "2001:0:c613:101::f7f7:f7f7", 443, DENIED(0) },
                /* ... an allow rule only the address itself */
                { "2002:c612:501::1", 5432, NOMATCH },
                { "64:ff9b::c612:501", 5432, NOMATCH },
        };
        check_addrs("{\"allow\":[{\"host\":\"a.test\"},{\"cidr\":\"198.18.5.0/24\",\"ports\":[5432]},"
                    "{\"cidr\":\"198.19.0.0/16\"},{\"cidr\":\"2606:4700::/32\",\"ports\":[443]}],"
                    "\"deny\":[{\"cidr\":\"198.19.1.0/24\"},{\"host\":\"b.test\"}]}",
                    NULL, allowlist, ARRAY_SIZE(allowlist));

        /* families never mix: ::/0 holds no IPv4, 0.0.0.0/0 no IPv6 */
        static const struct addr_case families[] = {
                { "198.18.0.1", 443, NOMATCH },
                { "2606:4700::1", 443, ALLOWED(0) },
        };
        check_addrs("{\"allow\":[{\"cidr\":\"::/0\"}]}", NULL, families, ARRAY_SIZE(families));
        static const struct addr_case families4[] = {
                { "198.18.0.1", 443, ALLOWED(0) },
                { "2606:4700::1", 443, NOMATCH },
        };
        check_addrs("{\"allow\":[{\"cidr\":\"0.0.0.0/0\"}]}", NULL, families4, ARRAY_SIZE(families4));

        static const struct addr_case allow_all[] = {
                { "8.8.8.8", 22, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "198.18.0.1", 0, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "198.18.9.9", 443, DENIED(0) },
                { "198.18.8.1", 25, DENIED(1) },
                { "198.18.8.1", 443, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                { "198.18.8.1", 0, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 },
                /* the platform deny set first, whatever the mode */
                { "127.0.0.1", 80, false, NETPOLICY_REASON_LOOPBACK, -1 },
                { "169.254.169.254", 80, false, NETPOLICY_REASON_METADATA, -1 },
                { "10.0.0.1", 80, false, NETPOLICY_REASON_PRIVATE, -1 },
                { "::ffff:127.0.0.1", 80, false, NETPOLICY_REASON_LOOPBACK, -1 },
        };
        check_addrs("{\"mode\":\"allow-all\",\"deny\":[{\"cidr\":\"198.18.9.0/24\"},"
                    "{\"cidr\":\"198.18.8.0/24\",\"ports\":[25]}]}",
                    NULL, allow_all, ARRAY_SIZE(allow_all));

        /* an allow rule on a platform range cannot lift it: only the operator can */
        static const struct addr_case lifted[] = {
                { "10.1.2.3", 80, false, NETPOLICY_REASON_PRIVATE, -1 },
                { "203.0.113.9", 5432, false, NETPOLICY_REASON_DOCUMENTATION, -1 },
        };
        check_addrs("{\"allow\":[{\"cidr\":\"10.0.0.0/8\"},{\"cidr\":\"203.0.113.0/24\",\"ports\":[5432]}]}", NULL,
                    lifted, ARRAY_SIZE(lifted));
        struct netpolicy_platform pl;
        char err[NETPOLICY_ERR_MAX];
        assert_int_equal(netpolicy_platform_parse("203.0.113.0/24", &pl, err, sizeof err), 0);
        static const struct addr_case opened[] = {
                { "10.1.2.3", 80, false, NETPOLICY_REASON_PRIVATE, -1 },
                { "203.0.113.9", 5432, ALLOWED(1) },
                { "203.0.113.9", 5433, NOMATCH },
        };
        check_addrs("{\"allow\":[{\"cidr\":\"10.0.0.0/8\"},{\"cidr\":\"203.0.113.0/24\",\"ports\":[5432]}]}", &pl,
                    opened, ARRAY_SIZE(opened));

        static const struct addr_case deny_all[] = {
                { "8.8.8.8", 443, false, NETPOLICY_REASON_MODE_DENY_ALL, -1 },
                { "127.0.0.1", 443, false, NETPOLICY_REASON_LOOPBACK, -1 },
        };
        check_addrs("{\"mode\":\"deny-all\"}", NULL, deny_all, ARRAY_SIZE(deny_all));
        static const struct addr_case no_policy[] = {
                { "8.8.8.8", 443, false, NETPOLICY_REASON_NO_POLICY, -1 },
                { "127.0.0.1", 443, false, NETPOLICY_REASON_LOOPBACK, -1 },
        };
        check_addrs(NULL, NULL, no_policy, ARRAY_SIZE(no_policy));
        struct netpolicy_decision d;
        struct netpolicy *p = parse_ok("{\"mode\":\"allow-all\"}");
        assert_false(netpolicy_check_addr(p, NULL, NULL, 443, &d));
        netpolicy_free(p);
}

/* address -> denied with reason, or allowed (reason -1) */
struct platform_case {
        const char *addr;
        int reason;
};

static void check_platform(const struct netpolicy_platform *pl, const struct platform_case *cases, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct in6_addr a = addr(cases[i].addr);
                enum netpolicy_reason r = _NETPOLICY_REASON_MAX;
                bool denied = netpolicy_platform_denied(pl, &a, &r);
                bool want = cases[i].reason >= 0;
                if (denied != want || (want && (int) r != cases[i].reason))
                        print_message("%s: got %s %s\n", cases[i].addr, denied ? "denied" : "allowed",
                                      denied ? netpolicy_reason_to_string(r) : "");
                assert_int_equal(denied, want);
                if (want) {
                        assert_int_equal(r, cases[i].reason);
                        assert_true(netpolicy_reason_is_platform(r));
                } else
                        assert_int_equal(r, _NETPOLICY_REASON_MAX); /* untouched */
        }
}

static void test_platform(void **state) {
        (void) state;
        static const struct platform_case cases[] = {
                /* every listed range, at both ends, and its neighbours */
                { "0.0.0.0", NETPOLICY_REASON_THIS_NETWORK },
                { "0.255.255.255", NETPOLICY_REASON_THIS_NETWORK },
                { "1.0.0.0", -1 },
                { "9.255.255.255", -1 },
                { "10.0.0.0", NETPOLICY_REASON_PRIVATE },
                { "10.255.255.255", NETPOLICY_REASON_PRIVATE },
                { "11.0.0.0", -1 },
                { "100.63.255.255", -1 },
                { "100.64.0.0", NETPOLICY_REASON_SHARED },
                { "100.127.255.255", NETPOLICY_REASON_SHARED },
                { "100.128.0.0", -1 },
                { "100.100.100.200", NETPOLICY_REASON_METADATA },
                { "126.255.255.255", -1 },
                { "127.0.0.1", NETPOLICY_REASON_LOOPBACK },
                { "127.255.255.255", NETPOLICY_REASON_LOOPBACK },
                { "128.0.0.0", -1 },
                { "169.253.255.255", -1 },
                { "169.254.0.1", NETPOLICY_REASON_LINK_LOCAL },
                { "169.254.169.254", NETPOLICY_REASON_METADATA },
                { "169.254.255.255", NETPOLICY_REASON_LINK_LOCAL },
                { "169.255.0.0", -1 },
                { "168.63.129.16", NETPOLICY_REASON_METADATA },
                { "168.63.129.17", -1 },
                { "172.15.255.255", -1 },
                { "172.16.0.0", NETPOLICY_REASON_PRIVATE },
                { "172.31.255.255", NETPOLICY_REASON_PRIVATE },
                { "172.32.0.0", -1 },
                { "191.255.255.255", -1 },
                { "192.0.0.0", NETPOLICY_REASON_IETF },
                { "192.0.0.255", NETPOLICY_REASON_IETF },
                { "192.0.1.0", -1 },
                { "192.0.2.0", NETPOLICY_REASON_DOCUMENTATION },
                { "192.0.2.255", NETPOLICY_REASON_DOCUMENTATION },
                { "192.0.3.0", -1 },
                { "192.167.255.255", -1 },
                { "192.168.0.0", NETPOLICY_REASON_PRIVATE },
                { "192.168.255.255", NETPOLICY_REASON_PRIVATE },
                { "192.169.0.0", -1 },
                { "198.17.255.255", -1 },
                { "198.18.0.0", -1 }, /* benchmarking: the tests' internet */
                { "198.19.255.255", -1 },
                { "198.51.99.255", -1 },
                { "198.51.100.0", NETPOLICY_REASON_DOCUMENTATION },
                { "198.51.100.255", NETPOLICY_REASON_DOCUMENTATION },
                { "198.51.101.0", -1 },
                { "203.0.112.255", -1 },
                { "203.0.113.0", NETPOLICY_REASON_DOCUMENTATION },
                { "203.0.113.255", NETPOLICY_REASON_DOCUMENTATION },
                { "203.0.114.0", -1 },
                { "223.255.255.255", -1 },
                { "224.0.0.0", NETPOLICY_REASON_MULTICAST },
                { "239.255.255.255", NETPOLICY_REASON_MULTICAST },
                { "240.0.0.0", NETPOLICY_REASON_RESERVED },
                { "255.255.255.254", NETPOLICY_REASON_RESERVED },
                { "255.255.255.255", NETPOLICY_REASON_BROADCAST },
                { "8.8.8.8", -1 },
                /* IPv6 */
                { "::", NETPOLICY_REASON_UNSPECIFIED },
                { "::1", NETPOLICY_REASON_LOOPBACK },
                { "::2", NETPOLICY_REASON_THIS_NETWORK }, /* IPv4-compatible 0.0.0.2 */
                { "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", -1 },
                { "fc00::", NETPOLICY_REASON_UNIQUE_LOCAL },
                { "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NETPOLICY_REASON_UNIQUE_LOCAL },
                { "fd00:ec2::254", NETPOLICY_REASON_METADATA },
                { "fd00:ec2::253", NETPOLICY_REASON_UNIQUE_LOCAL },
                { "fe00::", -1 },
                { "fe80::", NETPOLICY_REASON_LINK_LOCAL },
                { "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NETPOLICY_REASON_LINK_LOCAL },
                { "fec0::1", NETPOLICY_REASON_SITE_LOCAL },
                { "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NETPOLICY_REASON_SITE_LOCAL },
                { "ff00::", NETPOLICY_REASON_MULTICAST },
                { "ff02::1", NETPOLICY_REASON_MULTICAST },
                { "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NETPOLICY_REASON_MULTICAST },
                { "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", -1 },
                { "2001:db8::", NETPOLICY_REASON_DOCUMENTATION },
                { "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", NETPOLICY_REASON_DOCUMENTATION },
                { "2001:db9::", -1 },
                { "3fff::1", NETPOLICY_REASON_DOCUMENTATION },
                { "3fff:fff::", NETPOLICY_REASON_DOCUMENTATION },
                { "3fff:1000::", -1 },
                { "100::", NETPOLICY_REASON_DISCARD },
                { "100::ffff:ffff:ffff:ffff", NETPOLICY_REASON_DISCARD },
                { "100:0:0:1::", -1 },
                { "2606:4700:4700::1111", -1 },
                /* forms embedding IPv4, judged by it */
                { "::ffff:127.0.0.1", NETPOLICY_REASON_LOOPBACK }, /* mapped: IPv4 itself */
                { "::ffff:169.254.169.254", NETPOLICY_REASON_METADATA },
                { "::ffff:8.8.8.8", -1 },
                { "::127.0.0.1", NETPOLICY_REASON_LOOPBACK }, /* compatible */
                { "::10.0.0.1", NETPOLICY_REASON_PRIVATE },
                { "::8.8.8.8", -1 },
                { "64:ff9b::7f00:1", NETPOLICY_REASON_LOOPBACK }, /* NAT64 */
                { "64:ff9b::a9fe:a9fe", NETPOLICY_REASON_METADATA },
                { "64:ff9b::c0a8:101", NETPOLICY_REASON_PRIVATE },
                { "64:ff9b::808:808", -1 },
                /* local-use NAT64, in each layout (48, 56, 64, 96) */
                { "64:ff9b:1:7f00:0:100::", NETPOLICY_REASON_LOOPBACK },
                /* 10.1.2.3 in one layout, public addresses in the other three */
                { "64:ff9b:1:a01:2:308:808:808", NETPOLICY_REASON_PRIVATE },
                { "64:ff9b:1:80a:1:203:808:808", NETPOLICY_REASON_PRIVATE },
                { "64:ff9b:1:808:a:102:308:808", NETPOLICY_REASON_PRIVATE },
                { "64:ff9b:1:808:8:808:a01:203", NETPOLICY_REASON_PRIVATE },
                /* ... where every layout must read a public address */
                { "64:ff9b:1:808:8:808:808:808", -1 },
                { "64:ff9b:1::808:808", NETPOLICY_REASON_THIS_NETWORK },
                { "2002:7f00:1::", NETPOLICY_REASON_LOOPBACK }, /* 6to4 */
                { "2002:7f00:1:ffff::1", NETPOLICY_REASON_LOOPBACK },
                { "2002:a9fe:a9fe::1", NETPOLICY_REASON_METADATA },
                { "2002:c0a8:101::", NETPOLICY_REASON_PRIVATE },
                { "2002:808:808::1", -1 },
                { "2001:0:7f00:1::", NETPOLICY_REASON_LOOPBACK }, /* Teredo server */
                { "2001:0:808:808::80ff:fffe", NETPOLICY_REASON_LOOPBACK }, /* Teredo client ~127.0.0.1 */
                { "2001:0:808:808::5601:5601", NETPOLICY_REASON_METADATA }, /* ~169.254.169.254 */
                { "2001:0:808:808::f7f7:f7f7", -1 },
                { "2001:1::7f00:1", -1 }, /* not Teredo: 2001:1::/32 */
        };
        check_platform(NULL, cases, ARRAY_SIZE(cases));
        struct netpolicy_platform zero = {};
        check_platform(&zero, cases, ARRAY_SIZE(cases));
        enum netpolicy_reason r;
        assert_true(netpolicy_platform_denied(NULL, NULL, &r)); /* fail closed */
}

static void test_platform_open(void **state) {
        (void) state;
        struct netpolicy_platform pl;
        char err[NETPOLICY_ERR_MAX];
        memset(&pl, 0x5a, sizeof pl);
        assert_int_equal(netpolicy_platform_parse("", &pl, err, sizeof err), 0);
        assert_int_equal(pl.n_open, 0);
        assert_int_equal(pl.n_self, 0);
        assert_int_equal(netpolicy_platform_parse("  ", &pl, err, sizeof err), 0);
        assert_int_equal(pl.n_open, 0);

        assert_int_equal(netpolicy_platform_parse(" 203.0.113.0/24, 10.1.0.0/16 ,fd12:3456::/32,100.64.0.0/10", &pl,
                                                  err, sizeof err),
                         0);
        assert_int_equal(pl.n_open, 4);
        char *s = NULL;
        assert_int_equal(netpolicy_platform_format(&pl, &s), 0);
        assert_string_equal(s, "203.0.113.0/24,10.1.0.0/16,fd12:3456::/32,100.64.0.0/10");
        free(s);
        static const struct platform_case opened[] = {
                { "203.0.113.1", -1 },
                { "::ffff:203.0.113.1", -1 },
                { "10.1.255.255", -1 },
                { "10.2.0.0", NETPOLICY_REASON_PRIVATE },
                { "10.0.255.255", NETPOLICY_REASON_PRIVATE },
                { "198.51.100.1", NETPOLICY_REASON_DOCUMENTATION },
                { "fd12:3456::1", -1 },
                { "fd12:3457::1", NETPOLICY_REASON_UNIQUE_LOCAL },
                { "100.64.0.1", -1 },
                /* a metadata address inside an opened range stays denied */
                { "100.100.100.200", NETPOLICY_REASON_METADATA },
                /* opened through the forms that embed it too */
                { "2002:a01:203::", -1 },
                { "64:ff9b::cb00:7101", -1 },
                { "2002:a02:203::", NETPOLICY_REASON_PRIVATE },
                { "127.0.0.1", NETPOLICY_REASON_LOOPBACK },
        };
        check_platform(&pl, opened, ARRAY_SIZE(opened));

        /* fc00::/7 may be opened, its metadata address stays denied */
        assert_int_equal(netpolicy_platform_parse("fc00::/7", &pl, err, sizeof err), 0);
        static const struct platform_case ula[] = {
                { "fd12::1", -1 },
                { "fd00:ec2::254", NETPOLICY_REASON_METADATA },
        };
        check_platform(&pl, ula, ARRAY_SIZE(ula));

        struct {
                const char *in, *msg;
        } bad[] = {
                { "127.0.0.0/8", "\"127.0.0.0/8\" cannot be opened: it overlaps 127.0.0.0/8 (loopback), which stays "
                                 "denied" },
                { "127.0.0.1", "\"127.0.0.1\" cannot be opened: it overlaps 127.0.0.0/8 (loopback), which stays "
                               "denied" },
                { "169.254.169.254", "\"169.254.169.254\" cannot be opened: it overlaps 169.254.169.254/32 (cloud "
                                     "metadata service), which stays denied" },
                { "169.254.0.0/16", "\"169.254.0.0/16\" cannot be opened: it overlaps 169.254.0.0/16 (link-local), "
                                    "which stays denied" },
                { "0.0.0.0/0", "\"0.0.0.0/0\" cannot be opened: it overlaps 0.0.0.0/8 (this network (0.0.0.0/8)), "
                               "which stays denied" },
                { "224.0.0.0/8", "\"224.0.0.0/8\" cannot be opened: it overlaps 224.0.0.0/4 (multicast), which stays "
                                 "denied" },
                { "::/0", "\"::/0\" cannot be opened: it overlaps ::/128 (unspecified address), which stays denied" },
                { "fe80::/64", "\"fe80::/64\" cannot be opened: it overlaps fe80::/10 (link-local), which stays "
                               "denied" },
                { "fd00:ec2::254", "\"fd00:ec2::254\" cannot be opened: it overlaps fd00:ec2::254/128 (cloud "
                                   "metadata service), which stays denied" },
                { "8.8.8.0/24", "\"8.8.8.0/24\" is not in the platform deny set, so opening it changes nothing "
                                "(only private, shared, documentation and unique local ranges can be opened)" },
                { "198.18.0.0/15", "\"198.18.0.0/15\" is not in the platform deny set, so opening it changes "
                                   "nothing (only private, shared, documentation and unique local ranges can be "
                                   "opened)" },
                { "10.0.0.1/8", "opened range \"10.0.0.1/8\" has host bits set: the range is 10.0.0.0/8" },
                { "10.0.0.0/8,,192.168.0.0/16", "the list of opened ranges has an empty entry (entries are separated "
                                                "by single commas)" },
                { "10.0.0.0/8,", "the list of opened ranges has an empty entry (entries are separated by single "
                                 "commas)" },
                { "10.0.0.0/8;192.168.0.0/16", "opened range \"10.0.0.0/8;192.168.0.0/16\": the prefix length must "
                                               "be a number from 0 to 32" },
                { "10.0.0.0 192.168.0.0/16", "opened range \"10.0.0.0 192.168.0.0/16\" is not an address range: a "
                                             "range is a.b.c.d/n (n 0..32), an IPv6 x::/n (n 0..128) or one address" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                memset(&pl, 0x5a, sizeof pl);
                err[0] = '\0';
                int r = netpolicy_platform_parse(bad[i].in, &pl, err, sizeof err);
                if (r != -EINVAL || strcmp(err, bad[i].msg) != 0)
                        print_message("%s: got %d %s\n", bad[i].in, r, err);
                assert_int_equal(r, -EINVAL);
                assert_string_equal(err, bad[i].msg);
                assert_int_equal(pl.n_open, 0x5a5a5a5a5a5a5a5a); /* untouched */
        }
        /* limits: 64 entries, 4096 bytes */
        char many[NETPOLICY_PLATFORM_STRING_MAX + 2] = "";
        for (int i = 0; i < 65; i++)
                snprintf(many + strlen(many), sizeof many - strlen(many), "%s10.%d.0.0/16", i ? "," : "", i);
        assert_int_equal(netpolicy_platform_parse(many, &pl, err, sizeof err), -EINVAL);
        assert_string_equal(err, "at most 64 ranges can be opened");
        *strrchr(many, ',') = '\0';
        assert_int_equal(netpolicy_platform_parse(many, &pl, err, sizeof err), 0);
        assert_int_equal(pl.n_open, 64);
        memset(many, ' ', NETPOLICY_PLATFORM_STRING_MAX + 1);
        many[NETPOLICY_PLATFORM_STRING_MAX + 1] = '\0';
        assert_int_equal(netpolicy_platform_parse(many, &pl, err, sizeof err), -EINVAL);
        assert_string_equal(err, "the list of opened ranges is longer than 4096 bytes");
}

static void test_platform_self(void **state) {
        (void) state;
        struct netpolicy_platform pl;
        char err[NETPOLICY_ERR_MAX];
        assert_int_equal(netpolicy_platform_parse("10.1.0.0/16", &pl, err, sizeof err), 0);
        struct in6_addr gw = addr("198.18.0.1"), host = addr("10.1.0.5"), v6 = addr("2606:4700::5"),
                        sbx = addr("10.1.200.7");
        assert_int_equal(netpolicy_platform_add_self(&pl, &gw, 32), 0);
        assert_int_equal(netpolicy_platform_add_self(&pl, &host, 32), 0);
        assert_int_equal(netpolicy_platform_add_self(&pl, &v6, 64), 0);
        assert_int_equal(netpolicy_platform_add_self(&pl, &sbx, 24), 0); /* host bits cleared */
        assert_int_equal(netpolicy_platform_add_self(&pl, &gw, 33), -EINVAL);
        assert_int_equal(netpolicy_platform_add_self(&pl, &v6, 129), -EINVAL);
        static const struct platform_case cases[] = {
                { "198.18.0.1", NETPOLICY_REASON_SELF },
                { "198.18.0.2", -1 },
                { "10.1.0.5", NETPOLICY_REASON_SELF }, /* inside an opened range */
                { "10.1.0.6", -1 },
                { "10.1.200.1", NETPOLICY_REASON_SELF },
                { "10.1.201.1", -1 },
                { "2606:4700::ffff", NETPOLICY_REASON_SELF },
                { "2606:4700:0:1::", -1 },
                { "2002:c612:1::", NETPOLICY_REASON_SELF }, /* 6to4 of the gateway */
                { "64:ff9b::a01:5", NETPOLICY_REASON_SELF },
        };
        check_platform(&pl, cases, ARRAY_SIZE(cases));
        struct netpolicy *p = parse_ok("{\"mode\":\"allow-all\"}");
        struct netpolicy_decision d;
        assert_false(netpolicy_check_addr(p, &pl, &gw, 443, &d));
        assert_int_equal(d.reason, NETPOLICY_REASON_SELF);
        struct in6_addr other = addr("198.18.0.2");
        assert_true(netpolicy_check_addr(p, &pl, &other, 443, &d));
        netpolicy_free(p);
        while (pl.n_self < NETPOLICY_PLATFORM_SELF_MAX)
                assert_int_equal(netpolicy_platform_add_self(&pl, &gw, 32), 0);
        assert_int_equal(netpolicy_platform_add_self(&pl, &gw, 32), -ENOSPC);
}

static void test_name_canonical(void **state) {
        (void) state;
        struct {
                const char *in;
                int r;
                const char *out;
        } cases[] = {
                { "example.com", 0, "example.com" },
                { "Example.COM.", 0, "example.com" },
                { "a-b.c-d.test", 0, "a-b.c-d.test" },
                { "xn--bcher-kva.de", 0, "xn--bcher-kva.de" },
                { "0x1.com", 0, "0x1.com" },
                { "1.2.3.com", 0, "1.2.3.com" },
                { "a.b0", 0, "a.b0" },
                { "example.com..", -EINVAL, NULL },
                { ".", -EINVAL, NULL },
                { "", -EINVAL, NULL },
                { "localhost", -EINVAL, NULL },
                { "localhost.", -EINVAL, NULL },
                { "a..b", -EINVAL, NULL },
                { "a_b.test", -EINVAL, NULL },
                { "*.a.test", -EINVAL, NULL },
                { "a.test:443", -EINVAL, NULL },
                { "-a.test", -EINVAL, NULL },
                { "a.test-", -EINVAL, NULL },
                { "b\xc3\xbc" "cher.de", -EILSEQ, NULL },
                { "a.test\xff", -EILSEQ, NULL },
                { "1.2.3.4", -EADDRNOTAVAIL, NULL },
                { "1.2.3.4.", -EADDRNOTAVAIL, NULL },
                { "1.2.3.4.5", -EADDRNOTAVAIL, NULL },
                { "a.1", -EADDRNOTAVAIL, NULL },
                { "[::1]", -EADDRNOTAVAIL, NULL },
                { "::ffff:127.0.0.1", -EADDRNOTAVAIL, NULL },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                char out[NETPOLICY_NAME_MAX + 1] = "untouched";
                int r = netpolicy_name_canonical(cases[i].in, strlen(cases[i].in), out, sizeof out);
                if (r != cases[i].r)
                        print_message("%s: got %d\n", cases[i].in, r);
                assert_int_equal(r, cases[i].r);
                assert_string_equal(out, cases[i].out ? cases[i].out : "untouched");
        }
        /* NUL: the length given, not strlen(), is the name */
        char out[NETPOLICY_NAME_MAX + 1];
        assert_int_equal(netpolicy_name_canonical("a.test\0.evil.com", 16, out, sizeof out), -EINVAL);
        assert_int_equal(netpolicy_name_canonical("a.test\0.evil.com", 6, out, sizeof out), 0);
        assert_string_equal(out, "a.test");
        /* lengths */
        char name[300];
        memset(name, 'a', sizeof name);
        name[63] = '.';
        assert_int_equal(netpolicy_name_canonical(name, 127, out, sizeof out), 0); /* two 63-char labels */
        name[63] = 'a';
        name[64] = '.';
        assert_int_equal(netpolicy_name_canonical(name, 127, out, sizeof out), -ENAMETOOLONG);
        for (size_t i = 63; i < sizeof name; i += 64)
                name[i] = '.';
        name[64] = 'a';
        assert_int_equal(netpolicy_name_canonical(name, 253, out, sizeof out), 0);
        assert_int_equal(strlen(out), 253);
        assert_int_equal(netpolicy_name_canonical(name, 254, out, sizeof out), -ENAMETOOLONG);
        name[253] = '.';
        assert_int_equal(netpolicy_name_canonical(name, 254, out, sizeof out), 0); /* the dot is not counted */
        char small[9] = "xxxxxxxx";
        assert_int_equal(netpolicy_name_canonical("abcd.test", 9, small, sizeof small), -ENOBUFS);
        assert_string_equal(small, "xxxxxxxx");
        assert_int_equal(netpolicy_name_canonical("ABC.test", 8, small, sizeof small), 0);
        assert_string_equal(small, "abc.test");
}

static void test_name_is_ip(void **state) {
        (void) state;
        const char *ips[] = { "1.2.3.4", "1.2.3.4.", "127.1", "127.0.1", "0x7f.1", "0x7F000001", "017700000001",
                              "2130706433", "0", "0x", "::1", "[::1]", "::ffff:127.0.0.1", "2001:db8::1",
                              "fe80::1%eth0", "[fe80::1%25eth0]", "999.1.1.1" };
        for (size_t i = 0; i < ARRAY_SIZE(ips); i++) {
                if (!netpolicy_name_is_ip(ips[i], strlen(ips[i])))
                        print_message("%s is an address\n", ips[i]);
                assert_true(netpolicy_name_is_ip(ips[i], strlen(ips[i])));
        }
        const char *names[] = { "a.test", "1.2.3.4.5", "1.a", "a.1", "0x1g.1", "::g", "[a.test]", "", ".", "1..2",
                                "[::1", "1.2.3.4 " };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                if (netpolicy_name_is_ip(names[i], strlen(names[i])))
                        print_message("%s is not an address\n", names[i]);
                assert_false(netpolicy_name_is_ip(names[i], strlen(names[i])));
        }
        assert_false(netpolicy_name_is_ip(NULL, 0));
}

static void test_needs_names(void **state) {
        (void) state;
        struct {
                const char *policy;
                bool needs;
        } cases[] = {
                { "{\"mode\":\"allow-all\"}", false },
                { "{\"mode\":\"allow-all\",\"deny\":[{\"cidr\":\"198.18.0.0/15\"}]}", false },
                { "{\"mode\":\"allow-all\",\"deny\":[{\"host\":\"gist.github.com\"}]}", true },
                { "{\"mode\":\"deny-all\"}", false },
                { "{\"allow\":[{\"cidr\":\"198.18.0.0/15\"}]}", false },
                { "{\"allow\":[{\"cidr\":\"198.18.0.0/15\"},{\"host\":\"a.test\"}]}", true },
                { "{\"allow\":[{\"cidr\":\"198.18.0.0/15\"}],\"deny\":[{\"host\":\"a.test\"}]}", true },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                struct netpolicy *p = parse_ok(cases[i].policy);
                assert_int_equal(netpolicy_needs_names(p), cases[i].needs);
                netpolicy_free(p);
        }
        assert_false(netpolicy_needs_names(NULL));
}

static void test_addresses(void **state) {
        (void) state;
        struct netpolicy_cidr c;
        char err[NETPOLICY_ERR_MAX], buf[NETPOLICY_CIDR_STRING_MAX];
        assert_int_equal(netpolicy_cidr_parse("198.18.0.0/15", 13, &c, err, sizeof err), 0);
        assert_int_equal(c.prefix, 96 + 15);
        assert_int_equal(netpolicy_cidr_format(&c, buf, sizeof buf), 0);
        assert_string_equal(buf, "198.18.0.0/15");
        struct in6_addr in = addr("198.19.255.255"), out = addr("198.20.0.0");
        assert_true(netpolicy_cidr_contains(&c, &in));
        assert_false(netpolicy_cidr_contains(&c, &out));
        assert_int_equal(netpolicy_cidr_parse("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 43, &c, err, sizeof err),
                         0);
        assert_int_equal(netpolicy_cidr_format(&c, buf, sizeof buf), 0);
        assert_string_equal(buf, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128");
        assert_int_equal(netpolicy_cidr_format(&c, buf, 10), -ENOBUFS);
        /* an IPv6 range next to mapped space is still IPv6 */
        assert_int_equal(netpolicy_cidr_parse("::fffe:0:0/95", 13, &c, err, sizeof err), 0);
        in = addr("::ffff:1.2.3.4");
        assert_false(netpolicy_cidr_contains(&c, &in));

        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(5432) };
        inet_pton(AF_INET, "203.0.113.5", &sin.sin_addr);
        struct in6_addr a;
        uint16_t port = 0;
        assert_int_equal(netpolicy_addr_from_sockaddr((struct sockaddr *) &sin, sizeof sin, &a, &port), 0);
        assert_int_equal(port, 5432);
        assert_true(netpolicy_addr_is_v4(&a));
        char s[NETPOLICY_ADDR_STRING_MAX];
        assert_int_equal(netpolicy_addr_format(&a, s, sizeof s), 0);
        assert_string_equal(s, "203.0.113.5");
        struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(443) };
        inet_pton(AF_INET6, "2001:db8::1", &sin6.sin6_addr);
        assert_int_equal(netpolicy_addr_from_sockaddr((struct sockaddr *) &sin6, sizeof sin6, &a, NULL), 0);
        assert_false(netpolicy_addr_is_v4(&a));
        assert_int_equal(netpolicy_addr_format(&a, s, sizeof s), 0);
        assert_string_equal(s, "2001:db8::1");
        assert_int_equal(netpolicy_addr_from_sockaddr((struct sockaddr *) &sin6, sizeof sin, &a, NULL), -EINVAL);
        struct sockaddr un = { .sa_family = AF_UNIX };
        assert_int_equal(netpolicy_addr_from_sockaddr(&un, sizeof un, &a, NULL), -EAFNOSUPPORT);
}

static void test_reasons(void **state) {
        (void) state;
        char buf[NETPOLICY_DECISION_STRING_MAX];
        struct {
                struct netpolicy_decision d;
                const char *text;
        } cases[] = {
                { { false, NETPOLICY_REASON_DENY_RULE, 0 }, "denied by rule deny[0]" },
                { { true, NETPOLICY_REASON_ALLOW_RULE, 255 }, "allowed by rule allow[255]" },
                { { false, NETPOLICY_REASON_NO_MATCH, -1 }, "no allow rule matches" },
                { { false, NETPOLICY_REASON_MODE_DENY_ALL, -1 }, "mode deny-all" },
                { { true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1 }, "mode allow-all" },
                { { false, NETPOLICY_REASON_LOOPBACK, -1 }, "platform deny set: loopback" },
                { { false, NETPOLICY_REASON_METADATA, -1 }, "platform deny set: cloud metadata service" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                assert_int_equal(netpolicy_decision_format(&cases[i].d, buf, sizeof buf), 0);
                assert_string_equal(buf, cases[i].text);
        }
        /* every reason has its own text; the platform's say so */
        for (int r = 0; r < _NETPOLICY_REASON_MAX; r++) {
                const char *t = netpolicy_reason_to_string(r);
                assert_string_not_equal(t, "unknown reason");
                assert_true(strlen(t) < NETPOLICY_DECISION_STRING_MAX);
                assert_int_equal(netpolicy_reason_is_platform(r), strncmp(t, "platform deny set: ", 19) == 0);
                for (int k = 0; k < r; k++)
                        assert_string_not_equal(t, netpolicy_reason_to_string(k));
        }
        assert_string_equal(netpolicy_reason_to_string(_NETPOLICY_REASON_MAX), "unknown reason");
        assert_false(netpolicy_reason_is_platform(_NETPOLICY_REASON_MAX));
        assert_int_equal(netpolicy_decision_format(&cases[0].d, buf, 5), -ENOBUFS);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_modes),
                cmocka_unit_test(test_structure_errors),
                cmocka_unit_test(test_host_errors),
                cmocka_unit_test(test_cidr_errors),
                cmocka_unit_test(test_ports_errors),
                cmocka_unit_test(test_limits),
                cmocka_unit_test(test_format),
                cmocka_unit_test(test_match_names),
                cmocka_unit_test(test_match_addrs),
                cmocka_unit_test(test_platform),
                cmocka_unit_test(test_platform_open),
                cmocka_unit_test(test_platform_self),
                cmocka_unit_test(test_name_canonical),
                cmocka_unit_test(test_name_is_ip),
                cmocka_unit_test(test_needs_names),
                cmocka_unit_test(test_addresses),
                cmocka_unit_test(test_reasons),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
