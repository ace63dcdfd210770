/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The credentials a sandbox may use (docs/network.md, "Credentials"): the
 * node hands them over (control.c, op "secrets") from airlockd's encrypted
 * store; they live here, in memory only, and go into requests the gateway
 * terminated (tlsterm.c) for the hosts, ports, methods and paths they are
 * bound to, at the moment of the request. Every use and every refusal is an
 * audit event, read by the node (op "audit"); never with the value.
 */
#include "gw.h"

#include <errno.h>
#include <fnmatch.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gwname.h"
#include "log.h"
#include "macros.h"

#define AUDIT_MAX 4096

static struct gw_audit_event audit[AUDIT_MAX];
static uint64_t audit_next_seq = 1; /* the seq of the next event */

static uint64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

void gw_secrets_free(struct gw_secret *v, size_t n) {
        for (size_t i = 0; v && i < n; i++) {
                if (v[i].value) {
                        OPENSSL_cleanse(v[i].value, v[i].value_len);
                        free(v[i].value);
                }
                if (v[i].header_value) {
                        OPENSSL_cleanse(v[i].header_value, strlen(v[i].header_value));
                        free(v[i].header_value);
                }
                if (v[i].encoded) {
                        OPENSSL_cleanse(v[i].encoded, strlen(v[i].encoded));
                        free(v[i].encoded);
                }
        }
        free(v);
}

static int bad(char *msg, size_t n, size_t i, const char *what) {
        snprintf(msg, n, "secrets[%zu]: %s", i, what);
        return -EINVAL;
}

static bool token_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               strchr("!#$%&'*+-.^_`|~", c);
}

/* A string array of at most max entries, each 1..len_max bytes. */
static int string_array(json_t *a, size_t max, size_t len_max, size_t *ret_n) {
        if (!a) {
                *ret_n = 0;
                return 0;
        }
        if (!json_is_array(a) || json_array_size(a) > max)
                return -EINVAL;
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v) if (!json_is_string(v) || json_string_length(v) == 0 ||
                                        json_string_length(v) > len_max) return -EINVAL;
        *ret_n = json_array_size(a);
        return 0;
}

