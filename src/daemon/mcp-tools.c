/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MCP server's tools (docs/mcp.md): the table tools/list shows, and the
 * tools that manage sandboxes and their files, each a call of the /v1
 * handlers with the caller's context, so a tenant's key reaches only its
 * own sandboxes and every check of the API applies. What runs code is in
 * mcp-run.c.
 */
#include "mcp-tools.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apireq.h"
#include "log.h"
#include "mcp-run.h"
#include "util.h"

#define LIFETIME_DEFAULT_S 3600
#define LIFETIME_MAX_S (365 * 24 * 3600)

#define FIELD_END { NULL, 0, false, NULL, 0, 0, NULL }
#define FIELD_SANDBOX                                                                                         \
        { "sandbox_id", MCP_STRING, true, "The sandbox (from create_sandbox or list_sandboxes).", 0, 64, NULL }
#define FIELD_PATH(what) { "path", MCP_STRING, true, what, 0, APIREQ_PATH_MAX, NULL }

/* The API reply's body, taken; NULL when it has none. */
static json_t *reply_body(struct api_reply *rep) {
        json_t *b = TAKE_PTR(rep->body);
        api_reply_release(rep);
        return b;
}

/* ---- sandboxes ---- */

/* What the tools show of a sandbox (the API's row, shorter). */
static json_t *sandbox_brief(const json_t *sb) {
        json_t *o = json_pack("{s:O, s:O, s:O}", "sandbox_id", json_object_get(sb, "id") ?: json_null(), "template",
                              json_object_get(sb, "template") ?: json_null(), "state",
                              json_object_get(sb, "state") ?: json_null());
        static const char *const extra[] = { "created_at", "expires_at", "on_expiry", "metadata", "error" };
        for (size_t i = 0; o && i < ARRAY_SIZE(extra); i++) {
                json_t *v = json_object_get(sb, extra[i]);
                if (v && !json_is_null(v))
                        json_object_set(o, extra[i], v);
        }
        return o;
}

static const struct mcp_field create_fields[] = {
        { "template", MCP_STRING, false,
          "What it starts from (default \"python\"): \"minimal\" (a small Debian), \"python\" (Python 3 with pip), "
          "\"code-interpreter\" (Python with numpy, pandas, matplotlib and a Jupyter kernel: for run_code), or a "
          "template built on this server.",
          0, 128, NULL },
        { "timeout_s", MCP_INTEGER, false,
          "Its lifetime in seconds from now (default 3600; 0: none): at its end it is suspended (woken again by the "
          "next tool call on it) or deleted, as on_timeout says.",
          0, LIFETIME_MAX_S, NULL },
        { "on_timeout", MCP_STRING, false, "What its lifetime's end does (default \"suspend\").", 0, 0,
          (const char *const[]){ "suspend", "delete", NULL } },
        { "network", MCP_OBJECT, false,
          "Its egress policy, e.g. {\"allow\":[{\"host\":\"pypi.org\"},{\"host\":\"*.pythonhosted.org\"}]} or "
          "{\"mode\":\"deny-all\"} (default: the server's or tenant's default policy).",
          0, 0, NULL },
        { "secrets", MCP_STRING_LIST, false,
          "Names of this key's secrets to attach: the sandbox sees a placeholder, the egress gateway puts the real "
          "value into requests to the secret's hosts.",
          0, 0, NULL },
        { "env", MCP_STRING_MAP, false, "Environment variables of its processes.", 0, 0, NULL },
        { "metadata", MCP_STRING_MAP, false, "Labels of your own, shown by list_sandboxes.", 0, 0, NULL },
        FIELD_END,
};

