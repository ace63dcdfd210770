/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sessions: long-running processes in a sandbox (a PTY or pipes) whose
 * output the client follows as Server-Sent Events and whose stdin, signals
 * and terminal size it sends on (docs/api.md, "Sessions"). The node runs
 * them; each call carries a capability for the session's sandbox.
 */
#include "api.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apireq.h"
#include "auth.h"
#include "dataplane.h"
#include "log.h"
#include "macros.h"

#define SSE_FRAME_TIMEOUT_S 60 /* a started frame must complete within this */

static json_t *session_json(const struct store_session *ses) {
        char ts[48], url[128];
        api_format_time(ses->created_at, ts, sizeof ts);
        snprintf(url, sizeof url, "/v1/sessions/%s/events", ses->id);
        json_t *cmd = json_loads(ses->cmd, 0, NULL);
        return json_pack("{s:s, s:s, s:o, s:b, s:s, s:s}", "id", ses->id, "sandbox_id", ses->sandbox_id, "cmd",
                         cmd ? cmd : json_array(), "pty", ses->pty, "created_at", ts, "events_url", url);
}

/* A session, as far as ctx may see it: one of another tenant's sandbox is
 * "not found", like one that does not exist. */
static int session_lookup(struct api_ctx *ctx, const char *sid, struct store_session *ret) {
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        int r = store_session_get(ctx->store, sid, &ses);
        if (r >= 0 && ctx->tenant_id) {
                _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
                r = store_sandbox_get(ctx->store, ses.sandbox_id, &sb);
                if (r >= 0 && !api_tenant_may_see(ctx, sb.tenant_id))
                        r = -ENOENT;
        }
        if (r >= 0) {
                *ret = ses;
                ses = (struct store_session){ 0 };
        }
        if (r < 0)
                return api_read_fail(ctx, r, "session", sid);
        return 0;
}

/* A session op on the node, with a capability for the session's sandbox
 * (its owner's tenant, whoever asks: the admin may act on any). */
static int session_call(struct api_ctx *ctx, const struct store_session *ses, json_t *req, struct node_conn **ret_conn) {
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = store_sandbox_get(ctx->store, ses->sandbox_id, &sb);
        if (r == -ENOENT)
                return api_fail(ctx, r, "session '%.64s' not found", ses->id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to read sandbox: %m");
        return dataplane_call(ctx->config, sb.tenant_id, sb.id, CAP_ACCESS_SESSION_ATTACH, req,
                              ctx->config->node_timeout_s, ret_conn, NULL, ctx->err);
}

int api_session_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret) {
        _cleanup_(apireq_session_release) struct apireq_session s = { 0 };
        int r = apireq_parse_session(body, &s, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        if ((r = api_sandbox_lookup(ctx, sandbox_id, &sb)) < 0 || (r = api_sandbox_require_running(ctx, &sb)) < 0)
                return r;

        char sid[32], token[AUTH_ATTACH_TOKEN_LEN + 1];
        if ((r = random_id("ses-", 8, sid, sizeof sid)) < 0 || (r = auth_new_attach_token(token, sizeof token)) < 0)
                return r;
        _cleanup_free_ char *cmd_s = json_dumps(s.cmd, JSON_COMPACT);
        if (!cmd_s)
                return -ENOMEM;
        struct store_session row = { .id = sid, .sandbox_id = (char *) sandbox_id, .cmd = cmd_s, .pty = s.pty };
        auth_hash_token(token, row.token_hash);
        r = store_session_insert(ctx->store, &row);
        if (r == -ENOENT)
                return api_fail(ctx, r, "sandbox '%.64s' not found", sandbox_id);
        if (r < 0)
                return log_errno(LOG_LEVEL_ERROR, r, ctx->log_ctx, "store: failed to insert session: %m");

        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:s, s:O, s:O, s:s*, s:b, s:I, s:I}", "op", "session.start", "id", sandbox_id,
                          "session_id", sid, "cmd", s.cmd, "env", s.env, "cwd", s.cwd, "pty", s.pty, "rows",
                          (json_int_t) s.rows, "cols", (json_int_t) s.cols);
        r = dataplane_call(ctx->config, sb.tenant_id, sandbox_id, CAP_ACCESS_EXEC, req, ctx->config->node_timeout_s,
                           NULL, NULL, ctx->err);
        if (r < 0) {
                /* After a transport failure the command may be running on
                 * the node with no row (and no token) to reach it: stop it. */
                if (r == -ETIMEDOUT || r == -ECONNRESET || r == -EBADMSG) {
                        _cleanup_(json_decrefp) json_t *kill =
                                json_pack("{s:s, s:s, s:i}", "op", "session.signal", "session_id", sid, "signal", SIGKILL);
                        char kerr[API_ERRMSG_MAX];
                        (void) dataplane_call(ctx->config, sb.tenant_id, sandbox_id, CAP_ACCESS_SESSION_ATTACH, kill,
                                              ctx->config->node_timeout_s, NULL, NULL, kerr);
                }
                (void) store_session_delete(ctx->store, sid);
                return r;
        }
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        if ((r = session_lookup(ctx, sid, &ses)) < 0)
                return r;
        json_t *o = session_json(&ses);
        if (o)
                json_object_set_new(o, "attach_token", json_string(token));
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "started session %s in sandbox %s", sid, sandbox_id);
        return api_reply_json(ret, MHD_HTTP_CREATED, o);
}

