/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MCP's streamable HTTP transport and its JSON-RPC (mcp.h). One POST is one
 * message: a request gets its response in the reply (JSON, or an event
 * stream for a tool call that reports progress), a notification or a
 * client's response gets 202. Tool calls in flight are kept in a table by
 * (key, session, request id) so notifications/cancelled can reach them.
 */
#include "mcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "airlock-config.h"
#include "api.h"
#include "log.h"
#include "mcp-tools.h"
#include "util.h"

#define SESSION_ID_MAX 128
#define STREAM_POLL_MS 50

static const char *const versions[] = { MCP_PROTOCOL_LATEST, "2025-06-18", "2025-03-26", "2024-11-05" };

enum {
        RPC_PARSE_ERROR = -32700,
        RPC_INVALID_REQUEST = -32600,
        RPC_METHOD_NOT_FOUND = -32601,
        RPC_INVALID_PARAMS = -32602,
        RPC_INTERNAL_ERROR = -32603,
};

static bool version_known(const char *v) {
        for (size_t i = 0; i < ARRAY_SIZE(versions); i++)
                if (strcmp(versions[i], v) == 0)
                        return true;
        return false;
}

static json_t *rpc_result(const json_t *id, json_t *result) {
        return result ? json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ?: json_null(), "result", result)
                      : NULL;
}

static json_t *rpc_error(const json_t *id, int code, const char *message) {
        return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ?: json_null(), "error", "code", code,
                         "message", message);
}

/* A JSON reply taking o (NULL: out of memory). */
static int reply(struct api_reply *ret, unsigned status, json_t *o) {
        return o ? api_reply_json(ret, status, o) : -ENOMEM;
}

/* ---- calls in flight ---- */

struct inflight {
        struct inflight *next;
        char *key; /* "KEY_ID\nSESSION\nREQUEST_ID" */
        struct mcp_call *call;
};

static pthread_mutex_t inflight_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inflight *inflight_head;
/* the event streams' worker threads that still run (mcp_drain()) */
static pthread_cond_t workers_done = PTHREAD_COND_INITIALIZER;
static unsigned workers;

static char *inflight_key(const struct api_ctx *ctx, const char *session, const json_t *id) {
        _cleanup_free_ char *idtext = id ? json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("");
        return idtext ? strdup_printf("%s\n%s\n%s", ctx->key_id ?: "", session ?: "", idtext) : NULL;
}

static void inflight_add(struct inflight *e) {
        pthread_mutex_lock(&inflight_lock);
        e->next = inflight_head;
        inflight_head = e;
        pthread_mutex_unlock(&inflight_lock);
}

