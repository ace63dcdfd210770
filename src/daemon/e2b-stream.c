/* SPDX-License-Identifier: Apache-2.0 */
/* envd's server streams: a process's events (Start, Connect) and a
 * directory's (WatchDir), read from a node stream and sent as Connect
 * envelopes while they happen. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apireq.h"
#include "cap.h"
#include "dataplane.h"
#include "e2b-envd-internal.h"
#include "log.h"
#include "nodeclient.h"
#include "util.h"

#define STREAM_FRAME_TIMEOUT_S 60 /* a started node frame must complete within this */
#define STREAM_BLOCK 16384        /* what MHD asks for at a time */

struct envd_stream {
        struct node_conn *conn;
        const atomic_bool *stopping;
        bool watch;     /* WatchDir (else a process) */
        bool pty;       /* output goes out as "pty" */
        bool upload;    /* a watch saw an upload's temporary file since its last event */
        bool done;      /* nothing after what is pending */
        uint8_t *pend;
        size_t pend_len, pend_off;
        uint64_t last_ns;      /* when something last went out */
        uint64_t keepalive_ns; /* 0: none */
        uint64_t deadline_ns;  /* Connect-Timeout-Ms, 0: none */
        /* to end the process at its deadline, as envd does */
        const struct daemon_config *config;
        char *tenant_id;
        char sandbox_id[HTTP_ID_MAX];
        char session_id[HTTP_ID_MAX];
        char log_ctx[256];
};

static void stream_free(void *cls) {
        struct envd_stream *s = cls;
        node_conn_free(s->conn);
        free(s->pend);
        free(s->tenant_id);
        free(s);
}

static int append(struct envd_stream *s, uint8_t *b, size_t n) {
        if (s->pend_off == s->pend_len) {
                s->pend_off = s->pend_len = 0;
        }
        uint8_t *p = realloc(s->pend, s->pend_len + n);
        if (!p) {
                free(b);
                return -ENOMEM;
        }
        memcpy(p + s->pend_len, b, n);
        free(b);
        s->pend = p;
        s->pend_len += n;
        return 0;
}

/* Queues one message (consumed). */
static int queue_message(struct envd_stream *s, json_t *msg) {
        uint8_t *b = NULL;
        size_t n = 0;
        int r = msg ? connect_envelope(0, msg, &b, &n) : -ENOMEM;
        json_decref(msg);
        return r < 0 ? r : append(s, b, n);
}

/* Queues the end of the stream: ok, or the error. */
static int queue_end(struct envd_stream *s, bool ok, enum connect_code code, const char *message) {
        uint8_t *b = NULL;
        size_t n = 0;
        s->done = true;
        if (!ok)
                log_emit(LOG_LEVEL_INFO, s->log_ctx, "stream ended: %s: %s", connect_code_name(code), message);
        int r = connect_end_stream(code, message, ok, &b, &n);
        return r < 0 ? r : append(s, b, n);
}

void e2b_stream_error(struct api_reply *reply, enum connect_code code, const char *message) {
        uint8_t *b = NULL;
        size_t n = 0;
        struct MHD_Response *resp = NULL;
        if (connect_end_stream(code, message, false, &b, &n) >= 0 &&
            !(resp = MHD_create_response_from_buffer(n, b, MHD_RESPMEM_MUST_FREE)))
                free(b);
        if (!resp)
                return e2b_rest_error(reply, 500, "out of memory");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
        *reply = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
}

/* The process's end as envd reports it (Go's ProcessState). */
static json_t *end_event(const json_t *ev) {
        json_int_t code = json_integer_value(json_object_get(ev, "exit_code"));
        json_int_t sig = json_integer_value(json_object_get(ev, "signal"));
        char status[64];
        if (sig > 0) {
                snprintf(status, sizeof status, "signal: %s", sig == 9 ? "killed" : sig == 15 ? "terminated" : "other");
                return json_pack("{s:{s:{s:i, s:b, s:s, s:s}}}", "event", "end", "exitCode", -1, "exited", false,
                                 "status", status, "error", status);
        }
        snprintf(status, sizeof status, "exit status %lld", (long long) code);
        json_t *end = json_pack("{s:I, s:b, s:s}", "exitCode", code, "exited", true, "status", status);
        if (end && code != 0)
                json_object_set_new(end, "error", json_string(status));
        return end ? json_pack("{s:{s:o}}", "event", "end", end) : NULL;
}

