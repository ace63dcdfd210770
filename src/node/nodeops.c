/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeops.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capcheck.h"
#include "config.h"
#include "guestconn.h"
#include "guestreply.h"
#include "gwclient.h"
#include "log.h"
#include "netpolicy.h"
#include "nodeops-lifecycle.h"
#include "nodeops-secrets.h"
#include "portproxy.h"
#include "nodeutil.h"
#include "pool.h"
#include "proto.h"
#include "sandbox.h"
#include "server.h"
#include "session.h"
#include "template.h"
#include "util.h"

/* The network log's entries one request may ask for (the API's limit). */
#define NETWORK_LOG_MAX 1000

/* Limits on what a request may carry (the guest enforces the same). */
#define ARGV_MAX 4096
#define ENV_MAX 4096
#define STRING_MAX (128u << 10)
#define EXEC_DEFAULT_TIMEOUT_S 60
#define GUEST_CALL_MS 30000
/* After SIGKILL on timeout, how long to wait for the EXIT frame. */
#define EXEC_KILL_GRACE_MS 2000
/* file.read: guest data waiting for the client, at most. */
#define READ_QUEUE_MAX (4u << 20)
/* file.read / file.write: no progress for this long ends the transfer. */
#define TRANSFER_IDLE_MS 60000
/* Room left in a reply frame for everything but exec's two outputs. */
#define REPLY_SLACK 1024
/* session.resize: the terminal sizes a client may ask for. */
#define TERMINAL_MAX 1000
/* EXEC's tag, at most (the guest's limit). */
#define TAG_MAX 256
/* file.watch: events waiting for the client, at most; beyond, they are
 * dropped and the client told so with an overflow event. */
#define WATCH_QUEUE_MAX 4096
/* An attached client that says nothing is checked for hang-up this often. */
#define WATCH_POLL_MS 1000

static const struct node_config *ocfg;
static enum vmm_accel oaccel;
static char oaccel_reason[256];

void nodeops_init(const struct node_config *cfg, enum vmm_accel accel, const char *accel_reason) {
        ocfg = cfg;
        oaccel = accel;
        snprintf(oaccel_reason, sizeof oaccel_reason, "%s", accel_reason ? accel_reason : "");
}

/* ---- request validation: every helper replies "invalid" itself ---- */

static int field_string(struct node_conn *c, json_t *req, const char *key, bool required, size_t max,
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

static int field_name(struct node_conn *c, json_t *req, const char *key, const char **ret) {
        const char *s;
        int r = field_string(c, req, key, true, 64, &s);
        if (r < 0)
                return r;
        if (!name_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"%s\" must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'",
                                        key);
        *ret = s;
        return 0;
}

static int field_path(struct node_conn *c, json_t *req, const char *key, bool required, const char **ret) {
        const char *s;
        int r = field_string(c, req, key, required, NODE_PATH_MAX, &s);
        if (r < 0)
                return r;
        if (s && !node_path_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"%s\" must be an absolute path without \"..\" components", key);
        *ret = s;
        return 0;
}

static int field_bool(struct node_conn *c, json_t *req, const char *key, bool def, bool *ret) {
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

static int field_uint(struct node_conn *c, json_t *req, const char *key, uint64_t def, uint64_t min, uint64_t max,
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
static int field_user(struct node_conn *c, json_t *req, const char **ret) {
        const char *s;
        int r = field_string(c, req, "user", false, NODE_USER_MAX, &s);
        if (r < 0)
                return r;
        if (s && !node_user_name_is_valid(s))
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"user\" must be a user name: [a-z_][a-z0-9_-]{0,31}");
        *ret = s;
        return 0;
}

/* env: an object of string values. Returns a new reference (empty object
 * when absent). */
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

static int field_env(struct node_conn *c, json_t *req, const char *key, json_t **ret) {
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
static int field_cmd(struct node_conn *c, json_t *req, const char *key, json_t **ret) {
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
static int req_capability(struct node_conn *c, json_t *req, struct sandbox *s, uint32_t need, uint16_t port) {
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
        int r = field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        struct sandbox *s;
        r = sandbox_get(id, &s);
        if (r < 0)
                return conn_reply_error(c, r, "not_found", "no sandbox %s", id);
        if ((r = req_capability(c, req, s, need, port)) < 0) {
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

static int req_sandbox(struct node_conn *c, json_t *req, uint32_t need, struct sandbox **ret_s,
                       struct guestconn **ret_g) {
        return nodeops_req_sandbox(c, req, need, 0, ret_s, ret_g);
}

/* Replies with a guest call's failure: the guest's errno and message when
 * it sent ERROR, else the transport problem. */
static int reply_guest_failure(struct node_conn *c, int r, const char *msg, const char *what) {
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

/* ---- simple ops ---- */

static int op_health(struct node_conn *c, json_t *req) {
        bool ready, failed;
        json_t *templates = template_prebuild_status(&ready, &failed);
        if (!templates)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:b, s:b, s:s, s:s, s:o}", "ready", ready, "failed", failed, "accel",
                                          vmm_accel_name(oaccel), "accel_reason", oaccel_reason, "templates",
                                          templates));
}

static int op_template_list(struct node_conn *c, json_t *req) {
        json_t *list = template_list_json();
        if (!list)
                return -ENOMEM;
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
                json_object_set_new(e, "pool", pool_json(json_string_value(json_object_get(e, "name")) ?: ""));
        return conn_reply_ok(c, json_pack("{s:o}", "templates", list));
}

static int op_pool_list(struct node_conn *c, json_t *req) {
        json_t *list = pool_list_json();
        if (!list)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:o}", "pools", list));
}

static int op_sandbox_create(struct node_conn *c, json_t *req) {
        const char *id, *tpl;
        _cleanup_(json_decrefp) json_t *env = NULL;
        int r;
        if ((r = field_name(c, req, "id", &id)) < 0 || (r = field_name(c, req, "template", &tpl)) < 0 ||
            (r = field_env(c, req, "env", &env)) < 0)
                return r;
        json_t *md = json_object_get(req, "metadata");
        if (md && !json_is_object(md) && !json_is_null(md))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"metadata\" must be an object");
        /* the owner that capabilities for it must name */
        const char *tenant = SANDBOX_TENANT_ADMIN;
        if (json_object_get(req, "tenant") && (r = field_name(c, req, "tenant", &tenant)) < 0)
                return r;
        bool recover_checkpoint;
        if (sandbox_recovery_from_json(req, &recover_checkpoint) < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"recovery\" must be \"boot\" or \"checkpoint\"");
        /* absent: an airlockd from before policies, which meant allow-all */
        _cleanup_free_ char *network = NULL;
        if ((r = nodeops_field_network(c, req, false, &network)) < 0)
                return r;

        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " sandbox=%s", id);
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        _cleanup_free_ char *err = NULL;
        r = sandbox_create(id, tpl, env, tenant, recover_checkpoint, network, &s, &err);
        if (r < 0) {
                const char *code = r == -EEXIST ? "conflict"
                                   : r == -ENOENT ? "not_found"
                                   : r == -EUSERS || r == -EAGAIN ? "unavailable"
                                   : r == -ETIMEDOUT ? "timeout"
                                   : r == -EIO ? "internal"
                                               : "guest";
                if (r == -ENOMEM)
                        code = "internal";
                return conn_reply_error(c, r, code, "%s", err ? err : strerror(-r));
        }
        return conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
}

static int op_sandbox_get(struct node_conn *c, json_t *req) {
        const char *id;
        int r = field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if (sandbox_get(id, &s) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        return conn_reply_ok(c, json_pack("{s:o}", "sandbox", sandbox_json(s)));
}

static int op_sandbox_list(struct node_conn *c, json_t *req) {
        json_t *list = sandbox_list_json();
        if (!list)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:o}", "sandboxes", list));
}

static int op_sandbox_delete(struct node_conn *c, json_t *req) {
        const char *id;
        int r = field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        r = sandbox_delete(id, json_is_true(json_object_get(req, "keep_snapshots")));
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no sandbox %s", id);
        if (r == -EBUSY)
                return conn_reply_error(c, r, "conflict", "sandbox %s is being created or changing state", id);
        if (r < 0)
                return conn_reply_errno(c, r, "delete failed");
        return conn_reply_ok(c, NULL);
}

/* ---- egress policy ---- */

/* The sandbox "id" names (visible: not one being made). Replies itself. */
static int req_sandbox_plain(struct node_conn *c, json_t *req, struct sandbox **ret) {
        const char *id;
        int r = field_name(c, req, "id", &id);
        if (r < 0)
                return r;
        if (sandbox_get(id, ret) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no sandbox %s", id);
        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " %s", (*ret)->ctx);
        return 0;
}

static int reply_network(struct node_conn *c, struct sandbox *s) {
        sandbox_network_lock(s);
        json_t *o = json_loads(sandbox_network(s), 0, NULL);
        sandbox_network_unlock(s);
        if (!o)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:o}", "network", o));
}

