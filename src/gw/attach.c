/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of the sandboxes the gateway serves (struct gw's list):
 * attach wires a sandbox's sockets into the loop (relay.c takes its TCP
 * connections, dns.c its queries), detach ends them. */
#include "gw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"

struct gw_sandbox *gw_sandbox_find(struct gw *gw, const char *id) {
        for (struct gw_sandbox *s = gw->sandboxes; s; s = s->next)
                if (strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

size_t gw_sandbox_count(const struct gw *gw) {
        size_t n = 0;
        for (const struct gw_sandbox *s = gw->sandboxes; s; s = s->next)
                n++;
        return n;
}

int gw_sandbox_attach(struct gw *gw, const char *id, unsigned execution, struct netpolicy *policy, int tcp_fd,
                      int dns_fd) {
        struct gw_sandbox *old = gw_sandbox_find(gw, id);
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
        s->gw = gw;
        snprintf(s->id, sizeof s->id, "%s", id);
        s->execution = execution;
        s->policy = policy;
        s->tcp_fd = tcp_fd;
        s->dns_fd = dns_fd;
        s->refs = 1;
        s->dns_tokens = 2 * GW_DNS_QPS;
        s->dns_tokens_at = loop_now_ms();
        gw_state_open(s); /* what a gateway before this one decided for it */
        int r = loop_watch_add(gw->loop, tcp_fd, EPOLLIN, gw_relay_accept, s, &s->tcp_watch);
        if (r >= 0)
                r = loop_watch_add(gw->loop, dns_fd, EPOLLIN, gw_dns_readable, s, &s->dns_watch);
        if (r < 0) {
                loop_watch_remove(s->tcp_watch);
                s->policy = NULL; /* the caller's still */
                gw_sandbox_unref(s);
                return r;
        }
        s->next = gw->sandboxes;
        gw->sandboxes = s;
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
        for (struct gw_sandbox **p = &s->gw->sandboxes; *p; p = &(*p)->next)
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
