/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy: its strict parser (every byte of it comes from an API
 * client), the canonical form airlockd stores, and the decisions the
 * gateway asks for each DNS query and connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy-internal.h"

struct np_rule {
        bool is_cidr;
        bool wildcard;   /* host "*.<host>": strict subdomains of host */
        uint8_t n_ports; /* 0: every port */
        uint16_t ports[NETPOLICY_PORTS_MAX]; /* ascending, distinct */
        struct netpolicy_cidr cidr;
        size_t host_len;
        char host[NETPOLICY_NAME_MAX + 1]; /* canonical; without "*." */
};

struct netpolicy {
        enum netpolicy_mode mode;
        size_t n_allow, n_deny;
        struct np_rule *allow, *deny;
};

static const uint16_t host_default_ports[] = { 80, 443 };

static const char *const mode_names[_NETPOLICY_MODE_MAX] = {
        [NETPOLICY_ALLOW_ALL] = "allow-all",
        [NETPOLICY_DENY_ALL] = "deny-all",
        [NETPOLICY_ALLOWLIST] = "allowlist",
};

const char *netpolicy_mode_to_string(enum netpolicy_mode m) {
        return (unsigned) m < _NETPOLICY_MODE_MAX ? mode_names[m] : NULL;
}

int netpolicy_mode_from_string(const char *s, enum netpolicy_mode *ret) {
        if (!s || !ret)
                return -EINVAL;
        for (unsigned m = 0; m < _NETPOLICY_MODE_MAX; m++)
                if (strcmp(s, mode_names[m]) == 0) {
                        *ret = (enum netpolicy_mode) m;
                        return 0;
                }
        return -EINVAL;
}

int netpolicy_decision_format(const struct netpolicy_decision *d, char *buf, size_t size) {
        if (!d || !buf || size == 0)
                return -EINVAL;
        int n;
        if (d->reason == NETPOLICY_REASON_ALLOW_RULE && d->rule >= 0)
                n = snprintf(buf, size, "allowed by rule allow[%d]", d->rule);
        else if (d->reason == NETPOLICY_REASON_DENY_RULE && d->rule >= 0)
                n = snprintf(buf, size, "denied by rule deny[%d]", d->rule);
        else
                n = snprintf(buf, size, "%s", netpolicy_reason_to_string(d->reason));
        return n < 0 || (size_t) n >= size ? -ENOBUFS : 0;
}

void netpolicy_free(struct netpolicy *p) {
        if (!p)
                return;
        free(p->allow);
        free(p->deny);
        free(p);
}

enum netpolicy_mode netpolicy_mode(const struct netpolicy *p) {
        return p ? p->mode : NETPOLICY_DENY_ALL;
}

size_t netpolicy_n_allow(const struct netpolicy *p) {
        return p ? p->n_allow : 0;
}

size_t netpolicy_n_deny(const struct netpolicy *p) {
        return p ? p->n_deny : 0;
}

int netpolicy_new(enum netpolicy_mode mode, struct netpolicy **ret) {
        if (!ret || (mode != NETPOLICY_ALLOW_ALL && mode != NETPOLICY_DENY_ALL))
                return -EINVAL;
        struct netpolicy *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->mode = mode;
        *ret = p;
        return 0;
}

/* ---- parsing ---- */

/* Where the parser is, for messages: "network.allow[2]". */
struct where {
        const char *field;
        char *err;
        size_t errsz;
};

static int cmp_port(const void *a, const void *b) {
        return (int) *(const uint16_t *) a - (int) *(const uint16_t *) b;
}

static int parse_ports(const json_t *v, const char *path, struct np_rule *r, struct where *w) {
        if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > NETPOLICY_PORTS_MAX)
                return np_fail(w->err, w->errsz,
                               "%s.ports: must be an array of 1 to %d distinct port numbers (1-65535)", path,
                               NETPOLICY_PORTS_MAX);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 65535)
                        return np_fail(w->err, w->errsz, "%s.ports[%zu]: must be an integer from 1 to 65535", path,
                                       i);
                r->ports[i] = (uint16_t) json_integer_value(e);
        }
        r->n_ports = (uint8_t) json_array_size(v);
        qsort(r->ports, r->n_ports, sizeof r->ports[0], cmp_port);
        for (i = 1; i < r->n_ports; i++)
                if (r->ports[i] == r->ports[i - 1])
                        return np_fail(w->err, w->errsz, "%s.ports: port %u is listed twice", path,
                                       (unsigned) r->ports[i]);
        return 0;
}

