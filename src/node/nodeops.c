/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeops.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capcheck.h"
#include "config.h"
#include "conn.h"
#include "guestconn.h"
#include "guestreply.h"
#include "gwclient.h"
#include "log.h"
#include "netpolicy.h"
#include "nodemetrics.h"
#include "nodeops-ops.h"
#include "nodeops-req.h"
#include "nodereport.h"
#include "nodeutil.h"
#include "objstore.h"
#include "pool.h"
#include "portproxy.h"
#include "proto.h"
#include "sandbox.h"
#include "session.h"
#include "template.h"
#include "util.h"

/* The network log's entries one request may ask for (the API's limit). */
#define NETWORK_LOG_MAX 1000

#define EXEC_DEFAULT_TIMEOUT_S 60
/* After SIGKILL on timeout, how long to wait for the EXIT frame. */
#define EXEC_KILL_GRACE_MS 2000
/* Room left in a reply frame for everything but exec's two outputs. */
#define REPLY_SLACK 1024
/* session.resize: the terminal sizes a client may ask for. */
#define TERMINAL_MAX 1000
/* EXEC's tag, at most (the guest's limit). */
#define TAG_MAX 256

static const struct node_config *ocfg;
static enum vmm_accel oaccel;
static char oaccel_reason[256];

void nodeops_init(const struct node_config *cfg, enum vmm_accel accel, const char *accel_reason) {
        ocfg = cfg;
        nodeops_req_init(cfg);
        oaccel = accel;
        snprintf(oaccel_reason, sizeof oaccel_reason, "%s", accel_reason ? accel_reason : "");
}

static int req_sandbox(struct node_conn *c, json_t *req, uint32_t need, struct sandbox **ret_s,
                       struct guestconn **ret_g) {
        return nodeops_req_sandbox(c, req, need, 0, ret_s, ret_g);
}

/* ---- simple ops ---- */

static int op_health(struct node_conn *c, json_t *req) {
        bool ready, failed;
        json_t *templates = template_prebuild_status(&ready, &failed);
        if (!templates)
                return -ENOMEM;
        return conn_reply_ok(c, json_pack("{s:b, s:b, s:s, s:s, s:s, s:o}", "ready", ready, "failed", failed,
                                          "accel", vmm_accel_name(oaccel), "accel_reason", oaccel_reason, "cpu",
                                          vmm_cpu_id(), "templates", templates));
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
        const char *id, *tpl = NULL, *image = NULL;
        _cleanup_(json_decrefp) json_t *env = NULL;
        int r;
        /* from a template, or from an image (sandbox.publish) */
        if ((r = nodeops_field_name(c, req, "id", &id)) < 0 ||
            (r = json_object_get(req, "image") ? nodeops_field_name(c, req, "image", &image)
                                               : nodeops_field_name(c, req, "template", &tpl)) < 0 ||
            (r = nodeops_field_env(c, req, "env", &env)) < 0)
                return r;
        json_t *md = json_object_get(req, "metadata");
        if (md && !json_is_object(md) && !json_is_null(md))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"metadata\" must be an object");
        /* the owner that capabilities for it must name */
        const char *tenant = SANDBOX_TENANT_ADMIN;
        if (json_object_get(req, "tenant") && (r = nodeops_field_name(c, req, "tenant", &tenant)) < 0)
                return r;
        bool recover_checkpoint;
        if (sandbox_recovery_from_json(req, &recover_checkpoint) < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "field \"recovery\" must be \"boot\" or \"checkpoint\"");
        struct sandbox_limits limits;
        if (sandbox_limits_from_json(req, &limits) < 0)
                return conn_reply_error(c, -EINVAL, "invalid",
                                        "field \"limits\" must be {\"memory_mib\":%d..,\"vcpus\":1..} (either may be absent)",
                                        SANDBOX_MEMORY_MIN_MIB);
        /* absent: an airlockd from before policies, which meant allow-all */
        _cleanup_free_ char *network = NULL;
        if ((r = nodeops_field_network(c, req, false, &network)) < 0)
                return r;
        struct sandbox_volume volumes[SANDBOX_VOLUMES_MAX];
        _cleanup_free_ char *verr = NULL;
        if (sandbox_volumes_from_json(req, volumes, &verr) < 0)
                return conn_reply_error(c, -EINVAL, "invalid", "%s", verr);
        if (image && volumes[0].id[0])
                return conn_reply_error(c, -EINVAL, "invalid", "a sandbox made from an image takes no volumes yet");

        snprintf(c->ctx + strlen(c->ctx), sizeof c->ctx - strlen(c->ctx), " sandbox=%s", id);
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        _cleanup_free_ char *err = NULL;
        struct objstore_data_key key = { 0 };
        bool has_key = false;
        if (image && (r = nodeops_field_data_key(c, req, &key, &has_key)) < 0)
                return r;
        /* how long a create waits for its template's build (airlockd's
         * E2B door and MCP ask for less than a client's request timeout) */
        json_t *wait = json_object_get(req, "template_wait_ms");
        if (wait && (!json_is_integer(wait) || json_integer_value(wait) < 1 ||
                     json_integer_value(wait) > TEMPLATE_WAIT_MS))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"template_wait_ms\" must be 1..%d",
                                        TEMPLATE_WAIT_MS);
        struct sandbox_create_opts o = { .id = id, .env = env, .tenant = tenant, .recover_checkpoint = recover_checkpoint,
                                         .limits = &limits, .network = network, .volumes = volumes,
                                         .template_wait_ms = wait ? (unsigned) json_integer_value(wait) : 0 };
        r = image ? sandbox_create_from_image(&o, image, has_key ? &key : NULL, &s, &err)
                  : sandbox_create(&o, tpl, &s, &err);
        sodium_memzero(key.key, sizeof key.key);
        if (r == -EOPNOTSUPP)
                return conn_reply_error(c, r, "unsupported", "this node has no object store");
        if (r < 0) {
                const char *code = r == -EEXIST ? "conflict"
                                   : r == -EINVAL ? "invalid"
                                   : r == -ENOENT ? "not_found"
                                   : r == -EUSERS || r == -EAGAIN ? "unavailable"
                                   : r == -EINPROGRESS ? "template_building"
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
        int r = nodeops_field_name(c, req, "id", &id);
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
        /* and the suspended copies whose upload waits for its data key */
        return conn_reply_ok(c, json_pack("{s:o, s:o*}", "sandboxes", list, "uploads_waiting_key",
                                          sandbox_uploads_waiting_json()));
}

