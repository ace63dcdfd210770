/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mcp: Airlock's MCP server over stdio (docs/mcp.md), for an agent on this
 * machine that starts its tools as programs. It holds no tools of its own:
 * each JSON-RPC message read from stdin (one per line) is POSTed to
 * airlockd's /v1/mcp with the key (MCP's streamable HTTP transport), and
 * what comes back (one JSON body, or the events of a stream: progress,
 * then the response) is written to stdout, one message per line. Each
 * message goes on its own thread, so a ping or a cancellation passes a
 * long command. At the end of stdin the session is ended (DELETE: what
 * still runs is cancelled) and the program exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "builtin.h"
#include "cli-util.h"
#include "sse.h"

#define LINE_MAX_BYTES (16u << 20) /* one message from the client */
#define INFLIGHT_MAX 64            /* messages in flight at once; more wait */

struct bridge {
        struct cli *cli;
        pthread_mutex_t lock; /* stdout, the session, the count */
        pthread_cond_t idle;
        unsigned inflight;
        char session[160]; /* Mcp-Session-Id from initialize */
        char version[32];  /* the protocol version it settled on */
};

struct message {
        struct bridge *b;
        json_t *msg;
        bool request; /* has an id: the client waits for a response */
        bool initialize;
        char session[160];
        char version[32];
        /* the reply */
        bool events; /* text/event-stream */
        struct sse_parser *parser;
        struct client_call *call;
};

/* Writes one JSON-RPC message as a line of stdout. */
static void emit(struct bridge *b, const json_t *m) {
        _cleanup_free_ char *line = json_dumps(m, JSON_COMPACT);
        if (!line)
                return;
        pthread_mutex_lock(&b->lock);
        fputs(line, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        pthread_mutex_unlock(&b->lock);
}

/* The client's request failed before the server could answer it in
 * JSON-RPC: an error response, so the client does not wait forever. */
static void emit_error(struct message *m, int code, const char *text) {
        if (!m->request)
                return;
        _cleanup_(json_decrefp) json_t *e = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                                                      json_object_get(m->msg, "id"), "error", "code", code, "message",
                                                      text);
        if (e)
                emit(m->b, e);
}

/* initialize's response: the session and version every later message carries. */
static void learn(struct message *m, const json_t *reply) {
        const char *v = json_string_value(json_object_get(json_object_get(reply, "result"), "protocolVersion"));
        if (!m->initialize || !v)
                return;
        pthread_mutex_lock(&m->b->lock);
        snprintf(m->b->version, sizeof m->b->version, "%s", v);
        snprintf(m->b->session, sizeof m->b->session, "%s", m->session);
        pthread_mutex_unlock(&m->b->lock);
}

static int on_event(const struct sse_event *ev, void *userdata) {
        struct message *m = userdata;
        if (strcmp(ev->type, "message") != 0)
                return 0; /* keepalives, the server's "error" at its stop */
        _cleanup_(json_decrefp) json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
        if (json_is_object(j))
                emit(m->b, j);
        return 0;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *userdata) {
        struct message *m = userdata;
        size_t n = size * nmemb;
        static const char sid[] = "mcp-session-id:", ct[] = "content-type:";
        if (n > sizeof sid && strncasecmp(data, sid, sizeof sid - 1) == 0) {
                const char *v = data + sizeof sid - 1;
                size_t k = n - (sizeof sid - 1);
                while (k && (*v == ' ' || *v == '\t'))
                        v++, k--;
                while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' '))
                        k--;
                if (k < sizeof m->session)
                        snprintf(m->session, sizeof m->session, "%.*s", (int) k, v);
        } else if (n > sizeof ct && strncasecmp(data, ct, sizeof ct - 1) == 0)
                m->events = memmem(data, n, "text/event-stream", 17) != NULL;
        return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata) {
        struct message *m = userdata;
        size_t n = size * nmemb;
        if (m->events && client_call_status(m->call) == 200)
                return sse_parser_feed(m->parser, data, n) < 0 ? 0 : n;
        return client_call_collect(m->call, data, n) < 0 ? 0 : n;
}