static int parse_host(const json_t *v, const char *path, struct np_rule *r, struct where *w) {
        if (!json_is_string(v))
                return np_fail(w->err, w->errsz, "%s.host: must be a string, a host name (\"example.com\") or a "
                                                 "wildcard on one (\"*.example.com\")",
                               path);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        char q[NP_QUOTE_SIZE];
        np_quote(s, len, q, sizeof q);
        if (netpolicy_name_is_ip(s, len))
                return np_fail(w->err, w->errsz, "%s.host: \"%s\" is an IP address: name addresses with \"cidr\"",
                               path, q);
        bool wildcard = len >= 2 && s[0] == '*' && s[1] == '.';
        const char *base = wildcard ? s + 2 : s;
        size_t base_len = wildcard ? len - 2 : len;
        if (memchr(base, '*', base_len))
                return np_fail(w->err, w->errsz,
                               "%s.host: \"%s\": a wildcard is allowed only as the whole first label "
                               "(\"*.example.com\" matches the subdomains of example.com)",
                               path, q);
        const char *why = NULL;
        /* a wildcard's base may be one label ("*.com"): the public suffix
         * check below refuses it with the better message */
        int k = np_name_canonical(base, base_len, wildcard ? 1 : 2, r->host, sizeof r->host, &why);
        if (k == -EADDRNOTAVAIL && wildcard)
                why = "is a wildcard on an IP address: name addresses with \"cidr\"";
        if (k < 0)
                return np_fail(w->err, w->errsz, "%s.host: \"%s\" %s", path, q, why);
        r->host_len = strlen(r->host);
        if (wildcard && r->host_len + 2 > NETPOLICY_NAME_MAX)
                return np_fail(w->err, w->errsz, "%s.host: \"%s\" is longer than 253 characters", path, q);
        if (wildcard) {
                k = np_is_public_suffix(r->host);
                if (k == -ENOPKG) {
                        np_fail(w->err, w->errsz,
                                "%s.host: wildcard rules cannot be checked here: no public suffix list "
                                "(the node needs libpsl's data, the publicsuffix package)",
                                path);
                        return -ENOPKG;
                }
                if (k > 0)
                        return np_fail(w->err, w->errsz,
                                       "%s.host: \"%s\" is a wildcard on the public suffix \"%s\", under which "
                                       "anyone can register names: allow the domains themselves",
                                       path, q, r->host);
        }
        r->wildcard = wildcard;
        return 0;
}

static int parse_rule(const json_t *o, bool allow, size_t index, struct np_rule *r, struct where *w) {
        char path[128];
        snprintf(path, sizeof path, "%.64s.%s[%zu]", w->field, allow ? "allow" : "deny", index);
        if (!json_is_object(o))
                return np_fail(w->err, w->errsz,
                               "%s: must be an object with \"host\" or \"cidr\", and optionally \"ports\"", path);
        const char *key;
        json_t *v;
        json_object_foreach((json_t *) o, key, v)
                if (strcmp(key, "host") != 0 && strcmp(key, "cidr") != 0 && strcmp(key, "ports") != 0) {
                        char q[NP_QUOTE_SIZE];
                        np_quote(key, strlen(key), q, sizeof q);
                        return np_fail(w->err, w->errsz,
                                       "%s: unknown field \"%s\" (accepted: \"host\", \"cidr\", \"ports\")", path, q);
                }
        const json_t *host = json_object_get(o, "host"), *cidr = json_object_get(o, "cidr"),
                     *ports = json_object_get(o, "ports");
        if (host && cidr)
                return np_fail(w->err, w->errsz, "%s: has both \"host\" and \"cidr\": a rule names one of them",
                               path);
        if (!host && !cidr)
                return np_fail(w->err, w->errsz, "%s: needs \"host\" (a name) or \"cidr\" (an address range)",
                               path);
        *r = (struct np_rule) {};
        int k;
        if (host)
                k = parse_host(host, path, r, w);
        else if (!json_is_string(cidr))
                k = np_fail(w->err, w->errsz, "%s.cidr: must be a string, \"a.b.c.d/n\" or \"x::/n\"", path);
        else {
                char why[NETPOLICY_ERR_MAX];
                k = netpolicy_cidr_parse(json_string_value(cidr), json_string_length(cidr), &r->cidr, why,
                                         sizeof why);
                if (k < 0)
                        np_fail(w->err, w->errsz, "%s.cidr: %s", path, why);
                r->is_cidr = true;
        }
        if (k < 0)
                return k;
        if (ports)
                return parse_ports(ports, path, r, w);
        /* a name allowed on the web's two ports; a deny on every port */
        if (allow && !r->is_cidr) {
                memcpy(r->ports, host_default_ports, sizeof host_default_ports);
                r->n_ports = ARRAY_SIZE(host_default_ports);
        }
        return 0;
}

