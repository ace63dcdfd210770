/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the MCP server's handling of a client's bytes (src/daemon/mcp.c,
 * mcp-call.c): the body of a POST to /v1/mcp as the transport takes it, with
 * the first byte choosing its headers (a session id, a protocol version, an
 * Origin). A tools/call's arguments are checked against the named tool's
 * table (mcp_args_check()) and not run: running a tool is the API's
 * handlers, which need a store and a node. Everything else (initialize,
 * ping, tools/list, notifications, JSON-RPC errors) runs as it would.
 * Every input must be answered or refused with a message; nothing may
 * crash or leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mcp-tools.h"
#include "mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        static struct daemon_config config = { .listen = "127.0.0.1:7420" };
        static atomic_bool stopping;
        uint8_t flags = data[0];
        const char *body = (const char *) data + 1;
        size_t len = size - 1;

        json_t *msg = json_loadb(body, len, 0, NULL);
        const char *method = json_string_value(json_object_get(msg, "method"));
        if (method && strcmp(method, "tools/call") == 0) {
                const json_t *params = json_object_get(msg, "params");
                const struct mcp_tool *t = mcp_tool_find(json_string_value(json_object_get(params, "name")) ?: "");
                char err[API_ERRMSG_MAX];
                for (size_t i = 0; !t && mcp_tool_at(i); i++)
                        if (i == flags % 16)
                                t = mcp_tool_at(i);
                if (t)
                        (void) mcp_args_check(t->fields, json_object_get(params, "arguments"), err);
                json_decref(msg);
                return 0;
        }
        json_decref(msg);

        struct api_ctx ctx = { .config = &config, .stopping = &stopping, .log_ctx = "fuzz", .client_fd = -1 };
        struct mcp_http h = {
                .body = body,
                .body_len = len,
                .session = flags & 1 ? "mcp-0123456789abcdef" : flags & 2 ? "bad id" : NULL,
                .version = flags & 4 ? "2025-06-18" : flags & 8 ? "1999-01-01" : NULL,
                .accept = flags & 16 ? "application/json, text/event-stream" : NULL,
                .origin = flags & 32 ? "http://elsewhere.example" : NULL,
                .host = "127.0.0.1:7420",
        };
        struct api_reply rep = { 0 };
        (void) mcp_http_post(&ctx, &h, &rep);
        api_reply_release(&rep);
        return 0;
}