static int parse_one(json_t *o, size_t i, struct gw_secret *s, char *msg, size_t n) {
        static const char *const keys[] = {"name",   "placeholder", "value", "hosts",      "ports",
                                           "inject", "methods",     "paths", "expires_at", "rate_per_min"};
        const char *k;
        json_t *v;
        if (!json_is_object(o))
                return bad(msg, n, i, "not an object");
        json_object_foreach(o, k, v) {
                bool known = false;
                for (size_t j = 0; j < ARRAY_SIZE(keys) && !known; j++)
                        known = strcmp(k, keys[j]) == 0;
                if (!known)
                        return bad(msg, n, i, "unknown key");
        }
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name || !*name || strlen(name) >= sizeof s->name)
                return bad(msg, n, i, "name missing or too long");
        snprintf(s->name, sizeof s->name, "%s", name);
        const char *ph = json_string_value(json_object_get(o, "placeholder"));
        if (!ph || strlen(ph) < 16 || strlen(ph) >= sizeof s->placeholder)
                return bad(msg, n, i, "placeholder missing or of a bad length");
        snprintf(s->placeholder, sizeof s->placeholder, "%s", ph);
        json_t *val = json_object_get(o, "value");
        size_t vlen = json_is_string(val) ? json_string_length(val) : 0;
        if (vlen == 0 || vlen > GW_SECRET_VALUE_MAX || memchr(json_string_value(val), 0, vlen))
                return bad(msg, n, i, "value missing, too long or holding NUL");
        size_t nh, nm, npa;
        if (string_array(json_object_get(o, "hosts"), GW_SECRET_HOSTS_MAX, GWNAME_MAX + 2, &nh) < 0 ||
            nh == 0)
                return bad(msg, n, i, "hosts must be 1..16 names");
        for (size_t j = 0; j < nh; j++) {
                const char *h = json_string_value(json_array_get(json_object_get(o, "hosts"), j));
                bool wild = strncmp(h, "*.", 2) == 0;
                if (gwname_canonical(h + (wild ? 2 : 0), strlen(h) - (wild ? 2 : 0), 0, s->hosts[j].name) <
                    0)
                        return bad(msg, n, i, "a host is not a host name");
                s->hosts[j].wildcard = wild;
        }
        s->n_hosts = nh;
        json_t *ports = json_object_get(o, "ports");
        if (ports && (!json_is_array(ports) || json_array_size(ports) > GW_SECRET_PORTS_MAX))
                return bad(msg, n, i, "ports must be at most 8 numbers");
        for (size_t j = 0; ports && j < json_array_size(ports); j++) {
                json_t *p = json_array_get(ports, j);
                if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535)
                        return bad(msg, n, i, "a port is out of range");
                s->ports[s->n_ports++] = (uint16_t) json_integer_value(p);
        }
        if (s->n_ports == 0)
                s->ports[s->n_ports++] = 443;
        if (string_array(json_object_get(o, "methods"), GW_SECRET_METHODS_MAX, sizeof s->methods[0] - 1,
                         &nm) < 0 ||
            string_array(json_object_get(o, "paths"), GW_SECRET_PATHS_MAX, sizeof s->paths[0] - 1, &npa) < 0)
                return bad(msg, n, i, "methods or paths malformed");
        for (size_t j = 0; j < nm; j++)
                snprintf(s->methods[j], sizeof s->methods[j], "%s",
                         json_string_value(json_array_get(json_object_get(o, "methods"), j)));
        for (size_t j = 0; j < npa; j++) {
                const char *p = json_string_value(json_array_get(json_object_get(o, "paths"), j));
                if (p[0] != '/')
                        return bad(msg, n, i, "a path must start with /");
                snprintf(s->paths[j], sizeof s->paths[j], "%s", p);
        }
        s->n_methods = nm;
        s->n_paths = npa;
        json_t *exp = json_object_get(o, "expires_at"), *rate = json_object_get(o, "rate_per_min");
        if ((exp && (!json_is_integer(exp) || json_integer_value(exp) < 0)) ||
            (rate &&
             (!json_is_integer(rate) || json_integer_value(rate) < 0 || json_integer_value(rate) > 1000000)))
                return bad(msg, n, i, "expires_at or rate_per_min malformed");
        s->expires_at_ms = exp ? (uint64_t) json_integer_value(exp) * 1000 : 0;
        s->rate_per_min = rate ? (unsigned) json_integer_value(rate) : 0;
        s->tokens = s->rate_per_min;
        s->tokens_at_ms = wall_ms();

        json_t *inj = json_object_get(o, "inject");
        const char *hname = json_string_value(json_object_get(inj, "header"));
        const char *tmpl = json_string_value(json_object_get(inj, "template"));
        const char *user = json_string_value(json_object_get(inj, "basic"));
        if (!json_is_object(inj) || json_object_size(inj) != (user ? 1u : 2u) ||
            (!user && (!hname || !tmpl)))
                return bad(msg, n, i, "inject must be {header, template} or {basic}");
        if (user) {
                if (strlen(user) > 256 || strchr(user, ':'))
                        return bad(msg, n, i, "a basic user is at most 256 bytes, without ':'");
                hname = "Authorization";
        }
        if (!*hname || strlen(hname) >= sizeof s->header)
                return bad(msg, n, i, "header name missing or too long");
        for (const char *c = hname; *c; c++)
                if (!token_char(*c))
                        return bad(msg, n, i, "header name is not a token");
        snprintf(s->header, sizeof s->header, "%s", hname);
        if (!(s->value = malloc(vlen + 1)))
                return -ENOMEM;
        memcpy(s->value, json_string_value(val), vlen + 1);
        s->value_len = vlen;
        if (user) {
                size_t raw_len = strlen(user) + 1 + vlen;
                _cleanup_free_ char *raw = malloc(raw_len + 1);
                if (!raw || !(s->encoded = malloc(4 * ((raw_len + 2) / 3) + 1)))
                        return -ENOMEM;
                snprintf(raw, raw_len + 1, "%s:%s", user, s->value);
                EVP_EncodeBlock((unsigned char *) s->encoded, (const unsigned char *) raw, (int) raw_len);
                OPENSSL_cleanse(raw, raw_len);
                if (asprintf(&s->header_value, "Basic %s", s->encoded) < 0) {
                        s->header_value = NULL;
                        return -ENOMEM;
                }
                return 0;
        }
        const char *at = strstr(tmpl, "{value}");
        if (!at || strstr(at + 1, "{value}") || strlen(tmpl) > 1024)
                return bad(msg, n, i, "the template must hold {value} exactly once (at most 1 KiB)");
        if (asprintf(&s->header_value, "%.*s%s%s", (int) (at - tmpl), tmpl, s->value,
                     at + strlen("{value}")) < 0) {
                s->header_value = NULL;
                return -ENOMEM;
        }
        /* no CR, LF or other control byte may split the request head */
        for (const char *c = s->header_value; *c; c++)
                if ((unsigned char) *c < 0x20 && *c != '\t')
                        return bad(msg, n, i, "the header value would hold a control character");
        return 0;
}

int gw_secrets_parse(json_t *a, struct gw_secret **ret, size_t *ret_n, char *msg, size_t n) {
        if (!json_is_array(a) || json_array_size(a) > GW_SECRETS_MAX) {
                snprintf(msg, n, "secrets must be an array of at most %d", GW_SECRETS_MAX);
                return -EINVAL;
        }
        size_t count = json_array_size(a);
        struct gw_secret *v = calloc(count ? count : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < count; i++) {
                int r = parse_one(json_array_get(a, i), i, &v[i], msg, n);
                if (r < 0) {
                        gw_secrets_free(v, count);
                        return r;
                }
        }
        *ret = v;
        *ret_n = count;
        return 0;
}

static bool host_matches(const struct gw_secret *s, const char *host) {
        for (size_t i = 0; i < s->n_hosts; i++) {
                if (!s->hosts[i].wildcard) {
                        if (strcmp(host, s->hosts[i].name) == 0)
                                return true;
                        continue;
                }
                size_t hl = strlen(host), sl = strlen(s->hosts[i].name);
                if (hl > sl + 1 && host[hl - sl - 1] == '.' && strcmp(host + hl - sl, s->hosts[i].name) == 0)
                        return true;
        }
        return false;
}