int api_session_get(struct api_ctx *ctx, const char *sid, struct api_reply *ret) {
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        int r = session_lookup(ctx, sid, &ses);
        if (r < 0)
                return r;
        return api_reply_json(ret, MHD_HTTP_OK, session_json(&ses));
}

/* State of one event stream, owned by its MHD response. */
struct sse_stream {
        struct node_conn *conn;
        const atomic_bool *stopping;
        struct api_sse_out out;
        char log_ctx[256];
};

static void sse_free(void *cls) {
        struct sse_stream *s = cls;
        node_conn_free(s->conn);
        free(s->out.pend);
        free(s);
}

/* Ends the stream with an error event the client can show. */
static void sse_fail(struct sse_stream *s, int r, const char *msg) {
        api_sse_out_fail(&s->out, r, msg);
        log_emit(LOG_LEVEL_WARN, s->log_ctx, "event stream ended: %s", msg && *msg ? msg : api_error_default_message(r));
}

/*
 * Content callback of an event stream. Runs in the connection's own thread
 * (thread-per-connection), so blocking on the node socket is fine. Each node
 * event becomes one SSE event, handed to MHD as soon as it arrives; idle
 * streams get a comment line every API_SSE_KEEPALIVE_S so a vanished client
 * is noticed; shutdown is checked once a second.
 */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
        struct sse_stream *s = cls;
        for (;;) {
                size_t n = api_sse_out_take(&s->out, buf, max);
                if (n > 0)
                        return (ssize_t) n;
                if (s->out.done)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (atomic_load(s->stopping)) {
                        sse_fail(s, -EHOSTDOWN, "the server is shutting down");
                        continue;
                }
                int r = node_conn_wait(s->conn, 1000);
                if (r < 0) {
                        sse_fail(s, r, "the node agent connection failed");
                        continue;
                }
                if (r == 0) {
                        if (api_sse_out_keepalive(&s->out) < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        continue;
                }
                struct node_frame f;
                char err[API_ERRMSG_MAX] = "";
                r = node_conn_next(s->conn, &f, err);
                if (r <= 0) {
                        sse_fail(s, r == 0 ? -ECONNRESET : r, err[0] ? err : "the node agent closed the stream");
                        continue;
                }
                if (f.type == PROTO_NODE_END) {
                        json_decref(f.event);
                        s->out.done = true;
                        continue;
                }
                if (f.type != PROTO_NODE_EVENT)
                        continue; /* data frames have no place in an event stream */
                char *text = NULL;
                size_t len = 0;
                bool last = false;
                r = api_sse_from_node_event(f.event, &text, &len, &last);
                json_decref(f.event);
                if (r < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (r > 0) {
                        api_sse_out_set(&s->out, text, len);
                        if (last)
                                s->out.done = true;
                }
        }
}

int api_session_events(struct api_ctx *ctx, const char *sid, struct api_reply *ret) {
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        int r = session_lookup(ctx, sid, &ses);
        if (r < 0)
                return r;
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s}", "op", "session.attach", "session_id", sid);
        if ((r = session_call(ctx, &ses, req, &c)) < 0)
                return r;
        if ((r = node_conn_set_timeout(c, SSE_FRAME_TIMEOUT_S)) < 0)
                return r;

        struct sse_stream *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->stopping = ctx->stopping;
        s->out.last_ns = now_monotonic_ns();
        snprintf(s->log_ctx, sizeof s->log_ctx, "%s session=%s", ctx->log_ctx, sid);
        s->conn = TAKE_PTR(c);
        return api_sse_reply(sse_read, s, sse_free, ret);
}

int api_session_stdin(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret) {
        _cleanup_(apireq_stdin_release) struct apireq_stdin in = { 0 };
        int r = apireq_parse_stdin(body, &in, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        if ((r = session_lookup(ctx, sid, &ses)) < 0)
                return r;
        _cleanup_free_ char *b64 = NULL;
        if ((r = apireq_base64_encode(in.data, in.len, &b64)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:s, s:b}", "op", "session.stdin", "session_id",
                                                        sid, "data", b64, "close", in.close);
        return (r = session_call(ctx, &ses, req, NULL)) < 0 ? r : api_reply_empty(ret);
}

int api_session_signal(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret) {
        int sig;
        int r = apireq_parse_signal(body, &sig, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        if ((r = session_lookup(ctx, sid, &ses)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req =
                json_pack("{s:s, s:s, s:i}", "op", "session.signal", "session_id", sid, "signal", sig);
        return (r = session_call(ctx, &ses, req, NULL)) < 0 ? r : api_reply_empty(ret);
}

int api_session_resize(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret) {
        unsigned rows, cols;
        int r = apireq_parse_resize(body, &rows, &cols, ctx->err);
        if (r < 0)
                return r;
        _cleanup_(store_session_release) struct store_session ses = { 0 };
        if ((r = session_lookup(ctx, sid, &ses)) < 0)
                return r;
        _cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:s, s:I, s:I}", "op", "session.resize", "session_id",
                                                        sid, "rows", (json_int_t) rows, "cols", (json_int_t) cols);
        return (r = session_call(ctx, &ses, req, NULL)) < 0 ? r : api_reply_empty(ret);
}
