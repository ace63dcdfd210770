/* SPDX-License-Identifier: Apache-2.0 */
#include "dataplane.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apierror.h"
#include "cap-keydir.h"
#include "config.h"
#include "log.h"
#include "nodeclient.h"
#include "nodes.h"
#include "util.h"

/* How the tenant of admin-owned sandboxes appears in capabilities (the
 * node's SANDBOX_TENANT_ADMIN). */
#define ADMIN_TENANT "admin"
/* Route cache slots: a sandbox hashes to one; a collision evicts (the cost
 * is one sandbox.get). */
#define ROUTE_SLOTS 4096
#define RESOLVE_TIMEOUT_S 10

struct route {
        char sandbox[CAP_ID_MAX + 1]; /* "" = empty slot */
        char node[CAP_ID_MAX + 1];
        uint64_t execution;
        char addr[NODES_ADDR_MAX]; /* where that node is reached (nodes.h) */
};

static pthread_mutex_t signer_lock = PTHREAD_MUTEX_INITIALIZER; /* guards signer, signer_kid */
static struct cap_keyring *signer;
static char signer_kid[CAP_KID_MAX + 1];
static void (*key_publisher)(void *userdata); /* guarded by signer_lock, as its userdata */
static void *key_publisher_userdata;

static pthread_mutex_t routes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct route routes[ROUTE_SLOTS];

int dataplane_init(const struct daemon_config *config) {
        struct cap_keyring *kr;
        char kid[CAP_KID_MAX + 1];
        int r = cap_keydir_load_signer(config->cap_keys_dir, &kr, kid);
        if (r < 0)
                return log_error_errno(r, "Failed to load the capability signing key from %s: %m",
                                       config->cap_keys_dir);
        pthread_mutex_lock(&signer_lock);
        cap_keyring_free(signer);
        signer = kr;
        memcpy(signer_kid, kid, sizeof kid);
        pthread_mutex_unlock(&signer_lock);
        log_info("capabilities signed with key %s (%s)", kid, config->cap_keys_dir);
        return 0;
}

void dataplane_done(void) {
        pthread_mutex_lock(&signer_lock);
        cap_keyring_free(signer);
        signer = NULL;
        pthread_mutex_unlock(&signer_lock);
}

int dataplane_rotate_key(const struct daemon_config *config, char kid[CAP_KID_MAX + 1],
                         char previous[CAP_KID_MAX + 1]) {
        /* one rotation at a time; issuing waits the few ms it takes */
        pthread_mutex_lock(&signer_lock);
        int r = cap_keydir_rotate(config->cap_keys_dir, kid, previous);
        /* in a cluster the new key reaches the store before it signs: a
         * node refuses a capability whose key it cannot fetch */
        if (r >= 0 && key_publisher)
                key_publisher(key_publisher_userdata);
        struct cap_keyring *kr = NULL;
        char loaded[CAP_KID_MAX + 1];
        if (r >= 0)
                r = cap_keydir_load_signer(config->cap_keys_dir, &kr, loaded);
        if (r >= 0) {
                cap_keyring_free(signer);
                signer = kr;
                memcpy(signer_kid, loaded, sizeof loaded);
        }
        pthread_mutex_unlock(&signer_lock);
        if (r < 0)
                return log_error_errno(r, "Capability key rotation failed: %m");
        log_info("capability key rotated: %s signs now, %s still verifies", kid, previous[0] ? previous : "(none)");
        return 0;
}

void dataplane_set_key_publisher(void (*publish)(void *userdata), void *userdata) {
        pthread_mutex_lock(&signer_lock);
        key_publisher = publish;
        key_publisher_userdata = userdata;
        pthread_mutex_unlock(&signer_lock);
}

void dataplane_current_kid(char kid[CAP_KID_MAX + 1]) {
        pthread_mutex_lock(&signer_lock);
        memcpy(kid, signer_kid, CAP_KID_MAX + 1);
        pthread_mutex_unlock(&signer_lock);
}

/* ---- routes ---- */