static bool on_port(const struct gw_secret *s, uint16_t port) {
        for (size_t j = 0; j < s->n_ports; j++)
                if (s->ports[j] == port)
                        return true;
        return false;
}

bool gw_secret_binds(const struct gw_secret *s, const char *host, uint16_t port) {
        return on_port(s, port) && host_matches(s, host);
}

bool gw_secrets_on_port(const struct gw_sandbox *sb, uint16_t port) {
        for (size_t i = 0; i < sb->n_secrets; i++)
                if (on_port(&sb->secrets[i], port))
                        return true;
        return false;
}

bool gw_secrets_for_host(const struct gw_sandbox *sb, const char *host, uint16_t port) {
        for (size_t i = 0; i < sb->n_secrets; i++)
                if (gw_secret_binds(&sb->secrets[i], host, port))
                        return true;
        return false;
}

void gw_audit(const struct gw_sandbox *sb, const struct gw_secret *s, const char *host, uint16_t port,
              const char *method, const char *path, bool injected, const char *reason) {
        struct gw_audit_event *e = &audit[audit_next_seq % AUDIT_MAX];
        *e = (struct gw_audit_event){
                .seq = audit_next_seq++, .ts_ms = wall_ms(), .port = port, .injected = injected};
        snprintf(e->sandbox, sizeof e->sandbox, "%s", sb->id);
        snprintf(e->secret, sizeof e->secret, "%s", s ? s->name : "");
        snprintf(e->host, sizeof e->host, "%s", host ? host : "");
        snprintf(e->method, sizeof e->method, "%s", method ? method : "");
        /* the path without its query: a query may carry anything */
        snprintf(e->path, sizeof e->path, "%.*s", path ? (int) strcspn(path, "?") : 0, path ? path : "");
        snprintf(e->reason, sizeof e->reason, "%s", reason);
        log_info("sandbox=%s credential %s for %s:%u %s %s: %s", sb->id, e->secret, e->host, (unsigned) port,
                 e->method, injected ? "injected" : "refused", reason);
}

json_t *gw_audit_read(uint64_t after, size_t limit) {
        json_t *a = json_array();
        uint64_t first = audit_next_seq > AUDIT_MAX ? audit_next_seq - AUDIT_MAX : 1;
        uint64_t seq = MAX(after + 1, first);
        for (; a && seq < audit_next_seq && json_array_size(a) < limit; seq++) {
                const struct gw_audit_event *e = &audit[seq % AUDIT_MAX];
                json_t *o =
                        json_pack("{sI sI ss ss ss si ss ss ss ss}", "seq", (json_int_t) e->seq, "ts_ms",
                                  (json_int_t) e->ts_ms, "sandbox", e->sandbox, "secret", e->secret, "host",
                                  e->host, "port", (int) e->port, "method", e->method, "path", e->path,
                                  "action", e->injected ? "injected" : "refused", "reason", e->reason);
                if (o)
                        json_array_append_new(a, o);
        }
        return json_pack("{sosI}", "events", a, "next", (json_int_t) (seq - 1));
}

/* Whether the credential may go into this request now; why not otherwise. */
static const char *refusal(struct gw_secret *s, const char *method, const char *path) {
        uint64_t now = wall_ms();
        if (s->expires_at_ms && now >= s->expires_at_ms)
                return "the credential has expired";
        if (s->n_methods) {
                bool ok = false;
                for (size_t i = 0; i < s->n_methods && !ok; i++)
                        ok = strcasecmp(s->methods[i], method) == 0;
                if (!ok)
                        return "the method is not one the credential is bound to";
        }
        if (s->n_paths) {
                bool ok = false;
                for (size_t i = 0; i < s->n_paths && !ok; i++)
                        ok = strncmp(path, s->paths[i], strlen(s->paths[i])) == 0;
                if (!ok)
                        return "the path is not one the credential is bound to";
        }
        if (s->rate_per_min) {
                double per_ms = s->rate_per_min / 60000.0;
                s->tokens =
                        MIN((double) s->rate_per_min, s->tokens + (double) (now - s->tokens_at_ms) * per_ms);
                s->tokens_at_ms = now;
                if (s->tokens < 1.0)
                        return "the credential's rate limit is reached";
                s->tokens -= 1.0;
        }
        return NULL;
}

struct gw_secret *gw_secrets_pick(struct gw_sandbox *sb, const char *host, uint16_t port, const char *method,
                                  const char *path, const char **ret_refusal) {
        *ret_refusal = NULL;
        for (size_t i = 0; i < sb->n_secrets; i++) {
                struct gw_secret *s = &sb->secrets[i];
                if (!gw_secret_binds(s, host, port))
                        continue;
                const char *why = refusal(s, method, path);
                if (why) {
                        *ret_refusal = why;
                        gw_audit(sb, s, host, port, method, path, false, why);
                        continue;
                }
                return s;
        }
        return NULL;
}
