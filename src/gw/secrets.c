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

/* One credential checked by lib/credset, made ready to inject: hosts
 * canonical, the header's whole value built. */
static int make_one(const struct credset_entry *c, size_t i, struct gw_secret *s, char *msg, size_t n) {
        snprintf(s->name, sizeof s->name, "%s", c->name);
        snprintf(s->placeholder, sizeof s->placeholder, "%s", c->placeholder);
        for (size_t j = 0; j < c->n_hosts; j++) {
                const char *h = c->hosts[j];
                bool wild = strncmp(h, "*.", 2) == 0;
                if (gwname_canonical(h + (wild ? 2 : 0), strlen(h) - (wild ? 2 : 0), 0, s->hosts[j].name) < 0)
                        return bad(msg, n, i, "a host is not a host name");
                s->hosts[j].wildcard = wild;
        }
        s->n_hosts = c->n_hosts;
        memcpy(s->ports, c->ports, c->n_ports * sizeof *c->ports);
        s->n_ports = c->n_ports;
        for (size_t j = 0; j < c->n_methods; j++)
                snprintf(s->methods[j], sizeof s->methods[j], "%s", c->methods[j]);
        s->n_methods = c->n_methods;
        for (size_t j = 0; j < c->n_paths; j++)
                snprintf(s->paths[j], sizeof s->paths[j], "%s", c->paths[j]);
        s->n_paths = c->n_paths;
        s->expires_at_ms = (uint64_t) c->expires_at * 1000;
        s->rate_per_min = c->rate_per_min;
        s->tokens = s->rate_per_min;
        s->tokens_at_ms = wall_ms();
        snprintf(s->header, sizeof s->header, "%s", c->header);
        if (!(s->value = malloc(c->value_len + 1)))
                return -ENOMEM;
        memcpy(s->value, c->value, c->value_len + 1);
        s->value_len = c->value_len;
        if (c->user) {
                size_t raw_len = strlen(c->user) + 1 + c->value_len;
                _cleanup_free_ char *raw = malloc(raw_len + 1);
                if (!raw || !(s->encoded = malloc(4 * ((raw_len + 2) / 3) + 1)))
                        return -ENOMEM;
                snprintf(raw, raw_len + 1, "%s:%s", c->user, s->value);
                EVP_EncodeBlock((unsigned char *) s->encoded, (const unsigned char *) raw, (int) raw_len);
                OPENSSL_cleanse(raw, raw_len);
                if (asprintf(&s->header_value, "Basic %s", s->encoded) < 0) {
                        s->header_value = NULL;
                        return -ENOMEM;
                }
                return 0;
        }
        const char *at = strstr(c->template, "{value}");
        if (asprintf(&s->header_value, "%.*s%s%s", (int) (at - c->template), c->template, s->value,
                     at + strlen("{value}")) < 0) {
                s->header_value = NULL;
                return -ENOMEM;
        }
        return 0;
}

int gw_secrets_parse(json_t *a, struct gw_secret **ret, size_t *ret_n, char *msg, size_t n) {
        struct credset_entry set[CREDSET_MAX];
        size_t count;
        int r = credset_parse(a, set, &count, msg, n);
        if (r < 0)
                return r;
        struct gw_secret *v = calloc(count ? count : 1, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < count; i++) {
                r = make_one(&set[i], i, &v[i], msg, n);
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

bool gw_secrets_path_scoped(const struct gw_sandbox *sb, const char *host, uint16_t port) {
        for (size_t i = 0; i < sb->n_secrets; i++)
                if (sb->secrets[i].n_paths && gw_secret_binds(&sb->secrets[i], host, port))
                        return true;
        return false;
}

void gw_audit(const struct gw_sandbox *sb, const struct gw_secret *s, const char *host, uint16_t port,
              const char *method, const char *path, bool injected, const char *reason) {
        struct gw_audit_event *e = &audit[audit_next_seq % AUDIT_MAX];
        *e = (struct gw_audit_event){.seq = audit_next_seq++,
                                     .ts_ms = wall_ms(),
                                     .port = port,
                                     .action = injected ? GW_AUDIT_INJECTED : GW_AUDIT_REFUSED};
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

void gw_audit_denied(struct gw_sandbox *sb, const char *host, uint16_t port, const char *reason) {
        uint64_t now = wall_ms();
        if (sb->denied_at_ms && now >= sb->denied_at_ms && now - sb->denied_at_ms < GW_DENIED_EVERY_MS) {
                sb->denied_suppressed++;
                return;
        }
        struct gw_audit_event *e = &audit[audit_next_seq % AUDIT_MAX];
        *e = (struct gw_audit_event){.seq = audit_next_seq++,
                                     .ts_ms = now,
                                     .port = port,
                                     .action = GW_AUDIT_DENIED,
                                     .suppressed = sb->denied_suppressed};
        snprintf(e->sandbox, sizeof e->sandbox, "%s", sb->id);
        snprintf(e->host, sizeof e->host, "%s", host ? host : "");
        snprintf(e->reason, sizeof e->reason, "%s", reason);
        sb->denied_at_ms = now;
        sb->denied_suppressed = 0;
}

static const char *action_name(enum gw_audit_action a) {
        return a == GW_AUDIT_INJECTED ? "injected" : a == GW_AUDIT_REFUSED ? "refused" : "denied";
}

json_t *gw_audit_read(uint64_t after, size_t limit) {
        json_t *a = json_array();
        uint64_t first = audit_next_seq > AUDIT_MAX ? audit_next_seq - AUDIT_MAX : 1;
        uint64_t seq = MAX(after + 1, first);
        for (; a && seq < audit_next_seq && json_array_size(a) < limit; seq++) {
                const struct gw_audit_event *e = &audit[seq % AUDIT_MAX];
                json_t *o = json_pack("{sI sI ss ss ss si ss ss ss ss}", "seq", (json_int_t) e->seq, "ts_ms",
                                      (json_int_t) e->ts_ms, "sandbox", e->sandbox, "secret", e->secret,
                                      "host", e->host, "port", (int) e->port, "method", e->method, "path",
                                      e->path, "action", action_name(e->action), "reason", e->reason);
                if (o && e->action == GW_AUDIT_DENIED)
                        json_object_set_new(o, "suppressed", json_integer(e->suppressed));
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
