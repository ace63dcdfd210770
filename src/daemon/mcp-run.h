/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The MCP tools that run something in a sandbox and stream its output
 * (mcp-run.c): a command, code in the code interpreter, and a context of
 * the interpreter. */

#include "mcp-call.h"

extern const struct mcp_tool mcp_tool_run_command;
extern const struct mcp_tool mcp_tool_run_code;
extern const struct mcp_tool mcp_tool_create_code_context;
