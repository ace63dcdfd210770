/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Airlock's MCP server (docs/mcp.md): the Model Context Protocol's
 * streamable HTTP transport at /v1/mcp, which `airlock mcp` also bridges to
 * stdio. JSON-RPC over POST: initialize, ping, tools/list and tools/call
 * (mcp-tools.h), notifications/cancelled; a tool that reports progress and
 * was given a progressToken answers as an event stream (its progress
 * notifications, then the response), anything else as one JSON body. No
 * server-initiated stream (GET is 405). Sessions hold no state: the id
 * initialize hands out only scopes the request ids a cancellation names,
 * so any replica serves any request of a session.
 */

#include <stddef.h>

#include "api-reply.h"

/* The protocol versions served, newest first. */
#define MCP_PROTOCOL_LATEST "2025-11-25"

/* What a POST or DELETE of /v1/mcp carries besides the key (each may be NULL). */
struct mcp_http {
        const char *body;
        size_t body_len;
        const char *session; /* Mcp-Session-Id */
        const char *version; /* MCP-Protocol-Version */
        const char *accept;  /* Accept */
        const char *origin;  /* Origin: a browser's page; must be this server's */
        const char *host;    /* Host */
        const char *proto;   /* X-Forwarded-Proto ("https" behind a TLS proxy) */
};

/* POST /v1/mcp: one JSON-RPC message. Fails (ctx->err set) only for what
 * is wrong with the HTTP request itself (another origin: -EPERM; an
 * unknown protocol version or a malformed session id: -EINVAL); JSON-RPC's
 * errors are replies. */
int mcp_http_post(struct api_ctx *ctx, const struct mcp_http *h, struct api_reply *ret);
/* DELETE /v1/mcp: the session ends; its calls in flight here are cancelled. 204. */
int mcp_http_delete(struct api_ctx *ctx, const struct mcp_http *h, struct api_reply *ret);
/* At shutdown, after the HTTP server stopped: cancels the tool calls in
 * flight and waits up to timeout_s for the threads of event streams,
 * which use the store and the node after their client went. */
void mcp_drain(unsigned timeout_s);