static int create_sandbox(struct mcp_call *call, const json_t *args, json_t **ret) {
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s, s:i}", "template", mcp_arg_str(args, "template", "python"),
                                                         "template_wait_s", API_SDK_TEMPLATE_WAIT_S);
        static const char *const pass[] = { "network", "secrets", "env", "metadata" };
        for (size_t i = 0; body && i < ARRAY_SIZE(pass); i++)
                if (json_object_get(args, pass[i]))
                        json_object_set(body, pass[i], json_object_get(args, pass[i]));
        if (!body)
                return -ENOMEM;
        struct api_reply rep = { 0 };
        int r = api_sandbox_create(&call->ctx, body, NULL, &rep);
        _cleanup_(json_decrefp) json_t *sb = reply_body(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "create_sandbox"));
        const char *id = json_string_value(json_object_get(sb, "id"));
        int64_t lifetime = mcp_arg_int(args, "timeout_s", LIFETIME_DEFAULT_S);
        const char *on = mcp_arg_str(args, "on_timeout", "suspend");
        if (id && lifetime > 0 && (r = api_sandbox_set_lifetime(&call->ctx, id, lifetime, on)) < 0)
                log_emit(LOG_LEVEL_WARN, call->log_ctx, "sandbox %s has no lifetime", id);
        json_t *o = sandbox_brief(sb);
        if (o && lifetime > 0) {
                char ts[48];
                api_format_time(now_unix_ms() + lifetime * 1000, ts, sizeof ts);
                json_object_set_new(o, "expires_at", json_string(ts));
                json_object_set_new(o, "on_expiry", json_string(on));
        }
        log_emit(LOG_LEVEL_INFO, call->log_ctx, "mcp: created sandbox %s", id ? id : "?");
        return mcp_return(ret, mcp_result_json(call, o));
}

static int list_sandboxes(struct mcp_call *call, const json_t *args, json_t **ret) {
        (void) args;
        struct api_reply rep = { 0 };
        int r = api_sandbox_list(&call->ctx, NULL, &rep);
        _cleanup_(json_decrefp) json_t *b = reply_body(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "list_sandboxes"));
        json_t *arr = json_array(), *sb;
        size_t i;
        json_array_foreach(json_object_get(b, "sandboxes"), i, sb) json_array_append_new(arr, sandbox_brief(sb));
        return mcp_return(ret, mcp_result_json(call, json_pack("{s:o}", "sandboxes", arr)));
}

static int delete_sandbox(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        struct api_reply rep = { 0 };
        int r = api_sandbox_delete(&call->ctx, id, NULL, false, &rep);
        api_reply_release(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "delete_sandbox"));
        return mcp_return(ret,
                          mcp_result_json(call, json_pack("{s:s, s:b}", "sandbox_id", id, "deleted", true)));
}

/* A lifecycle verb, waited for: its operation's result, or a tool error. */
static int verb(struct mcp_call *call, const char *id, const char *name, const json_t *body, json_t **ret_result,
                json_t **ret) {
        struct api_reply rep = { 0 };
        int r = api_sandbox_verb(&call->ctx, id, name, body, NULL, true, &rep);
        _cleanup_(json_decrefp) json_t *op = reply_body(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, name));
        const char *state = json_string_value(json_object_get(op, "state")) ?: "";
        if (strcmp(state, "failed") == 0)
                return mcp_return(ret, mcp_tool_error(call, "%s failed: %s", name,
                                                      json_string_value(json_object_get(
                                                              json_object_get(op, "error"), "message"))
                                                              ?: "?"));
        if (strcmp(state, "succeeded") != 0)
                return mcp_return(ret,
                                  mcp_tool_error(call,
                                                 "%s is still running after 10 minutes (operation %s): "
                                                 "list_sandboxes shows when it is done",
                                                 name, json_string_value(json_object_get(op, "id")) ?: "?"));
        *ret_result = json_incref(json_object_get(op, "result"));
        return 1;
}

static int suspend(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        _cleanup_(json_decrefp) json_t *res = NULL;
        int r = verb(call, id, "suspend", NULL, &res, ret);
        if (r <= 0)
                return r;
        return mcp_return(
                ret, mcp_result_json(call, json_pack("{s:s, s:s}", "sandbox_id", id, "state", "suspended")));
}

static int fork_sandbox(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        _cleanup_(store_sandbox_release) struct store_sandbox parent = { 0 };
        int r = api_sandbox_lookup(&call->ctx, id, &parent);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "fork"));
        _cleanup_(json_decrefp) json_t *res = NULL;
        if ((r = verb(call, id, "fork", NULL, &res, ret)) <= 0)
                return r;
        const char *child = json_string_value(json_object_get(json_object_get(res, "sandbox"), "id"));
        if (!child)
                return mcp_return(ret, mcp_tool_error(call, "fork succeeded but named no new sandbox"));
        /* the child lives as long as its parent was given */
        if (parent.expiry_s > 0)
                (void) api_sandbox_set_lifetime(&call->ctx, child, parent.expiry_s, parent.on_expiry);
        return mcp_return(ret, mcp_result_json(call, json_pack("{s:s, s:s, s:s}", "sandbox_id", child,
                                                               "parent", id, "state", "running")));
}

