/* SPDX-License-Identifier: Apache-2.0 */
/*
 * POST /v1/secrets: every field checked, hosts canonicalised by lib/netpolicy
 * (the same rules as a policy's host rules: no IP literals, no wildcard on a
 * public suffix), the injection method checked so that nothing a client
 * gives can split a header.
 */
#include "secretreq.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apierror.h"
#include "credstore.h"
#include "macros.h"
#include "netpolicy.h"

/* a stored secret must fit the objects the node and the gateway take */
_Static_assert(CREDSTORE_VALUE_MAX == CREDSET_VALUE_MAX, "credstore and credset disagree on a value's size");
_Static_assert(CREDSTORE_NAME_MAX == CREDSET_NAME_MAX, "credstore and credset disagree on a name's size");

/* Printable ASCII without controls (and without space when !space). */
static bool printable(const char *s, size_t n, bool space) {
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c < 0x20 || c >= 0x7f || (!space && c == ' '))
                        return false;
        }
        return true;
}

/* "*.example.com" or a name; canonical (lowercase, no trailing dot). */
static int check_host(const char *h, size_t len, char *out, size_t outsz, char *err, size_t idx) {
        /* lib/netpolicy decides what a host rule may be (public suffix
         * wildcards included): the same answer as the policy would give */
        _cleanup_(json_decrefp) json_t *pol =
                json_pack("{s:s, s:[{s:s%}]}", "mode", "allowlist", "allow", "host", h, len);
        if (!pol)
                return -ENOMEM;
        _cleanup_(netpolicy_freep) struct netpolicy *p = NULL;
        char perr[NETPOLICY_ERR_MAX] = "";
        int r = netpolicy_parse(pol, "hosts", &p, perr, sizeof perr);
        if (r == -ENOPKG)
                return api_error_invalid(
                        err,
                        "field 'hosts[%zu]': wildcards cannot be checked: no public suffix list loads on "
                        "this "
                        "host",
                        idx);
        if (r < 0) {
                /* netpolicy names "hosts.allow[0].host": say which entry */
                const char *m = strstr(perr, ": ");
                return api_error_invalid(err, "field 'hosts[%zu]': %s", idx, m ? m + 2 : "not a host name");
        }
        bool wild = len > 2 && h[0] == '*' && h[1] == '.';
        const char *name = wild ? h + 2 : h;
        size_t nlen = wild ? len - 2 : len;
        if (outsz < 3)
                return -ENOBUFS;
        char *dst = wild ? out + 2 : out;
        r = netpolicy_name_canonical(name, nlen, dst, outsz - (wild ? 2 : 0));
        if (r < 0)
                return api_error_invalid(
                        err, "field 'hosts[%zu]' is not a host name (exact, or \"*.example.com\")", idx);
        if (wild)
                memcpy(out, "*.", 2);
        return 0;
}

static int parse_hosts(const json_t *v, json_t **ret, char *err) {
        if (!json_is_array(v) || json_array_size(v) == 0)
                return api_error_invalid(
                        err, "field 'hosts' is required: an array of host names (\"api.github.com\", "
                             "\"*.example.com\")");
        if (json_array_size(v) > SECRETREQ_HOSTS_MAX)
                return api_error_invalid(err, "field 'hosts' has more than %d entries", SECRETREQ_HOSTS_MAX);
        _cleanup_(json_decrefp) json_t *a = json_array();
        if (!a)
                return -ENOMEM;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                if (!json_is_string(e))
                        return api_error_invalid(err, "field 'hosts[%zu]' must be a string", i);
                char canon[NETPOLICY_NAME_MAX + 3];
                int r = check_host(json_string_value(e), json_string_length(e), canon, sizeof canon, err, i);
                if (r < 0)
                        return r;
                bool dup = false;
                size_t j;
                json_t *f;
                json_array_foreach(a, j, f) dup = dup || strcmp(json_string_value(f), canon) == 0;
                if (!dup && json_array_append_new(a, json_string(canon)) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(a);
        return 0;
}

static int parse_ports(const json_t *v, json_t **ret, char *err) {
        if (!v || json_is_null(v)) {
                *ret = json_pack("[i]", 443);
                return *ret ? 0 : -ENOMEM;
        }
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > SECRETREQ_PORTS_MAX)
                return api_error_invalid(err, "field 'ports' must be an array of 1-%d ports",
                                         SECRETREQ_PORTS_MAX);
        _cleanup_(json_decrefp) json_t *a = json_array();
        if (!a)
                return -ENOMEM;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 65535)
                        return api_error_invalid(err, "field 'ports[%zu]' must be a port number (1-65535)",
                                                 i);
                if (json_array_append_new(a, json_integer(json_integer_value(e))) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(a);
        return 0;
}