static int parse_rules(const json_t *a, bool allow, struct np_rule **ret, size_t *ret_n, struct where *w) {
        const char *name = allow ? "allow" : "deny";
        if (!json_is_array(a))
                return np_fail(w->err, w->errsz, "%.64s.%s: must be an array of rules", w->field, name);
        size_t n = json_array_size(a);
        if (n > NETPOLICY_RULES_MAX)
                return np_fail(w->err, w->errsz, "%.64s.%s: has %zu rules, at most %d", w->field, name, n,
                               NETPOLICY_RULES_MAX);
        _cleanup_free_ struct np_rule *rules = n ? calloc(n, sizeof *rules) : NULL;
        if (n && !rules)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                int r = parse_rule(json_array_get(a, i), allow, i, &rules[i], w);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(rules);
        *ret_n = n;
        return 0;
}

int netpolicy_parse(const json_t *j, const char *field, struct netpolicy **ret, char *err, size_t errsz) {
        if (!ret)
                return -EINVAL;
        struct where w = { .field = field ? field : "network", .err = err, .errsz = errsz };
        const char *f = w.field;
        if (!json_is_object(j))
                return np_fail(err, errsz, "%.64s: must be an object with \"mode\", \"allow\" and \"deny\"", f);
        size_t size = json_dumpb(j, NULL, 0, JSON_COMPACT);
        if (size > NETPOLICY_JSON_MAX) {
                np_fail(err, errsz, "%.64s: the policy is %zu bytes of JSON, at most %u", f, size,
                        NETPOLICY_JSON_MAX);
                return -EFBIG;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *) j, key, v)
                if (strcmp(key, "mode") != 0 && strcmp(key, "allow") != 0 && strcmp(key, "deny") != 0) {
                        char q[NP_QUOTE_SIZE];
                        np_quote(key, strlen(key), q, sizeof q);
                        return np_fail(err, errsz,
                                       "%.64s: unknown field \"%s\" (accepted: \"mode\", \"allow\", \"deny\")", f, q);
                }
        const json_t *mode = json_object_get(j, "mode"), *allow = json_object_get(j, "allow"),
                     *deny = json_object_get(j, "deny");
        _cleanup_(netpolicy_freep) struct netpolicy *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        if (mode) {
                if (!json_is_string(mode) || netpolicy_mode_from_string(json_string_value(mode), &p->mode) < 0)
                        return np_fail(err, errsz,
                                       "%.64s.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"", f);
                /* a NUL inside the string would hide a suffix from strcmp() */
                if (json_string_length(mode) != strlen(json_string_value(mode)))
                        return np_fail(err, errsz,
                                       "%.64s.mode: must be \"allow-all\", \"deny-all\" or \"allowlist\"", f);
        } else if (allow)
                p->mode = NETPOLICY_ALLOWLIST;
        else if (deny)
                return np_fail(err, errsz,
                               "%.64s.mode: is needed with deny rules: \"allow-all\" (everything but them) or "
                               "\"allowlist\" (with allow rules)",
                               f);
        else {
                *ret = NULL;
                return 0; /* not specified: the caller's default */
        }
        int r;
        if (allow && (r = parse_rules(allow, true, &p->allow, &p->n_allow, &w)) < 0)
                return r;
        if (deny && (r = parse_rules(deny, false, &p->deny, &p->n_deny, &w)) < 0)
                return r;
        switch (p->mode) {
        case NETPOLICY_DENY_ALL:
                if (p->n_allow || p->n_deny)
                        return np_fail(err, errsz,
                                       "%.64s: mode \"deny-all\" takes no rules (it denies everything); for "
                                       "some destinations use \"allowlist\"",
                                       f);
                break;
        case NETPOLICY_ALLOW_ALL:
                if (p->n_allow)
                        return np_fail(err, errsz,
                                       "%.64s.allow: mode \"allow-all\" takes only deny rules (everything else "
                                       "is allowed); to allow only some destinations use \"allowlist\"",
                                       f);
                break;
        case NETPOLICY_ALLOWLIST:
                if (!p->n_allow)
                        return np_fail(err, errsz, "%.64s.allow: mode \"allowlist\" needs at least one allow rule",
                                       f);
                break;
        default:
                return -EINVAL;
        }
        *ret = TAKE_PTR(p);
        return 1;
}