static const struct mcp_field snapshot_fields[] = {
        FIELD_SANDBOX,
        { "kind", MCP_STRING, false,
          "\"disk\" (default: its files; a rollback boots them) or \"full\" (memory too: a rollback resumes its "
          "processes where they were).",
          0, 0, (const char *const[]){ "disk", "full", NULL } },
        FIELD_END,
};

static int snapshot(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s}", "kind", mcp_arg_str(args, "kind", "disk"));
        struct api_reply rep = { 0 };
        int r = body ? api_snapshot_create(&call->ctx, id, body, &rep) : -ENOMEM;
        _cleanup_(json_decrefp) json_t *sn = reply_body(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "snapshot"));
        json_t *o = json_pack("{s:O, s:s, s:O, s:O}", "snapshot_id", json_object_get(sn, "id") ?: json_null(),
                              "sandbox_id", id, "kind", json_object_get(sn, "kind") ?: json_null(), "created_at",
                              json_object_get(sn, "created_at") ?: json_null());
        return mcp_return(ret, mcp_result_json(call, o));
}

static const struct mcp_field rollback_fields[] = {
        FIELD_SANDBOX,
        { "snapshot_id", MCP_STRING, true, "A snapshot of this sandbox (from snapshot).", 0, 64, NULL },
        FIELD_END,
};

static int rollback(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        _cleanup_(json_decrefp) json_t *body = json_pack("{s:s}", "snapshot", mcp_arg_str(args, "snapshot_id", ""));
        _cleanup_(json_decrefp) json_t *res = NULL;
        int r = body ? verb(call, id, "rollback", body, &res, ret) : -ENOMEM;
        if (r <= 0)
                return r;
        return mcp_return(
                ret,
                mcp_result_json(call, json_pack("{s:s, s:s, s:O}", "sandbox_id", id, "snapshot_id",
                                                mcp_arg_str(args, "snapshot_id", ""), "state",
                                                json_object_get(res, "state") ?: json_string("running"))));
}

static const struct mcp_field port_fields[] = {
        FIELD_SANDBOX,
        { "port", MCP_INTEGER, true, "The TCP port a server in the sandbox listens on (on 0.0.0.0).", 1, 65535, NULL },
        FIELD_END,
};

static int get_port_url(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", "");
        _cleanup_(store_sandbox_release) struct store_sandbox sb = { 0 };
        int r = api_sandbox_lookup(&call->ctx, id, &sb);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "get_port_url"));
        _cleanup_free_ char *url = strdup_printf("%s/v1/sandboxes/%s/ports/%lld/", call->base_url, sb.id,
                                                 (long long) mcp_arg_int(args, "port", 0));
        json_t *o = url ? json_pack("{s:s, s:s}", "url", url, "auth",
                                    "send this server's API key as 'Authorization: Bearer KEY'; the request goes to "
                                    "the server in the sandbox with its path after the port")
                        : NULL;
        return mcp_return(ret, mcp_result_json(call, o));
}

/* ---- files ---- */

static int check_path(struct mcp_call *call, const char *path, json_t **ret) {
        if (apireq_check_path(path, strlen(path), call->ctx.err) >= 0)
                return 0;
        *ret = mcp_tool_error(call, "path: %s (give an absolute path, e.g. /root/notes.txt)", call->ctx.err);
        return -EINVAL;
}

static const char *image_type(const uint8_t *b, size_t n) {
        if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
                return "image/png";
        if (n >= 3 && memcmp(b, "\xff\xd8\xff", 3) == 0)
                return "image/jpeg";
        if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0))
                return "image/gif";
        if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
                return "image/webp";
        return NULL;
}

static const struct mcp_field read_fields[] = {
        FIELD_SANDBOX,
        FIELD_PATH("The file's absolute path."),
        { "encoding", MCP_STRING, false,
          "\"utf-8\" (default: text; an image comes back as an image) or \"base64\" (any bytes).", 0, 0,
          (const char *const[]){ "utf-8", "base64", NULL } },
        FIELD_END,
};