/* One node event of a process stream. */
static int process_event(struct envd_stream *s, const json_t *ev) {
        const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
        const json_t *data = json_object_get(ev, "data");
        if ((strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) && json_is_string(data)) {
                /* base64 already, as Connect's bytes are */
                const char *key = s->pty ? "pty" : type;
                return queue_message(s, json_pack("{s:{s:{s:O}}}", "event", "data", key, data));
        }
        if (strcmp(type, "exit") == 0) {
                const char *error = json_string_value(json_object_get(ev, "error"));
                /* not the process's end: the stream's (its execution was
                 * replaced, the sandbox went): the process may run on */
                if (error)
                        return queue_end(s, false, CONNECT_UNAVAILABLE, error);
                int r = queue_message(s, end_event(ev));
                return r < 0 ? r : queue_end(s, true, CONNECT_UNKNOWN, NULL);
        }
        if (strcmp(type, "dropped") == 0)
                log_emit(LOG_LEVEL_WARN, s->log_ctx, "the node dropped %lld bytes of output",
                         (long long) json_integer_value(json_object_get(ev, "bytes")));
        return 0;
}

/* One node event of a watch: {"name","type"} or {"type":"overflow"}. */
static int watch_event(struct envd_stream *s, const json_t *ev) {
        static const struct {
                const char *node, *e2b;
        } types[] = {
                { "create", "EVENT_TYPE_CREATE" }, { "write", "EVENT_TYPE_WRITE" },
                { "remove", "EVENT_TYPE_REMOVE" }, { "rename", "EVENT_TYPE_RENAME" },
                { "chmod", "EVENT_TYPE_CHMOD" },
        };
        const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
        const char *name = json_string_value(json_object_get(ev, "name"));
        /* the temporary file the guest writes an upload to before it
         * renames it into place (docs/guest-protocol.md, FILE_WRITE) */
        const char *base = name ? strrchr(name, '/') : NULL;
        if (name && strncmp(base ? base + 1 : name, ".airlock-write-", 15) == 0) {
                s->upload = true;
                return 0;
        }
        /* ... which lands by a rename: for envd, which writes in place,
         * that file was made and written */
        bool landed = s->upload && strcmp(type, "create") == 0;
        s->upload = false;
        if (landed) {
                int r = queue_message(s, json_pack("{s:{s:s, s:s}}", "filesystem", "name", name, "type",
                                                   "EVENT_TYPE_CREATE"));
                return r < 0 ? r : queue_message(s, json_pack("{s:{s:s, s:s}}", "filesystem", "name", name, "type",
                                                              "EVENT_TYPE_WRITE"));
        }
        if (strcmp(type, "overflow") == 0)
                return queue_end(s, false, CONNECT_RESOURCE_EXHAUSTED, "too many events: the watch fell behind");
        for (size_t i = 0; name && i < ARRAY_SIZE(types); i++)
                if (strcmp(types[i].node, type) == 0)
                        return queue_message(s, json_pack("{s:{s:s, s:s}}", "filesystem", "name", name, "type",
                                                          types[i].e2b));
        return 0;
}

/* The deadline passed: envd ends the process (E2B-PROTOCOL.md 4.3). */
static void deadline(struct envd_stream *s) {
        if (!s->watch && s->session_id[0]) {
                char err[API_ERRMSG_MAX] = "";
                _cleanup_(json_decrefp) json_t *req =
                        json_pack("{s:s, s:s, s:i}", "op", "session.signal", "session_id", s->session_id, "signal", 9);
                if (req && dataplane_call(s->config, s->tenant_id, s->sandbox_id, CAP_ACCESS_SESSION_ATTACH, req,
                                          s->config->node_timeout_s, NULL, NULL, err) < 0)
                        log_emit(LOG_LEVEL_WARN, s->log_ctx, "cannot end the process at its deadline: %s", err);
        }
        (void) queue_end(s, false, CONNECT_DEADLINE_EXCEEDED, "the call ran past its Connect-Timeout-Ms");
}

