/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * One MCP tool call as the tools see it (docs/mcp.md): the caller's API
 * context (its key's tenant scopes every sandbox it names, as on /v1), how
 * to report progress, whether the client gave up, and the results a tool
 * returns. A leaf of the MCP server: mcp.c (the transport) → mcp-tools.c
 * (the table and the sandbox tools) → mcp-run.c (commands and code) → here.
 *
 * Arguments are declared once per tool as a table of fields; the same table
 * makes the tool's JSON Schema (tools/list) and checks a call's arguments
 * (mcp_args_check()), so the two cannot drift: an unknown argument, a
 * missing one or one of the wrong type is a tool error naming it.
 */

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "api-reply.h"
#include "macros.h"

/* a tool's text output kept per stream (run_command): the last bytes */
#define MCP_OUTPUT_MAX (256u << 10)
/* the largest file read_file returns (more: use run_command with head/tail) */
#define MCP_FILE_MAX (1u << 20)

enum mcp_type {
        MCP_STRING,
        MCP_INTEGER,
        MCP_BOOLEAN,
        MCP_STRING_MAP,  /* an object of strings (env, metadata) */
        MCP_STRING_LIST, /* an array of strings */
        MCP_OBJECT,      /* any object, checked by the handler (an egress policy) */
};

/* One argument of a tool; a table ends with a field whose name is NULL. */
struct mcp_field {
        const char *name;
        enum mcp_type type;
        bool required;
        const char *desc;
        int64_t min, max;            /* integers: the bounds; strings: max is the longest (0: none) */
        const char *const *choices;  /* strings: the values allowed (NULL-terminated), or NULL */
};

struct mcp_call;

/* One tool: its name, what tools/list says of it, its arguments and its
 * handler, which returns 0 with a CallToolResult in *ret (a failure of the
 * tool is a result with isError), or -ENOMEM. */
struct mcp_tool {
        const char *name, *title, *desc;
        const struct mcp_field *fields;
        int (*run)(struct mcp_call *call, const json_t *args, json_t **ret);
        bool streams;     /* reports progress (output) while it runs */
        bool read_only;   /* annotations: changes nothing */
        bool destructive; /* may lose what was there */
};

struct mcp_call {
        /* the caller's context: a copy whose strings live as long as the call */
        struct api_ctx ctx;
        char *tenant_id, *key_id;
        char log_ctx[256];
        /* the base of URLs handed back (a service port's): "http://HOST" */
        char base_url[300];
        /* the negotiated protocol version: structuredContent from 2025-06-18 */
        bool structured;
        /* set by notifications/cancelled or a client that went away */
        atomic_bool cancelled;
        int client_fd; /* a JSON reply's HTTP client, polled for a hang-up; -1: none */
        /* progress notifications: the client's token (NULL: none wanted) and
         * where each goes (the event stream's queue) */
        json_t *progress_token;
        void (*progress_sink)(void *cls, json_t *notification);
        void *progress_cls;
        double progress_n;
};

/* Whether the call should stop: cancelled, the client gone, or the server stopping. */
bool mcp_call_cancelled(struct mcp_call *call);
/* Sends notifications/progress with message (when the client asked for
 * progress); progress counts up by amount. */
void mcp_progress(struct mcp_call *call, double amount, const char *message);

/* Checks args (NULL: {}) against fields: 0, or -EINVAL with the message in
 * err (API_ERRMSG_MAX) naming the argument and what it must be. */
int mcp_args_check(const struct mcp_field *fields, const json_t *args, char *err);
/* The JSON Schema of fields (an object, additionalProperties false). */
json_t *mcp_fields_schema(const struct mcp_field *fields);
/* Argument getters for checked args: the value, or def when absent. */
const char *mcp_arg_str(const json_t *args, const char *name, const char *def);
int64_t mcp_arg_int(const json_t *args, const char *name, int64_t def);
bool mcp_arg_bool(const json_t *args, const char *name, bool def);

/* A CallToolResult: content (consumed: an array of content blocks), with
 * structured (consumed, may be NULL) as structuredContent where the
 * protocol has it. NULL when out of memory. */
json_t *mcp_result(struct mcp_call *call, json_t *content, json_t *structured, bool is_error);
/* One text content block of a result. */
json_t *mcp_text_block(const char *text);
/* A result whose text is structured (consumed) as JSON, and structuredContent. */
json_t *mcp_result_json(struct mcp_call *call, json_t *structured);
/* A tool's end: *ret = result; 0, or -ENOMEM when result is NULL. */
int mcp_return(json_t **ret, json_t *result);
/* A tool error: isError with the message, which says what to do. */
json_t *mcp_tool_error(struct mcp_call *call, const char *fmt, ...) _printf_(2, 3);
/* A tool error for a failed API call (r < 0, its message in call->ctx.err):
 * what failed, why, and what to do about the usual causes. */
json_t *mcp_api_error(struct mcp_call *call, int r, const char *what);
