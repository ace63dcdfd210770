/* SPDX-License-Identifier: Apache-2.0 */
#include "cli-net.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "macros.h"

static int bad(char *err, const char *fmt, ...) _printf_(2, 3);
static int bad(char *err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, CLI_NET_ERR_MAX, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

void cli_net_done(struct cli_net *n) {
        free(n->mode);
        json_decref(n->allow);
        json_decref(n->deny);
        *n = (struct cli_net){ 0 };
}

bool cli_net_given(const struct cli_net *n) {
        return n->mode || n->allow || n->deny;
}

/* One port, 1..65535, decimal digits only. */
static int port_parse(const char *s, size_t len, json_int_t *ret) {
        if (len == 0 || len > 5)
                return -EINVAL;
        json_int_t v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* "P" or "P,P,...": a new array of ports. */
static int ports_parse(const char *s, const char *flag, const char *arg, json_t **ret, char *err) {
        _cleanup_(json_decrefp) json_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (const char *p = s;;) {
                const char *e = strchrnul(p, ',');
                json_int_t port;
                if (port_parse(p, (size_t) (e - p), &port) < 0)
                        return bad(err, "%s: '%s': a port is a number from 1 to 65535", flag, arg);
                if (json_array_append_new(a, json_integer(port)) < 0)
                        return -ENOMEM;
                if (!*e)
                        break;
                p = e + 1;
        }
        *ret = TAKE_PTR(a);
        return 0;
}

static int rules_append(json_t *list, json_t *rule) {
        return json_array_append_new(list, rule) < 0 ? -ENOMEM : 0;
}

/* "a.org,b.org:8080": one host rule per item. */
static int hosts_add(json_t *list, const char *flag, const char *arg, char *err) {
        for (const char *p = arg;;) {
                const char *e = strchrnul(p, ',');
                const char *colon = memchr(p, ':', (size_t) (e - p));
                size_t hlen = (size_t) ((colon ? colon : e) - p);
                if (hlen == 0)
                        return bad(err, "%s: '%s': an empty host name", flag, arg);
                json_t *rule = json_pack("{s:s%}", "host", p, hlen);
                if (!rule)
                        return bad(err, "%s: '%s': not UTF-8", flag, arg);
                if (colon) {
                        json_int_t port;
                        if (port_parse(colon + 1, (size_t) (e - colon - 1), &port) < 0) {
                                json_decref(rule);
                                return bad(err, "%s: '%s': a port is a number from 1 to 65535", flag, arg);
                        }
                        json_object_set_new(rule, "ports", json_pack("[I]", port));
                }
                int r = rules_append(list, rule);
                if (r < 0)
                        return r;
                if (!*e)
                        return 0;
                p = e + 1;
        }
}

/*
 * One cidr rule: where the ports start is what makes IPv6 readable. With a
 * '/', they follow the first ':' after it; "[addr]:ports" for a bare IPv6
 * address; a bare address with one ':' is IPv4 with ports, with more it is
 * IPv6 without.
 */
static int cidr_add(json_t *list, const char *flag, const char *arg, char *err) {
        const char *start = arg, *end, *ports = NULL;
        const char *slash = strchr(arg, '/');
        if (arg[0] == '[') {
                const char *close = strchr(arg, ']');
                if (!close || (close[1] && close[1] != ':'))
                        return bad(err, "%s: '%s': expected [ADDRESS] or [ADDRESS]:PORT", flag, arg);
                start = arg + 1;
                end = close;
                ports = close[1] ? close + 2 : NULL;
        } else if (slash) {
                const char *colon = strchr(slash, ':');
                end = colon ? colon : slash + strlen(slash);
                ports = colon ? colon + 1 : NULL;
        } else {
                const char *colon = strchr(arg, ':');
                bool one = colon && !strchr(colon + 1, ':');
                end = one ? colon : arg + strlen(arg);
                ports = one ? colon + 1 : NULL;
        }
        if (end == start)
                return bad(err, "%s: '%s': an empty range", flag, arg);
        json_t *rule = json_pack("{s:s%}", "cidr", start, (size_t) (end - start));
        if (!rule)
                return bad(err, "%s: '%s': not UTF-8", flag, arg);
        if (ports) {
                json_t *a = NULL;
                int r = ports_parse(ports, flag, arg, &a, err);
                if (r < 0) {
                        json_decref(rule);
                        return r;
                }
                json_object_set_new(rule, "ports", a);
        }
        return rules_append(list, rule);
}

/* Adds the rules of one flag to *list, all or none. */
static int rules_add(json_t **list, bool cidr, const char *flag, const char *arg, char *err) {
        _cleanup_(json_decrefp) json_t *add = json_array();
        if (!add)
                return -ENOMEM;
        int r = cidr ? cidr_add(add, flag, arg, err) : hosts_add(add, flag, arg, err);
        if (r < 0)
                return r;
        if ((*list ? json_array_size(*list) : 0) + json_array_size(add) > CLI_NET_RULES_MAX)
                return bad(err, "%s: more than %d rules", flag, CLI_NET_RULES_MAX);
        if (!*list) {
                *list = TAKE_PTR(add);
                return 0;
        }
        return json_array_extend(*list, add) < 0 ? -ENOMEM : 0;
}

int cli_net_add(struct cli_net *n, enum cli_net_flag flag, const char *arg, char *err) {
        switch (flag) {
        case CLI_NET_MODE:
                if (n->mode)
                        return bad(err, "--net: given twice");
                if (strcmp(arg, "allow-all") != 0 && strcmp(arg, "deny-all") != 0 && strcmp(arg, "allowlist") != 0)
                        return bad(err, "--net: '%s': expected allow-all, deny-all or allowlist", arg);
                return (n->mode = strdup(arg)) ? 0 : -ENOMEM;
        case CLI_NET_ALLOW:
                return rules_add(&n->allow, false, "--allow", arg, err);
        case CLI_NET_DENY:
                return rules_add(&n->deny, false, "--deny", arg, err);
        case CLI_NET_ALLOW_CIDR:
                return rules_add(&n->allow, true, "--allow-cidr", arg, err);
        case CLI_NET_DENY_CIDR:
                return rules_add(&n->deny, true, "--deny-cidr", arg, err);
        }
        return -EINVAL;
}

int cli_net_policy(const struct cli_net *n, json_t **ret) {
        if (!cli_net_given(n))
                return -ENODATA;
        json_t *o = json_object();
        if (!o)
                return -ENOMEM;
        /* no mode with allow rules: the API makes it an allowlist */
        if ((n->mode && json_object_set_new(o, "mode", json_string(n->mode)) < 0) ||
            (n->allow && json_object_set(o, "allow", n->allow) < 0) ||
            (n->deny && json_object_set(o, "deny", n->deny) < 0)) {
                json_decref(o);
                return -ENOMEM;
        }
        *ret = o;
        return 0;
}

/* "80,443", or "all ports" for none. */
static void ports_print(const json_t *ports, FILE *f) {
        if (!json_is_array(ports) || json_array_size(ports) == 0) {
                fputs("all ports", f);
                return;
        }
        fputs("ports ", f);
        size_t i;
        json_t *p;
        json_array_foreach(ports, i, p) fprintf(f, "%s%" JSON_INTEGER_FORMAT, i ? "," : "", json_integer_value(p));
}

static void rules_print(const char *what, const json_t *rules, FILE *f) {
        size_t i;
        json_t *rule;
        json_array_foreach(rules, i, rule) {
                const char *host = json_string_value(json_object_get(rule, "host"));
                const char *cidr = json_string_value(json_object_get(rule, "cidr"));
                fprintf(f, "%-5s  %s  %-30s  ", what, host ? "host" : "cidr", host ?: cidr ?: "?");
                ports_print(json_object_get(rule, "ports"), f);
                fputc('\n', f);
        }
}

int cli_net_print(const json_t *policy, FILE *f) {
        const char *mode = json_string_value(json_object_get(policy, "mode"));
        if (!mode)
                return -EBADMSG;
        fprintf(f, "mode: %s\n", mode);
        rules_print("allow", json_object_get(policy, "allow"), f);
        rules_print("deny", json_object_get(policy, "deny"), f);
        return 0;
}

#define LOG_COLS 5

/* One entry's cells: time (UTC), kind, destination, action, reason. */
static int log_row(const json_t *e, char *cells[LOG_COLS]) {
        json_int_t ms = json_integer_value(json_object_get(e, "ts_ms"));
        time_t t = (time_t) (ms / 1000);
        struct tm tm;
        char when[40] = "-";
        if (ms > 0 && gmtime_r(&t, &tm)) {
                size_t k = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
                snprintf(when + k, sizeof when - k, ".%03dZ", (int) (ms % 1000));
        }
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *addr = json_string_value(json_object_get(e, "addr"));
        json_int_t port = json_integer_value(json_object_get(e, "port"));
        const char *dest = name ?: addr ?: "-";
        bool v6 = !name && addr && strchr(addr, ':');
        char *d = NULL;
        int n = port > 0 ? asprintf(&d, v6 ? "[%s]:%" JSON_INTEGER_FORMAT : "%s:%" JSON_INTEGER_FORMAT, dest, port)
                         : asprintf(&d, "%s", dest);
        if (n < 0)
                return -ENOMEM;
        cells[0] = strdup(when);
        cells[1] = strdup(json_string_value(json_object_get(e, "kind")) ?: "-");
        cells[2] = d;
        cells[3] = strdup(json_string_value(json_object_get(e, "action")) ?: "-");
        cells[4] = strdup(json_string_value(json_object_get(e, "reason")) ?: "-");
        for (size_t i = 0; i < LOG_COLS; i++)
                if (!cells[i])
                        return -ENOMEM;
        return 0;
}

int cli_net_log_print(const json_t *log, FILE *f) {
        static const char *const header[LOG_COLS] = { "TIME", "KIND", "DESTINATION", "ACTION", "REASON" };
        const json_t *entries = json_object_get(log, "entries");
        if (!json_is_array(entries))
                return -EBADMSG;
        size_t n = json_array_size(entries);
        char **cells = calloc(n * LOG_COLS + 1, sizeof *cells);
        if (!cells)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = log_row(json_array_get(entries, i), cells + i * LOG_COLS);
        if (r >= 0)
                r = cli_fprint_table(f, LOG_COLS, header, cells, n);
        for (size_t i = 0; i < n * LOG_COLS; i++)
                free(cells[i]);
        free(cells);
        return r;
}
