/* SPDX-License-Identifier: Apache-2.0 */
/* What every MCP tool uses: arguments checked by their table, results,
 * progress and cancellation (mcp-call.h). */
#include "mcp-call.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apierror.h"

bool mcp_call_cancelled(struct mcp_call *call) {
        if (atomic_load(&call->cancelled) || (call->ctx.stopping && atomic_load(call->ctx.stopping)))
                return true;
        if (call->client_fd >= 0) {
                /* a JSON reply's client that hung up will never read it */
                struct pollfd p = { .fd = call->client_fd, .events = POLLRDHUP };
                if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        atomic_store(&call->cancelled, true);
        }
        return atomic_load(&call->cancelled);
}

void mcp_progress(struct mcp_call *call, double amount, const char *message) {
        if (!call->progress_token || !call->progress_sink)
                return;
        call->progress_n += amount > 0 ? amount : 1;
        json_t *n = json_pack("{s:s, s:s, s:{s:O, s:f}}", "jsonrpc", "2.0", "method", "notifications/progress",
                              "params", "progressToken", call->progress_token, "progress", call->progress_n);
        if (n && message)
                json_object_set_new(json_object_get(n, "params"), "message", json_string(message));
        if (n)
                call->progress_sink(call->progress_cls, n);
}

/* A message for a bad argument into err: -EINVAL. */
static const char *type_name(enum mcp_type t) {
        switch (t) {
        case MCP_STRING:
                return "a string";
        case MCP_INTEGER:
                return "an integer";
        case MCP_BOOLEAN:
                return "true or false";
        case MCP_STRING_MAP:
                return "an object of strings";
        case MCP_STRING_LIST:
                return "an array of strings";
        case MCP_OBJECT:
                return "an object";
        }
        return "?";
}

static bool all_strings(const json_t *v) {
        const char *k;
        size_t i;
        json_t *e;
        if (json_is_object(v)) {
                json_object_foreach((json_t *) v, k, e) if (!json_is_string(e)) return false;
                return true;
        }
        json_array_foreach(v, i, e) if (!json_is_string(e)) return false;
        return json_is_array(v);
}

static int check_value(const struct mcp_field *f, const json_t *v, char *err) {
        bool ok;
        switch (f->type) {
        case MCP_STRING:
                ok = json_is_string(v);
                break;
        case MCP_INTEGER:
                ok = json_is_integer(v);
                break;
        case MCP_BOOLEAN:
                ok = json_is_boolean(v);
                break;
        case MCP_STRING_MAP:
                ok = json_is_object(v) && all_strings(v);
                break;
        case MCP_STRING_LIST:
                ok = json_is_array(v) && all_strings(v);
                break;
        default:
                ok = json_is_object(v);
                break;
        }
        if (!ok)
                return api_error_invalid(err, "argument \"%s\" must be %s", f->name, type_name(f->type));
        if (f->type == MCP_INTEGER && (f->min || f->max) &&
            (json_integer_value(v) < f->min || json_integer_value(v) > f->max))
                return api_error_invalid(err, "argument \"%s\" must be an integer from %lld to %lld",
                                         f->name, (long long) f->min, (long long) f->max);
        if (f->type == MCP_STRING && f->max > 0 && json_string_length(v) > (size_t) f->max)
                return api_error_invalid(err, "argument \"%s\" is longer than %lld bytes", f->name,
                                         (long long) f->max);
        if (f->type == MCP_STRING && f->choices) {
                for (const char *const *c = f->choices; *c; c++)
                        if (strcmp(*c, json_string_value(v)) == 0)
                                return 0;
                int n = snprintf(err, API_ERRMSG_MAX, "argument \"%s\" must be one of", f->name);
                for (const char *const *c = f->choices; *c && n > 0 && n < API_ERRMSG_MAX; c++)
                        n += snprintf(err + n, API_ERRMSG_MAX - (size_t) n, "%s \"%s\"", c == f->choices ? "" : ",", *c);
                return -EINVAL;
        }
        return 0;
}

int mcp_args_check(const struct mcp_field *fields, const json_t *args, char *err) {
        if (args && !json_is_object(args))
                return api_error_invalid(err, "the arguments must be an object");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) args, k, v) {
                const struct mcp_field *f = fields;
                while (f->name && strcmp(f->name, k) != 0)
                        f++;
                if (!f->name) {
                        /* name what it takes, so the model can correct itself */
                        int n = snprintf(err, API_ERRMSG_MAX, "unknown argument \"%.64s\" (this tool takes:", k);
                        for (f = fields; f->name && n > 0 && n < API_ERRMSG_MAX; f++)
                                n += snprintf(err + n, API_ERRMSG_MAX - (size_t) n, "%s %s", f == fields ? "" : ",",
                                              f->name);
                        if (n > 0 && n < API_ERRMSG_MAX)
                                snprintf(err + n, API_ERRMSG_MAX - (size_t) n, "%s)", fields->name ? "" : " nothing");
                        return -EINVAL;
                }
                int r = check_value(f, v, err);
                if (r < 0)
                        return r;
        }
        for (const struct mcp_field *f = fields; f->name; f++)
                if (f->required && !json_object_get(args, f->name))
                        return api_error_invalid(err, "missing required argument \"%s\"", f->name);
        return 0;
}

