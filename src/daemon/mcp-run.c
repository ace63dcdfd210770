/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MCP tools that run something in a sandbox and report its output while
 * it runs (docs/mcp.md): run_command (a shell command line, as a node
 * session: its output streamed as progress, killed at its timeout or when
 * the client cancels) and run_code / create_code_context (the code
 * interpreter server of the code-interpreter template, port 49999, through
 * the service port path with a capability for that port).
 */
#include "mcp-run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apireq.h"
#include "dataplane.h"
#include "log.h"
#include "util.h"

#define WAIT_SLICE_MS 250
#define KILL_GRACE_MS 5000         /* after SIGKILL, the exit event should come */
#define INTERPRETER_PORT 49999     /* the code-interpreter template's server (docs/e2b.md) */
#define RUN_CODE_DEFAULT_TIMEOUT_S 300
#define CODE_MAX (1u << 20)
#define NDJSON_LINE_MAX (16u << 20) /* one result line (a plot as base64) */
#define EVENT_DATA_MAX (1u << 20)  /* the output one node event carries */

/* The last MCP_OUTPUT_MAX bytes of a stream, and how many there were. */
struct tail {
        char *b;
        size_t len;
        uint64_t total;
};

static int tail_add(struct tail *t, const uint8_t *d, size_t n) {
        t->total += n;
        if (n >= MCP_OUTPUT_MAX) {
                d += n - MCP_OUTPUT_MAX;
                n = MCP_OUTPUT_MAX;
        }
        if (!t->b && !(t->b = malloc(MCP_OUTPUT_MAX)))
                return -ENOMEM;
        if (t->len + n > MCP_OUTPUT_MAX) {
                size_t drop = t->len + n - MCP_OUTPUT_MAX;
                memmove(t->b, t->b + drop, t->len - drop);
                t->len -= drop;
        }
        memcpy(t->b + t->len, d, n);
        t->len += n;
        return 0;
}

/* The kept text (valid UTF-8), with a note when the start was dropped. */
static char *tail_text(const struct tail *t) {
        _cleanup_free_ char *s = utf8_sanitize(t->b ? t->b : "", t->len, NULL);
        if (!s || t->total == t->len)
                return TAKE_PTR(s);
        return strdup_printf("[... %llu earlier bytes dropped ...]\n%s", (unsigned long long) (t->total - t->len), s);
}

/* The next frame of a node stream within WAIT_SLICE_MS: 1 with *ret, 0
 * when none came (look at the deadline and the cancel, then again), or a
 * negative errno (a node that hung up: -ECONNRESET). */
static int next_frame(struct node_conn *c, struct node_frame *ret, char *err) {
        int r = node_conn_wait(c, WAIT_SLICE_MS);
        if (r <= 0)
                return r;
        r = node_conn_next(c, ret, err);
        return r == 0 ? -ECONNRESET : r;
}

/* ---- run_command ---- */

static const struct mcp_field run_command_fields[] = {
        { "sandbox_id", MCP_STRING, true, "The sandbox to run it in (from create_sandbox or list_sandboxes).", 0, 64,
          NULL },
        { "command", MCP_STRING, true,
          "A shell command line, run by /bin/sh -c as root, e.g. \"python3 -c 'print(6*7)'\" or \"cd /app && make\".",
          0, 65536, NULL },
        { "cwd", MCP_STRING, false, "Its working directory, an absolute path (default: /root).", 0, APIREQ_PATH_MAX,
          NULL },
        { "env", MCP_STRING_MAP, false, "Environment variables it gets besides the sandbox's own.", 0, 0, NULL },
        { "stdin", MCP_STRING, false, "Text written to its standard input, which is then closed (default: empty).",
          0, APIREQ_STDIN_MAX, NULL },
        { "timeout_s", MCP_INTEGER, false,
          "Seconds it may run before it is killed (default 60). For a server or a long job, start it in the "
          "background instead: \"nohup CMD > /tmp/log 2>&1 &\".",
          1, 86400, NULL },
        { NULL, 0, false, NULL, 0, 0, NULL },
};