static int op_sandbox_delete(struct node_conn *c, json_t *req) {
        const char *id;
        int r = nodeops_field_name(c, req, "id", &id);
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
        int r = nodeops_field_name(c, req, "id", &id);
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
        int r = nodeops_field_uint(c, req, "limit", 100, 1, NETWORK_LOG_MAX, &limit);
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
        if ((r = nodeops_field_cmd(c, req, "cmd", &cmd)) < 0 || (r = nodeops_field_env(c, req, "env", &env)) < 0 ||
            (r = nodeops_field_path(c, req, "cwd", false, &cwd)) < 0 || (r = nodeops_field_user(c, req, &user)) < 0 ||
            (r = nodeops_field_string(c, req, "stdin", false, PROTO_MAX_PAYLOAD, &stdin_s)) < 0 ||
            (r = nodeops_field_uint(c, req, "timeout_s", MIN(EXEC_DEFAULT_TIMEOUT_S, ocfg->exec_timeout_max_s), 1,
                                    ocfg->exec_timeout_max_s, &timeout_s)) < 0 ||
            (r = nodeops_field_uint(c, req, "max_output", ocfg->exec_max_output, 0, UINT32_MAX, &max_output)) < 0)
                return r;
        max_output = MIN(max_output, (uint64_t) ocfg->exec_max_output);
        size_t stdin_len = stdin_s ? json_string_length(json_object_get(req, "stdin")) : 0;

        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        struct guestconn *g;
        if ((r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, &g)) < 0)
                return r;
        _cleanup_(template_info_freep) struct template_info *tpl_hold = NULL;
        sandbox_exec_defaults(s, &cwd, &user, &tpl_hold);
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
                r = guestconn_call_stream(g, stream, PROTO_EXEC, exec_req, NODEOPS_GUEST_CALL_MS, NULL, &msg);
        if (r < 0) {
                if (r == -ESRCH && msg && user)
                        conn_reply_error(c, r, "invalid", "unknown user '%s'", user);
                else
                        nodeops_reply_guest_failure(c, r, msg, "exec failed");
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
        if ((r = nodeops_field_name(c, req, "session_id", &sid)) < 0 || (r = nodeops_field_cmd(c, req, "cmd", &cmd)) < 0 ||
            (r = nodeops_field_env(c, req, "env", &env)) < 0 || (r = nodeops_field_path(c, req, "cwd", false, &cwd)) < 0 ||
            (r = nodeops_field_user(c, req, &user)) < 0 ||
            (r = nodeops_field_string(c, req, "tag", false, TAG_MAX, &tag)) < 0 ||
            (r = nodeops_field_bool(c, req, "pty", false, &pty)) < 0 ||
            (r = nodeops_field_uint(c, req, "rows", 24, 1, 65535, &rows)) < 0 ||
            (r = nodeops_field_uint(c, req, "cols", 80, 1, 65535, &cols)) < 0)
                return r;
        _cleanup_(sandbox_unrefp) struct sandbox *s = NULL;
        if ((r = req_sandbox(c, req, CAP_ACCESS_EXEC, &s, NULL)) < 0)
                return r;
        _cleanup_(template_info_freep) struct template_info *tpl_hold = NULL;
        sandbox_exec_defaults(s, &cwd, &user, &tpl_hold);
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
        r = guestconn_call(g, PROTO_PROCESSES, m, NODEOPS_GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return nodeops_reply_guest_failure(c, r, msg, "listing the processes failed");
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

/* The node's metrics (nodemetrics.h); "per_sandbox": with each
 * sandbox's VMM CPU and memory. */
static int op_node_metrics(struct node_conn *c, json_t *req) {
        bool per_sandbox;
        int r = nodeops_field_bool(c, req, "per_sandbox", false, &per_sandbox);
        if (r < 0)
                return r;
        json_t *m = nodereport_metrics_json(per_sandbox);
        if (!m)
                return conn_reply_error(c, -ENOMEM, "internal", "cannot gather the node's metrics");
        return conn_reply_ok(c, json_pack("{s:o}", "metrics", m));
}

/* A sandbox's VMM CPU and memory and its disk, now and over the last
 * hour (nodemetrics.h). */
static int op_sandbox_usage(struct node_conn *c, json_t *req) {
        const char *id = json_string_value(json_object_get(req, "id"));
        if (!id || !name_is_valid(id))
                return conn_reply_error(c, -EINVAL, "invalid", "field \"id\" must be a sandbox id");
        json_t *u = NULL;
        int r = nodereport_usage(id, &u);
        if (r == -ENOENT)
                return conn_reply_error(c, r, "not_found", "no sandbox %s", id);
        if (r < 0)
                return r;
        return conn_reply_ok(c, json_pack("{s:o}", "usage", u));
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
        r = guestconn_call(g, PROTO_METRICS, m, NODEOPS_GUEST_CALL_MS, &res, &msg);
        if (r < 0)
                return nodeops_reply_guest_failure(c, r, msg, "reading the metrics failed");
        if (!(checked = guestreply_metrics(res)))
                return conn_reply_error(c, -EBADMSG, "guest",
                                        "reading the metrics failed: the guest agent sent a malformed reply");
        return conn_reply_ok(c, json_pack("{s:O}", "metrics", checked));
}

static int op_session_adopt(struct node_conn *c, json_t *req) {
        const char *sid;
        uint64_t pid;
        int r;
        if ((r = nodeops_field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "pid"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"pid\"");
        if ((r = nodeops_field_uint(c, req, "pid", 0, 1, GUESTREPLY_PID_MAX, &pid)) < 0)
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
        return nodeops_req_capability(c, req, s, CAP_ACCESS_SESSION_ATTACH, 0);
}

static int op_session_attach(struct node_conn *c, json_t *req) {
        const char *sid;
        bool from_now;
        int r = nodeops_field_name(c, req, "session_id", &sid);
        if (r < 0 || (r = nodeops_field_bool(c, req, "from_now", false, &from_now)) < 0 ||
            (r = req_session(c, req, sid)) < 0)
                return r;
        return session_attach(c, sid, from_now);
}

static int op_session_stdin(struct node_conn *c, json_t *req) {
        const char *sid, *data;
        bool close_stdin;
        int r;
        if ((r = nodeops_field_name(c, req, "session_id", &sid)) < 0 ||
            (r = nodeops_field_string(c, req, "data", false, PROTO_MAX_PAYLOAD, &data)) < 0 ||
            (r = nodeops_field_bool(c, req, "close", false, &close_stdin)) < 0)
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
        if ((r = nodeops_field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "rows") || !json_object_get(req, "cols"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"%s\"",
                                        json_object_get(req, "rows") ? "cols" : "rows");
        if ((r = nodeops_field_uint(c, req, "rows", 0, 1, TERMINAL_MAX, &rows)) < 0 ||
            (r = nodeops_field_uint(c, req, "cols", 0, 1, TERMINAL_MAX, &cols)) < 0 ||
            (r = req_session(c, req, sid)) < 0)
                return r;
        return session_resize(c, sid, (unsigned) rows, (unsigned) cols);
}

static int op_session_signal(struct node_conn *c, json_t *req) {
        const char *sid;
        uint64_t sig;
        int r;
        if ((r = nodeops_field_name(c, req, "session_id", &sid)) < 0)
                return r;
        if (!json_object_get(req, "signal"))
                return conn_reply_error(c, -EINVAL, "invalid", "missing field \"signal\"");
        if ((r = nodeops_field_uint(c, req, "signal", 0, 1, 64, &sig)) < 0 || (r = req_session(c, req, sid)) < 0)
                return r;
        return session_signal(c, sid, (int) sig);
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
        { "node.metrics", op_node_metrics, false },
        { "template.list", op_template_list, false },
        { "template.build", nodeops_template_build, false },
        { "template.get", nodeops_template_get, false },
        { "template.log", nodeops_template_log, false },
        { "template.delete", nodeops_template_delete, false },
        { "pool.list", op_pool_list, false },
        { "volume.create", nodeops_volume_create, true },
        { "volume.clone", nodeops_volume_clone, true },
        { "volume.delete", nodeops_volume_delete, true },
        { "sandbox.create", op_sandbox_create, true },
        { "sandbox.get", op_sandbox_get, false },
        { "sandbox.list", op_sandbox_list, false },
        { "sandbox.delete", op_sandbox_delete, true },
        { "sandbox.network.get", op_network_get, false },
        { "sandbox.metrics", op_sandbox_metrics, false },
        { "sandbox.usage", op_sandbox_usage, false },
        { "sandbox.network.set", op_network_set, false },
        { "sandbox.network.log", op_network_log, false },
        { "sandbox.secrets.set", nodeops_secrets_set, false },
        { "sandbox.secrets.get", nodeops_secrets_get, false },
        { "audit.read", nodeops_audit_read, false },
        { "sandbox.pause", nodeops_sandbox_pause, true },
        { "sandbox.resume", nodeops_sandbox_resume, true },
        { "sandbox.stop", nodeops_sandbox_stop, true },
        { "sandbox.start", nodeops_sandbox_start, true },
        { "sandbox.agent.upgrade", nodeops_sandbox_agent_upgrade, true },
        { "sandbox.snapshot", nodeops_sandbox_snapshot, true },
        { "sandbox.rollback", nodeops_sandbox_rollback, true },
        { "snapshot.delete", nodeops_snapshot_delete, true },
        { "sandbox.fork", nodeops_sandbox_fork, true },
        { "sandbox.suspend", nodeops_sandbox_suspend, true },
        { "sandbox.publish", nodeops_sandbox_publish, true },
        { "sandbox.wake", nodeops_sandbox_wake, true },
        { "suspended.delete", nodeops_suspended_delete, true },
        { "suspended.get", nodeops_suspended_get, false },
        { "suspended.upload", nodeops_suspended_upload, true },
        { "exec", op_exec, false },
        { "session.start", op_session_start, false },
        { "session.attach", op_session_attach, false },
        { "session.stdin", op_session_stdin, false },
        { "session.signal", op_session_signal, false },
        { "session.resize", op_session_resize, false },
        { "session.list", op_session_list, false },
        { "session.adopt", op_session_adopt, false },
        { "file.write", nodeops_file_write, false },
        { "file.read", nodeops_file_read, false },
        { "file.list", nodeops_file_list, false },
        { "file.stat", nodeops_file_stat, false },
        { "file.remove", nodeops_file_remove, false },
        { "file.mkdir", nodeops_file_mkdir, false },
        { "file.rename", nodeops_file_rename, false },
        { "file.setattr", nodeops_file_setattr, false },
        { "file.watch", nodeops_file_watch, false },
        { "port.http", portproxy_http, false },
};

static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lifecycle_cond = PTHREAD_COND_INITIALIZER;
static unsigned lifecycle_in_flight;

static int dispatch_one(size_t i, struct node_conn *c, json_t *req);

int nodeops_dispatch(struct node_conn *c, const char *op, json_t *req) {
        for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
                if (strcmp(ops[i].name, op) != 0)
                        continue;
                uint64_t t0 = now_monotonic_ns();
                int r = dispatch_one(i, c, req);
                nodemetrics_request(ops[i].name, r, (double) (now_monotonic_ns() - t0) / 1e9);
                return r;
        }
        return conn_reply_error(c, -EOPNOTSUPP, "invalid", "unknown op \"%.64s\"", op);
}

static int dispatch_one(size_t i, struct node_conn *c, json_t *req) {
        const char *op = ops[i].name;
        {
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
