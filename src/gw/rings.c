/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's bindings and network log in memory: two rings, of
 * GW_BINDINGS_MAX and GW_LOG_MAX, filled as it runs (sandbox.c) and from
 * its journal (state.c). */
#include "gw.h"

#include <stdio.h>

struct gw_binding *gw_binding_put(struct gw_sandbox *s, const char *name, struct in_addr addr, uint64_t expires_ms) {
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

const struct gw_log_entry *gw_log_push(struct gw_sandbox *s, uint64_t ts_ms, bool dns, bool allowed, const char *name,
                                       struct in_addr addr, uint16_t port, const char *reason) {
        struct gw_log_entry *e = &s->log[s->next_log];
        s->next_log = (s->next_log + 1) % GW_LOG_MAX;
        if (s->n_log < GW_LOG_MAX)
                s->n_log++;
        *e = (struct gw_log_entry){
                .ts_ms = ts_ms,
                .dns = dns,
                .allowed = allowed,
                .addr = addr,
                .port = port,
        };
        snprintf(e->name, sizeof e->name, "%s", name ? name : "");
        snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
        return e;
}
