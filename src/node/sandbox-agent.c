/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's guest agent brought up to the node's own, in place (layer 3;
 * docs/guest-protocol.md, "Upgrades"). The node's agent is
 * AIRLOCK_GUEST_BINARY, its version what `airlock-guest --version`
 * prints, read once. A sandbox whose agent is older and has the "upgrade"
 * feature gets it: the binary staged with FILE_WRITE in the guest's /run
 * (a tmpfs only root writes), then UPGRADE, which the new agent answers.
 * A failure leaves the old agent running and says why in the sandbox's
 * "agent" (upgrade_error).
 *
 * It happens when asked (sandbox.agent.upgrade) and by itself: every
 * UPGRADER_INTERVAL_MS a worker looks for running sandboxes that are due
 * (older agent, idle for AIRLOCK_AGENT_UPGRADE_IDLE seconds, no request
 * waiting on the guest, no verb running, no failed try at this same
 * agent) and upgrades them one at a time, so a node with a new agent
 * does not upgrade all its sandboxes at once. The upgrade is housekeeping:
 * the sandbox is as idle after it as before.
 */
#include "sandbox-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "guestconn.h"
#include "guestops.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "proto.h"
#include "util.h"
#include "worker.h"

/* In the guest's /run (tmpfs, root's 0755), where the agent's run dir is. */
#define AGENT_STAGED_PATH "/run/airlock/airlock-guest.staged"
#define AGENT_BINARY_MAX (64u << 20)
#define AGENT_STAGE_MS 60000
/* the agent's check of the new one takes up to 10 s, the exec little */
#define AGENT_UPGRADE_MS 30000
#define UPGRADER_INTERVAL_MS 5000

static pthread_once_t node_agent_once = PTHREAD_ONCE_INIT;
static char *node_agent; /* "airlock-guest 0.2.0"; NULL when it cannot be read */
static struct worker *upgrader;

static void node_agent_read(void) {
        const char *bin = sandbox_mgr()->cfg->guest_binary;
        int r = node_program_version(bin, &node_agent);
        if (r < 0 || strncmp(node_agent, "airlock-guest ", strlen("airlock-guest ")) != 0) {
                log_errno(LOG_LEVEL_WARN, r < 0 ? r : -ENOEXEC, NULL,
                          "cannot tell the version of the guest agent %s (%m): sandboxes' agents are not upgraded",
                          bin);
                free(node_agent);
                node_agent = NULL;
        }
}

const char *sandbox_agent_node(void) {
        pthread_once(&node_agent_once, node_agent_read);
        return node_agent;
}

/* Stages the node's agent in g's guest and has the agent replace itself.
 * idle_ms (< 0: unknown) is given back to the guest. 0 with the new
 * agent's name in new_agent, or the failure and why. */
static int upgrade_guest(struct guestconn *g, int64_t idle_ms, char new_agent[static GUESTCONN_AGENT_MAX],
                         char **ret_error) {
        _cleanup_free_ char *data = NULL, *msg = NULL;
        size_t len;
        const char *bin = sandbox_mgr()->cfg->guest_binary;
        int r = file_read_all(bin, AGENT_BINARY_MAX, &data, &len);
        if (r < 0) {
                *ret_error = strdup_printf("reading %s: %s", bin, strerror(-r));
                return r;
        }
        uint64_t used = guestconn_used_ns(g);
        r = guestops_file_put(g, AGENT_STAGED_PATH, 0700, data, len, AGENT_STAGE_MS, &msg);
        if (r < 0) {
                *ret_error = strdup_printf("staging the agent at %s: %s", AGENT_STAGED_PATH, msg ?: strerror(-r));
                return r;
        }
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s}", "path", AGENT_STAGED_PATH), *res = NULL;
        if (req && idle_ms >= 0 && json_object_set_new(req, "idle_ms", json_integer((json_int_t) idle_ms)) < 0)
                req = (json_decref(req), NULL);
        r = req ? guestconn_call(g, PROTO_UPGRADE, req, AGENT_UPGRADE_MS, &res, &msg) : -ENOMEM;
        /* staging the binary was no use of the sandbox */
        guestconn_used_restore(g, used);
        if (r < 0) {
                *ret_error = strdup(msg ?: strerror(-r));
                return r;
        }
        guestconn_agent_replaced(g, res);
        guestconn_agent(g, new_agent);
        return 0;
}