int netpolicy_parse_text(const char *text, size_t len, const char *field, struct netpolicy **ret, char *err,
                         size_t errsz) {
        if (!text || !ret)
                return -EINVAL;
        const char *f = field ? field : "network";
        if (len > NETPOLICY_JSON_MAX) {
                np_fail(err, errsz, "%.64s: the policy is %zu bytes of JSON, at most %u", f, len, NETPOLICY_JSON_MAX);
                return -EFBIG;
        }
        json_error_t e;
        json_auto_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
        if (!j)
                return np_fail(err, errsz, "%.64s: not valid JSON: %.80s (line %d, column %d)", f, e.text, e.line,
                               e.column);
        return netpolicy_parse(j, field, ret, err, errsz);
}

/* ---- the canonical form ---- */

static json_t *rule_to_json(const struct np_rule *r) {
        json_auto_t *o = json_object();
        if (!o)
                return NULL;
        if (r->is_cidr) {
                char c[NETPOLICY_CIDR_STRING_MAX];
                if (netpolicy_cidr_format(&r->cidr, c, sizeof c) < 0 ||
                    json_object_set_new(o, "cidr", json_string(c)) < 0)
                        return NULL;
        } else {
                char h[NETPOLICY_NAME_MAX + 3];
                snprintf(h, sizeof h, "%s%s", r->wildcard ? "*." : "", r->host);
                if (json_object_set_new(o, "host", json_string(h)) < 0)
                        return NULL;
        }
        if (r->n_ports) {
                json_t *a = json_array();
                if (!a || json_object_set_new(o, "ports", a) < 0)
                        return NULL;
                for (size_t i = 0; i < r->n_ports; i++)
                        if (json_array_append_new(a, json_integer(r->ports[i])) < 0)
                                return NULL;
        }
        return json_incref(o);
}

