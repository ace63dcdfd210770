/* SPDX-License-Identifier: Apache-2.0 */
/* A request's fields and its sandbox, checked: see nodeops-req.h. */
#include "nodeops-req.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "capcheck.h"
#include "config.h"
#include "conn.h"
#include "log.h"
#include "netpolicy.h"
#include "nodeutil.h"
#include "objstore.h"
#include "sandbox.h"
#include "util.h"

/* Limits on what a request may carry (the guest enforces the same). */
#define ARGV_MAX 4096
#define ENV_MAX 4096
#define STRING_MAX (128u << 10)

static const struct node_config *ocfg;

void nodeops_req_init(const struct node_config *cfg) {
        ocfg = cfg;
}

const struct node_config *nodeops_config(void) {
        return ocfg;
}

/* ---- request validation: every helper replies "invalid" itself ---- */

int nodeops_field_string(struct node_conn *c, json_t *req, const char *key, bool required, size_t max,
                        const char **ret) {
        json_t *v = json_object_get(req, key);
        if (!v || json_is_null(v)) {
                if (required)
                        return conn_reply_error(c, -EINVAL, "invalid", "missing field \"%s\"", key);
                *ret = NULL;
                return 0;
        }
        if (!json_is_string(v))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" must be a string", key);
        size_t n = json_string_length(v);
        if (n > max)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" is longer than %zu bytes", key, max);
        if (strlen(json_string_value(v)) != n)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" contains a NUL character", key);
        *ret = json_string_value(v);
        return 0;
}

int nodeops_field_name(struct node_conn *c, json_t *req, const char *key, const char **ret) {
        const char *s;
        int r = nodeops_field_string(c, req, key, true, 64, &s);
        if (r < 0)
                return r;
        if (!name_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"%s\" must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'",
                                        key);
        *ret = s;
        return 0;
}

int nodeops_field_path(struct node_conn *c, json_t *req, const char *key, bool required, const char **ret) {
        const char *s;
        int r = nodeops_field_string(c, req, key, required, NODE_PATH_MAX, &s);
        if (r < 0)
                return r;
        if (s && !node_path_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"%s\" must be an absolute path without \"..\" components", key);
        *ret = s;
        return 0;
}

int nodeops_field_bool(struct node_conn *c, json_t *req, const char *key, bool def, bool *ret) {
        json_t *v = json_object_get(req, key);
        if (!v || json_is_null(v)) {
                *ret = def;
                return 0;
        }
        if (!json_is_boolean(v))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" must be a boolean", key);
        *ret = json_is_true(v);
        return 0;
}

int nodeops_field_uint(struct node_conn *c, json_t *req, const char *key, uint64_t def, uint64_t min, uint64_t max,
                       uint64_t *ret) {
        json_t *v = json_object_get(req, key);
        if (!v || json_is_null(v)) {
                *ret = def;
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t) json_integer_value(v) < min ||
            (uint64_t) json_integer_value(v) > max)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" must be an integer in %llu..%llu", key,
                                        (unsigned long long) min, (unsigned long long) max);
        *ret = (uint64_t) json_integer_value(v);
        return 0;
}

/* user: a user name of the guest (absent: NULL, the request's uid). */
int nodeops_field_user(struct node_conn *c, json_t *req, const char **ret) {
        const char *s;
        int r = nodeops_field_string(c, req, "user", false, NODE_USER_MAX, &s);
        if (r < 0)
                return r;
        if (s && !node_user_name_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"user\" must be a user name: [a-z_][a-z0-9_-]{0,31}");
        *ret = s;
        return 0;
}

int nodeops_field_network(struct node_conn *c, json_t *req, bool required, char **ret) {
        json_t *v = json_object_get(req, "network");
        _cleanup_(netpolicy_freep) struct netpolicy *p = NULL;
        char err[NETPOLICY_ERR_MAX] = "";
        int r = v && !json_is_null(v) ? netpolicy_parse(v, "network", &p, err, sizeof err) : 0;
        if (r == -ENOMEM)
                return conn_reply_errno(c, r, "network");
        if (r < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "%s", err[0] ? err : "field \"network\" is not a policy");
        if (r == 0) {
                if (required)
                        return conn_reply_error(c, -EINVAL, "invalid", "field \"network\" must give a policy");
                *ret = NULL;
                return 0;
        }
        r = netpolicy_format(p, ret);
        return r < 0 ? conn_reply_errno(c, r, "network") : 0;
}

int nodeops_field_env(struct node_conn *c, json_t *req, const char *key, json_t **ret) {
        json_t *v = json_object_get(req, key);
        if (!v || json_is_null(v)) {
                *ret = json_object();
                return *ret ? 0 : -ENOMEM;
        }
        if (!json_is_object(v))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" must be an object of strings", key);
        if (json_object_size(v) > ENV_MAX)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" has more than %d entries", key, ENV_MAX);
        const char *k;
        json_t *val;
        json_object_foreach(v, k, val) {
                size_t klen = strlen(k);
                if (klen == 0 || klen > STRING_MAX || strchr(k, '='))
                        return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\": bad variable name", key);
                if (!json_is_string(val) || json_string_length(val) > STRING_MAX ||
                    strlen(json_string_value(val)) != json_string_length(val))
                        return conn_reply_error(c, -EINVAL, "invalid",
                                                "field \"%s\": value of %.64s must be a string without NUL, at most %u bytes",
                                                key, k, STRING_MAX);
        }
        *ret = json_incref(v);
        return 0;
}