int sandbox_agent_upgrade(struct sandbox *s, const char **ret_state, char **ret_error) {
        const char *node = sandbox_agent_node();
        if (!node) {
                *ret_error = strdup_printf("the node cannot tell the version of its guest agent %s",
                                           sandbox_mgr()->cfg->guest_binary);
                return -ENOEXEC;
        }
        int r = sandbox_life_begin(s, SANDBOX_RUNNING, SANDBOX_RUNNING, ret_state);
        if (r < 0)
                return r;
        struct guestconn *g = NULL;
        char agent[GUESTCONN_AGENT_MAX], new_agent[GUESTCONN_AGENT_MAX] = "";
        r = sandbox_guest(s, &g);
        if (r < 0) {
                sandbox_life_end(s);
                *ret_error = strdup("its guest channel is down");
                return r;
        }
        guestconn_agent(g, agent);
        if (node_agent_version_cmp(agent, node) >= 0) {
                sandbox_life_end(s);
                return 0; /* as new as the node's, or newer: nothing to do */
        }
        if (!guestconn_has(g, GUESTCONN_FEATURE_UPGRADE)) {
                sandbox_life_end(s);
                *ret_error = strdup_printf("its agent (%s) predates upgrades in place: it runs as it is until the "
                                           "sandbox is deleted",
                                           agent[0] ? agent : "unnamed");
                return -EOPNOTSUPP;
        }
        pthread_mutex_lock(&s->lock);
        int64_t idle_ms = sandbox_idle_ms_locked(s);
        s->agent_upgrade_ns = now_monotonic_ns();
        pthread_mutex_unlock(&s->lock);

        uint64_t t0 = now_monotonic_ns();
        _cleanup_free_ char *why = NULL;
        r = upgrade_guest(g, idle_ms, new_agent, &why);
        uint64_t ms = (now_monotonic_ns() - t0) / 1000000ULL;
        pthread_mutex_lock(&s->lock);
        free(s->agent_upgrade_error);
        s->agent_upgrade_error = NULL;
        if (r >= 0)
                snprintf(s->agent, sizeof s->agent, "%s", new_agent);
        else {
                s->agent_upgrade_error = why ? strdup(why) : NULL;
                /* an agent that was busy (its file system frozen, a file
                 * transfer open) is asked again later; one that failed is not */
                if (r != -EBUSY)
                        snprintf(s->agent_upgrade_to, sizeof s->agent_upgrade_to, "%s", node);
        }
        pthread_mutex_unlock(&s->lock);
        sandbox_life_end(s);
        if (r < 0) {
                log_emit(LOG_LEVEL_WARN, s->ctx, "guest agent upgrade from %s to %s failed after %llu ms: %s", agent,
                         node, (unsigned long long) ms, why ?: strerror(-r));
                if (ret_error)
                        *ret_error = TAKE_PTR(why);
                return r == -ETIMEDOUT || r == -EBUSY ? r : -EIO;
        }
        log_emit(LOG_LEVEL_INFO, s->ctx, "guest agent upgraded from %s to %s in %llu ms", agent, new_agent,
                 (unsigned long long) ms);
        return 0;
}

/* Whether the worker should upgrade s now. */
static bool upgrade_due(struct sandbox *s, const char *node, uint64_t idle_ms_min) {
        pthread_mutex_lock(&s->lock);
        struct guestconn *g = s->state == SANDBOX_RUNNING && !s->life_busy && !s->deleted ? s->gc : NULL;
        int64_t idle = g ? sandbox_idle_ms_locked(s) : -1;
        bool tried = strcmp(s->agent_upgrade_to, node) == 0;
        char agent[GUESTCONN_AGENT_MAX] = "";
        if (g)
                guestconn_agent(g, agent);
        pthread_mutex_unlock(&s->lock);
        return g && !tried && idle >= 0 && (uint64_t) idle >= idle_ms_min && agent[0] &&
               node_agent_version_cmp(agent, node) < 0 && guestconn_has(g, GUESTCONN_FEATURE_UPGRADE) &&
               guestconn_calls_in_flight(g) == 0;
}

static int upgrader_pass(void *arg) {
        uint64_t idle_ms_min = (uint64_t) sandbox_mgr()->cfg->agent_upgrade_idle_s * 1000ULL;
        const char *node = sandbox_agent_node();
        struct sandbox **all = NULL;
        size_t n = 0;
        if (!node || sandbox_reg_all(false, &all, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (upgrade_due(all[i], node, idle_ms_min)) {
                        const char *state;
                        _cleanup_free_ char *error = NULL;
                        (void) sandbox_agent_upgrade(all[i], &state, &error);
                }
                sandbox_unref(all[i]);
        }
        free(all);
        return 0;
}

int sandbox_agent_upgrader_start(void) {
        if (sandbox_mgr()->cfg->agent_upgrade_idle_s == 0)
                return 0;
        return worker_start(upgrader_pass, NULL, UPGRADER_INTERVAL_MS, WORKER_WAIT_FIRST, &upgrader);
}

void sandbox_agent_upgrader_stop(void) {
        worker_stop(upgrader);
        upgrader = NULL;
}