struct command_run {
        struct mcp_call *call;
        const char *sandbox_id, *tenant_id;
        char session_id[32];
        struct tail out[2];
        json_int_t exit_code;
        int signal;
        bool exited, timed_out, cancelled;
};

static void command_run_release(struct command_run *c) {
        free(c->out[0].b);
        free(c->out[1].b);
}

static int session_op(struct command_run *c, uint32_t access, json_t *req, struct node_conn **conn, json_t **rep) {
        int r = req ? dataplane_call(c->call->ctx.config, c->tenant_id, c->sandbox_id, access, req,
                                     c->call->ctx.config->node_timeout_s, conn, rep, c->call->ctx.err)
                    : -ENOMEM;
        json_decref(req);
        return r;
}

static void kill_session(struct command_run *c) {
        char keep[API_ERRMSG_MAX];
        memcpy(keep, c->call->ctx.err, sizeof keep);
        int r = session_op(c, CAP_ACCESS_SESSION_ATTACH,
                           json_pack("{s:s, s:s, s:s, s:i}", "op", "session.signal", "id", c->sandbox_id, "session_id",
                                     c->session_id, "signal", SIGKILL),
                           NULL, NULL);
        if (r < 0)
                log_emit(LOG_LEVEL_WARN, c->call->log_ctx, "cannot kill session %s: %s", c->session_id,
                         c->call->ctx.err);
        memcpy(c->call->ctx.err, keep, sizeof keep);
}

/* One node event of the session: output, or its end. */
static int command_event(struct command_run *c, const json_t *ev) {
        const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
        const json_t *data = json_object_get(ev, "data");
        int which = strcmp(type, "stdout") == 0 ? 0 : strcmp(type, "stderr") == 0 ? 1 : -1;
        if (which >= 0 && json_is_string(data)) {
                _cleanup_free_ uint8_t *bytes = NULL;
                size_t n = 0;
                if (apireq_base64_decode(json_string_value(data), json_string_length(data), EVENT_DATA_MAX, &bytes, &n) < 0)
                        return 0;
                int r = tail_add(&c->out[which], bytes, n);
                if (r < 0)
                        return r;
                if (c->call->progress_token) {
                        _cleanup_free_ char *text = utf8_sanitize(bytes ? (char *) bytes : "", n, NULL);
                        if (text)
                                mcp_progress(c->call, (double) n, text);
                }
                return 0;
        }
        if (strcmp(type, "exit") == 0) {
                const char *error = json_string_value(json_object_get(ev, "error"));
                if (error) {
                        /* the stream's end, not the process's (the sandbox went) */
                        snprintf(c->call->ctx.err, sizeof c->call->ctx.err, "%s", error);
                        return -ECONNRESET;
                }
                c->exited = true;
                c->exit_code = json_integer_value(json_object_get(ev, "exit_code"));
                c->signal = (int) json_integer_value(json_object_get(ev, "signal"));
        }
        return 0;
}

/* Follows the session until its process exits; kills it at the deadline or
 * when the call is cancelled. */