static int read_file(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", ""), *path = mcp_arg_str(args, "path", "");
        bool b64 = strcmp(mcp_arg_str(args, "encoding", "utf-8"), "base64") == 0;
        if (check_path(call, path, ret) < 0)
                return 0;
        _cleanup_free_ uint8_t *data = NULL;
        size_t n = 0;
        int r = api_file_read_bytes(&call->ctx, id, path, MCP_FILE_MAX, &data, &n);
        if (r == -EFBIG)
                return mcp_return(
                        ret,
                        mcp_tool_error(call, "%s: read parts of it with run_command (head, tail, sed -n)",
                                       call->ctx.err));
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "read_file"));
        const char *image = b64 ? NULL : image_type(data, n);
        if (b64 || image) {
                _cleanup_free_ char *enc = NULL;
                if ((r = apireq_base64_encode(data, n, &enc)) < 0)
                        return r;
                json_t *block = image ? json_pack("{s:s, s:s, s:s}", "type", "image", "data", enc, "mimeType", image)
                                      : mcp_text_block(enc);
                json_t *st = json_pack("{s:s, s:I, s:s}", "path", path, "size", (json_int_t) n, "encoding", "base64");
                if (st && !image)
                        json_object_set_new(st, "content", json_string(enc));
                return mcp_return(ret, mcp_result(call, json_pack("[o]", block), st, false));
        }
        size_t clean_len = 0;
        _cleanup_free_ char *clean = utf8_sanitize(data, n, &clean_len);
        if (!clean)
                return -ENOMEM;
        if (clean_len != n || memcmp(clean, data, n) != 0 || memchr(data, 0, n))
                return mcp_return(
                        ret,
                        mcp_tool_error(call,
                                       "%s is not UTF-8 text (%zu bytes): read it with encoding \"base64\"",
                                       path, n));
        json_t *st = json_pack("{s:s, s:I, s:s, s:s}", "path", path, "size", (json_int_t) n, "encoding", "utf-8",
                               "content", clean);
        return mcp_return(ret, mcp_result(call, json_pack("[o]", mcp_text_block(clean)), st, false));
}

static const struct mcp_field write_fields[] = {
        FIELD_SANDBOX,
        FIELD_PATH("The file's absolute path; its directories are made as needed."),
        { "content", MCP_STRING, true, "What the file holds afterwards (it is replaced whole).", 0, 0, NULL },
        { "encoding", MCP_STRING, false, "How content is given: \"utf-8\" (default) or \"base64\".", 0, 0,
          (const char *const[]){ "utf-8", "base64", NULL } },
        { "executable", MCP_BOOLEAN, false, "Make it executable (mode 0755 instead of 0644).", 0, 0, NULL },
        FIELD_END,
};

static int write_file(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", ""), *path = mcp_arg_str(args, "path", "");
        const json_t *content = json_object_get(args, "content");
        if (check_path(call, path, ret) < 0)
                return 0;
        _cleanup_free_ uint8_t *decoded = NULL;
        const void *data = json_string_value(content);
        size_t n = json_string_length(content);
        if (strcmp(mcp_arg_str(args, "encoding", "utf-8"), "base64") == 0) {
                if (apireq_base64_decode(data, n, call->ctx.config->max_json_body, &decoded, &n) < 0)
                        return mcp_return(ret, mcp_tool_error(call, "content is not valid base64"));
                data = decoded;
        }
        _cleanup_(node_conn_freep) struct node_conn *c = NULL;
        int r = api_upload_begin(&call->ctx, id, path, mcp_arg_bool(args, "executable", false) ? 0755 : 0644, &c);
        if (r >= 0 && n > 0)
                r = api_upload_chunk(c, data, n);
        struct api_reply rep = { 0 };
        /* a failed send: the node's reply says why */
        if (c)
                r = api_upload_finish(&call->ctx, c, path, n, &rep);
        api_reply_release(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "write_file"));
        return mcp_return(
                ret, mcp_result_json(call, json_pack("{s:s, s:I}", "path", path, "size", (json_int_t) n)));
}

static const struct mcp_field list_fields[] = {
        FIELD_SANDBOX,
        FIELD_PATH("An absolute directory path."),
        FIELD_END,
};

static int list_files(struct mcp_call *call, const json_t *args, json_t **ret) {
        const char *id = mcp_arg_str(args, "sandbox_id", ""), *path = mcp_arg_str(args, "path", "");
        if (check_path(call, path, ret) < 0)
                return 0;
        struct api_reply rep = { 0 };
        int r = api_file_list(&call->ctx, id, path, &rep);
        _cleanup_(json_decrefp) json_t *b = reply_body(&rep);
        if (r < 0)
                return mcp_return(ret, mcp_api_error(call, r, "list_files"));
        if (json_object_set_new(b, "path", json_string(path)) < 0)
                return -ENOMEM;
        return mcp_return(ret, mcp_result_json(call, TAKE_PTR(b)));
}