static bool token_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* "Name: template with {value}" -> {"header": Name, "template": ...}. */
static int parse_header(const json_t *v, json_t **ret, char *err) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (!s)
                return api_error_invalid(
                        err, "field 'header' must be a string: \"Authorization: Bearer {value}\"");
        const char *colon = memchr(s, ':', len);
        if (!colon || colon == s || (size_t) (colon - s) > SECRETREQ_HEADER_NAME_MAX)
                return api_error_invalid(
                        err,
                        "field 'header' must be \"NAME: TEMPLATE\" with a header name of 1-%d characters",
                        SECRETREQ_HEADER_NAME_MAX);
        size_t nlen = (size_t) (colon - s);
        for (size_t i = 0; i < nlen; i++)
                if (!token_char(s[i]))
                        return api_error_invalid(
                                err, "field 'header': the header name may hold only letters, digits, '-' "
                                     "and '_'");
        if (!credset_header_name_ok(s, nlen)) /* one the gateway owns, or that frames a request */
                return api_error_invalid(err, "field 'header': the gateway does not inject '%.*s'",
                                         (int) nlen, s);
        const char *t = colon + 1;
        size_t tlen = len - nlen - 1;
        while (tlen > 0 && *t == ' ') {
                t++;
                tlen--;
        }
        if (tlen == 0 || tlen > SECRETREQ_TEMPLATE_MAX)
                return api_error_invalid(err, "field 'header': the template must be 1-%d characters",
                                         SECRETREQ_TEMPLATE_MAX);
        if (!printable(t, tlen, true))
                return api_error_invalid(
                        err,
                        "field 'header': the template may hold only printable ASCII (no CR, LF or NUL)");
        const char *first = memmem(t, tlen, "{value}", 7);
        if (!first || memmem(first + 1, tlen - (size_t) (first + 1 - t), "{value}", 7))
                return api_error_invalid(err, "field 'header': the template must hold {value} exactly once");
        *ret = json_pack("{s:s%, s:s%}", "header", s, nlen, "template", t, tlen);
        return *ret ? 0 : -ENOMEM;
}

static int parse_basic(const json_t *v, json_t **ret, char *err) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (!s || len == 0 || len > SECRETREQ_USER_MAX || !printable(s, len, true) || memchr(s, ':', len))
                return api_error_invalid(
                        err, "field 'basic' must be a user name of 1-%d printable characters without ':'",
                        SECRETREQ_USER_MAX);
        *ret = json_pack("{s:s%}", "basic", s, len);
        return *ret ? 0 : -ENOMEM;
}

/* An optional array field of at most max entries (what: of what), each
 * passing check (which writes its message, naming field[i], to err);
 * absent or null: []. *ret is a copy. */
static int parse_list(const json_t *v, const char *field, size_t max, const char *what,
                      int (*check)(const json_t *e, size_t i, char *err), json_t **ret, char *err) {
        if (!v || json_is_null(v)) {
                *ret = json_array();
                return *ret ? 0 : -ENOMEM;
        }
        if (!json_is_array(v) || json_array_size(v) > max)
                return api_error_invalid(err, "field '%s' must be an array of at most %zu %s", field, max,
                                         what);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                int r = check(e, i, err);
                if (r < 0)
                        return r;
        }
        *ret = json_deep_copy(v);
        return *ret ? 0 : -ENOMEM;
}

static int check_method(const json_t *e, size_t i, char *err) {
        const char *m = json_string_value(e);
        size_t n = json_string_length(e);
        bool ok = m && n >= 1 && n <= 16;
        for (size_t k = 0; ok && k < n; k++)
                ok = m[k] >= 'A' && m[k] <= 'Z';
        if (!ok)
                return api_error_invalid(
                        err, "field 'methods[%zu]' must be an HTTP method in capitals (\"GET\")", i);
        return 0;
}