static int command_follow(struct command_run *c, struct node_conn *conn, uint64_t timeout_s) {
        uint64_t deadline = now_monotonic_ns() + timeout_s * 1000000000ull, kill_deadline = 0;
        while (!c->exited) {
                uint64_t now = now_monotonic_ns();
                if (!kill_deadline && (now >= deadline || mcp_call_cancelled(c->call))) {
                        c->timed_out = now >= deadline;
                        c->cancelled = !c->timed_out;
                        kill_session(c);
                        kill_deadline = now + KILL_GRACE_MS * 1000000ull;
                }
                if (kill_deadline && now >= kill_deadline)
                        return 0; /* killed; its end did not come */
                struct node_frame f;
                int r = next_frame(conn, &f, c->call->ctx.err);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                if (f.type == PROTO_NODE_END) {
                        json_decref(f.event);
                        return c->exited ? 0 : -ECONNRESET;
                }
                if (f.type == PROTO_NODE_EVENT) {
                        r = command_event(c, f.event);
                        json_decref(f.event);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static json_t *command_result(struct command_run *c, uint64_t timeout_s) {
        _cleanup_free_ char *so = tail_text(&c->out[0]), *se = tail_text(&c->out[1]);
        if (!so || !se)
                return NULL;
        char end[160];
        if (c->timed_out)
                snprintf(end, sizeof end,
                         "[killed after timeout_s=%llu: give it more time, or run it in the background with nohup]",
                         (unsigned long long) timeout_s);
        else if (!c->exited)
                snprintf(end, sizeof end, "[killed; it did not report its end]");
        else if (c->signal > 0)
                snprintf(end, sizeof end, "[killed by signal %d]", c->signal);
        else
                snprintf(end, sizeof end, "[exit code %lld]", (long long) c->exit_code);
        _cleanup_free_ char *text = strdup_printf("%s%s%s%s%s", so, *so && so[strlen(so) - 1] != '\n' ? "\n" : "",
                                                  *se ? "--- stderr ---\n" : "", se,
                                                  *se && se[strlen(se) - 1] != '\n' ? "\n" : "");
        _cleanup_free_ char *all = text ? strdup_printf("%s%s", text, end) : NULL;
        json_t *st = json_pack("{s:o, s:s, s:s, s:I, s:I, s:b}", "exit_code",
                               c->exited && c->signal <= 0 ? json_integer(c->exit_code) : json_null(), "stdout", so,
                               "stderr", se, "stdout_bytes", (json_int_t) c->out[0].total, "stderr_bytes",
                               (json_int_t) c->out[1].total, "timed_out", c->timed_out);
        if (st && c->signal > 0)
                json_object_set_new(st, "signal", json_integer(c->signal));
        return all ? mcp_result(c->call, json_pack("[o]", mcp_text_block(all)), st, c->timed_out)
                   : (json_decref(st), NULL);
}

static int run_command(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        const char *cwd = mcp_arg_str(args, "cwd", NULL), *in = mcp_arg_str(args, "stdin", "");
        uint64_t timeout_s = (uint64_t) mcp_arg_int(args, "timeout_s", APIREQ_DEFAULT_EXEC_TIMEOUT_S);
        if (timeout_s > call->ctx.config->exec_max_timeout_s)
                return mcp_return(ret, mcp_tool_error(call, "timeout_s may be at most %u on this server",
                                                      call->ctx.config->exec_max_timeout_s));
        if (cwd && apireq_check_path(cwd, strlen(cwd), call->ctx.err) < 0)
                return mcp_return(ret, mcp_tool_error(call, "cwd: %s", call->ctx.err));
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(&call->ctx, id, &sb);
        if (r < 0 || (r = api_sandbox_require_running(&call->ctx, &sb)) < 0)
                return mcp_return(ret, mcp_api_error(call, r, "run_command"));

        _cleanup_(command_run_release) struct command_run c = { .call = call, .sandbox_id = sb.id,
                                                                 .tenant_id = sb.tenant_id };
        if ((r = random_id("ses-", 8, c.session_id, sizeof c.session_id)) < 0)
                return r;
        const json_t *env = json_object_get(args, "env");
        json_t *start = json_pack("{s:s, s:s, s:s, s:[sss], s:O, s:b, s:i, s:i, s:s}", "op", "session.start", "id",
                                  sb.id, "session_id", c.session_id, "cmd", "/bin/sh", "-c",
                                  mcp_arg_str(args, "command", ""), "env", env ? env : json_object(), "pty", false,
                                  "rows", 24, "cols", 80, "user", "root");
        if (start && cwd)
                json_object_set_new(start, "cwd", json_string(cwd));
        if ((r = session_op(&c, CAP_ACCESS_EXEC, start, NULL, NULL)) < 0)
                return mcp_return(ret, mcp_api_error(call, r, "run_command"));
        log_emit(LOG_LEVEL_INFO, call->log_ctx, "run_command: session %s in sandbox %s", c.session_id, sb.id);

        _cleanup_free_ char *b64 = NULL;
        if ((r = apireq_base64_encode((const uint8_t *) in, strlen(in), &b64)) < 0)
                return r;
        /* stdin: what was given, then EOF (a reader never waits for more);
         * a command that ended already is a conflict, and no error: its
         * output is in the session's replay */
        r = session_op(&c, CAP_ACCESS_SESSION_ATTACH,
                       json_pack("{s:s, s:s, s:s, s:s, s:b}", "op", "session.stdin", "id", sb.id, "session_id",
                                 c.session_id, "data", b64, "close", true),
                       NULL, NULL);
        if (r == -EEXIST || r == -EBUSY)
                r = 0;
        if (r < 0) {
                kill_session(&c);
                return mcp_return(ret, mcp_api_error(call, r, "run_command (its stdin)"));
        }
        _cleanup_(node_conn_freep) struct node_conn *conn = NULL;
        if ((r = session_op(&c, CAP_ACCESS_SESSION_ATTACH,
                            json_pack("{s:s, s:s, s:s, s:b}", "op", "session.attach", "id", sb.id, "session_id",
                                      c.session_id, "from_now", false),
                            &conn, NULL)) < 0) {
                kill_session(&c);
                return mcp_return(ret, mcp_api_error(call, r, "run_command (its output)"));
        }
        (void) node_conn_set_timeout(conn, 60);
        if ((r = command_follow(&c, conn, timeout_s)) < 0) {
                kill_session(&c);
                return mcp_return(ret, mcp_api_error(call, r, "run_command (following its output)"));
        }
        if (c.cancelled)
                return mcp_return(ret,
                                  mcp_tool_error(call, "run_command was cancelled; the command was killed"));
        return mcp_return(ret, command_result(&c, timeout_s));
}

const struct mcp_tool mcp_tool_run_command = {
        .name = "run_command",
        .title = "Run a command",
        .desc = "Runs a shell command line in a sandbox and returns its output and exit code. Its output is also "
                "sent as progress notifications while it runs (when the client asks for progress). A command that "
                "runs past timeout_s is killed.",
        .fields = run_command_fields,
        .run = run_command,
        .streams = true,
};

/* ---- the code interpreter ---- */

/* One request to the sandbox's code interpreter server: the reply's status
 * and its connection, whose NODE_DATA frames are the body. */
static int interpreter_request(struct mcp_call *call, const char *id, const char *target, const json_t *body,
                               unsigned *ret_status, struct node_conn **ret) {
        _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);
        _cleanup_(json_decrefp) json_t *headers = json_pack("[[ss]]", "Content-Type", "application/json");
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        int r = api_port_begin(&call->ctx, id, INTERPRETER_PORT, "POST", target, headers, (int64_t) len, &c);
        if (r < 0)
                return r;
        if ((r = api_upload_chunk(c, text, len)) < 0)
                log_emit(LOG_LEVEL_DEBUG, call->log_ctx, "interpreter request body: %d", r);
        if ((r = api_port_reply(&call->ctx, c, ret_status, NULL)) < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

static json_t *interpreter_missing(struct mcp_call *call, int r) {
        if (r == -ENETUNREACH || r == -ECONNREFUSED)
                return mcp_tool_error(call, "this sandbox has no code interpreter (%s): create one with create_sandbox "
                                            "and template \"code-interpreter\", or run code with run_command",
                                      call->ctx.err);
        return mcp_api_error(call, r, "the code interpreter");
}

/* Reads a short reply body (at most size - 1 bytes; the rest is left) into
 * buf, NUL-terminated; its length. */
static size_t read_body(struct node_conn *c, char *buf, size_t size, char *err) {
        size_t n = 0;
        struct node_frame f;
        while (n < size - 1 && node_conn_next(c, &f, err) > 0) {
                if (f.type != PROTO_NODE_DATA) {
                        json_decref(f.event);
                        break;
                }
                size_t k = MIN(f.len, size - 1 - n);
                memcpy(buf + n, f.data, k);
                n += k;
        }
        buf[n] = 0;
        return n;
}

/* The body of an error reply of the interpreter ({"error"} or text). */
static json_t *interpreter_error(struct mcp_call *call, unsigned status, struct node_conn *c) {
        char body[1024];
        read_body(c, body, sizeof body, call->ctx.err);
        _cleanup_(json_decrefp) json_t *j = json_loads(body, 0, NULL);
        const char *msg = json_string_value(json_object_get(j, "error")) ?: body;
        _cleanup_free_ char *clean = utf8_sanitize(msg, strlen(msg), NULL);
        return mcp_tool_error(call, "the code interpreter answered %u: %s", status, clean ? clean : "");
}

struct code_run {
        struct mcp_call *call;
        json_t *content;    /* the result's blocks after its text: images */
        json_t *results;    /* the results as the interpreter sent them */
        json_t *error;      /* {"name","value","traceback"}, or NULL */
        struct tail text;   /* what the text block shows, in order */
        struct tail std[2]; /* stdout, stderr */
        bool ended;
};

static int code_text(struct code_run *run, const char *s) {
        return tail_add(&run->text, (const uint8_t *) s, strlen(s));
}

static int code_output(struct code_run *run, int which, const char *t) {
        mcp_progress(run->call, (double) strlen(t), t);
        int r = tail_add(&run->std[which], (const uint8_t *) t, strlen(t));
        if (r >= 0 && which == 1 && *t)
                r = code_text(run, "[stderr] ");
        return r < 0 ? r : code_text(run, t);
}

static int code_result(struct code_run *run, json_t *m) {
        static const char *const images[][2] = { { "png", "image/png" }, { "jpeg", "image/jpeg" } };
        if (json_array_append(run->results, m) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < ARRAY_SIZE(images); i++) {
                const char *data = json_string_value(json_object_get(m, images[i][0]));
                if (data && json_array_append_new(run->content, json_pack("{s:s, s:s, s:s}", "type", "image", "data",
                                                                          data, "mimeType", images[i][1])) < 0)
                        return -ENOMEM;
        }
        const char *t = json_string_value(json_object_get(m, "text"));
        if (!t)
                t = json_string_value(json_object_get(m, "markdown")) ?: json_string_value(json_object_get(m, "html"));
        int r = t ? code_text(run, t) : 0;
        return r < 0 || !t ? r : code_text(run, "\n");
}

/* One NDJSON line of /execute. */
static int code_line(struct code_run *run, const char *line, size_t len) {
        _cleanup_(json_decrefp) json_t *m = json_loadb(line, len, 0, NULL);
        const char *type = json_string_value(json_object_get(m, "type")) ?: "";
        if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0)
                return code_output(run, type[3] == 'e', json_string_value(json_object_get(m, "text")) ?: "");
        if (strcmp(type, "result") == 0)
                return code_result(run, m);
        if (strcmp(type, "error") == 0) {
                const char *name = json_string_value(json_object_get(m, "name")) ?: "Error";
                const char *value = json_string_value(json_object_get(m, "value")) ?: "";
                const char *tb = json_string_value(json_object_get(m, "traceback")) ?: "";
                json_decref(run->error);
                run->error = json_pack("{s:s, s:s, s:s}", "name", name, "value", value, "traceback", tb);
                _cleanup_free_ char *t = strdup_printf("%s: %s\n%s\n", name, value, tb);
                return t && run->error ? code_text(run, t) : -ENOMEM;
        }
        if (strcmp(type, "end_of_execution") == 0)
                run->ended = true;
        return 0;
}

static const struct mcp_field run_code_fields[] = {
        { "sandbox_id", MCP_STRING, true,
          "A sandbox made from the \"code-interpreter\" template (create_sandbox with template \"code-interpreter\").",
          0, 64, NULL },
        { "code", MCP_STRING, true,
          "The code to run, like a notebook cell: variables, imports and the working directory stay for the next "
          "call in the same context; the value of the last expression is a result; matplotlib figures come back "
          "as images.",
          0, CODE_MAX, NULL },
        { "language", MCP_STRING, false, "Its language (default python).", 0, 0, (const char *const[]){ "python", NULL } },
        { "context_id", MCP_STRING, false,
          "A context from create_code_context, for state of its own (default: the sandbox's default context).", 0,
          128, NULL },
        { "env", MCP_STRING_MAP, false, "Environment variables for this run only.", 0, 0, NULL },
        { "timeout_s", MCP_INTEGER, false, "Seconds to wait for it (default 300).", 1, 86400, NULL },
        { NULL, 0, false, NULL, 0, 0, NULL },
};

static void code_run_release(struct code_run *run) {
        json_decref(run->content);
        json_decref(run->results);
        json_decref(run->error);
        free(run->text.b);
        free(run->std[0].b);
        free(run->std[1].b);
}

/* Reads /execute's lines until end_of_execution, the deadline or a cancel. */
static int code_follow(struct code_run *run, struct node_conn *c, uint64_t timeout_s, bool *ret_timed_out) {
        uint64_t deadline = now_monotonic_ns() + timeout_s * 1000000000ull;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        for (;;) {
                if (now_monotonic_ns() >= deadline) {
                        *ret_timed_out = true;
                        return 0;
                }
                if (mcp_call_cancelled(run->call))
                        return -ECANCELED;
                struct node_frame f;
                int r = next_frame(c, &f, run->call->ctx.err);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                if (f.type != PROTO_NODE_DATA) {
                        json_decref(f.event);
                        if (f.type == PROTO_NODE_END)
                                return run->ended ? 0 : -ECONNRESET;
                        continue;
                }
                if (len + f.len > NDJSON_LINE_MAX)
                        return snprintf(run->call->ctx.err, sizeof run->call->ctx.err,
                                        "a line of the interpreter's output is over %u MiB", NDJSON_LINE_MAX >> 20),
                               -EMSGSIZE;
                char *nb = realloc(buf, len + f.len + 1);
                if (!nb)
                        return -ENOMEM;
                buf = nb;
                memcpy(buf + len, f.data, f.len);
                len += f.len;
                char *nl;
                while ((nl = memchr(buf, '\n', len))) {
                        size_t k = (size_t) (nl - buf);
                        if ((r = code_line(run, buf, k)) < 0)
                                return r;
                        memmove(buf, nl + 1, len - k - 1);
                        len -= k + 1;
                }
                if (run->ended)
                        return 0;
        }
}

static int run_code(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        uint64_t timeout_s = (uint64_t) mcp_arg_int(args, "timeout_s", RUN_CODE_DEFAULT_TIMEOUT_S);
        _cleanup_(json_decrefp) json_t *body =
                json_pack("{s:s, s:s, s:O}", "code", mcp_arg_str(args, "code", ""), "language", "python", "env_vars",
                          json_object_get(args, "env") ?: json_object());
        if (body && json_object_get(args, "context_id"))
                json_object_set(body, "context_id", json_object_get(args, "context_id"));
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        unsigned status = 0;
        int r = body ? interpreter_request(call, id, "/execute", body, &status, &c) : -ENOMEM;
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return mcp_return(ret, interpreter_missing(call, r));
        if (status != 200)
                return mcp_return(ret, interpreter_error(call, status, c));

        _cleanup_(code_run_release) struct code_run run = { .call = call,
                                                             .content = json_array(),
                                                             .results = json_array() };
        if (!run.content || !run.results)
                return -ENOMEM;
        bool timed_out = false;
        r = code_follow(&run, c, timeout_s, &timed_out);
        if (r == -ENOMEM)
                return r;
        if (r == -ECANCELED)
                return mcp_return(ret, mcp_tool_error(call, "run_code was cancelled"));
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "run_code (reading its output)"));
        _cleanup_free_ char *text = tail_text(&run.text), *so = tail_text(&run.std[0]), *se = tail_text(&run.std[1]);
        if (!text || !so || !se)
                return -ENOMEM;
        _cleanup_free_ char *shown =
                timed_out ? strdup_printf("%s[no end after timeout_s=%llu: the code may still run in its context]",
                                          text, (unsigned long long) timeout_s)
                          : strdup_printf("%s", *text || json_array_size(run.content) ? text : "[no output]");
        if (!shown || json_array_insert_new(run.content, 0, mcp_text_block(shown)) < 0)
                return -ENOMEM;
        json_t *st = json_pack("{s:O, s:s, s:s, s:O, s:b}", "results", run.results, "stdout", so, "stderr", se,
                               "error", run.error ?: json_null(), "timed_out", timed_out);
        *ret = mcp_result(call, TAKE_PTR(run.content), st, run.error || timed_out);
        return *ret ? 0 : -ENOMEM;
}

const struct mcp_tool mcp_tool_run_code = {
        .name = "run_code",
        .title = "Run code in a code interpreter",
        .desc = "Runs Python in a code-interpreter sandbox's Jupyter kernel, like a notebook cell, and returns what "
                "it printed, its results (text, and plots as images) and any error with its traceback. State stays "
                "between calls. The sandbox must come from the \"code-interpreter\" template.",
        .fields = run_code_fields,
        .run = run_code,
        .streams = true,
};

static const struct mcp_field code_context_fields[] = {
        { "sandbox_id", MCP_STRING, true, "A sandbox made from the \"code-interpreter\" template.", 0, 64, NULL },
        { "language", MCP_STRING, false, "Its language (default python).", 0, 0, (const char *const[]){ "python", NULL } },
        { "cwd", MCP_STRING, false, "Its working directory (default /root).", 0, APIREQ_PATH_MAX, NULL },
        { NULL, 0, false, NULL, 0, 0, NULL },
};

static int create_code_context(struct mcp_call *call, const json_t *args, json_t **ret) {
        _cleanup_(json_decrefp) json_t *body =
                json_pack("{s:s, s:s}", "language", "python", "cwd", mcp_arg_str(args, "cwd", "/root"));
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        unsigned status = 0;
        int r = body ? interpreter_request(call, mcp_arg_str(args, "sandbox_id", ""), "/contexts", body, &status, &c)
                     : -ENOMEM;
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return mcp_return(ret, interpreter_missing(call, r));
        if (status != 200)
                return mcp_return(ret, interpreter_error(call, status, c));
        char reply[4096];
        size_t n = read_body(c, reply, sizeof reply, call->ctx.err);
        json_t *ctx = json_loadb(reply, n, 0, NULL);
        const char *cid = json_string_value(json_object_get(ctx, "id"));
        if (!cid) {
                json_decref(ctx);
                return mcp_return(ret, mcp_tool_error(call, "the code interpreter sent no context id"));
        }
        json_t *o = json_pack("{s:O, s:O, s:O}", "context_id", json_object_get(ctx, "id"), "language",
                              json_object_get(ctx, "language") ?: json_null(), "cwd",
                              json_object_get(ctx, "cwd") ?: json_null());
        json_decref(ctx);
        return mcp_return(ret, mcp_result_json(call, o));
}

const struct mcp_tool mcp_tool_create_code_context = {
        .name = "create_code_context",
        .title = "Create a code context",
        .desc = "Starts a new Jupyter kernel in a code-interpreter sandbox: run_code with its context_id keeps its "
                "own variables, apart from the default context's.",
        .fields = code_context_fields,
        .run = create_code_context,
};