json_t *mcp_fields_schema(const struct mcp_field *fields) {
        json_t *props = json_object(), *required = json_array();
        for (const struct mcp_field *f = fields; props && required && f->name; f++) {
                static const char *const types[] = { [MCP_STRING] = "string",      [MCP_INTEGER] = "integer",
                                                     [MCP_BOOLEAN] = "boolean",    [MCP_STRING_MAP] = "object",
                                                     [MCP_STRING_LIST] = "array", [MCP_OBJECT] = "object" };
                json_t *p = json_pack("{s:s, s:s}", "type", types[f->type], "description", f->desc);
                if (!p)
                        continue;
                if (f->type == MCP_INTEGER && (f->min || f->max)) {
                        json_object_set_new(p, "minimum", json_integer(f->min));
                        json_object_set_new(p, "maximum", json_integer(f->max));
                }
                if (f->type == MCP_STRING && f->max > 0)
                        json_object_set_new(p, "maxLength", json_integer(f->max));
                if (f->type == MCP_STRING_MAP)
                        json_object_set_new(p, "additionalProperties", json_pack("{s:s}", "type", "string"));
                if (f->type == MCP_STRING_LIST)
                        json_object_set_new(p, "items", json_pack("{s:s}", "type", "string"));
                if (f->choices) {
                        json_t *e = json_array();
                        for (const char *const *c = f->choices; e && *c; c++)
                                json_array_append_new(e, json_string(*c));
                        json_object_set_new(p, "enum", e);
                }
                json_object_set_new(props, f->name, p);
                if (f->required)
                        json_array_append_new(required, json_string(f->name));
        }
        return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", required,
                         "additionalProperties", false);
}

const char *mcp_arg_str(const json_t *args, const char *name, const char *def) {
        const json_t *v = json_object_get(args, name);
        return json_is_string(v) ? json_string_value(v) : def;
}

int64_t mcp_arg_int(const json_t *args, const char *name, int64_t def) {
        const json_t *v = json_object_get(args, name);
        return json_is_integer(v) ? json_integer_value(v) : def;
}

bool mcp_arg_bool(const json_t *args, const char *name, bool def) {
        const json_t *v = json_object_get(args, name);
        return json_is_boolean(v) ? json_is_true(v) : def;
}

json_t *mcp_text_block(const char *text) {
        return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

json_t *mcp_result(struct mcp_call *call, json_t *content, json_t *structured, bool is_error) {
        json_t *o = content ? json_pack("{s:o, s:b}", "content", content, "isError", is_error) : NULL;
        if (o && structured && call->structured)
                json_object_set(o, "structuredContent", structured);
        json_decref(structured);
        return o;
}

json_t *mcp_result_json(struct mcp_call *call, json_t *structured) {
        if (!structured)
                return NULL;
        _cleanup_free_ char *text = json_dumps(structured, JSON_INDENT(2) | JSON_SORT_KEYS);
        return text ? mcp_result(call, json_pack("[o]", mcp_text_block(text)), structured, false)
                    : (json_decref(structured), NULL);
}

int mcp_return(json_t **ret, json_t *result) {
        *ret = result;
        return result ? 0 : -ENOMEM;
}

json_t *mcp_tool_error(struct mcp_call *call, const char *fmt, ...) {
        char msg[API_ERRMSG_MAX + 256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        return mcp_result(call, json_pack("[o]", mcp_text_block(msg)), NULL, true);
}

json_t *mcp_api_error(struct mcp_call *call, int r, const char *what) {
        const char *msg = call->ctx.err[0] ? call->ctx.err : api_error_default_message(r);
        const char *advice = "";
        switch (r) {
        case -ENOENT:
                advice = " (list_sandboxes shows the sandboxes this key can use)";
                break;
        case -EBUSY:
                advice = " (list_sandboxes shows its state; wait for it, or resume/start it first)";
                break;
        case -EINPROGRESS:
                advice = " (call it again in a minute: the build goes on meanwhile)";
                break;
        case -EHOSTDOWN:
        case -ECONNREFUSED:
        case -ECONNRESET:
        case -ESTALE:
        case -ETIMEDOUT:
                advice = " (a passing condition: try again in a few seconds)";
                break;
        case -EACCES:
        case -EPERM:
                advice = " (this key may not do that)";
                break;
        default:
                break;
        }
        return mcp_tool_error(call, "%s failed: %s%s", what, msg, advice);
}