static int op_network_get(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = req_sandbox_plain(c, req, &s);
        if (r < 0)
                return r;
        return reply_network(c, s);
}

/* A new policy for a sandbox: its VM's new connections follow it at once,
 * and whatever starts a VM for it later (a start, a recovery, a gateway
 * that restarted) hands this one over. */
static int op_network_set(struct node_conn *c, json_t *req) {
        _cleanup_free_ char *network = NULL;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = nodeops_field_network(c, req, true, &network);
        if (r < 0 || (r = req_sandbox_plain(c, req, &s)) < 0)
                return r;
        r = sandbox_set_network(s, network);
        if (r < 0)
                return conn_reply_error(c, r, "internal", "the egress gateway refused the policy: %s", strerror(-r));
        return reply_network(c, s);
}

/* The gateway's log of the sandbox's connections and DNS queries, while it
 * has a VM. */
static int op_network_log(struct node_conn *c, json_t *req) {
        uint64_t limit;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        int r = field_uint(c, req, "limit", 100, 1, NETWORK_LOG_MAX, &limit);
        if (r < 0 || (r = req_sandbox_plain(c, req, &s)) < 0)
                return r;
        const char *st = sandbox_state_name(s);
        if (strcmp(st, "running") != 0 && strcmp(st, "paused") != 0)
                return conn_reply_error(c, -EBUSY, "conflict", "sandbox %s is %s: it has no VM, so no network log",
                                        s->id, st);
        _cleanup_(json_decrefp) json_t *entries = NULL;
        r = gwclient_log(s->id, (unsigned) limit, &entries, c->ctx);
        if (r == -ENOTCONN)
                return conn_reply_error(c, -EHOSTDOWN, "unavailable", "no egress gateway answers on this node");
        if (r == -ENOENT)
                return conn_reply_error(c, -EBUSY, "conflict", "the egress gateway does not serve sandbox %s now",
                                        s->id);
        if (r < 0)
                return conn_reply_error(c, r, "internal", "the egress gateway's log: %s", strerror(-r));
        return conn_reply_ok(c, json_pack("{s:O}", "entries", entries));
}

/* ---- exec ---- */

struct exec_out {
        uint8_t *data;
        size_t len;
        bool truncated;
};

struct exec_state {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        size_t max_output;
        struct exec_out out[2]; /* stdout, stderr */
        bool exited, dead;
        int exit_code;
};

static void exec_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct exec_state *e = userdata;
        pthread_mutex_lock(&e->lock);
        if (e->exited && type != 0) {
                /* EXIT is a process's last frame: whatever a (hostile)
                 * guest sends after it changes nothing */
        } else if (type == PROTO_STDOUT || type == PROTO_STDERR) {
                struct exec_out *o = &e->out[type == PROTO_STDERR];
                size_t take = MIN(len, e->max_output - o->len);
                memcpy(o->data + o->len, payload, take);
                o->len += take;
                if (take < len)
                        o->truncated = true;
        } else if (type == PROTO_EXIT) {
                json_error_t jerr;
                json_t *m = json_loadb((const char *) payload, len, 0, &jerr);
                json_t *code = json_object_get(m, "exit_code");
                e->exit_code = json_is_integer(code) ? (int) json_integer_value(code) : -1;
                e->exited = true;
                json_decref(m);
        } else if (type == 0)
                e->dead = true;
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
}

/* Waits (e->lock held) until the process exited, the channel died or the
 * monotonic deadline passed. */
static void exec_wait(struct exec_state *e, uint64_t deadline_ns) {
        while (!e->exited && !e->dead) {
                uint64_t now = now_monotonic_ns();
                if (now >= deadline_ns)
                        return;
                struct timespec ts = { .tv_sec = (time_t) (deadline_ns / 1000000000ULL),
                                       .tv_nsec = (long) (deadline_ns % 1000000000ULL) };
                pthread_cond_timedwait(&e->cond, &e->lock, &ts);
        }
}

