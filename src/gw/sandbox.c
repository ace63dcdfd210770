/* SPDX-License-Identifier: Apache-2.0 */
/* The sandboxes the gateway serves: sockets, policy, bindings, log. */
#include "gw.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"

static struct gw_sandbox *sandboxes;

struct gw_sandbox *gw_sandbox_find(const char *id) {
        for (struct gw_sandbox *s = sandboxes; s; s = s->next)
                if (strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

size_t gw_sandbox_count(void) {
        size_t n = 0;
        for (struct gw_sandbox *s = sandboxes; s; s = s->next)
                n++;
        return n;
}

void gw_sandbox_ref(struct gw_sandbox *s) {
        s->refs++;
}

void gw_sandbox_unref(struct gw_sandbox *s) {
        if (!s || --s->refs > 0)
                return;
        gw_state_close(s);
        netpolicy_free(s->policy);
        gw_secrets_free(s->secrets, s->n_secrets);
        free(s->bindings);
        free(s->log);
        free(s);
}

int gw_sandbox_attach(const char *id, unsigned execution, struct netpolicy *policy, int tcp_fd, int dns_fd) {
        struct gw_sandbox *old = gw_sandbox_find(id);
        if (old)
                gw_sandbox_detach(old);
        struct gw_sandbox *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->bindings = calloc(GW_BINDINGS_MAX, sizeof *s->bindings);
        s->log = calloc(GW_LOG_MAX, sizeof *s->log);
        if (!s->bindings || !s->log) {
                free(s->bindings);
                free(s->log);
                free(s);
                return -ENOMEM;
        }
        snprintf(s->id, sizeof s->id, "%s", id);
        s->execution = execution;
        s->policy = policy;
        s->tcp_fd = tcp_fd;
        s->dns_fd = dns_fd;
        s->refs = 1;
        s->dns_tokens = 2 * GW_DNS_QPS;
        s->dns_tokens_at = loop_now_ms();
        gw_state_open(s); /* what a gateway before this one decided for it */
        int r = loop_watch_add(gw_loop, tcp_fd, EPOLLIN, gw_relay_accept, s, &s->tcp_watch);
        if (r >= 0)
                r = loop_watch_add(gw_loop, dns_fd, EPOLLIN, gw_dns_readable, s, &s->dns_watch);
        if (r < 0) {
                loop_watch_remove(s->tcp_watch);
                s->policy = NULL; /* the caller's still */
                gw_sandbox_unref(s);
                return r;
        }
        s->next = sandboxes;
        sandboxes = s;
        log_info("sandbox %s execution %u attached (%s)", id, execution,
                 netpolicy_mode_to_string(netpolicy_mode(policy)));
        return 0;
}

void gw_sandbox_set_policy(struct gw_sandbox *s, struct netpolicy *policy) {
        netpolicy_free(s->policy);
        s->policy = policy;
        log_info("sandbox %s: new policy (%s)", s->id, netpolicy_mode_to_string(netpolicy_mode(policy)));
}

/* Open connections and queries see detached and end; the memory goes with
 * the last of them. */
void gw_sandbox_detach(struct gw_sandbox *s) {
        for (struct gw_sandbox **p = &sandboxes; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        break;
                }
        s->detached = true;
        gw_relay_close_all(s);
        loop_watch_remove(s->tcp_watch);
        loop_watch_remove(s->dns_watch);
        s->tcp_watch = s->dns_watch = NULL;
        s->tcp_fd = safe_close(s->tcp_fd);
        s->dns_fd = safe_close(s->dns_fd);
        gw_state_close(s); /* the journal stays for the next attachment */
        log_info("sandbox %s detached", s->id);
        gw_sandbox_unref(s);
}

/* The binding of (name, addr), made or lengthened to expires_ms; NULL when
 * it already lasted as long. */
static struct gw_binding *binding_put(struct gw_sandbox *s, const char *name, struct in_addr addr,
                                      uint64_t expires_ms) {
        for (size_t i = 0; i < s->n_bindings; i++) {
                struct gw_binding *b = &s->bindings[i];
                if (b->addr.s_addr == addr.s_addr && strcmp(b->name, name) == 0) {
                        if (b->expires_ms >= expires_ms)
                                return NULL;
                        b->expires_ms = expires_ms;
                        return b;
                }
        }
        /* a ring: the oldest binding makes room */
        struct gw_binding *b = &s->bindings[s->next_binding];
        s->next_binding = (s->next_binding + 1) % GW_BINDINGS_MAX;
        if (s->n_bindings < GW_BINDINGS_MAX)
                s->n_bindings++;
        snprintf(b->name, sizeof b->name, "%s", name);
        b->addr = addr;
        b->expires_ms = expires_ms;
        return b;
}

void gw_sandbox_bind(struct gw_sandbox *s, const char *name, struct in_addr addr, uint32_t ttl_s) {
        uint64_t expires = loop_now_ms() + 1000ull * MAX(ttl_s, (uint32_t) GW_BINDING_MIN_TTL_S);
        struct gw_binding *b = binding_put(s, name, addr, expires);
        if (b)
                gw_state_binding(s, b);
}

void gw_binding_restore(struct gw_sandbox *s, const char *name, struct in_addr addr, uint64_t expires_ms) {
        (void) binding_put(s, name, addr, expires_ms);
}

bool gw_sandbox_bound(struct gw_sandbox *s, const char *name, struct in_addr addr) {
        uint64_t now = loop_now_ms();
        for (size_t i = 0; i < s->n_bindings; i++) {
                const struct gw_binding *b = &s->bindings[i];
                if (b->addr.s_addr == addr.s_addr && b->expires_ms > now && strcmp(b->name, name) == 0)
                        return true;
        }
        return false;
}

void gw_sandbox_log(struct gw_sandbox *s, bool dns, bool allowed, const char *name, struct in_addr addr,
                    uint16_t port, const char *reason) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct gw_log_entry *e = &s->log[s->next_log];
        s->next_log = (s->next_log + 1) % GW_LOG_MAX;
        if (s->n_log < GW_LOG_MAX)
                s->n_log++;
        *e = (struct gw_log_entry){
                .ts_ms = (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000,
                .dns = dns,
                .allowed = allowed,
                .addr = addr,
                .port = port,
        };
        snprintf(e->name, sizeof e->name, "%s", name ? name : "");
        snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
        gw_state_log(s, e);
        char a[INET_ADDRSTRLEN] = "";
        if (addr.s_addr)
                inet_ntop(AF_INET, &addr, a, sizeof a);
        log_emit(allowed ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, NULL, "sandbox=%s %s %s name=%s addr=%s port=%u: %s",
                 s->id, dns ? "dns" : "tcp", allowed ? "allowed" : "denied", e->name[0] ? e->name : "-",
                 a[0] ? a : "-", (unsigned) port, e->reason);
}

/* ---- bandwidth ---- */

#define BUCKET_MIN_DEPTH (64u << 10)

static double bucket_depth(void) {
        return MAX((double) gw_config.bandwidth / 4.0, (double) BUCKET_MIN_DEPTH);
}

static struct gw_bucket *bucket(struct gw_sandbox *s, bool up) {
        struct gw_bucket *b = up ? &s->up : &s->down;
        uint64_t now = loop_now_ms();
        if (b->at_ms == 0)
                b->tokens = bucket_depth();
        else
                b->tokens = MIN(bucket_depth(), b->tokens + (double) (now - b->at_ms) * (double) gw_config.bandwidth / 1000.0);
        b->at_ms = now;
        return b;
}

size_t gw_bandwidth_allow(struct gw_sandbox *s, bool up, size_t want) {
        if (gw_config.bandwidth == 0)
                return want;
        double t = bucket(s, up)->tokens;
        return t < 1.0 ? 0 : (size_t) MIN((double) want, t);
}

void gw_bandwidth_take(struct gw_sandbox *s, bool up, size_t n) {
        if (gw_config.bandwidth != 0)
                bucket(s, up)->tokens -= (double) n;
}

uint64_t gw_bandwidth_wait_ms(struct gw_sandbox *s, bool up) {
        if (gw_config.bandwidth == 0)
                return 0;
        /* until a 4 KiB read fits: no wake-ups for a few bytes at a time */
        double need = 4096.0 - bucket(s, up)->tokens;
        return need <= 0 ? 0 : (uint64_t) (need * 1000.0 / (double) gw_config.bandwidth) + 1;
}
