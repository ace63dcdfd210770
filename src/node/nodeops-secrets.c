/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The credential ops of docs/node-protocol.md: sandbox.secrets.set (the set
 * the gateway injects for a sandbox: kept in memory only, handed to the
 * gateway when the sandbox has a VM), sandbox.secrets.get (the names the
 * node holds: never a value), and audit.read (the gateway's audit events,
 * with the node's boot id, by which airlockd notices a node that restarted
 * and lost the sets).
 */
#include "nodeops-ops.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "credset.h"
#include "gwclient.h"
#include "log.h"
#include "macros.h"
#include "nodeutil.h"
#include "sandbox.h"
#include "util.h"

#define AUDIT_READ_MAX 1000

static pthread_once_t boot_once = PTHREAD_ONCE_INIT;
static char boot_id[33];

static void boot_id_init(void) {
        uint8_t b[16];
        randombytes_buf(b, sizeof b);
        sodium_bin2hex(boot_id, sizeof boot_id, b, sizeof b);
}

const char *nodeops_boot_id(void) {
        pthread_once(&boot_once, boot_id_init);
        return boot_id;
}

static int req_sandbox(struct node_conn *c, json_t *req, struct sandbox **ret) {
        const char *id = json_string_value(json_object_get(req, "id"));
        if (!id || !name_is_valid(id))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"id\" must be a sandbox id");
        if (sandbox_get(id, ret) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s", (*ret)->ctx);
        return 0;
}

/* The names of a set's credentials (each an object with a "name"). */
static json_t *set_names(const json_t *set) {
        json_t *names = json_array();
        size_t i;
        json_t *o;
        json_array_foreach(set, i, o) if (names) json_array_append(names, json_object_get(o, "name"));
        return names;
}

int nodeops_secrets_set(struct node_conn *c, json_t *req) {
        json_t *set = json_object_get(req, "secrets");
        char err[256] = "";
        struct credset_entry parsed[CREDSET_MAX];
        size_t n;
        if (credset_parse(set, parsed, &n, err, sizeof err) < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "%s", err);
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = req_sandbox(c, req, &s);
        if (r < 0)
                return r;
        char *text = json_dumps(set, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        r = sandbox_set_secrets(s, text);
        sandbox_secrets_free(text);
        /* names only: the values stay out of every log line */
        log_emit(LOG_LEVEL_INFO, s->ctx, "credentials set: %zu%s", json_array_size(set),
                 r < 0 ? " (the gateway refused them)" : "");
        if (r < 0)
                return conn_reply_error(c, r, "internal", "the egress gateway refused the credentials: %s",
                                        strerror(-r));
        json_t *names = set_names(set);
        return names ? conn_reply_ok(c, json_pack("{s:o}", "names", names)) : -ENOMEM;
}

int nodeops_secrets_get(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = req_sandbox(c, req, &s);
        if (r < 0)
                return r;
        char *text = sandbox_secrets_dup(s);
        json_t *set = text ? json_loads(text, 0, NULL) : json_array();
        sandbox_secrets_free(text);
        json_t *names = set ? set_names(set) : NULL;
        json_decref(set);
        return names ? conn_reply_ok(c, json_pack("{s:o}", "names", names)) : -ENOMEM;
}

int nodeops_audit_read(struct node_conn *c, json_t *req) {
        json_t *after = json_object_get(req, "after"), *limit = json_object_get(req, "limit");
        if ((after && (!json_is_integer(after) || json_integer_value(after) < 0)) ||
            (limit &&
             (!json_is_integer(limit) || json_integer_value(limit) < 1 || json_integer_value(limit) > AUDIT_READ_MAX)))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "fields \"after\" (>= 0) and \"limit\" (1-%d) must be integers",
                                        AUDIT_READ_MAX);
        json_t *rep = NULL;
        int r = gwclient_enabled()
                        ? gwclient_audit_read(after ? (uint64_t) json_integer_value(after) : 0,
                                              limit ? (unsigned) json_integer_value(limit) : 100, &rep, c->ctx)
                        : -ENOTCONN;
        if (r < 0) {
                /* no gateway: still the boot id, and no events */
                rep = json_pack("{s:[], s:s}", "events", "gateway_error", strerror(-r));
                if (!rep)
                        return -ENOMEM;
        }
        json_object_set_new(rep, "node_boot_id", json_string(nodeops_boot_id()));
        return conn_reply_ok(c, rep);
}