/* Size of s[0..len) encoded as a JSON string. */
static size_t json_string_size(const char *s, size_t len) {
        json_t *j = json_stringn_nocheck(s, len);
        size_t n = j ? json_dumpb(j, NULL, 0, JSON_ENCODE_ANY) : SIZE_MAX;
        json_decref(j);
        return n;
}

/* Cuts s (valid UTF-8) at a character boundary until its JSON encoding is at
 * most budget bytes. */
static void fit_string(char *s, size_t *len, size_t budget, bool *truncated) {
        for (size_t size = json_string_size(s, *len); size > budget;) {
                size_t want = (size_t) ((double) *len * ((double) budget / (double) size) * 0.98);
                size_t n = utf8_cut(s, *len, want < *len ? want : *len - 1);
                *len = n;
                s[n] = 0;
                *truncated = true;
                size = json_string_size(s, n);
        }
}

/* Builds exec's reply. It must fit one frame, and escaping can grow output
 * up to six times: the outputs share the room, neither gets less than half
 * unless the other needs less. */
static json_t *exec_reply(struct exec_state *e, bool timed_out) {
        _cleanup_free_ char *so = NULL, *se = NULL;
        size_t so_len = 0, se_len = 0;
        so = utf8_sanitize(e->out[0].data, e->out[0].len, &so_len);
        se = utf8_sanitize(e->out[1].data, e->out[1].len, &se_len);
        if (!so || !se)
                return NULL;
        bool trunc[2] = { e->out[0].truncated, e->out[1].truncated };
        size_t room = PROTO_MAX_PAYLOAD - REPLY_SLACK;
        size_t so_size = json_string_size(so, so_len), se_size = json_string_size(se, se_len);
        if (so_size + se_size > room) {
                size_t half = room / 2;
                size_t so_budget = se_size < half ? room - se_size : MAX(half, room - MIN(se_size, room));
                if (so_size < half)
                        so_budget = so_size;
                fit_string(so, &so_len, so_budget, &trunc[0]);
                fit_string(se, &se_len, room - json_string_size(so, so_len), &trunc[1]);
        }
        return json_pack("{s:i, s:s%, s:s%, s:b, s:b, s:b}", "exit_code", e->exit_code, "stdout", so, so_len, "stderr",
                         se, se_len, "stdout_truncated", trunc[0], "stderr_truncated", trunc[1], "timed_out",
                         timed_out);
}

static int op_exec(struct node_conn *c, json_t *req) {
        _cleanup_(json_decrefp) json_t *cmd = NULL, *env = NULL;
        const char *cwd, *stdin_s, *user;
        uint64_t timeout_s, max_output;
        int r;
        if ((r = field_cmd(c, req, "cmd", &cmd)) < 0 || (r = field_env(c, req, "env", &env)) < 0 ||
            (r = field_path(c, req, "cwd", false, &cwd)) < 0 || (r = field_user(c, req, &user)) < 0 ||
            (r = field_string(c, req, "stdin", false, PROTO_MAX_PAYLOAD, &stdin_s)) < 0 ||
            (r = field_uint(c, req, "timeout_s", MIN(EXEC_DEFAULT_TIMEOUT_S, ocfg->exec_timeout_max_s), 1,
                            ocfg->exec_timeout_max_s, &timeout_s)) < 0 ||
            (r = field_uint(c, req, "max_output", ocfg->exec_max_output, 0, UINT32_MAX, &max_output)) < 0)
                return r;
        max_output = MIN(max_output, (uint64_t) ocfg->exec_max_output);
        size_t stdin_len = stdin_s ? json_string_length(json_object_get(req, "stdin")) : 0;

        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, &g)) < 0)
                return r;
        /* an older agent would ignore "user" and run the command as root */
        if (user && !guestconn_has(g, GUESTCONN_FEATURE_USER))
                return conn_reply_error(
                        c, -EOPNOTSUPP, "unavailable",
                        "the sandbox's guest agent is older and cannot run commands as a user");

        uint64_t deadline = now_monotonic_ns() + timeout_s * 1000000000ULL;
        struct exec_state e = { .max_output = max_output };
        pthread_mutex_init(&e.lock, NULL);
        node_cond_init(&e.cond);
        e.out[0].data = malloc(MAX(max_output, 1));
        e.out[1].data = malloc(MAX(max_output, 1));
        json_t *exec_req = json_pack("{s:O, s:O}", "argv", cmd, "env", env);
        if (exec_req && cwd)
                json_object_set_new(exec_req, "cwd", json_string(cwd));
        if (exec_req && user)
                json_object_set_new(exec_req, "user", json_string(user));

        uint32_t stream = 0;
        _cleanup_free_ char *msg = NULL;
        json_t *reply = NULL;
        bool timed_out = false;
        if (!e.out[0].data || !e.out[1].data || !exec_req)
                r = -ENOMEM;
        else
                r = guestconn_stream_open(g, exec_handler, &e, &stream);
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_EXEC, exec_req, GUEST_CALL_MS, NULL, &msg);
        if (r < 0) {
                if (r == -ESRCH && msg && user)
                        conn_reply_error(c, r, "invalid", "unknown user '%s'", user);
                else
                        reply_guest_failure(c, r, msg, "exec failed");
                goto out;
        }
        for (size_t off = 0; off < stdin_len && r >= 0; off += PROTO_DATA_CHUNK)
                r = guestconn_send(g, PROTO_STDIN, stream, stdin_s + off, MIN((size_t) PROTO_DATA_CHUNK, stdin_len - off));
        if (r >= 0)
                r = guestconn_send(g, PROTO_STDIN_CLOSE, stream, "{}", 2);
        /* a process that exits without reading stdin is not an error */

        pthread_mutex_lock(&e.lock);
        exec_wait(&e, deadline);
        if (!e.exited && !e.dead) {
                timed_out = true;
                pthread_mutex_unlock(&e.lock);
                log_emit(LOG_LEVEL_INFO, c->ctx, "exec timed out after %llu s: killing it", (unsigned long long) timeout_s);
                json_t *sig = json_pack("{s:i}", "signal", 9);
                if (sig)
                        guestconn_send_json(g, PROTO_SIGNAL, stream, sig);
                json_decref(sig);
                pthread_mutex_lock(&e.lock);
                exec_wait(&e, now_monotonic_ns() + EXEC_KILL_GRACE_MS * 1000000ULL);
                if (!e.exited)
                        e.exit_code = -1;
        }
        bool dead = e.dead && !e.exited;
        pthread_mutex_unlock(&e.lock);
        guestconn_stream_close(g, stream);
        stream = 0;
        if (dead && !timed_out) {
                _cleanup_free_ char *why = sandbox_error(s);
                conn_reply_error(c, -ECONNRESET, "guest", "the guest channel closed during exec%s%s", why ? ": " : "",
                                 why ? why : "");
                goto out;
        }
        reply = exec_reply(&e, timed_out);
        if (!reply) {
                r = -ENOMEM;
                goto out;
        }
        r = conn_reply_ok(c, TAKE_PTR(reply));