static int rules_to_json(json_t *o, const char *key, const struct np_rule *rules, size_t n) {
        if (n == 0)
                return 0;
        json_t *a = json_array();
        if (!a || json_object_set_new(o, key, a) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (json_array_append_new(a, rule_to_json(&rules[i])) < 0)
                        return -ENOMEM;
        return 0;
}

int netpolicy_to_json(const struct netpolicy *p, json_t **ret) {
        if (!p || !ret || !netpolicy_mode_to_string(p->mode))
                return -EINVAL;
        json_auto_t *o = json_object();
        if (!o || json_object_set_new(o, "mode", json_string(netpolicy_mode_to_string(p->mode))) < 0 ||
            rules_to_json(o, "allow", p->allow, p->n_allow) < 0 || rules_to_json(o, "deny", p->deny, p->n_deny) < 0)
                return -ENOMEM;
        *ret = json_incref(o);
        return 0;
}

int netpolicy_format(const struct netpolicy *p, char **ret) {
        if (!ret)
                return -EINVAL;
        json_auto_t *o = NULL;
        int r = netpolicy_to_json(p, &o);
        if (r < 0)
                return r;
        char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static bool rule_equal(const struct np_rule *a, const struct np_rule *b) {
        if (a->is_cidr != b->is_cidr || a->n_ports != b->n_ports ||
            memcmp(a->ports, b->ports, a->n_ports * sizeof a->ports[0]) != 0)
                return false;
        if (a->is_cidr)
                return a->cidr.prefix == b->cidr.prefix && memcmp(&a->cidr.addr, &b->cidr.addr, 16) == 0;
        return a->wildcard == b->wildcard && strcmp(a->host, b->host) == 0;
}

bool netpolicy_equal(const struct netpolicy *a, const struct netpolicy *b) {
        if (!a || !b)
                return a == b;
        if (a->mode != b->mode || a->n_allow != b->n_allow || a->n_deny != b->n_deny)
                return false;
        for (size_t i = 0; i < a->n_allow; i++)
                if (!rule_equal(&a->allow[i], &b->allow[i]))
                        return false;
        for (size_t i = 0; i < a->n_deny; i++)
                if (!rule_equal(&a->deny[i], &b->deny[i]))
                        return false;
        return true;
}

bool netpolicy_needs_names(const struct netpolicy *p) {
        if (!p || p->mode == NETPOLICY_DENY_ALL)
                return false;
        for (size_t i = 0; i < p->n_allow; i++)
                if (!p->allow[i].is_cidr)
                        return true;
        for (size_t i = 0; i < p->n_deny; i++)
                if (!p->deny[i].is_cidr)
                        return true;
        return false;
}

/* ---- decisions ---- */

/* What a decision is about: a canonical name, or an address with the IPv4
 * it embeds (which deny rules match too). */
struct subject {
        const char *name;
        size_t name_len;
        const struct in6_addr *addr;
        struct in6_addr embedded[NP_EMBEDDED_MAX];
        size_t n_embedded;
};

static bool host_match(const struct np_rule *r, const struct subject *s) {
        if (r->is_cidr || !s->name)
                return false;
        if (!r->wildcard)
                return s->name_len == r->host_len && memcmp(s->name, r->host, r->host_len) == 0;
        /* strict subdomains: at least one label before ".host" */
        return s->name_len > r->host_len + 1 && s->name[s->name_len - r->host_len - 1] == '.' &&
               memcmp(s->name + s->name_len - r->host_len, r->host, r->host_len) == 0;
}

static bool rule_matches(const struct np_rule *r, const struct subject *s, bool deny) {
        if (!s->addr)
                return host_match(r, s);
        if (!r->is_cidr)
                return false;
        if (netpolicy_cidr_contains(&r->cidr, s->addr))
                return true;
        /* deny rules see through 6to4, NAT64 and Teredo; allow rules do not */
        for (size_t i = 0; deny && i < s->n_embedded; i++)
                if (netpolicy_cidr_contains(&r->cidr, &s->embedded[i]))
                        return true;
        return false;
}

static bool rule_has_port(const struct np_rule *r, uint16_t port) {
        if (r->n_ports == 0)
                return true;
        for (size_t i = 0; i < r->n_ports; i++)
                if (r->ports[i] == port)
                        return true;
        return false;
}

static bool verdict(struct netpolicy_decision *ret, bool allow, enum netpolicy_reason reason, int rule) {
        if (ret)
                *ret = (struct netpolicy_decision) { .allow = allow, .reason = reason, .rule = rule };
        return allow;
}

/* Port 0 asks whether any port is allowed: the ports matching deny rules
 * cover go into a bitmap (at most 256 x 32 of them, never all 65535 ports),
 * so the answer costs one pass over each list whatever the policy. */
struct port_set {
        uint64_t bits[65536 / 64];
};

static void port_set_add(struct port_set *s, uint16_t p) {
        s->bits[p / 64] |= UINT64_C(1) << (p % 64);
}

static bool port_set_has(const struct port_set *s, uint16_t p) {
        return s->bits[p / 64] & (UINT64_C(1) << (p % 64));
}

static bool decide(const struct netpolicy *p, const struct subject *s, uint16_t port,
                   struct netpolicy_decision *ret) {
        if (!p)
                return verdict(ret, false, NETPOLICY_REASON_NO_POLICY, -1);
        if (p->mode == NETPOLICY_DENY_ALL)
                return verdict(ret, false, NETPOLICY_REASON_MODE_DENY_ALL, -1);
        struct port_set denied;
        if (port == 0)
                memset(&denied, 0, sizeof denied);
        int first_deny = -1;
        for (size_t i = 0; i < p->n_deny; i++) {
                const struct np_rule *r = &p->deny[i];
                if (!rule_matches(r, s, true))
                        continue;
                if (port != 0) {
                        if (rule_has_port(r, port))
                                return verdict(ret, false, NETPOLICY_REASON_DENY_RULE, (int) i);
                        continue;
                }
                if (r->n_ports == 0)
                        return verdict(ret, false, NETPOLICY_REASON_DENY_RULE, (int) i);
                for (size_t k = 0; k < r->n_ports; k++)
                        port_set_add(&denied, r->ports[k]);
                if (first_deny < 0)
                        first_deny = (int) i;
        }
        if (p->mode == NETPOLICY_ALLOW_ALL)
                return verdict(ret, true, NETPOLICY_REASON_MODE_ALLOW_ALL, -1);
        bool matched = false;
        for (size_t i = 0; i < p->n_allow; i++) {
                const struct np_rule *r = &p->allow[i];
                if (!rule_matches(r, s, false))
                        continue;
                if (port != 0) {
                        if (rule_has_port(r, port))
                                return verdict(ret, true, NETPOLICY_REASON_ALLOW_RULE, (int) i);
                        continue;
                }
                matched = true;
                if (r->n_ports == 0)
                        return verdict(ret, true, NETPOLICY_REASON_ALLOW_RULE, (int) i);
                for (size_t k = 0; k < r->n_ports; k++)
                        if (!port_set_has(&denied, r->ports[k]))
                                return verdict(ret, true, NETPOLICY_REASON_ALLOW_RULE, (int) i);
        }
        /* every port the allow rules give is taken by deny rules */
        if (matched && first_deny >= 0)
                return verdict(ret, false, NETPOLICY_REASON_DENY_RULE, first_deny);
        return verdict(ret, false, NETPOLICY_REASON_NO_MATCH, -1);
}

bool netpolicy_check_name(const struct netpolicy *p, const char *name, uint16_t port,
                          struct netpolicy_decision *ret) {
        if (!p)
                return verdict(ret, false, NETPOLICY_REASON_NO_POLICY, -1);
        if (!name)
                return verdict(ret, false, NETPOLICY_REASON_BAD_NAME, -1);
        char canon[NETPOLICY_NAME_MAX + 1];
        /* one more than a name may have, so a longer one fails as too long */
        size_t len = strnlen(name, NETPOLICY_NAME_MAX + 2);
        int r = netpolicy_name_canonical(name, len, canon, sizeof canon);
        if (r == -EADDRNOTAVAIL)
                return verdict(ret, false, NETPOLICY_REASON_IP_LITERAL, -1);
        if (r < 0)
                return verdict(ret, false, NETPOLICY_REASON_BAD_NAME, -1);
        struct subject s = { .name = canon, .name_len = strlen(canon) };
        return decide(p, &s, port, ret);
}

bool netpolicy_check_addr(const struct netpolicy *p, const struct netpolicy_platform *pl,
                          const struct in6_addr *addr, uint16_t port, struct netpolicy_decision *ret) {
        enum netpolicy_reason reason;
        if (!addr)
                return verdict(ret, false, NETPOLICY_REASON_UNSPECIFIED, -1);
        if (netpolicy_platform_denied(pl, addr, &reason))
                return verdict(ret, false, reason, -1);
        struct subject s = { .addr = addr };
        s.n_embedded = np_embedded_v4(addr, s.embedded);
        return decide(p, &s, port, ret);
}