/* cmd: a non-empty array of strings. Returns a new reference. */
int nodeops_field_cmd(struct node_conn *c, json_t *req, const char *key, json_t **ret) {
        json_t *v = json_object_get(req, key);
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ARGV_MAX)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\" must be an array of 1..%d strings", key,
                                        ARGV_MAX);
        size_t i;
        json_t *a;
        json_array_foreach(v, i, a) {
                if (!json_is_string(a) || json_string_length(a) > STRING_MAX ||
                    strlen(json_string_value(a)) != json_string_length(a))
                        return conn_reply_error(c, -EINVAL, "invalid",
                                                "field \"%s\": element %zu must be a string without NUL, at most %u bytes",
                                                key, i, STRING_MAX);
        }
        if (json_string_length(json_array_get(v, 0)) == 0)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"%s\": empty program name", key);
        *ret = json_incref(v);
        return 0;
}

/*
 * The capability of a data-plane request ("cap"), checked against s as this
 * node runs it now (docs/security.md): allow, or a reply "refresh_route"
 * (the right sandbox, another execution or node: the caller re-resolves)
 * or "forbidden". The token itself is never logged.
 */
int nodeops_req_capability(struct node_conn *c, json_t *req, struct sandbox *s, uint32_t need, uint16_t port) {
        json_t *v = json_object_get(req, "cap");
        struct cap_record rec = { 0 };
        snprintf(rec.tenant, sizeof rec.tenant, "%s", s->tenant);
        snprintf(rec.sandbox, sizeof rec.sandbox, "%s", s->id);
        snprintf(rec.node, sizeof rec.node, "%s", ocfg->node_name);
        pthread_mutex_lock(&s->lock);
        rec.execution = s->execution;
        pthread_mutex_unlock(&s->lock);
        const char *why;
        enum cap_decision d = capcheck(json_string_value(v), json_is_string(v) ? json_string_length(v) : 0, &rec,
                                       need, port, &why);
        if (d == CAP_ALLOW)
                return 0;
        if (d == CAP_REFRESH_ROUTE)
                return conn_reply_error(c, -ESTALE, "refresh_route", "sandbox %s runs execution %llu on node %s",
                                        s->id, (unsigned long long) rec.execution, rec.node);
        log_emit(LOG_LEVEL_WARN, c->ctx, "capability refused for sandbox %s: %s", s->id, why);
        return conn_reply_error(c, -EPERM, "forbidden", "%s", why);
}

int nodeops_req_sandbox(struct node_conn *c, json_t *req, uint32_t need, uint16_t port, struct sandbox **ret_s,
                        struct guestconn **ret_g) {
        const char *id;
        int r = nodeops_field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        struct sandbox *s;
        r = sandbox_get(id, &s);
        if (r < 0)
                return conn_reply_error(c, r, "not_found", "no sandbox %s", id);
        if ((r = nodeops_req_capability(c, req, s, need, port)) < 0) {
                sandbox_unref(s);
                return r;
        }
        /* paused or stopped on purpose: the client's conflict, not a guest failure */
        const char *st = sandbox_state_name(s);
        if (strcmp(st, "paused") == 0 || strcmp(st, "stopped") == 0) {
                sandbox_unref(s);
                return conn_reply_error(c, -EBUSY, "conflict", "sandbox is %s", st);
        }
        if (ret_g) {
                r = sandbox_guest(s, ret_g);
                if (r < 0) {
                        _cleanup_free_ char *why = sandbox_error(s);
                        sandbox_unref(s);
                        return conn_reply_error(c, r, "guest", "sandbox %s is not running: %s", id,
                                                why ? why : "unknown");
                }
        }
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s", s->ctx);
        *ret_s = s;
        return 0;
}


/* Replies with a guest call's failure: the guest's errno and message when
 * it sent ERROR, else the transport problem. */
int nodeops_reply_guest_failure(struct node_conn *c, int r, const char *msg, const char *what) {
        if (msg)
                return conn_reply_error(c, r, node_guest_errno_code(-r), "%s: %s", what, msg);
        if (r == -ETIMEDOUT)
                return conn_reply_error(c, r, "timeout", "%s: the guest agent did not answer", what);
        if (r == -ECONNRESET || r == -EPIPE || r == -ECANCELED)
                return conn_reply_error(c, r, "guest", "%s: the guest channel closed", what);
        /* a reply that is no JSON object is the guest's fault, not the
         * client's (conn_reply_errno would call EBADMSG "invalid") */
        if (r == -EBADMSG)
                return conn_reply_error(c, r, "guest", "%s: the guest agent sent a malformed reply", what);
        return conn_reply_errno(c, r, what);
}

int nodeops_field_data_key(struct node_conn *c, json_t *req, struct objstore_data_key *key, bool *ret_has) {
        json_t *k = json_object_get(req, "data_key"), *w = json_object_get(req, "wrapped_key");
        *ret_has = false;
        if (!k && !w)
                return 0;
        size_t len = 0;
        const char *b64 = json_string_value(k), *wrapped = json_string_value(w);
        if (!b64 || !wrapped || strlen(wrapped) == 0 || strlen(wrapped) > OBJSTORE_WRAPPED_KEY_MAX ||
            sodium_base642bin(key->key, sizeof key->key, b64, strlen(b64), NULL, &len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 ||
            len != sizeof key->key) {
                sodium_memzero(key->key, sizeof key->key);
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "\"data_key\" must be the base64 of 32 bytes and \"wrapped_key\" 1-%d "
                                        "characters, both or neither",
                                        OBJSTORE_WRAPPED_KEY_MAX);
        }
        for (const char *p = wrapped; *p; p++)
                if (*p < 0x21 || *p > 0x7e) {
                        sodium_memzero(key->key, sizeof key->key);
                        return conn_reply_error(c, -EINVAL, "invalid", "\"wrapped_key\" must be printable ASCII");
                }
        key->wrapped = wrapped;
        *ret_has = true;
        return 0;
}