out:
        if (stream)
                guestconn_stream_close(g, stream);
        json_decref(exec_req);
        free(e.out[0].data);
        free(e.out[1].data);
        pthread_mutex_destroy(&e.lock);
        pthread_cond_destroy(&e.cond);
        return r;
}

/* ---- sessions ---- */

static int op_session_start(struct node_conn *c, json_t *req) {
        _cleanup_(json_decrefp) json_t *cmd = NULL, *env = NULL;
        const char *cwd, *sid, *user, *tag;
        bool pty;
        uint64_t rows, cols;
        int r;
        if ((r = field_name(c, req, "session_id", &sid)) < 0 || (r = field_cmd(c, req, "cmd", &cmd)) < 0 ||
            (r = field_env(c, req, "env", &env)) < 0 || (r = field_path(c, req, "cwd", false, &cwd)) < 0 ||
            (r = field_user(c, req, &user)) < 0 ||
            (r = field_string(c, req, "tag", false, TAG_MAX, &tag)) < 0 ||
            (r = field_bool(c, req, "pty", false, &pty)) < 0 ||
            (r = field_uint(c, req, "rows", 24, 1, 65535, &rows)) < 0 ||
            (r = field_uint(c, req, "cols", 80, 1, 65535, &cols)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if ((r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, NULL)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *exec_req = json_pack("{s:O, s:O, s:b, s:I, s:I}", "argv", cmd, "env", env,
                                                             "pty", pty, "rows", (json_int_t) rows, "cols",
                                                             (json_int_t) cols);
        if (!exec_req)
                return -ENOMEM;
        if ((cwd && json_object_set_new(exec_req, "cwd", json_string(cwd)) < 0) ||
            (user && json_object_set_new(exec_req, "user", json_string(user)) < 0) ||
            (tag && json_object_set_new(exec_req, "tag", json_string(tag)) < 0))
                return -ENOMEM;
        return session_start(c, s, sid, exec_req);
}

/* The processes the guest runs for its hosts (background ones, and those
 * whose host connection ended: a restarted node, a wake), with the
 * session that has each, if any. */
static int op_session_list(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        int r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, &g);
        if (r < 0)
                return r;
        if (!guestconn_has(g, GUESTCONN_FEATURE_PROCESSES))
                return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                        "the sandbox's guest agent is older and cannot list its processes");
        _cleanup_(json_decrefp) json_t *m = json_object(), *res = NULL, *checked = NULL;
        _cleanup_free_ char *msg = NULL;
        if (!m)
                return -ENOMEM;
        r = guestconn_call(g, PROTO_PROCESSES, m, GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return reply_guest_failure(c, r, msg, "listing the processes failed");
        checked = guestreply_processes(res);
        if (!checked)
                return conn_reply_error(
                        c, -EBADMSG, "guest",
                        "listing the processes failed: the guest agent sent a malformed reply");
        _cleanup_(json_decrefp) json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(checked, "processes"), i, e) {
                char sid[65];
                if (session_of_pid(s, g, json_integer_value(json_object_get(e, "pid")), sid) >= 0 &&
                    json_object_set_new(e, "session_id", json_string(sid)) < 0)
                        return -ENOMEM;
                if (json_array_append(out, e) < 0)
                        return -ENOMEM;
        }
        return conn_reply_ok(c, json_pack("{s:O}", "sessions", out));
}

/* The guest's use of its CPUs, memory and disk, now (E2B's getMetrics()). */
static int op_sandbox_metrics(struct node_conn *c, json_t *req) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        int r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, &g);
        if (r < 0)
                return r;
        if (!guestconn_has(g, GUESTCONN_FEATURE_METRICS))
                return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                        "the sandbox's guest agent is older and reports no metrics");
        _cleanup_(json_decrefp) json_t *m = json_object(), *res = NULL, *checked = NULL;
        _cleanup_free_ char *msg = NULL;
        if (!m)
                return -ENOMEM;
        r = guestconn_call(g, PROTO_METRICS, m, GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return reply_guest_failure(c, r, msg, "reading the metrics failed");
        if (!(checked = guestreply_metrics(res)))
                return conn_reply_error(c, -EBADMSG, "guest",
                                        "reading the metrics failed: the guest agent sent a malformed reply");
        return conn_reply_ok(c, json_pack("{s:O}", "metrics", checked));
}