/* ---- the table ---- */

static const struct mcp_field sandbox_only[] = { FIELD_SANDBOX, FIELD_END };
static const struct mcp_field no_fields[] = { FIELD_END };

static const struct mcp_tool tools_here[] = {
        { "create_sandbox", "Create a sandbox",
          "Creates a sandbox: a virtual machine of its own (a Linux guest kernel, root inside) made from a template "
          "in about a second. Returns its sandbox_id, which every other tool takes. It lives until delete_sandbox or "
          "the end of its lifetime (timeout_s).",
          create_fields, create_sandbox, false, false, false },
        { "list_sandboxes", "List sandboxes", "Lists the sandboxes this key can use, with their state and lifetime.",
          no_fields, list_sandboxes, false, true, false },
        { "delete_sandbox", "Delete a sandbox", "Deletes a sandbox and everything in it, at once.", sandbox_only,
          delete_sandbox, false, false, true },
        { "read_file", "Read a file", "Reads a file of a sandbox (at most 1 MiB).", read_fields, read_file, false,
          true, false },
        { "write_file", "Write a file", "Writes a file in a sandbox, replacing it.", write_fields, write_file, false,
          false, true },
        { "list_files", "List a directory", "Lists a directory of a sandbox: names, types, sizes, modes, times.",
          list_fields, list_files, false, true, false },
        { "get_port_url", "A service port's URL",
          "The URL at which a server listening in the sandbox on port is reached through this Airlock server.",
          port_fields, get_port_url, false, true, false },
        { "snapshot", "Snapshot a sandbox",
          "Takes a snapshot of a sandbox (its disk, or all of it) to roll back to later.", snapshot_fields, snapshot,
          false, false, false },
        { "rollback", "Roll a sandbox back",
          "Puts a sandbox back as it was at one of its snapshots; what changed since is lost.", rollback_fields,
          rollback, false, false, true },
        { "fork", "Fork a sandbox",
          "Makes a new sandbox that is a copy of a running one, memory and processes included; both run on "
          "independently. Returns the new sandbox_id.",
          sandbox_only, fork_sandbox, false, false, false },
        { "suspend", "Suspend a sandbox",
          "Saves a sandbox whole (memory, processes, files) and frees its machine; the next tool call on it wakes "
          "it where it was.",
          sandbox_only, suspend, false, false, false },
};

static const struct mcp_tool *const run_tools[] = { &mcp_tool_run_command, &mcp_tool_run_code,
                                                    &mcp_tool_create_code_context };

/* the order tools/list shows: create, run, files, the rest */
const struct mcp_tool *mcp_tool_at(size_t i) {
        if (i == 0)
                return &tools_here[0];
        if (i <= ARRAY_SIZE(run_tools))
                return run_tools[i - 1];
        i -= ARRAY_SIZE(run_tools);
        return i < ARRAY_SIZE(tools_here) ? &tools_here[i] : NULL;
}

const struct mcp_tool *mcp_tool_find(const char *name) {
        const struct mcp_tool *t;
        for (size_t i = 0; (t = mcp_tool_at(i)); i++)
                if (strcmp(t->name, name) == 0)
                        return t;
        return NULL;
}

json_t *mcp_tools_list(void) {
        json_t *arr = json_array();
        const struct mcp_tool *t;
        for (size_t i = 0; arr && (t = mcp_tool_at(i)); i++) {
                json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b}}", "name", t->name, "title", t->title,
                                      "description", t->desc, "inputSchema", mcp_fields_schema(t->fields),
                                      "annotations", "title", t->title, "readOnlyHint", t->read_only,
                                      "destructiveHint", t->destructive, "openWorldHint", false);
                if (!o || json_array_append_new(arr, o) < 0) {
                        json_decref(arr);
                        return NULL;
                }
        }
        return arr ? json_pack("{s:o}", "tools", arr) : NULL;
}

int mcp_tool_run(struct mcp_call *call, const struct mcp_tool *t, const json_t *args, json_t **ret) {
        if (mcp_args_check(t->fields, args, call->ctx.err) < 0)
                return mcp_return(ret, mcp_tool_error(call, "%s: %s", t->name, call->ctx.err));
        call->ctx.err[0] = 0;
        return t->run(call, args, ret);
}