static struct route *slot(const char *sandbox) {
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const char *p = sandbox; *p; p++)
                h = (h ^ (uint8_t) *p) * 16777619u;
        return &routes[h % ROUTE_SLOTS];
}

static bool route_from_json(const char *sandbox, const json_t *o, struct route *ret) {
        json_t *exe = json_object_get(o, "execution"), *node = json_object_get(o, "node");
        if (!json_is_integer(exe) || json_integer_value(exe) < 0 || !json_is_string(node) ||
            !name_is_valid(json_string_value(node)) || strlen(sandbox) > CAP_ID_MAX)
                return false;
        *ret = (struct route){ .execution = (uint64_t) json_integer_value(exe) };
        snprintf(ret->sandbox, sizeof ret->sandbox, "%s", sandbox);
        snprintf(ret->node, sizeof ret->node, "%s", json_string_value(node));
        return true;
}

void dataplane_route_learn(const char *sandbox, const char *node_addr, const json_t *node_sandbox) {
        struct route rt;
        if (!route_from_json(sandbox, node_sandbox, &rt))
                return;
        snprintf(rt.addr, sizeof rt.addr, "%s", node_addr);
        pthread_mutex_lock(&routes_lock);
        *slot(sandbox) = rt;
        pthread_mutex_unlock(&routes_lock);
}

void dataplane_route_forget(const char *sandbox) {
        pthread_mutex_lock(&routes_lock);
        struct route *s = slot(sandbox);
        if (strcmp(s->sandbox, sandbox) == 0)
                *s = (struct route){ 0 };
        pthread_mutex_unlock(&routes_lock);
}

/* Asks the node where sandbox runs now. stale (may be NULL): the route a
 * node just refused; the cache takes the new one only if it still holds
 * that one (or nothing for this sandbox). */
static int route_resolve(const struct daemon_config *config, const char *sandbox, const struct route *stale,
                         struct route *ret, char *err) {
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "sandbox.get", "id", sandbox);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        char addr[NODES_ADDR_MAX];
        int r = req ? nodes_addr_of_id(sandbox, addr) : -ENOMEM;
        if (r >= 0)
                r = node_call(addr, RESOLVE_TIMEOUT_S, req, &rep, err);
        if (r < 0)
                return r;
        struct route rt;
        if (!route_from_json(sandbox, json_object_get(rep, "sandbox"), &rt)) {
                snprintf(err, API_ERRMSG_MAX, "the node agent did not say where sandbox %s runs", sandbox);
                return -EBADMSG;
        }
        snprintf(rt.addr, sizeof rt.addr, "%s", addr);
        pthread_mutex_lock(&routes_lock);
        struct route *s = slot(sandbox);
        bool mine = strcmp(s->sandbox, sandbox) == 0;
        if (!mine || !stale || (strcmp(s->node, stale->node) == 0 && s->execution == stale->execution))
                *s = rt;
        pthread_mutex_unlock(&routes_lock);
        *ret = rt;
        return 0;
}

static int route_get(const struct daemon_config *config, const char *sandbox, struct route *ret, char *err) {
        pthread_mutex_lock(&routes_lock);
        struct route *s = slot(sandbox);
        bool hit = strcmp(s->sandbox, sandbox) == 0;
        if (hit)
                *ret = *s;
        pthread_mutex_unlock(&routes_lock);
        return hit ? 0 : route_resolve(config, sandbox, NULL, ret, err);
}

/* ---- requests ---- */

static int attach_capability(const char *tenant_id, const struct route *rt, uint32_t access, uint16_t port,
                             json_t *req) {
        struct cap_claims c = {
                .execution = rt->execution,
                .access = access,
                .issued_at = (int64_t) time(NULL),
                .port = port,
        };
        if (port)
                snprintf(c.protocol, sizeof c.protocol, "http");
        snprintf(c.tenant, sizeof c.tenant, "%s", tenant_id ? tenant_id : ADMIN_TENANT);
        snprintf(c.sandbox, sizeof c.sandbox, "%s", rt->sandbox);
        snprintf(c.node, sizeof c.node, "%s", rt->node);
        char *token = NULL;
        pthread_mutex_lock(&signer_lock);
        int r = signer ? cap_issue(signer, signer_kid, &c, &token) : -ENOKEY;
        pthread_mutex_unlock(&signer_lock);
        if (r < 0)
                return log_error_errno(r, "Cannot issue a capability for sandbox %s: %m", rt->sandbox);
        r = json_object_set_new(req, "cap", json_string(token)) < 0 ? -ENOMEM : 0;
        free(token);
        return r;
}