static int op_session_adopt(struct node_conn *c, json_t *req) {
        const char *sid;
        uint64_t pid;
        int r;
        if ((r = field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "pid"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"pid\"");
        if ((r = field_uint(c, req, "pid", 0, 1, GUESTREPLY_PID_MAX, &pid)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if ((r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, NULL)) < 0)
                return r;
        return session_adopt(c, s, sid, (long long) pid);
}

/* The session ops name a session: its sandbox is what the capability
 * must match. */
static int req_session(struct node_conn *c, json_t *req, const char *sid) {
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if (session_sandbox(sid, &s) < 0)
                return conn_reply_error(c, -ENOENT, "not_found", "no session %s", sid);
        return req_capability(c, req, s, CAP_ACCESS_SESSION_ATTACH, 0);
}

static int op_session_attach(struct node_conn *c, json_t *req) {
        const char *sid;
        int r = field_name(c, req, "session_id", &sid);
        if (r < 0 || (r = req_session(c, req, sid)) < 0)
                return r;
        return session_attach(c, sid);
}

static int op_session_stdin(struct node_conn *c, json_t *req) {
        const char *sid, *data;
        bool close_stdin;
        int r;
        if ((r = field_name(c, req, "session_id", &sid)) < 0 ||
            (r = field_string(c, req, "data", false, PROTO_MAX_PAYLOAD, &data)) < 0 ||
            (r = field_bool(c, req, "close", false, &close_stdin)) < 0)
                return r;
        _cleanup_free_ uint8_t *bytes = NULL;
        size_t len = 0;
        if (data && node_base64_decode(data, &bytes, &len) < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"data\" must be base64");
        if ((r = req_session(c, req, sid)) < 0)
                return r;
        return session_stdin(c, sid, bytes, len, close_stdin);
}

static int op_session_resize(struct node_conn *c, json_t *req) {
        const char *sid;
        uint64_t rows, cols;
        int r;
        if ((r = field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "rows") || !json_object_get(req, "cols"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"%s\"",
                                        json_object_get(req, "rows") ? "cols" : "rows");
        if ((r = field_uint(c, req, "rows", 0, 1, TERMINAL_MAX, &rows)) < 0 ||
            (r = field_uint(c, req, "cols", 0, 1, TERMINAL_MAX, &cols)) < 0 ||
            (r = req_session(c, req, sid)) < 0)
                return r;
        return session_resize(c, sid, (unsigned) rows, (unsigned) cols);
}

static int op_session_signal(struct node_conn *c, json_t *req) {
        const char *sid;
        uint64_t sig;
        int r;
        if ((r = field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "signal"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"signal\"");
        if ((r = field_uint(c, req, "signal", 0, 1, 64, &sig)) < 0 || (r = req_session(c, req, sid)) < 0)
                return r;
        return session_signal(c, sid, (int) sig);
}

/* ---- files ---- */

struct qitem {
        struct qitem *next;
        size_t len;
        uint8_t data[];
};

/* One guest file transfer on its own stream. */
struct xfer {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool done;       /* write: RESULT or ERROR arrived; read: FILE_END */
        bool dead;       /* the channel died */
        bool cancelled;  /* read: the client is gone, discard */
        int err;         /* negative guest errno from ERROR */
        char *msg;       /* its message */
        json_t *result;  /* write: RESULT payload */
        struct qitem *head, *tail;
        size_t queued;
};

static void xfer_init(struct xfer *x) {
        *x = (struct xfer){ 0 };
        pthread_mutex_init(&x->lock, NULL);
        node_cond_init(&x->cond);
}

static void xfer_release(struct xfer *x) {
        while (x->head) {
                struct qitem *q = x->head;
                x->head = q->next;
                free(q);
        }
        free(x->msg);
        json_decref(x->result);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
}

/* Records a guest ERROR payload (x->lock held). */
static void xfer_set_error(struct xfer *x, const uint8_t *payload, size_t len) {
        json_error_t jerr;
        json_t *m = json_loadb((const char *) payload, len, 0, &jerr);
        json_t *e = json_object_get(m, "errno");
        const char *msg = json_string_value(json_object_get(m, "message"));
        x->err = json_is_integer(e) && json_integer_value(e) > 0 && json_integer_value(e) < 4096
                         ? (int) -json_integer_value(e)
                         : -EIO;
        free(x->msg);
        x->msg = strndup(msg ? msg : strerror(-x->err), 1024);
        json_decref(m);
}

static void write_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct xfer *x = userdata;
        pthread_mutex_lock(&x->lock);
        if (type == PROTO_RESULT && !x->done) {
                json_error_t jerr;
                x->result = json_loadb((const char *) payload, len, 0, &jerr);
                x->done = true;
        } else if (type == PROTO_ERROR && !x->done) {
                xfer_set_error(x, payload, len);
                x->done = true;
        } else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* Replies with the outcome of a failed transfer (x->lock not held). */
static int reply_xfer_failure(struct node_conn *c, struct xfer *x, const char *what) {
        if (x->err < 0)
                return conn_reply_error(c, x->err, node_guest_errno_code(-x->err), "%s: %s", what, x->msg);
        return conn_reply_error(c, -ECONNRESET, "guest", "%s: the guest channel closed", what);
}

static int op_file_write(struct node_conn *c, json_t *req) {
        const char *path;
        uint64_t mode;
        int r;
        if ((r = field_path(c, req, "path", true, &path)) < 0 ||
            (r = field_uint(c, req, "mode", 0644, 0, 07777, &mode)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_FILES_WRITE, &s, &g)) < 0)
                return r;

        struct xfer x;
        xfer_init(&x);
        uint32_t stream = 0;
        uint64_t total = 0;
        bool started = false;
        json_t *m = json_pack("{s:s, s:I}", "path", path, "mode", (json_int_t) mode);
        r = m ? guestconn_stream_open(g, write_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_send_json(g, PROTO_FILE_WRITE, stream, m);
        json_decref(m);
        if (r < 0) {
                conn_reply_errno(c, r, "starting the guest transfer failed");
                goto out;
        }
        started = true;

        for (;;) {
                struct proto_header h;
                const uint8_t *payload;
                r = conn_read_frame(c, TRANSFER_IDLE_MS, &h, &payload);
                if (r <= 0) {
                        if (r == 0)
                                r = -ECONNRESET;
                        conn_reply_errno(c, r, "reading the upload failed");
                        goto out;
                }
                if (h.type == PROTO_NODE_END) {
                        json_error_t jerr;
                        json_t *end = json_loadb((const char *) payload, h.length, 0, &jerr);
                        bool abort = json_is_true(json_object_get(end, "abort"));
                        json_decref(end);
                        conn_pop_frame(c, &h);
                        if (abort) {
                                r = conn_reply_error(c, -ECANCELED, "invalid", "upload aborted by the client");
                                goto out;
                        }
                        break;
                }
                if (h.type != PROTO_NODE_DATA) {
                        conn_pop_frame(c, &h);
                        r = conn_reply_error(c, -EINVAL, "invalid", "expected node-data or node-end, got %s",
                                             proto_type_name(h.type));
                        goto out;
                }
                if (total + h.length > ocfg->max_file_size) {
                        conn_pop_frame(c, &h);
                        r = conn_reply_error(c, -EFBIG, "too_large", "file larger than %llu bytes",
                                             (unsigned long long) ocfg->max_file_size);
                        goto out;
                }
                pthread_mutex_lock(&x.lock);
                bool failed = x.done || x.dead;
                pthread_mutex_unlock(&x.lock);
                if (failed) {
                        conn_pop_frame(c, &h);
                        r = reply_xfer_failure(c, &x, "writing the file failed");
                        goto out;
                }
                for (size_t off = 0; off < h.length && r >= 0; off += PROTO_DATA_CHUNK)
                        r = guestconn_send(g, PROTO_FILE_DATA, stream, payload + off,
                                           MIN((size_t) PROTO_DATA_CHUNK, h.length - off));
                total += h.length;
                conn_pop_frame(c, &h);
                if (r < 0) {
                        reply_xfer_failure(c, &x, "writing the file failed");
                        goto out;
                }
        }

        r = guestconn_send(g, PROTO_FILE_END, stream, "{}", 2);
        started = false; /* the guest finishes (or fails) it now */
        pthread_mutex_lock(&x.lock);
        struct timespec ts;
        node_deadline_after_ms(&ts, TRANSFER_IDLE_MS);
        while (r >= 0 && !x.done && !x.dead)
                if (pthread_cond_timedwait(&x.cond, &x.lock, &ts) == ETIMEDOUT)
                        break;
        bool ok = x.done && x.err == 0;
        bool done = x.done || x.dead;
        pthread_mutex_unlock(&x.lock);
        if (ok) {
                r = conn_reply_ok(c, json_pack("{s:I}", "size",
                                               guestreply_uint(json_object_get(x.result, "size"), INT64_MAX,
                                                               (json_int_t) total)));
        } else if (!done)
                r = conn_reply_error(c, -ETIMEDOUT, "timeout", "the guest did not confirm the write");
        else
                r = reply_xfer_failure(c, &x, "writing the file failed");
out:
        if (started) {
                /* tell the guest to discard its temporary file */
                json_t *a = json_pack("{s:b}", "abort", 1);
                if (a)
                        guestconn_send_json(g, PROTO_FILE_END, stream, a);
                json_decref(a);
        }
        if (stream)
                guestconn_stream_close(g, stream);
        xfer_release(&x);
        return r;
}

static void read_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct xfer *x = userdata;
        pthread_mutex_lock(&x->lock);
        if (type == PROTO_FILE_DATA) {
                /* backpressure: the guest channel waits while the client is slow */
                while (x->queued >= READ_QUEUE_MAX && !x->cancelled)
                        pthread_cond_wait(&x->cond, &x->lock);
                if (!x->cancelled && len > 0) {
                        struct qitem *q = malloc(sizeof *q + len);
                        if (q) {
                                q->next = NULL;
                                q->len = len;
                                memcpy(q->data, payload, len);
                                if (x->tail)
                                        x->tail->next = q;
                                else
                                        x->head = q;
                                x->tail = q;
                                x->queued += len;
                        } else {
                                x->err = -ENOMEM;
                                x->msg = strdup("out of memory");
                        }
                }
        } else if (type == PROTO_FILE_END)
                x->done = true;
        else if (type == PROTO_ERROR && !x->done)
                xfer_set_error(x, payload, len);
        else if (type == 0)
                x->dead = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

static int op_file_read(struct node_conn *c, json_t *req) {
        const char *path;
        int r;
        if ((r = field_path(c, req, "path", true, &path)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_FILES_READ, &s, &g)) < 0)
                return r;

        struct xfer x;
        xfer_init(&x);
        uint32_t stream = 0;
        _cleanup_free_ char *msg = NULL;
        json_t *res = NULL;
        json_t *m = json_pack("{s:s}", "path", path);
        r = m ? guestconn_stream_open(g, read_handler, &x, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_FILE_READ, m, GUEST_CALL_MS, &res, &msg);
        json_decref(m);
        if (r < 0) {
                reply_guest_failure(c, r, msg, "reading the file failed");
                goto out;
        }
        r = conn_reply_ok(c, json_pack("{s:I, s:I}", "size",
                                       guestreply_uint(json_object_get(res, "size"), INT64_MAX, 0), "mode",
                                       guestreply_uint(json_object_get(res, "mode"), 07777, 0)));
        json_decref(res);
        if (r < 0)
                goto out;

        uint64_t idle_since = now_monotonic_ns();
        for (;;) {
                pthread_mutex_lock(&x.lock);
                struct qitem *q = x.head;
                if (q) {
                        x.head = q->next;
                        if (!x.head)
                                x.tail = NULL;
                        x.queued -= q->len;
                        pthread_cond_broadcast(&x.cond);
                }
                bool done = x.done, dead = x.dead;
                int err = x.err;
                if (!q && !done && !dead && err == 0) {
                        struct timespec ts;
                        node_deadline_after_ms(&ts, 1000);
                        pthread_cond_timedwait(&x.cond, &x.lock, &ts);
                        pthread_mutex_unlock(&x.lock);
                        if (conn_hung_up(c))
                                goto out;
                        if (now_monotonic_ns() - idle_since > TRANSFER_IDLE_MS * 1000000ULL) {
                                conn_reply_error(c, -ETIMEDOUT, "timeout", "the guest stopped sending the file");
                                goto out;
                        }
                        continue;
                }
                pthread_mutex_unlock(&x.lock);
                if (q) {
                        r = conn_send_data(c, q->data, q->len);
                        free(q);
                        idle_since = now_monotonic_ns();
                        if (r < 0)
                                goto out;
                        continue;
                }
                if (err < 0) {
                        /* a late error travels as a reply frame inside the stream */
                        reply_xfer_failure(c, &x, "reading the file failed");
                        goto out;
                }
                if (done) {
                        conn_send_end(c, NULL);
                        goto out;
                }
                conn_reply_error(c, -ECONNRESET, "guest", "reading the file failed: the guest channel closed");
                goto out;
        }
out:
        pthread_mutex_lock(&x.lock);
        x.cancelled = true; /* frees a handler waiting for queue room */
        pthread_cond_broadcast(&x.cond);
        pthread_mutex_unlock(&x.lock);
        if (stream)
                guestconn_stream_close(g, stream);
        xfer_release(&x);
        return r;
}

/* LIST / STAT / REMOVE: one guest call; the result's checked fields go into
 * the reply (STAT's under "entry"). */
static int file_simple(struct node_conn *c, json_t *req, uint8_t type, const char *what) {
        const char *path;
        bool recursive = false;
        int r;
        if ((r = field_path(c, req, "path", true, &path)) < 0)
                return r;
        if (type == PROTO_REMOVE && (r = field_bool(c, req, "recursive", false, &recursive)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, type == PROTO_REMOVE ? CAP_ACCESS_FILES_WRITE : CAP_ACCESS_FILES_READ, &s, &g)) <
            0)
                return r;

        _cleanup_(json_decrefp) json_t *m = json_pack("{s:s}", "path", path);
        if (!m)
                return -ENOMEM;
        if (type == PROTO_REMOVE)
                json_object_set_new(m, "recursive", json_boolean(recursive));
        json_t *res = NULL;
        _cleanup_free_ char *msg = NULL;
        r = guestconn_call(g, type, m, GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return reply_guest_failure(c, r, msg, what);
        json_t *out = NULL;
        if (type == PROTO_STAT) {
                json_t *e = guestreply_entry(res, true);
                out = e ? json_pack("{s:o}", "entry", e) : NULL;
        } else if (type == PROTO_LIST)
                out = guestreply_list(res);
        json_decref(res);
        if (type == PROTO_REMOVE)
                return conn_reply_ok(c, NULL);
        if (!out)
                return conn_reply_error(c, -EBADMSG, "guest", "%s: the guest agent sent a malformed reply", what);
        return conn_reply_ok(c, out);
}

static int op_file_list(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_LIST, "listing failed");
}

static int op_file_stat(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_STAT, "stat failed");
}

static int op_file_remove(struct node_conn *c, json_t *req) {
        return file_simple(c, req, PROTO_REMOVE, "remove failed");
}

/* The checked STAT entry of path, or NULL (for a reply that can do
 * without: the path was changed meanwhile, the guest failed). */
static json_t *stat_entry(struct guestconn *g, const char *path) {
        _cleanup_(json_decrefp) json_t *m = json_pack("{s:s}", "path", path), *res = NULL;
        if (!m || guestconn_call(g, PROTO_STAT, m, GUEST_CALL_MS, &res, NULL) < 0)
                return NULL;
        return guestreply_entry(res, true);
}

/* MKDIR and RENAME: one guest call, then the entry of the directory made
 * or of the new name (E2B answers with it), when the guest gives it. */
static int file_change(struct node_conn *c, json_t *req, uint8_t type, const char *what) {
        const char *path, *to = NULL;
        bool parents = false;
        int r;
        if ((r = field_path(c, req, type == PROTO_RENAME ? "from" : "path", true, &path)) < 0 ||
            (type == PROTO_RENAME && (r = field_path(c, req, "to", true, &to)) < 0) ||
            (type == PROTO_MKDIR && (r = field_bool(c, req, "parents", false, &parents)) < 0))
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_FILES_WRITE, &s, &g)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *m =
                type == PROTO_RENAME ? json_pack("{s:s, s:s}", "from", path, "to", to)
                                     : json_pack("{s:s, s:b}", "path", path, "parents", parents);
        _cleanup_free_ char *msg = NULL;
        if (!m)
                return -ENOMEM;
        r = guestconn_call(g, type, m, GUEST_CALL_MS, NULL, &msg);
        if (r < 0)
                return reply_guest_failure(c, r, msg, what);
        json_t *e = stat_entry(g, to ?: path);
        return conn_reply_ok(c, e ? json_pack("{s:o}", "entry", e) : NULL);
}