/* Content callback: runs in the connection's own thread, so it may block on
 * the node socket; looks at the clock and shutdown once a second. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct envd_stream *s = cls;
        (void) pos;
        for (;;) {
                if (s->pend_off < s->pend_len) {
                        size_t n = MIN(max, s->pend_len - s->pend_off);
                        memcpy(buf, s->pend + s->pend_off, n);
                        s->pend_off += n;
                        s->last_ns = now_monotonic_ns();
                        return (ssize_t) n;
                }
                if (s->done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                uint64_t now = now_monotonic_ns();
                if (atomic_load(s->stopping)) {
                        (void) queue_end(s, false, CONNECT_UNAVAILABLE, "airlockd is shutting down");
                        continue;
                }
                if (s->deadline_ns && now >= s->deadline_ns) {
                        deadline(s);
                        continue;
                }
                if (s->keepalive_ns && now - s->last_ns >= s->keepalive_ns) {
                        json_t *k = s->watch ? json_pack("{s:{}}", "keepalive")
                                             : json_pack("{s:{s:{}}}", "event", "keepalive");
                        if (queue_message(s, k) < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        continue;
                }
                int r = node_conn_wait(s->conn, 1000);
                if (r < 0) {
                        (void) queue_end(s, false, CONNECT_UNAVAILABLE, "the node agent connection failed");
                        continue;
                }
                if (r == 0)
                        continue;
                struct node_frame f;
                char err[API_ERRMSG_MAX] = "";
                r = node_conn_next(s->conn, &f, err);
                if (r <= 0) {
                        (void) queue_end(s, false, CONNECT_UNAVAILABLE, err[0] ? err : "the node agent closed the stream");
                        continue;
                }
                if (f.type == PROTO_NODE_END) {
                        json_decref(f.event);
                        if (s->watch)
                                (void) queue_end(s, true, CONNECT_UNKNOWN, NULL);
                        else
                                (void) queue_end(s, false, CONNECT_UNKNOWN, "the process stream ended without its exit");
                        continue;
                }
                if (f.type != PROTO_NODE_EVENT)
                        continue;
                r = s->watch ? watch_event(s, f.event) : process_event(s, f.event);
                json_decref(f.event);
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
}

/* The response of a stream whose first message is first (consumed). */
static void stream_reply(struct envd_call *c, struct node_conn **conn, bool watch, bool pty, const char *session_id,
                         json_t *first, struct api_reply *reply) {
        struct envd_stream *s = calloc(1, sizeof *s);
        if (!s || node_conn_set_timeout(*conn, STREAM_FRAME_TIMEOUT_S) < 0 ||
            (c->tenant_id && !(s->tenant_id = strdup(c->tenant_id)))) {
                json_decref(first);
                if (s)
                        stream_free(s);
                return e2b_stream_error(reply, CONNECT_INTERNAL, "out of memory");
        }
        s->conn = TAKE_PTR(*conn);
        s->stopping = c->api->stopping;
        s->watch = watch;
        s->pty = pty;
        s->config = c->api->config;
        snprintf(s->sandbox_id, sizeof s->sandbox_id, "%s", c->sandbox_id);
        snprintf(s->session_id, sizeof s->session_id, "%s", session_id ?: "");
        snprintf(s->log_ctx, sizeof s->log_ctx, "%s sandbox=%s%s%s", c->api->log_ctx, c->sandbox_id,
                 session_id ? " session=" : "", session_id ?: "");
        s->last_ns = now_monotonic_ns();
        if (c->keepalive_s)
                s->keepalive_ns = (uint64_t) c->keepalive_s * 1000000000ULL;
        if (c->timeout_ms)
                s->deadline_ns = s->last_ns + c->timeout_ms * 1000000ULL;
        struct MHD_Response *resp = NULL;
        if (queue_message(s, first) < 0 ||
            !(resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, s, stream_free))) {
                stream_free(s);
                return e2b_stream_error(reply, CONNECT_INTERNAL, "out of memory");
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        *reply = (struct api_reply){ .status = MHD_HTTP_OK, .response = resp };
}