static int send_with_capability(const struct daemon_config *config, const char *tenant_id, const struct route *rt,
                                uint32_t access, uint16_t port, json_t *req, unsigned timeout_s,
                                struct node_conn **ret, char *err) {
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        int r = attach_capability(tenant_id, rt, access, port, req);
        if (r < 0)
                return r;
        if ((r = node_conn_open(rt->addr, timeout_s, &c)) < 0) {
                snprintf(err, API_ERRMSG_MAX, "the node agent is not reachable");
                return r;
        }
        if ((r = node_conn_send_request(c, req)) < 0) {
                snprintf(err, API_ERRMSG_MAX, "failed to send the request to the node agent");
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int dataplane_call(const struct daemon_config *config, const char *tenant_id, const char *sandbox, uint32_t access,
                   json_t *req, unsigned timeout_s, struct node_conn **ret_conn, json_t **ret_reply, char *err) {
        if (!req)
                return -ENOMEM;
        struct route rt;
        int r = route_get(config, sandbox, &rt, err);
        for (int attempt = 0; r >= 0; attempt++) {
                _cleanup_(node_conn_freep) struct node_conn *c = NULL;
                json_t *rep = NULL;
                r = send_with_capability(config, tenant_id, &rt, access, 0, req, timeout_s, &c, err);
                if (r >= 0)
                        r = node_conn_read_reply(c, &rep, err);
                /* the sandbox runs another execution now, or its node at
                 * the cached address cannot be reached (a wake through
                 * another replica placed it elsewhere): learn where, and
                 * try once more with a new capability */
                bool unreached = !c && (r == -EHOSTDOWN || r == -ECONNREFUSED);
                if ((r == -ESTALE || unreached) && attempt == 0) {
                        struct route stale = rt;
                        log_debug("route of sandbox %s refreshed (was execution %llu on %s)", sandbox,
                                  (unsigned long long) stale.execution, stale.node);
                        r = route_resolve(config, sandbox, &stale, &rt, err);
                        continue;
                }
                if (r < 0)
                        break;
                if (ret_reply)
                        *ret_reply = rep;
                else
                        json_decref(rep);
                if (ret_conn)
                        *ret_conn = TAKE_PTR(c);
                return 0;
        }
        json_object_del(req, "cap");
        return r;
}

/* A request whose reply comes after a body: sent for a route resolved just
 * now (it cannot be replayed on refresh_route). */
static int open_streaming(const struct daemon_config *config, const char *tenant_id, const char *sandbox,
                          uint32_t access, uint16_t port, json_t *req, struct node_conn **ret_conn, char *err) {
        if (!req)
                return -ENOMEM;
        struct route rt;
        int r = route_resolve(config, sandbox, NULL, &rt, err);
        if (r < 0)
                return r;
        return send_with_capability(config, tenant_id, &rt, access, port, req, config->node_timeout_s, ret_conn,
                                    err);
}

int dataplane_open_upload(const struct daemon_config *config, const char *tenant_id, const char *sandbox,
                          uint32_t access, json_t *req, struct node_conn **ret_conn, char *err) {
        return open_streaming(config, tenant_id, sandbox, access, 0, req, ret_conn, err);
}

int dataplane_open_port(const struct daemon_config *config, const char *tenant_id, const char *sandbox,
                        uint16_t port, json_t *req, struct node_conn **ret_conn, char *err) {
        return open_streaming(config, tenant_id, sandbox, CAP_ACCESS_PORTS, port, req, ret_conn, err);
}