static int op_file_mkdir(struct node_conn *c, json_t *req) {
        return file_change(c, req, PROTO_MKDIR, "mkdir failed");
}

static int op_file_rename(struct node_conn *c, json_t *req) {
        return file_change(c, req, PROTO_RENAME, "rename failed");
}

/* ---- file.watch ---- */

/* What the guest's reader thread hands the client's thread: checked
 * events, bounded, and how the watch ended. */
struct watch_queue {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        json_t *events;   /* array, at most WATCH_QUEUE_MAX */
        bool overflow;    /* events were dropped since the queue was last taken */
        uint64_t invalid; /* malformed events the guest sent, dropped */
        bool ended, dead; /* the guest's ERROR (err, msg); the channel died */
        int err;
        char *msg;
};

static void watch_handler(void *userdata, uint8_t type, const uint8_t *payload, size_t len) {
        struct watch_queue *q = userdata;
        pthread_mutex_lock(&q->lock);
        if (q->ended || q->dead) {
                /* a watch's last frame is its ERROR */
        } else if (type == PROTO_WATCH_EVENT) {
                json_error_t jerr;
                _cleanup_(json_decrefp) json_t *m =
                        json_loadb((const char *) payload, len, JSON_REJECT_DUPLICATES, &jerr);
                json_t *ev = guestreply_watch_event(m);
                if (!ev)
                        q->invalid++;
                else if (json_array_size(q->events) >= WATCH_QUEUE_MAX ||
                         json_array_append_new(q->events, ev) < 0)
                        q->overflow = true;
        } else if (type == PROTO_ERROR) {
                json_t *res = NULL;
                q->ended = true;
                if (guestreply_parse(type, payload, len, &q->err, &res, &q->msg) < 0)
                        q->err = -EBADMSG;
                json_decref(res);
        } else if (type == 0)
                q->dead = true;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
}