static void post(struct message *m) {
        struct bridge *b = m->b;
        int r = client_call_new(&b->cli->client, "POST", "/v1/mcp", NULL, m->msg, &m->call);
        if (r >= 0)
                r = client_call_header(m->call, "Accept", "application/json, text/event-stream");
        if (r >= 0 && m->session[0])
                r = client_call_header(m->call, "Mcp-Session-Id", m->session);
        if (r >= 0 && m->version[0])
                r = client_call_header(m->call, "MCP-Protocol-Version", m->version);
        if (r >= 0)
                r = sse_parser_new(0, on_event, m, &m->parser);
        if (r < 0)
                return emit_error(m, -32603, "airlock mcp: out of memory");
        if (m->initialize)
                m->session[0] = 0; /* the reply's, if any */
        curl_easy_setopt(m->call->easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(m->call->easy, CURLOPT_HEADERDATA, m);
        curl_easy_setopt(m->call->easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(m->call->easy, CURLOPT_WRITEDATA, m);
        CURLcode res = curl_easy_perform(m->call->easy);
        long status = client_call_status(m->call);
        if (res == CURLE_OK && status == 200 && !m->events) {
                _cleanup_(json_decrefp) json_t *j = json_loadb(m->call->resp ?: "", m->call->resp_len, 0, NULL);
                if (!json_is_object(j))
                        return emit_error(m, -32603, "airlock mcp: airlockd's reply is not JSON");
                learn(m, j);
                return emit(b, j);
        }
        if (res == CURLE_OK && (status == 200 || status == 202))
                return;
        if (res == CURLE_OK && status == 400) {
                /* a JSON-RPC error of the server's own, or the API's */
                _cleanup_(json_decrefp) json_t *j = json_loadb(m->call->resp ?: "", m->call->resp_len, 0, NULL);
                if (json_object_get(j, "jsonrpc"))
                        return emit(b, j);
        }
        struct cli_error err = { 0 };
        (void) client_call_finish(&b->cli->client, m->call, res, &err, NULL);
        char text[700];
        snprintf(text, sizeof text, "airlock at %s: %s", b->cli->client.base_url,
                 err.message[0] ? err.message : "the request failed");
        fprintf(stderr, "airlock mcp: %s\n", text);
        emit_error(m, -32603, text);
}

static void *message_thread(void *arg) {
        struct message *m = arg;
        struct bridge *b = m->b;
        post(m);
        sse_parser_free(m->parser);
        client_call_free(m->call);
        json_decref(m->msg);
        free(m);
        pthread_mutex_lock(&b->lock);
        b->inflight--;
        pthread_cond_broadcast(&b->idle);
        pthread_mutex_unlock(&b->lock);
        return NULL;
}

static int start(struct bridge *b, json_t *msg) {
        struct message *m = calloc(1, sizeof *m);
        if (!m) {
                json_decref(msg);
                return -ENOMEM;
        }
        m->b = b;
        m->msg = msg;
        m->request = json_object_get(msg, "id") && json_object_get(msg, "method");
        m->initialize = strcmp(json_string_value(json_object_get(msg, "method")) ?: "", "initialize") == 0;
        pthread_mutex_lock(&b->lock);
        while (b->inflight >= INFLIGHT_MAX)
                pthread_cond_wait(&b->idle, &b->lock);
        b->inflight++;
        snprintf(m->session, sizeof m->session, "%s", b->session);
        snprintf(m->version, sizeof m->version, "%s", b->version);
        pthread_mutex_unlock(&b->lock);
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int r = -pthread_create(&th, &attr, message_thread, m);
        pthread_attr_destroy(&attr);
        if (r < 0)
                message_thread(m); /* its answer: out of threads */
        return 0;
}

/* The end of stdin: the session ends (what runs is cancelled). */
static void end_session(struct bridge *b) {
        if (!b->session[0])
                return;
        _cleanup_(client_call_freep) struct client_call *call = NULL;
        if (client_call_new(&b->cli->client, "DELETE", "/v1/mcp", NULL, NULL, &call) < 0 ||
            client_call_header(call, "Mcp-Session-Id", b->session) < 0)
                return;
        curl_easy_setopt(call->easy, CURLOPT_TIMEOUT, 5L);
        (void) curl_easy_perform(call->easy);
}

int cmd_mcp(struct cli *cli, int argc, char **argv) {
        int r = cli_parse_plain(cli, argc, argv, 0, 0);
        if (r != CLI_PROCEED)
                return r;
        if (cli_connect(cli) < 0)
                return CLI_EXIT_FAILURE;
        struct bridge b = { .cli = cli };
        pthread_mutex_init(&b.lock, NULL);
        pthread_cond_init(&b.idle, NULL);
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, stdin)) >= 0) {
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = 0;
                if (n == 0)
                        continue;
                json_error_t jerr;
                json_t *msg = (size_t) n <= LINE_MAX_BYTES ? json_loadb(line, (size_t) n, 0, &jerr) : NULL;
                if (!json_is_object(msg)) {
                        /* JSON-RPC's answer to what is no message */
                        json_decref(msg);
                        _cleanup_(json_decrefp) json_t *e =
                                json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code", -32700,
                                          "message", (size_t) n > LINE_MAX_BYTES ? "message too large"
                                                                                 : "Parse error: not a JSON object");
                        if (e)
                                emit(&b, e);
                        continue;
                }
                if (start(&b, msg) < 0)
                        return cli_fail("mcp: out of memory");
        }
        end_session(&b);
        /* what was cancelled answers quickly; then go */
        pthread_mutex_lock(&b.lock);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        while (b.inflight > 0 && pthread_cond_timedwait(&b.idle, &b.lock, &until) == 0)
                ;
        pthread_mutex_unlock(&b.lock);
        fflush(stdout);
        return CLI_EXIT_OK;
}