static void fail(struct envd_call *c, int r, struct api_reply *reply) {
        /* the node says "unknown user 'x'" (invalid): envd's unauthenticated */
        bool user = e2b_unknown_user(c->api, c->user, r);
        e2b_stream_error(reply, user ? CONNECT_UNAUTHENTICATED : e2b_connect_code(r),
                         c->api->err[0] ? c->api->err : api_error_default_message(r));
}

/* Attaches to session sid of process pid and streams it: from its start
 * (Start: all it wrote is this client's), or from now (Connect: what came
 * before went to another client, as envd does). */
static void attach(struct envd_call *c, const char *sid, json_int_t pid, bool pty, bool from_now,
                   struct api_reply *reply) {
        _cleanup_(node_conn_freep) struct node_conn *conn = NULL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                              json_pack("{s:s, s:s, s:b}", "op", "session.attach", "session_id", sid, "from_now",
                                        from_now),
                              &rep, &conn);
        if (r < 0)
                return fail(c, r, reply);
        stream_reply(c, &conn, false, pty, sid, json_pack("{s:{s:{s:I}}}", "event", "start", "pid", pid), reply);
}

static bool string_map(const json_t *o) {
        const char *k;
        const json_t *v;
        if (!json_is_object(o))
                return false;
        json_object_foreach((json_t *) o, k, v) if (!json_is_string(v)) return false;
        return true;
}

void e2b_process_start(struct envd_call *c, const json_t *req, struct api_reply *reply) {
        const json_t *proc = json_object_get(req, "process");
        const json_t *cmd = json_object_get(proc, "cmd"), *args = json_object_get(proc, "args");
        const json_t *envs = json_object_get(proc, "envs"), *cwd = json_object_get(proc, "cwd");
        const json_t *pty = json_object_get(req, "pty"), *tag = json_object_get(req, "tag");
        const json_t *in = json_object_get(req, "stdin");
        if (!json_is_string(cmd) || !*json_string_value(cmd))
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'process.cmd' is required");
        _cleanup_(json_decrefp) json_t *argv = json_pack("[O]", cmd);
        const json_t *a;
        size_t i;
        if (args && !json_is_array(args))
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'process.args' must be strings");
        json_array_foreach(args, i, a) {
                if (!json_is_string(a))
                        return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'process.args' must be strings");
                json_array_append(argv, (json_t *) a);
        }
        if ((envs && !string_map(envs)) || (cwd && !json_is_string(cwd)) || (tag && !json_is_string(tag)) ||
            (in && !json_is_boolean(in)) || (pty && !json_is_object(pty)))
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT,
                                        "'process.envs' must map strings, 'cwd' and 'tag' be strings, 'stdin' a bool");
        json_int_t rows = 24, cols = 80;
        if (pty && e2b_pty_size(c, pty, &rows, &cols) < 0)
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, c->api->err);
        char sid[HTTP_ID_MAX], dir[APIREQ_PATH_MAX + 1];
        int r = random_id("ses-", 8, sid, sizeof sid);
        if (r < 0)
                return fail(c, r, reply);
        _cleanup_(json_decrefp) json_t *start =
                json_pack("{s:s, s:s, s:O, s:O, s:b, s:I, s:I}", "op", "session.start", "session_id", sid, "cmd", argv,
                          "env", envs ?: json_object(), "pty", pty != NULL, "rows", rows, "cols", cols);
        if (!start)
                return fail(c, -ENOMEM, reply);
        if (cwd) {
                if (e2b_resolve_path(c, json_string_value(cwd), dir, sizeof dir) < 0)
                        return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'process.cwd' is not a usable path");
                json_object_set_new(start, "cwd", json_string(dir));
        }
        /* no user: root, whose home is then the default cwd, as envd's
         * default user's is */
        json_object_set_new(start, "user", json_string(c->user[0] ? c->user : "root"));
        if (tag)
                json_object_set(start, "tag", (json_t *) tag);
        _cleanup_(json_decrefp) json_t *rep = NULL;
        if ((r = e2b_node_call(c, CAP_ACCESS_EXEC, json_incref(start), &rep, NULL)) < 0)
                return fail(c, r, reply);
        json_int_t pid = json_integer_value(json_object_get(json_object_get(rep, "session"), "pid"));
        /* stdin false: nothing will come, say so at once (a reader gets
         * EOF as from /dev/null); absent or true: a pipe kept open */
        if (json_is_false(in) &&
            (r = e2b_node_call(c, CAP_ACCESS_SESSION_ATTACH,
                               json_pack("{s:s, s:s, s:s, s:b}", "op", "session.stdin", "session_id", sid, "data", "",
                                         "close", true),
                               NULL, NULL)) < 0)
                log_emit(LOG_LEVEL_WARN, c->api->log_ctx, "cannot close the stdin of %s: %s", sid, c->api->err);
        attach(c, sid, pid, pty != NULL, false, reply);
}