static void inflight_remove(struct inflight *e) {
        pthread_mutex_lock(&inflight_lock);
        for (struct inflight **p = &inflight_head; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        pthread_mutex_unlock(&inflight_lock);
}

/* Cancels the calls whose key is key, or with whole_session those of the
 * session whose key starts with it. */
static unsigned inflight_cancel(const char *key, bool whole_session) {
        unsigned n = 0;
        size_t len = strlen(key);
        pthread_mutex_lock(&inflight_lock);
        for (struct inflight *e = inflight_head; e; e = e->next)
                if (whole_session ? strncmp(e->key, key, len) == 0 : strcmp(e->key, key) == 0) {
                        atomic_store(&e->call->cancelled, true);
                        n++;
                }
        pthread_mutex_unlock(&inflight_lock);
        return n;
}

/* ---- a tool call ---- */

static void call_free(struct mcp_call *call) {
        if (!call)
                return;
        free(call->tenant_id);
        free(call->key_id);
        json_decref(call->progress_token);
        free(call);
}

static struct mcp_call *call_new(const struct api_ctx *ctx, const struct mcp_http *h, const char *version) {
        struct mcp_call *call = calloc(1, sizeof *call);
        if (!call)
                return NULL;
        call->ctx = *ctx;
        call->ctx.err[0] = 0;
        if ((ctx->tenant_id && !(call->tenant_id = strdup(ctx->tenant_id))) ||
            (ctx->key_id && !(call->key_id = strdup(ctx->key_id)))) {
                call_free(call);
                return NULL;
        }
        call->ctx.tenant_id = call->tenant_id;
        call->ctx.key_id = call->key_id;
        snprintf(call->log_ctx, sizeof call->log_ctx, "%s", ctx->log_ctx);
        call->ctx.log_ctx = call->log_ctx;
        call->client_fd = -1;
        call->structured = strcmp(version, "2025-06-18") >= 0;
        /* the Host the client reached us by (printable, no spaces), else
         * where we listen */
        const char *host = h->host && *h->host && strlen(h->host) < 256 &&
                                           strspn(h->host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789.-:[]") == strlen(h->host)
                                   ? h->host
                                   : ctx->config->listen;
        snprintf(call->base_url, sizeof call->base_url, "%s://%s",
                 h->proto && strcasecmp(h->proto, "https") == 0 ? "https" : "http", host);
        return call;
}

/* An event stream's side of a tool call: what the worker queued for it. */
struct stream {
        pthread_mutex_t lock;
        unsigned refs;  /* the worker and the response */
        char *queue;    /* event-stream text not yet handed over */
        size_t qlen;
        bool finished;  /* the response is queued: nothing follows */
        struct api_sse_out out; /* the response's thread's only */
        const atomic_bool *stopping;
        struct mcp_call *call;
        const struct mcp_tool *tool;
        json_t *id, *args;
        struct inflight inflight;
};

static void stream_unref(struct stream *s) {
        pthread_mutex_lock(&s->lock);
        bool last = --s->refs == 0;
        pthread_mutex_unlock(&s->lock);
        if (!last)
                return;
        pthread_mutex_destroy(&s->lock);
        free(s->queue);
        free(s->out.pend);
        free(s->inflight.key);
        call_free(s->call);
        json_decref(s->id);
        json_decref(s->args);
        free(s);
}

/* Queues one JSON-RPC message (taken) as an event. */
static void stream_send(struct stream *s, json_t *msg, bool last) {
        char *text = NULL;
        size_t len = 0;
        int r = msg ? api_sse_format("message", msg, &text, &len) : -ENOMEM;
        json_decref(msg);
        pthread_mutex_lock(&s->lock);
        if (r >= 0) {
                char *q = realloc(s->queue, s->qlen + len);
                if (q) {
                        memcpy(q + s->qlen, text, len);
                        s->queue = q;
                        s->qlen += len;
                }
        }
        if (last)
                s->finished = true;
        pthread_mutex_unlock(&s->lock);
        free(text);
}

static void stream_progress(void *cls, json_t *notification) {
        stream_send(cls, notification, false);
}

static void *stream_worker(void *arg) {
        struct stream *s = arg;
        json_t *result = NULL;
        int r = mcp_tool_run(s->call, s->tool, s->args, &result);
        inflight_remove(&s->inflight);
        /* a cancelled request gets no response (MCP's cancellation) */
        if (atomic_load(&s->call->cancelled)) {
                json_decref(result);
                stream_send(s, NULL, true);
        } else
                stream_send(s, r < 0 ? rpc_error(s->id, RPC_INTERNAL_ERROR, api_error_default_message(r))
                                     : rpc_result(s->id, result),
                            true);
        stream_unref(s);
        pthread_mutex_lock(&inflight_lock);
        workers--;
        pthread_cond_broadcast(&workers_done);
        pthread_mutex_unlock(&inflight_lock);
        return NULL;
}

void mcp_drain(unsigned timeout_s) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_s;
        pthread_mutex_lock(&inflight_lock);
        /* what they run sees the server stopping and ends */
        for (struct inflight *e = inflight_head; e; e = e->next)
                atomic_store(&e->call->cancelled, true);
        while (workers > 0 && pthread_cond_timedwait(&workers_done, &inflight_lock, &until) == 0)
                ;
        if (workers > 0)
                log_warn("%u MCP tool calls still run after %u s", workers, timeout_s);
        pthread_mutex_unlock(&inflight_lock);
}

static int stream_poll(void *cls) {
        struct stream *s = cls;
        pthread_mutex_lock(&s->lock);
        int r = 0;
        if (s->qlen) {
                api_sse_out_set(&s->out, TAKE_PTR(s->queue), s->qlen);
                s->qlen = 0;
                r = 1;
        }
        if (s->finished) {
                s->out.done = true;
                r = 1;
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        (void) pos;
        struct stream *s = cls;
        return api_sse_poll_read(&s->out, s->stopping, stream_poll, s, STREAM_POLL_MS, buf, max);
}

static void stream_gone(void *cls) {
        struct stream *s = cls;
        /* the client went: what it ran stops */
        atomic_store(&s->call->cancelled, true);
        stream_unref(s);
}

/* tools/call answered as an event stream, the tool run by a worker thread. */
static int call_streamed(struct mcp_call *call, const struct mcp_tool *t, const json_t *id, const json_t *args,
                         char *key, struct api_reply *ret) {
        struct stream *s = calloc(1, sizeof *s);
        if (!s) {
                free(key);
                call_free(call);
                return -ENOMEM;
        }
        pthread_mutex_init(&s->lock, NULL);
        s->refs = 2;
        s->stopping = call->ctx.stopping;
        s->out.last_ns = now_monotonic_ns();
        s->call = call;
        s->tool = t;
        s->id = json_incref((json_t *) id);
        s->args = json_incref((json_t *) args);
        s->inflight = (struct inflight){ .key = key, .call = call };
        call->progress_sink = stream_progress;
        call->progress_cls = s;
        /* the connection's descriptor may be another's once it closes:
         * stream_gone() says the client went */
        call->ctx.client_fd = -1;
        inflight_add(&s->inflight);
        pthread_mutex_lock(&inflight_lock);
        workers++;
        pthread_mutex_unlock(&inflight_lock);
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = -pthread_create(&th, &attr, stream_worker, s);
        pthread_attr_destroy(&attr);
        if (r < 0) {
                inflight_remove(&s->inflight);
                pthread_mutex_lock(&inflight_lock);
                workers--;
                pthread_mutex_unlock(&inflight_lock);
                s->refs = 1;
                stream_unref(s);
                return r;
        }
        return api_sse_reply(stream_read, s, stream_gone, ret);
}

static bool accepts_events(const char *accept) {
        return accept && strstr(accept, "text/event-stream");
}

static int tools_call(struct api_ctx *ctx, const struct mcp_http *h, const char *version, const json_t *id,
                      const json_t *params, struct api_reply *ret) {
        const char *name = json_string_value(json_object_get(params, "name"));
        const json_t *args = json_object_get(params, "arguments");
        const json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (!name)
                return reply(ret, 200, rpc_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name"));
        const struct mcp_tool *t = mcp_tool_find(name);
        if (!t) {
                char msg[160];
                snprintf(msg, sizeof msg, "Unknown tool: %.64s (tools/list has the tools)", name);
                return reply(ret, 200, rpc_error(id, RPC_INVALID_PARAMS, msg));
        }
        if (token && !json_is_string(token) && !json_is_integer(token))
                return reply(ret, 200, rpc_error(id, RPC_INVALID_PARAMS, "progressToken must be a string or an integer"));
        struct mcp_call *call = call_new(ctx, h, version);
        char *key = call ? inflight_key(ctx, h->session, id) : NULL;
        if (!key) {
                call_free(call);
                return -ENOMEM;
        }
        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "mcp: tools/call %s", t->name);
        if (t->streams && token && accepts_events(h->accept)) {
                call->progress_token = json_incref((json_t *) token);
                return call_streamed(call, t, id, args, key, ret);
        }
        /* one JSON reply: no progress to send; a client that hangs up
         * cancels it */
        call->client_fd = ctx->client_fd;
        struct inflight e = { .key = key, .call = call };
        inflight_add(&e);
        json_t *result = NULL;
        int r = mcp_tool_run(call, t, args, &result);
        inflight_remove(&e);
        free(key);
        call_free(call);
        if (r < 0)
                return reply(ret, 200, rpc_error(id, RPC_INTERNAL_ERROR, api_error_default_message(r)));
        return reply(ret, 200, rpc_result(id, result));
}

/* ---- JSON-RPC ---- */

static int initialize(const json_t *id, const json_t *params, struct api_reply *ret) {
        const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
        if (!asked)
                return reply(ret, 200, rpc_error(id, RPC_INVALID_PARAMS, "initialize needs params.protocolVersion"));
        /* the client's version when we speak it, else our newest */
        const char *v = version_known(asked) ? asked : MCP_PROTOCOL_LATEST;
        char session[48];
        int r = random_id("mcp-", 16, session, sizeof session);
        if (r < 0)
                return r;
        json_t *result = json_pack(
                "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v, "capabilities", "tools",
                "listChanged", false, "serverInfo", "name", "airlock", "title", "Airlock sandboxes", "version",
                AIRLOCK_VERSION, "instructions",
                "Airlock runs code in sandboxes: each a virtual machine of its own. Start with create_sandbox (it "
                "returns a sandbox_id), then run_command, read_file, write_file and list_files on it; run_code needs "
                "the code-interpreter template. Sandboxes are suspended or deleted at the end of their lifetime "
                "(create_sandbox's timeout_s); delete_sandbox when done.");
        if ((r = reply(ret, 200, rpc_result(id, result))) < 0)
                return r;
        /* the body as a response of its own, to carry the session's header */
        _cleanup_free_ char *text = json_dumps(ret->body, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, TAKE_PTR(text), MHD_RESPMEM_MUST_FREE);
        if (!resp)
                return -ENOMEM;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        MHD_add_response_header(resp, "Mcp-Session-Id", session);
        api_reply_release(ret);
        *ret = (struct api_reply){ .status = 200, .response = resp };
        return 0;
}

static bool is_id(const json_t *id) {
        return json_is_string(id) || json_is_integer(id);
}

/* A notification: nothing to answer but 202. */
static int notification(struct api_ctx *ctx, const struct mcp_http *h, const char *method, const json_t *params,
                        struct api_reply *ret) {
        if (strcmp(method, "notifications/cancelled") == 0 && is_id(json_object_get(params, "requestId"))) {
                _cleanup_free_ char *key = inflight_key(ctx, h->session, json_object_get(params, "requestId"));
                if (key && inflight_cancel(key, false))
                        log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "mcp: request cancelled by the client");
        }
        *ret = (struct api_reply){ .status = 202 };
        return 0;
}

static bool session_ok(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > SESSION_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (s[i] < 0x21 || s[i] > 0x7e)
                        return false;
        return true;
}

/* The checks of the HTTP request itself. */
static int check_http(struct api_ctx *ctx, const struct mcp_http *h) {
        if (h->origin && *h->origin) {
                /* a browser page of another origin (DNS rebinding included) */
                const char *o = strstr(h->origin, "://");
                if (!o || !h->host || strcasecmp(o + 3, h->host) != 0)
                        return api_fail(ctx, -EPERM,
                                        "requests from the web origin '%.128s' are refused at /v1/mcp (MCP asks servers "
                                        "to refuse other origins); use `airlock mcp` as a stdio server",
                                        h->origin);
        }
        if (h->version && !version_known(h->version))
                return api_fail(ctx, -EINVAL, "unsupported MCP-Protocol-Version '%.32s' (this server speaks %s, %s, %s, %s)",
                                h->version, versions[0], versions[1], versions[2], versions[3]);
        if (h->session && !session_ok(h->session))
                return api_fail(ctx, -EINVAL, "Mcp-Session-Id must be 1 to %d visible ASCII characters", SESSION_ID_MAX);
        return 0;
}

int mcp_http_post(struct api_ctx *ctx, const struct mcp_http *h, struct api_reply *ret) {
        int r = check_http(ctx, h);
        if (r < 0)
                return r;
        json_error_t jerr;
        _cleanup_(json_decrefp) json_t *msg = json_loadb(h->body ? h->body : "", h->body_len, 0, &jerr);
        if (!msg) {
                char m[200];
                snprintf(m, sizeof m, "Parse error: %s", jerr.text);
                return reply(ret, 400, rpc_error(NULL, RPC_PARSE_ERROR, m));
        }
        if (json_is_array(msg))
                return reply(ret, 400, rpc_error(NULL, RPC_INVALID_REQUEST, "JSON-RPC batches are not supported"));
        const json_t *id = json_object_get(msg, "id");
        const char *method = json_string_value(json_object_get(msg, "method"));
        const json_t *params = json_object_get(msg, "params");
        if (!json_is_object(msg) || strcmp(json_string_value(json_object_get(msg, "jsonrpc")) ?: "", "2.0") != 0 ||
            (id && !is_id(id)) || (params && !json_is_object(params)))
                return reply(ret, 400, rpc_error(is_id(id) ? id : NULL, RPC_INVALID_REQUEST,
                                                 "not a JSON-RPC 2.0 message (jsonrpc \"2.0\", an id that is a string "
                                                 "or an integer, params an object)"));
        if (!method) {
                if (id && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
                        /* a response to a request of ours: we send none */
                        *ret = (struct api_reply){ .status = 202 };
                        return 0;
                }
                return reply(ret, 400, rpc_error(id, RPC_INVALID_REQUEST, "a message needs a method"));
        }
        if (!id)
                return notification(ctx, h, method, params, ret);

        const char *version = h->version ? h->version : "2025-03-26";
        if (strcmp(method, "initialize") == 0)
                return initialize(id, params, ret);
        if (strcmp(method, "ping") == 0)
                return reply(ret, 200, rpc_result(id, json_object()));
        if (strcmp(method, "tools/list") == 0)
                return reply(ret, 200, rpc_result(id, mcp_tools_list()));
        if (strcmp(method, "tools/call") == 0)
                return tools_call(ctx, h, version, id, params, ret);
        char m[160];
        snprintf(m, sizeof m, "Method not found: %.64s", method);
        return reply(ret, 200, rpc_error(id, RPC_METHOD_NOT_FOUND, m));
}

int mcp_http_delete(struct api_ctx *ctx, const struct mcp_http *h, struct api_reply *ret) {
        int r = check_http(ctx, h);
        if (r < 0)
                return r;
        if (!h->session)
                return api_fail(ctx, -EINVAL, "DELETE /v1/mcp ends a session: it needs its Mcp-Session-Id");
        _cleanup_free_ char *prefix = strdup_printf("%s\n%s\n", ctx->key_id ?: "", h->session);
        if (!prefix)
                return -ENOMEM;
        unsigned n = inflight_cancel(prefix, true);
        if (n)
                log_emit(LOG_LEVEL_INFO, ctx->log_ctx, "mcp: session ended, %u calls cancelled", n);
        return api_reply_empty(ret);
}