/* NODE_END {"error":{"code","message"}}: the watch ended from the
 * sandbox's side (message: the guest's words, made valid UTF-8). */
static int watch_end_error(struct node_conn *c, const char *code, const char *message) {
        _cleanup_free_ char *clean = utf8_sanitize(message, strlen(message), NULL);
        return conn_send_end(
                c, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", clean ?: "watch ended"));
}

static int op_file_watch(struct node_conn *c, json_t *req) {
        const char *path;
        bool recursive;
        int r;
        if ((r = field_path(c, req, "path", true, &path)) < 0 ||
            (r = field_bool(c, req, "recursive", false, &recursive)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_FILES_READ, &s, &g)) < 0)
                return r;
        if (!guestconn_has(g, GUESTCONN_FEATURE_WATCH))
                return conn_reply_error(c, -EOPNOTSUPP, "unavailable",
                                        "the sandbox's guest agent is older and cannot watch directories");

        struct watch_queue q = { .events = json_array() };
        pthread_mutex_init(&q.lock, NULL);
        node_cond_init(&q.cond);
        uint32_t stream = 0;
        _cleanup_free_ char *msg = NULL;
        json_t *m = json_pack("{s:s, s:b}", "path", path, "recursive", recursive);
        r = m && q.events ? guestconn_stream_open(g, watch_handler, &q, &stream) : -ENOMEM;
        if (r >= 0)
                r = guestconn_call_stream(g, stream, PROTO_WATCH, m, GUEST_CALL_MS, NULL, &msg);
        json_decref(m);
        if (r < 0) {
                if (msg && (r == -EMFILE || r == -EAGAIN))
                        conn_reply_error(c, r, "unavailable", "watch failed: %s", msg);
                else if (msg && (r == -E2BIG || r == -ENOSPC))
                        conn_reply_error(c, r, "too_large", "watch failed: %s", msg);
                else
                        reply_guest_failure(c, r, msg, "watch failed");
                goto out;
        }
        r = conn_reply_ok(c, NULL);
        if (r < 0)
                goto end;

        for (;;) {
                pthread_mutex_lock(&q.lock);
                if (json_array_size(q.events) == 0 && !q.overflow && !q.ended && !q.dead) {
                        struct timespec ts;
                        node_deadline_after_ms(&ts, WATCH_POLL_MS);
                        pthread_cond_timedwait(&q.cond, &q.lock, &ts);
                        pthread_mutex_unlock(&q.lock);
                        if (conn_hung_up(c))
                                break;
                        continue;
                }
                /* the events go out without the lock: the guest's reader
                 * never waits for a slow client */
                json_t *batch = q.events;
                q.events = json_array();
                bool overflow = q.overflow, ended = q.ended, dead = q.dead;
                q.overflow = false;
                int err = q.err;
                _cleanup_free_ char *why = q.msg ? strdup(q.msg) : NULL;
                pthread_mutex_unlock(&q.lock);
                size_t i;
                json_t *ev;
                r = 0;
                json_array_foreach(batch, i, ev) {
                        if (r >= 0)
                                r = conn_send_event(c, json_incref(ev));
                }
                json_decref(batch);
                if (r >= 0 && overflow)
                        r = conn_send_event(c, json_pack("{s:s}", "type", "overflow"));
                if (r < 0 || !q.events)
                        break;
                /* ended by the guest (its directory went) or with the
                 * channel: nothing to tell the guest */
                if (ended) {
                        watch_end_error(c, err == -EBADMSG ? "guest" : node_guest_errno_code(-err),
                                        why ? why : "the watch ended");
                        goto out;
                }
                if (dead) {
                        _cleanup_free_ char *serr = sandbox_error(s);
                        _cleanup_free_ char *text = strdup_printf("the guest channel closed%s%s",
                                                                  serr ? ": " : "", serr ? serr : "");
                        watch_end_error(c, "guest", text ? text : "the guest channel closed");
                        goto out;
                }
        }
end:
        /* the client went away: the guest stops watching */
        guestconn_send(g, PROTO_WATCH_END, stream, "{}", 2);
out:
        if (stream)
                guestconn_stream_close(g, stream);
        if (q.invalid > 0)
                log_emit(LOG_LEVEL_WARN, c->ctx, "the guest sent %llu malformed watch events (dropped)",
                         (unsigned long long) q.invalid);
        json_decref(q.events);
        free(q.msg);
        pthread_mutex_destroy(&q.lock);
        pthread_cond_destroy(&q.cond);
        return r;
}