static int check_path(const json_t *e, size_t i, char *err) {
        const char *p = json_string_value(e);
        size_t n = json_string_length(e);
        if (!p || n == 0 || n > SECRETREQ_PATH_MAX || p[0] != '/' || !printable(p, n, false) || memchr(p, '?', n) ||
            memchr(p, '#', n))
                return api_error_invalid(
                        err,
                        "field 'paths[%zu]' must be a path prefix starting with '/' (no spaces, '?' "
                        "or '#', at most %d characters)",
                        i, SECRETREQ_PATH_MAX);
        /* the gateway compares requests' paths as the origin reads them
         * (credset_path_canonical()): a prefix is written so */
        char canon[SECRETREQ_PATH_MAX + 1];
        const char *why = NULL;
        if (credset_path_canonical(p, n, canon, sizeof canon, &why) < 0)
                return api_error_invalid(err, "field 'paths[%zu]' is refused: %s", i, why);
        if (strcmp(canon, p) != 0)
                return api_error_invalid(
                        err, "field 'paths[%zu]' must be written as requests are compared: \"%s\"", i,
                        canon);
        return 0;
}

static int digits(const char *s, int n, int *ret) {
        int v = 0;
        for (int i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (s[i] - '0');
        }
        *ret = v;
        return 0;
}

/* Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
        y -= m <= 2;
        int64_t era = (y >= 0 ? y : y - 399) / 400;
        unsigned yoe = (unsigned) (y - era * 400);
        unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + (int64_t) doe - 719468;
}

int secretreq_parse_rfc3339(const char *s, int64_t *ret) {
        static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
        int Y, M, D, h, m, sec;
        if (!s || strlen(s) < 20 || digits(s, 4, &Y) < 0 || s[4] != '-' || digits(s + 5, 2, &M) < 0 || s[7] != '-' ||
            digits(s + 8, 2, &D) < 0 || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || digits(s + 11, 2, &h) < 0 ||
            s[13] != ':' || digits(s + 14, 2, &m) < 0 || s[16] != ':' || digits(s + 17, 2, &sec) < 0)
                return -EINVAL;
        if (M < 1 || M > 12 || D < 1 || D > mdays[M - 1] || h > 23 || m > 59 || sec > 60)
                return -EINVAL;
        const char *p = s + 19;
        if (*p == '.') {
                p++;
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                while (*p >= '0' && *p <= '9')
                        p++;
        }
        int64_t off = 0;
        if ((*p == 'Z' || *p == 'z') && p[1] == 0)
                off = 0;
        else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
                int oh, om;
                if (digits(p + 1, 2, &oh) < 0 || digits(p + 4, 2, &om) < 0 || oh > 23 || om > 59)
                        return -EINVAL;
                off = (oh * 60 + om) * 60 * (*p == '+' ? 1 : -1);
        } else
                return -EINVAL;
        *ret = days_from_civil(Y, (unsigned) M, (unsigned) D) * 86400 + h * 3600 + m * 60 + sec - off;
        return 0;
}

static int parse_expiry(const json_t *v, int64_t now_s, int64_t *ret, char *err) {
        int64_t t = 0;
        if (!v || json_is_null(v)) {
                *ret = 0; /* never */
                return 0;
        }
        if (json_is_integer(v))
                t = json_integer_value(v);
        else if (!json_is_string(v) || secretreq_parse_rfc3339(json_string_value(v), &t) < 0)
                return api_error_invalid(err, "field 'expires_at' must be Unix seconds or an RFC 3339 time "
                                              "(\"2026-12-31T23:59:59Z\")");
        if (json_is_integer(v) && t == 0) {
                *ret = 0; /* never */
                return 0;
        }
        if (t <= now_s)
                return api_error_invalid(err, "field 'expires_at' is in the past");
        *ret = t;
        return 0;
}

static int opt_id(const json_t *o, const char *field, char **ret, char *err) {
        json_t *v = json_object_get(o, field);
        *ret = NULL;
        if (!v || json_is_null(v))
                return 0;
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        bool ok = s && n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++)
                ok = token_char(s[i]);
        if (!ok)
                return api_error_invalid(err, "field '%s' must be an id", field);
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

