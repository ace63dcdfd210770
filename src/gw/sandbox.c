/* SPDX-License-Identifier: Apache-2.0 */
/* One sandbox the gateway serves: its references, the names it may dial
 * (bindings), its network log and its bandwidth. */
#include "gw.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"

void gw_sandbox_ref(struct gw_sandbox *s) {
        s->refs++;
}

void gw_sandbox_conn_open(struct gw_sandbox *s) {
        gw_sandbox_ref(s);
        s->n_conns++;
}

void gw_sandbox_conn_close(struct gw_sandbox *s) {
        s->n_conns--;
        gw_sandbox_unref(s);
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

void gw_sandbox_bind(struct gw_sandbox *s, const char *name, struct in_addr addr, uint32_t ttl_s) {
        uint64_t expires = loop_now_ms() + 1000ull * MAX(ttl_s, (uint32_t) GW_BINDING_MIN_TTL_S);
        struct gw_binding *b = gw_binding_put(s, name, addr, expires);
        if (b)
                gw_state_binding(s, b);
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
        const struct gw_log_entry *e = gw_log_push(s, (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000,
                                                   dns, allowed, name, addr, port, reason);
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

static double bucket_depth(const struct gw_sandbox *s) {
        return MAX((double) s->gw->config.bandwidth / 4.0, (double) BUCKET_MIN_DEPTH);
}

static struct gw_bucket *bucket(struct gw_sandbox *s, bool up) {
        struct gw_bucket *b = up ? &s->up : &s->down;
        uint64_t now = loop_now_ms();
        if (b->at_ms == 0)
                b->tokens = bucket_depth(s);
        else
                b->tokens = MIN(bucket_depth(s), b->tokens + (double) (now - b->at_ms) * (double) s->gw->config.bandwidth / 1000.0);
        b->at_ms = now;
        return b;
}

size_t gw_bandwidth_allow(struct gw_sandbox *s, bool up, size_t want) {
        if (s->gw->config.bandwidth == 0)
                return want;
        double t = bucket(s, up)->tokens;
        return t < 1.0 ? 0 : (size_t) MIN((double) want, t);
}

void gw_bandwidth_take(struct gw_sandbox *s, bool up, size_t n) {
        if (s->gw->config.bandwidth != 0)
                bucket(s, up)->tokens -= (double) n;
}

uint64_t gw_bandwidth_wait_ms(struct gw_sandbox *s, bool up) {
        if (s->gw->config.bandwidth == 0)
                return 0;
        /* until a 4 KiB read fits: no wake-ups for a few bytes at a time */
        double need = 4096.0 - bucket(s, up)->tokens;
        return need <= 0 ? 0 : (uint64_t) (need * 1000.0 / (double) s->gw->config.bandwidth) + 1;
}

bool gw_bandwidth_may_read(struct gw_sandbox *s, bool up, struct loop_timer **timer, loop_timer_fn fn, void *userdata) {
        if (gw_bandwidth_allow(s, up, 1) > 0)
                return true;
        if (!*timer)
                (void) loop_timer_add(s->gw->loop, gw_bandwidth_wait_ms(s, up), fn, userdata, timer);
        return false;
}