void e2b_process_connect(struct envd_call *c, const json_t *req, struct api_reply *reply) {
        json_int_t pid;
        char sid[HTTP_ID_MAX];
        int r = e2b_process_session(c, req, &pid, sid, sizeof sid);
        if (r < 0)
                return fail(c, r, reply);
        /* whether it has a PTY: the guest's list says */
        _cleanup_(json_decrefp) json_t *rep = NULL;
        bool pty = false;
        if (e2b_node_call(c, CAP_ACCESS_EXEC, json_pack("{s:s}", "op", "session.list"), &rep, NULL) >= 0) {
                const json_t *e;
                size_t i;
                json_array_foreach(json_object_get(rep, "sessions"), i, e) if (json_integer_value(
                        json_object_get(e, "pid")) == pid) pty = json_is_true(json_object_get(e, "pty"));
        }
        attach(c, sid, pid, pty, true, reply);
}

void e2b_watch_dir(struct envd_call *c, const json_t *req, struct api_reply *reply) {
        const json_t *path = json_object_get(req, "path"), *rec = json_object_get(req, "recursive");
        char dir[APIREQ_PATH_MAX + 1];
        if (!json_is_string(path) || e2b_resolve_path(c, json_string_value(path), dir, sizeof dir) < 0)
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'path' must be a usable path");
        if (rec && !json_is_boolean(rec))
                return e2b_stream_error(reply, CONNECT_INVALID_ARGUMENT, "'recursive' must be a bool");
        if (json_is_true(json_object_get(req, "includeEntry")) || json_is_true(json_object_get(req, "allowNetworkMounts")))
                return e2b_stream_error(reply, CONNECT_UNIMPLEMENTED,
                                        "includeEntry and allowNetworkMounts are not supported (docs/e2b.md)");
        _cleanup_(node_conn_freep) struct node_conn *conn = NULL;
        _cleanup_(json_decrefp) json_t *rep = NULL;
        int r = e2b_node_call(c, CAP_ACCESS_FILES_READ,
                              e2b_file_req(c, json_pack("{s:s, s:s, s:b}", "op", "file.watch", "path", dir, "recursive",
                                                        json_is_true(rec))),
                              &rep, &conn);
        if (r == -ENOENT)
                snprintf(c->api->err, sizeof c->api->err, "directory '%.200s' does not exist", dir);
        if (r < 0)
                return fail(c, r, reply);
        stream_reply(c, &conn, true, false, NULL, json_pack("{s:{}}", "start"), reply);
}
