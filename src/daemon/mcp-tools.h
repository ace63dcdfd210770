/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The MCP server's tools (mcp-tools.c): the list tools/list answers, and
 * running one by name with its arguments checked. */

#include <jansson.h>

#include "mcp-call.h"

/* The i-th tool as tools/list shows them, or NULL past the last. */
const struct mcp_tool *mcp_tool_at(size_t i);
/* The tool named name, or NULL. */
const struct mcp_tool *mcp_tool_find(const char *name);
/* tools/list's result: {"tools":[{name, title, description, inputSchema, annotations}]}. */
json_t *mcp_tools_list(void);
/* Runs t with args (NULL: {}) checked against its fields: 0 with a
 * CallToolResult in *ret (bad arguments: one with isError naming them), or
 * -ENOMEM. */
int mcp_tool_run(struct mcp_call *call, const struct mcp_tool *t, const json_t *args, json_t **ret);
