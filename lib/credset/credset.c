/* SPDX-License-Identifier: Apache-2.0 */
#include "credset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "macros.h"

static int bad(char *err, size_t n, const char *fmt, ...) _printf_(3, 4);
static int bad(char *err, size_t n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (err && n)
                vsnprintf(err, n, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A string of 1..max bytes; with ok, every byte accepted by it. */
static const char *string(const json_t *v, size_t max, bool (*ok)(unsigned char)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!s || n == 0 || n > max)
                return NULL;
        for (size_t i = 0; ok && i < n; i++)
                if (!ok((unsigned char) s[i]))
                        return NULL;
        return s;
}

static bool name_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static bool hex_char(unsigned char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static bool host_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static bool method_char(unsigned char c) {
        return c >= 'A' && c <= 'Z';
}

static bool path_char(unsigned char c) {
        return c > 0x20 && c < 0x7f && c != '?' && c != '#';
}

/* in a header line: printable, spaces and tabs; nothing that ends it */
static bool line_char(unsigned char c) {
        return (c >= 0x20 && c != 0x7f) || c == '\t';
}

static bool header_char(unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool credset_value_ok(const char *value, size_t n) {
        if (!value || n == 0 || n > CREDSET_VALUE_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!line_char((unsigned char) value[i]))
                        return false;
        return true;
}

bool credset_header_name_ok(const char *name, size_t n) {
        static const char *const reserved[] = { "host",       "content-length", "transfer-encoding",
                                                "connection", "upgrade",        "te",
                                                "trailer",    "keep-alive",     "proxy-connection",
                                                "expect" };
        if (!name || n == 0 || n > CREDSET_HEADER_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!header_char((unsigned char) name[i]))
                        return false;
        for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
                if (strlen(reserved[i]) == n && strncasecmp(reserved[i], name, n) == 0)
                        return false;
        return true;
}

/* An optional array of at most max strings of 1..len each accepted by ok. */
static bool strings(const json_t *v, size_t max, size_t len, bool (*ok)(unsigned char), const char **out,
                    size_t *ret_n) {
        *ret_n = 0;
        if (!v)
                return true;
        if (!json_is_array(v) || json_array_size(v) > max)
                return false;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                if (!(out[i] = string(e, len, ok)))
                        return false;
        }
        *ret_n = json_array_size(v);
        return true;
}

static int parse_inject(const json_t *v, struct credset_entry *c, char *err, size_t n, size_t i) {
        if (!json_is_object(v))
                return bad(err, n, "secrets[%zu].inject must be {\"header\",\"template\"} or {\"basic\"}", i);
        if (json_object_size(v) == 1 && json_object_get(v, "basic")) {
                const json_t *u = json_object_get(v, "basic");
                if (!(c->user = string(u, CREDSET_USER_MAX, line_char)) || strchr(c->user, ':'))
                        return bad(err, n, "secrets[%zu].inject.basic must be a user of 1-%d characters without ':'",
                                   i, CREDSET_USER_MAX);
                c->header = "Authorization";
                return 0;
        }
        const json_t *h = json_object_get(v, "header"), *t = json_object_get(v, "template");
        if (json_object_size(v) != 2 || !h || !t)
                return bad(err, n, "secrets[%zu].inject must be {\"header\",\"template\"} or {\"basic\"}", i);
        if (!credset_header_name_ok(json_string_value(h), json_string_length(h)))
                return bad(err, n, "secrets[%zu].inject.header must be a header name the gateway may set", i);
        c->header = json_string_value(h);
        c->template = string(t, CREDSET_TEMPLATE_MAX, line_char);
        const char *at = c->template ? strstr(c->template, "{value}") : NULL;
        if (!at || strstr(at + 1, "{value}"))
                return bad(err, n, "secrets[%zu].inject.template must hold {value} exactly once (at most %d bytes)",
                           i, CREDSET_TEMPLATE_MAX);
        return 0;
}

static int parse_entry(const json_t *o, size_t i, struct credset_entry *c, char *err, size_t n) {
        static const char *const known[] = { "name",   "placeholder", "value", "hosts",      "ports",
                                             "inject", "methods",     "paths", "expires_at", "rate_per_min" };
        *c = (struct credset_entry){ 0 };
        if (!json_is_object(o))
                return bad(err, n, "secrets[%zu] must be an object", i);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                bool found = false;
                for (size_t j = 0; j < ARRAY_SIZE(known) && !found; j++)
                        found = strcmp(k, known[j]) == 0;
                if (!found)
                        return bad(err, n, "secrets[%zu]: unknown field", i);
        }
        if (!(c->name = string(json_object_get(o, "name"), CREDSET_NAME_MAX, name_char)))
                return bad(err, n, "secrets[%zu].name must be [a-z0-9_-]{1,%d}", i, CREDSET_NAME_MAX);
        const char *ph = json_string_value(json_object_get(o, "placeholder"));
        if (!ph || json_string_length(json_object_get(o, "placeholder")) != CREDSET_PLACEHOLDER_LEN ||
            strncmp(ph, CREDSET_PLACEHOLDER_PREFIX, strlen(CREDSET_PLACEHOLDER_PREFIX)) != 0 ||
            !string(json_object_get(o, "placeholder"), CREDSET_PLACEHOLDER_LEN, NULL))
                return bad(err, n, "secrets[%zu].placeholder must be %s and 32 hex digits", i,
                           CREDSET_PLACEHOLDER_PREFIX);
        for (size_t j = strlen(CREDSET_PLACEHOLDER_PREFIX); j < CREDSET_PLACEHOLDER_LEN; j++)
                if (!hex_char((unsigned char) ph[j]))
                        return bad(err, n, "secrets[%zu].placeholder must be %s and 32 hex digits", i,
                                   CREDSET_PLACEHOLDER_PREFIX);
        c->placeholder = ph;
        const json_t *val = json_object_get(o, "value");
        if (!credset_value_ok(json_string_value(val), json_string_length(val)) || !(c->value = json_string_value(val)))
                return bad(err, n, "secrets[%zu].value must be 1-%d bytes without control characters", i,
                           CREDSET_VALUE_MAX);
        c->value_len = json_string_length(val);
        if (!strings(json_object_get(o, "hosts"), CREDSET_HOSTS_MAX, CREDSET_HOST_MAX, NULL, c->hosts, &c->n_hosts) ||
            c->n_hosts == 0)
                return bad(err, n, "secrets[%zu].hosts must be 1-%d lowercase host names", i, CREDSET_HOSTS_MAX);
        for (size_t j = 0; j < c->n_hosts; j++) {
                const char *h = c->hosts[j];
                size_t from = strncmp(h, "*.", 2) == 0 ? 2 : 0;
                bool ok = h[from] != '\0';
                for (size_t x = from; ok && h[x]; x++)
                        ok = host_char((unsigned char) h[x]);
                if (!ok)
                        return bad(err, n, "secrets[%zu].hosts[%zu] must be a lowercase host name or *.name", i, j);
        }
        const json_t *ports = json_object_get(o, "ports");
        if (ports) {
                if (!json_is_array(ports) || json_array_size(ports) < 1 || json_array_size(ports) > CREDSET_PORTS_MAX)
                        return bad(err, n, "secrets[%zu].ports must be 1-%d port numbers", i, CREDSET_PORTS_MAX);
                size_t j;
                json_t *p;
                json_array_foreach(ports, j, p) {
                        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535)
                                return bad(err, n, "secrets[%zu].ports[%zu] must be 1..65535", i, j);
                        c->ports[c->n_ports++] = (uint16_t) json_integer_value(p);
                }
        } else
                c->ports[c->n_ports++] = 443;
        int r = parse_inject(json_object_get(o, "inject"), c, err, n, i);
        if (r < 0)
                return r;
        if (!strings(json_object_get(o, "methods"), CREDSET_METHODS_MAX, CREDSET_METHOD_MAX, method_char, c->methods,
                     &c->n_methods))
                return bad(err, n, "secrets[%zu].methods must be at most %d methods in capitals", i,
                           CREDSET_METHODS_MAX);
        if (!strings(json_object_get(o, "paths"), CREDSET_PATHS_MAX, CREDSET_PATH_MAX, path_char, c->paths,
                     &c->n_paths))
                return bad(err, n, "secrets[%zu].paths must be at most %d path prefixes", i, CREDSET_PATHS_MAX);
        for (size_t j = 0; j < c->n_paths; j++) {
                char canon[CREDSET_PATH_MAX + 1];
                const char *why = NULL;
                if (c->paths[j][0] != '/')
                        return bad(err, n, "secrets[%zu].paths[%zu] must start with '/'", i, j);
                /* compared with requests' canonical paths: written so */
                if (credset_path_canonical(c->paths[j], strlen(c->paths[j]), canon, sizeof canon, &why) < 0 ||
                    strcmp(canon, c->paths[j]) != 0)
                        return bad(err, n,
                                   "secrets[%zu].paths[%zu] must be a canonical path (no dot segments, ';', '\\' "
                                   "or escapes of '/', '\\' or unreserved characters; escapes in capitals)",
                                   i, j);
        }
        const json_t *e = json_object_get(o, "expires_at"), *rate = json_object_get(o, "rate_per_min");
        if (e && (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT64_MAX / 1000))
                return bad(err, n, "secrets[%zu].expires_at must be Unix seconds", i);
        if (rate && (!json_is_integer(rate) || json_integer_value(rate) < 0 ||
                     json_integer_value(rate) > CREDSET_RATE_MAX))
                return bad(err, n, "secrets[%zu].rate_per_min must be 0..%d", i, CREDSET_RATE_MAX);
        c->expires_at = e ? (int64_t) json_integer_value(e) : 0;
        c->rate_per_min = rate ? (unsigned) json_integer_value(rate) : 0;
        return 0;
}

int credset_parse(const json_t *a, struct credset_entry ret[CREDSET_MAX], size_t *ret_n, char *err, size_t n) {
        if (!json_is_array(a) || json_array_size(a) > CREDSET_MAX)
                return bad(err, n, "secrets must be an array of at most %d credentials", CREDSET_MAX);
        size_t i;
        json_t *o;
        json_array_foreach(a, i, o) {
                int r = parse_entry(o, i, &ret[i], err, n);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(ret[j].name, ret[i].name) == 0 || strcmp(ret[j].placeholder, ret[i].placeholder) == 0)
                                return bad(err, n, "secrets[%zu] repeats the name or placeholder of secrets[%zu]", i,
                                           j);
        }
        *ret_n = json_array_size(a);
        return 0;
}