/* ---- dispatch ---- */

static const struct {
        const char *name;
        int (*fn)(struct node_conn *c, json_t *req);
        /* it changes what a sandbox is (its VM, its images): one that the
         * node's exit cut off between doing it and replying leaves
         * airlockd guessing, so a stopping node lets these finish first */
        bool lifecycle;
} ops[] = {
        { "health", op_health, false },
        { "template.list", op_template_list, false },
        { "pool.list", op_pool_list, false },
        { "sandbox.create", op_sandbox_create, true },
        { "sandbox.get", op_sandbox_get, false },
        { "sandbox.list", op_sandbox_list, false },
        { "sandbox.delete", op_sandbox_delete, true },
        { "sandbox.network.get", op_network_get, false },
        { "sandbox.metrics", op_sandbox_metrics, false },
        { "sandbox.network.set", op_network_set, false },
        { "sandbox.network.log", op_network_log, false },
        { "sandbox.secrets.set", nodeops_secrets_set, false },
        { "sandbox.secrets.get", nodeops_secrets_get, false },
        { "audit.read", nodeops_audit_read, false },
        { "sandbox.pause", nodeops_sandbox_pause, true },
        { "sandbox.resume", nodeops_sandbox_resume, true },
        { "sandbox.stop", nodeops_sandbox_stop, true },
        { "sandbox.start", nodeops_sandbox_start, true },
        { "sandbox.snapshot", nodeops_sandbox_snapshot, true },
        { "sandbox.rollback", nodeops_sandbox_rollback, true },
        { "snapshot.delete", nodeops_snapshot_delete, true },
        { "sandbox.fork", nodeops_sandbox_fork, true },
        { "sandbox.suspend", nodeops_sandbox_suspend, true },
        { "sandbox.wake", nodeops_sandbox_wake, true },
        { "suspended.delete", nodeops_suspended_delete, true },
        { "suspended.get", nodeops_suspended_get, false },
        { "exec", op_exec, false },
        { "session.start", op_session_start, false },
        { "session.attach", op_session_attach, false },
        { "session.stdin", op_session_stdin, false },
        { "session.signal", op_session_signal, false },
        { "session.resize", op_session_resize, false },
        { "session.list", op_session_list, false },
        { "session.adopt", op_session_adopt, false },
        { "file.write", op_file_write, false },
        { "file.read", op_file_read, false },
        { "file.list", op_file_list, false },
        { "file.stat", op_file_stat, false },
        { "file.remove", op_file_remove, false },
        { "file.mkdir", op_file_mkdir, false },
        { "file.rename", op_file_rename, false },
        { "file.watch", op_file_watch, false },
        { "port.http", portproxy_http, false },
};

static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lifecycle_cond = PTHREAD_COND_INITIALIZER;
static unsigned lifecycle_in_flight;

int nodeops_dispatch(struct node_conn *c, const char *op, json_t *req) {
        for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
                if (strcmp(ops[i].name, op) != 0)
                        continue;
                if (!ops[i].lifecycle)
                        return ops[i].fn(c, req);
                pthread_mutex_lock(&lifecycle_lock);
                lifecycle_in_flight++;
                pthread_mutex_unlock(&lifecycle_lock);
                int r = ops[i].fn(c, req);
                if (r < 0 && !c->replied)
                        conn_reply_errno(c, r, op); /* answered before it counts as done */
                pthread_mutex_lock(&lifecycle_lock);
                lifecycle_in_flight--;
                pthread_cond_broadcast(&lifecycle_cond);
                pthread_mutex_unlock(&lifecycle_lock);
                return r;
        }
        return conn_reply_error(c, -EOPNOTSUPP, "invalid", "unknown op \"%.64s\"", op);
}

unsigned nodeops_lifecycle_drain(unsigned timeout_s) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_s;
        pthread_mutex_lock(&lifecycle_lock);
        while (lifecycle_in_flight > 0)
                if (pthread_cond_timedwait(&lifecycle_cond, &lifecycle_lock, &deadline) != 0)
                        break;
        unsigned left = lifecycle_in_flight;
        pthread_mutex_unlock(&lifecycle_lock);
        return left;
}