int secretreq_parse(const json_t *o, int64_t now_s, struct secretreq *ret, char *err) {
        _cleanup_(secretreq_release) struct secretreq q = { 0 };
        if (!json_is_object(o))
                return api_error_invalid(err, "the request body must be a JSON object");
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name || !credstore_name_is_valid(name) || strlen(name) != json_string_length(json_object_get(o, "name")))
                return api_error_invalid(
                        err, "field 'name' is required: 1-%d characters of a-z, 0-9, '_' and '-'",
                        CREDSTORE_NAME_MAX);
        json_t *v = json_object_get(o, "value");
        size_t vlen = json_string_length(v);
        if (!json_is_string(v) || vlen == 0 || vlen > CREDSTORE_VALUE_MAX)
                return api_error_invalid(err, "field 'value' is required: a string of 1-%d bytes",
                                         CREDSTORE_VALUE_MAX);
        /* the value goes into a header line: nothing there may end it */
        if (!credset_value_ok(json_string_value(v), vlen))
                return api_error_invalid(
                        err,
                        "field 'value' may not hold NUL, CR or LF, or another control character but tab");
        json_t *header = json_object_get(o, "header"), *basic = json_object_get(o, "basic");
        if (json_is_null(header))
                header = NULL;
        if (json_is_null(basic))
                basic = NULL;
        if (header && basic)
                return api_error_invalid(err, "give one of 'header' and 'basic', not both");
        _cleanup_(json_decrefp) json_t *hosts = NULL, *ports = NULL, *inject = NULL, *methods = NULL, *paths = NULL;
        int r;
        if ((r = parse_hosts(json_object_get(o, "hosts"), &hosts, err)) < 0 ||
            (r = parse_ports(json_object_get(o, "ports"), &ports, err)) < 0 ||
            (r = basic    ? parse_basic(basic, &inject, err)
                 : header ? parse_header(header, &inject, err)
                          : ((inject = json_pack("{s:s, s:s}", "header", "Authorization", "template", "Bearer {value}"))
                                     ? 0
                                     : -ENOMEM)) < 0 ||
            (r = parse_list(json_object_get(o, "methods"), "methods", SECRETREQ_METHODS_MAX, "methods", check_method,
                            &methods, err)) < 0 ||
            (r = parse_list(json_object_get(o, "paths"), "paths", SECRETREQ_PATHS_MAX, "path prefixes", check_path,
                            &paths, err)) < 0 ||
            (r = parse_expiry(json_object_get(o, "expires_at"), now_s, &q.expires_at, err)) < 0 ||
            (r = opt_id(o, "tenant", &q.tenant, err)) < 0 || (r = opt_id(o, "sandbox", &q.sandbox, err)) < 0)
                return r;
        json_t *rate = json_object_get(o, "rate_per_min");
        if (rate && !json_is_null(rate) &&
            (!json_is_integer(rate) || json_integer_value(rate) < 0 || json_integer_value(rate) > SECRETREQ_RATE_MAX))
                return api_error_invalid(err, "field 'rate_per_min' must be 0 (unlimited) to %d",
                                         SECRETREQ_RATE_MAX);
        q.spec = json_pack("{s:O, s:O, s:O, s:O, s:O, s:I}", "hosts", hosts, "ports", ports, "inject", inject,
                           "methods", methods, "paths", paths, "rate_per_min",
                           (json_int_t) (json_is_integer(rate) ? json_integer_value(rate) : 0));
        q.name = strdup(name);
        q.value = malloc(vlen + 1);
        if (!q.spec || !q.name || !q.value)
                return -ENOMEM;
        memcpy(q.value, json_string_value(v), vlen);
        q.value[vlen] = 0;
        q.value_len = vlen;
        *ret = q;
        q = (struct secretreq){ 0 };
        return 0;
}

void secretreq_release(struct secretreq *r) {
        if (!r)
                return;
        free(r->name);
        credstore_value_free(r->value, r->value_len);
        free(r->tenant);
        free(r->sandbox);
        json_decref(r->spec);
        *r = (struct secretreq){ 0 };
}

void secretreq_env_name(const char *name, char *out, size_t n) {
        size_t i = 0;
        for (; name[i] && i + 1 < n; i++) {
                char c = name[i];
                out[i] = c == '-' ? '_' : (c >= 'a' && c <= 'z') ? (char) (c - 'a' + 'A') : c;
        }
        out[i] = 0;
}

json_t *secretreq_credential(const char *name, const char *placeholder, const char *value, size_t value_len,
                             const char *spec_text, int64_t expires_at) {
        _cleanup_(json_decrefp) json_t *spec = json_loads(spec_text, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(spec))
                return NULL;
        json_t *o = json_pack("{s:s, s:s, s:s%, s:O, s:O, s:O, s:O, s:O, s:I, s:O}", "name", name, "placeholder",
                              placeholder, "value", value, value_len, "hosts", json_object_get(spec, "hosts"), "ports",
                              json_object_get(spec, "ports"), "inject", json_object_get(spec, "inject"), "methods",
                              json_object_get(spec, "methods"), "paths", json_object_get(spec, "paths"), "expires_at",
                              (json_int_t) expires_at, "rate_per_min", json_object_get(spec, "rate_per_min"));
        return o;
}
